/* One training step over a [batch, seq_len] block of tokens: forward with saved block
 * inputs, a loss (cross-entropy or distillation), and the backward to weight and mask
 * gradients. Each block's internals are recomputed in the backward from its input, so
 * activation memory is one residual stream per layer plus one block's temporaries. */
#ifndef AUTOCOMPRESS_TRAIN_H
#define AUTOCOMPRESS_TRAIN_H

#include <stdint.h>

#include "autocompress/comm.h"
#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/optim.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_train_step ac_train_step;

ac_status ac_train_step_create(const ac_model *model, int batch, int seq_len, ac_train_step **step);
void ac_train_step_free(ac_train_step *step);

typedef struct {
    const int32_t *tokens;        /* [batch, seq_len] inputs */
    const int32_t *targets;       /* [batch, seq_len] next tokens (< 0: ignored): cross-entropy */
    const float *teacher_logits;  /* [batch, seq_len, vocab]: distillation (instead of targets) */
    float kd_tau;                 /* distillation temperature (> 0) */
    const ac_masks *masks;        /* NULL: the full model */
    ac_model *grads;              /* a model of the same arch receiving dL/dW (+=); NULL: none */
    ac_mask_grads *mask_grads;    /* dL/dmask (+=); NULL: none */
    int64_t loss_positions;       /* > 0: the loss is a mean over this many positions (a rank's
                                     share of a global batch), not over this step's own */
} ac_step_inputs;

/* Forward and backward; *loss is the mean over counted positions (cross-entropy) or over
 * all positions (tau^2 KL for distillation), or the sum over this step's positions
 * divided by loss_positions when that is set. Gradients are those of that loss. A bf16
 * serving copy (ac_model_to_device_as) is refused: it has losses, not gradients. */
ac_status ac_train_step_run(ac_train_step *step, const ac_step_inputs *in, double *loss);
/* Forward and loss only (evaluation, of a bf16 serving copy too); the logits of the last
 * call stay readable. */
ac_status ac_train_step_loss(ac_train_step *step, const ac_step_inputs *in, double *loss);
/* [batch * seq_len, vocab] logits of the last forward. */
const float *ac_train_step_logits(const ac_train_step *step);

/* ---- the training loop: `autocompress train` and `autocompress distill` ---- */

typedef struct {
    const char *data_dir;        /* train.bin and val.bin from `autocompress tokenize` */
    const char *out_dir;         /* checkpoint/, loss.csv, and the final model */
    const ac_model *teacher;     /* distillation when set */
    float kd_tau;
    int batch, seq_len, steps;
    ac_adamw_params optim;       /* total_steps is set to steps */
    uint64_t seed;               /* batches are a function of (seed, step) */
    int checkpoint_every;        /* steps between checkpoints (0: only at the end) */
    int eval_every, eval_batches;/* validation loss every N steps over the first M batches (0: never) */
    ac_progress_mode progress;
    ac_comm *comm;               /* data-parallel ranks (NULL: one process): each takes its shard of
                                    every batch; rank 0 writes the checkpoints, the log and the model */
} ac_train_params;

ac_train_params ac_train_default_params(void);

typedef struct {
    int steps_done;
    int resumed_from;            /* the checkpoint's step, or -1 when the run started fresh */
    double last_loss, last_val_loss;
    double tokens_per_second;
} ac_train_report;

/* Trains `*model` in place (or the model of out_dir/checkpoint, which replaces it, when
 * the run is being resumed). Resuming needs the same settings: a checkpoint from other
 * settings is an error. Writes out_dir/config.json + model.safetensors at the end. */
ac_status ac_train_run(ac_model **model, const ac_train_params *params, ac_train_report *report);

/* The mean loss of the last `last` steps in a run's loss.csv (fewer when the run is
 * shorter), with the number of steps averaged: the paper's "KD loss over the final 25
 * iterations", on batches that are a function of (seed, step) and so matched across
 * runs with the same seed. */
ac_status ac_train_tail_loss(const char *loss_csv, int last, double *mean, int *steps);

#ifdef __cplusplus
}
#endif

#endif
