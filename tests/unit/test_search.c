/* The search loop on a tiny parent with synthetic cost tables whose rows grow with the
 * block's size: the budget alone (KD weight 0) drives the routers to an architecture the
 * cost model says meets the target, without repair; KD alone (budget weight 0) keeps the
 * parent and moves the routers towards it; on a target that binds, the learned
 * multipliers bring the expected cost to the target where the old fixed hinge ends far
 * under it; a search killed mid-way and run again ends with the same routers,
 * multipliers and architecture as one run straight through; a one-hot choice's
 * masks (top-k score masking) give the logits of that architecture sliced from the
 * parent; a search whose masked steps run on a backend the host cannot touch
 * (guarded_backend.h, standing in for a GPU) ends with the CPU's routers, architecture
 * and trained weights, bit for bit, and Minitron++'s short KDs there with the CPU's
 * losses and choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autocompress/config_json.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/minitron.h"
#include "autocompress/search.h"
#include "autocompress/tokens.h"
#include "guarded_backend.h"
#include "search/search_loop.h"
#include "masked_logits.h"
#include "space_rows.h"

enum { V = 48, D = 16 };

static const char *contract_text =
    "name = \"tiny\"; hardware = { device = \"cpu\"; threads = 1; };\n"
    "workload = { batch = 1; input_tokens = 8; output_tokens = 4; };\n"
    "targets = { latency_ratio = %s; };\n"
    "search_space = { hidden_sizes = [16, 12, 8]; mamba_heads = { values = [4, 2]; scope = \"per_layer\";\n"
    "  remove = true; }; routed_experts = [4, 2]; routed_ffn = [8, 4, 0]; shared_ffn = [8, 4, 0];\n"
    "  removable = [\"mamba\", \"moe\"]; };\n"
    "budgets = { search_tokens = 20000; };\n";

static void make_parent(ac_arch *a)
{
    const char *kinds = "ME*M-E";
    int n = (int)strlen(kinds);
    *a = (ac_arch){.vocab = V, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, n), AC_OK);
    for (int i = 0; i < n; i++) {
        a->layers[i] = (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                                       .conv_kernel = 4, .attn_heads = 2, .attn_kv_heads = 1, .attn_head_dim = 8,
                                       .ffn = 12, .n_experts = 4, .top_k = 2, .expert_ffn = 8, .shared_ffn = 8,
                                       .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 1.0f};
        a->layers[i].kind = kinds[i] == 'M' ? AC_BLOCK_MAMBA : kinds[i] == '*' ? AC_BLOCK_ATTENTION
                            : kinds[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
}

/* A row costing in proportion to the block's width (and to the hidden size). */
static void put_sized_row(ac_cost_row r, void *tables)
{
    double size = r.kind == AC_ROW_ATTENTION ? 4
                  : r.kind == AC_ROW_MLP     ? r.ffn / 4.0
                  : r.kind == AC_ROW_MAMBA   ? 2.0 * r.heads
                  : r.kind == AC_ROW_MOE     ? r.experts * 0.5 + r.expert_ffn + r.shared_ffn / 4.0
                                             : 1;
    r.prefill_us = 20.0 * size * r.hidden / D;
    r.decode_a_us = 1.0 * size * r.hidden / D;
    r.samples = 1;
    assert_int_equal(ac_cost_tables_add_row(tables, &r), AC_OK);
}

/* Every row the space needs, each costing in proportion to the block's width. */
static ac_cost_tables *make_tables(const ac_contract *c)
{
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", c->name);
    info.workload = c->workload;
    info.threads = 1;
    info.eps_bytes = 1000.0;
    ac_cost_tables *t = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &t), AC_OK);
    space_rows(&c->search, 12, put_sized_row, t);
    ac_memory_point mp = {D, 3e5, 2e5, 1e4, 1e4, 5e4};
    assert_int_equal(ac_cost_tables_add_memory(t, &mp), AC_OK);
    return t;
}

typedef struct {
    char dir[64];
    char data[128];
    ac_model *parent;
    ac_cost_tables *tables;
    ac_contract contract;
} fixture;

