/* Encoding and decoding with a loaded tokenizer (see tokenizer.h). The order of work
 * is the `tokenizers` library's: added tokens cut out of the raw text (two passes),
 * the pre-tokenizer's steps on what is left, then BPE on each piece.
 *
 * Everything here runs on raw bytes: the ByteLevel symbols are a bijection of the 256
 * bytes, so a piece's bytes stand for its byte-level string, and the vocabulary is
 * looked up by the bytes its entries spell (tokenizer.c builds that map). */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *p;
    size_t n;
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} piece_list;

typedef struct {
    size_t start, end;
    int match;
} segment;

typedef struct {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int32_t alive;      /* 0 once merged into its left neighbour */
} symbol;

typedef struct {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
} merge_entry;

typedef struct {
    const ac_tokenizer *tok;
    pcre2_match_data *md;
    piece_list lists[2];
    tok_arena scratch; /* pieces made by ByteLevel's add_prefix_space */
    segment *segs;
    size_t segs_cap;
    symbol *syms;
    size_t syms_cap;
    merge_entry *heap;
    size_t heap_n, heap_cap;
    int32_t **ids;
    size_t *count, *cap;
} encoder;

static ac_status nomem(void) { return ac_fail(AC_ERR_NOMEM, "tokenizer: out of memory while encoding"); }

static ac_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return AC_OK;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return nomem();
    *p = q;
    *cap = c;
    return AC_OK;
}

static ac_status push_id(encoder *e, int32_t id)
{
    if (*e->count == *e->cap) {
        void *p = *e->ids;
        ac_status st = grow(&p, e->cap, *e->count + 1, sizeof(int32_t));
        if (st != AC_OK)
            return st;
        *e->ids = p;
    }
    (*e->ids)[(*e->count)++] = id;
    return AC_OK;
}

static ac_status push_piece(piece_list *l, const unsigned char *p, size_t n)
{
    if (!n)
        return AC_OK;
    if (l->n == l->cap) {
        void *v = l->v;
        ac_status st = grow(&v, &l->cap, l->n + 1, sizeof *l->v);
        if (st != AC_OK)
            return st;
        l->v = v;
    }
    l->v[l->n++] = (piece){p, n};
    return AC_OK;
}

/* ---- BPE ---- */

static int heap_less(const merge_entry *a, const merge_entry *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static ac_status heap_push(encoder *e, uint32_t rank, uint32_t pos, int32_t new_id)
{
    if (e->heap_n == e->heap_cap) {
        void *p = e->heap;
        ac_status st = grow(&p, &e->heap_cap, e->heap_n + 1, sizeof *e->heap);
        if (st != AC_OK)
            return st;
        e->heap = p;
    }
    merge_entry m = {rank, pos, new_id};
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&m, &e->heap[parent]))
            break;
        e->heap[i] = e->heap[parent];
        i = parent;
    }
    e->heap[i] = m;
    return AC_OK;
}

