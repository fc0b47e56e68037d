/* MoE ops on the device: routing and its score masking, a decode step's experts, the row
 * gather and scatter of the dispatch, and their backwards. kernels/cpu/moe.c and
 * kernels/cpu/elementwise.c are the reference.
 *
 * Routing must choose the very experts the CPU chooses, so it repeats the CPU's float
 * operations one for one: the sigmoid through the CPU's own exp (kernels/cpu/cpu_math.h)
 * with every multiply and add rounded on its own (the _rn intrinsics, which nvcc never
 * fuses into a multiply-add; the CPU build fuses none either), and the top-k as the CPU's
 * scan: in index order, strictly greater wins, so ties go to the lower index. Where the
 * CPU sums in a fixed order and a parallel sum would only reorder it, the sums here are
 * in another fixed order, so a run still repeats bit for bit. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_launch.h"

enum { ROW_THREADS = 256, ELEM_THREADS = 256, COMBINE_MASK_THREADS = 1024 };

/* ---- shared helpers ---- */

/* ac_cpu_expf (kernels/cpu/cpu_math.h), operation for operation. */
static __device__ float cpu_expf(float x)
{
    float c = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f; /* a NaN: -87, so n is finite */
    float n = __fsub_rn(__fadd_rn(__fmul_rn(c, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = __fsub_rn(__fsub_rn(c, __fmul_rn(n, 0.693145751953125f)), __fmul_rn(n, 1.42860682030941723e-6f));
    float p = 1.0f / 720.0f;
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 120.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 24.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 6.0f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    float e = __fmul_rn(p, __int_as_float(((int)n + 127) * (1 << 23)));
    return x == x ? e : x;
}

/* ac_cpu_sigmoid: 1 / (1 + e^-x). */
static __device__ float cpu_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, cpu_expf(-x))); }

/* The sum of v over the block (blockDim.x a multiple of 32), returned to every thread, in
 * a fixed order. scratch holds 32 floats. It ends on a barrier, so the caller may then
 * overwrite what it read and call it again. */
static __device__ float block_sum(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0)
        scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x % 32 < blockDim.x / 32 ? scratch[threadIdx.x % 32] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

/* ---- routing ---- */

/* The index of the largest v[i * s], i < n, whose taken[i * s] is clear, as the CPU's
 * top_k_indices scans: the first of equal values wins, and -inf only when nothing else
 * is left. */
static __device__ int best_untaken(const float *v, const unsigned char *taken, int n, int s)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i * s] && (best < 0 || v[i * s] > v[best * s]))
            best = i;
    return best;
}

/* Sets to -inf the selection scores of every group but the topk_group best, a group
 * scoring the sum of its (at most) two best. The flags are clear before and after. */
static __device__ void keep_best_groups(float *choice, float *group_score, unsigned char *taken, int s, int E,
                                        int n_group, int topk_group)
{
    int per = E / n_group, m = per < 2 ? per : 2;
    for (int g = 0; g < n_group; g++) {
        float *c = choice + g * per * s;
        unsigned char *tk = taken + g * per * s;
        int two[2];
        for (int j = 0; j < m; j++) {
            two[j] = best_untaken(c, tk, per, s);
            tk[two[j] * s] = 1;
        }
        float sum = 0.0f;
        for (int j = 0; j < m; j++) {
            sum = __fadd_rn(sum, c[two[j] * s]);
            tk[two[j] * s] = 0;
        }
        group_score[g * s] = sum;
    }
    /* the flags of groups 0..n_group-1 mark the kept groups, then are cleared */
    for (int j = 0; j < topk_group; j++)
        taken[best_untaken(group_score, taken, n_group, s) * s] = 1;
    for (int g = 0; g < n_group; g++) {
        if (!taken[g * s])
            for (int e = g * per; e < (g + 1) * per; e++)
                choice[e * s] = -INFINITY;
        taken[g * s] = 0;
    }
}

/* One thread per token; its slot (moe_launch.h) is column threadIdx.x of the shared
 * arrays, whose row stride is blockDim.x; the flags follow the slots' `floats` floats. */
