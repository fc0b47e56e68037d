/* The training losses (as kernels/cpu/loss.c): cross-entropy against targets and the
 * distillation KL, a block per row of V logits. Each row is read in passes (max, sum of
 * exps, then the loss terms and gradient), the sums in double and the normalisers in
 * double as the CPU has them; products by 1/tau are kept apart from the subtraction that
 * follows (__fmul_rn, no fused multiply-add), so the f32 log-probabilities round as the
 * CPU's do. A gradient may alias its logits: every row's reads that need the whole row
 * end at a block barrier before the pass that writes, and that pass writes only the
 * element its thread has just read. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norm_reduce.cuh"

/* The row's max of x / tau (x * inv_tau), in every thread. */
static __device__ float row_max(const float *x, int V, float inv_tau, double *scratch)
{
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        m = fmaxf(m, __fmul_rn(x[v], inv_tau));
    return block_max(m, scratch);
}

/* The row's log-sum-exp of x / tau, max-shifted by m, in every thread. */
static __device__ double row_logsumexp(const float *x, int V, float inv_tau, float m, double *scratch)
{
    double sum = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += expf(__fmul_rn(x[v], inv_tau) - m);
    return (double)m + log(block_sum(sum, scratch));
}

/* Rows whose target is < 0: loss 0, zero gradient. The branch is the whole block's. */
static __global__ void cross_entropy_kernel(int rows, int V, const float *logits, const int32_t *targets,
                                            float scale, float *dlogits, double *row_loss)
{
    __shared__ double scratch[AC_NORM_WARPS];
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *x = logits + (size_t)r * V;
        float *d = dlogits ? dlogits + (size_t)r * V : NULL;
        int target = targets[r];
        if (target < 0) {
            if (threadIdx.x == 0)
                row_loss[r] = 0.0;
            for (int v = threadIdx.x; d && v < V; v += blockDim.x)
                d[v] = 0.0f;
            continue;
        }
        float x_target = x[target]; /* read before the barriers, ahead of any write to d */
        double lse = row_logsumexp(x, V, 1.0f, row_max(x, V, 1.0f, scratch), scratch);
        if (threadIdx.x == 0)
            row_loss[r] = lse - x_target;
        for (int v = threadIdx.x; d && v < V; v += blockDim.x) {
            float g = scale * expf((float)((double)x[v] - lse));
            d[v] = v == target ? g - scale : g;
        }
    }
}

void ac_cuda_cross_entropy(ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets,
                           float scale, float *dlogits, double *row_loss)
{
    if (rows <= 0 || V <= 0)
        return;
    cross_entropy_kernel<<<ac_cuda_blocks((size_t)rows, 1, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                           ac_cuda_stream(ctx)>>>(rows, V, logits, targets, scale, dlogits, row_loss);
    ac_cuda_check("cross_entropy");
}

/* row_loss = tau^2 sum_v p_t (log p_t - log p_s); d = scale tau (p_s - p_t). */
static __global__ void kd_loss_kernel(int rows, int V, const float *student, const float *teacher, float tau,
                                      float inv_tau, float scale, float *dlogits, double *row_loss)
{
    __shared__ double scratch[AC_NORM_WARPS];
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *s = student + (size_t)r * V;
        const float *t = teacher + (size_t)r * V;
        float *d = dlogits ? dlogits + (size_t)r * V : NULL;
        float fs = (float)row_logsumexp(s, V, inv_tau, row_max(s, V, inv_tau, scratch), scratch);
        float ft = (float)row_logsumexp(t, V, inv_tau, row_max(t, V, inv_tau, scratch), scratch);
        double kl = 0.0;
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float log_pt = __fmul_rn(t[v], inv_tau) - ft, log_ps = __fmul_rn(s[v], inv_tau) - fs;
            float pt = expf(log_pt);
            kl += (double)pt * (double)(log_pt - log_ps);
            if (d)
                d[v] = scale * tau * (expf(log_ps) - pt);
        }
        kl = block_sum(kl, scratch);
        if (threadIdx.x == 0)
            row_loss[r] = (double)tau * tau * kl;
    }
}

void ac_cuda_kd_loss(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau,
                     float scale, float *dlogits, double *row_loss)
{
    if (rows <= 0 || V <= 0)
        return;
    kd_loss_kernel<<<ac_cuda_blocks((size_t)rows, 1, AC_CUDA_GRID_CAP), AC_NORM_THREADS, 0,
                     ac_cuda_stream(ctx)>>>(rows, V, student, teacher, tau, 1.0f / tau, scale, dlogits, row_loss);
    ac_cuda_check("kd_loss");
}
