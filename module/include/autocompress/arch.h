/* The architecture of a Nemotron-H model: global dimensions plus one entry per layer.
 * Nothing assumes layers are alike: every layer carries its own dims, so a pruned
 * heterogeneous model and its parent are described the same way. */
#ifndef AUTOCOMPRESS_ARCH_H
#define AUTOCOMPRESS_ARCH_H

#include <stdint.h>
#include <stdio.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-layer limits of the engine (router and decay tables live on the stack). */
enum { AC_MAX_MAMBA_HEADS = 1024, AC_MAX_EXPERTS = 1024 };

typedef enum { AC_BLOCK_MAMBA = 0, AC_BLOCK_ATTENTION, AC_BLOCK_MLP, AC_BLOCK_MOE } ac_block_kind;
enum { AC_BLOCK_KINDS = AC_BLOCK_MOE + 1 };

typedef struct {
    ac_block_kind kind;
    /* Mamba2: heads x head_dim = d_inner; B and C come in `groups` groups of `state` each. */
    int mamba_heads;
    int mamba_head_dim;
    int mamba_groups;
    int ssm_state;
    int conv_kernel;
    /* Attention (GQA, no positional encoding). */
    int attn_heads;
    int attn_kv_heads;
    int attn_head_dim;
    /* Dense MLP width (relu2). */
    int ffn;
    /* MoE: routed experts of width expert_ffn, top_k of them per token, chosen within
     * topk_group of n_group groups; a shared expert of width shared_ffn (0: none). */
    int n_experts;
    int top_k;
    int expert_ffn;
    int shared_ffn;
    int n_group;
    int topk_group;
    int norm_topk_prob;
    float routed_scaling;
} ac_block_dims;

typedef struct {
    int vocab;
    int hidden;
    int n_layers;
    float norm_eps;
    int tie_embeddings;
    int use_conv_bias;
    int chunk_size;       /* the SSD chunk length of the reference; the math does not depend on it */
    float time_step_min;  /* dt is clamped to >= this after softplus, as transformers' torch path does */
    ac_block_dims *layers; /* n_layers entries, owned by the arch */
} ac_arch;

/* Layer letters of the hybrid pattern: M mamba, * attention, - mlp, E moe. */
char ac_block_letter(ac_block_kind kind);
const char *ac_block_name(ac_block_kind kind); /* "mamba", "attention", "mlp", "moe" */

ac_status ac_arch_alloc_layers(ac_arch *arch, int n_layers);
ac_status ac_arch_copy(ac_arch *dst, const ac_arch *src);
void ac_arch_free(ac_arch *arch);
/* Checks every dimension for consistency (positive sizes, heads divisible by groups,
 * top_k <= experts, ...); the message names the layer and field. */
ac_status ac_arch_validate(const ac_arch *arch);
/* 1 when every layer of a kind has the same dims (the plain nemotron_h form suffices). */
int ac_arch_is_homogeneous(const ac_arch *arch);

int ac_mamba_d_inner(const ac_block_dims *b);
int ac_mamba_conv_dim(const ac_block_dims *b);
int ac_mamba_in_proj_dim(const ac_block_dims *b);

typedef struct {
    int64_t total;   /* every parameter */
    int64_t active;  /* those a token touches: top_k of the routed experts */
    int64_t embedding;
} ac_param_counts;

ac_param_counts ac_arch_param_counts(const ac_arch *arch);
int64_t ac_block_param_count(const ac_arch *arch, const ac_block_dims *b);
int64_t ac_block_active_param_count(const ac_arch *arch, const ac_block_dims *b);
/* Prints the pattern, global dims and one line per layer. */
void ac_arch_print(const ac_arch *arch, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