static __global__ void route_kernel(int T, int E, const float *logits, const float *bias, int n_group,
                                    int topk_group, int top_k, int norm, float scale, size_t floats,
                                    int32_t *idx, float *weight)
{
    extern __shared__ float slots[];
    int s = (int)blockDim.x;
    float *choice = slots + threadIdx.x;
    float *group_score = slots + (size_t)E * s + threadIdx.x;
    unsigned char *taken = (unsigned char *)(slots + floats * s) + threadIdx.x;
    for (int t = blockIdx.x * s + threadIdx.x; t < T; t += gridDim.x * s) {
        const float *lt = logits + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            choice[e * s] = __fadd_rn(cpu_sigmoid(lt[e]), bias[e]);
            taken[e * s] = 0;
        }
        if (n_group > 1)
            keep_best_groups(choice, group_score, taken, s, E, n_group, topk_group);
        int32_t *it = idx + (size_t)t * top_k;
        float *wt = weight + (size_t)t * top_k;
        float sum = 0.0f;
        for (int j = 0; j < top_k; j++) {
            int b = best_untaken(choice, taken, E, s);
            taken[b * s] = 1;
            it[j] = b;
            wt[j] = cpu_sigmoid(lt[b]);
            sum = __fadd_rn(sum, wt[j]);
        }
        float factor = norm ? __fdiv_rn(scale, __fadd_rn(sum, 1e-20f)) : scale;
        for (int j = 0; j < top_k; j++)
            wt[j] = __fmul_rn(wt[j], factor);
    }
}

void ac_cuda_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,
                       int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight)
{
    if (T <= 0 || E <= 0 || top_k <= 0)
        return;
    int tokens = ac_moe_route_tokens_per_block(T, E, n_group);
    route_kernel<<<ac_cuda_blocks((size_t)T, (unsigned)tokens, AC_CUDA_GRID_CAP), tokens,
                   ac_moe_route_smem(tokens, E, n_group), ac_cuda_stream(ctx)>>>(
        T, E, logits, bias, n_group, topk_group, top_k, norm, scale, ac_moe_route_floats(E, n_group), idx, weight);
    ac_cuda_check("moe_route");
}

/* dlogits of token t: zero but at its chosen experts (zeroed beforehand by zero_kernel). */
static __global__ void route_backward_kernel(int T, int E, const float *logits, int top_k, int norm, float scale,
                                             const int32_t *idx, const float *dweight, float *dlogits)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
        const float *lt = logits + (size_t)t * E;
        const int32_t *it = idx + (size_t)t * top_k;
        const float *gt = dweight + (size_t)t * top_k;
        float *dt = dlogits + (size_t)t * E;
        float sum = 0.0f, gs = 0.0f;
        for (int j = 0; j < top_k; j++) {
            float sj = cpu_sigmoid(lt[it[j]]);
            sum = __fadd_rn(sum, sj);
            gs = __fadd_rn(gs, __fmul_rn(gt[j], sj));
        }
        float z = __fadd_rn(sum, 1e-20f);
        for (int j = 0; j < top_k; j++) {
            float sj = cpu_sigmoid(lt[it[j]]);
            float ds = norm ? __fmul_rn(__fdiv_rn(scale, z), __fsub_rn(gt[j], __fdiv_rn(gs, z)))
                            : __fmul_rn(scale, gt[j]);
            dt[it[j]] = __fmul_rn(__fmul_rn(ds, sj), __fsub_rn(1.0f, sj));
        }
    }
}

static __global__ void zero_kernel(size_t n, float *x)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = 0.0f;
}

