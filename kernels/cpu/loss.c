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

void ac_cpu_kd_loss(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau, float scale,
                    float *dlogits, double *row_loss)
{
    (void)ctx;
    float inv_tau = 1.0f / tau;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *s = student + (size_t)r * V;
        const float *t = teacher + (size_t)r * V;
        float *d = dlogits ? dlogits + (size_t)r * V : NULL;
        float smax, tmax;
        double s_lse = row_logsumexp(s, V, inv_tau, &smax, NULL, NULL);
        double t_lse = row_logsumexp(t, V, inv_tau, &tmax, NULL, NULL);
        /* log-probabilities in f32 (the normalisers in double), exps vectorized: the
         * gradient p_s - p_t carries 3e-7 of p in rounding, as the f32 GEMMs around it do */
        float ft = (float)t_lse, fs = (float)s_lse;
        double kl = 0.0;
#pragma omp simd reduction(+ : kl)
        for (int v = 0; v < V; v++) {
            float log_pt = t[v] * inv_tau - ft, log_ps = s[v] * inv_tau - fs;
            kl += (double)ac_cpu_expf(log_pt) * (double)(log_pt - log_ps);
        }
        row_loss[r] = (double)tau * tau * kl;
        if (!d)
            continue;
#pragma omp simd
        for (int v = 0; v < V; v++)
            d[v] = scale * tau * (ac_cpu_expf(s[v] * inv_tau - fs) - ac_cpu_expf(t[v] * inv_tau - ft));
    }
}
