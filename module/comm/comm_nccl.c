/* The NCCL transport: ranks join over MPI (comm_mpi.c), rank 0's NCCL id is broadcast
 * there, one GPU per rank (the node-local rank modulo the GPUs seen), and the sums run
 * on NCCL. Host buffers (the CPU engine's gradients) are staged through one device
 * buffer; device buffers (the CUDA backend's) are reduced in place. Broadcast and
 * barrier stay on MPI. NCCL's ring gives every rank the same sums, the same from run to
 * run on the same GPUs, but in ring order rather than rank order. */
#include "comm/comm_mpi.h"

#include "autocompress/clock.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

#define STAGE_BYTES ((size_t)64 << 20)

typedef struct {
    ncclComm_t nccl;
    cudaStream_t stream;
    void *stage; /* device memory for host buffers */
    int device;
} nccl_part;

typedef struct {
    ac_comm *mpi; /* the MPI transport, for broadcast, barrier and leaving */
    nccl_part part;
} nccl_impl;

static nccl_impl *impl_of(ac_comm *c) { return c->impl; }

static ac_status cuda_error(const ac_comm *c, cudaError_t e, const char *what)
{
    return ac_fail(AC_ERR_DEVICE, "comm nccl (rank %d of %d): %s: %s", c->rank, c->size, what, cudaGetErrorString(e));
}

static ac_status nccl_error(const ac_comm *c, ncclResult_t r, const char *what)
{
    return ac_fail(AC_ERR_DEVICE, "comm nccl (rank %d of %d): %s: %s", c->rank, c->size, what, ncclGetErrorString(r));
}

/* Polls the stream against the deadline, watching NCCL's asynchronous errors (a peer
 * that died shows up here, or as a timeout). */
static ac_status wait_stream(ac_comm *c, const char *what)
{
    nccl_part *p = &impl_of(c)->part;
    double deadline = ac_monotonic_s() + c->timeout_s;
    for (;;) {
        cudaError_t e = cudaStreamQuery(p->stream);
        if (e == cudaSuccess)
            return AC_OK;
        if (e != cudaErrorNotReady)
            return cuda_error(c, e, what);
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(p->nccl, &async);
        if (async != ncclSuccess && async != ncclInProgress)
            return nccl_error(c, async, what);
        if (ac_monotonic_s() > deadline) {
            ncclCommAbort(p->nccl);
            p->nccl = NULL;
            return ac_fail(AC_ERR_IO, "comm nccl (rank %d of %d): %s did not complete in %g s: another rank has died "
                           "or is stuck", c->rank, c->size, what, c->timeout_s);
        }
        nanosleep(&(struct timespec){0, 100000}, NULL);
    }
}

static int is_device_pointer(const void *ptr)
{
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        cudaGetLastError(); /* a plain host pointer is not an error to keep */
        return 0;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

static ac_status reduce_on_device(ac_comm *c, void *dev, size_t count, ac_comm_type type)
{
    nccl_part *p = &impl_of(c)->part;
    ncclResult_t r = ncclAllReduce(dev, dev, count, type == AC_COMM_F32 ? ncclFloat32 : ncclFloat64, ncclSum, p->nccl,
                                   p->stream);
    return r == ncclSuccess ? wait_stream(c, "all-reduce") : nccl_error(c, r, "ncclAllReduce");
}

static ac_status nccl_allreduce(ac_comm *c, void *buf, size_t count, ac_comm_type type)
{
    nccl_part *p = &impl_of(c)->part;
    if (!p->nccl)
        return ac_fail(AC_ERR_IO, "comm nccl (rank %d): the communicator was aborted after an earlier failure", c->rank);
    if (is_device_pointer(buf))
        return reduce_on_device(c, buf, count, type);
    size_t elem = type == AC_COMM_F32 ? sizeof(float) : sizeof(double), per = STAGE_BYTES / elem;
    for (size_t done = 0; done < count; done += per) {
        size_t n = count - done < per ? count - done : per;
        char *host = (char *)buf + done * elem;
        cudaError_t e = cudaMemcpyAsync(p->stage, host, n * elem, cudaMemcpyHostToDevice, p->stream);
        if (e != cudaSuccess)
            return cuda_error(c, e, "copy to the device");
        ac_status st = reduce_on_device(c, p->stage, n, type);
        if (st != AC_OK)
            return st;
        e = cudaMemcpy(host, p->stage, n * elem, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            return cuda_error(c, e, "copy from the device");
    }
    return AC_OK;
}

static ac_status nccl_broadcast(ac_comm *c, void *buf, size_t bytes, int root)
{
    return ac_comm_broadcast(impl_of(c)->mpi, buf, bytes, root);
}

static ac_status nccl_barrier(ac_comm *c) { return ac_comm_barrier(impl_of(c)->mpi); }

static void part_free(nccl_part *p)
{
    if (p->nccl)
        ncclCommDestroy(p->nccl);
    if (p->stream)
        cudaStreamDestroy(p->stream);
    if (p->stage)
        cudaFree(p->stage);
}

static void nccl_free(ac_comm *c, int clean)
{
    nccl_impl *m = impl_of(c);
    part_free(&m->part);
    if (!clean)
        ac_comm_mark_failed(m->mpi);
    ac_comm_free(m->mpi);
    free(m);
}

static const ac_comm_ops nccl_ops = {"nccl", nccl_allreduce, nccl_broadcast, nccl_barrier, nccl_free};

static int local_rank(int rank)
{
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!v)
        v = getenv("MPI_LOCALRANKID");
    return v ? atoi(v) : rank;
}

static ac_status part_init(ac_comm *c, ac_comm *mpi, nccl_part *p)
{
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0)
        return ac_fail(AC_ERR_DEVICE, "comm nccl (rank %d): no CUDA device (%s)", c->rank,
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    p->device = local_rank(c->rank) % devices;
    if ((e = cudaSetDevice(p->device)) != cudaSuccess || (e = cudaStreamCreate(&p->stream)) != cudaSuccess ||
        (e = cudaMalloc(&p->stage, STAGE_BYTES)) != cudaSuccess)
        return cuda_error(c, e, "setting up the device");
    ncclUniqueId id;
    ncclResult_t r = c->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess)
        return nccl_error(c, r, "ncclGetUniqueId");
    ac_status st = ac_comm_broadcast(mpi, &id, sizeof id, 0);
    if (st != AC_OK)
        return st;
    r = ncclCommInitRank(&p->nccl, c->size, id, c->rank);
    return r == ncclSuccess ? AC_OK : nccl_error(c, r, "ncclCommInitRank");
}

ac_status ac_comm_nccl_create(const ac_comm_params *params, ac_comm **comm)
{
    ac_comm_params mpi_params = *params;
    mpi_params.kind = AC_COMM_MPI;
    ac_comm *mpi = NULL, *c = calloc(1, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    ac_status st = c && m ? ac_comm_mpi_create(&mpi_params, &mpi) : ac_fail(AC_ERR_NOMEM, "comm: out of memory");
    if (st == AC_OK) {
        *c = (ac_comm){.ops = &nccl_ops, .rank = ac_comm_rank(mpi), .size = ac_comm_size(mpi),
                       .on_host = ac_comm_ranks_on_host(mpi),
                       .timeout_s = params->timeout_s, .impl = m};
        m->mpi = mpi;
        st = part_init(c, mpi, &m->part);
    }
    if (st != AC_OK) {
        if (m)
            part_free(&m->part);
        ac_comm_mark_failed(mpi);
        ac_comm_free(mpi);
        free(m);
        free(c);
        return st;
    }
    *comm = c;
    return AC_OK;
}
