/* autocompress train / distill: the training loop on token shards, resumable. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include <stdio.h>

#include "autocompress/config_json.h"
#include "autocompress/inputs.h"
#include "autocompress/model.h"
#include "autocompress/train.h"

typedef struct {
    ac_train_params p;
    ac_comm_params comm;
    const char *config, *model_dir, *teacher_dir;
    const char *device; /* "cpu" (default) or "cuda" */
    uint64_t init_seed;
    float init_std;
} train_args;

static train_args default_train_args(void)
{
    return (train_args){.p = ac_train_default_params(), .comm = ac_comm_default_params(), .init_std = 0.02f};
}

/* The rows train and distill share: the data, the output and the loop's settings. */
#define TRAINING_OPTS(a)                                                                                            \
    CLI_REQUIRED("data", &(a)->p.data_dir, "DIR", "token shards from autocompress tokenize (train.bin, val.bin)"),  \
    CLI_REQUIRED("out", &(a)->p.out_dir, "DIR", "checkpoint/, loss.csv and the final model; a rerun resumes here"), \
    CLI_NUMBER("steps", CLI_INT, &(a)->p.steps, "N", "optimizer steps", 1, 100000000),                              \
    CLI_NUMBER("batch", CLI_INT, &(a)->p.batch, "B", "sequences per step", 1, 65536),                               \
    CLI_NUMBER("seq-len", CLI_INT, &(a)->p.seq_len, "T", "tokens per sequence", 1, 1 << 20),                        \
    CLI_REAL("lr", CLI_FLOAT, &(a)->p.optim.lr, "X", "peak learning rate (AdamW)"),                                 \
    CLI_NUMBER("warmup", CLI_INT, &(a)->p.optim.warmup_steps, "N", "linear warm-up steps", 0, 100000000),           \
    CLI_REAL("min-lr-ratio", CLI_FLOAT, &(a)->p.optim.min_lr_ratio, "R", "the cosine schedule ends at lr * R"),     \
    CLI_REAL("weight-decay", CLI_FLOAT, &(a)->p.optim.weight_decay, "W", "AdamW weight decay (matrices only)"),     \
    CLI_REAL("clip", CLI_FLOAT, &(a)->p.optim.clip_norm, "C", "gradient norm clip (<= 0: none)"),                   \
    CLI_NUMBER("seed", CLI_U64, &(a)->p.seed, "S", "seed of the batches", 0, INT64_MAX),                            \
    CLI_NUMBER("checkpoint-every", CLI_INT, &(a)->p.checkpoint_every, "N",                                          \
               "steps between resumable checkpoints (0: only at the end)", 0, 100000000),                           \
    CLI_NUMBER("eval-every", CLI_INT, &(a)->p.eval_every, "N", "steps between validation losses (0: never)", 0,     \
               100000000),                                                                                          \
    CLI_NUMBER("eval-batches", CLI_INT, &(a)->p.eval_batches, "N", "validation batches per evaluation", 0,          \
               100000000),                                                                                          \
    CLI_PROGRESS_OPT(&(a)->p.progress),                                                                            \
    CLI_TEXT("device", &(a)->device, "cpu|cuda", "where the models train (default: cpu)"),                         \
    CLI_COMM_OPTS(&(a)->comm)

#define TRAINING_EXIT_STATUS                                                      \
    "Under mpirun every rank takes its share of each batch; rank 0 writes OUT.\n" \
    "A checkpoint in OUT from other settings is bad usage.\n"                     \
    CLI_EXIT_TEXT

static int parse_train_args(int argc, char **argv, train_args *a)
{
    const cli_opt opts[] = {
        CLI_TEXT("config", &a->config, "FILE", "config.json of a model to start from random weights"),
        CLI_TEXT("model", &a->model_dir, "DIR", "a checkpoint to start from"),
        TRAINING_OPTS(a),
        CLI_NUMBER("init-seed", CLI_U64, &a->init_seed, "S", "seed of the random weights with --config", 0, INT64_MAX),
        CLI_REAL("init-std", CLI_FLOAT, &a->init_std, "X", "standard deviation of the random weights with --config"),
    };
    const cli_spec spec = {"train", "(--config FILE | --model DIR)",
                           "Trains a model on the token shards with next-token cross-entropy (AdamW, linear\n"
                           "warm-up then cosine decay), logging every step to OUT/loss.csv and writing\n"
                           "OUT/config.json and OUT/model.safetensors at the end. Checkpoints in\n"
                           "OUT/checkpoint let a rerun of the same command resume where it stopped.\n"
                           TRAINING_EXIT_STATUS,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc == CLI_PARSED && !a->config == !a->model_dir)
        rc = cli_usage_error(&spec, "give exactly one of --config and --model");
    return rc;
}

