/* The SLA policy on synthetic samples: a breach fires once it has lasted the window and
 * not a sample before; a sample back inside the bound ends the breach (the window starts
 * again), but only past the hysteresis margin; after a recompression starts, the cooldown
 * holds the next one back however long the breach lasts; a decision held back (a job
 * runs) is asked again one window later; lower bounds (throughput) and workload drift
 * work the same way; samples without requests are no evidence; the JSON shows the
 * limits and the decisions, newest first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/control.h"

static ac_sla_sample sample(double now, double p95)
{
    ac_sla_sample s = {.now = now, .p95_latency_ms = p95, .time_per_output_token_ms = -1, .throughput_tok_s = -1,
                       .memory_bytes = -1, .prompt_p50 = -1, .output_p50 = -1, .batch_p50 = -1, .requests = 3};
    return s;
}

static ac_sla_policy *latency_policy(double window, double hysteresis, double cooldown)
{
    ac_sla_config c = {.p95_latency_ms = 100, .window_s = window, .hysteresis = hysteresis, .cooldown_s = cooldown};
    ac_sla_policy *p = NULL;
    assert_int_equal(ac_sla_policy_create(&c, &p), AC_OK);
    return p;
}

/* Feeds one sample a second from t0 to t1 (inclusive) at p95; the first second it fired, or -1. */
static double feed(ac_sla_policy *p, double t0, double t1, double p95)
{
    char reason[256];
    for (double t = t0; t <= t1; t += 1) {
        ac_sla_sample s = sample(t, p95);
        if (ac_sla_policy_observe(p, &s, reason, sizeof reason))
            return t;
    }
    return -1;
}

static void test_fires_after_the_window_not_before(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(10, 0, 0);
    assert_true(feed(p, 0, 20, 90) < 0); /* inside the bound: never */
    assert_true(feed(p, 21, 30, 150) < 0); /* breached from 21: 9 s at 30 */
    char reason[256];
    ac_sla_sample s = sample(31, 150);
    assert_int_equal(ac_sla_policy_observe(p, &s, reason, sizeof reason), 1);
    assert_non_null(strstr(reason, "p95_latency_ms 150"));
    assert_non_null(strstr(reason, "for 10 s"));
    ac_sla_policy_free(p);
}

static void test_a_sample_inside_restarts_the_window(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(10, 0, 0);
    assert_true(feed(p, 0, 8, 150) < 0);
    assert_true(feed(p, 9, 9, 80) < 0); /* back inside: the breach ends */
    assert_true(feed(p, 10, 19, 150) < 0);
    assert_true(feed(p, 20, 20, 150) == 20); /* 10 s after 10 */
    ac_sla_policy_free(p);
}

static void test_hysteresis(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(10, 0.2, 0);
    assert_true(feed(p, 0, 5, 150) < 0);
    assert_true(feed(p, 6, 8, 95) < 0);      /* inside the bound but not by 20%: still breached */
    assert_true(feed(p, 9, 10, 150) == 10); /* so it fires 10 s after 0 */
    ac_sla_policy_free(p);

    p = latency_policy(10, 0.2, 0);
    assert_true(feed(p, 0, 5, 150) < 0);
    assert_true(feed(p, 6, 6, 79) < 0);      /* 21% under: clear */
    assert_true(feed(p, 7, 15, 150) < 0);    /* a new breach from 7 */
    assert_true(feed(p, 16, 17, 150) == 17);
    ac_sla_policy_free(p);
}

static void test_cooldown(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(5, 0, 60);
    assert_true(feed(p, 0, 5, 150) == 5);
    ac_sla_policy_started(p, 5, 1, "job-0001");
    assert_true(feed(p, 6, 64, 150) < 0); /* breached throughout, but cooling down */
    assert_true(feed(p, 65, 65, 150) == 65);
    ac_sla_policy_free(p);
}

static void test_held_back_asks_again_a_window_later(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(5, 0, 600);
    assert_true(feed(p, 0, 5, 150) == 5);
    ac_sla_policy_started(p, 5, 0, "held back: job-0001 runs");
    assert_true(feed(p, 6, 9, 150) < 0);
    assert_true(feed(p, 10, 10, 150) == 10); /* no cooldown: nothing was started */
    ac_sla_policy_free(p);
}

