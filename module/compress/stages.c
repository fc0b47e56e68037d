/* The pipeline's stages. Each reads what the stages before it wrote under out_dir and
 * writes its own artifacts there; search and distillation resume from their checkpoints. */
#include "compress/compress_internal.h"

#include "autocompress/config_json.h"
#include "autocompress/cost.h"
#include "autocompress/eval.h"
#include "autocompress/log.h"
#include "autocompress/minitron.h"
#include "autocompress/model.h"
#include "autocompress/profile.h"
#include "autocompress/prune.h"
#include "autocompress/rank.h"
#include "autocompress/search.h"
#include "autocompress/train.h"
#include "util/child.h"
#include "util/fs_util.h"
#include "util/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The run's tables, refused when they were measured elsewhere (another fingerprint)
 * unless the user allowed it; a stage on a resumed run checks them again, since the
 * machine may have changed. */
static ac_status read_tables(const ac_compress_ctx *c, ac_cost_tables **tables)
{
    char differs[1024];
    ac_status st = ac_cost_tables_read(c->tables, tables);
    if (st == AC_OK)
        st = ac_cost_tables_check_machine(*tables, c->tables, &c->contract, c->p->foreign_tables, differs,
                                          sizeof differs);
    if (st == AC_OK && differs[0])
        ac_warn("compress: %s were measured elsewhere, used as --foreign-tables asks: %s", c->tables, differs);
    if (st != AC_OK) {
        ac_cost_tables_free(*tables);
        *tables = NULL;
    }
    return st;
}

/* Given tables must fit the parent and the contract. */
static ac_status check_given_tables(ac_compress_ctx *c)
{
    ac_cost_tables *tables = NULL;
    ac_arch parent = {0};
    ac_cost_model *model = NULL;
    char path[AC_PATH_MAX];
    ac_status st = read_tables(c, &tables);
    if (st == AC_OK)
        st = ac_path_join(path, sizeof path, c->p->model_dir, "config.json");
    if (st == AC_OK)
        st = ac_config_json_read(path, &parent);
    if (st == AC_OK)
        st = ac_cost_model_create(tables, &parent, &c->contract, &model);
    ac_cost_model_free(model);
    ac_arch_free(&parent);
    ac_cost_tables_free(tables);
    return st;
}

static ac_status profile_tables(ac_compress_ctx *c, ac_cost_tables **tables)
{
    ac_profile_params pp = ac_profile_default_params();
    pp.repeats = c->p->profile_repeats;
    pp.seed = c->p->seed;
    pp.progress = c->p->progress;
    ac_profile_report rep;
    return ac_profile_run(c->p->model_dir, &c->contract, &pp, tables, &rep);
}

/* Profiles into out_dir/tables.json; with a cache folder, tables profiled here before
 * for the same parent, space, workload and settings are copied instead, and new ones are
 * kept there. */
static ac_status stage_tables(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    if (p->tables_path)
        return check_given_tables(c);
    char cached[AC_PATH_MAX] = "";
    ac_status st = AC_OK;
    if (p->tables_cache)
        st = ac_cost_tables_cache_path(p->tables_cache, p->model_dir, &c->contract, p->profile_repeats, p->seed, cached,
                                       sizeof cached);
    ac_cost_tables *tables = NULL;
    if (st == AC_OK && cached[0] && ac_path_exists(cached)) {
        ac_info("compress: reusing the tables profiled here before, %s", cached);
        st = ac_cost_tables_read(cached, &tables);
    } else if (st == AC_OK) {
        st = profile_tables(c, &tables);
        if (st == AC_OK && cached[0])
            st = ac_make_dirs(p->tables_cache);
        if (st == AC_OK && cached[0])
            st = ac_cost_tables_write(tables, cached);
    }
    if (st == AC_OK)
        st = ac_cost_tables_write(tables, c->tables);
    ac_cost_tables_free(tables);
    return st == AC_OK ? check_given_tables(c) : st;
}

static ac_adamw_params kd_optim(const ac_compress_params *p)
{
    ac_adamw_params o = ac_adamw_default_params();
    o.lr = p->kd_lr;
    o.weight_decay = 0.0f;
    return o;
}

