/* GQA attention without positional encoding: q, k, v projections, causal softmax
 * attention, o_proj. Inference appends K and V to each sequence's cache; training
 * (caches == NULL) attends within the batch's own sequences and keeps nothing. */
#include "blocks/block.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static size_t attention_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    return 2 * q + 2 * kv;
}

/* q, k, v, att, datt, dq, dk, dv, K and V in the cache layout (when the forward is
 * recomputed) and two statistics per query and head. The scores are recomputed row by row
 * in the kernel's workspace, so nothing grows with T^2. */
static size_t attention_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    return 4 * q + 6 * kv + 2 * (size_t)b->attn_heads;
}

/* A training forward keeps q, k and v in rows ([T, nq], [T, nkv] twice), the attention's
 * output [T, nq] and its log normalisers ([T, 2 nH], the backward's stats: the first
 * half), which the backward would recompute. */
static size_t attention_saved_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return 2 * (size_t)b->attn_heads * b->attn_head_dim + 2 * (size_t)b->attn_kv_heads * b->attn_head_dim +
           2 * (size_t)b->attn_heads;
}

/* Copies L rows of K (or V) [L, n_kv*hd] into the cache layout [n_kv, cap, hd] from row
 * `past` on: per KV head, a gather of rows 0..L-1 (where the ops run). */
static void rows_to_heads(ac_block_ctx *c, float *cache, int cap, int past, int L, int n_kv, int hd, const float *rows)
{
    for (int j = 0; j < n_kv; j++)
        ac_k_gather_rows(c->kctx, L, hd, rows + (size_t)j * hd, n_kv * hd, c->iota,
                         cache + ((size_t)j * cap + past) * hd);
}

/* A few tokens (decode): q, k and v of every token as one batch of matrix-vector
 * products, one launch instead of three. */
enum { QKV_TOKENS_MAX = 4 };

static void qkv_of_tokens(ac_block_ctx *c, const ac_layer_weights *w, int T, int D, int nq, int nkv, const float *xn,
                          float *q, float *k, float *v)
{
    const float *W[3 * QKV_TOKENS_MAX], *x[3 * QKV_TOKENS_MAX];
    float *y[3 * QKV_TOKENS_MAX];
    int rows[3 * QKV_TOKENS_MAX], cols[3 * QKV_TOKENS_MAX];
    for (int t = 0; t < T; t++) {
        const float *proj[3] = {w->q_proj, w->k_proj, w->v_proj};
        float *dst[3] = {q + (size_t)t * nq, k + (size_t)t * nkv, v + (size_t)t * nkv};
        for (int j = 0; j < 3; j++) {
            W[3 * t + j] = proj[j];
            x[3 * t + j] = xn + (size_t)t * D;
            y[3 * t + j] = dst[j];
            rows[3 * t + j] = j ? nkv : nq;
            cols[3 * t + j] = D;
        }
    }
    ac_block_gemv_batch(c, 3 * T, W, rows, cols, x, y);
}

/* Training (no caches): K and V rows [T, nkv] copied into the cache layout [n_kv, T, hd]
 * of the whole batch (the sequence at offset o reads it from row o with capacity T), then
 * each sequence's attention into att, with its log normalisers in stats [T, 2 nH] when
 * stats is not NULL. The forward and the backward that recomputes it run this. */
static void batch_attention(ac_block_ctx *c, const ac_block_dims *b, const ac_seqs *seqs, const float *q,
                            const float *k_rows, const float *v_rows, float *k_heads, float *v_heads, float *att,
                            float *stats)
{
    int T = seqs->total, nH = b->attn_heads, nKV = b->attn_kv_heads, hd = b->attn_head_dim, nq = nH * hd;
    rows_to_heads(c, k_heads, T, 0, T, nKV, hd, k_rows);
    rows_to_heads(c, v_heads, T, 0, T, nKV, hd, v_rows);
    for (int s = 0; s < seqs->n; s++) {
        size_t o = (size_t)seqs->offset[s];
        ac_k_attention(c->kctx, seqs->len[s], 0, nH, nKV, hd, q + o * nq, nq, k_heads + o * hd, v_heads + o * hd, T,
                       1.0f / sqrtf((float)hd), att + o * nq, nq, stats ? stats + o * 2 * nH : NULL, 2 * nH);
    }
}

