/* Finite-difference gradient checks shared by the backward tests (header-only: each
 * test program includes it once). Float math, central differences: the tolerance is
 * stated by each caller; an entry passes when |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|). */
#ifndef AC_TEST_GRAD_CHECK_H
#define AC_TEST_GRAD_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Deterministic uniform fill in [lo, hi). */
static inline void gc_fill(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((s >> 40) & 0xffffff) / (float)(1 << 24);
    }
}

typedef double (*gc_loss_fn)(void *ctx);

typedef struct {
    int checked;
    int failed;
    double worst_rel;
} gc_result;

/* Checks `count` entries of x spread over its n (all when count >= n) against grad. */
static inline gc_result gc_check(const char *what, float *x, size_t n, const float *grad, size_t count,
                                 gc_loss_fn loss, void *ctx, float eps, double atol, double rtol)
{
    gc_result r = {0, 0, 0.0};
    size_t step = count >= n ? 1 : n / count;
    for (size_t i = 0; i < n; i += step) {
        float saved = x[i];
        x[i] = saved + eps;
        double plus = loss(ctx);
        x[i] = saved - eps;
        double minus = loss(ctx);
        x[i] = saved;
        double numeric = (plus - minus) / (2.0 * (double)eps);
        double analytic = grad[i];
        double err = fabs(analytic - numeric);
        double scale = fmax(fabs(analytic), fabs(numeric));
        double rel = scale > 0 ? err / scale : 0.0;
        r.checked++;
        if (err > atol + rtol * scale) {
            if (r.failed < 5)
                fprintf(stderr, "  %s[%zu]: analytic %.6g numeric %.6g\n", what, i, analytic, numeric);
            r.failed++;
        }
        if (err > atol && rel > r.worst_rel)
            r.worst_rel = rel;
    }
    printf("  %-28s %4d checked, %d off, worst relative error %.2e\n", what, r.checked, r.failed, r.worst_rel);
    return r;
}

#endif
