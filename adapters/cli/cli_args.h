/* Small helpers shared by the subcommands' argument parsing. */
#ifndef AC_CLI_ARGS_H
#define AC_CLI_ARGS_H

#include <stdint.h>

#include "autocompress/status.h"

/* Parses "1,2,3" into a malloc'd array; the message names the bad item. */
ac_status cli_parse_ids(const char *text, int32_t **ids, int *count);
/* Parses a whole decimal integer / float, naming `flag` in the error. */
ac_status cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *value);
ac_status cli_parse_float(const char *flag, const char *text, double *value);
/* The value of "--flag VALUE" or "--flag=VALUE" at argv[*i]; NULL when argv[*i] is not
 * that flag. Advances *i past a separate value. Sets *missing when the value is absent. */
const char *cli_flag_value(int argc, char **argv, int *i, const char *flag, int *missing);

#endif
