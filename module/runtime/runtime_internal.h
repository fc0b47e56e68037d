/* What the block files and the driver share: the runtime's buffers and the caches. */
#ifndef AC_RUNTIME_INTERNAL_H
#define AC_RUNTIME_INTERNAL_H

#include "autocompress/masks.h"
#include "autocompress/runtime.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"

struct ac_cache {
    const ac_model *model;
    ac_cache_layers l;
};

struct ac_runtime {
    const ac_model *model;
    ac_kctx kctx;
    int capacity_tokens;   /* rows the buffers below hold */
    int dense;             /* training: every row of the buffers below written each step, so
                              they come from the backend's alloc_dense */
    size_t scratch_per_token;
    float *x;              /* [T, D] residual stream */
    float *xn;             /* [T, D] normed block input */
    float *mix;            /* [T, D] block output */
    float *scratch;        /* per-block temporaries (ac_block_ctx), reset every block */
    void *workspace;       /* kernel workspace (attention scores), grown to the longest sequence */
    size_t workspace_bytes;
    int32_t *ids;          /* [T] row indices in the backend's memory: the batch's token
                              ids, then the rows whose logits are wanted */
    int32_t *ids_host;     /* [T] their host staging, followed by */
    float *host;           /* on a device: [T, host_per_token], what blocks read back to the
                              host (block.h); NULL on the CPU, whose memory is the host's */
    int32_t *iota;         /* [T] 0, 1, ..., T-1 in the backend's memory: row indices that
                              copy rows from one layout to another (ac_k_gather_rows) */
    int *offset, *len;     /* [n_seqs] */
    ac_cache_layers **views; /* [n_seqs] the batch's caches as the blocks see them */
    int seqs_capacity;
    float *spread;         /* [hidden] a value the host computed, spread over the channels
                              for the ops (the driver's width gradient), in the backend's
                              memory, and its host staging */
    float *spread_host;
    float *logits;         /* on a device: the logits before they go to the caller's memory */
    size_t logits_count;
    struct ac_probe *probe; /* layer timing (autocompress/probe.h); NULL: off */
    const ac_masks *masks;  /* soft masks of every forward (ac_runtime_set_masks); NULL: none */
};

/* Plans the runtime for training on `total_tokens` packed tokens in `n_seqs` sequences:
 * scratch grows to the largest backward need of any block. */
ac_status ac_runtime_reserve_training(ac_runtime *rt, int total_tokens, int n_seqs);

/* AC_OK, or AC_ERR_DEVICE naming `what` and the first failure the backend kept (an op
 * that could not launch, a copy or allocation the device refused) since the last call. */
ac_status ac_runtime_device_status(ac_runtime *rt, const char *what);

/* The context of a block's forward or backward over the runtime's buffers: scratch from
 * its start, `saved` (a training pass's kept internals of this block, or NULL). */
ac_block_ctx ac_runtime_block_ctx(ac_runtime *rt, float *saved);

/* ---- the driver (driver.c): one forward and one backward for inference, training,
 * distillation and search ---- */

/* The residual stream of one pass over a packed batch. */
typedef struct {
    const ac_masks *masks;  /* NULL: the full model; host memory */
    const ac_masks *dev_masks; /* the same masks where the ops run (NULL: masks itself) */
    float *xs;              /* [T, D] updated in place, or [L + 1, T, D] when keep_inputs */
    int keep_inputs;        /* keep every layer's input (and the last output) for the backward */
    float *outs;            /* [L, T, D] or NULL: each block's mixer output (before the hidden
                               mask and gate), kept for the gate and hidden-mask gradients,
                               which otherwise recompute it */
    float *xns;             /* [L, T, D] or NULL: where a keep_inputs forward keeps each block's
                               input (the normed, masked stream), which the backward
                               otherwise recomputes */
    float *const *saved;    /* [L] or NULL: where a keep_inputs forward keeps each block's
                               internals for the backward (block.h: saved_per_token x T
                               and saved_per_sequence floats each, NULL for a block that
                               keeps none) */
} ac_pass;

/* The backward's buffers, [T, D] each but column [D]. */
typedef struct {
    float *xn_raw, *dx, *dxn, *column;
} ac_pass_grad_buffers;

/* Embeds tokens[s][0 .. len[s]) of every sequence into the stream (times the hidden
 * mask), then runs every block: x += gate * hidden * mixer(hidden * norm(x)). The
 * caches (if any) advance inside the blocks; their token counts are the caller's. */
void ac_driver_forward(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens, const ac_pass *pass);
/* The final norm (times the hidden mask) and the LM head over the stream's last state:
 * every row (AC_LOGITS_ALL) or each sequence's last (AC_LOGITS_LAST). */
void ac_driver_logits(ac_runtime *rt, const ac_seqs *seqs, const ac_pass *pass, ac_logits_mode mode, float *logits);
/* The backward of a keep_inputs pass from dlogits [T, V] (every row): weight gradients
 * into grads (+=, NULL: none), mask gradients into mask_grads (+=, NULL: none). */
void ac_driver_backward(ac_runtime *rt, const ac_seqs *seqs, const int32_t *const *tokens, const ac_pass *pass,
                        const float *dlogits, const ac_pass_grad_buffers *buf, ac_model *grads,
                        const ac_mask_grads *mask_grads);

#endif
