/* Elementwise ops and soft masks: relu2 and its backward, add, neg_exp, mul_columns and
 * its gradient column_dot, mul_heads and its backward (the CPU keeps the last two in ssd.c).
 * Elementwise kernels stride over the grid; the sums over rows (column_dot, dmask) run
 * as column tiles (kernels/cuda/norm_launch.h) that add one partial per thread. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_launch.h"

static __global__ void relu2_kernel(size_t n, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = r * r;
    }
}

void ac_cuda_relu2(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    if (n == 0)
        return;
    relu2_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        n, x, y);
    ac_cuda_check("relu2");
}

static __global__ void relu2_backward_kernel(size_t n, const float *pre, float *grad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        grad[i] = pre[i] > 0.0f ? 2.0f * pre[i] * grad[i] : 0.0f;
}

void ac_cuda_relu2_backward(ac_kctx *ctx, size_t n, const float *pre, float *grad)
{
    if (n == 0)
        return;
    relu2_backward_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                            ac_cuda_stream(ctx)>>>(n, pre, grad);
    ac_cuda_check("relu2_backward");
}

static __global__ void add_kernel(size_t n, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

void ac_cuda_add(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    if (n == 0)
        return;
    add_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        n, x, y);
    ac_cuda_check("add");
}

/* y may alias x: each element is read, then written, by one thread. */
static __global__ void neg_exp_kernel(int n, const float *x, float *y)
{
    /* size_t: i + the grid's stride may pass INT_MAX when n is near it */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = -expf(x[i]);
}

void ac_cuda_neg_exp(ac_kctx *ctx, int n, const float *x, float *y)
{
    if (n <= 0)
        return;
    neg_exp_kernel<<<ac_cuda_blocks((size_t)n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                     ac_cuda_stream(ctx)>>>(n, x, y);
    ac_cuda_check("neg_exp");
}

/* Element i of a [rows, cols] view is (i / cols, i % cols). */
static __global__ void mul_columns_kernel(int rows, int cols, const float *mask, float *x, int ldx)
{
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / cols, c = i % cols;
        x[r * ldx + c] *= mask[c];
    }
}

void ac_cuda_mul_columns(ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx)
{
    if (rows <= 0 || cols <= 0)
        return;
    size_t n = (size_t)rows * cols;
    mul_columns_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                         ac_cuda_stream(ctx)>>>(rows, cols, mask, x, ldx);
    ac_cuda_check("mul_columns");
}

/* Column tiles: thread (x, y) sums its column over block y's row tiles, then adds that
 * to out once. */
static __global__ void column_dot_kernel(int rows, int cols, const float *a, int lda, const float *b, int ldb,
                                         float *out)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float sum = 0.0f;
    for (int tile = blockIdx.y, tiles = ac_norm_tiles(rows); tile < tiles; tile += gridDim.y)
        for (int r = tile * AC_NORM_TILE, end = ac_norm_tile_end(tile, rows); r < end; r++)
            sum += a[(size_t)r * lda + c] * b[(size_t)r * ldb + c];
    atomicAdd(out + c, sum);
}

void ac_cuda_column_dot(ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb,
                        float *out)
{
    if (rows <= 0 || cols <= 0)
        return;
    dim3 grid(ac_norm_col_blocks(cols), ac_norm_tile_blocks(rows));
    column_dot_kernel<<<grid, AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(rows, cols, a, lda, b, ldb, out);
    ac_cuda_check("column_dot");
}

/* Element i of the [T, H * P] view is (t, h * P + p) = (i / (H P), i % (H P)). */
static __global__ void mul_heads_kernel(int T, int H, int P, const float *mask, float *x, int ldx)
{
    size_t width = (size_t)H * P, n = (size_t)T * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / width, j = i % width;
        x[t * ldx + j] *= mask[j / P];
    }
}

void ac_cuda_mul_heads(ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx)
{
    if (T <= 0 || H <= 0 || P <= 0)
        return;
    size_t n = (size_t)T * H * P;
    mul_heads_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                       ac_cuda_stream(ctx)>>>(T, H, P, mask, x, ldx);
    ac_cuda_check("mul_heads");
}

/* Column tiles over the H * P columns: each thread scales its column of dy and adds its
 * share of sum dy * y (read before the scaling) to its head's dmask. */
static __global__ void mul_heads_backward_kernel(int T, int H, int P, const float *mask, const float *y, int ldy,
                                                 float *dy, int lddy, float *dmask)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= H * P)
        return;
    float m = mask[j / P], sum = 0.0f;
    for (int tile = blockIdx.y, tiles = ac_norm_tiles(T); tile < tiles; tile += gridDim.y)
        for (int t = tile * AC_NORM_TILE, end = ac_norm_tile_end(tile, T); t < end; t++) {
            float *d = dy + (size_t)t * lddy + j;
            sum += *d * y[(size_t)t * ldy + j];
            *d *= m;
        }
    if (dmask)
        atomicAdd(dmask + j / P, sum);
}

void ac_cuda_mul_heads_backward(ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,
                                float *dy, int lddy, float *dmask)
{
    if (T <= 0 || H <= 0 || P <= 0)
        return;
    dim3 grid(ac_norm_col_blocks(H * P), ac_norm_tile_blocks(T));
    mul_heads_backward_kernel<<<grid, AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(T, H, P, mask, y, ldy, dy, lddy,
                                                                               dmask);
    ac_cuda_check("mul_heads_backward");
}
