/* autocompress contract check FILE...: parse and validate deployment contracts. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include "autocompress/config_json.h"
#include "autocompress/contract.h"

#include <stdio.h>

/* `parent` NULL: the contracts alone. */
static int check_files(int nfiles, char **files, const ac_arch *parent)
{
    int failed = 0;
    for (int i = 0; i < nfiles; i++) {
        ac_contract c;
        ac_status st = ac_contract_load(files[i], &c);
        if (st == AC_OK && parent)
            st = ac_contract_check_parent(&c, parent);
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
    const char *parent_dir = NULL;
    const cli_opt opts[] = {
        CLI_TEXT("parent", &parent_dir, "DIR", "also check each contract against this parent checkpoint"),
    };
    const cli_spec spec = {"contract check", "FILE...",
                           "Parses and validates each contract file and prints it on stdout; errors go to\n"
                           "stderr as FILE:LINE: message, and the remaining files are still checked.\n"
                           "A relative target (latency_ratio, throughput_ratio, memory_ratio) prints as\n"
                           "a multiple of the parent's cost; it is resolved once the parent's cost is\n"
                           "known (autocompress search predicts it).\n"
                           "With --parent, the rules that need the parent's architecture are checked too\n"
                           "(every routed_experts candidate >= each MoE layer's top_k), as profile,\n"
                           "search, measure and compress check them; a parent that cannot be read counts\n"
                           "as a file that is not valid.\n"
                           "Exit status: 0 when every file is valid, 1 when any is not, 2 on bad usage.",
                           opts, CLI_COUNT(opts), 1, -1};
    int first;
    int rc = cli_parse(&spec, argc, argv, &first);
    if (rc != CLI_PARSED)
        return rc;
    if (!parent_dir)
        return check_files(argc - first, argv + first, NULL);
    char path[4096];
    ac_arch parent;
    snprintf(path, sizeof path, "%s/config.json", parent_dir);
    if (ac_config_json_read(path, &parent) != AC_OK) {
        fprintf(stderr, "autocompress contract check: --parent: %s\n", ac_error_message());
        return 1;
    }
    rc = check_files(argc - first, argv + first, &parent);
    ac_arch_free(&parent);
    return rc;
}

int cli_contract(int argc, char **argv)
{
    static const cli_command commands[] = {
        {"check", contract_check, "parse, validate and print contracts: contract check [--parent DIR] FILE..."},
    };
    return cli_dispatch("contract", commands, CLI_COUNT(commands), argc, argv);
}
