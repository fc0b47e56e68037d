/* The search loop: importance on calibration tokens, the parent reordered so widths are
 * prefixes, then router steps (KD from the unmasked parent + the budget loss on the cost
 * model's expected cost with learned multipliers, Adam with a shared second moment on
 * the router logits, annealed temperature and learning rate), resumable,
 * with per-step diagnostics; finally the argmax architecture, repaired greedily until
 * the cost model says it meets every target and filled up to them (discretize.c). */
#include "autocompress/search.h"

#include "autocompress/config_json.h"
#include "autocompress/log.h"
#include "autocompress/tokens.h"
#include "autocompress/train.h"
#include "autocompress/optim.h"
#include "kernels/kernels.h"
#include "comm/comm_device.h"
#include "model/model_internal.h"
#include "search/search_loop.h"
#include "train/checkpoint.h"
#include "util/path.h"
#include "util/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

ac_search_params ac_search_default_params(void)
{
    ac_search_params p;
    memset(&p, 0, sizeof p);
    p.calib_seqs = 64;
    p.batch = 4;
    p.seq_len = 128;
    p.kd_tau = 1.0f;
    p.kd_weight = 1.0f;
    p.budget_mode = AC_BUDGET_DUAL;
    p.budget = (ac_budget_weights){10.0, 100.0};
    p.dual_lr = 0.1;
    p.dual_damping = 1.0;
    p.router_optim = AC_ROUTER_SHARED_ADAM;
    p.lr = 0.05f;
    p.lr_schedule = AC_LR_FOLLOWS_TEMPERATURE;
    p.temp_start = 1.0f;
    p.temp_end = 0.05f;
    p.sampling = AC_ROUTER_SOFTMAX;
    p.target_warmup = 0.3f;
    p.warmup_from = AC_WARMUP_FROM_INITIAL;
    p.seed = 1;
    p.checkpoint_every = 20;
    p.weights_optim = ac_adamw_default_params();
    p.weights_optim.lr = 1e-4f;
    p.weights_optim.warmup_steps = 0;
    p.weights_optim.weight_decay = 0.0f;
    p.progress = AC_PROGRESS_AUTO;
    p.fill = 1;
    p.candidates = 4;
    return p;
}

static ac_status check_params(const ac_search_params *p)
{
    if (!p->data_dir || !p->out_dir)
        return ac_fail(AC_ERR_INVALID, "search: needs a data directory and an output directory");
    char why[256];
    if (p->device && !ac_backend_select(p->device, why, sizeof why)) /* before the calibration's work */
        return ac_fail(AC_ERR_UNSUPPORTED, "search: %s", why);
    if (p->calib_seqs < 1 || p->batch < 1 || p->seq_len < 2)
        return ac_fail(AC_ERR_INVALID, "search: calibration sequences (%d), batch (%d) and sequence length (%d) must "
                                       "be positive (length >= 2)", p->calib_seqs, p->batch, p->seq_len);
    if (!(p->kd_tau > 0) || !(p->kd_weight >= 0) || !(p->lr > 0))
        return ac_fail(AC_ERR_INVALID, "search: kd_tau (%g) and lr (%g) must be positive and kd_weight (%g) >= 0",
                       (double)p->kd_tau, (double)p->lr, (double)p->kd_weight);
    if (!(p->budget.lambda1 >= 0) || !(p->budget.lambda2 >= 0) || !(p->dual_lr >= 0) || !(p->dual_damping >= 0))
        return ac_fail(AC_ERR_INVALID, "search: budget weights (%g, %g), the multipliers' rate (%g) and damping (%g) "
                                       "must be >= 0", p->budget.lambda1, p->budget.lambda2, p->dual_lr,
                       p->dual_damping);
    if ((unsigned)p->budget_mode > AC_BUDGET_HINGE || (unsigned)p->router_optim > AC_ROUTER_SGD ||
        (unsigned)p->lr_schedule > AC_LR_CONSTANT || (unsigned)p->warmup_from > AC_WARMUP_FROM_PARENT)
        return ac_fail(AC_ERR_INVALID, "search: unknown budget mode (%d), router optimiser (%d), lr schedule (%d) or "
                                       "warm-up start (%d)", (int)p->budget_mode, (int)p->router_optim,
                       (int)p->lr_schedule, (int)p->warmup_from);
    if (!(p->temp_start > 0) || !(p->temp_end > 0))
        return ac_fail(AC_ERR_INVALID, "search: temperatures must be positive");
    if (p->candidates < 0)
        return ac_fail(AC_ERR_INVALID, "search: candidates must be >= 0, got %d", p->candidates);
    if (!(p->target_warmup >= 0 && p->target_warmup <= 1))
        return ac_fail(AC_ERR_INVALID, "search: target_warmup must be in [0, 1], got %g", (double)p->target_warmup);
    if (p->train_weights && !(p->weights_optim.lr > 0))
        return ac_fail(AC_ERR_INVALID, "search: the weights' learning rate must be positive, got %g",
                       (double)p->weights_optim.lr);
    if (p->batch < ac_comm_size(p->comm))
        return ac_fail(AC_ERR_INVALID, "search: a batch of %d sequences cannot be shared by %d ranks", p->batch,
                       ac_comm_size(p->comm));
    return AC_OK;
}

