/* A bf16 serving copy (ac_model_to_device_as) on the CPU: its layout (the product weights
 * in bf16, rounded from the f32 model, everything else f32, about half the bytes), its
 * logits against the f32 engine computing the same rounding by other means (prefill, one
 * sequence's decode steps, two sequences decoding together), its evaluation loss, and
 * everything that needs f32 weights refusing it with a message that says so. */
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
#include "autocompress/optim.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/train.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"
#include "hybrid_model.h"
#include "model/model_internal.h"

enum { V = 64, D = 32, PROMPT = 21, GEN = 8 };

static ac_model *make_model(void)
{
    ac_block_dims dims = hybrid_small_dims();
    return hybrid_model(V, D, &dims, 11, 0.2f);
}

/* The reference: the f32 engine on the f32 model with the serving copy's bf16 weights
 * rounded the same way, on a backend whose products round their inputs to bf16 wherever
 * their weights are such (the router's are not): the serving copy's semantics computed by
 * other code (OpenBLAS on rounded copies, a decode step's MoE composed here), so the two
 * differ by the order of sums only. */
static const ac_model *ref_model, *ref_half; /* the reference and the copy whose dtypes it follows */

static int rounded_weights(const float *W)
{
    for (size_t i = 0; i < ac_model_param_count(ref_model); i++) {
        const ac_param *p = ac_model_param(ref_model, i);
        if (ac_model_param(ref_half, i)->dtype == AC_DTYPE_BF16 && W >= p->data && W < p->data + p->count)
            return 1;
    }
    return 0;
}

/* rows x cols of x (row stride ld) rounded to bf16, packed; the caller frees it. */
static float *rounded(const float *x, int rows, int cols, int ld)
{
    float *out = malloc(((size_t)rows * cols + 1) * sizeof *out);
    assert_non_null(out);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            out[(size_t)r * cols + c] = ac_bf16_round(x[(size_t)r * ld + c]);
    return out;
}

static void ref_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                       float *C, int ldc)
{
    if (!rounded_weights(W)) {
        ac_cpu_linear(ctx, M, N, K, A, lda, W, beta, C, ldc);
        return;
    }
    float *a = rounded(A, M, K, lda);
    ac_cpu_linear(ctx, M, N, K, a, K, W, beta, C, ldc);
    free(a);
}

static void ref_gemv_batch(ac_kctx *ctx, int n, const float *const *W, const int *rows, const int *cols,
                           const float *const *x, float *const *y)
{
    for (int i = 0; i < n; i++)
        ref_linear(ctx, 1, rows[i], cols[i], x[i], cols[i], W[i], 0.0f, y[i], rows[i]);
}

static void ref_linear_batch(ac_kctx *ctx, int n, const int *M, int N, int K, const float *const *A, int lda,
                             const float *const *W, float *const *C, int ldc)
{
    for (int i = 0; i < n; i++)
        ref_linear(ctx, M[i], N, K, A[i], lda, W[i], 0.0f, C[i], ldc);
}

