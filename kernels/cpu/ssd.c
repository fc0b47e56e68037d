#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_parallel.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* The training scan keeps a state every SSD_CHECKPOINT steps (see ac_cpu_ssd_scan_save). */
#define SSD_CHECKPOINT AC_CPU_SSD_STATE_INTERVAL

/* A prompt's scan of one head with its state held transposed, [N, P], so that each step
 * runs along P in vectors with no horizontal sums (the [P, N] layout needs one per
 * channel for y): s[n][p] = decay s[n][p] + (dt x[p]) B[n] is the same arithmetic as
 * scan_step's, so the states are the same bits; y sums over n in another order, four
 * states at a time (one read-add-write of y per four, not per state). With checkpoints
 * (not NULL), the state after steps K-1, 2K-1, ... before the last (K = SSD_CHECKPOINT)
 * goes there in [P, N], checkpoint i at i * ckpt_stride. */
enum { SCAN_TRANSPOSED_MIN_T = 8, SCAN_TRANSPOSED_MAX_STATE = 8192 };

static void transpose(int rows, int cols, const float *in, float *out)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}

/* One step over channels [p0, p0 + SCAN_P_BLOCK) of the transposed state: every state's
 * row of the block updated and its share of y summed in a block of registers over all N
 * states (y read and written once a step, not once per four states). */
enum { SCAN_P_BLOCK = 16 };

static void scan_step_block(int P, int N, int p0, float decay, const float *dx, const float *Bt, const float *Ct,
                            float *sT, float *y)
{
    float acc[SCAN_P_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
        float *row = sT + (size_t)n * P + p0, b = Bt[n], c = Ct[n];
#pragma omp simd
        for (int j = 0; j < SCAN_P_BLOCK; j++) {
            row[j] = decay * row[j] + dx[p0 + j] * b;
            acc[j] += row[j] * c;
        }
    }
#pragma omp simd
    for (int j = 0; j < SCAN_P_BLOCK; j++)
        y[p0 + j] = acc[j];
}

static void scan_head_transposed(int T, int P, int N, const float *x, int ldx, const float *B, const float *C,
                                 int ldbc, const float *dt, int ldt, float A, float Dskip, float *state, float *y,
                                 int ldy, float *checkpoints, size_t ckpt_stride)
{
    float sT[SCAN_TRANSPOSED_MAX_STATE], dx[SCAN_TRANSPOSED_MAX_STATE / 8];
    transpose(P, N, state, sT);
    for (int t = 0; t < T; t++) {
        float d = dt[(size_t)t * ldt], decay = ac_cpu_expf(d * A);
        const float *xt = x + (size_t)t * ldx, *Bt = B + (size_t)t * ldbc, *Ct = C + (size_t)t * ldbc;
        float *yt = y + (size_t)t * ldy;
        int blocked = P / SCAN_P_BLOCK * SCAN_P_BLOCK;
#pragma omp simd
        for (int p = 0; p < P; p++) {
            dx[p] = d * xt[p];
            yt[p] = 0.0f;
        }
        for (int p0 = 0; p0 < blocked; p0 += SCAN_P_BLOCK)
            scan_step_block(P, N, p0, decay, dx, Bt, Ct, sT, yt);
        for (int n = 0; blocked < P && n < N; n++) { /* the last P % SCAN_P_BLOCK channels */
            float *row = sT + (size_t)n * P, b = Bt[n], c = Ct[n];
#pragma omp simd
            for (int p = blocked; p < P; p++) {
                row[p] = decay * row[p] + dx[p] * b;
                yt[p] += row[p] * c;
            }
        }
#pragma omp simd
        for (int p = 0; p < P; p++)
            yt[p] += Dskip * xt[p];
        if (checkpoints && (t + 1) % SSD_CHECKPOINT == 0 && t + 1 < T)
            transpose(N, P, sT, checkpoints + (size_t)(t / SSD_CHECKPOINT) * ckpt_stride);
    }
    transpose(N, P, sT, state);
}

/* Whether a scan of T steps runs transposed (long enough to pay for the transposes, and
 * the state fits scan_head_transposed's stack). */
