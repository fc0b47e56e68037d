/* Next-line exact match (the rules are in autocompress/eval.h): the bytes of every id,
 * the choice of line starts, and the batched greedy completion. */
#ifndef AC_EVAL_INTERNAL_H
#define AC_EVAL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/model.h"
#include "autocompress/progress.h"
#include "autocompress/tokenizer.h"
#include "autocompress/tokens.h"

/* The decoded bytes of ids [0, n): id i is bytes[offset[i], offset[i + 1]). Special
 * ids, ids the tokenizer does not use and ids beyond it are not usable. */
typedef struct {
    int n;
    size_t *offset;
    char *bytes;
    unsigned char *usable;
} ac_eval_pieces;

ac_status ac_eval_pieces_init(ac_eval_pieces *pieces, const ac_tokenizer *tokenizer, int n);
void ac_eval_pieces_free(ac_eval_pieces *pieces);

typedef struct {
    int context;    /* tokens before a line start */
    int max_tokens; /* of a reference line and of a completion */
} ac_line_rules;

/* The tokens of the reference line at i (through the first piece holding '\n'), or 0
 * when no line that counts starts there. */
int ac_eval_line_at(const ac_tokens *tokens, const ac_eval_pieces *pieces, const ac_line_rules *rules, uint64_t i);

/* The line starts used for `want` lines, in order: a malloc'd array of *n (<= want)
 * positions (NULL when *n is 0). */
ac_status ac_eval_select_lines(const ac_tokens *tokens, const ac_eval_pieces *pieces, const ac_line_rules *rules,
                               int want, uint64_t **starts, int *n);

/* Greedy completions of the lines at starts[0..n), `group` sequences per forward:
 * ids[j * max_tokens ..] receives line j's generated tokens, lens[j] their count and
 * matched[j] 1 when the line matched. progress (may be NULL) advances by one per line. */
ac_status ac_eval_complete_lines(const ac_model *model, const ac_tokens *tokens, const ac_eval_pieces *pieces,
                                 const ac_line_rules *rules, const uint64_t *starts, int n, int group,
                                 ac_progress *progress, int32_t *ids, int *lens, unsigned char *matched);

#endif
