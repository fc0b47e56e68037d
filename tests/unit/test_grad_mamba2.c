/* The Mamba2 block's backward against finite differences of its forward, on one-layer
 * models over a packed batch of two sequences (training: no caches), plus the
 * properties the training loop relies on: the cache-free forward equals inference from
 * fresh caches, a mask of ones changes no bit, grad == NULL changes no dxn bit, and a
 * second backward adds exactly the same gradients again.
 *
 * Tolerances: the forward is f32, the loss sum(out * R) is summed in double, and the
 * numeric gradient is a central difference. Its truncation error is ~eps^2 |f'''| / 6 and
 * its rounding error ~(f32 noise of the loss) / eps; with eps = 1e-2 on O(1) inputs both
 * stay near 1e-4 of O(1) gradients, so an entry passes within rtol 2e-2 of the larger of
 * the two values plus atol 2e-4 (which absorbs entries whose gradient is ~0). A wrong
 * term (a dropped factor, a sign, a missing path) is off by far more than 2%. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_check.h"
#include "runtime/runtime_internal.h"

#define FD_EPS 1e-2f
#define FD_RTOL 2e-2
#define FD_ATOL 2e-4
#define N_SEQS 2

typedef struct {
    int hidden, heads, head_dim, groups, state, conv_kernel, conv_bias;
    float dt_min;
    int len[N_SEQS]; /* len[1] == 0: one sequence */
    int samples; /* entries checked per weight tensor */
    uint64_t seed;
    float eps;   /* 0: the defaults above */
    double atol, rtol;
} config;

typedef struct {
    config cfg;
    ac_arch arch;
    ac_model *model, *grads; /* grads: a second arena of the same layout */
    ac_runtime *rt;
    int offset[N_SEQS], len[N_SEQS];
    ac_seqs seqs;
    int T, D, H;
    float *xn, *R, *out, *dxn, *mask;
    const float *use_mask; /* NULL or mask */
} fixture;

static fixture *make_fixture(config cfg)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->cfg = cfg;
    ac_arch *a = &f->arch;
    *a = (ac_arch){.vocab = 8, .hidden = cfg.hidden, .norm_eps = 1e-5f, .use_conv_bias = cfg.conv_bias,
                   .chunk_size = 8, .time_step_min = cfg.dt_min};
    assert_int_equal(ac_arch_alloc_layers(a, 1), AC_OK);
    a->layers[0] = (ac_block_dims){.kind = AC_BLOCK_MAMBA, .mamba_heads = cfg.heads, .mamba_head_dim = cfg.head_dim,
                                   .mamba_groups = cfg.groups, .ssm_state = cfg.state, .conv_kernel = cfg.conv_kernel};
    assert_int_equal(ac_model_create(a, &f->model), AC_OK);
    assert_int_equal(ac_model_create(a, &f->grads), AC_OK);

    size_t n;
    float *arena = ac_model_arena(f->model, &n);
    gc_fill(arena, n, -0.3f, 0.3f, cfg.seed);
    ac_layer_weights *w = &f->model->layers[0];
    int H = cfg.heads, dI = cfg.heads * cfg.head_dim;
    float u[AC_MAX_MAMBA_HEADS];
    gc_fill(u, (size_t)H, 1.0f, 4.0f, cfg.seed + 1);
    for (int h = 0; h < H; h++)
        w->A_log[h] = logf(u[h]);
    gc_fill(u, (size_t)H, 0.1f, 0.8f, cfg.seed + 2); /* softplus(dt_bias); in_proj's dt adds a little */
    for (int h = 0; h < H; h++)
        w->dt_bias[h] = logf(expm1f(u[h]));
    gc_fill(w->D, (size_t)H, 0.5f, 1.5f, cfg.seed + 3);
    gc_fill(w->gate_norm, (size_t)dI, 0.8f, 1.2f, cfg.seed + 4);
    gc_fill(w->norm, (size_t)cfg.hidden, 0.8f, 1.2f, cfg.seed + 5);

    f->D = cfg.hidden;
    f->H = H;
    int n_seqs = cfg.len[1] > 0 ? N_SEQS : 1;
    for (int s = 0; s < n_seqs; s++) {
        f->len[s] = cfg.len[s];
        f->offset[s] = f->T;
        f->T += cfg.len[s];
    }
    f->seqs = (ac_seqs){.n = n_seqs, .total = f->T, .offset = f->offset, .len = f->len, .caches = NULL};
    assert_int_equal(ac_runtime_create(f->model, &f->rt), AC_OK);
    assert_int_equal(ac_runtime_reserve_training(f->rt, f->T, n_seqs), AC_OK);

    size_t TD = (size_t)f->T * f->D;
    f->xn = malloc(TD * sizeof(float));
    f->R = malloc(TD * sizeof(float));
    f->out = malloc(TD * sizeof(float));
    f->dxn = malloc(TD * sizeof(float));
    f->mask = malloc((size_t)H * sizeof(float));
    assert_true(f->xn && f->R && f->out && f->dxn && f->mask);
    gc_fill(f->xn, TD, -1.0f, 1.0f, cfg.seed + 6);
    gc_fill(f->R, TD, -1.0f, 1.0f, cfg.seed + 7);
    gc_fill(f->mask, (size_t)H, 0.3f, 1.0f, cfg.seed + 8);
    return f;
}

