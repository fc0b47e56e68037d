#include "kernels/kernels.h"

#include <math.h>

void ac_k_relu2(ac_kctx *ctx, size_t n, float *x)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
    }
}

void ac_k_add(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void ac_k_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                      float dt_min, float *dt)
{
    (void)ctx;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            float v = raw[(size_t)t * ldraw + h] + bias[h];
            /* torch's softplus switches to the identity above 20 */
            float sp = v > 20.0f ? v : log1pf(expf(v));
            dt[(size_t)t * H + h] = sp < dt_min ? dt_min : sp;
        }
}

void ac_k_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows,
                      float *dst)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 64)
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)rows[i] * ldsrc;
        float *d = dst + (size_t)i * D;
        for (int j = 0; j < D; j++)
            d[j] = s[j];
    }
}

void ac_k_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                           const float *weight, float *dst, int lddst)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 64)
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)i * D;
        float *d = dst + (size_t)rows[i] * lddst;
        float w = weight[i];
        for (int j = 0; j < D; j++)
            d[j] += w * s[j];
    }
}
