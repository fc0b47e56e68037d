#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>

/* One (head, query) pair at a time: scores over the visible keys, a max-shifted softmax
 * in f32, then the weighted sum of values. Each thread keeps its scores in its own row of
 * the workspace, which holds omp_get_max_threads() rows of past + n_new floats. */
void ac_k_attention(ac_kctx *ctx, int n_new, int past, int n_heads, int n_kv, int hd,
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
                    scores[j] = expf(scores[j] - max);
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

size_t ac_k_attention_workspace(int total_tokens)
{
    return (size_t)omp_get_max_threads() * (size_t)total_tokens * sizeof(float);
}
