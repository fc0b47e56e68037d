/* The search's outputs: arch.json (a config.json of the chosen architecture), search.json
 * (what was chosen, predicted, repaired and filled, and the candidates) and search.png (the diagnostics of
 * search.csv, drawn by gnuplot). */
#include "search/search_loop.h"

#include "autocompress/config_json.h"
#include "autocompress/log.h"
#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static cJSON *costs_json(const ac_cost_prediction *p)
{
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddNumberToObject(o, "latency_ms", p->latency_ms);
        cJSON_AddNumberToObject(o, "throughput_tok_s", p->throughput_tok_s);
        cJSON_AddNumberToObject(o, "memory_mib", p->memory_bytes / (1024.0 * 1024.0));
    }
    return o;
}

static cJSON *targets_json(const ac_budget_targets *t)
{
    cJSON *o = cJSON_CreateObject();
    if (o && t->latency_ms > 0)
        cJSON_AddNumberToObject(o, "latency_ms", t->latency_ms);
    if (o && t->throughput_tok_s > 0)
        cJSON_AddNumberToObject(o, "throughput_tok_s", t->throughput_tok_s);
    if (o && t->memory_bytes > 0)
        cJSON_AddNumberToObject(o, "memory_mib", t->memory_bytes / (1024.0 * 1024.0));
    return o;
}

static cJSON *choices_json(const ac_cost_model *cost, const int *choice)
{
    cJSON *o = cJSON_CreateObject();
    char label[64];
    for (int a = 0; o && a < ac_cost_model_axis_count(cost); a++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, a);
        ac_search_axis_label(ax, label, sizeof label);
        cJSON_AddNumberToObject(o, label, ax->values[choice[a]]);
    }
    return o;
}

/* The repair's steps (down) or the fill's (up), with what each cost and what it lost or
 * regained (cost_name, importance_name). */
static cJSON *steps_json(const ac_cost_model *cost, const ac_axis_step *steps, int n, const char *cost_name,
                         const char *importance_name)
{
    cJSON *list = cJSON_CreateArray();
    char label[64];
    for (int i = 0; list && i < n; i++) {
        const ac_cost_axis *ax = ac_cost_model_axis(cost, steps[i].axis);
        ac_search_axis_label(ax, label, sizeof label);
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "axis", label);
        cJSON_AddNumberToObject(o, "from", ax->values[steps[i].from]);
        cJSON_AddNumberToObject(o, "to", ax->values[steps[i].to]);
        cJSON_AddNumberToObject(o, cost_name, steps[i].cost);
        cJSON_AddNumberToObject(o, importance_name, steps[i].importance);
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

/* Which layer of the (reordered) parent each layer of the choice is cut from: what a
 * prune needs beside arch.json when layers were removed. */
static cJSON *parent_layers_json(const ac_cost_model *cost, const int *choice, int n_layers)
{
    ac_arch arch;
    int *layer = malloc(((size_t)n_layers + 1) * sizeof *layer);
    cJSON *list = NULL;
    if (layer && ac_cost_choice_arch(cost, choice, &arch, layer) == AC_OK) {
        list = cJSON_CreateIntArray(layer, arch.n_layers);
        ac_arch_free(&arch);
    }
    free(layer);
    return list;
}

cJSON *ac_search_summary_json(const ac_contract *contract, const ac_cost_model *cost, const int *choice,
                              const ac_axis_step *repairs, const ac_search_report *r)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "contract", contract->name);
    cJSON_AddItemToObject(root, "targets", targets_json(&r->targets));
    cJSON_AddItemToObject(root, "planned_targets", targets_json(&r->planned));
    cJSON_AddNumberToObject(root, "margin", contract->margin);
    cJSON_AddItemToObject(root, "parent_predicted", costs_json(&r->parent));
    cJSON_AddItemToObject(root, "chosen_predicted", costs_json(&r->chosen));
    cJSON_AddBoolToObject(root, "meets_targets", r->meets);
    cJSON_AddItemToObject(root, "choice", choices_json(cost, choice));
    cJSON_AddItemToObject(root, "parent_layers", parent_layers_json(cost, choice, r->arch.n_layers));
    cJSON_AddNumberToObject(root, "settled_axes", r->settled_axes);
    cJSON_AddItemToObject(root, "repairs", steps_json(cost, repairs, r->repair_steps, "excess_saved", "importance_lost"));
    cJSON_AddNumberToObject(root, "router_steps", r->steps);
    cJSON_AddNumberToObject(root, "calibration_tokens", (double)r->calib_tokens);
    cJSON_AddNumberToObject(root, "search_tokens", (double)r->tokens);
    ac_param_counts pc = ac_arch_param_counts(&r->arch);
    cJSON_AddNumberToObject(root, "parameters", (double)pc.total);
    cJSON_AddNumberToObject(root, "active_parameters", (double)pc.active);
    return root;
}

/* A candidate: its log-probability, prediction, kept parent layers and architecture as
 * arch.json writes it. */