/* ---- targets ---- */

static ac_contract_costs costs_of(const ac_cost_prediction *p)
{
    ac_contract_costs c;
    memset(&c, 0, sizeof c);
    c.has_latency = c.has_throughput = c.has_memory = true;
    c.latency_ms = p->latency_ms;
    c.throughput_tok_s = p->throughput_tok_s;
    c.memory_gib = p->memory_bytes / (1024.0 * 1024.0 * 1024.0);
    return c;
}

ac_status ac_search_resolve_targets(const ac_contract *c, const ac_cost_prediction *parent, ac_budget_targets *t)
{
    ac_contract_costs pc = costs_of(parent), abs;
    ac_status st = ac_contract_resolve_targets(c, &pc, &abs);
    if (st != AC_OK)
        return st;
    t->latency_ms = abs.has_latency ? abs.latency_ms : 0;
    t->throughput_tok_s = abs.has_throughput ? abs.throughput_tok_s : 0;
    t->memory_bytes = abs.has_memory ? abs.memory_gib * 1024.0 * 1024.0 * 1024.0 : 0;
    return AC_OK;
}

ac_budget_targets ac_search_planned_targets(const ac_budget_targets *t, double margin)
{
    ac_budget_targets p = *t;
    p.latency_ms *= 1.0 - margin;
    p.memory_bytes *= 1.0 - margin;
    p.throughput_tok_s *= 1.0 + margin;
    return p;
}

/* One target on the warm-up: from `from`, or from the final target where `from` is
 * already inside it (a warm-up never asks for more than the final target), to `final`.
 * sign +1: stay below (latency, memory), -1: above (throughput). */
static double warm(double from, double final, double sign, double a)
{
    double start = sign * (from - final) > 0 ? from : final;
    return start + a * (final - start);
}

/* The targets at the fraction `frac` of the warm-up: from `start`'s cost (the parent's,
 * or the routers' initial expected cost) to the final ones (Sheared-LLaMA's warmed-up
 * target). */
static ac_budget_targets warmed_targets(const ac_budget_targets *final, const ac_cost_prediction *start, double frac)
{
    ac_budget_targets t = *final;
    double a = frac >= 1.0 ? 1.0 : frac;
    if (t.latency_ms > 0)
        t.latency_ms = warm(start->latency_ms, final->latency_ms, 1.0, a);
    if (t.memory_bytes > 0)
        t.memory_bytes = warm(start->memory_bytes, final->memory_bytes, 1.0, a);
    if (t.throughput_tok_s > 0)
        t.throughput_tok_s = warm(start->throughput_tok_s, final->throughput_tok_s, -1.0, a);
    return t;
}

double ac_search_excess(const ac_budget_targets *t, const ac_cost_prediction *p)
{
    double e = 0;
    if (t->latency_ms > 0)
        e += fmax(0.0, (p->latency_ms - t->latency_ms) / t->latency_ms);
    if (t->memory_bytes > 0)
        e += fmax(0.0, (p->memory_bytes - t->memory_bytes) / t->memory_bytes);
    if (t->throughput_tok_s > 0)
        e += fmax(0.0, (t->throughput_tok_s - p->throughput_tok_s) / t->throughput_tok_s);
    return e;
}

/* ---- the run's state ---- */

typedef struct {
    const ac_search_params *p;
    const ac_contract *contract;
    ac_model *model;            /* the reordered parent (trained in place with train_weights) */
    ac_model *teacher_model;    /* with train_weights: a frozen copy of it, the KD teacher */
    ac_model *grads;            /* with train_weights: dL/dW */
    ac_adamw *opt;              /* with train_weights: the weights' optimizer */
    ac_importance imp;          /* in the reordered order */
    ac_cost_model *cost;
    ac_routers *routers;
    ac_tokens *tokens;
    ac_train_step *student, *teacher;
    float *grads_host;     /* trained weights on a device with several ranks: their gradients' host staging */
    int32_t *batch_tokens;
    int n_logits, n_axes, steps;
    int row0, rows;             /* this rank's shard of every batch: rows [row0, row0 + rows) */
    float *m, *v, *grad;        /* the router optimiser's moments and the gradient of the logits */
    double *probs, *dprobs, *dprobs_budget, *dl_kd, *dl_budget, *d_lat, *d_mem, *d_thr;
    ac_cost_prediction parent_cost;
    ac_cost_prediction initial_cost;    /* the expected cost under the zero-initialised routers */
    double lambda[AC_BUDGET_TARGETS];   /* the budget's multipliers (DUAL) */
    ac_budget_targets targets, planned; /* the contract's; those the search aims at */
    int64_t calib_tokens;
    char fingerprint[AC_SEARCH_FINGERPRINT];
    FILE *csv;
} search_run;

static void free_run(search_run *r)
{
    if (r->csv)
        fclose(r->csv);
    ac_train_step_free(r->student);
    ac_train_step_free(r->teacher);
    ac_routers_free(r->routers);
    ac_cost_model_free(r->cost);
    ac_tokens_close(r->tokens);
    ac_importance_free(&r->imp);
    ac_model_free(r->model);
    ac_model_free(r->teacher_model);
    ac_model_free(r->grads);
    free(r->grads_host);
    ac_adamw_free(r->opt);
    free(r->batch_tokens);
    free(r->m);
    free(r->v);
    free(r->grad);
    free(r->probs);
    free(r->dprobs);
    free(r->dprobs_budget);
    free(r->dl_kd);
    free(r->dl_budget);
    free(r->d_lat);
    free(r->d_mem);
    free(r->d_thr);
}

