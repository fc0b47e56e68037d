/* Cost tables in memory and as JSON. */
#include "cost/cost_internal.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLES_FORMAT "autocompress-cost-tables"
enum { TABLES_VERSION = 1 };

struct ac_cost_tables {
    ac_cost_tables_info info;
    ac_cost_row *rows;
    size_t n_rows, cap_rows;
    ac_memory_point *memory;
    size_t n_memory, cap_memory;
};

static const char *const row_kind_names[AC_ROW_COUNT] = {"mamba", "attention", "mlp", "moe",
                                                        "embedding", "lm_head", "sample", "other"};

const char *ac_row_kind_name(ac_row_kind kind)
{
    return kind >= 0 && kind < AC_ROW_COUNT ? row_kind_names[kind] : "?";
}

int ac_workload_decode_steps(const ac_contract_workload *w)
{
    return w->output_tokens > 1 ? (int)(w->output_tokens - 1) : 0;
}

double ac_workload_context_sum(const ac_contract_workload *w)
{
    double n = ac_workload_decode_steps(w), c0 = (double)(w->cached_tokens + w->input_tokens);
    /* contexts c0, c0 + 1, ..., c0 + n - 1 */
    return n * c0 + n * (n - 1) / 2;
}

double ac_cost_row_workload_us(const ac_cost_row *row, const ac_contract_workload *w)
{
    return row->prefill_us + ac_workload_decode_steps(w) * row->decode_a_us + row->decode_b_us * ac_workload_context_sum(w);
}

int ac_row_same_key(const ac_cost_row *a, const ac_cost_row *b)
{
    if (a->kind != b->kind || a->hidden != b->hidden)
        return 0;
    switch (a->kind) {
    case AC_ROW_MAMBA: return a->heads == b->heads;
    case AC_ROW_MLP: return a->ffn == b->ffn;
    case AC_ROW_MOE: return a->experts == b->experts && a->expert_ffn == b->expert_ffn && a->shared_ffn == b->shared_ffn;
    default: return 1;
    }
}

ac_status ac_cost_tables_create(const ac_cost_tables_info *info, ac_cost_tables **tables)
{
    ac_cost_tables *t = calloc(1, sizeof *t);
    if (!t)
        return ac_fail(AC_ERR_NOMEM, "cost tables: out of memory");
    if (info)
        t->info = *info;
    *tables = t;
    return AC_OK;
}

void ac_cost_tables_free(ac_cost_tables *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_rows; i++)
        free(t->rows[i].step_us);
    free(t->rows);
    free(t->memory);
    free(t);
}

const ac_cost_tables_info *ac_cost_tables_get_info(const ac_cost_tables *t) { return &t->info; }
void ac_cost_tables_set_info(ac_cost_tables *t, const ac_cost_tables_info *info) { t->info = *info; }
size_t ac_cost_tables_row_count(const ac_cost_tables *t) { return t->n_rows; }
const ac_cost_row *ac_cost_tables_row(const ac_cost_tables *t, size_t i) { return i < t->n_rows ? &t->rows[i] : NULL; }
size_t ac_cost_tables_memory_count(const ac_cost_tables *t) { return t->n_memory; }
const ac_memory_point *ac_cost_tables_memory(const ac_cost_tables *t, size_t i)
{
    return i < t->n_memory ? &t->memory[i] : NULL;
}

const ac_cost_row *ac_cost_tables_find(const ac_cost_tables *t, const ac_cost_row *key)
{
    for (size_t i = 0; i < t->n_rows; i++)
        if (ac_row_same_key(&t->rows[i], key))
            return &t->rows[i];
    return NULL;
}

ac_status ac_cost_tables_add_row(ac_cost_tables *t, const ac_cost_row *row)
{
    if (row->kind < 0 || row->kind >= AC_ROW_COUNT)
        return ac_fail(AC_ERR_INVALID, "cost tables: row kind %d is not a row kind", (int)row->kind);
    if (row->n_steps < 0 || (row->n_steps > 0 && !row->step_us))
        return ac_fail(AC_ERR_INVALID, "cost tables: row with %d steps but no step times", row->n_steps);
    double *steps = NULL;
    if (row->n_steps > 0) {
        steps = malloc((size_t)row->n_steps * sizeof *steps);
        if (!steps)
            return ac_fail(AC_ERR_NOMEM, "cost tables: out of memory");
        memcpy(steps, row->step_us, (size_t)row->n_steps * sizeof *steps);
    }
    ac_cost_row copy = *row;
    copy.step_us = steps;
    for (size_t i = 0; i < t->n_rows; i++)
        if (ac_row_same_key(&t->rows[i], row)) {
            free(t->rows[i].step_us);
            t->rows[i] = copy;
            return AC_OK;
        }
    if (t->n_rows == t->cap_rows) {
        size_t cap = t->cap_rows ? 2 * t->cap_rows : 64;
        ac_cost_row *grown = realloc(t->rows, cap * sizeof *grown);
        if (!grown) {
            free(steps);
            return ac_fail(AC_ERR_NOMEM, "cost tables: out of memory for %zu rows", cap);
        }
        t->rows = grown;
        t->cap_rows = cap;
    }
    t->rows[t->n_rows++] = copy;
    return AC_OK;
}

