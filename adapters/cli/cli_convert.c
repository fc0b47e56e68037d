/* autocompress convert: rewrite a checkpoint in another dtype (f32 or bf16). */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

#include "autocompress/model.h"

int cli_convert(int argc, char **argv)
{
    const char *model_dir = NULL, *out = NULL, *dtype_name = "bf16";
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = cli_flag_value(argc, argv, &i, "--model", &missing)))
            model_dir = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--out", &missing)))
            out = v;
        else if ((v = cli_flag_value(argc, argv, &i, "--dtype", &missing)))
            dtype_name = v;
        else {
            fprintf(stderr, "autocompress convert: %s '%s'\n", missing ? "missing value for" : "unknown argument", argv[i]);
            return 2;
        }
    }
    ac_dtype dtype = !strcmp(dtype_name, "bf16") ? AC_DTYPE_BF16 : !strcmp(dtype_name, "f32") ? AC_DTYPE_F32 : AC_DTYPE_COUNT;
    if (!model_dir || !out || dtype == AC_DTYPE_COUNT) {
        fprintf(stderr, "usage: autocompress convert --model DIR --out DIR [--dtype bf16|f32]\n");
        return 2;
    }
    ac_model *model;
    ac_status st = ac_model_load(model_dir, &model);
    if (st == AC_OK) {
        st = ac_model_save(model, out, dtype);
        ac_model_free(model);
    }
    if (st != AC_OK) {
        fprintf(stderr, "autocompress convert: %s\n", ac_error_message());
        return 1;
    }
    printf("%s -> %s (%s)\n", model_dir, out, dtype_name);
    return 0;
}
