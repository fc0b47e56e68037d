/* MoE mixer: sigmoid router with a selection-only correction bias and group-limited
 * top-k; tokens grouped by expert so each expert runs two GEMMs; plus a shared expert.
 * Masks: experts [E] scales each routed expert's output (its selection and routing
 * weight are unchanged), expert_scores [E] each expert's score before the top-k
 * (ac_k_moe_mask_scores), ffn [I] every routed expert's relu2 channels, shared_ffn [S]
 * the shared expert's. */
#include "blocks/block.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* logits [E]; idx, weight, rows, row_weight [k]; one expert's input and output [D], its
 * hidden [I]; the shared expert's [S]; and (once, not per token: T >= 1) the
 * score-masked bias [E]. */
static size_t moe_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    size_t k = (size_t)b->top_k;
    return 2 * (size_t)b->n_experts + 4 * k + 2 * (size_t)arch->hidden + (size_t)b->expert_ffn +
           (size_t)b->shared_ffn;
}

/* logits and dlogits [E]; idx, weight, rows, row_weight, pair, dweight [k]; one expert's
 * input and output [D] each, its pre-activation, activation and their gradient [I]; the
 * shared expert's three [S]; and (once, not per token: T >= 1) the ffn and shared_ffn
 * mask gradients of this call [I + S] and the score-masked bias [E]. */
static size_t moe_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    return 3 * (size_t)b->n_experts + 6 * (size_t)b->top_k + 2 * (size_t)arch->hidden + 4 * (size_t)b->expert_ffn +
           4 * (size_t)b->shared_ffn;
}

/* A training forward keeps the routing (logits [E], idx and weight [k]), the shared
 * expert's pre-activation [S] and, for each of a token's k (token, expert) pairs in the
 * order grouped by expert, the expert's pre-activation [I] and output [D]: everything
 * the backward would recompute with GEMMs. */
static size_t moe_saved_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    size_t k = (size_t)b->top_k;
    return (size_t)b->n_experts + 2 * k + (size_t)b->shared_ffn + k * (size_t)b->expert_ffn + k * (size_t)arch->hidden;
}

typedef struct {
    float *logits, *weight, *pre_shared, *pre, *y; /* [T E], [T k], [T S], [T k I], [T k D] */
    int32_t *idx;                                  /* [T k] */
} moe_kept;

/* On a device, the routing read back to the host and the grouping made from it there:
 * idx and weight [T k] as route() chose; rows, row_weight and pair [T k] by expert. */
static size_t moe_host_per_token(const ac_block_dims *b) { return 5 * (size_t)b->top_k; }

/* The parts of c->saved, or of scratch when nothing is kept: the routing always, the
 * rest only when kept (the caller's own scratch serves otherwise). */
