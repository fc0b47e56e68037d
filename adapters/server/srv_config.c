/* The server's libconfig file. Every setting is optional; unknown settings, wrong types
 * and out-of-range values are errors naming the file, line and setting:
 *
 *   host = "127.0.0.1";        port = 8080;
 *   slots = 8;                 max_queue = 256;
 *   prefill_chunk = 256;       max_step_tokens = 512;
 *   context_tokens = 4096;     default_max_tokens = 16;
 *   max_tokens_limit = 0;      max_prompt_tokens = 0;     (0: the context)
 *   max_body_bytes = 1048576;  max_connections = 64;    drain_timeout_s = 30.0;
 *   threads = 0;               model_name = "prose";     device = "cpu";   ("cuda": the GPU)
 *   weights = "f32";           ("bf16": the product weights rounded, about half the memory)
 *   admin_token = "...";       prefix_reuse = true;
 *   control = { jobs_dir = "autocompress-jobs"; data = "DIR"; tables = "FILE";
 *               parent = "DIR"; contract = "FILE"; threads = 1; nice = 10;
 *               measure_sweeps = 0; eval_batches = 0; search_tokens = 0; kd_tokens = 0; };
 *   sla = { p95_latency_ms = 800.0; time_per_output_token_ms = 40.0;
 *           min_throughput_tok_s = 0.0; memory_mib = 0.0; workload_drift = 0.5;
 *           window_s = 60.0; hysteresis = 0.1; cooldown_s = 900.0; interval_s = 5.0; }; */
#include "server/srv.h"

#include "util/cfg.h"

#include <libconfig.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_config_defaults(srv_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    snprintf(c->device, sizeof c->device, "cpu");
    c->slots = 8;
    c->max_queue = 256;
    c->prefill_chunk = 256;
    c->max_step_tokens = 512;
    c->context_tokens = 4096;
    c->default_max_tokens = 16;
    c->max_body_bytes = 1 << 20;
    c->max_connections = 64;
    c->drain_timeout_s = 30;
    c->threads = 0;
    c->prefix_reuse = 1;
    c->profile_every = 16;
    snprintf(c->control.jobs_dir, sizeof c->control.jobs_dir, "autocompress-jobs");
    c->control.threads = 1;
    c->control.nice = 10;
    c->sla.window_s = 60;
    c->sla.hysteresis = 0.1;
    c->sla.cooldown_s = 900;
    c->sla.interval_s = 5;
}

typedef struct {
    const char *name;
    int *value;
    int min, max;
} int_setting;

static ac_status read_weights(const ac_cfg *r, const config_setting_t *s, ac_dtype *out)
{
    char value[8];
    ac_status st = ac_cfg_string(r, s, config_setting_name(s), false, value, sizeof value);
    if (st == AC_OK && ac_weights_dtype_parse("weights", value, out) != AC_OK)
        st = ac_cfg_fail(r, s, "%s must be \"f32\" or \"bf16\"", config_setting_name(s));
    return st;
}

static ac_status read_flag(const ac_cfg *r, const config_setting_t *s, int *out)
{
    bool v = false;
    ac_status st = ac_cfg_bool(r, s, config_setting_name(s), &v);
    if (st == AC_OK)
        *out = v;
    return st;
}

static ac_status read_control(const ac_cfg *r, const config_setting_t *s, void *group)
{
    srv_control_config *c = group;
    const char *name = config_setting_name(s);
    struct {
        const char *name;
        char *out;
    } strings[] = {{"jobs_dir", c->jobs_dir}, {"data", c->data},         {"tables", c->tables},
                   {"parent", c->parent},     {"contract", c->contract}};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (!strcmp(name, strings[i].name))
            return ac_cfg_string(r, s, name, false, strings[i].out, SRV_PATH_MAX);
    const int_setting ints[] = {{"threads", &c->threads, 0, 1024},
                                {"nice", &c->nice, 0, 19},
                                {"measure_sweeps", &c->measure_sweeps, 0, 64},
                                {"eval_batches", &c->eval_batches, 0, 1 << 20}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(name, ints[i].name))
            return ac_cfg_int(r, s, name, ints[i].min, ints[i].max, ints[i].value);
    if (!strcmp(name, "search_tokens"))
        return ac_cfg_int64(r, s, name, 0, LLONG_MAX, &c->search_tokens);
    if (!strcmp(name, "kd_tokens"))
        return ac_cfg_int64(r, s, name, 0, LLONG_MAX, &c->kd_tokens);
    return ac_cfg_fail(r, s, "%s is not a control setting", name);
}

