/* Profiling runs (autocompress/profile.h): plan models that carry many candidate
 * configurations, measure each in a child process with the CPU probe, split the spans
 * at layer boundaries per phase and step, and reduce them to table rows. */
#include "autocompress/clock.h"
#include "autocompress/host.h"
#include "autocompress/log.h"
#include "autocompress/profile.h"
#include "autocompress/trace.h"
#include "cost/cost_internal.h"
#include "blocks/block.h"
#include "util/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ac_profile_params ac_profile_default_params(void)
{
    ac_profile_params p;
    memset(&p, 0, sizeof p);
    p.repeats = 5;
    p.requests = 0;
    p.layers = 0;
    p.balanced = 0;
    p.seed = 1;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

/* ---- planning ---- */

typedef struct {
    int a, b, c; /* mamba: heads; moe: experts, expert width (0: an MLP), shared width */
} config;

typedef struct {
    config *items;
    int n;
} queue;

typedef struct {
    ac_arch arch;
    int *parent_layer;
} run_plan;

static ac_status push(queue *q, config c)
{
    config *grown = realloc(q->items, (size_t)(q->n + 1) * sizeof *grown);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    q->items = grown;
    q->items[q->n++] = c;
    return AC_OK;
}

/* The configurations each kind's slots cycle through. */
static ac_status build_queues(const ac_contract_search_space *sp, queue q[4])
{
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < sp->mamba_heads.values.count; i++)
        st = push(&q[AC_BLOCK_MAMBA], (config){sp->mamba_heads.values.values[i], 0, 0});
    for (int e = 0; st == AC_OK && e < sp->routed_experts.count; e++)
        for (int f = 0; st == AC_OK && f < sp->routed_ffn.count; f++)
            for (int s = 0; st == AC_OK && s < sp->shared_ffn.count; s++) {
                int E = sp->routed_experts.values[e], I = sp->routed_ffn.values[f], S = sp->shared_ffn.values[s];
                if (I > 0)
                    st = push(&q[AC_BLOCK_MOE], (config){E, I, S});
                else if (S > 0 && e == 0) /* no routed experts: the shared expert alone, whatever E */
                    st = push(&q[AC_BLOCK_MOE], (config){0, 0, S});
            }
    if (st == AC_OK)
        st = push(&q[AC_BLOCK_ATTENTION], (config){0, 0, 0});
    if (st == AC_OK)
        st = push(&q[AC_BLOCK_MLP], (config){0, 0, 0});
    return st;
}

static void apply_config(ac_block_dims *b, const ac_block_dims *parent, config c)
{
    switch (parent->kind) {
    case AC_BLOCK_MAMBA: ac_dims_mamba(b, parent, c.a); break;
    case AC_BLOCK_MOE:
        if (c.b == 0)
            ac_dims_mlp(b, parent, c.c);
        else
            ac_dims_moe(b, parent, c.a, c.b, c.c);
        break;
    default: *b = *parent; break;
    }
}

static void free_plans(run_plan *runs, int n)
{
    for (int i = 0; runs && i < n; i++) {
        ac_arch_free(&runs[i].arch);
        free(runs[i].parent_layer);
    }
    free(runs);
}

/* Which parent layer each of the `layers` slots takes its kind and weights from.
 * Parent pattern: the parent's layers, repeated. Balanced: every kind of the parent keeps
 * at least one slot and the others go, one at a time, to the kind with the most runs
 * still to fill (ceil(configurations / slots)), so the kinds with many configurations
 * (MoE) get most slots and fewer runs cover the space; the kinds are spread over the
 * depth (each slot takes the kind furthest behind its share), and a kind's j-th slot
 * takes the weights of the parent's (j mod count)-th layer of that kind. */
