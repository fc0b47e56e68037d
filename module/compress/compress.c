/* The compress pipeline: the stages in order, each in a child process, with the record
 * of the stages done (compress.json) that a rerun resumes from. */
#include "compress/compress_internal.h"

#include "autocompress/clock.h"
#include "autocompress/inputs.h"
#include "autocompress/rank.h"
#include "autocompress/search.h"

#include "util/child.h"
#include "util/fs_util.h"
#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ac_compress_method_name(ac_compress_method m)
{
    return m == AC_METHOD_MINITRON ? "minitron++" : "autocompress";
}

ac_status ac_compress_method_from_name(const char *name, ac_compress_method *m)
{
    if (!strcmp(name, "autocompress"))
        *m = AC_METHOD_AUTOCOMPRESS;
    else if (!strcmp(name, "minitron++") || !strcmp(name, "minitron"))
        *m = AC_METHOD_MINITRON;
    else
        return ac_fail(AC_ERR_INVALID, "method '%s' is neither 'autocompress' nor 'minitron++'", name);
    return AC_OK;
}

ac_compress_params ac_compress_default_params(void)
{
    ac_compress_params p;
    memset(&p, 0, sizeof p);
    p.batch = 8;
    p.seq_len = 128;
    p.kd_lr = 1e-3f;
    p.candidates = 4;
    /* four candidates at half the search tokens: the paper's Minitron++ ranks four, and the
       routers keep as many steps as a search of half the budget */
    p.rerank = 4;
    p.rerank_share = 0.5;
    p.measure_candidates = 1;
    p.profile_repeats = 5;
    p.measure_sweeps = 5;
    p.eval_batches = 0;
    p.seed = 1;
    p.progress = AC_PROGRESS_AUTO;
    return p;
}

int ac_compress_reranks(const ac_compress_ctx *c)
{
    return c->p->method == AC_METHOD_AUTOCOMPRESS && c->p->rerank > 0;
}

const char *ac_compress_rank_dir(const ac_compress_ctx *c)
{
    return c->p->method == AC_METHOD_MINITRON ? "search" : ac_compress_reranks(c) ? "search/rank" : NULL;
}

void ac_compress_chosen_paths(const ac_compress_ctx *c, char *arch, char *layers, size_t size)
{
    int ranked = ac_compress_reranks(c);
    ac_compress_path(c, ranked ? "search/rank/arch.json" : "search/arch.json", arch, size);
    ac_compress_path(c, ranked ? "search/rank/rank.json" : "search/search.json", layers, size);
}

void ac_compress_path(const ac_compress_ctx *c, const char *name, char *buf, size_t size)
{
    /* cannot fail: out_dir passed ac_path_check_dir (check_params), names are at most
     * AC_PATH_NAME_MAX and size is AC_PATH_MAX (compress_internal.h) */
    (void)ac_path_join(buf, size, c->p->out_dir, name);
}

/* FNV-1a-64 of the contract's text: a changed contract is another run. */
static uint64_t text_hash(const char *text, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)text[i]) * 1099511628211ULL;
    return h;
}

/* The ranking's share of the search tokens beyond the search's calibration, shared by as
 * many of the --rerank candidates as can each have a KD step and a scored batch; when not
 * even two can, the search's pick alone is ranked (measured, no KD) and the routers keep
 * the whole budget. */
static void split_search_tokens(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    int64_t per_batch = (int64_t)p->batch * p->seq_len;
    int64_t calib = (int64_t)ac_search_default_params().calib_seqs * p->seq_len;
    int64_t share = c->search_tokens > calib ? (int64_t)(p->rerank_share * (double)(c->search_tokens - calib)) : 0;
    int k = p->rerank;
    while (k > 1 && share / k < 2 * per_batch)
        k--;
    c->rerank_k = k;
    if (k < 2)
        return;
    c->rerank_tokens = share / k;
    c->router_tokens = c->search_tokens - c->rerank_tokens * k;
}

