/* Next-token choice from logits: greedy at temperature 0, else temperature and nucleus
 * (top-p) sampling from a seeded generator, so a seed reproduces a sample. */
#ifndef AUTOCOMPRESS_SAMPLE_H
#define AUTOCOMPRESS_SAMPLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float temperature; /* 0: greedy */
    float top_p;       /* (0, 1]; 1: the whole distribution */
    uint64_t state;    /* generator state */
} ac_sampler;

void ac_sampler_init(ac_sampler *s, float temperature, float top_p, uint64_t seed);
/* Picks a token from logits[vocab]; `work` holds 2*vocab floats of scratch. */
int32_t ac_sample(ac_sampler *s, const float *logits, int vocab, float *work);
/* The index of the largest logit (the first on ties). */
int32_t ac_argmax(const float *logits, int vocab);

#ifdef __cplusplus
}
#endif

#endif