static void load_contract(fixture *f, const char *ratio)
{
    char text[2048];
    snprintf(text, sizeof text, contract_text, ratio);
    assert_int_equal(ac_contract_parse_string(text, "tiny.cfg", &f->contract), AC_OK);
}

static int make_model(fixture *f)
{
    ac_arch a;
    make_parent(&a);
    ac_status st = ac_model_create(&a, &f->parent);
    ac_arch_free(&a);
    if (st != AC_OK)
        return -1;
    ac_model_init_random(f->parent, 5, 0.3f);
    return 0;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ac-search-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    mkdir(f->data, 0777);
    int32_t ids[4096];
    /* a learnable text: short repeated phrases (val.bin, the same: Minitron++'s held-out scores) */
    for (int i = 0; i < 4096; i++)
        ids[i] = (int32_t)((i % 7) * 5 + (i / 7) % 3) % V;
    for (int k = 0; k < 2; k++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", f->data, k ? "val.bin" : "train.bin");
        ac_tokens_writer *w;
        if (ac_tokens_writer_open(path, V, &w) != AC_OK)
            return -1;
        ac_tokens_writer_append(w, ids, 4096);
        if (ac_tokens_writer_close(w) != AC_OK)
            return -1;
    }
    *state = f;
    return make_model(f);
}

static int teardown(void **state)
{
    fixture *f = *state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", f->dir);
    if (!getenv("KEEP") && system(command) != 0)
        return -1;
    ac_cost_tables_free(f->tables);
    ac_model_free(f->parent);
    free(f);
    return 0;
}

static ac_search_params params_in(fixture *f, const char *name)
{
    ac_search_params p = ac_search_default_params();
    static char out[4][160];
    static int next;
    char *o = out[next++ % 4];
    snprintf(o, 160, "%s/%s", f->dir, name);
    p.data_dir = f->data;
    p.out_dir = o;
    p.calib_seqs = 4;
    p.batch = 2;
    p.seq_len = 16;
    p.max_tokens = 4 * 16 + 60 * 2 * 16; /* 60 router steps */
    p.lr = 0.1f;
    p.checkpoint_every = 5;
    p.progress = AC_PROGRESS_OFF;
    return p;
}

static void read_file(const char *path, char **data, size_t *n);

static void test_budget_alone_meets_the_target(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    ac_search_params p = params_in(f, "budget");
    p.kd_weight = 0;
    ac_search_report r;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &p, &r), AC_OK);
    printf("parent %.1f ms, target %.1f ms, chosen %.1f ms, repair steps %d\n", r.parent.latency_ms,
           r.targets.latency_ms, r.chosen.latency_ms, r.repair_steps);
    assert_true(r.targets.latency_ms < 0.35 * r.parent.latency_ms);
    assert_true(r.meets);
    /* the search aims the contract's default margin inside the target */
    assert_float_equal(r.planned.latency_ms, (1.0 - AC_CONTRACT_DEFAULT_MARGIN) * r.targets.latency_ms, 1e-9);
    assert_true(r.chosen.latency_ms <= r.planned.latency_ms);
    assert_int_equal(r.repair_steps, 0);
    assert_int_equal(r.steps, 60);
    assert_int_equal(r.tokens, p.max_tokens);
    /* the outputs are there and arch.json reads back as the chosen architecture */
    char path[256];
    snprintf(path, sizeof path, "%s/arch.json", p.out_dir);
    ac_arch back;
    assert_int_equal(ac_config_json_read(path, &back), AC_OK);
    assert_int_equal(back.n_layers, r.arch.n_layers);
    assert_int_equal(back.hidden, r.arch.hidden);
    ac_arch_free(&back);
    /* search.json names each chosen layer's parent layer, in order */
    char *summary;
    size_t summary_len;
    snprintf(path, sizeof path, "%s/search.json", p.out_dir);
    read_file(path, &summary, &summary_len);
    summary = realloc(summary, summary_len + 1);
    summary[summary_len] = '\0';
    const char *layers = strstr(summary, "\"parent_layers\"");
    assert_non_null(layers);
    int previous = -1, count = 0;
    char *q = strchr(layers, '[') + 1;
    for (;;) {
        q += strspn(q, " \t\n,");
        if (*q == ']')
            break;
        char *end;
        int v = (int)strtol(q, &end, 10);
        assert_true(end != q);
        q = end;
        assert_true(v > previous && v < ac_model_arch(f->parent)->n_layers);
        previous = v;
        count++;
    }
    assert_int_equal(count, r.arch.n_layers);
    free(summary);
    snprintf(path, sizeof path, "%s/search.csv", p.out_dir);
    FILE *csv = fopen(path, "r");
    assert_non_null(csv);
    int lines = 0;
    for (int c; (c = fgetc(csv)) != EOF;)
        lines += c == '\n';
    fclose(csv);
    assert_int_equal(lines, 61);
    ac_search_report_free(&r);
}

