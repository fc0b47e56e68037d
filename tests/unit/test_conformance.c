/* The engine against Hugging Face transformers: logits of the committed tiny checkpoints
 * (tests/fixtures/nemotron_h, made by generate.py there) must match the references. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/safetensors.h"
#include "autocompress/sample.h"

/* f32 checkpoints, and bf16 checkpoints against references computed in f32 from the same
 * bf16-rounded weights: the engine computes in f32 either way. */
#define LOGIT_TOLERANCE 1e-4f
/* transformers computing in bf16 rounds every activation to 8 mantissa bits, and a token
 * whose router scores are close may pick other experts, so that comparison bounds the
 * mean difference per sequence and the share of all positions whose argmax agrees (one
 * flipped routing early in a sequence changes the Mamba state for the rest of it). */
#define BF16_COMPUTE_MEAN_TOLERANCE 0.25f
#define BF16_COMPUTE_ARGMAX_AGREEMENT 0.7f
#define MAX_SEQS 8

typedef struct {
    const char *name;
    ac_model *model;
    ac_safetensors *ref;
    int n_seqs;
    const int32_t *ids[MAX_SEQS];
    int len[MAX_SEQS];
    const float *logits[MAX_SEQS];
} fixture;

static const ac_tensor_view *ref_tensor(const fixture *f, int seq, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "seq.%d.%s", seq, what);
    return ac_safetensors_find(f->ref, name);
}

static int open_fixture(void **state)
{
    fixture *f = *state;
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/nemotron_h/%s", AC_SOURCE_DIR, f->name);
    if (ac_model_load(path, &f->model) != AC_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, ac_error_message());
        return -1;
    }
    snprintf(path, sizeof path, "%s/tests/fixtures/nemotron_h/%s/reference.safetensors", AC_SOURCE_DIR, f->name);
    if (ac_safetensors_open(path, &f->ref) != AC_OK) {
        fprintf(stderr, "cannot open %s: %s\n", path, ac_error_message());
        return -1;
    }
    int V = ac_model_arch(f->model)->vocab;
    for (f->n_seqs = 0; f->n_seqs < MAX_SEQS; f->n_seqs++) {
        const ac_tensor_view *ids = ref_tensor(f, f->n_seqs, "ids");
        const ac_tensor_view *logits = ref_tensor(f, f->n_seqs, "logits");
        if (!ids)
            break;
        if (ids->dtype != AC_DTYPE_I32 || !logits || logits->dtype != AC_DTYPE_F32 || logits->shape[0] != ids->shape[0] ||
            logits->shape[1] != V)
            return -1;
        f->ids[f->n_seqs] = ids->data;
        f->len[f->n_seqs] = (int)ids->shape[0];
        f->logits[f->n_seqs] = logits->data;
    }
    return f->n_seqs > 0 ? 0 : -1;
}

static int close_fixture(void **state)
{
    fixture *f = *state;
    ac_safetensors_close(f->ref);
    ac_model_free(f->model);
    f->ref = NULL;
    f->model = NULL;
    return 0;
}

static float max_abs_diff(const float *a, const float *b, size_t n)
{
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

/* Runs seqs [first, first+n) as one batch, each from an empty cache; logits of all rows. */
static float *run_batch(const fixture *f, int first, int n)
{
    ac_runtime *rt;
    assert_int_equal(ac_runtime_create(f->model, &rt), AC_OK);
    ac_cache *caches[MAX_SEQS];
    int total = 0;
    for (int s = 0; s < n; s++) {
        assert_int_equal(ac_cache_create(f->model, &caches[s]), AC_OK);
        total += f->len[first + s];
    }
    int V = ac_model_arch(f->model)->vocab;
    float *logits = malloc((size_t)total * V * sizeof *logits);
    ac_batch batch = {.n_seqs = n, .tokens = &f->ids[first], .n_tokens = &f->len[first], .caches = caches};
    assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_ALL, logits), AC_OK);
    for (int s = 0; s < n; s++)
        ac_cache_free(caches[s]);
    ac_runtime_free(rt);
    return logits;
}

