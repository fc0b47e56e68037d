/* Host facts (autocompress/host.h): OpenBLAS's kernels and the thread counts of OpenMP and
 * OpenBLAS, and the process's resident memory from /proc/self. */
#include "autocompress/host.h"

#include "autocompress/log.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

char *openblas_get_corename(void);

/* OpenBLAS's names for x86 cores older than Haswell: what it falls back to on a CPU newer
 * than its release (Debian 12's 0.3.21 reads an Emerald Rapids Xeon as Prescott). */
static int blas_core_is_legacy(const char *core)
{
    static const char *const legacy[] = {"unknown",   "katmai",   "coppermine", "northwood", "prescott", "banias",
                                         "atom",      "core2",    "penryn",     "dunnington", "nehalem",
                                         "sandybridge", "barcelona", "opteron",   "opteron_sse3", "bobcat"};
    for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
        if (!strcasecmp(core, legacy[i]))
            return 1;
    return 0;
}

const char *ac_cpu_blas_core_choice(const char *detected, unsigned features)
{
    if (!detected || !blas_core_is_legacy(detected))
        return NULL;
    if ((features & AC_CPU_AVX512_BF16) && (features & AC_CPU_AVX512))
        return "Cooperlake";
    if (features & AC_CPU_AVX512)
        return "SkylakeX";
    if (features & AC_CPU_AVX2_FMA)
        return "Haswell";
    return NULL;
}

unsigned ac_cpu_features(void)
{
    __builtin_cpu_init();
    unsigned f = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= AC_CPU_AVX2_FMA;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        f |= AC_CPU_AVX512;
    if (__builtin_cpu_supports("avx512bf16"))
        f |= AC_CPU_AVX512_BF16;
    return f;
}

const char *ac_cpu_blas_core(void) { return openblas_get_corename(); }

void ac_cpu_blas_restart_if_legacy(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE")) /* the user's choice, or this restart's own */
        return;
    const char *detected = openblas_get_corename();
    const char *core = ac_cpu_blas_core_choice(detected, ac_cpu_features());
    if (!core)
        return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    ac_debug("OpenBLAS chose %s kernels for this CPU; restarting with OPENBLAS_CORETYPE=%s", detected, core);
    execv("/proc/self/exe", argv);
    ac_warn("OpenBLAS runs its %s kernels on a CPU that has %s's (restarting with OPENBLAS_CORETYPE=%s failed: "
            "%s); set OPENBLAS_CORETYPE=%s for matrix products several times faster",
            detected, core, core, strerror(errno), core);
}

int ac_cpu_threads_for(int threads, int *clamped)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = online > 0 ? (int)online : 1;
    int n = threads > 0 ? threads : cores;
    if (clamped)
        *clamped = n > cores;
    return n > cores ? cores : n;
}

int ac_cpu_set_threads(int threads, int *clamped)
{
    int n = ac_cpu_threads_for(threads, clamped);
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}

/* The value in kB of a "Key:   123 kB" line of /proc/self/status, in bytes. */
static size_t status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t n = strlen(key), bytes = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            unsigned long long kb = 0;
            if (sscanf(line + n + 1, "%llu", &kb) == 1)
                bytes = (size_t)kb * 1024;
            break;
        }
    fclose(f);
    return bytes;
}

size_t ac_cpu_resident_bytes(void) { return status_bytes("VmRSS"); }
size_t ac_cpu_peak_resident_bytes(void) { return status_bytes("VmHWM"); }

ac_status ac_cpu_reset_peak_resident(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return ac_fail(AC_ERR_UNSUPPORTED, "/proc/self/clear_refs: cannot open it to reset the peak resident size");
    int ok = fputs("5", f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        return ac_fail(AC_ERR_UNSUPPORTED, "/proc/self/clear_refs: the kernel refused to reset the peak resident size");
    return AC_OK;
}