static void test_kd_alone_keeps_the_parent(void **state)
{
    fixture *f = *state;
    load_contract(f, "1.0");
    f->contract.margin = 0; /* a target the parent meets exactly */
    f->tables = make_tables(&f->contract);
    ac_search_params p = params_in(f, "kd");
    p.budget = (ac_budget_weights){0, 0};
    p.dual_lr = p.dual_damping = 0; /* the multipliers stay 0 */
    ac_search_report r;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &p, &r), AC_OK);
    const ac_arch *pa = ac_model_arch(f->parent);
    assert_int_equal(r.repair_steps, 0);
    assert_int_equal(r.arch.n_layers, pa->n_layers);
    assert_int_equal(r.arch.hidden, pa->hidden);
    /* Every layer, the hidden size and the heads stay. AdamW moves the logits of values
     * whose KD differs by almost nothing (channels the reorder put last, ~1e-4 of KD) by
     * the same step, so such a near-tie may end on the smaller value: the widths may
     * differ by one step at most, and the model must keep the parent's function. */
    int width_steps = 0;
    for (int i = 0; i < pa->n_layers; i++) {
        const ac_block_dims *c = &r.arch.layers[i], *q = &pa->layers[i];
        assert_int_equal(c->kind, q->kind);
        assert_int_equal(c->mamba_heads, q->mamba_heads);
        width_steps += (c->n_experts != q->n_experts) + (c->expert_ffn != q->expert_ffn) +
                       (c->shared_ffn != q->shared_ffn);
        assert_true(2 * c->shared_ffn >= q->shared_ffn && 2 * c->expert_ffn >= q->expert_ffn);
    }
    printf("KD alone: %d width steps off the parent, final KD %.2g\n", width_steps, r.last_kd);
    assert_true(width_steps <= 1);
    assert_true(r.last_kd < 1e-2);
    /* and the KD moved the routers towards the parent: the hidden axis is no longer uniform */
    char path[256];
    snprintf(path, sizeof path, "%s/search.csv", p.out_dir);
    FILE *csv = fopen(path, "r");
    char line[8192], last[8192] = "";
    while (fgets(line, sizeof line, csv))
        memcpy(last, line, sizeof line);
    fclose(csv);
    /* column 12 is the first axis (hidden)'s maximum probability */
    char *field = last;
    for (int c = 1; c < 12; c++)
        field = strchr(field, ',') + 1;
    printf("hidden axis: max probability %.4f after KD alone (uniform: 0.3333)\n", atof(field));
    assert_true(atof(field) > 0.4);
    ac_search_report_free(&r);
}

/* The old router optimisation: the fixed hinge, AdamW per logit at a constant lr, the
 * targets warmed up from the parent's cost. */
static void set_old_optimisation(ac_search_params *p)
{
    p->budget_mode = AC_BUDGET_HINGE;
    p->router_optim = AC_ROUTER_ADAMW;
    p->lr_schedule = AC_LR_CONSTANT;
    p->warmup_from = AC_WARMUP_FROM_PARENT;
    p->fill = 0;
}

