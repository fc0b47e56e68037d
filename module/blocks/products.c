/* What a block's forward and backward use besides the ops: planned scratch, and the
 * products with the model's weights: the f32 ops, or for a bf16 serving copy (c->bf16)
 * ac_k_linear_bf16, which reads the weights as bf16 values. A decode step's batch of
 * matrix-vector products becomes one bf16 product each: on a device, cuBLAS runs each as
 * its own launch either way. */
#include "blocks/block.h"

float *ac_block_scratch(ac_block_ctx *c, size_t count)
{
    float *p = c->scratch + c->scratch_used;
    c->scratch_used += count;
    return p;
}

float *ac_block_upload(ac_block_ctx *c, const float *host, size_t n)
{
    float *p = ac_block_scratch(c, n);
    ac_backend_of(c->kctx)->copy(p, host, n * sizeof *p, AC_COPY_HOST_TO_DEVICE);
    return p;
}

const float *ac_block_weights_at(const ac_block_ctx *c, const float *W, size_t offset)
{
    if (c->bf16)
        return (const float *)(const void *)(ac_model_bf16_view(W) + offset);
    return W + offset;
}

void ac_block_linear(const ac_block_ctx *c, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                     float *C, int ldc)
{
    if (c->bf16)
        ac_k_linear_bf16(c->kctx, M, N, K, 1.0f, A, lda, ac_model_bf16_view(W), beta, C, ldc);
    else
        ac_k_linear(c->kctx, M, N, K, A, lda, W, beta, C, ldc);
}

void ac_block_gemv_batch(const ac_block_ctx *c, int n, const float *const *W, const int *rows, const int *cols,
                         const float *const *x, float *const *y)
{
    if (!c->bf16) {
        ac_k_gemv_batch(c->kctx, n, W, rows, cols, x, y);
        return;
    }
    for (int i = 0; i < n; i++)
        ac_k_linear_bf16(c->kctx, 1, rows[i], cols[i], 1.0f, x[i], cols[i], ac_model_bf16_view(W[i]), 0.0f, y[i],
                         rows[i]);
}

void ac_block_linear_batch(const ac_block_ctx *c, int n, const int *M, int N, int K, const float *const *A, int lda,
                           const float *const *W, float *const *C, int ldc)
{
    if (!c->bf16) {
        ac_k_linear_batch(c->kctx, n, M, N, K, A, lda, W, C, ldc);
        return;
    }
    for (int i = 0; i < n; i++)
        ac_k_linear_bf16(c->kctx, M[i], N, K, 1.0f, A[i], lda, ac_model_bf16_view(W[i]), 0.0f, C[i], ldc);
}
