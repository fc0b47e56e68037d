#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/cpu_parallel.h"

#include <math.h>

/* Indices of the k largest values of v[0..n) into out (k <= n), largest first. Values
 * equal to -INFINITY are never preferred over finite ones. n is small (experts). */
static void top_k_indices(const float *v, int n, int k, int32_t *out)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= out[q] == i;
            if (!taken && (best < 0 || v[i] > v[best]))
                best = i;
        }
        out[j] = best;
    }
}

/* the engine's limit (AC_MAX_EXPERTS in arch.h) */
enum { MAX_EXPERTS = 1024 };

enum { ROUTE_PARALLEL_MIN = 16 };

static void route_tokens(long first, long last, int E, const float *logits, const float *bias, int n_group,
                         int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight)
{
    int per_group = E / n_group;
    for (long t = first; t < last; t++) {
        float score[MAX_EXPERTS], choice[MAX_EXPERTS], group_score[MAX_EXPERTS];
        int32_t best[MAX_EXPERTS];
        const float *lt = logits + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            score[e] = ac_cpu_sigmoid(lt[e]);
            choice[e] = score[e] + bias[e];
        }
        if (n_group > 1) {
            for (int g = 0; g < n_group; g++) {
                int32_t two[2];
                int m = per_group < 2 ? per_group : 2;
                top_k_indices(choice + g * per_group, per_group, m, two);
                group_score[g] = 0.0f;
                for (int j = 0; j < m; j++)
                    group_score[g] += choice[g * per_group + two[j]];
            }
            top_k_indices(group_score, n_group, topk_group, best);
            /* experts of groups left out can never be chosen */
            for (int g = 0; g < n_group; g++) {
                int kept = 0;
                for (int j = 0; j < topk_group; j++)
                    kept |= best[j] == g;
                if (!kept)
                    for (int e = g * per_group; e < (g + 1) * per_group; e++)
                        choice[e] = -INFINITY;
            }
        }
        int32_t *it = idx + (size_t)t * top_k;
        float *wt = weight + (size_t)t * top_k;
        top_k_indices(choice, E, top_k, it);
        float sum = 0.0f;
        for (int j = 0; j < top_k; j++) {
            wt[j] = score[it[j]];
            sum += wt[j];
        }
        float factor = norm ? scale / (sum + 1e-20f) : scale;
        for (int j = 0; j < top_k; j++)
            wt[j] *= factor;
    }
}

void ac_cpu_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias,
                      int n_group, int topk_group, int top_k, int norm, float scale, int32_t *idx,
                      float *weight)
{
    (void)ctx;
    if (T <= ROUTE_PARALLEL_MIN) {
        route_tokens(0, T, E, logits, bias, n_group, topk_group, top_k, norm, scale, idx, weight);
        return;
    }
#pragma omp parallel
    {
        long first, last;
        ac_cpu_thread_share(T, &first, &last);
        route_tokens(first, last, E, logits, bias, n_group, topk_group, top_k, norm, scale, idx, weight);
    }
}

void ac_cpu_moe_mask_scores(ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,
                            float *masked_bias)
{
    (void)ctx;
    for (int e = 0; e < E; e++)
        masked_bias[e] = mask[e] > 0.0f ? (bias ? bias[e] : 0.0f) : -INFINITY;
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++)
            logits[(size_t)t * E + e] = mask[e] > 0.0f ? logits[(size_t)t * E + e] + logf(mask[e]) : -INFINITY;
}

/* Rows summed in order per expert, so a run repeats bit for bit. */
void ac_cpu_moe_mask_scores_backward(ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits,
                                     float *dmask)
{
    (void)ctx;
    for (int e = 0; e < E; e++) {
        if (!(mask[e] > 0.0f))
            continue;
        float sum = 0.0f;
        for (int t = 0; t < T; t++)
            sum += dlogits[(size_t)t * E + e];
        dmask[e] += sum / mask[e];
    }
}

/* w_j = scale s_j / Z with Z = sum_l s_l + 1e-20 (norm) or w_j = scale s_j, s = sigmoid:
 *   dL/ds_j = (scale / Z) (dw_j - sum_l dw_l s_l / Z)   or   scale dw_j,
 *   dL/dlogit_j = dL/ds_j s_j (1 - s_j). */
