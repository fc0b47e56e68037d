/* Minitron++: homogeneous candidates from the search space and depth removal by layer
 * importance, filtered by the cost model, the largest few ranked (autocompress/rank.h):
 * measured, those that miss dropped, the rest by a short KD each. */
#include "search/search_loop.h"

#include "autocompress/config_json.h"
#include "autocompress/minitron.h"
#include "autocompress/rank.h"
#include "autocompress/tokens.h"
#include "util/child.h"
#include "util/fs_util.h"
#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    p.measure = 1;
    p.sweeps = 5;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

typedef struct {
    int *choice;  /* per axis */
    double params;
    ac_cost_prediction cost;
} candidate;

typedef struct {
    const ac_minitron_params *p;
    const ac_contract *contract;
    const ac_model *parent; /* NULL: p->parent_dir's, loaded where needed */
    ac_arch parent_arch;
    ac_cost_model *cost;
    ac_importance imp;
    int n_axes;
    candidate *grid;
    int n_grid, cap_grid;
    int *removal;   /* removable parent layers, least important first */
    int n_removal;
} minitron_run;

/* The importance of `parent` from calibration windows of train.bin, saved to `path`. */
static ac_status compute_importance(const ac_model *parent, const ac_minitron_params *p, const char *path)
{
    char train[AC_PATH_MAX];
    ac_importance imp;
    memset(&imp, 0, sizeof imp);
    ac_tokens *tokens = NULL;
    ac_status st = ac_path_join(train, sizeof train, p->data_dir, "train.bin");
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
        st = ac_importance_compute(parent, calib, p->calib_seqs, p->seq_len, &imp);
    free(calib);
    ac_tokens_close(tokens);
    if (st == AC_OK)
        st = ac_importance_save(&imp, path);
    ac_importance_free(&imp);
    return st;
}

typedef struct {
    const minitron_run *r;
    const char *path;
} importance_job;

static ac_status importance_child(void *arg, int fd)
{
    const importance_job *j = arg;
    ac_model *loaded = NULL;
    ac_status st = ac_child_start_team(fd);
    if (st == AC_OK && !j->r->parent)
        st = ac_model_load(j->r->p->parent_dir, &loaded);
    if (st == AC_OK)
        st = compute_importance(j->r->parent ? j->r->parent : loaded, j->r->p, j->path);
    ac_model_free(loaded);
    return st;
}

/* Computed once and saved; in a child process when the candidates will be measured (the
 * measurement forks, and this process must not have started OpenMP by then) or when the
 * parent is to be loaded for it. */
static ac_status importance(minitron_run *r)
{
    const ac_minitron_params *p = r->p;
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, p->out_dir, "importance.safetensors");
    if (st == AC_OK && !ac_path_exists(path)) {
        if (r->parent && !p->measure) {
            st = compute_importance(r->parent, p, path);
        } else {
            importance_job job = {r, path};
            void *out = NULL;
            size_t bytes = 0;
            st = ac_run_in_child(importance_child, &job, &out, &bytes);
            free(out);
        }
    }
    return st == AC_OK ? ac_importance_load(path, &r->parent_arch, &r->imp) : st;
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
    int L = r->parent_arch.n_layers;
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
    int L = r->parent_arch.n_layers;
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

/* The shortlist as the ranking's candidates: each one's architecture and kept layers. */
static ac_status make_candidates(const minitron_run *r, int n, ac_rank_candidate **out)
{
    ac_rank_candidate *c = calloc((size_t)n, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < n; i++) {
        c[i].parent_layers = malloc(((size_t)r->parent_arch.n_layers + 1) * sizeof *c[i].parent_layers);
        st = c[i].parent_layers ? ac_cost_choice_arch(r->cost, r->grid[i].choice, &c[i].arch, c[i].parent_layers)
                                : ac_fail(AC_ERR_NOMEM, "minitron: out of memory");
        c[i].predicted = r->grid[i].cost;
    }
    if (st != AC_OK) {
        ac_rank_candidates_free(c, n);
        return st;
    }
    *out = c;
    return AC_OK;
}

