/* The CUPTI probe on a GPU (exit 77, a skip, with the reason, without one): the
 * profiler's serving loop (cost/serve.c) runs a request of a hybrid model on the CUDA
 * backend under the probe; for the prefill and every decode step, the device time of the
 * step's sites (embedding, layers, LM head, sampling) adds up to the step's own within
 * 5% (the probe attributed the step's work to its layers), every layer of every step has
 * time, and the steps' device time is within the request's wall time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocompress/model.h"
#include "cost/cost_internal.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"
#ifdef AC_HAVE_CUDA
#include "hybrid_model.h"
#include "probes/cupti/cupti_probe.h"

enum { V = 64, D = 32, L = 6, DECODE = 4 };

static ac_model *make_model(void)
{
    ac_block_dims dims = hybrid_small_dims();
    return hybrid_model(V, D, &dims, 3, 0.2f);
}

static int64_t span_ns(const ac_span *s) { return s->end_ns - s->start_ns; }

static void test_layers_add_up_to_steps(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_device(host, "cuda", &dev), AC_OK);
    ac_contract_workload w = {.batch = 2, .cached_tokens = 16, .input_tokens = 32, .output_tokens = DECODE + 1};
    float *snapshot = calloc(ac_server_snapshot_floats(&dev->arch, w.batch) + 1, sizeof *snapshot);
    ac_server *server;
    ac_probe *probe;
    assert_int_equal(ac_server_create(dev, &w, 1, snapshot, &server), AC_OK);
    assert_int_equal(ac_server_build_context(server), AC_OK);
    double seconds;
    assert_int_equal(ac_server_request(server, -1, &seconds), AC_OK); /* warm */
    assert_int_equal(ac_cupti_probe_create(&probe), AC_OK);
    ac_server_set_probe(server, probe);
    ac_probe_reset(probe);
    assert_int_equal(ac_server_request(server, -1, &seconds), AC_OK);
    const ac_span *spans;
    size_t n;
    assert_int_equal(ac_probe_collect(probe, &spans, &n), AC_OK);
    const ac_cupti_attribution *at = ac_cupti_probe_attribution(probe);
    printf("  %zu spans; unattributed %.3f ms\n", n, 1e-6 * (double)at->unattributed_ns);
    int steps = 0;
    double device_total = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].site.kind != AC_SITE_STEP)
            continue;
        int64_t parts = 0;
        int layers = 0;
        for (size_t j = 0; j < n; j++) {
            const ac_probe_site *s = &spans[j].site;
            if (j == i || s->phase != spans[i].site.phase || s->step != spans[i].site.step || s->kind == AC_SITE_STEP)
                continue;
            parts += span_ns(&spans[j]);
            if (s->layer >= 0) {
                layers++;
                assert_true(span_ns(&spans[j]) > 0);
            }
        }
        int64_t whole = span_ns(&spans[i]);
        printf("  %s step %d: %.3f ms, its sites %.3f ms\n", ac_phase_name(spans[i].site.phase), spans[i].site.step,
               1e-6 * (double)whole, 1e-6 * (double)parts);
        assert_int_equal(layers, L);
        assert_true(whole > 0);
        assert_true(fabs((double)(whole - parts)) <= 0.05 * (double)whole);
        device_total += 1e-9 * (double)whole;
        steps++;
    }
    assert_true(steps >= 1 + DECODE);
    assert_true(device_total <= seconds);
    ac_probe_free(probe);
    ac_server_free(server);
    free(snapshot);
    ac_model_free(dev);
    ac_model_free(host);
}

#endif

int main(void)
{
#ifndef AC_HAVE_CUDA
    printf("test_cupti_probe: skipped: this build has no CUDA\n");
    return 77;
#else
    char why[256];
    if (!ac_backend_select("cuda", why, sizeof why)) {
        printf("test_cupti_probe: skipped: %s\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers_add_up_to_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
