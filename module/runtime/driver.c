/* The driver: embeddings, pre-norm residual blocks (with soft masks and layer gates),
 * final norm and LM head, and the backward of the same in reverse, each block reading
 * the internals its forward kept (pass->saved) or recomputing them from its saved input. Inference (with caches), training,
 * distillation and the search's masked passes all run these three functions; only the
 * buffers they are handed differ. */
#include "runtime/runtime_internal.h"

#include "autocompress/probe.h"

#include <math.h>
#include <string.h>

/* The masks where the ops read them (a device's copy, or the host's own). */
static const ac_masks *ops_masks(const ac_pass *pass) { return pass->dev_masks ? pass->dev_masks : pass->masks; }

/* Layer l's masks where the ops read them, with the host's values of the two the blocks
 * decide on (group widths, expert grouping). */
static ac_block_masks block_masks(const ac_pass *pass, int layer)
{
    ac_block_masks b = {0};
    const ac_masks *m = ops_masks(pass), *h = pass->masks;
    if (!m)
        return b;
    b.mamba_heads = m->mamba_heads ? m->mamba_heads[layer] : NULL;
    b.experts = m->experts ? m->experts[layer] : NULL;
    b.expert_scores = m->expert_scores ? m->expert_scores[layer] : NULL;
    b.ffn = m->ffn ? m->ffn[layer] : NULL;
    b.shared_ffn = m->shared_ffn ? m->shared_ffn[layer] : NULL;
    b.host_mamba_heads = h->mamba_heads ? h->mamba_heads[layer] : NULL;
    b.host_experts = h->experts ? h->experts[layer] : NULL;
    return b;
}

/* The hidden mask: its values on the host (the kept width) and where the ops read it (the
 * same pointer on the CPU); host NULL: no mask. */
typedef struct {
    const float *host, *ops;
} hidden_mask;

static hidden_mask hidden_of(const ac_pass *pass)
{
    hidden_mask h = {0};
    if (pass->masks && pass->masks->hidden) {
        h.host = pass->masks->hidden;
        h.ops = ops_masks(pass)->hidden;
    }
    return h;
}

/* One value the ops made (at *value, one float), spread over the hidden channels where
 * the ops run (rt->spread), read back through the host. */
static const float *spread_value(ac_runtime *rt, const float *value)
{
    const ac_backend *be = ac_backend_of(&rt->kctx);
    int D = rt->model->arch.hidden;
    float v;
    be->copy(&v, value, sizeof v, AC_COPY_DEVICE_TO_HOST);
    for (int c = 0; c < D; c++)
        rt->spread_host[c] = v;
    be->copy(rt->spread, rt->spread_host, (size_t)D * sizeof v, AC_COPY_HOST_TO_DEVICE);
    return rt->spread;
}

static ac_block_mask_grads block_mask_grads(const ac_mask_grads *g, int layer)
{
    ac_block_mask_grads b = {0};
    if (!g)
        return b;
    b.mamba_heads = g->mamba_heads ? g->mamba_heads[layer] : NULL;
    b.experts = g->experts ? g->experts[layer] : NULL;
    b.expert_scores = g->expert_scores ? g->expert_scores[layer] : NULL;
    b.ffn = g->ffn ? g->ffn[layer] : NULL;
    b.shared_ffn = g->shared_ffn ? g->shared_ffn[layer] : NULL;
    return b;
}

/* saved: where the block keeps its internals for the backward (NULL: nowhere). */
static void block_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const ac_block_masks *m, const float *xn,
                          float *out, float *saved)
{
    ac_block_ctx c = ac_runtime_block_ctx(rt, saved);
    ac_block(&rt->model->arch.layers[layer])->forward(&c, layer, seqs, xn, m, out);
}

static float *saved_at(const ac_pass *pass, int l) { return pass->saved ? pass->saved[l] : NULL; }

/* The stream entering layer l (l = L: after the last layer). */
static float *stream_at(const ac_pass *pass, int l, size_t rows_x_d)
{
    return pass->keep_inputs ? pass->xs + (size_t)l * rows_x_d : pass->xs;
}

