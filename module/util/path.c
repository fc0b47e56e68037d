/* Paths built from parts (util/path.h). */
#include "util/path.h"

#include <stdio.h>
#include <string.h>

/* out = a, sep, b in a row, or an error naming what did not fit. */
static ac_status put(char *out, size_t size, const char *a, const char *sep, const char *b)
{
    int n = snprintf(out, size, "%s%s%s", a, sep, b);
    if (n < 0 || (size_t)n >= size)
        return ac_fail(AC_ERR_INVALID, "%s%s%s: path too long", a, sep, b);
    return AC_OK;
}

ac_status ac_path_join(char *out, size_t size, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    return put(out, size, dir, n == 0 || dir[n - 1] == '/' ? "" : "/", name);
}

ac_status ac_path_suffixed(char *out, size_t size, const char *path, const char *suffix)
{
    return put(out, size, path, "", suffix);
}

ac_status ac_path_check_dir(const char *dir)
{
    enum { longest = AC_PATH_MAX - 1 - 1 - AC_PATH_NAME_MAX }; /* less the '/' and the NUL */
    if (strlen(dir) > longest)
        /* the reason first: a message this long loses its end */
        return ac_fail(AC_ERR_INVALID, "directory path over %d bytes, too long for the files under it: %s",
                       (int)longest, dir);
    return AC_OK;
}
