/*
 * Braid: the front end every collective and point-to-point call goes
 * through. An entry point fills a brd_call_t; brd_enqueue checks it exactly
 * as NCCL does and hands it on (to the group's task list, then to a plan).
 */
#ifndef BRD_CORE_ENQUEUE_H
#define BRD_CORE_ENQUEUE_H

#include <stddef.h>

#include "nccl.h"
#include "plan/tune.h" /* brd_coll_t */

typedef struct {
  brd_coll_t coll;
  const char *fn;          /* entry point name, for messages */
  const void *sendbuff;    /* borrowed for the call */
  void *recvbuff;          /* borrowed for the call */
  size_t count;            /* elements, with NCCL's per-call meaning */
  ncclDataType_t dtype;
  ncclRedOp_t op;          /* ncclSum for calls without a reduction */
  int root;                /* root, or peer for send/recv; 0 when unused */
  struct ncclComm *comm;
  cudaStream_t stream;
  /* A user operator resolved when the call is made, so the operator may be
   * destroyed before the group runs (NCCL allows it). */
  int premul;                      /* 1: op is a PreMulSum operator */
  const void *premul_scalar;       /* points at premul_value or device memory */
  unsigned char premul_value[8];   /* host-immediate scalar, copied */
} brd_call_t;

/* Size in bytes of one element of dtype, or 0 for an invalid dtype. */
size_t brd_dtype_size(ncclDataType_t dtype);

/* Checks a call's arguments with NCCL's rules and codes (comm, root/peer,
 * dtype, op, NULL buffers, in-place rules). Returns ncclSuccess when the
 * call is valid. Calling thread; does not block. */
ncclResult_t brd_call_check(const brd_call_t *call);

/* Checks one call (the communicator must be ready: not busy with a
 * nonblocking operation, which is ncclInvalidArgument, nor in error, whose
 * code is returned; revoked is ncclInvalidUsage) and adds it to the
 * calling thread's group; outside a group that group is the call alone and
 * runs at once (group.h). count == 0 succeeds without work. A failed call
 * fails its group; on a nonblocking communicator it also becomes the
 * communicator's async error, as in NCCL. Returns the check's error, else
 * for a nonblocking communicator its async state (ncclInProgress while its
 * launch runs), else the launch's result (ncclSuccess inside a group).
 * Calling thread; blocks only on a blocking launch outside a group. */
ncclResult_t brd_enqueue(const brd_call_t *call);

/* Entries of a backend's nb_sizes (core/backend.h, and the works view of
 * core/works.h): message sizes from which a collective asks for 2, 4 ... 64
 * blocks per rank. */
#define BRD_BACKEND_NB_SIZES 6

#endif /* BRD_CORE_ENQUEUE_H */
