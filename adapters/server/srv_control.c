/* The server's side of the controller: the jobs (module/control) with a swap that goes
 * through the server's hot swap, the admin endpoints over them, and the SLA policy's
 * thread, which samples the live metrics and starts a recompression from the live
 * workload when the policy says so. */
#include "server/srv_control.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/contract.h"
#include "autocompress/log.h"
#include "autocompress/probe.h"

struct srv_control {
    srv_server *server;
    srv_metrics *metrics;
    srv_control_config cfg;
    srv_sla_config sla;
    ac_jobs *jobs;
    ac_sla_policy *policy;
    pthread_mutex_t mu;   /* the policy and the thread's stop flag */
    pthread_cond_t wake;
    pthread_t policy_thread;
    int thread_started, stopping;
};

/* ---- responses ---- */

int srv_control_error(int status, const char *code, const char *message, char **json)
{
    srv_error e = {status, status == 404   ? "not_found_error"
                           : status == 409 ? "conflict_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error",
                   code, ""};
    snprintf(e.message, sizeof e.message, "%s", message);
    *json = srv_api_error_json(&e);
    return status;
}

/* The status for a jobs call that did not succeed, with its message. */
static int refusal(ac_jobs_result r, char **json)
{
    switch (r) {
    case AC_JOBS_BUSY: return srv_control_error(409, "job_running", ac_error_message(), json);
    case AC_JOBS_NOT_FOUND: return srv_control_error(404, "no_such_job", ac_error_message(), json);
    case AC_JOBS_WRONG_STATE: return srv_control_error(409, "wrong_state", ac_error_message(), json);
    default: return srv_control_error(500, "job_error", ac_error_message(), json);
    }
}

static int job_reply(srv_control *c, const char *id, int status, char **json)
{
    ac_job_info info;
    ac_jobs_result r = ac_jobs_get(c->jobs, id, &info);
    if (r != AC_JOBS_DONE)
        return refusal(r, json);
    *json = ac_job_json(&info);
    return status;
}

/* ---- the jobs' swap ---- */

static int swap_in(void *ctx, const ac_job_info *job, const char *model_dir, char *message, size_t size)
{
    srv_control *c = ctx;
    srv_swap_record rec;
    int status = srv_server_swap(c->server, model_dir, 0, &rec);
    if (status != 200)
        snprintf(message, size, "%s", rec.message);
    else
        ac_info("job %s: its model serves now", job->id);
    return status == 200;
}

/* ---- endpoints ---- */

int srv_control_submit(srv_control *c, const ac_job_spec *spec, const char *contract_text, char **json)
{
    char id[AC_JOB_ID_MAX];
    ac_jobs_result r = ac_jobs_submit(c->jobs, spec, contract_text, id);
    return r == AC_JOBS_DONE ? job_reply(c, id, 202, json) : refusal(r, json);
}

int srv_control_jobs(srv_control *c, char **json)
{
    *json = ac_jobs_list_json(c->jobs);
    return 200;
}

int srv_control_job(srv_control *c, const char *id, char **json) { return job_reply(c, id, 200, json); }

int srv_control_cancel(srv_control *c, const char *id, char **json)
{
    ac_jobs_result r = ac_jobs_cancel(c->jobs, id);
    if (r != AC_JOBS_DONE)
        return refusal(r, json);
    ac_jobs_wait_idle(c->jobs, 10);
    return job_reply(c, id, 200, json);
}

int srv_control_resume(srv_control *c, const char *id, char **json)
{
    ac_jobs_result r = ac_jobs_resume(c->jobs, id);
    return r == AC_JOBS_DONE ? job_reply(c, id, 202, json) : refusal(r, json);
}

int srv_control_policy(srv_control *c, char **json)
{
    if (!c->policy) {
        *json = strdup("{\"enabled\":false}");
        return 200;
    }
    pthread_mutex_lock(&c->mu);
    char *state = ac_sla_policy_json(c->policy);
    pthread_mutex_unlock(&c->mu);
    cJSON *o = state ? cJSON_Parse(state) : NULL;
    free(state);
    if (o)
        cJSON_AddBoolToObject(o, "enabled", 1);
    *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return 200;
}

const srv_control_config *srv_control_settings(const srv_control *c) { return &c->cfg; }
ac_dtype srv_control_served_weights(const srv_control *c) { return srv_server_config(c->server)->weights; }
srv_metrics *srv_control_metrics(srv_control *c) { return c->metrics; }

/* ---- the SLA policy's thread ---- */

