/* Every op of every compiled-in backend against the CPU reference, in the manner of
 * ggml's test-backend-ops.
 *
 * A case names one member of struct ac_backend and a shape (odd row counts, ld wider
 * than the row, GQA ratios > 1, grouped routing with bias, T = 1 decode steps, NULL
 * optional outputs, aliased in-place outputs). Running a case on a target: its buffers
 * are filled from a fixed seed, allocated and copied on the target's backend with its
 * alloc/copy (a workspace too when the op needs one), the op runs through the target's
 * member (or through the ac_k_* dispatcher, with the context naming the backend), the
 * backend syncs and every buffer comes back. The reference runs the same case, from the
 * same initial contents (outputs that accumulate or update in place included), with the
 * CPU functions of kernels/cpu/cpu_ops.h called directly on host memory. Float outputs
 * pass when max |got - ref| / max |ref| <= the case's tolerance (0 for the CPU backend,
 * which must be exact), integer outputs must match exactly, and inputs must come back
 * unchanged. One line per case and target: op, target, case, max error, tolerance,
 * ok/FAIL.
 *
 * Also: every op slot of the struct is called by some case (a counting backend), the
 * registry, each backend's memory functions (and the CPU's huge-page buffers), and that
 * the harness fails a backend with one deliberately wrong op on that op alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/dtype.h"
#include "autocompress/probe.h"
#include "kernels/cpu/cpu_ops.h"
#ifdef AC_TEST_CUDA_EMU
#include "cudaemu.h"
#endif

/* The op members are the function pointers from `linear` to the end of the struct. */
typedef void (*any_fn)(void);
enum { N_OPS = (int)((sizeof(ac_backend) - offsetof(ac_backend, linear)) / sizeof(any_fn)) };
_Static_assert((sizeof(ac_backend) - offsetof(ac_backend, linear)) % sizeof(any_fn) == 0,
               "struct ac_backend: only function pointers after `linear`");
#define SLOT(member) ((int)((offsetof(ac_backend, member) - offsetof(ac_backend, linear)) / sizeof(any_fn)))

/* ---- the reference: the CPU functions themselves, on host memory ---- */

static void *host_alloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

static void host_free(void *p)
{
    free(p);
}

static void host_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    (void)kind;
    memcpy(dst, src, bytes);
}

static void host_zero(void *p, size_t bytes)
{
    memset(p, 0, bytes);
}

static void host_sync(ac_kctx *ctx)
{
    (void)ctx;
}

static size_t host_bytes_in_use(void)
{
    return 0;
}

/* Wired here from kernels/ops.def, not copied from ac_cpu_backend: a member of
 * kernels/cpu/cpu_backend.c that points at the wrong op then disagrees with this table
 * instead of with itself. */
static const ac_backend reference = {
    .name = "reference",
    .ssd_state_interval = AC_CPU_SSD_STATE_INTERVAL,
    .moe_token_batch = 1,
    .alloc = host_alloc,
    .alloc_dense = host_alloc,
    .free = host_free,
    .copy = host_copy,
    .memset_zero = host_zero,
    .sync = host_sync,
    .bytes_in_use = host_bytes_in_use,
    .probe_create = ac_cpu_probe_create,
    .attention_workspace = ac_cpu_attention_workspace,
#define AC_OP(name, params, args) .name = ac_cpu_##name,
#define AC_OP_VALUE(type, name, params, args) .name = ac_cpu_##name,
#include "kernels/ops.def"
};

/* ---- buffers and runs ---- */

typedef enum { BUF_F32, BUF_I32, BUF_F64, BUF_BF16 } buf_type; /* bf16: inputs only */

typedef enum {
    BUF_IN,      /* read only: must come back unchanged */
    BUF_OUT,     /* written, updated in place or accumulated: compared with the reference */
    BUF_SCRATCH, /* caller scratch and workspaces: not compared */
} buf_role;

typedef struct {
    buf_type type;
    buf_role role;
    size_t count;
    void *init;  /* host: the contents before the op */
    void *dev;   /* the run's backend memory */
    void *after; /* host: the contents after the op */
} buffer;

enum { MAX_BUFFERS = 24 };

/* Where a case runs: the backend whose memory holds the buffers and whose members are
 * called (or, with dispatch, the ac_k_* dispatchers with ctx.backend = ctx_backend). */
typedef struct {
    const char *label;
    const ac_backend *be;
    int dispatch;
    const ac_backend *ctx_backend;
    int exact; /* every output must equal the reference's bits: the CPU's own ops */
} target;

/* One case on one target. */
typedef struct {
    const ac_backend *be;
    int dispatch;
    ac_kctx ctx;
    uint64_t seed, rng;
    buffer buf[MAX_BUFFERS];
    int n_buf;
    int has_ret;
    double ret;
} run;

#define CALL(r, op, ...) \
    ((r)->dispatch ? ac_k_##op(&(r)->ctx, __VA_ARGS__) : (r)->be->op(&(r)->ctx, __VA_ARGS__))

static size_t type_size(buf_type t)
{
    return t == BUF_F32 ? sizeof(float) : t == BUF_I32 ? sizeof(int32_t) : t == BUF_BF16 ? sizeof(uint16_t)
                                                                         : sizeof(double);
}

/* splitmix64 */
static uint64_t next_u64(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *rng, float lo, float hi)
{
    return lo + (hi - lo) * (float)(next_u64(rng) >> 40) / 16777216.0f;
}

static int below(run *r, int n)
{
    return (int)(next_u64(&r->rng) % (uint64_t)n);
}

/* A buffer of `count` elements starting as `init`, on the run's backend. */
static void *add_buffer(run *r, buf_type type, buf_role role, size_t count, const void *init)
{
    assert_true(r->n_buf < MAX_BUFFERS);
    assert_true(count > 0);
    size_t bytes = count * type_size(type);
    buffer *b = &r->buf[r->n_buf++];
    b->type = type;
    b->role = role;
    b->count = count;
    b->init = malloc(bytes);
    assert_non_null(b->init);
    memcpy(b->init, init, bytes);
    b->dev = r->be->alloc(bytes);
    assert_non_null(b->dev);
    r->be->copy(b->dev, b->init, bytes, AC_COPY_HOST_TO_DEVICE);
    b->after = NULL;
    return b->dev;
}

/* Each buffer's contents come from a stream of their own (the case's seed and the
 * buffer's place), so a scratch buffer whose size is the backend's (the SSD's saved
 * states) leaves the buffers after it as they are on the reference. */
static uint64_t buffer_stream(const run *r)
{
    return r->seed + (uint64_t)(r->n_buf + 1) * 0xd1b54a32d192ed03ULL;
}

static float *f32(run *r, buf_role role, size_t count, float lo, float hi)
{
    float *host = malloc(count * sizeof *host);
    assert_non_null(host);
    uint64_t stream = buffer_stream(r);
    for (size_t i = 0; i < count; i++)
        host[i] = uniform(&stream, lo, hi);
    float *dev = add_buffer(r, BUF_F32, role, count, host);
    free(host);
    return dev;
}

/* bf16 weights: uniform floats in [lo, hi) rounded to bf16. */
static uint16_t *bf16_in(run *r, size_t count, float lo, float hi)
{
    uint16_t *host = malloc(count * sizeof *host);
    assert_non_null(host);
    uint64_t stream = buffer_stream(r);
    for (size_t i = 0; i < count; i++)
        host[i] = ac_float_to_bf16(uniform(&stream, lo, hi));
    uint16_t *dev = add_buffer(r, BUF_BF16, BUF_IN, count, host);
    free(host);
    return dev;
}

static double *f64(run *r, buf_role role, size_t count)
{
    double *host = malloc(count * sizeof *host);
    assert_non_null(host);
    uint64_t stream = buffer_stream(r);
    for (size_t i = 0; i < count; i++)
        host[i] = uniform(&stream, -1.0f, 1.0f);
    double *dev = add_buffer(r, BUF_F64, role, count, host);
    free(host);
    return dev;
}

static int32_t *i32(run *r, buf_role role, size_t count, const int32_t *values)
{
    return add_buffer(r, BUF_I32, role, count, values);
}

/* `per_row` distinct values of 0..range-1 in random order, for each of `rows` rows. */
static int32_t *i32_distinct(run *r, buf_role role, int rows, int per_row, int range)
{
    assert_true(per_row <= range);
    int32_t *all = malloc((size_t)range * sizeof *all);
    int32_t *host = malloc((size_t)rows * per_row * sizeof *host);
    assert_true(all && host);
    for (int t = 0; t < rows; t++) {
        for (int i = 0; i < range; i++)
            all[i] = i;
        for (int i = 0; i < per_row; i++) {
            int j = i + below(r, range - i);
            int32_t v = all[j];
            all[j] = all[i];
            all[i] = v;
            host[(size_t)t * per_row + i] = v;
        }
    }
    int32_t *dev = i32(r, role, (size_t)rows * per_row, host);
    free(all);
    free(host);
    return dev;
}

/* n values of 0..range-1, repeats allowed. */
static int32_t *i32_any(run *r, buf_role role, int n, int range)
{
    int32_t *host = malloc((size_t)n * sizeof *host);
    assert_non_null(host);
    for (int i = 0; i < n; i++)
        host[i] = below(r, range);
    int32_t *dev = i32(r, role, (size_t)n, host);
    free(host);
    return dev;
}

/* An output of n integers, all `value` before the op. */
static int32_t *i32_fill(run *r, buf_role role, int n, int32_t value)
{
    int32_t *host = malloc((size_t)n * sizeof *host);
    assert_non_null(host);
    for (int i = 0; i < n; i++)
        host[i] = value;
    int32_t *dev = i32(r, role, (size_t)n, host);
    free(host);
    return dev;
}

/* A workspace of `bytes` (garbage before the op) in the run's context. */
static void workspace(run *r, size_t bytes)
{
    r->ctx.workspace = f32(r, BUF_SCRATCH, (bytes + sizeof(float) - 1) / sizeof(float), -1.0f, 1.0f);
    r->ctx.workspace_bytes = bytes;
}

/* ---- the cases ---- */

typedef struct op_case op_case;
typedef void (*op_fn)(run *r, const op_case *c);

struct op_case {
    const char *op; /* the member of struct ac_backend */
    int slot;       /* its index among the op members */
    op_fn fn;
    const char *shape;
    double tol; /* max |error| / max |reference| of float outputs off the CPU; integers: exact */
    int p[14];  /* integer arguments, in the order its op_ function lists */
    float f[6]; /* float arguments */
};

#define OP(member) #member, SLOT(member), op_##member

/* p: M N K lda ldc; f: beta */
static void op_linear(run *r, const op_case *c)
{
    int M = c->p[0], N = c->p[1], K = c->p[2], lda = c->p[3], ldc = c->p[4];
    const float *A = f32(r, BUF_IN, (size_t)M * lda, -1.0f, 1.0f);
    const float *W = f32(r, BUF_IN, (size_t)N * K, -1.0f, 1.0f);
    float *C = f32(r, BUF_OUT, (size_t)M * ldc, -1.0f, 1.0f);
    CALL(r, linear, M, N, K, A, lda, W, c->f[0], C, ldc);
}

/* p: n, then rows and cols of each product (up to 3) */
static void op_gemv_batch(run *r, const op_case *c)
{
    enum { MAX = 3 };
    int n = c->p[0], rows[MAX], cols[MAX];
    const float *W[MAX], *x[MAX];
    float *y[MAX];
    for (int i = 0; i < n; i++) {
        rows[i] = c->p[1 + 2 * i];
        cols[i] = c->p[2 + 2 * i];
        W[i] = f32(r, BUF_IN, (size_t)rows[i] * cols[i], -1.0f, 1.0f);
        x[i] = f32(r, BUF_IN, (size_t)cols[i], -1.0f, 1.0f);
        y[i] = f32(r, BUF_OUT, (size_t)rows[i], -1.0f, 1.0f);
    }
    CALL(r, gemv_batch, n, W, rows, cols, x, y);
}

/* p: n rows, then cols of each product (up to 3); f: alpha of each */
static void op_gemv_sum(run *r, const op_case *c)
{
    enum { MAX = 3 };
    int n = c->p[0], rows = c->p[1], cols[MAX];
    const float *W[MAX], *x[MAX];
    for (int i = 0; i < n; i++) {
        cols[i] = c->p[2 + i];
        W[i] = f32(r, BUF_IN, (size_t)rows * cols[i], -1.0f, 1.0f);
        x[i] = f32(r, BUF_IN, (size_t)cols[i], -1.0f, 1.0f);
    }
    float *y = f32(r, BUF_OUT, (size_t)rows, -1.0f, 1.0f);
    CALL(r, gemv_sum, n, W, rows, cols, x, c->f, y);
}

/* p: n N K lda ldc, then M of each product (up to 4) */
static void op_linear_batch(run *r, const op_case *c)
{
    enum { MAX = 4 };
    int n = c->p[0], N = c->p[1], K = c->p[2], lda = c->p[3], ldc = c->p[4], M[MAX];
    const float *A[MAX], *W[MAX];
    float *C[MAX];
    for (int i = 0; i < n; i++) {
        M[i] = c->p[5 + i];
        A[i] = f32(r, BUF_IN, (size_t)M[i] * lda + 1, -1.0f, 1.0f);
        W[i] = f32(r, BUF_IN, (size_t)N * K, -1.0f, 1.0f);
        C[i] = f32(r, BUF_OUT, (size_t)M[i] * ldc + 1, -1.0f, 1.0f);
    }
    CALL(r, linear_batch, n, M, N, K, A, lda, W, C, ldc);
}

/* p: rows dim ldx ldy in_place (y = x, ldy = ldx); f: eps */
static void op_rmsnorm(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], ldx = c->p[2], ldy = c->p[3];
    float *x = f32(r, c->p[4] ? BUF_OUT : BUF_IN, (size_t)rows * ldx, -2.0f, 2.0f);
    const float *w = f32(r, BUF_IN, (size_t)dim, 0.5f, 1.5f);
    float *y = c->p[4] ? x : f32(r, BUF_OUT, (size_t)rows * ldy, -1.0f, 1.0f);
    CALL(r, rmsnorm, rows, dim, x, ldx, w, c->f[0], y, c->p[4] ? ldx : ldy);
}

/* p: rows dim group_size ldy ldz ldout in_place (out = y); f: eps */
static void op_gated_rmsnorm(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], group = c->p[2], ldy = c->p[3], ldz = c->p[4], ldout = c->p[5];
    float *y = f32(r, c->p[6] ? BUF_OUT : BUF_IN, (size_t)rows * ldy, -2.0f, 2.0f);
    const float *z = f32(r, BUF_IN, (size_t)rows * ldz, -3.0f, 3.0f);
    const float *w = f32(r, BUF_IN, (size_t)dim, 0.5f, 1.5f);
    float *out = c->p[6] ? y : f32(r, BUF_OUT, (size_t)rows * ldout, -1.0f, 1.0f);
    CALL(r, gated_rmsnorm, rows, dim, group, y, ldy, z, ldz, w, c->f[0], out, c->p[6] ? ldy : ldout);
}

/* p: T C K ldx ldy has_bias */
static void op_conv1d_silu(run *r, const op_case *c)
{
    int T = c->p[0], C = c->p[1], K = c->p[2], ldx = c->p[3], ldy = c->p[4];
    const float *x = f32(r, BUF_IN, (size_t)T * ldx, -2.0f, 2.0f);
    const float *w = f32(r, BUF_IN, (size_t)C * K, -1.0f, 1.0f);
    const float *bias = c->p[5] ? f32(r, BUF_IN, (size_t)C, -0.5f, 0.5f) : NULL;
    float *state = f32(r, BUF_OUT, (size_t)C * (K - 1), -2.0f, 2.0f);
    float *y = f32(r, BUF_OUT, (size_t)T * ldy, -1.0f, 1.0f);
    CALL(r, conv1d_silu, T, C, K, x, ldx, w, bias, state, y, ldy);
}

