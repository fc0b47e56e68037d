/* The ranking of a shortlist (autocompress/rank.h): prune, measure, short KD, held-out
 * score, choice. */
#include "rank/rank_internal.h"

#include "autocompress/eval.h"
#include "autocompress/importance.h"
#include "autocompress/model.h"
#include "autocompress/profile.h"
#include "autocompress/prune.h"
#include "autocompress/train.h"
#include "util/child.h"
#include "util/fs_util.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAIL_STEPS = 25 };

ac_rank_params ac_rank_default_params(void)
{
    ac_rank_params p;
    memset(&p, 0, sizeof p);
    p.measure = 1;
    p.sweeps = 5;
    p.batch = 8;
    p.seq_len = 128;
    p.kd_tau = 1.0f;
    p.optim = ac_adamw_default_params();
    p.optim.lr = 1e-3f;
    p.optim.weight_decay = 0.0f;
    p.seed = 1;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

void ac_rank_split_tokens(int64_t per_candidate, int batch, int seq_len, int64_t *kd_tokens, int64_t *score_tokens)
{
    int64_t per_batch = (int64_t)batch * seq_len;
    int64_t score = per_candidate / 4 / per_batch * per_batch;
    *score_tokens = score > per_batch ? score : per_batch;
    int64_t kd = per_candidate - *score_tokens;
    *kd_tokens = kd > 0 ? kd / per_batch * per_batch : 0;
}

void ac_rank_report_free(ac_rank_report *r)
{
    free(r->results);
    r->results = NULL;
}

ac_status ac_rank_path(const ac_rank_params *p, int i, const char *name, char *buf, size_t size)
{
    char rel[64];
    snprintf(rel, sizeof rel, "candidates/c%d%s%s", i, name ? "/" : "", name ? name : "");
    return ac_path_join(buf, size, p->out_dir, rel);
}

/* ---- 1. the pruned candidates, cut in a child process ---- */

typedef struct {
    const ac_rank_params *p;
    const ac_rank_candidate *c;
    int n;
} prune_job;

static ac_status prune_one(const ac_rank_params *p, const ac_model *parent, const ac_importance *imp,
                           const ac_rank_candidate *c, int i)
{
    char dir[AC_PATH_MAX];
    ac_status st = ac_rank_path(p, i, "pruned", dir, sizeof dir);
    ac_prune_params pp = {imp, c->parent_layers};
    ac_model *child = NULL;
    if (st == AC_OK)
        st = ac_prune(parent, &c->arch, &pp, &child);
    if (st == AC_OK)
        st = ac_prune_save(child, p->parent_dir, dir, AC_DTYPE_F32);
    ac_model_free(child);
    return st == AC_OK ? AC_OK : ac_fail_context(st, "rank: candidate %d", i);
}

/* Prunes the candidates whose pruned model is not on disk yet. */
static ac_status prune_missing(const prune_job *j)
{
    ac_model *parent = NULL;
    ac_importance imp;
    memset(&imp, 0, sizeof imp);
    ac_status st = ac_model_load(j->p->parent_dir, &parent);
    if (st == AC_OK && j->p->importance_path)
        st = ac_importance_load(j->p->importance_path, ac_model_arch(parent), &imp);
    for (int i = 0; st == AC_OK && i < j->n; i++) {
        char path[AC_PATH_MAX];
        st = ac_rank_path(j->p, i, "pruned/model.safetensors", path, sizeof path);
        if (st == AC_OK && !ac_path_exists(path))
            st = prune_one(j->p, parent, j->p->importance_path ? &imp : NULL, &j->c[i], i);
    }
    ac_importance_free(&imp);
    ac_model_free(parent);
    return st;
}

static ac_status prune_child(void *arg, int fd)
{
    ac_status st = ac_child_start_team(fd);
    return st == AC_OK ? prune_missing(arg) : st;
}

static ac_status prune_all(const ac_rank_params *p, const ac_rank_candidate *c, int n)
{
    int missing = 0;
    for (int i = 0; i < n; i++) {
        char path[AC_PATH_MAX];
        ac_status st = ac_rank_path(p, i, "pruned/model.safetensors", path, sizeof path);
        if (st != AC_OK)
            return st;
        missing += !ac_path_exists(path);
    }
    if (!missing)
        return AC_OK;
    prune_job job = {p, c, n};
    if (!p->measure) /* nothing forks after it: no need to keep this process's OpenMP unstarted */
        return prune_missing(&job);
    void *out = NULL;
    size_t bytes = 0;
    ac_status st = ac_run_in_child(prune_child, &job, &out, &bytes);
    free(out);
    return st;
}

/* ---- 2. the measurement ---- */

static double number_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static ac_status measure_one(const ac_contract *contract, const ac_rank_params *p, int i, ac_rank_result *r)
{
    char model[AC_PATH_MAX], path[AC_PATH_MAX];
    ac_status st = ac_rank_path(p, i, "pruned", model, sizeof model);
    if (st == AC_OK)
        st = ac_rank_path(p, i, "measure.json", path, sizeof path);
    if (st == AC_OK && !ac_path_exists(path)) {
        ac_measure_params mp = ac_measure_default_params();
        mp.parent_dir = p->tables ? p->parent_dir : NULL; /* the two go together */
        mp.tables = p->tables;
        mp.sweeps = p->sweeps;
        mp.seed = p->seed;
        mp.progress = p->progress;
        ac_measure_report m;
        char *json = NULL;
        st = ac_measure_checkpoint(model, contract, &mp, &m);
        if (st == AC_OK)
            st = ac_measure_report_json(&m, &json);
        if (st == AC_OK)
            st = ac_write_text_file(path, json);
        free(json);
        if (st != AC_OK)
            return ac_fail_context(st, "rank: measuring candidate %d", i);
    }
    cJSON *root = NULL;
    if (st == AC_OK)
        st = ac_read_json_file(path, 1 << 20, &root);
    if (st != AC_OK)
        return st;
    r->measured = 1;
    r->meets = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "pass"));
    r->latency_ms = number_at(root, "latency_ms", "measured");
    r->throughput_tok_s = number_at(root, "throughput_tok_s", "measured");
    r->memory_bytes = number_at(root, "memory_bytes", "measured");
    cJSON_Delete(root);
    return AC_OK;
}

