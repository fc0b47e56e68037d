/* Minitron importance on calibration tokens: the driver runs chunks of sequences with
 * every layer's input kept, and each layer's activations are recomputed from its normed
 * input to score them. For an activation a[t, c] of one sequence, s[c] = mean_t |a[t, c]|;
 * a score is sqrt(sum over sequences of s[c]^2) (sums of squares are kept in double):
 *   hidden       every block's normed input, the squares also summed over layers;
 *   MLP ffn      relu2(up xn), the input of down_proj;
 *   MoE          experts: sum over routed tokens of ||routing weight * expert output|| /
 *                tokens routed (0 for an expert never chosen); ffn: relu2(expert up) over
 *                each expert's tokens of a sequence, the squares summed over experts;
 *                shared_ffn: relu2(shared up xn);
 *   Mamba heads  the L2 norm of the head's channel scores of the x slice of in_proj
 *                (xn @ in_proj[dI:2dI]^T, before the conv);
 *   depth        mean over tokens of 1 - cos(x_l, x_{l+1}), cos as torch's
 *                cosine_similarity (norms clamped at 1e-8).
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
#include "runtime/runtime_internal.h"

/* ---- the arrays of one architecture ---- */

enum { AXIS_MAMBA_HEADS, AXIS_EXPERTS, AXIS_FFN, AXIS_SHARED_FFN, AXIS_COUNT };
static const char *const axis_names[AXIS_COUNT] = {"mamba_heads", "experts", "ffn", "shared_ffn"};

/* The length of a layer's array of an axis; 0: the layer has none. */
static int axis_length(const ac_block_dims *b, int axis)
{
    switch (axis) {
    case AXIS_MAMBA_HEADS: return b->kind == AC_BLOCK_MAMBA ? b->mamba_heads : 0;
    case AXIS_EXPERTS: return b->kind == AC_BLOCK_MOE ? b->n_experts : 0;
    case AXIS_FFN: return b->kind == AC_BLOCK_MLP ? b->ffn : b->kind == AC_BLOCK_MOE ? b->expert_ffn : 0;
    case AXIS_SHARED_FFN: return b->kind == AC_BLOCK_MOE && b->shared_ffn > 0 ? b->shared_ffn : 0;
    }
    return 0;
}

static float **axis_arrays(const ac_importance *imp, int axis)
{
    switch (axis) {
    case AXIS_MAMBA_HEADS: return imp->mamba_heads;
    case AXIS_EXPERTS: return imp->experts;
    case AXIS_FFN: return imp->ffn;
    case AXIS_SHARED_FFN: return imp->shared_ffn;
    }
    return NULL;
}

