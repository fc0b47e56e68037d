/* The MoE router kernel's launch shapes (kernels/cuda/moe_launch.h), checked on the CPU:
 * for every expert count up to the engine's limit and every group count that divides it,
 * a block's token slots fit the shared memory a launch may use without opting in, the
 * block is as large as that memory, the token cap and T allow, and the slot's three
 * arrays (scores, group scores, flags) fill the block's memory without overlapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "autocompress/arch.h"
#include "kernels/cuda/moe_launch.h"

static const int token_counts[] = {1, 2, 5, 63, 64, 65, 1000, 1 << 20};

/* Every block size within bounds and maximal. */
static void check_block(int T, int E, int n_group)
{
    int tokens = ac_moe_route_tokens_per_block(T, E, n_group);
    int cap = T < AC_MOE_ROUTE_MAX_TOKENS ? T : AC_MOE_ROUTE_MAX_TOKENS;
    assert_true(tokens >= 1);
    assert_true(tokens <= cap);
    assert_true(ac_moe_route_smem(tokens, E, n_group) <= AC_MOE_ROUTE_SMEM_MAX);
    if (tokens < cap)
        assert_true(ac_moe_route_smem(tokens + 1, E, n_group) > AC_MOE_ROUTE_SMEM_MAX);
}

static void test_blocks_fit_and_fill_shared_memory(void **state)
{
    (void)state;
    for (int E = 1; E <= AC_MAX_EXPERTS; E++)
        for (int n_group = 1; n_group <= E; n_group++) {
            if (E % n_group)
                continue;
            for (size_t k = 0; k < sizeof token_counts / sizeof *token_counts; k++)
                check_block(token_counts[k], E, n_group);
        }
}

/* The kernel's layout: E score floats per slot, then n_group group-score floats when
 * grouped (none ungrouped: the kernel never touches them), then E flag bytes per slot
 * (enough for the n_group <= E group flags too), ending exactly at the block's memory. */
static void test_slot_layout(void **state)
{
    (void)state;
    assert_int_equal(ac_moe_route_floats(128, 1), 128);
    assert_int_equal(ac_moe_route_floats(128, 8), 136);
    assert_int_equal(ac_moe_route_floats(4, 4), 8);
    for (int E = 1; E <= AC_MAX_EXPERTS; E++)
        for (int n_group = 1; n_group <= E; n_group *= 2) {
            int tokens = ac_moe_route_tokens_per_block(1 << 20, E, n_group);
            size_t flags = ac_moe_route_floats(E, n_group) * sizeof(float) * (size_t)tokens;
            assert_int_equal(flags + (size_t)E * (size_t)tokens, ac_moe_route_smem(tokens, E, n_group));
        }
}

/* The shapes of the models at hand and the worst case. */
static void test_known_shapes(void **state)
{
    (void)state;
    assert_int_equal(ac_moe_route_slot_bytes(128, 1), 640);
    assert_int_equal(ac_moe_route_tokens_per_block(4096, 128, 1), 64);
    assert_int_equal(ac_moe_route_tokens_per_block(3, 128, 1), 3);
    assert_int_equal(ac_moe_route_slot_bytes(1024, 1), 5120);
    assert_int_equal(ac_moe_route_tokens_per_block(4096, 1024, 1), 9);
    assert_int_equal(ac_moe_route_slot_bytes(1024, 1024), 9216);
    assert_int_equal(ac_moe_route_tokens_per_block(4096, 1024, 1024), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_fit_and_fill_shared_memory),
        cmocka_unit_test(test_slot_layout),
        cmocka_unit_test(test_known_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
