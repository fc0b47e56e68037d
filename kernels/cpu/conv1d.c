#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Time-major so the inner loop runs over contiguous channels; each thread owns a block of
 * channels for the whole sequence, then advances that block's state. */
void ac_cpu_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                        const float *bias, float *state, float *y, int ldy)
{
    (void)ctx;
    enum { BLOCK = 64 };
    int S = K - 1;
#pragma omp parallel for schedule(static) if ((long)T * C > 16384)
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        int c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
        for (int t = 0; t < T; t++) {
            float *yt = y + (size_t)t * ldy;
            for (int c = c0; c < c1; c++)
                yt[c] = bias ? bias[c] : 0.0f;
            for (int k = 0; k < K; k++) {
                int src = t - S + k; /* the input this tap reads; < 0 comes from the state */
                if (src >= 0) {
                    const float *xs = x + (size_t)src * ldx;
                    for (int c = c0; c < c1; c++)
                        yt[c] += w[(size_t)c * K + k] * xs[c];
                } else {
                    for (int c = c0; c < c1; c++)
                        yt[c] += w[(size_t)c * K + k] * state[(size_t)c * S + S + src];
                }
            }
            for (int c = c0; c < c1; c++)
                yt[c] = yt[c] * ac_cpu_sigmoid(yt[c]);
        }
        /* keep the last S raw inputs, oldest first */
        for (int c = c0; c < c1; c++) {
            float *st = state + (size_t)c * S;
            if (T >= S) {
                for (int k = 0; k < S; k++)
                    st[k] = x[(size_t)(T - S + k) * ldx + c];
            } else {
                memmove(st, st + T, (size_t)(S - T) * sizeof *st);
                for (int k = 0; k < T; k++)
                    st[S - T + k] = x[(size_t)k * ldx + c];
            }
        }
    }
}

/* The input tap k of output t reads: x row t - (K-1) + k, or the state before the call. */
static inline float conv_input(const float *x, int ldx, const float *state, int S, int src, int c)
{
    if (src >= 0)
        return x[(size_t)src * ldx + c];
    return state ? state[(size_t)c * S + S + src] : 0.0f;
}

/* Per block of channels (in parallel; a block owns its dw and dbias entries):
 *   1. dx[t] = dpre[t] = dy[t] silu'(pre[t]), pre recomputed as the forward does;
 *   2. dw[c, k] += sum_t dpre[t, c] in(t - S + k, c), dbias[c] += sum_t dpre[t, c];
 *   3. in place, t ascending: dx[t, c] = sum_k w[c, k] dpre[t + S - k, c], which reads
 *      only dpre rows >= t, none yet overwritten. */
void ac_cpu_conv1d_silu_backward(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                                 const float *bias, const float *state, const float *dy, int lddy, float *dx,
                                 int lddx, float *dw, float *dbias)
{
    (void)ctx;
    enum { BLOCK = 64 };
    int S = K - 1;
#pragma omp parallel for schedule(static) if ((long)T * C > 16384)
    for (int c0 = 0; c0 < C; c0 += BLOCK) {
        int c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
        float acc[BLOCK];
        for (int t = 0; t < T; t++) {
            for (int c = c0; c < c1; c++)
                acc[c - c0] = bias ? bias[c] : 0.0f;
            for (int k = 0; k < K; k++)
                for (int c = c0; c < c1; c++)
                    acc[c - c0] += w[(size_t)c * K + k] * conv_input(x, ldx, state, S, t - S + k, c);
            const float *dyt = dy + (size_t)t * lddy;
            float *dxt = dx + (size_t)t * lddx;
            for (int c = c0; c < c1; c++) {
                float v = acc[c - c0];
                float s = ac_cpu_sigmoid(v);
                dxt[c] = dyt[c] * s * (1.0f + v * (1.0f - s));
            }
        }
        if (dw)
            for (int k = 0; k < K; k++) {
                for (int c = c0; c < c1; c++)
                    acc[c - c0] = 0.0f;
                for (int t = 0; t < T; t++) {
                    const float *dxt = dx + (size_t)t * lddx;
                    for (int c = c0; c < c1; c++)
                        acc[c - c0] += dxt[c] * conv_input(x, ldx, state, S, t - S + k, c);
                }
                for (int c = c0; c < c1; c++)
                    dw[(size_t)c * K + k] += acc[c - c0];
            }
        if (dbias) {
            for (int c = c0; c < c1; c++)
                acc[c - c0] = 0.0f;
            for (int t = 0; t < T; t++)
                for (int c = c0; c < c1; c++)
                    acc[c - c0] += dx[(size_t)t * lddx + c];
            for (int c = c0; c < c1; c++)
                dbias[c] += acc[c - c0];
        }
        for (int t = 0; t < T; t++) {
            float *dxt = dx + (size_t)t * lddx;
            for (int c = c0; c < c1; c++) {
                float sum = 0.0f;
                for (int k = 0; k < K; k++) {
                    int src = t + S - k; /* >= t */
                    if (src < T)
                        sum += w[(size_t)c * K + k] * dx[(size_t)src * lddx + c];
                }
                dxt[c] = sum;
            }
        }
    }
}
