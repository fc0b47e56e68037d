/* The memory model and the runtime read one plan: after serving a workload, what the
 * runtime and the caches hold equals the formula's R and P exactly, and the KV and
 * state sizes equal the block dims worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/cost.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"

enum { V = 32, D = 16, L = 4, BATCH = 2, INPUT = 12, OUTPUT = 5 };

static ac_model *make_model(const char *pattern)
{
    ac_arch a = {.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 8,
                                      .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 4,
                                      .ffn = 40, .n_experts = 4, .top_k = 2, .expert_ffn = 6, .shared_ffn = 5,
                                      .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 1.0f};
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, 3, 0.1f);
    return m;
}

/* The workload served the way the profiler serves it: the batch's prompts in one
 * forward, then a token per sequence per step. */
static void serve(const ac_model *m, ac_runtime *rt, ac_cache **caches)
{
    int32_t prompt[BATCH][INPUT], next[BATCH];
    const int32_t *tok[BATCH];
    int n[BATCH];
    float logits[BATCH * V];
    for (int s = 0; s < BATCH; s++) {
        for (int t = 0; t < INPUT; t++)
            prompt[s][t] = (s * 5 + t * 3) % V;
        tok[s] = prompt[s];
        n[s] = INPUT;
        assert_int_equal(ac_cache_create(m, &caches[s]), AC_OK);
    }
    ac_batch b = {.n_seqs = BATCH, .tokens = tok, .n_tokens = n, .caches = caches};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_OK);
    for (int step = 1; step < OUTPUT; step++) {
        for (int s = 0; s < BATCH; s++) {
            next[s] = (step + s) % V;
            tok[s] = &next[s];
            n[s] = 1;
        }
        assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits), AC_OK);
    }
}

static void check_pattern(const char *pattern)
{
    ac_model *m = make_model(pattern);
    const ac_arch *a = ac_model_arch(m);
    ac_runtime *rt;
    ac_cache *caches[BATCH];
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    serve(m, rt, caches);

    ac_contract_workload w;
    memset(&w, 0, sizeof w);
    w.batch = BATCH;
    w.input_tokens = INPUT;
    w.output_tokens = OUTPUT;
    ac_memory_terms f = ac_memory_formula(a, AC_DTYPE_F32, &w, omp_get_max_threads());

    /* R: the runtime's buffers plus the caller's logits of the batch */
    double held = (double)ac_runtime_bytes(rt) + (double)BATCH * V * sizeof(float);
    printf("%s: R formula %.0f bytes, runtime %.0f\n", pattern, f.activations, held);
    assert_true(f.activations == held);

    /* P and C against the dims by hand */
    double state = 0, kv_per_token = 0;
    for (int i = 0; i < L; i++) {
        const ac_block_dims *b = &a->layers[i];
        if (b->kind == AC_BLOCK_MAMBA) {
            int conv_dim = b->mamba_heads * b->mamba_head_dim + 2 * b->mamba_groups * b->ssm_state;
            state += (double)conv_dim * (b->conv_kernel - 1) + (double)b->mamba_heads * b->mamba_head_dim * b->ssm_state;
        }
        if (b->kind == AC_BLOCK_ATTENTION)
            kv_per_token += 2.0 * b->attn_kv_heads * b->attn_head_dim;
    }
    double rows = INPUT + OUTPUT - 1;
    assert_true(f.state == BATCH * state * sizeof(float));
    assert_true(f.kv == BATCH * kv_per_token * rows * sizeof(float));
    for (int s = 0; s < BATCH; s++) {
        assert_int_equal(ac_cache_tokens(caches[s]), INPUT + OUTPUT - 1);
        assert_true((double)ac_cache_state_bytes(caches[s]) == state * sizeof(float));
        /* KV is allocated in powers of two from 64 rows */
        assert_true((double)ac_cache_bytes(caches[s]) == (state + kv_per_token * 64) * sizeof(float));
        ac_cache_free(caches[s]);
    }
    ac_runtime_free(rt);
    ac_model_free(m);
}

static void test_memory_formula_equals_runtime_allocation(void **state)
{
    (void)state;
    check_pattern("M*-E");
    check_pattern("EM*M"); /* the widest scratch in another kind */
    check_pattern("--**");
}

/* A snapshot taken after a prefix, restored after more tokens, resumes exactly. */
static void test_cache_state_snapshot(void **state)
{
    (void)state;
    ac_model *m = make_model("M*ME");
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c), AC_OK);
    int32_t prefix[6] = {1, 2, 3, 4, 5, 6}, more[3] = {7, 8, 9}, probe_tok[1] = {10};
    const int32_t *tok[1] = {prefix};
    int n[1] = {6};
    ac_batch b = {.n_seqs = 1, .tokens = tok, .n_tokens = n, .caches = &c};
    float first[V], again[V];
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_NONE, NULL), AC_OK);
    size_t floats = ac_cache_state_bytes(c) / sizeof(float);
    float *snap = malloc(floats * sizeof *snap);
    ac_cache_save_state(c, snap);
    tok[0] = probe_tok;
    n[0] = 1;
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, first), AC_OK);
    tok[0] = more;
    n[0] = 3;
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_NONE, NULL), AC_OK);
    ac_cache_restore_state(c, snap, 6);
    assert_int_equal(ac_cache_tokens(c), 6);
    tok[0] = probe_tok;
    n[0] = 1;
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_LAST, again), AC_OK);
    assert_memory_equal(first, again, sizeof first);
    free(snap);
    ac_cache_free(c);
    ac_runtime_free(rt);
    ac_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_formula_equals_runtime_allocation),
        cmocka_unit_test(test_cache_state_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