/* The fraction of search.csv's rows from `from` on whose overall ||grad KD|| /
 * ||grad budget|| (the column "ratio:all") is a number: the budget acted on that step. */
static double rows_with_budget(const char *dir, int from)
{
    char path[256], line[8192];
    snprintf(path, sizeof path, "%s/search.csv", dir);
    FILE *csv = fopen(path, "r");
    assert_non_null(csv);
    assert_non_null(fgets(line, sizeof line, csv));
    int col = 0;
    char *field = line;
    for (; field && strncmp(field, "ratio:all,", 10); col++)
        field = strchr(field, ',') ? strchr(field, ',') + 1 : NULL;
    assert_non_null(field);
    int rows = 0, active = 0;
    for (int row = 0; fgets(line, sizeof line, csv); row++) {
        char *f = line;
        for (int c = 0; c < col && f; c++)
            f = strchr(f, ',') + 1;
        if (row >= from) {
            rows++;
            active += isfinite(atof(f));
        }
    }
    fclose(csv);
    return rows ? (double)active / rows : 0.0;
}

/* A target that binds (the routers' KD pulls towards the parent, at about twice the
 * planned latency): with the learned multipliers, the shared-moment step and the lr that
 * follows the temperature, the routers' expected latency ends within a few % of the
 * planned target and the choice uses most of it; the old settings (fixed hinge,
 * per-logit AdamW at a constant lr, warm-up from the parent's cost) end far under it,
 * with the budget off on most steps. */
static void test_budget_converges_on_a_binding_target(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.5");
    f->tables = make_tables(&f->contract);
    double end[2], chosen[2], active[2];
    for (int old = 0; old < 2; old++) {
        ac_search_params p = params_in(f, old ? "old" : "new");
        if (old)
            set_old_optimisation(&p);
        ac_search_report r;
        assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &p, &r), AC_OK);
        assert_true(r.parent.latency_ms > 1.5 * r.planned.latency_ms);
        end[old] = r.last_expected.latency_ms / r.planned.latency_ms;
        chosen[old] = r.chosen.latency_ms / r.planned.latency_ms;
        active[old] = rows_with_budget(p.out_dir, 30);
        assert_true(r.meets);
        printf("%s: expected latency %.4f of planned at the end, chosen %.4f, multiplier %.4g, budget active on "
               "%.0f%% of the last 30 steps\n", old ? "old" : "new", end[old], chosen[old], r.multipliers[0],
               100 * active[old]);
        ac_search_report_free(&r);
    }
    assert_true(fabs(end[0] - 1.0) < 0.04);
    assert_true(chosen[0] > 0.9);
    assert_true(active[0] > 0.9);
    assert_true(end[1] < 0.5 && chosen[1] < 0.5);
}

static void read_file(const char *path, char **data, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    rewind(fp);
    *data = malloc(*n);
    assert_int_equal(fread(*data, 1, *n, fp), *n);
    fclose(fp);
}

/* The settings of the kill-and-resume runs; with train_weights the weights learn too. */
static ac_search_params resume_params(fixture *f, const char *name, int train_weights)
{
    ac_search_params p = params_in(f, name);
    p.train_weights = train_weights;
    p.weights_optim.lr = 3e-3f;
    return p;
}

static void assert_same_file(const char *dir_a, const char *dir_b, const char *name)
{
    char a[256], b[256], *da, *db;
    size_t na, nb;
    snprintf(a, sizeof a, "%s/%s", dir_a, name);
    snprintf(b, sizeof b, "%s/%s", dir_b, name);
    read_file(a, &da, &na);
    read_file(b, &db, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da);
    free(db);
}

/* A search killed (SIGKILL, in another process) once it has saved a state, then run again
 * with the same settings, ends as one run straight through: the same router state and
 * architecture, and with train_weights the same trained weights. */
