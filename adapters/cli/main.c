#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include "autocompress/host.h"

#include <stdio.h>
#include <string.h>

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
    {"prune", cli_prune, "slice the importance-ordered parent to an architecture: prune --model DIR --arch F --out DIR"},
    {"eval", cli_eval, "a compressed model against its teacher: eval --model DIR --teacher PARENT --data DIR"},
    {"measure", cli_measure, "a checkpoint's cost against its contract: measure --model DIR --contract FILE"},
    {"compress", cli_compress, "the whole pipeline: compress --model DIR --contract FILE --data DIR --out DIR"},
    {"serve", cli_serve, "OpenAI-compatible server with hot swap: serve --model DIR [--config F] [--port N]"},
    {"admin", cli_admin, "a running server's jobs and model: admin status|recompress|jobs|cancel|resume|swap|policy"},
};

/* What this build can do beyond the CPU engine, for --version. */
static const char *const features[] = {
#ifdef AC_HAVE_CUDA
    " cuda",
#else
    "",
#endif
#ifdef AC_HAVE_MPI
    " mpi",
#else
    "",
#endif
#ifdef AC_HAVE_NCCL
    " nccl",
#else
    "",
#endif
};

/* The commands that run data-parallel; under mpirun any other would run once per rank,
 * every copy writing the same files. */
static int runs_over_ranks(const char *command)
{
    const char *parallel[] = {"train", "distill", "search", "profile"};
    for (size_t i = 0; i < sizeof parallel / sizeof parallel[0]; i++)
        if (!strcmp(command, parallel[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
        printf("autocompress %s\nbuilt with:%s%s%s\nOpenBLAS kernels: %s\n", AC_VERSION, features[0], features[1],
               features[2], ac_cpu_blas_core());
        return CLI_EXIT_DONE;
    }
    int ranks = ac_comm_launched_ranks();
    if (ranks > 1 && argc > 1 && !runs_over_ranks(argv[1])) {
        fprintf(stderr, "autocompress %s: started by mpirun with %d ranks, but only train, distill, search and "
                        "profile run over ranks: run it as one process\n", argv[1], ranks);
        return CLI_EXIT_USAGE;
    }
    return cli_dispatch(NULL, commands, CLI_COUNT(commands), argc, argv);
}
