/* Evaluation of a student against its teacher on val.bin: distillation loss, cross-
 * entropy and top-1 agreement over the first batches of windows, then next-line exact
 * match when asked for (eval/lines.c). */
#include "autocompress/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/clock.h"
#include "autocompress/log.h"
#include "autocompress/sample.h"
#include "autocompress/tokenizer.h"
#include "autocompress/tokens.h"
#include "autocompress/train.h"
#include "eval/eval_internal.h"
#include "util/json_util.h"
#include "util/path.h"
#include "util/stats.h"
#include "kernels/kernels.h"

enum { AUTO_CODE_LINES = 200 };

ac_eval_params ac_eval_default_params(void)
{
    return (ac_eval_params){.batches = 16, .batch = 8, .seq_len = 256, .kd_tau = 1.0f, .bootstrap = 1000, .code_lines = -1,
                            .line_context = 128, .max_line_tokens = 48, .progress = AC_PROGRESS_AUTO};
}

static ac_status check_params(const ac_eval_params *p)
{
    if (!p->data_dir)
        return ac_fail(AC_ERR_INVALID, "eval: no data directory (val.bin from autocompress tokenize)");
    if (p->batches < 0 || p->batch < 1 || p->seq_len < 1)
        return ac_fail(AC_ERR_INVALID, "eval: batch (%d) and seq_len (%d) must be positive and batches (%d) >= 0 "
                       "(0: all of val.bin)", p->batch, p->seq_len, p->batches);
    if (p->bootstrap < 1)
        return ac_fail(AC_ERR_INVALID, "eval: bootstrap resamples must be positive, got %d", p->bootstrap);
    if (!(p->kd_tau > 0))
        return ac_fail(AC_ERR_INVALID, "eval: the distillation temperature must be positive, got %g", p->kd_tau);
    if (p->code_lines < -1)
        return ac_fail(AC_ERR_INVALID, "eval: code_lines must be >= 0 (or -1: auto), got %d", p->code_lines);
    if (p->code_lines != 0 && (p->line_context < 1 || p->max_line_tokens < 1))
        return ac_fail(AC_ERR_INVALID, "eval: line_context (%d) and max_line_tokens (%d) must be positive",
                       p->line_context, p->max_line_tokens);
    return AC_OK;
}

/* -1 resolves from data_dir/manifest.json: shards made from whole files are code. */
static ac_status resolve_code_lines(const ac_eval_params *p, int *lines)
{
    *lines = p->code_lines;
    if (p->code_lines >= 0)
        return AC_OK;
    *lines = 0;
    char path[4096];
    struct stat sb;
    ac_status st = ac_path_join(path, sizeof path, p->data_dir, "manifest.json");
    if (st != AC_OK || stat(path, &sb) != 0)
        return st;
    cJSON *root;
    st = ac_read_json_file(path, (size_t)64 << 20, &root);
    if (st != AC_OK)
        return st;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "document_format");
    if (cJSON_IsString(format) && !strcmp(format->valuestring, "files"))
        *lines = AUTO_CODE_LINES;
    cJSON_Delete(root);
    return AC_OK;
}

static ac_status check_inputs(const ac_model *student, const ac_model *teacher, const ac_tokens *val,
                              const ac_eval_params *p)
{
    int V = ac_model_arch(student)->vocab, TV = ac_model_arch(teacher)->vocab;
    if (V != TV)
        return ac_fail(AC_ERR_INVALID, "eval: the student's vocabulary (%d) differs from the teacher's (%d)", V, TV);
    if (ac_tokens_vocab_size(val) > (uint32_t)V)
        return ac_fail(AC_ERR_INVALID, "%s: token vocabulary %u is larger than the models' %d", ac_tokens_path(val),
                       ac_tokens_vocab_size(val), V);
    if (ac_tokens_window_count(val, p->seq_len) == 0)
        return ac_fail(AC_ERR_INVALID, "%s: %llu tokens, too few for one window of seq_len %d (+1)",
                       ac_tokens_path(val), (unsigned long long)ac_tokens_count(val), p->seq_len);
    return AC_OK;
}

