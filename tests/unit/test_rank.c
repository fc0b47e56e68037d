/* The ranking of a shortlist on a tiny parent (attention and wide MLP layers) and three
 * candidates, all claimed by their prediction to meet a memory target: the parent itself
 * (whose f32 weights alone are twice the target), and two narrow cuts. Measured, the
 * parent misses (its measured memory is checked against the target here) and is not
 * chosen although its held-out KD loss is the lowest (shown by the same ranking
 * unmeasured, which chooses it); of the two that meet, the winner has the lower held-out
 * KD loss, each recomputed by ac_eval_run on the distilled checkpoint. The candidates of
 * a search.json are read from its list, at most K of them, or from arch.json without one.
 *
 * The measured ranking runs first: it forks measurements, which needs a process that has
 * run no OpenMP region yet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/config_json.h"
#include "autocompress/contract.h"
#include "autocompress/eval.h"
#include "autocompress/model.h"
#include "autocompress/rank.h"
#include "autocompress/tokens.h"

enum { V = 48, D = 64, WIDE = 4096, BATCH = 2, SEQ = 16, N_CAND = 3 };

/* 2 MiB: the parent's f32 weights (two 64 x 4096 MLPs: 4 MiB) cannot fit in it */
static const char *contract_text =
    "name = \"tiny\"; hardware = { device = \"cpu\"; threads = 1; };\n"
    "workload = { batch = 1; input_tokens = 8; output_tokens = 4; };\n"
    "targets = { memory_gib = 0.001953125; };\n"
    "search_space = { hidden_sizes = [64, 32, 16]; mamba_heads = { values = [4]; scope = \"global\";\n"
    "  remove = false; }; routed_experts = [4]; routed_ffn = [8]; shared_ffn = [8]; removable = [\"mlp\"]; };\n";

typedef struct {
    char dir[64], data[128], parent[128];
    ac_contract contract;
    ac_rank_candidate cand[N_CAND];
} fixture;

