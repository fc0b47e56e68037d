/* The inference runtime: planned buffers, batch checks, and the forward of a packed
 * batch of sequences that each append new tokens to their cache (through the driver). */
#include "runtime/runtime_internal.h"

#include "autocompress/probe.h"
#include "runtime/plan.h"

#include <omp.h>

#include <stdlib.h>
#include <string.h>

ac_status ac_runtime_create(const ac_model *model, ac_runtime **runtime)
{
    ac_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ac_fail(AC_ERR_NOMEM, "runtime: out of memory");
    rt->model = model;
    rt->kctx.backend = model->backend;
    rt->scratch_per_token = ac_plan_scratch_per_token(&model->arch);
    size_t D = (size_t)model->arch.hidden;
    rt->spread = ac_backend_of(&rt->kctx)->alloc(D * sizeof *rt->spread);
    rt->spread_host = malloc(D * sizeof *rt->spread_host);
    if (!rt->spread || !rt->spread_host) {
        ac_runtime_free(rt);
        return ac_fail(AC_ERR_NOMEM, "runtime: out of memory");
    }
    *runtime = rt;
    return AC_OK;
}

void ac_runtime_free(ac_runtime *runtime)
{
    if (!runtime)
        return;
    const ac_backend *be = ac_backend_of(&runtime->kctx);
    be->free(runtime->x);
    be->free(runtime->xn);
    be->free(runtime->mix);
    be->free(runtime->scratch);
    be->free(runtime->workspace);
    be->free(runtime->ids);
    be->free(runtime->iota);
    be->free(runtime->logits);
    be->free(runtime->spread);
    free(runtime->spread_host);
    free(runtime->ids_host);
    free(runtime->offset);
    free(runtime->len);
    free(runtime->views);
    free(runtime);
}

static ac_status reserve_tokens(ac_runtime *rt, int T, int n_seqs);
static ac_status reserve_workspace(ac_runtime *rt, size_t forward_bytes, int backward_longest);

ac_status ac_runtime_reserve_training(ac_runtime *rt, int total_tokens, int n_seqs)
{
    size_t need = ac_plan_backward_scratch_per_token(&rt->model->arch);
    if (need > rt->scratch_per_token || !rt->dense) { /* regrow every buffer: dense, at the per-token size */
        if (need > rt->scratch_per_token)
            rt->scratch_per_token = need;
        rt->capacity_tokens = 0;
        rt->dense = 1;
    }
    ac_status st = reserve_tokens(rt, total_tokens, n_seqs);
    if (st != AC_OK)
        return st;
    /* the training forward's longest sequence is at most the whole batch */
    size_t forward = ac_backend_of(&rt->kctx)->attention_workspace(omp_get_max_threads(), total_tokens, total_tokens);
    return reserve_workspace(rt, forward, total_tokens);
}

ac_status ac_runtime_device_status(ac_runtime *rt, const char *what)
{
    const char *why = ac_backend_of(&rt->kctx)->take_error();
    return why ? ac_fail(AC_ERR_DEVICE, "%s: %s", what, why) : AC_OK;
}

ac_block_ctx ac_runtime_block_ctx(ac_runtime *rt, float *saved)
{
    const ac_model *m = rt->model;
    return (ac_block_ctx){.kctx = &rt->kctx, .arch = &m->arch, .layers = m->layers, .bf16 = m->bf16,
                          .scratch = rt->scratch, .saved = saved, .host = rt->host, .iota = rt->iota};
}

/* An activation buffer or workspace: dense once the runtime is reserved for training. */
static void *alloc_activations(const ac_runtime *rt, size_t bytes)
{
    const ac_backend *be = ac_backend_of(&rt->kctx);
    return rt->dense ? be->alloc_dense(bytes) : be->alloc(bytes);
}

