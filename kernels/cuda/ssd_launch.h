/* Launch shapes of the CUDA selective scan (kernels/cuda/ssd.cu), in plain C so that a CPU
 * test (tests/unit/test_cuda_launch_seq.c) checks them without a device.
 *
 * Three shapes:
 *   - the scan: a warp per (head h, channel p), AC_SSD_WARPS warps a block; block b's
 *     warp w takes item b * AC_SSD_WARPS + w, then strides by the grid's warps. Its lanes
 *     own state columns n = n0 + lane + 32 k (k < AC_SSD_LANE_STATES, in registers) for
 *     the passes n0 = 0, AC_SSD_CHUNK, ... that cover N (one pass for N <= 128);
 *   - the backward recurrence: a block per head (the grid strides over heads), its
 *     ac_ssd_backward_warps(P) warps taking channels p = warp, warp + warps, ...;
 *   - the sums of dB and dC over heads and channels: a thread per (step, group, column),
 *     AC_SSD_SUM_THREADS a block, the grid striding over the T * G * N items.
 * No shape is refused: every N, P and T is covered by loops. */
#ifndef AC_KERNELS_CUDA_SSD_LAUNCH_H
#define AC_KERNELS_CUDA_SSD_LAUNCH_H

#include <stddef.h>

/* Device code calls these too; the test calls them on the host. */
#ifdef __CUDACC__
#define AC_SSD_HD __host__ __device__
#else
#define AC_SSD_HD
#endif

enum {
    AC_SSD_WARPS = 4,                       /* warps per block of the scan */
    AC_SSD_LANE_STATES = 4,                 /* state columns a lane keeps in registers */
    AC_SSD_CHUNK = 32 * AC_SSD_LANE_STATES, /* state columns a warp scans per pass over time */
    AC_SSD_BWD_MAX_WARPS = 8,               /* warps per block of the backward recurrence */
    AC_SSD_SUM_THREADS = 256,               /* threads per block of the dB / dC sums */
    AC_SSD_GRID_CAP = 65535                 /* the most blocks of any launch (the rest loop) */
};

/* Blocks for `items` at `per_block` items a block: at least 1, at most AC_SSD_GRID_CAP. */
static inline unsigned ac_ssd_grid(size_t items, unsigned per_block)
{
    size_t b = (items + per_block - 1) / per_block;
    return b == 0 ? 1u : b > AC_SSD_GRID_CAP ? (unsigned)AC_SSD_GRID_CAP : (unsigned)b;
}

/* The group of B and C that head h reads. */
static inline AC_SSD_HD int ac_ssd_group(int h, int H, int G)
{
    return h / (H / G);
}

/* The (head, channel) of the scan's warp item w in [0, H * P). */
static inline AC_SSD_HD void ac_ssd_scan_item(int w, int P, int *h, int *p)
{
    *h = w / P;
    *p = w % P;
}

/* Passes of AC_SSD_CHUNK state columns over time: at least one, so that N = 0 still
 * writes y = D x as the CPU does. */
static inline AC_SSD_HD int ac_ssd_passes(int N)
{
    return N <= AC_SSD_CHUNK ? 1 : (N + AC_SSD_CHUNK - 1) / AC_SSD_CHUNK;
}

static inline unsigned ac_ssd_scan_blocks(int H, int P)
{
    return ac_ssd_grid((size_t)H * (size_t)P, AC_SSD_WARPS);
}

/* Warps of a backward block: one per channel up to AC_SSD_BWD_MAX_WARPS, so none idles. */
static inline int ac_ssd_backward_warps(int P)
{
    return P < 1 ? 1 : P < AC_SSD_BWD_MAX_WARPS ? P : AC_SSD_BWD_MAX_WARPS;
}

static inline unsigned ac_ssd_backward_blocks(int H)
{
    return ac_ssd_grid((size_t)H, 1);
}

/* The (step, group, column) of item i in [0, T * G * N) of the dB / dC sums: columns
 * fastest, so a warp reads consecutive floats of a state row. */
static inline AC_SSD_HD void ac_ssd_sum_item(size_t i, int G, int N, int *t, int *g, int *n)
{
    *n = (int)(i % (size_t)N);
    *g = (int)(i / (size_t)N % (size_t)G);
    *t = (int)(i / ((size_t)N * (size_t)G));
}

static inline unsigned ac_ssd_sum_blocks(int T, int G, int N)
{
    return ac_ssd_grid((size_t)T * (size_t)G * (size_t)N, AC_SSD_SUM_THREADS);
}

#endif