static void test_throughput_and_drift(void **state)
{
    (void)state;
    ac_sla_config c = {.min_throughput_tok_s = 50, .window_s = 3, .hysteresis = 0.1};
    ac_sla_policy *p = NULL;
    assert_int_equal(ac_sla_policy_create(&c, &p), AC_OK);
    char reason[256];
    int fired = 0;
    for (int t = 0; t <= 3; t++) {
        ac_sla_sample s = sample(t, -1);
        s.throughput_tok_s = 40;
        fired = ac_sla_policy_observe(p, &s, reason, sizeof reason);
        assert_int_equal(fired, t == 3);
    }
    assert_non_null(strstr(reason, "throughput_tok_s 40 under the bound 50"));
    ac_sla_policy_free(p);

    ac_sla_config d = {.workload_drift = 0.5, .contract_prompt = 256, .contract_output = 32, .contract_batch = 1,
                       .window_s = 2};
    assert_int_equal(ac_sla_policy_create(&d, &p), AC_OK);
    for (int t = 0; t <= 2; t++) {
        ac_sla_sample s = sample(t, -1);
        s.prompt_p50 = 300; /* 17% off: fine */
        s.output_p50 = 32;
        s.batch_p50 = 1;
        assert_int_equal(ac_sla_policy_observe(p, &s, reason, sizeof reason), 0);
    }
    for (int t = 3; t <= 5; t++) {
        ac_sla_sample s = sample(t, -1);
        s.prompt_p50 = 100; /* 61% off */
        s.output_p50 = 32;
        s.batch_p50 = 1;
        assert_int_equal(ac_sla_policy_observe(p, &s, reason, sizeof reason), t == 5);
    }
    assert_non_null(strstr(reason, "prompt_drift"));
    ac_sla_policy_free(p);
}

static void test_empty_samples_are_no_evidence(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(5, 0, 0);
    assert_true(feed(p, 0, 3, 150) < 0);
    char reason[256];
    for (int t = 4; t <= 20; t++) { /* idle: the breach neither ends nor fires */
        ac_sla_sample s = sample(t, 80);
        s.requests = 0;
        assert_int_equal(ac_sla_policy_observe(p, &s, reason, sizeof reason), 0);
    }
    assert_true(feed(p, 21, 21, 150) == 21);
    ac_sla_policy_free(p);
}

static void test_json(void **state)
{
    (void)state;
    ac_sla_policy *p = latency_policy(5, 0, 60);
    assert_true(feed(p, 0, 5, 150) == 5);
    ac_sla_policy_started(p, 5, 1, "first");
    ac_sla_policy_started(p, 6, 0, "second");
    char *text = ac_sla_policy_json(p);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "enabled")));
    const cJSON *limits = cJSON_GetObjectItem(o, "limits");
    assert_int_equal(cJSON_GetArraySize(limits), 1); /* only the limits set */
    const cJSON *l = cJSON_GetArrayItem(limits, 0);
    assert_string_equal(cJSON_GetObjectItem(l, "name")->valuestring, "p95_latency_ms");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(l, "breached")));
    assert_true(cJSON_GetObjectItem(l, "value")->valuedouble == 150);
    const cJSON *d = cJSON_GetObjectItem(o, "decisions");
    assert_int_equal(cJSON_GetArraySize(d), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 0), "reason")->valuestring, "second");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 1), "started")));
    assert_true(cJSON_GetObjectItem(o, "cooldown_left_s")->valuedouble == 60);
    cJSON_Delete(o);
    free(text);
    ac_sla_policy_free(p);
}

static void test_bad_config(void **state)
{
    (void)state;
    ac_sla_config c = {.p95_latency_ms = 100, .window_s = 10, .hysteresis = 1.5};
    ac_sla_policy *p = NULL;
    assert_int_equal(ac_sla_policy_create(&c, &p), AC_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(ac_error_message(), "hysteresis"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fires_after_the_window_not_before),
        cmocka_unit_test(test_a_sample_inside_restarts_the_window),
        cmocka_unit_test(test_hysteresis),
        cmocka_unit_test(test_cooldown),
        cmocka_unit_test(test_held_back_asks_again_a_window_later),
        cmocka_unit_test(test_throughput_and_drift),
        cmocka_unit_test(test_empty_samples_are_no_evidence),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
