/* The server's text helpers (adapters/server/srv_text.c): UTF-8 sanitising exactly as
 * Python decodes with errors='replace', the complete prefix a stream may send, stop
 * strings found across the boundary of new text, and the bytes a stream holds back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

#define FFFD "\xef\xbf\xbd"

/* ---- srv_utf8_sanitize ---- */

typedef struct {
    const char *in;
    size_t len;
    const char *out; /* b.decode('utf-8', 'replace').encode('utf-8') */
} sanitize_case;

/* The expected outputs were written by Python 3.11:
 *     for b in cases: print(b.decode('utf-8', 'replace').encode('utf-8'))
 * one U+FFFD per maximal subpart of an ill-formed sequence. */
static const sanitize_case SANITIZE[] = {
    {"plain ascii", 11, "plain ascii"},
    {"", 0, ""},
    {"\xe2\x82\xac euro", 8, "\xe2\x82\xac euro"},
    /* 4-byte emoji */
    {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
    {"a\xf0\x9f\x98\x80" "b\xf0\x9f\x8e\x89", 10, "a\xf0\x9f\x98\x80" "b\xf0\x9f\x8e\x89"},
    /* valid at the range boundaries: U+0080, U+07FF, U+0800, U+D7FF, U+FFFF, U+10FFFF */
    {"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf", 17,
     "\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf"},
    /* truncated at the end: one U+FFFD for the whole cut sequence */
    {"\xc3", 1, FFFD},
    {"ab\xe2\x82", 4, "ab" FFFD},
    {"\xf0\x9f\x98", 3, FFFD},
    {"\xf4\x8f\xbf", 3, FFFD},
    {"x\xf0\x9f\x98\x80\xf0\x9f\x98", 8, "x\xf0\x9f\x98\x80" FFFD},
    /* truncated in the middle */
    {"\xc3" "A", 2, FFFD "A"},
    {"\xe2\x82" "A", 3, FFFD "A"},
    {"\xf0\x9f\x98" "A", 4, FFFD "A"},
    {"\xe2" "A\x82", 3, FFFD "A" FFFD},
    {"\xf0\x9f\xe2\x82\xac", 5, FFFD "\xe2\x82\xac"},
    /* overlong forms: the lead byte alone is the maximal subpart */
    {"\xc0\xaf", 2, FFFD FFFD},
    {"\xc1\xbf", 2, FFFD FFFD},
    {"\xe0\x80\xaf", 3, FFFD FFFD FFFD},
    {"\xe0\x9f\xbf", 3, FFFD FFFD FFFD},
    {"\xe0\x9f", 2, FFFD FFFD},
    {"\xf0\x80\x80\xaf", 4, FFFD FFFD FFFD FFFD},
    {"\xf0\x8f\xbf\xbf", 4, FFFD FFFD FFFD FFFD},
    /* surrogates */
    {"\xed\xa0\x80", 3, FFFD FFFD FFFD},
    {"\xed\xbf\xbf", 3, FFFD FFFD FFFD},
    {"\xed\xa0", 2, FFFD FFFD},
    /* above U+10FFFF */
    {"\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD},
    {"\xf4\x90", 2, FFFD FFFD},
    {"\xf5\x80\x80\x80", 4, FFFD FFFD FFFD FFFD},
    {"\xf8\x88\x80\x80\x80", 5, FFFD FFFD FFFD FFFD FFFD},
    {"\xff\xfe", 2, FFFD FFFD},
    /* lone continuation bytes */
    {"\x80", 1, FFFD},
    {"a\x80\xbf" "b", 4, "a" FFFD FFFD "b"},
    {"\xe2\x82\xac\x80", 4, "\xe2\x82\xac" FFFD},
};

static void hex(const char *s, size_t n, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < size; i++)
        o += (size_t)snprintf(out + o, size - o, "%02x ", (unsigned char)s[i]);
    out[o] = 0;
}

static void test_sanitize_table(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof SANITIZE / sizeof SANITIZE[0]; k++) {
        const sanitize_case *c = &SANITIZE[k];
        char *got = srv_utf8_sanitize(c->in, c->len);
        assert_non_null(got);
        if (strcmp(got, c->out)) {
            char a[256], b[256], w[256];
            hex(c->in, c->len, a, sizeof a);
            hex(got, strlen(got), b, sizeof b);
            hex(c->out, strlen(c->out), w, sizeof w);
            free(got);
            fail_msg("sanitize(%s) = %s, want %s", a, b, w);
        }
        free(got);
    }
}

