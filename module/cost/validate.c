/* Validation of the cost model against end-to-end measurement of held-out architectures
 * sampled from the search space, and the predicted-vs-measured plot. */
#include "autocompress/clock.h"
#include "autocompress/config_json.h"
#include "autocompress/profile.h"
#include "cost/cost_internal.h"
#include "blocks/block.h"
#include "util/json_util.h"
#include "util/rng.h"
#include "util/stats.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

ac_validate_params ac_validate_default_params(void)
{
    ac_validate_params p;
    memset(&p, 0, sizeof p);
    p.n = 20;
    p.repeats = 10;
    p.requests = 0;
    p.seed = 20261202;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

void ac_validate_report_free(ac_validate_report *r)
{
    free(r->entries);
    free(r->samples);
    memset(r, 0, sizeof *r);
}

/* Uniform over each axis's values, except removal: a keep axis (every removable layer's,
 * Mamba ones too in the cost model's default layout) keeps with probability 0.8, so
 * samples are pruned the way searches prune, not mostly gutted. */
static void sample_choice(const ac_cost_model *m, uint64_t *rng, int *choice)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++) {
        const ac_cost_axis *x = ac_cost_model_axis(m, a);
        if (x->kind == AC_AXIS_KEEP)
            choice[a] = ac_rng_below(rng, 10) < 8 ? 0 : 1;
        else
            choice[a] = ac_rng_below(rng, x->count);
    }
}

static void describe(const ac_arch *a, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "d%d", a->hidden);
    for (int i = 0; i < a->n_layers && n + 1 < size; i++) {
        buf[n++] = ' ';
        ac_block(&a->layers[i])->tag(&a->layers[i], buf + n, size - n);
        n += strlen(buf + n);
    }
}

/* Timed requests of architecture i over all sweeps, from count[arch][sweep]. */
static int requests_of(const int *count, int i, int R)
{
    int n = 0;
    for (int q = 0; q < R; q++)
        n += count[(size_t)i * R + q];
    return n;
}

/* The slope of log time on log reference within architectures, from ms[arch][S] and
 * refs[arch][S] (packed, count[arch][sweep] per sweep). */
static ac_status within_slope(const double *ms, const double *refs, const int *count, int n, int R, int S,
                              double *slope)
{
    double *x = malloc(((size_t)n * S + 1) * sizeof *x), *y = malloc(((size_t)n * S + 1) * sizeof *y);
    size_t *start = malloc(((size_t)n + 1) * sizeof *start);
    if (!x || !y || !start) {
        free(x);
        free(y);
        free(start);
        return ac_fail(AC_ERR_NOMEM, "validate: out of memory");
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        start[i] = k;
        for (int j = 0; j < requests_of(count, i, R); j++)
            if (refs[(size_t)i * S + j] > 0 && ms[(size_t)i * S + j] > 0) {
                x[k] = log(refs[(size_t)i * S + j]);
                y[k++] = log(ms[(size_t)i * S + j]);
            }
    }
    start[n] = k;
    *slope = ac_stat_within_slope(x, y, start, (size_t)n);
    free(x);
    free(y);
    free(start);
    return AC_OK;
}

/* Every timed request in time order (sweep by sweep, architecture by architecture), from
 * ms[arch][S] and the references refs[arch][S] (seconds; NULL: none), both packed, and
 * count[arch][sweep]. */
static ac_status keep_samples(ac_validate_report *r, const double *ms, const double *refs, const int *count, int n,
                              int R, int S)
{
    size_t total = 0;
    for (int i = 0; i < n * R; i++)
        total += (size_t)count[i];
    r->samples = malloc((total + 1) * sizeof *r->samples);
    if (!r->samples)
        return ac_fail(AC_ERR_NOMEM, "validate: out of memory for %zu samples", total);
    for (int q = 0; q < R; q++)
        for (int i = 0; i < n; i++) {
            int offset = 0;
            for (int p = 0; p < q; p++)
                offset += count[(size_t)i * R + p];
            for (int k = 0; k < count[(size_t)i * R + q]; k++)
                r->samples[r->n_samples++] = (ac_validate_sample){
                    i, q, ms[(size_t)i * S + offset + k], refs ? 1000.0 * refs[(size_t)i * S + offset + k] : 0.0};
        }
    return AC_OK;
}

static double ape(double predicted, double measured)
{
    return measured > 0 ? 100.0 * fabs(predicted - measured) / measured : 0.0;
}

