/* Profiling runs end to end on a tiny checkpoint and workload: the plan covers every
 * configuration of the search space (a cost model can be built from the tables, which
 * fails on any missing row), configurations shared by several slots are combined,
 * decode rows have a median per step, every run leaves a memory point, the trace holds
 * the first request of every run, and validation measures held-out architectures. No
 * assertion depends on timing precision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/config_json.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/profile.h"
#include "cost/cost_internal.h"
#include "util/child.h"
#include "util/stats.h"

#define MODEL AC_SOURCE_DIR "/tests/fixtures/nemotron_h/hybrid_f32"

/* The fixture: pattern M*-EME*-M, hidden 64, 8 Mamba heads, 8 experts of 32, shared 48. */
static const char *const contract_text =
    "name = \"tiny\"; hardware = { device = \"cpu\"; threads = 1; };\n"
    "workload = { batch = 2; cached_tokens = 8; input_tokens = 6; output_tokens = 5; };\n"
    "targets = { latency_ms = 10.0; memory_gib = 0.01; };\n"
    "search_space = { hidden_sizes = [64, 48]; mamba_heads = { values = [8, 4]; scope = \"per_layer\"; remove = true; };\n"
    "  routed_experts = [8, 4]; routed_ffn = [32, 16, 0]; shared_ffn = [48, 0]; removable = [\"mamba\", \"moe\"]; };\n";

/* balanced: slots shared out by configurations (2 runs per hidden size) or as the
 * parent's layers (5 per hidden size). requests: timed requests per measurement (0:
 * auto, which on this tiny workload is the most a measurement takes). */
