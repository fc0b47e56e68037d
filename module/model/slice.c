/* Models cut from a parent: every tensor keeps the parent's leading hidden channels,
 * heads, groups, experts and FFN channels (the prefix an importance ranking keeps once
 * channels are sorted), through each kind's slice in the block table; what the parent
 * lacks stays random. */
#include "model/model_internal.h"
#include "blocks/block.h"

ac_status ac_model_slice(const ac_model *parent, const ac_arch *arch, const int *parent_layer, uint64_t seed,
                         ac_model **out)
{
    *out = NULL;
    ac_status host = ac_model_check_host(parent, "slicing");
    if (host != AC_OK)
        return host;
    if (parent->arch.vocab != arch->vocab)
        return ac_fail(AC_ERR_INVALID, "slice: vocabulary %d differs from the parent's %d", arch->vocab,
                       parent->arch.vocab);
    ac_model *m = NULL;
    ac_status st = ac_model_create(arch, &m);
    if (st != AC_OK)
        return st;
    ac_model_init_random(m, seed, 0.02f);
    int Dc = arch->hidden, Dp = parent->arch.hidden, V = arch->vocab;
    ac_copy_rows(m->embeddings, Dc, 0, parent->embeddings, Dp, 0, V);
    if (!arch->tie_embeddings)
        ac_copy_rows(m->lm_head, Dc, 0, parent->lm_head, Dp, 0, V);
    ac_copy_prefix(m->norm_f, Dc, parent->norm_f, Dp);
    for (int i = 0; i < arch->n_layers; i++) {
        int p = parent_layer ? parent_layer[i] : i;
        if (p < 0 || p >= parent->arch.n_layers)
            continue;
        const ac_block_dims *cb = &arch->layers[i];
        ac_copy_prefix(m->layers[i].norm, Dc, parent->layers[p].norm, Dp);
        ac_block(cb)->slice(arch, cb, &m->layers[i], &parent->arch, &parent->arch.layers[p], &parent->layers[p]);
    }
    *out = m;
    return AC_OK;
}
