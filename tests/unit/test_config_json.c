/* config.json reading and writing, and the arch helpers it relies on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/arch.h"
#include "autocompress/config_json.h"
#include "autocompress/model.h"

/* Four layers of every kind; MoE with group-limited routing. */
static const char *const BASE =
    "{\"model_type\": \"nemotron_h\", \"architectures\": [\"NemotronHForCausalLM\"],"
    " \"vocab_size\": 100, \"hidden_size\": 32, \"hybrid_override_pattern\": \"M*-E\", \"num_hidden_layers\": 4,"
    " \"layer_norm_epsilon\": 1e-6, \"tie_word_embeddings\": true, \"chunk_size\": 64,"
    " \"mamba_num_heads\": 4, \"mamba_head_dim\": 8, \"n_groups\": 2, \"ssm_state_size\": 16, \"conv_kernel\": 3,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 12, \"intermediate_size\": 48,"
    " \"n_routed_experts\": 8, \"num_experts_per_tok\": 3, \"moe_intermediate_size\": 16,"
    " \"moe_shared_expert_intermediate_size\": 24, \"n_group\": 2, \"topk_group\": 1, \"norm_topk_prob\": false,"
    " \"routed_scaling_factor\": 2.5, \"use_bias\": false, \"mlp_bias\": false, \"attention_bias\": false,"
    " \"mlp_hidden_act\": \"relu2\", \"mamba_hidden_act\": \"silu\", \"moe_latent_size\": null}";

/* A puzzle config over the same globals: per-layer overrides and a shared width of 0. */
static const char *const PUZZLE_BLOCKS =
    "[{\"block_type\": \"mamba\"},"
    " {\"block_type\": \"moe\", \"n_routed_experts\": 6, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 24,"
    "  \"moe_shared_expert_intermediate_size\": 0, \"n_group\": 1, \"topk_group\": 1},"
    " {\"block_type\": \"attention\", \"num_attention_heads\": 6, \"num_key_value_heads\": 3},"
    " {\"block_type\": \"mlp\", \"intermediate_size\": 80},"
    " {\"block_type\": \"mamba\", \"mamba_num_heads\": 2},"
    " {\"block_type\": \"moe\", \"n_routed_experts\": 12, \"norm_topk_prob\": true, \"routed_scaling_factor\": 1.0},"
    " {\"block_type\": \"mlp\"}]";