static void free_fixture(fixture *f)
{
    ac_runtime_free(f->rt);
    ac_model_free(f->model);
    ac_model_free(f->grads);
    ac_arch_free(&f->arch);
    free(f->xn);
    free(f->R);
    free(f->out);
    free(f->dxn);
    free(f->mask);
    free(f);
}

static void forward(fixture *f, const float *mask, ac_cache *const *caches, float *out)
{
    ac_block_masks m = {.mamba_heads = mask};
    ac_cache_layers *views[8];
    assert_true(f->seqs.n <= 8);
    for (int s = 0; caches && s < f->seqs.n; s++)
        views[s] = &caches[s]->l;
    ac_seqs seqs = f->seqs;
    seqs.caches = caches ? views : NULL;
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_mamba2_ops.forward(&c, 0, &seqs, f->xn, mask ? &m : NULL, out);
    assert_true(c.scratch_used <= (size_t)f->rt->capacity_tokens * f->rt->scratch_per_token);
}

static void backward(fixture *f, const float *mask, ac_layer_weights *grad, float *dmask, float *dxn)
{
    ac_block_masks m = {.mamba_heads = mask};
    ac_block_mask_grads mg = {.mamba_heads = dmask};
    ac_block_ctx c = ac_runtime_block_ctx(f->rt, NULL);
    ac_mamba2_ops.backward(&c, 0, &f->seqs, f->xn, mask ? &m : NULL, f->R, dxn, grad, dmask ? &mg : NULL);
    /* within what ac_mamba2_backward_scratch_per_token planned */
    assert_true(c.scratch_used <= (size_t)f->rt->capacity_tokens * f->rt->scratch_per_token);
}

static double loss(void *ctx)
{
    fixture *f = ctx;
    forward(f, f->use_mask, NULL, f->out);
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)f->T * f->D; i++)
        sum += (double)f->out[i] * f->R[i];
    return sum;
}

/* Backward once into a zeroed gradient arena, then every gradient against finite
 * differences. Returns the number of entries off. */
