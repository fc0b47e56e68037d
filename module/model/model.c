/* The weight arena: one allocation, laid out parameter by parameter in checkpoint order. */
#include "model/model_internal.h"
#include "kernels/kernels.h"
#include "runtime/block.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct ac_layout {
    ac_model *model;
    size_t offset;
    size_t n_params;
};

void ac_layout_param(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
{
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)shape[i];
    ac_model *m = l->model;
    if (m->arena) {
        ac_param *p = &m->params[l->n_params];
        va_list args;
        va_start(args, fmt);
        vsnprintf(p->name, sizeof p->name, fmt, args);
        va_end(args);
        p->data = m->arena + l->offset;
        p->ndim = ndim;
        memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
        p->count = count;
        if (slot)
            *slot = p->data;
    }
    l->offset += count;
    l->n_params++;
}

static void layout_model(ac_layout *l)
{
    ac_model *m = l->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden, V = a->vocab;
    ac_layout_param(l, &m->embeddings, 2, AC_SHAPE(V, D), "embeddings.weight");
    for (int i = 0; i < a->n_layers; i++) {
        ac_layer_weights *w = &m->layers[i];
        ac_layout_param(l, &w->norm, 1, AC_SHAPE(D), "layers.%d.norm.weight", i);
        ac_block(&a->layers[i])->layout(l, i, a, &a->layers[i], w);
    }
    ac_layout_param(l, &m->norm_f, 1, AC_SHAPE(D), "norm_f.weight");
    if (a->tie_embeddings)
        m->lm_head = m->embeddings;
    else
        ac_layout_param(l, &m->lm_head, 2, AC_SHAPE(V, D), "lm_head.weight");
}

ac_status ac_model_create(const ac_arch *arch, ac_model **model)
{
    return ac_model_create_on(arch, NULL, model);
}

const ac_backend *ac_model_backend(const ac_model *model)
{
    return model->backend ? model->backend : &ac_cpu_backend;
}

void ac_model_free(ac_model *model)
{
    if (!model)
        return;
    ac_arch_free(&model->arch);
    free(model->layers);
    free(model->params);
    ac_model_backend(model)->free(model->arena);
    free(model);
}

/* The model's structure (arch, layer and parameter tables) without an arena. */
static ac_status model_shell(const ac_arch *arch, ac_model **model, ac_layout *sizes)
{
    ac_model *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "model: out of memory");
    ac_status st = ac_arch_copy(&m->arch, arch);
    if (st != AC_OK) {
        free(m);
        return st;
    }
    m->layers = calloc((size_t)arch->n_layers, sizeof *m->layers);
    *sizes = (ac_layout){.model = m};
    if (m->layers)
        layout_model(sizes);
    m->params = m->layers ? calloc(sizes->n_params ? sizes->n_params : 1, sizeof *m->params) : NULL;
    if (!m->params) {
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: out of memory for %d layers", arch->n_layers);
    }
    *model = m;
    return AC_OK;
}

/* Points every weight of m into its arena. */
static void place_weights(ac_model *m, const ac_layout *sizes)
{
    m->arena_count = sizes->offset;
    m->n_params = sizes->n_params;
    ac_layout l = {.model = m};
    layout_model(&l);
}

/* Which way a copy from a model's memory (src, NULL: the host's) into be's (NULL: the
 * host's) goes; the backend that makes it is the device's. */
static ac_copy_kind copy_kind_between(const ac_backend *src, const ac_backend *be)
{
    return src && be ? AC_COPY_DEVICE_TO_DEVICE : src ? AC_COPY_DEVICE_TO_HOST : AC_COPY_HOST_TO_DEVICE;
}

