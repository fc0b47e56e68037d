/* Token shards: flat files of token ids for training and evaluation, a deterministic
 * batch sampler over them, and the corpus tokenizer that writes them.
 *
 * File format (little-endian), 32-byte header then the ids:
 *   0   char[8]  magic "ACTOKENS"
 *   8   u32      version (1)
 *   12  u32      vocab size (every id is below it)
 *   16  u64      token count
 *   24  u32      bytes per id: 2 when the vocab size is <= 65536, else 4
 *   28  u32      reserved (0)
 *   32  ids      count * bytes-per-id bytes, nothing after them
 *
 * An opened shard is memory-mapped and immutable: any number of threads may read it. */
#ifndef AUTOCOMPRESS_TOKENS_H
#define AUTOCOMPRESS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AC_TOKENS_MAGIC "ACTOKENS"
enum { AC_TOKENS_VERSION = 1, AC_TOKENS_HEADER_BYTES = 32 };

/* ---- reading ---- */

typedef struct ac_tokens ac_tokens;

/* Maps and validates `path`: AC_ERR_IO when it cannot be opened or mapped;
 * AC_ERR_INVALID naming the file and the problem for a bad magic, an unknown version, a
 * bytes-per-id that does not fit the vocab size, a nonzero reserved field, a file
 * shorter than the header ("truncated") or not exactly header + count ids ("count
 * mismatch"), or an id >= the vocab size (named by its position). */
ac_status ac_tokens_open(const char *path, ac_tokens **tokens);
void ac_tokens_close(ac_tokens *tokens);

const char *ac_tokens_path(const ac_tokens *tokens);
uint64_t ac_tokens_count(const ac_tokens *tokens);
uint32_t ac_tokens_vocab_size(const ac_tokens *tokens);
/* The id at position i, or -1 when i >= count. */
int32_t ac_tokens_get(const ac_tokens *tokens, uint64_t i);
/* Copies ids [start, start + n) to out; AC_ERR_INVALID when that runs past the end. */
ac_status ac_tokens_copy(const ac_tokens *tokens, uint64_t start, size_t n, int32_t *out);

/* ---- writing ---- */

typedef struct ac_tokens_writer ac_tokens_writer;

/* Starts `path` (written as path.tmp, renamed into place by close). */
ac_status ac_tokens_writer_open(const char *path, uint32_t vocab_size, ac_tokens_writer **writer);
/* Appends ids; AC_ERR_INVALID, naming the id, for one outside [0, vocab size). */
ac_status ac_tokens_writer_append(ac_tokens_writer *writer, const int32_t *ids, size_t n);
uint64_t ac_tokens_writer_count(const ac_tokens_writer *writer);
/* Writes the header, flushes and renames the file into place; frees the writer. */
ac_status ac_tokens_writer_close(ac_tokens_writer *writer);
/* Drops the partial file; frees the writer. */
void ac_tokens_writer_abort(ac_tokens_writer *writer);

/* ---- training batches ---- */

/* The start of window b of step `step`: a pure function of (seed, step, b, count,
 * seq_len), uniform over [0, count - seq_len - 1], so a resumed run sees exactly the
 * batches it would have seen. count must be > seq_len. */
uint64_t ac_tokens_window_start(uint64_t count, int seq_len, uint64_t seed, uint64_t step, int b);

/* Fills out[batch][seq_len + 1] with the windows ac_tokens_window_start picks for
 * (seed, step, b) (inputs are [0, seq_len), targets [1, seq_len]); `starts` (may be
 * NULL) receives the batch positions. AC_ERR_INVALID when the shard holds no more than
 * seq_len tokens or batch / seq_len are not positive. */
ac_status ac_tokens_sample_batch(const ac_tokens *tokens, uint64_t seed, uint64_t step, int batch, int seq_len,
                                 int32_t *out, uint64_t *starts);

/* ---- evaluation windows ---- */

/* Non-overlapping windows for evaluation: window k is ids [k*seq_len, k*seq_len +
 * seq_len], so consecutive windows share one boundary id and every id after the first
 * is a target exactly once. There are (count - 1) / seq_len of them (the tail that does
 * not fill a window is left out). */
uint64_t ac_tokens_window_count(const ac_tokens *tokens, int seq_len);

typedef struct {
    const ac_tokens *tokens;
    int seq_len;
    uint64_t next;  /* the next window */
    uint64_t total; /* ac_tokens_window_count */
} ac_tokens_iter;

void ac_tokens_iter_init(ac_tokens_iter *iter, const ac_tokens *tokens, int seq_len);
/* Copies up to `batch` next windows to out[batch][seq_len + 1]; returns how many (0 at
 * the end). */
int ac_tokens_iter_next(ac_tokens_iter *iter, int batch, int32_t *out);

/* ---- tokenizing a corpus into train.bin / val.bin ---- */

typedef enum {
    AC_DOCS_FORTUNE, /* entries separated by lines holding just "%" */
    AC_DOCS_LINES,   /* each non-blank line */
    AC_DOCS_FILES    /* each input file */
} ac_docs_format;

/* Parses "fortune", "lines" or "files". */
ac_status ac_docs_format_from_name(const char *name, ac_docs_format *format);
const char *ac_docs_format_name(ac_docs_format format);

typedef struct {
    const char *tokenizer_path;
    const char *out_dir;           /* created when missing */
    const char *const *inputs;
    size_t input_count;
    ac_docs_format format;
    int val_percent;               /* [0, 100]; default 5 */
    const char *eos_token;         /* appended after every document; default "<|endoftext|>" */
    ac_progress_mode progress;     /* default AC_PROGRESS_AUTO, on stderr */
} ac_tokenize_params;

ac_tokenize_params ac_tokenize_default_params(void);

typedef struct {
    uint64_t documents[2]; /* [0] train, [1] validation */
    uint64_t tokens[2];    /* with the end-of-document ids */
    uint64_t bytes[2];     /* document text */
    uint64_t input_bytes;
    double seconds;        /* tokenizing (not loading the tokenizer) */
} ac_tokenize_stats;

/* Tokenizes every document of the inputs, appends the end-of-document token, and
 * writes out_dir/train.bin, out_dir/val.bin and out_dir/manifest.json (the sources with
 * their counts, the per-split counts, the tokenizer's path, size and FNV-1a 64 checksum,
 * the split rule). A document goes to validation when fnv1a64(its bytes) % 100 <
 * val_percent, so the split depends on the text alone, not on order or on the other
 * documents. Documents are the bytes between separators, without the newline ending
 * their last line; blank ones are skipped. The outputs are byte-identical between runs
 * on the same inputs. A warning (ac_warn) names an input that yields exactly one
 * document under the fortune or lines format (a wrong format, likely) and a split that
 * gets no document though its share is > 0. */
ac_status ac_tokenize_corpus(const ac_tokenize_params *params, ac_tokenize_stats *stats);

/* FNV-1a 64 of data[0..len). */
uint64_t ac_fnv1a64(const void *data, size_t len);
/* 1 when a document goes to the validation split. */
int ac_document_is_validation(const void *text, size_t len, int val_percent);

#ifdef __cplusplus
}
#endif
#endif
