/* Internals of the byte-level BPE tokenizer (tokenizer.h), shared by
 * tokenizer.c (loading), tokenizer_encode.c (encoding, decoding) and tokenizer_util.c
 * (hash maps, arena, UTF-8 and Unicode helpers, regexes). */
#ifndef AC_TOKENIZER_INTERNAL_H
#define AC_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"
#include "autocompress/tokenizer.h"

/* ---- a chunked arena: stable pointers, freed all at once ---- */

typedef struct tok_arena_block tok_arena_block;
typedef struct {
    tok_arena_block *head;
} tok_arena;

void *tok_arena_alloc(tok_arena *arena, size_t size);
/* A NUL-terminated copy of s[0..len). */
char *tok_arena_strndup(tok_arena *arena, const char *s, size_t len);
void tok_arena_free(tok_arena *arena);

/* ---- byte string -> uint64 map; the map keeps its own copy of each key ---- */

typedef struct {
    size_t off;    /* into keys */
    uint32_t len;
    uint32_t hash;
    uint64_t value;
} tok_bmap_entry;

typedef struct {
    unsigned char *keys;
    size_t keys_len, keys_cap;
    tok_bmap_entry *entries;
    size_t count, entries_cap;
    uint32_t *index;    /* open addressing; 0 = empty, else entry index + 1 */
    size_t index_cap;   /* a power of two, or 0 */
} tok_bmap;

uint64_t tok_hash_bytes(const void *data, size_t len);
/* 1 and *value when present. */
int tok_bmap_get(const tok_bmap *map, const void *key, size_t len, uint64_t *value);
/* Inserts or (overwrite) replaces; *existed (may be NULL) tells which. Without
 * overwrite an existing value is kept. */
ac_status tok_bmap_put(tok_bmap *map, const void *key, size_t len, uint64_t value, int overwrite, int *existed);
void tok_bmap_clear(tok_bmap *map);
void tok_bmap_free(tok_bmap *map);

/* ---- uint64 -> uint64 map (merge pairs); UINT64_MAX is not a valid key ---- */

typedef struct {
    uint64_t *keys;     /* UINT64_MAX = empty */
    uint64_t *values;
    size_t count, cap;  /* cap a power of two, or 0 */
} tok_umap;

int tok_umap_get(const tok_umap *map, uint64_t key, uint64_t *value);
ac_status tok_umap_put(tok_umap *map, uint64_t key, uint64_t value);
void tok_umap_free(tok_umap *map);

/* ---- UTF-8 and Unicode ---- */

/* Decodes one code point at s[0..n); returns its length (1-4), or 0 for an invalid or
 * truncated sequence (then *cp is the byte). */
int tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encodes cp (< 0x110000) into out[0..4); returns the length. */
int tok_utf8_encode(uint32_t cp, unsigned char *out);
/* Unicode White_Space (what \s means in Oniguruma and Rust's regex). */
int tok_is_white_space(uint32_t cp);

/* GPT-2's byte <-> symbol table: byte b is spelled as code point tok_byte_to_cp(b);
 * tok_cp_to_byte(cp) is the byte or -1. */
uint32_t tok_byte_to_cp(unsigned b);
int tok_cp_to_byte(uint32_t cp);

/* ---- regexes ---- */

typedef struct {
    pcre2_code *code;
    int jit; /* JIT-compiled */
} tok_regex;

typedef enum {
    TOK_RE_ONIGURUMA, /* a tokenizer.json Regex: \s, \S, \w, \W get Oniguruma's Unicode meaning */
    TOK_RE_LITERAL,   /* a tokenizer.json String: matched as is */
    TOK_RE_PCRE2      /* our own pattern, compiled as written */
} tok_regex_kind;

/* Compiles `pattern` for UTF-8 with Unicode properties, invalid UTF-8 allowed in the
 * subject, JIT when available. On failure the message names `name` (the file) and
 * `where` (the JSON path). */
ac_status tok_regex_compile(tok_regex *re, const char *pattern, size_t len, tok_regex_kind kind,
                            const char *name, const char *where);
void tok_regex_free(tok_regex *re);
/* Finds the first non-empty match in s[0..n) at or after `from`: 1 and [*start, *end),
 * 0 when there is none, -1 on a matcher failure (message set). */
int tok_regex_find(const tok_regex *re, pcre2_match_data *md, const unsigned char *s, size_t n, size_t from,
                   size_t *start, size_t *end);

/* The GPT-2 split used by ByteLevel when use_regex is true. */
#define TOK_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---- the tokenizer ---- */

typedef enum { TOK_STEP_SPLIT, TOK_STEP_BYTE_LEVEL } tok_step_kind;

typedef enum {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS
} tok_split_behavior;

typedef struct {
    tok_step_kind kind;
    int has_regex;        /* Split always; ByteLevel when use_regex */
    tok_regex regex;
    tok_split_behavior behavior;
    int invert;
    int add_prefix_space; /* ByteLevel */
} tok_step;

typedef struct {
    const char *content;
    size_t len;
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word, normalized;
} tok_added;

typedef struct {
    const char *token;          /* the token string, NULL for an unused id */
    const unsigned char *bytes; /* what the ByteLevel decoder makes of it */
    uint32_t bytes_len;
    unsigned char special;
    unsigned char added;
} tok_id_info;

enum {
    TOK_CACHE_MAX_WORD = 64,        /* longer pieces are not cached */
    TOK_CACHE_MAX_ENTRIES = 1 << 17 /* the cache is emptied when it reaches this */
};

struct ac_tokenizer {
    char *name;
    tok_arena arena;
    int32_t vocab_size;
    tok_id_info *ids;       /* [vocab_size] */
    tok_bmap vocab;         /* model vocabulary: token string -> id */
    tok_bmap vocab_bytes;   /* byte-level spellable entries: raw bytes -> id */
    int32_t byte_id[256];   /* the single-byte symbols, -1 when missing */
    tok_umap merges;        /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int ignore_merges;
    int32_t unk_id;         /* -1 when none */
    int fuse_unk;

    tok_added *added;
    size_t added_count;
    tok_bmap added_map;     /* content -> index in added */
    /* per pass (0: normalized = false, 1: normalized = true), per first byte, the
     * added tokens longest first */
    uint32_t *added_by_byte[2][256];
    uint32_t added_by_byte_count[2][256];
    size_t added_pass_count[2];
    int need_word_regex;
    tok_regex word_regex;   /* one \w character, for single_word */

    tok_step *steps;
    size_t step_count;

    pthread_mutex_t cache_lock;
    tok_bmap cache;         /* piece bytes -> (offset into cache_ids << 16 | count) */
    int32_t *cache_ids;
    size_t cache_ids_len, cache_ids_cap;
};

/* Whether code point cp is a word character for single_word (Rust's \w). */
int tok_is_word_char(const ac_tokenizer *tok, uint32_t cp);

#endif
