/* Progress of long work (probe, search, distill): a bar with rate and ETA on a TTY,
 * plain lines every AC_PROGRESS_LINE_INTERVAL_S seconds elsewhere (a log), or one JSON
 * object per line for machines (`--progress=json`). */
#ifndef AUTOCOMPRESS_PROGRESS_H
#define AUTOCOMPRESS_PROGRESS_H

#include <stdio.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_PROGRESS_AUTO, /* a bar when the stream is a TTY, plain lines otherwise */
    AC_PROGRESS_BAR,
    AC_PROGRESS_JSON,
    AC_PROGRESS_OFF,
    AC_PROGRESS_LINES /* "profile: 12/85 runs (14%), 2m31s elapsed, about 8m left" */
} ac_progress_mode;

/* Seconds between two plain lines; the environment's AC_PROGRESS_INTERVAL (seconds, a
 * number >= 0) replaces it, so that a test sees lines from a run of a few seconds. */
#define AC_PROGRESS_LINE_INTERVAL_S 10.0

typedef struct ac_progress ac_progress;

/* Parses "auto", "bar", "lines", "json" or "off". */
ac_status ac_progress_mode_from_name(const char *name, ac_progress_mode *mode);

/* `total` is in `unit`s (tokens, steps, rows); a total <= 0 means unknown (no ETA). */
ac_status ac_progress_init(ac_progress **progress, const char *task, double total,
                           const char *unit, ac_progress_mode mode, FILE *stream);
/* Shortest time between two reports (default 0.1 s for a bar, 1 s for JSON, the line
 * interval above for plain lines). */
void ac_progress_set_interval(ac_progress *progress, double seconds);
/* A named value shown with the next report (loss, lr, ...); at most 8 names. */
void ac_progress_metric(ac_progress *progress, const char *name, double value);
/* Reports `done` units so far, no more often than the interval. */
void ac_progress_update(ac_progress *progress, double done);
/* The same with an explicit clock (seconds since init), for tests. */
void ac_progress_update_at(ac_progress *progress, double done, double now_s);
/* Reports the final state (always) and ends the bar's line. Plain lines also say when
 * the work starts (at init). */
void ac_progress_finish(ac_progress *progress);
void ac_progress_free(ac_progress *progress);

#ifdef __cplusplus
}
#endif

#endif
