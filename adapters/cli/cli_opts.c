#include "cli_opts.h"
#include "cli_args.h"
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/comm.h"
#include "autocompress/dtype.h"
#include "autocompress/progress.h"

enum { HELP_CODE = 'h', FIRST_CODE = 256 };

static void print_usage_line(const cli_spec *spec, FILE *out)
{
    fprintf(out, "usage: autocompress %s", spec->command);
    for (int i = 0; i < spec->count; i++)
        if (spec->opts[i].required)
            fprintf(out, " --%s %s", spec->opts[i].name, spec->opts[i].metavar ? spec->opts[i].metavar : "");
    fprintf(out, " [options]%s%s\n", spec->synopsis ? " " : "", spec->synopsis ? spec->synopsis : "");
}

/* " (default: 8)" from the value the destination holds before parsing. */
static void format_default(const cli_opt *o, char *buf, size_t size)
{
    buf[0] = '\0';
    if (strstr(o->help, "default"))
        return;
    switch (o->kind) {
    case CLI_INT: snprintf(buf, size, " (default: %d)", *(const int *)o->dst); break;
    case CLI_I64: snprintf(buf, size, " (default: %lld)", (long long)*(const int64_t *)o->dst); break;
    case CLI_U64: snprintf(buf, size, " (default: %llu)", (unsigned long long)*(const uint64_t *)o->dst); break;
    case CLI_FLOAT: snprintf(buf, size, " (default: %g)", *(const float *)o->dst); break;
    case CLI_DOUBLE: snprintf(buf, size, " (default: %g)", *(const double *)o->dst); break;
    case CLI_STRING:
        if (*(const char *const *)o->dst)
            snprintf(buf, size, " (default: %s)", *(const char *const *)o->dst);
        break;
    default: break;
    }
}

static void print_help(const cli_spec *spec, FILE *out)
{
    print_usage_line(spec, out);
    if (spec->description)
        fprintf(out, "\n%s\n", spec->description);
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < spec->count; i++) {
        const cli_opt *o = &spec->opts[i];
        char left[96], def[96];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        format_default(o, def, sizeof def);
        if (strlen(left) > 26)
            fprintf(out, "  %s\n  %-26s", left, "");
        else
            fprintf(out, "  %-26s", left);
        fprintf(out, " %s%s%s\n", o->help, o->required ? " (required)" : "", def);
    }
    fprintf(out, "  %-26s %s\n", "-h, --help", "print this help and exit");
}

int cli_usage_error(const cli_spec *spec, const char *message)
{
    fprintf(stderr, "autocompress %s: %s\n", spec->command, message);
    print_usage_line(spec, stderr);
    fprintf(stderr, "(autocompress %s --help lists every option)\n", spec->command);
    return CLI_EXIT_USAGE;
}

static ac_status store_value(const cli_opt *o, const char *value)
{
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", o->name);
    long long n;
    double x;
    ac_status st = AC_OK;
    switch (o->kind) {
    case CLI_STRING: *(const char **)o->dst = value; break;
    case CLI_SET: *(int *)o->dst = (int)o->min; break;
    case CLI_CALL: st = o->parse(value, o->dst); break;
    case CLI_INT:
    case CLI_I64:
    case CLI_U64:
        if ((st = cli_parse_int(flag, value, o->min, o->max, &n)) != AC_OK)
            break;
        if (o->kind == CLI_INT)
            *(int *)o->dst = (int)n;
        else if (o->kind == CLI_I64)
            *(int64_t *)o->dst = n;
        else
            *(uint64_t *)o->dst = (uint64_t)n;
        break;
    case CLI_FLOAT:
    case CLI_DOUBLE:
        if ((st = cli_parse_float(flag, value, &x)) != AC_OK)
            break;
        if (o->kind == CLI_FLOAT)
            *(float *)o->dst = (float)x;
        else
            *(double *)o->dst = x;
        break;
    }
    if (st != AC_OK && o->kind == CLI_CALL && !strstr(ac_error_message(), flag)) {
        char message[512];
        snprintf(message, sizeof message, "%s", ac_error_message());
        st = ac_fail(st, "%s: %s", flag, message);
    }
    return st;
}

static int missing_required(const cli_spec *spec, const unsigned char *seen)
{
    for (int i = 0; i < spec->count; i++)
        if (spec->opts[i].required && !seen[i]) {
            char message[128];
            snprintf(message, sizeof message, "--%s is required", spec->opts[i].name);
            return cli_usage_error(spec, message);
        }
    return CLI_PARSED;
}

static int parse_options(const cli_spec *spec, int argc, char **argv, struct option *table, unsigned char *seen)
{
    for (int i = 0; i < spec->count; i++)
        table[i] = (struct option){spec->opts[i].name, spec->opts[i].kind == CLI_SET ? no_argument : required_argument,
                                   NULL, FIRST_CODE + i};
    table[spec->count] = (struct option){"help", no_argument, NULL, HELP_CODE};
    table[spec->count + 1] = (struct option){0};
    opterr = 0;
    optind = 0; /* glibc: 0 starts a fresh scan */
    char message[512];
    for (;;) {
        int code = getopt_long(argc, argv, ":h", table, NULL);
        if (code == -1)
            return CLI_PARSED;
        if (code == HELP_CODE) {
            print_help(spec, stdout);
            return CLI_EXIT_DONE;
        }
        if (code == ':' || code == '?') {
            snprintf(message, sizeof message, code == ':' ? "'%s' needs a value" : "unknown option '%s'",
                     argv[optind - 1]);
            return cli_usage_error(spec, message);
        }
        const cli_opt *o = &spec->opts[code - FIRST_CODE];
        seen[code - FIRST_CODE] = 1;
        if (store_value(o, optarg) != AC_OK)
            return cli_usage_error(spec, ac_error_message());
    }
}

int cli_parse(const cli_spec *spec, int argc, char **argv, int *first_positional)
{
    struct option *table = calloc((size_t)spec->count + 2, sizeof *table);
    unsigned char *seen = calloc((size_t)spec->count + 1, 1);
    int rc = table && seen ? parse_options(spec, argc, argv, table, seen) : cli_usage_error(spec, "out of memory");
    if (rc == CLI_PARSED)
        rc = missing_required(spec, seen);
    free(table);
    free(seen);
    if (rc != CLI_PARSED)
        return rc;
    int positional = argc - optind;
    if (positional < spec->min_positional || (spec->max_positional >= 0 && positional > spec->max_positional)) {
        char message[160];
        if (positional > 0 && spec->max_positional == 0)
            snprintf(message, sizeof message, "unexpected argument '%s'", argv[optind]);
        else
            snprintf(message, sizeof message, "%d positional arguments given, expected %s", positional,
                     spec->synopsis ? spec->synopsis : "none");
        return cli_usage_error(spec, message);
    }
    if (first_positional)
        *first_positional = optind;
    return CLI_PARSED;
}

ac_status cli_parse_progress(const char *value, void *dst)
{
    return ac_progress_mode_from_name(value, (ac_progress_mode *)dst);
}

ac_status cli_parse_comm(const char *value, void *dst) { return ac_comm_kind_parse(value, (ac_comm_kind *)dst); }
ac_status cli_parse_weights(const char *value, void *dst) { return ac_weights_dtype_parse("--weights", value, dst); }
ac_status cli_parse_dtype(const char *value, void *dst) { return ac_weights_dtype_parse("--dtype", value, dst); }
