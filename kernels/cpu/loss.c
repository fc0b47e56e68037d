#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"

#include <math.h>

/* log-sum-exp of one row, max-shifted */
/* log sum exp(x inv_tau) of a row; its largest scaled entry in *max_out and, when exps is
 * not NULL, exp(x inv_tau - max) there (the softmax before its division by the sum). */
static double row_logsumexp(const float *x, int V, float inv_tau, float *max_out, float *exps, double *sum_out)
{
    float max = x[0] * inv_tau;
    /* a compare, not fmaxf: its NaN rules keep it a call per element */
#pragma omp simd reduction(max : max)
    for (int v = 1; v < V; v++)
        max = x[v] * inv_tau > max ? x[v] * inv_tau : max;
    double sum = 0.0;
    if (exps) {
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) {
            exps[v] = ac_cpu_expf(x[v] * inv_tau - max);
            sum += exps[v];
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++)
            sum += ac_cpu_expf(x[v] * inv_tau - max);
    }
    *max_out = max;
    if (sum_out)
        *sum_out = sum;
    return (double)max + log(sum);
}

void ac_cpu_cross_entropy(ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets, float scale,
                          float *dlogits, double *row_loss)
{
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * V;
        float *d = dlogits ? dlogits + (size_t)r * V : NULL;
        row_loss[r] = 0.0;
        if (targets[r] < 0) {
            for (int v = 0; d && v < V; v++)
                d[v] = 0.0f;
            continue;
        }
        /* the exps go to d (which may be the logits themselves: the target's logit is
         * read first) in the normaliser's pass, then one multiply each: softmax = exp(x -
         * max) / sum (a second pass of exps was half the loss's time) */
        float max, target = x[targets[r]];
        double sum;
        double lse = row_logsumexp(x, V, 1.0f, &max, d, &sum);
        row_loss[r] = lse - target;
        if (!d)
            continue;
        float factor = (float)(scale / sum);
#pragma omp simd
        for (int v = 0; v < V; v++)
            d[v] *= factor;
        d[targets[r]] -= scale;
    }
}

/* The KD row's second pass: e_s = exp(s/tau - smax) (into d unless it is NULL), e_t
 * likewise, and the sums kd_row needs. Inlined at each call, d a constant there. */
static inline __attribute__((always_inline)) void kd_exps(int V, const float *s, const float *t, float inv_tau,
                                                           float smax, float tmax, float *d, double *sums)
{
    double s_sum = 0.0, t_sum = 0.0, t_dot = 0.0;
#pragma omp simd reduction(+ : s_sum, t_sum, t_dot)
    for (int v = 0; v < V; v++) {
        float xs = s[v] * inv_tau, xt = t[v] * inv_tau;
        float es = ac_cpu_expf(xs - smax), et = ac_cpu_expf(xt - tmax);
        s_sum += es;
        t_sum += et;
        t_dot += (double)et * (double)(xt - xs);
        if (d)
            d[v] = es;
    }
    sums[0] = s_sum, sums[1] = t_sum, sums[2] = t_dot;
}

/* KL(p_t || p_s) with p = softmax(x / tau) in three passes and three exps an entry (it
 * was six passes and five): the two maxima; e_s = exp(s/tau - max_s), e_t likewise, their
 * sums and sum e_t (t - s) / tau, so that KL = that / sum_t + lse_s - lse_t (each p_t log
 * p_t / p_s written out); then the gradient from e_s (kept in dlogits, which may be the
 * student's logits: each entry is read before it is written) and e_t again. */
static void kd_row(int V, const float *s, const float *t, float inv_tau, float tau, float scale, float *d,
                   double *row_loss)
{
    float smax = s[0] * inv_tau, tmax = t[0] * inv_tau;
#pragma omp simd reduction(max : smax, tmax)
    for (int v = 1; v < V; v++) {
        smax = s[v] * inv_tau > smax ? s[v] * inv_tau : smax;
        tmax = t[v] * inv_tau > tmax ? t[v] * inv_tau : tmax;
    }
    double sums[3]; /* sum e_s, sum e_t, sum e_t (t - s) / tau */
    if (d) /* one copy of the pass each way, so neither tests d per entry */
        kd_exps(V, s, t, inv_tau, smax, tmax, d, sums);
    else
        kd_exps(V, s, t, inv_tau, smax, tmax, NULL, sums);
    double s_sum = sums[0], t_sum = sums[1], t_dot = sums[2];
    double s_lse = (double)smax + log(s_sum), t_lse = (double)tmax + log(t_sum);
    *row_loss = (double)tau * tau * (t_dot / t_sum + (s_lse - t_lse));
    if (!d)
        return;
    float gs = (float)(scale * tau / s_sum), gt = (float)(scale * tau / t_sum);
#pragma omp simd
    for (int v = 0; v < V; v++)
        d[v] = gs * d[v] - gt * ac_cpu_expf(t[v] * inv_tau - tmax);
}

void ac_cpu_kd_loss(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau, float scale,
                    float *dlogits, double *row_loss)
{
    (void)ctx;
    float inv_tau = 1.0f / tau;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        kd_row(V, student + (size_t)r * V, teacher + (size_t)r * V, inv_tau, tau, scale,
               dlogits ? dlogits + (size_t)r * V : NULL, row_loss + r);
}
