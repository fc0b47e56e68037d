/* autocompress convert: rewrite a checkpoint in another dtype (f32 or bf16), its
 * tokenizer files beside it. */
#include "cli.h"
#include "cli_opts.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/model.h"
#include "autocompress/prune.h"

int cli_convert(int argc, char **argv)
{
    const char *model_dir = NULL, *out = NULL;
    ac_dtype dtype = AC_DTYPE_F32; /* lossless, as prune writes */
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &model_dir, "DIR", "the checkpoint to read"),
        CLI_REQUIRED("out", &out, "DIR", "where the rewritten checkpoint goes"),
        CLI_CUSTOM("dtype", &dtype, "bf16|f32", "dtype of the written weights (default: f32)", cli_parse_dtype),
    };
    const cli_spec spec = {"convert", NULL,
                           "Loads the checkpoint in DIR and writes it to OUT (config.json, model.safetensors)\n"
                           "with the weights stored in the chosen dtype (norms, A_log, D, dt_bias and the\n"
                           "router's correction bias stay f32); f32, the default, holds every weight exactly\n"
                           "(bf16 values too), bf16 rounds f32 weights. The tokenizer files of DIR that exist\n"
                           "(tokenizer.json, tokenizer_config.json, special_tokens_map.json,\n"
                           "generation_config.json) are copied to OUT.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc != CLI_PARSED)
        return rc;
    ac_model *model;
    ac_status st = ac_model_load(model_dir, &model);
    if (st == AC_OK) {
        st = ac_prune_save(model, model_dir, out, dtype);
        ac_model_free(model);
    }
    if (st != AC_OK) {
        fprintf(stderr, "autocompress convert: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    printf("%s -> %s (%s)\n", model_dir, out, ac_weights_dtype_name(dtype));
    return CLI_EXIT_DONE;
}
