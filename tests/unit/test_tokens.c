/* Token shards: write/read round trips, header errors, the train/val split, the corpus
 * tokenizer's outputs, the deterministic batch sampler and the evaluation windows. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/tokenizer.h"
#include "autocompress/tokens.h"

#define GPT2_JSON AC_SOURCE_DIR "/examples/data/tokenizer.json"

static char tmpdir[64];

static void tpath(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    buf[len] = 0;
    *n = (size_t)len;
    return buf;
}

static void write_shard(const char *path, uint32_t vocab, const int32_t *ids, size_t n)
{
    ac_tokens_writer *w;
    assert_int_equal(ac_tokens_writer_open(path, vocab, &w), AC_OK);
    assert_int_equal(ac_tokens_writer_append(w, ids, n), AC_OK);
    assert_int_equal(ac_tokens_writer_count(w), n);
    assert_int_equal(ac_tokens_writer_close(w), AC_OK);
}

static ac_tokens *open_ok(const char *path)
{
    ac_tokens *t;
    if (ac_tokens_open(path, &t) != AC_OK)
        fail_msg("%s", ac_error_message());
    return t;
}

/* ---- format ---- */

static void test_roundtrip(void **state)
{
    (void)state;
    enum { N = 100003 };
    int32_t *ids = malloc(N * sizeof *ids), *back = malloc(N * sizeof *back);
    assert_non_null(ids);
    assert_non_null(back);
    const uint32_t vocabs[] = {4096, 65536, 65537, 200000};
    for (int v = 0; v < 4; v++) {
        for (int i = 0; i < N; i++)
            ids[i] = (int32_t)(((uint64_t)i * 2654435761u) % vocabs[v]);
        ids[0] = (int32_t)vocabs[v] - 1;
        char path[128];
        tpath(path, sizeof path, "round.bin");
        /* written in two appends */
        ac_tokens_writer *w;
        assert_int_equal(ac_tokens_writer_open(path, vocabs[v], &w), AC_OK);
        assert_int_equal(ac_tokens_writer_append(w, ids, 1000), AC_OK);
        assert_int_equal(ac_tokens_writer_append(w, ids + 1000, N - 1000), AC_OK);
        assert_int_equal(ac_tokens_writer_close(w), AC_OK);

        size_t size;
        unsigned char *raw = read_bytes(path, &size);
        uint32_t width = vocabs[v] <= 65536 ? 2 : 4;
        assert_int_equal(size, 32 + (size_t)N * width);
        assert_memory_equal(raw, "ACTOKENS", 8);
        assert_int_equal(raw[8], 1);
        assert_int_equal(raw[12] | raw[13] << 8 | raw[14] << 16 | raw[15] << 24, (int)vocabs[v]);
        assert_int_equal(raw[16] | raw[17] << 8 | raw[18] << 16, N);
        assert_int_equal(raw[24], width);
        assert_int_equal(raw[32] | raw[33] << 8, ids[0] & 0xffff); /* little-endian ids */
        free(raw);

        ac_tokens *t = open_ok(path);
        assert_int_equal(ac_tokens_count(t), N);
        assert_int_equal(ac_tokens_vocab_size(t), vocabs[v]);
        assert_string_equal(ac_tokens_path(t), path);
        for (int i = 0; i < N; i += 997)
            assert_int_equal(ac_tokens_get(t, (uint64_t)i), ids[i]);
        assert_int_equal(ac_tokens_get(t, N), -1);
        assert_int_equal(ac_tokens_copy(t, 0, N, back), AC_OK);
        assert_memory_equal(back, ids, N * sizeof *ids);
        assert_int_equal(ac_tokens_copy(t, N - 5, 5, back), AC_OK);
        assert_int_equal(ac_tokens_copy(t, N - 5, 6, back), AC_ERR_INVALID);
        assert_int_equal(ac_tokens_copy(t, N + 1, 0, back), AC_ERR_INVALID);
        ac_tokens_close(t);
    }
    /* an empty shard is valid */
    char path[128];
    tpath(path, sizeof path, "empty.bin");
    write_shard(path, 10, NULL, 0);
    ac_tokens *t = open_ok(path);
    assert_int_equal(ac_tokens_count(t), 0);
    assert_int_equal(ac_tokens_window_count(t, 4), 0);
    ac_tokens_close(t);
    free(ids);
    free(back);
}

