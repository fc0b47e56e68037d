/* The tokenizer's building blocks: an arena, two hash maps, UTF-8 and Unicode helpers,
 * GPT-2's byte-to-symbol table, and PCRE2 regexes with Oniguruma's \s and \w. */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

struct tok_arena_block {
    tok_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK = 256 << 10 };

void *tok_arena_alloc(tok_arena *arena, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    tok_arena_block *b = arena->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = arena->head;
        arena->head = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

char *tok_arena_strndup(tok_arena *arena, const char *s, size_t len)
{
    char *p = tok_arena_alloc(arena, len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void tok_arena_free(tok_arena *arena)
{
    tok_arena_block *b = arena->head;
    while (b) {
        tok_arena_block *next = b->next;
        free(b);
        b = next;
    }
    arena->head = NULL;
}

/* ---- hashing ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t tok_hash_bytes(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ mix64(k)) * 0xff51afd7ed558ccdULL;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < len; i++)
        tail |= (uint64_t)p[i] << (8 * i);
    h ^= mix64(tail ^ 0x5851f42d4c957f2dULL);
    return mix64(h);
}

/* ---- byte string map ---- */

static size_t bmap_find_slot(const tok_bmap *m, const void *key, size_t len, uint64_t h, int *found)
{
    size_t mask = m->index_cap - 1, i = (size_t)h & mask;
    for (;;) {
        uint32_t slot = m->index[i];
        if (!slot) {
            *found = 0;
            return i;
        }
        const tok_bmap_entry *e = &m->entries[slot - 1];
        if (e->hash == (uint32_t)h && e->len == len && (len == 0 || !memcmp(m->keys + e->off, key, len))) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
}

int tok_bmap_get(const tok_bmap *m, const void *key, size_t len, uint64_t *value)
{
    if (!m->count)
        return 0;
    int found;
    size_t i = bmap_find_slot(m, key, len, tok_hash_bytes(key, len), &found);
    if (found && value)
        *value = m->entries[m->index[i] - 1].value;
    return found;
}

static ac_status bmap_grow_index(tok_bmap *m)
{
    size_t cap = m->index_cap ? m->index_cap * 2 : 64;
    uint32_t *index = calloc(cap, sizeof *index);
    if (!index)
        return ac_fail(AC_ERR_NOMEM, "tokenizer: out of memory (hash index of %zu slots)", cap);
    free(m->index);
    m->index = index;
    m->index_cap = cap;
    for (size_t e = 0; e < m->count; e++) {
        size_t i = m->entries[e].hash & (cap - 1);
        while (index[i])
            i = (i + 1) & (cap - 1);
        index[i] = (uint32_t)(e + 1);
    }
    return AC_OK;
}

ac_status tok_bmap_put(tok_bmap *m, const void *key, size_t len, uint64_t value, int overwrite, int *existed)
{
    if (len > UINT32_MAX || m->count >= UINT32_MAX - 1)
        return ac_fail(AC_ERR_INVALID, "tokenizer: hash map key or size too large");
    if ((m->count + 1) * 2 > m->index_cap) {
        ac_status st = bmap_grow_index(m);
        if (st != AC_OK)
            return st;
    }
    uint64_t h = tok_hash_bytes(key, len);
    int found;
    size_t i = bmap_find_slot(m, key, len, h, &found);
    if (existed)
        *existed = found;
    if (found) {
        if (overwrite)
            m->entries[m->index[i] - 1].value = value;
        return AC_OK;
    }
    if (m->count == m->entries_cap) {
        size_t cap = m->entries_cap ? m->entries_cap * 2 : 64;
        tok_bmap_entry *entries = realloc(m->entries, cap * sizeof *entries);
        if (!entries)
            return ac_fail(AC_ERR_NOMEM, "tokenizer: out of memory (hash map of %zu entries)", cap);
        m->entries = entries;
        m->entries_cap = cap;
    }
    if (m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 1024;
        while (cap < m->keys_len + len)
            cap *= 2;
        unsigned char *keys = realloc(m->keys, cap);
        if (!keys)
            return ac_fail(AC_ERR_NOMEM, "tokenizer: out of memory (hash map keys of %zu bytes)", cap);
        m->keys = keys;
        m->keys_cap = cap;
    }
    if (len)
        memcpy(m->keys + m->keys_len, key, len);
    m->entries[m->count] = (tok_bmap_entry){.off = m->keys_len, .len = (uint32_t)len, .hash = (uint32_t)h, .value = value};
    m->keys_len += len;
    m->index[i] = (uint32_t)(++m->count);
    return AC_OK;
}

void tok_bmap_clear(tok_bmap *m)
{
    m->count = 0;
    m->keys_len = 0;
    if (m->index)
        memset(m->index, 0, m->index_cap * sizeof *m->index);
}

void tok_bmap_free(tok_bmap *m)
{
    free(m->keys);
    free(m->entries);
    free(m->index);
    memset(m, 0, sizeof *m);
}

/* ---- uint64 map ---- */

int tok_umap_get(const tok_umap *m, uint64_t key, uint64_t *value)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1, i = (size_t)mix64(key) & mask;
    for (;;) {
        if (m->keys[i] == key) {
            *value = m->values[i];
            return 1;
        }
        if (m->keys[i] == UINT64_MAX)
            return 0;
        i = (i + 1) & mask;
    }
}

static void umap_insert(uint64_t *keys, uint64_t *values, size_t cap, uint64_t key, uint64_t value, int *added)
{
    size_t mask = cap - 1, i = (size_t)mix64(key) & mask;
    while (keys[i] != UINT64_MAX && keys[i] != key)
        i = (i + 1) & mask;
    *added = keys[i] == UINT64_MAX;
    keys[i] = key;
    values[i] = value;
}

ac_status tok_umap_put(tok_umap *m, uint64_t key, uint64_t value)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *keys = malloc(cap * sizeof *keys), *values = malloc(cap * sizeof *values);
        if (!keys || !values) {
            free(keys);
            free(values);
            return ac_fail(AC_ERR_NOMEM, "tokenizer: out of memory (merge table of %zu slots)", cap);
        }
        memset(keys, 0xff, cap * sizeof *keys);
        int added;
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != UINT64_MAX)
                umap_insert(keys, values, cap, m->keys[i], m->values[i], &added);
        free(m->keys);
        free(m->values);
        m->keys = keys;
        m->values = values;
        m->cap = cap;
    }
    int added;
    umap_insert(m->keys, m->values, m->cap, key, value, &added);
    m->count += (size_t)added;
    return AC_OK;
}

