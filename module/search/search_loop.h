/* What the search loop's files share: the resumable state (state.c), the discrete
 * choice and its repair (discretize.c), the outputs (outputs.c). */
#ifndef AC_SEARCH_LOOP_H
#define AC_SEARCH_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/search.h"

enum { AC_SEARCH_FINGERPRINT = 512, AC_SEARCH_MAX_REPAIRS = 256 };

typedef struct {
    int step;        /* router steps done */
    int64_t tokens;  /* search tokens so far */
    double last_kd, last_budget; /* the losses of the last step done */
    double lambda[AC_BUDGET_TARGETS]; /* the budget's learned multipliers (DUAL) */
    char fingerprint[AC_SEARCH_FINGERPRINT]; /* the run's settings */
} ac_search_state;

/* DIR/search_state.bin, written whole or not at all: the state (with the multipliers),
 * the router logits and their optimiser's moments (n floats each). The state it replaces is kept as
 * search_state.prev.bin. */
ac_status ac_search_state_save(const char *dir, const ac_search_state *state, const float *logits, const float *m,
                               const float *v, int n);
/* The newest state (want_step < 0), or the one at step want_step (that of the trained
 * weights' checkpoint); *found = 0 (and nothing read) when DIR holds no state. A state
 * for another number of logits, a damaged file or no state at want_step is an error
 * naming the file. */
ac_status ac_search_state_load(const char *dir, int want_step, ac_search_state *state, float *logits, float *m,
                               float *v, int n, int *found);

/* The seed stream of the calibration windows (seed ^ this): Minitron++ and the search
 * compute the same importance from the same seed. */
#define AC_CALIBRATION_STREAM 0x63616c6962ULL

/* The contract's targets in the cost model's units, ratios of the parent's predicted cost. */
ac_status ac_search_resolve_targets(const ac_contract *c, const ac_cost_prediction *parent, ac_budget_targets *t);
/* The targets a search aims at: each of t tightened by the fraction `margin`. */
ac_budget_targets ac_search_planned_targets(const ac_budget_targets *t, double margin);
/* Sum of the relative excesses of p over the targets (0: every target met). */
double ac_search_excess(const ac_budget_targets *t, const ac_cost_prediction *p);
/* The temperature of step `step` of `steps` (geometric from temp_start to temp_end). */
float ac_search_temperature(const ac_search_params *p, int step, int steps);
/* The router learning rate at temperature T (p->lr_schedule). */
float ac_search_router_lr(const ac_search_params *p, float temperature);
/* One step of the router optimiser `kind` (router_optim.c) on n logits, gradient g,
 * learning rate lr, step t (1-based): m and v its moments (n each; SHARED_ADAM keeps its
 * one second moment in every v[i]; SGD uses neither). */
void ac_search_optim_step(ac_router_optim kind, int n, float *logits, const float *g, float *m, float *v, float lr,
                          int t);
/* "hidden", "L3.experts" */
void ac_search_axis_label(const ac_cost_axis *a, char *buf, size_t size);

/* One step down an axis made by the repair. */
typedef struct {
    int axis, from, to;  /* value indices */
    double saved, lost;  /* relative excess saved, importance fraction lost */
} ac_repair_step;

/* The routers' argmax, then greedy repair: while the cost model says a target is
 * missed, take the step down one axis (to its next smaller value) with the best ratio
 * of excess saved to importance lost. Fills report->arch, chosen, meets, repair_steps;
 * choice[axis count] and steps[] (at most max_steps) receive the result. */
ac_status ac_search_discretize(const ac_cost_model *cost, const ac_arch *parent, const double *probs,
                               const ac_importance *imp,
                               const ac_budget_targets *targets, int *choice, ac_repair_step *steps, int max_steps,
                               ac_search_report *report);

/* search.json's fields: targets, predictions, choices, kept layers, repairs, tokens,
 * parameters (a cJSON object, NULL when out of memory). */
struct cJSON;
struct cJSON *ac_search_summary_json(const ac_contract *contract, const ac_cost_model *cost, const int *choice,
                                     const ac_repair_step *steps, const ac_search_report *r);

/* arch.json (the chosen architecture as a config.json: nemotron_h_puzzle when layers
 * differ) and search.json (targets, predictions, choices, repairs, tokens), and
 * search.png from search.csv when gnuplot is there. */
ac_status ac_search_write_outputs(const char *dir, const ac_contract *contract, const ac_cost_model *cost,
                                  const int *choice, const ac_repair_step *steps, const ac_search_report *report);

#endif
