/* HTTP on libmicrohttpd, one thread per connection: routing (one table of handlers),
 * bodies within the size limit, bearer tokens for /admin, JSON and SSE responses. The
 * server's parts answer with typed results; their JSON is made here. Handlers block
 * (waiting for a completion, or inside a stream's reader) only on their own
 * connection's thread. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/srv.h"
#include "server/srv_control.h"
#include "autocompress/clock.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

struct srv_http {
    struct MHD_Daemon *daemon;
    srv_server *server;
    srv_metrics *metrics;
    srv_control *control;
    srv_policy *policy;
    int closing;   /* draining for a stop: no new completions */
    int in_flight; /* accepted completions not yet answered in full */
};

typedef struct {
    char *body;
    size_t len, cap;
    int too_large;     /* over max_body_bytes: the rest is read and dropped, then a 413 */
    size_t dropped;    /* bytes of such a body read and dropped */
    int answered;      /* a 413 went out before the end of the body */
    int in_flight;     /* this request counts in srv_http.in_flight until it completes */
} connection_ctx;

enum { ID_MAX = 64 };

/* A request as its route's handler sees it. */
typedef struct {
    const char *endpoint;  /* the route's path: metrics count requests by it */
    char id[ID_MAX];       /* the job id a star in the path stood for */
    connection_ctx *conn;  /* the body */
} route_call;

/* A body over the limit is still read (and dropped) up to this many bytes, so a client
 * that sends it all before reading (most do, without Expect: 100-continue) gets the 413
 * instead of a reset connection; past it the 413 goes out at once and the connection
 * closes. */
enum { DROP_MAX_BYTES = 64 << 20 };

/* ---- responses ---- */

static enum MHD_Result send_text(srv_http *h, struct MHD_Connection *c, const char *endpoint, int status, char *text,
                                 const char *content_type)
{
    if (!text) { /* a formatter ran out of memory */
        status = 500;
        content_type = "application/json";
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":null}}");
        if (!text)
            return MHD_NO;
    }
    srv_metrics_count_request(h->metrics, endpoint, status);
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", content_type);
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 429)
        MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(srv_http *h, struct MHD_Connection *c, const char *endpoint, int status, char *json)
{
    return send_text(h, c, endpoint, status, json, "application/json");
}

static enum MHD_Result send_error(srv_http *h, struct MHD_Connection *c, const char *endpoint, int status,
                                  const char *type, const char *code, const char *message)
{
    srv_error e = {status, type, code, ""};
    snprintf(e.message, sizeof e.message, "%s", message);
    return send_json(h, c, endpoint, status, srv_api_error_json(&e));
}

static enum MHD_Result send_cjson(srv_http *h, struct MHD_Connection *c, const char *endpoint, int status, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_json(h, c, endpoint, status, text);
}

/* ---- admin authentication ---- */

/* Compares in time that depends only on the lengths, never on where they differ. */
static int same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)(lb ? b[i % lb] : 0);
    return diff == 0;
}

/* 0 when the request may use /admin; else the status of the refusal, sent. */
static int refuse_admin(srv_http *h, struct MHD_Connection *c, const char *endpoint, enum MHD_Result *res)
{
    const char *token = srv_server_config(h->server)->admin_token;
    if (!token[0]) {
        *res = send_error(h, c, endpoint, 403, "permission_error", "admin_disabled",
                          "admin endpoints are disabled: set admin_token in the server config or "
                          "AUTOCOMPRESS_ADMIN_TOKEN in the environment");
        return 403;
    }
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth || strncmp(auth, "Bearer ", 7) || !same_secret(auth + 7, token)) {
        *res = send_error(h, c, endpoint, 401, "authentication_error", "invalid_token",
                          auth ? "the bearer token is not valid" : "an Authorization: Bearer header is required");
        return 401;
    }
    return 0;
}

/* ---- streaming ---- */

typedef struct {
    srv_http *http;
    srv_request *req;
    char model_name[SRV_NAME_MAX];
    size_t sent_text;
    int sent_tokens;
    char *pending;
    size_t pending_len, pending_off;
    int final_sent, done_sent;
} stream_ctx;

