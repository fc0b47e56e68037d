/* Minitron importance and the function-preserving reorder:
 * - every score of a tiny model with all four kinds against a naive double-precision
 *   reference written here from the weights alone (its forward is checked against the
 *   runtime's logits, the only thing the runtime is used for);
 * - the reorder keeps the logits (tied and untied embeddings, and the prose parent),
 *   leaves every importance array non-increasing (Mamba heads within their groups),
 *   moves something, and a second reorder moves nothing;
 * - save and load round-trip; loading against another architecture names the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/importance.h"
#include "grad_check.h"
#include "model/model_internal.h"

enum { V = 24, D = 16, L = 4, NS = 3, SL = 7 };
/* the tiny model's dims */
enum { H = 4, P = 4, G = 2, N = 4, K = 4, NH = 4, NKV = 2, HD = 4, F = 12, E = 4, TOPK = 2, I = 6, S = 5 };
enum { DI = H * P, CONV = DI + 2 * G * N, NPROJ = 2 * DI + 2 * G * N + H, MAXC = 32 };

/* n_group 1: no group-limited routing; 2: two groups of two, the best one chosen. */
static ac_model *make_model(int tied, int n_group)
{
    const char *pattern = "M*-E";
    ac_arch a = {.vocab = V, .hidden = D, .norm_eps = 1e-5f, .tie_embeddings = tied, .use_conv_bias = 1,
                 .chunk_size = 8, .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = (ac_block_dims){.mamba_heads = H, .mamba_head_dim = P, .mamba_groups = G, .ssm_state = N,
                                      .conv_kernel = K, .attn_heads = NH, .attn_kv_heads = NKV, .attn_head_dim = HD,
                                      .ffn = F, .n_experts = E, .top_k = TOPK, .expert_ffn = I, .shared_ffn = S,
                                      .n_group = n_group, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, 11 + (uint64_t)tied, 0.4f);
    /* every per-channel and per-head vector in general position, so that any misplaced
     * entry of a permutation changes the function */
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        const char *n = p->name;
        uint64_t seed = 100 + i;
        if (strstr(n, "norm"))
            gc_fill(p->data, p->count, 0.7f, 1.3f, seed);
        else if (strstr(n, "A_log"))
            gc_fill(p->data, p->count, -1.0f, 1.0f, seed);
        else if (strstr(n, "mixer.D"))
            gc_fill(p->data, p->count, 0.5f, 1.5f, seed);
        else if (strstr(n, "dt_bias"))
            gc_fill(p->data, p->count, -2.0f, 0.5f, seed);
        else if (strstr(n, "conv1d.bias"))
            gc_fill(p->data, p->count, -0.2f, 0.2f, seed);
        else if (strstr(n, "e_score_correction_bias")) /* large enough to change selections */
            gc_fill(p->data, p->count, -0.5f, 0.5f, seed);
    }
    /* expert 3 is never chosen (its selection score stays below every other's) */
    m->layers[3].router_bias[3] = -10.0f;
    return m;
}

static void calib_tokens(int32_t *tok, int n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 7;
    for (int i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        tok[i] = (int32_t)((s >> 33) % V);
    }
}

/* ---- the naive reference: one sequence at a time, double precision ---- */

typedef struct {
    double hidden[D], depth[L];
    double chan[L][MAXC], shared[L][MAXC];
    double enorm[L][E];
    long ecount[L][E];
} ref_sums;

static double silu(double v) { return v / (1.0 + exp(-v)); }
static double relu2(double v) { return v > 0 ? v * v : 0.0; }

static void naive_rmsnorm(const double *x, const float *w, double eps, double *y, int n)
{
    double ss = 0;
    for (int c = 0; c < n; c++)
        ss += x[c] * x[c];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int c = 0; c < n; c++)
        y[c] = w[c] * x[c] * inv;
}

/* y[r] = sum_c W[r, c] x[c] for W [rows, cols] */
static void naive_matvec(const float *W, int rows, int cols, const double *x, double *y)
{
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

/* acc[c] += (mean over the n rows of |a[row][c]|)^2, rows of `ld` doubles */
static void naive_mean_sq(const double *a, int ld, int n, int C, double *acc)
{
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int r = 0; r < n; r++)
            s += fabs(a[r * ld + c]);
        acc[c] += (s / n) * (s / n);
    }
}

