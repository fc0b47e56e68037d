/* The server's libconfig file. Every setting is optional; unknown settings, wrong types
 * and out-of-range values are errors naming the file, line and setting:
 *
 *   host = "127.0.0.1";        port = 8080;
 *   slots = 8;                 max_queue = 256;
 *   prefill_chunk = 256;       max_step_tokens = 512;
 *   context_tokens = 4096;     default_max_tokens = 16;
 *   max_body_bytes = 1048576;  max_connections = 64;
 *   threads = 0;               model_name = "prose";
 *   admin_token = "...";       prefix_reuse = true; */
#include "server/srv.h"

#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_config_defaults(srv_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    c->slots = 8;
    c->max_queue = 256;
    c->prefill_chunk = 256;
    c->max_step_tokens = 512;
    c->context_tokens = 4096;
    c->default_max_tokens = 16;
    c->max_body_bytes = 1 << 20;
    c->max_connections = 64;
    c->threads = 0;
    c->prefix_reuse = 1;
}

typedef struct {
    const char *name;
    int *value;
    long long min, max;
} int_setting;

static ac_status bad(const char *path, const config_setting_t *s, const char *what)
{
    return ac_fail(AC_ERR_INVALID, "%s:%u: %s %s", path, config_setting_source_line(s), config_setting_name(s), what);
}

static ac_status read_int(const char *path, const config_setting_t *s, const int_setting *spec)
{
    int type = config_setting_type(s);
    if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
        return bad(path, s, "must be an integer");
    long long v = config_setting_get_int64(s);
    if (v < spec->min || v > spec->max)
        return ac_fail(AC_ERR_INVALID, "%s:%u: %s must be in [%lld, %lld], got %lld", path,
                       config_setting_source_line(s), spec->name, spec->min, spec->max, v);
    *spec->value = (int)v;
    return AC_OK;
}

static ac_status read_string(const char *path, const config_setting_t *s, char *out, size_t size)
{
    const char *v = config_setting_get_string(s);
    if (!v)
        return bad(path, s, "must be a string");
    if (strlen(v) >= size)
        return bad(path, s, "is too long");
    snprintf(out, size, "%s", v);
    return AC_OK;
}

static ac_status read_setting(const char *path, const config_setting_t *s, srv_config *c)
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
        {"max_body_bytes", &body_bytes, 1024, 1 << 30},
        {"max_connections", &c->max_connections, 1, 1 << 16},
        {"threads", &c->threads, 0, 1024},
    };
    const char *name = config_setting_name(s);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(name, ints[i].name))
            continue;
        ac_status st = read_int(path, s, &ints[i]);
        c->max_body_bytes = (size_t)body_bytes;
        return st;
    }
    if (!strcmp(name, "host"))
        return read_string(path, s, c->host, sizeof c->host);
    if (!strcmp(name, "model_name"))
        return read_string(path, s, c->model_name, sizeof c->model_name);
    if (!strcmp(name, "admin_token"))
        return read_string(path, s, c->admin_token, sizeof c->admin_token);
    if (!strcmp(name, "prefix_reuse")) {
        if (config_setting_type(s) != CONFIG_TYPE_BOOL)
            return bad(path, s, "must be true or false");
        c->prefix_reuse = config_setting_get_bool(s);
        return AC_OK;
    }
    return bad(path, s, "is not a server setting (see adapters/server/srv_config.c)");
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
    const config_setting_t *root = st == AC_OK ? config_root_setting(&cfg) : NULL;
    for (int i = 0; root && st == AC_OK && i < config_setting_length(root); i++)
        st = read_setting(path, config_setting_get_elem(root, (unsigned)i), c);
    config_destroy(&cfg);
    return st;
}

void srv_config_apply_env(srv_config *c)
{
    const char *token = getenv("AUTOCOMPRESS_ADMIN_TOKEN");
    if (!c->admin_token[0] && token && strlen(token) < sizeof c->admin_token)
        snprintf(c->admin_token, sizeof c->admin_token, "%s", token);
}