static char *stream_error_event(const srv_request *req)
{
    srv_error e = {500, "server_error", NULL, ""};
    snprintf(e.message, sizeof e.message, "%s", req->error[0] ? req->error : "the request failed");
    char *json = srv_api_error_json(&e);
    size_t n = json ? strlen(json) + 9 : 0;
    char *out = json ? malloc(n) : NULL;
    if (out)
        snprintf(out, n, "data: %s\n\n", json);
    free(json);
    return out;
}

/* The next bytes of the stream: waits for the scheduler to publish more. */
static char *next_event(stream_ctx *s, int *end)
{
    srv_request *req = s->req;
    *end = 0;
    if (s->done_sent) {
        *end = 1;
        return NULL;
    }
    if (s->final_sent) {
        s->done_sent = 1;
        return strdup("data: [DONE]\n\n");
    }
    pthread_mutex_lock(&req->mu);
    char *out = NULL;
    for (;;) {
        int finished = req->finish != SRV_FINISH_NONE;
        if (finished && req->finish == SRV_FINISH_ERROR) {
            out = stream_error_event(req);
            s->final_sent = 1;
            break;
        }
        out = srv_api_stream_chunk(req, s->model_name, &s->sent_text, &s->sent_tokens, finished);
        if (out || finished) {
            s->final_sent = finished;
            break;
        }
        pthread_cond_wait(&req->cv, &req->mu);
    }
    pthread_mutex_unlock(&req->mu);
    return out;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *s = cls;
    while (s->pending_off == s->pending_len) {
        free(s->pending);
        s->pending = NULL;
        s->pending_len = s->pending_off = 0;
        int end = 0;
        char *next = next_event(s, &end);
        if (end)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!next)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        s->pending = next;
        s->pending_len = strlen(next);
    }
    size_t n = s->pending_len - s->pending_off;
    n = n < max ? n : max;
    memcpy(buf, s->pending + s->pending_off, n);
    s->pending_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream_ctx *s = cls;
    pthread_mutex_lock(&s->req->mu);
    if (s->req->finish == SRV_FINISH_NONE)
        s->req->cancelled = 1; /* the client went away: the scheduler frees the slot */
    pthread_mutex_unlock(&s->req->mu);
    srv_server_release_request(s->http->server, s->req);
    free(s->pending);
    free(s);
}

static enum MHD_Result start_stream(srv_http *h, struct MHD_Connection *c, srv_request *req)
{
    stream_ctx *s = calloc(1, sizeof *s);
    if (!s) {
        srv_server_release_request(h->server, req);
        return send_error(h, c, "/v1/completions", 500, "server_error", NULL, "out of memory");
    }
    s->http = h;
    s->req = req;
    snprintf(s->model_name, sizeof s->model_name, "%s", req->model->name);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    srv_metrics_count_request(h->metrics, "/v1/completions", 200);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- endpoints ---- */

/* The client closed its end of the connection (or it broke). */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

enum { HANGUP_CHECK_MS = 20, CLIENT_CLOSED_REQUEST = 499 /* nginx's status for it */ };

/* Waits for a non-streaming request to finish, looking every HANGUP_CHECK_MS for a
 * client that hung up (its request is then cancelled, as a stream's is): 1 when the
 * client is still there. */
static int wait_for_completion(struct MHD_Connection *c, srv_request *req)
{
    int gone = 0;
    pthread_mutex_lock(&req->mu);
    while (req->finish == SRV_FINISH_NONE) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += HANGUP_CHECK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&req->cv, &req->mu, &until);
        if (!gone && req->finish == SRV_FINISH_NONE && client_gone(c)) {
            gone = 1;
            req->cancelled = 1; /* the scheduler frees the slot and finishes the request */
        }
    }
    pthread_mutex_unlock(&req->mu);
    return !gone;
}

