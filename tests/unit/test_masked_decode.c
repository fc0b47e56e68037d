/* Masks on the inference path: a masked model prefilled and decoded with caches gives
 * the logits of the masked training forward (no caches); hard masks that switch off a
 * tail of MLP channels, shared-expert channels and whole Mamba groups give the logits of
 * the model sliced to the smaller widths (built independently, by ac_model_slice); masks
 * of ones change no bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/train.h"
#include "grad_check.h"

enum { T = 9, V = 24, D = 16, L = 4, H = 4, E = 4, F = 12, S = 5 };

static void make_arch(ac_arch *a, int heads, int groups, int ffn, int shared)
{
    const char *pattern = "M*-E";
    *a = (ac_arch){.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a->layers[i] = (ac_block_dims){.mamba_heads = heads, .mamba_head_dim = 4, .mamba_groups = groups,
                                       .ssm_state = 4, .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2,
                                       .attn_head_dim = 4, .ffn = ffn, .n_experts = E, .top_k = 2,
                                       .expert_ffn = 6, .shared_ffn = shared, .n_group = 1, .topk_group = 1,
                                       .norm_topk_prob = 1, .routed_scaling = 2.0f};
        a->layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                            : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
}

static ac_model *make_model(void)
{
    ac_arch a;
    make_arch(&a, H, 2, F, S);
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, 11, 0.3f);
    return m;
}

static void tokens_of(int32_t *tok)
{
    for (int t = 0; t < T; t++)
        tok[t] = (t * 7 + 3) % V;
}

/* Every position's logits of one sequence through the runtime: a prefill of the first
 * `prefill` tokens, then one token a step. */
static void decode(const ac_model *m, const ac_masks *masks, int prefill, float *logits)
{
    int32_t tok[T];
    tokens_of(tok);
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c), AC_OK);
    ac_runtime_set_masks(rt, masks);
    const int32_t *seq[1] = {tok};
    int n[1] = {prefill};
    ac_batch b = {.n_seqs = 1, .tokens = seq, .n_tokens = n, .caches = &c};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_ALL, logits), AC_OK);
    for (int t = prefill; t < T; t++) {
        seq[0] = tok + t;
        n[0] = 1;
        assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits + (size_t)t * V), AC_OK);
    }
    ac_cache_free(c);
    ac_runtime_free(rt);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst;
}

typedef struct {
    float hidden[D], gate[L], heads[H], experts[E], ffn[F], expert_ffn[6], shared[S];
    const float *heads_of[L], *experts_of[L], *ffn_of[L], *shared_of[L];
    ac_masks masks;
} soft_masks;

/* Soft masks on every axis, each only on the layers of its kind. */
static void make_soft_masks(soft_masks *s)
{
    gc_fill(s->hidden, D, 0.3f, 1.0f, 1);
    gc_fill(s->gate, L, 0.5f, 1.0f, 2);
    gc_fill(s->heads, H, 0.2f, 1.0f, 3);
    gc_fill(s->experts, E, 0.2f, 1.0f, 4);
    gc_fill(s->ffn, F, 0.2f, 1.0f, 5);
    gc_fill(s->expert_ffn, 6, 0.2f, 1.0f, 6);
    gc_fill(s->shared, S, 0.2f, 1.0f, 7);
    memset(s->heads_of, 0, sizeof s->heads_of);
    memset(s->experts_of, 0, sizeof s->experts_of);
    memset(s->ffn_of, 0, sizeof s->ffn_of);
    memset(s->shared_of, 0, sizeof s->shared_of);
    s->heads_of[0] = s->heads;
    s->ffn_of[2] = s->ffn;
    s->experts_of[3] = s->experts;
    s->ffn_of[3] = s->expert_ffn;
    s->shared_of[3] = s->shared;
    s->masks = (ac_masks){.hidden = s->hidden, .mamba_heads = s->heads_of, .experts = s->experts_of,
                          .ffn = s->ffn_of, .shared_ffn = s->shared_of, .layer_gate = s->gate};
}