/* ---- 3. the short KD and the held-out score ---- */

typedef struct {
    ac_model *teacher;      /* on the host: the scores */
    ac_model *teacher_dev;  /* where the KDs run (NULL: the host's) */
} teachers;

static ac_status distill_one(const ac_rank_params *p, const teachers *t, int i, int64_t *tokens)
{
    char dir[AC_PATH_MAX], pruned[AC_PATH_MAX], done[AC_PATH_MAX];
    ac_status st = ac_rank_path(p, i, NULL, dir, sizeof dir);
    if (st == AC_OK)
        st = ac_rank_path(p, i, "pruned", pruned, sizeof pruned);
    if (st == AC_OK)
        st = ac_rank_path(p, i, "model.safetensors", done, sizeof done);
    int steps = (int)(p->kd_tokens / ((int64_t)p->batch * p->seq_len));
    *tokens = (int64_t)steps * p->batch * p->seq_len;
    if (st != AC_OK || ac_path_exists(done))
        return st;
    ac_model *student = NULL;
    st = ac_model_load(pruned, &student);
    if (st == AC_OK && t->teacher_dev) /* the student joins the teacher's device */
        st = ac_model_move_to_device(&student, p->device);
    ac_train_params tp = ac_train_default_params();
    tp.data_dir = p->data_dir;
    tp.out_dir = dir;
    tp.teacher = t->teacher_dev ? t->teacher_dev : t->teacher;
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
        st = ac_train_run(&student, &tp, &rep);
    ac_model_free(student);
    return st == AC_OK ? AC_OK : ac_fail_context(st, "rank: the short KD of candidate %d", i);
}

/* The distilled candidate against the parent on the first windows of val.bin. */
static ac_status score_one(const ac_rank_params *p, const teachers *t, int i, ac_rank_result *r)
{
    char dir[AC_PATH_MAX], path[AC_PATH_MAX];
    ac_status st = ac_rank_path(p, i, NULL, dir, sizeof dir);
    if (st == AC_OK)
        st = ac_rank_path(p, i, "score.json", path, sizeof path);
    if (st == AC_OK && !ac_path_exists(path)) {
        ac_model *student = NULL;
        ac_eval_params ep = ac_rank_score_params(p);
        ac_eval_report er = {0};
        st = ac_model_load(dir, &student);
        if (st == AC_OK)
            st = ac_eval_run(student, t->teacher, dir, &ep, &er);
        if (st == AC_OK)
            st = ac_eval_write_json(&er, &ep, path);
        ac_eval_report_free(&er);
        ac_model_free(student);
    }
    cJSON *root = NULL;
    if (st == AC_OK)
        st = ac_read_json_file(path, 1 << 20, &root);
    if (st != AC_OK)
        return ac_fail_context(st, "rank: scoring candidate %d", i);
    const cJSON *kd = cJSON_GetObjectItemCaseSensitive(root, "kd_loss");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsNumber(kd) || !cJSON_IsNumber(tokens))
        st = ac_fail(AC_ERR_INVALID, "%s: needs numbers 'kd_loss' and 'tokens'", path);
    else {
        r->held_out_kd = kd->valuedouble;
        r->score_tokens = (int64_t)tokens->valuedouble;
    }
    cJSON_Delete(root);
    int tail_steps = 0;
    if (st == AC_OK)
        st = ac_rank_path(p, i, "loss.csv", path, sizeof path);
    return st == AC_OK ? ac_train_tail_loss(path, TAIL_STEPS, &r->kd_tail, &tail_steps) : st;
}

