/* The pipeline's report: report.json (everything, machine-readable), report.md (for a
 * person: the architecture, costs against targets, tokens, quality) and two pictures,
 * arch.png (what each parent layer kept) and loss.png (search and KD curves), drawn with
 * gnuplot when it is there. */
#include "compress/compress_internal.h"

#include "autocompress/config_json.h"
#include "autocompress/cost.h"
#include "autocompress/log.h"
#include "autocompress/prune.h"
#include "autocompress/train.h"
#include "blocks/block.h"
#include "util/fs_util.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAIL_STEPS = 25 };

typedef struct {
    cJSON *search, *measure, *eval;
    cJSON *rank;              /* rank.json when candidates were ranked, else NULL */
    cJSON *chosen;            /* rank.json's entry of the winner (NULL: not ranked) */
    cJSON *predicted;         /* the chosen architecture's predicted costs */
    ac_arch parent, model;
    int *parent_layer;  /* per model layer */
    double kd_tail;
    int kd_tail_steps;
    char tables_differ[1024]; /* "" when the tables were measured here (fingerprints) */
} report_inputs;

static double number(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static int flag(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsTrue(v);
}

static ac_status read_json(const ac_compress_ctx *c, const char *name, cJSON **out)
{
    char path[AC_PATH_MAX];
    ac_compress_path(c, name, path, sizeof path);
    return ac_read_json_file(path, 1 << 22, out);
}

static ac_status read_arch(const char *dir, ac_arch *arch)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, dir, "config.json");
    return st == AC_OK ? ac_config_json_read(path, arch) : st;
}

/* rank.json of the ranking, and the chosen candidate's entry and prediction. */
static ac_status load_rank(const ac_compress_ctx *c, report_inputs *in)
{
    in->predicted = cJSON_GetObjectItemCaseSensitive(in->search, "chosen_predicted");
    const char *dir = ac_compress_rank_dir(c);
    char name[64];
    if (!dir)
        return AC_OK;
    snprintf(name, sizeof name, "%s/rank.json", dir);
    ac_status st = read_json(c, name, &in->rank);
    if (st != AC_OK)
        return st;
    const cJSON *chosen = cJSON_GetObjectItemCaseSensitive(in->rank, "chosen");
    in->chosen = cJSON_IsNumber(chosen) ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(in->rank, "candidates"),
                                                             chosen->valueint)
                                        : NULL;
    if (!in->chosen)
        return ac_fail(AC_ERR_INVALID, "report: %s/%s names no chosen candidate", c->p->out_dir, name);
    if (ac_compress_reranks(c))
        in->predicted = cJSON_GetObjectItemCaseSensitive(in->chosen, "predicted");
    return AC_OK;
}

/* Everything spent on selection: the search's tokens, and a re-ranking's KDs and scores
 * (Minitron++'s search tokens hold its ranking already). */
static double search_tokens(const ac_compress_ctx *c, const report_inputs *in)
{
    return number(in->search, "search_tokens", NULL) + (ac_compress_reranks(c) ? number(in->rank, "tokens", NULL) : 0);
}

static ac_status load_inputs(const ac_compress_ctx *c, report_inputs *in)
{
    char path[AC_PATH_MAX], arch_path[AC_PATH_MAX];
    ac_status st = read_json(c, "search/search.json", &in->search);
    if (st == AC_OK)
        st = load_rank(c, in);
    if (st == AC_OK)
        st = read_json(c, "measure.json", &in->measure);
    if (st == AC_OK)
        st = read_json(c, "eval.json", &in->eval);
    if (st == AC_OK) { /* the per-window scores stay in eval.json, for eval compare */
        cJSON_DeleteItemFromObjectCaseSensitive(in->eval, "window_kd");
        cJSON_DeleteItemFromObjectCaseSensitive(in->eval, "window_ce");
    }
    if (st == AC_OK)
        st = read_arch(c->p->model_dir, &in->parent);
    ac_compress_path(c, "model", path, sizeof path);
    if (st == AC_OK)
        st = read_arch(path, &in->model);
    ac_compress_chosen_paths(c, arch_path, path, sizeof path);
    if (st == AC_OK)
        st = ac_prune_read_parent_layers(path, in->model.n_layers, &in->parent_layer);
    ac_compress_path(c, "distill/loss.csv", path, sizeof path);
    if (st == AC_OK)
        st = ac_train_tail_loss(path, TAIL_STEPS, &in->kd_tail, &in->kd_tail_steps);
    ac_cost_tables *tables = NULL;
    if (st == AC_OK)
        st = ac_cost_tables_read(c->tables, &tables);
    if (st == AC_OK)
        st = ac_cost_tables_check_machine(tables, c->tables, &c->contract, 1, in->tables_differ,
                                          sizeof in->tables_differ);
    ac_cost_tables_free(tables);
    return st;
}

