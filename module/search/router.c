/* Routers: one categorical distribution per axis of the cost model, its probabilities
 * turned into soft masks over the (reordered) parent. A width axis's mask is the
 * probability-weighted sum of its nested prefix masks, built with one suffix sum over
 * the channels (a value's probability lands in the bucket of its kept count); its
 * gradient with respect to the probabilities is the prefix sum of the mask gradient read
 * at each value's kept count. Mamba heads are prefixes within each group; keep axes are
 * layer gates. */
#include "autocompress/search.h"

#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/block.h"

/* Where one axis's probabilities go: a mask of dim = groups x per channels, channel
 * g * per + c kept by a value whose kept count per group exceeds c. */
typedef struct {
    int axis;
    float *mask, *grad; /* into the routers' buffers */
    int groups, per;
} mask_target;

struct ac_routers {
    int n_axes, n_probs, n_layers;
    ac_cost_axis *axes;
    int *gate_layer;        /* [n_axes]: the layer a keep axis gates, -1 otherwise */
    int *first_target;      /* [n_axes + 1]: the axis's targets are first_target[a] .. [a + 1] - 1 */
    mask_target *targets;
    int n_targets;
    int max_per;
    float *logits;
    float *mask_buf, *grad_buf;
    size_t mask_floats;
    float *gate, *gate_grad; /* [n_layers], NULL when no axis gates a layer */
    float *hidden_mask, *hidden_grad;
    float **mask_ptr[AC_LAYER_AXES], **grad_ptr[AC_LAYER_AXES]; /* per layer axis, per layer */
    double *work;           /* [2 * (max_per + 1)] */
    ac_masks masks;
    ac_mask_grads grads;
};

/* Channels (per group) a value keeps: ceil(v / groups), at most per. */
static int kept(int v, int groups, int per)
{
    if (v <= 0)
        return 0;
    int k = (v + groups - 1) / groups;
    return k < per ? k : per;
}

/* The mask slot (the layer axis), group count and width an axis has on layer l; 0 when
 * the axis has no mask there (a kind the axis does not narrow). */
static int axis_shape(const ac_cost_axis *a, const ac_block_dims *b, int *slot, int *groups, int *dim)
{
    const ac_block_ops *ops = ac_block(b);
    int axis = ops->cost_axis(b, a->kind, groups);
    if (axis < 0)
        return 0;
    *slot = axis;
    *dim = ops->axis_length(b, (ac_layer_axis)axis);
    return 1;
}

/* A mask every value of the axis leaves at one (or one of no channels) is no mask. */
static int is_constant(const ac_cost_axis *a, int groups, int per)
{
    if (per <= 0)
        return 1;
    for (int i = 0; i < a->count; i++)
        if (kept(a->values[i], groups, per) != per)
            return 0;
    return 1;
}

void ac_routers_free(ac_routers *r)
{
    if (!r)
        return;
    free(r->axes);
    free(r->gate_layer);
    free(r->first_target);
    free(r->targets);
    free(r->logits);
    free(r->mask_buf);
    free(r->grad_buf);
    free(r->gate);
    free(r->gate_grad);
    for (int s = 0; s < AC_LAYER_AXES; s++) {
        free(r->mask_ptr[s]);
        free(r->grad_ptr[s]);
    }
    free(r->work);
    free(r);
}

/* Adds the target of axis a on parent layer l (l = -1: the hidden mask); with count_only
 * it only sizes the buffers. */
static ac_status add_target(ac_routers *r, int a, int groups, int dim, float **mask_slot, float **grad_slot,
                            int count_only)
{
    const ac_cost_axis *x = &r->axes[a];
    if (dim % groups)
        return ac_fail(AC_ERR_INVALID, "routers: %d channels do not split into %d groups (axis %d, %s)", dim, groups,
                       a, ac_axis_kind_name(x->kind));
    int per = dim / groups;
    if (is_constant(x, groups, per))
        return AC_OK;
    if (count_only) {
        r->mask_floats += (size_t)dim;
        r->n_targets++;
        if (per > r->max_per)
            r->max_per = per;
        return AC_OK;
    }
    if (*mask_slot)
        return ac_fail(AC_ERR_INVALID, "routers: two axes mask the same channels (axis %d, %s, layer %d)", a,
                       ac_axis_kind_name(x->kind), x->layer);
    mask_target *t = &r->targets[r->n_targets++];
    t->axis = a;
    t->groups = groups;
    t->per = per;
    t->mask = r->mask_buf + r->mask_floats;
    t->grad = r->grad_buf + r->mask_floats;
    r->mask_floats += (size_t)dim;
    *mask_slot = t->mask;
    *grad_slot = t->grad;
    return AC_OK;
}

