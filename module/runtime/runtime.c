/* The forward driver: embeddings, pre-norm residual blocks, final norm, LM head, over a
 * packed batch of sequences that each append new tokens to their cache. */
#include "runtime/runtime_internal.h"

#include "autocompress/probe.h"

#include <stdlib.h>
#include <string.h>

static size_t block_scratch_per_token(const ac_arch *a, const ac_block_dims *b)
{
    switch (b->kind) {
    case AC_BLOCK_MAMBA: return ac_mamba2_scratch_per_token(a, b);
    case AC_BLOCK_ATTENTION: return ac_attention_scratch_per_token(a, b);
    case AC_BLOCK_MLP: return ac_mlp_scratch_per_token(a, b);
    case AC_BLOCK_MOE: return ac_moe_scratch_per_token(a, b);
    }
    return 0;
}

ac_status ac_runtime_create(const ac_model *model, ac_runtime **runtime)
{
    ac_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ac_fail(AC_ERR_NOMEM, "runtime: out of memory");
    rt->model = model;
    const ac_arch *a = &model->arch;
    for (int i = 0; i < a->n_layers; i++) {
        size_t need = block_scratch_per_token(a, &a->layers[i]);
        if (need > rt->scratch_per_token)
            rt->scratch_per_token = need;
    }
    *runtime = rt;
    return AC_OK;
}

void ac_runtime_free(ac_runtime *runtime)
{
    if (!runtime)
        return;
    free(runtime->x);
    free(runtime->xn);
    free(runtime->mix);
    free(runtime->scratch);
    free(runtime->workspace);
    free(runtime->offset);
    free(runtime->len);
    free(runtime);
}

static size_t block_backward_scratch_per_token(const ac_arch *a, const ac_block_dims *b)
{
    switch (b->kind) {
    case AC_BLOCK_MAMBA: return ac_mamba2_backward_scratch_per_token(a, b);
    case AC_BLOCK_ATTENTION: return ac_attention_backward_scratch_per_token(a, b);
    case AC_BLOCK_MLP: return ac_mlp_backward_scratch_per_token(a, b);
    case AC_BLOCK_MOE: return ac_moe_backward_scratch_per_token(a, b);
    }
    return 0;
}

static ac_status reserve_tokens(ac_runtime *rt, int T, int n_seqs);
static ac_status reserve_workspace(ac_runtime *rt, int longest);

ac_status ac_runtime_reserve_training(ac_runtime *rt, int total_tokens, int n_seqs)
{
    const ac_arch *a = &rt->model->arch;
    size_t need = rt->scratch_per_token;
    for (int i = 0; i < a->n_layers; i++) {
        size_t b = block_backward_scratch_per_token(a, &a->layers[i]);
        need = b > need ? b : need;
    }
    if (need > rt->scratch_per_token) {
        rt->scratch_per_token = need;
        rt->capacity_tokens = 0; /* regrow every buffer at the new per-token size */
    }
    ac_status st = reserve_tokens(rt, total_tokens, n_seqs);
    return st == AC_OK ? reserve_workspace(rt, total_tokens) : st;
}

float *ac_scratch(ac_runtime *rt, size_t count)
{
    float *p = rt->scratch + rt->scratch_used;
    rt->scratch_used += count;
    return p;
}

/* Grows the activation buffers to T rows (planned from the widest block per token). */
static ac_status reserve_tokens(ac_runtime *rt, int T, int n_seqs)
{
    if (n_seqs > rt->seqs_capacity) {
        int *offset = realloc(rt->offset, (size_t)n_seqs * sizeof *offset);
        if (offset)
            rt->offset = offset;
        int *len = offset ? realloc(rt->len, (size_t)n_seqs * sizeof *len) : NULL;
        if (!len)
            return ac_fail(AC_ERR_NOMEM, "runtime: out of memory for %d sequences", n_seqs);
        rt->len = len;
        rt->seqs_capacity = n_seqs;
    }
    if (T <= rt->capacity_tokens)
        return AC_OK;
    size_t D = (size_t)rt->model->arch.hidden;
    float *bufs[4] = {malloc((size_t)T * D * sizeof(float)), malloc((size_t)T * D * sizeof(float)),
                      malloc((size_t)T * D * sizeof(float)),
                      malloc(((size_t)T * rt->scratch_per_token + 1) * sizeof(float))};
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3]) {
        for (int i = 0; i < 4; i++)
            free(bufs[i]);
        return ac_fail(AC_ERR_NOMEM, "runtime: cannot allocate activations for %d tokens", T);
    }
    free(rt->x);
    free(rt->xn);
    free(rt->mix);
    free(rt->scratch);
    rt->x = bufs[0];
    rt->xn = bufs[1];
    rt->mix = bufs[2];
    rt->scratch = bufs[3];
    rt->capacity_tokens = T;
    return AC_OK;
}

/* Grows the kernel workspace for sequences of up to `longest` tokens. */
static ac_status reserve_workspace(ac_runtime *rt, int longest)
{
    size_t need = ac_k_attention_workspace(longest);
    if (need <= rt->workspace_bytes)
        return AC_OK;
    void *grown = malloc(need);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "runtime: cannot allocate %zu bytes of attention workspace", need);
    free(rt->workspace);
    rt->workspace = grown;
    rt->workspace_bytes = need;
    rt->kctx.workspace = grown;
    rt->kctx.workspace_bytes = need;
    return AC_OK;
}

