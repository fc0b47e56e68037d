/* A test backend whose "device" memory the host cannot touch: every allocation is its own
 * mapping, kept PROT_NONE except while one of the backend's own functions runs (an op
 * of kernels/cpu, a copy, a memset). Code that reads or writes backend memory from the
 * host, as it may not on a GPU, stops with SIGSEGV here, on a machine without one; the
 * ops themselves are the CPU's, so results equal the CPU backend's bit for bit.
 * Include in one test file; guarded_backend is the table. */
#ifndef AC_TESTS_GUARDED_BACKEND_H
#define AC_TESTS_GUARDED_BACKEND_H

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cpu/cpu_ops.h"

enum { GUARDED_MAX_REGIONS = 4096 };

static struct {
    void *p;
    size_t len;
} guarded_regions[GUARDED_MAX_REGIONS];
static int guarded_count;
static int guarded_open_depth; /* nested opens (an op calling another) keep memory open */

static void guarded_protect(int prot)
{
    for (int i = 0; i < guarded_count; i++)
        if (mprotect(guarded_regions[i].p, guarded_regions[i].len, prot) != 0)
            abort();
}

static void guarded_open(void)
{
    if (guarded_open_depth++ == 0)
        guarded_protect(PROT_READ | PROT_WRITE);
}

static void guarded_close(void)
{
    if (--guarded_open_depth == 0)
        guarded_protect(PROT_NONE);
}

static void *guarded_alloc(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = ((bytes ? bytes : 1) + page - 1) / page * page;
    if (guarded_count == GUARDED_MAX_REGIONS)
        return NULL;
    void *p = mmap(NULL, len, guarded_open_depth ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    guarded_regions[guarded_count].p = p;
    guarded_regions[guarded_count].len = len;
    guarded_count++;
    return p;
}

static void guarded_free(void *p)
{
    for (int i = 0; p && i < guarded_count; i++)
        if (guarded_regions[i].p == p) {
            munmap(p, guarded_regions[i].len);
            guarded_regions[i] = guarded_regions[--guarded_count];
            return;
        }
}

static void guarded_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    guarded_open();
    ac_cpu_backend.copy(dst, src, bytes, kind);
    guarded_close();
}

static void guarded_memset_zero(void *p, size_t bytes)
{
    guarded_open();
    ac_cpu_backend.memset_zero(p, bytes);
    guarded_close();
}

static void guarded_sync(ac_kctx *ctx) { (void)ctx; }
static const char *guarded_unavailable(void) { return NULL; }
static const char *guarded_take_error(void) { return NULL; }

#define GUARDED(member, params, args) \
    static void guarded_##member params \
    {                                  \
        guarded_open();                \
        ac_cpu_##member args;          \
        guarded_close();               \
    }

GUARDED(linear, (ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta, float *C,
                 int ldc),
        (ctx, M, N, K, A, lda, W, beta, C, ldc))
GUARDED(gemv_batch, (ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                     const float *const *x, float *const *y),
        (ctx, n, W, rows, cols, x, y))
GUARDED(gemv_sum, (ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols, const float *const *x,
                   const float *alpha, float *y),
        (ctx, n, W, rows, cols, x, alpha, y))
GUARDED(linear_batch, (ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                       const float *const *W, float *const *C, int ldc),
        (ctx, n, M, N, K, A, lda, W, C, ldc))
GUARDED(rmsnorm, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps, float *y,
                  int ldy),
        (ctx, rows, dim, x, ldx, w, eps, y, ldy))
GUARDED(gated_rmsnorm, (ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy, const float *z,
                        int ldz, const float *w, float eps, float *out, int ldout),
        (ctx, rows, dim, group_size, y, ldy, z, ldz, w, eps, out, ldout))
GUARDED(conv1d_silu, (ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w, const float *bias,
                      float *state, float *y, int ldy),
        (ctx, T, C, K, x, ldx, w, bias, state, y, ldy))
GUARDED(softplus_dt, (ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias, float dt_min,
                      float *dt),
        (ctx, T, H, raw, ldraw, bias, dt_min, dt))
GUARDED(ssd_scan, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                   const float *C, int ldbc, const float *dt, const float *A, const float *Dskip, float *state,
                   float *y, int ldy),
        (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, y, ldy))
