/* The CPU backend: host memory, no stream, and the ops of kernels/cpu. Every backend is
 * checked against these ops (tests/unit/test_backend_ops.c). */
#include "kernels/cpu/cpu_ops.h"

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
    .linear = ac_cpu_linear,
    .gemv_batch = ac_cpu_gemv_batch,
    .gemv_sum = ac_cpu_gemv_sum,
    .linear_batch = ac_cpu_linear_batch,
    .rmsnorm = ac_cpu_rmsnorm,
    .gated_rmsnorm = ac_cpu_gated_rmsnorm,
    .conv1d_silu = ac_cpu_conv1d_silu,
    .softplus_dt = ac_cpu_softplus_dt,
    .ssd_scan = ac_cpu_ssd_scan,
    .attention = ac_cpu_attention,
    .moe_route = ac_cpu_moe_route,
    .moe_token = ac_cpu_moe_token,
    .moe_mask_scores = ac_cpu_moe_mask_scores,
    .gather_rows = ac_cpu_gather_rows,
    .linear_bf16 = ac_cpu_linear_bf16,
    .gather_rows_bf16 = ac_cpu_gather_rows_bf16,
    .scatter_add_rows = ac_cpu_scatter_add_rows,
    .relu2 = ac_cpu_relu2,
    .add = ac_cpu_add,
    .mul_columns = ac_cpu_mul_columns,
    .column_dot = ac_cpu_column_dot,
    .neg_exp = ac_cpu_neg_exp,
    .linear_backward = ac_cpu_linear_backward,
    .linear_batch_backward = ac_cpu_linear_batch_backward,
    .rmsnorm_backward = ac_cpu_rmsnorm_backward,
    .relu2_backward = ac_cpu_relu2_backward,
    .cross_entropy = ac_cpu_cross_entropy,
    .kd_loss = ac_cpu_kd_loss,
    .adamw = ac_cpu_adamw,
    .sum_squares = ac_cpu_sum_squares,
    .scale = ac_cpu_scale,
    .ssd_scan_save = ac_cpu_ssd_scan_save,
    .ssd_scan_backward = ac_cpu_ssd_scan_backward,
    .mul_heads = ac_cpu_mul_heads,
    .mul_heads_backward = ac_cpu_mul_heads_backward,
    .softplus_dt_backward = ac_cpu_softplus_dt_backward,
    .conv1d_silu_backward = ac_cpu_conv1d_silu_backward,
    .gated_rmsnorm_backward = ac_cpu_gated_rmsnorm_backward,
    .gated_rmsnorm_width_backward = ac_cpu_gated_rmsnorm_width_backward,
    .attention_backward = ac_cpu_attention_backward,
    .moe_route_backward = ac_cpu_moe_route_backward,
    .moe_mask_scores_backward = ac_cpu_moe_mask_scores_backward,
    .rmsnorm_width_backward = ac_cpu_rmsnorm_width_backward,
    .moe_combine_backward = ac_cpu_moe_combine_backward,
    .gather_rows_backward = ac_cpu_gather_rows_backward,
    .embedding_backward = ac_cpu_embedding_backward,
};
