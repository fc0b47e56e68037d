/* Host facts (autocompress/host.h): OpenBLAS's kernels and the thread counts of OpenMP and
 * OpenBLAS, and the process's resident memory from /proc/self. */
#include "autocompress/host.h"

#include "autocompress/log.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stddef.h>
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

/* The value of the first /proc/cpuinfo line whose key is `key`, into dst; 0 when none. */
static int cpuinfo_value(const char *key, char *dst, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    size_t n = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!colon || strncmp(line, key, n) || strspn(line + n, " \t") != (size_t)(colon - line - (ptrdiff_t)n))
            continue;
        const char *v = colon + 1 + strspn(colon + 1, " \t");
        snprintf(dst, cap, "%.*s", (int)strcspn(v, "\n"), v);
        found = 1;
    }
    fclose(f);
    return found;
}

void ac_cpu_model_name(char *dst, size_t cap)
{
    if (!cpuinfo_value("model name", dst, cap))
        snprintf(dst, cap, "unknown");
}

/* The features that decide which kernels run (ours, OpenBLAS's, libgomp's), in the
 * spelling of the kernel's cpuinfo flags. */
static const char *const isa_features[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                           "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                                           "amx_int8", "asimd", "sve", "sve2"};

static int has_flag(const char *flags, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(flags, name); p; p = strstr(p + 1, name))
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

void ac_cpu_isa(char *dst, size_t cap)
{
    char flags[4096];
    if (cap)
        dst[0] = '\0';
    if (!cpuinfo_value("flags", flags, sizeof flags) && !cpuinfo_value("Features", flags, sizeof flags))
        return;
    size_t used = 0;
    for (size_t i = 0; i < sizeof isa_features / sizeof isa_features[0]; i++)
        if (has_flag(flags, isa_features[i]) && used < cap) {
            int w = snprintf(dst + used, cap - used, "%s%s", used ? " " : "", isa_features[i]);
            used += w > 0 ? (size_t)w : 0;
        }
}

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
