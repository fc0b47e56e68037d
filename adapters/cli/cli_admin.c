/* autocompress admin: the operator's commands against a running server's /admin API
 * (libcurl), with the token from AUTOCOMPRESS_ADMIN_TOKEN. `recompress --follow` and
 * `jobs ID --follow` draw the job's progress until it ends. */
#include "cli.h"
#include "cli_args.h"
#include "cli_opts.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_TARGETS = 8 };

/* The exit status of the commands that can follow a job to its end. */
#define FOLLOW_EXIT_TEXT                                                                  \
    "Without --follow, done means the server accepted the request; with it, done means\n" \
    "the job ended and its targets are judged on its result's measured cost.\n"           \
    CLI_EXIT_TARGETS_TEXT("every target is met")

/* ---- HTTP ---- */

typedef struct {
    char *data;
    size_t len;
} buffer;

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    buffer *b = arg;
    char *grown = realloc(b->data, b->len + size * n + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, p, size * n);
    b->data = grown;
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

/* One request: the response's JSON (NULL when it is not JSON) and status; -1 when the
 * server could not be reached (reported). */
static int request(const char *server, const char *method, const char *path, const char *body, cJSON **json)
{
    *json = NULL;
    const char *token = getenv("AUTOCOMPRESS_ADMIN_TOKEN");
    if (!token || !token[0]) {
        fprintf(stderr, "autocompress admin: set AUTOCOMPRESS_ADMIN_TOKEN to the server's admin token\n");
        return -1;
    }
    CURL *curl = curl_easy_init();
    if (!curl) {
        fprintf(stderr, "autocompress admin: cannot start libcurl\n");
        return -1;
    }
    char url[4096], auth[512];
    snprintf(url, sizeof url, "%s%s", server, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %.400s", token);
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    buffer b = {NULL, 0};
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
    if (body)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    long status = -1;
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK)
        fprintf(stderr, "autocompress admin: %s: %s\n", url, curl_easy_strerror(rc));
    else
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (b.data)
        *json = cJSON_Parse(b.data);
    free(b.data);
    return (int)status;
}

/* The server's error message, on stderr; returns CLI_EXIT_FAILURE. */
static int report_error(int status, const cJSON *json)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(json, "error"), "message");
    if (status > 0)
        fprintf(stderr, "autocompress admin: HTTP %d: %s\n", status, cJSON_IsString(m) ? m->valuestring : "(no message)");
    return CLI_EXIT_FAILURE;
}

static void print_json(const cJSON *json)
{
    char *text = cJSON_Print(json);
    if (text)
        printf("%s\n", text);
    free(text);
}

static const char *text_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double number_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* ---- following a job ---- */

static void draw_job(const cJSON *job, int tty)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(job, "progress");
    double done = number_of(p, "done"), total = number_of(p, "total");
    const cJSON *eta = cJSON_GetObjectItemCaseSensitive(p, "eta_s");
    char bar[21] = "";
    int filled = total > 0 ? (int)(20 * (done < total ? done / total : 1)) : 0;
    for (int i = 0; i < 20; i++)
        bar[i] = i < filled ? '#' : '.';
    char eta_text[32] = "";
    if (cJSON_IsNumber(eta))
        snprintf(eta_text, sizeof eta_text, " eta %.0fs", eta->valuedouble);
    printf("%s%s %s stage %d/%d %-8s [%s] %.0f/%.0f %s%s%s", tty ? "\r" : "", text_of(job, "id"),
           text_of(job, "state"), (int)number_of(job, "stage_index"), (int)number_of(job, "stage_count"),
           text_of(job, "stage"), bar, done, total, text_of(p, "unit"), eta_text, tty ? "\033[K" : "\n");
    fflush(stdout);
}

/* Polls the job until it ends: CLI_EXIT_DONE when it succeeded, CLI_EXIT_MISSED when it
 * missed its contract, CLI_EXIT_FAILURE else. */
