#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

/* exp(x) of a shifted score. Below e^-60 a term adds nothing a float sum of at least 1
 * can hold, and computing it would bring subnormal arithmetic (tens of times slower on
 * x86) into the weighted sum: attention's time would depend on how peaked its scores
 * are, which the cost model cannot know. Such terms are exactly 0. No branch either: a
 * row that mixes kept and dropped terms would pay for mispredictions that a row of only
 * one kind does not (a slower prefill for the same shapes: see docs/results.md). */
static inline float softmax_exp(float x)
{
    /* compares, not fmaxf: its NaN rules keep it a call per element */
    float keep = (float)(x > -60.0f);
    return keep * ac_cpu_expf(x > -60.0f ? x : -60.0f);
}

/* row[j] = exp(row[j] - max) for the first `visible` (>= 0) of `cols` entries, zeros
 * after them, with max the largest of `floor` and those entries (in *max_out); returns
 * the sum of the exps. */
static float exp_shifted_row(float *row, int visible, int cols, float floor, float *max_out)
{
    float max = floor;
#pragma omp simd reduction(max : max)
    for (int j = 0; j < visible; j++)
        max = row[j] > max ? row[j] : max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < visible; j++) {
        row[j] = softmax_exp(row[j] - max);
        sum += row[j];
    }
    for (int j = visible; j < cols; j++)
        row[j] = 0.0f;
    *max_out = max;
    return sum;
}

/* The causal softmax of one row of scores in place: the first `visible` of `cols`
 * entries, zeros after them; returns the log normaliser. */
static float softmax_row(float *row, int visible, int cols)
{
    float max, sum = exp_shifted_row(row, visible, cols, -INFINITY, &max);
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < visible; j++)
        row[j] *= inv;
    return max + logf(sum);
}

/* Decode (a few queries): per query, the query heads that share a KV head, up to
 * DECODE_HEADS of them at a time, as two small GEMMs (OpenBLAS, one thread inside each
 * OpenMP task): scores = scale Q_g K^T over the visible keys in the thread's rows of the
 * workspace, a max-shifted softmax per row in f32, out_g = P V. The group's heads read
 * their keys and values once (a matrix-vector product per head read them once each, and
 * made four times the calls). */
#define DECODE_HEADS 8

static void attention_by_query(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q,
                               int ldq, const float *k_cache, const float *v_cache, int cap, float scale, float *out,
                               int ldout, float *lse, int ldlse)
{
    int group = n_heads / n_kv, chunks = (group + DECODE_HEADS - 1) / DECODE_HEADS;
    size_t stride = ac_cpu_attention_workspace(1, n_new, past + n_new) / sizeof(float);
#pragma omp parallel
    {
        float *scores = (float *)ctx->workspace + (size_t)omp_get_thread_num() * stride;
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int task = 0; task < n_kv * chunks; task++)
            for (int i = 0; i < n_new; i++) {
                int g = task / chunks, h0 = g * group + task % chunks * DECODE_HEADS;
                int m = (g + 1) * group - h0 < DECODE_HEADS ? (g + 1) * group - h0 : DECODE_HEADS;
                const float *K = k_cache + (size_t)g * cap * hd, *V = v_cache + (size_t)g * cap * hd;
                int visible = past + i + 1;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, visible, hd, scale,
                            q + (size_t)i * ldq + (size_t)h0 * hd, hd, K, hd, 0.0f, scores, visible);
                for (int r = 0; r < m; r++) {
                    float l = softmax_row(scores + (size_t)r * visible, visible, visible);
                    if (lse)
                        lse[(size_t)i * ldlse + h0 + r] = l;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, visible, 1.0f, scores, visible, V, hd,
                            0.0f, out + (size_t)i * ldout + (size_t)h0 * hd, hd);
            }
    }
}

/* Prefill by tiles of up to QUERY_TILE query rows of one head, over blocks of KEY_BLOCK
 * keys, with GEMMs (OpenBLAS, one thread inside each OpenMP task): S = scale Q K^T for
 * the block, each row's running max and normaliser updated online (the rows' earlier sums
 * rescaled by exp(old max - new max)), out += P V for the block straight into `out`, and
 * out divided by the normaliser at the end. The thread's workspace holds one tile of
 * scores, rows x min(keys, KEY_BLOCK). */