/* One validation: n architectures drawn from the search space, measured over R sweeps of
 * K timed request slots each, S = R K slots an architecture. Samples are packed per
 * architecture ([arch][S], those of earlier sweeps first), count[arch][sweep] of a
 * sweep's K slots filled. */
typedef struct {
    const char *model_dir;
    const ac_contract *contract;
    const ac_validate_params *params;
    ac_validate_report *report;
    const char *device;
    int64_t t0;
    ac_arch parent;
    ac_cost_model *model;
    int *choice; /* [axis] */
    ac_progress *progress;
    uint64_t rng;
    int n, R, K, S;
    ac_arch *archs;  /* [arch] */
    int *maps;       /* [arch][parent layer]: each layer's parent layer */
    double *ms;      /* [arch][S]: as measured */
    double *norm;    /* [arch][S]: at the profiling's speed */
    double *refs;    /* [arch][S]: the reference request after each (seconds) */
    double *scratch; /* [arch][S]: room to take medians in */
    double *mem;     /* [arch][sweep] */
    int *count;      /* [arch][sweep] */
    double reference_ms; /* the tables' */
    int normalise;
} validate_state;

/* The parameters, the device and the parent's architecture: all that can fail before
 * there is anything to free. */
static ac_status validate_init(validate_state *s, const char *model_dir, const ac_contract *contract,
                               const ac_validate_params *params, ac_validate_report *report)
{
    *s = (validate_state){.model_dir = model_dir, .contract = contract, .params = params, .report = report};
    if (params->n < 0 || params->n_archs < 0 || params->n + params->n_archs < 1)
        return ac_fail(AC_ERR_INVALID, "validate: nothing to validate (--n %d and %d given architectures)", params->n,
                       params->n_archs);
    if (params->repeats < 1)
        return ac_fail(AC_ERR_INVALID, "validate: --repeats must be at least 1, got %d", params->repeats);
    if (params->requests < 0 || params->requests > AC_MAX_REQUESTS)
        return ac_fail(AC_ERR_INVALID, "validate: --requests must be in [0, %d] (0: auto), got %d", AC_MAX_REQUESTS,
                       params->requests);
    ac_status st = ac_contract_compute_device(contract, &s->device);
    if (st != AC_OK)
        return st;
    s->t0 = ac_monotonic_ns();
    return ac_load_parent_arch(model_dir, &s->parent);
}

static ac_status alloc_samples(validate_state *s)
{
    size_t n = (size_t)s->n, S = (size_t)s->S;
    s->archs = calloc(n, sizeof *s->archs);
    s->maps = malloc(n * s->parent.n_layers * sizeof *s->maps);
    s->ms = malloc(n * S * sizeof *s->ms);
    s->mem = malloc(n * s->R * sizeof *s->mem);
    s->norm = malloc(n * S * sizeof *s->norm);
    s->refs = malloc(n * S * sizeof *s->refs);
    s->scratch = malloc(n * S * sizeof *s->scratch);
    s->count = calloc(n * s->R, sizeof *s->count);
    if (!s->archs || !s->maps || !s->ms || !s->mem || !s->norm || !s->refs || !s->scratch || !s->count)
        return ac_fail(AC_ERR_NOMEM, "validate: out of memory");
    return AC_OK;
}

/* The cost model, the report's entries, the progress and the sample arrays. */
static ac_status validate_prepare(validate_state *s, const ac_cost_tables *tables)
{
    const ac_validate_params *p = s->params;
    ac_status st = ac_cost_model_create(tables, &s->parent, s->contract, &s->model);
    int n_axes = s->model ? ac_cost_model_axis_count(s->model) : 0;
    s->choice = malloc((size_t)(n_axes + 1) * sizeof *s->choice);
    s->report->entries = calloc((size_t)(p->n + p->n_archs), sizeof *s->report->entries);
    if (st == AC_OK && (!s->choice || !s->report->entries))
        st = ac_fail(AC_ERR_NOMEM, "validate: out of memory");
    if (st == AC_OK)
        st = ac_progress_init(&s->progress, "validate", (double)(p->n + p->n_archs) * p->repeats, "measurements",
                              p->progress,
                              p->progress_stream ? p->progress_stream : stderr);
    s->rng = p->seed;
    s->n = p->n + p->n_archs;
    s->R = p->repeats;
    s->K = p->requests > 0 ? p->requests : AC_MAX_REQUESTS;
    s->S = s->R * s->K;
    s->reference_ms = ac_cost_tables_get_info(tables)->reference_ms;
    s->normalise = s->reference_ms > 0 && !p->no_reference;
    s->report->normalised = s->normalise;
    if (st == AC_OK)
        st = alloc_samples(s);
    return st;
}