static void free_inputs(report_inputs *in)
{
    cJSON_Delete(in->search);
    cJSON_Delete(in->rank);
    cJSON_Delete(in->measure);
    cJSON_Delete(in->eval);
    ac_arch_free(&in->parent);
    ac_arch_free(&in->model);
    free(in->parent_layer);
}

/* The model layer cut from parent layer l, or NULL when l was removed. */
static const ac_block_dims *kept_layer(const report_inputs *in, int l)
{
    for (int i = 0; i < in->model.n_layers; i++)
        if (in->parent_layer[i] == l)
            return &in->model.layers[i];
    return NULL;
}

static double kept_fraction(const report_inputs *in, int l)
{
    const ac_block_dims *b = kept_layer(in, l);
    double whole = (double)ac_block_param_count(&in->parent, &in->parent.layers[l]);
    return b && whole > 0 ? (double)ac_block_param_count(&in->model, b) / whole : 0.0;
}

static cJSON *architecture_json(const report_inputs *in)
{
    cJSON *list = cJSON_CreateArray();
    char tag[64];
    for (int l = 0; list && l < in->parent.n_layers; l++) {
        const ac_block_dims *b = kept_layer(in, l);
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddNumberToObject(o, "parent_layer", l);
        cJSON_AddStringToObject(o, "kind", ac_block_name(in->parent.layers[l].kind));
        ac_block(&in->parent.layers[l])->tag(&in->parent.layers[l], tag, sizeof tag);
        cJSON_AddStringToObject(o, "parent", tag);
        if (b) {
            ac_block(b)->tag(b, tag, sizeof tag);
            cJSON_AddStringToObject(o, "kept", tag);
        } else {
            cJSON_AddNullToObject(o, "kept");
        }
        cJSON_AddNumberToObject(o, "parameters_kept", kept_fraction(in, l));
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

/* How the architecture was chosen: ranked or not, the winner, why, and the table. */
static cJSON *selection_json(const ac_compress_ctx *c, const report_inputs *in)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    const char *dir = ac_compress_rank_dir(c);
    cJSON_AddBoolToObject(o, "ranked", dir != NULL);
    if (!dir) {
        cJSON_AddStringToObject(o, "reason", "the search's pick (--rerank 0: not re-ranked)");
        return o;
    }
    char table[64];
    snprintf(table, sizeof table, "%s/rank.md", dir);
    cJSON_AddStringToObject(o, "table", table);
    cJSON_AddNumberToObject(o, "candidates", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(in->rank, "candidates")));
    cJSON_AddNumberToObject(o, "chosen", number(in->rank, "chosen", NULL));
    cJSON_AddBoolToObject(o, "measured", flag(in->rank, "measure", NULL));
    cJSON_AddItemReferenceToObject(o, "reason", cJSON_GetObjectItemCaseSensitive(in->rank, "reason"));
    cJSON_AddNumberToObject(o, "selection_tokens", number(in->rank, "tokens", NULL));
    if (ac_compress_reranks(c))
        cJSON_AddNumberToObject(o, "router_search_tokens", number(in->search, "search_tokens", NULL));
    return o;
}