void tok_umap_free(tok_umap *m)
{
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 ---- */

int tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (!n) {
        *cp = 0;
        return 0;
    }
    unsigned c = s[0];
    *cp = c;
    if (c < 0x80)
        return 1;
    int len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < (size_t)len)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

int tok_utf8_encode(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

int tok_is_white_space(uint32_t cp)
{
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0d);
    if (cp < 0x85)
        return 0;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* ---- GPT-2 byte symbols: the printable bytes !..~, ¡..¬, ®..ÿ stand for themselves;
 * the other 68 (0..32, 127..160, 173) take 256, 257, ... in byte order. ---- */

static int printable_byte(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tok_byte_to_cp(unsigned b)
{
    if (printable_byte(b))
        return b;
    if (b <= 32)
        return 256 + b;
    if (b <= 160)
        return 256 + 33 + (b - 127);
    return 256 + 67; /* 173 */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    if (cp <= 256 + 32)
        return (int)(cp - 256);
    if (cp <= 256 + 66)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67)
        return 173;
    return -1;
}

/* ---- regexes ---- */

/* Oniguruma's (and Rust's) Unicode \s is White_Space; PCRE2's also takes U+180E. Its \w
 * is Alphabetic, marks, decimal digits and connector punctuation, plus the Latin-1
 * fractions and superscripts; PCRE2 10.42's is letters, all numbers and "_". Both are
 * spelled out so the two engines agree (measured over every code point against the
 * `tokenizers` library; what still differs are characters newer than PCRE2's Unicode). */
#define WS_CLASS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define WORD_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Rewrites \s, \S, \w, \W (outside and, for the positive ones, inside classes). \S and
 * \W inside a class stay PCRE2's (they differ only on U+180E and on marks). */
static char *translate_oniguruma(const char *src, size_t n, size_t *out_len)
{
    strbuf b = {0};
    int in_class = 0;
    size_t i = 0;
    while (i < n) {
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char e = src[i + 1];
            if (e == 'Q') { /* \Q...\E: literal text */
                size_t end = i + 2;
                while (end < n && !(src[end] == '\\' && end + 1 < n && src[end + 1] == 'E'))
                    end++;
                end = end < n ? end + 2 : n;
                sb_add(&b, src + i, end - i);
                i = end;
                continue;
            }
            if (e == 's')
                sb_str(&b, in_class ? WS_CLASS : "[" WS_CLASS "]");
            else if (e == 'S' && !in_class)
                sb_str(&b, "[^" WS_CLASS "]");
            else if (e == 'w')
                sb_str(&b, in_class ? WORD_CLASS : "[" WORD_CLASS "]");
            else if (e == 'W' && !in_class)
                sb_str(&b, "[^" WORD_CLASS "]");
            else if (e == 'c' && i + 2 < n) { /* \cX: X is not syntax */
                sb_add(&b, src + i, 3);
                i += 3;
                continue;
            } else
                sb_add(&b, src + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            size_t start = i++;
            if (i < n && src[i] == '^')
                i++;
            if (i < n && src[i] == ']') /* a leading ] is literal */
                i++;
            sb_add(&b, src + start, i - start);
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && src[i + 1] == ':') { /* [:alpha:] */
            const char *close = NULL;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (src[j] == ':' && src[j + 1] == ']') {
                    close = src + j + 2;
                    break;
                }
            if (close) {
                sb_add(&b, src + i, (size_t)(close - (src + i)));
                i = (size_t)(close - src);
                continue;
            }
        }
        if (in_class && c == ']')
            in_class = 0;
        sb_add(&b, src + i, 1);
        i++;
    }
    if (b.failed || !b.p) {
        free(b.p);
        return NULL;
    }
    *out_len = b.len;
    return b.p;
}

ac_status tok_regex_compile(tok_regex *re, const char *pattern, size_t len, tok_regex_kind kind,
                            const char *name, const char *where)
{
    memset(re, 0, sizeof *re);
    char *translated = NULL;
    const char *src = pattern;
    size_t src_len = len;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (kind == TOK_RE_LITERAL) {
        options = PCRE2_UTF | PCRE2_LITERAL | PCRE2_MATCH_INVALID_UTF;
    } else if (kind == TOK_RE_ONIGURUMA) {
        translated = translate_oniguruma(pattern, len, &src_len);
        if (!translated)
            return ac_fail(AC_ERR_NOMEM, "%s: %s: out of memory", name, where);
        src = translated;
    }
    int err;
    PCRE2_SIZE err_off;
    re->code = pcre2_compile((PCRE2_SPTR)src, src_len, options, &err, &err_off, NULL);
    free(translated);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return ac_fail(AC_ERR_INVALID, "%s: %s: cannot compile the pattern: %s", name, where, (const char *)msg);
    }
    uint32_t have_jit = 0;
    if (pcre2_config(PCRE2_CONFIG_JIT, &have_jit) >= 0 && have_jit)
        re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return AC_OK;
}