static int check_all(fixture *f, const float *mask)
{
    f->use_mask = mask;
    size_t n;
    float *g = ac_model_arena(f->grads, &n);
    memset(g, 0, n * sizeof *g);
    float dmask[AC_MAX_MAMBA_HEADS] = {0};
    backward(f, mask, &f->grads->layers[0], mask ? dmask : NULL, f->dxn);

    const ac_block_dims *b = &f->arch.layers[0];
    ac_layer_weights *w = &f->model->layers[0], *gw = &f->grads->layers[0];
    int H = b->mamba_heads, dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b);
    size_t S = (size_t)f->cfg.samples;
    struct {
        const char *name;
        float *x;
        const float *g;
        size_t n;
    } t[] = {
        {"in_proj.weight", w->in_proj, gw->in_proj, (size_t)ac_mamba_in_proj_dim(b) * f->D},
        {"conv1d.weight", w->conv_w, gw->conv_w, (size_t)conv * b->conv_kernel},
        {"conv1d.bias", w->conv_b, gw->conv_b, w->conv_b ? (size_t)conv : 0},
        {"dt_bias", w->dt_bias, gw->dt_bias, (size_t)H},
        {"A_log", w->A_log, gw->A_log, (size_t)H},
        {"D", w->D, gw->D, (size_t)H},
        {"norm.weight", w->gate_norm, gw->gate_norm, (size_t)dI},
        {"out_proj.weight", w->out_proj, gw->out_proj, (size_t)f->D * dI},
    };
    float eps = f->cfg.eps > 0 ? f->cfg.eps : FD_EPS;
    double atol = f->cfg.eps > 0 ? f->cfg.atol : FD_ATOL, rtol = f->cfg.eps > 0 ? f->cfg.rtol : FD_RTOL;
    int failed = 0;
    gc_result r = gc_check("dxn", f->xn, (size_t)f->T * f->D, f->dxn, (size_t)f->T * f->D, loss, f, eps, atol, rtol);
    failed += r.failed;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!t[i].n)
            continue;
        r = gc_check(t[i].name, t[i].x, t[i].n, t[i].g, S, loss, f, eps, atol, rtol);
        failed += r.failed;
    }
    if (mask) {
        r = gc_check("mask.mamba_heads", f->mask, (size_t)H, dmask, (size_t)H, loss, f, eps, atol, rtol);
        failed += r.failed;
    }
    return failed;
}

static const config small_grouped = {.hidden = 16, .heads = 4, .head_dim = 4, .groups = 2, .state = 4, .conv_kernel = 4,
                                     .conv_bias = 1, .dt_min = 1e-3f, .len = {5, 9}, .samples = 40, .seed = 11};

static void test_gradients_grouped(void **state)
{
    (void)state;
    fixture *f = make_fixture(small_grouped);
    printf(" groups 2, head mask:\n");
    assert_int_equal(check_all(f, f->mask), 0);
    printf(" groups 2, no mask:\n");
    assert_int_equal(check_all(f, NULL), 0);
    free_fixture(f);
}

static void test_gradients_one_group(void **state)
{
    (void)state;
    config c = small_grouped;
    c.groups = 1;
    c.seed = 23;
    fixture *f = make_fixture(c);
    printf(" groups 1, head mask:\n");
    assert_int_equal(check_all(f, f->mask), 0);
    free_fixture(f);
}

/* Head and state sizes that are not multiples of 4 (the CPU scan backward runs channels
 * and states four at a time, then the rest one by one): P = 7 = 4 + 3, N = 6 = 4 + 2. */
static void test_gradients_odd_sizes(void **state)
{
    (void)state;
    config c = small_grouped;
    c.head_dim = 7;
    c.state = 6;
    c.seed = 29;
    fixture *f = make_fixture(c);
    printf(" head_dim 7, state 6, head mask:\n");
    assert_int_equal(check_all(f, f->mask), 0);
    free_fixture(f);
}

/* No conv bias, a two-tap conv, one head per group. */
static void test_gradients_no_conv_bias(void **state)
{
    (void)state;
    config c = small_grouped;
    c.groups = 4;
    c.conv_kernel = 2;
    c.conv_bias = 0;
    c.seed = 37;
    fixture *f = make_fixture(c);
    printf(" groups 4, conv 2, no conv bias, head mask:\n");
    assert_int_equal(check_all(f, f->mask), 0);
    free_fixture(f);
}

/* time_step_min in the middle of the dt range: clamped tokens pass no dt gradient. The
 * layer's dt values are computed here to make sure some are clamped and none sits so
 * close to the floor that a finite difference would cross it. */
static void test_gradients_dt_clamped(void **state)
{
    (void)state;
    config c = small_grouped;
    c.dt_min = 0.4f;
    c.seed = 45; /* a seed whose dt values keep 0.02 away from the floor */
    fixture *f = make_fixture(c);
    const ac_block_dims *b = &f->arch.layers[0];
    const ac_layer_weights *w = &f->model->layers[0];
    int row0 = 2 * ac_mamba_d_inner(b) + 2 * b->mamba_groups * b->ssm_state;
    int clamped = 0, near = 0;
    for (int t = 0; t < f->T; t++)
        for (int h = 0; h < f->H; h++) {
            double v = w->dt_bias[h];
            for (int d = 0; d < f->D; d++)
                v += (double)f->xn[t * f->D + d] * w->in_proj[(size_t)(row0 + h) * f->D + d];
            double sp = log1p(exp(v));
            clamped += sp < c.dt_min;
            near += fabs(sp - c.dt_min) < 0.02;
        }
    printf(" dt clamped at %g: %d of %d clamped, %d near the floor\n", (double)c.dt_min, clamped, f->T * f->H, near);
    assert_true(clamped > 0 && clamped < f->T * f->H);
    assert_int_equal(near, 0);
    assert_int_equal(check_all(f, f->mask), 0);
    free_fixture(f);
}