/* A token's products one by one: the shared expert, then the picks by expert index. */
static void ref_one_token(ac_kctx *ctx, const ac_k_moe_ffn *f, int k, const int32_t *idx, const float *weight,
                          const float *x, float *hidden, float *y)
{
    int D = f->D, I = f->I, order[64], n = f->S > 0;
    assert_true(k <= 64);
    for (int j = 0; j < k; j++) { /* insertion sort by expert */
        int q = j;
        for (; q > 0 && idx[order[q - 1]] > idx[j]; q--)
            order[q] = order[q - 1];
        order[q] = j;
    }
    float *part = malloc((size_t)D * sizeof *part), *h = hidden;
    assert_non_null(part);
    for (int d = 0; d < D; d++)
        y[d] = 0.0f;
    for (int p = 0; p < n + k; p++) {
        int shared = p < n, rows = shared ? f->S : I, e = shared ? -1 : idx[order[p - n]];
        const float *up = shared ? f->shared_up : (const float *)f->experts_up + (size_t)e * I * D;
        const float *down = shared ? f->shared_down : (const float *)f->experts_down + (size_t)e * D * I;
        const float *mask = shared ? f->shared_mask : f->ffn_mask;
        float alpha = shared ? 1.0f : weight[order[p - n]] * (f->experts_mask ? f->experts_mask[e] : 1.0f);
        ref_linear(ctx, 1, rows, D, x, D, up, 0.0f, h, rows);
        for (int c = 0; c < rows; c++)
            h[c] = (h[c] > 0.0f ? h[c] * h[c] : 0.0f) * (mask ? mask[c] : 1.0f);
        ref_linear(ctx, 1, D, rows, h, rows, down, 0.0f, part, D);
        for (int d = 0; d < D; d++)
            y[d] += alpha * part[d];
        h += rows;
    }
    free(part);
}

static void ref_moe_token(ac_kctx *ctx, const ac_k_moe_ffn *f, int T, int k, const int32_t *idx,
                          const float *weight, const float *x, float *hidden, float *y)
{
    for (int t = 0; t < T; t++)
        ref_one_token(ctx, f, k, idx + (size_t)t * k, weight + (size_t)t * k, x + (size_t)t * f->D,
                      hidden + (size_t)t * (f->S + (size_t)k * f->I), y + (size_t)t * f->D);
}

static ac_backend rounding_backend;

/* The f32 model with the copy's bf16 weights rounded, on the rounding backend. */
static ac_model *rounded_reference(const ac_model *host, const ac_model *half)
{
    rounding_backend = ac_cpu_backend;
    rounding_backend.name = "bf16-reference";
    rounding_backend.linear = ref_linear;
    rounding_backend.gemv_batch = ref_gemv_batch;
    rounding_backend.linear_batch = ref_linear_batch;
    rounding_backend.moe_token = ref_moe_token;
    ac_model *ref;
    assert_int_equal(ac_model_to_backend(host, &rounding_backend, &ref), AC_OK);
    for (size_t i = 0; i < ac_model_param_count(ref); i++) {
        const ac_param *p = ac_model_param(ref, i);
        if (ac_model_param(half, i)->dtype == AC_DTYPE_BF16)
            for (size_t j = 0; j < p->count; j++)
                p->data[j] = ac_bf16_round(p->data[j]);
    }
    ref_model = ref, ref_half = half;
    return ref;
}

/* The two sum in different orders. Where an f32 intermediate lands on the other side of
 * a bf16 rounding boundary, the input a product reads moves by one bf16 step (2^-8 of
 * it), and that carries on through the layers and the caches (seen with other prompts
 * for the two sequences: one step at 5.7e-3 of the logit scale and the steps after it at
 * 3e-3, every other step within 1.2e-7, as every step is with these). 2e-2 allows a few
 * such steps; a product reading bf16 weights as floats, or at an offset counted in
 * floats, is off by the whole logit scale. (The op tests check the rounding itself
 * against double-precision formulas.) */
#define BF16_TOL 2e-2

static void prompt_tokens(int32_t *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = (i * 13 + salt) % V;
}

