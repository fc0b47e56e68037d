/* Attention backward against central finite differences: one attention layer (hidden
 * 16, 4 heads, 2 KV heads, head_dim 4), a packed batch of two sequences (5 and 9 tokens)
 * in training mode (no caches), loss = sum(out * R) so that dL/dout = R. Also: the
 * training forward equals the cached inference forward, grad == NULL leaves dxn alone,
 * and gradients accumulate. And the kernel on a sequence long enough for several tiles
 * of query rows and keys (150 tokens: 64 + 64 + 22), padded rows, against a direct
 * double-precision backward written out here; the forward kernel across query tiles and
 * key blocks behind a long cache, against a direct double-precision forward. */
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

#include "grad_check.h"
#include "runtime/runtime_internal.h"

/* f32 forward: the loss carries rounding noise of ~1e-6, which eps 1e-3 would turn into
 * errors of ~5e-4 in the quotient (measured); the attention is smooth, so eps 1e-2 keeps
 * the truncation error small (measured errors <= 2.5e-5 absolute on gradients of 1e-3..0.3). */
#define FD_EPS 1e-2f
#define FD_ATOL 5e-5
#define FD_RTOL 3e-3
#define SAMPLES 40

enum { N_SEQS = 2 };
static const int seq_len[N_SEQS] = {5, 9};

typedef struct {
    ac_model *model, *grads; /* grads: a zero model whose layer 0 receives weight gradients */
    ac_runtime *rt;
    int offset[N_SEQS], len[N_SEQS];
    ac_seqs seqs;
    int T, D;
    float *xn, *R, *out, *dxn;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    ac_arch a = {.vocab = 8, .hidden = 16, .norm_eps = 1e-5f, .chunk_size = 8, .time_step_min = 0.0f};
    if (!f || ac_arch_alloc_layers(&a, 1) != AC_OK)
        return -1;
    a.layers[0] = (ac_block_dims){.kind = AC_BLOCK_ATTENTION, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 4};
    if (ac_model_create(&a, &f->model) != AC_OK || ac_model_create(&a, &f->grads) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return -1;
    }
    ac_arch_free(&a);
    for (size_t i = 0; i < ac_model_param_count(f->model); i++) {
        const ac_param *p = ac_model_param(f->model, i);
        gc_fill(p->data, p->count, -0.5f, 0.5f, 100 + i);
    }
    f->D = 16;
    for (int s = 0; s < N_SEQS; s++) {
        f->offset[s] = f->T;
        f->len[s] = seq_len[s];
        f->T += seq_len[s];
    }
    f->seqs = (ac_seqs){.n = N_SEQS, .total = f->T, .offset = f->offset, .len = f->len, .caches = NULL};
    size_t n = (size_t)f->T * f->D;
    f->xn = malloc(n * sizeof(float));
    f->R = malloc(n * sizeof(float));
    f->out = malloc(n * sizeof(float));
    f->dxn = malloc(n * sizeof(float));
    if (!f->xn || !f->R || !f->out || !f->dxn || ac_runtime_create(f->model, &f->rt) != AC_OK ||
        ac_runtime_reserve_training(f->rt, f->T, N_SEQS) != AC_OK)
        return -1;
    gc_fill(f->xn, n, -1.0f, 1.0f, 1);
    gc_fill(f->R, n, -1.0f, 1.0f, 2);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ac_runtime_free(f->rt);
    ac_model_free(f->model);
    ac_model_free(f->grads);
    free(f->xn);
    free(f->R);
    free(f->out);
    free(f->dxn);
    free(f);
    return 0;
}

static void forward(fixture *f, const ac_seqs *seqs, float *out)
{
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_attention_ops.forward(&c, 0, seqs, f->xn, NULL, out);
}

static void backward(fixture *f, ac_layer_weights *grad)
{
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_attention_ops.backward(&c, 0, &f->seqs, f->xn, NULL, f->R, f->dxn, grad, NULL);
}

static double loss(void *ctx)
{
    fixture *f = ctx;
    forward(f, &f->seqs, f->out);
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)f->T * f->D; i++)
        sum += (double)f->out[i] * f->R[i];
    return sum;
}