/* One pass over the axes: sizes the buffers (count_only) or lays the targets out. */
static ac_status lay_out(ac_routers *r, const ac_arch *parent, int count_only)
{
    r->n_targets = 0;
    r->mask_floats = 0;
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        if (!count_only)
            r->first_target[a] = r->n_targets;
        ac_status st = AC_OK;
        if (x->kind == AC_AXIS_HIDDEN) {
            st = add_target(r, a, 1, parent->hidden, &r->hidden_mask, &r->hidden_grad, count_only);
        } else if (x->kind == AC_AXIS_KEEP) {
            if (!count_only)
                r->gate_layer[a] = x->layer;
        } else {
            int lo = x->layer < 0 ? 0 : x->layer, hi = x->layer < 0 ? r->n_layers : x->layer + 1;
            for (int l = lo; st == AC_OK && l < hi; l++) {
                int slot = 0, groups = 1, dim = 0;
                if (!axis_shape(x, &parent->layers[l], &slot, &groups, &dim))
                    continue;
                float *none = NULL;
                st = add_target(r, a, groups, dim, count_only ? &none : &r->mask_ptr[slot][l],
                                count_only ? &none : &r->grad_ptr[slot][l], count_only);
            }
        }
        if (st != AC_OK)
            return st;
    }
    if (!count_only)
        r->first_target[r->n_axes] = r->n_targets;
    return AC_OK;
}

static ac_status check_axes(const ac_routers *r, const ac_arch *parent)
{
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        if (x->count < 1 || x->count > AC_AXIS_MAX_VALUES)
            return ac_fail(AC_ERR_INVALID, "routers: axis %d (%s) has %d values", a, ac_axis_kind_name(x->kind),
                           x->count);
        if (x->layer >= parent->n_layers || (x->layer < 0 && x->kind != AC_AXIS_HIDDEN && x->kind != AC_AXIS_MAMBA_HEADS))
            return ac_fail(AC_ERR_INVALID, "routers: axis %d (%s) names layer %d of a parent with %d layers", a,
                           ac_axis_kind_name(x->kind), x->layer, parent->n_layers);
        if (x->kind == AC_AXIS_HIDDEN && x->layer >= 0)
            return ac_fail(AC_ERR_INVALID, "routers: the hidden axis (%d) names layer %d", a, x->layer);
        if (x->layer >= 0 && x->kind != AC_AXIS_KEEP) {
            int slot, groups, dim;
            if (!axis_shape(x, &parent->layers[x->layer], &slot, &groups, &dim))
                return ac_fail(AC_ERR_INVALID, "routers: axis %d (%s) is on layer %d, a %s layer", a,
                               ac_axis_kind_name(x->kind), x->layer, ac_block_name(parent->layers[x->layer].kind));
        }
        if (x->kind == AC_AXIS_KEEP)
            for (int b = 0; b < a; b++)
                if (r->axes[b].kind == AC_AXIS_KEEP && r->axes[b].layer == x->layer)
                    return ac_fail(AC_ERR_INVALID, "routers: layer %d has two keep axes", x->layer);
    }
    return AC_OK;
}

/* A value that is not a whole number per group (Mamba heads) has no prefix mask that
 * equals it: the cost model would price one model and the masks train another. */
static ac_status check_whole_groups(const ac_cost_model *cost, const ac_arch *parent)
{
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        for (int l = 0; l < parent->n_layers; l++) {
            const ac_block_dims *b = &parent->layers[l];
            int G = 1;
            if (ac_block(b)->cost_axis(b, ax->kind, &G) < 0 || (ax->layer >= 0 && ax->layer != l))
                continue;
            for (int i = 0; i < ax->count; i++)
                if (ax->values[i] % G)
                    return ac_fail(AC_ERR_INVALID, "routers: %s value %d is not a multiple of layer %d's %d groups "
                                                   "(a prefix is kept within each group)",
                                   ac_axis_kind_name(ax->kind), ax->values[i], l, G);
        }
    }
    return AC_OK;
}