/* p: T H ldraw; f: dt_min. raw reaches past 20 (the identity branch) and below the clamp. */
static void op_softplus_dt(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], ldraw = c->p[2];
    const float *raw = f32(r, BUF_IN, (size_t)T * ldraw, -8.0f, 24.0f);
    const float *bias = f32(r, BUF_IN, (size_t)H, -1.0f, 1.0f);
    float *dt = f32(r, BUF_OUT, (size_t)T * H, -1.0f, 1.0f);
    CALL(r, softplus_dt, T, H, raw, ldraw, bias, c->f[0], dt);
}

/* p: T H P N G ldx ldbc ldy */
static void op_ssd_scan(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], P = c->p[2], N = c->p[3], G = c->p[4];
    int ldx = c->p[5], ldbc = c->p[6], ldy = c->p[7];
    const float *x = f32(r, BUF_IN, (size_t)T * ldx, -1.0f, 1.0f);
    const float *B = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *C = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *dt = f32(r, BUF_IN, (size_t)T * H, 0.01f, 0.5f);
    const float *A = f32(r, BUF_IN, (size_t)H, -2.0f, -0.1f);
    const float *D = f32(r, BUF_IN, (size_t)H, -1.0f, 1.0f);
    float *state = f32(r, BUF_OUT, (size_t)H * P * N, -1.0f, 1.0f);
    float *y = f32(r, BUF_OUT, (size_t)T * ldy, -1.0f, 1.0f);
    CALL(r, ssd_scan, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, state, y, ldy);
}

/* p: n_new past n_heads n_kv hd ldq cap ldout ldlse (0: no lse); f: scale */
static void op_attention(run *r, const op_case *c)
{
    int n_new = c->p[0], past = c->p[1], n_heads = c->p[2], n_kv = c->p[3], hd = c->p[4];
    int ldq = c->p[5], cap = c->p[6], ldout = c->p[7];
    const float *q = f32(r, BUF_IN, (size_t)n_new * ldq, -1.0f, 1.0f);
    const float *k = f32(r, BUF_IN, (size_t)n_kv * cap * hd, -1.0f, 1.0f);
    const float *v = f32(r, BUF_IN, (size_t)n_kv * cap * hd, -1.0f, 1.0f);
    float *out = f32(r, BUF_OUT, (size_t)n_new * ldout, -1.0f, 1.0f);
    int ldlse = c->p[8];
    float *lse = ldlse ? f32(r, BUF_OUT, (size_t)n_new * ldlse, -1.0f, 1.0f) : NULL;
    workspace(r, r->be->attention_workspace(omp_get_max_threads(), n_new, past + n_new));
    CALL(r, attention, n_new, past, n_heads, n_kv, hd, q, ldq, k, v, cap, c->f[0], out, ldout, lse, ldlse);
}

/* p: T E n_group topk_group top_k norm; f: scale */
static void op_moe_route(run *r, const op_case *c)
{
    int T = c->p[0], E = c->p[1], top_k = c->p[4];
    const float *logits = f32(r, BUF_IN, (size_t)T * E, -3.0f, 3.0f);
    const float *bias = f32(r, BUF_IN, (size_t)E, -0.3f, 0.3f);
    int32_t *idx = i32_fill(r, BUF_OUT, T * top_k, -1);
    float *weight = f32(r, BUF_OUT, (size_t)T * top_k, -1.0f, 1.0f);
    CALL(r, moe_route, T, E, logits, bias, c->p[2], c->p[3], top_k, c->p[5], c->f[0], idx, weight);
}

/* A soft expert mask in (0.2, 1] with every `zero_every`-th entry 0 (0: none). */
static float *expert_mask(run *r, int E, int zero_every)
{
    float host[1024];
    assert_true(E <= 1024);
    for (int e = 0; e < E; e++)
        host[e] = zero_every && e % zero_every == zero_every - 1 ? 0.0f : uniform(&r->rng, 0.2f, 1.0f);
    return add_buffer(r, BUF_F32, BUF_IN, (size_t)E, host);
}

/* p: T E zero_every has_bias */
static void op_moe_mask_scores(run *r, const op_case *c)
{
    int T = c->p[0], E = c->p[1];
    const float *mask = expert_mask(r, E, c->p[2]);
    const float *bias = c->p[3] ? f32(r, BUF_IN, (size_t)E, -0.3f, 0.3f) : NULL;
    float *logits = f32(r, BUF_OUT, (size_t)T * E, -3.0f, 3.0f);
    float *masked_bias = f32(r, BUF_OUT, (size_t)E, -1.0f, 1.0f);
    CALL(r, moe_mask_scores, T, E, mask, bias, logits, masked_bias);
}

/* A weight matrix of `count` values in [-1, 1): floats, or bf16 values when bf16. */
static const void *weights_in(run *r, int bf16, size_t count)
{
    return bf16 ? (const void *)bf16_in(r, count, -1.0f, 1.0f) : (const void *)f32(r, BUF_IN, count, -1.0f, 1.0f);
}

/* p: D E I S k masked bf16 T (masked: an expert mask with a zero, and both channel masks;
 * bf16: the matrices in bf16; T tokens, 0: 1) */
static void op_moe_token(run *r, const op_case *c)
{
    int D = c->p[0], E = c->p[1], I = c->p[2], S = c->p[3], k = c->p[4], masked = c->p[5], bf16 = c->p[6];
    int T = c->p[7] > 0 ? c->p[7] : 1;
    ac_k_moe_ffn ffn = {.D = D, .E = E, .I = I, .S = S, .bf16 = bf16};
    ffn.experts_up = weights_in(r, bf16, (size_t)E * I * D);
    ffn.experts_down = weights_in(r, bf16, (size_t)E * D * I);
    ffn.shared_up = S > 0 ? weights_in(r, bf16, (size_t)S * D) : NULL;
    ffn.shared_down = S > 0 ? weights_in(r, bf16, (size_t)D * S) : NULL;
    if (masked) {
        ffn.experts_mask = expert_mask(r, E, 3);
        ffn.ffn_mask = f32(r, BUF_IN, (size_t)I, 0.0f, 1.0f);
        ffn.shared_mask = S > 0 ? f32(r, BUF_IN, (size_t)S, 0.0f, 1.0f) : NULL;
    }
    const int32_t *idx = i32_distinct(r, BUF_IN, T, k, E);
    const float *weight = f32(r, BUF_IN, (size_t)T * k, 0.1f, 1.0f);
    const float *x = f32(r, BUF_IN, (size_t)T * D, -1.0f, 1.0f);
    float *hidden = f32(r, BUF_OUT, (size_t)T * ((size_t)S + (size_t)k * I), -1.0f, 1.0f);
    float *y = f32(r, BUF_OUT, (size_t)T * D, -1.0f, 1.0f);
    CALL(r, moe_token, &ffn, T, k, idx, weight, x, hidden, y);
}

/* p: T E zero_every */
static void op_moe_mask_scores_backward(run *r, const op_case *c)
{
    int T = c->p[0], E = c->p[1];
    const float *mask = expert_mask(r, E, c->p[2]);
    const float *dlogits = f32(r, BUF_IN, (size_t)T * E, -1.0f, 1.0f);
    float *dmask = f32(r, BUF_OUT, (size_t)E, -1.0f, 1.0f);
    CALL(r, moe_mask_scores_backward, T, E, mask, dlogits, dmask);
}

/* p: M N K lda ldc; f: alpha beta */
static void op_linear_bf16(run *r, const op_case *c)
{
    int M = c->p[0], N = c->p[1], K = c->p[2], lda = c->p[3], ldc = c->p[4];
    const float *A = f32(r, BUF_IN, (size_t)M * lda + 1, -1.0f, 1.0f);
    const uint16_t *W = bf16_in(r, (size_t)N * K + 1, -1.0f, 1.0f);
    float *C = f32(r, BUF_OUT, (size_t)M * ldc, -1.0f, 1.0f);
    CALL(r, linear_bf16, M, N, K, c->f[0], A, lda, W, c->f[1], C, ldc);
}

/* p: n D ldsrc src_rows */
static void op_gather_rows_bf16(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], ldsrc = c->p[2];
    const uint16_t *src = bf16_in(r, (size_t)c->p[3] * ldsrc, -2.0f, 2.0f);
    const int32_t *rows = i32_distinct(r, BUF_IN, 1, n, c->p[3]);
    float *dst = f32(r, BUF_OUT, (size_t)n * D, -1.0f, 1.0f);
    CALL(r, gather_rows_bf16, n, D, src, ldsrc, rows, dst);
}

/* p: n D ldsrc src_rows */
static void op_gather_rows(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], ldsrc = c->p[2];
    const float *src = f32(r, BUF_IN, (size_t)c->p[3] * ldsrc, -1.0f, 1.0f);
    const int32_t *rows = i32_any(r, BUF_IN, n, c->p[3]);
    float *dst = f32(r, BUF_OUT, (size_t)n * D, -1.0f, 1.0f);
    CALL(r, gather_rows, n, D, src, ldsrc, rows, dst);
}

/* p: n D lddst dst_rows */
static void op_scatter_add_rows(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], lddst = c->p[2];
    const float *src = f32(r, BUF_IN, (size_t)n * D, -1.0f, 1.0f);
    const int32_t *rows = i32_distinct(r, BUF_IN, 1, n, c->p[3]);
    const float *weight = f32(r, BUF_IN, (size_t)n, 0.0f, 1.0f);
    float *dst = f32(r, BUF_OUT, (size_t)c->p[3] * lddst, -1.0f, 1.0f);
    CALL(r, scatter_add_rows, n, D, src, rows, weight, dst, lddst);
}

/* p: n in_place */
static void op_relu2(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    if (c->p[1]) {
        float *x = f32(r, BUF_OUT, n, -1.0f, 1.0f);
        CALL(r, relu2, n, x, x);
        return;
    }
    const float *x = f32(r, BUF_IN, n, -1.0f, 1.0f);
    float *y = f32(r, BUF_OUT, n, -1.0f, 1.0f);
    CALL(r, relu2, n, x, y);
}

/* p: n */
static void op_add(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    const float *x = f32(r, BUF_IN, n, -1.0f, 1.0f);
    float *y = f32(r, BUF_OUT, n, -1.0f, 1.0f);
    CALL(r, add, n, x, y);
}

/* p: rows cols ldx */
static void op_mul_columns(run *r, const op_case *c)
{
    int rows = c->p[0], cols = c->p[1], ldx = c->p[2];
    const float *mask = f32(r, BUF_IN, (size_t)cols, 0.0f, 1.0f);
    float *x = f32(r, BUF_OUT, (size_t)rows * ldx, -1.0f, 1.0f);
    CALL(r, mul_columns, rows, cols, mask, x, ldx);
}

/* p: rows cols lda ldb */
static void op_column_dot(run *r, const op_case *c)
{
    int rows = c->p[0], cols = c->p[1], lda = c->p[2], ldb = c->p[3];
    const float *a = f32(r, BUF_IN, (size_t)rows * lda, -1.0f, 1.0f);
    const float *b = f32(r, BUF_IN, (size_t)rows * ldb, -1.0f, 1.0f);
    float *out = f32(r, BUF_OUT, (size_t)cols, -1.0f, 1.0f);
    CALL(r, column_dot, rows, cols, a, lda, b, ldb, out);
}

/* p: n aliased */
static void op_neg_exp(run *r, const op_case *c)
{
    int n = c->p[0];
    float *x = f32(r, c->p[1] ? BUF_OUT : BUF_IN, (size_t)n, -4.0f, 2.0f);
    float *y = c->p[1] ? x : f32(r, BUF_OUT, (size_t)n, -1.0f, 1.0f);
    CALL(r, neg_exp, n, x, y);
}

/* p: M N K lda lddc ldda has_dA has_dW; f: beta_dA */
static void op_linear_backward(run *r, const op_case *c)
{
    int M = c->p[0], N = c->p[1], K = c->p[2], lda = c->p[3], lddc = c->p[4], ldda = c->p[5];
    const float *A = f32(r, BUF_IN, (size_t)M * lda, -1.0f, 1.0f);
    const float *W = f32(r, BUF_IN, (size_t)N * K, -1.0f, 1.0f);
    const float *dC = f32(r, BUF_IN, (size_t)M * lddc, -1.0f, 1.0f);
    float *dA = c->p[6] ? f32(r, BUF_OUT, (size_t)M * ldda, -1.0f, 1.0f) : NULL;
    float *dW = c->p[7] ? f32(r, BUF_OUT, (size_t)N * K, -1.0f, 1.0f) : NULL;
    CALL(r, linear_backward, M, N, K, A, lda, W, dC, lddc, c->f[0], dA, ldda, dW);
}

/* p: n N K lda lddc ldda has_dA has_dW, then M of each product (up to 3) */
static void op_linear_batch_backward(run *r, const op_case *c)
{
    enum { MAX = 3 };
    int n = c->p[0], N = c->p[1], K = c->p[2], lda = c->p[3], lddc = c->p[4], ldda = c->p[5], M[MAX];
    const float *A[MAX], *W[MAX], *dC[MAX];
    float *dA[MAX], *dW[MAX];
    for (int i = 0; i < n; i++) {
        M[i] = c->p[8 + i];
        A[i] = f32(r, BUF_IN, (size_t)M[i] * lda + 1, -1.0f, 1.0f);
        W[i] = f32(r, BUF_IN, (size_t)N * K, -1.0f, 1.0f);
        dC[i] = f32(r, BUF_IN, (size_t)M[i] * lddc + 1, -1.0f, 1.0f);
        dA[i] = f32(r, BUF_OUT, (size_t)M[i] * ldda + 1, -1.0f, 1.0f);
        dW[i] = f32(r, BUF_OUT, (size_t)N * K, -1.0f, 1.0f);
    }
    CALL(r, linear_batch_backward, n, M, N, K, A, lda, W, dC, lddc, c->p[6] ? dA : NULL, ldda, c->p[7] ? dW : NULL);
}

/* p: rows dim ldx lddy lddx has_dw; f: eps beta_dx */
static void op_rmsnorm_backward(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], ldx = c->p[2], lddy = c->p[3], lddx = c->p[4];
    const float *x = f32(r, BUF_IN, (size_t)rows * ldx, -2.0f, 2.0f);
    const float *w = f32(r, BUF_IN, (size_t)dim, 0.5f, 1.5f);
    const float *dy = f32(r, BUF_IN, (size_t)rows * lddy, -1.0f, 1.0f);
    float *dx = f32(r, BUF_OUT, (size_t)rows * lddx, -1.0f, 1.0f);
    float *dw = c->p[5] ? f32(r, BUF_OUT, (size_t)dim, -1.0f, 1.0f) : NULL;
    CALL(r, rmsnorm_backward, rows, dim, x, ldx, w, c->f[0], dy, lddy, c->f[1], dx, lddx, dw);
}

/* p: rows dim ldx lddy; f: eps width */
static void op_rmsnorm_width_backward(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], ldx = c->p[2], lddy = c->p[3];
    const float *x = f32(r, BUF_IN, (size_t)rows * ldx, -2.0f, 2.0f);
    const float *w = f32(r, BUF_IN, (size_t)dim, 0.5f, 1.5f);
    const float *dy = f32(r, BUF_IN, (size_t)rows * lddy, -1.0f, 1.0f);
    float *dwidth = f32(r, BUF_OUT, 1, -1.0f, 1.0f);
    CALL(r, rmsnorm_width_backward, rows, dim, x, ldx, w, c->f[0], c->f[1], dy, lddy, dwidth);
}

