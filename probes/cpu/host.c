/* Host settings and measurements the CPU probe relies on: thread counts of OpenMP and
 * OpenBLAS, and the process's resident memory from /proc/self. */
#include "autocompress/probe.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
