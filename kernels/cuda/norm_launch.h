/* Launch shapes of the norm, loss and elementwise kernels (kernels/cuda/elementwise.cu,
 * norm.cu, norm_gated.cu, softplus.cu, conv1d.cu, adamw.cu, loss.cu), in plain C so that
 * a CPU test (tests/unit/test_cuda_launch_norm.c) checks them without a device.
 *
 * Every kernel there runs AC_NORM_THREADS threads per block. The shapes:
 *   - elementwise: the grid strides over the elements (ac_cuda_blocks);
 *   - a block per row (the losses): the grid strides over the rows;
 *   - a warp per segment (a row, or a group of a row, for the norms): block b's warp w
 *     takes segments b * AC_NORM_WARPS + w, then strides by the grid's warps;
 *   - row tiles of AC_NORM_TILE rows (rmsnorm's backward): block b takes tiles b,
 *     b + gridDim.x, ...;
 *   - column tiles (sums over rows into a per-column output: dw, dbias, column_dot):
 *     gridDim.x blocks of AC_NORM_THREADS columns by gridDim.y blocks of row tiles; block
 *     y takes tiles y, y + gridDim.y, ... and each thread adds its column's sum over
 *     those rows to the output once. */
#ifndef AC_KERNELS_CUDA_NORM_LAUNCH_H
#define AC_KERNELS_CUDA_NORM_LAUNCH_H

#include <stddef.h>

/* Device code calls the tile bounds too; the test calls them on the host. */
#ifdef __CUDACC__
#define AC_NORM_HD __host__ __device__
#else
#define AC_NORM_HD
#endif

enum {
    AC_NORM_THREADS = 256,
    AC_NORM_WARPS = AC_NORM_THREADS / 32,
    AC_NORM_TILE = 32,           /* rows per row tile */
    AC_NORM_GRID_Y_CAP = 65535,  /* the most blocks along gridDim.y */
    AC_NORM_SUMSQ_BLOCKS = 1024, /* sum_squares: the most per-block partial sums */
    AC_NORM_SCALAR_BLOCKS = 256  /* the most blocks adding to one float (each add rounds) */
};

/* Blocks of `per_block` items covering n, between 1 and cap. */
static inline unsigned ac_norm_blocks(size_t n, unsigned per_block, unsigned cap)
{
    size_t b = (n + per_block - 1) / per_block;
    return b == 0 ? 1u : b > cap ? cap : (unsigned)b;
}

/* Row tiles of `rows` rows: tile i holds rows [i * AC_NORM_TILE, ac_norm_tile_end(i, rows)). */
AC_NORM_HD static inline int ac_norm_tiles(int rows)
{
    return (int)(((long long)rows + AC_NORM_TILE - 1) / AC_NORM_TILE);
}

AC_NORM_HD static inline int ac_norm_tile_end(int tile, int rows)
{
    long long end = ((long long)tile + 1) * AC_NORM_TILE;
    return end < rows ? (int)end : rows;
}

/* The column-tile grid: x covers the columns, y the row tiles (capped); a row-tile grid
 * is the y of one. */
static inline unsigned ac_norm_col_blocks(int cols)
{
    return ac_norm_blocks((size_t)cols, AC_NORM_THREADS, 0x7fffffffu); /* gridDim.x's limit */
}

static inline unsigned ac_norm_tile_blocks(int rows)
{
    return ac_norm_blocks((size_t)ac_norm_tiles(rows), 1, AC_NORM_GRID_Y_CAP);
}

/* Blocks for a warp per segment over `segments` segments, at most cap. */
static inline unsigned ac_norm_warp_blocks(size_t segments, unsigned cap)
{
    return ac_norm_blocks(segments, AC_NORM_WARPS, cap);
}

#endif
