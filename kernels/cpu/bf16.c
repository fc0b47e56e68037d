/* Products with bf16 weights: the reference for a device's serving path (kernels.h says
 * what they compute). Direct loops rather than a BLAS call: the point is the rounding a
 * GPU's bf16 GEMM applies (each operand rounded, sums in f32), which OpenBLAS's sgemm on
 * widened copies would also give, but only at the cost of a copy of the weights per call;
 * a bf16 model on the CPU is for checking a device's results, not for speed. */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_parallel.h"

#include "autocompress/dtype.h"

/* Below this many multiply-adds a product runs on the calling thread. */
enum { BF16_PARALLEL_MIN = 16384 };

/* C[m, n] for m in [m0, m1) and every n: row m of A rounded into a (K floats), then one
 * dot product per weight row. */
static void linear_bf16_rows(int m0, int m1, int N, int K, float alpha, const float *A, int lda, const uint16_t *W,
                             float beta, float *C, int ldc, float *a)
{
    for (int m = m0; m < m1; m++) {
        const float *row = A + (size_t)m * lda;
        for (int k = 0; k < K; k++)
            a[k] = ac_bf16_round(row[k]);
        float *c = C + (size_t)m * ldc;
        for (int n = 0; n < N; n++) {
            const uint16_t *w = W + (size_t)n * K;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int k = 0; k < K; k++)
                dot += a[k] * ac_bf16_to_float(w[k]);
            c[n] = beta == 0.0f ? alpha * dot : alpha * dot + beta * c[n];
        }
    }
}

/* The threads split the rows of C when there are several, else the columns of the one
 * row (a decode step's product). Each thread rounds a row of A at a time into a buffer of
 * K floats on its own stack. */
void ac_cpu_linear_bf16(ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const uint16_t *W,
                        float beta, float *C, int ldc)
{
    (void)ctx;
    if (M <= 0 || N <= 0)
        return;
    int parallel = (long)M * N * K >= BF16_PARALLEL_MIN;
#pragma omp parallel if (parallel)
    {
        float a[K > 0 ? K : 1];
        long first, last;
        if (M > 1) {
            ac_cpu_thread_share(M, &first, &last);
            linear_bf16_rows((int)first, (int)last, N, K, alpha, A, lda, W, beta, C, ldc, a);
        } else {
            ac_cpu_thread_share(N, &first, &last);
            linear_bf16_rows(0, 1, (int)(last - first), K, alpha, A, lda, W + (size_t)first * K, beta, C + first,
                             ldc, a);
        }
    }
}

void ac_cpu_gather_rows_bf16(ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,
                             float *dst)
{
    (void)ctx;
    for (int i = 0; i < n; i++) {
        const uint16_t *s = src + (size_t)rows[i] * ldsrc;
        float *d = dst + (size_t)i * D;
        for (int j = 0; j < D; j++)
            d[j] = ac_bf16_to_float(s[j]);
    }
}
