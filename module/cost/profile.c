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

/* Where each run's layers come from: each kind's configurations, the parent layer of each
 * slot, the slots of each kind, and the runs a hidden size takes for every kind's slots
 * to hold each of its configurations once. */
typedef struct {
    const ac_arch *parent;
    queue q[4];
    int layers;
    int *slot_parent;      /* [layers] */
    int slots[4];
    int per_hidden;
    ac_block_dims *blocks; /* [layers]: the run being planned */
} slot_plan;

static void free_slot_plan(slot_plan *p)
{
    free(p->blocks);
    free(p->slot_parent);
    for (int k = 0; k < 4; k++)
        free(p->q[k].items);
}

static ac_status plan_slots(slot_plan *p, const ac_contract_search_space *sp, int balanced)
{
    ac_status st = build_queues(sp, p->q);
    p->slot_parent = malloc((size_t)p->layers * sizeof *p->slot_parent);
    if (st == AC_OK && !p->slot_parent)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    if (st == AC_OK) {
        slot_pattern(p->parent, p->q, p->layers, balanced, p->slot_parent);
        for (int s = 0; s < p->layers; s++)
            p->slots[p->parent->layers[p->slot_parent[s]].kind]++;
    }
    p->per_hidden = 1;
    for (int k = 0; k < 4; k++)
        if (p->slots[k] > 0 && p->q[k].n > 0) {
            int need = (p->q[k].n + p->slots[k] - 1) / p->slots[k];
            p->per_hidden = need > p->per_hidden ? need : p->per_hidden;
        }
    return st;
}

/* The r-th run of a hidden size: each kind's j-th slot takes that kind's configuration
 * r slots[kind] + j (cycling). */
static ac_status plan_run(slot_plan *p, run_plan *run, int r, int hidden)
{
    int seen[4] = {0, 0, 0, 0};
    run->parent_layer = malloc((size_t)p->layers * sizeof *run->parent_layer);
    if (!run->parent_layer)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    for (int s = 0; s < p->layers; s++) {
        int l = p->slot_parent[s];
        const ac_block_dims *pb = &p->parent->layers[l];
        int k = pb->kind, j = seen[k]++;
        config c = p->q[k].items[((size_t)r * p->slots[k] + j) % (size_t)p->q[k].n];
        apply_config(&p->blocks[s], pb, c);
        run->parent_layer[s] = l;
    }
    ac_arch tmp = *p->parent;
    tmp.hidden = hidden;
    tmp.n_layers = p->layers;
    tmp.layers = p->blocks;
    ac_status st = ac_arch_copy(&run->arch, &tmp);
    if (st == AC_OK)
        st = ac_arch_validate(&run->arch);
    return st;
}