ac_status ac_cost_tables_add_memory(ac_cost_tables *t, const ac_memory_point *p)
{
    if (t->n_memory == t->cap_memory) {
        size_t cap = t->cap_memory ? 2 * t->cap_memory : 16;
        ac_memory_point *grown = realloc(t->memory, cap * sizeof *grown);
        if (!grown)
            return ac_fail(AC_ERR_NOMEM, "cost tables: out of memory");
        t->memory = grown;
        t->cap_memory = cap;
    }
    t->memory[t->n_memory++] = *p;
    return AC_OK;
}

/* ---- writing ---- */

static int add_number(cJSON *o, const char *key, double v) { return cJSON_AddNumberToObject(o, key, v) != NULL; }

static cJSON *row_json(const ac_cost_row *r)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "kind", ac_row_kind_name(r->kind)) && add_number(o, "hidden", r->hidden);
    switch (r->kind) {
    case AC_ROW_MAMBA: ok = ok && add_number(o, "heads", r->heads); break;
    case AC_ROW_MLP: ok = ok && add_number(o, "ffn", r->ffn); break;
    case AC_ROW_MOE:
        ok = ok && add_number(o, "experts", r->experts) && add_number(o, "expert_ffn", r->expert_ffn) &&
             add_number(o, "shared_ffn", r->shared_ffn);
        break;
    default: break;
    }
    ok = ok && add_number(o, "samples", r->samples);
    cJSON *pre = ok ? cJSON_AddObjectToObject(o, "prefill") : NULL;
    ok = pre && add_number(pre, "median_us", r->prefill_us) && add_number(pre, "spread_us", r->prefill_spread_us);
    cJSON *dec = ok ? cJSON_AddObjectToObject(o, "decode") : NULL;
    ok = dec && add_number(dec, "a_us", r->decode_a_us) && add_number(dec, "b_us", r->decode_b_us) &&
         add_number(dec, "spread_us", r->decode_spread_us);
    cJSON *steps = ok ? cJSON_AddArrayToObject(dec, "step_median_us") : NULL;
    ok = steps != NULL;
    for (int i = 0; ok && i < r->n_steps; i++) {
        /* microseconds to 0.01 us are plenty and keep the file small */
        cJSON *n = cJSON_CreateNumber(round(r->step_us[i] * 100.0) / 100.0);
        ok = n && cJSON_AddItemToArray(steps, n);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int fingerprint_json(cJSON *o, const ac_cost_fingerprint *f)
{
    cJSON *fp = cJSON_AddObjectToObject(o, "fingerprint");
    return fp && cJSON_AddStringToObject(fp, "version", f->version) && add_number(fp, "method", f->method) &&
           cJSON_AddStringToObject(fp, "device", f->device) &&
           cJSON_AddStringToObject(fp, "cpu_model", f->cpu_model) && cJSON_AddStringToObject(fp, "cpu_isa", f->cpu_isa) &&
           cJSON_AddStringToObject(fp, "blas_core", f->blas_core) && add_number(fp, "threads", f->threads) &&
           cJSON_AddStringToObject(fp, "weights", ac_weights_dtype_name(f->weights)) &&
           cJSON_AddStringToObject(fp, "gpu_name", f->gpu_name) && add_number(fp, "gpu_memory_bytes", f->gpu_memory_bytes) &&
           cJSON_AddStringToObject(fp, "gpu_driver", f->gpu_driver) &&
           cJSON_AddStringToObject(fp, "gpu_capability", f->gpu_capability);
}

static cJSON *tables_json(const ac_cost_tables *t)
{
    const ac_cost_tables_info *in = &t->info;
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "format", TABLES_FORMAT) && add_number(o, "version", TABLES_VERSION) &&
             cJSON_AddStringToObject(o, "contract", in->contract) && cJSON_AddStringToObject(o, "device", in->device) &&
             cJSON_AddStringToObject(o, "weights", ac_weights_dtype_name(in->weights));
    if (ok && in->has_fingerprint)
        ok = fingerprint_json(o, &in->fingerprint);
    cJSON *w = ok ? cJSON_AddObjectToObject(o, "workload") : NULL;
    ok = w && add_number(w, "batch", in->workload.batch) && add_number(w, "cached_tokens", (double)in->workload.cached_tokens) &&
         add_number(w, "input_tokens", (double)in->workload.input_tokens) &&
         add_number(w, "output_tokens", (double)in->workload.output_tokens);
    ok = ok && add_number(o, "threads", in->threads) && add_number(o, "repeats", in->repeats) &&
         add_number(o, "runs", in->runs) && add_number(o, "layers_per_run", in->layers_per_run) &&
         add_number(o, "seconds", in->seconds) && add_number(o, "reference_ms", in->reference_ms) &&
         add_number(o, "reference_slope", in->reference_slope) &&
         cJSON_AddStringToObject(o, "decode_model",
                                 "step_us = a_us + b_us * context, context = tokens in the cache before the step");
    cJSON *mem = ok ? cJSON_AddObjectToObject(o, "memory") : NULL;
    ok = mem && add_number(mem, "eps_bytes", in->eps_bytes) && add_number(mem, "eps_spread_bytes", in->eps_spread_bytes);
    cJSON *runs = ok ? cJSON_AddArrayToObject(mem, "runs") : NULL;
    ok = runs != NULL;
    for (size_t i = 0; ok && i < t->n_memory; i++) {
        const ac_memory_point *p = &t->memory[i];
        cJSON *r = cJSON_CreateObject();
        ok = r && cJSON_AddItemToArray(runs, r) && add_number(r, "hidden", p->hidden) &&
             add_number(r, "measured", p->measured) &&
             add_number(r, "weights", p->weights) && add_number(r, "kv", p->kv) && add_number(r, "state", p->state) &&
             add_number(r, "activations", p->activations);
    }
    cJSON *rows = ok ? cJSON_AddArrayToObject(o, "rows") : NULL;
    ok = rows != NULL;
    for (size_t i = 0; ok && i < t->n_rows; i++) {
        cJSON *r = row_json(&t->rows[i]);
        ok = r && cJSON_AddItemToArray(rows, r);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

ac_status ac_cost_tables_write(const ac_cost_tables *t, const char *path)
{
    cJSON *o = tables_json(t);
    ac_status st = o ? ac_write_json_file(path, o) : ac_fail(AC_ERR_NOMEM, "%s: out of memory formatting the tables", path);
    cJSON_Delete(o);
    return st;
}

/* ---- reading ---- */

typedef struct {
    const char *path;
    ac_status st;
} reader;

static double get_number(reader *r, const cJSON *o, const char *key, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st != AC_OK)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s%s%s must be a number, got %s", r->path, where, *where ? "." : "", key,
                        ac_json_type_name(v));
        return 0;
    }
    return v->valuedouble;
}

