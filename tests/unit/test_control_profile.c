/* In-situ profiling on synthetic steps: one step in `every` gets the probe, none while
 * paused; the spans of
 * a sampled step land on their layers (a layer made to spin for 3 ms reads at least
 * that); predictions are the tables' rows for the served configuration (decode: the line
 * a + b c at the median context, clamped to the contexts they measured; prefill: on the line from one token to the tables'
 * input) and only for the tables'
 * batch, the others say why; a row the tables lack is named; spans that fit no layer
 * drop the step; the ring keeps the last 64 steps; the memory residual is resident minus
 * W + C + P + R, beside the tables' eps at the hidden size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/clock.h"
#include "autocompress/control.h"

enum { HIDDEN = 64 };

/* mamba (8 heads), mlp (ffn 128) */
static ac_arch two_layers(void)
{
    ac_arch a;
    memset(&a, 0, sizeof a);
    a.vocab = 100;
    a.hidden = HIDDEN;
    assert_int_equal(ac_arch_alloc_layers(&a, 2), AC_OK);
    a.layers[0] = (ac_block_dims){.kind = AC_BLOCK_MAMBA, .mamba_heads = 8, .mamba_head_dim = 16, .mamba_groups = 1,
                                  .ssm_state = 16, .conv_kernel = 4};
    a.layers[1] = (ac_block_dims){.kind = AC_BLOCK_MLP, .ffn = 128};
    return a;
}

static void add_row(ac_cost_tables *t, ac_row_kind kind, double prefill, double a, double b)
{
    ac_cost_row r = {.kind = kind, .hidden = HIDDEN, .prefill_us = prefill, .decode_a_us = a, .decode_b_us = b};
    if (kind == AC_ROW_MAMBA)
        r.heads = 8;
    if (kind == AC_ROW_MLP)
        r.ffn = 128;
    assert_int_equal(ac_cost_tables_add_row(t, &r), AC_OK);
}

/* Tables for batch 1, 64 input tokens; the MLP row only when with_mlp. */
static ac_cost_tables *tables(int with_mlp)
{
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    strcpy(info.contract, "test");
    info.workload = (ac_contract_workload){.batch = 1, .cached_tokens = 0, .input_tokens = 64, .output_tokens = 16};
    info.threads = 1;
    info.eps_bytes = 1e6;
    ac_cost_tables *t = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &t), AC_OK);
    add_row(t, AC_ROW_MAMBA, 6400, 100, 0.5);
    if (with_mlp)
        add_row(t, AC_ROW_MLP, 3200, 50, 0);
    add_row(t, AC_ROW_EMBEDDING, 64, 2, 0);
    add_row(t, AC_ROW_LM_HEAD, 640, 20, 0);
    ac_memory_point p1 = {.hidden = HIDDEN, .measured = 10e6, .weights = 6e6, .kv = 1e6, .state = 1e6, .activations = 1e6};
    ac_memory_point p2 = {.hidden = HIDDEN, .measured = 12e6, .weights = 6e6, .kv = 1e6, .state = 1e6, .activations = 1e6};
    ac_memory_point other = {.hidden = 32, .measured = 50e6};
    assert_int_equal(ac_cost_tables_add_memory(t, &p1), AC_OK);
    assert_int_equal(ac_cost_tables_add_memory(t, &p2), AC_OK);
    assert_int_equal(ac_cost_tables_add_memory(t, &other), AC_OK);
    return t;
}

static void spin_us(double us)
{
    int64_t end = ac_monotonic_ns() + (int64_t)(us * 1e3);
    while (ac_monotonic_ns() < end) {
    }
}

/* One forward's sites as the runtime emits them; layer 1 spins for spin_layer1 us. */
static void fake_forward(ac_probe *p, double spin_layer1)
{
    ac_probe_begin(p, -1, AC_SITE_EMBEDDING);
    ac_probe_end(p, -1, AC_SITE_EMBEDDING);
    ac_probe_begin(p, 0, AC_SITE_MAMBA);
    ac_probe_end(p, 0, AC_SITE_MAMBA);
    ac_probe_begin(p, 1, AC_SITE_MLP);
    spin_us(spin_layer1);
    ac_probe_end(p, 1, AC_SITE_MLP);
    ac_probe_begin(p, -1, AC_SITE_LM_HEAD);
    ac_probe_end(p, -1, AC_SITE_LM_HEAD);
}

static void sampled_step(ac_live_profile *lp, int n_seqs, int n_decode, int tokens, double context, double spin)
{
    ac_probe *p = ac_live_profile_step_begin(lp, n_seqs, n_decode, tokens, context);
    assert_non_null(p);
    fake_forward(p, spin);
    ac_live_profile_step_end(lp, 1);
}

