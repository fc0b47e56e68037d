/* The model on the CUDA backend against the CPU engine, on a GPU (exit 77, a skip, with
 * the reason, without one), or on the emulator (test_cuda_model_emu cuda-emu): a hybrid model's prefill and decode logits within 1e-4 of the
 * logit scale (f32, TF32 off: the sums differ in order only), greedy generation the
 * same tokens, and a training step's loss and weight gradients within 1e-3 of their
 * scale (the backward sums longer chains: the scan's and attention's over the sequence). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/train.h"
#include "kernels/kernels.h"
#include "hybrid_model.h"
#include "model/model_internal.h"
#ifdef AC_TEST_CUDA_EMU
#include "cudaemu.h"
#endif

enum { V = 64, D = 32, L = 6, PROMPT = 40, GEN = 16, B = 2, T = 24 };

static const ac_backend *cuda;

static ac_model *make_model(void)
{
    ac_block_dims dims = hybrid_small_dims();
    return hybrid_model(V, D, &dims, 3, 0.2f);
}

/* max |a - b| / max |a| */
static double relative(const float *a, const float *b, size_t n)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return scale > 0.0 ? worst / scale : worst;
}

/* The prompt's logits, then GEN greedy tokens with each step's logits. */
static void generate(const ac_model *m, float *prompt_logits, float *step_logits, int32_t *tokens)
{
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c), AC_OK);
    int32_t prompt[PROMPT];
    for (int t = 0; t < PROMPT; t++)
        prompt[t] = (t * 17 + 5) % V;
    const int32_t *seq[1] = {prompt};
    int n[1] = {PROMPT};
    ac_batch b = {.n_seqs = 1, .tokens = seq, .n_tokens = n, .caches = &c};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_ALL, prompt_logits), AC_OK);
    int32_t next = ac_argmax(prompt_logits + (size_t)(PROMPT - 1) * V, V);
    for (int g = 0; g < GEN; g++) {
        tokens[g] = next;
        const int32_t *one[1] = {&tokens[g]};
        int ones[1] = {1};
        ac_batch d = {.n_seqs = 1, .tokens = one, .n_tokens = ones, .caches = &c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, step_logits + (size_t)g * V), AC_OK);
        next = ac_argmax(step_logits + (size_t)g * V, V);
    }
    ac_cache_free(c);
    ac_runtime_free(rt);
}

static void test_logits_and_generation(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, cuda, &dev), AC_OK);
    float *pw = malloc(PROMPT * V * sizeof *pw), *pg = malloc(PROMPT * V * sizeof *pg);
    float *sw = malloc(GEN * V * sizeof *sw), *sg = malloc(GEN * V * sizeof *sg);
    int32_t tw[GEN], tg[GEN];
    assert_true(pw && pg && sw && sg);
    generate(host, pw, sw, tw);
    generate(dev, pg, sg, tg);
    assert_null(cuda->take_error());
    double prefill = relative(pw, pg, (size_t)PROMPT * V), decode = relative(sw, sg, (size_t)GEN * V);
    printf("  logits: prefill %.2e, decode %.2e of the logit scale\n", prefill, decode);
    assert_true(prefill < 1e-4);
    assert_true(decode < 1e-4);
    assert_memory_equal(tw, tg, sizeof tw);
    free(pw);
    free(pg);
    free(sw);
    free(sg);
    ac_model_free(dev);
    ac_model_free(host);
}

/* One cross-entropy step's loss and weight gradients. */
static double step_grads(const ac_model *m, float *grads_out)
{
    ac_model *grads;
    assert_int_equal(ac_model_create_on(&m->arch, m->backend, &grads), AC_OK);
    ac_train_step *s;
    assert_int_equal(ac_train_step_create(m, B, T, &s), AC_OK);
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (i * 7 + 1) % V;
        targets[i] = (i * 11 + 3) % V;
    }
    ac_step_inputs in = {.tokens = tokens, .targets = targets, .grads = grads};
    double loss;
    assert_int_equal(ac_train_step_run(s, &in, &loss), AC_OK);
    host_arena_copy(grads, grads_out);
    ac_train_step_free(s);
    ac_model_free(grads);
    return loss;
}

static void test_training_step(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, cuda, &dev), AC_OK);
    size_t n;
    ac_model_arena(host, &n);
    float *gw = malloc(n * sizeof *gw), *gg = malloc(n * sizeof *gg);
    assert_true(gw && gg);
    double want = step_grads(host, gw), got = step_grads(dev, gg);
    assert_null(cuda->take_error());
    double grads = relative(gw, gg, n);
    printf("  training step: loss %.6f vs %.6f, gradients %.2e of their scale\n", want, got, grads);
    assert_true(fabs(want - got) < 1e-4 * want);
    assert_true(grads < 1e-3);
    free(gw);
    free(gg);
    ac_model_free(dev);
    ac_model_free(host);
}

/* Soft masks on every axis (values in (0, 1], one expert's score at 0 so that it is never
 * chosen, a Mamba head at 0.1) and room for every mask gradient, for the model's layers. */
enum { AXES = 5 }; /* Mamba heads, experts, expert scores, FFN channels, shared-FFN channels */