/* The batch's token ids, packed as its rows, into rt->ids where the ops run. */
static void upload_ids(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens)
{
    for (int s = 0; s < seqs->n; s++)
        memcpy(rt->ids_host + seqs->offset[s], tokens[s], (size_t)seqs->len[s] * sizeof *rt->ids_host);
    ac_backend_of(&rt->kctx)->copy(rt->ids, rt->ids_host, (size_t)seqs->total * sizeof *rt->ids,
                                   AC_COPY_HOST_TO_DEVICE);
}

/* The embeddings of n token ids (the ops' memory) into rows [n, D]: a serving copy's
 * are bf16. */
static void embed_rows(ac_runtime *rt, int n, const int32_t *ids, float *rows)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden;
    if (m->bf16)
        ac_k_gather_rows_bf16(&rt->kctx, n, D, ac_model_bf16_view(m->embeddings), D, ids, rows);
    else
        ac_k_gather_rows(&rt->kctx, n, D, m->embeddings, D, ids, rows);
}

static void embed(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens, const ac_pass *pass)
{
    int D = rt->model->arch.hidden;
    upload_ids(rt, seqs, tokens);
    for (int s = 0; s < seqs->n; s++)
        embed_rows(rt, seqs->len[s], rt->ids + seqs->offset[s], pass->xs + (size_t)seqs->offset[s] * D);
    hidden_mask h = hidden_of(pass);
    if (h.host)
        ac_k_mul_columns(&rt->kctx, seqs->total, D, h.ops, pass->xs, D);
}

/* The width a hidden mask keeps, sum(hidden); D without a mask. */
static float kept_width(const float *hidden, int D)
{
    if (!hidden)
        return (float)D;
    double M = 0.0;
    for (int c = 0; c < D; c++)
        M += hidden[c];
    return (float)M;
}

/* RMSNorm over the width the hidden mask keeps: the mean of x^2 over M = sum(hidden)
 * channels, not D. The residual's masked channels are zero at a 0/1 mask, so this is the
 * norm of the model sliced to those channels. Computed as sqrt(M / D) * rmsnorm with eps
 * M / D (rsqrt(S / M + eps) = sqrt(M / D) rsqrt(S / D + eps M / D)); M == D is the plain
 * norm, bit for bit. */
static void width_norm(ac_runtime *rt, int rows, const float *x, const float *w, const hidden_mask *h, float *y)
{
    int D = rt->model->arch.hidden;
    float eps = rt->model->arch.norm_eps, M = kept_width(h->host, D);
    if (M == (float)D) {
        ac_k_rmsnorm(&rt->kctx, rows, D, x, D, w, eps, y, D);
        return;
    }
    ac_k_rmsnorm(&rt->kctx, rows, D, x, D, w, eps * M / (float)D, y, D);
    ac_k_scale(&rt->kctx, (size_t)rows * D, sqrtf(M / (float)D), y);
}

/* Backward of width_norm: dx = dL/dx + beta_dx * dx from dy = dL/dy (destroyed), dw +=
 * (may be NULL), and dL/dM added to every channel of dhidden (may be NULL). */
static void width_norm_backward(ac_runtime *rt, int rows, const float *x, const float *w, const hidden_mask *h,
                                float *dy, float beta_dx, float *dx, float *dw, float *dhidden)
{
    int D = rt->model->arch.hidden;
    float eps = rt->model->arch.norm_eps, M = kept_width(h->host, D);
    if (M == (float)D && !dhidden) {
        ac_k_rmsnorm_backward(&rt->kctx, rows, D, x, D, w, eps, dy, D, beta_dx, dx, D, dw);
        return;
    }
    if (dhidden) {
        float *dM = rt->spread; /* one float, then spread over the channels */
        ac_block_zero(&rt->kctx, dM, 1);
        ac_k_rmsnorm_width_backward(&rt->kctx, rows, D, x, D, w, eps, M, dy, D, dM);
        ac_k_add(&rt->kctx, (size_t)D, spread_value(rt, dM), dhidden);
    }
    ac_k_scale(&rt->kctx, (size_t)rows * D, sqrtf(M / (float)D), dy);
    ac_k_rmsnorm_backward(&rt->kctx, rows, D, x, D, w, eps * M / (float)D, dy, D, beta_dx, dx, D, dw);
}