/* Architecture i drawn, predicted and described; a draw that removes every layer is
 * drawn again. */
static ac_status draw_arch(validate_state *s, int i)
{
    ac_validate_entry *e = &s->report->entries[i];
    ac_status st = AC_OK;
    for (int tries = 0; tries < 100; tries++) {
        sample_choice(s->model, &s->rng, s->choice);
        st = ac_cost_choice_arch(s->model, s->choice, &s->archs[i], s->maps + (size_t)i * s->parent.n_layers);
        if (st == AC_OK)
            break;
    }
    if (st == AC_OK)
        st = ac_cost_predict(s->model, s->choice, &e->predicted);
    if (st == AC_OK) {
        describe(&s->archs[i], e->description, sizeof e->description);
        e->params = (double)ac_arch_param_counts(&s->archs[i]).total;
    }
    return st;
}

/* Given architecture i read, mapped onto the search space (its parent layers as the
 * space's choice gives them), predicted and described. */
static ac_status given_arch(validate_state *s, int i)
{
    const char *path = s->params->archs[i];
    ac_validate_entry *e = &s->report->entries[i];
    ac_arch read = {0};
    ac_status st = ac_config_json_read(path, &read);
    if (st == AC_OK)
        st = ac_cost_arch_choice(s->model, &read, s->choice);
    if (st == AC_OK)
        st = ac_cost_choice_arch(s->model, s->choice, &s->archs[i], s->maps + (size_t)i * s->parent.n_layers);
    if (st == AC_OK)
        st = ac_cost_predict(s->model, s->choice, &e->predicted);
    ac_arch_free(&read);
    if (st != AC_OK)
        return ac_fail_context(st, "validate: --arch %d", i + 1);
    describe(&s->archs[i], e->description, sizeof e->description);
    e->params = (double)ac_arch_param_counts(&s->archs[i]).total;
    e->given = 1;
    return AC_OK;
}

static ac_status draw_archs(validate_state *s)
{
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < s->n; i++)
        st = i < s->params->n_archs ? given_arch(s, i) : draw_arch(s, i);
    return st;
}

/* Architecture i measured once in this sweep, in a fresh process. */
static ac_status measure_arch(validate_state *s, int sweep, int i)
{
    const ac_validate_params *p = s->params;
    ac_measure_job job = {
        .model_dir = s->model_dir,
        .seed = p->seed + (uint64_t)sweep, /* each sweep its own prompt */
        .arch = &s->archs[i],
        .parent_layer = s->maps + (size_t)i * s->parent.n_layers,
        .workload = s->contract->workload,
        .threads = s->contract->hardware.threads,
        .repeats = s->K,
        .min_seconds = p->requests > 0 ? 0 : AC_AUTO_REQUEST_SECONDS,
        .warmup_steps = 2,
        .probe_capacity = 0,
        .reference = s->normalise,
        .device = s->device,
        .weights = s->contract->hardware.weights,
    };
    ac_measure_result res;
    ac_status st = ac_measure(&job, &res, NULL);
    if (st != AC_OK)
        return ac_fail_context(st, "validate: architecture %d (%s)", i, s->report->entries[i].description);
    /* the samples of architecture i, packed: those of earlier sweeps come first */
    int done = 0;
    for (int q = 0; q < sweep; q++)
        done += s->count[(size_t)i * s->R + q];
    size_t at = (size_t)i * s->S + (size_t)done;
    for (int k = 0; k < res.repeats; k++) {
        s->ms[at + k] = 1000.0 * res.seconds[k];
        s->refs[at + k] = res.reference_seconds[k];
    }
    s->count[(size_t)i * s->R + sweep] = res.repeats;
    s->report->requests_per_arch += (double)res.repeats / s->n;
    s->report->retried += res.retried;
    s->mem[(size_t)i * s->R + sweep] = res.measured_bytes;
    ac_progress_update(s->progress, sweep * s->n + i + 1);
    return AC_OK;
}

/* R sweeps over the architectures, each time in a fresh process: slow phases of the
 * machine spread over all of them */
static ac_status measure_sweeps(validate_state *s)
{
    ac_status st = AC_OK;
    for (int sweep = 0; st == AC_OK && sweep < s->R; sweep++)
        for (int i = 0; st == AC_OK && i < s->n; i++)
            st = measure_arch(s, sweep, i);
    return st;
}

