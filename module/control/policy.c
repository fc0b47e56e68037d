/* The SLA policy: each limit is a value per sample against a bound. A limit is breached
 * from the first sample past its bound until a sample is back inside the bound by the
 * hysteresis margin; a breach that has lasted the whole window asks for a recompression,
 * unless the cooldown after the last one has not ended. */
#include "autocompress/control.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

enum { LIMIT_P95, LIMIT_TPOT, LIMIT_THROUGHPUT, LIMIT_MEMORY, LIMIT_PROMPT, LIMIT_OUTPUT, LIMIT_BATCH, LIMIT_COUNT };

static const char *const limit_names[LIMIT_COUNT] = {
    "p95_latency_ms", "time_per_output_token_ms", "throughput_tok_s", "memory_bytes",
    "prompt_drift",   "output_drift",             "batch_drift"};

typedef struct {
    double bound;   /* <= 0: not checked */
    int lower;      /* the value must stay above the bound (throughput) */
    double value;   /* the last sample's; NAN before one */
    int breached;
    double since;   /* when the breach began */
} limit;

struct ac_sla_policy {
    ac_sla_config config;
    limit limits[LIMIT_COUNT];
    double cooldown_until;  /* no recompression before this */
    double retry_at;        /* after a decision held back: not before this */
    ac_sla_decision history[AC_SLA_HISTORY];
    int n_history, next_history;
    double last_sample;
};

ac_status ac_sla_policy_create(const ac_sla_config *config, ac_sla_policy **out)
{
    *out = NULL;
    if (!(config->window_s >= 0) || !(config->cooldown_s >= 0) || !(config->hysteresis >= 0 && config->hysteresis < 1))
        return ac_fail(AC_ERR_INVALID, "sla: window and cooldown must be >= 0 s and hysteresis in [0, 1) (got %g, %g, "
                                       "%g)", config->window_s, config->cooldown_s, config->hysteresis);
    ac_sla_policy *p = calloc(1, sizeof *p);
    if (!p)
        return ac_fail(AC_ERR_NOMEM, "sla: out of memory");
    p->config = *config;
    double drift = config->workload_drift;
    p->limits[LIMIT_P95].bound = config->p95_latency_ms;
    p->limits[LIMIT_TPOT].bound = config->time_per_output_token_ms;
    p->limits[LIMIT_THROUGHPUT].bound = config->min_throughput_tok_s;
    p->limits[LIMIT_THROUGHPUT].lower = 1;
    p->limits[LIMIT_MEMORY].bound = config->memory_bytes;
    p->limits[LIMIT_PROMPT].bound = config->contract_prompt > 0 ? drift : 0;
    p->limits[LIMIT_OUTPUT].bound = config->contract_output > 0 ? drift : 0;
    p->limits[LIMIT_BATCH].bound = config->contract_batch > 0 ? drift : 0;
    for (int i = 0; i < LIMIT_COUNT; i++)
        p->limits[i].value = NAN;
    *out = p;
    return AC_OK;
}

void ac_sla_policy_free(ac_sla_policy *p) { free(p); }

/* How far a median is from the contract's value: |q / c - 1|; negative when unmeasured. */
static double drift_of(double q, double contract) { return q < 0 || contract <= 0 ? -1 : fabs(q / contract - 1); }

static void sample_values(const ac_sla_policy *p, const ac_sla_sample *s, double v[LIMIT_COUNT])
{
    v[LIMIT_P95] = s->p95_latency_ms;
    v[LIMIT_TPOT] = s->time_per_output_token_ms;
    v[LIMIT_THROUGHPUT] = s->throughput_tok_s;
    v[LIMIT_MEMORY] = s->memory_bytes;
    v[LIMIT_PROMPT] = drift_of(s->prompt_p50, p->config.contract_prompt);
    v[LIMIT_OUTPUT] = drift_of(s->output_p50, p->config.contract_output);
    v[LIMIT_BATCH] = drift_of(s->batch_p50, p->config.contract_batch);
}