/* ---- scoring batches of windows ---- */

typedef struct {
    const ac_eval_params *p;
    int vocab;
    ac_train_step *student, *teacher;
    int32_t *window, *inputs, *targets; /* [batch, seq_len + 1], [batch, seq_len] x 2 */
    double *row_kd;                     /* [batch * seq_len] */
    double kd, ce, teacher_ce;          /* sums over positions */
    int64_t agree, tokens;
    double *win_kd, *win_ce;            /* [windows to score]: each window's mean KD and CE */
    int64_t windows, capacity;          /* scored so far, and room */
    uint64_t hash;                      /* FNV-1a-64 of the scored windows' ids */
} scorer;

static void scorer_free(scorer *s)
{
    ac_train_step_free(s->student);
    ac_train_step_free(s->teacher);
    free(s->window);
    free(s->inputs);
    free(s->targets);
    free(s->row_kd);
    free(s->win_kd);
    free(s->win_ce);
}

static ac_status scorer_init(scorer *s, const ac_model *student, const ac_model *teacher)
{
    const ac_eval_params *p = s->p;
    size_t rows = (size_t)p->batch * p->seq_len;
    s->vocab = ac_model_arch(student)->vocab;
    s->window = malloc((size_t)p->batch * (p->seq_len + 1) * sizeof *s->window);
    s->inputs = malloc(rows * sizeof *s->inputs);
    s->targets = malloc(rows * sizeof *s->targets);
    s->row_kd = malloc(rows * sizeof *s->row_kd);
    if (!s->window || !s->inputs || !s->targets || !s->row_kd)
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %d x %d tokens", p->batch, p->seq_len);
    ac_status st = ac_train_step_create(student, p->batch, p->seq_len, &s->student);
    if (st == AC_OK)
        st = ac_train_step_create(teacher, p->batch, p->seq_len, &s->teacher);
    return st;
}

/* Windows [0, n) of the batch become inputs and targets; the rest is padding whose
 * targets (-1) no loss counts. */
static void split_windows(scorer *s, int n)
{
    int T = s->p->seq_len;
    for (int b = 0; b < s->p->batch; b++)
        for (int t = 0; t < T; t++) {
            s->inputs[b * T + t] = b < n ? s->window[b * (T + 1) + t] : 0;
            s->targets[b * T + t] = b < n ? s->window[b * (T + 1) + t + 1] : -1;
        }
}

/* -log softmax(logits)[target] over V logits, in double. */
static double row_ce(const float *logits, int V, int target)
{
    float m = logits[0];
    for (int v = 1; v < V; v++)
        m = logits[v] > m ? logits[v] : m;
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - m);
    return (double)m + log(sum) - logits[target];
}

/* Each of the batch's n windows' mean KD (from row_kd) and CE (from the student's logits). */
static void add_windows(scorer *s, int n, const float *sl)
{
    int T = s->p->seq_len, V = s->vocab;
    for (int w = 0; w < n && s->windows < s->capacity; w++, s->windows++) {
        double kd = 0.0, ce = 0.0;
        for (int t = 0; t < T; t++) {
            int r = w * T + t;
            kd += s->row_kd[r];
            ce += row_ce(sl + (size_t)r * V, V, s->targets[r]);
        }
        s->win_kd[s->windows] = kd / T;
        s->win_ce[s->windows] = ce / T;
    }
}

/* The batch's n windows of seq_len + 1 ids into the hash: the same hash, the same
 * windows, whichever val.bin path and batch size gave them. */
static void hash_windows(scorer *s, int n)
{
    size_t count = (size_t)n * (s->p->seq_len + 1);
    for (size_t i = 0; i < count; i++) {
        uint32_t id = (uint32_t)s->window[i];
        for (int byte = 0; byte < 4; byte++)
            s->hash = (s->hash ^ ((id >> (8 * byte)) & 0xff)) * 1099511628211ULL;
    }
}

/* Both forwards (loss only: no backward, no gradients), then the sums over the n*T
 * positions that count, which come first. */
