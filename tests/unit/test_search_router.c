/* Routers and the budget loss on a small parent with every layer kind: the routers'
 * gradients (prefix-mask sums, softmax at two temperatures, with and without Gumbel
 * noise) and the budget loss's gradient through the real cost model match central
 * differences in the logits; zero logits are uniform; a one-hot distribution gives the
 * hard prefix masks of its choice (Mamba heads by their rank within their group) and is
 * the argmax; soft masks never increase along the channels; a Mamba layer's removal is
 * its layer gate (or, in the heads layout, its head value 0 with the gate left at one);
 * an axis the space fixes has no mask. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/search.h"
#include "space_rows.h"

/* ---- the parent, the contract and the tables ---- */

/* Pattern from `pattern` (M mamba, E moe, * attention, - mlp), hidden 16, Mamba layers
 * of 8 heads in 2 groups, MoE layers of 4 experts of width 8 with a shared expert of 8. */
static void build_parent(ac_arch *a, const char *pattern)
{
    memset(a, 0, sizeof *a);
    int n = (int)strlen(pattern);
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    a->vocab = 32;
    a->hidden = 16;
    a->norm_eps = 1e-5f;
    a->use_conv_bias = 1;
    a->chunk_size = 8;
    for (int l = 0; l < n; l++) {
        ac_block_dims *b = &a->layers[l];
        memset(b, 0, sizeof *b);
        switch (pattern[l]) {
        case 'M': b->kind = AC_BLOCK_MAMBA; break;
        case 'E': b->kind = AC_BLOCK_MOE; break;
        case '*': b->kind = AC_BLOCK_ATTENTION; break;
        default: b->kind = AC_BLOCK_MLP; break;
        }
        b->mamba_heads = 8;
        b->mamba_head_dim = 2;
        b->mamba_groups = 2;
        b->ssm_state = 4;
        b->conv_kernel = 4;
        b->attn_heads = 2;
        b->attn_kv_heads = 1;
        b->attn_head_dim = 8;
        b->ffn = 12;
        b->n_experts = 4;
        b->top_k = 2;
        b->expert_ffn = 8;
        b->shared_ffn = 8;
        b->n_group = 1;
        b->topk_group = 1;
        b->norm_topk_prob = 1;
        b->routed_scaling = 1.0f;
    }
    assert_int_equal(ac_arch_validate(a), AC_OK);
}

#define WORKLOAD                                                                                                       \
    "name = \"router\"; hardware = { device = \"cpu\"; threads = 2; };\n"                                             \
    "workload = { batch = 2; cached_tokens = 3; input_tokens = 5; output_tokens = 4; };\n"                            \
    "targets = { latency_ms = 1.0; };\n"

/* Per-layer heads with "remove" (6 heads: 3 of each group's 4), routed and shared widths
 * ending in 0, every kind removable. */
static const char per_layer_space[] =
    WORKLOAD "search_space = { hidden_sizes = [16, 12, 8];\n"
             "  mamba_heads = { values = [8, 6, 2]; scope = \"per_layer\"; remove = true; };\n"
             "  routed_experts = [4, 3, 2]; routed_ffn = [8, 6, 0]; shared_ffn = [8, 3, 0];\n"
             "  removable = [\"mamba\", \"moe\", \"attention\", \"mlp\"]; };\n";

/* Global heads (one axis for every Mamba layer), Mamba and MoE layers removable. */
static const char global_space[] =
    WORKLOAD "search_space = { hidden_sizes = [16, 10];\n"
             "  mamba_heads = { values = [8, 6, 4]; };\n"
             "  routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 0];\n"
             "  removable = [\"mamba\", \"moe\"]; };\n";

/* Every axis fixed at the parent's size and nothing removable: no masks at all. */
static const char fixed_space[] =
    WORKLOAD "search_space = { hidden_sizes = [16];\n"
             "  mamba_heads = { values = [8]; };\n"
             "  routed_experts = [4]; routed_ffn = [8]; shared_ffn = [8]; };\n";

/* A deterministic value in [lo, hi) for key x (a splitmix64 mix). */
static double mixed(uint64_t x, double lo, double hi)
{
    x = x * 0x2545f4914f6cdd1dULL + 0x632be59bd9b4e019ULL;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    return lo + (hi - lo) * (double)(x >> 11) / 9007199254740992.0;
}

