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
 * scan_step's, so the states are the same bits; y sums over n in another order (see
 * scan_step_block). With checkpoints (not NULL), the state after steps K-1, 2K-1, ...
 * before the last (K = SSD_CHECKPOINT) goes there in [P, N], checkpoint i at i *
 * ckpt_stride. */
enum { SCAN_TRANSPOSED_MIN_T = 8, SCAN_TRANSPOSED_MAX_STATE = 8192 };

/* out [cols, rows] = in [rows, cols]^T, written in order (strided reads cost less than
 * strided writes). */
static void transpose(int rows, int cols, const float *in, float *out)
{
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++)
            out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}

/* One step over channels [p0, p0 + SCAN_P_BLOCK) of the transposed state: every state's
 * row of the block updated and its y (with the skip term) summed in registers. The sum
 * over the N states runs as SCAN_Y_CHAINS interleaved partial sums (state n into chain
 * n % 4, a leftover n into chain 0), added pairwise at the end: one running sum made each
 * step a chain of N dependent adds, slower a head step (see docs/results.md). */
enum { SCAN_P_BLOCK = 16, SCAN_Y_CHAINS = 4, SCAN_DECAY_BLOCK = 32 };

static void scan_step_block(int P, int N, int p0, float decay, const float *dx, const float *Bt, const float *Ct,
                            const float *x, float Dskip, float *sT, float *y)
{
    float a0[SCAN_P_BLOCK] = {0}, a1[SCAN_P_BLOCK] = {0}, a2[SCAN_P_BLOCK] = {0}, a3[SCAN_P_BLOCK] = {0};
    float u[SCAN_P_BLOCK];
    memcpy(u, dx + p0, sizeof u);
    int n = 0;
    for (; n + SCAN_Y_CHAINS <= N; n += SCAN_Y_CHAINS) {
        float *r0 = sT + (size_t)n * P + p0, *r1 = r0 + P, *r2 = r1 + P, *r3 = r2 + P;
        const float *b = Bt + n, *c = Ct + n;
#pragma omp simd
        for (int j = 0; j < SCAN_P_BLOCK; j++) {
            float v0 = decay * r0[j] + u[j] * b[0], v1 = decay * r1[j] + u[j] * b[1];
            float v2 = decay * r2[j] + u[j] * b[2], v3 = decay * r3[j] + u[j] * b[3];
            r0[j] = v0;
            r1[j] = v1;
            r2[j] = v2;
            r3[j] = v3;
            a0[j] += v0 * c[0];
            a1[j] += v1 * c[1];
            a2[j] += v2 * c[2];
            a3[j] += v3 * c[3];
        }
    }
    for (; n < N; n++) {
        float *row = sT + (size_t)n * P + p0, b = Bt[n], c = Ct[n];
#pragma omp simd
        for (int j = 0; j < SCAN_P_BLOCK; j++) {
            float v = decay * row[j] + u[j] * b;
            row[j] = v;
            a0[j] += v * c;
        }
    }
#pragma omp simd
    for (int j = 0; j < SCAN_P_BLOCK; j++)
        y[p0 + j] = ((a0[j] + a1[j]) + (a2[j] + a3[j])) + Dskip * x[p0 + j];
}

