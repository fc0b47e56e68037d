/* The OpenAI completions API: parsing and validating a request body, formatting the
 * response, its stream chunks and errors.
 *
 * Accepted fields: model (a string; the server serves one model and echoes its own
 * name), prompt (a string, an array of token ids, or an array holding one string),
 * max_tokens, temperature [0, 2], top_p (0, 1], seed, stop (a string or up to 4),
 * stream, stream_options.include_usage, logprobs [0, 20], echo; n and best_of only as 1,
 * presence_penalty and frequency_penalty only as 0, user and suffix (null) are
 * accepted and ignored. Anything else is a 400 naming the field, as is a wrong type or
 * value. Logprobs are of the model's distribution (before temperature); text_offset
 * counts bytes of the returned text. */
#include "server/srv.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/clock.h"
#include "autocompress/probe.h"
#include "util/rng.h"

static void set_error(srv_error *err, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void set_error(srv_error *err, int status, const char *type, const char *code, const char *fmt, ...)
{
    err->status = status;
    err->type = type;
    err->code = code;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, args);
    va_end(args);
}

#define INVALID(err, code, ...) set_error(err, 400, "invalid_request_error", code, __VA_ARGS__)

srv_request *srv_request_new(void)
{
    srv_request *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    pthread_mutex_init(&req->mu, NULL);
    pthread_cond_init(&req->cv, NULL);
    req->logprobs = -1;
    return req;
}

void srv_request_free(srv_request *req)
{
    if (!req)
        return;
    free(req->prompt_text);
    free(req->prompt);
    for (int i = 0; i < req->n_stop; i++)
        free(req->stop[i]);
    free(req->tokens);
    free(req->prompt_tokens);
    free(req->text);
    pthread_mutex_destroy(&req->mu);
    pthread_cond_destroy(&req->cv);
    free(req);
}

/* ---- parsing ---- */

/* JSON text is UTF-8, and cJSON's strings end at a \u0000: where the body breaks
 * either (a 400 with the byte), or -1. */
static long text_problem(const char *body, size_t len, const char **what)
{
    size_t valid = srv_utf8_valid_prefix(body, len);
    if (valid < len) {
        *what = "the body is not valid UTF-8 (JSON text is UTF-8)";
        return (long)valid;
    }
    *what = "the body holds \\u0000, which no string here may contain";
    return srv_json_nul_escape(body, len);
}

/* One JSON value and nothing after it (whitespace aside), of text already checked. */
static cJSON *parse_one_value(const char *body, size_t len, size_t *error_at)
{
    const char *end = NULL; /* cJSON sets it to where parsing stopped, or failed */
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!end || end < body || end > body + len)
        end = body + len;
    while (root && end < body + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
        end++;
    if (root && end != body + len) { /* a second value or garbage after the first */
        cJSON_Delete(root);
        root = NULL;
    }
    if (error_at)
        *error_at = (size_t)(end - body);
    return root;
}

cJSON *srv_json_parse_whole(const char *body, size_t len, size_t *error_at)
{
    const char *what;
    long bad = text_problem(body, len, &what);
    if (bad >= 0) {
        if (error_at)
            *error_at = (size_t)bad;
        return NULL;
    }
    return parse_one_value(body, len, error_at);
}

static int get_int(const cJSON *v, const char *name, long long min, long long max, long long *out, srv_error *err)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        INVALID(err, "invalid_type", "'%s' must be an integer", name);
        return 0;
    }
    if (v->valuedouble < (double)min || v->valuedouble > (double)max) {
        INVALID(err, "invalid_value", "'%s' must be between %lld and %lld, got %.17g", name, min, max, v->valuedouble);
        return 0;
    }
    *out = (long long)v->valuedouble;
    return 1;
}

static int get_number(const cJSON *v, const char *name, double min, double max, int min_open, double *out,
                      srv_error *err)
{
    if (!cJSON_IsNumber(v)) {
        INVALID(err, "invalid_type", "'%s' must be a number", name);
        return 0;
    }
    double x = v->valuedouble;
    if (!(x <= max) || x < min || (min_open && x == min)) {
        INVALID(err, "invalid_value", "'%s' must be in %s%g, %g], got %.17g", name, min_open ? "(" : "[", min, max, x);
        return 0;
    }
    *out = x;
    return 1;
}

