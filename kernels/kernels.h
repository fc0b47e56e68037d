/* The one op interface. Every op takes a kernel context (the backend's stream and
 * workspace) and plain pointers, which are device pointers on an accelerator backend.
 * Matrices are row-major; `ld*` is the distance in floats between consecutive rows, so
 * an op can read columns of a wider buffer (a slice of a fused projection) in place.
 * The CPU implementations (kernels/cpu) are the reference for every other backend.
 *
 * A backend is a table of function pointers (struct ac_backend below): its memory
 * (alloc, free, copy, memset_zero, sync) and one member per op. A kernel context names
 * the backend its ops run on; ac_k_X(ctx, ...) calls ctx->backend->X(ctx, ...), the CPU
 * backend's when ctx->backend is NULL, so callers never name a backend themselves. */
#ifndef AC_KERNELS_H
#define AC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"

/* The most taps of ac_k_conv1d_silu (the CPU holds a block of channels' taps on the stack),
 * and the most experts a token of ac_k_moe_token may pick (models pick 1-22; more take
 * the grouped path). */
enum { AC_K_MAX_CONV_TAPS = 16, AC_K_MAX_MOE_PICKS = 64 };

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_backend ac_backend;

/* One MoE layer's feed-forward as ac_k_moe_token reads it: the struct in host memory, what
 * it points to in the backend's. Widths D (hidden), E experts of I channels, a shared
 * expert of S (0: none). The four matrices are floats, or bf16 values (uint16_t) when
 * bf16 is set, read as ac_k_linear_bf16 reads its weights. */
typedef struct {
    int D, E, I, S;
    int bf16;
    const void *experts_up;   /* [E, I, D] */
    const void *experts_down; /* [E, D, I] */
    const void *shared_up;    /* [S, D] */
    const void *shared_down;  /* [D, S] */
    const float *experts_mask; /* [E] scales each expert's routing weight, or NULL */
    const float *ffn_mask;     /* [I] the routed experts' channels, or NULL */
    const float *shared_mask;  /* [S] the shared expert's channels, or NULL */
} ac_k_moe_ffn;

typedef struct {
    void *stream;           /* backend stream (cudaStream_t); unused on the CPU */
    void *workspace;        /* scratch memory owned by the caller */
    size_t workspace_bytes;
    const ac_backend *backend; /* NULL: the CPU backend */
} ac_kctx;

/* The direction of a backend copy. On the CPU every kind is a memcpy. */
typedef enum {
    AC_COPY_HOST_TO_DEVICE,
    AC_COPY_DEVICE_TO_HOST,
    AC_COPY_DEVICE_TO_DEVICE
} ac_copy_kind;

/* Sets flush-to-zero and denormals-are-zero on the calling thread and its OpenMP team
 * (once per calling thread; kernels/cpu/fpenv.c says why). Forwards and training steps
 * call it first. */
void ac_k_flush_denormals(void);

/* The workspace (in bytes) that ac_k_attention needs for `queries` new tokens of one
 * sequence reaching `keys` positions when `threads` threads run it (the CPU kernel gives
 * each OpenMP thread up to 8 rows of scores when decoding, a tile of query rows by a block of
 * keys when prefilling). The runtime's plan and the memory model both size it here. */
size_t ac_k_attention_workspace(int threads, int queries, int keys);
/* The workspace ac_k_attention_backward needs for sequences of up to `longest` tokens
 * (the CPU kernel gives each thread two tiles of query rows by keys). */
size_t ac_k_attention_backward_workspace(int threads, int longest);

struct ac_backend {
    const char *name; /* "cpu", "cuda": what ac_backend_find takes */
    /* ssd_scan_save keeps the state every this many steps (the CPU 32, its backward's
     * chunk; CUDA 1): see ac_k_ssd_states_floats. */
    int ssd_state_interval;
    /* The most tokens of one forward whose MoE layers take ac_k_moe_token rather than
     * grouping the tokens by expert on the host, which reads the routing back: the CPU 1
     * (grouping there runs one GEMM per expert), CUDA 16 (a server's batched decode step
     * never waits for the host). */
    int moe_token_batch;

    /* ---- memory: device memory on an accelerator, host memory on the CPU ---- */

    void *(*alloc)(size_t bytes); /* NULL when out of memory */
    /* The same for a buffer its user writes whole every time it is used (weights,
     * gradients, optimizer moments, a training step's activations): the CPU puts those
     * of 2 MiB and more on huge pages, which a buffer sized for the worst case and
     * filled in part (a server's activations and caches) should not be, since a huge
     * page is resident whole once one byte of it is touched. */
    void *(*alloc_dense)(size_t bytes);
    void (*free)(void *p);        /* p may be NULL */
    void (*copy)(void *dst, const void *src, size_t bytes, ac_copy_kind kind);
    void (*memset_zero)(void *p, size_t bytes);
    /* Waits until every op queued on ctx's stream has finished (a no-op on the CPU). */
    void (*sync)(ac_kctx *ctx);
    /* NULL when the backend can run on this machine, else why not ("no CUDA device: ...");
     * a backend's other members may be called only when this is NULL. */
    const char *(*unavailable)(void);
    /* The first failure of an op, allocation or copy since the last call, naming the op
     * and the device's reason (NULL: none), and forgets it. Ops return nothing: a caller
     * checks here after a sync, where an accelerator reports what went wrong. */
    const char *(*take_error)(void);