static void naive_mamba(const ac_model *m, int l, const double (*xn)[D], int T, double (*out)[D], ref_sums *r)
{
    const ac_layer_weights *w = &m->layers[l];
    double proj[SL][NPROJ], xbc[SL][CONV], dt[SL][H], y[SL][DI], xs[SL][DI];
    for (int t = 0; t < T; t++) {
        naive_matvec(w->in_proj, NPROJ, D, xn[t], proj[t]);
        for (int i = 0; i < DI; i++)
            xs[t][i] = proj[t][DI + i];
    }
    naive_mean_sq(&xs[0][0], DI, T, DI, r->chan[l]);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < CONV; c++) {
            double v = w->conv_b[c];
            for (int k = 0; k < K; k++) {
                int src = t - (K - 1) + k;
                if (src >= 0)
                    v += (double)w->conv_w[c * K + k] * proj[src][DI + c];
            }
            xbc[t][c] = silu(v);
        }
        for (int h = 0; h < H; h++) {
            double v = proj[t][DI + CONV + h] + w->dt_bias[h];
            double sp = v > 20 ? v : log1p(exp(v));
            dt[t][h] = sp < m->arch.time_step_min ? m->arch.time_step_min : sp;
        }
    }
    double state[H][P][N];
    memset(state, 0, sizeof state);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / G);
            double A = -exp((double)w->A_log[h]), da = exp(dt[t][h] * A);
            for (int p = 0; p < P; p++) {
                double xv = xbc[t][h * P + p], acc = 0;
                for (int n = 0; n < N; n++) {
                    double B = xbc[t][DI + g * N + n], C = xbc[t][DI + G * N + g * N + n];
                    state[h][p][n] = da * state[h][p][n] + dt[t][h] * xv * B;
                    acc += state[h][p][n] * C;
                }
                y[t][h * P + p] = acc + w->D[h] * xv;
            }
        }
    for (int t = 0; t < T; t++) {
        double u[DI];
        int gs = DI / G;
        for (int g0 = 0; g0 < DI; g0 += gs) {
            double ss = 0;
            for (int i = g0; i < g0 + gs; i++) {
                u[i] = y[t][i] * silu(proj[t][i]);
                ss += u[i] * u[i];
            }
            double inv = 1.0 / sqrt(ss / gs + m->arch.norm_eps);
            for (int i = g0; i < g0 + gs; i++)
                u[i] *= inv * w->gate_norm[i];
        }
        naive_matvec(w->out_proj, D, DI, u, out[t]);
    }
}

static void naive_attention(const ac_model *m, int l, const double (*xn)[D], int T, double (*out)[D])
{
    const ac_layer_weights *w = &m->layers[l];
    double q[SL][NH * HD], k[SL][NKV * HD], v[SL][NKV * HD], att[SL][NH * HD];
    for (int t = 0; t < T; t++) {
        naive_matvec(w->q_proj, NH * HD, D, xn[t], q[t]);
        naive_matvec(w->k_proj, NKV * HD, D, xn[t], k[t]);
        naive_matvec(w->v_proj, NKV * HD, D, xn[t], v[t]);
    }
    double scale = 1.0 / sqrt((double)HD);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            double sc[SL], mx = -1e300, sum = 0;
            for (int s = 0; s <= t; s++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += q[t][h * HD + i] * k[s][g * HD + i];
                sc[s] = d * scale;
                mx = sc[s] > mx ? sc[s] : mx;
            }
            for (int s = 0; s <= t; s++)
                sum += (sc[s] = exp(sc[s] - mx));
            for (int i = 0; i < HD; i++) {
                double a = 0;
                for (int s = 0; s <= t; s++)
                    a += sc[s] / sum * v[s][g * HD + i];
                att[t][h * HD + i] = a;
            }
        }
    for (int t = 0; t < T; t++)
        naive_matvec(w->o_proj, D, NH * HD, att[t], out[t]);
}

