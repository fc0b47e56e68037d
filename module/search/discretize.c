/* From router distributions to one architecture: the argmax of every axis, the axes
 * left undecided settled on the most probable combination that meets the targets, a
 * greedy repair that steps axes down until the cost model says every target is met,
 * choosing each time the step with the most excess saved per importance lost, then a
 * greedy fill that steps axes up while every target stays met, choosing each time the
 * step with the most importance regained per share of a target's remaining room used.
 *
 * Why a greedy fill rather than an exact solve over the per-layer choices for each value
 * of the global axes: the targets are several at once (latency, memory, throughput: a
 * knapsack in as many dimensions), and memory holds the widest layer's scratch and a
 * residual that depends on the hidden size, so only the cost model's own prediction
 * judges a choice exactly. The fill asks it about every step, treats every axis alike
 * (whatever axes the space has), and ends where no single step up still fits, so the
 * binding target is used to within the cost of the smallest step left.
 *
 * Why importance, not the routers' log-probability, ranks the fill's steps: from the
 * argmax every step up lowers the log-probability, so a ratio of it to the cost used
 * would favour the largest steps, and at the final temperature log-probability gaps are
 * logit gaps divided by that temperature, not a value per unit of cost. The routers'
 * preferences enter through the candidates (candidates.c), which re-ranking judges by
 * real KD. */
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

/* The share of n scores a step from `from` to `to` kept drops. */
static double share_dropped(const float *scores, int n, int from, int to)
{
    double all = total(scores, n);
    return all > 0 ? span(scores, from, to) / all : 0;
}

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

/* Layer l's share of the model: its share of the depth scores (1 - cos), even shares
 * when they are all zero. */
static double layer_share(const ac_importance *imp, int n_layers, int l)
{
    double all = total(imp->depth, n_layers);
    return all > 0 ? imp->depth[l] / all : 1.0 / n_layers;
}

/* A MoE layer's routed experts' share of it against its shared expert's: their widths
 * per token. */
static double routed_share(const ac_block_dims *b)
{
    double routed = (double)b->top_k * b->expert_ffn, width = routed + b->shared_ffn;
    return width > 0 ? routed / width : 1;
}

/* The share of the model's importance the part an axis cuts loses at value index c (in
 * layer `layer`, for a per-layer or global Mamba axis) against its largest value. The
 * hidden axis acts on every layer: its share is that of the hidden scores dropped. Layer
 * l holds the share w_l of the model (layer_share), and a cut inside it loses w_l x the
 * share of that part's scores dropped x the part's share of the layer (routed_share).
 * Layer removal is choice_lost's. */
static double width_lost(const ac_cost_axis *a, const ac_arch *parent, const ac_importance *imp, int layer, int c)
{
    int vf = a->values[0], vt = a->values[c];
    if (a->kind == AC_AXIS_HIDDEN)
        return share_dropped(imp->hidden_channels, parent->hidden, vf, vt);
    const ac_block_dims *b = &parent->layers[layer];
    double w = layer_share(imp, parent->n_layers, layer), routed = routed_share(b);
    switch (a->kind) {
    case AC_AXIS_MAMBA_HEADS: return imp->mamba_heads[layer] ? w * mamba_loss(b, imp->mamba_heads[layer], vf, vt) : 0;
    case AC_AXIS_EXPERTS: return w * routed * share_dropped(imp->experts[layer], b->n_experts, vf, vt);
    case AC_AXIS_ROUTED_FFN: return w * routed * share_dropped(imp->ffn[layer], b->expert_ffn, vf, vt);
    case AC_AXIS_SHARED_FFN:
        return imp->shared_ffn[layer] ? w * (1 - routed) * share_dropped(imp->shared_ffn[layer], b->shared_ffn, vf, vt) : 0;
    default: return 0;
    }
}

static int meets(const ac_budget_targets *t, const ac_cost_prediction *p) { return ac_search_excess(t, p) == 0.0; }

/* ---- how much of the targets a choice uses ---- */

enum { N_TARGETS = 3 };
static const char *const target_names[N_TARGETS] = {"latency", "memory", "throughput"};

/* u[k]: the share of target k that p uses (predicted / planned; planned / predicted for
 * throughput, so above 1 is a miss for each), 0 where there is no such target. */
static void uses(const ac_budget_targets *t, const ac_cost_prediction *p, double u[N_TARGETS])
{
    u[0] = t->latency_ms > 0 ? p->latency_ms / t->latency_ms : 0;
    u[1] = t->memory_bytes > 0 ? p->memory_bytes / t->memory_bytes : 0;
    u[2] = t->throughput_tok_s <= 0 ? 0 : p->throughput_tok_s > 0 ? t->throughput_tok_s / p->throughput_tok_s : INFINITY;
}