/* How steady the machine was, and every request at the profiling's speed. */
static ac_status normalise_times(validate_state *s)
{
    ac_validate_report *r = s->report;
    size_t S = (size_t)s->S;
    /* how steady the machine was: the parent's request, spread over median */
    size_t filled = 0;
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < requests_of(s->count, i, s->R); j++)
            s->scratch[filled++] = s->refs[i * S + j];
    double mid = ac_stat_median(s->scratch, filled);
    r->reference_noise_pct = mid > 0 ? 100.0 * ac_stat_spread(s->scratch, filled) / mid : 0;
    /* each request at the profiling's speed: the validation's level in proportion, the
     * request's reference around it by how times move with the reference here (the slope
     * within architectures) */
    ac_status st = within_slope(s->ms, s->refs, s->count, s->n, s->R, s->S, &r->reference_slope);
    for (int i = 0; st == AC_OK && i < s->n; i++)
        for (int j = 0; j < requests_of(s->count, i, s->R); j++)
            s->norm[i * S + j] =
                s->ms[i * S + j] * ac_speed_factor(s->reference_ms / 1000.0, mid, s->refs[i * S + j], r->reference_slope);
    return st;
}

/* Each entry's measured latency, throughput and memory from its samples. */
static void summarise(validate_state *s)
{
    const ac_contract_workload *w = &s->contract->workload;
    ac_validate_report *r = s->report;
    for (int i = 0; i < s->n; i++) {
        ac_validate_entry *e = &r->entries[i];
        size_t samples = (size_t)requests_of(s->count, i, s->R), at = (size_t)i * s->S;
        e->latency_ms = ac_stat_median(s->ms + at, samples);
        e->latency_spread_ms = ac_stat_spread(s->ms + at, samples);
        e->throughput_tok_s =
            e->latency_ms > 0 ? (double)w->batch * (double)w->output_tokens / (e->latency_ms / 1000.0) : 0;
        e->memory_bytes = ac_stat_median(s->mem + (size_t)i * s->R, (size_t)s->R);
        if (s->normalise) {
            e->latency_norm_ms = ac_stat_median(s->norm + at, samples);
            e->throughput_norm_tok_s = (double)w->batch * (double)w->output_tokens / (e->latency_norm_ms / 1000.0);
        }
        r->n = i + 1;
    }
}

/* The progress and the samples, done with once the entries hold their summaries. */
static void release_samples(validate_state *s)
{
    if (s->progress) {
        ac_progress_finish(s->progress);
        ac_progress_free(s->progress);
    }
    for (int i = 0; s->archs && i < s->n; i++)
        ac_arch_free(&s->archs[i]);
    free(s->archs);
    free(s->maps);
    free(s->ms);
    free(s->mem);
    free(s->norm);
    free(s->refs);
    free(s->scratch);
    free(s->count);
}

/* Entry e's errors into the report's means (over its n entries) and maxima. */
static void score_entry(ac_validate_report *r, const ac_validate_entry *e)
{
    double el = ape(e->predicted.latency_ms, e->latency_ms);
    double et = ape(e->predicted.throughput_tok_s, e->throughput_tok_s);
    double em = ape(e->predicted.memory_bytes, e->memory_bytes);
    double ec = ape(e->predicted.conventional_bytes, e->memory_bytes);
    r->latency_mape += el / r->n;
    r->throughput_mape += et / r->n;
    r->memory_mape += em / r->n;
    r->conventional_memory_mape += ec / r->n;
    r->latency_max_ape = el > r->latency_max_ape ? el : r->latency_max_ape;
    r->throughput_max_ape = et > r->throughput_max_ape ? et : r->throughput_max_ape;
    r->memory_max_ape = em > r->memory_max_ape ? em : r->memory_max_ape;
    if (r->normalised) {
        double nl = ape(e->predicted.latency_ms, e->latency_norm_ms);
        double nt = ape(e->predicted.throughput_tok_s, e->throughput_norm_tok_s);
        r->latency_norm_mape += nl / r->n;
        r->throughput_norm_mape += nt / r->n;
        r->latency_norm_max_ape = nl > r->latency_norm_max_ape ? nl : r->latency_norm_max_ape;
        r->throughput_norm_max_ape = nt > r->throughput_norm_max_ape ? nt : r->throughput_norm_max_ape;
    }
    if (e->given) {
        double nl = r->normalised ? ape(e->predicted.latency_ms, e->latency_norm_ms) : el;
        r->given_latency_mape += el / r->n_given;
        r->given_latency_norm_mape += nl / r->n_given;
        r->given_latency_norm_max_ape = nl > r->given_latency_norm_max_ape ? nl : r->given_latency_norm_max_ape;
        r->given_memory_mape += em / r->n_given;
        r->given_memory_max_ape = em > r->given_memory_max_ape ? em : r->given_memory_max_ape;
    }
}

