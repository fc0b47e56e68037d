/* The MPI transport: nonblocking collectives polled against the communicator's
 * deadline, and a sum all-reduce in a fixed rank order (reduce-scatter by all-to-all,
 * each rank adds its slice's contributions in rank order, then all-gather), which moves
 * the same bytes as a ring all-reduce but does not depend on MPI's choice of algorithm. */
#include "comm/comm_mpi.h"

#include "autocompress/clock.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Elements per all-reduce round: bounds the receive buffer to one chunk. */
#define CHUNK_ELEMS ((size_t)1 << 22)

typedef struct {
    MPI_Comm world;
    int started_mpi;           /* this communicator called MPI_Init and must finalize */
    void *recv;                /* [size * chunk slice] of the all-reduce */
    int *send_counts, *send_displs, *recv_counts, *recv_displs;
} mpi_impl;

static mpi_impl *impl_of(ac_comm *c) { return c->impl; }

MPI_Comm ac_comm_mpi_world(ac_comm *comm) { return impl_of(comm)->world; }

static ac_status mpi_error(ac_comm *c, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", code);
    return ac_fail(AC_ERR_IO, "comm (rank %d of %d): %s failed: %s", c->rank, c->size, what, text);
}

ac_status ac_comm_mpi_wait(ac_comm *c, MPI_Request *req, const char *what)
{
    double deadline = ac_monotonic_s() + c->timeout_s;
    long pause_ns = 0;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_error(c, rc, what);
        if (done)
            return AC_OK;
        if (ac_monotonic_s() > deadline)
            return ac_fail(AC_ERR_IO, "comm (rank %d of %d): %s did not complete in %g s: another rank has died, "
                           "failed or is stuck (--comm-timeout sets the wait)", c->rank, c->size, what, c->timeout_s);
        /* spin briefly, then back off to 1 ms: the other ranks' compute needs the cores */
        if (pause_ns > 0)
            nanosleep(&(struct timespec){0, pause_ns}, NULL);
        pause_ns = pause_ns == 0 ? 1000 : pause_ns * 2 > 1000000 ? 1000000 : pause_ns * 2;
    }
}

/* Slice j of a chunk of n elements: [n * j / size, n * (j + 1) / size). */
static size_t slice_start(size_t n, int j, int size) { return n * (size_t)j / (size_t)size; }

static void add_in_rank_order(const void *recv, void *out, size_t len, int size, ac_comm_type type)
{
    if (type == AC_COMM_F32) {
        const float *in = recv;
        float *o = out;
        for (size_t k = 0; k < len; k++) {
            float s = in[k];
            for (int r = 1; r < size; r++)
                s += in[(size_t)r * len + k];
            o[k] = s;
        }
    } else {
        const double *in = recv;
        double *o = out;
        for (size_t k = 0; k < len; k++) {
            double s = in[k];
            for (int r = 1; r < size; r++)
                s += in[(size_t)r * len + k];
            o[k] = s;
        }
    }
}

static ac_status allreduce_chunk(ac_comm *c, char *chunk, size_t n, ac_comm_type type)
{
    mpi_impl *m = impl_of(c);
    MPI_Datatype dt = type == AC_COMM_F32 ? MPI_FLOAT : MPI_DOUBLE;
    size_t elem = type == AC_COMM_F32 ? sizeof(float) : sizeof(double);
    size_t mine = slice_start(n, c->rank, c->size), my_len = slice_start(n, c->rank + 1, c->size) - mine;
    for (int j = 0; j < c->size; j++) {
        m->send_displs[j] = (int)slice_start(n, j, c->size);
        m->send_counts[j] = (int)(slice_start(n, j + 1, c->size) - slice_start(n, j, c->size));
        m->recv_counts[j] = (int)my_len;
        m->recv_displs[j] = (int)((size_t)j * my_len);
    }
    MPI_Request req;
    int rc = MPI_Ialltoallv(chunk, m->send_counts, m->send_displs, dt, m->recv, m->recv_counts, m->recv_displs, dt,
                            m->world, &req);
    ac_status st = rc == MPI_SUCCESS ? ac_comm_mpi_wait(c, &req, "all-reduce (reduce-scatter)")
                                     : mpi_error(c, rc, "all-reduce (reduce-scatter)");
    if (st != AC_OK)
        return st;
    add_in_rank_order(m->recv, chunk + mine * elem, my_len, c->size, type);
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, dt, chunk, m->send_counts, m->send_displs, dt, m->world, &req);
    return rc == MPI_SUCCESS ? ac_comm_mpi_wait(c, &req, "all-reduce (all-gather)")
                             : mpi_error(c, rc, "all-reduce (all-gather)");
}