/* xn = hidden * norm_l(x) */
static void block_input(ac_runtime *rt, int l, const float *x, int T, const hidden_mask *h, float *xn)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden;
    width_norm(rt, T, x, m->layers[l].norm, h, xn);
    if (h->host)
        ac_k_mul_columns(&rt->kctx, T, D, h->ops, xn, D);
}

/* Block l's input into rt->xn, or with pass->xns (a training forward) its norm before
 * the hidden mask into the pass's slot, which the backward then reads; returns where the
 * block's input is. */
static float *kept_norm_input(ac_runtime *rt, int l, const float *x, int T, const hidden_mask *h, const ac_pass *pass)
{
    size_t TD = (size_t)T * rt->model->arch.hidden;
    if (!pass->keep_inputs || !pass->xns) {
        block_input(rt, l, x, T, h, rt->xn);
        return rt->xn;
    }
    float *raw = pass->xns + (size_t)l * TD;
    width_norm(rt, T, x, rt->model->layers[l].norm, h, raw);
    if (!h->host)
        return raw;
    ac_block_copy(&rt->kctx, rt->xn, raw, TD);
    ac_k_mul_columns(&rt->kctx, T, rt->model->arch.hidden, h->ops, rt->xn, rt->model->arch.hidden);
    return rt->xn;
}

void ac_driver_forward(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens, const ac_pass *pass)
{
    const ac_arch *a = &rt->model->arch;
    int D = a->hidden, T = seqs->total;
    size_t TD = (size_t)T * D;
    hidden_mask h = hidden_of(pass);
    const float *gate = pass->masks ? pass->masks->layer_gate : NULL; /* host values: scalars */
    ac_probe *probe = rt->probe;

    if (probe)
        ac_probe_begin(probe, -1, AC_SITE_EMBEDDING);
    embed(rt, seqs, tokens, pass);
    if (probe)
        ac_probe_end(probe, -1, AC_SITE_EMBEDDING);
    for (int l = 0; l < a->n_layers; l++) {
        ac_site_kind site = (ac_site_kind)a->layers[l].kind;
        float *x = stream_at(pass, l, TD), *next = stream_at(pass, l + 1, TD);
        ac_block_masks bm = block_masks(pass, l);
        if (probe)
            ac_probe_begin(probe, l, site);
        /* with a stream per layer (training), the block writes into the next one, which
         * then adds x: mix + x, the bits of x + mix, without copying x there first */
        float *mix = next != x ? next : rt->mix;
        float *xn = kept_norm_input(rt, l, x, T, &h, pass);
        block_forward(rt, l, seqs, &bm, xn, mix, pass->keep_inputs ? saved_at(pass, l) : NULL);
        if (pass->outs)
            ac_block_copy(&rt->kctx, pass->outs + (size_t)l * TD, mix, TD);
        if (h.host)
            ac_k_mul_columns(&rt->kctx, T, D, h.ops, mix, D);
        if (gate)
            ac_k_scale(&rt->kctx, TD, gate[l], mix);
        ac_k_add(&rt->kctx, TD, next != x ? x : rt->mix, next);
        if (probe)
            ac_probe_end(probe, l, site);
    }
}

/* rows of the final norm, times the hidden mask, into rt->xn; raw (if not NULL) gets
 * the norm before the mask. */
static void final_norm(ac_runtime *rt, int rows, const float *x, const hidden_mask *h, float *raw)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden;
    width_norm(rt, rows, x, m->norm_f, h, raw ? raw : rt->xn);
    if (raw)
        ac_block_copy(&rt->kctx, rt->xn, raw, (size_t)rows * D);
    if (h->host)
        ac_k_mul_columns(&rt->kctx, rows, D, h->ops, rt->xn, D);
}

