/* The cost model: per-layer costs of every candidate configuration looked up once from
 * the tables, then expected latency and memory (and their gradients) under per-axis
 * probabilities as sums over layers, conditioned on the global choice (autocompress/
 * cost.h has the factorisation). A concrete candidate is the one-hot case. */
#include "cost/cost_internal.h"
#include "blocks/block.h"
#include "util/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LAYER_AXES = 4 };

typedef struct {
    double lat, pre, dec; /* us over the workload */
    double w, c, p;       /* bytes */
    double spt;           /* scratch floats per token (0: removed) */
} combo_cost;

typedef struct {
    int n_axes;
    int axis[MAX_LAYER_AXES]; /* into model->axes */
    int n_combos;             /* product of the axes' counts */
    int offset;               /* first combo in the flat arrays */
} layer_info;

struct ac_cost_model {
    const ac_cost_tables *tables;
    ac_arch parent;
    ac_contract_workload w;
    ac_dtype weights; /* the served weights (the contract's) */
    int threads;
    double eps;
    int n_axes, n_probs;
    ac_cost_axis *axes;
    ac_mamba_removal mamba_removal;
    int hidden_axis, mamba_axis; /* mamba_axis: global heads, or -1 */
    int n_hidden, n_mamba_global, n_global;
    layer_info *layers;
    int n_combos;
    combo_cost *cost;      /* [n_global][n_combos] */
    double *fixed_lat, *fixed_pre, *fixed_dec, *fixed_w, *fixed_r, *fixed_eps; /* [n_hidden] */
    double scratch_bytes_per_float; /* batch x input x 4: R per float of the widest scratch */
    /* precomputed for the expected cost: each combo's probability slots (-1: none) and,
     * per global choice, the sorted distinct scratch values and each combo's index */
    int *combo_slot;       /* [n_combos][MAX_LAYER_AXES] */
    double *support;       /* [n_global][n_combos], the first support_n[g] used */
    int *support_n;        /* [n_global] */
    int *combo_k;          /* [n_global][n_combos] */
};

static const char *const axis_names[] = {"hidden", "mamba_heads", "experts", "routed_ffn", "shared_ffn", "keep"};

const char *ac_axis_kind_name(ac_axis_kind kind)
{
    return kind >= AC_AXIS_HIDDEN && kind <= AC_AXIS_KEEP ? axis_names[kind] : "?";
}

/* ---- axes ---- */

static ac_status add_axis(ac_cost_model *m, ac_axis_kind kind, int layer, const ac_candidates *values, int with_zero)
{
    ac_cost_axis *grown = realloc(m->axes, (size_t)(m->n_axes + 1) * sizeof *grown);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    m->axes = grown;
    ac_cost_axis *a = &m->axes[m->n_axes];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->layer = layer;
    for (int i = 0; i < values->count; i++)
        a->values[a->count++] = values->values[i];
    if (with_zero && (a->count == 0 || a->values[a->count - 1] != 0))
        a->values[a->count++] = 0;
    a->offset = m->n_probs;
    m->n_probs += a->count;
    if (layer >= 0) {
        layer_info *li = &m->layers[layer];
        if (li->n_axes == MAX_LAYER_AXES)
            return ac_fail(AC_ERR_INTERNAL, "cost model: layer %d has too many axes", layer);
        li->axis[li->n_axes++] = m->n_axes;
    }
    m->n_axes++;
    return AC_OK;
}

