/* The budget loss: a penalty lambda1 r + lambda2 r^2 on each target's relative excess r
 * of the expected cost (no reward for going under), and its gradient with respect to the
 * router probabilities through the cost model's gradients of the expected costs. */
#include "autocompress/search.h"

#include <stddef.h>

/* Adds one target's term: s the expected cost, t the target, sign +1 when s must stay
 * below t (latency, memory) and -1 when above (throughput); ds the cost's gradient. */
static double term(double s, double t, double sign, const ac_budget_weights *w, const double *ds, int n,
                   double *dprobs)
{
    if (!(t > 0))
        return 0.0;
    double r = sign * (s - t) / t;
    if (!(r > 0))
        return 0.0;
    if (dprobs && ds) {
        double dr = (w->lambda1 + 2.0 * w->lambda2 * r) * sign / t; /* dL/dr x dr/ds */
        for (int i = 0; i < n; i++)
            dprobs[i] += dr * ds[i];
    }
    return w->lambda1 * r + w->lambda2 * r * r;
}

double ac_budget_loss(const ac_budget_targets *targets, const ac_budget_weights *weights,
                      const ac_cost_prediction *expected, const double *d_latency_ms, const double *d_memory_bytes,
                      const double *d_throughput, int prob_count, double *dprobs)
{
    for (int i = 0; dprobs && i < prob_count; i++)
        dprobs[i] = 0.0;
    double loss = 0.0;
    loss += term(expected->latency_ms, targets->latency_ms, 1.0, weights, d_latency_ms, prob_count, dprobs);
    loss += term(expected->memory_bytes, targets->memory_bytes, 1.0, weights, d_memory_bytes, prob_count, dprobs);
    loss += term(expected->throughput_tok_s, targets->throughput_tok_s, -1.0, weights, d_throughput, prob_count,
                 dprobs);
    return loss;
}