    /* ---- forward ops ---- */

    /* C[M,N] = A[M,K] @ W[N,K]^T + beta * C: the layout of nn.Linear weights ([out, in]). */
    void (*linear)(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                   float *C, int ldc);
    /* n matrix-vector products in one launch: y_i = W_i x_i, W_i [rows[i], cols[i]]
     * row-major, x_i [cols[i]], y_i [rows[i]] (one token's projections that read one
     * input, or the experts it picked). */
    void (*gemv_batch)(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                       const float *const *x, float *const *y);
    /* y = sum_i alpha[i] W_i x_i in one launch, W_i [rows, cols[i]] row-major, x_i
     * [cols[i]], y [rows] overwritten (a token's experts' down projections, weighted). */
    void (*gemv_sum)(ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols, const float *const *x,
                     const float *alpha, float *y);
    /* n products in one launch: C_i [M[i], N] = A_i [M[i], K] @ W_i [N, K]^T, row strides
     * lda and ldc (the experts of a batch of tokens). */
    void (*linear_batch)(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                         const float *const *W, float *const *C, int ldc);

    /* y = x * rsqrt(mean(x^2) + eps) * w per row of `dim`. x and y may alias. */
    void (*rmsnorm)(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps, float *y,
                    int ldy);

    /* Mamba2's gated norm: u = y * silu(z), RMS-normalised within each contiguous group of
     * `group_size` channels, times w. out may alias y. */
    void (*gated_rmsnorm)(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy, const float *z,
                          int ldz, const float *w, float eps, float *out, int ldout);

    /* Causal depthwise conv over time then SiLU, for one sequence of T new steps of C
     * channels. `state` [C, K-1] holds the previous K-1 raw inputs (oldest first, zeros for
     * a new sequence) and is advanced past the T inputs. w [C, K], bias [C] or NULL;
     * K <= AC_K_MAX_CONV_TAPS. */
    void (*conv1d_silu)(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                        const float *bias, float *state, float *y, int ldy);

    /* dt[t,h] = max(softplus(raw[t,h] + bias[h]), dt_min). */
    void (*softplus_dt)(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias, float dt_min,
                        float *dt);

    /* The selective state-space recurrence of one sequence, T steps, H heads of P channels,
     * state size N, B and C in G groups (head h reads group h / (H / G)):
     *   s = exp(dt A) s + dt x B^T ;  y = s C + D x
     * x [T, H*P] (ldx), B and C [T, G*N] (ldbc), dt [T, H], A and Dskip [H]. `state`
     * [H, P, N] is read and advanced. y [T, H*P] (ldy). A decode step is T = 1. */
    void (*ssd_scan)(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx, const float *B,
                     const float *C, int ldbc, const float *dt, const float *A, const float *Dskip, float *state,
                     float *y, int ldy);

    /* Causal GQA attention of one sequence: n_new queries at positions past..past+n_new-1
     * over keys 0..past+n_new-1 held in k_cache / v_cache [n_kv, cap, hd]. Query head h
     * reads KV head h / (n_heads / n_kv). q and out [n_new, n_heads*hd]. lse (NULL: not
     * wanted) gets each query's and head's log normaliser of its scaled scores at lse[i *
     * ldlse + h] (what ac_k_attention_backward reads). The workspace holds
     * ac_k_attention_workspace(omp threads, n_new, past + n_new) bytes. */
    void (*attention)(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                      const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout,
                      float *lse, int ldlse);

    /* MoE routing for T tokens over E experts: scores = sigmoid(logits); selection by
     * scores + bias, limited to the topk_group best of n_group groups (a group scores the
     * sum of its two best); the chosen unbiased scores, normalised when norm != 0, times
     * scale. idx and weight are [T, top_k]. */
    void (*moe_route)(ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,
                      int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight);

    /* The MoE feed-forward of T tokens, each with its k experts as ac_k_moe_route left
     * them in backend memory (idx, weight [T, k], distinct experts per token), so that a
     * device never reads them back. Per token, x and y rows of [T, D]: h = relu2(up x)
     * times the channel mask, for the shared expert then the picked experts in
     * increasing index; y = down_s h_s + sum of weight_j (times experts_mask[idx_j])
     * down_j h_j, in that order (y overwritten); hidden [T, S + k I] gets the h, in that
     * order. A token's results do not depend on the others'. k <= AC_K_MAX_MOE_PICKS.
     * With bf16 weights (ffn->bf16) the products read x and h rounded to bf16, as
     * ac_k_linear_bf16 (hidden keeps the h unrounded). */
    void (*moe_token)(ac_kctx *ctx, const ac_k_moe_ffn *ffn, int T, int k, const int32_t *idx, const float *weight,
                      const float *x, float *hidden, float *y);

