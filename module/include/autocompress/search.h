/* Architecture search, the parts that have landed: routers (one categorical
 * distribution per axis of the cost model) whose probabilities become soft masks, and
 * the budget loss on the cost model's expected cost. Importance, the reorder and the
 * search loop are still to come (issue 11). */
#ifndef AUTOCOMPRESS_SEARCH_H
#define AUTOCOMPRESS_SEARCH_H

#include <stdint.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/masks.h"
#include "autocompress/arch.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- routers (router.c) ---- */

typedef struct ac_routers ac_routers;

typedef enum { AC_ROUTER_SOFTMAX = 0, AC_ROUTER_GUMBEL } ac_router_sampling;

/* One logit per candidate value of every axis of `cost` (ac_cost_model_axis), all zero,
 * for masks over `parent` (the reordered parent the cost model was built for). */
ac_status ac_routers_create(const ac_cost_model *cost, const ac_arch *parent, ac_routers **out);
void ac_routers_free(ac_routers *r);
/* The flat logits (ac_cost_model_prob_count of them, axis by axis), for the optimizer
 * and checkpoints. */
int ac_routers_count(const ac_routers *r);
float *ac_routers_logits(ac_routers *r);
/* probs = softmax((logits + g) / temperature) per axis, g = 0 (SOFTMAX) or Gumbel noise
 * drawn from `seed` (GUMBEL). */
void ac_routers_probs(const ac_routers *r, float temperature, ac_router_sampling sampling, uint64_t seed,
                      double *probs);
/* The soft masks of `probs`: per axis, the probability-weighted sum of the nested prefix
 * masks (channel c of a width axis is kept with probability sum of p over values > c;
 * Mamba heads by their rank within their group; "keep" axes become layer gates). The
 * returned masks point into r and stay valid until the next call. */
const ac_masks *ac_routers_masks(ac_routers *r, const double *probs);
/* Zeroed gradient buffers shaped as the masks, for ac_step_inputs.mask_grads. */
ac_mask_grads *ac_routers_mask_grads(ac_routers *r);
/* dL/dprobs from the mask gradients accumulated in ac_routers_mask_grads (overwritten),
 * then (added) dprobs_extra (may be NULL), then dL/dlogits through the softmax at the
 * temperature of the probs (overwritten, ac_routers_count; the Gumbel noise is a
 * constant, so the same formula holds for both samplings). */
void ac_routers_backward(const ac_routers *r, const double *probs, const double *dprobs_extra, float temperature,
                         double *dprobs, double *dlogits);
/* The most probable value's index on each axis (choice[ac_cost_model_axis_count]). */
void ac_routers_argmax(const ac_routers *r, const double *probs, int *choice);

/* ---- the budget loss (budget.c) ---- */

/* Targets in the units of ac_cost_prediction; a value <= 0 is no target. */
typedef struct {
    double latency_ms, throughput_tok_s, memory_bytes;
} ac_budget_targets;

typedef struct {
    double lambda1, lambda2;
} ac_budget_weights;

/* Sum over targets of lambda1 r + lambda2 r^2, r = (s - t) / t for latency and memory
 * and (t - s) / t for throughput, r clamped at 0 (no reward for going under). dprobs
 * (prob_count, may be NULL) is overwritten with the loss's gradient, given the cost
 * model's gradients of the expected costs (any may be NULL when that target is unset). */
double ac_budget_loss(const ac_budget_targets *targets, const ac_budget_weights *weights,
                      const ac_cost_prediction *expected, const double *d_latency_ms, const double *d_memory_bytes,
                      const double *d_throughput, int prob_count, double *dprobs);

#ifdef __cplusplus
}
#endif

#endif
