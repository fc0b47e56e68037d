#include "cli_args.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/log.h"

ac_status cli_parse_ids(const char *text, int32_t **ids, int *count)
{
    size_t n = 1;
    for (const char *p = text; *p; p++)
        n += *p == ',';
    int32_t *out = malloc(n * sizeof *out);
    if (!out)
        return ac_fail(AC_ERR_NOMEM, "--ids: out of memory");
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || errno || v < 0 || v > INT32_MAX) {
            free(out);
            return ac_fail(AC_ERR_INVALID, "--ids: item %zu ('%.*s') is not a token id (a non-negative integer)", i + 1,
                           (int)strcspn(p, ","), p);
        }
        out[i] = (int32_t)v;
        p = end + (*end == ',');
    }
    *ids = out;
    *count = (int)n;
    return AC_OK;
}

ac_status cli_parse_int(const char *flag, const char *text, long long min, long long max, long long *value)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max)
        return ac_fail(AC_ERR_INVALID, "%s: '%s' is not an integer in [%lld, %lld]", flag, text, min, max);
    *value = v;
    return AC_OK;
}

ac_status cli_parse_float(const char *flag, const char *text, double *value)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno)
        return ac_fail(AC_ERR_INVALID, "%s: '%s' is not a number", flag, text);
    *value = v;
    return AC_OK;
}

int cli_exit_status(ac_status st)
{
    return st == AC_OK ? CLI_EXIT_DONE : st == AC_ERR_INVALID ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
}

int cli_exit_verdict(int met) { return met ? CLI_EXIT_DONE : CLI_EXIT_MISSED; }

/* The words of the listing: "autocompress costmodel" and its "subcommand"s. */
typedef struct {
    char prefix[96];
    const char *noun, *metavar;
} group_words;

static void print_commands(const group_words *w, const cli_command *commands, int count, FILE *out)
{
    fprintf(out, "usage: %s %s [ARGS]\n\ncommands:\n", w->prefix, w->metavar);
    for (int i = 0; i < count; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'%s %s --help' describes one.\n", w->prefix, w->metavar);
}

int cli_dispatch(const char *group, const cli_command *commands, int count, int argc, char **argv)
{
    group_words w = {.noun = group ? "subcommand" : "command", .metavar = group ? "SUBCOMMAND" : "COMMAND"};
    snprintf(w.prefix, sizeof w.prefix, "autocompress%s%s", group ? " " : "", group ? group : "");
    if (argc < 2) {
        fprintf(stderr, "%s: no %s given\n", w.prefix, w.noun);
        print_commands(&w, commands, count, stderr);
        return CLI_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_commands(&w, commands, count, stdout);
        return CLI_EXIT_DONE;
    }
    for (int i = 0; i < count; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown %s '%s'\n", w.prefix, w.noun, argv[1]);
    print_commands(&w, commands, count, stderr);
    return CLI_EXIT_USAGE;
}

/* "autocompress COMMAND: MESSAGE" on stderr, naming the rank in a multi-rank run. */
static void report_failure(const char *command, const ac_comm *comm, const char *message)
{
    if (ac_comm_size(comm) > 1)
        fprintf(stderr, "autocompress %s (rank %d of %d): %s\n", command, ac_comm_rank(comm), ac_comm_size(comm),
                message);
    else
        fprintf(stderr, "autocompress %s: %s\n", command, message);
}

ac_status cli_comm_init(const ac_comm_params *params, ac_comm **comm)
{
    ac_status st = ac_comm_init(params, comm);
    /* one copy of the progress lines: the other ranks say only what goes wrong */
    if (st == AC_OK && ac_comm_rank(*comm) > 0 && ac_log_get_level() < AC_LOG_WARN)
        ac_log_set_level(AC_LOG_WARN);
    return st;
}

void cli_comm_finish(const char *command, ac_comm *comm, ac_status st)
{
    if (st != AC_OK) {
        report_failure(command, comm, ac_error_message());
        ac_comm_mark_failed(comm);
    }
    ac_comm_free(comm);
}

