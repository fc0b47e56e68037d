/* Discretisation of crafted router logits on a tiny parent whose synthetic cost rows grow
 * with the block's size (as in test_search.c): the fill ends on a choice that meets every
 * planned target and from which no single step up one axis still meets them (every step
 * tried by the test with the cost model), and uses more of the budget than the argmax
 * left alone; the candidates are distinct, feasible, the pick first, then one per hidden
 * size, then the rest in descending log-probability, each with the log-probability of
 * the most probable choice that gives its architecture (found by enumerating the whole
 * space); every repair step's importance is on one
 * scale: a layer's removal at full width costs its share of the depth scores, a step
 * inside it no more. */
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
#include "autocompress/importance.h"
#include "autocompress/model.h"
#include "autocompress/search.h"
#include "search/search_loop.h"
#include "space_rows.h"

enum { V = 48, D = 16, MAX_AXES = 64, MAX_PROBS = 256 };

static const char *contract_text =
    "name = \"tiny\"; hardware = { device = \"cpu\"; threads = 1; };\n"
    "workload = { batch = 1; input_tokens = 8; output_tokens = 4; };\n"
    "targets = { latency_ratio = 0.5; };\n"
    "search_space = { hidden_sizes = [16, 12, 8]; mamba_heads = { values = [4, 2]; scope = \"per_layer\";\n"
    "  remove = true; }; routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 4, 0];\n"
    "  removable = [\"mamba\", \"moe\"]; };\n";

typedef struct {
    ac_model *parent;
    ac_contract contract;
    ac_cost_tables *tables;
    ac_cost_model *cost;
    ac_importance imp;
    ac_cost_prediction parent_cost;
    int n_axes;
} fixture;