static int get_bool(const cJSON *v, const char *name, int *out, srv_error *err)
{
    if (!cJSON_IsBool(v)) {
        INVALID(err, "invalid_type", "'%s' must be true or false", name);
        return 0;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

static int parse_prompt(const cJSON *v, srv_request *req, const srv_model *model, srv_error *err)
{
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(cJSON_GetArrayItem(v, 0)))
        v = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring), n = 0;
        req->prompt_text = strdup(v->valuestring);
        if (!req->prompt_text) {
            set_error(err, 500, "server_error", NULL, "out of memory");
            return 0;
        }
        if (ac_tokenizer_encode(model->tokenizer, v->valuestring, len, &req->prompt, &n) != AC_OK) {
            INVALID(err, "invalid_value", "'prompt' cannot be tokenized: %s", ac_error_message());
            return 0;
        }
        req->n_prompt = (int)n;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if (n > 0 && !cJSON_IsNumber(cJSON_GetArrayItem(v, 0))) {
            INVALID(err, "invalid_value", "'prompt' holds one prompt per request (a string or an array of token ids)");
            return 0;
        }
        req->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *req->prompt);
        if (!req->prompt) {
            set_error(err, 500, "server_error", NULL, "out of memory");
            return 0;
        }
        int i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            char name[48];
            snprintf(name, sizeof name, "prompt[%d]", i);
            long long id = 0;
            if (!get_int(e, name, 0, model->vocab - 1, &id, err))
                return 0;
            req->prompt[i] = (int32_t)id;
        }
        req->n_prompt = n;
    } else {
        INVALID(err, "invalid_type", "'prompt' must be a string or an array of token ids");
        return 0;
    }
    if (req->n_prompt == 0) {
        INVALID(err, "invalid_value", "'prompt' is empty (it encodes to no tokens)");
        return 0;
    }
    return 1;
}

static int parse_stop(const cJSON *v, srv_request *req, srv_error *err)
{
    if (cJSON_IsNull(v))
        return 1;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v)) {
        INVALID(err, "invalid_type", "'stop' must be a string or an array of strings");
        return 0;
    }
    if (!one && cJSON_GetArraySize(v) > SRV_MAX_STOP) {
        INVALID(err, "invalid_value", "'stop' holds at most %d strings", SRV_MAX_STOP);
        return 0;
    }
    for (const cJSON *e = one ? one : v->child; e; e = one ? NULL : e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            INVALID(err, "invalid_value", "'stop' entries must be non-empty strings");
            return 0;
        }
        req->stop[req->n_stop] = strdup(e->valuestring);
        if (!req->stop[req->n_stop]) {
            set_error(err, 500, "server_error", NULL, "out of memory");
            return 0;
        }
        req->n_stop++;
    }
    return 1;
}

/* Fields accepted only at their neutral value. */
static int parse_neutral(const cJSON *f, srv_error *err)
{
    const char *k = f->string;
    if (!strcmp(k, "n") || !strcmp(k, "best_of")) {
        long long n = 0;
        if (cJSON_IsNull(f))
            return 1;
        if (!get_int(f, k, 1, 1, &n, err))
            return 0;
        return 1;
    }
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        double x = 0;
        return cJSON_IsNull(f) || get_number(f, k, 0, 0, 0, &x, err);
    }
    if (!strcmp(k, "user")) {
        if (!cJSON_IsString(f) && !cJSON_IsNull(f)) {
            INVALID(err, "invalid_type", "'user' must be a string");
            return 0;
        }
        return 1;
    }
    if (!strcmp(k, "suffix")) {
        if (!cJSON_IsNull(f)) {
            INVALID(err, "invalid_value", "'suffix' is not supported");
            return 0;
        }
        return 1;
    }
    INVALID(err, "unknown_parameter", "unknown field '%s'", k);
    return 0;
}

