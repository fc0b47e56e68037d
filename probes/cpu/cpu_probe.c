/* The CPU probe: CLOCK_MONOTONIC at every begin and end, one span per site in a buffer
 * allocated up front (recording never allocates), and the peak of the memory samples. */
#include "autocompress/probe.h"

#include "autocompress/clock.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 16 };

typedef struct {
    ac_span *spans;
    size_t capacity, count, dropped;
    int64_t origin_ns;
    /* open sites: begin pushes the start time, end pops it */
    int depth;
    int64_t open_start[MAX_DEPTH];
    ac_memory_sample peak;
} cpu_probe;

static void cpu_begin(void *state, const ac_probe_site *site)
{
    (void)site;
    cpu_probe *p = state;
    int64_t now = ac_monotonic_ns() - p->origin_ns;
    if (p->depth < MAX_DEPTH)
        p->open_start[p->depth] = now;
    p->depth++;
}

static void cpu_end(void *state, const ac_probe_site *site)
{
    cpu_probe *p = state;
    int64_t now = ac_monotonic_ns() - p->origin_ns;
    if (p->depth == 0) /* an end without a begin: nothing to measure */
        return;
    p->depth--;
    if (p->depth >= MAX_DEPTH || p->count == p->capacity) {
        p->dropped++;
        return;
    }
    ac_span *s = &p->spans[p->count++];
    s->site = *site;
    s->start_ns = p->open_start[p->depth];
    s->end_ns = now;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static void cpu_memory(void *state, const ac_probe_site *site, const ac_memory_sample *m)
{
    (void)site;
    cpu_probe *p = state;
    p->peak.weights = max_size(p->peak.weights, m->weights);
    p->peak.kv_cache = max_size(p->peak.kv_cache, m->kv_cache);
    p->peak.state = max_size(p->peak.state, m->state);
    p->peak.activations = max_size(p->peak.activations, m->activations);
    p->peak.resident = max_size(p->peak.resident, m->resident);
}

static ac_status cpu_collect(void *state, const ac_span **spans, size_t *count)
{
    cpu_probe *p = state;
    *spans = p->spans;
    *count = p->count;
    return AC_OK;
}

static void cpu_reset(void *state)
{
    cpu_probe *p = state;
    p->count = 0;
    p->dropped = 0;
    p->depth = 0;
    memset(&p->peak, 0, sizeof p->peak);
    p->origin_ns = ac_monotonic_ns();
}

static void cpu_destroy(void *state)
{
    cpu_probe *p = state;
    if (p)
        free(p->spans);
    free(p);
}

static const ac_probe_ops cpu_ops = {
    .begin = cpu_begin,
    .end = cpu_end,
    .memory = cpu_memory,
    .collect = cpu_collect,
    .reset = cpu_reset,
    .destroy = cpu_destroy,
};

ac_status ac_cpu_probe_create(size_t capacity, ac_probe **probe)
{
    *probe = NULL;
    cpu_probe *p = calloc(1, sizeof *p);
    ac_probe *out = calloc(1, sizeof *out);
    if (p)
        p->spans = malloc((capacity ? capacity : 1) * sizeof *p->spans);
    if (!p || !out || !p->spans) {
        cpu_destroy(p);
        free(out);
        return ac_fail(AC_ERR_NOMEM, "cpu probe: cannot allocate %zu spans", capacity);
    }
    /* touch the buffer now, so recording a span never takes a page fault */
    memset(p->spans, 0, (capacity ? capacity : 1) * sizeof *p->spans);
    p->capacity = capacity;
    p->origin_ns = ac_monotonic_ns();
    out->ops = &cpu_ops;
    out->state = p;
    out->phase = AC_PHASE_PREFILL;
    *probe = out;
    return AC_OK;
}

size_t ac_cpu_probe_dropped(const ac_probe *probe)
{
    const cpu_probe *p = probe->state;
    return p->dropped;
}

ac_memory_sample ac_cpu_probe_memory_peak(const ac_probe *probe)
{
    const cpu_probe *p = probe->state;
    return p->peak;
}
