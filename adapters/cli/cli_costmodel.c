/* autocompress costmodel validate | predict: the cost model against end-to-end
 * measurement of held-out architectures, or its prediction for one architecture. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"
#include "cli_tables.h"

#include <stdio.h>
#include <stdlib.h>

#include "autocompress/clock.h"
#include "autocompress/config_json.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/inputs.h"
#include "autocompress/profile.h"
#include "util/path.h"

/* What both subcommands read: the parent, its contract and its cost tables. */
typedef struct {
    const char *model_dir, *contract_path, *tables_path;
    int foreign_tables;
    ac_contract contract;
    ac_cost_tables *tables;
} costmodel_inputs;

#define COSTMODEL_INPUT_OPTS(in)                                                       \
    CLI_REQUIRED("model", &(in)->model_dir, "DIR", "the parent checkpoint"),           \
    CLI_REQUIRED("contract", &(in)->contract_path, "FILE", "the deployment contract"), \
    CLI_REQUIRED("tables", &(in)->tables_path, "FILE", "cost tables from autocompress profile"), \
    CLI_FOREIGN_TABLES(&(in)->foreign_tables)

enum { MAX_GIVEN_ARCHS = 64 };

/* --arch of validate, which may be given more than once. */
typedef struct {
    const char *paths[MAX_GIVEN_ARCHS];
    int n;
} given_archs;

typedef struct {
    costmodel_inputs in;
    const char *plot, *samples;
    given_archs given;
    ac_validate_params p;
} validate_args;

static ac_status add_arch(const char *value, void *dst)
{
    given_archs *g = dst;
    if (g->n == MAX_GIVEN_ARCHS)
        return ac_fail(AC_ERR_INVALID, "--arch: at most %d architectures", MAX_GIVEN_ARCHS);
    g->paths[g->n++] = value;
    return AC_OK;
}

typedef struct {
    costmodel_inputs in;
    const char *arch;
} predict_args;