static void slot_pattern(const ac_arch *parent, const queue q[4], int layers, int balanced, int *slot_parent)
{
    int count[4] = {0, 0, 0, 0}, present = 0;
    for (int l = 0; l < parent->n_layers; l++)
        present += count[parent->layers[l].kind]++ == 0;
    if (!balanced || layers < present) {
        for (int s = 0; s < layers; s++)
            slot_parent[s] = s % parent->n_layers;
        return;
    }
    int share[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++)
        share[k] = count[k] > 0;
    for (int extra = layers - present; extra > 0; extra--) {
        int best = -1, best_need = -1;
        for (int k = 0; k < 4; k++) {
            if (!count[k])
                continue;
            int need = (q[k].n + share[k] - 1) / share[k];
            if (best < 0 || need > best_need || (need == best_need && q[k].n > q[best].n)) {
                best = k;
                best_need = need;
            }
        }
        share[best]++;
    }
    int placed[4] = {0, 0, 0, 0};
    for (int s = 0; s < layers; s++) {
        int best = -1;
        double best_deficit = -1e300;
        for (int k = 0; k < 4; k++) {
            if (placed[k] >= share[k])
                continue;
            double deficit = (double)share[k] * (s + 1) / layers - placed[k];
            if (deficit > best_deficit) {
                best = k;
                best_deficit = deficit;
            }
        }
        /* the placed[best]-th slot of this kind: the parent's layers of the kind in turn */
        int want = placed[best]++ % count[best], seen = 0;
        for (int l = 0; l < parent->n_layers; l++)
            if ((int)parent->layers[l].kind == best && seen++ == want) {
                slot_parent[s] = l;
                break;
            }
    }
}

static ac_status plan_runs(const ac_arch *parent, const ac_contract_search_space *sp, int layers, int balanced,
                           run_plan **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    queue q[4];
    memset(q, 0, sizeof q);
    ac_status st = build_queues(sp, q);
    int *slot_parent = malloc((size_t)layers * sizeof *slot_parent);
    if (st == AC_OK && !slot_parent)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    int slots[4] = {0, 0, 0, 0};
    if (st == AC_OK) {
        slot_pattern(parent, q, layers, balanced, slot_parent);
        for (int s = 0; s < layers; s++)
            slots[parent->layers[slot_parent[s]].kind]++;
    }
    int per_hidden = 1;
    for (int k = 0; k < 4; k++)
        if (slots[k] > 0 && q[k].n > 0) {
            int need = (q[k].n + slots[k] - 1) / slots[k];
            per_hidden = need > per_hidden ? need : per_hidden;
        }
    int n = per_hidden * sp->hidden_sizes.count;
    run_plan *runs = st == AC_OK ? calloc((size_t)n, sizeof *runs) : NULL;
    if (st == AC_OK && !runs)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory for %d runs", n);
    ac_block_dims *blocks = st == AC_OK ? malloc((size_t)layers * sizeof *blocks) : NULL;
    if (st == AC_OK && !blocks)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    for (int i = 0; st == AC_OK && i < n; i++) {
        int r = i % per_hidden, seen[4] = {0, 0, 0, 0};
        run_plan *run = &runs[i];
        run->parent_layer = malloc((size_t)layers * sizeof *run->parent_layer);
        if (!run->parent_layer) {
            st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
            break;
        }
        for (int s = 0; s < layers; s++) {
            int p = slot_parent[s];
            const ac_block_dims *pb = &parent->layers[p];
            int k = pb->kind, j = seen[k]++;
            config c = q[k].items[((size_t)r * slots[k] + j) % (size_t)q[k].n];
            apply_config(&blocks[s], pb, c);
            run->parent_layer[s] = p;
        }
        ac_arch tmp = *parent;
        tmp.hidden = sp->hidden_sizes.values[i / per_hidden];
        tmp.n_layers = layers;
        tmp.layers = blocks;
        st = ac_arch_copy(&run->arch, &tmp);
        if (st == AC_OK)
            st = ac_arch_validate(&run->arch);
    }
    free(blocks);
    free(slot_parent);
    for (int k = 0; k < 4; k++)
        free(q[k].items);
    if (st != AC_OK) {
        free_plans(runs, n);
        return st;
    }
    *out = runs;
    *n_out = n;
    return AC_OK;
}

/* ---- splitting a run's spans ---- */

enum { FIXED_SITES = 4 }; /* embedding, lm_head, sample, other: sites L .. L+3 */

typedef struct {
    ac_cost_row key;
    int n;            /* samples (timed requests) */
    double *prefill;  /* [n] */
    double *steps;    /* [n_dec][n] */
} occurrence;

typedef struct {
    occurrence *items;
    size_t n, cap;
    int max_n, n_dec;
} occurrences;

static int site_of(const ac_span *s, int L)
{
    switch (s->site.kind) {
    case AC_SITE_EMBEDDING: return L;
    case AC_SITE_LM_HEAD: return L + 1;
    case AC_SITE_SAMPLE: return L + 2;
    case AC_SITE_STEP: return L + 3;
    default: return s->site.layer >= 0 && s->site.layer < L ? s->site.layer : -1;
    }
}

