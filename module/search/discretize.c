/* From router distributions to one architecture: the argmax of every axis, the axes
 * left undecided settled on the most probable combination that meets the targets, then
 * a greedy repair that steps axes down until the cost model says every target is met,
 * choosing each time the step with the most excess saved per importance lost. */
#include "search/search_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sum of v[from .. to) (the channels a width step from `from` down to `to` drops). */
static double span(const float *v, int from, int to)
{
    double s = 0;
    for (int i = to; i < from; i++)
        s += v[i];
    return s;
}

static double total(const float *v, int n) { return span(v, n, 0); }

/* Heads kept per group at value v (within-group rank < ceil(v / G)). */
static int heads_per_group(int v, int groups) { return (v + groups - 1) / groups; }

/* The score fraction a Mamba layer loses going from `from` to `to` heads. */
static double mamba_loss(const ac_block_dims *b, const float *scores, int from, int to)
{
    int G = b->mamba_groups, per = b->mamba_heads / G, hi = heads_per_group(from, G), lo = heads_per_group(to, G);
    double lost = 0;
    for (int g = 0; g < G; g++)
        lost += span(scores + g * per, hi < per ? hi : per, lo < per ? lo : per);
    double all = total(scores, b->mamba_heads);
    return all > 0 ? lost / all : 0;
}

/* The fraction of the axis's importance that stepping from value index `from` to `to`
 * drops; layer removal (keep 1 -> 0) costs the layer's share of the depth scores. */
static double importance_lost(const ac_cost_axis *a, const ac_arch *parent, const ac_importance *imp, int from, int to)
{
    int vf = a->values[from], vt = a->values[to], l = a->layer;
    switch (a->kind) {
    case AC_AXIS_HIDDEN: return span(imp->hidden_channels, vf, vt) / fmax(total(imp->hidden_channels, parent->hidden), 1e-30);
    case AC_AXIS_MAMBA_HEADS: {
        double lost = 0;
        int n = 0;
        for (int i = 0; i < parent->n_layers; i++)
            if ((l < 0 || i == l) && imp->mamba_heads[i]) {
                lost += mamba_loss(&parent->layers[i], imp->mamba_heads[i], vf, vt);
                n++;
            }
        return n ? lost / n : 0;
    }
    case AC_AXIS_EXPERTS: return span(imp->experts[l], vf, vt) / fmax(total(imp->experts[l], parent->layers[l].n_experts), 1e-30);
    case AC_AXIS_ROUTED_FFN: return span(imp->ffn[l], vf, vt) / fmax(total(imp->ffn[l], parent->layers[l].expert_ffn), 1e-30);
    case AC_AXIS_SHARED_FFN:
        return imp->shared_ffn[l] ? span(imp->shared_ffn[l], vf, vt) / fmax(total(imp->shared_ffn[l], parent->layers[l].shared_ffn), 1e-30) : 0;
    case AC_AXIS_KEEP: return imp->depth[l] / fmax(total(imp->depth, parent->n_layers), 1e-30);
    }
    return 0;
}

static int meets(const ac_budget_targets *t, const ac_cost_prediction *p) { return ac_search_excess(t, p) == 0.0; }

/* Settling the axes the routers left undecided: each such axis (most probable value
 * below AC_SEARCH_DECIDED) may take its best or second-best value. A mixture that sits
 * on the target is the relaxation's optimum, and its argmax can miss the target or
 * overshoot it by a whole step of a global axis; so of those combinations (at most
 * 2^AC_SEARCH_MAX_UNDECIDED, the closest calls first) the one the cost model says meets
 * every target with the least slack (the most model for the budget) replaces the
 * argmax, the more probable on a tie. */
enum { AC_SEARCH_MAX_UNDECIDED = 12 };
#define AC_SEARCH_DECIDED 0.9

typedef struct {
    int axis, alt;          /* the axis and its second most probable value */
    double gain;            /* log p(alt) - log p(best) */
} undecided_axis;

static int by_margin(const void *a, const void *b)
{
    double x = ((const undecided_axis *)a)->gain, y = ((const undecided_axis *)b)->gain;
    return (x < y) - (x > y); /* the closest calls (largest gain) first */
}

/* The undecided axes, the closest calls first, at most AC_SEARCH_MAX_UNDECIDED. */
static int collect_undecided(const ac_cost_model *cost, const double *probs, const int *choice, undecided_axis *out)
{
    int n = 0, n_axes = ac_cost_model_axis_count(cost);
    undecided_axis *all = malloc(((size_t)n_axes + 1) * sizeof *all);
    if (!all)
        return 0; /* out of memory: the argmax stands */
    for (int a = 0; a < n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        const double *p = probs + ax->offset;
        if (p[choice[a]] >= AC_SEARCH_DECIDED)
            continue;
        int alt = -1;
        for (int i = 0; i < ax->count; i++)
            if (i != choice[a] && (alt < 0 || p[i] > p[alt]))
                alt = i;
        if (alt >= 0 && p[alt] > 0)
            all[n++] = (undecided_axis){a, alt, log(p[alt]) - log(p[choice[a]])};
    }
    qsort(all, (size_t)n, sizeof *all, by_margin);
    if (n > AC_SEARCH_MAX_UNDECIDED)
        n = AC_SEARCH_MAX_UNDECIDED;
    memcpy(out, all, (size_t)n * sizeof *out);
    free(all);
    return n;
}

