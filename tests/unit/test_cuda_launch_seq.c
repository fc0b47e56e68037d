/* The launch shapes of the CUDA scan and attention kernels (kernels/cuda/ssd_launch.h,
 * attention_launch.h), checked on the CPU: each test replays a kernel's loops over its
 * grid, blocks, warps and lanes exactly as the kernel runs them, and counts how often
 * every item is reached, which must be once; plus the GQA and group mappings and the
 * shared memory the attention kernels ask for. No device is needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/ssd_launch.h"

static int *counts(size_t n)
{
    int *c = calloc(n ? n : 1, sizeof *c);
    assert_non_null(c);
    return c;
}

static void assert_all_once(const int *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(c[i], 1);
}

/* ---- the scan ---- */

/* scan_kernel: block b's warp w takes items b * AC_SSD_WARPS + w, striding by the grid's
 * warps; each (head, channel) once, also where the grid is capped. */
static void test_scan_warps_cover_each_channel_once(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {3, 5}, {7, 3}, {6, 8}, {64, 64}, {5, 33}, {1000, 301}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int H = shapes[s][0], P = shapes[s][1];
        unsigned grid = ac_ssd_scan_blocks(H, P);
        assert_true(grid >= 1 && grid <= AC_SSD_GRID_CAP);
        int *c = counts((size_t)H * P);
        int stride = (int)grid * AC_SSD_WARPS;
        for (unsigned b = 0; b < grid; b++)
            for (int warp = 0; warp < AC_SSD_WARPS; warp++)
                for (int w = (int)b * AC_SSD_WARPS + warp; w < H * P; w += stride) {
                    int h, p;
                    ac_ssd_scan_item(w, P, &h, &p);
                    assert_true(h >= 0 && h < H && p >= 0 && p < P);
                    c[(size_t)h * P + p]++;
                }
        assert_all_once(c, (size_t)H * P);
        free(c);
    }
}

/* Lane l's registers k of pass c hold column c * AC_SSD_CHUNK + l + 32 k: every column
 * once, with as many passes as N needs (none refused), and one pass for N = 0. */
static void test_scan_lanes_cover_each_column_once(void **state)
{
    (void)state;
    assert_int_equal(AC_SSD_CHUNK, 32 * AC_SSD_LANE_STATES);
    assert_int_equal(ac_ssd_passes(0), 1);
    const int sizes[] = {1, 4, 17, 31, 32, 33, 64, 127, 128, 129, 256, 300, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int N = sizes[s];
        int *c = counts((size_t)N);
        for (int pass = 0; pass < ac_ssd_passes(N); pass++)
            for (int lane = 0; lane < 32; lane++)
                for (int k = 0; k < AC_SSD_LANE_STATES; k++) {
                    int n = pass * AC_SSD_CHUNK + lane + 32 * k;
                    if (n < N)
                        c[n]++;
                }
        assert_all_once(c, (size_t)N);
        /* no pass is all padding */
        assert_true((ac_ssd_passes(N) - 1) * AC_SSD_CHUNK < N);
        free(c);
    }
}

/* Head h reads group h / (H / G): consecutive heads share a group, each group H / G heads. */
static void test_scan_groups(void **state)
{
    (void)state;
    const int expect_6_3[] = {0, 0, 1, 1, 2, 2};
    for (int h = 0; h < 6; h++)
        assert_int_equal(ac_ssd_group(h, 6, 3), expect_6_3[h]);
    for (int h = 0; h < 4; h++) {
        assert_int_equal(ac_ssd_group(h, 4, 1), 0);
        assert_int_equal(ac_ssd_group(h, 4, 4), h);
    }
    int per[8] = {0};
    for (int h = 0; h < 64; h++)
        per[ac_ssd_group(h, 64, 8)]++;
    for (int g = 0; g < 8; g++)
        assert_int_equal(per[g], 8);
}

/* backward_kernel: a block per head (striding over the grid), its warps over channels p =
 * warp, warp + warps, ...: each (head, channel) once, no idle warp, at most the static
 * shared array's warps. */
