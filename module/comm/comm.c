/* The communicator: backend choice, the single process, and what every backend shares
 * (shards, the settings check). */
#include "comm/comm_internal.h"
#include "comm/comm_device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

ac_comm_params ac_comm_default_params(void) { return (ac_comm_params){.kind = AC_COMM_AUTO, .timeout_s = 600.0}; }

ac_status ac_comm_kind_parse(const char *text, ac_comm_kind *kind)
{
    static const struct {
        const char *name;
        ac_comm_kind kind;
    } names[] = {{"auto", AC_COMM_AUTO}, {"single", AC_COMM_SINGLE}, {"mpi", AC_COMM_MPI}, {"nccl", AC_COMM_NCCL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(text, names[i].name)) {
            *kind = names[i].kind;
            return AC_OK;
        }
    return ac_fail(AC_ERR_INVALID, "comm: unknown backend '%s' (auto, single, mpi or nccl)", text);
}

int ac_comm_launched_ranks(void)
{
    /* Open MPI, then MPICH/Hydra and PMIx launchers */
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}

static ac_status single_create(const ac_comm_params *params, ac_comm **comm)
{
    ac_comm *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(AC_ERR_NOMEM, "comm: out of memory");
    *c = (ac_comm){.rank = 0, .size = 1, .on_host = 1, .timeout_s = params->timeout_s};
    *comm = c;
    return AC_OK;
}

ac_status ac_comm_init(const ac_comm_params *params, ac_comm **comm)
{
    *comm = NULL;
    if (!(params->timeout_s > 0))
        return ac_fail(AC_ERR_INVALID, "comm: the timeout must be positive, got %g s", params->timeout_s);
    int launched = ac_comm_launched_ranks();
    switch (params->kind) {
    case AC_COMM_AUTO:
        return launched ? ac_comm_mpi_create(params, comm) : single_create(params, comm);
    case AC_COMM_SINGLE:
        if (launched > 1)
            return ac_fail(AC_ERR_INVALID, "comm: single process asked for, but mpirun started %d ranks: every rank "
                           "would run the whole job and write the same files; use --comm mpi (or auto)", launched);
        return single_create(params, comm);
    case AC_COMM_MPI:
        return ac_comm_mpi_create(params, comm);
    case AC_COMM_NCCL:
        return ac_comm_nccl_create(params, comm);
    }
    return ac_fail(AC_ERR_INVALID, "comm: unknown backend %d", (int)params->kind);
}

void ac_comm_mark_failed(ac_comm *comm)
{
    if (comm)
        comm->failed = 1;
}

void ac_comm_free(ac_comm *comm)
{
    if (!comm)
        return;
    if (comm->ops)
        comm->ops->free(comm, !comm->failed);
    free(comm);
}

int ac_comm_rank(const ac_comm *comm) { return comm ? comm->rank : 0; }
int ac_comm_size(const ac_comm *comm) { return comm ? comm->size : 1; }
int ac_comm_ranks_on_host(const ac_comm *comm) { return comm ? comm->on_host : 1; }
const char *ac_comm_backend_name(const ac_comm *comm) { return comm && comm->ops ? comm->ops->name : "single"; }

static ac_status checked(ac_comm *comm, ac_status st)
{
    if (st != AC_OK)
        comm->failed = 1;
    return st;
}

ac_status ac_comm_allreduce_f32(ac_comm *comm, float *buf, size_t count)
{
    if (!comm || !comm->ops || count == 0)
        return AC_OK;
    return checked(comm, comm->ops->allreduce(comm, buf, count, AC_COMM_F32));
}

ac_status ac_comm_allreduce_device_f32(ac_comm *comm, const ac_backend *be, float *buf, size_t count,
                                       float *staging)
{
    if (!be || !comm || !comm->ops || count == 0)
        return ac_comm_allreduce_f32(comm, buf, count);
    be->copy(staging, buf, count * sizeof *buf, AC_COPY_DEVICE_TO_HOST);
    ac_status st = ac_comm_allreduce_f32(comm, staging, count);
    if (st == AC_OK)
        be->copy(buf, staging, count * sizeof *buf, AC_COPY_HOST_TO_DEVICE);
    return st;
}

ac_status ac_comm_allreduce_f64(ac_comm *comm, double *buf, size_t count)
{
    if (!comm || !comm->ops || count == 0)
        return AC_OK;
    return checked(comm, comm->ops->allreduce(comm, buf, count, AC_COMM_F64));
}

ac_status ac_comm_broadcast(ac_comm *comm, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= ac_comm_size(comm))
        return ac_fail(AC_ERR_INVALID, "comm: broadcast from rank %d of %d", root, ac_comm_size(comm));
    if (!comm || !comm->ops || bytes == 0)
        return AC_OK;
    return checked(comm, comm->ops->broadcast(comm, buf, bytes, root));
}