void ac_driver_logits(ac_runtime *rt, const ac_seqs *seqs, const ac_pass *pass, ac_logits_mode mode, float *logits)
{
    const ac_model *m = rt->model;
    int D = m->arch.hidden, V = m->arch.vocab;
    const float *last = stream_at(pass, m->arch.n_layers, (size_t)seqs->total * D);
    hidden_mask h = hidden_of(pass);
    int rows = mode == AC_LOGITS_ALL ? seqs->total : seqs->n;
    if (mode == AC_LOGITS_LAST) {
        for (int s = 0; s < seqs->n; s++)
            rt->ids_host[s] = seqs->offset[s] + seqs->len[s] - 1;
        ac_backend_of(&rt->kctx)->copy(rt->ids, rt->ids_host, (size_t)seqs->n * sizeof *rt->ids,
                                       AC_COPY_HOST_TO_DEVICE);
        ac_k_gather_rows(&rt->kctx, seqs->n, D, last, D, rt->ids, rt->mix);
        last = rt->mix;
    }
    final_norm(rt, rows, last, &h, NULL);
    ac_block_ctx c = ac_runtime_block_ctx(rt, NULL);
    ac_block_linear(&c, rows, V, D, rt->xn, D, m->lm_head, 0.0f, logits, V);
}

/* dL/dgate[l] and the hidden mask's output-side share need the block's own mixer output:
 * the one the forward kept, or recomputed into rt->mix. The column sums come back to the
 * host for the gate's dot product with the mask's host values. */
static void gate_and_output_mask_grads(ac_runtime *rt, int l, const ac_seqs *seqs, const ac_block_masks *bm,
                                       const ac_pass *pass, const ac_pass_grad_buffers *buf, float *dhidden,
                                       float *dgate)
{
    const ac_backend *be = ac_backend_of(&rt->kctx);
    int D = rt->model->arch.hidden, T = seqs->total;
    const float *hidden = pass->masks->hidden;
    float gl = pass->masks->layer_gate ? pass->masks->layer_gate[l] : 1.0f;
    const float *out = pass->outs ? pass->outs + (size_t)l * T * D : rt->mix;
    if (!pass->outs)
        block_forward(rt, l, seqs, bm, rt->xn, rt->mix, NULL);
    float dg = 0.0f, *col = buf->column, *host_col = rt->spread_host;
    ac_block_zero(&rt->kctx, col, (size_t)D);
    ac_k_column_dot(&rt->kctx, T, D, buf->dx, D, out, D, col);
    be->copy(host_col, col, (size_t)D * sizeof *col, AC_COPY_DEVICE_TO_HOST);
    for (int c = 0; c < D; c++)
        dg += host_col[c] * (hidden ? hidden[c] : 1.0f);
    if (dhidden) { /* dhidden += gl * col */
        ac_block_copy(&rt->kctx, rt->spread, col, (size_t)D);
        ac_k_scale(&rt->kctx, (size_t)D, gl, rt->spread);
        ac_k_add(&rt->kctx, (size_t)D, rt->spread, dhidden);
    }
    if (dgate) { /* dgate[l] += dg */
        host_col[0] = dg;
        be->copy(rt->spread, host_col, sizeof dg, AC_COPY_HOST_TO_DEVICE);
        ac_k_add(&rt->kctx, 1, rt->spread, dgate + l);
    }
}

