/* Prefill and decode throughput of the CPU engine.
 *   bench_runtime --make-model DIR          writes a ~10M-parameter random hybrid model
 *   bench_runtime --model DIR --batch B --prompt P --gen G [--repeats R] [--warmup]
 * prints one JSON line: prefill and decode tokens/s (best of R); --warmup runs the
 * workload once untimed first (as llama-bench does), so that a single timed repeat does
 * not pay for the first touch of the mapped weights and the buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/model.h"
#include "autocompress/host.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Nemotron-3-Nano-like miniature: one attention layer in twelve, MoE with 16 experts. */
static int make_model(const char *dir)
{
    const char *pattern = "MEMEM*EMEMEM";
    ac_arch a = {.vocab = 4096, .hidden = 256, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 128, .time_step_min = 1e-3f};
    if (ac_arch_alloc_layers(&a, (int)strlen(pattern)) != AC_OK)
        return 1;
    for (int i = 0; pattern[i]; i++) {
        ac_block_dims *b = &a.layers[i];
        *b = (ac_block_dims){.mamba_heads = 8, .mamba_head_dim = 32, .mamba_groups = 2, .ssm_state = 32, .conv_kernel = 4,
                             .attn_heads = 8, .attn_kv_heads = 2, .attn_head_dim = 32, .ffn = 512, .n_experts = 16, .top_k = 2,
                             .expert_ffn = 128, .shared_ffn = 256, .n_group = 1, .topk_group = 1, .norm_topk_prob = 1,
                             .routed_scaling = 2.5f};
        b->kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION : AC_BLOCK_MOE;
    }
    ac_model *m;
    if (ac_model_create(&a, &m) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return 1;
    }
    size_t n;
    float *w = ac_model_arena(m, &n);
    uint64_t state = 42;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        w[i] = ((float)(state >> 40) / (float)(1 << 24) - 0.5f) * 0.08f;
    }
    /* norms near one, positive decay rates, unit skip: a model that behaves like one */
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        const char *tail = strrchr(p->name, '.');
        int norm = strstr(p->name, "norm") != NULL;
        int a_log = tail && !strcmp(tail, ".A_log");
        int d = tail && !strcmp(tail, ".D");
        for (size_t j = 0; j < p->count; j++)
            p->data[j] = norm || d ? 1.0f + p->data[j] : a_log ? 1.0f + 10.0f * p->data[j] : p->data[j];
    }
    ac_status st = ac_model_save(m, dir, AC_DTYPE_F32);
    ac_param_counts c = ac_arch_param_counts(&a);
    printf("{\"model\": \"%s\", \"params\": %lld, \"active\": %lld}\n", dir, (long long)c.total, (long long)c.active);
    ac_model_free(m);
    ac_arch_free(&a);
    if (st != AC_OK)
        fprintf(stderr, "%s\n", ac_error_message());
    return st != AC_OK;
}

static int bench(const char *dir, int B, int P, int G, int repeats, int warmup)
{
    ac_model *m;
    ac_runtime *rt;
    if (ac_model_load(dir, &m) != AC_OK || ac_runtime_create(m, &rt) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return 1;
    }
    int V = ac_model_arch(m)->vocab;
    int32_t *prompt = malloc((size_t)B * P * sizeof *prompt);
    int32_t *next = malloc((size_t)B * sizeof *next);
    float *logits = malloc((size_t)B * V * sizeof *logits);
    ac_cache **caches = calloc((size_t)B, sizeof *caches);
    const int32_t **tokens = calloc((size_t)B, sizeof *tokens);
    int *n_tokens = calloc((size_t)B, sizeof *n_tokens);
    for (int i = 0; i < B * P; i++)
        prompt[i] = (int32_t)((i * 7919) % V);
    for (int s = 0; s < B; s++)
        ac_cache_create(m, &caches[s]);
    double best_prefill = 1e30, best_decode = 1e30;
    for (int r = -warmup; r < repeats; r++) {
        for (int s = 0; s < B; s++) {
            ac_cache_clear(caches[s]);
            tokens[s] = prompt + (size_t)s * P;
            n_tokens[s] = P;
        }
        ac_batch batch = {.n_seqs = B, .tokens = tokens, .n_tokens = n_tokens, .caches = caches};
        double t0 = now_s();
        ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
        double t1 = now_s();
        for (int g = 0; g < G; g++) {
            for (int s = 0; s < B; s++) {
                next[s] = ac_argmax(logits + (size_t)s * V, V);
                tokens[s] = &next[s];
                n_tokens[s] = 1;
            }
            ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
        }
        double t2 = now_s();
        if (r < 0)
            continue;
        if (t1 - t0 < best_prefill)
            best_prefill = t1 - t0;
        if (t2 - t1 < best_decode)
            best_decode = t2 - t1;
    }
    printf("{\"engine\": \"autocompress\", \"batch\": %d, \"prompt\": %d, \"gen\": %d, \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.1f}\n",
           B, P, G, B * P / best_prefill, B * G / best_decode);
    for (int s = 0; s < B; s++)
        ac_cache_free(caches[s]);
    free(caches);
    free(tokens);
    free(n_tokens);
    free(prompt);
    free(next);
    free(logits);
    ac_runtime_free(rt);
    ac_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    const char *model = NULL;
    int B = 1, P = 128, G = 32, repeats = 3, warmup = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--make-model") && i + 1 < argc)
            return make_model(argv[i + 1]);
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc)
            G = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = 1;
        else {
            fprintf(stderr, "usage: bench_runtime --make-model DIR | --model DIR [--batch B] [--prompt P] [--gen G] [--repeats R] "
                            "[--warmup]\n");
            return 2;
        }
    }
    if (!model || B < 1 || P < 1 || G < 0 || repeats < 1) {
        fprintf(stderr, "bench_runtime: --model DIR is required; sizes must be positive\n");
        return 2;
    }
    return bench(model, B, P, G, repeats, warmup);
}
