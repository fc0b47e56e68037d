/* The tests' small hybrid model: pattern M*E-ME (Mamba2, attention, MoE, MLP, Mamba2,
 * MoE), every layer with the same block dims (each kind reads its own fields), random
 * weights; the two sets of dims the device tests use; a device model's arena read back;
 * the search's steps (masked distillation) on a model, wherever it lives. */
#ifndef AC_TESTS_HYBRID_MODEL_H
#define AC_TESTS_HYBRID_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/train.h"
#include "model/model_internal.h"

static ac_model *hybrid_model(int vocab, int hidden, const ac_block_dims *dims, uint64_t seed, float std)
{
    const char *pattern = "M*E-ME";
    int L = (int)strlen(pattern);
    ac_arch a = {.vocab = vocab, .hidden = hidden, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = *dims;
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, seed, std);
    return m;
}

/* Heads of 4 (the guarded-device tests: many steps, cheap). */
static inline ac_block_dims hybrid_tiny_dims(void)
{
    return (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                           .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 4,
                           .ffn = 12, .n_experts = 6, .top_k = 2, .expert_ffn = 6, .shared_ffn = 5,
                           .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
}

/* Heads of 8 (the GPU tests: kernels past their smallest shapes). */
static inline ac_block_dims hybrid_small_dims(void)
{
    return (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 8, .mamba_groups = 2, .ssm_state = 8,
                           .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 8,
                           .ffn = 48, .n_experts = 8, .top_k = 2, .expert_ffn = 16, .shared_ffn = 24,
                           .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
}

/* A model's arena (on whatever backend) copied into out on the host. */
static inline void host_arena_copy(const ac_model *m, float *out)
{
    ac_model *back;
    assert_int_equal(ac_model_to_backend(m, NULL, &back), AC_OK);
    size_t n;
    const float *w = ac_model_arena(back, &n);
    memcpy(out, w, n * sizeof *out);
    ac_model_free(back);
}

/* Two distillation steps of `m` (batch x seq tokens of a vocab-word model) from `teacher`
 * (on the same device) under `masks`, adding to `mask_grads`; each step's loss, and the
 * weight gradients copied to the host. */
static inline void hybrid_masked_steps(const ac_model *m, const ac_model *teacher, int batch, int seq,
                                       const ac_masks *masks, ac_mask_grads *mask_grads, double *losses,
                                       float *wgrads)
{
    ac_model *grads;
    assert_int_equal(ac_model_create_on(&m->arch, m->backend, &grads), AC_OK);
    ac_train_step *step, *tstep;
    assert_int_equal(ac_train_step_create(m, batch, seq, &step), AC_OK);
    assert_int_equal(ac_train_step_create(teacher, batch, seq, &tstep), AC_OK);
    int n = batch * seq;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    assert_non_null(tokens);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < n; i++)
            tokens[i] = (i * 5 + s * 7 + 2) % m->arch.vocab;
        double unused;
        ac_step_inputs tin = {.tokens = tokens, .targets = tokens};
        assert_int_equal(ac_train_step_loss(tstep, &tin, &unused), AC_OK);
        ac_step_inputs in = {.tokens = tokens, .teacher_logits = ac_train_step_logits(tstep), .kd_tau = 1.5f,
                             .masks = masks, .grads = grads, .mask_grads = mask_grads};
        assert_int_equal(ac_train_step_run(step, &in, &losses[s]), AC_OK);
    }
    free(tokens);
    host_arena_copy(grads, wgrads);
    ac_train_step_free(tstep);
    ac_train_step_free(step);
    ac_model_free(grads);
}

#endif
