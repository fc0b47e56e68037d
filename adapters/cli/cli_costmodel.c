/* autocompress costmodel validate | predict: the cost model against end-to-end
 * measurement of held-out architectures, or its prediction for one architecture. */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/config_json.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/profile.h"

static int usage(const char *message)
{
    fprintf(stderr, "autocompress costmodel: %s\n", message);
    fprintf(stderr, "usage: autocompress costmodel validate --model DIR --contract FILE --tables FILE [--n 20]\n"
                    "                                       [--repeats R] [--requests K] [--seed S] [--plot OUT.png]\n"
                    "                                       [--samples OUT.tsv] [--no-reference] [--progress MODE]\n"
                    "       autocompress costmodel predict --model DIR --contract FILE --tables FILE --arch CONFIG.json\n");
    return 2;
}

typedef struct {
    const char *model_dir, *contract_path, *tables_path, *plot, *arch, *samples;
    ac_validate_params p;
} args;

static int parse(int argc, char **argv, args *a)
{
    a->p = ac_validate_default_params();
    for (int i = 2; i < argc; i++) {
        int missing = 0;
        const char *v;
        long long n;
        ac_status st = AC_OK;
        if ((v = cli_flag_value(argc, argv, &i, "--model", &missing)))
            a->model_dir = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--contract", &missing)))
            a->contract_path = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--tables", &missing)))
            a->tables_path = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--plot", &missing)))
            a->plot = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--samples", &missing)))
            a->samples = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--arch", &missing)))
            a->arch = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--n", &missing))) {
            if ((st = cli_parse_int("--n", v, 1, 100000, &n)) == AC_OK)
                a->p.n = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--repeats", &missing))) {
            if ((st = cli_parse_int("--repeats", v, 1, 64, &n)) == AC_OK)
                a->p.repeats = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--requests", &missing))) {
            if ((st = cli_parse_int("--requests", v, 0, AC_MAX_REQUESTS, &n)) == AC_OK)
                a->p.requests = (int)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--seed", &missing))) {
            if ((st = cli_parse_int("--seed", v, 0, INT64_MAX, &n)) == AC_OK)
                a->p.seed = (uint64_t)n;
        } else if ((v = cli_flag_value(argc, argv, &i, "--progress", &missing)))
            st = ac_progress_mode_from_name(v, &a->p.progress);
        else if (!strcmp(argv[i], "--no-reference"))
            a->p.no_reference = 1;
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
    if (!a->model_dir || !a->contract_path || !a->tables_path)
        return usage("--model, --contract and --tables are required");
    return 0;
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

static int predict(const args *a, const ac_contract *contract, const ac_cost_tables *tables)
{
    if (!a->arch)
        return usage("predict needs --arch CONFIG.json");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", a->model_dir);
    ac_arch parent = {0}, arch = {0};
    ac_cost_model *m = NULL;
    ac_cost_prediction p;
    ac_status st = ac_config_json_read(path, &parent);
    if (st == AC_OK)
        st = ac_config_json_read(a->arch, &arch);
    if (st == AC_OK)
        st = ac_cost_model_create(tables, &parent, contract, &m);
    if (st == AC_OK)
        st = ac_cost_predict_arch(m, &arch, &p);
    if (st == AC_OK)
        print_prediction(&p);
    else
        fprintf(stderr, "autocompress costmodel predict: %s\n", ac_error_message());
    ac_cost_model_free(m);
    ac_arch_free(&arch);
    ac_arch_free(&parent);
    return st == AC_OK ? 0 : st == AC_ERR_INVALID ? 2 : 1;
}

/* Microseconds per expected-cost call with all three gradients, at uniform probabilities
 * (what the search's budget loss pays per step). */
static double expected_call_us(const args *a, const ac_contract *contract, const ac_cost_tables *tables)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", a->model_dir);
    ac_arch parent = {0};
    ac_cost_model *m = NULL;
    double us = -1;
    if (ac_config_json_read(path, &parent) == AC_OK && ac_cost_model_create(tables, &parent, contract, &m) == AC_OK) {
        int n = ac_cost_model_prob_count(m);
        double *p = malloc((size_t)n * sizeof *p), *g = malloc(3 * (size_t)n * sizeof *g);
        for (int i = 0; p && g && i < ac_cost_model_axis_count(m); i++) {
            const ac_cost_axis *x = ac_cost_model_axis(m, i);
            for (int j = 0; j < x->count; j++)
                p[x->offset + j] = 1.0 / x->count;
        }
        struct timespec t0, t1;
        int calls = 200;
        ac_cost_prediction out;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; p && g && i < calls; i++)
            ac_cost_expected(m, p, &out, g, g + n, g + 2 * n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (p && g)
            us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / calls;
        free(p);
        free(g);
    }
    ac_cost_model_free(m);
    ac_arch_free(&parent);
    return us;
}

