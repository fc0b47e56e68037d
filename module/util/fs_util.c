/* File-system helpers the writers share. */
#include "util/fs_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

ac_status ac_make_dirs(const char *dir)
{
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
    memcpy(p, dir, n + 1);
    ac_status st = AC_OK;
    for (size_t i = 1; i <= n && st == AC_OK; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            st = ac_fail(AC_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
        else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = ac_fail(AC_ERR_IO, "%s: exists and is not a directory", p);
        p[i] = c;
    }
    free(p);
    return st;
}

int ac_path_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}
