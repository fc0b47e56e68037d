/* The ranking's files: the candidates read from a search.json, and the table of what
 * each candidate cost and scored (rank.json, rank.md) with the winner's arch.json. */
#include "rank/rank_internal.h"

#include "autocompress/config_json.h"
#include "autocompress/prune.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double MIB = 1024.0 * 1024.0;

void ac_rank_candidates_free(ac_rank_candidate *c, int n)
{
    for (int i = 0; c && i < n; i++) {
        ac_arch_free(&c[i].arch);
        free(c[i].parent_layers);
    }
    free(c);
}

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static void read_costs(const cJSON *o, ac_cost_prediction *p)
{
    memset(p, 0, sizeof *p);
    p->latency_ms = number(o, "latency_ms");
    p->throughput_tok_s = number(o, "throughput_tok_s");
    p->memory_bytes = number(o, "memory_mib") * MIB;
}

static ac_status read_layers(const cJSON *a, const char *where, int n_layers, int **out)
{
    *out = NULL;
    if (!a)
        return AC_OK;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n_layers)
        return ac_fail(AC_ERR_INVALID, "%s.parent_layers must be an array of %d layer indices", where, n_layers);
    *out = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof **out);
    if (!*out)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", where);
    for (int i = 0; i < n_layers; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble)
            return ac_fail(AC_ERR_INVALID, "%s.parent_layers[%d] is not a layer index", where, i);
        (*out)[i] = (int)v->valuedouble;
    }
    return AC_OK;
}

/* One entry of search.json's "candidates": its "config" object (the architecture as in
 * arch.json; or the entry itself as such an object), "parent_layers", "predicted",
 * "log_prob". */
static ac_status read_entry(const cJSON *e, const char *where, ac_rank_candidate *c)
{
    if (!cJSON_IsObject(e))
        return ac_fail(AC_ERR_INVALID, "%s is %s, not an object", where, ac_json_type_name(e));
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(e, "config");
    char *text = cJSON_PrintUnformatted(cJSON_IsObject(arch) ? arch : e);
    if (!text)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", where);
    ac_status st = ac_config_json_parse(text, where, &c->arch);
    free(text);
    if (st == AC_OK)
        st = read_layers(cJSON_GetObjectItemCaseSensitive(e, "parent_layers"), where, c->arch.n_layers,
                         &c->parent_layers);
    read_costs(cJSON_GetObjectItemCaseSensitive(e, "predicted"), &c->predicted);
    c->log_prob = number(e, "log_prob");
    return st;
}

static ac_status read_list(const cJSON *list, const char *search_json, int max, ac_rank_candidate *c, int *n)
{
    ac_status st = AC_OK;
    for (int i = 0; st == AC_OK && i < cJSON_GetArraySize(list) && *n < max; i++) {
        char where[AC_PATH_MAX + 32];
        snprintf(where, sizeof where, "%s: candidates[%d]", search_json, i);
        st = read_entry(cJSON_GetArrayItem(list, i), where, &c[*n]);
        (*n)++;
    }
    return st;
}

/* The search's single choice: arch.json, with search.json's kept layers and prediction. */
static ac_status read_single(const cJSON *root, const char *search_json, const char *arch_json, ac_rank_candidate *c,
                             int *n)
{
    ac_status st = ac_config_json_read(arch_json, &c->arch);
    *n = 1;
    if (st == AC_OK)
        st = ac_prune_read_parent_layers(search_json, c->arch.n_layers, &c->parent_layers);
    read_costs(cJSON_GetObjectItemCaseSensitive(root, "chosen_predicted"), &c->predicted);
    return st;
}

ac_status ac_rank_read_candidates(const char *search_json, const char *arch_json, int max, ac_rank_candidate **out,
                                  int *n)
{
    *out = NULL;
    *n = 0;
    if (max < 1)
        return ac_fail(AC_ERR_INVALID, "rank: at least one candidate must be read, not %d", max);
    cJSON *root = NULL;
    ac_status st = ac_read_json_file(search_json, (size_t)64 << 20, &root);
    if (st != AC_OK)
        return st;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "candidates");
    int have = cJSON_IsArray(list) && cJSON_GetArraySize(list) > 0;
    int cap = have ? (cJSON_GetArraySize(list) < max ? cJSON_GetArraySize(list) : max) : 1;
    ac_rank_candidate *c = calloc((size_t)cap, sizeof *c);
    if (!c)
        st = ac_fail(AC_ERR_NOMEM, "rank: out of memory");
    else if (have)
        st = read_list(list, search_json, cap, c, n);
    else
        st = read_single(root, search_json, arch_json, c, n);
    cJSON_Delete(root);
    if (st != AC_OK) {
        ac_rank_candidates_free(c, *n);
        *n = 0;
        return st;
    }
    *out = c;
    return AC_OK;
}

