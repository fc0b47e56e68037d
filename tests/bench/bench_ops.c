/* Where a step's time goes, op by op: the model runs on a copy of the CPU backend whose
 * every op is timed (GEMMs keyed by their shape), then one line per op kind and shape,
 * largest first: milliseconds a step, share of the step, calls a step; the backend's copies
 * and zero fills count as ops. The time between ops (the driver's own work) is the step's
 * time minus the ops'.
 *   bench_ops --model DIR --train B T [--steps N]        a training step (targets)
 *   bench_ops --model DIR --decode PROMPT GEN            decode steps at PROMPT's depth
 *   bench_ops --model DIR --prefill PROMPT [--steps N]   prefills of PROMPT tokens
 * A profile, not a benchmark: the timers cost ~50 ns an op, and nothing else should run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/model.h"
#include "autocompress/host.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/train.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { MAX_KEYS = 1024, KEY_LEN = 80 };
static char keys[MAX_KEYS][KEY_LEN];
static double seconds[MAX_KEYS];
static long calls[MAX_KEYS];
static int n_keys;

static void account(const char *key, double s)
{
    for (int i = 0; i < n_keys; i++)
        if (!strcmp(keys[i], key)) {
            seconds[i] += s;
            calls[i]++;
            return;
        }
    if (n_keys == MAX_KEYS)
        return;
    snprintf(keys[n_keys], KEY_LEN, "%s", key);
    seconds[n_keys] = s;
    calls[n_keys++] = 1;
}

#define AC_OP(name, params, args)      \
    static void timed_##name params    \
    {                                  \
        double t0_ = now_s();          \
        ac_cpu_##name args;            \
        account(#name, now_s() - t0_); \
    }
#define AC_OP_VALUE(type, name, params, args) \
    static type timed_##name params           \
    {                                         \
        double t0_ = now_s();                 \
        type value_ = ac_cpu_##name args;     \
        account(#name, now_s() - t0_);        \
        return value_;                        \
    }
#include "kernels/ops.def"

/* GEMMs by shape, the rest by name */
static void timed_linear_shaped(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                                float beta, float *C, int ldc)
{
    char key[KEY_LEN];
    double t0 = now_s();
    ac_cpu_linear(ctx, M, N, K, A, lda, W, beta, C, ldc);
    snprintf(key, sizeof key, "linear M%d N%d K%d", M, N, K);
    account(key, now_s() - t0);
}

static void timed_linear_backward_shaped(ac_kctx *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                                         const float *dC, int lddc, float beta_dA, float *dA, int ldda, float *dW)
{
    char key[KEY_LEN];
    double t0 = now_s();
    ac_cpu_linear_backward(ctx, M, N, K, A, lda, W, dC, lddc, beta_dA, dA, ldda, dW);
    snprintf(key, sizeof key, "linear_backward M%d N%d K%d%s%s", M, N, K, dA ? " dA" : "", dW ? " dW" : "");
    account(key, now_s() - t0);
}

static void timed_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    double t0 = now_s();
    ac_cpu_backend.copy(dst, src, bytes, kind);
    char key[KEY_LEN];
    snprintf(key, sizeof key, "copy %zu KB", bytes >> 10);
    account(key, now_s() - t0);
}

static void timed_memset_zero(void *p, size_t bytes)
{
    double t0 = now_s();
    ac_cpu_backend.memset_zero(p, bytes);
    account("memset_zero", now_s() - t0);
}

static ac_backend timed_backend(void)
{
    ac_backend b = ac_cpu_backend;
    b.name = "timed";
#define AC_OP(name, params, args) b.name = timed_##name;
#define AC_OP_VALUE(type, name, params, args) b.name = timed_##name;
#include "kernels/ops.def"
    b.linear = timed_linear_shaped;
    b.linear_backward = timed_linear_backward_shaped;
    b.copy = timed_copy;
    b.memset_zero = timed_memset_zero;
    return b;
}

static void report(const char *what, double step_s, int steps)
{
    double ops = 0.0;
    for (int i = 0; i < n_keys; i++)
        ops += seconds[i];
    for (int a = 0; a < n_keys; a++) /* largest first */
        for (int b = a + 1; b < n_keys; b++)
            if (seconds[b] > seconds[a]) {
                char k[KEY_LEN];
                double s = seconds[a];
                long c = calls[a];
                memcpy(k, keys[a], KEY_LEN);
                memcpy(keys[a], keys[b], KEY_LEN);
                memcpy(keys[b], k, KEY_LEN);
                seconds[a] = seconds[b], seconds[b] = s;
                calls[a] = calls[b], calls[b] = c;
            }
    printf("%s: %.3f ms a step, ops %.3f ms, between ops %.3f ms\n", what, 1e3 * step_s / steps, 1e3 * ops / steps,
           1e3 * (step_s - ops) / steps);
    printf("%10s %7s %8s  %s\n", "ms/step", "share", "calls", "op");
    for (int i = 0; i < n_keys; i++)
        printf("%10.3f %6.1f%% %8.1f  %s\n", 1e3 * seconds[i] / steps, 100.0 * seconds[i] / step_s,
               (double)calls[i] / steps, keys[i]);
}

