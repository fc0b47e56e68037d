/* The function-preserving reorder of a model by its importance, so that every width the
 * search picks is a prefix: each permutation sorts its scores in descending order
 * (ties by index, NaN last) and moves every weight indexed by that axis together.
 *   hidden       columns of the embeddings (and an untied LM head), norm_f, every layer's
 *                norm, and the D-indexed dimension of every matrix (the RMSNorms are
 *                per-channel, so the logits do not change);
 *   MLP, shared  up rows and down columns;
 *   experts      router rows, correction bias entries and whole expert blocks, sorted
 *                within each routing group when n_group > 1 (a group's experts are a
 *                contiguous index range, so moving one across groups would change the
 *                routing);
 *   routed FFN   one permutation per layer applied to every expert's up rows and down
 *                columns;
 *   Mamba heads  within each group of H/G heads: their z and x rows and dt row of
 *                in_proj, their x conv channels, dt_bias, A_log, D, their gated-norm
 *                weights (the norm's groups are dI/G channels, so a head stays in its
 *                group's norm) and their out_proj columns. B and C do not move.
 * The importance arrays are permuted with the weights. Attention heads and layers do not
 * move. */
#include "autocompress/importance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

typedef struct {
    const float *score;
    int index;
} ranked;

static int by_score_desc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    int na = isnan(a->score[a->index]), nb = isnan(b->score[b->index]);
    float sa = a->score[a->index], sb = b->score[b->index];
    if (na != nb)
        return na - nb;
    if (!na && sa != sb)
        return sa > sb ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* perm[j] = the old index that moves to j: descending scores within each run of
 * `group` consecutive entries (group = n: one run). work holds n entries. */
static void sort_perm(const float *score, int n, int group, int *perm, ranked *work)
{
    for (int g0 = 0; g0 < n; g0 += group) {
        for (int i = 0; i < group; i++)
            work[i] = (ranked){score, g0 + i};
        qsort(work, (size_t)group, sizeof *work, by_score_desc);
        for (int i = 0; i < group; i++)
            perm[g0 + i] = work[i].index;
    }
}

static int is_identity(const int *perm, int n)
{
    for (int i = 0; i < n; i++)
        if (perm[i] != i)
            return 0;
    return 1;
}

/* n blocks of `block` floats: block j becomes old block perm[j]. tmp holds n * block. */
static void permute_blocks(float *data, int n, size_t block, const int *perm, float *tmp)
{
    for (int j = 0; j < n; j++)
        memcpy(tmp + (size_t)j * block, data + (size_t)perm[j] * block, block * sizeof *data);
    memcpy(data, tmp, (size_t)n * block * sizeof *data);
}

/* In each of `rows` rows of `ld` floats, the n blocks of `block` floats from column c0. */
static void permute_in_rows(float *data, size_t rows, size_t ld, size_t c0, int n, size_t block, const int *perm,
                            float *tmp)
{
    for (size_t r = 0; r < rows; r++)
        permute_blocks(data + r * ld + c0, n, block, perm, tmp);
}

/* The columns of a [rows, cols] matrix. */
static void permute_cols(float *m, size_t rows, int cols, const int *perm, float *tmp)
{
    permute_in_rows(m, rows, (size_t)cols, 0, cols, 1, perm, tmp);
}

/* The hidden dimension of layer l's weights. */
static void hidden_layer(ac_model *m, int l, const int *p, float *tmp)
{
    const ac_block_dims *b = &m->arch.layers[l];
    ac_layer_weights *w = &m->layers[l];
    int D = m->arch.hidden;
    permute_blocks(w->norm, D, 1, p, tmp);
    switch (b->kind) {
    case AC_BLOCK_MAMBA:
        permute_cols(w->in_proj, (size_t)ac_mamba_in_proj_dim(b), D, p, tmp);
        permute_blocks(w->out_proj, D, (size_t)ac_mamba_d_inner(b), p, tmp);
        break;
    case AC_BLOCK_ATTENTION: {
        size_t q = (size_t)b->attn_heads * b->attn_head_dim, kv = (size_t)b->attn_kv_heads * b->attn_head_dim;
        permute_cols(w->q_proj, q, D, p, tmp);
        permute_cols(w->k_proj, kv, D, p, tmp);
        permute_cols(w->v_proj, kv, D, p, tmp);
        permute_blocks(w->o_proj, D, q, p, tmp);
        break;
    }
    case AC_BLOCK_MLP:
        permute_cols(w->up_proj, (size_t)b->ffn, D, p, tmp);
        permute_blocks(w->down_proj, D, (size_t)b->ffn, p, tmp);
        break;
    case AC_BLOCK_MOE: {
        int E = b->n_experts, I = b->expert_ffn, S = b->shared_ffn;
        permute_cols(w->router, (size_t)E, D, p, tmp);
        permute_cols(w->experts_up, (size_t)E * I, D, p, tmp);
        for (int e = 0; e < E; e++)
            permute_blocks(w->experts_down + (size_t)e * D * I, D, (size_t)I, p, tmp);
        if (S > 0) {
            permute_cols(w->up_proj, (size_t)S, D, p, tmp);
            permute_blocks(w->down_proj, D, (size_t)S, p, tmp);
        }
        break;
    }
    }
}

