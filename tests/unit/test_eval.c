/* Evaluation against a teacher: a model against itself has zero KD loss, full top-1
 * agreement and the cross-entropy a log-softmax in double gives; a different student's
 * KD loss, cross-entropy and agreement match sums done here over the same windows (a
 * partial last batch and the batch limit included); next-line exact match picks the
 * line starts the documented rule gives, scores 0 for a model that always emits '\n',
 * the predictable fraction for a bigram model, and completes lines like a brute-force
 * greedy recompute without a cache; bad inputs are refused, naming what is wrong. Each
 * window's KD and CE (report and eval.json) match one-window sums done here; comparing
 * two students gives the mean of the window differences done here, an interval around
 * it like the normal one, the negation when swapped, and the exact values of files
 * worked by hand; files scored on other windows, with another temperature or against
 * another teacher are refused, naming both. With
 * both models on a backend the host cannot touch (guarded_backend.h, standing in for a
 * GPU), the report is the CPU's, bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autocompress/eval.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/tokenizer.h"
#include "autocompress/tokens.h"
#include "autocompress/train.h"
#include "eval/eval_internal.h"
#include "guarded_backend.h"
#include "model/model_internal.h"

/* The model's vocabulary is larger than the tokenizer's: ids 7..11 are unused. */
enum { V = 12, D = 16, EOS = 0, A = 1, B = 2, C = 3, NL = 4, SP = 5, NLSP = 6, TOKENIZER_IDS = 7 };
static const char *const piece_text[TOKENIZER_IDS] = {"<|endoftext|>", "a", "b", "c", "\n", " ", "\n "};