static int follow(const char *server, const char *id)
{
    int tty = isatty(1);
    char path[256], last[128] = "";
    snprintf(path, sizeof path, "/admin/jobs/%.64s", id);
    for (;;) {
        cJSON *job;
        int status = request(server, "GET", path, NULL, &job);
        if (status != 200) {
            int rc = report_error(status, job);
            cJSON_Delete(job);
            return rc;
        }
        char now[128];
        snprintf(now, sizeof now, "%s %s %.0f", text_of(job, "state"), text_of(job, "stage"),
                 number_of(cJSON_GetObjectItemCaseSensitive(job, "progress"), "done"));
        if (tty || strcmp(now, last))
            draw_job(job, tty);
        snprintf(last, sizeof last, "%s", now);
        const char *state = text_of(job, "state");
        if (strcmp(state, "running")) {
            printf("%s%s %s: %s\n", tty ? "\n" : "", id, state, text_of(job, "message"));
            int rc = !strcmp(state, "succeeded") ? CLI_EXIT_DONE
                     : !strcmp(state, "missed")    ? CLI_EXIT_MISSED
                                                   : CLI_EXIT_FAILURE;
            cJSON_Delete(job);
            return rc;
        }
        cJSON_Delete(job);
        sleep(1);
    }
}

/* ---- the commands ---- */

typedef struct {
    const char *server;
    int json, follow, drain_first;
} common_args;

#define SERVER_OPT(a) CLI_REQUIRED("server", &(a)->server, "URL", "the server, e.g. http://127.0.0.1:8080")

/* GET path, printed as JSON. */
static int show(const char *server, const char *path)
{
    cJSON *json;
    int status = request(server, "GET", path, NULL, &json);
    int rc = status == 200 ? (print_json(json), CLI_EXIT_DONE) : report_error(status, json);
    cJSON_Delete(json);
    return rc;
}

/* A command that takes only --server and prints what GET path answers. */
static int show_command(int argc, char **argv, const char *command, const char *description, const char *path)
{
    common_args a = {0};
    const cli_opt opts[] = {SERVER_OPT(&a)};
    const cli_spec spec = {command, NULL, description, opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    return rc != CLI_PARSED ? rc : show(a.server, path);
}

static int admin_status(int argc, char **argv)
{
    return show_command(argc, argv, "admin status",
                        "The server's model, state and swaps (GET /admin/status).\n" CLI_EXIT_TEXT,
                        "/admin/status");
}

static int admin_policy(int argc, char **argv)
{
    return show_command(argc, argv, "admin policy", "The SLA policy's limits and last decisions (GET /admin/policy).\n"
                        CLI_EXIT_TEXT,
                        "/admin/policy");
}

/* One shape of GET /admin/profile as a table: a line per site, live beside predicted. */
static void print_profile_shape(const cJSON *shape)
{
    printf("\n%s, batch %d: %d sampled steps (median %.0f tokens, context %.0f)\n", text_of(shape, "phase"),
           (int)number_of(shape, "batch"), (int)number_of(shape, "samples"), number_of(shape, "tokens_p50"),
           number_of(shape, "context_p50"));
    const char *why = text_of(shape, "unpredicted_because");
    printf("  predicted: %s\n", why[0] ? why : text_of(shape, "prediction"));
    printf("  %5s %-10s %12s %12s %12s %8s\n", "layer", "site", "live us", "spread us", "predicted us", "ratio");
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(shape, "rows"))
    {
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(row, "predicted_us");
        char layer[16] = "", predicted[24] = "-", ratio[16] = "-";
        if (number_of(row, "layer") >= 0)
            snprintf(layer, sizeof layer, "%d", (int)number_of(row, "layer"));
        if (cJSON_IsNumber(pred)) {
            double live = number_of(row, "live_us");
            snprintf(predicted, sizeof predicted, "%.1f", pred->valuedouble);
            snprintf(ratio, sizeof ratio, "%.2f", pred->valuedouble > 0 ? live / pred->valuedouble : 0);
        }
        printf("  %5s %-10s %12.1f %12.1f %12s %8s\n", layer, text_of(row, "site"), number_of(row, "live_us"),
               number_of(row, "spread_us"), predicted, ratio);
    }
}

