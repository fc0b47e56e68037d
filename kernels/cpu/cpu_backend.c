/* The CPU backend: host memory, no stream, and the ops of kernels/cpu. Every backend is
 * checked against these ops (tests/unit/test_backend_ops.c). */
#include "kernels/cpu/cpu_ops.h"

#include "autocompress/probe.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *cpu_alloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1); /* a distinct pointer even for 0 bytes */
}

/* Dense buffers of at least a huge page (2 MiB on x86-64) start on a huge page boundary
 * and ask the kernel for transparent huge pages over the whole ones they span. Weights,
 * gradients and a training step's activations are read in streams far larger than the
 * TLB covers with 4 KiB pages, and in a virtual machine each TLB miss walks two page
 * tables: read bandwidth over rows of many megabytes goes up with huge pages (see
 * docs/results.md). Only whole huge pages inside the buffer are advised, so the resident
 * size never counts memory past its end. */
enum { CPU_HUGE_PAGE = 2 << 20 };

static void *cpu_alloc_dense(size_t bytes)
{
    if (bytes < CPU_HUGE_PAGE)
        return cpu_alloc(bytes);
    void *p;
    if (posix_memalign(&p, CPU_HUGE_PAGE, bytes))
        return NULL;
    /* advice only: without huge pages (a kernel built or set without them) the buffer
     * works the same, on 4 KiB pages */
    (void)madvise(p, bytes / CPU_HUGE_PAGE * CPU_HUGE_PAGE, MADV_HUGEPAGE);
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}

/* Host and device are one memory: every kind of copy is a memcpy. */
static void cpu_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    (void)kind;
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_memset_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
}

/* Each op has finished when it returns. */
static void cpu_sync(ac_kctx *ctx)
{
    (void)ctx;
}

/* The CPU is always there. */
static const char *cpu_unavailable(void)
{
    return NULL;
}

/* The CPU's ops cannot fail on valid shapes, and a failed allocation returns NULL. */
static const char *cpu_take_error(void)
{
    return NULL;
}

/* The host's memory is the process's resident size, which probes/cpu measures. */
static size_t cpu_bytes_in_use(void)
{
    return 0;
}

_Static_assert(AC_CPU_SSD_STATE_INTERVAL <= AC_SSD_MAX_STATE_INTERVAL,
               "plans bound the scan's work with the largest interval");

const ac_backend ac_cpu_backend = {
    .name = "cpu",
    .ssd_state_interval = AC_CPU_SSD_STATE_INTERVAL,
    .moe_token_batch = 1,
    .alloc = cpu_alloc,
    .alloc_dense = cpu_alloc_dense,
    .free = cpu_free,
    .copy = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .sync = cpu_sync,
    .unavailable = cpu_unavailable,
    .take_error = cpu_take_error,
    .bytes_in_use = cpu_bytes_in_use,
    .probe_create = ac_cpu_probe_create,
    .attention_workspace = ac_cpu_attention_workspace,
#define AC_OP(name, params, args) .name = ac_cpu_##name,
#define AC_OP_VALUE(type, name, params, args) .name = ac_cpu_##name,
#include "kernels/ops.def"
};