static void scan_head_transposed(int T, int P, int N, const float *x, int ldx, const float *B, const float *C,
                                 int ldbc, const float *dt, int ldt, float A, float Dskip, float *state, float *y,
                                 int ldy, float *checkpoints, size_t ckpt_stride)
{
    float sT[SCAN_TRANSPOSED_MAX_STATE], dx[SCAN_TRANSPOSED_MAX_STATE / 8];
    float decays[SCAN_DECAY_BLOCK];
    transpose(P, N, state, sT);
    for (int t = 0; t < T; t++) {
        if (t % SCAN_DECAY_BLOCK == 0) { /* the next steps' decays in vectors, off the steps' path */
            int steps = T - t < SCAN_DECAY_BLOCK ? T - t : SCAN_DECAY_BLOCK;
#pragma omp simd
            for (int i = 0; i < steps; i++)
                decays[i] = ac_cpu_expf(dt[(size_t)(t + i) * ldt] * A);
        }
        float d = dt[(size_t)t * ldt], decay = decays[t % SCAN_DECAY_BLOCK];
        const float *xt = x + (size_t)t * ldx, *Bt = B + (size_t)t * ldbc, *Ct = C + (size_t)t * ldbc;
        float *yt = y + (size_t)t * ldy;
        int blocked = P / SCAN_P_BLOCK * SCAN_P_BLOCK;
#pragma omp simd
        for (int p = 0; p < P; p++)
            dx[p] = d * xt[p];
        for (int p0 = 0; p0 < blocked; p0 += SCAN_P_BLOCK)
            scan_step_block(P, N, p0, decay, dx, Bt, Ct, xt, Dskip, sT, yt);
        for (int p = blocked; p < P; p++) /* the last P % SCAN_P_BLOCK channels */
            yt[p] = 0.0f;
        for (int n = 0; blocked < P && n < N; n++) {
            float *row = sT + (size_t)n * P, b = Bt[n], c = Ct[n];
#pragma omp simd
            for (int p = blocked; p < P; p++) {
                row[p] = decay * row[p] + dx[p] * b;
                yt[p] += row[p] * c;
            }
        }
#pragma omp simd
        for (int p = blocked; p < P; p++)
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
 * backward needs only the state at the start of each chunk of SSD_CHECKPOINT steps (see
 * its chunked form below). Layout of `states` (nc = ceil(T / K) slots of H P N floats,
 * slot i at i H P N): slots 0 .. nc-2 hold the state after steps K-1, 2K-1, ... (the
 * start of chunks 1 .. nc-1); slot nc-1 the running state while the forward scans. */
static int chunks(int T) { return (T + SSD_CHECKPOINT - 1) / SSD_CHECKPOINT; }

/* One step of a head's recurrence: s [P, N] from prev (NULL: a zero state; prev may be
 * s itself), and the scan's output row yt. */
static void scan_step(int P, int N, float d, float decay, const float *xt, const float *Bt, const float *Ct,
                      float Dskip, const float *prev, float *s, float *yt)
{
    for (int p = 0; p < P; p++) {
        float *sp = s + (size_t)p * N;
        const float *pp = prev ? prev + (size_t)p * N : NULL;
        float dx = d * xt[p], acc = 0.0f;
        if (pp) {
#pragma omp simd reduction(+ : acc)
            for (int n = 0; n < N; n++) {
                sp[n] = decay * pp[n] + dx * Bt[n];
                acc += sp[n] * Ct[n];
            }
        } else {
#pragma omp simd reduction(+ : acc)
            for (int n = 0; n < N; n++) {
                sp[n] = dx * Bt[n];
                acc += sp[n] * Ct[n];
            }
        }
        yt[p] = acc + Dskip * xt[p];
    }
}

void ac_cpu_ssd_scan_save(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                          const float *B, const float *C, int ldbc, const float *dt, const float *A,
                          const float *Dskip, const float *state0, float *states, float *y, int ldy)
{
    (void)ctx;
    int heads_per_group = H / G, nc = chunks(T);
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

/* The backward runs chunk by chunk (a chunk is the stretch between two kept states, Q =
 * SSD_CHECKPOINT steps), from the last, in the chunked (matrix) form of the recurrence
 * instead of step by step: with the decays' products L[i][j] = prod_{j<k<=i} exp(dt_k A)
 * inside a chunk, e_i = L[i][-1] (from its start) and w_j = L[Q-1][j] (to its end), and
 * Xd_j = dt_j x_j,
 *   y_i   = sum_{j<=i} L[i][j] (C_i . B_j) Xd_j + e_i s_start C_i + D x_i
 *   s_end = e_{Q-1} s_start + sum_j w_j Xd_j B_j^T
 * so a chunk's gradients are small matrix products (OpenBLAS's small-matrix kernels) and
 * the gradient of s_start goes on to the chunk before. The step-by-step backward read and
 * wrote a [P, N] carry per step and recomputed every state; this one needs only the kept
 * states. The gradient of each log decay a_k = dt_k A sums every product that spans step
 * k: R[i][j] = dL/dL[i][j] L[i][j] over j < k <= i, which gives ddt (times A) and dA
 * (times dt).
 *
 * A thread runs a unit: some heads of one group, which share B and C, so C B^T, the dC
 * and dB products and those with the states run once for the unit's heads together
 * (their [Q, P] blocks side by side, their states stacked as they lie in `states`). */
typedef struct {
    int T, H, P, N, G, Q, ldx, ldbc, lddy, lddx, lddbc;
    const float *x, *B, *C, *dt, *A, *Dskip, *dy, *state0, *states;
    float *dx, *dB, *dC, *ddt, *dA, *dD;
} ssd_backward_args;

enum { VEC = 7 }; /* a head's vectors of Q: dt, decay, e, w, col0, da, V */

/* Heads [h0, h0 + nh) of group g and their scratch (`per head` arrays hold nh, head k's
 * at k times the size; the [Q, nh P] ones hold head k's block at column k P). */
typedef struct {
    int g, h0, nh, Q;
    float *rB, *rC;           /* the unit's dB and dC rows [T, N] (ld ldr) */
    int ldr;
    float *BT;                /* [N, Q]: the chunk's B transposed */
    float *CB, *dM, *M, *dGs; /* [Q, Q]: C B^T; a head's dY Xd^T and L o C B^T; sum over heads of L o dM */
    float *xdT;               /* [P, Q]: a head's Xd transposed */
    float *Z;                 /* [Q, N]: a head's dY s_start */
    float *R;                 /* per head [Q, Q]: L, then R */
    float *vec;               /* per head VEC [Q]: dt, decay, e, w, col0 (R[i][-1]), da, V */
    float *xd;                /* per head [Q, P] */
    float *dxd, *scaled, *xw, *bds; /* [Q, nh P]: dL/dXd; e o dY; w o Xd; B dS_end^T */
    float *dS, *dS_next;      /* [nh P, N]: dL/ds at the chunk's end, at its start */
    float *dST, *dST_next;    /* [N, nh P]: the same transposed */
    float *sums;              /* per head 2: dA's and dD's sums */
} ssd_unit;

/* n floats at *off from base (NULL when base is: counting only), *off moved past them */
static float *take(float *base, size_t *off, size_t n)
{
    float *p = base ? base + *off : NULL;
    *off += n;
    return p;
}

/* A unit of nh heads at base + *off, *off moved past it (base NULL: counts only). Its own
 * dB and dC rows only when it shares its group with other units. */
static ssd_unit carve_unit(float *base, size_t *off, int T, int Q, int P, int N, int nh, int own_rows)
{
    size_t QQ = (size_t)Q * Q, QP = (size_t)Q * P, hP = (size_t)nh * P;
    ssd_unit u = {.nh = nh, .Q = Q, .ldr = N};
    if (own_rows) {
        u.rB = take(base, off, (size_t)T * N);
        u.rC = take(base, off, (size_t)T * N);
    }
    u.BT = take(base, off, (size_t)N * Q);
    u.CB = take(base, off, QQ), u.dM = take(base, off, QQ), u.M = take(base, off, QQ), u.dGs = take(base, off, QQ);
    u.xdT = take(base, off, QP), u.Z = take(base, off, (size_t)Q * N);
    u.R = take(base, off, nh * QQ), u.vec = take(base, off, nh * VEC * (size_t)Q), u.xd = take(base, off, nh * QP);
    u.dxd = take(base, off, Q * hP), u.scaled = take(base, off, Q * hP);
    u.xw = take(base, off, Q * hP), u.bds = take(base, off, Q * hP);
    u.dS = take(base, off, hP * N), u.dS_next = take(base, off, hP * N);
    u.dST = take(base, off, hP * N), u.dST_next = take(base, off, hP * N);
    u.sums = take(base, off, 2 * (size_t)nh);
    return u;
}

static size_t unit_floats(int T, int Q, int P, int N, int nh, int own_rows)
{
    size_t off = 0;
    carve_unit(NULL, &off, T, Q, P, N, nh, own_rows);
    return off;
}

/* C [M, N] = op(A) B + beta C, row-major, op(A) = A [M, K], or A^T with A [K, M] when
 * trans_a. B is never transposed: OpenBLAS's small kernel for that form ran far slower
 * than the others on these shapes (32 x 32 x 32; see docs/results.md), so the chunk keeps
 * transposed copies where it needs them. */
static void gemm(int trans_a, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
                beta, C, ldc);
}

static float dot(int n, const float *a, const float *b)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static float *head_vec(const ssd_unit *u, int k, int which) { return u->vec + ((size_t)k * VEC + which) * u->Q; }

/* Head k's decays over the chunk's n steps, its L (lower triangle and diagonal; row i is
 * row i-1 times decay_i), e and w, Xd and (for the unit) Xd transposed. */
static void head_decays(const ssd_backward_args *s, ssd_unit *u, int k, int t0, int n)
{
    int Q = u->Q, P = s->P, h = u->h0 + k;
    float *d = head_vec(u, k, 0), *decay = head_vec(u, k, 1), *e = head_vec(u, k, 2), *w = head_vec(u, k, 3);
    float *L = u->R + (size_t)k * Q * Q, *xd = u->xd + (size_t)k * Q * P;
    for (int i = 0; i < n; i++) {
        d[i] = s->dt[(size_t)(t0 + i) * s->H + h];
        decay[i] = ac_cpu_expf(d[i] * s->A[h]);
        const float *xi = s->x + (size_t)(t0 + i) * s->ldx + (size_t)h * P;
        for (int p = 0; p < P; p++)
            xd[(size_t)i * P + p] = u->xdT[(size_t)p * Q + i] = d[i] * xi[p];
    }
    for (int i = 0; i < n; i++) {
        float *row = L + (size_t)i * Q;
        const float *above = L + (size_t)(i > 0 ? i - 1 : 0) * Q;
#pragma omp simd
        for (int j = 0; j < i; j++)
            row[j] = above[j] * decay[i];
        row[i] = 1.0f;
        e[i] = i > 0 ? e[i - 1] * decay[i] : decay[0];
    }
    for (int j = 0; j < n; j++)
        w[j] = L[(size_t)(n - 1) * Q + j];
}

/* Head k's part inside the chunk: dM = dY Xd^T; then M = L o C B^T (the mixing matrix),
 * dGs += L o dM (dL/d(C B^T), summed over the unit's heads), L <- R = L o dM o C B^T;
 * and dXd = M^T dY (overwritten). */
static void head_intra(const ssd_backward_args *s, ssd_unit *u, int k, int t0, int n)
{
    int Q = u->Q, P = s->P, ldh = u->nh * P;
    const float *dy0 = s->dy + (size_t)t0 * s->lddy + (size_t)(u->h0 + k) * P;
    float *L = u->R + (size_t)k * Q * Q;
    gemm(0, n, n, P, dy0, s->lddy, u->xdT, Q, 0.0f, u->dM, Q);
    for (int i = 0; i < n; i++) {
        float *l = L + (size_t)i * Q, *m = u->M + (size_t)i * Q, *dg = u->dGs + (size_t)i * Q;
        const float *cb = u->CB + (size_t)i * Q, *dm = u->dM + (size_t)i * Q;
#pragma omp simd
        for (int j = 0; j <= i; j++) {
            float dl = dm[j] * l[j];
            m[j] = l[j] * cb[j];
            dg[j] += dl;
            l[j] = dl * cb[j];
        }
        for (int j = i + 1; j < n; j++)
            m[j] = 0.0f;
    }
    gemm(1, n, P, n, u->M, Q, dy0, s->lddy, 0.0f, u->dxd + (size_t)k * P, ldh);
}

/* Head k's part through the start state (y_i += e_i s_start C_i): its block of e o dY,
 * and R[i][-1] = e_i dY_i . (s_start C_i) by way of Z = dY s_start (0 with no start). */
static void head_from_start(const ssd_backward_args *s, ssd_unit *u, int k, int t0, int n, const float *start,
                            const float *C0)
{
    int P = s->P, N = s->N, ldh = u->nh * P;
    const float *dy0 = s->dy + (size_t)t0 * s->lddy + (size_t)(u->h0 + k) * P;
    float *e = head_vec(u, k, 2), *col0 = head_vec(u, k, 4);
    for (int i = 0; i < n; i++)
        col0[i] = 0.0f;
    if (!start)
        return;
    for (int i = 0; i < n; i++) {
        const float *dyi = dy0 + (size_t)i * s->lddy;
        float *sc = u->scaled + (size_t)i * ldh + (size_t)k * P;
#pragma omp simd
        for (int p = 0; p < P; p++)
            sc[p] = e[i] * dyi[p];
    }
    gemm(0, n, N, P, dy0, s->lddy, start + (size_t)k * P * N, N, 0.0f, u->Z, N);
    for (int i = 0; i < n; i++)
        col0[i] = e[i] * dot(N, C0 + (size_t)i * s->ldbc, u->Z + (size_t)i * N);
}

/* The part through the end state (s_end = e_{n-1} s_start + sum_j w_j Xd_j B_j^T), given
 * its gradient in dS and dST: B dS^T for all heads at once, then per head R[n-1][j] and
 * R[n-1][-1] (+=), dXd (+=), w o Xd, and dS_next, dST_next (+=); dB rows (+=). */
static void unit_to_end(const ssd_backward_args *s, ssd_unit *u, int t0, int n, const float *start,
                        const float *B0, float *rB)
{
    int Q = u->Q, P = s->P, N = s->N, ldh = u->nh * P;
    size_t hpn = (size_t)P * N;
    gemm(0, n, ldh, N, B0, s->ldbc, u->dST, ldh, 0.0f, u->bds, ldh);
    for (int k = 0; k < u->nh; k++) {
        float *e = head_vec(u, k, 2), *w = head_vec(u, k, 3), *col0 = head_vec(u, k, 4);
        float *R_last = u->R + (size_t)k * Q * Q + (size_t)(n - 1) * Q;
        for (int j = 0; j < n; j++) {
            const float *xd = u->xd + ((size_t)k * Q + j) * P, *bds = u->bds + (size_t)j * ldh + (size_t)k * P;
            float *dxd = u->dxd + (size_t)j * ldh + (size_t)k * P, *xw = u->xw + (size_t)j * ldh + (size_t)k * P;
            R_last[j] += w[j] * dot(P, xd, bds);
#pragma omp simd
            for (int p = 0; p < P; p++) {
                dxd[p] += w[j] * bds[p];
                xw[p] = w[j] * xd[p];
            }
        }
        float e_end = e[n - 1];
        if (start)
            col0[n - 1] += e_end * dot(P * N, u->dS + k * hpn, start + k * hpn);
        if (t0 == 0) /* no chunk before: no dS_next */
            continue;
        for (size_t i = 0; i < hpn; i++)
            u->dS_next[k * hpn + i] += e_end * u->dS[k * hpn + i];
        for (int r = 0; r < N; r++) {
            float *to = u->dST_next + (size_t)r * ldh + (size_t)k * P;
            const float *from = u->dST + (size_t)r * ldh + (size_t)k * P;
#pragma omp simd
            for (int p = 0; p < P; p++)
                to[p] += e_end * from[p];
        }
    }
    gemm(0, n, N, ldh, u->xw, ldh, u->dS, N, 1.0f, rB, u->ldr);
}

/* Head k's dx and ddt (overwritten) and its sums for dA and dD over the chunk, from dXd
 * and R. da_k = sum_{i>=k} R[i][-1] + sum_{j<k} sum_{i>=k} R[i][j]: the inner sums are
 * carried in V, row by row from the last. */
static void head_steps(const ssd_backward_args *s, ssd_unit *u, int k, int t0, int n)
{
    int Q = u->Q, P = s->P, ldh = u->nh * P, h = u->h0 + k;
    float *d = head_vec(u, k, 0), *col0 = head_vec(u, k, 4), *da = head_vec(u, k, 5), *V = head_vec(u, k, 6);
    const float *R = u->R + (size_t)k * Q * Q;
    float tail = 0.0f, A = s->A[h], D = s->Dskip[h];
    for (int j = 0; j < n; j++)
        V[j] = 0.0f;
    for (int i = n - 1; i >= 0; i--) {
        const float *row = R + (size_t)i * Q;
        float below = 0.0f;
#pragma omp simd reduction(+ : below)
        for (int j = 0; j < i; j++) {
            V[j] += row[j];
            below += V[j];
        }
        tail += col0[i];
        da[i] = tail + below;
    }
    float a_sum = 0.0f, d_sum = 0.0f;
    for (int i = 0; i < n; i++) {
        size_t t = (size_t)(t0 + i);
        const float *xi = s->x + t * s->ldx + (size_t)h * P, *dyi = s->dy + t * s->lddy + (size_t)h * P;
        const float *dxd = u->dxd + (size_t)i * ldh + (size_t)k * P;
        float *dxi = s->dx + t * s->lddx + (size_t)h * P;
        float ddt = 0.0f, dd = 0.0f;
#pragma omp simd reduction(+ : ddt, dd)
        for (int p = 0; p < P; p++) {
            ddt += xi[p] * dxd[p];
            dd += xi[p] * dyi[p];
            dxi[p] = D * dyi[p] + d[i] * dxd[p];
        }
        s->ddt[t * s->H + h] = ddt + A * da[i];
        a_sum += d[i] * da[i];
        d_sum += dd;
    }
    u->sums[2 * k] += a_sum;
    u->sums[2 * k + 1] += d_sum;
}

/* Chunk c of the unit: C B^T once, each head's part inside the chunk and from its start,
 * the unit's dC and dB rows (overwritten, then +=) and dS_next, dST_next (overwritten)
 * for all its heads in one product each, the end state's part, then each head's steps. */
static void unit_chunk(const ssd_backward_args *s, ssd_unit *u, int c, int nc)
{
    int Q = u->Q, N = s->N, ldh = u->nh * s->P;
    int t0 = c * SSD_CHECKPOINT, n = s->T - t0 < SSD_CHECKPOINT ? s->T - t0 : SSD_CHECKPOINT;
    size_t hpn = (size_t)s->P * N;
    const float *start = c > 0      ? s->states + ((size_t)(c - 1) * s->H + u->h0) * hpn
                         : s->state0 ? s->state0 + u->h0 * hpn
                                     : NULL;
    const float *B0 = s->B + (size_t)t0 * s->ldbc + (size_t)u->g * N;
    const float *C0 = s->C + (size_t)t0 * s->ldbc + (size_t)u->g * N;
    float *rB = u->rB + (size_t)t0 * u->ldr, *rC = u->rC + (size_t)t0 * u->ldr;
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < N; j++)
            u->BT[(size_t)j * Q + r] = B0[(size_t)r * s->ldbc + j];
        for (int j = 0; j < n; j++)
            u->dGs[(size_t)r * Q + j] = 0.0f;
    }
    gemm(0, n, n, N, C0, s->ldbc, u->BT, Q, 0.0f, u->CB, Q);
    for (int k = 0; k < u->nh; k++) {
        head_decays(s, u, k, t0, n);
        head_intra(s, u, k, t0, n);
        head_from_start(s, u, k, t0, n, start, C0);
    }
    gemm(0, n, N, n, u->dGs, Q, B0, s->ldbc, 0.0f, rC, u->ldr);
    gemm(1, n, N, n, u->dGs, Q, C0, s->ldbc, 0.0f, rB, u->ldr);
    if (start)
        gemm(0, n, N, ldh, u->scaled, ldh, start, N, 1.0f, rC, u->ldr);
    if (t0 > 0) {
        gemm(1, ldh, N, n, u->scaled, ldh, C0, s->ldbc, 0.0f, u->dS_next, N);
        gemm(1, N, ldh, n, C0, s->ldbc, u->scaled, ldh, 0.0f, u->dST_next, ldh);
    }
    if (c < nc - 1) /* the last chunk's end state has no gradient */
        unit_to_end(s, u, t0, n, start, B0, rB);
    for (int k = 0; k < u->nh; k++)
        head_steps(s, u, k, t0, n);
    float *swap = u->dS;
    u->dS = u->dS_next, u->dS_next = swap;
    swap = u->dST;
    u->dST = u->dST_next, u->dST_next = swap;
}

