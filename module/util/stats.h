/* Robust statistics for measurements: median, MAD-based spread, least-squares lines. */
#ifndef AC_UTIL_STATS_H
#define AC_UTIL_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"

/* Mean of n values (n >= 1). */
double ac_stat_mean(const double *v, size_t n);
/* Median of n values (n >= 1; the array is reordered). */
double ac_stat_median(double *v, size_t n);
/* 1.4826 x the median absolute deviation from the median (0 for n < 2; reorders v). */
double ac_stat_spread(double *v, size_t n);
/* The least-squares slope of y on x within groups: group g holds points start[g] ..
 * start[g + 1] - 1, and each group's own means are removed first, so the slope is how y
 * moves with x apart from what sets each group's level. Clamped to [0, 2]; 1 when x does
 * not vary within the groups. */
double ac_stat_within_slope(const double *x, const double *y, const size_t *start, size_t groups);
/* The speed correction of a time measured when the reference took `now` seconds, in a
 * measurement whose references took `level` (their median), to what it would be when the
 * reference takes `typical`: (typical / level) (x) (level / now)^slope. The level moves
 * every time in proportion: a machine slower for a whole measurement is slower for every
 * model alike. A request's own deviation from the level gets the fitted slope, which is
 * below 1 because the reference's own noise dilutes it; used for the level too it would
 * leave part of a slow hour in the result. */
double ac_speed_factor(double typical, double level, double now, double slope);
/* Least-squares y = a + b x over n points (b = 0 when x does not vary). */
void ac_stat_line(const double *x, const double *y, size_t n, double *a, double *b);
/* The percentile bootstrap interval of the mean of v[0 .. n) (n >= 1): the means of
 * `resamples` draws of n values with replacement (util/rng.h's stream from `seed`), and
 * their (1 - level) / 2 and (1 + level) / 2 quantiles (linear between order statistics)
 * into *lo and *hi. */
ac_status ac_stat_bootstrap_mean(const double *v, size_t n, int resamples, uint64_t seed, double level, double *lo,
                                 double *hi);

#endif