void ac_importance_free(ac_importance *imp)
{
    if (!imp)
        return;
    for (int axis = 0; axis < AXIS_COUNT; axis++) {
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
    for (int axis = 0; ok && axis < AXIS_COUNT; axis++) {
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
    for (int axis = 0; axis < AXIS_COUNT; axis++)
        for (int l = 0; l < src->n_layers; l++) {
            int n = axis_length(&src->arch.layers[l], axis);
            if (n > 0)
                memcpy(axis_arrays(dst, axis)[l], axis_arrays(src, axis)[l], (size_t)n * sizeof(float));
        }
    dst->tokens = src->tokens;
    return AC_OK;
}

/* ---- accumulation ---- */

/* Sums of squares of per-sequence means while the calibration runs. */
typedef struct {
    double *hidden;    /* [D] */
    double *depth;     /* [L]: sum over tokens of 1 - cos */
    double **chan;     /* per layer: Mamba x channels [dI], MLP [F], MoE routed channels [I] */
    double **shared;   /* per MoE layer with a shared expert [S] */
    double **enorm;    /* per MoE layer [E]: sum of routed output norms */
    int64_t **ecount;  /* per MoE layer [E]: tokens routed */
    int L;
} accum;

static void accum_free(accum *a)
{
    for (int l = 0; l < a->L; l++) {
        if (a->chan)
            free(a->chan[l]);
        if (a->shared)
            free(a->shared[l]);
        if (a->enorm)
            free(a->enorm[l]);
        if (a->ecount)
            free(a->ecount[l]);
    }
    free(a->chan);
    free(a->shared);
    free(a->enorm);
    free(a->ecount);
    free(a->hidden);
    free(a->depth);
    memset(a, 0, sizeof *a);
}

static int channels_of(const ac_block_dims *b)
{
    switch (b->kind) {
    case AC_BLOCK_MAMBA: return ac_mamba_d_inner(b);
    case AC_BLOCK_MLP: return b->ffn;
    case AC_BLOCK_MOE: return b->expert_ffn;
    default: return 0;
    }
}

static ac_status accum_alloc(const ac_arch *arch, accum *a)
{
    int L = arch->n_layers;
    size_t n = (size_t)(L > 0 ? L : 1);
    memset(a, 0, sizeof *a);
    a->L = L;
    a->hidden = calloc((size_t)arch->hidden, sizeof(double));
    a->depth = calloc(n, sizeof(double));
    a->chan = calloc(n, sizeof *a->chan);
    a->shared = calloc(n, sizeof *a->shared);
    a->enorm = calloc(n, sizeof *a->enorm);
    a->ecount = calloc(n, sizeof *a->ecount);
    int ok = a->hidden && a->depth && a->chan && a->shared && a->enorm && a->ecount;
    for (int l = 0; ok && l < L; l++) {
        const ac_block_dims *b = &arch->layers[l];
        int c = channels_of(b);
        if (c > 0)
            ok = (a->chan[l] = calloc((size_t)c, sizeof(double))) != NULL;
        if (ok && b->kind == AC_BLOCK_MOE) {
            a->enorm[l] = calloc((size_t)b->n_experts, sizeof(double));
            a->ecount[l] = calloc((size_t)b->n_experts, sizeof(int64_t));
            ok = a->enorm[l] && a->ecount[l];
            if (ok && b->shared_ffn > 0)
                ok = (a->shared[l] = calloc((size_t)b->shared_ffn, sizeof(double))) != NULL;
        }
    }
    if (!ok) {
        accum_free(a);
        return ac_fail(AC_ERR_NOMEM, "importance: out of memory for the accumulators");
    }
    return AC_OK;
}

/* acc[c] += (mean over `rows` rows of |a[r, c]|)^2; colsum holds C doubles. */
static void add_mean_sq(const float *a, int lda, int rows, int C, double *acc, double *colsum)
{
    if (rows <= 0)
        return;
    for (int c = 0; c < C; c++)
        colsum[c] = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *ar = a + (size_t)r * lda;
        for (int c = 0; c < C; c++)
            colsum[c] += fabs((double)ar[c]);
    }
    for (int c = 0; c < C; c++) {
        double m = colsum[c] / rows;
        acc[c] += m * m;
    }
}

/* The same for every sequence of a chunk of n_seqs sequences of seq_len rows each. */
static void add_seq_means(const float *a, int lda, int n_seqs, int seq_len, int C, double *acc, double *colsum)
{
    for (int s = 0; s < n_seqs; s++)
        add_mean_sq(a + (size_t)s * seq_len * lda, lda, seq_len, C, acc, colsum);
}

/* The buffers of one chunk of T rows. */
typedef struct {
    ac_kctx k;
    float *xn;       /* [T, D] */
    float *act;      /* [T, widest activation] */
    float *logits;   /* [T, E] */
    int32_t *idx;    /* [T, top_k] */
    float *weight;   /* [T, top_k] */
    int32_t *rows;   /* [T, top_k] grouped by expert */
    float *row_w;    /* [T, top_k] */
    float *xe, *oe;  /* [T, D] one expert's rows in and out */
    double *colsum;  /* [widest] */
} buffers;

static void moe_layer(buffers *bf, const ac_model *m, int l, int T, int n_seqs, int seq_len, accum *acc)
{
    const ac_block_dims *b = &m->arch.layers[l];
    const ac_layer_weights *w = &m->layers[l];
    int D = m->arch.hidden, E = b->n_experts, K = b->top_k, I = b->expert_ffn, S = b->shared_ffn;
    int start[AC_MAX_EXPERTS + 1], fill[AC_MAX_EXPERTS + 1];

    ac_k_linear(&bf->k, T, E, D, bf->xn, D, w->router, 0.0f, bf->logits, E);
    ac_k_moe_route(&bf->k, T, E, bf->logits, w->router_bias, b->n_group, b->topk_group, K, b->norm_topk_prob,
                   b->routed_scaling, bf->idx, bf->weight);
    /* (token, expert) pairs grouped by expert, tokens in order within each */
    memset(start, 0, (size_t)(E + 1) * sizeof *start);
    for (int i = 0; i < T * K; i++)
        start[bf->idx[i] + 1]++;
    for (int e = 0; e < E; e++)
        start[e + 1] += start[e];
    memcpy(fill, start, (size_t)(E + 1) * sizeof *fill);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            int e = bf->idx[t * K + j];
            bf->rows[fill[e]] = t;
            bf->row_w[fill[e]] = bf->weight[t * K + j];
            fill[e]++;
        }

    if (S > 0) {
        ac_k_linear(&bf->k, T, S, D, bf->xn, D, w->up_proj, 0.0f, bf->act, S);
        ac_k_relu2(&bf->k, (size_t)T * S, bf->act, bf->act);
        add_seq_means(bf->act, S, n_seqs, seq_len, S, acc->shared[l], bf->colsum);
    }
    for (int e = 0; e < E; e++) {
        int n = start[e + 1] - start[e];
        if (n == 0)
            continue;
        const int32_t *re = bf->rows + start[e];
        const float *rw = bf->row_w + start[e];
        ac_k_gather_rows(&bf->k, n, D, bf->xn, D, re, bf->xe);
        ac_k_linear(&bf->k, n, I, D, bf->xe, D, w->experts_up + (size_t)e * I * D, 0.0f, bf->act, I);
        ac_k_relu2(&bf->k, (size_t)n * I, bf->act, bf->act);
        /* each sequence's tokens are one run of the expert's rows */
        for (int i0 = 0; i0 < n;) {
            int s = re[i0] / seq_len, i1 = i0;
            while (i1 < n && re[i1] / seq_len == s)
                i1++;
            add_mean_sq(bf->act + (size_t)i0 * I, I, i1 - i0, I, acc->chan[l], bf->colsum);
            i0 = i1;
        }
        ac_k_linear(&bf->k, n, D, I, bf->act, I, w->experts_down + (size_t)e * D * I, 0.0f, bf->oe, D);
        for (int i = 0; i < n; i++) {
            const float *o = bf->oe + (size_t)i * D;
            double sq = 0.0;
            for (int c = 0; c < D; c++)
                sq += (double)o[c] * o[c];
            acc->enorm[l][e] += fabs((double)rw[i]) * sqrt(sq);
        }
        acc->ecount[l][e] += n;
    }
}

