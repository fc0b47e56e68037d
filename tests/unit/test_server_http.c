/* The inference server end to end, in process: srv_server and srv_http on a loopback
 * port, spoken to with libcurl. Greedy completions (plain, streamed, batched, continued
 * from a cached prefix) equal the offline `autocompress generate`; logprobs, echo and
 * stop strings; errors and hostile input get the right status and the OpenAI error
 * shape; a client that hangs up frees its slot; admin authentication; hot swaps (good,
 * missing, NaN, drain-first under a running stream, concurrent); metrics. With
 * AC_TEST_DEVICE=guarded (ctest's test_server_http_device) every model is served from a
 * backend whose memory the host cannot touch (guarded_backend.h, standing in for a GPU),
 * and the same checks hold; so they do with AC_TEST_DEVICE=cuda-emu in the emulator's
 * build (test_server_http_emu: the CUDA backend's kernels, tests/cudaemu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guarded_backend.h"
#ifdef AC_TEST_CUDA_EMU
#include "cudaemu.h"
#endif
#include "server/srv.h"
#include "autocompress/model.h"

extern char **environ;

#define PROSE AC_SOURCE_DIR "/examples/parent/prose"
#define CODE AC_SOURCE_DIR "/examples/parent/code"
#define TOKEN "test-token"
#define MAX_BODY 65536
#define CONTEXT 512

static srv_config cfg;
static srv_metrics *metrics;
static srv_server *server;
static srv_http *daemon_http;
static int port;

/* what this program sent, for the metrics check */
static int completions_ok, completions_400;

static void msleep(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the offline reference: `autocompress generate` as a subprocess ---- */

typedef struct {
    const char *model;
    char *prompt;
    int max_tokens;
    char *text;
} reference;

static reference refs[32];
static int n_refs;

/* `prompt` is text, or with ids_mode a comma-separated id list (the output is then the
 * generated ids, comma-separated). */
static char *run_generate_mode(const char *model_dir, const char *prompt, int max_tokens, int ids_mode)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char n[16];
    snprintf(n, sizeof n, "%d", max_tokens);
    char *argv[] = {AC_CLI_PATH, "generate", "--model", (char *)model_dir, ids_mode ? "--ids" : "--prompt",
                    (char *)prompt, "--max-tokens", n, NULL};
    /* one engine thread, like the server under test (and kind to a small machine) */
    char *envp[256];
    int n_env = 0;
    for (char **e = environ; *e && n_env < 250; e++)
        if (strncmp(*e, "OMP_NUM_THREADS=", 16) && strncmp(*e, "OPENBLAS_NUM_THREADS=", 21))
            envp[n_env++] = *e;
    envp[n_env++] = "OMP_NUM_THREADS=1";
    envp[n_env++] = "OPENBLAS_NUM_THREADS=1";
    envp[n_env] = NULL;
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, AC_CLI_PATH, &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    for (;;) {
        if (len + 1024 > cap)
            out = realloc(out, cap *= 2);
        ssize_t got = read(fds[0], out + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the generated text and one newline */
    assert_true(len > 0 && out[len - 1] == '\n');
    out[len - 1] = 0;
    return out;
}

static char *run_generate(const char *model_dir, const char *prompt, int max_tokens)
{
    return run_generate_mode(model_dir, prompt, max_tokens, 0);
}

static const char *ref_text(const char *model_dir, const char *prompt, int max_tokens)
{
    for (int i = 0; i < n_refs; i++)
        if (!strcmp(refs[i].model, model_dir) && !strcmp(refs[i].prompt, prompt) && refs[i].max_tokens == max_tokens)
            return refs[i].text;
    assert_true(n_refs < (int)(sizeof refs / sizeof refs[0]));
    reference *r = &refs[n_refs++];
    r->model = model_dir;
    r->prompt = strdup(prompt);
    r->max_tokens = max_tokens;
    r->text = run_generate(model_dir, prompt, max_tokens);
    return r->text;
}

/* ---- HTTP with libcurl ---- */

typedef struct {
    const char *method; /* GET (default) or POST or another verb */
    const char *path;
    const char *body;
    size_t body_len;    /* 0: strlen(body) */
    const char *auth;   /* the Authorization header's value */
    int chunked;        /* send the body with Transfer-Encoding: chunked */
    int port;           /* 0: the main server */
    /* sees every piece of the response body; returns 0 to hang up */
    int (*hook)(void *user, const char *data, size_t len);
    void *user;
    long timeout_ms;    /* 0: 300 s */
} http_req;

typedef struct {
    long status;
    char *body;
    size_t len;
    CURLcode curl;
    char content_type[128];
    char retry_after[16]; /* the Retry-After header, when there is one */
} http_res;

typedef struct {
    const http_req *req;
    http_res *res;
} sink;

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    sink *s = user;
    size_t len = size * n;
    char *grown = realloc(s->res->body, s->res->len + len + 1);
    if (!grown)
        return 0;
    s->res->body = grown;
    memcpy(grown + s->res->len, data, len);
    s->res->len += len;
    grown[s->res->len] = 0;
    if (s->req->hook && !s->req->hook(s->req->user, data, len))
        return 0;
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    http_res *res = user;
    size_t len = size * n;
    if (len > 13 && !strncasecmp(data, "Retry-After: ", 13))
        snprintf(res->retry_after, sizeof res->retry_after, "%.*s", (int)strcspn(data + 13, "\r\n"), data + 13);
    return len;
}

typedef struct {
    const char *data;
    size_t len, off;
} source;

static size_t on_upload(char *buf, size_t size, size_t n, void *user)
{
    source *s = user;
    size_t want = size * n, left = s->len - s->off;
    size_t k = want < left ? want : left;
    if (k > 1000)
        k = 1000; /* many small chunks */
    memcpy(buf, s->data + s->off, k);
    s->off += k;
    return k;
}

/* Thread-safe: no cmocka assertions inside. */
static http_res http(const http_req *q)
{
    http_res res;
    memset(&res, 0, sizeof res);
    res.body = calloc(1, 1);
    CURL *c = curl_easy_init();
    if (!c) {
        res.curl = CURLE_FAILED_INIT;
        return res;
    }
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", q->port ? q->port : port, q->path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, q->timeout_ms > 0 ? q->timeout_ms : 300000L);
    struct curl_slist *headers = curl_slist_append(NULL, "Expect:");
    char auth[512];
    if (q->auth) {
        snprintf(auth, sizeof auth, "Authorization: %s", q->auth);
        headers = curl_slist_append(headers, auth);
    }
    const char *method = q->method ? q->method : "GET";
    source src = {q->body, q->body ? (q->body_len ? q->body_len : strlen(q->body)) : 0, 0};
    if (!strcmp(method, "POST")) {
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        if (q->chunked) {
            headers = curl_slist_append(headers, "Transfer-Encoding: chunked");
            curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
            curl_easy_setopt(c, CURLOPT_READDATA, &src);
        } else {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body ? q->body : "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)src.len);
        }
    } else if (strcmp(method, "GET")) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    sink s = {q, &res};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &res);
    res.curl = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res.status);
    char *type = NULL;
    if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type)
        snprintf(res.content_type, sizeof res.content_type, "%s", type);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    return res;
}

static http_res get(const char *path, const char *auth)
{
    http_req q = {.path = path, .auth = auth};
    return http(&q);
}

static http_res post(const char *path, const char *body, const char *auth)
{
    http_req q = {.method = "POST", .path = path, .body = body, .auth = auth};
    return http(&q);
}

static void res_free(http_res *r)
{
    free(r->body);
    r->body = NULL;
}

static cJSON *json_of(const http_res *r)
{
    if (r->curl != CURLE_OK)
        fail_msg("the request failed: %s", curl_easy_strerror(r->curl));
    cJSON *o = cJSON_ParseWithLength(r->body, r->len);
    if (!o)
        fail_msg("not JSON (status %ld): %.300s", r->status, r->body);
    return o;
}

static const char *str_at(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        fail_msg("'%s' is not a string", key);
    return v->valuestring;
}