static enum MHD_Result completions(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    const char *ep = k->endpoint;
    connection_ctx *cc = k->conn;
    if (__atomic_load_n(&h->closing, __ATOMIC_ACQUIRE))
        return send_error(h, c, ep, 503, "server_error", "shutting_down", "the server is shutting down");
    srv_model *m = srv_server_acquire_model(h->server);
    if (!m)
        return send_error(h, c, ep, 503, "server_error", "model_not_ready", "no model is loaded yet");
    srv_error err;
    memset(&err, 0, sizeof err);
    srv_request *req = srv_api_parse_completion(cc->body ? cc->body : "", cc->len, m, srv_server_config(h->server),
                                                &err);
    if (!req) {
        srv_server_release_model(h->server, m);
        return send_json(h, c, ep, err.status, srv_api_error_json(&err));
    }
    req->model = m; /* the request owns the reference now */
    if (!srv_server_submit(h->server, req)) {
        srv_request_free(req);
        srv_server_release_model(h->server, m);
        return send_error(h, c, ep, 429, "rate_limit_error", "queue_full",
                          "the request queue is full (max_queue); retry after a second");
    }
    /* counted until MHD says the answer went out whole (or the connection died) */
    cc->in_flight = 1;
    __atomic_add_fetch(&h->in_flight, 1, __ATOMIC_ACQ_REL);
    if (req->stream)
        return start_stream(h, c, req);
    if (!wait_for_completion(c, req)) { /* the answer goes nowhere; it is counted */
        srv_server_release_request(h->server, req);
        return send_error(h, c, ep, CLIENT_CLOSED_REQUEST, "invalid_request_error", "client_closed_request",
                          "the client closed the connection before the completion was done");
    }
    pthread_mutex_lock(&req->mu);
    int failed = req->finish == SRV_FINISH_ERROR;
    char message[256];
    snprintf(message, sizeof message, "%s", req->error);
    pthread_mutex_unlock(&req->mu);
    enum MHD_Result res = failed ? send_error(h, c, ep, 500, "server_error", NULL, message)
                                 : send_json(h, c, ep, 200, srv_api_completion_json(req, m->name));
    srv_server_release_request(h->server, req);
    return res;
}

static enum MHD_Result models(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    char name[SRV_NAME_MAX];
    srv_server_model_name(h->server, name, sizeof name);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    if (srv_server_ready(h->server)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "autocompress");
        cJSON_AddItemToArray(data, m);
    }
    return send_cjson(h, c, k->endpoint, 200, o);
}

static enum MHD_Result health(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    int closing = __atomic_load_n(&h->closing, __ATOMIC_ACQUIRE);
    int ready = !closing && srv_server_ready(h->server);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", closing ? "stopping" : ready ? "ok" : "loading");
    return send_cjson(h, c, k->endpoint, ready ? 200 : 503, o);
}

static enum MHD_Result metrics(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_gauges g = srv_server_gauges(h->server);
    char *text = srv_metrics_prometheus(h->metrics, g.active_slots, g.queue_depth, g.generation);
    return send_text(h, c, k->endpoint, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result swap(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    const char *ep = k->endpoint;
    const connection_ctx *cc = k->conn;
    cJSON *o = srv_json_parse_whole(cc->body ? cc->body : "", cc->len, NULL);
    const cJSON *path = o ? cJSON_GetObjectItemCaseSensitive(o, "model_path") : NULL;
    const cJSON *drain = o ? cJSON_GetObjectItemCaseSensitive(o, "drain_first") : NULL;
    const char *problem = !o || !cJSON_IsObject(o)     ? "the body must be a JSON object"
                          : !cJSON_IsString(path)      ? "'model_path' (a string) is required"
                          : !path->valuestring[0]      ? "'model_path' is empty"
                          : drain && !cJSON_IsBool(drain) ? "'drain_first' must be true or false"
                                                       : NULL;
    if (problem) {
        cJSON_Delete(o);
        return send_error(h, c, ep, 400, "invalid_request_error", "invalid_value", problem);
    }
    srv_swap_record rec;
    int status = srv_server_swap(h->server, path->valuestring, cJSON_IsTrue(drain), &rec);
    cJSON_Delete(o);
    if (status != 200)
        return send_error(h, c, ep, status, status == 409 ? "conflict_error" : "invalid_request_error",
                          status == 409 ? "swap_in_progress" : "swap_failed", rec.message);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "ok", 1);
    cJSON_AddStringToObject(r, "model_path", rec.path);
    cJSON_AddBoolToObject(r, "drain_first", rec.drain_first);
    cJSON_AddNumberToObject(r, "seconds", rec.seconds);
    cJSON_AddNumberToObject(r, "generation", srv_server_gauges(h->server).generation);
    return send_cjson(h, c, ep, 200, r);
}

/* POST /admin/profile {"sample_every": N}: the in-situ profile's rate (0: pause). */
static enum MHD_Result profile_rate(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    const char *ep = k->endpoint;
    const connection_ctx *cc = k->conn;
    cJSON *o = srv_json_parse_whole(cc->body ? cc->body : "", cc->len, NULL);
    const cJSON *every = o ? cJSON_GetObjectItemCaseSensitive(o, "sample_every") : NULL;
    const char *problem = !o || !cJSON_IsObject(o) ? "the body must be a JSON object"
                          : cJSON_GetArraySize(o) != 1 || !every
                              ? "the body takes one field, 'sample_every'"
                          : !cJSON_IsNumber(every) || every->valuedouble != (int)every->valuedouble ||
                                  every->valuedouble < 0 || every->valuedouble > (1 << 20)
                              ? "'sample_every' must be an integer from 0 (pause) to 1048576"
                              : NULL;
    if (problem) {
        cJSON_Delete(o);
        return send_error(h, c, ep, 400, "invalid_request_error", "invalid_value", problem);
    }
    int rate = every->valueint;
    cJSON_Delete(o);
    srv_server_set_profile_every(h->server, rate);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "sample_every", rate);
    return send_cjson(h, c, ep, 200, r);
}

