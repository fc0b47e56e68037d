/* autocompress measure: a checkpoint's measured latency, throughput and memory under its
 * contract's workload, each against its target. */
#include "cli.h"
#include "cli_opts.h"
#include "cli_tables.h"

#include <stdio.h>
#include <stdlib.h>

#include "autocompress/contract.h"
#include "autocompress/inputs.h"
#include "autocompress/profile.h"

typedef struct {
    const char *model_dir, *contract_path, *parent_dir, *tables_path;
    int json, foreign_tables;
    ac_measure_params p;
} measure_args;

static int parse_args(int argc, char **argv, measure_args *a)
{
    ac_measure_params *p = &a->p;
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model_dir, "DIR", "the checkpoint to measure"),
        CLI_REQUIRED("contract", &a->contract_path, "FILE", "the deployment contract"),
        CLI_TEXT("parent", &a->parent_dir, "DIR", "the parent the tables were profiled with (ratio targets, speed reference)"),
        CLI_TEXT("tables", &a->tables_path, "FILE", "the parent's cost tables (prediction, speed correction)"),
        CLI_FOREIGN_TABLES(&a->foreign_tables),
        CLI_NUMBER("sweeps", CLI_INT, &p->sweeps, "N", "fresh measurement processes", 1, 100),
        CLI_NUMBER("requests", CLI_INT, &p->requests, "K", "timed requests per process (0: as many as fit in 0.3 s)", 0,
                   AC_MAX_REQUESTS),
        CLI_NUMBER("seed", CLI_U64, &p->seed, "S", "prompt tokens (sweep s uses S + s)", 0, INT64_MAX),
        CLI_SWITCH("json", &a->json, 1, "the report as JSON on stdout instead of text"),
        CLI_PROGRESS_OPT(&p->progress),
    };
    const cli_spec spec = {"measure", NULL,
                           "Serves the contract's workload on the checkpoint in fresh processes and prints the\n"
                           "median latency, the throughput and the peak memory against the contract's targets.\n"
                           "With --parent and --tables, each request is followed by one of the parent's, times\n"
                           "are corrected to the profiling's machine speed (as costmodel validate does), ratio\n"
                           "targets are resolved against the parent's predicted cost and the cost model's\n"
                           "prediction is shown beside the measurement.\n"
                           CLI_EXIT_TARGETS_TEXT("every target is met as measured"),
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc == CLI_PARSED && !a->parent_dir != !a->tables_path)
        rc = cli_usage_error(&spec, "--parent and --tables go together");
    return rc;
}

static void print_quantity(const char *name, const char *unit, double scale, const ac_measure_quantity *q,
                           const char *relation, int normalised)
{
    printf("%-12s %12.3f", name, q->raw / scale);
    if (normalised)
        printf(" %12.3f", q->value / scale);
    if (q->predicted > 0)
        printf(" %12.3f", q->predicted / scale);
    else
        printf(" %12s", "-");
    if (q->has_target)
        printf("   %s %-10.3f %s  %s\n", relation, q->target / scale, unit, q->pass ? "pass" : "FAIL");
    else
        printf("   %-13s %s\n", "no target", unit);
}

static void print_report(const ac_measure_report *r)
{
    const ac_contract_workload *w = &r->workload;
    printf("contract %s: batch %d, cached %lld, input %lld, output %lld tokens, %d threads\n", r->contract, w->batch,
           (long long)w->cached_tokens, (long long)w->input_tokens, (long long)w->output_tokens, r->threads);
    if (r->data_parallel > 1)
        printf("data_parallel %d: one replica measured on one device; its throughput and memory are per device, "
               "the %d replicas serve %d x the throughput\n", r->data_parallel, r->data_parallel, r->data_parallel);
    printf("%.0f parameters; %d timed requests (%d run again), %.1f s\n", r->parameters, r->samples, r->retried,
           r->seconds);
    printf("%-12s %12s", "", "measured");
    if (r->normalised)
        printf(" %12s", "corrected");
    printf(" %12s   target\n", "predicted");
    print_quantity("latency", "ms", 1.0, &r->latency_ms, "<=", r->normalised);
    print_quantity("throughput", "tok/s", 1.0, &r->throughput_tok_s, ">=", r->normalised);
    print_quantity("memory", "MiB", 1024.0 * 1024.0, &r->memory_bytes, "<=", r->normalised);
    if (r->normalised)
        printf("corrected: at the profiling's machine speed (reference / this measurement's median reference, "
               "each request's own reference around it ^%.2f)\n", r->reference_slope);
    printf("%s\n", r->pass ? "PASS: every target met" : "FAIL: a target is missed");
}

/* Before the measurement: the checkpoint's config, the contract, and the parent with its
 * tables against both. */
static ac_status check_inputs(const measure_args *a)
{
    ac_contract contract;
    ac_status st = ac_input_model("--model", a->model_dir, 0, NULL);
    if (st == AC_OK)
        st = ac_input_contract("--contract", a->contract_path, &contract);
    ac_arch parent = {0};
    if (st == AC_OK && a->parent_dir)
        st = ac_input_model("--parent", a->parent_dir, 0, &parent);
    if (st == AC_OK && a->tables_path)
        st = ac_input_tables("--tables", a->tables_path, &parent, &contract, a->foreign_tables);
    ac_arch_free(&parent);
    return st;
}

int cli_measure(int argc, char **argv)
{
    measure_args a = {.p = ac_measure_default_params()};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    ac_contract contract;
    ac_cost_tables *tables = NULL;
    ac_status st = check_inputs(&a);
    if (st == AC_OK)
        st = ac_contract_load(a.contract_path, &contract);
    if (st == AC_OK && a.tables_path)
        st = cli_read_tables("measure", a.tables_path, &contract, a.foreign_tables, &tables);
    a.p.tables = tables;
    a.p.parent_dir = a.parent_dir;
    ac_measure_report r;
    if (st == AC_OK)
        st = ac_measure_checkpoint(a.model_dir, &contract, &a.p, &r);
    char *json = NULL;
    if (st == AC_OK && a.json)
        st = ac_measure_report_json(&r, &json);
    ac_cost_tables_free(tables);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress measure: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    if (json)
        printf("%s\n", json);
    else
        print_report(&r);
    free(json);
    return cli_exit_verdict(r.pass);
}