static void test_writer_errors(void **state)
{
    (void)state;
    char path[128], tmp[140];
    tpath(path, sizeof path, "w.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    ac_tokens_writer *w;
    assert_int_equal(ac_tokens_writer_open(path, 0, &w), AC_ERR_INVALID);
    assert_int_equal(ac_tokens_writer_open(path, 100, &w), AC_OK);
    int32_t bad[] = {1, 2, 100};
    assert_int_equal(ac_tokens_writer_append(w, bad, 3), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "id 100"));
    int32_t neg = -1;
    assert_int_equal(ac_tokens_writer_append(w, &neg, 1), AC_ERR_INVALID);
    assert_int_equal(ac_tokens_writer_count(w), 0);
    assert_int_equal(access(tmp, F_OK), 0); /* in progress under .tmp, not in place yet */
    assert_int_not_equal(access(path, F_OK), 0);
    ac_tokens_writer_abort(w);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_equal(ac_tokens_writer_open("/nonexistent/dir/x.bin", 100, &w), AC_ERR_IO);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A shard made by hand: header fields, then `ids_bytes` bytes of id 1s. */
static void craft(const char *path, const char *magic, uint32_t version, uint32_t vocab, uint64_t count,
                  uint32_t width, uint32_t reserved, size_t ids_bytes)
{
    unsigned char *buf = calloc(1, 32 + ids_bytes);
    assert_non_null(buf);
    memcpy(buf, magic, 8);
    put32(buf + 8, version);
    put32(buf + 12, vocab);
    put32(buf + 16, (uint32_t)count);
    put32(buf + 20, (uint32_t)(count >> 32));
    put32(buf + 24, width);
    put32(buf + 28, reserved);
    for (size_t i = 0; i < ids_bytes; i += 2)
        buf[32 + i] = 1;
    write_bytes(path, buf, 32 + ids_bytes);
    free(buf);
}

static void expect_open_error(const char *path, ac_status want, const char *needle)
{
    ac_tokens *t = (ac_tokens *)1;
    ac_status st = ac_tokens_open(path, &t);
    if (st != want || t || !strstr(ac_error_message(), needle) || !strstr(ac_error_message(), path))
        fail_msg("%s: status %s, message \"%s\"; want %s with \"%s\"", path, ac_status_name(st), ac_error_message(),
                 ac_status_name(want), needle);
}

static void test_header_errors(void **state)
{
    (void)state;
    char path[128];
    tpath(path, sizeof path, "bad.bin");
    craft(path, "ACTOKENS", 1, 100, 10, 2, 0, 20);
    ac_tokens_close(open_ok(path)); /* the baseline is good */

    craft(path, "ACTOKENZ", 1, 100, 10, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "bad magic");
    craft(path, "ACTOKENS", 2, 100, 10, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "version 2");
    craft(path, "ACTOKENS", 1, 100, 11, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "truncated");
    craft(path, "ACTOKENS", 1, 100, 9, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "count mismatch");
    craft(path, "ACTOKENS", 1, 100, 10, 2, 0, 21);
    expect_open_error(path, AC_ERR_INVALID, "count mismatch");
    craft(path, "ACTOKENS", 1, 100, 5, 4, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "bytes per id");
    craft(path, "ACTOKENS", 1, 70000, 10, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "bytes per id");
    craft(path, "ACTOKENS", 1, 0, 10, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "vocab size");
    craft(path, "ACTOKENS", 1, 100, 10, 2, 7, 20);
    expect_open_error(path, AC_ERR_INVALID, "reserved");
    craft(path, "ACTOKENS", 1, 1, 10, 2, 0, 20); /* ids are 1, vocab 1 */
    expect_open_error(path, AC_ERR_INVALID, "token 0 is id 1");
    craft(path, "ACTOKENS", 1, 100, (uint64_t)1 << 62, 2, 0, 20);
    expect_open_error(path, AC_ERR_INVALID, "truncated");
    write_bytes(path, "ACTOKENS\1\0\0", 11);
    expect_open_error(path, AC_ERR_INVALID, "truncated");
    write_bytes(path, "", 0);
    expect_open_error(path, AC_ERR_INVALID, "truncated");
    tpath(path, sizeof path, "missing.bin");
    expect_open_error(path, AC_ERR_IO, "cannot open");
}

/* ---- the split ---- */

static void test_split_rule(void **state)
{
    (void)state;
    assert_true(ac_fnv1a64("", 0) == 0xcbf29ce484222325ULL); /* the published test vectors */
    assert_true(ac_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
    assert_true(ac_fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
    int val = 0;
    char doc[64];
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(doc, sizeof doc, "document number %d", i);
        int v = ac_document_is_validation(doc, (size_t)n, 5);
        assert_int_equal(v, ac_document_is_validation(doc, (size_t)n, 5));
        assert_int_equal(v, (int)(ac_fnv1a64(doc, (size_t)n) % 100 < 5));
        assert_false(ac_document_is_validation(doc, (size_t)n, 0));
        assert_true(ac_document_is_validation(doc, (size_t)n, 100));
        if (v)
            assert_true(ac_document_is_validation(doc, (size_t)n, 6)); /* monotone in the percent */
        val += v;
    }
    assert_in_range(val, 800, 1200); /* about 5% */
}

/* ---- tokenizing a corpus ---- */

typedef struct {
    const char *text;
    int keep; /* 0 for a blank entry */
} entry;

static const entry fortunes[] = {
    {"A day for firm decisions!!!!!  Or is it?", 1},
    {"Look, Ma, no hands:\n\tindented second line.\n", 1},
    {"   \n\t", 0},
    {"You will be \"surprised\" by a loud noise.\r", 1},
    {"Ünïcödé and 日本語 and emoji 😀.", 1},
    {"", 0},
    {"%not a separator%\n%%", 1},
};

static const char *find_fortune_doc(size_t k)
{
    for (size_t i = 0; i < sizeof fortunes / sizeof fortunes[0]; i++)
        if (fortunes[i].keep && k-- == 0)
            return fortunes[i].text;
    return NULL;
}

/* The ids of the shard in dir/name. */
static int32_t *shard_ids(const char *dir, const char *name, size_t *n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ac_tokens *t = open_ok(path);
    *n = (size_t)ac_tokens_count(t);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(ac_tokens_copy(t, 0, *n, ids), AC_OK);
    ac_tokens_close(t);
    return ids;
}

static void run_tokenize(const char *out, const char *const *inputs, size_t n, ac_docs_format format, int pct,
                         ac_tokenize_stats *stats)
{
    ac_tokenize_params p = ac_tokenize_default_params();
    p.tokenizer_path = GPT2_JSON;
    p.out_dir = out;
    p.inputs = inputs;
    p.input_count = n;
    p.format = format;
    p.val_percent = pct;
    p.progress = AC_PROGRESS_OFF;
    if (ac_tokenize_corpus(&p, stats) != AC_OK)
        fail_msg("%s", ac_error_message());
}

static void test_tokenize_corpus(void **state)
{
    (void)state;
    /* a fortune file: entries, blank entries, "%\r\n" separators, no final separator */
    char fortune[128];
    tpath(fortune, sizeof fortune, "f.txt");
    FILE *f = fopen(fortune, "wb");
    assert_non_null(f);
    size_t nf = sizeof fortunes / sizeof fortunes[0];
    for (size_t i = 0; i < nf; i++)
        fprintf(f, "%s\n%s", fortunes[i].text, i + 1 < nf ? (i % 2 ? "%\r\n" : "%\n") : "");
    fclose(f);

    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load(GPT2_JSON, &tok), AC_OK);
    const char *inputs[] = {fortune};
    char out1[128], out2[128];
    tpath(out1, sizeof out1, "out1/nested");
    tpath(out2, sizeof out2, "out2");
    ac_tokenize_stats s1, s2;
    /* everything in train: the shard is each kept entry, its ids, then <|endoftext|> */
    run_tokenize(out1, inputs, 1, AC_DOCS_FORTUNE, 0, &s1);
    assert_int_equal(s1.documents[0], 5);
    assert_int_equal(s1.documents[1], 0);
    size_t n;
    int32_t *ids = shard_ids(out1, "train.bin", &n);
    assert_int_equal(n, s1.tokens[0]);
    size_t pos = 0;
    uint64_t text_bytes = 0;
    for (size_t k = 0; k < 5; k++) {
        const char *doc = find_fortune_doc(k);
        /* the last entry has no separator after it: its final newline stays */
        char want[256];
        snprintf(want, sizeof want, "%s%s", doc, k == 4 ? "\n" : "");
        int32_t *d;
        size_t dn;
        assert_int_equal(ac_tokenizer_encode(tok, want, strlen(want), &d, &dn), AC_OK);
        assert_true(pos + dn + 1 <= n);
        assert_memory_equal(ids + pos, d, dn * sizeof *d);
        assert_int_equal(ids[pos + dn], 0);
        pos += dn + 1;
        text_bytes += strlen(want);
        free(d);
    }
    assert_int_equal(pos, n);
    assert_int_equal(s1.bytes[0], text_bytes);
    free(ids);

    /* the manifest */
    char mpath[256];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", out1);
    size_t mlen;
    char *mtext = (char *)read_bytes(mpath, &mlen);
    cJSON *m = cJSON_Parse(mtext);
    assert_non_null(m);
    const cJSON *splits = cJSON_GetObjectItem(m, "splits");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(splits, "train"), "documents")->valuedouble, 5);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(splits, "train"), "tokens")->valuedouble, n);
    const cJSON *tk = cJSON_GetObjectItem(m, "tokenizer");
    assert_string_equal(cJSON_GetObjectItem(tk, "path")->valuestring, GPT2_JSON);
    size_t tlen;
    unsigned char *ttext = read_bytes(GPT2_JSON, &tlen);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ac_fnv1a64(ttext, tlen));
    free(ttext);
    assert_string_equal(cJSON_GetObjectItem(tk, "fnv1a64")->valuestring, hex);
    assert_int_equal(cJSON_GetObjectItem(tk, "eos_id")->valuedouble, 0);
    const cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "sources"), 0);
    assert_string_equal(cJSON_GetObjectItem(src, "path")->valuestring, fortune);
    assert_int_equal(cJSON_GetObjectItem(src, "documents")->valuedouble, 5);
    cJSON_Delete(m);
    free(mtext);

    /* everything in val */
    run_tokenize(out2, inputs, 1, AC_DOCS_FORTUNE, 100, &s2);
    assert_int_equal(s2.documents[0], 0);
    assert_int_equal(s2.documents[1], 5);
    assert_int_equal(s2.tokens[1], s1.tokens[0]);
    ac_tokenizer_free(tok);
}

