#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>
#include <stdlib.h>

/* Time-major so the inner loops run over contiguous channels; each thread owns a block of
 * CONV_BLOCK channels for the whole sequence, with the block's taps tap-major and the
 * inputs before the sequence time-major on its stack (the [C, K] weights and the [C, K-1]
 * state are strided along channels, which kept the loops scalar). */
enum { CONV_BLOCK = 64, CONV_PARALLEL_MIN = 16384 };

/* wt[k][c]: tap k of the block's channel c0 + c. */
static void block_taps(int K, const float *w, int c0, int n, float *wt)
{
    for (int k = 0; k < K; k++)
        for (int c = 0; c < n; c++)
            wt[k * CONV_BLOCK + c] = w[(size_t)(c0 + c) * K + k];
}

/* hist[i][c]: the raw input i - S of channel c0 + c, before the sequence (zeros without a
 * state). */
static void block_history(int S, const float *state, int c0, int n, float *hist)
{
    for (int i = 0; i < S; i++)
        for (int c = 0; c < n; c++)
            hist[i * CONV_BLOCK + c] = state ? state[(size_t)(c0 + c) * S + i] : 0.0f;
}

/* The block's inputs at time src (< 0: before the sequence). */
static const float *input_row(const float *x, int ldx, const float *hist, int S, int src, int c0)
{
    return src >= 0 ? x + (size_t)src * ldx + c0 : hist + (size_t)(S + src) * CONV_BLOCK;
}

/* acc[c] = bias + sum over taps k (in order) of w[c, k] in(t - S + k, c): the conv before
 * SiLU, the same operations in the forward and the backward's recomputation. */
static void conv_row(int K, int n, const float *wt, const float *bias, const float *x, int ldx,
                     const float *hist, int t, int c0, float *acc)
{
    int S = K - 1;
    if (K == 4) { /* the models' width: one pass, each sum in a register */
        const float *i0 = input_row(x, ldx, hist, S, t - 3, c0), *i1 = input_row(x, ldx, hist, S, t - 2, c0);
        const float *i2 = input_row(x, ldx, hist, S, t - 1, c0), *i3 = input_row(x, ldx, hist, S, t, c0);
#pragma omp simd
        for (int c = 0; c < n; c++)
            acc[c] = ((((bias ? bias[c0 + c] : 0.0f) + wt[c] * i0[c]) + wt[CONV_BLOCK + c] * i1[c]) +
                      wt[2 * CONV_BLOCK + c] * i2[c]) +
                     wt[3 * CONV_BLOCK + c] * i3[c];
        return;
    }
    for (int c = 0; c < n; c++)
        acc[c] = bias ? bias[c0 + c] : 0.0f;
    for (int k = 0; k < K; k++) {
        const float *in = input_row(x, ldx, hist, S, t - S + k, c0), *wk = wt + k * CONV_BLOCK;
#pragma omp simd
        for (int c = 0; c < n; c++)
            acc[c] += wk[c] * in[c];
    }
}

/* Blocks [first, last) of channels: their outputs, then their states advanced past the T
 * inputs (the last S raw inputs, oldest first). */
static void conv_blocks(long first, long last, int T, int C, int K, const float *x, int ldx, const float *w,
                        const float *bias, float *state, float *y, int ldy)
{
    int S = K - 1;
    for (long blk = first; blk < last; blk++) {
        int c0 = (int)blk * CONV_BLOCK, c1 = c0 + CONV_BLOCK < C ? c0 + CONV_BLOCK : C, n = c1 - c0;
        float wt[AC_K_MAX_CONV_TAPS * CONV_BLOCK], hist[AC_K_MAX_CONV_TAPS * CONV_BLOCK];
        block_taps(K, w, c0, n, wt);
        block_history(S, state, c0, n, hist);
        for (int t = 0; t < T; t++) {
            float *yt = y + (size_t)t * ldy + c0;
            conv_row(K, n, wt, bias, x, ldx, hist, t, c0, yt);
#pragma omp simd
            for (int c = 0; c < n; c++)
                yt[c] = yt[c] * ac_cpu_sigmoid(yt[c]);
        }
        /* slot k takes input T - S + k: from x, or (T < S) the state's slot k + T, read
         * before it is overwritten (k ascending); no memmove call per channel */
        for (int c = c0; c < c1; c++) {
            float *st = state + (size_t)c * S;
            for (int k = 0; k < S; k++) {
                int src = T - S + k;
                st[k] = src >= 0 ? x[(size_t)src * ldx + c] : st[k + T];
            }
        }
    }
}

