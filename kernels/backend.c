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

enum { N_BACKENDS = (int)(sizeof backends / sizeof backends[0]), MAX_REGISTERED = 4 };

/* Backends a program adds (a test's instrumented backend), found by name after the
 * compiled-in ones. */
static const ac_backend *registered[MAX_REGISTERED];
static int n_registered;

ac_status ac_backend_register(const ac_backend *be)
{
    if (!be || !be->name)
        return ac_fail(AC_ERR_INVALID, "backend: a backend needs a name");
    if (ac_backend_find(be->name))
        return ac_fail(AC_ERR_INVALID, "backend: \"%s\" is taken", be->name);
    if (n_registered == MAX_REGISTERED)
        return ac_fail(AC_ERR_UNSUPPORTED, "backend: at most %d backends can be added", MAX_REGISTERED);
    registered[n_registered++] = be;
    return AC_OK;
}

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
    for (int i = 0; i < n_registered; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
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
