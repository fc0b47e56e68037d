/* Small helpers over cJSON shared by the JSON readers (config.json, tokenizer.json). */
#ifndef AC_IO_JSON_UTIL_H
#define AC_IO_JSON_UTIL_H

#include <cjson/cJSON.h>

/* "a number", "a string", ... for messages; "nothing" for NULL. */
const char *ac_json_type_name(const cJSON *v);

#endif