static cJSON *report(ac_live_profile *lp, const ac_cost_tables *t)
{
    char *text = ac_live_profile_json(lp, t);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static const cJSON *shape(const cJSON *j, const char *phase, int batch)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "shapes"))
    {
        if (!strcmp(cJSON_GetObjectItem(s, "phase")->valuestring, phase) &&
            cJSON_GetObjectItem(s, "batch")->valueint == batch)
            return s;
    }
    return NULL;
}

static const cJSON *row(const cJSON *s, int i) { return cJSON_GetArrayItem(cJSON_GetObjectItem(s, "rows"), i); }

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void test_one_step_in_every(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, -1, &lp), AC_ERR_INVALID);
    assert_int_equal(ac_live_profile_create(&a, 3, &lp), AC_OK);
    for (int step = 0; step < 15; step++) {
        if (step == 9)
            ac_live_profile_set_every(lp, 0); /* paused: nothing from here */
        ac_probe *p = ac_live_profile_step_begin(lp, 1, 1, 1, 10);
        assert_int_equal(p != NULL, step < 9 && step % 3 == 0);
        if (p) {
            fake_forward(p, 0);
            ac_live_profile_step_end(lp, 1);
        }
    }
    cJSON *j = report(lp, NULL);
    assert_int_equal(num(j, "sampled_steps"), 3);
    assert_int_equal(num(j, "sample_every"), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "tables")));
    const cJSON *s = shape(j, "decode", 1);
    assert_non_null(s);
    assert_int_equal(num(s, "samples"), 3);
    assert_non_null(strstr(cJSON_GetObjectItem(s, "unpredicted_because")->valuestring, "no cost tables"));
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_arch_free(&a);
}

static void test_decode_rows_beside_the_tables_line(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_cost_tables *t = tables(1);
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    double contexts[] = {66, 70, 74}; /* within the 64 to 78 the tables' decode covers */
    for (int i = 0; i < 3; i++)
        sampled_step(lp, 1, 1, 1, contexts[i], 3000);
    sampled_step(lp, 2, 2, 2, 100, 0); /* batch 2, so it does not mix with them */
    cJSON *j = report(lp, t);
    const cJSON *s = shape(j, "decode", 1);
    assert_non_null(s);
    assert_int_equal(num(s, "context_p50"), 70);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(s, "rows")), 5); /* 2 layers, embedding, lm_head, forward */
    const cJSON *mamba = row(s, 0), *mlp = row(s, 1), *emb = row(s, 2), *head = row(s, 3), *fwd = row(s, 4);
    assert_string_equal(cJSON_GetObjectItem(mamba, "site")->valuestring, "mamba");
    assert_int_equal(num(mamba, "heads"), 8);
    assert_int_equal(num(mlp, "ffn"), 128);
    assert_string_equal(cJSON_GetObjectItem(emb, "site")->valuestring, "embedding");
    assert_string_equal(cJSON_GetObjectItem(fwd, "site")->valuestring, "forward");
    assert_true(fabs(num(mamba, "predicted_us") - (100 + 0.5 * 70)) < 1e-9);
    assert_true(fabs(num(mlp, "predicted_us") - 50) < 1e-9);
    assert_true(fabs(num(emb, "predicted_us") - 2) < 1e-9);
    assert_true(fabs(num(head, "predicted_us") - 20) < 1e-9);
    assert_true(fabs(num(fwd, "predicted_us") - 207) < 1e-9);
    assert_true(num(mlp, "live_us") >= 3000);                 /* the spin is on layer 1 */
    assert_true(num(mamba, "live_us") < num(mlp, "live_us"));
    assert_true(num(fwd, "live_us") >= num(fwd, "sites_us")); /* the forward holds its sites */
    assert_true(fabs(num(mlp, "live_over_predicted") - num(mlp, "live_us") / 50) < 1e-9);
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_cost_tables_free(t);
    ac_arch_free(&a);
}

static void test_decode_past_the_tables_contexts_takes_the_nearest(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_cost_tables *t = tables(1);
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    sampled_step(lp, 1, 1, 1, 500, 0);
    cJSON *j = report(lp, t);
    const cJSON *s = shape(j, "decode", 1);
    assert_int_equal(num(s, "context_p50"), 500);
    assert_true(fabs(num(row(s, 0), "predicted_us") - (100 + 0.5 * 78)) < 1e-9);
    assert_non_null(strstr(cJSON_GetObjectItem(s, "prediction")->valuestring, "measured 64 to 78"));
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_cost_tables_free(t);
    ac_arch_free(&a);
}

