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

/* The prompt's logits, then GEN greedy tokens with each step's logits; with feed, the
 * steps take feed's tokens instead of their own choices (still written to tokens). */
static void generate_fed(const ac_model *m, const int32_t *feed, float *prompt_logits, float *step_logits,
                         int32_t *tokens)
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
        const int32_t *one[1] = {feed ? &feed[g] : &tokens[g]};
        int ones[1] = {1};
        ac_batch d = {.n_seqs = 1, .tokens = one, .n_tokens = ones, .caches = &c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, step_logits + (size_t)g * V), AC_OK);
        next = ac_argmax(step_logits + (size_t)g * V, V);
    }
    ac_cache_free(c);
    ac_runtime_free(rt);
}

static void generate(const ac_model *m, float *prompt_logits, float *step_logits, int32_t *tokens)
{
    generate_fed(m, NULL, prompt_logits, step_logits, tokens);
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

/* Two sequences of different lengths prefilled together, then steps decoding both at
 * once: the last logits of each call, [1 + GEN, 2, V]. On the device a step's two tokens
 * take moe_token (the backend's moe_token_batch), on the CPU the grouped path. */
static void decode_pair(const ac_model *m, float *out)
{
    ac_runtime *rt;
    ac_cache *c[2];
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    int32_t a[PROMPT], b[PROMPT / 2];
    for (int t = 0; t < PROMPT; t++)
        a[t] = (t * 13 + 1) % V;
    for (int t = 0; t < PROMPT / 2; t++)
        b[t] = (t * 29 + 7) % V;
    for (int s = 0; s < 2; s++)
        assert_int_equal(ac_cache_create(m, &c[s]), AC_OK);
    const int32_t *seqs[2] = {a, b};
    int n[2] = {PROMPT, PROMPT / 2};
    ac_batch first = {.n_seqs = 2, .tokens = seqs, .n_tokens = n, .caches = c};
    assert_int_equal(ac_runtime_forward(rt, &first, AC_LOGITS_LAST, out), AC_OK);
    for (int g = 0; g < GEN; g++) {
        int32_t next[2] = {(g * 7 + 3) % V, (g * 5 + 1) % V};
        const int32_t *one[2] = {&next[0], &next[1]};
        int ones[2] = {1, 1};
        ac_batch d = {.n_seqs = 2, .tokens = one, .n_tokens = ones, .caches = c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, out + (size_t)(g + 1) * 2 * V), AC_OK);
    }
    for (int s = 0; s < 2; s++)
        ac_cache_free(c[s]);
    ac_runtime_free(rt);
}

static void test_batched_decode(void **state)
{
    (void)state;
    ac_model *host = make_model(), *dev;
    assert_int_equal(ac_model_to_backend(host, cuda, &dev), AC_OK);
    size_t n = (size_t)(1 + GEN) * 2 * V;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    assert_true(want && got);
    decode_pair(host, want);
    decode_pair(dev, got);
    assert_null(cuda->take_error());
    double err = relative(want, got, n);
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
    generate_fed(dev, tw, pg, sg, tg);
    assert_null(cuda->take_error());
    double prefill = relative(pw, pg, (size_t)PROMPT * V), decode = relative(sw, sg, (size_t)GEN * V);
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
    double grads = relative(gw, gg, n);
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
    double masks = fmax(relative(r.host.axes[1][0][0], r.dev.axes[1][0][0], per_axes),
                        fmax(relative(r.host.hidden[1], r.dev.hidden[1], D),
                             relative(r.host.gate[1], r.dev.gate[1], L)));
    double weights = relative(r.host_grads, r.dev_grads, r.n);
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
