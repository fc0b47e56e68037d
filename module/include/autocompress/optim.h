/* AdamW with decoupled weight decay on matrices only, global-norm gradient clipping, and
 * a linear-warmup + cosine learning-rate schedule. */
#ifndef AUTOCOMPRESS_OPTIM_H
#define AUTOCOMPRESS_OPTIM_H

#include "autocompress/model.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr;            /* peak learning rate */
    float min_lr_ratio;  /* the cosine ends at lr * min_lr_ratio */
    int warmup_steps;    /* step t < warmup: lr (t + 1) / warmup */
    int total_steps;     /* the cosine runs from warmup to here */
    float beta1, beta2, eps;
    float weight_decay;  /* on parameters with two or more dimensions only */
    float clip_norm;     /* <= 0: no clipping */
} ac_adamw_params;

ac_adamw_params ac_adamw_default_params(void);
/* The learning rate of step t (counting from 0). */
float ac_adamw_lr(const ac_adamw_params *p, int t);

typedef struct ac_adamw ac_adamw;

ac_status ac_adamw_create(const ac_model *model, const ac_adamw_params *params, ac_adamw **opt);
void ac_adamw_free(ac_adamw *opt);
/* Updates the model from `grads` clipped to the global norm (the update reads them
 * scaled; grads itself is not modified); the pre-clip norm goes to *grad_norm (may be
 * NULL). The step counter advances. */
ac_status ac_adamw_step(ac_adamw *opt, ac_model *model, ac_model *grads, double *grad_norm);
/* The steps taken, counted on from the count last set with ac_adamw_set_steps_done: the
 * schedule's position, which a checkpoint saves and a resume sets back. */
int ac_adamw_steps_done(const ac_adamw *opt);
/* The moments, named like the model's parameters, for checkpoints: m then v, in the
 * memory of the model's device (host memory for a model on the CPU). */
float *ac_adamw_moments(ac_adamw *opt, size_t *count_each);
void ac_adamw_set_steps_done(ac_adamw *opt, int steps);

#ifdef __cplusplus
}
#endif

#endif
