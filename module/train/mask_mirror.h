/* Soft masks and their gradients copied where a device's ops run (train/step.c): the
 * caller's are in host memory; a step on a device reads the copy's masks and
 * accumulates into the copy's gradients, which go back to the caller's after the
 * backward. Every mask and gradient of a step lives in one device buffer. */
#ifndef AC_TRAIN_MASK_MIRROR_H
#define AC_TRAIN_MASK_MIRROR_H

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/status.h"
#include "kernels/kernels.h"

typedef struct {
    const ac_backend *be;
    const ac_arch *arch;
    float *values;          /* the masks, then the gradients, in be's memory */
    size_t capacity;        /* floats of values */
    const float **mask_ptr; /* [5 L] the per-layer pointer arrays of masks (host arrays of device pointers) */
    float **grad_ptr;       /* [5 L] of gradients */
    ac_masks masks;         /* the copy's, for the ops */
    ac_mask_grads grads;
} ac_mask_mirror;

ac_status ac_mask_mirror_init(ac_mask_mirror *m, const ac_backend *be, const ac_arch *arch);
void ac_mask_mirror_free(ac_mask_mirror *m);
/* Lays the copy out for `masks` and `grads` (either may be NULL: none), as large as they
 * need (growing the buffer when it must), and copies their values in. */
ac_status ac_mask_mirror_upload(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads);
/* The copy's gradients back into the caller's `grads`; masks and grads as at the upload
 * that laid the copy out. */
void ac_mask_mirror_download(ac_mask_mirror *m, const ac_masks *masks, const ac_mask_grads *grads);

#endif
