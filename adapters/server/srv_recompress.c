/* POST /admin/recompress: the body names a contract (inline libconfig text, a path on the
 * server, or the live workload over the served model's contract with new targets),
 * budgets and the method; every field is checked and a bad one is answered 400 naming it.
 *
 *   {"contract": "name = ...;", "contract_path": "/srv/c.cfg", "from_live": true,
 *    "targets": {"latency_ratio": 0.7}, "method": "autocompress", "search_tokens": N,
 *    "kd_tokens": N, "batch": N, "seq_len": N, "measure_sweeps": N, "eval_batches": N,
 *    "profile_repeats": N, "data": DIR, "tables": FILE, "parent": DIR, "swap": "auto"} */
#include "server/srv_control.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/compress.h"
#include "autocompress/contract.h"

enum { MAX_TARGETS = 8, CONTRACT_MAX_BYTES = 1 << 20 };

typedef struct {
    ac_job_spec spec;
    const char *contract_text, *contract_path;
    int from_live;
    ac_contract_target targets[MAX_TARGETS];
    int n_targets;
    char problem[512];
} recompress_body;

static int fail(recompress_body *b, const char *fmt, const char *field)
{
    snprintf(b->problem, sizeof b->problem, fmt, field);
    return 0;
}

static int read_path(recompress_body *b, const cJSON *v, const char *key, char *out, size_t size)
{
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return fail(b, "'%s' must be a non-empty string (a path on the server)", key);
    if (strlen(v->valuestring) >= size)
        return fail(b, "'%s' is too long", key);
    snprintf(out, size, "%s", v->valuestring);
    return 1;
}

static int read_count(recompress_body *b, const cJSON *v, const char *key, int64_t max, int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > (double)max)
        return fail(b, "'%s' must be a positive integer", key);
    *out = (int64_t)v->valuedouble;
    return 1;
}

static int read_targets(recompress_body *b, const cJSON *v)
{
    if (!cJSON_IsObject(v) || !v->child)
        return fail(b, "'%s' must be an object of numbers, e.g. {\"latency_ratio\": 0.7}", "targets");
    for (const cJSON *t = v->child; t; t = t->next) {
        if (b->n_targets == MAX_TARGETS)
            return fail(b, "'%s' has too many entries", "targets");
        if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble) || t->valuedouble <= 0) {
            snprintf(b->problem, sizeof b->problem, "'targets.%.64s' must be a positive number", t->string);
            return 0;
        }
        b->targets[b->n_targets++] = (ac_contract_target){t->string, t->valuedouble};
    }
    return 1;
}

static int read_field(recompress_body *b, const cJSON *v)
{
    const char *k = v->string;
    ac_job_spec *s = &b->spec;
    int64_t n = 0;
    int ok = 1;
    if (!strcmp(k, "contract")) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return fail(b, "'%s' must be the contract's libconfig text", k);
        b->contract_text = v->valuestring;
    } else if (!strcmp(k, "contract_path")) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return fail(b, "'%s' must be a path on the server", k);
        b->contract_path = v->valuestring;
    } else if (!strcmp(k, "from_live")) {
        if (!cJSON_IsBool(v))
            return fail(b, "'%s' must be true or false", k);
        b->from_live = cJSON_IsTrue(v);
    } else if (!strcmp(k, "targets")) {
        return read_targets(b, v);
    } else if (!strcmp(k, "method")) {
        ac_compress_method m;
        if (!cJSON_IsString(v) || ac_compress_method_from_name(v->valuestring, &m) != AC_OK)
            return fail(b, "'%s' must be \"autocompress\" or \"minitron++\"", k);
        snprintf(s->method, sizeof s->method, "%s", ac_compress_method_name(m));
    } else if (!strcmp(k, "swap")) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "auto") && strcmp(v->valuestring, "manual")))
            return fail(b, "'%s' must be \"auto\" or \"manual\"", k);
        s->swap_auto = !strcmp(v->valuestring, "auto");
    } else if (!strcmp(k, "data")) {
        return read_path(b, v, k, s->data, sizeof s->data);
    } else if (!strcmp(k, "tables")) {
        return read_path(b, v, k, s->tables, sizeof s->tables);
    } else if (!strcmp(k, "parent")) {
        return read_path(b, v, k, s->parent, sizeof s->parent);
    } else if (!strcmp(k, "search_tokens") || !strcmp(k, "kd_tokens")) {
        ok = read_count(b, v, k, (int64_t)1 << 50, &n);
        *(!strcmp(k, "kd_tokens") ? &s->kd_tokens : &s->search_tokens) = n;
    } else {
        static const char *const ints[] = {"batch", "seq_len", "measure_sweeps", "eval_batches", "profile_repeats"};
        int *fields[] = {&s->batch, &s->seq_len, &s->measure_sweeps, &s->eval_batches, &s->profile_repeats};
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            if (!strcmp(k, ints[i])) {
                ok = read_count(b, v, k, 1 << 20, &n);
                *fields[i] = (int)n;
                return ok;
            }
        return fail(b, "'%s' is not a field of a recompression request", k);
    }
    return ok;
}

