/* The CPU implementations of the ops of kernels/ops.def, one ac_cpu_X per op X, with its
 * signature and meaning. Only kernels/cpu and tests comparing against the reference
 * include this header; everything else calls the ac_k_* dispatchers, which reach these
 * through ac_cpu_backend. */
#ifndef AC_KERNELS_CPU_OPS_H
#define AC_KERNELS_CPU_OPS_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU's ssd_scan_save keeps a state every this many steps (kernels/cpu/ssd.c), and its
 * backward runs chunks of as many steps. At most AC_SSD_MAX_STATE_INTERVAL. */
#define AC_CPU_SSD_STATE_INTERVAL 32

/* The workspace (in bytes) of ac_cpu_attention for `queries` new tokens of one sequence
 * reaching `keys` positions when `threads` threads run it: each OpenMP thread gets up to 8
 * rows of scores when decoding, a tile of query rows by a block of keys when prefilling.
 * The CPU backend's attention_workspace. */
size_t ac_cpu_attention_workspace(int threads, int queries, int keys);

#define AC_OP(name, params, args) void ac_cpu_##name params;
#define AC_OP_VALUE(type, name, params, args) type ac_cpu_##name params;
#include "kernels/ops.def"

#ifdef __cplusplus
}
#endif

#endif
