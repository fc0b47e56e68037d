/* Warp and block reductions of the norm, loss and elementwise kernels (blocks of
 * AC_NORM_THREADS threads, kernels/cuda/norm_launch.h), and the sigmoid they share.
 *
 * The warp reductions are butterflies (xor shuffles): every lane ends with the same bits,
 * as a + b == b + a. The block reductions combine the warps' results in warp order in
 * every thread, so every thread gets the same bits too, whatever the scheduling. */
#ifndef AC_KERNELS_CUDA_NORM_REDUCE_CUH
#define AC_KERNELS_CUDA_NORM_REDUCE_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/norm_launch.h"

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum of v over the block, in every thread. `scratch`: AC_NORM_WARPS doubles of
 * shared memory; the first barrier lets consecutive calls share it. */
static __device__ __forceinline__ double block_sum(double v, double *scratch)
{
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < AC_NORM_WARPS; w++)
        total += scratch[w];
    return total;
}

/* The max of v over the block, in every thread; scratch as block_sum's. */
static __device__ __forceinline__ float block_max(float v, double *scratch)
{
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = (float)scratch[0];
    for (int w = 1; w < AC_NORM_WARPS; w++)
        m = fmaxf(m, (float)scratch[w]);
    return m;
}

/* 1 / (1 + e^-x), with the accurate expf (the CPU's polynomial exp agrees to 1.2e-7). */
static __device__ __forceinline__ float sigmoidf_acc(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

#endif
