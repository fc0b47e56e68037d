/* The built-in inference server: an OpenAI-compatible completions API over
 * libmicrohttpd, continuous batching on one scheduler thread, hot swap of the model.
 *
 * Threads. libmicrohttpd runs one thread per connection; those threads parse requests,
 * tokenize, wait and format, and never run the model. One scheduler thread owns the
 * slots and runs every forward: each step it admits queued requests into free slots and
 * steps all active sequences of a model together (prefill chunks and decode tokens in
 * one batch). A swap loads and validates the new model on the thread of the admin
 * request, then publishes it; requests bound to the old model finish on it.
 *
 * Lifetimes. A model is reference-counted: being the current model is one reference,
 * every request bound to it one, every slot holding one of its caches one; the last
 * release frees it. A request is shared by its HTTP thread and the scheduler, and freed
 * by whichever lets go last. */
#ifndef AUTOCOMPRESS_SRV_H
#define AUTOCOMPRESS_SRV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "autocompress/contract.h"
#include "autocompress/control.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/status.h"
#include "autocompress/tokenizer.h"

enum { SRV_MAX_STOP = 4, SRV_MAX_TOP_LOGPROBS = 20, SRV_NAME_MAX = 128, SRV_PATH_MAX = 1024 };

/* ---- configuration (srv_config.c) ---- */

/* The controller (the `control` group): where jobs live and what they compress with. */
typedef struct {
    char jobs_dir[SRV_PATH_MAX];  /* default "autocompress-jobs" */
    char data[SRV_PATH_MAX];      /* token shards for search and KD; a job may name its own */
    char tables[SRV_PATH_MAX];    /* cost tables; empty: each job profiles */
    char parent[SRV_PATH_MAX];    /* the checkpoint jobs compress; default the first one served */
    char contract[SRV_PATH_MAX];  /* the served model's contract: the base of live contracts and
                                     the workload the SLA policy's drift is measured against */
    int threads;                  /* the job's training threads (default 1) */
    int nice;                     /* the job's nice value (default 10) */
    int measure_sweeps, eval_batches; /* 0: compress's defaults */
    long long search_tokens, kd_tokens; /* 0: the contract's */
} srv_control_config;

/* The SLA policy (the `sla` group; absent: no policy). Targets <= 0 are not checked. */
typedef struct {
    int enabled;
    double p95_latency_ms, time_per_output_token_ms, min_throughput_tok_s, memory_mib;
    double workload_drift;        /* e.g. 0.5: a median 50% off the contract's */
    double window_s, hysteresis, cooldown_s;
    double interval_s;            /* one sample per interval (default 5 s) */
} srv_sla_config;

typedef struct {
    char host[64];
    int port;
    int slots;               /* sequences stepped together */
    int max_queue;           /* requests waiting for a slot before 429 */
    int prefill_chunk;       /* prompt tokens of one sequence per step */
    int max_step_tokens;     /* tokens of all sequences per step */
    int context_tokens;      /* prompt + max_tokens limit */
    int default_max_tokens;
    int max_tokens_limit;    /* the most max_tokens one request may ask for (0: the context) */
    int max_prompt_tokens;   /* the longest prompt one request may bring (0: the context) */
    size_t max_body_bytes;
    int max_connections;
    double drain_timeout_s;  /* SIGTERM: how long in-flight completions may take to finish */
    int threads;             /* engine threads (0: all cores) */
    char device[16];         /* where models run: "cpu" (default) or "cuda" */
    ac_dtype weights;        /* their product weights there: f32 (default) or bf16 */
    char model_name[SRV_NAME_MAX]; /* the id in /v1/models; default the directory's name */
    char admin_token[256];   /* empty: admin endpoints disabled */
    int prefix_reuse;        /* reuse a slot's cache when a prompt extends it */
    int profile_every;       /* in-situ profiling: one step in this many timed per layer (0: paused) */
    char profile_tables[SRV_PATH_MAX]; /* the tables GET /admin/profile compares with; default control.tables */
    srv_control_config control;
    srv_sla_config sla;
} srv_config;

void srv_config_defaults(srv_config *c);
/* Reads a libconfig file over the defaults; errors name the file, line and setting. */
ac_status srv_config_load(const char *path, srv_config *c);
/* Takes the admin token from the environment variable AUTOCOMPRESS_ADMIN_TOKEN when the
 * config set none. */
void srv_config_apply_env(srv_config *c);

/* ---- models (srv_model.c) ---- */

typedef struct srv_model {
    char path[SRV_PATH_MAX];
    char name[SRV_NAME_MAX];
    char summary[256];     /* pattern, hidden size, parameter count */
    ac_model *model;
    ac_tokenizer *tokenizer;
    ac_runtime *runtime;   /* the scheduler's */
    int vocab;
    int32_t eos;           /* <|endoftext|>, or -1 */
    int64_t params;
    double loaded_at;      /* unix seconds */
    int refs;              /* under the server lock */
    int generation;        /* 1 for the first model, +1 per swap */
    ac_live_profile *live; /* in-situ profile of its steps, or NULL (profiling off) */
} srv_model;

