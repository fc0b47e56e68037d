/* One measurement in a child process: load the parent, cut the model to measure from it,
 * serve the workload (context, an untimed warm-up request, then the timed requests) and
 * send back the request times, the probe's spans and the memory peak.
 *
 * Memory: after the parent is loaded and everything the measurement itself needs is
 * allocated (probe and span buffers, context snapshot), the peak resident size is reset
 * to the current one, which is the baseline; the model, runtime and caches come after
 * it, and the peak is read after the first timed request, so peak minus baseline is what
 * serving this model takes.
 *
 * Reference: on a shared machine a process's speed drifts from request to request and
 * differs from one process to the next (more between processes than between requests
 * of one process: see docs/results.md), and the drift is largely common to whatever
 * runs at that moment. With job->reference the child also serves the workload's input
 * and output on the parent itself (no cached context, at most 4 sequences; built after
 * the memory peak is read, so it adds nothing to it) and times one parent request
 * right after each measured one (or one of job->reference_dir's model, when the parent
 * of the measured checkpoint is another one): the caller can express each time
 * relative to the speed of its own moment (the log ratio of the two varies much less
 * than either time: see docs/results.md). */
#include "autocompress/host.h"
#include "cost/cost_internal.h"
#include "kernels/kernels.h"
#include "util/child.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const ac_measure_job *job;
} child_arg;

/* Contention: while a request runs, each of our threads either computes or spins at a
 * barrier, so the process uses about threads x wall time of CPU; when another process
 * takes a core, a thread waits descheduled and the ratio drops. Such a request measured
 * the other process, not the model: it is run again (up to MAX_RETRIES times; the best
 * attempt counts if none is clean). */
enum { MAX_RETRIES = 8 };
#define CLEAN_UTILISATION 0.85

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static ac_status clean_request(ac_server *server, ac_probe *probe, int threads, double *seconds, int32_t *retried)
{
    double best = -1;
    ac_status st = AC_OK;
    for (int attempt = 0; st == AC_OK && attempt <= MAX_RETRIES; attempt++) {
        if (probe)
            ac_probe_reset(probe);
        double c0 = cpu_seconds(), wall = 0;
        st = ac_server_request(server, -1, &wall);
        /* on a device (threads 0) the host mostly waits: no contention to read off it */
        double use = threads > 0 && wall > 0 ? (cpu_seconds() - c0) / (wall * threads) : 1.0;
        if (st != AC_OK)
            break;
        if (use > best || probe) { /* with a probe: the attempt its spans come from */
            best = use;
            *seconds = wall;
        }
        if (use >= CLEAN_UTILISATION)
            break;
        (*retried)++;
        /* the probe keeps only the last attempt's spans; a dirty attempt is not kept */
    }
    return st;
}

typedef struct {
    ac_span *items;
    size_t n, cap;
} span_buffer;

/* Appends the probe's spans (one request's: the probe is reset before each attempt);
 * what does not fit counts as dropped. The buffer is allocated and touched before the
 * memory baseline, so keeping spans adds nothing to the measured peak. */
static ac_status keep_spans(ac_probe *probe, int on_device, span_buffer *b, uint32_t *dropped)
{
    const ac_span *spans = NULL;
    size_t n = 0;
    ac_status st = ac_probe_collect(probe, &spans, &n);
    if (!on_device) /* the CUPTI probe fails its collect when CUPTI dropped records */
        *dropped += (uint32_t)ac_cpu_probe_dropped(probe);
    if (st != AC_OK)
        return st;
    size_t fit = n < b->cap - b->n ? n : b->cap - b->n;
    memcpy(b->items + b->n, spans, fit * sizeof *spans);
    b->n += fit;
    *dropped += (uint32_t)(n - fit);
    return AC_OK;
}

/* The speed gauge, not a measurement: the workload's input and output on the parent,
 * without the cached context and at most 4 sequences, to keep it cheap; warmed up. */
