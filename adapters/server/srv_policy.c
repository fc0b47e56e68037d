/* The SLA policy's thread: every interval it samples the live metrics, feeds the policy
 * (module/control) and, when the policy says so, starts a recompression for the live
 * workload through srv_recompress.c. */
#include "server/srv_control.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/clock.h"
#include "autocompress/contract.h"
#include "autocompress/log.h"
#include "autocompress/probe.h"

struct srv_policy {
    srv_control *control;
    srv_metrics *metrics;
    double interval_s;
    ac_sla_policy *policy;
    pthread_mutex_t mu;   /* the policy and the thread's stop flag */
    pthread_cond_t wake;
    pthread_t thread;
    int thread_started, stopping;
};


/* Starts a recompression for the live workload, as the policy asked: 1 when it started. */
static int start_job(srv_policy *p, const char *reason, char *why, size_t size)
{
    ac_job_info running;
    if (ac_jobs_running(srv_control_jobs(p->control), &running)) {
        snprintf(why, size, "held back: job %s runs (%s)", running.id, reason);
        return 0;
    }
    srv_job_result r;
    srv_recompress_live(p->control, reason, &r);
    if (r.status == 202)
        snprintf(why, size, "%s: job %s", reason, r.job.id);
    else
        snprintf(why, size, "not started (%s): %s", reason, r.message);
    return r.status == 202;
}

/* Waits one interval on the wake condition (policy lock held). */
static void wait_interval(srv_policy *p)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + p->interval_s;
    until.tv_sec = (time_t)t;
    until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
    pthread_cond_timedwait(&p->wake, &p->mu, &until);
}

static void *policy_main(void *arg)
{
    srv_policy *p = arg;
    double last = ac_monotonic_s();
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        wait_interval(p);
        if (p->stopping)
            break;
        double now = ac_monotonic_s();
        ac_sla_sample sample;
        char reason[256], why[1024]; /* the reason and a refusal's message whole */
        int fire = srv_metrics_sla_sample(p->metrics, last, now, &sample) &&
                   ac_sla_policy_observe(p->policy, &sample, reason, sizeof reason);
        last = now;
        if (!fire)
            continue;
        pthread_mutex_unlock(&p->mu); /* starting a job reads files and forks: not under the lock */
        int started = start_job(p, reason, why, sizeof why);
        ac_info("sla policy: %s", why);
        pthread_mutex_lock(&p->mu);
        ac_sla_policy_started(p->policy, now, started, why);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The policy's config from the server's: the targets, and the contract's workload as
 * the reference of drift. */
static ac_status make_policy(const srv_config *config, ac_sla_policy **policy)
{
    const srv_sla_config *s = &config->sla;
    const srv_control_config *cc = &config->control;
    ac_sla_config pc = {.p95_latency_ms = s->p95_latency_ms,
                        .time_per_output_token_ms = s->time_per_output_token_ms,
                        .min_throughput_tok_s = s->min_throughput_tok_s,
                        .memory_bytes = s->memory_mib * 1048576.0,
                        .workload_drift = s->workload_drift,
                        .window_s = s->window_s,
                        .hysteresis = s->hysteresis,
                        .cooldown_s = s->cooldown_s};
    if (!cc->contract[0] || !cc->data[0])
        return ac_fail(AC_ERR_INVALID, "sla: the policy recompresses from the live workload, so control.contract "
                                       "(the served model's contract) and control.data are needed");
    ac_contract contract;
    ac_status st = ac_contract_load(cc->contract, &contract);
    if (st != AC_OK)
        return st;
    pc.contract_prompt = contract.workload.input_tokens;
    pc.contract_output = contract.workload.output_tokens;
    pc.contract_batch = contract.workload.batch;
    return ac_sla_policy_create(&pc, policy);
}

ac_status srv_policy_create(srv_control *control, srv_metrics *metrics, const srv_config *config,
                            srv_policy **out)
{
    *out = NULL;
    srv_policy *p = calloc(1, sizeof *p);
    if (!p)
        return ac_fail(AC_ERR_NOMEM, "sla policy: out of memory");
    p->control = control;
    p->metrics = metrics;
    p->interval_s = config->sla.interval_s;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    ac_status st = make_policy(config, &p->policy);
    if (st == AC_OK) {
        int rc = pthread_create(&p->thread, NULL, policy_main, p);
        if (rc != 0)
            st = ac_fail(AC_ERR_INTERNAL, "control: cannot start the policy's thread: %s", strerror(rc));
        p->thread_started = rc == 0;
    }
    if (st != AC_OK) {
        srv_policy_free(p);
        return st;
    }
    *out = p;
    return AC_OK;
}

void srv_policy_free(srv_policy *p)
{
    if (!p)
        return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stopping = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    ac_sla_policy_free(p->policy);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p);
}

char *srv_policy_state_json(srv_policy *p)
{
    pthread_mutex_lock(&p->mu);
    char *state = ac_sla_policy_json(p->policy);
    pthread_mutex_unlock(&p->mu);
    return state;
}