static ac_status write_json_report(const ac_compress_ctx *c, const report_inputs *in)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "report: out of memory");
    ac_param_counts pp = ac_arch_param_counts(&in->parent), mp = ac_arch_param_counts(&in->model);
    cJSON_AddStringToObject(root, "method", ac_compress_method_name(c->p->method));
    cJSON_AddStringToObject(root, "contract", c->contract.name);
    cJSON_AddStringToObject(root, "parent", c->p->model_dir);
    cJSON_AddStringToObject(root, "model", "model");
    cJSON_AddNumberToObject(root, "parent_parameters", (double)pp.total);
    cJSON_AddNumberToObject(root, "parameters", (double)mp.total);
    cJSON_AddNumberToObject(root, "active_parameters", (double)mp.active);
    cJSON_AddNumberToObject(root, "hidden", in->model.hidden);
    cJSON_AddItemToObject(root, "architecture", architecture_json(in));
    cJSON_AddItemReferenceToObject(root, "targets", cJSON_GetObjectItemCaseSensitive(in->search, "targets"));
    cJSON_AddItemReferenceToObject(root, "planned_targets", cJSON_GetObjectItemCaseSensitive(in->search, "planned_targets"));
    cJSON_AddItemReferenceToObject(root, "parent_predicted",
                                   cJSON_GetObjectItemCaseSensitive(in->search, "parent_predicted"));
    cJSON_AddItemReferenceToObject(root, "predicted", in->predicted);
    cJSON_AddItemToObject(root, "selection", selection_json(c, in));
    cJSON_AddItemReferenceToObject(root, "measured", in->measure);
    cJSON *tables = cJSON_AddObjectToObject(root, "tables");
    cJSON_AddStringToObject(tables, "path", c->tables);
    cJSON_AddBoolToObject(tables, "measured_here", !in->tables_differ[0]);
    cJSON_AddStringToObject(tables, "differences", in->tables_differ);
    cJSON_AddBoolToObject(root, "pass", flag(in->measure, "pass", NULL));
    cJSON_AddNumberToObject(root, "search_tokens", search_tokens(c, in));
    cJSON_AddNumberToObject(root, "kd_tokens", (double)c->kd_steps * c->p->batch * c->p->seq_len);
    cJSON_AddNumberToObject(root, "kd_loss_final", in->kd_tail);
    cJSON_AddNumberToObject(root, "kd_loss_final_steps", in->kd_tail_steps);
    cJSON_AddItemReferenceToObject(root, "eval", in->eval);
    cJSON *secs = cJSON_AddObjectToObject(root, "stage_seconds");
    for (int s = 0; secs && s < AC_STAGE_COUNT; s++)
        if (c->done[s])
            cJSON_AddNumberToObject(secs, ac_compress_stages[s].name, c->seconds[s]);
    char path[AC_PATH_MAX];
    ac_compress_path(c, "report.json", path, sizeof path);
    ac_status st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}

/* One row of the costs table: target, predicted, measured (speed-corrected), pass. */
static void cost_row(FILE *f, const report_inputs *in, const char *label, const char *target_key,
                     const char *measure_key, const char *unit, double scale, const char *relation)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in->search, "targets"),
                                                      target_key);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(in->measure, measure_key);
    fprintf(f, "| %s | ", label);
    if (cJSON_IsNumber(t))
        fprintf(f, "%s %.3f %s | %.3f", relation, t->valuedouble, unit, number(in->search, "planned_targets", target_key));
    else
        fprintf(f, "- | -");
    fprintf(f, " | %.3f | %.3f | %.3f | %s |\n", number(in->predicted, target_key, NULL),
            number(m, "measured", NULL) / scale, number(m, "measured_raw", NULL) / scale,
            cJSON_IsNumber(t) ? (flag(m, "pass", NULL) ? "pass" : "**FAIL**") : "-");
}