/* BASE with `key` set to the JSON `value` (NULL: removed). The caller frees. */
static char *with2(const char *base, const char *key, const char *value, const char *key2, const char *value2)
{
    cJSON *root = cJSON_Parse(base);
    assert_non_null(root);
    const char *keys[2] = {key, key2}, *values[2] = {value, value2};
    for (int k = 0; k < 2; k++) {
        if (!keys[k])
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(root, keys[k]);
        if (values[k]) {
            cJSON *v = cJSON_Parse(values[k]);
            assert_non_null(v);
            cJSON_AddItemToObject(root, keys[k], v);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    assert_non_null(text);
    return text;
}

static char *with(const char *base, const char *key, const char *value) { return with2(base, key, value, NULL, NULL); }

static char *puzzle_text(const char *blocks)
{
    char *t = with2(BASE, "model_type", "\"nemotron_h_puzzle\"", "block_configs", blocks);
    char *u = with(t, "num_hidden_layers", NULL);
    cJSON_free(t);
    return u;
}

/* Parses `text` expecting failure `code` with a message containing each needle. */
static void expect_error(const char *text, ac_status code, const char *needle, const char *needle2)
{
    ac_arch arch;
    ac_status st = ac_config_json_parse(text, "x/config.json", &arch);
    if (st == AC_OK || strstr(ac_error_message(), needle) == NULL ||
        (needle2 && strstr(ac_error_message(), needle2) == NULL))
        fail_msg("expected an error with '%s'%s%s, got %s: '%s'", needle, needle2 ? " and " : "", needle2 ? needle2 : "",
                 ac_status_name(st), ac_error_message());
    assert_int_equal(st, code);
    assert_null(arch.layers);
    assert_int_equal(arch.n_layers, 0);
    assert_non_null(strstr(ac_error_message(), "x/config.json: "));
}

static void expect_error_free(char *text, ac_status code, const char *needle, const char *needle2)
{
    expect_error(text, code, needle, needle2);
    cJSON_free(text);
}

static void parse_ok(const char *text, ac_arch *arch)
{
    ac_status st = ac_config_json_parse(text, "x/config.json", arch);
    if (st != AC_OK)
        fail_msg("parse failed: %s", ac_error_message());
}

static void assert_layers_equal(const ac_arch *a, const ac_arch *b)
{
    assert_int_equal(a->vocab, b->vocab);
    assert_int_equal(a->hidden, b->hidden);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_true(a->norm_eps == b->norm_eps);
    assert_int_equal(a->tie_embeddings, b->tie_embeddings);
    assert_int_equal(a->use_conv_bias, b->use_conv_bias);
    assert_int_equal(a->chunk_size, b->chunk_size);
    assert_true(a->time_step_min == b->time_step_min);
    for (int i = 0; i < a->n_layers; i++) {
        const ac_block_dims *x = &a->layers[i], *y = &b->layers[i];
        assert_int_equal(x->kind, y->kind);
        switch (x->kind) {
        case AC_BLOCK_MAMBA:
            assert_int_equal(x->mamba_heads, y->mamba_heads);
            assert_int_equal(x->mamba_head_dim, y->mamba_head_dim);
            assert_int_equal(x->mamba_groups, y->mamba_groups);
            assert_int_equal(x->ssm_state, y->ssm_state);
            assert_int_equal(x->conv_kernel, y->conv_kernel);
            break;
        case AC_BLOCK_ATTENTION:
            assert_int_equal(x->attn_heads, y->attn_heads);
            assert_int_equal(x->attn_kv_heads, y->attn_kv_heads);
            assert_int_equal(x->attn_head_dim, y->attn_head_dim);
            break;
        case AC_BLOCK_MLP: assert_int_equal(x->ffn, y->ffn); break;
        case AC_BLOCK_MOE:
            assert_int_equal(x->n_experts, y->n_experts);
            assert_int_equal(x->top_k, y->top_k);
            assert_int_equal(x->expert_ffn, y->expert_ffn);
            assert_int_equal(x->shared_ffn, y->shared_ffn);
            assert_int_equal(x->n_group, y->n_group);
            assert_int_equal(x->topk_group, y->topk_group);
            assert_int_equal(x->norm_topk_prob, y->norm_topk_prob);
            assert_true(x->routed_scaling == y->routed_scaling);
            break;
        }
    }
}

/* ---- reading ---- */

static void test_hybrid_override_pattern(void **state)
{
    (void)state;
    ac_arch a;
    parse_ok(BASE, &a);
    assert_int_equal(a.vocab, 100);
    assert_int_equal(a.hidden, 32);
    assert_int_equal(a.n_layers, 4);
    assert_true(a.norm_eps == 1e-6f);
    assert_int_equal(a.tie_embeddings, 1);
    assert_int_equal(a.use_conv_bias, 1); /* default */
    assert_int_equal(a.chunk_size, 64);
    assert_true(a.time_step_min == 0.001f); /* default */
    const ac_block_dims *m = &a.layers[0], *at = &a.layers[1], *f = &a.layers[2], *e = &a.layers[3];
    assert_int_equal(m->kind, AC_BLOCK_MAMBA);
    assert_int_equal(m->mamba_heads, 4);
    assert_int_equal(m->mamba_head_dim, 8);
    assert_int_equal(m->mamba_groups, 2);
    assert_int_equal(m->ssm_state, 16);
    assert_int_equal(m->conv_kernel, 3);
    assert_int_equal(ac_mamba_d_inner(m), 32);
    assert_int_equal(ac_mamba_conv_dim(m), 32 + 2 * 2 * 16);
    assert_int_equal(ac_mamba_in_proj_dim(m), 2 * 32 + 2 * 2 * 16 + 4);
    assert_int_equal(at->kind, AC_BLOCK_ATTENTION);
    assert_int_equal(at->attn_heads, 4);
    assert_int_equal(at->attn_kv_heads, 2);
    assert_int_equal(at->attn_head_dim, 12);
    assert_int_equal(f->kind, AC_BLOCK_MLP);
    assert_int_equal(f->ffn, 48);
    assert_int_equal(e->kind, AC_BLOCK_MOE);
    assert_int_equal(e->n_experts, 8);
    assert_int_equal(e->top_k, 3);
    assert_int_equal(e->expert_ffn, 16);
    assert_int_equal(e->shared_ffn, 24);
    assert_int_equal(e->n_group, 2);
    assert_int_equal(e->topk_group, 1);
    assert_int_equal(e->norm_topk_prob, 0);
    assert_true(e->routed_scaling == 2.5f);
    assert_true(ac_arch_is_homogeneous(&a));
    ac_arch_free(&a);
}

static void test_defaults(void **state)
{
    (void)state;
    char *t = with2(BASE, "tie_word_embeddings", NULL, "head_dim", NULL);
    char *u = with2(t, "n_group", NULL, "topk_group", NULL);
    char *v = with2(u, "norm_topk_prob", NULL, "routed_scaling_factor", NULL);
    char *w = with2(v, "layer_norm_epsilon", NULL, "chunk_size", NULL);
    char *x = with2(w, "num_hidden_layers", NULL, "num_key_value_heads", "null");
    ac_arch a;
    parse_ok(x, &a);
    assert_int_equal(a.tie_embeddings, 0);
    assert_true(a.norm_eps == 1e-5f);
    assert_int_equal(a.chunk_size, 128);
    assert_int_equal(a.layers[1].attn_head_dim, 128); /* transformers' default, not hidden / heads */
    assert_int_equal(a.layers[1].attn_kv_heads, 4);   /* null: one KV head per query head */
    assert_int_equal(a.layers[3].n_group, 1);
    assert_int_equal(a.layers[3].topk_group, 1);
    assert_int_equal(a.layers[3].norm_topk_prob, 1);
    assert_true(a.layers[3].routed_scaling == 1.0f);
    ac_arch_free(&a);
    cJSON_free(t);
    cJSON_free(u);
    cJSON_free(v);
    cJSON_free(w);
    cJSON_free(x);
}

static void test_layers_block_type_both_spellings(void **state)
{
    (void)state;
    const char *lists[] = {"[\"mamba\", \"attention\", \"mlp\", \"moe\", \"mamba\"]",
                           "[\"linear_attention\", \"full_attention\", \"mlp\", \"moe\", \"linear_attention\"]"};
    for (int k = 0; k < 2; k++) {
        char *t = with2(BASE, "hybrid_override_pattern", NULL, "layers_block_type", lists[k]);
        char *u = with(t, "num_hidden_layers", "5");
        ac_arch a;
        parse_ok(u, &a);
        assert_int_equal(a.n_layers, 5);
        const ac_block_kind want[] = {AC_BLOCK_MAMBA, AC_BLOCK_ATTENTION, AC_BLOCK_MLP, AC_BLOCK_MOE, AC_BLOCK_MAMBA};
        for (int i = 0; i < 5; i++)
            assert_int_equal(a.layers[i].kind, want[i]);
        assert_int_equal(a.layers[4].mamba_heads, 4);
        ac_arch_free(&a);
        cJSON_free(t);
        cJSON_free(u);
    }
    /* Both present: they must agree. */
    char *t = with(BASE, "layers_block_type", "[\"mamba\", \"attention\", \"mlp\", \"moe\"]");
    ac_arch a;
    parse_ok(t, &a);
    ac_arch_free(&a);
    cJSON_free(t);
    expect_error_free(with(BASE, "layers_block_type", "[\"mamba\", \"attention\", \"moe\", \"moe\"]"), AC_ERR_INVALID,
                      "hybrid_override_pattern[2] '-' disagrees with layers_block_type[2]", NULL);
    expect_error_free(with2(BASE, "hybrid_override_pattern", NULL, "layers_block_type", "[\"mamba\", \"ssm\"]"),
                      AC_ERR_INVALID, "layers_block_type[1]: unknown block type 'ssm'", NULL);
    expect_error_free(with2(BASE, "hybrid_override_pattern", NULL, "layers_block_type", "[\"mamba\", 3]"),
                      AC_ERR_INVALID, "layers_block_type[1] must be a string, got a number", NULL);
}

static void test_legacy_aliases(void **state)
{
    (void)state;
    char *t = with2(BASE, "n_groups", NULL, "conv_kernel", NULL);
    char *u = with2(t, "mamba_n_groups", "4", "mamba_d_conv", "2");
    ac_arch a;
    parse_ok(u, &a);
    assert_int_equal(a.layers[0].mamba_groups, 4);
    assert_int_equal(a.layers[0].conv_kernel, 2);
    ac_arch_free(&a);
    char *v = with(u, "conv_kernel", "2"); /* both spellings, agreeing */
    parse_ok(v, &a);
    ac_arch_free(&a);
    expect_error_free(with(u, "conv_kernel", "4"), AC_ERR_INVALID, "conv_kernel and its alias mamba_d_conv disagree",
                      NULL);
    /* num_local_experts is transformers' attribute alias of n_routed_experts. */
    char *w = with2(BASE, "n_routed_experts", NULL, "num_local_experts", "16");
    parse_ok(w, &a);
    assert_int_equal(a.layers[3].n_experts, 16);
    ac_arch_free(&a);
    cJSON_free(t);
    cJSON_free(u);
    cJSON_free(v);
    cJSON_free(w);
}

static void test_puzzle_overrides(void **state)
{
    (void)state;
    /* The global pattern disagrees with block_configs and is ignored. */
    char *t = puzzle_text(PUZZLE_BLOCKS);
    char *u = with(t, "num_hidden_layers", "7");
    ac_arch a;
    parse_ok(u, &a);
    assert_int_equal(a.n_layers, 7);
    const char *pattern = "ME*-ME-";
    for (int i = 0; i < 7; i++)
        assert_int_equal(ac_block_letter(a.layers[i].kind), pattern[i]);
    assert_int_equal(a.layers[0].mamba_heads, 4);
    const ac_block_dims *e1 = &a.layers[1];
    assert_int_equal(e1->n_experts, 6);
    assert_int_equal(e1->top_k, 2);
    assert_int_equal(e1->expert_ffn, 24);
    assert_int_equal(e1->shared_ffn, 0);
    assert_int_equal(e1->n_group, 1);
    assert_int_equal(e1->topk_group, 1);
    assert_int_equal(e1->norm_topk_prob, 0); /* global */
    assert_true(e1->routed_scaling == 2.5f);  /* global */
    assert_int_equal(a.layers[2].attn_heads, 6);
    assert_int_equal(a.layers[2].attn_kv_heads, 3);
    assert_int_equal(a.layers[2].attn_head_dim, 12);
    assert_int_equal(a.layers[3].ffn, 80);
    assert_int_equal(a.layers[4].mamba_heads, 2);
    assert_int_equal(a.layers[4].mamba_groups, 2);
    const ac_block_dims *e5 = &a.layers[5];
    assert_int_equal(e5->n_experts, 12);
    assert_int_equal(e5->top_k, 3);
    assert_int_equal(e5->n_group, 2);
    assert_int_equal(e5->norm_topk_prob, 1);
    assert_true(e5->routed_scaling == 1.0f);
    assert_int_equal(e5->shared_ffn, 24);
    assert_int_equal(a.layers[6].ffn, 48);
    assert_false(ac_arch_is_homogeneous(&a));
    ac_arch_free(&a);
    cJSON_free(t);
    cJSON_free(u);
}

static void test_puzzle_errors(void **state)
{
    (void)state;
    expect_error_free(puzzle_text("[{\"block_type\": \"mamba\"}, {\"block_type\": \"moe\", \"n_routed_experts\": 4, "
                                  "\"num_experts_per_tok\": 5, \"n_group\": 1}]"),
                      AC_ERR_INVALID, "block_configs[1].num_experts_per_tok 5 exceeds block_configs[1].n_routed_experts 4",
                      NULL);
    /* top_k from the entry, the expert count from the globals */
    expect_error_free(puzzle_text("[{\"block_type\": \"moe\", \"num_experts_per_tok\": 9}]"), AC_ERR_INVALID,
                      "block_configs[0]: block_configs[0].num_experts_per_tok 9 exceeds n_routed_experts 8", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"mamba\"}, {\"block_type\": \"conv\"}]"), AC_ERR_INVALID,
                      "block_configs[1].block_type 'conv' is unknown", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"mamba\"}, {\"intermediate_size\": 8}]"), AC_ERR_INVALID,
                      "block_configs[1]: missing block_type", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": 3}]"), AC_ERR_INVALID,
                      "block_configs[0].block_type must be a string, got a number", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"mlp\"}, {\"block_type\": \"mlp\"}, {\"block_type\": \"mamba\"},"
                                  " {\"block_type\": \"moe\", \"n_routed_experts\": \"8\"}]"),
                      AC_ERR_INVALID, "block_configs[3].n_routed_experts must be an integer, got a string", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"moe\", \"n_routed_experts\": 7.5}]"), AC_ERR_INVALID,
                      "block_configs[0].n_routed_experts must be an integer, got 7.5", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"moe\", \"moe_shared_expert_intermediate_size\": -1}]"),
                      AC_ERR_INVALID, "block_configs[0].moe_shared_expert_intermediate_size must be >= 0, got -1",
                      NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"moe\", \"norm_topk_prob\": 1}]"), AC_ERR_INVALID,
                      "block_configs[0].norm_topk_prob must be true or false, got a number", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"mlp\"}, [1]]"), AC_ERR_INVALID,
                      "block_configs[1] must be an object, got an array", NULL);
    expect_error_free(puzzle_text("{\"block_type\": \"mlp\"}"), AC_ERR_INVALID,
                      "block_configs must be an array of objects, got an object", NULL);
    expect_error_free(puzzle_text("[]"), AC_ERR_INVALID, "block_configs is empty", NULL);
    expect_error_free(puzzle_text(NULL), AC_ERR_INVALID, "missing block_configs", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"moe\", \"moe_latent_size\": 16}]"), AC_ERR_UNSUPPORTED,
                      "block_configs[0].moe_latent_size is 16", NULL);
    expect_error_free(puzzle_text("[{\"block_type\": \"mamba\", \"mamba_num_heads\": 3}]"), AC_ERR_INVALID,
                      "block_configs[0]: block_configs[0].mamba_num_heads 3 is not a multiple of n_groups 2", NULL);
    char *t = puzzle_text("[{\"block_type\": \"mamba\"}, {\"block_type\": \"mlp\"}]");
    expect_error_free(with(t, "num_hidden_layers", "3"), AC_ERR_INVALID,
                      "num_hidden_layers 3 does not match the 2 layers of block_configs", NULL);
    cJSON_free(t);
    /* A key the entry needs that neither the entry nor the globals have. */
    char *u = with2(BASE, "intermediate_size", NULL, "num_hidden_layers", NULL);
    char *v = with2(u, "model_type", "\"nemotron_h_puzzle\"", "block_configs", "[{\"block_type\": \"mlp\"}]");
    expect_error(v, AC_ERR_INVALID, "block_configs[0]: missing intermediate_size", NULL);
    cJSON_free(u);
    cJSON_free(v);
    expect_error_free(with(BASE, "block_configs", "[{\"block_type\": \"mlp\"}]"), AC_ERR_INVALID,
                      "block_configs is only read with model_type nemotron_h_puzzle", NULL);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    expect_error_free(with(BASE, "hybrid_override_pattern", "\"M*-X\""), AC_ERR_INVALID,
                      "hybrid_override_pattern[3]: unknown layer letter 'X'", NULL);
    expect_error_free(with(BASE, "hybrid_override_pattern", "\"\""), AC_ERR_INVALID, "hybrid_override_pattern is empty",
                      NULL);
    expect_error_free(with(BASE, "hybrid_override_pattern", "[\"M\"]"), AC_ERR_INVALID,
                      "hybrid_override_pattern must be a string, got an array", NULL);
    expect_error_free(with(BASE, "hybrid_override_pattern", NULL), AC_ERR_INVALID,
                      "missing hybrid_override_pattern (or layers_block_type)", NULL);
    expect_error_free(with(BASE, "num_hidden_layers", "5"), AC_ERR_INVALID,
                      "num_hidden_layers 5 does not match the 4 layers of hybrid_override_pattern", NULL);
    expect_error_free(with(BASE, "hidden_size", NULL), AC_ERR_INVALID, "x/config.json: missing hidden_size", NULL);
    expect_error_free(with(BASE, "hidden_size", "\"32\""), AC_ERR_INVALID, "hidden_size must be an integer, got a string",
                      NULL);
    expect_error_free(with(BASE, "hidden_size", "0"), AC_ERR_INVALID, "hidden_size must be positive, got 0", NULL);
    expect_error_free(with(BASE, "vocab_size", "1e12"), AC_ERR_INVALID, "vocab_size must be an integer", NULL);
    expect_error_free(with(BASE, "tie_word_embeddings", "\"false\""), AC_ERR_INVALID,
                      "tie_word_embeddings must be true or false, got a string", NULL);
    expect_error_free(with(BASE, "layer_norm_epsilon", "-1"), AC_ERR_INVALID, "layer_norm_epsilon must be positive",
                      NULL);
    expect_error_free(with(BASE, "mamba_num_heads", NULL), AC_ERR_INVALID, "missing mamba_num_heads", NULL);
    expect_error_free(with(BASE, "mamba_num_heads", "3"), AC_ERR_INVALID,
                      "mamba_num_heads 3 is not a multiple of n_groups 2", NULL);
    expect_error_free(with(BASE, "num_key_value_heads", "3"), AC_ERR_INVALID,
                      "num_attention_heads 4 is not a multiple of num_key_value_heads 3", NULL);
    expect_error_free(with(BASE, "num_experts_per_tok", "9"), AC_ERR_INVALID, "num_experts_per_tok 9 exceeds n_routed_experts 8",
                      NULL);
    expect_error_free(with(BASE, "n_group", "3"), AC_ERR_INVALID, "n_routed_experts 8 is not a multiple of n_group 3",
                      NULL);
    expect_error_free(with(BASE, "topk_group", "3"), AC_ERR_INVALID, "topk_group 3 exceeds n_group 2", NULL);
    /* Caught by ac_arch_validate: 3 experts cannot come from one group of 4... they can; 5 cannot. */
    expect_error_free(with(BASE, "num_experts_per_tok", "5"), AC_ERR_INVALID,
                      "layer 3 (moe): top_k 5 exceeds the 4 experts in topk_group 1 groups", NULL);
    /* What the engine cannot run. */
    expect_error_free(with(BASE, "conv_kernel", "17"), AC_ERR_INVALID,
                      "layer 0 (mamba): conv_kernel 17 exceeds the engine's limit of 16", NULL);
    expect_error_free(with(BASE, "moe_latent_size", "64"), AC_ERR_UNSUPPORTED, "moe_latent_size is 64", NULL);
    expect_error_free(with(BASE, "use_bias", "true"), AC_ERR_UNSUPPORTED, "use_bias is true", NULL);
    expect_error_free(with(BASE, "mlp_bias", "true"), AC_ERR_UNSUPPORTED, "mlp_bias is true", NULL);
    expect_error_free(with(BASE, "attention_bias", "true"), AC_ERR_UNSUPPORTED, "attention_bias is true", NULL);
    expect_error_free(with(BASE, "mlp_hidden_act", "\"gelu\""), AC_ERR_UNSUPPORTED, "mlp_hidden_act 'gelu' is not supported",
                      NULL);
    expect_error_free(with(BASE, "mamba_hidden_act", "\"relu\""), AC_ERR_UNSUPPORTED,
                      "mamba_hidden_act 'relu' is not supported", NULL);
    expect_error_free(with(BASE, "model_type", "\"llama\""), AC_ERR_UNSUPPORTED, "model_type 'llama' is not supported",
                      NULL);
    expect_error_free(with(BASE, "model_type", NULL), AC_ERR_INVALID, "missing model_type", NULL);
    /* Bad JSON, with the position. */
    expect_error("{\n  \"model_type\": \"nemotron_h\",\n  \"vocab_size\": 100,,\n}", AC_ERR_INVALID,
                 "invalid JSON at line 3, column 22", NULL);
    expect_error("", AC_ERR_INVALID, "invalid JSON", NULL);
    expect_error("[1, 2]", AC_ERR_INVALID, "the top level must be a JSON object, got an array", NULL);
    expect_error("{\"model_type\": \"nemotron_h\", \"model_type\": \"x\"}", AC_ERR_INVALID,
                 "key 'model_type' appears twice", NULL);
}

