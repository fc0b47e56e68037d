/* Server metrics: Prometheus text for /metrics, and the live workload shape (batch
 * occupancy and token counts per request) with the contract workload it implies.
 *
 * One mutex guards everything; each update holds it for a few additions, and the
 * exports copy what they need under it and format outside it where that is heavy
 * (the workload's sort). Updates never fail: a request row that cannot be allocated
 * is not counted, since the callers have no way to report it. */
#include "server/srv.h"

#include "autocompress/host.h"
#include "autocompress/probe.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ENDPOINT_MAX = 64, WINDOW = 8192, HIST_MAX = 16, RECENT = 4096, RECENT_STEPS = 512 };

#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Upper bounds in seconds, for a CPU server: a request may take a minute, a token
 * a few milliseconds to a second or two. */
static const double latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
static const double tpot_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2};

typedef struct {
    char endpoint[ENDPOINT_MAX];
    int status;
    uint64_t count;
} request_row;

/* counts[i] holds the observations in (bounds[i-1], bounds[i]], counts[n] those above
 * the last bound; the export makes them cumulative. */
typedef struct {
    const double *bounds;
    int n;
    uint64_t counts[HIST_MAX + 1];
    double sum;
    uint64_t count;
} histogram;

/* The most recent WINDOW samples of one series, and how many there were in all. */
typedef struct {
    int64_t values[WINDOW];
    int next, n;
    uint64_t total;
} series;

/* In the order of the contract's workload keys. */
enum { SERIES_BATCH, SERIES_CACHED, SERIES_INPUT, SERIES_OUTPUT, SERIES_COUNT };
static const char *const series_names[SERIES_COUNT] = {"batch", "cached_tokens", "input_tokens", "output_tokens"};

/* A finished request as the SLA policy reads it (monotonic seconds). */
typedef struct {
    double t_done, latency_s, tpot_s; /* tpot_s < 0: fewer than two tokens */
    int input, output;
} recent_completion;

struct srv_metrics {
    pthread_mutex_t mu;
    int slots;
    request_row *rows;
    int n_rows, cap_rows;
    uint64_t prompt_tokens, generation_tokens;
    histogram latency, ttft, tpot;
    uint64_t swaps_ok, swaps_failed, steps;
    series series[SERIES_COUNT];
    recent_completion recent[RECENT]; /* a ring: the newest RECENT completions */
    int recent_next, recent_n;
};

/* ---- updates ---- */

static void histogram_init(histogram *h, const double *bounds, int n)
{
    h->bounds = bounds;
    h->n = n;
}

static void histogram_observe(histogram *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static void series_push(series *s, int64_t v)
{
    s->values[s->next] = v;
    s->next = (s->next + 1) % WINDOW;
    if (s->n < WINDOW)
        s->n++;
    s->total++;
}

/* Durations come from differences of clock readings; a missing reading must not
 * produce a negative (or NaN) observation. */
static double nonnegative(double v)
{
    return v > 0 ? v : 0;
}

ac_status srv_metrics_create(int slots, srv_metrics **out)
{
    *out = NULL;
    if (slots < 1)
        return ac_fail(AC_ERR_INVALID, "metrics: slots must be at least 1 (got %d)", slots);
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "metrics: cannot allocate %zu bytes", sizeof *m);
    int rc = pthread_mutex_init(&m->mu, NULL);
    if (rc != 0) {
        free(m);
        return ac_fail(AC_ERR_NOMEM, "metrics: cannot create a mutex: %s", strerror(rc));
    }
    m->slots = slots;
    histogram_init(&m->latency, latency_bounds, COUNT_OF(latency_bounds));
    histogram_init(&m->ttft, ttft_bounds, COUNT_OF(ttft_bounds));
    histogram_init(&m->tpot, tpot_bounds, COUNT_OF(tpot_bounds));
    *out = m;
    return AC_OK;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->rows);
    free(m);
}