static cJSON *candidate_json(const ac_search_candidate *c)
{
    char *text = NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o || ac_config_json_format(&c->arch, AC_DTYPE_F32, &text) != AC_OK) {
        ac_clear_error();
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddBoolToObject(o, "chosen", c->chosen);
    cJSON_AddNumberToObject(o, "log_prob", c->log_prob);
    cJSON_AddItemToObject(o, "predicted", costs_json(&c->predicted));
    cJSON_AddItemToObject(o, "parent_layers", cJSON_CreateIntArray(c->parent_layers, c->arch.n_layers));
    ac_param_counts pc = ac_arch_param_counts(&c->arch);
    cJSON_AddNumberToObject(o, "parameters", (double)pc.total);
    cJSON_AddItemToObject(o, "config", cJSON_Parse(text));
    free(text);
    return o;
}

/* What the fill changed: the choice and its prediction before it, its steps, and the
 * binding target's use before and after. */
static void add_fill(cJSON *root, const ac_cost_model *cost, const ac_discrete_choice *d, const ac_search_report *r,
                     int fill)
{
    cJSON_AddBoolToObject(root, "fill", fill);
    cJSON_AddStringToObject(root, "binding_target", r->binding);
    cJSON_AddNumberToObject(root, "binding_use", r->binding_use);
    cJSON *before = cJSON_AddObjectToObject(root, "before_fill");
    if (before) {
        cJSON_AddItemToObject(before, "choice", choices_json(cost, d->unfilled));
        cJSON_AddItemToObject(before, "predicted", costs_json(&r->unfilled));
        cJSON_AddNumberToObject(before, "binding_use", r->unfilled_use);
    }
    cJSON_AddItemToObject(root, "fills", steps_json(cost, d->fills, r->fill_steps, "room_used", "importance_regained"));
    cJSON *list = cJSON_AddArrayToObject(root, "candidates");
    for (int i = 0; list && i < r->n_candidates; i++)
        cJSON_AddItemToArray(list, candidate_json(&r->candidates[i]));
}

static ac_status write_summary(const char *path, const ac_contract *contract, const ac_cost_model *cost,
                               const ac_discrete_choice *d, const ac_search_report *r, int fill)
{
    cJSON *root = ac_search_summary_json(contract, cost, d->choice, d->repairs, r);
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "search: out of memory");
    cJSON_AddStringToObject(root, "method", "autocompress");
    add_fill(root, cost, d, r, fill);
    ac_status st = ac_write_json_file(path, root);
    cJSON_Delete(root);
    return st;
}

/* has[c] = column c (1-based, c <= n) of the CSV holds a positive number somewhere:
 * gnuplot refuses a log-scale series with no point to draw. */
static void columns_with_data(const char *csv, int n, unsigned char *has)
{
    memset(has, 0, (size_t)n + 1);
    FILE *fp = fopen(csv, "r");
    if (!fp)
        return;
    char line[65536];
    if (!fgets(line, sizeof line, fp)) { /* the header */
        fclose(fp);
        return;
    }
    while (fgets(line, sizeof line, fp)) {
        char *field = line;
        for (int c = 1; c <= n && field; c++) {
            double v = strtod(field, NULL);
            if (isfinite(v) && v > 0)
                has[c] = 1;
            field = strchr(field, ',');
            field = field ? field + 1 : NULL;
        }
    }
    fclose(fp);
}

/* One panel of log-scale series (columns cols[0..n)), the ones with data. */
static void log_panel(FILE *g, const char *title, const int *cols, const char *const *names, int n,
                      const unsigned char *has)
{
    fprintf(g, "set title '%s'\nset logscale y\nset format y '%%g'\nplot", title);
    int drawn = 0;
    for (int i = 0; i < n; i++) {
        if (!has[cols[i]])
            continue;
        fprintf(g, "%s 'search.csv' using 1:(column(%d) > 0 ? column(%d) : NaN) with lines", drawn ? "," : "",
                cols[i], cols[i]);
        fprintf(g, names ? " title '%s'" : " notitle", names ? names[i] : "");
        drawn++;
    }
    /* nothing to draw: an empty frame rather than an error that stops the script */
    fprintf(g, "%s\nunset logscale y\nset format y\n", drawn ? "" : " [0:1] [1:10] 0.1 notitle");
}

/* The last panel: the weight the budget puts on each target's relative excess (the
 * learned multipliers, or the hinge's slope), columns from `first` in AC_BUDGET_* order. */
static void multipliers_panel(FILE *g, const ac_search_report *r, int first)
{
    const double set[AC_BUDGET_TARGETS] = {r->targets.latency_ms, r->targets.memory_bytes, r->targets.throughput_tok_s};
    const char *const names[AC_BUDGET_TARGETS] = {"latency", "memory", "throughput"};
    fprintf(g, "set title 'budget weight on each target''s excess (multiplier)'\nset key outside right\nplot 0 with "
               "lines dt 2 lc rgb '#999999' notitle");
    for (int k = 0; k < AC_BUDGET_TARGETS; k++)
        if (set[k] > 0)
            fprintf(g, ", 'search.csv' using 1:%d with lines title '%s'", first + k, names[k]);
    fprintf(g, "\n");
}