static ac_status search_autocompress(ac_compress_ctx *c, const ac_model *parent, const ac_cost_tables *tables,
                                     const char *dir)
{
    const ac_compress_params *p = c->p;
    ac_search_params sp = ac_search_default_params();
    sp.data_dir = p->data_dir;
    sp.out_dir = dir;
    sp.max_tokens = c->router_tokens;
    sp.seq_len = p->seq_len;
    sp.seed = p->seed;
    sp.progress = p->progress;
    ac_search_report rep;
    memset(&rep, 0, sizeof rep);
    ac_status st = ac_contract_compute_device(&c->contract, &sp.device);
    if (st == AC_OK)
        st = ac_search_run(parent, &c->contract, tables, &sp, &rep);
    if (st == AC_OK && !rep.meets)
        st = ac_fail(AC_ERR_INVALID, "the search found no architecture the cost model predicts to meet %s's targets "
                                     "(see %s/search.json)", c->contract.name, dir);
    ac_search_report_free(&rep);
    return st;
}

/* Minitron++ loads the parent where it needs it (it measures its candidates in forked
 * processes, so this one must not start OpenMP first). */
static ac_status search_minitron(ac_compress_ctx *c, const ac_cost_tables *tables, const char *dir)
{
    const ac_compress_params *p = c->p;
    ac_minitron_params mp = ac_minitron_default_params();
    mp.parent_dir = p->model_dir;
    mp.data_dir = p->data_dir;
    mp.out_dir = dir;
    mp.seq_len = p->seq_len;
    mp.batch = p->batch;
    mp.candidates = p->candidates;
    mp.candidate_tokens = c->candidate_tokens;
    mp.measure = p->measure_candidates;
    mp.sweeps = p->measure_sweeps;
    mp.optim = kd_optim(p);
    mp.seed = p->seed;
    mp.progress = p->progress;
    ac_minitron_report rep;
    memset(&rep, 0, sizeof rep);
    ac_status st = ac_contract_compute_device(&c->contract, &mp.device);
    if (st == AC_OK)
        st = ac_minitron_run(NULL, &c->contract, tables, &mp, &rep);
    ac_arch_free(&rep.arch);
    return st;
}

static ac_status load_and_search(ac_compress_ctx *c, const ac_cost_tables *tables, const char *dir)
{
    ac_model *parent = NULL;
    ac_status st = ac_model_load(c->p->model_dir, &parent);
    if (st == AC_OK)
        st = search_autocompress(c, parent, tables, dir);
    ac_model_free(parent);
    return st;
}

/* The search's candidates (or its single pick) ranked in search/rank/: measured, short
 * KDs, the lowest held-out KD loss kept. A candidate the measurement drops cannot be
 * chosen; when every one is dropped the run stops here. */
static ac_status rerank(ac_compress_ctx *c, const ac_cost_tables *tables)
{
    const ac_compress_params *p = c->p;
    char search_json[AC_PATH_MAX], arch_json[AC_PATH_MAX], imp[AC_PATH_MAX], out[AC_PATH_MAX];
    ac_compress_path(c, "search/search.json", search_json, sizeof search_json);
    ac_compress_path(c, "search/arch.json", arch_json, sizeof arch_json);
    ac_compress_path(c, "search/importance.safetensors", imp, sizeof imp);
    ac_compress_path(c, "search/rank", out, sizeof out);
    ac_rank_candidate *cand = NULL;
    int n = 0;
    ac_status st = ac_rank_read_candidates(search_json, arch_json, c->rerank_k, &cand, &n);
    ac_rank_params rp = ac_rank_default_params();
    rp.parent_dir = p->model_dir;
    rp.importance_path = imp;
    rp.data_dir = p->data_dir;
    rp.out_dir = out;
    rp.tables = tables;
    rp.measure = p->measure_candidates;
    rp.sweeps = p->measure_sweeps;
    ac_rank_split_tokens(c->rerank_tokens, p->batch, p->seq_len, &rp.kd_tokens, &rp.score_tokens);
    rp.batch = p->batch;
    rp.seq_len = p->seq_len;
    rp.optim = kd_optim(p);
    rp.seed = p->seed;
    rp.progress = p->progress;
    ac_rank_report rep;
    memset(&rep, 0, sizeof rep);
    if (st == AC_OK)
        st = ac_contract_compute_device(&c->contract, &rp.device);
    if (st == AC_OK)
        st = ac_rank_run(&c->contract, cand, n, &rp, &rep);
    ac_rank_report_free(&rep);
    ac_rank_candidates_free(cand, n);
    return st;
}