static ac_status check_batch(const ac_runtime *rt, const ac_batch *batch)
{
    const ac_arch *a = &rt->model->arch;
    if (batch->n_seqs < 1)
        return ac_fail(AC_ERR_INVALID, "forward: a batch needs at least one sequence");
    for (int s = 0; s < batch->n_seqs; s++) {
        if (batch->n_tokens[s] < 1)
            return ac_fail(AC_ERR_INVALID, "forward: sequence %d has %d new tokens (needs >= 1)", s, batch->n_tokens[s]);
        if (!batch->caches[s] || batch->caches[s]->model != rt->model)
            return ac_fail(AC_ERR_INVALID, "forward: sequence %d has no cache of this model", s);
        for (int q = 0; q < s; q++)
            if (batch->caches[q] == batch->caches[s])
                return ac_fail(AC_ERR_INVALID, "forward: sequences %d and %d share one cache", q, s);
        for (int t = 0; t < batch->n_tokens[s]; t++) {
            int32_t id = batch->tokens[s][t];
            if (id < 0 || id >= a->vocab)
                return ac_fail(AC_ERR_INVALID, "forward: sequence %d, position %d: token id %d is outside the vocabulary [0, %d)",
                               s, t, id, a->vocab);
        }
    }
    return AC_OK;
}

static void run_block(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out)
{
    rt->scratch_used = 0;
    switch (rt->model->arch.layers[layer].kind) {
    case AC_BLOCK_MAMBA: ac_mamba2_forward(rt, layer, seqs, xn, NULL, out); break;
    case AC_BLOCK_ATTENTION: ac_attention_forward(rt, layer, seqs, xn, NULL, out); break;
    case AC_BLOCK_MLP: ac_mlp_forward(rt, layer, seqs, xn, NULL, out); break;
    case AC_BLOCK_MOE: ac_moe_forward(rt, layer, seqs, xn, NULL, out); break;
    }
}

void ac_runtime_set_probe(ac_runtime *runtime, ac_probe *probe) { runtime->probe = probe; }

static void compute_logits(ac_runtime *rt, const ac_seqs *seqs, ac_logits_mode mode, float *logits)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden, V = m->arch.vocab;
    int rows = mode == AC_LOGITS_ALL ? seqs->total : seqs->n;
    if (mode == AC_LOGITS_LAST)
        for (int s = 0; s < seqs->n; s++)
            memcpy(rt->mix + (size_t)s * D, rt->x + (size_t)(seqs->offset[s] + seqs->len[s] - 1) * D, (size_t)D * sizeof(float));
    const float *src = mode == AC_LOGITS_ALL ? rt->x : rt->mix;
    ac_k_rmsnorm(&rt->kctx, rows, D, src, D, m->norm_f, m->arch.norm_eps, rt->xn, D);
    ac_k_linear(&rt->kctx, rows, V, D, rt->xn, D, m->lm_head, 0.0f, logits, V);
}

ac_status ac_runtime_forward(ac_runtime *rt, const ac_batch *batch, ac_logits_mode mode, float *logits)
{
    ac_status st = check_batch(rt, batch);
    if (st != AC_OK)
        return st;
    ac_k_flush_denormals();
    int T = 0, longest = 0;
    for (int s = 0; s < batch->n_seqs; s++) {
        int after = ac_cache_tokens(batch->caches[s]) + batch->n_tokens[s];
        T += batch->n_tokens[s];
        longest = after > longest ? after : longest;
    }
    st = reserve_tokens(rt, T, batch->n_seqs);
    if (st == AC_OK)
        st = reserve_workspace(rt, longest);
    for (int s = 0; st == AC_OK && s < batch->n_seqs; s++)
        st = ac_cache_reserve(batch->caches[s], ac_cache_tokens(batch->caches[s]) + batch->n_tokens[s]);
    if (st != AC_OK)
        return st;

    const ac_model *m = rt->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden;
    ac_seqs seqs = {.n = batch->n_seqs, .total = T, .offset = rt->offset, .len = rt->len, .caches = batch->caches};
    ac_probe *probe = rt->probe;
    if (probe)
        ac_probe_begin(probe, -1, AC_SITE_EMBEDDING);
    for (int s = 0, o = 0; s < batch->n_seqs; o += batch->n_tokens[s], s++) {
        seqs.offset[s] = o;
        seqs.len[s] = batch->n_tokens[s];
        for (int t = 0; t < batch->n_tokens[s]; t++)
            memcpy(rt->x + (size_t)(o + t) * D, m->embeddings + (size_t)batch->tokens[s][t] * D, (size_t)D * sizeof(float));
    }
    if (probe)
        ac_probe_end(probe, -1, AC_SITE_EMBEDDING);
    for (int i = 0; i < a->n_layers; i++) {
        if (probe)
            ac_probe_begin(probe, i, (ac_site_kind)a->layers[i].kind);
        ac_k_rmsnorm(&rt->kctx, T, D, rt->x, D, m->layers[i].norm, a->norm_eps, rt->xn, D);
        run_block(rt, i, &seqs, rt->xn, rt->mix);
        ac_k_add(&rt->kctx, (size_t)T * D, rt->mix, rt->x);
        if (probe)
            ac_probe_end(probe, i, (ac_site_kind)a->layers[i].kind);
    }
    for (int s = 0; s < batch->n_seqs; s++)
        batch->caches[s]->l.tokens += batch->n_tokens[s];
    if (mode != AC_LOGITS_NONE) {
        if (probe)
            ac_probe_begin(probe, -1, AC_SITE_LM_HEAD);
        compute_logits(rt, &seqs, mode, logits);
        if (probe)
            ac_probe_end(probe, -1, AC_SITE_LM_HEAD);
    }
    return AC_OK;
}
