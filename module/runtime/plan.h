/* The runtime's memory plan: the one source of derived sizes, read by the runtime when
 * it allocates and by the memory model (cost/memory.c) when it predicts, so the two
 * cannot drift apart (test_runtime_plan checks them against each other). */
#ifndef AC_RUNTIME_PLAN_H
#define AC_RUNTIME_PLAN_H

#include <stddef.h>

#include "autocompress/arch.h"

/* Per-token scratch floats of the widest block: its forward, or its backward. */
size_t ac_plan_scratch_per_token(const ac_arch *arch);
size_t ac_plan_backward_scratch_per_token(const ac_arch *arch);
/* Host floats per token of the block that reads back the most (block table's host_per_token). */
size_t ac_plan_host_per_token(const ac_arch *arch);
/* Floats of one sequence's fixed state (every layer's); one block's K plus V floats per
 * token, and its fixed state's floats. */
size_t ac_plan_state_floats(const ac_arch *arch);
size_t ac_plan_block_kv_floats_per_token(const ac_block_dims *b);
size_t ac_plan_block_state_floats(const ac_block_dims *b);

/* What a runtime holds for a forward of `tokens` packed tokens with an attention
 * workspace of `workspace` bytes. */
typedef struct {
    size_t stream;    /* each of the residual stream, normed input and block output: tokens x hidden */
    size_t scratch;   /* tokens x scratch_per_token, plus one float */
    size_t workspace; /* the attention workspace */
    size_t staging;   /* tokens x (token ids, row indices, their host copy); on a device, the
                         blocks' host_per_token floats are host memory beside these */
} ac_activation_plan;

ac_activation_plan ac_plan_activations(const ac_arch *arch, size_t scratch_per_token, int tokens, size_t workspace);
/* The attention workspace of serving one kind of request with `threads` threads: the
 * larger of the prompt's forward (`queries` new tokens reaching `keys` positions) and a
 * decode step reaching `longest` positions. */
size_t ac_plan_serving_workspace(int threads, int queries, int keys, int longest);
size_t ac_activation_plan_bytes(const ac_activation_plan *plan);

#endif