ac_status ac_comm_barrier(ac_comm *comm)
{
    if (!comm || !comm->ops)
        return AC_OK;
    return checked(comm, comm->ops->barrier(comm));
}

ac_status ac_comm_check_same(ac_comm *comm, const char *what, const char *text)
{
    int size = ac_comm_size(comm), rank = ac_comm_rank(comm);
    if (size == 1)
        return AC_OK;
    uint64_t len = rank == 0 ? strlen(text) : 0;
    ac_status st = ac_comm_broadcast(comm, &len, sizeof len, 0);
    char *first = st == AC_OK ? calloc(len + 1, 1) : NULL;
    double *differs = calloc((size_t)size, sizeof *differs);
    if (st == AC_OK && (!first || !differs))
        st = ac_fail(AC_ERR_NOMEM, "comm: out of memory comparing %s", what);
    if (st == AC_OK && rank == 0)
        memcpy(first, text, len);
    if (st == AC_OK)
        st = ac_comm_broadcast(comm, first, len, 0);
    if (st == AC_OK) {
        differs[rank] = strcmp(first, text) != 0;
        st = ac_comm_allreduce_f64(comm, differs, (size_t)size);
    }
    for (int r = 0; st == AC_OK && r < size; r++)
        if (differs[r] != 0) {
            st = r == rank ? ac_fail(AC_ERR_INVALID, "%s differ between ranks: rank 0 has '%s', rank %d has '%s'", what,
                                     first, rank, text)
                           : ac_fail(AC_ERR_INVALID, "%s differ between ranks: rank %d's are not rank 0's ('%s')", what,
                                     r, first);
        }
    free(first);
    free(differs);
    return st;
}

void ac_comm_shard(const ac_comm *comm, int rows, int *begin, int *end)
{
    int64_t size = ac_comm_size(comm), rank = ac_comm_rank(comm);
    *begin = (int)(rows * rank / size);
    *end = (int)(rows * (rank + 1) / size);
}

#ifndef AC_HAVE_MPI
ac_status ac_comm_mpi_create(const ac_comm_params *params, ac_comm **comm)
{
    (void)params;
    (void)comm;
    int launched = ac_comm_launched_ranks();
    if (launched)
        return ac_fail(AC_ERR_UNSUPPORTED, "comm: started by mpirun (%d ranks) but this autocompress was built without "
                       "MPI: install libopenmpi-dev and rebuild (cmake -DAC_MPI=ON)", launched);
    return ac_fail(AC_ERR_UNSUPPORTED, "comm: MPI asked for, but this autocompress was built without MPI: install "
                   "libopenmpi-dev and rebuild (cmake -DAC_MPI=ON)");
}
#endif

#ifndef AC_HAVE_NCCL
ac_status ac_comm_nccl_create(const ac_comm_params *params, ac_comm **comm)
{
    (void)params;
    (void)comm;
    return ac_fail(AC_ERR_UNSUPPORTED, "comm: NCCL asked for, but this autocompress was built without it (it needs the "
                   "CUDA toolkit with NCCL, and MPI to exchange the NCCL id: cmake -DAC_CUDA=ON -DAC_MPI=ON)");
}
#endif