static ac_status rank_shortlist(const minitron_run *r, const ac_cost_tables *tables, int64_t per_candidate,
                                ac_minitron_report *rep, ac_rank_report *rank)
{
    const ac_minitron_params *p = r->p;
    char imp[AC_PATH_MAX];
    ac_rank_candidate *c = NULL;
    ac_status st = ac_path_join(imp, sizeof imp, p->out_dir, "importance.safetensors");
    if (st == AC_OK)
        st = make_candidates(r, rep->trained, &c);
    ac_rank_params rp = ac_rank_default_params();
    rp.parent_dir = p->parent_dir;
    rp.importance_path = imp;
    rp.data_dir = p->data_dir;
    rp.out_dir = p->out_dir;
    rp.tables = tables;
    rp.measure = p->measure;
    rp.sweeps = p->sweeps;
    ac_rank_split_tokens(per_candidate, p->batch, p->seq_len, &rp.kd_tokens, &rp.score_tokens);
    rp.batch = p->batch;
    rp.seq_len = p->seq_len;
    rp.kd_tau = p->kd_tau;
    rp.optim = p->optim;
    rp.seed = p->seed;
    rp.device = p->device;
    rp.progress = p->progress;
    if (st == AC_OK)
        st = ac_rank_run(r->contract, c, rep->trained, &rp, rank);
    ac_rank_candidates_free(c, rep->trained);
    return st;
}

static ac_status write_table(const minitron_run *r, const ac_rank_report *rank)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, r->p->out_dir, "minitron.csv");
    if (st != AC_OK)
        return st;
    FILE *f = fopen(path, "w");
    if (!f)
        return ac_fail(AC_ERR_IO, "minitron: cannot write %s", path);
    fprintf(f, "rank,parameters,latency_ms,throughput_tok_s,memory_mib,meets_measured,kd_loss,held_out_kd_loss\n");
    for (int i = 0; i < rank->n; i++) {
        const candidate *c = &r->grid[i];
        const ac_rank_result *k = &rank->results[i];
        fprintf(f, "%d,%.0f,%.4f,%.2f,%.4f,%s,%.6f,%.6f\n", i, c->params, c->cost.latency_ms, c->cost.throughput_tok_s,
                c->cost.memory_bytes / (1024.0 * 1024.0), !r->p->measure ? "" : k->meets ? "1" : "0", k->kd_tail,
                k->held_out_kd);
    }
    return fclose(f) == 0 ? AC_OK : ac_fail(AC_ERR_IO, "minitron: cannot write %s", path);
}

static ac_status write_outputs(const minitron_run *r, const ac_minitron_report *rep, const ac_rank_report *rank)
{
    char path[AC_PATH_MAX];
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
    cJSON_AddNumberToObject(root, "chosen", rep->chosen);
    cJSON_AddNumberToObject(root, "selection_tokens", (double)(rank->kd_tokens + rank->score_tokens));
    cJSON *list = cJSON_AddArrayToObject(root, "candidates");
    for (int i = 0; list && i < rank->n; i++) {
        const ac_rank_result *k = &rank->results[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "parameters", r->grid[i].params);
        cJSON_AddStringToObject(o, "verdict", !r->p->measure ? "not measured" : k->meets ? "meets" : "misses");
        if (k->distilled)
            cJSON_AddNumberToObject(o, "kd_loss", k->held_out_kd);
        else
            cJSON_AddNullToObject(o, "kd_loss");
        cJSON_AddItemToArray(list, o);
    }
    ac_status st = ac_path_join(path, sizeof path, r->p->out_dir, "search.json");
    if (st == AC_OK)
        st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st == AC_OK ? write_table(r, rank) : st;
}

static void free_run(minitron_run *r)
{
    for (int i = 0; i < r->n_grid; i++)
        free(r->grid[i].choice);
    free(r->grid);
    free(r->removal);
    ac_importance_free(&r->imp);
    ac_cost_model_free(r->cost);
    ac_arch_free(&r->parent_arch);
}