static void test_backward_covers_each_channel_once(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {3, 2}, {4, 3}, {2, 7}, {5, 8}, {6, 9}, {64, 64}, {70001, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int H = shapes[s][0], P = shapes[s][1], warps = ac_ssd_backward_warps(P);
        unsigned grid = ac_ssd_backward_blocks(H);
        assert_true(warps >= 1 && warps <= AC_SSD_BWD_MAX_WARPS && warps <= P);
        assert_true(grid >= 1 && grid <= AC_SSD_GRID_CAP);
        int *c = counts((size_t)H * P);
        for (unsigned b = 0; b < grid; b++)
            for (int h = (int)b; h < H; h += (int)grid)
                for (int warp = 0; warp < warps; warp++)
                    for (int p = warp; p < P; p += warps)
                        c[(size_t)h * P + p]++;
        assert_all_once(c, (size_t)H * P);
        free(c);
    }
}

/* group_sum_kernel: a thread per (step, group, column) of dB / dC, striding over the grid. */
static void test_sums_cover_each_output_once(void **state)
{
    (void)state;
    const int shapes[][3] = {{7, 2, 5}, {1, 3, 4}, {41, 1, 17}, {40, 1, 4}, {3, 8, 128}, {2000, 8, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][0], G = shapes[s][1], N = shapes[s][2];
        size_t items = (size_t)T * G * N;
        unsigned grid = ac_ssd_sum_blocks(T, G, N);
        assert_true(grid >= 1 && grid <= AC_SSD_GRID_CAP);
        int *c = counts(items);
        size_t stride = (size_t)grid * AC_SSD_SUM_THREADS;
        for (size_t first = 0; first < stride; first++)
            for (size_t i = first; i < items; i += stride) {
                int t, g, n;
                ac_ssd_sum_item(i, G, N, &t, &g, &n);
                assert_true(t >= 0 && t < T && g >= 0 && g < G && n >= 0 && n < N);
                c[((size_t)t * G + g) * N + n]++;
            }
        assert_all_once(c, items);
        free(c);
    }
    assert_int_equal(ac_ssd_grid(0, 4), 1);
    assert_int_equal(ac_ssd_grid(5, 4), 2);
    assert_int_equal(ac_ssd_grid((size_t)1 << 40, 4), AC_SSD_GRID_CAP);
}

/* ---- attention ---- */

/* The forward and the backward's query pass: a block per (query, head), striding. */
static void test_attention_blocks_cover_each_query_head_once(void **state)
{
    (void)state;
    const int shapes[][2] = {{5, 6}, {1, 4}, {4, 2}, {1, 1}, {7, 3}, {4096, 32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], n_heads = shapes[s][1];
        size_t items = (size_t)n * n_heads;
        unsigned grid = ac_attn_grid(items);
        assert_true(grid >= 1 && grid <= AC_ATTN_GRID_CAP);
        int *c = counts(items);
        for (unsigned blk = 0; blk < grid; blk++)
            for (int b = (int)blk; b < n * n_heads; b += (int)grid) {
                int i, h;
                ac_attn_query_item(b, n_heads, &i, &h);
                assert_true(i >= 0 && i < n && h >= 0 && h < n_heads);
                c[(size_t)i * n_heads + h]++;
            }
        assert_all_once(c, items);
        free(c);
    }
    assert_int_equal(ac_attn_grid(0), 1);
}

/* Query head h reads KV head h / (n_heads / n_kv): contiguous groups of equal size. */
static void test_attention_gqa_mapping(void **state)
{
    (void)state;
    const int expect_6_2[] = {0, 0, 0, 1, 1, 1};
    for (int h = 0; h < 6; h++)
        assert_int_equal(ac_attn_kv_head(h, 6, 2), expect_6_2[h]);
    for (int h = 0; h < 4; h++) {
        assert_int_equal(ac_attn_kv_head(h, 4, 1), 0);
        assert_int_equal(ac_attn_kv_head(h, 4, 4), h);
    }
    assert_int_equal(ac_attn_kv_head(15, 32, 2), 0);
    assert_int_equal(ac_attn_kv_head(16, 32, 2), 1);
    assert_int_equal(ac_attn_kv_head(31, 32, 2), 1);
}

