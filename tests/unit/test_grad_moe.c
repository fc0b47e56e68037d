/* MoE backward against central finite differences: one MoE layer (hidden 16, 8 experts
 * of width 6, a shared expert of width 5, routed_scaling 2.5), a packed batch of two
 * sequences (5 and 9 tokens) in training mode, soft masks on experts, expert channels and
 * shared channels, loss = sum(out * R) so that dL/dout = R. Cases: top 2 with normalised
 * weights; 4 groups keeping 2 with top 3; unnormalised weights; no shared expert; the
 * expert mask on the scores before the top-k (score masking) instead of the outputs.
 *
 * The top-k selection is piecewise constant; a finite difference that crosses a
 * selection boundary measures a jump, not a gradient. The inputs are therefore chosen
 * (by seed) so that every token's selection scores c = sigmoid(logit) + bias have a
 * margin of SELECTION_MARGIN at every decision (k-th vs next expert, kept vs dropped
 * group), above what one perturbation can move them (|x| <= 1, |router| <= 1, s' <= 1/4):
 *   router weight, eps 1e-2: one expert's c moves <= 2.5e-3;
 *   input, eps 3e-3: every c moves <= 7.5e-4, a group score <= 1.5e-3, a difference of
 *   two group scores <= 3e-3;
 *   bias, eps 3e-3: one c moves 3e-3.
 * Every loss evaluation also checks that the routing did not change (counted, asserted
 * zero). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_check.h"
#include "runtime/runtime_internal.h"

/* The f32 loss carries rounding noise of ~5e-7, which turns into errors of ~1e-4 / eps
 * (measured: up to 1.6e-4 at eps 1e-3), so eps is as large as the function allows:
 * EPS_SMOOTH where the loss is smooth in the parameter (router weights, down
 * projections, masks), EPS_KINK where it feeds a relu2 (inputs, up projections; a
 * difference straddling relu's kink errs by O(eps): 2.5% at eps 1e-2, measured) and for
 * the bias (its step moves a selection score by eps itself). */
#define EPS_SMOOTH 1e-2f
#define EPS_KINK 3e-3f
#define FD_ATOL 1e-4
#define FD_RTOL 5e-3
#define SAMPLES 40
#define SELECTION_MARGIN 6e-3

enum { N_SEQS = 2, HIDDEN = 16 };
static const int seq_len[N_SEQS] = {5, 9};

typedef struct {
    const char *name;
    int top_k, n_group, topk_group, norm, shared;
    int score_masking; /* the expert mask on the scores before the top-k, not on the outputs */
} moe_case;

typedef struct {
    const moe_case *c;
    ac_model *model, *grads; /* grads: a zero model whose layer 0 receives weight gradients */
    ac_runtime *rt;
    int offset[N_SEQS], len[N_SEQS];
    ac_seqs seqs;
    int T, D, E, I, S, k;
    float *xn, *R, *out, *dxn;
    float *mask_e, *mask_f, *mask_s;    /* soft masks in (0.3, 1) */
    float *gmask_e, *gmask_f, *gmask_s; /* their gradients */
    ac_block_masks masks;
    const ac_block_masks *use_masks;    /* what the loss runs with */
    const float *score_mask;            /* top-k score masking in the routing (NULL: none) */
    float masked_bias[64];
    /* routing bookkeeping for flip detection */
    float *logits, *weight;
    int32_t *idx, *base_idx;
    int flips;
} fixture;

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The smallest gap, over tokens, at the selection's decision boundaries: between the
 * topk_group-th and next group score, and between the top_k-th and next expert among
 * the experts of the kept groups. */