/* An FFN pair up [F, D] and down [D, F] by channel. */
static void ffn_channels(float *up, float *down, int F, int D, const int *p, float *tmp)
{
    permute_blocks(up, F, (size_t)D, p, tmp);
    permute_cols(down, (size_t)D, F, p, tmp);
}

static void mamba_heads(ac_model *m, int l, const int *p, float *tmp)
{
    const ac_block_dims *b = &m->arch.layers[l];
    ac_layer_weights *w = &m->layers[l];
    int D = m->arch.hidden, H = b->mamba_heads, P = b->mamba_head_dim, K = b->conv_kernel;
    int dI = ac_mamba_d_inner(b), GN = b->mamba_groups * b->ssm_state;
    size_t PD = (size_t)P * D;
    permute_blocks(w->in_proj, H, PD, p, tmp);                                    /* z */
    permute_blocks(w->in_proj + (size_t)dI * D, H, PD, p, tmp);                   /* x */
    permute_blocks(w->in_proj + (size_t)(2 * dI + 2 * GN) * D, H, (size_t)D, p, tmp); /* dt */
    permute_blocks(w->conv_w, H, (size_t)P * K, p, tmp); /* the x channels lead the conv */
    if (w->conv_b)
        permute_blocks(w->conv_b, H, (size_t)P, p, tmp);
    permute_blocks(w->dt_bias, H, 1, p, tmp);
    permute_blocks(w->A_log, H, 1, p, tmp);
    permute_blocks(w->D, H, 1, p, tmp);
    permute_blocks(w->gate_norm, H, (size_t)P, p, tmp);
    permute_in_rows(w->out_proj, (size_t)D, (size_t)dI, 0, H, (size_t)P, p, tmp);
}

static void moe_experts(ac_model *m, int l, const int *p, float *tmp)
{
    const ac_block_dims *b = &m->arch.layers[l];
    ac_layer_weights *w = &m->layers[l];
    int D = m->arch.hidden, E = b->n_experts, I = b->expert_ffn;
    permute_blocks(w->router, E, (size_t)D, p, tmp);
    permute_blocks(w->router_bias, E, 1, p, tmp);
    permute_blocks(w->experts_up, E, (size_t)I * D, p, tmp);
    permute_blocks(w->experts_down, E, (size_t)D * I, p, tmp);
}

static void moe_routed_channels(ac_model *m, int l, const int *p, float *tmp)
{
    const ac_block_dims *b = &m->arch.layers[l];
    ac_layer_weights *w = &m->layers[l];
    int D = m->arch.hidden, I = b->expert_ffn;
    for (int e = 0; e < b->n_experts; e++)
        ffn_channels(w->experts_up + (size_t)e * I * D, w->experts_down + (size_t)e * D * I, I, D, p, tmp);
}

/* The importance must be shaped like the model: every array of its layers' kinds, and
 * (when it carries its architecture) the same dims. */
static ac_status check_shapes(const ac_model *m, const ac_importance *imp)
{
    const ac_arch *a = &m->arch;
    if (imp->n_layers != a->n_layers || imp->hidden != a->hidden)
        return ac_fail(AC_ERR_INVALID, "reorder: the importance has %d layers and hidden %d, the model %d and %d",
                       imp->n_layers, imp->hidden, a->n_layers, a->hidden);
    if (!imp->hidden_channels || !imp->mamba_heads || !imp->experts || !imp->ffn || !imp->shared_ffn)
        return ac_fail(AC_ERR_INVALID, "reorder: the importance lacks its hidden or per-layer arrays");
    if (imp->arch.layers && imp->arch.n_layers != a->n_layers)
        return ac_fail(AC_ERR_INVALID, "reorder: the importance's architecture has %d layers, the model %d",
                       imp->arch.n_layers, a->n_layers);
    for (int l = 0; l < a->n_layers; l++) {
        const ac_block_dims *b = &a->layers[l];
        if (imp->arch.layers) {
            const ac_block_dims *c = &imp->arch.layers[l];
            int same = c->kind == b->kind;
            if (same && b->kind == AC_BLOCK_MAMBA)
                same = c->mamba_heads == b->mamba_heads && c->mamba_groups == b->mamba_groups;
            if (same && b->kind == AC_BLOCK_MLP)
                same = c->ffn == b->ffn;
            if (same && b->kind == AC_BLOCK_MOE)
                same = c->n_experts == b->n_experts && c->expert_ffn == b->expert_ffn && c->shared_ffn == b->shared_ffn;
            if (!same)
                return ac_fail(AC_ERR_INVALID, "reorder: layer %d of the importance (%s) is shaped unlike the model's (%s)",
                               l, ac_block_name(c->kind), ac_block_name(b->kind));
        }
        const char *missing = NULL;
        if (b->kind == AC_BLOCK_MAMBA && !imp->mamba_heads[l])
            missing = "mamba_heads";
        else if ((b->kind == AC_BLOCK_MLP || b->kind == AC_BLOCK_MOE) && !imp->ffn[l])
            missing = "ffn";
        else if (b->kind == AC_BLOCK_MOE && !imp->experts[l])
            missing = "experts";
        else if (b->kind == AC_BLOCK_MOE && b->shared_ffn > 0 && !imp->shared_ffn[l])
            missing = "shared_ffn";
        if (missing)
            return ac_fail(AC_ERR_INVALID, "reorder: the importance has no layers.%d.%s (layer %d is %s)", l, missing, l,
                           ac_block_name(b->kind));
    }
    return AC_OK;
}