/* Big enough that every sequence crosses the scan, conv and norm kernels' OpenMP
 * thresholds (the parallel partitions and the cross-head dB/dC reduction run), sampled
 * more sparsely. d_inner 512 makes each output a longer f32 sum, so the loss carries
 * more rounding noise (~1e-5 measured on a loss of ~30): eps 2e-2 and atol 1e-3. */
static void test_gradients_parallel_sizes(void **state)
{
    (void)state;
    config c = {.hidden = 16, .heads = 16, .head_dim = 32, .groups = 4, .state = 16, .conv_kernel = 4, .conv_bias = 1,
                .dt_min = 1e-3f, .len = {30, 34}, .samples = 16, .seed = 53, .eps = 2e-2f, .atol = 1e-3, .rtol = 2e-2};
    fixture *f = make_fixture(c);
    printf(" T %d, heads 16 x 32, groups 4, state 16, head mask:\n", f->T);
    assert_int_equal(check_all(f, f->mask), 0);
    free_fixture(f);
}

/* The smallest batches, where the fixed-size buffers weigh most against the per-token
 * plan: one token, and two one-token sequences. */
static void test_tiny_batches(void **state)
{
    (void)state;
    int lens[2][2] = {{1, 0}, {1, 1}};
    for (int i = 0; i < 2; i++) {
        config c = small_grouped;
        c.len[0] = lens[i][0];
        c.len[1] = lens[i][1];
        fixture *f = make_fixture(c);
        printf(" %d sequence(s) of one token, head mask:\n", f->seqs.n);
        assert_int_equal(check_all(f, f->mask), 0);
        free_fixture(f);
    }
}

/* The training forward (no caches) is the inference forward from fresh caches, and a
 * mask of ones changes no bit on either path. */
static void test_forward_paths_agree(void **state)
{
    (void)state;
    fixture *f = make_fixture(small_grouped);
    size_t TD = (size_t)f->T * f->D;
    float *ref = malloc(TD * sizeof(float)), *got = malloc(TD * sizeof(float));
    float ones[AC_MAX_MAMBA_HEADS];
    for (int h = 0; h < f->H; h++)
        ones[h] = 1.0f;
    ac_cache *caches[N_SEQS];
    for (int s = 0; s < N_SEQS; s++)
        assert_int_equal(ac_cache_create(f->model, &caches[s]), AC_OK);

    forward(f, NULL, NULL, got);
    forward(f, NULL, caches, ref);
    assert_memory_equal(got, ref, TD * sizeof(float));
    forward(f, ones, NULL, got);
    assert_memory_equal(got, ref, TD * sizeof(float));
    for (int s = 0; s < N_SEQS; s++)
        ac_cache_clear(caches[s]);
    forward(f, ones, caches, got);
    assert_memory_equal(got, ref, TD * sizeof(float));
    /* a real mask, both paths */
    forward(f, f->mask, NULL, ref);
    for (int s = 0; s < N_SEQS; s++)
        ac_cache_clear(caches[s]);
    forward(f, f->mask, caches, got);
    assert_memory_equal(got, ref, TD * sizeof(float));
    /* and the cached forward really keeps state: a second call differs */
    forward(f, f->mask, caches, got);
    assert_memory_not_equal(got, ref, TD * sizeof(float));

    for (int s = 0; s < N_SEQS; s++)
        ac_cache_free(caches[s]);
    free(ref);
    free(got);
    free_fixture(f);
}

/* grad == NULL and a mask of ones leave dxn bit-identical; a second backward adds the
 * same gradients again (weights and mask), so the sums are exactly twice the first. */