static int parse_field(const cJSON *f, srv_request *req, const srv_model *model, long long *max_tokens,
                       srv_error *err)
{
    const char *k = f->string;
    long long n = 0;
    double x = 0;
    if (!strcmp(k, "model")) {
        if (!cJSON_IsString(f)) {
            INVALID(err, "invalid_type", "'model' must be a string");
            return 0;
        }
        if (strcmp(f->valuestring, model->name)) { /* as OpenAI and vLLM answer */
            set_error(err, 404, "invalid_request_error", "model_not_found",
                      "the model '%.100s' does not exist (this server serves '%s', see /v1/models)", f->valuestring,
                      model->name);
            return 0;
        }
        return 1;
    }
    if (!strcmp(k, "prompt"))
        return parse_prompt(f, req, model, err);
    if (!strcmp(k, "max_tokens")) {
        if (cJSON_IsNull(f))
            return 1;
        if (!get_int(f, k, 0, 1 << 24, &n, err))
            return 0;
        *max_tokens = n;
        return 1;
    }
    if (!strcmp(k, "temperature")) {
        if (cJSON_IsNull(f))
            return 1;
        if (!get_number(f, k, 0, 2, 0, &x, err))
            return 0;
        req->temperature = (float)x;
        return 1;
    }
    if (!strcmp(k, "top_p")) {
        if (cJSON_IsNull(f))
            return 1;
        if (!get_number(f, k, 0, 1, 1, &x, err))
            return 0;
        req->top_p = (float)x;
        return 1;
    }
    if (!strcmp(k, "seed")) {
        if (cJSON_IsNull(f))
            return 1;
        if (!get_int(f, k, -(1LL << 53), 1LL << 53, &n, err))
            return 0;
        req->seed = (uint64_t)n;
        return 1;
    }
    if (!strcmp(k, "stop"))
        return parse_stop(f, req, err);
    if (!strcmp(k, "stream"))
        return cJSON_IsNull(f) || get_bool(f, k, &req->stream, err);
    if (!strcmp(k, "echo"))
        return cJSON_IsNull(f) || get_bool(f, k, &req->echo, err);
    if (!strcmp(k, "logprobs")) {
        if (cJSON_IsNull(f))
            return 1;
        if (!get_int(f, k, 0, SRV_MAX_TOP_LOGPROBS, &n, err))
            return 0;
        req->logprobs = (int)n;
        return 1;
    }
    if (!strcmp(k, "stream_options")) {
        if (cJSON_IsNull(f))
            return 1;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(f, "include_usage");
        if (!cJSON_IsObject(f) || (u && !cJSON_IsBool(u))) {
            INVALID(err, "invalid_type", "'stream_options' must be an object with a boolean 'include_usage'");
            return 0;
        }
        req->include_usage = cJSON_IsTrue(u);
        return 1;
    }
    return parse_neutral(f, err);
}

static void make_id(srv_request *req)
{
    static unsigned long long counter;
    unsigned long long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    unsigned long long mix = (c * AC_RNG_GAMMA) ^ ((unsigned long long)(req->created * 1000.0) << 20);
    snprintf(req->id, sizeof req->id, "cmpl-%016llx%08llx", mix, c & 0xffffffffULL);
}

