/* The cost model against tables with known rows: a candidate's prediction is the sum of
 * its layers' rows plus the fixed rows, its memory the formula's terms plus eps; the
 * expected cost under per-axis probabilities equals the brute-force average over every
 * architecture of the space (so the factorisation, the global-axis coupling and the
 * expected maximum of the block scratch are exact); its gradients match central finite
 * differences; all of it in both layouts of Mamba removal (a keep axis, or head value 0),
 * whose expected cost is linear in a Mamba layer's keep probability with the slope of
 * that layer's row; tables survive a JSON round trip; missing rows and other workloads
 * are refused with messages that say what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"

/* A small parent: pattern from `kinds` ("MEM*E"), hidden 16. */
static void make_parent(ac_arch *a, const char *kinds)
{
    memset(a, 0, sizeof *a);
    int n = (int)strlen(kinds);
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    a->vocab = 32;
    a->hidden = 16;
    a->norm_eps = 1e-5f;
    a->use_conv_bias = 1;
    a->chunk_size = 8;
    for (int i = 0; i < n; i++) {
        ac_block_dims *b = &a->layers[i];
        memset(b, 0, sizeof *b);
        b->kind = kinds[i] == 'M' ? AC_BLOCK_MAMBA : kinds[i] == '*' ? AC_BLOCK_ATTENTION : kinds[i] == '-' ? AC_BLOCK_MLP
                                                                                                          : AC_BLOCK_MOE;
        b->mamba_heads = 4, b->mamba_head_dim = 4, b->mamba_groups = 2, b->ssm_state = 4, b->conv_kernel = 4;
        b->attn_heads = 2, b->attn_kv_heads = 1, b->attn_head_dim = 8;
        b->ffn = 12;
        b->n_experts = 4, b->top_k = 2, b->expert_ffn = 8, b->shared_ffn = 8, b->n_group = 1, b->topk_group = 1;
        b->norm_topk_prob = 1, b->routed_scaling = 1.0f;
    }
    assert_int_equal(ac_arch_validate(a), AC_OK);
}

/* The spaces the tests run in: per-layer heads with removal as a keep axis (the default
 * layout), global heads, and per-layer heads with removal as head value 0. */
enum { PER_LAYER_GATE, GLOBAL_HEADS, PER_LAYER_HEADS, N_LAYOUTS };

static const char *contract_text(int global_heads)
{
    return global_heads ? "name = \"g\"; hardware = { device = \"cpu\"; threads = 2; };\n"
                          "workload = { batch = 3; cached_tokens = 5; input_tokens = 7; output_tokens = 4; };\n"
                          "targets = { latency_ms = 1.0; };\n"
                          "search_space = { hidden_sizes = [16, 12]; mamba_heads = { values = [4, 2]; };\n"
                          "  routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 0]; removable = [\"moe\"]; };\n"
                        : "name = \"p\"; hardware = { device = \"cpu\"; threads = 2; };\n"
                          "workload = { batch = 3; cached_tokens = 5; input_tokens = 7; output_tokens = 4; };\n"
                          "targets = { latency_ms = 1.0; };\n"
                          "search_space = { hidden_sizes = [16, 12]; mamba_heads = { values = [4, 2]; scope = \"per_layer\";\n"
                          "  remove = true; }; routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 0];\n"
                          "  removable = [\"mamba\", \"moe\"]; };\n";
}

static double hash_value(uint64_t x, double lo, double hi)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return lo + (hi - lo) * (double)(x >> 11) * 0x1.0p-53;
}

static void add_row(ac_cost_tables *t, ac_cost_row r)
{
    uint64_t h = (uint64_t)r.kind * 1000003u + (uint64_t)r.hidden * 7919u + (uint64_t)r.heads * 104729u +
                 (uint64_t)r.experts * 1299709u + (uint64_t)r.expert_ffn * 15485863u + (uint64_t)r.shared_ffn * 32452843u +
                 (uint64_t)r.ffn * 49979687u;
    r.prefill_us = hash_value(h, 10, 500);
    r.decode_a_us = hash_value(h + 1, 1, 50);
    r.decode_b_us = r.kind == AC_ROW_ATTENTION ? hash_value(h + 2, 0.01, 0.1) : hash_value(h + 2, -0.01, 0.01);
    r.samples = 1;
    assert_int_equal(ac_cost_tables_add_row(t, &r), AC_OK);
}

