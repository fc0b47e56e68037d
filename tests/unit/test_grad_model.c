/* The training step's own gradients by finite differences: the embeddings, every norm,
 * the LM head, the hidden-channel mask and the per-layer gates, through a model with all
 * four block kinds; and masks of ones changing no bit of the loss or the gradients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "autocompress/model.h"
#include "autocompress/train.h"
#include "grad_check.h"

enum { B = 2, T = 6, V = 24, D = 16, L = 4 };

typedef struct {
    ac_model *model;
    ac_train_step *step;
    int32_t tokens[B * T], targets[B * T];
    float hidden[D], gate[L];
    ac_masks masks;
} fixture;

/* Every token uses every expert (top_k = n_experts): the hidden mask moves every
 * router score, and a selection flip would be a jump no finite difference can follow
 * (test_grad_moe covers selection with guarded margins). */
static ac_model *make_model(void)
{
    const char *pattern = "M*-E";
    ac_arch a = {.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8, .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                                      .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 4, .ffn = 12,
                                      .n_experts = 4, .top_k = 4, .expert_ffn = 6, .shared_ffn = 5, .n_group = 1,
                                      .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, 7, 0.3f);
    /* norms away from one so their gradients are exercised in general position */
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        if (strstr(p->name, "norm"))
            gc_fill(p->data, p->count, 0.7f, 1.3f, 100 + i);
    }
    return m;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->model = make_model();
    if (ac_train_step_create(f->model, B, T, &f->step) != AC_OK)
        return -1;
    for (int i = 0; i < B * T; i++) {
        f->tokens[i] = (i * 7 + 3) % V;
        f->targets[i] = (i * 5 + 1) % V;
    }
    gc_fill(f->hidden, D, 0.3f, 1.0f, 1);
    gc_fill(f->gate, L, 0.5f, 1.0f, 2);
    f->masks = (ac_masks){.hidden = f->hidden, .layer_gate = f->gate};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ac_train_step_free(f->step);
    ac_model_free(f->model);
    free(f);
    return 0;
}

static double loss_of(void *ctx)
{
    fixture *f = ctx;
    ac_step_inputs in = {.tokens = f->tokens, .targets = f->targets, .masks = &f->masks};
    double loss;
    assert_int_equal(ac_train_step_loss(f->step, &in, &loss), AC_OK);
    return loss;
}

/* f32 central differences on a loss of O(1): the loss carries ~5e-7 of rounding noise,
 * an error of ~1e-4 / eps in the numeric gradient, while eps much above 3e-3 starts to
 * flip MoE selections and cross relu2's kink. So eps 3e-3, 2e-2 relative, 1e-4 absolute. */
#define EPS 3e-3f
#define RTOL 2e-2
#define ATOL 1e-4

static void test_model_gradients_and_mask_gradients(void **state)
{
    fixture *f = *state;
    ac_model *grads;
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &grads), AC_OK);
    float dhidden[D] = {0}, dgate[L] = {0};
    ac_mask_grads mg = {.hidden = dhidden, .layer_gate = dgate};
    ac_step_inputs in = {.tokens = f->tokens, .targets = f->targets, .masks = &f->masks, .grads = grads, .mask_grads = &mg};
    double loss;
    assert_int_equal(ac_train_step_run(f->step, &in, &loss), AC_OK);

    int failed = 0;
    failed += gc_check("hidden mask", f->hidden, D, dhidden, D, loss_of, f, EPS, ATOL, RTOL).failed;
    failed += gc_check("layer gates", f->gate, L, dgate, L, loss_of, f, EPS, ATOL, RTOL).failed;
    const char *names[] = {"embeddings.weight", "norm_f.weight", "lm_head.weight", "layers.0.norm.weight",
                           "layers.1.norm.weight", "layers.2.norm.weight", "layers.3.norm.weight",
                           "layers.0.mixer.in_proj.weight", "layers.1.mixer.q_proj.weight",
                           "layers.2.mixer.up_proj.weight", "layers.3.mixer.gate.weight",
                           "layers.3.mixer.experts.1.down_proj.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const ac_param *p = ac_model_find_param(f->model, names[i]);
        const ac_param *g = ac_model_find_param(grads, names[i]);
        assert_non_null(p);
        failed += gc_check(names[i], p->data, p->count, g->data, 40, loss_of, f, EPS, ATOL, RTOL).failed;
    }
    assert_int_equal(failed, 0);
    ac_model_free(grads);
}

static void test_masks_of_ones_change_no_bit(void **state)
{
    fixture *f = *state;
    ac_model *g_none, *g_ones;
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &g_none), AC_OK);
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &g_ones), AC_OK);
    float ones_d[D], ones_l[L];
    for (int i = 0; i < D; i++)
        ones_d[i] = 1.0f;
    for (int i = 0; i < L; i++)
        ones_l[i] = 1.0f;
    ac_masks ones = {.hidden = ones_d, .layer_gate = ones_l};
    ac_step_inputs a = {.tokens = f->tokens, .targets = f->targets, .grads = g_none};
    ac_step_inputs b = {.tokens = f->tokens, .targets = f->targets, .grads = g_ones, .masks = &ones};
    double la, lb;
    assert_int_equal(ac_train_step_run(f->step, &a, &la), AC_OK);
    assert_int_equal(ac_train_step_run(f->step, &b, &lb), AC_OK);
    assert_memory_equal(&la, &lb, sizeof la);
    size_t n;
    float *ga = ac_model_arena(g_none, &n), *gb = ac_model_arena(g_ones, &n);
    assert_memory_equal(ga, gb, n * sizeof *ga);
    ac_model_free(g_none);
    ac_model_free(g_ones);
}

static void test_bad_inputs_are_rejected(void **state)
{
    fixture *f = *state;
    int32_t bad[B * T];
    memcpy(bad, f->tokens, sizeof bad);
    bad[T + 2] = V;
    double loss;
    ac_step_inputs in = {.tokens = bad, .targets = f->targets};
    assert_int_equal(ac_train_step_run(f->step, &in, &loss), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "sequence 1, position 2"));
    ac_step_inputs neither = {.tokens = f->tokens};
    assert_int_equal(ac_train_step_run(f->step, &neither, &loss), AC_ERR_INVALID);
    float teacher[1];
    ac_step_inputs cold = {.tokens = f->tokens, .teacher_logits = teacher, .kd_tau = 0.0f};
    assert_int_equal(ac_train_step_run(f->step, &cold, &loss), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "temperature"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_model_gradients_and_mask_gradients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_masks_of_ones_change_no_bit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_inputs_are_rejected, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
