/* Serving a contract's workload on one model: a static batch of sequences, each with the
 * cached context, then requests of input tokens prefilled in one call and greedy decode
 * steps. Every request starts from the same context: K and V rows past it are left in
 * place (attention reads only rows below the cache's token count) and the Mamba state
 * is restored from a snapshot, so repeats need not rebuild the context. Each cache is
 * reserved up front for the whole request, as a server sizes its KV per slot, so no
 * step pays for growing it. */
#include "autocompress/clock.h"
#include "autocompress/host.h"
#include "cost/cost_internal.h"
#include "runtime/plan.h"
#include "util/rng.h"

#include <stdlib.h>
#include <string.h>

struct ac_server {
    const ac_model *model;
    ac_runtime *rt;
    ac_contract_workload w;
    int batch, input, n_dec;
    ac_cache **caches;
    int32_t *prompt;          /* [batch, input] */
    int32_t *next;            /* [batch] the tokens fed to the next decode step */
    const int32_t **tok_ptr;  /* [batch] */
    int *n_tok;               /* [batch] */
    float *logits;            /* [batch, vocab] */
    float *snapshot;          /* Mamba state after the context, caller-owned */
    int context_tokens;
    ac_probe *probe;
    uint64_t rng;
};

size_t ac_server_snapshot_floats(const ac_arch *arch, int batch)
{
    return ac_plan_state_floats(arch) * (size_t)batch;
}

void ac_server_free(ac_server *s)
{
    if (!s)
        return;
    for (int i = 0; s->caches && i < s->batch; i++)
        ac_cache_free(s->caches[i]);
    free(s->caches);
    ac_runtime_free(s->rt);
    free(s->prompt);
    free(s->next);
    free(s->tok_ptr);
    free(s->n_tok);
    free(s->logits);
    free(s);
}

ac_status ac_server_create(const ac_model *model, const ac_contract_workload *w, uint64_t seed, float *snapshot,
                           ac_server **server)
{
    *server = NULL;
    if (w->batch < 1 || w->input_tokens < 1 || w->cached_tokens < 0 || w->output_tokens < 0)
        return ac_fail(AC_ERR_INVALID, "serve: the workload needs batch >= 1 and input_tokens >= 1");
    int64_t total = w->cached_tokens + w->input_tokens + w->output_tokens;
    if (total > (1 << 24) || (int64_t)w->batch * w->input_tokens > (1 << 24))
        return ac_fail(AC_ERR_UNSUPPORTED, "serve: a workload of %lld tokens per sequence is beyond the CPU engine",
                       (long long)total);
    ac_server *s = calloc(1, sizeof *s);
    if (!s)
        return ac_fail(AC_ERR_NOMEM, "serve: out of memory");
    s->model = model;
    s->w = *w;
    s->batch = w->batch;
    s->input = (int)w->input_tokens;
    s->n_dec = ac_workload_decode_steps(w);
    s->snapshot = snapshot;
    s->rng = seed ^ 0x5eedf00dULL;
    int V = ac_model_arch(model)->vocab;
    s->caches = calloc((size_t)s->batch, sizeof *s->caches);
    s->prompt = malloc((size_t)s->batch * s->input * sizeof *s->prompt);
    s->next = calloc((size_t)s->batch, sizeof *s->next);
    s->tok_ptr = calloc((size_t)s->batch, sizeof *s->tok_ptr);
    s->n_tok = calloc((size_t)s->batch, sizeof *s->n_tok);
    s->logits = calloc((size_t)s->batch * V, sizeof *s->logits);
    ac_status st = AC_OK;
    if (!s->caches || !s->prompt || !s->next || !s->tok_ptr || !s->n_tok || !s->logits)
        st = ac_fail(AC_ERR_NOMEM, "serve: out of memory for a batch of %d", s->batch);
    if (st == AC_OK)
        st = ac_runtime_create(model, &s->rt);
    for (int i = 0; st == AC_OK && i < s->batch; i++) {
        st = ac_cache_create(model, &s->caches[i]);
        if (st == AC_OK)
            st = ac_cache_reserve(s->caches[i], (int)total);
    }
    if (st != AC_OK) {
        ac_server_free(s);
        return st;
    }
    for (int i = 0; i < s->batch * s->input; i++)
        s->prompt[i] = (int32_t)ac_rng_below(&s->rng, V);
    *server = s;
    return AC_OK;
}

void ac_server_set_probe(ac_server *s, ac_probe *probe)
{
    s->probe = probe;
    ac_runtime_set_probe(s->rt, probe);
}

static void save_state(ac_server *s)
{
    size_t per_seq = ac_plan_state_floats(ac_model_arch(s->model));
    for (int q = 0; q < s->batch; q++)
        ac_cache_save_state(s->caches[q], s->snapshot + (size_t)q * per_seq);
}