static ac_status resolve_budgets(ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    const ac_contract_budgets *b = &c->contract.budgets;
    c->search_tokens = p->search_tokens > 0 ? p->search_tokens : b->has_search_tokens ? b->search_tokens : 0;
    c->kd_tokens = p->kd_tokens > 0 ? p->kd_tokens : b->has_kd_tokens ? b->kd_tokens : 0;
    if (c->search_tokens <= 0)
        return ac_fail(AC_ERR_INVALID, "compress: no search-token budget (the contract's budgets.search_tokens, or --search-tokens)");
    if (c->kd_tokens <= 0)
        return ac_fail(AC_ERR_INVALID, "compress: no KD-token budget (the contract's budgets.kd_tokens, or --kd-tokens)");
    int64_t per_step = (int64_t)p->batch * p->seq_len;
    c->kd_steps = (int)(c->kd_tokens / per_step);
    if (c->kd_steps < 1)
        return ac_fail(AC_ERR_INVALID, "compress: %lld KD tokens make no step of %d x %d", (long long)c->kd_tokens,
                       p->batch, p->seq_len);
    c->candidate_tokens = p->candidate_tokens > 0 ? p->candidate_tokens : 2 * c->search_tokens / p->candidates;
    c->router_tokens = c->search_tokens;
    if (ac_compress_reranks(c))
        split_search_tokens(c);
    return AC_OK;
}

static ac_status check_params(const ac_compress_params *p)
{
    if (!p->model_dir || !p->contract_path || !p->data_dir || !p->out_dir)
        return ac_fail(AC_ERR_INVALID, "compress: the parent, contract, data and output directory are required");
    if (p->batch < 1 || p->seq_len < 2 || !(p->kd_lr > 0) || p->candidates < 1 || p->profile_repeats < 1 ||
        p->measure_sweeps < 1 || p->eval_batches < 0)
        return ac_fail(AC_ERR_INVALID, "compress: batch, seq_len, KD learning rate, candidates, profile repeats and "
                                       "measure sweeps must be positive, eval batches >= 0 (0: all of val.bin)");
    if (p->rerank < 0 || !(p->rerank_share > 0 && p->rerank_share < 1))
        return ac_fail(AC_ERR_INVALID, "compress: --rerank must be >= 0 (0: off) and --rerank-share in (0, 1), got %d "
                                       "and %g", p->rerank, p->rerank_share);
    /* before any work: every file of the run is joined onto out_dir (ac_compress_path) */
    ac_status st = ac_path_check_dir(p->out_dir);
    return st == AC_OK ? AC_OK : ac_fail_context(st, "compress: --out");
}

/* Everything the stages will read, before the first of them (profiling alone can take
 * twenty minutes): the contract's device, the parent's config and weights, both shards with a vocabulary the
 * parent covers, the given tables against the parent and the contract, and an output
 * directory that can be written. */
static ac_status check_inputs(const ac_compress_ctx *c)
{
    const ac_compress_params *p = c->p;
    ac_arch parent = {0};
    const char *device = NULL;
    char where[AC_PATH_MAX + 64];
    snprintf(where, sizeof where, "--contract %s: hardware.device", p->contract_path);
    ac_status st = ac_contract_compute_device(&c->contract, &device);
    if (st == AC_OK)
        st = ac_input_device(where, device);
    if (st == AC_OK)
        st = ac_input_model("--model", p->model_dir, 1, &parent);
    if (st == AC_OK)
        st = ac_input_shards("--data", p->data_dir, AC_SHARD_TRAIN | AC_SHARD_VAL, parent.vocab);
    if (st == AC_OK && p->tables_path)
        st = ac_input_tables("--tables", p->tables_path, &parent, &c->contract, p->foreign_tables);
    if (st == AC_OK)
        st = ac_input_out_dir("--out", p->out_dir);
    ac_arch_free(&parent);
    return st;
}

/* `path` as reruns from another directory or through another spelling give it: absolute,
 * links resolved (as given when it cannot be resolved). */
static const char *resolved(const char *path, char *buf)
{
    return path && realpath(path, buf) ? buf : path;
}

