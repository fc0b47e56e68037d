/* The budget's learned multipliers and the router step, against hand computations: the
 * signed relative excess of each target, one projected dual-ascent step (a multiplier
 * never below 0, an unset target's held at 0), the Lagrangian's value and gradient
 * through given cost gradients, two steps of Adam with one shared second moment (the
 * step keeps the gradients' ratios, where per-logit AdamW moves every logit by about lr),
 * SGD, and the learning rate that follows the temperature. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "autocompress/search.h"
#include "search/search_loop.h"

/* latency 12 of 10 ms, memory 90 of 100 bytes, throughput 40 of at least 50 tok/s */
static const ac_budget_targets targets = {.latency_ms = 10, .throughput_tok_s = 50, .memory_bytes = 100};
static const ac_cost_prediction expected = {.latency_ms = 12, .throughput_tok_s = 40, .memory_bytes = 90};

static void test_excess_is_signed_and_relative(void **state)
{
    (void)state;
    double r[AC_BUDGET_TARGETS];
    ac_budget_excess(&targets, &expected, r);
    assert_float_equal(r[AC_BUDGET_LATENCY], 0.2, 1e-12);     /* (12 - 10) / 10 */
    assert_float_equal(r[AC_BUDGET_MEMORY], -0.1, 1e-12);     /* (90 - 100) / 100: under */
    assert_float_equal(r[AC_BUDGET_THROUGHPUT], 0.2, 1e-12);  /* (50 - 40) / 50: short */
    ac_budget_targets no_memory = targets;
    no_memory.memory_bytes = 0;
    ac_budget_excess(&no_memory, &expected, r);
    assert_true(r[AC_BUDGET_MEMORY] == 0.0);
}

static void test_dual_step_is_projected_ascent(void **state)
{
    (void)state;
    double lambda[AC_BUDGET_TARGETS] = {0.05, 0.03, 0.0};
    ac_budget_dual_step(&targets, &expected, 0.5, lambda);
    assert_float_equal(lambda[AC_BUDGET_LATENCY], 0.15, 1e-12);   /* 0.05 + 0.5 x 0.2 */
    assert_true(lambda[AC_BUDGET_MEMORY] == 0.0);                 /* 0.03 - 0.05, projected on 0 */
    assert_float_equal(lambda[AC_BUDGET_THROUGHPUT], 0.1, 1e-12); /* 0 + 0.5 x 0.2 */
    /* under the target a positive multiplier decays */
    lambda[AC_BUDGET_MEMORY] = 0.2;
    ac_budget_dual_step(&targets, &expected, 0.5, lambda);
    assert_float_equal(lambda[AC_BUDGET_MEMORY], 0.15, 1e-12);
    /* a target that is not set keeps a multiplier of 0 */
    ac_budget_targets no_latency = targets;
    no_latency.latency_ms = 0;
    lambda[AC_BUDGET_LATENCY] = 1.0;
    ac_budget_dual_step(&no_latency, &expected, 0.5, lambda);
    assert_true(lambda[AC_BUDGET_LATENCY] == 0.0);
}

static void test_lagrangian_value_and_gradient(void **state)
{
    (void)state;
    const double lambda[AC_BUDGET_TARGETS] = {2, 3, 4};
    const double d_lat[3] = {1, 0, 2}, d_mem[3] = {0, 5, 0}, d_thr[3] = {1, 1, 1};
    double dprobs[3] = {9, 9, 9}; /* overwritten */
    double loss = ac_budget_lagrangian(&targets, lambda, &expected, d_lat, d_mem, d_thr, 3, dprobs);
    assert_float_equal(loss, 2 * 0.2 + 3 * -0.1 + 4 * 0.2, 1e-12);
    /* lambda_k x dr_k/ds_k x ds_k/dp: dr/ds = 1/10 (latency), 1/100 (memory), -1/50 (throughput) */
    assert_float_equal(dprobs[0], 0.2 * 1 + 0.03 * 0 - 0.08 * 1, 1e-12);
    assert_float_equal(dprobs[1], 0.2 * 0 + 0.03 * 5 - 0.08 * 1, 1e-12);
    assert_float_equal(dprobs[2], 0.2 * 2 + 0.03 * 0 - 0.08 * 1, 1e-12);
    /* multipliers at 0: no loss, no gradient */
    const double zero[AC_BUDGET_TARGETS] = {0, 0, 0};
    assert_true(ac_budget_lagrangian(&targets, zero, &expected, d_lat, d_mem, d_thr, 3, dprobs) == 0.0);
    assert_true(dprobs[0] == 0.0 && dprobs[1] == 0.0 && dprobs[2] == 0.0);
}

