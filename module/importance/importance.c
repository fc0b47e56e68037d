/* Minitron importance on calibration tokens: the driver runs chunks of sequences with
 * every layer's input kept, and each layer's activations are recomputed from its normed
 * input to score them. For an activation a[t, c] of one sequence, s[c] = mean_t |a[t, c]|;
 * a score is sqrt(sum over sequences of s[c]^2) (sums of squares are kept in double):
 *   hidden       every block's normed input, the squares also summed over layers;
 *   depth        mean over tokens of 1 - cos(x_l, x_{l+1}), cos as torch's
 *                cosine_similarity (norms clamped at 1e-8);
 *   the kinds'   what each kind scores from its normed input, in its entry of the block
 *   axes         table (importance_add): MLP channels, MoE experts and channels, Mamba
 *                heads.
 * Saved as safetensors: "hidden" [D], "depth" [L], "layers.N.mamba_heads" [H],
 * "layers.N.experts" [E], "layers.N.ffn" [F or I], "layers.N.shared_ffn" [S], all F32,
 * and the token count as the metadata "tokens". */
#include "autocompress/importance.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/safetensors.h"
#include "blocks/block.h"
#include "runtime/runtime_internal.h"

/* ---- the arrays of one architecture ---- */

/* The length of a layer's array of an axis; 0: the layer has none. */
static int axis_length(const ac_block_dims *b, int axis)
{
    return ac_block(b)->axis_length(b, (ac_layer_axis)axis);
}

static float **axis_arrays(const ac_importance *imp, int axis)
{
    switch (axis) {
    case AC_LAYER_MAMBA_HEADS: return imp->mamba_heads;
    case AC_LAYER_EXPERTS: return imp->experts;
    case AC_LAYER_FFN: return imp->ffn;
    case AC_LAYER_SHARED_FFN: return imp->shared_ffn;
    }
    return NULL;
}

void ac_importance_free(ac_importance *imp)
{
    if (!imp)
        return;
    for (int axis = 0; axis < AC_LAYER_AXES; axis++) {
        float **arrays = axis_arrays(imp, axis);
        if (arrays)
            for (int l = 0; l < imp->n_layers; l++)
                free(arrays[l]);
        free(arrays);
    }
    free(imp->hidden_channels);
    free(imp->depth);
    ac_arch_free(&imp->arch);
    memset(imp, 0, sizeof *imp);
}

/* Zeroed arrays shaped by `arch` (a copy of which the importance keeps). */
static ac_status importance_alloc(const ac_arch *arch, ac_importance *imp)
{
    memset(imp, 0, sizeof *imp);
    ac_status st = ac_arch_copy(&imp->arch, arch);
    if (st != AC_OK)
        return st;
    int L = arch->n_layers, D = arch->hidden;
    imp->n_layers = L;
    imp->hidden = D;
    imp->hidden_channels = calloc((size_t)(D > 0 ? D : 1), sizeof(float));
    imp->depth = calloc((size_t)(L > 0 ? L : 1), sizeof(float));
    imp->mamba_heads = calloc((size_t)(L > 0 ? L : 1), sizeof(float *));
    imp->experts = calloc((size_t)(L > 0 ? L : 1), sizeof(float *));
    imp->ffn = calloc((size_t)(L > 0 ? L : 1), sizeof(float *));
    imp->shared_ffn = calloc((size_t)(L > 0 ? L : 1), sizeof(float *));
    int ok = imp->hidden_channels && imp->depth && imp->mamba_heads && imp->experts && imp->ffn && imp->shared_ffn;
    for (int axis = 0; ok && axis < AC_LAYER_AXES; axis++) {
        float **arrays = axis_arrays(imp, axis);
        for (int l = 0; ok && l < L; l++) {
            int n = axis_length(&arch->layers[l], axis);
            if (n > 0) {
                arrays[l] = calloc((size_t)n, sizeof(float));
                ok = arrays[l] != NULL;
            }
        }
    }
    if (!ok) {
        ac_importance_free(imp);
        return ac_fail(AC_ERR_NOMEM, "importance: out of memory for the score arrays");
    }
    return AC_OK;
}