static ac_status reference_server(const ac_measure_job *job, const ac_backend *be, const ac_model *parent,
                                  ac_model **loaded, ac_server **ref, float **snapshot)
{
    if (job->reference_dir) {
        ac_status st = ac_load_parent(job->reference_dir, 1, loaded);
        if (st != AC_OK)
            return ac_fail_context(st, "measure: the reference %s", job->reference_dir);
        parent = *loaded;
    }
    if (be) { /* the reference runs where the model does */
        ac_model *on_device;
        ac_status st = ac_model_to_device(parent, be->name, &on_device);
        if (st != AC_OK)
            return st;
        ac_model_free(*loaded);
        *loaded = on_device;
        parent = on_device;
    }
    const ac_arch *pa = ac_model_arch(parent);
    ac_contract_workload rw = job->workload;
    rw.cached_tokens = 0;
    rw.batch = rw.batch > 4 ? 4 : rw.batch;
    *snapshot = calloc(ac_server_snapshot_floats(pa, rw.batch) + 1, sizeof **snapshot);
    if (!*snapshot)
        return ac_fail(AC_ERR_NOMEM, "measure: out of memory");
    ac_status st = ac_server_create(parent, &rw, job->seed, *snapshot, ref);
    double warm = 0;
    if (st == AC_OK)
        st = ac_server_request(*ref, job->warmup_steps, &warm);
    return st;
}

/* ---- the device a job runs on (NULL: the CPU); only the child touches it: a CUDA
 * context does not survive a fork ---- */

static ac_status open_device(const ac_measure_job *job, const ac_backend **be)
{
    *be = NULL;
    if (!job->device || !strcmp(job->device, "cpu"))
        return AC_OK;
    char why[256];
    *be = ac_backend_select(job->device, why, sizeof why);
    return *be ? AC_OK : ac_fail(AC_ERR_UNSUPPORTED, "measure: %s", why);
}