static ac_status path_in(const search_run *r, const char *name, char *buf, size_t size)
{
    return ac_path_join(buf, size, r->p->out_dir, name);
}

/* batch windows of seq_len input tokens, packed: the sampler writes seq_len + 1 per
 * window (inputs and targets), buf must hold batch * (seq_len + 1); the search needs
 * no targets, so each window's last token is dropped. */
static ac_status sample_inputs(const ac_tokens *tokens, uint64_t seed, uint64_t step, int batch, int seq_len,
                               int32_t *buf)
{
    ac_status st = ac_tokens_sample_batch(tokens, seed, step, batch, seq_len, buf, NULL);
    for (int b = 1; st == AC_OK && b < batch; b++)
        memmove(buf + (size_t)b * seq_len, buf + (size_t)b * (seq_len + 1), (size_t)seq_len * sizeof *buf);
    return st;
}

/* Importance from the calibration batch (or the run's saved file), then the reorder. */
static ac_status prepare_model(search_run *r, const ac_model *parent)
{
    const ac_search_params *p = r->p;
    char path[AC_PATH_MAX];
    ac_status st = path_in(r, "importance.safetensors", path, sizeof path);
    struct stat sb;
    r->calib_tokens = (int64_t)p->calib_seqs * p->seq_len;
    /* rank 0 computes the importance (or finds it saved); the others load its file */
    int rank = ac_comm_rank(p->comm);
    if (st == AC_OK && rank != 0)
        st = ac_comm_barrier(p->comm);
    if (st != AC_OK)
        return st;
    if (stat(path, &sb) == 0) {
        st = ac_importance_load(path, ac_model_arch(parent), &r->imp);
    } else {
        int32_t *calib = malloc((size_t)p->calib_seqs * (p->seq_len + 1) * sizeof *calib);
        if (!calib)
            return ac_fail(AC_ERR_NOMEM, "search: out of memory for %d calibration sequences", p->calib_seqs);
        /* calibration windows come from their own stream of the seed */
        st = sample_inputs(r->tokens, p->seed ^ AC_CALIBRATION_STREAM, 0, p->calib_seqs, p->seq_len, calib);
        if (st == AC_OK)
            st = ac_importance_compute(parent, calib, p->calib_seqs, p->seq_len, &r->imp);
        free(calib);
        if (st == AC_OK)
            st = ac_importance_save(&r->imp, path);
    }
    if (st == AC_OK && rank == 0)
        st = ac_comm_barrier(p->comm);
    if (st == AC_OK)
        st = ac_model_slice(parent, ac_model_arch(parent), NULL, 0, &r->model);
    if (st == AC_OK)
        st = ac_model_reorder(r->model, &r->imp);
    return st;
}

static ac_status alloc_buffers(search_run *r)
{
    const ac_search_params *p = r->p;
    int n = r->n_logits;
    size_t rows = (size_t)p->batch * p->seq_len;
    r->batch_tokens = malloc((rows + (size_t)p->batch) * sizeof *r->batch_tokens);
    r->m = calloc((size_t)n, sizeof *r->m);
    r->v = calloc((size_t)n, sizeof *r->v);
    r->grad = calloc((size_t)n, sizeof *r->grad);
    double **d[] = {&r->probs, &r->dprobs, &r->dprobs_budget, &r->dl_kd, &r->dl_budget, &r->d_lat, &r->d_mem, &r->d_thr};
    int ok = r->batch_tokens && r->m && r->v && r->grad;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        *d[i] = calloc((size_t)n, sizeof(double));
        ok = ok && *d[i];
    }
    return ok ? AC_OK : ac_fail(AC_ERR_NOMEM, "search: out of memory for a batch of %d x %d", p->batch, p->seq_len);
}

static ac_status open_tokens(search_run *r, const ac_model *parent)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, r->p->data_dir, "train.bin");
    if (st == AC_OK)
        st = ac_tokens_open(path, &r->tokens);
    if (st != AC_OK)
        return st;
    if ((int)ac_tokens_vocab_size(r->tokens) > ac_model_arch(parent)->vocab)
        return ac_fail(AC_ERR_INVALID, "search: %s has vocabulary %u, larger than the model's %d", path,
                       ac_tokens_vocab_size(r->tokens), ac_model_arch(parent)->vocab);
    return AC_OK;
}

/* The student's weights train: the teacher becomes a frozen copy of the reordered
 * parent, and the weights get their gradients and an AdamW of their own. */
static ac_status setup_weight_training(search_run *r)
{
    const ac_arch *arch = ac_model_arch(r->model);
    ac_adamw_params optim = r->p->weights_optim;
    optim.total_steps = r->steps;
    ac_status st = AC_OK;
    if (!r->teacher_model) /* a device run sliced it before the move (move_to_device) */
        st = ac_model_slice(r->model, arch, NULL, 0, &r->teacher_model);
    if (st == AC_OK)
        st = ac_model_create_on(arch, r->model->backend, &r->grads);
    if (st == AC_OK && r->model->backend && ac_comm_size(r->p->comm) > 1 &&
        !(r->grads_host = malloc(r->grads->arena_count * sizeof *r->grads_host)))
        st = ac_fail(AC_ERR_NOMEM, "search: out of memory for the gradients' host staging");
    if (st == AC_OK)
        st = ac_adamw_create(r->model, &optim, &r->opt);
    return st;
}

