/* The CUPTI probe: each site's device time, from CUPTI's Activity API in-process.
 *
 * Eager launches. begin pushes a fresh external correlation id (one per site occurrence)
 * and end pops it and logs a mark (site, id, the enclosing site's id). While an id is on
 * top, CUPTI precedes the API record of every driver and runtime call with an external-
 * correlation record (id -> the call's correlation id), and the kernels, memcpys and
 * memsets the call starts carry that correlation id: record -> call -> id -> site.
 *
 * CUDA graphs. There is no mode to choose: the probe tells, record by record, whether
 * work ran eagerly or as a node of a graph launch (graphNodeId != 0), and both may mix in
 * one run. To split replays it follows, through CUPTI's callback API:
 *   - cuStreamBeginCapture / cuStreamEndCapture: sites begun and ended while a stream
 *     captures are marked `captured` (their launches never run as such, so they are no
 *     occurrence);
 *   - GRAPHNODE_CREATED during capture: the node belongs to the innermost open site;
 *   - GRAPHNODE_CLONED between GRAPHEXEC_CREATE_STARTING and GRAPHEXEC_CREATED (an
 *     instantiation): the executable graph's node inherits its original's site, and gets
 *     the executable graph's id when GRAPHEXEC_CREATED gives it;
 *   - cuGraphLaunch: the launch's correlation id (which every record of the replay
 *     carries), its executable graph, the phase and step set on the probe right then,
 *     and how many marks ended before it (where its sites go among the spans).
 * A replayed record then belongs to (the launch's phase and step, its node's layer and
 * kind), and the launch's sites fold into the site the launch call was made in (a
 * serving loop's step). Node-level records are CUPTI's default with CONCURRENT_KERNEL;
 * CUPTI_ACTIVITY_KIND_GRAPH_TRACE (one record per launch) must stay off.
 *
 * With the runtime. Nothing changes in how the runtime calls the probe: begin and end
 * around embedding, blocks and LM head, and the caller's ac_probe_set_phase before each
 * forward. Under graphs the runtime captures a step's forward (its begin and end calls
 * then log the captured sites), instantiates it, and the caller sets the phase and step
 * before each replay exactly as before an eager forward (the launch reads them). The
 * probe must exist before the capture, or the replays' work lands in the site their
 * launch call was made in (the serving loop's step), unsplit.
 *
 * What collect returns. It synchronizes the device, flushes CUPTI's buffers and gives the
 * spans of a CPU probe, in the same order (by site end), one per site occurrence; a span's
 * end - start is the sum of its records' durations (and of the sites nested in it), its
 * start the first record's start since the probe's origin. The sum, not first start to
 * last end: on one stream the work does not overlap, so the sum is the device time the
 * site keeps the GPU busy, it adds up exactly over nesting (a step's own time is its span
 * minus its sites'), and it leaves out the host's launch gaps, which eager launches show
 * and graph replays do not. The span from first start to last end is kept beside it
 * (ac_cupti_probe_attribution). Work whose correlation leads to no site is summed as
 * unattributed, not dropped. Host-only work (a sampler on the CPU) has no device time. */
#include "probes/cupti/cupti_probe.h"

#include "autocompress/log.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(AC_CUPTI_EXTERNAL_KIND == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, "the probe's external kind");

enum { MAX_DEPTH = 16, BUFFER_BYTES = 8 << 20, BUFFER_ALIGN = 8, MESSAGE_MAX = 512 };

typedef struct {
    uint64_t node_id;
    ac_probe_site site;
} captured_node;

typedef struct {
    ac_probe_site site;
    uint64_t external_id;
    int captured; /* a stream was capturing when the site began */
} open_site;

typedef struct {
    ac_probe *owner; /* its phase and step at each graph launch */
    /* the log, the dropped count and the deferred failure: CUPTI hands buffers over on
     * a thread of its own */
    pthread_mutex_t lock;
    ac_cupti_log log;
    size_t dropped;
    ac_status deferred; /* the first failure inside a callback, returned by collect */
    char deferred_message[MESSAGE_MAX];
    CUpti_SubscriberHandle subscriber;
    int capturing;        /* streams between cuStreamBeginCapture and cuStreamEndCapture */
    int instantiating;    /* between GRAPHEXEC_CREATE_STARTING and GRAPHEXEC_CREATED */
    size_t first_pending; /* log nodes from here await their executable graph's id */
    captured_node *captured;
    size_t n_captured, cap_captured;
    uint64_t next_external_id;
    open_site open[MAX_DEPTH];
    int depth;
    int64_t origin_ns; /* CUPTI timestamp at creation or reset */
    ac_cupti_attribution result;
    ac_span *spans;
    size_t cap_spans;
    ac_span **retired; /* earlier span arrays, kept valid until the reset as probe.h says */
    size_t n_retired;
} cupti_probe;