void ac_cpu_moe_route_backward(ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm,
                               float scale, const int32_t *idx, const float *dweight, float *dlogits)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (T > ROUTE_PARALLEL_MIN)
    for (int t = 0; t < T; t++) {
        float s[MAX_EXPERTS];
        const float *lt = logits + (size_t)t * E;
        const int32_t *it = idx + (size_t)t * top_k;
        const float *gt = dweight + (size_t)t * top_k;
        float *dt = dlogits + (size_t)t * E;
        float sum = 0.0f, gs = 0.0f;
        for (int j = 0; j < top_k; j++) {
            s[j] = ac_cpu_sigmoid(lt[it[j]]);
            sum += s[j];
            gs += gt[j] * s[j];
        }
        for (int e = 0; e < E; e++)
            dt[e] = 0.0f;
        float z = sum + 1e-20f;
        for (int j = 0; j < top_k; j++) {
            float ds = norm ? scale / z * (gt[j] - gs / z) : scale * gt[j];
            dt[it[j]] = ds * s[j] * (1.0f - s[j]);
        }
    }
}

/* The dot products run in parallel over rows into dweight; the mask's gradient then sums
 * them in row order, so a run repeats bit for bit. */
void ac_cpu_moe_combine_backward(ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,
                                 const float *y, const float *weight, const float *mask, const int32_t *pair,
                                 float *dweight, float *dmask, float *dy)
{
    (void)ctx;
    float m = mask ? *mask : 1.0f;
#pragma omp parallel for schedule(static) if ((long)n * D > 65536)
    for (int i = 0; i < n; i++) {
        const float *g = dout + (size_t)rows[i] * lddout;
        const float *yi = y + (size_t)i * D;
        float *dyi = dy + (size_t)i * D;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < D; c++) /* in vector lanes (the in-order sum was a chain of D adds) */
            d += g[c] * yi[c];
        dweight[pair[i]] = d;
        float f = weight[i] * m;
        for (int c = 0; c < D; c++)
            dyi[c] = f * g[c];
    }
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = dweight[pair[i]];
        acc += weight[i] * d;
        dweight[pair[i]] = m * d;
    }
    if (dmask)
        *dmask += acc;
}

void ac_cpu_gather_rows_backward(ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows, float *dsrc,
                                 int lddsrc)
{
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 64)
    for (int i = 0; i < n; i++) {
        const float *s = ddst + (size_t)i * D;
        float *d = dsrc + (size_t)rows[i] * lddsrc;
        for (int c = 0; c < D; c++)
            d[c] += s[c];
    }
}

/* ---- one token's experts ---- */

/* The positions of idx[0..k) in increasing expert index (insertion sort: k is small). */
static void picks_in_order(int k, const int32_t *idx, int *order)
{
    for (int j = 0; j < k; j++) {
        int q = j;
        while (q > 0 && idx[order[q - 1]] > idx[j]) {
            order[q] = order[q - 1];
            q--;
        }
        order[q] = j;
    }
}

enum { MOE_TOKEN_PRODUCTS = AC_K_MAX_MOE_PICKS + 1 };

/* A token's products, the shared expert then the picks by increasing expert index: the
 * up and down matrices (as the ffn holds them: floats or bf16 values), the rows of each
 * up matrix, the weight of each down product and where its h goes in hidden. */
typedef struct {
    int n;
    const void *up[MOE_TOKEN_PRODUCTS], *down[MOE_TOKEN_PRODUCTS];
    int rows[MOE_TOKEN_PRODUCTS];
    float alpha[MOE_TOKEN_PRODUCTS];
    float *h[MOE_TOKEN_PRODUCTS];
} token_products;