static double selection_margin(const fixture *f)
{
    const ac_block_dims *b = &f->model->arch.layers[0];
    const float *bias = f->score_mask ? f->masked_bias : f->model->layers[0].router_bias;
    int E = f->E, G = b->n_group, per = E / G;
    double margin = INFINITY;
    for (int t = 0; t < f->T; t++) {
        double c[64], gs[64], cand[64];
        int kept[64], n = 0;
        for (int e = 0; e < E; e++)
            c[e] = (double)sigmoid(f->logits[(size_t)t * E + e]) + bias[e];
        for (int g = 0; g < G; g++) {
            double b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++)
                if (c[e] > b1) {
                    b2 = b1;
                    b1 = c[e];
                } else if (c[e] > b2) {
                    b2 = c[e];
                }
            gs[g] = per >= 2 ? b1 + b2 : b1;
            kept[g] = 1;
        }
        if (G > 1) {
            /* rank groups: kept are the topk_group best */
            for (int g = 0; g < G; g++) {
                int better = 0;
                for (int h = 0; h < G; h++)
                    better += gs[h] > gs[g];
                kept[g] = better < b->topk_group;
            }
            double worst_kept = INFINITY, best_dropped = -INFINITY;
            for (int g = 0; g < G; g++)
                if (kept[g])
                    worst_kept = fmin(worst_kept, gs[g]);
                else
                    best_dropped = fmax(best_dropped, gs[g]);
            margin = fmin(margin, worst_kept - best_dropped);
        }
        for (int g = 0; g < G; g++)
            if (kept[g])
                for (int e = g * per; e < (g + 1) * per; e++)
                    cand[n++] = c[e];
        /* the top_k-th and (top_k+1)-th candidates */
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (cand[j] > cand[i]) {
                    double s = cand[i];
                    cand[i] = cand[j];
                    cand[j] = s;
                }
        if (n > f->k)
            margin = fmin(margin, cand[f->k - 1] - cand[f->k]);
    }
    return margin;
}

/* Routing of the current xn and router weights into f->idx. */
static void route(fixture *f)
{
    const ac_block_dims *b = &f->model->arch.layers[0];
    const ac_layer_weights *w = &f->model->layers[0];
    const float *bias = w->router_bias;
    ac_k_linear(&f->rt->kctx, f->T, f->E, f->D, f->xn, f->D, w->router, 0.0f, f->logits, f->E);
    if (f->score_mask) {
        ac_k_moe_mask_scores(&f->rt->kctx, f->T, f->E, f->score_mask, bias, f->logits, f->masked_bias);
        bias = f->masked_bias;
    }
    ac_k_moe_route(&f->rt->kctx, f->T, f->E, f->logits, bias, b->n_group, b->topk_group, f->k,
                   b->norm_topk_prob, b->routed_scaling, f->idx, f->weight);
}

/* 1 when every token picks the same set of experts as in base_idx. */
static int same_selection(const fixture *f)
{
    for (int t = 0; t < f->T; t++)
        for (int j = 0; j < f->k; j++) {
            int found = 0;
            for (int q = 0; q < f->k; q++)
                found |= f->idx[t * f->k + j] == f->base_idx[t * f->k + q];
            if (!found)
                return 0;
        }
    return 1;
}

static void forward(fixture *f, const ac_seqs *seqs, const ac_block_masks *masks, float *out)
{
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_moe_ops.forward(&c, 0, seqs, f->xn, masks, out);
}

static double loss(void *ctx)
{
    fixture *f = ctx;
    route(f);
    if (!same_selection(f))
        f->flips++;
    forward(f, &f->seqs, f->use_masks, f->out);
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)f->T * f->D; i++)
        sum += (double)f->out[i] * f->R[i];
    return sum;
}

static void backward(fixture *f, const ac_block_masks *masks, ac_layer_weights *grad, ac_block_mask_grads *mg)
{
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_moe_ops.backward(&c, 0, &f->seqs, f->xn, masks, f->R, f->dxn, grad, mg);
}

static void zero_grads(fixture *f)
{
    size_t n;
    float *arena = ac_model_arena(f->grads, &n);
    memset(arena, 0, n * sizeof *arena);
    memset(f->gmask_e, 0, (size_t)f->E * sizeof(float));
    memset(f->gmask_f, 0, (size_t)f->I * sizeof(float));
    if (f->S)
        memset(f->gmask_s, 0, (size_t)f->S * sizeof(float));
}

