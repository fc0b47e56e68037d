/* The model on the CUDA backend against the CPU engine, on a GPU (exit 77, a skip, with
 * the reason, without one), or on the emulator (test_cuda_model_emu cuda-emu): a hybrid
 * model's prefill and decode logits within 1e-4 of the logit scale (f32, TF32 off: the
 * sums differ in order only), greedy generation the same tokens, a training step's loss
 * and weight gradients within 1e-3 of their scale (the backward sums longer chains: the
 * scan's and attention's over the sequence), and the search's step (distillation under
 * soft masks on every axis) with its weight and mask gradients as closely; two sequences
 * decoding together; and a bf16 serving copy's logits against the same copy on the CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void generate(const ac_model *m, float *prompt_logits, float *step_logits, int32_t *tokens)
{
    hybrid_generate(m, V, PROMPT, GEN, NULL, prompt_logits, step_logits, tokens);
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
    double prefill = hybrid_relative(pw, pg, (size_t)PROMPT * V), decode = hybrid_relative(sw, sg, (size_t)GEN * V);
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

/* Two sequences decoding together: on the device a step's two tokens take moe_token (the
 * backend's moe_token_batch), on the CPU the grouped path. */
static void test_batched_decode(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, cuda, &dev), AC_OK);
    size_t n = (size_t)(1 + GEN) * 2 * V;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    assert_true(want && got);
    hybrid_decode_pair(host, V, PROMPT, GEN, want);
    hybrid_decode_pair(dev, V, PROMPT, GEN, got);
    assert_null(cuda->take_error());
    double err = hybrid_relative(want, got, n);
    printf("  two sequences decoding together: %.2e of the logit scale\n", err);
    assert_true(err < 1e-4);
    free(want);
    free(got);
    ac_model_free(dev);
    ac_model_free(host);
}

/* A bf16 serving copy on the device against the same copy on the CPU, the decode steps
 * fed the CPU's greedy tokens: both round every product's inputs to bf16 and sum in f32,
 * in different orders, so an intermediate on a rounding boundary may move an input by one
 * bf16 step (2^-8 of it) on one side only, which then carries through the layers and
 * caches; 2e-2 of the logit scale allows for a few such steps (test_runtime_bf16 says
 * more), while weights read at the wrong place or type are off by the logit scale. */
static void test_bf16_logits(void **state)
{
    (void)state;
    ac_model *f32 = make_model(), *host, *dev;
    assert_int_equal(ac_model_to_backend_as(f32, NULL, AC_DTYPE_BF16, &host), AC_OK);
    assert_int_equal(ac_model_to_backend_as(f32, cuda, AC_DTYPE_BF16, &dev), AC_OK);
    float *pw = malloc(PROMPT * V * sizeof *pw), *pg = malloc(PROMPT * V * sizeof *pg);
    float *sw = malloc(GEN * V * sizeof *sw), *sg = malloc(GEN * V * sizeof *sg);
    int32_t tw[GEN], tg[GEN];
    assert_true(pw && pg && sw && sg);
    generate(host, pw, sw, tw);
    hybrid_generate(dev, V, PROMPT, GEN, tw, pg, sg, tg);
    assert_null(cuda->take_error());
    double prefill = hybrid_relative(pw, pg, (size_t)PROMPT * V), decode = hybrid_relative(sw, sg, (size_t)GEN * V);
    int same = 0;
    for (int g = 0; g < GEN; g++)
        same += tw[g] == tg[g];
    printf("  bf16 logits: prefill %.2e, decode %.2e of the logit scale; greedy tokens the same %d of %d\n",
           prefill, decode, same, GEN);
    assert_true(prefill < 2e-2);
    assert_true(decode < 2e-2);
    free(pw);
    free(pg);
    free(sw);
    free(sg);
    ac_model_free(dev);
    ac_model_free(host);
    ac_model_free(f32);
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
    double grads = hybrid_relative(gw, gg, n);
    printf("  training step: loss %.6f vs %.6f, gradients %.2e of their scale\n", want, got, grads);
    assert_true(fabs(want - got) < 1e-4 * want);
    assert_true(grads < 1e-3);
    free(gw);
    free(gg);
    ac_model_free(dev);
    ac_model_free(host);
}

static void test_masked_distillation_step(void **state)
{
    (void)state;
    ac_block_dims dims = hybrid_small_dims();
    ac_model *host = make_model(), *teacher = hybrid_model(V, D, &dims, 4, 0.2f);
    static hybrid_masked_run r;
    hybrid_masked_run_both(host, teacher, cuda, B, T, &r);
    assert_null(cuda->take_error());
    /* the mask gradients: every per-layer axis, hidden and gate, one array each way */
    size_t per_axes = sizeof r.host.axes[1] / sizeof(float);
    double masks = fmax(hybrid_relative(r.host.axes[1][0][0], r.dev.axes[1][0][0], per_axes),
                        fmax(hybrid_relative(r.host.hidden[1], r.dev.hidden[1], D),
                             hybrid_relative(r.host.gate[1], r.dev.gate[1], L)));
    double weights = hybrid_relative(r.host_grads, r.dev_grads, r.n);
    printf("  masked distillation: losses %.6f %.6f vs %.6f %.6f, weight gradients %.2e, mask gradients %.2e\n",
           r.host_loss[0], r.host_loss[1], r.dev_loss[0], r.dev_loss[1], weights, masks);
    for (int s = 0; s < 2; s++)
        assert_true(fabs(r.host_loss[s] - r.dev_loss[s]) < 1e-4 * r.host_loss[s]);
    assert_true(weights < 1e-3);
    assert_true(masks < 1e-3);
    hybrid_assert_mask_grads_moved(&r.host);
    hybrid_masked_run_free(&r);
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
        cmocka_unit_test(test_bf16_logits),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_training_step),
        cmocka_unit_test(test_masked_distillation_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
