/* The controller: what connects a running server to the compress pipeline.
 *
 *   jobs     one recompression at a time, `autocompress compress` in a child process at a
 *            set thread count and nice level, its progress read from the child's JSON
 *            lines, its state kept in JOBS_DIR/ID/job.json so that a restart finds it (a
 *            job that was running reads "interrupted" and can be resumed from its
 *            artifacts, since compress resumes);
 *   policy   the SLA policy: live metrics against targets and the workload's shape against
 *            the contract the served model was made for, over a window, with hysteresis
 *            and a cooldown; it says when to recompress and why;
 *   profile  in-situ profiling: a sample of the served steps timed layer by layer, beside
 *            what the cost tables predict for the served architecture, and the memory
 *            the process holds beside what the runtime accounts for.
 * No HTTP here: the server's admin API calls these. Every call is thread-safe. */
#ifndef AUTOCOMPRESS_CONTROL_H
#define AUTOCOMPRESS_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/probe.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { AC_JOB_PATH_MAX = 1024, AC_JOB_ID_MAX = 32 };

/* ---- jobs ---- */

typedef enum {
    AC_JOB_RUNNING = 0,
    AC_JOB_SUCCEEDED,   /* compressed, measured to meet the contract */
    AC_JOB_MISSED,      /* compressed, measured to miss a target: kept, not swapped */
    AC_JOB_FAILED,      /* the child failed or was killed */
    AC_JOB_CANCELLED,
    AC_JOB_INTERRUPTED, /* the server stopped while it ran */
    AC_JOB_STATE_COUNT
} ac_job_state;

const char *ac_job_state_name(ac_job_state s); /* "running", "succeeded", ... */

typedef struct {
    char parent[AC_JOB_PATH_MAX]; /* the checkpoint compressed */
    char data[AC_JOB_PATH_MAX];   /* token shards (train.bin, val.bin) */
    char tables[AC_JOB_PATH_MAX]; /* cost tables; empty: the job profiles them */
    char method[16];              /* "autocompress" or "minitron++" */
    int64_t search_tokens, kd_tokens; /* 0: the contract's budgets */
    int batch, seq_len;           /* 0: compress's defaults */
    int measure_sweeps, eval_batches, profile_repeats;
    int swap_auto;                /* swap the result in when it was measured to pass */
    char origin[16];              /* "operator" or "policy" */
    char reason[256];             /* why it was started (the policy's reason) */
} ac_job_spec;

ac_job_spec ac_job_spec_default(void); /* autocompress, budgets from the contract, swap auto */

typedef struct {
    char id[AC_JOB_ID_MAX];
    ac_job_state state;
    ac_job_spec spec;
    char dir[AC_JOB_PATH_MAX];    /* JOBS_DIR/ID: job.json, contract.cfg, log, out/ */
    char stage[16];               /* the compress stage running or last run */
    int stage_index, stage_count; /* 1-based; 0 before the first */
    char task[48], unit[16];      /* the stage's progress, from the child's JSON lines */
    double done, total, rate, eta_s; /* eta_s < 0: unknown */
    double created_at, started_at, ended_at; /* unix seconds; 0: not yet */
    int pid;                      /* the child while it runs; 0 otherwise */
    int exit_code, signal;        /* how the child ended (-1: not yet) */
    int swapped;                  /* the result serves now */
    char message[512];            /* why it ended the way it did, what the swap did */
} ac_job_info;

/* Called on the job's monitor thread when a job succeeds with swap_auto: swaps the model
 * at model_dir in and returns 1, or 0 with the reason in message. */
typedef int (*ac_job_swap_fn)(void *ctx, const ac_job_info *job, const char *model_dir, char *message, size_t size);

typedef struct {
    const char *jobs_dir;
    const char *exe;   /* the autocompress binary the child runs */
    int threads;       /* OMP/OpenBLAS threads of the child's training (0: all cores) */
    int nice;          /* added to the child's nice value (0..19) */
    ac_job_swap_fn swap;
    void *swap_ctx;
} ac_jobs_config;

typedef struct ac_jobs ac_jobs;

/* Opens (creating) the jobs directory; jobs found running there are marked interrupted. */
ac_status ac_jobs_open(const ac_jobs_config *config, ac_jobs **jobs);
/* Stops the running child, if any (its job reads interrupted and can be resumed), frees. */
void ac_jobs_close(ac_jobs *jobs);

typedef enum { AC_JOBS_DONE = 0, AC_JOBS_BUSY, AC_JOBS_NOT_FOUND, AC_JOBS_WRONG_STATE, AC_JOBS_ERROR } ac_jobs_result;

/* Starts a job compressing spec->parent for the contract text (libconfig; written to the
 * job's contract.cfg). BUSY while another job runs; ERROR (message set) when the job
 * cannot start. */
ac_jobs_result ac_jobs_submit(ac_jobs *jobs, const ac_job_spec *spec, const char *contract_text,
                              char id[AC_JOB_ID_MAX]);
/* Kills a running job's child: the job reads cancelled. WRONG_STATE when it is not running. */
ac_jobs_result ac_jobs_cancel(ac_jobs *jobs, const char *id);
/* Runs compress again on a failed, cancelled or interrupted job's directory: it continues
 * from the stages done. BUSY while another job runs. */
