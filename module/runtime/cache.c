/* Per-sequence decode state: KV rows that grow with the sequence, each kind's fixed
 * state (Mamba's conv and SSM state), both sized by the block table. */
#include "runtime/runtime_internal.h"
#include "runtime/plan.h"

#include <stdlib.h>
#include <string.h>

ac_status ac_cache_create(const ac_model *model, ac_cache **cache)
{
    const ac_arch *a = &model->arch;
    const ac_backend *be = ac_model_backend(model);
    ac_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "cache: out of memory");
    c->model = model;
    c->l.k = calloc((size_t)a->n_layers, sizeof *c->l.k);
    c->l.v = calloc((size_t)a->n_layers, sizeof *c->l.v);
    c->l.state = calloc((size_t)a->n_layers, sizeof *c->l.state);
    int ok = c->l.k && c->l.v && c->l.state;
    for (int i = 0; ok && i < a->n_layers; i++) {
        size_t floats = ac_plan_block_state_floats(&a->layers[i]);
        if (floats == 0)
            continue;
        c->l.state[i] = be->alloc(floats * sizeof(float));
        ok = c->l.state[i] != NULL;
        if (ok)
            be->memset_zero(c->l.state[i], floats * sizeof(float));
    }
    if (!ok) {
        ac_cache_free(c);
        return ac_fail(AC_ERR_NOMEM, "cache: out of memory for the Mamba state on %s", be->name);
    }
    *cache = c;
    return AC_OK;
}

void ac_cache_clear(ac_cache *cache)
{
    const ac_arch *a = &cache->model->arch;
    const ac_backend *be = ac_model_backend(cache->model);
    for (int i = 0; i < a->n_layers; i++)
        if (cache->l.state[i])
            be->memset_zero(cache->l.state[i], ac_plan_block_state_floats(&a->layers[i]) * sizeof(float));
    cache->l.tokens = 0;
}

void ac_cache_free(ac_cache *cache)
{
    if (!cache)
        return;
    int n = cache->model->arch.n_layers;
    const ac_backend *be = ac_model_backend(cache->model);
    for (int i = 0; i < n; i++) {
        if (cache->l.k) be->free(cache->l.k[i]);
        if (cache->l.v) be->free(cache->l.v[i]);
        if (cache->l.state) be->free(cache->l.state[i]);
    }
    free(cache->l.k);
    free(cache->l.v);
    free(cache->l.state);
    free(cache);
}

int ac_cache_tokens(const ac_cache *cache) { return cache->l.tokens; }

/* Floats of K (or V) per cached token of layer b. */
static size_t kv_row_floats(const ac_block_dims *b) { return ac_plan_block_kv_floats_per_token(b) / 2; }

size_t ac_cache_bytes(const ac_cache *cache)
{
    const ac_arch *a = &cache->model->arch;
    size_t floats = 0;
    for (int i = 0; i < a->n_layers; i++) {
        const ac_block_dims *b = &a->layers[i];
        floats += ac_plan_block_kv_floats_per_token(b) * (size_t)cache->l.capacity + ac_plan_block_state_floats(b);
    }
    return floats * sizeof(float);
}

/* Copies the first `used` rows of [heads, old_cap, hd] into [heads, new_cap, hd]. */
static void copy_kv(const ac_backend *be, float *dst, const float *src, int heads, int hd, int old_cap, int new_cap,
                    int used)
{
    for (int j = 0; src && used && j < heads; j++)
        be->copy(dst + (size_t)j * new_cap * hd, src + (size_t)j * old_cap * hd, (size_t)used * hd * sizeof *dst,
                 AC_COPY_DEVICE_TO_DEVICE);
}

/* Allocates every layer's new K and V first, so a failure leaves the cache as it was. */
ac_status ac_cache_reserve(ac_cache *cache, int tokens)
{
    if (tokens <= cache->l.capacity)
        return AC_OK;
    int new_cap = cache->l.capacity ? cache->l.capacity : 64;
    while (new_cap < tokens)
        new_cap *= 2;
    const ac_arch *a = &cache->model->arch;
    const ac_backend *be = ac_model_backend(cache->model);
    int n = a->n_layers;
    float **grown = calloc(2 * (size_t)n, sizeof *grown);
    int ok = grown != NULL;
    for (int i = 0; ok && i < n; i++) {
        size_t floats = kv_row_floats(&a->layers[i]) * (size_t)new_cap;
        if (floats == 0)
            continue;
        grown[2 * i] = be->alloc(floats * sizeof(float));
        grown[2 * i + 1] = be->alloc(floats * sizeof(float));
        ok = grown[2 * i] && grown[2 * i + 1];
    }
    if (!ok) {
        for (int i = 0; grown && i < 2 * n; i++)
            be->free(grown[i]);
        free(grown);
        return ac_fail(AC_ERR_NOMEM, "cache: cannot grow the KV cache to %d tokens on %s", tokens, be->name);
    }
    for (int i = 0; i < n; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (!grown[2 * i])
            continue;
        int heads = ac_block(b)->kv_heads(b), hd = ac_block(b)->kv_head_dim(b);
        int old_cap = cache->l.capacity, used = cache->l.tokens;
        copy_kv(be, grown[2 * i], cache->l.k[i], heads, hd, old_cap, new_cap, used);
        copy_kv(be, grown[2 * i + 1], cache->l.v[i], heads, hd, old_cap, new_cap, used);
        be->free(cache->l.k[i]);
        be->free(cache->l.v[i]);
        cache->l.k[i] = grown[2 * i];
        cache->l.v[i] = grown[2 * i + 1];
    }
    free(grown);
    cache->l.capacity = new_cap;
    return AC_OK;
}

size_t ac_cache_state_bytes(const ac_cache *cache) { return ac_plan_state_floats(&cache->model->arch) * sizeof(float); }

void ac_cache_save_state(const ac_cache *cache, float *dst)
{
    const ac_arch *a = &cache->model->arch;
    const ac_backend *be = ac_model_backend(cache->model);
    for (int i = 0; i < a->n_layers; i++) {
        size_t n = ac_plan_block_state_floats(&a->layers[i]);
        if (n)
            be->copy(dst, cache->l.state[i], n * sizeof *dst, AC_COPY_DEVICE_TO_HOST);
        dst += n;
    }
}

void ac_cache_restore_state(ac_cache *cache, const float *src, int tokens)
{
    const ac_arch *a = &cache->model->arch;
    const ac_backend *be = ac_model_backend(cache->model);
    for (int i = 0; i < a->n_layers; i++) {
        size_t n = ac_plan_block_state_floats(&a->layers[i]);
        if (n)
            be->copy(cache->l.state[i], src, n * sizeof *src, AC_COPY_HOST_TO_DEVICE);
        src += n;
    }
    cache->l.tokens = tokens;
}
