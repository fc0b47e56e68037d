/* Decode and prefill of a ~1B-parameter Nemotron-H on the CUDA backend, made in place
 * with random weights (no download):
 *   bench_cuda [--prompt P] [--gen G] [--device cuda|cpu] [--weights f32|bf16]
 * (cpu: a dry run of the code; bf16: a serving copy, its product weights in bf16)
 * The model: hidden 2048, 26 layers (12 Mamba2 of 64 heads x 64, state 128, 8 groups; 12
 * relu2 MLPs of 10240; 2 GQA attention layers of 16 x 128 heads, 4 KV heads), vocabulary
 * 32768, f32 weights (3.8 GB; 1.9 GB in bf16). Prints one JSON line:
 * - decode at batch 1 after a P-token prompt: tokens/s, and the weight bytes a step reads
 *   per second against a device-to-device copy measured in the same run (read + write
 *   bytes per second: the memory-bandwidth bound);
 * - prefill of P tokens: tokens/s and TFLOP/s (2 x active parameters a token), against
 *   the GEMM rate of the backend's linear op (linear_bf16 for bf16 weights) on the model's
 *   own weight shapes at P rows.
 * Exits 77 when the build or the machine has no CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/model.h"
#include "autocompress/host.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char pattern[] = "M-M-M-M-M-*M-M-M-M-M-*M-M-";

static int make_arch(ac_arch *a)
{
    *a = (ac_arch){.vocab = 32768, .hidden = 2048, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 128,
                   .time_step_min = 1e-3f};
    int L = (int)strlen(pattern);
    if (ac_arch_alloc_layers(a, L) != AC_OK)
        return 1;
    for (int i = 0; i < L; i++) {
        a->layers[i] = (ac_block_dims){.mamba_heads = 64, .mamba_head_dim = 64, .mamba_groups = 8, .ssm_state = 128,
                                       .conv_kernel = 4, .attn_heads = 16, .attn_kv_heads = 4, .attn_head_dim = 128,
                                       .ffn = 10240};
        a->layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                                                                                   : AC_BLOCK_MLP;
    }
    return 0;
}

/* Small random weights; norms and D near one, A_log near one: a model whose activations
 * stay finite over the prompt. */
static void init_weights(ac_model *m)
{
    size_t n;
    float *w = ac_model_arena(m, &n);
    uint64_t state = 42;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        w[i] = ((float)(state >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
    }
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        const char *tail = strrchr(p->name, '.');
        int one = strstr(p->name, "norm") || (tail && (!strcmp(tail, ".D") || !strcmp(tail, ".A_log")));
        for (size_t j = 0; one && j < p->count; j++)
            p->data[j] += 1.0f;
    }
}

/* Device-to-device copy: bytes moved (read + written) per second. */
static double copy_rate(const ac_backend *be, size_t bytes, int reps)
{
    void *a = be->alloc(bytes), *b = be->alloc(bytes);
    double rate = 0.0;
    if (a && b) {
        be->memset_zero(a, bytes);
        be->copy(b, a, bytes, AC_COPY_DEVICE_TO_DEVICE);
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            be->copy(b, a, bytes, AC_COPY_DEVICE_TO_DEVICE);
        rate = 2.0 * (double)bytes * reps / (now_s() - t0);
    }
    be->free(a);
    be->free(b);
    return rate;
}

/* The backend's linear op over every weight matrix of the model at M rows, the best of
 * three passes: FLOP/s. */
