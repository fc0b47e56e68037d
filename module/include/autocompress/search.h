/* Architecture search over the importance-ordered parent (autocompress/importance.h):
 * routers (one categorical distribution per axis of the cost model) whose probabilities
 * become soft masks, a budget loss on the cost model's expected cost, and the search
 * loop that trains the routers against KD from the unmasked parent. */
#ifndef AUTOCOMPRESS_SEARCH_H
#define AUTOCOMPRESS_SEARCH_H

#include <stdint.h>

#include "autocompress/comm.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/importance.h"
#include "autocompress/optim.h"
#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- routers (router.c) ---- */

typedef struct ac_routers ac_routers;

typedef enum { AC_ROUTER_SOFTMAX = 0, AC_ROUTER_GUMBEL } ac_router_sampling;

/* Where the routed-expert axis's mask acts (the paper's two modes, Fig. 8): on each
 * expert's output, the selection unchanged (the default), or on each expert's score
 * before the top-k, so a masked-out expert is never chosen (autocompress/masks.h). */
typedef enum { AC_EXPERT_OUTPUT_MASKING = 0, AC_EXPERT_SCORE_MASKING } ac_expert_masking;

/* One logit per candidate value of every axis of `cost` (ac_cost_model_axis), all zero,
 * for masks over `parent` (the reordered parent the cost model was built for). */
ac_status ac_routers_create(const ac_cost_model *cost, const ac_arch *parent, ac_routers **out);
void ac_routers_free(ac_routers *r);
/* Output masking unless set otherwise. */
void ac_routers_set_expert_masking(ac_routers *r, ac_expert_masking mode);
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
/* Where those buffers live, for summing them over ranks: *n floats at *buf, and the
 * layer gates' *n_gates floats at *gates (NULL and 0 when no axis gates a layer). */
void ac_routers_mask_grad_storage(ac_routers *r, float **buf, size_t *n, float **gates, size_t *n_gates);
/* dL/dprobs from the mask gradients accumulated in ac_routers_mask_grads (overwritten),
 * then (added) dprobs_extra (may be NULL), then dL/dlogits through the softmax at the
 * same temperature, sampling and seed as the probs (overwritten, ac_routers_count). */
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

/* ---- the search (search.c) ---- */

typedef struct {
    const char *data_dir;      /* train.bin: calibration and router batches */
    const char *out_dir;       /* importance.safetensors, state, search.csv, search.png, arch.json, search.json */
    int calib_seqs;            /* calibration sequences of seq_len tokens for the importance */
    int batch, seq_len;        /* router steps' batches */
    int64_t max_tokens;        /* search tokens (calibration + router steps); 0: the contract's
                                  budgets.search_tokens */
    float kd_tau;
    float kd_weight;           /* 0: the budget alone */
    ac_budget_weights budget;
    float lr;                  /* AdamW on the router logits */
    float temp_start, temp_end;/* annealed geometrically over the steps */
    ac_router_sampling sampling;
    ac_expert_masking expert_masking;
    float target_warmup;       /* fraction of the steps over which targets move from the parent's cost */
    uint64_t seed;
    int checkpoint_every;      /* steps between resumable states (0: only at the end) */
    int train_weights;         /* the weights learn from the KD too (frozen otherwise): the
                                  teacher is a frozen copy, the trained (reordered) parent is
                                  saved to out_dir/weights/ */
    ac_adamw_params weights_optim; /* their AdamW (total_steps: set to the router steps) */
    ac_progress_mode progress;
    ac_comm *comm;               /* data-parallel ranks (NULL: one process): each takes its shard of
                                    every KD batch; rank 0 writes out_dir */
    const char *device;          /* where the masked steps run: NULL or "cpu", "cuda" (one rank);
                                    the importance and the routers stay on the host */
    int fill;                    /* after the repair, step axes up while every planned target
                                    holds (1, the default; 0: the argmax, settled and repaired) */
    int candidates;              /* how many distinct architectures that meet the planned targets
                                    to list for re-ranking (default 4; 0: none) */
} ac_search_params;

ac_search_params ac_search_default_params(void);

/* An architecture for re-ranking by short KDs: one of the most probable under the final
 * routers (the argmax, its nearest alternatives), repaired and filled like the pick, that
 * the cost model predicts to meet every planned target. */
typedef struct {
    ac_arch arch;
    int *parent_layers;        /* arch.n_layers: the (reordered) parent layer each layer is cut from */
    ac_cost_prediction predicted;
    double log_prob;           /* sum over the axes the architecture depends on of log p under the
                                  final routers (an axis of a removed layer counts at its most
                                  probable value) */
    int chosen;                /* 1 for the search's pick */
} ac_search_candidate;

typedef struct {
    int steps, resumed_from;   /* resumed_from: the state's step, -1 when started fresh */
    int64_t calib_tokens, tokens; /* tokens: calibration + router steps */
    ac_budget_targets targets; /* the contract's */
    ac_budget_targets planned; /* those aimed at: the contract's margin inside them */
    ac_cost_prediction parent, chosen; /* the cost model's predictions */
    int settled_axes;          /* undecided axes (most probable value < 0.9) moved to their
                                  second value: of those combinations, the one that meets
                                  the targets with the least slack */
    int repair_steps;          /* axis steps the greedy repair took */
    int fill_steps;            /* axis steps up the fill took (0 when params.fill is 0) */
    ac_cost_prediction unfilled; /* the choice's prediction before the fill */
    const char *binding;       /* the planned target the choice uses most of: "latency",
                                  "memory", "throughput" ("" when there is none) */
    double binding_use;        /* its use: predicted / planned (planned / predicted for
                                  throughput); 1 = exactly on it */
    double unfilled_use;       /* the same target's use before the fill */
    int meets;                 /* the chosen architecture meets every target */
    double last_kd, last_budget;
    ac_arch arch;              /* the chosen architecture */
    int n_candidates;          /* params.candidates or fewer: the distinct ones found */
    ac_search_candidate *candidates;
} ac_search_report;

/* Frees the report's architecture and candidates. */
void ac_search_report_free(ac_search_report *r);

/* Searches `parent` for `contract` with the cost model of `tables`. Resumes from
 * out_dir's state when it holds one made with the same settings (another is refused). */
ac_status ac_search_run(const ac_model *parent, const ac_contract *contract, const ac_cost_tables *tables,
                        const ac_search_params *params, ac_search_report *report);

#ifdef __cplusplus
}
#endif

#endif