static void test_layout(void **state)
{
    (void)state;
    ac_model *host = make_model(), *half;
    assert_int_equal(ac_model_to_device_as(host, "cpu", AC_DTYPE_BF16, &half), AC_OK);
    assert_int_equal(ac_model_weights_dtype(half), AC_DTYPE_BF16);
    assert_int_equal(ac_model_weights_dtype(host), AC_DTYPE_F32);
    size_t f32_bytes = 0, bf16_bytes = 0, narrow = 0;
    assert_int_equal(ac_model_param_count(half), ac_model_param_count(host));
    for (size_t i = 0; i < ac_model_param_count(half); i++) {
        const ac_param *p = ac_model_param(half, i), *f = ac_model_param(host, i);
        assert_string_equal(p->name, f->name);
        int product = strstr(p->name, "proj.weight") || strstr(p->name, "experts.") ||
                      !strcmp(p->name, "embeddings.weight") || !strcmp(p->name, "lm_head.weight");
        assert_int_equal(p->dtype, product ? AC_DTYPE_BF16 : AC_DTYPE_F32);
        f32_bytes += f->count * sizeof(float);
        bf16_bytes += p->count * (product ? sizeof(uint16_t) : sizeof(float));
        narrow += product;
        for (size_t j = 0; j < p->count; j++) {
            float want = product ? ac_bf16_round(f->data[j]) : f->data[j];
            float got = product ? ac_bf16_to_float(((const uint16_t *)(const void *)p->data)[j]) : p->data[j];
            if (got != want)
                fail_msg("%s[%zu]: %.9g, want %.9g", p->name, j, (double)got, (double)want);
        }
    }
    assert_true(narrow > 10);
    printf("  weights: %zu bytes in f32, %zu with the products in bf16\n", f32_bytes, bf16_bytes);
    assert_true(bf16_bytes < 0.6 * f32_bytes);
    /* what the memory formula counts: the same bytes, the copy's padding before each
     * block of bf16 values (16 bytes at most) aside */
    const ac_arch *a = ac_model_arch(host);
    assert_int_equal(ac_arch_weight_bytes(a, AC_DTYPE_F32), f32_bytes);
    size_t counted = ac_arch_weight_bytes(a, AC_DTYPE_BF16);
    assert_true(counted >= bf16_bytes && counted <= bf16_bytes + 16 * (narrow + 1));
    ac_arch outer = *a; /* the embeddings, the final norm, the LM head */
    outer.n_layers = 0;
    size_t blocks = ac_arch_weight_bytes(&outer, AC_DTYPE_F32);
    for (int l = 0; l < a->n_layers; l++)
        blocks += ac_block_weight_bytes(a, &a->layers[l], AC_DTYPE_F32);
    assert_int_equal(blocks, f32_bytes);
    ac_model_free(half);
    ac_model_free(host);
}

static void test_logits_against_rounded_reference(void **state)
{
    (void)state;
    ac_model *host = make_model(), *half;
    assert_int_equal(ac_model_to_device_as(host, "cpu", AC_DTYPE_BF16, &half), AC_OK);
    ac_model *ref = rounded_reference(host, half);
    float *pr = malloc(PROMPT * V * sizeof *pr), *ph = malloc(PROMPT * V * sizeof *ph);
    float *sr = malloc(GEN * V * sizeof *sr), *sh = malloc(GEN * V * sizeof *sh);
    float *pair_r = malloc((1 + GEN) * 2 * V * sizeof *pair_r), *pair_h = malloc((1 + GEN) * 2 * V * sizeof *pair_h);
    float *full = malloc(PROMPT * V * sizeof *full), *ignore = malloc(GEN * V * sizeof *ignore);
    assert_true(pr && ph && sr && sh && pair_r && pair_h && full && ignore);
    int32_t feed[GEN];
    prompt_tokens(feed, GEN, 9);

    int32_t chosen[GEN];
    hybrid_generate(ref, V, PROMPT, GEN, feed, pr, sr, chosen);
    hybrid_generate(half, V, PROMPT, GEN, feed, ph, sh, chosen);
    hybrid_decode_pair(ref, V, PROMPT, GEN, pair_r);
    hybrid_decode_pair(half, V, PROMPT, GEN, pair_h);
    hybrid_generate(host, V, PROMPT, GEN, feed, full, ignore, chosen);
    double prefill = hybrid_relative(pr, ph, (size_t)PROMPT * V), decode = hybrid_relative(sr, sh, (size_t)GEN * V);
    double pair = hybrid_relative(pair_r, pair_h, (size_t)(1 + GEN) * 2 * V);
    printf("  against the rounded f32 model: prefill %.2e, decode %.2e, two sequences %.2e of the logit scale;"
           " against the f32 model %.2e\n", prefill, decode, pair, hybrid_relative(full, ph, (size_t)PROMPT * V));
    assert_true(prefill < BF16_TOL);
    assert_true(decode < BF16_TOL);
    assert_true(pair < BF16_TOL);

    free(pr), free(ph), free(sr), free(sh), free(pair_r), free(pair_h), free(full), free(ignore);
    ac_model_free(ref);
    ac_model_free(half);
    ac_model_free(host);
}