srv_request *srv_api_parse_completion(const char *body, size_t len, srv_model *model, const srv_config *config,
                                      srv_error *err)
{
    const char *what;
    long bad = text_problem(body, len, &what);
    if (bad >= 0) {
        INVALID(err, "invalid_encoding", "%s: byte %ld", what, bad);
        return NULL;
    }
    size_t at = 0;
    cJSON *root = parse_one_value(body, len, &at);
    if (!root) {
        INVALID(err, "invalid_json", "the body is not valid JSON (error near byte %zu)", at);
        return NULL;
    }
    srv_request *req = srv_request_new();
    if (!req) {
        cJSON_Delete(root);
        set_error(err, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    req->temperature = 1.0f;
    req->top_p = 1.0f;
    req->created = (double)time(NULL);
    make_id(req);
    /* without a seed each request draws its own */
    req->seed = (uint64_t)ac_monotonic_ns() * AC_RNG_GAMMA ^ (uint64_t)(uintptr_t)req;
    long long max_tokens = config->default_max_tokens;
    int ok = 1;
    if (!cJSON_IsObject(root)) {
        INVALID(err, "invalid_type", "the body must be a JSON object");
        ok = 0;
    }
    int n_fields = 0;
    for (const cJSON *f = ok ? root->child : NULL; f && ok; f = f->next) {
        for (const cJSON *g = root->child; g != f && ok; g = g->next)
            if (!strcmp(g->string, f->string)) {
                INVALID(err, "invalid_value", "'%s' is given twice", f->string);
                ok = 0;
            }
        if (ok && ++n_fields > 64) {
            INVALID(err, "invalid_value", "the body has more than 64 fields");
            ok = 0;
        }
        if (ok)
            ok = parse_field(f, req, model, &max_tokens, err);
    }
    if (ok && !req->prompt) {
        INVALID(err, "missing_field", "'prompt' is required");
        ok = 0;
    }
    if (ok && max_tokens == 0 && !req->echo) {
        INVALID(err, "invalid_value", "'max_tokens' must be at least 1 (0 only with echo)");
        ok = 0;
    }
    if (ok && config->max_prompt_tokens > 0 && req->n_prompt > config->max_prompt_tokens) {
        INVALID(err, "prompt_too_long", "the prompt has %d tokens; this server takes at most %d (max_prompt_tokens)",
                req->n_prompt, config->max_prompt_tokens);
        ok = 0;
    }
    if (ok && config->max_tokens_limit > 0 && max_tokens > config->max_tokens_limit) {
        INVALID(err, "invalid_value", "'max_tokens' = %lld is over this server's limit of %d (max_tokens_limit)",
                max_tokens, config->max_tokens_limit);
        ok = 0;
    }
    if (ok && (long long)req->n_prompt + max_tokens > config->context_tokens) {
        INVALID(err, "context_length_exceeded",
                "this model's context is %d tokens; the prompt has %d and max_tokens asks for %lld more",
                config->context_tokens, req->n_prompt, max_tokens);
        ok = 0;
    }
    cJSON_Delete(root);
    if (!ok) {
        srv_request_free(req);
        return NULL;
    }
    req->max_tokens = (int)max_tokens;
    return req;
}

/* ---- formatting ---- */

static cJSON *token_string(const srv_model *model, int32_t id)
{
    char *bytes = NULL, *clean = NULL;
    size_t len = 0;
    if (ac_tokenizer_decode(model->tokenizer, &id, 1, &bytes, &len) == AC_OK)
        clean = srv_utf8_sanitize(bytes ? bytes : "", len);
    cJSON *s = cJSON_CreateString(clean ? clean : "");
    free(bytes);
    free(clean);
    return s;
}

/* Appends tokens[0..n) to the four parallel logprobs arrays; offsets shifted by `base`. */
static void add_logprobs(cJSON *lp, const srv_model *model, const srv_token *tokens, int n, int top, size_t base,
                         int first_has_none)
{
    cJSON *toks = cJSON_GetObjectItem(lp, "tokens"), *vals = cJSON_GetObjectItem(lp, "token_logprobs");
    cJSON *tops = cJSON_GetObjectItem(lp, "top_logprobs"), *offs = cJSON_GetObjectItem(lp, "text_offset");
    for (int i = 0; i < n; i++) {
        const srv_token *t = &tokens[i];
        cJSON_AddItemToArray(toks, token_string(model, t->id));
        int none = first_has_none && i == 0;
        cJSON_AddItemToArray(vals, none ? cJSON_CreateNull() : cJSON_CreateNumber(t->logprob));
        if (none) {
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
        } else {
            cJSON *alt = cJSON_CreateObject();
            for (int k = 0; k < top; k++) {
                cJSON *key = token_string(model, t->top[k].id);
                if (!cJSON_GetObjectItemCaseSensitive(alt, key->valuestring))
                    cJSON_AddNumberToObject(alt, key->valuestring, t->top[k].logprob);
                cJSON_Delete(key);
            }
            cJSON_AddItemToArray(tops, alt);
        }
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(base + t->offset)));
    }
}

static cJSON *new_logprobs(void)
{
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddItemToObject(lp, "tokens", cJSON_CreateArray());
    cJSON_AddItemToObject(lp, "token_logprobs", cJSON_CreateArray());
    cJSON_AddItemToObject(lp, "top_logprobs", cJSON_CreateArray());
    cJSON_AddItemToObject(lp, "text_offset", cJSON_CreateArray());
    return lp;
}

static const char *finish_name(srv_finish f)
{
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : f == SRV_FINISH_ERROR ? "error" : NULL;
}

static cJSON *response_head(const srv_request *req, const char *model_name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", req->id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", floor(req->created));
    cJSON_AddStringToObject(o, "model", model_name);
    return o;
}

static void add_usage(cJSON *o, const srv_request *req)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", req->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", req->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", req->n_prompt + req->n_generated);
}

/* The prompt's text as echoed: as sent, or decoded from the ids. */
static char *prompt_echo(const srv_request *req, size_t *len)
{
    if (req->prompt_text) {
        *len = strlen(req->prompt_text);
        return strdup(req->prompt_text);
    }
    char *text = NULL;
    *len = 0;
    if (ac_tokenizer_decode(req->model->tokenizer, req->prompt, (size_t)req->n_prompt, &text, len) != AC_OK)
        return NULL;
    return text ? text : strdup("");
}