static void check_profile(int balanced, int requests)
{
    ac_contract c;
    assert_int_equal(ac_contract_parse_string(contract_text, "tiny", &c), AC_OK);
    char trace[] = "/tmp/ac-profile-trace-XXXXXX";
    int fd = mkstemp(trace);
    assert_true(fd >= 0);
    close(fd);
    ac_profile_params p = ac_profile_default_params();
    p.repeats = 3;
    p.progress = AC_PROGRESS_OFF;
    p.trace_path = trace;
    p.balanced = balanced;
    p.requests = requests;
    ac_cost_tables *t = NULL;
    ac_profile_report rep;
    ac_status st = ac_profile_run(MODEL, &c, &p, &t, &rep);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
    /* per hidden size, 2x2x2 MoE configurations + the shared expert alone = 9: over the
     * parent's 2 MoE slots that is 5 runs (Mamba, 2 over 3 slots, and attention ride
     * along); shared out, MoE gets 6 of the 9 slots and Mamba, attention and the MLP one
     * each: max(ceil(9/6), 2/1) = 2 runs */
    int runs = balanced ? 4 : 10, attention_slots = balanced ? 1 : 2;
    assert_int_equal(rep.runs, runs);
    assert_int_equal(ac_cost_tables_get_info(t)->runs, runs);
    /* 9 layers + embedding, head, sampling, other per run */
    assert_float_equal(rep.rows_per_run, 13.0, 1e-9);
    assert_float_equal(rep.requests_per_run, requests ? requests : AC_MAX_REQUESTS, 1e-9);
    ac_arch parent;
    assert_int_equal(ac_config_json_read(MODEL "/config.json", &parent), AC_OK);
    ac_cost_model *m = NULL;
    st = ac_cost_model_create(t, &parent, &c, &m);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
    int attention = 0, moe = 0;
    for (size_t i = 0; i < ac_cost_tables_row_count(t); i++) {
        const ac_cost_row *r = ac_cost_tables_row(t, i);
        assert_true(r->samples >= 1);
        assert_true(r->prefill_us > 0);
        assert_int_equal(r->n_steps, 4); /* output_tokens - 1 decode steps */
        for (int s = 0; s < r->n_steps; s++)
            assert_true(r->step_us[s] > 0 || r->kind == AC_ROW_OTHER);
        if (r->kind == AC_ROW_ATTENTION) {
            attention++;
            assert_int_equal(r->samples, attention_slots * runs / 2); /* slots x runs at its hidden size */
        }
        moe += r->kind == AC_ROW_MOE;
    }
    assert_int_equal(attention, 2);
    assert_int_equal(moe, 16);
    assert_int_equal(rep.rows, (int)ac_cost_tables_row_count(t));
    assert_int_equal(ac_cost_tables_memory_count(t), (size_t)runs);
    for (size_t i = 0; i < (size_t)runs; i++) {
        const ac_memory_point *mp = ac_cost_tables_memory(t, i);
        assert_true(mp->measured > 0.9 * mp->weights);
        assert_true(mp->kv > 0 && mp->state > 0 && mp->activations > 0);
    }
    assert_true(isfinite(ac_cost_tables_get_info(t)->eps_bytes));
    /* the parent itself is in the space: its prediction sums its rows */
    ac_cost_prediction pred;
    assert_int_equal(ac_cost_predict_arch(m, &parent, &pred), AC_OK);
    assert_true(pred.latency_ms > 0 && pred.memory_bytes > pred.conventional_bytes);

    FILE *f = fopen(trace, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    text[size] = '\0';
    fclose(f);
    remove(trace);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    const cJSON *e;
    int slices = 0, processes = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(o, "traceEvents"))
    {
        slices += !strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X");
        processes += !strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "process_name");
    }
    assert_int_equal(processes, runs);
    /* the first request of each run: 5 steps, each with embedding, 9 layers, head and
     * sampling */
    assert_int_equal(slices, runs * 5 * (1 + 1 + 9 + 1 + 1));
    cJSON_Delete(o);
    free(text);

    ac_validate_params vp = ac_validate_default_params();
    vp.n = 3;
    vp.repeats = 2;
    vp.requests = requests;
    vp.progress = AC_PROGRESS_OFF;
    ac_validate_report vr;
    st = ac_cost_validate(MODEL, &c, t, &vp, &vr);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
    assert_int_equal(vr.n, 3);
    assert_float_equal(vr.requests_per_arch, 2.0 * (requests ? requests : AC_MAX_REQUESTS), 1e-9);
    /* every timed request, in time order: sweep 0 of every architecture, then sweep 1 */
    assert_int_equal(vr.n_samples, (size_t)lround(3 * vr.requests_per_arch));
    for (size_t i = 1; i < vr.n_samples; i++) {
        const ac_validate_sample *a = &vr.samples[i - 1], *b = &vr.samples[i];
        assert_true(b->sweep > a->sweep || (b->sweep == a->sweep && b->arch >= a->arch));
        assert_true(b->ms > 0 && b->reference_ms > 0);
    }
    char tsv[] = "/tmp/ac-samples-XXXXXX";
    int tfd = mkstemp(tsv);
    assert_true(tfd >= 0);
    close(tfd);
    assert_int_equal(ac_validate_write_samples(&vr, tsv), AC_OK);
    FILE *tf = fopen(tsv, "r");
    assert_non_null(tf);
    char line[256];
    size_t lines = 0;
    while (fgets(line, sizeof line, tf))
        lines++;
    fclose(tf);
    remove(tsv);
    assert_int_equal(lines, vr.n_samples + 1);
    for (int i = 0; i < vr.n; i++) {
        assert_true(vr.entries[i].latency_ms > 0);
        assert_true(vr.entries[i].memory_bytes > 0);
        assert_true(vr.entries[i].predicted.latency_ms > 0);
        assert_true(strlen(vr.entries[i].description) > 3);
    }
    assert_true(isfinite(vr.latency_mape) && isfinite(vr.memory_mape) && vr.conventional_memory_mape > 0);
    ac_validate_report_free(&vr);
    ac_cost_model_free(m);
    ac_arch_free(&parent);
    ac_cost_tables_free(t);
}

static void test_profile_fills_every_row(void **state)
{
    (void)state;
    check_profile(0, 0);
    check_profile(1, 2);
}

