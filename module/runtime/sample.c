#include "autocompress/sample.h"

#include "util/rng.h"

#include <math.h>
#include <stdlib.h>

/* A uniform in [0, 1) from splitmix64 (util/rng.h): small, fast, and good enough for one
 * draw per token. */
static double next_uniform(uint64_t *state) { return (double)(ac_rng_next(state) >> 11) * 0x1.0p-53; }

void ac_sampler_init(ac_sampler *s, float temperature, float top_p, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p > 0.0f && top_p <= 1.0f ? top_p : 1.0f;
    s->state = seed;
}

int32_t ac_argmax(const float *logits, int vocab)
{
    int32_t best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Sorts (probability, index) pairs stored as two floats, most likely first. */
static int by_probability_desc(const void *a, const void *b)
{
    float pa = ((const float *)a)[0], pb = ((const float *)b)[0];
    return (pa < pb) - (pa > pb);
}

int32_t ac_sample(ac_sampler *s, const float *logits, int vocab, float *work)
{
    if (s->temperature <= 0.0f)
        return ac_argmax(logits, vocab);
    float max = logits[ac_argmax(logits, vocab)];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        float p = expf((logits[i] - max) / s->temperature);
        work[2 * i] = p;
        work[2 * i + 1] = (float)i;
        sum += p;
    }
    qsort(work, (size_t)vocab, 2 * sizeof(float), by_probability_desc);
    /* the nucleus: the fewest most likely tokens whose mass reaches top_p */
    double kept = 0.0;
    int n = 0;
    while (n < vocab && (n == 0 || kept < s->top_p * sum)) {
        kept += work[2 * n];
        n++;
    }
    double r = next_uniform(&s->state) * kept;
    for (int i = 0; i < n; i++) {
        r -= work[2 * i];
        if (r < 0.0)
            return (int32_t)work[2 * i + 1];
    }
    return (int32_t)work[2 * (n - 1) + 1];
}
