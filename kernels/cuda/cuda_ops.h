/* The CUDA implementations of the ops of kernels/ops.def, one ac_cuda_X per op X, with
 * its signature and meaning. Every pointer to tensor data is device memory; the small
 * host-side lists some ops take (the pointer, size and alpha arrays of gemv_batch,
 * gemv_sum and linear_batch, moe_token's ac_k_moe_ffn) are host memory, as the runtime
 * builds them per call. Every op is queued on ctx's stream (cudaStream_t, NULL: the
 * default stream) and returns without waiting, except sum_squares, which returns its
 * value. Only kernels/cuda and the backend tests include this header; everything else
 * calls the ac_k_* dispatchers. */
#ifndef AC_KERNELS_CUDA_OPS_H
#define AC_KERNELS_CUDA_OPS_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend table (kernels/cuda/cuda_backend.cu). */
extern const ac_backend ac_cuda_backend;

#define AC_OP(name, params, args) void ac_cuda_##name params;
#define AC_OP_VALUE(type, name, params, args) type ac_cuda_##name params;
#include "kernels/ops.def"

#ifdef __cplusplus
}
#endif

#endif