static void put_row(ac_cost_tables *t, ac_cost_row row)
{
    uint64_t key = ((((uint64_t)row.kind * 131 + (uint64_t)row.hidden) * 131 + (uint64_t)row.heads) * 131 +
                    (uint64_t)row.experts) * 131 + (uint64_t)row.expert_ffn;
    key = (key * 131 + (uint64_t)row.shared_ffn) * 131 + (uint64_t)row.ffn;
    row.prefill_us = mixed(key, 20, 400);
    row.decode_a_us = mixed(key + 1, 2, 40);
    row.decode_b_us = mixed(key + 2, 0, 0.05);
    row.samples = 1;
    assert_int_equal(ac_cost_tables_add_row(t, &row), AC_OK);
}

static void put_tables_row(ac_cost_row key, void *tables) { put_row(tables, key); }

/* A row for every layer configuration the space can produce on build_parent's dims. */
static ac_cost_tables *build_tables(const ac_contract *c)
{
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", c->name);
    info.workload = c->workload;
    info.threads = 2;
    info.eps_bytes = 5000.0;
    ac_cost_tables *t = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &t), AC_OK);
    space_rows(&c->search, 12, put_tables_row, t);
    return t;
}

typedef struct {
    ac_contract contract;
    ac_arch parent;
    ac_cost_tables *tables;
    ac_cost_model *cost;
    ac_routers *routers;
    int n, n_axes;
} world;

static void open_world_as(world *w, const char *contract, const char *pattern, ac_mamba_removal removal)
{
    memset(w, 0, sizeof *w);
    if (ac_contract_parse_string(contract, "test", &w->contract) != AC_OK)
        fail_msg("%s", ac_error_message());
    build_parent(&w->parent, pattern);
    w->tables = build_tables(&w->contract);
    if (ac_cost_model_create_with(w->tables, &w->parent, &w->contract, removal, &w->cost) != AC_OK)
        fail_msg("%s", ac_error_message());
    if (ac_routers_create(w->cost, &w->parent, &w->routers) != AC_OK)
        fail_msg("%s", ac_error_message());
    w->n = ac_routers_count(w->routers);
    w->n_axes = ac_cost_model_axis_count(w->cost);
    assert_int_equal(w->n, ac_cost_model_prob_count(w->cost));
}

static void open_world(world *w, const char *contract, const char *pattern)
{
    open_world_as(w, contract, pattern, AC_MAMBA_REMOVAL_GATE);
}

static void close_world(world *w)
{
    ac_routers_free(w->routers);
    ac_cost_model_free(w->cost);
    ac_cost_tables_free(w->tables);
    ac_arch_free(&w->parent);
}

static void random_logits(world *w, uint64_t seed, double lo, double hi)
{
    float *z = ac_routers_logits(w->routers);
    for (int i = 0; i < w->n; i++)
        z[i] = (float)mixed(seed * 1000 + (uint64_t)i, lo, hi);
}

/* ---- visiting every mask entry ---- */

/* Calls f on every mask entry (and its gradient slot), numbering them in a fixed order. */
typedef void (*entry_fn)(void *ctx, int k, float mask, float *grad);

static int visit_array(const float *m, float *g, int n, int k, entry_fn f, void *ctx)
{
    if (!m)
        return k;
    assert_non_null(g);
    for (int i = 0; i < n; i++)
        f(ctx, k++, m[i], &g[i]);
    return k;
}

static int visit_masks(const world *w, const ac_masks *m, ac_mask_grads *g, entry_fn f, void *ctx)
{
    const ac_arch *a = &w->parent;
    int k = visit_array(m->hidden, g->hidden, a->hidden, 0, f, ctx);
    for (int l = 0; l < a->n_layers; l++) {
        const ac_block_dims *b = &a->layers[l];
        k = visit_array(m->mamba_heads[l], g->mamba_heads[l], b->mamba_heads, k, f, ctx);
        k = visit_array(m->experts[l], g->experts[l], b->n_experts, k, f, ctx);
        k = visit_array(m->ffn[l], g->ffn[l], b->expert_ffn, k, f, ctx);
        k = visit_array(m->shared_ffn[l], g->shared_ffn[l], b->shared_ffn, k, f, ctx);
    }
    return visit_array(m->layer_gate, g->layer_gate, a->n_layers, k, f, ctx);
}

/* The test's weight of entry k. */
static float weight_of(int k) { return (float)mixed(777 + (uint64_t)k, -1, 1); }

