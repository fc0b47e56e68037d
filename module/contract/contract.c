/* Reading and validating a deployment contract (libconfig). The layout and every rule
 * are described in autocompress/contract.h. Each check fails with "FILE:LINE: message"
 * where LINE is that of the offending setting, list element, or (for a missing entry)
 * the enclosing group. */
#include "autocompress/contract.h"

#include "contract/contract_internal.h"

#include <errno.h>
#include <limits.h>
#include <libconfig.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *file; /* stands for FILE in messages when libconfig knows none */
} reader;

static const char *setting_file(const reader *r, const config_setting_t *s)
{
    const char *f = s ? config_setting_source_file(s) : NULL;
    return f ? f : r->file;
}

static unsigned setting_line(const config_setting_t *s)
{
    unsigned line = s ? config_setting_source_line(s) : 0;
    return line ? line : 1; /* the root group has no line of its own */
}

static ac_status fail_at(const reader *r, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ac_status fail_at(const reader *r, const config_setting_t *s, const char *fmt, ...)
{
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(AC_ERR_INVALID, "%s:%u: %s", setting_file(r, s), setting_line(s), message);
}

static const char *type_name(int type)
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

/* "workload" + "batch" -> "workload.batch"; the top level has the empty path. */
static void join_path(char *out, size_t size, const char *path, const char *key)
{
    if (path[0])
        snprintf(out, size, "%s.%s", path, key);
    else
        snprintf(out, size, "%s", key);
}

/* Every member of `group` must be named in the NULL-terminated `allowed`. */
static ac_status check_keys(const reader *r, const config_setting_t *group, const char *path,
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
        return fail_at(r, s, "unknown key '%s' in %s (expected one of: %s)", key ? key : "?",
                       path[0] ? path : "the top level", expected);
    }
    return AC_OK;
}

static ac_status missing(const reader *r, const config_setting_t *group, const char *path,
                         const char *key, const char *what)
{
    return fail_at(r, group, "missing required %s '%s' in %s", what, key,
                   path[0] ? path : "the top level");
}

/* The member `key` of `group` as a group; *out is NULL when it is absent and optional. */
static ac_status get_group(const reader *r, const config_setting_t *group, const char *path,
                           const char *key, bool required, config_setting_t **out)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    *out = config_setting_get_member(group, key);
    if (!*out)
        return required ? missing(r, group, path, key, "group") : AC_OK;
    if (config_setting_type(*out) != CONFIG_TYPE_GROUP)
        return fail_at(r, *out, "%s: expected a group { ... }, got %s", full,
                       type_name(config_setting_type(*out)));
    return AC_OK;
}

/* An integer (int or int64) scalar setting `s` named `full`, checked against [lo, hi]. */
static ac_status int_value(const reader *r, const config_setting_t *s, const char *full,
                           long long lo, long long hi, long long *out)
{
    int type = config_setting_type(s);
    long long v;
    if (type == CONFIG_TYPE_INT)
        v = config_setting_get_int(s);
    else if (type == CONFIG_TYPE_INT64)
        v = config_setting_get_int64(s);
    else
        return fail_at(r, s, "%s: expected an integer, got %s", full, type_name(type));
    if (v < lo) {
        if (lo == 1)
            return fail_at(r, s, "%s = %lld: must be > 0", full, v);
        return fail_at(r, s, "%s = %lld: must be >= %lld", full, v, lo);
    }
    if (v > hi)
        return fail_at(r, s, "%s = %lld: must be <= %lld", full, v, hi);
    *out = v;
    return AC_OK;
}

/* Reads integer member `key`; *present tells whether it was given (NULL: required). */
static ac_status read_int64(const reader *r, const config_setting_t *group, const char *path,
                            const char *key, bool *present, long long lo, long long hi,
                            long long *out)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    const config_setting_t *s = config_setting_get_member(group, key);
    if (present)
        *present = s != NULL;
    if (!s)
        return present ? AC_OK : missing(r, group, path, key, "entry");
    return int_value(r, s, full, lo, hi, out);
}

static ac_status read_int(const reader *r, const config_setting_t *group, const char *path,
                          const char *key, bool *present, int lo, int *out)
{
    long long v = *out;
    ac_status st = read_int64(r, group, path, key, present, lo, INT_MAX, &v);
    if (st == AC_OK)
        *out = (int)v;
    return st;
}

