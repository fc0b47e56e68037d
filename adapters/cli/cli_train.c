/* autocompress train / distill: the training loop on token shards, resumable. */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/config_json.h"
#include "autocompress/log.h"
#include "autocompress/model.h"
#include "autocompress/train.h"

typedef struct {
    ac_train_params p;
    const char *config, *model_dir, *teacher_dir;
    long long init_seed;
    double init_std;
} train_args;

static int usage(const char *command, const char *message)
{
    fprintf(stderr, "autocompress %s: %s\n", command, message);
    if (!strcmp(command, "train"))
        fprintf(stderr, "usage: autocompress train --data DIR --out DIR (--config config.json | --model DIR) [options]\n");
    else
        fprintf(stderr, "usage: autocompress distill --teacher DIR --student DIR --data DIR --out DIR [--tau T] [options]\n");
    fprintf(stderr, "options: --steps N --batch B --seq-len T --lr X --warmup N --min-lr-ratio R --weight-decay W\n"
                    "         --clip C --seed S --checkpoint-every N --eval-every N --eval-batches N\n"
                    "         --init-seed S --init-std X --progress auto|bar|json|off\n");
    return 2;
}

/* One "--flag value" into the arguments; 1 when argv[*i] was a known flag. */
static int parse_flag(int argc, char **argv, int *i, train_args *a, ac_status *st, int *missing)
{
    const char *v;
    long long n;
    double x;
    ac_adamw_params *o = &a->p.optim;
#define INT_FLAG(name, lo, hi, dst)                               \
    if ((v = cli_flag_value(argc, argv, i, name, missing))) {     \
        if ((*st = cli_parse_int(name, v, lo, hi, &n)) == AC_OK) { \
            dst = (int)n;                                         \
        }                                                         \
        return 1;                                                 \
    }
#define FLOAT_FLAG(name, dst)                                     \
    if ((v = cli_flag_value(argc, argv, i, name, missing))) {     \
        if ((*st = cli_parse_float(name, v, &x)) == AC_OK) {      \
            dst = (float)x;                                       \
        }                                                         \
        return 1;                                                 \
    }
    if ((v = cli_flag_value(argc, argv, i, "--data", missing))) { a->p.data_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--out", missing))) { a->p.out_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--config", missing))) { a->config = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--model", missing))) { a->model_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--student", missing))) { a->model_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--teacher", missing))) { a->teacher_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--progress", missing))) { *st = ac_progress_mode_from_name(v, &a->p.progress); return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--seed", missing))) {
        if ((*st = cli_parse_int("--seed", v, 0, INT64_MAX, &n)) == AC_OK) a->p.seed = (uint64_t)n;
        return 1;
    }
    if ((v = cli_flag_value(argc, argv, i, "--init-seed", missing))) {
        *st = cli_parse_int("--init-seed", v, 0, INT64_MAX, &a->init_seed);
        return 1;
    }
    INT_FLAG("--steps", 1, 100000000, a->p.steps)
    INT_FLAG("--batch", 1, 65536, a->p.batch)
    INT_FLAG("--seq-len", 1, 1 << 20, a->p.seq_len)
    INT_FLAG("--warmup", 0, 100000000, o->warmup_steps)
    INT_FLAG("--checkpoint-every", 0, 100000000, a->p.checkpoint_every)
    INT_FLAG("--eval-every", 0, 100000000, a->p.eval_every)
    INT_FLAG("--eval-batches", 0, 100000000, a->p.eval_batches)
    FLOAT_FLAG("--lr", o->lr)
    FLOAT_FLAG("--min-lr-ratio", o->min_lr_ratio)
    FLOAT_FLAG("--weight-decay", o->weight_decay)
    FLOAT_FLAG("--clip", o->clip_norm)
    FLOAT_FLAG("--tau", a->p.kd_tau)
    if ((v = cli_flag_value(argc, argv, i, "--init-std", missing))) {
        *st = cli_parse_float("--init-std", v, &a->init_std);
        return 1;
    }
#undef INT_FLAG
#undef FLOAT_FLAG
    return 0;
}

/* The starting model: a checkpoint, or a config initialised at random. */
static ac_status initial_model(const train_args *a, ac_model **model)
{
    if (a->model_dir)
        return ac_model_load(a->model_dir, model);
    ac_arch arch = {0};
    ac_status st = ac_config_json_read(a->config, &arch);
    if (st == AC_OK)
        st = ac_model_create(&arch, model);
    if (st == AC_OK)
        ac_model_init_random(*model, (uint64_t)a->init_seed, (float)a->init_std);
    ac_arch_free(&arch);
    return st;
}

static int run_training(int argc, char **argv, int distill)
{
    const char *command = argv[0];
    train_args a = {.p = ac_train_default_params(), .init_std = 0.02};
    for (int i = 1; i < argc; i++) {
        ac_status st = AC_OK;
        int missing = 0;
        if (!parse_flag(argc, argv, &i, &a, &st, &missing)) {
            char message[256];
            snprintf(message, sizeof message, missing ? "'%s' needs a value" : "unknown argument '%s'", argv[i]);
            return usage(command, message);
        }
        if (st != AC_OK)
            return usage(command, ac_error_message());
    }
    if (!a.p.data_dir || !a.p.out_dir)
        return usage(command, "--data and --out are required");
    if (distill ? (!a.teacher_dir || !a.model_dir || a.config) : (!a.config == !a.model_dir || a.teacher_dir))
        return usage(command, distill ? "--teacher and --student are required" : "give exactly one of --config and --model");

    ac_model *model = NULL, *teacher = NULL;
    ac_status st = initial_model(&a, &model);
    if (st == AC_OK && distill)
        st = ac_model_load(a.teacher_dir, &teacher);
    ac_train_report report;
    a.p.teacher = teacher;
    if (st == AC_OK)
        st = ac_train_run(&model, &a.p, &report);
    if (st == AC_OK)
        printf("%s: %d steps%s, loss %.4f, validation loss %.4f, %.0f tokens/s -> %s\n", command, report.steps_done,
               report.resumed_from >= 0 ? " (resumed)" : "", report.last_loss, report.last_val_loss,
               report.tokens_per_second, a.p.out_dir);
    else
        fprintf(stderr, "autocompress %s: %s\n", command, ac_error_message());
    ac_model_free(model);
    ac_model_free(teacher);
    return st == AC_OK ? 0 : (st == AC_ERR_INVALID ? 2 : 1);
}

int cli_train(int argc, char **argv) { return run_training(argc, argv, 0); }
int cli_distill(int argc, char **argv) { return run_training(argc, argv, 1); }
