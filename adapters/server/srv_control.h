/* The controller in the server, in three layers:
 *   srv_control.c     recompression jobs (module/control) with a swap that goes through the
 *                     server's hot swap; one call per job endpoint;
 *   srv_recompress.c  the bodies of POST /admin/recompress, and the policy's recompressions
 *                     from the live workload, made into jobs through srv_control.c;
 *   srv_policy.c      the SLA policy's thread, which samples the live metrics and starts a
 *                     recompression through srv_recompress.c when the policy says so.
 * Results are typed; the HTTP edge (srv_http.c) makes the JSON. */
#ifndef AUTOCOMPRESS_SRV_CONTROL_H
#define AUTOCOMPRESS_SRV_CONTROL_H

#include <stddef.h>

#include "autocompress/control.h"
#include "server/srv.h"

/* What a call on a job came to. */
typedef struct {
    int status;         /* the HTTP status: 200 or 202 with `job`; else a refusal (400, 404, 409, 500) */
    const char *code;   /* a refusal's error code: "no_such_job", "invalid_contract", ... */
    char message[512];  /* a refusal's reason */
    ac_job_info job;
} srv_job_result;

/* Fills r as a refusal. */
void srv_job_refuse(srv_job_result *r, int status, const char *code, const char *message);

/* ---- jobs (srv_control.c) ---- */

/* Opens the jobs directory (jobs left running read interrupted). `exe` is the
 * autocompress binary jobs run; `initial_model` the checkpoint jobs compress unless
 * control.parent names another. */
ac_status srv_control_create(srv_server *server, srv_metrics *metrics, const char *exe, const char *initial_model,
                             srv_control **control);
/* Stops the running job (it reads interrupted), frees. */
void srv_control_free(srv_control *control);

void srv_control_submit(srv_control *c, const ac_job_spec *spec, const char *contract_text,
                        srv_job_result *r); /* 202 and the job */
void srv_control_job(srv_control *c, const char *id, srv_job_result *r);
void srv_control_cancel(srv_control *c, const char *id, srv_job_result *r);
void srv_control_resume(srv_control *c, const char *id, srv_job_result *r);
/* The jobs themselves: for listing them, and for asking whether one runs. */
ac_jobs *srv_control_jobs(srv_control *c);
/* The control group of the config, its parent filled in. */
const srv_control_config *srv_control_settings(const srv_control *c);
/* The dtype the server serves its models' product weights in (its `weights` setting). */
ac_dtype srv_control_served_weights(const srv_control *c);
srv_metrics *srv_control_metrics(srv_control *c);

/* ---- recompression requests (srv_recompress.c) ---- */

/* POST /admin/recompress: the body checked field by field (a bad one is a 400 naming it),
 * then the job started: 202. */
void srv_recompress_request(srv_control *c, const char *body, size_t len, srv_job_result *r);
/* A job for the live workload with the served model's contract's targets, as the policy
 * starts it (`reason` is the policy's). */
void srv_recompress_live(srv_control *c, const char *reason, srv_job_result *r);

/* ---- the SLA policy (srv_policy.c) ---- */

/* Starts the policy's thread for the config's sla group; control.contract (the served
 * model's contract: the reference of drift) and control.data must be set. */
ac_status srv_policy_create(srv_control *control, srv_metrics *metrics, const srv_config *config,
                            srv_policy **policy);
/* Stops the thread, frees. */
void srv_policy_free(srv_policy *policy);
/* The policy's state and its last decisions (module/control's JSON, malloc'd; NULL when
 * out of memory). */
char *srv_policy_state_json(srv_policy *policy);

#endif
