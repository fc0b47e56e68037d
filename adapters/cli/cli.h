/* The autocompress command: one function per subcommand, each in its own file. */
#ifndef AC_CLI_H
#define AC_CLI_H

#include "autocompress/status.h"

/* The exit status of every command (the README's table). A command's "targets" are those
 * of its contract, judged on what the command produced: search on the chosen
 * architecture's predicted cost, measure and compress on the measured cost; a command
 * without targets never returns CLI_EXIT_MISSED. */
enum {
    CLI_EXIT_DONE = 0,    /* done, and every target met */
    CLI_EXIT_FAILURE = 1, /* failed: a file, a run, memory or a device (reported on stderr) */
    CLI_EXIT_USAGE = 2,   /* bad usage: an option, a combination, or an input that is not valid */
    CLI_EXIT_MISSED = 3,  /* done, and a target missed */
};

/* The "Exit status:" sentence of every --help, with and without targets; `met` says
 * when the targets count as met. */
#define CLI_EXIT_USAGE_TEXT "1 on a failure, 2 on bad usage\n(an option, or an input that is not valid)."
#define CLI_EXIT_TEXT "Exit status: 0 when done, " CLI_EXIT_USAGE_TEXT
#define CLI_EXIT_TARGETS_TEXT(met) \
    "Exit status: 0 when done and " met ",\n3 when done and a target is missed, " CLI_EXIT_USAGE_TEXT

/* CLI_EXIT_DONE for AC_OK, CLI_EXIT_USAGE for AC_ERR_INVALID, CLI_EXIT_FAILURE otherwise. */
int cli_exit_status(ac_status st);
/* CLI_EXIT_DONE when every target is met, else CLI_EXIT_MISSED. */
int cli_exit_verdict(int met);

/* Each returns the process exit code (CLI_EXIT_*) after reporting any failure on stderr.
 * argv[0] is the subcommand name. */
int cli_contract(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_distill(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_profile(int argc, char **argv);
int cli_costmodel(int argc, char **argv);
int cli_search(int argc, char **argv);
int cli_prune(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_measure(int argc, char **argv);
int cli_compress(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_admin(int argc, char **argv);

#endif
