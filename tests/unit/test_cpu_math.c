/* The CPU kernels' vectorizable exp (kernels/cpu/cpu_math.h) against libm's double exp:
 * every 997th float of [-87, 88] within 3e-7 relative (the polynomial's remainder and
 * the rounding of its steps, 2.6e-7 at worst over every float of the range, measured),
 * the clamps it documents outside it, NaN kept, and the sigmoid built on it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_math.h"

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t to_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static void test_exp_within_range(void **state)
{
    (void)state;
    double worst = 0;
    float at = 0;
    long checked = 0;
    /* the bit patterns of [0, 88], then of [-87, -0]: magnitudes grow with the pattern */
    uint32_t first[2] = {to_bits(0.0f), to_bits(-0.0f)}, last[2] = {to_bits(88.0f), to_bits(-87.0f)};
    for (int side = 0; side < 2; side++)
        for (uint32_t u = first[side]; u <= last[side]; u += 997, checked++) {
            float x = from_bits(u);
            double want = exp((double)x), e = fabs(ac_cpu_expf(x) - want) / want;
            if (e > worst) {
                worst = e;
                at = x;
            }
        }
    assert_true(checked > 2000000);
    if (worst > 3e-7)
        fail_msg("exp: relative error %.3g at %.9g", worst, at);
}

static void test_exp_edges(void **state)
{
    (void)state;
    /* a NaN at run time (not folded): no undefined conversion or overflow on the way, which
     * the sanitizer build checks */
    volatile float nan_in = NAN;
    assert_true(isnan(ac_cpu_expf(nan_in)) && isnan(ac_cpu_sigmoid(nan_in)));
    assert_float_equal(ac_cpu_expf(0.0f), 1.0f, 0.0f);
    /* clamped: normal floats at both ends, never inf or a subnormal */
    float hi = ac_cpu_expf(INFINITY), lo = ac_cpu_expf(-INFINITY);
    assert_true(isfinite(hi) && fabs(hi - exp(88.0)) / exp(88.0) < 3e-7);
    assert_true(isnormal(lo) && fabs(lo - exp(-87.0)) / exp(-87.0) < 3e-7);
    assert_true(ac_cpu_expf(1000.0f) == hi && ac_cpu_expf(-1000.0f) == lo);
}

static void test_sigmoid(void **state)
{
    (void)state;
    for (float x = -30.0f; x <= 30.0f; x += 0.37f) {
        double want = 1.0 / (1.0 + exp(-(double)x));
        assert_true(fabs(ac_cpu_sigmoid(x) - want) <= 4e-7 * want);
    }
    assert_float_equal(ac_cpu_sigmoid(-INFINITY), 0.0f, 1e-37f);
    assert_float_equal(ac_cpu_sigmoid(INFINITY), 1.0f, 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_within_range),
        cmocka_unit_test(test_exp_edges),
        cmocka_unit_test(test_sigmoid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