/* Many documents: the split follows the text, the outputs are the same bytes each run. */
static void test_split_determinism(void **state)
{
    (void)state;
    char a[128], b[128];
    tpath(a, sizeof a, "lines_a.txt");
    tpath(b, sizeof b, "lines_b.txt");
    FILE *fa = fopen(a, "wb"), *fb = fopen(b, "wb");
    assert_non_null(fa);
    assert_non_null(fb);
    enum { DOCS = 3000 };
    for (int i = 0; i < DOCS; i++)
        fprintf(fa, "line %d says %d things\r\n%s", i, i * 7, i % 10 == 0 ? "\n  \n" : "");
    for (int i = DOCS - 1; i >= 0; i--) /* the same documents backwards */
        fprintf(fb, "line %d says %d things\n", i, i * 7);
    fclose(fa);
    fclose(fb);

    const char *in_a[] = {a}, *in_b[] = {b};
    char o1[128], o2[128], o3[128];
    tpath(o1, sizeof o1, "det1");
    tpath(o2, sizeof o2, "det2");
    tpath(o3, sizeof o3, "det3");
    ac_tokenize_stats s1, s2, s3;
    run_tokenize(o1, in_a, 1, AC_DOCS_LINES, 5, &s1);
    run_tokenize(o2, in_a, 1, AC_DOCS_LINES, 5, &s2);
    run_tokenize(o3, in_b, 1, AC_DOCS_LINES, 5, &s3);
    assert_int_equal(s1.documents[0] + s1.documents[1], DOCS);
    assert_in_range(s1.documents[1], DOCS / 40, DOCS / 10);
    static const char *const files[] = {"train.bin", "val.bin", "manifest.json"};
    for (int k = 0; k < 3; k++) { /* run 2 is byte-identical to run 1 */
        char p1[256], p2[256];
        snprintf(p1, sizeof p1, "%s/%s", o1, files[k]);
        snprintf(p2, sizeof p2, "%s/%s", o2, files[k]);
        size_t n1, n2;
        unsigned char *d1 = read_bytes(p1, &n1), *d2 = read_bytes(p2, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(d1, d2, n1);
        free(d1);
        free(d2);
    }
    /* the reordered corpus puts the same documents in val (\r\n lines lose their \r) */
    assert_int_equal(s3.documents[1], s1.documents[1]);
    assert_int_equal(s3.tokens[1], s1.tokens[1]);
    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load(GPT2_JSON, &tok), AC_OK);
    size_t nv;
    int32_t *val = shard_ids(o1, "val.bin", &nv);
    char *text;
    size_t len;
    assert_int_equal(ac_tokenizer_decode(tok, val, nv, &text, &len), AC_OK);
    size_t docs = 0;
    for (char *p = text; (p = strstr(p, "<|endoftext|>")); p += 13)
        docs++;
    assert_int_equal(docs, s1.documents[1]);
    for (char *start = text; *start;) { /* every validation document belongs there */
        char *end = strstr(start, "<|endoftext|>");
        assert_non_null(end);
        assert_true(ac_document_is_validation(start, (size_t)(end - start), 5));
        start = end + 13;
    }
    free(text);
    free(val);
    ac_tokenizer_free(tok);

    /* files: each input is one document */
    const char *both[] = {a, b};
    char o4[128];
    tpath(o4, sizeof o4, "det4");
    ac_tokenize_stats s4;
    run_tokenize(o4, both, 2, AC_DOCS_FILES, 50, &s4);
    assert_int_equal(s4.documents[0] + s4.documents[1], 2);

    /* bad requests */
    ac_tokenize_params p = ac_tokenize_default_params();
    p.tokenizer_path = GPT2_JSON;
    p.out_dir = o4;
    p.inputs = both;
    p.input_count = 2;
    p.progress = AC_PROGRESS_OFF;
    p.val_percent = 101;
    assert_int_equal(ac_tokenize_corpus(&p, &s4), AC_ERR_INVALID);
    p.val_percent = 5;
    p.eos_token = "<|no such token|>";
    assert_int_equal(ac_tokenize_corpus(&p, &s4), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "<|no such token|>"));
    p.eos_token = NULL;
    const char *missing[] = {"/nonexistent/input.txt"};
    p.inputs = missing;
    p.input_count = 1;
    assert_int_equal(ac_tokenize_corpus(&p, &s4), AC_ERR_IO);
    ac_docs_format fmt;
    assert_int_equal(ac_docs_format_from_name("files", &fmt), AC_OK);
    assert_int_equal(fmt, AC_DOCS_FILES);
    assert_int_equal(ac_docs_format_from_name("paragraphs", &fmt), AC_ERR_INVALID);
}