/* CUPTI's buffer callbacks take no user data, hence one probe per process. */
static cupti_probe *active;

static const char *cupti_text(CUptiResult result)
{
    const char *text = NULL;
    return cuptiGetResultString(result, &text) == CUPTI_SUCCESS && text ? text : "unknown CUPTI error";
}

static ac_status cupti_failed(CUptiResult result, const char *call)
{
    return ac_fail(AC_ERR_DEVICE, "cupti probe: %s: %s", call, cupti_text(result));
}

/* Keeps the first failure met inside a callback (the caller holds the lock). */
static void defer(cupti_probe *p, ac_status st)
{
    if (st == AC_OK || p->deferred != AC_OK)
        return;
    p->deferred = st;
    snprintf(p->deferred_message, sizeof p->deferred_message, "%s", ac_error_message());
}

static void defer_locked(cupti_probe *p, ac_status st)
{
    pthread_mutex_lock(&p->lock);
    defer(p, st);
    pthread_mutex_unlock(&p->lock);
}

/* ---- activity buffers ---- */

static size_t record_size(CUpti_ActivityKind kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
    default: return 0;
    }
}

static ac_status log_device_work(ac_cupti_log *log, ac_cupti_op op, uint32_t correlation, uint64_t start,
                                 uint64_t end, uint64_t node, uint32_t graph)
{
    ac_cupti_record r = {op, correlation, start, end, node, graph};
    return ac_cupti_log_record(log, &r);
}

static ac_status parse_record(const CUpti_Activity *a, ac_cupti_log *log)
{
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *e = (const void *)a;
        if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2)
            return AC_OK; /* another tool's ids */
        ac_cupti_link link = {e->externalId, e->correlationId};
        return ac_cupti_log_link(log, &link);
    }
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const void *)a;
        return log_device_work(log, AC_CUPTI_KERNEL, k->correlationId, k->start, k->end, k->graphNodeId, k->graphId);
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const void *)a;
        return log_device_work(log, AC_CUPTI_MEMCPY, m->correlationId, m->start, m->end, m->graphNodeId, m->graphId);
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)a;
        return log_device_work(log, AC_CUPTI_MEMSET, m->correlationId, m->start, m->end, m->graphNodeId, m->graphId);
    }
    default: return AC_OK; /* API records: only the correlation records before them matter */
    }
}

ac_status ac_cupti_parse_buffer(const uint8_t *buf, size_t valid, ac_cupti_log *log)
{
    CUpti_Activity *a = NULL;
    size_t end = 0; /* where the last whole record ends */
    int sized = 1;  /* whether its size is known (a kind this probe reads or skips) */
    for (;;) {
        /* CUPTI only reads the buffer; its signature is not const */
        CUptiResult r = cuptiActivityGetNextRecord((uint8_t *)buf, valid, &a);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED)
            break;
        if (r != CUPTI_SUCCESS)
            return ac_fail(AC_ERR_INVALID, "cupti buffer: no readable record after byte %zu of %zu: %s", end, valid,
                           cupti_text(r));
        size_t size = record_size(a->kind);
        end = (size_t)((const uint8_t *)a - buf) + size;
        sized = size != 0;
        ac_status st = parse_record(a, log);
        if (st != AC_OK)
            return st;
    }
    /* CUPTI stops silently before a record the valid size cuts */
    if (sized && end != valid)
        return ac_fail(AC_ERR_INVALID, "cupti buffer: %zu bytes after the last whole record (which ends at byte %zu of %zu): a truncated record",
                       valid - end, end, valid);
    return AC_OK;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(BUFFER_ALIGN, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0; /* no buffer: CUPTI drops records and counts them */
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    cupti_probe *p = active;
    if (p) {
        size_t dropped = 0;
        pthread_mutex_lock(&p->lock);
        defer(p, ac_cupti_parse_buffer(buffer, valid, &p->log));
        if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS)
            p->dropped += dropped;
        pthread_mutex_unlock(&p->lock);
    }
    free(buffer);
}