/* A float member (integers accepted) that must be finite and > 0. */
/* A float or integer setting as a double. */
static ac_status read_number(const reader *r, const config_setting_t *s, const char *full, double *out)
{
    int type = config_setting_type(s);
    if (type == CONFIG_TYPE_FLOAT)
        *out = config_setting_get_float(s);
    else if (type == CONFIG_TYPE_INT)
        *out = config_setting_get_int(s);
    else if (type == CONFIG_TYPE_INT64)
        *out = (double)config_setting_get_int64(s);
    else
        return fail_at(r, s, "%s: expected a number, got %s", full, type_name(type));
    return AC_OK;
}

static ac_status read_positive(const reader *r, const config_setting_t *group, const char *path,
                               const char *key, bool *present, double *out)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    const config_setting_t *s = config_setting_get_member(group, key);
    *present = s != NULL;
    if (!s)
        return AC_OK;
    double v = 0;
    ac_status st = read_number(r, s, full, &v);
    if (st != AC_OK)
        return st;
    if (!isfinite(v) || v <= 0)
        return fail_at(r, s, "%s = %g: must be > 0", full, v);
    *out = v;
    return AC_OK;
}

/* A string member copied into out[size]; empty strings are rejected. */
static ac_status read_string(const reader *r, const config_setting_t *group, const char *path,
                             const char *key, bool *present, char *out, size_t size,
                             const config_setting_t **where)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    const config_setting_t *s = config_setting_get_member(group, key);
    if (where)
        *where = s;
    if (present)
        *present = s != NULL;
    if (!s)
        return present ? AC_OK : missing(r, group, path, key, "entry");
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return fail_at(r, s, "%s: expected a string, got %s", full,
                       type_name(config_setting_type(s)));
    const char *v = config_setting_get_string(s);
    size_t n = strlen(v);
    if (n == 0)
        return fail_at(r, s, "%s: must not be empty", full);
    if (n >= size)
        return fail_at(r, s, "%s: longer than %zu characters", full, size - 1);
    memcpy(out, v, n + 1);
    return AC_OK;
}

static ac_status read_bool(const reader *r, const config_setting_t *group, const char *path,
                           const char *key, bool *out)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    const config_setting_t *s = config_setting_get_member(group, key);
    if (!s)
        return AC_OK;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL)
        return fail_at(r, s, "%s: expected true or false, got %s", full,
                       type_name(config_setting_type(s)));
    *out = config_setting_get_bool(s) != 0;
    return AC_OK;
}

/* The member `key` as an array or list; *out is NULL when absent and optional. */
static ac_status get_list(const reader *r, const config_setting_t *group, const char *path,
                          const char *key, bool required, const config_setting_t **out)
{
    char full[256];
    join_path(full, sizeof full, path, key);
    const config_setting_t *s = config_setting_get_member(group, key);
    *out = s;
    if (!s)
        return required ? missing(r, group, path, key, "list") : AC_OK;
    int type = config_setting_type(s);
    if (type != CONFIG_TYPE_ARRAY && type != CONFIG_TYPE_LIST)
        return fail_at(r, s, "%s: expected a list [ ... ], got %s", full, type_name(type));
    return AC_OK;
}

/* A required, non-empty, strictly descending list of integers >= lo. */
static ac_status read_candidates(const reader *r, const config_setting_t *group, const char *path,
                                 const char *key, int lo, ac_candidates *out)
{
    char full[256];
    const config_setting_t *list;
    ac_status st = get_list(r, group, path, key, true, &list);
    if (st != AC_OK)
        return st;
    join_path(full, sizeof full, path, key);
    int n = config_setting_length(list);
    if (n == 0)
        return fail_at(r, list, "%s: empty list (give at least one candidate)", full);
    if (n > AC_CONTRACT_MAX_CANDIDATES)
        return fail_at(r, list, "%s: %d candidates, at most %d", full, n,
                       AC_CONTRACT_MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        char item[288];
        long long v = 0;
        snprintf(item, sizeof item, "%s[%d]", full, i);
        st = int_value(r, e, item, lo, INT_MAX, &v);
        if (st != AC_OK)
            return st;
        if (i > 0 && v == out->values[i - 1])
            return fail_at(r, e, "%s = %lld: duplicate of %s[%d]; candidates must be strictly "
                           "descending", item, v, full, i - 1);
        if (i > 0 && v > out->values[i - 1])
            return fail_at(r, e, "%s = %lld: larger than %s[%d] = %d; candidates must be "
                           "strictly descending", item, v, full, i - 1, out->values[i - 1]);
        out->values[i] = (int)v;
    }
    out->count = n;
    return AC_OK;
}