ac_eval_params ac_rank_score_params(const ac_rank_params *p)
{
    ac_eval_params ep = ac_eval_default_params();
    int64_t per_batch = (int64_t)p->batch * p->seq_len;
    ep.data_dir = p->data_dir;
    ep.batch = p->batch;
    ep.seq_len = p->seq_len;
    ep.batches = p->score_tokens > per_batch ? (int)(p->score_tokens / per_batch) : 1;
    ep.kd_tau = p->kd_tau;
    ep.code_lines = 0;
    ep.progress = p->progress;
    return ep;
}

static ac_status load_teachers(const ac_rank_params *p, teachers *t)
{
    ac_status st = ac_model_load(p->parent_dir, &t->teacher);
    if (st == AC_OK && p->device && strcmp(p->device, "cpu") != 0)
        st = ac_model_to_device(t->teacher, p->device, &t->teacher_dev);
    return st;
}

static ac_status distill_survivors(const ac_rank_params *p, int n, ac_rank_report *rep)
{
    teachers t = {NULL, NULL};
    ac_status st = load_teachers(p, &t);
    for (int i = 0; st == AC_OK && i < n; i++) {
        ac_rank_result *r = &rep->results[i];
        if (p->measure && !r->meets)
            continue;
        st = distill_one(p, &t, i, &r->kd_tokens);
        if (st == AC_OK)
            st = score_one(p, &t, i, r);
        r->distilled = st == AC_OK;
        rep->kd_tokens += r->kd_tokens;
        rep->score_tokens += r->score_tokens;
    }
    ac_model_free(t.teacher_dev);
    ac_model_free(t.teacher);
    return st;
}

/* ---- 4. the choice ---- */

static void choose(const ac_rank_params *p, ac_rank_report *rep)
{
    rep->chosen = -1;
    for (int i = 0; i < rep->n; i++) {
        const ac_rank_result *r = &rep->results[i];
        if (p->measure && !r->meets)
            continue;
        if (rep->chosen < 0 || (r->distilled && r->held_out_kd < rep->results[rep->chosen].held_out_kd))
            rep->chosen = i;
    }
}

static ac_status check_params(const ac_rank_params *p, int n)
{
    if (!p->parent_dir || !p->data_dir || !p->out_dir)
        return ac_fail(AC_ERR_INVALID, "rank: the parent, data and output directories are required");
    if (n < 1)
        return ac_fail(AC_ERR_INVALID, "rank: no candidate to rank");
    if (p->batch < 1 || p->seq_len < 2 || p->sweeps < 1 || !(p->kd_tau > 0))
        return ac_fail(AC_ERR_INVALID, "rank: batch, seq_len, sweeps and the KD temperature must be positive");
    if (n > 1 && p->kd_tokens < (int64_t)p->batch * p->seq_len)
        return ac_fail(AC_ERR_INVALID, "rank: %lld short-KD tokens per candidate make no step of %d x %d",
                       (long long)p->kd_tokens, p->batch, p->seq_len);
    return AC_OK;
}

static ac_status none_meets(const ac_contract *contract, const ac_rank_params *p, const ac_rank_report *rep)
{
    return ac_fail(AC_ERR_INVALID, "rank: none of the %d candidates meets %s's targets when measured (see %s/rank.md)",
                   rep->n, contract->name, p->out_dir);
}

ac_status ac_rank_run(const ac_contract *contract, const ac_rank_candidate *candidates, int n,
                      const ac_rank_params *p, ac_rank_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->chosen = -1;
    ac_status st = check_params(p, n);
    if (st != AC_OK)
        return st;
    rep->n = n;
    rep->results = calloc((size_t)n, sizeof *rep->results);
    if (!rep->results)
        return ac_fail(AC_ERR_NOMEM, "rank: out of memory");
    st = ac_make_dirs(p->out_dir);
    if (st == AC_OK)
        st = prune_all(p, candidates, n);
    for (int i = 0; st == AC_OK && p->measure && i < n; i++)
        st = measure_one(contract, p, i, &rep->results[i]);
    for (int i = 0; i < n; i++)
        rep->survivors += !p->measure || rep->results[i].meets;
    if (st == AC_OK && rep->survivors > 1)
        st = distill_survivors(p, n, rep);
    if (st == AC_OK)
        choose(p, rep);
    if (st == AC_OK)
        st = ac_rank_write(contract, candidates, p, rep);
    if (st == AC_OK && rep->chosen < 0)
        st = none_meets(contract, p, rep);
    return st;
}
