#include "kernels/kernels.h"

#include <cblas.h>

void ac_k_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                 float beta, float *C, int ldc)
{
    (void)ctx;
    if (M == 0 || N == 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, lda, W, K, beta, C, ldc);
}