/* down(relu2(up x)) over T rows; the activations into act (rows of `Fw`) */
static void naive_ffn(const float *up, const float *down, int Fw, const double (*xn)[D], int T, double *act,
                      double (*out)[D])
{
    for (int t = 0; t < T; t++) {
        naive_matvec(up, Fw, D, xn[t], act + t * Fw);
        for (int c = 0; c < Fw; c++)
            act[t * Fw + c] = relu2(act[t * Fw + c]);
        naive_matvec(down, D, Fw, act + t * Fw, out[t]);
    }
}

static void naive_mlp(const ac_model *m, int l, const double (*xn)[D], int T, double (*out)[D], ref_sums *r)
{
    double act[SL * F];
    naive_ffn(m->layers[l].up_proj, m->layers[l].down_proj, F, xn, T, act, out);
    naive_mean_sq(act, F, T, F, r->chan[l]);
}

static void naive_moe(const ac_model *m, int l, const double (*xn)[D], int T, double (*out)[D], ref_sums *r)
{
    const ac_layer_weights *w = &m->layers[l];
    const ac_block_dims *b = &m->arch.layers[l];
    int chosen[SL][TOPK];
    double weight[SL][TOPK], act[SL * S];
    naive_ffn(w->up_proj, w->down_proj, S, xn, T, act, out);
    naive_mean_sq(act, S, T, S, r->shared[l]);
    for (int t = 0; t < T; t++) {
        double logit[E], score[E], choice[E];
        int order[E];
        naive_matvec(w->router, E, D, xn[t], logit);
        for (int e = 0; e < E; e++) {
            score[e] = 1.0 / (1.0 + exp(-logit[e]));
            choice[e] = score[e] + w->router_bias[e];
            order[e] = e;
        }
        /* insertion sort by selection score, descending, ties by index */
        for (int i = 1; i < E; i++)
            for (int j = i; j > 0 && choice[order[j]] > choice[order[j - 1]]; j--) {
                int tmp = order[j];
                order[j] = order[j - 1];
                order[j - 1] = tmp;
            }
        double sum = 0;
        for (int j = 0; j < TOPK; j++)
            sum += score[order[j]];
        for (int j = 0; j < TOPK; j++) {
            chosen[t][j] = order[j];
            weight[t][j] = score[order[j]] / sum * b->routed_scaling;
        }
    }
    for (int e = 0; e < E; e++) {
        double he[SL * I], oe[D];
        int rows = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < TOPK; j++) {
                if (chosen[t][j] != e)
                    continue;
                double *h = he + rows * I;
                naive_matvec(w->experts_up + (size_t)e * I * D, I, D, xn[t], h);
                for (int c = 0; c < I; c++)
                    h[c] = relu2(h[c]);
                naive_matvec(w->experts_down + (size_t)e * D * I, D, I, h, oe);
                double nn = 0;
                for (int c = 0; c < D; c++) {
                    out[t][c] += weight[t][j] * oe[c];
                    nn += (weight[t][j] * oe[c]) * (weight[t][j] * oe[c]);
                }
                r->enorm[l][e] += sqrt(nn);
                r->ecount[l][e]++;
                rows++;
            }
        if (rows)
            naive_mean_sq(he, I, rows, I, r->chan[l]);
    }
}

