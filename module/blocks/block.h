/* The block-kind table, the engine's ground: everything the library knows about one kind
 * of layer lives in that kind's file (blocks/mamba2.c, attention.c, mlp.c, moe.c) and is
 * reached through one ac_block_ops entry. Code that is not about one kind (the driver,
 * the cache, the arch's checks and counts, the weight layout, slicing, the memory model,
 * the cost tables, importance, reorder, the routers, pruning) asks the table instead of
 * switching over kinds. A block's forward and backward see only an ac_block_ctx, which
 * the runtime's driver hands in; nothing here knows the runtime or the model. */
#ifndef AC_BLOCK_H
#define AC_BLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autocompress/arch.h"
#include "autocompress/cost.h"
#include "blocks/layout.h"
#include "kernels/kernels.h"

/* One sequence's cache, as the blocks see it. */
typedef struct {
    int tokens;        /* tokens seen before this call */
    int capacity;      /* KV rows allocated per layer with KV */
    float **k, **v;    /* per layer: [kv_heads, capacity, head_dim], NULL without KV */
    float **state;     /* per layer: the kind's fixed state (state_floats), NULL without */
} ac_cache_layers;

/* The packed batch: sequence s owns rows offset[s] .. offset[s] + len[s] - 1.
 * caches == NULL (training) means every sequence starts empty and keeps no state. */
typedef struct {
    int n;
    int total;
    int *offset;
    int *len;
    ac_cache_layers *const *caches;
} ac_seqs;

/* Where the ops read a layer's masks; and the host's values of the two a block decides
 * on (Mamba's group widths, the MoE's expert grouping) when the ops' memory is a
 * device's (NULL: the ops' pointers are host memory). ac_block_mask_host picks. */
typedef struct {
    const float *mamba_heads, *experts, *expert_scores, *ffn, *shared_ffn;
    const float *host_mamba_heads, *host_experts;
} ac_block_masks;

static inline const float *ac_block_mask_host(const float *host, const float *ops) { return host ? host : ops; }

/* Where a block's mask gradients go (NULL: not wanted). */
typedef struct {
    float *mamba_heads, *experts, *expert_scores, *ffn, *shared_ffn;
} ac_block_mask_grads;

/* What a block's forward and backward work with, handed in by the runtime's driver: the
 * ops' context, the model's weights (products through ac_block_linear and its kin, which
 * read a serving copy's bf16 weights), planned scratch, the internals a training forward
 * keeps, and the caches (through ac_seqs). */
typedef struct {
    ac_kctx *kctx;
    const ac_arch *arch;
    const ac_layer_weights *layers; /* every layer's weights, arch->n_layers of them */
    int bf16;            /* the product weights are bf16 (a serving copy, blocks/layout.h) */
    float *scratch;      /* per-block temporaries, planned per token by the kind's entry */
    size_t scratch_used; /* the driver starts every block at 0 */
    float *saved;        /* the block's kept forward internals (see forward below); NULL: none */
    float *host;         /* on a device: host memory for what a block reads back (host_per_token);
                            NULL on the CPU, whose memory is the host's */
    const int32_t *iota; /* [T] 0, 1, ..., T-1 in the ops' memory */
} ac_block_ctx;

/* The per-layer axes a search narrows: importance scores, soft masks and the reorder's
 * permutations index them. A layer has an array of axis_length on each (0: none). */
typedef enum {
    AC_LAYER_MAMBA_HEADS,
    AC_LAYER_EXPERTS,
    AC_LAYER_FFN,        /* an MLP's channels, a MoE's routed experts' (one order for all) */
    AC_LAYER_SHARED_FFN, /* a MoE's shared expert's channels */
    AC_LAYER_AXES
} ac_layer_axis;

/* One chunk of calibration rows, as a kind's importance reads it: the layer's normed
 * input of n_seqs sequences of seq_len rows each, one after another. */