/* On a device, the reordered student (and, when the weights train, its frozen teacher,
 * sliced here while on the host) move there; the search's other state stays on the host. */
static ac_status move_to_device(search_run *r)
{
    const char *device = r->p->device;
    if (!device || !strcmp(device, "cpu"))
        return AC_OK;
    ac_status st = AC_OK;
    if (r->p->train_weights)
        st = ac_model_slice(r->model, ac_model_arch(r->model), NULL, 0, &r->teacher_model);
    if (st == AC_OK)
        st = ac_model_move_to_device(&r->model, device);
    if (st == AC_OK)
        st = ac_model_move_to_device(&r->teacher_model, device);
    return st;
}

/* The expected cost of the routers as created (zero logits, so the uniform mixture at
 * any temperature): where the targets' warm-up starts with AC_WARMUP_FROM_INITIAL. */
static ac_status initial_expected_cost(search_run *r)
{
    double *probs = malloc((size_t)r->n_logits * sizeof *probs);
    if (!probs)
        return ac_fail(AC_ERR_NOMEM, "search: out of memory");
    ac_routers_probs(r->routers, r->p->temp_start, AC_ROUTER_SOFTMAX, 0, probs);
    ac_status st = ac_cost_expected(r->cost, probs, &r->initial_cost, NULL, NULL, NULL);
    free(probs);
    return st;
}

static ac_status setup(search_run *r, const ac_model *parent, const ac_cost_tables *tables)
{
    const ac_search_params *p = r->p;
    ac_status st = open_tokens(r, parent);
    if (st == AC_OK)
        st = prepare_model(r, parent);
    if (st == AC_OK)
        st = move_to_device(r);
    if (st == AC_OK)
        st = ac_cost_model_create_with(tables, ac_model_arch(r->model), r->contract, p->mamba_removal, &r->cost);
    if (st == AC_OK)
        st = ac_cost_predict_arch(r->cost, ac_model_arch(r->model), &r->parent_cost);
    if (st == AC_OK)
        st = ac_search_resolve_targets(r->contract, &r->parent_cost, &r->targets);
    r->planned = ac_search_planned_targets(&r->targets, r->contract->margin);
    if (st == AC_OK)
        st = ac_routers_create(r->cost, ac_model_arch(r->model), &r->routers);
    if (st != AC_OK)
        return st;
    ac_routers_set_expert_masking(r->routers, p->expert_masking);
    r->n_logits = ac_routers_count(r->routers);
    r->n_axes = ac_cost_model_axis_count(r->cost);
    st = initial_expected_cost(r);
    if (st != AC_OK)
        return st;
    int64_t budget = p->max_tokens > 0 ? p->max_tokens
                     : r->contract->budgets.has_search_tokens ? r->contract->budgets.search_tokens : 0;
    if (budget <= 0)
        return ac_fail(AC_ERR_INVALID, "search: no token budget (give --tokens or the contract's budgets.search_tokens)");
    if (r->contract->budgets.has_search_tokens && budget > r->contract->budgets.search_tokens)
        return ac_fail(AC_ERR_INVALID, "search: %lld tokens exceed %s's budgets.search_tokens (%lld)",
                       (long long)budget, r->contract->name, (long long)r->contract->budgets.search_tokens);
    int64_t per_step = (int64_t)p->batch * p->seq_len;
    if (budget - r->calib_tokens < per_step)
        return ac_fail(AC_ERR_INVALID, "search: the budget of %lld tokens leaves no router step after %lld calibration "
                                       "tokens (a step takes %lld)", (long long)budget, (long long)r->calib_tokens,
                       (long long)per_step);
    r->steps = (int)((budget - r->calib_tokens) / per_step);
    ac_comm_shard(p->comm, p->batch, &r->row0, &r->rows);
    r->rows -= r->row0;
    st = alloc_buffers(r);
    if (st == AC_OK)
        st = ac_train_step_create(r->model, r->rows, p->seq_len, &r->student);
    if (st == AC_OK && p->train_weights)
        st = setup_weight_training(r);
    if (st == AC_OK && p->kd_weight > 0)
        st = ac_train_step_create(r->teacher_model ? r->teacher_model : r->model, r->rows, p->seq_len, &r->teacher);
    snprintf(r->fingerprint, sizeof r->fingerprint,
             "contract=%s data=%s calib=%d batch=%d seq=%d steps=%d tau=%g kd=%g budget=%s l1=%g l2=%g eta=%g rho=%g "
             "optim=%d lr=%g:%d temp=%g..%g sampling=%d experts=%d warmup=%g:%d seed=%llu axes=%d logits=%d "
             "weights=%d:%g",
             r->contract->name, p->data_dir, p->calib_seqs, p->batch, p->seq_len, r->steps, (double)p->kd_tau,
             (double)p->kd_weight, p->budget_mode == AC_BUDGET_DUAL ? "dual" : "hinge", p->budget.lambda1,
             p->budget.lambda2, p->dual_lr, p->dual_damping, (int)p->router_optim, (double)p->lr, (int)p->lr_schedule,
             (double)p->temp_start, (double)p->temp_end, (int)p->sampling, (int)p->expert_masking,
             (double)p->target_warmup, (int)p->warmup_from, (unsigned long long)p->seed, r->n_axes, r->n_logits,
             p->train_weights, p->train_weights ? (double)p->weights_optim.lr : 0.0);
    return st;
}