static ac_status score_batch(scorer *s, int n)
{
    hash_windows(s, n);
    split_windows(s, n);
    ac_step_inputs in = {.tokens = s->inputs, .targets = s->targets};
    double teacher_ce, student_ce;
    ac_status st = ac_train_step_loss(s->teacher, &in, &teacher_ce);
    if (st == AC_OK)
        st = ac_train_step_loss(s->student, &in, &student_ce);
    if (st != AC_OK)
        return st;
    int rows = n * s->p->seq_len, V = s->vocab;
    const float *tl = ac_train_step_logits(s->teacher), *sl = ac_train_step_logits(s->student);
    /* the host logits of the steps: the CPU kernel distill's loss uses */
    ac_kctx cpu = {0};
    ac_k_kd_loss(&cpu, rows, V, sl, tl, s->p->kd_tau, 0.0f, NULL, s->row_kd);
    for (int r = 0; r < rows; r++) {
        s->kd += s->row_kd[r];
        s->agree += ac_argmax(sl + (size_t)r * V, V) == ac_argmax(tl + (size_t)r * V, V);
    }
    add_windows(s, n, sl);
    /* the steps' losses are means over the counted positions */
    s->ce += student_ce * rows;
    s->teacher_ce += teacher_ce * rows;
    s->tokens += rows;
    return AC_OK;
}

static ac_status score_batches(scorer *s, const ac_tokens *val, ac_eval_report *r)
{
    const ac_eval_params *p = s->p;
    uint64_t windows = ac_tokens_window_count(val, p->seq_len), want = (uint64_t)p->batches * (uint64_t)p->batch;
    uint64_t scored = p->batches == 0 || windows < want ? windows : want;
    s->win_kd = malloc(scored * sizeof *s->win_kd);
    s->win_ce = malloc(scored * sizeof *s->win_ce);
    if (!s->win_kd || !s->win_ce)
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %llu windows", (unsigned long long)scored);
    s->capacity = (int64_t)scored;
    ac_progress *progress;
    ac_status st = ac_progress_init(&progress, "eval", (double)scored * p->seq_len, "tok", p->progress, stderr);
    if (st != AC_OK)
        return st;
    ac_tokens_iter it;
    ac_tokens_iter_init(&it, val, p->seq_len);
    int n;
    for (int b = 0; st == AC_OK && (p->batches == 0 || b < p->batches) &&
                    (n = ac_tokens_iter_next(&it, p->batch, s->window)) > 0;
         b++) {
        st = score_batch(s, n);
        ac_progress_metric(progress, "kd", s->tokens ? s->kd / (double)s->tokens : 0.0);
        ac_progress_update(progress, (double)s->tokens);
    }
    ac_progress_finish(progress);
    ac_progress_free(progress);
    if (st != AC_OK)
        return st;
    double N = (double)s->tokens;
    r->tokens = s->tokens;
    r->kd_loss = s->kd / N;
    r->ce = s->ce / N;
    r->ppl = exp(r->ce);
    r->teacher_ce = s->teacher_ce / N;
    r->teacher_ppl = exp(r->teacher_ce);
    r->top1_agreement = (double)s->agree / N;
    r->windows = s->windows;
    r->windows_hash = s->hash;
    /* a fixed seed: the same windows give the same interval */
    st = ac_stat_bootstrap_mean(s->win_kd, (size_t)s->windows, p->bootstrap, 1, 0.95, &r->kd_lo, &r->kd_hi);
    if (st == AC_OK)
        st = ac_stat_bootstrap_mean(s->win_ce, (size_t)s->windows, p->bootstrap, 1, 0.95, &r->ce_lo, &r->ce_hi);
    if (st == AC_OK) {
        /* the report owns them from here */
        r->window_kd = s->win_kd;
        r->window_ce = s->win_ce;
        s->win_kd = s->win_ce = NULL;
    }
    return st;
}

/* ---- next-line exact match ---- */