static void test_batch_prefill_matches_transformers(void **state)
{
    fixture *f = *state;
    int V = ac_model_arch(f->model)->vocab;
    float *logits = run_batch(f, 0, f->n_seqs);
    size_t row = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        float d = max_abs_diff(logits + row * V, f->logits[s], (size_t)f->len[s] * V);
        printf("  %s seq %d (%d tokens): max |logit diff| = %.3g\n", f->name, s, f->len[s], d);
        assert_true(d <= LOGIT_TOLERANCE);
        row += (size_t)f->len[s];
    }
    free(logits);
}

static void test_batch_equals_sequences_one_by_one(void **state)
{
    fixture *f = *state;
    int V = ac_model_arch(f->model)->vocab;
    float *batched = run_batch(f, 0, f->n_seqs);
    size_t row = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        float *alone = run_batch(f, s, 1);
        assert_true(max_abs_diff(batched + row * V, alone, (size_t)f->len[s] * V) <= 1e-5f);
        row += (size_t)f->len[s];
        free(alone);
    }
    free(batched);
}

/* Every sequence at once, fed in chunks of `chunk` tokens (1: pure decode after the first
 * token), sequences of different lengths sharing each step as a server's batch does. */
static void check_chunked(const fixture *f, int chunk)
{
    int V = ac_model_arch(f->model)->vocab;
    ac_runtime *rt;
    assert_int_equal(ac_runtime_create(f->model, &rt), AC_OK);
    ac_cache *caches[MAX_SEQS];
    float *logits[MAX_SEQS];
    for (int s = 0; s < f->n_seqs; s++) {
        assert_int_equal(ac_cache_create(f->model, &caches[s]), AC_OK);
        logits[s] = malloc((size_t)f->len[s] * V * sizeof(float));
    }
    float *step_logits = malloc((size_t)f->n_seqs * chunk * V * sizeof(float));
    for (int done = 0;; done += chunk) {
        const int32_t *tokens[MAX_SEQS];
        int n_tokens[MAX_SEQS], seq_of[MAX_SEQS];
        ac_cache *step_caches[MAX_SEQS];
        int n = 0;
        for (int s = 0; s < f->n_seqs; s++) {
            if (done >= f->len[s])
                continue;
            tokens[n] = f->ids[s] + done;
            n_tokens[n] = f->len[s] - done < chunk ? f->len[s] - done : chunk;
            step_caches[n] = caches[s];
            seq_of[n++] = s;
        }
        if (n == 0)
            break;
        ac_batch batch = {.n_seqs = n, .tokens = tokens, .n_tokens = n_tokens, .caches = step_caches};
        assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_ALL, step_logits), AC_OK);
        for (int i = 0, row = 0; i < n; row += n_tokens[i], i++)
            memcpy(logits[seq_of[i]] + (size_t)done * V, step_logits + (size_t)row * V, (size_t)n_tokens[i] * V * sizeof(float));
    }
    for (int s = 0; s < f->n_seqs; s++) {
        assert_int_equal(ac_cache_tokens(caches[s]), f->len[s]);
        assert_true(max_abs_diff(logits[s], f->logits[s], (size_t)f->len[s] * V) <= LOGIT_TOLERANCE);
        ac_cache_free(caches[s]);
        free(logits[s]);
    }
    free(step_logits);
    ac_runtime_free(rt);
}

static void test_decode_after_prefill_matches(void **state) { check_chunked(*state, 1); }
static void test_chunked_prefill_matches(void **state) { check_chunked(*state, 3); }

static void test_greedy_continuation_matches_transformers(void **state)
{
    fixture *f = *state;
    int V = ac_model_arch(f->model)->vocab;
    ac_runtime *rt;
    assert_int_equal(ac_runtime_create(f->model, &rt), AC_OK);
    float *logits = malloc((size_t)V * sizeof *logits);
    for (int s = 0; s < f->n_seqs; s++) {
        const ac_tensor_view *greedy = ref_tensor(f, s, "greedy");
        assert_non_null(greedy);
        const int32_t *expected = greedy->data;
        ac_cache *cache;
        assert_int_equal(ac_cache_create(f->model, &cache), AC_OK);
        const int32_t *tokens = f->ids[s];
        int n = f->len[s];
        int32_t next;
        for (int i = 0; i < greedy->shape[0]; i++) {
            ac_batch batch = {.n_seqs = 1, .tokens = &tokens, .n_tokens = &n, .caches = &cache};
            assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits), AC_OK);
            next = ac_argmax(logits, V);
            assert_int_equal(next, expected[i]);
            tokens = &next;
            n = 1;
        }
        ac_cache_free(cache);
    }
    free(logits);
    ac_runtime_free(rt);
}

