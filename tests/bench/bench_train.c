/* Training throughput of the CPU engine: forward + backward + AdamW step, then a
 * distillation step (the teacher's forward, kept logits only, + the student's forward,
 * backward and AdamW; the model is its own teacher) and a forward alone, each after one
 * warm-up step.
 *   bench_train --config config.json --save DIR      writes the randomly initialised model
 *   bench_train --model DIR --batch B --seq-len T --steps N
 * prints one JSON line: tokens/s of each, the KD step against the training step, and the
 * teacher's forward against a forward alone (it should cost no more: no cache, no
 * gradients kept). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/config_json.h"
#include "autocompress/model.h"
#include "autocompress/host.h"
#include "autocompress/optim.h"
#include "autocompress/train.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int save_random(const char *config, const char *dir)
{
    ac_arch arch = {0};
    ac_model *m = NULL;
    ac_status st = ac_config_json_read(config, &arch);
    if (st == AC_OK)
        st = ac_model_create(&arch, &m);
    if (st == AC_OK) {
        ac_model_init_random(m, 1, 0.02f);
        st = ac_model_save(m, dir, AC_DTYPE_F32);
    }
    if (st != AC_OK)
        fprintf(stderr, "%s\n", ac_error_message());
    ac_model_free(m);
    ac_arch_free(&arch);
    return st != AC_OK;
}

static int bench(const char *dir, int B, int T, int steps)
{
    ac_model *m, *grads;
    ac_train_step *step;
    ac_adamw *opt;
    ac_adamw_params p = ac_adamw_default_params();
    p.total_steps = 2 * (steps + 1);
    /* a constant learning rate, as bench_train_hf.py's torch.optim.AdamW (same betas,
     * weight decay and clip), so that the losses after the timed steps agree */
    p.warmup_steps = 0;
    p.min_lr_ratio = 1.0f;
    if (ac_model_load(dir, &m) != AC_OK || ac_model_create(ac_model_arch(m), &grads) != AC_OK ||
        ac_train_step_create(m, B, T, &step) != AC_OK || ac_adamw_create(m, &p, &opt) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return 1;
    }
    int V = ac_model_arch(m)->vocab;
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens), *targets = malloc((size_t)B * T * sizeof *targets);
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)((i * 7919) % V);
        targets[i] = (int32_t)((i * 104729 + 1) % V);
    }
    size_t n;
    float *g = ac_model_arena(grads, &n);
    ac_train_step *teacher;
    if (ac_train_step_create(m, B, T, &teacher) != AC_OK) {
        fprintf(stderr, "bench_train: cannot set up the teacher\n");
        return 1;
    }
    /* the training steps first, alone, so that the loss after them compares with
     * transformers' (bench_train_hf.py); then the KD steps and forwards */
    double train_s = 0, kd_s = 0, teacher_s = 0, forward_s = 0, loss = 0, kd = 0, unused;
    ac_step_inputs in = {.tokens = tokens, .targets = targets, .grads = grads};
    for (int s = 0; s <= steps; s++) {
        double t0 = now_s();
        memset(g, 0, n * sizeof *g);
        ac_train_step_run(step, &in, &loss);
        ac_adamw_step(opt, m, grads, NULL);
        if (s > 0) /* the first step is warm-up */
            train_s += now_s() - t0;
    }
    for (int s = 0; s <= steps; s++) {
        double t1 = now_s();
        ac_train_step_loss(teacher, &in, &unused);
        double t2 = now_s();
        memset(g, 0, n * sizeof *g);
        /* the teacher's logits where its step left them, as the training loop reads them */
        ac_step_inputs kin = {.tokens = tokens, .teacher_logits = ac_train_step_logits(teacher), .kd_tau = 1.0f,
                              .grads = grads};
        ac_train_step_run(step, &kin, &kd);
        ac_adamw_step(opt, m, grads, NULL);
        double t3 = now_s();
        ac_step_inputs fin = {.tokens = tokens, .targets = targets};
        ac_train_step_loss(step, &fin, &unused);
        double t4 = now_s();
        if (s == 0)
            continue;
        teacher_s += t2 - t1;
        kd_s += t3 - t1;
        forward_s += t4 - t3;
    }
    double tokens_run = (double)B * T * steps;
    printf("{\"engine\": \"autocompress\", \"batch\": %d, \"seq_len\": %d, \"steps\": %d, \"train_tok_s\": %.1f, "
           "\"loss\": %.4f, \"kd_tok_s\": %.1f, \"forward_tok_s\": %.1f, \"kd_over_train\": %.3f, "
           "\"teacher_over_forward\": %.3f}\n",
           B, T, steps, tokens_run / train_s, loss, tokens_run / kd_s, tokens_run / forward_s, kd_s / train_s,
           teacher_s / forward_s);
    ac_train_step_free(teacher);
    free(tokens);
    free(targets);
    ac_adamw_free(opt);
    ac_train_step_free(step);
    ac_model_free(grads);
    ac_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    const char *config = NULL, *save = NULL, *model = NULL;
    int B = 8, T = 256, steps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--save")) save = argv[i + 1];
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq-len")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_train: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (config && save)
        return save_random(config, save);
    if (!model || B < 1 || T < 1 || steps < 1) {
        fprintf(stderr, "usage: bench_train --config F --save DIR | --model DIR [--batch B] [--seq-len T] [--steps N]\n");
        return 2;
    }
    return bench(model, B, T, steps);
}
