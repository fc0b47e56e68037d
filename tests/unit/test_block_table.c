/* The block-kind table: every kind has every entry; its name and letter are the arch's;
 * its parameter count agrees with the tensors its layout lays out (two independent
 * descriptions of one block); its cost-table key holds the dims that set its cost; an
 * unknown kind is refused by name; what a training forward keeps for its backward
 * (the context's saved) changes no bit of the output or of any gradient and stays within
 * saved_per_token and saved_per_sequence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/model.h"
#include "blocks/block.h"
#include "runtime/runtime_internal.h"

static ac_block_dims dims_of(ac_block_kind kind)
{
    ac_block_dims b = {.kind = kind, .mamba_heads = 6, .mamba_head_dim = 4, .mamba_groups = 3, .ssm_state = 8,
                       .conv_kernel = 4, .attn_heads = 6, .attn_kv_heads = 2, .attn_head_dim = 8, .ffn = 40,
                       .n_experts = 8, .top_k = 2, .expert_ffn = 12, .shared_ffn = 20, .n_group = 2,
                       .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.5f};
    return b;
}

static void test_every_kind_has_every_entry(void **state)
{
    (void)state;
    char letters[AC_BLOCK_KINDS + 1] = {0};
    for (int k = 0; k < AC_BLOCK_KINDS; k++) {
        const ac_block_ops *ops = ac_block_ops_of((ac_block_kind)k);
        assert_non_null(ops);
        assert_int_equal(ops->kind, k);
        assert_string_equal(ops->name, ac_block_name((ac_block_kind)k));
        assert_int_equal(ops->letter, ac_block_letter((ac_block_kind)k));
        assert_null(strchr(letters, ops->letter));
        letters[k] = ops->letter;
        const void *entries[] = {ops->validate, ops->same_dims, ops->params, ops->print, ops->tag, ops->layout,
                                 ops->slice, ops->scratch_per_token, ops->backward_scratch_per_token,
                                 ops->saved_per_token, ops->state_floats, ops->kv_heads, ops->kv_head_dim, ops->forward, ops->backward,
                                 ops->row_key};
        for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
            assert_non_null(entries[i]);
    }
    assert_string_equal(letters, "M*-E");
    assert_null(ac_block_ops_of((ac_block_kind)AC_BLOCK_KINDS));
    assert_null(ac_block_ops_of((ac_block_kind)-1));
}

/* One layer of each kind: the arena tensors named layers.0.* hold exactly the block's
 * parameter count; the active count drops the routed experts a token does not use. */
static void test_params_equal_the_layout(void **state)
{
    (void)state;
    for (int k = 0; k < AC_BLOCK_KINDS; k++) {
        ac_arch a = {.vocab = 10, .hidden = 24, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                     .time_step_min = 1e-3f};
        assert_int_equal(ac_arch_alloc_layers(&a, 1), AC_OK);
        a.layers[0] = dims_of((ac_block_kind)k);
        ac_model *m;
        assert_int_equal(ac_model_create(&a, &m), AC_OK);
        int64_t laid_out = 0;
        for (size_t i = 0; i < ac_model_param_count(m); i++)
            if (!strncmp(ac_model_param(m, i)->name, "layers.0.", 9))
                laid_out += (int64_t)ac_model_param(m, i)->count;
        printf("%-9s %lld parameters\n", ac_block_name((ac_block_kind)k), (long long)laid_out);
        assert_int_equal(ac_block_param_count(&a, &a.layers[0]), laid_out);
        int64_t unused = k == AC_BLOCK_MOE ? (8 - 2) * 2 * 12 * 24 : 0;
        assert_int_equal(ac_block_active_param_count(&a, &a.layers[0]), laid_out - unused);
        ac_model_free(m);
        ac_arch_free(&a);
    }
}

static void test_row_keys(void **state)
{
    (void)state;
    ac_block_dims moe = dims_of(AC_BLOCK_MOE), mamba = dims_of(AC_BLOCK_MAMBA), mlp = dims_of(AC_BLOCK_MLP);
    ac_block_dims att = dims_of(AC_BLOCK_ATTENTION);
    ac_cost_row k = ac_block_row_key(&moe, 96);
    assert_int_equal(k.kind, AC_ROW_MOE);
    assert_int_equal(k.hidden, 96);
    assert_int_equal(k.experts, 8);
    assert_int_equal(k.expert_ffn, 12);
    assert_int_equal(k.shared_ffn, 20);
    k = ac_block_row_key(&mamba, 64);
    assert_int_equal(k.kind, AC_ROW_MAMBA);
    assert_int_equal(k.heads, 6);
    assert_int_equal(k.ffn, 0);
    k = ac_block_row_key(&mlp, 64);
    assert_int_equal(k.kind, AC_ROW_MLP);
    assert_int_equal(k.ffn, 40);
    k = ac_block_row_key(&att, 64);
    assert_int_equal(k.kind, AC_ROW_ATTENTION);
    assert_int_equal(k.heads + k.ffn + k.experts + k.expert_ffn + k.shared_ffn, 0);
}

static void test_unknown_kind_is_refused(void **state)
{
    (void)state;
    ac_arch a = {.vocab = 10, .hidden = 8, .norm_eps = 1e-5f, .chunk_size = 8};
    assert_int_equal(ac_arch_alloc_layers(&a, 2), AC_OK);
    a.layers[0] = dims_of(AC_BLOCK_MLP);
    a.layers[1] = dims_of(AC_BLOCK_MLP);
    a.layers[1].kind = (ac_block_kind)7;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "layer 1"));
    assert_int_equal(ac_arch_is_homogeneous(&a), 0);
    a.layers[1] = dims_of(AC_BLOCK_MAMBA);
    a.layers[1].mamba_groups = 4; /* 6 heads in 4 groups */
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "layer 1 (mamba)"));
    assert_non_null(strstr(ac_error_message(), "mamba_groups"));
    ac_arch_free(&a);
}

