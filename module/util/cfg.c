/* Typed libconfig reading with FILE:LINE messages; see util/cfg.h. */
#include "util/cfg.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *setting_file(const ac_cfg *r, const config_setting_t *s)
{
    const char *f = s ? config_setting_source_file(s) : NULL;
    return f ? f : r->file;
}

static unsigned setting_line(const config_setting_t *s)
{
    unsigned line = s ? config_setting_source_line(s) : 0;
    return line ? line : 1; /* the root group has no line of its own */
}

ac_status ac_cfg_fail(const ac_cfg *r, const config_setting_t *s, const char *fmt, ...)
{
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(AC_ERR_INVALID, "%s:%u: %s", setting_file(r, s), setting_line(s), message);
}

const char *ac_cfg_type_name(int type)
{
    switch (type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT: return "an integer";
    case CONFIG_TYPE_INT64: return "a 64-bit integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    }
    return "an unknown value";
}

/* ---- the two wordings ---- */

static ac_status wrong_type(const ac_cfg *r, const config_setting_t *s, const char *name, const char *wanted)
{
    if (r->wording == AC_CFG_SAY_MUST)
        return ac_cfg_fail(r, s, "%s must be %s", name, wanted);
    return ac_cfg_fail(r, s, "%s: expected %s, got %s", name, wanted, ac_cfg_type_name(config_setting_type(s)));
}

static ac_status int_out_of_range(const ac_cfg *r, const config_setting_t *s, const char *name, long long lo,
                                  long long hi, long long v)
{
    if (r->wording == AC_CFG_SAY_MUST)
        return hi == LLONG_MAX ? ac_cfg_fail(r, s, "%s must be at least %lld, got %lld", name, lo, v)
                               : ac_cfg_fail(r, s, "%s must be in [%lld, %lld], got %lld", name, lo, hi, v);
    if (v > hi)
        return ac_cfg_fail(r, s, "%s = %lld: must be <= %lld", name, v, hi);
    if (lo == 1)
        return ac_cfg_fail(r, s, "%s = %lld: must be > 0", name, v);
    return ac_cfg_fail(r, s, "%s = %lld: must be >= %lld", name, v, lo);
}

static ac_status number_out_of_range(const ac_cfg *r, const config_setting_t *s, const char *name, double lo,
                                     double hi, double v)
{
    if (r->wording == AC_CFG_SAY_MUST)
        return ac_cfg_fail(r, s, "%s must be in [%g, %g], got %g", name, lo, hi, v);
    return ac_cfg_fail(r, s, "%s = %g: must be in [%g, %g]", name, v, lo, hi);
}

/* ---- one setting ---- */

ac_status ac_cfg_int64(const ac_cfg *r, const config_setting_t *s, const char *name, long long lo, long long hi,
                       long long *out)
{
    int type = config_setting_type(s);
    if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
        return wrong_type(r, s, name, "an integer");
    long long v = type == CONFIG_TYPE_INT ? config_setting_get_int(s) : config_setting_get_int64(s);
    if (v < lo || v > hi)
        return int_out_of_range(r, s, name, lo, hi, v);
    *out = v;
    return AC_OK;
}

ac_status ac_cfg_int(const ac_cfg *r, const config_setting_t *s, const char *name, int lo, int hi, int *out)
{
    long long v = 0;
    ac_status st = ac_cfg_int64(r, s, name, lo, hi, &v);
    if (st == AC_OK)
        *out = (int)v;
    return st;
}

ac_status ac_cfg_number(const ac_cfg *r, const config_setting_t *s, const char *name, double *out)
{
    int type = config_setting_type(s);
    if (type == CONFIG_TYPE_FLOAT)
        *out = config_setting_get_float(s);
    else if (type == CONFIG_TYPE_INT)
        *out = config_setting_get_int(s);
    else if (type == CONFIG_TYPE_INT64)
        *out = (double)config_setting_get_int64(s);
    else
        return wrong_type(r, s, name, "a number");
    return AC_OK;
}

ac_status ac_cfg_double(const ac_cfg *r, const config_setting_t *s, const char *name, double lo, double hi,
                        double *out)
{
    double v = 0;
    ac_status st = ac_cfg_number(r, s, name, &v);
    if (st != AC_OK)
        return st;
    if (!(v >= lo && v <= hi)) /* NaN too */
        return number_out_of_range(r, s, name, lo, hi, v);
    *out = v;
    return AC_OK;
}

/* A finite number > 0. */
static ac_status positive(const ac_cfg *r, const config_setting_t *s, const char *name, double *out)
{
    double v = 0;
    ac_status st = ac_cfg_number(r, s, name, &v);
    if (st != AC_OK)
        return st;
    if (!isfinite(v) || v <= 0)
        return r->wording == AC_CFG_SAY_MUST ? ac_cfg_fail(r, s, "%s must be > 0, got %g", name, v)
                                             : ac_cfg_fail(r, s, "%s = %g: must be > 0", name, v);
    *out = v;
    return AC_OK;
}

ac_status ac_cfg_string(const ac_cfg *r, const config_setting_t *s, const char *name, bool nonempty, char *out,
                        size_t size)
{
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return wrong_type(r, s, name, "a string");
    const char *v = config_setting_get_string(s);
    size_t n = strlen(v);
    int must = r->wording == AC_CFG_SAY_MUST;
    if (n == 0 && nonempty)
        return ac_cfg_fail(r, s, must ? "%s must not be empty" : "%s: must not be empty", name);
    if (n >= size)
        return must ? ac_cfg_fail(r, s, "%s is too long", name)
                    : ac_cfg_fail(r, s, "%s: longer than %zu characters", name, size - 1);
    memcpy(out, v, n + 1);
    return AC_OK;
}

ac_status ac_cfg_bool(const ac_cfg *r, const config_setting_t *s, const char *name, bool *out)
{
    if (config_setting_type(s) != CONFIG_TYPE_BOOL)
        return wrong_type(r, s, name, "true or false");
    *out = config_setting_get_bool(s) != 0;
    return AC_OK;
}

ac_status ac_cfg_group(const ac_cfg *r, const config_setting_t *s, const char *name)
{
    return config_setting_type(s) == CONFIG_TYPE_GROUP ? AC_OK : wrong_type(r, s, name, "a group { ... }");
}

/* ---- members of a group ---- */

void ac_cfg_join(char *out, size_t size, const char *path, const char *key)
{
    if (path[0])
        snprintf(out, size, "%s.%s", path, key);
    else
        snprintf(out, size, "%s", key);
}

ac_status ac_cfg_check_keys(const ac_cfg *r, const config_setting_t *group, const char *path,
                            const char *const *allowed)
{
    int n = config_setting_length(group);
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *key = config_setting_name(s);
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = key && !strcmp(key, *a);
        if (known)
            continue;
        char expected[256] = "";
        for (const char *const *a = allowed; *a; a++) {
            size_t used = strlen(expected);
            snprintf(expected + used, sizeof expected - used, "%s%s", a == allowed ? "" : ", ", *a);
        }
        return ac_cfg_fail(r, s, "unknown key '%s' in %s (expected one of: %s)", key ? key : "?",
                           path[0] ? path : "the top level", expected);
    }
    return AC_OK;
}