static int get_int(reader *r, const cJSON *o, const char *key, const char *where, double min)
{
    double v = get_number(r, o, key, where);
    if (r->st == AC_OK && (v != floor(v) || v < min || v > 2147483647.0))
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s%s%s must be an integer >= %g, got %g", r->path, where, *where ? "." : "",
                        key, min, v);
    return r->st == AC_OK ? (int)v : 0;
}

static const cJSON *get_object(reader *r, const cJSON *o, const char *key, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st == AC_OK && !cJSON_IsObject(v))
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s%s%s must be an object, got %s", r->path, where, *where ? "." : "", key,
                        ac_json_type_name(v));
    return r->st == AC_OK ? v : NULL;
}

static const cJSON *get_array(reader *r, const cJSON *o, const char *key, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st == AC_OK && !cJSON_IsArray(v))
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s%s%s must be an array, got %s", r->path, where, *where ? "." : "", key,
                        ac_json_type_name(v));
    return r->st == AC_OK ? v : NULL;
}

static void copy_string(reader *r, const cJSON *o, const char *key, char *dst, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (r->st != AC_OK)
        return;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size) {
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s must be a string of fewer than %zu bytes", r->path, key, size);
        return;
    }
    snprintf(dst, size, "%s", v->valuestring);
}

static void read_fingerprint(reader *r, const cJSON *o, ac_cost_fingerprint *f)
{
    copy_string(r, o, "version", f->version, sizeof f->version);
    f->method = cJSON_GetObjectItemCaseSensitive(o, "method") ? get_int(r, o, "method", "fingerprint", 1) : 1;
    copy_string(r, o, "device", f->device, sizeof f->device);
    copy_string(r, o, "cpu_model", f->cpu_model, sizeof f->cpu_model);
    copy_string(r, o, "cpu_isa", f->cpu_isa, sizeof f->cpu_isa);
    copy_string(r, o, "blas_core", f->blas_core, sizeof f->blas_core);
    f->threads = get_int(r, o, "threads", "fingerprint", 1);
    char weights[8] = "";
    copy_string(r, o, "weights", weights, sizeof weights);
    if (r->st == AC_OK && ac_weights_dtype_parse("weights", weights, &f->weights) != AC_OK)
        r->st = ac_fail(AC_ERR_INVALID, "%s: fingerprint.weights must be \"f32\" or \"bf16\", got \"%s\"", r->path,
                        weights);
    copy_string(r, o, "gpu_name", f->gpu_name, sizeof f->gpu_name);
    f->gpu_memory_bytes = get_number(r, o, "gpu_memory_bytes", "fingerprint");
    copy_string(r, o, "gpu_driver", f->gpu_driver, sizeof f->gpu_driver);
    copy_string(r, o, "gpu_capability", f->gpu_capability, sizeof f->gpu_capability);
}

