/* How the CPU kernels split work among OpenMP threads. A kernel small enough to run on
 * the calling thread calls its range function directly instead of `parallel if (...)`:
 * an inactive region still goes through libgomp's team start and end, which adds up over
 * a decode step's many small ops (see docs/results.md). */
#ifndef AC_KERNELS_CPU_PARALLEL_H
#define AC_KERNELS_CPU_PARALLEL_H

#include <omp.h>

/* The calling thread's share [*first, *last) of n iterations inside a region, in whole
 * blocks of `block` (the last one may be short), contiguous and as even as they go. */
static inline void ac_cpu_thread_blocks(long n, long block, long *first, long *last)
{
    int threads = omp_get_num_threads(), me = omp_get_thread_num();
    long blocks = (n + block - 1) / block;
    *first = blocks * me / threads * block;
    *last = blocks * (me + 1) / threads * block;
    *last = *last < n ? *last : n;
}

/* The same in single iterations (schedule(static)'s split). */
static inline void ac_cpu_thread_share(long n, long *first, long *last) { ac_cpu_thread_blocks(n, 1, first, last); }

#endif
