/* The inference engine: prefill, chunked prefill and decode are one call that appends
 * new tokens to each sequence's cache. */
#ifndef AUTOCOMPRESS_RUNTIME_H
#define AUTOCOMPRESS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sequence's state: K and V of every attention layer, conv and SSM state of every
 * Mamba layer. A new cache is an empty sequence. */
typedef struct ac_cache ac_cache;

ac_status ac_cache_create(const ac_model *model, ac_cache **cache);
void ac_cache_clear(ac_cache *cache);
void ac_cache_free(ac_cache *cache);
int ac_cache_tokens(const ac_cache *cache);
/* Grows the KV of every layer to hold `tokens` rows ahead of time (a forward grows it
 * as it needs; a failure leaves the cache as it was). */
ac_status ac_cache_reserve(ac_cache *cache, int tokens);
/* Bytes held now (KV grows with the sequence; Mamba state is fixed), and of the fixed
 * state alone. */
size_t ac_cache_bytes(const ac_cache *cache);
size_t ac_cache_state_bytes(const ac_cache *cache);
/* A snapshot of the fixed state (ac_cache_state_bytes / sizeof(float) floats), and the
 * way back to it: the state restored and the sequence rewound to `tokens` (KV rows past
 * them are forgotten). */
void ac_cache_save_state(const ac_cache *cache, float *dst);
void ac_cache_restore_state(ac_cache *cache, const float *src, int tokens);

typedef struct ac_runtime ac_runtime;

ac_status ac_runtime_create(const ac_model *model, ac_runtime **runtime);
void ac_runtime_free(ac_runtime *runtime);
/* Bytes of activation buffers, scratch and kernel workspace held now (they grow to the
 * largest batch seen; the memory model's R predicts them). */
size_t ac_runtime_bytes(const ac_runtime *runtime);

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

/* Soft masks (autocompress/masks.h) applied by every later forward, as in training, so
 * a masked model is decoded and served like any other; NULL: the full model. The masks
 * stay the caller's and must outlive their use; layer_gate is read per layer. */
void ac_runtime_set_masks(ac_runtime *runtime, const ac_masks *masks);

/* A probe (autocompress/probe.h) measuring where each forward's time goes. Declared here
 * too, so attaching one needs only this header; the guard keeps the typedef single (a
 * repeated typedef is valid C11 and C++, not C99). */
#ifndef AC_PROBE_TYPEDEF
#define AC_PROBE_TYPEDEF
typedef struct ac_probe ac_probe;
#endif

/* Attaches a probe to a runtime (NULL detaches). The runtime does not own it. */
void ac_runtime_set_probe(ac_runtime *runtime, ac_probe *probe);

#ifdef __cplusplus
}
#endif

#endif