static merge_entry heap_pop(encoder *e)
{
    merge_entry top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!heap_less(&e->heap[c], &last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

static int find_merge(const ac_tokenizer *tok, int32_t left, int32_t right, uint32_t *rank, int32_t *new_id)
{
    uint64_t v;
    if (!tok_umap_get(&tok->merges, (uint64_t)(uint32_t)left << 32 | (uint32_t)right, &v))
        return 0;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return 1;
}

static ac_status push_pair(encoder *e, int32_t pos)
{
    const symbol *s = &e->syms[pos];
    uint32_t rank;
    int32_t new_id;
    if (s->next >= 0 && find_merge(e->tok, s->id, e->syms[s->next].id, &rank, &new_id))
        return heap_push(e, rank, (uint32_t)pos, new_id);
    return AC_OK;
}

static int cache_lookup(encoder *e, const unsigned char *p, size_t n, ac_status *st)
{
    ac_tokenizer *tok = (ac_tokenizer *)e->tok; /* the cache is the one mutable part */
    uint64_t v;
    int hit = 0;
    *st = AC_OK;
    pthread_mutex_lock(&tok->cache_lock);
    if (tok_bmap_get(&tok->cache, p, n, &v)) {
        hit = 1;
        size_t off = (size_t)(v >> 16), cnt = (size_t)(v & 0xffff);
        for (size_t i = 0; i < cnt && *st == AC_OK; i++)
            *st = push_id(e, tok->cache_ids[off + i]);
    }
    pthread_mutex_unlock(&tok->cache_lock);
    return hit;
}

static void cache_store(encoder *e, const unsigned char *p, size_t n, const int32_t *ids, size_t cnt)
{
    ac_tokenizer *tok = (ac_tokenizer *)e->tok;
    pthread_mutex_lock(&tok->cache_lock);
    if (tok->cache.count >= TOK_CACHE_MAX_ENTRIES) {
        tok_bmap_clear(&tok->cache);
        tok->cache_ids_len = 0;
    }
    void *q = tok->cache_ids;
    if (grow(&q, &tok->cache_ids_cap, tok->cache_ids_len + cnt, sizeof(int32_t)) == AC_OK) {
        tok->cache_ids = q;
        int existed = 0;
        if (tok_bmap_put(&tok->cache, p, n, (uint64_t)tok->cache_ids_len << 16 | cnt, 0, &existed) == AC_OK &&
            !existed) {
            if (cnt)
                memcpy(tok->cache_ids + tok->cache_ids_len, ids, cnt * sizeof *ids);
            tok->cache_ids_len += cnt;
        }
    }
    ac_clear_error(); /* a failed store only costs speed */
    pthread_mutex_unlock(&tok->cache_lock);
}

static ac_status add_symbol(encoder *e, size_t *ns, int32_t id)
{
    if (*ns == e->syms_cap) {
        void *p = e->syms;
        ac_status st = grow(&p, &e->syms_cap, *ns + 1, sizeof *e->syms);
        if (st != AC_OK)
            return st;
        e->syms = p;
    }
    int32_t i = (int32_t)*ns;
    e->syms[i] = (symbol){.id = id, .prev = i - 1, .next = -1, .alive = 1};
    if (i > 0)
        e->syms[i - 1].next = i;
    (*ns)++;
    return AC_OK;
}

static ac_status bpe_piece(encoder *e, const unsigned char *p, size_t n)
{
    const ac_tokenizer *tok = e->tok;
    ac_status st;
    if (tok->ignore_merges) {
        uint64_t v;
        if (tok_bmap_get(&tok->vocab_bytes, p, n, &v))
            return push_id(e, (int32_t)v);
    }
    int cacheable = n <= TOK_CACHE_MAX_WORD;
    if (cacheable && cache_lookup(e, p, n, &st))
        return st;
    if (n > INT32_MAX / 2)
        return ac_fail(AC_ERR_UNSUPPORTED, "tokenizer: a %zu-byte piece is too long", n);

    /* the byte symbols; a byte without one becomes unk_token, or is dropped when there
     * is none (as the library does) */
    size_t ns = 0;
    int pending_unk = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[p[i]];
        if (id >= 0) {
            if (pending_unk && (st = add_symbol(e, &ns, tok->unk_id)) != AC_OK)
                return st;
            pending_unk = 0;
            if ((st = add_symbol(e, &ns, id)) != AC_OK)
                return st;
        } else if (tok->unk_id >= 0) {
            if (pending_unk && !tok->fuse_unk && (st = add_symbol(e, &ns, tok->unk_id)) != AC_OK)
                return st;
            pending_unk = 1;
        }
    }
    if (pending_unk && (st = add_symbol(e, &ns, tok->unk_id)) != AC_OK)
        return st;

    /* lowest rank first, leftmost first on a tie; entries made stale by an earlier
     * merge are recognised by the pair no longer making the same token */
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        if ((st = push_pair(e, (int32_t)i)) != AC_OK)
            return st;
    while (e->heap_n) {
        merge_entry top = heap_pop(e);
        symbol *s = &e->syms[top.pos];
        if (!s->alive || s->next < 0)
            continue;
        symbol *r = &e->syms[s->next];
        uint32_t rank;
        int32_t new_id;
        if (!find_merge(tok, s->id, r->id, &rank, &new_id) || new_id != top.new_id)
            continue;
        s->id = new_id;
        r->alive = 0;
        s->next = r->next;
        if (r->next >= 0)
            e->syms[r->next].prev = (int32_t)top.pos;
        if (s->prev >= 0 && (st = push_pair(e, s->prev)) != AC_OK)
            return st;
        if ((st = push_pair(e, (int32_t)top.pos)) != AC_OK)
            return st;
    }

    size_t first = *e->count;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->syms[i].next)
        if ((st = push_id(e, e->syms[i].id)) != AC_OK)
            return st;
    if (cacheable)
        cache_store(e, p, n, *e->ids + first, *e->count - first);
    return AC_OK;
}