static void sum_weighted(void *ctx, int k, float mask, float *grad)
{
    (void)grad;
    *(double *)ctx += (double)weight_of(k) * (double)mask;
}

static void store_weight(void *ctx, int k, float mask, float *grad)
{
    (void)ctx;
    (void)mask;
    *grad = weight_of(k);
}

static void count_entry(void *ctx, int k, float mask, float *grad)
{
    (void)k;
    (void)mask;
    (void)grad;
    ++*(int *)ctx;
}

/* L = sum of weight x mask at the current logits. */
static double weighted_masks(world *w, float temp, ac_router_sampling s, uint64_t seed, double *probs)
{
    ac_routers_probs(w->routers, temp, s, seed, probs);
    const ac_masks *m = ac_routers_masks(w->routers, probs);
    ac_mask_grads *g = ac_routers_mask_grads(w->routers); /* only read for its shapes */
    double L = 0;
    visit_masks(w, m, g, sum_weighted, &L);
    return L;
}

/* ---- 1. router gradients ---- */

static double check_router_gradient(world *w, float temp, ac_router_sampling s, uint64_t seed)
{
    int n = w->n;
    double *probs = malloc((size_t)n * sizeof *probs), *dprobs = malloc((size_t)n * sizeof *dprobs),
           *dlogits = malloc((size_t)n * sizeof *dlogits);
    ac_routers_probs(w->routers, temp, s, seed, probs);
    const ac_masks *m = ac_routers_masks(w->routers, probs);
    ac_mask_grads *g = ac_routers_mask_grads(w->routers);
    int entries = visit_masks(w, m, g, store_weight, NULL);
    assert_true(entries > 0);
    ac_routers_backward(w->routers, probs, NULL, temp, dprobs, dlogits);
    float *z = ac_routers_logits(w->routers);
    double worst = 0, scale = 0;
    for (int j = 0; j < n; j++) {
        float keep = z[j];
        /* the logits are floats: divide by the step they actually took */
        float up = (float)((double)keep + 1e-4), dn = (float)((double)keep - 1e-4);
        z[j] = up;
        double Lu = weighted_masks(w, temp, s, seed, probs);
        z[j] = dn;
        double Ld = weighted_masks(w, temp, s, seed, probs);
        z[j] = keep;
        double fd = (Lu - Ld) / ((double)up - (double)dn);
        double err = fabs(fd - dlogits[j]);
        /* the masks are floats: L carries their rounding, about 1e-7 over a 2e-4 step */
        if (err > 4e-3 + 1e-3 * fabs(fd))
            fail_msg("logit %d (T %g, %s): analytic %.8g, central difference %.8g", j, (double)temp,
                     s == AC_ROUTER_GUMBEL ? "gumbel" : "softmax", dlogits[j], fd);
        worst = fmax(worst, err);
        scale = fmax(scale, fabs(fd));
    }
    assert_true(scale > 0.05); /* the check is not vacuous */
    free(probs);
    free(dprobs);
    free(dlogits);
    return worst;
}

static void router_gradients_of(const char *space, const char *pattern, ac_mamba_removal removal)
{
    world w;
    open_world_as(&w, space, pattern, removal);
    const float temps[] = {1.0f, 0.3f};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 2; s++) {
            random_logits(&w, 11 + (uint64_t)(2 * t + s), -1.5, 1.5);
            double worst = check_router_gradient(&w, temps[t], s ? AC_ROUTER_GUMBEL : AC_ROUTER_SOFTMAX, 4242);
            print_message("  %s T=%.1f %s: max |analytic - central| = %.2e over %d logits\n", pattern,
                          (double)temps[t], s ? "gumbel " : "softmax", worst, w.n);
        }
    close_world(&w);
}

static void test_router_gradients_match_central_differences(void **state)
{
    (void)state;
    router_gradients_of(per_layer_space, "ME*-E", AC_MAMBA_REMOVAL_GATE);
    router_gradients_of(per_layer_space, "ME*-E", AC_MAMBA_REMOVAL_HEADS);
    router_gradients_of(global_space, "MEM*E-", AC_MAMBA_REMOVAL_GATE);
}

/* ---- 2. the budget loss ---- */