static void test_profile_refuses_what_it_cannot_measure(void **state)
{
    (void)state;
    ac_contract c;
    assert_int_equal(ac_contract_parse_string(contract_text, "tiny", &c), AC_OK);
    ac_profile_params p = ac_profile_default_params();
    p.progress = AC_PROGRESS_OFF;
    ac_cost_tables *t = NULL;
    ac_profile_report rep;
    assert_int_equal(ac_profile_run("/nonexistent/parent", &c, &p, &t, &rep), AC_ERR_IO);
    assert_non_null(strstr(ac_error_message(), "/nonexistent/parent"));
    p.repeats = 0;
    assert_int_equal(ac_profile_run(MODEL, &c, &p, &t, &rep), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "repeats"));
    p.repeats = 1;
    p.requests = AC_MAX_REQUESTS + 1;
    assert_int_equal(ac_profile_run(MODEL, &c, &p, &t, &rep), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "requests"));
    p.requests = 0;
    ac_validate_params vp = ac_validate_default_params();
    vp.requests = -1;
    ac_validate_report vr;
    assert_int_equal(ac_cost_validate(MODEL, &c, NULL, &vp, &vr), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "--requests"));
    c.hardware.kind = AC_DEVICE_CUDA;
    assert_int_equal(ac_profile_run(MODEL, &c, &p, &t, &rep), AC_ERR_UNSUPPORTED);
    assert_null(t);
}

/* A measurement times several requests in one process: all of them, or (min_seconds)
 * only until their total reaches the threshold; with a probe, the spans of every request
 * come back one request after the other. */
static void test_a_measurement_times_several_requests(void **state)
{
    (void)state;
    ac_arch arch;
    assert_int_equal(ac_config_json_read(MODEL "/config.json", &arch), AC_OK);
    /* 1 sequence, 4 input and 3 output tokens: prefill + 2 decode steps; each step has a
     * step span around embedding, 9 layers, head and sampling */
    size_t per_request = 3 * (1 + 1 + 9 + 1 + 1);
    ac_measure_job job = {.model_dir = MODEL, .seed = 1, .arch = &arch, .workload = {1, 0, 4, 3}, .threads = 1,
                          .repeats = 3, .warmup_steps = 1, .probe_capacity = per_request + 4};
    ac_measure_result res;
    ac_span *spans = NULL;
    ac_status st = ac_measure(&job, &res, &spans);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
    assert_int_equal(res.repeats, 3);
    assert_int_equal(res.n_spans, 3 * per_request);
    assert_int_equal(res.dropped, 0);
    for (int r = 0; r < 3; r++) {
        assert_true(res.seconds[r] > 0);
        const ac_span *first = &spans[(size_t)r * per_request], *last = &spans[(size_t)(r + 1) * per_request - 1];
        assert_int_equal(first->site.phase, AC_PHASE_PREFILL);
        assert_int_equal(last->site.kind, AC_SITE_STEP);
        assert_int_equal(last->site.step, 2);
        /* a request's spans all end by the end of its last step (one clock per request;
         * nothing here depends on how long anything took) */
        for (const ac_span *x = first; x < last; x++)
            assert_true(x->start_ns <= x->end_ns && x->end_ns <= last->end_ns);
    }
    free(spans);
    /* a threshold any request passes: one request */
    job.min_seconds = 1e-9;
    job.probe_capacity = 0;
    assert_int_equal(ac_measure(&job, &res, NULL), AC_OK);
    assert_int_equal(res.repeats, 1);
    /* one no request reaches: all of them */
    job.min_seconds = 1e6;
    assert_int_equal(ac_measure(&job, &res, NULL), AC_OK);
    assert_int_equal(res.repeats, 3);
    for (int r = 0; r < 3; r++)
        assert_true(res.reference_seconds[r] == 0);
    /* with the reference: a parent request after each, and nothing added to the memory
     * peak (the reference is built after it is read). Counted, it would add its weights;
     * the peak's own noise (pages, a sanitizer's allocator) stays far below a quarter. */
    double alone = res.measured_bytes;
    job.reference = 1;
    assert_int_equal(ac_measure(&job, &res, NULL), AC_OK);
    assert_int_equal(res.repeats, 3);
    for (int r = 0; r < 3; r++)
        assert_true(res.reference_seconds[r] > 0);
    double weights = (double)ac_arch_param_counts(&arch).total * sizeof(float);
    ac_arch_free(&arch);
    if (fabs(res.measured_bytes - alone) > 0.25 * weights)
        fail_msg("the reference moved the peak by %.0f bytes (alone %.0f, weights %.0f)", res.measured_bytes - alone,
                 alone, weights);
}

