/* Training on a backend whose memory the host cannot touch (guarded_backend.h): the
 * model, its gradients, the step's buffers and AdamW's moments there. Three
 * cross-entropy steps and two distillation steps (the teacher's logits from a loss-only
 * forward on the device) give the CPU's losses and weights bit for bit (the ops are the
 * CPU's); a host read or write of that memory stops the test with SIGSEGV. The training
 * loop there (checkpoints, validation, resuming through the host) writes the CPU's final
 * model. Masked distillation steps with every kind of soft mask give the CPU's losses,
 * weight gradients and mask gradients bit for bit (the search's steps). Also: a step's
 * error for gradients on another device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/model.h"
#include "autocompress/optim.h"
#include "autocompress/tokens.h"
#include "autocompress/train.h"
#include "guarded_backend.h"
#include "hybrid_model.h"
#include "model/model_internal.h"
#include "train/checkpoint.h"

enum { V = 40, D = 16, L = 6, B = 2, T = 9, STEPS = 3, KD_STEPS = 2 };

static ac_model *make_model(uint64_t seed)
{
    ac_block_dims dims = hybrid_tiny_dims();
    return hybrid_model(V, D, &dims, seed, 0.3f);
}

static void remove_run(const char *out)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    assert_int_equal(system(cmd), 0);
}

/* The model `student` (on its device) after STEPS cross-entropy steps and KD_STEPS
 * distillation steps from `teacher` (on the same device), each step's loss in losses. */
static void train(ac_model *student, const ac_model *teacher, double *losses, const char *checkpoint)
{
    ac_model *grads_host, *grads;
    assert_int_equal(ac_model_create(&student->arch, &grads_host), AC_OK);
    assert_int_equal(ac_model_to_backend(grads_host, student->backend, &grads), AC_OK);
    ac_model_free(grads_host);
    ac_train_step *step, *tstep;
    assert_int_equal(ac_train_step_create(student, B, T, &step), AC_OK);
    assert_int_equal(ac_train_step_create(teacher, B, T, &tstep), AC_OK);
    ac_adamw_params p = ac_adamw_default_params();
    p.warmup_steps = 1;
    p.total_steps = STEPS + KD_STEPS;
    ac_adamw *opt;
    assert_int_equal(ac_adamw_create(student, &p, &opt), AC_OK);
    int32_t tokens[B * T], targets[B * T];
    for (int s = 0; s < STEPS + KD_STEPS; s++) {
        for (int i = 0; i < B * T; i++) {
            tokens[i] = (i * 7 + s * 3 + 1) % V;
            targets[i] = i % 5 == 4 ? -1 : (i * 11 + s) % V; /* some positions not counted */
        }
        ac_model_zero(grads);
        ac_step_inputs in = {.tokens = tokens, .targets = targets, .grads = grads};
        if (s >= STEPS) { /* distillation: the teacher's logits from its loss-only forward */
            double unused;
            ac_step_inputs tin = {.tokens = tokens, .targets = targets};
            assert_int_equal(ac_train_step_loss(tstep, &tin, &unused), AC_OK);
            in = (ac_step_inputs){.tokens = tokens, .teacher_logits = ac_train_step_logits(tstep), .kd_tau = 2.0f,
                                       .grads = grads};
        }
        assert_int_equal(ac_train_step_run(step, &in, &losses[s]), AC_OK);
        double norm;
        assert_int_equal(ac_adamw_step(opt, student, grads, &norm), AC_OK);
        assert_true(norm > 0.0);
    }
    /* the moments and weights through the host into a checkpoint, and the moments read
     * back into a fresh optimizer on the same device, which writes the same file again */
    ac_train_state st = {.step = STEPS + KD_STEPS};
    char path[300];
    assert_int_equal(ac_checkpoint_save(checkpoint, student, opt, &st), AC_OK);
    ac_adamw *again;
    assert_int_equal(ac_adamw_create(student, &p, &again), AC_OK);
    assert_int_equal(ac_checkpoint_load_optimizer(checkpoint, student, again), AC_OK);
    snprintf(path, sizeof path, "%s.again", checkpoint);
    assert_int_equal(ac_checkpoint_save(path, student, again, &st), AC_OK);
    ac_adamw_free(again);
    ac_adamw_free(opt);
    ac_train_step_free(tstep);
    ac_train_step_free(step);
    ac_model_free(grads);
}