static void write_selection(FILE *f, const ac_compress_ctx *c, const report_inputs *in)
{
    const char *dir = ac_compress_rank_dir(c);
    fprintf(f, "\n## Selection\n\n");
    if (!dir) {
        fprintf(f, "The search's pick, not re-ranked (--rerank 0).\n");
        return;
    }
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(in->rank, "reason");
    fprintf(f, "Candidate %.0f of %d chosen: %s. Every candidate's predicted and measured cost, verdict and KD "
               "losses: [%s/rank.md](%s/rank.md). Selection tokens (short KDs and held-out scores): %.0f",
            number(in->rank, "chosen", NULL), cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(in->rank, "candidates")),
            cJSON_IsString(reason) ? reason->valuestring : "", dir, dir, number(in->rank, "tokens", NULL));
    if (ac_compress_reranks(c))
        fprintf(f, ", beside the router search's %.0f", number(in->search, "search_tokens", NULL));
    fprintf(f, ".\n");
}

static ac_status write_markdown(const ac_compress_ctx *c, const report_inputs *in, int have_arch_png,
                                int have_loss_png)
{
    char path[AC_PATH_MAX];
    ac_compress_path(c, "report.md", path, sizeof path);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return ac_fail(AC_ERR_NOMEM, "report: out of memory");
    ac_param_counts pp = ac_arch_param_counts(&in->parent), mp = ac_arch_param_counts(&in->model);
    fprintf(f, "# %s for %s\n\n", ac_compress_method_name(c->p->method), c->contract.name);
    fprintf(f, "Parent `%s` (%lld parameters) compressed to `model/` (%lld parameters, %.1f%%; %lld active), "
               "%d of %d layers, hidden %d. The final model %s its contract when measured.\n\n",
            c->p->model_dir, (long long)pp.total, (long long)mp.total, 100.0 * (double)mp.total / (double)pp.total,
            (long long)mp.active, in->model.n_layers, in->parent.n_layers, in->model.hidden,
            flag(in->measure, "pass", NULL) ? "**meets**" : "**does not meet**");
    fprintf(f, "## Costs\n\nMeasured on this machine under the contract's workload (%d sweeps of fresh processes); "
               "corrected = at the profiling's machine speed, the value compared with the target; planned = "
               "the target the search aimed at, %g%% inside it (the contract's margin).\n\n",
            c->p->measure_sweeps, 100.0 * c->contract.margin);
    fprintf(f, "| | target | planned | predicted | measured (corrected) | measured (raw) | |\n"
               "|---|---|---|---|---|---|---|\n");
    cost_row(f, in, "latency (ms)", "latency_ms", "latency_ms", "ms", 1.0, "<=");
    cost_row(f, in, "throughput (tok/s)", "throughput_tok_s", "throughput_tok_s", "tok/s", 1.0, ">=");
    cost_row(f, in, "memory (MiB)", "memory_mib", "memory_bytes", "MiB", 1024.0 * 1024.0, "<=");
    if (in->tables_differ[0])
        fprintf(f, "\n**The cost tables (`%s`) were measured elsewhere** (used with --foreign-tables): %s. The "
                   "prediction and the speed correction rest on that machine.\n",
                c->tables, in->tables_differ);
    else
        fprintf(f, "\nThe cost tables (`%s`) were measured on this machine for this contract.\n", c->tables);
    write_selection(f, c, in);
    fprintf(f, "\n## Tokens and quality\n\n| | |\n|---|---|\n");
    fprintf(f, "| search tokens (all selection) | %.0f |\n| KD tokens | %.0f |\n", search_tokens(c, in),
            (double)c->kd_steps * c->p->batch * c->p->seq_len);
    fprintf(f, "| KD loss (mean of the last %d steps) | %.4f |\n", in->kd_tail_steps, in->kd_tail);
    fprintf(f, "| held-out KD loss | %.4f |\n| held-out cross-entropy (parent) | %.4f (%.4f) |\n",
            number(in->eval, "kd_loss", NULL), number(in->eval, "ce", NULL), number(in->eval, "teacher_ce", NULL));
    fprintf(f, "| top-1 agreement with the parent | %.4f |\n", number(in->eval, "top1_agreement", NULL));
    if (number(in->eval, "lines", NULL) > 0)
        fprintf(f, "| next-line exact match (%.0f lines) | %.4f |\n", number(in->eval, "lines", NULL),
                number(in->eval, "line_exact_match", NULL));
    fprintf(f, "\n## Architecture\n\n");
    if (have_arch_png)
        fprintf(f, "![parameters kept per parent layer](arch.png)\n\n");
    fprintf(f, "| parent layer | kind | parent | kept | parameters kept |\n|---|---|---|---|---|\n");
    char tag[64], kept[64];
    for (int l = 0; l < in->parent.n_layers; l++) {
        const ac_block_dims *b = kept_layer(in, l);
        ac_block(&in->parent.layers[l])->tag(&in->parent.layers[l], tag, sizeof tag);
        if (b)
            ac_block(b)->tag(b, kept, sizeof kept);
        fprintf(f, "| %d | %s | %s | %s | %.1f%% |\n", l, ac_block_name(in->parent.layers[l].kind), tag,
                b ? kept : "removed", 100.0 * kept_fraction(in, l));
    }
    if (have_loss_png)
        fprintf(f, "\n## Loss curves\n\n![search and KD loss](loss.png)\n");
    fprintf(f, "\n## Time\n\n| stage | seconds |\n|---|---|\n");
    for (int s = 0; s < AC_STAGE_COUNT; s++)
        if (c->done[s] && s != AC_STAGE_REPORT)
            fprintf(f, "| %s | %.1f |\n", ac_compress_stages[s].name, c->seconds[s]);
    fclose(f);
    ac_status st = text ? ac_write_text_file(path, text) : ac_fail(AC_ERR_NOMEM, "report: out of memory");
    free(text);
    return st;
}