/* Rows for every configuration of the space (the parent's fixed dims as make_parent). */
static ac_cost_tables *make_tables(const ac_contract *c)
{
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", c->name);
    info.workload = c->workload;
    info.threads = 2;
    info.eps_bytes = 12345.0;
    info.reference_slope = 0.625;
    ac_cost_tables *t = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &t), AC_OK);
    /* runs at hidden 16 leave residuals 10000, 12000, 11000 (median 11000); none ran at
     * 12, which falls back to the tables' eps */
    for (int i = 0; i < 3; i++) {
        ac_memory_point mp = {16, 5e5 + 1e4 * (i == 0 ? 1.0 : i == 1 ? 1.2 : 1.1), 4e5, 2e4, 3e4, 5e4};
        assert_int_equal(ac_cost_tables_add_memory(t, &mp), AC_OK);
    }
    const ac_contract_search_space *s = &c->search;
    for (int h = 0; h < s->hidden_sizes.count; h++) {
        int d = s->hidden_sizes.values[h];
        for (int k = AC_ROW_ATTENTION; k <= AC_ROW_OTHER; k++)
            if (k != AC_ROW_MLP && k != AC_ROW_MOE)
                add_row(t, (ac_cost_row){.kind = (ac_row_kind)k, .hidden = d});
        add_row(t, (ac_cost_row){.kind = AC_ROW_MLP, .hidden = d, .ffn = 12});
        for (int m = 0; m < s->mamba_heads.values.count; m++)
            add_row(t, (ac_cost_row){.kind = AC_ROW_MAMBA, .hidden = d, .heads = s->mamba_heads.values.values[m]});
        for (int e = 0; e < s->routed_experts.count; e++)
            for (int f = 0; f < s->routed_ffn.count; f++)
                for (int g = 0; g < s->shared_ffn.count; g++) {
                    int E = s->routed_experts.values[e], I = s->routed_ffn.values[f], S = s->shared_ffn.values[g];
                    if (I > 0)
                        add_row(t, (ac_cost_row){.kind = AC_ROW_MOE, .hidden = d, .experts = E, .expert_ffn = I,
                                                 .shared_ffn = S});
                    else if (S > 0)
                        add_row(t, (ac_cost_row){.kind = AC_ROW_MLP, .hidden = d, .ffn = S});
                }
    }
    return t;
}

typedef struct {
    ac_contract contract;
    ac_arch parent;
    ac_cost_tables *tables;
    ac_cost_model *model;
} fixture;

static void setup(fixture *f, int layout)
{
    int global_heads = layout == GLOBAL_HEADS;
    assert_int_equal(ac_contract_parse_string(contract_text(global_heads), "test", &f->contract), AC_OK);
    make_parent(&f->parent, global_heads ? "MEM*E" : "ME*E");
    f->tables = make_tables(&f->contract);
    /* the default layout from ac_cost_model_create, the other one named */
    ac_status st = layout == PER_LAYER_HEADS ? ac_cost_model_create_with(f->tables, &f->parent, &f->contract,
                                                                         AC_MAMBA_REMOVAL_HEADS, &f->model)
                                             : ac_cost_model_create(f->tables, &f->parent, &f->contract, &f->model);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
}

static void teardown(fixture *f)
{
    ac_cost_model_free(f->model);
    ac_cost_tables_free(f->tables);
    ac_arch_free(&f->parent);
}

/* The row a layer of `b` at hidden d is timed by, found by the test's own rule. */
static const ac_cost_row *row_of(const ac_cost_tables *t, const ac_block_dims *b, int d)
{
    ac_cost_row k = {.kind = (ac_row_kind)b->kind, .hidden = d};
    if (b->kind == AC_BLOCK_MAMBA)
        k.heads = b->mamba_heads;
    if (b->kind == AC_BLOCK_MLP)
        k.ffn = b->ffn;
    if (b->kind == AC_BLOCK_MOE)
        k.experts = b->n_experts, k.expert_ffn = b->expert_ffn, k.shared_ffn = b->shared_ffn;
    const ac_cost_row *r = ac_cost_tables_find(t, &k);
    assert_non_null(r);
    return r;
}

static void random_choice(const ac_cost_model *m, uint64_t *seed, int *choice)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++)
        choice[a] = (int)(hash_value((*seed)++, 0, 1) * ac_cost_model_axis(m, a)->count);
}