/* One token (a decode step) with the models' 4 taps: a channel's taps and state lie side
 * by side ([C, 4] and [C, 3]), read in vectors across channels by stride, with no blocks
 * to transpose; conv_row's operations in its order, then SiLU. */
static void conv_one_token4(int C, const float *x, const float *w, const float *bias, float *state, float *y)
{
#pragma omp simd
    for (int c = 0; c < C; c++) {
        const float *wc = w + (size_t)c * 4;
        float *st = state + (size_t)c * 3;
        float v = ((((bias ? bias[c] : 0.0f) + wc[0] * st[0]) + wc[1] * st[1]) + wc[2] * st[2]) + wc[3] * x[c];
        y[c] = v * ac_cpu_sigmoid(v);
        st[0] = st[1];
        st[1] = st[2];
        st[2] = x[c];
    }
}

void ac_cpu_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                        const float *bias, float *state, float *y, int ldy)
{
    (void)ctx;
    if (T == 1 && K == 4) {
        conv_one_token4(C, x, w, bias, state, y);
        return;
    }
    long blocks = (C + CONV_BLOCK - 1) / CONV_BLOCK;
    if ((long)T * C <= CONV_PARALLEL_MIN) {
        conv_blocks(0, blocks, T, C, K, x, ldx, w, bias, state, y, ldy);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(blocks, &first, &last);
        conv_blocks(first, last, T, C, K, x, ldx, w, bias, state, y, ldy);
    }
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
    int S = K - 1;
#pragma omp parallel for schedule(static) if ((long)T * C > CONV_PARALLEL_MIN)
    for (int c0 = 0; c0 < C; c0 += CONV_BLOCK) {
        int c1 = c0 + CONV_BLOCK < C ? c0 + CONV_BLOCK : C, n = c1 - c0;
        float wt[AC_K_MAX_CONV_TAPS * CONV_BLOCK], hist[AC_K_MAX_CONV_TAPS * CONV_BLOCK], acc[CONV_BLOCK];
        block_taps(K, w, c0, n, wt);
        block_history(S, state, c0, n, hist);
        for (int t = 0; t < T; t++) {
            conv_row(K, n, wt, bias, x, ldx, hist, t, c0, acc);
            const float *dyt = dy + (size_t)t * lddy + c0;
            float *dxt = dx + (size_t)t * lddx + c0;
#pragma omp simd
            for (int c = 0; c < n; c++) {
                float v = acc[c];
                float s = ac_cpu_sigmoid(v);
                dxt[c] = dyt[c] * s * (1.0f + v * (1.0f - s));
            }
        }
        if (dw)
            for (int k = 0; k < K; k++) {
                for (int c = 0; c < n; c++)
                    acc[c] = 0.0f;
                for (int t = 0; t < T; t++) {
                    const float *dxt = dx + (size_t)t * lddx + c0, *in = input_row(x, ldx, hist, S, t - S + k, c0);
#pragma omp simd
                    for (int c = 0; c < n; c++)
                        acc[c] += dxt[c] * in[c];
                }
                for (int c = 0; c < n; c++)
                    dw[(size_t)(c0 + c) * K + k] += acc[c];
            }
        if (dbias) {
            for (int c = 0; c < n; c++)
                acc[c] = 0.0f;
            for (int t = 0; t < T; t++) {
                const float *dxt = dx + (size_t)t * lddx + c0;
#pragma omp simd
                for (int c = 0; c < n; c++)
                    acc[c] += dxt[c];
            }
            for (int c = 0; c < n; c++)
                dbias[c0 + c] += acc[c];
        }
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < n; c++)
                acc[c] = 0.0f;
            for (int k = 0; k < K; k++) {
                int src = t + S - k; /* >= t */
                if (src >= T)
                    continue;
                const float *dsrc = dx + (size_t)src * lddx + c0, *wk = wt + k * CONV_BLOCK;
#pragma omp simd
                for (int c = 0; c < n; c++)
                    acc[c] += wk[c] * dsrc[c];
            }
            float *dxt = dx + (size_t)t * lddx + c0;
            for (int c = 0; c < n; c++)
                dxt[c] = acc[c];
        }
    }
}