static int moe_internals(ac_block_ctx *c, const ac_block_dims *b, int T, moe_kept *m)
{
    size_t Tk = (size_t)T * b->top_k;
    float *p = c->saved;
    if (!p) {
        *m = (moe_kept){.logits = ac_block_scratch(c, (size_t)T * b->n_experts), .weight = ac_block_scratch(c, Tk)};
        m->idx = (int32_t *)ac_block_scratch(c, Tk);
        return 0;
    }
    m->logits = p;
    m->idx = (int32_t *)(m->logits + (size_t)T * b->n_experts);
    m->weight = (float *)(m->idx + Tk);
    m->pre_shared = m->weight + Tk;
    m->pre = m->pre_shared + (size_t)T * b->shared_ffn;
    m->y = m->pre + Tk * b->expert_ffn;
    return 1;
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

/* group_by_expert of the routing in kept, made on the host, which launches each
 * expert's products: on the CPU in place; from a device, the routing is read back first
 * and the grouping (rows, row_weight, and pair when not NULL) sent to the device's
 * buffers. */
static void group_on_host(ac_block_ctx *c, int T, int k, int E, const moe_kept *kept, const float *mask, int *start,
                          int32_t *rows, float *row_weight, int32_t *pair)
{
    if (!c->host) {
        group_by_expert(T, k, E, kept->idx, kept->weight, mask, start, rows, row_weight, pair);
        return;
    }
    const ac_backend *be = ac_backend_of(c->kctx);
    size_t Tk = (size_t)T * k, bytes = Tk * sizeof(float);
    int32_t *h_idx = (int32_t *)c->host, *h_rows = h_idx + 2 * Tk, *h_pair = h_idx + 4 * Tk;
    float *h_weight = c->host + Tk, *h_row_weight = c->host + 3 * Tk;
    be->copy(h_idx, kept->idx, bytes, AC_COPY_DEVICE_TO_HOST);
    be->copy(h_weight, kept->weight, bytes, AC_COPY_DEVICE_TO_HOST);
    group_by_expert(T, k, E, h_idx, h_weight, mask, start, h_rows, h_row_weight, pair ? h_pair : NULL);
    be->copy(rows, h_rows, bytes, AC_COPY_HOST_TO_DEVICE);
    be->copy(row_weight, h_row_weight, bytes, AC_COPY_HOST_TO_DEVICE);
    if (pair)
        be->copy(pair, h_pair, bytes, AC_COPY_HOST_TO_DEVICE);
}

/* Router logits [T, E] of xn (score-masked when m_scores is given) and the top-k:
 * idx and weight [T, k]. */
static void route(ac_block_ctx *c, int layer, int T, const float *xn, const float *m_scores, float *logits,
                  int32_t *idx, float *weight)
{
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, E = b->n_experts;
    const float *bias = w->router_bias;
    ac_k_linear(c->kctx, T, E, D, xn, D, w->router, 0.0f, logits, E);
    if (m_scores) {
        float *masked_bias = ac_block_scratch(c, (size_t)E);
        ac_k_moe_mask_scores(c->kctx, T, E, m_scores, bias, logits, masked_bias);
        bias = masked_bias;
    }
    ac_k_moe_route(c->kctx, T, E, logits, bias, b->n_group, b->topk_group, b->top_k, b->norm_topk_prob,
                   b->routed_scaling, idx, weight);
}

/* A decode step's few tokens (up to the backend's moe_token_batch) take ac_k_moe_token,
 * which reads the routing where ac_k_moe_route left it (a device's step never waits to
 * read it back), when a token's hidden [S + k I] fits the scratch the block's plan holds
 * for one token, (k - 1) I <= E + 2 D, and k <= AC_K_MAX_MOE_PICKS. */
static int token_path_fits(const ac_arch *a, const ac_block_dims *b)
{
    return b->top_k <= AC_K_MAX_MOE_PICKS &&
           (int64_t)(b->top_k - 1) * b->expert_ffn <= (int64_t)b->n_experts + 2 * (int64_t)a->hidden;
}

static void moe_token(ac_block_ctx *c, const ac_layer_weights *w, const ac_block_dims *b, int T, const float *xn,
                      const ac_block_masks *masks, const moe_kept *kept, float *out)
{
    int I = b->expert_ffn, S = b->shared_ffn, k = b->top_k;
    ac_k_moe_ffn ffn = {
        .D = c->arch->hidden, .E = b->n_experts, .I = I, .S = S, .bf16 = c->bf16,
        .experts_up = w->experts_up, .experts_down = w->experts_down,
        .shared_up = w->up_proj, .shared_down = w->down_proj,
        .experts_mask = masks ? masks->experts : NULL,
        .ffn_mask = masks ? masks->ffn : NULL,
        .shared_mask = masks ? masks->shared_ffn : NULL,
    };
    float *hidden = ac_block_scratch(c, (size_t)T * ((size_t)S + (size_t)k * I));
    ac_k_moe_token(c->kctx, &ffn, T, k, kept->idx, kept->weight, xn, hidden, out);
}

/* The end of the round of consecutive experts from e0 whose rows (grouped by expert)
 * fit the T rows of one expert pass's scratch: at least e0 + 1, as a token picks an
 * expert at most once. */
static int round_end(const int *start, int E, int e0, int T)
{
    int e1 = e0;
    while (e1 < E && start[e1 + 1] - start[e0] <= T)
        e1++;
    return e1;
}

/* Pointers to `count` products' parts of a buffer of stacked rows (`width` floats each):
 * product i's M[i] rows follow product i-1's. */
static void product_rows(int count, const int *M, float *base, int width, float **out)
{
    for (int i = 0; i < count; i++) {
        out[i] = base;
        base += (size_t)M[i] * width;
    }
}

/* The nonempty experts of a round [e0, e1): their row counts M and weights, and (when
 * grad is not NULL) their weight gradients; returns how many. */
static int round_products(const ac_block_ctx *c, const ac_layer_weights *w, const ac_layer_weights *grad,
                          const int *start, int e0, int e1, int I, int D, int *M, const float **up, const float **down,
                          float **dup, float **ddown)
{
    int count = 0;
    for (int e = e0; e < e1; e++) {
        if (start[e + 1] == start[e])
            continue;
        M[count] = start[e + 1] - start[e];
        up[count] = ac_block_weights_at(c, w->experts_up, (size_t)e * I * D);
        down[count] = ac_block_weights_at(c, w->experts_down, (size_t)e * D * I);
        if (grad) {
            dup[count] = grad->experts_up + (size_t)e * I * D;
            ddown[count] = grad->experts_down + (size_t)e * D * I;
        }
        count++;
    }
    return count;
}

static void moe_forward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total, E = b->n_experts, k = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    const float *m_experts = masks ? masks->experts : NULL;
    const float *m_ffn = masks ? masks->ffn : NULL;
    const float *m_shared = masks ? masks->shared_ffn : NULL;

    moe_kept kept;
    int keep = moe_internals(c, b, T, &kept);
    int32_t *rows = (int32_t *)ac_block_scratch(c, (size_t)T * k);
    float *row_weight = ac_block_scratch(c, (size_t)T * k);
    int start[AC_MAX_EXPERTS + 1];

    route(c, layer, T, xn, masks ? masks->expert_scores : NULL, kept.logits, kept.idx, kept.weight);
    if (T <= ac_backend_of(c->kctx)->moe_token_batch && !keep && token_path_fits(a, b)) {
        moe_token(c, w, b, T, xn, masks, &kept, out);
        return;
    }
    const float *host_experts = masks ? ac_block_mask_host(masks->host_experts, m_experts) : NULL;
    group_on_host(c, T, k, E, &kept, host_experts, start, rows, row_weight, NULL);
    float *xe = ac_block_scratch(c, (size_t)T * D);
    float *he = ac_block_scratch(c, (size_t)T * I);
    float *oe = ac_block_scratch(c, (size_t)T * D);

    if (S > 0) {
        float *hs = ac_block_scratch(c, (size_t)T * S);
        float *pre = keep ? kept.pre_shared : hs;
        ac_block_linear(c, T, S, D, xn, D, w->up_proj, 0.0f, pre, S);
        ac_k_relu2(c->kctx, (size_t)T * S, pre, hs);
        if (m_shared)
            ac_k_mul_columns(c->kctx, T, S, m_shared, hs, S);
        ac_block_linear(c, T, D, S, hs, S, w->down_proj, 0.0f, out, D);
    } else {
        ac_block_zero(c->kctx, out, (size_t)T * D);
    }
    /* experts in rounds of consecutive ones whose tokens fit the T rows of xe, he and oe:
     * their rows are one range of the grouped pairs, so one gather, one batch of up
     * projections, one of down projections */
    for (int e0 = 0, e1; e0 < E; e0 = e1) {
        e1 = round_end(start, E, e0, T);
        int p0 = start[e0], n = start[e1] - p0, M[AC_MAX_EXPERTS];
        const float *up[AC_MAX_EXPERTS], *down[AC_MAX_EXPERTS];
        float *xs[AC_MAX_EXPERTS], *pre[AC_MAX_EXPERTS], *hs[AC_MAX_EXPERTS], *ys[AC_MAX_EXPERTS];
        int count = round_products(c, w, NULL, start, e0, e1, I, D, M, up, down, NULL, NULL);
        float *pre_round = keep ? kept.pre + (size_t)p0 * I : he; /* relu2 reads it into he */
        product_rows(count, M, xe, D, xs);
        product_rows(count, M, pre_round, I, pre);
        product_rows(count, M, he, I, hs);
        product_rows(count, M, keep ? kept.y + (size_t)p0 * D : oe, D, ys);
        ac_k_gather_rows(c->kctx, n, D, xn, D, rows + p0, xe);
        ac_block_linear_batch(c, count, M, I, D, (const float *const *)xs, D, up, pre, I);
        ac_k_relu2(c->kctx, (size_t)n * I, pre_round, he);
        if (m_ffn)
            ac_k_mul_columns(c->kctx, n, I, m_ffn, he, I);
        ac_block_linear_batch(c, count, M, D, I, (const float *const *)hs, I, down, ys, D);
        const float *y = keep ? kept.y + (size_t)p0 * D : oe;
        for (int e = e0; e < e1; e++) /* a token appears once per expert: distinct rows per call */
            ac_k_scatter_add_rows(c->kctx, start[e + 1] - start[e], D, y + (size_t)(start[e] - p0) * D,
                                  rows + start[e], row_weight + start[e], out, D);
    }
}

