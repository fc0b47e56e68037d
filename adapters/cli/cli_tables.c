#include "cli_tables.h"

#include <stdio.h>

ac_status cli_read_tables(const char *command, const char *path, const ac_contract *contract, int foreign,
                          ac_cost_tables **tables)
{
    char differs[1024];
    ac_status st = ac_cost_tables_read(path, tables);
    if (st == AC_OK)
        st = ac_cost_tables_check_machine(*tables, path, contract, foreign, differs, sizeof differs);
    if (st != AC_OK) {
        ac_cost_tables_free(*tables);
        *tables = NULL;
    } else if (differs[0]) {
        fprintf(stderr, "autocompress %s: warning: %s were measured elsewhere (--foreign-tables): %s\n", command, path,
                differs);
    }
    return st;
}
