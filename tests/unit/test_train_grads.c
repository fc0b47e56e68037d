/* Full-model training math against PyTorch autograd: cross-entropy and distillation
 * gradients of every parameter, and three AdamW steps with clipping and the warmup +
 * cosine schedule, on the hybrid_f32 fixture (tests/fixtures/nemotron_h/gradients.py);
 * AdamW's step counter. */
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
#include "autocompress/safetensors.h"
#include "autocompress/train.h"

#define FIXTURE AC_SOURCE_DIR "/tests/fixtures/nemotron_h/hybrid_f32"
/* A gradient tensor passes when max |ours - torch| <= GRAD_RTOL * max |torch| + GRAD_ATOL:
 * both are f32 with different summation orders. */
#define GRAD_RTOL 1e-4
#define GRAD_ATOL 1e-7

typedef struct {
    ac_model *model;
    ac_safetensors *ref;
    int B, T;
    int32_t *inputs, *targets;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (ac_model_load(FIXTURE, &f->model) != AC_OK || ac_safetensors_open(FIXTURE "/gradients.safetensors", &f->ref) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return -1;
    }
    const ac_tensor_view *ids = ac_safetensors_find(f->ref, "batch.ids");
    if (!ids || ids->ndim != 2)
        return -1;
    f->B = (int)ids->shape[0];
    f->T = (int)ids->shape[1] - 1;
    f->inputs = malloc((size_t)f->B * f->T * sizeof(int32_t));
    f->targets = malloc((size_t)f->B * f->T * sizeof(int32_t));
    const int32_t *v = ids->data;
    for (int b = 0; b < f->B; b++)
        for (int t = 0; t < f->T; t++) {
            f->inputs[b * f->T + t] = v[b * (f->T + 1) + t];
            f->targets[b * f->T + t] = v[b * (f->T + 1) + t + 1];
        }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ac_model_free(f->model);
    ac_safetensors_close(f->ref);
    free(f->inputs);
    free(f->targets);
    free(f);
    return 0;
}

static float scalar(const fixture *f, const char *name)
{
    const ac_tensor_view *t = ac_safetensors_find(f->ref, name);
    assert_non_null(t);
    return *(const float *)t->data;
}

static int is_correction_bias(const char *name) { return strstr(name, "e_score_correction_bias") != NULL; }

/* Every parameter of `ours` against "<prefix><name>" in the reference: max |diff| <=
 * rtol * max |ref| + atol, except that up to `outliers` entries may reach `outlier_atol`.
 * The router's correction bias is not trainable: the reference omits it, and ours must
 * equal `bias_value` (0 for gradients, the checkpoint's value for weights). */
static void compare_params(const fixture *f, const ac_model *ours, const ac_model *bias_source, const char *prefix,
                           double rtol, double atol, int outliers, double outlier_atol)
{
    int compared = 0, beyond = 0, failed = 0;
    double worst = 0.0;
    for (size_t i = 0; i < ac_model_param_count(ours); i++) {
        const ac_param *p = ac_model_param(ours, i);
        if (is_correction_bias(p->name)) {
            const ac_param *b = bias_source ? ac_model_find_param(bias_source, p->name) : NULL;
            for (size_t j = 0; j < p->count; j++)
                assert_true(p->data[j] == (b ? b->data[j] : 0.0f));
            continue;
        }
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const ac_tensor_view *ref = ac_safetensors_find(f->ref, name);
        if (!ref)
            fail_msg("reference has no %s", name);
        assert_int_equal((size_t)ac_tensor_view_numel(ref), p->count);
        const float *r = ref->data;
        double max_ref = 0.0, max_diff = 0.0;
        for (size_t j = 0; j < p->count; j++)
            max_ref = fmax(max_ref, fabs(r[j]));
        int tensor_failed = 0;
        for (size_t j = 0; j < p->count; j++) {
            double d = fabs((double)p->data[j] - r[j]);
            if (d > rtol * max_ref + atol) {
                beyond++;
                if (!(d <= outlier_atol) && !tensor_failed++)
                    printf("  MISMATCH %s[%zu]: |diff| %.3g against max |ref| %.3g\n", name, j, d, max_ref);
                continue;
            }
            max_diff = fmax(max_diff, d);
        }
        failed += tensor_failed > 0;
        if (max_ref > 0)
            worst = fmax(worst, max_diff / max_ref);
        compared++;
    }
    printf("  %s: %d tensors, worst max|diff|/max|ref| = %.2e, %d outliers\n", prefix, compared, worst, beyond);
    assert_int_equal(failed, 0);
    assert_true(beyond <= outliers);
}