static void print_profile(const cJSON *p)
{
    printf("in-situ profile: one step in %d sampled, %.0f so far\n", (int)number_of(p, "sample_every"),
           number_of(p, "sampled_steps"));
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(p, "tables");
    if (cJSON_IsObject(tables))
        printf("tables: %s, batch %d, %d cached + %d input, %d output tokens, %d threads (%s)\n",
               text_of(tables, "contract"), (int)number_of(tables, "batch"), (int)number_of(tables, "cached_tokens"),
               (int)number_of(tables, "input_tokens"), (int)number_of(tables, "output_tokens"),
               (int)number_of(tables, "threads"), text_of(tables, "speed"));
    else
        printf("tables: none (live times only)\n");
    const cJSON *shape;
    cJSON_ArrayForEach(shape, cJSON_GetObjectItemCaseSensitive(p, "shapes")) print_profile_shape(shape);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(p, "memory");
    if (cJSON_IsObject(m)) {
        const double mib = 1024.0 * 1024.0;
        printf("\nmemory: resident %.2f MiB = before the model %.2f + W %.2f + C %.2f + P %.2f + R %.2f + residual %.2f MiB",
               number_of(m, "resident_bytes") / mib, number_of(m, "baseline_bytes") / mib, number_of(m, "weights_bytes") / mib,
               number_of(m, "kv_bytes") / mib, number_of(m, "state_bytes") / mib,
               number_of(m, "activation_bytes") / mib, number_of(m, "residual_bytes") / mib);
        if (cJSON_GetObjectItemCaseSensitive(m, "predicted_eps_bytes"))
            printf(" (the tables' eps: %.2f MiB)", number_of(m, "predicted_eps_bytes") / mib);
        printf("\n");
    }
}

static int admin_profile(int argc, char **argv)
{
    common_args a = {0};
    int json_out = 0;
    const cli_opt opts[] = {SERVER_OPT(&a), CLI_SWITCH("json", &json_out, 1, "print the JSON as the server sends it")};
    const cli_spec spec = {"admin profile", NULL,
                           "The in-situ profile (GET /admin/profile): per step shape, every layer's live median\n"
                           "time over the sampled serving steps beside what the cost tables predict for it,\n"
                           "and the process's memory beside the runtime's W + C + P + R.\n" CLI_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc != CLI_PARSED)
        return rc;
    cJSON *json;
    int status = request(a.server, "GET", "/admin/profile", NULL, &json);
    if (status != 200)
        rc = report_error(status, json);
    else if (json_out)
        print_json(json), rc = CLI_EXIT_DONE;
    else
        print_profile(json), rc = CLI_EXIT_DONE;
    cJSON_Delete(json);
    return rc;
}

static int admin_jobs(int argc, char **argv)
{
    common_args a = {0};
    const cli_opt opts[] = {SERVER_OPT(&a), CLI_SWITCH("follow", &a.follow, 1, "with ID: follow it to its end")};
    const cli_spec spec = {"admin jobs", "[ID]",
                           "Every job (GET /admin/jobs), or one (GET /admin/jobs/ID). With --follow, a progress\n"
                           "bar until the job ends.\n" FOLLOW_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 1};
    int first = 0;
    int rc = cli_parse(&spec, argc, argv, &first);
    if (rc != CLI_PARSED)
        return rc;
    if (first >= argc)
        return a.follow ? cli_usage_error(&spec, "--follow needs a job ID") : show(a.server, "/admin/jobs");
    if (a.follow)
        return follow(a.server, argv[first]);
    char path[256];
    snprintf(path, sizeof path, "/admin/jobs/%.64s", argv[first]);
    return show(a.server, path);
}

/* POST or DELETE on one job. */
static int job_action(int argc, char **argv, const char *name, const char *method, const char *suffix,
                      const char *what)
{
    common_args a = {0};
    const cli_opt opts[] = {SERVER_OPT(&a), CLI_SWITCH("follow", &a.follow, 1, "follow the job to its end")};
    const cli_spec spec = {name, "ID", what, opts, CLI_COUNT(opts), 1, 1};
    int first = 0;
    int rc = cli_parse(&spec, argc, argv, &first);
    if (rc != CLI_PARSED)
        return rc;
    char path[256];
    snprintf(path, sizeof path, "/admin/jobs/%.64s%s", argv[first], suffix);
    cJSON *json;
    int status = request(a.server, method, path, NULL, &json);
    rc = status == 200 || status == 202 ? CLI_EXIT_DONE : report_error(status, json);
    if (rc == CLI_EXIT_DONE)
        printf("%s %s: %s\n", text_of(json, "id"), text_of(json, "state"), text_of(json, "message"));
    cJSON_Delete(json);
    return rc == CLI_EXIT_DONE && a.follow ? follow(a.server, argv[first]) : rc;
}

