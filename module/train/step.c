/* The training step: embeddings, pre-norm residual blocks (with soft masks and layer
 * gates), final norm and LM head forward; loss; then the backward in reverse, each block
 * recomputing its internals from its saved input. */
#include "autocompress/train.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"

struct ac_train_step {
    const ac_model *model;
    ac_runtime *rt;
    int B, T, rows;
    ac_seqs seqs;
    float *xs;      /* [L + 1, rows, D]: the residual stream entering each layer, and after the last */
    float *xn_raw;  /* [rows, D] rmsnorm(x) before the hidden mask */
    float *xn;      /* [rows, D] the block input */
    float *out;     /* [rows, D] */
    float *dx;      /* [rows, D] dL/dx of the residual stream */
    float *dxn;     /* [rows, D] */
    float *logits;  /* [rows, V], then dL/dlogits */
    float *column;  /* [D] per-channel sums for the gate and hidden-mask gradients */
    double *row_loss; /* [rows] */
};

ac_status ac_train_step_create(const ac_model *model, int batch, int seq_len, ac_train_step **step)
{
    if (batch < 1 || seq_len < 1)
        return ac_fail(AC_ERR_INVALID, "train: batch (%d) and sequence length (%d) must be positive", batch, seq_len);
    ac_train_step *s = calloc(1, sizeof *s);
    if (!s)
        return ac_fail(AC_ERR_NOMEM, "train: out of memory");
    const ac_arch *a = &model->arch;
    size_t D = (size_t)a->hidden, rows = (size_t)batch * seq_len;
    s->model = model;
    s->B = batch;
    s->T = seq_len;
    s->rows = (int)rows;
    ac_status st = ac_runtime_create(model, &s->rt);
    if (st == AC_OK)
        st = ac_runtime_reserve_training(s->rt, (int)rows, batch);
    if (st != AC_OK) {
        ac_train_step_free(s);
        return st;
    }
    s->seqs = (ac_seqs){.n = batch, .total = (int)rows, .offset = calloc((size_t)batch, sizeof(int)),
                        .len = calloc((size_t)batch, sizeof(int)), .caches = NULL};
    s->xs = malloc(((size_t)a->n_layers + 1) * rows * D * sizeof(float));
    s->xn_raw = malloc(rows * D * sizeof(float));
    s->xn = malloc(rows * D * sizeof(float));
    s->out = malloc(rows * D * sizeof(float));
    s->dx = malloc(rows * D * sizeof(float));
    s->dxn = malloc(rows * D * sizeof(float));
    s->logits = malloc(rows * (size_t)a->vocab * sizeof(float));
    s->column = malloc(D * sizeof(float));
    s->row_loss = malloc(rows * sizeof(double));
    if (!s->seqs.offset || !s->seqs.len || !s->xs || !s->xn_raw || !s->xn || !s->out || !s->dx || !s->dxn || !s->logits ||
        !s->column || !s->row_loss) {
        ac_train_step_free(s);
        return ac_fail(AC_ERR_NOMEM, "train: cannot allocate activations for %d x %d tokens", batch, seq_len);
    }
    for (int b = 0; b < batch; b++) {
        s->seqs.offset[b] = b * seq_len;
        s->seqs.len[b] = seq_len;
    }
    *step = s;
    return AC_OK;
}

void ac_train_step_free(ac_train_step *s)
{
    if (!s)
        return;
    ac_runtime_free(s->rt);
    free(s->seqs.offset);
    free(s->seqs.len);
    free(s->xs);
    free(s->xn_raw);
    free(s->xn);
    free(s->out);
    free(s->dx);
    free(s->dxn);
    free(s->logits);
    free(s->column);
    free(s->row_loss);
    free(s);
}

const float *ac_train_step_logits(const ac_train_step *s) { return s->logits; }

