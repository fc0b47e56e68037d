/* In-situ profiling: one serving step in `every` is timed layer by layer with the CPU
 * probe, and the spans are kept per step shape (decode, prefill or mixed, and batch) in
 * rings of the last LIVE_SAMPLES steps; memory samples keep the latest accounting and
 * the process's resident size. The report puts each layer's live median beside the row
 * the cost tables hold for its configuration.
 *
 * What is comparable. The tables were measured for one workload: `batch` sequences that
 * prefill `input_tokens` and decode with c tokens in each cache. A live decode step of
 * that batch is predicted by the row's line a + b c at the step's median context. A live
 * prefill of that batch and T tokens a sequence is predicted on the line through the two
 * points the row measured: one token (its decode line at the step's context) and the
 * workload's input_tokens (the prefill). A prefill is far from
 * proportional to its tokens on a CPU (a short one is bound by reading the weights, as a
 * decode step is), so the line is right at both ends and only approximate between them.
 * Other shapes, and mixed steps (decodes and prefill chunks in one forward), are reported
 * live only, with the reason. */
#include "autocompress/control.h"

#include "autocompress/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "blocks/block.h"
#include "util/stats.h"

enum { LIVE_SAMPLES = 64, LIVE_GROUPS = 32, EXTRA_SITES = 3 }; /* embedding, lm_head, forward */

typedef enum { LIVE_DECODE, LIVE_PREFILL, LIVE_MIXED } live_kind;

static const char *const kind_names[] = {"decode", "prefill", "mixed"};

/* The last LIVE_SAMPLES sampled steps of one shape. */
typedef struct {
    live_kind kind;
    int n_seqs;
    int count, next;      /* filled entries, the next to write */
    long total;           /* steps ever sampled into the group */
    int tokens[LIVE_SAMPLES];
    double context[LIVE_SAMPLES];
    double *us;           /* [LIVE_SAMPLES][sites] */
} live_group;

struct ac_live_profile {
    ac_arch arch;
    atomic_int every; /* 0: paused; set from another thread */
    int sites;        /* the layers, then embedding, lm_head and the whole forward */
    ac_probe *probe;
    pthread_mutex_t mu;
    /* the scheduler's own: the step being sampled */
    uint64_t steps;
    live_kind kind;
    int n_seqs, tokens;
    double context;
    int64_t start_ns;
    double *step_us; /* [sites] */
    /* under mu */
    uint64_t sampled, unattributed;
    live_group groups[LIVE_GROUPS];
    int n_groups;
    long full_groups; /* samples of shapes beyond LIVE_GROUPS, not kept */
    ac_memory_sample memory;
    size_t baseline, peak_resident;
    int has_memory;
};

ac_status ac_live_profile_create(const ac_arch *arch, int every, ac_live_profile **out)
{
    *out = NULL;
    if (every < 0)
        return ac_fail(AC_ERR_INVALID, "live profile: sample every %d steps (must be >= 0)", every);
    ac_live_profile *lp = calloc(1, sizeof *lp);
    if (!lp)
        return ac_fail(AC_ERR_NOMEM, "live profile: out of memory");
    atomic_init(&lp->every, every);
    lp->sites = arch->n_layers + EXTRA_SITES;
    pthread_mutex_init(&lp->mu, NULL);
    ac_status st = ac_arch_copy(&lp->arch, arch);
    if (st == AC_OK)
        st = ac_cpu_probe_create((size_t)lp->sites * 2, &lp->probe);
    if (st == AC_OK) {
        lp->step_us = calloc((size_t)lp->sites, sizeof(double));
        if (!lp->step_us)
            st = ac_fail(AC_ERR_NOMEM, "live profile: out of memory");
    }
    if (st != AC_OK) {
        ac_live_profile_free(lp);
        return st;
    }
    *out = lp;
    return AC_OK;
}

