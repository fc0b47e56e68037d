/* The function-preserving reorder of a model by its importance, so that every width the
 * search picks is a prefix: each permutation sorts its scores in descending order
 * (ties by index, NaN last) and moves every weight indexed by that axis together.
 *   hidden       columns of the embeddings (and an untied LM head), norm_f, every layer's
 *                norm, and the D-indexed dimension of every matrix (the RMSNorms are
 *                per-channel, so the logits do not change): the kinds' permute_hidden;
 *   each axis    sorted within the runs the kind names (axis_run: a Mamba head within its
 *                group, an expert within its routing group), the weights it indexes
 *                moved by the kind's permute_axis (blocks/: MLP and shared channels,
 *                experts, the routed experts' channels, Mamba heads).
 * The importance arrays are permuted with the weights. Attention heads and layers do not
 * move. */
#include "autocompress/importance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/block.h"
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

/* The importance's array of layer l on an axis. */
static float *axis_scores(const ac_importance *imp, int l, ac_layer_axis axis)
{
    float **const arrays[AC_LAYER_AXES] = {imp->mamba_heads, imp->experts, imp->ffn, imp->shared_ffn};
    return arrays[axis][l];
}

/* The layer's arrays agree with the model's: same kind, every axis of the same length and runs. */
static int same_axes(const ac_block_dims *a, const ac_block_dims *b)
{
    if (a->kind != b->kind)
        return 0;
    const ac_block_ops *ops = ac_block(b);
    for (int axis = 0; axis < AC_LAYER_AXES; axis++)
        if (ops->axis_length(a, (ac_layer_axis)axis) != ops->axis_length(b, (ac_layer_axis)axis) ||
            ops->axis_run(a, (ac_layer_axis)axis) != ops->axis_run(b, (ac_layer_axis)axis))
            return 0;
    return 1;
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
        if (imp->arch.layers && !same_axes(&imp->arch.layers[l], b))
            return ac_fail(AC_ERR_INVALID, "reorder: layer %d of the importance (%s) is shaped unlike the model's (%s)",
                           l, ac_block_name(imp->arch.layers[l].kind), ac_block_name(b->kind));
        const char *missing = NULL;
        for (int axis = 0; !missing && axis < AC_LAYER_AXES; axis++)
            if (ac_block(b)->axis_length(b, (ac_layer_axis)axis) > 0 && !axis_scores(imp, l, (ac_layer_axis)axis))
                missing = ac_layer_axis_name((ac_layer_axis)axis);
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

    /* the largest permuted run: a whole tensor, a layer's weights, or an axis */
    size_t tmp_n = (size_t)D, idx_n = (size_t)D;
    for (size_t i = 0; i < model->n_params; i++)
        tmp_n = model->params[i].count > tmp_n ? model->params[i].count : tmp_n;
    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        size_t layer = ac_block_weight_bytes(a, b, AC_DTYPE_F32) / sizeof(float);
        tmp_n = layer > tmp_n ? layer : tmp_n;
        for (int axis = 0; axis < AC_LAYER_AXES; axis++) {
            size_t n = (size_t)ac_block(b)->axis_length(b, (ac_layer_axis)axis);
            idx_n = n > idx_n ? n : idx_n;
        }
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
        ac_permute_cols(model->embeddings, (size_t)a->vocab, D, perm, tmp);
        if (model->lm_head != model->embeddings)
            ac_permute_cols(model->lm_head, (size_t)a->vocab, D, perm, tmp);
        ac_permute_blocks(model->norm_f, D, 1, perm, tmp);
        for (int l = 0; l < L; l++) {
            ac_permute_blocks(model->layers[l].norm, D, 1, perm, tmp);
            ac_block(&a->layers[l])->permute_hidden(a, &a->layers[l], &model->layers[l], perm, tmp);
        }
        ac_permute_blocks(imp->hidden_channels, D, 1, perm, tmp);
    }

    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        const ac_block_ops *ops = ac_block(b);
        for (int axis = 0; axis < AC_LAYER_AXES; axis++) {
            int n = ops->axis_length(b, (ac_layer_axis)axis);
            if (n == 0)
                continue;
            float *scores = axis_scores(imp, l, (ac_layer_axis)axis);
            sort_perm(scores, n, ops->axis_run(b, (ac_layer_axis)axis), perm, work);
            if (!is_identity(perm, n)) {
                ops->permute_axis(a, b, &model->layers[l], (ac_layer_axis)axis, perm, tmp);
                ac_permute_blocks(scores, n, 1, perm, tmp);
            }
        }
    }
    free(tmp);
    free(perm);
    free(work);
    return AC_OK;
}
