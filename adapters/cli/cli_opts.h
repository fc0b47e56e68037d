/* One option table per subcommand: getopt_long's struct option array and the usage text
 * are both made from it, so the parser and the help cannot drift apart. */
#ifndef AC_CLI_OPTS_H
#define AC_CLI_OPTS_H

#include <stdint.h>

#include "autocompress/status.h"

typedef enum {
    CLI_STRING, /* const char ** */
    CLI_INT,    /* int *, within [min, max] */
    CLI_I64,    /* int64_t *, within [min, max] */
    CLI_U64,    /* uint64_t *, within [min, max] (max as a long long) */
    CLI_FLOAT,  /* float * */
    CLI_DOUBLE, /* double * */
    CLI_SET,    /* int *, set to `min` when the flag is given (no value) */
    CLI_CALL,   /* parse(value, dst): enums and other values with their own syntax */
} cli_opt_kind;

typedef struct {
    const char *name; /* without the leading "--" */
    cli_opt_kind kind;
    void *dst;
    const char *metavar; /* "DIR", "N"; NULL for CLI_SET */
    const char *help;    /* one line; the default, when there is one, belongs here */
    long long min, max;  /* CLI_INT / CLI_I64 / CLI_U64 bounds; CLI_SET's value */
    int required;
    ac_status (*parse)(const char *value, void *dst);
} cli_opt;

typedef struct {
    const char *command;     /* "search", "costmodel validate" */
    const char *synopsis;    /* what follows the command in the usage line */
    const char *description; /* a paragraph printed under the usage line by --help */
    const cli_opt *opts;
    int count;
    int min_positional, max_positional; /* max < 0: any number */
} cli_spec;

enum { CLI_PARSED = -1 };

/* Parses argv (argv[0] is the command). Returns CLI_PARSED when the arguments are good
 * (positional arguments then start at argv[*first_positional]); otherwise the exit code
 * the command should return: CLI_EXIT_DONE after --help printed the usage on stdout,
 * CLI_EXIT_USAGE after a usage error naming the option went to stderr. */
int cli_parse(const cli_spec *spec, int argc, char **argv, int *first_positional);

/* A usage error found after parsing (a combination of options): the message and the
 * usage line on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_spec *spec, const char *message);

/* Common CLI_CALL parsers. */
ac_status cli_parse_progress(const char *value, void *dst); /* ac_progress_mode */
ac_status cli_parse_comm(const char *value, void *dst);     /* ac_comm_kind */
ac_status cli_parse_weights(const char *value, void *dst);  /* ac_dtype: f32 or bf16 (--weights) */
ac_status cli_parse_dtype(const char *value, void *dst);    /* ac_dtype: f32 or bf16 (--dtype) */

/* Table rows (designated, so every field not named is zero). */
#define CLI_REQUIRED(name_, dst_, meta_, help_) \
    {.name = name_, .kind = CLI_STRING, .dst = dst_, .metavar = meta_, .help = help_, .required = 1}
#define CLI_TEXT(name_, dst_, meta_, help_) {.name = name_, .kind = CLI_STRING, .dst = dst_, .metavar = meta_, .help = help_}
#define CLI_NUMBER(name_, kind_, dst_, meta_, help_, lo, hi) \
    {.name = name_, .kind = kind_, .dst = dst_, .metavar = meta_, .help = help_, .min = lo, .max = hi}
#define CLI_REAL(name_, kind_, dst_, meta_, help_) {.name = name_, .kind = kind_, .dst = dst_, .metavar = meta_, .help = help_}
#define CLI_SWITCH(name_, dst_, value, help_) {.name = name_, .kind = CLI_SET, .dst = dst_, .help = help_, .min = value}
#define CLI_CUSTOM(name_, dst_, meta_, help_, fn) \
    {.name = name_, .kind = CLI_CALL, .dst = dst_, .metavar = meta_, .help = help_, .parse = fn}

/* The --progress row of every command with long work (an ac_progress_mode *). */
#define CLI_PROGRESS_OPT(dst)                                                                                   \
    CLI_CUSTOM("progress", dst, "auto|bar|lines|json|off",                                                      \
               "progress on stderr; auto: a bar on a terminal, else plain lines (default: auto)",             \
               cli_parse_progress)

/* The rows of every command that runs data-parallel under mpirun (an ac_comm_params *). */
#define CLI_COMM_OPTS(params)                                                                                   \
    CLI_CUSTOM("comm", &(params)->kind, "auto|single|mpi|nccl",                                                 \
               "ranks: MPI when started by mpirun, else one process (default: auto)", cli_parse_comm),          \
    CLI_REAL("comm-timeout", CLI_DOUBLE, &(params)->timeout_s, "S",                                             \
             "seconds a rank waits for the others before the run fails")

#define CLI_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

#endif
