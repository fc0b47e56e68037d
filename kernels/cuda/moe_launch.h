/* Launch shapes of the MoE router kernel (kernels/cuda/moe.cu), in plain C so that a CPU
 * test (tests/unit/test_cuda_launch_moe.c) checks them without a device.
 *
 * The router runs one thread per token, and each thread keeps its token's expert arrays
 * in the block's shared memory: the selection scores of the E experts, the n_group group
 * scores (grouped routing only), then one taken flag per expert. The arrays of a block's
 * tokens are interleaved (element e of slot s at e * tokens + s), so the threads of a warp
 * reading the same element read consecutive words. */
#ifndef AC_KERNELS_CUDA_MOE_LAUNCH_H
#define AC_KERNELS_CUDA_MOE_LAUNCH_H

#include <stddef.h>

/* The shared memory a block may use without opting in, and the most tokens per block. */
enum { AC_MOE_ROUTE_SMEM_MAX = 48 * 1024, AC_MOE_ROUTE_MAX_TOKENS = 64 };

/* Floats of one token's slot: E selection scores, then n_group group scores when grouped. */
static inline size_t ac_moe_route_floats(int E, int n_group)
{
    return (size_t)E + (n_group > 1 ? (size_t)n_group : 0);
}

/* Bytes of one token's slot: its floats and one flag byte per expert (the flags also
 * serve the group selection, n_group <= E). */
static inline size_t ac_moe_route_slot_bytes(int E, int n_group)
{
    return ac_moe_route_floats(E, n_group) * sizeof(float) + (size_t)E;
}

/* Tokens (threads) of one block: as many slots as fit the shared memory, at most
 * AC_MOE_ROUTE_MAX_TOKENS and T, at least 1. Every E up to AC_MAX_EXPERTS (1024) fits at
 * least one slot: 9 KiB at worst. */
static inline int ac_moe_route_tokens_per_block(int T, int E, int n_group)
{
    size_t fit = AC_MOE_ROUTE_SMEM_MAX / ac_moe_route_slot_bytes(E, n_group);
    int n = fit < AC_MOE_ROUTE_MAX_TOKENS ? (int)fit : AC_MOE_ROUTE_MAX_TOKENS;
    n = n < T ? n : T;
    return n < 1 ? 1 : n;
}

/* Dynamic shared memory of a block of `tokens` slots. */
static inline size_t ac_moe_route_smem(int tokens, int E, int n_group)
{
    return (size_t)tokens * ac_moe_route_slot_bytes(E, n_group);
}

#endif
