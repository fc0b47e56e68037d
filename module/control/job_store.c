/* A job's record: JOBS_DIR/ID/job.json, written whole at every change of state or stage,
 * read back by a restarted server and by GET /admin/jobs. */
#include "control/control_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json_util.h"
#include "util/path.h"

static const char *const state_names[AC_JOB_STATE_COUNT] = {"running",   "succeeded", "missed",
                                                            "failed",    "cancelled", "interrupted"};

const char *ac_job_state_name(ac_job_state s)
{
    return (unsigned)s < AC_JOB_STATE_COUNT ? state_names[s] : "unknown";
}

ac_job_spec ac_job_spec_default(void)
{
    ac_job_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.method, sizeof s.method, "autocompress");
    snprintf(s.origin, sizeof s.origin, "operator");
    s.swap_auto = 1;
    return s;
}

int ac_job_id_valid(const char *id)
{
    if (strncmp(id, "job-", 4) != 0 || !id[4] || strlen(id) >= AC_JOB_ID_MAX)
        return 0;
    for (const char *p = id + 4; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return 1;
}

static void add_time(cJSON *o, const char *key, double t)
{
    if (t > 0)
        cJSON_AddNumberToObject(o, key, t);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *spec_to_cjson(const ac_job_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "parent", s->parent);
    cJSON_AddStringToObject(o, "data", s->data);
    cJSON_AddStringToObject(o, "tables", s->tables);
    cJSON_AddStringToObject(o, "method", s->method);
    cJSON_AddNumberToObject(o, "search_tokens", (double)s->search_tokens);
    cJSON_AddNumberToObject(o, "kd_tokens", (double)s->kd_tokens);
    cJSON_AddNumberToObject(o, "batch", s->batch);
    cJSON_AddNumberToObject(o, "seq_len", s->seq_len);
    cJSON_AddNumberToObject(o, "measure_sweeps", s->measure_sweeps);
    cJSON_AddNumberToObject(o, "eval_batches", s->eval_batches);
    cJSON_AddNumberToObject(o, "profile_repeats", s->profile_repeats);
    cJSON_AddStringToObject(o, "swap", s->swap_auto ? "auto" : "manual");
    cJSON_AddStringToObject(o, "origin", s->origin);
    cJSON_AddStringToObject(o, "reason", s->reason);
    return o;
}

cJSON *ac_job_to_cjson(const ac_job_info *info)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", info->id);
    cJSON_AddStringToObject(o, "state", ac_job_state_name(info->state));
    cJSON_AddStringToObject(o, "dir", info->dir);
    cJSON_AddStringToObject(o, "stage", info->stage);
    cJSON_AddNumberToObject(o, "stage_index", info->stage_index);
    cJSON_AddNumberToObject(o, "stage_count", info->stage_count);
    cJSON *p = cJSON_AddObjectToObject(o, "progress");
    if (p) {
        cJSON_AddStringToObject(p, "task", info->task);
        cJSON_AddStringToObject(p, "unit", info->unit);
        cJSON_AddNumberToObject(p, "done", info->done);
        cJSON_AddNumberToObject(p, "total", info->total);
        cJSON_AddNumberToObject(p, "rate", info->rate);
        if (info->eta_s >= 0)
            cJSON_AddNumberToObject(p, "eta_s", info->eta_s);
        else
            cJSON_AddNullToObject(p, "eta_s");
    }
    add_time(o, "created_at", info->created_at);
    add_time(o, "started_at", info->started_at);
    add_time(o, "ended_at", info->ended_at);
    cJSON_AddNumberToObject(o, "pid", info->pid);
    cJSON_AddNumberToObject(o, "exit_code", info->exit_code);
    cJSON_AddNumberToObject(o, "signal", info->signal);
    cJSON_AddBoolToObject(o, "swapped", info->swapped);
    cJSON_AddStringToObject(o, "message", info->message);
    cJSON_AddItemToObject(o, "spec", spec_to_cjson(&info->spec));
    return o;
}

char *ac_job_json(const ac_job_info *info)
{
    cJSON *o = ac_job_to_cjson(info);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

ac_status ac_job_write(const ac_job_info *info)
{
    char path[AC_JOB_PATH_MAX + 16];
    ac_status st = ac_path_join(path, sizeof path, info->dir, "job.json");
    if (st != AC_OK)
        return st;
    cJSON *o = ac_job_to_cjson(info);
    if (!o)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    st = ac_write_json_file(path, o);
    cJSON_Delete(o);
    return st;
}

/* ---- reading ---- */

typedef struct {
    const char *path;
    ac_status st;
} reader;

static const cJSON *field(reader *r, const cJSON *o, const char *key, int type_ok, const char *want)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st == AC_OK && !type_ok)
        r->st = ac_fail(AC_ERR_INVALID, "%s: \"%s\" must be %s, not %s", r->path, key, want, ac_json_type_name(v));
    return v;
}