void tok_regex_free(tok_regex *re)
{
    pcre2_code_free(re->code);
    re->code = NULL;
}

/* A match that ran out of the JIT's default 32 KiB stack, retried with a large one and
 * then with the interpreter. */
static int match_hard(const tok_regex *re, pcre2_match_data *md, const unsigned char *s, size_t n, size_t from)
{
    int rc = PCRE2_ERROR_JIT_STACKLIMIT;
    pcre2_match_context *ctx = pcre2_match_context_create(NULL);
    pcre2_jit_stack *stack = pcre2_jit_stack_create(256 << 10, 256 << 20, NULL);
    if (ctx && stack) {
        pcre2_jit_stack_assign(ctx, NULL, stack);
        rc = pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, from, 0, md, ctx);
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_NOMEMORY) {
        if (ctx)
            pcre2_set_heap_limit(ctx, 4u << 20); /* KiB: 4 GiB */
        rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_JIT, md, ctx);
    }
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
    return rc;
}

int tok_regex_find(const tok_regex *re, pcre2_match_data *md, const unsigned char *s, size_t n, size_t from,
                   size_t *start, size_t *end)
{
    while (from <= n) {
        int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, from, 0, md, NULL)
                         : pcre2_match(re->code, (PCRE2_SPTR)s, n, from, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = match_hard(re, md, s, n, from);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            ac_fail(AC_ERR_UNSUPPORTED, "tokenizer: the split pattern failed on a %zu-byte piece: %s", n,
                    (const char *)msg);
            return -1;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *start = ov[0];
            *end = ov[1];
            return 1;
        }
        /* an empty match: split nothing there, look again one character on */
        if (ov[0] >= n)
            return 0;
        uint32_t cp;
        int l = tok_utf8_decode(s + ov[0], n - ov[0], &cp);
        from = ov[0] + (size_t)(l ? l : 1);
    }
    return 0;
}