#define QUERY_TILE 64
#define KEY_BLOCK 256
/* Below this many new tokens a call goes query by query (GEMMs of one row pack more
 * than they compute). */
#define TILED_MIN_QUERIES 4

/* Scores of row r over one block (m keys, the first `visible` (>= 0) of them
 * causal-visible) turned into unnormalised probabilities against the row's updated max;
 * returns the factor that rescales what the row accumulated before this block. */
static float online_softmax_row(float *row, int visible, int m, float *row_max, float *row_sum)
{
    float max, sum = exp_shifted_row(row, visible, m, *row_max, &max);
    float rescale = softmax_exp(*row_max - max); /* 0 for the first block (-inf) */
    *row_sum = *row_sum * rescale + sum;
    *row_max = max;
    return rescale;
}

static void prefill_tile(int n, int first, int hd, const float *Q, int ldq, const float *K, const float *V, float scale,
                         float *O, int ldo, float *S, float *lse, int ldlse)
{
    float row_max[QUERY_TILE], row_sum[QUERY_TILE];
    int keys = first + n; /* the tile's last row sees keys 0..first+n-1 */
    for (int r = 0; r < n; r++) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        for (int c = 0; c < hd; c++)
            O[(size_t)r * ldo + c] = 0.0f;
    }
    for (int j0 = 0; j0 < keys; j0 += KEY_BLOCK) {
        int m = keys - j0 < KEY_BLOCK ? keys - j0 : KEY_BLOCK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, hd, scale, Q, ldq, K + (size_t)j0 * hd, hd, 0.0f, S,
                    m);
        for (int r = 0; r < n; r++) {
            int visible = first + r + 1 - j0 < m ? first + r + 1 - j0 : m;
            visible = visible > 0 ? visible : 0;
            float rescale = online_softmax_row(S + (size_t)r * m, visible, m, &row_max[r], &row_sum[r]);
            if (rescale != 1.0f)
                for (int c = 0; c < hd; c++)
                    O[(size_t)r * ldo + c] *= rescale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, m, 1.0f, S, m, V + (size_t)j0 * hd, hd, 1.0f, O,
                    ldo);
    }
    for (int r = 0; r < n; r++) {
        float inv = 1.0f / row_sum[r];
        for (int c = 0; c < hd; c++)
            O[(size_t)r * ldo + c] *= inv;
        if (lse)
            lse[(size_t)r * ldlse] = row_max[r] + logf(row_sum[r]);
    }
}

static void attention_by_tile(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q,
                              int ldq, const float *k_cache, const float *v_cache, int cap, float scale, float *out,
                              int ldout, float *lse, int ldlse)
{
    int group = n_heads / n_kv, tiles = (n_new + QUERY_TILE - 1) / QUERY_TILE;
    size_t stride = ac_cpu_attention_workspace(1, n_new, past + n_new) / sizeof(float);
#pragma omp parallel
    {
        float *S = (float *)ctx->workspace + (size_t)omp_get_thread_num() * stride;
        /* the longest tiles (the last rows see every key) first */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int t = tiles - 1; t >= 0; t--)
            for (int h = 0; h < n_heads; h++) {
                int i0 = t * QUERY_TILE, n = n_new - i0 < QUERY_TILE ? n_new - i0 : QUERY_TILE;
                size_t kv = (size_t)(h / group) * cap * hd;
                prefill_tile(n, past + i0, hd, q + (size_t)i0 * ldq + (size_t)h * hd, ldq, k_cache + kv, v_cache + kv,
                             scale, out + (size_t)i0 * ldout + (size_t)h * hd, ldout, S,
                             lse ? lse + (size_t)i0 * ldlse + h : NULL, ldlse);
            }
    }
}

void ac_cpu_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                      const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout,
                      float *lse, int ldlse)
{
    if (n_new < TILED_MIN_QUERIES)
        attention_by_query(ctx, n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale, out, ldout, lse,
                           ldlse);
    else
        attention_by_tile(ctx, n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale, out, ldout, lse,
                          ldlse);
}

size_t ac_cpu_attention_workspace(int threads, int queries, int keys)
{
    size_t per_thread;
    if (queries < TILED_MIN_QUERIES)
        per_thread = (size_t)DECODE_HEADS * (size_t)keys;
    else
        per_thread = (size_t)(queries < QUERY_TILE ? queries : QUERY_TILE) * (size_t)(keys < KEY_BLOCK ? keys : KEY_BLOCK);
    return (size_t)threads * per_thread * sizeof(float);
}