/* ---- one router step ---- */

float ac_search_temperature(const ac_search_params *p, int step, int steps)
{
    if (steps <= 1)
        return p->temp_end;
    double f = (double)step / (double)(steps - 1);
    return (float)(p->temp_start * pow((double)p->temp_end / p->temp_start, f));
}

/* Following the temperature keeps the step constant in logits / T: with a constant lr
 * the last steps move z / T 20x further than the first, and binary axes flip late. */
float ac_search_router_lr(const ac_search_params *p, float temperature)
{
    return p->lr_schedule == AC_LR_CONSTANT ? p->lr : p->lr * temperature / p->temp_start;
}

static double grad_norm(const double *g, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += g[i] * g[i];
    return sqrt(s);
}

static double grad_norm_axis(const double *g, const ac_cost_axis *a)
{
    return grad_norm(g + a->offset, a->count);
}

typedef struct {
    double kd, budget;
    ac_cost_prediction expected;
    ac_budget_targets targets;
    float temperature, lr;
    double lambda[AC_BUDGET_TARGETS]; /* the weight on each target's excess this step (dL/dr) */
} step_result;

/* The gradients of this rank's share of the batch, summed over ranks: the masks' (and the
 * layer gates'), the weights' when they train, and the KD loss. */
static ac_status sum_over_ranks(search_run *r, double *kd)
{
    ac_comm *comm = r->p->comm;
    float *buf, *gates;
    size_t n, n_gates, n_weights = 0;
    ac_routers_mask_grad_storage(r->routers, &buf, &n, &gates, &n_gates);
    float *weights = r->grads ? ac_model_arena(r->grads, &n_weights) : NULL;
    ac_status st = ac_comm_allreduce_f32(comm, buf, n);
    if (st == AC_OK && gates)
        st = ac_comm_allreduce_f32(comm, gates, n_gates);
    if (st == AC_OK && weights)
        st = ac_comm_allreduce_device_f32(comm, r->grads->backend, weights, n_weights, r->grads_host);
    return st == AC_OK ? ac_comm_allreduce_f64(comm, kd, 1) : st;
}

static ac_status kd_gradient(search_run *r, int step, const ac_masks *masks, ac_mask_grads *mg, double *kd)
{
    const ac_search_params *p = r->p;
    /* every rank samples the whole batch (a pure function of seed, step and row) and
     * takes its rows */
    ac_status st = sample_inputs(r->tokens, p->seed, (uint64_t)step, p->batch, p->seq_len, r->batch_tokens);
    if (st != AC_OK)
        return st;
    const int32_t *window = r->batch_tokens + (size_t)r->row0 * p->seq_len;
    double unused;
    ac_step_inputs tin = {.tokens = window, .targets = window, .kd_tau = 0};
    st = ac_train_step_loss(r->teacher, &tin, &unused);
    if (st != AC_OK)
        return st;
    /* the teacher's logits where its step left them, read before it runs again (as the
     * training loop does; a copy was 32 MB a step for the parent at 8 x 256) */
    ac_step_inputs in = {.tokens = window, .teacher_logits = ac_train_step_logits(r->teacher), .kd_tau = p->kd_tau,
                         .masks = masks, .grads = r->grads, .mask_grads = mg,
                         .loss_positions = (int64_t)p->batch * p->seq_len};
    if (r->grads)
        ac_model_zero(r->grads);
    st = ac_train_step_run(r->student, &in, kd);
    return st == AC_OK ? sum_over_ranks(r, kd) : st;
}

/* The budget loss of step result `out` (its targets and expected cost) and its gradient
 * in r->dprobs_budget; out->lambda the weight it puts on each target's excess.
 *
 * DUAL is projected dual ascent on an inequality constraint per target rather than
 * Sheared-LLaMA's equality Lagrangian lambda1 r + lambda2 r^2: a contract has several
 * targets of which usually one binds, and an equality term would pull the others up to
 * their targets too; with lambda >= 0 the multiplier of a target left under decays to
 * 0 while the binding one's settles where its price balances the KD.
 *
 * The weight on r_k is max(0, lambda_k + rho r_k) (the augmented Lagrangian's, rho the
 * damping): pure dual ascent (rho = 0) only integrates the excess, so while the routers
 * take steps of bounded size towards the target lambda keeps growing past the price
 * that balances the KD and then pushes the cost far under the target; the term in r
 * answers at once, and lambda only has to learn the remaining offset. */