static ac_status load_tokenizer(const ac_eval_params *p, const char *student_dir, ac_tokenizer **tok)
{
    char path[4096];
    if (p->tokenizer_path)
        return ac_tokenizer_load(p->tokenizer_path, tok);
    if (!student_dir)
        return ac_fail(AC_ERR_INVALID, "eval: next-line matching needs a tokenizer: give tokenizer_path or the "
                       "student's directory");
    ac_status st = ac_path_join(path, sizeof path, student_dir, "tokenizer.json");
    return st == AC_OK ? ac_tokenizer_load(path, tok) : st;
}

typedef struct {
    ac_tokenizer *tok;
    ac_eval_pieces pieces;
    uint64_t *starts;
    int32_t *ids;
    int *lens;
    unsigned char *matched;
    ac_progress *progress;
} line_run;

static void line_run_free(line_run *l)
{
    ac_tokenizer_free(l->tok);
    ac_eval_pieces_free(&l->pieces);
    free(l->starts);
    free(l->ids);
    free(l->lens);
    free(l->matched);
    ac_progress_free(l->progress);
}

static ac_status complete(line_run *l, const ac_model *student, const ac_tokens *val, const ac_eval_params *p,
                          const ac_line_rules *rules, int n)
{
    l->ids = malloc((size_t)n * rules->max_tokens * sizeof *l->ids);
    l->lens = malloc((size_t)n * sizeof *l->lens);
    l->matched = malloc((size_t)n);
    if (!l->ids || !l->lens || !l->matched)
        return ac_fail(AC_ERR_NOMEM, "eval: out of memory for %d lines", n);
    ac_status st = ac_progress_init(&l->progress, "eval lines", n, "lines", p->progress, stderr);
    if (st == AC_OK)
        st = ac_eval_complete_lines(student, val, &l->pieces, rules, l->starts, n, p->batch, l->progress, l->ids,
                                    l->lens, l->matched);
    if (st == AC_OK)
        ac_progress_finish(l->progress);
    return st;
}

static ac_status match_lines(const ac_model *student, const char *student_dir, const ac_tokens *val,
                             const ac_eval_params *p, int want, ac_eval_report *r)
{
    line_run l = {0};
    ac_line_rules rules = {.context = p->line_context, .max_tokens = p->max_line_tokens};
    int n = 0;
    ac_status st = load_tokenizer(p, student_dir, &l.tok);
    if (st == AC_OK)
        st = ac_eval_pieces_init(&l.pieces, l.tok, ac_model_arch(student)->vocab);
    if (st == AC_OK)
        st = ac_eval_select_lines(val, &l.pieces, &rules, want, &l.starts, &n);
    if (st == AC_OK && n == 0)
        ac_warn("eval: %s has no line start with %d tokens of context: no next-line match", ac_tokens_path(val),
                p->line_context);
    if (st == AC_OK && n > 0)
        st = complete(&l, student, val, p, &rules, n);
    int hits = 0;
    for (int j = 0; st == AC_OK && j < n; j++)
        hits += l.matched[j];
    r->lines = st == AC_OK ? n : 0;
    r->line_exact_match = n > 0 ? (double)hits / n : 0.0;
    line_run_free(&l);
    return st;
}

ac_status ac_eval_run(const ac_model *student, const ac_model *teacher, const char *student_dir,
                      const ac_eval_params *p, ac_eval_report *r)
{
    *r = (ac_eval_report){0};
    if (!student || !teacher)
        return ac_fail(AC_ERR_INVALID, "eval: a student and a teacher model are needed");
    ac_status st = check_params(p);
    if (st != AC_OK)
        return st;
    double t0 = ac_monotonic_s();
    char path[4096];
    int lines = 0;
    ac_tokens *val = NULL;
    st = resolve_code_lines(p, &lines);
    if (st == AC_OK)
        st = ac_path_join(path, sizeof path, p->data_dir, "val.bin");
    if (st == AC_OK)
        st = ac_tokens_open(path, &val);
    if (st == AC_OK)
        st = check_inputs(student, teacher, val, p);
    scorer s = {.p = p, .hash = 1469598103934665603ULL};
    if (st == AC_OK)
        st = scorer_init(&s, student, teacher);
    if (st == AC_OK)
        st = score_batches(&s, val, r);
    scorer_free(&s);
    if (st == AC_OK && lines > 0)
        st = match_lines(student, student_dir, val, p, lines, r);
    ac_tokens_close(val);
    r->seconds = ac_monotonic_s() - t0;
    if (st != AC_OK)
        ac_eval_report_free(r);
    return st;
}

