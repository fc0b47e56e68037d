/* autocompress search: importance, routers trained on KD + the budget loss, the chosen
 * architecture (resumable). */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"
#include "cli_tables.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/inputs.h"
#include "autocompress/log.h"
#include "autocompress/model.h"
#include "autocompress/search.h"

typedef struct {
    ac_search_params p;
    ac_comm_params comm;
    const char *model_dir, *contract_path, *tables_path;
    int foreign_tables;
} search_args;

static ac_status parse_expert_masking(const char *value, void *dst)
{
    if (strcmp(value, "output") && strcmp(value, "scores"))
        return ac_fail(AC_ERR_INVALID, "--expert-masking: '%s' is neither 'output' nor 'scores'", value);
    *(ac_expert_masking *)dst = !strcmp(value, "scores") ? AC_EXPERT_SCORE_MASKING : AC_EXPERT_OUTPUT_MASKING;
    return AC_OK;
}

/* The index of `value` among `names` (n of them) into *dst, an enum; --option names the
 * option in the error. */
static ac_status parse_choice(const char *option, const char *value, const char *const *names, int n, int *dst)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(value, names[i])) {
            *dst = i;
            return AC_OK;
        }
    return ac_fail(AC_ERR_INVALID, "--%s: '%s' is not one of %s%s%s%s%s", option, value, names[0], n > 1 ? ", " : "",
                   n > 1 ? names[1] : "", n > 2 ? ", " : "", n > 2 ? names[2] : "");
}

/* The names below follow the enums' order. */
static ac_status parse_budget(const char *value, void *dst)
{
    const char *const names[] = {"dual", "hinge"};
    int v = 0;
    ac_status st = parse_choice("budget", value, names, 2, &v);
    if (st == AC_OK)
        *(ac_budget_mode *)dst = (ac_budget_mode)v;
    return st;
}

static ac_status parse_router_optim(const char *value, void *dst)
{
    const char *const names[] = {"shared-adam", "adamw", "sgd"};
    int v = 0;
    ac_status st = parse_choice("router-optim", value, names, 3, &v);
    if (st == AC_OK)
        *(ac_router_optim *)dst = (ac_router_optim)v;
    return st;
}

static ac_status parse_lr_schedule(const char *value, void *dst)
{
    const char *const names[] = {"temperature", "constant"};
    int v = 0;
    ac_status st = parse_choice("lr-schedule", value, names, 2, &v);
    if (st == AC_OK)
        *(ac_lr_schedule *)dst = (ac_lr_schedule)v;
    return st;
}

static ac_status parse_warmup_from(const char *value, void *dst)
{
    const char *const names[] = {"initial", "parent"};
    int v = 0;
    ac_status st = parse_choice("warmup-from", value, names, 2, &v);
    if (st == AC_OK)
        *(ac_warmup_from *)dst = (ac_warmup_from)v;
    return st;
}

static ac_status parse_mamba_removal(const char *value, void *dst)
{
    const char *const names[] = {"gate", "heads"};
    int v = 0;
    ac_status st = parse_choice("mamba-removal", value, names, 2, &v);
    if (st == AC_OK)
        *(ac_mamba_removal *)dst = (ac_mamba_removal)v;
    return st;
}

static ac_status parse_fill(const char *value, void *dst)
{
    const char *const names[] = {"off", "on"};
    return parse_choice("fill", value, names, 2, (int *)dst);
}