static void list_token_products(const ac_k_moe_ffn *f, int k, const int32_t *idx, const float *weight,
                                float *hidden, token_products *p)
{
    size_t elem = f->bf16 ? sizeof(uint16_t) : sizeof(float), per_expert = (size_t)f->I * f->D * elem;
    int order[AC_K_MAX_MOE_PICKS];
    float *next = hidden;
    p->n = 0;
    if (f->S > 0) {
        p->up[0] = f->shared_up, p->down[0] = f->shared_down, p->rows[0] = f->S, p->alpha[0] = 1.0f;
        p->h[0] = next, next += f->S, p->n = 1;
    }
    picks_in_order(k, idx, order);
    for (int o = 0; o < k; o++) {
        int j = order[o], e = idx[j], n = p->n++;
        p->up[n] = (const char *)f->experts_up + (size_t)e * per_expert;
        p->down[n] = (const char *)f->experts_down + (size_t)e * per_expert;
        p->rows[n] = f->I;
        p->alpha[n] = f->experts_mask ? weight[j] * f->experts_mask[e] : weight[j];
        p->h[n] = next, next += f->I;
    }
}

/* relu2 and the channel mask of each product's h. */
static void activate_token_products(ac_kctx *ctx, const ac_k_moe_ffn *f, const token_products *p)
{
    for (int i = 0; i < p->n; i++) {
        const float *mask = i == 0 && f->S > 0 ? f->shared_mask : f->ffn_mask;
        ac_cpu_relu2(ctx, (size_t)p->rows[i], p->h[i], p->h[i]);
        if (mask)
            ac_cpu_mul_columns(ctx, 1, p->rows[i], mask, p->h[i], p->rows[i]);
    }
}

/* The same products with bf16 weights, one ac_cpu_linear_bf16 each: the down products
 * add up in the same order. */
static void moe_token_bf16(ac_kctx *ctx, const ac_k_moe_ffn *f, const token_products *p, const float *x, float *y)
{
    for (int i = 0; i < p->n; i++)
        ac_cpu_linear_bf16(ctx, 1, p->rows[i], f->D, 1.0f, x, f->D, p->up[i], 0.0f, p->h[i], p->rows[i]);
    activate_token_products(ctx, f, p);
    if (p->n == 0)
        for (int d = 0; d < f->D; d++)
            y[d] = 0.0f;
    for (int i = 0; i < p->n; i++)
        ac_cpu_linear_bf16(ctx, 1, f->D, p->rows[i], p->alpha[i], p->h[i], p->rows[i], p->down[i],
                           i == 0 ? 0.0f : 1.0f, y, f->D);
}

/* One token: the shared expert and the picked ones as one batch of matrix-vector
 * products, relu2 and the channel masks, then one weighted sum of the down projections:
 * two passes over the weights a token reads, as the grouped path orders them (shared,
 * then by expert). */
static void moe_one_token(ac_kctx *ctx, const ac_k_moe_ffn *f, int k, const int32_t *idx, const float *weight,
                          const float *x, float *hidden, float *y)
{
    token_products p;
    list_token_products(f, k, idx, weight, hidden, &p);
    if (f->bf16) {
        moe_token_bf16(ctx, f, &p, x, y);
        return;
    }
    const float *up[MOE_TOKEN_PRODUCTS], *down[MOE_TOKEN_PRODUCTS], *xs[MOE_TOKEN_PRODUCTS];
    int cols[MOE_TOKEN_PRODUCTS];
    for (int i = 0; i < p.n; i++) {
        up[i] = p.up[i], down[i] = p.down[i];
        xs[i] = x;
        cols[i] = f->D;
    }
    ac_cpu_gemv_batch(ctx, p.n, up, p.rows, cols, xs, p.h);
    activate_token_products(ctx, f, &p);
    for (int i = 0; i < p.n; i++)
        xs[i] = p.h[i];
    ac_cpu_gemv_sum(ctx, p.n, down, f->D, p.rows, xs, p.alpha, y);
}

void ac_cpu_moe_token(ac_kctx *ctx, const ac_k_moe_ffn *f, int T, int k, const int32_t *idx, const float *weight,
                      const float *x, float *hidden, float *y)
{
    size_t per_token = (size_t)f->S + (size_t)k * f->I;
    for (int t = 0; t < T; t++)
        moe_one_token(ctx, f, k, idx + (size_t)t * k, weight + (size_t)t * k, x + (size_t)t * f->D,
                      hidden + (size_t)t * per_token, y + (size_t)t * f->D);
}