/* Loads a checkpoint directory (config.json, weights, tokenizer.json) onto `device`
 * ("cpu", "cuda"), its product weights as `weights` (f32, or bf16: a serving copy,
 * ac_model_to_device_as), and validates it: a forward on a probe prompt must give finite
 * logits. Runs on a thread of its own (srv_model.c says why); the caller waits. */
ac_status srv_model_load(const char *path, const char *name, const char *device, ac_dtype weights,
                         srv_model **model);
void srv_model_free(srv_model *model);

/* ---- text helpers (srv_text.c) ---- */

/* Length of the longest prefix of s[0..len) that does not end inside an incomplete
 * UTF-8 sequence (a complete or invalid sequence counts as whole). */
size_t srv_utf8_complete_prefix(const char *s, size_t len);
/* Length of the longest prefix of s[0..len) that is valid UTF-8 (len when all of it is). */
size_t srv_utf8_valid_prefix(const char *s, size_t len);
/* Where JSON text holds the string escape \u0000 (cJSON's strings would end there), or -1. */
long srv_json_nul_escape(const char *s, size_t len);
/* A malloc'd, NUL-terminated copy with every invalid UTF-8 sequence replaced by U+FFFD. */
char *srv_utf8_sanitize(const char *s, size_t len);
/* Where the first stop string occurs in text[from..len) (matches may start before
 * `from` when they end after it): its offset, or -1. */
long srv_find_stop(const char *text, size_t len, size_t from, char *const *stop, int n_stop);
/* Bytes at the end of text that could begin a stop string: held back from a stream. */
size_t srv_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop);

/* ---- requests (srv_api.c) ---- */

typedef struct {
    int32_t id;
    float logprob;
} srv_top;

typedef struct {
    int32_t id;
    float logprob;
    size_t offset;          /* byte offset of the token's text in the completion text */
    srv_top top[SRV_MAX_TOP_LOGPROBS];
} srv_token;

typedef enum { SRV_FINISH_NONE = 0, SRV_FINISH_LENGTH, SRV_FINISH_STOP, SRV_FINISH_ERROR } srv_finish;

typedef struct srv_request {
    /* parameters, fixed once parsed */
    char *prompt_text;      /* NULL when the prompt was token ids */
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    float temperature, top_p;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, echo, include_usage;
    int logprobs;           /* -1: none; else top alternatives per token */
    char id[40];
    double created;         /* unix seconds */
    srv_model *model;       /* bound at admission (a reference) */

    /* progress, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_token *tokens;      /* generated tokens kept in the output */
    int n_tokens;
    size_t cap_tokens;
    int n_generated;        /* sampled, including a final end-of-text token */
    srv_token *prompt_tokens; /* echo with logprobs: the prompt's (first has no logprob) */
    char *text;             /* completion text, stop string cut */
    size_t text_len, text_cap;
    size_t ready_len;       /* bytes a stream may send now */
    int cached_tokens;      /* prompt tokens found in a slot's cache */
    srv_finish finish;
    char error[256];
    int cancelled;          /* the client went away */
    int refs;               /* HTTP thread and scheduler */
    double t_arrival, t_first_token, t_done; /* monotonic seconds */
} srv_request;

srv_request *srv_request_new(void);
/* Frees a request no other thread holds (see srv_server_release_request). */
void srv_request_free(srv_request *req);

typedef struct srv_server srv_server;

/* ---- metrics and workload (srv_metrics.c) ---- */

typedef struct srv_metrics srv_metrics;

/* slots >= 1 (AC_ERR_INVALID otherwise). Every call below is thread-safe. */
ac_status srv_metrics_create(int slots, srv_metrics **m);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_count_request(srv_metrics *m, const char *endpoint, int status);
/* A finished request (nothing writes its progress any more: its fields are read without
 * req->mu). */
void srv_metrics_completion(srv_metrics *m, const srv_request *req);
/* One scheduler step: the sequences it stepped (< 1: ignored). */
void srv_metrics_step(srv_metrics *m, int sequences);
void srv_metrics_swap(srv_metrics *m, int ok);
/* Prometheus text; gauges given by the caller. Malloc'd; NULL when out of memory. */
char *srv_metrics_prometheus(srv_metrics *m, int active_slots, int queue_depth, int model_generation);
/* The live workload's histograms and the contract workload they imply (JSON, malloc'd;
 * NULL when out of memory). */
char *srv_metrics_workload_json(srv_metrics *m);
/* The contract workload the live one implies (its medians, as the JSON's implied_workload):
 * 0 when no request has been served yet, or out of memory. */
int srv_metrics_live_workload(srv_metrics *m, ac_contract_workload *w);
/* The requests completed since `since` (monotonic seconds, as the requests' times) as
 * the SLA policy reads them: p95 latency, median time per output token, generated
 * tokens per second, resident memory, median prompt and output tokens, mean batch over
 * the recent steps. 0 when out of memory. */
int srv_metrics_sla_sample(srv_metrics *m, double since, double now, ac_sla_sample *sample);

