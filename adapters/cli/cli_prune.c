/* autocompress prune: the importance-ordered parent sliced to an architecture, written as
 * a Hugging Face checkpoint with the parent's tokenizer. */
#include "cli.h"
#include "cli_opts.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/config_json.h"
#include "autocompress/inputs.h"
#include "autocompress/model.h"
#include "autocompress/prune.h"
#include "util/path.h"

typedef struct {
    const char *model_dir, *arch_path, *out_dir, *importance_path, *search_path;
    int ordered;
    ac_dtype dtype;
} prune_args;

static int parse_args(int argc, char **argv, prune_args *a)
{
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &a->model_dir, "DIR", "the parent checkpoint"),
        CLI_REQUIRED("arch", &a->arch_path, "FILE", "the architecture (arch.json of a search)"),
        CLI_REQUIRED("out", &a->out_dir, "DIR", "the pruned checkpoint"),
        CLI_TEXT("importance", &a->importance_path, "FILE", "importance scores (default: importance.safetensors beside --arch)"),
        CLI_TEXT("search", &a->search_path, "FILE", "search.json naming the kept layers (default: the one beside --arch)"),
        CLI_SWITCH("ordered", &a->ordered, 1, "the model is already in importance order (search --train-weights)"),
        CLI_CUSTOM("dtype", &a->dtype, "f32|bf16", "weights' dtype in the checkpoint (default: f32)", cli_parse_dtype),
    };
    const cli_spec spec = {"prune", NULL,
                           "Reorders the parent by importance (channels, heads and experts in descending score),\n"
                           "keeps the prefixes and layers the architecture names, and writes a nemotron_h(_puzzle)\n"
                           "checkpoint with the parent's tokenizer files. An architecture that does not fit\n"
                           "inside the parent is refused, naming the layer and field.\n"
                           CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

/* *found = PATH of NAME in the directory of `beside` when that file exists, else NULL. */
static ac_status sibling(const char *beside, const char *name, char *path, size_t size, const char **found)
{
    char copy[AC_PATH_MAX];
    *found = NULL;
    /* dirname writes into its argument: a copy, refused (not cut) when too long */
    ac_status st = ac_path_suffixed(copy, sizeof copy, beside, "");
    if (st == AC_OK)
        st = ac_path_join(path, size, dirname(copy), name);
    struct stat sb;
    if (st == AC_OK && stat(path, &sb) == 0)
        *found = path;
    return st;
}

typedef struct {
    ac_model *parent, *child;
    ac_arch arch;
    ac_importance importance;
    int *parent_layers;
} prune_run;

/* Every file before the parent's weights are read, and a place for the result. */
static ac_status check_inputs(const prune_args *a, const char *importance, const char *search)
{
    ac_status st = ac_input_model("--model", a->model_dir, 1, NULL);
    if (st == AC_OK)
        st = ac_input_file("--arch", a->arch_path);
    if (st == AC_OK && importance && !a->ordered)
        st = ac_input_file("--importance", importance);
    if (st == AC_OK && search)
        st = ac_input_file("--search", search);
    if (st == AC_OK)
        st = ac_input_out_dir("--out", a->out_dir);
    return st;
}

static ac_status load_inputs(const prune_args *a, prune_run *r)
{
    char imp_path[AC_PATH_MAX], search_path[AC_PATH_MAX];
    const char *importance = a->importance_path, *search = a->search_path;
    ac_status st = AC_OK;
    if (!importance && !a->ordered)
        st = sibling(a->arch_path, "importance.safetensors", imp_path, sizeof imp_path, &importance);
    if (st == AC_OK && !search)
        st = sibling(a->arch_path, "search.json", search_path, sizeof search_path, &search);
    if (st != AC_OK)
        return st;
    if (!importance && !a->ordered)
        return ac_fail(AC_ERR_INVALID, "no importance.safetensors beside %s: give --importance FILE, or --ordered when "
                       "the model is already in importance order", a->arch_path);
    st = check_inputs(a, importance, search);
    if (st == AC_OK)
        st = ac_model_load(a->model_dir, &r->parent);
    if (st == AC_OK)
        st = ac_config_json_read(a->arch_path, &r->arch);
    if (st == AC_OK && search)
        st = ac_prune_read_parent_layers(search, r->arch.n_layers, &r->parent_layers);
    if (st == AC_OK && !a->ordered)
        st = ac_importance_load(importance, ac_model_arch(r->parent), &r->importance);
    return st;
}

int cli_prune(int argc, char **argv)
{
    prune_args a = {.dtype = AC_DTYPE_F32};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_PARSED)
        return rc;
    prune_run r;
    memset(&r, 0, sizeof r);
    ac_status st = load_inputs(&a, &r);
    ac_prune_params p = {.importance = a.ordered ? NULL : &r.importance, .parent_layers = r.parent_layers};
    if (st == AC_OK)
        st = ac_prune(r.parent, &r.arch, &p, &r.child);
    if (st == AC_OK)
        st = ac_prune_save(r.child, a.model_dir, a.out_dir, a.dtype);
    if (st == AC_OK) {
        ac_param_counts parent = ac_arch_param_counts(ac_model_arch(r.parent)), child = ac_arch_param_counts(&r.arch);
        printf("prune: %s -> %s: %lld of %lld parameters (%.1f%%), %d of %d layers\n", a.model_dir, a.out_dir,
               (long long)child.total, (long long)parent.total, 100.0 * (double)child.total / (double)parent.total,
               r.arch.n_layers, ac_model_arch(r.parent)->n_layers);
        ac_arch_print(&r.arch, stdout);
    } else {
        fprintf(stderr, "autocompress prune: %s\n", ac_error_message());
    }
    ac_model_free(r.child);
    ac_model_free(r.parent);
    ac_importance_free(&r.importance);
    ac_arch_free(&r.arch);
    free(r.parent_layers);
    return cli_exit_status(st);
}