static char *print_and_free(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *srv_api_completion_json(srv_request *req, const char *model_name)
{
    pthread_mutex_lock(&req->mu);
    cJSON *o = response_head(req, model_name);
    cJSON *choice = cJSON_CreateObject();
    size_t echo_len = 0;
    char *echo = req->echo ? prompt_echo(req, &echo_len) : NULL;
    size_t total = echo_len + req->text_len;
    char *all = malloc(total + 1);
    if (all) {
        if (echo)
            memcpy(all, echo, echo_len);
        if (req->text_len)
            memcpy(all + echo_len, req->text, req->text_len);
    }
    char *clean = all ? srv_utf8_sanitize(all, total) : NULL;
    cJSON_AddStringToObject(choice, "text", clean ? clean : "");
    cJSON_AddNumberToObject(choice, "index", 0);
    if (req->logprobs >= 0) {
        cJSON *lp = new_logprobs();
        if (req->echo && req->prompt_tokens)
            add_logprobs(lp, req->model, req->prompt_tokens, req->n_prompt, req->logprobs, 0, 1);
        add_logprobs(lp, req->model, req->tokens, req->n_tokens, req->logprobs, echo_len, 0);
        cJSON_AddItemToObject(choice, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(choice, "logprobs");
    }
    cJSON_AddStringToObject(choice, "finish_reason", finish_name(req->finish));
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(choices, choice);
    add_usage(o, req);
    pthread_mutex_unlock(&req->mu);
    free(echo);
    free(all);
    free(clean);
    return print_and_free(o);
}

static char *sse(cJSON *o)
{
    char *json = print_and_free(o);
    if (!json)
        return NULL;
    size_t n = strlen(json);
    char *out = malloc(n + 9);
    if (out)
        snprintf(out, n + 9, "data: %s\n\n", json);
    free(json);
    return out;
}

/* Called with req->mu held. */
char *srv_api_stream_chunk(srv_request *req, const char *model_name, size_t *sent_text, int *sent_tokens, int final)
{
    size_t ready = final ? req->text_len : req->ready_len;
    int first = *sent_text == 0 && *sent_tokens == 0;
    /* the echo goes out once, with the first text (the prompt's logprobs are set by then) */
    if (first && req->echo && !final && ready == 0)
        return NULL;
    size_t echo_len = 0;
    char *echo = first && req->echo ? prompt_echo(req, &echo_len) : NULL;
    int n_tok = *sent_tokens;
    while (n_tok < req->n_tokens && req->tokens[n_tok].offset < ready)
        n_tok++;
    if (!final && ready <= *sent_text && !echo && n_tok == *sent_tokens)
        return NULL;
    size_t start = *sent_text < ready ? *sent_text : ready;
    size_t len = echo_len + (ready - start);
    char *raw = malloc(len + 1);
    char *clean = NULL;
    if (raw) {
        if (echo)
            memcpy(raw, echo, echo_len);
        if (ready > start)
            memcpy(raw + echo_len, req->text + start, ready - start);
        clean = srv_utf8_sanitize(raw, len);
    }
    cJSON *o = response_head(req, model_name);
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddStringToObject(choice, "text", clean ? clean : "");
    cJSON_AddNumberToObject(choice, "index", 0);
    if (req->logprobs >= 0) {
        cJSON *lp = new_logprobs();
        if (first && req->echo && req->prompt_tokens)
            add_logprobs(lp, req->model, req->prompt_tokens, req->n_prompt, req->logprobs, 0, 1);
        add_logprobs(lp, req->model, req->tokens + *sent_tokens, n_tok - *sent_tokens, req->logprobs, echo_len, 0);
        cJSON_AddItemToObject(choice, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(choice, "logprobs");
    }
    const char *reason = final ? finish_name(req->finish) : NULL;
    if (reason)
        cJSON_AddStringToObject(choice, "finish_reason", reason);
    else
        cJSON_AddNullToObject(choice, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice);
    char *out = sse(o);
    if (final && req->include_usage && out) {
        cJSON *u = response_head(req, model_name);
        cJSON_AddArrayToObject(u, "choices");
        add_usage(u, req);
        char *tail = sse(u);
        char *both = tail ? malloc(strlen(out) + strlen(tail) + 1) : NULL;
        if (both) {
            strcpy(both, out);
            strcat(both, tail);
            free(out);
            out = both;
        }
        free(tail);
    }
    *sent_text = ready;
    *sent_tokens = n_tok;
    free(echo);
    free(raw);
    free(clean);
    return out;
}

char *srv_api_error_json(const srv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", err->message);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "server_error");
    if (err->code)
        cJSON_AddStringToObject(e, "code", err->code);
    else
        cJSON_AddNullToObject(e, "code");
    return print_and_free(o);
}