ac_status ac_model_reorder(ac_model *model, ac_importance *imp)
{
    if (!model || !imp)
        return ac_fail(AC_ERR_INVALID, "reorder: no model or no importance");
    ac_status st = check_shapes(model, imp);
    if (st != AC_OK)
        return st;
    const ac_arch *a = &model->arch;
    int D = a->hidden, L = a->n_layers;

    /* the largest permuted run: a whole tensor, all experts of a layer, or an axis */
    size_t tmp_n = (size_t)D, idx_n = (size_t)D;
    for (size_t i = 0; i < model->n_params; i++)
        tmp_n = model->params[i].count > tmp_n ? model->params[i].count : tmp_n;
    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        size_t n = 0;
        if (b->kind == AC_BLOCK_MOE) {
            size_t experts = (size_t)b->n_experts * b->expert_ffn * D;
            tmp_n = experts > tmp_n ? experts : tmp_n;
            n = (size_t)b->n_experts;
            n = (size_t)b->expert_ffn > n ? (size_t)b->expert_ffn : n;
            n = (size_t)b->shared_ffn > n ? (size_t)b->shared_ffn : n;
        } else if (b->kind == AC_BLOCK_MAMBA) {
            n = (size_t)b->mamba_heads;
        } else if (b->kind == AC_BLOCK_MLP) {
            n = (size_t)b->ffn;
        }
        idx_n = n > idx_n ? n : idx_n;
    }
    float *tmp = malloc(tmp_n * sizeof *tmp);
    int *perm = malloc(idx_n * sizeof *perm);
    ranked *work = malloc(idx_n * sizeof *work);
    if (!tmp || !perm || !work) {
        free(tmp);
        free(perm);
        free(work);
        return ac_fail(AC_ERR_NOMEM, "reorder: out of memory for %zu floats of scratch", tmp_n);
    }

    /* hidden channels: every D-indexed dimension */
    sort_perm(imp->hidden_channels, D, D, perm, work);
    if (!is_identity(perm, D)) {
        permute_cols(model->embeddings, (size_t)a->vocab, D, perm, tmp);
        if (model->lm_head != model->embeddings)
            permute_cols(model->lm_head, (size_t)a->vocab, D, perm, tmp);
        permute_blocks(model->norm_f, D, 1, perm, tmp);
        for (int l = 0; l < L; l++)
            hidden_layer(model, l, perm, tmp);
        permute_blocks(imp->hidden_channels, D, 1, perm, tmp);
    }

    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        ac_layer_weights *w = &model->layers[l];
        switch (b->kind) {
        case AC_BLOCK_MAMBA: {
            int H = b->mamba_heads;
            sort_perm(imp->mamba_heads[l], H, H / b->mamba_groups, perm, work);
            if (!is_identity(perm, H)) {
                mamba_heads(model, l, perm, tmp);
                permute_blocks(imp->mamba_heads[l], H, 1, perm, tmp);
            }
            break;
        }
        case AC_BLOCK_MLP:
            sort_perm(imp->ffn[l], b->ffn, b->ffn, perm, work);
            if (!is_identity(perm, b->ffn)) {
                ffn_channels(w->up_proj, w->down_proj, b->ffn, D, perm, tmp);
                permute_blocks(imp->ffn[l], b->ffn, 1, perm, tmp);
            }
            break;
        case AC_BLOCK_MOE: {
            int E = b->n_experts, I = b->expert_ffn, S = b->shared_ffn;
            sort_perm(imp->experts[l], E, b->n_group > 1 ? E / b->n_group : E, perm, work);
            if (!is_identity(perm, E)) {
                moe_experts(model, l, perm, tmp);
                permute_blocks(imp->experts[l], E, 1, perm, tmp);
            }
            sort_perm(imp->ffn[l], I, I, perm, work);
            if (!is_identity(perm, I)) {
                moe_routed_channels(model, l, perm, tmp);
                permute_blocks(imp->ffn[l], I, 1, perm, tmp);
            }
            if (S > 0) {
                sort_perm(imp->shared_ffn[l], S, S, perm, work);
                if (!is_identity(perm, S)) {
                    ffn_channels(w->up_proj, w->down_proj, S, D, perm, tmp);
                    permute_blocks(imp->shared_ffn[l], S, 1, perm, tmp);
                }
            }
            break;
        }
        default:
            break;
        }
    }
    free(tmp);
    free(perm);
    free(work);
    return AC_OK;
}
