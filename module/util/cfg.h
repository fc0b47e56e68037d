/* Typed reading of libconfig settings: integers, numbers, strings, booleans, groups and
 * lists, checked against a range or a shape, every failure "FILE:LINE: message" with
 * LINE that of the offending setting (or, for a missing member, of its group). The
 * contract reader and the server's config read through it.
 *
 * Two wordings, because both are what their users see and scripts match:
 *   AC_CFG_SAY_EXPECTED  "workload.batch: expected an integer, got a string",
 *                        "workload.batch = 0: must be > 0"            (contracts)
 *   AC_CFG_SAY_MUST      "port must be an integer",
 *                        "port must be in [0, 65535], got 70000"      (the server's config)
 * Messages that are one caller's own (an unknown setting, a bad device string) go through
 * ac_cfg_fail. */
#ifndef AC_UTIL_CFG_H
#define AC_UTIL_CFG_H

#include <libconfig.h>
#include <stdbool.h>
#include <stddef.h>

#include "autocompress/status.h"

typedef enum { AC_CFG_SAY_EXPECTED, AC_CFG_SAY_MUST } ac_cfg_wording;

typedef struct {
    const char *file;       /* FILE in messages when libconfig knows none (text read from a string) */
    ac_cfg_wording wording;
} ac_cfg;

/* AC_ERR_INVALID with "FILE:LINE: " and the formatted message; s may be NULL (line 1). */
ac_status ac_cfg_fail(const ac_cfg *r, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "an integer", "a string", ... for a CONFIG_TYPE_*. */
const char *ac_cfg_type_name(int type);

/* ---- one setting `s`, called `name` in messages ---- */

/* An integer (int or int64) in [lo, hi]. */
ac_status ac_cfg_int64(const ac_cfg *r, const config_setting_t *s, const char *name, long long lo, long long hi,
                       long long *out);
ac_status ac_cfg_int(const ac_cfg *r, const config_setting_t *s, const char *name, int lo, int hi, int *out);
/* A float or an integer, as a double. */
ac_status ac_cfg_number(const ac_cfg *r, const config_setting_t *s, const char *name, double *out);
/* A number in [lo, hi]. */
ac_status ac_cfg_double(const ac_cfg *r, const config_setting_t *s, const char *name, double lo, double hi,
                        double *out);
/* A string copied into out[size]; an empty one is refused when `nonempty`. */
ac_status ac_cfg_string(const ac_cfg *r, const config_setting_t *s, const char *name, bool nonempty, char *out,
                        size_t size);
ac_status ac_cfg_bool(const ac_cfg *r, const config_setting_t *s, const char *name, bool *out);
/* A group { ... }. */
ac_status ac_cfg_group(const ac_cfg *r, const config_setting_t *s, const char *name);

/* ---- members of a group: `path` names the group ("" at the top level), and messages
 * call a member "path.key" ---- */

/* "path" + "key" -> "path.key"; at the top level just "key". */
void ac_cfg_join(char *out, size_t size, const char *path, const char *key);
/* Every member of `group` must be named in the NULL-terminated `allowed`. */
ac_status ac_cfg_check_keys(const ac_cfg *r, const config_setting_t *group, const char *path,
                            const char *const *allowed);

/* The readers below take `present`: NULL makes the member required; otherwise it may be
 * absent (*present false, *out untouched). */

/* The member `key` as a group; *out is NULL when it is absent and optional. */
ac_status ac_cfg_get_group(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                           bool required, config_setting_t **out);
/* The member `key` as an array or a list; *out is NULL when it is absent and optional. */
ac_status ac_cfg_get_list(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                          bool required, const config_setting_t **out);
ac_status ac_cfg_read_int64(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                            bool *present, long long lo, long long hi, long long *out);
/* An int >= lo. */
ac_status ac_cfg_read_int(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                          bool *present, int lo, int *out);
/* A finite number > 0. */
ac_status ac_cfg_read_positive(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                               bool *present, double *out);
/* A non-empty string; *where (may be NULL) gets the member, NULL when absent. */
ac_status ac_cfg_read_string(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                             bool *present, char *out, size_t size, const config_setting_t **where);
/* An optional boolean. */
ac_status ac_cfg_read_bool(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                           bool *out);

#endif