static cJSON *swap_json(const srv_swap_record *r)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "at", r->at);
    cJSON_AddStringToObject(e, "model_path", r->path);
    cJSON_AddBoolToObject(e, "ok", r->ok);
    cJSON_AddBoolToObject(e, "drain_first", r->drain_first);
    cJSON_AddNumberToObject(e, "seconds", r->seconds);
    cJSON_AddStringToObject(e, "message", r->message);
    return e;
}

static enum MHD_Result server_status(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_status *st = malloc(sizeof *st); /* the swap history makes it large for a stack */
    if (!st)
        return send_json(h, c, k->endpoint, 500, NULL);
    srv_server_status(h->server, st);
    cJSON *o = cJSON_CreateObject();
    if (st->has_model) {
        cJSON *jm = cJSON_AddObjectToObject(o, "model");
        cJSON_AddStringToObject(jm, "name", st->name);
        cJSON_AddStringToObject(jm, "path", st->path);
        cJSON_AddStringToObject(jm, "architecture", st->architecture);
        cJSON_AddNumberToObject(jm, "parameters", (double)st->parameters);
        cJSON_AddNumberToObject(jm, "generation", st->generation);
        cJSON_AddNumberToObject(jm, "loaded_at", st->loaded_at);
    } else {
        cJSON_AddNullToObject(o, "model");
    }
    cJSON_AddStringToObject(o, "state", st->state);
    cJSON_AddNumberToObject(o, "slots", st->slots);
    cJSON_AddNumberToObject(o, "active_slots", st->active_slots);
    cJSON_AddNumberToObject(o, "queue_depth", st->queue_depth);
    cJSON_AddNumberToObject(o, "models_loaded", st->models_loaded);
    cJSON *swaps = cJSON_AddArrayToObject(o, "swaps");
    for (int i = 0; i < st->n_swaps; i++)
        cJSON_AddItemToArray(swaps, swap_json(&st->swaps[i]));
    free(st);
    return send_cjson(h, c, k->endpoint, 200, o);
}

static enum MHD_Result workload(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    return send_json(h, c, k->endpoint, 200, srv_metrics_workload_json(h->metrics));
}

static enum MHD_Result profile(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    char *json = NULL, why[256];
    int status = srv_server_profile(h->server, &json, why, sizeof why);
    if (status != 200)
        return send_error(h, c, k->endpoint, status, "server_error", "no_profile", why);
    return send_json(h, c, k->endpoint, status, json);
}

/* ---- the controller's endpoints ---- */

/* A job as JSON, or the refusal as an error. */
static enum MHD_Result send_job(srv_http *h, struct MHD_Connection *c, const char *ep, const srv_job_result *r)
{
    if (r->status == 200 || r->status == 202)
        return send_json(h, c, ep, r->status, ac_job_json(&r->job));
    const char *type = r->status == 404   ? "not_found_error"
                       : r->status == 409 ? "conflict_error"
                       : r->status >= 500 ? "server_error"
                                          : "invalid_request_error";
    return send_error(h, c, ep, r->status, type, r->code, r->message);
}

static enum MHD_Result recompress(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_job_result r;
    srv_recompress_request(h->control, k->conn->body, k->conn->len, &r);
    return send_job(h, c, k->endpoint, &r);
}

