/* The weight arena: one allocation, laid out parameter by parameter in checkpoint order. */
#include "model/model_internal.h"
#include "kernels/kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every parameter in checkpoint order; layer i's slots in layers[i], or all in layers[0]
 * when only counting (one_struct). */
static void layout_model(ac_layout *l, ac_model *m, ac_layer_weights *layers, int one_struct)
{
    const ac_arch *a = &m->arch;
    int D = a->hidden, V = a->vocab;
    ac_layout_product(l, &m->embeddings, 2, AC_SHAPE(V, D), "embeddings.weight");
    for (int i = 0; i < a->n_layers; i++)
        ac_layout_block(l, i, a, &a->layers[i], &layers[one_struct ? 0 : i]);
    ac_layout_param(l, &m->norm_f, 1, AC_SHAPE(D), "norm_f.weight");
    if (a->tie_embeddings)
        m->lm_head = m->embeddings;
    else
        ac_layout_product(l, &m->lm_head, 2, AC_SHAPE(V, D), "lm_head.weight");
}

/* A model shell on the stack that only counts (no arena, no tables). */
static ac_model counting_model(const ac_arch *arch, ac_dtype weights)
{
    ac_model m;
    memset(&m, 0, sizeof m);
    m.arch = *arch; /* shallow: not freed */
    m.bf16 = weights == AC_DTYPE_BF16;
    return m;
}

size_t ac_arch_weight_bytes(const ac_arch *arch, ac_dtype weights)
{
    ac_model m = counting_model(arch, weights);
    ac_layer_weights scratch;
    ac_layout l = {.bf16 = m.bf16};
    layout_model(&l, &m, &scratch, 1);
    return ac_layout_bytes(&l);
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

/* The model's structure (arch, layer and parameter tables) without an arena; bf16: a
 * serving copy's layout. */
static ac_status model_shell(const ac_arch *arch, int bf16, ac_model **model, ac_layout *sizes)
{
    ac_model *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "model: out of memory");
    m->bf16 = bf16;
    ac_status st = ac_arch_copy(&m->arch, arch);
    if (st != AC_OK) {
        free(m);
        return st;
    }
    m->layers = calloc((size_t)arch->n_layers, sizeof *m->layers);
    *sizes = (ac_layout){.bf16 = bf16};
    if (m->layers)
        layout_model(sizes, m, m->layers, 0);
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
    ac_layout l = {.bf16 = m->bf16, .arena = m->arena, .arena_count = m->arena_count, .params = m->params};
    layout_model(&l, m, m->layers, 0);
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
    if (model->bf16)
        return ac_fail(AC_ERR_UNSUPPORTED,
                       "model: a bf16 serving copy cannot be copied (make another from the f32 model)");
    if (src && be && src != be)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: cannot copy from %s to %s directly (copy to the host first)",
                       src->name, be->name);
    const ac_backend *mem = be ? be : &ac_cpu_backend; /* ac_model_free frees with the CPU's */
    const ac_backend *mover = src ? src : mem;
    ac_model *m = NULL;
    ac_layout sizes;
    ac_status st = model_shell(&model->arch, 0, &m, &sizes);
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
        st = model_shell(arch, 0, &m, &sizes);
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

/* The serving copy's arena built on the host: every float parameter as it is, every
 * product weight rounded to bf16; then, for a device, one copy to its memory (on the
 * host the arena is the image, so the f32 model and its copy are all it holds). */