static void check_sum_of_rows(int layout)
{
    fixture f;
    setup(&f, layout);
    int n_axes = ac_cost_model_axis_count(f.model), choice[64], back[64], parent_layer[16];
    assert_true(n_axes <= 64);
    uint64_t seed = 7;
    int mamba_removed = 0;
    for (int trial = 0; trial < 200; trial++) {
        random_choice(f.model, &seed, choice);
        ac_arch arch;
        ac_status st = ac_cost_choice_arch(f.model, choice, &arch, parent_layer);
        if (st != AC_OK) { /* every layer removed */
            assert_non_null(strstr(ac_error_message(), "removes every layer"));
            continue;
        }
        mamba_removed += parent_layer[0] != 0; /* parent layer 0 is a Mamba layer */
        ac_cost_prediction p;
        assert_int_equal(ac_cost_predict(f.model, choice, &p), AC_OK);
        double us = 0, pre = 0;
        for (int l = 0; l < arch.n_layers; l++) {
            const ac_cost_row *r = row_of(f.tables, &arch.layers[l], arch.hidden);
            us += ac_cost_row_workload_us(r, &f.contract.workload);
            pre += r->prefill_us;
        }
        for (int k = AC_ROW_EMBEDDING; k <= AC_ROW_OTHER; k++) {
            ac_cost_row key = {.kind = (ac_row_kind)k, .hidden = arch.hidden};
            const ac_cost_row *r = ac_cost_tables_find(f.tables, &key);
            us += ac_cost_row_workload_us(r, &f.contract.workload);
            pre += r->prefill_us;
        }
        assert_float_equal(p.latency_ms, us / 1000.0, 1e-9 * us);
        assert_float_equal(p.prefill_ms, pre / 1000.0, 1e-9 * us);
        double produced = 3.0 * 4.0;
        assert_float_equal(p.throughput_tok_s, produced / (us * 1e-6), 1e-6 * p.throughput_tok_s);
        ac_memory_terms mt = ac_memory_formula(&arch, f.contract.hardware.weights, &f.contract.workload, 2);
        assert_float_equal(p.weights_bytes, mt.weights, 1e-6);
        assert_float_equal(p.kv_bytes, mt.kv, 1e-6);
        assert_float_equal(p.state_bytes, mt.state, 1e-6);
        assert_float_equal(p.activation_bytes, mt.activations, 1e-6);
        double eps = arch.hidden == 16 ? 11000.0 : 12345.0;
        assert_float_equal(p.eps_bytes, eps, 1e-6);
        assert_float_equal(p.memory_bytes, mt.weights + mt.kv + mt.state + mt.activations + eps, 1e-6);
        assert_float_equal(p.conventional_bytes, mt.weights + mt.kv + mt.state, 1e-6);
        /* the architecture maps back to a choice with the same costs */
        assert_int_equal(ac_cost_arch_choice(f.model, &arch, back), AC_OK);
        ac_cost_prediction q;
        assert_int_equal(ac_cost_predict_arch(f.model, &arch, &q), AC_OK);
        assert_float_equal(q.latency_ms, p.latency_ms, 1e-12);
        assert_float_equal(q.memory_bytes, p.memory_bytes, 1e-6);
        ac_arch_free(&arch);
    }
    if (layout != GLOBAL_HEADS) /* where the Mamba layer is removable, the draws do remove it */
        assert_true(mamba_removed > 10);
    teardown(&f);
}

static void test_prediction_is_the_sum_of_rows(void **state)
{
    (void)state;
    for (int layout = 0; layout < N_LAYOUTS; layout++)
        check_sum_of_rows(layout);
}

static void random_probs(const ac_cost_model *m, uint64_t seed, double *p)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++) {
        const ac_cost_axis *x = ac_cost_model_axis(m, a);
        double sum = 0;
        for (int i = 0; i < x->count; i++)
            sum += p[x->offset + i] = exp(hash_value(seed++, -2, 2));
        for (int i = 0; i < x->count; i++)
            p[x->offset + i] /= sum;
    }
}

