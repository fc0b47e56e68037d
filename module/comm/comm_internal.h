/* What a transport provides behind ac_comm (comm.c dispatches, the single process needs
 * none of it). */
#ifndef AC_COMM_INTERNAL_H
#define AC_COMM_INTERNAL_H

#include "autocompress/comm.h"

typedef enum { AC_COMM_F32, AC_COMM_F64 } ac_comm_type;

typedef struct {
    const char *name;
    ac_status (*allreduce)(ac_comm *comm, void *buf, size_t count, ac_comm_type type);
    ac_status (*broadcast)(ac_comm *comm, void *buf, size_t bytes, int root);
    ac_status (*barrier)(ac_comm *comm);
    /* clean: every collective succeeded, so the ranks can leave together */
    void (*free)(ac_comm *comm, int clean);
} ac_comm_ops;

struct ac_comm {
    const ac_comm_ops *ops;
    int rank, size;
    int on_host; /* ranks on this host */
    double timeout_s;
    int failed; /* a collective failed or the run was marked failed: leave without waiting */
    void *impl;
};

ac_status ac_comm_mpi_create(const ac_comm_params *params, ac_comm **comm);
ac_status ac_comm_nccl_create(const ac_comm_params *params, ac_comm **comm);

#endif
