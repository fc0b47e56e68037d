/* What the search loop's files share: the resumable state (state.c), the discrete
 * choice and its repair (discretize.c), the outputs (outputs.c). */
#ifndef AC_SEARCH_LOOP_H
#define AC_SEARCH_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/search.h"

enum { AC_SEARCH_FINGERPRINT = 512 };

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

/* One step of an axis: down by the repair, up by the fill. Importance is in fractions of
 * the model's (choice_lost in discretize.c). */
typedef struct {
    int axis, from, to;  /* value indices */
    double cost;         /* repair: relative excess saved; fill: the largest share of a planned
                            target's remaining room the step used */
    double importance;   /* repair: lost; fill: regained */
} ac_axis_step;

/* What discretisation reads: the final routers and what it judges them by. */
typedef struct {
    const ac_cost_model *cost;
    const ac_arch *parent;            /* the reordered parent the cost model was built for */
    const ac_importance *imp;         /* in the parent's (reordered) order */
    const ac_budget_targets *targets; /* the planned targets */
    const float *logits;              /* the routers' (ac_cost_model_prob_count) */
    float temperature;                /* the final one (> 0) */
    int fill, max_candidates;         /* ac_search_params' fill and candidates */
} ac_discretize_inputs;

/* The pick and how it came about; free with ac_discrete_choice_free. */
typedef struct {
    int *choice;         /* axis count: the pick */
    int *unfilled;       /* the choice after settling and repair, before the fill */
    ac_axis_step *repairs, *fills; /* report->repair_steps and fill_steps of them */
} ac_discrete_choice;

void ac_discrete_choice_free(ac_discrete_choice *d);

/* The routers' argmax, its undecided axes settled, then greedy repair: while the cost
 * model says a target is missed, take the step down one axis (to its next smaller value)
 * with the best ratio of excess saved to importance lost; then (with in->fill) the fill:
 * while some step up one axis keeps every target met, take the one with the most
 * importance regained per share of a target's remaining room used. Fills report's arch,
 * chosen, unfilled, meets, settled_axes, repair_steps, fill_steps, binding and its use,
 * and the candidates (ac_search_candidates). */
ac_status ac_search_discretize(const ac_discretize_inputs *in, ac_discrete_choice *out, ac_search_report *report);

/* The most steps the repair or the fill can take: each axis moves one way only, at most
 * to its last value. */
int ac_search_max_steps(const ac_cost_model *cost);

/* The repair and the fill of one choice (*now: its prediction, updated); steps (NULL: not
 * recorded, else room for ac_search_max_steps + 1) receive the steps, *n_steps their
 * count. A step the space cannot build is skipped; the fill takes only moves that change
 * the architecture (a step that alone changes nothing goes with one more), and needs *now
 * to meet the targets. */
ac_status ac_search_repair(const ac_discretize_inputs *in, int *choice, ac_cost_prediction *now, ac_axis_step *steps,
                           int *n_steps);
ac_status ac_search_fill(const ac_discretize_inputs *in, int *choice, ac_cost_prediction *now, ac_axis_step *steps,
                         int *n_steps);

/* Sets report's candidates: the pick (choice, report->chosen its prediction) and the
 * architectures that the most probable choices under logp (per-axis log-probabilities)
 * become once repaired and filled, those that meet the targets, distinct, at most
 * in->max_candidates, in descending log-probability (the pick always among them). */
ac_status ac_search_candidates(const ac_discretize_inputs *in, const double *logp, const int *choice,
                               ac_search_report *report);

/* What identifies a choice's architecture: its hidden size, layer count, and per layer
 * the parent layer it is cut from and every dimension an axis can change (*sig malloc'd,
 * *len ints; two choices give the same architecture when these are equal). Fails when
 * the space cannot build the choice. */
ac_status ac_search_arch_signature(const ac_cost_model *cost, int n_parent_layers, const int *choice, int **sig,
                                   int *len);

/* search.json's fields: targets, predictions, choices, kept layers, repairs, tokens,
 * parameters (a cJSON object, NULL when out of memory). */
struct cJSON;
struct cJSON *ac_search_summary_json(const ac_contract *contract, const ac_cost_model *cost, const int *choice,
                                     const ac_axis_step *repairs, const ac_search_report *r);

/* arch.json (the chosen architecture as a config.json: nemotron_h_puzzle when layers
 * differ) and search.json (targets, predictions, choices, repairs, the fill, the
 * candidates, tokens), and search.png from search.csv when gnuplot is there. */
ac_status ac_search_write_outputs(const char *dir, const ac_contract *contract, const ac_cost_model *cost,
                                  const ac_discrete_choice *d, int fill, const ac_search_report *report);

#endif