/* Backward of y_i = down_i(mask * relu2(up_i(x_i))) for `count` products of M[i] rows,
 * stacked: x, dout and dx rows of D, pre, act and dh rows of F. Given dout = dL/dy and dh
 * = dL/d(mask * relu2) (destroyed): dx overwritten, the weight gradients dup_i and
 * ddown_i (arrays NULL: not wanted) and the mask's accumulated. act holds relu2(pre)
 * (destroyed). dx may alias dout: dout is last read before dx is written. */
static void relu2_mlp_backward(ac_block_ctx *c, int count, const int *M, int D, int F, float *x,
                               const float *const *up, const float *pre, float *act, float *dh, float *dout,
                               const float *mask, float *dmask, float *dx, float *const *dup, float *const *ddown)
{
    enum { MAX = AC_MAX_EXPERTS + 1 };
    float *xs[MAX], *acts[MAX], *dhs[MAX], *douts[MAX], *dxs[MAX];
    int rows = 0;
    for (int i = 0; i < count; i++)
        rows += M[i];
    product_rows(count, M, x, D, xs);
    product_rows(count, M, act, F, acts);
    product_rows(count, M, dh, F, dhs);
    product_rows(count, M, dout, D, douts);
    product_rows(count, M, dx, D, dxs);
    if (mask && dmask) /* d mask[c] = sum_t dh[t,c] relu2(pre)[t,c] */
        ac_k_column_dot(c->kctx, rows, F, dh, F, act, F, dmask);
    if (mask) {
        ac_k_mul_columns(c->kctx, rows, F, mask, act, F);
        ac_k_mul_columns(c->kctx, rows, F, mask, dh, F);
    }
    if (ddown)
        ac_k_linear_batch_backward(c->kctx, count, M, D, F, (const float *const *)acts, F, NULL,
                                   (const float *const *)douts, D, NULL, F, ddown);
    ac_k_relu2_backward(c->kctx, (size_t)rows * F, pre, dh);
    ac_k_linear_batch_backward(c->kctx, count, M, F, D, (const float *const *)xs, D, up,
                               (const float *const *)dhs, F, dxs, D, dup);
}