void ac_live_profile_free(ac_live_profile *lp)
{
    if (!lp)
        return;
    for (int g = 0; g < lp->n_groups; g++)
        free(lp->groups[g].us);
    ac_probe_free(lp->probe);
    ac_arch_free(&lp->arch);
    free(lp->step_us);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}

void ac_live_profile_set_every(ac_live_profile *lp, int every)
{
    atomic_store(&lp->every, every > 0 ? every : 0);
}

ac_probe *ac_live_profile_step_begin(ac_live_profile *lp, int n_seqs, int n_decode, int tokens, double context)
{
    int every = atomic_load(&lp->every);
    if (every == 0 || lp->steps++ % (uint64_t)every != 0)
        return NULL;
    lp->kind = n_decode == n_seqs ? LIVE_DECODE : n_decode == 0 ? LIVE_PREFILL : LIVE_MIXED;
    lp->n_seqs = n_seqs;
    lp->tokens = tokens;
    lp->context = context;
    ac_probe_reset(lp->probe);
    if (lp->kind == LIVE_DECODE)
        ac_probe_set_phase(lp->probe, AC_PHASE_DECODE, 1);
    else
        ac_probe_set_phase(lp->probe, AC_PHASE_PREFILL, 0);
    lp->start_ns = ac_monotonic_ns();
    return lp->probe;
}

/* The step's spans into step_us; 0 when they do not cover the sites as a forward does. */
static int attribute_spans(ac_live_profile *lp, double forward_us)
{
    const ac_span *spans;
    size_t n;
    if (ac_probe_collect(lp->probe, &spans, &n) != AC_OK || ac_cpu_probe_dropped(lp->probe) > 0)
        return 0;
    int L = lp->arch.n_layers;
    memset(lp->step_us, 0, (size_t)lp->sites * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        const ac_span *s = &spans[i];
        int site = s->site.kind == AC_SITE_EMBEDDING ? L
                   : s->site.kind == AC_SITE_LM_HEAD ? L + 1
                   : s->site.layer >= 0 && s->site.layer < L ? s->site.layer
                                                              : -1;
        if (site < 0)
            return 0;
        lp->step_us[site] += 1e-3 * (double)(s->end_ns - s->start_ns);
    }
    lp->step_us[L + 2] = forward_us;
    return 1;
}

static live_group *group_for(ac_live_profile *lp, live_kind kind, int n_seqs)
{
    for (int g = 0; g < lp->n_groups; g++)
        if (lp->groups[g].kind == kind && lp->groups[g].n_seqs == n_seqs)
            return &lp->groups[g];
    if (lp->n_groups == LIVE_GROUPS)
        return NULL;
    double *us = calloc((size_t)LIVE_SAMPLES * (size_t)lp->sites, sizeof(double));
    if (!us)
        return NULL;
    live_group *g = &lp->groups[lp->n_groups++];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->n_seqs = n_seqs;
    g->us = us;
    return g;
}

void ac_live_profile_step_end(ac_live_profile *lp, int ok)
{
    double forward_us = 1e-3 * (double)(ac_monotonic_ns() - lp->start_ns);
    int attributed = ok && attribute_spans(lp, forward_us);
    pthread_mutex_lock(&lp->mu);
    lp->sampled++;
    live_group *g = attributed ? group_for(lp, lp->kind, lp->n_seqs) : NULL;
    if (!attributed)
        lp->unattributed++;
    else if (!g)
        lp->full_groups++;
    if (g) {
        memcpy(g->us + (size_t)g->next * (size_t)lp->sites, lp->step_us, (size_t)lp->sites * sizeof(double));
        g->tokens[g->next] = lp->tokens;
        g->context[g->next] = lp->context;
        g->next = (g->next + 1) % LIVE_SAMPLES;
        g->count += g->count < LIVE_SAMPLES;
        g->total++;
    }
    pthread_mutex_unlock(&lp->mu);
}

void ac_live_profile_memory(ac_live_profile *lp, const ac_memory_sample *sample, size_t baseline)
{
    pthread_mutex_lock(&lp->mu);
    lp->memory = *sample;
    lp->baseline = baseline;
    lp->has_memory = 1;
    if (sample->resident > lp->peak_resident)
        lp->peak_resident = sample->resident;
    pthread_mutex_unlock(&lp->mu);
}