/* The slope within groups ignores the groups' levels: two groups on parallel lines of
 * slope 0.5 whose levels alone would give a pooled slope of about -1.2. */
static void test_within_slope_removes_each_groups_level(void **state)
{
    (void)state;
    double x[6] = {0, 1, 2, 5, 6, 7}, y[6];
    for (int i = 0; i < 6; i++)
        y[i] = (i < 3 ? 10.0 : -3.0) + 0.5 * x[i];
    size_t start[3] = {0, 3, 6};
    assert_float_equal(ac_stat_within_slope(x, y, start, 2), 0.5, 1e-12);
    double a, b;
    ac_stat_line(x, y, 6, &a, &b);
    assert_true(b < -1.0); /* what ignoring the groups would say */
    /* falling, clamped to 0; flat x: 1 (no information, the plain ratio) */
    for (int i = 0; i < 6; i++)
        y[i] = -x[i];
    assert_float_equal(ac_stat_within_slope(x, y, start, 2), 0.0, 0.0);
    double flat[6] = {3, 3, 3, 4, 4, 4};
    assert_float_equal(ac_stat_within_slope(flat, y, start, 2), 1.0, 0.0);
    /* the correction: (typical / level) (level / now)^slope; a whole measurement twice as
     * slow is halved whatever the slope, a request's own deviation by the slope */
    assert_float_equal(ac_speed_factor(0.1, 0.1, 0.4, 0.5), 0.5, 1e-12);
    assert_float_equal(ac_speed_factor(0.1, 0.2, 0.2, 0.5), 0.5, 1e-12);
    assert_float_equal(ac_speed_factor(0.1, 0.2, 0.8, 0.5), 0.25, 1e-12);
    assert_float_equal(ac_speed_factor(0.1, 0.1, 0.0, 0.5), 1.0, 0.0);
}

/* Slicing the parent to its own architecture copies every weight; a pruned layer keeps
 * the leading channels, heads (within each group), groups and experts of each tensor. */
