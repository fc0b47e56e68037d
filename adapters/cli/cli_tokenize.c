/* autocompress tokenize: documents -> DIR/train.bin, DIR/val.bin, DIR/manifest.json. */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/tokens.h"

static void tokenize_usage(FILE *out)
{
    fprintf(out,
            "usage: autocompress tokenize --tokenizer FILE --out DIR [--val-percent 5]\n"
            "         [--format fortune|lines|files] [--eos TOKEN] [--inputs-from LIST]\n"
            "         [--progress=auto|bar|json|off] INPUT...\n"
            "\n"
            "Tokenizes the documents of the INPUT files with a tokenizer.json (byte-level BPE)\n"
            "and appends the end token (default <|endoftext|>) after each. Documents are:\n"
            "  fortune  entries separated by lines holding just \"%%\" (default)\n"
            "  lines    each non-blank line\n"
            "  files    each input file\n"
            "A document goes to validation when FNV-1a-64(its text) %% 100 < val-percent.\n"
            "Writes DIR/train.bin and DIR/val.bin (ACTOKENS shards) and DIR/manifest.json.\n"
            "--inputs-from reads more input paths from LIST, one a line.\n");
}

/* Appends the paths in `list` (one a line, blank lines skipped) to *inputs. */
static int read_input_list(const char *list, char ***inputs, size_t *count, size_t *cap)
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
        if (!n)
            continue;
        if (*count == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            char **p = realloc(*inputs, *cap * sizeof *p);
            if (!p)
                break;
            *inputs = p;
        }
        if (!((*inputs)[*count] = strdup(line)))
            break;
        (*count)++;
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

int cli_tokenize(int argc, char **argv)
{
    ac_tokenize_params params = ac_tokenize_default_params();
    char **inputs = NULL;
    size_t count = 0, cap = 0;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            tokenize_usage(stdout);
            rc = 0;
            goto done;
        }
        if ((v = cli_flag_value(argc, argv, &i, "--tokenizer", &missing))) {
            params.tokenizer_path = v;
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--out", &missing))) {
            params.out_dir = v;
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--val-percent", &missing))) {
            long long pct;
            if (cli_parse_int("--val-percent", v, 0, 100, &pct) != AC_OK) {
                fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
                goto done;
            }
            params.val_percent = (int)pct;
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--format", &missing))) {
            if (ac_docs_format_from_name(v, &params.format) != AC_OK) {
                fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
                goto done;
            }
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--eos", &missing))) {
            params.eos_token = v;
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--progress", &missing))) {
            if (ac_progress_mode_from_name(v, &params.progress) != AC_OK) {
                fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
                goto done;
            }
            continue;
        }
        if (!missing && (v = cli_flag_value(argc, argv, &i, "--inputs-from", &missing))) {
            if (read_input_list(v, &inputs, &count, &cap)) {
                rc = 1;
                goto done;
            }
            continue;
        }
        if (missing) {
            fprintf(stderr, "autocompress tokenize: %s needs a value\n", argv[i]);
            tokenize_usage(stderr);
            goto done;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "autocompress tokenize: unknown argument '%s'\n", argv[i]);
            tokenize_usage(stderr);
            goto done;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(inputs, cap * sizeof *p);
            if (!p) {
                fprintf(stderr, "autocompress tokenize: out of memory\n");
                rc = 1;
                goto done;
            }
            inputs = p;
        }
        if (!(inputs[count] = strdup(argv[i]))) {
            fprintf(stderr, "autocompress tokenize: out of memory\n");
            rc = 1;
            goto done;
        }
        count++;
    }
    if (!params.tokenizer_path || !params.out_dir || !count) {
        fprintf(stderr, "autocompress tokenize: --tokenizer FILE, --out DIR and at least one INPUT are required\n");
        tokenize_usage(stderr);
        goto done;
    }
    params.inputs = (const char *const *)inputs;
    params.input_count = count;
    ac_tokenize_stats s;
    if (ac_tokenize_corpus(&params, &s) != AC_OK) {
        fprintf(stderr, "autocompress tokenize: %s\n", ac_error_message());
        rc = 1;
        goto done;
    }
    printf("tokenized %zu files, %llu bytes (%s documents) in %.2f s: %.2f MB/s\n", count,
           (unsigned long long)s.input_bytes, ac_docs_format_name(params.format), s.seconds,
           s.seconds > 0 ? (double)s.input_bytes / 1e6 / s.seconds : 0.0);
    static const char *const split[2] = {"train", "val"};
    for (int k = 0; k < 2; k++)
        printf("  %-5s %8llu documents %12llu text bytes %12llu tokens -> %s/%s.bin\n", split[k],
               (unsigned long long)s.documents[k], (unsigned long long)s.bytes[k],
               (unsigned long long)s.tokens[k], params.out_dir, split[k]);
    printf("  manifest: %s/manifest.json\n", params.out_dir);
    rc = 0;
done:
    for (size_t i = 0; i < count; i++)
        free(inputs[i]);
    free(inputs);
    return rc;
}