static void check_brute_force(int layout)
{
    fixture f;
    setup(&f, layout);
    int n_axes = ac_cost_model_axis_count(f.model), n_probs = ac_cost_model_prob_count(f.model);
    double *p = malloc((size_t)n_probs * sizeof *p);
    random_probs(f.model, 99, p);
    int choice[64] = {0};
    double lat = 0, mem = 0, w = 0, r = 0, total_p = 0;
    for (;;) {
        double weight = 1;
        for (int a = 0; a < n_axes; a++)
            weight *= p[ac_cost_model_axis(f.model, a)->offset + choice[a]];
        ac_cost_prediction c; /* a draw that removes every layer still has the fixed rows and buffers */
        assert_int_equal(ac_cost_predict(f.model, choice, &c), AC_OK);
        lat += weight * c.latency_ms;
        mem += weight * c.memory_bytes;
        w += weight * c.weights_bytes;
        r += weight * c.activation_bytes;
        total_p += weight;
        int a = 0;
        while (a < n_axes && ++choice[a] == ac_cost_model_axis(f.model, a)->count)
            choice[a++] = 0;
        if (a == n_axes)
            break;
    }
    assert_float_equal(total_p, 1.0, 1e-9);
    ac_cost_prediction e;
    assert_int_equal(ac_cost_expected(f.model, p, &e, NULL, NULL, NULL), AC_OK);
    assert_float_equal(e.latency_ms, lat, 1e-9 * lat);
    assert_float_equal(e.weights_bytes, w, 1e-9 * w);
    assert_float_equal(e.activation_bytes, r, 1e-9 * r); /* the expected maximum */
    assert_float_equal(e.memory_bytes, mem, 1e-9 * mem);
    free(p);
    teardown(&f);
}

static void test_expected_cost_equals_brute_force(void **state)
{
    (void)state;
    for (int layout = 0; layout < N_LAYOUTS; layout++)
        check_brute_force(layout);
}

static void check_gradients(int layout)
{
    fixture f;
    setup(&f, layout);
    int n = ac_cost_model_prob_count(f.model);
    double *p = malloc((size_t)n * sizeof *p), *gl = malloc((size_t)n * sizeof *gl), *gm = malloc((size_t)n * sizeof *gm),
           *gt = malloc((size_t)n * sizeof *gt);
    for (int trial = 0; trial < 3; trial++) {
        random_probs(f.model, 1000 + 100 * (uint64_t)trial, p);
        ac_cost_prediction base;
        assert_int_equal(ac_cost_expected(f.model, p, &base, gl, gm, gt), AC_OK);
        const double h = 1e-6;
        int nonzero_r = 0;
        for (int j = 0; j < n; j++) {
            double keep = p[j];
            ac_cost_prediction up, dn;
            p[j] = keep + h;
            assert_int_equal(ac_cost_expected(f.model, p, &up, NULL, NULL, NULL), AC_OK);
            p[j] = keep - h;
            assert_int_equal(ac_cost_expected(f.model, p, &dn, NULL, NULL, NULL), AC_OK);
            p[j] = keep;
            double fl = (up.latency_ms - dn.latency_ms) / (2 * h), fm = (up.memory_bytes - dn.memory_bytes) / (2 * h);
            double ft = (up.throughput_tok_s - dn.throughput_tok_s) / (2 * h);
            nonzero_r += fabs(up.activation_bytes - dn.activation_bytes) > 0;
            assert_float_equal(gl[j], fl, 1e-6 * (1 + fabs(fl)) + 1e-7 * base.latency_ms);
            assert_float_equal(gm[j], fm, 1e-6 * (1 + fabs(fm)) + 1e-7 * base.memory_bytes);
            assert_float_equal(gt[j], ft, 1e-5 * (1 + fabs(ft)) + 1e-7 * base.throughput_tok_s);
        }
        assert_true(nonzero_r > 0); /* the scratch maximum does depend on the choices */
    }
    free(p);
    free(gl);
    free(gm);
    free(gt);
    teardown(&f);
}

static void test_gradients_match_finite_differences(void **state)
{
    (void)state;
    for (int layout = 0; layout < N_LAYOUTS; layout++)
        check_gradients(layout);
}

