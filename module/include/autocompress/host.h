/* Host facts: the threads of OpenMP and OpenBLAS, the kernel set OpenBLAS runs and the
 * CPU features that choose it, and the process's resident memory (Linux /proc). */
#ifndef AUTOCOMPRESS_HOST_H
#define AUTOCOMPRESS_HOST_H

#include <stddef.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the host threads of OpenMP and OpenBLAS: `threads` as a contract gives it (0: all
 * online cores), at most the online cores (more threads than cores only adds contention;
 * *clamped is set to 1 when the request was lowered). Returns the count now in use. */
int ac_cpu_set_threads(int threads, int *clamped);
/* The count ac_cpu_set_threads would use, without setting anything. */
int ac_cpu_threads_for(int threads, int *clamped);

/* OpenBLAS picks its kernels once, while it loads, from the CPU model; one newer than the
 * OpenBLAS build gets the oldest x86 kernels (Debian 12's 0.3.21 runs SSE3 GEMMs on an
 * Emerald Rapids Xeon, several times slower), and it reads OPENBLAS_CORETYPE only then.
 * So a program that computes starts by calling ac_cpu_blas_restart_if_legacy(argv): when
 * OpenBLAS chose a pre-Haswell kernel set on a CPU with AVX2 or AVX-512 and
 * OPENBLAS_CORETYPE is unset, it sets it to the best set the CPU runs and executes the
 * program again with the same arguments (returning only when nothing is to be done or the
 * restart failed, with a warning). Child processes inherit the setting. */
void ac_cpu_blas_restart_if_legacy(char **argv);
/* The CPU features that choice reads (OR of the bits below, as the OS enables them). */
enum { AC_CPU_AVX2_FMA = 1, AC_CPU_AVX512 = 2, AC_CPU_AVX512_BF16 = 4 };
unsigned ac_cpu_features(void);
/* The kernel set to ask OpenBLAS for when it `detected` a legacy one on a CPU with
 * `features`; NULL when its choice stands. */
const char *ac_cpu_blas_core_choice(const char *detected, unsigned features);
/* The kernel set OpenBLAS runs ("Cooperlake", "Haswell", ...). */
const char *ac_cpu_blas_core(void);

/* The CPU's model name as /proc/cpuinfo gives it, and the instruction-set features that
 * choose kernels (those of a fixed list the CPU has, space-separated: "avx2 fma avx512f
 * ... amx_tile"), into dst (cap bytes); "unknown" / "" when /proc/cpuinfo says nothing. */
void ac_cpu_model_name(char *dst, size_t cap);
void ac_cpu_isa(char *dst, size_t cap);

/* Process memory from /proc/self/status: VmRSS and VmHWM (peak) in bytes; 0 when unknown. */
size_t ac_cpu_resident_bytes(void);
size_t ac_cpu_peak_resident_bytes(void);
/* Restarts the peak (VmHWM) at the current resident size (Linux: /proc/self/clear_refs);
 * AC_ERR_UNSUPPORTED when the kernel refuses. */
ac_status ac_cpu_reset_peak_resident(void);

#ifdef __cplusplus
}
#endif
#endif