ac_status ac_importance_copy(ac_importance *dst, const ac_importance *src)
{
    ac_status st = importance_alloc(&src->arch, dst);
    if (st != AC_OK)
        return st;
    memcpy(dst->hidden_channels, src->hidden_channels, (size_t)src->hidden * sizeof(float));
    memcpy(dst->depth, src->depth, (size_t)src->n_layers * sizeof(float));
    for (int axis = 0; axis < AC_LAYER_AXES; axis++)
        for (int l = 0; l < src->n_layers; l++) {
            int n = axis_length(&src->arch.layers[l], axis);
            if (n > 0)
                memcpy(axis_arrays(dst, axis)[l], axis_arrays(src, axis)[l], (size_t)n * sizeof(float));
        }
    dst->tokens = src->tokens;
    return AC_OK;
}

/* ---- accumulation ---- */

/* Sums while the calibration runs: squares of per-sequence means, and each layer's own
 * (its kind's importance_doubles). */
typedef struct {
    double *hidden;    /* [D] */
    double *depth;     /* [L]: sum over tokens of 1 - cos */
    double **layer;    /* per layer, NULL for a kind that scores nothing */
    int L;
} accum;

static void accum_free(accum *a)
{
    for (int l = 0; a->layer && l < a->L; l++)
        free(a->layer[l]);
    free(a->layer);
    free(a->hidden);
    free(a->depth);
    memset(a, 0, sizeof *a);
}

static ac_status accum_alloc(const ac_arch *arch, accum *a)
{
    int L = arch->n_layers;
    size_t n = (size_t)(L > 0 ? L : 1);
    memset(a, 0, sizeof *a);
    a->L = L;
    a->hidden = calloc((size_t)arch->hidden, sizeof(double));
    a->depth = calloc(n, sizeof(double));
    a->layer = calloc(n, sizeof *a->layer);
    int ok = a->hidden && a->depth && a->layer;
    for (int l = 0; ok && l < L; l++) {
        const ac_block_dims *b = &arch->layers[l];
        const ac_block_ops *ops = ac_block(b);
        size_t c = ops->importance_add ? ops->importance_doubles(b) : 0;
        if (c > 0)
            ok = (a->layer[l] = calloc(c, sizeof(double))) != NULL;
    }
    if (!ok) {
        accum_free(a);
        return ac_fail(AC_ERR_NOMEM, "importance: out of memory for the accumulators");
    }
    return AC_OK;
}

/* Scores layer l of a chunk whose stream entering each layer is xs; ch->xn receives the
 * layer's normed input. */
static void score_layer(ac_importance_chunk *ch, float *xn, const ac_model *m, const float *xs, int l, accum *acc)
{
    const ac_arch *a = &m->arch;
    const ac_block_dims *b = &a->layers[l];
    const ac_layer_weights *w = &m->layers[l];
    int D = a->hidden, T = ch->T;
    const float *x = xs + (size_t)l * T * D, *next = x + (size_t)T * D;

    for (int t = 0; t < T; t++) {
        const float *u = x + (size_t)t * D, *v = next + (size_t)t * D;
        double dot = 0.0, uu = 0.0, vv = 0.0;
        for (int c = 0; c < D; c++) {
            dot += (double)u[c] * v[c];
            uu += (double)u[c] * u[c];
            vv += (double)v[c] * v[c];
        }
        acc->depth[l] += 1.0 - dot / (fmax(sqrt(uu), 1e-8) * fmax(sqrt(vv), 1e-8));
    }

    ac_k_rmsnorm(ch->kctx, T, D, x, D, w->norm, a->norm_eps, xn, D);
    ac_importance_add_means(ch, xn, D, D, acc->hidden);
    const ac_block_ops *ops = ac_block(b);
    if (ops->importance_add)
        ops->importance_add(ch, a, b, w, acc->layer[l]);
}

