/* A small leveled logger writing to stderr. The level comes from ac_log_set_level or,
 * at first use, from the AC_LOG_LEVEL environment variable (debug, info, warn, error). */
#ifndef AUTOCOMPRESS_LOG_H
#define AUTOCOMPRESS_LOG_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AC_LOG_DEBUG = 0, AC_LOG_INFO, AC_LOG_WARN, AC_LOG_ERROR, AC_LOG_OFF } ac_log_level;

void ac_log_set_level(ac_log_level level);
ac_log_level ac_log_get_level(void);
/* Redirects the log (tests); NULL restores stderr. */
void ac_log_set_stream(FILE *stream);
/* Parses "debug", "info", "warn", "error" or "off"; returns -1 when unknown. */
int ac_log_level_from_name(const char *name);

void ac_log(ac_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ac_debug(...) ac_log(AC_LOG_DEBUG, __VA_ARGS__)
#define ac_info(...) ac_log(AC_LOG_INFO, __VA_ARGS__)
#define ac_warn(...) ac_log(AC_LOG_WARN, __VA_ARGS__)
#define ac_error(...) ac_log(AC_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