static ac_status build_axes(ac_cost_model *m, const ac_contract_search_space *sp)
{
    const ac_arch *pa = &m->parent;
    static const ac_candidates keep = {2, {1, 0}};
    int has_mamba = 0;
    for (int l = 0; l < pa->n_layers; l++)
        has_mamba |= pa->layers[l].kind == AC_BLOCK_MAMBA;
    ac_status st = add_axis(m, AC_AXIS_HIDDEN, -1, &sp->hidden_sizes, 0);
    m->hidden_axis = 0;
    m->mamba_axis = -1;
    int global_heads = sp->mamba_heads.scope == AC_SCOPE_GLOBAL;
    if (st == AC_OK && has_mamba && global_heads) {
        m->mamba_axis = m->n_axes;
        st = add_axis(m, AC_AXIS_MAMBA_HEADS, -1, &sp->mamba_heads.values, 0);
    }
    for (int l = 0; st == AC_OK && l < pa->n_layers; l++) {
        switch (pa->layers[l].kind) {
        case AC_BLOCK_MAMBA: {
            /* the heads layout makes removal the head value 0; otherwise a keep axis */
            int per_layer_remove =
                !global_heads && sp->mamba_heads.remove && m->mamba_removal == AC_MAMBA_REMOVAL_HEADS;
            if ((sp->removable.mamba || sp->mamba_heads.remove) && !per_layer_remove)
                st = add_axis(m, AC_AXIS_KEEP, l, &keep, 0);
            if (st == AC_OK && !global_heads)
                st = add_axis(m, AC_AXIS_MAMBA_HEADS, l, &sp->mamba_heads.values, per_layer_remove);
            break;
        }
        case AC_BLOCK_MOE:
            if (sp->removable.moe)
                st = add_axis(m, AC_AXIS_KEEP, l, &keep, 0);
            if (st == AC_OK)
                st = add_axis(m, AC_AXIS_EXPERTS, l, &sp->routed_experts, 0);
            if (st == AC_OK)
                st = add_axis(m, AC_AXIS_ROUTED_FFN, l, &sp->routed_ffn, 0);
            if (st == AC_OK)
                st = add_axis(m, AC_AXIS_SHARED_FFN, l, &sp->shared_ffn, 0);
            break;
        case AC_BLOCK_ATTENTION:
            if (sp->removable.attention)
                st = add_axis(m, AC_AXIS_KEEP, l, &keep, 0);
            break;
        case AC_BLOCK_MLP:
            if (sp->removable.mlp)
                st = add_axis(m, AC_AXIS_KEEP, l, &keep, 0);
            break;
        }
    }
    return st;
}

/* The block of parent layer l at the given per-layer value indices (idx[k] for the
 * layer's k-th axis) and global values; 0 when the choice removes the layer. */
static int layer_block(const ac_cost_model *m, int l, int mamba_global_value, const int *idx, ac_block_dims *b)
{
    const ac_block_dims *pb = &m->parent.layers[l];
    const layer_info *li = &m->layers[l];
    int keep = 1, heads = mamba_global_value, experts = pb->n_experts, ffn = pb->expert_ffn, shared = pb->shared_ffn;
    for (int k = 0; k < li->n_axes; k++) {
        const ac_cost_axis *a = &m->axes[li->axis[k]];
        int v = a->values[idx[k]];
        switch (a->kind) {
        case AC_AXIS_KEEP: keep = v; break;
        case AC_AXIS_MAMBA_HEADS: heads = v; break;
        case AC_AXIS_EXPERTS: experts = v; break;
        case AC_AXIS_ROUTED_FFN: ffn = v; break;
        case AC_AXIS_SHARED_FFN: shared = v; break;
        case AC_AXIS_HIDDEN: break;
        }
    }
    if (!keep)
        return 0;
    switch (pb->kind) {
    case AC_BLOCK_MAMBA:
        if (heads <= 0)
            return 0;
        ac_dims_mamba(b, pb, heads);
        return 1;
    case AC_BLOCK_MOE:
        if (ffn == 0 && shared == 0)
            return 0;
        if (ffn == 0)
            ac_dims_mlp(b, pb, shared);
        else
            ac_dims_moe(b, pb, experts, ffn, shared);
        return 1;
    default: *b = *pb; return 1;
    }
}

static void decode_combo(const ac_cost_model *m, const layer_info *li, int c, int *idx)
{
    for (int k = 0; k < li->n_axes; k++) {
        int n = m->axes[li->axis[k]].count;
        idx[k] = c % n;
        c /= n;
    }
}

/* ---- looking the costs up ---- */

static ac_status row_cost(const ac_cost_model *m, const ac_cost_row *key, double *lat, double *pre, double *dec)
{
    const ac_cost_row *r = ac_cost_tables_find(m->tables, key);
    if (!r) {
        char label[64];
        ac_row_label(key, label, sizeof label);
        return ac_fail(AC_ERR_INVALID, "cost model: the tables have no row for %s at hidden %d (profile this search "
                                       "space again)", label, key->hidden);
    }
    *lat = ac_cost_row_workload_us(r, &m->w);
    *pre = r->prefill_us;
    *dec = *lat - *pre;
    return AC_OK;
}