/* Fills pre[site][r] and dec[site][t-1][r] (us) for the R requests the spans hold;
 * "other" is a step's time no site covers, and for the prefill also the request's time
 * between and around its steps (request_s, the request's own clock, minus its steps).
 * *first_count gets the number of spans of the first request (for the trace). */
static ac_status split_spans(const ac_span *spans, size_t n, int L, int R, int n_dec, const double *request_s,
                             double *pre, double *dec, size_t *first_count)
{
    int sites = L + FIXED_SITES, r = 0;
    double covered = 0;
    double steps_us[AC_MEASURE_MAX_REPEATS] = {0};
    *first_count = 0;
    for (size_t i = 0; i < n; i++) {
        const ac_span *s = &spans[i];
        double us = 1e-3 * (double)(s->end_ns - s->start_ns);
        int site = site_of(s, L), decode = s->site.phase == AC_PHASE_DECODE;
        int rep = decode ? r - 1 : r, t = s->site.step;
        if (site < 0 || rep < 0 || rep >= R || (decode && (t < 1 || t > n_dec)) ||
            (!decode && s->site.phase != AC_PHASE_PREFILL))
            return ac_fail(AC_ERR_INTERNAL, "profile: span %zu (%s, %s step %d, layer %d) fits no request", i,
                           ac_site_name(s->site.kind), ac_phase_name(s->site.phase), t, s->site.layer);
        if (rep == 0)
            *first_count = i + 1;
        if (s->site.kind == AC_SITE_STEP) {
            steps_us[rep] += us;
            us -= covered;
            covered = 0;
            if (!decode)
                r++;
        } else {
            covered += us;
        }
        if (decode)
            dec[((size_t)site * n_dec + (t - 1)) * R + rep] = us;
        else
            pre[(size_t)site * R + rep] = us;
    }
    if (r != R)
        return ac_fail(AC_ERR_INTERNAL, "profile: %d requests in the spans, expected %d", r, R);
    for (int q = 0; q < R; q++) {
        double gap = 1e6 * request_s[q] - steps_us[q];
        pre[(size_t)(sites - 1) * R + q] += gap > 0 ? gap : 0;
    }
    return AC_OK;
}

/* pre: [n] samples, dec: [n_dec][n] */
static ac_status add_occurrence(occurrences *o, const ac_cost_row *key, int n, const double *pre, const double *dec)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        occurrence *grown = realloc(o->items, cap * sizeof *grown);
        if (!grown)
            return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
        o->items = grown;
        o->cap = cap;
    }
    occurrence *x = &o->items[o->n];
    x->key = *key;
    x->n = n;
    x->prefill = malloc((size_t)n * sizeof *x->prefill);
    x->steps = malloc(((size_t)o->n_dec * n + 1) * sizeof *x->steps);
    if (!x->prefill || !x->steps) {
        free(x->prefill);
        free(x->steps);
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    }
    memcpy(x->prefill, pre, (size_t)n * sizeof *pre);
    memcpy(x->steps, dec, (size_t)o->n_dec * n * sizeof *dec);
    o->max_n = n > o->max_n ? n : o->max_n;
    o->n++;
    return AC_OK;
}

static void free_occurrences(occurrences *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->items[i].prefill);
        free(o->items[i].steps);
    }
    free(o->items);
}

/* One site's samples of one run, in time order, without the unfilled slots: from
 * pre[slot] and dec[step][slot] (K slots per sweep, counts[sweep] filled) into
 * out_pre[n] and out_dec[step][n]; returns n. */
static int gather_samples(const double *pre, const double *dec, const int *counts, int R, int K, int n_dec,
                          double *out_pre, double *out_dec)
{
    int n = 0;
    for (int q = 0; q < R; q++)
        n += counts[q];
    int j = 0;
    for (int q = 0; q < R; q++)
        for (int k = 0; k < counts[q]; k++, j++) {
            size_t slot = (size_t)q * K + k;
            out_pre[j] = pre[slot];
            for (int t = 0; t < n_dec; t++)
                out_dec[(size_t)t * n + j] = dec[(size_t)t * R * K + slot];
        }
    return n;
}

/* ---- reducing occurrences to rows ---- */