static void test_axes_follow_the_contract(void **state)
{
    (void)state;
    fixture f;
    /* ME*E, per-layer heads with remove, mamba and moe removable: the Mamba layer gets a
     * keep axis and its heads axis only the contract's 4 and 2, or (the heads layout) no
     * keep axis and heads 4, 2 and 0 */
    const int layouts[] = {PER_LAYER_GATE, PER_LAYER_HEADS};
    for (int i = 0; i < 2; i++) {
        int layout = layouts[i];
        setup(&f, layout);
        int kinds[8] = {0}, global = 0, mamba_keep = 0;
        for (int a = 0; a < ac_cost_model_axis_count(f.model); a++) {
            const ac_cost_axis *x = ac_cost_model_axis(f.model, a);
            kinds[x->kind]++;
            global += x->layer < 0;
            mamba_keep += x->kind == AC_AXIS_KEEP && x->layer == 0;
            if (x->kind == AC_AXIS_MAMBA_HEADS) {
                assert_int_equal(x->layer, 0);
                assert_int_equal(x->count, layout == PER_LAYER_GATE ? 2 : 3);
                assert_int_equal(x->values[0], 4);
                assert_int_equal(x->values[1], 2);
                if (layout == PER_LAYER_HEADS)
                    assert_int_equal(x->values[2], 0);
            }
        }
        assert_int_equal(global, 1); /* hidden only */
        assert_int_equal(kinds[AC_AXIS_MAMBA_HEADS], 1);
        assert_int_equal(mamba_keep, layout == PER_LAYER_GATE);
        assert_int_equal(kinds[AC_AXIS_KEEP], 2 + (layout == PER_LAYER_GATE)); /* the MoE layers and the Mamba one */
        assert_int_equal(kinds[AC_AXIS_EXPERTS], 2);
        teardown(&f);
    }
    setup(&f, GLOBAL_HEADS); /* MEM*E, global heads */
    int heads_axes = 0;
    for (int a = 0; a < ac_cost_model_axis_count(f.model); a++)
        if (ac_cost_model_axis(f.model, a)->kind == AC_AXIS_MAMBA_HEADS) {
            heads_axes++;
            assert_int_equal(ac_cost_model_axis(f.model, a)->layer, -1);
        }
    assert_int_equal(heads_axes, 1);
    teardown(&f);
}

static const ac_cost_axis *axis_of(const ac_cost_model *m, ac_axis_kind kind, int layer)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++)
        if (ac_cost_model_axis(m, a)->kind == kind && ac_cost_model_axis(m, a)->layer == layer)
            return ac_cost_model_axis(m, a);
    fail_msg("no %s axis on layer %d", ac_axis_kind_name(kind), layer);
    return NULL;
}

/* The Mamba layer's keep axis (the default layout): the expected latency at keep
 * probability k is linear in k with the slope of the layer's own rows, averaged over the
 * hidden and head distributions by hand from the tables; the gradient of that axis says
 * the same (keep minus remove). */
static void test_mamba_keep_axis_is_linear(void **state)
{
    (void)state;
    fixture f;
    setup(&f, PER_LAYER_GATE);
    int n = ac_cost_model_prob_count(f.model);
    double *p = malloc((size_t)n * sizeof *p), *gl = malloc((size_t)n * sizeof *gl);
    random_probs(f.model, 4242, p);
    const ac_cost_axis *keep = axis_of(f.model, AC_AXIS_KEEP, 0), *heads = axis_of(f.model, AC_AXIS_MAMBA_HEADS, 0);
    const ac_cost_axis *hidden = axis_of(f.model, AC_AXIS_HIDDEN, -1);
    assert_int_equal(keep->values[0], 1);
    double slope = 0; /* ms per unit of keep probability: the layer's expected row */
    for (int h = 0; h < hidden->count; h++)
        for (int v = 0; v < heads->count; v++) {
            ac_cost_row k = {.kind = AC_ROW_MAMBA, .hidden = hidden->values[h], .heads = heads->values[v]};
            const ac_cost_row *r = ac_cost_tables_find(f.tables, &k);
            assert_non_null(r);
            double ms = ac_cost_row_workload_us(r, &f.contract.workload) / 1e3;
            slope += p[hidden->offset + h] * p[heads->offset + v] * ms;
        }
    assert_true(slope > 0);
    double lat[3];
    const double ks[3] = {0.0, 0.3, 1.0};
    for (int i = 0; i < 3; i++) {
        p[keep->offset] = ks[i], p[keep->offset + 1] = 1.0 - ks[i];
        ac_cost_prediction e;
        assert_int_equal(ac_cost_expected(f.model, p, &e, gl, NULL, NULL), AC_OK);
        lat[i] = e.latency_ms;
        assert_float_equal(gl[keep->offset] - gl[keep->offset + 1], slope, 1e-9 * lat[i]);
    }
    assert_float_equal(lat[2] - lat[0], slope, 1e-9 * lat[2]);
    assert_float_equal(lat[1], lat[0] + 0.3 * slope, 1e-9 * lat[2]);
    free(p);
    free(gl);
    teardown(&f);
}