/* p: n */
static void op_relu2_backward(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    const float *pre = f32(r, BUF_IN, n, -1.0f, 1.0f);
    float *grad = f32(r, BUF_OUT, n, -1.0f, 1.0f);
    CALL(r, relu2_backward, n, pre, grad);
}

/* Targets of `rows` rows over V classes; row 1 (when there is one) is ignored (-1). */
static int32_t *i32_targets(run *r, int rows, int V)
{
    int32_t *host = malloc((size_t)rows * sizeof *host);
    assert_non_null(host);
    for (int i = 0; i < rows; i++)
        host[i] = i == 1 ? -1 : below(r, V);
    int32_t *dev = i32(r, BUF_IN, (size_t)rows, host);
    free(host);
    return dev;
}

/* How a loss case passes dlogits. */
enum { GRAD_SEPARATE, GRAD_IN_PLACE, GRAD_NONE };

/* p: rows V grad_mode; f: scale */
static void op_cross_entropy(run *r, const op_case *c)
{
    int rows = c->p[0], V = c->p[1], mode = c->p[2];
    float *logits = f32(r, mode == GRAD_IN_PLACE ? BUF_OUT : BUF_IN, (size_t)rows * V, -4.0f, 4.0f);
    const int32_t *tg = i32_targets(r, rows, V);
    float *d = mode == GRAD_SEPARATE ? f32(r, BUF_OUT, (size_t)rows * V, -1.0f, 1.0f)
               : mode == GRAD_IN_PLACE ? logits
                                       : NULL;
    double *row_loss = f64(r, BUF_OUT, (size_t)rows);
    CALL(r, cross_entropy, rows, V, logits, tg, c->f[0], d, row_loss);
}

/* p: rows V grad_mode; f: tau scale */
static void op_kd_loss(run *r, const op_case *c)
{
    int rows = c->p[0], V = c->p[1], mode = c->p[2];
    float *student = f32(r, mode == GRAD_IN_PLACE ? BUF_OUT : BUF_IN, (size_t)rows * V, -4.0f, 4.0f);
    const float *teacher = f32(r, BUF_IN, (size_t)rows * V, -4.0f, 4.0f);
    float *d = mode == GRAD_SEPARATE ? f32(r, BUF_OUT, (size_t)rows * V, -1.0f, 1.0f)
               : mode == GRAD_IN_PLACE ? student
                                       : NULL;
    double *row_loss = f64(r, BUF_OUT, (size_t)rows);
    CALL(r, kd_loss, rows, V, student, teacher, c->f[0], c->f[1], d, row_loss);
}

/* p: n step; f: lr beta1 beta2 eps weight_decay g_scale */
static void op_adamw(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    float *w = f32(r, BUF_OUT, n, -1.0f, 1.0f);
    const float *g = f32(r, BUF_IN, n, -0.1f, 0.1f);
    float *m = f32(r, BUF_OUT, n, -0.05f, 0.05f);
    float *v = f32(r, BUF_OUT, n, 0.0f, 0.01f);
    CALL(r, adamw, n, w, g, c->f[5], m, v, c->f[0], c->f[1], c->f[2], c->f[3], c->f[4], c->p[1]);
}

/* p: n. The returned double is compared like an output. */
static void op_sum_squares(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    const float *x = f32(r, BUF_IN, n, -1.0f, 1.0f);
    r->ret = CALL(r, sum_squares, n, x);
    r->has_ret = 1;
}

/* p: n; f: s */
static void op_scale(run *r, const op_case *c)
{
    size_t n = (size_t)c->p[0];
    float *x = f32(r, BUF_OUT, n, -1.0f, 1.0f);
    CALL(r, scale, n, c->f[0], x);
}

/* p: T H P N G ldx ldbc ldy has_state0 */
static void op_ssd_scan_save(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], P = c->p[2], N = c->p[3], G = c->p[4];
    int ldx = c->p[5], ldbc = c->p[6], ldy = c->p[7];
    const float *x = f32(r, BUF_IN, (size_t)T * ldx, -1.0f, 1.0f);
    const float *B = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *C = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *dt = f32(r, BUF_IN, (size_t)T * H, 0.01f, 0.5f);
    const float *A = f32(r, BUF_IN, (size_t)H, -2.0f, -0.1f);
    const float *D = f32(r, BUF_IN, (size_t)H, -1.0f, 1.0f);
    const float *state0 = c->p[8] ? f32(r, BUF_IN, (size_t)H * P * N, -1.0f, 1.0f) : NULL;
    /* the backend's own layout */
    float *states = f32(r, BUF_SCRATCH, ac_k_ssd_states_floats(r->be, T, H, P, N), -1.0f, 1.0f);
    float *y = f32(r, BUF_OUT, (size_t)T * ldy, -1.0f, 1.0f);
    CALL(r, ssd_scan_save, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, state0, states, y, ldy);
}

/* p: T H P N G ldx ldbc lddy lddx lddbc has_state0 has_dA_dD */
static void op_ssd_scan_backward(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], P = c->p[2], N = c->p[3], G = c->p[4];
    int ldx = c->p[5], ldbc = c->p[6], lddy = c->p[7], lddx = c->p[8], lddbc = c->p[9];
    const float *x = f32(r, BUF_IN, (size_t)T * ldx, -1.0f, 1.0f);
    const float *B = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *C = f32(r, BUF_IN, (size_t)T * ldbc, -1.0f, 1.0f);
    const float *dt = f32(r, BUF_IN, (size_t)T * H, 0.01f, 0.5f);
    const float *A = f32(r, BUF_IN, (size_t)H, -2.0f, -0.1f);
    const float *D = f32(r, BUF_IN, (size_t)H, -1.0f, 1.0f);
    const float *state0 = c->p[10] ? f32(r, BUF_IN, (size_t)H * P * N, -1.0f, 1.0f) : NULL;
    float *states = f32(r, BUF_SCRATCH, ac_k_ssd_states_floats(r->be, T, H, P, N), -1.0f, 1.0f);
    CALL(r, ssd_scan_save, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, state0, states,
         f32(r, BUF_SCRATCH, (size_t)T * H * P, -1.0f, 1.0f), H * P);
    const float *dy = f32(r, BUF_IN, (size_t)T * lddy, -1.0f, 1.0f);
    float *dx = f32(r, BUF_OUT, (size_t)T * lddx, -1.0f, 1.0f);
    float *dB = f32(r, BUF_OUT, (size_t)T * lddbc, -1.0f, 1.0f);
    float *dC = f32(r, BUF_OUT, (size_t)T * lddbc, -1.0f, 1.0f);
    float *ddt = f32(r, BUF_OUT, (size_t)T * H, -1.0f, 1.0f);
    float *dA = c->p[11] ? f32(r, BUF_OUT, (size_t)H, -1.0f, 1.0f) : NULL;
    float *dD = c->p[11] ? f32(r, BUF_OUT, (size_t)H, -1.0f, 1.0f) : NULL;
    float *work = f32(r, BUF_SCRATCH, ac_k_ssd_backward_work_floats(r->be, T, H, P, N), -1.0f, 1.0f);
    CALL(r, ssd_scan_backward, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, state0, states, dy, lddy, dx, lddx, dB,
         dC, lddbc, ddt, dA, dD, work);
}

/* p: T H P ldx */
static void op_mul_heads(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], P = c->p[2], ldx = c->p[3];
    const float *mask = f32(r, BUF_IN, (size_t)H, 0.0f, 1.0f);
    float *x = f32(r, BUF_OUT, (size_t)T * ldx, -1.0f, 1.0f);
    CALL(r, mul_heads, T, H, P, mask, x, ldx);
}

/* p: T H P ldy lddy has_dmask */
static void op_mul_heads_backward(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], P = c->p[2], ldy = c->p[3], lddy = c->p[4];
    const float *mask = f32(r, BUF_IN, (size_t)H, 0.0f, 1.0f);
    const float *y = f32(r, BUF_IN, (size_t)T * ldy, -1.0f, 1.0f);
    float *dy = f32(r, BUF_OUT, (size_t)T * lddy, -1.0f, 1.0f);
    float *dmask = c->p[5] ? f32(r, BUF_OUT, (size_t)H, -1.0f, 1.0f) : NULL;
    CALL(r, mul_heads_backward, T, H, P, mask, y, ldy, dy, lddy, dmask);
}

/* p: T H ldraw lddraw has_dbias; f: dt_min */
static void op_softplus_dt_backward(run *r, const op_case *c)
{
    int T = c->p[0], H = c->p[1], ldraw = c->p[2], lddraw = c->p[3];
    const float *raw = f32(r, BUF_IN, (size_t)T * ldraw, -8.0f, 24.0f);
    const float *bias = f32(r, BUF_IN, (size_t)H, -1.0f, 1.0f);
    const float *ddt = f32(r, BUF_IN, (size_t)T * H, -1.0f, 1.0f);
    float *draw = f32(r, BUF_OUT, (size_t)T * lddraw, -1.0f, 1.0f);
    float *dbias = c->p[4] ? f32(r, BUF_OUT, (size_t)H, -1.0f, 1.0f) : NULL;
    CALL(r, softplus_dt_backward, T, H, raw, ldraw, bias, c->f[0], ddt, draw, lddraw, dbias);
}

/* p: T C K ldx lddy lddx has_bias has_state has_dw_dbias */
static void op_conv1d_silu_backward(run *r, const op_case *c)
{
    int T = c->p[0], C = c->p[1], K = c->p[2], ldx = c->p[3], lddy = c->p[4], lddx = c->p[5];
    const float *x = f32(r, BUF_IN, (size_t)T * ldx, -2.0f, 2.0f);
    const float *w = f32(r, BUF_IN, (size_t)C * K, -1.0f, 1.0f);
    const float *bias = c->p[6] ? f32(r, BUF_IN, (size_t)C, -0.5f, 0.5f) : NULL;
    const float *state = c->p[7] ? f32(r, BUF_IN, (size_t)C * (K - 1), -2.0f, 2.0f) : NULL;
    const float *dy = f32(r, BUF_IN, (size_t)T * lddy, -1.0f, 1.0f);
    float *dx = f32(r, BUF_OUT, (size_t)T * lddx, -1.0f, 1.0f);
    float *dw = c->p[8] ? f32(r, BUF_OUT, (size_t)C * K, -1.0f, 1.0f) : NULL;
    float *dbias = c->p[8] ? f32(r, BUF_OUT, (size_t)C, -1.0f, 1.0f) : NULL;
    CALL(r, conv1d_silu_backward, T, C, K, x, ldx, w, bias, state, dy, lddy, dx, lddx, dw, dbias);
}

/* p: rows dim group_size ldy ldz lddout lddy lddz has_dw; f: eps */
static void op_gated_rmsnorm_backward(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], group = c->p[2], ldy = c->p[3], ldz = c->p[4], lddout = c->p[5];
    int lddy = c->p[6], lddz = c->p[7];
    const float *y = f32(r, BUF_IN, (size_t)rows * ldy, -2.0f, 2.0f);
    const float *z = f32(r, BUF_IN, (size_t)rows * ldz, -3.0f, 3.0f);
    const float *w = f32(r, BUF_IN, (size_t)dim, 0.5f, 1.5f);
    const float *dout = f32(r, BUF_IN, (size_t)rows * lddout, -1.0f, 1.0f);
    float *dy = f32(r, BUF_OUT, (size_t)rows * lddy, -1.0f, 1.0f);
    float *dz = f32(r, BUF_OUT, (size_t)rows * lddz, -1.0f, 1.0f);
    float *dw = c->p[8] ? f32(r, BUF_OUT, (size_t)dim, -1.0f, 1.0f) : NULL;
    float *rstd = f32(r, BUF_SCRATCH, (size_t)rows * (dim / group), -1.0f, 1.0f);
    CALL(r, gated_rmsnorm_backward, rows, dim, group, y, ldy, z, ldz, w, c->f[0], dout, lddout, dy, lddy, dz, lddz,
         dw, rstd);
}

/* p: rows dim ldout lddout heads; f: eps width scale per_head */
static void op_gated_rmsnorm_width_backward(run *r, const op_case *c)
{
    int rows = c->p[0], dim = c->p[1], ldout = c->p[2], lddout = c->p[3], heads = c->p[4];
    const float *out = f32(r, BUF_IN, (size_t)rows * ldout, -1.0f, 1.0f);
    const float *dout = f32(r, BUF_IN, (size_t)rows * lddout, -1.0f, 1.0f);
    const float *rstd = f32(r, BUF_IN, (size_t)rows, 0.5f, 2.0f);
    float *dmask = f32(r, BUF_OUT, (size_t)heads + 1, -1.0f, 1.0f); /* one past the heads: untouched */
    CALL(r, gated_rmsnorm_width_backward, rows, dim, out, ldout, dout, lddout, rstd, c->f[0], c->f[1], c->f[2],
         c->f[3], heads, dmask);
}

/* p: L n_heads n_kv hd ldq ldkv; f: scale */
static void op_attention_backward(run *r, const op_case *c)
{
    int L = c->p[0], n_heads = c->p[1], n_kv = c->p[2], hd = c->p[3], ldq = c->p[4], ldkv = c->p[5];
    const float *q = f32(r, BUF_IN, (size_t)L * ldq, -1.0f, 1.0f);
    const float *k = f32(r, BUF_IN, (size_t)L * ldkv, -1.0f, 1.0f);
    const float *v = f32(r, BUF_IN, (size_t)L * ldkv, -1.0f, 1.0f);
    const float *datt = f32(r, BUF_IN, (size_t)L * ldq, -1.0f, 1.0f);
    const float *out = f32(r, BUF_IN, (size_t)L * ldq, -1.0f, 1.0f);
    /* the log normalisers (read) and deltas (written): normalisers above the scores */
    float *stats = f32(r, BUF_OUT, (size_t)L * 2 * n_heads, 1.0f, 3.0f);
    float *dq = f32(r, BUF_OUT, (size_t)L * ldq, -1.0f, 1.0f);
    float *dk = f32(r, BUF_OUT, (size_t)L * ldkv, -1.0f, 1.0f);
    float *dv = f32(r, BUF_OUT, (size_t)L * ldkv, -1.0f, 1.0f);
    workspace(r, ac_k_attention_backward_workspace(omp_get_max_threads(), L));
    CALL(r, attention_backward, L, n_heads, n_kv, hd, q, ldq, k, v, ldkv, datt, c->f[0], out, stats, dq, dk, dv);
}

/* p: T E top_k norm; f: scale */
static void op_moe_route_backward(run *r, const op_case *c)
{
    int T = c->p[0], E = c->p[1], top_k = c->p[2];
    const float *logits = f32(r, BUF_IN, (size_t)T * E, -3.0f, 3.0f);
    const int32_t *idx = i32_distinct(r, BUF_IN, T, top_k, E);
    const float *dweight = f32(r, BUF_IN, (size_t)T * top_k, -1.0f, 1.0f);
    float *dlogits = f32(r, BUF_OUT, (size_t)T * E, -1.0f, 1.0f);
    CALL(r, moe_route_backward, T, E, logits, top_k, c->p[3], c->f[0], idx, dweight, dlogits);
}