/* Python's json writes float("inf") bare; transformers' Mamba configs carry one. */
static void test_bare_infinity(void **state)
{
    (void)state;
    size_t n = strlen(BASE);
    char *text = malloc(n + 128);
    memcpy(text, BASE, n - 1);
    strcpy(text + n - 1, ", \"time_step_limit\": [0.0, Infinity], \"x\": -Infinity, \"note\": \"Infinity\"}");
    ac_arch a;
    parse_ok(text, &a);
    assert_int_equal(a.n_layers, 4);
    ac_arch_free(&a);
    strcpy(text + n - 1, ", \"time_step_min\": Infinity}");
    expect_error(text, AC_ERR_INVALID, "time_step_min must be >= 0 and finite, got inf", NULL);
    free(text);
}

static void test_read_file(void **state)
{
    (void)state;
    ac_arch a;
    assert_int_equal(ac_config_json_read("/nonexistent/config.json", &a), AC_ERR_IO);
    assert_non_null(strstr(ac_error_message(), "/nonexistent/config.json: cannot open"));
    char path[] = "/tmp/ac_cfg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *bad = "{\"model_type\": \"nemotron_h\", \"vocab_size\": 10, \"hidden_size\": 8, \"hybrid_override_pattern\": \"-\", \"intermediate_size\": 0}";
    assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    assert_int_equal(ac_config_json_read(path, &a), AC_ERR_INVALID);
    char want[96];
    snprintf(want, sizeof want, "%s: intermediate_size must be positive, got 0", path);
    assert_string_equal(ac_error_message(), want);
    unlink(path);
}

/* ---- writing ---- */

static void roundtrip(const ac_arch *a, const char *want_type)
{
    char dir[] = "/tmp/ac_cfgw_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(ac_config_json_write_dtype(path, a, AC_DTYPE_BF16), AC_OK);
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    ac_arch b;
    if (ac_config_json_read(path, &b) != AC_OK)
        fail_msg("reading back: %s", ac_error_message());
    assert_layers_equal(a, &b);
    ac_arch_free(&b);
    /* The text itself: the form, the dtype, the class name. */
    char *text;
    assert_int_equal(ac_config_json_format(a, AC_DTYPE_BF16, &text), AC_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "model_type")->valuestring, want_type);
    assert_string_equal(cJSON_GetObjectItem(root, "torch_dtype")->valuestring, "bfloat16");
    assert_non_null(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "architectures"), 0));
    assert_int_equal(cJSON_IsArray(cJSON_GetObjectItem(root, "block_configs")), !strcmp(want_type, "nemotron_h_puzzle"));
    cJSON_Delete(root);
    free(text);
    unlink(path);
    rmdir(dir);
}

