/* Subnormal floats flushed to zero on every compute thread.
 *
 * On x86 an operation that takes or makes a subnormal float goes through a microcode
 * assist, tens of times slower than the normal path. Activations and probabilities of a
 * few in 1e38 then make a layer's time depend on its data: the same layer, fed by a
 * different stack of layers, ran markedly slower (see docs/results.md), which no cost
 * table keyed by shapes can know. With FTZ (results) and DAZ (inputs) set, every value
 * below FLT_MIN is 0 and the time depends on shapes alone; what is lost lies below float
 * precision anyway. */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>

static void flush_this_thread(void)
{
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}
#else
static void flush_this_thread(void) {}
#endif

/* Once per calling thread: the caller and every thread of its OpenMP team (threads the
 * team gains later are cloned from the caller and inherit its setting). */
void ac_k_flush_denormals(void)
{
    static _Thread_local int done;
    if (done)
        return;
    flush_this_thread();
#pragma omp parallel
    flush_this_thread();
    done = 1;
}