void ac_cuda_moe_route_backward(ac_kctx *ctx, int T, int E, const float *logits, int top_k, int norm,
                                float scale, const int32_t *idx, const float *dweight, float *dlogits)
{
    if (T <= 0 || E <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    size_t n = (size_t)T * E;
    zero_kernel<<<ac_cuda_blocks(n, ELEM_THREADS, AC_CUDA_GRID_CAP), ELEM_THREADS, 0, stream>>>(n, dlogits);
    route_backward_kernel<<<ac_cuda_blocks((size_t)T, ELEM_THREADS, AC_CUDA_GRID_CAP), ELEM_THREADS, 0, stream>>>(
        T, E, logits, top_k, norm, scale, idx, dweight, dlogits);
    ac_cuda_check("moe_route_backward");
}

/* ---- score masking ---- */

/* Item k < T*E masks logits[k]; item k < E also writes masked_bias[k]. CUDA's logf and
 * glibc's may differ in the last bit, so a masked logit may too (the sum itself is
 * rounded on its own, as on the CPU, not fused into logf's last step). */
static __global__ void mask_scores_kernel(int T, int E, const float *mask, const float *bias, float *logits,
                                          float *masked_bias)
{
    size_t n = (size_t)T * E, items = n > (size_t)E ? n : (size_t)E;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += (size_t)gridDim.x * blockDim.x) {
        if (k < (size_t)E)
            masked_bias[k] = mask[k] > 0.0f ? (bias ? bias[k] : 0.0f) : -INFINITY;
        if (k < n) {
            float m = mask[k % E];
            logits[k] = m > 0.0f ? __fadd_rn(logits[k], logf(m)) : -INFINITY;
        }
    }
}

void ac_cuda_moe_mask_scores(ac_kctx *ctx, int T, int E, const float *mask, const float *bias, float *logits,
                             float *masked_bias)
{
    if (E <= 0)
        return;
    size_t n = (size_t)(T > 1 ? T : 1) * E;
    mask_scores_kernel<<<ac_cuda_blocks(n, ELEM_THREADS, AC_CUDA_GRID_CAP), ELEM_THREADS, 0, ac_cuda_stream(ctx)>>>(
        T, E, mask, bias, logits, masked_bias);
    ac_cuda_check("moe_mask_scores");
}

/* A block of 32 x 32 threads per 32 experts: thread (x, y) sums the rows t = y mod 32 of
 * expert x in order, then row y = 0 adds up the 32 partial sums in order. */
static __global__ void mask_scores_backward_kernel(int T, int E, const float *mask, const float *dlogits,
                                                   float *dmask)
{
    __shared__ float part[32][33]; /* padded: column reads hit distinct banks */
    int e = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (e < E)
        for (int t = threadIdx.y; t < T; t += 32)
            sum += dlogits[(size_t)t * E + e];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || e >= E || !(mask[e] > 0.0f))
        return;
    float total = 0.0f;
    for (int y = 0; y < 32; y++)
        total += part[y][threadIdx.x];
    dmask[e] += total / mask[e];
}

void ac_cuda_moe_mask_scores_backward(ac_kctx *ctx, int T, int E, const float *mask, const float *dlogits,
                                      float *dmask)
{
    if (T <= 0 || E <= 0)
        return;
    mask_scores_backward_kernel<<<ac_cuda_blocks((size_t)E, 32, AC_CUDA_GRID_CAP), dim3(32, 32), 0,
                                  ac_cuda_stream(ctx)>>>(T, E, mask, dlogits, dmask);
    ac_cuda_check("moe_mask_scores_backward");
}

/* ---- row gather and scatter: a block per row, threads over its D floats ---- */

static __global__ void gather_rows_kernel(int n, int D, const float *src, int ldsrc, const int32_t *rows,
                                          float *dst)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const float *s = src + (size_t)rows[i] * ldsrc;
        float *d = dst + (size_t)i * D;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            d[c] = s[c];
    }
}

void ac_cuda_gather_rows(ac_kctx *ctx, int n, int D, const float *src, int ldsrc, const int32_t *rows,
                         float *dst)
{
    if (n <= 0 || D <= 0)
        return;
    gather_rows_kernel<<<ac_cuda_blocks((size_t)n, 1, AC_CUDA_GRID_CAP), ROW_THREADS, 0, ac_cuda_stream(ctx)>>>(
        n, D, src, ldsrc, rows, dst);
    ac_cuda_check("gather_rows");
}

