/* Probes: where a forward's time goes, layer by layer, and how much memory it holds.
 *
 * A probe is an interface (a table of callbacks and an opaque state), so each device
 * brings its own implementation behind the same calls:
 *   - the CPU probe (probes/cpu) reads CLOCK_MONOTONIC at every begin and end and keeps
 *     one span per site in a preallocated buffer;
 *   - a CUPTI probe (with the CUDA backend) pushes an external correlation id that encodes
 *     the site at begin and pops it at end, so every kernel record CUPTI delivers carries
 *     its site; under CUDA graphs, begin and end during capture record which graph nodes
 *     belong to the site instead, and replays map kernel records to sites by node id.
 *     Its collect callback flushes CUPTI's buffers and turns kernel records into the same
 *     spans (first kernel start to last kernel end of a site, or the sum of its kernels).
 *
 * The runtime calls begin and end around the embedding lookup, around every block (pre-
 * norm, mixer and residual add) and around the final norm with the LM head; a serving
 * loop may add sites of its own (sampling, the whole step). With no probe set the cost is
 * one pointer test per site. The phase (prefill, decode step t) is not something the
 * runtime knows: the caller sets it on the probe before each forward. */
#ifndef AUTOCOMPRESS_PROBE_H
#define AUTOCOMPRESS_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_PHASE_PREFILL = 0, /* the request's input tokens (step 0) */
    AC_PHASE_DECODE = 1,  /* decode step t >= 1: one new token per sequence */
    AC_PHASE_CONTEXT = 2, /* building the cached context before the request (untimed) */
    AC_PHASE_COUNT
} ac_phase;

/* What a span covers. The first four are the block kinds (same values as ac_block_kind). */
typedef enum {
    AC_SITE_MAMBA = AC_BLOCK_MAMBA,
    AC_SITE_ATTENTION = AC_BLOCK_ATTENTION,
    AC_SITE_MLP = AC_BLOCK_MLP,
    AC_SITE_MOE = AC_BLOCK_MOE,
    AC_SITE_EMBEDDING, /* token embedding lookup */
    AC_SITE_LM_HEAD,   /* final norm and LM head */
    AC_SITE_SAMPLE,    /* choosing the next tokens from the logits (serving loop) */
    AC_SITE_STEP,      /* one whole step: forward and sampling (serving loop) */
    AC_SITE_COUNT
} ac_site_kind;

typedef struct {
    ac_phase phase;
    int step;          /* 0 for prefill and context; t for decode step t */
    int layer;         /* block index; -1 for sites that are not a block */
    ac_site_kind kind;
} ac_probe_site;

/* One measured interval, in nanoseconds since the probe was created (or reset). */
typedef struct {
    ac_probe_site site;
    int64_t start_ns;
    int64_t end_ns;
} ac_span;

/* Bytes held at one moment: the runtime's own accounting by category and, when the
 * platform tells, what the process (host) or device really holds. */
typedef struct {
    size_t weights;     /* W: the weight arena */
    size_t kv_cache;    /* C: K and V rows allocated in the caches */
    size_t state;       /* P: Mamba conv and SSM state */
    size_t activations; /* R: activation, scratch (MoE buffers included) and workspace */
    size_t resident;    /* measured: process resident bytes (CPU) or device bytes in use; 0 unknown */
} ac_memory_sample;

typedef struct {
    /* Required. begin and end come in nested pairs (a step around its layers). */
    void (*begin)(void *state, const ac_probe_site *site);
    void (*end)(void *state, const ac_probe_site *site);
    /* Optional: a memory sample taken at `site` (usually after a forward). */
    void (*memory)(void *state, const ac_probe_site *site, const ac_memory_sample *sample);
    /* Optional: the spans measured so far, oldest first (a device probe flushes and
     * converts its records here). The array stays valid until the next reset. */
    ac_status (*collect)(void *state, const ac_span **spans, size_t *count);
    /* Optional: forget every span and sample and restart the clock. */
    void (*reset)(void *state);
    /* Optional: frees the state. */
    void (*destroy)(void *state);
} ac_probe_ops;

/* Also declared by runtime.h; the guard keeps the typedef single (a repeated typedef is
 * valid C11 and C++, not C99). */
#ifndef AC_PROBE_TYPEDEF
#define AC_PROBE_TYPEDEF
typedef struct ac_probe ac_probe;
#endif

struct ac_probe {
    const ac_probe_ops *ops;
    void *state;
    ac_phase phase; /* set by the caller before each forward: ac_probe_set_phase */
    int step;
};

static inline void ac_probe_set_phase(ac_probe *probe, ac_phase phase, int step)
{
    probe->phase = phase;
    probe->step = step;
}

static inline void ac_probe_begin(ac_probe *probe, int layer, ac_site_kind kind)
{
    ac_probe_site s = {probe->phase, probe->step, layer, kind};
    probe->ops->begin(probe->state, &s);
}

static inline void ac_probe_end(ac_probe *probe, int layer, ac_site_kind kind)
{
    ac_probe_site s = {probe->phase, probe->step, layer, kind};
    probe->ops->end(probe->state, &s);
}

void ac_probe_memory(ac_probe *probe, const ac_memory_sample *sample);
ac_status ac_probe_collect(ac_probe *probe, const ac_span **spans, size_t *count);
void ac_probe_reset(ac_probe *probe);
/* Frees the probe and its state (NULL is fine). */
void ac_probe_free(ac_probe *probe);

/* The CUPTI probe (probes/cupti; only in builds with the CUDA backend, whose probe_create
 * returns it): enables CUPTI's Activity API for this process and returns a probe that
 * turns its records into spans. One at a time per process (CUPTI's buffers are
 * process-wide); create it before any graph whose replays it should split is captured.
 * AC_ERR_UNSUPPORTED when another is active, when CUPTI at run time is not the version
 * this was built against, or when another tool holds CUPTI's callbacks. */
ac_status ac_cupti_probe_create(ac_probe **probe);

const char *ac_phase_name(ac_phase phase);  /* "prefill", "decode", "context" */
const char *ac_site_name(ac_site_kind kind); /* "mamba", ..., "embedding", "lm_head", "sample", "step" */

/* ---- the CPU probe ---- */

/* A probe that keeps up to `capacity` spans (further spans are counted, not kept) and the
 * element-wise peak of the memory samples it is given. */
ac_status ac_cpu_probe_create(size_t capacity, ac_probe **probe);
/* Spans that did not fit since the last reset. */
size_t ac_cpu_probe_dropped(const ac_probe *probe);
/* The element-wise maximum of every memory sample since the last reset (zeros if none). */
ac_memory_sample ac_cpu_probe_memory_peak(const ac_probe *probe);

#ifdef __cplusplus
}
#endif
#endif
