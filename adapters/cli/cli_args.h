/* Small helpers shared by the subcommands' argument parsing. */
#ifndef AC_CLI_ARGS_H
#define AC_CLI_ARGS_H

#include <stdint.h>

#include "autocompress/comm.h"
#include "autocompress/status.h"

/* Parses "1,2,3" into a malloc'd array; the message names the bad item. */
ac_status cli_parse_ids(const char *text, int32_t **ids, int *count);
/* Parses a whole decimal integer / float, naming `flag` in the error. */
ac_status cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *value);
ac_status cli_parse_float(const char *flag, const char *text, double *value);

/* ac_comm_init, and only warnings and errors in the log of ranks other than 0. */
ac_status cli_comm_init(const ac_comm_params *params, ac_comm **comm);
/* The end of a command's run over ranks: a failure (st != AC_OK) is reported, naming
 * the rank, and leaves without waiting for the other ranks; then the communicator goes. */
void cli_comm_finish(const char *command, ac_comm *comm, ac_status st);

/* One row of a command table. */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is `name` */
    const char *summary;
} cli_command;

/* Runs the command argv[1] names with (argc - 1, argv + 1) and returns its exit code.
 * `group` is the command argv[0] stands for ("costmodel"), NULL for the program itself.
 * "--help", "-h" and "help" list the commands on stdout and return 0; no command or an
 * unknown one lists them on stderr and returns 2. */
int cli_dispatch(const char *group, const cli_command *commands, int count, int argc, char **argv);

#endif
