/* The weight arena: one allocation, laid out parameter by parameter in checkpoint order. */
#include "model/model_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Lays out parameters in two passes: the first (arena == NULL) only counts, the second
 * assigns each pointer slot and records the parameter's name and shape. */
typedef struct {
    ac_model *model;
    size_t offset;
    size_t n_params;
} layout;

static void add_param(layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add_param(layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
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

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void layout_mamba(layout *l, int i, const ac_block_dims *b, int D, int conv_bias, ac_layer_weights *w)
{
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), H = b->mamba_heads;
    add_param(l, &w->in_proj, 2, SHAPE(ac_mamba_in_proj_dim(b), D), "layers.%d.mixer.in_proj.weight", i);
    add_param(l, &w->conv_w, 3, SHAPE(conv, 1, b->conv_kernel), "layers.%d.mixer.conv1d.weight", i);
    if (conv_bias)
        add_param(l, &w->conv_b, 1, SHAPE(conv), "layers.%d.mixer.conv1d.bias", i);
    add_param(l, &w->dt_bias, 1, SHAPE(H), "layers.%d.mixer.dt_bias", i);
    add_param(l, &w->A_log, 1, SHAPE(H), "layers.%d.mixer.A_log", i);
    add_param(l, &w->D, 1, SHAPE(H), "layers.%d.mixer.D", i);
    add_param(l, &w->gate_norm, 1, SHAPE(dI), "layers.%d.mixer.norm.weight", i);
    add_param(l, &w->out_proj, 2, SHAPE(D, dI), "layers.%d.mixer.out_proj.weight", i);
}

static void layout_attention(layout *l, int i, const ac_block_dims *b, int D, ac_layer_weights *w)
{
    int q = b->attn_heads * b->attn_head_dim, kv = b->attn_kv_heads * b->attn_head_dim;
    add_param(l, &w->q_proj, 2, SHAPE(q, D), "layers.%d.mixer.q_proj.weight", i);
    add_param(l, &w->k_proj, 2, SHAPE(kv, D), "layers.%d.mixer.k_proj.weight", i);
    add_param(l, &w->v_proj, 2, SHAPE(kv, D), "layers.%d.mixer.v_proj.weight", i);
    add_param(l, &w->o_proj, 2, SHAPE(D, q), "layers.%d.mixer.o_proj.weight", i);
}

static void layout_moe(layout *l, int i, const ac_block_dims *b, int D, ac_layer_weights *w)
{
    int E = b->n_experts, I = b->expert_ffn;
    add_param(l, &w->router, 2, SHAPE(E, D), "layers.%d.mixer.gate.weight", i);
    add_param(l, &w->router_bias, 1, SHAPE(E), "layers.%d.mixer.gate.e_score_correction_bias", i);
    /* Experts are contiguous ([E, I, D] then [E, D, I]) so one expert's rows are one block,
     * yet each is its own named tensor, as in published checkpoints. */
    for (int e = 0; e < E; e++)
        add_param(l, e == 0 ? &w->experts_up : NULL, 2, SHAPE(I, D), "layers.%d.mixer.experts.%d.up_proj.weight", i, e);
    for (int e = 0; e < E; e++)
        add_param(l, e == 0 ? &w->experts_down : NULL, 2, SHAPE(D, I), "layers.%d.mixer.experts.%d.down_proj.weight", i, e);
    if (b->shared_ffn > 0) {
        add_param(l, &w->up_proj, 2, SHAPE(b->shared_ffn, D), "layers.%d.mixer.shared_experts.up_proj.weight", i);
        add_param(l, &w->down_proj, 2, SHAPE(D, b->shared_ffn), "layers.%d.mixer.shared_experts.down_proj.weight", i);
    }
}

static void layout_model(layout *l)
{
    ac_model *m = l->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden, V = a->vocab;
    add_param(l, &m->embeddings, 2, SHAPE(V, D), "embeddings.weight");
    for (int i = 0; i < a->n_layers; i++) {
        const ac_block_dims *b = &a->layers[i];
        ac_layer_weights *w = &m->layers[i];
        add_param(l, &w->norm, 1, SHAPE(D), "layers.%d.norm.weight", i);
        switch (b->kind) {
        case AC_BLOCK_MAMBA: layout_mamba(l, i, b, D, a->use_conv_bias, w); break;
        case AC_BLOCK_ATTENTION: layout_attention(l, i, b, D, w); break;
        case AC_BLOCK_MLP:
            add_param(l, &w->up_proj, 2, SHAPE(b->ffn, D), "layers.%d.mixer.up_proj.weight", i);
            add_param(l, &w->down_proj, 2, SHAPE(D, b->ffn), "layers.%d.mixer.down_proj.weight", i);
            break;
        case AC_BLOCK_MOE: layout_moe(l, i, b, D, w); break;
        }
    }
    add_param(l, &m->norm_f, 1, SHAPE(D), "norm_f.weight");
    if (a->tie_embeddings)
        m->lm_head = m->embeddings;
    else
        add_param(l, &m->lm_head, 2, SHAPE(V, D), "lm_head.weight");
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
    layout l = {.model = m};
    layout_model(&l);
    m->arena = calloc(l.offset ? l.offset : 1, sizeof(float));
    m->params = calloc(l.n_params, sizeof *m->params);
    if (!m->layers || !m->arena || !m->params) {
        ac_model_free(m);
        return ac_fail(AC_ERR_NOMEM, "model: cannot allocate %zu weights", l.offset);
    }
    m->arena_count = l.offset;
    m->n_params = l.n_params;
    l = (layout){.model = m};
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