static void moe_backward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total, E = b->n_experts, k = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    const float *m_experts = masks ? masks->experts : NULL;
    const float *m_ffn = masks ? masks->ffn : NULL;
    const float *m_shared = masks ? masks->shared_ffn : NULL;
    float *g_experts = m_experts && mask_grads ? mask_grads->experts : NULL;
    float *g_ffn = m_ffn && mask_grads ? mask_grads->ffn : NULL;
    float *g_shared = m_shared && mask_grads ? mask_grads->shared_ffn : NULL;

    moe_kept kept;
    int keep = moe_internals(c, b, T, &kept);
    float *logits = kept.logits, *weight = kept.weight;
    int32_t *idx = kept.idx;
    float *dlogits = ac_block_scratch(c, (size_t)T * E);
    int32_t *rows = (int32_t *)ac_block_scratch(c, (size_t)T * k);
    float *row_weight = ac_block_scratch(c, (size_t)T * k);
    int32_t *pair = (int32_t *)ac_block_scratch(c, (size_t)T * k);
    float *dweight = ac_block_scratch(c, (size_t)T * k);
    float *xe = ac_block_scratch(c, (size_t)T * D);
    float *oe = ac_block_scratch(c, (size_t)T * D);
    float *pre = ac_block_scratch(c, (size_t)T * I);
    float *act = ac_block_scratch(c, (size_t)T * I);
    float *dact = ac_block_scratch(c, (size_t)T * I);
    int start[AC_MAX_EXPERTS + 1];
    /* the channel masks' gradients sum over experts here first, then add to the caller's
     * once: a second identical call adds exactly as much again */
    float *dffn = g_ffn ? ac_block_scratch(c, (size_t)I) : NULL;
    float *dshared = g_shared && S > 0 ? ac_block_scratch(c, (size_t)S) : NULL;
    if (dffn)
        ac_block_zero(c->kctx, dffn, (size_t)I);
    if (dshared)
        ac_block_zero(c->kctx, dshared, (size_t)S);

    const float *m_scores = masks ? masks->expert_scores : NULL;
    if (!keep)
        route(c, layer, T, xn, m_scores, logits, idx, weight);
    group_on_host(c, T, k, E, &kept, NULL, start, rows, row_weight, pair);

    /* the shared expert writes dxn; the routed experts and the router add to it */
    if (S > 0) {
        float *pre_s = keep ? kept.pre_shared : ac_block_scratch(c, (size_t)T * S);
        float *act_s = ac_block_scratch(c, (size_t)T * S);
        float *dact_s = ac_block_scratch(c, (size_t)T * S);
        if (!keep)
            ac_k_linear(c->kctx, T, S, D, xn, D, w->up_proj, 0.0f, pre_s, S);
        ac_k_relu2(c->kctx, (size_t)T * S, pre_s, act_s);
        ac_k_linear_backward(c->kctx, T, D, S, NULL, S, w->down_proj, dout, D, 0.0f, dact_s, S, NULL);
        relu2_mlp_backward(c, 1, &T, D, S, (float *)xn, (const float *const *)&w->up_proj, pre_s, act_s, dact_s,
                           (float *)dout, m_shared, dshared, dxn, grad ? &grad->up_proj : NULL,
                           grad ? &grad->down_proj : NULL);
    } else {
        ac_block_zero(c->kctx, dxn, (size_t)T * D);
    }

    /* the routed experts in the forward's rounds (consecutive experts whose rows fit the
     * T rows of xe, oe, pre, act and dact), each round's products as batches */
    for (int e0 = 0, e1; e0 < E; e0 = e1) {
        e1 = round_end(start, E, e0, T);
        int p0 = start[e0], n = start[e1] - p0, M[AC_MAX_EXPERTS];
        const float *up[AC_MAX_EXPERTS], *down[AC_MAX_EXPERTS];
        float *dup[AC_MAX_EXPERTS], *ddown[AC_MAX_EXPERTS], *in[AC_MAX_EXPERTS], *out[AC_MAX_EXPERTS];
        int count = round_products(c, w, grad, start, e0, e1, I, D, M, up, down, dup, ddown);
        const float *pre_r = keep ? kept.pre + (size_t)p0 * I : pre;
        ac_k_gather_rows(c->kctx, n, D, xn, D, rows + p0, xe);
        if (!keep) {
            product_rows(count, M, xe, D, in);
            product_rows(count, M, pre, I, out);
            ac_k_linear_batch(c->kctx, count, M, I, D, (const float *const *)in, D, up, out, I);
        }
        ac_k_relu2(c->kctx, (size_t)n * I, pre_r, act);
        /* the experts' outputs y (dact holds the masked activation for the moment) */
        const float *y = keep ? kept.y + (size_t)p0 * D : oe;
        if (!keep) {
            float *h = act;
            if (m_ffn) {
                ac_block_copy(c->kctx, dact, act, (size_t)n * I);
                ac_k_mul_columns(c->kctx, n, I, m_ffn, dact, I);
                h = dact;
            }
            product_rows(count, M, h, I, in);
            product_rows(count, M, oe, D, out);
            ac_k_linear_batch(c->kctx, count, M, D, I, (const float *const *)in, I, down, out, D);
        }
        /* routing weight and expert-mask gradients; oe becomes dL/dy */
        for (int e = e0; e < e1; e++) {
            size_t r = (size_t)(start[e] - p0);
            ac_k_moe_combine_backward(c->kctx, start[e + 1] - start[e], D, dout, D, rows + start[e], y + r * D,
                                      row_weight + start[e], m_experts ? m_experts + e : NULL, pair + start[e],
                                      dweight, g_experts ? g_experts + e : NULL, oe + r * D);
        }
        product_rows(count, M, oe, D, in);
        product_rows(count, M, dact, I, out);
        ac_k_linear_batch_backward(c->kctx, count, M, D, I, NULL, I, down, (const float *const *)in, D, out, I,
                                   NULL);
        /* dL/dx of the gathered rows replaces dL/dy in oe once down's gradient has used it */
        relu2_mlp_backward(c, count, M, D, I, xe, up, pre_r, act, dact, oe, m_ffn, dffn, oe, grad ? dup : NULL,
                           grad ? ddown : NULL);
        for (int e = e0; e < e1; e++) /* a token appears once per expert: distinct rows per call */
            ac_k_gather_rows_backward(c->kctx, start[e + 1] - start[e], D, oe + (size_t)(start[e] - p0) * D,
                                      rows + start[e], dxn, D);
    }

    /* the router: gradient reaches the logits of the chosen experts only */
    ac_k_moe_route_backward(c->kctx, T, E, logits, k, b->norm_topk_prob, b->routed_scaling, idx, dweight, dlogits);
    if (m_scores && mask_grads && mask_grads->expert_scores)
        ac_k_moe_mask_scores_backward(c->kctx, T, E, m_scores, dlogits, mask_grads->expert_scores);
    ac_k_linear_backward(c->kctx, T, E, D, xn, D, w->router, dlogits, E, 1.0f, dxn, D, grad ? grad->router : NULL);
    if (dffn)
        ac_k_add(c->kctx, (size_t)I, dffn, g_ffn);
    if (dshared)
        ac_k_add(c->kctx, (size_t)S, dshared, g_shared);
}

