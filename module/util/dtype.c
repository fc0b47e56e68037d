/* dtype names and sizes, and the array conversions between f32 and bf16/f16/f64. */
#include "autocompress/dtype.h"

#include <string.h>

/* Arrays at least this long are converted by all OpenMP threads; shorter ones are not
 * worth waking the team for. */
enum { AC_DTYPE_PARALLEL_MIN = 1 << 16 };

static const struct {
    const char *name;
    size_t size;
} dtype_info[AC_DTYPE_COUNT] = {
    [AC_DTYPE_F32] = {"F32", 4},  [AC_DTYPE_BF16] = {"BF16", 2}, [AC_DTYPE_F16] = {"F16", 2},
    [AC_DTYPE_F64] = {"F64", 8},  [AC_DTYPE_I8] = {"I8", 1},     [AC_DTYPE_I16] = {"I16", 2},
    [AC_DTYPE_I32] = {"I32", 4},  [AC_DTYPE_I64] = {"I64", 8},   [AC_DTYPE_U8] = {"U8", 1},
    [AC_DTYPE_U16] = {"U16", 2},  [AC_DTYPE_U32] = {"U32", 4},   [AC_DTYPE_U64] = {"U64", 8},
    [AC_DTYPE_BOOL] = {"BOOL", 1},
};

bool ac_dtype_valid(ac_dtype dtype) { return (int)dtype >= 0 && dtype < AC_DTYPE_COUNT; }

size_t ac_dtype_size(ac_dtype dtype) { return ac_dtype_valid(dtype) ? dtype_info[dtype].size : 0; }

const char *ac_dtype_name(ac_dtype dtype)
{
    return ac_dtype_valid(dtype) ? dtype_info[dtype].name : "invalid";
}

ac_status ac_dtype_parse(const char *name, ac_dtype *out)
{
    if (!name || !out)
        return ac_fail(AC_ERR_INVALID, "ac_dtype_parse: NULL argument");
    for (int i = 0; i < AC_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (ac_dtype)i;
            return AC_OK;
        }
    }
    return ac_fail(AC_ERR_INVALID, "unknown dtype '%s'", name);
}

ac_status ac_weights_dtype_parse(const char *what, const char *name, ac_dtype *out)
{
    if (!strcmp(name, "f32") || !strcmp(name, "bf16")) {
        *out = name[0] == 'f' ? AC_DTYPE_F32 : AC_DTYPE_BF16;
        return AC_OK;
    }
    return ac_fail(AC_ERR_INVALID, "%s: '%s' is neither f32 nor bf16", what, name);
}

const char *ac_weights_dtype_name(ac_dtype dtype) { return dtype == AC_DTYPE_BF16 ? "bf16" : "f32"; }

bool ac_dtype_is_float(ac_dtype dtype)
{
    return dtype == AC_DTYPE_F32 || dtype == AC_DTYPE_BF16 || dtype == AC_DTYPE_F16 ||
           dtype == AC_DTYPE_F64;
}

/* The loops below index with ptrdiff_t so OpenMP gets a signed trip count. Element
 * loads and stores of `void *` buffers go through memcpy, which compiles to a plain
 * load or store and is defined for unaligned addresses. */

void ac_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    ptrdiff_t count = (ptrdiff_t)n;
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
    for (ptrdiff_t i = 0; i < count; i++)
        dst[i] = ac_bf16_to_float(src[i]);
}

void ac_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    ptrdiff_t count = (ptrdiff_t)n;
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
    for (ptrdiff_t i = 0; i < count; i++)
        dst[i] = ac_float_to_bf16(src[i]);
}

void ac_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    ptrdiff_t count = (ptrdiff_t)n;
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
    for (ptrdiff_t i = 0; i < count; i++)
        dst[i] = ac_f16_to_float(src[i]);
}

void ac_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    ptrdiff_t count = (ptrdiff_t)n;
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
    for (ptrdiff_t i = 0; i < count; i++)
        dst[i] = ac_float_to_f16(src[i]);
}

ac_status ac_convert_to_f32(ac_dtype dtype, const void *src, float *dst, size_t n)
{
    if (n == 0)
        return AC_OK;
    if (!src || !dst)
        return ac_fail(AC_ERR_INVALID, "ac_convert_to_f32: NULL buffer");
    const unsigned char *s = src;
    ptrdiff_t count = (ptrdiff_t)n;
    switch (dtype) {
    case AC_DTYPE_F32:
        memmove(dst, src, n * sizeof(float));
        return AC_OK;
    case AC_DTYPE_BF16:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, sizeof h);
            dst[i] = ac_bf16_to_float(h);
        }
        return AC_OK;
    case AC_DTYPE_F16:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, sizeof h);
            dst[i] = ac_f16_to_float(h);
        }
        return AC_OK;
    case AC_DTYPE_F64:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            double d;
            memcpy(&d, s + 8 * i, sizeof d);
            dst[i] = (float)d;
        }
        return AC_OK;
    default:
        return ac_fail(AC_ERR_INVALID, "ac_convert_to_f32: dtype %s is not a floating-point type",
                       ac_dtype_name(dtype));
    }
}

ac_status ac_convert_from_f32(ac_dtype dtype, const float *src, void *dst, size_t n)
{
    if (n == 0)
        return AC_OK;
    if (!src || !dst)
        return ac_fail(AC_ERR_INVALID, "ac_convert_from_f32: NULL buffer");
    unsigned char *d = dst;
    ptrdiff_t count = (ptrdiff_t)n;
    switch (dtype) {
    case AC_DTYPE_F32:
        memmove(dst, src, n * sizeof(float));
        return AC_OK;
    case AC_DTYPE_BF16:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            uint16_t h = ac_float_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, sizeof h);
        }
        return AC_OK;
    case AC_DTYPE_F16:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            uint16_t h = ac_float_to_f16(src[i]);
            memcpy(d + 2 * i, &h, sizeof h);
        }
        return AC_OK;
    case AC_DTYPE_F64:
#pragma omp parallel for schedule(static) if (n >= AC_DTYPE_PARALLEL_MIN)
        for (ptrdiff_t i = 0; i < count; i++) {
            double v = (double)src[i];
            memcpy(d + 8 * i, &v, sizeof v);
        }
        return AC_OK;
    default:
        return ac_fail(AC_ERR_INVALID,
                       "ac_convert_from_f32: dtype %s is not a floating-point type",
                       ac_dtype_name(dtype));
    }
}