/* {"error": {"message": string, "type": string, "code": string or null}} with the
 * given status, type and code (code NULL: not checked); returns the message, copied. */
static char *expect_error(http_res *r, long status, const char *type, const char *code)
{
    if (r->status != status)
        fail_msg("status %ld, want %ld: %.300s", r->status, status, r->body);
    assert_non_null(strstr(r->content_type, "application/json"));
    cJSON *o = json_of(r);
    assert_int_equal(cJSON_GetArraySize(o), 1);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    assert_true(cJSON_IsObject(e));
    const char *message = str_at(e, "message");
    assert_true(message[0] != 0);
    assert_string_equal(str_at(e, "type"), type);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    assert_true(cJSON_IsString(c) || cJSON_IsNull(c));
    if (code) {
        assert_true(cJSON_IsString(c));
        assert_string_equal(c->valuestring, code);
    }
    char *copy = strdup(message);
    cJSON_Delete(o);
    res_free(r);
    return copy;
}

static void expect_error_free(http_res *r, long status, const char *type, const char *code)
{
    free(expect_error(r, status, type, code));
}

/* ---- completions ---- */

/* {"prompt": P, "temperature": 0, "max_tokens": N} plus the fields of `extra`. */
static char *completion_body(const char *prompt, int max_tokens, const char *extra)
{
    cJSON *o = extra ? cJSON_Parse(extra) : cJSON_CreateObject();
    assert_non_null(o);
    cJSON_AddStringToObject(o, "prompt", prompt);
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddNumberToObject(o, "max_tokens", max_tokens);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* A whole (non-streamed) completion: the response object, checked for its shape. */
static cJSON *complete(const char *prompt, int max_tokens, const char *extra)
{
    char *body = completion_body(prompt, max_tokens, extra);
    http_res r = post("/v1/completions", body, NULL);
    free(body);
    if (r.status != 200)
        fail_msg("status %ld: %.300s", r.status, r.body);
    completions_ok++;
    cJSON *o = json_of(&r);
    res_free(&r);
    assert_string_equal(str_at(o, "object"), "text_completion");
    assert_int_equal(strncmp(str_at(o, "id"), "cmpl-", 5), 0);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    assert_int_equal(cJSON_GetArraySize(choices), 1);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    assert_true(cJSON_IsNumber(done));
    assert_true(done->valueint >= 1 && done->valueint <= max_tokens);
    return o;
}

static const cJSON *choice0(const cJSON *o)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
}

static char *greedy(const char *prompt, int max_tokens)
{
    cJSON *o = complete(prompt, max_tokens, NULL);
    char *text = strdup(str_at(choice0(o), "text"));
    cJSON_Delete(o);
    return text;
}

static void expect_greedy(const char *model_dir, const char *prompt, int max_tokens)
{
    const char *want = ref_text(model_dir, prompt, max_tokens);
    char *got = greedy(prompt, max_tokens);
    if (strcmp(got, want))
        fail_msg("prompt \"%s\": the server gave \"%s\", the CLI \"%s\"", prompt, got, want);
    free(got);
}

/* ---- server-sent events ---- */

typedef struct {
    char *text;          /* the text fields, concatenated */
    char finish[32];     /* of the last chunk with choices */
    int chunks;          /* JSON events */
    int done;            /* "data: [DONE]" came last */
    int usage_tokens;    /* a usage chunk's completion_tokens, or -1 */
    int finish_early;    /* a chunk before the last had a finish reason */
} sse_result;

static sse_result parse_sse(const char *body)
{
    sse_result r = {calloc(1, 1), "", 0, 0, -1, 0};
    size_t text_len = 0;
    const char *p = body;
    while (*p) {
        if (r.done)
            fail_msg("events after [DONE]: %.100s", p);
        if (strncmp(p, "data: ", 6))
            fail_msg("an event that is not 'data: ': %.100s", p);
        const char *end = strstr(p, "\n\n");
        if (!end)
            fail_msg("an event without its blank line: %.100s", p);
        const char *data = p + 6;
        size_t n = (size_t)(end - data);
        if (n == 6 && !strncmp(data, "[DONE]", 6)) {
            r.done = 1;
        } else {
            cJSON *o = cJSON_ParseWithLength(data, n);
            if (!o)
                fail_msg("an event that is not JSON: %.*s", (int)n, data);
            assert_string_equal(str_at(o, "object"), "text_completion");
            const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
            assert_true(cJSON_IsArray(choices));
            const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
            if (cJSON_GetArraySize(choices) == 0) {
                assert_true(cJSON_IsObject(usage)); /* the usage chunk */
                r.usage_tokens = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens")->valueint;
            } else {
                if (r.finish[0])
                    r.finish_early = 1;
                const cJSON *c = cJSON_GetArrayItem(choices, 0);
                const char *t = str_at(c, "text");
                size_t k = strlen(t);
                r.text = realloc(r.text, text_len + k + 1);
                memcpy(r.text + text_len, t, k + 1);
                text_len += k;
                const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
                if (cJSON_IsString(f))
                    snprintf(r.finish, sizeof r.finish, "%s", f->valuestring);
                else
                    assert_true(cJSON_IsNull(f));
            }
            r.chunks++;
            cJSON_Delete(o);
        }
        p = end + 2;
    }
    return r;
}

static sse_result stream(const char *prompt, int max_tokens, const char *extra)
{
    char fields[512];
    snprintf(fields, sizeof fields, "{\"stream\": true%s%s}", extra ? ", " : "", extra ? extra : "");
    char *body = completion_body(prompt, max_tokens, fields);
    http_res r = post("/v1/completions", body, NULL);
    free(body);
    if (r.status != 200)
        fail_msg("status %ld: %.300s", r.status, r.body);
    completions_ok++;
    assert_non_null(strstr(r.content_type, "text/event-stream"));
    sse_result s = parse_sse(r.body);
    res_free(&r);
    assert_true(s.done);
    assert_true(s.chunks >= 1);
    assert_int_equal(s.finish_early, 0);
    return s;
}

/* ---- admin ---- */

static const char *const BEARER = "Bearer " TOKEN;

static cJSON *admin_status(void)
{
    http_res r = get("/admin/status", BEARER);
    assert_int_equal(r.status, 200);
    cJSON *o = json_of(&r);
    res_free(&r);
    return o;
}

static http_res swap_to(const char *path, int drain_first)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_path", path);
    if (drain_first)
        cJSON_AddTrueToObject(o, "drain_first");
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    http_res r = post("/admin/swap", body, BEARER);
    free(body);
    return r;
}