static double gemm_rate(const ac_backend *be, const ac_model *m, int M)
{
    int D = m->arch.hidden, widest = D;
    for (size_t i = 0; i < m->n_params; i++)
        if (m->params[i].ndim == 2 && m->params[i].shape[1] > widest)
            widest = (int)m->params[i].shape[1];
    float *x = be->alloc((size_t)M * widest * sizeof *x), *y = be->alloc((size_t)M * 32768 * sizeof *y);
    ac_kctx ctx = {.backend = be};
    double best = 0.0;
    if (x && y) {
        be->memset_zero(x, (size_t)M * widest * sizeof *x);
        for (int pass = 0; pass < 3; pass++) {
            double flops = 0.0, t0 = now_s();
            for (size_t i = 0; i < m->n_params; i++) {
                const ac_param *p = &m->params[i];
                if (p->ndim != 2 || p->data == m->embeddings)
                    continue;
                int N = (int)p->shape[0], K = (int)p->shape[1];
                if (p->dtype == AC_DTYPE_BF16)
                    ac_k_linear_bf16(&ctx, M, N, K, 1.0f, x, K, (const uint16_t *)(const void *)p->data, 0.0f, y, N);
                else
                    ac_k_linear(&ctx, M, N, K, x, K, p->data, 0.0f, y, N);
                flops += 2.0 * M * N * K;
            }
            be->sync(&ctx);
            double rate = flops / (now_s() - t0);
            best = rate > best ? rate : best;
        }
    }
    be->free(x);
    be->free(y);
    return best;
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    int P = 512, G = 32, bad = argc % 2 == 0;
    const char *device = "cuda";
    ac_dtype weights = AC_DTYPE_F32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--prompt"))
            P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen"))
            G = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
        else if (!strcmp(argv[i], "--weights"))
            bad |= ac_weights_dtype_parse("--weights", argv[i + 1], &weights) != AC_OK;
        else
            bad = 1;
    }
    if (P < 1 || G < 1 || bad) {
        fprintf(stderr, "usage: bench_cuda [--prompt P] [--gen G] [--device cuda|cpu] [--weights f32|bf16]\n");
        return 2;
    }
    char why[256];
    const ac_backend *be = ac_backend_select(device, why, sizeof why);
    if (!be) {
        printf("bench_cuda: skipped: %s\n", why);
        return 77;
    }
    ac_arch a;
    ac_model *host, *m;
    ac_runtime *rt;
    ac_cache *cache;
    if (make_arch(&a) || ac_model_create(&a, &host) != AC_OK) {
        fprintf(stderr, "bench_cuda: %s\n", ac_error_message());
        return 1;
    }
    init_weights(host);
    ac_status st = ac_model_to_device_as(host, device, weights, &m);
    ac_model_free(host);
    if (st == AC_OK)
        st = ac_runtime_create(m, &rt);
    if (st == AC_OK)
        st = ac_cache_create(m, &cache);
    if (st != AC_OK) {
        fprintf(stderr, "bench_cuda: %s\n", ac_error_message());
        return 1;
    }
    ac_param_counts counts = ac_arch_param_counts(&a);
    int V = a.vocab;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    float *logits = malloc((size_t)V * sizeof *logits);
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)((i * 7919) % V);
    double prefill = 1e30, decode = 1e30;
    for (int r = -1; r < 3; r++) { /* one untimed round: first touch, cuBLAS's setup */
        ac_cache_clear(cache);
        const int32_t *tokens[1] = {prompt};
        int n[1] = {P};
        ac_batch batch = {.n_seqs = 1, .tokens = tokens, .n_tokens = n, .caches = &cache};
        double t0 = now_s();
        st = ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
        double t1 = now_s();
        for (int g = 0; st == AC_OK && g < G; g++) {
            int32_t next = ac_argmax(logits, V);
            tokens[0] = &next;
            n[0] = 1;
            st = ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
        }
        double t2 = now_s();
        if (r >= 0) {
            prefill = t1 - t0 < prefill ? t1 - t0 : prefill;
            decode = t2 - t1 < decode ? t2 - t1 : decode;
        }
    }
    const char *failure = be->take_error();
    if (st != AC_OK || failure) {
        fprintf(stderr, "bench_cuda: %s\n", failure ? failure : ac_error_message());
        return 1;
    }
    /* a decode step reads every weight (all active: no MoE) but the embedding table's other rows */
    double step_bytes = 0.0;
    for (size_t i = 0; i < m->n_params; i++) {
        const ac_param *p = &m->params[i];
        size_t elem = p->dtype == AC_DTYPE_BF16 ? 2 : 4;
        step_bytes += (double)elem * (p->data == m->embeddings ? (size_t)a.hidden : p->count);
    }
    double step = decode / G, bound = copy_rate(be, (size_t)1 << 30, 10), gemm = gemm_rate(be, m, P);
    double prefill_flops = 2.0 * (double)counts.active * P / prefill;
    printf("{\"weights\": \"%s\", \"params\": %lld, \"prompt\": %d, \"gen\": %d, \"decode_tok_s\": %.1f, \"decode_step_ms\": %.3f, "
           "\"decode_read_gbps\": %.1f, \"copy_gbps\": %.1f, \"decode_fraction_of_bandwidth\": %.3f, "
           "\"prefill_tok_s\": %.1f, \"prefill_tflops\": %.2f, \"gemm_tflops_same_shapes\": %.2f, "
           "\"prefill_fraction_of_gemm\": %.3f}\n",
           ac_weights_dtype_name(weights), (long long)counts.total, P, G, G / decode, step * 1e3, step_bytes / step / 1e9, bound / 1e9,
           step_bytes / step / bound, P / prefill, prefill_flops / 1e12, gemm / 1e12, prefill_flops / gemm);
    free(prompt);
    free(logits);
    ac_cache_free(cache);
    ac_runtime_free(rt);
    ac_model_free(m);
    ac_arch_free(&a);
    return 0;
}
