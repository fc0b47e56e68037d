/* The CUDA selective scan of Mamba2 and its backward (kernels/cpu/ssd.c is the reference):
 *   s_t = exp(dt_t A) s_{t-1} + dt_t x_t B_t^T ;  y_t = s_t C_t + D x_t
 * The recurrence of one (head h, channel p) never reads another's state, so a warp owns
 * one (h, p), its lanes own state columns n, and it steps through time; y_t[p] is a warp
 * sum. That is all a decode step (T = 1) needs; for long prompts a chunked matrix form
 * would be faster, and is future work. Shapes: kernels/cuda/ssd_launch.h.
 *
 * The training scan keeps every step's state: `states` [T, H, P, N], slot t the state
 * after step t. Its backward walks time backwards with the same ownership of (h, p, n),
 * and writes dL/ds_t over s_t in the slot once nothing needs s_t any more; dC (from the
 * states) and dB (from the state gradients) are sums over heads and channels that run as
 * separate kernels, one thread per output float, so every sum has a fixed order. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ssd_launch.h"

/* The sum of v over the warp, in every lane (the butterfly gives all lanes the same bits). */
static __device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- forward ---- */

/* A warp per (h, p). s_in [H, P, N] is the starting state (NULL: zeros), s_out receives
 * the final one (NULL: not kept; may be s_in: each lane reads its columns before it
 * writes them), states [T, H, P, N] every step's (NULL: not kept). With N over
 * AC_SSD_CHUNK the warp makes several passes over time, each over its own columns; the
 * first writes y and the later ones add their part of the sum over n. */
static __global__ void scan_kernel(int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                                   const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                                   const float *s_in, float *s_out, float *states, float *y, int ldy)
{
    int lane = threadIdx.x % 32, warps = gridDim.x * (blockDim.x / 32);
    size_t step = (size_t)H * P * N;
    for (int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < H * P; w += warps) {
        int h, p;
        ac_ssd_scan_item(w, P, &h, &p);
        size_t own = ((size_t)h * P + p) * N; /* this (h, p)'s row within a state */
        size_t g = (size_t)ac_ssd_group(h, H, G) * N;
        float a = A[h], dskip = Dskip[h];
        for (int pass = 0; pass < ac_ssd_passes(N); pass++) {
            int n0 = pass * AC_SSD_CHUNK + lane;
            float s[AC_SSD_LANE_STATES];
#pragma unroll
            for (int k = 0; k < AC_SSD_LANE_STATES; k++) {
                int n = n0 + 32 * k;
                s[k] = s_in && n < N ? s_in[own + n] : 0.0f;
            }
            for (int t = 0; t < T; t++) {
                float d = dt[(size_t)t * H + h], decay = expf(d * a);
                float xp = x[(size_t)t * ldx + (size_t)h * P + p], dx = d * xp, acc = 0.0f;
                const float *Bt = B + (size_t)t * ldbc + g, *Ct = C + (size_t)t * ldbc + g;
#pragma unroll
                for (int k = 0; k < AC_SSD_LANE_STATES; k++) {
                    int n = n0 + 32 * k;
                    if (n < N) {
                        s[k] = decay * s[k] + dx * Bt[n];
                        acc += s[k] * Ct[n];
                        if (states)
                            states[(size_t)t * step + own + n] = s[k];
                    }
                }
                acc = warp_sum(acc);
                if (lane == 0) {
                    float *yp = y + (size_t)t * ldy + (size_t)h * P + p;
                    *yp = pass == 0 ? acc + dskip * xp : *yp + acc;
                }
            }
            if (s_out) {
#pragma unroll
                for (int k = 0; k < AC_SSD_LANE_STATES; k++) {
                    int n = n0 + 32 * k;
                    if (n < N)
                        s_out[own + n] = s[k];
                }
            }
        }
    }
}

