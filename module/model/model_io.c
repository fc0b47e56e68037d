/* Loading and saving Hugging Face Nemotron-H checkpoints: config.json plus safetensors
 * (one file or shards) <-> an ac_model's f32 arena. */
#include "model/model_internal.h"

#include "autocompress/config_json.h"
#include "autocompress/safetensors.h"
#include "util/fs_util.h"
#include "util/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- loading ---- */

/* Checkpoints name weights "model.X" (transformers), "backbone.X" (NVIDIA's releases)
 * or, for lm_head, plain "X". */
static const char *const prefixes[] = {"model.", "backbone.", ""};
enum { N_PREFIXES = 3 };

typedef struct {
    const char *dir;
    const ac_safetensors_set *set;
    unsigned char *used;  /* one flag per tensor of the set, in set order */
    const char *prefix;   /* the prefix the embeddings were found under (for messages) */
} loader;

/* The position of `view` in the set's name order. */
static size_t view_index(const ac_safetensors_set *set, const ac_tensor_view *view)
{
    size_t lo = 0, hi = ac_safetensors_set_count(set);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ac_safetensors_set_at(set, mid)->name, view->name);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

static void mark_used(loader *l, const ac_tensor_view *view)
{
    size_t i = view_index(l->set, view);
    if (i != SIZE_MAX)
        l->used[i] = 1;
}

/* The file that holds tensor `name` (for messages). */
static const char *file_of(const loader *l, const char *name)
{
    for (size_t s = 0; s < ac_safetensors_set_shard_count(l->set); s++) {
        const ac_safetensors *shard = ac_safetensors_set_shard(l->set, s);
        if (ac_safetensors_find(shard, name))
            return ac_safetensors_path(shard);
    }
    return l->dir;
}

/* Looks `name` up under the checkpoint's prefix first, then the others. */
static const ac_tensor_view *find(const loader *l, const char *name)
{
    char full[160];
    if (l->prefix) {
        snprintf(full, sizeof full, "%s%s", l->prefix, name);
        const ac_tensor_view *v = ac_safetensors_set_find(l->set, full);
        if (v)
            return v;
    }
    for (int k = 0; k < N_PREFIXES; k++) {
        snprintf(full, sizeof full, "%s%s", prefixes[k], name);
        const ac_tensor_view *v = ac_safetensors_set_find(l->set, full);
        if (v)
            return v;
    }
    return NULL;
}

static void shape_string(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
}

/* Checks that `view` has exactly `shape` and a float dtype, then converts it to f32. */
static ac_status load_view(loader *l, const ac_tensor_view *view, int ndim, const int64_t *shape, float *dst)
{
    int same = view->ndim == ndim;
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        same = same && view->shape[i] == shape[i];
        count *= (size_t)shape[i];
    }
    if (!same) {
        char have[128], want[128];
        shape_string(have, sizeof have, view->ndim, view->shape);
        shape_string(want, sizeof want, ndim, shape);
        return ac_fail(AC_ERR_INVALID, "%s: tensor '%s' has shape %s but the config needs %s", file_of(l, view->name),
                       view->name, have, want);
    }
    if (!ac_dtype_is_float(view->dtype))
        return ac_fail(AC_ERR_INVALID, "%s: tensor '%s' has dtype %s; weights must be F32, BF16, F16 or F64",
                       file_of(l, view->name), view->name, ac_dtype_name(view->dtype));
    ac_status st = ac_convert_to_f32(view->dtype, view->data, dst, count);
    if (st != AC_OK)
        return ac_fail_context(st, "%s: tensor '%s'", file_of(l, view->name), view->name);
    mark_used(l, view);
    return AC_OK;
}

static ac_status not_found(const loader *l, const char *name, const char *also)
{
    const char *p = l->prefix ? l->prefix : "model.";
    return ac_fail(AC_ERR_INVALID, "%s: tensor '%s%s' is missing from the checkpoint (also looked for it under %s)%s",
                   l->dir, p, name, !strcmp(p, "backbone.") ? "'model.' and no prefix" : "'backbone.' and no prefix",
                   also ? also : "");
}

/* Routed experts stored fused, as transformers v5 keeps them in memory:
 * layers.i.mixer.experts.up_proj [E, I, D] and experts.down_proj [E, D, I]. The arena
 * holds each layer's experts in exactly that order. */