static void test_prefill_on_the_line_and_other_shapes_say_why(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_cost_tables *t = tables(1);
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    sampled_step(lp, 1, 0, 32, 0, 0);  /* a prefill of 32 tokens, the tables' input is 64 */
    sampled_step(lp, 2, 2, 2, 50, 0);  /* decode at batch 2 */
    sampled_step(lp, 2, 1, 17, 50, 0); /* a decode and a prefill chunk */
    cJSON *j = report(lp, t);
    const cJSON *pre = shape(j, "prefill", 1), *dec2 = shape(j, "decode", 2), *mixed = shape(j, "mixed", 2);
    assert_non_null(pre);
    assert_non_null(dec2);
    assert_non_null(mixed);
    /* on the line from one token (the decode line at context 0) to 64 (the prefill) */
    assert_true(fabs(num(row(pre, 0), "predicted_us") - (100 + (6400 - 100) * 31.0 / 63)) < 1e-9);
    assert_true(fabs(num(row(pre, 1), "predicted_us") - (50 + (3200 - 50) * 31.0 / 63)) < 1e-9);
    assert_non_null(strstr(cJSON_GetObjectItem(dec2, "unpredicted_because")->valuestring, "batch 1"));
    assert_null(cJSON_GetObjectItem(row(dec2, 0), "predicted_us"));
    assert_non_null(strstr(cJSON_GetObjectItem(mixed, "unpredicted_because")->valuestring, "prefill chunks"));
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_cost_tables_free(t);
    ac_arch_free(&a);
}

static void test_a_row_the_tables_lack_is_named(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_cost_tables *t = tables(0);
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    sampled_step(lp, 1, 1, 1, 100, 0);
    cJSON *j = report(lp, t);
    const cJSON *s = shape(j, "decode", 1);
    assert_non_null(cJSON_GetObjectItem(row(s, 0), "predicted_us"));
    assert_null(cJSON_GetObjectItem(row(s, 1), "predicted_us"));
    assert_non_null(strstr(cJSON_GetObjectItem(row(s, 1), "unpredicted_because")->valuestring, "no row"));
    assert_null(cJSON_GetObjectItem(row(s, 4), "predicted_us")); /* the forward's sum would be short */
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_cost_tables_free(t);
    ac_arch_free(&a);
}

static void test_spans_off_the_layers_drop_the_step(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    ac_probe *p = ac_live_profile_step_begin(lp, 1, 1, 1, 10);
    ac_probe_begin(p, 7, AC_SITE_MAMBA); /* a layer this architecture does not have */
    ac_probe_end(p, 7, AC_SITE_MAMBA);
    ac_live_profile_step_end(lp, 1);
    p = ac_live_profile_step_begin(lp, 1, 1, 1, 10);
    fake_forward(p, 0);
    ac_live_profile_step_end(lp, 0); /* the forward failed */
    cJSON *j = report(lp, NULL);
    assert_int_equal(num(j, "sampled_steps"), 2);
    assert_int_equal(num(j, "unattributed_steps"), 2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "shapes")), 0);
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_arch_free(&a);
}

static void test_the_ring_keeps_the_last_steps(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    for (int i = 0; i < 70; i++)
        sampled_step(lp, 1, 1, 1, i, 0); /* contexts 0..69: the ring holds 6..69 */
    cJSON *j = report(lp, NULL);
    const cJSON *s = shape(j, "decode", 1);
    assert_int_equal(num(s, "samples"), 64);
    assert_int_equal(num(s, "sampled_total"), 70);
    double median = num(s, "context_p50");
    assert_true(median >= 37 && median <= 38);
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_arch_free(&a);
}

static void test_memory_residual_beside_eps(void **state)
{
    (void)state;
    ac_arch a = two_layers();
    ac_cost_tables *t = tables(1);
    ac_live_profile *lp = NULL;
    assert_int_equal(ac_live_profile_create(&a, 1, &lp), AC_OK);
    cJSON *j = report(lp, t);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "memory")));
    cJSON_Delete(j);
    ac_memory_sample m = {.weights = 4000, .kv_cache = 300, .state = 200, .activations = 500, .resident = 9000};
    ac_live_profile_memory(lp, &m, 1000);
    m.resident = 8000;
    ac_live_profile_memory(lp, &m, 1000);
    j = report(lp, t);
    const cJSON *mem = cJSON_GetObjectItem(j, "memory");
    assert_int_equal(num(mem, "accounted_bytes"), 5000);
    assert_int_equal(num(mem, "residual_bytes"), 2000); /* 8000 - 1000 before the model - 5000 */
    assert_int_equal(num(mem, "peak_resident_bytes"), 9000);
    assert_true(fabs(num(mem, "predicted_eps_bytes") - 2e6) < 1e-6); /* median of 1e6 and 3e6 at hidden 64 */
    cJSON_Delete(j);
    ac_live_profile_free(lp);
    ac_cost_tables_free(t);
    ac_arch_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_step_in_every),
        cmocka_unit_test(test_decode_rows_beside_the_tables_line),
        cmocka_unit_test(test_decode_past_the_tables_contexts_takes_the_nearest),
        cmocka_unit_test(test_prefill_on_the_line_and_other_shapes_say_why),
        cmocka_unit_test(test_a_row_the_tables_lack_is_named),
        cmocka_unit_test(test_spans_off_the_layers_drop_the_step),
        cmocka_unit_test(test_the_ring_keeps_the_last_steps),
        cmocka_unit_test(test_memory_residual_beside_eps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
