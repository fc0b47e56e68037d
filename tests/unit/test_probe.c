/* The probe interface and the CPU probe: span bookkeeping (nesting, capacity, reset,
 * memory peaks), the runtime's layer boundaries (one span per block, embedding and LM
 * head, in order, nested in the caller's step; logits unchanged by probing), thread
 * counts, and the Chrome trace export. Nothing here depends on how long anything takes:
 * only on the order and containment of the clock readings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/host.h"
#include "autocompress/model.h"
#include "autocompress/probe.h"
#include "autocompress/runtime.h"
#include "autocompress/trace.h"

#define FIXTURES AC_SOURCE_DIR "/tests/fixtures/nemotron_h"

static void test_spans_nest_and_keep_their_sites(void **state)
{
    (void)state;
    ac_probe *p = NULL;
    assert_int_equal(ac_cpu_probe_create(8, &p), AC_OK);
    ac_probe_set_phase(p, AC_PHASE_DECODE, 7);
    ac_probe_begin(p, -1, AC_SITE_STEP);
    ac_probe_begin(p, 3, AC_SITE_MOE);
    ac_probe_end(p, 3, AC_SITE_MOE);
    ac_probe_begin(p, 4, AC_SITE_MAMBA);
    ac_probe_end(p, 4, AC_SITE_MAMBA);
    ac_probe_end(p, -1, AC_SITE_STEP);
    ac_probe_end(p, 9, AC_SITE_MLP); /* an end without a begin records nothing */
    const ac_span *s = NULL;
    size_t n = 0;
    assert_int_equal(ac_probe_collect(p, &s, &n), AC_OK);
    assert_int_equal(n, 3);
    /* recorded at their end: the inner spans first, then the step around them */
    assert_int_equal(s[0].site.kind, AC_SITE_MOE);
    assert_int_equal(s[0].site.layer, 3);
    assert_int_equal(s[1].site.kind, AC_SITE_MAMBA);
    assert_int_equal(s[2].site.kind, AC_SITE_STEP);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s[i].site.phase, AC_PHASE_DECODE);
        assert_int_equal(s[i].site.step, 7);
        assert_true(s[i].end_ns >= s[i].start_ns);
    }
    assert_true(s[0].end_ns <= s[1].start_ns);
    assert_true(s[2].start_ns <= s[0].start_ns && s[2].end_ns >= s[1].end_ns);
    ac_probe_reset(p);
    assert_int_equal(ac_probe_collect(p, &s, &n), AC_OK);
    assert_int_equal(n, 0);
    ac_probe_free(p);
}

static void test_full_buffer_counts_dropped_spans(void **state)
{
    (void)state;
    ac_probe *p = NULL;
    assert_int_equal(ac_cpu_probe_create(2, &p), AC_OK);
    for (int i = 0; i < 5; i++) {
        ac_probe_begin(p, i, AC_SITE_ATTENTION);
        ac_probe_end(p, i, AC_SITE_ATTENTION);
    }
    const ac_span *s = NULL;
    size_t n = 0;
    assert_int_equal(ac_probe_collect(p, &s, &n), AC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s[1].site.layer, 1);
    assert_int_equal(ac_cpu_probe_dropped(p), 3);
    ac_probe_reset(p);
    assert_int_equal(ac_cpu_probe_dropped(p), 0);
    ac_probe_free(p);
    ac_probe_free(NULL);
}

static void test_memory_peak_is_elementwise(void **state)
{
    (void)state;
    ac_probe *p = NULL;
    assert_int_equal(ac_cpu_probe_create(1, &p), AC_OK);
    ac_memory_sample a = {10, 200, 3, 40, 1000}, b = {20, 100, 5, 30, 900};
    ac_probe_memory(p, &a);
    ac_probe_memory(p, &b);
    ac_memory_sample m = ac_cpu_probe_memory_peak(p);
    assert_int_equal(m.weights, 20);
    assert_int_equal(m.kv_cache, 200);
    assert_int_equal(m.state, 5);
    assert_int_equal(m.activations, 40);
    assert_int_equal(m.resident, 1000);
    ac_probe_free(p);
    assert_true(ac_cpu_resident_bytes() > 0);
    assert_true(ac_cpu_peak_resident_bytes() >= ac_cpu_resident_bytes() / 2);
}