static void test_roundtrip_homogeneous(void **state)
{
    (void)state;
    ac_arch a;
    parse_ok(BASE, &a);
    a.norm_eps = 1e-5f;            /* not exactly representable: must survive the decimal form */
    a.time_step_min = 0.0123f;
    a.layers[3].routed_scaling = 1.0f / 3.0f;
    a.use_conv_bias = 0;
    roundtrip(&a, "nemotron_h");
    char *text;
    assert_int_equal(ac_config_json_format(&a, AC_DTYPE_F32, &text), AC_OK);
    assert_non_null(strstr(text, "\"layer_norm_epsilon\":\t1e-05")); /* the short form, not 9.99999974737875e-06 */
    assert_non_null(strstr(text, "\"hybrid_override_pattern\":\t\"M*-E\""));
    free(text);
    ac_arch_free(&a);
}

static void test_roundtrip_heterogeneous(void **state)
{
    (void)state;
    char *t = puzzle_text(PUZZLE_BLOCKS);
    ac_arch a;
    parse_ok(t, &a);
    a.layers[5].routed_scaling = 0.7f;
    roundtrip(&a, "nemotron_h_puzzle");
    /* Homogeneous but a MoE without a shared expert: only the puzzle form says so. */
    ac_arch b;
    parse_ok(BASE, &b);
    b.layers[3].shared_ffn = 0;
    roundtrip(&b, "nemotron_h_puzzle");
    ac_arch_free(&b);
    /* One differing mamba layer is enough. */
    parse_ok(BASE, &b);
    ac_arch c;
    assert_int_equal(ac_arch_copy(&c, &b), AC_OK);
    assert_true(ac_arch_is_homogeneous(&c));
    ac_arch_free(&b);
    ac_arch_free(&a);
    cJSON_free(t);
    ac_arch_free(&c);
}

