/* The scheduler: slots, admission and continuous batching.
 *
 * One thread runs every forward. Each step it admits queued requests into free slots
 * (preferring a slot whose cache already holds a prefix of the prompt), then, per model
 * with active slots, runs one forward over all of them: a decode token for each decoding
 * sequence and a prefill chunk for each prefilling one, within max_step_tokens (decodes
 * first, so a long prompt does not stall the streams). The last logits of a sequence
 * that finished its prompt or decoded give its next token.
 *
 * Everything a slot holds is the scheduler thread's alone; what it shares with the
 * server's other threads is under the server lock (srv_server.c). */
#include "server/srv_server_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/clock.h"
#include "autocompress/host.h"
#include "autocompress/probe.h"


/* ---- publishing to a request ---- */

static void finish_locked(srv_request *req, srv_finish f, const char *message)
{
    if (req->finish)
        return;
    req->finish = f;
    req->ready_len = req->text_len;
    req->t_done = ac_monotonic_s();
    if (message)
        snprintf(req->error, sizeof req->error, "%s", message);
    pthread_cond_broadcast(&req->cv);
}

static void fail_request(srv_request *req, const char *message)
{
    pthread_mutex_lock(&req->mu);
    finish_locked(req, SRV_FINISH_ERROR, message);
    pthread_mutex_unlock(&req->mu);
}

/* Makes *p hold at least `need` elements of `size` bytes (doubling); 0 when out of memory. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 1;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return 0;
    *p = q;
    *cap = n;
    return 1;
}

static void update_ready(srv_request *req)
{
    size_t hold = srv_stop_holdback(req->text, req->text_len, req->stop, req->n_stop);
    size_t end = req->text_len - hold;
    /* an incomplete UTF-8 character must start within the last 3 bytes */
    size_t from = end > 3 ? end - 3 : 0;
    size_t cut = from + srv_utf8_complete_prefix(req->text + from, end - from);
    req->ready_len = cut > req->ready_len ? cut : req->ready_len;
}

/* Appends a generated token and its text; decides whether the request is done. */
static void publish_token(srv_request *req, const srv_token *tok)
{
    const srv_model *m = req->model;
    pthread_mutex_lock(&req->mu);
    req->n_generated++;
    if (!req->t_first_token)
        req->t_first_token = ac_monotonic_s();
    if (tok->id == m->eos) {
        finish_locked(req, SRV_FINISH_STOP, NULL);
        pthread_mutex_unlock(&req->mu);
        return;
    }
    char *piece = NULL;
    size_t len = 0;
    int ok = ac_tokenizer_decode(m->tokenizer, &tok->id, 1, &piece, &len) == AC_OK &&
             grow((void **)&req->tokens, &req->cap_tokens, (size_t)req->n_tokens + 1, sizeof *req->tokens) &&
             grow((void **)&req->text, &req->text_cap, req->text_len + len + 1, 1);
    if (!ok) {
        finish_locked(req, SRV_FINISH_ERROR, "out of memory while decoding");
        pthread_mutex_unlock(&req->mu);
        free(piece);
        return;
    }
    size_t before = req->text_len;
    req->tokens[req->n_tokens] = *tok;
    req->tokens[req->n_tokens++].offset = before;
    memcpy(req->text + before, piece, len);
    req->text_len += len;
    free(piece);
    long at = srv_find_stop(req->text, req->text_len, before, req->stop, req->n_stop);
    if (at >= 0) {
        req->text_len = (size_t)at;
        /* tokens whose text starts at or after the stop are not part of the output */
        while (req->n_tokens > 0 && req->tokens[req->n_tokens - 1].offset >= (size_t)at)
            req->n_tokens--;
        finish_locked(req, SRV_FINISH_STOP, NULL);
    } else if (req->n_generated >= req->max_tokens) {
        finish_locked(req, SRV_FINISH_LENGTH, NULL);
    } else {
        update_ready(req);
        if (req->stream) /* a whole-response waiter only needs the end */
            pthread_cond_broadcast(&req->cv);
    }
    pthread_mutex_unlock(&req->mu);
}

/* ---- logprobs ---- */

static double log_sum_exp(const float *x, int n)
{
    float mx = -FLT_MAX;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(x[i] - mx));
    return (double)mx + log(sum);
}