static double budget_at(world *w, const ac_budget_targets *t, const ac_budget_weights *bw, double *probs)
{
    ac_routers_probs(w->routers, 1.0f, AC_ROUTER_SOFTMAX, 0, probs);
    ac_cost_prediction e;
    assert_int_equal(ac_cost_expected(w->cost, probs, &e, NULL, NULL, NULL), AC_OK);
    return ac_budget_loss(t, bw, &e, NULL, NULL, NULL, w->n, NULL);
}

static void test_budget_loss_matches_central_differences(void **state)
{
    (void)state;
    world w;
    open_world(&w, per_layer_space, "ME*-E");
    int n = w.n;
    double *probs = malloc((size_t)n * sizeof *probs), *dl = malloc((size_t)n * sizeof *dl),
           *dm = malloc((size_t)n * sizeof *dm), *dt = malloc((size_t)n * sizeof *dt),
           *db = malloc((size_t)n * sizeof *db), *dprobs = malloc((size_t)n * sizeof *dprobs),
           *dlogits = malloc((size_t)n * sizeof *dlogits), *db2 = malloc((size_t)n * sizeof *db2);
    random_logits(&w, 5, -1, 1);
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_SOFTMAX, 0, probs);
    ac_cost_prediction e;
    assert_int_equal(ac_cost_expected(w.cost, probs, &e, dl, dm, dt), AC_OK);
    /* latency and throughput missed by about 10%, memory met with room to spare */
    ac_budget_targets t = {.latency_ms = 0.9 * e.latency_ms, .throughput_tok_s = 1.1 * e.throughput_tok_s,
                           .memory_bytes = 1.25 * e.memory_bytes};
    ac_budget_weights bw = {10.0, 100.0};
    double loss = ac_budget_loss(&t, &bw, &e, dl, dm, dt, n, db);
    double rl = (e.latency_ms - t.latency_ms) / t.latency_ms, rt = (t.throughput_tok_s - e.throughput_tok_s) / t.throughput_tok_s;
    assert_true(rl > 0.1 && rt > 0.09);
    assert_float_equal(loss, 10 * rl + 100 * rl * rl + 10 * rt + 100 * rt * rt, 1e-12 * loss);
    /* the met memory target adds nothing, to the loss or its gradient */
    ac_budget_targets no_memory = t;
    no_memory.memory_bytes = 0;
    assert_true(ac_budget_loss(&no_memory, &bw, &e, dl, dm, dt, n, db2) == loss);
    for (int i = 0; i < n; i++)
        assert_true(db2[i] == db[i]);
    ac_budget_targets only_memory = {.memory_bytes = t.memory_bytes};
    assert_true(ac_budget_loss(&only_memory, &bw, &e, NULL, dm, NULL, n, db2) == 0.0);
    for (int i = 0; i < n; i++)
        assert_true(db2[i] == 0.0);
    /* through the routers: no mask gradient, the budget's as the extra */
    (void)ac_routers_mask_grads(w.routers);
    ac_routers_backward(w.routers, probs, db, 1.0f, dprobs, dlogits);
    for (int i = 0; i < n; i++)
        assert_float_equal(dprobs[i], db[i], 1e-15 * (1 + fabs(db[i])));
    float *z = ac_routers_logits(w.routers);
    double worst = 0;
    int moved = 0;
    for (int j = 0; j < n; j++) {
        float keep = z[j];
        float up = (float)((double)keep + 1e-4), dn = (float)((double)keep - 1e-4);
        z[j] = up;
        double Bu = budget_at(&w, &t, &bw, probs);
        z[j] = dn;
        double Bd = budget_at(&w, &t, &bw, probs);
        z[j] = keep;
        double fd = (Bu - Bd) / ((double)up - (double)dn);
        assert_float_equal(dlogits[j], fd, 1e-5 * (1 + fabs(fd)));
        worst = fmax(worst, fabs(dlogits[j] - fd));
        moved += fabs(fd) > 1e-3;
    }
    assert_true(moved > n / 2);
    print_message("  budget loss %.6g: max |analytic - central| = %.2e over %d logits\n", loss, worst, n);
    free(probs);
    free(dl);
    free(dm);
    free(dt);
    free(db);
    free(db2);
    free(dprobs);
    free(dlogits);
    close_world(&w);
}

/* ---- 3. properties ---- */

