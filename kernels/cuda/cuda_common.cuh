/* What the CUDA kernel files share: the context's stream, one-dimensional grid sizes,
 * and the record of the first failed launch. */
#ifndef AC_KERNELS_CUDA_COMMON_CUH
#define AC_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"

/* The stream a context's ops are queued on (NULL context or stream: the default stream). */
static inline cudaStream_t ac_cuda_stream(const ac_kctx *ctx)
{
    return ctx ? (cudaStream_t)ctx->stream : (cudaStream_t)0;
}

/* Blocks of `threads` covering n items, at most `cap` (kernels loop over the rest with a
 * grid stride); at least one. */
static inline unsigned ac_cuda_blocks(size_t n, unsigned threads, unsigned cap)
{
    size_t b = (n + threads - 1) / threads;
    return b == 0 ? 1u : b > cap ? cap : (unsigned)b;
}

enum { AC_CUDA_GRID_CAP = 65535 };

/* bf16 values as the ops hold them, the high half of a float's bits: widened, and a
 * float rounded to the nearest (ties to even; a NaN stays a quiet NaN), bit for bit as
 * autocompress/dtype.h does on the host. */
static __device__ inline float ac_cuda_bf16_to_float(uint16_t h)
{
    return __int_as_float((int)((uint32_t)h << 16));
}

static __device__ inline uint16_t ac_cuda_float_to_bf16(float f)
{
    uint32_t u = (uint32_t)__float_as_int(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __device__ inline float ac_cuda_round_to_bf16(float f)
{
    return ac_cuda_bf16_to_float(ac_cuda_float_to_bf16(f));
}

/* Called by every op after its launches (and cuBLAS calls, passing their status): keeps
 * the first error, naming the op, for ac_cuda_backend's take_error. A launch error means
 * a broken invariant (a bad shape or device pointer) or a lost device, never bad user
 * input, which the runtime checks before it plans. */
void ac_cuda_check(const char *op);
void ac_cuda_check_cublas(const char *op, int cublas_status);

#endif