/* ---- the report ---- */

typedef struct {
    cJSON *root;
    int ok;
} json_out;

static cJSON *add_num(json_out *j, cJSON *o, const char *key, double v)
{
    cJSON *n = j->ok ? cJSON_AddNumberToObject(o, key, isfinite(v) ? v : 0) : NULL;
    j->ok = n != NULL;
    return n;
}

static void add_str(json_out *j, cJSON *o, const char *key, const char *v)
{
    j->ok = j->ok && cJSON_AddStringToObject(o, key, v) != NULL;
}

static cJSON *add_obj(json_out *j, cJSON *o, const char *key)
{
    cJSON *c = j->ok ? cJSON_AddObjectToObject(o, key) : NULL;
    j->ok = c != NULL;
    return c;
}

static cJSON *add_arr(json_out *j, cJSON *o, const char *key)
{
    cJSON *c = j->ok ? cJSON_AddArrayToObject(o, key) : NULL;
    j->ok = c != NULL;
    return c;
}

static cJSON *push_obj(json_out *j, cJSON *array)
{
    cJSON *o = j->ok ? cJSON_CreateObject() : NULL;
    j->ok = o && cJSON_AddItemToArray(array, o);
    return j->ok ? o : NULL;
}

/* The tables' row of a site (NULL: the forward, or a row the tables lack). */
static const ac_cost_row *row_of_site(const ac_live_profile *lp, const ac_cost_tables *tables, int site)
{
    int L = lp->arch.n_layers;
    if (!tables || site == L + 2)
        return NULL;
    ac_cost_row key;
    if (site < L) {
        key = ac_block_row_key(&lp->arch.layers[site], lp->arch.hidden);
    } else {
        memset(&key, 0, sizeof key);
        key.kind = site == L ? AC_ROW_EMBEDDING : AC_ROW_LM_HEAD;
        key.hidden = lp->arch.hidden;
    }
    return ac_cost_tables_find(tables, &key);
}

/* Why a group's shape has no prediction, or NULL when it has one. */
static const char *unpredicted_because(const live_group *g, const ac_cost_tables *tables, char *buf, size_t size)
{
    if (!tables)
        return "no cost tables were given to the server (profile_tables or control.tables)";
    const ac_contract_workload *w = &ac_cost_tables_get_info(tables)->workload;
    if (g->kind == LIVE_MIXED)
        return "decodes and prefill chunks in one forward: the tables time them apart";
    if (g->n_seqs != w->batch) {
        snprintf(buf, size, "the tables were measured at batch %d, this shape is batch %d", w->batch, g->n_seqs);
        return buf;
    }
    return NULL;
}

static void add_row_dims(json_out *j, cJSON *o, const ac_cost_row *key)
{
    switch (key->kind) {
    case AC_ROW_MAMBA: add_num(j, o, "heads", key->heads); break;
    case AC_ROW_MLP: add_num(j, o, "ffn", key->ffn); break;
    case AC_ROW_MOE:
        add_num(j, o, "experts", key->experts);
        add_num(j, o, "expert_ffn", key->expert_ffn);
        add_num(j, o, "shared_ffn", key->shared_ffn);
        break;
    default: break;
    }
}

static const char *site_name(const ac_live_profile *lp, int site)
{
    int L = lp->arch.n_layers;
    if (site < L)
        return ac_block_name(lp->arch.layers[site].kind);
    return site == L ? "embedding" : site == L + 1 ? "lm_head" : "forward";
}