/* ---- pre-tokenization ---- */

static ac_status add_segment(encoder *e, size_t *ns, size_t start, size_t end, int match)
{
    if (*ns == e->segs_cap) {
        void *p = e->segs;
        ac_status st = grow(&p, &e->segs_cap, *ns + 1, sizeof *e->segs);
        if (st != AC_OK)
            return st;
        e->segs = p;
    }
    e->segs[(*ns)++] = (segment){start, end, match};
    return AC_OK;
}

/* Splits one piece by a step's pattern the way NormalizedString::split does. */
static ac_status split_piece(encoder *e, const tok_regex *re, tok_split_behavior behavior, int invert, piece p,
                             piece_list *out)
{
    size_t ns = 0, prev = 0;
    ac_status st;
    for (;;) {
        size_t ms, me;
        int r = tok_regex_find(re, e->md, p.p, p.n, prev, &ms, &me);
        if (r < 0)
            return AC_ERR_UNSUPPORTED;
        if (!r)
            break;
        if (ms > prev && (st = add_segment(e, &ns, prev, ms, 0)) != AC_OK)
            return st;
        if ((st = add_segment(e, &ns, ms, me, 1)) != AC_OK)
            return st;
        prev = me;
    }
    if (prev < p.n && (st = add_segment(e, &ns, prev, p.n, 0)) != AC_OK)
        return st;
    if (invert)
        for (size_t i = 0; i < ns; i++)
            e->segs[i].match = !e->segs[i].match;

    segment *s = e->segs;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < ns; i++)
            if ((st = push_piece(out, p.p + s[i].start, s[i].end - s[i].start)) != AC_OK)
                return st;
        return AC_OK;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < ns; i++)
            if (!s[i].match && (st = push_piece(out, p.p + s[i].start, s[i].end - s[i].start)) != AC_OK)
                return st;
        return AC_OK;
    case TOK_SPLIT_CONTIGUOUS:
    case TOK_SPLIT_MERGED_WITH_PREVIOUS: {
        /* fold in place: k segments kept so far */
        size_t k = 0;
        int previous_match = 0;
        for (size_t i = 0; i < ns; i++) {
            int join = behavior == TOK_SPLIT_CONTIGUOUS ? s[i].match == previous_match
                                                        : s[i].match && !previous_match;
            if (join && k > 0)
                s[k - 1].end = s[i].end;
            else
                s[k++] = s[i];
            previous_match = s[i].match;
        }
        for (size_t i = 0; i < k; i++)
            if ((st = push_piece(out, p.p + s[i].start, s[i].end - s[i].start)) != AC_OK)
                return st;
        return AC_OK;
    }
    case TOK_SPLIT_MERGED_WITH_NEXT: {
        /* the same fold from the right; kept segments fill the array from its end */
        size_t k = ns;
        int previous_match = 0;
        for (size_t i = ns; i-- > 0;) {
            segment cur = s[i];
            if (cur.match && !previous_match && k < ns)
                s[k].start = cur.start;
            else
                s[--k] = cur;
            previous_match = cur.match;
        }
        for (size_t i = k; i < ns; i++)
            if ((st = push_piece(out, p.p + s[i].start, s[i].end - s[i].start)) != AC_OK)
                return st;
        return AC_OK;
    }
    }
    return ac_fail(AC_ERR_INTERNAL, "tokenizer: unknown split behavior %d", (int)behavior);
}