/* ---- the server: life cycle, swaps, introspection (srv_server.c; its scheduler in srv_sched.c) ---- */

typedef struct {
    double at;              /* unix seconds */
    char path[SRV_PATH_MAX];
    int ok;
    int drain_first;
    double seconds;
    char message[256];
} srv_swap_record;

enum { SRV_SWAP_HISTORY = 32 };

ac_status srv_server_create(const srv_config *config, srv_metrics *metrics, srv_server **server);
/* Stops the scheduler; requests still queued or running end with an error. */
void srv_server_stop(srv_server *server);
/* Stops (if needed) and frees. */
void srv_server_free(srv_server *server);
/* Loads the first model (the server answers 503 on /health until then). */
ac_status srv_server_load_initial(srv_server *server, const char *path);
int srv_server_ready(srv_server *server);
const srv_config *srv_server_config(const srv_server *server);

/* Binds a new request to the current model: waits while a drain-first swap runs.
 * Returns the model with a reference taken, or NULL when none serves (error set). */
srv_model *srv_server_acquire_model(srv_server *server);
void srv_server_release_model(srv_server *server, srv_model *model);
/* Queues a parsed request (bound to a model) with two references, the caller's and the
 * scheduler's; 0 when the queue is full or the server stops (nothing was taken). */
int srv_server_submit(srv_server *server, srv_request *req);
/* Drops one reference to a submitted request; the last frees it and its model reference. */
void srv_server_release_request(srv_server *server, srv_request *req);

/* Hot swap, one at a time. Returns the HTTP status: 200, 409 while another swap runs,
 * 422 when the checkpoint fails to load or validate (the old model still serves), 507
 * out of memory. The record describes it. */
int srv_server_swap(srv_server *server, const char *path, int drain_first, srv_swap_record *record);

/* Snapshots for the endpoints. */
typedef struct {
    int active_slots, queue_depth, generation;
    int ready;
} srv_gauges;
srv_gauges srv_server_gauges(srv_server *server);
/* What GET /admin/status shows: the served model, the slots and queue, the last swaps. */
typedef struct {
    int has_model;
    char name[SRV_NAME_MAX], path[SRV_PATH_MAX], architecture[256];
    int64_t parameters;
    int generation;
    double loaded_at;
    const char *state;      /* "serving", "draining" or "loading" */
    int slots, active_slots, queue_depth, models_loaded;
    int n_swaps;
    srv_swap_record swaps[SRV_SWAP_HISTORY]; /* oldest first */
} srv_status;
void srv_server_status(srv_server *server, srv_status *status);
/* GET /admin/profile: the served model's in-situ profile beside the cost tables (200;
 * *json gets module/control's JSON, NULL when out of memory), or 503 and why there is none. */
int srv_server_profile(srv_server *server, char **json, char *why, size_t size);
/* Sets the sampling rate of the served model's profile and of models loaded later (0: pause). */
void srv_server_set_profile_every(srv_server *server, int every);
/* The current model's name for /v1/models and responses, copied. */
void srv_server_model_name(srv_server *server, char *name, size_t size);

/* ---- HTTP (srv_http.c) ---- */

typedef struct srv_http srv_http;
typedef struct srv_control srv_control;
typedef struct srv_policy srv_policy;

/* control may be NULL: its endpoints then answer 503; policy may be NULL (no sla group):
 * GET /admin/policy then says it is not enabled. */
ac_status srv_http_start(srv_server *server, srv_metrics *metrics, srv_control *control, srv_policy *policy,
                         srv_http **http, int *bound_port);
void srv_http_stop(srv_http *http);
/* Refuses new completions (503, and /health 503 "stopping") and waits up to timeout_s for
 * every accepted one to be answered in full (a stream to its last byte): the number
 * still unanswered at the deadline. */
int srv_http_drain(srv_http *http, double timeout_s);

/* ---- completions API (srv_api.c) ---- */

typedef struct {
    int status;
    const char *type;       /* OpenAI error type */
    const char *code;       /* or NULL */
    char message[512];
} srv_error;

/* Parses and validates a /v1/completions body against `model` (tokenizing the prompt):
 * on failure fills err (a 400 naming the field) and returns NULL. */
srv_request *srv_api_parse_completion(const char *body, size_t len, srv_model *model, const srv_config *config,
                                      srv_error *err);
/* The whole response of a finished request (JSON, malloc'd). */
char *srv_api_completion_json(srv_request *req, const char *model_name);
/* The next SSE chunk of a stream from the text and tokens ready past *sent_text /
 * *sent_tokens, or NULL when there is nothing new; `final` adds the finish reason. */
char *srv_api_stream_chunk(srv_request *req, const char *model_name, size_t *sent_text, int *sent_tokens, int final);
/* A JSON body that is one value and nothing after it (whitespace aside), or NULL (also
 * for text that is not UTF-8, or holds \u0000); *error_at (may be NULL) is the byte
 * where parsing stopped. */
struct cJSON *srv_json_parse_whole(const char *body, size_t len, size_t *error_at);
/* {"error": {...}} (malloc'd). */
char *srv_api_error_json(const srv_error *err);

#endif