/* How many units share a group: the largest divisor of its heads no more than the
 * threads each group would get (every unit then has as many heads). */
static int units_per_group(int heads_per_group, int G, int threads)
{
    int want = (threads + G - 1) / G, split = 1;
    for (int d = 1; d <= heads_per_group && d <= want; d++)
        if (heads_per_group % d == 0)
            split = d;
    return split;
}

/* Unit `index` (of `split` per group, nh heads each), its scratch at index * per_unit:
 * every chunk from the last, then its heads' dA and dD sums. A group's only unit writes
 * its dB and dC rows in place. */
static void backward_unit(const ssd_backward_args *s, float *work, int index, int split, int nh, size_t per_unit)
{
    size_t off = (size_t)index * per_unit;
    ssd_unit u = carve_unit(work, &off, s->T, s->Q, s->P, s->N, nh, split > 1);
    u.g = index / split;
    u.h0 = u.g * (s->H / s->G) + index % split * nh;
    if (split == 1) {
        u.rB = s->dB + (size_t)u.g * s->N;
        u.rC = s->dC + (size_t)u.g * s->N;
        u.ldr = s->lddbc;
    }
    for (int k = 0; k < 2 * nh; k++)
        u.sums[k] = 0.0f;
    int nc = chunks(s->T);
    for (int c = nc - 1; c >= 0; c--)
        unit_chunk(s, &u, c, nc);
    for (int k = 0; k < nh; k++) {
        if (s->dA)
            s->dA[u.h0 + k] += u.sums[2 * k];
        if (s->dD)
            s->dD[u.h0 + k] += u.sums[2 * k + 1];
    }
}

