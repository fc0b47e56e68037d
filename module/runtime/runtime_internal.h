/* What the block files share with the forward driver. */
#ifndef AC_RUNTIME_INTERNAL_H
#define AC_RUNTIME_INTERNAL_H

#include "autocompress/masks.h"
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

/* The packed batch: sequence s owns rows offset[s] .. offset[s] + len[s] - 1.
 * caches == NULL (training) means every sequence starts empty and keeps no state. */
typedef struct {
    int n;
    int total;
    int *offset;
    int *len;
    ac_cache *const *caches;
} ac_seqs;

/* One block's masks (any may be NULL) and where their gradients go (NULL: not wanted). */
typedef struct {
    const float *mamba_heads, *experts, *ffn, *shared_ffn;
} ac_block_masks;
typedef struct {
    float *mamba_heads, *experts, *ffn, *shared_ffn;
} ac_block_mask_grads;

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
    struct ac_probe *probe; /* layer timing (autocompress/probe.h); NULL: off */
};

/* Plans the runtime for training on `total_tokens` packed tokens in `n_seqs` sequences:
 * scratch grows to the largest backward need of any block. */
ac_status ac_runtime_reserve_training(ac_runtime *rt, int total_tokens, int n_seqs);

/* Bump allocation from the runtime's scratch, planned at create time per token. */
float *ac_scratch(ac_runtime *rt, size_t count);

/* Per-token scratch each block kind needs (floats), for planning. */
size_t ac_mamba2_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_attention_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_mlp_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_moe_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);

/* Block mixers: out[T, D] = mixer(xn) for the packed batch, advancing the caches (if
 * any). masks may be NULL. */
void ac_mamba2_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out);
void ac_attention_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out);
void ac_mlp_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out);
void ac_moe_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out);

/* Block backward (training: seqs->caches is NULL). Recomputes what it needs from xn (so
 * a training step keeps only each block's input), then, given dout = dL/dout:
 *   dxn  [T, D] = dL/dxn, overwritten;
 *   grad         the layer's weight gradients, accumulated (+=); NULL: not wanted;
 *   mask_grads   accumulated (+=) for the masks given; NULL: not wanted.
 * Scratch comes from ac_scratch, planned by *_backward_scratch_per_token. */
void ac_mamba2_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                        const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads);
void ac_attention_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                           const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads);
void ac_mlp_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads);
void ac_moe_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads);
size_t ac_mamba2_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_attention_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_mlp_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);
size_t ac_moe_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b);

/* Grows every attention layer's KV to hold `tokens` rows. */
ac_status ac_cache_reserve(ac_cache *cache, int tokens);

#endif