/* ---- pictures ---- */

/* Runs a gnuplot script in out_dir (its files are named relative to it). */
static ac_status gnuplot(const ac_compress_ctx *c, const char *name, const char *script)
{
    char file[64], path[AC_PATH_MAX], command[8400];
    if (strchr(c->p->out_dir, '\''))
        return ac_fail(AC_ERR_UNSUPPORTED, "report: not drawing %s: %s has a quote in its name", name, c->p->out_dir);
    ac_status st = ac_path_suffixed(file, sizeof file, name, ".gp");
    if (st != AC_OK)
        return st;
    ac_compress_path(c, file, path, sizeof path);
    st = ac_write_text_file(path, script);
    if (st != AC_OK)
        return st;
    snprintf(command, sizeof command, "cd '%s' && gnuplot %s.gp >%s.gp.log 2>&1", c->p->out_dir, name, name);
    int status = system(command);
    return status == 0 ? AC_OK
                       : ac_fail(AC_ERR_UNSUPPORTED, "report: gnuplot could not draw %s.png (see %s/%s.gp.log; "
                                                     "scripts/setup.sh installs gnuplot-nox)", name, c->p->out_dir, name);
}

static ac_status draw_arch(const ac_compress_ctx *c, const report_inputs *in)
{
    char path[AC_PATH_MAX];
    ac_compress_path(c, "arch.dat", path, sizeof path);
    char *data = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&data, &len);
    if (!f)
        return ac_fail(AC_ERR_NOMEM, "report: out of memory");
    for (int l = 0; l < in->parent.n_layers; l++)
        fprintf(f, "%d %c %.4f %d\n", l, ac_block_letter(in->parent.layers[l].kind), 100.0 * kept_fraction(in, l),
                (int)in->parent.layers[l].kind);
    fclose(f);
    ac_status st = data ? ac_write_text_file(path, data) : ac_fail(AC_ERR_NOMEM, "report: out of memory");
    free(data);
    if (st != AC_OK)
        return st;
    char script[2048];
    snprintf(script, sizeof script,
             "set terminal pngcairo size 900,420 font ',11'\nset output 'arch.png'\n"
             "set title \"%s for %s: parameters kept per parent layer (hidden %d of %d)\"\n"
             "set style fill solid 0.8 border -1\nset boxwidth 0.8\nset yrange [0:105]\nset grid ytics\n"
             "set ylabel 'kept (%%)'\nset xlabel 'parent layer (M mamba, * attention, - mlp, E moe)'\n"
             "set palette defined (0 '#4c72b0', 1 '#dd8452', 2 '#55a868', 3 '#c44e52')\nunset colorbox\n"
             "set cbrange [0:3]\n"
             "plot 'arch.dat' using 1:3:4:xtic(sprintf('%%d%%s', $1, strcol(2))) with boxes lc palette notitle\n",
             ac_compress_method_name(c->p->method), c->contract.name, in->model.hidden, in->parent.hidden);
    return gnuplot(c, "arch", script);
}

