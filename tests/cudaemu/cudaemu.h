/* The CUDA backend on the emulator (tests/cudaemu): kernels/cuda's kernels run on the
 * host, block by block, with device memory, barriers and shuffles checked as a GPU would
 * fail them. For tests that compare it with the CPU backend where there is no GPU. */
#ifndef AC_CUDAEMU_H
#define AC_CUDAEMU_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend, named "cuda-emu" (not in the registry: a test registers it). */
__attribute__((visibility("default"))) const ac_backend *ac_cuda_emulated_backend(void);

#ifdef __cplusplus
}
#endif

#endif