/* The backward by tiles of query rows, with GEMMs (OpenBLAS, one thread inside each
 * OpenMP task). With P the causal softmax, dP = datt V^T, delta_i = datt_i . out_i and
 * dS = P (dP - delta) scale: pass 1, over (head, tile of BACKWARD_TILE queries), computes
 * the tile's scores S = scale Q K^T over the keys it sees, P = exp(S - the forward's log
 * normaliser), delta from the forward's out, and dq = dS K. Pass 2, over (KV head, tile
 * of keys), rebuilds P^T and dS^T for the queries at or after the tile from the
 * normalisers and deltas, for every query head
 * sharing the KV head, and adds dv = P^T datt and dk = dS^T Q, so each tile of dk and dv
 * has one writer. Each thread's workspace holds two BACKWARD_TILE x L tiles. */
#define BACKWARD_TILE 64

size_t ac_k_attention_backward_workspace(int threads, int longest)
{
    return (size_t)threads * 2 * BACKWARD_TILE * (size_t)longest * sizeof(float);
}

/* P = exp(S - lse) over the first `visible` of `cols` scores, zeros after them. */
static void probabilities_row(float *row, int visible, int cols, float lse)
{
#pragma omp simd
    for (int j = 0; j < visible; j++)
        row[j] = softmax_exp(row[j] - lse);
    for (int j = visible; j < cols; j++)
        row[j] = 0.0f;
}

static void backward_query_tile(int L, int n_heads, int hd, int h, int g, int i0, const float *q, int ldq,
                                const float *k, const float *v, int ldkv, const float *datt, float scale,
                                const float *out, float *stats, float *dq, float *S, float *dP)
{
    int n = L - i0 < BACKWARD_TILE ? L - i0 : BACKWARD_TILE, cols = i0 + n, ldst = 2 * n_heads;
    const float *Q = q + (size_t)i0 * ldq + (size_t)h * hd, *G = datt + (size_t)i0 * ldq + (size_t)h * hd;
    const float *K = k + (size_t)g * hd, *V = v + (size_t)g * hd;
    const float *O = out + (size_t)i0 * ldq + (size_t)h * hd;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, hd, scale, Q, ldq, K, ldkv, 0.0f, S, cols);
    for (int r = 0; r < n; r++)
        probabilities_row(S + (size_t)r * cols, i0 + r + 1, cols, stats[(size_t)(i0 + r) * ldst + h]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, hd, 1.0f, G, ldq, V, ldkv, 0.0f, dP, cols);
    for (int r = 0; r < n; r++) {
        float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
        for (int c = 0; c < hd; c++)
            delta += G[(size_t)r * ldq + c] * O[(size_t)r * ldq + c];
        stats[(size_t)(i0 + r) * ldst + n_heads + h] = delta;
        float *p = S + (size_t)r * cols, *ds = dP + (size_t)r * cols;
#pragma omp simd
        for (int j = 0; j < cols; j++)
            ds[j] = p[j] * (ds[j] - delta) * scale;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, cols, 1.0f, dP, cols, K, ldkv, 0.0f,
                dq + (size_t)i0 * ldq + (size_t)h * hd, ldq);
}

static void backward_key_tile(int L, int n_heads, int group, int hd, int g, int j0, const float *q, int ldq,
                              const float *k, const float *v, int ldkv, const float *datt, float scale,
                              const float *stats, float *dk, float *dv, float *PT, float *dPT)
{
    int m = L - j0 < BACKWARD_TILE ? L - j0 : BACKWARD_TILE, R = L - j0, ldst = 2 * n_heads;
    const float *K = k + (size_t)j0 * ldkv + (size_t)g * hd, *V = v + (size_t)j0 * ldkv + (size_t)g * hd;
    float *dK = dk + (size_t)j0 * ldkv + (size_t)g * hd, *dV = dv + (size_t)j0 * ldkv + (size_t)g * hd;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < hd; c++) {
            dK[(size_t)r * ldkv + c] = 0.0f;
            dV[(size_t)r * ldkv + c] = 0.0f;
        }
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *Q = q + (size_t)j0 * ldq + (size_t)h * hd, *G = datt + (size_t)j0 * ldq + (size_t)h * hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, R, hd, scale, K, ldkv, Q, ldq, 0.0f, PT, R);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, R, hd, 1.0f, V, ldkv, G, ldq, 0.0f, dPT, R);
        for (int r = 0; r < m; r++) {
            float *p = PT + (size_t)r * R, *ds = dPT + (size_t)r * R;
            /* query i = j0 + x sees key j = j0 + r when x >= r */
            for (int x = 0; x < r; x++)
                p[x] = ds[x] = 0.0f;
            for (int x = r; x < R; x++) {
                const float *st = stats + (size_t)(j0 + x) * ldst;
                p[x] = softmax_exp(p[x] - st[h]);
                ds[x] = p[x] * (ds[x] - st[n_heads + h]) * scale;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, R, 1.0f, PT, R, G, ldq, 1.0f, dV, ldkv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, R, 1.0f, dPT, R, Q, ldq, 1.0f, dK, ldkv);
    }
}

