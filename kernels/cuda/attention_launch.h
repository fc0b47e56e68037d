/* Launch shapes of the CUDA attention kernels (kernels/cuda/attention.cu), in plain C so
 * that a CPU test (tests/unit/test_cuda_launch_seq.c) checks them without a device.
 *
 * Every kernel runs AC_ATTN_WARPS warps a block and one row (a block) per item, the grid
 * striding over the items:
 *   - the forward and the backward's query pass: an item per (query i, head h), i fastest
 *     over heads (h = b % n_heads); the warps split the keys the query sees;
 *   - the backward's key pass: an item per (key j, KV head g); the warps split the
 *     (query i >= j, query head h of group g) pairs that see the key.
 * Each warp sums vectors of the head dimension in its own row of shared memory, at most
 * AC_ATTN_CHUNK columns of it: a wider head takes one pass per chunk of columns (the
 * scores are recomputed), so no hd is refused and the shared memory stays bounded. */
#ifndef AC_KERNELS_CUDA_ATTENTION_LAUNCH_H
#define AC_KERNELS_CUDA_ATTENTION_LAUNCH_H

#include <stddef.h>

/* Device code calls these too; the test calls them on the host. */
#ifdef __CUDACC__
#define AC_ATTN_HD __host__ __device__
#else
#define AC_ATTN_HD
#endif

enum {
    AC_ATTN_WARPS = 8,            /* warps per block */
    AC_ATTN_CHUNK = 256,          /* the most head-dimension columns a pass sums */
    AC_ATTN_SMEM_MAX = 48 * 1024, /* shared memory a block may use without opting in */
    AC_ATTN_GRID_CAP = 65535      /* the most blocks of a launch (the rest loop) */
};

/* Blocks for `items` rows: at least 1, at most AC_ATTN_GRID_CAP. */
static inline unsigned ac_attn_grid(size_t items)
{
    return items == 0 ? 1u : items > AC_ATTN_GRID_CAP ? (unsigned)AC_ATTN_GRID_CAP : (unsigned)items;
}

/* The KV head that query head h reads (GQA: n_heads / n_kv query heads a KV head). */
static inline AC_ATTN_HD int ac_attn_kv_head(int h, int n_heads, int n_kv)
{
    return h / (n_heads / n_kv);
}

/* Columns of one pass: the whole head up to AC_ATTN_CHUNK. */
static inline AC_ATTN_HD int ac_attn_chunk(int hd)
{
    return hd < AC_ATTN_CHUNK ? hd : AC_ATTN_CHUNK;
}

/* The (query, head) of item b in [0, n * n_heads) of the forward and query pass. */
static inline AC_ATTN_HD void ac_attn_query_item(int b, int n_heads, int *i, int *h)
{
    *i = b / n_heads;
    *h = b % n_heads;
}

/* The (key, KV head) of item b in [0, L * n_kv) of the key pass. */
static inline AC_ATTN_HD void ac_attn_key_item(int b, int n_kv, int *j, int *g)
{
    *j = b / n_kv;
    *g = b % n_kv;
}

/* The (query, query head) of pair `it` in [0, (L - j) * group) of key j's KV head g:
 * queries j, j+1, ..., each with the group's heads in turn. */
static inline AC_ATTN_HD void ac_attn_key_pair(int it, int j, int g, int group, int *i, int *h)
{
    *i = j + it / group;
    *h = g * group + it % group;
}

/* Shared memory of the forward and query pass: a row of a chunk per warp, then each
 * warp's running max and normaliser. */
static inline size_t ac_attn_query_smem(int hd)
{
    return (size_t)AC_ATTN_WARPS * ((size_t)ac_attn_chunk(hd) + 2) * sizeof(float);
}

/* Shared memory of the key pass: two rows of a chunk per warp (dk, dv). */
static inline size_t ac_attn_key_smem(int hd)
{
    return (size_t)AC_ATTN_WARPS * 2 * (size_t)ac_attn_chunk(hd) * sizeof(float);
}

#endif