static void rollback(ac_server *s)
{
    size_t per_seq = ac_plan_state_floats(ac_model_arch(s->model));
    for (int q = 0; q < s->batch; q++) {
        if (s->context_tokens == 0)
            ac_cache_clear(s->caches[q]);
        else
            ac_cache_restore_state(s->caches[q], s->snapshot + (size_t)q * per_seq, s->context_tokens);
    }
}

static void greedy(ac_server *s)
{
    int V = ac_model_arch(s->model)->vocab;
    for (int q = 0; q < s->batch; q++) {
        const float *row = s->logits + (size_t)q * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        s->next[q] = best;
    }
}

static ac_status forward(ac_server *s, ac_logits_mode mode)
{
    ac_batch b = {.n_seqs = s->batch, .tokens = s->tok_ptr, .n_tokens = s->n_tok, .caches = s->caches};
    return ac_runtime_forward(s->rt, &b, mode, s->logits);
}

ac_status ac_server_build_context(ac_server *s)
{
    int cached = (int)s->w.cached_tokens, V = ac_model_arch(s->model)->vocab;
    int32_t *chunk = malloc((size_t)s->batch * s->input * sizeof *chunk);
    if (!chunk)
        return ac_fail(AC_ERR_NOMEM, "serve: out of memory");
    if (s->probe)
        ac_probe_set_phase(s->probe, AC_PHASE_CONTEXT, 0);
    ac_status st = AC_OK;
    for (int done = 0; st == AC_OK && done < cached;) {
        int n = cached - done < s->input ? cached - done : s->input;
        for (int q = 0; q < s->batch; q++) {
            for (int t = 0; t < n; t++)
                chunk[q * s->input + t] = (int32_t)ac_rng_below(&s->rng, V);
            s->tok_ptr[q] = chunk + (size_t)q * s->input;
            s->n_tok[q] = n;
        }
        st = forward(s, AC_LOGITS_NONE);
        done += n;
    }
    free(chunk);
    if (st != AC_OK)
        return st;
    s->context_tokens = cached;
    if (cached > 0)
        save_state(s);
    return AC_OK;
}

ac_status ac_server_request(ac_server *s, int max_steps, double *seconds)
{
    rollback(s);
    int steps = max_steps < 0 || max_steps > s->n_dec ? s->n_dec : max_steps;
    ac_probe *p = s->probe;
    int64_t t0 = ac_monotonic_ns();
    for (int q = 0; q < s->batch; q++) {
        s->tok_ptr[q] = s->prompt + (size_t)q * s->input;
        s->n_tok[q] = s->input;
    }
    int want = s->w.output_tokens > 0;
    if (p) {
        ac_probe_set_phase(p, AC_PHASE_PREFILL, 0);
        ac_probe_begin(p, -1, AC_SITE_STEP);
    }
    ac_status st = forward(s, want ? AC_LOGITS_LAST : AC_LOGITS_NONE);
    if (st == AC_OK && want) {
        if (p)
            ac_probe_begin(p, -1, AC_SITE_SAMPLE);
        greedy(s);
        if (p)
            ac_probe_end(p, -1, AC_SITE_SAMPLE);
    }
    if (p)
        ac_probe_end(p, -1, AC_SITE_STEP);
    for (int q = 0; q < s->batch; q++) {
        s->tok_ptr[q] = s->next + q;
        s->n_tok[q] = 1;
    }
    for (int t = 1; st == AC_OK && t <= steps; t++) {
        if (p) {
            ac_probe_set_phase(p, AC_PHASE_DECODE, t);
            ac_probe_begin(p, -1, AC_SITE_STEP);
        }
        st = forward(s, AC_LOGITS_LAST);
        if (st == AC_OK) {
            if (p)
                ac_probe_begin(p, -1, AC_SITE_SAMPLE);
            greedy(s);
            if (p)
                ac_probe_end(p, -1, AC_SITE_SAMPLE);
        }
        if (p)
            ac_probe_end(p, -1, AC_SITE_STEP);
    }
    *seconds = 1e-9 * (double)(ac_monotonic_ns() - t0);
    if (p && st == AC_OK) {
        ac_memory_sample m = ac_server_memory(s);
        ac_probe_memory(p, &m);
    }
    return st;
}

ac_memory_sample ac_server_memory(const ac_server *s)
{
    ac_memory_sample m;
    memset(&m, 0, sizeof m);
    const ac_model *model = s->model;
    const ac_arch *a = ac_model_arch(model);
    m.weights = ac_arch_weight_bytes(a, ac_model_weights_dtype(model));
    for (int q = 0; q < s->batch; q++) {
        size_t state = ac_cache_state_bytes(s->caches[q]);
        m.kv_cache += ac_cache_bytes(s->caches[q]) - state;
        m.state += state;
    }
    m.activations = ac_runtime_bytes(s->rt) + (size_t)s->batch * a->vocab * sizeof(float);
    m.resident = ac_cpu_resident_bytes();
    return m;
}
