/* The CUDA implementations of the ops of kernels/kernels.h, one ac_cuda_X per member X of
 * struct ac_backend, with the same signature and meaning (documented there). Every
 * pointer to tensor data is device memory; the small host-side lists some ops take (the
 * pointer, size and alpha arrays of gemv_batch, gemv_sum and linear_batch, moe_token's
 * ac_k_moe_ffn) are host memory, as the runtime builds them per call. Every op is queued
 * on ctx's stream (cudaStream_t, NULL: the default stream) and returns without waiting, except
 * sum_squares, which returns its value. Only kernels/cuda and the backend tests include
 * this header; everything else calls the ac_k_* dispatchers. */
#ifndef AC_KERNELS_CUDA_OPS_H
#define AC_KERNELS_CUDA_OPS_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend table (kernels/cuda/cuda_backend.cu). */
extern const ac_backend ac_cuda_backend;
/* Device memory in use, by the device's own accounting (cudaMemGetInfo: total - free);
 * 0 when it cannot say (the failure goes to take_error). */
size_t ac_cuda_bytes_in_use(void);

/* ---- forward ---- */

void ac_cuda_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                    float *C, int ldc);
void ac_cuda_gemv_batch(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                        const float *const *x, float *const *y);
void ac_cuda_gemv_sum(ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols, const float *const *x,
                      const float *alpha, float *y);
void ac_cuda_linear_batch(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                          const float *const *W, float *const *C, int ldc);
void ac_cuda_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                     float *y, int ldy);
void ac_cuda_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                           const float *z, int ldz, const float *w, float eps, float *out, int ldout);
void ac_cuda_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                         const float *bias, float *state, float *y, int ldy);
void ac_cuda_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                         float dt_min, float *dt);
void ac_cuda_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                      const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,
                      float *state, float *y, int ldy);
void ac_cuda_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                       const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout,
                       float *lse, int ldlse);
void ac_cuda_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,
                       int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight);
void ac_cuda_moe_token(ac_kctx *ctx, const ac_k_moe_ffn *ffn, int T, int k, const int32_t *idx, const float *weight,
                       const float *x, float *hidden, float *y);
void ac_cuda_moe_mask_scores(ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,
                             float *masked_bias);
void ac_cuda_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows,
                         float *dst);
void ac_cuda_linear_bf16(ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda,
                         const uint16_t *W, float beta, float *C, int ldc);
void ac_cuda_gather_rows_bf16(ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,
                              float *dst);
void ac_cuda_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                              const float *weight, float *dst, int lddst);
void ac_cuda_relu2(ac_kctx *ctx, size_t n, const float *x, float *y);
void ac_cuda_add(ac_kctx *ctx, size_t n, const float *x, float *y);
void ac_cuda_mul_columns(ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx);
void ac_cuda_column_dot(ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb,
                        float *out);
void ac_cuda_neg_exp(ac_kctx *ctx, int n, const float *x, float *y);

/* ---- backward ---- */

void ac_cuda_linear_backward(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                             const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW);
void ac_cuda_linear_batch_backward(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                                   const float *const *W, const float *const *dC, int lddc, float *const *dA,
                                   int ldda, float *const *dW);
void ac_cuda_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                              float eps, const float *dy, int lddy, float beta_dx, float *dx, int lddx, float *dw);
void ac_cuda_relu2_backward(ac_kctx *ctx, size_t n, const float *pre, float *grad);
void ac_cuda_cross_entropy(ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets,
                           float scale, float *dlogits, double *row_loss);
void ac_cuda_kd_loss(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau,
                     float scale, float *dlogits, double *row_loss);
void ac_cuda_adamw(ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int step);
double ac_cuda_sum_squares(ac_kctx *ctx, size_t n, const float *x);
void ac_cuda_scale(ac_kctx *ctx, size_t n, float s, float *x);
void ac_cuda_ssd_scan_save(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                           const float *B, const float *C, int ldbc, const float *dt, const float *A,
                           const float *Dskip, const float *state0, float *states, float *y, int ldy);
void ac_cuda_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                               const float *B, const float *C, int ldbc, const float *dt, const float *A,
                               const float *Dskip, const float *state0, float *states, const float *dy,
                               int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt,
                               float *dA, float *dD, float *work);
void ac_cuda_mul_heads(ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx);
void ac_cuda_mul_heads_backward(ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,
                                float *dy, int lddy, float *dmask);
void ac_cuda_softplus_dt_backward(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                                  float dt_min, const float *ddt, float *draw, int lddraw, float *dbias);
void ac_cuda_conv1d_silu_backward(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                                  const float *bias, const float *state, const float *dy, int lddy, float *dx,
                                  int lddx, float *dw, float *dbias);
void ac_cuda_gated_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                    const float *z, int ldz, const float *w, float eps, const float *dout,
                                    int lddout, float *dy, int lddy, float *dz, int lddz, float *dw,
                                    float *rstd);
void ac_cuda_gated_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *out, int ldout,
                                      const float *dout, int lddout, const float *rstd, float eps, float width,
                                      float scale, float per_head, int heads, float *dmask);
void ac_cuda_attention_backward(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                                const float *k, const float *v, int ldkv, const float *datt, float scale,
                                const float *out, float *stats, float *dq, float *dk, float *dv);
void ac_cuda_moe_route_backward(ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm,
                                float scale, const int32_t *idx, const float *dweight, float *dlogits);
void ac_cuda_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                                    float eps, float width, const float *dy, int lddy, float *dwidth);
void ac_cuda_moe_mask_scores_backward(ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits,
                                      float *dmask);
void ac_cuda_moe_combine_backward(ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,
                                  const float *y, const float *weight, const float *mask, const int32_t *pair,
                                  float *dweight, float *dmask, float *dy);
void ac_cuda_gather_rows_backward(ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows,
                                  float *dsrc, int lddsrc);
void ac_cuda_embedding_backward(ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids, float *dtable);

#ifdef __cplusplus
}
#endif

#endif
