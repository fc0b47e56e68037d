/* `autocompress measure`: a checkpoint's measured latency, throughput and memory under its
 * contract's workload, each against its target. The measurement is validation's: fresh
 * processes (sweeps), clean timed requests, the parent's request after each as the speed
 * reference, the peak resident size over the pre-model baseline. */
#include "autocompress/clock.h"
#include "autocompress/profile.h"
#include "cost/cost_internal.h"
#include "util/json_util.h"
#include "util/stats.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

ac_measure_params ac_measure_default_params(void)
{
    ac_measure_params p;
    memset(&p, 0, sizeof p);
    p.sweeps = 5;
    p.seed = 20261203;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* Absolute targets in the report's units; ratios are of the parent's predicted cost. */
static ac_status resolve_targets(const ac_contract *c, const ac_cost_prediction *parent, ac_measure_report *r)
{
    ac_contract_costs pc;
    memset(&pc, 0, sizeof pc);
    if (parent) {
        pc.has_latency = pc.has_throughput = pc.has_memory = true;
        pc.latency_ms = parent->latency_ms;
        pc.throughput_tok_s = parent->throughput_tok_s;
        pc.memory_gib = parent->memory_bytes / GIB;
    }
    ac_contract_costs abs;
    ac_status st = ac_contract_resolve_targets(c, parent ? &pc : NULL, &abs);
    if (st != AC_OK)
        return ac_fail_context(st, "measure: contract %s (ratio targets need --parent and --tables)", c->name);
    r->latency_ms = (ac_measure_quantity){.has_target = abs.has_latency, .target = abs.latency_ms};
    r->throughput_tok_s = (ac_measure_quantity){.has_target = abs.has_throughput, .target = abs.throughput_tok_s};
    r->memory_bytes = (ac_measure_quantity){.has_target = abs.has_memory, .target = abs.memory_gib * GIB};
    return AC_OK;
}

/* The cost model's view: the parent's predicted cost (for ratio targets) and the
 * checkpoint's, when its architecture is a candidate of the search space. */
static ac_status predict(const ac_measure_params *p, const ac_contract *c, const ac_arch *arch,
                         ac_cost_prediction *parent_cost, ac_cost_prediction *model_cost, int *model_predicted)
{
    ac_arch parent;
    ac_status st = ac_load_parent_arch(p->parent_dir, &parent);
    if (st != AC_OK)
        return ac_fail_context(st, "measure: the parent %s", p->parent_dir);
    ac_cost_model *model = NULL;
    st = ac_cost_model_create(p->tables, &parent, c, &model);
    if (st == AC_OK)
        st = ac_cost_predict_arch(model, &parent, parent_cost);
    /* a checkpoint outside the search space is measured all the same */
    *model_predicted = st == AC_OK && ac_cost_predict_arch(model, arch, model_cost) == AC_OK;
    ac_cost_model_free(model);
    ac_arch_free(&parent);
    return st;
}

/* Medians over all timed requests (raw and speed-corrected) and over the processes' peaks. */
static ac_status summarise(const double *ms, const double *norm, size_t n, const double *mem, int sweeps,
                           ac_measure_report *r)
{
    double *tmp = malloc((n + (size_t)sweeps + 1) * sizeof *tmp);
    if (!tmp)
        return ac_fail(AC_ERR_NOMEM, "measure: out of memory");
    const ac_contract_workload *w = &r->workload;
    double tokens = (double)w->batch * (double)w->output_tokens;
    memcpy(tmp, ms, n * sizeof *tmp);
    r->latency_ms.raw = ac_stat_median(tmp, n);
    memcpy(tmp, ms, n * sizeof *tmp);
    r->latency_spread_ms = ac_stat_spread(tmp, n);
    memcpy(tmp, norm, n * sizeof *tmp);
    r->latency_ms.value = r->normalised ? ac_stat_median(tmp, n) : r->latency_ms.raw;
    r->throughput_tok_s.raw = tokens / (r->latency_ms.raw / 1000.0);
    r->throughput_tok_s.value = tokens / (r->latency_ms.value / 1000.0);
    memcpy(tmp, mem, (size_t)sweeps * sizeof *tmp);
    r->memory_bytes.raw = r->memory_bytes.value = ac_stat_median(tmp, (size_t)sweeps);
    free(tmp);
    return AC_OK;
}

static void judge(ac_measure_report *r)
{
    ac_measure_quantity *lat = &r->latency_ms, *thr = &r->throughput_tok_s, *mem = &r->memory_bytes;
    lat->pass = !lat->has_target || lat->value <= lat->target;
    thr->pass = !thr->has_target || thr->value >= thr->target;
    mem->pass = !mem->has_target || mem->value <= mem->target;
    r->pass = lat->pass && thr->pass && mem->pass;
}

static ac_status check_params(const ac_measure_params *p)
{
    if (p->sweeps < 1 || p->sweeps > 100)
        return ac_fail(AC_ERR_INVALID, "measure: sweeps must be in [1, 100], got %d", p->sweeps);
    if (p->requests < 0 || p->requests > AC_MAX_REQUESTS)
        return ac_fail(AC_ERR_INVALID, "measure: requests must be in [0, %d] (0: auto), got %d", AC_MAX_REQUESTS,
                       p->requests);
    if (!p->parent_dir != !p->tables)
        return ac_fail(AC_ERR_INVALID, "measure: the parent and its tables go together (give both or neither)");
    return AC_OK;
}

/* The sweeps: every timed request's time (ms), the reference's time right after it (s),
 * each process's peak. */
static ac_status run_sweeps(const char *model_dir, const ac_contract *c, const ac_measure_params *p,
                            const ac_arch *arch, const int *identity, ac_measure_report *r, double *ms, double *refs,
                            double *mem)
{
    const char *device;
    ac_status st = ac_contract_compute_device(c, &device);
    if (st != AC_OK)
        return st;
    ac_progress *progress = NULL;
    st = ac_progress_init(&progress, "measure", p->sweeps, "processes", p->progress,
                          p->progress_stream ? p->progress_stream : stderr);
    for (int s = 0; st == AC_OK && s < p->sweeps; s++) {
        ac_measure_job job = {
            .model_dir = model_dir,
            .seed = p->seed + (uint64_t)s,
            .arch = arch,
            .parent_layer = identity,
            .workload = c->workload,
            .threads = c->hardware.threads,
            .repeats = p->requests > 0 ? p->requests : AC_MAX_REQUESTS,
            .min_seconds = p->requests > 0 ? 0 : AC_AUTO_REQUEST_SECONDS,
            .warmup_steps = 2,
            .reference = r->normalised,
            .reference_dir = p->parent_dir,
            .device = device,
            .weights = c->hardware.weights,
        };
        ac_measure_result res;
        st = ac_measure(&job, &res, NULL);
        if (st != AC_OK) {
            ac_fail_context(st, "measure: %s, sweep %d", model_dir, s);
            break;
        }
        for (int k = 0; k < res.repeats; k++) {
            ms[r->samples] = 1000.0 * res.seconds[k];
            refs[r->samples] = res.reference_seconds[k];
            r->samples++;
        }
        r->retried += res.retried;
        r->threads = res.threads;
        mem[s] = res.measured_bytes;
        ac_progress_update(progress, s + 1);
    }
    if (progress) {
        ac_progress_finish(progress);
        ac_progress_free(progress);
    }
    return st;
}

/* Every request at the profiling's machine speed (ac_speed_factor), the level being the
 * median of this measurement's references; the raw times when not corrected. */
static void correct_speed(const double *ms, const double *refs, size_t n, double reference_ms,
                          const ac_measure_report *r, double *norm)
{
    memcpy(norm, refs, n * sizeof *norm); /* the median reorders its input */
    double level = ac_stat_median(norm, n);
    for (size_t k = 0; k < n; k++)
        norm[k] = r->normalised ? ms[k] * ac_speed_factor(reference_ms / 1000.0, level, refs[k], r->reference_slope)
                                : ms[k];
}

ac_status ac_measure_checkpoint(const char *model_dir, const ac_contract *c, const ac_measure_params *p,
                                ac_measure_report *r)
{
    memset(r, 0, sizeof *r);
    int64_t t0 = ac_monotonic_ns();
    ac_status st = check_params(p);
    if (st != AC_OK)
        return st;
    ac_arch arch;
    st = ac_load_parent_arch(model_dir, &arch);
    if (st != AC_OK)
        return ac_fail_context(st, "measure: the checkpoint %s", model_dir);
    snprintf(r->contract, sizeof r->contract, "%s", c->name);
    r->workload = c->workload;
    r->data_parallel = c->hardware.data_parallel;
    r->parameters = (double)ac_arch_param_counts(&arch).total;
    r->weights_bytes = ac_memory_formula(&arch, c->hardware.weights, &c->workload, c->hardware.threads).weights;
    ac_cost_prediction parent_cost, model_cost;
    memset(&model_cost, 0, sizeof model_cost);
    if (p->tables)
        st = predict(p, c, &arch, &parent_cost, &model_cost, &r->predicted);
    if (st == AC_OK)
        st = resolve_targets(c, p->tables ? &parent_cost : NULL, r);
    r->latency_ms.predicted = model_cost.latency_ms;
    r->throughput_tok_s.predicted = model_cost.throughput_tok_s;
    r->memory_bytes.predicted = model_cost.memory_bytes;
    double reference_ms = p->tables ? ac_cost_tables_get_info(p->tables)->reference_ms : 0;
    r->normalised = p->parent_dir && reference_ms > 0;
    r->reference_slope = p->tables ? ac_cost_tables_get_info(p->tables)->reference_slope : 0;
    size_t cap = (size_t)p->sweeps * AC_MAX_REQUESTS;
    int *identity = malloc((size_t)(arch.n_layers + 1) * sizeof *identity);
    double *ms = malloc(cap * sizeof *ms), *norm = malloc(cap * sizeof *norm), *refs = malloc(cap * sizeof *refs);
    double *mem = malloc((size_t)p->sweeps * sizeof *mem);
    if (st == AC_OK && (!identity || !ms || !norm || !refs || !mem))
        st = ac_fail(AC_ERR_NOMEM, "measure: out of memory");
    for (int i = 0; st == AC_OK && i < arch.n_layers; i++)
        identity[i] = i;
    if (st == AC_OK)
        st = run_sweeps(model_dir, c, p, &arch, identity, r, ms, refs, mem);
    if (st == AC_OK) {
        correct_speed(ms, refs, (size_t)r->samples, reference_ms, r, norm);
        st = summarise(ms, norm, (size_t)r->samples, mem, p->sweeps, r);
    }
    if (st == AC_OK)
        judge(r);
    free(identity);
    free(ms);
    free(norm);
    free(refs);
    free(mem);
    ac_arch_free(&arch);
    r->seconds = 1e-9 * (double)(ac_monotonic_ns() - t0);
    return st;
}

static cJSON *quantity_json(const ac_measure_quantity *q)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (q->has_target)
        cJSON_AddNumberToObject(o, "target", q->target);
    cJSON_AddNumberToObject(o, "measured", q->value);
    cJSON_AddNumberToObject(o, "measured_raw", q->raw);
    if (q->predicted > 0)
        cJSON_AddNumberToObject(o, "predicted", q->predicted);
    cJSON_AddBoolToObject(o, "pass", q->pass);
    return o;
}