/* Scores layer l of a chunk whose stream entering each layer is xs. */
static void score_layer(buffers *bf, const ac_model *m, const float *xs, int l, int T, int n_seqs, int seq_len,
                        accum *acc)
{
    const ac_arch *a = &m->arch;
    const ac_block_dims *b = &a->layers[l];
    const ac_layer_weights *w = &m->layers[l];
    int D = a->hidden;
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

    ac_k_rmsnorm(&bf->k, T, D, x, D, w->norm, a->norm_eps, bf->xn, D);
    add_seq_means(bf->xn, D, n_seqs, seq_len, D, acc->hidden, bf->colsum);
    switch (b->kind) {
    case AC_BLOCK_MAMBA: {
        int dI = ac_mamba_d_inner(b);
        ac_k_linear(&bf->k, T, dI, D, bf->xn, D, w->in_proj + (size_t)dI * D, 0.0f, bf->act, dI);
        add_seq_means(bf->act, dI, n_seqs, seq_len, dI, acc->chan[l], bf->colsum);
        break;
    }
    case AC_BLOCK_MLP:
        ac_k_linear(&bf->k, T, b->ffn, D, bf->xn, D, w->up_proj, 0.0f, bf->act, b->ffn);
        ac_k_relu2(&bf->k, (size_t)T * b->ffn, bf->act, bf->act);
        add_seq_means(bf->act, b->ffn, n_seqs, seq_len, b->ffn, acc->chan[l], bf->colsum);
        break;
    case AC_BLOCK_MOE:
        moe_layer(bf, m, l, T, n_seqs, seq_len, acc);
        break;
    default:
        break;
    }
}