/* p: n D lddout dout_rows n_pairs has_mask has_dmask dy_in_place */
static void op_moe_combine_backward(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], lddout = c->p[2];
    const float *dout = f32(r, BUF_IN, (size_t)c->p[3] * lddout, -1.0f, 1.0f);
    const int32_t *rows = i32_any(r, BUF_IN, n, c->p[3]);
    float *y = f32(r, c->p[7] ? BUF_OUT : BUF_IN, (size_t)n * D, -1.0f, 1.0f);
    const float *weight = f32(r, BUF_IN, (size_t)n, 0.0f, 1.0f);
    const float *mask = c->p[5] ? f32(r, BUF_IN, 1, 0.2f, 1.0f) : NULL;
    const int32_t *pair = i32_distinct(r, BUF_IN, 1, n, c->p[4]);
    float *dweight = f32(r, BUF_OUT, (size_t)c->p[4], -1.0f, 1.0f);
    float *dmask = c->p[6] ? f32(r, BUF_OUT, 1, -1.0f, 1.0f) : NULL;
    float *dy = c->p[7] ? y : f32(r, BUF_OUT, (size_t)n * D, -1.0f, 1.0f);
    CALL(r, moe_combine_backward, n, D, dout, lddout, rows, y, weight, mask, pair, dweight, dmask, dy);
}

/* p: n D lddsrc src_rows */
static void op_gather_rows_backward(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], lddsrc = c->p[2];
    const float *ddst = f32(r, BUF_IN, (size_t)n * D, -1.0f, 1.0f);
    const int32_t *rows = i32_distinct(r, BUF_IN, 1, n, c->p[3]);
    float *dsrc = f32(r, BUF_OUT, (size_t)c->p[3] * lddsrc, -1.0f, 1.0f);
    CALL(r, gather_rows_backward, n, D, ddst, rows, dsrc, lddsrc);
}

/* p: n D vocab (ids repeat: n > vocab) */
static void op_embedding_backward(run *r, const op_case *c)
{
    int n = c->p[0], D = c->p[1], V = c->p[2];
    const float *drows = f32(r, BUF_IN, (size_t)n * D, -1.0f, 1.0f);
    const int32_t *ids = i32_any(r, BUF_IN, n, V);
    float *dtable = f32(r, BUF_OUT, (size_t)V * D, -1.0f, 1.0f);
    CALL(r, embedding_backward, n, D, drows, ids, dtable);
}

/* Tolerances off the CPU: elementwise ops round once; short reductions (norms, losses,
 * small GEMMs, softmaxes) may sum in another order; the scan and attention backwards sum
 * long chains of products. */
#define TOL_ELEM 1e-6
#define TOL_REDUCE 1e-5
#define TOL_LONG 1e-4

static const op_case cases[] = {
    {OP(linear), "M5 N7 K9 lda12 ldc10 beta0 (sgemm)", TOL_REDUCE, {5, 7, 9, 12, 10}, {0.0f}},
    {OP(linear), "M3 N13 K6 lda6 ldc15 beta1 (gemv rows)", TOL_REDUCE, {3, 13, 6, 6, 15}, {1.0f}},
    {OP(linear), "M1 N5 K17 lda19 ldc5 beta0.5 (decode)", TOL_REDUCE, {1, 5, 17, 19, 5}, {0.5f}},
    {OP(linear), "M67 N33 K21 lda21 ldc35 beta0", TOL_REDUCE, {67, 33, 21, 21, 35}, {0.0f}},
    {OP(linear), "M2 N300 K40 lda41 ldc301 beta1 (gemv rows, threads)", TOL_REDUCE, {2, 300, 40, 41, 301}, {1.0f}},
    {OP(gemv_batch), "n2 5x3 4x6 (one thread)", TOL_REDUCE, {2, 5, 3, 4, 6}, {0}},
    {OP(gemv_batch), "n3 256x24 130x24 7x40 (threads)", TOL_REDUCE, {3, 256, 24, 130, 24, 7, 40}, {0}},
    {OP(gemv_sum), "n2 rows6 cols5,3 (one thread)", TOL_REDUCE, {2, 6, 5, 3}, {1.0f, -0.5f}},
    {OP(linear_batch), "n2 N5 K3 M4,2 (one thread)", TOL_REDUCE, {2, 5, 3, 3, 6, 4, 2}, {0}},
    {OP(linear_batch), "n4 N24 K40 lda41 ldc25 M70,3,0,17 (threads)", TOL_REDUCE, {4, 24, 40, 41, 25, 70, 3, 0, 17},
     {0}},
    {OP(gemv_sum), "n3 rows300 cols40,24,17 (threads)", TOL_REDUCE, {3, 300, 40, 24, 17}, {1.0f, 0.7f, 1.3f}},
    {OP(rmsnorm), "rows5 dim7 ldx9 ldy11", TOL_REDUCE, {5, 7, 9, 11, 0}, {1e-5f}},
    {OP(rmsnorm), "rows3 dim6 ld6 in place", TOL_REDUCE, {3, 6, 6, 6, 1}, {1e-6f}},
    {OP(gated_rmsnorm), "rows5 dim12 group4 ldy13 ldz15 ldout14", TOL_REDUCE, {5, 12, 4, 13, 15, 14, 0}, {1e-5f}},
    {OP(gated_rmsnorm), "rows3 dim8 group8 ld9 out=y", TOL_REDUCE, {3, 8, 8, 9, 9, 9, 1}, {1e-6f}},
    {OP(conv1d_silu), "T7 C5 K4 ldx9 ldy6 bias", TOL_REDUCE, {7, 5, 4, 9, 6, 1}, {0}},
    {OP(conv1d_silu), "T1 C70 K4 ldx72 ldy71 no bias (decode)", TOL_REDUCE, {1, 70, 4, 72, 71, 0}, {0}},
    {OP(conv1d_silu), "T2 C3 K4 (T < K-1) bias", TOL_REDUCE, {2, 3, 4, 3, 3, 1}, {0}},
    {OP(conv1d_silu), "T100 C200 K4 bias (blocks in parallel)", TOL_REDUCE, {100, 200, 4, 200, 200, 1}, {0}},
    {OP(softplus_dt), "T5 H3 ldraw7 dt_min0.01", TOL_ELEM, {5, 3, 7}, {0.01f}},
    {OP(softplus_dt), "T1 H6 ldraw6 dt_min0", TOL_ELEM, {1, 6, 6}, {0.0f}},
    {OP(ssd_scan), "T7 H4 P3 N5 G2 ldx14 ldbc12 ldy13", TOL_REDUCE, {7, 4, 3, 5, 2, 14, 12, 13}, {0}},
    {OP(ssd_scan), "T1 H6 P2 N4 G3 (decode)", TOL_REDUCE, {1, 6, 2, 4, 3, 12, 12, 12}, {0}},
    {OP(ssd_scan), "T41 H6 P8 N17 G1 (threads)", TOL_REDUCE, {41, 6, 8, 17, 1, 48, 17, 50}, {0}},
    {OP(attention), "new5 past3 heads6 kv2 hd4 ldq26 cap10 ldout25", TOL_REDUCE, {5, 3, 6, 2, 4, 26, 10, 25},
     {0.5f}},
    {OP(attention), "new1 past6 heads4 kv1 hd3 cap9 (decode)", TOL_REDUCE, {1, 6, 4, 1, 3, 12, 9, 12}, {0.577f}},
    {OP(attention), "new4 past0 heads2 kv2 hd5 cap4 (prefill)", TOL_REDUCE, {4, 0, 2, 2, 5, 10, 4, 11}, {0.447f}},
    {OP(attention), "new70 past3 heads4 kv2 hd4 cap80 lse ld5 (tiles)", TOL_REDUCE, {70, 3, 4, 2, 4, 16, 80, 16, 5},
     {0.5f}},
    {OP(attention), "new2 past6 heads4 kv1 hd3 cap9 lse (decode)", TOL_REDUCE, {2, 6, 4, 1, 3, 12, 9, 12, 4},
     {0.577f}},
    {OP(moe_route), "T5 E8 groups4 keep2 top3 norm scale2.5", TOL_REDUCE, {5, 8, 4, 2, 3, 1}, {2.5f}},
    {OP(moe_route), "T3 E12 groups3 keep1 top2 raw", TOL_REDUCE, {3, 12, 3, 1, 2, 0}, {1.0f}},
    {OP(moe_route), "T1 E6 ungrouped top2 norm", TOL_REDUCE, {1, 6, 1, 1, 2, 1}, {1.0f}},
    {OP(moe_route), "T19 E4 groups4 (1 each) keep2 top2", TOL_REDUCE, {19, 4, 4, 2, 2, 1}, {1.5f}},
    {OP(moe_token), "D40 E8 I24 S16 k3 masked", TOL_REDUCE, {40, 8, 24, 16, 3, 1}, {0}},
    {OP(moe_token), "D300 E6 I70 no shared k2 (threads)", TOL_REDUCE, {300, 6, 70, 0, 2, 0}, {0}},
    {OP(moe_token), "D33 E16 I5 S7 k6", TOL_REDUCE, {33, 16, 5, 7, 6, 0}, {0}},
    {OP(moe_token), "D50 E4 I200 S100 k2 masked (500 up rows)", TOL_REDUCE, {50, 4, 200, 100, 2, 1}, {0}},
    {OP(moe_token), "D40 E8 I24 S16 k3 masked bf16", TOL_REDUCE, {40, 8, 24, 16, 3, 1, 1}, {0}},
    {OP(moe_token), "D300 E6 I70 no shared k2 bf16 (threads)", TOL_REDUCE, {300, 6, 70, 0, 2, 0, 1}, {0}},
    {OP(moe_token), "T5 D36 E8 I20 S12 k3 masked (a batch)", TOL_REDUCE, {36, 8, 20, 12, 3, 1, 0, 5}, {0}},
    {OP(moe_token), "T3 D40 E6 I24 S0 k2 bf16 (a batch)", TOL_REDUCE, {40, 6, 24, 0, 2, 0, 1, 3}, {0}},
    {OP(linear_bf16), "M5 N7 K9 lda12 ldc10 alpha1 beta0", TOL_REDUCE, {5, 7, 9, 12, 10}, {1.0f, 0.0f}},
    {OP(linear_bf16), "M1 N300 K40 lda41 ldc301 alpha0.7 beta1 (decode, threads)", TOL_REDUCE,
     {1, 300, 40, 41, 301}, {0.7f, 1.0f}},
    {OP(linear_bf16), "M67 N33 K21 lda21 ldc35 alpha-1.3 beta0.5 (threads)", TOL_REDUCE, {67, 33, 21, 21, 35},
     {-1.3f, 0.5f}},
    {OP(linear_bf16), "M3 N4 K0 beta0.5 (C = beta C)", TOL_REDUCE, {3, 4, 0, 1, 4}, {1.0f, 0.5f}},
    {OP(gather_rows_bf16), "n5 D7 ldsrc9 of11", 0.0, {5, 7, 9, 11}, {0}},
    {OP(gather_rows), "n5 D7 ldsrc9 of11", 0.0, {5, 7, 9, 11}, {0}},
    {OP(gather_rows), "n1 D3 ldsrc3 of2", 0.0, {1, 3, 3, 2}, {0}},
    {OP(scatter_add_rows), "n5 D6 lddst8 of9", TOL_ELEM, {5, 6, 8, 9}, {0}},
    {OP(scatter_add_rows), "n1 D3 lddst3 of1", TOL_ELEM, {1, 3, 3, 1}, {0}},
    {OP(relu2), "n37 in place", TOL_ELEM, {37, 1}, {0}},
    {OP(relu2), "n70001 (threads)", TOL_ELEM, {70001, 0}, {0}},
    {OP(add), "n29", TOL_ELEM, {29}, {0}},
    {OP(add), "n70001 (threads)", TOL_ELEM, {70001}, {0}},
    {OP(mul_columns), "rows5 cols7 ldx9", TOL_ELEM, {5, 7, 9}, {0}},
    {OP(column_dot), "rows6 cols5 lda7 ldb8", TOL_REDUCE, {6, 5, 7, 8}, {0}},
    {OP(neg_exp), "n9", TOL_ELEM, {9, 0}, {0}},
    {OP(neg_exp), "n5 in place", TOL_ELEM, {5, 1}, {0}},
    {OP(linear_backward), "M5 N7 K6 lda8 lddc9 ldda10 dA dW", TOL_REDUCE, {5, 7, 6, 8, 9, 10, 1, 1}, {0.0f}},
    {OP(linear_backward), "M3 N4 K5 dW only", TOL_REDUCE, {3, 4, 5, 5, 4, 5, 0, 1}, {0.0f}},
    {OP(linear_backward), "M1 N6 K3 dA beta1 only", TOL_REDUCE, {1, 6, 3, 3, 6, 4, 1, 0}, {1.0f}},
    {OP(linear_batch_backward), "n3 N24 K40 lda41 lddc25 ldda43 M70,0,17 dA dW (threads)", TOL_REDUCE,
     {3, 24, 40, 41, 25, 43, 1, 1, 70, 0, 17}, {0}},
    {OP(linear_batch_backward), "n2 N5 K3 M4,2 dW only", TOL_REDUCE, {2, 5, 3, 3, 5, 3, 0, 1, 4, 2}, {0}},
    {OP(linear_batch_backward), "n1 N7 K6 M9 dA only", TOL_REDUCE, {1, 7, 6, 6, 7, 6, 1, 0, 9}, {0}},
    {OP(rmsnorm_backward), "rows5 dim7 ldx9 lddy8 lddx10 dw", TOL_REDUCE, {5, 7, 9, 8, 10, 1}, {1e-5f}},
    {OP(rmsnorm_backward), "rows1 dim4 no dw", TOL_REDUCE, {1, 4, 4, 4, 4, 0}, {1e-6f}},
    {OP(rmsnorm_backward), "rows6 dim9 dx += (beta 1) dw", TOL_REDUCE, {6, 9, 9, 9, 11, 1}, {1e-5f, 1.0f}},
    {OP(rmsnorm_backward), "rows70 dim300 dx 0.5 dx + (threads)", TOL_REDUCE, {70, 300, 300, 300, 300, 0},
     {1e-5f, 0.5f}},
    {OP(rmsnorm_width_backward), "rows6 dim9 ldx11 lddy10 width6.5", TOL_REDUCE, {6, 9, 11, 10}, {1e-5f, 6.5f}},
    {OP(rmsnorm_width_backward), "rows70 dim300 width250 (blocks)", TOL_REDUCE, {70, 300, 300, 300},
     {1e-5f, 250.0f}},
    {OP(relu2_backward), "n41", TOL_ELEM, {41}, {0}},
    {OP(cross_entropy), "rows5 V11 one ignored", TOL_REDUCE, {5, 11, GRAD_SEPARATE}, {0.2f}},
    {OP(cross_entropy), "rows3 V7 dlogits in place", TOL_REDUCE, {3, 7, GRAD_IN_PLACE}, {1.0f}},
    {OP(cross_entropy), "rows2 V5 loss only", TOL_REDUCE, {2, 5, GRAD_NONE}, {1.0f}},
    {OP(cross_entropy), "rows3 V700 (a CUDA block's every warp)", TOL_REDUCE, {3, 700, GRAD_SEPARATE}, {1.0f}},
    {OP(kd_loss), "rows4 V9 tau2", TOL_REDUCE, {4, 9, GRAD_SEPARATE}, {2.0f, 0.25f}},
    {OP(kd_loss), "rows3 V6 tau1 in place", TOL_REDUCE, {3, 6, GRAD_IN_PLACE}, {1.0f, 1.0f}},
    {OP(kd_loss), "rows2 V5 tau1.5 loss only", TOL_REDUCE, {2, 5, GRAD_NONE}, {1.5f, 1.0f}},
    {OP(kd_loss), "rows2 V700 tau2 (a CUDA block's every warp)", TOL_REDUCE, {2, 700, GRAD_SEPARATE}, {2.0f, 0.25f}},
    {OP(adamw), "n23 step3 g_scale0.3", TOL_REDUCE, {23, 3}, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.3f}},
    {OP(adamw), "n70001 step1 (threads)", TOL_REDUCE, {70001, 1}, {3e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f}},
    {OP(sum_squares), "n3", TOL_REDUCE, {3}, {0}},
    {OP(sum_squares), "n1000 (chunks)", TOL_REDUCE, {1000}, {0}},
    {OP(sum_squares), "n70001 (threads)", TOL_REDUCE, {70001}, {0}},
    {OP(scale), "n31 s-0.7", TOL_ELEM, {31}, {-0.7f}},
    {OP(ssd_scan_save), "T6 H4 P3 N5 G2 ldx13 ldbc11 ldy14 state0", TOL_REDUCE, {6, 4, 3, 5, 2, 13, 11, 14, 1}, {0}},
    {OP(ssd_scan_save), "T1 H2 P2 N3 G1 zero state0 (decode)", TOL_REDUCE, {1, 2, 2, 3, 1, 4, 3, 4, 0}, {0}},
    {OP(ssd_scan_save), "T70 H2 P3 N4 G1 (the CPU's chunks of 32)", TOL_REDUCE, {70, 2, 3, 4, 1, 6, 4, 6, 0}, {0}},
    {OP(ssd_scan_backward), "T6 H4 P3 N5 G2 wide lds state0 dA dD", TOL_LONG,
     {6, 4, 3, 5, 2, 13, 11, 14, 15, 12, 1, 1}, {0}},
    {OP(ssd_scan_backward), "T1 H3 P2 N4 G1 no state0 no dA dD", TOL_LONG, {1, 3, 2, 4, 1, 6, 4, 6, 6, 4, 0, 0}, {0}},
    {OP(ssd_scan_backward), "T70 H2 P3 N4 G1 (the CPU's chunks of 32) state0 dA dD", TOL_LONG,
     {70, 2, 3, 4, 1, 6, 4, 6, 6, 4, 1, 1}, {0}},
    {OP(mul_heads), "T3 H4 P5 ldx23", TOL_ELEM, {3, 4, 5, 23}, {0}},
    {OP(mul_heads_backward), "T3 H4 P5 ldy21 lddy22 dmask", TOL_REDUCE, {3, 4, 5, 21, 22, 1}, {0}},
    {OP(mul_heads_backward), "T1 H2 P3 no dmask", TOL_REDUCE, {1, 2, 3, 6, 6, 0}, {0}},
    {OP(softplus_dt_backward), "T5 H3 ldraw4 lddraw6 dbias", TOL_REDUCE, {5, 3, 4, 6, 1}, {0.01f}},
    {OP(softplus_dt_backward), "T1 H4 no dbias", TOL_REDUCE, {1, 4, 4, 4, 0}, {0.0f}},
    {OP(conv1d_silu_backward), "T7 C5 K4 ldx6 lddy7 lddx8 bias state dw", TOL_REDUCE, {7, 5, 4, 6, 7, 8, 1, 1, 1}, {0}},
    {OP(conv1d_silu_backward), "T100 C200 K4 bias state dw (blocks in parallel)", TOL_REDUCE,
     {100, 200, 4, 200, 200, 200, 1, 1, 1}, {0}},
    {OP(conv1d_silu_backward), "T2 C70 K4 no bias no state no dw", TOL_REDUCE, {2, 70, 4, 70, 71, 72, 0, 0, 0}, {0}},
    {OP(conv1d_silu_backward), "T1 C3 K2 state bias dw (decode)", TOL_REDUCE, {1, 3, 2, 3, 3, 3, 1, 1, 1}, {0}},
    {OP(gated_rmsnorm_backward), "rows5 dim12 group4 wide lds dw", TOL_REDUCE, {5, 12, 4, 13, 14, 15, 16, 17, 1},
     {1e-5f}},
    {OP(gated_rmsnorm_backward), "rows2 dim6 group6 no dw", TOL_REDUCE, {2, 6, 6, 6, 6, 6, 6, 6, 0}, {1e-6f}},
    {OP(gated_rmsnorm_width_backward), "rows7 dim8 ldout11 lddout9 heads2 width5.5", TOL_REDUCE, {7, 8, 11, 9, 2},
     {1e-5f, 5.5f, 0.83f, 4.0f}},
    {OP(gated_rmsnorm_width_backward), "rows300 dim64 heads4 width40 (blocks)", TOL_REDUCE, {300, 64, 64, 64, 4},
     {1e-3f, 40.0f, 0.79f, 16.0f}},
    {OP(attention_backward), "L6 heads4 kv2 hd3 ldq13 ldkv7", TOL_LONG, {6, 4, 2, 3, 13, 7}, {0.577f}},
    {OP(attention_backward), "L5 heads6 kv1 hd2 ldq12 ldkv2", TOL_LONG, {5, 6, 1, 2, 12, 2}, {0.707f}},
    {OP(attention_backward), "L1 heads2 kv2 hd4", TOL_LONG, {1, 2, 2, 4, 8, 8}, {0.5f}},
    {OP(moe_route_backward), "T5 E8 top3 norm scale2.5", TOL_REDUCE, {5, 8, 3, 1}, {2.5f}},
    {OP(moe_route_backward), "T1 E6 top2 raw", TOL_REDUCE, {1, 6, 2, 0}, {1.0f}},
    {OP(moe_mask_scores), "T5 E8 every 3rd masked out, bias", TOL_ELEM, {5, 8, 3, 1}, {0}},
    {OP(moe_mask_scores), "T2 E6 no zeros, no bias", TOL_ELEM, {2, 6, 0, 0}, {0}},
    {OP(moe_mask_scores_backward), "T7 E8 every 4th masked out", TOL_REDUCE, {7, 8, 4}, {0}},
    {OP(moe_combine_backward), "n4 D6 lddout8 of7 pairs9 mask dmask", TOL_REDUCE, {4, 6, 8, 7, 9, 1, 1, 0}, {0}},
    {OP(moe_combine_backward), "n3 D5 no mask dy=y", TOL_REDUCE, {3, 5, 5, 4, 3, 0, 0, 1}, {0}},
    {OP(moe_combine_backward), "n3 D300 mask dmask (a CUDA block's every warp)", TOL_REDUCE,
     {3, 300, 300, 4, 5, 1, 1, 0}, {0}},
    {OP(gather_rows_backward), "n5 D4 lddsrc6 of8", TOL_ELEM, {5, 4, 6, 8}, {0}},
    {OP(gather_rows_backward), "n1 D2 lddsrc2 of1", TOL_ELEM, {1, 2, 2, 1}, {0}},
    {OP(embedding_backward), "n40 D7 vocab5 (ids repeat)", TOL_ELEM, {40, 7, 5}, {0}},
    {OP(embedding_backward), "n300 D300 vocab50 (columns in parallel)", TOL_ELEM, {300, 300, 50}, {0}},
};

