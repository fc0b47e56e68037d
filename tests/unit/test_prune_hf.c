/* Pruning against Hugging Face transformers: the committed hybrid_f32 parent pruned (already
 * in importance order, so every kept width is a prefix) to tests/fixtures/prune/arch.json,
 * the layers of search.json beside it, is homogeneous, is written as a "nemotron_h"
 * checkpoint, and gives the logits and greedy tokens that transformers'
 * NemotronHForCausalLM computes on that checkpoint (tests/fixtures/prune/generate.py, which
 * also proves the slice equals the parent with the removed parts masked). A prune that
 * keeps other channels, heads or experts than the prefixes misses the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/config_json.h"
#include "autocompress/model.h"
#include "autocompress/prune.h"
#include "autocompress/safetensors.h"
#include "autocompress/sample.h"
#include "autocompress/search.h"
#include "masked_logits.h"

/* Both sides compute in f32 on the same weights; they differ only in summation order
 * (BLAS blocking, the chunked scan's order, the MoE sums). generate.py measured at most
 * 4.6e-6; 1e-4 is the bound of test_conformance.c. The greedy steps' top-1/top-2 margins
 * are at least 2e-3 (generate.py redraws sequences until they are), far above it. */
#define LOGIT_TOLERANCE 1e-4f
/* A prune that keeps other weights must miss the reference by far more than the tolerance. */
#define WRONG_PRUNE_MIN_DIFF 1e-2f
#define MAX_SEQS 8
#define MAX_T 64

typedef struct {
    ac_model *parent;
    ac_arch arch;
    int *parent_layers;
    ac_safetensors *ref;
    int n_seqs;
    const int32_t *ids[MAX_SEQS];
    int len[MAX_SEQS];
    const float *logits[MAX_SEQS];
    const int32_t *greedy[MAX_SEQS];
    int n_greedy[MAX_SEQS];
    char dir[64];
} fixture;

static void fixture_path(char *path, size_t size, const char *name)
{
    snprintf(path, size, "%s/tests/fixtures/%s", AC_SOURCE_DIR, name);
}

static const ac_tensor_view *ref_tensor(const fixture *f, int seq, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "seq.%d.%s", seq, what);
    return ac_safetensors_find(f->ref, name);
}

static int read_references(fixture *f)
{
    int V = ac_model_arch(f->parent)->vocab;
    for (f->n_seqs = 0; f->n_seqs < MAX_SEQS; f->n_seqs++) {
        int s = f->n_seqs;
        const ac_tensor_view *ids = ref_tensor(f, s, "ids"), *logits = ref_tensor(f, s, "logits"),
                             *greedy = ref_tensor(f, s, "greedy");
        if (!ids)
            break;
        if (ids->dtype != AC_DTYPE_I32 || ids->ndim != 1 || ids->shape[0] > MAX_T || !logits ||
            logits->dtype != AC_DTYPE_F32 || logits->ndim != 2 || logits->shape[0] != ids->shape[0] ||
            logits->shape[1] != V || !greedy || greedy->dtype != AC_DTYPE_I32 || greedy->ndim != 1) {
            fprintf(stderr, "reference seq %d: unexpected tensors\n", s);
            return -1;
        }
        f->ids[s] = ids->data;
        f->len[s] = (int)ids->shape[0];
        f->logits[s] = logits->data;
        f->greedy[s] = greedy->data;
        f->n_greedy[s] = (int)greedy->shape[0];
    }
    return f->n_seqs > 0 ? 0 : -1;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char path[512];
    *state = f;
    fixture_path(path, sizeof path, "nemotron_h/hybrid_f32");
    ac_status st = ac_model_load(path, &f->parent);
    if (st == AC_OK) {
        fixture_path(path, sizeof path, "prune/arch.json");
        st = ac_config_json_read(path, &f->arch);
    }
    if (st == AC_OK) {
        fixture_path(path, sizeof path, "prune/search.json");
        st = ac_prune_read_parent_layers(path, f->arch.n_layers, &f->parent_layers);
    }
    if (st == AC_OK) {
        fixture_path(path, sizeof path, "prune/reference.safetensors");
        st = ac_safetensors_open(path, &f->ref);
    }
    if (st != AC_OK) {
        fprintf(stderr, "cannot open the fixtures: %s\n", ac_error_message());
        return -1;
    }
    snprintf(f->dir, sizeof f->dir, "/tmp/ac-prune-hf-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    return read_references(f);
}

static int teardown(void **state)
{
    fixture *f = *state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", f->dir);
    int rc = f->dir[0] && system(command) != 0 ? -1 : 0;
    ac_safetensors_close(f->ref);
    free(f->parent_layers);
    ac_arch_free(&f->arch);
    ac_model_free(f->parent);
    free(f);
    return rc;
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

/* The largest difference from the reference logits over all sequences. */
static float worst_logit_diff(const fixture *f, const ac_model *m, const char *what)
{
    int V = ac_model_arch(m)->vocab;
    float *logits = malloc((size_t)MAX_T * V * sizeof *logits), worst = 0.0f;
    assert_non_null(logits);
    for (int s = 0; s < f->n_seqs; s++) {
        logits_of(m, NULL, f->ids[s], f->len[s], logits);
        float d = max_abs_diff(logits, f->logits[s], (size_t)f->len[s] * V);
        printf("  %s, seq %d (%d tokens): max |logit diff| from transformers %.3g\n", what, s, f->len[s], (double)d);
        worst = isnan(d) || d > worst ? d : worst;
    }
    free(logits);
    return worst;
}

/* Greedy continuations with the cache (prefill, then one token at a time). */
static void check_greedy(const fixture *f, const ac_model *m)
{
    int V = ac_model_arch(m)->vocab;
    ac_runtime *rt;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    float *logits = malloc((size_t)V * sizeof *logits);
    assert_non_null(logits);
    for (int s = 0; s < f->n_seqs; s++) {
        ac_cache *cache;
        assert_int_equal(ac_cache_create(m, &cache), AC_OK);
        const int32_t *tokens = f->ids[s];
        int n = f->len[s];
        int32_t next;
        for (int i = 0; i < f->n_greedy[s]; i++) {
            ac_batch batch = {.n_seqs = 1, .tokens = &tokens, .n_tokens = &n, .caches = &cache};
            assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits), AC_OK);
            next = ac_argmax(logits, V);
            assert_int_equal(next, f->greedy[s][i]);
            tokens = &next;
            n = 1;
        }
        ac_cache_free(cache);
    }
    free(logits);
    ac_runtime_free(rt);
}

