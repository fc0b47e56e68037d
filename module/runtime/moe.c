/* MoE mixer: sigmoid router with a selection-only correction bias and group-limited
 * top-k; tokens grouped by expert so each expert runs two GEMMs; plus a shared expert. */
#include "runtime/runtime_internal.h"

#include <string.h>

size_t ac_moe_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    size_t k = (size_t)b->top_k;
    return (size_t)b->n_experts + 4 * k + 2 * (size_t)arch->hidden + (size_t)b->expert_ffn +
           (size_t)b->shared_ffn;
}


/* Counting sort of the T*k (token, expert) pairs by expert: expert e's tokens are
 * rows[start[e] .. start[e+1]), each with its routing weight. */
static void group_by_expert(int T, int k, int E, const int32_t *idx, const float *weight,
                            int *start, int32_t *rows, float *row_weight)
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
            row_weight[fill[e]] = weight[t * k + j];
            fill[e]++;
        }
}

void ac_moe_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, E = b->n_experts, k = b->top_k, I = b->expert_ffn;

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
    group_by_expert(T, k, E, idx, weight, start, rows, row_weight);

    if (b->shared_ffn > 0) {
        float *hs = ac_scratch(rt, (size_t)T * b->shared_ffn);
        ac_k_linear(&rt->kctx, T, b->shared_ffn, D, xn, D, w->up_proj, 0.0f, hs, b->shared_ffn);
        ac_k_relu2(&rt->kctx, (size_t)T * b->shared_ffn, hs);
        ac_k_linear(&rt->kctx, T, D, b->shared_ffn, hs, b->shared_ffn, w->down_proj, 0.0f, out, D);
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
        ac_k_linear(&rt->kctx, n, D, I, he, I, down, 0.0f, oe, D);
        ac_k_scatter_add_rows(&rt->kctx, n, D, oe, rows + start[e], row_weight + start[e], out, D);
    }
}
