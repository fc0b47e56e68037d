/* Two students' eval.json files compared window by window: the mean paired difference
 * of the KD loss and of the CE with a paired bootstrap interval (autocompress/eval.h). */
#include "autocompress/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/json_util.h"
#include "util/stats.h"

/* a teacher's mean CE on the same windows, computed on another device or batch size,
 * differs by rounding only */
#define TEACHER_CE_RTOL 1e-5

/* What one file says about its windows, and their scores. */
typedef struct {
    const char *path;
    int64_t windows;
    int seq_len;
    double kd_tau, teacher_ce, kd, ce;
    const char *hash;
    double *window_kd, *window_ce;
} scored;

static void scored_free(scored *f)
{
    free(f->window_kd);
    free(f->window_ce);
}

static ac_status read_number(const cJSON *root, const char *path, const char *name, double *v)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return ac_fail(AC_ERR_INVALID, "%s: '%s' should be a finite number, found %s", path, name,
                       ac_json_type_name(item));
    *v = item->valuedouble;
    return AC_OK;
}

static ac_status read_windows(const cJSON *root, const char *path, const char *name, int64_t n, double **out)
{
    const cJSON *array = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!array)
        return ac_fail(AC_ERR_INVALID, "%s: no '%s': an eval.json without window scores (written before they were "
                       "kept); score the model again", path, name);
    if (!cJSON_IsArray(array) || cJSON_GetArraySize(array) != n)
        return ac_fail(AC_ERR_INVALID, "%s: '%s' should be an array of its %lld windows' scores", path, name,
                       (long long)n);
    *out = malloc((size_t)n * sizeof **out);
    if (!*out)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for %lld windows", path, (long long)n);
    int64_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
            return ac_fail(AC_ERR_INVALID, "%s: %s[%lld] should be a finite number, found %s", path, name,
                           (long long)i, ac_json_type_name(item));
        (*out)[i++] = item->valuedouble;
    }
    return AC_OK;
}

static ac_status read_scored(const cJSON *root, scored *f)
{
    double windows = 0, seq_len = 0;
    ac_status st = read_number(root, f->path, "windows", &windows);
    if (st == AC_OK)
        st = read_number(root, f->path, "seq_len", &seq_len);
    if (st == AC_OK && (windows < 1 || windows != floor(windows) || windows > (double)INT32_MAX || seq_len < 1 ||
                        seq_len != floor(seq_len) || seq_len > (double)INT32_MAX))
        st = ac_fail(AC_ERR_INVALID, "%s: 'windows' (%g) and 'seq_len' (%g) should be positive whole numbers", f->path,
                     windows, seq_len);
    f->windows = (int64_t)windows;
    f->seq_len = (int)seq_len;
    const char *names[] = {"kd_tau", "teacher_ce", "kd_loss", "ce"};
    double *values[] = {&f->kd_tau, &f->teacher_ce, &f->kd, &f->ce};
    for (int i = 0; st == AC_OK && i < 4; i++)
        st = read_number(root, f->path, names[i], values[i]);
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "windows_hash");
    if (st == AC_OK && !cJSON_IsString(hash))
        st = ac_fail(AC_ERR_INVALID, "%s: no 'windows_hash': an eval.json without window scores (written before they "
                     "were kept); score the model again", f->path);
    f->hash = st == AC_OK ? hash->valuestring : NULL;
    if (st == AC_OK)
        st = read_windows(root, f->path, "window_kd", f->windows, &f->window_kd);
    if (st == AC_OK)
        st = read_windows(root, f->path, "window_ce", f->windows, &f->window_ce);
    return st;
}

/* The same windows, temperature and teacher; else an error naming both files. */
static ac_status check_same_windows(const scored *a, const scored *b)
{
    if (a->seq_len != b->seq_len)
        return ac_fail(AC_ERR_INVALID, "eval compare: %s and %s were scored on different windows: seq_len %d against "
                       "%d", a->path, b->path, a->seq_len, b->seq_len);
    if (a->windows != b->windows)
        return ac_fail(AC_ERR_INVALID, "eval compare: %s and %s were scored on different windows: %lld windows "
                       "against %lld", a->path, b->path, (long long)a->windows, (long long)b->windows);
    if (strcmp(a->hash, b->hash))
        return ac_fail(AC_ERR_INVALID, "eval compare: %s and %s were scored on different windows: their ids differ "
                       "(windows_hash %s against %s): another val.bin, or another part of it", a->path, b->path,
                       a->hash, b->hash);
    if (a->kd_tau != b->kd_tau)
        return ac_fail(AC_ERR_INVALID, "eval compare: %s and %s use different distillation temperatures: %g "
                       "against %g", a->path, b->path, a->kd_tau, b->kd_tau);
    if (fabs(a->teacher_ce - b->teacher_ce) > TEACHER_CE_RTOL * fabs(a->teacher_ce))
        return ac_fail(AC_ERR_INVALID, "eval compare: %s and %s were scored against different teachers: teacher CE "
                       "%.6f against %.6f on the same windows", a->path, b->path, a->teacher_ce, b->teacher_ce);
    return AC_OK;
}