static void attention_forward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    (void)masks; /* attention has no masks of its own */
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total;
    int nH = b->attn_heads, nKV = b->attn_kv_heads, hd = b->attn_head_dim;
    int nq = nH * hd, nkv = nKV * hd;

    float *q = c->saved ? c->saved : ac_block_scratch(c, (size_t)T * nq);
    float *k = ac_block_scratch(c, (size_t)T * nkv);
    float *v = ac_block_scratch(c, (size_t)T * nkv);
    float *att = c->saved ? q + (size_t)T * (nq + 2 * nkv) : ac_block_scratch(c, (size_t)T * nq);
    float *stats = c->saved ? att + (size_t)T * nq : NULL; /* the log normalisers, for the backward */
    float scale = 1.0f / sqrtf((float)hd);
    if (seqs->caches && T <= QKV_TOKENS_MAX)
        qkv_of_tokens(c, w, T, D, nq, nkv, xn, q, k, v);
    else
        ac_block_linear(c, T, nq, D, xn, D, w->q_proj, 0.0f, q, nq);
    if (!seqs->caches && c->saved) {
        /* K and V kept in rows for the backward, then copied into the cache layout */
        float *k_rows = q + (size_t)T * nq, *v_rows = k_rows + (size_t)T * nkv;
        ac_block_linear(c, T, nkv, D, xn, D, w->k_proj, 0.0f, k_rows, nkv);
        ac_block_linear(c, T, nkv, D, xn, D, w->v_proj, 0.0f, v_rows, nkv);
        batch_attention(c, b, seqs, q, k_rows, v_rows, k, v, att, stats);
    } else if (!seqs->caches) {
        /* K and V straight into the cache layout [n_kv, T, hd] of the whole batch */
        for (int g = 0; g < nKV; g++) {
            size_t rows = (size_t)g * hd * D;
            ac_block_linear(c, T, hd, D, xn, D, ac_block_weights_at(c, w->k_proj, rows), 0.0f, k + (size_t)g * T * hd, hd);
            ac_block_linear(c, T, hd, D, xn, D, ac_block_weights_at(c, w->v_proj, rows), 0.0f, v + (size_t)g * T * hd, hd);
        }
        for (int s = 0; s < seqs->n; s++) {
            int o = seqs->offset[s];
            ac_k_attention(c->kctx, seqs->len[s], 0, nH, nKV, hd, q + (size_t)o * nq, nq, k + (size_t)o * hd,
                           v + (size_t)o * hd, T, scale, att + (size_t)o * nq, nq, NULL, 0);
        }
    } else {
        if (T > QKV_TOKENS_MAX) {
            ac_block_linear(c, T, nkv, D, xn, D, w->k_proj, 0.0f, k, nkv);
            ac_block_linear(c, T, nkv, D, xn, D, w->v_proj, 0.0f, v, nkv);
        }
        for (int s = 0; s < seqs->n; s++) {
            int o = seqs->offset[s], L = seqs->len[s];
            const ac_cache_layers *cache = seqs->caches[s];
            rows_to_heads(c, cache->k[layer], cache->capacity, cache->tokens, L, nKV, hd, k + (size_t)o * nkv);
            rows_to_heads(c, cache->v[layer], cache->capacity, cache->tokens, L, nKV, hd, v + (size_t)o * nkv);
            ac_k_attention(c->kctx, L, cache->tokens, nH, nKV, hd, q + (size_t)o * nq, nq, cache->k[layer],
                           cache->v[layer], cache->capacity, scale, att + (size_t)o * nq, nq, NULL, 0);
        }
    }
    ac_block_linear(c, T, D, nq, att, nq, w->o_proj, 0.0f, out, D);
}