static ac_model *prune_ordered(const fixture *f)
{
    ac_prune_params p = {.importance = NULL, .parent_layers = f->parent_layers};
    ac_model *child = NULL;
    assert_int_equal(ac_prune(f->parent, &f->arch, &p, &child), AC_OK);
    return child;
}

static void test_slice_is_a_real_homogeneous_shrink(void **state)
{
    fixture *f = *state;
    const ac_arch *pa = ac_model_arch(f->parent);
    ac_model *child = prune_ordered(f);
    const ac_arch *ca = ac_model_arch(child);
    assert_true(ac_arch_is_homogeneous(ca));
    assert_true(ca->hidden < pa->hidden);
    assert_true(ca->n_layers < pa->n_layers);
    int shrunk = 0;
    for (int i = 0; i < ca->n_layers; i++) {
        const ac_block_dims *c = &ca->layers[i], *p = &pa->layers[f->parent_layers[i]];
        assert_int_equal(c->kind, p->kind);
        shrunk |= (c->kind == AC_BLOCK_MAMBA && c->mamba_heads < p->mamba_heads) << 0;
        shrunk |= (c->kind == AC_BLOCK_MOE && c->n_experts < p->n_experts) << 1;
        shrunk |= (c->kind == AC_BLOCK_MOE && c->expert_ffn < p->expert_ffn && c->shared_ffn < p->shared_ffn) << 2;
        shrunk |= (c->kind == AC_BLOCK_MLP && c->ffn < p->ffn) << 3;
    }
    assert_int_equal(shrunk, 0xf);
    ac_model_free(child);
}

static void test_pruned_model_matches_transformers(void **state)
{
    fixture *f = *state;
    ac_model *child = prune_ordered(f);
    assert_true(worst_logit_diff(f, child, "pruned in memory") <= LOGIT_TOLERANCE);
    check_greedy(f, child);
    ac_model_free(child);
}

static char *read_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    assert_true(n > 0);
    rewind(fp);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, fp), (size_t)n);
    text[n] = '\0';
    fclose(fp);
    return text;
}

/* The checkpoint transformers loaded: config.json says nemotron_h, and it loads back to
 * the reference. */
static void test_written_checkpoint_matches_transformers(void **state)
{
    fixture *f = *state;
    ac_model *child = prune_ordered(f);
    char parent_dir[512], path[600];
    fixture_path(parent_dir, sizeof parent_dir, "nemotron_h/hybrid_f32");
    assert_int_equal(ac_prune_save(child, parent_dir, f->dir, AC_DTYPE_F32), AC_OK);
    ac_model_free(child);

    snprintf(path, sizeof path, "%s/config.json", f->dir);
    char *text = read_file(path);
    cJSON *config = cJSON_Parse(text);
    free(text);
    assert_non_null(config);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(config, "architectures");
    assert_true(cJSON_IsString(type));
    assert_string_equal(type->valuestring, "nemotron_h");
    assert_true(cJSON_IsArray(archs) && cJSON_GetArraySize(archs) == 1);
    assert_string_equal(cJSON_GetArrayItem(archs, 0)->valuestring, "NemotronHForCausalLM");
    assert_null(cJSON_GetObjectItemCaseSensitive(config, "block_configs"));
    cJSON_Delete(config);

    ac_model *loaded;
    assert_int_equal(ac_model_load(f->dir, &loaded), AC_OK);
    assert_true(worst_logit_diff(f, loaded, "written and loaded") <= LOGIT_TOLERANCE);
    check_greedy(f, loaded);
    ac_model_free(loaded);
}

/* The reference tells which weights were kept: the same architecture cut after a real
 * importance reorder (other hidden channels, heads and experts first) misses it. */
static void test_other_kept_weights_miss_the_reference(void **state)
{
    fixture *f = *state;
    enum { SEQS = 4, T = 16 };
    int V = ac_model_arch(f->parent)->vocab;
    int32_t calib[SEQS * T];
    for (int i = 0; i < SEQS * T; i++)
        calib[i] = (int32_t)((i * 37 + i / 3) % V);
    ac_importance imp;
    assert_int_equal(ac_importance_compute(f->parent, calib, SEQS, T, &imp), AC_OK);
    ac_prune_params p = {.importance = &imp, .parent_layers = f->parent_layers};
    ac_model *other;
    assert_int_equal(ac_prune(f->parent, &f->arch, &p, &other), AC_OK);
    float d = worst_logit_diff(f, other, "pruned after an importance reorder");
    assert_true(d > WRONG_PRUNE_MIN_DIFF);
    ac_model_free(other);
    ac_importance_free(&imp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slice_is_a_real_homogeneous_shrink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pruned_model_matches_transformers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_written_checkpoint_matches_transformers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_kept_weights_miss_the_reference, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
