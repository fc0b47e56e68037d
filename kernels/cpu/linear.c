#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_parallel.h"

#include <cblas.h>
#include <omp.h>

/* Below this many rows, a matrix-vector product per row beats sgemm, which packs the
 * whole weight matrix on every call (most of a batch-1 decode step's time: see
 * docs/results.md). */
enum { GEMV_MAX_ROWS = 4 };
/* Matrix-vector products of fewer multiply-adds in all run on the calling thread (OpenBLAS
 * threads none below 9216 either); rows go to threads in blocks of this many. */
enum { GEMV_PARALLEL_MIN = 9216, GEMV_ROW_BLOCK = 16 };

/* y_i = W_i x_i + beta y_i for n products in one parallel region: each product's rows
 * split evenly among the threads in blocks of GEMV_ROW_BLOCK, each thread running
 * OpenBLAS's gemv on its slices (single-threaded inside the region). One region for a
 * token's several small projections instead of OpenBLAS's own threads for each, whose
 * start and join cost more than such a product (see docs/results.md). Every thread takes
 * a share of every product: with the rows split end to end, one thread read a shared
 * expert's weights, in cache from the token before, while the other read the routed
 * experts' from memory. */
static void gemv_slices(int n, const float *const *W, const int *rows, const int *cols, const float *const *x,
                        float beta, float *const *y)
{
    long work = 0;
    for (int i = 0; i < n; i++)
        work += (long)rows[i] * cols[i];
#pragma omp parallel if (work >= GEMV_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        long lo, hi;
        ac_cpu_thread_blocks(rows[i], GEMV_ROW_BLOCK, &lo, &hi);
        if (lo < hi)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(hi - lo), cols[i], 1.0f, W[i] + (size_t)lo * cols[i],
                        cols[i], x[i], 1, beta, y[i] + lo, 1);
    }
}

void ac_cpu_gemv_batch(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                       const float *const *x, float *const *y)
{
    (void)ctx;
    gemv_slices(n, W, rows, cols, x, 0.0f, y);
}

/* The output rows split among the threads in blocks of GEMV_ROW_BLOCK; each thread adds
 * the products over its rows in the order given. */
void ac_cpu_gemv_sum(ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols, const float *const *x,
                     const float *alpha, float *y)
{
    (void)ctx;
    long work = 0;
    for (int i = 0; i < n; i++)
        work += (long)rows * cols[i];
    if (n == 0) {
        for (int r = 0; r < rows; r++)
            y[r] = 0.0f;
        return;
    }
#pragma omp parallel if (work >= GEMV_PARALLEL_MIN)
    {
        long first, last;
        ac_cpu_thread_blocks(rows, GEMV_ROW_BLOCK, &first, &last);
        for (int i = 0; first < last && i < n; i++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(last - first), cols[i], alpha[i],
                        W[i] + (size_t)first * cols[i], cols[i], x[i], 1, i ? 1.0f : 0.0f, y + first, 1);
    }
}

/* Products of at least this many multiply-adds split among the threads (below it, one
 * thread's sgemm is quicker than a parallel region). */
enum { SGEMM_PARALLEL_MIN = 1 << 20, SGEMM_SLAB_ALIGN = 16 };

/* C [M, N] = op(A) op(B) + beta C (row-major; op(A) is M x K, op(B) is K x N) with C cut
 * into one slab per thread along its longer side, each slab one single-threaded OpenBLAS
 * sgemm inside the region. OpenBLAS's own threading of the same call is slower on the
 * engine's shapes (see docs/results.md): it splits into more pieces than threads and
 * syncs between them. Each element of C is the same sum over K whichever slab holds
 * it. */
static void sgemm_split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc)
{
    int by_rows = M >= N;
    if ((long)M * N * K < SGEMM_PARALLEL_MIN || omp_in_parallel()) {
        /* not "parallel if": OpenBLAS inside a team of one starts its threads as a nested
         * team (far more context switches, a slower prefill: see docs/results.md) */
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_blocks(by_rows ? M : N, SGEMM_SLAB_ALIGN, &first, &last);
        if (first < last && by_rows)
            cblas_sgemm(CblasRowMajor, ta, tb, (int)(last - first), N, K, 1.0f,
                        ta == CblasNoTrans ? A + first * lda : A + first, lda, B, ldb, beta, C + first * ldc, ldc);
        else if (first < last)
            cblas_sgemm(CblasRowMajor, ta, tb, M, (int)(last - first), K, 1.0f, A, lda,
                        tb == CblasNoTrans ? B + first : B + first * ldb, ldb, beta, C + first, ldc);
    }
}

/* A batch's products (or pieces of them) go to threads, each run by one thread with
 * OpenBLAS single-threaded inside the region: for the small products of experts that see
 * a few tokens each, OpenBLAS's own threads per product cost more than they save. Whole
 * products (when a weight gradient sums over their rows): largest first, each to the
 * thread with the least work so far (rows of the same N and K cost alike). */
enum { LINEAR_BATCH_MAX_THREADS = 64 };

static void assign_products(int n, const int *M, int threads, int *owner)
{
    long load[LINEAR_BATCH_MAX_THREADS] = {0};
    for (int i = 0; i < n; i++)
        owner[i] = -1;
    for (int placed = 0; placed < n; placed++) {
        int big = -1;
        for (int i = 0; i < n; i++)
            if (owner[i] < 0 && (big < 0 || M[i] > M[big]))
                big = i;
        int least = 0;
        for (int t = 1; t < threads; t++)
            if (load[t] < load[least])
                least = t;
        owner[big] = least;
        load[least] += M[big];
    }
}

