/* MoE mixer: sigmoid router with a selection-only correction bias and group-limited
 * top-k; tokens grouped by expert so each expert runs two GEMMs; plus a shared expert.
 * Masks: experts [E] scales each routed expert's output (its selection and routing
 * weight are unchanged), ffn [I] every routed expert's relu2 channels, shared_ffn [S]
 * the shared expert's. */
#include "runtime/runtime_internal.h"

#include <string.h>

size_t ac_moe_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    size_t k = (size_t)b->top_k;
    return (size_t)b->n_experts + 4 * k + 2 * (size_t)arch->hidden + (size_t)b->expert_ffn +
           (size_t)b->shared_ffn;
}

/* logits and dlogits [E]; idx, weight, rows, row_weight, pair, dweight [k]; one expert's
 * input and output [D] each, its pre-activation, activation and their gradient [I]; the
 * shared expert's three [S]; and (once, not per token: T >= 1) the ffn and shared_ffn
 * mask gradients of this call [I + S]. */
size_t ac_moe_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    return 2 * (size_t)b->n_experts + 6 * (size_t)b->top_k + 2 * (size_t)arch->hidden + 4 * (size_t)b->expert_ffn +
           4 * (size_t)b->shared_ffn;
}

/* Counting sort of the T*k (token, expert) pairs by expert: expert e's tokens are
 * rows[start[e] .. start[e+1]), each with its routing weight (times mask[e] when a mask
 * is given) and, when pair is not NULL, the pair's index t*k+j. */
static void group_by_expert(int T, int k, int E, const int32_t *idx, const float *weight, const float *mask,
                            int *start, int32_t *rows, float *row_weight, int32_t *pair)
{
    int fill[AC_MAX_EXPERTS + 1];
    memset(start, 0, (size_t)(E + 1) * sizeof *start);
    for (int i = 0; i < T * k; i++)
        start[idx[i] + 1]++;
    for (int e = 0; e < E; e++)
        start[e + 1] += start[e];
    memcpy(fill, start, (size_t)(E + 1) * sizeof *fill);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e = idx[t * k + j];
            rows[fill[e]] = t;
            row_weight[fill[e]] = mask ? weight[t * k + j] * mask[e] : weight[t * k + j];
            if (pair)
                pair[fill[e]] = t * k + j;
            fill[e]++;
        }
}

void ac_moe_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, E = b->n_experts, k = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    const float *m_experts = masks ? masks->experts : NULL;
    const float *m_ffn = masks ? masks->ffn : NULL;
    const float *m_shared = masks ? masks->shared_ffn : NULL;

    float *logits = ac_scratch(rt, (size_t)T * E);
    int32_t *idx = (int32_t *)ac_scratch(rt, (size_t)T * k);
    float *weight = ac_scratch(rt, (size_t)T * k);
    int32_t *rows = (int32_t *)ac_scratch(rt, (size_t)T * k);
    float *row_weight = ac_scratch(rt, (size_t)T * k);
    float *xe = ac_scratch(rt, (size_t)T * D);
    float *he = ac_scratch(rt, (size_t)T * I);
    float *oe = ac_scratch(rt, (size_t)T * D);
    int start[AC_MAX_EXPERTS + 1];

    ac_k_linear(&rt->kctx, T, E, D, xn, D, w->router, 0.0f, logits, E);
    ac_k_moe_route(&rt->kctx, T, E, logits, w->router_bias, b->n_group, b->topk_group, k,
                   b->norm_topk_prob, b->routed_scaling, idx, weight);
    group_by_expert(T, k, E, idx, weight, m_experts, start, rows, row_weight, NULL);

    if (S > 0) {
        float *hs = ac_scratch(rt, (size_t)T * S);
        ac_k_linear(&rt->kctx, T, S, D, xn, D, w->up_proj, 0.0f, hs, S);
        ac_k_relu2(&rt->kctx, (size_t)T * S, hs);
        if (m_shared)
            ac_k_mul_columns(&rt->kctx, T, S, m_shared, hs, S);
        ac_k_linear(&rt->kctx, T, D, S, hs, S, w->down_proj, 0.0f, out, D);
    } else {
        memset(out, 0, (size_t)T * D * sizeof *out);
    }
    for (int e = 0; e < E; e++) {
        int n = start[e + 1] - start[e];
        if (n == 0)
            continue;
        const float *up = w->experts_up + (size_t)e * I * D;
        const float *down = w->experts_down + (size_t)e * D * I;
        ac_k_gather_rows(&rt->kctx, n, D, xn, D, rows + start[e], xe);
        ac_k_linear(&rt->kctx, n, I, D, xe, D, up, 0.0f, he, I);
        ac_k_relu2(&rt->kctx, (size_t)n * I, he);
        if (m_ffn)
            ac_k_mul_columns(&rt->kctx, n, I, m_ffn, he, I);
        ac_k_linear(&rt->kctx, n, D, I, he, I, down, 0.0f, oe, D);
        ac_k_scatter_add_rows(&rt->kctx, n, D, oe, rows + start[e], row_weight + start[e], out, D);
    }
}