/* One sequence through the whole model: the sums of every score, and its logits [T, V]. */
static void naive_sequence(const ac_model *m, const int32_t *tok, int T, ref_sums *r, double *logits)
{
    double x[SL][D], xn[SL][D], out[SL][D];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < D; c++)
            x[t][c] = m->embeddings[(size_t)tok[t] * D + c];
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++)
            naive_rmsnorm(x[t], m->layers[l].norm, m->arch.norm_eps, xn[t], D);
        naive_mean_sq(&xn[0][0], D, T, D, r->hidden);
        switch (m->arch.layers[l].kind) {
        case AC_BLOCK_MAMBA: naive_mamba(m, l, (const double (*)[D])xn, T, out, r); break;
        case AC_BLOCK_ATTENTION: naive_attention(m, l, (const double (*)[D])xn, T, out); break;
        case AC_BLOCK_MLP: naive_mlp(m, l, (const double (*)[D])xn, T, out, r); break;
        case AC_BLOCK_MOE: naive_moe(m, l, (const double (*)[D])xn, T, out, r); break;
        }
        for (int t = 0; t < T; t++) {
            double dot = 0, aa = 0, bb = 0;
            for (int c = 0; c < D; c++) {
                double nx = x[t][c] + out[t][c];
                dot += x[t][c] * nx;
                aa += x[t][c] * x[t][c];
                bb += nx * nx;
                x[t][c] = nx;
            }
            r->depth[l] += 1.0 - dot / (sqrt(aa) * sqrt(bb));
        }
    }
    for (int t = 0; t < T; t++) {
        naive_rmsnorm(x[t], m->norm_f, m->arch.norm_eps, xn[t], D);
        naive_matvec(m->lm_head, V, D, xn[t], logits + (size_t)t * V);
    }
}

/* The runtime's logits of one sequence from an empty cache. */
static float *runtime_logits(const ac_model *m, const int32_t *tok, int n)
{
    ac_runtime *rt;
    ac_cache *cache;
    int V_ = ac_model_arch(m)->vocab;
    float *logits = malloc((size_t)n * V_ * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &cache), AC_OK);
    const int32_t *toks[1] = {tok};
    int counts[1] = {n};
    ac_cache *caches[1] = {cache};
    ac_batch batch = {.n_seqs = 1, .tokens = toks, .n_tokens = counts, .caches = caches};
    assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_ALL, logits), AC_OK);
    ac_cache_free(cache);
    ac_runtime_free(rt);
    return logits;
}

static int close_rel(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fmax(fabs(got), fabs(want)) + 1e-12;
}

/* Every entry of got against want within 1e-4 relative; returns the worst error. */
static double check_array(const char *what, const float *got, const double *want, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double scale = fmax(fabs(got[i]), fabs(want[i]));
        double rel = scale > 0 ? fabs(got[i] - want[i]) / scale : 0;
        worst = rel > worst ? rel : worst;
        if (!close_rel(got[i], want[i], 1e-4))
            fail_msg("%s[%d]: got %.9g, the reference %.9g", what, i, (double)got[i], want[i]);
    }
    return worst;
}

static void test_importance_matches_naive(void **state)
{
    (void)state;
    ac_model *m = make_model(0, 1);
    int32_t tok[NS * SL];
    calib_tokens(tok, NS * SL, 3);

    ref_sums r;
    memset(&r, 0, sizeof r);
    double worst_logit = 0;
    for (int s = 0; s < NS; s++) {
        double logits[SL * V];
        naive_sequence(m, tok + s * SL, SL, &r, logits);
        float *rl = runtime_logits(m, tok + s * SL, SL);
        for (int i = 0; i < SL * V; i++) {
            double err = fabs(rl[i] - logits[i]);
            worst_logit = err > worst_logit ? err : worst_logit;
        }
        free(rl);
    }
    printf("  naive forward vs runtime logits: max abs error %.3g\n", worst_logit);
    assert_true(worst_logit < 1e-4);

    ac_importance imp;
    assert_int_equal(ac_importance_compute(m, tok, NS, SL, &imp), AC_OK);
    assert_int_equal(imp.n_layers, L);
    assert_int_equal(imp.hidden, D);
    assert_true(imp.tokens == NS * SL);

    double want[MAXC], worst = 0, w;
    for (int c = 0; c < D; c++)
        want[c] = sqrt(r.hidden[c]);
    w = check_array("hidden", imp.hidden_channels, want, D);
    worst = fmax(worst, w);
    for (int l = 0; l < L; l++)
        want[l] = r.depth[l] / (NS * SL);
    worst = fmax(worst, check_array("depth", imp.depth, want, L));
    /* Mamba (layer 0): heads = L2 of their channel scores */
    for (int h = 0; h < H; h++) {
        double s = 0;
        for (int p = 0; p < P; p++)
            s += r.chan[0][h * P + p];
        want[h] = sqrt(s);
    }
    worst = fmax(worst, check_array("mamba_heads", imp.mamba_heads[0], want, H));
    /* MLP (layer 2) */
    for (int c = 0; c < F; c++)
        want[c] = sqrt(r.chan[2][c]);
    worst = fmax(worst, check_array("mlp ffn", imp.ffn[2], want, F));
    /* MoE (layer 3) */
    for (int c = 0; c < I; c++)
        want[c] = sqrt(r.chan[3][c]);
    worst = fmax(worst, check_array("moe ffn", imp.ffn[3], want, I));
    for (int c = 0; c < S; c++)
        want[c] = sqrt(r.shared[3][c]);
    worst = fmax(worst, check_array("shared_ffn", imp.shared_ffn[3], want, S));
    for (int e = 0; e < E; e++)
        want[e] = r.ecount[3][e] ? r.enorm[3][e] / r.ecount[3][e] : 0.0;
    worst = fmax(worst, check_array("experts", imp.experts[3], want, E));
    printf("  importance vs the naive reference: worst relative error %.3g\n", worst);
    assert_true(r.ecount[3][3] == 0 && imp.experts[3][3] == 0.0f);
    for (int e = 0; e < 3; e++)
        assert_true(r.ecount[3][e] > 0);

    /* arrays of other kinds are absent */
    assert_null(imp.mamba_heads[1]);
    assert_null(imp.ffn[0]);
    assert_null(imp.ffn[1]);
    assert_null(imp.experts[2]);
    assert_null(imp.shared_ffn[2]);
    ac_importance_free(&imp);
    ac_model_free(m);
}