static void attention_backward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                           const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    (void)masks;
    (void)mask_grads;
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total;
    int nH = b->attn_heads, nKV = b->attn_kv_heads, hd = b->attn_head_dim;
    int nq = nH * hd, nkv = nKV * hd;

    int kept = c->saved != NULL; /* q, k, v, the output and its normalisers from this pass's forward */
    float *q = kept ? c->saved : ac_block_scratch(c, (size_t)T * nq);
    float *k = kept ? q + (size_t)T * nq : ac_block_scratch(c, (size_t)T * nkv);
    float *v = kept ? k + (size_t)T * nkv : ac_block_scratch(c, (size_t)T * nkv);
    float *att = kept ? v + (size_t)T * nkv : ac_block_scratch(c, (size_t)T * nq);
    float *stats = kept ? att + (size_t)T * nq : ac_block_scratch(c, (size_t)T * 2 * nH);
    float *datt = ac_block_scratch(c, (size_t)T * nq);
    float *dq = ac_block_scratch(c, (size_t)T * nq);
    float *dk = ac_block_scratch(c, (size_t)T * nkv);
    float *dv = ac_block_scratch(c, (size_t)T * nkv);
    float scale = 1.0f / sqrtf((float)hd);

    if (!kept) { /* the forward again, as a keeping forward runs it */
        ac_k_linear(c->kctx, T, nq, D, xn, D, w->q_proj, 0.0f, q, nq);
        ac_k_linear(c->kctx, T, nkv, D, xn, D, w->k_proj, 0.0f, k, nkv);
        ac_k_linear(c->kctx, T, nkv, D, xn, D, w->v_proj, 0.0f, v, nkv);
        batch_attention(c, b, seqs, q, k, v, ac_block_scratch(c, (size_t)T * nkv), ac_block_scratch(c, (size_t)T * nkv), att,
                        stats);
    }
    ac_k_linear_backward(c->kctx, T, D, nq, NULL, nq, w->o_proj, dout, D, 0.0f, datt, nq, NULL);
    for (int s = 0; s < seqs->n; s++) {
        size_t o = (size_t)seqs->offset[s];
        ac_k_attention_backward(c->kctx, seqs->len[s], nH, nKV, hd, q + o * nq, nq, k + o * nkv, v + o * nkv, nkv,
                                datt + o * nq, scale, att + o * nq, stats + o * 2 * nH, dq + o * nq, dk + o * nkv,
                                dv + o * nkv);
    }
    if (grad)
        ac_k_linear_backward(c->kctx, T, D, nq, att, nq, NULL, dout, D, 0.0f, NULL, nq, grad->o_proj);
    ac_k_linear_backward(c->kctx, T, nq, D, xn, D, w->q_proj, dq, nq, 0.0f, dxn, D, grad ? grad->q_proj : NULL);
    ac_k_linear_backward(c->kctx, T, nkv, D, xn, D, w->k_proj, dk, nkv, 1.0f, dxn, D, grad ? grad->k_proj : NULL);
    ac_k_linear_backward(c->kctx, T, nkv, D, xn, D, w->v_proj, dv, nkv, 1.0f, dxn, D, grad ? grad->v_proj : NULL);
}

/* ---- the kind's entry in the block table ---- */

static ac_status attention_validate(int i, const ac_block_dims *b)
{
    if (b->attn_heads <= 0)
        return ac_layer_fail(i, b, "attn_heads must be positive, got %d", b->attn_heads);
    if (b->attn_kv_heads <= 0)
        return ac_layer_fail(i, b, "attn_kv_heads must be positive, got %d", b->attn_kv_heads);
    if (b->attn_head_dim <= 0)
        return ac_layer_fail(i, b, "attn_head_dim must be positive, got %d", b->attn_head_dim);
    if (b->attn_heads % b->attn_kv_heads)
        return ac_layer_fail(i, b, "attn_heads %d is not a multiple of attn_kv_heads %d", b->attn_heads,
                             b->attn_kv_heads);
    int64_t q = (int64_t)b->attn_heads * b->attn_head_dim;
    if (q > INT_MAX)
        return ac_layer_fail(i, b, "attn_heads x attn_head_dim overflows");
    return AC_OK;
}

static int attention_same_dims(const ac_block_dims *a, const ac_block_dims *b)
{
    return a->attn_heads == b->attn_heads && a->attn_kv_heads == b->attn_kv_heads &&
           a->attn_head_dim == b->attn_head_dim;
}

static int64_t attention_params(const ac_arch *arch, const ac_block_dims *b, int active)
{
    (void)active;
    int64_t q = (int64_t)b->attn_heads * b->attn_head_dim, kv = (int64_t)b->attn_kv_heads * b->attn_head_dim;
    return 2 * q * arch->hidden + 2 * kv * arch->hidden;
}

static void attention_print(const ac_block_dims *b, FILE *out)
{
    fprintf(out, "heads %d, kv_heads %d, head_dim %d", b->attn_heads, b->attn_kv_heads, b->attn_head_dim);
}

static void attention_tag(const ac_block_dims *b, char *buf, size_t size)
{
    (void)b;
    snprintf(buf, size, "*");
}