/* ---- setup ---- */

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN); /* as `autocompress serve` does: a client may hang up */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -1;
    srv_config_defaults(&cfg);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    cfg.port = 0;
    cfg.slots = 4;
    cfg.threads = 1;
    cfg.max_body_bytes = MAX_BODY;
    cfg.context_tokens = CONTEXT;
    snprintf(cfg.admin_token, sizeof cfg.admin_token, TOKEN);
    const char *device = getenv("AC_TEST_DEVICE");
    if (device) {
#ifdef AC_TEST_CUDA_EMU
        const ac_backend *be = strcmp(device, "cuda-emu") == 0 ? ac_cuda_emulated_backend() : &guarded_backend;
#else
        const ac_backend *be = &guarded_backend;
#endif
        if (strcmp(device, be->name) != 0 || ac_backend_register(be) != AC_OK)
            return -1;
        snprintf(cfg.device, sizeof cfg.device, "%s", device);
    }
    if (srv_metrics_create(cfg.slots, &metrics) != AC_OK || srv_server_create(&cfg, metrics, &server) != AC_OK ||
        srv_http_start(server, metrics, NULL, NULL, &daemon_http, &port) != AC_OK || port <= 0 ||
        srv_server_load_initial(server, PROSE) != AC_OK) {
        fprintf(stderr, "cannot start the server: %s\n", ac_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_server_stop(server);
    srv_http_stop(daemon_http);
    srv_server_free(server);
    srv_metrics_free(metrics);
    for (int i = 0; i < n_refs; i++) {
        free(refs[i].prompt);
        free(refs[i].text);
    }
    curl_global_cleanup();
    return 0;
}

/* ---- tests ---- */

static void test_health_and_models(void **state)
{
    (void)state;
    /* on a device the served model's weights, caches and buffers are there */
#ifdef AC_TEST_CUDA_EMU
    if (strcmp(cfg.device, "cuda-emu") == 0)
        assert_true(ac_cuda_emulated_backend()->bytes_in_use() > 0);
    else
#endif
        assert_true(cfg.device[0] && strcmp(cfg.device, "cpu") ? guarded_count > 0 : guarded_count == 0);
    http_res r = get("/health", NULL);
    assert_int_equal(r.status, 200);
    cJSON *o = json_of(&r);
    assert_int_equal(cJSON_GetArraySize(o), 1);
    assert_string_equal(str_at(o, "status"), "ok");
    cJSON_Delete(o);
    res_free(&r);

    r = get("/v1/models", NULL);
    assert_int_equal(r.status, 200);
    o = json_of(&r);
    assert_string_equal(str_at(o, "object"), "list");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    assert_int_equal(cJSON_GetArraySize(data), 1);
    assert_string_equal(str_at(cJSON_GetArrayItem(data, 0), "id"), "prose");
    assert_string_equal(str_at(cJSON_GetArrayItem(data, 0), "object"), "model");
    cJSON_Delete(o);
    res_free(&r);
}

static const char *const PROMPTS[] = {
    "The meaning of life is", "You will be", "Once upon a time", "A friend in need",
    "The best way to",        "In the beginning", "Never trust a", "Love is",
};

static void test_greedy_matches_cli(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        expect_greedy(PROSE, PROMPTS[i], 24);
    /* the response names the model */
    cJSON *o = complete(PROMPTS[0], 24, NULL);
    assert_string_equal(str_at(o, "model"), "prose");
    const char *finish = str_at(choice0(o), "finish_reason");
    assert_true(!strcmp(finish, "length") || !strcmp(finish, "stop"));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(choice0(o), "logprobs")));
    cJSON_Delete(o);
    /* prompt as ["string"] is the same request */
    cJSON *body = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(body, "prompt");
    cJSON_AddItemToArray(arr, cJSON_CreateString(PROMPTS[1]));
    cJSON_AddNumberToObject(body, "temperature", 0);
    cJSON_AddNumberToObject(body, "max_tokens", 24);
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    http_res r = post("/v1/completions", text, NULL);
    free(text);
    assert_int_equal(r.status, 200);
    completions_ok++;
    o = json_of(&r);
    assert_string_equal(str_at(choice0(o), "text"), ref_text(PROSE, PROMPTS[1], 24));
    cJSON_Delete(o);
    res_free(&r);
}

static void test_stream_matches_cli(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        sse_result s = stream(PROMPTS[i], 24, NULL);
        assert_string_equal(s.text, ref_text(PROSE, PROMPTS[i], 24));
        assert_true(s.finish[0] != 0);
        assert_true(!strcmp(s.finish, "length") || !strcmp(s.finish, "stop"));
        assert_int_equal(s.usage_tokens, -1);
        free(s.text);
    }
    /* with usage: one more chunk, no choices, the token counts */
    sse_result s = stream(PROMPTS[0], 24, "\"stream_options\": {\"include_usage\": true}");
    assert_string_equal(s.text, ref_text(PROSE, PROMPTS[0], 24));
    assert_true(s.usage_tokens >= 1 && s.usage_tokens <= 24);
    free(s.text);
}

typedef struct {
    const char *prompt;
    int max_tokens;
    long status;
    char *body;
    pthread_barrier_t *start;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->start); /* all at once */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", j->prompt);
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddNumberToObject(o, "max_tokens", j->max_tokens);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    http_res r = post("/v1/completions", body, NULL);
    free(body);
    j->status = r.status;
    j->body = r.body;
    return NULL;
}

static void test_concurrent_batching(void **state)
{
    (void)state;
    enum { N = 8 };
    for (int i = 0; i < N; i++)
        ref_text(PROSE, PROMPTS[i], 24);
    job jobs[N];
    pthread_t threads[N];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    for (int i = 0; i < N; i++) {
        jobs[i] = (job){PROMPTS[i], 24, 0, NULL, &start};
        assert_int_equal(pthread_create(&threads[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N; i++) {
        if (jobs[i].status != 200)
            fail_msg("request %d: status %ld: %.300s", i, jobs[i].status, jobs[i].body);
        completions_ok++;
        cJSON *o = cJSON_Parse(jobs[i].body);
        assert_non_null(o);
        const char *got = str_at(choice0(o), "text");
        if (strcmp(got, ref_text(PROSE, PROMPTS[i], 24)))
            fail_msg("batched \"%s\": \"%s\", offline \"%s\"", PROMPTS[i], got, ref_text(PROSE, PROMPTS[i], 24));
        cJSON_Delete(o);
        free(jobs[i].body);
    }
}

/* ---- prefix reuse ---- */

static int parse_ids(const char *csv, int32_t *ids, int cap)
{
    int n = 0;
    for (const char *p = csv; *p && n < cap;) {
        char *end;
        ids[n++] = (int32_t)strtol(p, &end, 10);
        assert_true(end != p);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void ids_csv(const int32_t *ids, int n, char *out, size_t size)
{
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, size - o, "%s%d", i ? "," : "", ids[i]);
}

static void ids_json(const int32_t *ids, int n, int max_tokens, char *out, size_t size)
{
    size_t o = (size_t)snprintf(out, size, "{\"temperature\": 0, \"max_tokens\": %d, \"prompt\": [", max_tokens);
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, size - o, "%s%d", i ? ", " : "", ids[i]);
    snprintf(out + o, size - o, "]}");
}

/* The text of generated ids as the server returns it: up to the end-of-text token,
 * invalid UTF-8 replaced. */
static char *ids_text(ac_tokenizer *tk, const int32_t *ids, int n)
{
    int32_t eos = ac_tokenizer_token_to_id(tk, "<|endoftext|>");
    int k = 0;
    while (k < n && ids[k] != eos)
        k++;
    char *raw = NULL;
    size_t len = 0;
    assert_int_equal(ac_tokenizer_decode(tk, ids, (size_t)k, &raw, &len), AC_OK);
    char *clean = srv_utf8_sanitize(raw ? raw : "", len);
    free(raw);
    return clean;
}

static char *post_ids(const int32_t *ids, int n, int max_tokens)
{
    char body[8192];
    ids_json(ids, n, max_tokens, body, sizeof body);
    http_res r = post("/v1/completions", body, NULL);
    if (r.status != 200)
        fail_msg("status %ld: %.300s", r.status, r.body);
    completions_ok++;
    cJSON *o = json_of(&r);
    char *text = strdup(str_at(choice0(o), "text"));
    cJSON_Delete(o);
    res_free(&r);
    return text;
}

/* A prompt that extends what a slot's cache holds (an earlier prompt and its output)
 * continues from the cache; the result is what a fresh run gives. */
static void test_prefix_reuse(void **state)
{
    (void)state;
    ac_tokenizer *tk = NULL;
    assert_int_equal(ac_tokenizer_load(PROSE "/tokenizer.json", &tk), AC_OK);
    const char *prompt = PROMPTS[5];
    int32_t *x = NULL;
    size_t nx = 0;
    assert_int_equal(ac_tokenizer_encode(tk, prompt, strlen(prompt), &x, &nx), AC_OK);
    int32_t ids[512];
    memcpy(ids, x, nx * sizeof *x);
    free(x);
    int n = (int)nx;
    char csv[4096];
    for (int round = 0; round < 3; round++) {
        /* offline: the next 8 ids */
        ids_csv(ids, n, csv, sizeof csv);
        char *out = run_generate_mode(PROSE, csv, 8, 1);
        int32_t gen[8];
        assert_int_equal(parse_ids(out, gen, 8), 8);
        free(out);
        char *want = ids_text(tk, gen, 8);
        /* the server, from the ids so far (round 0 fresh, then a cached prefix) */
        char *got = post_ids(ids, n, 8);
        if (strcmp(got, want))
            fail_msg("round %d: the server gave \"%s\", a fresh run \"%s\"", round, got, want);
        free(got);
        free(want);
        int32_t eos = ac_tokenizer_token_to_id(tk, "<|endoftext|>");
        for (int i = 0; i < 8; i++)
            assert_true(gen[i] != eos); /* (the rounds need a continuation without an end) */
        memcpy(ids + n, gen, sizeof gen);
        n += 8;
    }
    ac_tokenizer_free(tk);
}

static int is_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

static void test_logprobs(void **state)
{
    (void)state;
    const char *prompt = PROMPTS[0];
    const char *ref = ref_text(PROSE, prompt, 24);
    cJSON *o = complete(prompt, 24, "{\"logprobs\": 3}");
    const cJSON *c = choice0(o);
    const char *text = str_at(c, "text");
    assert_string_equal(text, ref);
    assert_string_equal(str_at(c, "finish_reason"), "length");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "logprobs");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
    assert_int_equal(cJSON_GetArraySize(tokens), 24);
    assert_int_equal(cJSON_GetArraySize(values), 24);
    assert_int_equal(cJSON_GetArraySize(tops), 24);
    assert_int_equal(cJSON_GetArraySize(offsets), 24);
    size_t offset = 0;
    char joined[4096] = "";
    for (int i = 0; i < 24; i++) {
        const cJSON *tok = cJSON_GetArrayItem(tokens, i);
        const cJSON *v = cJSON_GetArrayItem(values, i);
        const cJSON *top = cJSON_GetArrayItem(tops, i);
        assert_true(cJSON_IsString(tok));
        assert_true(cJSON_IsNumber(v));
        assert_true(v->valuedouble <= 0);
        assert_true(cJSON_IsObject(top));
        int k = cJSON_GetArraySize(top);
        assert_true(k >= 1 && k <= 3);
        double best = -INFINITY, mass = 0;
        for (const cJSON *alt = top->child; alt; alt = alt->next) {
            assert_true(cJSON_IsNumber(alt));
            assert_true(alt->valuedouble <= 0);
            best = alt->valuedouble > best ? alt->valuedouble : best;
            mass += exp(alt->valuedouble);
        }
        assert_true(mass <= 1.0 + 1e-6);
        /* greedy: the chosen token is the most likely one, and listed */
        assert_true(fabs(best - v->valuedouble) <= 1e-6);
        const cJSON *self = cJSON_GetObjectItemCaseSensitive(top, tok->valuestring);
        assert_true(cJSON_IsNumber(self));
        assert_true(fabs(self->valuedouble - v->valuedouble) <= 1e-6);
        /* offsets count the bytes of the text before each token */
        assert_int_equal((size_t)cJSON_GetArrayItem(offsets, i)->valuedouble, offset);
        offset += strlen(tok->valuestring);
        strncat(joined, tok->valuestring, sizeof joined - strlen(joined) - 1);
    }
    if (is_ascii(ref)) {
        assert_string_equal(joined, ref);
        assert_int_equal(offset, strlen(ref));
    }
    cJSON_Delete(o);

    /* logprobs 0: the chosen token's logprob, no alternatives */
    o = complete(prompt, 4, "{\"logprobs\": 0}");
    lp = cJSON_GetObjectItemCaseSensitive(choice0(o), "logprobs");
    tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(tops), 4);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 0)), 0);
    assert_true(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), 0)->valuedouble <= 0);
    cJSON_Delete(o);
}

