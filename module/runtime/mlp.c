/* Dense MLP: down(relu(up(x))^2). */
#include "runtime/runtime_internal.h"

size_t ac_mlp_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)b->ffn;
}

void ac_mlp_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, F = b->ffn;
    float *h = ac_scratch(rt, (size_t)T * F);
    ac_k_linear(&rt->kctx, T, F, D, xn, D, w->up_proj, 0.0f, h, F);
    ac_k_relu2(&rt->kctx, (size_t)T * F, h);
    ac_k_linear(&rt->kctx, T, D, F, h, F, w->down_proj, 0.0f, out, D);
}