    /* Top-k score masking, before ac_k_moe_route: logits[t, e] += log(mask[e]) (so the
     * score's odds are scaled by the mask), -inf where mask[e] == 0; masked_bias[e] =
     * bias[e] (0 when bias is NULL), -inf where mask[e] == 0, so such an expert is never
     * chosen. logits [T, E] (ld E), mask and masked_bias [E]. */
    void (*moe_mask_scores)(ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,
                            float *masked_bias);

    /* dst[i] = src[rows[i]] for n rows of D floats. */
    void (*gather_rows)(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows, float *dst);

    /* ---- serving with bf16 weights: W holds bf16 values (the high half of a float's
     * bits). A product rounds each input it reads to bf16 (to nearest, ties to even), as a
     * GPU's bf16 GEMM takes its operands, and sums in f32. ---- */

    /* C[M,N] = alpha bf16(A)[M,K] @ W[N,K]^T + beta * C (beta 0: C is not read). */
    void (*linear_bf16)(ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda,
                        const uint16_t *W, float beta, float *C, int ldc);
    /* dst[i] = src[rows[i]] widened to floats, n rows of D (an embedding lookup). */
    void (*gather_rows_bf16)(ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,
                             float *dst);
    /* dst[rows[i]] += weight[i] * src[i]; rows must be distinct within one call. */
    void (*scatter_add_rows)(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows, const float *weight,
                             float *dst, int lddst);

    /* y = relu(x)^2 (y may be x). */
    void (*relu2)(ac_kctx *ctx, size_t n, const float *x, float *y);
    /* y += x */
    void (*add)(ac_kctx *ctx, size_t n, const float *x, float *y);
    /* x[r, c] *= mask[c] (a soft mask over columns). */
    void (*mul_columns)(ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx);
    /* out[c] += sum_r a[r, c] * b[r, c] (a column mask's gradient). */
    void (*column_dot)(ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b, int ldb,
                       float *out);
    /* y = -exp(x) (Mamba2's A from A_log); y may alias x. */
    void (*neg_exp)(ac_kctx *ctx, int n, const float *x, float *y);

    /* ---- backward ops: gradients for training. "+=" marks an accumulated output. ---- */

    /* For C = A @ W^T: dA = dC @ W + beta_dA * dA (dA may be NULL), dW += dC^T @ A (dW may
     * be NULL). A [M, K], W [N, K], dC [M, N]. */
    void (*linear_backward)(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                            const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW);
    /* Backward of ac_k_linear_batch, product by product as ac_k_linear_backward with
     * beta_dA 0: dA_i [M[i], K] (ldda) = dC_i W_i and dW_i [N, K] += dC_i^T A_i, the dW_i
     * distinct. dA or dW (the arrays) may be NULL: not wanted; so may A when dW is, and W
     * when dA is. dA_i may not alias dC_i. (The experts of a batch of tokens.) */
    void (*linear_batch_backward)(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                                  const float *const *W, const float *const *dC, int lddc, float *const *dA,
                                  int ldda, float *const *dW);
    /* For y = rmsnorm(x) * w: dx = dL/dx + beta_dx * dx (beta_dx 0: overwritten, not read;
     * 1: the residual stream's gradient added in the same pass; dx may not alias dy), dw
     * += (may be NULL). */
    void (*rmsnorm_backward)(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w, float eps,
                             const float *dy, int lddy, float beta_dx, float *dx, int lddx, float *dw);
    /* For y = x * rsqrt(sum(x^2) / width + eps) * w per row (an RMSNorm over `width`
     * channels, width <= dim, the rest zero or masked): *dwidth += dL/dwidth summed over
     * rows, given dy = dL/dy. */
    void (*rmsnorm_width_backward)(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                                   float eps, float width, const float *dy, int lddy, float *dwidth);
    /* For x = relu(pre)^2: grad (dL/dx on entry) becomes dL/dpre. */
    void (*relu2_backward)(ac_kctx *ctx, size_t n, const float *pre, float *grad);