static void zero_grads(fixture *f)
{
    size_t n;
    float *arena = ac_model_arena(f->grads, &n);
    memset(arena, 0, n * sizeof *arena);
}

static void test_gradients(void **state)
{
    fixture *f = *state;
    const ac_layer_weights *w = &f->model->layers[0];
    const ac_layer_weights *g = &f->grads->layers[0];
    size_t D = (size_t)f->D, nq = 16, nkv = 8;
    zero_grads(f);
    backward(f, &f->grads->layers[0]);
    struct {
        const char *name;
        float *x;
        const float *g;
        size_t n;
    } checks[] = {
        {"dxn", f->xn, f->dxn, (size_t)f->T * D},
        {"q_proj", w->q_proj, g->q_proj, nq * D},
        {"k_proj", w->k_proj, g->k_proj, nkv * D},
        {"v_proj", w->v_proj, g->v_proj, nkv * D},
        {"o_proj", w->o_proj, g->o_proj, D * nq},
    };
    int failed = 0;
    for (size_t c = 0; c < sizeof checks / sizeof *checks; c++) {
        gc_result r = gc_check(checks[c].name, checks[c].x, checks[c].n, checks[c].g, SAMPLES, loss, f, FD_EPS,
                               FD_ATOL, FD_RTOL);
        assert_true(r.checked >= SAMPLES);
        failed += r.failed;
    }
    assert_int_equal(failed, 0);
}

/* The training forward (caches NULL) against the inference forward from fresh caches. */
static void test_training_forward_matches_cached(void **state)
{
    fixture *f = *state;
    size_t n = (size_t)f->T * f->D;
    float *cached = malloc(n * sizeof *cached);
    ac_cache *caches[N_SEQS];
    assert_non_null(cached);
    for (int s = 0; s < N_SEQS; s++) {
        assert_int_equal(ac_cache_create(f->model, &caches[s]), AC_OK);
        assert_int_equal(ac_cache_reserve(caches[s], seq_len[s]), AC_OK);
    }
    ac_cache_layers *views[N_SEQS];
    for (int s = 0; s < N_SEQS; s++)
        views[s] = &caches[s]->l;
    ac_seqs with_caches = f->seqs;
    with_caches.caches = views;
    forward(f, &with_caches, cached);
    forward(f, &f->seqs, f->out);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)cached[i] - f->out[i]));
    printf("  training vs cached forward: max |diff| %.3g\n", worst);
    assert_true(worst <= 1e-6);
    /* attention has no masks of its own: handing it some changes nothing */
    float ones[16];
    for (int i = 0; i < 16; i++)
        ones[i] = 0.5f;
    ac_block_masks masks = {.mamba_heads = ones, .experts = ones, .ffn = ones, .shared_ffn = ones};
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_attention_ops.forward(&c, 0, &f->seqs, f->xn, &masks, cached);
    assert_memory_equal(cached, f->out, n * sizeof *cached);
    for (int s = 0; s < N_SEQS; s++)
        ac_cache_free(caches[s]);
    free(cached);
}

static void test_grad_null_and_accumulation(void **state)
{
    fixture *f = *state;
    size_t n = (size_t)f->T * f->D, count;
    float *dxn = malloc(n * sizeof *dxn);
    assert_non_null(dxn);
    zero_grads(f);
    backward(f, &f->grads->layers[0]);
    memcpy(dxn, f->dxn, n * sizeof *dxn);
    float *arena = ac_model_arena(f->grads, &count);
    float *once = malloc(count * sizeof *once);
    assert_non_null(once);
    memcpy(once, arena, count * sizeof *once);
    double norm = 0.0;
    for (size_t i = 0; i < count; i++)
        norm += fabs(once[i]);
    assert_true(norm > 0.0);

    backward(f, NULL);
    assert_memory_equal(dxn, f->dxn, n * sizeof *dxn);
    for (size_t i = 0; i < count; i++)
        assert_true(arena[i] == once[i]); /* grad == NULL touched nothing */

    backward(f, &f->grads->layers[0]);
    assert_memory_equal(dxn, f->dxn, n * sizeof *dxn);
    for (size_t i = 0; i < count; i++)
        assert_true(arena[i] == 2.0f * once[i]);
    free(once);
    free(dxn);
}