/* The largest share of a target's remaining room (1 - use) that going from uses u to p
 * takes: a target nearly used up makes every step that adds to it dear. */
static double room_used(const ac_budget_targets *t, const double u[N_TARGETS], const ac_cost_prediction *p)
{
    double v[N_TARGETS], worst = 0;
    uses(t, p, v);
    for (int k = 0; k < N_TARGETS; k++)
        if (u[k] > 0)
            worst = fmax(worst, (v[k] - u[k]) / fmax(1 - u[k], 1e-9));
    return worst;
}

/* The index of the target p uses most of, -1 when there is none. */
static int binding_target(const ac_budget_targets *t, const ac_cost_prediction *p, double *use)
{
    double u[N_TARGETS];
    uses(t, p, u);
    int k = -1;
    for (int i = 0; i < N_TARGETS; i++)
        if (u[i] > 0 && (k < 0 || u[i] > u[k]))
            k = i;
    *use = k >= 0 ? u[k] : 0;
    return k;
}

/* ---- the architecture a choice gives ---- */

enum { SIG_HEAD = 2, SIG_PER_LAYER = 8 };

ac_status ac_search_arch_signature(const ac_cost_model *cost, int n_parent_layers, const int *choice, int **sig,
                                   int *len)
{
    ac_arch arch;
    int *layer = malloc(((size_t)n_parent_layers + 1) * sizeof *layer);
    *sig = NULL;
    ac_status st = layer ? ac_cost_choice_arch(cost, choice, &arch, layer) : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    if (st == AC_OK) {
        *len = SIG_HEAD + SIG_PER_LAYER * arch.n_layers;
        *sig = malloc((size_t)*len * sizeof **sig);
        if (*sig) {
            (*sig)[0] = arch.hidden;
            (*sig)[1] = arch.n_layers;
            for (int i = 0; i < arch.n_layers; i++) {
                const ac_block_dims *b = &arch.layers[i];
                int row[SIG_PER_LAYER] = {layer[i], (int)b->kind, b->mamba_heads, b->n_experts, b->top_k, b->expert_ffn,
                                          b->shared_ffn, b->ffn};
                memcpy(*sig + SIG_HEAD + SIG_PER_LAYER * i, row, sizeof row);
            }
        } else {
            st = ac_fail(AC_ERR_NOMEM, "search: out of memory");
        }
        ac_arch_free(&arch);
    }
    free(layer);
    return st;
}

int ac_search_max_steps(const ac_cost_model *cost)
{
    int n = 0;
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++)
        n += ac_cost_model_axis(cost, a)->count - 1;
    return n;
}