    /* Cross-entropy of rows of logits against targets: row_loss[r] = -log softmax(logits)[target];
     * dlogits (may alias logits; NULL: loss only) becomes scale * (softmax - onehot). Rows
     * whose target is < 0 get loss 0 and zero gradient. The caller sums row_loss in order,
     * so the total is the same bits whatever the thread count. */
    void (*cross_entropy)(ac_kctx *ctx, int rows, int V, const float *logits, const int32_t *targets, float scale,
                          float *dlogits, double *row_loss);
    /* Distillation: row_loss[r] = tau^2 KL(softmax(t/tau) || softmax(s/tau)); dlogits (may
     * alias student; NULL: loss only) becomes scale * tau * (p_s - p_t). */
    void (*kd_loss)(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher, float tau,
                    float scale, float *dlogits, double *row_loss);
    /* One AdamW step (decoupled weight decay) on n weights, the gradient g_scale g (the
     * clip's scale, applied as the update reads it; g is not modified); `step` counts from 1:
     *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  w -= lr (wd w + m_hat / (sqrt(v_hat) + eps)) */
    void (*adamw)(ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int step);
    /* sum of squares of x (for the global gradient norm), in double. */
    double (*sum_squares)(ac_kctx *ctx, size_t n, const float *x);
    /* x *= s */
    void (*scale)(ac_kctx *ctx, size_t n, float s, float *x);

    /* ---- Mamba2 backward ---- */

    /* ac_k_ssd_scan that keeps what its backward needs: starts from state0 [H, P, N]
     * (NULL: zeros; not modified) and fills `states`, ac_k_ssd_states_floats(T) floats
     * whose layout belongs to the backend. Other arguments as ac_k_ssd_scan. */
    void (*ssd_scan_save)(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                          const float *B, const float *C, int ldbc, const float *dt, const float *A,
                          const float *Dskip, const float *state0, float *states, float *y, int ldy);
    /* Backward of ac_k_ssd_scan_save, given dy = dL/dy [T, H*P] (lddy), the same inputs,
     * state0 and the states it filled (which it may overwrite): dx [T, H*P] (lddx), dB and
     * dC [T, G*N] (lddbc) and ddt [T, H] are overwritten; dA and dD [H] += (either may be
     * NULL). No gradient goes to state0. work: caller scratch of
     * ac_k_ssd_backward_work_floats(T) floats. */
    void (*ssd_scan_backward)(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                              const float *B, const float *C, int ldbc, const float *dt, const float *A,
                              const float *Dskip, const float *state0, float *states, const float *dy,
                              int lddy, float *dx, int lddx, float *dB, float *dC, int lddbc, float *ddt,
                              float *dA, float *dD, float *work);
    /* x[t, h*P + p] *= mask[h] (a soft mask over heads of P channels; the forward uses it). */
    void (*mul_heads)(ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx);
    /* For out = mask[h] * y per head: dmask[h] += sum over t, p of dy * y (dmask may be
     * NULL), then dy (dL/dout on entry) becomes dL/dy = mask[h] * dy. */
    void (*mul_heads_backward)(ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y, int ldy,
                               float *dy, int lddy, float *dmask);
    /* For dt = max(softplus(raw + bias), dt_min): draw [T, H] (lddraw) = dL/draw, overwritten
     * (zero where dt was clamped); dbias [H] += (may be NULL). ddt [T, H]. */
    void (*softplus_dt_backward)(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                                 float dt_min, const float *ddt, float *draw, int lddraw, float *dbias);
    /* Backward of ac_k_conv1d_silu for one sequence: x are the raw inputs it read and state
     * [C, K-1] the state before the call (NULL: zeros). Given dy [T, C] (lddy): dx [T, C]
     * (lddx, may not alias dy) = dL/dx, overwritten; dw [C, K] and dbias [C] += (either may
     * be NULL). No gradient goes to the state. */
    void (*conv1d_silu_backward)(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                                 const float *bias, const float *state, const float *dy, int lddy, float *dx,
                                 int lddx, float *dw, float *dbias);
    /* Backward of ac_k_gated_rmsnorm: given dout (lddout), dy (lddy) and dz (lddz) are
     * overwritten (neither may alias an input); dw [dim] += (may be NULL). rstd: caller
     * scratch of rows * (dim / group_size) floats. */
    void (*gated_rmsnorm_backward)(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                   const float *z, int ldz, const float *w, float eps, const float *dout,
                                   int lddout, float *dy, int lddy, float *dz, int lddz, float *dw, float *rstd);

    /* The width gradient of one group of Mamba's gated norm when the group averaged over
     * `width` channels rather than dim (a head mask): given out [rows, dim] (ldout) the
     * group's output before it was scaled by `scale` = sqrt(width / dim), dout (lddout) =
     * dL/d(scaled output) times scale, and rstd [rows] from gated_rmsnorm_backward (run
     * with eps * width / dim), dL/dwidth = sum over rows of a (1 - eps / r^2) / (2 width),
     * a = <dout, out> / scale, r^2 = dim / (width rstd^2), summed in double; then
     * dmask[0 .. heads) += (float)(per_head * dL/dwidth) (the group's heads, each worth
     * per_head channels of width). */
    void (*gated_rmsnorm_width_backward)(ac_kctx *ctx, int rows, int dim, const float *out, int ldout,
                                         const float *dout, int lddout, const float *rstd, float eps, float width,
                                         float scale, float per_head, int heads, float *dmask);

