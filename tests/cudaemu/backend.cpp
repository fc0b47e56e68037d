/* The CUDA backend of kernels/cuda, built against the emulator, under the name
 * "cuda-emu" so that it can sit beside a real one. The library built from these sources
 * exports nothing but cudaemu.h's function (hidden visibility): its ac_cuda_* names
 * never meet the real backend's in a build that has both. */
#include "kernels/cuda/cuda_ops.h"

#include "autocompress/probe.h"
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

/* The backend's probe_create on the emulator, which has no CUPTI (hidden, as the rest:
 * a build with CUDA keeps its own). */
extern "C" ac_status ac_cupti_probe_create(ac_probe **probe)
{
    *probe = NULL;
    return ac_fail(AC_ERR_UNSUPPORTED, "cuda-emu: the emulator has no CUPTI probe");
}
