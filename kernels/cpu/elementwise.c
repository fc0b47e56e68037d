#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>

enum { ELEMENTWISE_PARALLEL_MIN = 65536, ROWS_PARALLEL_MIN = 64 };

static void relu2_range(long first, long last, const float *x, float *y)
{
    for (long i = first; i < last; i++) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = r * r;
    }
}

void ac_cpu_relu2(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    (void)ctx;
    if (n <= ELEMENTWISE_PARALLEL_MIN) {
        relu2_range(0, (long)n, x, y);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share((long)n, &first, &last);
        relu2_range(first, last, x, y);
    }
}

void ac_cpu_relu2_backward(ac_kctx *ctx, size_t n, const float *pre, float *grad)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        grad[i] = pre[i] > 0.0f ? 2.0f * pre[i] * grad[i] : 0.0f;
}

void ac_cpu_mul_columns(ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if ((long)rows * cols > 65536)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            x[(size_t)r * ldx + c] *= mask[c];
}

void ac_cpu_column_dot(ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb, float *out)
{
    (void)ctx;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            out[c] += a[(size_t)r * lda + c] * b[(size_t)r * ldb + c];
}

/* glibc's expf, not cpu_math.h's: it runs once per head per block, off the hot loops. */
void ac_cpu_neg_exp(ac_kctx *ctx, int n, const float *x, float *y)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        y[i] = -expf(x[i]);
}

static void add_range(long first, long last, const float *x, float *y)
{
    for (long i = first; i < last; i++)
        y[i] += x[i];
}

void ac_cpu_add(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    (void)ctx;
    if (n <= ELEMENTWISE_PARALLEL_MIN) {
        add_range(0, (long)n, x, y);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share((long)n, &first, &last);
        add_range(first, last, x, y);
    }
}

static void gather_range(long first, long last, int D, const float *src, int ldsrc, const int32_t *rows, float *dst)
{
    for (long i = first; i < last; i++) {
        const float *s = src + (size_t)rows[i] * ldsrc;
        float *d = dst + (size_t)i * D;
        for (int j = 0; j < D; j++)
            d[j] = s[j];
    }
}

void ac_cpu_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows,
                        float *dst)
{
    (void)ctx;
    if (n <= ROWS_PARALLEL_MIN) {
        gather_range(0, n, D, src, ldsrc, rows, dst);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(n, &first, &last);
        gather_range(first, last, D, src, ldsrc, rows, dst);
    }
}

/* Each thread owns a stretch of the D columns and adds every row into it in order of i:
 * repeated ids never race, and each element sums in the same order as one thread would. */
static void embedding_columns(long first, long last, int n, int D, const float *drows, const int32_t *ids,
                              float *dtable)
{
    for (int i = 0; i < n; i++) {
        const float *s = drows + (size_t)i * D;
        float *d = dtable + (size_t)ids[i] * D;
        for (long c = first; c < last; c++)
            d[c] += s[c];
    }
}

void ac_cpu_embedding_backward(ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids, float *dtable)
{
    (void)ctx;
    if ((long)n * D <= ELEMENTWISE_PARALLEL_MIN) {
        embedding_columns(0, D, n, D, drows, ids, dtable);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(D, &first, &last);
        embedding_columns(first, last, n, D, drows, ids, dtable);
    }
}

void ac_cpu_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                             const float *weight, float *dst, int lddst)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 64)
    for (int i = 0; i < n; i++) {
        const float *s = src + (size_t)i * D;
        float *d = dst + (size_t)rows[i] * lddst;
        float w = weight[i];
        for (int j = 0; j < D; j++)
            d[j] += w * s[j];
    }
}