static ac_status draw_loss(const ac_compress_ctx *c)
{
    char script[4096];
    int n = snprintf(script, sizeof script,
                     "set terminal pngcairo size 1200,440 font ',11'\nset output 'loss.png'\n"
                     "set datafile separator ','\nset key top right\nset grid\nset multiplot layout 1,2\n"
                     "set title 'search'\nset xlabel 'search tokens'\nset ylabel 'KD loss'\n");
    if (c->p->method == AC_METHOD_MINITRON) {
        n += snprintf(script + n, sizeof script - (size_t)n, "plot ");
        int drawn = 0;
        for (int i = 0; i < c->p->candidates; i++) {
            char name[64], path[AC_PATH_MAX];
            snprintf(name, sizeof name, "search/candidates/c%d/loss.csv", i);
            ac_compress_path(c, name, path, sizeof path);
            if (!ac_path_exists(path)) /* dropped when measured, or the only one left */
                continue;
            n += snprintf(script + n, sizeof script - (size_t)n, "%s'%s' using 2:4 every ::1 with lines title "
                          "'candidate %d'", drawn++ ? ", " : "", name, i);
        }
        if (!drawn)
            n += snprintf(script + n, sizeof script - (size_t)n, "0 notitle");
        n += snprintf(script + n, sizeof script - (size_t)n, "\n");
    } else {
        n += snprintf(script + n, sizeof script - (size_t)n,
                      "plot 'search/search.csv' using 2:4 every ::1 with lines title 'routers: KD from the parent'\n");
    }
    snprintf(script + n, sizeof script - (size_t)n,
             "set title 'distillation'\nset xlabel 'KD tokens'\nset ylabel 'loss'\n"
             "plot 'distill/loss.csv' using 2:4 every ::1 with lines title 'KD (train)', "
             "'distill/loss.csv' using 2:($6 > 0 ? $6 : 1/0) every ::1 with linespoints title 'KD (validation)'\n"
             "unset multiplot\n");
    return gnuplot(c, "loss", script);
}

/* A picture is a convenience: without gnuplot the report says so and goes on. */
static int drawn(ac_status st)
{
    if (st == AC_OK)
        return 1;
    ac_warn("%s", ac_error_message());
    ac_clear_error();
    return 0;
}

ac_status ac_compress_write_report(ac_compress_ctx *c)
{
    report_inputs in;
    memset(&in, 0, sizeof in);
    ac_status st = load_inputs(c, &in);
    int arch_png = 0, loss_png = 0;
    if (st == AC_OK) {
        arch_png = drawn(draw_arch(c, &in));
        loss_png = drawn(draw_loss(c));
        st = write_json_report(c, &in);
    }
    if (st == AC_OK)
        st = write_markdown(c, &in, arch_png, loss_png);
    free_inputs(&in);
    return st;
}

ac_status ac_compress_summary(const ac_compress_ctx *c, ac_compress_report *r)
{
    cJSON *report = NULL;
    ac_status st = read_json(c, "report.json", &report);
    if (st != AC_OK)
        return st;
    r->pass = flag(report, "pass", NULL);
    r->search_tokens = (int64_t)number(report, "search_tokens", NULL);
    r->kd_tokens = (int64_t)number(report, "kd_tokens", NULL);
    r->kd_loss = number(report, "kd_loss_final", NULL);
    cJSON_Delete(report);
    return AC_OK;
}
