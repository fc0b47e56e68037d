/* Byte-level BPE tokenizer: ids identical to Hugging Face `tokenizers` on the fixtures
 * (tests/fixtures/tokenizer, made by generate.py there), round trips, added tokens,
 * malformed files, arbitrary bytes, concurrent use. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/tokenizer.h"

#define FIXTURES AC_SOURCE_DIR "/tests/fixtures/tokenizer"
#define GPT2_JSON AC_SOURCE_DIR "/examples/data/tokenizer.json"
#define LLAMA3_JSON FIXTURES "/llama3_tokenizer.json"

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    buf[len] = '\0';
    *n = (size_t)len;
    return buf;
}

typedef struct {
    char *text;
    size_t len;
} line;

static line *lines;
static size_t line_count;

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static unsigned read_hex4(const char *s)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        assert_true(h >= 0);
        v = v << 4 | (unsigned)h;
    }
    return v;
}

static size_t put_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One JSON string literal spanning s[0..n) (NULs allowed in the value, which cJSON's
 * strings cannot hold). */
static void json_unquote(const char *s, size_t n, line *out)
{
    assert_true(n >= 2 && s[0] == '"' && s[n - 1] == '"');
    char *o = malloc(n + 1);
    assert_non_null(o);
    size_t k = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (s[i] != '\\') {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i];
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case '/': o[k++] = '/'; break;
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case 'u': {
            unsigned cp = read_hex4(s + i + 1);
            i += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && s[i + 1] == '\\' && s[i + 2] == 'u') {
                unsigned lo = read_hex4(s + i + 3);
                i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            k += put_utf8(cp, o + k);
            break;
        }
        default: fail_msg("bad escape \\%c", e);
        }
    }
    o[k] = '\0';
    out->text = o;
    out->len = k;
}

/* Splits a file into its '\n'-terminated lines (in place). */
static size_t split_lines(char *buf, size_t n, char ***out)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += buf[i] == '\n';
    char **v = malloc((count + 1) * sizeof *v);
    assert_non_null(v);
    size_t k = 0;
    char *start = buf;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n') {
            buf[i] = '\0';
            v[k++] = start;
            start = buf + i + 1;
        }
    *out = v;
    return k;
}

static int32_t *parse_ids(const char *s, size_t *count)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    assert_non_null(ids);
    while (*s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        char *end;
        long v = strtol(s, &end, 10);
        assert_true(end != s);
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof *ids);
            assert_non_null(ids);
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    *count = n;
    return ids;
}

static ac_tokenizer *load_ok(const char *path)
{
    ac_tokenizer *tok = NULL;
    ac_status st = ac_tokenizer_load(path, &tok);
    if (st != AC_OK)
        fail_msg("%s: %s", path, ac_error_message());
    return tok;
}

static ac_tokenizer *load_text_ok(const char *json, const char *name)
{
    ac_tokenizer *tok = NULL;
    ac_status st = ac_tokenizer_load_buffer(json, strlen(json), name, &tok);
    if (st != AC_OK)
        fail_msg("%s: %s", name, ac_error_message());
    return tok;
}