/* Waits for the device, then has CUPTI hand over every buffer (blocking). */
static ac_status flush(void)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return ac_fail(AC_ERR_DEVICE, "cupti probe: cudaDeviceSynchronize: %s", cudaGetErrorString(e));
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    return r == CUPTI_SUCCESS ? AC_OK : cupti_failed(r, "cuptiActivityFlushAll");
}

/* ---- graphs, through the callback API ---- */

static ac_status grow_captured(cupti_probe *p)
{
    if (p->n_captured < p->cap_captured)
        return AC_OK;
    size_t cap = p->cap_captured ? 2 * p->cap_captured : 256;
    captured_node *grown = realloc(p->captured, cap * sizeof *grown);
    if (!grown)
        return ac_fail(AC_ERR_NOMEM, "cupti probe: cannot remember %zu captured graph nodes", cap);
    p->captured = grown;
    p->cap_captured = cap;
    return AC_OK;
}

/* A node made inside a site (while a stream captures it) belongs to the innermost one. */
static ac_status remember_captured_node(cupti_probe *p, CUgraphNode node)
{
    if (p->depth == 0 || p->depth > MAX_DEPTH || p->instantiating)
        return AC_OK; /* outside every tagged site, or a copy an instantiation makes */
    captured_node c = {0, p->open[p->depth - 1].site};
    CUptiResult r = cuptiGetGraphNodeId(node, &c.node_id);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiGetGraphNodeId");
    ac_status st = grow_captured(p);
    if (st == AC_OK)
        p->captured[p->n_captured++] = c;
    return st;
}

static const ac_probe_site *captured_site(const cupti_probe *p, uint64_t node_id)
{
    for (size_t i = 0; i < p->n_captured; i++)
        if (p->captured[i].node_id == node_id)
            return &p->captured[i].site;
    return NULL;
}

/* A node an instantiation copies inherits its original's site; the executable graph's
 * id comes later, with GRAPHEXEC_CREATED. */
static ac_status remember_exec_node(cupti_probe *p, CUgraphNode node, CUgraphNode original)
{
    if (!p->instantiating)
        return AC_OK; /* a plain graph clone: nothing launches it as it is */
    uint64_t node_id = 0, original_id = 0;
    CUptiResult r = cuptiGetGraphNodeId(node, &node_id);
    if (r == CUPTI_SUCCESS)
        r = cuptiGetGraphNodeId(original, &original_id);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiGetGraphNodeId");
    const ac_probe_site *site = captured_site(p, original_id);
    if (!site)
        return AC_OK; /* captured outside every site: its work goes to the launch call's site */
    ac_cupti_node n = {node_id, 0, site->layer, site->kind};
    pthread_mutex_lock(&p->lock);
    ac_status st = ac_cupti_log_node(&p->log, &n);
    pthread_mutex_unlock(&p->lock);
    return st;
}

static ac_status name_exec_graph(cupti_probe *p, CUgraphExec exec)
{
    uint32_t id = 0;
    CUptiResult r = cuptiGetGraphExecId(exec, &id);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiGetGraphExecId");
    pthread_mutex_lock(&p->lock);
    for (size_t i = p->first_pending; i < p->log.n_nodes; i++)
        p->log.nodes[i].graph_exec_id = id;
    p->first_pending = p->log.n_nodes;
    pthread_mutex_unlock(&p->lock);
    return AC_OK;
}

static void on_graph_resource(cupti_probe *p, CUpti_CallbackId cbid, const CUpti_ResourceData *resource)
{
    const CUpti_GraphData *g = resource->resourceDescriptor;
    ac_status st = AC_OK;
    switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED: st = remember_captured_node(p, g->node); break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING:
        p->instantiating = 1;
        pthread_mutex_lock(&p->lock);
        p->first_pending = p->log.n_nodes;
        pthread_mutex_unlock(&p->lock);
        break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED: st = remember_exec_node(p, g->node, g->originalNode); break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED:
        p->instantiating = 0;
        st = name_exec_graph(p, g->graphExec);
        break;
    default: break;
    }
    defer_locked(p, st);
}

