#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

void ac_k_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                      const float *bias, float *state, float *y, int ldy)
{
    (void)ctx;
    int S = K - 1;
#pragma omp parallel for schedule(static) if ((long)T * C > 16384)
    for (int c = 0; c < C; c++) {
        float *st = state + (size_t)c * S;
        const float *wc = w + (size_t)c * K;
        float b = bias ? bias[c] : 0.0f;
        for (int t = 0; t < T; t++) {
            /* window: the K inputs ending at t; older ones come from the state */
            float acc = b;
            for (int k = 0; k < K; k++) {
                int src = t - S + k;
                float v = src >= 0 ? x[(size_t)src * ldx + c] : st[S + src];
                acc += wc[k] * v;
            }
            y[(size_t)t * ldy + c] = acc / (1.0f + expf(-acc));
        }
        /* keep the last S raw inputs, oldest first */
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
