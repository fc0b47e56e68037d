/* autocompress eval: a compressed model against its teacher on held-out tokens. */
#include "cli.h"
#include "cli_opts.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/eval.h"
#include "autocompress/inputs.h"
#include "autocompress/model.h"

typedef struct {
    ac_eval_params p;
    const char *model_dir, *teacher_dir, *json_path;
    const char *device; /* "cpu" (default) or "cuda" */
    ac_dtype weights;   /* the student's product weights where it runs */
} eval_args;

static int parse_args(int argc, char **argv, eval_args *a)
{
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model_dir, "DIR", "the checkpoint to evaluate (the student)"),
        CLI_REQUIRED("teacher", &a->teacher_dir, "DIR", "the parent it is compared with"),
        CLI_REQUIRED("data", &a->p.data_dir, "DIR", "token shards from autocompress tokenize (val.bin)"),
        CLI_NUMBER("batches", CLI_INT, &a->p.batches, "N", "batches scored, the first of val.bin (0: all of it)", 0,
                   100000000),
        CLI_NUMBER("batch", CLI_INT, &a->p.batch, "B", "sequences per batch", 1, 65536),
        CLI_NUMBER("seq-len", CLI_INT, &a->p.seq_len, "T", "tokens per sequence", 1, 1 << 20),
        CLI_REAL("tau", CLI_FLOAT, &a->p.kd_tau, "T", "distillation temperature of the KD loss"),
        CLI_NUMBER("bootstrap", CLI_INT, &a->p.bootstrap, "N",
                   "resamples of the 95% intervals of the KD loss and the CE (over windows)", 1, 1000000),
        CLI_NUMBER("lines", CLI_INT, &a->p.code_lines, "N",
                   "lines for next-line exact match (default: 200 if DATA was made from whole files, else 0)", 0,
                   100000000),
        CLI_NUMBER("line-context", CLI_INT, &a->p.line_context, "N", "tokens of context before each line", 1, 1 << 20),
        CLI_NUMBER("max-line-tokens", CLI_INT, &a->p.max_line_tokens, "N", "tokens of a line and of its completion",
                   1, 1 << 20),
        CLI_TEXT("tokenizer", &a->p.tokenizer_path, "FILE", "tokenizer.json for line matching (default: "
                 "MODEL/tokenizer.json)"),
        CLI_TEXT("json", &a->json_path, "FILE", "also write the report as JSON"),
        CLI_TEXT("device", &a->device, "cpu|cuda", "where both models run (default: cpu)"),
        CLI_CUSTOM("weights", &a->weights, "f32|bf16",
                   "the student's product weights there: bf16 scores it as a bf16 serving copy (default: f32)",
                   cli_parse_weights),
        CLI_PROGRESS_OPT(&a->p.progress),
    };
    const cli_spec spec = {"eval", NULL,
                           "Scores the model against its teacher on the first batches of DATA/val.bin: the\n"
                           "distillation loss (tau^2 KL, as distill optimizes it), both models' cross-entropy\n"
                           "and perplexity, and how often their top-1 tokens agree, with 95% bootstrap intervals\n"
                           "of the student's KD loss and CE over the windows scored; with --lines, the share\n"
                           "of held-out lines the model completes exactly (greedy, from the line's context).\n"
                           "--json keeps each window's KD loss and CE: 'autocompress eval compare A.json B.json'\n"
                           "compares two students scored on the same windows (see its --help).\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc == CLI_PARSED && !(a->p.kd_tau > 0))
        rc = cli_usage_error(&spec, "--tau must be positive");
    return rc;
}

static void print_report(const eval_args *a, const ac_eval_report *r)
{
    printf("eval: %s against %s on %s: %lld positions (%lld windows of %d), tau %g, %.1f s\n", a->model_dir,
           a->teacher_dir, a->p.data_dir, (long long)r->tokens, (long long)r->windows, a->p.seq_len, a->p.kd_tau,
           r->seconds);
    printf("  %-8s %10s %12s %10s %8s\n", "model", "ce", "ppl", "kd_loss", "top1");
    printf("  %-8s %10.4f %12.3f %10.6f %8.4f\n", "student", r->ce, r->ppl, r->kd_loss, r->top1_agreement);
    printf("  %-8s %10.4f %12.3f %10s %8s\n", "teacher", r->teacher_ce, r->teacher_ppl, "-", "-");
    printf("  95%% over %lld windows: ce [%.4f, %.4f], kd_loss [%.6f, %.6f]\n", (long long)r->windows, r->ce_lo,
           r->ce_hi, r->kd_lo, r->kd_hi);
    if (r->lines > 0)
        printf("  next-line exact match: %.4f (%d lines)\n", r->line_exact_match, r->lines);
}