/* Grows the activation buffers to T rows (planned from the widest block per token). */
static ac_status reserve_tokens(ac_runtime *rt, int T, int n_seqs)
{
    if (n_seqs > rt->seqs_capacity) {
        int *offset = realloc(rt->offset, (size_t)n_seqs * sizeof *offset);
        if (offset)
            rt->offset = offset;
        int *len = offset ? realloc(rt->len, (size_t)n_seqs * sizeof *len) : NULL;
        if (len)
            rt->len = len;
        ac_cache_layers **views = len ? realloc(rt->views, (size_t)n_seqs * sizeof *views) : NULL;
        if (!views)
            return ac_fail(AC_ERR_NOMEM, "runtime: out of memory for %d sequences", n_seqs);
        rt->views = views;
        rt->seqs_capacity = n_seqs;
    }
    if (T <= rt->capacity_tokens)
        return AC_OK;
    ac_activation_plan plan = ac_plan_activations(&rt->model->arch, rt->scratch_per_token, T, 0);
    const ac_backend *be = ac_backend_of(&rt->kctx);
    float *bufs[4] = {alloc_activations(rt, plan.stream), alloc_activations(rt, plan.stream),
                      alloc_activations(rt, plan.stream), alloc_activations(rt, plan.scratch)};
    int32_t *ids = be->alloc((size_t)T * sizeof *ids), *iota = be->alloc((size_t)T * sizeof *iota);
    size_t host_floats = rt->model->backend ? (size_t)T * ac_plan_host_per_token(&rt->model->arch) : 0;
    int32_t *ids_host = malloc((size_t)T * sizeof *ids_host + host_floats * sizeof(float));
    if (!bufs[0] || !bufs[1] || !bufs[2] || !bufs[3] || !ids || !iota || !ids_host) {
        for (int i = 0; i < 4; i++)
            be->free(bufs[i]);
        be->free(ids);
        be->free(iota);
        free(ids_host);
        const char *why = be->take_error();
        return ac_fail(AC_ERR_NOMEM, "runtime: cannot allocate activations for %d tokens on %s%s%s", T, be->name,
                       why ? ": " : "", why ? why : "");
    }
    be->free(rt->x);
    be->free(rt->xn);
    be->free(rt->mix);
    be->free(rt->scratch);
    be->free(rt->ids);
    be->free(rt->iota);
    free(rt->ids_host);
    for (int t = 0; t < T; t++)
        ids_host[t] = t;
    be->copy(iota, ids_host, (size_t)T * sizeof *iota, AC_COPY_HOST_TO_DEVICE);
    rt->ids = ids;
    rt->iota = iota;
    rt->ids_host = ids_host;
    rt->host = host_floats ? (float *)(ids_host + T) : NULL;
    rt->x = bufs[0];
    rt->xn = bufs[1];
    rt->mix = bufs[2];
    rt->scratch = bufs[3];
    rt->capacity_tokens = T;
    return AC_OK;
}

/* Grows the kernel workspace to forward_bytes, or to what the attention backward needs
 * for sequences of up to backward_longest tokens (0: no backward) when that is more. */
static ac_status reserve_workspace(ac_runtime *rt, size_t forward_bytes, int backward_longest)
{
    size_t need = forward_bytes, tiles = ac_k_attention_backward_workspace(omp_get_max_threads(), backward_longest);
    if (backward_longest && tiles > need)
        need = tiles;
    if (need <= rt->workspace_bytes)
        return AC_OK;
    const ac_backend *be = ac_backend_of(&rt->kctx);
    void *grown = alloc_activations(rt, need);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "runtime: cannot allocate %zu bytes of attention workspace on %s", need,
                       be->name);
    be->free(rt->workspace);
    rt->workspace = grown;
    rt->workspace_bytes = need;
    rt->kctx.workspace = grown;
    rt->kctx.workspace_bytes = need;
    return AC_OK;
}