static void budget_gradient(search_run *r, step_result *out)
{
    const ac_search_params *p = r->p;
    double excess[AC_BUDGET_TARGETS];
    ac_budget_excess(&out->targets, &out->expected, excess);
    if (p->budget_mode == AC_BUDGET_DUAL) {
        for (int k = 0; k < AC_BUDGET_TARGETS; k++)
            out->lambda[k] = fmax(0.0, r->lambda[k] + p->dual_damping * excess[k]);
        out->budget = ac_budget_lagrangian(&out->targets, out->lambda, &out->expected, r->d_lat, r->d_mem, r->d_thr,
                                           r->n_logits, r->dprobs_budget);
        return;
    }
    out->budget = ac_budget_loss(&out->targets, &p->budget, &out->expected, r->d_lat, r->d_mem, r->d_thr, r->n_logits,
                                 r->dprobs_budget);
    for (int k = 0; k < AC_BUDGET_TARGETS; k++) /* the hinge's slope */
        out->lambda[k] = excess[k] > 0 ? p->budget.lambda1 + 2.0 * p->budget.lambda2 * excess[k] : 0.0;
}

static ac_status router_step(search_run *r, int step, step_result *out)
{
    const ac_search_params *p = r->p;
    int n = r->n_logits;
    out->temperature = ac_search_temperature(p, step, r->steps);
    ac_routers_probs(r->routers, out->temperature, p->sampling, p->seed * AC_RNG_GAMMA + (uint64_t)step,
                     r->probs);
    const ac_masks *masks = ac_routers_masks(r->routers, r->probs);
    out->kd = 0;
    ac_mask_grads *mg = ac_routers_mask_grads(r->routers); /* zeroed */
    ac_status st = p->kd_weight > 0 ? kd_gradient(r, step, masks, mg, &out->kd) : AC_OK;
    if (st != AC_OK)
        return st;
    ac_routers_backward(r->routers, r->probs, NULL, out->temperature, r->dprobs, r->dl_kd);

    st = ac_cost_expected(r->cost, r->probs, &out->expected, r->d_lat, r->d_mem, r->d_thr);
    if (st != AC_OK)
        return st;
    double frac = p->target_warmup > 0 ? (double)step / ((double)p->target_warmup * r->steps) : 1.0;
    out->targets = warmed_targets(&r->planned,
                                  p->warmup_from == AC_WARMUP_FROM_PARENT ? &r->parent_cost : &r->initial_cost, frac);
    budget_gradient(r, out);
    /* the budget's gradient alone, with the mask gradients zeroed again */
    (void)ac_routers_mask_grads(r->routers);
    ac_routers_backward(r->routers, r->probs, r->dprobs_budget, out->temperature, r->dprobs, r->dl_budget);
    for (int i = 0; i < n; i++)
        r->grad[i] = (float)((double)p->kd_weight * r->dl_kd[i] + r->dl_budget[i]);
    out->lr = ac_search_router_lr(p, out->temperature);
    ac_search_optim_step(p->router_optim, n, ac_routers_logits(r->routers), r->grad, r->m, r->v, out->lr, step + 1);
    if (p->budget_mode == AC_BUDGET_DUAL) /* the multipliers' ascent on this step's excess */
        ac_budget_dual_step(&out->targets, &out->expected, p->dual_lr, r->lambda);
    /* the weights learn from the KD alone (the budget loss does not reach them) */
    if (r->opt && p->kd_weight > 0)
        return ac_adamw_step(r->opt, r->model, r->grads, NULL);
    return AC_OK;
}

/* ---- diagnostics ---- */

void ac_search_axis_label(const ac_cost_axis *a, char *buf, size_t size)
{
    if (a->layer < 0)
        snprintf(buf, size, "%s", ac_axis_kind_name(a->kind));
    else
        snprintf(buf, size, "L%d.%s", a->layer, ac_axis_kind_name(a->kind));
}

static ac_status open_csv(search_run *r, int resumed_step)
{
    char path[AC_PATH_MAX];
    ac_status st = path_in(r, "search.csv", path, sizeof path);
    if (st != AC_OK)
        return st;
    /* a resumed run keeps the rows of the steps it does not redo */
    char *kept = NULL;
    size_t kept_len = 0;
    FILE *old = resumed_step > 0 ? fopen(path, "r") : NULL;
    if (old) {
        char line[65536];
        FILE *mem = open_memstream(&kept, &kept_len);
        for (int row = 0; mem && fgets(line, sizeof line, old) && row <= resumed_step; row++)
            fputs(line, mem);
        if (mem)
            fclose(mem);
        fclose(old);
    }
    r->csv = fopen(path, "w");
    if (!r->csv) {
        free(kept);
        return ac_fail(AC_ERR_IO, "search: cannot write %s", path);
    }
    if (kept && kept_len) {
        fwrite(kept, 1, kept_len, r->csv);
    } else {
        fprintf(r->csv, "step,tokens,temperature,kd,budget,latency_ms,latency_target,memory_mib,memory_target,"
                        "throughput,throughput_target");
        char label[64];
        for (int a = 0; a < r->n_axes; a++) {
            ac_search_axis_label(ac_cost_model_axis(r->cost, a), label, sizeof label);
            fprintf(r->csv, ",maxp:%s", label);
        }
        for (int a = 0; a < r->n_axes; a++) {
            ac_search_axis_label(ac_cost_model_axis(r->cost, a), label, sizeof label);
            fprintf(r->csv, ",ratio:%s", label);
        }
        fprintf(r->csv, ",lr,ratio:all,lambda:latency,lambda:memory,lambda:throughput");
        fputc('\n', r->csv);
    }
    free(kept);
    return AC_OK;
}

