/* GQA attention without positional encoding: q, k, v projections, K and V appended to
 * the sequence's cache, causal softmax attention, o_proj. */
#include "runtime/runtime_internal.h"

#include <math.h>
#include <string.h>

size_t ac_attention_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
    return 2 * q + 2 * kv;
}

/* Copies L new rows of K (or V) [L, n_kv*hd] into the cache layout [n_kv, cap, hd]. */
static void append_kv(float *cache, int cap, int past, int L, int n_kv, int hd, const float *rows)
{
    for (int t = 0; t < L; t++)
        for (int j = 0; j < n_kv; j++)
            memcpy(cache + ((size_t)j * cap + past + t) * hd, rows + ((size_t)t * n_kv + j) * hd,
                   (size_t)hd * sizeof *cache);
}

void ac_attention_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out)
{
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
    ac_k_linear(&rt->kctx, T, nq, D, xn, D, w->q_proj, 0.0f, q, nq);
    ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->k_proj, 0.0f, k, nkv);
    ac_k_linear(&rt->kctx, T, nkv, D, xn, D, w->v_proj, 0.0f, v, nkv);
    float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        ac_cache_layers *c = &seqs->caches[s]->l;
        append_kv(c->k[layer], c->capacity, c->tokens, L, nKV, hd, k + (size_t)o * nkv);
        append_kv(c->v[layer], c->capacity, c->tokens, L, nKV, hd, v + (size_t)o * nkv);
        ac_k_attention(&rt->kctx, L, c->tokens, nH, nKV, hd, q + (size_t)o * nq, nq, c->k[layer],
                       c->v[layer], c->capacity, scale, att + (size_t)o * nq, nq);
    }
    ac_k_linear(&rt->kctx, T, D, nq, att, nq, w->o_proj, 0.0f, out, D);
}
