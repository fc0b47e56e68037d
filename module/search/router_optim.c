/* The router logits' optimiser step: AdamW per logit (the original step), Adam with one
 * second moment shared by every logit, or plain SGD.
 *
 * Why a shared moment: per-logit Adam divides each logit's gradient by its own RMS, so
 * every logit moves by about lr whatever its gradient's size, and the ratio of cost saved
 * to KD lost that should decide which axis to cut is normalised away. One second moment
 * (the mean square over all logits) normalises only the common scale, which the
 * multipliers and the KD set, and keeps the ratios across axes. */
#include "search/search_loop.h"

#include "kernels/kernels.h"

#include <math.h>

/* The shared moment's decay: a memory of about 100 steps, so the normalisation follows
 * the gradients' scale as the multipliers grow within one search (0.999 would average
 * over more steps than a run has). */
#define SHARED_BETA1 0.9
#define SHARED_BETA2 0.99
#define SHARED_EPS 1e-8

static void shared_adam(int n, float *logits, const float *g, float *m, float *v, float lr, int t)
{
    double mean_sq = 0.0;
    for (int i = 0; i < n; i++)
        mean_sq += (double)g[i] * g[i];
    mean_sq /= n > 0 ? n : 1;
    double vs = SHARED_BETA2 * (double)v[0] + (1.0 - SHARED_BETA2) * mean_sq;
    double scale = lr / (sqrt(vs / (1.0 - pow(SHARED_BETA2, t))) + SHARED_EPS);
    double m_corr = 1.0 / (1.0 - pow(SHARED_BETA1, t));
    for (int i = 0; i < n; i++) {
        m[i] = (float)(SHARED_BETA1 * m[i] + (1.0 - SHARED_BETA1) * g[i]);
        v[i] = (float)vs; /* every entry holds the one moment, so the state keeps its shape */
        logits[i] -= (float)(scale * m_corr * m[i]);
    }
}

void ac_search_optim_step(ac_router_optim kind, int n, float *logits, const float *g, float *m, float *v, float lr,
                          int t)
{
    if (kind == AC_ROUTER_SHARED_ADAM) {
        shared_adam(n, logits, g, m, v, lr, t);
    } else if (kind == AC_ROUTER_SGD) {
        for (int i = 0; i < n; i++)
            logits[i] -= lr * g[i];
    } else {
        ac_kctx k = {0};
        ac_k_adamw(&k, (size_t)n, logits, g, 1.0f, m, v, lr, 0.9f, 0.999f, 1e-8f, 0.0f, t);
    }
}
