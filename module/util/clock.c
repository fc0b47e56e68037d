/* The monotonic clock (autocompress/clock.h). */
#include "autocompress/clock.h"

#include <time.h>

static struct timespec monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts;
}

int64_t ac_monotonic_ns(void)
{
    struct timespec ts = monotonic_now();
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double ac_monotonic_s(void)
{
    struct timespec ts = monotonic_now();
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
