#include "io/json_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *ac_json_type_name(const cJSON *v)
{
    if (!v)
        return "nothing";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "an invalid value";
}

ac_status ac_write_text_file(const char *path, const char *text)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    ac_status st = AC_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        st = ac_fail(AC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            st = ac_fail(AC_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
            break;
        }
        done += (size_t)w;
    }
    if (st == AC_OK && fsync(fd) != 0)
        st = ac_fail(AC_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == AC_OK)
        st = ac_fail(AC_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == AC_OK && rename(tmp, path) != 0)
        st = ac_fail(AC_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    if (st != AC_OK)
        unlink(tmp);
    free(tmp);
    return st;
}

ac_status ac_write_json_file(const char *path, const cJSON *root)
{
    char *printed = cJSON_Print(root);
    size_t n = printed ? strlen(printed) : 0;
    char *text = printed ? malloc(n + 2) : NULL;
    if (text) {
        memcpy(text, printed, n);
        memcpy(text + n, "\n", 2);
    }
    cJSON_free(printed);
    ac_status st = text ? ac_write_text_file(path, text) : ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    free(text);
    return st;
}
