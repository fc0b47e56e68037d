#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Time-major so the inner loop runs over contiguous channels; each thread owns a block of
 * channels for the whole sequence, then advances that block's state. */
void ac_k_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
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
                yt[c] = yt[c] / (1.0f + expf(-yt[c]));
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
