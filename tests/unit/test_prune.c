/* Pruning: the parent pruned to its own architecture gives its logits (bit for bit
 * without a reorder, within float rounding with one); a smaller heterogeneous child, a
 * layer removed and a MoE layer reduced to its shared expert, gives the logits of the
 * reordered parent under the matching 0/1 masks (built here by hand from the child's
 * dims, not by the routers); a child that does not fit inside the parent is refused
 * with the field named; the written checkpoint loads back to the same logits and
 * carries the parent's tokenizer. */
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

#include "autocompress/model.h"
#include "autocompress/prune.h"
#include "autocompress/search.h"
#include "masked_logits.h"

enum { V = 40, D = 16, N = 14, MAX_LAYERS = 8 };

static const char parent_kinds[] = "ME*M-E";

static ac_block_kind kind_of(char c)
{
    return c == 'M' ? AC_BLOCK_MAMBA : c == '*' ? AC_BLOCK_ATTENTION : c == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
}

/* Six Mamba heads in two groups, six experts of which two are routed per token. */
static void parent_arch(ac_arch *a)
{
    int n = (int)strlen(parent_kinds);
    *a = (ac_arch){.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 4,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    for (int i = 0; i < n; i++)
        a->layers[i] = (ac_block_dims){.kind = kind_of(parent_kinds[i]), .mamba_heads = 6, .mamba_head_dim = 2,
                                       .mamba_groups = 2, .ssm_state = 4, .conv_kernel = 3, .attn_heads = 2,
                                       .attn_kv_heads = 1, .attn_head_dim = 8, .ffn = 12, .n_experts = 6,
                                       .top_k = 2, .expert_ffn = 6, .shared_ffn = 10, .n_group = 1,
                                       .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 1.5f};
}

/* The child: hidden 12; Mamba 4 heads (2 per group); MoE 3 experts of width 4, shared 6;
 * attention kept; parent layer 3 (Mamba) removed; MLP 8 wide; the last MoE reduced to
 * its shared expert, 7 wide. */
static const int child_parent_layers[] = {0, 1, 2, 4, 5};

static void child_arch(const ac_arch *parent, ac_arch *c)
{
    assert_int_equal(ac_arch_copy(c, parent), AC_OK);
    c->hidden = 12;
    c->n_layers = 5;
    for (int i = 0; i < c->n_layers; i++)
        c->layers[i] = parent->layers[child_parent_layers[i]];
    c->layers[0].mamba_heads = 4;
    c->layers[1].n_experts = 3;
    c->layers[1].expert_ffn = 4;
    c->layers[1].shared_ffn = 6;
    c->layers[3].ffn = 8;
    c->layers[4].kind = AC_BLOCK_MLP;
    c->layers[4].ffn = 7;
}

typedef struct {
    ac_model *parent;
    ac_importance imp;
    int32_t tokens[N];
    char dir[64];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    ac_arch a;
    parent_arch(&a);
    ac_status st = ac_model_create(&a, &f->parent);
    ac_arch_free(&a);
    if (st != AC_OK)
        return -1;
    ac_model_init_random(f->parent, 11, 0.3f);
    enum { SEQS = 4, T = 16 };
    int32_t calib[SEQS * T];
    for (int i = 0; i < SEQS * T; i++)
        calib[i] = (int32_t)((i * 7 + i / 5) % V);
    if (ac_importance_compute(f->parent, calib, SEQS, T, &f->imp) != AC_OK)
        return -1;
    for (int i = 0; i < N; i++)
        f->tokens[i] = (int32_t)((i * 13 + 5) % V);
    snprintf(f->dir, sizeof f->dir, "/tmp/ac-prune-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", f->dir);
    if (system(command) != 0)
        return -1;
    ac_importance_free(&f->imp);
    ac_model_free(f->parent);
    free(f);
    return 0;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

static void test_self_prune_keeps_the_logits(void **state)
{
    fixture *f = *state;
    const ac_arch *pa = ac_model_arch(f->parent);
    float want[N * V], got[N * V];
    logits_of(f->parent, NULL, f->tokens, N, want);

    ac_model *same;
    ac_prune_params plain = {0};
    assert_int_equal(ac_prune(f->parent, pa, &plain, &same), AC_OK);
    logits_of(same, NULL, f->tokens, N, got);
    assert_memory_equal(got, want, sizeof want);
    ac_model_free(same);

    ac_prune_params ordered = {.importance = &f->imp};
    assert_int_equal(ac_prune(f->parent, pa, &ordered, &same), AC_OK);
    logits_of(same, NULL, f->tokens, N, got);
    double diff = max_diff(got, want, N * V);
    printf("self-prune with the reorder: max |diff| %.3g\n", diff);
    assert_true(diff < 1e-5);
    /* the reorder did move weights: the arenas differ */
    size_t n1, n2;
    float *w1 = ac_model_arena(f->parent, &n1), *w2 = ac_model_arena(same, &n2);
    assert_int_equal(n1, n2);
    assert_true(memcmp(w1, w2, n1 * sizeof *w1) != 0);
    ac_model_free(same);
}

/* 0/1 masks over the parent's layers naming the child: prefixes of each width, heads
 * by their rank within their group, the removed layer gated off. */
typedef struct {
    float hidden[D], gate[MAX_LAYERS];
    float heads[MAX_LAYERS][8], experts[MAX_LAYERS][8], ffn[MAX_LAYERS][16], shared[MAX_LAYERS][16];
    const float *heads_p[MAX_LAYERS], *experts_p[MAX_LAYERS], *ffn_p[MAX_LAYERS], *shared_p[MAX_LAYERS];
    ac_masks masks;
} child_masks;

static void prefix(float *m, int keep, int n)
{
    for (int i = 0; i < n; i++)
        m[i] = i < keep ? 1.0f : 0.0f;
}

static void mask_layer(child_masks *cm, int p, const ac_block_dims *q, const ac_block_dims *c)
{
    cm->gate[p] = 1;
    if (q->kind == AC_BLOCK_MAMBA) {
        int per_parent = q->mamba_heads / q->mamba_groups, per_child = c->mamba_heads / c->mamba_groups;
        for (int h = 0; h < q->mamba_heads; h++)
            cm->heads[p][h] = h % per_parent < per_child ? 1.0f : 0.0f;
        cm->heads_p[p] = cm->heads[p];
    } else if (q->kind == AC_BLOCK_MLP) {
        prefix(cm->ffn[p], c->ffn, q->ffn);
        cm->ffn_p[p] = cm->ffn[p];
    } else if (q->kind == AC_BLOCK_MOE) {
        int routed = c->kind == AC_BLOCK_MOE;
        prefix(cm->experts[p], routed ? c->n_experts : 0, q->n_experts);
        prefix(cm->ffn[p], routed ? c->expert_ffn : 0, q->expert_ffn);
        prefix(cm->shared[p], routed ? c->shared_ffn : c->ffn, q->shared_ffn);
        cm->experts_p[p] = cm->experts[p];
        cm->ffn_p[p] = cm->ffn[p];
        cm->shared_p[p] = cm->shared[p];
    }
}

static void build_masks(child_masks *cm, const ac_arch *parent, const ac_arch *child, const int *parent_layers)
{
    memset(cm, 0, sizeof *cm);
    prefix(cm->hidden, child->hidden, parent->hidden);
    for (int i = 0; i < child->n_layers; i++)
        mask_layer(cm, parent_layers[i], &parent->layers[parent_layers[i]], &child->layers[i]);
    cm->masks = (ac_masks){.hidden = cm->hidden, .mamba_heads = cm->heads_p, .expert_scores = cm->experts_p,
                           .ffn = cm->ffn_p, .shared_ffn = cm->shared_p, .layer_gate = cm->gate};
}

static void test_pruned_child_is_the_masked_parent(void **state)
{
    fixture *f = *state;
    const ac_arch *pa = ac_model_arch(f->parent);
    ac_arch child;
    child_arch(pa, &child);
    ac_prune_params p = {.importance = &f->imp, .parent_layers = child_parent_layers};
    ac_model *pruned, *ordered;
    assert_int_equal(ac_prune(f->parent, &child, &p, &pruned), AC_OK);

    /* the reference: the whole parent in importance order, under 0/1 masks */
    ac_importance imp;
    assert_int_equal(ac_importance_copy(&imp, &f->imp), AC_OK);
    assert_int_equal(ac_model_slice(f->parent, pa, NULL, 0, &ordered), AC_OK);
    assert_int_equal(ac_model_reorder(ordered, &imp), AC_OK);
    child_masks cm;
    build_masks(&cm, pa, &child, child_parent_layers);
    float want[N * V], got[N * V], unordered[N * V];
    logits_of(ordered, &cm.masks, f->tokens, N, want);
    logits_of(pruned, NULL, f->tokens, N, got);
    double diff = max_diff(got, want, N * V);
    /* without the reorder the kept prefixes are other channels: the logits move */
    logits_of(f->parent, &cm.masks, f->tokens, N, unordered);
    double moved = max_diff(unordered, want, N * V);
    printf("pruned vs masked reordered parent: max |diff| %.3g (unordered parent: %.3g)\n", diff, moved);
    assert_true(diff < 1e-5);
    assert_true(moved > 1e-3);

    /* written and loaded back: the same logits, the tokenizer beside them */
    char parent_dir[128], out_dir[128], path[192];
    snprintf(parent_dir, sizeof parent_dir, "%s/parent", f->dir);
    snprintf(out_dir, sizeof out_dir, "%s/child", f->dir);
    assert_int_equal(ac_model_save(f->parent, parent_dir, AC_DTYPE_F32), AC_OK);
    snprintf(path, sizeof path, "%s/tokenizer.json", parent_dir);
    FILE *tok = fopen(path, "w");
    assert_non_null(tok);
    fputs("{\"model\": {\"type\": \"BPE\"}}\n", tok);
    fclose(tok);
    assert_int_equal(ac_prune_save(pruned, parent_dir, out_dir, AC_DTYPE_F32), AC_OK);
    snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
    assert_int_equal(access(path, R_OK), 0);
    ac_model *loaded;
    assert_int_equal(ac_model_load(out_dir, &loaded), AC_OK);
    logits_of(loaded, NULL, f->tokens, N, want);
    assert_memory_equal(want, got, sizeof got);

    ac_model_free(loaded);
    ac_model_free(ordered);
    ac_model_free(pruned);
    ac_importance_free(&imp);
    ac_arch_free(&child);
}

/* One child that does not fit, and the words its refusal must contain. */
static void expect_refusal(const ac_model *parent, const ac_arch *child, const int *layers, const char *words)
{
    ac_model *out = (ac_model *)1;
    ac_prune_params p = {.parent_layers = layers};
    assert_int_equal(ac_prune(parent, child, &p, &out), AC_ERR_INVALID);
    assert_null(out);
    if (!strstr(ac_error_message(), words)) {
        printf("message '%s' lacks '%s'\n", ac_error_message(), words);
        fail();
    }
}

static void test_children_that_do_not_fit_are_refused(void **state)
{
    fixture *f = *state;
    const ac_arch *pa = ac_model_arch(f->parent);
    ac_arch c;
    child_arch(pa, &c);
    int backwards[] = {0, 1, 2, 4, 3};
    expect_refusal(f->parent, &c, backwards, "parent_layers[4] = 3");
    expect_refusal(f->parent, &c, NULL, "no parent_layers");
    c.layers[1].shared_ffn = 11;
    expect_refusal(f->parent, &c, child_parent_layers, "moe_shared_expert_intermediate_size 11 exceeds");
    c.layers[1].shared_ffn = 6;
    c.layers[1].top_k = 1;
    expect_refusal(f->parent, &c, child_parent_layers, "top_k 1 differs");
    c.layers[1].top_k = 2;
    c.layers[4].ffn = 11;
    expect_refusal(f->parent, &c, child_parent_layers, "from the shared expert) 11 exceeds");
    c.layers[4].ffn = 7;
    c.layers[2].kind = AC_BLOCK_MLP;
    expect_refusal(f->parent, &c, child_parent_layers, "layer 2 is mlp but parent layer 2 is attention");
    c.layers[2].kind = AC_BLOCK_ATTENTION;
    c.layers[0].ssm_state = 8;
    expect_refusal(f->parent, &c, child_parent_layers, "ssm_state 8 differs");
    c.layers[0].ssm_state = 4;
    c.hidden = 20;
    expect_refusal(f->parent, &c, child_parent_layers, "hidden_size 20 exceeds");
    ac_arch_free(&c);
}

static void test_parent_layers_are_read_from_search_json(void **state)
{
    fixture *f = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/search.json", f->dir);
    const char *cases[][2] = {
        {"{\"parent_layers\": [0, 1, 2, 4, 5]}", NULL},
        {"{\"parent_layers\": [0, 1, 2]}", "array of 5 layer indices"},
        {"{\"parent_layers\": [0, 1, \"2\", 4, 5]}", "parent_layers[2] is a string"},
        {"{\"parent_layers\": [0, 1, 2.5, 4, 5]}", "parent_layers[2] is a number, not a layer index"},
        {"{\"parent_layers\": ", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(cases[i][0], fp);
        fclose(fp);
        int *layers = NULL;
        ac_status st = ac_prune_read_parent_layers(path, 5, &layers);
        if (!cases[i][1]) {
            assert_int_equal(st, AC_OK);
            assert_memory_equal(layers, child_parent_layers, sizeof child_parent_layers);
        } else {
            assert_int_equal(st, AC_ERR_INVALID);
            assert_null(layers);
            assert_non_null(strstr(ac_error_message(), cases[i][1]));
            assert_non_null(strstr(ac_error_message(), path));
        }
        free(layers);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_prune_keeps_the_logits),
        cmocka_unit_test(test_pruned_child_is_the_masked_parent),
        cmocka_unit_test(test_children_that_do_not_fit_are_refused),
        cmocka_unit_test(test_parent_layers_are_read_from_search_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