static void finish(const ac_arch *a, const accum *acc, int64_t tokens, ac_importance *imp)
{
    for (int c = 0; c < a->hidden; c++)
        imp->hidden_channels[c] = (float)sqrt(acc->hidden[c]);
    for (int l = 0; l < a->n_layers; l++) {
        const ac_block_dims *b = &a->layers[l];
        imp->depth[l] = (float)(acc->depth[l] / (double)tokens);
        if (b->kind == AC_BLOCK_MAMBA) {
            int P = b->mamba_head_dim;
            for (int h = 0; h < b->mamba_heads; h++) {
                double sum = 0.0; /* the squares of the head's channel scores */
                for (int p = 0; p < P; p++)
                    sum += acc->chan[l][h * P + p];
                imp->mamba_heads[l][h] = (float)sqrt(sum);
            }
        } else if (b->kind == AC_BLOCK_MLP || b->kind == AC_BLOCK_MOE) {
            int F = axis_length(b, AXIS_FFN);
            for (int c = 0; c < F; c++)
                imp->ffn[l][c] = (float)sqrt(acc->chan[l][c]);
        }
        if (b->kind == AC_BLOCK_MOE) {
            for (int e = 0; e < b->n_experts; e++)
                imp->experts[l][e] =
                    acc->ecount[l][e] ? (float)(acc->enorm[l][e] / (double)acc->ecount[l][e]) : 0.0f;
            for (int c = 0; c < b->shared_ffn; c++)
                imp->shared_ffn[l][c] = (float)sqrt(acc->shared[l][c]);
        }
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
    int widest = D, max_e = 1, max_k = 1;
    for (int l = 0; l < L; l++) {
        const ac_block_dims *b = &a->layers[l];
        int c = channels_of(b);
        widest = c > widest ? c : widest;
        if (b->kind == AC_BLOCK_MOE) {
            widest = b->shared_ffn > widest ? b->shared_ffn : widest;
            max_e = b->n_experts > max_e ? b->n_experts : max_e;
            max_k = b->top_k > max_k ? b->top_k : max_k;
        }
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
    buffers bf = {0};
    ac_runtime *rt = NULL;
    size_t TD = (size_t)T * D, Tk = (size_t)T * max_k;
    float *xs = malloc(((size_t)L + 1) * TD * sizeof *xs);
    int *offset = calloc((size_t)chunk, sizeof *offset), *len = calloc((size_t)chunk, sizeof *len);
    const int32_t **seq_tokens = calloc((size_t)chunk, sizeof *seq_tokens);
    bf.xn = malloc(TD * sizeof(float));
    bf.act = malloc((size_t)T * widest * sizeof(float));
    bf.logits = malloc((size_t)T * max_e * sizeof(float));
    bf.idx = malloc(Tk * sizeof(int32_t));
    bf.weight = malloc(Tk * sizeof(float));
    bf.rows = malloc(Tk * sizeof(int32_t));
    bf.row_w = malloc(Tk * sizeof(float));
    bf.xe = malloc(TD * sizeof(float));
    bf.oe = malloc(TD * sizeof(float));
    bf.colsum = malloc((size_t)widest * sizeof(double));
    if (!xs || !offset || !len || !seq_tokens || !bf.xn || !bf.act || !bf.logits || !bf.idx || !bf.weight ||
        !bf.rows || !bf.row_w || !bf.xe || !bf.oe || !bf.colsum)
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
            for (int l = 0; l < L; l++)
                score_layer(&bf, model, xs, l, rows, n, seq_len, &acc);
        }
        finish(a, &acc, (int64_t)n_seqs * seq_len, out);
    }
    ac_runtime_free(rt);
    free(xs);
    free(offset);
    free(len);
    free(seq_tokens);
    free(bf.xn);
    free(bf.act);
    free(bf.logits);
    free(bf.idx);
    free(bf.weight);
    free(bf.rows);
    free(bf.row_w);
    free(bf.xe);
    free(bf.oe);
    free(bf.colsum);
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
        for (int axis = 0; st == AC_OK && axis < AXIS_COUNT; axis++) {
            int n = axis_length(&a->layers[l], axis);
            if (n == 0)
                continue;
            float **arrays = axis_arrays(imp, axis);
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", l, axis_names[axis]);
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
        for (int axis = 0; axis < AXIS_COUNT; axis++) {
            char want[64];
            snprintf(want, sizeof want, "layers.%d.%s", l, axis_names[axis]);
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
        for (int axis = 0; s == AC_OK && axis < AXIS_COUNT; axis++) {
            int n = axis_length(&a->layers[l], axis);
            if (n == 0)
                continue;
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", l, axis_names[axis]);
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
