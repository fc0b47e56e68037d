/* Element types of stored tensors (the safetensors dtype set) and conversions between
 * the floating-point storage formats (bf16, f16) and f32.
 *
 * Conversions to the narrow formats round to nearest, ties to even; they keep the
 * sign of zero, map overflow to infinity and keep NaN a NaN (quiet, sign kept). */
#ifndef AUTOCOMPRESS_DTYPE_H
#define AUTOCOMPRESS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_DTYPE_F32 = 0,
    AC_DTYPE_BF16,
    AC_DTYPE_F16,
    AC_DTYPE_F64,
    AC_DTYPE_I8,
    AC_DTYPE_I16,
    AC_DTYPE_I32,
    AC_DTYPE_I64,
    AC_DTYPE_U8,
    AC_DTYPE_U16,
    AC_DTYPE_U32,
    AC_DTYPE_U64,
    AC_DTYPE_BOOL,
    AC_DTYPE_COUNT /* number of dtypes; not a dtype */
} ac_dtype;

/* True when `dtype` is one of the values above (not AC_DTYPE_COUNT or out of range). */
bool ac_dtype_valid(ac_dtype dtype);

/* Bytes per element (1, 2, 4 or 8); 0 for an invalid dtype. */
size_t ac_dtype_size(ac_dtype dtype);

/* The safetensors name ("F32", "BF16", "F16", "F64", "I8", ..., "U64", "BOOL");
 * "invalid" for an invalid dtype. */
const char *ac_dtype_name(ac_dtype dtype);

/* Parses a safetensors dtype name (exact, case-sensitive). Unknown names fail with
 * AC_ERR_INVALID and the message "unknown dtype 'NAME'". */
ac_status ac_dtype_parse(const char *name, ac_dtype *out);

/* "f32" or "bf16", as options and settings spell a weights' dtype; anything else fails
 * with AC_ERR_INVALID naming `what` (the option or setting). ac_weights_dtype_name spells
 * AC_DTYPE_BF16 "bf16" and anything else "f32". */
ac_status ac_weights_dtype_parse(const char *what, const char *name, ac_dtype *out);
const char *ac_weights_dtype_name(ac_dtype dtype);

/* True for F32, BF16, F16 and F64: the dtypes ac_convert_to_f32 accepts. */
bool ac_dtype_is_float(ac_dtype dtype);

/* ---- scalar conversions (inline so kernels can use them in inner loops) ---- */

static inline uint32_t ac_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float ac_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float ac_bf16_to_float(uint16_t h) { return ac_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t ac_float_to_bf16(float f)
{
    uint32_t u = ac_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate and force the quiet bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. An
     * overflow carries into the exponent and yields infinity, as it should. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f as a bf16 product reads it: rounded to bf16 (as above), widened back. */
static inline float ac_bf16_round(float f) { return ac_bf16_to_float(ac_float_to_bf16(f)); }

static inline float ac_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) /* infinity or NaN; a NaN payload moves to the top of the f32 mantissa */
        return ac_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return ac_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return ac_f32_from_bits(sign);
    /* Subnormal: mant * 2^-24. Normalise so the leading one becomes the implicit bit. */
    uint32_t e = 113u; /* biased f32 exponent of 2^-14 */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return ac_f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

static inline uint16_t ac_float_to_f16(float f)
{
    uint32_t u = ac_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xffu) {
        if (mant == 0)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (mant >> 13)); /* quiet NaN, top payload kept */
    }
    int32_t e = (int32_t)exp - 127 + 15; /* biased f16 exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Result is subnormal or zero: value = mant24 * 2^(exp-150) = q * 2^-24 with
         * q = mant24 >> (14 - e). An f32 subnormal (exp == 0) is far below 2^-25. */
        if (exp == 0 || e < -10)
            return sign;
        uint32_t m24 = mant | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e); /* 14 .. 24 */
        uint32_t q = m24 >> shift;
        uint32_t rem = m24 & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++; /* may become 0x400, the smallest normal: still the right encoding */
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++; /* a carry into the exponent rounds up to the next binade or to infinity */
    return (uint16_t)(sign | q);
}

/* ---- array conversions (parallel over OpenMP for large n) ---- */

void ac_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
void ac_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
void ac_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void ac_f32_to_f16(const float *src, uint16_t *dst, size_t n);

/* Converts n elements of a floating-point dtype (F32, BF16, F16, F64) to f32. `src`
 * need not be aligned (memory-mapped tensors may not be). For F32, src and dst may
 * overlap. Other dtypes fail with AC_ERR_INVALID. */
ac_status ac_convert_to_f32(ac_dtype dtype, const void *src, float *dst, size_t n);

/* The reverse: n f32 values into a floating-point dtype (rounding to nearest even).
 * `dst` need not be aligned. */
ac_status ac_convert_from_f32(ac_dtype dtype, const float *src, void *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
