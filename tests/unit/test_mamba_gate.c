/* Removing a Mamba layer in a per-layer space: with the keep axis (the default layout)
 * the soft model at keep probability p is the parent with that layer's contribution
 * scaled by p, exactly as a copy of the parent whose out_proj is scaled by p computes
 * it; with the heads layout (removal = head value 0) the same probability scales it by
 * sqrt(p) through the width-normalised gated norm. A one-hot choice that removes the
 * layer gives the logits of the architecture sliced without it (ac_model_slice), and
 * predicts the cost of that architecture's own rows, in either layout. Minitron++'s grid
 * (on the default layout) still removes Mamba layers: 2 hidden sizes x 2 head counts x
 * (none or one layer removed) = 8 candidates. A search state saved in one layout is
 * refused by a search in the other. */
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
#include <unistd.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/minitron.h"
#include "autocompress/model.h"
#include "autocompress/search.h"
#include "autocompress/tokens.h"
#include "masked_logits.h"
#include "space_rows.h"

enum { V = 40, D = 16, N = 12 };

static const char contract_text[] =
    "name = \"gate\"; hardware = { device = \"cpu\"; threads = 1; };\n"
    "workload = { batch = 1; input_tokens = 8; output_tokens = 4; };\n"
    "targets = { latency_ratio = 0.95; };\n"
    "search_space = { hidden_sizes = [16, 12]; mamba_heads = { values = [4, 2]; scope = \"per_layer\";\n"
    "  remove = true; }; routed_experts = [4]; routed_ffn = [8]; shared_ffn = [8];\n"
    "  removable = [\"mamba\"]; };\n";

/* M*M-: Mamba layers of 4 heads in 2 groups at 0 and 2. */
static ac_model *make_parent(void)
{
    const char *kinds = "M*M-";
    /* a tiny eps: the heads layout's sqrt(p) holds up to the norm's eps */
    ac_arch a = {.vocab = V, .hidden = D, .norm_eps = 1e-10f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, 4), AC_OK);
    for (int i = 0; i < 4; i++) {
        a.layers[i] = (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                                      .conv_kernel = 4, .attn_heads = 2, .attn_kv_heads = 1, .attn_head_dim = 8,
                                      .ffn = 12};
        a.layers[i].kind = kinds[i] == 'M' ? AC_BLOCK_MAMBA : kinds[i] == '*' ? AC_BLOCK_ATTENTION : AC_BLOCK_MLP;
    }
    ac_model *m = NULL;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, 11, 0.3f);
    return m;
}

/* A row whose cost depends on its key (so every configuration costs differently). */
static void put_row(ac_cost_row r, void *tables)
{
    double size = r.kind == AC_ROW_MAMBA ? 3.0 * r.heads : r.kind == AC_ROW_MLP ? r.ffn / 3.0 : 1.0 + r.kind;
    r.prefill_us = 10.0 * size * r.hidden / D;
    r.decode_a_us = 0.7 * size * r.hidden / D;
    r.decode_b_us = 0.01 * r.kind;
    r.samples = 1;
    assert_int_equal(ac_cost_tables_add_row(tables, &r), AC_OK);
}

typedef struct {
    ac_contract contract;
    ac_model *parent;
    ac_cost_tables *tables;
    ac_cost_model *cost;
    ac_routers *routers;
} world;

static void open_world(world *w, ac_mamba_removal removal)
{
    memset(w, 0, sizeof *w);
    assert_int_equal(ac_contract_parse_string(contract_text, "gate.cfg", &w->contract), AC_OK);
    w->parent = make_parent();
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", w->contract.name);
    info.workload = w->contract.workload;
    info.threads = 1;
    info.eps_bytes = 1000.0;
    assert_int_equal(ac_cost_tables_create(&info, &w->tables), AC_OK);
    space_rows(&w->contract.search, 12, put_row, w->tables);
    const ac_arch *pa = ac_model_arch(w->parent);
    if (ac_cost_model_create_with(w->tables, pa, &w->contract, removal, &w->cost) != AC_OK ||
        ac_routers_create(w->cost, pa, &w->routers) != AC_OK)
        fail_msg("%s", ac_error_message());
}

static void close_world(world *w)
{
    ac_routers_free(w->routers);
    ac_cost_model_free(w->cost);
    ac_cost_tables_free(w->tables);
    ac_model_free(w->parent);
}