static ac_status fill_bf16_copy(ac_model *m, const ac_model *model, const ac_backend *mem, size_t bytes)
{
    char *image = m->backend ? malloc(bytes) : (char *)m->arena;
    if (!image)
        return ac_fail(AC_ERR_NOMEM, "model: cannot stage %.1f MiB of bf16 weights", (double)bytes / (1 << 20));
    memset(image, 0, bytes); /* the padding too */
    for (size_t i = 0; i < m->n_params; i++) {
        const ac_param *from = &model->params[i], *to = &m->params[i];
        char *at = image + ((const char *)to->data - (const char *)m->arena);
        if (to->dtype == AC_DTYPE_BF16)
            ac_f32_to_bf16(from->data, (uint16_t *)(void *)at, from->count);
        else
            memcpy(at, from->data, from->count * sizeof(float));
    }
    if (!m->backend)
        return AC_OK;
    mem->copy(m->arena, image, bytes, AC_COPY_HOST_TO_DEVICE);
    free(image);
    const char *why = mem->take_error();
    return why ? ac_fail(AC_ERR_DEVICE, "model: copying the bf16 weights to %s: %s", mem->name, why) : AC_OK;
}

ac_status ac_model_to_backend_as(const ac_model *model, const ac_backend *be, ac_dtype weights, ac_model **out)
{
    if (weights == AC_DTYPE_F32)
        return ac_model_to_backend(model, be, out);
    if (weights != AC_DTYPE_BF16)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: weights are served as f32 or bf16, not %s", ac_dtype_name(weights));
    if (model->backend || model->bf16)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: a bf16 serving copy is made from f32 weights in host memory");
    const ac_backend *mem = be ? be : &ac_cpu_backend; /* ac_model_free frees with the CPU's */
    ac_model *m = NULL;
    ac_layout sizes;
    ac_status st = model_shell(&model->arch, 1, &m, &sizes);
    if (st != AC_OK)
        return st;
    size_t bytes = ac_layout_bytes(&sizes);
    m->arena = mem->alloc_dense(bytes);
    m->backend = be;
    if (!m->arena) {
        const char *why = mem->take_error();
        st = ac_fail(AC_ERR_NOMEM, "model: cannot allocate %.1f MiB of bf16 weights on %s%s%s",
                     (double)bytes / (1 << 20), mem->name, why ? ": " : "", why ? why : "");
    }
    if (st == AC_OK) {
        place_weights(m, &sizes);
        st = fill_bf16_copy(m, model, mem, bytes);
    }
    if (st != AC_OK) {
        ac_model_free(m);
        return st;
    }
    *out = m;
    return AC_OK;
}

ac_status ac_device_check(const char *device)
{
    char why[256];
    if (!device || !strcmp(device, "cpu") || ac_backend_select(device, why, sizeof why))
        return AC_OK;
    return ac_fail(AC_ERR_UNSUPPORTED, "%s", why);
}

ac_status ac_model_to_device_as(const ac_model *model, const char *device, ac_dtype weights, ac_model **out)
{
    char why[256];
    const ac_backend *be = ac_backend_select(device, why, sizeof why);
    if (!be)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: %s", why);
    return ac_model_to_backend_as(model, be == &ac_cpu_backend ? NULL : be, weights, out);
}

/* An f32 model on the host stays as it is; anything else is a copy. */
ac_status ac_model_move_to_device_as(ac_model **model, const char *device, ac_dtype weights)
{
    if (!device)
        device = "cpu";
    if (!*model || (!strcmp(device, "cpu") && weights == AC_DTYPE_F32))
        return AC_OK;
    ac_model *from = *model;
    ac_status st = ac_model_to_device_as(from, device, weights, model);
    if (st != AC_OK)
        *model = NULL;
    ac_model_free(from);
    return st;
}

ac_dtype ac_model_weights_dtype(const ac_model *model) { return model->bf16 ? AC_DTYPE_BF16 : AC_DTYPE_F32; }

ac_status ac_model_to_device(const ac_model *model, const char *device, ac_model **out)
{
    return ac_model_to_device_as(model, device, AC_DTYPE_F32, out);
}

ac_status ac_model_move_to_device(ac_model **model, const char *device)
{
    return ac_model_move_to_device_as(model, device, AC_DTYPE_F32);
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
    if (model->bf16)
        return ac_fail(AC_ERR_UNSUPPORTED, "model: %s needs f32 weights; this is a bf16 serving copy", what);
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
