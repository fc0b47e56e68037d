#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>

enum { NORM_PARALLEL_MIN = 16384 };

static void rmsnorm_rows(long first, long last, int dim, const float *x, int ldx, const float *w, float eps, float *y,
                         int ldy)
{
    for (long r = first; r < last; r++) {
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * ldy;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < dim; i++)
            sum += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(sum / dim) + eps);
#pragma omp simd
        for (int i = 0; i < dim; i++)
            yr[i] = w[i] * (xr[i] * inv);
    }
}

void ac_cpu_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                    float eps, float *y, int ldy)
{
    (void)ctx;
    if ((long)rows * dim <= NORM_PARALLEL_MIN) {
        rmsnorm_rows(0, rows, dim, x, ldx, w, eps, y, ldy);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(rows, &first, &last);
        rmsnorm_rows(first, last, dim, x, ldx, w, eps, y, ldy);
    }
}

/* With r = rsqrt(mean(x^2) + eps) and g = dy * w: dx = r g - x r^3 mean(g x). The
 * gradient is rounded before beta_dx dx is added, so adding costs no bit against a
 * separate add. */
void ac_cpu_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                             const float *dy, int lddy, float beta_dx, float *dx, int lddx, float *dw)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if ((long)rows * dim > NORM_PARALLEL_MIN)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        const float *dyr = dy + (size_t)r * lddy;
        float *dxr = dx + (size_t)r * lddx;
        double sum = 0.0, gx = 0.0;
#pragma omp simd reduction(+ : sum, gx)
        for (int i = 0; i < dim; i++) {
            sum += (double)xr[i] * xr[i];
            gx += (double)dyr[i] * w[i] * xr[i];
        }
        float inv = 1.0f / sqrtf((float)(sum / dim) + eps);
        float coef = (float)(gx / dim) * inv * inv * inv;
        if (beta_dx == 0.0f) {
#pragma omp simd
            for (int i = 0; i < dim; i++)
                dxr[i] = inv * dyr[i] * w[i] - coef * xr[i];
        } else {
#pragma omp simd
            for (int i = 0; i < dim; i++) {
                float g = inv * dyr[i] * w[i] - coef * xr[i];
                dxr[i] = g + beta_dx * dxr[i];
            }
        }
    }
    if (!dw)
        return;
    /* the weight gradient sums over rows: one pass, no races */
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        const float *dyr = dy + (size_t)r * lddy;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < dim; i++)
            sum += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(sum / dim) + eps);
#pragma omp simd
        for (int i = 0; i < dim; i++)
            dw[i] += dyr[i] * xr[i] * inv;
    }
}

/* y_c = x_c w_c / r with r^2 = S / width + eps, S = sum x^2: dy_c/dwidth = y_c S / (2
 * width^2 r^2), so dL/dwidth = (sum_c dy_c y_c) S / (2 width^2 r^2) per row; rows summed
 * in order. */
void ac_cpu_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                                   float eps, float width, const float *dy, int lddy, float *dwidth)
{
    (void)ctx;
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        const float *dyr = dy + (size_t)r * lddy;
        double s = 0.0, a = 0.0;
        for (int i = 0; i < dim; i++) {
            s += (double)xr[i] * xr[i];
            a += (double)dyr[i] * w[i] * xr[i];
        }
        double r2 = s / width + eps;
        total += a / sqrt(r2) * s / (2.0 * (double)width * width * r2);
    }
    *dwidth += (float)total;
}
