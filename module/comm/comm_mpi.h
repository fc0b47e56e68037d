/* The MPI transport's pieces that the NCCL transport reuses: it joins the ranks over MPI,
 * exchanges its id and keeps broadcast and barrier there. */
#ifndef AC_COMM_MPI_H
#define AC_COMM_MPI_H

#include <mpi.h>

#include "comm/comm_internal.h"

/* Joins MPI_COMM_WORLD (MPI_Init when needed) into *comm with `ops`; on failure
 * comm->impl is set only when ac_comm_mpi_leave must undo it. */
ac_status ac_comm_mpi_setup(const ac_comm_params *params, ac_comm *comm, const ac_comm_ops *ops);
void ac_comm_mpi_leave(ac_comm *comm, int clean);
MPI_Comm ac_comm_mpi_world(ac_comm *comm);
/* Polls a request until it completes or the communicator's timeout passes. */
ac_status ac_comm_mpi_wait(ac_comm *comm, MPI_Request *req, const char *what);

#endif