/* ---- batches ---- */

static ac_tokens *counting_shard(const char *name, size_t n, uint32_t vocab)
{
    int32_t *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i % vocab);
    char path[128];
    tpath(path, sizeof path, name);
    write_shard(path, vocab, ids, n);
    free(ids);
    return open_ok(path);
}

static void test_sampler(void **state)
{
    (void)state;
    enum { N = 50000, B = 8, T = 64 };
    ac_tokens *t = counting_shard("sample.bin", N, 60000); /* id i at position i */
    int32_t *x = malloc(B * (T + 1) * sizeof *x), *y = malloc(B * (T + 1) * sizeof *y);
    uint64_t starts[B], starts2[B];
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(ac_tokens_sample_batch(t, 42, 7, B, T, x, starts), AC_OK);
    for (int b = 0; b < B; b++) {
        assert_true(starts[b] + T < N);
        assert_true(starts[b] == ac_tokens_window_start(N, T, 42, 7, b)); /* pure function */
        for (int k = 0; k <= T; k++)
            assert_int_equal(x[b * (T + 1) + k], (int32_t)(starts[b] + (uint64_t)k)); /* consecutive */
    }
    /* the same (seed, step) again, after other steps: the same batch */
    assert_int_equal(ac_tokens_sample_batch(t, 42, 8, B, T, y, starts2), AC_OK);
    assert_int_equal(ac_tokens_sample_batch(t, 1, 7, B, T, y, starts2), AC_OK);
    assert_int_equal(ac_tokens_sample_batch(t, 42, 7, B, T, y, starts2), AC_OK);
    assert_memory_equal(x, y, B * (T + 1) * sizeof *x);
    assert_memory_equal(starts, starts2, sizeof starts);
    /* a batch's first rows do not depend on its size */
    assert_int_equal(ac_tokens_sample_batch(t, 42, 7, 3, T, y, starts2), AC_OK);
    assert_memory_equal(starts, starts2, 3 * sizeof *starts);
    /* other steps and seeds give other windows */
    int same_step = 0, same_seed = 0;
    for (int b = 0; b < B; b++) {
        same_step += ac_tokens_window_start(N, T, 42, 8, b) == starts[b];
        same_seed += ac_tokens_window_start(N, T, 43, 7, b) == starts[b];
    }
    assert_true(same_step < 2 && same_seed < 2);

    /* starts cover [0, N - T - 1] evenly */
    uint64_t lo = UINT64_MAX, hi = 0;
    int buckets[10] = {0};
    for (uint64_t step = 0; step < 2000; step++)
        for (int b = 0; b < 8; b++) {
            uint64_t s = ac_tokens_window_start(N, T, 5, step, b);
            assert_true(s <= (uint64_t)(N - T - 1));
            lo = s < lo ? s : lo;
            hi = s > hi ? s : hi;
            buckets[s * 10 / (N - T)]++;
        }
    assert_true(lo < 100 && hi > N - T - 100);
    for (int k = 0; k < 10; k++)
        assert_in_range(buckets[k], 1400, 1800);
    /* a window of exactly the shard */
    assert_int_equal(ac_tokens_window_start(T + 1, T, 9, 9, 0), 0);

    assert_int_equal(ac_tokens_sample_batch(t, 1, 1, 0, T, x, NULL), AC_ERR_INVALID);
    assert_int_equal(ac_tokens_sample_batch(t, 1, 1, B, 0, x, NULL), AC_ERR_INVALID);
    ac_tokens_close(t);
    t = counting_shard("tiny.bin", T, 100);
    assert_int_equal(ac_tokens_sample_batch(t, 1, 1, 1, T, x, NULL), AC_ERR_INVALID);
    ac_tokens_close(t);
    free(x);
    free(y);
}

