/* The training step: the driver's forward with every layer's input kept, the loss
 * (cross-entropy or distillation), then the driver's backward (runtime/driver.c).
 * Buffers live where the model's weights do; on a device, the inputs the caller gives in
 * host memory (targets, teacher logits) are copied in, and the losses and the logits
 * ac_train_step_logits returns are copied out. */
#include "autocompress/train.h"

#include <stdlib.h>
#include <string.h>

#include "blocks/block.h"
#include "runtime/runtime_internal.h"
#include "train/mask_mirror.h"

struct ac_train_step {
    const ac_model *model;
    ac_runtime *rt;
    int B, T, rows;
    ac_seqs seqs;
    const int32_t **seq_tokens; /* [B]: each sequence's inputs in this step's tokens */
    float *xs;      /* [L + 1, rows, D]: the residual stream entering each layer, and after the last */
    float *xns;     /* [L, rows, D]: each block's input, the normed stream */
    float *outs;    /* [L, rows, D], made at the first step with mask gradients: each block's
                       mixer output, which their backward would otherwise recompute */
    float *saved_arena; /* every block's kept forward internals (block.h saved_per_token) */
    float **saved;      /* [L]: each block's part of saved_arena, NULL for a block that keeps none */
    ac_pass_grad_buffers buf; /* the backward's: xn_raw, dx, dxn [rows, D] and column [D] */
    float *logits;  /* [rows, V], then dL/dlogits */
    double *row_loss; /* [rows] */
    /* on a device only (NULL on the CPU, whose memory is the host's): */
    int32_t *targets;     /* [rows] the step's targets, copied in */
    float *teacher;       /* [rows, V] the teacher's logits, copied in (made at the first KD step) */
    double *row_loss_host; /* [rows] */
    float *logits_host;    /* [rows, V] the logits of the last loss-only forward */
    ac_mask_mirror mirror; /* the masks and their gradients where the ops run */
};

static const ac_backend *step_backend(const ac_train_step *s) { return ac_model_backend(s->model); }

/* Floats block l's training forward keeps for the step's B sequences of T tokens. */
static size_t saved_floats(const ac_train_step *s, int l)
{
    const ac_arch *a = &s->model->arch;
    const ac_block_ops *ops = ac_block(&a->layers[l]);
    size_t n = ops->saved_per_token(a, &a->layers[l]) * (size_t)s->rows;
    if (ops->saved_per_sequence)
        n += ops->saved_per_sequence(&a->layers[l], step_backend(s), s->T) * (size_t)s->B;
    return n;
}

/* The blocks' kept forward internals: one arena, a slice per block that keeps any. */
static ac_status alloc_saved(ac_train_step *s)
{
    const ac_arch *a = &s->model->arch;
    size_t total = 0;
    s->saved = calloc((size_t)a->n_layers, sizeof *s->saved);
    if (!s->saved)
        return AC_ERR_NOMEM;
    for (int l = 0; l < a->n_layers; l++)
        total += saved_floats(s, l);
    if (total == 0)
        return AC_OK;
    s->saved_arena = step_backend(s)->alloc_dense(total * sizeof(float));
    if (!s->saved_arena)
        return AC_ERR_NOMEM;
    size_t used = 0;
    for (int l = 0; l < a->n_layers; l++) {
        size_t n = saved_floats(s, l);
        s->saved[l] = n ? s->saved_arena + used : NULL;
        used += n;
    }
    return AC_OK;
}

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
    s->seq_tokens = calloc((size_t)batch, sizeof *s->seq_tokens);
    const ac_backend *be = step_backend(s);
    s->xs = be->alloc_dense(((size_t)a->n_layers + 1) * rows * D * sizeof(float));
    s->xns = be->alloc_dense((size_t)a->n_layers * rows * D * sizeof(float));
    if (alloc_saved(s) != AC_OK) {
        ac_train_step_free(s);
        return ac_fail(AC_ERR_NOMEM, "train: cannot allocate the kept forward internals for %d x %d tokens", batch,
                       seq_len);
    }
    s->buf.xn_raw = be->alloc_dense(rows * D * sizeof(float));
    s->buf.dx = be->alloc_dense(rows * D * sizeof(float));
    s->buf.dxn = be->alloc_dense(rows * D * sizeof(float));
    s->buf.column = be->alloc(D * sizeof(float));
    s->logits = be->alloc_dense(rows * (size_t)a->vocab * sizeof(float));
    s->row_loss = be->alloc(rows * sizeof(double));
    int on_host = model->backend == NULL;
    if (!on_host) {
        if (ac_mask_mirror_init(&s->mirror, be, &model->arch) != AC_OK) {
            ac_train_step_free(s);
            return ac_fail(AC_ERR_NOMEM, "train: out of memory");
        }
        s->targets = be->alloc(rows * sizeof(int32_t));
        s->row_loss_host = malloc(rows * sizeof(double));
        s->logits_host = malloc(rows * (size_t)a->vocab * sizeof(float));
    }
    if (!s->seqs.offset || !s->seqs.len || !s->seq_tokens || !s->xs || !s->xns || !s->buf.xn_raw || !s->buf.dx || !s->buf.dxn ||
        !s->buf.column || !s->logits || !s->row_loss ||
        (!on_host && (!s->targets || !s->row_loss_host || !s->logits_host))) {
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
    const ac_backend *be = step_backend(s);
    ac_runtime_free(s->rt);
    free(s->seqs.offset);
    free(s->seqs.len);
    free(s->seq_tokens);
    be->free(s->xs);
    be->free(s->xns);
    be->free(s->saved_arena);
    free(s->saved);
    be->free(s->outs);
    be->free(s->buf.xn_raw);
    be->free(s->buf.dx);
    be->free(s->buf.dxn);
    be->free(s->buf.column);
    be->free(s->logits);
    be->free(s->row_loss);
    be->free(s->targets);
    be->free(s->teacher);
    free(s->row_loss_host);
    free(s->logits_host);
    ac_mask_mirror_free(&s->mirror);
    free(s);
}