static void test_missing_rows_and_other_workloads_are_refused(void **state)
{
    (void)state;
    fixture f;
    setup(&f, PER_LAYER_GATE);
    ac_cost_model *m = NULL;
    /* tables without the MoE rows of hidden 12 */
    ac_cost_tables_info info = *ac_cost_tables_get_info(f.tables);
    ac_cost_tables *partial = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &partial), AC_OK);
    for (size_t i = 0; i < ac_cost_tables_row_count(f.tables); i++) {
        const ac_cost_row *r = ac_cost_tables_row(f.tables, i);
        if (!(r->kind == AC_ROW_MOE && r->hidden == 12 && r->experts == 2))
            assert_int_equal(ac_cost_tables_add_row(partial, r), AC_OK);
    }
    assert_int_equal(ac_cost_model_create(partial, &f.parent, &f.contract, &m), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "no row for moe E2"));
    assert_non_null(strstr(ac_error_message(), "hidden 12"));
    ac_cost_tables_free(partial);
    ac_contract other = f.contract;
    other.workload.output_tokens = 99;
    assert_int_equal(ac_cost_model_create(f.tables, &f.parent, &other, &m), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "99 output"));
    /* an architecture outside the space */
    ac_arch arch;
    ac_arch_copy(&arch, &f.parent);
    arch.layers[1].n_experts = 3;
    ac_cost_prediction p;
    assert_int_equal(ac_cost_predict_arch(f.model, &arch, &p), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "outside the search space"));
    arch.hidden = 20;
    assert_int_equal(ac_cost_predict_arch(f.model, &arch, &p), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "hidden size 20"));
    ac_arch_free(&arch);
    teardown(&f);
}

/* A contract serving bf16 weights: the tables must say so (f32 ones are refused); the
 * predicted W is the bf16 serving copy's bytes (ac_arch_weight_bytes, up to the padding
 * that copy puts before each block of bf16 values), well under the f32 W; the contract
 * parses the setting. */
static void test_bf16_weights(void **state)
{
    (void)state;
    fixture f;
    setup(&f, PER_LAYER_GATE);
    const char *text = "name = \"b\"; hardware = { device = \"cpu\"; threads = 2; weights = \"bf16\"; };\n"
                       "workload = { batch = 3; cached_tokens = 5; input_tokens = 7; output_tokens = 4; };\n"
                       "targets = { latency_ms = 1.0; };\n"
                       "search_space = { hidden_sizes = [16, 12]; mamba_heads = { values = [4, 2]; scope = \"per_layer\";\n"
                       "  remove = true; }; routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 0];\n"
                       "  removable = [\"mamba\", \"moe\"]; };\n";
    ac_contract bf16;
    assert_int_equal(ac_contract_parse_string(text, "bf16", &bf16), AC_OK);
    assert_int_equal(bf16.hardware.weights, AC_DTYPE_BF16);
    assert_int_equal(f.contract.hardware.weights, AC_DTYPE_F32);
    ac_cost_model *m = NULL;
    assert_int_equal(ac_cost_model_create(f.tables, &f.parent, &bf16, &m), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "measured with f32 weights"));
    ac_cost_tables_info info = *ac_cost_tables_get_info(f.tables);
    info.weights = AC_DTYPE_BF16;
    ac_cost_tables_set_info(f.tables, &info);
    assert_int_equal(ac_cost_model_create(f.tables, &f.parent, &bf16, &m), AC_OK);
    int choice[64], parent_layer[16];
    uint64_t seed = 3;
    for (int trial = 0; trial < 50; trial++) {
        random_choice(m, &seed, choice);
        ac_arch arch;
        if (ac_cost_choice_arch(m, choice, &arch, parent_layer) != AC_OK)
            continue;
        ac_cost_prediction p;
        assert_int_equal(ac_cost_predict(m, choice, &p), AC_OK);
        double want = ac_memory_formula(&arch, AC_DTYPE_BF16, &bf16.workload, 2).weights;
        double f32 = ac_memory_formula(&arch, AC_DTYPE_F32, &bf16.workload, 2).weights;
        if (fabs(p.weights_bytes - want) > 16.0 * (arch.n_layers + 2))
            fail_msg("predicted W %.0f, the bf16 copy's %.0f", p.weights_bytes, want);
        assert_true(want < 0.6 * f32);
        ac_arch_free(&arch);
    }
    ac_cost_model_free(m);
    teardown(&f);
}