/* ---- the kind's entry in the block table ---- */

static ac_status moe_validate(int i, const ac_block_dims *b)
{
    if (b->n_experts <= 0)
        return ac_layer_fail(i, b, "n_experts must be positive, got %d", b->n_experts);
    if (b->n_experts > AC_MAX_EXPERTS)
        return ac_layer_fail(i, b, "n_experts %d exceeds the engine's limit of %d", b->n_experts, AC_MAX_EXPERTS);
    if (b->top_k <= 0)
        return ac_layer_fail(i, b, "top_k must be positive, got %d", b->top_k);
    if (b->top_k > b->n_experts)
        return ac_layer_fail(i, b, "top_k %d exceeds n_experts %d", b->top_k, b->n_experts);
    if (b->expert_ffn <= 0)
        return ac_layer_fail(i, b, "expert_ffn must be positive, got %d", b->expert_ffn);
    if (b->shared_ffn < 0)
        return ac_layer_fail(i, b, "shared_ffn must be >= 0 (0: no shared expert), got %d", b->shared_ffn);
    if (b->n_group <= 0)
        return ac_layer_fail(i, b, "n_group must be positive, got %d", b->n_group);
    if (b->n_experts % b->n_group)
        return ac_layer_fail(i, b, "n_experts %d is not a multiple of n_group %d", b->n_experts, b->n_group);
    if (b->n_group > 1 && b->n_experts / b->n_group < 2)
        return ac_layer_fail(i, b, "n_group %d leaves fewer than 2 experts per group (a group scores its top 2)",
                             b->n_group);
    if (b->topk_group <= 0 || b->topk_group > b->n_group)
        return ac_layer_fail(i, b, "topk_group %d must be in [1, n_group %d]", b->topk_group, b->n_group);
    if ((int64_t)b->topk_group * (b->n_experts / b->n_group) < b->top_k)
        return ac_layer_fail(i, b, "top_k %d exceeds the %d experts in topk_group %d groups", b->top_k,
                             b->topk_group * (b->n_experts / b->n_group), b->topk_group);
    if (b->norm_topk_prob != 0 && b->norm_topk_prob != 1)
        return ac_layer_fail(i, b, "norm_topk_prob must be 0 or 1, got %d", b->norm_topk_prob);
    if (!(b->routed_scaling > 0.0f) || !isfinite(b->routed_scaling))
        return ac_layer_fail(i, b, "routed_scaling must be positive and finite, got %g", (double)b->routed_scaling);
    return AC_OK;
}

static int moe_same_dims(const ac_block_dims *a, const ac_block_dims *b)
{
    return a->n_experts == b->n_experts && a->top_k == b->top_k && a->expert_ffn == b->expert_ffn &&
           a->shared_ffn == b->shared_ffn && a->n_group == b->n_group && a->topk_group == b->topk_group &&
           a->norm_topk_prob == b->norm_topk_prob && a->routed_scaling == b->routed_scaling;
}