static ac_status mpi_allreduce(ac_comm *c, void *buf, size_t count, ac_comm_type type)
{
    size_t elem = type == AC_COMM_F32 ? sizeof(float) : sizeof(double);
    for (size_t done = 0; done < count; done += CHUNK_ELEMS) {
        size_t n = count - done < CHUNK_ELEMS ? count - done : CHUNK_ELEMS;
        ac_status st = allreduce_chunk(c, (char *)buf + done * elem, n, type);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

static ac_status mpi_broadcast(ac_comm *c, void *buf, size_t bytes, int root)
{
    for (size_t done = 0; done < bytes; done += (size_t)INT_MAX) {
        int n = bytes - done < (size_t)INT_MAX ? (int)(bytes - done) : INT_MAX;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + done, n, MPI_BYTE, root, impl_of(c)->world, &req);
        ac_status st = rc == MPI_SUCCESS ? ac_comm_mpi_wait(c, &req, "broadcast") : mpi_error(c, rc, "broadcast");
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

static ac_status mpi_barrier(ac_comm *c)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(impl_of(c)->world, &req);
    return rc == MPI_SUCCESS ? ac_comm_mpi_wait(c, &req, "barrier") : mpi_error(c, rc, "barrier");
}

static void impl_free(mpi_impl *m)
{
    free(m->recv);
    free(m->send_counts);
    free(m->send_displs);
    free(m->recv_counts);
    free(m->recv_displs);
    free(m);
}

void ac_comm_mpi_leave(ac_comm *c, int clean)
{
    mpi_impl *m = impl_of(c);
    /* After a failure the others may never reach MPI_Finalize, which waits for them:
     * leave without it, and mpirun ends the job when this process exits. */
    if (clean) {
        MPI_Comm_free(&m->world);
        if (m->started_mpi)
            MPI_Finalize();
    }
    impl_free(m);
}

static void mpi_free(ac_comm *c, int clean) { ac_comm_mpi_leave(c, clean); }

static const ac_comm_ops mpi_ops = {"mpi", mpi_allreduce, mpi_broadcast, mpi_barrier, mpi_free};

static ac_status start_mpi(int *started)
{
    int initialized = 0;
    MPI_Initialized(&initialized);
    *started = 0;
    if (initialized)
        return AC_OK;
    int provided = 0;
    /* OpenMP threads compute between collectives; only the main thread calls MPI */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return ac_fail(AC_ERR_IO, "comm: MPI_Init failed (is this process started by mpirun, and does mpirun "
                       "belong to the MPI this autocompress was built with?)");
    *started = 1;
    return AC_OK;
}

ac_status ac_comm_mpi_setup(const ac_comm_params *params, ac_comm *c, const ac_comm_ops *ops)
{
    int launched = ac_comm_launched_ranks();
    if (!launched)
        return ac_fail(AC_ERR_INVALID, "comm: MPI asked for, but this process was not started by mpirun (no "
                       "OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment): run `mpirun -np N "
                       "autocompress ...`");
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "comm: out of memory");
    ac_status st = start_mpi(&m->started_mpi);
    if (st != AC_OK) {
        free(m);
        return st;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    /* errors come back as codes (reported with their text), not as an abort of the job */
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    *c = (ac_comm){.ops = ops, .timeout_s = params->timeout_s, .impl = m};
    MPI_Comm_rank(m->world, &c->rank);
    MPI_Comm_size(m->world, &c->size);
    MPI_Comm host;
    c->on_host = 1;
    if (MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
        MPI_Comm_size(host, &c->on_host);
        MPI_Comm_free(&host);
    }
    size_t n = (size_t)c->size;
    m->recv = malloc((CHUNK_ELEMS / n + 1) * n * sizeof(double));
    m->send_counts = calloc(n, sizeof(int));
    m->send_displs = calloc(n, sizeof(int));
    m->recv_counts = calloc(n, sizeof(int));
    m->recv_displs = calloc(n, sizeof(int));
    if (!m->recv || !m->send_counts || !m->send_displs || !m->recv_counts || !m->recv_displs)
        return ac_fail(AC_ERR_NOMEM, "comm: out of memory for the all-reduce buffers of %d ranks", c->size);
    return AC_OK;
}

ac_status ac_comm_mpi_create(const ac_comm_params *params, ac_comm **comm)
{
    ac_comm *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "comm: out of memory");
    ac_status st = ac_comm_mpi_setup(params, c, &mpi_ops);
    if (st != AC_OK) {
        if (c->impl)
            ac_comm_mpi_leave(c, 1);
        free(c);
        return st;
    }
    *comm = c;
    return AC_OK;
}