static void test_masked_decode_equals_masked_training_forward(void **state)
{
    (void)state;
    ac_model *m = make_model();
    soft_masks s;
    make_soft_masks(&s);

    int32_t tok[T], targets[T];
    tokens_of(tok);
    for (int t = 0; t < T; t++)
        targets[t] = tok[(t + 1) % T];
    ac_train_step *step;
    assert_int_equal(ac_train_step_create(m, 1, T, &step), AC_OK);
    ac_step_inputs in = {.tokens = tok, .targets = targets, .masks = &s.masks};
    double loss;
    assert_int_equal(ac_train_step_loss(step, &in, &loss), AC_OK);
    const float *want = ac_train_step_logits(step);

    float got[T * V], unmasked[T * V];
    for (int prefill = 1; prefill <= T; prefill += 4) {
        decode(m, &s.masks, prefill, got);
        double err = max_abs_diff(got, want, (size_t)T * V);
        printf("prefill %d then decode: max |masked runtime - masked training| = %.3g\n", prefill, err);
        assert_true(err < 1e-5);
    }
    /* the masks do act: without them the logits are far off */
    decode(m, NULL, T, unmasked);
    assert_true(max_abs_diff(unmasked, want, (size_t)T * V) > 1e-2);
    ac_train_step_free(step);
    ac_model_free(m);
}

static void test_ones_masks_change_no_bit(void **state)
{
    (void)state;
    ac_model *m = make_model();
    soft_masks s;
    make_soft_masks(&s);
    float *all[] = {s.hidden, s.gate, s.heads, s.experts, s.ffn, s.expert_ffn, s.shared};
    size_t len[] = {D, L, H, E, F, 6, S};
    for (int k = 0; k < 7; k++)
        for (size_t i = 0; i < len[k]; i++)
            all[k][i] = 1.0f;
    float plain[T * V], masked[T * V];
    decode(m, NULL, 4, plain);
    decode(m, &s.masks, 4, masked);
    assert_memory_equal(plain, masked, sizeof plain);
    ac_model_free(m);
}

/* Masking the tail is removing it: MLP channels past 7, shared-expert channels past 3,
 * and the second of two Mamba groups (heads 2 and 3; the gated norm works within
 * groups, so a zeroed group leaves the other untouched) equal a model sliced to ffn 7,
 * shared 3 and 2 heads in 1 group. */
static void test_hard_masks_equal_the_sliced_model(void **state)
{
    (void)state;
    ac_model *parent = make_model();
    float heads[H] = {1, 1, 0, 0}, ffn[F], shared[S];
    for (int i = 0; i < F; i++)
        ffn[i] = i < 7 ? 1.0f : 0.0f;
    for (int i = 0; i < S; i++)
        shared[i] = i < 3 ? 1.0f : 0.0f;
    const float *heads_of[L] = {heads, NULL, NULL, NULL};
    const float *ffn_of[L] = {NULL, NULL, ffn, NULL};
    const float *shared_of[L] = {NULL, NULL, NULL, shared};
    ac_masks masks = {.mamba_heads = heads_of, .ffn = ffn_of, .shared_ffn = shared_of};

    ac_arch small;
    make_arch(&small, 2, 1, 7, 3);
    ac_model *child;
    assert_int_equal(ac_model_slice(parent, &small, NULL, 99, &child), AC_OK);
    ac_arch_free(&small);

    float masked[T * V], sliced[T * V];
    decode(parent, &masks, 5, masked);
    decode(child, NULL, 5, sliced);
    double err = max_abs_diff(masked, sliced, (size_t)T * V);
    printf("max |hard-masked parent - sliced child| = %.3g\n", err);
    assert_true(err < 1e-5);
    ac_model_free(child);
    ac_model_free(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_decode_equals_masked_training_forward),
        cmocka_unit_test(test_ones_masks_change_no_bit),
        cmocka_unit_test(test_hard_masks_equal_the_sliced_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