static ac_status check_params(const ac_minitron_params *p, const ac_contract *c, int64_t *per_candidate)
{
    if (!p->data_dir || !p->out_dir || !p->parent_dir)
        return ac_fail(AC_ERR_INVALID, "minitron: the parent, data and output directories are required");
    if (p->candidates < 1 || p->calib_seqs < 1 || p->batch < 1 || p->seq_len < 2 || p->sweeps < 1)
        return ac_fail(AC_ERR_INVALID, "minitron: candidates, calibration sequences, batch, seq_len and sweeps must be "
                                       "positive");
    if (!(p->max_depth_removal >= 0 && p->max_depth_removal < 1))
        return ac_fail(AC_ERR_INVALID, "minitron: max_depth_removal must be in [0, 1), got %g", (double)p->max_depth_removal);
    *per_candidate = p->candidate_tokens;
    if (*per_candidate <= 0 && c->budgets.has_search_tokens)
        *per_candidate = c->budgets.search_tokens / p->candidates;
    int64_t kd = 0, score = 0;
    ac_rank_split_tokens(*per_candidate, p->batch, p->seq_len, &kd, &score);
    if (kd < 1)
        return ac_fail(AC_ERR_INVALID, "minitron: %lld selection tokens per candidate leave no KD step of %d x %d "
                                       "after the held-out score's %lld (give more candidate tokens or the "
                                       "contract's budgets.search_tokens)",
                       (long long)*per_candidate, p->batch, p->seq_len, (long long)score);
    return AC_OK;
}

/* Targets, importance, the grid and its feasible part ranked by size. */
static ac_status shortlist(minitron_run *r, const ac_cost_tables *tables, ac_minitron_report *rep)
{
    const ac_minitron_params *p = r->p;
    char config[AC_PATH_MAX];
    ac_status st = ac_path_join(config, sizeof config, p->parent_dir, "config.json");
    if (st == AC_OK)
        st = r->parent ? ac_arch_copy(&r->parent_arch, ac_model_arch(r->parent))
                       : ac_config_json_read(config, &r->parent_arch);
    if (st == AC_OK)
        st = ac_make_dirs(p->out_dir);
    if (st == AC_OK)
        st = ac_cost_model_create(tables, &r->parent_arch, r->contract, &r->cost);
    if (st == AC_OK)
        st = ac_cost_predict_arch(r->cost, &r->parent_arch, &rep->parent);
    if (st == AC_OK)
        st = ac_search_resolve_targets(r->contract, &rep->parent, &rep->targets);
    rep->planned = ac_search_planned_targets(&rep->targets, r->contract->margin);
    if (st == AC_OK) {
        r->n_axes = ac_cost_model_axis_count(r->cost);
        st = importance(r);
    }
    if (st == AC_OK)
        st = removal_order(r);
    if (st == AC_OK)
        st = build_grid(r);
    rep->grid = r->n_grid;
    rep->feasible = st == AC_OK ? select_feasible(r, &rep->planned) : 0;
    if (st == AC_OK && rep->feasible == 0)
        st = ac_fail(AC_ERR_INVALID, "minitron: none of the %d homogeneous candidates is predicted to meet %s's targets",
                     r->n_grid, r->contract->name);
    rep->trained = rep->feasible < p->candidates ? rep->feasible : p->candidates;
    return st;
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
    ac_rank_report rank;
    memset(&rank, 0, sizeof rank);
    st = shortlist(&r, tables, rep);
    if (st == AC_OK)
        st = rank_shortlist(&r, tables, per_candidate, rep, &rank);
    rep->calib_tokens = (int64_t)p->calib_seqs * p->seq_len;
    rep->tokens = rep->calib_tokens + rank.kd_tokens + rank.score_tokens;
    if (st == AC_OK) {
        rep->chosen = rank.chosen;
        rep->survivors = rank.survivors;
        rep->chosen_kd = rank.results[rank.chosen].held_out_kd;
        rep->chosen_cost = r.grid[rank.chosen].cost;
        st = ac_cost_choice_arch(r.cost, r.grid[rank.chosen].choice, &rep->arch, NULL);
    }
    if (st == AC_OK)
        st = write_outputs(&r, rep, &rank);
    ac_rank_report_free(&rank);
    free_run(&r);
    return st;
}