static void run_gradient_case(fixture *f, int distill)
{
    ac_train_step *step;
    ac_model *grads;
    assert_int_equal(ac_train_step_create(f->model, f->B, f->T, &step), AC_OK);
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &grads), AC_OK);
    ac_step_inputs in = {.tokens = f->inputs, .grads = grads};
    if (distill) {
        const ac_tensor_view *teacher = ac_safetensors_find(f->ref, "kd.teacher_logits");
        assert_non_null(teacher);
        in.teacher_logits = teacher->data;
        in.kd_tau = scalar(f, "kd.tau");
    } else {
        in.targets = f->targets;
    }
    double loss;
    assert_int_equal(ac_train_step_run(step, &in, &loss), AC_OK);
    float expected = scalar(f, distill ? "kd.loss" : "ce.loss");
    printf("  loss %.7f, torch %.7f\n", loss, expected);
    assert_true(fabs(loss - expected) <= 1e-5 * fabs(expected));
    compare_params(f, grads, NULL, distill ? "kd.grad." : "ce.grad.", GRAD_RTOL, GRAD_ATOL, 0, 0.0);
    ac_model_free(grads);
    ac_train_step_free(step);
}

static void test_cross_entropy_gradients_match_torch(void **state) { run_gradient_case(*state, 0); }
static void test_distillation_gradients_match_torch(void **state) { run_gradient_case(*state, 1); }

static void test_adamw_steps_match_torch(void **state)
{
    fixture *f = *state;
    ac_adamw_params p = {.lr = 1e-2f, .min_lr_ratio = 0.1f, .warmup_steps = 2, .total_steps = 5, .beta1 = 0.9f,
                         .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip_norm = 1.0f};
    const ac_tensor_view *lr = ac_safetensors_find(f->ref, "adamw.lr");
    const ac_tensor_view *losses = ac_safetensors_find(f->ref, "adamw.loss");
    const ac_tensor_view *norms = ac_safetensors_find(f->ref, "adamw.grad_norm");
    assert_non_null(lr);
    assert_non_null(losses);
    assert_non_null(norms);
    ac_train_step *step;
    ac_model *grads;
    ac_adamw *opt;
    assert_int_equal(ac_train_step_create(f->model, f->B, f->T, &step), AC_OK);
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &grads), AC_OK);
    assert_int_equal(ac_adamw_create(f->model, &p, &opt), AC_OK);
    size_t n;
    float *g = ac_model_arena(grads, &n);
    for (int t = 0; t < (int)lr->shape[0]; t++) {
        memset(g, 0, n * sizeof *g);
        ac_step_inputs in = {.tokens = f->inputs, .targets = f->targets, .grads = grads};
        double loss, norm;
        assert_int_equal(ac_train_step_run(step, &in, &loss), AC_OK);
        assert_float_equal(ac_adamw_lr(&p, t), ((const float *)lr->data)[t], 1e-9);
        assert_true(fabs(loss - ((const float *)losses->data)[t]) <= 1e-5 * fabs(loss));
        assert_int_equal(ac_adamw_step(opt, f->model, grads, &norm), AC_OK);
        float ref_norm = ((const float *)norms->data)[t];
        printf("  step %d: loss %.6f grad norm %.6f (torch %.6f)\n", t, loss, norm, ref_norm);
        assert_true(fabs(norm - ref_norm) <= 1e-4 * ref_norm);
    }
    /* Adam's first steps move each weight by about lr * sign(g): the few dozen gradient
     * entries below 1e-7 can take either sign under another summation order, moving that
     * weight by up to ~2 lr. So: 2e-4 everywhere, but for at most 100 such entries 0.05. */
    ac_model *initial;
    assert_int_equal(ac_model_load(FIXTURE, &initial), AC_OK);
    compare_params(f, f->model, initial, "adamw.final.", 0.0, 2e-4, 100, 0.05);
    ac_model_free(initial);
    ac_adamw_free(opt);
    ac_model_free(grads);
    ac_train_step_free(step);
}

/* The counter a checkpoint saves and a resume restores: the steps taken, or the count
 * set, plus the steps taken since. */
static void test_adamw_counts_its_steps(void **state)
{
    fixture *f = *state;
    ac_adamw_params p = ac_adamw_default_params();
    ac_train_step *step;
    ac_model *grads;
    ac_adamw *opt;
    assert_int_equal(ac_train_step_create(f->model, f->B, f->T, &step), AC_OK);
    assert_int_equal(ac_model_create(ac_model_arch(f->model), &grads), AC_OK);
    assert_int_equal(ac_adamw_create(f->model, &p, &opt), AC_OK);
    assert_int_equal(ac_adamw_steps_done(opt), 0);
    for (int t = 0; t < 3; t++) {
        if (t == 2)
            ac_adamw_set_steps_done(opt, 7);
        ac_model_zero(grads);
        ac_step_inputs in = {.tokens = f->inputs, .targets = f->targets, .grads = grads};
        double loss;
        assert_int_equal(ac_train_step_run(step, &in, &loss), AC_OK);
        assert_int_equal(ac_adamw_step(opt, f->model, grads, NULL), AC_OK);
        assert_int_equal(ac_adamw_steps_done(opt), t < 2 ? t + 1 : 8);
    }
    ac_adamw_free(opt);
    ac_model_free(grads);
    ac_train_step_free(step);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cross_entropy_gradients_match_torch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distillation_gradients_match_torch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adamw_steps_match_torch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adamw_counts_its_steps, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