    /* ---- attention and MoE backward ---- */

    /* Backward of causal GQA attention for one sequence of L tokens that starts empty
     * (training), keys and values in rows: q, datt = dL/d(attention output), out, dq
     * [L, n_heads*hd] (ldq); k, v, dk, dv [L, n_kv*hd] (ldkv). out is the forward's
     * output and stats [L, 2*n_heads] holds, per query and head, the forward's log
     * normaliser (ac_k_attention's lse with ldlse 2*n_heads), then gets sum_c datt*out.
     * Scores are recomputed tile by tile (nothing T^2 is kept). dq, dk, dv overwritten.
     * The workspace holds ac_k_attention_backward_workspace(omp threads, L). */
    void (*attention_backward)(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                               const float *k, const float *v, int ldkv, const float *datt, float scale,
                               const float *out, float *stats, float *dq, float *dk, float *dv);

    /* Backward of ac_k_moe_route's weights. The selection is piecewise constant and passes
     * no gradient (neither does the bias): from dweight = dL/dweight [T, top_k] of the chosen
     * idx, dlogits [T, E] = dL/dlogits is overwritten, zero for the experts not chosen. */
    void (*moe_route_backward)(ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm, float scale,
                               const int32_t *idx, const float *dweight, float *dlogits);

    /* Backward of ac_k_moe_mask_scores: dmask[e] += sum_t dlogits[t, e] / mask[e] for
     * mask[e] > 0 (dlogits: the gradient of the masked logits). */
    void (*moe_mask_scores_backward)(ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits,
                                     float *dmask);

    /* Backward of one expert's share of the combine, dst[rows[i]] += weight[i] * mask * y[i]
     * (mask: one float, NULL for 1). For i < n, with d = <dout[rows[i]], y[i]>:
     * dweight[pair[i]] = mask * d (overwritten); *dmask += sum_i weight[i] d (dmask may be
     * NULL); dy[i] = weight[i] * mask * dout[rows[i]] (dy may alias y). */
    void (*moe_combine_backward)(ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,
                                 const float *y, const float *weight, const float *mask, const int32_t *pair,
                                 float *dweight, float *dmask, float *dy);

    /* Backward of ac_k_gather_rows: dsrc[rows[i]] += ddst[i]; rows distinct within one call. */
    void (*gather_rows_backward)(ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows, float *dsrc,
                                 int lddsrc);
    /* The embedding table's gradient: dtable[ids[i]] += drows[i] ([n, D] rows), ids may
     * repeat; each row of dtable sums its rows in the order of i (a run repeats bit for bit). */
    void (*embedding_backward)(ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids, float *dtable);
};

/* The reference backend (kernels/cpu), always compiled in. */
extern const ac_backend ac_cpu_backend;

/* The backend a context's ops run on: ctx->backend, or the CPU backend when that (or ctx)
 * is NULL. */
static inline const ac_backend *ac_backend_of(const ac_kctx *ctx)
{
    return ctx && ctx->backend ? ctx->backend : &ac_cpu_backend;
}

/* The compiled-in backends (kernels/backend.c): "cpu" always, "cuda" when built with
 * AC_HAVE_CUDA (listed even where there is no GPU: ask its `unavailable`).
 * ac_backend_find returns NULL for a name not compiled in; ac_backend_at returns NULL
 * outside 0..ac_backend_count()-1. */
const ac_backend *ac_backend_find(const char *name);
int ac_backend_count(void);
const ac_backend *ac_backend_at(int i);

/* The backend to compute on, by name ("cpu", "cuda"): NULL with why in msg (cap bytes)
 * when it is not compiled in or cannot run on this machine. */
const ac_backend *ac_backend_select(const char *name, char *msg, size_t cap);

/* Adds a backend that ac_backend_find and ac_backend_select then know by its name (a
 * test's instrumented backend; not listed by ac_backend_at). Not thread-safe: register
 * before any use. Fails when the name is taken or the list is full. */
ac_status ac_backend_register(const ac_backend *be);

/* ---- the ops: each runs ac_backend_of(ctx)'s member of the same name (documented in
 * struct ac_backend above) ---- */

static inline void ac_k_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                               float beta, float *C, int ldc)
{
    ac_backend_of(ctx)->linear(ctx, M, N, K, A, lda, W, beta, C, ldc);
}

static inline void ac_k_gemv_batch(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                                   const float *const *x, float *const *y)
{
    ac_backend_of(ctx)->gemv_batch(ctx, n, W, rows, cols, x, y);
}

static inline void ac_k_linear_batch(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A,
                                     int lda, const float *const *W, float *const *C, int ldc)
{
    ac_backend_of(ctx)->linear_batch(ctx, n, M, N, K, A, lda, W, C, ldc);
}