/* The router and its bias, `active ? top_k : n_experts` routed experts, the shared expert. */
static int64_t moe_params(const ac_arch *arch, const ac_block_dims *b, int active)
{
    int64_t D = arch->hidden, experts = active ? b->top_k : b->n_experts;
    return (int64_t)b->n_experts * D + b->n_experts + experts * 2 * (int64_t)b->expert_ffn * D +
           2 * (int64_t)b->shared_ffn * D;
}

static void moe_print(const ac_block_dims *b, FILE *out)
{
    fprintf(out, "experts %d (top %d) x ffn %d, shared %d, groups %d (top %d), norm_topk %s, scale %g", b->n_experts,
            b->top_k, b->expert_ffn, b->shared_ffn, b->n_group, b->topk_group, b->norm_topk_prob ? "yes" : "no",
            (double)b->routed_scaling);
}

static void moe_tag(const ac_block_dims *b, char *buf, size_t size)
{
    snprintf(buf, size, "E%d/%d/%d", b->n_experts, b->expert_ffn, b->shared_ffn);
}

/* Experts are contiguous ([E, I, D] then [E, D, I]) so one expert's rows are one block,
 * yet each is its own named tensor, as in published checkpoints. */
static void moe_layout(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w)
{
    int D = arch->hidden, E = b->n_experts, I = b->expert_ffn;
    ac_layout_param(l, &w->router, 2, AC_SHAPE(E, D), "layers.%d.mixer.gate.weight", i);
    ac_layout_param(l, &w->router_bias, 1, AC_SHAPE(E), "layers.%d.mixer.gate.e_score_correction_bias", i);
    for (int e = 0; e < E; e++)
        ac_layout_product(l, e == 0 ? &w->experts_up : NULL, 2, AC_SHAPE(I, D), "layers.%d.mixer.experts.%d.up_proj.weight",
                        i, e);
    for (int e = 0; e < E; e++)
        ac_layout_product(l, e == 0 ? &w->experts_down : NULL, 2, AC_SHAPE(D, I),
                        "layers.%d.mixer.experts.%d.down_proj.weight", i, e);
    if (b->shared_ffn > 0) {
        ac_layout_product(l, &w->up_proj, 2, AC_SHAPE(b->shared_ffn, D), "layers.%d.mixer.shared_experts.up_proj.weight",
                        i);
        ac_layout_product(l, &w->down_proj, 2, AC_SHAPE(D, b->shared_ffn),
                        "layers.%d.mixer.shared_experts.down_proj.weight", i);
    }
}

/* Leading experts (router rows and bias with them), each expert's leading channels, and
 * the shared expert's. */
static void moe_slice(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw, const ac_arch *parent,
                      const ac_block_dims *pb, const ac_layer_weights *pw)
{
    if (pb->kind != AC_BLOCK_MOE)
        return;
    int Dc = child->hidden, Dp = parent->hidden;
    int E = cb->n_experts < pb->n_experts ? cb->n_experts : pb->n_experts, Ic = cb->expert_ffn, Ip = pb->expert_ffn;
    ac_copy_rows(cw->router, Dc, 0, pw->router, Dp, 0, E);
    ac_copy_prefix(cw->router_bias, cb->n_experts, pw->router_bias, pb->n_experts);
    for (int e = 0; e < E; e++)
        ac_slice_ffn(cw->experts_up + (size_t)e * Ic * Dc, cw->experts_down + (size_t)e * Dc * Ic, Ic, Dc,
                     pw->experts_up + (size_t)e * Ip * Dp, pw->experts_down + (size_t)e * Dp * Ip, Ip, Dp);
    ac_slice_ffn(cw->up_proj, cw->down_proj, cb->shared_ffn, Dc, pw->up_proj, pw->down_proj, pb->shared_ffn, Dp);
}

/* ---- the search ---- */

static int moe_axis_length(const ac_block_dims *b, ac_layer_axis axis)
{
    switch (axis) {
    case AC_LAYER_EXPERTS: return b->n_experts;
    case AC_LAYER_FFN: return b->expert_ffn;
    case AC_LAYER_SHARED_FFN: return b->shared_ffn > 0 ? b->shared_ffn : 0;
    default: return 0;
    }
}

/* A group's experts are a contiguous index range: moving one across groups would change
 * the routing. */
static int moe_axis_run(const ac_block_dims *b, ac_layer_axis axis)
{
    if (axis == AC_LAYER_EXPERTS && b->n_group > 1)
        return b->n_experts / b->n_group;
    return moe_axis_length(b, axis);
}

static int moe_cost_axis(const ac_block_dims *b, ac_axis_kind kind, int *groups)
{
    (void)b;
    *groups = 1;
    switch (kind) {
    case AC_AXIS_EXPERTS: return AC_LAYER_EXPERTS;
    case AC_AXIS_ROUTED_FFN: return AC_LAYER_FFN;
    case AC_AXIS_SHARED_FFN: return AC_LAYER_SHARED_FFN;
    default: return -1;
    }
}