/* A probe that only counts calls: the interface works with any implementation. */
typedef struct {
    int begins, ends, memories;
} counting;
static void count_begin(void *s, const ac_probe_site *site) { (void)site, ((counting *)s)->begins++; }
static void count_end(void *s, const ac_probe_site *site) { (void)site, ((counting *)s)->ends++; }

static void test_a_second_implementation_plugs_in(void **state)
{
    (void)state;
    static const ac_probe_ops ops = {.begin = count_begin, .end = count_end};
    counting c = {0, 0, 0};
    ac_probe p = {&ops, &c, AC_PHASE_PREFILL, 0};
    ac_probe_begin(&p, 0, AC_SITE_MAMBA);
    ac_probe_end(&p, 0, AC_SITE_MAMBA);
    ac_memory_sample m = {0};
    ac_probe_memory(&p, &m); /* optional callbacks may be absent */
    ac_probe_reset(&p);
    const ac_span *s;
    size_t n;
    assert_int_equal(ac_probe_collect(&p, &s, &n), AC_ERR_UNSUPPORTED);
    assert_int_equal(c.begins, 1);
    assert_int_equal(c.ends, 1);
}

static void run_forward(ac_model *m, ac_probe *probe, const int32_t *ids, int n, float *logits)
{
    ac_runtime *rt = NULL;
    ac_cache *cache = NULL;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &cache), AC_OK);
    ac_runtime_set_probe(rt, probe);
    const int32_t *tokens[1] = {ids};
    int counts[1] = {n};
    ac_cache *caches[1] = {cache};
    ac_batch b = {1, tokens, counts, caches};
    if (probe) {
        ac_probe_set_phase(probe, AC_PHASE_PREFILL, 0);
        ac_probe_begin(probe, -1, AC_SITE_STEP);
    }
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_OK);
    if (probe) {
        ac_probe_end(probe, -1, AC_SITE_STEP);
        ac_probe_set_phase(probe, AC_PHASE_DECODE, 1);
    }
    counts[0] = 1;
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_OK);
    ac_cache_free(cache);
    ac_runtime_free(rt);
}

static void test_runtime_marks_every_layer(void **state)
{
    (void)state;
    ac_model *m = NULL;
    assert_int_equal(ac_model_load(FIXTURES "/hybrid_f32", &m), AC_OK);
    const ac_arch *a = ac_model_arch(m);
    int32_t ids[6] = {3, 1, 4, 1, 5, 9};
    float *plain = malloc((size_t)a->vocab * sizeof *plain), *probed = malloc((size_t)a->vocab * sizeof *probed);
    run_forward(m, NULL, ids, 6, plain);
    ac_probe *p = NULL;
    assert_int_equal(ac_cpu_probe_create(1024, &p), AC_OK);
    run_forward(m, p, ids, 6, probed);
    assert_memory_equal(plain, probed, (size_t)a->vocab * sizeof *plain);
    const ac_span *s = NULL;
    size_t n = 0;
    assert_int_equal(ac_probe_collect(p, &s, &n), AC_OK);
    /* two forwards of embedding + layers + head, and the prefill's step */
    size_t per = (size_t)a->n_layers + 2;
    assert_int_equal(n, 2 * per + 1);
    for (int call = 0; call < 2; call++) {
        const ac_span *c = s + call * (per + 1);
        ac_phase phase = call == 0 ? AC_PHASE_PREFILL : AC_PHASE_DECODE;
        assert_int_equal(c[0].site.kind, AC_SITE_EMBEDDING);
        for (int i = 0; i < a->n_layers; i++) {
            assert_int_equal(c[1 + i].site.layer, i);
            assert_int_equal((int)c[1 + i].site.kind, (int)a->layers[i].kind);
            assert_int_equal(c[1 + i].site.phase, phase);
            assert_true(c[1 + i].start_ns >= c[i].end_ns); /* in order, not overlapping */
        }
        assert_int_equal(c[per - 1].site.kind, AC_SITE_LM_HEAD);
        assert_int_equal(c[per - 1].site.step, call == 0 ? 0 : 1);
        if (call == 0) { /* the caller's step holds the whole forward */
            assert_int_equal(c[per].site.kind, AC_SITE_STEP);
            assert_true(c[per].start_ns <= c[0].start_ns && c[per].end_ns >= c[per - 1].end_ns);
        }
    }
    ac_probe_free(p);
    free(plain);
    free(probed);
    ac_model_free(m);
}

