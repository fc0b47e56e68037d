/* autocompress logits / generate: run a checkpoint on token ids, on the CPU or a GPU. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/model.h"
#include "autocompress/npy.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/tokenizer.h"
#include "util/path.h"

typedef struct {
    const char *model_dir;
    const char *ids_text;
    const char *prompt;         /* text, encoded with the tokenizer */
    const char *tokenizer_path; /* default: MODEL/tokenizer.json */
    const char *out_path;
    const char *device; /* "cpu" (default) or "cuda" */
    ac_dtype weights;   /* f32 (default), or bf16: a serving copy */
    int max_tokens;
    double temperature;
    double top_p;
    uint64_t seed;
} run_args;

static int report(const char *command, ac_status st)
{
    fprintf(stderr, "autocompress %s: %s\n", command, ac_error_message());
    return cli_exit_status(st);
}

/* The rows logits and generate share: the checkpoint and its input. */
#define RUN_INPUT_OPTS(a)                                                                      \
    CLI_REQUIRED("model", &(a)->model_dir, "DIR", "the checkpoint"),                           \
    CLI_TEXT("ids", &(a)->ids_text, "1,2,3", "the input as token ids"),                        \
    CLI_TEXT("prompt", &(a)->prompt, "TEXT", "the input as text, encoded with the tokenizer"), \
    CLI_TEXT("tokenizer", &(a)->tokenizer_path, "FILE", "tokenizer.json for --prompt (default: DIR/tokenizer.json)"), \
    CLI_TEXT("device", &(a)->device, "cpu|cuda", "where the model runs (default: cpu)"),         \
    CLI_CUSTOM("weights", &(a)->weights, "f32|bf16",                                           \
               "the product weights' dtype where the model runs (default: f32)", cli_parse_weights)

/* Parses and checks that exactly one input was given. */
static int parse_input(const cli_spec *spec, int argc, char **argv, const run_args *a)
{
    int rc = cli_parse(spec, argc, argv, NULL);
    if (rc == CLI_PARSED && !a->ids_text == !a->prompt)
        rc = cli_usage_error(spec, "give exactly one of --ids and --prompt");
    return rc;
}

