/*
 * Braid: ncclRedOpCreatePreMulSum and ncclRedOpDestroy; see redop.h.
 */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/api.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/redop.h"

/* See redop.h. */
const brd_redop_slot_t *brd_redop_find(const struct ncclComm *comm, ncclRedOp_t op) {
  if (op < ncclNumOps || comm->redops == NULL) return NULL;
  int i = (int)op - (int)ncclNumOps;
  if (i >= BRD_REDOPS_MAX || !comm->redops->slot[i].used) return NULL;
  return &comm->redops->slot[i];
}

BRD_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
        ncclDataType_t datatype, ncclScalarResidence_t residence,
        ncclComm_t comm)
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                       ncclDataType_t datatype,
                                       ncclScalarResidence_t residence,
                                       ncclComm_t comm) {
  CHECK(brd_comm_check(comm, "ncclRedOpCreatePreMulSum"));
  ARG_NOT_NULL(op, "ncclRedOpCreatePreMulSum");
  ARG_NOT_NULL(scalar, "ncclRedOpCreatePreMulSum");
  size_t esize = brd_dtype_size(datatype);
  if (esize == 0) {
    WARN("ncclRedOpCreatePreMulSum : invalid type %d", (int)datatype);
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("ncclRedOpCreatePreMulSum : invalid residence %d", (int)residence);
    return ncclInvalidArgument;
  }
  if (comm->redops == NULL) {
    comm->redops = calloc(1, sizeof(*comm->redops));
    if (comm->redops == NULL) {
      WARN("ncclRedOpCreatePreMulSum : out of host memory");
      return ncclSystemError;
    }
  }
  for (int i = 0; i < BRD_REDOPS_MAX; i++) {
    brd_redop_slot_t *s = &comm->redops->slot[i];
    if (s->used) continue;
    memset(s, 0, sizeof(*s));
    s->used = 1;
    s->dtype = datatype;
    s->residence = residence;
    if (residence == ncclScalarHostImmediate)
      memcpy(s->host_scalar, scalar, esize);
    else
      s->dev_scalar = scalar;
    *op = (ncclRedOp_t)((int)ncclNumOps + i);
    return ncclSuccess;
  }
  WARN("ncclRedOpCreatePreMulSum : this communicator already holds %d "
       "operators; destroy some with ncclRedOpDestroy", BRD_REDOPS_MAX);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  CHECK(brd_comm_check(comm, "ncclRedOpDestroy"));
  if (op < ncclNumOps) {
    WARN("ncclRedOpDestroy : operator %d is built in and cannot be destroyed",
         (int)op);
    return ncclInvalidArgument;
  }
  if (brd_redop_find(comm, op) == NULL) {
    WARN("ncclRedOpDestroy : operator %d unknown to this communicator",
         (int)op);
    return ncclInvalidArgument;
  }
  comm->redops->slot[(int)op - (int)ncclNumOps].used = 0;
  return ncclSuccess;
}