static void test_zero_logits_are_uniform(void **state)
{
    (void)state;
    world w;
    open_world(&w, per_layer_space, "ME*-E");
    double *p = malloc((size_t)w.n * sizeof *p), *q = malloc((size_t)w.n * sizeof *q);
    for (int i = 0; i < w.n; i++)
        assert_true(ac_routers_logits(w.routers)[i] == 0.0f); /* created at zero */
    const float temps[] = {1.0f, 0.3f, 0.05f};
    for (int t = 0; t < 3; t++) {
        ac_routers_probs(w.routers, temps[t], AC_ROUTER_SOFTMAX, 9, p);
        for (int a = 0; a < w.n_axes; a++) {
            const ac_cost_axis *x = ac_cost_model_axis(w.cost, a);
            for (int i = 0; i < x->count; i++)
                assert_float_equal(p[x->offset + i], 1.0 / x->count, 1e-15);
        }
    }
    /* Gumbel noise: a distribution per axis, the same for the same seed, another for another */
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_GUMBEL, 9, p);
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_GUMBEL, 9, q);
    assert_memory_equal(p, q, (size_t)w.n * sizeof *p);
    for (int a = 0; a < w.n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(w.cost, a);
        double sum = 0;
        for (int i = 0; i < x->count; i++) {
            assert_true(p[x->offset + i] > 0);
            sum += p[x->offset + i];
        }
        assert_float_equal(sum, 1.0, 1e-12);
    }
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_GUMBEL, 10, q);
    int differ = 0;
    for (int i = 0; i < w.n; i++)
        differ += p[i] != q[i];
    assert_true(differ > w.n / 2);
    free(p);
    free(q);
    close_world(&w);
}

/* The hard mask value of channel c of a prefix of `kept` channels per group. */
static float hard(int c, int per, int kept) { return c % per < kept ? 1.0f : 0.0f; }

static void check_one_hot(world *w, const int *choice)
{
    float *z = ac_routers_logits(w->routers);
    for (int a = 0; a < w->n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(w->cost, a);
        for (int i = 0; i < x->count; i++)
            z[x->offset + i] = i == choice[a] ? 500.0f : -500.0f;
    }
    double *p = malloc((size_t)w->n * sizeof *p);
    ac_routers_probs(w->routers, 1.0f, AC_ROUTER_SOFTMAX, 0, p);
    const ac_masks *m = ac_routers_masks(w->routers, p);
    int back[64];
    assert_true(w->n_axes <= 64);
    ac_routers_argmax(w->routers, p, back);
    assert_memory_equal(back, choice, (size_t)w->n_axes * sizeof *choice);
    const ac_arch *pa = &w->parent;
    for (int a = 0; a < w->n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(w->cost, a);
        int v = x->values[choice[a]];
        for (int l = 0; l < pa->n_layers; l++) {
            const ac_block_dims *b = &pa->layers[l];
            if (x->layer >= 0 && x->layer != l)
                continue;
            const float *mask = NULL;
            int dim = 0, per = 0, k = 0;
            switch (x->kind) {
            case AC_AXIS_HIDDEN:
                if (l == 0)
                    mask = m->hidden, dim = per = pa->hidden, k = v;
                break;
            case AC_AXIS_MAMBA_HEADS:
                if (b->kind == AC_BLOCK_MAMBA) {
                    mask = m->mamba_heads[l], dim = b->mamba_heads, per = dim / b->mamba_groups;
                    k = (v + b->mamba_groups - 1) / b->mamba_groups;
                }
                break;
            case AC_AXIS_EXPERTS: mask = m->experts[l], dim = per = b->n_experts, k = v; break;
            case AC_AXIS_ROUTED_FFN: mask = m->ffn[l], dim = per = b->expert_ffn, k = v; break;
            case AC_AXIS_SHARED_FFN: mask = m->shared_ffn[l], dim = per = b->shared_ffn, k = v; break;
            case AC_AXIS_KEEP:
                assert_non_null(m->layer_gate);
                assert_true(m->layer_gate[l] == (float)v);
                break;
            }
            if (x->kind == AC_AXIS_KEEP || dim == 0)
                continue;
            assert_non_null(mask);
            for (int c = 0; c < dim; c++)
                if (mask[c] != hard(c, per, k))
                    fail_msg("axis %d (%s, layer %d) value %d: channel %d is %g", a, ac_axis_kind_name(x->kind),
                             x->layer, v, c, (double)mask[c]);
        }
    }
    free(p);
}