static ac_status parse_device(const reader *r, const config_setting_t *s, ac_contract_hardware *hw)
{
    const char *d = hw->device;
    if (!strcmp(d, "cpu") || !strcmp(d, "cuda")) { /* "cuda": the first device, cuda:0 */
        hw->kind = d[1] == 'p' ? AC_DEVICE_CPU : AC_DEVICE_CUDA;
        hw->index = 0;
        return AC_OK;
    }
    if (!strncmp(d, "cuda:", 5)) {
        const char *n = d + 5;
        size_t len = strlen(n);
        bool digits = len >= 1 && len <= 6;
        for (size_t i = 0; digits && i < len; i++)
            digits = n[i] >= '0' && n[i] <= '9';
        if (digits) {
            hw->kind = AC_DEVICE_CUDA;
            hw->index = atoi(n);
            return AC_OK;
        }
    }
    return fail_at(r, s, "hardware.device: bad device string '%s' (expected \"cpu\", \"cuda\" or "
                   "\"cuda:N\", N a device index)", d);
}

static ac_status read_hardware(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"device", "name", "threads", "memory_gib", "count",
                                       "tensor_parallel", "data_parallel", "weights", NULL};
    const char *path = "hardware";
    ac_contract_hardware *hw = &c->hardware;
    config_setting_t *g;
    const config_setting_t *device;
    bool present;
    ac_status st;

    if ((st = get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = read_string(r, g, path, "device", NULL, hw->device, sizeof hw->device, &device);
    if (st != AC_OK)
        return st;
    if ((st = parse_device(r, device, hw)) != AC_OK)
        return st;
    st = read_string(r, g, path, "name", &present, hw->name, sizeof hw->name, NULL);
    if (st != AC_OK)
        return st;
    char weights[8] = "f32";
    const config_setting_t *where;
    st = read_string(r, g, path, "weights", &present, weights, sizeof weights, &where);
    if (st != AC_OK)
        return st;
    if (ac_weights_dtype_parse("hardware.weights", weights, &hw->weights) != AC_OK)
        return fail_at(r, where, "hardware.weights: '%s' is neither \"f32\" nor \"bf16\"", weights);
    hw->threads = 0;
    hw->count = hw->tensor_parallel = hw->data_parallel = 1;
    if ((st = read_int(r, g, path, "threads", &present, 0, &hw->threads)) != AC_OK)
        return st;
    if ((st = read_positive(r, g, path, "memory_gib", &hw->has_memory, &hw->memory_gib)) != AC_OK)
        return st;
    if ((st = read_int(r, g, path, "count", &present, 1, &hw->count)) != AC_OK)
        return st;
    if ((st = read_int(r, g, path, "tensor_parallel", &present, 1, &hw->tensor_parallel)) != AC_OK)
        return st;
    if ((st = read_int(r, g, path, "data_parallel", &present, 1, &hw->data_parallel)) != AC_OK)
        return st;
    if ((long long)hw->tensor_parallel * hw->data_parallel != hw->count)
        return fail_at(r, g, "hardware: tensor_parallel (%d) x data_parallel (%d) = %lld does "
                       "not equal count (%d)", hw->tensor_parallel, hw->data_parallel,
                       (long long)hw->tensor_parallel * hw->data_parallel, hw->count);
    return AC_OK;
}

static ac_status read_workload(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"batch", "cached_tokens", "input_tokens",
                                       "output_tokens", NULL};
    const char *path = "workload";
    ac_contract_workload *w = &c->workload;
    config_setting_t *g;
    bool present;
    long long v;
    ac_status st;

    if ((st = get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = read_int(r, g, path, "batch", NULL, 1, &w->batch)) != AC_OK)
        return st;
    v = 0;
    if ((st = read_int64(r, g, path, "cached_tokens", &present, 0, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->cached_tokens = v;
    if ((st = read_int64(r, g, path, "input_tokens", NULL, 1, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->input_tokens = v;
    v = 0;
    if ((st = read_int64(r, g, path, "output_tokens", &present, 0, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->output_tokens = v;
    return AC_OK;
}

static ac_status read_costs(const reader *r, const config_setting_t *g, const char *path,
                            ac_contract_costs *costs)
{
    ac_status st = read_positive(r, g, path, "latency_ms", &costs->has_latency, &costs->latency_ms);
    if (st == AC_OK)
        st = read_positive(r, g, path, "throughput_tok_s", &costs->has_throughput,
                           &costs->throughput_tok_s);
    if (st == AC_OK)
        st = read_positive(r, g, path, "memory_gib", &costs->has_memory, &costs->memory_gib);
    return st;
}

/* The three quantities a target may bound, with their absolute and relative keys. */
typedef struct {
    const char *quantity; /* "latency" */
    const char *key;      /* "latency_ms" */
    const char *ratio;    /* "latency_ratio" */
} target_keys;

static const target_keys target_names[3] = {
    {"latency", "latency_ms", "latency_ratio"},
    {"throughput", "throughput_tok_s", "throughput_ratio"},
    {"memory", "memory_gib", "memory_ratio"},
};

/* Quantity i (as in target_names) of `costs` and of `ratios`: pointers to the flag and
 * the value of each. */
static void cost_slot(ac_contract_costs *costs, int i, bool **has, double **value)
{
    *has = i == 0 ? &costs->has_latency : i == 1 ? &costs->has_throughput : &costs->has_memory;
    *value = i == 0 ? &costs->latency_ms : i == 1 ? &costs->throughput_tok_s : &costs->memory_gib;
}

static void ratio_slot(ac_contract_ratios *ratios, int i, bool **has, double **value)
{
    *has = i == 0 ? &ratios->has_latency : i == 1 ? &ratios->has_throughput : &ratios->has_memory;
    *value = i == 0 ? &ratios->latency : i == 1 ? &ratios->throughput : &ratios->memory;
}

/* targets.margin: a fraction in [0, AC_CONTRACT_MAX_MARGIN), the default when absent. */
static ac_status read_margin(const reader *r, const config_setting_t *g, double *margin)
{
    *margin = AC_CONTRACT_DEFAULT_MARGIN;
    const config_setting_t *s = config_setting_get_member(g, "margin");
    if (!s)
        return AC_OK;
    double v = 0;
    ac_status st = read_number(r, s, "targets.margin", &v);
    if (st != AC_OK)
        return st;
    if (!isfinite(v) || v < 0 || v >= AC_CONTRACT_MAX_MARGIN)
        return fail_at(r, s, "targets.margin = %g: must be in [0, %g) (a fraction of each target)", v,
                       AC_CONTRACT_MAX_MARGIN);
    *margin = v;
    return AC_OK;
}

static ac_status read_targets(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"latency_ms", "throughput_tok_s", "memory_gib",
                                       "latency_ratio", "throughput_ratio", "memory_ratio",
                                       "margin", NULL};
    const char *path = "targets";
    config_setting_t *g;
    bool any = false;
    ac_status st;

    if ((st = get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = read_costs(r, g, path, &c->targets)) != AC_OK)
        return st;
    if ((st = read_margin(r, g, &c->margin)) != AC_OK)
        return st;
    for (int i = 0; i < 3; i++) {
        const target_keys *k = &target_names[i];
        bool *has_abs, *has_ratio;
        double *abs, *ratio;
        cost_slot(&c->targets, i, &has_abs, &abs);
        ratio_slot(&c->ratios, i, &has_ratio, &ratio);
        if ((st = read_positive(r, g, path, k->ratio, has_ratio, ratio)) != AC_OK)
            return st;
        if (*has_abs && *has_ratio)
            return fail_at(r, config_setting_get_member(g, k->ratio),
                           "targets.%s and targets.%s both given (give the %s target "
                           "absolutely or relatively, not both)", k->key, k->ratio,
                           k->quantity);
        any = any || *has_abs || *has_ratio;
    }
    if (!any)
        return fail_at(r, g, "targets: no target given (set at least one of latency_ms, "
                       "throughput_tok_s, memory_gib, latency_ratio, throughput_ratio, "
                       "memory_ratio)");
    if (c->targets.has_memory && c->hardware.has_memory &&
        c->targets.memory_gib > c->hardware.memory_gib)
        return fail_at(r, config_setting_get_member(g, "memory_gib"),
                       "targets.memory_gib = %g exceeds hardware.memory_gib = %g",
                       c->targets.memory_gib, c->hardware.memory_gib);
    return AC_OK;
}

ac_status ac_contract_resolve_targets(const ac_contract *c, const ac_contract_costs *parent,
                                      ac_contract_costs *out)
{
    if (!out)
        return ac_fail(AC_ERR_INVALID, "resolve targets: no output costs given");
    memset(out, 0, sizeof *out);
    if (!c)
        return ac_fail(AC_ERR_INVALID, "resolve targets: no contract given");
    const char *name = c->source[0] ? c->source : c->name;
    ac_contract_costs targets = c->targets, known, resolved;
    ac_contract_ratios ratios = c->ratios;
    memset(&known, 0, sizeof known);
    memset(&resolved, 0, sizeof resolved);
    if (parent)
        known = *parent;
    for (int i = 0; i < 3; i++) {
        const target_keys *k = &target_names[i];
        bool *has_abs, *has_ratio, *has_parent, *has_out;
        double *abs, *ratio, *parent_value, *value;
        cost_slot(&targets, i, &has_abs, &abs);
        ratio_slot(&ratios, i, &has_ratio, &ratio);
        cost_slot(&known, i, &has_parent, &parent_value);
        cost_slot(&resolved, i, &has_out, &value);
        if (*has_abs) {
            *has_out = true;
            *value = *abs;
            continue;
        }
        if (!*has_ratio)
            continue;
        if (!*has_parent)
            return ac_fail(AC_ERR_INVALID, "%s: targets.%s = %g needs the parent's %s (%s), "
                           "which is not known", name, k->ratio, *ratio, k->quantity, k->key);
        if (!isfinite(*parent_value) || *parent_value <= 0)
            return ac_fail(AC_ERR_INVALID, "%s: targets.%s = %g needs the parent's %s (%s), "
                           "which is %g, not > 0", name, k->ratio, *ratio, k->quantity, k->key,
                           *parent_value);
        *has_out = true;
        *value = *ratio * *parent_value;
    }
    if (ratios.has_memory && c->hardware.has_memory && resolved.memory_gib > c->hardware.memory_gib)
        return ac_fail(AC_ERR_INVALID, "%s: the memory target, targets.memory_ratio = %g x the "
                       "parent's memory_gib %g = %g GiB, exceeds hardware.memory_gib = %g", name,
                       ratios.memory, known.memory_gib, resolved.memory_gib,
                       c->hardware.memory_gib);
    *out = resolved;
    return AC_OK;
}

static ac_status read_parent(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"name", "latency_ms", "throughput_tok_s", "memory_gib",
                                       NULL};
    const char *path = "parent";
    config_setting_t *g;
    bool present;
    ac_status st;

    if ((st = get_group(r, root, "", path, false, &g)) != AC_OK || !g)
        return st;
    c->parent.present = true;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = read_string(r, g, path, "name", &present, c->parent.name, sizeof c->parent.name, NULL);
    if (st != AC_OK)
        return st;
    return read_costs(r, g, path, &c->parent.cost);
}

static ac_status read_mamba_heads(const reader *r, const config_setting_t *space, ac_contract *c)
{
    static const char *const keys[] = {"values", "scope", "remove", NULL};
    const char *path = "search_space.mamba_heads";
    ac_contract_mamba_heads *m = &c->search.mamba_heads;
    config_setting_t *g;
    const config_setting_t *scope;
    char text[AC_CONTRACT_NAME_MAX];
    bool present;
    ac_status st;

    if ((st = get_group(r, space, "search_space", "mamba_heads", true, &g)) != AC_OK)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "values", 1, &m->values)) != AC_OK)
        return st;
    m->scope = AC_SCOPE_GLOBAL;
    if ((st = read_string(r, g, path, "scope", &present, text, sizeof text, &scope)) != AC_OK)
        return st;
    if (present) {
        if (!strcmp(text, "global"))
            m->scope = AC_SCOPE_GLOBAL;
        else if (!strcmp(text, "per_layer"))
            m->scope = AC_SCOPE_PER_LAYER;
        else
            return fail_at(r, scope, "%s.scope: bad scope '%s' (expected \"global\" or "
                           "\"per_layer\")", path, text);
    }
    m->remove = false;
    return read_bool(r, g, path, "remove", &m->remove);
}

static ac_status read_removable(const reader *r, const config_setting_t *space, ac_contract *c)
{
    static const char *const kinds[] = {"mamba", "moe", "mlp", "attention"};
    const char *full = "search_space.removable";
    ac_contract_removable *rm = &c->search.removable;
    bool *flags[] = {&rm->mamba, &rm->moe, &rm->mlp, &rm->attention};
    const config_setting_t *list;
    ac_status st;

    if ((st = get_list(r, space, "search_space", "removable", false, &list)) != AC_OK || !list)
        return st;
    int n = config_setting_length(list);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING)
            return fail_at(r, e, "%s[%d]: expected a string, got %s", full, i,
                           type_name(config_setting_type(e)));
        const char *v = config_setting_get_string(e);
        int k = 0;
        while (k < 4 && strcmp(v, kinds[k]))
            k++;
        if (k == 4)
            return fail_at(r, e, "%s[%d]: unknown layer kind '%s' (expected one of: mamba, "
                           "moe, mlp, attention)", full, i, v);
        if (*flags[k])
            return fail_at(r, e, "%s[%d]: duplicate layer kind '%s'", full, i, v);
        *flags[k] = true;
    }
    return AC_OK;
}

static ac_status read_search_space(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"hidden_sizes", "mamba_heads", "routed_experts",
                                       "routed_ffn", "shared_ffn", "removable", NULL};
    const char *path = "search_space";
    ac_contract_search_space *s = &c->search;
    config_setting_t *g;
    ac_status st;

    if ((st = get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "hidden_sizes", 1, &s->hidden_sizes)) != AC_OK)
        return st;
    if ((st = read_mamba_heads(r, g, c)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "routed_experts", 1, &s->routed_experts)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "routed_ffn", 0, &s->routed_ffn)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "shared_ffn", 0, &s->shared_ffn)) != AC_OK)
        return st;
    if ((st = read_removable(r, g, c)) != AC_OK)
        return st;
    if (s->mamba_heads.remove && !s->removable.mamba)
        return fail_at(r, config_setting_get_member(config_setting_get_member(g, "mamba_heads"),
                                                    "remove"),
                       "search_space.mamba_heads.remove = true needs \"mamba\" in "
                       "search_space.removable");
    return AC_OK;
}