static ac_status stage_search(ac_compress_ctx *c)
{
    char dir[AC_PATH_MAX];
    ac_compress_path(c, "search", dir, sizeof dir);
    ac_cost_tables *tables = NULL;
    ac_status st = read_tables(c, &tables);
    if (st == AC_OK)
        st = c->p->method == AC_METHOD_MINITRON ? search_minitron(c, tables, dir) : load_and_search(c, tables, dir);
    ac_cost_tables_free(tables);
    return st;
}

/* A stage of its own: this process has started no OpenMP, so the ranking can measure in
 * forked ones. Nothing to do for Minitron++ (it ranks its shortlist in its search) or
 * with --rerank 0. */
static ac_status stage_rank(ac_compress_ctx *c)
{
    if (!ac_compress_reranks(c))
        return AC_OK;
    ac_cost_tables *tables = NULL;
    ac_status st = read_tables(c, &tables);
    if (st == AC_OK)
        st = rerank(c, tables);
    ac_cost_tables_free(tables);
    return st;
}

/* The parent reordered by the search's importance and sliced to its architecture. */
static ac_status stage_prune(ac_compress_ctx *c)
{
    char arch_path[AC_PATH_MAX], imp_path[AC_PATH_MAX], search_path[AC_PATH_MAX], out[AC_PATH_MAX];
    ac_compress_chosen_paths(c, arch_path, search_path, sizeof arch_path);
    ac_compress_path(c, "search/importance.safetensors", imp_path, sizeof imp_path);
    ac_compress_path(c, "pruned", out, sizeof out);
    ac_model *parent = NULL, *child = NULL;
    ac_arch arch = {0};
    ac_importance imp;
    memset(&imp, 0, sizeof imp);
    int *layers = NULL;
    ac_status st = ac_model_load(c->p->model_dir, &parent);
    if (st == AC_OK)
        st = ac_config_json_read(arch_path, &arch);
    if (st == AC_OK)
        st = ac_importance_load(imp_path, ac_model_arch(parent), &imp);
    if (st == AC_OK)
        st = ac_prune_read_parent_layers(search_path, arch.n_layers, &layers);
    ac_prune_params pp = {&imp, layers};
    if (st == AC_OK)
        st = ac_prune(parent, &arch, &pp, &child);
    if (st == AC_OK)
        st = ac_prune_save(child, c->p->model_dir, out, AC_DTYPE_F32);
    free(layers);
    ac_importance_free(&imp);
    ac_arch_free(&arch);
    ac_model_free(child);
    ac_model_free(parent);
    return st;
}

