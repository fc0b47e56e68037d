/* autocompress contract check FILE...: parse and validate deployment contracts. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include "autocompress/contract.h"

#include <stdio.h>

static int check_files(int nfiles, char **files)
{
    int failed = 0;
    for (int i = 0; i < nfiles; i++) {
        ac_contract c;
        ac_status st = ac_contract_load(files[i], &c);
        if (st != AC_OK) {
            fprintf(stderr, "%s\n", ac_error_message());
            failed++;
            continue;
        }
        if (i > 0)
            printf("\n");
        ac_contract_print(&c, stdout);
    }
    fflush(stdout);
    if (failed && nfiles > 1)
        fprintf(stderr, "autocompress contract check: %d of %d contracts failed\n", failed,
                nfiles);
    return failed ? CLI_EXIT_FAILURE : CLI_EXIT_DONE;
}

static int contract_check(int argc, char **argv)
{
    const cli_spec spec = {"contract check", "FILE...",
                           "Parses and validates each contract file and prints it on stdout; errors go to\n"
                           "stderr as FILE:LINE: message, and the remaining files are still checked.\n"
                           "A relative target (latency_ratio, throughput_ratio, memory_ratio) prints as\n"
                           "a multiple of the parent's cost; it is resolved once the parent's cost is\n"
                           "known (autocompress search predicts it).\n"
                           "Exit status: 0 when every file is valid, 1 when any is not, 2 on bad usage.",
                           NULL, 0, 1, -1};
    int first;
    int rc = cli_parse(&spec, argc, argv, &first);
    return rc == CLI_PARSED ? check_files(argc - first, argv + first) : rc;
}

int cli_contract(int argc, char **argv)
{
    static const cli_command commands[] = {
        {"check", contract_check, "parse, validate and print contracts: contract check FILE..."},
    };
    return cli_dispatch("contract", commands, CLI_COUNT(commands), argc, argv);
}