static void write_row(search_run *r, int step, int64_t tokens, const step_result *s)
{
    const double mib = 1024.0 * 1024.0;
    fprintf(r->csv, "%d,%lld,%.5g,%.6g,%.6g,%.5g,%.5g,%.5g,%.5g,%.5g,%.5g", step, (long long)tokens,
            (double)s->temperature, s->kd, s->budget, s->expected.latency_ms, s->targets.latency_ms,
            s->expected.memory_bytes / mib, s->targets.memory_bytes / mib, s->expected.throughput_tok_s,
            s->targets.throughput_tok_s);
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(r->cost, a);
        double best = 0;
        for (int i = 0; i < ax->count; i++)
            best = fmax(best, r->probs[ax->offset + i]);
        fprintf(r->csv, ",%.4f", best);
    }
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(r->cost, a);
        double kd = grad_norm_axis(r->dl_kd, ax), budget = grad_norm_axis(r->dl_budget, ax);
        fprintf(r->csv, ",%.4g", budget > 0 ? (double)r->p->kd_weight * kd / budget : NAN);
    }
    double kd = grad_norm(r->dl_kd, r->n_logits), budget = grad_norm(r->dl_budget, r->n_logits);
    fprintf(r->csv, ",%.5g,%.4g", (double)s->lr, budget > 0 ? (double)r->p->kd_weight * kd / budget : NAN);
    for (int k = 0; k < AC_BUDGET_TARGETS; k++)
        fprintf(r->csv, ",%.5g", s->lambda[k]);
    fputc('\n', r->csv);
}

/* ---- the loop ---- */

static ac_status weights_dir(const search_run *r, char *buf, size_t size)
{
    return path_in(r, "weights_checkpoint", buf, size);
}

/* The trained weights and their optimizer at step `done`, after the routers' state of the
 * same step (so that on resume a router state matches the weights, ac_search_state_load). */
static ac_status save_weights(search_run *r, int done, int64_t tokens)
{
    char dir[AC_PATH_MAX];
    ac_status st = weights_dir(r, dir, sizeof dir);
    ac_train_state ts = {.step = done, .tokens = tokens};
    snprintf(ts.run, sizeof ts.run, "%s", r->fingerprint);
    return st == AC_OK ? ac_checkpoint_save(dir, r->model, r->opt, &ts) : st;
}

/* The trained weights' checkpoint into r->model and r->opt; *step = its step, or 0 (and
 * nothing loaded) when there is none. */
static ac_status load_weights(search_run *r, int *step)
{
    char dir[AC_PATH_MAX], found[AC_PATH_MAX];
    *step = 0;
    ac_status st = weights_dir(r, dir, sizeof dir);
    if (st != AC_OK)
        return st;
    if (ac_checkpoint_find(dir, found, sizeof found) != AC_OK) {
        ac_clear_error();
        return AC_OK;
    }
    ac_train_state ts;
    ac_model *saved = NULL;
    st = ac_checkpoint_load(found, &saved, &ts);
    size_t n_saved = 0, n_model = 0;
    if (st == AC_OK)
        ac_model_arena(saved, &n_saved);
    ac_model_arena(r->model, &n_model);
    char run[sizeof ts.run];
    snprintf(run, sizeof run, "%s", r->fingerprint);
    if (st == AC_OK && (n_saved != n_model || strcmp(ts.run, run)))
        st = ac_fail(AC_ERR_INVALID, "search: %s holds weights of another search (%s); use another --out", found,
                     ts.run);
    if (st == AC_OK) {
        ac_model_copy_weights(r->model, saved); /* from the host, wherever r->model is */
        st = ac_checkpoint_load_optimizer(found, r->model, r->opt);
    }
    if (st == AC_OK) /* the weights step once per router step when the KD is on */
        ac_adamw_set_steps_done(r->opt, r->p->kd_weight > 0 ? ts.step : 0);
    ac_model_free(saved);
    if (st == AC_OK)
        *step = ts.step;
    return st;
}

static ac_status run_steps(search_run *r, int start, ac_search_report *report)
{
    const ac_search_params *p = r->p;
    int64_t per_step = (int64_t)p->batch * p->seq_len;
    ac_progress *progress = NULL;
    int writer = ac_comm_rank(p->comm) == 0;
    ac_status st = ac_progress_init(&progress, "search", (double)(r->calib_tokens + per_step * r->steps), "tokens",
                                    writer ? p->progress : AC_PROGRESS_OFF, stderr);
    if (st != AC_OK)
        return st;
    step_result s;
    memset(&s, 0, sizeof s);
    for (int step = start; st == AC_OK && step < r->steps; step++) {
        st = router_step(r, step, &s);
        if (st != AC_OK)
            break;
        int64_t tokens = r->calib_tokens + per_step * (step + 1);
        report->last_kd = s.kd;
        report->last_budget = s.budget;
        if (!writer)
            continue;
        write_row(r, step, tokens, &s);
        ac_progress_metric(progress, "kd", s.kd);
        ac_progress_metric(progress, "budget", s.budget);
        ac_progress_metric(progress, "latency_ms", s.expected.latency_ms);
        ac_progress_metric(progress, "memory_mib", s.expected.memory_bytes / (1024.0 * 1024.0));
        ac_progress_update(progress, (double)tokens);
        int done = step + 1;
        if (done == r->steps || (p->checkpoint_every > 0 && done % p->checkpoint_every == 0)) {
            fflush(r->csv);
            ac_search_state state = {.step = done, .tokens = tokens, .last_kd = s.kd, .last_budget = s.budget};
            memcpy(state.lambda, r->lambda, sizeof state.lambda);
            memcpy(state.fingerprint, r->fingerprint, sizeof state.fingerprint);
            st = ac_search_state_save(p->out_dir, &state, ac_routers_logits(r->routers), r->m, r->v, r->n_logits);
            if (st == AC_OK && r->opt)
                st = save_weights(r, done, tokens);
        }
    }
    ac_progress_finish(progress);
    ac_progress_free(progress);
    return st;
}