typedef struct {
    ac_kctx *kctx;
    const float *xn;  /* [T, D] */
    int T, n_seqs, seq_len;
    float *scratch;   /* T x importance_per_token floats */
    double *colsum;   /* importance_per_token doubles (ac_importance_add_means) */
} ac_importance_chunk;

typedef struct {
    ac_block_kind kind;
    const char *name; /* "mamba", as in block_configs' block_type */
    char letter;      /* of the hybrid pattern: M * - E */

    /* ---- the architecture ---- */
    /* Checks the kind's fields; the message names layer i and the field. */
    ac_status (*validate)(int i, const ac_block_dims *b);
    /* 1 when a and b (both of this kind) agree on every field the kind uses. */
    int (*same_dims)(const ac_block_dims *a, const ac_block_dims *b);
    /* Parameters besides the block's pre-norm; active: only those a token touches
     * (top_k of the routed experts). */
    int64_t (*params)(const ac_arch *arch, const ac_block_dims *b, int active);
    /* The dims as one line of `autocompress info`, and as a short tag ("M8", "E16/64/128"). */
    void (*print)(const ac_block_dims *b, FILE *out);
    void (*tag)(const ac_block_dims *b, char *buf, size_t size);

    /* ---- weights ---- */
    /* Adds the mixer's tensors (checkpoint names and shapes) to the arena layout. */
    void (*layout)(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w);
    /* Copies the leading channels, heads and experts of a parent layer pb (of this kind,
     * or another kind the slice knows how to read) into child layer cb at hidden sizes
     * Dc and Dp; what the parent lacks keeps its values. */
    void (*slice)(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw, const ac_arch *parent,
                  const ac_block_dims *pb, const ac_layer_weights *pw);

    /* ---- sizes (the runtime's plan and the memory model read the same numbers) ---- */
    size_t (*scratch_per_token)(const ac_arch *arch, const ac_block_dims *b);
    size_t (*backward_scratch_per_token)(const ac_arch *arch, const ac_block_dims *b);
    /* Floats per token that a training forward keeps for its backward (its projections,
     * which the backward would otherwise recompute). */
    size_t (*saved_per_token)(const ac_arch *arch, const ac_block_dims *b);
    /* Floats a training forward keeps besides, for each sequence of seq_len tokens on
     * backend be (Mamba2: the scan's kept states, as many as the backend keeps); NULL:
     * none. */
    size_t (*saved_per_sequence)(const ac_block_dims *b, const struct ac_backend *be, int seq_len);
    /* Floats per token of host memory the forward reads back from a device's memory to
     * decide on the host (the MoE's routing: which expert gets which token); NULL: none.
     * On the CPU the forward reads its scratch in place and none is allocated. */
    size_t (*host_per_token)(const ac_block_dims *b);
    /* Floats of one sequence's fixed state (Mamba: conv state then SSM state). */
    size_t (*state_floats)(const ac_block_dims *b);
    /* K and V per cached token: kv_heads rows of head_dim each (0 heads: no KV). */
    int (*kv_heads)(const ac_block_dims *b);
    int (*kv_head_dim)(const ac_block_dims *b);

    /* ---- compute ---- */
    /* out[T, D] = mixer(xn) for the packed batch, advancing the caches (if any). masks
     * may be NULL. Scratch comes from ac_block_scratch, planned by scratch_per_token. */
    void (*forward)(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                    float *out);
    /* With c->saved set (a training forward, seqs->caches NULL), forward also keeps
     * saved_per_token x T (+ saved_per_sequence for each sequence) floats there, and the
     * backward of the same pass reads them instead of recomputing them: the same
     * arithmetic on the same inputs, so the gradients are the same bits either way. One
     * backward per forward: a backward may overwrite what it read (a device's scan
     * turns its kept states into their gradients). */
    /* Training (seqs->caches is NULL). Recomputes what it needs from xn, then, given
     * dout = dL/dout: dxn [T, D] = dL/dxn, overwritten; grad: the layer's weight
     * gradients (+=, NULL: not wanted); mask_grads (+=) for the masks given. */
    void (*backward)(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                     const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads);

    /* ---- the search: importance, reorder, routers, pruning ---- */
    /* The length of the layer's array on `axis`; 0: none. */
    int (*axis_length)(const ac_block_dims *b, ac_layer_axis axis);
    /* The runs of that array the reorder sorts within (a Mamba head stays in its group,
     * an expert in its routing group): their length. */
    int (*axis_run)(const ac_block_dims *b, ac_layer_axis axis);
    /* The layer axis that the cost model's axis `kind` narrows on this kind, and the
     * groups its prefix mask keeps (1: one); -1: that axis does not apply to the kind. */
    int (*cost_axis)(const ac_block_dims *b, ac_axis_kind kind, int *groups);
    /* Minitron importance (module/importance): importance_add adds one chunk's
     * activation scores to the layer's importance_doubles sums in acc, from scratch of
     * importance_per_token floats per row (also a bound on the widest activation it
     * scores); importance_finish turns the sums into scores[axis] (axis_length each).
     * NULL add: the kind scores nothing but the hidden channels and depth. */
    size_t (*importance_per_token)(const ac_arch *arch, const ac_block_dims *b);
    size_t (*importance_doubles)(const ac_block_dims *b);
    void (*importance_add)(const ac_importance_chunk *ch, const ac_arch *arch, const ac_block_dims *b,
                           const ac_layer_weights *w, double *acc);
    void (*importance_finish)(const ac_block_dims *b, const double *acc, float *const *scores);
    /* The function-preserving reorder: the hidden (D-indexed) dimension of the mixer's
     * weights by perm [D], and the weights an axis indexes by perm [axis_length]; tmp
     * holds the layer's weights (ac_block_weight_bytes). NULL permute_axis: no axis. */
    void (*permute_hidden)(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, const int *perm,
                           float *tmp);
    void (*permute_axis)(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w, ac_layer_axis axis,
                         const int *perm, float *tmp);
    /* Pruning: AC_OK when child layer i of dims c can be cut from parent layer p of dims
     * pb (of this kind, or another kind slice reads), else an error naming both layers
     * and the field. */
    ac_status (*check_cut)(int i, int p, const ac_block_dims *c, const ac_block_dims *pb);

    /* ---- cost tables ---- */
    /* The kind's fields of the table key (kind and hidden are set by ac_block_row_key). */
    void (*row_key)(const ac_block_dims *b, ac_cost_row *key);
} ac_block_ops;