enum { N_CASES = (int)(sizeof cases / sizeof cases[0]) };

/* ---- running and comparing ---- */

static void execute(run *r, const op_case *c, const ac_backend *be, int dispatch, const ac_backend *ctx_backend,
                    uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->be = be;
    r->dispatch = dispatch;
    r->ctx.backend = ctx_backend;
    r->seed = r->rng = seed;
    c->fn(r, c);
    be->sync(&r->ctx);
    const char *failure = be->take_error ? be->take_error() : NULL;
    if (failure)
        fail_msg("%s on %s: %s", c->op, be->name, failure);
    for (int i = 0; i < r->n_buf; i++) {
        buffer *b = &r->buf[i];
        size_t bytes = b->count * type_size(b->type);
        b->after = malloc(bytes);
        assert_non_null(b->after);
        be->copy(b->after, b->dev, bytes, AC_COPY_DEVICE_TO_HOST);
        be->free(b->dev);
        b->dev = NULL;
    }
}

static void release(run *r)
{
    for (int i = 0; i < r->n_buf; i++) {
        free(r->buf[i].init);
        free(r->buf[i].after);
    }
}

static double value_at(const buffer *b, const void *data, size_t i)
{
    return b->type == BUF_F32 ? (double)((const float *)data)[i] : ((const double *)data)[i];
}

/* The difference of one element: 0 for two NaNs or two equal infinities, infinite when
 * only one side is NaN or infinite. */
static double element_error(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y) ? 0.0 : INFINITY;
    if (isinf(x) || isinf(y))
        return x == y ? 0.0 : INFINITY;
    return fabs(x - y);
}

/* max |got - ref| / max |ref| over the finite ref values (the absolute error when those
 * are all zeros). */
static double relative_error(const buffer *b, const void *ref, const void *got)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < b->count; i++) {
        double x = value_at(b, ref, i), y = value_at(b, got, i);
        double d = element_error(x, y);
        if (d > worst)
            worst = d;
        if (isfinite(x) && fabs(x) > scale)
            scale = fabs(x);
    }
    return scale > 0.0 ? worst / scale : worst;
}

static long count_changed(const buffer *b)
{
    size_t size = type_size(b->type);
    long n = 0;
    for (size_t i = 0; i < b->count; i++)
        n += memcmp((const char *)b->init + i * size, (const char *)b->after + i * size, size) != 0;
    return n;
}

/* Runs case `index` on t and on the reference, prints its line (when quiet, only if it
 * failed) and returns 1 when it passed. */
static int check_case(const target *t, int index, int quiet)
{
    const op_case *c = &cases[index];
    uint64_t seed = 0x5eedULL * 1000003ULL + (uint64_t)index;
    run ref, got;
    execute(&ref, c, &reference, 0, &reference, seed);
    execute(&got, c, t->be, t->dispatch, t->ctx_backend, seed);
    assert_int_equal(ref.n_buf, got.n_buf);

    double err = 0.0;
    long int_bad = 0, inputs_changed = 0;
    for (int i = 0; i < ref.n_buf; i++) {
        const buffer *a = &ref.buf[i], *b = &got.buf[i];
        /* scratch may be sized by the backend (the SSD's saved states: its interval) */
        assert_true(a->type == b->type && a->role == b->role && (a->count == b->count || b->role == BUF_SCRATCH));
        if (b->role == BUF_IN) {
            inputs_changed += count_changed(a) + count_changed(b);
        } else if (b->role == BUF_OUT && b->type == BUF_I32) {
            for (size_t j = 0; j < b->count; j++)
                int_bad += ((const int32_t *)a->after)[j] != ((const int32_t *)b->after)[j];
        } else if (b->role == BUF_OUT) {
            double e = relative_error(b, a->after, b->after);
            if (!(e <= err))
                err = e;
        }
    }
    if (ref.has_ret || got.has_ret) {
        assert_true(ref.has_ret && got.has_ret);
        double x = ref.ret, y = got.ret;
        double e = x != 0.0 ? fabs(x - y) / fabs(x) : fabs(y);
        if (!(e <= err))
            err = e;
    }
    double tol = t->exact ? 0.0 : c->tol;
    int ok = err <= tol && int_bad == 0 && inputs_changed == 0;
    if (!quiet || !ok) {
        char extra[96] = "";
        if (int_bad)
            snprintf(extra, sizeof extra, " (%ld integer outputs differ)", int_bad);
        if (inputs_changed)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (%ld input values changed)",
                     inputs_changed);
        printf("  %-22s %-28s %-46s max_err %.3e  tol %.0e  %s%s\n", c->op, t->label, c->shape, err, tol,
               ok ? "ok" : "FAIL", extra);
    }
    release(&ref);
    release(&got);
    return ok;
}

/* Every case on t: returns how many failed and marks failed[slot] for each op that did. */
static int check_target(const target *t, int failed[N_OPS], int quiet)
{
    int n_failed = 0;
    for (int s = 0; s < N_OPS; s++)
        failed[s] = 0;
    for (int i = 0; i < N_CASES; i++)
        if (!check_case(t, i, quiet)) {
            n_failed++;
            failed[cases[i].slot] = 1;
        }
    return n_failed;
}

static target backend_target(const ac_backend *be, int dispatch)
{
    return (target){.label = be->name,
                    .be = be,
                    .dispatch = dispatch,
                    .ctx_backend = be,
                    .exact = strcmp(be->name, "cpu") == 0};
}

/* ---- a counting backend: the CPU's ops, each counting its calls ---- */

static int calls[N_OPS];

#define AC_OP(name, params, args)      \
    static void counted_##name params  \
    {                                  \
        calls[SLOT(name)]++;           \
        ac_cpu_##name args;            \
    }
#define AC_OP_VALUE(type, name, params, args) \
    static type counted_##name params         \
    {                                         \
        calls[SLOT(name)]++;                  \
        return ac_cpu_##name args;            \
    }
#include "kernels/ops.def"

static const ac_backend counting = {
    .name = "counting",
    .ssd_state_interval = AC_CPU_SSD_STATE_INTERVAL,
    .moe_token_batch = 1,
    .alloc = host_alloc,
    .alloc_dense = host_alloc,
    .free = host_free,
    .copy = host_copy,
    .memset_zero = host_zero,
    .sync = host_sync,
    .bytes_in_use = host_bytes_in_use,
    .probe_create = ac_cpu_probe_create,
    .attention_workspace = ac_cpu_attention_workspace,
#define AC_OP(name, params, args) .name = counted_##name,
#define AC_OP_VALUE(type, name, params, args) .name = counted_##name,
#include "kernels/ops.def"
};

/* ---- deliberately wrong ops ---- */

/* One output element off by 1e-3. */
static void wrong_linear(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W, float beta,
                         float *C, int ldc)
{
    ac_cpu_linear(ctx, M, N, K, A, lda, W, beta, C, ldc);
    C[0] += 1e-3f;
}

/* The first token's two best experts in the wrong order. */
static void wrong_moe_route(ac_kctx *ctx, int T, int E, const float *logits, const float *bias, int n_group,
                            int topk_group, int top_k, int norm, float scale, int32_t *idx, float *weight)
{
    ac_cpu_moe_route(ctx, T, E, logits, bias, n_group, topk_group, top_k, norm, scale, idx, weight);
    int32_t first = idx[0];
    idx[0] = idx[1];
    idx[1] = first;
}

/* y = x: forgets y's contents before the call. */
static void wrong_add(ac_kctx *ctx, size_t n, const float *x, float *y)
{
    (void)ctx;
    memcpy(y, x, n * sizeof *y);
}

/* ---- tests ---- */

/* The backend named on the command line (NULL: every compiled-in backend). */
static const char *only;

/* The backends under test: the compiled-in ones, then, in the emulator's build
 * (test_backend_ops_emu), the CUDA backend on the emulator (registered by main). */
static const ac_backend *emulated;

static int target_count(void)
{
    return ac_backend_count() + (emulated != NULL);
}

static const ac_backend *target_at(int i)
{
    return i < ac_backend_count() ? ac_backend_at(i) : emulated;
}

/* The i-th backend under test when this run covers it and it can run on this machine,
 * else NULL (saying why). */
static const ac_backend *usable_backend(int i)
{
    const ac_backend *be = target_at(i);
    if (only && strcmp(be->name, only) != 0)
        return NULL;
    const char *why = be->unavailable();
    if (why) {
        printf("  %s: skipped: %s\n", be->name, why);
        return NULL;
    }
    return be;
}

