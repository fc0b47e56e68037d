/* A guard against libconfig 1.5 wrapping large integers: "4180000000" without the L
 * suffix is read as -114967296 with no error. This scanner walks the text the way
 * libconfig's lexer does (strings, three comment styles, names, numbers) and rejects any
 * plain integer literal that does not fit 32 bits. */
#include "contract/contract_internal.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

static bool is_digit(char c) { return isdigit((unsigned char)c) != 0; }
static bool is_xdigit(char c) { return isxdigit((unsigned char)c) != 0; }
static bool is_name_start(char c) { return isalpha((unsigned char)c) || c == '*'; }
static bool is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '*' || c == '_' || c == '-';
}

/* Digits [d, end) with leading zeros dropped: does the magnitude exceed `limit` (a
 * string of decimal digits without leading zeros)? */
static bool decimal_exceeds(const char *d, const char *end, const char *limit)
{
    while (d < end - 1 && *d == '0')
        d++;
    size_t n = (size_t)(end - d), ln = strlen(limit);
    if (n != ln)
        return n > ln;
    return strncmp(d, limit, n) > 0;
}

static ac_status too_big(const char *file, int line, const char *start, const char *end)
{
    int len = (int)(end - start);
    if (len > 40)
        len = 40;
    return ac_fail(AC_ERR_INVALID,
                   "%s:%d: integer %.*s does not fit in 32 bits; write it as %.*sL for a "
                   "64-bit integer",
                   file, line, len, start, len, start);
}

ac_status ac_contract_check_int_literals(const char *text, const char *file)
{
    int line = 1;
    const char *p = text;

    while (*p) {
        char c = *p;
        if (c == '\n') {
            line++;
            p++;
        } else if (c == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (*p == '\n')
                    line++;
            }
            if (*p)
                p++;
        } else if (c == '#' || (c == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                p++;
        } else if (c == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                if (*p == '\n')
                    line++;
            if (*p)
                p += 2;
        } else if (is_name_start(c) || c == '@') {
            for (p++; is_name_char(*p); p++)
                ;
        } else if (is_digit(c) || ((c == '-' || c == '+' || c == '.') && is_digit(p[1]))) {
            const char *start = p;
            bool negative = c == '-';
            if (c == '-' || c == '+')
                p++;
            if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
                const char *d = p + 2;
                for (p = d; is_xdigit(*p); p++)
                    ;
                const char *end = p;
                if (*p == 'L') {
                    p += p[1] == 'L' ? 2 : 1;
                    continue;
                }
                while (d < end - 1 && *d == '0')
                    d++;
                if (end - d > 8)
                    return too_big(file, line, start, end);
                continue;
            }
            const char *d = p;
            while (is_digit(*p))
                p++;
            const char *end = p;
            if (*p == '.' || *p == 'e' || *p == 'E') {
                /* a float: consume the rest of it */
                for (; *p; p++) {
                    if (is_digit(*p) || *p == '.' || *p == 'e' || *p == 'E')
                        continue;
                    if ((*p == '-' || *p == '+') && (p[-1] == 'e' || p[-1] == 'E'))
                        continue;
                    break;
                }
                continue;
            }
            if (*p == 'L') {
                p += p[1] == 'L' ? 2 : 1;
                continue;
            }
            if (decimal_exceeds(d, end, negative ? "2147483648" : "2147483647"))
                return too_big(file, line, start, end);
        } else {
            p++;
        }
    }
    return AC_OK;
}
