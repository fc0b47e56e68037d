/* Matrix products through cuBLAS, f32 with TF32 off (CUBLAS_DEFAULT_MATH), so results
 * differ from the CPU's only by summation order; with bf16 weights, cublasGemmEx on bf16
 * operands with f32 sums.
 *
 * Row-major X[r, c] with row stride ld is, to column-major cuBLAS, X^T with leading
 * dimension ld. So C = A W^T (row-major) is C^T = W A^T (column-major): W [N, K] is the
 * column-major K x N matrix, taken transposed. */
#include "kernels/cuda/cuda_common.cuh"

#include <cublas_v2.h>

/* One handle per host thread (a handle is not safe to share between threads that set
 * different streams), destroyed when the thread ends. */
struct blas_handle {
    cublasHandle_t h = nullptr;
    ~blas_handle()
    {
        if (h)
            cublasDestroy(h);
    }
};

static cublasHandle_t blas(ac_kctx *ctx, const char *op)
{
    static thread_local blas_handle mine;
    if (!mine.h) {
        cublasStatus_t st = cublasCreate(&mine.h);
        if (st != CUBLAS_STATUS_SUCCESS) {
            ac_cuda_check_cublas(op, st);
            mine.h = nullptr;
            return nullptr;
        }
        ac_cuda_check_cublas(op, cublasSetMathMode(mine.h, CUBLAS_DEFAULT_MATH));
    }
    ac_cuda_check_cublas(op, cublasSetStream(mine.h, ac_cuda_stream(ctx)));
    return mine.h;
}

/* C [M, N] (ldc) = A [M, K] (lda) W [N, K]^T + beta C. cuBLAS takes leading dimensions
 * of at least 1 even where K = 0 leaves A and W unread (W's is K), so those pass 1. */
static void gemm_nt(cublasHandle_t h, const char *op, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *W, int ldw, float beta, float *C, int ldc)
{
    ac_cuda_check_cublas(op, cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, K > 0 ? ldw : 1, A,
                                         K > 0 ? lda : 1, &beta, C, ldc));
}

/* y [rows] = alpha W [rows, cols] x + beta y */
static void gemv(cublasHandle_t h, const char *op, int rows, int cols, float alpha, const float *W, const float *x,
                 float beta, float *y)
{
    ac_cuda_check_cublas(op, cublasSgemv(h, CUBLAS_OP_T, cols, rows, &alpha, W, cols, x, 1, &beta, y, 1));
}

/* K = 0: the product is empty, so C = beta C, which is what cuBLAS computes for k = 0
 * (gemm_nt gives it the leading dimensions of at least 1 it checks for). */
extern "C" void ac_cuda_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                               float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    cublasHandle_t h = blas(ctx, "linear");
    if (h)
        gemm_nt(h, "linear", M, N, K, 1.0f, A, lda, W, K, beta, C, ldc);
}

extern "C" void ac_cuda_gemv_batch(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                                   const float *const *x, float *const *y)
{
    cublasHandle_t h = n > 0 ? blas(ctx, "gemv_batch") : nullptr;
    if (!h)
        return;
    for (int i = 0; i < n; i++)
        if (rows[i] > 0)
            gemv(h, "gemv_batch", rows[i], cols[i], 1.0f, W[i], x[i], 0.0f, y[i]);
}

/* The first product overwrites y, the rest add to it; with no product y is zero. */
extern "C" void ac_cuda_gemv_sum(ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols,
                                 const float *const *x, const float *alpha, float *y)
{
    if (rows <= 0)
        return;
    if (n <= 0) {
        cudaMemsetAsync(y, 0, (size_t)rows * sizeof *y, ac_cuda_stream(ctx));
        ac_cuda_check("gemv_sum");
        return;
    }
    cublasHandle_t h = blas(ctx, "gemv_sum");
    if (!h)
        return;
    for (int i = 0; i < n; i++)
        gemv(h, "gemv_sum", rows, cols[i], alpha[i], W[i], x[i], i == 0 ? 0.0f : 1.0f, y);
}

extern "C" void ac_cuda_linear_batch(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A,
                                     int lda, const float *const *W, float *const *C, int ldc)
{
    cublasHandle_t h = n > 0 && N > 0 ? blas(ctx, "linear_batch") : nullptr;
    if (!h)
        return;
    for (int i = 0; i < n; i++)
        if (M[i] > 0)
            gemm_nt(h, "linear_batch", M[i], N, K, 1.0f, A[i], lda, W[i], K, 0.0f, C[i], ldc);
}