/* byte-level spellings: U+010A is '\n', U+0120 is ' ' */
#define BL_NL "\xC4\x8A"
#define BL_SP "\xC4\xA0"
static const char tokenizer_json[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"<|endoftext|>\":0,\"a\":1,\"b\":2,"
    "\"c\":3,\"" BL_NL "\":4,\"" BL_SP "\":5,\"" BL_NL BL_SP "\":6},\"merges\":[\"" BL_NL " " BL_SP "\"]}}";

typedef struct {
    char dir[64], data[96], tokenizer[128];
    ac_model *teacher, *student;
} fixture;

static void tiny_arch(ac_arch *a, int vocab)
{
    static const char kinds[] = "ME*M-E";
    *a = (ac_arch){.vocab = vocab, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 4,
                   .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(a, 6), AC_OK);
    for (int i = 0; i < 6; i++) {
        char c = kinds[i];
        a->layers[i] = (ac_block_dims){
            .kind = c == 'M' ? AC_BLOCK_MAMBA : c == '*' ? AC_BLOCK_ATTENTION : c == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE,
            .mamba_heads = 6, .mamba_head_dim = 2, .mamba_groups = 2, .ssm_state = 4, .conv_kernel = 3,
            .attn_heads = 2, .attn_kv_heads = 1, .attn_head_dim = 8, .ffn = 12, .n_experts = 6, .top_k = 2,
            .expert_ffn = 6, .shared_ffn = 10, .n_group = 1, .topk_group = 1, .norm_topk_prob = 1,
            .routed_scaling = 1.5f};
    }
}

static ac_model *tiny_model(int vocab, uint64_t seed, float std)
{
    ac_arch a;
    tiny_arch(&a, vocab);
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    if (std > 0)
        ac_model_init_random(m, seed, std);
    return m;
}

static void write_shard(const char *dir, const char *name, uint32_t vocab, const int32_t *ids, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ac_tokens_writer *w;
    assert_int_equal(ac_tokens_writer_open(path, vocab, &w), AC_OK);
    assert_int_equal(ac_tokens_writer_append(w, ids, n), AC_OK);
    assert_int_equal(ac_tokens_writer_close(w), AC_OK);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ac-eval-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    snprintf(f->tokenizer, sizeof f->tokenizer, "%s/tokenizer.json", f->dir);
    mkdir(f->data, 0777);
    write_text(f->tokenizer, tokenizer_json);
    f->teacher = tiny_model(V, 3, 0.4f);
    f->student = tiny_model(V, 4, 0.4f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", f->dir);
    int rc = system(command);
    ac_model_free(f->teacher);
    ac_model_free(f->student);
    free(f);
    return rc == 0 ? 0 : -1;
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void random_stream(int32_t *ids, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(lcg(&seed) % V);
}

/* ---- the scores, recomputed here ---- */

typedef struct {
    int64_t tokens, agree;
    double kd, ce, teacher_ce;
} sums;

static int same_to_15_digits(double got, double want) { return fabs(got - want) <= 1e-14 * fabs(want); }

static int argmax_of(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static double log_softmax_at(const float *x, int n, double inv_tau, int at, double *lse_out)
{
    double max = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        max = fmax(max, x[i] * inv_tau);
    for (int i = 0; i < n; i++)
        sum += exp(x[i] * inv_tau - max);
    double lse = max + log(sum);
    if (lse_out)
        *lse_out = lse;
    return at >= 0 ? x[at] * inv_tau - lse : 0.0;
}

static double kl_row(const float *t, const float *s, int n, double tau)
{
    double t_lse, s_lse, kl = 0.0;
    log_softmax_at(t, n, 1.0 / tau, -1, &t_lse);
    log_softmax_at(s, n, 1.0 / tau, -1, &s_lse);
    for (int i = 0; i < n; i++) {
        double lt = t[i] / tau - t_lse, ls = s[i] / tau - s_lse;
        kl += exp(lt) * (lt - ls);
    }
    return tau * tau * kl;
}

/* Windows k*T .. k*T+T of the stream for k < windows, `batch` per forward, with the
 * logits of a forward-only training step. */
static sums score_here(const ac_model *student, const ac_model *teacher, const int32_t *stream, int windows,
                       int batch, int T, double tau)
{
    sums out = {0};
    ac_train_step *ss, *ts;
    assert_int_equal(ac_train_step_create(student, batch, T, &ss), AC_OK);
    assert_int_equal(ac_train_step_create(teacher, batch, T, &ts), AC_OK);
    int32_t *in = calloc((size_t)batch * T, sizeof *in), *tg = calloc((size_t)batch * T, sizeof *tg);
    for (int w0 = 0; w0 < windows; w0 += batch) {
        int n = windows - w0 < batch ? windows - w0 : batch;
        for (int b = 0; b < batch; b++)
            for (int t = 0; t < T; t++) {
                in[b * T + t] = b < n ? stream[(w0 + b) * T + t] : 0;
                tg[b * T + t] = b < n ? stream[(w0 + b) * T + t + 1] : -1;
            }
        ac_step_inputs si = {.tokens = in, .targets = tg};
        double unused;
        assert_int_equal(ac_train_step_loss(ss, &si, &unused), AC_OK);
        assert_int_equal(ac_train_step_loss(ts, &si, &unused), AC_OK);
        const float *sl = ac_train_step_logits(ss), *tl = ac_train_step_logits(ts);
        for (int r = 0; r < n * T; r++) {
            const float *s = sl + (size_t)r * V, *t = tl + (size_t)r * V;
            out.ce -= log_softmax_at(s, V, 1.0, tg[r], NULL);
            out.teacher_ce -= log_softmax_at(t, V, 1.0, tg[r], NULL);
            out.kd += kl_row(t, s, V, tau);
            out.agree += argmax_of(s, V) == argmax_of(t, V);
            out.tokens++;
        }
    }
    free(in);
    free(tg);
    ac_train_step_free(ss);
    ac_train_step_free(ts);
    return out;
}

static ac_eval_params small_params(const fixture *f)
{
    ac_eval_params p = ac_eval_default_params();
    p.data_dir = f->data;
    p.batches = 3;
    p.batch = 2;
    p.seq_len = 8;
    p.code_lines = 0;
    p.progress = AC_PROGRESS_OFF;
    return p;
}

static int close_rel(double got, double want, double rtol) { return fabs(got - want) <= rtol * fabs(want); }

/* 41 tokens: 5 windows of 8, so 3 batches of 2 are 2 + 2 + 1 windows */
enum { STREAM = 41 };

static void test_teacher_against_itself(void **state)
{
    fixture *f = *state;
    int32_t ids[STREAM];
    random_stream(ids, STREAM, 9);
    write_shard(f->data, "val.bin", V, ids, STREAM);
    ac_eval_params p = small_params(f);
    ac_eval_report r;
    assert_int_equal(ac_eval_run(f->teacher, f->teacher, NULL, &p, &r), AC_OK);
    sums want = score_here(f->teacher, f->teacher, ids, 5, 2, 8, 1.0);
    printf("  self: %lld positions, kd %.3g, ce %.9f (here %.9f), top1 %.3f\n", (long long)r.tokens, r.kd_loss, r.ce,
           want.ce / 40, r.top1_agreement);
    assert_int_equal(r.tokens, 40);
    assert_true(r.kd_loss >= 0 && r.kd_loss < 1e-6);
    assert_true(r.top1_agreement == 1.0);
    /* the kernel takes x - max in float: agreement to float rounding of the logits */
    assert_true(close_rel(r.ce, want.ce / 40, 1e-7));
    assert_true(r.teacher_ce == r.ce);
    assert_true(close_rel(r.ppl, exp(want.ce / 40), 1e-7));
    assert_int_equal(r.lines, 0);
    ac_eval_report_free(&r);
}

static void test_student_against_teacher(void **state)
{
    fixture *f = *state;
    int32_t ids[STREAM];
    random_stream(ids, STREAM, 10);
    write_shard(f->data, "val.bin", V, ids, STREAM);
    ac_eval_params p = small_params(f);
    p.kd_tau = 2.0f;
    ac_eval_report r;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    sums want = score_here(f->student, f->teacher, ids, 5, 2, 8, 2.0);
    printf("  student: kd %.9f (here %.9f), ce %.6f, teacher ce %.6f, top1 %.4f (here %lld/40)\n", r.kd_loss,
           want.kd / 40, r.ce, r.teacher_ce, r.top1_agreement, (long long)want.agree);
    assert_int_equal(r.tokens, 40);
    assert_true(want.kd > 1e-3); /* the two models differ */
    assert_true(close_rel(r.kd_loss, want.kd / 40, 1e-5));
    assert_true(close_rel(r.ce, want.ce / 40, 1e-6));
    assert_true(close_rel(r.teacher_ce, want.teacher_ce / 40, 1e-6));
    assert_true(r.top1_agreement == (double)want.agree / 40);
    assert_true(want.agree < 40);

    /* only the first `batches` batches count */
    p.batches = 2;
    ac_eval_report_free(&r);
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    want = score_here(f->student, f->teacher, ids, 4, 2, 8, 2.0);
    assert_int_equal(r.tokens, 32);
    assert_true(close_rel(r.kd_loss, want.kd / 32, 1e-5));
    assert_true(r.top1_agreement == (double)want.agree / 32);

    char path[256];
    snprintf(path, sizeof path, "%s/eval.json", f->dir);
    assert_int_equal(ac_eval_write_json(&r, &p, path), AC_OK);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char text[4096];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    assert_true(cJSON_GetObjectItem(root, "tokens")->valuedouble == 32);
    /* cJSON prints 15 significant digits and keeps them when they read back within a
     * double's epsilon, not always to the last bit */
    assert_true(same_to_15_digits(cJSON_GetObjectItem(root, "kd_loss")->valuedouble, r.kd_loss));
    assert_true(same_to_15_digits(cJSON_GetObjectItem(root, "top1_agreement")->valuedouble, r.top1_agreement));
    assert_true(same_to_15_digits(cJSON_GetObjectItem(root, "teacher_ppl")->valuedouble, r.teacher_ppl));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(root, "line_exact_match")));
    assert_true(cJSON_GetObjectItem(root, "seq_len")->valuedouble == 8);
    cJSON_Delete(root);
    ac_eval_report_free(&r);
}

/* ---- next-line exact match ---- */

/* Lines of a, b, c and spaces ending in "\n" or "\n " (the next line indented), with
 * blank lines, whitespace-only lines, documents ending (EOS) and lines too long to
 * count mixed in; a third of the lines are "abc". */
static int line_stream(int32_t *ids, int cap, uint64_t seed)
{
    int n = 0;
    while (n < cap - 12) {
        uint64_t r = lcg(&seed) % 12;
        if (r == 0) {
            ids[n++] = NL;
        } else if (r == 1) {
            ids[n++] = SP;
            ids[n++] = NL;
        } else if (r == 2) {
            ids[n++] = EOS;
        } else if (r < 7) {
            ids[n++] = A;
            ids[n++] = B;
            ids[n++] = C;
            ids[n++] = lcg(&seed) % 2 ? NL : NLSP;
        } else {
            int len = r == 11 ? 8 : 1 + (int)(lcg(&seed) % 4);
            for (int j = 0; j < len; j++)
                ids[n++] = (int32_t)(A + lcg(&seed) % 4); /* a, b, c or a space */
            ids[n++] = lcg(&seed) % 2 ? NL : NLSP;
        }
    }
    return n;
}

static const char *text_of(int32_t id) { return id >= 0 && id < TOKENIZER_IDS ? piece_text[id] : NULL; }

/* The reference line at i by the rule in eval.h, written out on strings; its text
 * (before the '\n') goes to `line`. */
static int reference_here(const int32_t *ids, int n, int i, int context, int max, char *line)
{
    if (i < context || i >= n)
        return 0;
    const char *prev = text_of(ids[i - 1]);
    const char *nl = prev && ids[i - 1] != EOS ? strrchr(prev, '\n') : NULL;
    if (!nl || strspn(nl + 1, " \t") != strlen(nl + 1))
        return 0;
    size_t used = 0;
    for (int j = 0; j < max && i + j < n; j++) {
        const char *t = text_of(ids[i + j]);
        if (!t || ids[i + j] == EOS)
            return 0;
        const char *end = strchr(t, '\n');
        size_t take = end ? (size_t)(end - t) : strlen(t);
        memcpy(line + used, t, take);
        used += take;
        line[used] = '\0';
        if (end)
            return strspn(line, " \t") == used ? 0 : j + 1;
    }
    return 0;
}

static ac_tokens *open_val(const fixture *f)
{
    char path[256];
    snprintf(path, sizeof path, "%s/val.bin", f->data);
    ac_tokens *t;
    assert_int_equal(ac_tokens_open(path, &t), AC_OK);
    return t;
}

static void load_pieces(const fixture *f, ac_eval_pieces *pieces)
{
    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load(f->tokenizer, &tok), AC_OK);
    assert_int_equal(ac_eval_pieces_init(pieces, tok, V), AC_OK);
    ac_tokenizer_free(tok);
}

static void test_line_selection(void **state)
{
    fixture *f = *state;
    static int32_t ids[600];
    int n = line_stream(ids, 600, 1);
    write_shard(f->data, "val.bin", V, ids, (size_t)n);
    ac_eval_pieces pieces;
    load_pieces(f, &pieces);
    assert_int_equal(pieces.usable[EOS], 0);
    assert_int_equal(pieces.usable[TOKENIZER_IDS], 0);
    assert_int_equal(pieces.usable[NLSP], 1);
    assert_int_equal(pieces.offset[NLSP + 1] - pieces.offset[NLSP], 2);
    assert_memory_equal(pieces.bytes + pieces.offset[NLSP], "\n ", 2);

    ac_line_rules rules = {.context = 5, .max_tokens = 6};
    int starts_here[600], found = 0, too_long = 0, indented = 0;
    char line[256];
    for (int i = 0; i < n; i++)
        if (reference_here(ids, n, i, 5, 6, line)) {
            starts_here[found++] = i;
            indented += ids[i - 1] == NLSP;
        } else if (reference_here(ids, n, i, 5, 64, line)) {
            too_long++;
        }
    printf("  %d tokens, %d line starts (%d after an indenting newline), %d lines too long\n", n, found, indented,
           too_long);
    assert_true(found > 40 && indented > 10 && too_long > 0);

    ac_tokens *val = open_val(f);
    for (int i = 0; i < n; i++)
        assert_int_equal(ac_eval_line_at(val, &pieces, &rules, (uint64_t)i) > 0,
                         reference_here(ids, n, i, 5, 6, line) > 0);
    uint64_t *starts;
    int m;
    assert_int_equal(ac_eval_select_lines(val, &pieces, &rules, 10, &starts, &m), AC_OK);
    assert_int_equal(m, 10);
    for (int k = 0; k < m; k++)
        assert_int_equal(starts[k], starts_here[(int64_t)k * found / 10]);
    free(starts);
    /* asking for more lines than there are gives all of them */
    assert_int_equal(ac_eval_select_lines(val, &pieces, &rules, 100000, &starts, &m), AC_OK);
    assert_int_equal(m, found);
    for (int k = 0; k < m; k++)
        assert_int_equal(starts[k], starts_here[k]);
    free(starts);
    ac_tokens_close(val);
    ac_eval_pieces_free(&pieces);
}

static void set_param(ac_model *m, const char *name, int row, float value)
{
    const ac_param *p = ac_model_find_param(m, name);
    assert_non_null(p);
    int64_t cols = p->ndim == 2 ? p->shape[1] : (int64_t)p->count;
    if (row < 0) {
        for (size_t i = 0; i < p->count; i++)
            p->data[i] = value;
    } else {
        for (int64_t c = 0; c < cols; c++)
            p->data[row * cols + c] = value;
    }
}

/* Every block zero, so the logits are lm_head . norm(embedding of the last token). */
static ac_model *zero_block_model(void)
{
    ac_model *m = tiny_model(V, 0, 0.0f);
    set_param(m, "norm_f.weight", -1, 1.0f);
    return m;
}

static ac_eval_params line_params(const fixture *f, int lines)
{
    ac_eval_params p = small_params(f);
    p.code_lines = lines;
    p.line_context = 5;
    p.max_line_tokens = 6;
    p.tokenizer_path = f->tokenizer;
    return p;
}

static void test_always_newline_matches_nothing(void **state)
{
    fixture *f = *state;
    static int32_t ids[600];
    int n = line_stream(ids, 600, 2);
    write_shard(f->data, "val.bin", V, ids, (size_t)n);
    ac_model *m = zero_block_model();
    set_param(m, "embeddings.weight", -1, 1.0f);
    set_param(m, "lm_head.weight", NL, 1.0f); /* the only nonzero logit */
    ac_eval_params p = line_params(f, 10);
    ac_eval_report r;
    assert_int_equal(ac_eval_run(m, f->teacher, NULL, &p, &r), AC_OK);
    assert_int_equal(r.lines, 10);
    assert_true(r.line_exact_match == 0.0);
    ac_eval_report_free(&r);
    ac_model_free(m);
}

/* next(id): a -> b -> c -> '\n' -> a; anything else -> a. So every completion is "abc\n";
 * with c -> <|endoftext|> it is "abc" and no line matches. */
static void test_bigram_model_matches_abc_lines(void **state)
{
    fixture *f = *state;
    static int32_t ids[800];
    int n = line_stream(ids, 800, 3);
    write_shard(f->data, "val.bin", V, ids, (size_t)n);
    ac_model *m = zero_block_model();
    const ac_param *emb = ac_model_find_param(m, "embeddings.weight"), *head = ac_model_find_param(m, "lm_head.weight");
    assert_non_null(emb);
    assert_non_null(head);
    for (int id = 0; id < V; id++) {
        emb->data[id * D + id] = 1.0f;
        int next = id == A ? B : id == B ? C : id == C ? NL : A;
        head->data[next * D + id] = 1.0f;
    }
    int found = 0, abc = 0;
    char line[256];
    for (int i = 0; i < n; i++)
        if (reference_here(ids, n, i, 5, 6, line)) {
            found++;
            abc += !strcmp(line, "abc");
        }
    ac_eval_params p = line_params(f, 100000);
    ac_eval_report r;
    assert_int_equal(ac_eval_run(m, m, NULL, &p, &r), AC_OK);
    printf("  bigram: %d of %d lines are abc; exact match %.4f\n", abc, found, r.line_exact_match);
    assert_int_equal(r.lines, found);
    assert_true(abc > 10 && abc < found);
    assert_true(r.line_exact_match == (double)abc / found);
    ac_eval_report_free(&r);
    /* c -> end of document instead: the text of the line, but the line never ends */
    head->data[NL * D + C] = 0.0f;
    head->data[EOS * D + C] = 1.0f;
    assert_int_equal(ac_eval_run(m, m, NULL, &p, &r), AC_OK);
    assert_int_equal(r.lines, found);
    assert_true(r.line_exact_match == 0.0);
    ac_eval_report_free(&r);
    ac_model_free(m);
}

/* Greedy continuation of ids[0..n) by full forwards without a cache, until a token
 * holding '\n', a special or unknown token, or max tokens. */
static int brute_force_greedy(const ac_model *m, const int32_t *prompt, int context, int max, int32_t *out)
{
    int vocab = ac_model_arch(m)->vocab;
    ac_runtime *rt;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    int32_t seq[64];
    memcpy(seq, prompt, (size_t)context * sizeof *seq);
    float logits[V];
    int len = 0;
    assert_true(vocab <= V);
    while (len < max) {
        ac_cache *cache;
        assert_int_equal(ac_cache_create(m, &cache), AC_OK);
        int total = context + len;
        const int32_t *tokens[1] = {seq};
        ac_cache *caches[1] = {cache};
        ac_batch batch = {.n_seqs = 1, .tokens = tokens, .n_tokens = &total, .caches = caches};
        assert_int_equal(ac_runtime_forward(rt, &batch, AC_LOGITS_LAST, logits), AC_OK);
        ac_cache_free(cache);
        int32_t next = argmax_of(logits, vocab);
        out[len++] = next;
        seq[total] = next;
        const char *t = text_of(next);
        if (!t || next == EOS || strchr(t, '\n'))
            break;
    }
    ac_runtime_free(rt);
    return len;
}

/* A model of the tokenizer's vocabulary, so that only a '\n' or the end of a document
 * (or the length limit) ends a completion. */
static void test_completions_match_a_brute_force_recompute(void **state)
{
    fixture *f = *state;
    static int32_t ids[600];
    int n = line_stream(ids, 600, 4);
    write_shard(f->data, "val.bin", TOKENIZER_IDS, ids, (size_t)n);
    ac_model *model = tiny_model(TOKENIZER_IDS, 6, 0.4f);
    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load(f->tokenizer, &tok), AC_OK);
    ac_eval_pieces pieces;
    assert_int_equal(ac_eval_pieces_init(&pieces, tok, TOKENIZER_IDS), AC_OK);
    ac_tokenizer_free(tok);
    ac_tokens *val = open_val(f);
    ac_line_rules rules = {.context = 5, .max_tokens = 6};
    uint64_t *starts;
    int m;
    assert_int_equal(ac_eval_select_lines(val, &pieces, &rules, 7, &starts, &m), AC_OK);
    assert_int_equal(m, 7);
    int32_t got[7 * 6], want[6];
    int lens[7], lengths_seen[7] = {0};
    unsigned char matched[7];
    /* groups of 3: two full groups and one of a single line */
    assert_int_equal(ac_eval_complete_lines(model, val, &pieces, &rules, starts, m, 3, NULL, got, lens, matched),
                     AC_OK);
    for (int j = 0; j < m; j++) {
        int len = brute_force_greedy(model, ids + starts[j] - 5, 5, 6, want);
        printf("  line at %llu: %d tokens, matched %d\n", (unsigned long long)starts[j], lens[j], matched[j]);
        assert_int_equal(lens[j], len);
        assert_memory_equal(got + j * 6, want, (size_t)len * sizeof *want);
        lengths_seen[lens[j]]++;
    }
    int distinct = 0;
    for (int k = 0; k < 7; k++)
        distinct += lengths_seen[k] > 0;
    assert_true(distinct >= 2); /* lines of a group finished at different steps */
    ac_model_free(model);
    free(starts);
    ac_tokens_close(val);
    ac_eval_pieces_free(&pieces);
}

