/* The optimizer's ops (as kernels/cpu/adamw.c): the AdamW step, the sum of squares of
 * the global gradient norm, and the scale that clips. */
#include <math.h>

#include <mutex>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_reduce.cuh"

/* c1, c2: the bias corrections 1 - beta^step, computed on the host with the CPU's powf. */
static __global__ void adamw_kernel(size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,
                                    float beta1, float beta2, float eps, float weight_decay, float c1, float c2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * g_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float m_hat = mi / c1;
        float v_hat = vi / c2;
        w[i] -= lr * (weight_decay * w[i] + m_hat / (sqrtf(v_hat) + eps));
    }
}

void ac_cuda_adamw(ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int step)
{
    if (n == 0)
        return;
    float c1 = 1.0f - powf(beta1, (float)step);
    float c2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        n, w, g, g_scale, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2);
    ac_cuda_check("adamw");
}

/* partial[b] = block b's sum of x^2 in double over its grid-strided elements. */
static __global__ void sum_squares_partial_kernel(size_t n, const float *x, double *partial)
{
    __shared__ double scratch[AC_NORM_WARPS];
    double sum = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum += (double)x[i] * x[i];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sum;
}

/* One block: partial[n_partial] = the sum of partial[0..n_partial), in a fixed order. */
static __global__ void sum_squares_total_kernel(int n_partial, double *partial)
{
    __shared__ double scratch[AC_NORM_WARPS];
    double sum = 0.0;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x)
        sum += partial[i];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0)
        partial[n_partial] = sum;
}

/* The partial sums and the total live in a buffer per device, allocated on the device's
 * first call and kept for the process's life (an op may not allocate per call, and no
 * workspace is planned for this one). The lock is held until the result is back, so
 * callers on other threads take turns with the buffer. */
enum { MAX_DEVICES = 64 };
static std::mutex sum_squares_lock;
static double *sum_squares_buffer[MAX_DEVICES];

static double *device_buffer(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES)
        return NULL;
    if (!sum_squares_buffer[dev] &&
        cudaMalloc(&sum_squares_buffer[dev], (AC_NORM_SUMSQ_BLOCKS + 1) * sizeof(double)) != cudaSuccess)
        sum_squares_buffer[dev] = NULL;
    return sum_squares_buffer[dev];
}

/* The same bits for the same n and x: a fixed number of blocks for n, summed in order.
 * NaN when the device fails (the error is kept for take_error): a launch that failed
 * would leave the buffer's previous total behind, so the copy waits for both launches to
 * have been accepted. The stream is synchronised whatever failed, so that no kernel of
 * this call still writes the buffer once the lock is released. */
double ac_cuda_sum_squares(ac_kctx *ctx, size_t n, const float *x)
{
    if (n == 0)
        return 0.0;
    std::lock_guard<std::mutex> hold(sum_squares_lock);
    double *buf = device_buffer();
    double total = NAN;
    if (buf) {
        cudaStream_t stream = ac_cuda_stream(ctx);
        unsigned blocks = ac_norm_blocks(n, AC_NORM_THREADS, AC_NORM_SUMSQ_BLOCKS);
        sum_squares_partial_kernel<<<blocks, AC_NORM_THREADS, 0, stream>>>(n, x, buf);
        sum_squares_total_kernel<<<1, AC_NORM_THREADS, 0, stream>>>((int)blocks, buf);
        double value = NAN;
        bool ok = cudaPeekAtLastError() == cudaSuccess &&
                  cudaMemcpyAsync(&value, buf + blocks, sizeof value, cudaMemcpyDeviceToHost, stream) == cudaSuccess;
        if (cudaStreamSynchronize(stream) == cudaSuccess && ok)
            total = value;
    }
    ac_cuda_check("sum_squares");
    return total;
}

static __global__ void scale_kernel(size_t n, float s, float *x)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

void ac_cuda_scale(ac_kctx *ctx, size_t n, float s, float *x)
{
    if (n == 0)
        return;
    scale_kernel<<<ac_cuda_blocks(n, AC_NORM_THREADS, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        n, s, x);
    ac_cuda_check("scale");
}