/* Copies at most ENDPOINT_MAX - 1 bytes without cutting a UTF-8 character in two. */
static void copy_endpoint(char *dst, const char *src)
{
    size_t len = strnlen(src, ENDPOINT_MAX);
    if (len >= ENDPOINT_MAX) {
        len = ENDPOINT_MAX - 1;
        while (len > 0 && ((unsigned char)src[len] & 0xc0) == 0x80)
            len--;
    }
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* The row for (endpoint, status), added when new; NULL when it cannot be added.
 * Called with the lock held. */
static request_row *find_row(srv_metrics *m, const char *endpoint, int status)
{
    for (int i = 0; i < m->n_rows; i++)
        if (m->rows[i].status == status && strcmp(m->rows[i].endpoint, endpoint) == 0)
            return &m->rows[i];
    if (m->n_rows == m->cap_rows) {
        int cap = m->cap_rows ? 2 * m->cap_rows : 16;
        request_row *rows = realloc(m->rows, (size_t)cap * sizeof *rows);
        if (!rows)
            return NULL;
        m->rows = rows;
        m->cap_rows = cap;
    }
    request_row *row = &m->rows[m->n_rows++];
    memcpy(row->endpoint, endpoint, ENDPOINT_MAX);
    row->status = status;
    row->count = 0;
    return row;
}

void srv_metrics_count_request(srv_metrics *m, const char *endpoint, int status)
{
    char name[ENDPOINT_MAX];
    copy_endpoint(name, endpoint ? endpoint : "other");
    pthread_mutex_lock(&m->mu);
    request_row *row = find_row(m, name, status);
    if (row)
        row->count++;
    pthread_mutex_unlock(&m->mu);
}

/* The caller passes a finished request: nothing writes its progress any more, so its
 * fields are read without its lock. */
void srv_metrics_completion(srv_metrics *m, const srv_request *req)
{
    int64_t prompt = req->n_prompt > 0 ? req->n_prompt : 0;
    int64_t generated = req->n_generated > 0 ? req->n_generated : 0;
    int64_t cached = req->cached_tokens > 0 ? req->cached_tokens : 0;
    if (cached > prompt)
        cached = prompt;
    int has_token = generated >= 1 && req->t_first_token > 0;

    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generation_tokens += (uint64_t)generated;
    histogram_observe(&m->latency, nonnegative(req->t_done - req->t_arrival));
    if (has_token)
        histogram_observe(&m->ttft, nonnegative(req->t_first_token - req->t_arrival));
    /* the first token's time is the prefill's; the rest are decode steps */
    if (has_token && generated >= 2)
        histogram_observe(&m->tpot, nonnegative(req->t_done - req->t_first_token) / (double)(generated - 1));
    /* a failed request says nothing about the workload clients send */
    if (req->finish != SRV_FINISH_ERROR) {
        series_push(&m->series[SERIES_INPUT], prompt - cached);
        series_push(&m->series[SERIES_CACHED], cached);
        series_push(&m->series[SERIES_OUTPUT], generated);
        recent_completion *r = &m->recent[m->recent_next];
        r->t_done = req->t_done;
        r->latency_s = nonnegative(req->t_done - req->t_arrival);
        r->tpot_s = has_token && generated >= 2 ? nonnegative(req->t_done - req->t_first_token) / (double)(generated - 1)
                                                : -1;
        r->input = (int)(prompt - cached);
        r->output = (int)generated;
        m->recent_next = (m->recent_next + 1) % RECENT;
        if (m->recent_n < RECENT)
            m->recent_n++;
    }
    pthread_mutex_unlock(&m->mu);
}

/* A step of no sequence did no work; it is neither counted nor sampled. */
void srv_metrics_step(srv_metrics *m, int sequences)
{
    if (sequences < 1)
        return;
    pthread_mutex_lock(&m->mu);
    m->steps++;
    series_push(&m->series[SERIES_BATCH], sequences);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_swap(srv_metrics *m, int ok)
{
    pthread_mutex_lock(&m->mu);
    if (ok)
        m->swaps_ok++;
    else
        m->swaps_failed++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- Prometheus text ---- */

/* A growing string; once an allocation fails it stays failed and appends nothing. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} strbuf;

static int sb_reserve(strbuf *b, size_t extra)
{
    if (b->failed)
        return 0;
    if (b->len + extra + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = 1;
        return 0;
    }
    b->s = s;
    b->cap = cap;
    return 1;
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
        b->failed = 1;
        return;
    }
    if (!sb_reserve(b, (size_t)need))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

/* A label value escaped as the text format asks: \\, \" and \n. */
static void sb_label_value(strbuf *b, const char *v)
{
    if (!sb_reserve(b, 2 * strlen(v)))
        return;
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') {
            b->s[b->len++] = '\\';
            b->s[b->len++] = *v;
        } else if (*v == '\n') {
            b->s[b->len++] = '\\';
            b->s[b->len++] = 'n';
        } else {
            b->s[b->len++] = *v;
        }
    }
    b->s[b->len] = '\0';
}

/* The shortest of %.15g..%.17g that reads back as v: "0.005" rather than
 * "0.0050000000000000001", and still exact for sums. */
static void format_double(char *out, size_t size, double v)
{
    for (int precision = 15; precision <= 17; precision++) {
        snprintf(out, size, "%.*g", precision, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void write_header(strbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP autocompress_%s %s\n# TYPE autocompress_%s %s\n", name, help, name, type);
}

static void write_counter(strbuf *b, const char *name, const char *help, uint64_t v)
{
    write_header(b, name, "counter", help);
    sb_printf(b, "autocompress_%s %" PRIu64 "\n", name, v);
}

static void write_gauge(strbuf *b, const char *name, const char *help, long long v)
{
    write_header(b, name, "gauge", help);
    sb_printf(b, "autocompress_%s %lld\n", name, v);
}

static void write_histogram(strbuf *b, const char *name, const char *help, const histogram *h)
{
    char num[32];
    uint64_t cumulative = 0;
    write_header(b, name, "histogram", help);
    for (int i = 0; i < h->n; i++) {
        cumulative += h->counts[i];
        format_double(num, sizeof num, h->bounds[i]);
        sb_printf(b, "autocompress_%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, num, cumulative);
    }
    cumulative += h->counts[h->n];
    sb_printf(b, "autocompress_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cumulative);
    format_double(num, sizeof num, h->sum);
    sb_printf(b, "autocompress_%s_sum %s\n", name, num);
    sb_printf(b, "autocompress_%s_count %" PRIu64 "\n", name, h->count);
}

static void write_requests(strbuf *b, const srv_metrics *m)
{
    write_header(b, "requests_total", "counter", "HTTP responses by endpoint and status code.");
    for (int i = 0; i < m->n_rows; i++) {
        sb_printf(b, "autocompress_requests_total{endpoint=\"");
        sb_label_value(b, m->rows[i].endpoint);
        sb_printf(b, "\",status=\"%d\"} %" PRIu64 "\n", m->rows[i].status, m->rows[i].count);
    }
}

char *srv_metrics_prometheus(srv_metrics *m, int active_slots, int queue_depth, int model_generation)
{
    strbuf b = {0};
    pthread_mutex_lock(&m->mu);
    write_requests(&b, m);
    write_counter(&b, "prompt_tokens_total", "Prompt tokens of finished completion requests.", m->prompt_tokens);
    write_counter(&b, "generation_tokens_total", "Tokens generated by finished completion requests.",
                  m->generation_tokens);
    write_histogram(&b, "request_duration_seconds", "Completion request latency, arrival to last token.",
                    &m->latency);
    write_histogram(&b, "time_to_first_token_seconds", "Time from arrival to the first generated token.", &m->ttft);
    write_histogram(&b, "time_per_output_token_seconds", "Mean time per generated token after the first.",
                    &m->tpot);
    write_gauge(&b, "active_slots", "Slots holding a running sequence.", active_slots);
    write_gauge(&b, "slots", "Configured slots (sequences stepped together).", m->slots);
    write_gauge(&b, "queue_depth", "Requests waiting for a slot.", queue_depth);
    write_gauge(&b, "model_generation", "Generation of the serving model (1 for the first, +1 per swap).",
                model_generation);
    write_header(&b, "swaps_total", "counter", "Model hot swaps by result.");
    sb_printf(&b, "autocompress_swaps_total{result=\"ok\"} %" PRIu64 "\n", m->swaps_ok);
    sb_printf(&b, "autocompress_swaps_total{result=\"failed\"} %" PRIu64 "\n", m->swaps_failed);
    write_counter(&b, "scheduler_steps_total", "Scheduler steps that ran at least one sequence.", m->steps);
    pthread_mutex_unlock(&m->mu);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- workload JSON ---- */

static int compare_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p% of the samples at or below it.
 * Integer arithmetic, so that 90% of 100 is rank 90 exactly. */
static int64_t percentile(const int64_t *sorted, int n, int p)
{
    long rank = ((long)p * n + 99) / 100;
    if (rank < 1)
        rank = 1;
    return sorted[rank - 1];
}

static int add_number(cJSON *obj, const char *key, double v)
{
    return cJSON_AddNumberToObject(obj, key, v) != NULL;
}

/* [{"le": 1, "count": c}, ...] over power-of-two bounds up to the first one at or above
 * the largest sample; counts are per bucket. Samples are sorted and non-negative, and
 * below 2^63, so the bound stops doubling before it overflows. */
static cJSON *power_histogram(const int64_t *sorted, int n)
{
    cJSON *arr = cJSON_CreateArray();
    uint64_t bound = 1;
    int i = 0, ok = arr != NULL;
    while (ok && i < n) {
        int count = 0;
        while (i < n && (uint64_t)sorted[i] <= bound)
            i++, count++;
        cJSON *bucket = cJSON_CreateObject();
        if (!bucket || !cJSON_AddItemToArray(arr, bucket)) {
            cJSON_Delete(bucket);
            ok = 0;
            break;
        }
        ok = add_number(bucket, "le", (double)bound) && add_number(bucket, "count", count);
        bound *= 2;
    }
    if (!ok) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}

/* One series' summary; `sorted` holds its window. */
static cJSON *series_json(const int64_t *sorted, int n, uint64_t total)
{
    cJSON *obj = cJSON_CreateObject();
    if (!obj)
        return NULL;
    int ok = add_number(obj, "samples", n) && add_number(obj, "total", (double)total);
    if (ok && n > 0) {
        double sum = 0;
        for (int i = 0; i < n; i++)
            sum += (double)sorted[i];
        ok = add_number(obj, "mean", sum / n) && add_number(obj, "p50", (double)percentile(sorted, n, 50)) &&
             add_number(obj, "p90", (double)percentile(sorted, n, 90)) &&
             add_number(obj, "p99", (double)percentile(sorted, n, 99)) &&
             add_number(obj, "max", (double)sorted[n - 1]);
    } else if (ok) {
        static const char *const keys[] = {"mean", "p50", "p90", "p99", "max"};
        for (int k = 0; ok && k < COUNT_OF(keys); k++)
            ok = cJSON_AddNullToObject(obj, keys[k]) != NULL;
    }
    cJSON *hist = ok ? power_histogram(sorted, n) : NULL;
    if (!hist || !cJSON_AddItemToObject(obj, "histogram", hist)) {
        cJSON_Delete(hist);
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

/* The window's medians as a contract workload; input and output at least 1 token,
 * since a contract needs both. Batch samples are at least 1 already. 0 when no request
 * has been served yet. */
static int implied_workload(int64_t *const sorted[SERIES_COUNT], const int n[SERIES_COUNT], ac_contract_workload *w)
{
    if (n[SERIES_BATCH] == 0 || n[SERIES_INPUT] == 0)
        return 0;
    int64_t v[SERIES_COUNT];
    for (int s = 0; s < SERIES_COUNT; s++)
        v[s] = percentile(sorted[s], n[s], 50);
    for (int s = 0; s < SERIES_COUNT; s++)
        if (s != SERIES_CACHED && v[s] < 1)
            v[s] = 1;
    *w = (ac_contract_workload){(int)v[SERIES_BATCH], v[SERIES_CACHED], v[SERIES_INPUT], v[SERIES_OUTPUT]};
    return 1;
}

static int add_implied(cJSON *root, int64_t *const sorted[SERIES_COUNT], const int n[SERIES_COUNT])
{
    ac_contract_workload w;
    if (!implied_workload(sorted, n, &w))
        return cJSON_AddNullToObject(root, "implied_workload") && cJSON_AddNullToObject(root, "libconfig");
    const int64_t v[SERIES_COUNT] = {w.batch, w.cached_tokens, w.input_tokens, w.output_tokens};
    cJSON *implied = cJSON_AddObjectToObject(root, "implied_workload");
    int ok = implied != NULL;
    for (int s = 0; ok && s < SERIES_COUNT; s++)
        ok = add_number(implied, series_names[s], (double)v[s]);
    char text[256];
    snprintf(text, sizeof text,
             "workload = { batch = %" PRId64 "; cached_tokens = %" PRId64 "; input_tokens = %" PRId64
             "; output_tokens = %" PRId64 "; };",
             v[SERIES_BATCH], v[SERIES_CACHED], v[SERIES_INPUT], v[SERIES_OUTPUT]);
    return ok && cJSON_AddStringToObject(root, "libconfig", text);
}

static char *workload_from_windows(int64_t *const sorted[SERIES_COUNT], const int n[SERIES_COUNT],
                                   const uint64_t total[SERIES_COUNT])
{
    cJSON *root = cJSON_CreateObject();
    int ok = root && add_number(root, "window", WINDOW);
    for (int s = 0; ok && s < SERIES_COUNT; s++) {
        cJSON *obj = series_json(sorted[s], n[s], total[s]);
        ok = obj && cJSON_AddItemToObject(root, series_names[s], obj);
        if (!ok)
            cJSON_Delete(obj);
    }
    ok = ok && add_implied(root, sorted, n);
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* The windows, copied out and sorted; `buffer` (malloc'd) holds them. 0 when out of memory. */
static int sorted_windows(srv_metrics *m, int64_t **buffer, int64_t *sorted[SERIES_COUNT], int n[SERIES_COUNT],
                          uint64_t total[SERIES_COUNT])
{
    *buffer = malloc((size_t)SERIES_COUNT * WINDOW * sizeof **buffer);
    if (!*buffer)
        return 0;
    /* the window's order does not matter once sorted, so copy it whole */
    pthread_mutex_lock(&m->mu);
    for (int s = 0; s < SERIES_COUNT; s++) {
        sorted[s] = *buffer + (size_t)s * WINDOW;
        n[s] = m->series[s].n;
        total[s] = m->series[s].total;
        memcpy(sorted[s], m->series[s].values, (size_t)n[s] * sizeof **buffer);
    }
    pthread_mutex_unlock(&m->mu);
    for (int s = 0; s < SERIES_COUNT; s++)
        qsort(sorted[s], (size_t)n[s], sizeof **buffer, compare_int64);
    return 1;
}

char *srv_metrics_workload_json(srv_metrics *m)
{
    int64_t *buffer, *sorted[SERIES_COUNT];
    int n[SERIES_COUNT];
    uint64_t total[SERIES_COUNT];
    if (!sorted_windows(m, &buffer, sorted, n, total))
        return NULL;
    char *text = workload_from_windows(sorted, n, total);
    free(buffer);
    return text;
}

int srv_metrics_live_workload(srv_metrics *m, ac_contract_workload *w)
{
    int64_t *buffer, *sorted[SERIES_COUNT];
    int n[SERIES_COUNT];
    uint64_t total[SERIES_COUNT];
    if (!sorted_windows(m, &buffer, sorted, n, total))
        return 0;
    int ok = implied_workload(sorted, n, w);
    free(buffer);
    return ok;
}

/* ---- the SLA policy's view ---- */

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile of v[0..n) (sorted in place), nearest rank; -1 when n is 0. */
static double quantile(double *v, int n, int p)
{
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, compare_double);
    int rank = (p * n + 99) / 100;
    return v[rank > 0 ? rank - 1 : 0];
}

int srv_metrics_sla_sample(srv_metrics *m, double since, double now, ac_sla_sample *out)
{
    double *buf = malloc(4 * RECENT * sizeof *buf);
    if (!buf)
        return 0;
    double *lat = buf, *tpot = buf + RECENT, *input = buf + 2 * RECENT, *output = buf + 3 * RECENT;
    int n = 0, n_tpot = 0;
    double generated = 0, batch_sum = 0;
    int batch_n = 0;
    pthread_mutex_lock(&m->mu);
    for (int k = 0; k < m->recent_n; k++) {
        const recent_completion *r = &m->recent[(m->recent_next - 1 - k + RECENT) % RECENT];
        if (r->t_done < since)
            break;
        lat[n] = 1e3 * r->latency_s;
        input[n] = r->input;
        output[n] = r->output;
        generated += r->output;
        n++;
        if (r->tpot_s >= 0)
            tpot[n_tpot++] = 1e3 * r->tpot_s;
    }
    const series *b = &m->series[SERIES_BATCH];
    for (int k = 0; k < b->n && k < RECENT_STEPS; k++, batch_n++)
        batch_sum += (double)b->values[(b->next - 1 - k + WINDOW) % WINDOW];
    pthread_mutex_unlock(&m->mu);
    memset(out, 0, sizeof *out);
    out->now = now;
    out->requests = n;
    out->p95_latency_ms = quantile(lat, n, 95);
    out->time_per_output_token_ms = quantile(tpot, n_tpot, 50);
    out->throughput_tok_s = now > since ? generated / (now - since) : -1;
    out->memory_bytes = (double)ac_cpu_resident_bytes();
    out->prompt_p50 = quantile(input, n, 50);
    out->output_p50 = quantile(output, n, 50);
    out->batch_p50 = batch_n ? batch_sum / batch_n : -1;
    free(buf);
    return 1;
}
