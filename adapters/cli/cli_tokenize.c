/* autocompress tokenize: documents -> DIR/train.bin, DIR/val.bin, DIR/manifest.json. */
#include "cli.h"
#include "cli_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/inputs.h"
#include "autocompress/tokens.h"

/* A growing array of malloc'd paths. */
typedef struct {
    char **paths;
    size_t count, cap;
} path_list;

static ac_status path_list_add(path_list *l, const char *path)
{
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (!p)
            return ac_fail(AC_ERR_NOMEM, "out of memory");
        l->paths = p;
        l->cap = cap;
    }
    if (!(l->paths[l->count] = strdup(path)))
        return ac_fail(AC_ERR_NOMEM, "out of memory");
    l->count++;
    return AC_OK;
}

static void path_list_free(path_list *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->paths[i]);
    free(l->paths);
}

/* --inputs-from, which may be given more than once: the lists are read after parsing. */
static ac_status add_list(const char *value, void *dst) { return path_list_add(dst, value); }

/* Appends the paths in `list` (one a line, blank lines skipped) to `inputs`. */
static int read_input_list(const char *list, path_list *inputs)
{
    FILE *f = fopen(list, "r");
    if (!f) {
        fprintf(stderr, "autocompress tokenize: --inputs-from %s: cannot open\n", list);
        return 1;
    }
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t n;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n && path_list_add(inputs, line) != AC_OK)
            break;
    }
    int bad = ferror(f) || n >= 0;
    free(line);
    fclose(f);
    if (bad) {
        fprintf(stderr, "autocompress tokenize: --inputs-from %s: read error or out of memory\n", list);
        return 1;
    }
    return 0;
}

static ac_status parse_format(const char *value, void *dst) { return ac_docs_format_from_name(value, dst); }

/* The INPUT arguments, then the paths of every --inputs-from list; 1 after a failure it
 * reported. */
static int gather_inputs(int argc, char **argv, const path_list *lists, path_list *inputs)
{
    for (int i = 0; i < argc; i++)
        if (path_list_add(inputs, argv[i]) != AC_OK) {
            fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
            return 1;
        }
    for (size_t i = 0; i < lists->count; i++)
        if (read_input_list(lists->paths[i], inputs))
            return 1;
    return 0;
}

/* Before any document is read: the tokenizer, every input and the output directory;
 * 1 after a failure it reported. */
static int check_inputs(const ac_tokenize_params *params, const path_list *inputs)
{
    ac_status st = ac_input_file("--tokenizer", params->tokenizer_path);
    for (size_t i = 0; st == AC_OK && i < inputs->count; i++)
        st = ac_input_file("INPUT", inputs->paths[i]);
    if (st == AC_OK)
        st = ac_input_out_dir("--out", params->out_dir);
    if (st == AC_OK)
        return 0;
    fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
    return 1;
}

static int tokenize(ac_tokenize_params *params, const path_list *inputs)
{
    params->inputs = (const char *const *)inputs->paths;
    params->input_count = inputs->count;
    ac_tokenize_stats s;
    ac_status st = ac_tokenize_corpus(params, &s);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    printf("tokenized %zu files, %llu bytes (%s documents) in %.2f s: %.2f MB/s\n", inputs->count,
           (unsigned long long)s.input_bytes, ac_docs_format_name(params->format), s.seconds,
           s.seconds > 0 ? (double)s.input_bytes / 1e6 / s.seconds : 0.0);
    static const char *const split[2] = {"train", "val"};
    for (int k = 0; k < 2; k++)
        printf("  %-5s %8llu documents %12llu text bytes %12llu tokens -> %s/%s.bin\n", split[k],
               (unsigned long long)s.documents[k], (unsigned long long)s.bytes[k],
               (unsigned long long)s.tokens[k], params->out_dir, split[k]);
    printf("  manifest: %s/manifest.json\n", params->out_dir);
    return CLI_EXIT_DONE;
}

int cli_tokenize(int argc, char **argv)
{
    ac_tokenize_params params = ac_tokenize_default_params();
    path_list lists = {0}, inputs = {0};
    const cli_opt opts[] = {
        CLI_REQUIRED("tokenizer", &params.tokenizer_path, "FILE", "tokenizer.json (byte-level BPE)"),
        CLI_REQUIRED("out", &params.out_dir, "DIR", "where the shards and the manifest go (created when missing)"),
        CLI_NUMBER("val-percent", CLI_INT, &params.val_percent, "P", "share of the documents for validation", 0, 100),
        CLI_CUSTOM("format", &params.format, "fortune|lines|files", "what a document is (default: fortune)", parse_format),
        CLI_TEXT("eos", &params.eos_token, "TOKEN", "token appended after each document"),
        CLI_CUSTOM("inputs-from", &lists, "LIST", "read more input paths from LIST, one a line (repeatable)", add_list),
        CLI_PROGRESS_OPT(&params.progress),
    };
    const cli_spec spec = {"tokenize", "INPUT...",
                           "Tokenizes the documents of the INPUT files (then those of the --inputs-from\n"
                           "lists) and appends the end token after each. Documents are:\n"
                           "  fortune  entries separated by lines holding just \"%\"\n"
                           "  lines    each non-blank line\n"
                           "  files    each input file\n"
                           "A document goes to validation when FNV-1a-64(its text) % 100 < val-percent.\n"
                           "Writes DIR/train.bin and DIR/val.bin (ACTOKENS shards) and DIR/manifest.json.\n"
                           "Warns when an input yields exactly one document with --format fortune or lines\n"
                           "(is the format right?) and when train or val ends up empty though its share\n"
                           "is above 0.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, -1};
    int first;
    int rc = cli_parse(&spec, argc, argv, &first);
    if (rc == CLI_PARSED && gather_inputs(argc - first, argv + first, &lists, &inputs))
        rc = CLI_EXIT_FAILURE;
    if (rc == CLI_PARSED && !inputs.count)
        rc = cli_usage_error(&spec, "no INPUT given (nor any in the --inputs-from lists)");
    if (rc == CLI_PARSED && check_inputs(&params, &inputs))
        rc = 1;
    if (rc == CLI_PARSED)
        rc = tokenize(&params, &inputs);
    path_list_free(&lists);
    path_list_free(&inputs);
    return rc;
}