static void check_kill_and_resume(fixture *f, int train_weights)
{
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    ac_search_params straight = resume_params(f, "straight", train_weights);
    ac_search_params killed = resume_params(f, "killed", train_weights);
    ac_search_report r;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &straight, &r), AC_OK);
    ac_search_report_free(&r);

    char state_path[256];
    /* killed once a resumable state is whole: with train_weights, once its weights are */
    snprintf(state_path, sizeof state_path, "%s/%s", killed.out_dir,
             train_weights ? "weights_checkpoint/state.json" : "search_state.bin");
    /* the killed run is another process (this one's OpenMP pool does not survive a fork) */
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_search", "--search-child", f->dir, train_weights ? "weights" : "frozen",
              (char *)NULL);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 20000 && stat(state_path, &sb) != 0; i++)
        usleep(500);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    int was_killed = WIFSIGNALED(status);
    printf("the first run was %s\n", was_killed ? "killed mid-way" : "already finished");
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &killed, &r), AC_OK);
    if (was_killed)
        assert_true(r.resumed_from > 0);
    ac_search_report_free(&r);

    assert_same_file(straight.out_dir, killed.out_dir, "search_state.bin");
    assert_same_file(straight.out_dir, killed.out_dir, "arch.json");
    if (train_weights)
        assert_same_file(straight.out_dir, killed.out_dir, "weights/model.safetensors");
    /* the states compared hold learned multipliers: the latency target's is positive */
    ac_search_state saved;
    ac_cost_model *cost;
    assert_int_equal(ac_cost_model_create(f->tables, ac_model_arch(f->parent), &f->contract, &cost), AC_OK);
    int n = ac_cost_model_prob_count(cost), found = 0; /* one logit per candidate value */
    ac_cost_model_free(cost);
    float *buf = malloc(3 * (size_t)n * sizeof *buf);
    assert_non_null(buf);
    assert_int_equal(ac_search_state_load(killed.out_dir, -1, &saved, buf, buf + n, buf + 2 * n, n, &found), AC_OK);
    free(buf);
    printf("latency multiplier in the resumed state: %.4g\n", saved.lambda[AC_BUDGET_LATENCY]);
    assert_true(found && saved.lambda[AC_BUDGET_LATENCY] > 0);
    /* other settings on the same directory are refused: the old budget, another lr */
    ac_search_params other = killed;
    other.budget_mode = AC_BUDGET_HINGE;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &other, &r), AC_ERR_INVALID);
    killed.lr = 0.2f;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &killed, &r), AC_ERR_INVALID);
}

static void test_killed_search_resumes_identically(void **state) { check_kill_and_resume(*state, 0); }

static void test_search_on_a_device_equals_cpu(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    ac_search_params cpu = resume_params(f, "on_cpu", 1), dev = resume_params(f, "on_device", 1);
    ac_search_report r;
    dev.device = "tpu"; /* refused before the calibration's work */
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &dev, &r), AC_ERR_UNSUPPORTED);
    assert_non_null(strstr(ac_error_message(), "\"tpu\": not in this build"));
    dev.device = guarded_backend.name;
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &cpu, &r), AC_OK);
    ac_search_report_free(&r);
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &dev, &r), AC_OK);
    ac_search_report_free(&r);
    assert_same_file(cpu.out_dir, dev.out_dir, "search_state.bin");
    assert_same_file(cpu.out_dir, dev.out_dir, "arch.json");
    assert_same_file(cpu.out_dir, dev.out_dir, "weights/model.safetensors");
    assert_int_equal(guarded_count, 0);
    /* run again: it resumes from its last state, through the host onto the device */
    assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &dev, &r), AC_OK);
    assert_true(r.resumed_from > 0);
    ac_search_report_free(&r);
    assert_same_file(cpu.out_dir, dev.out_dir, "arch.json");
}

static void test_killed_search_with_trained_weights_resumes_identically(void **state)
{
    check_kill_and_resume(*state, 1);
}

/* With --train-weights the student's weights learn to make up for the masks: on the same
 * batches, the last steps' KD is lower than with frozen weights; the teacher (the parent)
 * is untouched and the trained weights are saved. */
