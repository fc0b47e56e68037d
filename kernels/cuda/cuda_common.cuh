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

/* Called by every op after its launches (and cuBLAS calls, passing their status): keeps
 * the first error, naming the op, for ac_cuda_backend's take_error. A launch error means
 * a broken invariant (a bad shape or device pointer) or a lost device, never bad user
 * input, which the runtime checks before it plans. */
void ac_cuda_check(const char *op);
void ac_cuda_check_cublas(const char *op, int cublas_status);

#endif
