/* The training loop: deterministic batches, AdamW, a CSV loss log, periodic validation,
 * and checkpoints from which a killed run resumes to the same final weights. */
#include "autocompress/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/clock.h"
#include "autocompress/log.h"
#include "autocompress/tokens.h"
#include "comm/comm_device.h"
#include "model/model_internal.h"
#include "model/model_internal.h"
#include "train/checkpoint.h"
#include "util/path.h"

ac_train_params ac_train_default_params(void)
{
    return (ac_train_params){.kd_tau = 1.0f, .batch = 8, .seq_len = 256, .steps = 1000, .optim = ac_adamw_default_params(),
                             .seed = 1, .checkpoint_every = 100, .eval_every = 100, .eval_batches = 8,
                             .progress = AC_PROGRESS_AUTO};
}

/* Everything that decides the weights a run produces; a resume must match it. */
static void describe_run(const ac_train_params *p, char *out, size_t size)
{
    snprintf(out, size,
             "%s batch=%d seq_len=%d steps=%d lr=%.9g min_lr_ratio=%.9g warmup=%d betas=%.9g,%.9g eps=%.9g wd=%.9g "
             "clip=%.9g seed=%llu tau=%.9g",
             p->teacher ? "distill" : "train", p->batch, p->seq_len, p->steps, p->optim.lr, p->optim.min_lr_ratio,
             p->optim.warmup_steps, p->optim.beta1, p->optim.beta2, p->optim.eps, p->optim.weight_decay,
             p->optim.clip_norm, (unsigned long long)p->seed, p->teacher ? p->kd_tau : 0.0f);
}

static ac_status check_params(const ac_train_params *p)
{
    if (!p->data_dir || !p->out_dir)
        return ac_fail(AC_ERR_INVALID, "train: a data directory and an output directory are needed");
    if (p->batch < 1 || p->seq_len < 1 || p->steps < 1)
        return ac_fail(AC_ERR_INVALID, "train: batch (%d), seq_len (%d) and steps (%d) must be positive", p->batch,
                       p->seq_len, p->steps);
    if (p->checkpoint_every < 0 || p->eval_every < 0 || p->eval_batches < 0)
        return ac_fail(AC_ERR_INVALID, "train: checkpoint and evaluation intervals must be >= 0");
    if (p->teacher && !(p->kd_tau > 0))
        return ac_fail(AC_ERR_INVALID, "distill: the temperature must be positive, got %g", p->kd_tau);
    if (p->batch < ac_comm_size(p->comm))
        return ac_fail(AC_ERR_INVALID, "train: a batch of %d sequences cannot be shared by %d ranks", p->batch,
                       ac_comm_size(p->comm));
    return AC_OK;
}