static enum MHD_Result jobs(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    return send_json(h, c, k->endpoint, 200, ac_jobs_list_json(srv_control_jobs(h->control)));
}

static enum MHD_Result job(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_job_result r;
    srv_control_job(h->control, k->id, &r);
    return send_job(h, c, k->endpoint, &r);
}

static enum MHD_Result job_cancel(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_job_result r;
    srv_control_cancel(h->control, k->id, &r);
    return send_job(h, c, k->endpoint, &r);
}

static enum MHD_Result job_resume(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    srv_job_result r;
    srv_control_resume(h->control, k->id, &r);
    return send_job(h, c, k->endpoint, &r);
}

/* The policy's state (with "enabled": true), or just "enabled": false without one. */
static enum MHD_Result policy(srv_http *h, struct MHD_Connection *c, const route_call *k)
{
    if (!h->policy)
        return send_json(h, c, k->endpoint, 200, strdup("{\"enabled\":false}"));
    return send_json(h, c, k->endpoint, 200, srv_policy_state_json(h->policy));
}

/* ---- routing ---- */

typedef enum MHD_Result (*route_handler)(srv_http *h, struct MHD_Connection *c, const route_call *k);

/* A star in a path stands for one job id (a path segment). Paths under /admin/ take the
 * admin token; `control` routes answer 503 when the controller did not start. */
static const struct {
    const char *path, *method;
    route_handler handler;
    int control;
} routes[] = {
    {"/health", "GET", health, 0},
    {"/v1/models", "GET", models, 0},
    {"/v1/completions", "POST", completions, 0},
    {"/metrics", "GET", metrics, 0},
    {"/admin/swap", "POST", swap, 0},
    {"/admin/status", "GET", server_status, 0},
    {"/admin/workload", "GET", workload, 0},
    {"/admin/recompress", "POST", recompress, 1},
    {"/admin/jobs", "GET", jobs, 1},
    {"/admin/jobs/*", "GET", job, 1},
    {"/admin/jobs/*", "DELETE", job_cancel, 1},
    {"/admin/jobs/*/resume", "POST", job_resume, 1},
    {"/admin/policy", "GET", policy, 1},
    {"/admin/profile", "GET", profile, 0},
    {"/admin/profile", "POST", profile_rate, 0},
};

enum { N_ROUTES = sizeof routes / sizeof routes[0] };

/* 1 when url matches the route's path, the id (if the path has a star) copied out. */
static int match_path(const char *pattern, const char *url, char id[ID_MAX])
{
    const char *star = strchr(pattern, '*');
    if (!star)
        return !strcmp(pattern, url);
    size_t head = (size_t)(star - pattern);
    if (strncmp(url, pattern, head))
        return 0;
    const char *rest = url + head, *end = strchr(rest, '/');
    size_t n = end ? (size_t)(end - rest) : strlen(rest);
    if (n == 0 || n >= ID_MAX || strcmp(end ? end : "", star + 1))
        return 0;
    memcpy(id, rest, n);
    id[n] = '\0';
    return 1;
}

/* 405 for a known path asked with another method: the methods it takes. */
static enum MHD_Result wrong_method(srv_http *h, struct MHD_Connection *c, size_t route)
{
    const char *ep = routes[route].path;
    char message[96];
    snprintf(message, sizeof message, "%s takes %s", ep, routes[route].method);
    for (size_t i = route + 1; i < N_ROUTES; i++)
        if (!strcmp(routes[i].path, ep))
            snprintf(message + strlen(message), sizeof message - strlen(message), " or %s", routes[i].method);
    return send_error(h, c, ep, 405, "invalid_request_error", "method_not_allowed", message);
}

