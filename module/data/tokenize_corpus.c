/* Tokenizing a corpus into train/val token shards and a manifest (see tokens.h). */
#include "autocompress/tokens.h"
#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/clock.h"
#include "autocompress/log.h"
#include "autocompress/tokenizer.h"

uint64_t ac_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int ac_document_is_validation(const void *text, size_t len, int val_percent)
{
    return (int)(ac_fnv1a64(text, len) % 100) < val_percent;
}

static const char *const format_names[] = {"fortune", "lines", "files"};

ac_status ac_docs_format_from_name(const char *name, ac_docs_format *format)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, format_names[i])) {
            *format = (ac_docs_format)i;
            return AC_OK;
        }
    return ac_fail(AC_ERR_INVALID, "--format: unknown '%s' (expected fortune, lines or files)", name);
}

const char *ac_docs_format_name(ac_docs_format format)
{
    return (unsigned)format < 3 ? format_names[format] : "?";
}

ac_tokenize_params ac_tokenize_default_params(void)
{
    return (ac_tokenize_params){
        .format = AC_DOCS_FORTUNE,
        .val_percent = 5,
        .eos_token = "<|endoftext|>",
        .progress = AC_PROGRESS_AUTO,
    };
}

static ac_status read_all(const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return ac_fail(AC_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return ac_fail(AC_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return AC_OK;
}

static ac_status make_dirs(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return ac_fail(AC_ERR_INVALID, "--out: bad directory name");
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return ac_fail(AC_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s: not a directory", dir);
    return AC_OK;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n\v\f", s[i]) || s[i] == '\0')
            return 0;
    return 1;
}

typedef struct {
    const ac_tokenize_params *params;
    const ac_tokenizer *tok;
    int32_t eos;
    ac_tokens_writer *writers[2];
    int32_t *ids;
    size_t ids_cap;
    ac_tokenize_stats *stats;
    ac_progress *progress;
    uint64_t done_bytes; /* input bytes before the current file */
    /* the current source */
    const char *source;
    uint64_t src_docs[2], src_tokens;
} job;

static ac_status add_document(job *j, const char *text, size_t len, size_t offset_in_file)
{
    if (blank(text, len))
        return AC_OK;
    int split = ac_document_is_validation(text, len, j->params->val_percent);
    size_t n = 0;
    ac_status st = ac_tokenizer_encode_append(j->tok, text, len, &j->ids, &n, &j->ids_cap);
    if (st == AC_OK && n == j->ids_cap) {
        void *p = realloc(j->ids, (j->ids_cap + 1) * sizeof *j->ids);
        if (!p)
            return ac_fail(AC_ERR_NOMEM, "tokenize: out of memory");
        j->ids = p;
        j->ids_cap++;
    }
    if (st != AC_OK)
        return ac_fail_context(st, "%s: document at byte %zu", j->source, offset_in_file);
    j->ids[n++] = j->eos;
    if ((st = ac_tokens_writer_append(j->writers[split], j->ids, n)) != AC_OK)
        return st;
    j->stats->documents[split]++;
    j->stats->tokens[split] += n;
    j->stats->bytes[split] += len;
    j->src_docs[split]++;
    j->src_tokens += n;
    if (j->progress) {
        ac_progress_metric(j->progress, "tokens", (double)(j->stats->tokens[0] + j->stats->tokens[1]));
        ac_progress_update(j->progress, (double)(j->done_bytes + offset_in_file + len) / 1e6);
    }
    return AC_OK;
}

static ac_status split_documents(job *j, const char *s, size_t n)
{
    ac_status st = AC_OK;
    switch (j->params->format) {
    case AC_DOCS_FILES:
        return add_document(j, s, n, 0);
    case AC_DOCS_LINES:
        for (size_t pos = 0; pos < n && st == AC_OK;) {
            const char *nl = memchr(s + pos, '\n', n - pos);
            size_t end = nl ? (size_t)(nl - s) : n, len = end - pos;
            if (len && s[end - 1] == '\r')
                len--;
            st = add_document(j, s + pos, len, pos);
            pos = end + 1;
        }
        return st;
    case AC_DOCS_FORTUNE: {
        size_t doc_start = 0, pos = 0;
        while (st == AC_OK) {
            const char *nl = memchr(s + pos, '\n', n - pos);
            size_t end = nl ? (size_t)(nl - s) : n, len = end - pos;
            int sep = s[pos] == '%' && (len == 1 || (len == 2 && s[pos + 1] == '\r'));
            if (pos < n && sep) {
                /* the entry ends before the newline that ends its last line */
                size_t doc_end = pos > doc_start ? pos - 1 : doc_start;
                st = add_document(j, s + doc_start, doc_end - doc_start, doc_start);
                doc_start = end + 1;
            }
            if (!nl)
                break;
            pos = end + 1;
        }
        if (st == AC_OK && doc_start < n)
            st = add_document(j, s + doc_start, n - doc_start, doc_start);
        return st;
    }
    }
    return ac_fail(AC_ERR_INVALID, "tokenize: unknown document format %d", (int)j->params->format);
}

/* One document from a whole file is what a wrong --format gives (a file of lines read
 * as fortune entries); the files format means it. */
static void warn_single_document(const job *j, size_t len)
{
    if (j->params->format == AC_DOCS_FILES || j->src_docs[0] + j->src_docs[1] != 1)
        return;
    ac_warn("tokenize: %s (%zu bytes) yields one document with --format %s; is that the format it is in? "
            "(fortune: entries between lines holding just %%; lines: each non-blank line; files: each file)",
            j->source, len, ac_docs_format_name(j->params->format));
}

/* A split with a share of the documents that got none (too few documents, or all of
 * them hashed to the other side). */
static void warn_empty_splits(const ac_tokenize_params *p, const ac_tokenize_stats *stats)
{
    static const char *const names[2] = {"train", "val"};
    const int share[2] = {100 - p->val_percent, p->val_percent};
    for (int s = 0; s < 2; s++)
        if (share[s] > 0 && stats->documents[s] == 0)
            ac_warn("tokenize: the %s split is empty: 0 of %llu documents went there (--val-percent %d)", names[s],
                    (unsigned long long)(stats->documents[0] + stats->documents[1]), p->val_percent);
}

static cJSON *split_json(const char *file, uint64_t docs, uint64_t tokens, uint64_t bytes)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddNumberToObject(o, "documents", (double)docs);
    cJSON_AddNumberToObject(o, "tokens", (double)tokens);
    cJSON_AddNumberToObject(o, "text_bytes", (double)bytes);
    return o;
}

static ac_status write_manifest(const ac_tokenize_params *p, const ac_tokenizer *tok, int32_t eos, uint64_t tok_bytes,
                                uint64_t tok_hash, cJSON *sources, const ac_tokenize_stats *stats)
{
    cJSON *root = cJSON_CreateObject();
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, tok_hash);
    cJSON_AddStringToObject(root, "format", "autocompress-tokens");
    cJSON_AddNumberToObject(root, "version", AC_TOKENS_VERSION);
    cJSON *t = cJSON_AddObjectToObject(root, "tokenizer");
    cJSON_AddStringToObject(t, "path", p->tokenizer_path);
    cJSON_AddNumberToObject(t, "bytes", (double)tok_bytes);
    cJSON_AddStringToObject(t, "fnv1a64", hex);
    cJSON_AddNumberToObject(t, "vocab_size", ac_tokenizer_vocab_size(tok));
    cJSON_AddStringToObject(t, "eos_token", p->eos_token);
    cJSON_AddNumberToObject(t, "eos_id", eos);
    cJSON_AddStringToObject(root, "document_format", ac_docs_format_name(p->format));
    cJSON_AddNumberToObject(root, "val_percent", p->val_percent);
    cJSON_AddStringToObject(root, "split_rule",
                            "a document (its bytes, before the end token) goes to val when fnv1a64 % 100 < val_percent");
    cJSON_AddItemToObject(root, "sources", sources);
    cJSON *splits = cJSON_AddObjectToObject(root, "splits");
    cJSON_AddItemToObject(splits, "train", split_json("train.bin", stats->documents[0], stats->tokens[0], stats->bytes[0]));
    cJSON_AddItemToObject(splits, "val", split_json("val.bin", stats->documents[1], stats->tokens[1], stats->bytes[1]));
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, p->out_dir, "manifest.json");
    if (st == AC_OK)
        st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}