/* KD from the parent for the KD-token budget; the result with the tokenizer in model/. */
static ac_status stage_distill(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    char pruned[AC_PATH_MAX], dir[AC_PATH_MAX], final_dir[AC_PATH_MAX];
    ac_compress_path(c, "pruned", pruned, sizeof pruned);
    ac_compress_path(c, "distill", dir, sizeof dir);
    ac_compress_path(c, "model", final_dir, sizeof final_dir);
    ac_model *student = NULL, *teacher = NULL;
    const char *device = NULL;
    ac_status st = ac_contract_compute_device(&c->contract, &device);
    if (st == AC_OK)
        st = ac_model_load(pruned, &student);
    if (st == AC_OK)
        st = ac_model_load(p->model_dir, &teacher);
    if (st == AC_OK) /* the KD runs where the contract's model will serve */
        st = ac_model_move_to_device(&student, device);
    if (st == AC_OK)
        st = ac_model_move_to_device(&teacher, device);
    ac_train_params tp = ac_train_default_params();
    tp.data_dir = p->data_dir;
    tp.out_dir = dir;
    tp.teacher = teacher;
    tp.batch = p->batch;
    tp.seq_len = p->seq_len;
    tp.steps = c->kd_steps;
    tp.optim = kd_optim(p);
    tp.optim.warmup_steps = c->kd_steps / 20;
    tp.seed = p->seed;
    tp.checkpoint_every = c->kd_steps / 10 > 0 ? c->kd_steps / 10 : 1;
    tp.eval_every = c->kd_steps / 5 > 0 ? c->kd_steps / 5 : 1;
    tp.eval_batches = 4;
    tp.progress = p->progress;
    ac_train_report rep;
    if (st == AC_OK)
        st = ac_train_run(&student, &tp, &rep);
    if (st == AC_OK)
        st = ac_prune_save(student, p->model_dir, final_dir, AC_DTYPE_F32);
    ac_model_free(student);
    ac_model_free(teacher);
    return st;
}

/* The final checkpoint under the contract's workload (measurement forks: this stage's
 * process runs no OpenMP). */
static ac_status stage_measure(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    char model[AC_PATH_MAX], path[AC_PATH_MAX];
    ac_compress_path(c, "model", model, sizeof model);
    ac_compress_path(c, "measure.json", path, sizeof path);
    ac_cost_tables *tables = NULL;
    ac_status st = read_tables(c, &tables);
    ac_measure_params mp = ac_measure_default_params();
    mp.parent_dir = p->model_dir;
    mp.tables = tables;
    mp.sweeps = p->measure_sweeps;
    mp.seed = p->seed;
    mp.progress = p->progress;
    ac_measure_report r;
    char *json = NULL;
    if (st == AC_OK)
        st = ac_measure_checkpoint(model, &c->contract, &mp, &r);
    if (st == AC_OK)
        st = ac_measure_report_json(&r, &json);
    if (st == AC_OK)
        st = ac_write_text_file(path, json);
    free(json);
    ac_cost_tables_free(tables);
    return st;
}

static ac_status stage_eval(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    char model[AC_PATH_MAX], path[AC_PATH_MAX];
    ac_compress_path(c, "model", model, sizeof model);
    ac_compress_path(c, "eval.json", path, sizeof path);
    ac_model *student = NULL, *teacher = NULL;
    ac_status st = ac_model_load(model, &student);
    /* scored as the contract serves it (a bf16 copy when hardware.weights says so) */
    if (st == AC_OK && c->contract.hardware.weights != AC_DTYPE_F32)
        st = ac_model_move_to_device_as(&student, "cpu", c->contract.hardware.weights);
    if (st == AC_OK)
        st = ac_model_load(p->model_dir, &teacher);
    ac_eval_params ep = ac_eval_default_params();
    ep.data_dir = p->data_dir;
    ep.batches = p->eval_batches;
    ep.batch = p->batch;
    ep.seq_len = p->seq_len;
    ep.progress = p->progress;
    ac_eval_report r = {0};
    if (st == AC_OK)
        st = ac_eval_run(student, teacher, model, &ep, &r);
    if (st == AC_OK)
        st = ac_eval_write_json(&r, &ep, path);
    ac_eval_report_free(&r);
    ac_model_free(student);
    ac_model_free(teacher);
    return st;
}

const ac_compress_stage ac_compress_stages[AC_STAGE_COUNT] = {
    {"tables", "the search space's per-layer costs on this machine", 0, stage_tables},
    {"search", "importance and the architecture (or its candidates)", 0, stage_search},
    {"rank", "the search's candidates measured and ranked by short KDs (--rerank)", 0, stage_rank},
    {"prune", "the importance-ordered parent sliced to the architecture", 0, stage_prune},
    {"distill", "knowledge distillation from the parent", 0, stage_distill},
    {"measure", "the result measured under the contract's workload", 0, stage_measure},
    {"eval", "held-out quality against the parent", 0, stage_eval},
    {"report", "report.json, report.md and the pictures", 1, ac_compress_write_report},
};
