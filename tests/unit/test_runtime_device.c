/* The runtime on a backend whose memory the host cannot touch (guarded_backend.h): a
 * model copied there, its caches and the runtime's buffers all in that memory, prefills
 * two sequences of a hybrid model (Mamba2, attention, MLP, MoE; one prompt longer than
 * the KV cache's first capacity, so the cache grows and copies), decodes three steps of
 * both and one of the first alone (a one-token batch takes the MoE's matrix-vector path).
 * Any host read or write of that memory stops the test with SIGSEGV; the logits must be
 * the CPU's, bit for bit (the ops are the CPU's). Also: the Mamba state saved and
 * restored through it, copies between the host and the device, saving from the device,
 * the profiler's serving loop (a context, then requests restored from its snapshot),
 * and ac_model_to_device's errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "cost/cost_internal.h"
#include "guarded_backend.h"
#include "hybrid_model.h"
#include "model/model_internal.h"
#ifdef AC_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

enum { V = 40, D = 16, L = 6, PROMPT0 = 70, PROMPT1 = 5, STEPS = 3 };

static ac_model *make_model(void)
{
    ac_block_dims dims = hybrid_tiny_dims();
    return hybrid_model(V, D, &dims, 5, 0.3f);
}

/* Prefill logits (every row of both prompts) then each decode step's last logits. */
static size_t logits_count(void) { return (size_t)(PROMPT0 + PROMPT1 + 2 * STEPS + 1) * V; }

static void run(const ac_model *m, float *logits)
{
    int32_t p0[PROMPT0], p1[PROMPT1];
    for (int t = 0; t < PROMPT0; t++)
        p0[t] = (t * 7 + 3) % V;
    for (int t = 0; t < PROMPT1; t++)
        p1[t] = (t * 11 + 1) % V;
    ac_runtime *rt;
    ac_cache *c[2];
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c[0]), AC_OK);
    assert_int_equal(ac_cache_create(m, &c[1]), AC_OK);
    const int32_t *prompts[2] = {p0, p1};
    int n[2] = {PROMPT0, PROMPT1};
    ac_batch b = {.n_seqs = 2, .tokens = prompts, .n_tokens = n, .caches = c};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_ALL, logits), AC_OK);
    logits += (size_t)(PROMPT0 + PROMPT1) * V;
    for (int s = 0; s < STEPS; s++) {
        int32_t next[2] = {(s * 5 + 2) % V, (s * 3 + 9) % V};
        const int32_t *one[2] = {&next[0], &next[1]};
        int ones[2] = {1, 1};
        ac_batch d = {.n_seqs = 2, .tokens = one, .n_tokens = ones, .caches = c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, logits), AC_OK);
        logits += 2 * V;
    }
    int32_t last = 17;
    const int32_t *alone[1] = {&last};
    int one[1] = {1};
    ac_batch d = {.n_seqs = 1, .tokens = alone, .n_tokens = one, .caches = c};
    assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, logits), AC_OK);
    assert_int_equal(ac_cache_tokens(c[0]), PROMPT0 + STEPS + 1);
    ac_cache_free(c[0]);
    ac_cache_free(c[1]);
    ac_runtime_free(rt);
}

static void test_guarded_runtime_equals_cpu(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    assert_string_equal(ac_model_device(dev), "guarded");
    float *want = malloc(logits_count() * sizeof *want), *got = malloc(logits_count() * sizeof *got);
    assert_true(want && got);
    run(host, want);
    run(dev, got);
    assert_memory_equal(want, got, logits_count() * sizeof *want);
    assert_int_equal(guarded_count, 1); /* every buffer freed but the weights */
    ac_model_free(dev);
    assert_int_equal(guarded_count, 0);
    free(want);
    free(got);
    ac_model_free(host);
}

/* The state a cache saves from device memory restores into another cache there. */
static void test_guarded_state_round_trip(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    ac_runtime *rt;
    ac_cache *a, *b;
    assert_int_equal(ac_runtime_create(dev, &rt), AC_OK);
    assert_int_equal(ac_cache_create(dev, &a), AC_OK);
    assert_int_equal(ac_cache_create(dev, &b), AC_OK);
    int32_t tok[4] = {1, 2, 3, 4};
    const int32_t *seq[1] = {tok};
    int n[1] = {4};
    ac_batch fill = {.n_seqs = 1, .tokens = seq, .n_tokens = n, .caches = &a};
    assert_int_equal(ac_runtime_forward(rt, &fill, AC_LOGITS_NONE, NULL), AC_OK);
    size_t bytes = ac_cache_state_bytes(a);
    float *saved = malloc(bytes), *again = malloc(bytes);
    assert_true(saved && again);
    ac_cache_save_state(a, saved);
    float any = 0.0f;
    for (size_t i = 0; i < bytes / sizeof *saved; i++)
        any += saved[i] * saved[i];
    assert_true(any > 0.0f); /* the prompt moved the state */
    ac_cache_restore_state(b, saved, 4);
    ac_cache_save_state(b, again);
    assert_memory_equal(saved, again, bytes);
    assert_int_equal(ac_cache_tokens(b), 4);
    free(saved);
    free(again);
    ac_cache_free(a);
    ac_cache_free(b);
    ac_runtime_free(rt);
    ac_model_free(dev);
    ac_model_free(host);
}

/* A device that reports a failure once armed (as a kernel that could not launch would). */
static int failure_armed;

static const char *failing_take_error(void)
{
    if (!failure_armed)
        return NULL;
    failure_armed = 0;
    return "cuda: attention: an illegal memory access was encountered";
}

/* A failure the device reports during a forward comes back as AC_ERR_DEVICE naming it,
 * and the next forward runs. */