static ac_status reduce_rows(const occurrences *o, const ac_contract_workload *w, ac_cost_tables *tables)
{
    int nd = o->n_dec;
    size_t max_occ = o->n;
    double *med = malloc((max_occ + 1) * sizeof *med);
    double *pool = malloc((max_occ * (size_t)o->max_n + 1) * sizeof *pool);
    double *steps = malloc(((size_t)nd + 1) * sizeof *steps);
    double *ctx = malloc(((size_t)nd + 1) * sizeof *ctx);
    double *spreads = malloc(((size_t)nd + 1) * sizeof *spreads);
    char *done = calloc(max_occ + 1, 1);
    size_t *members = malloc((max_occ + 1) * sizeof *members);
    ac_status st = AC_OK;
    if (!med || !pool || !steps || !ctx || !spreads || !done || !members)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    for (int t = 0; st == AC_OK && t < nd; t++)
        ctx[t] = (double)(w->cached_tokens + w->input_tokens + t); /* step t+1 */
    for (size_t i = 0; st == AC_OK && i < o->n; i++) {
        if (done[i])
            continue;
        size_t m = 0;
        for (size_t j = i; j < o->n; j++)
            if (!done[j] && ac_row_same_key(&o->items[i].key, &o->items[j].key)) {
                done[j] = 1;
                members[m++] = j;
            }
        ac_cost_row row = o->items[i].key;
        row.samples = (int)m;
        /* prefill: median over occurrences of each one's median over its samples */
        size_t pooled = 0;
        for (size_t a = 0; a < m; a++) {
            const occurrence *x = &o->items[members[a]];
            memcpy(pool, x->prefill, (size_t)x->n * sizeof *pool);
            med[a] = ac_stat_median(pool, (size_t)x->n);
        }
        row.prefill_us = ac_stat_median(med, m);
        for (size_t a = 0; a < m; a++) {
            const occurrence *x = &o->items[members[a]];
            memcpy(pool + pooled, x->prefill, (size_t)x->n * sizeof *pool);
            pooled += (size_t)x->n;
        }
        row.prefill_spread_us = ac_stat_spread(pool, pooled);
        /* decode: per step, the median over occurrences of the medians over samples */
        for (int t = 0; t < nd; t++) {
            for (size_t a = 0; a < m; a++) {
                const occurrence *x = &o->items[members[a]];
                memcpy(pool, x->steps + (size_t)t * x->n, (size_t)x->n * sizeof *pool);
                med[a] = ac_stat_median(pool, (size_t)x->n);
            }
            steps[t] = ac_stat_median(med, m);
            pooled = 0;
            for (size_t a = 0; a < m; a++) {
                const occurrence *x = &o->items[members[a]];
                memcpy(pool + pooled, x->steps + (size_t)t * x->n, (size_t)x->n * sizeof *pool);
                pooled += (size_t)x->n;
            }
            spreads[t] = ac_stat_spread(pool, pooled);
        }
        ac_stat_line(ctx, steps, (size_t)nd, &row.decode_a_us, &row.decode_b_us);
        row.decode_spread_us = nd ? ac_stat_median(spreads, (size_t)nd) : 0.0;
        row.n_steps = nd;
        row.step_us = steps;
        st = ac_cost_tables_add_row(tables, &row);
    }
    free(med);
    free(pool);
    free(steps);
    free(ctx);
    free(spreads);
    free(done);
    free(members);
    return st;
}

/* The median of the references over all filled slots, and the slope of log request time
 * (the sum of a sample's sites) on log reference within runs. ref[run][slot] (0: empty);
 * pre[run][site][slot], dec[run][site][step][slot]. */
static ac_status speed_of_references(const double *ref, const double *pre, const double *dec, int n_runs, int S,
                                     int sites, int n_dec, double *median, double *slope)
{
    size_t total = (size_t)n_runs * S;
    double *x = malloc((total + 1) * sizeof *x), *y = malloc((total + 1) * sizeof *y);
    size_t *start = malloc(((size_t)n_runs + 1) * sizeof *start);
    if (!x || !y || !start) {
        free(x);
        free(y);
        free(start);
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    }
    size_t n = 0;
    for (int i = 0; i < n_runs; i++) {
        start[i] = n;
        for (int slot = 0; slot < S; slot++) {
            if (ref[(size_t)i * S + slot] <= 0)
                continue;
            double us = 0;
            for (int s = 0; s < sites; s++) {
                us += pre[((size_t)i * sites + s) * S + slot];
                for (int t = 0; t < n_dec; t++)
                    us += dec[(((size_t)i * sites + s) * n_dec + t) * S + slot];
            }
            x[n] = log(ref[(size_t)i * S + slot]);
            y[n] = log(us > 0 ? us : 1e-3);
            n++;
        }
    }
    start[n_runs] = n;
    *slope = ac_stat_within_slope(x, y, start, (size_t)n_runs);
    for (size_t j = 0; j < n; j++)
        y[j] = exp(x[j]);
    *median = n ? ac_stat_median(y, n) : 0.0;
    free(x);
    free(y);
    free(start);
    return AC_OK;
}

