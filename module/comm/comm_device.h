/* Collectives on a device's memory: through host staging, the one path every transport
 * (MPI, NCCL's host path) takes. A training step on a device keeps its gradients there. */
#ifndef AC_COMM_DEVICE_H
#define AC_COMM_DEVICE_H

#include "autocompress/comm.h"
#include "kernels/kernels.h"

/* ac_comm_allreduce_f32 of buf, count floats in be's memory (be NULL: the host's, summed
 * in place), copied through staging (count floats of host memory the caller owns). */
ac_status ac_comm_allreduce_device_f32(ac_comm *comm, const ac_backend *be, float *buf, size_t count,
                                       float *staging);

#endif
