#include "autocompress/progress.h"

#include "autocompress/clock.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_METRICS = 8, NAME_MAX_LEN = 32, BAR_WIDTH = 30 };

struct ac_progress {
    char task[64];
    char unit[16];
    double total;
    ac_progress_mode mode;
    FILE *stream;
    double interval_s;
    double start_s;
    double last_report_s;
    double done;
    int metric_count;
    char metric_names[MAX_METRICS][NAME_MAX_LEN];
    double metric_values[MAX_METRICS];
};

ac_status ac_progress_mode_from_name(const char *name, ac_progress_mode *mode)
{
    static const char *const names[] = {"auto", "bar", "json", "off", "lines"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, names[i])) {
            *mode = (ac_progress_mode)i;
            return AC_OK;
        }
    return ac_fail(AC_ERR_INVALID, "--progress: unknown mode '%s' (expected auto, bar, lines, json or off)", name);
}

/* 1234567 -> "1.23M": rates span many orders of magnitude. */
static void format_quantity(char *out, size_t size, double value)
{
    static const char suffixes[] = " kMGT";
    int i = 0;
    while (fabs(value) >= 1000.0 && i < 4) {
        value /= 1000.0;
        i++;
    }
    if (i == 0)
        snprintf(out, size, "%.1f", value);
    else
        snprintf(out, size, "%.2f%c", value, suffixes[i]);
}

static void format_duration(char *out, size_t size, double seconds)
{
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(out, size, "--:--");
        return;
    }
    long s = lround(seconds);
    if (s >= 3600)
        snprintf(out, size, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
    else
        snprintf(out, size, "%02ld:%02ld", s / 60, s % 60);
}

/* Whole counts as they are ("85"), large or fractional ones as format_quantity does. */
static void format_count(char *out, size_t size, double value)
{
    if (value == floor(value) && fabs(value) < 10000.0)
        snprintf(out, size, "%.0f", value);
    else
        format_quantity(out, size, value);
}