/* The scratch of one chunk's importance, per row: the routed or shared activation, the
 * router's logits, the routing (idx, weight) and its grouping by expert (rows, row
 * weights), and one expert's rows in and out. */
typedef struct {
    float *act, *logits, *weight, *row_w, *xe, *oe;
    int32_t *idx, *rows;
} moe_importance_buffers;

static size_t moe_importance_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    int I = b->expert_ffn, S = b->shared_ffn;
    return (size_t)(I > S ? I : S) + (size_t)b->n_experts + 4 * (size_t)b->top_k + 2 * (size_t)arch->hidden;
}

static moe_importance_buffers moe_importance_carve(const ac_importance_chunk *ch, const ac_arch *arch,
                                                   const ac_block_dims *b)
{
    size_t T = (size_t)ch->T, Tk = T * b->top_k, TD = T * arch->hidden;
    int I = b->expert_ffn, S = b->shared_ffn;
    moe_importance_buffers m;
    m.act = ch->scratch;
    m.logits = m.act + T * (size_t)(I > S ? I : S);
    m.idx = (int32_t *)(void *)(m.logits + T * b->n_experts);
    m.weight = (float *)(void *)(m.idx + Tk);
    m.rows = (int32_t *)(void *)(m.weight + Tk);
    m.row_w = (float *)(void *)(m.rows + Tk);
    m.xe = m.row_w + Tk;
    m.oe = m.xe + TD;
    return m;
}

/* The sums: the routed channels [I], the shared expert's [S], then per expert [E] the
 * routing-weighted output norms and the tokens routed. */
static size_t moe_importance_doubles(const ac_block_dims *b)
{
    return (size_t)b->expert_ffn + (size_t)(b->shared_ffn > 0 ? b->shared_ffn : 0) + 2 * (size_t)b->n_experts;
}

/* experts: sum over routed tokens of ||routing weight * expert output|| / tokens routed;
 * ffn: relu2(expert up) over each expert's tokens of a sequence, the squares summed over
 * experts; shared_ffn: relu2(shared up xn). */
static void moe_importance_add(const ac_importance_chunk *ch, const ac_arch *arch, const ac_block_dims *b,
                               const ac_layer_weights *w, double *acc)
{
    int D = arch->hidden, T = ch->T, E = b->n_experts, K = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    int seq_len = ch->seq_len, start[AC_MAX_EXPERTS + 1];
    double *chan = acc, *shared = chan + I, *enorm = shared + (S > 0 ? S : 0), *ecount = enorm + E;
    moe_importance_buffers m = moe_importance_carve(ch, arch, b);

    ac_k_linear(ch->kctx, T, E, D, ch->xn, D, w->router, 0.0f, m.logits, E);
    ac_k_moe_route(ch->kctx, T, E, m.logits, w->router_bias, b->n_group, b->topk_group, K, b->norm_topk_prob,
                   b->routed_scaling, m.idx, m.weight);
    group_by_expert(T, K, E, m.idx, m.weight, NULL, start, m.rows, m.row_w, NULL);
    if (S > 0) {
        ac_k_linear(ch->kctx, T, S, D, ch->xn, D, w->up_proj, 0.0f, m.act, S);
        ac_k_relu2(ch->kctx, (size_t)T * S, m.act, m.act);
        ac_importance_add_means(ch, m.act, S, S, shared);
    }
    for (int e = 0; e < E; e++) {
        int n = start[e + 1] - start[e];
        if (n == 0)
            continue;
        const int32_t *re = m.rows + start[e];
        const float *rw = m.row_w + start[e];
        ac_k_gather_rows(ch->kctx, n, D, ch->xn, D, re, m.xe);
        ac_k_linear(ch->kctx, n, I, D, m.xe, D, w->experts_up + (size_t)e * I * D, 0.0f, m.act, I);
        ac_k_relu2(ch->kctx, (size_t)n * I, m.act, m.act);
        /* each sequence's tokens are one run of the expert's rows */
        for (int i0 = 0; i0 < n;) {
            int s = re[i0] / seq_len, i1 = i0;
            while (i1 < n && re[i1] / seq_len == s)
                i1++;
            ac_importance_add_mean(m.act + (size_t)i0 * I, I, i1 - i0, I, chan, ch->colsum);
            i0 = i1;
        }
        ac_k_linear(ch->kctx, n, D, I, m.act, I, w->experts_down + (size_t)e * D * I, 0.0f, m.oe, D);
        for (int i = 0; i < n; i++) {
            const float *o = m.oe + (size_t)i * D;
            double sq = 0.0;
            for (int c = 0; c < D; c++)
                sq += (double)o[c] * o[c];
            enorm[e] += fabs((double)rw[i]) * sqrt(sq);
        }
        ecount[e] += n;
    }
}

static void moe_importance_finish(const ac_block_dims *b, const double *acc, float *const *scores)
{
    int E = b->n_experts, I = b->expert_ffn, S = b->shared_ffn > 0 ? b->shared_ffn : 0;
    const double *chan = acc, *shared = chan + I, *enorm = shared + S, *ecount = enorm + E;
    for (int c = 0; c < I; c++)
        scores[AC_LAYER_FFN][c] = (float)sqrt(chan[c]);
    for (int e = 0; e < E; e++)
        scores[AC_LAYER_EXPERTS][e] = ecount[e] ? (float)(enorm[e] / ecount[e]) : 0.0f;
    for (int c = 0; c < S; c++)
        scores[AC_LAYER_SHARED_FFN][c] = (float)sqrt(shared[c]);
}