static __global__ void gather_rows_bf16_kernel(int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,
                                               float *dst)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const uint16_t *s = src + (size_t)rows[i] * ldsrc;
        float *d = dst + (size_t)i * D;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            d[c] = ac_cuda_bf16_to_float(s[c]);
    }
}

void ac_cuda_gather_rows_bf16(ac_kctx *ctx, int n, int D, const uint16_t *src, int ldsrc, const int32_t *rows,
                              float *dst)
{
    if (n <= 0 || D <= 0)
        return;
    gather_rows_bf16_kernel<<<ac_cuda_blocks((size_t)n, 1, AC_CUDA_GRID_CAP), ROW_THREADS, 0,
                              ac_cuda_stream(ctx)>>>(n, D, src, ldsrc, rows, dst);
    ac_cuda_check("gather_rows_bf16");
}

/* dst[rows[i]] += weight[i] * src[i] (weight NULL: 1); rows are distinct, so no two
 * blocks write one row. The product is rounded before the sum, as on the CPU. */
static __global__ void scatter_add_rows_kernel(int n, int D, const float *src, const int32_t *rows,
                                               const float *weight, float *dst, int lddst)
{
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const float *s = src + (size_t)i * D;
        float *d = dst + (size_t)rows[i] * lddst;
        float w = weight ? weight[i] : 1.0f;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            d[c] = __fadd_rn(d[c], __fmul_rn(w, s[c]));
    }
}

void ac_cuda_scatter_add_rows(ac_kctx *ctx, int n, int D, const float *src, const int32_t *rows,
                              const float *weight, float *dst, int lddst)
{
    if (n <= 0 || D <= 0)
        return;
    scatter_add_rows_kernel<<<ac_cuda_blocks((size_t)n, 1, AC_CUDA_GRID_CAP), ROW_THREADS, 0,
                              ac_cuda_stream(ctx)>>>(n, D, src, rows, weight, dst, lddst);
    ac_cuda_check("scatter_add_rows");
}

void ac_cuda_gather_rows_backward(ac_kctx *ctx, int n, int D, const float *ddst, const int32_t *rows,
                                  float *dsrc, int lddsrc)
{
    if (n <= 0 || D <= 0)
        return;
    scatter_add_rows_kernel<<<ac_cuda_blocks((size_t)n, 1, AC_CUDA_GRID_CAP), ROW_THREADS, 0,
                              ac_cuda_stream(ctx)>>>(n, D, ddst, rows, NULL, dsrc, lddsrc);
    ac_cuda_check("gather_rows_backward");
}

/* One thread per column, adding the rows in order of i: ids repeat (a token seen twice),
 * so rows cannot go to threads of their own; the order is the CPU's. */
static __global__ void embedding_backward_kernel(int n, int D, const float *drows, const int32_t *ids, float *dtable)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < D; c += gridDim.x * blockDim.x)
        for (int i = 0; i < n; i++) {
            float *d = dtable + (size_t)ids[i] * D + c;
            *d = __fadd_rn(*d, drows[(size_t)i * D + c]);
        }
}

void ac_cuda_embedding_backward(ac_kctx *ctx, int n, int D, const float *drows, const int32_t *ids, float *dtable)
{
    if (n <= 0 || D <= 0)
        return;
    embedding_backward_kernel<<<ac_cuda_blocks((size_t)D, ROW_THREADS, AC_CUDA_GRID_CAP), ROW_THREADS, 0,
                                ac_cuda_stream(ctx)>>>(n, D, drows, ids, dtable);
    ac_cuda_check("embedding_backward");
}

/* ---- one token's experts ---- */

/* A block takes TOKEN_ROWS rows of a stacked matrix; its warps take its columns in turn,
 * TOKEN_COLS each: a warp reads its tile of the rows in coalesced loads into shared
 * memory, then each lane adds its row's part of the tile times the vector; at the end the
 * warps' parts are added in warp order. Barriers only, no shuffles: a warp per row would
 * need a shuffle reduction per row, which the emulator's coroutines pay for dearly (the
 * emulated server suite took much longer: see docs/results.md). */