static void test_fixture_configs_roundtrip(void **state)
{
    (void)state;
    const char *names[] = {"hybrid_f32", "moe_grouped_bf16", "puzzle_hetero"};
    const char *types[] = {"nemotron_h", "nemotron_h", "nemotron_h_puzzle"};
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/fixtures/nemotron_h/%s/config.json", AC_SOURCE_DIR, names[k]);
        ac_arch a;
        if (ac_config_json_read(path, &a) != AC_OK)
            fail_msg("%s", ac_error_message());
        roundtrip(&a, types[k]);
        ac_arch_free(&a);
    }
}

/* ---- arch helpers ---- */

static void test_validate_messages(void **state)
{
    (void)state;
    ac_arch a;
    parse_ok(BASE, &a);
    assert_int_equal(ac_arch_validate(&a), AC_OK);
    a.layers[3].top_k = 9;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "arch: layer 3 (moe): top_k 9 exceeds n_experts 8");
    a.layers[3].top_k = 3;
    a.layers[1].attn_kv_heads = 0;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "arch: layer 1 (attention): attn_kv_heads must be positive, got 0");
    a.layers[1].attn_kv_heads = 2;
    a.layers[0].mamba_groups = 3;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "arch: layer 0 (mamba): mamba_heads 4 is not a multiple of mamba_groups 3");
    a.layers[0].mamba_groups = 2;
    a.layers[2].ffn = -1;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "arch: layer 2 (mlp): ffn must be positive, got -1");
    a.layers[2].ffn = 48;
    a.hidden = 0;
    assert_int_equal(ac_arch_validate(&a), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "arch: hidden must be positive, got 0");
    ac_arch_free(&a);
    assert_null(a.layers);
}

