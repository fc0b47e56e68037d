/* RMSNorm (as kernels/cpu/norm.c): the forward runs a warp per row; the backward a block
 * per tile of AC_NORM_TILE rows, whose warps first take the rows' two sums (in double, as
 * the CPU does), then whose threads take columns, writing dx and adding the tile's share
 * of dw once per column; the width gradient a warp per row, summed per block. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_reduce.cuh"

/* 1 / sqrt(mean + eps), with the mean rounded to float first as the CPU does. */
static __device__ __forceinline__ float rms_inv(double sum_squares, int dim, float eps)
{
    return 1.0f / sqrtf((float)(sum_squares / dim) + eps);
}

/* x and y may alias: lane l reads and writes only the elements l, l + 32, ... */
static __global__ void rmsnorm_kernel(int rows, int dim, const float *x, int ldx, const float *w, float eps,
                                      float *y, int ldy)
{
    int lane = threadIdx.x & 31;
    for (size_t r = (size_t)blockIdx.x * AC_NORM_WARPS + (threadIdx.x >> 5); r < (size_t)rows;
         r += (size_t)gridDim.x * AC_NORM_WARPS) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        double sum = 0.0;
        for (int i = lane; i < dim; i += 32)
            sum += (double)xr[i] * xr[i];
        float inv = rms_inv(warp_sum(sum), dim, eps);
        for (int i = lane; i < dim; i += 32)
            yr[i] = w[i] * (xr[i] * inv);
    }
}

void ac_cuda_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                     float *y, int ldy)
{
    if (rows <= 0 || dim <= 0)
        return;
    rmsnorm_kernel<<<ac_norm_warp_blocks((size_t)rows, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                     ac_cuda_stream(ctx)>>>(rows, dim, x, ldx, w, eps, y, ldy);
    ac_cuda_check("rmsnorm");
}

/* With r = rsqrt(mean(x^2) + eps) and g = dy * w: dx = r g - x r^3 mean(g x), and
 * dw += dy x r summed over rows. */
static __global__ void rmsnorm_backward_kernel(int rows, int dim, const float *x, int ldx, const float *w,
                                               float eps, const float *dy, int lddy, float beta_dx, float *dx,
                                               int lddx, float *dw)
{
    __shared__ float inv_of[AC_NORM_TILE];
    __shared__ float coef_of[AC_NORM_TILE];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int tile = blockIdx.x, tiles = ac_norm_tiles(rows); tile < tiles; tile += gridDim.x) {
        int r0 = tile * AC_NORM_TILE, r1 = ac_norm_tile_end(tile, rows);
        for (int r = r0 + warp; r < r1; r += AC_NORM_WARPS) {
            const float *xr = x + (size_t)r * ldx;
            const float *dyr = dy + (size_t)r * lddy;
            double sum = 0.0, gx = 0.0;
            for (int i = lane; i < dim; i += 32) {
                sum += (double)xr[i] * xr[i];
                gx += (double)dyr[i] * w[i] * xr[i];
            }
            sum = warp_sum(sum);
            gx = warp_sum(gx);
            float inv = rms_inv(sum, dim, eps);
            if (lane == 0) {
                inv_of[r - r0] = inv;
                coef_of[r - r0] = (float)(gx / dim) * inv * inv * inv;
            }
        }
        __syncthreads();
        for (int c = threadIdx.x; c < dim; c += blockDim.x) {
            float wc = w[c], acc = 0.0f;
            for (int r = r0; r < r1; r++) {
                float xv = x[(size_t)r * ldx + c], g = dy[(size_t)r * lddy + c], inv = inv_of[r - r0];
                float grad = inv * g * wc - coef_of[r - r0] * xv;
                float *d = dx + (size_t)r * lddx + c;
                *d = beta_dx == 0.0f ? grad : grad + beta_dx * *d;
                acc += g * xv * inv;
            }
            if (dw)
                atomicAdd(dw + c, acc);
        }
        __syncthreads(); /* the next tile rewrites inv_of and coef_of */
    }
}

void ac_cuda_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                              float eps, const float *dy, int lddy, float beta_dx, float *dx, int lddx, float *dw)
{
    if (rows <= 0 || dim <= 0)
        return;
    rmsnorm_backward_kernel<<<ac_norm_tile_blocks(rows), AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        rows, dim, x, ldx, w, eps, dy, lddy, beta_dx, dx, lddx, dw);
    ac_cuda_check("rmsnorm_backward");
}

/* Per row, with S = sum x^2, a = sum dy w x and r^2 = S / width + eps:
 * dL/dwidth = a S / (2 width^2 r^3), in double; each block adds its rows' sum once (few
 * blocks: each add rounds to float, where the CPU rounds the total once). */
static __global__ void rmsnorm_width_backward_kernel(int rows, int dim, const float *x, int ldx, const float *w,
                                                     float eps, float width, const float *dy, int lddy,
                                                     float *dwidth)
{
    __shared__ double scratch[AC_NORM_WARPS];
    int lane = threadIdx.x & 31;
    double total = 0.0;
    for (size_t r = (size_t)blockIdx.x * AC_NORM_WARPS + (threadIdx.x >> 5); r < (size_t)rows;
         r += (size_t)gridDim.x * AC_NORM_WARPS) {
        const float *xr = x + r * ldx;
        const float *dyr = dy + r * lddy;
        double s = 0.0, a = 0.0;
        for (int i = lane; i < dim; i += 32) {
            s += (double)xr[i] * xr[i];
            a += (double)dyr[i] * w[i] * xr[i];
        }
        s = warp_sum(s);
        a = warp_sum(a);
        double r2 = s / width + eps;
        if (lane == 0)
            total += a / sqrt(r2) * s / (2.0 * (double)width * width * r2);
    }
    total = block_sum(total, scratch);
    if (threadIdx.x == 0)
        atomicAdd(dwidth, (float)total);
}

void ac_cuda_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                                    float eps, float width, const float *dy, int lddy, float *dwidth)
{
    if (rows <= 0 || dim <= 0)
        return;
    rmsnorm_width_backward_kernel<<<ac_norm_warp_blocks((size_t)rows, AC_NORM_SCALAR_BLOCKS), AC_NORM_THREADS, 0,
                                    ac_cuda_stream(ctx)>>>(rows, dim, x, ldx, w, eps, width, dy, lddy, dwidth);
    ac_cuda_check("rmsnorm_width_backward");
}
