/* Status codes and the thread-local error message every fallible call sets. */
#ifndef AUTOCOMPRESS_STATUS_H
#define AUTOCOMPRESS_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_OK = 0,
    AC_ERR_INVALID,     /* bad input: a malformed file, field, argument or request */
    AC_ERR_IO,          /* a file could not be opened, read, mapped or written */
    AC_ERR_NOMEM,       /* an allocation failed */
    AC_ERR_UNSUPPORTED, /* valid input this build or engine cannot handle */
    AC_ERR_DEVICE,      /* an accelerator or its runtime failed */
    AC_ERR_INTERNAL     /* a broken invariant: a bug in autocompress */
} ac_status;

/* Records a printf-style message for this thread and returns `code`, so callers write
 * `return ac_fail(AC_ERR_INVALID, "%s:%d: ...", file, line);`. */
ac_status ac_fail(ac_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "context: " to the current message (for callers that add the file name or
 * the stage) and returns `code`. */
ac_status ac_fail_context(ac_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message of the last failure on this thread ("" when none). */
const char *ac_error_message(void);
void ac_clear_error(void);
const char *ac_status_name(ac_status code);

#ifdef __cplusplus
}
#endif
#endif
