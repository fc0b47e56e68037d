/* Evaluation: the quality of a compressed model (the student) against its parent (the
 * teacher) on held-out tokens, the `eval` stage of the pipeline.
 *
 * Scored positions: windows k = 0, 1, ... of val.bin as ac_tokens_iter gives them
 * (window k is ids [k*seq_len, (k+1)*seq_len], inputs the first seq_len, targets the
 * next ones), taken `batch` at a time for the first `batches` batches, so every model
 * evaluated with the same settings sees the same positions. A last partial batch is
 * scored over its windows only. Both models run forward only (no gradients, no masks).
 *
 * Per position: kd = tau^2 KL(softmax(t/tau) || softmax(s/tau)), the kernel distill
 * optimizes (its mean over positions is distill's loss); ce = -log softmax(s)[target];
 * top-1 agreement when argmax s == argmax t (first index on ties). The report holds the
 * means over all scored positions, and 95% intervals of the KD loss and the CE: percentile
 * bootstrap over the scored windows (every window has seq_len positions, so a mean is
 * the mean of the windows' means), `bootstrap` resamples from a fixed seed. The report
 * keeps each window's mean KD and CE, so two students scored on the same windows can be
 * compared window by window (ac_eval_compare).
 *
 * Next-line exact match (the student only), for code:
 *   - a line start is a position i of val.bin with i >= line_context, where the token
 *     at i - 1 decodes to bytes holding a '\n' followed by nothing but spaces and tabs
 *     (byte-level BPE merges a newline with the next line's indentation: "\n   " then
 *     " return"; that indentation is part of the prompt), and the reference line, the
 *     tokens from i through the first whose bytes hold a '\n', is at most max_line_tokens
 *     tokens, holds no special or unknown token, and has a non-whitespace byte before
 *     that '\n';
 *   - of the C line starts in the stream, min(code_lines, C) are used: line start number
 *     floor(k * C / n) for k = 0 .. n-1, i.e. evenly spaced over the lines, in order;
 *   - the prompt is the line_context tokens before i; the student decodes greedily
 *     (argmax, with a cache) until a generated token's bytes hold a '\n', a special or
 *     unknown token comes, or max_line_tokens tokens were made;
 *   - a line matches when the generated text holds a '\n' and its bytes before the first
 *     one equal the reference's before its first '\n'.
 * Token bytes come from the tokenizer's byte-level decoding, one id at a time. */
#ifndef AUTOCOMPRESS_EVAL_H
#define AUTOCOMPRESS_EVAL_H

#include <stdint.h>

#include "autocompress/model.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *data_dir;       /* val.bin (from `autocompress tokenize`): the held-out tokens */
    int batches, batch, seq_len;/* the first `batches` batches of batch x seq_len (0: every window
                                   of val.bin); defaults 16, 8, 256 */
    float kd_tau;               /* default 1 */
    int bootstrap;              /* resamples of the intervals (default 1000) */
    int code_lines;             /* held-out lines for next-line exact match; 0: none; -1 (the
                                   default): 200 when data_dir/manifest.json says the shards were
                                   made from whole files (document_format "files"), else 0 */
    int line_context;           /* tokens of context before each line (default 128) */
    int max_line_tokens;        /* default 48 */
    const char *tokenizer_path; /* for line matching; NULL: tokenizer.json in student_dir */
    ac_progress_mode progress;  /* on stderr */
} ac_eval_params;

ac_eval_params ac_eval_default_params(void);

typedef struct {
    int64_t tokens;             /* held-out positions scored */
    int64_t windows;            /* in windows of seq_len */
    double kd_loss;             /* mean over positions of tau^2 KL(teacher || student) */
    double ce, ppl;             /* student cross-entropy on the next token (nats) and exp(ce) */
    double kd_lo, kd_hi;        /* 95% bootstrap intervals over the windows */
    double ce_lo, ce_hi;
    double teacher_ce, teacher_ppl;
    double *window_kd;          /* [windows]: each scored window's mean KD and CE, in order */
    double *window_ce;
    uint64_t windows_hash;      /* FNV-1a-64 of the scored windows' ids (seq_len + 1 each) */
    double top1_agreement;      /* fraction of positions where argmax student == argmax teacher */
    int lines;                  /* lines tried (0 when not run, or when val.bin has no line start) */
    double line_exact_match;    /* fraction of lines whose greedy completion equals the held-out line */
    double seconds;
} ac_eval_report;

/* Scores the student against the teacher (same vocabulary) on data_dir/val.bin. The
 * tokenizer is read only when lines are matched. Errors name what is wrong: a missing
 * or malformed val.bin, too few tokens for one window, token ids beyond the models'
 * vocabulary, differing vocabularies, bad settings. On success the report owns its
 * window arrays: free them with ac_eval_report_free (on failure there are none). */
ac_status ac_eval_run(const ac_model *student, const ac_model *teacher, const char *student_dir,
                      const ac_eval_params *params, ac_eval_report *report);
void ac_eval_report_free(ac_eval_report *report);

/* Writes the report and the settings as one JSON object (path.tmp renamed over path);
 * line_exact_match is null when no line was tried. The windows' scores go in as
 * "window_kd" and "window_ce", arrays of 8 significant digits, and "windows_hash" as
 * 16 hex digits. */
ac_status ac_eval_write_json(const ac_eval_report *report, const ac_eval_params *params, const char *path);

/* Two students scored on the same windows, b against a: for the KD loss and the CE,
 * the mean over windows of b's score minus a's (which is b's mean minus a's) and its
 * paired percentile bootstrap 95% interval (`bootstrap` resamples of the windows, the
 * same ones for both scores, from a fixed seed; swapping a and b negates all three). */
typedef struct {
    int64_t windows;
    int seq_len;
    double a_kd, b_kd, a_ce, b_ce;  /* each file's means */
    double kd_diff, kd_lo, kd_hi;   /* b - a */
    double ce_diff, ce_lo, ce_hi;
} ac_eval_comparison;

/* Compares the eval.json files at path_a and path_b (ac_eval_write_json's). Refused,
 * naming both files and what differs: windows not the same (seq_len, count, or the ids,
 * by windows_hash: another val.bin or another part of it), another distillation
 * temperature, another teacher (its mean CE on the windows differs by more than 1e-5
 * relative: the same teacher gives the same CE up to rounding, on any device), or a file
 * without window scores (written before they were kept: score it again). */
ac_status ac_eval_compare(const char *path_a, const char *path_b, int bootstrap, ac_eval_comparison *out);

/* The comparison as JSON: "a" and "b" (the paths), "windows", "seq_len", "bootstrap", and
 * for "kd_loss" and "ce" an object {a, b, diff (b - a), diff_95: [lo, hi], excludes_0}. */
ac_status ac_eval_comparison_write_json(const ac_eval_comparison *c, const char *path_a, const char *path_b,
                                        int bootstrap, const char *path);

#ifdef __cplusplus
}
#endif

#endif