static void test_eval_windows(void **state)
{
    (void)state;
    enum { N = 1000, T = 64, B = 4 };
    ac_tokens *t = counting_shard("eval.bin", N, 5000);
    assert_int_equal(ac_tokens_window_count(t, T), (N - 1) / T);
    assert_int_equal(ac_tokens_window_count(t, N - 1), 1);
    assert_int_equal(ac_tokens_window_count(t, N), 0);
    ac_tokens_iter it;
    ac_tokens_iter_init(&it, t, T);
    int32_t out[B * (T + 1)];
    uint64_t window = 0;
    int rows, batches = 0;
    while ((rows = ac_tokens_iter_next(&it, B, out)) > 0) {
        for (int r = 0; r < rows; r++, window++)
            for (int k = 0; k <= T; k++)
                assert_int_equal(out[r * (T + 1) + k], (int32_t)(window * T + (uint64_t)k));
        batches++;
    }
    assert_int_equal(window, (N - 1) / T);
    assert_int_equal(batches, ((N - 1) / T + B - 1) / B); /* the last batch is partial */
    assert_int_equal(ac_tokens_iter_next(&it, B, out), 0);
    ac_tokens_close(t);
}

/* ---- setup ---- */

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ac_tokens_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_tokenize_corpus),
        cmocka_unit_test(test_split_determinism),
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_eval_windows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