static void test_registry(void **state)
{
    (void)state;
    assert_true(ac_backend_count() >= 1);
    assert_ptr_equal(ac_backend_find("cpu"), &ac_cpu_backend);
    assert_ptr_equal(ac_backend_at(0), &ac_cpu_backend);
    assert_null(ac_backend_find("no such backend"));
    assert_null(ac_backend_find(""));
    assert_null(ac_backend_find(NULL));
    assert_null(ac_backend_at(-1));
    assert_null(ac_backend_at(ac_backend_count()));
#ifndef AC_HAVE_CUDA
    assert_null(ac_backend_find("cuda"));
#endif
    ac_kctx none = {0};
    assert_ptr_equal(ac_backend_of(&none), &ac_cpu_backend);
    for (int i = 0; i < target_count(); i++) {
        const ac_backend *be = target_at(i);
        assert_non_null(be);
        assert_non_null(be->name);
        assert_ptr_equal(ac_backend_find(be->name), be); /* names are unique */
        ac_kctx named = {.backend = be};
        assert_ptr_equal(ac_backend_of(&named), be);
        assert_true(be->alloc && be->alloc_dense && be->free && be->copy && be->memset_zero && be->sync &&
                    be->unavailable && be->take_error);
        assert_true(be->bytes_in_use && be->probe_create && be->attention_workspace);
        for (int s = 0; s < N_OPS; s++) {
            any_fn op;
            memcpy(&op, (const char *)be + offsetof(ac_backend, linear) + (size_t)s * sizeof op, sizeof op);
            assert_non_null(op);
        }
    }
}

/* alloc, every copy kind, memset_zero and sync of each backend, on odd sizes. */
static void test_memory(void **state)
{
    (void)state;
    enum { N = 37 };
    for (int i = 0; i < target_count(); i++) {
        const ac_backend *be = usable_backend(i);
        if (!be)
            continue;
        float host[N], back[N];
        for (int j = 0; j < N; j++)
            host[j] = (float)j * 0.5f - 3.0f;
        float *a = be->alloc(N * sizeof(float)), *b = be->alloc(N * sizeof(float));
        assert_true(a && b);
        be->copy(a, host, N * sizeof(float), AC_COPY_HOST_TO_DEVICE);
        be->memset_zero(b, N * sizeof(float));
        be->copy(b + 1, a + 2, (N - 3) * sizeof(float), AC_COPY_DEVICE_TO_DEVICE);
        ac_kctx ctx = {.backend = be};
        be->sync(&ctx);
        be->copy(back, b, N * sizeof(float), AC_COPY_DEVICE_TO_HOST);
        assert_true(back[0] == 0.0f && back[N - 2] == 0.0f && back[N - 1] == 0.0f);
        for (int j = 1; j < N - 2; j++)
            assert_true(back[j] == host[j + 1]);
        be->free(a);
        be->free(b);
        be->free(NULL);
        printf("  memory  %-10s alloc, copy (3 kinds), memset_zero, sync: ok\n", be->name);
    }
}

/* The kernel's transparent huge page setting ("always", "madvise", "never"; "" when it
 * has none) in mode. */
static void huge_page_mode(char *mode, size_t size)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "";
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
    }
    const char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
    snprintf(mode, size, "%.*s", open && close ? (int)(close - open - 1) : 0, open ? open + 1 : "");
}

/* The THPeligible field of the mapping of /proc/self/smaps that holds p, or -1. */
static int mapping_huge_eligible(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = 0, eligible = -1;
    while (eligible < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's header; its fields follow */
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside)
            sscanf(line, "THPeligible: %d", &eligible);
    }
    fclose(f);
    return eligible;
}

/* The CPU backend's dense buffers of at least a huge page start on a 2 MiB boundary, ask
 * for huge pages (where the kernel offers them) and hold every byte asked for; small ones
 * are plain, and so are its other buffers (where huge pages are given only on request). */
static void test_cpu_huge_buffers(void **state)
{
    (void)state;
    char mode[32];
    huge_page_mode(mode, sizeof mode);
    const size_t huge = 2u << 20, sizes[] = {huge, 5 * huge + 12, 100};
    for (int i = 0; i < 3; i++) {
        unsigned char *p = ac_cpu_backend.alloc_dense(sizes[i]);
        assert_non_null(p);
        memset(p, 0xa5, sizes[i]);
        assert_true(p[0] == 0xa5 && p[sizes[i] - 1] == 0xa5);
        if (sizes[i] >= huge) {
            assert_true((uintptr_t)p % huge == 0);
            if (!strcmp(mode, "always") || !strcmp(mode, "madvise"))
                assert_int_equal(mapping_huge_eligible(p), 1);
        }
        ac_cpu_backend.free(p);
    }
    unsigned char *plain = ac_cpu_backend.alloc(5 * huge);
    assert_non_null(plain);
    memset(plain, 0x5a, 5 * huge);
    if (!strcmp(mode, "madvise"))
        assert_int_equal(mapping_huge_eligible(plain + 2 * huge), 0);
    ac_cpu_backend.free(plain);
}

/* The op a case runs first to make its input, or -1: the scan backward reads states in
 * the layout of the backend's own ssd_scan_save. */
static int setup_slot(const op_case *c) { return c->fn == op_ssd_scan_backward ? SLOT(ssd_scan_save) : -1; }

/* Each case calls its own member exactly once (and its setup op once), through the
 * member and through the dispatcher, and every op slot of the struct is called by some
 * case. */
static void test_every_op_has_a_case(void **state)
{
    (void)state;
    int covered[N_OPS] = {0};
    target direct = {.label = "counting", .be = &counting, .ctx_backend = &counting, .exact = 1};
    target dispatched = {.label = "ac_k_* -> counting", .be = &counting, .dispatch = 1, .ctx_backend = &counting,
                         .exact = 1};
    const target *via[2] = {&direct, &dispatched};
    for (int i = 0; i < N_CASES; i++) {
        assert_true(cases[i].slot >= 0 && cases[i].slot < N_OPS);
        for (int k = 0; k < 2; k++) {
            memset(calls, 0, sizeof calls);
            assert_true(check_case(via[k], i, 1));
            for (int s = 0; s < N_OPS; s++)
                if (calls[s] != (s == cases[i].slot || s == setup_slot(&cases[i]))) {
                    printf("  case %d (%s, %s) via %s: op slot %d called %d times\n", i, cases[i].op,
                           cases[i].shape, via[k]->label, s, calls[s]);
                    fail();
                }
        }
        covered[cases[i].slot] = 1;
    }
    for (int s = 0; s < N_OPS; s++) {
        if (!covered[s])
            printf("  op slot %d of struct ac_backend has no case\n", s);
        assert_true(covered[s]);
    }
    printf("  %d cases cover all %d ops of struct ac_backend\n", N_CASES, N_OPS);
}

/* The table: every case on every compiled-in backend, through its members. */
static void test_backends_match_reference(void **state)
{
    (void)state;
    int failed[N_OPS];
    for (int i = 0; i < target_count(); i++) {
        const ac_backend *be = usable_backend(i);
        if (!be)
            continue;
        target t = backend_target(be, 0);
        assert_int_equal(check_target(&t, failed, 0), 0);
    }
}

/* The ac_k_* dispatchers: a NULL backend runs the CPU's ops; a named backend runs its own. */
static void test_dispatchers(void **state)
{
    (void)state;
    int failed[N_OPS];
    target null_backend = {.label = "ac_k_* (backend NULL)", .be = &ac_cpu_backend, .dispatch = 1,
                           .ctx_backend = NULL, .exact = 1};
    assert_int_equal(check_target(&null_backend, failed, 1), 0);
    for (int i = 0; i < target_count(); i++) {
        const ac_backend *be = usable_backend(i);
        if (!be)
            continue;
        target t = backend_target(be, 1);
        t.label = "ac_k_* (backend named)";
        assert_int_equal(check_target(&t, failed, 1), 0);
    }
    printf("  ac_k_* dispatchers: all %d cases pass with a NULL and a named backend\n", N_CASES);
}

/* A CPU backend with one wrong op fails on that op and on no other, whether the ops are
 * called through the members or through the dispatchers. */
static void expect_only(const ac_backend *faulty, int slot)
{
    for (int dispatch = 0; dispatch < 2; dispatch++) {
        char label[64];
        snprintf(label, sizeof label, "%s%s", dispatch ? "ac_k_* -> " : "", faulty->name);
        target t = {.label = label, .be = faulty, .dispatch = dispatch, .ctx_backend = faulty, .exact = 0};
        int failed[N_OPS];
        int n = check_target(&t, failed, 1);
        assert_true(n > 0);
        for (int s = 0; s < N_OPS; s++)
            assert_int_equal(failed[s], s == slot);
    }
}

static void test_harness_catches_a_wrong_op(void **state)
{
    (void)state;
    ac_backend faulty = ac_cpu_backend;
    faulty.name = "linear +1e-3";
    faulty.linear = wrong_linear;
    expect_only(&faulty, SLOT(linear));

    faulty = ac_cpu_backend;
    faulty.name = "moe_route swapped";
    faulty.moe_route = wrong_moe_route;
    expect_only(&faulty, SLOT(moe_route));

    faulty = ac_cpu_backend;
    faulty.name = "add overwrites";
    faulty.add = wrong_add;
    expect_only(&faulty, SLOT(add));
}

/* The CPU's matrix-vector products against sums in double, independently of the harness
 * (whose reference is the CPU itself): three products of uneven sizes in one batch
 * (rows split among threads across product boundaries), a weighted sum of two, a batch
 * of row-major products of uneven heights (one empty), and linear's per-row path with
 * beta. */
static void fill_uniform(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(seed >> 40) / (float)(1 << 23) - 1.0f;
    }
}

static void assert_dot_rows(const float *W, int rows, int cols, const float *x, float beta, const float *before,
                            const float *y)
{
    for (int r = 0; r < rows; r++) {
        double want = before ? (double)beta * before[r] : 0.0, size = 0.0;
        for (int c = 0; c < cols; c++) {
            want += (double)W[(size_t)r * cols + c] * x[c];
            size += fabs((double)W[(size_t)r * cols + c] * x[c]);
        }
        if (fabs(y[r] - want) > 1e-6 * size + 1e-7)
            fail_msg("row %d of %d x %d: %.9g, want %.9g", r, rows, cols, (double)y[r], want);
    }
}

static double relu2_double(double v) { return v > 0 ? v * v : 0.0; }

/* ac_cpu_moe_token against the formula in double: experts picked out of order (4, 0, 2)
 * come out by index, each expert's weight times its mask, the channel masks after relu2. */
static void test_moe_token_against_double(void **state)
{
    (void)state;
    enum { D = 37, E = 5, I = 11, S = 9, K = 3 };
    static float up[E * I * D], down[E * D * I], sup[S * D], sdown[D * S], x[D], hidden[S + K * I], y[D];
    float emask[E] = {1.0f, 0.9f, 0.5f, 0.8f, 0.7f}, fmask[I], smask[S], weight[K] = {0.6f, 0.3f, 0.1f};
    int32_t idx[K] = {4, 0, 2};
    fill_uniform(up, E * I * D, 1);
    fill_uniform(down, E * D * I, 2);
    fill_uniform(sup, S * D, 3);
    fill_uniform(sdown, D * S, 4);
    fill_uniform(x, D, 5);
    for (int c = 0; c < I; c++)
        fmask[c] = 0.5f + 0.05f * (float)c;
    for (int c = 0; c < S; c++)
        smask[c] = 1.0f - 0.1f * (float)c;
    ac_k_moe_ffn ffn = {D, E, I, S, 0, up, down, sup, sdown, emask, fmask, smask};
    ac_kctx ctx = {0};
    ac_cpu_moe_token(&ctx, &ffn, 1, K, idx, weight, x, hidden, y);

    const int order[K] = {1, 2, 0}; /* the picks by expert index: 0, 2, 4 */
    double h[S + K * I];
    for (int r = 0; r < S + K * I; r++) {
        int shared = r < S, c = shared ? r : (r - S) % I;
        const float *w = shared ? sup + (size_t)r * D : up + ((size_t)idx[order[(r - S) / I]] * I + c) * D;
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)w[i] * x[i];
        h[r] = relu2_double(dot) * (shared ? smask[c] : fmask[c]);
        if (fabs(hidden[r] - h[r]) > 1e-5 * (fabs(h[r]) + 1e-3))
            fail_msg("hidden[%d]: %.9g, want %.9g", r, (double)hidden[r], h[r]);
    }
    for (int d = 0; d < D; d++) {
        double want = 0.0, size = 0.0;
        for (int i = 0; i < S; i++) {
            want += (double)sdown[(size_t)d * S + i] * h[i];
            size += fabs((double)sdown[(size_t)d * S + i] * h[i]);
        }
        for (int o = 0; o < K; o++) {
            int j = order[o], e = idx[j];
            double alpha = (double)weight[j] * emask[e];
            for (int c = 0; c < I; c++) {
                double t = alpha * down[((size_t)e * D + d) * I + c] * h[S + o * I + c];
                want += t;
                size += fabs(t);
            }
        }
        if (fabs(y[d] - want) > 1e-6 * size + 1e-7)
            fail_msg("y[%d]: %.9g, want %.9g", d, (double)y[d], want);
    }
}

/* ac_cpu_linear_bf16 against the formula in double: A rounded to bf16, W widened, alpha
 * and beta (a missing rounding of A is off by ~2^-9 of the sum, far past the bound). */
static void test_linear_bf16_against_double(void **state)
{
    (void)state;
    enum { M = 3, N = 70, K = 37, LDA = 40, LDC = 71 };
    static float A[M * LDA], W[N * K], C[M * LDC], C0[M * LDC];
    static uint16_t W16[N * K];
    fill_uniform(A, M * LDA, 60);
    fill_uniform(W, N * K, 61);
    fill_uniform(C0, M * LDC, 62);
    for (int i = 0; i < N * K; i++)
        W16[i] = ac_float_to_bf16(W[i]);
    memcpy(C, C0, sizeof C);
    ac_kctx ctx = {0};
    ac_cpu_linear_bf16(&ctx, M, N, K, -0.75f, A, LDA, W16, 0.5f, C, LDC);
    double unrounded_off = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double dot = 0.0, size = 0.0, plain = 0.0;
            for (int k = 0; k < K; k++) {
                double w = ac_bf16_to_float(W16[n * K + k]), t = (double)ac_bf16_round(A[m * LDA + k]) * w;
                dot += t;
                size += fabs(t);
                plain += (double)A[m * LDA + k] * w;
            }
            double want = -0.75 * dot + 0.5 * C0[m * LDC + n];
            if (fabs(C[m * LDC + n] - want) > 1e-6 * (size + fabs(C0[m * LDC + n])) + 1e-7)
                fail_msg("C[%d, %d]: %.9g, want %.9g", m, n, (double)C[m * LDC + n], want);
            unrounded_off = fmax(unrounded_off, fabs(-0.75 * (plain - dot)) / (size + 1e-30));
        }
    /* the inputs' rounding matters at this bound, so the check above sees it */
    assert_true(unrounded_off > 1e-4);
}

/* ac_cpu_moe_token with bf16 weights against the formula in double: x and the h rounded
 * to bf16 where the products read them, hidden unrounded. */
