/* Reading and validating a deployment contract (libconfig). The layout and every rule
 * are described in autocompress/contract.h. Each check fails with "FILE:LINE: message"
 * where LINE is that of the offending setting, list element, or (for a missing entry)
 * the enclosing group. */
#include "autocompress/contract.h"
#include "autocompress/model.h"

#include "contract/contract_internal.h"
#include "util/cfg.h"

#include <errno.h>
#include <limits.h>
#include <libconfig.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A required, non-empty, strictly descending list of integers >= lo. */
static ac_status read_candidates(const ac_cfg *r, const config_setting_t *group, const char *path,
                                 const char *key, int lo, ac_candidates *out)
{
    char full[256];
    const config_setting_t *list;
    ac_status st = ac_cfg_get_list(r, group, path, key, true, &list);
    if (st != AC_OK)
        return st;
    ac_cfg_join(full, sizeof full, path, key);
    int n = config_setting_length(list);
    if (n == 0)
        return ac_cfg_fail(r, list, "%s: empty list (give at least one candidate)", full);
    if (n > AC_CONTRACT_MAX_CANDIDATES)
        return ac_cfg_fail(r, list, "%s: %d candidates, at most %d", full, n,
                           AC_CONTRACT_MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        char item[288];
        long long v = 0;
        snprintf(item, sizeof item, "%s[%d]", full, i);
        st = ac_cfg_int64(r, e, item, lo, INT_MAX, &v);
        if (st != AC_OK)
            return st;
        if (i > 0 && v == out->values[i - 1])
            return ac_cfg_fail(r, e, "%s = %lld: duplicate of %s[%d]; candidates must be strictly "
                               "descending", item, v, full, i - 1);
        if (i > 0 && v > out->values[i - 1])
            return ac_cfg_fail(r, e, "%s = %lld: larger than %s[%d] = %d; candidates must be "
                               "strictly descending", item, v, full, i - 1, out->values[i - 1]);
        out->values[i] = (int)v;
    }
    out->count = n;
    return AC_OK;
}

static ac_status parse_device(const ac_cfg *r, const config_setting_t *s, ac_contract_hardware *hw)
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
    return ac_cfg_fail(r, s, "hardware.device: bad device string '%s' (expected \"cpu\", \"cuda\" or "
                       "\"cuda:N\", N a device index)", d);
}

static ac_status read_hardware(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"device", "name", "threads", "memory_gib", "count",
                                       "tensor_parallel", "data_parallel", "weights", NULL};
    const char *path = "hardware";
    ac_contract_hardware *hw = &c->hardware;
    config_setting_t *g;
    const config_setting_t *device;
    bool present;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = ac_cfg_read_string(r, g, path, "device", NULL, hw->device, sizeof hw->device, &device);
    if (st != AC_OK)
        return st;
    if ((st = parse_device(r, device, hw)) != AC_OK)
        return st;
    st = ac_cfg_read_string(r, g, path, "name", &present, hw->name, sizeof hw->name, NULL);
    if (st != AC_OK)
        return st;
    char weights[8] = "f32";
    const config_setting_t *where;
    st = ac_cfg_read_string(r, g, path, "weights", &present, weights, sizeof weights, &where);
    if (st != AC_OK)
        return st;
    if (ac_weights_dtype_parse("hardware.weights", weights, &hw->weights) != AC_OK)
        return ac_cfg_fail(r, where, "hardware.weights: '%s' is neither \"f32\" nor \"bf16\"", weights);
    hw->threads = 0;
    hw->count = hw->tensor_parallel = hw->data_parallel = 1;
    if ((st = ac_cfg_read_int(r, g, path, "threads", &present, 0, &hw->threads)) != AC_OK)
        return st;
    if (hw->threads > AC_CONTRACT_MAX_THREADS)
        return ac_cfg_fail(r, config_setting_get_member(g, "threads"), "hardware.threads = %d: at most %d "
                           "(0 = all cores)", hw->threads, AC_CONTRACT_MAX_THREADS);
    if ((st = ac_cfg_read_positive(r, g, path, "memory_gib", &hw->has_memory, &hw->memory_gib)) != AC_OK)
        return st;
    if ((st = ac_cfg_read_int(r, g, path, "count", &present, 1, &hw->count)) != AC_OK)
        return st;
    if ((st = ac_cfg_read_int(r, g, path, "tensor_parallel", &present, 1, &hw->tensor_parallel)) != AC_OK)
        return st;
    if ((st = ac_cfg_read_int(r, g, path, "data_parallel", &present, 1, &hw->data_parallel)) != AC_OK)
        return st;
    if ((long long)hw->tensor_parallel * hw->data_parallel != hw->count)
        return ac_cfg_fail(r, g, "hardware: tensor_parallel (%d) x data_parallel (%d) = %lld does "
                           "not equal count (%d)", hw->tensor_parallel, hw->data_parallel,
                           (long long)hw->tensor_parallel * hw->data_parallel, hw->count);
    /* one replica is one model on one device: nothing here splits a model across devices */
    if (hw->tensor_parallel > 1)
        return ac_cfg_fail(r, config_setting_get_member(g, "tensor_parallel"), "hardware.tensor_parallel = %d: "
                           "not supported (this engine serves and measures a model on one device; scale out with "
                           "data_parallel, one replica a device)", hw->tensor_parallel);
    return AC_OK;
}

