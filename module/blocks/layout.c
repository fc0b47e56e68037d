/* The weight arena's layout (blocks/layout.h): each parameter counted, and on the second
 * pass named, shaped and placed. */
#include "blocks/block.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

uint16_t *ac_layout_bf16_base(float *arena, size_t arena_count)
{
    return (uint16_t *)(void *)(arena + ((arena_count + 3) & ~(size_t)3));
}

/* One parameter: counted, and (when the arena exists) named and placed; narrow: its
 * values are bf16. */
static void layout_one(ac_layout *l, float **slot, int narrow, int ndim, const int64_t *shape, const char *fmt,
                       va_list args)
{
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)shape[i];
    if (narrow && slot)
        l->offset16 = (l->offset16 + 7) & ~(size_t)7;
    if (l->arena) {
        ac_param *p = &l->params[l->n_params];
        vsnprintf(p->name, sizeof p->name, fmt, args);
        p->data = narrow ? (float *)(void *)(ac_layout_bf16_base(l->arena, l->arena_count) + l->offset16)
                         : l->arena + l->offset;
        p->dtype = narrow ? AC_DTYPE_BF16 : AC_DTYPE_F32;
        p->ndim = ndim;
        memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
        p->count = count;
        if (slot)
            *slot = p->data;
    }
    if (narrow)
        l->offset16 += count;
    else
        l->offset += count;
    l->n_params++;
}

void ac_layout_param(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    layout_one(l, slot, 0, ndim, shape, fmt, args);
    va_end(args);
}

void ac_layout_product(ac_layout *l, float **slot, int ndim, const int64_t *shape, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    layout_one(l, slot, l->bf16, ndim, shape, fmt, args);
    va_end(args);
}

void ac_layout_block(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w)
{
    ac_layout_param(l, &w->norm, 1, AC_SHAPE(arch->hidden), "layers.%d.norm.weight", i);
    ac_block(b)->layout(l, i, arch, b, w);
}

size_t ac_layout_bytes(const ac_layout *l)
{
    if (!l->bf16)
        return l->offset * sizeof(float);
    return ((l->offset + 3) & ~(size_t)3) * sizeof(float) + l->offset16 * sizeof(uint16_t);
}

size_t ac_block_weight_bytes(const ac_arch *arch, const ac_block_dims *b, ac_dtype weights)
{
    ac_layer_weights scratch;
    ac_layout l = {.bf16 = weights == AC_DTYPE_BF16};
    ac_layout_block(&l, 0, arch, b, &scratch);
    return l.offset * sizeof(float) + l.offset16 * sizeof(uint16_t);
}
