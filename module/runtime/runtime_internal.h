/* What the block files share with the forward driver. */
#ifndef AC_RUNTIME_INTERNAL_H
#define AC_RUNTIME_INTERNAL_H

#include "autocompress/runtime.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"

typedef struct {
    int tokens;        /* tokens seen before this call */
    int capacity;      /* KV rows allocated per attention layer */
    float **k, **v;    /* per layer: [n_kv, capacity, hd], NULL unless attention */
    float **conv;      /* per layer: [conv_dim, K-1], NULL unless Mamba */
    float **ssm;       /* per layer: [H, P, N] */
} ac_cache_layers;

struct ac_cache {
    const ac_model *model;
    ac_cache_layers l;
};

/* The packed batch: sequence s owns rows offset[s] .. offset[s] + len[s] - 1. */
typedef struct {
    int n;
    int total;
    int *offset;
    int *len;
    ac_cache *const *caches;
} ac_seqs;

struct ac_runtime {
    const ac_model *model;
    ac_kctx kctx;
    int capacity_tokens;   /* rows the buffers below hold */
    size_t scratch_per_token;
    float *x;              /* [T, D] residual stream */
    float *xn;             /* [T, D] normed block input */
    float *mix;            /* [T, D] block output */
    float *scratch;        /* per-block temporaries, reset every block */
    size_t scratch_used;
    void *workspace;       /* kernel workspace (attention scores), grown to the longest sequence */
    size_t workspace_bytes;
    int *offset, *len;     /* [n_seqs] */
    int seqs_capacity;
};

/* Bump allocation from the runtime's scratch, planned at create time per token. */
float *ac_scratch(ac_runtime *rt, size_t count);

/* Per-token scratch each block kind needs (floats), for planning. */
size_t ac_mamba2_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_attention_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_mlp_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_moe_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);

/* Block mixers: out[T, D] = mixer(xn) for the packed batch, advancing the caches. */
void ac_mamba2_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out);
void ac_attention_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out);
void ac_mlp_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out);
void ac_moe_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out);

/* Grows every attention layer's KV to hold `tokens` rows. */
ac_status ac_cache_reserve(ac_cache *cache, int tokens);

#endif
