/* The budget loss, in two forms: a fixed penalty lambda1 r + lambda2 r^2 on each
 * target's relative excess r of the expected cost (no reward for going under), or a
 * Lagrangian sum_k lambda_k r_k whose multipliers the search learns by dual ascent; and
 * their gradients with respect to the router probabilities through the cost model's
 * gradients of the expected costs. */
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

/* The targets, the expected costs and the signs (+1: stay below) in AC_BUDGET_* order. */
static void unpack(const ac_budget_targets *t, const ac_cost_prediction *e, double *target, double *cost,
                   double *sign)
{
    target[AC_BUDGET_LATENCY] = t->latency_ms;
    target[AC_BUDGET_MEMORY] = t->memory_bytes;
    target[AC_BUDGET_THROUGHPUT] = t->throughput_tok_s;
    cost[AC_BUDGET_LATENCY] = e->latency_ms;
    cost[AC_BUDGET_MEMORY] = e->memory_bytes;
    cost[AC_BUDGET_THROUGHPUT] = e->throughput_tok_s;
    sign[AC_BUDGET_LATENCY] = sign[AC_BUDGET_MEMORY] = 1.0;
    sign[AC_BUDGET_THROUGHPUT] = -1.0;
}

void ac_budget_excess(const ac_budget_targets *targets, const ac_cost_prediction *expected, double *r)
{
    double t[AC_BUDGET_TARGETS], s[AC_BUDGET_TARGETS], sign[AC_BUDGET_TARGETS];
    unpack(targets, expected, t, s, sign);
    for (int k = 0; k < AC_BUDGET_TARGETS; k++)
        r[k] = t[k] > 0 ? sign[k] * (s[k] - t[k]) / t[k] : 0.0;
}

double ac_budget_lagrangian(const ac_budget_targets *targets, const double *lambda,
                            const ac_cost_prediction *expected, const double *d_latency_ms,
                            const double *d_memory_bytes, const double *d_throughput, int prob_count,
                            double *dprobs)
{
    double t[AC_BUDGET_TARGETS], s[AC_BUDGET_TARGETS], sign[AC_BUDGET_TARGETS], r[AC_BUDGET_TARGETS];
    const double *ds[AC_BUDGET_TARGETS] = {d_latency_ms, d_memory_bytes, d_throughput};
    unpack(targets, expected, t, s, sign);
    ac_budget_excess(targets, expected, r);
    for (int i = 0; dprobs && i < prob_count; i++)
        dprobs[i] = 0.0;
    double loss = 0.0;
    for (int k = 0; k < AC_BUDGET_TARGETS; k++) {
        if (!(t[k] > 0) || lambda[k] == 0.0)
            continue;
        loss += lambda[k] * r[k];
        double dr = lambda[k] * sign[k] / t[k]; /* dL/dr x dr/ds */
        for (int i = 0; dprobs && ds[k] && i < prob_count; i++)
            dprobs[i] += dr * ds[k][i];
    }
    return loss;
}

void ac_budget_dual_step(const ac_budget_targets *targets, const ac_cost_prediction *expected, double eta,
                         double *lambda)
{
    double r[AC_BUDGET_TARGETS];
    ac_budget_excess(targets, expected, r);
    const double t[AC_BUDGET_TARGETS] = {targets->latency_ms, targets->memory_bytes, targets->throughput_tok_s};
    for (int k = 0; k < AC_BUDGET_TARGETS; k++) {
        double next = lambda[k] + eta * r[k];
        lambda[k] = t[k] > 0 && next > 0 ? next : 0.0;
    }
}