/* A replay: every record it makes carries the launch call's correlation id. */
static ac_status log_launch(cupti_probe *p, CUgraphExec exec, uint32_t correlation)
{
    if (p->capturing)
        return AC_OK; /* launched into a capture: a child graph, not a replay */
    ac_cupti_launch l = {correlation, 0, p->owner->phase, p->owner->step, 0};
    CUptiResult r = cuptiGetGraphExecId(exec, &l.graph_exec_id);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiGetGraphExecId");
    pthread_mutex_lock(&p->lock);
    l.marks_before = p->log.n_marks;
    ac_status st = ac_cupti_log_launch(&p->log, &l);
    pthread_mutex_unlock(&p->lock);
    return st;
}

static void on_driver_call(cupti_probe *p, CUpti_CallbackId cbid, const CUpti_CallbackData *call)
{
    if (call->callbackSite != CUPTI_API_EXIT)
        return;
    int ok = *(const CUresult *)call->functionReturnValue == CUDA_SUCCESS;
    ac_status st = AC_OK;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz: p->capturing += ok; break;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz:
        /* a failed end (an invalidated capture) still ends it */
        p->capturing -= p->capturing > 0;
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
        if (ok)
            st = log_launch(p, ((const cuGraphLaunch_params *)call->functionParams)->hGraph, call->correlationId);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
        if (ok)
            st = log_launch(p, ((const cuGraphLaunch_ptsz_params *)call->functionParams)->hGraphExec,
                            call->correlationId);
        break;
    default: break;
    }
    defer_locked(p, st);
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    if (domain == CUPTI_CB_DOMAIN_RESOURCE)
        on_graph_resource(user, cbid, data);
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
        on_driver_call(user, cbid, data);
}

/* ---- starting and stopping CUPTI ---- */

/* Kernels, copies and sets are the device work; the external-correlation records come
 * before API records only, so driver and runtime API records are on too (the runtime's
 * calls reach the driver, whose correlation ids the device records carry; the runtime's
 * cost a little more buffer and make the mapping not depend on which one a call uses). */
static const CUpti_ActivityKind activity_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME,
};

static const CUpti_CallbackIdResource graph_callbacks[] = {
    CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
    CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
    CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING,
    CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,
};

static const CUpti_driver_api_trace_cbid driver_callbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,          CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,       CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,   CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,            CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,                 CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

#define COUNT(array) (sizeof(array) / sizeof *(array))

/* The activity records are read through the struct versions of the headers built
 * against (CUpti_ActivityKernel10, Memcpy6, Memset4): another CUPTI may lay them out
 * differently. */
static ac_status check_version(void)
{
    uint32_t version = 0;
    CUptiResult r = cuptiGetVersion(&version);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiGetVersion");
    if (version != CUPTI_API_VERSION)
        return ac_fail(AC_ERR_UNSUPPORTED, "cupti probe: CUPTI API %u at run time but %u at build time: its activity records may be laid out differently",
                       version, (unsigned)CUPTI_API_VERSION);
    return AC_OK;
}

static ac_status subscribe(cupti_probe *p)
{
    CUptiResult r = cuptiSubscribe(&p->subscriber, on_callback, p);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        p->subscriber = NULL;
        return ac_fail(AC_ERR_UNSUPPORTED, "cupti probe: another tool (a profiler?) already holds CUPTI's callbacks");
    }
    if (r != CUPTI_SUCCESS) {
        p->subscriber = NULL;
        return cupti_failed(r, "cuptiSubscribe");
    }
    for (size_t i = 0; r == CUPTI_SUCCESS && i < COUNT(graph_callbacks); i++)
        r = cuptiEnableCallback(1, p->subscriber, CUPTI_CB_DOMAIN_RESOURCE, graph_callbacks[i]);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < COUNT(driver_callbacks); i++)
        r = cuptiEnableCallback(1, p->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, driver_callbacks[i]);
    return r == CUPTI_SUCCESS ? AC_OK : cupti_failed(r, "cuptiEnableCallback");
}

static ac_status now_ns(int64_t *ns)
{
    uint64_t t = 0;
    CUptiResult r = cuptiGetTimestamp(&t);
    *ns = (int64_t)t;
    return r == CUPTI_SUCCESS ? AC_OK : cupti_failed(r, "cuptiGetTimestamp");
}

