/* Dense MLP: down(mask * relu(up(x))^2), forward and backward. */
#include "runtime/runtime_internal.h"

#include <string.h>

size_t ac_mlp_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)b->ffn;
}

size_t ac_mlp_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return 3 * (size_t)b->ffn;
}

void ac_mlp_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, F = a->layers[layer].ffn;
    float *h = ac_scratch(rt, (size_t)T * F);
    ac_k_linear(&rt->kctx, T, F, D, xn, D, w->up_proj, 0.0f, h, F);
    ac_k_relu2(&rt->kctx, (size_t)T * F, h);
    if (masks && masks->ffn)
        ac_k_mul_columns(&rt->kctx, T, F, masks->ffn, h, F);
    ac_k_linear(&rt->kctx, T, D, F, h, F, w->down_proj, 0.0f, out, D);
}

void ac_mlp_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = &rt->model->arch;
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, F = a->layers[layer].ffn;
    const float *mask = masks ? masks->ffn : NULL;
    float *pre = ac_scratch(rt, (size_t)T * F); /* up(x) */
    float *act = ac_scratch(rt, (size_t)T * F); /* relu2, then masked */
    float *dact = ac_scratch(rt, (size_t)T * F);

    ac_k_linear(&rt->kctx, T, F, D, xn, D, w->up_proj, 0.0f, pre, F);
    memcpy(act, pre, (size_t)T * F * sizeof *act);
    ac_k_relu2(&rt->kctx, (size_t)T * F, act);
    ac_k_linear_backward(&rt->kctx, T, D, F, NULL, F, w->down_proj, dout, D, 0.0f, dact, F, NULL);
    if (mask && mask_grads && mask_grads->ffn) /* d mask[c] = sum_t dact[t,c] relu2(pre)[t,c] */
        ac_k_column_dot(&rt->kctx, T, F, dact, F, act, F, mask_grads->ffn);
    if (mask) {
        ac_k_mul_columns(&rt->kctx, T, F, mask, act, F);
        ac_k_mul_columns(&rt->kctx, T, F, mask, dact, F);
    }
    if (grad)
        ac_k_linear_backward(&rt->kctx, T, D, F, act, F, NULL, dout, D, 0.0f, NULL, F, grad->down_proj);
    ac_k_relu2_backward(&rt->kctx, (size_t)T * F, pre, dact);
    ac_k_linear_backward(&rt->kctx, T, F, D, xn, D, w->up_proj, dact, F, 0.0f, dxn, D, grad ? grad->up_proj : NULL);
}