static ac_block_masks block_masks(const ac_masks *m, int layer)
{
    ac_block_masks b = {0};
    if (!m)
        return b;
    b.mamba_heads = m->mamba_heads ? m->mamba_heads[layer] : NULL;
    b.experts = m->experts ? m->experts[layer] : NULL;
    b.ffn = m->ffn ? m->ffn[layer] : NULL;
    b.shared_ffn = m->shared_ffn ? m->shared_ffn[layer] : NULL;
    return b;
}

static ac_block_mask_grads block_mask_grads(const ac_mask_grads *g, int layer)
{
    ac_block_mask_grads b = {0};
    if (!g)
        return b;
    b.mamba_heads = g->mamba_heads ? g->mamba_heads[layer] : NULL;
    b.experts = g->experts ? g->experts[layer] : NULL;
    b.ffn = g->ffn ? g->ffn[layer] : NULL;
    b.shared_ffn = g->shared_ffn ? g->shared_ffn[layer] : NULL;
    return b;
}

static void block_forward(ac_train_step *s, int layer, const ac_block_masks *m, const float *xn, float *out)
{
    ac_runtime *rt = s->rt;
    rt->scratch_used = 0;
    switch (s->model->arch.layers[layer].kind) {
    case AC_BLOCK_MAMBA: ac_mamba2_forward(rt, layer, &s->seqs, xn, m, out); break;
    case AC_BLOCK_ATTENTION: ac_attention_forward(rt, layer, &s->seqs, xn, m, out); break;
    case AC_BLOCK_MLP: ac_mlp_forward(rt, layer, &s->seqs, xn, m, out); break;
    case AC_BLOCK_MOE: ac_moe_forward(rt, layer, &s->seqs, xn, m, out); break;
    }
}

static void block_backward(ac_train_step *s, int layer, const ac_block_masks *m, const float *xn, const float *dout,
                           float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mg)
{
    ac_runtime *rt = s->rt;
    rt->scratch_used = 0;
    switch (s->model->arch.layers[layer].kind) {
    case AC_BLOCK_MAMBA: ac_mamba2_backward(rt, layer, &s->seqs, xn, m, dout, dxn, grad, mg); break;
    case AC_BLOCK_ATTENTION: ac_attention_backward(rt, layer, &s->seqs, xn, m, dout, dxn, grad, mg); break;
    case AC_BLOCK_MLP: ac_mlp_backward(rt, layer, &s->seqs, xn, m, dout, dxn, grad, mg); break;
    case AC_BLOCK_MOE: ac_moe_backward(rt, layer, &s->seqs, xn, m, dout, dxn, grad, mg); break;
    }
}

static ac_status check_inputs(const ac_train_step *s, const ac_step_inputs *in)
{
    const ac_arch *a = &s->model->arch;
    if (!in->tokens)
        return ac_fail(AC_ERR_INVALID, "train: no input tokens");
    if (!in->targets == !in->teacher_logits)
        return ac_fail(AC_ERR_INVALID, "train: give either targets (cross-entropy) or teacher logits (distillation)");
    if (in->teacher_logits && !(in->kd_tau > 0))
        return ac_fail(AC_ERR_INVALID, "train: distillation temperature must be positive, got %g", in->kd_tau);
    for (int i = 0; i < s->rows; i++) {
        if (in->tokens[i] < 0 || in->tokens[i] >= a->vocab)
            return ac_fail(AC_ERR_INVALID, "train: input token %d (sequence %d, position %d) is outside [0, %d)",
                           in->tokens[i], i / s->T, i % s->T, a->vocab);
        if (in->targets && in->targets[i] >= a->vocab)
            return ac_fail(AC_ERR_INVALID, "train: target %d (sequence %d, position %d) is outside the vocabulary",
                           in->targets[i], i / s->T, i % s->T);
    }
    if (in->grads && in->grads->arena_count != s->model->arena_count)
        return ac_fail(AC_ERR_INVALID, "train: the gradient model's layout differs from the model's");
    return AC_OK;
}

