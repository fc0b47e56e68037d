#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>
#include <string.h>

/* A prompt's scan of one head with its state held transposed, [N, P], so that each step
 * runs along P in vectors with no horizontal sums (the [P, N] layout needs one per
 * channel for y): s[n][p] = decay s[n][p] + (dt x[p]) B[n] is the same arithmetic as the
 * step below, so the states are the same bits; y sums over n in another order. */
enum { SCAN_TRANSPOSED_MIN_T = 8, SCAN_TRANSPOSED_MAX_STATE = 8192 };

static void scan_head_transposed(int T, int P, int N, const float *x, int ldx, const float *B, const float *C,
                                 int ldbc, const float *dt, int ldt, float A, float Dskip, float *state, float *y,
                                 int ldy)
{
    float sT[SCAN_TRANSPOSED_MAX_STATE], dx[SCAN_TRANSPOSED_MAX_STATE / 8];
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++)
            sT[(size_t)n * P + p] = state[(size_t)p * N + n];
    for (int t = 0; t < T; t++) {
        float d = dt[(size_t)t * ldt], decay = ac_cpu_expf(d * A);
        const float *xt = x + (size_t)t * ldx, *Bt = B + (size_t)t * ldbc, *Ct = C + (size_t)t * ldbc;
        float *yt = y + (size_t)t * ldy;
#pragma omp simd
        for (int p = 0; p < P; p++) {
            dx[p] = d * xt[p];
            yt[p] = 0.0f;
        }
        for (int n = 0; n < N; n++) {
            float *row = sT + (size_t)n * P, b = Bt[n], c = Ct[n];
#pragma omp simd
            for (int p = 0; p < P; p++) {
                row[p] = decay * row[p] + dx[p] * b;
                yt[p] += row[p] * c;
            }
        }
#pragma omp simd
        for (int p = 0; p < P; p++)
            yt[p] += Dskip * xt[p];
    }
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++)
            state[(size_t)p * N + n] = sT[(size_t)n * P + p];
}

enum { SCAN_PARALLEL_MIN = 32768 };

/* The recurrence step by step for heads [first, last): exact, and cheap next to the
 * projections at these sizes (H*P*N multiply-adds a token). */
static void scan_heads(long first, long last, int T, int H, int P, int N, int G, const float *x, int ldx,
                       const float *B, const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                       float *state, float *y, int ldy)
{
    int heads_per_group = H / G;
    for (long h = first; h < last; h++) {
        int g = h / heads_per_group;
        float *s = state + (size_t)h * P * N;
        if (T >= SCAN_TRANSPOSED_MIN_T && (size_t)P * N <= SCAN_TRANSPOSED_MAX_STATE && P <= SCAN_TRANSPOSED_MAX_STATE / 8) {
            scan_head_transposed(T, P, N, x + (size_t)h * P, ldx, B + (size_t)g * N, C + (size_t)g * N, ldbc, dt + h, H,
                                 A[h], Dskip[h], s, y + (size_t)h * P, ldy);
            continue;
        }
        for (int t = 0; t < T; t++) {
            float d = dt[(size_t)t * H + h];
            float decay = ac_cpu_expf(d * A[h]);
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

/* Heads are independent, so they run in parallel. */
void ac_cpu_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                     const float *B, const float *C, int ldbc, const float *dt, const float *A,
                     const float *Dskip, float *state, float *y, int ldy)
{
    (void)ctx;
    if ((long)T * H * P * N <= SCAN_PARALLEL_MIN) {
        scan_heads(0, H, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, y, ldy);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(H, &first, &last);
        scan_heads(first, last, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, y, ldy);
    }
}

/* ---- training: the scan with checkpoints, its backward, and the head mask ---- */

/* The training scan keeps a state every SSD_CHECKPOINT steps, not every state: all of
 * them were T H P N floats written by the forward and read back by the backward, which
 * made the scan memory-bound (67 MB a Mamba layer for the parent at 8 x 256 tokens). The
 * backward recomputes one stretch of SSD_CHECKPOINT states at a time, in cache, with the
 * same arithmetic as the forward, so the states it uses are bit for bit the forward's.
 * Layout of `states` (T slots of H P N floats, slot i at i H P N): slots 0 .. nc-2 hold
 * the state after steps K-1, 2K-1, ... (the start of stretches 1 .. nc-1, nc = ceil(T /
 * K)); the min(K, T) slots after them hold one stretch's states (the forward's running
 * state, then the backward's recomputed stretch). That fits in T slots for every T. */
#define SSD_CHECKPOINT 16

static int stretches(int T) { return (T + SSD_CHECKPOINT - 1) / SSD_CHECKPOINT; }

/* One step of a head's recurrence: s [P, N] from prev (NULL: a zero state; prev may be
 * s itself), and the scan's output row yt unless it is NULL (then Ct is not read). The
 * state takes the same operations either way, so a recomputed state is the saved one. */
static void scan_step(int P, int N, float d, float decay, const float *xt, const float *Bt, const float *Ct,
                      float Dskip, const float *prev, float *s, float *yt)
{
    for (int p = 0; p < P; p++) {
        float *sp = s + (size_t)p * N;
        const float *pp = prev ? prev + (size_t)p * N : NULL;
        float dx = d * xt[p];
        if (pp && yt) {
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int n = 0; n < N; n++) {
                sp[n] = decay * pp[n] + dx * Bt[n];
                acc += sp[n] * Ct[n];
            }
            yt[p] = acc + Dskip * xt[p];
        } else if (yt) {
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int n = 0; n < N; n++) {
                sp[n] = dx * Bt[n];
                acc += sp[n] * Ct[n];
            }
            yt[p] = acc + Dskip * xt[p];
        } else if (pp) {
#pragma omp simd
            for (int n = 0; n < N; n++)
                sp[n] = decay * pp[n] + dx * Bt[n];
        } else {
#pragma omp simd
            for (int n = 0; n < N; n++)
                sp[n] = dx * Bt[n];
        }
    }
}