static void test_param_counts(void **state)
{
    (void)state;
    ac_arch a;
    parse_ok(BASE, &a);
    const int64_t D = 32, V = 100;
    /* mamba: in_proj [132, D], conv [96, 1, 3] + bias, dt_bias/A_log/D [4], norm [32], out_proj [D, 32] */
    int64_t mamba = D + 132 * D + 96 * 3 + 96 + 3 * 4 + 32 + D * 32;
    int64_t attn = D + 48 * D + 2 * 24 * D + D * 48;
    int64_t mlp = D + 2 * 48 * D;
    int64_t moe_fixed = D + 8 * D + 8 + 2 * 24 * D;
    int64_t expert = 2 * 16 * D;
    assert_int_equal(ac_block_param_count(&a, &a.layers[0]), mamba);
    assert_int_equal(ac_block_param_count(&a, &a.layers[1]), attn);
    assert_int_equal(ac_block_param_count(&a, &a.layers[2]), mlp);
    assert_int_equal(ac_block_param_count(&a, &a.layers[3]), moe_fixed + 8 * expert);
    assert_int_equal(ac_block_active_param_count(&a, &a.layers[3]), moe_fixed + 3 * expert);
    assert_int_equal(ac_block_active_param_count(&a, &a.layers[0]), mamba);
    ac_param_counts c = ac_arch_param_counts(&a); /* tied: no lm_head */
    assert_int_equal(c.embedding, V * D);
    assert_int_equal(c.total, V * D + mamba + attn + mlp + moe_fixed + 8 * expert + D);
    assert_int_equal(c.active, c.total - 5 * expert);
    /* The arena holds exactly the counted parameters, tied or not. */
    for (int tie = 1; tie >= 0; tie--) {
        a.tie_embeddings = tie;
        ac_model *m;
        assert_int_equal(ac_model_create(&a, &m), AC_OK);
        size_t n;
        ac_model_arena(m, &n);
        assert_int_equal((int64_t)n, ac_arch_param_counts(&a).total);
        ac_model_free(m);
    }
    assert_int_equal(ac_arch_param_counts(&a).total, c.total + V * D);
    ac_arch_free(&a);
}