static void group_json(json_out *j, cJSON *groups, const ac_live_profile *lp, const live_group *g,
                       const ac_cost_tables *tables, double *scratch)
{
    cJSON *o = push_obj(j, groups);
    if (!o)
        return;
    add_str(j, o, "phase", kind_names[g->kind]);
    add_num(j, o, "batch", g->n_seqs);
    add_num(j, o, "samples", g->count);
    add_num(j, o, "sampled_total", (double)g->total);
    for (int i = 0; i < g->count; i++)
        scratch[i] = g->tokens[i];
    double tokens = ac_stat_median(scratch, (size_t)g->count);
    memcpy(scratch, g->context, (size_t)g->count * sizeof(double));
    double context = ac_stat_median(scratch, (size_t)g->count);
    add_num(j, o, "tokens_p50", tokens);
    add_num(j, o, "context_p50", context);
    char why_buf[128];
    const char *why = unpredicted_because(g, tables, why_buf, sizeof why_buf);
    const ac_contract_workload *w = tables ? &ac_cost_tables_get_info(tables)->workload : NULL;
    double along = 0; /* prefill: where T lies between 1 token and the workload's input */
    if (why) {
        add_str(j, o, "unpredicted_because", why);
    } else if (g->kind == LIVE_PREFILL) {
        double per_seq = tokens / g->n_seqs;
        along = w->input_tokens > 1 ? (per_seq - 1) / (w->input_tokens - 1) : 1;
        add_str(j, o, "prediction", "on the line from the tables' first decode step (1 token) to their prefill");
    } else {
        /* the line holds where it was fitted: contexts outside are predicted at the nearest end */
        double lo = w->cached_tokens + w->input_tokens, hi = lo + (w->output_tokens > 2 ? w->output_tokens - 2 : 0);
        double at = context < lo ? lo : context > hi ? hi : context;
        if (at != context) {
            char note[160];
            snprintf(note, sizeof note, "the tables' decode line at context %.0f: they measured %.0f to %.0f", at, lo, hi);
            add_str(j, o, "prediction", note);
        } else {
            add_str(j, o, "prediction", "the tables' decode line a + b c at the median context");
        }
        context = at;
    }
    cJSON *rows = add_arr(j, o, "rows");
    double live_sum = 0, pred_sum = 0;
    int all_predicted = !why;
    for (int site = 0; site < lp->sites && j->ok; site++) {
        for (int i = 0; i < g->count; i++)
            scratch[i] = g->us[(size_t)i * (size_t)lp->sites + (size_t)site];
        double live = ac_stat_median(scratch, (size_t)g->count);
        double spread = ac_stat_spread(scratch, (size_t)g->count);
        cJSON *r = push_obj(j, rows);
        if (!r)
            return;
        add_str(j, r, "site", site_name(lp, site));
        add_num(j, r, "layer", site < lp->arch.n_layers ? site : -1);
        if (site < lp->arch.n_layers) {
            ac_cost_row key = ac_block_row_key(&lp->arch.layers[site], lp->arch.hidden);
            add_row_dims(j, r, &key);
        }
        add_num(j, r, "live_us", live);
        add_num(j, r, "spread_us", spread);
        if (site == lp->sites - 1) {
            add_num(j, r, "sites_us", live_sum);
            if (all_predicted)
                add_num(j, r, "predicted_us", pred_sum);
            continue;
        }
        live_sum += live;
        const ac_cost_row *row = why ? NULL : row_of_site(lp, tables, site);
        if (!why && !row) {
            all_predicted = 0;
            add_str(j, r, "unpredicted_because", "the tables have no row for this configuration");
        }
        if (!row)
            continue;
        double pred;
        if (g->kind == LIVE_PREFILL) {
            double first_step = row->decode_a_us + row->decode_b_us * context;
            pred = first_step + (row->prefill_us - first_step) * along;
        } else {
            pred = row->decode_a_us + row->decode_b_us * context;
        }
        pred_sum += pred;
        add_num(j, r, "predicted_us", pred);
        add_num(j, r, "live_over_predicted", pred > 0 ? live / pred : 0);
    }
}

/* eps as the cost model takes it: the median residual of the profiling runs at the
 * architecture's hidden size, else the tables' median over all runs. */
