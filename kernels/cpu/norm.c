#include "kernels/kernels.h"

#include <math.h>

void ac_k_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                  float eps, float *y, int ldy)
{
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * ldy;
        double sum = 0.0;
        for (int i = 0; i < dim; i++)
            sum += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(sum / dim) + eps);
        for (int i = 0; i < dim; i++)
            yr[i] = w[i] * (xr[i] * inv);
    }
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

void ac_k_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                        const float *z, int ldz, const float *w, float eps, float *out, int ldout)
{
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * ldy;
        const float *zr = z + (size_t)r * ldz;
        float *outr = out + (size_t)r * ldout;
        for (int g0 = 0; g0 < dim; g0 += group_size) {
            double sum = 0.0;
            for (int i = g0; i < g0 + group_size; i++) {
                float u = yr[i] * silu(zr[i]);
                outr[i] = u;
                sum += (double)u * u;
            }
            float inv = 1.0f / sqrtf((float)(sum / group_size) + eps);
            for (int i = g0; i < g0 + group_size; i++)
                outr[i] = w[i] * (outr[i] * inv);
        }
    }
}