static void test_slices_keep_the_leading_parts(void **state)
{
    (void)state;
    ac_model *parent = NULL, *same = NULL, *small = NULL;
    assert_int_equal(ac_load_parent(MODEL, 1, &parent), AC_OK);
    const ac_arch *pa = ac_model_arch(parent);
    assert_int_equal(ac_model_slice(parent, pa, NULL, 5, &same), AC_OK);
    size_t n1, n2;
    float *a1 = ac_model_arena(parent, &n1), *a2 = ac_model_arena(same, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a1, a2, n1 * sizeof *a1);
    /* hidden 48; layer 0 (Mamba) 4 heads; layer 3 (MoE) 4 experts of 16, shared 24 */
    ac_arch arch;
    assert_int_equal(ac_arch_copy(&arch, pa), AC_OK);
    arch.hidden = 48;
    ac_dims_mamba(&arch.layers[0], &pa->layers[0], 4);
    ac_dims_moe(&arch.layers[3], &pa->layers[3], 4, 16, 24);
    assert_int_equal(ac_model_slice(parent, &arch, NULL, 5, &small), AC_OK);
    const ac_param *pe = ac_model_find_param(parent, "embeddings.weight"), *se = ac_model_find_param(small, "embeddings.weight");
    assert_memory_equal(se->data + 5 * 48, pe->data + 5 * 64, 48 * sizeof(float));
    const ac_param *pu = ac_model_find_param(parent, "layers.3.mixer.experts.2.up_proj.weight");
    const ac_param *su = ac_model_find_param(small, "layers.3.mixer.experts.2.up_proj.weight");
    assert_int_equal(su->shape[0], 16);
    assert_int_equal(su->shape[1], 48);
    for (int r = 0; r < 16; r++)
        assert_memory_equal(su->data + r * 48, pu->data + r * 64, 48 * sizeof(float));
    /* in_proj rows: z | x | B | C | dt; with 4 of 8 heads (2 groups kept: 4 % 2 == 0),
     * heads kept within groups: child head 3 (group 1's second) is parent head 5 */
    const ac_block_dims *pb = &pa->layers[0];
    int P = pb->mamba_head_dim, N = pb->ssm_state, G = pb->mamba_groups, dIp = 8 * P, dIc = 4 * P;
    assert_int_equal(arch.layers[0].mamba_groups, G);
    const ac_param *pin = ac_model_find_param(parent, "layers.0.mixer.in_proj.weight");
    const ac_param *sin = ac_model_find_param(small, "layers.0.mixer.in_proj.weight");
    int rows[4][2] = {{dIc + 3, dIp + 3}, {2 * dIc + 1, 2 * dIp + 1}, {2 * dIc + G * N + 2, 2 * dIp + G * N + 2},
                      {2 * dIc + 2 * G * N + 3, 2 * dIp + 2 * G * N + 5}};
    assert_true(P > 3 && G == 2);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(sin->data + (size_t)rows[i][0] * 48, pin->data + (size_t)rows[i][1] * 64, 48 * sizeof(float));
    /* an MLP cut from a MoE layer is its shared expert */
    ac_dims_mlp(&arch.layers[3], &pa->layers[3], 24);
    ac_model_free(small);
    assert_int_equal(ac_model_slice(parent, &arch, NULL, 5, &small), AC_OK);
    const ac_param *ps = ac_model_find_param(parent, "layers.3.mixer.shared_experts.down_proj.weight");
    const ac_param *sm = ac_model_find_param(small, "layers.3.mixer.down_proj.weight");
    assert_non_null(sm);
    for (int r = 0; r < 48; r++)
        assert_memory_equal(sm->data + r * 24, ps->data + r * pa->layers[3].shared_ffn, 24 * sizeof(float));
    ac_arch_free(&arch);
    ac_model_free(small);
    ac_model_free(same);
    ac_model_free(parent);
}

/* Last: it leaves this process with an OpenMP thread pool, after which every forked
 * measurement hangs at its first parallel region; the parent must notice and say so. */
static void test_a_hung_child_is_reported(void **state)
{
    (void)state;
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) num_threads(2)
    for (int i = 0; i < 1000; i++)
        sum += i;
    assert_float_equal(sum, 499500.0, 0.0);
    ac_arch arch;
    assert_int_equal(ac_config_json_read(MODEL "/config.json", &arch), AC_OK);
    ac_measure_job job = {.model_dir = MODEL, .seed = 1, .arch = &arch, .workload = {1, 0, 4, 2}, .threads = 2,
                          .repeats = 1, .warmup_steps = 1};
    ac_measure_result res;
    ac_child_set_start_timeout(2);
    ac_status st = ac_measure(&job, &res, NULL);
    ac_child_set_start_timeout(0);
    ac_arch_free(&arch);
    if (st == AC_OK) /* a libgomp that survives fork: nothing to report */
        return;
    assert_int_equal(st, AC_ERR_INTERNAL);
    assert_non_null(strstr(ac_error_message(), "OpenMP"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_fills_every_row),
        cmocka_unit_test(test_profile_refuses_what_it_cannot_measure),
        cmocka_unit_test(test_a_measurement_times_several_requests),
        cmocka_unit_test(test_within_slope_removes_each_groups_level),
        cmocka_unit_test(test_slices_keep_the_leading_parts),
        cmocka_unit_test(test_a_hung_child_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