/* ---- the kernel across tiles, against a direct backward in double ---- */

enum { LT = 150, LH = 4, LKV = 2, LHD = 8, LDQ = LH * LHD + 3, LDKV = LKV * LHD + 1 };

static void reference_backward(const float *q, const float *k, const float *v, const float *g, double scale,
                               double *out, double *dq, double *dk, double *dv)
{
    static double p[LT], dp[LT];
    memset(dk, 0, sizeof(double) * LT * LDKV);
    memset(dv, 0, sizeof(double) * LT * LDKV);
    for (int h = 0; h < LH; h++) {
        int kv = h / (LH / LKV);
        for (int i = 0; i < LT; i++) {
            const float *qi = q + i * LDQ + h * LHD, *gi = g + i * LDQ + h * LHD;
            double max = -INFINITY, sum = 0, delta = 0;
            for (int j = 0; j <= i; j++) {
                double dot = 0;
                for (int c = 0; c < LHD; c++)
                    dot += (double)qi[c] * k[j * LDKV + kv * LHD + c];
                p[j] = dot * scale;
                max = fmax(max, p[j]);
            }
            for (int j = 0; j <= i; j++)
                sum += (p[j] = exp(p[j] - max));
            for (int c = 0; c < LHD; c++) {
                double o = 0;
                for (int j = 0; j <= i; j++)
                    o += p[j] / sum * v[j * LDKV + kv * LHD + c];
                out[i * LDQ + h * LHD + c] = o;
                delta += gi[c] * o;
            }
            for (int j = 0; j <= i; j++) {
                p[j] /= sum;
                dp[j] = 0;
                for (int c = 0; c < LHD; c++)
                    dp[j] += (double)gi[c] * v[j * LDKV + kv * LHD + c];
                double ds = p[j] * (dp[j] - delta) * scale;
                for (int c = 0; c < LHD; c++) {
                    dq[i * LDQ + h * LHD + c] += ds * k[j * LDKV + kv * LHD + c];
                    dk[j * LDKV + kv * LHD + c] += ds * qi[c];
                    dv[j * LDKV + kv * LHD + c] += p[j] * gi[c];
                }
            }
        }
    }
}

static void assert_close_rows(const char *what, const float *got, const double *want, int rows, int ld, int width)
{
    double scale = 0, worst = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < width; c++)
            scale = fmax(scale, fabs(want[r * ld + c]));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < width; c++)
            worst = fmax(worst, fabs(got[r * ld + c] - want[r * ld + c]));
    if (worst > 1e-5 * scale + 1e-7)
        fail_msg("%s: largest difference %.3g against a largest value of %.3g", what, worst, scale);
}

