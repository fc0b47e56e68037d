/* Ranks of a data-parallel run: rank and size, a sum all-reduce, broadcast and barrier.
 *
 * Backends: single process (a NULL ac_comm * is one, at no cost), MPI (processes and
 * hosts, `mpirun -np N autocompress ...`) and NCCL (GPUs, its id exchanged over MPI).
 * Every collective waits at most the communicator's timeout and then fails naming the
 * operation, so a dead or stuck rank ends a run with an error instead of a hang. */
#ifndef AUTOCOMPRESS_COMM_H
#define AUTOCOMPRESS_COMM_H

#include <stddef.h>

#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_comm ac_comm;

typedef enum {
    AC_COMM_AUTO,   /* MPI when started by mpirun (its environment says so), else single */
    AC_COMM_SINGLE,
    AC_COMM_MPI,
    AC_COMM_NCCL
} ac_comm_kind;

typedef struct {
    ac_comm_kind kind;
    double timeout_s; /* the longest any collective waits for the other ranks */
} ac_comm_params;

ac_comm_params ac_comm_default_params(void);

/* The ranks mpirun (or another MPI launcher) started, from this process's environment;
 * 0 when no launcher started it. */
int ac_comm_launched_ranks(void);

/* Parses "auto", "single", "mpi" or "nccl". */
ac_status ac_comm_kind_parse(const char *text, ac_comm_kind *kind);

/* Joins the run's ranks (MPI_Init for MPI and NCCL, once per process). Fails with a
 * message naming what is missing: MPI asked for outside mpirun, mpirun around a build
 * without MPI, NCCL without a GPU. */
ac_status ac_comm_init(const ac_comm_params *params, ac_comm **comm);
/* Leaves the run: MPI_Finalize, which waits for every rank, unless a collective failed
 * or the run was marked failed, when it leaves at once (mpirun then ends the others). */
void ac_comm_free(ac_comm *comm);
/* This rank's run failed: ac_comm_free must not wait for ranks that may be waiting on it. */
void ac_comm_mark_failed(ac_comm *comm);

/* NULL is the single process: rank 0 of 1. */
int ac_comm_rank(const ac_comm *comm);
int ac_comm_size(const ac_comm *comm);
const char *ac_comm_backend_name(const ac_comm *comm);
/* The ranks on this rank's host (sharing its cores and devices), this one included. */
int ac_comm_ranks_on_host(const ac_comm *comm);

/* In-place sums over ranks, identical on every rank and the same from run to run: the
 * ranks' values are added in rank order (0, 1, ..., N-1) whatever the transport. */
ac_status ac_comm_allreduce_f32(ac_comm *comm, float *buf, size_t count);
ac_status ac_comm_allreduce_f64(ac_comm *comm, double *buf, size_t count);
/* Root's `bytes` bytes of buf into every rank's buf. */
ac_status ac_comm_broadcast(ac_comm *comm, void *buf, size_t bytes, int root);
ac_status ac_comm_barrier(ac_comm *comm);

/* Fails on every rank when some rank's `text` differs from rank 0's, naming the first
 * such rank and both texts: the check that all ranks run with the same settings. */
ac_status ac_comm_check_same(ac_comm *comm, const char *what, const char *text);

/* Rows [*begin, *end) of `rows` for this rank: contiguous shards whose sizes differ by
 * at most one, in rank order. */
void ac_comm_shard(const ac_comm *comm, int rows, int *begin, int *end);

#ifdef __cplusplus
}
#endif
#endif