static void test_one_hot_gives_hard_masks(void **state)
{
    (void)state;
    const char *spaces[] = {per_layer_space, per_layer_space, global_space}, *patterns[] = {"ME*-E", "ME*-E", "MEM*E-"};
    const ac_mamba_removal removals[] = {AC_MAMBA_REMOVAL_GATE, AC_MAMBA_REMOVAL_HEADS, AC_MAMBA_REMOVAL_GATE};
    for (int s = 0; s < 3; s++) {
        world w;
        open_world_as(&w, spaces[s], patterns[s], removals[s]);
        int choice[64];
        for (int trial = 0; trial < 40; trial++) {
            for (int a = 0; a < w.n_axes; a++)
                choice[a] = (int)mixed(100 * (uint64_t)trial + (uint64_t)a, 0, ac_cost_model_axis(w.cost, a)->count);
            check_one_hot(&w, choice);
        }
        /* the last value of every axis: keep 0, heads 0 and widths 0 zero their gates and masks */
        for (int a = 0; a < w.n_axes; a++)
            choice[a] = ac_cost_model_axis(w.cost, a)->count - 1;
        check_one_hot(&w, choice);
        close_world(&w);
    }
}

static void test_masks_follow_prefixes_and_group_ranks(void **state)
{
    (void)state;
    world w;
    open_world(&w, per_layer_space, "ME*-E");
    const ac_arch *pa = &w.parent;
    double *p = malloc((size_t)w.n * sizeof *p);
    for (int trial = 0; trial < 10; trial++) {
        random_logits(&w, 300 + (uint64_t)trial, -3, 3);
        ac_routers_probs(w.routers, 0.7f, trial % 2 ? AC_ROUTER_GUMBEL : AC_ROUTER_SOFTMAX, (uint64_t)trial, p);
        const ac_masks *m = ac_routers_masks(w.routers, p);
        assert_non_null(m->hidden);
        for (int c = 1; c < pa->hidden; c++)
            assert_true(m->hidden[c] <= m->hidden[c - 1]);
        assert_true(m->hidden[pa->hidden - 1] < m->hidden[0]);
        for (int l = 0; l < pa->n_layers; l++) {
            const ac_block_dims *b = &pa->layers[l];
            const float *arrays[] = {m->experts[l], m->ffn[l], m->shared_ffn[l]};
            const int dims[] = {b->n_experts, b->expert_ffn, b->shared_ffn};
            for (int k = 0; k < 3; k++) {
                assert_true((arrays[k] != NULL) == (b->kind == AC_BLOCK_MOE));
                for (int c = 1; arrays[k] && c < dims[k]; c++)
                    assert_true(arrays[k][c] <= arrays[k][c - 1]);
            }
            assert_true((m->mamba_heads[l] != NULL) == (b->kind == AC_BLOCK_MAMBA));
            if (b->kind == AC_BLOCK_MAMBA) {
                int per = b->mamba_heads / b->mamba_groups;
                for (int h = 0; h < b->mamba_heads; h++) {
                    assert_true(m->mamba_heads[l][h] == m->mamba_heads[l][h % per]); /* the same in every group */
                    if (h % per)
                        assert_true(m->mamba_heads[l][h] <= m->mamba_heads[l][h - 1]);
                }
            }
            /* every kind is removable here, each through its layer gate */
            assert_true(m->layer_gate[l] > 0 && m->layer_gate[l] < 1);
        }
    }
    /* the within-group rule by hand: 6 of 8 heads in 2 groups keeps ranks 0..2 of each
     * group (heads 0, 1, 2 and 4, 5, 6), 2 keeps rank 0 (heads 0 and 4) */
    const ac_cost_axis *heads = NULL;
    for (int a = 0; a < w.n_axes; a++)
        if (ac_cost_model_axis(w.cost, a)->kind == AC_AXIS_MAMBA_HEADS)
            heads = ac_cost_model_axis(w.cost, a);
    assert_non_null(heads);
    assert_int_equal(heads->count, 3);
    assert_int_equal(heads->values[1], 6);
    assert_int_equal(heads->values[2], 2);
    float *z = ac_routers_logits(w.routers);
    memset(z, 0, (size_t)w.n * sizeof *z);
    z[heads->offset + 1] = 1.0f;
    z[heads->offset + 2] = 0.5f;
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_SOFTMAX, 0, p);
    const ac_masks *m = ac_routers_masks(w.routers, p);
    const double *q = p + heads->offset; /* values 8, 6, 2 */
    const float *mh = m->mamba_heads[heads->layer];
    const double want[4] = {q[0] + q[1] + q[2], q[0] + q[1], q[0] + q[1], q[0]};
    for (int h = 0; h < 8; h++)
        assert_float_equal(mh[h], want[h % 4], 1e-7);
    free(p);
    close_world(&w);
}

