/* The launch shapes of the norm, loss and elementwise CUDA kernels
 * (kernels/cuda/norm_launch.h), checked on the CPU: walking each grid the way its kernels
 * do covers every row, column and segment exactly once, for odd sizes and for sizes past
 * the grid's caps, and the blocks stay within the device's limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdlib.h>

#include "kernels/cuda/norm_launch.h"

/* Sizes around the tile, the block and the caps (3,000,001 rows are 93,751 tiles, more
 * than gridDim.y takes). */
static const int sizes[] = {1, 2, 7, 31, 32, 33, 63, 65, 255, 256, 257, 1000, 4097, 70001, 3000001};
enum { N_SIZES = sizeof sizes / sizeof sizes[0] };

/* The block reductions take every thread's warp from threadIdx.x / 32. */
static void test_block_is_whole_warps(void **state)
{
    (void)state;
    assert_int_equal(AC_NORM_THREADS % 32, 0);
    assert_int_equal(AC_NORM_WARPS * 32, AC_NORM_THREADS);
    assert_true(AC_NORM_THREADS <= 1024);
}

/* Block y of the column-tile grid takes tiles y, y + gridDim.y, ... and each tile's rows. */
static void test_row_tiles_cover_rows_once(void **state)
{
    (void)state;
    for (int s = 0; s < N_SIZES; s++) {
        int rows = sizes[s];
        unsigned grid_y = ac_norm_tile_blocks(rows);
        assert_true(grid_y >= 1 && grid_y <= AC_NORM_GRID_Y_CAP);
        unsigned char *seen = calloc((size_t)rows, 1);
        assert_non_null(seen);
        int tiles = ac_norm_tiles(rows);
        for (unsigned y = 0; y < grid_y; y++)
            for (int tile = (int)y; tile < tiles; tile += (int)grid_y) {
                int end = ac_norm_tile_end(tile, rows);
                assert_true(end - tile * AC_NORM_TILE >= 1 && end - tile * AC_NORM_TILE <= AC_NORM_TILE);
                for (int r = tile * AC_NORM_TILE; r < end; r++) {
                    assert_true(r >= 0 && r < rows);
                    seen[r]++;
                }
            }
        for (int r = 0; r < rows; r++)
            assert_int_equal(seen[r], 1);
        free(seen);
    }
}

/* Near INT_MAX rows the last tile still ends at the last row. */
static void test_tiles_do_not_overflow(void **state)
{
    (void)state;
    int tiles = ac_norm_tiles(INT_MAX);
    assert_int_equal(tiles, (int)(((long long)INT_MAX + AC_NORM_TILE - 1) / AC_NORM_TILE));
    assert_int_equal(ac_norm_tile_end(tiles - 1, INT_MAX), INT_MAX);
    assert_int_equal(ac_norm_tile_end(tiles - 2, INT_MAX), (tiles - 1) * AC_NORM_TILE);
    assert_int_equal(ac_norm_tile_blocks(INT_MAX), AC_NORM_GRID_Y_CAP);
}

/* Column c = blockIdx.x * AC_NORM_THREADS + threadIdx.x, threads past cols idle. */
static void test_column_blocks_cover_columns(void **state)
{
    (void)state;
    for (int s = 0; s < N_SIZES; s++) {
        long long cols = sizes[s], covered = (long long)ac_norm_col_blocks(sizes[s]) * AC_NORM_THREADS;
        assert_true(covered >= cols);
        assert_true(covered - AC_NORM_THREADS < cols);
    }
}

/* Block b's warp w takes segments b * AC_NORM_WARPS + w, striding by the grid's warps. */
static void test_warp_segments_cover_once(void **state)
{
    (void)state;
    const unsigned caps[] = {1, 3, 65535};
    for (int s = 0; s < N_SIZES; s++)
        for (int k = 0; k < 3; k++) {
            size_t segments = (size_t)sizes[s];
            unsigned blocks = ac_norm_warp_blocks(segments, caps[k]);
            assert_true(blocks >= 1 && blocks <= caps[k]);
            unsigned char *seen = calloc(segments, 1);
            assert_non_null(seen);
            for (unsigned b = 0; b < blocks; b++)
                for (unsigned w = 0; w < AC_NORM_WARPS; w++)
                    for (size_t seg = (size_t)b * AC_NORM_WARPS + w; seg < segments;
                         seg += (size_t)blocks * AC_NORM_WARPS)
                        seen[seg]++;
            for (size_t i = 0; i < segments; i++)
                assert_int_equal(seen[i], 1);
            free(seen);
        }
}

/* sum_squares keeps one partial per block in a buffer of AC_NORM_SUMSQ_BLOCKS + 1 doubles
 * (the total last): the grid never outgrows it, and is no larger than the data needs. */
static void test_sum_squares_partials_fit(void **state)
{
    (void)state;
    const size_t ns[] = {1, 255, 256, 257, 70001, (size_t)1 << 20, (size_t)1 << 34};
    for (int i = 0; i < 7; i++) {
        unsigned blocks = ac_norm_blocks(ns[i], AC_NORM_THREADS, AC_NORM_SUMSQ_BLOCKS);
        assert_true(blocks >= 1 && blocks <= AC_NORM_SUMSQ_BLOCKS);
        assert_true((size_t)(blocks - 1) * AC_NORM_THREADS < ns[i]);
    }
    assert_int_equal(ac_norm_blocks(0, AC_NORM_THREADS, AC_NORM_SUMSQ_BLOCKS), 1);
}

/* The static shared memory of the row-tile backward (two floats per tile row) and of a
 * block reduction (a double per warp), far under the 48 KiB a block may take. */
static void test_shared_memory_fits(void **state)
{
    (void)state;
    size_t tile = 2 * AC_NORM_TILE * sizeof(float), reduce = AC_NORM_WARPS * sizeof(double);
    assert_true(tile + reduce <= 48 * 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_is_whole_warps),
        cmocka_unit_test(test_row_tiles_cover_rows_once),
        cmocka_unit_test(test_tiles_do_not_overflow),
        cmocka_unit_test(test_column_blocks_cover_columns),
        cmocka_unit_test(test_warp_segments_cover_once),
        cmocka_unit_test(test_sum_squares_partials_fit),
        cmocka_unit_test(test_shared_memory_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