void ac_driver_backward(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens, const ac_pass *pass,
                        const float *dlogits, const ac_pass_grad_buffers *buf, ac_model *g,
                        const ac_mask_grads *mask_grads)
{
    const ac_model *m = rt->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden, R = seqs->total, V = a->vocab;
    size_t TD = (size_t)R * D;
    ac_kctx *k = &rt->kctx;
    const ac_masks *masks = pass->masks;
    hidden_mask h = hidden_of(pass);
    const float *gate = masks ? masks->layer_gate : NULL; /* host values: scalars */
    float *dhidden = h.host && mask_grads ? mask_grads->hidden : NULL;
    float *dgate = gate && mask_grads ? mask_grads->layer_gate : NULL;

    /* LM head and final norm, the norm recomputed: rt->xn masked, xn_raw unmasked */
    const float *last = stream_at(pass, a->n_layers, TD);
    final_norm(rt, R, last, &h, buf->xn_raw);
    ac_k_linear_backward(k, R, V, D, rt->xn, D, m->lm_head, dlogits, V, 0.0f, buf->dxn, D, g ? g->lm_head : NULL);
    if (h.host) {
        if (dhidden)
            ac_k_column_dot(k, R, D, buf->dxn, D, buf->xn_raw, D, dhidden);
        ac_k_mul_columns(k, R, D, h.ops, buf->dxn, D);
    }
    width_norm_backward(rt, R, last, m->norm_f, &h, buf->dxn, 0.0f, buf->dx, g ? g->norm_f : NULL, dhidden);

    for (int l = a->n_layers - 1; l >= 0; l--) {
        const float *x = stream_at(pass, l, TD);
        ac_block_masks bm = block_masks(pass, l);
        ac_block_mask_grads bg = block_mask_grads(mask_grads, l);
        /* the block's input norm before the hidden mask: the forward's, or normed again;
         * dout = dx * gate * hidden. Without a gate or a hidden mask the block reads dx
         * and the norm themselves (two copies of the stream fewer a layer). */
        const float *dout = buf->dx, *xn = rt->xn, *raw = pass->xns ? pass->xns + (size_t)l * TD : NULL;
        if (!raw) {
            float *normed = h.host || gate ? buf->xn_raw : rt->xn;
            width_norm(rt, R, x, m->layers[l].norm, &h, normed);
            raw = normed;
        }
        if (!h.host && !gate) {
            xn = raw;
        } else {
            ac_block_copy(&rt->kctx, rt->xn, raw, TD);
            if (h.host)
                ac_k_mul_columns(k, R, D, h.ops, rt->xn, D);
            if (dgate || dhidden)
                gate_and_output_mask_grads(rt, l, seqs, &bm, pass, buf, dhidden, dgate);
            ac_block_copy(&rt->kctx, rt->mix, buf->dx, TD);
            if (h.host)
                ac_k_mul_columns(k, R, D, h.ops, rt->mix, D);
            if (gate)
                ac_k_scale(k, TD, gate[l], rt->mix);
            dout = rt->mix;
        }
        ac_block_ctx c = ac_runtime_block_ctx(rt, saved_at(pass, l));
        ac_block(&a->layers[l])->backward(&c, l, seqs, xn, &bm, dout, buf->dxn, g ? &g->layers[l] : NULL, &bg);
        if (h.host) {
            if (dhidden)
                ac_k_column_dot(k, R, D, buf->dxn, D, raw, D, dhidden);
            ac_k_mul_columns(k, R, D, h.ops, buf->dxn, D);
        }
        /* dx (residual) += the norm's backward, in its pass */
        width_norm_backward(rt, R, x, m->layers[l].norm, &h, buf->dxn, 1.0f, buf->dx, g ? g->layers[l].norm : NULL,
                            dhidden);
    }
    for (int s = 0; s < seqs->n; s++)
        for (int t = 0; t < seqs->len[s]; t++) {
            size_t row = (size_t)(seqs->offset[s] + t);
            const float *e = m->embeddings + (size_t)tokens[s][t] * D;
            if (dhidden)
                ac_k_column_dot(k, 1, D, buf->dx + row * D, D, e, D, dhidden);
        }
    if (h.host)
        ac_k_mul_columns(k, R, D, h.ops, buf->dx, D);
    if (g) { /* one op for the batch's rows, not an add per token */
        upload_ids(rt, seqs, tokens);
        ac_k_embedding_backward(k, R, D, buf->dx, rt->ids, g->embeddings);
    }
}
