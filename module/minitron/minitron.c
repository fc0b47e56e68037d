/* Minitron++: homogeneous candidates from the search space and depth removal by layer
 * importance, filtered by the cost model, the largest few ranked by a short KD each. */
#include "search/search_loop.h"

#include "autocompress/config_json.h"
#include "autocompress/minitron.h"
#include "autocompress/prune.h"
#include "autocompress/tokens.h"
#include "autocompress/train.h"
#include "util/fs_util.h"
#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAIL_STEPS = 25 };

ac_minitron_params ac_minitron_default_params(void)
{
    ac_minitron_params p;
    memset(&p, 0, sizeof p);
    p.calib_seqs = 64;
    p.seq_len = 128;
    p.candidates = 4;
    p.batch = 4;
    p.kd_tau = 1.0f;
    p.max_depth_removal = 0.2f;
    p.optim = ac_adamw_default_params();
    p.optim.lr = 1e-3f;
    p.optim.weight_decay = 0.0f;
    p.seed = 1;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

typedef struct {
    int *choice;  /* per axis */
    double params;
    ac_cost_prediction cost;
    double kd;    /* tail KD loss once distilled */
} candidate;

typedef struct {
    const ac_minitron_params *p;
    const ac_contract *contract;
    const ac_model *parent;
    ac_model *teacher;    /* the parent on the device the short KDs run on; NULL: the parent */
    ac_cost_model *cost;
    ac_importance imp;
    int n_axes;
    candidate *grid;
    int n_grid, cap_grid;
    int *removal;   /* removable parent layers, least important first */
    int n_removal;
} minitron_run;

static ac_status importance(minitron_run *r)
{
    const ac_minitron_params *p = r->p;
    char path[AC_PATH_MAX], train[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, p->out_dir, "importance.safetensors");
    if (st != AC_OK)
        return st;
    if (ac_path_exists(path))
        return ac_importance_load(path, ac_model_arch(r->parent), &r->imp);
    ac_tokens *tokens = NULL;
    st = ac_path_join(train, sizeof train, p->data_dir, "train.bin");
    if (st == AC_OK)
        st = ac_tokens_open(train, &tokens);
    int32_t *calib = st == AC_OK ? malloc((size_t)p->calib_seqs * (p->seq_len + 1) * sizeof *calib) : NULL;
    if (st == AC_OK && !calib)
        st = ac_fail(AC_ERR_NOMEM, "minitron: out of memory for %d calibration sequences", p->calib_seqs);
    if (st == AC_OK)
        st = ac_tokens_sample_batch(tokens, p->seed ^ AC_CALIBRATION_STREAM, 0, p->calib_seqs, p->seq_len, calib, NULL);
    /* the windows are seq_len + 1 long; the importance takes seq_len of each */
    for (int b = 1; st == AC_OK && b < p->calib_seqs; b++)
        memmove(calib + (size_t)b * p->seq_len, calib + (size_t)b * (p->seq_len + 1), (size_t)p->seq_len * sizeof *calib);
    if (st == AC_OK)
        st = ac_importance_compute(r->parent, calib, p->calib_seqs, p->seq_len, &r->imp);
    free(calib);
    ac_tokens_close(tokens);
    return st == AC_OK ? ac_importance_save(&r->imp, path) : st;
}

/* The first axis of `kind` (NULL when the space has none). */
static const ac_cost_axis *first_axis(const ac_cost_model *m, ac_axis_kind kind)
{
    for (int a = 0; a < ac_cost_model_axis_count(m); a++)
        if (ac_cost_model_axis(m, a)->kind == kind)
            return ac_cost_model_axis(m, a);
    return NULL;
}

static int value_index(const ac_cost_axis *x, int value)
{
    for (int i = 0; i < x->count; i++)
        if (x->values[i] == value)
            return i;
    return -1;
}

/* Removable layers (those with a keep axis: the cost model's default layout gives
 * removable Mamba layers one too) ordered by the depth score, least important first. */
static ac_status removal_order(minitron_run *r)
{
    int L = ac_model_arch(r->parent)->n_layers;
    r->removal = malloc(((size_t)L + 1) * sizeof *r->removal);
    if (!r->removal)
        return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(r->cost, a);
        if (x->kind == AC_AXIS_KEEP)
            r->removal[r->n_removal++] = x->layer;
    }
    for (int i = 1; i < r->n_removal; i++) /* insertion sort: a dozen layers */
        for (int j = i; j > 0 && r->imp.depth[r->removal[j]] < r->imp.depth[r->removal[j - 1]]; j--) {
            int t = r->removal[j];
            r->removal[j] = r->removal[j - 1];
            r->removal[j - 1] = t;
        }
    return AC_OK;
}