/* "45s", "2m31s", "1h02m": a log line's durations. */
static void format_elapsed(char *out, size_t size, double seconds)
{
    long s = lround(seconds);
    if (s >= 3600)
        snprintf(out, size, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60)
        snprintf(out, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(out, size, "%lds", s);
}

/* AC_PROGRESS_LINE_INTERVAL_S, or AC_PROGRESS_INTERVAL when that is a number >= 0. */
static double line_interval(void)
{
    const char *env = getenv("AC_PROGRESS_INTERVAL");
    char *end;
    double s = env ? strtod(env, &end) : -1.0;
    return env && end != env && !*end && s >= 0 ? s : AC_PROGRESS_LINE_INTERVAL_S;
}

static void start_lines(ac_progress *p)
{
    char total[32];
    format_count(total, sizeof total, p->total);
    if (p->total > 0)
        fprintf(p->stream, "%s: started, %s %s to do\n", p->task, total, p->unit);
    else
        fprintf(p->stream, "%s: started\n", p->task);
    fflush(p->stream);
}

ac_status ac_progress_init(ac_progress **progress, const char *task, double total,
                           const char *unit, ac_progress_mode mode, FILE *stream)
{
    ac_progress *p = calloc(1, sizeof *p);
    if (!p)
        return ac_fail(AC_ERR_NOMEM, "progress: out of memory");
    snprintf(p->task, sizeof p->task, "%s", task);
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    p->total = total;
    p->stream = stream ? stream : stderr;
    if (mode == AC_PROGRESS_AUTO)
        mode = isatty(fileno(p->stream)) ? AC_PROGRESS_BAR : AC_PROGRESS_LINES;
    p->mode = mode;
    p->interval_s = mode == AC_PROGRESS_JSON ? 1.0 : mode == AC_PROGRESS_LINES ? line_interval() : 0.1;
    p->start_s = ac_monotonic_s();
    /* plain lines: the start line stands for the first report */
    p->last_report_s = mode == AC_PROGRESS_LINES ? 0.0 : -INFINITY;
    if (mode == AC_PROGRESS_LINES)
        start_lines(p);
    *progress = p;
    return AC_OK;
}

void ac_progress_set_interval(ac_progress *progress, double seconds) { progress->interval_s = seconds; }

void ac_progress_metric(ac_progress *progress, const char *name, double value)
{
    for (int i = 0; i < progress->metric_count; i++)
        if (!strcmp(progress->metric_names[i], name)) {
            progress->metric_values[i] = value;
            return;
        }
    if (progress->metric_count == MAX_METRICS)
        return;
    snprintf(progress->metric_names[progress->metric_count], NAME_MAX_LEN, "%s", name);
    progress->metric_values[progress->metric_count++] = value;
}

static double eta_seconds(const ac_progress *p, double rate)
{
    if (p->total <= 0 || rate <= 0)
        return NAN;
    return fmax(0.0, (p->total - p->done) / rate);
}

static void draw_bar(ac_progress *p, double elapsed, int final)
{
    double rate = elapsed > 0 ? p->done / elapsed : 0.0;
    char rate_text[32], done_text[32], total_text[32], eta_text[32];
    format_quantity(rate_text, sizeof rate_text, rate);
    format_quantity(done_text, sizeof done_text, p->done);
    format_duration(eta_text, sizeof eta_text, final ? elapsed : eta_seconds(p, rate));

    fprintf(p->stream, "\r%s ", p->task);
    if (p->total > 0) {
        double fraction = fmin(1.0, p->done / p->total);
        int filled = (int)(fraction * BAR_WIDTH);
        fputc('[', p->stream);
        for (int i = 0; i < BAR_WIDTH; i++)
            fputc(i < filled ? '#' : '.', p->stream);
        format_quantity(total_text, sizeof total_text, p->total);
        fprintf(p->stream, "] %5.1f%% %s/%s %s", 100.0 * fraction, done_text, total_text, p->unit);
    } else {
        fprintf(p->stream, "%s %s", done_text, p->unit);
    }
    fprintf(p->stream, "  %s %s/s  %s %s", rate_text, p->unit, final ? "took" : "ETA", eta_text);
    for (int i = 0; i < p->metric_count; i++)
        fprintf(p->stream, "  %s=%.4g", p->metric_names[i], p->metric_values[i]);
    fputs(final ? "\n" : "\x1b[K", p->stream);
    fflush(p->stream);
}

static void print_line(ac_progress *p, double elapsed, int final)
{
    char done[32], total[32], took[32], left[32];
    format_count(done, sizeof done, p->done);
    format_count(total, sizeof total, p->total);
    format_elapsed(took, sizeof took, elapsed);
    fprintf(p->stream, "%s: %s%s", p->task, final ? "done, " : "", done);
    if (p->total > 0)
        fprintf(p->stream, "/%s %s (%.0f%%)", total, p->unit, 100.0 * fmin(1.0, p->done / p->total));
    else
        fprintf(p->stream, " %s", p->unit);
    fprintf(p->stream, ", %s %s", took, final ? "in all" : "elapsed");
    double eta = final ? NAN : eta_seconds(p, elapsed > 0 ? p->done / elapsed : 0.0);
    if (isfinite(eta)) {
        format_elapsed(left, sizeof left, eta);
        fprintf(p->stream, ", about %s left", left);
    }
    for (int i = 0; i < p->metric_count; i++)
        fprintf(p->stream, ", %s=%.4g", p->metric_names[i], p->metric_values[i]);
    fputc('\n', p->stream);
    fflush(p->stream);
}

static void emit_json(ac_progress *p, double elapsed, int final)
{
    double rate = elapsed > 0 ? p->done / elapsed : 0.0;
    double eta = final ? 0.0 : eta_seconds(p, rate);
    cJSON *line = cJSON_CreateObject();
    if (!line)
        return;
    cJSON_AddStringToObject(line, "task", p->task);
    cJSON_AddNumberToObject(line, "done", p->done);
    if (p->total > 0)
        cJSON_AddNumberToObject(line, "total", p->total);
    cJSON_AddStringToObject(line, "unit", p->unit);
    cJSON_AddNumberToObject(line, "elapsed_s", elapsed);
    cJSON_AddNumberToObject(line, "rate", rate);
    if (isfinite(eta))
        cJSON_AddNumberToObject(line, "eta_s", eta);
    for (int i = 0; i < p->metric_count; i++)
        cJSON_AddNumberToObject(line, p->metric_names[i], p->metric_values[i]);
    cJSON_AddBoolToObject(line, "final", final);
    char *text = cJSON_PrintUnformatted(line);
    if (text) {
        fprintf(p->stream, "%s\n", text);
        fflush(p->stream);
        free(text);
    }
    cJSON_Delete(line);
}

static void report(ac_progress *p, double elapsed, int final)
{
    if (p->mode == AC_PROGRESS_BAR)
        draw_bar(p, elapsed, final);
    else if (p->mode == AC_PROGRESS_JSON)
        emit_json(p, elapsed, final);
    else if (p->mode == AC_PROGRESS_LINES)
        print_line(p, elapsed, final);
    p->last_report_s = elapsed;
}

void ac_progress_update_at(ac_progress *progress, double done, double now_s)
{
    progress->done = done;
    if (now_s - progress->last_report_s >= progress->interval_s)
        report(progress, now_s, 0);
}

void ac_progress_update(ac_progress *progress, double done)
{
    ac_progress_update_at(progress, done, ac_monotonic_s() - progress->start_s);
}

void ac_progress_finish(ac_progress *progress)
{
    report(progress, ac_monotonic_s() - progress->start_s, 1);
}

void ac_progress_free(ac_progress *progress) { free(progress); }