ac_status ac_model_to_backend(const ac_model *model, const ac_backend *be, ac_model **out)
{
    const ac_backend *src = model->backend;
    if (src && be && src != be)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: cannot copy from %s to %s directly (copy to the host first)",
                       src->name, be->name);
    const ac_backend *mem = be ? be : &ac_cpu_backend; /* ac_model_free frees with the CPU's */
    const ac_backend *mover = src ? src : mem;
    ac_model *m = NULL;
    ac_layout sizes;
    ac_status st = model_shell(&model->arch, &m, &sizes);
    if (st != AC_OK)
        return st;
    size_t bytes = model->arena_count * sizeof(float);
    m->arena = mem->alloc_dense(bytes);
    if (!m->arena) {
        const char *why = mem->take_error();
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: cannot allocate %.1f MiB of weights on %s%s%s",
                       (double)bytes / (1 << 20), mem->name, why ? ": " : "", why ? why : "");
    }
    m->backend = be;
    place_weights(m, &sizes);
    mover->copy(m->arena, model->arena, bytes, copy_kind_between(src, be));
    const char *why = mover->take_error();
    if (why) {
        ac_model_free(m);
        return ac_fail(AC_ERR_DEVICE, "model: copying the weights from %s to %s: %s", src ? src->name : "the host",
                       mem->name, why);
    }
    *out = m;
    return AC_OK;
}

void ac_model_copy_weights(ac_model *dst, const ac_model *src)
{
    const ac_backend *mover = dst->backend ? dst->backend : src->backend ? src->backend : &ac_cpu_backend;
    mover->copy(dst->arena, src->arena, dst->arena_count * sizeof(float),
                copy_kind_between(src->backend, dst->backend));
}

ac_status ac_model_create_on(const ac_arch *arch, const ac_backend *be, ac_model **out)
{
    const ac_backend *mem = be ? be : &ac_cpu_backend; /* ac_model_free frees with the CPU's */
    ac_status st = ac_arch_validate(arch);
    ac_model *m = NULL;
    ac_layout sizes;
    if (st == AC_OK)
        st = model_shell(arch, &m, &sizes);
    if (st != AC_OK)
        return st;
    size_t bytes = sizes.offset * sizeof(float);
    m->arena = mem->alloc_dense(bytes);
    if (!m->arena) {
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: cannot allocate %zu weights on %s", sizes.offset, mem->name);
    }
    m->backend = be;
    place_weights(m, &sizes);
    mem->memset_zero(m->arena, bytes);
    *out = m;
    return AC_OK;
}

ac_status ac_model_to_device(const ac_model *model, const char *device, ac_model **out)
{
    char why[256];
    const ac_backend *be = ac_backend_select(device, why, sizeof why);
    if (!be)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: %s", why);
    return ac_model_to_backend(model, be == &ac_cpu_backend ? NULL : be, out);
}

ac_status ac_model_move_to_device(ac_model **model, const char *device)
{
    if (!*model || !device || !strcmp(device, "cpu"))
        return AC_OK;
    ac_model *from = *model;
    ac_status st = ac_model_to_device(from, device, model);
    if (st != AC_OK)
        *model = NULL;
    ac_model_free(from);
    return st;
}

void ac_model_zero(ac_model *model)
{
    ac_model_backend(model)->memset_zero(model->arena, model->arena_count * sizeof(float));
}

const char *ac_model_device(const ac_model *model)
{
    return ac_model_backend(model)->name;
}

ac_status ac_model_check_host(const ac_model *model, const char *what)
{
    if (!model->backend)
        return AC_OK;
    return ac_fail(AC_ERR_UNSUPPORTED, "model: %s needs the weights in host memory; this copy is on %s", what,
                   model->backend->name);
}

const ac_arch *ac_model_arch(const ac_model *model) { return &model->arch; }
size_t ac_model_param_count(const ac_model *model) { return model->n_params; }
const ac_param *ac_model_param(const ac_model *model, size_t i) { return &model->params[i]; }

const ac_param *ac_model_find_param(const ac_model *model, const char *name)
{
    for (size_t i = 0; i < model->n_params; i++)
        if (!strcmp(model->params[i].name, name))
            return &model->params[i];
    return NULL;
}

float *ac_model_arena(ac_model *model, size_t *count)
{
    *count = model->arena_count;
    return model->arena;
}