/* "missing required WHAT 'key' in path", at the group's line. */
static ac_status missing(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                         const char *what)
{
    return ac_cfg_fail(r, group, "missing required %s '%s' in %s", what, key, path[0] ? path : "the top level");
}

/* The member `key` of `group` and its full name; a required one that is absent fails. */
static ac_status member(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                        bool required, const char *what, char full[256], config_setting_t **out)
{
    ac_cfg_join(full, 256, path, key);
    *out = config_setting_get_member(group, key);
    return !*out && required ? missing(r, group, path, key, what) : AC_OK;
}

ac_status ac_cfg_get_group(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                           bool required, config_setting_t **out)
{
    char full[256];
    ac_status st = member(r, group, path, key, required, "group", full, out);
    return st == AC_OK && *out ? ac_cfg_group(r, *out, full) : st;
}

ac_status ac_cfg_get_list(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                          bool required, const config_setting_t **out)
{
    char full[256];
    config_setting_t *s;
    ac_status st = member(r, group, path, key, required, "list", full, &s);
    *out = s;
    if (st != AC_OK || !s)
        return st;
    int type = config_setting_type(s);
    return type == CONFIG_TYPE_ARRAY || type == CONFIG_TYPE_LIST ? AC_OK : wrong_type(r, s, full, "a list [ ... ]");
}

/* The member for a scalar reader: *s is NULL when it is absent and optional. */
static ac_status scalar(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                        bool *present, char full[256], config_setting_t **s)
{
    ac_status st = member(r, group, path, key, present == NULL, "entry", full, s);
    if (present)
        *present = *s != NULL;
    return st;
}

ac_status ac_cfg_read_int64(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                            bool *present, long long lo, long long hi, long long *out)
{
    char full[256];
    config_setting_t *s;
    ac_status st = scalar(r, group, path, key, present, full, &s);
    return st == AC_OK && s ? ac_cfg_int64(r, s, full, lo, hi, out) : st;
}

ac_status ac_cfg_read_int(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                          bool *present, int lo, int *out)
{
    long long v = *out;
    ac_status st = ac_cfg_read_int64(r, group, path, key, present, lo, INT_MAX, &v);
    if (st == AC_OK)
        *out = (int)v;
    return st;
}

ac_status ac_cfg_read_positive(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                               bool *present, double *out)
{
    char full[256];
    config_setting_t *s;
    ac_status st = scalar(r, group, path, key, present, full, &s);
    return st == AC_OK && s ? positive(r, s, full, out) : st;
}

ac_status ac_cfg_read_string(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                             bool *present, char *out, size_t size, const config_setting_t **where)
{
    char full[256];
    config_setting_t *s;
    ac_status st = scalar(r, group, path, key, present, full, &s);
    if (where)
        *where = s;
    return st == AC_OK && s ? ac_cfg_string(r, s, full, true, out, size) : st;
}

ac_status ac_cfg_read_bool(const ac_cfg *r, const config_setting_t *group, const char *path, const char *key,
                           bool *out)
{
    char full[256];
    config_setting_t *s;
    bool present;
    ac_status st = scalar(r, group, path, key, &present, full, &s);
    return st == AC_OK && s ? ac_cfg_bool(r, s, full, out) : st;
}