/* ---- the whole profiling ---- */

typedef struct {
    ac_trace_run *runs;
    ac_span **spans;
    char **names;
    char ***labels;
    int n, L;
} trace_store;

static void free_trace(trace_store *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->spans[i]);
        free(t->names[i]);
        for (int l = 0; t->labels[i] && l < t->L; l++)
            free(t->labels[i][l]);
        free(t->labels[i]);
    }
    free(t->runs);
    free(t->spans);
    free(t->names);
    free(t->labels);
}

static ac_status keep_trace(trace_store *t, int run, const run_plan *plan, const ac_span *spans, size_t keep)
{
    int L = plan->arch.n_layers;
    t->spans[run] = malloc((keep + 1) * sizeof(ac_span));
    t->names[run] = malloc(64);
    t->labels[run] = calloc((size_t)L, sizeof(char *));
    if (!t->spans[run] || !t->names[run] || !t->labels[run])
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory for the trace");
    memcpy(t->spans[run], spans, keep * sizeof(ac_span));
    snprintf(t->names[run], 64, "run %d: hidden %d", run, plan->arch.hidden);
    for (int l = 0; l < L; l++) {
        ac_cost_row key = ac_block_row_key(&plan->arch.layers[l], plan->arch.hidden);
        char label[64];
        ac_row_label(&key, label, sizeof label);
        t->labels[run][l] = malloc(80);
        if (!t->labels[run][l])
            return ac_fail(AC_ERR_NOMEM, "profile: out of memory for the trace");
        snprintf(t->labels[run][l], 80, "L%d %s", l, label);
    }
    t->runs[run] = (ac_trace_run){t->names[run], t->spans[run], keep, (const char *const *)t->labels[run], L};
    return AC_OK;
}

/* Every rank's measurements into every rank: each run's entries were filled by the one
 * rank that measured it and are zero elsewhere, so the sums are the values. */
static ac_status merge_runs(ac_comm *comm, double *arrays[], const size_t counts[], int n_arrays, int *ints[],
                            const size_t int_counts[], int n_ints)
{
    ac_status st = AC_OK;
    for (int a = 0; st == AC_OK && a < n_arrays; a++)
        st = ac_comm_allreduce_f64(comm, arrays[a], counts[a]);
    for (int a = 0; st == AC_OK && a < n_ints; a++) {
        double *d = malloc((int_counts[a] + 1) * sizeof *d);
        if (!d)
            return ac_fail(AC_ERR_NOMEM, "profile: out of memory merging the ranks' runs");
        for (size_t j = 0; j < int_counts[a]; j++)
            d[j] = ints[a][j];
        st = ac_comm_allreduce_f64(comm, d, int_counts[a]);
        for (size_t j = 0; st == AC_OK && j < int_counts[a]; j++)
            ints[a][j] = (int)d[j];
        free(d);
    }
    return st;
}

/* This rank's runs' traces: rank 0's at path, rank r's at path.rankR. */
static ac_status write_trace(const trace_store *t, const char *path, const ac_comm *comm)
{
    int rank = ac_comm_rank(comm), size = ac_comm_size(comm), n = 0;
    ac_trace_run *mine = calloc((size_t)t->n + 1, sizeof *mine);
    if (!mine)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory for the trace");
    for (int i = rank; i < t->n; i += size)
        mine[n++] = t->runs[i];
    char own[4096];
    snprintf(own, sizeof own, rank == 0 ? "%s" : "%s.rank%d", path, rank);
    ac_status st = ac_trace_write_chrome(own, mine, n);
    free(mine);
    return st;
}