/* ---- reorder ---- */

static void assert_non_increasing(const char *what, const float *x, int n, int group)
{
    for (int i = 1; i < n; i++)
        if (i % group && x[i] > x[i - 1])
            fail_msg("%s[%d] = %g exceeds [%d] = %g after the reorder", what, i, (double)x[i], i - 1, (double)x[i - 1]);
}

static int differs(const float *a, const float *b, int n) { return n > 0 && memcmp(a, b, (size_t)n * sizeof *a) != 0; }

/* Reorders m by its importance on calib and checks the logits of `prompt` (max abs error
 * below tol times max(1, max |logit|): a reordered model adds its sums in another order,
 * and OpenBLAS's kernel sets group a GEMM's sums differently, so the round-off scales with
 * the logits; a wrong permutation is off by about the logits themselves), the order of
 * every array, that something moved, and that a second reorder moves nothing. */
static void check_reorder(const char *name, ac_model *m, const int32_t *calib, int ns, int sl, const int32_t *prompt,
                          int n, double tol)
{
    const ac_arch *a = ac_model_arch(m);
    int Vm = a->vocab, Dm = a->hidden, Lm = a->n_layers;
    float *before = runtime_logits(m, prompt, n);
    ac_importance imp;
    assert_int_equal(ac_importance_compute(m, calib, ns, sl, &imp), AC_OK);
    float *hidden0 = malloc((size_t)Dm * sizeof *hidden0);
    memcpy(hidden0, imp.hidden_channels, (size_t)Dm * sizeof *hidden0);
    /* a copy of every per-layer array to see what moved */
    float *copies[64][4] = {{0}};
    assert_true(Lm <= 64);
    for (int l = 0; l < Lm; l++) {
        float *arrays[4] = {imp.mamba_heads[l], imp.experts[l], imp.ffn[l], imp.shared_ffn[l]};
        const ac_block_dims *b = &a->layers[l];
        int lens[4] = {b->mamba_heads, b->n_experts, b->kind == AC_BLOCK_MLP ? b->ffn : b->expert_ffn, b->shared_ffn};
        for (int k = 0; k < 4; k++)
            if (arrays[k]) {
                copies[l][k] = malloc((size_t)lens[k] * sizeof(float));
                memcpy(copies[l][k], arrays[k], (size_t)lens[k] * sizeof(float));
            }
    }

    assert_int_equal(ac_model_reorder(m, &imp), AC_OK);
    float *after = runtime_logits(m, prompt, n);
    double err = 0, mag = 0;
    for (size_t i = 0; i < (size_t)n * Vm; i++) {
        err = fmax(err, fabs((double)after[i] - before[i]));
        mag = fmax(mag, fabs((double)before[i]));
    }
    double bound = tol * fmax(1.0, mag);
    printf("  %-22s reordered logits: max abs error %.3g (max |logit| %.3g, bound %.3g)\n", name, err, mag, bound);
    assert_true(err < bound);

    int moved = differs(hidden0, imp.hidden_channels, Dm), moved_layers = 0;
    assert_non_increasing("hidden", imp.hidden_channels, Dm, Dm);
    for (int l = 0; l < Lm; l++) {
        const ac_block_dims *b = &a->layers[l];
        float *arrays[4] = {imp.mamba_heads[l], imp.experts[l], imp.ffn[l], imp.shared_ffn[l]};
        int lens[4] = {b->mamba_heads, b->n_experts, b->kind == AC_BLOCK_MLP ? b->ffn : b->expert_ffn, b->shared_ffn};
        int groups[4] = {b->mamba_groups ? b->mamba_heads / b->mamba_groups : 1,
                         b->n_group > 1 ? b->n_experts / b->n_group : b->n_experts, lens[2], lens[3]};
        for (int k = 0; k < 4; k++) {
            if (!arrays[k])
                continue;
            char what[48];
            snprintf(what, sizeof what, "layers.%d.%d", l, k);
            assert_non_increasing(what, arrays[k], lens[k], groups[k]);
            moved_layers += differs(copies[l][k], arrays[k], lens[k]);
            free(copies[l][k]);
        }
    }
    printf("  %-22s moved: hidden %s, %d per-layer arrays\n", name, moved ? "yes" : "no", moved_layers);
    assert_true(moved);
    assert_true(moved_layers > 0);

    /* sorted already: a second reorder is the identity on every weight */
    size_t count;
    float *arena = ac_model_arena(m, &count);
    float *snapshot = malloc(count * sizeof *snapshot);
    memcpy(snapshot, arena, count * sizeof *snapshot);
    assert_int_equal(ac_model_reorder(m, &imp), AC_OK);
    assert_memory_equal(snapshot, arena, count * sizeof *snapshot);

    free(snapshot);
    free(hidden0);
    free(before);
    free(after);
    ac_importance_free(&imp);
}