static void attention_layout(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w)
{
    int D = arch->hidden, q = b->attn_heads * b->attn_head_dim, kv = b->attn_kv_heads * b->attn_head_dim;
    ac_layout_product(l, &w->q_proj, 2, AC_SHAPE(q, D), "layers.%d.mixer.q_proj.weight", i);
    ac_layout_product(l, &w->k_proj, 2, AC_SHAPE(kv, D), "layers.%d.mixer.k_proj.weight", i);
    ac_layout_product(l, &w->v_proj, 2, AC_SHAPE(kv, D), "layers.%d.mixer.v_proj.weight", i);
    ac_layout_product(l, &w->o_proj, 2, AC_SHAPE(D, q), "layers.%d.mixer.o_proj.weight", i);
}

/* Leading query and KV heads of the same head size. */
static void attention_slice(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw,
                            const ac_arch *parent, const ac_block_dims *pb, const ac_layer_weights *pw)
{
    if (pb->kind != AC_BLOCK_ATTENTION || cb->attn_head_dim != pb->attn_head_dim)
        return;
    int Dc = child->hidden, Dp = parent->hidden, hd = cb->attn_head_dim;
    int q = (cb->attn_heads < pb->attn_heads ? cb->attn_heads : pb->attn_heads) * hd;
    int kv = (cb->attn_kv_heads < pb->attn_kv_heads ? cb->attn_kv_heads : pb->attn_kv_heads) * hd;
    ac_copy_rows(cw->q_proj, Dc, 0, pw->q_proj, Dp, 0, q);
    ac_copy_rows(cw->k_proj, Dc, 0, pw->k_proj, Dp, 0, kv);
    ac_copy_rows(cw->v_proj, Dc, 0, pw->v_proj, Dp, 0, kv);
    ac_copy_rows(cw->o_proj, cb->attn_heads * hd, 0, pw->o_proj, pb->attn_heads * hd, 0, Dc < Dp ? Dc : Dp);
}

static int attention_kv_heads(const ac_block_dims *b) { return b->attn_kv_heads; }
static int attention_kv_head_dim(const ac_block_dims *b) { return b->attn_head_dim; }

static void attention_permute_hidden(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w,
                                     const int *perm, float *tmp)
{
    int D = arch->hidden;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    ac_permute_cols(w->q_proj, q, D, perm, tmp);
    ac_permute_cols(w->k_proj, kv, D, perm, tmp);
    ac_permute_cols(w->v_proj, kv, D, perm, tmp);
    ac_permute_blocks(w->o_proj, D, q, perm, tmp);
}

/* Attention heads are not an axis of the search (no head importance): a cut keeps them whole. */
static ac_status attention_check_cut(int i, int p, const ac_block_dims *c, const ac_block_dims *pb)
{
    ac_status st = ac_check_same_kind(i, p, c, pb);
    if (st != AC_OK)
        return st;
    const ac_dim_pair fixed[] = {{"attn_heads", c->attn_heads, pb->attn_heads},
                                 {"attn_kv_heads", c->attn_kv_heads, pb->attn_kv_heads},
                                 {"attn_head_dim", c->attn_head_dim, pb->attn_head_dim}};
    return ac_check_dims(i, p, fixed, 3, 1);
}

static void attention_row_key(const ac_block_dims *b, ac_cost_row *key)
{
    (void)b;
    (void)key; /* one row per hidden size */
}

const ac_block_ops ac_attention_ops = {
    .kind = AC_BLOCK_ATTENTION,
    .name = "attention",
    .letter = '*',
    .validate = attention_validate,
    .same_dims = attention_same_dims,
    .params = attention_params,
    .print = attention_print,
    .tag = attention_tag,
    .layout = attention_layout,
    .slice = attention_slice,
    .scratch_per_token = attention_scratch_per_token,
    .backward_scratch_per_token = attention_backward_scratch_per_token,
    .saved_per_token = attention_saved_per_token,
    .state_floats = ac_block_no_state,
    .kv_heads = attention_kv_heads,
    .kv_head_dim = attention_kv_head_dim,
    .forward = attention_forward,
    .backward = attention_backward,
    .axis_length = ac_block_no_axis,
    .axis_run = ac_block_no_axis,
    .cost_axis = ac_block_no_cost_axis,
    .permute_hidden = attention_permute_hidden,
    .check_cut = attention_check_cut,
    .row_key = attention_row_key,
};