static void update_limit(limit *l, double value, double now, double hysteresis)
{
    l->value = value;
    if (l->bound <= 0 || value < 0)
        return;
    int past = l->lower ? value < l->bound : value > l->bound;
    int clear = l->lower ? value >= l->bound * (1 + hysteresis) : value <= l->bound * (1 - hysteresis);
    if (!l->breached && past) {
        l->breached = 1;
        l->since = now;
    } else if (l->breached && clear) {
        l->breached = 0;
    }
}

static void remember(ac_sla_policy *p, double at, int started, const char *reason)
{
    ac_sla_decision *d = &p->history[p->next_history];
    d->at = at;
    d->started = started;
    snprintf(d->reason, sizeof d->reason, "%s", reason);
    p->next_history = (p->next_history + 1) % AC_SLA_HISTORY;
    if (p->n_history < AC_SLA_HISTORY)
        p->n_history++;
}

int ac_sla_policy_observe(ac_sla_policy *p, const ac_sla_sample *s, char *reason, size_t size)
{
    if (s->requests <= 0) /* nothing served: no evidence either way */
        return 0;
    p->last_sample = s->now;
    double v[LIMIT_COUNT];
    sample_values(p, s, v);
    int due = -1;
    for (int i = 0; i < LIMIT_COUNT; i++) {
        limit *l = &p->limits[i];
        update_limit(l, v[i], s->now, p->config.hysteresis);
        if (due < 0 && l->breached && s->now - l->since >= p->config.window_s)
            due = i;
    }
    if (due < 0 || s->now < p->cooldown_until || s->now < p->retry_at)
        return 0;
    const limit *l = &p->limits[due];
    snprintf(reason, size, "%s %.4g %s the bound %.4g for %.0f s (window %.0f s)", limit_names[due], l->value,
             l->lower ? "under" : "over", l->bound, s->now - l->since, p->config.window_s);
    return 1;
}

void ac_sla_policy_started(ac_sla_policy *p, double now, int started, const char *why)
{
    remember(p, now, started, why);
    if (started)
        p->cooldown_until = now + p->config.cooldown_s;
    else /* held back (a job runs, a refusal): ask again after another window */
        p->retry_at = now + (p->config.window_s > 1 ? p->config.window_s : 1);
}

char *ac_sla_policy_json(ac_sla_policy *p)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    const ac_sla_config *c = &p->config;
    cJSON_AddBoolToObject(root, "enabled", 1);
    cJSON_AddNumberToObject(root, "window_s", c->window_s);
    cJSON_AddNumberToObject(root, "hysteresis", c->hysteresis);
    cJSON_AddNumberToObject(root, "cooldown_s", c->cooldown_s);
    cJSON_AddNumberToObject(root, "cooldown_left_s", fmax(0, p->cooldown_until - p->last_sample));
    cJSON *limits = cJSON_AddArrayToObject(root, "limits");
    for (int i = 0; limits && i < LIMIT_COUNT; i++) {
        const limit *l = &p->limits[i];
        if (l->bound <= 0)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", limit_names[i]);
        cJSON_AddNumberToObject(o, l->lower ? "min" : "max", l->bound);
        if (isfinite(l->value) && l->value >= 0)
            cJSON_AddNumberToObject(o, "value", l->value);
        else
            cJSON_AddNullToObject(o, "value");
        cJSON_AddBoolToObject(o, "breached", l->breached);
        cJSON_AddNumberToObject(o, "breached_for_s", l->breached ? p->last_sample - l->since : 0);
        cJSON_AddItemToArray(limits, o);
    }
    cJSON *decisions = cJSON_AddArrayToObject(root, "decisions");
    for (int k = 0; decisions && k < p->n_history; k++) { /* newest first */
        const ac_sla_decision *d = &p->history[(p->next_history - 1 - k + AC_SLA_HISTORY) % AC_SLA_HISTORY];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "at", d->at);
        cJSON_AddBoolToObject(o, "started", d->started);
        cJSON_AddStringToObject(o, "reason", d->reason);
        cJSON_AddItemToArray(decisions, o);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
