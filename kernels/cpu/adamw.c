#include "kernels/cpu/cpu_ops.h"

#include <math.h>

void ac_cpu_adamw(ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step)
{
    (void)ctx;
    float c1 = 1.0f - powf(beta1, (float)step);
    float c2 = 1.0f - powf(beta2, (float)step);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * g_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        float m_hat = m[i] / c1;
        float v_hat = v[i] / c2;
        w[i] -= lr * (weight_decay * w[i] + m_hat / (sqrtf(v_hat) + eps));
    }
}

/* Fixed chunks summed in a fixed order: the same bits whatever the thread count, so a
 * resumed training run clips exactly as an uninterrupted one. */
double ac_cpu_sum_squares(ac_kctx *ctx, size_t n, const float *x)
{
    (void)ctx;
    enum { CHUNKS = 64 };
    double partial[CHUNKS];
    size_t per = (n + CHUNKS - 1) / CHUNKS;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int c = 0; c < CHUNKS; c++) {
        double sum = 0.0;
        size_t end = (size_t)(c + 1) * per < n ? (size_t)(c + 1) * per : n;
#pragma omp simd reduction(+ : sum)
        for (size_t i = (size_t)c * per; i < end; i++)
            sum += (double)x[i] * x[i];
        partial[c] = sum;
    }
    double total = 0.0;
    for (int c = 0; c < CHUNKS; c++)
        total += partial[c];
    return total;
}

void ac_cpu_scale(ac_kctx *ctx, size_t n, float s, float *x)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