static ac_status describe_settings(ac_compress_ctx *c, uint64_t contract_hash)
{
    const ac_compress_params *p = c->p;
    char model[PATH_MAX], data[PATH_MAX], tables[PATH_MAX];
    int n = snprintf(c->settings, sizeof c->settings,
             "model=%s contract=%s#%016llx data=%s tables=%s method=%s search_tokens=%lld kd_tokens=%lld batch=%d "
             "seq_len=%d kd_lr=%g candidates=%d candidate_tokens=%lld rerank=%d rerank_share=%g measure_candidates=%d "
             "profile_repeats=%d seed=%llu",
             resolved(p->model_dir, model), c->contract.name, (unsigned long long)contract_hash,
             resolved(p->data_dir, data), p->tables_path ? resolved(p->tables_path, tables) : "(profiled)",
             ac_compress_method_name(p->method),
             (long long)c->search_tokens, (long long)c->kd_tokens, p->batch, p->seq_len, (double)p->kd_lr,
             p->candidates, (long long)c->candidate_tokens, p->rerank, p->rerank_share, p->measure_candidates,
             p->profile_repeats, (unsigned long long)p->seed);
    if (n < 0 || (size_t)n >= sizeof c->settings)
        return ac_fail(AC_ERR_INVALID, "compress: the paths of the parent, data and tables are too long (%d characters "
                                       "of settings, at most %zu)", n, sizeof c->settings - 1);
    return AC_OK;
}

/* ---- compress.json ---- */

static ac_status load_state(ac_compress_ctx *c)
{
    char path[AC_PATH_MAX];
    ac_compress_path(c, "compress.json", path, sizeof path);
    if (!ac_path_exists(path))
        return AC_OK;
    cJSON *root = NULL;
    ac_status st = ac_read_json_file(path, 1 << 20, &root);
    if (st != AC_OK)
        return st;
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(root, "settings");
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(root, "done");
    if (!cJSON_IsString(settings) || !cJSON_IsArray(done))
        st = ac_fail(AC_ERR_INVALID, "%s: needs a string 'settings' and an array 'done'", path);
    else if (strcmp(settings->valuestring, c->settings))
        st = ac_fail(AC_ERR_INVALID, "%s: this output directory was made with other settings; use another --out, or "
                                     "the same settings to resume.\n  there: %s\n  now:   %s",
                     path, settings->valuestring, c->settings);
    const cJSON *item;
    cJSON_ArrayForEach(item, done) {
        for (int s = 0; st == AC_OK && cJSON_IsString(item) && s < AC_STAGE_COUNT; s++)
            if (!strcmp(item->valuestring, ac_compress_stages[s].name))
                c->done[s] = 1;
    }
    cJSON_Delete(root);
    return st;
}

static ac_status save_state(const ac_compress_ctx *c)
{
    cJSON *root = cJSON_CreateObject(), *done = cJSON_CreateArray(), *secs = cJSON_CreateObject();
    if (!root || !done || !secs) {
        cJSON_Delete(root);
        cJSON_Delete(done);
        cJSON_Delete(secs);
        return ac_fail(AC_ERR_NOMEM, "compress: out of memory");
    }
    cJSON_AddStringToObject(root, "settings", c->settings);
    for (int s = 0; s < AC_STAGE_COUNT; s++)
        if (c->done[s]) {
            cJSON_AddItemToArray(done, cJSON_CreateString(ac_compress_stages[s].name));
            cJSON_AddNumberToObject(secs, ac_compress_stages[s].name, c->seconds[s]);
        }
    cJSON_AddItemToObject(root, "done", done);
    cJSON_AddItemToObject(root, "seconds", secs);
    char path[AC_PATH_MAX];
    ac_compress_path(c, "compress.json", path, sizeof path);
    ac_status st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}