static ac_status measure_child(void *arg, int fd)
{
    const ac_measure_job *job = ((child_arg *)arg)->job;
    ac_measure_result res;
    memset(&res, 0, sizeof res);
    ac_model *parent = NULL, *model = NULL, *reference = NULL;
    ac_probe *probe = NULL;
    ac_server *server = NULL, *ref = NULL;
    float *snapshot = NULL, *ref_snapshot = NULL;
    int clamped = 0;
    res.threads = ac_cpu_set_threads(job->threads, &clamped);
    /* the thread pool starts here; the heartbeat tells the parent it did */
    int team = 0;
#pragma omp parallel
    {
#pragma omp atomic
        team++;
    }
    ac_status st = team > 0 ? ac_child_heartbeat(fd) : AC_OK;
    const ac_backend *be = NULL;
    if (st == AC_OK)
        st = open_device(job, &be);
    /* a parent without weights is random, the same one in every measurement */
    if (st == AC_OK)
        st = ac_load_parent(job->model_dir, 1, &parent);
    span_buffer kept = {NULL, 0, 0};
    if (st == AC_OK && job->probe_capacity > 0) {
        st = (be ? be : &ac_cpu_backend)->probe_create(job->probe_capacity, &probe);
        kept.cap = job->probe_capacity * (size_t)job->repeats;
        kept.items = st == AC_OK ? malloc(kept.cap * sizeof *kept.items) : NULL;
        if (st == AC_OK && !kept.items)
            st = ac_fail(AC_ERR_NOMEM, "measure: out of memory for %zu spans", kept.cap);
        else if (st == AC_OK)
            memset(kept.items, 0, kept.cap * sizeof *kept.items); /* resident before the baseline */
    }
    size_t snap = ac_server_snapshot_floats(job->arch, job->workload.batch);
    if (st == AC_OK) {
        snapshot = calloc(snap + 1, sizeof *snapshot);
        if (!snapshot)
            st = ac_fail(AC_ERR_NOMEM, "measure: out of memory");
        else
            memset(snapshot, 1, (snap + 1) * sizeof *snapshot); /* resident before the baseline */
    }
    size_t base = 0;
    if (st == AC_OK) {
        /* free heap pages (this process's, and those inherited from the parent at fork)
         * go back to the kernel, so what the model allocates shows in the peak whatever
         * the calling process's heap looked like */
        malloc_trim(0);
        if (be)
            base = be->bytes_in_use();
        else if (ac_cpu_reset_peak_resident() == AC_OK)
            base = ac_cpu_resident_bytes();
        else
            base = ac_cpu_peak_resident_bytes(); /* no reset: the peak so far is the floor */
        st = ac_model_slice(parent, job->arch, job->parent_layer, job->seed + 1, &model);
        if (st == AC_OK && (be || job->weights != AC_DTYPE_F32))
            st = ac_model_move_to_device_as(&model, be ? be->name : "cpu", job->weights);
        /* on the host the f32 slice and its bf16 copy were both resident for a moment:
         * the serving peak counts from the copy alone (where the peak can be reset) */
        if (st == AC_OK && !be && job->weights != AC_DTYPE_F32) {
            malloc_trim(0);
            (void)ac_cpu_reset_peak_resident();
        }
    }
    if (st == AC_OK)
        st = ac_server_create(model, &job->workload, job->seed, snapshot, &server);
    if (st == AC_OK)
        st = ac_server_build_context(server);
    double seconds = 0;
    if (st == AC_OK)
        st = ac_server_request(server, job->warmup_steps, &seconds);
    if (st == AC_OK && probe)
        ac_server_set_probe(server, probe);
    double timed = 0;
    res.repeats = 0;
    for (int r = 0; st == AC_OK && r < job->repeats; r++) {
        st = clean_request(server, probe, be ? 0 : res.threads, &res.seconds[r], &res.retried);
        if (st == AC_OK && probe)
            st = keep_spans(probe, be != NULL, &kept, &res.dropped);
        if (st == AC_OK && r == 0) {
            /* the serving peak is reached by the first full request (a device's runtime
             * allocates nothing after it); the reference's model is built after it is
             * read, so it adds nothing to it */
            size_t peak = be ? be->bytes_in_use() : ac_cpu_peak_resident_bytes();
            res.measured_bytes = peak > base ? (double)(peak - base) : 0.0;
            res.accounted = ac_server_memory(server);
            if (job->reference)
                st = reference_server(job, be, parent, &reference, &ref, &ref_snapshot);
        }
        if (st == AC_OK && ref)
            st = clean_request(ref, NULL, be ? 0 : res.threads, &res.reference_seconds[r], &res.retried);
        if (st != AC_OK)
            break;
        res.repeats = r + 1;
        timed += res.seconds[r];
        if (job->min_seconds > 0 && timed >= job->min_seconds)
            break;
    }
    res.n_spans = (uint32_t)kept.n;
    if (st == AC_OK)
        st = ac_child_write(fd, &res, sizeof res);
    if (st == AC_OK && kept.n)
        st = ac_child_write(fd, kept.items, kept.n * sizeof *kept.items);
    free(kept.items);
    ac_server_free(server);
    ac_server_free(ref);
    free(ref_snapshot);
    ac_model_free(model);
    ac_model_free(parent);
    ac_model_free(reference);
    ac_probe_free(probe);
    free(snapshot);
    return st;
}

ac_status ac_measure(const ac_measure_job *job, ac_measure_result *result, ac_span **spans)
{
    if (spans)
        *spans = NULL;
    if (job->repeats < 1 || job->repeats > AC_MEASURE_MAX_REPEATS)
        return ac_fail(AC_ERR_INVALID, "measure: repeats must be in [1, %d], got %d", AC_MEASURE_MAX_REPEATS,
                       job->repeats);
    child_arg arg = {job};
    void *out = NULL;
    size_t bytes = 0;
    ac_status st = ac_run_in_child(measure_child, &arg, &out, &bytes);
    if (st != AC_OK)
        return st;
    if (bytes < sizeof *result) {
        free(out);
        return ac_fail(AC_ERR_INTERNAL, "measure: the child sent %zu bytes, not a result", bytes);
    }
    memcpy(result, out, sizeof *result);
    size_t span_bytes = (size_t)result->n_spans * sizeof(ac_span);
    if (bytes != sizeof *result + span_bytes) {
        free(out);
        return ac_fail(AC_ERR_INTERNAL, "measure: the child sent %zu bytes for %u spans", bytes, result->n_spans);
    }
    if (spans && span_bytes) {
        *spans = malloc(span_bytes);
        if (!*spans) {
            free(out);
            return ac_fail(AC_ERR_NOMEM, "measure: out of memory for %u spans", result->n_spans);
        }
        memcpy(*spans, (char *)out + sizeof *result, span_bytes);
    }
    free(out);
    return AC_OK;
}
