/* Chrome trace JSON (the Trace Event Format that Perfetto and chrome://tracing open) of
 * probe spans: one process per profiling run, one track (thread) per site kind, each
 * prefill and decode step a slice on the "steps" track and each layer a slice on its
 * kind's track. */
#ifndef AUTOCOMPRESS_TRACE_H
#define AUTOCOMPRESS_TRACE_H

#include <stddef.h>

#include "autocompress/probe.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;          /* the process name, e.g. "run 3: hidden 224" */
    const ac_span *spans;
    size_t n_spans;
    /* optional per-layer labels (e.g. "moe E16 F128 S256"); NULL: the kind's name */
    const char *const *layer_labels;
    int n_layers;
} ac_trace_run;

/* Writes the runs to `path` (through PATH.tmp and a rename), runs one after another on
 * the time axis. */
ac_status ac_trace_write_chrome(const char *path, const ac_trace_run *runs, int n_runs);

#ifdef __cplusplus
}
#endif
#endif
