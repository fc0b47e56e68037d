/* `autocompress compress`: the whole pipeline, from a parent checkpoint, a deployment
 * contract and token shards to a compressed checkpoint measured against the contract.
 *
 * Stages, each writing under out_dir, each run in a child process (stages train with
 * OpenMP, and measurement forks, which libgomp's threads do not survive):
 *   tables   profile the contract's search space into tables.json (skipped when tables
 *            are given: their path is recorded)
 *   search   search/: importance, then the architecture, by AutoCompress's routers or by
 *            the Minitron++ baseline (autocompress/search.h); arch.json, search.json;
 *            Minitron++ ranks its shortlist here (autocompress/rank.h: search/rank.json)
 *   rank     search/rank/ (AutoCompress with rerank > 0): the search's candidates (or
 *            its single pick) ranked by autocompress/rank.h: measured, those that miss
 *            a target dropped, the others given a short KD each, the lowest held-out
 *            KD loss kept; rank.json, rank.md, arch.json
 *   prune    pruned/: the importance-ordered parent sliced to the chosen architecture
 *   distill  distill/: KD from the parent for the KD-token budget (loss.csv, checkpoints);
 *            model/: the final checkpoint with the parent's tokenizer
 *   measure  measure.json: the final checkpoint measured under the contract's workload
 *   eval     eval.json: KD loss, cross-entropy, teacher agreement on held-out tokens
 *   report   report.json, report.md, arch.png (kept width per parent layer), loss.png
 * compress.json records the settings and the stages done. A rerun with the same settings
 * skips the stages done and resumes the first unfinished one from its artifacts (search
 * and distillation resume from their checkpoints); other settings are refused, naming
 * them. */
#ifndef AUTOCOMPRESS_COMPRESS_H
#define AUTOCOMPRESS_COMPRESS_H

#include <stdint.h>

#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AC_METHOD_AUTOCOMPRESS = 0, AC_METHOD_MINITRON } ac_compress_method;

const char *ac_compress_method_name(ac_compress_method m); /* "autocompress", "minitron++" */
ac_status ac_compress_method_from_name(const char *name, ac_compress_method *m);

typedef struct {
    const char *model_dir;      /* the parent checkpoint */
    const char *contract_path;
    const char *data_dir;       /* train.bin (search, KD), val.bin (eval) */
    const char *out_dir;
    const char *tables_path;    /* NULL: profile into out_dir/tables.json */
    const char *tables_cache;   /* with no tables_path: a folder of tables profiled here
                                   (ac_cost_tables_cache_path), reused when one fits and
                                   filled when none does; NULL: none */
    int foreign_tables;         /* 1: tables measured elsewhere (another fingerprint) are
                                   used, with a warning and a line in the report */
    ac_compress_method method;
    int64_t search_tokens;      /* 0: the contract's budgets.search_tokens */
    int64_t kd_tokens;          /* 0: the contract's budgets.kd_tokens */
    int batch, seq_len;         /* KD (and Minitron++'s short KDs) batches; default 8 x 128 */
    float kd_lr;                /* peak AdamW learning rate of the KD (default 1e-3) */
    int candidates;             /* Minitron++: candidates ranked (default 4) */
    int64_t candidate_tokens;   /* Minitron++: selection tokens of each (short KD and held-out
                                   score); 0: 2 x search tokens / candidates (the paper's
                                   baseline spends about 2-3x the search tokens of AutoCompress) */
    int rerank;                 /* AutoCompress: the search's top candidates re-ranked (default 4;
                                   0: the search's pick as it is, the old behaviour) */
    double rerank_share;        /* AutoCompress with rerank: the fraction of the search tokens
                                   beyond the search's calibration for the ranking's KDs and
                                   scores (default 0.5); the router steps get the rest, so
                                   search tokens count all selection. Fewer candidates are
                                   ranked when the share cannot give each a KD step and a
                                   scored batch (none below two: the pick alone, measured) */
    int measure_candidates;     /* 1 (default): ranked candidates are measured and those that
                                   miss a target cannot be chosen; 0: the prediction trusted */
    int profile_repeats;        /* profiling sweeps (default 5) */
    int measure_sweeps;         /* measurement processes of the final model (default 5) */
    int eval_batches;           /* held-out batches of batch x seq_len (0, the default: all of val.bin) */
    uint64_t seed;
    const char *from_stage;     /* NULL, or a stage name: that stage and those after it run
                                   again (e.g. "measure" on a quieter machine) */
    ac_progress_mode progress;
} ac_compress_params;

ac_compress_params ac_compress_default_params(void);

typedef struct {
    int stages_run, stages_skipped;
    int pass;                   /* the final model met every target when measured */
    int64_t search_tokens, kd_tokens; /* search: everything spent on selection */
    double kd_loss;             /* mean of the KD's last 25 steps */
    double seconds;
} ac_compress_report;

ac_status ac_compress_run(const ac_compress_params *params, ac_compress_report *report);

#ifdef __cplusplus
}
#endif

#endif