ac_status ac_profile_run(const char *model_dir, const ac_contract *contract, const ac_profile_params *params,
                         ac_cost_tables **tables_out, ac_profile_report *report)
{
    *tables_out = NULL;
    memset(report, 0, sizeof *report);
    const ac_contract_workload *w = &contract->workload;
    int R = params->repeats, n_dec = ac_workload_decode_steps(w);
    if (R < 1 || R > AC_MEASURE_MAX_REPEATS)
        return ac_fail(AC_ERR_INVALID, "profile: repeats must be in [1, %d], got %d", AC_MEASURE_MAX_REPEATS, R);
    if (params->requests < 0 || params->requests > AC_MAX_REQUESTS)
        return ac_fail(AC_ERR_INVALID, "profile: requests must be in [0, %d] (0: auto), got %d", AC_MAX_REQUESTS,
                       params->requests);
    /* timed requests per measurement: K slots per sweep, S samples per run at most */
    int K = params->requests > 0 ? params->requests : AC_MAX_REQUESTS, S = R * K;
    const char *device;
    ac_status dev = ac_contract_compute_device(contract, &device);
    if (dev != AC_OK)
        return dev;
    int64_t t_start = ac_monotonic_ns();
    ac_arch parent;
    ac_status st = ac_load_parent_arch(model_dir, &parent);
    if (st != AC_OK)
        return st;
    int layers = params->layers > 0 ? params->layers : parent.n_layers;
    run_plan *runs = NULL;
    int n_runs = 0;
    st = plan_runs(&parent, &contract->search, layers, params->balanced, &runs, &n_runs);
    int clamped = 0, threads = ac_cpu_threads_for(contract->hardware.threads, &clamped);
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", contract->name);
    snprintf(info.device, sizeof info.device, "%s", contract->hardware.name[0] ? contract->hardware.name
                                                                               : contract->hardware.device);
    info.workload = *w;
    info.weights = contract->hardware.weights;
    info.threads = threads;
    info.repeats = R;
    info.runs = n_runs;
    info.layers_per_run = layers;
    ac_cost_tables *tables = NULL;
    if (st == AC_OK)
        st = ac_cost_tables_create(&info, &tables);
    int L = layers, sites = L + FIXED_SITES;
    /* one measurement's requests, and one run's samples gathered for a site */
    double *pre = malloc((size_t)sites * K * sizeof *pre);
    double *dec = malloc(((size_t)sites * n_dec * K + 1) * sizeof *dec);
    double *gather_pre = malloc((size_t)S * sizeof *gather_pre);
    double *gather_dec = malloc(((size_t)n_dec * S + 1) * sizeof *gather_dec);
    if (st == AC_OK && (!pre || !dec || !gather_pre || !gather_dec))
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    occurrences occ = {NULL, 0, 0, 0, n_dec};
    trace_store trace = {0};
    if (st == AC_OK && params->trace_path) {
        trace.L = L;
        trace.n = n_runs;
        trace.runs = calloc((size_t)n_runs, sizeof *trace.runs);
        trace.spans = calloc((size_t)n_runs, sizeof *trace.spans);
        trace.names = calloc((size_t)n_runs, sizeof *trace.names);
        trace.labels = calloc((size_t)n_runs, sizeof *trace.labels);
        if (!trace.runs || !trace.spans || !trace.names || !trace.labels)
            st = ac_fail(AC_ERR_NOMEM, "profile: out of memory for the trace");
    }
    int rank = ac_comm_rank(params->comm), size = ac_comm_size(params->comm);
    int mine = n_runs / size + (rank < n_runs % size), measured = 0;
    if (rank == 0 && ac_comm_ranks_on_host(params->comm) > 1 && contract->hardware.kind == AC_DEVICE_CPU)
        ac_warn("profile: %d ranks share this host's cores, so their timings disturb each other: run one rank per "
                "host (mpirun --map-by node) for tables to trust", ac_comm_ranks_on_host(params->comm));
    char plan_text[256];
    snprintf(plan_text, sizeof plan_text, "contract %s, %d runs of %d layers, %d sweeps", contract->name, n_runs, L, R);
    if (st == AC_OK)
        st = ac_comm_check_same(params->comm, "profiling plans", plan_text);
    ac_progress *progress = NULL;
    if (st == AC_OK)
        st = ac_progress_init(&progress, "profile", (double)mine * R, "runs", rank == 0 ? params->progress : AC_PROGRESS_OFF,
                              params->progress_stream ? params->progress_stream : stderr);
    /* spans per request: a step, its embedding, layers, head and sampling, every step */
    size_t per_request = (size_t)(1 + n_dec) * (size_t)(L + 4);
    double *resid = malloc(((size_t)n_runs + 1) * sizeof *resid);
    /* every run's samples, sweep by sweep, K slots a sweep of which count[run][sweep] are
     * filled: [run][site][slot], [run][site][step][slot] */
    double *pre_all = calloc(1, ((size_t)n_runs * sites * S + 1) * sizeof *pre_all);
    double *dec_all = calloc(1, ((size_t)n_runs * sites * n_dec * S + 1) * sizeof *dec_all);
    int *count = calloc((size_t)n_runs * R + 1, sizeof *count);
    double *mem_all = calloc(1, ((size_t)n_runs * R + 1) * sizeof *mem_all);
    int *run_threads = calloc((size_t)n_runs + 1, sizeof *run_threads);
    double *ref_all = calloc((size_t)n_runs * S + 1, sizeof *ref_all); /* [run][slot], 0: empty slot */
    if (st == AC_OK && (!resid || !pre_all || !dec_all || !count || !mem_all || !run_threads || !ref_all))
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    /* R sweeps over all runs, one timed request per run each: a slow phase of the machine
     * then costs every row a sample, not one row all of its samples */
    for (int sweep = 0; st == AC_OK && sweep < R; sweep++)
        for (int i = rank; st == AC_OK && i < n_runs; i += size) {
            const run_plan *plan = &runs[i];
            ac_measure_job job = {
                .model_dir = model_dir,
                .seed = params->seed + (uint64_t)sweep, /* each sweep its own prompt */
                .arch = &plan->arch,
                .parent_layer = plan->parent_layer,
                .workload = *w,
                .threads = contract->hardware.threads,
                .repeats = K,
                .min_seconds = params->requests > 0 ? 0 : AC_AUTO_REQUEST_SECONDS,
                .warmup_steps = n_dec < 2 ? n_dec : 2,
                .probe_capacity = per_request + 16,
                .reference = !params->no_reference,
                .device = device,
                .weights = contract->hardware.weights,
            };
            ac_measure_result res;
            ac_span *spans = NULL;
            int64_t run_start = ac_monotonic_ns();
            st = ac_measure(&job, &res, &spans);
            if (st != AC_OK) {
                ac_fail_context(st, "profile run %d (hidden %d)", i, plan->arch.hidden);
                break;
            }
            size_t first_count = 0;
            int k_done = res.repeats;
            if (res.dropped)
                st = ac_fail(AC_ERR_INTERNAL, "profile run %d: the probe dropped %u spans", i, res.dropped);
            if (st == AC_OK)
                st = split_spans(spans, res.n_spans, L, k_done, n_dec, res.seconds, pre, dec, &first_count);
            for (int s = 0; st == AC_OK && s < sites; s++)
                for (int k = 0; k < k_done; k++) {
                    size_t slot = (size_t)sweep * K + k;
                    pre_all[((size_t)i * sites + s) * S + slot] = pre[(size_t)s * k_done + k];
                    for (int t = 0; t < n_dec; t++)
                        dec_all[(((size_t)i * sites + s) * n_dec + t) * S + slot] =
                            dec[((size_t)s * n_dec + t) * k_done + k];
                }
            count[(size_t)i * R + sweep] = k_done;
            report->requests_per_run += (double)k_done / ((double)n_runs * R);
            if (st == AC_OK && sweep == 0 && params->trace_path)
                st = keep_trace(&trace, i, plan, spans, first_count);
            free(spans);
            mem_all[(size_t)i * R + sweep] = res.measured_bytes;
            report->retried += res.retried;
            for (int k = 0; k < k_done; k++)
                ref_all[(size_t)i * S + (size_t)sweep * K + k] = res.reference_seconds[k];
            run_threads[i] = res.threads;
            ac_progress_metric(progress, "run_s", 1e-9 * (double)(ac_monotonic_ns() - run_start));
            ac_progress_update(progress, ++measured);
        }
    if (st == AC_OK && size > 1) {
        double *arrays[] = {pre_all, dec_all, mem_all, ref_all, &report->requests_per_run};
        size_t counts[] = {(size_t)n_runs * sites * S, (size_t)n_runs * sites * n_dec * S, (size_t)n_runs * R,
                           (size_t)n_runs * S, 1};
        int *ints[] = {count, run_threads, &report->retried};
        size_t int_counts[] = {(size_t)n_runs * R, (size_t)n_runs, 1};
        st = merge_runs(params->comm, arrays, counts, 5, ints, int_counts, 3);
    }
    /* every sample at the machine's median speed: times (the median reference over the
     * reference timed right after it) ^ slope */
    double reference = 0, slope = 1.0;
    if (st == AC_OK && !params->no_reference)
        st = speed_of_references(ref_all, pre_all, dec_all, n_runs, S, sites, n_dec, &reference, &slope);
    for (int i = 0; st == AC_OK && reference > 0 && i < n_runs; i++)
        for (int slot = 0; slot < S; slot++) {
            double f = ac_speed_factor(reference, ref_all[(size_t)i * S + slot], slope);
            for (int s = 0; s < sites; s++) {
                pre_all[((size_t)i * sites + s) * S + slot] *= f;
                for (int t = 0; t < n_dec; t++)
                    dec_all[(((size_t)i * sites + s) * n_dec + t) * S + slot] *= f;
            }
        }
    info.reference_slope = slope;
    info.reference_ms = 1000.0 * reference;
    for (int i = 0; st == AC_OK && i < n_runs; i++) {
        const run_plan *plan = &runs[i];
        for (int s = 0; st == AC_OK && s < sites; s++) {
            ac_cost_row key;
            if (s < L) {
                key = ac_block_row_key(&plan->arch.layers[s], plan->arch.hidden);
            } else {
                memset(&key, 0, sizeof key);
                key.kind = (ac_row_kind)(AC_ROW_EMBEDDING + (s - L));
                key.hidden = plan->arch.hidden;
            }
            int n = gather_samples(pre_all + ((size_t)i * sites + s) * S, dec_all + ((size_t)i * sites + s) * n_dec * S,
                                   count + (size_t)i * R, R, K, n_dec, gather_pre, gather_dec);
            st = add_occurrence(&occ, &key, n, gather_pre, gather_dec);
        }
        if (st == AC_OK) {
            ac_memory_terms f = ac_memory_formula(&plan->arch, contract->hardware.weights, w, run_threads[i]);
            double measured = ac_stat_median(mem_all + (size_t)i * R, (size_t)R);
            ac_memory_point p = {plan->arch.hidden, measured, f.weights, f.kv, f.state, f.activations};
            resid[i] = p.measured - (p.weights + p.kv + p.state + p.activations);
            st = ac_cost_tables_add_memory(tables, &p);
        }
    }
    free(pre_all);
    free(dec_all);
    free(count);
    free(gather_pre);
    free(gather_dec);
    free(mem_all);
    free(run_threads);
    free(ref_all);
    if (progress) {
        ac_progress_finish(progress);
        ac_progress_free(progress);
    }
    if (st == AC_OK)
        st = reduce_rows(&occ, w, tables);
    if (st == AC_OK) {
        info.seconds = 1e-9 * (double)(ac_monotonic_ns() - t_start);
        double *copy = malloc(((size_t)n_runs + 1) * sizeof *copy);
        if (!copy) {
            st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
        } else {
            memcpy(copy, resid, (size_t)n_runs * sizeof *copy);
            info.eps_bytes = ac_stat_median(copy, (size_t)n_runs);
            free(copy);
        }
        info.eps_spread_bytes = ac_stat_spread(resid, (size_t)n_runs);
        ac_cost_tables_set_info(tables, &info);
    }
    if (st == AC_OK && params->trace_path)
        st = write_trace(&trace, params->trace_path, params->comm);
    if (st == AC_OK) {
        report->runs = n_runs;
        report->rows = (int)ac_cost_tables_row_count(tables);
        report->rows_per_run = n_runs ? (double)occ.n / n_runs : 0;
        report->seconds = 1e-9 * (double)(ac_monotonic_ns() - t_start);
        report->threads = threads;
        report->threads_clamped = clamped;
        /* report->retried was counted along */
    }
    free_trace(&trace);
    free_occurrences(&occ);
    free(resid);
    free(pre);
    free(dec);
    free_plans(runs, n_runs);
    ac_arch_free(&parent);
    if (st != AC_OK) {
        ac_cost_tables_free(tables);
        return st;
    }
    *tables_out = tables;
    return AC_OK;
}
