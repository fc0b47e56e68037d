/* Robust statistics for measurements: median, MAD-based spread, least-squares lines, and
 * bootstrap intervals of a mean. */
#include "util/stats.h"

#include "util/rng.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ac_stat_mean(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0.0;
}

double ac_stat_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ac_stat_spread(double *v, size_t n)
{
    if (n < 2)
        return 0.0;
    double m = ac_stat_median(v, n);
    for (size_t i = 0; i < n; i++)
        v[i] = fabs(v[i] - m);
    return 1.4826 * ac_stat_median(v, n);
}

void ac_stat_line(const double *x, const double *y, size_t n, double *a, double *b)
{
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    if (n == 0) {
        *a = *b = 0.0;
        return;
    }
    mx /= (double)n;
    my /= (double)n;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    *b = sxx > 0 ? sxy / sxx : 0.0;
    *a = my - *b * mx;
}

double ac_stat_within_slope(const double *x, const double *y, const size_t *start, size_t groups)
{
    double sxy = 0, sxx = 0;
    for (size_t g = 0; g < groups; g++) {
        size_t lo = start[g], hi = start[g + 1];
        if (hi - lo < 2)
            continue;
        double mx = 0, my = 0;
        for (size_t i = lo; i < hi; i++) {
            mx += x[i];
            my += y[i];
        }
        mx /= (double)(hi - lo);
        my /= (double)(hi - lo);
        for (size_t i = lo; i < hi; i++) {
            sxy += (x[i] - mx) * (y[i] - my);
            sxx += (x[i] - mx) * (x[i] - mx);
        }
    }
    if (sxx <= 0)
        return 1.0;
    double b = sxy / sxx;
    return b < 0 ? 0 : b > 2 ? 2 : b;
}

double ac_speed_factor(double typical, double level, double now, double slope)
{
    if (!(now > 0) || !(typical > 0) || !(level > 0))
        return 1.0;
    return typical / level * pow(level / now, slope);
}

/* The q-quantile of sorted[0 .. n), linear between order statistics. */
static double sorted_quantile(const double *sorted, size_t n, double q)
{
    double at = q * (double)(n - 1);
    size_t i = (size_t)at;
    if (i + 1 >= n)
        return sorted[n - 1];
    return sorted[i] + (at - (double)i) * (sorted[i + 1] - sorted[i]);
}

ac_status ac_stat_bootstrap_mean(const double *v, size_t n, int resamples, uint64_t seed, double level, double *lo,
                                 double *hi)
{
    if (n == 0 || n > INT_MAX || resamples < 1 || !(level > 0 && level < 1))
        return ac_fail(AC_ERR_INVALID, "bootstrap: needs values (%zu), resamples (%d) and a level in (0, 1) (%g)", n,
                       resamples, level);
    double *means = malloc((size_t)resamples * sizeof *means);
    if (!means)
        return ac_fail(AC_ERR_NOMEM, "bootstrap: out of memory for %d resamples", resamples);
    uint64_t state = seed;
    for (int b = 0; b < resamples; b++) {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++)
            sum += v[ac_rng_below(&state, (int)n)];
        means[b] = sum / (double)n;
    }
    qsort(means, (size_t)resamples, sizeof *means, compare_double);
    *lo = sorted_quantile(means, (size_t)resamples, (1 - level) / 2);
    *hi = sorted_quantile(means, (size_t)resamples, (1 + level) / 2);
    free(means);
    return AC_OK;
}
