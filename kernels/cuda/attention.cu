/* CUDA causal GQA attention and its backward (kernels/cpu/attention.c is the reference).
 *
 * Forward: a block per (query, head). Its warps split the keys the query sees; each warp
 * keeps an online softmax of its keys (running max m, normaliser l, and the sum of the
 * values weighted by exp(score - m)), lanes over the head dimension; at the end the
 * block merges the warps' partial results, rescaled to the largest max. The weighted sums
 * sit in shared memory, AC_ATTN_CHUNK columns at a time (kernels/cuda/attention_launch.h).
 *
 * Backward, recomputing the scores (with P the causal softmax, dP = datt V^T, delta_i =
 * datt_i . out_i, dS = P (dP - delta) scale): a block per (query, head) gives out, the log
 * normaliser, delta and dq = dS K; then a block per (key, KV head) gives dk = dS^T Q and
 * dv = P^T datt over the queries and query heads that see the key. Every output float has
 * one writer and every sum a fixed order: no atomics, and the padding between rows of
 * the outputs is left as it was, as the CPU leaves it. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/attention_launch.h"

#include <math.h>

/* The sum of v over the warp, in every lane. */
static __device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* a . b over hd floats, lanes over the columns; every lane gets it. */
static __device__ float warp_dot(const float *a, const float *b, int hd)
{
    float s = 0.0f;
    for (int c = threadIdx.x % 32; c < hd; c += 32)
        s += a[c] * b[c];
    return warp_sum(s);
}

/* a . b over hd floats by the whole block; every thread gets it. red: a float per warp,
 * free on entry and on return. */
static __device__ float block_dot(const float *a, const float *b, int hd, float *red)
{
    int warps = blockDim.x / 32;
    float s = 0.0f;
    for (int c = threadIdx.x; c < hd; c += blockDim.x)
        s += a[c] * b[c];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = s;
    __syncthreads();
    float sum = 0.0f;
    for (int w = 0; w < warps; w++)
        sum += red[w];
    __syncthreads();
    return sum;
}

/* One query row: out [hd] = softmax(scale q K^T) V over keys 0..keys-1 (keys >= 1), the
 * rows of K and V ld floats apart; returns the log normaliser (in every thread). smem:
 * ac_attn_query_smem(hd) bytes, free on entry and on return. */
static __device__ float attend_row(const float *q, const float *K, const float *V, size_t ld, int keys, int hd,
                                   float scale, float *out, float *smem)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, chunk = ac_attn_chunk(hd);
    float *acc = smem + (size_t)warp * chunk, *row_max = smem + (size_t)warps * chunk, *row_sum = row_max + warps;
    float lse = 0.0f;
    for (int c0 = 0; c0 < hd; c0 += chunk) {
        int width = hd - c0 < chunk ? hd - c0 : chunk;
        float m = -INFINITY, l = 0.0f;
        for (int c = lane; c < width; c += 32)
            acc[c] = 0.0f;
        for (int j = warp; j < keys; j += warps) {
            float s = scale * warp_dot(q, K + (size_t)j * ld, hd);
            float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new); /* rescale 0 at first */
            const float *vj = V + (size_t)j * ld + c0;
            l = l * rescale + p;
            for (int c = lane; c < width; c += 32)
                acc[c] = acc[c] * rescale + p * vj[c];
            m = m_new;
        }
        if (lane == 0) {
            row_max[warp] = m;
            row_sum[warp] = l;
        }
        __syncthreads();
        /* a warp that saw no key has m = -inf and weighs 0 */
        float M = -INFINITY, Lsum = 0.0f;
        for (int w = 0; w < warps; w++)
            M = fmaxf(M, row_max[w]);
        for (int w = 0; w < warps; w++)
            Lsum += row_sum[w] * expf(row_max[w] - M);
        for (int c = threadIdx.x; c < width; c += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < warps; w++)
                o += smem[(size_t)w * chunk + c] * expf(row_max[w] - M);
            out[c0 + c] = o / Lsum;
        }
        lse = M + logf(Lsum);
        __syncthreads(); /* the next pass reuses smem, and out is complete */
    }
    return lse;
}

/* ---- forward ---- */

static __global__ void attention_kernel(int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                                        const float *k_cache, const float *v_cache, int cap, float scale, float *out,
                                        int ldout, float *lse, int ldlse)
{
    extern __shared__ float smem[];
    for (int b = blockIdx.x; b < n_new * n_heads; b += gridDim.x) {
        int i, h;
        ac_attn_query_item(b, n_heads, &i, &h);
        size_t kv = (size_t)ac_attn_kv_head(h, n_heads, n_kv) * cap * hd;
        float l = attend_row(q + (size_t)i * ldq + (size_t)h * hd, k_cache + kv, v_cache + kv, (size_t)hd,
                             past + i + 1, hd, scale, out + (size_t)i * ldout + (size_t)h * hd, smem);
        if (lse && threadIdx.x == 0)
            lse[(size_t)i * ldlse + h] = l;
    }
}

void ac_cuda_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd, const float *q, int ldq,
                       const float *k_cache, const float *v_cache, int cap, float scale, float *out, int ldout,
                       float *lse, int ldlse)
{
    if (n_new <= 0 || n_heads <= 0 || hd <= 0)
        return;
    attention_kernel<<<ac_attn_grid((size_t)n_new * n_heads), AC_ATTN_WARPS * 32, ac_attn_query_smem(hd),
                       ac_cuda_stream(ctx)>>>(n_new, past, n_heads, n_kv, hd, q, ldq, k_cache, v_cache, cap, scale,
                                              out, ldout, lse, ldlse);
    ac_cuda_check("attention");
}

/* ---- backward ---- */