static double monotonic_s(void) { return 1e-9 * (double)ac_monotonic_ns(); }

/* Starts a recompression for the live workload, as the policy asked: 1 when it started. */
static int start_policy_job(srv_control *c, const char *reason, char *why, size_t size)
{
    ac_job_info running;
    if (ac_jobs_running(c->jobs, &running)) {
        snprintf(why, size, "held back: job %s runs (%s)", running.id, reason);
        return 0;
    }
    char *json = NULL;
    int status = srv_control_recompress_live(c, reason, &json);
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
    if (status == 202)
        snprintf(why, size, "%s: job %s", reason, cJSON_IsString(id) ? id->valuestring : "?");
    else
        snprintf(why, size, "not started (%s): %s", reason, cJSON_IsString(err) ? err->valuestring : "?");
    cJSON_Delete(o);
    free(json);
    return status == 202;
}

static void *policy_main(void *arg)
{
    srv_control *c = arg;
    double last = monotonic_s();
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + c->sla.interval_s;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&c->wake, &c->mu, &until);
        if (c->stopping)
            break;
        double now = monotonic_s();
        ac_sla_sample sample;
        char reason[256], why[512];
        int fire = srv_metrics_sla_sample(c->metrics, last, now, &sample) &&
                   ac_sla_policy_observe(c->policy, &sample, reason, sizeof reason);
        last = now;
        if (!fire)
            continue;
        pthread_mutex_unlock(&c->mu); /* starting a job reads files and forks: not under the lock */
        int started = start_policy_job(c, reason, why, sizeof why);
        ac_info("sla policy: %s", why);
        pthread_mutex_lock(&c->mu);
        ac_sla_policy_started(c->policy, now, started, why);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The policy's config from the server's: the targets, and the contract's workload as
 * the reference of drift. */
static ac_status make_policy(srv_control *c)
{
    const srv_sla_config *s = &c->sla;
    ac_sla_config pc = {.p95_latency_ms = s->p95_latency_ms,
                        .time_per_output_token_ms = s->time_per_output_token_ms,
                        .min_throughput_tok_s = s->min_throughput_tok_s,
                        .memory_bytes = s->memory_mib * 1048576.0,
                        .workload_drift = s->workload_drift,
                        .window_s = s->window_s,
                        .hysteresis = s->hysteresis,
                        .cooldown_s = s->cooldown_s};
    if (!c->cfg.contract[0] || !c->cfg.data[0])
        return ac_fail(AC_ERR_INVALID, "sla: the policy recompresses from the live workload, so control.contract "
                                       "(the served model's contract) and control.data are needed");
    ac_contract contract;
    ac_status st = ac_contract_load(c->cfg.contract, &contract);
    if (st != AC_OK)
        return st;
    pc.contract_prompt = contract.workload.input_tokens;
    pc.contract_output = contract.workload.output_tokens;
    pc.contract_batch = contract.workload.batch;
    return ac_sla_policy_create(&pc, &c->policy);
}

/* ---- lifetime ---- */

ac_status srv_control_create(srv_server *server, srv_metrics *metrics, const char *exe, const char *initial_model,
                             srv_control **out)
{
    *out = NULL;
    srv_control *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "control: out of memory");
    const srv_config *cfg = srv_server_config(server);
    c->server = server;
    c->metrics = metrics;
    c->cfg = cfg->control;
    c->sla = cfg->sla;
    if (!c->cfg.parent[0])
        snprintf(c->cfg.parent, sizeof c->cfg.parent, "%s", initial_model);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->wake, NULL);
    ac_jobs_config jc = {c->cfg.jobs_dir, exe, c->cfg.threads, c->cfg.nice, swap_in, c};
    ac_status st = ac_jobs_open(&jc, &c->jobs);
    if (st == AC_OK && c->sla.enabled)
        st = make_policy(c);
    if (st == AC_OK && c->policy) {
        int rc = pthread_create(&c->policy_thread, NULL, policy_main, c);
        if (rc != 0)
            st = ac_fail(AC_ERR_INTERNAL, "control: cannot start the policy's thread: %s", strerror(rc));
        c->thread_started = rc == 0;
    }
    if (st != AC_OK) {
        srv_control_free(c);
        return st;
    }
    *out = c;
    return AC_OK;
}

void srv_control_free(srv_control *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->wake);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->policy_thread, NULL);
    }
    ac_jobs_close(c->jobs);
    ac_sla_policy_free(c->policy);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wake);
    free(c);
}