static void test_code_lines_from_the_manifest(void **state)
{
    fixture *f = *state;
    static int32_t ids[600];
    int n = line_stream(ids, 600, 5);
    write_shard(f->data, "val.bin", V, ids, (size_t)n);
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", f->data);
    ac_eval_params p = line_params(f, -1);
    ac_eval_report r;
    write_text(path, "{\"format\": \"autocompress-tokens\", \"document_format\": \"files\"}");
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    assert_true(r.lines > 40); /* every line start: fewer than 200 */
    ac_eval_report_free(&r);
    write_text(path, "{\"format\": \"autocompress-tokens\", \"document_format\": \"lines\"}");
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    assert_int_equal(r.lines, 0);
    ac_eval_report_free(&r);
    remove(path);
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    assert_int_equal(r.lines, 0);
    ac_eval_report_free(&r);
    /* lines need a tokenizer: none given and no student directory */
    p.code_lines = 5;
    p.tokenizer_path = NULL;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "tokenizer"));
    /* ... or tokenizer.json in it */
    assert_int_equal(ac_eval_run(f->student, f->teacher, f->dir, &p, &r), AC_OK);
    assert_int_equal(r.lines, 5);
    ac_eval_report_free(&r);
}

static void test_on_a_device_equals_cpu(void **state)
{
    fixture *f = *state;
    static int32_t ids[600];
    int n = line_stream(ids, 600, 5);
    write_shard(f->data, "val.bin", V, ids, (size_t)n);
    ac_eval_params p = line_params(f, 12);
    ac_model *student, *teacher;
    assert_int_equal(ac_model_to_backend(f->student, &guarded_backend, &student), AC_OK);
    assert_int_equal(ac_model_to_backend(f->teacher, &guarded_backend, &teacher), AC_OK);
    ac_eval_report want, got;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &want), AC_OK);
    assert_int_equal(ac_eval_run(student, teacher, NULL, &p, &got), AC_OK);
    assert_int_equal(want.lines, 12);
    assert_int_equal(want.tokens, got.tokens);
    assert_int_equal(want.lines, got.lines);
    double w[] = {want.kd_loss, want.ce, want.ppl, want.teacher_ce, want.teacher_ppl, want.top1_agreement,
                  want.line_exact_match};
    double g[] = {got.kd_loss, got.ce, got.ppl, got.teacher_ce, got.teacher_ppl, got.top1_agreement,
                  got.line_exact_match};
    assert_memory_equal(w, g, sizeof w);
    assert_true(want.windows_hash == got.windows_hash);
    assert_memory_equal(want.window_kd, got.window_kd, (size_t)want.windows * sizeof *want.window_kd);
    assert_memory_equal(want.window_ce, got.window_ce, (size_t)want.windows * sizeof *want.window_ce);
    ac_eval_report_free(&want);
    ac_eval_report_free(&got);
    ac_model_free(student);
    ac_model_free(teacher);
    assert_int_equal(guarded_count, 0);
}

