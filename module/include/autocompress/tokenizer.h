/* Byte-level BPE tokenizers read from a Hugging Face tokenizer.json.
 *
 * Supported (anything else is refused at load with AC_ERR_UNSUPPORTED and the JSON path):
 *   model          {"type": "BPE", vocab, merges ("a b" strings or ["a", "b"] pairs),
 *                   ignore_merges, unk_token, fuse_unk}; no dropout, no byte_fallback,
 *                   no continuing_subword_prefix / end_of_word_suffix
 *   normalizer     null (or an empty Sequence)
 *   pre_tokenizer  ByteLevel {add_prefix_space, use_regex (the GPT-2 split)}, or a
 *                  Sequence of Split {pattern {Regex|String}, behavior Isolated | Removed |
 *                  MergedWithPrevious | MergedWithNext | Contiguous, invert} steps ending
 *                  in one ByteLevel (the Llama-3 / Nemotron form)
 *   decoder        ByteLevel (or a Sequence holding only ByteLevel)
 *   added_tokens   special or not, with lstrip / rstrip / single_word / normalized
 * post_processor, truncation and padding are ignored: encoding is the library's
 * `encode(text, add_special_tokens=False)`, so a template's BOS is never added.
 *
 * Encoding follows the `tokenizers` library: added tokens are cut out of the raw text
 * first (leftmost-longest; the normalized=false ones, then the normalized=true ones in
 * what is left), the rest goes through the pre-tokenizer and each piece through BPE
 * (lowest merge rank first, leftmost on ties; a cache keeps short words' ids). Split
 * regexes run in PCRE2 (UTF-8, Unicode properties, JIT when available) with \s, \S, \w
 * and \W rewritten to Oniguruma's Unicode meaning, which the library uses; checked over
 * every code point, they agree except on characters newer than PCRE2's Unicode tables
 * (Unicode 14 for PCRE2 10.42), and \S / \W inside a [...] class keep PCRE2's meaning
 * (U+180E, marks). The text is bytes: invalid UTF-8 is fine (the regexes never match
 * it, so it forms pieces of its own) and round-trips through decode, since every byte
 * has a byte-level symbol.
 *
 * Decoding maps each id's token through the ByteLevel decoder and concatenates the
 * bytes; unlike Python's decode it does not replace invalid UTF-8 with U+FFFD, so
 * decode(encode(text)) == text byte for byte (for added tokens whose content is not
 * plain ASCII the library's decoder does the same byte mapping, which this follows).
 *
 * A loaded tokenizer is immutable apart from an internal, locked cache of encoded
 * words: any number of threads may encode and decode with it at once. */
#ifndef AUTOCOMPRESS_TOKENIZER_H
#define AUTOCOMPRESS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_tokenizer ac_tokenizer;

/* Loads `path` (a tokenizer.json). AC_ERR_IO when it cannot be read; AC_ERR_INVALID for
 * malformed JSON (with line and column), missing or mistyped fields, merges naming
 * tokens that are not in the vocabulary, duplicate tokens or ids; AC_ERR_UNSUPPORTED for
 * valid files using components this reader does not implement. Messages start with the
 * file name and name the JSON path ("model.merges[12]"). */
ac_status ac_tokenizer_load(const char *path, ac_tokenizer **tokenizer);
/* The same from a buffer; `name` stands for the file in messages. */
ac_status ac_tokenizer_load_buffer(const char *json, size_t len, const char *name, ac_tokenizer **tokenizer);
void ac_tokenizer_free(ac_tokenizer *tokenizer);

/* 1 + the largest id of the vocabulary and the added tokens (the embedding rows a
 * model needs). Some ids below it may be unused. */
int32_t ac_tokenizer_vocab_size(const ac_tokenizer *tokenizer);

/* The id of a token string (an added token's content, or a vocabulary entry in its
 * byte-level spelling, e.g. "Ġthe"), or -1. */
int32_t ac_tokenizer_token_to_id(const ac_tokenizer *tokenizer, const char *token);
/* The token string of an id (NUL-terminated, valid while the tokenizer lives), or NULL
 * for an unused or out-of-range id. */
const char *ac_tokenizer_id_to_token(const ac_tokenizer *tokenizer, int32_t id);
/* 1 when `id` is an added token marked special. */
int ac_tokenizer_is_special(const ac_tokenizer *tokenizer, int32_t id);

/* Encodes text[0..len) and stores a malloc'd array of *count ids in *ids (NULL when
 * *count is 0); the caller frees it. */
ac_status ac_tokenizer_encode(const ac_tokenizer *tokenizer, const char *text, size_t len, int32_t **ids,
                              size_t *count);
/* The same, appending at (*ids)[*count] to a growable array of *capacity entries
 * (realloc'd as needed; start with NULL, 0, 0). On failure the ids appended so far are
 * dropped again and the array stays valid. */
ac_status ac_tokenizer_encode_append(const ac_tokenizer *tokenizer, const char *text, size_t len, int32_t **ids,
                                     size_t *count, size_t *capacity);

/* Decodes ids[0..count) into a malloc'd, NUL-terminated buffer of *len bytes (len may
 * be NULL; the bytes may contain NULs). AC_ERR_INVALID naming the position for an id
 * that is out of range or unused. */
ac_status ac_tokenizer_decode(const ac_tokenizer *tokenizer, const int32_t *ids, size_t count, char **text,
                              size_t *len);

#ifdef __cplusplus
}
#endif
#endif