static int scan_transposed(int T, int P, int N)
{
    return T >= SCAN_TRANSPOSED_MIN_T && (size_t)P * N <= SCAN_TRANSPOSED_MAX_STATE &&
           P <= SCAN_TRANSPOSED_MAX_STATE / 8;
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
        if (scan_transposed(T, P, N)) {
            scan_head_transposed(T, P, N, x + (size_t)h * P, ldx, B + (size_t)g * N, C + (size_t)g * N, ldbc, dt + h, H,
                                 A[h], Dskip[h], s, y + (size_t)h * P, ldy, NULL, 0);
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
#pragma omp simd
                for (int n = 0; n < N; n++)
                    sp[n] = decay * sp[n] + dx * Bt[n];
            }
            /* y = s C by OpenBLAS's matrix-vector product, which sums several channels at
             * once (an omp simd reduction per channel ends adding its lanes one by one:
             * most of a decode step's scan) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, P, N, 1.0f, s, N, Ct, 1, 0.0f, yt, 1);
#pragma omp simd
            for (int p = 0; p < P; p++)
                yt[p] += Dskip[h] * xt[p];
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
 * backward recomputes one stretch of SSD_CHECKPOINT states at a time, in cache (its work
 * buffer), with the same arithmetic as the forward, so the states it uses are bit for bit
 * the forward's. Layout of `states` (nc = ceil(T / K) slots of H P N floats, slot i at
 * i H P N): slots 0 .. nc-2 hold the state after steps K-1, 2K-1, ... (the start of
 * stretches 1 .. nc-1); slot nc-1 the running state while the forward scans. */
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
        if (scan_transposed(T, P, N)) {
            for (size_t i = 0; i < hpn; i++)
                s[i] = prev ? prev[i] : 0.0f;
            scan_head_transposed(T, P, N, x + (size_t)h * P, ldx, B + (size_t)g * N, C + (size_t)g * N, ldbc, dt + h, H,
                                 A[h], Dskip[h], s, y + (size_t)h * P, ldy, states + h * hpn, step);
            continue;
        }
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

/* One step t of a head's backward, given the carried state gradient K = dL/ds_{t+1}
 * exp(dt_{t+1} A) (zero at the last step) twice, [P, N] and transposed [N, P] (the same
 * bits): ds_t = dy_t C_t^T + K, then
 *   dB_t += dt_t ds_t^T x_t;  dC_t += s_t^T dy_t          (rows of N, summed over p)
 *   dx_t  = D dy_t + dt_t ds_t B_t                          (one per channel p)
 *   ddt_t = x_t . (ds_t B_t) + A exp(dt_t A) <ds_t, s_{t-1}>
 *   dA   += dt_t exp(dt_t A) <ds_t, s_{t-1}>;  dD += dy_t . x_t
 * and K for step t-1 = ds_t exp(dt_t A). Every sum runs along a row of one of the two
 * layouts, in vectors: with one layout, half of them were a horizontal sum per channel
 * or per state, which was most of the backward's time. */
typedef struct {
    int P, N;
    float d, decay, A, Dskip;
    const float *x, *gy, *B, *C; /* this step's x and dy [P], B and C [N] */
    const float *s, *prev;       /* s_t and s_{t-1} [P, N] (prev NULL: a zero state) */
    float *K, *KT, *dot;         /* the carry [P, N] and [N, P]; dot [N] scratch */
    float *rB, *rC, *dx;         /* this step's dB and dC rows [N] (+=), dx [P] */
} scan_back_step;

/* Pass 1 for channels p .. p + 3: ds for each, their sums into the dB, dC and
 * <ds, s_{t-1}> rows, their carries. Four channels a pass cut the rows' read-add-write
 * chains through memory (which bound the loop at these sizes) by four. */
static void backward_channels4(const scan_back_step *b, int p, const float *prev)
{
    int N = b->N;
    const float *gy = b->gy + p, *x = b->x + p, *s = b->s + (size_t)p * N, *pv = prev + (size_t)p * N;
    float *k = b->K + (size_t)p * N;
    float e0 = b->d * x[0], e1 = b->d * x[1], e2 = b->d * x[2], e3 = b->d * x[3];
#pragma omp simd
    for (int n = 0; n < N; n++) {
        float c = b->C[n];
        float d0 = gy[0] * c + k[n], d1 = gy[1] * c + k[N + n], d2 = gy[2] * c + k[2 * N + n],
              d3 = gy[3] * c + k[3 * N + n];
        b->rB[n] += (e0 * d0 + e1 * d1) + (e2 * d2 + e3 * d3);
        b->rC[n] += (gy[0] * s[n] + gy[1] * s[N + n]) + (gy[2] * s[2 * N + n] + gy[3] * s[3 * N + n]);
        b->dot[n] += (d0 * pv[n] + d1 * pv[N + n]) + (d2 * pv[2 * N + n] + d3 * pv[3 * N + n]);
        k[n] = d0 * b->decay;
        k[N + n] = d1 * b->decay;
        k[2 * N + n] = d2 * b->decay;
        k[3 * N + n] = d3 * b->decay;
    }
}

/* Pass 1 for channel p alone (the last P % 4). */
static void backward_channel(const scan_back_step *b, int p, const float *prev)
{
    int N = b->N;
    float gy = b->gy[p], e = b->d * b->x[p];
    const float *s = b->s + (size_t)p * N, *pv = prev + (size_t)p * N;
    float *k = b->K + (size_t)p * N;
#pragma omp simd
    for (int n = 0; n < N; n++) {
        float d = gy * b->C[n] + k[n];
        b->rB[n] += e * d;
        b->rC[n] += gy * s[n];
        b->dot[n] += d * pv[n];
        k[n] = d * b->decay;
    }
}

/* Pass 2 for states n .. n + 3: ds again, along P in the transposed carry, times B into
 * dx (which holds ds_t B_t meanwhile), and their carries. */
static void backward_states4(const scan_back_step *b, int n)
{
    int P = b->P;
    const float *c = b->C + n, *bn = b->B + n;
    float *kt = b->KT + (size_t)n * P;
#pragma omp simd
    for (int p = 0; p < P; p++) {
        float g = b->gy[p];
        float d0 = g * c[0] + kt[p], d1 = g * c[1] + kt[P + p], d2 = g * c[2] + kt[2 * P + p],
              d3 = g * c[3] + kt[3 * P + p];
        b->dx[p] += (d0 * bn[0] + d1 * bn[1]) + (d2 * bn[2] + d3 * bn[3]);
        kt[p] = d0 * b->decay;
        kt[P + p] = d1 * b->decay;
        kt[2 * P + p] = d2 * b->decay;
        kt[3 * P + p] = d3 * b->decay;
    }
}

/* Pass 2 for state n alone (the last N % 4). */
static void backward_state(const scan_back_step *b, int n)
{
    int P = b->P;
    float c = b->C[n], bn = b->B[n];
    float *kt = b->KT + (size_t)n * P;
#pragma omp simd
    for (int p = 0; p < P; p++) {
        float d = b->gy[p] * c + kt[p];
        b->dx[p] += d * bn;
        kt[p] = d * b->decay;
    }
}

/* Returns ddt_t; adds to *a_sum (dA before its factor) and *d_sum (dD). */
static float scan_backward_step(const scan_back_step *b, float *a_sum, float *d_sum)
{
    int P = b->P, N = b->N, p = 0, n = 0;
    memset(b->dot, 0, (size_t)N * sizeof *b->dot);
    memset(b->dx, 0, (size_t)P * sizeof *b->dx);
    /* without s_{t-1} (a zero state) the dot product is not used: s_t stands in */
    const float *prev = b->prev ? b->prev : b->s;
    for (; p + 4 <= P; p += 4)
        backward_channels4(b, p, prev);
    for (; p < P; p++)
        backward_channel(b, p, prev);
    for (; n + 4 <= N; n += 4)
        backward_states4(b, n);
    for (; n < N; n++)
        backward_state(b, n);
    /* the step's sums in vectors (chains of scalar adds were a tenth of the step) */
    float ddt = 0.0f, dsS = 0.0f, dD = 0.0f;
#pragma omp simd reduction(+ : ddt, dD)
    for (p = 0; p < P; p++) {
        float dsB = b->dx[p];
        ddt += b->x[p] * dsB;
        dD += b->gy[p] * b->x[p];
        b->dx[p] = b->Dskip * b->gy[p] + b->d * dsB;
    }
    if (b->prev) {
#pragma omp simd reduction(+ : dsS)
        for (n = 0; n < N; n++)
            dsS += b->dot[n];
    }
    *d_sum += dD;
    *a_sum += b->d * b->decay * dsS;
    return ddt + b->A * b->decay * dsS;
}

/* Per head (in parallel), stretch by stretch from the last, recomputing its states
 * first, then backwards in time (scan_backward_step). dB and dC go to the head's own rows
 * of the work buffer, summed over the heads of each group afterwards, so no two threads
 * write one float. */
void ac_cpu_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                              const float *B, const float *C, int ldbc, const float *dt, const float *A,
                              const float *Dskip, const float *state0, float *states, const float *dy,
                              int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt, float *dA,
                              float *dD, float *work)
{
    (void)ctx;
    int heads_per_group = H / G, nc = stretches(T);
    size_t step = (size_t)H * P * N, hpn = (size_t)P * N;
    /* dB rows [T, N], dC rows [T, N], the carry [P, N] and [N, P], a row [N], a stretch's
     * states (ac_k_ssd_backward_work_floats) */
    int stretch_len = SSD_CHECKPOINT < T ? SSD_CHECKPOINT : T;
    size_t head_work = ((size_t)2 * T + 2 * (size_t)P + 1 + (size_t)stretch_len * P) * N;
#pragma omp parallel for schedule(static) if ((long)T * H * P * N > 16384)
    for (int h = 0; h < H; h++) {
        int g = h / heads_per_group;
        float *wdB = work + (size_t)h * head_work;
        float *wdC = wdB + (size_t)T * N;
        scan_back_step b = {.P = P, .N = N, .A = A[h], .Dskip = Dskip[h], .K = wdC + (size_t)T * N};
        b.KT = b.K + hpn;
        b.dot = b.KT + hpn;
        for (size_t i = 0; i < (size_t)2 * T * N; i++)
            wdB[i] = 0.0f;
        for (size_t i = 0; i < 2 * hpn; i++)
            b.K[i] = 0.0f;
        float a_sum = 0.0f, d_sum = 0.0f;
        float *stretch = b.dot + N; /* state k of it at k * hpn */
        for (int c = nc - 1; c >= 0; c--) {
            int t0 = c * SSD_CHECKPOINT, t1 = t0 + SSD_CHECKPOINT < T ? t0 + SSD_CHECKPOINT : T;
            const float *start = c > 0 ? states + (size_t)(c - 1) * step + h * hpn : state0 ? state0 + h * hpn : NULL;
            for (int t = t0; t < t1; t++) {
                float d = dt[(size_t)t * H + h];
                scan_step(P, N, d, ac_cpu_expf(d * A[h]), x + (size_t)t * ldx + (size_t)h * P,
                          B + (size_t)t * ldbc + (size_t)g * N, NULL, 0.0f,
                          t > t0 ? stretch + (size_t)(t - t0 - 1) * hpn : start, stretch + (size_t)(t - t0) * hpn,
                          NULL);
            }
            for (int t = t1 - 1; t >= t0; t--) {
                b.d = dt[(size_t)t * H + h];
                b.decay = ac_cpu_expf(b.d * A[h]);
                b.x = x + (size_t)t * ldx + (size_t)h * P;
                b.gy = dy + (size_t)t * lddy + (size_t)h * P;
                b.B = B + (size_t)t * ldbc + (size_t)g * N;
                b.C = C + (size_t)t * ldbc + (size_t)g * N;
                b.s = stretch + (size_t)(t - t0) * hpn;
                b.prev = t > t0 ? b.s - hpn : start;
                b.rB = wdB + (size_t)t * N;
                b.rC = wdC + (size_t)t * N;
                b.dx = dx + (size_t)t * lddx + (size_t)h * P;
                ddt[(size_t)t * H + h] = scan_backward_step(&b, &a_sum, &d_sum);
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
