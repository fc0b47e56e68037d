#include "util/json_util.h"
#include "util/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    ac_file_piece piece = {text, strlen(text)};
    return ac_write_file_atomically(path, &piece, 1);
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

ac_status ac_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    ac_status st = AC_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 16384;
            char *grown = realloc(buf, cap);
            if (!grown) {
                st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > max_bytes) {
            st = ac_fail(AC_ERR_INVALID, "%s: larger than %zu bytes", path, max_bytes);
            break;
        }
        if (got == 0) {
            if (ferror(f))
                st = ac_fail(AC_ERR_IO, "%s: read error: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st == AC_OK && memchr(buf, '\0', n))
        st = ac_fail(AC_ERR_INVALID, "%s: contains a NUL byte; not a text file", path);
    if (st != AC_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return AC_OK;
}

ac_status ac_read_json_file(const char *path, size_t max_bytes, cJSON **root)
{
    *root = NULL;
    char *text;
    size_t len;
    ac_status st = ac_read_text_file(path, max_bytes, &text, &len);
    if (st != AC_OK)
        return st;
    *root = cJSON_ParseWithLength(text, len);
    free(text);
    return *root ? AC_OK : ac_fail(AC_ERR_INVALID, "%s: not valid JSON", path);
}