static ac_status read_budgets(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"search_tokens", "kd_tokens", NULL};
    const char *path = "budgets";
    ac_contract_budgets *b = &c->budgets;
    config_setting_t *g;
    long long v = 0;
    ac_status st;

    if ((st = get_group(r, root, "", path, false, &g)) != AC_OK || !g)
        return st;
    if ((st = check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = read_int64(r, g, path, "search_tokens", &b->has_search_tokens, 0, LLONG_MAX, &v);
    if (st != AC_OK)
        return st;
    b->search_tokens = b->has_search_tokens ? v : 0;
    v = 0;
    st = read_int64(r, g, path, "kd_tokens", &b->has_kd_tokens, 0, LLONG_MAX, &v);
    if (st != AC_OK)
        return st;
    b->kd_tokens = b->has_kd_tokens ? v : 0;
    return AC_OK;
}

static ac_status read_contract(const reader *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"name", "hardware", "workload", "targets", "parent",
                                       "search_space", "budgets", NULL};
    ac_status st = check_keys(r, root, "", keys);
    if (st == AC_OK)
        st = read_string(r, root, "", "name", NULL, c->name, sizeof c->name, NULL);
    if (st == AC_OK)
        st = read_hardware(r, root, c);
    if (st == AC_OK)
        st = read_workload(r, root, c);
    if (st == AC_OK)
        st = read_targets(r, root, c);
    if (st == AC_OK)
        st = read_parent(r, root, c);
    if (st == AC_OK)
        st = read_search_space(r, root, c);
    if (st == AC_OK)
        st = read_budgets(r, root, c);
    return st;
}