static void test_tables_round_trip_through_json(void **state)
{
    (void)state;
    fixture f;
    setup(&f, GLOBAL_HEADS);
    ac_memory_point mp = {12, 1e6, 5e5, 1e4, 2e4, 3e5};
    assert_int_equal(ac_cost_tables_add_memory(f.tables, &mp), AC_OK);
    double steps[3] = {1.5, 2.25, 3.0};
    ac_cost_row r = {.kind = AC_ROW_ATTENTION, .hidden = 16, .prefill_us = 7.5, .decode_a_us = 1, .decode_b_us = 0.5,
                     .n_steps = 3, .step_us = steps, .samples = 4};
    assert_int_equal(ac_cost_tables_add_row(f.tables, &r), AC_OK); /* replaces the attention row */
    char path[] = "/tmp/ac-tables-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ac_cost_tables_write(f.tables, path), AC_OK);
    ac_cost_tables *back = NULL;
    assert_int_equal(ac_cost_tables_read(path, &back), AC_OK);
    assert_int_equal(ac_cost_tables_row_count(back), ac_cost_tables_row_count(f.tables));
    for (size_t i = 0; i < ac_cost_tables_row_count(back); i++) {
        const ac_cost_row *a = ac_cost_tables_row(f.tables, i), *b = ac_cost_tables_row(back, i);
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->hidden, b->hidden);
        assert_int_equal(a->experts, b->experts);
        assert_int_equal(a->shared_ffn, b->shared_ffn);
        assert_float_equal(a->prefill_us, b->prefill_us, 1e-9);
        assert_float_equal(a->decode_b_us, b->decode_b_us, 1e-12);
        assert_int_equal(a->n_steps, b->n_steps);
        for (int t = 0; t < a->n_steps; t++)
            assert_float_equal(a->step_us[t], b->step_us[t], 0.005);
    }
    assert_int_equal(ac_cost_tables_memory_count(back), 4);
    assert_float_equal(ac_cost_tables_memory(back, 3)->kv, 1e4, 1e-9);
    assert_int_equal(ac_cost_tables_memory(back, 3)->hidden, 12);
    assert_float_equal(ac_cost_tables_get_info(back)->eps_bytes, 12345.0, 1e-9);
    assert_float_equal(ac_cost_tables_get_info(back)->reference_slope, 0.625, 1e-12);
    assert_int_equal(ac_cost_tables_get_info(back)->workload.cached_tokens, 5);
    assert_int_equal(ac_cost_tables_get_info(back)->weights, AC_DTYPE_F32);
    ac_cost_tables_free(back);
    /* a broken field is named */
    FILE *fp = fopen(path, "r");
    char *text = calloc(1 << 20, 1);
    size_t len = fread(text, 1, (1 << 20) - 1, fp);
    fclose(fp);
    char *at = strstr(text, "\"median_us\":");
    assert_non_null(at);
    memcpy(at, "\"medianus\": ", 12);
    fp = fopen(path, "w");
    fwrite(text, 1, len, fp);
    fclose(fp);
    assert_int_equal(ac_cost_tables_read(path, &back), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "rows[0].prefill.median_us"));
    assert_non_null(strstr(ac_error_message(), path));
    /* and served weights of a dtype the engine does not serve (the row mended) */
    memcpy(at, "\"median_us\":", 12);
    at = strstr(text, "\"weights\":\t\"f32\"");
    assert_non_null(at);
    memcpy(at + strlen("\"weights\":\t\""), "f16", 3);
    fp = fopen(path, "w");
    fwrite(text, 1, len, fp);
    fclose(fp);
    assert_int_equal(ac_cost_tables_read(path, &back), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "weights must be \"f32\" or \"bf16\", got \"f16\""));
    remove(path);
    assert_int_equal(ac_cost_tables_read(path, &back), AC_ERR_IO);
    free(text);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prediction_is_the_sum_of_rows),
        cmocka_unit_test(test_expected_cost_equals_brute_force),
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_axes_follow_the_contract),
        cmocka_unit_test(test_mamba_keep_axis_is_linear),
        cmocka_unit_test(test_missing_rows_and_other_workloads_are_refused),
        cmocka_unit_test(test_tables_round_trip_through_json),
        cmocka_unit_test(test_bf16_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
