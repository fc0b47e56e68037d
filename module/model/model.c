/* The weight arena: one allocation, laid out parameter by parameter in checkpoint order. */
#include "model/model_internal.h"
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
    ac_status st = ac_arch_validate(arch);
    if (st != AC_OK)
        return st;
    ac_model *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "model: out of memory");
    st = ac_arch_copy(&m->arch, arch);
    if (st != AC_OK) {
        free(m);
        return st;
    }
    m->layers = calloc((size_t)arch->n_layers, sizeof *m->layers);
    if (!m->layers) {
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: out of memory for %d layers", arch->n_layers);
    }
    ac_layout l = {.model = m};
    layout_model(&l);
    m->arena = calloc(l.offset ? l.offset : 1, sizeof(float));
    m->params = calloc(l.n_params, sizeof *m->params);
    if (!m->layers || !m->arena || !m->params) {
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: cannot allocate %zu weights", l.offset);
    }
    m->arena_count = l.offset;
    m->n_params = l.n_params;
    l = (ac_layout){.model = m};
    layout_model(&l);
    *model = m;
    return AC_OK;
}

void ac_model_free(ac_model *model)
{
    if (!model)
        return;
    ac_arch_free(&model->arch);
    free(model->layers);
    free(model->params);
    free(model->arena);
    free(model);
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