static ac_status read_sla(const ac_cfg *r, const config_setting_t *s, void *group)
{
    srv_sla_config *c = group;
    const struct {
        const char *name;
        double *out, min, max;
    } numbers[] = {{"p95_latency_ms", &c->p95_latency_ms, 0, 1e9},
                   {"time_per_output_token_ms", &c->time_per_output_token_ms, 0, 1e9},
                   {"min_throughput_tok_s", &c->min_throughput_tok_s, 0, 1e12},
                   {"memory_mib", &c->memory_mib, 0, 1e9},
                   {"workload_drift", &c->workload_drift, 0, 1e6},
                   {"window_s", &c->window_s, 0, 1e7},
                   {"hysteresis", &c->hysteresis, 0, 0.99},
                   {"cooldown_s", &c->cooldown_s, 0, 1e8},
                   {"interval_s", &c->interval_s, 0.05, 3600}};
    const char *name = config_setting_name(s);
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        if (!strcmp(name, numbers[i].name))
            return ac_cfg_double(r, s, name, numbers[i].min, numbers[i].max, numbers[i].out);
    return ac_cfg_fail(r, s, "%s is not an sla setting", name);
}

/* A group's settings, one by one, through read_one. */
static ac_status read_group(const ac_cfg *r, const config_setting_t *g, void *out,
                            ac_status (*read_one)(const ac_cfg *, const config_setting_t *, void *))
{
    ac_status st = ac_cfg_group(r, g, config_setting_name(g));
    for (int i = 0; st == AC_OK && i < config_setting_length(g); i++)
        st = read_one(r, config_setting_get_elem(g, (unsigned)i), out);
    return st;
}

static ac_status read_setting(const ac_cfg *r, const config_setting_t *s, srv_config *c)
{
    int body_bytes = (int)c->max_body_bytes;
    const int_setting ints[] = {
        {"port", &c->port, 0, 65535},
        {"slots", &c->slots, 1, 256},
        {"max_queue", &c->max_queue, 0, 1 << 20},
        {"prefill_chunk", &c->prefill_chunk, 1, 1 << 20},
        {"max_step_tokens", &c->max_step_tokens, 1, 1 << 20},
        {"context_tokens", &c->context_tokens, 2, 1 << 24},
        {"default_max_tokens", &c->default_max_tokens, 1, 1 << 24},
        {"max_tokens_limit", &c->max_tokens_limit, 0, 1 << 24},
        {"max_prompt_tokens", &c->max_prompt_tokens, 0, 1 << 24},
        {"max_body_bytes", &body_bytes, 1024, 1 << 30},
        {"max_connections", &c->max_connections, 1, 1 << 16},
        {"threads", &c->threads, 0, 1024},
        {"profile_every", &c->profile_every, 0, 1 << 20},
    };
    const char *name = config_setting_name(s);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(name, ints[i].name))
            continue;
        ac_status st = ac_cfg_int(r, s, name, ints[i].min, ints[i].max, ints[i].value);
        c->max_body_bytes = (size_t)body_bytes;
        return st;
    }
    if (!strcmp(name, "host"))
        return ac_cfg_string(r, s, name, false, c->host, sizeof c->host);
    if (!strcmp(name, "drain_timeout_s"))
        return ac_cfg_double(r, s, name, 0, 3600, &c->drain_timeout_s);
    if (!strcmp(name, "control"))
        return read_group(r, s, &c->control, read_control);
    if (!strcmp(name, "sla")) {
        c->sla.enabled = 1;
        return read_group(r, s, &c->sla, read_sla);
    }
    if (!strcmp(name, "profile_tables"))
        return ac_cfg_string(r, s, name, false, c->profile_tables, sizeof c->profile_tables);
    if (!strcmp(name, "device"))
        return ac_cfg_string(r, s, name, false, c->device, sizeof c->device);
    if (!strcmp(name, "weights"))
        return read_weights(r, s, &c->weights);
    if (!strcmp(name, "model_name"))
        return ac_cfg_string(r, s, name, false, c->model_name, sizeof c->model_name);
    if (!strcmp(name, "admin_token"))
        return ac_cfg_string(r, s, name, false, c->admin_token, sizeof c->admin_token);
    if (!strcmp(name, "prefix_reuse"))
        return read_flag(r, s, &c->prefix_reuse);
    return ac_cfg_fail(r, s, "%s is not a server setting (see adapters/server/srv_config.c)", name);
}

ac_status srv_config_load(const char *path, srv_config *c)
{
    config_t cfg;
    config_init(&cfg);
    ac_status st = AC_OK;
    if (!config_read_file(&cfg, path)) {
        if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO)
            st = ac_fail(AC_ERR_IO, "%s: cannot be read", path);
        else
            st = ac_fail(AC_ERR_INVALID, "%s:%d: %s", path, config_error_line(&cfg), config_error_text(&cfg));
    }
    const ac_cfg r = {path, AC_CFG_SAY_MUST};
    const config_setting_t *root = st == AC_OK ? config_root_setting(&cfg) : NULL;
    for (int i = 0; root && st == AC_OK && i < config_setting_length(root); i++)
        st = read_setting(&r, config_setting_get_elem(root, (unsigned)i), c);
    config_destroy(&cfg);
    return st;
}

void srv_config_apply_env(srv_config *c)
{
    const char *token = getenv("AUTOCOMPRESS_ADMIN_TOKEN");
    if (!c->admin_token[0] && token && strlen(token) < sizeof c->admin_token)
        snprintf(c->admin_token, sizeof c->admin_token, "%s", token);
}
