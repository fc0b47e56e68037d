/* Next-line exact match: line starts in the held-out stream and greedy completions of
 * them, several lines per forward, each with its own cache. */
#include "eval/eval_internal.h"

#include <stdlib.h>
#include <string.h>

#include "autocompress/runtime.h"
#include "autocompress/sample.h"

/* ---- the bytes of every id ---- */

static ac_status append_piece(ac_eval_pieces *p, size_t *capacity, const char *text, size_t len, int id)
{
    size_t used = p->offset[id];
    if (used + len > *capacity) {
        size_t cap = *capacity ? *capacity : 4096;
        while (cap < used + len)
            cap *= 2;
        char *bytes = realloc(p->bytes, cap);
        if (!bytes)
            return ac_fail(AC_ERR_NOMEM, "eval: out of memory for the tokens' bytes");
        p->bytes = bytes;
        *capacity = cap;
    }
    memcpy(p->bytes + used, text, len);
    p->offset[id + 1] = used + len;
    p->usable[id] = 1;
    return AC_OK;
}

ac_status ac_eval_pieces_init(ac_eval_pieces *p, const ac_tokenizer *tok, int n)
{
    *p = (ac_eval_pieces){.n = n, .offset = calloc((size_t)n + 1, sizeof(size_t)), .usable = calloc((size_t)n, 1)};
    if (!p->offset || !p->usable) {
        ac_eval_pieces_free(p);
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %d token pieces", n);
    }
    int32_t known = ac_tokenizer_vocab_size(tok);
    size_t capacity = 0;
    ac_status st = AC_OK;
    for (int32_t id = 0; st == AC_OK && id < n; id++) {
        p->offset[id + 1] = p->offset[id];
        if (id >= known || ac_tokenizer_is_special(tok, id) || !ac_tokenizer_id_to_token(tok, id))
            continue;
        char *text = NULL;
        size_t len = 0;
        st = ac_tokenizer_decode(tok, &id, 1, &text, &len);
        if (st == AC_OK)
            st = append_piece(p, &capacity, text, len, id);
        free(text);
    }
    if (st != AC_OK)
        ac_eval_pieces_free(p);
    return st;
}

void ac_eval_pieces_free(ac_eval_pieces *p)
{
    free(p->offset);
    free(p->bytes);
    free(p->usable);
    *p = (ac_eval_pieces){0};
}

static int usable(const ac_eval_pieces *p, int32_t id) { return id >= 0 && id < p->n && p->usable[id]; }

static const char *piece(const ac_eval_pieces *p, int32_t id, size_t *len)
{
    *len = p->offset[id + 1] - p->offset[id];
    return p->bytes + p->offset[id];
}

