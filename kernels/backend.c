/* The registry of compiled-in backends: the CPU one always, then each accelerator the
 * build enables (kernels/cuda under AC_HAVE_CUDA), whether or not this machine has the
 * device: a backend's `unavailable` says that. */
#include "kernels/kernels.h"
#ifdef AC_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

#include <stdio.h>
#include <string.h>

static const ac_backend *const backends[] = {
    &ac_cpu_backend,
#ifdef AC_HAVE_CUDA
    &ac_cuda_backend,
#endif
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

const ac_backend *ac_backend_select(const char *name, char *msg, size_t cap)
{
    const ac_backend *be = ac_backend_find(name);
    if (!be) {
        char names[64] = "";
        for (int i = 0; i < N_BACKENDS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", backends[i]->name);
        snprintf(msg, cap, "device \"%s\": not in this build (it has: %s)", name ? name : "", names);
        return NULL;
    }
    const char *why = be->unavailable();
    if (why) {
        snprintf(msg, cap, "device \"%s\": %s", be->name, why);
        return NULL;
    }
    return be;
}
