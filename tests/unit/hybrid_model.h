/* The tests' small hybrid model: pattern M*E-ME (Mamba2, attention, MoE, MLP, Mamba2,
 * MoE), every layer with the same block dims (each kind reads its own fields), random
 * weights. */
#ifndef AC_TESTS_HYBRID_MODEL_H
#define AC_TESTS_HYBRID_MODEL_H

#include <string.h>

#include "autocompress/model.h"

static ac_model *hybrid_model(int vocab, int hidden, const ac_block_dims *dims, uint64_t seed, float std)
{
    const char *pattern = "M*E-ME";
    int L = (int)strlen(pattern);
    ac_arch a = {.vocab = vocab, .hidden = hidden, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = *dims;
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, seed, std);
    return m;
}

#endif