static void test_reorder_preserves_function(void **state)
{
    (void)state;
    int32_t calib[NS * SL], prompt[9];
    calib_tokens(calib, NS * SL, 5);
    calib_tokens(prompt, 9, 9);
    for (int tied = 0; tied <= 1; tied++) {
        ac_model *m = make_model(tied, 1);
        check_reorder(tied ? "tiny, tied embeddings" : "tiny, untied", m, calib, NS, SL, prompt, 9, 1e-5);
        ac_model_free(m);
    }
    /* group-limited routing: experts are sorted within their routing group */
    ac_model *m = make_model(0, 2);
    m->layers[3].router_bias[3] = 0.05f; /* both groups in play */
    check_reorder("tiny, expert groups", m, calib, NS, SL, prompt, 9, 1e-5);
    ac_model_free(m);
}

static void test_reorder_prose_parent(void **state)
{
    (void)state;
    ac_model *m;
    assert_int_equal(ac_model_load(AC_SOURCE_DIR "/examples/parent/prose", &m), AC_OK);
    const ac_arch *a = ac_model_arch(m);
    int32_t calib[2 * 16], prompt[8];
    for (int i = 0; i < 2 * 16; i++)
        calib[i] = (int32_t)((i * 977 + 13) % a->vocab);
    for (int i = 0; i < 8; i++)
        prompt[i] = (int32_t)((i * 331 + 7) % a->vocab);
    /* 12 layers at hidden 256 in float: the engine's own prefill and token-by-token decode
     * of this prompt differ by about 1.2e-5 at logits near 13, so the bound scales */
    check_reorder("prose parent", m, calib, 2, 16, prompt, 8, 1e-5);
    ac_model_free(m);
}