/* Adam with beta1 0.9, beta2 0.99 and one second moment, the mean square of all the
 * gradients, worked by hand for lr 0.1:
 *   step 1, g = (0.3, -0.4, 0): v = 0.01 x 0.25 / 3, v^ = 0.25 / 3, m^ = g,
 *     logits = -0.1 g / sqrt(0.25 / 3) = (-0.103923045, 0.13856406, 0);
 *   step 2, g = (0.6, 0, 0): m = (0.087, -0.036, 0), v = 0.002025,
 *     logits -= 0.1 (m / 0.19) / sqrt(v / 0.0199) -> (-0.247465266, 0.197960841, 0). */
static void test_shared_adam_keeps_gradient_ratios(void **state)
{
    (void)state;
    float logits[3] = {0, 0, 0}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
    const float g1[3] = {0.3f, -0.4f, 0.0f}, g2[3] = {0.6f, 0.0f, 0.0f};
    ac_search_optim_step(AC_ROUTER_SHARED_ADAM, 3, logits, g1, m, v, 0.1f, 1);
    assert_float_equal(logits[0], -0.103923045, 1e-6);
    assert_float_equal(logits[1], 0.13856406, 1e-6);
    assert_true(logits[2] == 0.0f);
    /* the ratio of the steps is that of the gradients */
    assert_float_equal(logits[1] / logits[0], -0.4 / 0.3, 1e-5);
    ac_search_optim_step(AC_ROUTER_SHARED_ADAM, 3, logits, g2, m, v, 0.1f, 2);
    assert_float_equal(logits[0], -0.247465266, 1e-6);
    assert_float_equal(logits[1], 0.197960841, 1e-6);
    assert_float_equal(m[0], 0.087, 1e-7);
    for (int i = 0; i < 3; i++) /* the one moment, in every entry */
        assert_float_equal(v[i], 0.002025, 1e-9);
    /* per-logit AdamW's first step: every logit with a gradient moves by lr */
    float a[3] = {0, 0, 0}, am[3] = {0, 0, 0}, av[3] = {0, 0, 0};
    ac_search_optim_step(AC_ROUTER_ADAMW, 3, a, g1, am, av, 0.1f, 1);
    assert_float_equal(a[0], -0.1, 1e-5);
    assert_float_equal(a[1], 0.1, 1e-5);
}

static void test_sgd_and_the_lr_schedule(void **state)
{
    (void)state;
    float logits[2] = {1, 1}, m[2] = {0, 0}, v[2] = {0, 0};
    const float g[2] = {0.5f, -2.0f};
    ac_search_optim_step(AC_ROUTER_SGD, 2, logits, g, m, v, 0.1f, 1);
    assert_float_equal(logits[0], 0.95, 1e-7);
    assert_float_equal(logits[1], 1.2, 1e-7);
    ac_search_params p = ac_search_default_params();
    p.lr = 0.05f;
    p.temp_start = 2.0f;
    assert_float_equal(ac_search_router_lr(&p, 0.5f), 0.0125, 1e-9); /* 0.05 x 0.5 / 2 */
    p.lr_schedule = AC_LR_CONSTANT;
    assert_float_equal(ac_search_router_lr(&p, 0.5f), 0.05, 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_excess_is_signed_and_relative),
        cmocka_unit_test(test_dual_step_is_projected_ascent),
        cmocka_unit_test(test_lagrangian_value_and_gradient),
        cmocka_unit_test(test_shared_adam_keeps_gradient_ratios),
        cmocka_unit_test(test_sgd_and_the_lr_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