/* A homogeneous choice: value index v[kind] on every axis of that kind, then the first
 * `removed` layers of the removal order removed. */
static void homogeneous_choice(const minitron_run *r, const int *v, int removed, int *choice)
{
    for (int a = 0; a < r->n_axes; a++) {
        const ac_cost_axis *x = ac_cost_model_axis(r->cost, a);
        int i = x->kind == AC_AXIS_KEEP ? value_index(x, 1) : v[x->kind];
        choice[a] = i < x->count ? i : x->count - 1;
    }
    for (int k = 0; k < removed; k++)
        for (int a = 0; a < r->n_axes; a++) {
            const ac_cost_axis *x = ac_cost_model_axis(r->cost, a);
            if (x->layer == r->removal[k] && x->kind == AC_AXIS_KEEP)
                choice[a] = value_index(x, 0);
        }
}

static int same_candidate(const candidate *a, const candidate *b)
{
    return a->params == b->params && a->cost.latency_ms == b->cost.latency_ms &&
           a->cost.memory_bytes == b->cost.memory_bytes;
}

static ac_status add_candidate(minitron_run *r, const int *choice)
{
    candidate c = {0};
    ac_arch arch;
    if (ac_cost_choice_arch(r->cost, choice, &arch, NULL) != AC_OK) {
        ac_clear_error(); /* e.g. a MoE with neither routed nor shared width: not a model */
        return AC_OK;
    }
    c.params = (double)ac_arch_param_counts(&arch).total;
    ac_arch_free(&arch);
    ac_status st = ac_cost_predict(r->cost, choice, &c.cost);
    if (st != AC_OK)
        return st;
    for (int i = 0; i < r->n_grid; i++)
        if (same_candidate(&r->grid[i], &c))
            return AC_OK; /* axes that no longer matter (experts of a layer without routed width) */
    if (r->n_grid == r->cap_grid) {
        int cap = r->cap_grid ? 2 * r->cap_grid : 256;
        candidate *g = realloc(r->grid, (size_t)cap * sizeof *g);
        if (!g)
            return ac_fail(AC_ERR_NOMEM, "minitron: out of memory for %d candidates", cap);
        r->grid = g;
        r->cap_grid = cap;
    }
    c.choice = malloc((size_t)r->n_axes * sizeof *c.choice);
    if (!c.choice)
        return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
    memcpy(c.choice, choice, (size_t)r->n_axes * sizeof *choice);
    r->grid[r->n_grid++] = c;
    return AC_OK;
}

/* Counts of the homogeneous values per kind. */
static int kind_count(const ac_cost_model *m, ac_axis_kind kind)
{
    const ac_cost_axis *x = first_axis(m, kind);
    return x ? x->count : 1;
}