/* ---- save and load ---- */

static void assert_same_importance(const ac_importance *x, const ac_importance *y, const ac_arch *a)
{
    assert_int_equal(x->n_layers, y->n_layers);
    assert_int_equal(x->hidden, y->hidden);
    assert_true(x->tokens == y->tokens);
    assert_memory_equal(x->hidden_channels, y->hidden_channels, (size_t)a->hidden * sizeof(float));
    assert_memory_equal(x->depth, y->depth, (size_t)a->n_layers * sizeof(float));
    for (int l = 0; l < a->n_layers; l++) {
        const ac_block_dims *b = &a->layers[l];
        const float *xs[4] = {x->mamba_heads[l], x->experts[l], x->ffn[l], x->shared_ffn[l]};
        const float *ys[4] = {y->mamba_heads[l], y->experts[l], y->ffn[l], y->shared_ffn[l]};
        int lens[4] = {b->mamba_heads, b->n_experts, b->kind == AC_BLOCK_MLP ? b->ffn : b->expert_ffn, b->shared_ffn};
        for (int k = 0; k < 4; k++) {
            assert_true(!xs[k] == !ys[k]);
            if (xs[k])
                assert_memory_equal(xs[k], ys[k], (size_t)lens[k] * sizeof(float));
        }
    }
}

/* Loading `path` against arch fails and the message names `tensor`. */
static void assert_load_fails(const char *path, const ac_arch *arch, const char *tensor)
{
    ac_importance imp;
    assert_int_not_equal(ac_importance_load(path, arch, &imp), AC_OK);
    const char *msg = ac_error_message();
    printf("  mismatch: %s\n", msg);
    if (!strstr(msg, tensor))
        fail_msg("the message does not name '%s': %s", tensor, msg);
    assert_null(imp.hidden_channels);
}

static void test_save_load(void **state)
{
    (void)state;
    ac_model *m = make_model(0, 1);
    int32_t tok[NS * SL];
    calib_tokens(tok, NS * SL, 3);
    ac_importance imp, back;
    assert_int_equal(ac_importance_compute(m, tok, NS, SL, &imp), AC_OK);

    char dir[] = "/tmp/ac_importance_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/importance.safetensors", dir);
    assert_int_equal(ac_importance_save(&imp, path), AC_OK);
    const ac_arch *a = ac_model_arch(m);
    assert_int_equal(ac_importance_load(path, a, &back), AC_OK);
    assert_same_importance(&imp, &back, a);
    /* a loaded importance saves and reorders like a computed one */
    assert_int_equal(ac_importance_save(&back, path), AC_OK);
    ac_importance_free(&back);

    ac_arch other;
    assert_int_equal(ac_arch_copy(&other, a), AC_OK);
    other.layers[3].expert_ffn = I + 1; /* the MoE's routed channels */
    assert_load_fails(path, &other, "layers.3.ffn");
    other.layers[3].expert_ffn = I;
    other.layers[1].kind = AC_BLOCK_MLP; /* attention -> MLP: an FFN array the file lacks */
    assert_load_fails(path, &other, "layers.1.ffn");
    other.layers[1].kind = AC_BLOCK_ATTENTION;
    other.layers[2].kind = AC_BLOCK_ATTENTION; /* MLP -> attention: an FFN array the arch lacks */
    assert_load_fails(path, &other, "layers.2.ffn");
    other.layers[2].kind = AC_BLOCK_MLP;
    other.hidden = D + 2;
    assert_load_fails(path, &other, "hidden");
    ac_arch_free(&other);

    /* a hand-built importance without its architecture cannot be saved */
    ac_importance bare = imp;
    memset(&bare.arch, 0, sizeof bare.arch);
    assert_int_not_equal(ac_importance_save(&bare, path), AC_OK);

    unlink(path);
    rmdir(dir);
    ac_importance_free(&imp);
    ac_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_importance_matches_naive),
        cmocka_unit_test(test_reorder_preserves_function),
        cmocka_unit_test(test_reorder_prose_parent),
        cmocka_unit_test(test_save_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
