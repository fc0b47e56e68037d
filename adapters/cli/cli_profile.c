/* autocompress profile: fill the cost tables of a contract's search space by profiling
 * runs on this machine (autocompress/profile.h). */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/profile.h"

static int usage(const char *message)
{
    fprintf(stderr, "autocompress profile: %s\n", message);
    fprintf(stderr, "usage: autocompress profile --model DIR --contract FILE --out tables.json [--repeats R]\n"
                    "                            [--requests K] [--layers N] [--balanced] [--no-reference] [--seed S]\n"
                    "                            [--trace FILE.json] [--progress MODE]\n");
    return 2;
}

int cli_profile(int argc, char **argv)
{
    const char *model_dir = NULL, *contract_path = NULL, *out = NULL;
    ac_profile_params p = ac_profile_default_params();
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        long long n;
        ac_status st = AC_OK;
        if ((v = cli_flag_value(argc, argv, &i, "--model", &missing)))
            model_dir = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--contract", &missing)))
            contract_path = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--out", &missing)))
            out = v;
        else if (!strcmp(argv[i], "--balanced"))
            p.balanced = 1;
        else if (!strcmp(argv[i], "--no-reference"))
            p.no_reference = 1;
        else if ((v = cli_flag_value(argc, argv, &i, "--trace", &missing)))
            p.trace_path = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--repeats", &missing))) {
            if ((st = cli_parse_int("--repeats", v, 1, 64, &n)) == AC_OK)
                p.repeats = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--requests", &missing))) {
            if ((st = cli_parse_int("--requests", v, 0, AC_MAX_REQUESTS, &n)) == AC_OK)
                p.requests = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--layers", &missing))) {
            if ((st = cli_parse_int("--layers", v, 1, 4096, &n)) == AC_OK)
                p.layers = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--seed", &missing))) {
            if ((st = cli_parse_int("--seed", v, 0, INT64_MAX, &n)) == AC_OK)
                p.seed = (uint64_t)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--progress", &missing)))
            st = ac_progress_mode_from_name(v, &p.progress);
        else if (!missing) {
            char message[256];
            snprintf(message, sizeof message, "unknown argument '%s'", argv[i]);
            return usage(message);
        }
        if (missing)
            return usage("a flag is missing its value");
        if (st != AC_OK)
            return usage(ac_error_message());
    }
    if (!model_dir || !contract_path || !out)
        return usage("--model, --contract and --out are required");
    ac_contract contract;
    ac_status st = ac_contract_load(contract_path, &contract);
    ac_cost_tables *tables = NULL;
    ac_profile_report report;
    if (st == AC_OK)
        st = ac_profile_run(model_dir, &contract, &p, &tables, &report);
    if (st == AC_OK)
        st = ac_cost_tables_write(tables, out);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress profile: %s\n", ac_error_message());
        ac_cost_tables_free(tables);
        return st == AC_ERR_INVALID ? 2 : 1;
    }
    const ac_cost_tables_info *in = ac_cost_tables_get_info(tables);
    if (report.threads_clamped)
        fprintf(stderr, "autocompress profile: warning: contract %s asks for %d threads; this machine has %d cores, "
                        "so the runs used %d\n", contract.name, contract.hardware.threads, report.threads, report.threads);
    printf("contract %s: batch %d, %lld cached + %lld input + %lld output tokens, %d threads\n", contract.name,
           contract.workload.batch, (long long)contract.workload.cached_tokens, (long long)contract.workload.input_tokens,
           (long long)contract.workload.output_tokens, report.threads);
    printf("%d runs of %d layers, %d sweeps of %.1f timed requests: %d table rows (%.1f per run; %.1f slot "
           "measurements per run), %.1f s\n", report.runs, in->layers_per_run, in->repeats, report.requests_per_run,
           report.rows, report.runs ? (double)report.rows / report.runs : 0.0, report.rows_per_run, report.seconds);
    if (report.retried)
        printf("%d requests run again: another process had taken a core\n", report.retried);
    if (in->reference_ms > 0)
        printf("rows at the machine's median speed over the profiling: parent request %.2f ms (times moved with it "
               "with slope %.2f)\n", in->reference_ms, in->reference_slope);
    printf("memory residual eps: %.2f MiB (spread %.2f MiB over %zu runs)\n", in->eps_bytes / 1048576.0,
           in->eps_spread_bytes / 1048576.0, ac_cost_tables_memory_count(tables));
    printf("wrote %s\n", out);
    if (p.trace_path)
        printf("wrote %s\n", p.trace_path);
    ac_cost_tables_free(tables);
    return 0;
}