/* One batch of products, forward (C_i = A_i W_i^T) or backward (dA_i, dW_i from dC_i). */
typedef struct {
    int N, K, lda, ldc, ldda, backward; /* ldc: C's or dC's */
    const float *const *A, *const *W, *const *dC;
    float *const *C, *const *dA, *const *dW; /* C: forward; dA and dW: backward (either may be NULL) */
} product_batch;

/* Rows [r0, r0 + rows) of product i. */
static void run_product(ac_kctx *ctx, const product_batch *b, int i, int r0, int rows)
{
    size_t at = (size_t)r0;
    if (!b->backward) {
        ac_cpu_linear(ctx, rows, b->N, b->K, b->A[i] + at * b->lda, b->lda, b->W[i], 0.0f, b->C[i] + at * b->ldc,
                      b->ldc);
        return;
    }
    ac_cpu_linear_backward(ctx, rows, b->N, b->K, b->A ? b->A[i] + at * b->lda : NULL, b->lda, b->W ? b->W[i] : NULL,
                           b->dC[i] + at * b->ldc, b->ldc, 0.0f, b->dA ? b->dA[i] + at * b->ldda : NULL, b->ldda,
                           b->dW ? b->dW[i] : NULL);
}

/* Rows [first, last) of the products' rows end to end: a product whose rows no weight
 * gradient sums over may be cut anywhere. */
static void run_rows(ac_kctx *ctx, int n, const int *M, const product_batch *b, long first, long last)
{
    long base = 0;
    for (int i = 0; i < n; i++) {
        long lo = first > base ? first : base, hi = last < base + M[i] ? last : base + M[i];
        if (lo < hi)
            run_product(ctx, b, i, (int)(lo - base), (int)(hi - lo));
        base += M[i];
    }
}

/* Small batches, and a single product when split_one (it then splits among the threads
 * itself), run on the calling thread, not in a "parallel if" team of one, inside which
 * OpenBLAS would start a nested team of its own (see sgemm_split). Without weight
 * gradients the rows split evenly among the threads (in blocks of SGEMM_SLAB_ALIGN); with
 * them each product goes to one thread whole (whole products left the experts' forward
 * unbalanced, slower than one product split: see docs/results.md). */
static void run_batch(ac_kctx *ctx, int n, const int *M, const product_batch *b, int split_one)
{
    enum { MAX = 1024 };
    int owner[MAX];
    long rows = 0;
    for (int i = 0; i < n; i++)
        rows += M[i];
    if ((split_one && n == 1) || n > MAX || rows * b->N * b->K < GEMV_PARALLEL_MIN) {
        for (int i = 0; i < n; i++)
            run_product(ctx, b, i, 0, M[i]);
        return;
    }
    int by_rows = !b->backward || !b->dW;
#pragma omp parallel
    {
        int me = omp_get_thread_num(), threads = omp_get_num_threads();
        if (by_rows) {
            long first, last;
            ac_cpu_thread_blocks(rows, SGEMM_SLAB_ALIGN, &first, &last);
            run_rows(ctx, n, M, b, first, last);
        } else {
#pragma omp single
            assign_products(n, M, threads < LINEAR_BATCH_MAX_THREADS ? threads : LINEAR_BATCH_MAX_THREADS, owner);
            /* single's barrier: every owner is set */
            for (int i = 0; i < n; i++)
                if (owner[i] == me)
                    run_product(ctx, b, i, 0, M[i]);
        }
    }
}

void ac_cpu_linear_batch(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                         const float *const *W, float *const *C, int ldc)
{
    product_batch b = {.N = N, .K = K, .lda = lda, .ldc = ldc, .A = A, .W = W, .C = C};
    run_batch(ctx, n, M, &b, 0);
}

/* As linear_batch; one product (a shared expert's T rows) goes through linear_backward,
 * which splits it among the threads. */
void ac_cpu_linear_batch_backward(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                                  const float *const *W, const float *const *dC, int lddc, float *const *dA, int ldda,
                                  float *const *dW)
{
    product_batch b = {.N = N, .K = K, .lda = lda, .ldc = lddc, .ldda = ldda, .backward = 1, .A = A, .W = W, .dC = dC,
                       .dA = dA, .dW = dW};
    run_batch(ctx, n, M, &b, 1);
}

void ac_cpu_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                   float beta, float *C, int ldc)
{
    (void)ctx;
    if (M == 0 || N == 0)
        return;
    if (M <= GEMV_MAX_ROWS) {
        const float *Ws[GEMV_MAX_ROWS], *xs[GEMV_MAX_ROWS];
        float *ys[GEMV_MAX_ROWS];
        int rows[GEMV_MAX_ROWS], cols[GEMV_MAX_ROWS];
        for (int m = 0; m < M; m++) {
            Ws[m] = W;
            xs[m] = A + (size_t)m * lda;
            ys[m] = C + (size_t)m * ldc;
            rows[m] = N;
            cols[m] = K;
        }
        gemv_slices(M, Ws, rows, cols, xs, beta, ys);
        return;
    }
    sgemm_split(CblasNoTrans, CblasTrans, M, N, K, A, lda, W, K, beta, C, ldc);
}

void ac_cpu_linear_backward(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                            const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW)
{
    (void)ctx;
    if (M == 0)
        return;
    if (dA)
        sgemm_split(CblasNoTrans, CblasNoTrans, M, K, N, dC, lddc, W, K, beta_dA, dA, ldda);
    if (dW)
        sgemm_split(CblasTrans, CblasNoTrans, N, K, M, dC, lddc, A, lda, 1.0f, dW, K);
}