/* The mean and the normal approximation's 95% half-width of n values. */
static void normal_interval(const double *v, int n, double *mean, double *half)
{
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    *mean = sum / n;
    for (int i = 0; i < n; i++)
        sq += (v[i] - *mean) * (v[i] - *mean);
    *half = 1.96 * sqrt(sq / (n - 1)) / sqrt((double)n);
}

/* batches 0 scores every window of val.bin; the 95% intervals of the KD loss and the CE
 * agree with the normal approximation over the windows' means computed here. */
enum { WINDOWS = 60, LONG_STREAM = WINDOWS * 8 + 1 };

static void test_all_windows_with_intervals(void **state)
{
    fixture *f = *state;
    static int32_t ids[LONG_STREAM];
    random_stream(ids, LONG_STREAM, 12);
    write_shard(f->data, "val.bin", V, ids, LONG_STREAM);
    ac_eval_params p = small_params(f);
    p.batches = 0;
    ac_eval_report r;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &r), AC_OK);
    assert_int_equal(r.windows, WINDOWS);
    assert_int_equal(r.tokens, WINDOWS * 8);
    double ce[WINDOWS], kd[WINDOWS];
    for (int w = 0; w < WINDOWS; w++) {
        sums one = score_here(f->student, f->teacher, ids + w * 8, 1, 2, 8, 1.0);
        ce[w] = one.ce / 8;
        kd[w] = one.kd / 8;
    }
    double ce_mean, ce_half, kd_mean, kd_half;
    normal_interval(ce, WINDOWS, &ce_mean, &ce_half);
    normal_interval(kd, WINDOWS, &kd_mean, &kd_half);
    printf("  %d windows: ce %.6f [%.6f, %.6f] (normal: %.6f +- %.6f), kd %.6f [%.6f, %.6f] (normal: %.6f +- %.6f)\n",
           WINDOWS, r.ce, r.ce_lo, r.ce_hi, ce_mean, ce_half, r.kd_loss, r.kd_lo, r.kd_hi, kd_mean, kd_half);
    assert_true(close_rel(r.ce, ce_mean, 1e-6));
    assert_true(close_rel(r.kd_loss, kd_mean, 1e-5));
    assert_true(kd_half > 0 && ce_half > 0);
    /* the bootstrap's ends within a quarter of the half-width of the normal interval's */
    assert_true(fabs(r.ce_lo - (ce_mean - ce_half)) < 0.25 * ce_half);
    assert_true(fabs(r.ce_hi - (ce_mean + ce_half)) < 0.25 * ce_half);
    assert_true(fabs(r.kd_lo - (kd_mean - kd_half)) < 0.25 * kd_half);
    assert_true(fabs(r.kd_hi - (kd_mean + kd_half)) < 0.25 * kd_half);

    /* the same windows, the same interval; fewer resamples, another */
    ac_eval_report again;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &again), AC_OK);
    assert_true(again.ce_lo == r.ce_lo && again.ce_hi == r.ce_hi && again.kd_lo == r.kd_lo);
    ac_eval_report_free(&again);
    ac_eval_report_free(&r);
    p.bootstrap = 0;
    ac_eval_report none;
    assert_int_equal(ac_eval_run(f->student, f->teacher, NULL, &p, &none), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "bootstrap"));
}

