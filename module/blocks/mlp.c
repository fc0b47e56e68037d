/* Dense MLP: down(mask * relu(up(x))^2), forward and backward. */
#include "blocks/block.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t mlp_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)b->ffn;
}

static size_t mlp_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return 3 * (size_t)b->ffn;
}

/* A training forward keeps up(x), which the backward would recompute. */
static size_t mlp_saved_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)b->ffn;
}

static void mlp_forward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = c->arch;
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total, F = a->layers[layer].ffn;
    float *h = ac_block_scratch(c, (size_t)T * F);
    float *pre = c->saved ? c->saved : h;
    ac_block_linear(c, T, F, D, xn, D, w->up_proj, 0.0f, pre, F);
    ac_k_relu2(c->kctx, (size_t)T * F, pre, h);
    if (masks && masks->ffn)
        ac_k_mul_columns(c->kctx, T, F, masks->ffn, h, F);
    ac_block_linear(c, T, D, F, h, F, w->down_proj, 0.0f, out, D);
}

static void mlp_backward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = c->arch;
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total, F = a->layers[layer].ffn;
    const float *mask = masks ? masks->ffn : NULL;
    float *pre = c->saved ? c->saved : ac_block_scratch(c, (size_t)T * F); /* up(x), kept by the forward or not */
    float *act = ac_block_scratch(c, (size_t)T * F);                          /* relu2, then masked */
    float *dact = ac_block_scratch(c, (size_t)T * F);

    if (!c->saved)
        ac_k_linear(c->kctx, T, F, D, xn, D, w->up_proj, 0.0f, pre, F);
    ac_k_relu2(c->kctx, (size_t)T * F, pre, act);
    ac_k_linear_backward(c->kctx, T, D, F, NULL, F, w->down_proj, dout, D, 0.0f, dact, F, NULL);
    if (mask && mask_grads && mask_grads->ffn) /* d mask[c] = sum_t dact[t,c] relu2(pre)[t,c] */
        ac_k_column_dot(c->kctx, T, F, dact, F, act, F, mask_grads->ffn);
    if (mask) {
        ac_k_mul_columns(c->kctx, T, F, mask, act, F);
        ac_k_mul_columns(c->kctx, T, F, mask, dact, F);
    }
    if (grad)
        ac_k_linear_backward(c->kctx, T, D, F, act, F, NULL, dout, D, 0.0f, NULL, F, grad->down_proj);
    ac_k_relu2_backward(c->kctx, (size_t)T * F, pre, dact);
    ac_k_linear_backward(c->kctx, T, F, D, xn, D, w->up_proj, dact, F, 0.0f, dxn, D, grad ? grad->up_proj : NULL);
}

/* ---- the kind's entry in the block table ---- */

static ac_status mlp_validate(int i, const ac_block_dims *b)
{
    return b->ffn > 0 ? AC_OK : ac_layer_fail(i, b, "ffn must be positive, got %d", b->ffn);
}

static int mlp_same_dims(const ac_block_dims *a, const ac_block_dims *b) { return a->ffn == b->ffn; }

static int64_t mlp_params(const ac_arch *arch, const ac_block_dims *b, int active)
{
    (void)active;
    return 2 * (int64_t)b->ffn * arch->hidden;
}

static void mlp_print(const ac_block_dims *b, FILE *out) { fprintf(out, "ffn %d", b->ffn); }
static void mlp_tag(const ac_block_dims *b, char *buf, size_t size) { snprintf(buf, size, "F%d", b->ffn); }

static void mlp_layout(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w)
{
    int D = arch->hidden;
    ac_layout_product(l, &w->up_proj, 2, AC_SHAPE(b->ffn, D), "layers.%d.mixer.up_proj.weight", i);
    ac_layout_product(l, &w->down_proj, 2, AC_SHAPE(D, b->ffn), "layers.%d.mixer.down_proj.weight", i);
}

/* Leading channels of a dense MLP, or of a MoE layer's shared expert (the layer with its
 * routed experts removed). */