/* Bytes after a NUL still count: the length, not the terminator, bounds the input. */
/* The valid prefix ends where Python's decode puts the first U+FFFD (UnicodeDecodeError's
 * start): the table's outputs say where. */
static void test_valid_prefix_table(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof SANITIZE / sizeof SANITIZE[0]; k++) {
        const sanitize_case *c = &SANITIZE[k];
        size_t p = srv_utf8_valid_prefix(c->in, c->len);
        int unchanged = strlen(c->out) == c->len && !memcmp(c->out, c->in, c->len);
        assert_int_equal(p == c->len, unchanged);
        assert_int_equal(memcmp(c->out, c->in, p), 0);
        if (p < c->len && memcmp(c->out + p, FFFD, 3))
            fail_msg("case %zu: the valid prefix %zu is not where the first U+FFFD goes", k, p);
    }
}

/* \u0000 escapes inside strings, not escaped backslashes, not outside strings. */
static void test_json_nul_escape(void **state)
{
    (void)state;
    static const struct { const char *json; long at; } cases[] = {
        {"{\"p\": \"a\\u0000\"}", 8},
        {"{\"p\": \"\\u0000\"}", 7},
        {"[\"x\", \"\\u0000\"]", 7},
        {"{\"p\": \"a\\\\u0000\"}", -1},        /* an escaped backslash, then text */
        {"{\"p\": \"a\\\\\\u0000\"}", 10},     /* an escaped backslash, then the escape */
        {"{\"p\": \"\\\"\\u0000\"}", 9},       /* an escaped quote does not end the string */
        {"{\"p\": \"\\u00000\"}", 7},
        {"{\"p\": \"\\u0001\\u1000\"}", -1},
        {"{\"p\": \"\\u000\"}", -1},
        {"\\u0000", -1},                           /* outside a string: a syntax error, not a NUL */
        {"", -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        long at = srv_json_nul_escape(cases[k].json, strlen(cases[k].json));
        if (at != cases[k].at)
            fail_msg("%s: %ld, want %ld", cases[k].json, at, cases[k].at);
    }
}

static void test_sanitize_embedded_nul(void **state)
{
    (void)state;
    char *got = srv_utf8_sanitize("a\0\x80" "b", 4);
    assert_non_null(got);
    assert_memory_equal(got, "a\0" FFFD "b", 7); /* with the terminator */
    assert_int_equal(got[5], 'b');
    free(got);
}

/* ---- srv_utf8_complete_prefix ---- */

typedef struct {
    const char *in;
    size_t len;
    size_t prefix;
} prefix_case;

/* A prefix may end after any complete or invalid sequence, never inside a sequence that
 * is still a valid beginning (the byte count Python's incremental decoder keeps pending
 * with decode(b, final=False), except that CPython also buffers ED A0, which is already
 * invalid: a surrogate). */
static const prefix_case PREFIX[] = {
    {"", 0, 0},
    {"abc", 3, 3},
    {"\xe2\x82\xac", 3, 3},
    {"\xf0\x9f\x98\x80", 4, 4},
    {"a\xc3", 2, 1},
    {"a\xe2", 2, 1},
    {"a\xe2\x82", 3, 1},
    {"\xf0\x9f\x98", 3, 0},
    {"\xf0\x9f", 2, 0},
    {"\xf0", 1, 0},
    {"\xf4\x8f\xbf", 3, 0},
    {"\xe2\x82\xac\xf0\x9f", 5, 3},
    {"x\xf0\x9f\x98\x80\xf0\x9f\x98", 8, 5},
    /* invalid sequences are whole: nothing more can make them valid */
    {"a\x80", 2, 2},
    {"\xe2\x82" "A", 3, 3},
    {"\xe0\x9f", 2, 2},
    {"\xed\xa0", 2, 2},
    {"\xf4\x90", 2, 2},
    {"\xf0\x8f", 2, 2},
    {"\xc0", 1, 1},
    {"\xf5", 1, 1},
    {"\xff", 1, 1},
    {"\xf0\x9f\xe2", 3, 2},
};

static void test_complete_prefix_table(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof PREFIX / sizeof PREFIX[0]; k++) {
        const prefix_case *c = &PREFIX[k];
        size_t got = srv_utf8_complete_prefix(c->in, c->len);
        if (got != c->prefix) {
            char a[128];
            hex(c->in, c->len, a, sizeof a);
            fail_msg("complete_prefix(%s) = %zu, want %zu", a, got, c->prefix);
        }
    }
}

