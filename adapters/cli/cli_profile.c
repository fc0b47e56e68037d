/* autocompress profile: fill the cost tables of a contract's search space by profiling
 * runs on this machine (autocompress/profile.h). */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/inputs.h"
#include "autocompress/profile.h"

typedef struct {
    const char *model_dir, *contract_path, *out;
    ac_profile_params p;
    ac_comm_params comm;
} profile_args;

static int parse_args(int argc, char **argv, profile_args *a)
{
    ac_profile_params *p = &a->p;
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model_dir, "DIR", "the parent: a checkpoint, or a directory with only config.json"),
        CLI_REQUIRED("contract", &a->contract_path, "FILE", "the deployment contract whose search space is profiled"),
        CLI_REQUIRED("out", &a->out, "FILE", "the cost tables (JSON)"),
        CLI_NUMBER("repeats", CLI_INT, &p->repeats, "R", "sweeps: each run measured once per sweep", 1, 64),
        CLI_NUMBER("requests", CLI_INT, &p->requests, "K", "timed requests per measurement (0: as many as fit in 0.3 s)",
                   0, AC_MAX_REQUESTS),
        CLI_NUMBER("layers", CLI_INT, &p->layers, "N", "layers of a profiling model (default: the parent's count)", 1,
                   4096),
        CLI_SWITCH("balanced", &p->balanced, 1, "share the layer slots out by configuration count (fewer runs)"),
        CLI_SWITCH("no-reference", &p->no_reference, 1, "no reference requests: times as measured"),
        CLI_NUMBER("seed", CLI_U64, &p->seed, "S", "seed of the token ids and random weights", 0, INT64_MAX),
        CLI_TEXT("trace", &p->trace_path, "FILE.json", "Chrome trace of every run's first timed request"),
        CLI_PROGRESS_OPT(&p->progress),
        CLI_COMM_OPTS(&a->comm),
    };
    const cli_spec spec = {"profile", NULL,
                           "Times every configuration of the contract's search space on this machine, in\n"
                           "profiling runs of the parent under the contract's workload and threads, and\n"
                           "writes the per-layer latency and memory cost tables to OUT (JSON), then prints\n"
                           "a summary. Under mpirun the runs are shared out over the ranks, one device\n"
                           "(or host) per rank, and rank 0 writes the merged tables.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

static void print_report(const profile_args *a, const ac_contract *contract, const ac_cost_tables *tables,
                         const ac_profile_report *report)
{
    const ac_cost_tables_info *in = ac_cost_tables_get_info(tables);
    if (report->threads_clamped)
        fprintf(stderr, "autocompress profile: warning: contract %s asks for %d threads; this machine has %d cores, "
                        "so the runs used %d\n", contract->name, contract->hardware.threads, report->threads,
                report->threads);
    const ac_contract_workload *w = &contract->workload;
    printf("contract %s: batch %d, %lld cached + %lld input + %lld output tokens, %d threads\n", contract->name,
           w->batch, (long long)w->cached_tokens, (long long)w->input_tokens, (long long)w->output_tokens,
           report->threads);
    printf("%d runs of %d layers, %d sweeps of %.1f timed requests: %d table rows (%.1f per run; %.1f slot "
           "measurements per run), %.1f s\n", report->runs, in->layers_per_run, in->repeats, report->requests_per_run,
           report->rows, report->runs ? (double)report->rows / report->runs : 0.0, report->rows_per_run,
           report->seconds);
    if (report->retried)
        printf("%d requests run again: another process had taken a core\n", report->retried);
    if (in->reference_ms > 0)
        printf("rows at the machine's median speed over the profiling: parent request %.2f ms (times moved with it "
               "with slope %.2f)\n", in->reference_ms, in->reference_slope);
    printf("memory residual eps: %.2f MiB (spread %.2f MiB over %zu runs)\n", in->eps_bytes / 1048576.0,
           in->eps_spread_bytes / 1048576.0, ac_cost_tables_memory_count(tables));
    printf("wrote %s\n", a->out);
    if (a->p.trace_path)
        printf("wrote %s\n", a->p.trace_path);
}

/* Before the profiling: the parent's config, the contract, and (where rank 0 writes
 * them) the tables and the trace. */
static ac_status check_inputs(const profile_args *a, int writer, ac_contract *contract)
{
    ac_status st = ac_input_model("--model", a->model_dir, 0, NULL);
    if (st == AC_OK)
        st = ac_input_contract("--contract", a->contract_path, contract);
    if (st == AC_OK && writer)
        st = ac_input_out_file("--out", a->out);
    if (st == AC_OK && writer && a->p.trace_path)
        st = ac_input_out_file("--trace", a->p.trace_path);
    return st;
}

int cli_profile(int argc, char **argv)
{
    profile_args a = {.p = ac_profile_default_params(), .comm = ac_comm_default_params()};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    ac_contract contract;
    ac_status st = cli_comm_init(&a.comm, &a.p.comm);
    int writer = st == AC_OK && ac_comm_rank(a.p.comm) == 0;
    if (st == AC_OK)
        st = check_inputs(&a, writer, &contract);
    ac_cost_tables *tables = NULL;
    ac_profile_report report;
    if (st == AC_OK)
        st = ac_profile_run(a.model_dir, &contract, &a.p, &tables, &report);
    if (st == AC_OK && writer)
        st = ac_cost_tables_write(tables, a.out);
    if (st == AC_OK && writer)
        print_report(&a, &contract, tables, &report);
    cli_comm_finish("profile", a.p.comm, st);
    ac_cost_tables_free(tables);
    return cli_exit_status(st);
}