static int parse_validate_args(int argc, char **argv, validate_args *a)
{
    ac_validate_params *p = &a->p;
    const cli_opt opts[] = {
        COSTMODEL_INPUT_OPTS(&a->in),
        CLI_NUMBER("n", CLI_INT, &p->n, "N", "held-out architectures drawn from the space", 0, 100000),
        CLI_CUSTOM("arch", &a->given, "FILE",
                   "a held-out architecture to measure too, e.g. a search's pick (config.json or arch.json; "
                   "repeatable; scored apart as well)", add_arch),
        CLI_NUMBER("repeats", CLI_INT, &p->repeats, "R", "sweeps: each architecture measured once per sweep", 1, 64),
        CLI_NUMBER("requests", CLI_INT, &p->requests, "K", "timed requests per measurement (0: as many as fit in 0.3 s)",
                   0, AC_MAX_REQUESTS),
        CLI_NUMBER("seed", CLI_U64, &p->seed, "S", "seed of the architectures' draw", 0, INT64_MAX),
        CLI_TEXT("plot", &a->plot, "OUT.png", "predicted against measured, plotted with gnuplot"),
        CLI_TEXT("samples", &a->samples, "OUT.tsv", "every timed request as tab-separated values"),
        CLI_SWITCH("no-reference", &p->no_reference, 1, "no reference requests: raw times only"),
        CLI_PROGRESS_OPT(&p->progress),
    };
    const cli_spec spec = {"costmodel validate", NULL,
                           "Draws N architectures from the contract's search space (after every --arch,\n"
                           "such as a search's pick), slices each from the parent, measures it end to end\n"
                           "on this machine and prints its measured latency\n"
                           "(or throughput) and memory beside the cost model's prediction from the tables,\n"
                           "then the mean and max errors (MAPE).\n"
                           "It has no targets: the errors are printed, not judged.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

static int parse_predict_args(int argc, char **argv, predict_args *a)
{
    const cli_opt opts[] = {
        COSTMODEL_INPUT_OPTS(&a->in),
        CLI_REQUIRED("arch", &a->arch, "CONFIG.json", "the architecture to predict (a config.json)"),
    };
    const cli_spec spec = {"costmodel predict", NULL,
                           "Prints the cost model's prediction for one architecture under the contract's\n"
                           "workload: latency (prefill and decode), throughput and the memory breakdown.\n"
                           "Nothing is measured, and nothing is judged against the targets.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

/* Before anything is read for use: the parent's config, the contract and the tables
 * against both. 0, or the exit code after a failure it reported. */
static int check_inputs(const char *command, const costmodel_inputs *in)
{
    ac_arch parent = {0};
    ac_contract contract;
    ac_status st = ac_input_model("--model", in->model_dir, 0, &parent);
    if (st == AC_OK)
        st = ac_input_contract("--contract", in->contract_path, &contract);
    if (st == AC_OK)
        st = ac_input_tables("--tables", in->tables_path, &parent, &contract, in->foreign_tables);
    ac_arch_free(&parent);
    if (st == AC_OK)
        return 0;
    fprintf(stderr, "autocompress costmodel %s: %s\n", command, ac_error_message());
    return cli_exit_status(st);
}

/* Reads the contract and the tables: CLI_EXIT_DONE, or the exit code after a failure it
 * reported. */
static int load_inputs(const char *command, costmodel_inputs *in)
{
    ac_status st = ac_contract_load(in->contract_path, &in->contract);
    char name[48];
    snprintf(name, sizeof name, "costmodel %s", command);
    if (st == AC_OK)
        st = cli_read_tables(name, in->tables_path, &in->contract, in->foreign_tables, &in->tables);
    if (st != AC_OK)
        fprintf(stderr, "autocompress costmodel %s: %s\n", command, ac_error_message());
    return cli_exit_status(st);
}

static void print_prediction(const ac_cost_prediction *p)
{
    const double mib = 1048576.0;
    printf("latency %.3f ms (prefill %.3f, decode %.3f), throughput %.1f tok/s\n", p->latency_ms, p->prefill_ms,
           p->decode_ms, p->throughput_tok_s);
    printf("memory %.2f MiB = W %.2f + C %.2f + P %.2f + R %.2f + eps %.2f (conventional W+C+P %.2f)\n",
           p->memory_bytes / mib, p->weights_bytes / mib, p->kv_bytes / mib, p->state_bytes / mib,
           p->activation_bytes / mib, p->eps_bytes / mib, p->conventional_bytes / mib);
}

static int predict(const predict_args *a)
{
    const ac_contract *contract = &a->in.contract;
    char path[AC_PATH_MAX];
    ac_arch parent = {0}, arch = {0};
    ac_cost_model *m = NULL;
    ac_cost_prediction p;
    ac_status st = ac_path_join(path, sizeof path, a->in.model_dir, "config.json");
    if (st == AC_OK)
        st = ac_config_json_read(path, &parent);
    if (st == AC_OK)
        st = ac_config_json_read(a->arch, &arch);
    if (st == AC_OK)
        st = ac_cost_model_create(a->in.tables, &parent, contract, &m);
    if (st == AC_OK)
        st = ac_cost_predict_arch(m, &arch, &p);
    if (st == AC_OK)
        print_prediction(&p);
    else
        fprintf(stderr, "autocompress costmodel predict: %s\n", ac_error_message());
    ac_cost_model_free(m);
    ac_arch_free(&arch);
    ac_arch_free(&parent);
    return cli_exit_status(st);
}

/* Microseconds per expected-cost call with all three gradients, at uniform probabilities
 * (what the search's budget loss pays per step). */
static double expected_call_us(const costmodel_inputs *in)
{
    char path[AC_PATH_MAX];
    ac_arch parent = {0};
    ac_cost_model *m = NULL;
    double us = -1;
    if (ac_path_join(path, sizeof path, in->model_dir, "config.json") == AC_OK &&
        ac_config_json_read(path, &parent) == AC_OK &&
        ac_cost_model_create(in->tables, &parent, &in->contract, &m) == AC_OK) {
        int n = ac_cost_model_prob_count(m);
        double *p = malloc((size_t)n * sizeof *p), *g = malloc(3 * (size_t)n * sizeof *g);
        for (int i = 0; p && g && i < ac_cost_model_axis_count(m); i++) {
            const ac_cost_axis *x = ac_cost_model_axis(m, i);
            for (int j = 0; j < x->count; j++)
                p[x->offset + j] = 1.0 / x->count;
        }
        int calls = 200;
        ac_cost_prediction out;
        int64_t t0 = ac_monotonic_ns();
        for (int i = 0; p && g && i < calls; i++)
            ac_cost_expected(m, p, &out, g, g + n, g + 2 * n);
        if (p && g)
            us = (double)(ac_monotonic_ns() - t0) / 1e3 / calls;
        free(p);
        free(g);
    }
    ac_cost_model_free(m);
    ac_arch_free(&parent);
    return us;
}

static int validate(const validate_args *a)
{
    const ac_contract *contract = &a->in.contract;
    const ac_cost_tables *tables = a->in.tables;
    ac_validate_report r;
    ac_status st = ac_cost_validate(a->in.model_dir, contract, tables, &a->p, &r);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    const double mib = 1048576.0;
    int thr = (contract->targets.has_throughput || contract->ratios.has_throughput) &&
              !(contract->targets.has_latency || contract->ratios.has_latency);
    const char *unit = thr ? "tok/s" : "ms";
    printf("%-3s %-64s %8s %9s %9s %7s %9s %7s %9s %9s %7s %9s %7s\n", "#", "architecture", "params", "pred", "raw",
           "err%", "norm", "err%", "pred MiB", "meas MiB", "err%", "W+C+P", "err%");
    for (int i = 0; i < r.n; i++) {
        const ac_validate_entry *e = &r.entries[i];
        double pl = thr ? e->predicted.throughput_tok_s : e->predicted.latency_ms;
        double ml = thr ? e->throughput_tok_s : e->latency_ms;
        double nl = thr ? e->throughput_norm_tok_s : e->latency_norm_ms;
        printf("%-3d %-64.64s %7.2fM %9.2f %9.2f %+7.2f %9.2f %+7.2f %9.2f %9.2f %+7.2f %9.2f %+7.2f\n", i,
               e->description, e->params / 1e6, pl, ml, 100.0 * (pl - ml) / ml, nl, nl > 0 ? 100.0 * (pl - nl) / nl : 0.0,
               e->predicted.memory_bytes / mib, e->memory_bytes / mib,
               100.0 * (e->predicted.memory_bytes - e->memory_bytes) / e->memory_bytes,
               e->predicted.conventional_bytes / mib,
               100.0 * (e->predicted.conventional_bytes - e->memory_bytes) / e->memory_bytes);
    }
    printf("(%s; raw: as measured; norm: at the profiling's machine speed, each request scaled by the tables' "
           "reference over this validation's median reference, and by (that median over the parent's request timed "
           "right after it) ^ slope)\n", unit);
    printf("latency MAPE %.2f%% (max %.2f%%), throughput MAPE %.2f%% (max %.2f%%)\n", r.latency_mape, r.latency_max_ape,
           r.throughput_mape, r.throughput_max_ape);
    if (r.normalised)
        printf("speed-normalised: latency MAPE %.2f%% (max %.2f%%), throughput MAPE %.2f%% (max %.2f%%)\n",
               r.latency_norm_mape, r.latency_norm_max_ape, r.throughput_norm_mape, r.throughput_norm_max_ape);
    printf("memory MAPE %.2f%% (max %.2f%%); conventional W+C+P MAPE %.2f%%\n", r.memory_mape, r.memory_max_ape,
           r.conventional_memory_mape);
    if (r.n_given > 0)
        printf("given architectures (0-%d): latency MAPE %.2f%%, speed-normalised %.2f%% (max %.2f%%); memory MAPE "
               "%.2f%% (max %.2f%%)\n", r.n_given - 1, r.given_latency_mape, r.given_latency_norm_mape,
               r.given_latency_norm_max_ape, r.given_memory_mape, r.given_memory_max_ape);
    if (r.retried)
        printf("%d requests run again: another process had taken a core\n", r.retried);
    if (r.normalised)
        printf("machine noise: the parent's reference request varied by %.1f%% (1.4826 MAD / median) over the "
               "validation; times moved with it with slope %.2f (profiling: %.2f)\n", r.reference_noise_pct,
               r.reference_slope, ac_cost_tables_get_info(tables)->reference_slope);
    printf("%d architectures measured in %.1f s (%d sweeps of %.1f timed requests each); the expected cost with its "
           "gradients takes %.1f us a call\n", r.n,
           r.seconds, a->p.repeats, r.requests_per_arch / a->p.repeats, expected_call_us(&a->in));
    int rc = CLI_EXIT_DONE;
    if (a->plot) {
        st = ac_validate_plot(&r, contract, a->plot);
        if (st == AC_OK)
            printf("wrote %s\n", a->plot);
        else {
            fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
            rc = cli_exit_status(st);
        }
    }
    if (a->samples) {
        st = ac_validate_write_samples(&r, a->samples);
        if (st == AC_OK)
            printf("wrote %s\n", a->samples);
        else {
            fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
            rc = cli_exit_status(st);
        }
    }
    ac_validate_report_free(&r);
    return rc;
}

/* Before the measurements: the files written after them. */
static int check_outputs(const validate_args *a)
{
    ac_status st = a->plot ? ac_input_out_file("--plot", a->plot) : AC_OK;
    if (st == AC_OK && a->samples)
        st = ac_input_out_file("--samples", a->samples);
    if (st == AC_OK)
        return 0;
    fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
    return 1;
}

static int costmodel_validate(int argc, char **argv)
{
    validate_args a = {.p = ac_validate_default_params()};
    int rc = parse_validate_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    a.p.archs = a.given.paths;
    a.p.n_archs = a.given.n;
    rc = check_inputs("validate", &a.in);
    if (!rc)
        rc = check_outputs(&a);
    if (!rc)
        rc = load_inputs("validate", &a.in);
    if (!rc)
        rc = validate(&a);
    ac_cost_tables_free(a.in.tables);
    return rc;
}

static int costmodel_predict(int argc, char **argv)
{
    predict_args a = {0};
    int rc = parse_predict_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    rc = load_inputs("predict", &a.in);
    if (!rc)
        rc = predict(&a);
    ac_cost_tables_free(a.in.tables);
    return rc;
}

int cli_costmodel(int argc, char **argv)
{
    static const cli_command commands[] = {
        {"validate", costmodel_validate, "the cost model against end-to-end measurement of held-out architectures"},
        {"predict", costmodel_predict, "the cost model's prediction for one architecture (--arch CONFIG.json)"},
    };
    return cli_dispatch("costmodel", commands, CLI_COUNT(commands), argc, argv);
}