/* With at least as many KV heads as threads, one pass per KV head instead: each query
 * tile of each query head sharing it runs pass 1 (backward_query_tile leaves P and dS in
 * its tiles) and adds dv += P^T datt and dk += dS^T Q over the keys the tile sees, so the
 * head's dk and dv have one writer and nothing is recomputed: 5 GEMMs a tile, not 7, and
 * one exp per score. */
static void backward_kv_head(int L, int n_heads, int group, int hd, int g, const float *q, int ldq, const float *k,
                             const float *v, int ldkv, const float *datt, float scale, const float *out,
                             float *stats, float *dq, float *dk, float *dv, float *P, float *dS)
{
    float *dK = dk + (size_t)g * hd, *dV = dv + (size_t)g * hd;
    for (int r = 0; r < L; r++)
        for (int c = 0; c < hd; c++) {
            dK[(size_t)r * ldkv + c] = 0.0f;
            dV[(size_t)r * ldkv + c] = 0.0f;
        }
    for (int i0 = 0; i0 < L; i0 += BACKWARD_TILE) {
        int n = L - i0 < BACKWARD_TILE ? L - i0 : BACKWARD_TILE, cols = i0 + n;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *Q = q + (size_t)i0 * ldq + (size_t)h * hd, *G = datt + (size_t)i0 * ldq + (size_t)h * hd;
            backward_query_tile(L, n_heads, hd, h, g, i0, q, ldq, k, v, ldkv, datt, scale, out, stats, dq, P, dS);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, n, 1.0f, P, cols, G, ldq, 1.0f, dV, ldkv);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, n, 1.0f, dS, cols, Q, ldq, 1.0f, dK, ldkv);
        }
    }
}

void ac_cpu_attention_backward(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                               const float *k, const float *v, int ldkv, const float *datt, float scale,
                               const float *out, float *stats, float *dq, float *dk, float *dv)
{
    int group = n_heads / n_kv, tiles = (L + BACKWARD_TILE - 1) / BACKWARD_TILE;
    if (n_kv >= omp_get_max_threads()) {
#pragma omp parallel
        {
            float *a = (float *)ctx->workspace + (size_t)omp_get_thread_num() * 2 * BACKWARD_TILE * L;
#pragma omp for schedule(dynamic, 1)
            for (int g = 0; g < n_kv; g++)
                backward_kv_head(L, n_heads, group, hd, g, q, ldq, k, v, ldkv, datt, scale, out, stats, dq, dk, dv, a,
                                 a + (size_t)BACKWARD_TILE * L);
        }
        return;
    }
#pragma omp parallel
    {
        float *a = (float *)ctx->workspace + (size_t)omp_get_thread_num() * 2 * BACKWARD_TILE * L;
        float *b = a + (size_t)BACKWARD_TILE * L;
        /* the longest tiles (the last rows see every key) first */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int t = tiles - 1; t >= 0; t--)
            for (int h = 0; h < n_heads; h++)
                backward_query_tile(L, n_heads, hd, h, h / group, t * BACKWARD_TILE, q, ldq, k, v, ldkv, datt, scale,
                                    out, stats, dq, a, b);
        /* the implicit barrier above: every row's normaliser and delta are in stats */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int t = 0; t < tiles; t++)
            for (int g = 0; g < n_kv; g++)
                backward_key_tile(L, n_heads, group, hd, g, t * BACKWARD_TILE, q, ldq, k, v, ldkv, datt, scale, stats,
                                  dk, dv, a, b);
    }
}