ac_status ac_measure_report_json(const ac_measure_report *r, char **text)
{
    *text = NULL;
    cJSON *root = cJSON_CreateObject(), *w = cJSON_CreateObject();
    if (!root || !w) {
        cJSON_Delete(root);
        cJSON_Delete(w);
        return ac_fail(AC_ERR_NOMEM, "measure: out of memory for the report");
    }
    cJSON_AddStringToObject(root, "contract", r->contract);
    cJSON_AddNumberToObject(w, "batch", r->workload.batch);
    cJSON_AddNumberToObject(w, "cached_tokens", r->workload.cached_tokens);
    cJSON_AddNumberToObject(w, "input_tokens", r->workload.input_tokens);
    cJSON_AddNumberToObject(w, "output_tokens", r->workload.output_tokens);
    cJSON_AddItemToObject(root, "workload", w);
    cJSON_AddNumberToObject(root, "threads", r->threads);
    cJSON_AddNumberToObject(root, "data_parallel", r->data_parallel);
    cJSON_AddNumberToObject(root, "parameters", r->parameters);
    cJSON_AddBoolToObject(root, "speed_corrected", r->normalised);
    cJSON_AddNumberToObject(root, "reference_slope", r->reference_slope);
    cJSON_AddNumberToObject(root, "samples", r->samples);
    cJSON_AddNumberToObject(root, "retried", r->retried);
    cJSON_AddNumberToObject(root, "latency_spread_ms", r->latency_spread_ms);
    cJSON_AddItemToObject(root, "latency_ms", quantity_json(&r->latency_ms));
    cJSON_AddItemToObject(root, "throughput_tok_s", quantity_json(&r->throughput_tok_s));
    cJSON_AddItemToObject(root, "memory_bytes", quantity_json(&r->memory_bytes));
    cJSON_AddBoolToObject(root, "pass", r->pass);
    cJSON_AddNumberToObject(root, "seconds", r->seconds);
    *text = cJSON_Print(root);
    cJSON_Delete(root);
    return *text ? AC_OK : ac_fail(AC_ERR_NOMEM, "measure: out of memory for the report");
}