static float *alloc_floats(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

static fixture *create(const moe_case *c)
{
    fixture *f = calloc(1, sizeof *f);
    ac_arch a = {.vocab = 8, .hidden = HIDDEN, .norm_eps = 1e-5f, .chunk_size = 8, .time_step_min = 0.0f};
    assert_non_null(f);
    assert_int_equal(ac_arch_alloc_layers(&a, 1), AC_OK);
    a.layers[0] = (ac_block_dims){.kind = AC_BLOCK_MOE, .n_experts = 8, .top_k = c->top_k, .expert_ffn = 6,
                                  .shared_ffn = c->shared, .n_group = c->n_group, .topk_group = c->topk_group,
                                  .norm_topk_prob = c->norm, .routed_scaling = 2.5f};
    assert_int_equal(ac_model_create(&a, &f->model), AC_OK);
    assert_int_equal(ac_model_create(&a, &f->grads), AC_OK);
    ac_arch_free(&a);
    f->c = c;
    f->D = HIDDEN;
    f->E = 8;
    f->I = 6;
    f->S = c->shared;
    f->k = c->top_k;
    for (size_t i = 0; i < ac_model_param_count(f->model); i++) {
        const ac_param *p = ac_model_param(f->model, i);
        gc_fill(p->data, p->count, -0.5f, 0.5f, 100 + i);
    }
    /* a router that spreads tokens over the experts: logits of order 1, a small bias */
    gc_fill(f->model->layers[0].router, (size_t)f->E * f->D, -1.0f, 1.0f, 11);
    gc_fill(f->model->layers[0].router_bias, (size_t)f->E, -0.05f, 0.05f, 12);
    for (int s = 0; s < N_SEQS; s++) {
        f->offset[s] = f->T;
        f->len[s] = seq_len[s];
        f->T += seq_len[s];
    }
    f->seqs = (ac_seqs){.n = N_SEQS, .total = f->T, .offset = f->offset, .len = f->len, .caches = NULL};
    size_t n = (size_t)f->T * f->D;
    f->xn = alloc_floats(n);
    f->R = alloc_floats(n);
    f->out = alloc_floats(n);
    f->dxn = alloc_floats(n);
    f->mask_e = alloc_floats((size_t)f->E);
    f->mask_f = alloc_floats((size_t)f->I);
    f->mask_s = alloc_floats((size_t)f->S);
    f->gmask_e = alloc_floats((size_t)f->E);
    f->gmask_f = alloc_floats((size_t)f->I);
    f->gmask_s = alloc_floats((size_t)f->S);
    f->logits = alloc_floats((size_t)f->T * f->E);
    f->weight = alloc_floats((size_t)f->T * f->k);
    f->idx = malloc((size_t)f->T * f->k * sizeof(int32_t));
    f->base_idx = malloc((size_t)f->T * f->k * sizeof(int32_t));
    assert_true(f->xn && f->R && f->out && f->dxn && f->mask_e && f->mask_f && f->mask_s && f->gmask_e &&
                f->gmask_f && f->gmask_s && f->logits && f->weight && f->idx && f->base_idx);
    assert_int_equal(ac_runtime_create(f->model, &f->rt), AC_OK);
    assert_int_equal(ac_runtime_reserve_training(f->rt, f->T, N_SEQS), AC_OK);
    gc_fill(f->R, n, -1.0f, 1.0f, 2);
    gc_fill(f->mask_e, (size_t)f->E, 0.3f, 1.0f, 3);
    gc_fill(f->mask_f, (size_t)f->I, 0.3f, 1.0f, 4);
    gc_fill(f->mask_s, (size_t)f->S, 0.3f, 1.0f, 5);
    f->masks = (ac_block_masks){.experts = f->mask_e, .ffn = f->mask_f, .shared_ffn = f->S ? f->mask_s : NULL};
    if (c->score_masking) {
        f->masks.experts = NULL;
        f->masks.expert_scores = f->mask_e;
        f->score_mask = f->mask_e; /* the selection the margin is found for is the masked one */
    }
    /* inputs whose selections are well separated */
    double margin = 0.0;
    uint64_t seed = 1;
    for (; seed < 1000 && margin < SELECTION_MARGIN; seed++) {
        gc_fill(f->xn, n, -1.0f, 1.0f, seed * 7919);
        route(f);
        margin = selection_margin(f);
    }
    assert_true(margin >= SELECTION_MARGIN);
    memcpy(f->base_idx, f->idx, (size_t)f->T * f->k * sizeof(int32_t));
    int used = 0;
    for (int e = 0; e < f->E; e++) {
        int hit = 0;
        for (int i = 0; i < f->T * f->k; i++)
            hit |= f->idx[i] == e;
        used += hit;
    }
    printf("  %s: input seed %llu, selection margin %.3g, %d of %d experts used\n", c->name,
           (unsigned long long)(seed - 1), margin, used, f->E);
    return f;
}

static void destroy(fixture *f)
{
    ac_runtime_free(f->rt);
    ac_model_free(f->model);
    ac_model_free(f->grads);
    float *bufs[] = {f->xn, f->R, f->out, f->dxn, f->mask_e, f->mask_f, f->mask_s,
                     f->gmask_e, f->gmask_f, f->gmask_s, f->logits, f->weight};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(f->idx);
    free(f->base_idx);
    free(f);
}

/* Where the expert mask's gradient goes: the output mask's or the score mask's slot. */
static ac_block_mask_grads expert_mask_grads(const fixture *f)
{
    ac_block_mask_grads mg = {.ffn = f->gmask_f, .shared_ffn = f->gmask_s};
    if (f->c->score_masking)
        mg.expert_scores = f->gmask_e;
    else
        mg.experts = f->gmask_e;
    return mg;
}

typedef struct {
    const char *name;
    float *x;
    const float *g;
    size_t n;
    float eps;
} check;

static int run_checks(fixture *f, const check *checks, size_t count)
{
    int failed = 0;
    for (size_t c = 0; c < count; c++) {
        gc_result r = gc_check(checks[c].name, checks[c].x, checks[c].n, checks[c].g, SAMPLES, loss, f, checks[c].eps,
                               FD_ATOL, FD_RTOL);
        assert_true(r.checked >= (int)(checks[c].n < SAMPLES ? checks[c].n : SAMPLES));
        failed += r.failed;
    }
    return failed;
}

/* Every weight, the input and every mask against finite differences, masks on. */
static void check_gradients(fixture *f)
{
    ac_layer_weights *w = &f->model->layers[0];
    ac_layer_weights *g = &f->grads->layers[0];
    size_t D = (size_t)f->D, E = (size_t)f->E, I = (size_t)f->I, S = (size_t)f->S;
    ac_block_mask_grads mg = expert_mask_grads(f);
    zero_grads(f);
    backward(f, &f->masks, g, &mg);
    for (size_t e = 0; e < E; e++)
        assert_true(g->router_bias[e] == 0.0f); /* the correction bias only selects */
    f->use_masks = &f->masks;
    f->flips = 0;
    check checks[] = {
        {"dxn", f->xn, f->dxn, (size_t)f->T * D, EPS_KINK},
        {"gate.weight", w->router, g->router, E * D, EPS_SMOOTH},
        {"e_score_correction_bias", w->router_bias, g->router_bias, E, EPS_KINK},
        {"experts.up_proj", w->experts_up, g->experts_up, E * I * D, EPS_KINK},
        {"experts.down_proj", w->experts_down, g->experts_down, E * D * I, EPS_SMOOTH},
        {f->score_mask ? "mask.expert_scores" : "mask.experts", f->mask_e, f->gmask_e, E,
         f->score_mask ? EPS_KINK : EPS_SMOOTH},
        {"mask.ffn", f->mask_f, f->gmask_f, I, EPS_SMOOTH},
        {"shared_experts.up_proj", w->up_proj, g->up_proj, S * D, EPS_KINK},
        {"shared_experts.down_proj", w->down_proj, g->down_proj, D * S, EPS_SMOOTH},
        {"mask.shared_ffn", f->mask_s, f->gmask_s, S, EPS_SMOOTH},
    };
    int failed = run_checks(f, checks, S ? 10 : 7);
    printf("  selection flips during finite differences: %d\n", f->flips);
    assert_int_equal(f->flips, 0);
    assert_int_equal(failed, 0);

    /* without masks, the input and router gradients once more (the score-masking cases'
     * inputs were chosen for the masked selection: the other cases cover this) */
    if (f->score_mask)
        return;
    zero_grads(f);
    backward(f, NULL, g, NULL);
    f->use_masks = NULL;
    check plain[] = {
        {"dxn (no masks)", f->xn, f->dxn, (size_t)f->T * D, EPS_KINK},
        {"gate.weight (no masks)", w->router, g->router, E * D, EPS_SMOOTH},
        {"experts.up_proj (no masks)", w->experts_up, g->experts_up, E * I * D, EPS_KINK},
    };
    assert_int_equal(run_checks(f, plain, 3), 0);
    assert_int_equal(f->flips, 0);
}

/* Ones are no mask, bit for bit; caches do not matter to an MoE; grad == NULL gives the
 * same dxn; a second backward doubles every accumulated gradient exactly. */
static void check_invariants(fixture *f)
{
    size_t n = (size_t)f->T * f->D, count;
    float *a = alloc_floats(n), *b = alloc_floats(n);
    float ones[16];
    assert_true(a && b);
    for (int i = 0; i < 16; i++)
        ones[i] = 1.0f;
    ac_block_masks all_ones = {.experts = ones, .ffn = ones, .shared_ffn = f->S ? ones : NULL};
    if (f->c->score_masking)
        all_ones.expert_scores = ones;
    forward(f, &f->seqs, NULL, a);
    forward(f, &f->seqs, &all_ones, b);
    assert_memory_equal(a, b, n * sizeof *a);

    ac_cache *caches[N_SEQS];
    for (int s = 0; s < N_SEQS; s++)
        assert_int_equal(ac_cache_create(f->model, &caches[s]), AC_OK);
    ac_cache_layers *views[N_SEQS];
    for (int s = 0; s < N_SEQS; s++)
        views[s] = &caches[s]->l;
    ac_seqs with_caches = f->seqs;
    with_caches.caches = views;
    forward(f, &with_caches, NULL, b);
    assert_memory_equal(a, b, n * sizeof *a);
    for (int s = 0; s < N_SEQS; s++)
        ac_cache_free(caches[s]);

    ac_block_mask_grads mg = expert_mask_grads(f);
    zero_grads(f);
    backward(f, NULL, NULL, NULL);
    memcpy(a, f->dxn, n * sizeof *a);
    backward(f, &all_ones, &f->grads->layers[0], &mg);
    assert_memory_equal(a, f->dxn, n * sizeof *a);

    float *arena = ac_model_arena(f->grads, &count);
    float *once = alloc_floats(count);
    float gm_once[8 + 6 + 5];
    assert_non_null(once);
    memcpy(once, arena, count * sizeof *once);
    memcpy(gm_once, f->gmask_e, 8 * sizeof(float));
    memcpy(gm_once + 8, f->gmask_f, 6 * sizeof(float));
    memcpy(gm_once + 14, f->gmask_s, (size_t)f->S * sizeof(float));
    double norm = 0.0;
    for (size_t i = 0; i < count; i++)
        norm += fabs(once[i]);
    assert_true(norm > 0.0);
    backward(f, &all_ones, &f->grads->layers[0], &mg);
    for (size_t i = 0; i < count; i++)
        assert_true(arena[i] == 2.0f * once[i]);
    for (int i = 0; i < 8; i++)
        assert_true(f->gmask_e[i] == 2.0f * gm_once[i]);
    for (int i = 0; i < 6; i++)
        assert_true(f->gmask_f[i] == 2.0f * gm_once[8 + i]);
    for (int i = 0; i < f->S; i++)
        assert_true(f->gmask_s[i] == 2.0f * gm_once[14 + i]);
    free(once);
    free(a);
    free(b);
}

static void run_case(const moe_case *c)
{
    fixture *f = create(c);
    check_gradients(f);
    check_invariants(f);
    destroy(f);
}

static void test_top2_normalised(void **state)
{
    (void)state;
    static const moe_case c = {"top 2, norm_topk_prob 1", 2, 1, 1, 1, 5, 0};
    run_case(&c);
}

static void test_groups(void **state)
{
    (void)state;
    static const moe_case c = {"4 groups keep 2, top 3", 3, 4, 2, 1, 5, 0};
    run_case(&c);
}

static void test_unnormalised(void **state)
{
    (void)state;
    static const moe_case c = {"top 2, norm_topk_prob 0", 2, 1, 1, 0, 5, 0};
    run_case(&c);
}

static void test_no_shared_expert(void **state)
{
    (void)state;
    static const moe_case c = {"top 2, no shared expert", 2, 1, 1, 1, 0, 0};
    run_case(&c);
}

static void test_score_masking(void **state)
{
    (void)state;
    static const moe_case c = {"top 2, top-k score masking", 2, 1, 1, 1, 5, 1};
    run_case(&c);
}

static void test_score_masking_groups(void **state)
{
    (void)state;
    static const moe_case c = {"4 groups keep 2, top 3, top-k score masking", 3, 4, 2, 1, 5, 1};
    run_case(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top2_normalised),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_unnormalised),
        cmocka_unit_test(test_no_shared_expert),
        cmocka_unit_test(test_score_masking),
        cmocka_unit_test(test_score_masking_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