ac_status ac_cost_validate(const char *model_dir, const ac_contract *contract, const ac_cost_tables *tables,
                           const ac_validate_params *params, ac_validate_report *report)
{
    memset(report, 0, sizeof *report);
    validate_state s;
    ac_status st = validate_init(&s, model_dir, contract, params, report);
    if (st != AC_OK)
        return st;
    st = validate_prepare(&s, tables);
    if (st == AC_OK)
        st = draw_archs(&s);
    if (st == AC_OK)
        st = measure_sweeps(&s);
    if (st == AC_OK && s.normalise)
        st = normalise_times(&s);
    if (st == AC_OK)
        st = keep_samples(report, s.ms, s.normalise ? s.refs : NULL, s.count, s.n, s.R, s.S);
    if (st == AC_OK)
        summarise(&s);
    release_samples(&s);
    report->n_given = params->n_archs;
    for (int i = 0; st == AC_OK && i < report->n; i++)
        score_entry(report, &report->entries[i]);
    report->seconds = 1e-9 * (double)(ac_monotonic_ns() - s.t0);
    free(s.choice);
    ac_cost_model_free(s.model);
    ac_arch_free(&s.parent);
    if (st != AC_OK)
        ac_validate_report_free(report);
    return st;
}

ac_status ac_validate_write_samples(const ac_validate_report *r, const char *path)
{
    size_t cap = 96 * (r->n_samples + 2), len = 0;
    char *text = malloc(cap);
    if (!text)
        return ac_fail(AC_ERR_NOMEM, "validate: out of memory writing %s", path);
    len += (size_t)snprintf(text, cap, "arch\tsweep\tms\treference_ms\n");
    for (size_t i = 0; i < r->n_samples && len < cap; i++) {
        const ac_validate_sample *x = &r->samples[i];
        len += (size_t)snprintf(text + len, cap - len, "%d\t%d\t%.4f\t%.4f\n", x->arch, x->sweep, x->ms,
                                x->reference_ms);
    }
    ac_status st = len < cap ? ac_write_text_file(path, text)
                             : ac_fail(AC_ERR_INTERNAL, "validate: %s: samples outgrew their buffer", path);
    free(text);
    return st;
}

/* One line per entry: the latency or throughput predicted and measured (speed-normalised
 * when the report is), memory predicted, measured and conventional (MiB), and the raw
 * measurement. */
static void write_plot_data(FILE *f, const ac_validate_report *r, int thr)
{
    const double mib = 1024.0 * 1024.0;
    for (int i = 0; i < r->n; i++) {
        const ac_validate_entry *e = &r->entries[i];
        double lat = r->normalised ? e->latency_norm_ms : e->latency_ms;
        double tps = r->normalised ? e->throughput_norm_tok_s : e->throughput_tok_s;
        fprintf(f, "%g %g %g %g %g %g\n", thr ? e->predicted.throughput_tok_s : e->predicted.latency_ms, thr ? tps : lat,
                e->predicted.memory_bytes / mib, e->memory_bytes / mib, e->predicted.conventional_bytes / mib,
                thr ? e->throughput_tok_s : e->latency_ms);
    }
}

/* The left panel: latency (or throughput) predicted against measured. */
static void plot_costs(FILE *g, const ac_validate_report *r, int thr, const char *data)
{
    fprintf(g, "set key top left\nset grid\nset size ratio -1\n");
    fprintf(g, "stats '%s' using 1:2 nooutput\nlo = (STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y) * 0.95\n"
               "hi = (STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y) * 1.05\n",
            data);
    fprintf(g, "set xrange [lo:hi]\nset yrange [lo:hi]\n");
    fprintf(g, "set xlabel 'measured %s'\nset ylabel 'predicted %s'\n", thr ? "throughput (tok/s)" : "latency (ms)",
            thr ? "throughput (tok/s)" : "latency (ms)");
    double mape = thr ? (r->normalised ? r->throughput_norm_mape : r->throughput_mape)
                      : (r->normalised ? r->latency_norm_mape : r->latency_mape);
    double maxe = thr ? (r->normalised ? r->throughput_norm_max_ape : r->throughput_max_ape)
                      : (r->normalised ? r->latency_norm_max_ape : r->latency_max_ape);
    fprintf(g, "set title sprintf('%s%s: MAPE %.2f%%%%, max %.2f%%%%')\n", thr ? "throughput" : "latency",
            r->normalised ? " at the profiling machine speed" : "", mape, maxe);
    if (r->normalised)
        fprintf(g, "plot x title 'y = x' lc rgb '#999999', '%s' using 2:1 with points pt 7 ps 1.3 title 'cost model "
                   "(measured, speed-normalised)', '%s' using 6:1 with points pt 6 ps 1.0 lc rgb '#bbbbbb' title "
                   "'raw measurement'\n",
                data, data);
    else
        fprintf(g, "plot x title 'y = x' lc rgb '#999999', '%s' using 2:1 with points pt 7 ps 1.3 title 'cost model'\n",
                data);
}