static inline void ac_k_gemv_sum(ac_kctx *ctx, int n, const float *const *W, int rows, const int *cols,
                                 const float *const *x, const float *alpha, float *y)
{
    ac_backend_of(ctx)->gemv_sum(ctx, n, W, rows, cols, x, alpha, y);
}

static inline void ac_k_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                                float eps, float *y, int ldy)
{
    ac_backend_of(ctx)->rmsnorm(ctx, rows, dim, x, ldx, w, eps, y, ldy);
}

static inline void ac_k_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                                      const float *z, int ldz, const float *w, float eps, float *out, int ldout)
{
    ac_backend_of(ctx)->gated_rmsnorm(ctx, rows, dim, group_size, y, ldy, z, ldz, w, eps, out, ldout);
}

static inline void ac_k_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                                    const float *bias, float *state, float *y, int ldy)
{
    ac_backend_of(ctx)->conv1d_silu(ctx, T, C, K, x, ldx, w, bias, state, y, ldy);
}

static inline void ac_k_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                                    float dt_min, float *dt)
{
    ac_backend_of(ctx)->softplus_dt(ctx, T, H, raw, ldraw, bias, dt_min, dt);
}

static inline void ac_k_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                                 const float *B, const float *C, int ldbc, const float *dt, const float *A,
                                 const float *Dskip, float *state, float *y, int ldy)
{
    ac_backend_of(ctx)->ssd_scan(ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state, y, ldy);
}

static inline void ac_k_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd,
                                  const float *q, int ldq, const float *k_cache, const float *v_cache, int cap,
                                  float scale, float *out, int ldout, float *lse, int ldlse)
{
    ac_backend_of(ctx)->attention(ctx, n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale, out,
                                  ldout, lse, ldlse);
}

static inline void ac_k_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias,
                                  int n_group, int topk_group, int top_k, int norm, float scale, int32_t *idx,
                                  float *weight)
{
    ac_backend_of(ctx)->moe_route(ctx, T, E, logits, bias, n_group, topk_group, top_k, norm, scale, idx, weight);
}

static inline void ac_k_moe_token(ac_kctx *ctx, const ac_k_moe_ffn *ffn, int T, int k, const int32_t *idx,
                                  const float *weight, const float *x, float *hidden, float *y)
{
    ac_backend_of(ctx)->moe_token(ctx, ffn, T, k, idx, weight, x, hidden, y);
}

static inline void ac_k_moe_mask_scores(ac_kctx *ctx, int T, int E, const float *mask, const float *bias,
                                        float *logits, float *masked_bias)
{
    ac_backend_of(ctx)->moe_mask_scores(ctx, T, E, mask, bias, logits, masked_bias);
}

static inline void ac_k_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc,
                                    const int32_t *rows, float *dst)
{
    ac_backend_of(ctx)->gather_rows(ctx, n, D, src, ldsrc, rows, dst);
}

static inline void ac_k_linear_bf16(ac_kctx *ctx, int M, int N, int K, float alpha, const float *A, int lda,
                                    const uint16_t *W, float beta, float *C, int ldc)
{
    ac_backend_of(ctx)->linear_bf16(ctx, M, N, K, alpha, A, lda, W, beta, C, ldc);
}

static inline void ac_k_gather_rows_bf16(ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc,
                                         const int32_t *rows, float *dst)
{
    ac_backend_of(ctx)->gather_rows_bf16(ctx, n, D, src, ldsrc, rows, dst);
}

static inline void ac_k_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                                         const float *weight, float *dst, int lddst)
{
    ac_backend_of(ctx)->scatter_add_rows(ctx, n, D, src, rows, weight, dst, lddst);
}

static inline void ac_k_relu2(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    ac_backend_of(ctx)->relu2(ctx, n, x, y);
}

static inline void ac_k_add(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    ac_backend_of(ctx)->add(ctx, n, x, y);
}

static inline void ac_k_mul_columns(ac_kctx *ctx, int rows, int cols, const float *mask, float *x, int ldx)
{
    ac_backend_of(ctx)->mul_columns(ctx, rows, cols, mask, x, ldx);
}

static inline void ac_k_column_dot(ac_kctx *ctx, int rows, int cols, const float *a, int lda, const float *b,
                                   int ldb, float *out)
{
    ac_backend_of(ctx)->column_dot(ctx, rows, cols, a, lda, b, ldb, out);
}

static inline void ac_k_neg_exp(ac_kctx *ctx, int n, const float *x, float *y)
{
    ac_backend_of(ctx)->neg_exp(ctx, n, x, y);
}

static inline void ac_k_linear_backward(ac_kctx *ctx, int M, int N, int K, const float *A, int lda,
                                        const float *W, const float *dC, int lddc, float beta_dA, float *dA,
                                        int ldda, float *dW)
{
    ac_backend_of(ctx)->linear_backward(ctx, M, N, K, A, lda, W, dC, lddc, beta_dA, dA, ldda, dW);
}

