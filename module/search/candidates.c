/* Candidates for re-ranking by short KDs: the search's pick and the architectures the
 * most probable choices under the final routers become once repaired and filled like
 * the pick, and the argmax at each other hidden size likewise, those the cost model says
 * meet the planned targets, distinct. Listed as the ranking reads them: the pick, then
 * the most probable of each hidden size not yet listed, then the rest by log-probability.
 * The hidden sizes come first because the routers learn from the frozen parent's
 * zero-shot KD, to which a hidden cut hurts every layer at once while a short KD
 * recovers most of it: the routers' order over-values width, and the ranking's real KDs
 * should see the best shape at each width. The most probable choices are enumerated
 * exactly, best first: each
 * axis's values ranked by probability, a choice is a vector of ranks r, and every r but
 * the argmax (all zero) has one parent, r less one at its last non-zero axis, at least as
 * probable as it; so popping the most probable open vector and opening its children
 * (one more rank at its last non-zero axis or any later one) yields them in order, each
 * once. */
#include "search/search_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The enumeration pops this many choices per candidate asked for: repair and fill bring
 * many of them to the same architecture. */
enum { SEEDS_PER_CANDIDATE = 8 };

typedef struct {
    int *choice; /* canonical (canonicalise) */
    int *sig, sig_len;
    double log_prob;
    ac_cost_prediction predicted;
    int chosen, order; /* order: when it was found, for a stable sort */
} found;

typedef struct {
    const ac_discretize_inputs *in;
    const double *logp;
    int n_axes;
    int *ranked;  /* [axis][AC_AXIS_MAX_VALUES]: value indices by descending probability */
    found *list;
    int n, cap;
} collector;

/* Axis a's values by descending log-probability (the first on a tie). */
static void rank_values(const ac_cost_axis *ax, const double *logp, int *ranked)
{
    for (int i = 0; i < ax->count; i++) {
        int j = i;
        for (; j > 0 && logp[ax->offset + ranked[j - 1]] < logp[ax->offset + i]; j--)
            ranked[j] = ranked[j - 1];
        ranked[j] = i;
    }
}

static int same_sig(const int *a, int na, const int *b, int nb)
{
    return na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
}

/* Moves every axis whose value does not change the architecture (an axis of a removed
 * layer) to its most probable value, so that the log-probability counts only the axes
 * the architecture depends on. */
static ac_status canonicalise(const collector *c, int *choice, const int *sig, int sig_len)
{
    ac_status st = AC_OK;
    for (int a = 0; st == AC_OK && a < c->n_axes; a++) {
        int best = c->ranked[a * AC_AXIS_MAX_VALUES], was = choice[a], *s, len;
        if (was == best)
            continue;
        choice[a] = best;
        st = ac_search_arch_signature(c->in->cost, c->in->parent->n_layers, choice, &s, &len);
        if (st != AC_OK) { /* the space cannot build it: the axis matters */
            ac_clear_error();
            st = AC_OK;
            choice[a] = was;
            continue;
        }
        if (!same_sig(s, len, sig, sig_len))
            choice[a] = was;
        free(s);
    }
    return st;
}

static double log_prob(const collector *c, const int *choice)
{
    double lp = 0;
    for (int a = 0; a < c->n_axes; a++)
        lp += c->logp[ac_cost_model_axis(c->in->cost, a)->offset + choice[a]];
    return lp;
}

/* Adds `choice` (predicted p) unless an architecture already found is the same. */
static ac_status add(collector *c, const int *choice, const ac_cost_prediction *p, int chosen)
{
    int *sig, len;
    ac_status st = ac_search_arch_signature(c->in->cost, c->in->parent->n_layers, choice, &sig, &len);
    if (st != AC_OK)
        return st;
    for (int i = 0; i < c->n; i++)
        if (same_sig(c->list[i].sig, c->list[i].sig_len, sig, len)) {
            free(sig);
            return AC_OK;
        }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        found *grown = realloc(c->list, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(sig);
            return ac_fail(AC_ERR_NOMEM, "search: out of memory");
        }
        c->list = grown;
        c->cap = cap;
    }
    int *copy = malloc((size_t)c->n_axes * sizeof *copy);
    if (!copy) {
        free(sig);
        return ac_fail(AC_ERR_NOMEM, "search: out of memory");
    }
    memcpy(copy, choice, (size_t)c->n_axes * sizeof *choice);
    found *f = &c->list[c->n++];
    *f = (found){copy, sig, len, 0, *p, chosen, c->n};
    st = canonicalise(c, f->choice, sig, len);
    f->log_prob = log_prob(c, f->choice);
    return st;
}