typedef struct {
    float values[2][AXES][L][64], hidden[2][D], gate[2][L]; /* [0] the masks, [1] their gradients */
    const float *mask_of[AXES][L];
    float *grad_of[AXES][L];
    ac_masks masks;
    ac_mask_grads grads;
} soft_masks;

static int axis_width(const ac_block_dims *b, int axis)
{
    int moe = b->kind == AC_BLOCK_MOE;
    switch (axis) {
    case 0: return b->kind == AC_BLOCK_MAMBA ? b->mamba_heads : 0;
    case 1:
    case 2: return moe ? b->n_experts : 0;
    case 3: return moe ? b->expert_ffn : b->kind == AC_BLOCK_MLP ? b->ffn : 0;
    default: return moe ? b->shared_ffn : 0;
    }
}

static void make_masks(const ac_model *m, soft_masks *k)
{
    memset(k, 0, sizeof *k);
    for (int c = 0; c < D; c++)
        k->hidden[0][c] = c % 3 == 0 ? 0.5f : 1.0f;
    for (int l = 0; l < L; l++) {
        k->gate[0][l] = 0.6f + 0.05f * (float)l;
        for (int a = 0; a < AXES; a++) {
            int width = axis_width(&m->arch.layers[l], a);
            assert_true(width <= 64);
            for (int i = 0; i < width; i++)
                k->values[0][a][l][i] = a == 0 && i == width - 1 ? 0.1f : a == 2 && i == 1 ? 0.0f
                                                                   : 1.0f - 0.07f * (float)(i % 8);
            k->mask_of[a][l] = width ? k->values[0][a][l] : NULL;
            k->grad_of[a][l] = width ? k->values[1][a][l] : NULL;
        }
    }
    k->masks = (ac_masks){k->hidden[0], k->mask_of[0], k->mask_of[1], k->mask_of[2], k->mask_of[3], k->mask_of[4],
                          k->gate[0]};
    k->grads = (ac_mask_grads){k->hidden[1], k->grad_of[0], k->grad_of[1], k->grad_of[2], k->grad_of[3],
                               k->grad_of[4], k->gate[1]};
}

static void test_masked_distillation_step(void **state)
{
    (void)state;
    ac_block_dims dims = hybrid_small_dims();
    ac_model *host = make_model(), *teacher = hybrid_model(V, D, &dims, 4, 0.2f), *dev, *dev_teacher;
    assert_int_equal(ac_model_to_backend(host, cuda, &dev), AC_OK);
    assert_int_equal(ac_model_to_backend(teacher, cuda, &dev_teacher), AC_OK);
    static soft_masks want, got;
    make_masks(host, &want);
    make_masks(host, &got);
    size_t n;
    ac_model_arena(host, &n);
    float *gw = malloc(n * sizeof *gw), *gg = malloc(n * sizeof *gg);
    assert_true(gw && gg);
    double lw[2], lg[2];
    hybrid_masked_steps(host, teacher, B, T, &want.masks, &want.grads, lw, gw);
    hybrid_masked_steps(dev, dev_teacher, B, T, &got.masks, &got.grads, lg, gg);
    assert_null(cuda->take_error());
    /* the mask gradients: hidden, gate and every per-layer axis, one array each way */
    size_t per_axes = sizeof want.values[1] / sizeof(float);
    double masks = fmax(relative(want.values[1][0][0], got.values[1][0][0], per_axes),
                        fmax(relative(want.hidden[1], got.hidden[1], D), relative(want.gate[1], got.gate[1], L)));
    double weights = relative(gw, gg, n);
    printf("  masked distillation: losses %.6f %.6f vs %.6f %.6f, weight gradients %.2e, mask gradients %.2e\n",
           lw[0], lw[1], lg[0], lg[1], weights, masks);
    for (int s = 0; s < 2; s++)
        assert_true(fabs(lw[s] - lg[s]) < 1e-4 * lw[s]);
    assert_true(weights < 1e-3);
    assert_true(masks < 1e-3);
    /* each axis's gradient moved (the comparison above is not of zeros) */
    for (int a = 0; a < AXES; a++) {
        double moved = 0.0;
        for (int l = 0; l < L; l++)
            for (int i = 0; i < 64; i++)
                moved += fabs(want.values[1][a][l][i]);
        if (moved == 0.0)
            fail_msg("the gradient of mask axis %d stayed zero", a);
    }
    free(gw);
    free(gg);
    ac_model_free(dev);
    ac_model_free(dev_teacher);
    ac_model_free(host);
    ac_model_free(teacher);
}

int main(int argc, char **argv)
{
#ifdef AC_TEST_CUDA_EMU
    if (ac_backend_register(ac_cuda_emulated_backend()) != AC_OK)
        return 1;
#endif
    char why[256];
    cuda = ac_backend_select(argc > 1 ? argv[1] : "cuda", why, sizeof why);
    if (!cuda) {
        printf("test_cuda_model: skipped: %s\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_and_generation),
        cmocka_unit_test(test_training_step),
        cmocka_unit_test(test_masked_distillation_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