static int parse_logits_args(int argc, char **argv, run_args *a)
{
    const cli_opt opts[] = {
        RUN_INPUT_OPTS(a),
        CLI_TEXT("out", &a->out_path, "FILE.npy", "write the logits here instead of printing each position's argmax"),
    };
    const cli_spec spec = {"logits", NULL,
                           "Runs the checkpoint on the input (on --device) and prints the logits'\n"
                           "shape [tokens, vocab]. With --out the logits go to a float32 .npy file;\n"
                           "without it each position's argmax token is printed instead.\n"
                           "An id outside the vocabulary is an input that is not valid.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    return parse_input(&spec, argc, argv, a);
}

static int parse_generate_args(int argc, char **argv, run_args *a)
{
    const cli_opt opts[] = {
        RUN_INPUT_OPTS(a),
        CLI_NUMBER("max-tokens", CLI_INT, &a->max_tokens, "N", "tokens to generate", 0, 1 << 20),
        CLI_REAL("temperature", CLI_DOUBLE, &a->temperature, "T", "sampling temperature (0: greedy)"),
        CLI_REAL("top-p", CLI_DOUBLE, &a->top_p, "P", "nucleus sampling: the smallest set of tokens holding P"),
        CLI_NUMBER("seed", CLI_U64, &a->seed, "S", "seed of the sampling", 0, INT64_MAX),
    };
    const cli_spec spec = {"generate", NULL,
                           "Feeds the input to the checkpoint (on --device) and generates --max-tokens more\n"
                           "tokens one at a time, greedy or sampled. With --ids the new ids are printed\n"
                           "comma-separated; with --prompt the decoded text is printed as it is made, and\n"
                           "generation stops early at <|endoftext|>.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = parse_input(&spec, argc, argv, a);
    if (rc == CLI_PARSED && (a->temperature < 0 || a->top_p <= 0 || a->top_p > 1))
        rc = cli_usage_error(&spec, "--temperature must be >= 0 and --top-p in (0, 1]");
    return rc;
}

/* The loaded pieces every run needs, freed together. */
typedef struct {
    ac_model *model;
    ac_runtime *runtime;
    ac_cache *cache;
    ac_tokenizer *tokenizer; /* with --prompt */
    int32_t *ids;
    int n_ids;
} run_state;

static void run_state_free(run_state *r)
{
    ac_tokenizer_free(r->tokenizer);
    ac_cache_free(r->cache);
    ac_runtime_free(r->runtime);
    ac_model_free(r->model);
    free(r->ids);
}

static ac_status run_state_open(const run_args *a, run_state *r)
{
    *r = (run_state){0};
    ac_status st = AC_OK;
    if (a->prompt) {
        char path[AC_PATH_MAX];
        if (!a->tokenizer_path)
            st = ac_path_join(path, sizeof path, a->model_dir, "tokenizer.json");
        size_t n = 0;
        if (st == AC_OK)
            st = ac_tokenizer_load(a->tokenizer_path ? a->tokenizer_path : path, &r->tokenizer);
        if (st == AC_OK)
            st = ac_tokenizer_encode(r->tokenizer, a->prompt, strlen(a->prompt), &r->ids, &n);
        if (st == AC_OK && n == 0)
            st = ac_fail(AC_ERR_INVALID, "--prompt: the text encodes to no tokens");
        r->n_ids = (int)n;
    } else {
        st = cli_parse_ids(a->ids_text, &r->ids, &r->n_ids);
    }
    if (st == AC_OK)
        st = ac_model_load(a->model_dir, &r->model);
    if (st == AC_OK)
        st = ac_model_move_to_device_as(&r->model, a->device, a->weights);
    if (st == AC_OK)
        st = ac_runtime_create(r->model, &r->runtime);
    if (st == AC_OK)
        st = ac_cache_create(r->model, &r->cache);
    return st;
}

int cli_logits(int argc, char **argv)
{
    run_args a = {0};
    int rc = parse_logits_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    run_state r;
    ac_status st = run_state_open(&a, &r);
    float *logits = NULL;
    int V = 0;
    if (st == AC_OK) {
        V = ac_model_arch(r.model)->vocab;
        logits = malloc((size_t)r.n_ids * V * sizeof *logits);
        st = logits ? AC_OK : ac_fail(AC_ERR_NOMEM, "out of memory for logits");
    }
    if (st == AC_OK) {
        const int32_t *tokens[1] = {r.ids};
        ac_cache *caches[1] = {r.cache};
        ac_batch batch = {.n_seqs = 1, .tokens = tokens, .n_tokens = &r.n_ids, .caches = caches};
        st = ac_runtime_forward(r.runtime, &batch, AC_LOGITS_ALL, logits);
    }
    int64_t shape[2] = {r.n_ids, V};
    if (st == AC_OK && a.out_path)
        st = ac_npy_write_f32(a.out_path, logits, 2, shape);
    if (st == AC_OK) {
        printf("logits shape [%lld, %lld]%s%s\n", (long long)shape[0], (long long)shape[1], a.out_path ? " -> " : "",
               a.out_path ? a.out_path : "");
        if (!a.out_path)
            for (int t = 0; t < r.n_ids; t++)
                printf("position %d: argmax %d\n", t, ac_argmax(logits + (size_t)t * V, V));
    }
    free(logits);
    run_state_free(&r);
    return st == AC_OK ? CLI_EXIT_DONE : report(argv[0], st);
}

int cli_generate(int argc, char **argv)
{
    run_args a = {.max_tokens = 16, .temperature = 0.0, .top_p = 1.0, .seed = 0};
    int rc = parse_generate_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    run_state r;
    ac_status st = run_state_open(&a, &r);
    float *logits = NULL, *work = NULL;
    int V = 0;
    if (st == AC_OK) {
        V = ac_model_arch(r.model)->vocab;
        logits = malloc((size_t)V * sizeof *logits);
        work = malloc(2 * (size_t)V * sizeof *work);
        st = logits && work ? AC_OK : ac_fail(AC_ERR_NOMEM, "out of memory for logits");
    }
    ac_sampler sampler;
    ac_sampler_init(&sampler, (float)a.temperature, (float)a.top_p, a.seed);
    const int32_t *tokens[1] = {r.ids};
    int n_new = r.n_ids;
    ac_cache *caches[1] = {r.cache};
    int32_t next = 0;
    /* text mode ends at the end-of-document token; id mode always runs max_tokens */
    int32_t eos = r.tokenizer ? ac_tokenizer_token_to_id(r.tokenizer, "<|endoftext|>") : -1;
    for (int step = 0; st == AC_OK && step < a.max_tokens; step++) {
        ac_batch batch = {.n_seqs = 1, .tokens = tokens, .n_tokens = &n_new, .caches = caches};
        st = ac_runtime_forward(r.runtime, &batch, AC_LOGITS_LAST, logits);
        if (st != AC_OK)
            break;
        next = ac_sample(&sampler, logits, V, work);
        if (next == eos)
            break;
        if (r.tokenizer) {
            char *piece = NULL;
            size_t len = 0;
            st = ac_tokenizer_decode(r.tokenizer, &next, 1, &piece, &len);
            if (st == AC_OK)
                fwrite(piece, 1, len, stdout);
            free(piece);
            fflush(stdout);
        } else {
            printf("%s%d", step ? "," : "", next);
        }
        tokens[0] = &next;
        n_new = 1;
    }
    if (st == AC_OK)
        printf("\n");
    free(logits);
    free(work);
    run_state_free(&r);
    return st == AC_OK ? CLI_EXIT_DONE : report(argv[0], st);
}