static ac_status build_grid(minitron_run *r)
{
    int L = ac_model_arch(r->parent)->n_layers;
    int max_removed = (int)floor(r->p->max_depth_removal * L + 1e-9);
    if (max_removed > r->n_removal)
        max_removed = r->n_removal;
    int nh = kind_count(r->cost, AC_AXIS_HIDDEN), nm = kind_count(r->cost, AC_AXIS_MAMBA_HEADS);
    int ne = kind_count(r->cost, AC_AXIS_EXPERTS), nr = kind_count(r->cost, AC_AXIS_ROUTED_FFN);
    int ns = kind_count(r->cost, AC_AXIS_SHARED_FFN);
    int *choice = malloc((size_t)r->n_axes * sizeof *choice);
    if (!choice)
        return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
    ac_status st = AC_OK;
    int v[AC_AXIS_KEEP + 1] = {0};
    for (v[AC_AXIS_HIDDEN] = 0; st == AC_OK && v[AC_AXIS_HIDDEN] < nh; v[AC_AXIS_HIDDEN]++)
        for (v[AC_AXIS_MAMBA_HEADS] = 0; st == AC_OK && v[AC_AXIS_MAMBA_HEADS] < nm; v[AC_AXIS_MAMBA_HEADS]++)
            for (v[AC_AXIS_EXPERTS] = 0; st == AC_OK && v[AC_AXIS_EXPERTS] < ne; v[AC_AXIS_EXPERTS]++)
                for (v[AC_AXIS_ROUTED_FFN] = 0; st == AC_OK && v[AC_AXIS_ROUTED_FFN] < nr; v[AC_AXIS_ROUTED_FFN]++)
                    for (v[AC_AXIS_SHARED_FFN] = 0; st == AC_OK && v[AC_AXIS_SHARED_FFN] < ns; v[AC_AXIS_SHARED_FFN]++)
                        for (int k = 0; st == AC_OK && k <= max_removed; k++) {
                            homogeneous_choice(r, v, k, choice);
                            st = add_candidate(r, choice);
                        }
    free(choice);
    return st;
}

/* Largest first; equal sizes by predicted latency, then memory (a total order, so every
 * rerun ranks the same way). */
static int by_params_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->params != y->params)
        return x->params < y->params ? 1 : -1;
    if (x->cost.latency_ms != y->cost.latency_ms)
        return x->cost.latency_ms > y->cost.latency_ms ? 1 : -1;
    return x->cost.memory_bytes > y->cost.memory_bytes ? 1 : x->cost.memory_bytes < y->cost.memory_bytes ? -1 : 0;
}

/* Moves the candidates predicted to meet the targets to the front, ranked. */
static int select_feasible(minitron_run *r, const ac_budget_targets *t)
{
    int n = 0;
    for (int i = 0; i < r->n_grid; i++)
        if (ac_search_excess(t, &r->grid[i].cost) == 0) {
            candidate c = r->grid[i];
            r->grid[i] = r->grid[n];
            r->grid[n++] = c;
        }
    qsort(r->grid, (size_t)n, sizeof *r->grid, by_params_desc);
    return n;
}

/* One short KD from the importance-ordered slice; a finished one is read back. */
static ac_status distill_candidate(minitron_run *r, candidate *c, int rank, int64_t tokens, int64_t *used)
{
    const ac_minitron_params *p = r->p;
    char name[32], dir[AC_PATH_MAX], path[AC_PATH_MAX];
    snprintf(name, sizeof name, "candidates/c%d", rank); /* fits: 12 bytes and an int */
    ac_status st = ac_path_join(dir, sizeof dir, p->out_dir, name);
    if (st == AC_OK)
        st = ac_path_join(path, sizeof path, dir, "model.safetensors");
    if (st != AC_OK)
        return st;
    int steps = (int)(tokens / ((int64_t)p->batch * p->seq_len));
    *used = (int64_t)steps * p->batch * p->seq_len;
    if (!ac_path_exists(path)) {
        ac_arch arch;
        int *layers = malloc((size_t)ac_model_arch(r->parent)->n_layers * sizeof *layers);
        if (!layers)
            return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
        st = ac_cost_choice_arch(r->cost, c->choice, &arch, layers);
        ac_model *child = NULL;
        ac_prune_params pp = {&r->imp, layers};
        if (st == AC_OK) {
            st = ac_prune(r->parent, &arch, &pp, &child);
            ac_arch_free(&arch);
        }
        free(layers);
        if (st == AC_OK && r->teacher) /* the pruned candidate joins the teacher's device */
            st = ac_model_move_to_device(&child, p->device);
        ac_train_params tp = ac_train_default_params();
        tp.data_dir = p->data_dir;
        tp.out_dir = dir;
        tp.teacher = r->teacher ? r->teacher : r->parent;
        tp.kd_tau = p->kd_tau;
        tp.batch = p->batch;
        tp.seq_len = p->seq_len;
        tp.steps = steps;
        tp.optim = p->optim;
        tp.optim.warmup_steps = steps / 10;
        tp.seed = p->seed; /* the same batches for every candidate */
        tp.checkpoint_every = steps / 4 > 0 ? steps / 4 : 1;
        tp.eval_every = 0;
        tp.progress = p->progress;
        ac_train_report rep;
        if (st == AC_OK)
            st = ac_make_dirs(dir);
        if (st == AC_OK)
            st = ac_train_run(&child, &tp, &rep);
        ac_model_free(child);
        if (st != AC_OK)
            return ac_fail_context(st, "minitron: candidate %d", rank);
    }
    st = ac_path_join(path, sizeof path, dir, "loss.csv");
    int n = 0;
    return st == AC_OK ? ac_train_tail_loss(path, TAIL_STEPS, &c->kd, &n) : st;
}

