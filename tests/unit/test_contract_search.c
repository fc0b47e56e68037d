/* hardware.memory_gib as the search sees it: ac_search_resolve_targets turns a contract
 * with no memory target of its own into one bounded by the device's memory, the search
 * plans `margin` inside it, and a contract's own smaller memory target stays. Expected
 * values are the contracts' numbers worked out here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "autocompress/contract.h"
#include "search/search_loop.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *contract_text =
    "name = \"m\"; hardware = { device = \"cpu\"; threads = 1; %s };\n"
    "workload = { batch = 1; input_tokens = 8; output_tokens = 4; };\n"
    "targets = { latency_ratio = 0.5; %s margin = 0.1; };\n"
    "search_space = { hidden_sizes = [16]; mamba_heads = { values = [4]; }; routed_experts = [4];\n"
    "  routed_ffn = [8]; shared_ffn = [8]; };\n";

static void parse(const char *hardware, const char *targets, ac_contract *c)
{
    char text[1024];
    snprintf(text, sizeof text, contract_text, hardware, targets);
    if (ac_contract_parse_string(text, "m", c) != AC_OK)
        fail_msg("%s", ac_error_message());
}

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-9 * fmax(1.0, fabs(want)))
        fail_msg("got %.12g, want %.12g", got, want);
}

static void test_device_memory_bounds_the_search(void **state)
{
    (void)state;
    /* the parent: 40 ms, 100 tok/s, 3 GiB */
    ac_cost_prediction parent = {.latency_ms = 40.0, .throughput_tok_s = 100.0, .memory_bytes = 3.0 * GIB};
    ac_contract c;
    ac_budget_targets t, planned;

    /* no memory target, a 2 GiB device: the search bounds memory by 2 GiB, plans 1.8 */
    parse("memory_gib = 2.0;", "", &c);
    assert_int_equal(ac_search_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.latency_ms, 20.0);
    assert_near(t.memory_bytes, 2.0 * GIB);
    planned = ac_search_planned_targets(&t, c.margin);
    assert_near(planned.memory_bytes, 0.9 * 2.0 * GIB);

    /* a memory target of 0.5 x 3 = 1.5 GiB inside the device's 2: the target holds */
    parse("memory_gib = 2.0;", "memory_ratio = 0.5;", &c);
    assert_int_equal(ac_search_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.memory_bytes, 1.5 * GIB);

    /* no device memory and no memory target: no memory bound (0) */
    parse("", "", &c);
    assert_int_equal(ac_search_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.memory_bytes, 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_memory_bounds_the_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