static int admin_cancel(int argc, char **argv)
{
    return job_action(argc, argv, "admin cancel", "DELETE", "",
                      "Cancels a running job (DELETE /admin/jobs/ID).\n" FOLLOW_EXIT_TEXT);
}

static int admin_resume(int argc, char **argv)
{
    return job_action(argc, argv, "admin resume", "POST", "/resume",
                      "Continues a failed, cancelled or interrupted job from its artifacts\n"
                      "(POST /admin/jobs/ID/resume).\n" FOLLOW_EXIT_TEXT);
}

static int admin_swap(int argc, char **argv)
{
    common_args a = {0};
    const char *model = NULL;
    const cli_opt opts[] = {SERVER_OPT(&a), CLI_REQUIRED("model", &model, "DIR", "the checkpoint, a path on the server"),
                            CLI_SWITCH("drain-first", &a.drain_first, 1, "finish running requests before swapping")};
    const cli_spec spec = {"admin swap", NULL, "Hot-swaps the served model (POST /admin/swap).\n" CLI_EXIT_TEXT, opts,
                           CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    if (rc != CLI_PARSED)
        return rc;
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "model_path", model);
    cJSON_AddBoolToObject(body, "drain_first", a.drain_first);
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    cJSON *json = NULL;
    int status = text ? request(a.server, "POST", "/admin/swap", text, &json) : -1;
    free(text);
    rc = status == 200 ? (print_json(json), CLI_EXIT_DONE) : report_error(status, json);
    cJSON_Delete(json);
    return rc;
}

/* ---- recompress ---- */

typedef struct {
    common_args c;
    const char *contract, *contract_path, *method, *data, *tables, *parent, *swap;
    int from_live;
    int64_t search_tokens, kd_tokens;
    int measure_sweeps, eval_batches;
    char *target_names[MAX_TARGETS];
    double target_values[MAX_TARGETS];
    int n_targets;
} recompress_args;

static ac_status parse_target(const char *value, void *dst)
{
    recompress_args *a = dst;
    const char *eq = strchr(value, '=');
    double v = 0;
    if (!eq || eq == value || cli_parse_float("--target", eq + 1, &v) != AC_OK)
        return ac_fail(AC_ERR_INVALID, "--target takes NAME=VALUE (e.g. latency_ratio=0.7), not '%s'", value);
    if (a->n_targets == MAX_TARGETS)
        return ac_fail(AC_ERR_INVALID, "--target: at most %d", MAX_TARGETS);
    a->target_names[a->n_targets] = strndup(value, (size_t)(eq - value));
    a->target_values[a->n_targets++] = v;
    return a->target_names[a->n_targets - 1] ? AC_OK : ac_fail(AC_ERR_NOMEM, "out of memory");
}

/* The contract file's text, read here and sent inline (NULL when unreadable, reported). */
static char *read_local(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "autocompress admin: cannot read %s\n", path);
        return NULL;
    }
    buffer b = {NULL, 0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (collect(chunk, 1, n, &b) != n)
            break;
    fclose(f);
    return b.data ? b.data : strdup("");
}

static cJSON *recompress_body(const recompress_args *a)
{
    cJSON *o = cJSON_CreateObject();
    if (a->contract) {
        char *text = read_local(a->contract);
        if (!text) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddStringToObject(o, "contract", text);
        free(text);
    }
    const struct {
        const char *key, *value;
    } strings[] = {{"contract_path", a->contract_path}, {"method", a->method}, {"data", a->data},
                   {"tables", a->tables},               {"parent", a->parent}, {"swap", a->swap}};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (strings[i].value)
            cJSON_AddStringToObject(o, strings[i].key, strings[i].value);
    if (a->from_live)
        cJSON_AddBoolToObject(o, "from_live", 1);
    if (a->search_tokens)
        cJSON_AddNumberToObject(o, "search_tokens", (double)a->search_tokens);
    if (a->kd_tokens)
        cJSON_AddNumberToObject(o, "kd_tokens", (double)a->kd_tokens);
    if (a->measure_sweeps)
        cJSON_AddNumberToObject(o, "measure_sweeps", a->measure_sweeps);
    if (a->eval_batches)
        cJSON_AddNumberToObject(o, "eval_batches", a->eval_batches);
    if (a->n_targets) {
        cJSON *t = cJSON_AddObjectToObject(o, "targets");
        for (int i = 0; i < a->n_targets; i++)
            cJSON_AddNumberToObject(t, a->target_names[i], a->target_values[i]);
    }
    return o;
}