void ac_cpu_ssd_scan_save(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                          const float *B, const float *C, int ldbc, const float *dt, const float *A,
                          const float *Dskip, const float *state0, float *states, float *y, int ldy)
{
    (void)ctx;
    int heads_per_group = H / G, nc = stretches(T);
    size_t step = (size_t)H * P * N, hpn = (size_t)P * N;
#pragma omp parallel for schedule(static) if ((long)T * H * P * N > SCAN_PARALLEL_MIN)
    for (int h = 0; h < H; h++) {
        int g = h / heads_per_group;
        float *s = states + (size_t)(nc - 1) * step + h * hpn; /* the running state, updated in place */
        const float *prev = state0 ? state0 + h * hpn : NULL;
        for (int t = 0; t < T; t++) {
            float d = dt[(size_t)t * H + h];
            scan_step(P, N, d, ac_cpu_expf(d * A[h]), x + (size_t)t * ldx + (size_t)h * P,
                      B + (size_t)t * ldbc + (size_t)g * N, C + (size_t)t * ldbc + (size_t)g * N, Dskip[h], prev, s,
                      y + (size_t)t * ldy + (size_t)h * P);
            if ((t + 1) % SSD_CHECKPOINT == 0 && t + 1 < T)
                memcpy(states + (size_t)(t / SSD_CHECKPOINT) * step + h * hpn, s, hpn * sizeof *s);
            prev = s;
        }
    }
}

/* Per head (in parallel), stretch by stretch from the last, recomputing its states
 * first, then per channel p, backwards in time with the carried state gradient
 * g[n] = dL/ds_{t+1}[p, n] * exp(dt_{t+1} A) (N floats of the work buffer):
 *   ds_t   = dy_t[p] C_t + g
 *   dx_t   = D dy_t[p] + dt_t (ds_t . B_t)
 *   ddt_t += x_t[p] (ds_t . B_t) + A exp(dt_t A) (ds_t . s_{t-1})
 *   dA    += dt_t exp(dt_t A) (ds_t . s_{t-1});  dD += dy_t[p] x_t[p]
 *   dB_t  += dt_t x_t[p] ds_t;  dC_t += dy_t[p] s_t
 * dB and dC go to the head's own rows of the work buffer, summed over the heads of each
 * group afterwards, so no two threads write one float. */