static void test_kernel_across_tiles(void **state)
{
    (void)state;
    float *q = malloc(sizeof(float) * LT * LDQ), *g = malloc(sizeof(float) * LT * LDQ);
    float *k = malloc(sizeof(float) * LT * LDKV), *v = malloc(sizeof(float) * LT * LDKV);
    float *out = malloc(sizeof(float) * LT * LDQ), *dq = malloc(sizeof(float) * LT * LDQ);
    float *dk = malloc(sizeof(float) * LT * LDKV), *dv = malloc(sizeof(float) * LT * LDKV);
    float *stats = malloc(sizeof(float) * LT * 2 * LH);
    double *rout = calloc(LT * LDQ, sizeof(double)), *rdq = calloc(LT * LDQ, sizeof(double));
    double *rdk = calloc(LT * LDKV, sizeof(double)), *rdv = calloc(LT * LDKV, sizeof(double));
    int threads = omp_get_max_threads(), more = LKV + 1 > threads ? LKV + 1 : threads;
    size_t bytes = ac_k_attention_backward_workspace(more, LT);
    void *ws = malloc(bytes);
    assert_true(q && g && k && v && out && dq && dk && dv && stats && rout && rdq && rdk && rdv && ws);
    /* scores of a few units: peaked rows and flat ones */
    gc_fill(q, LT * LDQ, -2.0f, 2.0f, 7);
    gc_fill(g, LT * LDQ, -1.0f, 1.0f, 8);
    gc_fill(k, LT * LDKV, -2.0f, 2.0f, 9);
    gc_fill(v, LT * LDKV, -1.0f, 1.0f, 10);
    float scale = 1.0f / sqrtf((float)LHD);
    ac_kctx ctx = {.workspace = ws, .workspace_bytes = bytes};
    reference_backward(q, k, v, g, scale, rout, rdq, rdk, rdv);
    /* the forward's output and log normalisers, from K and V in the cache layout */
    float *kc = malloc(sizeof(float) * LT * LKV * LHD), *vc = malloc(sizeof(float) * LT * LKV * LHD);
    assert_true(kc && vc);
    for (int j = 0; j < LT; j++)
        for (int x = 0; x < LKV * LHD; x++) {
            kc[((size_t)(x / LHD) * LT + j) * LHD + x % LHD] = k[j * LDKV + x];
            vc[((size_t)(x / LHD) * LT + j) * LHD + x % LHD] = v[j * LDKV + x];
        }
    ac_k_attention(&ctx, LT, 0, LH, LKV, LHD, q, LDQ, kc, vc, LT, scale, out, LDQ, stats, 2 * LH);
    assert_close_rows("out", out, rout, LT, LDQ, LH * LHD);
    free(kc), free(vc);
    /* one pass per KV head (at least as many KV heads as threads: one thread here), then
     * the two passes (more threads than KV heads) */
    for (int pass = 0; pass < 2; pass++) {
        omp_set_num_threads(pass ? more : 1);
        for (int i = 0; i < LT * LDKV; i++) /* every element must be overwritten */
            dk[i] = dv[i] = 1e6f;
        ac_k_attention_backward(&ctx, LT, LH, LKV, LHD, q, LDQ, k, v, LDKV, g, scale, out, stats, dq, dk, dv);
        assert_close_rows("dq", dq, rdq, LT, LDQ, LH * LHD);
        assert_close_rows("dk", dk, rdk, LT, LDKV, LKV * LHD);
        assert_close_rows("dv", dv, rdv, LT, LDKV, LKV * LHD);
    }
    omp_set_num_threads(threads);
    free(q), free(g), free(k), free(v), free(out), free(dq), free(dk), free(dv), free(stats);
    free(rout), free(rdq), free(rdk), free(rdv), free(ws);
}

/* ---- the forward kernel across query tiles and key blocks, against a direct forward
 * in double ---- */

enum { FN = 150, FPAST = 300, FCAP = FN + FPAST + 5 };

/* The shape of a forward check: heads, KV heads, head size, q's and out's row stride,
 * the cache's capacity. */
typedef struct {
    int heads, kv_heads, hd, ld, cap;
} fwd_shape;

/* out = softmax(scale q K^T over the visible keys) V for queries at past.., from the
 * cache layout [kv, cap, hd]; lse [n_new, heads] the log normalisers */
static void reference_forward(fwd_shape f, int n_new, int past, const float *q, const float *k, const float *v,
                              double scale, double *out, double *lse)
{
    double *p = malloc((size_t)f.cap * sizeof *p);
    assert_non_null(p);
    for (int h = 0; h < f.heads; h++) {
        int kv = h / (f.heads / f.kv_heads);
        for (int i = 0; i < n_new; i++) {
            const float *qi = q + (size_t)i * f.ld + (size_t)h * f.hd;
            int visible = past + i + 1;
            double max = -INFINITY, sum = 0;
            for (int j = 0; j < visible; j++) {
                double dot = 0;
                for (int c = 0; c < f.hd; c++)
                    dot += (double)qi[c] * k[((size_t)kv * f.cap + j) * f.hd + c];
                p[j] = dot * scale;
                max = fmax(max, p[j]);
            }
            for (int j = 0; j < visible; j++)
                sum += (p[j] = exp(p[j] - max));
            lse[(size_t)i * f.heads + h] = max + log(sum);
            for (int c = 0; c < f.hd; c++) {
                double o = 0;
                for (int j = 0; j < visible; j++)
                    o += p[j] / sum * v[((size_t)kv * f.cap + j) * f.hd + c];
                out[(size_t)i * f.ld + (size_t)h * f.hd + c] = o;
            }
        }
    }
    free(p);
}