/* ---- the table ---- */

static cJSON *costs_json(double latency_ms, double throughput_tok_s, double memory_bytes)
{
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddNumberToObject(o, "latency_ms", latency_ms);
        cJSON_AddNumberToObject(o, "throughput_tok_s", throughput_tok_s);
        cJSON_AddNumberToObject(o, "memory_mib", memory_bytes / MIB);
    }
    return o;
}

static const char *verdict(const ac_rank_params *p, const ac_rank_result *r)
{
    return !p->measure ? "not measured" : r->meets ? "meets" : "misses";
}

static cJSON *layers_json(const ac_rank_candidate *c)
{
    cJSON *a = cJSON_CreateArray();
    for (int l = 0; a && l < c->arch.n_layers; l++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c->parent_layers ? c->parent_layers[l] : l));
    return a;
}

static cJSON *candidate_json(const ac_rank_params *p, const ac_rank_candidate *c, const ac_rank_result *r, int i)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "index", i);
    cJSON_AddNumberToObject(o, "parameters", (double)ac_arch_param_counts(&c->arch).total);
    cJSON_AddNumberToObject(o, "hidden", c->arch.hidden);
    cJSON_AddItemToObject(o, "parent_layers", layers_json(c));
    cJSON_AddItemToObject(o, "predicted", costs_json(c->predicted.latency_ms, c->predicted.throughput_tok_s,
                                                     c->predicted.memory_bytes));
    cJSON_AddNumberToObject(o, "log_prob", c->log_prob);
    if (r->measured)
        cJSON_AddItemToObject(o, "measured", costs_json(r->latency_ms, r->throughput_tok_s, r->memory_bytes));
    else
        cJSON_AddNullToObject(o, "measured");
    cJSON_AddStringToObject(o, "verdict", verdict(p, r));
    cJSON_AddBoolToObject(o, "distilled", r->distilled);
    if (r->distilled) {
        cJSON_AddNumberToObject(o, "kd_loss_tail", r->kd_tail);
        cJSON_AddNumberToObject(o, "held_out_kd_loss", r->held_out_kd);
    }
    cJSON_AddNumberToObject(o, "kd_tokens", (double)r->kd_tokens);
    cJSON_AddNumberToObject(o, "score_tokens", (double)r->score_tokens);
    return o;
}

/* Why the winner won, in a sentence. */
static void reason(const ac_rank_params *p, const ac_rank_report *rep, char *buf, size_t size)
{
    if (rep->chosen < 0)
        snprintf(buf, size, "none of the %d candidates met the contract when measured", rep->n);
    else if (rep->survivors == 1 && p->measure)
        snprintf(buf, size, "the only one of the %d candidates that met the contract when measured (no short KD "
                            "needed)", rep->n);
    else if (rep->survivors == 1)
        snprintf(buf, size, "the only candidate (not measured, no short KD needed)");
    else if (p->measure)
        snprintf(buf, size, "the lowest held-out KD loss after a short KD among the %d of %d candidates that met "
                            "the contract when measured", rep->survivors, rep->n);
    else
        snprintf(buf, size, "the lowest held-out KD loss after a short KD among the %d candidates (not measured: "
                            "the cost model's prediction trusted)", rep->n);
}