enum { TOKEN_THREADS = 256, TOKEN_WARPS = TOKEN_THREADS / 32, TOKEN_ROWS = 32, TOKEN_COLS = 32 };

/* Thread 0 puts the k picks in increasing expert index into the block's shared memory:
 * ids, and weights, each the routing weight times the expert's mask, as the CPU's
 * ac_cpu_moe_token orders and scales them; every thread waits for it. */
static __device__ void sort_picks(int k, const int32_t *idx, const float *weight, const float *experts_mask, int *ids,
                                  float *weights)
{
    if (threadIdx.x == 0)
        for (int j = 0; j < k; j++) {
            int e = idx[j], q = j;
            float w = experts_mask ? weight[j] * experts_mask[e] : weight[j];
            for (; q > 0 && ids[q - 1] > e; q--) {
                ids[q] = ids[q - 1];
                weights[q] = weights[q - 1];
            }
            ids[q] = e;
            weights[q] = w;
        }
    __syncthreads();
}

/* How a product reads its weights and inputs: floats as they are; bf16 weights widened
 * and inputs rounded to bf16 (kernels.h). */
template <typename W> struct product_read;
template <> struct product_read<float> {
    static __device__ float weight(float w) { return w; }
    static __device__ float input(float v) { return v; }
};
template <> struct product_read<uint16_t> {
    static __device__ float weight(uint16_t w) { return ac_cuda_bf16_to_float(w); }
    static __device__ float input(float v) { return ac_cuda_round_to_bf16(v); }
};

/* Row r of the stacked up projections: the shared expert's S rows, then each pick's I. */
template <typename W> static __device__ const W *up_row(const ac_k_moe_ffn &f, const int *ids, int r)
{
    if (r < f.S)
        return (const W *)f.shared_up + (size_t)r * f.D;
    return (const W *)f.experts_up + ((size_t)ids[(r - f.S) / f.I] * f.I + (r - f.S) % f.I) * f.D;
}

typedef float token_tiles[TOKEN_WARPS][TOKEN_ROWS][TOKEN_COLS + 1];
typedef float token_parts[TOKEN_WARPS][TOKEN_ROWS];

/* Rows r0 + i (i < TOKEN_ROWS, those below `rows`) of a matrix with `cols` columns, row
 * r at row(r), times v: lane i of warp 0 returns row r0 + i's product (0 past `rows`),
 * the other threads 0. Every thread of the block calls it. */
template <typename W, typename RowFn>
static __device__ float tiled_rows_dot(RowFn row, int r0, int rows, int cols, const float *v, token_tiles &tile,
                                       token_parts &part)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float (*mine)[TOKEN_COLS + 1] = tile[warp];
    float s = 0.0f;
    for (int c0 = warp * TOKEN_COLS; c0 - warp * TOKEN_COLS < cols; c0 += TOKEN_WARPS * TOKEN_COLS) {
        for (int q = 0; q < TOKEN_ROWS; q++)
            mine[q][lane] =
                r0 + q < rows && c0 + lane < cols ? product_read<W>::weight(row(r0 + q)[c0 + lane]) : 0.0f;
        __syncthreads();
        int n = cols - c0 < TOKEN_COLS ? cols - c0 : TOKEN_COLS;
        for (int i = 0; i < n; i++)
            s += mine[lane][i] * product_read<W>::input(v[c0 + i]);
        __syncthreads();
    }
    /* part is written again only past the next call's first barrier, which warp 0
     * reaches after reading it */
    part[warp][lane] = s;
    __syncthreads();
    float sum = 0.0f;
    if (warp == 0)
        for (int w = 0; w < TOKEN_WARPS; w++)
            sum += part[w][lane];
    return sum;
}

/* h = relu2(row . x) times the row's channel mask, for every row of the stacked up
 * projections; ids: the picks sorted. */