void ac_eval_report_free(ac_eval_report *r)
{
    free(r->window_kd);
    free(r->window_ce);
    r->window_kd = r->window_ce = NULL;
}

/* x to 8 significant digits: cJSON then prints no more (it prints the shortest of 15
 * or 17 digits that reads back), which is all a window's float-computed mean holds. */
static double eight_digits(double x)
{
    char text[32];
    snprintf(text, sizeof text, "%.8g", x);
    return strtod(text, NULL);
}

/* An array of n values under `name` (none when v is NULL); 0 when out of memory. */
static int add_window_array(cJSON *root, const char *name, const double *v, int64_t n)
{
    cJSON *array = cJSON_AddArrayToObject(root, name);
    for (int64_t i = 0; array && v && i < n; i++) {
        cJSON *item = cJSON_CreateNumber(eight_digits(v[i]));
        if (!item || !cJSON_AddItemToArray(array, item)) {
            cJSON_Delete(item);
            return 0;
        }
    }
    return array != NULL;
}

static ac_status add_windows_json(cJSON *root, const ac_eval_report *r, const char *path)
{
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)r->windows_hash);
    if (!cJSON_AddStringToObject(root, "windows_hash", hash) ||
        !add_window_array(root, "window_kd", r->window_kd, r->windows) ||
        !add_window_array(root, "window_ce", r->window_ce, r->windows))
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for %lld windows' scores", path, (long long)r->windows);
    return AC_OK;
}

ac_status ac_eval_write_json(const ac_eval_report *r, const ac_eval_params *p, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for the report", path);
    cJSON_AddNumberToObject(root, "tokens", (double)r->tokens);
    cJSON_AddNumberToObject(root, "kd_loss", r->kd_loss);
    cJSON *kd95 = cJSON_AddArrayToObject(root, "kd_loss_95");
    cJSON_AddItemToArray(kd95, cJSON_CreateNumber(r->kd_lo));
    cJSON_AddItemToArray(kd95, cJSON_CreateNumber(r->kd_hi));
    cJSON_AddNumberToObject(root, "kd_tau", p->kd_tau);
    cJSON_AddNumberToObject(root, "ce", r->ce);
    cJSON *ce95 = cJSON_AddArrayToObject(root, "ce_95");
    cJSON_AddItemToArray(ce95, cJSON_CreateNumber(r->ce_lo));
    cJSON_AddItemToArray(ce95, cJSON_CreateNumber(r->ce_hi));
    cJSON_AddNumberToObject(root, "windows", (double)r->windows);
    cJSON_AddNumberToObject(root, "ppl", r->ppl);
    cJSON_AddNumberToObject(root, "teacher_ce", r->teacher_ce);
    cJSON_AddNumberToObject(root, "teacher_ppl", r->teacher_ppl);
    cJSON_AddNumberToObject(root, "top1_agreement", r->top1_agreement);
    cJSON_AddNumberToObject(root, "lines", r->lines);
    if (r->lines > 0)
        cJSON_AddNumberToObject(root, "line_exact_match", r->line_exact_match);
    else
        cJSON_AddNullToObject(root, "line_exact_match");
    cJSON_AddNumberToObject(root, "seconds", r->seconds);
    cJSON_AddStringToObject(root, "data_dir", p->data_dir ? p->data_dir : "");
    cJSON_AddNumberToObject(root, "batches", p->batches);
    cJSON_AddNumberToObject(root, "batch", p->batch);
    cJSON_AddNumberToObject(root, "seq_len", p->seq_len);
    cJSON_AddNumberToObject(root, "bootstrap", p->bootstrap);
    cJSON_AddNumberToObject(root, "line_context", p->line_context);
    cJSON_AddNumberToObject(root, "max_line_tokens", p->max_line_tokens);
    ac_status st = add_windows_json(root, r, path);
    if (st == AC_OK)
        st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}