/* ---- the windows' scores and the paired comparison ---- */

/* FNV-1a-64 over the scored windows' ids, 4 little-endian bytes each (eval.h's rule). */
static uint64_t windows_hash_here(const int32_t *stream, int windows, int T)
{
    uint64_t h = 1469598103934665603ULL;
    for (int w = 0; w < windows; w++)
        for (int i = 0; i <= T; i++)
            for (int b = 0; b < 4; b++)
                h = (h ^ (((uint32_t)stream[w * T + i] >> (8 * b)) & 0xff)) * 1099511628211ULL;
    return h;
}

static cJSON *read_json(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    assert_true(len < sizeof text - 1);
    text[len] = '\0';
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    return root;
}

/* Scores `student` on every window of the fixture's val.bin into DIR/name. */
static void score_to(const fixture *f, const ac_model *student, const ac_model *teacher, const ac_eval_params *p,
                     const char *name, ac_eval_report *r)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    assert_int_equal(ac_eval_run(student, teacher, NULL, p, r), AC_OK);
    assert_int_equal(ac_eval_write_json(r, p, path), AC_OK);
}

/* Each window's KD and CE in the report and in eval.json equal one-window scores done
 * here; their mean is the report's mean; the hash is the one of the ids scored. */
static void test_window_scores(void **state)
{
    fixture *f = *state;
    static int32_t ids[LONG_STREAM];
    random_stream(ids, LONG_STREAM, 12);
    write_shard(f->data, "val.bin", V, ids, LONG_STREAM);
    ac_eval_params p = small_params(f);
    p.batches = 0;
    ac_eval_report r;
    score_to(f, f->student, f->teacher, &p, "a.json", &r);
    assert_int_equal(r.windows, WINDOWS);
    assert_true(r.windows_hash == windows_hash_here(ids, WINDOWS, 8));
    char path[256];
    snprintf(path, sizeof path, "%s/a.json", f->dir);
    cJSON *root = read_json(path);
    const cJSON *kd = cJSON_GetObjectItem(root, "window_kd"), *ce = cJSON_GetObjectItem(root, "window_ce");
    assert_int_equal(cJSON_GetArraySize(kd), WINDOWS);
    assert_int_equal(cJSON_GetArraySize(ce), WINDOWS);
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)windows_hash_here(ids, WINDOWS, 8));
    assert_string_equal(cJSON_GetObjectItem(root, "windows_hash")->valuestring, hash);
    double kd_sum = 0.0, ce_sum = 0.0;
    for (int w = 0; w < WINDOWS; w++) {
        sums one = score_here(f->student, f->teacher, ids + w * 8, 1, 2, 8, 1.0);
        assert_true(close_rel(r.window_kd[w], one.kd / 8, 1e-5));
        assert_true(close_rel(r.window_ce[w], one.ce / 8, 1e-6));
        /* 8 significant digits in the file: within half a unit of the 8th */
        assert_true(close_rel(cJSON_GetArrayItem(kd, w)->valuedouble, r.window_kd[w], 5e-8));
        assert_true(close_rel(cJSON_GetArrayItem(ce, w)->valuedouble, r.window_ce[w], 5e-8));
        kd_sum += r.window_kd[w];
        ce_sum += r.window_ce[w];
    }
    assert_true(close_rel(kd_sum / WINDOWS, r.kd_loss, 1e-12));
    /* the report's CE is the training step's (float), the windows' a log-softmax in double */
    assert_true(close_rel(ce_sum / WINDOWS, r.ce, 1e-6));
    cJSON_Delete(root);
    ac_eval_report_free(&r);
}