/* The token's log-probability and the `top` most likely alternatives. */
static void fill_logprobs(const float *logits, int vocab, int top, srv_token *tok)
{
    double lse = log_sum_exp(logits, vocab);
    tok->logprob = (float)((double)logits[tok->id] - lse);
    for (int k = 0; k < top; k++)
        tok->top[k] = (srv_top){-1, -INFINITY};
    for (int v = 0; v < vocab && top > 0; v++) {
        float lp = (float)((double)logits[v] - lse);
        if (lp <= tok->top[top - 1].logprob)
            continue;
        int k = top - 1;
        while (k > 0 && tok->top[k - 1].logprob < lp) {
            tok->top[k] = tok->top[k - 1];
            k--;
        }
        tok->top[k] = (srv_top){v, lp};
    }
}

/* ---- slots ---- */

static void slot_drop_cache(srv_server *s, srv_slot *sl)
{
    ac_cache_free(sl->cache);
    sl->cache = NULL;
    sl->n_history = 0;
    pthread_mutex_lock(&s->mu);
    srv_model_unref_locked(s, sl->model);
    pthread_mutex_unlock(&s->mu);
    sl->model = NULL;
}

static int prefix_match(const srv_slot *sl, const srv_request *req)
{
    if (sl->n_history == 0 || sl->model != req->model || sl->n_history >= req->n_prompt)
        return 0;
    return !memcmp(sl->history, req->prompt, (size_t)sl->n_history * sizeof *sl->history);
}

/* The free slot for req: the longest cached prefix, else an empty slot, else the least
 * recently used. */
static srv_slot *pick_slot(srv_server *s, const srv_request *req)
{
    srv_slot *best = NULL, *empty = NULL, *lru = NULL;
    int want_prefix = s->cfg.prefix_reuse && !(req->echo && req->logprobs >= 0);
    for (int i = 0; i < s->cfg.slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->req)
            continue;
        if (want_prefix && sl->n_history > 0 && prefix_match(sl, req) && (!best || sl->n_history > best->n_history))
            best = sl;
        if (!sl->cache && !empty)
            empty = sl;
        if (!lru || sl->last_used < lru->last_used)
            lru = sl;
    }
    return best ? best : empty ? empty : lru;
}

/* Puts req in a free slot; 0 when it failed (the request is finished with an error). */
static int start_request(srv_server *s, srv_slot *sl, srv_request *req)
{
    if (sl->model != req->model || !sl->cache) {
        if (sl->cache || sl->model)
            slot_drop_cache(s, sl);
        if (ac_cache_create(req->model->model, &sl->cache) != AC_OK) {
            fail_request(req, "out of memory for a sequence cache");
            return 0;
        }
        pthread_mutex_lock(&s->mu);
        srv_model_ref_locked(req->model);
        pthread_mutex_unlock(&s->mu);
        sl->model = req->model;
    }
    int reuse = s->cfg.prefix_reuse && !(req->echo && req->logprobs >= 0) && prefix_match(sl, req);
    if (!reuse) {
        ac_cache_clear(sl->cache);
        sl->n_history = 0;
    }
    sl->req = req;
    sl->fed = sl->n_history;
    sl->decoding = 0;
    ac_sampler_init(&sl->sampler, req->temperature, req->top_p, req->seed);
    pthread_mutex_lock(&req->mu);
    req->cached_tokens = sl->fed;
    pthread_mutex_unlock(&req->mu);
    return 1;
}

static void end_request(srv_server *s, srv_slot *sl)
{
    srv_request *req = sl->req;
    sl->req = NULL;
    sl->last_used = ++s->clock;
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
    srv_metrics_completion(s->metrics, req);
    srv_server_release_request(s, req);
}

/* ---- admission (server lock held on entry and exit) ---- */

static void admit(srv_server *s)
{
    while (s->q_len > 0 && s->active < s->cfg.slots) {
        srv_request *req = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->cfg.max_queue;
        s->q_len--;
        s->active++;
        pthread_mutex_unlock(&s->mu);
        srv_slot *sl = pick_slot(s, req);
        pthread_mutex_lock(&req->mu);
        int cancelled = req->cancelled;
        pthread_mutex_unlock(&req->mu);
        int started = !cancelled && start_request(s, sl, req);
        if (!started) {
            if (cancelled)
                fail_request(req, "the client went away");
            sl->req = req;
            end_request(s, sl);
        }
        pthread_mutex_lock(&s->mu);
    }
}