static ac_status write_json(const ac_rank_candidate *c, const ac_rank_params *p, const ac_rank_report *rep,
                            const char *why)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "rank: out of memory");
    cJSON_AddBoolToObject(root, "measure", p->measure);
    cJSON_AddNumberToObject(root, "sweeps", p->sweeps);
    cJSON_AddNumberToObject(root, "kd_tokens_per_candidate", (double)p->kd_tokens);
    cJSON_AddNumberToObject(root, "score_tokens_per_candidate", (double)ac_rank_score_params(p).batches * p->batch *
                                                                    p->seq_len);
    cJSON_AddNumberToObject(root, "survivors", rep->survivors);
    if (rep->chosen >= 0) {
        cJSON_AddNumberToObject(root, "chosen", rep->chosen);
        cJSON_AddItemToObject(root, "parent_layers", layers_json(&c[rep->chosen]));
    } else {
        cJSON_AddNullToObject(root, "chosen");
    }
    cJSON_AddStringToObject(root, "reason", why);
    cJSON_AddNumberToObject(root, "kd_tokens", (double)rep->kd_tokens);
    cJSON_AddNumberToObject(root, "score_tokens", (double)rep->score_tokens);
    cJSON_AddNumberToObject(root, "tokens", (double)(rep->kd_tokens + rep->score_tokens));
    cJSON *list = cJSON_AddArrayToObject(root, "candidates");
    for (int i = 0; list && i < rep->n; i++)
        cJSON_AddItemToArray(list, candidate_json(p, &c[i], &rep->results[i], i));
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, p->out_dir, "rank.json");
    if (st == AC_OK)
        st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}

static void markdown_row(FILE *f, const ac_rank_params *p, const ac_rank_candidate *c, const ac_rank_result *r, int i,
                         int chosen)
{
    fprintf(f, "| %s%d%s | %lld | %d | %d | %.3f / %.1f / %.2f |", i == chosen ? "**" : "", i, i == chosen ? "**" : "",
            (long long)ac_arch_param_counts(&c->arch).total, c->arch.hidden, c->arch.n_layers,
            c->predicted.latency_ms, c->predicted.throughput_tok_s, c->predicted.memory_bytes / MIB);
    if (r->measured)
        fprintf(f, " %.3f / %.1f / %.2f |", r->latency_ms, r->throughput_tok_s, r->memory_bytes / MIB);
    else
        fprintf(f, " - |");
    fprintf(f, " %s |", verdict(p, r));
    if (r->distilled)
        fprintf(f, " %.4f | %.4f |", r->kd_tail, r->held_out_kd);
    else
        fprintf(f, " - | - |");
    fprintf(f, " %lld |\n", (long long)(r->kd_tokens + r->score_tokens));
}

static ac_status write_markdown(const ac_contract *contract, const ac_rank_candidate *c, const ac_rank_params *p,
                                const ac_rank_report *rep, const char *why)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return ac_fail(AC_ERR_NOMEM, "rank: out of memory");
    fprintf(f, "# Ranking of %d candidates for %s\n\n", rep->n, contract->name);
    if (rep->chosen >= 0)
        fprintf(f, "Chosen: candidate %d, %s.\n\n", rep->chosen, why);
    else
        fprintf(f, "No candidate chosen: %s.\n\n", why);
    fprintf(f, "Costs are latency ms / throughput tok/s / memory MiB; measured: %d fresh process(es) each under the "
               "contract's workload%s. Short KD: %lld tokens each; held-out KD loss on the first %lld tokens of "
               "val.bin. Selection tokens: %lld (KD %lld + scoring %lld).\n\n",
            p->sweeps, p->tables ? ", at the profiling's machine speed" : "", (long long)p->kd_tokens,
            (long long)ac_rank_score_params(p).batches * p->batch * p->seq_len,
            (long long)(rep->kd_tokens + rep->score_tokens), (long long)rep->kd_tokens, (long long)rep->score_tokens);
    fprintf(f, "| candidate | parameters | hidden | layers | predicted | measured | verdict | short-KD loss (last 25) "
               "| held-out KD loss | tokens |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < rep->n; i++)
        markdown_row(f, p, &c[i], &rep->results[i], i, rep->chosen);
    fclose(f);
    char path[AC_PATH_MAX];
    ac_status st = text ? ac_path_join(path, sizeof path, p->out_dir, "rank.md")
                        : ac_fail(AC_ERR_NOMEM, "rank: out of memory");
    if (st == AC_OK)
        st = ac_write_text_file(path, text);
    free(text);
    return st;
}

ac_status ac_rank_write(const ac_contract *contract, const ac_rank_candidate *c, const ac_rank_params *p,
                        const ac_rank_report *rep)
{
    char why[256], path[AC_PATH_MAX];
    reason(p, rep, why, sizeof why);
    ac_status st = write_json(c, p, rep, why);
    if (st == AC_OK)
        st = write_markdown(contract, c, p, rep, why);
    if (st == AC_OK && rep->chosen >= 0)
        st = ac_path_join(path, sizeof path, p->out_dir, "arch.json");
    if (st == AC_OK && rep->chosen >= 0)
        st = ac_config_json_write(path, &c[rep->chosen].arch);
    return st;
}
