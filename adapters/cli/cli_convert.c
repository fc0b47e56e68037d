/* autocompress convert: rewrite a checkpoint in another dtype (f32 or bf16). */
#include "cli.h"
#include "cli_opts.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/model.h"

int cli_convert(int argc, char **argv)
{
    const char *model_dir = NULL, *out = NULL;
    ac_dtype dtype = AC_DTYPE_BF16;
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &model_dir, "DIR", "the checkpoint to read"),
        CLI_REQUIRED("out", &out, "DIR", "where the rewritten checkpoint goes"),
        CLI_CUSTOM("dtype", &dtype, "bf16|f32", "dtype of the written weights (default: bf16)", cli_parse_dtype),
    };
    const cli_spec spec = {"convert", NULL,
                           "Loads the checkpoint in DIR and writes it to OUT (config.json, model.safetensors)\n"
                           "with the weights stored in the chosen dtype (norms, A_log, D, dt_bias and the\n"
                           "router's correction bias stay f32); f32 holds bf16 values exactly.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc != CLI_PARSED)
        return rc;
    ac_model *model;
    ac_status st = ac_model_load(model_dir, &model);
    if (st == AC_OK) {
        st = ac_model_save(model, out, dtype);
        ac_model_free(model);
    }
    if (st != AC_OK) {
        fprintf(stderr, "autocompress convert: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    printf("%s -> %s (%s)\n", model_dir, out, ac_weights_dtype_name(dtype));
    return CLI_EXIT_DONE;
}