/* The seed `rank` repaired and filled like the pick; added when it meets the targets. */
static ac_status try_seed(collector *c, const int *rank, int *choice)
{
    const ac_discretize_inputs *in = c->in;
    for (int a = 0; a < c->n_axes; a++)
        choice[a] = c->ranked[a * AC_AXIS_MAX_VALUES + rank[a]];
    ac_cost_prediction p;
    int steps;
    if (ac_cost_predict(in->cost, choice, &p) != AC_OK) { /* the space cannot build it */
        ac_clear_error();
        return AC_OK;
    }
    ac_status st = ac_search_repair(in, choice, &p, NULL, &steps);
    if (st == AC_OK && in->fill && ac_search_excess(in->targets, &p) == 0.0)
        st = ac_search_fill(in, choice, &p, NULL, &steps);
    if (st != AC_OK || ac_search_excess(in->targets, &p) > 0.0)
        return st;
    return add(c, choice, &p, 0);
}

/* The open rank vectors of the enumeration: n of them, each n_axes ranks, its
 * log-probability and last non-zero axis; popped ones are marked done. */
typedef struct {
    int *ranks, *last, *done, n, cap;
    double *score;
} frontier;

static void open_vector(frontier *f, const collector *c, const int *ranks, int last)
{
    memcpy(f->ranks + (size_t)f->n * c->n_axes, ranks, (size_t)c->n_axes * sizeof *ranks);
    double s = 0;
    for (int a = 0; a < c->n_axes; a++)
        s += c->logp[ac_cost_model_axis(c->in->cost, a)->offset + c->ranked[a * AC_AXIS_MAX_VALUES + ranks[a]]];
    f->score[f->n] = s;
    f->last[f->n] = last;
    f->done[f->n] = 0;
    f->n++;
}

/* The most probable open vector's index (-1 when none is left). */
static int pop(frontier *f)
{
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (!f->done[i] && (best < 0 || f->score[i] > f->score[best]))
            best = i;
    if (best >= 0)
        f->done[best] = 1;
    return best;
}

static ac_status enumerate(collector *c, int seeds)
{
    frontier f = {0};
    f.cap = seeds * (c->n_axes + 1) + 1;
    f.ranks = calloc((size_t)f.cap * c->n_axes, sizeof *f.ranks);
    f.last = malloc((size_t)f.cap * sizeof *f.last);
    f.done = malloc((size_t)f.cap * sizeof *f.done);
    f.score = malloc((size_t)f.cap * sizeof *f.score);
    int *rank = malloc((size_t)c->n_axes * sizeof *rank), *choice = malloc((size_t)c->n_axes * sizeof *choice);
    ac_status st = f.ranks && f.last && f.done && f.score && rank && choice ? AC_OK
                                                                          : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    if (st == AC_OK)
        open_vector(&f, c, f.ranks, 0); /* the argmax */
    for (int k = 0; st == AC_OK && k < seeds; k++) {
        int i = pop(&f);
        if (i < 0)
            break;
        memcpy(rank, f.ranks + (size_t)i * c->n_axes, (size_t)c->n_axes * sizeof *rank);
        st = try_seed(c, rank, choice);
        for (int a = f.last[i]; st == AC_OK && a < c->n_axes; a++) {
            if (rank[a] + 1 >= ac_cost_model_axis(c->in->cost, a)->count)
                continue;
            rank[a]++;
            open_vector(&f, c, rank, a);
            rank[a]--;
        }
    }
    free(f.ranks);
    free(f.last);
    free(f.done);
    free(f.score);
    free(rank);
    free(choice);
    return st;
}

/* The argmax with the hidden axis at each of its other values, repaired and filled. */
static ac_status try_each_hidden(collector *c, int hidden)
{
    int *rank = calloc((size_t)c->n_axes, sizeof *rank), *choice = malloc((size_t)c->n_axes * sizeof *choice);
    ac_status st = rank && choice ? AC_OK : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    for (int r = 1; st == AC_OK && r < ac_cost_model_axis(c->in->cost, hidden)->count; r++) {
        rank[hidden] = r;
        st = try_seed(c, rank, choice);
    }
    free(rank);
    free(choice);
    return st;
}