static ac_status plan_runs(const ac_arch *parent, const ac_contract_search_space *sp, int layers, int balanced,
                           run_plan **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    slot_plan p = {.parent = parent, .layers = layers};
    ac_status st = plan_slots(&p, sp, balanced);
    int n = p.per_hidden * sp->hidden_sizes.count;
    run_plan *runs = st == AC_OK ? calloc((size_t)n, sizeof *runs) : NULL;
    if (st == AC_OK && !runs)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory for %d runs", n);
    p.blocks = st == AC_OK ? malloc((size_t)layers * sizeof *p.blocks) : NULL;
    if (st == AC_OK && !p.blocks)
        st = ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    for (int i = 0; st == AC_OK && i < n; i++)
        st = plan_run(&p, &runs[i], i % p.per_hidden, sp->hidden_sizes.values[i / p.per_hidden]);
    free_slot_plan(&p);
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

/* Room to reduce occurrences in: medians (one per occurrence), pooled samples, and per
 * decode step the context, the median and the spread; done[i]: occurrence i taken. */
typedef struct {
    double *med, *pool, *ctx, *steps, *spreads;
    char *done;
    size_t *members;
} reduce_scratch;

static void free_reduce_scratch(reduce_scratch *r)
{
    free(r->med);
    free(r->pool);
    free(r->steps);
    free(r->ctx);
    free(r->spreads);
    free(r->done);
    free(r->members);
}

static ac_status alloc_reduce_scratch(reduce_scratch *r, const occurrences *o)
{
    size_t max_occ = o->n, nd = (size_t)o->n_dec;
    r->med = malloc((max_occ + 1) * sizeof *r->med);
    r->pool = malloc((max_occ * (size_t)o->max_n + 1) * sizeof *r->pool);
    r->steps = malloc((nd + 1) * sizeof *r->steps);
    r->ctx = malloc((nd + 1) * sizeof *r->ctx);
    r->spreads = malloc((nd + 1) * sizeof *r->spreads);
    r->done = calloc(max_occ + 1, 1);
    r->members = malloc((max_occ + 1) * sizeof *r->members);
    if (!r->med || !r->pool || !r->steps || !r->ctx || !r->spreads || !r->done || !r->members)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    return AC_OK;
}

/* An occurrence's samples: the prefill's (step < 0) or those of decode step `step`. */
static const double *samples_of(const occurrence *x, int step)
{
    return step < 0 ? x->prefill : x->steps + (size_t)step * x->n;
}

/* Over the m occurrences members[]: the median of each one's mean over its samples, and
 * the spread of all their samples pooled. Within an occurrence the mean, not the median:
 * a request's time is the sum of its sites' times (a decode step's site takes tens of
 * microseconds, hundreds of them make a request), so it is their expected values that
 * add up, and the median of such small right-skewed times falls short of it. Requests
 * during which another process took a core are already run again; across occurrences
 * (other runs, other processes) the median keeps a slow process out. */
static void reduce_samples(const occurrences *o, reduce_scratch *r, size_t m, int step, double *median,
                           double *spread)
{
    for (size_t a = 0; a < m; a++) {
        const occurrence *x = &o->items[r->members[a]];
        r->med[a] = ac_stat_mean(samples_of(x, step), (size_t)x->n);
    }
    *median = ac_stat_median(r->med, m);
    size_t pooled = 0;
    for (size_t a = 0; a < m; a++) {
        const occurrence *x = &o->items[r->members[a]];
        memcpy(r->pool + pooled, samples_of(x, step), (size_t)x->n * sizeof *r->pool);
        pooled += (size_t)x->n;
    }
    *spread = ac_stat_spread(r->pool, pooled);
}

/* Occurrence i and every later one not yet taken with its key into r->members; their count. */
static size_t take_members(const occurrences *o, reduce_scratch *r, size_t i)
{
    size_t m = 0;
    for (size_t j = i; j < o->n; j++)
        if (!r->done[j] && ac_row_same_key(&o->items[i].key, &o->items[j].key)) {
            r->done[j] = 1;
            r->members[m++] = j;
        }
    return m;
}

/* One row per key: the prefill, the median over occurrences of each one's mean over its
 * samples; decode, per step the same, and the least-squares line over the steps' contexts. */
static ac_status reduce_rows(const occurrences *o, const ac_contract_workload *w, ac_cost_tables *tables)
{
    int nd = o->n_dec;
    reduce_scratch r = {0};
    ac_status st = alloc_reduce_scratch(&r, o);
    for (int t = 0; st == AC_OK && t < nd; t++)
        r.ctx[t] = (double)(w->cached_tokens + w->input_tokens + t); /* step t+1 */
    for (size_t i = 0; st == AC_OK && i < o->n; i++) {
        if (r.done[i])
            continue;
        size_t m = take_members(o, &r, i);
        ac_cost_row row = o->items[i].key;
        row.samples = (int)m;
        reduce_samples(o, &r, m, -1, &row.prefill_us, &row.prefill_spread_us);
        for (int t = 0; t < nd; t++)
            reduce_samples(o, &r, m, t, &r.steps[t], &r.spreads[t]);
        ac_stat_line(r.ctx, r.steps, (size_t)nd, &row.decode_a_us, &row.decode_b_us);
        row.decode_spread_us = nd ? ac_stat_median(r.spreads, (size_t)nd) : 0.0;
        row.n_steps = nd;
        row.step_us = r.steps;
        st = ac_cost_tables_add_row(tables, &row);
    }
    free_reduce_scratch(&r);
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

/* One profiling, from its plan to its tables: R sweeps over the runs, K timed request
 * slots a sweep, S = R K slots a run; sites are the L layer slots, then FIXED_SITES. */
typedef struct {
    const char *model_dir;
    const ac_contract *contract;
    const ac_profile_params *params;
    ac_profile_report *report;
    const char *device;
    int R, K, S, n_dec, L, sites;
    int64_t t_start;
    ac_arch parent;
    run_plan *runs;
    int n_runs, rank, size;
    int measured; /* this rank's measurements so far */
    int threads, clamped;
    ac_cost_tables_info info;
    ac_cost_tables *tables;
    ac_progress *progress;
    /* one measurement's requests, and one run's samples gathered for a site */
    double *pre, *dec, *gather_pre, *gather_dec;
    occurrences occ;
    trace_store trace;
    double *resid; /* [run]: the measured memory over the formula's terms */
    /* every run's samples, sweep by sweep, K slots a sweep of which count[run][sweep] are
     * filled: [run][site][slot], [run][site][step][slot] */
    double *pre_all, *dec_all;
    int *count;
    double *mem_all;  /* [run][sweep] */
    int *run_threads; /* [run] */
    double *ref_all;  /* [run][slot], 0: empty slot */
} profile_state;

/* The parameters, the device and the parent's architecture: all that can fail before
 * there is anything to free. */
static ac_status profile_init(profile_state *s, const char *model_dir, const ac_contract *contract,
                              const ac_profile_params *params, ac_profile_report *report)
{
    *s = (profile_state){.model_dir = model_dir, .contract = contract, .params = params, .report = report};
    s->R = params->repeats;
    s->n_dec = ac_workload_decode_steps(&contract->workload);
    if (s->R < 1 || s->R > AC_MEASURE_MAX_REPEATS)
        return ac_fail(AC_ERR_INVALID, "profile: repeats must be in [1, %d], got %d", AC_MEASURE_MAX_REPEATS, s->R);
    if (params->requests < 0 || params->requests > AC_MAX_REQUESTS)
        return ac_fail(AC_ERR_INVALID, "profile: requests must be in [0, %d] (0: auto), got %d", AC_MAX_REQUESTS,
                       params->requests);
    /* timed requests per measurement: K slots per sweep, S samples per run at most */
    s->K = params->requests > 0 ? params->requests : AC_MAX_REQUESTS;
    s->S = s->R * s->K;
    ac_status st = ac_contract_compute_device(contract, &s->device);
    if (st != AC_OK)
        return st;
    s->t_start = ac_monotonic_ns();
    st = ac_load_parent_arch(model_dir, &s->parent);
    if (st != AC_OK)
        return st;
    if ((st = ac_contract_check_parent(contract, &s->parent)) != AC_OK) {
        ac_arch_free(&s->parent);
        return st;
    }
    s->L = params->layers > 0 ? params->layers : s->parent.n_layers;
    s->sites = s->L + FIXED_SITES;
    s->occ.n_dec = s->n_dec;
    s->rank = ac_comm_rank(params->comm);
    s->size = ac_comm_size(params->comm);
    return AC_OK;
}

static ac_status fill_info(profile_state *s)
{
    const ac_contract *c = s->contract;
    ac_cost_tables_info *info = &s->info;
    memset(info, 0, sizeof *info);
    snprintf(info->contract, sizeof info->contract, "%s", c->name);
    snprintf(info->device, sizeof info->device, "%s", c->hardware.name[0] ? c->hardware.name : c->hardware.device);
    info->workload = c->workload;
    info->weights = c->hardware.weights;
    info->threads = s->threads;
    info->repeats = s->R;
    info->runs = s->n_runs;
    info->layers_per_run = s->L;
    info->has_fingerprint = 1;
    ac_status st = ac_cost_fingerprint_here(c, &info->fingerprint);
    info->fingerprint.threads = s->threads;
    return st;
}

static ac_status alloc_measure_buffers(profile_state *s)
{
    size_t sites = (size_t)s->sites, n_dec = (size_t)s->n_dec;
    s->pre = malloc(sites * s->K * sizeof *s->pre);
    s->dec = malloc((sites * n_dec * s->K + 1) * sizeof *s->dec);
    s->gather_pre = malloc((size_t)s->S * sizeof *s->gather_pre);
    s->gather_dec = malloc((n_dec * s->S + 1) * sizeof *s->gather_dec);
    if (!s->pre || !s->dec || !s->gather_pre || !s->gather_dec)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    return AC_OK;
}

static ac_status trace_init(trace_store *t, int n_runs, int L)
{
    t->L = L;
    t->n = n_runs;
    t->runs = calloc((size_t)n_runs, sizeof *t->runs);
    t->spans = calloc((size_t)n_runs, sizeof *t->spans);
    t->names = calloc((size_t)n_runs, sizeof *t->names);
    t->labels = calloc((size_t)n_runs, sizeof *t->labels);
    if (!t->runs || !t->spans || !t->names || !t->labels) {
        t->n = 0; /* no run's entries to free, only the arrays */
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory for the trace");
    }
    return AC_OK;
}

static void warn_shared_host(const profile_state *s)
{
    int on_host = ac_comm_ranks_on_host(s->params->comm);
    if (s->rank == 0 && on_host > 1 && s->contract->hardware.kind == AC_DEVICE_CPU)
        ac_warn("profile: %d ranks share this host's cores, so their timings disturb each other: run one rank per "
                "host (mpirun --map-by node) for tables to trust", on_host);
}

static ac_status check_plans(const profile_state *s)
{
    char plan_text[256];
    snprintf(plan_text, sizeof plan_text, "contract %s, %d runs of %d layers, %d sweeps", s->contract->name, s->n_runs,
             s->L, s->R);
    return ac_comm_check_same(s->params->comm, "profiling plans", plan_text);
}

/* Progress over this rank's runs, shown by rank 0 only. */
static ac_status start_progress(profile_state *s)
{
    const ac_profile_params *p = s->params;
    int mine = s->n_runs / s->size + (s->rank < s->n_runs % s->size);
    return ac_progress_init(&s->progress, "profile", (double)mine * s->R, "runs",
                            s->rank == 0 ? p->progress : AC_PROGRESS_OFF,
                            p->progress_stream ? p->progress_stream : stderr);
}

static ac_status alloc_sample_arrays(profile_state *s)
{
    size_t n = (size_t)s->n_runs, sites = (size_t)s->sites, n_dec = (size_t)s->n_dec, S = (size_t)s->S;
    s->resid = malloc((n + 1) * sizeof *s->resid);
    s->pre_all = calloc(1, (n * sites * S + 1) * sizeof *s->pre_all);
    s->dec_all = calloc(1, (n * sites * n_dec * S + 1) * sizeof *s->dec_all);
    s->count = calloc(n * s->R + 1, sizeof *s->count);
    s->mem_all = calloc(1, (n * s->R + 1) * sizeof *s->mem_all);
    s->run_threads = calloc(n + 1, sizeof *s->run_threads);
    s->ref_all = calloc(n * S + 1, sizeof *s->ref_all);
    if (!s->resid || !s->pre_all || !s->dec_all || !s->count || !s->mem_all || !s->run_threads || !s->ref_all)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    return AC_OK;
}

/* The runs, the tables they fill, and every buffer the measurements need; the
 * shared-host warning comes even when planning failed. */
static ac_status profile_prepare(profile_state *s)
{
    const ac_contract *c = s->contract;
    ac_status st = plan_runs(&s->parent, &c->search, s->L, s->params->balanced, &s->runs, &s->n_runs);
    s->threads = ac_cpu_threads_for(c->hardware.threads, &s->clamped);
    ac_status info_st = fill_info(s);
    if (st == AC_OK)
        st = info_st;
    if (st == AC_OK)
        st = ac_cost_tables_create(&s->info, &s->tables);
    if (st == AC_OK)
        st = alloc_measure_buffers(s);
    if (st == AC_OK && s->params->trace_path)
        st = trace_init(&s->trace, s->n_runs, s->L);
    warn_shared_host(s);
    if (st == AC_OK)
        st = check_plans(s);
    if (st == AC_OK)
        st = start_progress(s);
    if (st == AC_OK)
        st = alloc_sample_arrays(s);
    return st;
}

static ac_measure_job measure_job(const profile_state *s, int sweep, const run_plan *plan)
{
    const ac_profile_params *p = s->params;
    /* spans per request: a step, its embedding, layers, head and sampling, every step */
    size_t per_request = (size_t)(1 + s->n_dec) * (size_t)(s->L + 4);
    return (ac_measure_job){
        .model_dir = s->model_dir,
        .seed = p->seed + (uint64_t)sweep, /* each sweep its own prompt */
        .arch = &plan->arch,
        .parent_layer = plan->parent_layer,
        .workload = s->contract->workload,
        .threads = s->contract->hardware.threads,
        .repeats = s->K,
        .min_seconds = p->requests > 0 ? 0 : AC_AUTO_REQUEST_SECONDS,
        .warmup_steps = s->n_dec < 2 ? s->n_dec : 2,
        .probe_capacity = per_request + 16,
        .reference = !p->no_reference,
        .device = s->device,
        .weights = s->contract->hardware.weights,
    };
}

/* Run i's k_done requests of this sweep, from pre and dec into their slots. */
static void store_samples(profile_state *s, int sweep, int i, int k_done)
{
    size_t sites = (size_t)s->sites, n_dec = (size_t)s->n_dec, S = (size_t)s->S;
    for (size_t site = 0; site < sites; site++)
        for (int k = 0; k < k_done; k++) {
            size_t slot = (size_t)sweep * s->K + k;
            s->pre_all[((size_t)i * sites + site) * S + slot] = s->pre[site * k_done + k];
            for (size_t t = 0; t < n_dec; t++)
                s->dec_all[(((size_t)i * sites + site) * n_dec + t) * S + slot] =
                    s->dec[(site * n_dec + t) * k_done + k];
        }
}

/* What a measurement tells besides its spans: requests done, memory, retries, references
 * and threads. */
static void store_result(profile_state *s, int sweep, int i, const ac_measure_result *res)
{
    int k_done = res->repeats;
    s->count[(size_t)i * s->R + sweep] = k_done;
    s->report->requests_per_run += (double)k_done / ((double)s->n_runs * s->R);
    s->mem_all[(size_t)i * s->R + sweep] = res->measured_bytes;
    s->report->retried += res->retried;
    for (int k = 0; k < k_done; k++)
        s->ref_all[(size_t)i * s->S + (size_t)sweep * s->K + k] = res->reference_seconds[k];
    s->run_threads[i] = res->threads;
}

/* Run i measured once in this sweep; its first sweep's spans go to the trace. */
static ac_status measure_run(profile_state *s, int sweep, int i)
{
    const run_plan *plan = &s->runs[i];
    ac_measure_job job = measure_job(s, sweep, plan);
    ac_measure_result res;
    ac_span *spans = NULL;
    int64_t run_start = ac_monotonic_ns();
    ac_status st = ac_measure(&job, &res, &spans);
    if (st != AC_OK)
        return ac_fail_context(st, "profile run %d (hidden %d)", i, plan->arch.hidden);
    size_t first_count = 0;
    if (res.dropped)
        st = ac_fail(AC_ERR_INTERNAL, "profile run %d: the probe dropped %u spans", i, res.dropped);
    if (st == AC_OK)
        st = split_spans(spans, res.n_spans, s->L, res.repeats, s->n_dec, res.seconds, s->pre, s->dec, &first_count);
    if (st == AC_OK)
        store_samples(s, sweep, i, res.repeats);
    if (st == AC_OK && sweep == 0 && s->params->trace_path)
        st = keep_trace(&s->trace, i, plan, spans, first_count);
    free(spans);
    store_result(s, sweep, i, &res);
    ac_progress_metric(s->progress, "run_s", 1e-9 * (double)(ac_monotonic_ns() - run_start));
    ac_progress_update(s->progress, ++s->measured);
    return st;
}

/* R sweeps over all runs, one timed request per run each: a slow phase of the machine
 * then costs every row a sample, not one row all of its samples */
static ac_status run_sweeps(profile_state *s)
{
    ac_status st = AC_OK;
    for (int sweep = 0; st == AC_OK && sweep < s->R; sweep++)
        for (int i = s->rank; st == AC_OK && i < s->n_runs; i += s->size)
            st = measure_run(s, sweep, i);
    return st;
}

static ac_status merge_ranks(profile_state *s)
{
    size_t n = (size_t)s->n_runs, sites = (size_t)s->sites, S = (size_t)s->S;
    double *arrays[] = {s->pre_all, s->dec_all, s->mem_all, s->ref_all, &s->report->requests_per_run};
    size_t counts[] = {n * sites * S, n * sites * s->n_dec * S, n * s->R, n * S, 1};
    int *ints[] = {s->count, s->run_threads, &s->report->retried};
    size_t int_counts[] = {n * s->R, n, 1};
    return merge_runs(s->params->comm, arrays, counts, 5, ints, int_counts, 3);
}

/* every sample at the machine's median speed: times (the median reference over the
 * reference timed right after it) ^ slope (the median is the level: ac_speed_factor) */
static ac_status normalise_speed(profile_state *s)
{
    size_t sites = (size_t)s->sites, n_dec = (size_t)s->n_dec, S = (size_t)s->S;
    double reference = 0, slope = 1.0;
    ac_status st = AC_OK;
    if (!s->params->no_reference)
        st = speed_of_references(s->ref_all, s->pre_all, s->dec_all, s->n_runs, s->S, s->sites, s->n_dec, &reference,
                                 &slope);
    for (size_t i = 0; st == AC_OK && reference > 0 && i < (size_t)s->n_runs; i++)
        for (size_t slot = 0; slot < S; slot++) {
            double f = ac_speed_factor(reference, reference, s->ref_all[i * S + slot], slope);
            for (size_t site = 0; site < sites; site++) {
                s->pre_all[(i * sites + site) * S + slot] *= f;
                for (size_t t = 0; t < n_dec; t++)
                    s->dec_all[((i * sites + site) * n_dec + t) * S + slot] *= f;
            }
        }
    s->info.reference_slope = slope;
    s->info.reference_ms = 1000.0 * reference;
    return st;
}

/* Run i's samples of one site, as an occurrence of that site's row. */
static ac_status add_site(profile_state *s, int i, int site)
{
    const run_plan *plan = &s->runs[i];
    size_t at = (size_t)i * s->sites + site;
    ac_cost_row key;
    if (site < s->L) {
        key = ac_block_row_key(&plan->arch.layers[site], plan->arch.hidden);
    } else {
        memset(&key, 0, sizeof key);
        key.kind = (ac_row_kind)(AC_ROW_EMBEDDING + (site - s->L));
        key.hidden = plan->arch.hidden;
    }
    int n = gather_samples(s->pre_all + at * s->S, s->dec_all + at * s->n_dec * s->S, s->count + (size_t)i * s->R,
                           s->R, s->K, s->n_dec, s->gather_pre, s->gather_dec);
    return add_occurrence(&s->occ, &key, n, s->gather_pre, s->gather_dec);
}

/* Run i's median measured memory beside the formula's terms; the residual to resid[i]. */
static ac_status add_memory(profile_state *s, int i)
{
    const run_plan *plan = &s->runs[i];
    const ac_contract *c = s->contract;
    ac_memory_terms f = ac_memory_formula(&plan->arch, c->hardware.weights, &c->workload, s->run_threads[i]);
    double measured = ac_stat_median(s->mem_all + (size_t)i * s->R, (size_t)s->R);
    ac_memory_point p = {plan->arch.hidden, measured, f.weights, f.kv, f.state, f.activations};
    s->resid[i] = p.measured - (p.weights + p.kv + p.state + p.activations);
    return ac_cost_tables_add_memory(s->tables, &p);
}

static ac_status gather_runs(profile_state *s)
{
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < s->n_runs; i++) {
        for (int site = 0; st == AC_OK && site < s->sites; site++)
            st = add_site(s, i, site);
        if (st == AC_OK)
            st = add_memory(s, i);
    }
    return st;
}

/* The samples and the progress, done with before the rows are reduced. */
static void release_samples(profile_state *s)
{
    free(s->pre_all);
    free(s->dec_all);
    free(s->count);
    free(s->gather_pre);
    free(s->gather_dec);
    free(s->mem_all);
    free(s->run_threads);
    free(s->ref_all);
    s->pre_all = s->dec_all = s->gather_pre = s->gather_dec = s->mem_all = s->ref_all = NULL;
    s->count = s->run_threads = NULL;
    if (s->progress) {
        ac_progress_finish(s->progress);
        ac_progress_free(s->progress);
        s->progress = NULL;
    }
}

/* The tables' info: the time taken and eps, the median residual of the runs' memory. */
static ac_status finish_info(profile_state *s)
{
    s->info.seconds = 1e-9 * (double)(ac_monotonic_ns() - s->t_start);
    double *copy = malloc(((size_t)s->n_runs + 1) * sizeof *copy);
    if (!copy)
        return ac_fail(AC_ERR_NOMEM, "profile: out of memory");
    memcpy(copy, s->resid, (size_t)s->n_runs * sizeof *copy);
    s->info.eps_bytes = ac_stat_median(copy, (size_t)s->n_runs);
    free(copy);
    s->info.eps_spread_bytes = ac_stat_spread(s->resid, (size_t)s->n_runs);
    ac_cost_tables_set_info(s->tables, &s->info);
    return AC_OK;
}

static void fill_report(const profile_state *s)
{
    ac_profile_report *r = s->report;
    r->runs = s->n_runs;
    r->rows = (int)ac_cost_tables_row_count(s->tables);
    r->rows_per_run = s->n_runs ? (double)s->occ.n / s->n_runs : 0;
    r->seconds = 1e-9 * (double)(ac_monotonic_ns() - s->t_start);
    r->threads = s->threads;
    r->threads_clamped = s->clamped;
    /* r->retried was counted along */
}

/* Everything but the tables. */
static void profile_state_free(profile_state *s)
{
    release_samples(s);
    free_trace(&s->trace);
    free_occurrences(&s->occ);
    free(s->resid);
    free(s->pre);
    free(s->dec);
    free_plans(s->runs, s->n_runs);
    ac_arch_free(&s->parent);
}

ac_status ac_profile_run(const char *model_dir, const ac_contract *contract, const ac_profile_params *params,
                         ac_cost_tables **tables_out, ac_profile_report *report)
{
    *tables_out = NULL;
    memset(report, 0, sizeof *report);
    profile_state s;
    ac_status st = profile_init(&s, model_dir, contract, params, report);
    if (st != AC_OK)
        return st;
    st = profile_prepare(&s);
    if (st == AC_OK)
        st = run_sweeps(&s);
    if (st == AC_OK && s.size > 1)
        st = merge_ranks(&s);
    if (st == AC_OK)
        st = normalise_speed(&s);
    if (st == AC_OK)
        st = gather_runs(&s);
    release_samples(&s);
    if (st == AC_OK)
        st = reduce_rows(&s.occ, &contract->workload, s.tables);
    if (st == AC_OK)
        st = finish_info(&s);
    if (st == AC_OK && params->trace_path)
        st = write_trace(&s.trace, params->trace_path, params->comm);
    if (st == AC_OK)
        fill_report(&s);
    ac_cost_tables *tables = s.tables;
    profile_state_free(&s);
    if (st != AC_OK) {
        ac_cost_tables_free(tables);
        return st;
    }
    *tables_out = tables;
    return AC_OK;
}