/* Compares DIR/a with DIR/b; a refusal over what they scored (MISMATCH) names both. */
enum { ACCEPTED, ONE_FILE, MISMATCH };

static void compare_files(const fixture *f, const char *a, const char *b, ac_status want, int kind,
                          ac_eval_comparison *c)
{
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/%s", f->dir, a);
    snprintf(pb, sizeof pb, "%s/%s", f->dir, b);
    assert_int_equal(ac_eval_compare(pa, pb, 1000, c), want);
    if (want != AC_OK)
        printf("  refused: %s\n", ac_error_message());
    if (kind == MISMATCH) {
        assert_non_null(strstr(ac_error_message(), pa));
        assert_non_null(strstr(ac_error_message(), pb));
    }
}

/* Two students on the same 60 windows: the mean paired difference is the difference of
 * the reports' means and of the means of differences of one-window scores done here,
 * its interval contains it and agrees with the normal interval of those differences,
 * and swapping the files negates everything. */
static void test_paired_comparison(void **state)
{
    fixture *f = *state;
    static int32_t ids[LONG_STREAM];
    random_stream(ids, LONG_STREAM, 13);
    write_shard(f->data, "val.bin", V, ids, LONG_STREAM);
    ac_model *other = tiny_model(V, 6, 0.3f);
    ac_eval_params p = small_params(f);
    p.batches = 0;
    p.batch = 4; /* the batch size does not change the windows */
    ac_eval_report ra, rb;
    score_to(f, f->student, f->teacher, &p, "a.json", &ra);
    p.batch = 3;
    score_to(f, other, f->teacher, &p, "b.json", &rb);
    double kd_d[WINDOWS], ce_d[WINDOWS];
    for (int w = 0; w < WINDOWS; w++) {
        sums a = score_here(f->student, f->teacher, ids + w * 8, 1, 1, 8, 1.0);
        sums b = score_here(other, f->teacher, ids + w * 8, 1, 1, 8, 1.0);
        kd_d[w] = (b.kd - a.kd) / 8;
        ce_d[w] = (b.ce - a.ce) / 8;
    }
    double kd_mean, kd_half, ce_mean, ce_half;
    normal_interval(kd_d, WINDOWS, &kd_mean, &kd_half);
    normal_interval(ce_d, WINDOWS, &ce_mean, &ce_half);
    ac_eval_comparison c, swapped;
    compare_files(f, "a.json", "b.json", AC_OK, ACCEPTED, &c);
    printf("  b - a: kd %.6f [%.6f, %.6f] (here %.6f +- %.6f), ce %.6f [%.6f, %.6f] (here %.6f +- %.6f)\n", c.kd_diff,
           c.kd_lo, c.kd_hi, kd_mean, kd_half, c.ce_diff, c.ce_lo, c.ce_hi, ce_mean, ce_half);
    assert_int_equal(c.windows, WINDOWS);
    assert_true(fabs(kd_mean) > 2 * kd_half); /* the students do differ */
    assert_true(fabs(c.kd_diff - (rb.kd_loss - ra.kd_loss)) < 1e-7);
    assert_true(fabs(c.ce_diff - (rb.ce - ra.ce)) < 1e-6);
    assert_true(fabs(c.kd_diff - kd_mean) < 1e-5 * fabs(kd_mean));
    assert_true(fabs(c.ce_diff - ce_mean) < 1e-6 * fabs(ce_mean) + 1e-7);
    assert_true(c.kd_lo <= c.kd_diff && c.kd_diff <= c.kd_hi && c.ce_lo <= c.ce_diff && c.ce_diff <= c.ce_hi);
    assert_true(fabs(c.kd_lo - (kd_mean - kd_half)) < 0.25 * kd_half);
    assert_true(fabs(c.kd_hi - (kd_mean + kd_half)) < 0.25 * kd_half);
    assert_true(fabs(c.ce_lo - (ce_mean - ce_half)) < 0.25 * ce_half);
    assert_true(fabs(c.ce_hi - (ce_mean + ce_half)) < 0.25 * ce_half);
    compare_files(f, "b.json", "a.json", AC_OK, ACCEPTED, &swapped);
    assert_true(swapped.kd_diff == -c.kd_diff && swapped.ce_diff == -c.ce_diff);
    assert_true(fabs(swapped.kd_lo + c.kd_hi) < 1e-12 && fabs(swapped.kd_hi + c.kd_lo) < 1e-12);
    assert_true(fabs(swapped.ce_lo + c.ce_hi) < 1e-12 && fabs(swapped.ce_hi + c.ce_lo) < 1e-12);
    assert_true(swapped.a_kd == c.b_kd && swapped.b_ce == c.a_ce);

    /* refused: fewer windows, other ids, another teacher, another seq_len */
    ac_eval_report r;
    p.batches = 2;
    score_to(f, other, f->teacher, &p, "fewer.json", &r);
    ac_eval_report_free(&r);
    compare_files(f, "a.json", "fewer.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "60 windows against 6"));
    p.batches = 0;
    ids[100] = (ids[100] + 1) % V;
    write_shard(f->data, "val.bin", V, ids, LONG_STREAM);
    score_to(f, other, f->teacher, &p, "ids.json", &r);
    ac_eval_report_free(&r);
    compare_files(f, "a.json", "ids.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "windows_hash"));
    ids[100] = (ids[100] + V - 1) % V;
    write_shard(f->data, "val.bin", V, ids, LONG_STREAM);
    score_to(f, other, other, &p, "teacher.json", &r);
    ac_eval_report_free(&r);
    compare_files(f, "a.json", "teacher.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "different teachers"));
    p.seq_len = 6;
    score_to(f, other, f->teacher, &p, "seq.json", &r);
    ac_eval_report_free(&r);
    compare_files(f, "a.json", "seq.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "seq_len 8 against 6"));
    /* the same files again: still the first comparison */
    compare_files(f, "b.json", "a.json", AC_OK, ACCEPTED, &c);
    assert_true(c.kd_diff == swapped.kd_diff && c.kd_lo == swapped.kd_lo);
    ac_eval_report_free(&ra);
    ac_eval_report_free(&rb);
    ac_model_free(other);
}

/* A file written here with 4 windows of seq_len 16; `extra` comes first, so a key there
 * is the one read (cJSON takes a name's first value). */
static void write_scores(const fixture *f, const char *name, const char *extra, const char *kd, const char *ce)
{
    char path[256], text[1024];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    snprintf(text, sizeof text,
             "{%s \"kd_loss\": 0, \"ce\": 0, \"windows\": 4, \"seq_len\": 16, \"kd_tau\": 1, \"teacher_ce\": 3.5, "
             "\"window_kd\": [%s], \"window_ce\": [%s]}",
             extra, kd, ce);
    write_text(path, text);
}

/* Windows worked by hand: b is a plus 0.5 everywhere (the interval is that point), or
 * differs by 1, 0, 2, 0 (mean 0.75, the interval within [0, 2]); files that differ in
 * what they score, or lack the scores, are refused naming both. */
static void test_comparison_by_hand(void **state)
{
    fixture *f = *state;
    const char *hash = "\"windows_hash\": \"00000000000000ab\",";
    write_scores(f, "a.json", hash, "1, 2, 3, 4", "4, 4, 5, 5");
    write_scores(f, "b.json", hash, "1.5, 2.5, 3.5, 4.5", "5, 4, 7, 5");
    ac_eval_comparison c;
    compare_files(f, "a.json", "b.json", AC_OK, ACCEPTED, &c);
    assert_true(c.kd_diff == 0.5 && c.kd_lo == 0.5 && c.kd_hi == 0.5);
    assert_true(c.ce_diff == 0.75 && c.ce_lo >= 0 && c.ce_lo < 0.75 && c.ce_hi > 0.75 && c.ce_hi <= 2);

    write_scores(f, "c.json", "\"windows_hash\": \"00000000000000ac\",", "1, 2, 3, 4", "4, 4, 5, 5");
    compare_files(f, "a.json", "c.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "00000000000000ab against 00000000000000ac"));
    write_scores(f, "c.json", "\"windows_hash\": \"00000000000000ab\", \"kd_tau\": 2,", "1, 2, 3, 4", "4, 4, 5, 5");
    compare_files(f, "a.json", "c.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "temperatures: 1 against 2"));
    write_scores(f, "c.json", "\"windows_hash\": \"00000000000000ab\", \"teacher_ce\": 3.6,", "1, 2, 3, 4",
                 "4, 4, 5, 5");
    compare_files(f, "a.json", "c.json", AC_ERR_INVALID, MISMATCH, &c);
    assert_non_null(strstr(ac_error_message(), "different teachers"));
    write_scores(f, "c.json", hash, "1, 2, 3", "4, 4, 5, 5");
    compare_files(f, "a.json", "c.json", AC_ERR_INVALID, ONE_FILE, &c);
    assert_non_null(strstr(ac_error_message(), "'window_kd' should be an array of its 4 windows' scores"));
    write_scores(f, "c.json", "", "1, 2, 3, 4", "4, 4, 5, 5");
    compare_files(f, "c.json", "a.json", AC_ERR_INVALID, ONE_FILE, &c);
    assert_non_null(strstr(ac_error_message(), "without window scores"));
    compare_files(f, "a.json", "none.json", AC_ERR_IO, ONE_FILE, &c);
}

static void expect_error(const fixture *f, const ac_model *student, const ac_eval_params *p, ac_status code,
                         const char *needle)
{
    ac_eval_report r;
    assert_int_equal(ac_eval_run(student, f->teacher, NULL, p, &r), code);
    printf("  refused: %s\n", ac_error_message());
    assert_non_null(strstr(ac_error_message(), needle));
}

static void test_bad_inputs(void **state)
{
    fixture *f = *state;
    ac_eval_params p = small_params(f);
    expect_error(f, f->student, &p, AC_ERR_IO, "val.bin");

    int32_t ids[STREAM];
    random_stream(ids, STREAM, 11);
    write_shard(f->data, "val.bin", V, ids, STREAM);
    ac_model *wide = tiny_model(V + 1, 5, 0.4f);
    expect_error(f, wide, &p, AC_ERR_INVALID, "vocabulary (13) differs from the teacher's (12)");
    ac_model_free(wide);

    write_shard(f->data, "val.bin", V + 5, ids, STREAM);
    expect_error(f, f->student, &p, AC_ERR_INVALID, "token vocabulary 17 is larger");
    write_shard(f->data, "val.bin", V, ids, 8);
    expect_error(f, f->student, &p, AC_ERR_INVALID, "too few for one window");

    write_shard(f->data, "val.bin", V, ids, STREAM);
    p.kd_tau = 0.0f;
    expect_error(f, f->student, &p, AC_ERR_INVALID, "temperature");
    p = small_params(f);
    p.batch = 0;
    expect_error(f, f->student, &p, AC_ERR_INVALID, "batch");
    p = small_params(f);
    p.code_lines = 3;
    p.tokenizer_path = "/nonexistent/tokenizer.json";
    expect_error(f, f->student, &p, AC_ERR_IO, "/nonexistent/tokenizer.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_teacher_against_itself, setup, teardown),
        cmocka_unit_test_setup_teardown(test_student_against_teacher, setup, teardown),
        cmocka_unit_test_setup_teardown(test_line_selection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_always_newline_matches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bigram_model_matches_abc_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completions_match_a_brute_force_recompute, setup, teardown),
        cmocka_unit_test_setup_teardown(test_code_lines_from_the_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_on_a_device_equals_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_windows_with_intervals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_scores, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paired_comparison, setup, teardown),
        cmocka_unit_test_setup_teardown(test_comparison_by_hand, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