static ac_status read_workload(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"batch", "cached_tokens", "input_tokens",
                                       "output_tokens", NULL};
    const char *path = "workload";
    ac_contract_workload *w = &c->workload;
    config_setting_t *g;
    bool present;
    long long v;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = ac_cfg_read_int(r, g, path, "batch", NULL, 1, &w->batch)) != AC_OK)
        return st;
    v = 0;
    if ((st = ac_cfg_read_int64(r, g, path, "cached_tokens", &present, 0, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->cached_tokens = v;
    if ((st = ac_cfg_read_int64(r, g, path, "input_tokens", NULL, 1, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->input_tokens = v;
    /* throughput counts output tokens, and a request with none has no decode to measure */
    if ((st = ac_cfg_read_int64(r, g, path, "output_tokens", NULL, 1, LLONG_MAX, &v)) != AC_OK)
        return st;
    w->output_tokens = v;
    return AC_OK;
}

static ac_status read_costs(const ac_cfg *r, const config_setting_t *g, const char *path,
                            ac_contract_costs *costs)
{
    ac_status st = ac_cfg_read_positive(r, g, path, "latency_ms", &costs->has_latency, &costs->latency_ms);
    if (st == AC_OK)
        st = ac_cfg_read_positive(r, g, path, "throughput_tok_s", &costs->has_throughput,
                                  &costs->throughput_tok_s);
    if (st == AC_OK)
        st = ac_cfg_read_positive(r, g, path, "memory_gib", &costs->has_memory, &costs->memory_gib);
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
static ac_status read_margin(const ac_cfg *r, const config_setting_t *g, double *margin)
{
    *margin = AC_CONTRACT_DEFAULT_MARGIN;
    const config_setting_t *s = config_setting_get_member(g, "margin");
    if (!s)
        return AC_OK;
    double v = 0;
    ac_status st = ac_cfg_number(r, s, "targets.margin", &v);
    if (st != AC_OK)
        return st;
    if (!isfinite(v) || v < 0 || v >= AC_CONTRACT_MAX_MARGIN)
        return ac_cfg_fail(r, s, "targets.margin = %g: must be in [0, %g) (a fraction of each target)", v,
                           AC_CONTRACT_MAX_MARGIN);
    *margin = v;
    return AC_OK;
}

static ac_status read_targets(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"latency_ms", "throughput_tok_s", "memory_gib",
                                       "latency_ratio", "throughput_ratio", "memory_ratio",
                                       "margin", NULL};
    const char *path = "targets";
    config_setting_t *g;
    bool any = false;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
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
        if ((st = ac_cfg_read_positive(r, g, path, k->ratio, has_ratio, ratio)) != AC_OK)
            return st;
        if (*has_abs && *has_ratio)
            return ac_cfg_fail(r, config_setting_get_member(g, k->ratio),
                               "targets.%s and targets.%s both given (give the %s target "
                               "absolutely or relatively, not both)", k->key, k->ratio,
                               k->quantity);
        any = any || *has_abs || *has_ratio;
    }
    if (!any)
        return ac_cfg_fail(r, g, "targets: no target given (set at least one of latency_ms, "
                           "throughput_tok_s, memory_gib, latency_ratio, throughput_ratio, "
                           "memory_ratio)");
    if (c->targets.has_memory && c->hardware.has_memory &&
        c->targets.memory_gib > c->hardware.memory_gib)
        return ac_cfg_fail(r, config_setting_get_member(g, "memory_gib"),
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
    /* a model that does not fit one device's memory cannot serve there: with no memory
     * target, hardware.memory_gib is the bound (an explicit target is below it, checked above) */
    if (!resolved.has_memory && c->hardware.has_memory) {
        resolved.has_memory = true;
        resolved.memory_gib = c->hardware.memory_gib;
    }
    *out = resolved;
    return AC_OK;
}

static ac_status read_parent(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"name", "latency_ms", "throughput_tok_s", "memory_gib",
                                       NULL};
    const char *path = "parent";
    config_setting_t *g;
    bool present;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, false, &g)) != AC_OK || !g)
        return st;
    c->parent.present = true;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = ac_cfg_read_string(r, g, path, "name", &present, c->parent.name, sizeof c->parent.name, NULL);
    if (st != AC_OK)
        return st;
    return read_costs(r, g, path, &c->parent.cost);
}

static ac_status read_mamba_heads(const ac_cfg *r, const config_setting_t *space, ac_contract *c)
{
    static const char *const keys[] = {"values", "scope", "remove", NULL};
    const char *path = "search_space.mamba_heads";
    ac_contract_mamba_heads *m = &c->search.mamba_heads;
    config_setting_t *g;
    const config_setting_t *scope;
    char text[AC_CONTRACT_NAME_MAX];
    bool present;
    ac_status st;

    if ((st = ac_cfg_get_group(r, space, "search_space", "mamba_heads", true, &g)) != AC_OK)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
        return st;
    if ((st = read_candidates(r, g, path, "values", 1, &m->values)) != AC_OK)
        return st;
    m->scope = AC_SCOPE_GLOBAL;
    if ((st = ac_cfg_read_string(r, g, path, "scope", &present, text, sizeof text, &scope)) != AC_OK)
        return st;
    if (present) {
        if (!strcmp(text, "global"))
            m->scope = AC_SCOPE_GLOBAL;
        else if (!strcmp(text, "per_layer"))
            m->scope = AC_SCOPE_PER_LAYER;
        else
            return ac_cfg_fail(r, scope, "%s.scope: bad scope '%s' (expected \"global\" or "
                               "\"per_layer\")", path, text);
    }
    m->remove = false;
    return ac_cfg_read_bool(r, g, path, "remove", &m->remove);
}

static ac_status read_removable(const ac_cfg *r, const config_setting_t *space, ac_contract *c)
{
    static const char *const kinds[] = {"mamba", "moe", "mlp", "attention"};
    const char *full = "search_space.removable";
    ac_contract_removable *rm = &c->search.removable;
    bool *flags[] = {&rm->mamba, &rm->moe, &rm->mlp, &rm->attention};
    const config_setting_t *list;
    ac_status st;

    if ((st = ac_cfg_get_list(r, space, "search_space", "removable", false, &list)) != AC_OK || !list)
        return st;
    int n = config_setting_length(list);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING)
            return ac_cfg_fail(r, e, "%s[%d]: expected a string, got %s", full, i,
                               ac_cfg_type_name(config_setting_type(e)));
        const char *v = config_setting_get_string(e);
        int k = 0;
        while (k < 4 && strcmp(v, kinds[k]))
            k++;
        if (k == 4)
            return ac_cfg_fail(r, e, "%s[%d]: unknown layer kind '%s' (expected one of: mamba, "
                               "moe, mlp, attention)", full, i, v);
        if (*flags[k])
            return ac_cfg_fail(r, e, "%s[%d]: duplicate layer kind '%s'", full, i, v);
        *flags[k] = true;
    }
    return AC_OK;
}

