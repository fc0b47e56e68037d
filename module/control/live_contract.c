/* A contract for the workload the server sees: the base contract's hardware, search space
 * and budgets, its workload replaced by the live one and, when given, its targets by new
 * ones. libconfig edits the tree and writes it back out; the contract parser then checks
 * the result, so a bad target name is refused with the parser's own message. */
#define _GNU_SOURCE
#include "autocompress/control.h"

#include <libconfig.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/contract.h"

/* An integer setting; past 32 bits it is written as a 64-bit literal (with the L suffix
 * the contract parser asks for). */
static int set_int(config_setting_t *group, const char *name, int64_t value)
{
    int wide = value < INT32_MIN || value > INT32_MAX;
    config_setting_t *s = config_setting_add(group, name, wide ? CONFIG_TYPE_INT64 : CONFIG_TYPE_INT);
    return s && (wide ? config_setting_set_int64(s, value) : config_setting_set_int(s, (int)value));
}

/* Removes `name` from the root (when there) and adds it again, empty. */
static config_setting_t *fresh_group(config_t *cfg, const char *name)
{
    config_setting_t *root = config_root_setting(cfg);
    if (config_setting_get_member(root, name))
        config_setting_remove(root, name);
    return config_setting_add(root, name, CONFIG_TYPE_GROUP);
}

static ac_status replace_workload(config_t *cfg, const ac_contract_workload *w)
{
    config_setting_t *g = fresh_group(cfg, "workload");
    int ok = g && set_int(g, "batch", w->batch) && set_int(g, "cached_tokens", w->cached_tokens) &&
             set_int(g, "input_tokens", w->input_tokens) && set_int(g, "output_tokens", w->output_tokens);
    return ok ? AC_OK : ac_fail(AC_ERR_NOMEM, "live contract: cannot build the workload group");
}

static ac_status replace_targets(config_t *cfg, const ac_contract_target *targets, int n)
{
    config_setting_t *g = fresh_group(cfg, "targets");
    for (int i = 0; g && i < n; i++) {
        if (!config_setting_is_group(g) || config_setting_get_member(g, targets[i].name))
            return ac_fail(AC_ERR_INVALID, "targets.%s given twice", targets[i].name);
        config_setting_t *s = config_setting_add(g, targets[i].name, CONFIG_TYPE_FLOAT);
        if (!s) /* libconfig refuses names that are not identifiers */
            return ac_fail(AC_ERR_INVALID, "targets: '%s' is not a setting name", targets[i].name);
        config_setting_set_float(s, targets[i].value);
    }
    return g ? AC_OK : ac_fail(AC_ERR_NOMEM, "live contract: cannot build the targets group");
}

static ac_status write_text(config_t *cfg, char **text)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (!f)
        return ac_fail(AC_ERR_NOMEM, "live contract: out of memory");
    config_write(cfg, f);
    return fclose(f) == 0 ? AC_OK : ac_fail(AC_ERR_NOMEM, "live contract: out of memory");
}

ac_status ac_contract_rewrite(const char *base, const char *base_name, const ac_contract_workload *workload,
                              const ac_contract_target *targets, int n_targets, char **text)
{
    *text = NULL;
    if (workload->batch < 1 || workload->input_tokens < 1 || workload->output_tokens < 1 || workload->cached_tokens < 0)
        return ac_fail(AC_ERR_INVALID, "live contract: the workload needs batch, input and output of at least 1");
    config_t cfg;
    config_init(&cfg);
    ac_status st = AC_OK;
    if (!config_read_string(&cfg, base))
        st = ac_fail(AC_ERR_INVALID, "%s:%d: %s", base_name, config_error_line(&cfg), config_error_text(&cfg));
    if (st == AC_OK)
        st = replace_workload(&cfg, workload);
    if (st == AC_OK && n_targets > 0)
        st = replace_targets(&cfg, targets, n_targets);
    if (st == AC_OK)
        st = write_text(&cfg, text);
    config_destroy(&cfg);
    ac_contract check;
    if (st == AC_OK)
        st = ac_contract_parse_string(*text, base_name, &check);
    if (st != AC_OK) {
        free(*text);
        *text = NULL;
    }
    return st;
}