static void test_moe_token_bf16_against_double(void **state)
{
    (void)state;
    enum { D = 29, E = 4, I = 7, S = 5, K = 2 };
    static float f[E * I * D + E * D * I + S * D + D * S], x[D], hidden[S + K * I], y[D];
    static uint16_t w[sizeof f / sizeof f[0]];
    fill_uniform(f, sizeof f / sizeof f[0], 70);
    fill_uniform(x, D, 71);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        w[i] = ac_float_to_bf16(f[i]);
    const uint16_t *up = w, *down = up + E * I * D, *sup = down + E * D * I, *sdown = sup + S * D;
    float weight[K] = {0.8f, 0.35f};
    int32_t idx[K] = {3, 1};
    ac_k_moe_ffn ffn = {.D = D, .E = E, .I = I, .S = S, .bf16 = 1,
                        .experts_up = up, .experts_down = down, .shared_up = sup, .shared_down = sdown};
    ac_kctx ctx = {0};
    ac_cpu_moe_token(&ctx, &ffn, 1, K, idx, weight, x, hidden, y);

    const int order[K] = {1, 0}; /* experts 1, 3 */
    double h[S + K * I];
    for (int r = 0; r < S + K * I; r++) {
        const uint16_t *row = r < S ? sup + r * D : up + ((size_t)idx[order[(r - S) / I]] * I + (r - S) % I) * D;
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)ac_bf16_to_float(row[i]) * (double)ac_bf16_round(x[i]);
        h[r] = relu2_double(dot);
        if (fabs(hidden[r] - h[r]) > 1e-5 * (fabs(h[r]) + 1e-3))
            fail_msg("hidden[%d]: %.9g, want %.9g", r, (double)hidden[r], h[r]);
    }
    for (int d = 0; d < D; d++) {
        double want = 0.0, size = 0.0;
        for (int p = 0; p < 1 + K; p++) {
            int n = p == 0 ? S : I;
            const uint16_t *row = p == 0 ? sdown + d * S : down + ((size_t)idx[order[p - 1]] * D + d) * I;
            const float *hp = hidden + (p == 0 ? 0 : S + (p - 1) * I);
            double alpha = p == 0 ? 1.0 : weight[order[p - 1]];
            for (int c = 0; c < n; c++) {
                double t = alpha * ac_bf16_to_float(row[c]) * (double)ac_bf16_round(hp[c]);
                want += t;
                size += fabs(t);
            }
        }
        if (fabs(y[d] - want) > 1e-6 * size + 1e-7)
            fail_msg("y[%d]: %.9g, want %.9g", d, (double)y[d], want);
    }
}

static void test_gemv_against_double(void **state)
{
    (void)state;
    enum { N = 3 };
    int rows[N] = {300, 37, 129}, cols[N] = {40, 40, 17};
    const float *W[N], *x[N];
    float *y[N];
    for (int i = 0; i < N; i++) {
        float *w = malloc((size_t)rows[i] * cols[i] * sizeof *w), *v = malloc((size_t)cols[i] * sizeof *v);
        y[i] = malloc((size_t)rows[i] * sizeof *y[i]);
        assert_true(w && v && y[i]);
        fill_uniform(w, (size_t)rows[i] * cols[i], 10 + (uint64_t)i);
        fill_uniform(v, (size_t)cols[i], 20 + (uint64_t)i);
        W[i] = w;
        x[i] = v;
    }
    ac_kctx ctx = {0};
    ac_cpu_gemv_batch(&ctx, N, W, rows, cols, x, y);
    for (int i = 0; i < N; i++)
        assert_dot_rows(W[i], rows[i], cols[i], x[i], 0.0f, NULL, y[i]);

    /* gemv_sum: 0.7 W[0] x[0] - 1.3 W[0] x[1] (both 300 x 40) */
    const float *Ws[2] = {W[0], W[0]}, *xs[2] = {x[0], x[1]};
    int both[2] = {40, 40};
    float alpha[2] = {0.7f, -1.3f}, *sum = malloc(300 * sizeof *sum);
    assert_non_null(sum);
    ac_cpu_gemv_sum(&ctx, 2, Ws, 300, both, xs, alpha, sum);
    for (int r = 0; r < 300; r++) {
        double want = 0.0, size = 0.0;
        for (int c = 0; c < 40; c++) {
            double a = 0.7 * W[0][r * 40 + c] * x[0][c], b = -1.3 * W[0][r * 40 + c] * x[1][c];
            want += a + b;
            size += fabs(a) + fabs(b);
        }
        if (fabs(sum[r] - want) > 1e-6 * size + 1e-7)
            fail_msg("gemv_sum row %d: %.9g, want %.9g", r, (double)sum[r], want);
    }
    free(sum);

    /* linear_batch: four products (70, 3, 0 and 17 rows, lda 41, ldc 31) of W[0]'s
     * first 31 rows (31 x 40) */
    enum { B = 4, LDA = 41, LDC = 31 };
    int M[B] = {70, 3, 0, 17};
    const float *As[B], *Wb[B];
    float *Cs[B];
    for (int i = 0; i < B; i++) {
        float *a = malloc(((size_t)M[i] * LDA + 1) * sizeof *a);
        Cs[i] = malloc(((size_t)M[i] * LDC + 1) * sizeof *Cs[i]);
        assert_true(a && Cs[i]);
        fill_uniform(a, (size_t)M[i] * LDA + 1, 40 + (uint64_t)i);
        As[i] = a;
        Wb[i] = W[0] + (size_t)i * 40; /* overlapping row windows: a different W for each */
    }
    ac_cpu_linear_batch(&ctx, B, M, 31, 40, As, LDA, Wb, Cs, LDC);
    for (int i = 0; i < B; i++) {
        for (int m = 0; m < M[i]; m++)
            assert_dot_rows(Wb[i], 31, 40, As[i] + m * LDA, 0.0f, NULL, Cs[i] + m * LDC);
        free((void *)As[i]);
        free(Cs[i]);
    }

    /* linear, M = 3 rows of x (lda 41) against W[0], beta 0.5 over C (ldc 310) */
    float A[3 * 41], C[3 * 310], before[3 * 310];
    fill_uniform(A, sizeof A / sizeof *A, 30);
    fill_uniform(C, sizeof C / sizeof *C, 31);
    memcpy(before, C, sizeof C);
    ac_cpu_linear(&ctx, 3, rows[0], cols[0], A, 41, W[0], 0.5f, C, 310);
    for (int m = 0; m < 3; m++)
        assert_dot_rows(W[0], rows[0], cols[0], A + m * 41, 0.5f, before + m * 310, C + m * 310);
    for (int i = 0; i < N; i++) {
        free((void *)W[i]);
        free((void *)x[i]);
        free(y[i]);
    }
}

/* The CPU's GEMMs cut into one slab per thread, against sums in double: linear split by
 * rows (M >= N) and by columns (N > M), and linear_backward's dA (beta 0.5) and dW (+=),
 * each past the size that splits, with odd sizes and leading dimensions wider than rows. */
static void assert_close(const char *what, int i, double got, double want, double size)
{
    if (fabs(got - want) > 1e-6 * size + 1e-6)
        fail_msg("%s element %d: %.9g, want %.9g", what, i, got, want);
}

static void test_gemm_split_against_double(void **state)
{
    (void)state;
    enum { K = 67, LDA = 70 };
    int shapes[2][2] = {{301, 53}, {19, 1001}}; /* M x N: by rows, by columns */
    ac_kctx ctx = {0};
    for (int s = 0; s < 2; s++) {
        int M = shapes[s][0], N = shapes[s][1], ldc = N + 3;
        assert_true((long)M * N * K >= 1 << 20);
        float *A = malloc((size_t)M * LDA * sizeof *A), *W = malloc((size_t)N * K * sizeof *W);
        float *C = malloc((size_t)M * ldc * sizeof *C), *dA = malloc((size_t)M * LDA * sizeof *dA);
        float *dA0 = malloc((size_t)M * LDA * sizeof *dA0), *dW = malloc((size_t)N * K * sizeof *dW);
        float *dW0 = malloc((size_t)N * K * sizeof *dW0);
        assert_true(A && W && C && dA && dA0 && dW && dW0);
        fill_uniform(A, (size_t)M * LDA, 50 + (uint64_t)s);
        fill_uniform(W, (size_t)N * K, 60 + (uint64_t)s);
        fill_uniform(dA0, (size_t)M * LDA, 70 + (uint64_t)s);
        fill_uniform(dW0, (size_t)N * K, 80 + (uint64_t)s);
        memcpy(dA, dA0, (size_t)M * LDA * sizeof *dA);
        memcpy(dW, dW0, (size_t)N * K * sizeof *dW);
        ac_cpu_linear(&ctx, M, N, K, A, LDA, W, 0.0f, C, ldc);
        for (int m = 0; m < M; m++)
            assert_dot_rows(W, N, K, A + (size_t)m * LDA, 0.0f, NULL, C + (size_t)m * ldc);
        /* backward with C as dC: dA = 0.5 dA0 + dC W, dW = dW0 + dC^T A */
        ac_cpu_linear_backward(&ctx, M, N, K, A, LDA, W, C, ldc, 0.5f, dA, LDA, dW);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                double want = 0.5 * dA0[(size_t)m * LDA + k], size = fabs(want);
                for (int n = 0; n < N; n++) {
                    double t = (double)C[(size_t)m * ldc + n] * W[(size_t)n * K + k];
                    want += t;
                    size += fabs(t);
                }
                assert_close("dA", m * K + k, dA[(size_t)m * LDA + k], want, size);
            }
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double want = dW0[(size_t)n * K + k], size = fabs(want);
                for (int m = 0; m < M; m++) {
                    double t = (double)C[(size_t)m * ldc + n] * A[(size_t)m * LDA + k];
                    want += t;
                    size += fabs(t);
                }
                assert_close("dW", n * K + k, dW[(size_t)n * K + k], want, size);
            }
        free(A), free(W), free(C), free(dA), free(dA0), free(dW), free(dW0);
    }
}

/* linear_batch_backward against sums in double: three products (150, 0 and 41 rows, past
 * the size that runs them on separate threads) with dA and dW (+=), then one product (the
 * path that splits it among the threads) with dW only, then the three with dA only and
 * the forward linear_batch (their rows end to end split among the threads, product 0 cut
 * between two). */
static void assert_product_backward(int M, int N, int K, const float *A, int lda, const float *W, const float *dC,
                                    int lddc, const float *dA, int ldda, const float *dW0, const float *dW)
{
    for (int m = 0; dA && m < M; m++)
        for (int k = 0; k < K; k++) {
            double want = 0.0, size = 0.0;
            for (int n = 0; n < N; n++) {
                double t = (double)dC[(size_t)m * lddc + n] * W[(size_t)n * K + k];
                want += t;
                size += fabs(t);
            }
            assert_close("batch dA", m * K + k, dA[(size_t)m * ldda + k], want, size);
        }
    for (int n = 0; dW && n < N; n++)
        for (int k = 0; k < K; k++) {
            double want = dW0[(size_t)n * K + k], size = fabs(want);
            for (int m = 0; m < M; m++) {
                double t = (double)dC[(size_t)m * lddc + n] * A[(size_t)m * lda + k];
                want += t;
                size += fabs(t);
            }
            assert_close("batch dW", n * K + k, dW[(size_t)n * K + k], want, size);
        }
}

static void test_linear_batch_backward_against_double(void **state)
{
    (void)state;
    enum { B = 3, N = 29, K = 37, LDA = 40, LDDC = 31, LDDA = 39 };
    int M[B] = {150, 0, 41};
    ac_kctx ctx = {0};
    float *A[B], *W[B], *dC[B], *dA[B], *dW[B], *dW0[B];
    for (int i = 0; i < B; i++) {
        size_t rows = (size_t)M[i] + 1;
        A[i] = malloc(rows * LDA * sizeof *A[i]), dC[i] = malloc(rows * LDDC * sizeof *dC[i]);
        dA[i] = malloc(rows * LDDA * sizeof *dA[i]), W[i] = malloc((size_t)N * K * sizeof *W[i]);
        dW[i] = malloc((size_t)N * K * sizeof *dW[i]), dW0[i] = malloc((size_t)N * K * sizeof *dW0[i]);
        assert_true(A[i] && dC[i] && dA[i] && W[i] && dW[i] && dW0[i]);
        fill_uniform(A[i], rows * LDA, 300 + (uint64_t)i);
        fill_uniform(dC[i], rows * LDDC, 310 + (uint64_t)i);
        fill_uniform(W[i], (size_t)N * K, 320 + (uint64_t)i);
        fill_uniform(dW0[i], (size_t)N * K, 330 + (uint64_t)i);
        memcpy(dW[i], dW0[i], (size_t)N * K * sizeof *dW[i]);
    }
    assert_true((long)(M[0] + M[2]) * N * K >= 1 << 17);
    ac_cpu_linear_batch_backward(&ctx, B, M, N, K, (const float *const *)A, LDA, (const float *const *)W,
                                 (const float *const *)dC, LDDC, dA, LDDA, dW);
    for (int i = 0; i < B; i++)
        assert_product_backward(M[i], N, K, A[i], LDA, W[i], dC[i], LDDC, dA[i], LDDA, dW0[i], dW[i]);
    memcpy(dW0[0], dW[0], (size_t)N * K * sizeof *dW[0]);
    ac_cpu_linear_batch_backward(&ctx, 1, M, N, K, (const float *const *)A, LDA, NULL, (const float *const *)dC,
                                 LDDC, NULL, LDDA, dW);
    assert_product_backward(M[0], N, K, A[0], LDA, W[0], dC[0], LDDC, NULL, LDDA, dW0[0], dW[0]);
    /* dA only: the rows end to end split among the threads, product 0 cut between them */
    for (int i = 0; i < B; i++)
        fill_uniform(dA[i], ((size_t)M[i] + 1) * LDDA, 340 + (uint64_t)i);
    ac_cpu_linear_batch_backward(&ctx, B, M, N, K, NULL, LDA, (const float *const *)W, (const float *const *)dC, LDDC,
                                 dA, LDDA, NULL);
    for (int i = 0; i < B; i++)
        assert_product_backward(M[i], N, K, A[i], LDA, W[i], dC[i], LDDC, dA[i], LDDA, NULL, NULL);
    /* the forward, split the same way: C_i = A_i W_i^T (into dC's buffers) */
    ac_cpu_linear_batch(&ctx, B, M, N, K, (const float *const *)A, LDA, (const float *const *)W, dC, LDDC);
    for (int i = 0; i < B; i++)
        for (int m = 0; m < M[i]; m++)
            for (int n = 0; n < N; n++) {
                double want = 0.0, size = 0.0;
                for (int k = 0; k < K; k++) {
                    double t = (double)A[i][(size_t)m * LDA + k] * W[i][(size_t)n * K + k];
                    want += t;
                    size += fabs(t);
                }
                assert_close("batch C", m * N + n, dC[i][(size_t)m * LDDC + n], want, size);
            }
    for (int i = 0; i < B; i++)
        free(A[i]), free(W[i]), free(dC[i]), free(dA[i]), free(dW[i]), free(dW0[i]);
}

/* The CPU's prompt scan (the transposed one: a block of 16 channels in registers, then
 * the last P % 16) against the recurrence in double, from a non-zero state: y and the
 * final state of T = 20 steps, P = 20 channels in two heads of one group. */