/* Parses `text` (as read from `file`; includes resolve in `include_dir` when not NULL). */
static ac_status parse_text(const char *text, const char *file, const char *include_dir,
                            ac_contract *out)
{
    reader r = {file};
    config_t cfg;
    ac_contract c;
    ac_status st;

    memset(out, 0, sizeof *out);
    if ((st = ac_contract_check_int_literals(text, file)) != AC_OK)
        return st;
    memset(&c, 0, sizeof c);
    snprintf(c.source, sizeof c.source, "%s", file);
    config_init(&cfg);
    if (include_dir)
        config_set_include_dir(&cfg, include_dir);
    if (!config_read_string(&cfg, text)) {
        const char *ef = config_error_file(&cfg);
        st = ac_fail(AC_ERR_INVALID, "%s:%d: %s", ef ? ef : file,
                     config_error_line(&cfg) > 0 ? config_error_line(&cfg) : 1,
                     config_error_text(&cfg) ? config_error_text(&cfg) : "parse error");
    } else {
        st = read_contract(&r, config_root_setting(&cfg), &c);
    }
    config_destroy(&cfg);
    if (st == AC_OK)
        *out = c;
    return st;
}

ac_status ac_contract_parse_string(const char *text, const char *name_for_errors, ac_contract *out)
{
    const char *name = name_for_errors ? name_for_errors : "<string>";
    if (!out)
        return ac_fail(AC_ERR_INVALID, "%s: no output contract given", name);
    if (!text) {
        memset(out, 0, sizeof *out);
        return ac_fail(AC_ERR_INVALID, "%s: no contract text given", name);
    }
    return parse_text(text, name, NULL, out);
}