static void finish(const ac_arch *a, const accum *acc, int64_t tokens, ac_importance *imp)
{
    for (int c = 0; c < a->hidden; c++)
        imp->hidden_channels[c] = (float)sqrt(acc->hidden[c]);
    for (int l = 0; l < a->n_layers; l++) {
        const ac_block_dims *b = &a->layers[l];
        const ac_block_ops *ops = ac_block(b);
        imp->depth[l] = (float)(acc->depth[l] / (double)tokens);
        float *const scores[AC_LAYER_AXES] = {imp->mamba_heads[l], imp->experts[l], imp->ffn[l], imp->shared_ffn[l]};
        if (ops->importance_add)
            ops->importance_finish(b, acc->layer[l], scores);
    }
    imp->tokens = tokens;
}

/* Sequences per forward: about this many tokens, at least one sequence. */
enum { CHUNK_TOKENS = 2048 };

ac_status ac_importance_compute(const ac_model *model, const int32_t *tokens, int n_seqs, int seq_len,
                                ac_importance *out)
{
    if (!out)
        return ac_fail(AC_ERR_INVALID, "importance: no output");
    memset(out, 0, sizeof *out);
    if (!model || !tokens)
        return ac_fail(AC_ERR_INVALID, "importance: no model or no calibration tokens");
    if (n_seqs < 1 || seq_len < 1)
        return ac_fail(AC_ERR_INVALID, "importance: needs at least one sequence of at least one token, got %d x %d",
                       n_seqs, seq_len);
    if ((int64_t)n_seqs * seq_len > INT_MAX)
        return ac_fail(AC_ERR_INVALID, "importance: %d x %d calibration tokens overflow", n_seqs, seq_len);
    const ac_arch *a = &model->arch;
    int D = a->hidden, L = a->n_layers;
    for (int64_t i = 0; i < (int64_t)n_seqs * seq_len; i++)
        if (tokens[i] < 0 || tokens[i] >= a->vocab)
            return ac_fail(AC_ERR_INVALID,
                           "importance: calibration token %" PRId32 " (sequence %" PRId64 ", position %" PRId64
                           ") is outside the vocabulary [0, %d)",
                           tokens[i], i / seq_len, i % seq_len, a->vocab);

    int chunk = CHUNK_TOKENS / seq_len;
    chunk = chunk < 1 ? 1 : chunk > n_seqs ? n_seqs : chunk;
    int T = chunk * seq_len;
    size_t per_token = (size_t)D; /* the chunk's scratch, also the widest activation scored */
    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        const ac_block_ops *ops = ac_block(b);
        size_t n = ops->importance_add ? ops->importance_per_token(a, b) : 0;
        per_token = n > per_token ? n : per_token;
    }

    accum acc;
    ac_status st = importance_alloc(a, out);
    if (st != AC_OK)
        return st;
    st = accum_alloc(a, &acc);
    if (st != AC_OK) {
        ac_importance_free(out);
        return st;
    }
    ac_kctx k = {0};
    ac_runtime *rt = NULL;
    size_t TD = (size_t)T * D;
    float *xs = malloc(((size_t)L + 1) * TD * sizeof *xs), *xn = malloc(TD * sizeof *xn);
    int *offset = calloc((size_t)chunk, sizeof *offset), *len = calloc((size_t)chunk, sizeof *len);
    const int32_t **seq_tokens = calloc((size_t)chunk, sizeof *seq_tokens);
    ac_importance_chunk ch = {.kctx = &k, .xn = xn, .seq_len = seq_len,
                              .scratch = malloc((size_t)T * per_token * sizeof(float)),
                              .colsum = malloc(per_token * sizeof(double))};
    if (!xs || !xn || !offset || !len || !seq_tokens || !ch.scratch || !ch.colsum)
        st = ac_fail(AC_ERR_NOMEM, "importance: cannot allocate activations for %d sequences of %d tokens", chunk,
                     seq_len);
    if (st == AC_OK)
        st = ac_runtime_create(model, &rt);
    if (st == AC_OK)
        st = ac_runtime_reserve_training(rt, T, chunk);
    if (st == AC_OK) {
        ac_k_flush_denormals();
        for (int s0 = 0; s0 < n_seqs; s0 += chunk) {
            int n = n_seqs - s0 < chunk ? n_seqs - s0 : chunk, rows = n * seq_len;
            for (int s = 0; s < n; s++) {
                offset[s] = s * seq_len;
                len[s] = seq_len;
                seq_tokens[s] = tokens + (size_t)(s0 + s) * seq_len;
            }
            ac_seqs seqs = {.n = n, .total = rows, .offset = offset, .len = len, .caches = NULL};
            /* the stream of layer l lies at xs + l rows D */
            ac_pass pass = {.masks = NULL, .xs = xs, .keep_inputs = 1};
            ac_driver_forward(rt, &seqs, seq_tokens, &pass);
            ch.T = rows;
            ch.n_seqs = n;
            for (int l = 0; l < L; l++)
                score_layer(&ch, xn, model, xs, l, &acc);
        }
        finish(a, &acc, (int64_t)n_seqs * seq_len, out);
    }
    ac_runtime_free(rt);
    free(xs);
    free(offset);
    free(len);
    free(seq_tokens);
    free(xn);
    free(ch.scratch);
    free(ch.colsum);
    accum_free(&acc);
    if (st != AC_OK)
        ac_importance_free(out);
    return st;
}

