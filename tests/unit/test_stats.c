/* util/stats: the median and spread against values worked by hand, and the bootstrap
 * interval of a mean: zero width on constant values, the same interval from the same
 * seed, near the normal approximation on many values, and bad arguments refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autocompress/status.h"
#include "util/stats.h"

static void test_median_and_spread(void **state)
{
    (void)state;
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
    assert_true(ac_stat_median(odd, 3) == 3.0);
    assert_true(ac_stat_median(even, 4) == 2.5);
    double v[] = {1, 2, 3, 4, 100}; /* deviations from 3: 2 1 0 1 97, their median 1 */
    assert_true(fabs(ac_stat_spread(v, 5) - 1.4826) < 1e-12);
}

/* Right-skewed times, as a decode step's are: the mean sits above the median, and a sum
 * of such times is the sum of the means, not of the medians. */
static void test_mean_of_skewed_times(void **state)
{
    (void)state;
    double v[] = {10, 10, 10, 11, 19};
    assert_true(fabs(ac_stat_mean(v, 5) - 12.0) < 1e-12);
    assert_true(fabs(ac_stat_median(v, 5) - 10.0) < 1e-12);
    assert_true(fabs(ac_stat_mean(v, 1) - 10.0) < 1e-12);
}

static void test_bootstrap_of_constants_has_no_width(void **state)
{
    (void)state;
    double v[50];
    for (int i = 0; i < 50; i++)
        v[i] = 2.5;
    double lo, hi;
    assert_int_equal(ac_stat_bootstrap_mean(v, 50, 200, 7, 0.95, &lo, &hi), AC_OK);
    assert_true(lo == 2.5 && hi == 2.5);
}

/* 2000 values of a fixed sequence whose mean and spread are known here. */
static void test_bootstrap_near_the_normal_interval(void **state)
{
    (void)state;
    enum { N = 2000 };
    static double v[N];
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < N; i++) {
        v[i] = (double)((i * 7919) % 101); /* 0 .. 100, each about equally often */
        sum += v[i];
    }
    double mean = sum / N;
    for (int i = 0; i < N; i++)
        sq += (v[i] - mean) * (v[i] - mean);
    double half = 1.96 * sqrt(sq / (N - 1)) / sqrt((double)N);
    double lo, hi, lo2, hi2;
    assert_int_equal(ac_stat_bootstrap_mean(v, N, 2000, 3, 0.95, &lo, &hi), AC_OK);
    printf("  mean %.4f: bootstrap [%.4f, %.4f], normal [%.4f, %.4f]\n", mean, lo, hi, mean - half, mean + half);
    assert_true(fabs(lo - (mean - half)) < 0.1 * half);
    assert_true(fabs(hi - (mean + half)) < 0.1 * half);
    assert_int_equal(ac_stat_bootstrap_mean(v, N, 2000, 3, 0.95, &lo2, &hi2), AC_OK);
    assert_true(lo2 == lo && hi2 == hi);
    /* a narrower level, a narrower interval inside */
    assert_int_equal(ac_stat_bootstrap_mean(v, N, 2000, 3, 0.5, &lo2, &hi2), AC_OK);
    assert_true(lo < lo2 && hi2 < hi);
}

static void test_bootstrap_refuses_bad_arguments(void **state)
{
    (void)state;
    double v[] = {1, 2}, lo, hi;
    assert_int_equal(ac_stat_bootstrap_mean(v, 0, 10, 1, 0.95, &lo, &hi), AC_ERR_INVALID);
    assert_int_equal(ac_stat_bootstrap_mean(v, 2, 0, 1, 0.95, &lo, &hi), AC_ERR_INVALID);
    assert_int_equal(ac_stat_bootstrap_mean(v, 2, 10, 1, 1.0, &lo, &hi), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "bootstrap"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_median_and_spread),
        cmocka_unit_test(test_mean_of_skewed_times),
        cmocka_unit_test(test_bootstrap_of_constants_has_no_width),
        cmocka_unit_test(test_bootstrap_near_the_normal_interval),
        cmocka_unit_test(test_bootstrap_refuses_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
