/* Ranking a shortlist of candidate architectures by what they cost when measured and by
 * how well they recover under a short KD (module/rank/), the last step of selection for
 * Minitron++ and for AutoCompress with compress --rerank.
 *
 * For each candidate (an architecture and the parent layers it keeps):
 *   1. pruned from the importance-ordered parent into OUT/candidates/cN/pruned (f32, in a
 *      child process, so the calling process loads no weights before it measures);
 *   2. when `measure` is set, measured as compress's measure stage measures its result
 *      (`sweeps` fresh processes under the contract's workload, speed-corrected when
 *      tables are given) into cN/measure.json; a candidate that misses any target when
 *      measured is dropped, whatever the cost model predicted;
 *   3. each survivor distilled from the parent for `kd_tokens` (the same batches for all)
 *      into cN/, then scored on the first windows of val.bin (`score_tokens` of them,
 *      forward only) into cN/score.json: its held-out KD loss;
 *   4. the survivor with the lowest held-out KD loss wins (ties: the earlier one). A lone
 *      survivor wins without a KD (nothing to compare it with).
 * OUT/rank.json and OUT/rank.md list every candidate: predicted and measured cost, verdict,
 * short-KD loss (mean of its last steps), held-out KD loss, tokens, and the choice. A rerun
 * reuses what each candidate's directory already holds (pruned model, measurement, KD
 * checkpoints, score), so a killed ranking resumes.
 *
 * Measurement forks, and libgomp's thread pool does not survive a fork: with `measure`
 * set, call it from a process that has run no OpenMP region yet (compress runs it as a
 * stage of its own). It runs the KDs itself afterwards, in the calling process. */
#ifndef AUTOCOMPRESS_RANK_H
#define AUTOCOMPRESS_RANK_H

#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/optim.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ac_arch arch;                 /* the candidate (as arch.json describes one) */
    int *parent_layers;           /* arch.n_layers parent layers it keeps, increasing; NULL: 0..n-1 */
    ac_cost_prediction predicted; /* the cost model's (reported only) */
    double log_prob;              /* the search's score of it (reported only; 0 when none) */
} ac_rank_candidate;

typedef struct {
    const char *parent_dir;       /* the parent checkpoint: pruned from, the teacher, the speed reference */
    const char *importance_path;  /* importance.safetensors the parent is ordered by; NULL: already ordered */
    const char *data_dir;         /* train.bin (the KDs), val.bin (the scores) */
    const char *out_dir;          /* candidates/cN/, rank.json, rank.md */
    const ac_cost_tables *tables; /* speed correction and ratio targets of the measurement; NULL:
                                     raw times, absolute targets only */
    int measure;                  /* 1 (default): measure and drop those that miss; 0: trust the
                                     prediction (the old behaviour, for ablations) */
    int sweeps;                   /* measurement processes per candidate (default 5, as compress's
                                     measure stage) */
    int64_t kd_tokens;            /* short-KD tokens of each candidate (whole steps of batch x seq_len) */
    int64_t score_tokens;         /* held-out tokens scored per candidate (whole batches, at least one) */
    int batch, seq_len;
    float kd_tau;
    ac_adamw_params optim;        /* the short KDs' AdamW (total_steps: set per run) */
    uint64_t seed;                /* the KDs' batches and the measurements' prompts */
    const char *device;           /* where the KDs and the scores run: NULL or "cpu", "cuda" */
    ac_progress_mode progress;
} ac_rank_params;

ac_rank_params ac_rank_default_params(void);

typedef struct {
    int measured, meets;          /* measure.json read; every target met when measured */
    double latency_ms, throughput_tok_s, memory_bytes; /* measured (speed-corrected when possible) */
    int distilled;                /* given a short KD and scored */
    double kd_tail;               /* mean of the short KD's last 25 steps (training stream) */
    double held_out_kd;           /* KD loss on the held-out windows: what is ranked */
    int64_t kd_tokens, score_tokens;
} ac_rank_result;

typedef struct {
    int n;                        /* candidates */
    ac_rank_result *results;      /* n of them, owned (ac_rank_report_free) */
    int survivors;                /* met the contract when measured (all of them unmeasured) */
    int chosen;                   /* index of the winner */
    int64_t kd_tokens, score_tokens; /* spent on selection, all candidates */
} ac_rank_report;

/* One candidate's selection tokens shared out: a quarter (whole batches of batch x seq_len,
 * at least one) for the held-out score, the rest (whole steps) for the short KD. A mean
 * over a quarter of the tokens already separates candidates whose KDs differ; the KD,
 * which is what sees recovery, gets the rest. */
void ac_rank_split_tokens(int64_t per_candidate, int batch, int seq_len, int64_t *kd_tokens, int64_t *score_tokens);

/* Ranks candidates[0..n) for `contract` (see above). Fails naming the candidates' verdicts
 * when none meets the contract when measured. */
ac_status ac_rank_run(const ac_contract *contract, const ac_rank_candidate *candidates, int n,
                      const ac_rank_params *params, ac_rank_report *report);
void ac_rank_report_free(ac_rank_report *report);

/* Reads the candidates of a search.json: its "candidates" array, each entry an object with
 * "arch" (a config.json object, as in arch.json), "parent_layers", optionally "predicted"
 * (latency_ms, throughput_tok_s, memory_mib) and "log_prob"; without such an array, the
 * single architecture of arch_json with search.json's parent_layers and chosen_predicted.
 * At most `max` are read (the first ones). Free them with ac_rank_candidates_free. */
ac_status ac_rank_read_candidates(const char *search_json, const char *arch_json, int max,
                                  ac_rank_candidate **candidates, int *n);
void ac_rank_candidates_free(ac_rank_candidate *candidates, int n);

#ifdef __cplusplus
}
#endif

#endif