/* The backward's key pass: over the (key j, KV head g) blocks, the pairs of each reach
 * exactly the (query i >= j, head h of group g) that see key j: every (j, i, h) with
 * i >= j once, none with i < j. */
static void test_key_pass_covers_each_pair_once(void **state)
{
    (void)state;
    const int shapes[][3] = {{6, 4, 2}, {5, 6, 1}, {1, 2, 2}, {9, 32, 2}, {3, 3, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int L = shapes[s][0], n_heads = shapes[s][1], n_kv = shapes[s][2], group = n_heads / n_kv;
        unsigned grid = ac_attn_grid((size_t)L * n_kv);
        int *c = counts((size_t)L * L * n_heads); /* [j][i][h] */
        for (unsigned blk = 0; blk < grid; blk++)
            for (int b = (int)blk; b < L * n_kv; b += (int)grid) {
                int j, g;
                ac_attn_key_item(b, n_kv, &j, &g);
                assert_true(j >= 0 && j < L && g >= 0 && g < n_kv);
                for (int warp = 0; warp < AC_ATTN_WARPS; warp++)
                    for (int it = warp; it < (L - j) * group; it += AC_ATTN_WARPS) {
                        int i, h;
                        ac_attn_key_pair(it, j, g, group, &i, &h);
                        assert_true(i >= j && i < L && h >= 0 && h < n_heads);
                        assert_int_equal(ac_attn_kv_head(h, n_heads, n_kv), g);
                        c[((size_t)j * L + i) * n_heads + h]++;
                    }
            }
        for (int j = 0; j < L; j++)
            for (int i = 0; i < L; i++)
                for (int h = 0; h < n_heads; h++)
                    assert_int_equal(c[((size_t)j * L + i) * n_heads + h], i >= j ? 1 : 0);
        free(c);
    }
}

/* The passes over chunks of the head dimension cover every column once, whatever hd,
 * and the shared memory stays within the default 48 KiB: no hd is refused. */
static void test_attention_chunks_and_shared_memory(void **state)
{
    (void)state;
    const int dims[] = {1, 2, 3, 4, 5, 32, 64, 100, 128, 255, 256, 257, 512, 1000, 4096, 100000};
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++) {
        int hd = dims[s], chunk = ac_attn_chunk(hd);
        assert_true(chunk >= 1 && chunk <= AC_ATTN_CHUNK && chunk <= hd);
        assert_true(ac_attn_query_smem(hd) <= AC_ATTN_SMEM_MAX);
        assert_true(ac_attn_key_smem(hd) <= AC_ATTN_SMEM_MAX);
        /* room for the warps' rows and, in the query pass, their two row stats */
        assert_true(ac_attn_query_smem(hd) >= (size_t)AC_ATTN_WARPS * (chunk + 2) * sizeof(float));
        assert_true(ac_attn_key_smem(hd) >= (size_t)AC_ATTN_WARPS * 2 * chunk * sizeof(float));
        int *c = counts((size_t)hd);
        for (int c0 = 0; c0 < hd; c0 += chunk) {
            int width = hd - c0 < chunk ? hd - c0 : chunk;
            for (int col = 0; col < width; col++)
                c[c0 + col]++;
        }
        assert_all_once(c, (size_t)hd);
        free(c);
    }
    /* the usual heads take one pass */
    assert_int_equal(ac_attn_chunk(128), 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_warps_cover_each_channel_once),
        cmocka_unit_test(test_scan_lanes_cover_each_column_once),
        cmocka_unit_test(test_scan_groups),
        cmocka_unit_test(test_backward_covers_each_channel_once),
        cmocka_unit_test(test_sums_cover_each_output_once),
        cmocka_unit_test(test_attention_blocks_cover_each_query_head_once),
        cmocka_unit_test(test_attention_gqa_mapping),
        cmocka_unit_test(test_key_pass_covers_each_pair_once),
        cmocka_unit_test(test_attention_chunks_and_shared_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