/* Random strings over the bytes that matter: the output of sanitize is valid UTF-8 and
 * unchanged by a second pass; the prefix a stream sends is never revised by what comes
 * after it; what a stream holds back is one incomplete sequence. */
static void test_utf8_properties(void **state)
{
    (void)state;
    static const unsigned char alphabet[] = {0x41, 0x00, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2,
                                             0xdf, 0xe0, 0xe2, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff};
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (int iter = 0; iter < 20000; iter++) {
        char b[16], c[8];
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t n = (size_t)(s % 9), m = (size_t)((s >> 8) % 5);
        for (size_t i = 0; i < n + m; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            unsigned char byte = alphabet[(s >> 20) % sizeof alphabet];
            if (i < n)
                b[i] = (char)byte;
            else
                c[i - n] = (char)byte;
        }
        char *clean = srv_utf8_sanitize(b, n);
        size_t clean_len = strlen(clean);
        /* (the alphabet has NUL; only NUL-free outputs are checked by strlen) */
        if (!memchr(b, 0, n)) {
            assert_int_equal(srv_utf8_complete_prefix(clean, clean_len), clean_len);
            char *again = srv_utf8_sanitize(clean, clean_len);
            assert_string_equal(again, clean);
            free(again);
        }
        size_t p = srv_utf8_complete_prefix(b, n);
        assert_true(p <= n);
        assert_true(n - p <= 3);
        if (p < n) {
            char *tail = srv_utf8_sanitize(b + p, n - p);
            assert_string_equal(tail, FFFD);
            free(tail);
        }
        char joined[16];
        memcpy(joined, b, n);
        memcpy(joined + n, c, m);
        char *head = srv_utf8_sanitize(b, p);
        char *whole = srv_utf8_sanitize(joined, n + m);
        size_t head_len = strlen(head);
        if (!memchr(joined, 0, n + m) && (strlen(whole) < head_len || memcmp(whole, head, head_len))) {
            char x[64], y[64];
            hex(b, n, x, sizeof x);
            hex(c, m, y, sizeof y);
            fail_msg("the sent prefix of [%s] changed when [%s] followed", x, y);
        }
        free(head);
        free(whole);
        free(clean);
    }
}

/* ---- srv_find_stop ---- */