static double predicted_eps(const ac_cost_tables *tables, int hidden, double *scratch, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < ac_cost_tables_memory_count(tables) && k < cap; i++) {
        const ac_memory_point *p = ac_cost_tables_memory(tables, i);
        if (p->hidden == hidden)
            scratch[k++] = p->measured - (p->weights + p->kv + p->state + p->activations);
    }
    return k ? ac_stat_median(scratch, k) : ac_cost_tables_get_info(tables)->eps_bytes;
}

static void memory_json(json_out *j, const ac_live_profile *lp, const ac_cost_tables *tables)
{
    if (!lp->has_memory) {
        j->ok = j->ok && cJSON_AddNullToObject(j->root, "memory") != NULL;
        return;
    }
    const ac_memory_sample *m = &lp->memory;
    cJSON *o = add_obj(j, j->root, "memory");
    if (!o)
        return;
    double accounted = (double)m->weights + (double)m->kv_cache + (double)m->state + (double)m->activations;
    add_num(j, o, "resident_bytes", (double)m->resident);
    add_num(j, o, "peak_resident_bytes", (double)lp->peak_resident);
    add_num(j, o, "baseline_bytes", (double)lp->baseline);
    add_num(j, o, "weights_bytes", (double)m->weights);
    add_num(j, o, "kv_bytes", (double)m->kv_cache);
    add_num(j, o, "state_bytes", (double)m->state);
    add_num(j, o, "activation_bytes", (double)m->activations);
    add_num(j, o, "accounted_bytes", accounted);
    add_num(j, o, "residual_bytes", (double)m->resident - (double)lp->baseline - accounted);
    if (tables) {
        double scratch[256];
        add_num(j, o, "predicted_eps_bytes", predicted_eps(tables, lp->arch.hidden, scratch, 256));
    }
}

static void tables_json(json_out *j, const ac_cost_tables *tables)
{
    if (!tables) {
        j->ok = j->ok && cJSON_AddNullToObject(j->root, "tables") != NULL;
        return;
    }
    const ac_cost_tables_info *info = ac_cost_tables_get_info(tables);
    cJSON *o = add_obj(j, j->root, "tables");
    if (!o)
        return;
    add_str(j, o, "contract", info->contract);
    add_num(j, o, "batch", info->workload.batch);
    add_num(j, o, "cached_tokens", info->workload.cached_tokens);
    add_num(j, o, "input_tokens", info->workload.input_tokens);
    add_num(j, o, "output_tokens", info->workload.output_tokens);
    add_num(j, o, "threads", info->threads);
    add_str(j, o, "speed", info->reference_ms > 0 ? "the profiling machine's median speed" : "as measured");
}

char *ac_live_profile_json(ac_live_profile *lp, const ac_cost_tables *tables)
{
    double *scratch = malloc(LIVE_SAMPLES * sizeof(double));
    json_out j = {cJSON_CreateObject(), 1};
    j.ok = j.root && scratch;
    pthread_mutex_lock(&lp->mu);
    add_num(&j, j.root, "sample_every", atomic_load(&lp->every));
    add_num(&j, j.root, "sampled_steps", (double)lp->sampled);
    add_num(&j, j.root, "unattributed_steps", (double)lp->unattributed);
    add_num(&j, j.root, "shapes_not_kept", (double)lp->full_groups);
    add_num(&j, j.root, "hidden", lp->arch.hidden);
    add_num(&j, j.root, "layers", lp->arch.n_layers);
    tables_json(&j, tables);
    cJSON *groups = add_arr(&j, j.root, "shapes");
    for (int g = 0; g < lp->n_groups && j.ok; g++)
        if (lp->groups[g].count > 0)
            group_json(&j, groups, lp, &lp->groups[g], tables, scratch);
    memory_json(&j, lp, tables);
    pthread_mutex_unlock(&lp->mu);
    char *text = j.ok ? cJSON_PrintUnformatted(j.root) : NULL;
    cJSON_Delete(j.root);
    free(scratch);
    return text;
}