GUARDED(attention, (ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                    const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout),
        (ctx, n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale, out, ldout))
GUARDED(moe_route, (ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,
                    int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight),
        (ctx, T, E, logits, bias, n_group, topk_group, top_k, norm, scale, idx, weight))
GUARDED(moe_mask_scores, (ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,
                          float *masked_bias),
        (ctx, T, E, mask, bias, logits, masked_bias))
GUARDED(moe_mask_scores_backward, (ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits, float *dmask),
        (ctx, T, E, mask, dlogits, dmask))
GUARDED(rmsnorm_width_backward, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                                 float width, const float *dy, int lddy, float *dwidth),
        (ctx, rows, dim, x, ldx, w, eps, width, dy, lddy, dwidth))
GUARDED(gather_rows, (ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows, float *dst),
        (ctx, n, D, src, ldsrc, rows, dst))
GUARDED(scatter_add_rows, (ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows, const float *weight,
                           float *dst, int lddst),
        (ctx, n, D, src, rows, weight, dst, lddst))
GUARDED(relu2, (ac_kctx *ctx, size_t n, float *x), (ctx, n, x))
GUARDED(add, (ac_kctx *ctx, size_t n, const float *x, float *y), (ctx, n, x, y))
GUARDED(mul_columns, (ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx),
        (ctx, rows, cols, mask, x, ldx))
GUARDED(column_dot, (ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb,
                     float *out),
        (ctx, rows, cols, a, lda, b, ldb, out))
GUARDED(neg_exp, (ac_kctx *ctx, int n, const float *x, float *y), (ctx, n, x, y))
GUARDED(gated_rmsnorm_width_backward, (ac_kctx *ctx, int rows, int dim, const float *out, int ldout, const float *dout, int lddout, const float *rstd, float eps, float width, float scale, float per_head, int heads, float *dmask),
        (ctx, rows, dim, out, ldout, dout, lddout, rstd, eps, width, scale, per_head, heads, dmask))
GUARDED(linear_backward, (ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                          const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW),
        (ctx, M, N, K, A, lda, W, dC, lddc, beta_dA, dA, ldda, dW))
GUARDED(rmsnorm_backward, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                           const float *dy, int lddy, float *dx, int lddx, float *dw),
        (ctx, rows, dim, x, ldx, w, eps, dy, lddy, dx, lddx, dw))
GUARDED(relu2_backward, (ac_kctx *ctx, size_t n, const float *pre, float *grad), (ctx, n, pre, grad))
GUARDED(cross_entropy, (ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets, float scale,
                        float *dlogits, double *row_loss),
        (ctx, rows, V, logits, targets, scale, dlogits, row_loss))
GUARDED(kd_loss, (ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau,
                  float scale, float *dlogits, double *row_loss),
        (ctx, rows, V, student, teacher, tau, scale, dlogits, row_loss))
GUARDED(adamw, (ac_kctx *ctx, size_t n, float *w, const float *g, float *m, float *v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int step),
        (ctx, n, w, g, m, v, lr, beta1, beta2, eps, weight_decay, step))
GUARDED(scale, (ac_kctx *ctx, size_t n, float s, float *x), (ctx, n, s, x))
GUARDED(ssd_scan_save, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                        const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                        const float *state0, float *states, float *y, int ldy),
        (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states, y, ldy))
GUARDED(ssd_scan_backward, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                            const float *B, const float *C, int ldbc, const float *dt, const float *A,
                            const float *Dskip, const float *state0, float *states, const float *dy,
                            int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt, float *dA,
                            float *dD, float *work),
        (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states, dy, lddy, dx, lddx, dB, dC, lddbc,
         ddt, dA, dD, work))
GUARDED(mul_heads, (ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx),
        (ctx, T, H, P, mask, x, ldx))
GUARDED(mul_heads_backward, (ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,
                             float *dy, int lddy, float *dmask),
        (ctx, T, H, P, mask, y, ldy, dy, lddy, dmask))
GUARDED(softplus_dt_backward, (ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                               float dt_min, const float *ddt, float *draw, int lddraw, float *dbias),
        (ctx, T, H, raw, ldraw, bias, dt_min, ddt, draw, lddraw, dbias))