static void fixed_tokens(int32_t *tokens)
{
    for (int i = 0; i < N; i++)
        tokens[i] = (int32_t)((i * 7 + 2) % V);
}

/* Probabilities with every axis on its first value (the parent's size, keep) but layer
 * 0's removal, which gets probability 1 - p: its keep axis, or its heads axis's 0. */
static void keep_layer0_with(const world *w, double p, double *probs)
{
    memset(probs, 0, (size_t)ac_cost_model_prob_count(w->cost) * sizeof *probs);
    for (int a = 0; a < ac_cost_model_axis_count(w->cost); a++) {
        const ac_cost_axis *x = ac_cost_model_axis(w->cost, a);
        int removal = x->layer == 0 && x->values[x->count - 1] == 0;
        probs[x->offset] = removal ? p : 1.0;
        if (removal)
            probs[x->offset + x->count - 1] = 1.0 - p;
    }
}

/* The logits of a copy of the parent whose layer 0 has its out_proj scaled by s: the
 * block's output, and so its contribution x + s mixer(norm(x)), scaled without masks. */
static void scaled_logits(const ac_model *parent, float s, const int32_t *tokens, float *logits)
{
    ac_model *copy = NULL;
    assert_int_equal(ac_model_slice(parent, ac_model_arch(parent), NULL, 0, &copy), AC_OK);
    const ac_param *w = ac_model_find_param(copy, "layers.0.mixer.out_proj.weight");
    assert_non_null(w);
    for (size_t i = 0; i < w->count; i++)
        w->data[i] *= s;
    logits_of(copy, NULL, tokens, N, logits);
    ac_model_free(copy);
}

