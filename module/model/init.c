/* Random initialisation for training from scratch, following transformers' Nemotron-H
 * init: N(0, std) for matrices and embeddings, ones for norms and D, A = 1..H, dt_bias
 * the inverse softplus of a log-uniform dt in [dt_min, dt_max], out projections scaled
 * by 1/sqrt(layers). */
#include "model/model_internal.h"
#include "util/rng.h"

#include <math.h>
#include <string.h>

/* splitmix64 (util/rng.h) and Box-Muller: deterministic across machines */
static double uniform(uint64_t *s) { return ((double)(ac_rng_next(s) >> 11) + 0.5) * 0x1.0p-53; }

static float normal(uint64_t *s)
{
    double u1 = uniform(s), u2 = uniform(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

void ac_model_init_random(ac_model *model, uint64_t seed, float std)
{
    uint64_t s = seed;
    const float dt_min = 1e-3f, dt_max = 0.1f;
    float out_scale = 1.0f / sqrtf((float)model->arch.n_layers);
    for (size_t i = 0; i < model->n_params; i++) {
        ac_param *p = &model->params[i];
        float *w = p->data;
        if (ends_with(p->name, "norm.weight") || ends_with(p->name, "norm_f.weight") || ends_with(p->name, ".D")) {
            for (size_t j = 0; j < p->count; j++)
                w[j] = 1.0f;
        } else if (ends_with(p->name, ".A_log")) {
            for (size_t j = 0; j < p->count; j++)
                w[j] = logf((float)(j + 1));
        } else if (ends_with(p->name, ".dt_bias")) {
            for (size_t j = 0; j < p->count; j++) {
                double dt = exp(uniform(&s) * (log(dt_max) - log(dt_min)) + log(dt_min));
                w[j] = (float)(dt + log(-expm1(-dt))); /* softplus^-1 */
            }
        } else if (ends_with(p->name, "conv1d.bias") || ends_with(p->name, "e_score_correction_bias")) {
            memset(w, 0, p->count * sizeof *w);
        } else {
            float scale = ends_with(p->name, "out_proj.weight") || ends_with(p->name, "o_proj.weight") ? out_scale : 1.0f;
            for (size_t j = 0; j < p->count; j++)
                w[j] = std * scale * normal(&s);
        }
    }
}
