/* Pruning: the importance order, the containment check, the slice, the checkpoint. */
#include "autocompress/prune.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "blocks/block.h"
#include "util/json_util.h"
#include "util/path.h"

ac_status ac_prune_check(const ac_arch *parent, const ac_arch *child, const int *parent_layers)
{
    ac_status st = ac_arch_validate(child);
    if (st != AC_OK)
        return st;
    if (child->vocab != parent->vocab || child->tie_embeddings != parent->tie_embeddings ||
        child->use_conv_bias != parent->use_conv_bias)
        return ac_fail(AC_ERR_INVALID, "prune: vocab_size, tie_word_embeddings and use_conv_bias must be the "
                       "parent's (%d, %d, %d), not %d, %d, %d", parent->vocab, parent->tie_embeddings,
                       parent->use_conv_bias, child->vocab, child->tie_embeddings, child->use_conv_bias);
    if (child->hidden > parent->hidden)
        return ac_fail(AC_ERR_INVALID, "prune: hidden_size %d exceeds the parent's %d", child->hidden, parent->hidden);
    if (child->n_layers > parent->n_layers)
        return ac_fail(AC_ERR_INVALID, "prune: %d layers, more than the parent's %d", child->n_layers,
                       parent->n_layers);
    if (!parent_layers && child->n_layers != parent->n_layers)
        return ac_fail(AC_ERR_INVALID, "prune: %d layers of the parent's %d, but no parent_layers say which were "
                       "kept", child->n_layers, parent->n_layers);
    for (int i = 0; i < child->n_layers; i++) {
        int p = parent_layers ? parent_layers[i] : i, prev = i > 0 && parent_layers ? parent_layers[i - 1] : -1;
        if (p < 0 || p >= parent->n_layers || p <= prev)
            return ac_fail(AC_ERR_INVALID, "prune: parent_layers[%d] = %d is not a parent layer after %d (the parent "
                           "has %d)", i, p, prev, parent->n_layers);
        if ((st = ac_block(&child->layers[i])->check_cut(i, p, &child->layers[i], &parent->layers[p])) != AC_OK)
            return st;
    }
    return AC_OK;
}

ac_status ac_prune(const ac_model *parent, const ac_arch *child, const ac_prune_params *params, ac_model **out)
{
    *out = NULL;
    const ac_arch *pa = ac_model_arch(parent);
    ac_status st = ac_prune_check(pa, child, params->parent_layers);
    if (st != AC_OK || !params->importance)
        return st == AC_OK ? ac_model_slice(parent, child, params->parent_layers, 0, out) : st;
    ac_importance imp;
    ac_model *ordered = NULL;
    if ((st = ac_importance_copy(&imp, params->importance)) != AC_OK)
        return st;
    st = ac_model_slice(parent, pa, NULL, 0, &ordered);
    if (st == AC_OK)
        st = ac_model_reorder(ordered, &imp);
    if (st == AC_OK)
        st = ac_model_slice(ordered, child, params->parent_layers, 0, out);
    ac_model_free(ordered);
    ac_importance_free(&imp);
    return st;
}

ac_status ac_prune_read_parent_layers(const char *search_json, int n_layers, int **parent_layers)
{
    *parent_layers = NULL;
    cJSON *root;
    ac_status st = ac_read_json_file(search_json, (size_t)64 << 20, &root);
    if (st != AC_OK)
        return st;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "parent_layers");
    int *out = NULL;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n_layers)
        st = ac_fail(AC_ERR_INVALID, "%s: parent_layers must be an array of %d layer indices, not %s", search_json,
                     n_layers, cJSON_IsArray(a) ? "one of another length" : ac_json_type_name(a));
    else if (!(out = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *out)))
        st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", search_json);
    for (int i = 0; st == AC_OK && i < n_layers; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble)
            st = ac_fail(AC_ERR_INVALID, "%s: parent_layers[%d] is %s, not a layer index", search_json, i,
                         ac_json_type_name(v));
        else
            out[i] = (int)v->valuedouble;
    }
    cJSON_Delete(root);
    if (st != AC_OK)
        free(out);
    else
        *parent_layers = out;
    return st;
}

static ac_status copy_if_present(const char *from_dir, const char *to_dir, const char *name)
{
    char from[AC_PATH_MAX], to[AC_PATH_MAX];
    ac_status st = ac_path_join(from, sizeof from, from_dir, name);
    if (st == AC_OK)
        st = ac_path_join(to, sizeof to, to_dir, name);
    if (st != AC_OK)
        return st;
    struct stat sb;
    if (stat(from, &sb) != 0)
        return errno == ENOENT ? AC_OK : ac_fail(AC_ERR_IO, "%s: cannot stat: %s", from, strerror(errno));
    char *text;
    size_t len;
    st = ac_read_text_file(from, (size_t)1 << 30, &text, &len);
    if (st == AC_OK) {
        st = ac_write_text_file(to, text);
        free(text);
    }
    return st;
}

ac_status ac_prune_save(const ac_model *model, const char *parent_dir, const char *out_dir, ac_dtype dtype)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "generation_config.json"};
    ac_status st = ac_model_save(model, out_dir, dtype);
    for (size_t i = 0; st == AC_OK && parent_dir && i < sizeof files / sizeof files[0]; i++)
        st = copy_if_present(parent_dir, out_dir, files[i]);
    return st;
}