static void test_guarded_training_equals_cpu(void **state)
{
    (void)state;
    ac_model *host = make_model(5), *teacher = make_model(6), *dev, *dev_teacher, *back;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    assert_int_equal(ac_model_to_backend(teacher, &guarded_backend, &dev_teacher), AC_OK);
    double want[STEPS + KD_STEPS], got[STEPS + KD_STEPS];
    char dir[] = "/tmp/ac_train_stepXXXXXX", cpu[300], gpu[300];
    assert_non_null(mkdtemp(dir));
    snprintf(cpu, sizeof cpu, "%s/cpu", dir);
    snprintf(gpu, sizeof gpu, "%s/dev", dir);
    train(host, teacher, want, cpu);
    train(dev, dev_teacher, got, gpu);
    const char *files[2] = {"model.safetensors", "optimizer.safetensors"};
    for (int f = 0; f < 2; f++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "cmp -s %s/%s %s/%s && cmp -s %s/%s %s.again/%s", cpu, files[f], gpu, files[f], gpu,
                 files[f], gpu, files[f]);
        if (system(cmd) != 0)
            fail_msg("%s differs between the CPU's and the device's checkpoints, or after reading it back", files[f]);
    }
    remove_run(dir);
    for (int s = 0; s < STEPS + KD_STEPS; s++) {
        assert_true(want[s] > 0.0);
        assert_memory_equal(&want[s], &got[s], sizeof want[s]);
    }
    assert_true(want[1] != want[0]); /* the steps moved the weights */
    assert_int_equal(ac_model_to_backend(dev, NULL, &back), AC_OK);
    size_t n, m;
    const float *w = ac_model_arena(host, &n), *g = ac_model_arena(back, &m);
    assert_int_equal(n, m);
    assert_memory_equal(w, g, n * sizeof *w);
    assert_int_equal(guarded_count, 2); /* only the two models' weights are left */
    ac_model_free(back);
    ac_model_free(dev);
    ac_model_free(dev_teacher);
    ac_model_free(host);
    ac_model_free(teacher);
}

static void test_device_step_errors(void **state)
{
    (void)state;
    ac_model *host = make_model(5), *dev, *grads;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    assert_int_equal(ac_model_create(&host->arch, &grads), AC_OK);
    ac_train_step *step;
    assert_int_equal(ac_train_step_create(dev, B, T, &step), AC_OK);
    int32_t tokens[B * T] = {0};
    double loss;
    ac_step_inputs in = {.tokens = tokens, .targets = tokens, .grads = grads};
    assert_int_equal(ac_train_step_run(step, &in, &loss), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "gradients are on cpu, the model on guarded"));
    ac_train_step_free(step);
    ac_model_free(grads);
    ac_model_free(dev);
    ac_model_free(host);
}

/* Every kind of soft mask and every mask gradient, as the search's steps use them
 * (hybrid_make_masks). */
static void test_guarded_masked_steps_equal_cpu(void **state)
{
    (void)state;
    ac_model *host = make_model(5), *teacher = make_model(6);
    static hybrid_masked_run r;
    hybrid_masked_run_both(host, teacher, &guarded_backend, B, T, &r);
    assert_memory_equal(r.host_loss, r.dev_loss, sizeof r.host_loss);
    assert_memory_equal(r.host_grads, r.dev_grads, r.n * sizeof *r.host_grads);
    /* every mask gradient, bit for bit, and each one moved */
    assert_memory_equal(r.host.axes[1], r.dev.axes[1], sizeof r.host.axes[1]);
    assert_memory_equal(r.host.hidden[1], r.dev.hidden[1], sizeof r.host.hidden[1]);
    assert_memory_equal(r.host.gate[1], r.dev.gate[1], sizeof r.host.gate[1]);
    hybrid_assert_mask_grads_moved(&r.host);
    hybrid_masked_run_free(&r);
    ac_model_free(host);
    ac_model_free(teacher);
}

