#include "autocompress/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { AC_ERROR_MESSAGE_MAX = 1024 };

static _Thread_local char error_message[AC_ERROR_MESSAGE_MAX];

ac_status ac_fail(ac_status code, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, args);
    va_end(args);
    return code;
}

ac_status ac_fail_context(ac_status code, const char *fmt, ...)
{
    char context[AC_ERROR_MESSAGE_MAX];
    va_list args;
    va_start(args, fmt);
    vsnprintf(context, sizeof context, fmt, args);
    va_end(args);

    /* Shift the old message right and put "context: " before it; a message longer than
     * the buffer keeps its beginning, which names the place. */
    size_t context_len = strlen(context);
    size_t old_len = strlen(error_message);
    size_t prefix_len = old_len ? context_len + 2 : context_len;
    if (prefix_len >= AC_ERROR_MESSAGE_MAX)
        prefix_len = AC_ERROR_MESSAGE_MAX - 1;
    size_t keep = old_len;
    if (prefix_len + keep >= AC_ERROR_MESSAGE_MAX)
        keep = AC_ERROR_MESSAGE_MAX - 1 - prefix_len;
    memmove(error_message + prefix_len, error_message, keep);
    error_message[prefix_len + keep] = '\0';
    memcpy(error_message, context, prefix_len < context_len ? prefix_len : context_len);
    if (old_len && prefix_len == context_len + 2)
        memcpy(error_message + context_len, ": ", 2);
    return code;
}

const char *ac_error_message(void) { return error_message; }

void ac_clear_error(void) { error_message[0] = '\0'; }

const char *ac_status_name(ac_status code)
{
    switch (code) {
    case AC_OK: return "ok";
    case AC_ERR_INVALID: return "invalid input";
    case AC_ERR_IO: return "i/o error";
    case AC_ERR_NOMEM: return "out of memory";
    case AC_ERR_UNSUPPORTED: return "unsupported";
    case AC_ERR_DEVICE: return "device error";
    case AC_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
