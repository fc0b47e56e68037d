/* autocompress contract check FILE...: parse and validate deployment contracts. */
#include "cli.h"

#include "autocompress/contract.h"

#include <stdio.h>
#include <string.h>

static void contract_usage(FILE *out)
{
    fprintf(out,
            "usage: autocompress contract check FILE...\n"
            "\n"
            "Parses and validates each contract file and prints it; errors go to stderr\n"
            "as FILE:LINE: message. Exits 1 if any file fails, 2 on a usage error.\n"
            "A relative target (latency_ratio, throughput_ratio, memory_ratio) prints as\n"
            "a multiple of the parent's cost; it is resolved once the parent's cost is\n"
            "known (autocompress search predicts it).\n");
}

static int contract_check(int nfiles, char **files)
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
    return failed ? 1 : 0;
}

int cli_contract(int argc, char **argv)
{
    if (argc < 2) {
        contract_usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        contract_usage(stdout);
        return 0;
    }
    if (strcmp(sub, "check")) {
        fprintf(stderr, "autocompress contract: unknown subcommand '%s'\n", sub);
        contract_usage(stderr);
        return 2;
    }
    if (argc < 3) {
        fprintf(stderr, "autocompress contract check: no contract files given\n");
        contract_usage(stderr);
        return 2;
    }
    return contract_check(argc - 2, argv + 2);
}