ac_jobs_result ac_jobs_resume(ac_jobs *jobs, const char *id);
ac_jobs_result ac_jobs_get(ac_jobs *jobs, const char *id, ac_job_info *info);
/* 1 while a job runs (*info filled when info is not NULL). */
int ac_jobs_running(ac_jobs *jobs, ac_job_info *info);
/* Blocks until no job runs or timeout_s passes: 1 when none runs. */
int ac_jobs_wait_idle(ac_jobs *jobs, double timeout_s);

/* JSON (malloc'd, NULL when out of memory): one job, and every job newest first. */
char *ac_job_json(const ac_job_info *info);
char *ac_jobs_list_json(ac_jobs *jobs);

/* ---- contracts from the live workload ---- */

typedef struct {
    const char *name; /* a key of the contract's targets group: latency_ratio, memory_mib, ... */
    double value;
} ac_contract_target;

/* The base contract (libconfig text; base_name names it in messages) with its workload
 * replaced by `workload` and, when n_targets > 0, its targets by these: libconfig text
 * (malloc'd) that the contract parser accepts, or an error naming what is wrong. */
ac_status ac_contract_rewrite(const char *base, const char *base_name, const ac_contract_workload *workload,
                              const ac_contract_target *targets, int n_targets, char **text);

/* ---- the SLA policy ---- */

/* What the server saw over the last evaluation interval. Negative: not measured. */
typedef struct {
    double now;                    /* seconds, any monotonic origin */
    double p95_latency_ms;         /* end-to-end request latency */
    double time_per_output_token_ms;
    double throughput_tok_s;       /* generated tokens per second */
    double memory_bytes;           /* resident */
    double prompt_p50, output_p50, batch_p50; /* the workload's medians */
    int requests;                  /* completed in the interval; 0: the sample is skipped */
} ac_sla_sample;

typedef struct {
    /* targets (<= 0: not set) */
    double p95_latency_ms, time_per_output_token_ms, min_throughput_tok_s, memory_bytes;
    /* drift limit: a median off the contract's value by more than this fraction (0.5: by
     * more than 50% either way) counts as drift; <= 0: not checked */
    double workload_drift;
    double contract_prompt, contract_output, contract_batch; /* the served model's contract */
    double window_s;     /* a limit must be crossed for this long */
    double hysteresis;   /* once crossed, it counts as clear again only below target x (1 - h) */
    double cooldown_s;   /* no new recompression for this long after one started */
} ac_sla_config;

enum { AC_SLA_HISTORY = 16 };

typedef struct {
    double at;
    char reason[256];
    int started;         /* 1: a recompression was asked for; 0: held back (cooldown, busy) */
} ac_sla_decision;

typedef struct ac_sla_policy ac_sla_policy;

ac_status ac_sla_policy_create(const ac_sla_config *config, ac_sla_policy **policy);
void ac_sla_policy_free(ac_sla_policy *policy);
/* Feeds one sample. Returns 1 when a recompression should start now (reason filled): a
 * limit has been crossed for the whole window and the cooldown is over. The caller says
 * with ac_sla_policy_started whether it did start one. */
int ac_sla_policy_observe(ac_sla_policy *policy, const ac_sla_sample *sample, char *reason, size_t size);
/* Records the outcome of a decision (started: the cooldown begins; else why not). */
void ac_sla_policy_started(ac_sla_policy *policy, double now, int started, const char *why);
/* The policy's state and its last decisions (JSON, malloc'd), with "enabled": true (a
 * server without a policy answers "enabled": false). */
char *ac_sla_policy_json(ac_sla_policy *policy);

/* ---- in-situ profiling ---- */

typedef struct ac_live_profile ac_live_profile;

/* Samples one serving step in `every` of a model of architecture `arch` (0: paused). */
ac_status ac_live_profile_create(const ac_arch *arch, int every, ac_live_profile **profile);
void ac_live_profile_free(ac_live_profile *profile);
/* Changes the sampling rate (0: pause) from any thread; what was sampled stays. */
void ac_live_profile_set_every(ac_live_profile *profile, int every);
/* From the serving loop, before a forward of n_seqs sequences (n_decode of them decoding,
 * `tokens` in all, `context` tokens in each cache on average): the probe to attach to the
 * runtime for this step, or NULL when the step is not sampled. Not thread-safe against
 * itself: one serving thread calls it and step_end. */
ac_probe *ac_live_profile_step_begin(ac_live_profile *profile, int n_seqs, int n_decode, int tokens,
                                     double context);
/* After the forward of a sampled step (ok: it succeeded): its spans go to the report. */
void ac_live_profile_step_end(ac_live_profile *profile, int ok);
/* The latest memory: the runtime's W, C, P and R and the process's resident bytes;
 * `baseline` is what the process held before it loaded a model, so that the residual
 * resident - baseline - (W + C + P + R) is the profiling runs' eps (autocompress/cost.h). */
void ac_live_profile_memory(ac_live_profile *profile, const ac_memory_sample *sample, size_t baseline);
/* Per step shape (phase and batch), the live median of every layer over the last sampled
 * steps beside the row `tables` (NULL: none) holds for its configuration, and the memory
 * residual over the runtime's accounting (JSON, malloc'd; NULL when out of memory). */
char *ac_live_profile_json(ac_live_profile *profile, const ac_cost_tables *tables);

#ifdef __cplusplus
}
#endif

#endif