void ac_cpu_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                              const float *B, const float *C, int ldbc, const float *dt, const float *A,
                              const float *Dskip, const float *state0, float *states, const float *dy,
                              int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt, float *dA,
                              float *dD, float *work)
{
    (void)ctx;
    int heads_per_group = H / G, nc = stretches(T);
    size_t step = (size_t)H * P * N, hpn = (size_t)P * N;
    size_t head_work = (size_t)2 * T * N + (size_t)P * N; /* dB rows [T, N], dC rows [T, N], carry [P, N] */
#pragma omp parallel for schedule(static) if ((long)T * H * P * N > 16384)
    for (int h = 0; h < H; h++) {
        int g = h / heads_per_group;
        float *wdB = work + (size_t)h * head_work;
        float *wdC = wdB + (size_t)T * N;
        float *carry = wdC + (size_t)T * N;
        for (size_t i = 0; i < head_work; i++)
            wdB[i] = 0.0f;
        float a_sum = 0.0f, d_sum = 0.0f;
        float *stretch = states + (size_t)(nc - 1) * step + h * hpn; /* slot k of it at k * step */
        for (int c = nc - 1; c >= 0; c--) {
            int t0 = c * SSD_CHECKPOINT, t1 = t0 + SSD_CHECKPOINT < T ? t0 + SSD_CHECKPOINT : T;
            const float *start = c > 0 ? states + (size_t)(c - 1) * step + h * hpn : state0 ? state0 + h * hpn : NULL;
            for (int t = t0; t < t1; t++) {
                float d = dt[(size_t)t * H + h];
                scan_step(P, N, d, ac_cpu_expf(d * A[h]), x + (size_t)t * ldx + (size_t)h * P,
                          B + (size_t)t * ldbc + (size_t)g * N, NULL, 0.0f,
                          t > t0 ? stretch + (size_t)(t - t0 - 1) * step : start, stretch + (size_t)(t - t0) * step,
                          NULL);
            }
            for (int t = t1 - 1; t >= t0; t--) {
                float d = dt[(size_t)t * H + h];
                float decay = ac_cpu_expf(d * A[h]);
                const float *Bt = B + (size_t)t * ldbc + (size_t)g * N;
                const float *Ct = C + (size_t)t * ldbc + (size_t)g * N;
                const float *st = stretch + (size_t)(t - t0) * step;
                const float *prev = t > t0 ? st - step : start;
                float *rB = wdB + (size_t)t * N, *rC = wdC + (size_t)t * N;
                float ddt_sum = 0.0f;
                for (int p = 0; p < P; p++) {
                    float xp = x[(size_t)t * ldx + (size_t)h * P + p];
                    float gy = dy[(size_t)t * lddy + (size_t)h * P + p];
                    const float *sp = st + (size_t)p * N;
                    float *cp = carry + (size_t)p * N;
                    float dsB = 0.0f, dsS = 0.0f, dxp = d * xp;
                    /* ds = dL/ds_t; its decayed value carries to step t-1; ds . s_{t-1} feeds ddt */
                    if (prev) {
                        const float *pp = prev + (size_t)p * N;
#pragma omp simd reduction(+ : dsB, dsS)
                        for (int n = 0; n < N; n++) {
                            float ds = gy * Ct[n] + cp[n];
                            dsB += ds * Bt[n];
                            dsS += ds * pp[n];
                            rB[n] += dxp * ds;
                            rC[n] += gy * sp[n];
                            cp[n] = ds * decay;
                        }
                    } else {
#pragma omp simd reduction(+ : dsB)
                        for (int n = 0; n < N; n++) {
                            float ds = gy * Ct[n] + cp[n];
                            dsB += ds * Bt[n];
                            rB[n] += dxp * ds;
                            rC[n] += gy * sp[n];
                            cp[n] = ds * decay;
                        }
                    }
                    dx[(size_t)t * lddx + (size_t)h * P + p] = Dskip[h] * gy + d * dsB;
                    ddt_sum += xp * dsB + A[h] * decay * dsS;
                    a_sum += d * decay * dsS;
                    d_sum += gy * xp;
                }
                ddt[(size_t)t * H + h] = ddt_sum;
            }
        }
        if (dA)
            dA[h] += a_sum;
        if (dD)
            dD[h] += d_sum;
    }
    /* dB_t and dC_t of group g: the sum of its heads' rows */
#pragma omp parallel for schedule(static) if ((long)T * H * N > 65536)
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++) {
            float *oB = dB + (size_t)t * lddbc + (size_t)g * N;
            float *oC = dC + (size_t)t * lddbc + (size_t)g * N;
            for (int n = 0; n < N; n++) {
                float sb = 0.0f, sc = 0.0f;
                for (int h = g * heads_per_group; h < (g + 1) * heads_per_group; h++) {
                    const float *wdB = work + (size_t)h * head_work;
                    sb += wdB[(size_t)t * N + n];
                    sc += wdB[(size_t)(T + t) * N + n];
                }
                oB[n] = sb;
                oC[n] = sc;
            }
        }
}

void ac_cpu_mul_heads(ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if ((long)T * H * P > 65536)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            float m = mask[h];
            float *xh = x + (size_t)t * ldx + (size_t)h * P;
            for (int p = 0; p < P; p++)
                xh[p] *= m;
        }
}

void ac_cpu_mul_heads_backward(ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,
                               float *dy, int lddy, float *dmask)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if ((long)T * H * P > 65536)
    for (int h = 0; h < H; h++) {
        float m = mask[h], sum = 0.0f;
        for (int t = 0; t < T; t++) {
            const float *yh = y + (size_t)t * ldy + (size_t)h * P;
            float *dh = dy + (size_t)t * lddy + (size_t)h * P;
            for (int p = 0; p < P; p++) {
                sum += dh[p] * yh[p];
                dh[p] *= m;
            }
        }
        if (dmask)
            dmask[h] += sum;
    }
}