/* The server's defaults under what the body gave. */
static void apply_defaults(recompress_body *b, const srv_control_config *cfg)
{
    ac_job_spec *s = &b->spec;
    if (!s->parent[0])
        snprintf(s->parent, sizeof s->parent, "%s", cfg->parent);
    if (!s->data[0])
        snprintf(s->data, sizeof s->data, "%s", cfg->data);
    /* tables hold costs for one workload: the configured ones are the contract's, so a
     * job for the live workload profiles its own unless the body names some */
    if (!s->tables[0] && !b->from_live)
        snprintf(s->tables, sizeof s->tables, "%s", cfg->tables);
    if (!s->search_tokens)
        s->search_tokens = cfg->search_tokens;
    if (!s->kd_tokens)
        s->kd_tokens = cfg->kd_tokens;
    if (!s->measure_sweeps)
        s->measure_sweeps = cfg->measure_sweeps;
    if (!s->eval_batches)
        s->eval_batches = cfg->eval_batches;
}

static int file_exists(const char *dir, const char *name)
{
    char path[2 * SRV_PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s%s%s", dir, name[0] ? "/" : "", name);
    return stat(path, &st) == 0;
}

/* Paths the child would fail on, found now so that the answer is a 400, not a failed job. */
static int check_paths(recompress_body *b)
{
    const ac_job_spec *s = &b->spec;
    if (!s->data[0])
        return fail(b, "'%s' is needed: token shards on the server (or control.data in the server config)", "data");
    if (!file_exists(s->data, "train.bin") || !file_exists(s->data, "val.bin"))
        return fail(b, "'%s' has no train.bin and val.bin", "data");
    if (!file_exists(s->parent, "config.json"))
        return fail(b, "'%s' is not a checkpoint directory (no config.json)", "parent");
    if (s->tables[0] && !file_exists(s->tables, ""))
        return fail(b, "'%s' does not exist", "tables");
    return 1;
}

/* A contract file on the server, whole (NULL with the reason in `problem`). */
static char *read_contract_file(const char *path, char *problem, size_t size)
{
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc(CONTRACT_MAX_BYTES + 1) : NULL;
    size_t n = text ? fread(text, 1, CONTRACT_MAX_BYTES + 1, f) : 0;
    if (!f)
        snprintf(problem, size, "'contract_path': %.400s cannot be read", path);
    else if (!text || ferror(f) || n > CONTRACT_MAX_BYTES) {
        snprintf(problem, size, "'contract_path': %.400s cannot be read whole (at most %d bytes)", path,
                 CONTRACT_MAX_BYTES);
        free(text);
        text = NULL;
    } else {
        text[n] = '\0';
    }
    if (f)
        fclose(f);
    return text;
}

/* The contract text the job gets (malloc'd), or NULL with the refusal in r. */
static char *contract_for(srv_control *c, recompress_body *b, srv_job_result *r)
{
    const srv_control_config *cfg = srv_control_settings(c);
    const char *path = b->contract_path                  ? b->contract_path
                       : b->contract_text || !cfg->contract[0] ? NULL
                                                               : cfg->contract;
    char *text = NULL;
    if (b->contract_text) {
        text = strdup(b->contract_text);
    } else if (path) {
        text = read_contract_file(path, b->problem, sizeof b->problem);
        if (!text) {
            srv_job_refuse(r, 400, "invalid_value", b->problem);
            return NULL;
        }
    } else {
        srv_job_refuse(r, 400, "invalid_value",
                       "a contract is needed: 'contract' (libconfig text), 'contract_path', or control.contract in "
                       "the server config");
        return NULL;
    }
    const char *name = path ? path : "contract";
    ac_contract check;
    ac_status st = text ? AC_OK : ac_fail(AC_ERR_NOMEM, "out of memory");
    if (st == AC_OK && b->from_live) {
        ac_contract_workload w;
        if (!srv_metrics_live_workload(srv_control_metrics(c), &w)) {
            free(text);
            srv_job_refuse(r, 409, "no_live_workload",
                           "from_live: no requests served yet, so there is no live workload");
            return NULL;
        }
        char *live = NULL;
        st = ac_contract_rewrite(text, name, &w, b->targets, b->n_targets, &live);
        free(text);
        text = live;
    }
    if (st == AC_OK)
        st = ac_contract_parse_string(text, name, &check);
    /* the job measures the model as the contract serves it, the swap loads it as the
     * server does: they must agree */
    ac_dtype served = srv_control_served_weights(c);
    if (st == AC_OK && check.hardware.weights != served)
        st = ac_fail(AC_ERR_INVALID, "%s: hardware.weights is %s, but this server serves %s weights (its weights "
                                     "setting): a swapped-in model would not be served as it was measured",
                     name, ac_weights_dtype_name(check.hardware.weights), ac_weights_dtype_name(served));
    if (st != AC_OK) {
        free(text);
        srv_job_refuse(r, 400, "invalid_contract", ac_error_message());
        return NULL;
    }
    return text;
}

static void submit(srv_control *c, recompress_body *b, srv_job_result *r)
{
    apply_defaults(b, srv_control_settings(c));
    if (!check_paths(b)) {
        srv_job_refuse(r, 400, "invalid_value", b->problem);
        return;
    }
    char *contract = contract_for(c, b, r);
    if (!contract)
        return;
    srv_control_submit(c, &b->spec, contract, r);
    free(contract);
}

void srv_recompress_request(srv_control *c, const char *body, size_t len, srv_job_result *r)
{
    recompress_body b;
    memset(&b, 0, sizeof b);
    b.spec = ac_job_spec_default();
    cJSON *o = srv_json_parse_whole(body ? body : "", len, NULL);
    int ok = cJSON_IsObject(o) || fail(&b, "%s", "the body must be a JSON object");
    for (const cJSON *v = ok ? o->child : NULL; ok && v; v = v->next)
        ok = read_field(&b, v);
    if (ok && b.contract_text && b.contract_path)
        ok = fail(&b, "'%s' and 'contract_path' are both given: give one", "contract");
    if (ok && b.n_targets && !b.from_live)
        ok = fail(&b, "'%s' goes with from_live (otherwise the contract holds the targets)", "targets");
    if (ok)
        submit(c, &b, r);
    else
        srv_job_refuse(r, 400, "invalid_value", b.problem);
    cJSON_Delete(o);
}

void srv_recompress_live(srv_control *c, const char *reason, srv_job_result *r)
{
    recompress_body b;
    memset(&b, 0, sizeof b);
    b.spec = ac_job_spec_default();
    b.from_live = 1;
    snprintf(b.spec.origin, sizeof b.spec.origin, "policy");
    snprintf(b.spec.reason, sizeof b.spec.reason, "%s", reason);
    submit(c, &b, r);
}