/* Before the scoring: the device, both models, val.bin within the student's vocabulary, the
 * tokenizer when one is named and the JSON report's place. */
static ac_status check_inputs(const eval_args *a)
{
    ac_arch arch = {0};
    ac_status st = ac_input_device("--device", a->device);
    if (st == AC_OK)
        st = ac_input_model("--model", a->model_dir, 1, &arch);
    if (st == AC_OK)
        st = ac_input_model("--teacher", a->teacher_dir, 1, NULL);
    if (st == AC_OK)
        st = ac_input_shards("--data", a->p.data_dir, AC_SHARD_VAL, arch.vocab);
    if (st == AC_OK && a->p.tokenizer_path)
        st = ac_input_file("--tokenizer", a->p.tokenizer_path);
    if (st == AC_OK && a->json_path)
        st = ac_input_out_file("--json", a->json_path);
    ac_arch_free(&arch);
    return st;
}

/* ---- autocompress eval compare A.json B.json ---- */

static void print_score(const char *name, double a, double b, double diff, double lo, double hi)
{
    printf("  %-8s %10.6f %10.6f %+11.6f  [%+.6f, %+.6f]  %s\n", name, a, b, diff, lo, hi,
           lo > 0 || hi < 0 ? "excludes 0" : "includes 0");
}

static int eval_compare(int argc, char **argv)
{
    int bootstrap = ac_eval_default_params().bootstrap, first;
    const char *json_path = NULL;
    const cli_opt opts[] = {
        CLI_NUMBER("bootstrap", CLI_INT, &bootstrap, "N", "resamples of the paired 95% intervals (over windows)", 1,
                   1000000),
        CLI_TEXT("json", &json_path, "FILE", "also write the comparison as JSON"),
    };
    const cli_spec spec = {"eval compare", "A.json B.json",
                           "Compares two students scored by `autocompress eval --json` (or compress's\n"
                           "eval.json) on the same windows: for the KD loss and the CE, the mean over the\n"
                           "windows of B's score minus A's, with a paired percentile bootstrap 95% interval\n"
                           "(the windows resampled, the same ones for both models). Refused (exit 2) when the\n"
                           "files were not scored on the same windows (val.bin, seq_len, count), with the\n"
                           "same temperature and against the same teacher.\n" CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 2, 2};
    int rc = cli_parse(&spec, argc, argv, &first);
    if (rc != CLI_PARSED)
        return rc;
    const char *path_a = argv[first], *path_b = argv[first + 1];
    ac_eval_comparison c;
    ac_status st = ac_eval_compare(path_a, path_b, bootstrap, &c);
    if (st == AC_OK && json_path)
        st = ac_eval_comparison_write_json(&c, path_a, path_b, bootstrap, json_path);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress eval: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    printf("eval compare: B - A over %lld windows of %d tokens, paired bootstrap 95%% (%d resamples)\n"
           "  A: %s\n  B: %s\n", (long long)c.windows, c.seq_len, bootstrap, path_a, path_b);
    printf("  %-8s %10s %10s %11s  %s\n", "score", "A", "B", "B - A", "95% interval");
    print_score("kd_loss", c.a_kd, c.b_kd, c.kd_diff, c.kd_lo, c.kd_hi);
    print_score("ce", c.a_ce, c.b_ce, c.ce_diff, c.ce_lo, c.ce_hi);
    return CLI_EXIT_DONE;
}

int cli_eval(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "compare"))
        return eval_compare(argc - 1, argv + 1);
    eval_args a = {.p = ac_eval_default_params()};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    ac_model *student = NULL, *teacher = NULL;
    ac_eval_report r = {0};
    ac_status st = check_inputs(&a);
    if (st == AC_OK)
        st = ac_model_load(a.model_dir, &student);
    if (st == AC_OK)
        st = ac_model_load(a.teacher_dir, &teacher);
    if (st == AC_OK)
        st = ac_model_move_to_device_as(&student, a.device, a.weights);
    if (st == AC_OK)
        st = ac_model_move_to_device(&teacher, a.device);
    if (st == AC_OK)
        st = ac_eval_run(student, teacher, a.model_dir, &a.p, &r);
    if (st == AC_OK && a.json_path)
        st = ac_eval_write_json(&r, &a.p, a.json_path);
    if (st == AC_OK)
        print_report(&a, &r);
    else
        fprintf(stderr, "autocompress eval: %s\n", ac_error_message());
    ac_eval_report_free(&r);
    ac_model_free(student);
    ac_model_free(teacher);
    return cli_exit_status(st);
}