/* Minitron++'s short KDs on the guarded backend: the CPU's losses and choice. */
static void test_minitron_on_a_device_equals_cpu(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    char out[2][200], parent_dir[200];
    snprintf(parent_dir, sizeof parent_dir, "%s/parent", f->dir);
    assert_int_equal(ac_model_save(f->parent, parent_dir, AC_DTYPE_F32), AC_OK);
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof out[i], "%s/minitron_%s", f->dir, i ? "device" : "cpu");
        ac_minitron_params p = ac_minitron_default_params();
        p.parent_dir = parent_dir;
        p.measure = 0; /* synthetic tables: the cost on this machine is not theirs */
        p.data_dir = f->data;
        p.out_dir = out[i];
        p.calib_seqs = 4;
        p.seq_len = 16;
        p.batch = 2;
        p.candidates = 2;
        p.candidate_tokens = 8 * 2 * 16; /* 6 KD steps of 2 x 16, 2 batches scored */
        p.progress = AC_PROGRESS_OFF;
        p.device = i ? guarded_backend.name : NULL;
        ac_minitron_report r;
        assert_int_equal(ac_minitron_run(f->parent, &f->contract, f->tables, &p, &r), AC_OK);
        assert_int_equal(r.trained, 2);
        ac_arch_free(&r.arch);
    }
    assert_same_file(out[0], out[1], "minitron.csv");
    assert_same_file(out[0], out[1], "arch.json");
    assert_int_equal(guarded_count, 0);
}

static void test_trained_weights_lower_the_kd(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    size_t n;
    float *arena = ac_model_arena(f->parent, &n);
    float *before = malloc(n * sizeof *before);
    assert_non_null(before);
    memcpy(before, arena, n * sizeof *before);
    double kd[2];
    ac_search_params p[2] = {resume_params(f, "frozen", 0), resume_params(f, "trained", 1)};
    for (int i = 0; i < 2; i++) {
        ac_search_report r;
        assert_int_equal(ac_search_run(f->parent, &f->contract, f->tables, &p[i], &r), AC_OK);
        ac_search_report_free(&r);
        /* the mean KD (column 4) of the last 10 steps */
        char path[256], line[8192];
        snprintf(path, sizeof path, "%s/search.csv", p[i].out_dir);
        FILE *csv = fopen(path, "r");
        assert_non_null(csv);
        double sum = 0;
        for (int row = -1; fgets(line, sizeof line, csv); row++)
            if (row >= 50)
                sum += atof(strchr(strchr(strchr(line, ',') + 1, ',') + 1, ',') + 1);
        fclose(csv);
        kd[i] = sum / 10;
    }
    printf("mean KD of the last 10 steps: frozen %.4f, trained %.4f\n", kd[0], kd[1]);
    assert_true(kd[1] < 0.9 * kd[0]);
    assert_memory_equal(before, arena, n * sizeof *before);
    free(before);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/weights", p[1].out_dir);
    ac_model *trained;
    assert_int_equal(ac_model_load(dir, &trained), AC_OK);
    size_t m;
    float *w = ac_model_arena(trained, &m);
    assert_int_equal(m, n);
    assert_true(memcmp(w, arena, n * sizeof *w) != 0);
    ac_model_free(trained);
}

/* The choice of each axis for the one-hot test: layer 5 is removed and every other
 * axis (hidden size and Mamba heads too) takes its smallest non-zero value. */
static int one_hot_index(const ac_cost_axis *a)
{
    int pick = 0;
    for (int i = 0; i < a->count; i++)
        if (a->kind == AC_AXIS_KEEP ? a->values[i] == (a->layer == 5 ? 0 : 1) : a->values[i] > 0)
            pick = i;
    return pick;
}

/* The head count the one-hot choice gives the first Mamba layer. */
static int child_heads_check(const ac_cost_model *cost, const int *choice)
{
    for (int a = 0; a < ac_cost_model_axis_count(cost); a++)
        if (ac_cost_model_axis(cost, a)->kind == AC_AXIS_MAMBA_HEADS)
            return ac_cost_model_axis(cost, a)->values[choice[a]];
    return -1;
}