static enum MHD_Result dispatch(srv_http *h, struct MHD_Connection *c, const char *url, const char *method,
                                connection_ctx *cc)
{
    int known = -1, path_known = -1;
    route_call k = {NULL, "", cc};
    for (size_t i = 0; i < N_ROUTES && known < 0; i++)
        if (match_path(routes[i].path, url, k.id)) {
            path_known = (int)i;
            if (!strcmp(method, routes[i].method))
                known = (int)i;
        }
    if (path_known < 0)
        return send_error(h, c, "other", 404, "not_found_error", "unknown_path", "no such endpoint");
    if (known < 0)
        return wrong_method(h, c, (size_t)path_known);
    k.endpoint = routes[known].path;
    if (cc->too_large) {
        char message[96];
        snprintf(message, sizeof message, "the body is larger than %zu bytes",
                 srv_server_config(h->server)->max_body_bytes);
        return send_error(h, c, k.endpoint, 413, "invalid_request_error", "request_too_large", message);
    }
    enum MHD_Result res = MHD_NO;
    if (!strncmp(k.endpoint, "/admin/", 7) && refuse_admin(h, c, k.endpoint, &res))
        return res;
    if (routes[known].control && !h->control)
        return send_error(h, c, k.endpoint, 503, "server_error", "control_unavailable",
                          "the controller did not start (see the server's log)");
    return routes[known].handler(h, c, &k);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    srv_http *h = cls;
    size_t limit = srv_server_config(h->server)->max_body_bytes;
    connection_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc)
            return MHD_NO;
        *con_cls = cc;
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
        unsigned long long announced = length ? strtoull(length, NULL, 10) : 0;
        cc->too_large = announced > limit;
        /* a client that waits for 100 Continue, or announces more than is worth reading,
         * is answered before it sends the body */
        if (cc->too_large && ((expect && !strcasecmp(expect, "100-continue")) || announced > DROP_MAX_BYTES)) {
            cc->answered = 1;
            return dispatch(h, c, url, method, cc);
        }
        return MHD_YES;
    }
    if (cc->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large && cc->len + *upload_size > limit) {
            cc->too_large = 1;
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
        }
        if (cc->too_large && (cc->dropped += *upload_size) > DROP_MAX_BYTES) {
            *upload_size = 0;
            cc->answered = 1;
            return dispatch(h, c, url, method, cc);
        }
        if (!cc->too_large) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                size_t cap = 2 * (cc->len + *upload_size + 1);
                char *grown = realloc(cc->body, cap);
                if (!grown)
                    return MHD_NO;
                cc->body = grown;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(h, c, url, method, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c, (void)toe;
    srv_http *h = cls;
    connection_ctx *cc = *con_cls;
    if (cc && cc->in_flight)
        __atomic_sub_fetch(&h->in_flight, 1, __ATOMIC_ACQ_REL);
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

static ac_status bind_address(const char *host, int port, struct sockaddr_storage *addr, int *ipv6)
{
    memset(addr, 0, sizeof *addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)addr;
    const char *h = !strcmp(host, "localhost") ? "127.0.0.1" : host;
    *ipv6 = 0;
    if (inet_pton(AF_INET, h, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        return AC_OK;
    }
    if (inet_pton(AF_INET6, h, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *ipv6 = 1;
        return AC_OK;
    }
    return ac_fail(AC_ERR_INVALID, "host '%s' is not an IPv4 or IPv6 address", host);
}

ac_status srv_http_start(srv_server *server, srv_metrics *metrics, srv_control *control, srv_policy *policy,
                         srv_http **out, int *bound_port)
{
    *out = NULL;
    const srv_config *cfg = srv_server_config(server);
    struct sockaddr_storage addr;
    int ipv6 = 0;
    ac_status st = bind_address(cfg->host, cfg->port, &addr, &ipv6);
    if (st != AC_OK)
        return st;
    srv_http *h = calloc(1, sizeof *h);
    if (!h)
        return ac_fail(AC_ERR_NOMEM, "out of memory for the HTTP server");
    h->server = server;
    h->metrics = metrics;
    h->control = control;
    h->policy = policy;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | (ipv6 ? MHD_USE_IPv6 : 0);
    h->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, 120u,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (!h->daemon) {
        free(h);
        return ac_fail(AC_ERR_IO, "cannot listen on %s:%d (in use, or not an address of this host)", cfg->host,
                       cfg->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : cfg->port;
    *out = h;
    return AC_OK;
}

int srv_http_drain(srv_http *h, double timeout_s)
{
    __atomic_store_n(&h->closing, 1, __ATOMIC_RELEASE);
    int64_t deadline = ac_monotonic_ns() + (int64_t)(timeout_s * 1e9);
    int left;
    while ((left = __atomic_load_n(&h->in_flight, __ATOMIC_ACQUIRE)) > 0 && ac_monotonic_ns() < deadline) {
        struct timespec pause = {0, 10 * 1000000L};
        nanosleep(&pause, NULL);
    }
    return left;
}

void srv_http_stop(srv_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