static void mlp_slice(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw, const ac_arch *parent,
                      const ac_block_dims *pb, const ac_layer_weights *pw)
{
    int Fp = pb->kind == AC_BLOCK_MLP ? pb->ffn : pb->kind == AC_BLOCK_MOE ? pb->shared_ffn : 0;
    ac_slice_ffn(cw->up_proj, cw->down_proj, cb->ffn, child->hidden, pw->up_proj, pw->down_proj, Fp, parent->hidden);
}

/* ---- the search ---- */

static int mlp_axis_length(const ac_block_dims *b, ac_layer_axis axis) { return axis == AC_LAYER_FFN ? b->ffn : 0; }

static size_t mlp_importance_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)b->ffn;
}

static size_t mlp_importance_doubles(const ac_block_dims *b) { return (size_t)b->ffn; }

/* ffn: relu2(up xn), the input of down_proj. */
static void mlp_importance_add(const ac_importance_chunk *ch, const ac_arch *arch, const ac_block_dims *b,
                               const ac_layer_weights *w, double *acc)
{
    int D = arch->hidden, T = ch->T, F = b->ffn;
    ac_k_linear(ch->kctx, T, F, D, ch->xn, D, w->up_proj, 0.0f, ch->scratch, F);
    ac_k_relu2(ch->kctx, (size_t)T * F, ch->scratch, ch->scratch);
    ac_importance_add_means(ch, ch->scratch, F, F, acc);
}

static void mlp_importance_finish(const ac_block_dims *b, const double *acc, float *const *scores)
{
    for (int c = 0; c < b->ffn; c++)
        scores[AC_LAYER_FFN][c] = (float)sqrt(acc[c]);
}

static void mlp_permute_hidden(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, const int *perm,
                               float *tmp)
{
    int D = arch->hidden;
    ac_permute_cols(w->up_proj, (size_t)b->ffn, D, perm, tmp);
    ac_permute_blocks(w->down_proj, D, (size_t)b->ffn, perm, tmp);
}

static void mlp_permute_axis(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, ac_layer_axis axis,
                             const int *perm, float *tmp)
{
    if (axis == AC_LAYER_FFN)
        ac_permute_ffn(w->up_proj, w->down_proj, b->ffn, arch->hidden, perm, tmp);
}

/* A MoE parent whose routed experts were all removed keeps its shared expert. */
static ac_status mlp_check_cut(int i, int p, const ac_block_dims *c, const ac_block_dims *pb)
{
    if (pb->kind == AC_BLOCK_MOE)
        return ac_check_dims(i, p, &(ac_dim_pair){"intermediate_size (from the shared expert)", c->ffn, pb->shared_ffn},
                             1, 0);
    ac_status st = ac_check_same_kind(i, p, c, pb);
    if (st != AC_OK)
        return st;
    return ac_check_dims(i, p, &(ac_dim_pair){"intermediate_size", c->ffn, pb->ffn}, 1, 0);
}

static void mlp_row_key(const ac_block_dims *b, ac_cost_row *key) { key->ffn = b->ffn; }

const ac_block_ops ac_mlp_ops = {
    .kind = AC_BLOCK_MLP,
    .name = "mlp",
    .letter = '-',
    .validate = mlp_validate,
    .same_dims = mlp_same_dims,
    .params = mlp_params,
    .print = mlp_print,
    .tag = mlp_tag,
    .layout = mlp_layout,
    .slice = mlp_slice,
    .scratch_per_token = mlp_scratch_per_token,
    .backward_scratch_per_token = mlp_backward_scratch_per_token,
    .saved_per_token = mlp_saved_per_token,
    .state_floats = ac_block_no_state,
    .kv_heads = ac_block_no_kv,
    .kv_head_dim = ac_block_no_kv,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .axis_length = mlp_axis_length,
    .axis_run = mlp_axis_length,
    .cost_axis = ac_block_no_cost_axis, /* its channels are not an axis of the cost model */
    .importance_per_token = mlp_importance_per_token,
    .importance_doubles = mlp_importance_doubles,
    .importance_add = mlp_importance_add,
    .importance_finish = mlp_importance_finish,
    .permute_hidden = mlp_permute_hidden,
    .permute_axis = mlp_permute_axis,
    .check_cut = mlp_check_cut,
    .row_key = mlp_row_key,
};
