#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>

/* Below this many rows, a matrix-vector product per row beats sgemm, which packs the
 * whole weight matrix on every call (measured: 80% of batch-1 decode time). */
enum { GEMV_MAX_ROWS = 4 };

void ac_cpu_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                   float beta, float *C, int ldc)
{
    (void)ctx;
    if (M == 0 || N == 0)
        return;
    if (M <= GEMV_MAX_ROWS) {
        for (int m = 0; m < M; m++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, K, A + (size_t)m * lda, 1, beta, C + (size_t)m * ldc, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, lda, W, K, beta, C, ldc);
}

void ac_cpu_linear_backward(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                            const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW)
{
    (void)ctx;
    if (M == 0)
        return;
    if (dA)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dC, lddc, W, K, beta_dA, dA, ldda);
    if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dC, lddc, A, lda, 1.0f, dW, K);
}
