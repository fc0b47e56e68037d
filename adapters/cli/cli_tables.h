/* Cost tables as every command reads them: refused when measured elsewhere. */
#ifndef AC_CLI_TABLES_H
#define AC_CLI_TABLES_H

#include "cli_opts.h"

#include "autocompress/contract.h"
#include "autocompress/cost.h"

#define CLI_FOREIGN_TABLES(dst)                                                                          \
    CLI_SWITCH("foreign-tables", dst, 1,                                                                 \
               "use cost tables measured elsewhere (another machine, thread count, device or version); " \
               "a warning names what differs")

/* Reads the tables at `path` and checks their fingerprint against `contract` and this
 * machine (ac_cost_tables_check_machine): refused unless `foreign`, when a warning on
 * stderr, prefixed by `command`, names what differs. */
ac_status cli_read_tables(const char *command, const char *path, const ac_contract *contract, int foreign,
                          ac_cost_tables **tables);

#endif