/* Keeps the rows of loss.csv up to `step` (a resumed run rewrites the rest), or starts it. */
static ac_status open_loss_log(const char *path, int step, FILE **out)
{
    const char *header = "step,tokens,lr,loss,grad_norm,val_loss,seconds\n";
    char *kept = NULL;
    size_t kept_len = 0;
    FILE *old = step > 0 ? fopen(path, "r") : NULL;
    if (old) {
        FILE *mem = open_memstream(&kept, &kept_len);
        char line[512];
        while (mem && fgets(line, sizeof line, old)) {
            /* a kill can leave the last row half written: keep whole rows only */
            int row_step, whole = line[strlen(line) - 1] == '\n';
            if (whole && (sscanf(line, "%d,", &row_step) != 1 || row_step <= step))
                fputs(line, mem);
        }
        if (mem)
            fclose(mem);
        fclose(old);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        free(kept);
        return ac_fail(AC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    }
    fputs(kept_len ? kept : header, f);
    fflush(f);
    free(kept);
    *out = f;
    return AC_OK;
}

typedef struct {
    const ac_train_params *p;
    int row0, rows;    /* this rank's shard of every batch: rows [row0, row0 + rows) */
    ac_model *model;
    ac_model *grads;
    ac_adamw *opt;
    ac_train_step *step;
    ac_train_step *teacher_step;
    ac_tokens *train, *val;
    int32_t *window;   /* [batch, seq_len + 1]: the global batch */
    int32_t *inputs, *targets; /* [rows, seq_len]: this rank's */
    float *grads_host; /* a device run with several ranks: the gradients' host staging */
    int64_t positions; /* the global batch's positions that the loss is a mean over */
    FILE *log;
} loop_state;

/* The run computes where the model's weights are: the teacher must be there too. */
static ac_status check_devices(const loop_state *s)
{
    const ac_model *m = s->model, *t = s->p->teacher;
    if (t && t->backend != m->backend)
        return ac_fail(AC_ERR_INVALID, "distill: the teacher is on %s, the student on %s", ac_model_device(t),
                       ac_model_device(m));
    return AC_OK;
}

/* This rank's inputs and targets from the global batch's first n windows (the rest are
 * padding), and the positions its loss is a mean over: the counted targets of the whole
 * batch (cross-entropy) or all of its positions (distillation). */
static void split_windows(loop_state *s, int n)
{
    int T = s->p->seq_len;
    for (int i = 0; i < s->rows; i++) {
        int b = s->row0 + i;
        for (int t = 0; t < T; t++) {
            s->inputs[i * T + t] = b < n ? s->window[b * (T + 1) + t] : 0;
            s->targets[i * T + t] = b < n ? s->window[b * (T + 1) + t + 1] : -1;
        }
    }
    s->positions = s->p->teacher ? (int64_t)s->p->batch * T : (int64_t)(n < s->p->batch ? n : s->p->batch) * T;
}

/* Inputs for the student's loss: targets, or the teacher's logits on the same tokens. */
static ac_status step_inputs(loop_state *s, ac_step_inputs *in)
{
    *in = (ac_step_inputs){.tokens = s->inputs, .loss_positions = s->positions};
    if (!s->p->teacher) {
        in->targets = s->targets;
        return AC_OK;
    }
    ac_step_inputs t = {.tokens = s->inputs, .targets = s->targets};
    double unused;
    ac_status st = ac_train_step_loss(s->teacher_step, &t, &unused);
    in->teacher_logits = ac_train_step_logits(s->teacher_step);
    in->kd_tau = s->p->kd_tau;
    return st;
}

static ac_status validation_loss(loop_state *s, double *loss)
{
    ac_tokens_iter it;
    ac_tokens_iter_init(&it, s->val, s->p->seq_len);
    double sum = 0.0;
    int batches = 0, n;
    while (batches < s->p->eval_batches && (n = ac_tokens_iter_next(&it, s->p->batch, s->window)) > 0) {
        split_windows(s, n);
        ac_step_inputs in;
        double l;
        ac_status st = step_inputs(s, &in);
        if (st == AC_OK)
            st = ac_train_step_loss(s->step, &in, &l);
        if (st == AC_OK)
            st = ac_comm_allreduce_f64(s->p->comm, &l, 1);
        if (st != AC_OK)
            return st;
        sum += l;
        batches++;
    }
    *loss = batches ? sum / batches : NAN;
    return AC_OK;
}

static void loop_free(loop_state *s)
{
    ac_model_free(s->grads);
    free(s->grads_host);
    ac_adamw_free(s->opt);
    ac_train_step_free(s->step);
    ac_train_step_free(s->teacher_step);
    ac_tokens_close(s->train);
    ac_tokens_close(s->val);
    free(s->window);
    free(s->inputs);
    free(s->targets);
    if (s->log)
        fclose(s->log);
}

static ac_status open_data(loop_state *s)
{
    char path[4096];
    ac_status st = ac_path_join(path, sizeof path, s->p->data_dir, "train.bin");
    if (st == AC_OK)
        st = ac_tokens_open(path, &s->train);
    if (st == AC_OK && s->p->eval_every > 0)
        st = ac_path_join(path, sizeof path, s->p->data_dir, "val.bin");
    if (st == AC_OK && s->p->eval_every > 0)
        st = ac_tokens_open(path, &s->val);
    if (st != AC_OK)
        return st;
    int V = s->model->arch.vocab;
    if (ac_tokens_vocab_size(s->train) > (uint32_t)V)
        return ac_fail(AC_ERR_INVALID, "%s: token vocabulary %u is larger than the model's %d", ac_tokens_path(s->train),
                       ac_tokens_vocab_size(s->train), V);
    if (s->p->teacher && s->p->teacher->arch.vocab != V)
        return ac_fail(AC_ERR_INVALID, "distill: teacher vocabulary %d differs from the student's %d", s->p->teacher->arch.vocab, V);
    return AC_OK;
}

/* Resumes from out_dir/checkpoint when one exists (replacing *model), else starts.
 * Every rank reads the checkpoint rank 0 wrote, and must find the one rank 0 found. */
static ac_status resume_or_start(loop_state *s, ac_model **model, const char *run, int *start)
{
    char dir[4096], found[4096] = "";
    ac_status st = ac_path_join(dir, sizeof dir, s->p->out_dir, "checkpoint");
    if (st != AC_OK)
        return st;
    *start = 0;
    if (ac_checkpoint_find(dir, found, sizeof found) != AC_OK) {
        ac_clear_error();
        found[0] = '\0';
    }
    st = ac_comm_check_same(s->p->comm, "the checkpoints found (is OUT on a file system every rank shares?)", found);
    if (st != AC_OK)
        return st;
    if (!found[0])
        return ac_adamw_create(*model, &s->p->optim, &s->opt);
    ac_train_state state;
    ac_model *resumed;
    st = ac_checkpoint_load(found, &resumed, &state);
    if (st != AC_OK)
        return ac_fail_context(st, "resuming from %s", found);
    if ((*model)->backend) { /* the run continues on the device it was given */
        ac_model *host = resumed;
        st = ac_model_to_backend(host, (*model)->backend, &resumed);
        ac_model_free(host);
        if (st != AC_OK)
            return st;
    }
    if (strcmp(state.run, run) != 0) {
        ac_model_free(resumed);
        return ac_fail(AC_ERR_INVALID, "%s was written by a run with other settings (%s); this run has %s: use another "
                       "--out or the same settings", found, state.run, run);
    }
    st = ac_adamw_create(resumed, &s->p->optim, &s->opt);
    if (st == AC_OK)
        st = ac_checkpoint_load_optimizer(found, resumed, s->opt);
    if (st != AC_OK) {
        ac_model_free(resumed);
        return st;
    }
    ac_adamw_set_steps_done(s->opt, state.step);
    ac_model_free(*model);
    *model = resumed;
    *start = state.step;
    ac_info("resuming %s from step %d", s->p->out_dir, state.step);
    return AC_OK;
}

static ac_status save_checkpoint(loop_state *s, int step, const char *run)
{
    char dir[4096];
    ac_status st = ac_path_join(dir, sizeof dir, s->p->out_dir, "checkpoint");
    ac_train_state state = {.step = step, .tokens = (int64_t)step * s->p->batch * s->p->seq_len};
    snprintf(state.run, sizeof state.run, "%s", run);
    return st == AC_OK ? ac_checkpoint_save(dir, s->model, s->opt, &state) : st;
}

static ac_status allocate(loop_state *s)
{
    size_t rows = (size_t)s->rows * s->p->seq_len;
    s->window = malloc((size_t)s->p->batch * (s->p->seq_len + 1) * sizeof(int32_t));
    s->inputs = malloc(rows * sizeof(int32_t));
    s->targets = malloc(rows * sizeof(int32_t));
    if (!s->window || !s->inputs || !s->targets)
        return ac_fail(AC_ERR_NOMEM, "train: out of memory");
    if (s->model->backend && ac_comm_size(s->p->comm) > 1 &&
        !(s->grads_host = malloc(s->model->arena_count * sizeof *s->grads_host)))
        return ac_fail(AC_ERR_NOMEM, "train: out of memory for the gradients' host staging");
    ac_status st = ac_model_create_on(&s->model->arch, s->model->backend, &s->grads);
    if (st == AC_OK)
        st = ac_train_step_create(s->model, s->rows, s->p->seq_len, &s->step);
    if (st == AC_OK && s->p->teacher)
        st = ac_train_step_create(s->p->teacher, s->rows, s->p->seq_len, &s->teacher_step);
    return st;
}

static ac_status train_steps(loop_state *s, int start, const char *run, ac_train_report *report)
{
    const ac_train_params *p = s->p;
    ac_progress *progress;
    ac_status st = ac_progress_init(&progress, p->teacher ? "distill" : "train", (double)p->steps * p->batch * p->seq_len,
                                    "tok", ac_comm_rank(p->comm) == 0 ? p->progress : AC_PROGRESS_OFF, stderr);
    if (st != AC_OK)
        return st;
    double t0 = ac_monotonic_s();
    size_t n;
    float *g = ac_model_arena(s->grads, &n);
    for (int step = start; st == AC_OK && step < p->steps; step++) {
        st = ac_tokens_sample_batch(s->train, p->seed, (uint64_t)step, p->batch, p->seq_len, s->window, NULL);
        ac_step_inputs in;
        double loss = NAN, norm = NAN, val = NAN;
        if (st == AC_OK) {
            split_windows(s, p->batch);
            ac_model_zero(s->grads);
            st = step_inputs(s, &in);
        }
        if (st == AC_OK) {
            in.grads = s->grads;
            st = ac_train_step_run(s->step, &in, &loss);
        }
        /* the ranks' shares add up to the global batch's mean loss and its gradient */
        if (st == AC_OK)
            st = ac_comm_allreduce_device_f32(p->comm, s->grads->backend, g, n, s->grads_host);
        if (st == AC_OK)
            st = ac_comm_allreduce_f64(p->comm, &loss, 1);
        float lr = ac_adamw_lr(&p->optim, step);
        if (st == AC_OK)
            st = ac_adamw_step(s->opt, s->model, s->grads, &norm);
        int done = step + 1;
        if (st == AC_OK && p->eval_every > 0 && (done % p->eval_every == 0 || done == p->steps))
            st = validation_loss(s, &val);
        if (st != AC_OK)
            break;
        report->last_loss = loss;
        report->steps_done = done;
        if (!isnan(val))
            report->last_val_loss = val;
        if (ac_comm_rank(p->comm) != 0)
            continue;
        char val_text[32] = "";
        if (!isnan(val))
            snprintf(val_text, sizeof val_text, "%.6f", val);
        fprintf(s->log, "%d,%lld,%.6g,%.6f,%.6f,%s,%.2f\n", done, (long long)done * p->batch * p->seq_len, lr, loss, norm,
                val_text, ac_monotonic_s() - t0);
        fflush(s->log);
        if (!isnan(val)) {
            /* a line in the log at every evaluation, for runs without a TTY */
            double elapsed = ac_monotonic_s() - t0;
            ac_info("%s step %d/%d: loss %.4f, validation %.4f, %.0f tokens/s", p->teacher ? "distill" : "train", done,
                    p->steps, loss, val, elapsed > 0 ? (double)(done - start) * p->batch * p->seq_len / elapsed : 0.0);
        }
        ac_progress_metric(progress, "loss", loss);
        if (!isnan(val))
            ac_progress_metric(progress, "val", val);
        ac_progress_update(progress, (double)(done - start) * p->batch * p->seq_len);
        if ((p->checkpoint_every > 0 && done % p->checkpoint_every == 0) || done == p->steps)
            st = save_checkpoint(s, done, run);
    }
    double seconds = ac_monotonic_s() - t0;
    report->tokens_per_second = seconds > 0 ? (double)(report->steps_done - start) * p->batch * p->seq_len / seconds : 0;
    ac_progress_finish(progress);
    ac_progress_free(progress);
    return st;
}

ac_status ac_train_run(ac_model **model, const ac_train_params *params, ac_train_report *report)
{
    ac_status st = check_params(params);
    if (st != AC_OK)
        return st;
    ac_train_params p = *params;
    p.optim.total_steps = p.steps;
    char run[512], path[4096];
    describe_run(&p, run, sizeof run);
    *report = (ac_train_report){.resumed_from = -1, .last_loss = NAN, .last_val_loss = NAN};
    st = ac_comm_check_same(p.comm, "training settings", run);
    if (st != AC_OK)
        return st;
    int rank = ac_comm_rank(p.comm);
    if (rank == 0 && mkdir(p.out_dir, 0755) != 0 && errno != EEXIST)
        return ac_fail(AC_ERR_IO, "%s: cannot create: %s", p.out_dir, strerror(errno));

    loop_state s = {.p = &p};
    ac_comm_shard(p.comm, p.batch, &s.row0, &s.rows);
    s.rows -= s.row0;
    int start = 0;
    st = ac_comm_barrier(p.comm); /* OUT exists before the others look into it */
    if (st == AC_OK)
        st = resume_or_start(&s, model, run, &start);
    s.model = *model;
    if (st == AC_OK)
        st = check_devices(&s);
    if (st == AC_OK)
        st = open_data(&s);
    if (st == AC_OK)
        st = allocate(&s);
    if (st == AC_OK && rank == 0 && (st = ac_path_join(path, sizeof path, p.out_dir, "loss.csv")) == AC_OK)
        st = open_loss_log(path, start, &s.log);
    if (st == AC_OK) {
        report->resumed_from = start > 0 ? start : -1;
        report->steps_done = start;
        st = train_steps(&s, start, run, report);
    }
    if (st == AC_OK && rank == 0)
        st = ac_model_save(s.model, p.out_dir, AC_DTYPE_F32);
    /* the others return once the model is there (or rank 0 has failed, and they time out) */
    if (st == AC_OK)
        st = ac_comm_barrier(p.comm);
    loop_free(&s);
    return st;
}
