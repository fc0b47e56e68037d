#include "autocompress/npy.h"

#include <stdio.h>
#include <string.h>

ac_status ac_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape)
{
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        count *= (size_t)shape[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* magic (6) + version (2) + header length (2) + dict, padded with spaces and ended
     * by a newline so the data starts on a multiple of 64 bytes */
    size_t header_len = (size_t)n + 1;
    size_t padded = ((10 + header_len + 63) / 64) * 64 - 10;
    unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(padded & 0xff), (unsigned char)(padded >> 8)};

    FILE *f = fopen(path, "wb");
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open for writing", path);
    int ok = fwrite(preamble, 1, sizeof preamble, f) == sizeof preamble && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = header_len; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, sizeof *data, count, f) == count;
    ok = (fclose(f) == 0) && ok;
    return ok ? AC_OK : ac_fail(AC_ERR_IO, "%s: write failed", path);
}