static int parse_distill_args(int argc, char **argv, train_args *a)
{
    const cli_opt opts[] = {
        CLI_REQUIRED("teacher", &a->teacher_dir, "DIR", "the checkpoint whose logits are the targets"),
        CLI_REQUIRED("student", &a->model_dir, "DIR", "the checkpoint to train"),
        TRAINING_OPTS(a),
        CLI_REAL("tau", CLI_FLOAT, &a->p.kd_tau, "T", "distillation temperature"),
    };
    const cli_spec spec = {"distill", NULL,
                           "Trains the student on the token shards to match the teacher's output\n"
                           "distribution (tau^2 KL at temperature tau), with the loop, outputs and resume\n"
                           "of autocompress train.\n"
                           TRAINING_EXIT_STATUS,
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
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
        ac_model_init_random(*model, a->init_seed, a->init_std);
    ac_arch_free(&arch);
    return st;
}

/* The starting model's architecture: --config, --model or distill's --student. */
static ac_status check_start(const train_args *a, ac_arch *arch)
{
    if (!a->model_dir) {
        ac_status st = ac_input_file("--config", a->config);
        if (st == AC_OK && (st = ac_config_json_read(a->config, arch)) != AC_OK)
            ac_fail_context(st, "--config");
        return st;
    }
    return ac_input_model(a->teacher_dir ? "--student" : "--model", a->model_dir, 1, arch);
}

/* Before the loading and the steps: the device, the models, the shards the loop reads
 * (val.bin only with evaluations) within the model's vocabulary, and an output to write. */
static ac_status check_inputs(const train_args *a)
{
    ac_arch arch = {0};
    ac_status st = ac_input_device("--device", a->device);
    if (st == AC_OK)
        st = check_start(a, &arch);
    if (st == AC_OK && a->teacher_dir)
        st = ac_input_model("--teacher", a->teacher_dir, 1, NULL);
    int shards = AC_SHARD_TRAIN | (a->p.eval_every > 0 ? AC_SHARD_VAL : 0);
    if (st == AC_OK)
        st = ac_input_shards("--data", a->p.data_dir, shards, arch.vocab);
    if (st == AC_OK)
        st = ac_input_out_dir("--out", a->p.out_dir);
    ac_arch_free(&arch);
    return st;
}

static int run_training(const char *command, train_args *a)
{
    ac_model *model = NULL, *teacher = NULL;
    ac_status st = cli_comm_init(&a->comm, &a->p.comm);
    if (st == AC_OK)
        st = check_inputs(a);
    if (st == AC_OK)
        st = initial_model(a, &model);
    if (st == AC_OK && a->teacher_dir)
        st = ac_model_load(a->teacher_dir, &teacher);
    if (st == AC_OK)
        st = ac_model_move_to_device(&model, a->device);
    if (st == AC_OK)
        st = ac_model_move_to_device(&teacher, a->device);
    ac_train_report report;
    a->p.teacher = teacher;
    if (st == AC_OK)
        st = ac_train_run(&model, &a->p, &report);
    if (st == AC_OK && ac_comm_rank(a->p.comm) == 0)
        printf("%s: %d steps%s, loss %.4f, validation loss %.4f, %.0f tokens/s -> %s\n", command, report.steps_done,
               report.resumed_from >= 0 ? " (resumed)" : "", report.last_loss, report.last_val_loss,
               report.tokens_per_second, a->p.out_dir);
    cli_comm_finish(command, a->p.comm, st);
    ac_model_free(model);
    ac_model_free(teacher);
    return cli_exit_status(st);
}

int cli_train(int argc, char **argv)
{
    train_args a = default_train_args();
    int rc = parse_train_args(argc, argv, &a);
    return rc == CLI_PARSED ? run_training("train", &a) : rc;
}

int cli_distill(int argc, char **argv)
{
    train_args a = default_train_args();
    int rc = parse_distill_args(argc, argv, &a);
    return rc == CLI_PARSED ? run_training("distill", &a) : rc;
}