/* The right panel: memory predicted (W+C+P+R+eps, and conventional W+C+P) against measured. */
static void plot_memory(FILE *g, const ac_validate_report *r, const char *data)
{
    fprintf(g, "set autoscale\nstats '%s' using 4:5 nooutput\nlo = (STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y) * 0.9\n"
               "stats '%s' using 4:3 nooutput\nhi = (STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y) * 1.05\n",
            data, data);
    fprintf(g, "set xrange [lo:hi]\nset yrange [lo:hi]\n");
    fprintf(g, "set xlabel 'measured memory (MiB)'\nset ylabel 'predicted memory (MiB)'\n");
    fprintf(g, "set title sprintf('memory: W+C+P+R+eps MAPE %.2f%%%%, W+C+P MAPE %.2f%%%%')\n", r->memory_mape,
            r->conventional_memory_mape);
    fprintf(g, "plot x title 'y = x' lc rgb '#999999', '%s' using 4:3 with points pt 7 ps 1.3 title 'W+C+P+R+eps', "
               "'%s' using 4:5 with points pt 6 ps 1.3 title 'W+C+P (conventional)'\n",
            data, data);
}

/* gnuplot's exit status, with the start of its log (removed here) when it failed. */
static ac_status gnuplot_result(int status, const char *log, const char *png_path)
{
    char tail[512] = "";
    FILE *lf = fopen(log, "r");
    if (lf) {
        size_t n = fread(tail, 1, sizeof tail - 1, lf);
        tail[n] = '\0';
        fclose(lf);
    }
    remove(log);
    if (status != 0) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            return ac_fail(AC_ERR_UNSUPPORTED, "plot: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)");
        return ac_fail(AC_ERR_IO, "plot: gnuplot failed writing %s (status %d): %s", png_path,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1, tail);
    }
    return AC_OK;
}

ac_status ac_validate_plot(const ac_validate_report *r, const ac_contract *contract, const char *png_path)
{
    int thr = (contract->targets.has_throughput || contract->ratios.has_throughput) &&
              !(contract->targets.has_latency || contract->ratios.has_latency);
    char data[] = "/tmp/ac-validate-XXXXXX";
    int fd = mkstemp(data);
    if (fd < 0)
        return ac_fail(AC_ERR_IO, "plot: cannot create a temporary file: %s", strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        remove(data);
        return ac_fail(AC_ERR_IO, "plot: cannot write %s", data);
    }
    write_plot_data(f, r, thr);
    fclose(f);
    /* gnuplot's own messages go to a log, shown only when it fails */
    char log[] = "/tmp/ac-gnuplot-XXXXXX";
    int lfd = mkstemp(log);
    if (lfd < 0) {
        remove(data);
        return ac_fail(AC_ERR_IO, "plot: cannot create a temporary file: %s", strerror(errno));
    }
    close(lfd);
    char command[128];
    snprintf(command, sizeof command, "gnuplot >%s 2>&1", log);
    FILE *g = popen(command, "w");
    if (!g) {
        remove(data);
        remove(log);
        return ac_fail(AC_ERR_UNSUPPORTED, "plot: cannot run gnuplot (scripts/setup.sh installs gnuplot-nox)");
    }
    fprintf(g, "set terminal pngcairo size 1400,620 font ',11'\nset output '%s'\n", png_path);
    fprintf(g, "set multiplot layout 1,2 title '%s: cost model vs measurement, %d held-out architectures'\n",
            contract->name, r->n);
    plot_costs(g, r, thr, data);
    plot_memory(g, r, data);
    fprintf(g, "unset multiplot\n");
    int status = pclose(g);
    remove(data);
    return gnuplot_result(status, log, png_path);
}