static void launch_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                        const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                        const float *s_in, float *s_out, float *states, float *y, int ldy)
{
    scan_kernel<<<ac_ssd_scan_blocks(H, P), AC_SSD_WARPS * 32, 0, ac_cuda_stream(ctx)>>>(
        T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, s_in, s_out, states, y, ldy);
}

void ac_cuda_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                      const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                      float *state, float *y, int ldy)
{
    if (T <= 0 || H <= 0 || P <= 0)
        return;
    launch_scan(ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, state, NULL, y, ldy);
    ac_cuda_check("ssd_scan");
}

/* ---- training: the scan that keeps every state, and its backward ---- */

void ac_cuda_ssd_scan_save(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                           const float *B, const float *C, int ldbc, const float *dt, const float *A,
                           const float *Dskip, const float *state0, float *states, float *y, int ldy)
{
    if (T <= 0 || H <= 0 || P <= 0)
        return;
    launch_scan(ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, NULL, states, y, ldy);
    ac_cuda_check("ssd_scan_save");
}

/* out[t, g N + n] = sum over the heads h of group g and channels p of
 * u[t, h P + p] (times dt[t, h] unless dt is NULL) * rows[t][h][p][n], rows [T, H, P, N]:
 *   dC_t = sum_{h, p} dy_t[h, p] s_t[h, p]          (rows: the states)
 *   dB_t = sum_{h, p} dt_t[h] x_t[h, p] ds_t[h, p]  (rows: the state gradients)
 * A thread per output float, heads then channels in order, as the CPU sums. */
static __global__ void group_sum_kernel(int T, int H, int P, int N, int G, const float *u, int ldu, const float *dt,
                                        const float *rows, float *out, int ldout)
{
    size_t items = (size_t)T * G * N, step = (size_t)H * P * N;
    int per_group = H / G;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < items; i += (size_t)gridDim.x * blockDim.x) {
        int t, g, n;
        ac_ssd_sum_item(i, G, N, &t, &g, &n);
        float sum = 0.0f;
        for (int h = g * per_group; h < (g + 1) * per_group; h++) {
            float d = dt ? dt[(size_t)t * H + h] : 1.0f;
            const float *ut = u + (size_t)t * ldu + (size_t)h * P;
            const float *r = rows + (size_t)t * step + (size_t)h * P * N + n;
            for (int p = 0; p < P; p++)
                sum += d * ut[p] * r[(size_t)p * N];
        }
        out[(size_t)t * ldout + (size_t)g * N + n] = sum;
    }
}

/* A block per head, warps over channels p, lanes over state columns n, time backwards:
 *   ds_t    = dy_t[p] C_t + exp(dt_{t+1} A) ds_{t+1}   (dL/ds_t; ds_T = 0)
 *   dx_t[p] = D dy_t[p] + dt_t (ds_t . B_t)
 *   ddt_t   = sum_p x_t[p] (ds_t . B_t) + A exp(dt_t A) (ds_t . s_{t-1})
 *   dA     += sum_{t, p} dt_t exp(dt_t A) (ds_t . s_{t-1});  dD += sum_{t, p} dy_t[p] x_t[p]
 * ds_t goes into slot t of `states` over s_t: the thread owning (p, n) read s_t there as
 * step t+1's s_{t-1}, and reads ds_t back as step t-1's ds_{t+1}; no other thread touches
 * that float. The per-step sum over p for ddt is the only exchange between warps. */