template <typename W>
static __device__ void moe_token_up(const ac_k_moe_ffn &f, int k, const int *ids, const float *x, float *hidden,
                                    token_tiles &tile, token_parts &part)
{
    int total = f.S + k * f.I;
    auto row = [&](int r) { return up_row<W>(f, ids, r); };
    for (int r0 = blockIdx.x * TOKEN_ROWS; r0 < total; r0 += gridDim.x * TOKEN_ROWS) {
        float s = tiled_rows_dot<W>(row, r0, total, f.D, x, tile, part);
        int r = r0 + threadIdx.x;
        if (threadIdx.x < TOKEN_ROWS && r < total) {
            const float *mask = r < f.S ? f.shared_mask : f.ffn_mask;
            int c = r < f.S ? r : (r - f.S) % f.I;
            float h = s > 0.0f ? s * s : 0.0f;
            hidden[r] = mask ? h * mask[c] : h;
        }
    }
}

/* y[d] = the shared expert's down row d . h_s, plus each pick's weighted, in increasing
 * expert index; ids and weights: the picks sorted. */
template <typename W>
static __device__ void moe_token_down(const ac_k_moe_ffn &f, int k, const int *ids, const float *weights,
                                      const float *hidden, float *y, token_tiles &tile, token_parts &part)
{
    for (int d0 = blockIdx.x * TOKEN_ROWS; d0 < f.D; d0 += gridDim.x * TOKEN_ROWS) {
        float acc = 0.0f;
        if (f.S > 0) {
            auto row = [&](int d) { return (const W *)f.shared_down + (size_t)d * f.S; };
            acc = tiled_rows_dot<W>(row, d0, f.D, f.S, hidden, tile, part);
        }
        for (int j = 0; j < k; j++) {
            const W *down = (const W *)f.experts_down + (size_t)ids[j] * f.D * f.I;
            auto row = [&](int d) { return down + (size_t)d * f.I; };
            acc += weights[j] * tiled_rows_dot<W>(row, d0, f.D, f.I, hidden + f.S + (size_t)j * f.I, tile, part);
        }
        if (threadIdx.x < TOKEN_ROWS && d0 + (int)threadIdx.x < f.D)
            y[d0 + threadIdx.x] = acc;
    }
}

/* The kernels hold the shared memory (one set, whichever weight type the ffn has) and
 * pick the product's reading. Tokens go along the grid's y, in turn when there are more
 * than its rows: every thread of a block takes the same token, so the barriers in
 * sort_picks hold. */
static __global__ void moe_token_up_kernel(ac_k_moe_ffn f, int T, int k, const int32_t *idx, const float *weight,
                                           const float *x, float *hidden)
{
    extern __shared__ int ids[];
    __shared__ float tile[TOKEN_WARPS][TOKEN_ROWS][TOKEN_COLS + 1], part[TOKEN_WARPS][TOKEN_ROWS];
    size_t per_token = (size_t)f.S + (size_t)k * f.I;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const float *xt = x + (size_t)t * f.D;
        float *ht = hidden + (size_t)t * per_token;
        sort_picks(k, idx + (size_t)t * k, weight + (size_t)t * k, f.experts_mask, ids, (float *)(ids + k));
        if (f.bf16)
            moe_token_up<uint16_t>(f, k, ids, xt, ht, tile, part);
        else
            moe_token_up<float>(f, k, ids, xt, ht, tile, part);
        __syncthreads(); /* thread 0 sorts the next token's picks over these */
    }
}

static __global__ void moe_token_down_kernel(ac_k_moe_ffn f, int T, int k, const int32_t *idx, const float *weight,
                                             const float *hidden, float *y)
{
    extern __shared__ int ids[];
    __shared__ float tile[TOKEN_WARPS][TOKEN_ROWS][TOKEN_COLS + 1], part[TOKEN_WARPS][TOKEN_ROWS];
    float *weights = (float *)(ids + k);
    size_t per_token = (size_t)f.S + (size_t)k * f.I;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const float *ht = hidden + (size_t)t * per_token;
        float *yt = y + (size_t)t * f.D;
        sort_picks(k, idx + (size_t)t * k, weight + (size_t)t * k, f.experts_mask, ids, weights);
        if (f.bf16)
            moe_token_down<uint16_t>(f, k, ids, weights, ht, yt, tile, part);
        else
            moe_token_down<float>(f, k, ids, weights, ht, yt, tile, part);
        __syncthreads();
    }
}