static ac_status start(cupti_probe *p)
{
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS)
        return cupti_failed(r, "cuptiActivityRegisterCallbacks");
    ac_status st = subscribe(p);
    for (size_t i = 0; st == AC_OK && i < COUNT(activity_kinds); i++) {
        r = cuptiActivityEnable(activity_kinds[i]);
        if (r != CUPTI_SUCCESS)
            st = cupti_failed(r, "cuptiActivityEnable");
    }
    return st == AC_OK ? now_ns(&p->origin_ns) : st;
}

/* Undoes start, whatever part of it succeeded. */
static void stop(cupti_probe *p)
{
    for (size_t i = 0; i < COUNT(activity_kinds); i++)
        cuptiActivityDisable(activity_kinds[i]);
    if (p->subscriber)
        cuptiUnsubscribe(p->subscriber);
    p->subscriber = NULL;
}

/* ---- the probe ---- */

static void cupti_begin(void *state, const ac_probe_site *site)
{
    cupti_probe *p = state;
    if (p->depth < MAX_DEPTH) {
        open_site *o = &p->open[p->depth];
        o->site = *site;
        o->external_id = ++p->next_external_id;
        o->captured = p->capturing > 0;
        CUptiResult r = cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, o->external_id);
        if (r != CUPTI_SUCCESS)
            defer_locked(p, cupti_failed(r, "cuptiActivityPushExternalCorrelationId"));
    }
    /* deeper sites are not tagged: their work counts in the innermost tagged one */
    p->depth++;
}

static void cupti_end(void *state, const ac_probe_site *site)
{
    cupti_probe *p = state;
    if (p->depth == 0) /* an end without a begin: nothing to measure */
        return;
    p->depth--;
    if (p->depth >= MAX_DEPTH)
        return;
    const open_site *o = &p->open[p->depth];
    uint64_t popped = 0;
    CUptiResult r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &popped);
    ac_cupti_mark m = {*site, o->external_id, p->depth ? p->open[p->depth - 1].external_id : 0,
                       o->captured && p->capturing > 0};
    pthread_mutex_lock(&p->lock);
    if (r != CUPTI_SUCCESS)
        defer(p, cupti_failed(r, "cuptiActivityPopExternalCorrelationId"));
    else if (popped != o->external_id)
        defer(p, ac_fail(AC_ERR_INTERNAL, "cupti probe: popped external id %llu where %llu was pushed (another pusher of CUSTOM2?)",
                         (unsigned long long)popped, (unsigned long long)o->external_id));
    defer(p, ac_cupti_log_mark(&p->log, &m));
    pthread_mutex_unlock(&p->lock);
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Room for n spans. A full array is retired rather than moved, so the spans an earlier
 * collect returned stay valid until the reset. */
static ac_status room_for_spans(cupti_probe *p, size_t n)
{
    if (n <= p->cap_spans)
        return AC_OK;
    size_t cap = max_size(n, 2 * p->cap_spans);
    ac_span *fresh = malloc(cap * sizeof *fresh);
    ac_span **retired = realloc(p->retired, (p->n_retired + 1) * sizeof *retired);
    if (retired)
        p->retired = retired;
    if (!fresh || !retired) {
        free(fresh);
        return ac_fail(AC_ERR_NOMEM, "cupti probe: cannot allocate %zu spans", cap);
    }
    if (p->spans)
        p->retired[p->n_retired++] = p->spans;
    p->spans = fresh;
    p->cap_spans = cap;
    return AC_OK;
}

/* end - start is the busy time; an occurrence without records sits where the span
 * before it ends. */
static void fill_spans(ac_span *spans, const ac_cupti_attribution *a)
{
    int64_t cursor = 0;
    for (size_t i = 0; i < a->count; i++) {
        const ac_cupti_occurrence *o = &a->items[i];
        spans[i].site = o->site;
        spans[i].start_ns = o->records ? o->first_start_ns : cursor;
        spans[i].end_ns = spans[i].start_ns + o->busy_ns;
        cursor = spans[i].end_ns;
    }
}