ac_status ac_routers_create(const ac_cost_model *cost, const ac_arch *parent, ac_routers **out)
{
    *out = NULL;
    ac_status wg = check_whole_groups(cost, parent);
    if (wg != AC_OK)
        return wg;
    ac_routers *r = calloc(1, sizeof *r);
    if (!r)
        return ac_fail(AC_ERR_NOMEM, "routers: out of memory");
    r->n_axes = ac_cost_model_axis_count(cost);
    r->n_probs = ac_cost_model_prob_count(cost);
    r->n_layers = parent->n_layers;
    size_t A = (size_t)r->n_axes, L = (size_t)r->n_layers;
    r->axes = malloc((A + 1) * sizeof *r->axes);
    r->gate_layer = malloc((A + 1) * sizeof *r->gate_layer);
    r->first_target = calloc(A + 1, sizeof *r->first_target);
    r->logits = calloc((size_t)r->n_probs + 1, sizeof *r->logits);
    int ok = r->axes && r->gate_layer && r->first_target && r->logits;
    for (int s = 0; s < AC_LAYER_AXES; s++) {
        r->mask_ptr[s] = calloc(L + 1, sizeof *r->mask_ptr[s]);
        r->grad_ptr[s] = calloc(L + 1, sizeof *r->grad_ptr[s]);
        ok = ok && r->mask_ptr[s] && r->grad_ptr[s];
    }
    if (!ok) {
        ac_routers_free(r);
        return ac_fail(AC_ERR_NOMEM, "routers: out of memory");
    }
    int n = 0, gates = 0;
    for (int a = 0; a < r->n_axes; a++) {
        r->axes[a] = *ac_cost_model_axis(cost, a);
        r->gate_layer[a] = -1;
        n += r->axes[a].count;
        gates += r->axes[a].kind == AC_AXIS_KEEP;
    }
    ac_status st = n == r->n_probs ? check_axes(r, parent)
                                   : ac_fail(AC_ERR_INTERNAL, "routers: the axes hold %d values, the cost model %d", n,
                                             r->n_probs);
    if (st == AC_OK)
        st = lay_out(r, parent, 1);
    if (st == AC_OK) {
        r->targets = malloc(((size_t)r->n_targets + 1) * sizeof *r->targets);
        r->mask_buf = calloc(r->mask_floats + 1, sizeof *r->mask_buf);
        r->grad_buf = calloc(r->mask_floats + 1, sizeof *r->grad_buf);
        r->work = malloc(2 * ((size_t)r->max_per + 1) * sizeof *r->work);
        if (gates) {
            r->gate = malloc(L * sizeof *r->gate);
            r->gate_grad = calloc(L, sizeof *r->gate_grad);
        }
        if (!r->targets || !r->mask_buf || !r->grad_buf || !r->work || (gates && (!r->gate || !r->gate_grad)))
            st = ac_fail(AC_ERR_NOMEM, "routers: out of memory");
    }
    if (st == AC_OK)
        st = lay_out(r, parent, 0);
    if (st != AC_OK) {
        ac_routers_free(r);
        return st;
    }
    for (int l = 0; gates && l < r->n_layers; l++)
        r->gate[l] = 1.0f; /* layers no axis gates stay whole */
    r->masks.hidden = r->hidden_mask;
    r->masks.mamba_heads = (const float *const *)r->mask_ptr[AC_LAYER_MAMBA_HEADS];
    r->masks.experts = (const float *const *)r->mask_ptr[AC_LAYER_EXPERTS];
    r->masks.ffn = (const float *const *)r->mask_ptr[AC_LAYER_FFN];
    r->masks.shared_ffn = (const float *const *)r->mask_ptr[AC_LAYER_SHARED_FFN];
    r->masks.layer_gate = r->gate;
    r->grads.hidden = r->hidden_grad;
    r->grads.mamba_heads = r->grad_ptr[AC_LAYER_MAMBA_HEADS];
    r->grads.experts = r->grad_ptr[AC_LAYER_EXPERTS];
    r->grads.ffn = r->grad_ptr[AC_LAYER_FFN];
    r->grads.shared_ffn = r->grad_ptr[AC_LAYER_SHARED_FFN];
    r->grads.layer_gate = r->gate_grad;
    *out = r;
    return AC_OK;
}

void ac_routers_set_expert_masking(ac_routers *r, ac_expert_masking mode)
{
    const float *const *m = (const float *const *)r->mask_ptr[AC_LAYER_EXPERTS];
    float *const *g = r->grad_ptr[AC_LAYER_EXPERTS];
    int scores = mode == AC_EXPERT_SCORE_MASKING;
    r->masks.experts = scores ? NULL : m;
    r->masks.expert_scores = scores ? m : NULL;
    r->grads.experts = scores ? NULL : g;
    r->grads.expert_scores = scores ? g : NULL;
}

int ac_routers_count(const ac_routers *r) { return r->n_probs; }

float *ac_routers_logits(ac_routers *r) { return r->logits; }

/* Gumbel(0, 1) noise for flat index i: output i of splitmix64 seeded with `seed`
 * (ac_rng_at), as u in (0, 1), then -log(-log(u)). */
static double gumbel(uint64_t seed, int i)
{
    uint64_t z = ac_rng_at(seed, (uint64_t)i);
    double u = ((double)(z >> 11) + 0.5) * 0x1.0p-53;
    return -log(-log(u));
}