static int hidden_axis(const ac_cost_model *cost)
{
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++)
        if (ac_cost_model_axis(cost, a)->kind == AC_AXIS_HIDDEN)
            return a;
    return -1;
}

/* order[0 .. c->n): the pick, then the first (most probable) of each hidden value not
 * yet listed, then the others, in the list's (log-probability) order. */
static void reading_order(const collector *c, int hidden, int *order)
{
    int n = 0;
    for (int i = 0; i < c->n; i++)
        if (c->list[i].chosen)
            order[n++] = i;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->n; i++) {
            int listed = 0, seen = 0;
            for (int j = 0; j < n; j++) {
                listed |= order[j] == i;
                seen |= hidden >= 0 && c->list[order[j]].choice[hidden] == c->list[i].choice[hidden];
            }
            if (!listed && (pass == 1 || !seen))
                order[n++] = i;
        }
}

static int by_log_prob(const void *a, const void *b)
{
    const found *x = a, *y = b;
    if (x->log_prob != y->log_prob)
        return x->log_prob > y->log_prob ? -1 : 1;
    return x->order - y->order;
}

/* The first k of the sorted list in reading order into the report. */
static ac_status to_report(const collector *c, int k, ac_search_report *report)
{
    int n = c->n < k ? c->n : k;
    int *order = malloc(((size_t)c->n + 1) * sizeof *order);
    report->candidates = calloc((size_t)n + 1, sizeof *report->candidates);
    if (!report->candidates || !order) {
        free(order);
        return ac_fail(AC_ERR_NOMEM, "search: out of memory");
    }
    reading_order(c, hidden_axis(c->in->cost), order);
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < n; i++) {
        const found *f = &c->list[order[i]];
        ac_search_candidate *out = &report->candidates[i];
        out->parent_layers = malloc(((size_t)c->in->parent->n_layers + 1) * sizeof *out->parent_layers);
        st = out->parent_layers ? ac_cost_choice_arch(c->in->cost, f->choice, &out->arch, out->parent_layers)
                                : ac_fail(AC_ERR_NOMEM, "search: out of memory");
        out->predicted = f->predicted;
        out->log_prob = f->log_prob;
        out->chosen = f->chosen;
        report->n_candidates = i + 1;
    }
    free(order);
    return st;
}

ac_status ac_search_candidates(const ac_discretize_inputs *in, const double *logp, const int *choice,
                               ac_search_report *report)
{
    report->n_candidates = 0;
    report->candidates = NULL;
    if (in->max_candidates <= 0)
        return AC_OK;
    collector c = {in, logp, ac_cost_model_axis_count(in->cost), NULL, NULL, 0, 0};
    c.ranked = malloc(((size_t)c.n_axes + 1) * AC_AXIS_MAX_VALUES * sizeof *c.ranked);
    ac_status st = c.ranked ? AC_OK : ac_fail(AC_ERR_NOMEM, "search: out of memory");
    for (int a = 0; st == AC_OK && a < c.n_axes; a++)
        rank_values(ac_cost_model_axis(in->cost, a), logp, c.ranked + a * AC_AXIS_MAX_VALUES);
    if (st == AC_OK && report->meets)
        st = add(&c, choice, &report->chosen, 1);
    if (st == AC_OK)
        st = enumerate(&c, SEEDS_PER_CANDIDATE * in->max_candidates);
    if (st == AC_OK && hidden_axis(in->cost) >= 0)
        st = try_each_hidden(&c, hidden_axis(in->cost));
    if (st == AC_OK) {
        if (c.n > 1) /* none found: no list to sort */
            qsort(c.list, (size_t)c.n, sizeof *c.list, by_log_prob);
        st = to_report(&c, in->max_candidates, report);
    }
    for (int i = 0; i < c.n; i++) {
        free(c.list[i].choice);
        free(c.list[i].sig);
    }
    free(c.list);
    free(c.ranked);
    return st;
}

void ac_search_report_free(ac_search_report *r)
{
    ac_arch_free(&r->arch);
    for (int i = 0; i < r->n_candidates; i++) {
        ac_arch_free(&r->candidates[i].arch);
        free(r->candidates[i].parent_layers);
    }
    free(r->candidates);
    r->candidates = NULL;
    r->n_candidates = 0;
}