static void print_line(const char *label, const line *l)
{
    fprintf(stderr, "  %s (%zu bytes): \"", label, l->len);
    for (size_t i = 0; i < l->len && i < 160; i++) {
        unsigned char c = (unsigned char)l->text[i];
        if (c < 0x20 || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fprintf(stderr, "%s\"\n", l->len > 160 ? "..." : "");
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

/* What decode(encode(text)) must give: the text itself, or, where the tokenizer adds a
 * prefix space, the text with a space in front unless it has one. Lines holding added
 * tokens that strip whitespace (skip_if) are not checked. */
typedef struct {
    int prefix_space;
    const char *skip_if[4];
} roundtrip_rule;

static int roundtrip_ok(const roundtrip_rule *rule, const line *l, const char *text, size_t len)
{
    for (int k = 0; k < 4 && rule->skip_if[k]; k++)
        if (strstr(l->text, rule->skip_if[k]))
            return 1;
    if (rule->prefix_space && (l->len == 0 || l->text[0] != ' '))
        return len == l->len + 1 && text[0] == ' ' && !memcmp(text + 1, l->text, l->len);
    return len == l->len && !memcmp(text, l->text, len);
}

/* Encodes every fixture line, compares with the ids file, and checks the round trip. */
static void check_fixture(const ac_tokenizer *tok, const char *ids_path, const roundtrip_rule *rule)
{
    size_t n;
    char *buf = read_file(ids_path, &n);
    char **rows;
    size_t rows_n = split_lines(buf, n, &rows);
    assert_int_equal(rows_n, line_count);
    size_t mismatches = 0, roundtrip_failures = 0, tokens = 0;
    for (size_t i = 0; i < line_count; i++) {
        size_t want_n, got_n;
        int32_t *want = parse_ids(rows[i], &want_n);
        int32_t *got;
        assert_int_equal(ac_tokenizer_encode(tok, lines[i].text, lines[i].len, &got, &got_n), AC_OK);
        tokens += got_n;
        if (got_n != want_n || (want_n && memcmp(got, want, want_n * sizeof *got))) {
            if (mismatches++ < 5) {
                fprintf(stderr, "%s: line %zu differs\n", ids_path, i + 1);
                print_line("text", &lines[i]);
                print_ids("want", want, want_n);
                print_ids("got ", got, got_n);
            }
        }
        char *text;
        size_t text_len;
        assert_int_equal(ac_tokenizer_decode(tok, got, got_n, &text, &text_len), AC_OK);
        if (!roundtrip_ok(rule, &lines[i], text, text_len)) {
            if (roundtrip_failures++ < 5) {
                fprintf(stderr, "%s: line %zu does not round-trip\n", ids_path, i + 1);
                print_line("text", &lines[i]);
            }
        }
        free(text);
        free(got);
        free(want);
    }
    fprintf(stderr, "%s: %zu lines, %zu tokens, %zu differ, %zu fail the round trip\n", ids_path, line_count,
            tokens, mismatches, roundtrip_failures);
    assert_int_equal(mismatches, 0);
    assert_int_equal(roundtrip_failures, 0);
    assert_true(tokens > line_count * 5);
    free(rows);
    free(buf);
}

static int setup_lines(void **state)
{
    (void)state;
    size_t n;
    char *buf = read_file(FIXTURES "/lines.txt", &n);
    char **rows;
    line_count = split_lines(buf, n, &rows);
    lines = calloc(line_count, sizeof *lines);
    assert_non_null(lines);
    for (size_t i = 0; i < line_count; i++)
        json_unquote(rows[i], strlen(rows[i]), &lines[i]);
    free(rows);
    free(buf);
    return line_count > 4000 ? 0 : -1;
}

static int teardown_lines(void **state)
{
    (void)state;
    for (size_t i = 0; i < line_count; i++)
        free(lines[i].text);
    free(lines);
    return 0;
}

/* examples/data/tokenizer.json with a different pre_tokenizer (NULL: as is) and a patch
 * merged into its model (NULL: none; a "vocab" object in it adds entries). */
static char *gpt2_variant(const cJSON *pre, const cJSON *model_patch)
{
    size_t n;
    char *text = read_file(GPT2_JSON, &n);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    free(text);
    if (pre)
        cJSON_ReplaceItemInObjectCaseSensitive(root, "pre_tokenizer", cJSON_Duplicate(pre, 1));
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    for (const cJSON *p = cJSON_IsObject(model_patch) ? model_patch->child : NULL; p; p = p->next) {
        if (!strcmp(p->string, "vocab")) {
            cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
            for (const cJSON *e = p->child; e; e = e->next)
                cJSON_AddItemToObject(vocab, e->string, cJSON_CreateNumber(e->valuedouble));
        } else {
            cJSON_ReplaceItemInObjectCaseSensitive(model, p->string, cJSON_Duplicate(p, 1));
        }
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    assert_non_null(out);
    return out;
}

/* ---- fixtures ---- */

static void test_gpt2_fixture(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_ok(GPT2_JSON);
    assert_int_equal(ac_tokenizer_vocab_size(tok), 4096);
    static const roundtrip_rule exact = {0, {NULL}};
    check_fixture(tok, FIXTURES "/ids_gpt2.txt", &exact);
    ac_tokenizer_free(tok);
}

static void test_llama3_fixture(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_ok(LLAMA3_JSON);
    static const roundtrip_rule stripping = {0, {"<mask>", "<|eot_id|>", " yes", NULL}};
    check_fixture(tok, FIXTURES "/ids_llama3.txt", &stripping);
    ac_tokenizer_free(tok);
}

static void test_prefix_space_fixture(void **state)
{
    (void)state;
    cJSON *pre = cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                             "\"use_regex\":true}");
    char *json = gpt2_variant(pre, NULL);
    cJSON_Delete(pre);
    ac_tokenizer *tok = load_text_ok(json, "prefix-space");
    free(json);
    /* each piece between added tokens gets its own space: skip the lines with them */
    static const roundtrip_rule prefix = {1, {"<|endoftext|>", "<|pad|>", NULL}};
    check_fixture(tok, FIXTURES "/ids_prefix.txt", &prefix);
    ac_tokenizer_free(tok);
}

/* Every Split behavior, inverted or not, Regex and String patterns; the probe variants'
 * ids are the pre-tokenizer's pieces one by one. */
static void test_split_variants(void **state)
{
    (void)state;
    size_t n;
    char *buf = read_file(FIXTURES "/variants.jsonl", &n);
    char **rows;
    size_t rows_n = split_lines(buf, n, &rows);
    assert_true(rows_n > 800);
    char *current = NULL;
    ac_tokenizer *tok = NULL;
    size_t mismatches = 0, variants = 0, texts = 0;
    int exact_roundtrip = 0;
    for (size_t i = 0; i < rows_n; i++) {
        cJSON *row = cJSON_Parse(rows[i]);
        assert_non_null(row);
        const cJSON *variant = cJSON_GetObjectItemCaseSensitive(row, "variant");
        if (variant) {
            const cJSON *pre = cJSON_GetObjectItemCaseSensitive(variant, "pre_tokenizer");
            const cJSON *patch = cJSON_GetObjectItemCaseSensitive(variant, "model_patch");
            assert_true(cJSON_IsObject(pre));
            ac_tokenizer_free(tok);
            free(current);
            current = cJSON_PrintUnformatted(pre);
            char *json = gpt2_variant(pre, patch);
            tok = load_text_ok(json, current);
            free(json);
            /* Removed drops text, add_prefix_space adds some; the rest must come back whole */
            exact_roundtrip = !strstr(current, "Removed") && !strstr(current, "\"add_prefix_space\":true");
            variants++;
            cJSON_Delete(row);
            continue;
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(row, "text");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(row, "ids");
        assert_true(tok && cJSON_IsString(text) && cJSON_IsArray(want));
        int32_t *got;
        size_t got_n;
        size_t len = strlen(text->valuestring);
        assert_int_equal(ac_tokenizer_encode(tok, text->valuestring, len, &got, &got_n), AC_OK);
        int same = (size_t)cJSON_GetArraySize(want) == got_n;
        size_t k = 0;
        for (const cJSON *w = want->child; w && same; w = w->next, k++)
            same = got[k] == (int32_t)w->valuedouble;
        if (!same && mismatches++ < 5) {
            fprintf(stderr, "variants.jsonl line %zu: %s on \"%s\"\n", i + 1, current, text->valuestring);
            print_ids("got", got, got_n);
        }
        char *back;
        size_t back_len;
        assert_int_equal(ac_tokenizer_decode(tok, got, got_n, &back, &back_len), AC_OK);
        if (exact_roundtrip) {
            assert_int_equal(back_len, len);
            assert_memory_equal(back, text->valuestring, len);
        }
        free(back);
        free(got);
        cJSON_Delete(row);
        texts++;
    }
    fprintf(stderr, "variants.jsonl: %zu pre-tokenizers, %zu texts, %zu differ\n", variants, texts, mismatches);
    assert_int_equal(mismatches, 0);
    assert_true(variants > 40);
    ac_tokenizer_free(tok);
    free(current);
    free(rows);
    free(buf);
}

/* ---- added tokens and the API ---- */

static void expect_ids(const ac_tokenizer *tok, const char *text, const int32_t *want, size_t want_n)
{
    int32_t *got;
    size_t n;
    assert_int_equal(ac_tokenizer_encode(tok, text, strlen(text), &got, &n), AC_OK);
    if (n != want_n || (n && memcmp(got, want, n * sizeof *got))) {
        fprintf(stderr, "encode(\"%s\"):\n", text);
        print_ids("want", want, want_n);
        print_ids("got ", got, n);
        fail();
    }
    free(got);
}

static void test_special_tokens(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_ok(GPT2_JSON);
    int32_t eot = ac_tokenizer_token_to_id(tok, "<|endoftext|>");
    int32_t pad = ac_tokenizer_token_to_id(tok, "<|pad|>");
    assert_int_equal(eot, 0);
    assert_int_equal(pad, 1);
    assert_true(ac_tokenizer_is_special(tok, 0) && ac_tokenizer_is_special(tok, 1));
    assert_false(ac_tokenizer_is_special(tok, 2));
    assert_string_equal(ac_tokenizer_id_to_token(tok, 0), "<|endoftext|>");
    expect_ids(tok, "<|endoftext|>", (int32_t[]){0}, 1);
    expect_ids(tok, "<|pad|><|endoftext|><|pad|>", (int32_t[]){1, 0, 1}, 3);

    /* in the middle of text: the text on each side is encoded on its own */
    int32_t *a, *b, *ab;
    size_t na, nb, nab;
    assert_int_equal(ac_tokenizer_encode(tok, "Hello there", 11, &a, &na), AC_OK);
    assert_int_equal(ac_tokenizer_encode(tok, " world", 6, &b, &nb), AC_OK);
    const char *joined = "Hello there<|endoftext|> world";
    assert_int_equal(ac_tokenizer_encode(tok, joined, strlen(joined), &ab, &nab), AC_OK);
    assert_int_equal(nab, na + 1 + nb);
    assert_memory_equal(ab, a, na * sizeof *a);
    assert_int_equal(ab[na], 0);
    assert_memory_equal(ab + na + 1, b, nb * sizeof *b);
    free(a);
    free(b);
    free(ab);

    /* a near miss is plain text */
    int32_t *miss;
    size_t nmiss;
    assert_int_equal(ac_tokenizer_encode(tok, "<|endoftext|", 12, &miss, &nmiss), AC_OK);
    for (size_t i = 0; i < nmiss; i++)
        assert_int_not_equal(miss[i], 0);
    free(miss);
    ac_tokenizer_free(tok);

    /* added tokens after the vocabulary, lstrip/rstrip, single_word */
    tok = load_ok(LLAMA3_JSON);
    int32_t eot_id = ac_tokenizer_token_to_id(tok, "<|eot_id|>");
    int32_t mask = ac_tokenizer_token_to_id(tok, "<mask>");
    assert_true(eot_id >= 1000 && mask > eot_id);
    assert_int_equal(ac_tokenizer_vocab_size(tok), mask + 5);
    assert_true(ac_tokenizer_is_special(tok, eot_id));
    assert_false(ac_tokenizer_is_special(tok, mask));
    expect_ids(tok, "  <|eot_id|>  ", (int32_t[]){eot_id}, 1); /* lstrip and rstrip take the spaces */
    expect_ids(tok, "<mask>", (int32_t[]){mask}, 1);
    expect_ids(tok, " \t <mask>", (int32_t[]){mask}, 1); /* lstrip */
    int32_t *w;
    size_t nw;
    assert_int_equal(ac_tokenizer_encode(tok, "a<mask>b", 8, &w, &nw), AC_OK); /* single_word */
    for (size_t i = 0; i < nw; i++)
        assert_int_not_equal(w[i], mask);
    free(w);
    ac_tokenizer_free(tok);
}

static void test_api(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_ok(GPT2_JSON);
    int32_t v = ac_tokenizer_vocab_size(tok);
    for (int32_t id = 0; id < v; id++) {
        const char *t = ac_tokenizer_id_to_token(tok, id);
        assert_non_null(t);
        assert_int_equal(ac_tokenizer_token_to_id(tok, t), id);
    }
    assert_null(ac_tokenizer_id_to_token(tok, v));
    assert_null(ac_tokenizer_id_to_token(tok, -1));
    assert_int_equal(ac_tokenizer_token_to_id(tok, "no such token here"), -1);
    int32_t the = ac_tokenizer_token_to_id(tok, "\xc4\xa0the"); /* "Ġthe" */
    assert_true(the > 257);
    expect_ids(tok, " the", &the, 1);

    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    assert_int_equal(ac_tokenizer_encode(tok, "", 0, &ids, &n), AC_OK);
    assert_null(ids);
    assert_int_equal(n, 0);

    /* append: two encodes into one growable array equal their concatenation */
    int32_t *all = NULL;
    size_t count = 0, cap = 0;
    assert_int_equal(ac_tokenizer_encode_append(tok, "first part.", 11, &all, &count, &cap), AC_OK);
    size_t first = count;
    assert_int_equal(ac_tokenizer_encode_append(tok, " second part.", 13, &all, &count, &cap), AC_OK);
    assert_true(count > first && cap >= count);
    char *text;
    size_t len;
    assert_int_equal(ac_tokenizer_decode(tok, all, count, &text, &len), AC_OK);
    assert_string_equal(text, "first part. second part.");
    assert_int_equal(len, 24);
    free(text);
    free(all);

    int32_t bad[] = {5, v, 7};
    assert_int_equal(ac_tokenizer_decode(tok, bad, 3, &text, &len), AC_ERR_INVALID);
    assert_null(text);
    assert_non_null(strstr(ac_error_message(), "ids[1]"));
    int32_t neg = -3;
    assert_int_equal(ac_tokenizer_decode(tok, &neg, 1, &text, NULL), AC_ERR_INVALID);
    assert_int_equal(ac_tokenizer_decode(tok, NULL, 0, &text, &len), AC_OK);
    assert_string_equal(text, "");
    free(text);
    ac_tokenizer_free(tok);
}

/* ---- small hand-made tokenizers: unknown bytes, malformed files ---- */

#define T_ADDED "[{\"id\":0,\"content\":\"<s>\",\"special\":true,\"normalized\":false}]"
#define T_NORM "null"
#define T_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"
#define T_DEC "{\"type\":\"ByteLevel\"}"
#define T_MODEL(vocab, merges, extra) \
    "{\"type\":\"BPE\",\"vocab\":" vocab ",\"merges\":" merges extra "}"
#define T_VOCAB "{\"<s>\":0,\"a\":1,\"b\":2,\"ab\":3}"
#define T_MERGES "[\"a b\"]"
#define T_JSON(added, norm, pre, dec, model) \
    "{\"added_tokens\":" added ",\"normalizer\":" norm ",\"pre_tokenizer\":" pre ",\"decoder\":" dec \
    ",\"model\":" model "}"
#define T_BASE T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, ""))

static void test_small_tokenizers(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_text_ok(T_BASE, "small");
    assert_int_equal(ac_tokenizer_vocab_size(tok), 4);
    expect_ids(tok, "ab", (int32_t[]){3}, 1);
    expect_ids(tok, "abab<s>", (int32_t[]){3, 3, 0}, 3);
    expect_ids(tok, "c", NULL, 0);          /* no symbol, no unk_token: dropped */
    expect_ids(tok, "acb", (int32_t[]){3}, 1); /* then a and b meet */
    expect_ids(tok, "a c b", (int32_t[]){1, 2}, 2);
    ac_tokenizer_free(tok);

    /* the same with [a, b] pairs */
    tok = load_text_ok(T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[[\"a\",\"b\"]]", "")), "pairs");
    expect_ids(tok, "abab<s>", (int32_t[]){3, 3, 0}, 3);
    ac_tokenizer_free(tok);

#define T_UNK_VOCAB "{\"<s>\":0,\"a\":1,\"b\":2,\"ab\":3,\"<unk>\":4}"
    tok = load_text_ok(T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC,
                              T_MODEL(T_UNK_VOCAB, T_MERGES, ",\"unk_token\":\"<unk>\",\"fuse_unk\":false")),
                       "unk");
    expect_ids(tok, "acccb", (int32_t[]){1, 4, 4, 4, 2}, 5);
    expect_ids(tok, "cc", (int32_t[]){4, 4}, 2);
    ac_tokenizer_free(tok);
    tok = load_text_ok(T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC,
                              T_MODEL(T_UNK_VOCAB, T_MERGES, ",\"unk_token\":\"<unk>\",\"fuse_unk\":true")),
                       "fused-unk");
    expect_ids(tok, "acccb", (int32_t[]){1, 4, 2}, 3);
    expect_ids(tok, "cc", (int32_t[]){4}, 1);
    ac_tokenizer_free(tok);
}

typedef struct {
    const char *json;
    ac_status want;
    const char *needle1, *needle2; /* must appear in the message */
} bad_case;

static void test_malformed(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {", AC_ERR_INVALID, "malformed JSON", "bad.json:1:"},
        {"{\n\"model\": [1, 2,,]\n}", AC_ERR_INVALID, "malformed JSON", "bad.json:2:"},
        {"[1, 2]", AC_ERR_INVALID, "top", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, "{\"type\":\"WordPiece\",\"vocab\":" T_VOCAB "}"), AC_ERR_UNSUPPORTED,
         "model.type", "WordPiece"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[\"a c\"]", "")), AC_ERR_INVALID,
         "model.merges[0]", "\"c\" is not in model.vocab"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[\"a b\", [\"zz\", \"a\"]]", "")), AC_ERR_INVALID,
         "model.merges[1]", "\"zz\""},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL("{\"<s>\":0,\"a\":1,\"b\":2}", T_MERGES, "")),
         AC_ERR_INVALID, "model.merges[0]", "merged token \"ab\""},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[\"ab\"]", "")), AC_ERR_INVALID,
         "model.merges[0]", "two tokens"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[[\"a\", \"b\", \"c\"]]", "")), AC_ERR_INVALID,
         "model.merges[0]", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, "{\"type\":\"BPE\",\"merges\":[]}"), AC_ERR_INVALID,
         "model.vocab: missing", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, "{\"type\":\"BPE\",\"vocab\":" T_VOCAB "}"), AC_ERR_INVALID,
         "model.merges: missing", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL("{\"a\":1.5}", "[]", "")), AC_ERR_INVALID,
         "model.vocab[\"a\"]", "1.5"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL("{\"a\":\"x\"}", "[]", "")), AC_ERR_INVALID,
         "model.vocab[\"a\"]", "a string"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL("{\"<s>\":0,\"a\":1,\"b\":1}", "[]", "")), AC_ERR_INVALID,
         "id 1", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, ",\"dropout\":0.1")),
         AC_ERR_UNSUPPORTED, "model.dropout", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, ",\"byte_fallback\":true")),
         AC_ERR_UNSUPPORTED, "model.byte_fallback", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, ",\"unk_token\":\"<unk>\"")),
         AC_ERR_INVALID, "model.unk_token", "<unk>"},
        {T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, ",\"continuing_subword_prefix\":\"##\"")),
         AC_ERR_UNSUPPORTED, "model.continuing_subword_prefix", NULL},
        {T_JSON(T_ADDED, "{\"type\":\"NFC\"}", T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")), AC_ERR_UNSUPPORTED,
         "normalizer", "NFC"},
        {T_JSON(T_ADDED, T_NORM, "{\"type\":\"Whitespace\"}", T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_UNSUPPORTED, "pre_tokenizer.type", "Whitespace"},
        {T_JSON(T_ADDED, T_NORM, "null", T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")), AC_ERR_UNSUPPORTED,
         "pre_tokenizer", NULL},
        {T_JSON(T_ADDED, T_NORM,
                "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},"
                "\"behavior\":\"Isolated\",\"invert\":false}," T_PRE "]}",
                T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "pre_tokenizer.pretokenizers[0].pattern.Regex", "compile"},
        {T_JSON(T_ADDED, T_NORM,
                "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                "\"behavior\":\"Sideways\",\"invert\":false}," T_PRE "]}",
                T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "pre_tokenizer.pretokenizers[0].behavior", "Sideways"},
        {T_JSON(T_ADDED, T_NORM,
                "{\"type\":\"Sequence\",\"pretokenizers\":[" T_PRE ",{\"type\":\"Split\",\"pattern\":"
                "{\"String\":\"a\"},\"behavior\":\"Isolated\",\"invert\":false}]}",
                T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]", "after ByteLevel"},
        {T_JSON(T_ADDED, T_NORM, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                                 "{\"String\":\"a\"},\"behavior\":\"Isolated\",\"invert\":false}]}",
                T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_UNSUPPORTED, "no ByteLevel", NULL},
        {T_JSON(T_ADDED, T_NORM, T_PRE, "{\"type\":\"WordPiece\"}", T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_UNSUPPORTED, "decoder.type", NULL},
        {T_JSON("[{\"id\":7,\"content\":\"a\",\"special\":true}]", T_NORM, T_PRE, T_DEC,
                T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "added_tokens[0]", "model.vocab has \"a\" as 1"},
        {T_JSON("[{\"id\":2,\"content\":\"<t>\",\"special\":true}]", T_NORM, T_PRE, T_DEC,
                T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "added_tokens[0]", "id 2"},
        {T_JSON("[{\"content\":\"<t>\"}]", T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")), AC_ERR_INVALID,
         "added_tokens[0].id: missing", NULL},
        {T_JSON("[{\"id\":9,\"content\":\"\"}]", T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "added_tokens[0].content", NULL},
        {T_JSON("[{\"id\":9,\"content\":\"<t>\",\"lstrip\":\"yes\"}]", T_NORM, T_PRE, T_DEC,
                T_MODEL(T_VOCAB, T_MERGES, "")),
         AC_ERR_INVALID, "added_tokens[0].lstrip", "boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        ac_tokenizer *tok = (ac_tokenizer *)1;
        ac_status st = ac_tokenizer_load_buffer(c->json, strlen(c->json), "bad.json", &tok);
        const char *msg = ac_error_message();
        if (st != c->want || tok || strncmp(msg, "bad.json", 8) || !strstr(msg, c->needle1) ||
            (c->needle2 && !strstr(msg, c->needle2)))
            fail_msg("case %zu: status %s, message \"%s\"; want %s with \"%s\" and \"%s\"", i, ac_status_name(st),
                     msg, ac_status_name(c->want), c->needle1, c->needle2 ? c->needle2 : "");
    }

    /* through a file: missing file, then a bad one named in the message */
    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load("/nonexistent/tokenizer.json", &tok), AC_ERR_IO);
    assert_non_null(strstr(ac_error_message(), "/nonexistent/tokenizer.json"));
    char path[] = "/tmp/ac_tok_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = T_JSON(T_ADDED, T_NORM, T_PRE, T_DEC, T_MODEL(T_VOCAB, "[\"a q\"]", ""));
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(ac_tokenizer_load(path, &tok), AC_ERR_INVALID);
    assert_null(tok);
    assert_non_null(strstr(ac_error_message(), path));
    assert_non_null(strstr(ac_error_message(), "model.merges[0]"));
    unlink(path);
}

/* ---- arbitrary bytes ---- */

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void roundtrip_bytes(const ac_tokenizer *tok, const unsigned char *buf, size_t n)
{
    int32_t *ids;
    size_t count;
    assert_int_equal(ac_tokenizer_encode(tok, (const char *)buf, n, &ids, &count), AC_OK);
    int32_t v = ac_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < count; i++)
        assert_true(ids[i] >= 0 && ids[i] < v);
    char *back;
    size_t len;
    assert_int_equal(ac_tokenizer_decode(tok, ids, count, &back, &len), AC_OK);
    assert_int_equal(len, n);
    if (n)
        assert_memory_equal(back, buf, n);
    free(back);
    free(ids);
}

static void test_random_bytes(void **state)
{
    (void)state;
    const char *paths[] = {GPT2_JSON, LLAMA3_JSON};
    static const unsigned char pieces[][4] = {
        {0xc3, 0xa9}, {0xe6, 0x97, 0xa5}, {0xf0, 0x9f, 0x98, 0x80}, /* é 日 😀 */
        {0xc0, 0xaf}, {0xed, 0xa0, 0x80}, {0xf5, 0x80}, {0xe6, 0x97}, {0x80}, {0xff}, {0xc2, 0x85}, {' '}, {'a'},
        {'\''}, {'<'}, {'\n'}, {'9'},
    };
    unsigned char *buf = malloc(5000);
    assert_non_null(buf);
    for (int t = 0; t < 2; t++) {
        ac_tokenizer *tok = load_ok(paths[t]);
        for (int round = 0; round < 300; round++) {
            size_t n = (size_t)(rng() % 3000);
            if (round % 2) { /* uniform bytes */
                for (size_t i = 0; i < n; i++)
                    buf[i] = (unsigned char)rng();
            } else { /* valid, broken and truncated UTF-8 mixed with text */
                size_t k = 0;
                while (k + 4 < n) {
                    const unsigned char *p = pieces[rng() % (sizeof pieces / sizeof pieces[0])];
                    size_t l = 1;
                    while (l < 4 && p[l])
                        l++;
                    memcpy(buf + k, p, l);
                    k += l;
                }
                n = k;
            }
            roundtrip_bytes(tok, buf, n);
        }
        /* every single byte, and a long run of one */
        for (int b = 0; b < 256; b++) {
            unsigned char c = (unsigned char)b;
            roundtrip_bytes(tok, &c, 1);
        }
        memset(buf, 0xff, 5000);
        roundtrip_bytes(tok, buf, 5000);
        memset(buf, ' ', 5000);
        roundtrip_bytes(tok, buf, 5000);
        ac_tokenizer_free(tok);
    }
    free(buf);
}

/* ---- two threads on one tokenizer ---- */

typedef struct {
    const ac_tokenizer *tok;
    size_t start;
    uint64_t checksum;
    int failed;
} thread_job;

static void *encode_all(void *arg)
{
    thread_job *job = arg;
    for (size_t k = 0; k < line_count; k++) {
        size_t i = (job->start + k) % line_count;
        int32_t *ids;
        size_t n;
        if (ac_tokenizer_encode(job->tok, lines[i].text, lines[i].len, &ids, &n) != AC_OK) {
            job->failed = 1;
            return NULL;
        }
        uint64_t h = i * 0x9e3779b97f4a7c15ULL;
        for (size_t j = 0; j < n; j++)
            h = (h ^ (uint64_t)ids[j]) * 0x100000001b3ULL;
        job->checksum += h; /* order-free: each thread starts elsewhere */
        free(ids);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    ac_tokenizer *tok = load_ok(GPT2_JSON);
    thread_job ref = {.tok = tok};
    encode_all(&ref);
    ac_tokenizer_free(tok);
    tok = load_ok(GPT2_JSON); /* a cold cache again */
    thread_job jobs[3] = {{tok, 0, 0, 0}, {tok, line_count / 3, 0, 0}, {tok, 2 * line_count / 3, 0, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_false(jobs[i].failed);
        assert_true(jobs[i].checksum == ref.checksum);
    }
    ac_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_fixture),
        cmocka_unit_test(test_llama3_fixture),
        cmocka_unit_test(test_prefix_space_fixture),
        cmocka_unit_test(test_split_variants),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_small_tokenizers),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup_lines, teardown_lines);
}
