/* Per-sequence decode state: KV rows that grow with the sequence, fixed Mamba state. */
#include "runtime/runtime_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t conv_state_floats(const ac_block_dims *b) { return (size_t)ac_mamba_conv_dim(b) * (b->conv_kernel - 1); }
static size_t ssm_state_floats(const ac_block_dims *b)
{
    return (size_t)b->mamba_heads * b->mamba_head_dim * b->ssm_state;
}

ac_status ac_cache_create(const ac_model *model, ac_cache **cache)
{
    const ac_arch *a = &model->arch;
    ac_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "cache: out of memory");
    c->model = model;
    c->l.k = calloc((size_t)a->n_layers, sizeof *c->l.k);
    c->l.v = calloc((size_t)a->n_layers, sizeof *c->l.v);
    c->l.conv = calloc((size_t)a->n_layers, sizeof *c->l.conv);
    c->l.ssm = calloc((size_t)a->n_layers, sizeof *c->l.ssm);
    int ok = c->l.k && c->l.v && c->l.conv && c->l.ssm;
    for (int i = 0; ok && i < a->n_layers; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (b->kind != AC_BLOCK_MAMBA)
            continue;
        c->l.conv[i] = calloc(conv_state_floats(b) + 1, sizeof(float));
        c->l.ssm[i] = calloc(ssm_state_floats(b), sizeof(float));
        ok = c->l.conv[i] && c->l.ssm[i];
    }
    if (!ok) {
        ac_cache_free(c);
        return ac_fail(AC_ERR_NOMEM, "cache: out of memory");
    }
    *cache = c;
    return AC_OK;
}

void ac_cache_clear(ac_cache *cache)
{
    const ac_arch *a = &cache->model->arch;
    for (int i = 0; i < a->n_layers; i++)
        if (a->layers[i].kind == AC_BLOCK_MAMBA) {
            memset(cache->l.conv[i], 0, conv_state_floats(&a->layers[i]) * sizeof(float));
            memset(cache->l.ssm[i], 0, ssm_state_floats(&a->layers[i]) * sizeof(float));
        }
    cache->l.tokens = 0;
}

void ac_cache_free(ac_cache *cache)
{
    if (!cache)
        return;
    int n = cache->model->arch.n_layers;
    for (int i = 0; i < n; i++) {
        if (cache->l.k) free(cache->l.k[i]);
        if (cache->l.v) free(cache->l.v[i]);
        if (cache->l.conv) free(cache->l.conv[i]);
        if (cache->l.ssm) free(cache->l.ssm[i]);
    }
    free(cache->l.k);
    free(cache->l.v);
    free(cache->l.conv);
    free(cache->l.ssm);
    free(cache);
}

int ac_cache_tokens(const ac_cache *cache) { return cache->l.tokens; }

size_t ac_cache_bytes(const ac_cache *cache)
{
    const ac_arch *a = &cache->model->arch;
    size_t floats = 0;
    for (int i = 0; i < a->n_layers; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (b->kind == AC_BLOCK_ATTENTION)
            floats += 2 * (size_t)b->attn_kv_heads * cache->l.capacity * b->attn_head_dim;
        else if (b->kind == AC_BLOCK_MAMBA)
            floats += conv_state_floats(b) + ssm_state_floats(b);
    }
    return floats * sizeof(float);
}

/* Copies the first `used` rows of [n_kv, old_cap, hd] into [n_kv, new_cap, hd]. */
static void copy_kv(float *dst, const float *src, int n_kv, int hd, int old_cap, int new_cap, int used)
{
    for (int j = 0; src && j < n_kv; j++)
        memcpy(dst + (size_t)j * new_cap * hd, src + (size_t)j * old_cap * hd, (size_t)used * hd * sizeof *dst);
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
    int n = a->n_layers;
    float **grown = calloc(2 * (size_t)n, sizeof *grown);
    int ok = grown != NULL;
    for (int i = 0; ok && i < n; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (b->kind != AC_BLOCK_ATTENTION)
            continue;
        size_t floats = (size_t)b->attn_kv_heads * new_cap * b->attn_head_dim;
        grown[2 * i] = malloc(floats * sizeof(float));
        grown[2 * i + 1] = malloc(floats * sizeof(float));
        ok = grown[2 * i] && grown[2 * i + 1];
    }
    if (!ok) {
        for (int i = 0; grown && i < 2 * n; i++)
            free(grown[i]);
        free(grown);
        return ac_fail(AC_ERR_NOMEM, "cache: cannot grow the KV cache to %d tokens", tokens);
    }
    for (int i = 0; i < n; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (b->kind != AC_BLOCK_ATTENTION)
            continue;
        int old_cap = cache->l.capacity, used = cache->l.tokens;
        copy_kv(grown[2 * i], cache->l.k[i], b->attn_kv_heads, b->attn_head_dim, old_cap, new_cap, used);
        copy_kv(grown[2 * i + 1], cache->l.v[i], b->attn_kv_heads, b->attn_head_dim, old_cap, new_cap, used);
        free(cache->l.k[i]);
        free(cache->l.v[i]);
        cache->l.k[i] = grown[2 * i];
        cache->l.v[i] = grown[2 * i + 1];
    }
    free(grown);
    cache->l.capacity = new_cap;
    return AC_OK;
}
