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

/* How the budget enters the loss: DUAL, a Lagrangian sum_k w_k r_k, w_k = max(0,
 * lambda_k + rho r_k), whose multipliers lambda_k are learned by projected dual ascent
 * (ac_budget_dual_step; ac_search_params.dual_damping is rho); HINGE, the fixed penalty
 * of ac_budget_loss. */
typedef enum { AC_BUDGET_DUAL = 0, AC_BUDGET_HINGE } ac_budget_mode;

/* The targets in a fixed order, for the multipliers and the relative excesses. */
enum { AC_BUDGET_LATENCY = 0, AC_BUDGET_MEMORY, AC_BUDGET_THROUGHPUT, AC_BUDGET_TARGETS };

/* Sum over targets of lambda1 r + lambda2 r^2, r = (s - t) / t for latency and memory
 * and (t - s) / t for throughput, r clamped at 0 (no reward for going under). dprobs
 * (prob_count, may be NULL) is overwritten with the loss's gradient, given the cost
 * model's gradients of the expected costs (any may be NULL when that target is unset). */
double ac_budget_loss(const ac_budget_targets *targets, const ac_budget_weights *weights,
                      const ac_cost_prediction *expected, const double *d_latency_ms, const double *d_memory_bytes,
                      const double *d_throughput, int prob_count, double *dprobs);

/* Each target's signed relative excess r[AC_BUDGET_TARGETS] (as for ac_budget_loss but
 * not clamped: negative under the target; 0 where no target is set). */
void ac_budget_excess(const ac_budget_targets *targets, const ac_cost_prediction *expected, double *r);
/* The Lagrangian sum_k lambda[k] r_k (lambda: the weights w_k above), and its gradient in dprobs (prob_count, may be
 * NULL; overwritten) through the cost model's gradients of the expected costs. */
double ac_budget_lagrangian(const ac_budget_targets *targets, const double *lambda,
                            const ac_cost_prediction *expected, const double *d_latency_ms,
                            const double *d_memory_bytes, const double *d_throughput, int prob_count,
                            double *dprobs);
/* One step of projected dual ascent: lambda[k] <- max(0, lambda[k] + eta r_k); a
 * multiplier of an unset target stays 0. */
void ac_budget_dual_step(const ac_budget_targets *targets, const ac_cost_prediction *expected, double eta,
                         double *lambda);

/* ---- the search (search.c) ---- */

/* The router logits' optimiser: Adam with one second moment shared by every logit (the
 * step keeps the gradients' ratios across axes, only their common scale is
 * normalised), AdamW with a second moment per logit, or plain SGD. */
typedef enum { AC_ROUTER_SHARED_ADAM = 0, AC_ROUTER_ADAMW, AC_ROUTER_SGD } ac_router_optim;

/* The router learning rate over the steps: lr x T / temp_start (a constant step in
 * logits / T), or lr throughout. */
typedef enum { AC_LR_FOLLOWS_TEMPERATURE = 0, AC_LR_CONSTANT } ac_lr_schedule;

/* Where the targets' warm-up starts: the expected cost of the routers at step 0 (zero
 * logits: the uniform mixture), or the parent's cost. */
typedef enum { AC_WARMUP_FROM_INITIAL = 0, AC_WARMUP_FROM_PARENT } ac_warmup_from;

typedef struct {
    const char *data_dir;      /* train.bin: calibration and router batches */
    const char *out_dir;       /* importance.safetensors, state, search.csv, search.png, arch.json, search.json */
    int calib_seqs;            /* calibration sequences of seq_len tokens for the importance */
    int batch, seq_len;        /* router steps' batches */
    int64_t max_tokens;        /* search tokens (calibration + router steps); 0: the contract's
                                  budgets.search_tokens */
    float kd_tau;
    float kd_weight;           /* 0: the budget alone */
    ac_budget_mode budget_mode;
    ac_budget_weights budget;  /* the hinge's weights (budget_mode HINGE) */
    double dual_lr;            /* eta of the multipliers' dual ascent (budget_mode DUAL) */
    double dual_damping;       /* rho: the weight on target k's excess r is max(0, lambda_k + rho r)
                                  (DUAL; 0: lambda_k alone, plain dual ascent) */
    ac_router_optim router_optim;
    float lr;                  /* the router logits' learning rate */
    ac_lr_schedule lr_schedule;
    float temp_start, temp_end;/* annealed geometrically over the steps */
    ac_router_sampling sampling;
    ac_expert_masking expert_masking;
    ac_mamba_removal mamba_removal; /* how removing a Mamba layer is relaxed (autocompress/cost.h) */
    float target_warmup;       /* fraction of the steps over which targets move from warmup_from's
                                  cost to the planned ones (0: none) */
    ac_warmup_from warmup_from;
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
    ac_cost_prediction last_expected; /* the routers' expected cost at the end (the final
                                         distributions, at temp_end, without noise) */
    double multipliers[AC_BUDGET_TARGETS]; /* the learned multipliers at the end (DUAL; 0 with HINGE) */
    ac_arch arch;              /* the chosen architecture (free with ac_search_report_free) */
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
