/* The server's side of the jobs: module/control's jobs with a swap that goes through the
 * server's hot swap, and one call per job endpoint, each answering with a typed result. */
#include "server/srv_control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/log.h"

struct srv_control {
    srv_server *server;
    srv_metrics *metrics;
    srv_control_config cfg;
    ac_jobs *jobs;
};

/* ---- results ---- */

void srv_job_refuse(srv_job_result *r, int status, const char *code, const char *message)
{
    r->status = status;
    r->code = code;
    snprintf(r->message, sizeof r->message, "%s", message);
}

/* The refusal of a jobs call that did not succeed, with its message. */
static void refusal(ac_jobs_result jr, srv_job_result *r)
{
    switch (jr) {
    case AC_JOBS_BUSY: srv_job_refuse(r, 409, "job_running", ac_error_message()); break;
    case AC_JOBS_NOT_FOUND: srv_job_refuse(r, 404, "no_such_job", ac_error_message()); break;
    case AC_JOBS_WRONG_STATE: srv_job_refuse(r, 409, "wrong_state", ac_error_message()); break;
    default: srv_job_refuse(r, 500, "job_error", ac_error_message()); break;
    }
}

/* The job `id` with `status`, or the refusal of reading it. */
static void job_reply(srv_control *c, const char *id, int status, srv_job_result *r)
{
    ac_jobs_result jr = ac_jobs_get(c->jobs, id, &r->job);
    if (jr != AC_JOBS_DONE) {
        refusal(jr, r);
        return;
    }
    r->status = status;
    r->code = NULL;
    r->message[0] = '\0';
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

void srv_control_submit(srv_control *c, const ac_job_spec *spec, const char *contract_text, srv_job_result *r)
{
    char id[AC_JOB_ID_MAX];
    ac_jobs_result jr = ac_jobs_submit(c->jobs, spec, contract_text, id);
    if (jr == AC_JOBS_DONE)
        job_reply(c, id, 202, r);
    else
        refusal(jr, r);
}

void srv_control_job(srv_control *c, const char *id, srv_job_result *r) { job_reply(c, id, 200, r); }

void srv_control_cancel(srv_control *c, const char *id, srv_job_result *r)
{
    ac_jobs_result jr = ac_jobs_cancel(c->jobs, id);
    if (jr != AC_JOBS_DONE) {
        refusal(jr, r);
        return;
    }
    ac_jobs_wait_idle(c->jobs, 10);
    job_reply(c, id, 200, r);
}

void srv_control_resume(srv_control *c, const char *id, srv_job_result *r)
{
    ac_jobs_result jr = ac_jobs_resume(c->jobs, id);
    if (jr == AC_JOBS_DONE)
        job_reply(c, id, 202, r);
    else
        refusal(jr, r);
}

ac_jobs *srv_control_jobs(srv_control *c) { return c->jobs; }
const srv_control_config *srv_control_settings(const srv_control *c) { return &c->cfg; }
ac_dtype srv_control_served_weights(const srv_control *c) { return srv_server_config(c->server)->weights; }
srv_metrics *srv_control_metrics(srv_control *c) { return c->metrics; }

/* ---- lifetime ---- */

ac_status srv_control_create(srv_server *server, srv_metrics *metrics, const char *exe, const char *initial_model,
                             srv_control **out)
{
    *out = NULL;
    srv_control *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "control: out of memory");
    c->server = server;
    c->metrics = metrics;
    c->cfg = srv_server_config(server)->control;
    if (!c->cfg.parent[0])
        snprintf(c->cfg.parent, sizeof c->cfg.parent, "%s", initial_model);
    ac_jobs_config jc = {c->cfg.jobs_dir, exe, c->cfg.threads, c->cfg.nice, swap_in, c};
    ac_status st = ac_jobs_open(&jc, &c->jobs);
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
    ac_jobs_close(c->jobs);
    free(c);
}