/* Sum over the targets of how far under them p stays, relative (0: exactly on them). */
static double slack(const ac_budget_targets *t, const ac_cost_prediction *p)
{
    double s = 0;
    if (t->latency_ms > 0)
        s += fmax(0.0, (t->latency_ms - p->latency_ms) / t->latency_ms);
    if (t->memory_bytes > 0)
        s += fmax(0.0, (t->memory_bytes - p->memory_bytes) / t->memory_bytes);
    if (t->throughput_tok_s > 0)
        s += fmax(0.0, (p->throughput_tok_s - t->throughput_tok_s) / t->throughput_tok_s);
    return s;
}

/* The prediction of `choice` with the axes of `mask` at their second value. */
static ac_status predict_combination(const ac_cost_model *cost, int *choice, const undecided_axis *u, int n, int mask,
                                     ac_cost_prediction *p)
{
    int saved[AC_SEARCH_MAX_UNDECIDED];
    for (int i = 0; i < n; i++) {
        saved[i] = choice[u[i].axis];
        if (mask >> i & 1)
            choice[u[i].axis] = u[i].alt;
    }
    ac_status st = ac_cost_predict(cost, choice, p);
    for (int i = 0; i < n; i++)
        choice[u[i].axis] = saved[i];
    return st;
}

/* *settled: how many axes took their second value (0: the argmax stands). */
static ac_status settle_undecided(const ac_cost_model *cost, const double *probs, const ac_budget_targets *targets,
                                  int *choice, ac_cost_prediction *now, int *settled)
{
    undecided_axis u[AC_SEARCH_MAX_UNDECIDED];
    int n = collect_undecided(cost, probs, choice, u), best_mask = -1;
    double best_slack = INFINITY, best_logp = -INFINITY;
    *settled = 0;
    for (int mask = 0; mask < (1 << n); mask++) {
        double logp = 0;
        for (int i = 0; i < n; i++)
            if (mask >> i & 1)
                logp += u[i].gain;
        ac_cost_prediction p;
        if (predict_combination(cost, choice, u, n, mask, &p) != AC_OK) { /* the space cannot build it */
            ac_clear_error();
            continue;
        }
        double s = slack(targets, &p);
        if (meets(targets, &p) && (s < best_slack || (s == best_slack && logp > best_logp))) {
            best_slack = s;
            best_logp = logp;
            best_mask = mask;
        }
    }
    if (best_mask <= 0)
        return AC_OK;
    for (int i = 0; i < n; i++)
        if (best_mask >> i & 1) {
            choice[u[i].axis] = u[i].alt;
            (*settled)++;
        }
    return ac_cost_predict(cost, choice, now);
}

ac_status ac_search_discretize(const ac_cost_model *cost, const ac_arch *parent, const double *probs,
                               const ac_importance *imp, const ac_budget_targets *targets, int *choice,
                               ac_repair_step *steps, int max_steps, ac_search_report *report)
{
    int n_axes = ac_cost_model_axis_count(cost);
    for (int a = 0; a < n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        choice[a] = 0;
        for (int i = 1; i < ax->count; i++)
            if (probs[ax->offset + i] > probs[ax->offset + choice[a]])
                choice[a] = i;
    }
    ac_cost_prediction now;
    ac_status st = ac_cost_predict(cost, choice, &now);
    report->settled_axes = 0;
    if (st == AC_OK)
        st = settle_undecided(cost, probs, targets, choice, &now, &report->settled_axes);
    report->repair_steps = 0;
    while (st == AC_OK && !meets(targets, &now) && report->repair_steps < max_steps) {
        double excess = ac_search_excess(targets, &now), best_ratio = -1;
        ac_repair_step best = {-1, 0, 0, 0, 0};
        ac_cost_prediction best_p = now;
        for (int a = 0; a < n_axes; a++) {
            const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
            if (choice[a] + 1 >= ax->count)
                continue;
            int from = choice[a];
            choice[a] = from + 1;
            ac_cost_prediction p;
            /* a step the space cannot build (a layer that may not be removed) is no option */
            ac_status sp = ac_cost_predict(cost, choice, &p);
            choice[a] = from;
            if (sp != AC_OK)
                continue;
            double saved = excess - ac_search_excess(targets, &p);
            if (!(saved > 0))
                continue;
            double lost = importance_lost(ax, parent, imp, from, from + 1);
            double ratio = saved / (lost + 1e-9);
            if (ratio > best_ratio) {
                best_ratio = ratio;
                best = (ac_repair_step){a, from, from + 1, saved, lost};
                best_p = p;
            }
        }
        if (best.axis < 0)
            break;
        choice[best.axis] = best.to;
        now = best_p;
        steps[report->repair_steps++] = best;
    }
    ac_clear_error();
    if (st != AC_OK)
        return st;
    report->chosen = now;
    report->meets = meets(targets, &now);
    return ac_cost_choice_arch(cost, choice, &report->arch, NULL);
}