static int has_newline(const ac_eval_pieces *p, int32_t id)
{
    size_t len;
    const char *b = piece(p, id, &len);
    return memchr(b, '\n', len) != NULL;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

/* A '\n' followed by nothing but indentation: byte-level BPE merges a newline with the
 * next line's indentation ("\n   " then " return"), so most code lines start after one. */
static int opens_line(const ac_eval_pieces *p, int32_t id)
{
    size_t len;
    const char *b = piece(p, id, &len);
    for (size_t k = len; k-- > 0;) {
        if (b[k] == '\n')
            return 1;
        if (b[k] != ' ' && b[k] != '\t')
            return 0;
    }
    return 0;
}

/* ---- line starts ---- */

int ac_eval_line_at(const ac_tokens *t, const ac_eval_pieces *p, const ac_line_rules *r, uint64_t i)
{
    if (i < (uint64_t)r->context || i >= ac_tokens_count(t))
        return 0;
    int32_t prev = ac_tokens_get(t, i - 1);
    if (!usable(p, prev) || !opens_line(p, prev))
        return 0;
    int blank = 1;
    for (int j = 0; j < r->max_tokens; j++) {
        int32_t id = ac_tokens_get(t, i + (uint64_t)j);
        if (!usable(p, id))
            return 0;
        size_t len;
        const char *b = piece(p, id, &len);
        for (size_t k = 0; k < len; k++) {
            if (b[k] == '\n')
                return blank ? 0 : j + 1;
            blank = blank && is_space(b[k]);
        }
    }
    return 0;
}

ac_status ac_eval_select_lines(const ac_tokens *t, const ac_eval_pieces *p, const ac_line_rules *r, int want,
                               uint64_t **starts, int *n)
{
    *starts = NULL;
    *n = 0;
    uint64_t count = ac_tokens_count(t), found = 0;
    for (uint64_t i = 0; want > 0 && i < count; i++)
        found += ac_eval_line_at(t, p, r, i) > 0;
    int m = found < (uint64_t)want ? (int)found : want;
    if (m == 0)
        return AC_OK;
    uint64_t *s = malloc((size_t)m * sizeof *s);
    if (!s)
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %d line starts", m);
    /* the second pass keeps line start number floor(k * found / m) for k = 0 .. m-1 */
    uint64_t seen = 0;
    int k = 0;
    for (uint64_t i = 0; k < m && i < count; i++) {
        if (ac_eval_line_at(t, p, r, i) == 0)
            continue;
        if (seen == (uint64_t)k * found / (uint64_t)m)
            s[k++] = i;
        seen++;
    }
    *starts = s;
    *n = m;
    return AC_OK;
}

/* ---- greedy completion ---- */

/* Appends ids' bytes up to the first '\n' to a growable buffer; returns 1 when a '\n'
 * was reached (0 also when an id is not usable). */
static int text_to_newline(const ac_eval_pieces *p, const int32_t *ids, int n, char **buf, size_t *len, size_t *cap)
{
    *len = 0;
    for (int j = 0; j < n; j++) {
        if (!usable(p, ids[j]))
            return 0;
        size_t plen;
        const char *b = piece(p, ids[j], &plen);
        const char *nl = memchr(b, '\n', plen);
        size_t take = nl ? (size_t)(nl - b) : plen;
        if (*len + take > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + take)
                c *= 2;
            char *grown = realloc(*buf, c);
            if (!grown)
                return -1;
            *buf = grown;
            *cap = c;
        }
        if (take > 0) /* an empty piece before the newline: *buf may still be NULL */
            memcpy(*buf + *len, b, take);
        *len += take;
        if (nl)
            return 1;
    }
    return 0;
}

typedef struct {
    const ac_model *model;
    const ac_tokens *tokens;
    const ac_eval_pieces *pieces;
    const ac_line_rules *rules;
    int group, vocab;
    ac_runtime *rt;
    ac_cache **caches;      /* [group] */
    int32_t *prompts;       /* [group, context] */
    float *logits;          /* [group, vocab] */
    /* the sequences still generating, packed for ac_batch */
    int *line;              /* [group]: which line of the group */
    const int32_t **feed;   /* [group] */
    int *n_feed;            /* [group] */
    ac_cache **feed_cache;  /* [group] */
    int32_t *ref;           /* [max_tokens] */
    char *text[2];
    size_t cap[2];
} completer;

static void completer_free(completer *c)
{
    for (int j = 0; c->caches && j < c->group; j++)
        ac_cache_free(c->caches[j]);
    free(c->caches);
    ac_runtime_free(c->rt);
    free(c->prompts);
    free(c->logits);
    free(c->line);
    free(c->feed);
    free(c->n_feed);
    free(c->feed_cache);
    free(c->ref);
    free(c->text[0]);
    free(c->text[1]);
}

static ac_status completer_init(completer *c)
{
    size_t G = (size_t)c->group;
    c->caches = calloc(G, sizeof *c->caches);
    c->prompts = malloc(G * (size_t)c->rules->context * sizeof *c->prompts);
    c->logits = malloc(G * (size_t)c->vocab * sizeof *c->logits);
    c->line = malloc(G * sizeof *c->line);
    c->feed = malloc(G * sizeof *c->feed);
    c->n_feed = malloc(G * sizeof *c->n_feed);
    c->feed_cache = malloc(G * sizeof *c->feed_cache);
    c->ref = malloc((size_t)c->rules->max_tokens * sizeof *c->ref);
    if (!c->caches || !c->prompts || !c->logits || !c->line || !c->feed || !c->n_feed || !c->feed_cache || !c->ref)
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %d line completions", c->group);
    ac_status st = ac_runtime_create(c->model, &c->rt);
    for (size_t j = 0; st == AC_OK && j < G; j++)
        st = ac_cache_create(c->model, &c->caches[j]);
    return st;
}