/* Frees idle caches of models that no longer serve (after a swap). */
static void retire_idle(srv_server *s)
{
    for (int i = 0; i < s->cfg.slots; i++) {
        srv_slot *sl = &s->slots[i];
        pthread_mutex_lock(&s->mu);
        int stale = !sl->req && sl->model && sl->model != s->current;
        pthread_mutex_unlock(&s->mu);
        if (stale)
            slot_drop_cache(s, sl);
    }
}

/* ---- one step ---- */

static int ensure_buffers(srv_server *s, size_t logits_floats, size_t vocab)
{
    if (logits_floats > s->logits_cap) {
        float *p = realloc(s->logits, logits_floats * sizeof *p);
        if (!p)
            return 0;
        s->logits = p;
        s->logits_cap = logits_floats;
    }
    if (2 * vocab > s->work_cap) {
        float *p = realloc(s->work, 2 * vocab * sizeof *p);
        if (!p)
            return 0;
        s->work = p;
        s->work_cap = 2 * vocab;
    }
    return 1;
}

static int wants_prompt_logprobs(const srv_request *req) { return req->echo && req->logprobs >= 0; }

/* The prompt's own logprobs from all-position logits (whole prompt in one chunk). */
static void prompt_logprobs(srv_request *req, const float *rows, int vocab)
{
    srv_token *t = calloc((size_t)req->n_prompt, sizeof *t);
    if (!t)
        return;
    for (int i = 0; i < req->n_prompt; i++) {
        t[i].id = req->prompt[i];
        if (i > 0)
            fill_logprobs(rows + (size_t)(i - 1) * vocab, vocab, req->logprobs, &t[i]);
    }
    /* offsets into the echoed prompt text: the decoded bytes of each token */
    size_t off = 0;
    for (int i = 0; i < req->n_prompt; i++) {
        char *piece = NULL;
        size_t len = 0;
        t[i].offset = off;
        if (ac_tokenizer_decode(req->model->tokenizer, &t[i].id, 1, &piece, &len) == AC_OK)
            off += len;
        free(piece);
    }
    pthread_mutex_lock(&req->mu);
    req->prompt_tokens = t;
    pthread_mutex_unlock(&req->mu);
}

static int history_append(srv_slot *sl, const int32_t *tokens, int n)
{
    if (!grow((void **)&sl->history, &sl->cap_history, (size_t)sl->n_history + (size_t)n, sizeof *sl->history))
        return 0;
    memcpy(sl->history + sl->n_history, tokens, (size_t)n * sizeof *tokens);
    sl->n_history += n;
    return 1;
}

/* After the forward: feed bookkeeping, then the next token of each sequence that has
 * one. Returns 1 when the slot's request ended. */
static int after_forward(srv_server *s, srv_slot *sl, const float *row, const float *all_rows, int vocab)
{
    srv_request *req = sl->req;
    const int32_t *fed = sl->decoding ? &sl->next : req->prompt + sl->fed;
    if (!history_append(sl, fed, sl->step_tokens)) {
        /* the cache holds tokens the history cannot record: it may not be reused */
        ac_cache_clear(sl->cache);
        sl->n_history = 0;
        fail_request(req, "out of memory for a sequence's history");
        return 1;
    }
    if (!sl->decoding) {
        if (all_rows && wants_prompt_logprobs(req))
            prompt_logprobs(req, all_rows, vocab);
        sl->fed += sl->step_tokens;
        if (sl->fed < req->n_prompt)
            return 0;
        if (req->max_tokens == 0) {
            pthread_mutex_lock(&req->mu);
            finish_locked(req, SRV_FINISH_LENGTH, NULL);
            pthread_mutex_unlock(&req->mu);
            return 1;
        }
    }
    srv_token tok;
    memset(&tok, 0, sizeof tok);
    tok.id = ac_sample(&sl->sampler, row, vocab, s->work);
    if (req->logprobs >= 0)
        fill_logprobs(row, vocab, req->logprobs, &tok);
    publish_token(req, &tok);
    sl->decoding = 1;
    sl->next = tok.id;
    pthread_mutex_lock(&req->mu);
    int done = req->finish != SRV_FINISH_NONE;
    pthread_mutex_unlock(&req->mu);
    return done;
}

