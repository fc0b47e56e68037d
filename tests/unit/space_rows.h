/* The cost-table row keys a contract's search space needs (header-only, for the tests
 * that build synthetic tables): per hidden size, attention and the fixed rows
 * (embedding, LM head, sampling, other), an MLP of the parent's width, every Mamba head
 * count, every MoE combination with routed width > 0, and the MLP a MoE layer becomes
 * with its routed width at 0 (each shared width > 0). */
#ifndef AC_TEST_SPACE_ROWS_H
#define AC_TEST_SPACE_ROWS_H

#include "autocompress/contract.h"
#include "autocompress/cost.h"

static void space_rows(const ac_contract_search_space *s, int mlp_ffn, void (*put)(ac_cost_row key, void *ctx),
                       void *ctx)
{
    const ac_row_kind fixed[] = {AC_ROW_ATTENTION, AC_ROW_EMBEDDING, AC_ROW_LM_HEAD, AC_ROW_SAMPLE, AC_ROW_OTHER};
    for (int h = 0; h < s->hidden_sizes.count; h++) {
        int d = s->hidden_sizes.values[h];
        for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
            put((ac_cost_row){.kind = fixed[k], .hidden = d}, ctx);
        put((ac_cost_row){.kind = AC_ROW_MLP, .hidden = d, .ffn = mlp_ffn}, ctx);
        for (int m = 0; m < s->mamba_heads.values.count; m++)
            if (s->mamba_heads.values.values[m] > 0)
                put((ac_cost_row){.kind = AC_ROW_MAMBA, .hidden = d, .heads = s->mamba_heads.values.values[m]}, ctx);
        for (int j = 0; j < s->shared_ffn.count; j++)
            if (s->shared_ffn.values[j] > 0)
                put((ac_cost_row){.kind = AC_ROW_MLP, .hidden = d, .ffn = s->shared_ffn.values[j]}, ctx);
        for (int e = 0; e < s->routed_experts.count; e++)
            for (int i = 0; i < s->routed_ffn.count; i++)
                for (int j = 0; j < s->shared_ffn.count; j++)
                    if (s->routed_ffn.values[i] > 0)
                        put((ac_cost_row){.kind = AC_ROW_MOE, .hidden = d, .experts = s->routed_experts.values[e],
                                          .expert_ffn = s->routed_ffn.values[i], .shared_ffn = s->shared_ffn.values[j]},
                            ctx);
    }
}

#endif