static void test_print(void **state)
{
    (void)state;
    char *t = puzzle_text(PUZZLE_BLOCKS);
    ac_arch a;
    parse_ok(t, &a);
    FILE *out = tmpfile();
    ac_arch_print(&a, out);
    long size = ftell(out);
    char *text = calloc((size_t)size + 1, 1);
    rewind(out);
    assert_int_equal(fread(text, 1, (size_t)size, out), (size_t)size);
    fclose(out);
    assert_non_null(strstr(text, "pattern: ME*-ME- (7 layers"));
    assert_non_null(strstr(text, "heterogeneous"));
    assert_non_null(strstr(text, "layer   1 E moe"));
    assert_non_null(strstr(text, "experts 6 (top 2) x ffn 24, shared 0"));
    assert_non_null(strstr(text, "layer   3 - mlp       ffn 80"));
    int lines = 0;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 2 + 7);
    free(text);
    ac_arch_free(&a);
    cJSON_free(t);
    assert_int_equal(ac_block_letter(AC_BLOCK_MOE), 'E');
    assert_string_equal(ac_block_name(AC_BLOCK_ATTENTION), "attention");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrid_override_pattern),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_layers_block_type_both_spellings),
        cmocka_unit_test(test_legacy_aliases),
        cmocka_unit_test(test_puzzle_overrides),
        cmocka_unit_test(test_puzzle_errors),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_bare_infinity),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_roundtrip_homogeneous),
        cmocka_unit_test(test_roundtrip_heterogeneous),
        cmocka_unit_test(test_fixture_configs_roundtrip),
        cmocka_unit_test(test_validate_messages),
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
