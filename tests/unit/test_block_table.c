/* The block-kind table: every kind has every entry; its name and letter are the arch's;
 * its parameter count agrees with the tensors its layout lays out (two independent
 * descriptions of one block); its cost-table key holds the dims that set its cost; an
 * unknown kind is refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "autocompress/model.h"
#include "runtime/block.h"

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
                                 ops->state_floats, ops->kv_heads, ops->kv_head_dim, ops->forward, ops->backward,
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_has_every_entry),
        cmocka_unit_test(test_params_equal_the_layout),
        cmocka_unit_test(test_row_keys),
        cmocka_unit_test(test_unknown_kind_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
