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
    const struct ac_backend *backend; /* whose memory holds the arena; NULL: the host's */
    /* A serving copy (ac_model_to_device_as with bf16): the product weights (those laid
     * out by ac_layout_product) hold bf16 values although their pointers are typed
     * float; the runtime reads them through ac_rt_linear and its kin, and nothing trains,
     * saves or slices such a model. Its arena holds the arena_count floats, then the bf16
     * values. */
    int bf16;
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
/* A copy of model with its weights in be's memory (be NULL: the host's), from the host
 * or from be itself; ac_model_to_device by backend rather than name. */
ac_status ac_model_to_backend(const ac_model *model, const struct ac_backend *be, ac_model **out);

/* A copy of host model `model` with its weights in be's memory (NULL: the host's) and
 * stored as `weights` (AC_DTYPE_F32, or AC_DTYPE_BF16 for a serving copy). */
ac_status ac_model_to_backend_as(const ac_model *model, const struct ac_backend *be, ac_dtype weights,
                                 ac_model **out);

/* The weights as the ops read them: a product weight of a bf16 model as bf16 values. */
static inline const uint16_t *ac_model_bf16_view(const float *weights) { return (const uint16_t *)(const void *)weights; }

/* dst's weights = src's (the same layout; src in host memory or on dst's device). */
void ac_model_copy_weights(ac_model *dst, const ac_model *src);

/* The backend whose memory holds the model's weights (the CPU's for NULL backend), and so
 * its runtime's, caches' and training steps' buffers. */
const struct ac_backend *ac_model_backend(const ac_model *model);

/* A model of `arch` with every weight zero in be's memory (NULL: the host's). */
ac_status ac_model_create_on(const ac_arch *arch, const struct ac_backend *be, ac_model **out);

/* AC_OK when the model's weights are in host memory; otherwise fails naming `what`
 * (an operation that reads or writes weights from the host: saving, slicing, pruning). */
ac_status ac_model_check_host(const ac_model *model, const char *what);

typedef struct ac_layout ac_layout;
void ac_layout_param(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same for a weight that matrix products read (a projection, an expert, the
 * embeddings, the LM head): bf16 in a serving copy, from a 16-byte boundary. A NULL slot
 * continues the block the parameter before began (the experts after the first). */
void ac_layout_product(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define AC_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

#endif