/* ---- settling the undecided axes ---- */

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
static int collect_undecided(const ac_cost_model *cost, const double *logp, const int *choice, undecided_axis *out)
{
    int n = 0, n_axes = ac_cost_model_axis_count(cost);
    undecided_axis *all = malloc(((size_t)n_axes + 1) * sizeof *all);
    if (!all)
        return 0; /* out of memory: the argmax stands */
    for (int a = 0; a < n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        const double *lp = logp + ax->offset;
        if (exp(lp[choice[a]]) >= AC_SEARCH_DECIDED)
            continue;
        int alt = -1;
        for (int i = 0; i < ax->count; i++)
            if (i != choice[a] && (alt < 0 || lp[i] > lp[alt]))
                alt = i;
        if (alt >= 0)
            all[n++] = (undecided_axis){a, alt, lp[alt] - lp[choice[a]]};
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
static ac_status settle_undecided(const ac_cost_model *cost, const double *logp, const ac_budget_targets *targets,
                                  int *choice, ac_cost_prediction *now, int *settled)
{
    undecided_axis u[AC_SEARCH_MAX_UNDECIDED];
    int n = collect_undecided(cost, logp, choice, u), best_mask = -1;
    double best_slack = INFINITY, best_logp = -INFINITY;
    *settled = 0;
    for (int mask = 0; mask < (1 << n); mask++) {
        double gain = 0;
        for (int i = 0; i < n; i++)
            if (mask >> i & 1)
                gain += u[i].gain;
        ac_cost_prediction p;
        if (predict_combination(cost, choice, u, n, mask, &p) != AC_OK) { /* the space cannot build it */
            ac_clear_error();
            continue;
        }
        double s = slack(targets, &p);
        if (meets(targets, &p) && (s < best_slack || (s == best_slack && gain > best_logp))) {
            best_slack = s;
            best_logp = gain;
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

/* ---- the importance a choice loses ---- */

/* Whether parent layer l is among those of a signature. */
static int present(const int *sig, int len, int l)
{
    for (int i = SIG_HEAD; i < len; i += SIG_PER_LAYER)
        if (sig[i] == l)
            return 1;
    return 0;
}

/* The share of the model's importance `choice` (its signature sig) loses, on one scale
 * for every axis: the hidden axis's share, plus per layer w_l when the choice removes it,
 * else the cuts inside it (width_lost), at most w_l. A step's importance is the change
 * of this: removing a layer loses what is left of it, a step inside a layer never loses
 * more than removing it, and a layer is weighed against the hidden axis, not against
 * its own FFN as a ratio of each part to its own total would. */
static double choice_lost(const ac_discretize_inputs *in, const int *choice, const int *sig, int len)
{
    const ac_arch *pa = in->parent;
    int n_axes = ac_cost_model_axis_count(in->cost);
    double lost = 0;
    for (int a = 0; a < n_axes; a++)
        if (ac_cost_model_axis(in->cost, a)->kind == AC_AXIS_HIDDEN)
            lost += width_lost(ac_cost_model_axis(in->cost, a), pa, in->imp, -1, choice[a]);
    for (int l = 0; l < pa->n_layers; l++) {
        double w = layer_share(in->imp, pa->n_layers, l), within = 0;
        if (!present(sig, len, l)) {
            lost += w;
            continue;
        }
        for (int a = 0; a < n_axes; a++) {
            const ac_cost_axis *ax = ac_cost_model_axis(in->cost, a);
            int global_mamba = ax->layer < 0 && ax->kind == AC_AXIS_MAMBA_HEADS && pa->layers[l].kind == AC_BLOCK_MAMBA;
            if (ax->kind != AC_AXIS_HIDDEN && (ax->layer == l || global_mamba))
                within += width_lost(ax, pa, in->imp, l, choice[a]);
        }
        lost += fmin(within, w);
    }
    return lost;
}

/* The signature of `choice` (*sig malloc'd) and the importance it loses. */
static ac_status judge(const ac_discretize_inputs *in, const int *choice, int **sig, int *len, double *lost)
{
    ac_status st = ac_search_arch_signature(in->cost, in->parent->n_layers, choice, sig, len);
    if (st == AC_OK)
        *lost = choice_lost(in, choice, *sig, *len);
    return st;
}

/* ---- the repair ---- */

/* The repair's best step down from `choice` (losing lost_now; best->axis -1 when no step
 * lowers the excess): the most excess saved per importance lost. */
static ac_status best_repair_step(const ac_discretize_inputs *in, int *choice, const ac_cost_prediction *now,
                                  double lost_now, ac_axis_step *best, ac_cost_prediction *best_p)
{
    double excess = ac_search_excess(in->targets, now), best_ratio = -1;
    *best = (ac_axis_step){-1, 0, 0, 0, 0};
    ac_status st = AC_OK;
    for (int a = 0; st == AC_OK && a < ac_cost_model_axis_count(in->cost); a++) {
        int from = choice[a], *sig, len;
        if (from + 1 >= ac_cost_model_axis(in->cost, a)->count)
            continue;
        choice[a] = from + 1;
        ac_cost_prediction p;
        double lost = 0;
        /* a step the space cannot build (a layer that may not be removed) is no option */
        int buildable = ac_cost_predict(in->cost, choice, &p) == AC_OK;
        double saved = buildable ? excess - ac_search_excess(in->targets, &p) : 0;
        if (buildable && saved > 0 && (st = judge(in, choice, &sig, &len, &lost)) == AC_OK)
            free(sig);
        choice[a] = from;
        if (!buildable)
            ac_clear_error();
        if (!buildable || !(saved > 0) || st != AC_OK)
            continue;
        double dl = fmax(lost - lost_now, 0), ratio = saved / (dl + 1e-9);
        if (ratio > best_ratio) {
            best_ratio = ratio;
            *best = (ac_axis_step){a, from, from + 1, saved, dl};
            *best_p = p;
        }
    }
    return st;
}

ac_status ac_search_repair(const ac_discretize_inputs *in, int *choice, ac_cost_prediction *now, ac_axis_step *steps,
                           int *n_steps)
{
    int max = ac_search_max_steps(in->cost), *sig, len;
    double lost;
    *n_steps = 0;
    ac_status st = judge(in, choice, &sig, &len, &lost);
    if (st != AC_OK)
        return st;
    free(sig);
    while (st == AC_OK && !meets(in->targets, now) && *n_steps < max) {
        ac_axis_step best;
        ac_cost_prediction best_p;
        st = best_repair_step(in, choice, now, lost, &best, &best_p);
        if (st != AC_OK || best.axis < 0)
            break;
        choice[best.axis] = best.to;
        *now = best_p;
        lost += best.importance;
        if (steps)
            steps[*n_steps] = best;
        (*n_steps)++;
    }
    return st;
}

/* ---- the fill ---- */

/* The search for the fill's next move from `choice`: one step up an axis, or, where that
 * step alone changes nothing (a removed layer's keep axis while its widths are 0), that
 * step and one more. */
typedef struct {
    const ac_discretize_inputs *in;
    const int *choice, *sig;
    int len;
    double lost, u[N_TARGETS];
    double ratio;             /* the best move's */
    int n;                    /* its steps (0: none found) */
    ac_axis_step steps[2];
    ac_cost_prediction p;
    double lost_after;
} fill_search;

/* Judges `trial`: choice moved up axis a, then up axis b when b >= 0. A move that keeps
 * every target met and changes the architecture competes on importance regained per
 * share of a target's room used (a move no target feels first; among moves that regain
 * nothing, the cheapest); *noop: it gives choice's architecture. */
static ac_status consider(fill_search *fs, const int *trial, int a, int b, int *noop)
{
    *noop = 0;
    ac_cost_prediction p;
    if (ac_cost_predict(fs->in->cost, trial, &p) != AC_OK) { /* the space cannot build it */
        ac_clear_error();
        return AC_OK;
    }
    if (!meets(fs->in->targets, &p))
        return AC_OK;
    int *sig, len;
    double lost;
    ac_status st = judge(fs->in, trial, &sig, &len, &lost);
    if (st != AC_OK)
        return st;
    *noop = len == fs->len && !memcmp(sig, fs->sig, (size_t)len * sizeof *sig);
    free(sig);
    if (*noop)
        return AC_OK;
    double used = room_used(fs->in->targets, fs->u, &p), regained = fmax(fs->lost - lost, 0);
    double ratio = (regained + 1e-9) / fmax(used, 1e-12);
    if (ratio > fs->ratio) {
        fs->ratio = ratio;
        fs->n = b < 0 ? 1 : 2;
        /* a step that changes nothing alone is listed with nothing used or regained */
        fs->steps[0] = (ac_axis_step){a, fs->choice[a], fs->choice[a] - 1, b < 0 ? used : 0, b < 0 ? regained : 0};
        if (b >= 0)
            fs->steps[1] = (ac_axis_step){b, trial[b] + 1, trial[b], used, regained};
        fs->p = p;
        fs->lost_after = lost;
    }
    return AC_OK;
}

static ac_status best_fill_move(fill_search *fs, int *trial)
{
    int n_axes = ac_cost_model_axis_count(fs->in->cost), noop;
    ac_status st = AC_OK;
    for (int a = 0; st == AC_OK && a < n_axes; a++) {
        if (fs->choice[a] == 0)
            continue;
        memcpy(trial, fs->choice, (size_t)n_axes * sizeof *trial);
        trial[a]--;
        st = consider(fs, trial, a, -1, &noop);
        for (int b = 0; st == AC_OK && noop && b < n_axes; b++) {
            int ignored;
            if (trial[b] == 0)
                continue;
            trial[b]--;
            st = consider(fs, trial, a, b, &ignored);
            trial[b]++;
        }
    }
    return st;
}

ac_status ac_search_fill(const ac_discretize_inputs *in, int *choice, ac_cost_prediction *now, ac_axis_step *steps,
                         int *n_steps)
{
    int max = ac_search_max_steps(in->cost);
    int *trial = malloc(((size_t)ac_cost_model_axis_count(in->cost) + 1) * sizeof *trial), *sig = NULL;
    fill_search fs = {.in = in, .choice = choice};
    ac_status st = trial ? judge(in, choice, &sig, &fs.len, &fs.lost) : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    *n_steps = 0;
    while (st == AC_OK && meets(in->targets, now) && *n_steps + 2 <= max + 1) {
        fs.sig = sig;
        fs.ratio = -1;
        fs.n = 0;
        uses(in->targets, now, fs.u);
        st = best_fill_move(&fs, trial);
        if (st != AC_OK || fs.n == 0)
            break;
        for (int k = 0; k < fs.n; k++) {
            choice[fs.steps[k].axis] = fs.steps[k].to;
            if (steps)
                steps[*n_steps] = fs.steps[k];
            (*n_steps)++;
        }
        *now = fs.p;
        free(sig);
        st = judge(in, choice, &sig, &fs.len, &fs.lost);
    }
    free(sig);
    free(trial);
    return st;
}

/* ---- the whole ---- */

/* logp = log softmax(logits / temperature), axis by axis. */
static void log_probs(const ac_cost_model *cost, const float *logits, double t, double *logp)
{
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        const float *z = logits + ax->offset;
        double top = -INFINITY, sum = 0;
        for (int i = 0; i < ax->count; i++)
            top = fmax(top, (double)z[i] / t);
        for (int i = 0; i < ax->count; i++)
            sum += exp((double)z[i] / t - top);
        for (int i = 0; i < ax->count; i++)
            logp[ax->offset + i] = (double)z[i] / t - top - log(sum);
    }
}

/* The most probable value of each axis (the first on a tie). */
static void argmax(const ac_cost_model *cost, const double *logp, int *choice)
{
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        choice[a] = 0;
        for (int i = 1; i < ax->count; i++)
            if (logp[ax->offset + i] > logp[ax->offset + choice[a]])
                choice[a] = i;
    }
}

void ac_discrete_choice_free(ac_discrete_choice *d)
{
    free(d->choice);
    free(d->unfilled);
    free(d->repairs);
    free(d->fills);
    memset(d, 0, sizeof *d);
}

static ac_status alloc_choice(const ac_cost_model *cost, ac_discrete_choice *d)
{
    size_t n_axes = (size_t)ac_cost_model_axis_count(cost) + 1, steps = (size_t)ac_search_max_steps(cost) + 2;
    d->choice = calloc(n_axes, sizeof *d->choice);
    d->unfilled = calloc(n_axes, sizeof *d->unfilled);
    d->repairs = calloc(steps, sizeof *d->repairs);
    d->fills = calloc(steps, sizeof *d->fills);
    if (d->choice && d->unfilled && d->repairs && d->fills)
        return AC_OK;
    ac_discrete_choice_free(d);
    return ac_fail(AC_ERR_NOMEM, "search: out of memory");
}

/* The report's chosen, meets, binding target and its use before and after the fill. */
static void report_use(const ac_budget_targets *t, const ac_cost_prediction *now, ac_search_report *report)
{
    report->chosen = *now;
    report->meets = meets(t, now);
    int k = binding_target(t, now, &report->binding_use);
    report->binding = k >= 0 ? target_names[k] : "";
    double u[N_TARGETS];
    uses(t, &report->unfilled, u);
    report->unfilled_use = k >= 0 ? u[k] : 0;
}

ac_status ac_search_discretize(const ac_discretize_inputs *in, ac_discrete_choice *out, ac_search_report *report)
{
    memset(out, 0, sizeof *out);
    if (!(in->temperature > 0) || in->max_candidates < 0)
        return ac_fail(AC_ERR_INVALID, "search: discretisation needs a positive temperature (got %g) and a "
                                       "number of candidates >= 0 (got %d)", (double)in->temperature,
                       in->max_candidates);
    const ac_cost_model *cost = in->cost;
    double *logp = malloc(((size_t)ac_cost_model_prob_count(cost) + 1) * sizeof *logp);
    ac_status st = logp ? alloc_choice(cost, out) : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    if (st != AC_OK) {
        free(logp);
        return st;
    }
    log_probs(cost, in->logits, in->temperature, logp);
    argmax(cost, logp, out->choice);
    ac_cost_prediction now;
    st = ac_cost_predict(cost, out->choice, &now);
    if (st == AC_OK)
        st = settle_undecided(cost, logp, in->targets, out->choice, &now, &report->settled_axes);
    if (st == AC_OK)
        st = ac_search_repair(in, out->choice, &now, out->repairs, &report->repair_steps);
    memcpy(out->unfilled, out->choice, (size_t)ac_cost_model_axis_count(cost) * sizeof *out->choice);
    report->unfilled = now;
    report->fill_steps = 0;
    if (st == AC_OK && in->fill)
        st = ac_search_fill(in, out->choice, &now, out->fills, &report->fill_steps);
    if (st == AC_OK) {
        report_use(in->targets, &now, report);
        st = ac_cost_choice_arch(cost, out->choice, &report->arch, NULL);
    }
    if (st == AC_OK)
        st = ac_search_candidates(in, logp, out->choice, report);
    free(logp);
    return st;
}