ac_status ac_tokenize_corpus(const ac_tokenize_params *p, ac_tokenize_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (!p->tokenizer_path || !p->out_dir || !p->input_count)
        return ac_fail(AC_ERR_INVALID, "tokenize: a tokenizer, an output directory and inputs are required");
    if (p->val_percent < 0 || p->val_percent > 100)
        return ac_fail(AC_ERR_INVALID, "--val-percent: %d is outside [0, 100]", p->val_percent);
    const char *eos_token = p->eos_token ? p->eos_token : "<|endoftext|>";
    for (size_t i = 0; i < p->input_count; i++) {
        struct stat sb;
        if (stat(p->inputs[i], &sb) != 0)
            return ac_fail(AC_ERR_IO, "%s: cannot stat: %s", p->inputs[i], strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return ac_fail(AC_ERR_IO, "%s: not a regular file", p->inputs[i]);
        stats->input_bytes += (uint64_t)sb.st_size;
    }

    char *tok_text;
    size_t tok_len;
    ac_status st = read_all(p->tokenizer_path, &tok_text, &tok_len);
    if (st != AC_OK)
        return st;
    uint64_t tok_hash = ac_fnv1a64(tok_text, tok_len);
    ac_tokenizer *tok;
    st = ac_tokenizer_load_buffer(tok_text, tok_len, p->tokenizer_path, &tok);
    free(tok_text);
    if (st != AC_OK)
        return st;
    int32_t eos = ac_tokenizer_token_to_id(tok, eos_token);
    if (eos < 0) {
        ac_tokenizer_free(tok);
        return ac_fail(AC_ERR_INVALID, "%s: no token \"%s\" to end documents with (see --eos)", p->tokenizer_path,
                       eos_token);
    }
    if ((st = make_dirs(p->out_dir)) != AC_OK) {
        ac_tokenizer_free(tok);
        return st;
    }

    ac_tokenize_params params = *p;
    params.eos_token = eos_token;
    job j = {.params = &params, .tok = tok, .eos = eos, .stats = stats};
    static const char *const names[2] = {"train.bin", "val.bin"};
    for (int s = 0; s < 2 && st == AC_OK; s++) {
        char path[AC_PATH_MAX];
        st = ac_path_join(path, sizeof path, p->out_dir, names[s]);
        if (st == AC_OK)
            st = ac_tokens_writer_open(path, (uint32_t)ac_tokenizer_vocab_size(tok), &j.writers[s]);
    }
    if (st == AC_OK)
        st = ac_progress_init(&j.progress, "tokenize", (double)stats->input_bytes / 1e6, "MB", p->progress, stderr);
    cJSON *sources = cJSON_CreateArray();
    double t0 = ac_monotonic_s();
    for (size_t i = 0; i < p->input_count && st == AC_OK; i++) {
        char *data;
        size_t len;
        if ((st = read_all(p->inputs[i], &data, &len)) != AC_OK)
            break;
        j.source = p->inputs[i];
        j.src_docs[0] = j.src_docs[1] = j.src_tokens = 0;
        st = split_documents(&j, data, len);
        free(data);
        if (st == AC_OK)
            warn_single_document(&j, len);
        j.done_bytes += len;
        cJSON *src = cJSON_CreateObject();
        cJSON_AddStringToObject(src, "path", p->inputs[i]);
        cJSON_AddNumberToObject(src, "bytes", (double)len);
        cJSON_AddNumberToObject(src, "documents", (double)(j.src_docs[0] + j.src_docs[1]));
        cJSON_AddNumberToObject(src, "val_documents", (double)j.src_docs[1]);
        cJSON_AddNumberToObject(src, "tokens", (double)j.src_tokens);
        cJSON_AddItemToArray(sources, src);
    }
    stats->seconds = ac_monotonic_s() - t0;
    if (j.progress) {
        if (st == AC_OK)
            ac_progress_finish(j.progress);
        ac_progress_free(j.progress);
    }
    for (int s = 0; s < 2; s++) {
        if (!j.writers[s])
            continue;
        if (st == AC_OK)
            st = ac_tokens_writer_close(j.writers[s]);
        else
            ac_tokens_writer_abort(j.writers[s]);
    }
    if (st == AC_OK)
        warn_empty_splits(p, stats);
    if (st == AC_OK)
        st = write_manifest(&params, tok, eos, tok_len, tok_hash, sources, stats);
    else
        cJSON_Delete(sources);
    free(j.ids);
    ac_tokenizer_free(tok);
    return st;
}
