#include "kernels/kernels.h"

#include <math.h>

/* The recurrence step by step: exact, and cheap next to the projections at these sizes
 * (H*P*N multiply-adds a token). Heads are independent, so they run in parallel. */
void ac_k_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                   const float *B, const float *C, int ldbc, const float *dt, const float *A,
                   const float *Dskip, float *state, float *y, int ldy)
{
    (void)ctx;
    int heads_per_group = H / G;
#pragma omp parallel for schedule(static) if ((long)T * H * P * N > 32768)
    for (int h = 0; h < H; h++) {
        int g = h / heads_per_group;
        float *s = state + (size_t)h * P * N;
        for (int t = 0; t < T; t++) {
            float d = dt[(size_t)t * H + h];
            float decay = expf(d * A[h]);
            const float *xt = x + (size_t)t * ldx + (size_t)h * P;
            const float *Bt = B + (size_t)t * ldbc + (size_t)g * N;
            const float *Ct = C + (size_t)t * ldbc + (size_t)g * N;
            float *yt = y + (size_t)t * ldy + (size_t)h * P;
            for (int p = 0; p < P; p++) {
                float *sp = s + (size_t)p * N;
                float dx = d * xt[p];
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int n = 0; n < N; n++) {
                    sp[n] = decay * sp[n] + dx * Bt[n];
                    acc += sp[n] * Ct[n];
                }
                yt[p] = acc + Dskip[h] * xt[p];
            }
        }
    }
}
