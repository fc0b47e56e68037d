/* What the ranking's files share: the candidates' paths, the score's settings and the
 * table (rank_io.c). */
#ifndef AC_RANK_INTERNAL_H
#define AC_RANK_INTERNAL_H

#include <stddef.h>

#include "autocompress/eval.h"
#include "autocompress/rank.h"
#include "util/path.h"

/* buf = out_dir/candidates/cI[/name]. */
ac_status ac_rank_path(const ac_rank_params *p, int i, const char *name, char *buf, size_t size);
/* The held-out score's settings: the first score_tokens of val.bin in whole batches. */
ac_eval_params ac_rank_score_params(const ac_rank_params *p);
/* rank.json, rank.md and arch.json (the winner's, when there is one) in out_dir. */
ac_status ac_rank_write(const ac_contract *contract, const ac_rank_candidate *c, const ac_rank_params *p,
                        const ac_rank_report *rep);

#endif