static void make_parent(ac_arch *a)
{
    const char *kinds = "ME*M-E";
    int n = (int)strlen(kinds);
    *a = (ac_arch){.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    for (int i = 0; i < n; i++) {
        a->layers[i] = (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                                       .conv_kernel = 4, .attn_heads = 2, .attn_kv_heads = 1, .attn_head_dim = 8,
                                       .ffn = 12, .n_experts = 4, .top_k = 2, .expert_ffn = 8, .shared_ffn = 8,
                                       .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 1.0f};
        a->layers[i].kind = kinds[i] == 'M' ? AC_BLOCK_MAMBA : kinds[i] == '*' ? AC_BLOCK_ATTENTION
                            : kinds[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
}

/* A row costing in proportion to the block's width (and to the hidden size). */
static void put_sized_row(ac_cost_row r, void *tables)
{
    double size = r.kind == AC_ROW_ATTENTION ? 4
                  : r.kind == AC_ROW_MLP     ? r.ffn / 4.0
                  : r.kind == AC_ROW_MAMBA   ? 2.0 * r.heads
                  : r.kind == AC_ROW_MOE     ? r.experts * 0.5 + r.expert_ffn + r.shared_ffn / 4.0
                                             : 1;
    r.prefill_us = 20.0 * size * r.hidden / D;
    r.decode_a_us = 1.0 * size * r.hidden / D;
    r.samples = 1;
    assert_int_equal(ac_cost_tables_add_row(tables, &r), AC_OK);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    ac_arch a;
    make_parent(&a);
    assert_int_equal(ac_model_create(&a, &f->parent), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(f->parent, 5, 0.3f);
    assert_int_equal(ac_contract_parse_string(contract_text, "tiny.cfg", &f->contract), AC_OK);
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", f->contract.name);
    info.workload = f->contract.workload;
    info.threads = 1;
    info.eps_bytes = 1000.0;
    assert_int_equal(ac_cost_tables_create(&info, &f->tables), AC_OK);
    space_rows(&f->contract.search, 12, put_sized_row, f->tables);
    ac_memory_point mp = {D, 3e5, 2e5, 1e4, 1e4, 5e4};
    assert_int_equal(ac_cost_tables_add_memory(f->tables, &mp), AC_OK);
    const ac_arch *pa = ac_model_arch(f->parent);
    assert_int_equal(ac_cost_model_create(f->tables, pa, &f->contract, &f->cost), AC_OK);
    f->n_axes = ac_cost_model_axis_count(f->cost);
    assert_true(f->n_axes <= MAX_AXES && ac_cost_model_prob_count(f->cost) <= MAX_PROBS);
    int32_t tokens[2 * 16];
    for (int i = 0; i < 32; i++)
        tokens[i] = (int32_t)((i * 5 + 1) % V);
    assert_int_equal(ac_importance_compute(f->parent, tokens, 2, 16, &f->imp), AC_OK);
    assert_int_equal(ac_cost_predict_arch(f->cost, pa, &f->parent_cost), AC_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ac_importance_free(&f->imp);
    ac_cost_model_free(f->cost);
    ac_cost_tables_free(f->tables);
    ac_model_free(f->parent);
    free(f);
    return 0;
}

/* Whether p meets t, compared field by field. */
static int within(const ac_budget_targets *t, const ac_cost_prediction *p)
{
    return (t->latency_ms <= 0 || p->latency_ms <= t->latency_ms) &&
           (t->memory_bytes <= 0 || p->memory_bytes <= t->memory_bytes) &&
           (t->throughput_tok_s <= 0 || p->throughput_tok_s >= t->throughput_tok_s);
}

/* Whether two architectures with their parent layers are the same. */
static int same_arch(const ac_arch *a, const int *la, const ac_arch *b, const int *lb)
{
    if (a->hidden != b->hidden || a->n_layers != b->n_layers)
        return 0;
    for (int i = 0; i < a->n_layers; i++) {
        const ac_block_dims *x = &a->layers[i], *y = &b->layers[i];
        if (la[i] != lb[i] || x->kind != y->kind || x->mamba_heads != y->mamba_heads || x->n_experts != y->n_experts ||
            x->top_k != y->top_k || x->expert_ffn != y->expert_ffn || x->shared_ffn != y->shared_ffn || x->ffn != y->ffn)
            return 0;
    }
    return 1;
}

static int same_choice_arch(const ac_cost_model *cost, const int *a, const int *b)
{
    ac_arch x, y;
    int lx[16], ly[16];
    assert_int_equal(ac_cost_choice_arch(cost, a, &x, lx), AC_OK);
    assert_int_equal(ac_cost_choice_arch(cost, b, &y, ly), AC_OK);
    int same = same_arch(&x, lx, &y, ly);
    ac_arch_free(&x);
    ac_arch_free(&y);
    return same;
}

/* Fails when `trial` changes the architecture and still meets t; *noop: it changes nothing. */
static void check_trial(const fixture *f, const int *choice, const int *trial, const ac_budget_targets *t, int *noop,
                        int *steps)
{
    ac_cost_prediction p;
    *noop = 0;
    if (ac_cost_predict(f->cost, trial, &p) != AC_OK) { /* not buildable: no step */
        ac_clear_error();
        return;
    }
    *noop = same_choice_arch(f->cost, choice, trial);
    if (*noop)
        return;
    (*steps)++;
    if (within(t, &p))
        fail_msg("a step up still meets the targets (%.3f ms, %.0f bytes)", p.latency_ms, p.memory_bytes);
}

/* No step up one axis that changes the architecture still meets t, nor (where such a step
 * changes nothing, as restoring a layer whose widths are all 0) one with one more step;
 * returns how many such moves there were. */
static int check_no_step_up_fits(const fixture *f, const int *choice, const ac_budget_targets *t)
{
    int trial[MAX_AXES], steps = 0, noop, ignored;
    for (int a = 0; a < f->n_axes; a++) {
        if (choice[a] == 0)
            continue;
        memcpy(trial, choice, (size_t)f->n_axes * sizeof *trial);
        trial[a]--;
        check_trial(f, choice, trial, t, &noop, &steps);
        for (int b = 0; noop && b < f->n_axes; b++)
            if (trial[b] > 0) {
                trial[b]--;
                check_trial(f, choice, trial, t, &ignored, &steps);
                trial[b]++;
            }
    }
    return steps;
}

/* Logits at temperature 1 whose argmax is each axis's smallest value with p > 0.95
 * (decided), but layer 0's axes at their largest (kept at full width) and layer 3's
 * at their smallest (removed). */
static void small_argmax(const fixture *f, float *logits)
{
    for (int a = 0; a < f->n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(f->cost, a);
        for (int i = 0; i < ax->count; i++)
            logits[ax->offset + i] = 0.0f;
        logits[ax->offset + (ax->layer == 0 ? 0 : ax->count - 1)] = 5.0f;
    }
}

static void discretize(const fixture *f, const float *logits, const ac_budget_targets *t, int fill, int candidates,
                       ac_discrete_choice *d, ac_search_report *r)
{
    ac_discretize_inputs in = {f->cost, ac_model_arch(f->parent), &f->imp, t, logits, 1.0f, fill, candidates};
    memset(r, 0, sizeof *r);
    assert_int_equal(ac_search_discretize(&in, d, r), AC_OK);
}

static void test_fill_spends_the_budget(void **state)
{
    fixture *f = *state;
    float logits[MAX_PROBS];
    small_argmax(f, logits);
    ac_budget_targets t = {.latency_ms = 0.8 * f->parent_cost.latency_ms, .memory_bytes = 0.95 * f->parent_cost.memory_bytes};
    ac_discrete_choice off, on;
    ac_search_report r_off, r_on;
    discretize(f, logits, &t, 0, 0, &off, &r_off);
    discretize(f, logits, &t, 1, 0, &on, &r_on);
    printf("latency %.3f -> %.3f ms of %.3f planned, memory %.0f -> %.0f of %.0f, %d fill steps\n",
           r_off.chosen.latency_ms, r_on.chosen.latency_ms, t.latency_ms, r_off.chosen.memory_bytes,
           r_on.chosen.memory_bytes, t.memory_bytes, r_on.fill_steps);
    /* the argmax is well under: no repair, and without the fill it stays there */
    assert_int_equal(r_off.repair_steps, 0);
    assert_int_equal(r_off.fill_steps, 0);
    assert_true(r_off.chosen.latency_ms < 0.7 * t.latency_ms);
    /* with it: every target met, and no step up one axis meets them still */
    ac_cost_prediction p;
    assert_int_equal(ac_cost_predict(f->cost, on.choice, &p), AC_OK);
    assert_true(within(&t, &p) && r_on.meets);
    assert_true(check_no_step_up_fits(f, on.choice, &t) > 0);
    assert_true(r_on.fill_steps > 0);
    for (int i = 0; i < r_on.fill_steps; i++)
        assert_int_equal(on.fills[i].to, on.fills[i].from - 1);
    /* more of the budget used; the report's use is the binding target's */
    assert_true(p.latency_ms > r_off.chosen.latency_ms);
    int latency_binds = p.latency_ms / t.latency_ms > p.memory_bytes / t.memory_bytes;
    double use = latency_binds ? p.latency_ms / t.latency_ms : p.memory_bytes / t.memory_bytes;
    double use_off = latency_binds ? r_off.chosen.latency_ms / t.latency_ms : r_off.chosen.memory_bytes / t.memory_bytes;
    assert_string_equal(r_on.binding, latency_binds ? "latency" : "memory");
    assert_float_equal(r_on.binding_use, use, 1e-12);
    assert_float_equal(r_on.unfilled_use, use_off, 1e-12);
    assert_true(use > use_off);
    /* before the fill is the choice without it */
    assert_memory_equal(on.unfilled, off.choice, (size_t)f->n_axes * sizeof(int));
    assert_float_equal(r_on.unfilled.latency_ms, r_off.chosen.latency_ms, 1e-12);
    ac_search_report_free(&r_off);
    ac_search_report_free(&r_on);
    ac_discrete_choice_free(&off);
    ac_discrete_choice_free(&on);
}

/* Whether every axis of layer l but its keep axis is at its largest value. */
static int full_width(const fixture *f, const int *choice, int l)
{
    for (int a = 0; a < f->n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(f->cost, a);
        if (ax->layer == l && ax->kind != AC_AXIS_KEEP && choice[a] != 0)
            return 0;
    }
    return 1;
}

/* The repair's steps from the parent down to a tight target: a layer's removal at full
 * width costs its share of the depth scores, a hidden step the share of the hidden scores it drops, and a
 * step inside a layer no more than removing it would; the fill after it ends where no
 * step up fits. */
static void test_importance_on_one_scale(void **state)
{
    fixture *f = *state;
    float logits[MAX_PROBS] = {0};
    for (int a = 0; a < f->n_axes; a++)
        logits[ac_cost_model_axis(f->cost, a)->offset] = 5.0f; /* the parent, decided */
    ac_budget_targets t = {.latency_ms = 0.35 * f->parent_cost.latency_ms};
    ac_discrete_choice d;
    ac_search_report r;
    discretize(f, logits, &t, 1, 0, &d, &r);
    assert_true(r.repair_steps > 0 && r.meets);
    const ac_arch *pa = ac_model_arch(f->parent);
    double depth = 0, hidden = 0;
    for (int l = 0; l < pa->n_layers; l++)
        depth += f->imp.depth[l];
    for (int c = 0; c < D; c++)
        hidden += f->imp.hidden_channels[c];
    for (int i = 0; i < r.repair_steps; i++) {
        const ac_axis_step *s = &d.repairs[i];
        const ac_cost_axis *ax = ac_cost_model_axis(f->cost, s->axis);
        printf("repair %s L%d %d -> %d: importance %.4f\n", ac_axis_kind_name(ax->kind), ax->layer,
               ax->values[s->from], ax->values[s->to], s->importance);
        if (ax->kind == AC_AXIS_HIDDEN) {
            double dropped = 0;
            for (int c = ax->values[s->to]; c < ax->values[s->from]; c++)
                dropped += f->imp.hidden_channels[c];
            assert_float_equal(s->importance, dropped / hidden, 1e-9);
        } else if (ax->kind == AC_AXIS_KEEP && full_width(f, d.unfilled, ax->layer)) {
            assert_float_equal(s->importance, f->imp.depth[ax->layer] / depth, 1e-9);
        } else if (ax->layer >= 0) {
            assert_true(s->importance <= f->imp.depth[ax->layer] / depth + 1e-9);
        }
    }
    check_no_step_up_fits(f, d.choice, &t);
    ac_search_report_free(&r);
    ac_discrete_choice_free(&d);
}

/* The largest log-probability of a choice giving each candidate's architecture, by
 * enumerating every choice of the space: best[i] for candidate i. */
static void best_log_probs(const fixture *f, const double *logp, const ac_search_report *r, double *best)
{
    int choice[MAX_AXES] = {0}, layers[16];
    for (int i = 0; i < r->n_candidates; i++)
        best[i] = -INFINITY;
    for (;;) {
        ac_arch arch;
        if (ac_cost_choice_arch(f->cost, choice, &arch, layers) == AC_OK) {
            double lp = 0;
            for (int a = 0; a < f->n_axes; a++)
                lp += logp[ac_cost_model_axis(f->cost, a)->offset + choice[a]];
            for (int i = 0; i < r->n_candidates; i++)
                if (same_arch(&arch, layers, &r->candidates[i].arch, r->candidates[i].parent_layers))
                    best[i] = fmax(best[i], lp);
            ac_arch_free(&arch);
        } else {
            ac_clear_error();
        }
        int a = 0;
        while (a < f->n_axes && ++choice[a] == ac_cost_model_axis(f->cost, a)->count)
            choice[a++] = 0;
        if (a == f->n_axes)
            break;
    }
}

static void test_candidates_distinct_feasible_ordered(void **state)
{
    fixture *f = *state;
    float logits[MAX_PROBS];
    double logp[MAX_PROBS];
    for (int i = 0; i < MAX_PROBS; i++)
        logits[i] = (float)(1.5 * sin(1.7 * i + 0.3));
    for (int a = 0; a < f->n_axes; a++) { /* log softmax at temperature 1 */
        const ac_cost_axis *ax = ac_cost_model_axis(f->cost, a);
        double sum = 0;
        for (int i = 0; i < ax->count; i++)
            sum += exp(logits[ax->offset + i]);
        for (int i = 0; i < ax->count; i++)
            logp[ax->offset + i] = logits[ax->offset + i] - log(sum);
    }
    ac_budget_targets t = {.latency_ms = 0.6 * f->parent_cost.latency_ms};
    ac_discrete_choice d;
    ac_search_report r;
    discretize(f, logits, &t, 1, 4, &d, &r);
    printf("%d candidates\n", r.n_candidates);
    assert_true(r.meets);
    assert_true(r.n_candidates >= 2 && r.n_candidates <= 4);
    double best[4];
    best_log_probs(f, logp, &r, best);
    int chosen = 0, phase[4];
    for (int i = 0; i < r.n_candidates; i++) {
        const ac_search_candidate *c = &r.candidates[i];
        ac_cost_prediction p;
        assert_int_equal(ac_cost_predict_arch(f->cost, &c->arch, &p), AC_OK);
        printf("  %d: log p %.4f (best choice %.4f), %.3f ms of %.3f%s\n", i, c->log_prob, best[i], p.latency_ms,
               t.latency_ms, c->chosen ? ", chosen" : "");
        assert_float_equal(p.latency_ms, c->predicted.latency_ms, 1e-9 * p.latency_ms);
        assert_true(within(&t, &p));
        assert_float_equal(c->log_prob, best[i], 1e-9);
        /* the reading order: the pick, then each hidden size's most probable, then the rest
         * by log-probability */
        int new_hidden = 1;
        for (int j = 0; j < i; j++)
            new_hidden &= r.candidates[j].arch.hidden != c->arch.hidden;
        phase[i] = i == 0 ? 0 : new_hidden ? 1 : 2;
        assert_int_equal(c->chosen, i == 0);
        if (i > 0)
            assert_true(phase[i] >= phase[i - 1]);
        if (i > 1 && phase[i] == phase[i - 1])
            assert_true(c->log_prob <= r.candidates[i - 1].log_prob);
        for (int j = 0; j < i; j++)
            assert_false(same_arch(&c->arch, c->parent_layers, &r.candidates[j].arch, r.candidates[j].parent_layers));
        if (c->chosen) {
            chosen++;
            int layers[16];
            ac_arch pick;
            assert_int_equal(ac_cost_choice_arch(f->cost, d.choice, &pick, layers), AC_OK);
            assert_true(same_arch(&pick, layers, &c->arch, c->parent_layers));
            ac_arch_free(&pick);
        }
    }
    assert_int_equal(chosen, 1);
    assert_true(r.n_candidates >= 2 && r.candidates[1].arch.hidden != r.candidates[0].arch.hidden);
    ac_search_report_free(&r);
    ac_discrete_choice_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_spends_the_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_importance_on_one_scale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_candidates_distinct_feasible_ordered, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