/* On a device, the logits of `count` floats are made in its memory first. */
static ac_status reserve_logits(ac_runtime *rt, size_t count)
{
    if (!rt->model->backend || count <= rt->logits_count)
        return AC_OK;
    const ac_backend *be = rt->model->backend;
    float *grown = be->alloc(count * sizeof *grown);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "runtime: cannot allocate %zu logits on %s", count, be->name);
    be->free(rt->logits);
    rt->logits = grown;
    rt->logits_count = count;
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

size_t ac_runtime_bytes(const ac_runtime *rt)
{
    ac_activation_plan plan = ac_plan_activations(&rt->model->arch, rt->scratch_per_token, rt->capacity_tokens, 0);
    return 3 * plan.stream + (rt->capacity_tokens ? plan.scratch + plan.staging : 0) + rt->workspace_bytes +
           rt->logits_count * sizeof(float);
}

void ac_runtime_set_probe(ac_runtime *runtime, ac_probe *probe) { runtime->probe = probe; }
void ac_runtime_set_masks(ac_runtime *runtime, const ac_masks *masks) { runtime->masks = masks; }

ac_status ac_runtime_forward(ac_runtime *rt, const ac_batch *batch, ac_logits_mode mode, float *logits)
{
    ac_status st = check_batch(rt, batch);
    if (st != AC_OK)
        return st;
    if (rt->masks && rt->model->backend)
        return ac_fail(AC_ERR_UNSUPPORTED, "forward: soft masks run on the CPU only; this model is on %s",
                       rt->model->backend->name);
    ac_k_flush_denormals();
    int T = 0;
    size_t workspace = 0;
    for (int s = 0; s < batch->n_seqs; s++) {
        int after = ac_cache_tokens(batch->caches[s]) + batch->n_tokens[s];
        size_t need = ac_backend_of(&rt->kctx)->attention_workspace(omp_get_max_threads(), batch->n_tokens[s], after);
        T += batch->n_tokens[s];
        workspace = need > workspace ? need : workspace;
    }
    st = reserve_tokens(rt, T, batch->n_seqs);
    if (st == AC_OK)
        st = reserve_workspace(rt, workspace, 0);
    int logit_rows = mode == AC_LOGITS_ALL ? T : mode == AC_LOGITS_LAST ? batch->n_seqs : 0;
    if (st == AC_OK)
        st = reserve_logits(rt, (size_t)logit_rows * rt->model->arch.vocab);
    for (int s = 0; st == AC_OK && s < batch->n_seqs; s++)
        st = ac_cache_reserve(batch->caches[s], ac_cache_tokens(batch->caches[s]) + batch->n_tokens[s]);
    if (st != AC_OK)
        return st;

    ac_seqs seqs = {.n = batch->n_seqs, .total = T, .offset = rt->offset, .len = rt->len, .caches = rt->views};
    for (int s = 0, o = 0; s < batch->n_seqs; o += batch->n_tokens[s], s++) {
        seqs.offset[s] = o;
        seqs.len[s] = batch->n_tokens[s];
        rt->views[s] = &batch->caches[s]->l;
    }
    ac_pass pass = {.masks = rt->masks, .xs = rt->x, .keep_inputs = 0};
    ac_driver_forward(rt, &seqs, batch->tokens, &pass);
    for (int s = 0; s < batch->n_seqs; s++)
        batch->caches[s]->l.tokens += batch->n_tokens[s];
    if (mode != AC_LOGITS_NONE) {
        if (rt->probe)
            ac_probe_begin(rt->probe, -1, AC_SITE_LM_HEAD);
        const ac_backend *be = rt->model->backend;
        ac_driver_logits(rt, &seqs, &pass, mode, be ? rt->logits : logits);
        if (be)
            be->copy(logits, rt->logits, (size_t)logit_rows * rt->model->arch.vocab * sizeof *logits,
                     AC_COPY_DEVICE_TO_HOST);
        if (rt->probe)
            ac_probe_end(rt->probe, -1, AC_SITE_LM_HEAD);
    }
    return ac_runtime_device_status(rt, "forward");
}