static void test_ssd_scan_against_double(void **state)
{
    (void)state;
    enum { T = 20, H = 2, P = 20, N = 5, G = 1, LDX = H * P + 3, LDBC = N + 2 };
    float x[T * LDX], Bm[T * LDBC], Cm[T * LDBC], dt[T * H], A[H] = {-0.7f, -1.9f}, Dskip[H] = {0.3f, -0.6f};
    float st[H * P * N], y[T * H * P];
    double s[H][P][N];
    fill_uniform(x, T * LDX, 400);
    fill_uniform(Bm, T * LDBC, 401);
    fill_uniform(Cm, T * LDBC, 402);
    fill_uniform(st, H * P * N, 403);
    for (int i = 0; i < T * H; i++)
        dt[i] = 0.05f + 0.2f * (float)(i % 7) / 7.0f;
    for (int h = 0; h < H; h++)
        for (int p = 0; p < P; p++)
            for (int n = 0; n < N; n++)
                s[h][p][n] = st[(h * P + p) * N + n];
    ac_kctx ctx = {0};
    ac_cpu_ssd_scan(&ctx, T, H, P, N, G, x, LDX, Bm, Cm, LDBC, dt, A, Dskip, st, y, H * P);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double d = dt[t * H + h], decay = exp(d * A[h]);
            for (int p = 0; p < P; p++) {
                double xv = x[t * LDX + h * P + p], want = Dskip[h] * xv, size = fabs(want);
                for (int n = 0; n < N; n++) {
                    s[h][p][n] = decay * s[h][p][n] + d * xv * Bm[t * LDBC + n];
                    want += s[h][p][n] * Cm[t * LDBC + n];
                    size += fabs(s[h][p][n] * Cm[t * LDBC + n]);
                }
                assert_close("scan y", (t * H + h) * P + p, y[(t * H + h) * P + p], want, size);
            }
        }
    for (int h = 0; h < H; h++)
        for (int p = 0; p < P; p++)
            for (int n = 0; n < N; n++)
                assert_close("scan state", (h * P + p) * N + n, st[(h * P + p) * N + n], s[h][p][n], fabs(s[h][p][n]));
}

/* The CPU's scan backward (chunks of AC_CPU_SSD_STATE_INTERVAL steps in matrix form, the
 * heads of a group in units run by threads) against central differences of the
 * recurrence in double, for the loss sum(y o R): dx, dB, dC, ddt (overwritten) and dA,
 * dD (+=). Cases: several chunks with a short last one, from a start state; one group
 * split between two units (two threads), kept whole (one thread); two groups, T a
 * multiple of the chunk, no start state; one short chunk of three heads a group (no
 * split) on the calling thread. Every entry of dB, dC, ddt, dA and dD is checked and
 * every fifth of dx. */
typedef struct {
    int T, H, P, N, G, has_state0;
    int ldx, ldbc, lddy;
    const double *x, *B, *C, *dt, *A, *D, *s0, *R;
} ssd_reference;

static double ssd_reference_loss(const ssd_reference *r)
{
    int H = r->H, P = r->P, N = r->N, per = r->H / r->G;
    double *s = calloc((size_t)H * P * N, sizeof *s), loss = 0.0;
    assert_non_null(s);
    for (int i = 0; r->has_state0 && i < H * P * N; i++)
        s[i] = r->s0[i];
    for (int t = 0; t < r->T; t++)
        for (int h = 0; h < H; h++) {
            const double *Bt = r->B + (size_t)t * r->ldbc + (size_t)(h / per) * N;
            const double *Ct = r->C + (size_t)t * r->ldbc + (size_t)(h / per) * N;
            double d = r->dt[t * H + h], decay = exp(d * r->A[h]);
            for (int p = 0; p < P; p++) {
                double xv = r->x[(size_t)t * r->ldx + h * P + p], y = r->D[h] * xv;
                double *sp = s + ((size_t)h * P + p) * N;
                for (int n = 0; n < N; n++) {
                    sp[n] = decay * sp[n] + d * xv * Bt[n];
                    y += sp[n] * Ct[n];
                }
                loss += y * r->R[(size_t)t * r->lddy + h * P + p];
            }
        }
    free(s);
    return loss;
}

/* dloss/dv[i] by a central difference; v is one of the reference's inputs */
static double ssd_reference_grad(const ssd_reference *r, double *v, size_t i)
{
    const double eps = 1e-4;
    double keep = v[i];
    v[i] = keep + eps;
    double up = ssd_reference_loss(r);
    v[i] = keep - eps;
    double down = ssd_reference_loss(r);
    v[i] = keep;
    return (up - down) / (2.0 * eps);
}

static double *to_double(const float *f, size_t n)
{
    double *d = malloc(n * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

/* got[i * stride] for i in the rows and columns given against the reference's gradient of
 * v[i * vstride], within 1e-4 of the largest such gradient */
static void assert_grads(const char *what, const ssd_reference *r, double *v, const float *got, int rows, int cols,
                         int ld_got, int ld_v, int every)
{
    double *want = malloc((size_t)rows * cols * sizeof *want), scale = 0.0;
    assert_non_null(want);
    for (int i = 0; i < rows * cols; i += every) {
        want[i] = ssd_reference_grad(r, v, (size_t)(i / cols) * ld_v + i % cols);
        scale = fmax(scale, fabs(want[i]));
    }
    assert_true(scale > 0.0);
    for (int i = 0; i < rows * cols; i += every) {
        double g = got[(size_t)(i / cols) * ld_got + i % cols];
        if (fabs(g - want[i]) > 1e-4 * scale)
            fail_msg("%s element %d: %.9g, want %.9g (largest %.3g)", what, i, g, want[i], scale);
    }
    free(want);
}

static void check_ssd_backward(int T, int H, int P, int N, int G, int has_state0, int threads)
{
    int ldx = H * P + 3, ldbc = G * N + 2, lddy = H * P + 1, lddx = H * P + 2, lddbc = G * N + 1;
    ac_backend be = ac_cpu_backend;
    float *x = malloc((size_t)T * ldx * sizeof *x), *B = malloc((size_t)T * ldbc * sizeof *B);
    float *C = malloc((size_t)T * ldbc * sizeof *C), *dt = malloc((size_t)T * H * sizeof *dt);
    float *A = malloc((size_t)H * sizeof *A), *D = malloc((size_t)H * sizeof *D);
    float *s0 = malloc((size_t)H * P * N * sizeof *s0), *R = malloc((size_t)T * lddy * sizeof *R);
    float *y = malloc((size_t)T * H * P * sizeof *y);
    float *states = malloc(ac_k_ssd_states_floats(&be, T, H, P, N) * sizeof *states);
    float *work = malloc(ac_k_ssd_backward_work_floats(&be, T, H, P, N) * sizeof *work);
    float *dx = malloc((size_t)T * lddx * sizeof *dx), *dB = malloc((size_t)T * lddbc * sizeof *dB);
    float *dC = malloc((size_t)T * lddbc * sizeof *dC), *ddt = malloc((size_t)T * H * sizeof *ddt);
    float *dA = malloc((size_t)H * sizeof *dA), *dD = malloc((size_t)H * sizeof *dD);
    assert_true(x && B && C && dt && A && D && s0 && R && y && states && work && dx && dB && dC && ddt && dA && dD);
    fill_uniform(x, (size_t)T * ldx, 500);
    fill_uniform(B, (size_t)T * ldbc, 501);
    fill_uniform(C, (size_t)T * ldbc, 502);
    fill_uniform(s0, (size_t)H * P * N, 503);
    fill_uniform(R, (size_t)T * lddy, 504);
    fill_uniform(D, (size_t)H, 505);
    for (int i = 0; i < T * H; i++)
        dt[i] = 0.02f + 0.3f * (float)(i % 11) / 11.0f;
    for (int h = 0; h < H; h++) {
        A[h] = -0.3f - 0.9f * (float)h;
        dA[h] = 0.25f, dD[h] = -0.5f;
    }
    ac_kctx ctx = {0};
    omp_set_num_threads(threads);
    const float *start = has_state0 ? s0 : NULL;
    ac_cpu_ssd_scan_save(&ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, start, states, y, H * P);
    ac_cpu_ssd_scan_backward(&ctx, T, H, P, N, G, x, ldx, B, C, ldbc, dt, A, D, start, states, R, lddy, dx, lddx,
                             dB, dC, lddbc, ddt, dA, dD, work);
    omp_set_num_threads(2);
    for (int h = 0; h < H; h++)
        dA[h] -= 0.25f, dD[h] += 0.5f;
    ssd_reference r = {.T = T, .H = H, .P = P, .N = N, .G = G, .has_state0 = has_state0,
                       .ldx = ldx, .ldbc = ldbc, .lddy = lddy};
    double *vx = to_double(x, (size_t)T * ldx), *vB = to_double(B, (size_t)T * ldbc);
    double *vC = to_double(C, (size_t)T * ldbc), *vdt = to_double(dt, (size_t)T * H), *vA = to_double(A, H);
    double *vD = to_double(D, H), *vs0 = to_double(s0, (size_t)H * P * N), *vR = to_double(R, (size_t)T * lddy);
    r.x = vx, r.B = vB, r.C = vC, r.dt = vdt, r.A = vA, r.D = vD, r.s0 = vs0, r.R = vR;
    assert_grads("dx", &r, vx, dx, T, H * P, lddx, ldx, 5);
    assert_grads("dB", &r, vB, dB, T, G * N, lddbc, ldbc, 1);
    assert_grads("dC", &r, vC, dC, T, G * N, lddbc, ldbc, 1);
    assert_grads("ddt", &r, vdt, ddt, T, H, H, H, 1);
    assert_grads("dA", &r, vA, dA, 1, H, H, H, 1);
    assert_grads("dD", &r, vD, dD, 1, H, H, H, 1);
    free(vx), free(vB), free(vC), free(vdt), free(vA), free(vD), free(vs0), free(vR);
    free(x), free(B), free(C), free(dt), free(A), free(D), free(s0), free(R), free(y), free(states), free(work);
    free(dx), free(dB), free(dC), free(ddt), free(dA), free(dD);
}

static void test_ssd_scan_backward_against_double(void **state)
{
    (void)state;
    assert_true(70 > 2 * AC_CPU_SSD_STATE_INTERVAL && 64 % AC_CPU_SSD_STATE_INTERVAL == 0);
    check_ssd_backward(70, 4, 20, 6, 1, 1, 2); /* a group in two units, three chunks */
    check_ssd_backward(70, 4, 20, 6, 1, 1, 1); /* the same group as one unit */
    check_ssd_backward(64, 4, 16, 8, 2, 0, 2); /* two groups, no start state */
    check_ssd_backward(20, 6, 7, 4, 2, 1, 2);  /* one short chunk, three heads a group */
}

/* The CPU's causal conv + SiLU against a direct double computation, over blocks of
 * channels run in parallel (T C past the size that splits): the outputs and the advanced
 * state of a 100-step call after a non-zero state, then a 1-step call (T < K - 1); the
 * backward's dx, dw (+=) and dbias (+=) of the first call. */
static double silu_d(double v) { return v / (1.0 + exp(-v)); }

static void test_conv1d_against_double(void **state)
{
    (void)state;
    enum { T = 100, C = 203, K = 4, S = K - 1, LDX = 207 };
    float *x = malloc((size_t)T * LDX * sizeof *x), *y = malloc((size_t)T * C * sizeof *y);
    float w[C * K], bias[C], st[C * S], st0[C * S], dy[T * C], dw[C * K], db[C];
    float *dx = malloc((size_t)T * C * sizeof *dx);
    double pre[T][C];
    assert_true(x && y && dx);
    fill_uniform(x, (size_t)T * LDX, 90);
    fill_uniform(w, C * K, 91);
    fill_uniform(bias, C, 92);
    fill_uniform(st0, C * S, 93);
    fill_uniform(dy, T * C, 94);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    memcpy(st, st0, sizeof st);
    ac_kctx ctx = {0};
    ac_cpu_conv1d_silu(&ctx, T, C, K, x, LDX, w, bias, st, y, C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double v = bias[c], size = fabs(v);
            for (int k = 0; k < K; k++) {
                int src = t - S + k;
                double in = src >= 0 ? x[(size_t)src * LDX + c] : st0[c * S + S + src];
                v += (double)w[c * K + k] * in;
                size += fabs((double)w[c * K + k] * in);
            }
            pre[t][c] = v;
            assert_close("y", t * C + c, y[(size_t)t * C + c], silu_d(v), size);
        }
    for (int c = 0; c < C; c++)
        for (int k = 0; k < S; k++)
            assert_true(st[c * S + k] == x[(size_t)(T - S + k) * LDX + c]);
    /* one more step: the state shifts by one and takes x's row */
    float one[C], before[C * S];
    memcpy(before, st, sizeof st);
    ac_cpu_conv1d_silu(&ctx, 1, C, K, x, LDX, w, bias, st, one, C);
    for (int c = 0; c < C; c++) {
        double v = bias[c];
        for (int k = 0; k < S; k++)
            v += (double)w[c * K + k] * before[c * S + k];
        v += (double)w[c * K + S] * x[c];
        assert_close("decode y", c, one[c], silu_d(v), 10.0);
        assert_true(st[c * S + 0] == before[c * S + 1] && st[c * S + 1] == before[c * S + 2] && st[c * S + 2] == x[c]);
    }
    ac_cpu_conv1d_silu_backward(&ctx, T, C, K, x, LDX, w, bias, st0, dy, C, dx, C, dw, db);
    for (int c = 0; c < C; c++) {
        double dbias = 0.0, dwk[K] = {0};
        for (int t = 0; t < T; t++) {
            double v = pre[t][c], sg = 1.0 / (1.0 + exp(-v)), dpre = dy[t * C + c] * sg * (1.0 + v * (1.0 - sg));
            dbias += dpre;
            for (int k = 0; k < K; k++) {
                int src = t - S + k;
                dwk[k] += dpre * (src >= 0 ? x[(size_t)src * LDX + c] : st0[c * S + S + src]);
            }
        }
        assert_close("dbias", c, db[c], dbias, 4.0 * T);
        for (int k = 0; k < K; k++)
            assert_close("dw", c * K + k, dw[c * K + k], dwk[k], 4.0 * T);
        for (int t = 0; t < T; t++) {
            double want = 0.0;
            for (int k = t + S - T + 1 > 0 ? t + S - T + 1 : 0; k < K; k++) { /* rows past T give none */
                double v = pre[t + S - k][c], sg = 1.0 / (1.0 + exp(-v));
                want += (double)w[c * K + k] * dy[(t + S - k) * C + c] * sg * (1.0 + v * (1.0 - sg));
            }
            assert_close("dx", t * C + c, dx[(size_t)t * C + c], want, 8.0);
        }
    }
    free(x), free(y), free(dx);
}

/* With no argument: every backend that can run here (the CPU at least). With a backend's
 * name: that one alone, exit code 77 (a skip) when this machine cannot run it. */
int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_cpu_huge_buffers),
        cmocka_unit_test(test_every_op_has_a_case),
        cmocka_unit_test(test_backends_match_reference),
        cmocka_unit_test(test_dispatchers),
        cmocka_unit_test(test_harness_catches_a_wrong_op),
        cmocka_unit_test(test_gemv_against_double),
        cmocka_unit_test(test_moe_token_against_double),
        cmocka_unit_test(test_linear_bf16_against_double),
        cmocka_unit_test(test_moe_token_bf16_against_double),
        cmocka_unit_test(test_gemm_split_against_double),
        cmocka_unit_test(test_linear_batch_backward_against_double),
        cmocka_unit_test(test_conv1d_against_double),
        cmocka_unit_test(test_ssd_scan_against_double),
        cmocka_unit_test(test_ssd_scan_backward_against_double),
    };
    const struct CMUnitTest one_backend[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_backends_match_reference),
        cmocka_unit_test(test_dispatchers),
    };
#ifdef AC_TEST_CUDA_EMU
    emulated = ac_cuda_emulated_backend();
    if (ac_backend_register(emulated) != AC_OK)
        return 1;
#endif
    if (argc < 2)
        return cmocka_run_group_tests(all, NULL, NULL);
    char why[256];
    if (!ac_backend_select(argv[1], why, sizeof why)) {
        printf("%s\n", why);
        return ac_backend_find(argv[1]) ? 77 : 1;
    }
    only = argv[1];
    return cmocka_run_group_tests(one_backend, NULL, NULL);
}
