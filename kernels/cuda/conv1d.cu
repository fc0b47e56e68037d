/* Mamba2's causal depthwise conv1d + SiLU (as kernels/cpu/conv1d.c), for one sequence.
 * The forward computes every (t, c) output from x and the old state, then a second kernel
 * advances the state. The backward needs no in-place pass: each kernel recomputes the
 * pre-activation gradients dpre it reads from the inputs, so dx (a thread per element)
 * and dw, dbias (column tiles over the channels) run independently. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_reduce.cuh"

/* The input that tap k of output t reads, src = t - S + k: x row src, or for src < 0 the
 * state before the call (zeros when NULL), S = K - 1 values per channel, oldest first. */
static __device__ __forceinline__ float conv_input(const float *x, int ldx, const float *state, int S, int src,
                                                   int c)
{
    if (src >= 0)
        return x[(size_t)src * ldx + c];
    return state ? state[(size_t)c * S + S + src] : 0.0f;
}

/* The pre-activation of output (t, c). */
static __device__ __forceinline__ float conv_pre(int K, const float *x, int ldx, const float *w, const float *bias,
                                                 const float *state, int t, int c)
{
    int S = K - 1;
    float acc = bias ? bias[c] : 0.0f;
    for (int k = 0; k < K; k++)
        acc += w[(size_t)c * K + k] * conv_input(x, ldx, state, S, t - S + k, c);
    return acc;
}

static __global__ void conv1d_silu_kernel(int T, int C, int K, const float *x, int ldx, const float *w,
                                          const float *bias, const float *state, float *y, int ldy)
{
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / C), c = (int)(i % C);
        float v = conv_pre(K, x, ldx, w, bias, state, t, c);
        y[(size_t)t * ldy + c] = v * sigmoidf_acc(v);
    }
}

/* Per channel: keep the last S raw inputs, oldest first (shifting the old ones down when
 * T < S; ascending, so each value moves before it is overwritten). */
static __global__ void conv1d_state_kernel(int T, int C, int K, const float *x, int ldx, float *state)
{
    int S = K - 1;
    /* size_t: c + the grid's stride may pass INT_MAX when C is near it */
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < (size_t)C; c += (size_t)gridDim.x * blockDim.x) {
        float *st = state + c * S;
        int keep = T >= S ? 0 : S - T; /* old values that stay */
        for (int k = 0; k < keep; k++)
            st[k] = st[k + T];
        for (int k = keep; k < S; k++)
            st[k] = x[(size_t)(T - S + k) * ldx + c];
    }
}

void ac_cuda_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                         const float *bias, float *state, float *y, int ldy)
{
    if (T <= 0 || C <= 0 || K <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    size_t n = (size_t)T * C;
    conv1d_silu_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, stream>>>(
        T, C, K, x, ldx, w, bias, state, y, ldy);
    if (K > 1)
        conv1d_state_kernel<<<ac_cuda_blocks((size_t)C, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                              stream>>>(T, C, K, x, ldx, state);
    ac_cuda_check("conv1d_silu");
}

/* dL/dpre of output (t, c): dy silu'(pre), silu'(v) = s (1 + v (1 - s)), s = sigmoid(v). */
static __device__ __forceinline__ float conv_dpre(int K, const float *x, int ldx, const float *w,
                                                  const float *bias, const float *state, const float *dy,
                                                  int lddy, int t, int c)
{
    float v = conv_pre(K, x, ldx, w, bias, state, t, c);
    float s = sigmoidf_acc(v);
    return dy[(size_t)t * lddy + c] * s * (1.0f + v * (1.0f - s));
}

/* dx[t, c] = sum_k w[c, k] dpre[t + S - k, c] over the outputs t + S - k < T. */
static __global__ void conv1d_dx_kernel(int T, int C, int K, const float *x, int ldx, const float *w,
                                        const float *bias, const float *state, const float *dy, int lddy,
                                        float *dx, int lddx)
{
    int S = K - 1;
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / C), c = (int)(i % C);
        float sum = 0.0f;
        for (int k = 0; k < K; k++) {
            int out = t + S - k;
            if (out < T)
                sum += w[(size_t)c * K + k] * conv_dpre(K, x, ldx, w, bias, state, dy, lddy, out, c);
        }
        dx[(size_t)t * lddx + c] = sum;
    }
}

/* Column tiles over the channels: dw[c, k] += sum_t dpre[t, c] in(t - S + k, c) and
 * dbias[c] += sum_t dpre[t, c], one sum at a time (dpre recomputed for each). */
static __global__ void conv1d_dw_kernel(int T, int C, int K, const float *x, int ldx, const float *w,
                                        const float *bias, const float *state, const float *dy, int lddy,
                                        float *dw, float *dbias)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    int S = K - 1, tiles = ac_norm_tiles(T);
    /* j < K: tap j of dw; j == K: dbias */
    for (int j = dw ? 0 : K; j <= (dbias ? K : K - 1); j++) {
        float acc = 0.0f;
        for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y)
            for (int t = tile * AC_NORM_TILE, end = ac_norm_tile_end(tile, T); t < end; t++) {
                float d = conv_dpre(K, x, ldx, w, bias, state, dy, lddy, t, c);
                acc += j < K ? d * conv_input(x, ldx, state, S, t - S + j, c) : d;
            }
        atomicAdd(j < K ? dw + (size_t)c * K + j : dbias + c, acc);
    }
}

void ac_cuda_conv1d_silu_backward(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                                  const float *bias, const float *state, const float *dy, int lddy, float *dx,
                                  int lddx, float *dw, float *dbias)
{
    if (T <= 0 || C <= 0 || K <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    size_t n = (size_t)T * C;
    conv1d_dx_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, stream>>>(
        T, C, K, x, ldx, w, bias, state, dy, lddy, dx, lddx);
    if (dw || dbias) {
        dim3 grid(ac_norm_col_blocks(C), ac_norm_tile_blocks(T));
        conv1d_dw_kernel<<<grid, AC_NORM_THREADS, 0, stream>>>(T, C, K, x, ldx, w, bias, state, dy, lddy, dw,
                                                               dbias);
    }
    ac_cuda_check("conv1d_silu_backward");
}
