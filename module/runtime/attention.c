/* GQA attention without positional encoding: q, k, v projections, causal softmax
 * attention, o_proj. Inference appends K and V to each sequence's cache; training
 * (caches == NULL) attends within the batch's own sequences and keeps nothing. */
#include "runtime/runtime_internal.h"

#include <math.h>
#include <string.h>

size_t ac_attention_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    return 2 * q + 2 * kv;
}

/* q, k, v, att, datt, dq, dk, dv and two statistics per query and head. The scores are
 * recomputed row by row in the kernel's workspace, so nothing grows with T^2. */
size_t ac_attention_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    return 4 * q + 4 * kv + 2 * (size_t)b->attn_heads;
}

/* Copies L new rows of K (or V) [L, n_kv*hd] into the cache layout [n_kv, cap, hd]. */
static void append_kv(float *cache, int cap, int past, int L, int n_kv, int hd, const float *rows)
{
    for (int t = 0; t < L; t++)
        for (int j = 0; j < n_kv; j++)
            memcpy(cache + ((size_t)j * cap + past + t) * hd, rows + ((size_t)t * n_kv + j) * hd,
                   (size_t)hd * sizeof *cache);
}

void ac_attention_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    (void)masks; /* attention has no masks of its own */
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total;
    int nH = b->attn_heads, nKV = b->attn_kv_heads, hd = b->attn_head_dim;
    int nq = nH * hd, nkv = nKV * hd;

    float *q = ac_scratch(rt, (size_t)T * nq);
    float *k = ac_scratch(rt, (size_t)T * nkv);
    float *v = ac_scratch(rt, (size_t)T * nkv);
    float *att = ac_scratch(rt, (size_t)T * nq);
    float scale = 1.0f / sqrtf((float)hd);
    ac_k_linear(&rt->kctx, T, nq, D, xn, D, w->q_proj, 0.0f, q, nq);
    if (!seqs->caches) {
        /* K and V straight into the cache layout [n_kv, T, hd] of the whole batch: the
         * sequence at offset o reads it from row o with capacity T. */
        for (int g = 0; g < nKV; g++) {
            ac_k_linear(&rt->kctx, T, hd, D, xn, D, w->k_proj + (size_t)g * hd * D, 0.0f, k + (size_t)g * T * hd, hd);
            ac_k_linear(&rt->kctx, T, hd, D, xn, D, w->v_proj + (size_t)g * hd * D, 0.0f, v + (size_t)g * T * hd, hd);
        }
        for (int s = 0; s < seqs->n; s++) {
            int o = seqs->offset[s];
            ac_k_attention(&rt->kctx, seqs->len[s], 0, nH, nKV, hd, q + (size_t)o * nq, nq, k + (size_t)o * hd,
                           v + (size_t)o * hd, T, scale, att + (size_t)o * nq, nq);
        }
    } else {
        ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->k_proj, 0.0f, k, nkv);
        ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->v_proj, 0.0f, v, nkv);
        for (int s = 0; s < seqs->n; s++) {
            int o = seqs->offset[s], L = seqs->len[s];
            ac_cache_layers *c = &seqs->caches[s]->l;
            append_kv(c->k[layer], c->capacity, c->tokens, L, nKV, hd, k + (size_t)o * nkv);
            append_kv(c->v[layer], c->capacity, c->tokens, L, nKV, hd, v + (size_t)o * nkv);
            ac_k_attention(&rt->kctx, L, c->tokens, nH, nKV, hd, q + (size_t)o * nq, nq, c->k[layer],
                           c->v[layer], c->capacity, scale, att + (size_t)o * nq, nq);
        }
    }
    ac_k_linear(&rt->kctx, T, D, nq, att, nq, w->o_proj, 0.0f, out, D);
}

void ac_attention_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                           const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    (void)masks;
    (void)mask_grads;
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total;
    int nH = b->attn_heads, nKV = b->attn_kv_heads, hd = b->attn_head_dim;
    int nq = nH * hd, nkv = nKV * hd;

    float *q = ac_scratch(rt, (size_t)T * nq);
    float *k = ac_scratch(rt, (size_t)T * nkv);
    float *v = ac_scratch(rt, (size_t)T * nkv);
    float *att = ac_scratch(rt, (size_t)T * nq);
    float *datt = ac_scratch(rt, (size_t)T * nq);
    float *dq = ac_scratch(rt, (size_t)T * nq);
    float *dk = ac_scratch(rt, (size_t)T * nkv);
    float *dv = ac_scratch(rt, (size_t)T * nkv);
    float *stats = ac_scratch(rt, (size_t)T * 2 * nH);
    float scale = 1.0f / sqrtf((float)hd);

    ac_k_linear(&rt->kctx, T, nq, D, xn, D, w->q_proj, 0.0f, q, nq);
    ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->k_proj, 0.0f, k, nkv);
    ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->v_proj, 0.0f, v, nkv);
    ac_k_linear_backward(&rt->kctx, T, D, nq, NULL, nq, w->o_proj, dout, D, 0.0f, datt, nq, NULL);
    for (int s = 0; s < seqs->n; s++) {
        size_t o = (size_t)seqs->offset[s];
        ac_k_attention_backward(&rt->kctx, seqs->len[s], nH, nKV, hd, q + o * nq, nq, k + o * nkv, v + o * nkv, nkv,
                                datt + o * nq, scale, att + o * nq, stats + o * 2 * nH, dq + o * nq, dk + o * nkv,
                                dv + o * nkv);
    }
    if (grad)
        ac_k_linear_backward(&rt->kctx, T, D, nq, att, nq, NULL, dout, D, 0.0f, NULL, nq, grad->o_proj);
    ac_k_linear_backward(&rt->kctx, T, nq, D, xn, D, w->q_proj, dq, nq, 0.0f, dxn, D, grad ? grad->q_proj : NULL);
    ac_k_linear_backward(&rt->kctx, T, nkv, D, xn, D, w->k_proj, dk, nkv, 1.0f, dxn, D, grad ? grad->k_proj : NULL);
    ac_k_linear_backward(&rt->kctx, T, nkv, D, xn, D, w->v_proj, dv, nkv, 1.0f, dxn, D, grad ? grad->v_proj : NULL);
}