static void test_bf16_compute_reference_is_close(void **state)
{
    fixture *f = *state;
    int V = ac_model_arch(f->model)->vocab;
    float *logits = run_batch(f, 0, f->n_seqs);
    size_t row = 0;
    int agree = 0, positions = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        const ac_tensor_view *bf16 = ref_tensor(f, s, "logits_bf16compute");
        assert_non_null(bf16);
        const float *ours = logits + row * V, *theirs = bf16->data;
        double sum = 0.0;
        int agree_here = agree;
        for (int t = 0; t < f->len[s]; t++) {
            for (int v = 0; v < V; v++)
                sum += fabsf(ours[t * V + v] - theirs[t * V + v]);
            agree += ac_argmax(ours + t * V, V) == ac_argmax(theirs + t * V, V);
        }
        double mean = sum / ((double)f->len[s] * V);
        printf("  %s seq %d vs bf16 compute: mean |diff| %.3g, argmax agrees at %d of %d\n", f->name, s, mean,
               agree - agree_here, f->len[s]);
        assert_true(mean <= BF16_COMPUTE_MEAN_TOLERANCE);
        positions += f->len[s];
        row += (size_t)f->len[s];
    }
    assert_true(agree >= BF16_COMPUTE_ARGMAX_AGREEMENT * positions);
    free(logits);
}

static void test_bad_token_id_is_rejected(void **state)
{
    fixture *f = *state;
    ac_runtime *rt;
    ac_cache *cache;
    assert_int_equal(ac_runtime_create(f->model, &rt), AC_OK);
    assert_int_equal(ac_cache_create(f->model, &cache), AC_OK);
    int32_t ids[2] = {1, ac_model_arch(f->model)->vocab};
    const int32_t *tokens = ids;
    int n = 2;
    ac_batch batch = {.n_seqs = 1, .tokens = &tokens, .n_tokens = &n, .caches = &cache};
    float logits[1];
    assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_NONE, logits), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "position 1"));
    assert_int_equal(ac_cache_tokens(cache), 0);
    ac_cache_free(cache);
    ac_runtime_free(rt);
}

#define FIXTURE_TESTS(fx)                                                                         \
    cmocka_unit_test_prestate_setup_teardown(test_batch_prefill_matches_transformers, open_fixture, close_fixture, &fx), \
    cmocka_unit_test_prestate_setup_teardown(test_batch_equals_sequences_one_by_one, open_fixture, close_fixture, &fx), \
    cmocka_unit_test_prestate_setup_teardown(test_decode_after_prefill_matches, open_fixture, close_fixture, &fx),      \
    cmocka_unit_test_prestate_setup_teardown(test_chunked_prefill_matches, open_fixture, close_fixture, &fx),           \
    cmocka_unit_test_prestate_setup_teardown(test_greedy_continuation_matches_transformers, open_fixture, close_fixture, &fx)

int main(void)
{
    static fixture hybrid = {.name = "hybrid_f32"};
    static fixture grouped = {.name = "moe_grouped_bf16"};
    static fixture puzzle = {.name = "puzzle_hetero"};
    const struct CMUnitTest tests[] = {
        FIXTURE_TESTS(hybrid),
        FIXTURE_TESTS(grouped),
        FIXTURE_TESTS(puzzle),
        cmocka_unit_test_prestate_setup_teardown(test_bf16_compute_reference_is_close, open_fixture, close_fixture, &grouped),
        cmocka_unit_test_prestate_setup_teardown(test_bad_token_id_is_rejected, open_fixture, close_fixture, &hybrid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
