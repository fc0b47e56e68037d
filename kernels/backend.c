/* The registry of compiled-in backends: the CPU one always, then each accelerator the
 * build enables. A CUDA build adds its table (kernels/cuda) to the list below under
 * AC_HAVE_CUDA once kernels/cuda defines ac_cuda_backend. */
#include "kernels/kernels.h"

#include <string.h>

static const ac_backend *const backends[] = {
    &ac_cpu_backend,
};

enum { N_BACKENDS = (int)(sizeof backends / sizeof backends[0]) };

int ac_backend_count(void)
{
    return N_BACKENDS;
}

const ac_backend *ac_backend_at(int i)
{
    return i >= 0 && i < N_BACKENDS ? backends[i] : NULL;
}

const ac_backend *ac_backend_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < N_BACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}
