/* Chrome trace export (Trace Event Format, JSON object form): "X" complete events in
 * microseconds, "M" metadata naming processes (runs) and threads (tracks). */
#include "autocompress/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS_TRACK = 0 }; /* then 1 + site kind for every other kind */

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void meta(FILE *f, int *first, const char *what, int pid, int tid, const char *name, int sort)
{
    fprintf(f, "%s\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d", *first ? "" : ",", what, pid);
    if (tid >= 0)
        fprintf(f, ",\"tid\":%d", tid);
    fprintf(f, ",\"args\":{");
    if (name) {
        fprintf(f, "\"name\":");
        put_string(f, name);
    } else {
        fprintf(f, "\"sort_index\":%d", sort);
    }
    fprintf(f, "}}");
    *first = 0;
}

static void write_run(FILE *f, int *first, int pid, const ac_trace_run *run, double offset_us, double *end_us)
{
    meta(f, first, "process_name", pid, -1, run->name ? run->name : "run", 0);
    meta(f, first, "process_sort_index", pid, -1, NULL, pid);
    meta(f, first, "thread_name", pid, STEPS_TRACK, "steps", 0);
    meta(f, first, "thread_sort_index", pid, STEPS_TRACK, NULL, 0);
    for (int k = 0; k < AC_SITE_STEP; k++) {
        meta(f, first, "thread_name", pid, 1 + k, ac_site_name((ac_site_kind)k), 0);
        meta(f, first, "thread_sort_index", pid, 1 + k, NULL, 1 + k);
    }
    int64_t origin = run->n_spans ? run->spans[0].start_ns : 0;
    for (size_t i = 0; i < run->n_spans; i++)
        if (run->spans[i].start_ns < origin)
            origin = run->spans[i].start_ns;
    *end_us = offset_us;
    for (size_t i = 0; i < run->n_spans; i++) {
        const ac_span *s = &run->spans[i];
        double ts = offset_us + 1e-3 * (double)(s->start_ns - origin), dur = 1e-3 * (double)(s->end_ns - s->start_ns);
        int tid = s->site.kind == AC_SITE_STEP ? STEPS_TRACK : 1 + (int)s->site.kind;
        char name[128];
        if (s->site.kind == AC_SITE_STEP && s->site.phase == AC_PHASE_DECODE)
            snprintf(name, sizeof name, "decode %d", s->site.step);
        else if (s->site.kind == AC_SITE_STEP)
            snprintf(name, sizeof name, "%s", ac_phase_name(s->site.phase));
        else if (s->site.layer >= 0 && s->site.layer < run->n_layers && run->layer_labels)
            snprintf(name, sizeof name, "%s", run->layer_labels[s->site.layer]);
        else
            snprintf(name, sizeof name, "%s", ac_site_name(s->site.kind));
        fprintf(f, ",\n{\"name\":");
        put_string(f, name);
        fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"phase\":\"%s\",\"step\":%d,\"layer\":%d}}",
                ac_phase_name(s->site.phase), ts, dur, pid, tid, ac_phase_name(s->site.phase), s->site.step,
                s->site.layer);
        if (ts + dur > *end_us)
            *end_us = ts + dur;
    }
}

ac_status ac_trace_write_chrome(const char *path, const ac_trace_run *runs, int n_runs)
{
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        ac_status st = ac_fail(AC_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    int first = 1;
    double offset = 0;
    for (int i = 0; i < n_runs; i++) {
        double end = offset;
        write_run(f, &first, i + 1, &runs[i], offset, &end);
        offset = end + 1000.0; /* 1 ms between runs */
    }
    fprintf(f, "\n]}\n");
    int ok = !ferror(f);
    ok = (fclose(f) == 0) && ok;
    ac_status st = AC_OK;
    if (!ok)
        st = ac_fail(AC_ERR_IO, "%s: write error: %s", tmp, strerror(errno));
    else if (rename(tmp, path) != 0)
        st = ac_fail(AC_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    if (st != AC_OK)
        remove(tmp);
    free(tmp);
    return st;
}