/* ---- safetensors ---- */

ac_status ac_importance_save(const ac_importance *imp, const char *path)
{
    if (!imp || !path)
        return ac_fail(AC_ERR_INVALID, "importance: nothing to save or no path");
    const ac_arch *a = &imp->arch;
    if (!a->layers || a->n_layers != imp->n_layers || a->hidden != imp->hidden || !imp->hidden_channels ||
        !imp->depth)
        return ac_fail(AC_ERR_INVALID, "importance %s: the scores carry no architecture of %d layers, hidden %d "
                                       "(make them with ac_importance_compute or ac_importance_load)",
                       path, imp->n_layers, imp->hidden);
    ac_safetensors_writer *w;
    ac_status st = ac_safetensors_writer_init(&w);
    if (st != AC_OK)
        return st;
    st = ac_safetensors_writer_add(w, "hidden", AC_DTYPE_F32, 1, (const int64_t[]){a->hidden}, imp->hidden_channels);
    if (st == AC_OK)
        st = ac_safetensors_writer_add(w, "depth", AC_DTYPE_F32, 1, (const int64_t[]){a->n_layers}, imp->depth);
    for (int l = 0; st == AC_OK && l < a->n_layers; l++)
        for (int axis = 0; st == AC_OK && axis < AC_LAYER_AXES; axis++) {
            int n = axis_length(&a->layers[l], axis);
            if (n == 0)
                continue;
            float **arrays = axis_arrays(imp, axis);
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", l, ac_layer_axis_name((ac_layer_axis)axis));
            if (!arrays || !arrays[l])
                st = ac_fail(AC_ERR_INVALID, "importance %s: '%s' is missing (layer %d is %s)", path, name, l,
                             ac_block_name(a->layers[l].kind));
            else
                st = ac_safetensors_writer_add(w, name, AC_DTYPE_F32, 1, (const int64_t[]){n}, arrays[l]);
        }
    char tokens[32];
    snprintf(tokens, sizeof tokens, "%" PRId64, imp->tokens);
    if (st == AC_OK)
        st = ac_safetensors_writer_set_metadata(w, "tokens", tokens);
    if (st == AC_OK)
        st = ac_safetensors_writer_set_metadata(w, "format", "autocompress importance");
    if (st == AC_OK)
        st = ac_safetensors_writer_write(w, path);
    ac_safetensors_writer_free(w);
    return st;
}