static void test_echo(void **state)
{
    (void)state;
    const char *prompt = PROMPTS[1];
    const char *ref = ref_text(PROSE, prompt, 24);
    size_t plen = strlen(prompt);

    /* echo alone: the prompt, then the completion */
    cJSON *o = complete(prompt, 24, "{\"echo\": true}");
    const char *text = str_at(choice0(o), "text");
    assert_int_equal(strncmp(text, prompt, plen), 0);
    assert_string_equal(text + plen, ref);
    cJSON_Delete(o);

    /* echo with logprobs: the prompt's tokens first, the first without a logprob */
    o = complete(prompt, 4, "{\"echo\": true, \"logprobs\": 2}");
    const cJSON *c = choice0(o);
    text = str_at(c, "text");
    assert_int_equal(strncmp(text, prompt, plen), 0);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "logprobs");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
    int n = cJSON_GetArraySize(tokens);
    int32_t *ids = NULL;
    size_t n_prompt = 0;
    ac_tokenizer *tk = NULL;
    assert_int_equal(ac_tokenizer_load(PROSE "/tokenizer.json", &tk), AC_OK);
    assert_int_equal(ac_tokenizer_encode(tk, prompt, plen, &ids, &n_prompt), AC_OK);
    ac_tokenizer_free(tk);
    free(ids);
    assert_int_equal(n, (int)n_prompt + 4);
    assert_int_equal(cJSON_GetArraySize(values), n);
    assert_int_equal(cJSON_GetArraySize(tops), n);
    assert_int_equal(cJSON_GetArraySize(offsets), n);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(values, 0)));
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(tops, 0)));
    char joined[4096] = "";
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *tok = cJSON_GetArrayItem(tokens, i);
        assert_int_equal((size_t)cJSON_GetArrayItem(offsets, i)->valuedouble, offset);
        offset += strlen(tok->valuestring);
        strncat(joined, tok->valuestring, sizeof joined - strlen(joined) - 1);
        if (i == (int)n_prompt - 1)
            assert_string_equal(joined, prompt); /* the prompt's tokens spell the prompt */
        if (i > 0) {
            const cJSON *v = cJSON_GetArrayItem(values, i);
            assert_true(cJSON_IsNumber(v) && v->valuedouble <= 0);
            int k = cJSON_GetArraySize(cJSON_GetArrayItem(tops, i));
            assert_true(k >= 1 && k <= 2);
        }
    }
    assert_string_equal(joined, text);
    /* and the 4 generated tokens begin the greedy reference */
    assert_int_equal(strncmp(text + plen, ref, strlen(text + plen)), 0);
    assert_true(strlen(text) > plen);
    cJSON_Delete(o);
}

/* Streamed echo: the prompt comes once, first, then the completion; with logprobs the
 * prompt's tokens come once too, the first without a logprob. */
static int count_stream_tokens(const char *body, int *first_is_null)
{
    int n = 0;
    *first_is_null = -1;
    for (const char *p = strstr(body, "data: {"); p; p = strstr(p + 1, "data: {")) {
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        cJSON *o = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        assert_non_null(o);
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "logprobs");
        const cJSON *values = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
        for (int i = 0; i < cJSON_GetArraySize(values); i++, n++)
            if (n == 0)
                *first_is_null = cJSON_IsNull(cJSON_GetArrayItem(values, i));
        cJSON_Delete(o);
    }
    return n;
}

static void test_stream_echo(void **state)
{
    (void)state;
    const char *prompt = PROMPTS[1];
    const char *ref = ref_text(PROSE, prompt, 24);
    size_t plen = strlen(prompt);
    sse_result s = stream(prompt, 24, "\"echo\": true");
    if (strncmp(s.text, prompt, plen) || strcmp(s.text + plen, ref))
        fail_msg("streamed echo: \"%s\", want \"%s\" + \"%s\"", s.text, prompt, ref);
    free(s.text);

    char *body = completion_body(prompt, 4, "{\"stream\": true, \"echo\": true, \"logprobs\": 1}");
    http_res r = post("/v1/completions", body, NULL);
    free(body);
    assert_int_equal(r.status, 200);
    completions_ok++;
    s = parse_sse(r.body);
    assert_true(s.done);
    assert_int_equal(strncmp(s.text, prompt, plen), 0);
    assert_int_equal(strncmp(s.text + plen, ref, strlen(s.text + plen)), 0);
    int32_t *ids = NULL;
    size_t n_prompt = 0;
    ac_tokenizer *tk = NULL;
    assert_int_equal(ac_tokenizer_load(PROSE "/tokenizer.json", &tk), AC_OK);
    assert_int_equal(ac_tokenizer_encode(tk, prompt, plen, &ids, &n_prompt), AC_OK);
    ac_tokenizer_free(tk);
    free(ids);
    int first_is_null = -1;
    int n = count_stream_tokens(r.body, &first_is_null);
    if (n != (int)n_prompt + 4)
        fail_msg("the stream's logprobs cover %d tokens, want %zu of the prompt and 4 generated", n, n_prompt);
    assert_int_equal(first_is_null, 1);
    free(s.text);
    res_free(&r);
}