GUARDED(conv1d_silu_backward, (ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                               const float *bias, const float *state, const float *dy, int lddy, float *dx,
                               int lddx, float *dw, float *dbias),
        (ctx, T, C, K, x, ldx, w, bias, state, dy, lddy, dx, lddx, dw, dbias))
GUARDED(gated_rmsnorm_backward, (ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                 const float *z, int ldz, const float *w, float eps, const float *dout,
                                 int lddout, float *dy, int lddy, float *dz, int lddz, float *dw, float *rstd),
        (ctx, rows, dim, group_size, y, ldy, z, ldz, w, eps, dout, lddout, dy, lddy, dz, lddz, dw, rstd))
GUARDED(attention_backward, (ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                             const float *k, const float *v, int ldkv, const float *datt, float scale, float *out,
                             float *stats, float *dq, float *dk, float *dv),
        (ctx, L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, scale, out, stats, dq, dk, dv))
GUARDED(moe_route_backward, (ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm, float scale,
                             const int32_t *idx, const float *dweight, float *dlogits),
        (ctx, T, E, logits, top_k, norm, scale, idx, dweight, dlogits))
GUARDED(moe_combine_backward, (ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,
                               const float *y, const float *weight, const float *mask, const int32_t *pair,
                               float *dweight, float *dmask, float *dy),
        (ctx, n, D, dout, lddout, rows, y, weight, mask, pair, dweight, dmask, dy))
GUARDED(gather_rows_backward, (ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows, float *dsrc,
                               int lddsrc),
        (ctx, n, D, ddst, rows, dsrc, lddsrc))

static double guarded_sum_squares(ac_kctx *ctx, size_t n, const float *x)
{
    guarded_open();
    double s = ac_cpu_sum_squares(ctx, n, x);
    guarded_close();
    return s;
}

static const ac_backend guarded_backend = {
    .name = "guarded",
    .alloc = guarded_alloc,
    .free = guarded_free,
    .copy = guarded_copy,
    .memset_zero = guarded_memset_zero,
    .sync = guarded_sync,
    .unavailable = guarded_unavailable,
    .take_error = guarded_take_error,
    .linear = guarded_linear,
    .gemv_batch = guarded_gemv_batch,
    .gemv_sum = guarded_gemv_sum,
    .linear_batch = guarded_linear_batch,
    .rmsnorm = guarded_rmsnorm,
    .gated_rmsnorm = guarded_gated_rmsnorm,
    .conv1d_silu = guarded_conv1d_silu,
    .softplus_dt = guarded_softplus_dt,
    .ssd_scan = guarded_ssd_scan,
    .attention = guarded_attention,
    .moe_route = guarded_moe_route,
    .moe_mask_scores = guarded_moe_mask_scores,
    .gather_rows = guarded_gather_rows,
    .scatter_add_rows = guarded_scatter_add_rows,
    .relu2 = guarded_relu2,
    .add = guarded_add,
    .mul_columns = guarded_mul_columns,
    .column_dot = guarded_column_dot,
    .neg_exp = guarded_neg_exp,
    .linear_backward = guarded_linear_backward,
    .rmsnorm_backward = guarded_rmsnorm_backward,
    .rmsnorm_width_backward = guarded_rmsnorm_width_backward,
    .relu2_backward = guarded_relu2_backward,
    .cross_entropy = guarded_cross_entropy,
    .kd_loss = guarded_kd_loss,
    .adamw = guarded_adamw,
    .sum_squares = guarded_sum_squares,
    .scale = guarded_scale,
    .ssd_scan_save = guarded_ssd_scan_save,
    .ssd_scan_backward = guarded_ssd_scan_backward,
    .mul_heads = guarded_mul_heads,
    .mul_heads_backward = guarded_mul_heads_backward,
    .softplus_dt_backward = guarded_softplus_dt_backward,
    .conv1d_silu_backward = guarded_conv1d_silu_backward,
    .gated_rmsnorm_backward = guarded_gated_rmsnorm_backward,
    .gated_rmsnorm_width_backward = guarded_gated_rmsnorm_width_backward,
    .attention_backward = guarded_attention_backward,
    .moe_route_backward = guarded_moe_route_backward,
    .moe_mask_scores_backward = guarded_moe_mask_scores_backward,
    .moe_combine_backward = guarded_moe_combine_backward,
    .gather_rows_backward = guarded_gather_rows_backward,
};

#endif