static void forward(ac_train_step *s, const ac_masks *masks)
{
    const ac_model *m = s->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden, R = s->rows;
    ac_kctx *k = &s->rt->kctx;
    const float *hidden = masks ? masks->hidden : NULL;
    const float *gate = masks ? masks->layer_gate : NULL;

    for (int l = 0; l < a->n_layers; l++) {
        float *x = s->xs + (size_t)l * R * D, *next = x + (size_t)R * D;
        ac_block_masks bm = block_masks(masks, l);
        ac_k_rmsnorm(k, R, D, x, D, m->layers[l].norm, a->norm_eps, s->xn, D);
        if (hidden)
            ac_k_mul_columns(k, R, D, hidden, s->xn, D);
        block_forward(s, l, &bm, s->xn, s->out);
        if (hidden)
            ac_k_mul_columns(k, R, D, hidden, s->out, D);
        if (gate)
            ac_k_scale(k, (size_t)R * D, gate[l], s->out);
        memcpy(next, x, (size_t)R * D * sizeof(float));
        ac_k_add(k, (size_t)R * D, s->out, next);
    }
    const float *last = s->xs + (size_t)a->n_layers * R * D;
    ac_k_rmsnorm(k, R, D, last, D, m->norm_f, a->norm_eps, s->xn_raw, D);
    memcpy(s->xn, s->xn_raw, (size_t)R * D * sizeof(float));
    if (hidden)
        ac_k_mul_columns(k, R, D, hidden, s->xn, D);
    ac_k_linear(k, R, a->vocab, D, s->xn, D, m->lm_head, 0.0f, s->logits, a->vocab);
}

static void embed(ac_train_step *s, const ac_step_inputs *in)
{
    const ac_model *m = s->model;
    int D = m->arch.hidden;
    for (int i = 0; i < s->rows; i++)
        memcpy(s->xs + (size_t)i * D, m->embeddings + (size_t)in->tokens[i] * D, (size_t)D * sizeof(float));
    if (in->masks && in->masks->hidden)
        ac_k_mul_columns(&s->rt->kctx, s->rows, D, in->masks->hidden, s->xs, D);
}

/* The mean loss and, when want_grad, dL/dlogits in place of the logits. */
static double loss_and_dlogits(ac_train_step *s, const ac_step_inputs *in, int want_grad)
{
    int V = s->model->arch.vocab, R = s->rows, counted = R;
    ac_kctx *k = &s->rt->kctx;
    float *dlogits = want_grad ? s->logits : NULL;
    if (in->teacher_logits) {
        ac_k_kd_loss(k, R, V, s->logits, in->teacher_logits, in->kd_tau, 1.0f / R, dlogits, s->row_loss);
    } else {
        counted = 0;
        for (int i = 0; i < R; i++)
            counted += in->targets[i] >= 0;
        ac_k_cross_entropy(k, R, V, s->logits, in->targets, counted ? 1.0f / counted : 0.0f, dlogits, s->row_loss);
    }
    double sum = 0.0;
    for (int i = 0; i < R; i++)
        sum += s->row_loss[i];
    return counted ? sum / counted : 0.0;
}

