/* The inference engine: prefill, chunked prefill and decode are one call that appends
 * new tokens to each sequence's cache. */
#ifndef AUTOCOMPRESS_RUNTIME_H
#define AUTOCOMPRESS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/model.h"
#include "autocompress/status.h"

/* A sequence's state: K and V of every attention layer, conv and SSM state of every
 * Mamba layer. A new cache is an empty sequence. */
typedef struct ac_cache ac_cache;

ac_status ac_cache_create(const ac_model *model, ac_cache **cache);
void ac_cache_clear(ac_cache *cache);
void ac_cache_free(ac_cache *cache);
int ac_cache_tokens(const ac_cache *cache);
/* Bytes held now (KV grows with the sequence; Mamba state is fixed). */
size_t ac_cache_bytes(const ac_cache *cache);

typedef struct ac_runtime ac_runtime;

ac_status ac_runtime_create(const ac_model *model, ac_runtime **runtime);
void ac_runtime_free(ac_runtime *runtime);

typedef enum {
    AC_LOGITS_NONE,
    AC_LOGITS_LAST, /* [n_seqs, vocab]: each sequence's last new token */
    AC_LOGITS_ALL   /* [sum of n_tokens, vocab], sequences one after another */
} ac_logits_mode;

/* n_seqs sequences, each with n_tokens[s] >= 1 new tokens appended to caches[s]; the
 * caches must be distinct. */
typedef struct {
    int n_seqs;
    const int32_t *const *tokens;
    const int *n_tokens;
    ac_cache *const *caches;
} ac_batch;

ac_status ac_runtime_forward(ac_runtime *runtime, const ac_batch *batch, ac_logits_mode mode,
                             float *logits);

#endif
