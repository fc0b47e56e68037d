#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <omp.h>

/* exp(x) of a shifted score. Below e^-60 a term adds nothing a float sum of at least 1
 * can hold, and computing it would bring subnormal arithmetic (tens of times slower on
 * x86) into the weighted sum: attention's time would depend on how peaked its scores
 * are, which the cost model cannot know. Such terms are exactly 0. No branch either: a
 * row that mixes kept and dropped terms would pay for mispredictions that a row of only
 * one kind does not (measured: 30% more prefill time for the same shapes). */
static inline float softmax_exp(float x)
{
    float keep = (float)(x > -60.0f);
    return keep * expf(fmaxf(x, -60.0f));
}

/* One (head, query) pair at a time: scores over the visible keys, a max-shifted softmax
 * in f32, then the weighted sum of values. Each thread keeps its scores in its own row of
 * the workspace, which holds omp_get_max_threads() rows of past + n_new floats. */
void ac_cpu_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd,
                      const float *q, int ldq, const float *k_cache, const float *v_cache, int cap,
                      float scale, float *out, int ldout)
{
    int group = n_heads / n_kv;
    int total = past + n_new;
#pragma omp parallel
    {
        float *scores = (float *)ctx->workspace + (size_t)omp_get_thread_num() * total;
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < n_new; i++) {
                const float *qi = q + (size_t)i * ldq + (size_t)h * hd;
                const float *K = k_cache + (size_t)(h / group) * cap * hd;
                const float *V = v_cache + (size_t)(h / group) * cap * hd;
                float *oi = out + (size_t)i * ldout + (size_t)h * hd;
                int visible = past + i + 1;
                float max = -INFINITY;
                for (int j = 0; j < visible; j++) {
                    const float *kj = K + (size_t)j * hd;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int c = 0; c < hd; c++)
                        dot += qi[c] * kj[c];
                    scores[j] = dot * scale;
                    if (scores[j] > max)
                        max = scores[j];
                }
                float sum = 0.0f;
                for (int j = 0; j < visible; j++) {
                    scores[j] = softmax_exp(scores[j] - max);
                    sum += scores[j];
                }
                float inv = 1.0f / sum;
                for (int c = 0; c < hd; c++)
                    oi[c] = 0.0f;
                for (int j = 0; j < visible; j++) {
                    const float *vj = V + (size_t)j * hd;
                    float p = scores[j] * inv;
                    for (int c = 0; c < hd; c++)
                        oi[c] += p * vj[c];
                }
            }
    }
}

size_t ac_k_attention_workspace(int threads, int total_tokens)
{
    return (size_t)threads * (size_t)total_tokens * sizeof(float);
}

/* Flash-style backward: no probability matrix is kept. With p the softmax of row i and
 * dp_j = datt_i . v_j, the softmax backward is ds_j = p_j (dp_j - delta_i), delta_i =
 * sum_j p_j dp_j = datt_i . out_i. Pass 1 runs over (head, query): it recomputes the row
 * of scores (in this thread's workspace row), the output, the row's log normaliser and
 * delta, and dq_i = scale sum_j ds_j k_j. Pass 2 runs over (KV head, key): for key j it
 * loops over the queries i >= j of every query head sharing it, rebuilding p_ij from the
 * saved normaliser, so dk_j and dv_j each have one writer. */
void ac_cpu_attention_backward(ac_kctx *ctx, int L, int n_heads, int n_kv, int hd, const float *q, int ldq,
                               const float *k, const float *v, int ldkv, const float *datt, float scale,
                               float *out, float *stats, float *dq, float *dk, float *dv)
{
    int group = n_heads / n_kv;
    int ldst = 2 * n_heads;
#pragma omp parallel
    {
        float *scores = (float *)ctx->workspace + (size_t)omp_get_thread_num() * L;
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < L; i++) {
                const float *qi = q + (size_t)i * ldq + (size_t)h * hd;
                const float *gi = datt + (size_t)i * ldq + (size_t)h * hd;
                const float *K = k + (size_t)(h / group) * hd;
                const float *V = v + (size_t)(h / group) * hd;
                float *oi = out + (size_t)i * ldq + (size_t)h * hd;
                float *dqi = dq + (size_t)i * ldq + (size_t)h * hd;
                float max = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float *kj = K + (size_t)j * ldkv;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int c = 0; c < hd; c++)
                        dot += qi[c] * kj[c];
                    scores[j] = dot * scale;
                    if (scores[j] > max)
                        max = scores[j];
                }
                float sum = 0.0f;
                for (int j = 0; j <= i; j++) {
                    scores[j] = softmax_exp(scores[j] - max);
                    sum += scores[j];
                }
                float inv = 1.0f / sum;
                for (int c = 0; c < hd; c++)
                    oi[c] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float *vj = V + (size_t)j * ldkv;
                    scores[j] *= inv;
                    float p = scores[j];
                    for (int c = 0; c < hd; c++)
                        oi[c] += p * vj[c];
                }
                float delta = 0.0f;
                for (int c = 0; c < hd; c++)
                    delta += gi[c] * oi[c];
                stats[(size_t)i * ldst + h] = max + logf(sum);
                stats[(size_t)i * ldst + n_heads + h] = delta;
                for (int c = 0; c < hd; c++)
                    dqi[c] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float *kj = K + (size_t)j * ldkv;
                    const float *vj = V + (size_t)j * ldkv;
                    float dp = 0.0f;
#pragma omp simd reduction(+ : dp)
                    for (int c = 0; c < hd; c++)
                        dp += gi[c] * vj[c];
                    float ds = scores[j] * (dp - delta) * scale;
                    for (int c = 0; c < hd; c++)
                        dqi[c] += ds * kj[c];
                }
            }
        /* the implicit barrier above: every row's normaliser and delta are in stats */
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int g = 0; g < n_kv; g++)
            for (int j = 0; j < L; j++) {
                const float *kj = k + (size_t)j * ldkv + (size_t)g * hd;
                const float *vj = v + (size_t)j * ldkv + (size_t)g * hd;
                float *dkj = dk + (size_t)j * ldkv + (size_t)g * hd;
                float *dvj = dv + (size_t)j * ldkv + (size_t)g * hd;
                for (int c = 0; c < hd; c++) {
                    dkj[c] = 0.0f;
                    dvj[c] = 0.0f;
                }
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i = j; i < L; i++) {
                        const float *qi = q + (size_t)i * ldq + (size_t)h * hd;
                        const float *gi = datt + (size_t)i * ldq + (size_t)h * hd;
                        float dot = 0.0f, dp = 0.0f;
#pragma omp simd reduction(+ : dot, dp)
                        for (int c = 0; c < hd; c++) {
                            dot += qi[c] * kj[c];
                            dp += gi[c] * vj[c];
                        }
                        float p = softmax_exp(dot * scale - stats[(size_t)i * ldst + h]);
                        float ds = p * (dp - stats[(size_t)i * ldst + n_heads + h]) * scale;
                        for (int c = 0; c < hd; c++) {
                            dvj[c] += p * gi[c];
                            dkj[c] += ds * qi[c];
                        }
                    }
            }
    }
}