const float *ac_train_step_logits(const ac_train_step *s) { return s->logits_host ? s->logits_host : s->logits; }

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
    if (in->grads && in->grads->backend != s->model->backend)
        return ac_fail(AC_ERR_INVALID, "train: the gradients are on %s, the model on %s", ac_model_device(in->grads),
                       ac_model_device(s->model));
    return AC_OK;
}

/* The driver's forward over the whole block and the logits of every position; every
 * layer's input is kept only when a backward follows (a teacher's or an evaluation's
 * forward updates one stream in place). */
/* The masks where the ops read them: the device's copy (uploaded for this step), or the
 * caller's on the CPU. */
static const ac_masks *device_masks(const ac_train_step *s, const ac_step_inputs *in)
{
    return s->model->backend && in->masks ? &s->mirror.masks : NULL;
}

static void forward(ac_train_step *s, const ac_step_inputs *in, int keep_inputs)
{
    for (int b = 0; b < s->B; b++)
        s->seq_tokens[b] = in->tokens + (size_t)b * s->T;
    ac_pass pass = {.masks = in->masks, .dev_masks = device_masks(s, in), .xs = s->xs, .xns = s->xns,
                    .keep_inputs = keep_inputs,
                    .outs = keep_inputs && in->mask_grads ? s->outs : NULL, .saved = s->saved};
    ac_driver_forward(s->rt, &s->seqs, s->seq_tokens, &pass);
    ac_driver_logits(s->rt, &s->seqs, &pass, AC_LOGITS_ALL, s->logits);
}

/* The mean loss and, when want_grad, dL/dlogits in place of the logits. The mean is
 * over this step's positions, or over in->loss_positions (a data-parallel rank's share of
 * a global batch: the ranks' losses and gradients then add up to the global ones). */
static double loss_and_dlogits(ac_train_step *s, const ac_step_inputs *in, int want_grad)
{
    int V = s->model->arch.vocab, R = s->rows, counted = R;
    ac_kctx *k = &s->rt->kctx;
    const ac_backend *be = step_backend(s);
    float *dlogits = want_grad ? s->logits : NULL;
    const int32_t *targets = in->targets;
    const float *teacher = in->teacher_logits;
    if (!in->teacher_logits) {
        counted = 0;
        for (int i = 0; i < R; i++)
            counted += in->targets[i] >= 0;
    }
    int64_t over = in->loss_positions > 0 ? in->loss_positions : counted;
    float scale = over ? 1.0f / (float)over : 0.0f;
    if (s->model->backend) { /* the inputs into the device's memory, where the ops run */
        if (targets) {
            be->copy(s->targets, targets, (size_t)R * sizeof *targets, AC_COPY_HOST_TO_DEVICE);
            targets = s->targets;
        } else {
            be->copy(s->teacher, teacher, (size_t)R * V * sizeof *teacher, AC_COPY_HOST_TO_DEVICE);
            teacher = s->teacher;
        }
    }
    if (teacher)
        ac_k_kd_loss(k, R, V, s->logits, teacher, in->kd_tau, scale, dlogits, s->row_loss);
    else
        ac_k_cross_entropy(k, R, V, s->logits, targets, scale, dlogits, s->row_loss);
    const double *row_loss = s->row_loss;
    if (s->row_loss_host) {
        be->copy(s->row_loss_host, s->row_loss, (size_t)R * sizeof *row_loss, AC_COPY_DEVICE_TO_HOST);
        row_loss = s->row_loss_host;
    }
    double sum = 0.0;
    for (int i = 0; i < R; i++)
        sum += row_loss[i];
    return over ? sum / (double)over : 0.0;
}

