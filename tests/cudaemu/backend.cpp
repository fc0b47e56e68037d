/* The CUDA backend of kernels/cuda, built against the emulator, under the name
 * "cuda-emu" so that it can sit beside a real one. The library built from these sources
 * exports nothing but cudaemu.h's two functions (hidden visibility): its ac_cuda_* names
 * never meet the real backend's in a build that has both. */
#include "kernels/cuda/cuda_ops.h"

#include "cudaemu.h"

extern "C" const ac_backend *ac_cuda_emulated_backend(void)
{
    static ac_backend emulated = [] {
        ac_backend be = ac_cuda_backend;
        be.name = "cuda-emu";
        return be;
    }();
    return &emulated;
}

extern "C" size_t ac_cuda_emulated_bytes_in_use(void)
{
    return ac_cuda_bytes_in_use();
}