/* dA [M, K] = dC [M, N] W [N, K] + beta_dA dA: column-major dA^T = W^T dC^T, where W is
 * already the column-major K x N matrix. dW [N, K] += dC^T A: column-major
 * dW^T (K x N) = A^T (K x M) dC (M x N), dC being the column-major N x M matrix. */
extern "C" void ac_cuda_linear_backward(ac_kctx *ctx, int M, int N, int K, const float *A, int lda,
                                        const float *W, const float *dC, int lddc, float beta_dA, float *dA,
                                        int ldda, float *dW)
{
    if (M <= 0 || K <= 0) /* N = 0 still scales dA by beta_dA, as cuBLAS does for k = 0 */
        return;
    cublasHandle_t h = blas(ctx, "linear_backward");
    if (!h)
        return;
    const float one = 1.0f;
    /* N = 0: dC is unread, but cuBLAS wants its leading dimension >= 1; dW is empty */
    if (dA)
        ac_cuda_check_cublas("linear_backward", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, W, K, dC,
                                                            N > 0 ? lddc : 1, &beta_dA, dA, ldda));
    if (dW && N > 0)
        ac_cuda_check_cublas("linear_backward", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, A, lda, dC,
                                                            lddc, &one, dW, K));
}

extern "C" void ac_cuda_linear_batch_backward(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A,
                                              int lda, const float *const *W, const float *const *dC, int lddc,
                                              float *const *dA, int ldda, float *const *dW)
{
    for (int i = 0; i < n; i++)
        ac_cuda_linear_backward(ctx, M[i], N, K, A ? A[i] : nullptr, lda, W ? W[i] : nullptr, dC[i], lddc, 0.0f,
                                dA ? dA[i] : nullptr, ldda, dW ? dW[i] : nullptr);
}

/* ---- bf16 weights ---- */

/* A host thread's device buffer for the bf16 copies of products' inputs: grown when a
 * product needs more (a runtime's first steps), freed when the thread ends. One buffer
 * per thread is enough because a thread's ops all go to one stream (the default), where
 * a product has read it before the next one's inputs are rounded into it. */
struct bf16_staging {
    uint16_t *p = nullptr;
    size_t count = 0;
    ~bf16_staging()
    {
        if (p)
            cudaFree(p);
    }
};

static uint16_t *staging(size_t count, const char *op)
{
    static thread_local bf16_staging mine;
    if (count <= mine.count)
        return mine.p;
    if (mine.p)
        cudaFree(mine.p); /* waits for the products queued that read it */
    mine.p = nullptr;
    mine.count = 0;
    if (cudaMalloc(&mine.p, count * sizeof *mine.p) != cudaSuccess) {
        mine.p = nullptr;
        ac_cuda_check(op);
        return nullptr;
    }
    mine.count = count;
    return mine.p;
}

/* out [M, K] (packed) = bf16(A [M, K], row stride lda) */
static __global__ void round_rows_kernel(int M, int K, const float *A, int lda, uint16_t *out)
{
    size_t n = (size_t)M * K;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = ac_cuda_float_to_bf16(A[(i / K) * lda + i % K]);
}

enum { ROUND_THREADS = 256 };

/* C = alpha bf16(A) W^T + beta C: A's rows rounded into the staging buffer, then one
 * GemmEx, laid out as gemm_nt lays out cublasSgemm's operands. */
extern "C" void ac_cuda_linear_bf16(ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda,
                                    const uint16_t *W, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    cublasHandle_t h = blas(ctx, "linear_bf16");
    uint16_t *a16 = K > 0 ? staging((size_t)M * K, "linear_bf16") : nullptr;
    if (!h || (K > 0 && !a16))
        return;
    if (K > 0) {
        round_rows_kernel<<<ac_cuda_blocks((size_t)M * K, ROUND_THREADS, AC_CUDA_GRID_CAP), ROUND_THREADS, 0,
                            ac_cuda_stream(ctx)>>>(M, K, A, lda, a16);
        ac_cuda_check("linear_bf16");
    }
    ac_cuda_check_cublas("linear_bf16", cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16BF,
                                                     K > 0 ? K : 1, a16, CUDA_R_16BF, K > 0 ? K : 1, &beta, C,
                                                     CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