static ac_status read_search_space(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"hidden_sizes", "mamba_heads", "routed_experts",
                                       "routed_ffn", "shared_ffn", "removable", NULL};
    const char *path = "search_space";
    ac_contract_search_space *s = &c->search;
    config_setting_t *g;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, true, &g)) != AC_OK)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
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
        return ac_cfg_fail(r, config_setting_get_member(config_setting_get_member(g, "mamba_heads"),
                                                        "remove"),
                           "search_space.mamba_heads.remove = true needs \"mamba\" in "
                           "search_space.removable");
    return AC_OK;
}

static ac_status read_budgets(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"search_tokens", "kd_tokens", NULL};
    const char *path = "budgets";
    ac_contract_budgets *b = &c->budgets;
    config_setting_t *g;
    long long v = 0;
    ac_status st;

    if ((st = ac_cfg_get_group(r, root, "", path, false, &g)) != AC_OK || !g)
        return st;
    if ((st = ac_cfg_check_keys(r, g, path, keys)) != AC_OK)
        return st;
    st = ac_cfg_read_int64(r, g, path, "search_tokens", &b->has_search_tokens, 0, LLONG_MAX, &v);
    if (st != AC_OK)
        return st;
    b->search_tokens = b->has_search_tokens ? v : 0;
    v = 0;
    st = ac_cfg_read_int64(r, g, path, "kd_tokens", &b->has_kd_tokens, 0, LLONG_MAX, &v);
    if (st != AC_OK)
        return st;
    b->kd_tokens = b->has_kd_tokens ? v : 0;
    return AC_OK;
}

static ac_status read_contract(const ac_cfg *r, const config_setting_t *root, ac_contract *c)
{
    static const char *const keys[] = {"name", "hardware", "workload", "targets", "parent",
                                       "search_space", "budgets", NULL};
    ac_status st = ac_cfg_check_keys(r, root, "", keys);
    if (st == AC_OK)
        st = ac_cfg_read_string(r, root, "", "name", NULL, c->name, sizeof c->name, NULL);
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
    ac_cfg r = {file, AC_CFG_SAY_EXPECTED};
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
    /* asked here, before any stage's work, rather than when the first model moves there */
    ac_status st = ac_device_check("cuda");
    if (st != AC_OK)
        return ac_fail_context(st, "contract %s: hardware.device = \"%s\" cannot be measured here", contract->name,
                               hw->device);
    *device = "cuda";
    return AC_OK;
}