extern const ac_block_ops ac_mamba2_ops, ac_attention_ops, ac_mlp_ops, ac_moe_ops;

/* The entry of `kind`; NULL for a kind the table does not know. */
const ac_block_ops *ac_block_ops_of(ac_block_kind kind);
/* The entry of a validated block (never NULL). */
static inline const ac_block_ops *ac_block(const ac_block_dims *b) { return ac_block_ops_of(b->kind); }

/* The table key of block b at `hidden`. */
ac_cost_row ac_block_row_key(const ac_block_dims *b, int hidden);

/* ---- helpers of the kinds' entries (blocks.c) ---- */

/* An arch error naming layer i and its kind. */
ac_status ac_layer_fail(int i, const ac_block_dims *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* For kinds without KV or fixed state. */
int ac_block_no_kv(const ac_block_dims *b);
size_t ac_block_no_state(const ac_block_dims *b);
/* For kinds the search does not narrow: no array on any axis, no cost axis (-1). */
int ac_block_no_axis(const ac_block_dims *b, ac_layer_axis axis);
int ac_block_no_cost_axis(const ac_block_dims *b, ac_axis_kind kind, int *groups);
/* dst rows [d0, d0 + n) of width dcols <- src rows [s0, s0 + n) of width scols, the
 * first min(dcols, scols) columns of each. */
void ac_copy_rows(float *dst, int dcols, int d0, const float *src, int scols, int s0, int n);
/* The first min(dn, sn) floats; nothing when either is NULL. */
void ac_copy_prefix(float *dst, int dn, const float *src, int sn);
/* An FFN pair up [F, D] and down [D, F]: leading channels and hidden columns. */
void ac_slice_ffn(float *cup, float *cdown, int Fc, int Dc, const float *pup, const float *pdown, int Fp, int Dp);

/* ---- helpers of the search facet (blocks.c) ---- */

/* "mamba_heads", "experts", "ffn", "shared_ffn": the importance file's tensor names. */
const char *ac_layer_axis_name(ac_layer_axis axis);
/* For every sequence of a chunk: acc[c] += (mean over its rows of |a[r, c]|)^2, for
 * C columns of a [T, lda]. */
void ac_importance_add_means(const ac_importance_chunk *ch, const float *a, int lda, int C, double *acc);
/* The same for `rows` rows of one sequence. */
void ac_importance_add_mean(const float *a, int lda, int rows, int C, double *acc, double *colsum);
/* n blocks of `block` floats: block j becomes old block perm[j]. tmp holds n * block. */
void ac_permute_blocks(float *data, int n, size_t block, const int *perm, float *tmp);
/* In each of `rows` rows of `ld` floats, the n blocks of `block` floats from column c0. */
void ac_permute_in_rows(float *data, size_t rows, size_t ld, size_t c0, int n, size_t block, const int *perm,
                        float *tmp);
/* The columns of a [rows, cols] matrix. */
void ac_permute_cols(float *m, size_t rows, int cols, const int *perm, float *tmp);
/* An FFN pair up [F, D] and down [D, F] by channel. */
void ac_permute_ffn(float *up, float *down, int F, int D, const int *perm, float *tmp);
/* A pruning check's pair of one field: the child's value and the parent's. */
typedef struct {
    const char *field;
    int child, parent;
} ac_dim_pair;
/* The first of n pairs that differ (fixed) or where the child exceeds the parent; then
 * the error naming it. */
ac_status ac_check_dims(int i, int p, const ac_dim_pair *pairs, int n, int fixed);
/* An error unless c and pb are of the same kind. */
ac_status ac_check_same_kind(int i, int p, const ac_block_dims *c, const ac_block_dims *pb);

/* ---- what forward and backward use (products.c) ---- */

/* Bump allocation from the block's planned scratch. */
float *ac_block_scratch(ac_block_ctx *c, size_t count);
/* host[0 .. n) copied where the ops run, into n floats of scratch; the pointer to give
 * the ops (a block's few host-computed values: its plan counts them). */
float *ac_block_upload(ac_block_ctx *c, const float *host, size_t n);
/* dst = src and p = 0, n floats, in the memory where the ops run (a block's buffers may be
 * a device's, which the host may not touch). */
static inline void ac_block_copy(const ac_kctx *k, float *dst, const float *src, size_t n)
{
    ac_backend_of(k)->copy(dst, src, n * sizeof *dst, AC_COPY_DEVICE_TO_DEVICE);
}
static inline void ac_block_zero(const ac_kctx *k, float *p, size_t n)
{
    ac_backend_of(k)->memset_zero(p, n * sizeof *p);
}

/* The forward's products with the model's weights: ac_k_linear, ac_k_gemv_batch and
 * ac_k_linear_batch as they are, or with bf16 weights when c->bf16. The router, kept in
 * f32, and the backward use the f32 ops directly. */
void ac_block_linear(const ac_block_ctx *c, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                     float *C, int ldc);
/* The weight `offset` values into W in the model's storage (a serving copy's product
 * weights are bf16: a row or an expert of them is not offset in floats). */
const float *ac_block_weights_at(const ac_block_ctx *c, const float *W, size_t offset);
void ac_block_gemv_batch(const ac_block_ctx *c, int n, const float *const *W, const int *rows, const int *cols,
                         const float *const *x, float *const *y);
void ac_block_linear_batch(const ac_block_ctx *c, int n, const int *M, int N, int K, const float *const *A, int lda,
                           const float *const *W, float *const *C, int ldc);

#endif
