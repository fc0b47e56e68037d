/* Text helpers for responses: byte-level tokens may end inside a UTF-8 character, and
 * JSON needs valid UTF-8, so streams hold an incomplete character back and final texts
 * replace invalid bytes with U+FFFD (as Python's decode does). Stop strings are matched
 * on the bytes. */
#include "server/srv.h"

#include <stdlib.h>
#include <string.h>

/* The UTF-8 sequence at s[0..len): its length (1..4) when valid, 0 when s is a valid
 * sequence cut short by the end, or -k when invalid, k being its maximal subpart (the
 * lead byte and the continuation bytes that were still acceptable), which is what one
 * U+FFFD replaces, as Python and the Unicode standard's practice do. */
static int utf8_sequence(const unsigned char *s, size_t len)
{
    unsigned c = s[0];
    int n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4;
    else
        return -1;
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len)
            return 0;
        /* the second byte's range excludes overlong forms, surrogates and > U+10FFFF */
        unsigned lo = 0x80, hi = 0xbf;
        if (i == 1 && c == 0xe0)
            lo = 0xa0;
        else if (i == 1 && c == 0xed)
            hi = 0x9f;
        else if (i == 1 && c == 0xf0)
            lo = 0x90;
        else if (i == 1 && c == 0xf4)
            hi = 0x8f;
        if (s[i] < lo || s[i] > hi)
            return -i;
    }
    return n;
}

size_t srv_utf8_complete_prefix(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        int n = utf8_sequence(s + i, len - i);
        if (n == 0)
            return i;
        i += (size_t)(n > 0 ? n : -n);
    }
    return len;
}

size_t srv_utf8_valid_prefix(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    for (int n; i < len && (n = utf8_sequence(s + i, len - i)) > 0;)
        i += (size_t)n;
    return i;
}

/* The string escape at s[0..len) (s[0] is the backslash) is \u0000. */
static int is_nul_escape(const char *s, size_t len) { return len >= 6 && !memcmp(s, "\\u0000", 6); }

long srv_json_nul_escape(const char *text, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '"')
            in_string = !in_string;
        else if (in_string && text[i] == '\\') {
            if (is_nul_escape(text + i, len - i))
                return (long)i;
            i++; /* the escaped character (a quote or a backslash) is not the string's end */
        }
    }
    return -1;
}

char *srv_utf8_sanitize(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    char *out = malloc(3 * len + 1); /* each invalid byte becomes 3 bytes */
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int n = utf8_sequence(s + i, len - i);
        if (n > 0) {
            memcpy(out + o, s + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += n < 0 ? (size_t)-n : len - i; /* a sequence cut short by the end is one */
        }
    }
    out[o] = 0;
    return out;
}

long srv_find_stop(const char *text, size_t len, size_t from, char *const *stop, int n_stop)
{
    long best = -1;
    for (int k = 0; k < n_stop; k++) {
        size_t n = strlen(stop[k]);
        if (n == 0 || n > len)
            continue;
        size_t start = from >= n - 1 ? from - (n - 1) : 0;
        for (size_t i = start; i + n <= len; i++) {
            if (best >= 0 && (long)i >= best)
                break;
            if (!memcmp(text + i, stop[k], n)) {
                best = (long)i;
                break;
            }
        }
    }
    return best;
}

size_t srv_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop)
{
    size_t hold = 0;
    for (int k = 0; k < n_stop; k++) {
        size_t n = strlen(stop[k]);
        /* the longest proper prefix of the stop string that ends the text */
        for (size_t m = n > 0 ? n - 1 : 0; m > hold; m--)
            if (m <= len && !memcmp(text + len - m, stop[k], m)) {
                hold = m;
                break;
            }
    }
    return hold;
}