static inline void ac_k_linear_batch_backward(ac_kctx *ctx, int n, const int *M, int N, int K,
                                              const float *const *A, int lda, const float *const *W,
                                              const float *const *dC, int lddc, float *const *dA, int ldda,
                                              float *const *dW)
{
    ac_backend_of(ctx)->linear_batch_backward(ctx, n, M, N, K, A, lda, W, dC, lddc, dA, ldda, dW);
}

static inline void ac_k_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx,
                                         const float *w, float eps, const float *dy, int lddy, float beta_dx,
                                         float *dx, int lddx, float *dw)
{
    ac_backend_of(ctx)->rmsnorm_backward(ctx, rows, dim, x, ldx, w, eps, dy, lddy, beta_dx, dx, lddx, dw);
}

static inline void ac_k_relu2_backward(ac_kctx *ctx, size_t n, const float *pre, float *grad)
{
    ac_backend_of(ctx)->relu2_backward(ctx, n, pre, grad);
}

static inline void ac_k_cross_entropy(ac_kctx *ctx, int rows, int V, const float *logits,
                                      const int32_t *targets, float scale, float *dlogits, double *row_loss)
{
    ac_backend_of(ctx)->cross_entropy(ctx, rows, V, logits, targets, scale, dlogits, row_loss);
}

static inline void ac_k_kd_loss(ac_kctx *ctx, int rows, int V, const float *student, const float *teacher,
                                float tau, float scale, float *dlogits, double *row_loss)
{
    ac_backend_of(ctx)->kd_loss(ctx, rows, V, student, teacher, tau, scale, dlogits, row_loss);
}

