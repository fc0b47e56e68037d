/* Where a contract meets its parent: the rules that need the parent's architecture. */
#include "autocompress/contract.h"

ac_status ac_contract_check_parent(const ac_contract *c, const ac_arch *parent)
{
    const ac_candidates *experts = &c->search.routed_experts;
    const char *name = c->source[0] ? c->source : c->name;
    int last = experts->count - 1; /* strictly descending: the fewest experts */
    for (int l = 0; last >= 0 && l < parent->n_layers; l++) {
        const ac_block_dims *b = &parent->layers[l];
        if (b->kind == AC_BLOCK_MOE && experts->values[last] < b->top_k)
            return ac_fail(AC_ERR_INVALID, "%s: search_space.routed_experts[%d] = %d is below the parent's top_k "
                           "(num_experts_per_tok) %d of layer %d: each token is routed to %d experts, so a MoE layer "
                           "needs at least that many", name, last, experts->values[last], b->top_k, l, b->top_k);
    }
    return AC_OK;
}