static void test_backward_properties(void **state)
{
    (void)state;
    fixture *f = make_fixture(small_grouped);
    size_t TD = (size_t)f->T * f->D, n;
    float *ref = malloc(TD * sizeof(float)), *got = malloc(TD * sizeof(float));
    float ones[AC_MAX_MAMBA_HEADS], dm1[AC_MAX_MAMBA_HEADS] = {0}, dm2[AC_MAX_MAMBA_HEADS] = {0};
    for (int h = 0; h < f->H; h++)
        ones[h] = 1.0f;
    float *g = ac_model_arena(f->grads, &n);
    ac_layer_weights *gw = &f->grads->layers[0];

    memset(g, 0, n * sizeof *g);
    backward(f, f->mask, gw, dm1, ref);
    float *once = malloc(n * sizeof(float));
    memcpy(once, g, n * sizeof(float));
    memcpy(dm2, dm1, sizeof dm1);
    backward(f, f->mask, gw, dm2, got);
    assert_memory_equal(got, ref, TD * sizeof(float));
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (g[i] != 2.0f * once[i])
            fail_msg("gradient %zu: twice %.9g, once %.9g", i, (double)g[i], (double)once[i]);
        nonzero += once[i] != 0.0f;
    }
    assert_true(nonzero > n / 2); /* the layer's weights (most of the arena) all got gradients */
    for (int h = 0; h < f->H; h++) {
        assert_true(dm1[h] != 0.0f);
        assert_true(dm2[h] == 2.0f * dm1[h]);
    }

    backward(f, f->mask, NULL, NULL, got);
    assert_memory_equal(got, ref, TD * sizeof(float));
    for (size_t i = 0; i < n; i++)
        assert_true(g[i] == 2.0f * once[i]); /* untouched */

    backward(f, NULL, NULL, NULL, ref);
    backward(f, ones, gw, dm1, got);
    assert_memory_equal(got, ref, TD * sizeof(float));

    free(once);
    free(ref);
    free(got);
    free_fixture(f);
}

/* The dt kernel alone: zero slope where clamped, sigmoid elsewhere, identity above 20. */
static void test_softplus_dt_backward_kernel(void **state)
{
    (void)state;
    enum { T = 3, H = 4 };
    float raw[T * H] = {-3.0f, -0.2f, 0.5f, 25.0f, -1.0f, 0.0f, 2.0f, 30.0f, -5.0f, 1.0f, -0.5f, 21.0f};
    float bias[H] = {0.1f, -0.1f, 0.0f, 0.0f}, ddt[T * H], draw[T * H], dbias[H] = {0};
    gc_fill(ddt, T * H, 0.5f, 1.5f, 5);
    float dt_min = 0.3f;
    ac_kctx ctx = {0};
    ac_k_softplus_dt_backward(&ctx, T, H, raw, H, bias, dt_min, ddt, draw, H, dbias);
    double sums[H] = {0};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double v = (double)raw[t * H + h] + bias[h];
            double sp = v > 20.0 ? v : log1p(exp(v));
            double slope = sp < dt_min ? 0.0 : v > 20.0 ? 1.0 : 1.0 / (1.0 + exp(-v));
            double want = ddt[t * H + h] * slope;
            assert_true(fabs(draw[t * H + h] - want) <= 1e-6 * (1.0 + fabs(want)));
            sums[h] += want;
        }
    for (int h = 0; h < H; h++)
        assert_true(fabs(dbias[h] - sums[h]) <= 1e-5 * (1.0 + fabs(sums[h])));
    assert_true(draw[0] == 0.0f && draw[8] == 0.0f); /* clamped */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softplus_dt_backward_kernel),
        cmocka_unit_test(test_forward_paths_agree),
        cmocka_unit_test(test_backward_properties),
        cmocka_unit_test(test_gradients_grouped),
        cmocka_unit_test(test_gradients_one_group),
        cmocka_unit_test(test_gradients_odd_sizes),
        cmocka_unit_test(test_gradients_no_conv_bias),
        cmocka_unit_test(test_gradients_dt_clamped),
        cmocka_unit_test(test_gradients_parallel_sizes),
        cmocka_unit_test(test_tiny_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