/* The loss the evaluation reads (a training step's forward) of the copy against the
 * reference's: packed sequences without caches, the training path of every block. */
static void test_losses(void **state)
{
    (void)state;
    enum { B = 2, T = 24 };
    ac_model *host = make_model(), *half;
    assert_int_equal(ac_model_to_device_as(host, "cpu", AC_DTYPE_BF16, &half), AC_OK);
    ac_model *ref = rounded_reference(host, half);
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (i * 7 + 1) % V;
        targets[i] = (i * 11 + 3) % V;
    }
    ac_step_inputs in = {.tokens = tokens, .targets = targets};
    double loss[2];
    const ac_model *models[2] = {ref, half};
    for (int m = 0; m < 2; m++) {
        ac_train_step *s;
        assert_int_equal(ac_train_step_create(models[m], B, T, &s), AC_OK);
        assert_int_equal(ac_train_step_loss(s, &in, &loss[m]), AC_OK);
        ac_train_step_free(s);
    }
    printf("  loss: %.9f (reference), %.9f (bf16 copy)\n", loss[0], loss[1]);
    /* seen: 5.5e-6 of the loss (sums in other orders, and the inputs they tip across a
     * bf16 rounding boundary); weights read at the wrong place move it by the loss */
    assert_true(fabs(loss[0] - loss[1]) < 1e-4 * loss[0]);
    ac_model_free(ref);
    ac_model_free(half);
    ac_model_free(host);
}

static void assert_refused(ac_status st, const char *words)
{
    assert_int_not_equal(st, AC_OK);
    const char *msg = ac_error_message();
    if (!strstr(msg, words))
        fail_msg("message \"%s\" does not say \"%s\"", msg, words);
}

static void test_refusals(void **state)
{
    (void)state;
    ac_model *host = make_model(), *half, *copy = NULL;
    assert_int_equal(ac_model_to_device_as(host, "cpu", AC_DTYPE_BF16, &half), AC_OK);
    assert_refused(ac_model_save(half, "/nonexistent/bf16", AC_DTYPE_F32), "bf16 serving copy");
    assert_refused(ac_model_to_device(half, "cpu", &copy), "bf16 serving copy");
    assert_refused(ac_model_to_device_as(half, "cpu", AC_DTYPE_BF16, &copy), "f32 weights in host memory");
    assert_refused(ac_model_to_device_as(host, "cpu", AC_DTYPE_F16, &copy), "f32 or bf16");
    assert_null(copy);
    ac_adamw *opt = NULL;
    ac_adamw_params p = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .total_steps = 1};
    assert_refused(ac_adamw_create(half, &p, &opt), "bf16 serving copy");
    /* a training step is refused; its loss alone is what eval uses (test_losses) */
    ac_train_step *s = NULL;
    assert_int_equal(ac_train_step_create(half, 1, 8, &s), AC_OK);
    int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ac_step_inputs in = {.tokens = tokens, .targets = tokens};
    double loss;
    assert_refused(ac_train_step_run(s, &in, &loss), "bf16 serving copy");
    ac_train_step_free(s);
    const int parents[HYBRID_LAYERS] = {0, 1, 2, 3, 4, 5};
    assert_refused(ac_model_slice(half, &host->arch, parents, 1, &copy), "bf16 serving copy");
    ac_model_free(half);
    ac_model_free(host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_logits_against_rounded_reference),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