/* With top-k score masking, a one-hot choice's masks give the logits of the architecture
 * it names, sliced from the parent (independently, by ac_model_slice): experts masked out
 * are never routed to. With output masking they still take their share of the routing,
 * so the logits differ. */
static void test_one_hot_masks_are_the_sliced_model(void **state)
{
    fixture *f = *state;
    load_contract(f, "0.3");
    f->tables = make_tables(&f->contract);
    const ac_arch *pa = ac_model_arch(f->parent);
    ac_cost_model *cost;
    ac_routers *routers;
    assert_int_equal(ac_cost_model_create(f->tables, pa, &f->contract, &cost), AC_OK);
    assert_int_equal(ac_routers_create(cost, pa, &routers), AC_OK);
    int n_axes = ac_cost_model_axis_count(cost), choice[64];
    double probs[256] = {0};
    assert_true(n_axes <= 64 && ac_routers_count(routers) <= 256);
    int reduced_experts = 0;
    for (int a = 0; a < n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        choice[a] = one_hot_index(ax);
        probs[ax->offset + choice[a]] = 1.0;
        reduced_experts += ax->kind == AC_AXIS_EXPERTS && choice[a] > 0;
    }
    assert_true(reduced_experts > 0);
    assert_true(ac_cost_model_axis(cost, 0)->kind == AC_AXIS_HIDDEN && choice[0] > 0);
    assert_int_equal(child_heads_check(cost, choice), 2);
    ac_arch child;
    int parent_layer[16];
    assert_int_equal(ac_cost_choice_arch(cost, choice, &child, parent_layer), AC_OK);
    assert_int_equal(child.n_layers, pa->n_layers - 1);
    ac_model *sliced;
    assert_int_equal(ac_model_slice(f->parent, &child, parent_layer, 0, &sliced), AC_OK);

    enum { N = 12 };
    int32_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = (int32_t)((i * 11 + 3) % V);
    float want[N * V], got[N * V];
    logits_of(sliced, NULL, tokens, N, want);
    ac_routers_set_expert_masking(routers, AC_EXPERT_SCORE_MASKING);
    logits_of(f->parent, ac_routers_masks(routers, probs), tokens, N, got);
    double worst = 0, output_worst = 0;
    for (int i = 0; i < N * V; i++)
        worst = fmax(worst, fabs((double)got[i] - want[i]));
    ac_routers_set_expert_masking(routers, AC_EXPERT_OUTPUT_MASKING);
    logits_of(f->parent, ac_routers_masks(routers, probs), tokens, N, got);
    for (int i = 0; i < N * V; i++)
        output_worst = fmax(output_worst, fabs((double)got[i] - want[i]));
    printf("one-hot masks vs the sliced model: max |diff| %.3g (score masking), %.3g (output masking)\n", worst,
           output_worst);
    assert_true(worst < 1e-5);
    assert_true(output_worst > 1e-3);
    ac_model_free(sliced);
    ac_arch_free(&child);
    ac_routers_free(routers);
    ac_cost_model_free(cost);
}

/* The discrete choice from crafted distributions: every axis at the parent's value with
 * certainty but the hidden size, costs in proportion to it (about 0.75 of the parent's
 * at hidden 12 and 0.5 at 8, make_tables). Returns the chosen hidden size. */