static void test_find_stop(void **state)
{
    (void)state;
    char *world[] = {"world"};
    assert_int_equal(srv_find_stop("hello world", 11, 0, world, 1), 6);
    assert_int_equal(srv_find_stop("hello world", 11, 9, world, 1), 6); /* starts before `from`, ends after */
    assert_int_equal(srv_find_stop("hello wor", 9, 0, world, 1), -1);
    assert_int_equal(srv_find_stop("hi", 2, 0, world, 1), -1); /* the stop is longer than the text */

    /* across the boundary: "cde" ends at byte 4, which is new when from <= 4 */
    char *cde[] = {"cde"};
    assert_int_equal(srv_find_stop("abcdef", 6, 4, cde, 1), 2);
    assert_int_equal(srv_find_stop("abcdef", 6, 3, cde, 1), 2);
    assert_int_equal(srv_find_stop("abcdef", 6, 5, cde, 1), -1); /* wholly in the old text */

    /* the earliest occurrence of any stop wins, whatever the order of the list */
    char *several[] = {"three", "tw", "e t"};
    assert_int_equal(srv_find_stop("one two three", 13, 0, several, 3), 2);
    char *reordered[] = {"three", "two"};
    assert_int_equal(srv_find_stop("one two three", 13, 0, reordered, 2), 4);
    char *same_start[] = {"abc", "ab"};
    assert_int_equal(srv_find_stop("xabc", 4, 0, same_start, 2), 1);
    /* the first occurrence of one stop, not a later one */
    char *ab[] = {"ab"};
    assert_int_equal(srv_find_stop("abab", 4, 0, ab, 1), 0);
    assert_int_equal(srv_find_stop("xxabab", 6, 3, ab, 1), 2);

    /* no stops, or only empty ones */
    assert_int_equal(srv_find_stop("abc", 3, 0, NULL, 0), -1);
    char *empty[] = {""};
    assert_int_equal(srv_find_stop("abc", 3, 0, empty, 1), -1);
    char *none[] = {"zz", "yy"};
    assert_int_equal(srv_find_stop("one two three", 13, 0, none, 2), -1);

    /* bytes, not characters: a stop inside a multi-byte character still matches */
    char *euro_tail[] = {"\x82\xac"};
    assert_int_equal(srv_find_stop("a\xe2\x82\xac", 4, 3, euro_tail, 1), 2);
    /* the length bounds the search, not a terminator */
    assert_int_equal(srv_find_stop("hello world", 8, 0, world, 1), -1);
}

/* ---- srv_stop_holdback ---- */

static void test_stop_holdback(void **state)
{
    (void)state;
    char *world[] = {"world"};
    assert_int_equal(srv_stop_holdback("hello wor", 9, world, 1), 3);
    assert_int_equal(srv_stop_holdback("hello w", 7, world, 1), 1);
    assert_int_equal(srv_stop_holdback("hello", 5, world, 1), 0);
    assert_int_equal(srv_stop_holdback("wor", 3, world, 1), 3);
    assert_int_equal(srv_stop_holdback("", 0, world, 1), 0);

    /* the longest proper prefix that ends the text */
    char *abc[] = {"abc"};
    assert_int_equal(srv_stop_holdback("abcab", 5, abc, 1), 2);
    char *aaab[] = {"aaab"};
    assert_int_equal(srv_stop_holdback("xaaa", 4, aaab, 1), 3);
    char *aab[] = {"aab"};
    assert_int_equal(srv_stop_holdback("aaa", 3, aab, 1), 2);
    /* a whole stop at the end is not a prefix of one (srv_find_stop has found it) */
    assert_int_equal(srv_stop_holdback("xabc", 4, abc, 1), 0);

    /* several stops: the most any one of them needs */
    char *two[] = {"xyz", "yz!"};
    assert_int_equal(srv_stop_holdback("ayz", 3, two, 2), 2);
    assert_int_equal(srv_stop_holdback("axy", 3, two, 2), 2);
    assert_int_equal(srv_stop_holdback("axyz", 4, two, 2), 2);
    char *short_long[] = {"q", "the end"};
    assert_int_equal(srv_stop_holdback("in the e", 8, short_long, 2), 5);

    /* nothing to hold without stops */
    assert_int_equal(srv_stop_holdback("abc", 3, NULL, 0), 0);
    char *empty[] = {""};
    assert_int_equal(srv_stop_holdback("abc", 3, empty, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sanitize_table),
        cmocka_unit_test(test_sanitize_embedded_nul),
        cmocka_unit_test(test_valid_prefix_table),
        cmocka_unit_test(test_json_nul_escape),
        cmocka_unit_test(test_complete_prefix_table),
        cmocka_unit_test(test_utf8_properties),
        cmocka_unit_test(test_find_stop),
        cmocka_unit_test(test_stop_holdback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
