/* Candidate layer configurations: block dims from a parent layer and a choice, and the
 * table key of a block. */
#include "cost/cost_internal.h"

#include <stdio.h>
#include <string.h>

int ac_mamba_groups_for(int heads, int parent_groups)
{
    for (int g = parent_groups; g > 1; g--)
        if (parent_groups % g == 0 && heads % g == 0)
            return g;
    return 1;
}

void ac_dims_mamba(ac_block_dims *b, const ac_block_dims *parent, int heads)
{
    *b = *parent;
    b->kind = AC_BLOCK_MAMBA;
    b->mamba_heads = heads;
    b->mamba_groups = ac_mamba_groups_for(heads, parent->mamba_groups);
}

void ac_dims_moe(ac_block_dims *b, const ac_block_dims *parent, int experts, int expert_ffn, int shared_ffn)
{
    *b = *parent;
    b->kind = AC_BLOCK_MOE;
    b->n_experts = experts;
    b->expert_ffn = expert_ffn;
    b->shared_ffn = shared_ffn;
    if (b->top_k > experts)
        b->top_k = experts;
    /* keep group-limited routing valid: a group count that divides the experts, with at
     * least two experts a group, enough kept groups for top_k */
    int g = parent->n_group > 0 ? parent->n_group : 1;
    while (g > 1 && (experts % g || experts / g < 2))
        g--;
    b->n_group = g;
    if (b->topk_group > g)
        b->topk_group = g;
    if (b->topk_group < 1)
        b->topk_group = 1;
    while (b->topk_group < g && b->topk_group * (experts / g) < b->top_k)
        b->topk_group++;
}

void ac_dims_mlp(ac_block_dims *b, const ac_block_dims *parent, int ffn)
{
    *b = *parent;
    b->kind = AC_BLOCK_MLP;
    b->ffn = ffn;
}

void ac_row_label(const ac_cost_row *k, char *buf, size_t size)
{
    switch (k->kind) {
    case AC_ROW_MAMBA: snprintf(buf, size, "mamba H%d", k->heads); break;
    case AC_ROW_MLP: snprintf(buf, size, "mlp F%d", k->ffn); break;
    case AC_ROW_MOE: snprintf(buf, size, "moe E%d F%d S%d", k->experts, k->expert_ffn, k->shared_ffn); break;
    default: snprintf(buf, size, "%s", ac_row_kind_name(k->kind)); break;
    }
}
