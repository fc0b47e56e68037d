/* autocompress info --model DIR: load a checkpoint and describe it. */
#include "cli.h"
#include "cli_opts.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "autocompress/model.h"
#include "autocompress/safetensors.h"

/* 1234567 -> "1,234,567" */
static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%" PRId64, v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < size; i++) {
        if (i > 0 && digits[i - 1] != '-' && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_bytes(const char *label, uint64_t bytes)
{
    char g[32];
    printf("  %-22s %s bytes (%.2f GiB)\n", label, grouped((int64_t)bytes, g, sizeof g),
           (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

/* The stored bytes per dtype, skipping what the loader ignores (mtp.*). */
static int print_checkpoint_bytes(const char *dir)
{
    ac_safetensors_set *set;
    if (ac_safetensors_index_open(dir, &set) != AC_OK) {
        fprintf(stderr, "autocompress info: %s\n", ac_error_message());
        return CLI_EXIT_FAILURE;
    }
    uint64_t per_dtype[AC_DTYPE_COUNT] = {0}, total = 0;
    size_t tensors[AC_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < ac_safetensors_set_count(set); i++) {
        const ac_tensor_view *v = ac_safetensors_set_at(set, i);
        if (strstr(v->name, "mtp.") == v->name || strstr(v->name, ".mtp."))
            continue;
        per_dtype[v->dtype] += v->nbytes;
        tensors[v->dtype]++;
        total += v->nbytes;
    }
    print_bytes("in the checkpoint:", total);
    for (int d = 0; d < AC_DTYPE_COUNT; d++)
        if (tensors[d])
            printf("    %-20s %zu tensors, %" PRIu64 " bytes\n", ac_dtype_name((ac_dtype)d), tensors[d],
                   per_dtype[d]);
    printf("  %-22s %zu\n", "safetensors files:", ac_safetensors_set_shard_count(set));
    ac_safetensors_set_close(set);
    return CLI_EXIT_DONE;
}

static void describe(const char *dir, const ac_model *model)
{
    const ac_arch *arch = ac_model_arch(model);
    printf("model: %s\n", dir);
    ac_arch_print(arch, stdout);
    ac_param_counts c = ac_arch_param_counts(arch);
    char g1[32], g2[32], g3[32];
    printf("parameters: total %s, active %s, embedding %s\n", grouped(c.total, g1, sizeof g1),
           grouped(c.active, g2, sizeof g2), grouped(c.embedding, g3, sizeof g3));
}

int cli_info(int argc, char **argv)
{
    const char *dir = NULL;
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &dir, "DIR", "the checkpoint: config.json and its safetensors"),
    };
    const cli_spec spec = {"info", NULL,
                           "Loads DIR/config.json and its safetensors (checking every tensor's name and\n"
                           "shape) and prints the architecture, the parameter counts (total, active per\n"
                           "token, embedding) and the weight bytes: per dtype as stored, and as loaded (f32).\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc != CLI_PARSED)
        return rc;
    ac_model *model;
    ac_status st = ac_model_load(dir, &model);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress info: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    describe(dir, model);
    size_t count;
    ac_model_arena(model, &count);
    printf("weights:\n");
    rc = print_checkpoint_bytes(dir);
    print_bytes("in f32 (loaded):", (uint64_t)count * sizeof(float));
    ac_model_free(model);
    fflush(stdout);
    return rc;
}