static void test_stop(void **state)
{
    (void)state;
    const char *prompt = PROMPTS[0];
    const char *ref = ref_text(PROSE, prompt, 24);
    size_t len = strlen(ref);
    assert_true(len >= 12);
    /* three bytes from the middle; its first occurrence is where the text ends */
    char stop[4];
    memcpy(stop, ref + len / 2, 3);
    stop[3] = 0;
    size_t cut = (size_t)(strstr(ref, stop) - ref);
    char *want = strndup(ref, cut);
    char extra[256];
    cJSON *s = cJSON_CreateString(stop);
    char *quoted = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    snprintf(extra, sizeof extra, "{\"stop\": [\"zzzzqqq\", %s]}", quoted);
    cJSON *o = complete(prompt, 24, extra);
    assert_string_equal(str_at(choice0(o), "text"), want);
    assert_string_equal(str_at(choice0(o), "finish_reason"), "stop");
    cJSON_Delete(o);

    /* streamed: nothing of the stop string leaks out before it is recognised */
    snprintf(extra, sizeof extra, "\"stop\": %s", quoted);
    sse_result r = stream(prompt, 24, extra);
    assert_string_equal(r.text, want);
    assert_string_equal(r.finish, "stop");
    free(r.text);

    /* a stop that never comes changes nothing */
    o = complete(prompt, 24, "{\"stop\": \"\\u0001\\u0002\"}");
    assert_string_equal(str_at(choice0(o), "text"), ref);
    assert_string_equal(str_at(choice0(o), "finish_reason"), "length");
    cJSON_Delete(o);
    free(quoted);
    free(want);
}

/* ---- errors and hostile input ---- */

static void bad_completion(const char *body, long status, const char *code)
{
    http_res r = post("/v1/completions", body, NULL);
    /* what the server answered, for the metrics check (whatever this test concludes) */
    completions_400 += r.status == 400;
    completions_ok += r.status == 200;
    expect_error_free(&r, status, "invalid_request_error", code);
}

static void test_errors(void **state)
{
    (void)state;
    bad_completion("{\"prompt\": \"a\",", 400, "invalid_json");
    bad_completion("not json at all", 400, "invalid_json");
    bad_completion("", 400, "invalid_json");
    bad_completion("[1, 2]", 400, NULL);
    bad_completion("{\"prompt\": 5}", 400, "invalid_type");
    bad_completion("{\"prompt\": \"a\", \"max_tokens\": \"10\"}", 400, "invalid_type");
    bad_completion("{\"prompt\": \"a\", \"temperature\": 9}", 400, "invalid_value");
    bad_completion("{\"prompt\": \"a\", \"n\": 4}", 400, NULL);
    bad_completion("{\"prompt\": \"a\", \"tools\": []}", 400, "unknown_parameter");
    bad_completion("{\"prompt\": [5, 99999]}", 400, NULL);

    /* deeply nested JSON is refused, not recursed into without end */
    enum { DEPTH = 100000 };
    char *deep = malloc(2 * DEPTH + 16);
    memset(deep, '[', DEPTH);
    memset(deep + DEPTH, ']', DEPTH);
    deep[2 * DEPTH] = 0;
    bad_completion(deep, 413, "request_too_large"); /* 200 KB: over the limit first */
    deep[0] = '[';
    memset(deep, '[', 20000);
    memset(deep + 20000, ']', 20000);
    deep[40000] = 0;
    bad_completion(deep, 400, "invalid_json");
    free(deep);

    /* the prompt alone is longer than the context */
    char *ids = malloc(8 * (CONTEXT + 100) + 64);
    int n = sprintf(ids, "{\"max_tokens\": 1, \"prompt\": [");
    for (int i = 0; i < CONTEXT + 100; i++)
        n += sprintf(ids + n, "%s%d", i ? "," : "", 10 + i % 1000);
    sprintf(ids + n, "]}");
    bad_completion(ids, 400, "context_length_exceeded");
    free(ids);

    /* a body over max_body_bytes: 413 with a Content-Length and without one */
    size_t big = MAX_BODY + 100;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    memcpy(body, "{\"prompt\": \"", 12);
    memset(body + 12, 'a', big - 20);
    memcpy(body + big - 8, "\"}      ", 8);
    body[big] = 0;
    http_res r = post("/v1/completions", body, NULL);
    char *message = expect_error(&r, 413, "invalid_request_error", "request_too_large");
    assert_non_null(strstr(message, "65536"));
    free(message);
    http_req chunked = {.method = "POST", .path = "/v1/completions", .body = body, .chunked = 1};
    r = http(&chunked);
    expect_error_free(&r, 413, "invalid_request_error", "request_too_large");
    free(body);
    /* a body just under the limit is read (and here refused for its content) */
    body = malloc(MAX_BODY);
    memset(body, ' ', MAX_BODY - 1);
    memcpy(body, "{\"prompt\": 1}", 13);
    body[MAX_BODY - 1] = 0;
    chunked.body = body;
    r = http(&chunked);
    expect_error_free(&r, 400, "invalid_request_error", "invalid_type");
    completions_400++;
    free(body);

    /* paths and methods */
    r = get("/v2/completions", NULL);
    expect_error_free(&r, 404, "not_found_error", NULL);
    r = post("/v1/chat/completions", "{}", NULL);
    expect_error_free(&r, 404, "not_found_error", NULL);
    r = get("/", NULL);
    expect_error_free(&r, 404, "not_found_error", NULL);
    r = get("/v1/completions", NULL);
    message = expect_error(&r, 405, "invalid_request_error", NULL);
    assert_non_null(strstr(message, "POST"));
    free(message);
    r = post("/health", "{}", NULL);
    expect_error_free(&r, 405, "invalid_request_error", NULL);
    http_req del = {.method = "DELETE", .path = "/v1/models"};
    r = http(&del);
    expect_error_free(&r, 405, "invalid_request_error", NULL);

    /* JSON text is UTF-8: raw invalid bytes are refused, naming the byte */
    r = post("/v1/completions", "{\"prompt\": \"ab\xe2\x82 z\", \"max_tokens\": 1}", NULL);
    completions_400++;
    message = expect_error(&r, 400, "invalid_request_error", "invalid_encoding");
    assert_non_null(strstr(message, "not valid UTF-8"));
    assert_non_null(strstr(message, "byte 14"));
    free(message);
    bad_completion("{\"prompt\": \"\xff\"}", 400, "invalid_encoding");
    bad_completion("{\"prompt\": \"\xed\xa0\x80\"}", 400, "invalid_encoding"); /* a surrogate */
    r = post("/admin/swap", "{\"model_path\": \"\xc0\xaf\"}", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    /* \u0000 would cut a string short: refused, wherever it is; an escaped backslash
     * before "u0000" is text, and so is the six-character escape spelled out in text */
    r = post("/v1/completions", "{\"prompt\": \"a\\u0000b\", \"max_tokens\": 1}", NULL);
    completions_400++;
    message = expect_error(&r, 400, "invalid_request_error", "invalid_encoding");
    assert_non_null(strstr(message, "\\u0000"));
    free(message);
    bad_completion("{\"prompt\": \"a\", \"stop\": [\"\\u0000\"], \"max_tokens\": 1}", 400, "invalid_encoding");
    r = post("/admin/swap", "{\"model_path\": \"/tmp/a\\u0000/etc\"}", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    r = post("/v1/completions", "{\"prompt\": \"a\\\\u0000b\", \"max_tokens\": 1, \"echo\": true}", NULL);
    assert_int_equal(r.status, 200);
    completions_ok++;
    cJSON *o = json_of(&r);
    assert_int_equal(strncmp(str_at(choice0(o), "text"), "a\\u0000b", 8), 0);
    cJSON_Delete(o);
    res_free(&r);

    /* a model that is not served is not answered by the one that is */
    r = post("/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1, \"model\": \"gpt-4\"}", NULL);
    message = expect_error(&r, 404, "invalid_request_error", "model_not_found");
    assert_non_null(strstr(message, "'gpt-4'"));
    assert_non_null(strstr(message, "'prose'"));
    free(message);
    r = post("/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1, \"model\": \"prose\"}", NULL);
    assert_int_equal(r.status, 200);
    completions_ok++;
    res_free(&r);

    /* after all of it the server still serves */
    expect_greedy(PROSE, PROMPTS[2], 24);
    r = get("/health", NULL);
    assert_int_equal(r.status, 200);
    res_free(&r);
}

/* A client that hangs up in the middle of a stream frees its slot. */
static int hang_up(void *user, const char *data, size_t len)
{
    (void)data, (void)len;
    int *chunks = user;
    return ++*chunks < 2;
}

static void test_client_goes_away(void **state)
{
    (void)state;
    char *body = completion_body(PROMPTS[3], 400, "{\"stream\": true}");
    int chunks = 0;
    http_req q = {.method = "POST", .path = "/v1/completions", .body = body, .hook = hang_up, .user = &chunks};
    http_res r = http(&q);
    assert_int_equal(r.curl, CURLE_WRITE_ERROR);
    assert_int_equal(r.status, 200);
    res_free(&r);
    free(body);
    completions_ok++; /* counted as a 200 when the stream started */
    double t0 = now_s();
    for (;;) {
        cJSON *o = admin_status();
        int active = cJSON_GetObjectItemCaseSensitive(o, "active_slots")->valueint;
        cJSON_Delete(o);
        if (active == 0)
            break;
        if (now_s() - t0 > 60)
            fail_msg("the abandoned stream still holds a slot");
        msleep(20);
    }
    expect_greedy(PROSE, PROMPTS[3], 24);
}

/* A client that stops waiting for a whole completion: its request is cancelled (counted
 * 499, the server's generation stops well short of max_tokens). */
static double metric(const char *series);

static void test_unread_completion_is_cancelled(void **state)
{
    (void)state;
    double generated = metric("autocompress_generation_tokens_total");
    double closed = fmax(0, metric("autocompress_requests_total{endpoint=\"/v1/completions\",status=\"499\"}"));
    enum { WANT = CONTEXT - 32 };
    char *body = completion_body(PROMPTS[1], WANT, "{\"stop\": [\"never-in-the-text\"]}");
    http_req q = {.method = "POST", .path = "/v1/completions", .body = body, .timeout_ms = 50};
    http_res r = http(&q);
    assert_int_equal(r.curl, CURLE_OPERATION_TIMEDOUT);
    res_free(&r);
    free(body);
    double t0 = now_s();
    while (metric("autocompress_requests_total{endpoint=\"/v1/completions\",status=\"499\"}") < closed + 1) {
        if (now_s() - t0 > 60)
            fail_msg("the abandoned completion was never cancelled");
        msleep(20);
    }
    double made = metric("autocompress_generation_tokens_total") - generated;
    printf("abandoned after 50 ms: %.0f of %d tokens generated\n", made, WANT);
    assert_true(made < WANT);
    expect_greedy(PROSE, PROMPTS[1], 24);
}

/* A raw client that sends its whole request before it reads the answer, as Python's
 * http.client does: the answer (malloc'd), or NULL when the connection broke first. */
static int send_all(int fd, const char *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            return 0;
        off += (size_t)n;
    }
    return 1;
}

static char *raw_exchange(const char *head, const char *body, size_t body_len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || !send_all(fd, head, strlen(head)) ||
        !send_all(fd, body, body_len)) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    for (ssize_t n; out && (n = recv(fd, out + len, cap - len - 1, 0)) > 0;) {
        len += (size_t)n;
        if (len + 1 == cap)
            out = realloc(out, cap *= 2);
    }
    close(fd);
    if (out)
        out[len] = 0;
    return len ? out : (free(out), NULL);
}