void ac_routers_probs(const ac_routers *r, float temperature, ac_router_sampling sampling, uint64_t seed,
                      double *probs)
{
    double t = temperature;
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        double *p = probs + x->offset;
        const float *z = r->logits + x->offset;
        double top = -INFINITY;
        int best = 0;
        for (int i = 0; i < x->count; i++) {
            double g = sampling == AC_ROUTER_GUMBEL ? gumbel(seed, x->offset + i) : 0.0;
            p[i] = (double)z[i] + g;
            if (p[i] > top) {
                top = p[i];
                best = i;
            }
        }
        if (!(t > 0)) { /* the zero-temperature limit: the (perturbed) argmax */
            for (int i = 0; i < x->count; i++)
                p[i] = i == best;
            continue;
        }
        double sum = 0;
        for (int i = 0; i < x->count; i++)
            sum += p[i] = exp((p[i] - top) / t);
        for (int i = 0; i < x->count; i++)
            p[i] /= sum;
    }
}

/* The gate of a keep axis: the probability of the values that keep the layer. */
static double keep_probability(const ac_cost_axis *x, const double *p)
{
    double g = 0;
    for (int i = 0; i < x->count; i++)
        if (x->values[i] != 0)
            g += p[i];
    return g;
}

const ac_masks *ac_routers_masks(ac_routers *r, const double *probs)
{
    double *bucket = r->work;
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        const double *p = probs + x->offset;
        if (r->gate_layer[a] >= 0)
            r->gate[r->gate_layer[a]] = (float)keep_probability(x, p);
        for (int k = r->first_target[a]; k < r->first_target[a + 1]; k++) {
            const mask_target *t = &r->targets[k];
            /* bucket[n] = probability of keeping exactly n channels per group; then
             * mask[c] = sum over n > c of bucket[n], one suffix sum */
            memset(bucket, 0, ((size_t)t->per + 1) * sizeof *bucket);
            for (int i = 0; i < x->count; i++)
                bucket[kept(x->values[i], t->groups, t->per)] += p[i];
            double acc = 0;
            for (int c = t->per - 1; c >= 0; c--) {
                acc += bucket[c + 1];
                float m = (float)acc;
                for (int g = 0; g < t->groups; g++)
                    t->mask[g * t->per + c] = m;
            }
        }
    }
    return &r->masks;
}

ac_mask_grads *ac_routers_mask_grads(ac_routers *r)
{
    memset(r->grad_buf, 0, (r->mask_floats + 1) * sizeof *r->grad_buf);
    if (r->gate_grad)
        memset(r->gate_grad, 0, (size_t)r->n_layers * sizeof *r->gate_grad);
    return &r->grads;
}

void ac_routers_mask_grad_storage(ac_routers *r, float **buf, size_t *n, float **gates, size_t *n_gates)
{
    *buf = r->grad_buf;
    *n = r->mask_floats + 1;
    *gates = r->gate_grad;
    *n_gates = r->gate_grad ? (size_t)r->n_layers : 0;
}

void ac_routers_backward(const ac_routers *r, const double *probs, const double *dprobs_extra, float temperature,
                         double *dprobs, double *dlogits)
{
    double *prefix = r->work + r->max_per + 1;
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        double *dp = dprobs + x->offset;
        for (int i = 0; i < x->count; i++)
            dp[i] = 0.0;
        if (r->gate_layer[a] >= 0)
            for (int i = 0; i < x->count; i++)
                if (x->values[i] != 0)
                    dp[i] += r->gate_grad[r->gate_layer[a]];
        for (int k = r->first_target[a]; k < r->first_target[a + 1]; k++) {
            const mask_target *t = &r->targets[k];
            /* prefix[n] = sum over c < n of dL/dmask (all groups): a value keeping n
             * channels per group gets prefix[n] */
            prefix[0] = 0;
            for (int c = 0; c < t->per; c++) {
                double s = 0;
                for (int g = 0; g < t->groups; g++)
                    s += t->grad[g * t->per + c];
                prefix[c + 1] = prefix[c] + s;
            }
            for (int i = 0; i < x->count; i++)
                dp[i] += prefix[kept(x->values[i], t->groups, t->per)];
        }
        if (dprobs_extra)
            for (int i = 0; i < x->count; i++)
                dp[i] += dprobs_extra[x->offset + i];
        /* softmax((z + g) / T): dz_i = p_i (dp_i - <dp, p>) / T */
        const double *p = probs + x->offset;
        double dot = 0;
        for (int i = 0; i < x->count; i++)
            dot += dp[i] * p[i];
        double inv_t = temperature > 0 ? 1.0 / (double)temperature : 0.0;
        for (int i = 0; i < x->count; i++)
            dlogits[x->offset + i] = inv_t * p[i] * (dp[i] - dot);
    }
}

void ac_routers_argmax(const ac_routers *r, const double *probs, int *choice)
{
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = &r->axes[a];
        int best = 0;
        for (int i = 1; i < x->count; i++)
            if (probs[x->offset + i] > probs[x->offset + best])
                best = i;
        choice[a] = best;
    }
}