static void make_arch(ac_arch *a, int hidden, int ffn, const char *kinds)
{
    int n = (int)strlen(kinds);
    *a = (ac_arch){.vocab = V, .hidden = hidden, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    for (int i = 0; i < n; i++)
        a->layers[i] = (ac_block_dims){.kind = kinds[i] == '*' ? AC_BLOCK_ATTENTION : AC_BLOCK_MLP, .attn_heads = 2,
                                       .attn_kv_heads = 1, .attn_head_dim = 8, .ffn = ffn};
}

static int write_tokens(const char *path)
{
    int32_t ids[4096];
    /* a learnable text: short repeated phrases */
    for (int i = 0; i < 4096; i++)
        ids[i] = (int32_t)((i % 7) * 5 + (i / 7) % 3) % V;
    ac_tokens_writer *w;
    if (ac_tokens_writer_open(path, V, &w) != AC_OK)
        return -1;
    ac_tokens_writer_append(w, ids, 4096);
    return ac_tokens_writer_close(w) == AC_OK ? 0 : -1;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ac-rank-XXXXXX");
    if (!f || !mkdtemp(f->dir))
        return -1;
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    snprintf(f->parent, sizeof f->parent, "%s/parent", f->dir);
    mkdir(f->data, 0777);
    char path[256];
    snprintf(path, sizeof path, "%s/train.bin", f->data);
    if (write_tokens(path) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/val.bin", f->data);
    if (write_tokens(path) != 0)
        return -1;
    ac_arch a;
    make_arch(&a, D, WIDE, "*-*-");
    ac_model *parent = NULL;
    ac_status st = ac_model_create(&a, &parent);
    ac_arch_free(&a);
    if (st != AC_OK) {
        fprintf(stderr, "setup: %s\n", ac_error_message());
        return -1;
    }
    ac_model_init_random(parent, 5, 0.3f);
    st = ac_model_save(parent, f->parent, AC_DTYPE_F32);
    ac_model_free(parent);
    if (st == AC_OK)
        st = ac_contract_parse_string(contract_text, "tiny.cfg", &f->contract);
    if (st != AC_OK) {
        fprintf(stderr, "setup: %s\n", ac_error_message());
        return -1;
    }
    /* the parent; hidden 32 with 256-wide MLPs; hidden 16, the first two layers, 128 wide */
    make_arch(&f->cand[0].arch, D, WIDE, "*-*-");
    make_arch(&f->cand[1].arch, 32, 256, "*-*-");
    make_arch(&f->cand[2].arch, 16, 128, "*-");
    f->cand[2].parent_layers = malloc(2 * sizeof(int));
    f->cand[2].parent_layers[0] = 0;
    f->cand[2].parent_layers[1] = 1;
    for (int i = 0; i < N_CAND; i++)
        f->cand[i].predicted.memory_bytes = 1024.0 * 1024.0; /* claimed within the target */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", f->dir);
    if (!getenv("KEEP") && system(command) != 0)
        return -1;
    for (int i = 0; i < N_CAND; i++) {
        ac_arch_free(&f->cand[i].arch);
        free(f->cand[i].parent_layers);
    }
    free(f);
    return 0;
}

static ac_rank_params params(const fixture *f, const char *out, int measure)
{
    ac_rank_params p = ac_rank_default_params();
    p.parent_dir = f->parent;
    p.data_dir = f->data;
    p.out_dir = out;
    p.measure = measure;
    p.sweeps = 1;
    p.kd_tokens = 8 * BATCH * SEQ;
    p.score_tokens = 4 * BATCH * SEQ;
    p.batch = BATCH;
    p.seq_len = SEQ;
    p.optim.lr = 3e-3f;
    p.progress = AC_PROGRESS_OFF;
    return p;
}

/* A distilled checkpoint scored against the parent on the first 4 batches of val.bin. */
static double held_out_kd(const char *dir, const char *parent_dir, const char *data)
{
    ac_model *student = NULL, *teacher = NULL;
    assert_int_equal(ac_model_load(dir, &student), AC_OK);
    assert_int_equal(ac_model_load(parent_dir, &teacher), AC_OK);
    ac_eval_params ep = ac_eval_default_params();
    ep.data_dir = data;
    ep.batches = 4;
    ep.batch = BATCH;
    ep.seq_len = SEQ;
    ep.code_lines = 0;
    ep.progress = AC_PROGRESS_OFF;
    ac_eval_report r;
    assert_int_equal(ac_eval_run(student, teacher, dir, &ep, &r), AC_OK);
    ac_eval_report_free(&r);
    ac_model_free(student);
    ac_model_free(teacher);
    return r.kd_loss;
}

static double measured_memory(const char *out, int i)
{
    char path[256];
    snprintf(path, sizeof path, "%s/candidates/c%d/measure.json", out, i);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    const char *m = strstr(text, "\"memory_bytes\"");
    assert_non_null(m);
    m = strstr(m, "\"measured\"");
    assert_non_null(m);
    return strtod(strchr(m, ':') + 1, NULL);
}

static void test_measured_miss_is_not_chosen(void **state)
{
    fixture *f = *state;
    char out[200], dir[256];
    snprintf(out, sizeof out, "%s/measured", f->dir);
    ac_rank_params p = params(f, out, 1);
    ac_rank_report r;
    assert_int_equal(ac_rank_run(&f->contract, f->cand, N_CAND, &p, &r), AC_OK);
    double target = f->contract.targets.memory_gib * 1024.0 * 1024.0 * 1024.0;
    /* the truth, from the measurements themselves: the parent is over, the cuts within */
    assert_true(measured_memory(out, 0) > target);
    assert_true(measured_memory(out, 1) <= target && measured_memory(out, 2) <= target);
    assert_false(r.results[0].meets);
    assert_false(r.results[0].distilled);
    assert_int_equal(r.survivors, 2);
    double kd[N_CAND];
    for (int i = 1; i < N_CAND; i++) {
        snprintf(dir, sizeof dir, "%s/candidates/c%d", out, i);
        kd[i] = held_out_kd(dir, f->parent, f->data);
        assert_true(fabs(kd[i] - r.results[i].held_out_kd) <= 1e-6 * (1 + kd[i]));
        assert_int_equal(r.results[i].kd_tokens, 8 * BATCH * SEQ);
        assert_int_equal(r.results[i].score_tokens, 4 * BATCH * SEQ);
    }
    assert_int_equal(r.chosen, kd[1] <= kd[2] ? 1 : 2);
    assert_int_equal(r.kd_tokens + r.score_tokens, 2 * 12 * BATCH * SEQ);
    snprintf(dir, sizeof dir, "%s/rank.md", out);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    snprintf(dir, sizeof dir, "%s/arch.json", out);
    ac_arch chosen;
    assert_int_equal(ac_config_json_read(dir, &chosen), AC_OK);
    assert_int_equal(chosen.hidden, f->cand[r.chosen].arch.hidden);
    ac_arch_free(&chosen);
    ac_rank_report_free(&r);
}

/* Unmeasured, the prediction is trusted: the parent, whose KD from itself is the lowest,
 * wins. */
static void test_unmeasured_trusts_the_prediction(void **state)
{
    fixture *f = *state;
    char out[200];
    snprintf(out, sizeof out, "%s/unmeasured", f->dir);
    ac_rank_params p = params(f, out, 0);
    ac_rank_report r;
    assert_int_equal(ac_rank_run(&f->contract, f->cand, N_CAND, &p, &r), AC_OK);
    assert_int_equal(r.survivors, N_CAND);
    for (int i = 0; i < N_CAND; i++)
        assert_true(r.results[i].distilled && !r.results[i].measured);
    assert_true(r.results[0].held_out_kd < r.results[1].held_out_kd);
    assert_true(r.results[0].held_out_kd < r.results[2].held_out_kd);
    assert_int_equal(r.chosen, 0);
    ac_rank_report_free(&r);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_candidates_read_from_search_json(void **state)
{
    fixture *f = *state;
    char search[256], arch[256], *config = NULL, text[8192];
    snprintf(search, sizeof search, "%s/search.json", f->dir);
    snprintf(arch, sizeof arch, "%s/arch.json", f->dir);
    assert_int_equal(ac_config_json_format(&f->cand[2].arch, AC_DTYPE_F32, &config), AC_OK);
    snprintf(text, sizeof text,
             "{\"parent_layers\": [0, 1], \"chosen_predicted\": {\"latency_ms\": 3},\n"
             " \"candidates\": [{\"config\": %s, \"parent_layers\": [0, 1], \"log_prob\": -0.5,\n"
             "   \"predicted\": {\"latency_ms\": 1.5, \"memory_mib\": 2}},\n"
             "  {\"config\": %s, \"parent_layers\": [1, 3]}, {\"config\": %s, \"parent_layers\": [0, 3]}]}",
             config, config, config);
    write_file(search, text);
    ac_rank_candidate *c = NULL;
    int n = 0;
    assert_int_equal(ac_rank_read_candidates(search, arch, 2, &c, &n), AC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(c[0].arch.hidden, 16);
    assert_int_equal(c[1].parent_layers[0], 1);
    assert_int_equal(c[1].parent_layers[1], 3);
    assert_true(c[0].predicted.latency_ms == 1.5 && c[0].predicted.memory_bytes == 2.0 * 1024 * 1024);
    assert_true(c[0].log_prob == -0.5);
    ac_rank_candidates_free(c, n);
    /* no list: the single arch.json with search.json's kept layers and prediction */
    snprintf(text, sizeof text, "{\"parent_layers\": [0, 1], \"chosen_predicted\": {\"latency_ms\": 3}}");
    write_file(search, text);
    write_file(arch, config);
    assert_int_equal(ac_rank_read_candidates(search, arch, 4, &c, &n), AC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(c[0].arch.n_layers, 2);
    assert_true(c[0].predicted.latency_ms == 3);
    ac_rank_candidates_free(c, n);
    /* a list entry with kept layers of the wrong length is refused, naming it */
    snprintf(text, sizeof text, "{\"candidates\": [{\"config\": %s, \"parent_layers\": [0]}]}", config);
    write_file(search, text);
    assert_int_equal(ac_rank_read_candidates(search, arch, 4, &c, &n), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "candidates[0].parent_layers"));
    free(config);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_measured_miss_is_not_chosen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmeasured_trusts_the_prediction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_candidates_read_from_search_json, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