static ac_status fill_costs(ac_cost_model *m)
{
    ac_arch ah = m->parent; /* shallow: only hidden differs, layers are read */
    const ac_cost_axis *hx = &m->axes[m->hidden_axis];
    for (int h = 0; h < m->n_hidden; h++) {
        ah.hidden = hx->values[h];
        ac_arch outer = ah; /* the embeddings, final norm and LM head */
        outer.n_layers = 0;
        m->fixed_w[h] = (double)ac_arch_weight_bytes(&outer, m->weights);
        m->fixed_r[h] = ac_fixed_activation_bytes(&ah, &m->w, m->threads, 0.0);
        m->fixed_lat[h] = m->fixed_pre[h] = m->fixed_dec[h] = 0;
        for (int k = AC_ROW_EMBEDDING; k <= AC_ROW_OTHER; k++) {
            ac_cost_row key;
            memset(&key, 0, sizeof key);
            key.kind = (ac_row_kind)k;
            key.hidden = ah.hidden;
            double lat = 0, pre = 0, dec = 0;
            ac_status st = row_cost(m, &key, &lat, &pre, &dec);
            if (st != AC_OK)
                return st;
            m->fixed_lat[h] += lat;
            m->fixed_pre[h] += pre;
            m->fixed_dec[h] += dec;
        }
        for (int g = 0; g < m->n_mamba_global; g++) {
            int mg = m->mamba_axis >= 0 ? m->axes[m->mamba_axis].values[g] : 0;
            combo_cost *row = m->cost + (size_t)(h * m->n_mamba_global + g) * m->n_combos;
            for (int l = 0; l < m->parent.n_layers; l++) {
                const layer_info *li = &m->layers[l];
                for (int c = 0; c < li->n_combos; c++) {
                    int idx[MAX_LAYER_AXES];
                    ac_block_dims b;
                    combo_cost *cc = &row[li->offset + c];
                    memset(cc, 0, sizeof *cc);
                    decode_combo(m, li, c, idx);
                    if (!layer_block(m, l, mg, idx, &b))
                        continue;
                    ac_cost_row key = ac_block_row_key(&b, ah.hidden);
                    ac_status st = row_cost(m, &key, &cc->lat, &cc->pre, &cc->dec);
                    if (st != AC_OK)
                        return st;
                    cc->w = (double)ac_block_weight_bytes(&ah, &b, m->weights);
                    cc->c = ac_block_kv_bytes(&b, &m->w);
                    cc->p = ac_block_state_bytes(&b, &m->w);
                    cc->spt = ac_block_scratch_floats(&ah, &b);
                }
            }
        }
    }
    return AC_OK;
}

/* eps per hidden size: the median residual of the runs at that size, else of all runs
 * (the tables' own figure). */
static ac_status fill_eps(ac_cost_model *m)
{
    size_t n = ac_cost_tables_memory_count(m->tables);
    double *r = malloc((n + 1) * sizeof *r);
    if (!r)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    for (int h = 0; h < m->n_hidden; h++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            const ac_memory_point *p = ac_cost_tables_memory(m->tables, i);
            if (p->hidden == m->axes[m->hidden_axis].values[h])
                r[k++] = p->measured - (p->weights + p->kv + p->state + p->activations);
        }
        m->fixed_eps[h] = k ? ac_stat_median(r, k) : m->eps;
    }
    free(r);
    return AC_OK;
}

