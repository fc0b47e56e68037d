/* The search step's cost against a plain training step on the same model, same batch,
 * measured in one run, alternating:
 *   plain:   forward + backward to the weights (what `train` does, without AdamW)
 *   masked:  the routers' masks, forward + backward to the masks, the routers' backward,
 *            the cost model's expected cost and the budget loss (the search's student pass)
 *   teacher: the unmasked parent's forward alone (the KD target; no gradients kept)
 *   bench_search --model DIR --contract F --tables F [--batch B] [--seq-len T] [--steps N]
 * prints one JSON line; masked / plain is what the masks and routers add. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/model.h"
#include "autocompress/host.h"
#include "autocompress/search.h"
#include "autocompress/train.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    ac_model *model, *grads;
    ac_train_step *step, *teacher;
    ac_cost_model *cost;
    ac_routers *routers;
    int32_t *tokens, *targets;
    float *teacher_logits;
    double *probs, *dprobs, *dlogits, *d_lat, *d_mem, *d_thr, *d_budget;
    int B, T;
} bench;

static double plain_step(bench *b)
{
    double loss, t0 = now_s();
    ac_step_inputs in = {.tokens = b->tokens, .targets = b->targets, .grads = b->grads};
    ac_train_step_run(b->step, &in, &loss);
    return now_s() - t0;
}

static double teacher_step(bench *b)
{
    double loss, t0 = now_s();
    ac_step_inputs in = {.tokens = b->tokens, .targets = b->targets};
    ac_train_step_loss(b->teacher, &in, &loss);
    return now_s() - t0;
}

static double masked_step(bench *b)
{
    double loss, t0 = now_s();
    ac_routers_probs(b->routers, 0.5f, AC_ROUTER_SOFTMAX, 0, b->probs);
    const ac_masks *masks = ac_routers_masks(b->routers, b->probs);
    ac_mask_grads *mg = ac_routers_mask_grads(b->routers);
    ac_step_inputs in = {.tokens = b->tokens, .teacher_logits = b->teacher_logits, .kd_tau = 1.0f, .masks = masks,
                         .mask_grads = mg};
    ac_train_step_run(b->step, &in, &loss);
    ac_cost_prediction e;
    ac_cost_expected(b->cost, b->probs, &e, b->d_lat, b->d_mem, b->d_thr);
    ac_budget_targets t = {e.latency_ms * 0.5, 0, e.memory_bytes * 0.5};
    ac_budget_weights w = {1, 1};
    ac_budget_loss(&t, &w, &e, b->d_lat, b->d_mem, b->d_thr, ac_routers_count(b->routers), b->d_budget);
    ac_routers_backward(b->routers, b->probs, b->d_budget, 0.5f, b->dprobs, b->dlogits);
    return now_s() - t0;
}

static int median_sort(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, median_sort);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    const char *model = NULL, *contract_path = NULL, *tables_path = NULL;
    bench b = {.B = 8, .T = 256};
    int steps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--contract")) contract_path = argv[i + 1];
        else if (!strcmp(argv[i], "--tables")) tables_path = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) b.B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq-len")) b.T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_search: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || !contract_path || !tables_path || b.B < 1 || b.T < 1 || steps < 1 || steps > 64) {
        fprintf(stderr, "usage: bench_search --model DIR --contract F --tables F [--batch B] [--seq-len T] [--steps N]\n");
        return 2;
    }
    ac_contract contract;
    ac_cost_tables *tables = NULL;
    ac_status st = ac_contract_load(contract_path, &contract);
    if (st == AC_OK)
        st = ac_cost_tables_read(tables_path, &tables);
    if (st == AC_OK)
        st = ac_model_load(model, &b.model);
    if (st == AC_OK)
        st = ac_model_create(ac_model_arch(b.model), &b.grads);
    if (st == AC_OK)
        st = ac_train_step_create(b.model, b.B, b.T, &b.step);
    if (st == AC_OK)
        st = ac_train_step_create(b.model, b.B, b.T, &b.teacher);
    if (st == AC_OK)
        st = ac_cost_model_create(tables, ac_model_arch(b.model), &contract, &b.cost);
    if (st == AC_OK)
        st = ac_routers_create(b.cost, ac_model_arch(b.model), &b.routers);
    if (st != AC_OK) {
        fprintf(stderr, "bench_search: %s\n", ac_error_message());
        return 1;
    }
    int V = ac_model_arch(b.model)->vocab, n = ac_routers_count(b.routers);
    size_t rows = (size_t)b.B * b.T;
    b.tokens = malloc(rows * sizeof *b.tokens);
    b.targets = malloc(rows * sizeof *b.targets);
    for (size_t i = 0; i < rows; i++) {
        b.tokens[i] = (int32_t)((i * 7919) % (size_t)V);
        b.targets[i] = (int32_t)((i * 104729 + 1) % (size_t)V);
    }
    double **d[] = {&b.probs, &b.dprobs, &b.dlogits, &b.d_lat, &b.d_mem, &b.d_thr, &b.d_budget};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        *d[i] = calloc((size_t)n, sizeof(double));
    teacher_step(&b);
    b.teacher_logits = malloc(rows * (size_t)V * sizeof(float));
    memcpy(b.teacher_logits, ac_train_step_logits(b.teacher), rows * (size_t)V * sizeof(float));
    plain_step(&b);
    masked_step(&b); /* warm-up of each */
    double plain[64], masked[64], teacher[64];
    for (int s = 0; s < steps; s++) {
        plain[s] = plain_step(&b);
        masked[s] = masked_step(&b);
        teacher[s] = teacher_step(&b);
    }
    double p = median(plain, steps), m = median(masked, steps), t = median(teacher, steps);
    printf("{\"batch\": %d, \"seq_len\": %d, \"steps\": %d, \"plain_tok_s\": %.1f, \"masked_tok_s\": %.1f, "
           "\"teacher_tok_s\": %.1f, \"masked_over_plain\": %.3f, \"search_step_over_plain\": %.3f}\n",
           b.B, b.T, steps, (double)rows / p, (double)rows / m, (double)rows / t, m / p, (m + t) / p);
    return 0;
}
