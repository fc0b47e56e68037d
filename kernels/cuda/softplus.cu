/* Mamba2's step sizes (as kernels/cpu/softplus.c): dt = max(softplus(raw + bias), dt_min)
 * elementwise, and its backward as column tiles over the heads (the rows are the tokens),
 * each thread adding its share of dbias once. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_launch.h"

/* torch's softplus: the identity above 20. */
static __device__ __forceinline__ float softplus(float v)
{
    return v > 20.0f ? v : log1pf(expf(v));
}

static __global__ void softplus_dt_kernel(int T, int H, const float *raw, int ldraw, const float *bias,
                                          float dt_min, float *dt)
{
    size_t n = (size_t)T * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / H, h = i % H;
        float sp = softplus(raw[t * ldraw + h] + bias[h]);
        dt[i] = sp < dt_min ? dt_min : sp;
    }
}

void ac_cuda_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                         float dt_min, float *dt)
{
    if (T <= 0 || H <= 0)
        return;
    size_t n = (size_t)T * H;
    softplus_dt_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                         ac_cuda_stream(ctx)>>>(T, H, raw, ldraw, bias, dt_min, dt);
    ac_cuda_check("softplus_dt");
}

/* d softplus(v) / dv = sigmoid(v); the identity branch has slope 1, and a value held at
 * dt_min passes no gradient. */
static __global__ void softplus_dt_backward_kernel(int T, int H, const float *raw, int ldraw, const float *bias,
                                                   float dt_min, const float *ddt, float *draw, int lddraw,
                                                   float *dbias)
{
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H)
        return;
    float b = bias[h], sum = 0.0f;
    for (int tile = blockIdx.y, tiles = ac_norm_tiles(T); tile < tiles; tile += gridDim.y)
        for (int t = tile * AC_NORM_TILE, end = ac_norm_tile_end(tile, T); t < end; t++) {
            float v = raw[(size_t)t * ldraw + h] + b;
            float slope = softplus(v) < dt_min ? 0.0f : v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v));
            float g = ddt[(size_t)t * H + h] * slope;
            draw[(size_t)t * lddraw + h] = g;
            sum += g;
        }
    if (dbias)
        atomicAdd(dbias + h, sum);
}

void ac_cuda_softplus_dt_backward(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                                  float dt_min, const float *ddt, float *draw, int lddraw, float *dbias)
{
    if (T <= 0 || H <= 0)
        return;
    dim3 grid(ac_norm_col_blocks(H), ac_norm_tile_blocks(T));
    softplus_dt_backward_kernel<<<grid, AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(T, H, raw, ldraw, bias, dt_min,
                                                                                 ddt, draw, lddraw, dbias);
    ac_cuda_check("softplus_dt_backward");
}