/* search.gp, the gnuplot script that draws search.png from search.csv: the losses, the
 * expected costs against their targets, the maximum choice probability of every axis,
 * ||grad KD|| / ||grad budget|| per axis and over all logits, and the budget's
 * multipliers. Kept beside the CSV so it can be redrawn. */
static void write_plot_script(FILE *g, const char *csv_path, const ac_cost_model *cost, const ac_search_report *r)
{
    /* 11 scalars, max probability and ratio per axis, then lr, the overall ratio and
     * the multipliers (search.c's write_row) */
    int n_axes = ac_cost_model_axis_count(cost), n_cols = 13 + 2 * n_axes + AC_BUDGET_TARGETS;
    unsigned char *has = malloc((size_t)n_cols + 1);
    int *cols = malloc((size_t)n_axes * sizeof *cols);
    if (!has || !cols) {
        free(has);
        free(cols);
        return;
    }
    columns_with_data(csv_path, n_cols, has);
    fprintf(g, "set terminal pngcairo size 1400,1400 font ',10'\nset output 'search.png'\n");
    fprintf(g, "set datafile separator ','\nset datafile missing 'nan'\nset key outside right\nset grid\n"
               "set xlabel 'router step'\nset multiplot layout 3,2\n");
    const int loss_cols[] = {4, 5};
    const char *const loss_names[] = {"KD", "budget"};
    log_panel(g, "losses", loss_cols, loss_names, 2, has);
    fprintf(g, "set title 'expected cost / final target'\nplot 1 with lines dt 2 lc rgb '#999999' title 'target'");
    if (r->targets.latency_ms > 0)
        fprintf(g, ", 'search.csv' using 1:($6 / %g) with lines title 'latency'", r->targets.latency_ms);
    if (r->targets.memory_bytes > 0)
        fprintf(g, ", 'search.csv' using 1:($8 / %g) with lines title 'memory'", r->targets.memory_bytes / (1024.0 * 1024.0));
    if (r->targets.throughput_tok_s > 0)
        fprintf(g, ", 'search.csv' using 1:($10 / %g) with lines title 'throughput'", r->targets.throughput_tok_s);
    fprintf(g, "\nset title 'max choice probability per axis'\nset yrange [0:1.05]\nset key off\nplot");
    for (int a = 0; a < n_axes; a++)
        fprintf(g, "%s 'search.csv' using 1:%d with lines", a ? "," : "", 12 + a);
    fprintf(g, "\nset autoscale y\n");
    for (int a = 0; a < n_axes; a++)
        cols[a] = 12 + n_axes + a;
    log_panel(g, "||grad KD|| / ||grad budget|| per axis", cols, NULL, n_axes, has);
    const int all_cols[] = {13 + 2 * n_axes, 12 + 2 * n_axes};
    const char *const all_names[] = {"||grad KD|| / ||grad budget||", "router lr"};
    fprintf(g, "set key outside right\n");
    log_panel(g, "over all logits", all_cols, all_names, 2, has);
    multipliers_panel(g, r, 14 + 2 * n_axes);
    fprintf(g, "unset multiplot\n");
    free(has);
    free(cols);
}

static ac_status plot(const char *dir, const ac_cost_model *cost, const ac_search_report *r)
{
    char script[AC_PATH_MAX], csv[AC_PATH_MAX], command[8400];
    if (strchr(dir, '\''))
        return ac_fail(AC_ERR_UNSUPPORTED, "search: not drawing search.png: the directory %s has a quote in its name", dir);
    ac_status st = ac_path_join(script, sizeof script, dir, "search.gp");
    if (st == AC_OK)
        st = ac_path_join(csv, sizeof csv, dir, "search.csv");
    if (st != AC_OK)
        return st;
    FILE *g = fopen(script, "w");
    if (!g)
        return ac_fail(AC_ERR_IO, "search: cannot write %s", script);
    write_plot_script(g, csv, cost, r);
    if (fclose(g) != 0)
        return ac_fail(AC_ERR_IO, "search: cannot write %s", script);
    /* the script names its files relative to the run's directory */
    snprintf(command, sizeof command, "cd '%s' && gnuplot search.gp >search.gp.log 2>&1", dir);
    int status = system(command);
    if (status != 0)
        return ac_fail(AC_ERR_UNSUPPORTED, "search: gnuplot could not draw %s/search.png (status %d, see "
                                           "search.gp.log; scripts/setup.sh installs gnuplot-nox)", dir,
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return AC_OK;
}

ac_status ac_search_write_outputs(const char *dir, const ac_contract *contract, const ac_cost_model *cost,
                                  const ac_discrete_choice *d, int fill, const ac_search_report *report)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, dir, "arch.json");
    if (st == AC_OK)
        st = ac_config_json_write(path, &report->arch);
    if (st == AC_OK)
        st = ac_path_join(path, sizeof path, dir, "search.json");
    if (st == AC_OK)
        st = write_summary(path, contract, cost, d, report, fill);
    if (st == AC_OK && plot(dir, cost, report) != AC_OK) {
        /* the plot is a convenience: the numbers are in search.csv */
        ac_warn("%s", ac_error_message());
        ac_clear_error();
    }
    return st;
}