/* Backward of y = down(mask * relu2(up(x))) for rows x [n, D], given dout = dL/dy and
 * dh = dL/d(mask * relu2) [n, F] (destroyed): dx [n, D] overwritten, weight and mask
 * gradients accumulated. act holds relu2(pre) (destroyed).
 * dx may alias dout: dout is last read before dx is written. */
static void relu2_mlp_backward(ac_runtime *rt, int n, int D, int F, const float *x, const float *up, const float *pre,
                               float *act, float *dh, const float *dout, const float *mask, float *dmask,
                               float *dx, float *dup, float *ddown)
{
    if (mask && dmask) /* d mask[c] = sum_t dh[t,c] relu2(pre)[t,c] */
        ac_k_column_dot(&rt->kctx, n, F, dh, F, act, F, dmask);
    if (mask) {
        ac_k_mul_columns(&rt->kctx, n, F, mask, act, F);
        ac_k_mul_columns(&rt->kctx, n, F, mask, dh, F);
    }
    if (ddown)
        ac_k_linear_backward(&rt->kctx, n, D, F, act, F, NULL, dout, D, 0.0f, NULL, F, ddown);
    ac_k_relu2_backward(&rt->kctx, (size_t)n * F, pre, dh);
    ac_k_linear_backward(&rt->kctx, n, F, D, x, D, up, dh, F, 0.0f, dx, D, dup);
}

