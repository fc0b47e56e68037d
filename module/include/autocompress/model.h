/* A model in memory: one ac_arch and one f32 weight arena. */
#ifndef AUTOCOMPRESS_MODEL_H
#define AUTOCOMPRESS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/dtype.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_model ac_model;

/* One named parameter: a view into the arena, named as in Hugging Face checkpoints
 * without the "model."/"backbone." prefix (e.g. "layers.3.mixer.in_proj.weight"). */
typedef struct {
    char name[96];
    float *data; /* floats, or bf16 values (uint16_t) where dtype says so */
    ac_dtype dtype; /* AC_DTYPE_F32, or AC_DTYPE_BF16 for a serving copy's product weights */
    int ndim;
    int64_t shape[3];
    size_t count;
} ac_param;

/* A model with the given architecture and all weights zero. */
ac_status ac_model_create(const ac_arch *arch, ac_model **model);
/* Loads DIR/config.json (nemotron_h or nemotron_h_puzzle) and its safetensors (single
 * file or sharded), converting every weight to f32. */
ac_status ac_model_load(const char *dir, ac_model **model);
/* Writes DIR/config.json (the puzzle form when layers differ) and DIR/model.safetensors
 * with weights in `dtype` (F32 or BF16; norms, A_log, D, dt_bias and the router's
 * correction bias always F32). */
ac_status ac_model_save(const ac_model *model, const char *dir, ac_dtype dtype);
void ac_model_free(ac_model *model);
/* Random weights for training from scratch (deterministic in seed); std for matrices. */
void ac_model_init_random(ac_model *model, uint64_t seed, float std);
/* A model of `arch` whose layer i takes the leading channels, heads and experts of
 * parent layer parent_layer[i] (NULL: layer i; same kind, or a MoE parent's shared
 * expert for an MLP layer); every part the parent lacks (a larger dim, another kind, a
 * layer index < 0) is random (seed). */
ac_status ac_model_slice(const ac_model *parent, const ac_arch *arch, const int *parent_layer, uint64_t seed,
                         ac_model **out);

/* A copy of model whose weights live on `device` ("cpu": host memory; "cuda": the GPU's
 * memory, one arena), from the host or from that device: the runtime and training steps
 * compute where their model's weights are. Fails naming the device when it is not in
 * this build or not on this machine, or its memory is short. Saving a model on a device
 * stages it through the host; slicing and pruning need the host copy. */
ac_status ac_model_to_device(const ac_model *model, const char *device, ac_model **out);
/* AC_OK when ac_model_to_device could place a model on `device` here (NULL and "cpu"
 * always); else AC_ERR_UNSUPPORTED with the reason it would give ('device "cuda": not in
 * this build ...', 'device "cuda": no CUDA device: no GPU ...'), before any work. */
ac_status ac_device_check(const char *device);
/* *model replaced by its copy on `device` (as ac_model_to_device), the original freed;
 * on failure *model is freed and NULL. NULL *model or device "cpu": nothing to do. */
ac_status ac_model_move_to_device(ac_model **model, const char *device);
/* ac_model_to_device with the weights stored as `weights`: AC_DTYPE_F32 is
 * ac_model_to_device; AC_DTYPE_BF16 makes a serving copy from a host f32 model, whose
 * product weights (the embeddings, the LM head, every projection and expert: what matrix
 * products read) are rounded to bf16, about half the memory; the norms, convolutions,
 * SSM parameters and the router stay f32. Its products round their inputs to bf16 and
 * sum in f32 (kernels.h). It serves (the runtime's prefill and decode, masked or not) and
 * has losses (ac_train_step_loss, so eval); training, saving, slicing, pruning and
 * copying it refuse it. */
ac_status ac_model_to_device_as(const ac_model *model, const char *device, ac_dtype weights, ac_model **out);
/* *model replaced by its copy (as ac_model_to_device_as), the original freed; on failure
 * *model is freed and NULL. NULL *model: nothing to do. */
ac_status ac_model_move_to_device_as(ac_model **model, const char *device, ac_dtype weights);
/* The bytes of arch's weights stored as `weights` (AC_DTYPE_F32: 4 a weight;
 * AC_DTYPE_BF16: a serving copy's, ac_model_to_device_as), and of one layer of dims b
 * (its norm and block) alone: what the memory formula's W counts. */
size_t ac_arch_weight_bytes(const ac_arch *arch, ac_dtype weights);
size_t ac_block_weight_bytes(const ac_arch *arch, const ac_block_dims *b, ac_dtype weights);
/* AC_DTYPE_BF16 for a serving copy made by ac_model_to_device_as, else AC_DTYPE_F32. */
ac_dtype ac_model_weights_dtype(const ac_model *model);
/* Every weight zero, where the weights live (a gradient accumulator between steps). */
void ac_model_zero(ac_model *model);
/* "cpu" for a model in host memory, else its device's name. */
const char *ac_model_device(const ac_model *model);

const ac_arch *ac_model_arch(const ac_model *model);
/* Every parameter in checkpoint order; routed experts appear one tensor per expert. */
size_t ac_model_param_count(const ac_model *model);
const ac_param *ac_model_param(const ac_model *model, size_t i);
const ac_param *ac_model_find_param(const ac_model *model, const char *name);
/* The arena: every weight, contiguous (optimizers and checkpoints walk it whole). */
float *ac_model_arena(ac_model *model, size_t *count);

#ifdef __cplusplus
}
#endif

#endif
