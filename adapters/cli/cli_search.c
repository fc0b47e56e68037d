/* autocompress search: importance, routers trained on KD + the budget loss, the chosen
 * architecture (resumable). */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/log.h"
#include "autocompress/model.h"
#include "autocompress/search.h"

typedef struct {
    ac_search_params p;
    const char *model_dir, *contract_path, *tables_path;
} search_args;

static int usage(const char *message)
{
    fprintf(stderr, "autocompress search: %s\n", message);
    fprintf(stderr, "usage: autocompress search --model DIR --contract FILE --tables tables.json --data DIR --out DIR\n"
                    "options: --tokens N (default: the contract's budgets.search_tokens) --calib-seqs N --batch B\n"
                    "         --seq-len T --tau T --kd-weight W --lambda1 X --lambda2 X --lr X --temp-start T\n"
                    "         --temp-end T --gumbel --expert-masking output|scores --target-warmup F --seed S\n"
                    "         --checkpoint-every N --train-weights [--weights-lr X]\n"
                    "         --progress auto|bar|json|off\n");
    return 2;
}

static int parse_flag(int argc, char **argv, int *i, search_args *a, ac_status *st, int *missing)
{
    const char *v;
    long long n;
    double x;
#define INT_FLAG(name, lo, hi, dst)                               \
    if ((v = cli_flag_value(argc, argv, i, name, missing))) {     \
        if ((*st = cli_parse_int(name, v, lo, hi, &n)) == AC_OK)  \
            dst = n;                                              \
        return 1;                                                 \
    }
#define FLOAT_FLAG(name, dst)                                     \
    if ((v = cli_flag_value(argc, argv, i, name, missing))) {     \
        if ((*st = cli_parse_float(name, v, &x)) == AC_OK)        \
            dst = x;                                              \
        return 1;                                                 \
    }
    if ((v = cli_flag_value(argc, argv, i, "--model", missing))) { a->model_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--contract", missing))) { a->contract_path = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--tables", missing))) { a->tables_path = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--data", missing))) { a->p.data_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--out", missing))) { a->p.out_dir = v; return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--progress", missing))) { *st = ac_progress_mode_from_name(v, &a->p.progress); return 1; }
    if ((v = cli_flag_value(argc, argv, i, "--expert-masking", missing))) {
        if (!strcmp(v, "output") || !strcmp(v, "scores"))
            a->p.expert_masking = !strcmp(v, "scores") ? AC_EXPERT_SCORE_MASKING : AC_EXPERT_OUTPUT_MASKING;
        else
            *st = ac_fail(AC_ERR_INVALID, "--expert-masking: '%s' is neither 'output' nor 'scores'", v);
        return 1;
    }
    if (!strcmp(argv[*i], "--gumbel")) { a->p.sampling = AC_ROUTER_GUMBEL; return 1; }
    if (!strcmp(argv[*i], "--train-weights")) { a->p.train_weights = 1; return 1; }
    INT_FLAG("--tokens", 1, INT64_MAX, a->p.max_tokens)
    INT_FLAG("--calib-seqs", 1, 1 << 20, a->p.calib_seqs)
    INT_FLAG("--batch", 1, 65536, a->p.batch)
    INT_FLAG("--seq-len", 2, 1 << 20, a->p.seq_len)
    INT_FLAG("--seed", 0, INT64_MAX, a->p.seed)
    INT_FLAG("--checkpoint-every", 0, 100000000, a->p.checkpoint_every)
    FLOAT_FLAG("--tau", a->p.kd_tau)
    FLOAT_FLAG("--kd-weight", a->p.kd_weight)
    FLOAT_FLAG("--lambda1", a->p.budget.lambda1)
    FLOAT_FLAG("--lambda2", a->p.budget.lambda2)
    FLOAT_FLAG("--lr", a->p.lr)
    FLOAT_FLAG("--temp-start", a->p.temp_start)
    FLOAT_FLAG("--temp-end", a->p.temp_end)
    FLOAT_FLAG("--target-warmup", a->p.target_warmup)
    FLOAT_FLAG("--weights-lr", a->p.weights_optim.lr)
#undef INT_FLAG
#undef FLOAT_FLAG
    return 0;
}

static void print_costs(const char *what, const ac_cost_prediction *p)
{
    printf("  %-8s latency %.2f ms, throughput %.1f tok/s, memory %.2f MiB\n", what, p->latency_ms,
           p->throughput_tok_s, p->memory_bytes / (1024.0 * 1024.0));
}

static void print_report(const search_args *a, const ac_search_report *r)
{
    printf("search: %d router steps%s, %lld search tokens (%lld calibration) -> %s/arch.json\n", r->steps,
           r->resumed_from >= 0 ? " (resumed)" : "", (long long)r->tokens, (long long)r->calib_tokens, a->p.out_dir);
    printf("  targets ");
    if (r->targets.latency_ms > 0)
        printf(" latency <= %.2f ms", r->targets.latency_ms);
    if (r->targets.throughput_tok_s > 0)
        printf(" throughput >= %.1f tok/s", r->targets.throughput_tok_s);
    if (r->targets.memory_bytes > 0)
        printf(" memory <= %.2f MiB", r->targets.memory_bytes / (1024.0 * 1024.0));
    printf("\n");
    if (a->p.train_weights)
        printf("  trained weights (the reordered parent): %s/weights\n", a->p.out_dir);
    print_costs("parent", &r->parent);
    print_costs("chosen", &r->chosen);
    printf("  %s every target (cost model), %d undecided axes settled, %d repair steps, final KD %.4f, budget %.4f\n",
           r->meets ? "meets" : "MISSES", r->settled_axes, r->repair_steps, r->last_kd, r->last_budget);
    ac_arch_print(&r->arch, stdout);
}

int cli_search(int argc, char **argv)
{
    search_args a = {.p = ac_search_default_params()};
    for (int i = 1; i < argc; i++) {
        ac_status st = AC_OK;
        int missing = 0;
        if (!parse_flag(argc, argv, &i, &a, &st, &missing)) {
            char message[256];
            snprintf(message, sizeof message, missing ? "'%s' needs a value" : "unknown argument '%s'", argv[i]);
            return usage(message);
        }
        if (st != AC_OK)
            return usage(ac_error_message());
    }
    if (!a.model_dir || !a.contract_path || !a.tables_path || !a.p.data_dir || !a.p.out_dir)
        return usage("--model, --contract, --tables, --data and --out are required");
    ac_contract contract;
    ac_cost_tables *tables = NULL;
    ac_model *parent = NULL;
    ac_search_report report;
    memset(&report, 0, sizeof report);
    ac_status st = ac_contract_load(a.contract_path, &contract);
    if (st == AC_OK)
        st = ac_cost_tables_read(a.tables_path, &tables);
    if (st == AC_OK)
        st = ac_model_load(a.model_dir, &parent);
    if (st == AC_OK)
        st = ac_search_run(parent, &contract, tables, &a.p, &report);
    if (st == AC_OK)
        print_report(&a, &report);
    else
        fprintf(stderr, "autocompress search: %s\n", ac_error_message());
    ac_arch_free(&report.arch);
    ac_model_free(parent);
    ac_cost_tables_free(tables);
    return st == AC_OK ? (report.meets ? 0 : 1) : (st == AC_ERR_INVALID ? 2 : 1);
}