static ac_status write_table(const minitron_run *r, int trained)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, r->p->out_dir, "minitron.csv");
    if (st != AC_OK)
        return st;
    FILE *f = fopen(path, "w");
    if (!f)
        return ac_fail(AC_ERR_IO, "minitron: cannot write %s", path);
    fprintf(f, "rank,parameters,latency_ms,throughput_tok_s,memory_mib,kd_loss\n");
    for (int i = 0; i < trained; i++) {
        const candidate *c = &r->grid[i];
        fprintf(f, "%d,%.0f,%.4f,%.2f,%.4f,%.6f\n", i, c->params, c->cost.latency_ms, c->cost.throughput_tok_s,
                c->cost.memory_bytes / (1024.0 * 1024.0), c->kd);
    }
    return fclose(f) == 0 ? AC_OK : ac_fail(AC_ERR_IO, "minitron: cannot write %s", path);
}

static ac_status write_outputs(const minitron_run *r, const ac_minitron_report *rep)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, r->p->out_dir, "arch.json");
    if (st == AC_OK)
        st = ac_config_json_write(path, &rep->arch);
    if (st != AC_OK)
        return st;
    ac_search_report sr;
    memset(&sr, 0, sizeof sr);
    sr.targets = rep->targets;
    sr.planned = rep->planned;
    sr.parent = rep->parent;
    sr.chosen = rep->chosen_cost;
    sr.meets = 1;
    sr.arch = rep->arch;
    sr.calib_tokens = rep->calib_tokens;
    sr.tokens = rep->tokens;
    cJSON *root = ac_search_summary_json(r->contract, r->cost, r->grid[rep->chosen].choice, NULL, &sr);
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
    cJSON_AddStringToObject(root, "method", "minitron++");
    cJSON_AddNumberToObject(root, "grid", rep->grid);
    cJSON_AddNumberToObject(root, "feasible", rep->feasible);
    cJSON *list = cJSON_AddArrayToObject(root, "candidates");
    for (int i = 0; list && i < rep->trained; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "parameters", r->grid[i].params);
        cJSON_AddNumberToObject(o, "kd_loss", r->grid[i].kd);
        cJSON_AddItemToArray(list, o);
    }
    st = ac_path_join(path, sizeof path, r->p->out_dir, "search.json");
    if (st == AC_OK)
        st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st == AC_OK ? write_table(r, rep->trained) : st;
}

static void free_run(minitron_run *r)
{
    for (int i = 0; i < r->n_grid; i++)
        free(r->grid[i].choice);
    free(r->grid);
    free(r->removal);
    ac_importance_free(&r->imp);
    ac_cost_model_free(r->cost);
    ac_model_free(r->teacher);
}