static int compare_values(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int find_value(const double *v, int K, double x)
{
    int lo = 0, hi = K - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static ac_status precompute(ac_cost_model *m)
{
    size_t n = (size_t)m->n_combos, G = (size_t)m->n_global;
    m->combo_slot = malloc((n + 1) * MAX_LAYER_AXES * sizeof *m->combo_slot);
    m->support = malloc((G * n + 1) * sizeof *m->support);
    m->support_n = calloc(G + 1, sizeof *m->support_n);
    m->combo_k = malloc((G * n + 1) * sizeof *m->combo_k);
    if (!m->combo_slot || !m->support || !m->support_n || !m->combo_k)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    for (int l = 0; l < m->parent.n_layers; l++) {
        const layer_info *li = &m->layers[l];
        for (int c = 0; c < li->n_combos; c++) {
            int idx[MAX_LAYER_AXES], *slot = m->combo_slot + (size_t)(li->offset + c) * MAX_LAYER_AXES;
            decode_combo(m, li, c, idx);
            for (int k = 0; k < MAX_LAYER_AXES; k++)
                slot[k] = k < li->n_axes ? m->axes[li->axis[k]].offset + idx[k] : -1;
        }
    }
    for (size_t g = 0; g < G; g++) {
        const combo_cost *cost = m->cost + g * n;
        double *v = m->support + g * n;
        for (size_t i = 0; i < n; i++)
            v[i] = cost[i].spt;
        qsort(v, n, sizeof *v, compare_values);
        int K = 0;
        for (size_t i = 0; i < n; i++)
            if (K == 0 || v[i] != v[K - 1])
                v[K++] = v[i];
        m->support_n[g] = K;
        for (size_t i = 0; i < n; i++)
            m->combo_k[g * n + i] = find_value(v, K, cost[i].spt);
    }
    return AC_OK;
}

void ac_cost_model_free(ac_cost_model *m)
{
    if (!m)
        return;
    ac_arch_free(&m->parent);
    free(m->axes);
    free(m->layers);
    free(m->cost);
    free(m->fixed_lat);
    free(m->fixed_pre);
    free(m->fixed_dec);
    free(m->fixed_w);
    free(m->fixed_r);
    free(m->fixed_eps);
    free(m->combo_slot);
    free(m->support);
    free(m->support_n);
    free(m->combo_k);
    free(m);
}

ac_status ac_cost_model_create(const ac_cost_tables *tables, const ac_arch *parent, const ac_contract *contract,
                               ac_cost_model **model)
{
    return ac_cost_model_create_with(tables, parent, contract, AC_MAMBA_REMOVAL_GATE, model);
}

ac_status ac_cost_model_create_with(const ac_cost_tables *tables, const ac_arch *parent, const ac_contract *contract,
                                    ac_mamba_removal removal, ac_cost_model **model)
{
    *model = NULL;
    const ac_cost_tables_info *in = ac_cost_tables_get_info(tables);
    const ac_contract_workload *cw = &contract->workload, *tw = &in->workload;
    if (cw->batch != tw->batch || cw->cached_tokens != tw->cached_tokens || cw->input_tokens != tw->input_tokens ||
        cw->output_tokens != tw->output_tokens)
        return ac_fail(AC_ERR_INVALID,
                       "cost model: the tables were measured for batch %d, %lld cached, %lld input, %lld output tokens; "
                       "contract %s asks for batch %d, %lld cached, %lld input, %lld output",
                       tw->batch, (long long)tw->cached_tokens, (long long)tw->input_tokens, (long long)tw->output_tokens,
                       contract->name, cw->batch, (long long)cw->cached_tokens, (long long)cw->input_tokens,
                       (long long)cw->output_tokens);
    if (in->weights != contract->hardware.weights)
        return ac_fail(AC_ERR_INVALID, "cost model: the tables were measured with %s weights; contract %s serves %s "
                                       "(profile again with its hardware.weights)",
                       ac_weights_dtype_name(in->weights), contract->name,
                       ac_weights_dtype_name(contract->hardware.weights));
    ac_status st = ac_contract_check_parent(contract, parent);
    if (st != AC_OK)
        return st;
    ac_cost_model *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    m->tables = tables;
    m->mamba_removal = removal;
    m->w = *cw;
    m->weights = contract->hardware.weights;
    m->threads = in->threads > 0 ? in->threads : 1;
    m->eps = in->eps_bytes;
    m->scratch_bytes_per_float = (double)cw->batch * (double)cw->input_tokens * sizeof(float);
    st = ac_arch_copy(&m->parent, parent);
    if (st == AC_OK) {
        m->layers = calloc((size_t)parent->n_layers, sizeof *m->layers);
        st = m->layers ? build_axes(m, &contract->search) : ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    }
    if (st == AC_OK) {
        m->n_hidden = m->axes[m->hidden_axis].count;
        m->n_mamba_global = m->mamba_axis >= 0 ? m->axes[m->mamba_axis].count : 1;
        m->n_global = m->n_hidden * m->n_mamba_global;
        for (int l = 0; l < parent->n_layers; l++) {
            layer_info *li = &m->layers[l];
            li->n_combos = 1;
            for (int k = 0; k < li->n_axes; k++)
                li->n_combos *= m->axes[li->axis[k]].count;
            li->offset = m->n_combos;
            m->n_combos += li->n_combos;
        }
        m->cost = calloc((size_t)m->n_global * m->n_combos, sizeof *m->cost);
        m->fixed_lat = calloc((size_t)m->n_hidden, sizeof(double));
        m->fixed_pre = calloc((size_t)m->n_hidden, sizeof(double));
        m->fixed_dec = calloc((size_t)m->n_hidden, sizeof(double));
        m->fixed_w = calloc((size_t)m->n_hidden, sizeof(double));
        m->fixed_r = calloc((size_t)m->n_hidden, sizeof(double));
        m->fixed_eps = calloc((size_t)m->n_hidden, sizeof(double));
        if (!m->cost || !m->fixed_lat || !m->fixed_pre || !m->fixed_dec || !m->fixed_w || !m->fixed_r || !m->fixed_eps)
            st = ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    }
    if (st == AC_OK)
        st = fill_costs(m);
    if (st == AC_OK)
        st = fill_eps(m);
    if (st == AC_OK)
        st = precompute(m);
    if (st != AC_OK) {
        ac_cost_model_free(m);
        return st;
    }
    *model = m;
    return AC_OK;
}

int ac_cost_model_axis_count(const ac_cost_model *m) { return m->n_axes; }
const ac_cost_axis *ac_cost_model_axis(const ac_cost_model *m, int i)
{
    return i >= 0 && i < m->n_axes ? &m->axes[i] : NULL;
}
int ac_cost_model_prob_count(const ac_cost_model *m) { return m->n_probs; }

/* ---- the expected maximum of the block scratch ---- */

typedef struct {
    double *F;         /* [L][K] CDFs, then suffix sums */
    double *pre, *suf; /* [L + 1] */
} max_work;

/* E[max_l X_l] with X_l = spt of layer l's combo (probabilities pi) given global choice g,
 * and dE/dpi when de != NULL. E = v_K - sum_{k<K} (v_{k+1} - v_k) prod_l F_l(v_k). */
static double expected_max(const ac_cost_model *m, int g, const double *pi, double *de, max_work *wk)
{
    int L = m->parent.n_layers, n = m->n_combos, K = m->support_n[g];
    const double *v = m->support + (size_t)g * n;
    const int *kc = m->combo_k + (size_t)g * n;
    memset(wk->F, 0, (size_t)L * K * sizeof *wk->F);
    for (int l = 0; l < L; l++) {
        const layer_info *li = &m->layers[l];
        double *F = wk->F + (size_t)l * K;
        for (int c = 0; c < li->n_combos; c++)
            F[kc[li->offset + c]] += pi[li->offset + c];
        for (int k = 1; k < K; k++)
            F[k] += F[k - 1];
    }
    double e = v[K - 1];
    for (int k = 0; k + 1 < K; k++) {
        double prod = 1;
        for (int l = 0; l < L; l++)
            prod *= wk->F[(size_t)l * K + k];
        e -= (v[k + 1] - v[k]) * prod;
    }
    if (!de)
        return e;
    /* S_l(k) = sum_{k' >= k, k' < K-1} (v_{k'+1} - v_{k'}) prod_{l' != l} F_{l'}(v_{k'}), stored
     * over F in place from the top down (F at k is no longer needed once S at k is known
     * for every layer, and S at k+1 was written after F at k+1 was used) */
    for (int k = K - 1; k >= 0; k--) {
        wk->pre[0] = 1;
        for (int l = 0; l < L; l++)
            wk->pre[l + 1] = wk->pre[l] * wk->F[(size_t)l * K + k];
        wk->suf[L] = 1;
        for (int l = L - 1; l >= 0; l--)
            wk->suf[l] = wk->suf[l + 1] * wk->F[(size_t)l * K + k];
        for (int l = 0; l < L; l++) {
            double term = k + 1 < K ? (v[k + 1] - v[k]) * wk->pre[l] * wk->suf[l + 1] : 0.0;
            double above = k + 1 < K ? wk->F[(size_t)l * K + k + 1] : 0.0;
            wk->F[(size_t)l * K + k] = term + above;
        }
    }
    for (int l = 0; l < L; l++) {
        const layer_info *li = &m->layers[l];
        for (int c = 0; c < li->n_combos; c++) {
            int i = li->offset + c;
            de[i] = -wk->F[(size_t)l * K + kc[i]];
        }
    }
    return e;
}

/* ---- expected costs ---- */

ac_status ac_cost_expected(const ac_cost_model *m, const double *probs, ac_cost_prediction *out, double *d_lat,
                           double *d_mem, double *d_thr)
{
    int n = m->n_combos, L = m->parent.n_layers;
    int grads = d_lat || d_mem || d_thr;
    double *pi = malloc((size_t)n * sizeof *pi);
    double *de = grads ? malloc((size_t)n * sizeof *de) : NULL;
    double *g_lat = grads ? calloc((size_t)n, sizeof *g_lat) : NULL;
    double *g_mem = grads ? calloc((size_t)n, sizeof *g_mem) : NULL;
    double *glob_lat = grads ? calloc((size_t)m->n_probs, sizeof *glob_lat) : NULL;
    double *glob_mem = grads ? calloc((size_t)m->n_probs, sizeof *glob_mem) : NULL;
    max_work wk = {malloc(((size_t)L * n + 1) * sizeof(double)), malloc((size_t)(L + 1) * sizeof(double)),
                   malloc((size_t)(L + 1) * sizeof(double))};
    ac_status st = AC_OK;
    if (!pi || !wk.F || !wk.pre || !wk.suf ||
        (grads && (!de || !g_lat || !g_mem || !glob_lat || !glob_mem)))
        st = ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    for (int i = 0; st == AC_OK && i < n; i++) {
        const int *slot = m->combo_slot + (size_t)i * MAX_LAYER_AXES;
        double p = 1;
        for (int k = 0; k < MAX_LAYER_AXES && slot[k] >= 0; k++)
            p *= probs[slot[k]];
        pi[i] = p;
    }
    double E_lat = 0, E_pre = 0, E_dec = 0, E_w = 0, E_c = 0, E_p = 0, E_r = 0, E_eps = 0;
    const ac_cost_axis *hx = &m->axes[m->hidden_axis];
    const ac_cost_axis *mx = m->mamba_axis >= 0 ? &m->axes[m->mamba_axis] : NULL;
    for (int h = 0; st == AC_OK && h < m->n_hidden; h++)
        for (int g = 0; g < m->n_mamba_global; g++) {
            double ph = probs[hx->offset + h], pm = mx ? probs[mx->offset + g] : 1.0, pg = ph * pm;
            const combo_cost *cost = m->cost + (size_t)(h * m->n_mamba_global + g) * n;
            double lat = m->fixed_lat[h], pre = m->fixed_pre[h], dec = m->fixed_dec[h], w = m->fixed_w[h], c = 0, p = 0;
            for (int i = 0; i < n; i++) {
                lat += pi[i] * cost[i].lat;
                pre += pi[i] * cost[i].pre;
                dec += pi[i] * cost[i].dec;
                w += pi[i] * cost[i].w;
                c += pi[i] * cost[i].c;
                p += pi[i] * cost[i].p;
            }
            double r = m->fixed_r[h] + m->scratch_bytes_per_float * expected_max(m, h * m->n_mamba_global + g, pi, de, &wk);
            double mem = w + c + p + r + m->fixed_eps[h];
            E_lat += pg * lat;
            E_pre += pg * pre;
            E_dec += pg * dec;
            E_w += pg * w;
            E_c += pg * c;
            E_p += pg * p;
            E_r += pg * r;
            E_eps += pg * m->fixed_eps[h];
            if (!grads)
                continue;
            for (int i = 0; i < n; i++) {
                g_lat[i] += pg * cost[i].lat;
                g_mem[i] += pg * (cost[i].w + cost[i].c + cost[i].p + m->scratch_bytes_per_float * de[i]);
            }
            glob_lat[hx->offset + h] += pm * lat;
            glob_mem[hx->offset + h] += pm * mem;
            if (mx) {
                glob_lat[mx->offset + g] += ph * lat;
                glob_mem[mx->offset + g] += ph * mem;
            }
        }
    if (st == AC_OK) {
        memset(out, 0, sizeof *out);
        out->latency_ms = E_lat / 1000.0;
        out->prefill_ms = E_pre / 1000.0;
        out->decode_ms = E_dec / 1000.0;
        double produced = (double)m->w.batch * (double)m->w.output_tokens;
        out->throughput_tok_s = out->latency_ms > 0 ? produced / (out->latency_ms / 1000.0) : 0.0;
        out->weights_bytes = E_w;
        out->kv_bytes = E_c;
        out->state_bytes = E_p;
        out->activation_bytes = E_r;
        out->eps_bytes = E_eps;
        out->conventional_bytes = E_w + E_c + E_p;
        out->memory_bytes = E_w + E_c + E_p + E_r + E_eps;
    }
    if (st == AC_OK && grads) {
        /* chain rule from the combos' probabilities to their axes' entries */
        for (int i = 0; i < n; i++) {
            const int *slot = m->combo_slot + (size_t)i * MAX_LAYER_AXES;
            for (int k = 0; k < MAX_LAYER_AXES && slot[k] >= 0; k++) {
                double others = 1;
                for (int k2 = 0; k2 < MAX_LAYER_AXES && slot[k2] >= 0; k2++)
                    if (k2 != k)
                        others *= probs[slot[k2]];
                glob_lat[slot[k]] += g_lat[i] * others;
                glob_mem[slot[k]] += g_mem[i] * others;
            }
        }
        double thr = out->throughput_tok_s, lat_ms = out->latency_ms;
        for (int j = 0; j < m->n_probs; j++) {
            double dl = glob_lat[j] / 1000.0;
            if (d_lat)
                d_lat[j] = dl;
            if (d_mem)
                d_mem[j] = glob_mem[j];
            if (d_thr)
                d_thr[j] = lat_ms > 0 ? -thr / lat_ms * dl : 0.0;
        }
    }
    free(pi);
    free(de);
    free(g_lat);
    free(g_mem);
    free(glob_lat);
    free(glob_mem);
    free(wk.F);
    free(wk.pre);
    free(wk.suf);
    return st;
}

/* ---- concrete candidates ---- */

static ac_status check_choice(const ac_cost_model *m, const int *choice)
{
    for (int a = 0; a < m->n_axes; a++)
        if (choice[a] < 0 || choice[a] >= m->axes[a].count)
            return ac_fail(AC_ERR_INVALID, "cost model: choice %d for axis %d (%s) is outside [0, %d)", choice[a], a,
                           ac_axis_kind_name(m->axes[a].kind), m->axes[a].count);
    return AC_OK;
}

ac_status ac_cost_predict(const ac_cost_model *m, const int *choice, ac_cost_prediction *out)
{
    ac_status st = check_choice(m, choice);
    if (st != AC_OK)
        return st;
    double *probs = calloc((size_t)m->n_probs, sizeof *probs);
    if (!probs)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    for (int a = 0; a < m->n_axes; a++)
        probs[m->axes[a].offset + choice[a]] = 1.0;
    st = ac_cost_expected(m, probs, out, NULL, NULL, NULL);
    free(probs);
    return st;
}

ac_status ac_cost_choice_arch(const ac_cost_model *m, const int *choice, ac_arch *arch, int *parent_layer)
{
    memset(arch, 0, sizeof *arch);
    ac_status st = check_choice(m, choice);
    if (st != AC_OK)
        return st;
    const ac_arch *pa = &m->parent;
    int mg = m->mamba_axis >= 0 ? m->axes[m->mamba_axis].values[choice[m->mamba_axis]] : 0;
    ac_block_dims *blocks = malloc((size_t)pa->n_layers * sizeof *blocks);
    if (!blocks)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    int n = 0;
    for (int l = 0; l < pa->n_layers; l++) {
        const layer_info *li = &m->layers[l];
        int idx[MAX_LAYER_AXES];
        for (int k = 0; k < li->n_axes; k++)
            idx[k] = choice[li->axis[k]];
        if (layer_block(m, l, mg, idx, &blocks[n])) {
            if (parent_layer)
                parent_layer[n] = l;
            n++;
        }
    }
    if (n == 0) {
        free(blocks);
        return ac_fail(AC_ERR_INVALID, "cost model: the choice removes every layer");
    }
    ac_arch tmp = *pa;
    tmp.layers = blocks;
    tmp.n_layers = n;
    tmp.hidden = m->axes[m->hidden_axis].values[choice[m->hidden_axis]];
    st = ac_arch_copy(arch, &tmp);
    free(blocks);
    return st;
}

static int axis_index(const ac_cost_axis *a, int value)
{
    for (int i = 0; i < a->count; i++)
        if (a->values[i] == value)
            return i;
    return -1;
}

/* Sets the layer's axis of `kind` to `value`; 0 when the axis is absent (only fine when
 * `value` is what the absent axis implies) or lacks the value. */
static int set_axis(const ac_cost_model *m, int l, ac_axis_kind kind, int value, int *choice, int implied)
{
    const layer_info *li = &m->layers[l];
    for (int k = 0; k < li->n_axes; k++) {
        const ac_cost_axis *a = &m->axes[li->axis[k]];
        if (a->kind == kind) {
            int i = axis_index(a, value);
            if (i < 0)
                return 0;
            choice[li->axis[k]] = i;
            return 1;
        }
    }
    return value == implied;
}

ac_status ac_cost_arch_choice(const ac_cost_model *m, const ac_arch *arch, int *choice)
{
    const ac_arch *pa = &m->parent;
    for (int a = 0; a < m->n_axes; a++)
        choice[a] = 0;
    int h = axis_index(&m->axes[m->hidden_axis], arch->hidden);
    if (h < 0)
        return ac_fail(AC_ERR_INVALID, "cost model: hidden size %d is not a candidate", arch->hidden);
    choice[m->hidden_axis] = h;
    int global_heads = -1, j = 0;
    for (int l = 0; l < pa->n_layers; l++) {
        const ac_block_dims *pb = &pa->layers[l];
        const ac_block_dims *b = j < arch->n_layers ? &arch->layers[j] : NULL;
        int match = b && (b->kind == pb->kind || (pb->kind == AC_BLOCK_MOE && b->kind == AC_BLOCK_MLP));
        if (!match) {
            /* removed: by the keep axis, a zero head count, or no routed and no shared FFN */
            int ok = set_axis(m, l, AC_AXIS_KEEP, 0, choice, 1);
            if (!ok && pb->kind == AC_BLOCK_MAMBA)
                ok = set_axis(m, l, AC_AXIS_MAMBA_HEADS, 0, choice, -1);
            if (!ok && pb->kind == AC_BLOCK_MOE)
                ok = set_axis(m, l, AC_AXIS_ROUTED_FFN, 0, choice, -1) && set_axis(m, l, AC_AXIS_SHARED_FFN, 0, choice, -1);
            if (!ok)
                return ac_fail(AC_ERR_INVALID, "cost model: parent layer %d (%s) has no counterpart and may not be "
                                               "removed", l, ac_block_name(pb->kind));
            continue;
        }
        j++;
        set_axis(m, l, AC_AXIS_KEEP, 1, choice, 1);
        int ok = 1;
        switch (pb->kind) {
        case AC_BLOCK_MAMBA:
            if (m->mamba_axis >= 0) {
                int i = axis_index(&m->axes[m->mamba_axis], b->mamba_heads);
                ok = i >= 0 && (global_heads < 0 || global_heads == i);
                global_heads = i;
                choice[m->mamba_axis] = i >= 0 ? i : 0;
            } else {
                ok = set_axis(m, l, AC_AXIS_MAMBA_HEADS, b->mamba_heads, choice, pb->mamba_heads);
            }
            break;
        case AC_BLOCK_MOE:
            if (b->kind == AC_BLOCK_MLP)
                ok = set_axis(m, l, AC_AXIS_ROUTED_FFN, 0, choice, -1) &&
                     set_axis(m, l, AC_AXIS_SHARED_FFN, b->ffn, choice, pb->shared_ffn);
            else
                ok = set_axis(m, l, AC_AXIS_EXPERTS, b->n_experts, choice, pb->n_experts) &&
                     set_axis(m, l, AC_AXIS_ROUTED_FFN, b->expert_ffn, choice, pb->expert_ffn) &&
                     set_axis(m, l, AC_AXIS_SHARED_FFN, b->shared_ffn, choice, pb->shared_ffn);
            break;
        default: break;
        }
        if (!ok)
            return ac_fail(AC_ERR_INVALID, "cost model: layer %d (%s) has dimensions outside the search space", j - 1,
                           ac_block_name(b->kind));
    }
    if (j != arch->n_layers)
        return ac_fail(AC_ERR_INVALID, "cost model: layer %d (%s) matches no parent layer", j,
                       ac_block_name(arch->layers[j].kind));
    return AC_OK;
}

ac_status ac_cost_predict_arch(const ac_cost_model *m, const ac_arch *arch, ac_cost_prediction *out)
{
    int *choice = malloc((size_t)(m->n_axes ? m->n_axes : 1) * sizeof *choice);
    if (!choice)
        return ac_fail(AC_ERR_NOMEM, "cost model: out of memory");
    ac_status st = ac_cost_arch_choice(m, arch, choice);
    if (st == AC_OK)
        st = ac_cost_predict(m, choice, out);
    free(choice);
    return st;
}
