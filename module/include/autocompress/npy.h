/* NumPy .npy files (version 1.0, little-endian float32, C order). */
#ifndef AUTOCOMPRESS_NPY_H
#define AUTOCOMPRESS_NPY_H

#include <stdint.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

ac_status ac_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