static void format_shape(const ac_tensor_view *v, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < v->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %" PRId64 : "%" PRId64, v->shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* dst[n] from tensor `name`, which must be a float vector of n. */
static ac_status read_vector(const ac_safetensors *st, const char *path, const char *name, const char *what, int n,
                             float *dst)
{
    const ac_tensor_view *v = ac_safetensors_find(st, name);
    if (!v)
        return ac_fail(AC_ERR_INVALID, "importance %s: tensor '%s' is missing (%s)", path, name, what);
    if (v->ndim != 1 || v->shape[0] != n) {
        char shape[128];
        format_shape(v, shape, sizeof shape);
        return ac_fail(AC_ERR_INVALID, "importance %s: tensor '%s' has shape %s, the architecture needs [%d] (%s)",
                       path, name, shape, n, what);
    }
    if (!ac_dtype_is_float(v->dtype))
        return ac_fail(AC_ERR_INVALID, "importance %s: tensor '%s' is %s, not a float type", path, name,
                       ac_dtype_name(v->dtype));
    return ac_convert_to_f32(v->dtype, v->data, dst, (size_t)n);
}

/* 1 when `name` is a tensor the arch expects. */
static int expected(const ac_arch *a, const char *name)
{
    if (!strcmp(name, "hidden") || !strcmp(name, "depth"))
        return 1;
    for (int l = 0; l < a->n_layers; l++)
        for (int axis = 0; axis < AC_LAYER_AXES; axis++) {
            char want[64];
            snprintf(want, sizeof want, "layers.%d.%s", l, ac_layer_axis_name((ac_layer_axis)axis));
            if (!strcmp(name, want))
                return axis_length(&a->layers[l], axis) > 0;
        }
    return 0;
}

static ac_status load_file(const ac_safetensors *st, const char *path, const ac_arch *a, ac_importance *out)
{
    char what[96];
    snprintf(what, sizeof what, "hidden %d", a->hidden);
    ac_status s = read_vector(st, path, "hidden", what, a->hidden, out->hidden_channels);
    snprintf(what, sizeof what, "%d layers", a->n_layers);
    if (s == AC_OK)
        s = read_vector(st, path, "depth", what, a->n_layers, out->depth);
    for (int l = 0; s == AC_OK && l < a->n_layers; l++)
        for (int axis = 0; s == AC_OK && axis < AC_LAYER_AXES; axis++) {
            int n = axis_length(&a->layers[l], axis);
            if (n == 0)
                continue;
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", l, ac_layer_axis_name((ac_layer_axis)axis));
            snprintf(what, sizeof what, "layer %d is %s", l, ac_block_name(a->layers[l].kind));
            s = read_vector(st, path, name, what, n, axis_arrays(out, axis)[l]);
        }
    for (size_t i = 0; s == AC_OK && i < ac_safetensors_count(st); i++) {
        const char *name = ac_safetensors_at(st, i)->name;
        if (!expected(a, name)) {
            int l = -1;
            if (sscanf(name, "layers.%d.", &l) == 1 && l >= 0 && l < a->n_layers)
                s = ac_fail(AC_ERR_INVALID, "importance %s: tensor '%s' does not belong to the architecture (layer %d is %s)",
                            path, name, l, ac_block_name(a->layers[l].kind));
            else
                s = ac_fail(AC_ERR_INVALID, "importance %s: tensor '%s' does not belong to the architecture (%d layers)",
                            path, name, a->n_layers);
        }
    }
    if (s != AC_OK)
        return s;
    const char *tokens = ac_safetensors_metadata(st, "tokens");
    char *end = NULL;
    errno = 0;
    long long n = tokens ? strtoll(tokens, &end, 10) : -1;
    if (!tokens || errno || end == tokens || *end || n < 0)
        return ac_fail(AC_ERR_INVALID, "importance %s: metadata 'tokens' is %s%s%s, not a token count", path,
                       tokens ? "'" : "missing", tokens ? tokens : "", tokens ? "'" : "");
    out->tokens = (int64_t)n;
    return AC_OK;
}

ac_status ac_importance_load(const char *path, const ac_arch *arch, ac_importance *out)
{
    if (!out)
        return ac_fail(AC_ERR_INVALID, "importance: no output");
    memset(out, 0, sizeof *out);
    if (!path || !arch)
        return ac_fail(AC_ERR_INVALID, "importance: no path or no architecture to load against");
    ac_safetensors *st;
    ac_status s = ac_safetensors_open(path, &st);
    if (s != AC_OK)
        return s;
    s = importance_alloc(arch, out);
    if (s == AC_OK) {
        s = load_file(st, path, arch, out);
        if (s != AC_OK)
            ac_importance_free(out);
    }
    ac_safetensors_close(st);
    return s;
}