static int discretize_hidden(fixture *f, ac_cost_model *cost, const ac_importance *imp, double p16, double p12,
                             double p8, double ratio, ac_search_report *r)
{
    int n_axes = ac_cost_model_axis_count(cost);
    float logits[256];
    for (int i = 0; i < 256; i++)
        logits[i] = -30.0f; /* (as good as) probability 0 at temperature 1 */
    for (int a = 0; a < n_axes; a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        if (ax->kind == AC_AXIS_HIDDEN) {
            double p[3] = {p16, p12, p8};
            for (int i = 0; i < 3; i++)
                logits[ax->offset + i] = p[i] > 0 ? (float)log(p[i]) : -30.0f;
        } else {
            logits[ax->offset] = 0.0f;
        }
    }
    ac_cost_prediction parent;
    assert_int_equal(ac_cost_predict_arch(cost, ac_model_arch(f->parent), &parent), AC_OK);
    ac_budget_targets t = {.latency_ms = ratio * parent.latency_ms};
    /* without the fill (tested in test_search_discretize.c), which would move a decided 8 up */
    ac_discretize_inputs in = {cost, ac_model_arch(f->parent), imp, &t, logits, 1.0f, 0, 0};
    ac_discrete_choice d;
    memset(r, 0, sizeof *r);
    assert_int_equal(ac_search_discretize(&in, &d, r), AC_OK);
    assert_true(r->meets);
    int hidden = r->arch.hidden;
    ac_search_report_free(r);
    ac_discrete_choice_free(&d);
    return hidden;
}

/* An undecided axis (most probable value below 0.9) takes the value of its two best that
 * meets the target with the least slack: its second value when the argmax misses (no
 * repair needed) or overshoots by a whole step; a decided axis keeps its argmax. */
static void test_undecided_axes_settle_on_the_target(void **state)
{
    fixture *f = *state;
    load_contract(f, "1.0");
    f->tables = make_tables(&f->contract);
    ac_cost_model *cost;
    assert_int_equal(ac_cost_model_create(f->tables, ac_model_arch(f->parent), &f->contract, &cost), AC_OK);
    int32_t tokens[2 * 16];
    for (int i = 0; i < 32; i++)
        tokens[i] = (int32_t)((i * 5 + 1) % V);
    ac_importance imp;
    assert_int_equal(ac_importance_compute(f->parent, tokens, 2, 16, &imp), AC_OK);
    ac_search_report r;
    /* the argmax (16) misses 0.8 of the parent; its second value (12) meets it */
    assert_int_equal(discretize_hidden(f, cost, &imp, 0.55, 0.45, 0.0, 0.8, &r), 12);
    assert_int_equal(r.settled_axes, 1);
    assert_int_equal(r.repair_steps, 0);
    /* the argmax (8) leaves half the budget unused; 12 meets it more closely */
    assert_int_equal(discretize_hidden(f, cost, &imp, 0.0, 0.45, 0.55, 0.8, &r), 12);
    assert_int_equal(r.settled_axes, 1);
    /* decided: 8 stays */
    assert_int_equal(discretize_hidden(f, cost, &imp, 0.0, 0.05, 0.95, 0.8, &r), 8);
    assert_int_equal(r.settled_axes, 0);
    /* neither 16 nor 12 alone meets 0.6: the repair steps axes down until it is met */
    (void)discretize_hidden(f, cost, &imp, 0.55, 0.45, 0.0, 0.6, &r);
    assert_true(r.repair_steps > 0);
    ac_importance_free(&imp);
    ac_cost_model_free(cost);
}

/* The killed run of check_kill_and_resume: the same parent, contract, tables and
 * settings, rebuilt in a fresh process from the fixture's directory. */
static int search_child(const char *dir, int train_weights)
{
    fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "%s", dir);
    snprintf(f.data, sizeof f.data, "%s/data", dir);
    if (make_model(&f) != 0)
        return 1;
    load_contract(&f, "0.3");
    f.tables = make_tables(&f.contract);
    ac_search_params p = resume_params(&f, "killed", train_weights);
    ac_search_report r;
    return ac_search_run(f.parent, &f.contract, f.tables, &p, &r) == AC_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--search-child"))
        return search_child(argv[2], !strcmp(argv[3], "weights"));
    if (ac_backend_register(&guarded_backend) != AC_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_budget_alone_meets_the_target, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kd_alone_keeps_the_parent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_converges_on_a_binding_target, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_search_resumes_identically, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_search_with_trained_weights_resumes_identically, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_on_a_device_equals_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_minitron_on_a_device_equals_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trained_weights_lower_the_kd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_hot_masks_are_the_sliced_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_undecided_axes_settle_on_the_target, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