static void test_thread_counts_follow_the_contract(void **state)
{
    (void)state;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int clamped = -1;
    assert_int_equal(ac_cpu_threads_for(0, &clamped), (int)cores);
    assert_int_equal(clamped, 0);
    assert_int_equal(ac_cpu_threads_for(1, &clamped), 1);
    assert_int_equal(ac_cpu_threads_for((int)cores + 3, &clamped), (int)cores);
    assert_int_equal(clamped, 1);
}

static void test_chrome_trace_has_a_track_per_kind(void **state)
{
    (void)state;
    ac_span spans[4] = {
        {{AC_PHASE_PREFILL, 0, 0, AC_SITE_MAMBA}, 100, 2100},
        {{AC_PHASE_PREFILL, 0, 1, AC_SITE_MOE}, 2100, 5100},
        {{AC_PHASE_PREFILL, 0, -1, AC_SITE_STEP}, 0, 6000},
        {{AC_PHASE_DECODE, 1, -1, AC_SITE_STEP}, 7000, 8000},
    };
    const char *labels[2] = {"L0 mamba H8", "L1 moe \"E8\""};
    ac_trace_run runs[2] = {{"run 0", spans, 4, labels, 2}, {"run 1", spans, 2, NULL, 0}};
    char path[] = "/tmp/ac-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ac_trace_write_chrome(path, runs, 2), AC_OK);
    FILE *f = fopen(path, "r");
    char *text = calloc(1 << 16, 1);
    size_t len = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    remove(path);
    assert_true(len > 0);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    const cJSON *events = cJSON_GetObjectItem(o, "traceEvents"), *e;
    int slices = 0, threads = 0, moe_track = -1, steps_track = -1;
    double run1_start = -1, run0_end = 0;
    cJSON_ArrayForEach(e, events)
    {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring, *name = cJSON_GetObjectItem(e, "name")->valuestring;
        int pid = cJSON_GetObjectItem(e, "pid")->valueint;
        if (!strcmp(ph, "M") && !strcmp(name, "thread_name") && pid == 1) {
            threads++;
            const char *tname = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")->valuestring;
            if (!strcmp(tname, "moe"))
                moe_track = cJSON_GetObjectItem(e, "tid")->valueint;
            if (!strcmp(tname, "steps"))
                steps_track = cJSON_GetObjectItem(e, "tid")->valueint;
        }
        if (!strcmp(ph, "X")) {
            slices++;
            double ts = cJSON_GetObjectItem(e, "ts")->valuedouble, dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
            int tid = cJSON_GetObjectItem(e, "tid")->valueint;
            if (pid == 1 && !strcmp(name, "L1 moe \"E8\"")) {
                assert_int_equal(tid, moe_track);
                assert_float_equal(dur, 3.0, 1e-9);
                assert_float_equal(ts, 2.1, 1e-9); /* relative to the run's first span */
            }
            if (pid == 1 && !strcmp(name, "decode 1"))
                assert_int_equal(tid, steps_track);
            if (pid == 1 && ts + dur > run0_end)
                run0_end = ts + dur;
            if (pid == 2 && (run1_start < 0 || ts < run1_start))
                run1_start = ts;
        }
    }
    assert_int_equal(threads, 1 + AC_SITE_STEP); /* steps + one per site kind */
    assert_true(moe_track >= 0 && steps_track >= 0 && moe_track != steps_track);
    assert_int_equal(slices, 6);
    assert_true(run1_start > run0_end); /* runs follow each other */
    cJSON_Delete(o);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spans_nest_and_keep_their_sites),
        cmocka_unit_test(test_full_buffer_counts_dropped_spans),
        cmocka_unit_test(test_memory_peak_is_elementwise),
        cmocka_unit_test(test_a_second_implementation_plugs_in),
        cmocka_unit_test(test_runtime_marks_every_layer),
        cmocka_unit_test(test_thread_counts_follow_the_contract),
        cmocka_unit_test(test_chrome_trace_has_a_track_per_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
