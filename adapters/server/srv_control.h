/* The controller in the server: recompression jobs, their admin endpoints and the SLA
 * policy's thread (srv_control.c), and the bodies of POST /admin/recompress
 * (srv_recompress.c). Every endpoint function returns the HTTP status and sets *json to
 * the response body (malloc'd; NULL when out of memory), with no socket in sight. */
#ifndef AUTOCOMPRESS_SRV_CONTROL_H
#define AUTOCOMPRESS_SRV_CONTROL_H

#include <stddef.h>

#include "autocompress/control.h"
#include "server/srv.h"

typedef struct srv_control srv_control;

/* Opens the jobs directory (jobs left running read interrupted) and, with an `sla` group
 * in the config, starts the policy. `exe` is the autocompress binary jobs run;
 * `initial_model` the checkpoint jobs compress unless control.parent names another. */
ac_status srv_control_create(srv_server *server, srv_metrics *metrics, const char *exe, const char *initial_model,
                             srv_control **control);
/* Stops the policy and the running job (it reads interrupted), frees. */
void srv_control_free(srv_control *control);

int srv_control_recompress(srv_control *c, const char *body, size_t len, char **json); /* 202 + the job */
int srv_control_jobs(srv_control *c, char **json);
int srv_control_job(srv_control *c, const char *id, char **json);
int srv_control_cancel(srv_control *c, const char *id, char **json);
int srv_control_resume(srv_control *c, const char *id, char **json);
int srv_control_policy(srv_control *c, char **json);

/* What srv_recompress.c needs of srv_control.c. */
int srv_control_submit(srv_control *c, const ac_job_spec *spec, const char *contract_text, char **json);
/* A job for the live workload with the served model's contract's targets, as the policy
 * starts it. */
int srv_control_recompress_live(srv_control *c, const char *reason, char **json);
const srv_control_config *srv_control_settings(const srv_control *c);
/* The dtype the server serves its models' product weights in (its `weights` setting). */
ac_dtype srv_control_served_weights(const srv_control *c);
srv_metrics *srv_control_metrics(srv_control *c);
int srv_control_error(int status, const char *code, const char *message, char **json);

#endif