/* Reads at most AC_CONTRACT_MAX_FILE_BYTES of `path` into a NUL-terminated buffer. */
static ac_status read_file(const char *path, char **text)
{
    FILE *f = fopen(path, "rb");
    *text = NULL;
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = (size_t)AC_CONTRACT_MAX_FILE_BYTES + 1;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory reading the contract", path);
    }
    size_t n = fread(buf, 1, cap, f);
    bool failed = ferror(f) != 0;
    int err = errno;
    fclose(f);
    if (failed) {
        free(buf);
        return ac_fail(AC_ERR_IO, "%s: read error: %s", path, strerror(err));
    }
    if (n > (size_t)AC_CONTRACT_MAX_FILE_BYTES) {
        free(buf);
        return ac_fail(AC_ERR_INVALID, "%s: larger than %d bytes; not a contract", path,
                       AC_CONTRACT_MAX_FILE_BYTES);
    }
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
        int line = 1;
        for (const char *p = buf; p < nul; p++)
            line += *p == '\n';
        free(buf);
        return ac_fail(AC_ERR_INVALID, "%s:%d: NUL byte in the file; not a text contract",
                       path, line);
    }
    *text = buf;
    return AC_OK;
}

ac_status ac_contract_load(const char *path, ac_contract *out)
{
    if (!out)
        return ac_fail(AC_ERR_INVALID, "%s: no output contract given", path ? path : "(null)");
    memset(out, 0, sizeof *out);
    if (!path || !path[0])
        return ac_fail(AC_ERR_INVALID, "no contract path given");
    char *text;
    ac_status st = read_file(path, &text);
    if (st != AC_OK)
        return st;
    /* @include paths resolve beside the contract file */
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) < sizeof dir) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    st = parse_text(text, path, dir, out);
    free(text);
    return st;
}

ac_status ac_contract_compute_device(const ac_contract *contract, const char **device)
{
    const ac_contract_hardware *hw = &contract->hardware;
    *device = NULL;
    if (hw->kind == AC_DEVICE_CPU)
        return AC_OK;
    if (hw->index != 0)
        return ac_fail(AC_ERR_UNSUPPORTED, "contract %s: device %s: the CUDA backend runs on the first visible "
                       "device; make that one cuda:0 with CUDA_VISIBLE_DEVICES=%d", contract->name, hw->device,
                       hw->index);
    *device = "cuda";
    return AC_OK;
}