/* dq [hd] = scale sum_j p_j (datt . v_j - delta) k_j over keys 0..keys-1, p_j = exp(scale
 * q . k_j - lse): the warps split the keys, then their sums are added in warp order. */
static __device__ void query_grad(const float *q, const float *datt, const float *K, const float *V, size_t ld,
                                  int keys, int hd, float scale, float lse, float delta, float *dq, float *smem)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, chunk = ac_attn_chunk(hd);
    float *acc = smem + (size_t)warp * chunk;
    for (int c0 = 0; c0 < hd; c0 += chunk) {
        int width = hd - c0 < chunk ? hd - c0 : chunk;
        for (int c = lane; c < width; c += 32)
            acc[c] = 0.0f;
        for (int j = warp; j < keys; j += warps) {
            const float *kj = K + (size_t)j * ld;
            float p = expf(scale * warp_dot(q, kj, hd) - lse);
            float ds = p * (warp_dot(datt, V + (size_t)j * ld, hd) - delta) * scale;
            for (int c = lane; c < width; c += 32)
                acc[c] += ds * kj[c0 + c];
        }
        __syncthreads();
        for (int c = threadIdx.x; c < width; c += blockDim.x) {
            float sum = 0.0f;
            for (int w = 0; w < warps; w++)
                sum += smem[(size_t)w * chunk + c];
            dq[c0 + c] = sum;
        }
        __syncthreads();
    }
}

/* A block per (query i, head h): delta_i (into stats, beside the forward's log
 * normaliser) and dq_i. The sequence starts empty, so query i sees keys 0..i. */
static __global__ void backward_query_kernel(int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                                             const float *k, const float *v, int ldkv, const float *datt,
                                             float scale, const float *out, float *stats, float *dq)
{
    extern __shared__ float smem[];
    float *red = smem + (size_t)(blockDim.x / 32) * ac_attn_chunk(hd); /* block_dot's, apart from query_grad's */
    for (int b = blockIdx.x; b < L * n_heads; b += gridDim.x) {
        int i, h;
        ac_attn_query_item(b, n_heads, &i, &h);
        size_t row = (size_t)i * ldq + (size_t)h * hd, kv = (size_t)ac_attn_kv_head(h, n_heads, n_kv) * hd;
        float lse = stats[(size_t)i * 2 * n_heads + h];
        float delta = block_dot(datt + row, out + row, hd, red);
        if (threadIdx.x == 0)
            stats[(size_t)i * 2 * n_heads + n_heads + h] = delta;
        query_grad(q + row, datt + row, k + kv, v + kv, (size_t)ldkv, i + 1, hd, scale, lse, delta, dq + row, smem);
    }
}

/* A block per (key j, KV head g): dk_j = sum dS_ij q_i and dv_j = sum P_ij datt_i over the
 * queries i >= j and the query heads of group g, from the stats of the query pass. The
 * warps split the (i, h) pairs, then their sums are added in warp order. */
static __global__ void backward_key_kernel(int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                                           const float *k, const float *v, int ldkv, const float *datt, float scale,
                                           const float *stats, float *dk, float *dv)
{
    extern __shared__ float smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, chunk = ac_attn_chunk(hd);
    int group = n_heads / n_kv;
    float *acc_k = smem + (size_t)warp * chunk, *acc_v = smem + (size_t)(warps + warp) * chunk;
    for (int b = blockIdx.x; b < L * n_kv; b += gridDim.x) {
        int j, g;
        ac_attn_key_item(b, n_kv, &j, &g);
        size_t at = (size_t)j * ldkv + (size_t)g * hd;
        const float *kj = k + at, *vj = v + at;
        int pairs = (L - j) * group;
        for (int c0 = 0; c0 < hd; c0 += chunk) {
            int width = hd - c0 < chunk ? hd - c0 : chunk;
            for (int c = lane; c < width; c += 32)
                acc_k[c] = acc_v[c] = 0.0f;
            for (int it = warp; it < pairs; it += warps) {
                int i, h;
                ac_attn_key_pair(it, j, g, group, &i, &h);
                size_t row = (size_t)i * ldq + (size_t)h * hd;
                const float *qi = q + row, *gi = datt + row, *st = stats + (size_t)i * 2 * n_heads;
                float p = expf(scale * warp_dot(qi, kj, hd) - st[h]);
                float ds = p * (warp_dot(gi, vj, hd) - st[n_heads + h]) * scale;
                for (int c = lane; c < width; c += 32) {
                    acc_k[c] += ds * qi[c0 + c];
                    acc_v[c] += p * gi[c0 + c];
                }
            }
            __syncthreads();
            for (int c = threadIdx.x; c < width; c += blockDim.x) {
                float sk = 0.0f, sv = 0.0f;
                for (int w = 0; w < warps; w++) {
                    sk += smem[(size_t)w * chunk + c];
                    sv += smem[(size_t)(warps + w) * chunk + c];
                }
                dk[at + c0 + c] = sk;
                dv[at + c0 + c] = sv;
            }
            __syncthreads();
        }
    }
}

void ac_cuda_attention_backward(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                                const float *k, const float *v, int ldkv, const float *datt, float scale,
                                const float *out, float *stats, float *dq, float *dk, float *dv)
{
    if (L <= 0 || n_heads <= 0 || hd <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    backward_query_kernel<<<ac_attn_grid((size_t)L * n_heads), AC_ATTN_WARPS * 32, ac_attn_query_smem(hd),
                            stream>>>(L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, scale, out, stats, dq);
    /* after the query pass on the same stream: it reads the stats */
    backward_key_kernel<<<ac_attn_grid((size_t)L * n_kv), AC_ATTN_WARPS * 32, ac_attn_key_smem(hd), stream>>>(
        L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, scale, stats, dk, dv);
    ac_cuda_check("attention_backward");
}