static __global__ void backward_kernel(int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                                       const float *C, int ldbc, const float *dt, const float *A,
                                       const float *Dskip, const float *state0, float *states, const float *dy,
                                       int lddy, float *dx, int lddx, float *ddt, float *dA, float *dD)
{
    __shared__ float part[2][AC_SSD_BWD_MAX_WARPS];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    size_t step = (size_t)H * P * N;
    for (int h = blockIdx.x; h < H; h += gridDim.x) {
        size_t head = (size_t)h * P * N, g = (size_t)ac_ssd_group(h, H, G) * N;
        float a = A[h], dskip = Dskip[h], a_sum = 0.0f, d_sum = 0.0f, decay_next = 0.0f;
        for (int t = T - 1; t >= 0; t--) {
            float d = dt[(size_t)t * H + h], decay = expf(d * a), ddt_sum = 0.0f;
            const float *Bt = B + (size_t)t * ldbc + g, *Ct = C + (size_t)t * ldbc + g;
            float *cur = states + (size_t)t * step + head;                   /* s_t, then ds_t */
            const float *next = t + 1 < T ? cur + step : NULL;                /* ds_{t+1} */
            const float *prev = t > 0 ? cur - step : state0 ? state0 + head : NULL; /* s_{t-1} */
            for (int p = warp; p < P; p += warps) {
                size_t row = (size_t)p * N;
                float xp = x[(size_t)t * ldx + (size_t)h * P + p], gy = dy[(size_t)t * lddy + (size_t)h * P + p];
                float dsB = 0.0f, dsS = 0.0f;
                for (int n = lane; n < N; n += 32) {
                    float ds = gy * Ct[n] + (next ? decay_next * next[row + n] : 0.0f);
                    dsB += ds * Bt[n];
                    dsS += prev ? ds * prev[row + n] : 0.0f;
                    cur[row + n] = ds;
                }
                dsB = warp_sum(dsB);
                dsS = warp_sum(dsS);
                if (lane == 0)
                    dx[(size_t)t * lddx + (size_t)h * P + p] = dskip * gy + d * dsB;
                ddt_sum += xp * dsB + a * decay * dsS;
                a_sum += d * decay * dsS;
                d_sum += gy * xp;
            }
            /* Two buffers alternate, so one barrier a step suffices: thread 0 has read
             * this step's buffer before it reaches the next step's barrier, and the
             * buffer is written again only after that barrier. */
            if (lane == 0)
                part[t & 1][warp] = ddt_sum;
            __syncthreads();
            if (threadIdx.x == 0) {
                float sum = 0.0f;
                for (int w = 0; w < warps; w++)
                    sum += part[t & 1][w];
                ddt[(size_t)t * H + h] = sum;
            }
            decay_next = decay;
        }
        __syncthreads(); /* thread 0 is done with part */
        if (lane == 0) {
            part[0][warp] = a_sum;
            part[1][warp] = d_sum;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float sa = 0.0f, sd = 0.0f;
            for (int w = 0; w < warps; w++) {
                sa += part[0][w];
                sd += part[1][w];
            }
            if (dA)
                dA[h] += sa;
            if (dD)
                dD[h] += sd;
        }
        __syncthreads(); /* the next head reuses part */
    }
}

/* `states` must be what ac_cuda_ssd_scan_save filled (every step's state); it ends up
 * holding the state gradients. The work buffer is not needed: the states' own slots
 * carry the gradient from step to step. */
void ac_cuda_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                               const float *B, const float *C, int ldbc, const float *dt, const float *A,
                               const float *Dskip, const float *state0, float *states, const float *dy,
                               int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt,
                               float *dA, float *dD, float *work)
{
    (void)work;
    if (T <= 0 || H <= 0 || P <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    unsigned sum_blocks = ac_ssd_sum_blocks(T, G, N);
    int warps = ac_ssd_backward_warps(P);
    if (N > 0) /* dC from the states, before the backward overwrites them */
        group_sum_kernel<<<sum_blocks, AC_SSD_SUM_THREADS, 0, stream>>>(T, H, P, N, G, dy, lddy, NULL, states, dC,
                                                                        lddbc);
    backward_kernel<<<ac_ssd_backward_blocks(H), warps * 32, 0, stream>>>(
        T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states, dy, lddy, dx, lddx, ddt, dA, dD);
    if (N > 0) /* dB from the state gradients */
        group_sum_kernel<<<sum_blocks, AC_SSD_SUM_THREADS, 0, stream>>>(T, H, P, N, G, x, ldx, dt, states, dB,
                                                                        lddbc);
    ac_cuda_check("ssd_scan_backward");
}