static int validate(const args *a, const ac_contract *contract, const ac_cost_tables *tables)
{
    ac_validate_report r;
    ac_status st = ac_cost_validate(a->model_dir, contract, tables, &a->p, &r);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
        return st == AC_ERR_INVALID ? 2 : 1;
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
    printf("(%s; raw: as measured; norm: at the profiling's machine speed, each request scaled by (the tables' "
           "reference over the parent's request timed right after it) ^ slope)\n", unit);
    printf("latency MAPE %.2f%% (max %.2f%%), throughput MAPE %.2f%% (max %.2f%%)\n", r.latency_mape, r.latency_max_ape,
           r.throughput_mape, r.throughput_max_ape);
    if (r.normalised)
        printf("speed-normalised: latency MAPE %.2f%% (max %.2f%%), throughput MAPE %.2f%% (max %.2f%%)\n",
               r.latency_norm_mape, r.latency_norm_max_ape, r.throughput_norm_mape, r.throughput_norm_max_ape);
    printf("memory MAPE %.2f%% (max %.2f%%); conventional W+C+P MAPE %.2f%%\n", r.memory_mape, r.memory_max_ape,
           r.conventional_memory_mape);
    if (r.retried)
        printf("%d requests run again: another process had taken a core\n", r.retried);
    if (r.normalised)
        printf("machine noise: the parent's reference request varied by %.1f%% (1.4826 MAD / median) over the "
               "validation; times moved with it with slope %.2f (profiling: %.2f)\n", r.reference_noise_pct,
               r.reference_slope, ac_cost_tables_get_info(tables)->reference_slope);
    printf("%d architectures measured in %.1f s (%d sweeps of %.1f timed requests each); the expected cost with its "
           "gradients takes %.1f us a call\n", r.n,
           r.seconds, a->p.repeats, r.requests_per_arch / a->p.repeats, expected_call_us(a, contract, tables));
    int rc = 0;
    if (a->plot) {
        st = ac_validate_plot(&r, contract, a->plot);
        if (st == AC_OK)
            printf("wrote %s\n", a->plot);
        else {
            fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
            rc = 1;
        }
    }
    if (a->samples) {
        st = ac_validate_write_samples(&r, a->samples);
        if (st == AC_OK)
            printf("wrote %s\n", a->samples);
        else {
            fprintf(stderr, "autocompress costmodel validate: %s\n", ac_error_message());
            rc = 1;
        }
    }
    ac_validate_report_free(&r);
    return rc;
}

int cli_costmodel(int argc, char **argv)
{
    if (argc < 2)
        return usage("a subcommand is required (validate or predict)");
    const char *sub = argv[1];
    if (strcmp(sub, "validate") && strcmp(sub, "predict")) {
        char message[128];
        snprintf(message, sizeof message, "unknown subcommand '%s'", sub);
        return usage(message);
    }
    args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    ac_contract contract;
    ac_cost_tables *tables = NULL;
    ac_status st = ac_contract_load(a.contract_path, &contract);
    if (st == AC_OK)
        st = ac_cost_tables_read(a.tables_path, &tables);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress costmodel %s: %s\n", sub, ac_error_message());
        return st == AC_ERR_INVALID ? 2 : 1;
    }
    rc = !strcmp(sub, "validate") ? validate(&a, &contract, tables) : predict(&a, &contract, tables);
    ac_cost_tables_free(tables);
    return rc;
}
