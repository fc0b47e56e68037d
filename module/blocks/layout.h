/* The weight arena's layout: a layer's weights as pointers into the arena, and the
 * parameters in checkpoint order. A layout is built in two passes over the same calls:
 * the first (no arena) only counts, the second assigns each pointer slot and records the
 * parameter's name and shape. The kinds add their mixers' tensors (ac_block_ops.layout);
 * model.c lays out the rest and owns the arena. */
#ifndef AC_BLOCKS_LAYOUT_H
#define AC_BLOCKS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/model.h"

/* Pointers into the arena for one layer; only those of the layer's kind are set. */
typedef struct {
    float *norm; /* [D] pre-norm */
    /* Mamba2 */
    float *in_proj;  /* [2 dI + 2 G N + H, D] rows: z | x B C | dt */
    float *conv_w;   /* [conv_dim, K] */
    float *conv_b;   /* [conv_dim] or NULL */
    float *dt_bias;  /* [H] */
    float *A_log;    /* [H] */
    float *D;        /* [H] */
    float *gate_norm; /* [dI] */
    float *out_proj; /* [D, dI] */
    /* attention */
    float *q_proj; /* [nH hd, D] */
    float *k_proj; /* [nKV hd, D] */
    float *v_proj; /* [nKV hd, D] */
    float *o_proj; /* [D, nH hd] */
    /* MLP, and the MoE's shared expert */
    float *up_proj;   /* [F, D] */
    float *down_proj; /* [D, F] */
    /* MoE */
    float *router;        /* [E, D] */
    float *router_bias;   /* [E] score-correction bias, selection only */
    float *experts_up;    /* [E, I, D] */
    float *experts_down;  /* [E, D, I] */
} ac_layer_weights;

typedef struct {
    int bf16;            /* a serving copy: product weights hold bf16 values after the floats */
    float *arena;        /* NULL: only counting */
    size_t arena_count;  /* floats of the arena (the second pass) */
    ac_param *params;    /* filled by the second pass */
    size_t offset;       /* floats laid out so far */
    size_t offset16;     /* a serving copy's bf16 values so far, after the floats */
    size_t n_params;
} ac_layout;

void ac_layout_param(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same for a weight that matrix products read (a projection, an expert, the
 * embeddings, the LM head): bf16 in a serving copy, from a 16-byte boundary. A NULL slot
 * continues the block the parameter before began (the experts after the first). */
void ac_layout_product(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define AC_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* Layer i of `arch`: its norm, then its block of dims b (the kind's layout). */
void ac_layout_block(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w);
/* The bytes a layout counted, a serving copy's floats padded to 16 bytes. */
size_t ac_layout_bytes(const ac_layout *l);
/* Where a serving copy's bf16 values start: past the arena's floats, at a 16-byte boundary. */
uint16_t *ac_layout_bf16_base(float *arena, size_t arena_count);

/* The weights as the ops read them: a product weight of a bf16 model as bf16 values. */
static inline const uint16_t *ac_model_bf16_view(const float *weights) { return (const uint16_t *)(const void *)weights; }

#endif