/* train.bin and val.bin of `n` tokens each under dir. */
static void write_shards(const char *dir, int n)
{
    const char *names[2] = {"train.bin", "val.bin"};
    for (int f = 0; f < 2; f++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        ac_tokens_writer *w;
        assert_int_equal(ac_tokens_writer_open(path, V, &w), AC_OK);
        for (int i = 0; i < n; i++) {
            int32_t id = (i * 13 + f * 7 + (i / 9) * 3) % V;
            assert_int_equal(ac_tokens_writer_append(w, &id, 1), AC_OK);
        }
        assert_int_equal(ac_tokens_writer_close(w), AC_OK);
    }
}

/* ac_train_run of a copy of `host` (on be, NULL: the CPU) into out for `steps` steps,
 * then (rerun) the same command again, which resumes from the final checkpoint through
 * the host and writes the model again. The final model's weights in host memory. */
static ac_model *run_loop(const ac_model *host, const ac_backend *be, const char *data, const char *out, int steps,
                          int rerun, ac_train_report *report)
{
    ac_model *m;
    assert_int_equal(ac_model_to_backend(host, be, &m), AC_OK);
    ac_train_params p = ac_train_default_params();
    p.data_dir = data;
    p.out_dir = out;
    p.batch = B;
    p.seq_len = T;
    p.steps = steps;
    p.checkpoint_every = 1;
    p.eval_every = 2;
    p.eval_batches = 1;
    p.progress = AC_PROGRESS_OFF;
    assert_int_equal(ac_train_run(&m, &p, report), AC_OK);
    assert_int_equal(report->resumed_from, -1);
    if (rerun) {
        ac_train_report again;
        assert_int_equal(ac_train_run(&m, &p, &again), AC_OK);
        assert_int_equal(again.resumed_from, steps);
    }
    ac_model *back;
    assert_int_equal(ac_model_to_backend(m, NULL, &back), AC_OK);
    ac_model_free(m);
    return back;
}


static void test_guarded_loop_equals_cpu(void **state)
{
    (void)state;
    char data[] = "/tmp/ac_train_deviceXXXXXX";
    assert_non_null(mkdtemp(data));
    write_shards(data, 400);
    char cpu_out[300], dev_out[300];
    snprintf(cpu_out, sizeof cpu_out, "%s/cpu", data);
    snprintf(dev_out, sizeof dev_out, "%s/dev", data);
    ac_model *host = make_model(5);
    ac_train_report want, got;
    ac_model *a = run_loop(host, NULL, data, cpu_out, 4, 0, &want);
    ac_model *b = run_loop(host, &guarded_backend, data, dev_out, 4, 1, &got);
    assert_true(want.last_val_loss > 0.0);
    assert_memory_equal(&want.last_loss, &got.last_loss, sizeof want.last_loss);
    assert_memory_equal(&want.last_val_loss, &got.last_val_loss, sizeof want.last_val_loss);
    size_t n, m;
    const float *wa = ac_model_arena(a, &n), *wb = ac_model_arena(b, &m);
    assert_int_equal(n, m);
    assert_memory_equal(wa, wb, n * sizeof *wa);
    assert_int_equal(guarded_count, 0);
    /* a teacher on another device than the student is refused, naming both */
    ac_model *dev;
    assert_int_equal(ac_model_to_backend(host, &guarded_backend, &dev), AC_OK);
    char other[300];
    snprintf(other, sizeof other, "%s/mixed", data);
    ac_train_params p = ac_train_default_params();
    p.data_dir = data;
    p.out_dir = other;
    p.batch = B;
    p.seq_len = T;
    p.steps = 1;
    p.kd_tau = 1.0f;
    p.teacher = host;
    p.progress = AC_PROGRESS_OFF;
    ac_train_report r;
    assert_int_equal(ac_train_run(&dev, &p, &r), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "the teacher is on cpu, the student on guarded"));
    ac_model_free(dev);
    ac_model_free(a);
    ac_model_free(b);
    ac_model_free(host);
    remove_run(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guarded_training_equals_cpu),
        cmocka_unit_test(test_device_step_errors),
        cmocka_unit_test(test_guarded_masked_steps_equal_cpu),
        cmocka_unit_test(test_guarded_loop_equals_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