static void test_oversized_body_is_answered(void **state)
{
    (void)state;
    /* far more than the limit and than loopback's socket buffers hold */
    size_t big = 16u << 20;
    char *body = malloc(big);
    assert_non_null(body);
    memset(body, 'a', big);
    char head[256];
    snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", big);
    char *answer = raw_exchange(head, body, big);
    free(body);
    if (!answer)
        fail_msg("the connection broke before the answer");
    assert_int_equal(strncmp(answer, "HTTP/1.1 413", 12), 0);
    assert_non_null(strstr(answer, "request_too_large"));
    free(answer);
    /* announced beyond what is worth reading: answered before the body is sent */
    snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000000\r\n\r\n");
    answer = raw_exchange(head, NULL, 0);
    if (!answer)
        fail_msg("no answer to a body announced at 1 GB");
    assert_int_equal(strncmp(answer, "HTTP/1.1 413", 12), 0);
    free(answer);
    expect_greedy(PROSE, PROMPTS[0], 8);
}

static void test_admin_auth(void **state)
{
    (void)state;
    http_res r = get("/admin/status", NULL);
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", "Bearer wrong-token");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", "Bearer test-toke");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", "Bearer test-tokenX");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", "Bearer ");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", "Basic dGVzdC10b2tlbg==");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/status", TOKEN);
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = post("/admin/swap", "{\"model_path\": \"" CODE "\"}", "Bearer nope");
    expect_error_free(&r, 401, "authentication_error", NULL);
    r = get("/admin/workload", NULL);
    expect_error_free(&r, 401, "authentication_error", NULL);

    cJSON *o = admin_status();
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    assert_string_equal(str_at(m, "name"), "prose");
    assert_string_equal(str_at(m, "path"), PROSE);
    assert_string_equal(str_at(o, "state"), "serving");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "slots")->valueint, 4);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "swaps")), 0);
    cJSON_Delete(o);

    /* a swap body that is not one */
    r = post("/admin/swap", "{\"model_path\": 5}", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    r = post("/admin/swap", "not json", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    r = post("/admin/swap", "{\"model_path\": \"" CODE "\", \"drain_first\": \"yes\"}", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    o = admin_status();
    assert_string_equal(str_at(cJSON_GetObjectItemCaseSensitive(o, "model"), "name"), "prose");
    cJSON_Delete(o);
}

/* A second server beside the main one, with its own config. */
typedef struct {
    srv_metrics *metrics;
    srv_server *server;
    srv_http *http;
    int port;
} second_server;

static void second_start(second_server *x, const srv_config *c)
{
    memset(x, 0, sizeof *x);
    assert_int_equal(srv_metrics_create(c->slots, &x->metrics), AC_OK);
    assert_int_equal(srv_server_create(c, x->metrics, &x->server), AC_OK);
    assert_int_equal(srv_http_start(x->server, x->metrics, NULL, NULL, &x->http, &x->port), AC_OK);
    assert_true(x->port > 0 && x->port != port);
}

static void second_stop(second_server *x)
{
    srv_server_stop(x->server);
    srv_http_stop(x->http);
    srv_server_free(x->server);
    srv_metrics_free(x->metrics);
}

/* A server whose config has no admin token: admin answers 403; before its model loads
 * /health is 503 and completions are refused. */
static void test_admin_disabled(void **state)
{
    (void)state;
    srv_config c = cfg;
    c.admin_token[0] = 0;
    second_server x;
    second_start(&x, &c);
    int p2 = x.port;
    const char *paths[] = {"/admin/status", "/admin/workload"};
    for (int i = 0; i < 2; i++) {
        http_req q = {.path = paths[i], .auth = BEARER, .port = p2};
        http_res r = http(&q);
        expect_error_free(&r, 403, "permission_error", NULL);
        q.auth = NULL;
        r = http(&q);
        expect_error_free(&r, 403, "permission_error", NULL);
    }
    http_req q = {.method = "POST", .path = "/admin/swap", .body = "{\"model_path\": \"" PROSE "\"}", .auth = BEARER,
                  .port = p2};
    http_res r = http(&q);
    expect_error_free(&r, 403, "permission_error", NULL);
    http_req health = {.path = "/health", .port = p2};
    r = http(&health);
    assert_int_equal(r.status, 503);
    cJSON *o = json_of(&r);
    assert_string_equal(str_at(o, "status"), "loading");
    cJSON_Delete(o);
    res_free(&r);
    http_req completion = {.method = "POST", .path = "/v1/completions", .body = "{\"prompt\": \"a\"}", .port = p2};
    r = http(&completion);
    expect_error_free(&r, 503, "server_error", NULL);
    second_stop(&x);
}

/* ---- swaps ---- */

static char nan_dir[64];

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* The prose checkpoint with every weight NaN: it loads, and its logits are not finite. */
static void make_nan_checkpoint(void)
{
    snprintf(nan_dir, sizeof nan_dir, "/tmp/ac_nan_model_XXXXXX");
    assert_non_null(mkdtemp(nan_dir));
    ac_model *m = NULL;
    assert_int_equal(ac_model_load(PROSE, &m), AC_OK);
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        for (size_t k = 0; k < p->count; k++)
            p->data[k] = NAN;
    }
    assert_int_equal(ac_model_save(m, nan_dir, AC_DTYPE_F32), AC_OK);
    ac_model_free(m);
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", nan_dir);
    copy_file(PROSE "/tokenizer.json", path);
}

static void remove_nan_checkpoint(void)
{
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", nan_dir, files[i]);
        unlink(path);
    }
    rmdir(nan_dir);
}