/* The option table; `a` holds the defaults the help text states. */
static int parse_args(int argc, char **argv, search_args *a)
{
    ac_search_params *p = &a->p;
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model_dir, "DIR", "the parent checkpoint"),
        CLI_REQUIRED("contract", &a->contract_path, "FILE", "the deployment contract"),
        CLI_REQUIRED("tables", &a->tables_path, "FILE", "cost tables from autocompress profile"),
        CLI_FOREIGN_TABLES(&a->foreign_tables),
        CLI_REQUIRED("data", &p->data_dir, "DIR", "token shards (train.bin)"),
        CLI_REQUIRED("out", &p->out_dir, "DIR", "search artifacts; a rerun resumes here"),
        CLI_NUMBER("tokens", CLI_I64, &p->max_tokens, "N", "search tokens (default: the contract's budgets.search_tokens)", 1, INT64_MAX),
        CLI_NUMBER("calib-seqs", CLI_INT, &p->calib_seqs, "N", "calibration sequences for the importance", 1, 1 << 20),
        CLI_NUMBER("batch", CLI_INT, &p->batch, "B", "sequences per router step", 1, 65536),
        CLI_NUMBER("seq-len", CLI_INT, &p->seq_len, "T", "tokens per sequence", 2, 1 << 20),
        CLI_REAL("tau", CLI_FLOAT, &p->kd_tau, "T", "KD temperature"),
        CLI_REAL("kd-weight", CLI_FLOAT, &p->kd_weight, "W", "weight of the KD loss (0: the budget alone)"),
        CLI_CUSTOM("budget", &p->budget_mode, "dual|hinge", "budget loss: multipliers learned by dual ascent, or the "
                   "fixed hinge lambda1 r + lambda2 r^2 (default: dual)", parse_budget),
        CLI_REAL("dual-lr", CLI_DOUBLE, &p->dual_lr, "X", "rate of the multipliers' dual ascent (--budget dual)"),
        CLI_REAL("dual-damping", CLI_DOUBLE, &p->dual_damping, "X", "rho: each target's weight is max(0, lambda + rho "
                 "r) (--budget dual; 0: lambda alone)"),
        CLI_REAL("lambda1", CLI_DOUBLE, &p->budget.lambda1, "X", "linear weight of the hinge (--budget hinge)"),
        CLI_REAL("lambda2", CLI_DOUBLE, &p->budget.lambda2, "X", "quadratic weight of the hinge (--budget hinge)"),
        CLI_CUSTOM("router-optim", &p->router_optim, "shared-adam|adamw|sgd", "router optimiser: Adam with one second "
                   "moment for all logits, AdamW per logit, or SGD (default: shared-adam)", parse_router_optim),
        CLI_REAL("lr", CLI_FLOAT, &p->lr, "X", "router learning rate (at temp-start with --lr-schedule temperature)"),
        CLI_CUSTOM("lr-schedule", &p->lr_schedule, "temperature|constant", "router lr in proportion to the "
                   "temperature, or constant (default: temperature)", parse_lr_schedule),
        CLI_REAL("temp-start", CLI_FLOAT, &p->temp_start, "T", "router temperature at the first step"),
        CLI_REAL("temp-end", CLI_FLOAT, &p->temp_end, "T", "router temperature at the last step (geometric)"),
        CLI_SWITCH("gumbel", &p->sampling, AC_ROUTER_GUMBEL, "sample the masks with Gumbel noise"),
        CLI_CUSTOM("expert-masking", &p->expert_masking, "output|scores", "how a soft expert mask acts", parse_expert_masking),
        CLI_CUSTOM("mamba-removal", &p->mamba_removal, "gate|heads",
                   "removing a Mamba layer: a keep gate (default) or head value 0", parse_mamba_removal),
        CLI_REAL("target-warmup", CLI_FLOAT, &p->target_warmup, "F", "fraction of steps over which targets tighten to the planned ones (0: none)"),
        CLI_CUSTOM("warmup-from", &p->warmup_from, "initial|parent", "where the warm-up starts: the routers' initial "
                   "expected cost or the parent's cost (default: initial)", parse_warmup_from),
        CLI_NUMBER("seed", CLI_U64, &p->seed, "S", "seed of batches and sampling", 0, INT64_MAX),
        CLI_NUMBER("checkpoint-every", CLI_INT, &p->checkpoint_every, "N", "router steps between resumable states (0: at the end)", 0, 100000000),
        CLI_SWITCH("train-weights", &p->train_weights, 1, "the weights learn from the KD too (saved to OUT/weights)"),
        CLI_REAL("weights-lr", CLI_FLOAT, &p->weights_optim.lr, "X", "learning rate of the weights with --train-weights"),
        CLI_CUSTOM("fill", &p->fill, "on|off", "after the repair, step axes up while every planned target holds (default: on)", parse_fill),
        CLI_NUMBER("candidates", CLI_INT, &p->candidates, "K", "distinct architectures meeting the planned targets listed in search.json for re-ranking (default 4)", 0, 1000),
        CLI_PROGRESS_OPT(&p->progress),
        CLI_TEXT("device", &p->device, "cpu|cuda", "where the masked KD steps run (default: cpu)"),
        CLI_COMM_OPTS(&a->comm),
    };
    const cli_spec spec = {"search", NULL,
                           "Trains routers over the contract's search space on KD + the budget loss of the cost\n"
                           "model, then writes the chosen architecture to OUT/arch.json and OUT/search.json.\n"
                           "Under mpirun every rank takes its share of each KD batch; rank 0 writes OUT.\n"
                           "The targets are judged on the chosen architecture's cost as the cost model\n"
                           "predicts it from the tables (measure or compress measures it).\n"
                           CLI_EXIT_TARGETS_TEXT("the choice is predicted to meet every target"),
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

static void print_costs(const char *what, const ac_cost_prediction *p)
{
    printf("  %-8s latency %.2f ms, throughput %.1f tok/s, memory %.2f MiB\n", what, p->latency_ms,
           p->throughput_tok_s, p->memory_bytes / (1024.0 * 1024.0));
}

static void print_targets(const char *label, const ac_budget_targets *t)
{
    printf("  %-8s", label);
    if (t->latency_ms > 0)
        printf(" latency <= %.2f ms", t->latency_ms);
    if (t->throughput_tok_s > 0)
        printf(" throughput >= %.1f tok/s", t->throughput_tok_s);
    if (t->memory_bytes > 0)
        printf(" memory <= %.2f MiB", t->memory_bytes / (1024.0 * 1024.0));
    printf("\n");
}

static void print_report(const search_args *a, const ac_search_report *r)
{
    printf("search: %d router steps%s, %lld search tokens (%lld calibration) -> %s/arch.json\n", r->steps,
           r->resumed_from >= 0 ? " (resumed)" : "", (long long)r->tokens, (long long)r->calib_tokens, a->p.out_dir);
    print_targets("targets", &r->targets);
    print_targets("planned", &r->planned);
    if (a->p.train_weights)
        printf("  trained weights (the reordered parent): %s/weights\n", a->p.out_dir);
    print_costs("parent", &r->parent);
    print_costs("chosen", &r->chosen);
    printf("  %s every target (cost model), %d undecided axes settled, %d repair steps, %d fill steps, final KD %.4f, "
           "budget %.4f\n", r->meets ? "meets" : "MISSES", r->settled_axes, r->repair_steps, r->fill_steps, r->last_kd,
           r->last_budget);
    if (r->binding[0])
        printf("  %s uses %.1f%% of its planned target (%.1f%% before the fill)\n", r->binding, 100 * r->binding_use,
               100 * r->unfilled_use);
    for (int i = 0; i < r->n_candidates; i++) {
        const ac_search_candidate *c = &r->candidates[i];
        printf("  candidate %d%s: log p %.3g, %d layers, hidden %d, latency %.2f ms, memory %.2f MiB\n", i,
               c->chosen ? " (chosen)" : "", c->log_prob, c->arch.n_layers, c->arch.hidden, c->predicted.latency_ms,
               c->predicted.memory_bytes / (1024.0 * 1024.0));
    }
    ac_arch_print(&r->arch, stdout);
}

/* Before the search: the contract, the parent's config and weights, train.bin within the
 * parent's vocabulary, the tables against both, and an output directory to write. */
static ac_status check_inputs(const search_args *a)
{
    ac_arch parent = {0};
    ac_contract contract;
    ac_status st = ac_input_contract("--contract", a->contract_path, &contract);
    if (st == AC_OK)
        st = ac_input_model("--model", a->model_dir, 1, &parent);
    if (st == AC_OK)
        st = ac_input_shards("--data", a->p.data_dir, AC_SHARD_TRAIN, parent.vocab);
    if (st == AC_OK)
        st = ac_input_tables("--tables", a->tables_path, &parent, &contract, a->foreign_tables);
    if (st == AC_OK)
        st = ac_input_out_dir("--out", a->p.out_dir);
    ac_arch_free(&parent);
    return st;
}

int cli_search(int argc, char **argv)
{
    search_args a = {.p = ac_search_default_params(), .comm = ac_comm_default_params()};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    ac_contract contract;
    ac_cost_tables *tables = NULL;
    ac_model *parent = NULL;
    ac_search_report report;
    memset(&report, 0, sizeof report);
    ac_status st = cli_comm_init(&a.comm, &a.p.comm);
    if (st == AC_OK)
        st = check_inputs(&a);
    if (st == AC_OK)
        st = ac_contract_load(a.contract_path, &contract);
    if (st == AC_OK)
        st = cli_read_tables("search", a.tables_path, &contract, a.foreign_tables, &tables);
    if (st == AC_OK)
        st = ac_model_load(a.model_dir, &parent);
    if (st == AC_OK)
        st = ac_search_run(parent, &contract, tables, &a.p, &report);
    if (st == AC_OK && ac_comm_rank(a.p.comm) == 0)
        print_report(&a, &report);
    cli_comm_finish("search", a.p.comm, st);
    ac_search_report_free(&report);
    ac_model_free(parent);
    ac_cost_tables_free(tables);
    return st == AC_OK ? cli_exit_verdict(report.meets) : cli_exit_status(st);
}
