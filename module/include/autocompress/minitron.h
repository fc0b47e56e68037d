/* Minitron++, the paper's baseline (module/minitron/): homogeneous candidates filtered by
 * the cost model, ranked by autocompress/rank.h (measured, then a short KD each). */
#ifndef AUTOCOMPRESS_MINITRON_H
#define AUTOCOMPRESS_MINITRON_H

#include <stdint.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/optim.h"
#include "autocompress/model.h"
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
 * those predicted to meet the (planned) targets; the `candidates` largest by parameter
 * count are ranked by ac_rank_run in out_dir: pruned from the importance-ordered parent,
 * measured (with `measure`), those that miss a target when measured dropped, the others
 * distilled for their share of `candidate_tokens` (the same batches for all) and scored
 * on held-out windows; the lowest held-out KD loss wins. Its search tokens are the
 * calibration tokens plus every candidate's KD and held-out tokens.
 *
 * With `measure`, call it from a process that has run no OpenMP region (the importance is
 * then computed in a child process, and the ranking measures in forked ones). */
typedef struct {
    const char *parent_dir;    /* the parent checkpoint (required): the ranking prunes from it */
    const char *data_dir;      /* train.bin, val.bin */
    const char *out_dir;       /* importance.safetensors, candidates/cN/, rank.json, rank.md, minitron.csv,
                                  arch.json, search.json */
    int calib_seqs, seq_len;   /* calibration (the search's defaults: the same importance) */
    int candidates;            /* candidates ranked (default 4) */
    int64_t candidate_tokens;  /* selection tokens of each (ac_rank_split_tokens: 3/4 KD, 1/4 held-out
                                  score); 0: budgets.search_tokens / candidates */
    int measure;               /* 1 (default): candidates measured, those that miss dropped; 0: the
                                  prediction trusted (the old behaviour) */
    int sweeps;                /* measurement processes per candidate (default 5) */
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
    int grid, feasible, trained;   /* candidates built, predicted to meet the targets, ranked */
    int survivors;                 /* ranked ones that met the targets when measured */
    int chosen;                    /* index among the ranked */
    double chosen_kd;              /* its held-out KD loss (0 when it was the only survivor) */
    int64_t calib_tokens, tokens;  /* tokens: calibration + the ranking's KD and held-out tokens */
    ac_budget_targets targets;     /* the contract's */
    ac_budget_targets planned;     /* those the grid is filtered by (the margin inside) */
    ac_cost_prediction parent, chosen_cost;
    ac_arch arch;                  /* the winner (free with ac_arch_free) */
} ac_minitron_report;

/* Runs the baseline for `contract` on `parent` (NULL: params->parent_dir's, loaded where
 * needed); a rerun reuses what the ranking has done (each short KD resumes from its
 * checkpoint). Fails naming the targets when no homogeneous candidate is predicted to meet
 * them, or when none of the ranked ones meets them when measured. */
ac_status ac_minitron_run(const ac_model *parent, const ac_contract *contract, const ac_cost_tables *tables,
                          const ac_minitron_params *params, ac_minitron_report *report);

#ifdef __cplusplus
}
#endif

#endif