void ac_moe_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, E = b->n_experts, k = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    const float *m_experts = masks ? masks->experts : NULL;
    const float *m_ffn = masks ? masks->ffn : NULL;
    const float *m_shared = masks ? masks->shared_ffn : NULL;
    float *g_experts = m_experts && mask_grads ? mask_grads->experts : NULL;
    float *g_ffn = m_ffn && mask_grads ? mask_grads->ffn : NULL;
    float *g_shared = m_shared && mask_grads ? mask_grads->shared_ffn : NULL;

    float *logits = ac_scratch(rt, (size_t)T * E);
    float *dlogits = ac_scratch(rt, (size_t)T * E);
    int32_t *idx = (int32_t *)ac_scratch(rt, (size_t)T * k);
    float *weight = ac_scratch(rt, (size_t)T * k);
    int32_t *rows = (int32_t *)ac_scratch(rt, (size_t)T * k);
    float *row_weight = ac_scratch(rt, (size_t)T * k);
    int32_t *pair = (int32_t *)ac_scratch(rt, (size_t)T * k);
    float *dweight = ac_scratch(rt, (size_t)T * k);
    float *xe = ac_scratch(rt, (size_t)T * D);
    float *oe = ac_scratch(rt, (size_t)T * D);
    float *pre = ac_scratch(rt, (size_t)T * I);
    float *act = ac_scratch(rt, (size_t)T * I);
    float *dact = ac_scratch(rt, (size_t)T * I);
    int start[AC_MAX_EXPERTS + 1];
    /* the channel masks' gradients sum over experts here first, then add to the caller's
     * once: a second identical call adds exactly as much again */
    float *dffn = g_ffn ? ac_scratch(rt, (size_t)I) : NULL;
    float *dshared = g_shared && S > 0 ? ac_scratch(rt, (size_t)S) : NULL;
    if (dffn)
        memset(dffn, 0, (size_t)I * sizeof *dffn);
    if (dshared)
        memset(dshared, 0, (size_t)S * sizeof *dshared);

    ac_k_linear(&rt->kctx, T, E, D, xn, D, w->router, 0.0f, logits, E);
    ac_k_moe_route(&rt->kctx, T, E, logits, w->router_bias, b->n_group, b->topk_group, k,
                   b->norm_topk_prob, b->routed_scaling, idx, weight);
    group_by_expert(T, k, E, idx, weight, NULL, start, rows, row_weight, pair);

    /* the shared expert writes dxn; the routed experts and the router add to it */
    if (S > 0) {
        float *pre_s = ac_scratch(rt, (size_t)T * S);
        float *act_s = ac_scratch(rt, (size_t)T * S);
        float *dact_s = ac_scratch(rt, (size_t)T * S);
        ac_k_linear(&rt->kctx, T, S, D, xn, D, w->up_proj, 0.0f, pre_s, S);
        memcpy(act_s, pre_s, (size_t)T * S * sizeof *act_s);
        ac_k_relu2(&rt->kctx, (size_t)T * S, act_s);
        ac_k_linear_backward(&rt->kctx, T, D, S, NULL, S, w->down_proj, dout, D, 0.0f, dact_s, S, NULL);
        relu2_mlp_backward(rt, T, D, S, xn, w->up_proj, pre_s, act_s, dact_s, dout, m_shared, dshared, dxn,
                           grad ? grad->up_proj : NULL, grad ? grad->down_proj : NULL);
    } else {
        memset(dxn, 0, (size_t)T * D * sizeof *dxn);
    }

    for (int e = 0; e < E; e++) {
        int n = start[e + 1] - start[e];
        if (n == 0)
            continue;
        const float *up = w->experts_up + (size_t)e * I * D;
        const float *down = w->experts_down + (size_t)e * D * I;
        const int32_t *re = rows + start[e];
        ac_k_gather_rows(&rt->kctx, n, D, xn, D, re, xe);
        ac_k_linear(&rt->kctx, n, I, D, xe, D, up, 0.0f, pre, I);
        memcpy(act, pre, (size_t)n * I * sizeof *act);
        ac_k_relu2(&rt->kctx, (size_t)n * I, act);
        /* the expert's output y (dact holds the masked activation for the moment) */
        const float *h = act;
        if (m_ffn) {
            memcpy(dact, act, (size_t)n * I * sizeof *dact);
            ac_k_mul_columns(&rt->kctx, n, I, m_ffn, dact, I);
            h = dact;
        }
        ac_k_linear(&rt->kctx, n, D, I, h, I, down, 0.0f, oe, D);
        /* routing weight and expert-mask gradients; oe becomes dL/dy */
        ac_k_moe_combine_backward(&rt->kctx, n, D, dout, D, re, oe, row_weight + start[e], m_experts ? m_experts + e : NULL,
                                  pair + start[e], dweight, g_experts ? g_experts + e : NULL, oe);
        ac_k_linear_backward(&rt->kctx, n, D, I, NULL, I, down, oe, D, 0.0f, dact, I, NULL);
        /* dL/dx of the gathered rows replaces dL/dy in oe once down's gradient has used it */
        relu2_mlp_backward(rt, n, D, I, xe, up, pre, act, dact, oe, m_ffn, dffn, oe,
                           grad ? grad->experts_up + (size_t)e * I * D : NULL,
                           grad ? grad->experts_down + (size_t)e * D * I : NULL);
        ac_k_gather_rows_backward(&rt->kctx, n, D, oe, re, dxn, D);
    }

    /* the router: gradient reaches the logits of the chosen experts only */
    ac_k_moe_route_backward(&rt->kctx, T, E, logits, k, b->norm_topk_prob, b->routed_scaling, idx, dweight, dlogits);
    ac_k_linear_backward(&rt->kctx, T, E, D, xn, D, w->router, dlogits, E, 1.0f, dxn, D, grad ? grad->router : NULL);
    if (dffn)
        ac_k_add(&rt->kctx, (size_t)I, dffn, g_ffn);
    if (dshared)
        ac_k_add(&rt->kctx, (size_t)S, dshared, g_shared);
}
