#include "autocompress/optim.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"

struct ac_adamw {
    ac_adamw_params p;
    size_t count;
    float *m; /* [count] then v [count], in the model arena's layout, where its weights are */
    float *v;
    int steps;
    ac_kctx kctx; /* the model's backend */
};

ac_adamw_params ac_adamw_default_params(void)
{
    return (ac_adamw_params){.lr = 3e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 100, .total_steps = 1000,
                             .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip_norm = 1.0f};
}

float ac_adamw_lr(const ac_adamw_params *p, int t)
{
    if (t < p->warmup_steps)
        return p->lr * (float)(t + 1) / (float)p->warmup_steps;
    float min_lr = p->lr * p->min_lr_ratio;
    int span = p->total_steps - p->warmup_steps;
    float progress = span > 0 ? fminf(1.0f, (float)(t - p->warmup_steps) / (float)span) : 1.0f;
    return min_lr + (p->lr - min_lr) * 0.5f * (1.0f + cosf((float)M_PI * progress));
}

ac_status ac_adamw_create(const ac_model *model, const ac_adamw_params *params, ac_adamw **opt)
{
    if (!(params->lr > 0) || !(params->beta1 >= 0 && params->beta1 < 1) || !(params->beta2 >= 0 && params->beta2 < 1) ||
        !(params->eps > 0) || params->weight_decay < 0 || params->warmup_steps < 0 || params->total_steps < 1)
        return ac_fail(AC_ERR_INVALID, "adamw: lr, eps and total_steps must be positive, betas in [0, 1), decay and warmup >= 0");
    if (ac_model_weights_dtype(model) != AC_DTYPE_F32)
        return ac_fail(AC_ERR_UNSUPPORTED, "adamw: training needs f32 weights; this model is a bf16 serving copy");
    ac_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return ac_fail(AC_ERR_NOMEM, "adamw: out of memory");
    o->p = *params;
    o->count = model->arena_count;
    o->kctx.backend = model->backend;
    const ac_backend *be = ac_backend_of(&o->kctx);
    size_t bytes = (2 * o->count + 1) * sizeof(float);
    o->m = be->alloc_dense(bytes);
    if (!o->m) {
        free(o);
        return ac_fail(AC_ERR_NOMEM, "adamw: cannot allocate moments for %zu weights on %s", model->arena_count,
                       be->name);
    }
    be->memset_zero(o->m, bytes);
    o->v = o->m + o->count;
    *opt = o;
    return AC_OK;
}

void ac_adamw_free(ac_adamw *opt)
{
    if (!opt)
        return;
    ac_backend_of(&opt->kctx)->free(opt->m);
    free(opt);
}

ac_status ac_adamw_step(ac_adamw *o, ac_model *model, ac_model *grads, double *grad_norm)
{
    if (model->arena_count != o->count || grads->arena_count != o->count)
        return ac_fail(AC_ERR_INVALID, "adamw: the model or its gradients do not match the optimizer's layout");
    if (model->backend != o->kctx.backend || grads->backend != o->kctx.backend)
        return ac_fail(AC_ERR_INVALID, "adamw: the model, its gradients and the moments must be on one device");
    double norm = sqrt(ac_k_sum_squares(&o->kctx, o->count, grads->arena));
    if (grad_norm)
        *grad_norm = norm;
    if (!isfinite(norm))
        return ac_fail(AC_ERR_INVALID, "adamw: the gradient norm is not finite (%g); the step was skipped", norm);
    /* as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below one,
     * applied as the update reads the gradient (no pass of its own) */
    double coef = o->p.clip_norm / (norm + 1e-6);
    float g_scale = o->p.clip_norm > 0 && coef < 1.0 ? (float)coef : 1.0f;
    float lr = ac_adamw_lr(&o->p, o->steps);
    o->steps++;
    for (size_t i = 0; i < model->n_params; i++) {
        const ac_param *p = &model->params[i];
        size_t offset = (size_t)(p->data - model->arena);
        float decay = p->ndim >= 2 ? o->p.weight_decay : 0.0f;
        ac_k_adamw(&o->kctx, p->count, p->data, grads->arena + offset, g_scale, o->m + offset, o->v + offset, lr,
                   o->p.beta1, o->p.beta2, o->p.eps, decay, o->steps);
    }
    return AC_OK;
}

int ac_adamw_steps_done(const ac_adamw *opt) { return opt->steps; }
void ac_adamw_set_steps_done(ac_adamw *opt, int steps) { opt->steps = steps; }

float *ac_adamw_moments(ac_adamw *opt, size_t *count_each)
{
    *count_each = opt->count;
    return opt->m;
}
