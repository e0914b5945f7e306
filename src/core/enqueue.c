/*
 * Braid: argument checking for every collective and point-to-point call,
 * with NCCL's codes and wording, plus Braid's stricter buffer rules (NULL
 * buffers and illegal overlaps are always rejected, not only under
 * NCCL_CHECK_POINTERS).
 */
#include <stdint.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "comm.h"
#include "enqueue.h"
#include "group.h"
#include "launch.h"

size_t brd_dtype_size(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2:
    return 1;
  case ncclFloat16: case ncclBfloat16:
    return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32:
    return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64:
    return 8;
  case ncclNumTypes: break;
  }
  return 0;
}

static int has_root(brd_coll_t coll) {
  return coll == BRD_COLL_BROADCAST || coll == BRD_COLL_REDUCE ||
         coll == BRD_COLL_GATHER || coll == BRD_COLL_SCATTER ||
         coll == BRD_COLL_SEND || coll == BRD_COLL_RECV;
}

static int is_reduction(brd_coll_t coll) {
  return coll == BRD_COLL_ALLREDUCE || coll == BRD_COLL_REDUCESCATTER ||
         coll == BRD_COLL_REDUCE;
}

/* Which buffers this rank reads or writes, and how many elements each. */
static void buffer_extents(const brd_call_t *c, int rank, int nranks,
                           size_t *send_n, size_t *recv_n) {
  size_t n = c->count, all = c->count * (size_t)nranks;
  int root = rank == c->root;
  *send_n = *recv_n = 0;
  switch (c->coll) {
  case BRD_COLL_ALLREDUCE: *send_n = n; *recv_n = n; break;
  case BRD_COLL_ALLGATHER: *send_n = n; *recv_n = all; break;
  case BRD_COLL_REDUCESCATTER: *send_n = all; *recv_n = n; break;
  case BRD_COLL_ALLTOALL: *send_n = all; *recv_n = all; break;
  case BRD_COLL_BROADCAST: *send_n = root ? n : 0; *recv_n = n; break;
  case BRD_COLL_REDUCE: *send_n = n; *recv_n = root ? n : 0; break;
  case BRD_COLL_GATHER: *send_n = n; *recv_n = root ? all : 0; break;
  case BRD_COLL_SCATTER: *send_n = root ? all : 0; *recv_n = n; break;
  case BRD_COLL_SEND: *send_n = n; break;
  case BRD_COLL_RECV: *recv_n = n; break;
  case BRD_COLL_COUNT: break;
  }
}

/* The one legal overlap for each collective: where recvbuff must sit
 * relative to sendbuff for the call to be in place, in bytes. A return of
 * INTPTR_MAX means no overlap is legal. */
static intptr_t inplace_offset(const brd_call_t *c, int rank, size_t esize) {
  size_t n = c->count * esize;
  switch (c->coll) {
  case BRD_COLL_ALLREDUCE: case BRD_COLL_BROADCAST: case BRD_COLL_REDUCE:
    return 0;
  case BRD_COLL_ALLGATHER: /* sendbuff == recvbuff + rank*sendcount */
    return -(intptr_t)(n * (size_t)rank);
  case BRD_COLL_REDUCESCATTER: /* recvbuff == sendbuff + rank*recvcount */
    return (intptr_t)(n * (size_t)rank);
  case BRD_COLL_GATHER: /* on the root: sendbuff == recvbuff + root*count */
    return -(intptr_t)(n * (size_t)c->root);
  case BRD_COLL_SCATTER: /* on the root: recvbuff == sendbuff + root*count */
    return (intptr_t)(n * (size_t)c->root);
  default:
    return INTPTR_MAX;
  }
}

ncclResult_t brd_call_check(const brd_call_t *c) {
  CHECK(brd_comm_check(c->comm, c->fn));
  const struct ncclComm *comm = c->comm;
  if (has_root(c->coll) && (c->root < 0 || c->root >= comm->nranks)) {
    WARN("%s : invalid %s %d (%s should be in the 0..%d range)", c->fn,
         c->coll >= BRD_COLL_SEND ? "peer" : "root", c->root,
         c->coll >= BRD_COLL_SEND ? "peer" : "root", comm->nranks - 1);
    return ncclInvalidArgument;
  }
  if ((int)c->dtype < 0 || c->dtype >= ncclNumTypes) {
    WARN("%s : invalid type %d", c->fn, (int)c->dtype);
    return ncclInvalidArgument;
  }
  if (is_reduction(c->coll)) {
    if ((int)c->op < 0 || (int)c->op > (int)ncclMaxRedOp) {
      WARN("%s : invalid reduction operation %d", c->fn, (int)c->op);
      return ncclInvalidArgument;
    }
    const brd_redop_slot_t *user = brd_redop_find(comm, c->op);
    if (c->op >= ncclNumOps && user == NULL) {
      WARN("%s : reduction operation %d unknown to this communicator "
           "(create it with ncclRedOpCreatePreMulSum on this communicator)",
           c->fn, (int)c->op);
      return ncclInvalidArgument;
    }
    if (user != NULL && user->dtype != c->dtype) {
      WARN("%s : reduction operation %d was created for datatype %d, not %d",
           c->fn, (int)c->op, (int)user->dtype, (int)c->dtype);
      return ncclInvalidArgument;
    }
  }
  if (c->count == 0) return ncclSuccess;

  size_t send_n, recv_n, esize = brd_dtype_size(c->dtype);
  buffer_extents(c, comm->rank, comm->nranks, &send_n, &recv_n);
  if (send_n > 0 && c->sendbuff == NULL) {
    WARN("%s : sendbuff argument is NULL with count %zu on rank %d", c->fn,
         c->count, comm->rank);
    return ncclInvalidArgument;
  }
  if (recv_n > 0 && c->recvbuff == NULL) {
    WARN("%s : recvbuff argument is NULL with count %zu on rank %d", c->fn,
         c->count, comm->rank);
    return ncclInvalidArgument;
  }
  if (send_n > 0 && recv_n > 0) {
    uintptr_t s = (uintptr_t)c->sendbuff, r = (uintptr_t)c->recvbuff;
    uintptr_t s_end = s + send_n * esize, r_end = r + recv_n * esize;
    intptr_t legal = inplace_offset(c, comm->rank, esize);
    int overlap = s < r_end && r < s_end;
    if (overlap && (legal == INTPTR_MAX || (intptr_t)(r - s) != legal)) {
      WARN("%s : sendbuff %p and recvbuff %p overlap but are not in place "
           "(rank %d, count %zu); use separate buffers or the in-place "
           "layout NCCL documents for this call", c->fn, c->sendbuff,
           c->recvbuff, comm->rank, c->count);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

ncclResult_t brd_enqueue(const brd_call_t *call) {
  CHECK(brd_call_check(call));
  if (call->count == 0) return ncclSuccess;
  brd_call_t c = *call;
  const brd_redop_slot_t *user = brd_redop_find(c.comm, c.op);
  if (user != NULL) {
    c.premul = 1;
    memcpy(c.premul_value, user->host_scalar, sizeof(c.premul_value));
    c.premul_scalar = user->residence == ncclScalarHostImmediate ? NULL
                                                                 : user->dev_scalar;
  }
  if (brd_group_depth() > 0) return brd_group_add(&c);
  return brd_launch_run(c.comm, &c, 1);
}