static ac_status load_fused_experts(loader *l, const ac_model *m, int layer, int down, int *found)
{
    const ac_block_dims *b = &m->arch.layers[layer];
    char name[96];
    snprintf(name, sizeof name, "layers.%d.mixer.experts.%s", layer, down ? "down_proj" : "up_proj");
    const ac_tensor_view *v = find(l, name);
    if (!v) {
        snprintf(name + strlen(name), sizeof name - strlen(name), ".weight");
        v = find(l, name);
    }
    *found = v != NULL;
    if (!v)
        return AC_OK;
    int64_t E = b->n_experts, I = b->expert_ffn, D = m->arch.hidden;
    int64_t shape[3] = {E, down ? D : I, down ? I : D};
    float *dst = down ? m->layers[layer].experts_down : m->layers[layer].experts_up;
    return load_view(l, v, 3, shape, dst);
}

/* For "layers.I.mixer.experts.E.{up,down}_proj.weight": sets layer, expert and down. */
static int parse_expert_name(const char *name, int *layer, int *expert, int *down)
{
    int n = 0;
    char which[16];
    if (sscanf(name, "layers.%d.mixer.experts.%d.%15[a-z_].weight%n", layer, expert, which, &n) != 3 || name[n])
        return 0;
    if (!strcmp(which, "up_proj"))
        *down = 0;
    else if (!strcmp(which, "down_proj"))
        *down = 1;
    else
        return 0;
    return 1;
}

static int is_mtp(const char *name)
{
    for (int k = 0; k < N_PREFIXES; k++) {
        size_t n = strlen(prefixes[k]);
        if (!strncmp(name, prefixes[k], n) && !strncmp(name + n, "mtp.", 4))
            return 1;
    }
    return 0;
}

static ac_status load_weights(loader *l, ac_model *m)
{
    const ac_tensor_view *emb = NULL;
    for (int k = 0; k < N_PREFIXES && !emb; k++) {
        char full[64];
        snprintf(full, sizeof full, "%sembeddings.weight", prefixes[k]);
        if ((emb = ac_safetensors_set_find(l->set, full)) != NULL)
            l->prefix = prefixes[k];
    }
    for (size_t i = 0; i < m->n_params; i++) {
        const ac_param *p = &m->params[i];
        const ac_tensor_view *v = find(l, p->name);
        if (!v && !strcmp(p->name, "embeddings.weight"))
            v = find(l, "embedding.weight"); /* older NVIDIA checkpoints */
        int layer, expert, down;
        if (!v && parse_expert_name(p->name, &layer, &expert, &down) && expert == 0) {
            int fused;
            ac_status st = load_fused_experts(l, m, layer, down, &fused);
            if (st != AC_OK)
                return st;
            if (fused) {
                i += (size_t)m->arch.layers[layer].n_experts - 1; /* the other experts of this projection */
                continue;
            }
            char also[160];
            snprintf(also, sizeof also, "; neither is the fused 'layers.%d.mixer.experts.%s' there", layer,
                     down ? "down_proj" : "up_proj");
            return not_found(l, p->name, also);
        }
        if (!v) {
            if (!strcmp(p->name, "lm_head.weight"))
                return ac_fail(AC_ERR_INVALID,
                               "%s: the checkpoint has no 'lm_head.weight' but config.json sets tie_word_embeddings "
                               "false",
                               l->dir);
            return not_found(l, p->name, NULL);
        }
        ac_status st = load_view(l, v, p->ndim, p->shape, p->data);
        if (st != AC_OK)
            return st;
    }
    /* Tied embeddings: a stored lm_head copy is redundant; accept it when it fits. */
    if (m->arch.tie_embeddings) {
        const ac_tensor_view *v = find(l, "lm_head.weight");
        if (v && v->ndim == 2 && v->shape[0] == m->arch.vocab && v->shape[1] == m->arch.hidden)
            mark_used(l, v);
    }
    size_t n = ac_safetensors_set_count(l->set), extra = 0;
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = ac_safetensors_set_at(l->set, i)->name;
        if (!l->used[i] && !is_mtp(name)) {
            if (!first)
                first = name;
            extra++;
        }
    }
    if (first)
        return ac_fail(AC_ERR_INVALID,
                       "%s: unexpected tensor '%s'%s that config.json does not describe (does the config match the "
                       "weights?)",
                       file_of(l, first), first, extra > 1 ? " (and more)" : "");
    return AC_OK;
}

