/* A float exp that loops vectorize: glibc's expf is a call per element (its vector
 * versions are declared only under -ffast-math), which made exp a twentieth of a
 * training step. x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact to a
 * float), e^r by its Taylor polynomial to r^6 (remainder below 1.2e-7 relative), 2^n
 * put in the exponent bits. Inputs are clamped to [-87, 88], where 2^n and the result
 * stay normal floats: below e^-87 it returns e^-87 (1.6e-38) instead of a subnormal or
 * 0, above e^88 it returns e^88 instead of inf; NaN stays NaN. No branches. */
#ifndef AC_KERNELS_CPU_MATH_H
#define AC_KERNELS_CPU_MATH_H

#include <math.h>
#include <stdint.h>

static inline float ac_cpu_expf(float x)
{
    /* comparisons rather than fminf/fmaxf, whose NaN rules keep them calls; a NaN x takes
     * the lower clamp, so that n below is finite (converting a NaN to int is undefined)
     * and the NaN comes back from the last line */
    float c = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f;
    /* round to the nearest integer by adding and taking away 1.5 * 2^23 */
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    /* n * LN2_HI is exact (LN2_HI has 12 significant bits and |n| <= 127): no fma needed,
     * and the baseline x86-64 target has none (fmaf would be a call) */
    float r = (c - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t bits;
        float value;
    } scale = {.bits = ((int32_t)n + 127) * (1 << 23)};
    float e = p * scale.value;
    return x == x ? e : x;
}

/* 1 / (1 + e^-x) */
static inline float ac_cpu_sigmoid(float x) { return 1.0f / (1.0f + ac_cpu_expf(-x)); }

#endif
