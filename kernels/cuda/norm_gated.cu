/* Mamba2's gated RMSNorm (as kernels/cpu/norm_gated.c): out = w u rsqrt(mean(u^2) + eps)
 * with u = y silu(z), per row and group of group_size channels. A warp takes one (row,
 * group) segment; the backward's dw then runs as column tiles over the rstd it kept. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_reduce.cuh"

static __device__ __forceinline__ float silu(float v)
{
    return v * sigmoidf_acc(v);
}

/* out may alias y: lane l reads and writes only the elements l, l + 32, ... of its group. */
static __global__ void gated_rmsnorm_kernel(int rows, int dim, int group_size, const float *y, int ldy,
                                            const float *z, int ldz, const float *w, float eps, float *out,
                                            int ldout)
{
    int lane = threadIdx.x & 31, groups = dim / group_size;
    size_t segments = (size_t)rows * groups;
    for (size_t seg = (size_t)blockIdx.x * AC_NORM_WARPS + (threadIdx.x >> 5); seg < segments;
         seg += (size_t)gridDim.x * AC_NORM_WARPS) {
        size_t r = seg / groups, g0 = seg % groups * group_size;
        const float *yg = y + r * ldy + g0, *zg = z + r * ldz + g0, *wg = w + g0;
        float *og = out + r * ldout + g0;
        double sum = 0.0;
        for (int i = lane; i < group_size; i += 32) {
            float u = yg[i] * silu(zg[i]);
            og[i] = u;
            sum += (double)u * u;
        }
        float inv = 1.0f / sqrtf((float)(warp_sum(sum) / group_size) + eps);
        for (int i = lane; i < group_size; i += 32)
            og[i] = wg[i] * (og[i] * inv);
    }
}

void ac_cuda_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                           const float *z, int ldz, const float *w, float eps, float *out, int ldout)
{
    if (rows <= 0 || dim <= 0 || group_size <= 0)
        return;
    size_t segments = (size_t)rows * (dim / group_size);
    gated_rmsnorm_kernel<<<ac_norm_warp_blocks(segments, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                           ac_cuda_stream(ctx)>>>(rows, dim, group_size, y, ldy, z, ldz, w, eps, out, ldout);
    ac_cuda_check("gated_rmsnorm");
}

/* Per segment, with r = rsqrt(mean(u^2) + eps) (kept in rstd):
 *   du = r w dout - u r^3 mean(w dout u)
 *   dy = du silu(z);  dz = du y silu'(z),  silu'(v) = s (1 + v (1 - s)), s = sigmoid(v) */
static __global__ void gated_rmsnorm_backward_kernel(int rows, int dim, int group_size, const float *y, int ldy,
                                                     const float *z, int ldz, const float *w, float eps,
                                                     const float *dout, int lddout, float *dy, int lddy,
                                                     float *dz, int lddz, float *rstd)
{
    int lane = threadIdx.x & 31, groups = dim / group_size;
    size_t segments = (size_t)rows * groups;
    for (size_t seg = (size_t)blockIdx.x * AC_NORM_WARPS + (threadIdx.x >> 5); seg < segments;
         seg += (size_t)gridDim.x * AC_NORM_WARPS) {
        size_t r = seg / groups, g0 = seg % groups * group_size;
        const float *yg = y + r * ldy + g0, *zg = z + r * ldz + g0, *wg = w + g0, *gg = dout + r * lddout + g0;
        float *dyg = dy + r * lddy + g0, *dzg = dz + r * lddz + g0;
        double sum = 0.0, dot = 0.0;
        for (int i = lane; i < group_size; i += 32) {
            float u = yg[i] * silu(zg[i]);
            sum += (double)u * u;
            dot += (double)(wg[i] * gg[i]) * u;
        }
        float inv = 1.0f / sqrtf((float)(warp_sum(sum) / group_size) + eps);
        float k = (float)(warp_sum(dot) / group_size) * inv * inv * inv;
        if (lane == 0)
            rstd[seg] = inv;
        for (int i = lane; i < group_size; i += 32) {
            float s = sigmoidf_acc(zg[i]);
            float sz = zg[i] * s;
            float u = yg[i] * sz;
            float du = inv * wg[i] * gg[i] - u * k;
            dyg[i] = du * sz;
            dzg[i] = du * yg[i] * s * (1.0f + zg[i] * (1.0f - s));
        }
    }
}

/* Column tiles: dw[c] += sum over rows of dout u rstd, u recomputed. */
static __global__ void gated_rmsnorm_dw_kernel(int rows, int dim, int group_size, const float *y, int ldy,
                                               const float *z, int ldz, const float *dout, int lddout,
                                               const float *rstd, float *dw)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dim)
        return;
    int groups = dim / group_size, g = c / group_size;
    float acc = 0.0f;
    for (int tile = blockIdx.y, tiles = ac_norm_tiles(rows); tile < tiles; tile += gridDim.y)
        for (int r = tile * AC_NORM_TILE, end = ac_norm_tile_end(tile, rows); r < end; r++)
            acc += dout[(size_t)r * lddout + c] * (y[(size_t)r * ldy + c] * silu(z[(size_t)r * ldz + c])) *
                   rstd[(size_t)r * groups + g];
    atomicAdd(dw + c, acc);
}