static ac_status apply_step(encoder *e, const tok_step *step, const piece_list *in, piece_list *out)
{
    out->n = 0;
    ac_status st;
    for (size_t i = 0; i < in->n; i++) {
        piece p = in->v[i];
        if (step->kind == TOK_STEP_SPLIT) {
            if ((st = split_piece(e, &step->regex, step->behavior, step->invert, p, out)) != AC_OK)
                return st;
            continue;
        }
        if (step->add_prefix_space && p.p[0] != ' ') {
            unsigned char *q = tok_arena_alloc(&e->scratch, p.n + 1);
            if (!q)
                return nomem();
            q[0] = ' ';
            memcpy(q + 1, p.p, p.n);
            p = (piece){q, p.n + 1};
        }
        st = step->has_regex ? split_piece(e, &step->regex, TOK_SPLIT_ISOLATED, 0, p, out)
                             : push_piece(out, p.p, p.n);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

/* Text without added tokens: the pre-tokenizer, then BPE on each piece. */
static ac_status encode_plain(encoder *e, const unsigned char *s, size_t n)
{
    const ac_tokenizer *tok = e->tok;
    piece_list *in = &e->lists[0], *out = &e->lists[1];
    in->n = 0;
    ac_status st = push_piece(in, s, n);
    for (size_t k = 0; st == AC_OK && k < tok->step_count; k++) {
        st = apply_step(e, &tok->steps[k], in, out);
        piece_list *t = in;
        in = out;
        out = t;
    }
    for (size_t i = 0; st == AC_OK && i < in->n; i++)
        st = bpe_piece(e, in->v[i].p, in->v[i].n);
    tok_arena_free(&e->scratch);
    return st;
}

/* ---- added tokens ---- */

/* The character ending at s[pos] (not before lo): its length, *cp = UINT32_MAX when the
 * bytes there are not valid UTF-8 (then the length is 1). */
static size_t char_before(const unsigned char *s, size_t lo, size_t pos, uint32_t *cp)
{
    size_t k = pos - 1;
    int back = 0;
    while (k > lo && back < 3 && (s[k] & 0xc0) == 0x80) {
        k--;
        back++;
    }
    int l = tok_utf8_decode(s + k, pos - k, cp);
    if (l && k + (size_t)l == pos)
        return (size_t)l;
    *cp = UINT32_MAX;
    return 1;
}

static size_t char_at(const unsigned char *s, size_t n, size_t pos, uint32_t *cp)
{
    int l = tok_utf8_decode(s + pos, n - pos, cp);
    if (l)
        return (size_t)l;
    *cp = UINT32_MAX;
    return 1;
}

int tok_is_word_char(const ac_tokenizer *tok, uint32_t cp)
{
    if (cp == UINT32_MAX || !tok->need_word_regex)
        return 0;
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    unsigned char buf[4];
    int l = tok_utf8_encode(cp, buf);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md)
        return 0;
    int rc = pcre2_match(tok->word_regex.code, buf, (size_t)l, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static ac_status encode_added(encoder *e, const unsigned char *s, size_t n, int pass);

/* One matching pass (0: tokens with normalized = false, 1: the others) over s[0..n),
 * as AddedVocabulary::find_matches does it: leftmost-longest matches, the search going
 * on from the end of each match, even one single_word rejects, and even where rstrip
 * took whitespace beyond it (a match starting in that whitespace is still a token). */
static ac_status encode_added(encoder *e, const unsigned char *s, size_t n, int pass)
{
    const ac_tokenizer *tok = e->tok;
    if (!n)
        return AC_OK;
    if (pass == 2)
        return encode_plain(e, s, n);
    if (!tok->added_pass_count[pass])
        return encode_added(e, s, n, pass + 1);
    size_t done = 0, i = 0;
    ac_status st;
    while (i < n) {
        unsigned b = s[i];
        const uint32_t *list = tok->added_by_byte[pass][b];
        const tok_added *hit = NULL;
        for (uint32_t k = 0; k < tok->added_by_byte_count[pass][b]; k++) {
            const tok_added *a = &tok->added[list[k]];
            if (a->len <= n - i && !memcmp(s + i, a->content, a->len)) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->len;
        i = stop;
        uint32_t cp;
        if (hit->single_word) {
            if (start > 0) {
                char_before(s, 0, start, &cp);
                if (tok_is_word_char(tok, cp))
                    continue;
            }
            if (stop < n) {
                char_at(s, n, stop, &cp);
                if (tok_is_word_char(tok, cp))
                    continue;
            }
        }
        if (hit->lstrip)
            while (start > done) {
                size_t l = char_before(s, done, start, &cp);
                if (!tok_is_white_space(cp))
                    break;
                start -= l;
            }
        if (hit->rstrip)
            while (stop < n) {
                size_t l = char_at(s, n, stop, &cp);
                if (!tok_is_white_space(cp))
                    break;
                stop += l;
            }
        if (start > done && (st = encode_added(e, s + done, start - done, pass + 1)) != AC_OK)
            return st;
        if ((st = push_id(e, hit->id)) != AC_OK)
            return st;
        done = stop;
    }
    return done < n ? encode_added(e, s + done, n - done, pass + 1) : AC_OK;
}

/* ---- entry points ---- */

ac_status ac_tokenizer_encode_append(const ac_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                     size_t *count, size_t *capacity)
{
    if (!len)
        return AC_OK;
    encoder e = {.tok = tok, .ids = ids, .count = count, .cap = capacity};
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md)
        return nomem();
    size_t start = *count;
    ac_status st = encode_added(&e, (const unsigned char *)text, len, 0);
    if (st != AC_OK)
        *count = start;
    pcre2_match_data_free(e.md);
    free(e.lists[0].v);
    free(e.lists[1].v);
    free(e.segs);
    free(e.syms);
    free(e.heap);
    tok_arena_free(&e.scratch);
    return st;
}

ac_status ac_tokenizer_encode(const ac_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *count)
{
    *ids = NULL;
    *count = 0;
    size_t cap = 0;
    ac_status st = ac_tokenizer_encode_append(tok, text, len, ids, count, &cap);
    if (st != AC_OK || !*count) {
        free(*ids);
        *ids = NULL;
        *count = 0;
    }
    return st;
}

ac_status ac_tokenizer_decode(const ac_tokenizer *tok, const int32_t *ids, size_t count, char **text, size_t *len)
{
    *text = NULL;
    if (len)
        *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->vocab_size || !tok->ids[id].token)
            return ac_fail(AC_ERR_INVALID, "decode: ids[%zu] = %d is not a token of %s (vocabulary size %d)", i,
                           (int)id, tok->name, (int)tok->vocab_size);
        total += tok->ids[id].bytes_len;
    }
    char *out = malloc(total + 1);
    if (!out)
        return ac_fail(AC_ERR_NOMEM, "decode: out of memory (%zu bytes)", total);
    size_t o = 0;
    for (size_t i = 0; i < count; i++) {
        const tok_id_info *info = &tok->ids[ids[i]];
        memcpy(out + o, info->bytes, info->bytes_len);
        o += info->bytes_len;
    }
    out[o] = '\0';
    *text = out;
    if (len)
        *len = o;
    return AC_OK;
}