/* The last entry of /admin/status's "swaps". */
static void expect_last_swap(const char *path, int ok, int drain_first)
{
    cJSON *o = admin_status();
    const cJSON *swaps = cJSON_GetObjectItemCaseSensitive(o, "swaps");
    int n = cJSON_GetArraySize(swaps);
    assert_true(n >= 1);
    const cJSON *last = cJSON_GetArrayItem(swaps, n - 1);
    assert_string_equal(str_at(last, "model_path"), path);
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(last, "ok")), ok);
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(last, "drain_first")), drain_first);
    cJSON_Delete(o);
}

static const char *const CODE_PROMPTS[] = {"def parse_args(", "import os\n\nclass "};

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, released;
} gate;

/* Holds the stream's first piece until the test lets it go. */
static int hold_first(void *user, const char *data, size_t len)
{
    (void)data, (void)len;
    gate *g = user;
    pthread_mutex_lock(&g->mu);
    if (!g->started) {
        g->started = 1;
        pthread_cond_broadcast(&g->cv);
        while (!g->released)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return 1;
}

typedef struct {
    http_req req;
    http_res res;
} call;

static void *run_call(void *arg)
{
    call *c = arg;
    c->res = http(&c->req);
    return NULL;
}

static void test_swaps(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        ref_text(CODE, CODE_PROMPTS[i], 24);
    ref_text(CODE, CODE_PROMPTS[0], 64);
    ref_text(PROSE, PROMPTS[4], 24);

    /* to the code model */
    http_res r = swap_to(CODE, 0);
    if (r.status != 200)
        fail_msg("swap: %ld %.300s", r.status, r.body);
    cJSON *o = json_of(&r);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok")));
    assert_string_equal(str_at(o, "model_path"), CODE);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "generation")->valueint, 2);
    cJSON_Delete(o);
    res_free(&r);
    for (int i = 0; i < 2; i++)
        expect_greedy(CODE, CODE_PROMPTS[i], 24);
    o = admin_status();
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    assert_string_equal(str_at(m, "name"), "code");
    assert_string_equal(str_at(m, "path"), CODE);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "generation")->valueint, 2);
    cJSON_Delete(o);
    expect_last_swap(CODE, 1, 0);
    r = get("/v1/models", NULL);
    o = json_of(&r);
    assert_string_equal(str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0), "id"), "code");
    cJSON_Delete(o);
    res_free(&r);

    /* to a directory that is not there: 422 naming it, the code model still serves */
    const char *missing = "/nonexistent/autocompress/model-dir";
    r = swap_to(missing, 0);
    char *message = expect_error(&r, 422, "invalid_request_error", NULL);
    if (!strstr(message, missing))
        fail_msg("the message does not name the path: %s", message);
    free(message);
    expect_last_swap(missing, 0, 0);
    expect_greedy(CODE, CODE_PROMPTS[0], 24);

    /* to a checkpoint whose weights are NaN: 422, non-finite logits */
    make_nan_checkpoint();
    r = swap_to(nan_dir, 0);
    message = expect_error(&r, 422, "invalid_request_error", NULL);
    remove_nan_checkpoint();
    if (!strstr(message, "non-finite"))
        fail_msg("the message does not say non-finite: %s", message);
    free(message);
    expect_last_swap(nan_dir, 0, 0);
    expect_greedy(CODE, CODE_PROMPTS[1], 24);
    o = admin_status();
    assert_string_equal(str_at(cJSON_GetObjectItemCaseSensitive(o, "model"), "name"), "code");
    cJSON_Delete(o);

    /* drain first, back to prose, while a stream runs on the code model; a swap issued
     * while that one runs is refused with 409 */
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    char *body = completion_body(CODE_PROMPTS[0], 64, "{\"stream\": true}");
    call streaming = {{.method = "POST", .path = "/v1/completions", .body = body, .hook = hold_first, .user = &g},
                      {0}};
    pthread_t t_stream, t_swap;
    assert_int_equal(pthread_create(&t_stream, NULL, run_call, &streaming), 0);
    pthread_mutex_lock(&g.mu);
    double t0 = now_s();
    while (!g.started && now_s() - t0 < 120) {
        pthread_mutex_unlock(&g.mu);
        msleep(2);
        pthread_mutex_lock(&g.mu);
    }
    int started = g.started;
    pthread_mutex_unlock(&g.mu);
    char swap_body[SRV_PATH_MAX + 64];
    snprintf(swap_body, sizeof swap_body, "{\"model_path\": \"%s\", \"drain_first\": true}", PROSE);
    call swapping = {{.method = "POST", .path = "/admin/swap", .body = swap_body, .auth = BEARER}, {0}};
    int saw_draining = 0;
    http_res conflict = {0};
    if (started) {
        assert_int_equal(pthread_create(&t_swap, NULL, run_call, &swapping), 0);
        t0 = now_s();
        while (!saw_draining && now_s() - t0 < 60) {
            http_res s = get("/admin/status", BEARER);
            cJSON *st = cJSON_Parse(s.body);
            const cJSON *state_v = cJSON_GetObjectItemCaseSensitive(st, "state");
            saw_draining = cJSON_IsString(state_v) && !strcmp(state_v->valuestring, "draining");
            cJSON_Delete(st);
            res_free(&s);
        }
        if (saw_draining) {
            char second[SRV_PATH_MAX + 64];
            snprintf(second, sizeof second, "{\"model_path\": \"%s\"}", CODE);
            conflict = post("/admin/swap", second, BEARER);
        }
    }
    pthread_mutex_lock(&g.mu);
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(t_stream, NULL);
    if (started)
        pthread_join(t_swap, NULL);
    free(body);
    assert_true(started);
    assert_true(saw_draining);
    message = expect_error(&conflict, 409, "conflict_error", "swap_in_progress");
    free(message);
    /* the stream ran to its end on the code model */
    assert_int_equal(streaming.res.curl, CURLE_OK);
    assert_int_equal(streaming.res.status, 200);
    completions_ok++;
    sse_result s = parse_sse(streaming.res.body);
    res_free(&streaming.res);
    assert_true(s.done);
    assert_true(s.finish[0] != 0);
    assert_string_equal(s.text, ref_text(CODE, CODE_PROMPTS[0], 64));
    free(s.text);
    if (swapping.res.status != 200)
        fail_msg("drain-first swap: %ld %.300s", swapping.res.status, swapping.res.body);
    o = json_of(&swapping.res);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "drain_first")));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "generation")->valueint, 3);
    cJSON_Delete(o);
    res_free(&swapping.res);
    expect_last_swap(PROSE, 1, 1);
    /* prose again */
    expect_greedy(PROSE, PROMPTS[4], 24);
    o = admin_status();
    m = cJSON_GetObjectItemCaseSensitive(o, "model");
    assert_string_equal(str_at(m, "name"), "prose");
    assert_string_equal(str_at(o, "state"), "serving");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "swaps")), 4);
    /* the code model is gone once nothing holds it */
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "models_loaded")->valueint, 1);
    cJSON_Delete(o);
}