/* Forgets that `name` and the stages after it were done. */
static ac_status redo_from(ac_compress_ctx *c, const char *name)
{
    for (int s = 0; s < AC_STAGE_COUNT; s++)
        if (!strcmp(ac_compress_stages[s].name, name)) {
            for (int t = s; t < AC_STAGE_COUNT; t++)
                c->done[t] = 0;
            return AC_OK;
        }
    return ac_fail(AC_ERR_INVALID, "compress: --from '%s' is not a stage (tables, search, rank, prune, distill, "
                                   "measure, eval, report)", name);
}

/* ---- running a stage ---- */

typedef struct {
    ac_compress_ctx *ctx;
    int stage;
} stage_arg;

/* The child: says it is alive (it has run no OpenMP yet, so measurements it forks work),
 * then runs the stage. */
static ac_status stage_child(void *arg, int fd)
{
    stage_arg *a = arg;
    ac_status st = ac_child_heartbeat(fd);
    return st == AC_OK ? ac_compress_stages[a->stage].run(a->ctx) : st;
}

static ac_status run_stage(ac_compress_ctx *c, int s)
{
    const ac_compress_stage *stage = &ac_compress_stages[s];
    fprintf(stderr, "compress: stage %d/%d %s: %s\n", s + 1, AC_STAGE_COUNT, stage->name, stage->what);
    int64_t t0 = ac_monotonic_ns();
    ac_status st;
    if (stage->in_process) {
        st = stage->run(c);
    } else {
        stage_arg arg = {c, s};
        void *out = NULL;
        size_t bytes = 0;
        st = ac_run_in_child(stage_child, &arg, &out, &bytes);
        free(out);
    }
    if (st != AC_OK)
        return ac_fail_context(st, "compress: stage %s (rerun the same command to resume it)", stage->name);
    c->seconds[s] = 1e-9 * (double)(ac_monotonic_ns() - t0);
    /* not "stage N/M NAME:", which the server's job reader takes for a stage's start */
    fprintf(stderr, "compress: %s done in %.1f s (stage %d/%d)\n", stage->name, c->seconds[s], s + 1, AC_STAGE_COUNT);
    c->done[s] = 1;
    return save_state(c);
}

ac_status ac_compress_run(const ac_compress_params *p, ac_compress_report *report)
{
    memset(report, 0, sizeof *report);
    int64_t t0 = ac_monotonic_ns();
    ac_status st = check_params(p);
    if (st != AC_OK)
        return st;
    ac_compress_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    char *text = NULL;
    size_t len = 0;
    st = ac_input_file("--contract", p->contract_path);
    if (st == AC_OK)
        st = ac_read_text_file(p->contract_path, 1 << 20, &text, &len);
    if (st == AC_OK)
        st = ac_contract_parse_string(text, p->contract_path, &c.contract);
    uint64_t hash = text ? text_hash(text, len) : 0;
    free(text);
    const char *device;
    if (st == AC_OK) /* a contract this machine cannot serve fails before the first stage */
        st = ac_contract_compute_device(&c.contract, &device);
    if (st == AC_OK)
        st = resolve_budgets(&c);
    if (st == AC_OK)
        st = check_inputs(&c);
    if (st == AC_OK) {
        st = describe_settings(&c, hash);
        if (st == AC_OK)
            st = ac_make_dirs(p->out_dir);
    }
    if (st == AC_OK)
        st = load_state(&c);
    if (st == AC_OK && p->from_stage)
        st = redo_from(&c, p->from_stage);
    /* the tables the later stages read: given, or profiled into out_dir */
    if (p->tables_path)
        snprintf(c.tables, sizeof c.tables, "%s", p->tables_path);
    else
        ac_compress_path(&c, "tables.json", c.tables, sizeof c.tables);
    for (int s = 0; st == AC_OK && s < AC_STAGE_COUNT; s++) {
        if (c.done[s]) {
            report->stages_skipped++;
            continue;
        }
        st = run_stage(&c, s);
        report->stages_run++;
    }
    if (st == AC_OK)
        st = ac_compress_summary(&c, report);
    report->seconds = 1e-9 * (double)(ac_monotonic_ns() - t0);
    return st;
}