ac_status ac_model_load(const char *dir, ac_model **model)
{
    *model = NULL;
    char config[AC_PATH_MAX];
    ac_status st = ac_path_join(config, sizeof config, dir, "config.json");
    if (st != AC_OK)
        return st;
    ac_arch arch;
    st = ac_config_json_read(config, &arch);
    if (st != AC_OK)
        return st;
    ac_model *m = NULL;
    st = ac_model_create(&arch, &m);
    ac_arch_free(&arch);
    if (st != AC_OK)
        return ac_fail_context(st, "%s", dir);
    ac_safetensors_set *set = NULL;
    st = ac_safetensors_index_open(dir, &set);
    if (st != AC_OK) {
        ac_model_free(m);
        return st;
    }
    loader l = {.dir = dir, .set = set};
    size_t n = ac_safetensors_set_count(set);
    l.used = calloc(n ? n : 1, 1);
    if (!l.used)
        st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
    else
        st = load_weights(&l, m);
    free(l.used);
    ac_safetensors_set_close(set);
    if (st != AC_OK) {
        ac_model_free(m);
        return st;
    }
    *model = m;
    return AC_OK;
}

/* ---- saving ---- */

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Kept in f32 whatever the checkpoint dtype: the small, precision-critical tensors (all
 * norms, the SSM's A_log, D and dt_bias, and the router, which transformers keeps in
 * f32 too). */
static int keep_f32(const char *name)
{
    return ends_with(name, "norm.weight") || ends_with(name, ".A_log") || ends_with(name, ".D") ||
           ends_with(name, ".dt_bias") || ends_with(name, ".e_score_correction_bias") ||
           ends_with(name, ".gate.weight") || !strcmp(name, "norm_f.weight");
}

static ac_status save_host_model(const ac_model *model, const char *dir, ac_dtype dtype);

/* A model on a device is written from a host copy. */
ac_status ac_model_save(const ac_model *model, const char *dir, ac_dtype dtype)
{
    if (model->bf16)
        return ac_fail(AC_ERR_UNSUPPORTED, "%s: a bf16 serving copy is not saved (save the f32 model)", dir);
    if (!model->backend)
        return save_host_model(model, dir, dtype);
    ac_model *host = NULL;
    ac_status st = ac_model_to_backend(model, NULL, &host);
    if (st == AC_OK)
        st = save_host_model(host, dir, dtype);
    ac_model_free(host);
    return st;
}

static ac_status save_host_model(const ac_model *model, const char *dir, ac_dtype dtype)
{
    if (dtype != AC_DTYPE_F32 && dtype != AC_DTYPE_BF16)
        return ac_fail(AC_ERR_UNSUPPORTED, "%s: checkpoints are saved as F32 or BF16, not %s", dir,
                       ac_dtype_name(dtype));
    ac_status st = ac_make_dirs(dir);
    if (st != AC_OK)
        return st;
    size_t narrow = 0;
    if (dtype == AC_DTYPE_BF16)
        for (size_t i = 0; i < model->n_params; i++)
            if (!keep_f32(model->params[i].name))
                narrow += model->params[i].count;
    uint16_t *bf16 = NULL;
    if (narrow && !(bf16 = malloc(narrow * sizeof *bf16)))
        return ac_fail(AC_ERR_NOMEM, "%s: cannot allocate %zu bf16 weights", dir, narrow);
    ac_safetensors_writer *w = NULL;
    st = ac_safetensors_writer_init(&w);
    if (st == AC_OK)
        st = ac_safetensors_writer_set_metadata(w, "format", "pt");
    size_t used = 0;
    for (size_t i = 0; st == AC_OK && i < model->n_params; i++) {
        const ac_param *p = &model->params[i];
        char name[128];
        /* lm_head sits beside the model in transformers (NemotronHForCausalLM.lm_head). */
        snprintf(name, sizeof name, "%s%s", strcmp(p->name, "lm_head.weight") ? "model." : "", p->name);
        if (dtype == AC_DTYPE_BF16 && !keep_f32(p->name)) {
            ac_f32_to_bf16(p->data, bf16 + used, p->count);
            st = ac_safetensors_writer_add(w, name, AC_DTYPE_BF16, p->ndim, p->shape, bf16 + used);
            used += p->count;
        } else {
            st = ac_safetensors_writer_add(w, name, AC_DTYPE_F32, p->ndim, p->shape, p->data);
        }
    }
    /* Weights first, then the config: each goes through a temporary file and a rename,
     * so neither is ever half-written. */
    if (st == AC_OK)
        st = ac_safetensors_writer_write_dir(w, dir, 0);
    ac_safetensors_writer_free(w);
    free(bf16);
    if (st != AC_OK)
        return st;
    char config[AC_PATH_MAX];
    st = ac_path_join(config, sizeof config, dir, "config.json");
    return st == AC_OK ? ac_config_json_write_dtype(config, &model->arch, dtype) : st;
}