void ac_cuda_gated_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                    const float *z, int ldz, const float *w, float eps, const float *dout,
                                    int lddout, float *dy, int lddy, float *dz, int lddz, float *dw, float *rstd)
{
    if (rows <= 0 || dim <= 0 || group_size <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    size_t segments = (size_t)rows * (dim / group_size);
    gated_rmsnorm_backward_kernel<<<ac_norm_warp_blocks(segments, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, stream>>>(
        rows, dim, group_size, y, ldy, z, ldz, w, eps, dout, lddout, dy, lddy, dz, lddz, rstd);
    if (dw) {
        dim3 grid(ac_norm_col_blocks(dim), ac_norm_tile_blocks(rows));
        gated_rmsnorm_dw_kernel<<<grid, AC_NORM_THREADS, 0, stream>>>(rows, dim, group_size, y, ldy, z, ldz, dout,
                                                                    lddout, rstd, dw);
    }
    ac_cuda_check("gated_rmsnorm_backward");
}

/* One block: a warp per row (rows strided by the block's warps), lanes over the row's
 * channels, every sum in double; the warps' totals are combined in warp order. */
static __global__ void gated_rmsnorm_width_backward_kernel(int rows, int dim, const float *out, int ldout,
                                                           const float *dout, int lddout, const float *rstd,
                                                           float eps, float width, float scale, float per_head,
                                                           int heads, float *dmask)
{
    __shared__ double scratch[AC_NORM_WARPS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double dM = 0.0;
    for (int t = warp; t < rows; t += AC_NORM_WARPS) {
        const float *o = out + (size_t)t * ldout, *d = dout + (size_t)t * lddout;
        double a = 0.0;
        for (int c = lane; c < dim; c += 32)
            a += (double)d[c] * o[c];
        a = warp_sum(a) / scale; /* dout came scaled */
        double r = rstd[t], r2 = (double)dim / ((double)width * r * r);
        dM += a * (1.0 - eps / r2) / (2.0 * width); /* the same in every lane */
    }
    double total = block_sum(lane == 0 ? dM : 0.0, scratch);
    if (threadIdx.x == 0)
        for (int h = 0; h < heads; h++)
            dmask[h] += (float)(per_head * total);
}

extern "C" void ac_cuda_gated_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *out, int ldout,
                                                     const float *dout, int lddout, const float *rstd, float eps,
                                                     float width, float scale, float per_head, int heads,
                                                     float *dmask)
{
    if (rows <= 0 || heads <= 0)
        return;
    gated_rmsnorm_width_backward_kernel<<<1, AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        rows, dim, out, ldout, dout, lddout, rstd, eps, width, scale, per_head, heads, dmask);
    ac_cuda_check("gated_rmsnorm_width_backward");
}