/* 1 when the generated ids match the reference line at `start`, -1 out of memory. */
static int line_matches(completer *c, uint64_t start, const int32_t *ids, int n)
{
    int ref_len = ac_eval_line_at(c->tokens, c->pieces, c->rules, start);
    if (ac_tokens_copy(c->tokens, start, (size_t)ref_len, c->ref) != AC_OK)
        return 0;
    size_t len[2];
    int ref = text_to_newline(c->pieces, c->ref, ref_len, &c->text[0], &len[0], &c->cap[0]);
    int gen = text_to_newline(c->pieces, ids, n, &c->text[1], &len[1], &c->cap[1]);
    if (ref < 0 || gen < 0)
        return -1;
    return ref == 1 && gen == 1 && len[0] == len[1] && memcmp(c->text[0], c->text[1], len[0]) == 0;
}

static int completion_ends(const completer *c, int32_t id)
{
    return !usable(c->pieces, id) || has_newline(c->pieces, id);
}

/* Lines starts[0..m) (m <= group): prefill each prompt, then one token per step for the
 * lines still going; ids[j * max_tokens ..] and lens[j] receive line j's completion. */
static ac_status complete_group(completer *c, const uint64_t *starts, int m, int32_t *ids, int *lens)
{
    int C = c->rules->context, max = c->rules->max_tokens;
    for (int j = 0; j < m; j++) {
        ac_cache_clear(c->caches[j]);
        ac_status st = ac_tokens_copy(c->tokens, starts[j] - (uint64_t)C, (size_t)C, c->prompts + (size_t)j * C);
        if (st != AC_OK)
            return st;
        c->line[j] = j;
        c->feed[j] = c->prompts + (size_t)j * C;
        c->n_feed[j] = C;
        c->feed_cache[j] = c->caches[j];
        lens[j] = 0;
    }
    int active = m;
    while (active > 0) {
        ac_batch batch = {.n_seqs = active, .tokens = c->feed, .n_tokens = c->n_feed, .caches = c->feed_cache};
        ac_status st = ac_runtime_forward(c->rt, &batch, AC_LOGITS_LAST, c->logits);
        if (st != AC_OK)
            return st;
        int kept = 0;
        for (int k = 0; k < active; k++) {
            int j = c->line[k];
            int32_t *out = ids + (size_t)j * max;
            int32_t next = ac_argmax(c->logits + (size_t)k * c->vocab, c->vocab);
            out[lens[j]++] = next;
            if (completion_ends(c, next) || lens[j] == max)
                continue;
            c->line[kept] = j;
            c->feed[kept] = out + lens[j] - 1;
            c->n_feed[kept] = 1;
            c->feed_cache[kept] = c->caches[j];
            kept++;
        }
        active = kept;
    }
    return AC_OK;
}

ac_status ac_eval_complete_lines(const ac_model *model, const ac_tokens *tokens, const ac_eval_pieces *pieces,
                                 const ac_line_rules *rules, const uint64_t *starts, int n, int group,
                                 ac_progress *progress, int32_t *ids, int *lens, unsigned char *matched)
{
    if (group < 1 || rules->context < 1 || rules->max_tokens < 1)
        return ac_fail(AC_ERR_INVALID, "eval: line group (%d), context (%d) and tokens per line (%d) must be positive",
                       group, rules->context, rules->max_tokens);
    completer c = {.model = model, .tokens = tokens, .pieces = pieces, .rules = rules,
                   .group = group < n ? group : (n > 0 ? n : 1), .vocab = ac_model_arch(model)->vocab};
    ac_status st = completer_init(&c);
    for (int g = 0; st == AC_OK && g < n; g += c.group) {
        int m = n - g < c.group ? n - g : c.group;
        st = complete_group(&c, starts + g, m, ids + (size_t)g * rules->max_tokens, lens + g);
        for (int j = g; st == AC_OK && j < g + m; j++) {
            int ok = line_matches(&c, starts[j], ids + (size_t)j * rules->max_tokens, lens[j]);
            if (ok < 0)
                st = ac_fail(AC_ERR_NOMEM, "eval: out of memory comparing line %d", j);
            matched[j] = ok == 1;
        }
        if (progress)
            ac_progress_update(progress, (double)(g + m));
    }
    completer_free(&c);
    return st;
}