/* The caller holds the lock. */
static ac_status attribute(cupti_probe *p)
{
    if (p->deferred != AC_OK)
        return ac_fail(p->deferred, "%s", p->deferred_message);
    if (p->dropped)
        return ac_fail(AC_ERR_DEVICE, "cupti probe: CUPTI dropped %zu activity records (no buffer to put them in): the times would be short",
                       p->dropped);
    ac_cupti_attribution fresh;
    ac_status st = ac_cupti_attribute(&p->log, p->origin_ns, &fresh);
    if (st == AC_OK)
        st = room_for_spans(p, fresh.count);
    if (st != AC_OK) {
        ac_cupti_attribution_free(&fresh);
        return st;
    }
    fill_spans(p->spans, &fresh);
    ac_cupti_attribution_free(&p->result);
    p->result = fresh;
    if (fresh.unattributed_records)
        ac_debug("cupti probe: %zu records (%lld ns) outside every site", fresh.unattributed_records,
                 (long long)fresh.unattributed_ns);
    return AC_OK;
}

static ac_status cupti_collect(void *state, const ac_span **spans, size_t *count)
{
    cupti_probe *p = state;
    *spans = NULL;
    *count = 0;
    if (p->depth)
        return ac_fail(AC_ERR_INVALID, "cupti probe: collect inside %d open sites, whose work is not all recorded yet",
                       p->depth);
    ac_status st = flush();
    if (st != AC_OK)
        return st;
    pthread_mutex_lock(&p->lock);
    st = attribute(p);
    pthread_mutex_unlock(&p->lock);
    if (st == AC_OK) {
        *spans = p->spans;
        *count = p->result.count;
    }
    return st;
}

/* Pops what the open sites pushed, so CUPTI's id stack is as before the first begin. */
static void close_open_sites(cupti_probe *p)
{
    for (int d = p->depth < MAX_DEPTH ? p->depth : MAX_DEPTH; d > 0; d--)
        cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, NULL);
    p->depth = 0;
}

static void free_retired(cupti_probe *p)
{
    for (size_t i = 0; i < p->n_retired; i++)
        free(p->retired[i]);
    p->n_retired = 0;
}

static void cupti_reset(void *state)
{
    cupti_probe *p = state;
    close_open_sites(p);
    /* every record of the work so far arrives now, not after the reset */
    ac_status st = flush();
    pthread_mutex_lock(&p->lock);
    ac_cupti_log_clear_activity(&p->log);
    p->dropped = 0;
    p->deferred = AC_OK;
    defer(p, st);
    defer(p, now_ns(&p->origin_ns));
    pthread_mutex_unlock(&p->lock);
    ac_cupti_attribution_free(&p->result);
    free_retired(p);
}

static void cupti_destroy(void *state)
{
    cupti_probe *p = state;
    if (!p)
        return;
    close_open_sites(p);
    if (active == p) {
        flush();
        stop(p);
        active = NULL;
    }
    ac_cupti_log_free(&p->log);
    ac_cupti_attribution_free(&p->result);
    free_retired(p);
    free(p->retired);
    free(p->spans);
    free(p->captured);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static const ac_probe_ops cupti_ops = {
    .begin = cupti_begin,
    .end = cupti_end,
    .collect = cupti_collect,
    .reset = cupti_reset,
    .destroy = cupti_destroy,
};

ac_status ac_cupti_probe_create(ac_probe **probe)
{
    *probe = NULL;
    if (active)
        return ac_fail(AC_ERR_UNSUPPORTED, "cupti probe: one is active already (CUPTI's activity buffers are per process)");
    ac_status st = check_version();
    if (st != AC_OK)
        return st;
    cupti_probe *p = calloc(1, sizeof *p);
    ac_probe *out = calloc(1, sizeof *out);
    if (!p || !out) {
        free(p);
        free(out);
        return ac_fail(AC_ERR_NOMEM, "cupti probe: cannot allocate the probe");
    }
    pthread_mutex_init(&p->lock, NULL);
    p->owner = out;
    out->ops = &cupti_ops;
    out->state = p;
    out->phase = AC_PHASE_PREFILL;
    active = p;
    st = start(p);
    if (st != AC_OK) {
        ac_probe_free(out);
        return st;
    }
    *probe = out;
    return AC_OK;
}

const ac_cupti_attribution *ac_cupti_probe_attribution(const ac_probe *probe)
{
    const cupti_probe *p = probe->state;
    return &p->result;
}
