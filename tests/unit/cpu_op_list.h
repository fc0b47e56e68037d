/* Every op of struct ac_backend that returns nothing, as X(member, (parameters),
 * (arguments)), for test backends that wrap the CPU's ops (the op harness's counting
 * backend, guarded_backend.h). sum_squares, which returns a value, is written out where
 * it is wrapped. */
#ifndef AC_TESTS_CPU_OP_LIST_H
#define AC_TESTS_CPU_OP_LIST_H

#define CPU_VOID_OPS(X) \
    X(linear, (ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta, float *C,  \
      int ldc), (ctx, M, N, K, A, lda, W, beta, C, ldc))                                                          \
    X(gemv_batch, (ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,                  \
      const float *const *x, float *const *y), (ctx, n, W, rows, cols, x, y))                                     \
    X(gemv_sum, (ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols, const float *const *x,    \
      const float *alpha, float *y), (ctx, n, W, rows, cols, x, alpha, y))                                        \
    X(linear_batch, (ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,             \
      const float *const *W, float *const *C, int ldc), (ctx, n, M, N, K, A, lda, W, C, ldc))                     \
    X(rmsnorm, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps, float *y,    \
      int ldy), (ctx, rows, dim, x, ldx, w, eps, y, ldy))                                                         \
    X(gated_rmsnorm, (ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy, const float *z,   \
      int ldz, const float *w, float eps, float *out, int ldout), (ctx, rows, dim, group_size, y, ldy, z, ldz,    \
      w, eps, out, ldout))                                                                                        \
    X(conv1d_silu, (ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,                   \
      const float *bias, float *state, float *y, int ldy), (ctx, T, C, K, x, ldx, w, bias, state, y, ldy))        \
    X(softplus_dt, (ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias, float dt_min,     \
      float *dt), (ctx, T, H, raw, ldraw, bias, dt_min, dt))                                                      \
    X(ssd_scan, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,        \
      const float *C, int ldbc, const float *dt, const float *A, const float *Dskip, float *state, float *y,      \
      int ldy), (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, y, ldy))                            \
    X(attention, (ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,      \
      const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout, float *lse,        \
      int ldlse), (ctx, n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale, out, ldout, lse,    \
      ldlse))                                                                                                     \
    X(moe_route, (ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,                \
      int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight), (ctx, T, E, logits, bias,   \
      n_group, topk_group, top_k, norm, scale, idx, weight))                                                      \
    X(moe_token, (ac_kctx *ctx, const ac_k_moe_ffn *ffn, int T, int k, const int32_t *idx, const float *weight,   \
      const float *x, float *hidden, float *y), (ctx, ffn, T, k, idx, weight, x, hidden, y))                      \
    X(moe_mask_scores, (ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,          \
      float *masked_bias), (ctx, T, E, mask, bias, logits, masked_bias))                                          \
    X(moe_mask_scores_backward, (ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits,             \
      float *dmask), (ctx, T, E, mask, dlogits, dmask))                                                           \
    X(rmsnorm_width_backward, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,          \
      float eps, float width, const float *dy, int lddy, float *dwidth), (ctx, rows, dim, x, ldx, w, eps, width,  \
      dy, lddy, dwidth))                                                                                          \
    X(gather_rows, (ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows, float *dst),    \
      (ctx, n, D, src, ldsrc, rows, dst))                                                                         \
    X(linear_bf16, (ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda, const uint16_t *W,    \
      float beta, float *C, int ldc), (ctx, M, N, K, alpha, A, lda, W, beta, C, ldc))                             \
    X(gather_rows_bf16, (ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,          \
      float *dst), (ctx, n, D, src, ldsrc, rows, dst))                                                            \
    X(scatter_add_rows, (ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows, const float *weight,  \
      float *dst, int lddst), (ctx, n, D, src, rows, weight, dst, lddst))                                         \
    X(relu2, (ac_kctx *ctx, size_t n, const float *x, float *y), (ctx, n, x, y))                                  \
    X(add, (ac_kctx *ctx, size_t n, const float *x, float *y), (ctx, n, x, y))                                    \
    X(mul_columns, (ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx), (ctx, rows, cols,    \
      mask, x, ldx))                                                                                              \
    X(column_dot, (ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb,            \
      float *out), (ctx, rows, cols, a, lda, b, ldb, out))                                                        \
    X(neg_exp, (ac_kctx *ctx, int n, const float *x, float *y), (ctx, n, x, y))                                   \
    X(gated_rmsnorm_width_backward, (ac_kctx *ctx, int rows, int dim, const float *out, int ldout,                \
      const float *dout, int lddout, const float *rstd, float eps, float width, float scale, float per_head,      \
      int heads, float *dmask), (ctx, rows, dim, out, ldout, dout, lddout, rstd, eps, width, scale, per_head,     \
      heads, dmask))                                                                                              \
    X(linear_backward, (ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,               \
      const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW), (ctx, M, N, K, A, lda, W, dC,    \
      lddc, beta_dA, dA, ldda, dW))                                                                               \
    X(linear_batch_backward, (ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,    \
      const float *const *W, const float *const *dC, int lddc, float *const *dA, int ldda, float *const *dW),     \
      (ctx, n, M, N, K, A, lda, W, dC, lddc, dA, ldda, dW))                                                       \
    X(rmsnorm_backward, (ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,     \
      const float *dy, int lddy, float beta_dx, float *dx, int lddx, float *dw), (ctx, rows, dim, x, ldx, w, eps, \
      dy, lddy, beta_dx, dx, lddx, dw))                                                                           \
    X(relu2_backward, (ac_kctx *ctx, size_t n, const float *pre, float *grad), (ctx, n, pre, grad))               \
    X(cross_entropy, (ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets, float scale,    \
      float *dlogits, double *row_loss), (ctx, rows, V, logits, targets, scale, dlogits, row_loss))               \
    X(kd_loss, (ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau,             \
      float scale, float *dlogits, double *row_loss), (ctx, rows, V, student, teacher, tau, scale, dlogits,       \
      row_loss))                                                                                                  \
    X(adamw, (ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,      \
      float beta1, float beta2, float eps, float weight_decay, int step), (ctx, n, w, g, g_scale, m, v, lr, beta1, \
      beta2, eps, weight_decay, step))                                                                            \
    X(scale, (ac_kctx *ctx, size_t n, float s, float *x), (ctx, n, s, x))                                         \
    X(ssd_scan_save, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,   \
      const float *C, int ldbc, const float *dt, const float *A, const float *Dskip, const float *state0,         \
      float *states, float *y, int ldy), (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states,   \
      y, ldy))                                                                                                    \
    X(ssd_scan_backward, (ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,               \
      const float *B, const float *C, int ldbc, const float *dt, const float *A, const float *Dskip,              \
      const float *state0, float *states, const float *dy, int lddy, float *dx, int lddx, float *dB, float *dC,   \
      int lddbc, float *ddt, float *dA, float *dD, float *work), (ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A,  \
      Dskip, state0, states, dy, lddy, dx, lddx, dB, dC, lddbc, ddt, dA, dD, work))                               \
    X(mul_heads, (ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx), (ctx, T, H, P, mask,  \
      x, ldx))                                                                                                    \
    X(mul_heads_backward, (ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,         \
      float *dy, int lddy, float *dmask), (ctx, T, H, P, mask, y, ldy, dy, lddy, dmask))                          \
    X(softplus_dt_backward, (ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,          \
      float dt_min, const float *ddt, float *draw, int lddraw, float *dbias), (ctx, T, H, raw, ldraw, bias,       \
      dt_min, ddt, draw, lddraw, dbias))                                                                          \
    X(conv1d_silu_backward, (ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,          \
      const float *bias, const float *state, const float *dy, int lddy, float *dx, int lddx, float *dw,           \
      float *dbias), (ctx, T, C, K, x, ldx, w, bias, state, dy, lddy, dx, lddx, dw, dbias))                       \
    X(gated_rmsnorm_backward, (ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,          \
      const float *z, int ldz, const float *w, float eps, const float *dout, int lddout, float *dy, int lddy,     \
      float *dz, int lddz, float *dw, float *rstd), (ctx, rows, dim, group_size, y, ldy, z, ldz, w, eps, dout,    \
      lddout, dy, lddy, dz, lddz, dw, rstd))                                                                      \
    X(attention_backward, (ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,           \
      const float *k, const float *v, int ldkv, const float *datt, float scale, const float *out, float *stats,   \
      float *dq, float *dk, float *dv), (ctx, L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, scale, out, stats,  \
      dq, dk, dv))                                                                                                \
    X(moe_route_backward, (ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm, float scale,     \
      const int32_t *idx, const float *dweight, float *dlogits), (ctx, T, E, logits, top_k, norm, scale, idx,     \
      dweight, dlogits))                                                                                          \
    X(moe_combine_backward, (ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,      \
      const float *y, const float *weight, const float *mask, const int32_t *pair, float *dweight, float *dmask,  \
      float *dy), (ctx, n, D, dout, lddout, rows, y, weight, mask, pair, dweight, dmask, dy))                     \
    X(embedding_backward, (ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids, float *dtable),     \
      (ctx, n, D, drows, ids, dtable))                                                                            \
    X(gather_rows_backward, (ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows, float *dsrc,     \
      int lddsrc), (ctx, n, D, ddst, rows, dsrc, lddsrc))

#endif
