#include "util/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ac_status write_all(int fd, const void *buf, uint64_t n, const char *path)
{
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t got = write(fd, p, chunk);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return ac_fail(AC_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += got;
        n -= (uint64_t)got;
    }
    return AC_OK;
}

/* Makes a completed rename durable; failures here are not worth failing the write for. */
static void sync_parent_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    char *slash = strrchr(copy, '/');
    const char *dir = ".";
    if (slash == copy)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = copy;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

ac_status ac_write_file_atomically(const char *path, const ac_file_piece *pieces, size_t n)
{
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);

    ac_status rc = AC_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ac_fail(AC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    for (size_t i = 0; i < n && rc == AC_OK; i++)
        if (pieces[i].nbytes)
            rc = write_all(fd, pieces[i].data, pieces[i].nbytes, tmp);
    if (rc == AC_OK && fsync(fd) != 0)
        rc = ac_fail(AC_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == AC_OK)
        rc = ac_fail(AC_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (rc == AC_OK && rename(tmp, path) != 0)
        rc = ac_fail(AC_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    if (rc != AC_OK)
        unlink(tmp);
    else
        sync_parent_dir(path);
    free(tmp);
    return rc;
}