/* Plans the batch of model m: decodes first, then prefill chunks within the budget. */
static int plan_batch(srv_server *s, srv_model *m, int *total_tokens, int *all_logits)
{
    int n = 0, budget = s->cfg.max_step_tokens;
    *all_logits = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->cfg.slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (!sl->req || sl->model != m || sl->decoding != (pass == 0))
                continue;
            int take = 1;
            if (!sl->decoding) {
                int left = sl->req->n_prompt - sl->fed;
                take = left < s->cfg.prefill_chunk ? left : s->cfg.prefill_chunk;
                if (wants_prompt_logprobs(sl->req))
                    take = left; /* its logprobs need every position in one call */
                if (take > budget && n > 0)
                    continue;
                *all_logits |= wants_prompt_logprobs(sl->req);
            }
            sl->step_tokens = take;
            budget -= take;
            s->batch[n++] = sl;
        }
    }
    int rows = 0;
    for (int i = 0; i < n; i++) {
        srv_slot *sl = s->batch[i];
        s->tok_ptr[i] = sl->decoding ? &sl->next : sl->req->prompt + sl->fed;
        s->n_tok[i] = sl->step_tokens;
        s->caches[i] = sl->cache;
        sl->step_row = *all_logits ? rows : i;
        rows += sl->step_tokens;
    }
    *total_tokens = rows;
    return n;
}

/* Memory of model m as the runtime accounts for it (W, C, P, R) and the process's
 * resident bytes; only meaningful while m is the one model loaded. */
static ac_memory_sample model_memory(const srv_server *s, const srv_model *m)
{
    ac_memory_sample mem;
    memset(&mem, 0, sizeof mem);
    mem.weights = (size_t)ac_arch_param_counts(ac_model_arch(m->model)).total * sizeof(float);
    for (int i = 0; i < s->cfg.slots; i++) {
        const srv_slot *sl = &s->slots[i];
        if (sl->model != m || !sl->cache)
            continue;
        size_t state = ac_cache_state_bytes(sl->cache);
        mem.kv_cache += ac_cache_bytes(sl->cache) - state;
        mem.state += state;
    }
    mem.activations = ac_runtime_bytes(m->runtime) + (s->logits_cap + s->work_cap) * sizeof(float);
    mem.resident = ac_cpu_resident_bytes();
    return mem;
}

/* The in-situ profile's probe for this step of model m, attached to its runtime, or NULL
 * when the step is not sampled. */
static ac_probe *sample_step_begin(srv_server *s, srv_model *m, int n, int total)
{
    if (!m->live)
        return NULL;
    int n_decode = 0;
    double context = 0;
    for (int i = 0; i < n; i++) {
        n_decode += s->batch[i]->decoding;
        context += s->batch[i]->n_history;
    }
    ac_probe *probe = ac_live_profile_step_begin(m->live, n, n_decode, total, context / n);
    if (probe)
        ac_runtime_set_probe(m->runtime, probe);
    return probe;
}

static void sample_step_end(srv_server *s, srv_model *m, int ok)
{
    ac_runtime_set_probe(m->runtime, NULL);
    ac_live_profile_step_end(m->live, ok);
    /* reading /proc costs tens of microseconds: four memory samples a second are plenty */
    int64_t now = ac_monotonic_ns();
    if (now - s->memory_sampled_ns < 250000000)
        return;
    s->memory_sampled_ns = now;
    pthread_mutex_lock(&s->mu);
    int alone = s->live_models == 1;
    pthread_mutex_unlock(&s->mu);
    if (alone) {
        ac_memory_sample mem = model_memory(s, m);
        ac_live_profile_memory(m->live, &mem, s->baseline_resident);
    }
}

