#include "io/json_util.h"
#include "io/atomic_file.h"

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
