/* What the pipeline's files share: the run's context, the stage table (stages.c) and
 * the report (report.c). */
#ifndef AC_COMPRESS_INTERNAL_H
#define AC_COMPRESS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/compress.h"
#include "autocompress/contract.h"
#include "util/path.h"

enum { AC_STAGE_TABLES, AC_STAGE_SEARCH, AC_STAGE_RANK, AC_STAGE_PRUNE, AC_STAGE_DISTILL, AC_STAGE_MEASURE, AC_STAGE_EVAL,
       AC_STAGE_REPORT, AC_STAGE_COUNT };

typedef struct {
    const ac_compress_params *p;
    ac_contract contract;
    char tables[AC_PATH_MAX];   /* the tables every stage after profiling reads */
    int64_t search_tokens, kd_tokens, candidate_tokens;
    int64_t router_tokens;      /* AutoCompress: the router search's share of search_tokens */
    int64_t rerank_tokens;      /* AutoCompress with rerank: each candidate's selection tokens */
    int rerank_k;               /* candidates the budget lets the ranking take (1: the pick alone) */
    int kd_steps;
    char settings[4096];        /* what decides the artifacts: a resume must match */
    int done[AC_STAGE_COUNT];
    double seconds[AC_STAGE_COUNT];
} ac_compress_ctx;

typedef struct {
    const char *name, *what;
    int in_process;             /* runs in the pipeline's own process (no OpenMP, no fork) */
    ac_status (*run)(ac_compress_ctx *c);
} ac_compress_stage;

extern const ac_compress_stage ac_compress_stages[AC_STAGE_COUNT];

/* buf = out_dir/name, for a name of at most AC_PATH_NAME_MAX bytes and a buffer of
 * AC_PATH_MAX (size); out_dir was checked once, up front, so that it always fits. */
void ac_compress_path(const ac_compress_ctx *c, const char *name, char *buf, size_t size);

/* AutoCompress re-ranks the search's candidates (--rerank > 0). */
int ac_compress_reranks(const ac_compress_ctx *c);
/* Under out_dir, where the ranking wrote rank.json and its candidates: "search" for
 * Minitron++, "search/rank" for a re-ranked search, NULL when nothing was ranked. */
const char *ac_compress_rank_dir(const ac_compress_ctx *c);
/* The chosen architecture (arch.json) and the file whose "parent_layers" say which parent
 * layers it keeps: the ranking's for a re-ranked search, else the search's. */
void ac_compress_chosen_paths(const ac_compress_ctx *c, char *arch, char *layers, size_t size);

/* report.json, report.md and the pictures from the stages' artifacts. */
ac_status ac_compress_write_report(ac_compress_ctx *c);
/* The report's headline numbers, read back from the artifacts. */
ac_status ac_compress_summary(const ac_compress_ctx *c, ac_compress_report *report);

#endif