/* The mean of b - a over the windows, and its bootstrap interval. */
static ac_status paired(const double *a, const double *b, int64_t n, int bootstrap, double *mean, double *lo,
                        double *hi)
{
    double *d = malloc((size_t)n * sizeof *d);
    if (!d)
        return ac_fail(AC_ERR_NOMEM, "eval compare: out of memory for %lld windows", (long long)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = b[i] - a[i];
    *mean = ac_stat_mean(d, (size_t)n);
    /* a fixed seed: every comparison of n windows resamples the same ones */
    ac_status st = ac_stat_bootstrap_mean(d, (size_t)n, bootstrap, 1, 0.95, lo, hi);
    free(d);
    return st;
}

static ac_status compare_scored(const scored *a, const scored *b, int bootstrap, ac_eval_comparison *out)
{
    ac_status st = check_same_windows(a, b);
    if (st != AC_OK)
        return st;
    *out = (ac_eval_comparison){.windows = a->windows, .seq_len = a->seq_len, .a_kd = a->kd, .b_kd = b->kd,
                                .a_ce = a->ce, .b_ce = b->ce};
    st = paired(a->window_kd, b->window_kd, a->windows, bootstrap, &out->kd_diff, &out->kd_lo, &out->kd_hi);
    if (st == AC_OK)
        st = paired(a->window_ce, b->window_ce, a->windows, bootstrap, &out->ce_diff, &out->ce_lo, &out->ce_hi);
    return st;
}

ac_status ac_eval_compare(const char *path_a, const char *path_b, int bootstrap, ac_eval_comparison *out)
{
    *out = (ac_eval_comparison){0};
    if (!path_a || !path_b)
        return ac_fail(AC_ERR_INVALID, "eval compare: two eval.json files are needed");
    if (bootstrap < 1)
        return ac_fail(AC_ERR_INVALID, "eval compare: bootstrap resamples must be positive, got %d", bootstrap);
    cJSON *root_a = NULL, *root_b = NULL;
    scored a = {.path = path_a}, b = {.path = path_b};
    /* a window's two scores take under 40 bytes of JSON: room for tens of millions */
    ac_status st = ac_read_json_file(path_a, (size_t)1 << 30, &root_a);
    if (st == AC_OK)
        st = ac_read_json_file(path_b, (size_t)1 << 30, &root_b);
    if (st == AC_OK)
        st = read_scored(root_a, &a);
    if (st == AC_OK)
        st = read_scored(root_b, &b);
    if (st == AC_OK)
        st = compare_scored(&a, &b, bootstrap, out);
    scored_free(&a);
    scored_free(&b);
    cJSON_Delete(root_a);
    cJSON_Delete(root_b);
    return st;
}

static void add_score(cJSON *root, const char *name, double a, double b, double diff, double lo, double hi)
{
    cJSON *o = cJSON_AddObjectToObject(root, name);
    cJSON_AddNumberToObject(o, "a", a);
    cJSON_AddNumberToObject(o, "b", b);
    cJSON_AddNumberToObject(o, "diff", diff);
    cJSON *ci = cJSON_AddArrayToObject(o, "diff_95");
    cJSON_AddItemToArray(ci, cJSON_CreateNumber(lo));
    cJSON_AddItemToArray(ci, cJSON_CreateNumber(hi));
    cJSON_AddBoolToObject(o, "excludes_0", lo > 0 || hi < 0);
}

ac_status ac_eval_comparison_write_json(const ac_eval_comparison *c, const char *path_a, const char *path_b,
                                        int bootstrap, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for the comparison", path);
    cJSON_AddStringToObject(root, "a", path_a);
    cJSON_AddStringToObject(root, "b", path_b);
    cJSON_AddNumberToObject(root, "windows", (double)c->windows);
    cJSON_AddNumberToObject(root, "seq_len", c->seq_len);
    cJSON_AddNumberToObject(root, "bootstrap", bootstrap);
    add_score(root, "kd_loss", c->a_kd, c->b_kd, c->kd_diff, c->kd_lo, c->kd_hi);
    add_score(root, "ce", c->a_ce, c->b_ce, c->ce_diff, c->ce_lo, c->ce_hi);
    ac_status st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}
