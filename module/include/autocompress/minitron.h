/* Minitron++, the paper's baseline (module/minitron/): homogeneous candidates filtered by
 * the cost model, a short KD each, the best one chosen. */
#ifndef AUTOCOMPRESS_MINITRON_H
#define AUTOCOMPRESS_MINITRON_H

#include <stdint.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/optim.h"
#include "autocompress/progress.h"
#include "autocompress/search.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The paper's baseline: a grid of homogeneous candidates over the same search space (one
 * hidden size, one value per axis for every layer: Mamba heads, experts, routed and
 * shared width) times depth removal (the k least important removable layers by the
 * depth score, k up to max_depth_removal of the layers), filtered by the cost model to
 * those predicted to meet the targets; the `candidates` largest by parameter count are
 * pruned from the importance-ordered parent and each distilled for `candidate_tokens`
 * tokens (the same batches for all); the lowest KD loss (mean of the last 25 steps)
 * wins. Its search tokens are the calibration tokens plus every short KD's. */
typedef struct {
    const char *data_dir;      /* train.bin */
    const char *out_dir;       /* importance.safetensors, candidates/cN/, minitron.csv, arch.json, search.json */
    int calib_seqs, seq_len;   /* calibration (the search's defaults: the same importance) */
    int candidates;            /* short KDs (default 4) */
    int64_t candidate_tokens;  /* KD tokens of each; 0: budgets.search_tokens / candidates */
    int batch;                 /* KD batch (sequences of seq_len) */
    float kd_tau;
    float max_depth_removal;   /* fraction of the layers (default 0.2) */
    ac_adamw_params optim;     /* the short KDs' AdamW (total_steps: set per run) */
    uint64_t seed;
    ac_progress_mode progress;
    const char *device;        /* where the short KDs run: NULL or "cpu", "cuda" */
} ac_minitron_params;

ac_minitron_params ac_minitron_default_params(void);

typedef struct {
    int grid, feasible, trained;   /* candidates built, predicted to meet the targets, distilled */
    int chosen;                    /* index among the trained */
    double chosen_kd;              /* its KD loss */
    int64_t calib_tokens, tokens;  /* tokens: calibration + short KDs */
    ac_budget_targets targets;     /* the contract's */
    ac_budget_targets planned;     /* those the grid is filtered by (the margin inside) */
    ac_cost_prediction parent, chosen_cost;
    ac_arch arch;                  /* the winner (free with ac_arch_free) */
} ac_minitron_report;

/* Runs the baseline for `contract`; a rerun skips the candidates already distilled (each
 * short KD resumes from its checkpoint). Fails naming the targets when no homogeneous
 * candidate is predicted to meet them. */
ac_status ac_minitron_run(const ac_model *parent, const ac_contract *contract, const ac_cost_tables *tables,
                          const ac_minitron_params *params, ac_minitron_report *report);

#ifdef __cplusplus
}
#endif

#endif