static void check_forward(int n_new, int past, float spread)
{
    float *q = malloc(sizeof(float) * n_new * LDQ), *out = malloc(sizeof(float) * n_new * LDQ);
    float *k = malloc(sizeof(float) * LKV * FCAP * LHD), *v = malloc(sizeof(float) * LKV * FCAP * LHD);
    float *lse = malloc(sizeof(float) * n_new * LH);
    double *want = calloc((size_t)n_new * LDQ, sizeof(double)), *want_lse = calloc((size_t)n_new * LH, sizeof(double));
    size_t bytes = ac_cpu_backend.attention_workspace(omp_get_max_threads(), n_new, past + n_new);
    void *ws = malloc(bytes);
    assert_true(q && out && k && v && lse && want && want_lse && ws);
    gc_fill(q, n_new * LDQ, -spread, spread, 11);
    gc_fill(k, LKV * FCAP * LHD, -spread, spread, 12);
    gc_fill(v, LKV * FCAP * LHD, -1.0f, 1.0f, 13);
    float scale = 1.0f / sqrtf((float)LHD);
    ac_kctx ctx = {.workspace = ws, .workspace_bytes = bytes};
    ac_k_attention(&ctx, n_new, past, LH, LKV, LHD, q, LDQ, k, v, FCAP, scale, out, LDQ, lse, LH);
    reference_forward((fwd_shape){LH, LKV, LHD, LDQ, FCAP}, n_new, past, q, k, v, scale, want, want_lse);
    assert_close_rows("out", out, want, n_new, LDQ, LH * LHD);
    assert_close_rows("lse", lse, want_lse, n_new, LH, LH);
    free(q), free(out), free(k), free(v), free(lse), free(want), free(want_lse), free(ws);
}

static void test_forward_kernel_across_tiles(void **state)
{
    (void)state;
    /* three query tiles (64 + 64 + 22) over two key blocks, behind 300 cached keys */
    check_forward(FN, FPAST, 2.0f);
    /* peaked rows: a later block's max far above an earlier one's (the rescaling) */
    check_forward(FN, FPAST, 6.0f);
    /* a prompt from an empty cache, one short tile, and decode steps */
    check_forward(FN, 0, 2.0f);
    check_forward(5, 2, 2.0f);
    check_forward(1, FPAST, 2.0f);
}

/* Decode with many query heads per KV head: 20 heads on one KV head go as GEMMs of 8, 8
 * and 4 heads; two new queries behind 50 cached keys, against a double forward. */
static void test_decode_heads_in_chunks(void **state)
{
    (void)state;
    enum { H = 20, HD = 8, NEW = 2, PAST = 50, CAP = NEW + PAST, LD = H * HD + 1 };
    float q[NEW * LD], out[NEW * LD], k[CAP * HD], v[CAP * HD], lse[NEW * H];
    double want[NEW * LD], want_lse[NEW * H];
    gc_fill(q, NEW * LD, -2.0f, 2.0f, 21);
    gc_fill(k, CAP * HD, -2.0f, 2.0f, 22);
    gc_fill(v, CAP * HD, -1.0f, 1.0f, 23);
    float scale = 1.0f / sqrtf((float)HD);
    size_t bytes = ac_cpu_backend.attention_workspace(omp_get_max_threads(), NEW, CAP);
    void *ws = malloc(bytes);
    assert_non_null(ws);
    ac_kctx ctx = {.workspace = ws, .workspace_bytes = bytes};
    ac_k_attention(&ctx, NEW, PAST, H, 1, HD, q, LD, k, v, CAP, scale, out, LD, lse, H);
    reference_forward((fwd_shape){H, 1, HD, LD, CAP}, NEW, PAST, q, k, v, scale, want, want_lse);
    assert_close_rows("decode out", out, want, NEW, LD, H * HD);
    assert_close_rows("decode lse", lse, want_lse, NEW, H, H);
    free(ws);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_training_forward_matches_cached),
        cmocka_unit_test(test_grad_null_and_accumulation),
        cmocka_unit_test(test_kernel_across_tiles),
        cmocka_unit_test(test_forward_kernel_across_tiles),
        cmocka_unit_test(test_decode_heads_in_chunks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