static void step_model(srv_server *s, srv_model *m)
{
    int total = 0, all = 0;
    int n = plan_batch(s, m, &total, &all);
    if (n == 0)
        return;
    size_t V = (size_t)m->vocab;
    ac_status st = ensure_buffers(s, (all ? (size_t)total : (size_t)n) * V, V)
                       ? AC_OK
                       : ac_fail(AC_ERR_NOMEM, "out of memory for logits");
    if (st == AC_OK) {
        ac_batch batch = {.n_seqs = n, .tokens = s->tok_ptr, .n_tokens = s->n_tok, .caches = s->caches};
        ac_probe *probe = sample_step_begin(s, m, n, total);
        st = ac_runtime_forward(m->runtime, &batch, all ? AC_LOGITS_ALL : AC_LOGITS_LAST, s->logits);
        if (probe)
            sample_step_end(s, m, st == AC_OK);
    }
    srv_metrics_step(s->metrics, n);
    for (int i = 0; i < n; i++) {
        srv_slot *sl = s->batch[i];
        int done;
        if (st != AC_OK) {
            char message[256];
            snprintf(message, sizeof message, "the engine failed: %s", ac_error_message());
            fail_request(sl->req, message);
            ac_cache_clear(sl->cache);
            sl->n_history = 0;
            done = 1;
        } else {
            size_t last = all ? (size_t)(sl->step_row + sl->step_tokens - 1) : (size_t)sl->step_row;
            const float *rows = all ? s->logits + (size_t)sl->step_row * V : NULL;
            done = after_forward(s, sl, s->logits + last * V, rows, m->vocab);
        }
        if (done)
            end_request(s, sl);
    }
}

static void drop_cancelled(srv_server *s)
{
    for (int i = 0; i < s->cfg.slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (!sl->req)
            continue;
        pthread_mutex_lock(&sl->req->mu);
        int gone = sl->req->cancelled;
        pthread_mutex_unlock(&sl->req->mu);
        if (!gone)
            continue;
        fail_request(sl->req, "the client went away");
        end_request(s, sl);
    }
}

void *srv_sched_main(void *arg)
{
    srv_server *s = arg;
    ac_cpu_set_threads(s->cfg.threads, NULL);
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        pthread_mutex_unlock(&s->mu);
        retire_idle(s);
        pthread_mutex_lock(&s->mu);
        admit(s);
        if (s->active == 0) {
            pthread_cond_broadcast(&s->state_cv);
            if (!s->stopping)
                pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        drop_cancelled(s);
        /* one forward per model with active sequences (more than one only around swaps) */
        int n_models = 0;
        for (int i = 0; i < s->cfg.slots; i++) {
            srv_model *m = s->slots[i].req ? s->slots[i].model : NULL;
            int seen = 0;
            for (int k = 0; k < n_models && m; k++)
                seen |= s->step_models[k] == m;
            if (m && !seen)
                s->step_models[n_models++] = m;
        }
        for (int k = 0; k < n_models; k++)
            step_model(s, s->step_models[k]);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the scheduler's state ---- */

ac_status srv_sched_init(srv_server *s)
{
    size_t n = (size_t)s->cfg.slots;
    s->slots = calloc(n, sizeof *s->slots);
    s->tok_ptr = calloc(n, sizeof *s->tok_ptr);
    s->n_tok = calloc(n, sizeof *s->n_tok);
    s->caches = calloc(n, sizeof *s->caches);
    s->batch = calloc(n, sizeof *s->batch);
    s->step_models = calloc(n, sizeof *s->step_models);
    if (!s->slots || !s->tok_ptr || !s->n_tok || !s->caches || !s->batch || !s->step_models)
        return ac_fail(AC_ERR_NOMEM, "out of memory for %zu slots", n);
    return AC_OK;
}

void srv_sched_release(srv_server *s)
{
    for (int i = 0; s->slots && i < s->cfg.slots; i++) {
        ac_cache_free(s->slots[i].cache);
        free(s->slots[i].history);
        if (s->slots[i].model)
            srv_model_unref_locked(s, s->slots[i].model);
    }
    free(s->slots);
    free(s->tok_ptr);
    free(s->n_tok);
    free(s->caches);
    free(s->batch);
    free(s->step_models);
    free(s->logits);
    free(s->work);
}

void srv_sched_abort(srv_server *s)
{
    /* what is still queued or running ends with an error its client sees */
    for (int i = 0; i < s->cfg.slots; i++)
        if (s->slots[i].req) {
            fail_request(s->slots[i].req, "the server is shutting down");
            end_request(s, &s->slots[i]);
        }
    pthread_mutex_lock(&s->mu);
    while (s->q_len > 0) {
        srv_request *req = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->cfg.max_queue;
        s->q_len--;
        pthread_mutex_unlock(&s->mu);
        fail_request(req, "the server is shutting down");
        srv_server_release_request(s, req);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}
