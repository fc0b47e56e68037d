/* The weight arena's layout, shared by the runtime, io and the optimizer. */
#ifndef AC_MODEL_INTERNAL_H
#define AC_MODEL_INTERNAL_H

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

struct ac_model {
    ac_arch arch;
    float *arena;
    size_t arena_count;
    float *embeddings; /* [V, D] */
    float *norm_f;     /* [D] */
    float *lm_head;    /* [V, D]; equals embeddings when tied */
    ac_layer_weights *layers;
    ac_param *params;
    size_t n_params;
};

/* The arena's layout, built in two passes: the first only counts, the second assigns
 * each pointer slot and records the parameter's name and shape (model.c). */
typedef struct ac_layout ac_layout;
void ac_layout_param(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define AC_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

#endif
