/* The autocompress command: one function per subcommand, each in its own file. */
#ifndef AC_CLI_H
#define AC_CLI_H

/* Each returns the process exit code: 0 on success, 1 on a failure it has reported,
 * 2 on a usage error. argv[0] is the subcommand name. */
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