void ac_cpu_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                              const float *B, const float *C, int ldbc, const float *dt, const float *A,
                              const float *Dskip, const float *state0, float *states, const float *dy,
                              int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt, float *dA,
                              float *dD, float *work)
{
    (void)ctx;
    ssd_backward_args s = {.T = T, .H = H, .P = P, .N = N, .G = G, .Q = SSD_CHECKPOINT < T ? SSD_CHECKPOINT : T,
                           .ldx = ldx, .ldbc = ldbc, .lddy = lddy, .lddx = lddx, .lddbc = lddbc, .x = x, .B = B,
                           .C = C, .dt = dt, .A = A, .Dskip = Dskip, .dy = dy, .state0 = state0, .states = states,
                           .dx = dx, .dB = dB, .dC = dC, .ddt = ddt, .dA = dA, .dD = dD};
    /* on the calling thread when small: OpenBLAS in a team of one would start its own */
    int parallel = (long)T * H * P * N > 16384;
    int heads_per_group = H / G, split = units_per_group(heads_per_group, G, parallel ? omp_get_max_threads() : 1);
    int nh = heads_per_group / split, units = G * split;
    size_t per_unit = unit_floats(T, s.Q, P, N, nh, split > 1);
    if (!parallel) {
        for (int i = 0; i < units; i++)
            backward_unit(&s, work, i, split, nh, per_unit);
    } else {
#pragma omp parallel
        {
            long first, last;
            ac_cpu_thread_share(units, &first, &last);
            for (long i = first; i < last; i++)
                backward_unit(&s, work, (int)i, split, nh, per_unit);
        }
    }
    if (split == 1)
        return;
    /* dB_t and dC_t of group g: the sum of its units' rows (each unit's dB rows, then its
     * dC rows, at the start of its scratch) */
#pragma omp parallel for schedule(static) if ((long)T * G * N * split > 65536)
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int n = 0; n < N; n++) {
                float sb = 0.0f, sc = 0.0f;
                for (int k = 0; k < split; k++) {
                    const float *rows = work + (size_t)(g * split + k) * per_unit;
                    sb += rows[(size_t)t * N + n];
                    sc += rows[(size_t)(T + t) * N + n];
                }
                dB[(size_t)t * lddbc + (size_t)g * N + n] = sb;
                dC[(size_t)t * lddbc + (size_t)g * N + n] = sc;
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