static void read_row(reader *r, const cJSON *o, int index, ac_cost_tables *t)
{
    char where[32];
    snprintf(where, sizeof where, "rows[%d]", index);
    if (!cJSON_IsObject(o)) {
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s must be an object", r->path, where);
        return;
    }
    ac_cost_row row;
    memset(&row, 0, sizeof row);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    int k = -1;
    for (int i = 0; cJSON_IsString(kind) && i < AC_ROW_COUNT; i++)
        if (!strcmp(kind->valuestring, row_kind_names[i]))
            k = i;
    if (k < 0) {
        r->st = ac_fail(AC_ERR_INVALID, "%s: %s.kind must be one of mamba, attention, mlp, moe, embedding, lm_head, "
                                        "sample, other", r->path, where);
        return;
    }
    row.kind = (ac_row_kind)k;
    row.hidden = get_int(r, o, "hidden", where, 1);
    if (row.kind == AC_ROW_MAMBA)
        row.heads = get_int(r, o, "heads", where, 1);
    if (row.kind == AC_ROW_MLP)
        row.ffn = get_int(r, o, "ffn", where, 1);
    if (row.kind == AC_ROW_MOE) {
        row.experts = get_int(r, o, "experts", where, 1);
        row.expert_ffn = get_int(r, o, "expert_ffn", where, 1);
        row.shared_ffn = get_int(r, o, "shared_ffn", where, 0);
    }
    row.samples = get_int(r, o, "samples", where, 0);
    char sub[48];
    snprintf(sub, sizeof sub, "%s.prefill", where);
    const cJSON *pre = get_object(r, o, "prefill", where);
    row.prefill_us = get_number(r, pre, "median_us", sub);
    row.prefill_spread_us = get_number(r, pre, "spread_us", sub);
    snprintf(sub, sizeof sub, "%s.decode", where);
    const cJSON *dec = get_object(r, o, "decode", where);
    row.decode_a_us = get_number(r, dec, "a_us", sub);
    row.decode_b_us = get_number(r, dec, "b_us", sub);
    row.decode_spread_us = get_number(r, dec, "spread_us", sub);
    const cJSON *steps = get_array(r, dec, "step_median_us", sub);
    if (r->st != AC_OK)
        return;
    row.n_steps = cJSON_GetArraySize(steps);
    double *buf = row.n_steps ? malloc((size_t)row.n_steps * sizeof *buf) : NULL;
    if (row.n_steps && !buf) {
        r->st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", r->path);
        return;
    }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, steps)
    {
        if (!cJSON_IsNumber(v)) {
            r->st = ac_fail(AC_ERR_INVALID, "%s: %s.step_median_us[%d] must be a number", r->path, sub, i);
            break;
        }
        buf[i++] = v->valuedouble;
    }
    row.step_us = buf;
    if (r->st == AC_OK) {
        if (ac_cost_tables_find(t, &row))
            r->st = ac_fail(AC_ERR_INVALID, "%s: %s repeats the key of an earlier row", r->path, where);
        else
            r->st = ac_cost_tables_add_row(t, &row);
    }
    free(buf);
}

