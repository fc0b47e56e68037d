/* The forward's products with the model's weights: the f32 ops, or for a bf16 serving
 * copy (model->bf16) ac_k_linear_bf16, which reads the weights as bf16 values. A decode
 * step's batch of matrix-vector products becomes one bf16 product each: on a device,
 * cuBLAS runs each as its own launch either way. */
#include "runtime/runtime_internal.h"

const float *ac_rt_weights_at(const ac_runtime *rt, const float *W, size_t offset)
{
    if (rt->model->bf16)
        return (const float *)(const void *)(ac_model_bf16_view(W) + offset);
    return W + offset;
}

void ac_rt_linear(ac_runtime *rt, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                  float *C, int ldc)
{
    if (rt->model->bf16)
        ac_k_linear_bf16(&rt->kctx, M, N, K, 1.0f, A, lda, ac_model_bf16_view(W), beta, C, ldc);
    else
        ac_k_linear(&rt->kctx, M, N, K, A, lda, W, beta, C, ldc);
}

void ac_rt_gemv_batch(ac_runtime *rt, int n, const float *const *W, const int *rows, const int *cols,
                      const float *const *x, float *const *y)
{
    if (!rt->model->bf16) {
        ac_k_gemv_batch(&rt->kctx, n, W, rows, cols, x, y);
        return;
    }
    for (int i = 0; i < n; i++)
        ac_k_linear_bf16(&rt->kctx, 1, rows[i], cols[i], 1.0f, x[i], cols[i], ac_model_bf16_view(W[i]), 0.0f, y[i],
                         rows[i]);
}

void ac_rt_linear_batch(ac_runtime *rt, int n, const int *M, int N, int K, const float *const *A, int lda,
                        const float *const *W, float *const *C, int ldc)
{
    if (!rt->model->bf16) {
        ac_k_linear_batch(&rt->kctx, n, M, N, K, A, lda, W, C, ldc);
        return;
    }
    for (int i = 0; i < n; i++)
        ac_k_linear_bf16(&rt->kctx, M[i], N, K, 1.0f, A[i], lda, ac_model_bf16_view(W[i]), 0.0f, C[i], ldc);
}

void ac_rt_embed(ac_runtime *rt, int n, const int32_t *ids, float *rows)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden;
    if (m->bf16)
        ac_k_gather_rows_bf16(&rt->kctx, n, D, ac_model_bf16_view(m->embeddings), D, ids, rows);
    else
        ac_k_gather_rows(&rt->kctx, n, D, m->embeddings, D, ids, rows);
}