static double max_diff(const float *a, const float *b)
{
    double worst = 0;
    for (int i = 0; i < N * V; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

/* The soft model's logits at keep probability p against the scaled copies: the gate
 * layout matches scale p, the heads layout scale sqrt(p) (and not p). */
static void test_keep_probability_scales_the_layer(void **state)
{
    (void)state;
    int32_t tokens[N];
    fixed_tokens(tokens);
    static float soft[N * V], linear[N * V], root[N * V];
    const double ps[] = {0.25, 0.6};
    for (int layout = 0; layout < 2; layout++) {
        world w;
        open_world(&w, layout ? AC_MAMBA_REMOVAL_HEADS : AC_MAMBA_REMOVAL_GATE);
        double *probs = malloc((size_t)ac_cost_model_prob_count(w.cost) * sizeof *probs);
        for (int k = 0; k < 2; k++) {
            keep_layer0_with(&w, ps[k], probs);
            const ac_masks *m = ac_routers_masks(w.routers, probs);
            logits_of(w.parent, m, tokens, N, soft);
            scaled_logits(w.parent, (float)ps[k], tokens, linear);
            scaled_logits(w.parent, (float)sqrt(ps[k]), tokens, root);
            double to_linear = max_diff(soft, linear), to_root = max_diff(soft, root);
            print_message("  %s layout, keep %.2f: max |soft - scaled p| %.2e, |soft - scaled sqrt(p)| %.2e\n",
                          layout ? "heads" : "gate", ps[k], to_linear, to_root);
            if (layout == 0) {
                assert_float_equal(m->layer_gate[0], ps[k], 1e-7);
                assert_true(to_linear < 1e-5);
                assert_true(to_root > 1e-2);
            } else {
                assert_true(m->layer_gate == NULL || m->layer_gate[0] == 1.0f);
                assert_float_equal(m->mamba_heads[0][0], ps[k], 1e-7);
                assert_true(to_root < 1e-5);
                assert_true(to_linear > 1e-2);
            }
        }
        free(probs);
        close_world(&w);
    }
}

/* The latency of `arch` summed from its own rows and the fixed rows (ms). */
static double rows_latency_ms(const world *w, const ac_arch *arch)
{
    double us = 0;
    for (int l = 0; l < arch->n_layers; l++) {
        const ac_block_dims *b = &arch->layers[l];
        ac_cost_row k = {.kind = (ac_row_kind)b->kind, .hidden = arch->hidden};
        if (b->kind == AC_BLOCK_MAMBA)
            k.heads = b->mamba_heads;
        if (b->kind == AC_BLOCK_MLP)
            k.ffn = b->ffn;
        const ac_cost_row *r = ac_cost_tables_find(w->tables, &k);
        assert_non_null(r);
        us += ac_cost_row_workload_us(r, &w->contract.workload);
    }
    for (int k = AC_ROW_EMBEDDING; k <= AC_ROW_OTHER; k++) {
        ac_cost_row key = {.kind = (ac_row_kind)k, .hidden = arch->hidden};
        us += ac_cost_row_workload_us(ac_cost_tables_find(w->tables, &key), &w->contract.workload);
    }
    return us / 1000.0;
}

/* Layer 0 removed, layer 2 at 2 heads, hidden 12: the architecture, its logits from the
 * one-hot masks (the sliced model's), its predicted cost (its rows'), the same from the
 * other layout's model. */
static void test_removed_mamba_layer_is_the_sliced_model(void **state)
{
    (void)state;
    int32_t tokens[N];
    fixed_tokens(tokens);
    static float masked[N * V], sliced_logits[N * V];
    double latency[2];
    for (int layout = 0; layout < 2; layout++) {
        world w;
        open_world(&w, layout ? AC_MAMBA_REMOVAL_HEADS : AC_MAMBA_REMOVAL_GATE);
        int n_axes = ac_cost_model_axis_count(w.cost), choice[16], back[16];
        assert_true(n_axes <= 16);
        double *probs = calloc((size_t)ac_cost_model_prob_count(w.cost), sizeof *probs);
        for (int a = 0; a < n_axes; a++) {
            const ac_cost_axis *x = ac_cost_model_axis(w.cost, a);
            int removal = x->layer == 0 && x->values[x->count - 1] == 0;
            if (x->kind == AC_AXIS_MAMBA_HEADS && x->layer == 2)
                choice[a] = 1; /* 2 heads (before the heads layout's 0) */
            else
                choice[a] = removal || x->kind == AC_AXIS_HIDDEN ? x->count - 1 : 0;
            probs[x->offset + choice[a]] = 1.0;
        }
        ac_arch child;
        int parent_layer[4];
        assert_int_equal(ac_cost_choice_arch(w.cost, choice, &child, parent_layer), AC_OK);
        assert_int_equal(child.n_layers, 3);
        assert_int_equal(child.hidden, 12);
        assert_int_equal(parent_layer[0], 1);
        assert_int_equal(child.layers[1].kind, AC_BLOCK_MAMBA);
        assert_int_equal(child.layers[1].mamba_heads, 2);
        /* the architecture maps back to the same choice */
        assert_int_equal(ac_cost_arch_choice(w.cost, &child, back), AC_OK);
        assert_memory_equal(back, choice, (size_t)n_axes * sizeof *choice);
        ac_cost_prediction p, q;
        assert_int_equal(ac_cost_predict(w.cost, choice, &p), AC_OK);
        assert_int_equal(ac_cost_predict_arch(w.cost, &child, &q), AC_OK);
        latency[layout] = p.latency_ms;
        assert_float_equal(p.latency_ms, rows_latency_ms(&w, &child), 1e-9 * p.latency_ms);
        assert_float_equal(q.latency_ms, p.latency_ms, 1e-12);
        assert_float_equal(q.memory_bytes, p.memory_bytes, 1e-6);
        ac_model *sliced;
        assert_int_equal(ac_model_slice(w.parent, &child, parent_layer, 0, &sliced), AC_OK);
        logits_of(sliced, NULL, tokens, N, sliced_logits);
        logits_of(w.parent, ac_routers_masks(w.routers, probs), tokens, N, masked);
        assert_true(max_diff(masked, sliced_logits) < 1e-5);
        ac_model_free(sliced);
        ac_arch_free(&child);
        free(probs);
        close_world(&w);
    }
    assert_float_equal(latency[0], latency[1], 1e-12);
}

/* A fresh directory holding data/train.bin (a short repeated phrase). */
static void make_data(char *dir, char *data, size_t size)
{
    assert_non_null(mkdtemp(dir));
    snprintf(data, size, "%s/data", dir);
    assert_int_equal(mkdir(data, 0777), 0);
    int32_t ids[1024];
    for (int i = 0; i < 1024; i++)
        ids[i] = (int32_t)((i % 5) * 7 + (i / 5) % 3) % V;
    for (int k = 0; k < 2; k++) { /* val.bin the same: Minitron++ scores its candidates there */
        char path[128];
        snprintf(path, sizeof path, "%s/%s", data, k ? "val.bin" : "train.bin");
        ac_tokens_writer *tw;
        assert_int_equal(ac_tokens_writer_open(path, V, &tw), AC_OK);
        assert_int_equal(ac_tokens_writer_append(tw, ids, 1024), AC_OK);
        assert_int_equal(ac_tokens_writer_close(tw), AC_OK);
    }
}

static void remove_dir(const char *dir)
{
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", dir);
    assert_int_equal(system(command), 0);
}

/* Minitron++ on the default layout: its grid has every homogeneous candidate with and
 * without the least important Mamba layer (a quarter of 4 layers may go), 2 x 2 x 2. */
static void test_minitron_grid_removes_mamba_layers(void **state)
{
    (void)state;
    world w;
    open_world(&w, AC_MAMBA_REMOVAL_GATE);
    char dir[] = "/tmp/ac-mamba-gate-XXXXXX", data[64], out[128], parent_dir[128];
    make_data(dir, data, sizeof data);
    snprintf(out, sizeof out, "%s/minitron", dir);
    snprintf(parent_dir, sizeof parent_dir, "%s/parent", dir);
    assert_int_equal(ac_model_save(w.parent, parent_dir, AC_DTYPE_F32), AC_OK);
    ac_minitron_params p = ac_minitron_default_params();
    p.parent_dir = parent_dir;
    p.measure = 0; /* synthetic tables: the cost on this machine is not theirs */
    p.data_dir = data;
    p.out_dir = out;
    p.calib_seqs = 2;
    p.seq_len = 16;
    p.batch = 2;
    p.candidates = 1;
    p.candidate_tokens = 2 * 2 * 16;
    p.max_depth_removal = 0.25f;
    p.progress = AC_PROGRESS_OFF;
    ac_minitron_report r;
    if (ac_minitron_run(w.parent, &w.contract, w.tables, &p, &r) != AC_OK)
        fail_msg("%s", ac_error_message());
    assert_int_equal(r.grid, 8);
    ac_arch_free(&r.arch);
    remove_dir(dir);
    close_world(&w);
}

/* Four router steps in the gate layout, then the same search in the heads layout in the
 * same directory: refused; the gate layout again resumes. */
static void test_a_state_of_the_other_layout_is_refused(void **state)
{
    (void)state;
    world w;
    open_world(&w, AC_MAMBA_REMOVAL_GATE);
    char dir[] = "/tmp/ac-mamba-gate-XXXXXX", data[64], out[128];
    make_data(dir, data, sizeof data);
    snprintf(out, sizeof out, "%s/search", dir);
    ac_search_params p = ac_search_default_params();
    p.data_dir = data;
    p.out_dir = out;
    p.calib_seqs = 2;
    p.batch = 2;
    p.seq_len = 16;
    p.max_tokens = 2 * 16 + 4 * 2 * 16;
    p.progress = AC_PROGRESS_OFF;
    ac_search_report r;
    if (ac_search_run(w.parent, &w.contract, w.tables, &p, &r) != AC_OK)
        fail_msg("%s", ac_error_message());
    ac_search_report_free(&r);
    p.mamba_removal = AC_MAMBA_REMOVAL_HEADS;
    assert_int_equal(ac_search_run(w.parent, &w.contract, w.tables, &p, &r), AC_ERR_INVALID);
    print_message("  %s\n", ac_error_message());
    assert_non_null(strstr(ac_error_message(), out));
    p.mamba_removal = AC_MAMBA_REMOVAL_GATE;
    assert_int_equal(ac_search_run(w.parent, &w.contract, w.tables, &p, &r), AC_OK);
    assert_int_equal(r.resumed_from, 4);
    ac_search_report_free(&r);
    remove_dir(dir);
    close_world(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_probability_scales_the_layer),
        cmocka_unit_test(test_removed_mamba_layer_is_the_sliced_model),
        cmocka_unit_test(test_minitron_grid_removes_mamba_layers),
        cmocka_unit_test(test_a_state_of_the_other_layout_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
