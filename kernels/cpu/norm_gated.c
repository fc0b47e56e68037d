#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>

static inline float silu(float v) { return v * ac_cpu_sigmoid(v); }

enum { GATED_NORM_PARALLEL_MIN = 16384 };

static void gated_rmsnorm_rows(long first, long last, int dim, int group_size, const float *y, int ldy,
                               const float *z, int ldz, const float *w, float eps, float *out, int ldout)
{
    for (long r = first; r < last; r++) {
        const float *yr = y + (size_t)r * ldy;
        const float *zr = z + (size_t)r * ldz;
        float *outr = out + (size_t)r * ldout;
        for (int g0 = 0; g0 < dim; g0 += group_size) {
            double sum = 0.0;
#pragma omp simd reduction(+ : sum)
            for (int i = g0; i < g0 + group_size; i++) {
                float u = yr[i] * silu(zr[i]);
                outr[i] = u;
                sum += (double)u * u;
            }
            float inv = 1.0f / sqrtf((float)(sum / group_size) + eps);
#pragma omp simd
            for (int i = g0; i < g0 + group_size; i++)
                outr[i] = w[i] * (outr[i] * inv);
        }
    }
}

void ac_cpu_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                          const float *z, int ldz, const float *w, float eps, float *out, int ldout)
{
    (void)ctx;
    if ((long)rows * dim <= GATED_NORM_PARALLEL_MIN) {
        gated_rmsnorm_rows(0, rows, dim, group_size, y, ldy, z, ldz, w, eps, out, ldout);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(rows, &first, &last);
        gated_rmsnorm_rows(first, last, dim, group_size, y, ldy, z, ldz, w, eps, out, ldout);
    }
}

/* Per row and group, with u = y silu(z), r = rsqrt(mean(u^2) + eps), out = w u r:
 *   du = r w dout - u r^3 mean(w dout u)
 *   dy = du silu(z);  dz = du y silu'(z),  silu'(v) = s (1 + v (1 - s)), s = sigmoid(v)
 *   dw += sum over rows of dout u r
 * Rows run in parallel for dy and dz (r goes to rstd); then column blocks run in parallel
 * for dw, each summing its rows before the one add. */
void ac_cpu_gated_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *out, int ldout,
                                         const float *dout, int lddout, const float *rstd, float eps, float width,
                                         float scale, float per_head, int heads, float *dmask)
{
    (void)ctx;
    double dM = 0.0;
    for (int t = 0; t < rows; t++) {
        const float *o = out + (size_t)t * ldout, *d = dout + (size_t)t * lddout;
        double a = 0.0;
        for (int c = 0; c < dim; c++)
            a += (double)d[c] * o[c];
        a /= scale; /* dout came scaled */
        double r = rstd[t], r2 = (double)dim / ((double)width * r * r);
        dM += a * (1.0 - eps / r2) / (2.0 * width);
    }
    for (int h = 0; h < heads; h++)
        dmask[h] += (float)(per_head * dM);
}

void ac_cpu_gated_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                   const float *z, int ldz, const float *w, float eps, const float *dout, int lddout,
                                   float *dy, int lddy, float *dz, int lddz, float *dw, float *rstd)
{
    (void)ctx;
    int groups = dim / group_size;
#pragma omp parallel for schedule(static) if ((long)rows * dim > GATED_NORM_PARALLEL_MIN)
    for (int r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * ldy;
        const float *zr = z + (size_t)r * ldz;
        const float *gr = dout + (size_t)r * lddout;
        float *dyr = dy + (size_t)r * lddy;
        float *dzr = dz + (size_t)r * lddz;
        for (int g = 0; g < groups; g++) {
            int g0 = g * group_size, g1 = g0 + group_size;
            /* sigmoid(z) waits in dz (an output, no input) for the second pass */
            double sum = 0.0, dot = 0.0;
#pragma omp simd reduction(+ : sum, dot)
            for (int i = g0; i < g1; i++) {
                float s = ac_cpu_sigmoid(zr[i]);
                float u = yr[i] * (zr[i] * s);
                dzr[i] = s;
                sum += (double)u * u;
                dot += (double)(w[i] * gr[i]) * u;
            }
            float inv = 1.0f / sqrtf((float)(sum / group_size) + eps);
            rstd[(size_t)r * groups + g] = inv;
            float k = (float)(dot / group_size) * inv * inv * inv;
#pragma omp simd
            for (int i = g0; i < g1; i++) {
                float s = dzr[i];
                float sz = zr[i] * s; /* silu(z) */
                float u = yr[i] * sz;
                float du = inv * w[i] * gr[i] - u * k;
                dyr[i] = du * sz;
                dzr[i] = du * yr[i] * s * (1.0f + zr[i] * (1.0f - s));
            }
        }
    }
    if (!dw)
        return;
    enum { BLOCK = 64 };
#pragma omp parallel for schedule(static) if ((long)rows * dim > GATED_NORM_PARALLEL_MIN)
    for (int c0 = 0; c0 < dim; c0 += BLOCK) {
        int c1 = c0 + BLOCK < dim ? c0 + BLOCK : dim;
        float acc[BLOCK] = {0};
        for (int r = 0; r < rows; r++) {
            const float *yr = y + (size_t)r * ldy;
            const float *zr = z + (size_t)r * ldz;
            const float *gr = dout + (size_t)r * lddout;
            const float *rr = rstd + (size_t)r * groups;
            for (int c = c0; c < c1;) { /* the block's stretch of each group, its rstd hoisted */
                int end = (c / group_size + 1) * group_size;
                float rg = rr[c / group_size];
                end = end < c1 ? end : c1;
#pragma omp simd
                for (int i = c; i < end; i++)
                    acc[i - c0] += gr[i] * (yr[i] * silu(zr[i])) * rg;
                c = end;
            }
        }
        for (int c = c0; c < c1; c++)
            dw[c] += acc[c - c0];
    }
}