static int admin_recompress(int argc, char **argv)
{
    recompress_args a = {0};
    const cli_opt opts[] = {
        SERVER_OPT(&a.c),
        CLI_TEXT("contract", &a.contract, "FILE", "a contract file here, sent inline"),
        CLI_TEXT("contract-path", &a.contract_path, "PATH", "a contract file on the server"),
        CLI_SWITCH("from-live", &a.from_live, 1,
                   "the live workload over the served model's contract (or over --contract)"),
        CLI_CUSTOM("target", &a, "NAME=X", "with --from-live: a target, e.g. latency_ratio=0.7 (repeatable)",
                   parse_target),
        CLI_TEXT("method", &a.method, "NAME", "autocompress (default) or minitron++"),
        CLI_NUMBER("search-tokens", CLI_I64, &a.search_tokens, "N", "search budget (default: the contract's)", 1,
                   INT64_MAX),
        CLI_NUMBER("kd-tokens", CLI_I64, &a.kd_tokens, "N", "distillation budget (default: the contract's)", 1,
                   INT64_MAX),
        CLI_NUMBER("measure-sweeps", CLI_INT, &a.measure_sweeps, "N", "measurement processes of the result (default: the server's)", 1, 64),
        CLI_NUMBER("eval-batches", CLI_INT, &a.eval_batches, "N", "held-out batches of the evaluation (default: the server's)", 1, 1 << 20),
        CLI_TEXT("data", &a.data, "DIR", "token shards on the server (default: the server's control.data)"),
        CLI_TEXT("tables", &a.tables, "FILE", "cost tables on the server (default: control.tables, else profile)"),
        CLI_TEXT("parent", &a.parent, "DIR", "the checkpoint compressed (default: the server's parent)"),
        CLI_TEXT("swap", &a.swap, "auto|manual", "swap the result in when it meets the contract (default auto)"),
        CLI_SWITCH("follow", &a.c.follow, 1, "follow the job to its end (exit 0 met, 3 missed, 1 failed)"),
    };
    const cli_spec spec = {"admin recompress", NULL,
                           "Starts a recompression on the server (POST /admin/recompress) and prints the job's\n"
                           "id; the job runs `autocompress compress` in a child of the server.\n" FOLLOW_EXIT_TEXT,
                           opts, CLI_COUNT(opts), 0, 0};
    int rc = cli_parse(&spec, argc, argv, NULL);
    cJSON *body = rc == CLI_PARSED ? recompress_body(&a) : NULL;
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    for (int i = 0; i < a.n_targets; i++)
        free(a.target_names[i]);
    if (rc != CLI_PARSED)
        return rc;
    if (!text)
        return CLI_EXIT_FAILURE;
    cJSON *json;
    int status = request(a.c.server, "POST", "/admin/recompress", text, &json);
    free(text);
    if (status != 202) {
        rc = report_error(status, json);
        cJSON_Delete(json);
        return rc;
    }
    char id[64];
    snprintf(id, sizeof id, "%s", text_of(json, "id"));
    printf("%s started in %s\n", id, text_of(json, "dir"));
    cJSON_Delete(json);
    return a.c.follow ? follow(a.c.server, id) : CLI_EXIT_DONE;
}

int cli_admin(int argc, char **argv)
{
    static const cli_command commands[] = {
        {"status", admin_status, "the served model, state and swaps"},
        {"recompress", admin_recompress, "start a recompression job (--follow: until it ends)"},
        {"jobs", admin_jobs, "every job, or one: jobs [ID] [--follow]"},
        {"cancel", admin_cancel, "cancel the running job: cancel ID"},
        {"resume", admin_resume, "continue a failed, cancelled or interrupted job: resume ID"},
        {"swap", admin_swap, "hot-swap the served model: swap --model DIR"},
        {"policy", admin_policy, "the SLA policy's state and decisions"},
        {"profile", admin_profile, "live per-layer times beside the cost tables' (--json: raw)"},
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cli_dispatch("admin", commands, CLI_COUNT(commands), argc, argv);
    curl_global_cleanup();
    return rc;
}