static ac_status resume_or_start(search_run *r, int *start, ac_search_report *report)
{
    ac_search_state state;
    int found = 0, weights_step = -1;
    *start = 0;
    ac_status st = r->opt ? load_weights(r, &weights_step) : AC_OK;
    /* trained weights not saved yet: whatever router state there is, start over */
    if (st != AC_OK || weights_step == 0)
        return st;
    st = ac_search_state_load(r->p->out_dir, weights_step, &state, ac_routers_logits(r->routers), r->m, r->v,
                              r->n_logits, &found);
    if (st != AC_OK || !found)
        return st;
    if (strcmp(state.fingerprint, r->fingerprint))
        return ac_fail(AC_ERR_INVALID, "search: %s holds a search with other settings (%s); use another --out or the "
                                       "same settings (%s)", r->p->out_dir, state.fingerprint, r->fingerprint);
    *start = state.step;
    memcpy(r->lambda, state.lambda, sizeof r->lambda);
    report->last_kd = state.last_kd;
    report->last_budget = state.last_budget;
    return AC_OK;
}

ac_status ac_search_run(const ac_model *parent, const ac_contract *contract, const ac_cost_tables *tables,
                        const ac_search_params *params, ac_search_report *report)
{
    memset(report, 0, sizeof *report);
    report->resumed_from = -1;
    ac_status st = check_params(params);
    if (st != AC_OK)
        return st;
    int writer = ac_comm_rank(params->comm) == 0;
    if (writer && mkdir(params->out_dir, 0777) != 0 && errno != EEXIST)
        return ac_fail(AC_ERR_IO, "search: cannot create %s", params->out_dir);
    search_run r;
    memset(&r, 0, sizeof r);
    r.p = params;
    r.contract = contract;
    st = setup(&r, parent, tables);
    if (st == AC_OK)
        st = ac_comm_check_same(params->comm, "search settings", r.fingerprint);
    int start = 0;
    char resumed[32];
    if (st == AC_OK)
        st = resume_or_start(&r, &start, report);
    snprintf(resumed, sizeof resumed, "step %d", start);
    /* every rank resumes from the state rank 0 saved (OUT must be shared) */
    if (st == AC_OK)
        st = ac_comm_check_same(params->comm, "the search states found in OUT", resumed);
    if (st == AC_OK && writer)
        st = open_csv(&r, start);
    if (st == AC_OK) {
        report->resumed_from = start > 0 ? start : -1;
        if (start > 0)
            ac_info("search: resumed at step %d of %d", start, r.steps);
        st = run_steps(&r, start, report);
    }
    ac_discrete_choice choice = {0};
    if (st == AC_OK) {
        if (r.csv)
            fclose(r.csv);
        r.csv = NULL;
        report->steps = r.steps;
        report->calib_tokens = r.calib_tokens;
        report->tokens = r.calib_tokens + (int64_t)params->batch * params->seq_len * r.steps;
        report->targets = r.targets;
        report->planned = r.planned;
        report->parent = r.parent_cost;
        /* the final distributions, without noise, at the last temperature */
        ac_routers_probs(r.routers, params->temp_end, AC_ROUTER_SOFTMAX, 0, r.probs);
        memcpy(report->multipliers, r.lambda, sizeof report->multipliers);
        st = ac_cost_expected(r.cost, r.probs, &report->last_expected, NULL, NULL, NULL);
    }
    if (st == AC_OK) {
        ac_discretize_inputs in = {r.cost, ac_model_arch(r.model), &r.imp, &r.planned, ac_routers_logits(r.routers),
                                   params->temp_end, params->fill, params->candidates};
        st = ac_search_discretize(&in, &choice, report);
    }
    if (st == AC_OK && writer)
        st = ac_search_write_outputs(params->out_dir, contract, r.cost, &choice, params->fill, report);
    if (st == AC_OK && writer && r.opt) {
        char dir[AC_PATH_MAX];
        st = path_in(&r, "weights", dir, sizeof dir);
        if (st == AC_OK)
            st = ac_model_save(r.model, dir, AC_DTYPE_F32);
    }
    /* the others return once the outputs are there */
    if (st == AC_OK)
        st = ac_comm_barrier(params->comm);
    ac_discrete_choice_free(&choice);
    free_run(&r);
    return st;
}
