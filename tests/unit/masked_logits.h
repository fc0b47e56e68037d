/* All logits of one sequence, prefilled at once, optionally under soft masks
 * (header-only, for the tests that compare masked and sliced models). */
#ifndef AC_TEST_MASKED_LOGITS_H
#define AC_TEST_MASKED_LOGITS_H

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"

static void logits_of(const ac_model *m, const ac_masks *masks, const int32_t *tokens, int n, float *logits)
{
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c), AC_OK);
    ac_runtime_set_masks(rt, masks);
    const int32_t *seq[1] = {tokens};
    int count[1] = {n};
    ac_batch b = {.n_seqs = 1, .tokens = seq, .n_tokens = count, .caches = &c};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_ALL, logits), AC_OK);
    ac_cache_free(c);
    ac_runtime_free(rt);
}

#endif