static void read_string(reader *r, const cJSON *o, const char *key, char *out, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    field(r, o, key, cJSON_IsString(v), "a string");
    if (cJSON_IsString(v))
        snprintf(out, size, "%s", v->valuestring);
}

static double read_number(reader *r, const cJSON *o, const char *key, int null_ok, double if_null)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (null_ok && cJSON_IsNull(v))
        return if_null;
    field(r, o, key, cJSON_IsNumber(v) && isfinite(v->valuedouble), "a number");
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void read_spec(reader *r, const cJSON *o, ac_job_spec *s)
{
    if (!cJSON_IsObject(o)) {
        field(r, o, "spec", 0, "an object");
        return;
    }
    char swap[16] = "";
    read_string(r, o, "parent", s->parent, sizeof s->parent);
    read_string(r, o, "data", s->data, sizeof s->data);
    read_string(r, o, "tables", s->tables, sizeof s->tables);
    read_string(r, o, "method", s->method, sizeof s->method);
    s->search_tokens = (int64_t)read_number(r, o, "search_tokens", 0, 0);
    s->kd_tokens = (int64_t)read_number(r, o, "kd_tokens", 0, 0);
    s->batch = (int)read_number(r, o, "batch", 0, 0);
    s->seq_len = (int)read_number(r, o, "seq_len", 0, 0);
    s->measure_sweeps = (int)read_number(r, o, "measure_sweeps", 0, 0);
    s->eval_batches = (int)read_number(r, o, "eval_batches", 0, 0);
    s->profile_repeats = (int)read_number(r, o, "profile_repeats", 0, 0);
    read_string(r, o, "swap", swap, sizeof swap);
    s->swap_auto = !strcmp(swap, "auto");
    read_string(r, o, "origin", s->origin, sizeof s->origin);
    read_string(r, o, "reason", s->reason, sizeof s->reason);
}

ac_status ac_job_read(const char *dir, ac_job_info *info)
{
    char path[AC_JOB_PATH_MAX + 16];
    cJSON *o = NULL;
    ac_status st = ac_path_join(path, sizeof path, dir, "job.json");
    if (st == AC_OK)
        st = ac_read_json_file(path, 1 << 20, &o);
    if (st != AC_OK)
        return st;
    memset(info, 0, sizeof *info);
    reader r = {path, AC_OK};
    char state[24] = "";
    read_string(&r, o, "id", info->id, sizeof info->id);
    read_string(&r, o, "state", state, sizeof state);
    info->state = AC_JOB_STATE_COUNT;
    for (int s = 0; s < AC_JOB_STATE_COUNT; s++)
        if (!strcmp(state, state_names[s]))
            info->state = (ac_job_state)s;
    if (r.st == AC_OK && info->state == AC_JOB_STATE_COUNT)
        r.st = ac_fail(AC_ERR_INVALID, "%s: \"state\" '%s' is not a job state", path, state);
    snprintf(info->dir, sizeof info->dir, "%s", dir);
    read_string(&r, o, "stage", info->stage, sizeof info->stage);
    info->stage_index = (int)read_number(&r, o, "stage_index", 0, 0);
    info->stage_count = (int)read_number(&r, o, "stage_count", 0, 0);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "progress");
    if (cJSON_IsObject(p)) {
        read_string(&r, p, "task", info->task, sizeof info->task);
        read_string(&r, p, "unit", info->unit, sizeof info->unit);
        info->done = read_number(&r, p, "done", 0, 0);
        info->total = read_number(&r, p, "total", 0, 0);
        info->rate = read_number(&r, p, "rate", 0, 0);
        info->eta_s = read_number(&r, p, "eta_s", 1, -1);
    }
    info->created_at = read_number(&r, o, "created_at", 1, 0);
    info->started_at = read_number(&r, o, "started_at", 1, 0);
    info->ended_at = read_number(&r, o, "ended_at", 1, 0);
    info->pid = (int)read_number(&r, o, "pid", 0, 0);
    info->exit_code = (int)read_number(&r, o, "exit_code", 0, 0);
    info->signal = (int)read_number(&r, o, "signal", 0, 0);
    const cJSON *swapped = cJSON_GetObjectItemCaseSensitive(o, "swapped");
    info->swapped = cJSON_IsTrue(swapped);
    read_string(&r, o, "message", info->message, sizeof info->message);
    read_spec(&r, cJSON_GetObjectItemCaseSensitive(o, "spec"), &info->spec);
    cJSON_Delete(o);
    if (r.st == AC_OK && !ac_job_id_valid(info->id))
        r.st = ac_fail(AC_ERR_INVALID, "%s: \"id\" '%s' is not a job id", path, info->id);
    return r.st;
}
