/* The model: its arch and its weight arena, shared by the runtime, io and the optimizer.
 * A layer's weights and the arena's layout are the blocks' (blocks/layout.h). */
#ifndef AC_MODEL_INTERNAL_H
#define AC_MODEL_INTERNAL_H

#include "autocompress/model.h"
#include "blocks/block.h"

struct ac_model {
    ac_arch arch;
    const struct ac_backend *backend; /* whose memory holds the arena; NULL: the host's */
    /* A serving copy (ac_model_to_device_as with bf16): the product weights (those laid
     * out by ac_layout_product) hold bf16 values although their pointers are typed
     * float; the runtime reads them through ac_block_linear and its kin, and nothing trains,
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

/* A copy of model with its weights in be's memory (be NULL: the host's), from the host
 * or from be itself; ac_model_to_device by backend rather than name. */
ac_status ac_model_to_backend(const ac_model *model, const struct ac_backend *be, ac_model **out);

/* A copy of host model `model` with its weights in be's memory (NULL: the host's) and
 * stored as `weights` (AC_DTYPE_F32, or AC_DTYPE_BF16 for a serving copy). */
ac_status ac_model_to_backend_as(const ac_model *model, const struct ac_backend *be, ac_dtype weights,
                                 ac_model **out);

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


#endif