static void moe_permute_hidden(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, const int *perm,
                               float *tmp)
{
    int D = arch->hidden, E = b->n_experts, I = b->expert_ffn, S = b->shared_ffn;
    ac_permute_cols(w->router, (size_t)E, D, perm, tmp);
    ac_permute_cols(w->experts_up, (size_t)E * I, D, perm, tmp);
    for (int e = 0; e < E; e++)
        ac_permute_blocks(w->experts_down + (size_t)e * D * I, D, (size_t)I, perm, tmp);
    if (S > 0) {
        ac_permute_cols(w->up_proj, (size_t)S, D, perm, tmp);
        ac_permute_blocks(w->down_proj, D, (size_t)S, perm, tmp);
    }
}

/* experts: router rows, correction bias entries and whole expert blocks; ffn: one order
 * for every expert's up rows and down columns; shared_ffn: the shared expert's. */
static void moe_permute_axis(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, ac_layer_axis axis,
                             const int *perm, float *tmp)
{
    int D = arch->hidden, E = b->n_experts, I = b->expert_ffn;
    switch (axis) {
    case AC_LAYER_EXPERTS:
        ac_permute_blocks(w->router, E, (size_t)D, perm, tmp);
        ac_permute_blocks(w->router_bias, E, 1, perm, tmp);
        ac_permute_blocks(w->experts_up, E, (size_t)I * D, perm, tmp);
        ac_permute_blocks(w->experts_down, E, (size_t)D * I, perm, tmp);
        break;
    case AC_LAYER_FFN:
        for (int e = 0; e < E; e++)
            ac_permute_ffn(w->experts_up + (size_t)e * I * D, w->experts_down + (size_t)e * D * I, I, D, perm, tmp);
        break;
    case AC_LAYER_SHARED_FFN:
        ac_permute_ffn(w->up_proj, w->down_proj, b->shared_ffn, D, perm, tmp);
        break;
    default:
        break;
    }
}

static ac_status moe_check_cut(int i, int p, const ac_block_dims *c, const ac_block_dims *pb)
{
    ac_status st = ac_check_same_kind(i, p, c, pb);
    if (st != AC_OK)
        return st;
    const ac_dim_pair fixed[] = {{"top_k", c->top_k, pb->top_k},
                                 {"n_group", c->n_group, pb->n_group},
                                 {"topk_group", c->topk_group, pb->topk_group},
                                 {"norm_topk_prob", c->norm_topk_prob, pb->norm_topk_prob}};
    const ac_dim_pair width[] = {{"n_routed_experts", c->n_experts, pb->n_experts},
                                 {"moe_intermediate_size", c->expert_ffn, pb->expert_ffn},
                                 {"moe_shared_expert_intermediate_size", c->shared_ffn, pb->shared_ffn}};
    if ((st = ac_check_dims(i, p, fixed, 4, 1)) != AC_OK || (st = ac_check_dims(i, p, width, 3, 0)) != AC_OK)
        return st;
    if (c->routed_scaling != pb->routed_scaling)
        return ac_fail(AC_ERR_INVALID, "prune: layer %d (parent layer %d): routed_scaling_factor %g differs from the "
                       "parent's %g", i, p, c->routed_scaling, pb->routed_scaling);
    return AC_OK;
}

static void moe_row_key(const ac_block_dims *b, ac_cost_row *key)
{
    key->experts = b->n_experts;
    key->expert_ffn = b->expert_ffn;
    key->shared_ffn = b->shared_ffn;
}

const ac_block_ops ac_moe_ops = {
    .kind = AC_BLOCK_MOE,
    .name = "moe",
    .letter = 'E',
    .validate = moe_validate,
    .same_dims = moe_same_dims,
    .params = moe_params,
    .print = moe_print,
    .tag = moe_tag,
    .layout = moe_layout,
    .slice = moe_slice,
    .scratch_per_token = moe_scratch_per_token,
    .backward_scratch_per_token = moe_backward_scratch_per_token,
    .saved_per_token = moe_saved_per_token,
    .host_per_token = moe_host_per_token,
    .state_floats = ac_block_no_state,
    .kv_heads = ac_block_no_kv,
    .kv_head_dim = ac_block_no_kv,
    .forward = moe_forward,
    .backward = moe_backward,
    .axis_length = moe_axis_length,
    .axis_run = moe_axis_run,
    .cost_axis = moe_cost_axis,
    .importance_per_token = moe_importance_per_token,
    .importance_doubles = moe_importance_doubles,
    .importance_add = moe_importance_add,
    .importance_finish = moe_importance_finish,
    .permute_hidden = moe_permute_hidden,
    .permute_axis = moe_permute_axis,
    .check_cut = moe_check_cut,
    .row_key = moe_row_key,
};
