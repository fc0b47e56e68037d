/* Validation of the cost model against end-to-end measurement of held-out architectures
 * sampled from the search space, and the predicted-vs-measured plot. */
#include "autocompress/clock.h"
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

/* Uniform over each axis's values, except removal: a keep axis keeps with probability
 * 0.8 and a head axis with a "remove" value picks it with probability 0.2, so samples
 * are pruned the way searches prune, not mostly gutted. */
static void sample_choice(const ac_cost_model *m, uint64_t *rng, int *choice)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++) {
        const ac_cost_axis *x = ac_cost_model_axis(m, a);
        int has_zero = x->count > 1 && x->values[x->count - 1] == 0;
        if (x->kind == AC_AXIS_KEEP)
            choice[a] = ac_rng_below(rng, 10) < 8 ? 0 : 1;
        else if (x->kind == AC_AXIS_MAMBA_HEADS && has_zero)
            choice[a] = ac_rng_below(rng, 10) < 2 ? x->count - 1 : ac_rng_below(rng, x->count - 1);
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

ac_status ac_cost_validate(const char *model_dir, const ac_contract *contract, const ac_cost_tables *tables,
                           const ac_validate_params *params, ac_validate_report *report)
{
    memset(report, 0, sizeof *report);
    if (params->n < 1)
        return ac_fail(AC_ERR_INVALID, "validate: --n must be at least 1, got %d", params->n);
    if (params->repeats < 1)
        return ac_fail(AC_ERR_INVALID, "validate: --repeats must be at least 1, got %d", params->repeats);
    if (params->requests < 0 || params->requests > AC_MAX_REQUESTS)
        return ac_fail(AC_ERR_INVALID, "validate: --requests must be in [0, %d] (0: auto), got %d", AC_MAX_REQUESTS,
                       params->requests);
    const char *device;
    ac_status st = ac_contract_compute_device(contract, &device);
    if (st != AC_OK)
        return st;
    int64_t t0 = ac_monotonic_ns();
    ac_arch parent;
    st = ac_load_parent_arch(model_dir, &parent);
    if (st != AC_OK)
        return st;
    ac_cost_model *model = NULL;
    st = ac_cost_model_create(tables, &parent, contract, &model);
    int n_axes = model ? ac_cost_model_axis_count(model) : 0;
    int *choice = malloc((size_t)(n_axes + 1) * sizeof *choice);
    int *parent_layer = malloc((size_t)parent.n_layers * sizeof *parent_layer);
    report->entries = calloc((size_t)params->n, sizeof *report->entries);
    if (st == AC_OK && (!choice || !parent_layer || !report->entries))
        st = ac_fail(AC_ERR_NOMEM, "validate: out of memory");
    ac_progress *progress = NULL;
    if (st == AC_OK)
        st = ac_progress_init(&progress, "validate", (double)params->n * params->repeats, "measurements", params->progress,
                              params->progress_stream ? params->progress_stream : stderr);
    uint64_t rng = params->seed;
    const ac_contract_workload *w = &contract->workload;
    int n = params->n, R = params->repeats;
    /* K slots per sweep, count[arch][sweep] of them filled; S slots per architecture */
    int K = params->requests > 0 ? params->requests : AC_MAX_REQUESTS, S = R * K;
    ac_arch *archs = calloc((size_t)n, sizeof *archs);
    int *maps = malloc((size_t)n * parent.n_layers * sizeof *maps);
    double *ms = malloc((size_t)n * S * sizeof *ms), *mem = malloc((size_t)n * R * sizeof *mem);
    double *norm = malloc((size_t)n * S * sizeof *norm), *refs = malloc((size_t)n * S * sizeof *refs);
    double *scratch = malloc((size_t)n * S * sizeof *scratch);
    int *count = calloc((size_t)n * R, sizeof *count);
    double reference_ms = ac_cost_tables_get_info(tables)->reference_ms;
    int normalise = reference_ms > 0 && !params->no_reference;
    report->normalised = normalise;
    if (st == AC_OK && (!archs || !maps || !ms || !mem || !norm || !refs || !scratch || !count))
        st = ac_fail(AC_ERR_NOMEM, "validate: out of memory");
    for (int i = 0; st == AC_OK && i < n; i++) {
        ac_validate_entry *e = &report->entries[i];
        /* a draw that removes every layer is drawn again */
        for (int tries = 0; tries < 100; tries++) {
            sample_choice(model, &rng, choice);
            st = ac_cost_choice_arch(model, choice, &archs[i], maps + (size_t)i * parent.n_layers);
            if (st == AC_OK)
                break;
        }
        if (st == AC_OK)
            st = ac_cost_predict(model, choice, &e->predicted);
        if (st == AC_OK) {
            describe(&archs[i], e->description, sizeof e->description);
            e->params = (double)ac_arch_param_counts(&archs[i]).total;
        }
    }
    /* R sweeps over the architectures, each time in a fresh process: slow phases of the
     * machine spread over all of them */
    for (int sweep = 0; st == AC_OK && sweep < R; sweep++)
        for (int i = 0; st == AC_OK && i < n; i++) {
            ac_measure_job job = {
                .model_dir = model_dir,
                .seed = params->seed + (uint64_t)sweep, /* each sweep its own prompt */
                .arch = &archs[i],
                .parent_layer = maps + (size_t)i * parent.n_layers,
                .workload = *w,
                .threads = contract->hardware.threads,
                .repeats = K,
                .min_seconds = params->requests > 0 ? 0 : AC_AUTO_REQUEST_SECONDS,
                .warmup_steps = 2,
                .probe_capacity = 0,
                .reference = normalise,
                .device = device,
                .weights = contract->hardware.weights,
            };
            ac_measure_result res;
            st = ac_measure(&job, &res, NULL);
            if (st != AC_OK) {
                ac_fail_context(st, "validate: architecture %d (%s)", i, report->entries[i].description);
                break;
            }
            /* the samples of architecture i, packed: those of earlier sweeps come first */
            int done = 0;
            for (int q = 0; q < sweep; q++)
                done += count[(size_t)i * R + q];
            for (int k = 0; k < res.repeats; k++) {
                ms[(size_t)i * S + done + k] = 1000.0 * res.seconds[k];
                refs[(size_t)i * S + done + k] = res.reference_seconds[k];
            }
            count[(size_t)i * R + sweep] = res.repeats;
            report->requests_per_arch += (double)res.repeats / n;
            report->retried += res.retried;
            mem[(size_t)i * R + sweep] = res.measured_bytes;
            ac_progress_update(progress, sweep * n + i + 1);
        }
    if (st == AC_OK && normalise) {
        /* how steady the machine was: the parent's request, spread over median */
        size_t filled = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < requests_of(count, i, R); j++)
                scratch[filled++] = refs[(size_t)i * S + j];
        double mid = ac_stat_median(scratch, filled);
        report->reference_noise_pct = mid > 0 ? 100.0 * ac_stat_spread(scratch, filled) / mid : 0;
        /* each request at the profiling's speed, through the reference timed right after
         * it and how times move with the reference here (the slope within architectures) */
        st = within_slope(ms, refs, count, n, R, S, &report->reference_slope);
        for (int i = 0; st == AC_OK && i < n; i++)
            for (int j = 0; j < requests_of(count, i, R); j++)
                norm[(size_t)i * S + j] = ms[(size_t)i * S + j] * ac_speed_factor(reference_ms / 1000.0,
                                                                                  refs[(size_t)i * S + j],
                                                                                  report->reference_slope);
    }
    if (st == AC_OK)
        st = keep_samples(report, ms, normalise ? refs : NULL, count, n, R, S);
    for (int i = 0; st == AC_OK && i < n; i++) {
        ac_validate_entry *e = &report->entries[i];
        size_t samples = (size_t)requests_of(count, i, R);
        e->latency_ms = ac_stat_median(ms + (size_t)i * S, samples);
        e->latency_spread_ms = ac_stat_spread(ms + (size_t)i * S, samples);
        e->throughput_tok_s = e->latency_ms > 0 ? (double)w->batch * (double)w->output_tokens / (e->latency_ms / 1000.0) : 0;
        e->memory_bytes = ac_stat_median(mem + (size_t)i * R, (size_t)R);
        if (normalise) {
            e->latency_norm_ms = ac_stat_median(norm + (size_t)i * S, samples);
            e->throughput_norm_tok_s = (double)w->batch * (double)w->output_tokens / (e->latency_norm_ms / 1000.0);
        }
        report->n = i + 1;
    }
    if (progress) {
        ac_progress_finish(progress);
        ac_progress_free(progress);
    }
    for (int i = 0; archs && i < n; i++)
        ac_arch_free(&archs[i]);
    free(archs);
    free(maps);
    free(ms);
    free(mem);
    free(norm);
    free(refs);
    free(scratch);
    free(count);
    for (int i = 0; st == AC_OK && i < report->n; i++) {
        const ac_validate_entry *e = &report->entries[i];
        double el = ape(e->predicted.latency_ms, e->latency_ms), et = ape(e->predicted.throughput_tok_s, e->throughput_tok_s);
        double em = ape(e->predicted.memory_bytes, e->memory_bytes), ec = ape(e->predicted.conventional_bytes, e->memory_bytes);
        report->latency_mape += el / report->n;
        report->throughput_mape += et / report->n;
        report->memory_mape += em / report->n;
        report->conventional_memory_mape += ec / report->n;
        report->latency_max_ape = el > report->latency_max_ape ? el : report->latency_max_ape;
        report->throughput_max_ape = et > report->throughput_max_ape ? et : report->throughput_max_ape;
        report->memory_max_ape = em > report->memory_max_ape ? em : report->memory_max_ape;
        if (report->normalised) {
            double nl = ape(e->predicted.latency_ms, e->latency_norm_ms);
            double nt = ape(e->predicted.throughput_tok_s, e->throughput_norm_tok_s);
            report->latency_norm_mape += nl / report->n;
            report->throughput_norm_mape += nt / report->n;
            report->latency_norm_max_ape = nl > report->latency_norm_max_ape ? nl : report->latency_norm_max_ape;
            report->throughput_norm_max_ape = nt > report->throughput_norm_max_ape ? nt : report->throughput_norm_max_ape;
        }
    }
    report->seconds = 1e-9 * (double)(ac_monotonic_ns() - t0);
    free(choice);
    free(parent_layer);
    ac_cost_model_free(model);
    ac_arch_free(&parent);
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
    const double mib = 1024.0 * 1024.0;
    for (int i = 0; i < r->n; i++) {
        const ac_validate_entry *e = &r->entries[i];
        double lat = r->normalised ? e->latency_norm_ms : e->latency_ms;
        double tps = r->normalised ? e->throughput_norm_tok_s : e->throughput_tok_s;
        fprintf(f, "%g %g %g %g %g %g\n", thr ? e->predicted.throughput_tok_s : e->predicted.latency_ms, thr ? tps : lat,
                e->predicted.memory_bytes / mib, e->memory_bytes / mib, e->predicted.conventional_bytes / mib,
                thr ? e->throughput_tok_s : e->latency_ms);
    }
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
    fprintf(g, "unset multiplot\n");
    int status = pclose(g);
    remove(data);
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