static inline void ac_k_adamw(ac_kctx *ctx, size_t n, float *w, const float *g, float g_scale, float *m, float *v,
                              float lr, float beta1, float beta2, float eps, float weight_decay, int step)
{
    ac_backend_of(ctx)->adamw(ctx, n, w, g, g_scale, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

static inline double ac_k_sum_squares(ac_kctx *ctx, size_t n, const float *x)
{
    return ac_backend_of(ctx)->sum_squares(ctx, n, x);
}

static inline void ac_k_scale(ac_kctx *ctx, size_t n, float s, float *x)
{
    ac_backend_of(ctx)->scale(ctx, n, s, x);
}

/* Floats of `states` for a T-step ac_k_ssd_scan_save: a state [H, P, N] every
 * ssd_state_interval steps, ceil(T / interval) of them. */
static inline size_t ac_k_ssd_states_floats(const ac_backend *be, int T, int H, int P, int N)
{
    int interval = be->ssd_state_interval;
    return (size_t)((T + interval - 1) / interval) * H * P * N;
}

/* No backend keeps ssd_scan_save's states further apart than this many steps. */
#define AC_SSD_MAX_STATE_INTERVAL 32

/* Floats of the work buffer of a T-step ac_k_ssd_scan_backward, enough for the CPU's
 * chunked backward over chunks of Q = min(interval, T) steps: per head, dB and dC rows
 * [T, N] each, 5 [Q, Q], 6 [Q, P], 2 [Q, N], 7 [Q], 4 [P, N] and 2 floats. */
static inline size_t ac_k_ssd_backward_work_floats(const ac_backend *be, int T, int H, int P, int N)
{
    size_t Q = (size_t)(be->ssd_state_interval < T ? be->ssd_state_interval : T);
    return (size_t)H * (2 * (size_t)T * N + 5 * Q * Q + 6 * Q * P + 2 * Q * N + 7 * Q + 4 * (size_t)P * N + 2);
}

/* A bound on ac_k_ssd_backward_work_floats(be, T, ...) / T for every T >= 1 and backend,
 * for plans made per token: with Q <= T, each term's Q over T is at most 1, and Q^2 / T
 * at most Q <= AC_SSD_MAX_STATE_INTERVAL. */
static inline size_t ac_k_ssd_backward_work_per_token(int H, int P, int N)
{
    size_t p = (size_t)P, n = (size_t)N;
    return (size_t)H * (2 * n + 5 * AC_SSD_MAX_STATE_INTERVAL + 6 * p + 2 * n + 7 + 4 * p * n + 2);
}

static inline void ac_k_ssd_scan_save(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                                      const float *B, const float *C, int ldbc, const float *dt, const float *A,
                                      const float *Dskip, const float *state0, float *states, float *y, int ldy)
{
    ac_backend_of(ctx)->ssd_scan_save(ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states, y,
                                      ldy);
}

static inline void ac_k_ssd_scan_backward(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x,
                                          int ldx, const float *B, const float *C, int ldbc, const float *dt,
                                          const float *A, const float *Dskip, const float *state0,
                                          float *states, const float *dy, int lddy, float *dx, int lddx,
                                          float *dB, float *dC, int lddbc, float *ddt, float *dA, float *dD,
                                          float *work)
{
    ac_backend_of(ctx)->ssd_scan_backward(ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, Dskip, state0, states, dy,
                                          lddy, dx, lddx, dB, dC, lddbc, ddt, dA, dD, work);
}

static inline void ac_k_mul_heads(ac_kctx *ctx, int T, int H, int P, const float *mask, float *x, int ldx)
{
    ac_backend_of(ctx)->mul_heads(ctx, T, H, P, mask, x, ldx);
}

static inline void ac_k_mul_heads_backward(ac_kctx *ctx, int T, int H, int P, const float *mask, const float *y,
                                           int ldy, float *dy, int lddy, float *dmask)
{
    ac_backend_of(ctx)->mul_heads_backward(ctx, T, H, P, mask, y, ldy, dy, lddy, dmask);
}

static inline void ac_k_softplus_dt_backward(ac_kctx *ctx, int T, int H, const float *raw, int ldraw,
                                             const float *bias, float dt_min, const float *ddt, float *draw,
                                             int lddraw, float *dbias)
{
    ac_backend_of(ctx)->softplus_dt_backward(ctx, T, H, raw, ldraw, bias, dt_min, ddt, draw, lddraw, dbias);
}

static inline void ac_k_conv1d_silu_backward(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx,
                                             const float *w, const float *bias, const float *state,
                                             const float *dy, int lddy, float *dx, int lddx, float *dw,
                                             float *dbias)
{
    ac_backend_of(ctx)->conv1d_silu_backward(ctx, T, C, K, x, ldx, w, bias, state, dy, lddy, dx, lddx, dw, dbias);
}

static inline void ac_k_gated_rmsnorm_backward(ac_kctx *ctx, int rows, int dim, int group_size, const float *y,
                                               int ldy, const float *z, int ldz, const float *w, float eps,
                                               const float *dout, int lddout, float *dy, int lddy, float *dz,
                                               int lddz, float *dw, float *rstd)
{
    ac_backend_of(ctx)->gated_rmsnorm_backward(ctx, rows, dim, group_size, y, ldy, z, ldz, w, eps, dout, lddout, dy,
                                               lddy, dz, lddz, dw, rstd);
}

static inline void ac_k_gated_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *out, int ldout,
                                                     const float *dout, int lddout, const float *rstd, float eps,
                                                     float width, float scale, float per_head, int heads,
                                                     float *dmask)
{
    ac_backend_of(ctx)->gated_rmsnorm_width_backward(ctx, rows, dim, out, ldout, dout, lddout, rstd, eps, width, scale,
                                                     per_head, heads, dmask);
}

static inline void ac_k_attention_backward(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q,
                                           int ldq, const float *k, const float *v, int ldkv, const float *datt,
                                           float scale, const float *out, float *stats, float *dq, float *dk,
                                           float *dv)
{
    ac_backend_of(ctx)->attention_backward(ctx, L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, scale, out, stats,
                                           dq, dk, dv);
}

static inline void ac_k_moe_route_backward(ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm,
                                           float scale, const int32_t *idx, const float *dweight, float *dlogits)
{
    ac_backend_of(ctx)->moe_route_backward(ctx, T, E, logits, top_k, norm, scale, idx, dweight, dlogits);
}

static inline void ac_k_rmsnorm_width_backward(ac_kctx *ctx, int rows, int dim, const float *x, int ldx,
                                               const float *w, float eps, float width, const float *dy, int lddy,
                                               float *dwidth)
{
    ac_backend_of(ctx)->rmsnorm_width_backward(ctx, rows, dim, x, ldx, w, eps, width, dy, lddy, dwidth);
}

static inline void ac_k_moe_mask_scores_backward(ac_kctx *ctx, int T, int E, const float *mask,
                                                 const float *dlogits, float *dmask)
{
    ac_backend_of(ctx)->moe_mask_scores_backward(ctx, T, E, mask, dlogits, dmask);
}

static inline void ac_k_moe_combine_backward(ac_kctx *ctx, int n, int D, const float *dout, int lddout,
                                             const int32_t *rows, const float *y, const float *weight,
                                             const float *mask, const int32_t *pair, float *dweight,
                                             float *dmask, float *dy)
{
    ac_backend_of(ctx)->moe_combine_backward(ctx, n, D, dout, lddout, rows, y, weight, mask, pair, dweight, dmask,
                                             dy);
}

static inline void ac_k_gather_rows_backward(ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows,
                                             float *dsrc, int lddsrc)
{
    ac_backend_of(ctx)->gather_rows_backward(ctx, n, D, ddst, rows, dsrc, lddsrc);
}

static inline void ac_k_embedding_backward(ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids,
                                           float *dtable)
{
    ac_backend_of(ctx)->embedding_backward(ctx, n, D, drows, ids, dtable);
}

#ifdef __cplusplus
}
#endif

#endif