/* The heads layout: no keep axis on the Mamba layer, whose gate stays one; removal is
 * its heads axis's value 0, whose probability comes off every head's mask. */
static void test_heads_layout_removes_by_head_value_zero(void **state)
{
    (void)state;
    world w;
    open_world_as(&w, per_layer_space, "ME*-E", AC_MAMBA_REMOVAL_HEADS);
    const ac_cost_axis *heads = NULL;
    for (int a = 0; a < w.n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(w.cost, a);
        assert_false(x->kind == AC_AXIS_KEEP && x->layer == 0);
        if (x->kind == AC_AXIS_MAMBA_HEADS)
            heads = x;
    }
    assert_non_null(heads);
    assert_int_equal(heads->count, 4);
    assert_int_equal(heads->values[3], 0);
    double *p = malloc((size_t)w.n * sizeof *p);
    random_logits(&w, 77, -2, 2);
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_SOFTMAX, 0, p);
    const ac_masks *m = ac_routers_masks(w.routers, p);
    assert_true(m->layer_gate[0] == 1.0f);
    assert_float_equal(m->mamba_heads[0][0], 1.0 - p[heads->offset + 3], 1e-7);
    free(p);
    close_world(&w);
}

/* 5 heads in 2 groups is no whole number per group: refused, naming the value and layer. */
static void test_heads_not_whole_per_group_are_refused(void **state)
{
    (void)state;
    static const char space[] = WORKLOAD "search_space = { hidden_sizes = [16];\n"
                                         "  mamba_heads = { values = [8, 5]; };\n"
                                         "  routed_experts = [4]; routed_ffn = [8]; shared_ffn = [8]; };\n";
    world w;
    memset(&w, 0, sizeof w);
    assert_int_equal(ac_contract_parse_string(space, "test", &w.contract), AC_OK);
    build_parent(&w.parent, "ME");
    w.tables = build_tables(&w.contract);
    assert_int_equal(ac_cost_model_create(w.tables, &w.parent, &w.contract, &w.cost), AC_OK);
    assert_int_equal(ac_routers_create(w.cost, &w.parent, &w.routers), AC_ERR_INVALID);
    assert_null(w.routers);
    assert_non_null(strstr(ac_error_message(), "value 5"));
    assert_non_null(strstr(ac_error_message(), "layer 0's 2 groups"));
    close_world(&w);
}

static void test_fixed_axes_have_no_masks(void **state)
{
    (void)state;
    world w;
    open_world(&w, fixed_space, "ME*-E");
    double *p = malloc((size_t)w.n * sizeof *p);
    ac_routers_probs(w.routers, 1.0f, AC_ROUTER_SOFTMAX, 0, p);
    const ac_masks *m = ac_routers_masks(w.routers, p);
    ac_mask_grads *g = ac_routers_mask_grads(w.routers);
    int entries = 0;
    visit_masks(&w, m, g, count_entry, &entries);
    assert_int_equal(entries, 0);
    assert_null(m->hidden);
    assert_null(m->layer_gate);
    double dprobs[16], dlogits[16];
    assert_true(w.n <= 16);
    ac_routers_backward(w.routers, p, NULL, 1.0f, dprobs, dlogits);
    for (int i = 0; i < w.n; i++)
        assert_true(dlogits[i] == 0.0);
    int choice[16];
    ac_routers_argmax(w.routers, p, choice);
    for (int a = 0; a < w.n_axes; a++)
        assert_int_equal(choice[a], 0);
    free(p);
    close_world(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_gradients_match_central_differences),
        cmocka_unit_test(test_budget_loss_matches_central_differences),
        cmocka_unit_test(test_zero_logits_are_uniform),
        cmocka_unit_test(test_one_hot_gives_hard_masks),
        cmocka_unit_test(test_masks_follow_prefixes_and_group_ranks),
        cmocka_unit_test(test_heads_layout_removes_by_head_value_zero),
        cmocka_unit_test(test_heads_not_whole_per_group_are_refused),
        cmocka_unit_test(test_fixed_axes_have_no_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
