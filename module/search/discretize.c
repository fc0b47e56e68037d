/* From router distributions to one architecture: the argmax of every axis, then a
 * greedy repair that steps axes down until the cost model says every target is met,
 * choosing each time the step with the most excess saved per importance lost. */
#include "search/search_loop.h"

#include <math.h>
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
