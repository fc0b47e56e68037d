#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"contract", cli_contract, "check a deployment contract: contract check FILE..."},
    {"info", cli_info, "describe a checkpoint: info --model DIR"},
    {"logits", cli_logits, "logits of token ids as .npy: logits --model DIR --ids 1,2,3 [--out F.npy]"},
    {"generate", cli_generate, "continue token ids: generate --model DIR --ids 1,2 --max-tokens N"},
    {"convert", cli_convert, "rewrite a checkpoint: convert --model DIR --out DIR [--dtype bf16|f32]"},
    {"train", cli_train, "train on token shards: train --data DIR --out DIR (--config F | --model DIR)"},
    {"distill", cli_distill, "distill a student: distill --teacher DIR --student DIR --data DIR --out DIR"},
    {"tokenize", cli_tokenize, "token shards: tokenize --tokenizer FILE --out DIR INPUT..."},
    {"profile", cli_profile, "per-layer cost tables: profile --model DIR --contract FILE --out tables.json"},
    {"costmodel", cli_costmodel, "check the cost model: costmodel validate --model DIR --contract F --tables F"},
    {"search", cli_search, "architecture search: search --model DIR --contract F --tables F --data DIR --out DIR"},
    {"serve", cli_serve, "OpenAI-compatible server with hot swap: serve --model DIR [--config F] [--port N]"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: autocompress COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        print_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "autocompress: unknown command '%s'\n", argv[1]);
    print_usage(stderr);
    return 2;
}
