/* The one op interface. Every op takes a kernel context (the backend's stream and
 * workspace) and plain pointers, which are device pointers on an accelerator backend.
 * Matrices are row-major; `ld*` is the distance in floats between consecutive rows, so
 * an op can read columns of a wider buffer (a slice of a fused projection) in place.
 * The CPU implementations (kernels/cpu) are the reference for every other backend. */
#ifndef AC_KERNELS_H
#define AC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    void *stream;           /* backend stream (cudaStream_t); unused on the CPU */
    void *workspace;        /* scratch memory owned by the caller */
    size_t workspace_bytes;
} ac_kctx;

/* C[M,N] = A[M,K] @ W[N,K]^T + beta * C: the layout of nn.Linear weights ([out, in]). */
void ac_k_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                 float beta, float *C, int ldc);

/* y = x * rsqrt(mean(x^2) + eps) * w per row of `dim`. x and y may alias. */
void ac_k_rmsnorm(ac_kctx *ctx, int rows, int dim, const float *x, int ldx, const float *w,
                  float eps, float *y, int ldy);

/* Mamba2's gated norm: u = y * silu(z), RMS-normalised within each contiguous group of
 * `group_size` channels, times w. out may alias y. */
void ac_k_gated_rmsnorm(ac_kctx *ctx, int rows, int dim, int group_size, const float *y, int ldy,
                        const float *z, int ldz, const float *w, float eps, float *out, int ldout);

/* Causal depthwise conv over time then SiLU, for one sequence of T new steps of C
 * channels. `state` [C, K-1] holds the previous K-1 raw inputs (oldest first, zeros for
 * a new sequence) and is advanced past the T inputs. w [C, K], bias [C] or NULL. */
void ac_k_conv1d_silu(ac_kctx *ctx, int T, int C, int K, const float *x, int ldx, const float *w,
                      const float *bias, float *state, float *y, int ldy);

/* dt[t,h] = max(softplus(raw[t,h] + bias[h]), dt_min). */
void ac_k_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                      float dt_min, float *dt);

/* The selective state-space recurrence of one sequence, T steps, H heads of P channels,
 * state size N, B and C in G groups (head h reads group h / (H / G)):
 *   s = exp(dt A) s + dt x B^T ;  y = s C + D x
 * x [T, H*P] (ldx), B and C [T, G*N] (ldbc), dt [T, H], A and Dskip [H]. `state`
 * [H, P, N] is read and advanced. y [T, H*P] (ldy). A decode step is T = 1. */
void ac_k_ssd_scan(ac_kctx *ctx, int T, int H, int P, int N, int G, const float *x, int ldx,
                   const float *B, const float *C, int ldbc, const float *dt, const float *A,
                   const float *Dskip, float *state, float *y, int ldy);

/* Causal GQA attention of one sequence: n_new queries at positions past..past+n_new-1
 * over keys 0..past+n_new-1 held in k_cache / v_cache [n_kv, cap, hd]. Query head h
 * reads KV head h / (n_heads / n_kv). q and out [n_new, n_heads*hd]. The workspace
 * holds ac_k_attention_workspace(past + n_new) bytes. */
size_t ac_k_attention_workspace(int total_tokens);
void ac_k_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd,
                    const float *q, int ldq, const float *k_cache, const float *v_cache, int cap,
                    float scale, float *out, int ldout);

/* MoE routing for T tokens over E experts: scores = sigmoid(logits); selection by
 * scores + bias, limited to the topk_group best of n_group groups (a group scores the
 * sum of its two best); the chosen unbiased scores, normalised when norm != 0, times
 * scale. idx and weight are [T, top_k]. */
void ac_k_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias,
                    int n_group, int topk_group, int top_k, int norm, float scale, int32_t *idx,
                    float *weight);

/* dst[i] = src[rows[i]] for n rows of D floats. */
void ac_k_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows,
                      float *dst);
/* dst[rows[i]] += weight[i] * src[i]; rows must be distinct within one call. */
void ac_k_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                           const float *weight, float *dst, int lddst);

/* x = relu(x)^2 in place. */
void ac_k_relu2(ac_kctx *ctx, size_t n, float *x);
/* y += x */
void ac_k_add(ac_kctx *ctx, size_t n, const float *x, float *y);

#endif
