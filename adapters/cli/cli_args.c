#include "cli_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

ac_status cli_parse_ids(const char *text, int32_t **ids, int *count)
{
    size_t n = 1;
    for (const char *p = text; *p; p++)
        n += *p == ',';
    int32_t *out = malloc(n * sizeof *out);
    if (!out)
        return ac_fail(AC_ERR_NOMEM, "--ids: out of memory");
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || errno || v < 0 || v > INT32_MAX) {
            free(out);
            return ac_fail(AC_ERR_INVALID, "--ids: item %zu ('%.*s') is not a token id (a non-negative integer)", i + 1,
                           (int)strcspn(p, ","), p);
        }
        out[i] = (int32_t)v;
        p = end + (*end == ',');
    }
    *ids = out;
    *count = (int)n;
    return AC_OK;
}

ac_status cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *value)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max)
        return ac_fail(AC_ERR_INVALID, "%s: '%s' is not an integer in [%lld, %lld]", flag, text, min, max);
    *value = v;
    return AC_OK;
}

ac_status cli_parse_float(const char *flag, const char *text, double *value)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno)
        return ac_fail(AC_ERR_INVALID, "%s: '%s' is not a number", flag, text);
    *value = v;
    return AC_OK;
}

const char *cli_flag_value(int argc, char **argv, int *i, const char *flag, int *missing)
{
    size_t len = strlen(flag);
    const char *arg = argv[*i];
    if (strncmp(arg, flag, len) != 0)
        return NULL;
    if (arg[len] == '=')
        return arg + len + 1;
    if (arg[len] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}