void ac_cuda_moe_token(ac_kctx *ctx, const ac_k_moe_ffn *ffn, int T, int k, const int32_t *idx, const float *weight,
                       const float *x, float *hidden, float *y)
{
    if (ffn->D <= 0 || T <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    size_t rows = (size_t)ffn->S + (size_t)k * ffn->I;
    size_t picks = (size_t)k * (sizeof(int) + sizeof(float)); /* sort_picks's ids and weights */
    unsigned tokens = T < (int)AC_CUDA_GRID_CAP ? (unsigned)T : (unsigned)AC_CUDA_GRID_CAP;
    if (rows > 0)
        moe_token_up_kernel<<<dim3(ac_cuda_blocks(rows, TOKEN_ROWS, AC_CUDA_GRID_CAP), tokens), TOKEN_THREADS, picks,
                              stream>>>(*ffn, T, k, idx, weight, x, hidden);
    moe_token_down_kernel<<<dim3(ac_cuda_blocks((size_t)ffn->D, TOKEN_ROWS, AC_CUDA_GRID_CAP), tokens), TOKEN_THREADS,
                            picks, stream>>>(*ffn, T, k, idx, weight, hidden, y);
    ac_cuda_check("moe_token");
}

/* ---- combine backward ---- */

/* A block per row i: d = <dout[rows[i]], y[i]>, stored in dweight[pair[i]] as m d, or as
 * d alone when `raw` (the mask pass scales it), then dy[i] = weight[i] m dout[rows[i]].
 * dy may alias y: block_sum's barriers order every read of y[i] before the writes. */
static __global__ void combine_backward_kernel(int n, int D, const float *dout, int lddout, const int32_t *rows,
                                               const float *y, const float *weight, const float *mask,
                                               const int32_t *pair, int raw, float *dweight, float *dy)
{
    __shared__ float scratch[32];
    float m = mask ? *mask : 1.0f;
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const float *g = dout + (size_t)rows[i] * lddout;
        const float *yi = y + (size_t)i * D;
        float part = 0.0f;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            part += g[c] * yi[c];
        float d = block_sum(part, scratch);
        if (threadIdx.x == 0)
            dweight[pair[i]] = raw ? d : m * d;
        float f = weight[i] * m;
        float *dyi = dy + (size_t)i * D;
        for (int c = threadIdx.x; c < D; c += blockDim.x)
            dyi[c] = f * g[c];
    }
}

/* One block: *dmask += sum_i weight[i] d_i over the raw d_i in dweight, which become m d_i.
 * pair is distinct, so each thread owns its entries. */
static __global__ void combine_mask_kernel(int n, const float *weight, const float *mask, const int32_t *pair,
                                           float *dweight, float *dmask)
{
    __shared__ float scratch[32];
    float m = mask ? *mask : 1.0f;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float d = dweight[pair[i]];
        acc += weight[i] * d;
        dweight[pair[i]] = m * d;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0)
        *dmask += acc;
}

void ac_cuda_moe_combine_backward(ac_kctx *ctx, int n, int D, const float *dout, int lddout, const int32_t *rows,
                                  const float *y, const float *weight, const float *mask, const int32_t *pair,
                                  float *dweight, float *dmask, float *dy)
{
    if (n <= 0)
        return;
    cudaStream_t stream = ac_cuda_stream(ctx);
    int raw = dmask != NULL;
    combine_backward_kernel<<<ac_cuda_blocks((size_t)n, 1, AC_CUDA_GRID_CAP), ROW_THREADS, 0, stream>>>(
        n, D, dout, lddout, rows, y, weight, mask, pair, raw, dweight, dy);
    if (raw)
        combine_mask_kernel<<<1, COMBINE_MASK_THREADS, 0, stream>>>(n, weight, mask, pair, dweight, dmask);
    ac_cuda_check("moe_combine_backward");
}
