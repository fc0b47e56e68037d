/* Soft masks on a device (train/mask_mirror.h). */
#include "train/mask_mirror.h"

#include <stdlib.h>
#include <string.h>

#include "blocks/block.h"

enum { AXES = 5 }; /* the per-layer masks: mamba_heads, experts, expert_scores, ffn, shared_ffn */

/* The floats of layer b's mask on axis a. */
static size_t axis_floats(const ac_block_dims *b, int axis)
{
    switch (axis) {
    case 0: return (size_t)b->mamba_heads;
    case 1:
    case 2: return (size_t)b->n_experts;
    case 3: return (size_t)ac_block(b)->axis_length(b, AC_LAYER_FFN);
    default: return (size_t)b->shared_ffn;
    }
}

static const float *const *mask_axis(const ac_masks *m, int axis)
{
    const float *const *axes[AXES] = {m->mamba_heads, m->experts, m->expert_scores, m->ffn, m->shared_ffn};
    return axes[axis];
}

static float *const *grad_axis(const ac_mask_grads *g, int axis)
{
    float *const *axes[AXES] = {g->mamba_heads, g->experts, g->expert_scores, g->ffn, g->shared_ffn};
    return axes[axis];
}

ac_status ac_mask_mirror_init(ac_mask_mirror *m, const ac_backend *be, const ac_arch *arch)
{
    memset(m, 0, sizeof *m);
    m->be = be;
    m->arch = arch;
    m->mask_ptr = calloc((size_t)AXES * arch->n_layers, sizeof *m->mask_ptr);
    m->grad_ptr = calloc((size_t)AXES * arch->n_layers, sizeof *m->grad_ptr);
    if (!m->mask_ptr || !m->grad_ptr) {
        ac_mask_mirror_free(m);
        return ac_fail(AC_ERR_NOMEM, "train: out of memory for the masks' device copy");
    }
    return AC_OK;
}

void ac_mask_mirror_free(ac_mask_mirror *m)
{
    if (m->be)
        m->be->free(m->values);
    free(m->mask_ptr);
    free(m->grad_ptr);
    memset(m, 0, sizeof *m);
}

/* Walks every array of masks, then of grads (either may be NULL), calling visit_mask or
 * visit_grad with the host array, its floats, its offset in the copy and the slot of its
 * device pointer; returns the floats in all. */
typedef void (*visit_fn)(ac_mask_mirror *m, const float *host, size_t n, size_t offset, const float **slot);

static size_t walk(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads, visit_fn visit_mask,
                   visit_fn visit_grad)
{
    const ac_arch *a = m->arch;
    int L = a->n_layers;
    size_t offset = 0;
    for (int which = 0; which < 2; which++) { /* the masks, then the gradients */
        if (which == 0 ? !masks : !grads)
            continue;
        visit_fn visit = which == 0 ? visit_mask : visit_grad;
        const float *hidden = which == 0 ? masks->hidden : grads->hidden;
        const float *gate = which == 0 ? masks->layer_gate : grads->layer_gate;
        const float **slot_h = which == 0 ? &m->masks.hidden : (const float **)&m->grads.hidden;
        const float **slot_g = which == 0 ? &m->masks.layer_gate : (const float **)&m->grads.layer_gate;
        if (hidden) {
            visit(m, hidden, (size_t)a->hidden, offset, slot_h);
            offset += (size_t)a->hidden;
        }
        if (gate) {
            visit(m, gate, (size_t)L, offset, slot_g);
            offset += (size_t)L;
        }
        for (int axis = 0; axis < AXES; axis++) {
            const float *const *arrays = which == 0 ? mask_axis(masks, axis)
                                                    : (const float *const *)grad_axis(grads, axis);
            for (int l = 0; arrays && l < L; l++) {
                const float **slot = which == 0 ? &m->mask_ptr[axis * L + l]
                                                : (const float **)&m->grad_ptr[axis * L + l];
                if (!arrays[l])
                    continue;
                size_t n = axis_floats(&a->layers[l], axis);
                visit(m, arrays[l], n, offset, slot);
                offset += n;
            }
        }
    }
    return offset;
}

static void count_only(ac_mask_mirror *m, const float *host, size_t n, size_t offset, const float **slot)
{
    (void)m, (void)host, (void)n, (void)offset, (void)slot;
}

static void place_and_copy(ac_mask_mirror *m, const float *host, size_t n, size_t offset, const float **slot)
{
    *slot = m->values + offset;
    m->be->copy(m->values + offset, host, n * sizeof *host, AC_COPY_HOST_TO_DEVICE);
}

static void copy_back(ac_mask_mirror *m, const float *host, size_t n, size_t offset, const float **slot)
{
    (void)slot;
    m->be->copy((float *)host, m->values + offset, n * sizeof *host, AC_COPY_DEVICE_TO_HOST);
}

/* The copy's pointer arrays: an axis the caller gave gets its layer array, others NULL. */
static void point_axes(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads)
{
    int L = m->arch->n_layers;
    const float *const **mask_axes[AXES] = {&m->masks.mamba_heads, &m->masks.experts, &m->masks.expert_scores,
                                            &m->masks.ffn, &m->masks.shared_ffn};
    float *const **grad_axes[AXES] = {&m->grads.mamba_heads, &m->grads.experts, &m->grads.expert_scores,
                                      &m->grads.ffn, &m->grads.shared_ffn};
    for (int axis = 0; axis < AXES; axis++) {
        *mask_axes[axis] = masks && mask_axis(masks, axis) ? m->mask_ptr + axis * L : NULL;
        *grad_axes[axis] = grads && grad_axis(grads, axis) ? m->grad_ptr + axis * L : NULL;
    }
}

ac_status ac_mask_mirror_upload(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads)
{
    int L = m->arch->n_layers;
    memset(&m->masks, 0, sizeof m->masks);
    memset(&m->grads, 0, sizeof m->grads);
    memset(m->mask_ptr, 0, (size_t)AXES * L * sizeof *m->mask_ptr);
    memset(m->grad_ptr, 0, (size_t)AXES * L * sizeof *m->grad_ptr);
    size_t need = walk(m, masks, grads, count_only, count_only);
    if (need > m->capacity) {
        float *grown = m->be->alloc(need * sizeof *grown);
        if (!grown)
            return ac_fail(AC_ERR_NOMEM, "train: cannot allocate %zu mask floats on %s", need, m->be->name);
        m->be->free(m->values);
        m->values = grown;
        m->capacity = need;
    }
    walk(m, masks, grads, place_and_copy, place_and_copy);
    point_axes(m, masks, grads);
    return AC_OK;
}

void ac_mask_mirror_download(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads)
{
    if (grads)
        walk(m, masks, grads, count_only, copy_back);
}