static void test_device_failure_is_reported(void **state)
{
    (void)state;
    static ac_backend failing;
    failing = guarded_backend;
    failing.name = "failing";
    failing.take_error = failing_take_error;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, &failing, &dev), AC_OK);
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(dev, &rt), AC_OK);
    assert_int_equal(ac_cache_create(dev, &c), AC_OK);
    int32_t tok[3] = {1, 2, 3};
    const int32_t *seq[1] = {tok};
    int n[1] = {3};
    float logits[V];
    ac_batch b = {.n_seqs = 1, .tokens = seq, .n_tokens = n, .caches = &c};
    failure_armed = 1;
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_ERR_DEVICE);
    assert_non_null(strstr(ac_error_message(), "forward: cuda: attention: an illegal memory access"));
    ac_cache_clear(c);
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_OK);
    ac_cache_free(c);
    ac_runtime_free(rt);
    ac_model_free(dev);
    ac_model_free(host);
}

static void test_device_errors(void **state)
{
    (void)state;
    /* a backend added by name is found by it; a taken name is refused */
    assert_int_equal(ac_backend_register(&guarded_backend), AC_OK);
    assert_ptr_equal(ac_backend_find("guarded"), &guarded_backend);
    assert_int_equal(ac_backend_register(&guarded_backend), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "\"guarded\" is taken"));
    assert_int_equal(ac_backend_register(&ac_cpu_backend), AC_ERR_INVALID);
    ac_model *host = make_model(), *copy;
    assert_int_equal(ac_model_to_device(host, "tpu", &copy), AC_ERR_UNSUPPORTED);
    assert_non_null(strstr(ac_error_message(), "\"tpu\""));
    assert_non_null(strstr(ac_error_message(), "not in this build"));
#ifdef AC_HAVE_CUDA
    const char *why = ac_cuda_backend.unavailable();
    if (why) {
        assert_int_equal(ac_model_to_device(host, "cuda", &copy), AC_ERR_UNSUPPORTED);
        assert_non_null(strstr(ac_error_message(), why));
    }
#else
    assert_int_equal(ac_model_to_device(host, "cuda", &copy), AC_ERR_UNSUPPORTED);
    assert_non_null(strstr(ac_error_message(), "not in this build"));
#endif
    ac_model *dev, *sliced;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    assert_int_equal(ac_model_slice(dev, &dev->arch, NULL, 1, &sliced), AC_ERR_UNSUPPORTED);
    assert_non_null(strstr(ac_error_message(), "slicing needs the weights in host memory"));
    ac_model_free(dev);
    /* "cpu" is a host copy */
    assert_int_equal(ac_model_to_device(host, "cpu", &copy), AC_OK);
    assert_string_equal(ac_model_device(copy), "cpu");
    assert_memory_equal(ac_model_param(copy, 3)->data, ac_model_param(host, 3)->data,
                        ac_model_param(host, 3)->count * sizeof(float));
    ac_model_free(copy);
    ac_model_free(host);
}

/* host -> device -> device -> host keeps every weight; a model on a device saves (through
 * the host) to a checkpoint that loads back the same. */
static void test_device_copies(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev, *dev2, *back, *loaded;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    assert_int_equal(ac_model_to_backend(dev, &guarded_backend, &dev2), AC_OK);
    assert_int_equal(ac_model_to_backend(dev2, NULL, &back), AC_OK);
    assert_string_equal(ac_model_device(back), "cpu");
    size_t n, m;
    const float *want = ac_model_arena(host, &n), *got = ac_model_arena(back, &m);
    assert_int_equal(n, m);
    assert_memory_equal(want, got, n * sizeof *want);
    char dir[] = "/tmp/ac_device_saveXXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(ac_model_save(dev2, dir, AC_DTYPE_F32), AC_OK);
    assert_int_equal(ac_model_load(dir, &loaded), AC_OK);
    assert_memory_equal(want, ac_model_arena(loaded, &m), n * sizeof *want);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    ac_model_free(loaded);
    ac_model_free(back);
    ac_model_free(dev2);
    ac_model_free(dev);
    ac_model_free(host);
}

/* What a measurement runs (cost/serve.c): the same requests on the device as on the CPU,
 * with the same memory accounting. */
static void serve_workload(const ac_model *m, ac_memory_sample *memory)
{
    ac_contract_workload w = {.batch = 2, .cached_tokens = 7, .input_tokens = 5, .output_tokens = 4};
    float *snapshot = calloc(ac_server_snapshot_floats(&m->arch, w.batch) + 1, sizeof *snapshot);
    assert_non_null(snapshot);
    ac_server *server;
    assert_int_equal(ac_server_create(m, &w, 9, snapshot, &server), AC_OK);
    assert_int_equal(ac_server_build_context(server), AC_OK);
    double seconds;
    for (int r = 0; r < 2; r++)
        assert_int_equal(ac_server_request(server, -1, &seconds), AC_OK);
    *memory = ac_server_memory(server);
    ac_server_free(server);
    free(snapshot);
}

static void test_guarded_measurement_server(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    ac_memory_sample want, got;
    serve_workload(host, &want);
    serve_workload(dev, &got);
    assert_true(want.kv_cache > 0 && want.activations > 0);
    assert_true(want.kv_cache == got.kv_cache && want.state == got.state);
    /* on the device the runtime also holds the logits it copies out: the batch's rows */
    assert_true(got.activations == want.activations + 2 * V * sizeof(float));
    ac_model_free(dev);
    ac_model_free(host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guarded_runtime_equals_cpu),
        cmocka_unit_test(test_guarded_state_round_trip),
        cmocka_unit_test(test_device_errors),
        cmocka_unit_test(test_device_failure_is_reported),
        cmocka_unit_test(test_device_copies),
        cmocka_unit_test(test_guarded_measurement_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