/* A body is one JSON value: anything but white space after it is a 400, for a
 * completion and for a swap (here to a path that does not exist, so that accepting it
 * changes nothing but the answer). */
/* The limits a user sets: per-request max_tokens and prompt length (400 naming the
 * setting), the queue (429 with Retry-After) and concurrent connections (one over the
 * limit is refused; served again once one closes). */
/* A connection that sends nothing (it counts against max_connections all the same). */
static int connect_idle(int to_port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void test_limits(void **state)
{
    (void)state;
    enum { CONNECTIONS = 6, CALLS = 5 };
    srv_config c = cfg;
    c.slots = 1;
    c.max_queue = 1;
    c.max_connections = CONNECTIONS;
    c.max_tokens_limit = 200;
    c.max_prompt_tokens = 8;
    second_server x;
    second_start(&x, &c);
    int p2 = x.port;
    assert_int_equal(srv_server_load_initial(x.server, PROSE), AC_OK);

    http_req q = {.method = "POST", .path = "/v1/completions", .port = p2,
                  .body = "{\"prompt\": \"a\", \"max_tokens\": 201}"};
    http_res r = http(&q);
    char *message = expect_error(&r, 400, "invalid_request_error", "invalid_value");
    assert_non_null(strstr(message, "max_tokens_limit"));
    free(message);
    q.body = "{\"prompt\": [1, 2, 3, 4, 5, 6, 7, 8, 9], \"max_tokens\": 1}";
    r = http(&q);
    message = expect_error(&r, 400, "invalid_request_error", "prompt_too_long");
    assert_non_null(strstr(message, "9 tokens"));
    assert_non_null(strstr(message, "max_prompt_tokens"));
    free(message);
    q.body = "{\"prompt\": [1, 2, 3, 4, 5, 6, 7, 8], \"max_tokens\": 1}";
    r = http(&q);
    assert_int_equal(r.status, 200);
    res_free(&r);

    /* one slot and one place in the queue: of five at once, some wait their turn and the
     * rest are told when to come back; every one is one or the other */
    call calls[CALLS];
    pthread_t threads[CALLS];
    for (int i = 0; i < CALLS; i++) {
        calls[i].req = (http_req){.method = "POST", .path = "/v1/completions", .port = p2,
                                  .body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 200, \"temperature\": 0}"};
        assert_int_equal(pthread_create(&threads[i], NULL, run_call, &calls[i]), 0);
    }
    int served = 0, told = 0;
    for (int i = 0; i < CALLS; i++) {
        pthread_join(threads[i], NULL);
        if (calls[i].res.status == 429) {
            assert_string_equal(calls[i].res.retry_after, "1");
            expect_error_free(&calls[i].res, 429, "rate_limit_error", "queue_full");
            told++;
        } else {
            assert_int_equal(calls[i].res.status, 200);
            res_free(&calls[i].res);
            served++;
        }
    }
    printf("queue of one: %d served, %d told to retry\n", served, told);
    assert_true(served >= 1 && told >= 1);

    /* every connection taken (idle ones count): the next is refused. The calls' own
     * connections may still count for a moment, so an idle one the server closed at
     * once is opened again. */
    int idle[CONNECTIONS], held = 0;
    double t_open = now_s();
    while (held < CONNECTIONS) {
        int fd = connect_idle(p2);
        msleep(50);
        char byte;
        if (fd >= 0 && recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) < 0)
            idle[held++] = fd; /* nothing to read and not closed: held */
        else if (fd >= 0)
            close(fd);
        if (now_s() - t_open > 20)
            fail_msg("could not hold %d connections", CONNECTIONS);
    }
    http_req health = {.path = "/health", .port = p2, .timeout_ms = 5000};
    r = http(&health);
    assert_true(r.curl != CURLE_OK && r.status == 0);
    res_free(&r);
    close(idle[0]);
    double t0 = now_s();
    for (;;) {
        r = http(&health);
        int ok = r.status == 200;
        res_free(&r);
        if (ok)
            break;
        if (now_s() - t0 > 10)
            fail_msg("a freed connection was not served again");
        msleep(20);
    }
    for (int i = 1; i < CONNECTIONS; i++)
        close(idle[i]);
    second_stop(&x);
}

static void test_trailing_data(void **state)
{
    (void)state;
    bad_completion("{\"prompt\": \"a\", \"max_tokens\": 1} {\"prompt\": \"b\"}", 400, "invalid_json");
    bad_completion("{\"prompt\": \"a\", \"max_tokens\": 1}]", 400, "invalid_json");
    http_res r = post("/admin/swap", "{\"model_path\": \"/nonexistent/trailing\"} x", BEARER);
    expect_error_free(&r, 400, "invalid_request_error", NULL);
    /* white space after the value is fine */
    r = post("/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1}\r\n", NULL);
    assert_int_equal(r.status, 200);
    completions_ok++;
    res_free(&r);
}

/* ---- metrics and workload ---- */

/* The value of the sample line `series value`, or -1 when there is none. */
static double sample(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, series, len) && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    return -1;
}

/* One series of /metrics now, or -1. */
static double metric(const char *series)
{
    http_res r = get("/metrics", NULL);
    double v = r.status == 200 ? sample(r.body, series) : -1;
    res_free(&r);
    return v;
}

static void test_metrics(void **state)
{
    (void)state;
    http_res r = get("/metrics", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.content_type, "text/plain"));
    double ok = sample(r.body, "autocompress_requests_total{endpoint=\"/v1/completions\",status=\"200\"}");
    double bad = sample(r.body, "autocompress_requests_total{endpoint=\"/v1/completions\",status=\"400\"}");
    double unauthorized = sample(r.body, "autocompress_requests_total{endpoint=\"/admin/status\",status=\"401\"}");
    double swaps_ok = sample(r.body, "autocompress_swaps_total{result=\"ok\"}");
    double swaps_failed = sample(r.body, "autocompress_swaps_total{result=\"failed\"}");
    if (ok < completions_ok)
        fail_msg("%g completions counted, %d sent", ok, completions_ok);
    if (bad < completions_400)
        fail_msg("%g bad requests counted, %d sent", bad, completions_400);
    assert_true(unauthorized >= 7);
    assert_true(swaps_ok >= 2);
    assert_true(swaps_failed >= 2);
    res_free(&r);
}

static void test_workload(void **state)
{
    (void)state;
    http_res r = get("/admin/workload", BEARER);
    assert_int_equal(r.status, 200);
    cJSON *o = json_of(&r);
    assert_true(cJSON_IsObject(o));
    assert_true(cJSON_GetArraySize(o) > 0);
    cJSON_Delete(o);
    res_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_models),
        cmocka_unit_test(test_greedy_matches_cli),
        cmocka_unit_test(test_stream_matches_cli),
        cmocka_unit_test(test_concurrent_batching),
        cmocka_unit_test(test_prefix_reuse),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_stream_echo),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_client_goes_away),
        cmocka_unit_test(test_unread_completion_is_cancelled),
        cmocka_unit_test(test_oversized_body_is_answered),
        cmocka_unit_test(test_admin_auth),
        cmocka_unit_test(test_admin_disabled),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_swaps),
        cmocka_unit_test(test_trailing_data),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_workload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