/* On a device, where the teacher's logits are copied in (made at the first KD step). */
static ac_status reserve_teacher(ac_train_step *s)
{
    if (s->teacher)
        return AC_OK;
    const ac_backend *be = step_backend(s);
    s->teacher = be->alloc_dense((size_t)s->rows * s->model->arch.vocab * sizeof(float));
    if (!s->teacher)
        return ac_fail(AC_ERR_NOMEM, "train: cannot allocate the teacher's logits on %s", be->name);
    return AC_OK;
}

static void backward(ac_train_step *s, const ac_step_inputs *in)
{
    ac_pass pass = {.masks = in->masks, .dev_masks = device_masks(s, in), .xs = s->xs, .xns = s->xns,
                    .keep_inputs = 1,
                    .outs = in->mask_grads ? s->outs : NULL, .saved = s->saved};
    int mirrored = s->model->backend && in->mask_grads;
    ac_driver_backward(s->rt, &s->seqs, s->seq_tokens, &pass, s->logits, &s->buf, in->grads,
                       mirrored ? &s->mirror.grads : in->mask_grads);
    if (mirrored)
        ac_mask_mirror_download(&s->mirror, in->masks, in->mask_grads);
}

ac_status ac_train_step_loss(ac_train_step *s, const ac_step_inputs *in, double *loss)
{
    ac_status st = check_inputs(s, in);
    if (st == AC_OK && s->model->backend && in->masks)
        st = ac_mask_mirror_upload(&s->mirror, in->masks, NULL);
    if (st != AC_OK)
        return st;
    ac_k_flush_denormals();
    forward(s, in, 0);
    /* keep the logits readable: the loss needs no gradient buffer */
    if (in->teacher_logits && s->model->backend && (st = reserve_teacher(s)) != AC_OK)
        return st;
    *loss = loss_and_dlogits(s, in, 0);
    if (s->logits_host)
        step_backend(s)->copy(s->logits_host, s->logits, (size_t)s->rows * s->model->arch.vocab * sizeof(float),
                              AC_COPY_DEVICE_TO_HOST);
    return ac_runtime_device_status(s->rt, "train: loss");
}

ac_status ac_train_step_run(ac_train_step *s, const ac_step_inputs *in, double *loss)
{
    if (ac_model_weights_dtype(s->model) != AC_DTYPE_F32)
        return ac_fail(AC_ERR_UNSUPPORTED, "train: a training step needs f32 weights; this model is a bf16 serving "
                                           "copy, which computes losses only (ac_train_step_loss)");
    ac_status st = check_inputs(s, in);
    if (st != AC_OK)
        return st;
    if (in->masks && in->mask_grads && !s->outs) {
        const ac_arch *a = &s->model->arch;
        s->outs = step_backend(s)->alloc_dense((size_t)a->n_layers * s->rows * a->hidden * sizeof(float));
        if (!s->outs)
            return ac_fail(AC_ERR_NOMEM, "train: out of memory for the block outputs of a masked step");
    }
    if (in->teacher_logits && s->model->backend && (st = reserve_teacher(s)) != AC_OK)
        return st;
    if (s->model->backend && (in->masks || in->mask_grads) &&
        (st = ac_mask_mirror_upload(&s->mirror, in->masks, in->mask_grads)) != AC_OK)
        return st;
    ac_k_flush_denormals();
    forward(s, in, 1);
    *loss = loss_and_dlogits(s, in, 1);
    backward(s, in);
    return ac_runtime_device_status(s->rt, "train: step");
}