static void read_tables(reader *r, const cJSON *o, ac_cost_tables *t)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, TABLES_FORMAT)) {
        r->st = ac_fail(AC_ERR_INVALID, "%s: format must be \"%s\" (not cost tables?)", r->path, TABLES_FORMAT);
        return;
    }
    if (get_int(r, o, "version", "", 1) != TABLES_VERSION && r->st == AC_OK)
        r->st = ac_fail(AC_ERR_UNSUPPORTED, "%s: version must be %d", r->path, TABLES_VERSION);
    ac_cost_tables_info *in = &t->info;
    copy_string(r, o, "contract", in->contract, sizeof in->contract);
    copy_string(r, o, "device", in->device, sizeof in->device);
    in->weights = AC_DTYPE_F32; /* tables written before bf16 serving */
    if (cJSON_GetObjectItemCaseSensitive(o, "weights")) {
        char weights[8];
        copy_string(r, o, "weights", weights, sizeof weights);
        if (r->st == AC_OK && ac_weights_dtype_parse("weights", weights, &in->weights) != AC_OK)
            r->st = ac_fail(AC_ERR_INVALID, "%s: weights must be \"f32\" or \"bf16\", got \"%s\"", r->path, weights);
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "fingerprint")) {
        in->has_fingerprint = 1;
        read_fingerprint(r, get_object(r, o, "fingerprint", ""), &in->fingerprint);
    }
    const cJSON *w = get_object(r, o, "workload", "");
    in->workload.batch = get_int(r, w, "batch", "workload", 1);
    in->workload.cached_tokens = get_int(r, w, "cached_tokens", "workload", 0);
    in->workload.input_tokens = get_int(r, w, "input_tokens", "workload", 1);
    in->workload.output_tokens = get_int(r, w, "output_tokens", "workload", 0);
    in->threads = get_int(r, o, "threads", "", 1);
    in->repeats = get_int(r, o, "repeats", "", 0);
    in->runs = get_int(r, o, "runs", "", 0);
    in->layers_per_run = get_int(r, o, "layers_per_run", "", 0);
    in->seconds = get_number(r, o, "seconds", "");
    if (cJSON_GetObjectItemCaseSensitive(o, "reference_ms"))
        in->reference_ms = get_number(r, o, "reference_ms", "");
    in->reference_slope = 1.0; /* tables written before the slope was measured */
    if (cJSON_GetObjectItemCaseSensitive(o, "reference_slope"))
        in->reference_slope = get_number(r, o, "reference_slope", "");
    const cJSON *mem = get_object(r, o, "memory", "");
    in->eps_bytes = get_number(r, mem, "eps_bytes", "memory");
    in->eps_spread_bytes = get_number(r, mem, "eps_spread_bytes", "memory");
    const cJSON *runs = get_array(r, mem, "runs", "memory");
    int i = 0;
    const cJSON *v;
    if (r->st == AC_OK)
        cJSON_ArrayForEach(v, runs)
        {
            char where[40];
            snprintf(where, sizeof where, "memory.runs[%d]", i++);
            ac_memory_point p = {get_int(r, v, "hidden", where, 1), get_number(r, v, "measured", where),
                                 get_number(r, v, "weights", where), get_number(r, v, "kv", where),
                                 get_number(r, v, "state", where), get_number(r, v, "activations", where)};
            if (r->st != AC_OK)
                return;
            r->st = ac_cost_tables_add_memory(t, &p);
        }
    const cJSON *rows = get_array(r, o, "rows", "");
    i = 0;
    if (r->st == AC_OK)
        cJSON_ArrayForEach(v, rows)
        {
            read_row(r, v, i++, t);
            if (r->st != AC_OK)
                return;
        }
}

ac_status ac_cost_tables_read(const char *path, ac_cost_tables **tables)
{
    *tables = NULL;
    cJSON *o;
    ac_status st = ac_read_json_file(path, (size_t)1 << 30, &o);
    if (st != AC_OK)
        return st;
    ac_cost_tables *t = NULL;
    reader r = {path, ac_cost_tables_create(NULL, &t)};
    if (r.st == AC_OK)
        read_tables(&r, o, t);
    cJSON_Delete(o);
    if (r.st != AC_OK) {
        ac_cost_tables_free(t);
        return r.st;
    }
    *tables = t;
    return AC_OK;
}
