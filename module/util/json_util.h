/* Small helpers over cJSON shared by the JSON readers and writers (config.json,
 * tokenizer.json, cost tables, shard manifests). */
#ifndef AC_UTIL_JSON_UTIL_H
#define AC_UTIL_JSON_UTIL_H

#include <cjson/cJSON.h>

#include "autocompress/status.h"

/* "a number", "a string", ... for messages; "nothing" for NULL. */
const char *ac_json_type_name(const cJSON *v);

/* Writes text to PATH.tmp, syncs it and renames it over path, so a reader never sees half
 * a file and a failed write leaves the old one in place. */
ac_status ac_write_text_file(const char *path, const char *text);
/* The same for a JSON document (indented, ending in a newline). */
ac_status ac_write_json_file(const char *path, const cJSON *root);

/* The whole file as a NUL-terminated text (malloc'd); refuses files over max_bytes and
 * files holding a NUL byte, naming the path. */
ac_status ac_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len);
/* A JSON document from a file (free with cJSON_Delete); the message names the path. */
ac_status ac_read_json_file(const char *path, size_t max_bytes, cJSON **root);

#endif