static void backward(ac_train_step *s, const ac_step_inputs *in)
{
    const ac_model *m = s->model;
    const ac_arch *a = &m->arch;
    int D = a->hidden, R = s->rows, V = a->vocab;
    ac_kctx *k = &s->rt->kctx;
    const float *hidden = in->masks ? in->masks->hidden : NULL;
    const float *gate = in->masks ? in->masks->layer_gate : NULL;
    float *dhidden = in->mask_grads ? in->mask_grads->hidden : NULL;
    float *dgate = in->mask_grads ? in->mask_grads->layer_gate : NULL;
    ac_model *g = in->grads;

    /* LM head and final norm: s->xn holds the masked final norm, s->xn_raw the unmasked one */
    ac_k_linear_backward(k, R, V, D, s->xn, D, m->lm_head, s->logits, V, 0.0f, s->dxn, D, g ? g->lm_head : NULL);
    if (hidden) {
        if (dhidden)
            ac_k_column_dot(k, R, D, s->dxn, D, s->xn_raw, D, dhidden);
        ac_k_mul_columns(k, R, D, hidden, s->dxn, D);
    }
    const float *last = s->xs + (size_t)a->n_layers * R * D;
    ac_k_rmsnorm_backward(k, R, D, last, D, m->norm_f, a->norm_eps, s->dxn, D, s->dx, D, g ? g->norm_f : NULL);

    for (int l = a->n_layers - 1; l >= 0; l--) {
        const float *x = s->xs + (size_t)l * R * D;
        ac_block_masks bm = block_masks(in->masks, l);
        ac_block_mask_grads bg = block_mask_grads(in->mask_grads, l);
        float gl = gate ? gate[l] : 1.0f;
        ac_k_rmsnorm(k, R, D, x, D, m->layers[l].norm, a->norm_eps, s->xn_raw, D);
        memcpy(s->xn, s->xn_raw, (size_t)R * D * sizeof(float));
        if (hidden)
            ac_k_mul_columns(k, R, D, hidden, s->xn, D);
        /* the gate's and the output mask's gradients need the block's own output */
        if ((gate && dgate) || (hidden && dhidden)) {
            block_forward(s, l, &bm, s->xn, s->out);
            float dg = 0.0f, *col = s->column;
            memset(col, 0, (size_t)D * sizeof *col);
            ac_k_column_dot(k, R, D, s->dx, D, s->out, D, col);
            for (int c = 0; c < D; c++) {
                dg += col[c] * (hidden ? hidden[c] : 1.0f);
                if (hidden && dhidden)
                    dhidden[c] += gl * col[c];
            }
            if (gate && dgate)
                dgate[l] += dg;
        }
        /* dout = dx * gate * hidden; reuse s->out for it */
        memcpy(s->out, s->dx, (size_t)R * D * sizeof(float));
        if (hidden)
            ac_k_mul_columns(k, R, D, hidden, s->out, D);
        if (gate)
            ac_k_scale(k, (size_t)R * D, gl, s->out);
        block_backward(s, l, &bm, s->xn, s->out, s->dxn, g ? &g->layers[l] : NULL, &bg);
        if (hidden) {
            if (dhidden)
                ac_k_column_dot(k, R, D, s->dxn, D, s->xn_raw, D, dhidden);
            ac_k_mul_columns(k, R, D, hidden, s->dxn, D);
        }
        /* dx (residual) += the norm's backward; xn_raw is free to hold it */
        ac_k_rmsnorm_backward(k, R, D, x, D, m->layers[l].norm, a->norm_eps, s->dxn, D, s->xn_raw, D,
                              g ? g->layers[l].norm : NULL);
        ac_k_add(k, (size_t)R * D, s->xn_raw, s->dx);
    }
    if (hidden) {
        if (dhidden)
            for (int i = 0; i < R; i++)
                ac_k_column_dot(k, 1, D, s->dx + (size_t)i * D, D, m->embeddings + (size_t)in->tokens[i] * D, D, dhidden);
        ac_k_mul_columns(k, R, D, hidden, s->dx, D);
    }
    if (g)
        for (int i = 0; i < R; i++)
            ac_k_add(k, (size_t)D, s->dx + (size_t)i * D, g->embeddings + (size_t)in->tokens[i] * D);
}

ac_status ac_train_step_loss(ac_train_step *s, const ac_step_inputs *in, double *loss)
{
    ac_status st = check_inputs(s, in);
    if (st != AC_OK)
        return st;
    ac_k_flush_denormals();
    embed(s, in);
    forward(s, in->masks);
    /* keep the logits readable: the loss needs no gradient buffer */
    *loss = loss_and_dlogits(s, in, 0);
    return AC_OK;
}

ac_status ac_train_step_run(ac_train_step *s, const ac_step_inputs *in, double *loss)
{
    ac_status st = check_inputs(s, in);
    if (st != AC_OK)
        return st;
    ac_k_flush_denormals();
    embed(s, in);
    forward(s, in->masks);
    *loss = loss_and_dlogits(s, in, 1);
    backward(s, in);
    return AC_OK;
}