static ac_status check_params(const ac_minitron_params *p, const ac_contract *c, int64_t *per_candidate)
{
    if (!p->data_dir || !p->out_dir)
        return ac_fail(AC_ERR_INVALID, "minitron: data and output directories are required");
    if (p->candidates < 1 || p->calib_seqs < 1 || p->batch < 1 || p->seq_len < 2)
        return ac_fail(AC_ERR_INVALID, "minitron: candidates, calibration sequences, batch and seq_len must be positive");
    if (!(p->max_depth_removal >= 0 && p->max_depth_removal < 1))
        return ac_fail(AC_ERR_INVALID, "minitron: max_depth_removal must be in [0, 1), got %g", (double)p->max_depth_removal);
    *per_candidate = p->candidate_tokens;
    if (*per_candidate <= 0 && c->budgets.has_search_tokens)
        *per_candidate = c->budgets.search_tokens / p->candidates;
    if (*per_candidate < (int64_t)p->batch * p->seq_len)
        return ac_fail(AC_ERR_INVALID, "minitron: %lld KD tokens per candidate make no step of %d x %d (give the "
                                       "candidate tokens or the contract's budgets.search_tokens)",
                       (long long)*per_candidate, p->batch, p->seq_len);
    return AC_OK;
}

ac_status ac_minitron_run(const ac_model *parent, const ac_contract *contract, const ac_cost_tables *tables,
                          const ac_minitron_params *p, ac_minitron_report *rep)
{
    memset(rep, 0, sizeof *rep);
    int64_t per_candidate = 0;
    ac_status st = check_params(p, contract, &per_candidate);
    if (st != AC_OK)
        return st;
    minitron_run r = {.p = p, .contract = contract, .parent = parent};
    const ac_arch *pa = ac_model_arch(parent);
    if (p->device && strcmp(p->device, "cpu") != 0)
        st = ac_model_to_device(parent, p->device, &r.teacher);
    if (st == AC_OK)
        st = ac_make_dirs(p->out_dir);
    if (st == AC_OK)
        st = ac_cost_model_create(tables, pa, contract, &r.cost);
    if (st == AC_OK)
        st = ac_cost_predict_arch(r.cost, pa, &rep->parent);
    if (st == AC_OK)
        st = ac_search_resolve_targets(contract, &rep->parent, &rep->targets);
    rep->planned = ac_search_planned_targets(&rep->targets, contract->margin);
    if (st == AC_OK) {
        r.n_axes = ac_cost_model_axis_count(r.cost);
        st = importance(&r);
    }
    if (st == AC_OK)
        st = removal_order(&r);
    if (st == AC_OK)
        st = build_grid(&r);
    rep->grid = r.n_grid;
    rep->feasible = st == AC_OK ? select_feasible(&r, &rep->planned) : 0;
    if (st == AC_OK && rep->feasible == 0)
        st = ac_fail(AC_ERR_INVALID, "minitron: none of the %d homogeneous candidates is predicted to meet %s's targets",
                     r.n_grid, contract->name);
    rep->calib_tokens = (int64_t)p->calib_seqs * p->seq_len;
    rep->tokens = rep->calib_tokens;
    int trained = rep->feasible < p->candidates ? rep->feasible : p->candidates;
    for (int i = 0; st == AC_OK && i < trained; i++) {
        int64_t used = 0;
        st = distill_candidate(&r, &r.grid[i], i, per_candidate, &used);
        rep->tokens += used;
        rep->trained = i + 1;
        if (st == AC_OK && r.grid[i].kd < r.grid[rep->chosen].kd)
            rep->chosen = i;
    }
    if (st == AC_OK) {
        rep->chosen_kd = r.grid[rep->chosen].kd;
        rep->chosen_cost = r.grid[rep->chosen].cost;
        st = ac_cost_choice_arch(r.cost, r.grid[rep->chosen].choice, &rep->arch, NULL);
    }
    if (st == AC_OK)
        st = write_outputs(&r, rep);
    free_run(&r);
    return st;
}