/* ---- kept forward internals ---- */

static void fill(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)(seed >> 40) / (float)(1 << 24);
    }
}

enum { KEPT_D = 24, KEPT_MASKS = 5, KEPT_GUARD = 64 };

typedef struct {
    float *out, *dxn, *grads, *mask_grads;
} pass_result;

/* One forward and one backward of layer 0 over two packed sequences (5 and 9 tokens)
 * with soft masks on every axis, keeping internals in `saved` (NULL: none). */
static void train_pass(ac_runtime *rt, ac_model *grads, float *saved, const float *xn, const float *dout,
                       float masks[KEPT_MASKS][KEPT_D], pass_result *r)
{
    int offset[2] = {0, 5}, len[2] = {5, 9}, T = 14;
    ac_seqs seqs = {.n = 2, .total = T, .offset = offset, .len = len, .caches = NULL};
    ac_block_masks m = {.mamba_heads = masks[0], .experts = masks[1], .expert_scores = masks[2], .ffn = masks[3],
                        .shared_ffn = masks[4]};
    float dm[KEPT_MASKS][KEPT_D];
    memset(dm, 0, sizeof dm);
    ac_block_mask_grads mg = {dm[0], dm[1], dm[2], dm[3], dm[4]};
    const ac_block_ops *ops = ac_block(&rt->model->arch.layers[0]);
    size_t n;
    float *g = ac_model_arena(grads, &n);
    memset(g, 0, n * sizeof *g);
    ac_block_ctx c = ac_runtime_block_ctx(rt, saved);
    ops->forward(&c, 0, &seqs, xn, &m, r->out);
    c = ac_runtime_block_ctx(rt, saved);
    ops->backward(&c, 0, &seqs, xn, &m, dout, r->dxn, &grads->layers[0], &mg);
    memcpy(r->grads, g, n * sizeof *g);
    memcpy(r->mask_grads, dm, sizeof dm);
}

static void test_kept_internals_change_no_bit(void **state)
{
    (void)state;
    for (int k = 0; k < AC_BLOCK_KINDS; k++) {
        ac_arch a = {.vocab = 16, .hidden = KEPT_D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                     .time_step_min = 1e-3f};
        assert_int_equal(ac_arch_alloc_layers(&a, 1), AC_OK);
        a.layers[0] = dims_of((ac_block_kind)k);
        ac_model *m, *grads;
        ac_runtime *rt;
        assert_int_equal(ac_model_create(&a, &m), AC_OK);
        assert_int_equal(ac_model_create(&a, &grads), AC_OK);
        ac_model_init_random(m, 11 + (uint64_t)k, 0.2f);
        assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
        assert_int_equal(ac_runtime_reserve_training(rt, 14, 2), AC_OK);

        size_t TD = 14 * KEPT_D, arena;
        ac_model_arena(m, &arena);
        float *xn = malloc(TD * sizeof *xn), *dout = malloc(TD * sizeof *dout);
        float masks[KEPT_MASKS][KEPT_D];
        fill(xn, TD, -1.0f, 1.0f, 1);
        fill(dout, TD, -1.0f, 1.0f, 2);
        fill(&masks[0][0], sizeof masks / sizeof(float), 0.3f, 1.0f, 3);
        pass_result r[2];
        for (int i = 0; i < 2; i++) {
            r[i].out = malloc(TD * sizeof(float));
            r[i].dxn = malloc(TD * sizeof(float));
            r[i].grads = malloc(arena * sizeof(float));
            r[i].mask_grads = malloc(sizeof masks);
            assert_true(r[i].out && r[i].dxn && r[i].grads && r[i].mask_grads);
        }
        const ac_block_ops *ops = ac_block(&a.layers[0]);
        size_t kept = ops->saved_per_token(&a, &a.layers[0]) * 14;
        for (int s = 0; ops->saved_per_sequence && s < 2; s++) /* the sequences of train_pass */
            kept += ops->saved_per_sequence(&a.layers[0], ac_model_backend(m), s ? 9 : 5);
        float *saved = malloc((kept + KEPT_GUARD) * sizeof *saved);
        for (int i = 0; i < KEPT_GUARD; i++)
            saved[kept + i] = -7.0f;
        train_pass(rt, grads, NULL, xn, dout, masks, &r[0]);
        train_pass(rt, grads, saved, xn, dout, masks, &r[1]);
        printf("%s: keeps %zu floats for 14 tokens\n", ac_block_name((ac_block_kind)k), kept);
        assert_memory_equal(r[0].out, r[1].out, TD * sizeof(float));
        assert_memory_equal(r[0].dxn, r[1].dxn, TD * sizeof(float));
        assert_memory_equal(r[0].grads, r[1].grads, arena * sizeof(float));
        assert_memory_equal(r[0].mask_grads, r[1].mask_grads, sizeof masks);
        for (int i = 0; i < KEPT_GUARD; i++)
            assert_true(saved[kept + i] == -7.0f); /* nothing written past what the block says it keeps */
        for (int i = 0; i < 2; i++)
            free(r[i].out), free(r[i].dxn), free(r[i].grads), free(r[i].mask_grads);
        free(saved), free(xn), free(dout);
        ac_runtime_free(rt);
        ac_model_free(m);
        ac_model_free(grads);
        ac_arch_free(&a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_has_every_entry),
        cmocka_unit_test(test_params_equal_the_layout),
        cmocka_unit_test(test_row_keys),
        cmocka_unit_test(test_unknown_kind_is_refused),
        cmocka_unit_test(test_kept_internals_change_no_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
