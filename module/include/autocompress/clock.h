/* The one monotonic clock (CLOCK_MONOTONIC): it never jumps with the wall clock, so the
 * difference of two readings is a duration. Probes, progress, training, evaluation and
 * the server all time themselves with it. */
#ifndef AUTOCOMPRESS_CLOCK_H
#define AUTOCOMPRESS_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds since an arbitrary fixed point. */
int64_t ac_monotonic_ns(void);
/* The same clock in seconds. */
double ac_monotonic_s(void);

#ifdef __cplusplus
}
#endif
#endif