static int train(const ac_model *m, int B, int T, int steps)
{
    ac_model *host_grads, *grads;
    ac_train_step *step;
    if (ac_model_create(ac_model_arch(m), &host_grads) != AC_OK)
        return 1;
    ac_status st = ac_model_to_backend(host_grads, ac_model_backend(m), &grads);
    ac_model_free(host_grads);
    if (st != AC_OK || ac_train_step_create(m, B, T, &step) != AC_OK)
        return 1;
    int V = ac_model_arch(m)->vocab;
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens), *targets = malloc((size_t)B * T * sizeof *targets);
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)((i * 7919) % V);
        targets[i] = (int32_t)((i * 104729 + 1) % V);
    }
    ac_step_inputs in = {.tokens = tokens, .targets = targets, .grads = grads};
    double loss;
    ac_train_step_run(step, &in, &loss); /* warm-up, not counted */
    n_keys = 0;
    double t0 = now_s();
    for (int s = 0; s < steps; s++)
        ac_train_step_run(step, &in, &loss);
    char what[64];
    snprintf(what, sizeof what, "training step, batch %d x %d", B, T);
    report(what, now_s() - t0, steps);
    ac_train_step_free(step);
    ac_model_free(grads);
    free(tokens);
    free(targets);
    return 0;
}

/* A prompt of `prompt` tokens, then `gen` greedy decode steps (gen 0: prefills only,
 * `steps` of them); the second round is the one counted. */
static int infer(const ac_model *m, int prompt, int gen, int steps)
{
    ac_runtime *rt;
    ac_cache *cache;
    if (ac_runtime_create(m, &rt) != AC_OK || ac_cache_create(m, &cache) != AC_OK)
        return 1;
    int V = ac_model_arch(m)->vocab, n;
    int32_t *ids = malloc((size_t)prompt * sizeof *ids), next;
    float *logits = malloc((size_t)V * sizeof *logits);
    for (int i = 0; i < prompt; i++)
        ids[i] = (int32_t)((i * 7919) % V);
    const int32_t *tokens;
    ac_batch batch = {.n_seqs = 1, .tokens = &tokens, .n_tokens = &n, .caches = &cache};
    double counted = 0.0;
    for (int round = 0; round < 2; round++) {
        n_keys = 0;
        counted = 0.0;
        for (int r = 0; r < (gen ? 1 : steps); r++) {
            ac_cache_clear(cache);
            tokens = ids, n = prompt;
            double t0 = now_s();
            ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
            if (gen) /* only the decode steps count */
                n_keys = 0;
            else
                counted += now_s() - t0;
        }
        double t0 = now_s();
        for (int g = 0; g < gen; g++) {
            next = ac_argmax(logits, V);
            tokens = &next, n = 1;
            ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits);
        }
        if (gen)
            counted = now_s() - t0;
    }
    char what[64];
    if (gen)
        snprintf(what, sizeof what, "decode step at a %d-token depth", prompt);
    else
        snprintf(what, sizeof what, "prefill of %d tokens", prompt);
    report(what, counted, gen ? gen : steps);
    ac_cache_free(cache);
    ac_runtime_free(rt);
    free(ids);
    free(logits);
    return 0;
}

int main(int argc, char **argv)
{
    ac_cpu_blas_restart_if_legacy(argv);
    const char *dir = NULL;
    int B = 0, T = 0, prompt = 0, gen = 0, steps = 3, mode = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--train") && i + 2 < argc)
            mode = 't', B = atoi(argv[i + 1]), T = atoi(argv[i + 2]), i += 2;
        else if (!strcmp(argv[i], "--decode") && i + 2 < argc)
            mode = 'd', prompt = atoi(argv[i + 1]), gen = atoi(argv[i + 2]), i += 2;
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc)
            mode = 'p', prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "bench_ops: unknown or incomplete argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!dir || !mode || steps <= 0 || (mode == 't' && (B <= 0 || T <= 0)) || (mode != 't' && prompt <= 0) ||
        (mode == 'd' && gen <= 0)) {
        fprintf(stderr, "usage: bench_ops --model DIR (--train B T | --decode PROMPT GEN | --prefill PROMPT) "
                        "[--steps N]\n");
        return 2;
    }
    static ac_backend timed;
    timed = timed_backend();
    ac_model *host, *m;
    if (ac_model_load(dir, &host) != AC_OK || ac_model_to_backend(host, &timed, &m) != AC_OK) {
        fprintf(stderr, "bench_ops: %s\n", ac_error_message());
        return 1;
    }
    ac_model_free(host);
    int rc = mode == 't' ? train(m, B, T, steps) : infer(m, prompt, mode == 'd' ? gen : 0, steps);
    if (rc)
        fprintf(stderr, "bench_ops: %s\n", ac_error_message());
    ac_model_free(m);
    return rc;
}
