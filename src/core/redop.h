/*
 * Braid: user reduction operators (ncclRedOpCreatePreMulSum) of a
 * communicator. An operator is a slot of the communicator's table; its
 * code is ncclNumOps + the slot. A call resolves its operator when it is
 * made (enqueue.c), so the operator may be destroyed before its group runs.
 */
#ifndef BRD_CORE_REDOP_H
#define BRD_CORE_REDOP_H

#include "nccl.h"

struct ncclComm;

#define BRD_REDOPS_MAX 64

typedef struct brd_redop_slot {
  int used;
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  const void *dev_scalar;      /* borrowed: ncclScalarDevice, read at launch */
  unsigned char host_scalar[8];/* ncclScalarHostImmediate: copied at creation */
} brd_redop_slot_t;

struct brd_redops {
  brd_redop_slot_t slot[BRD_REDOPS_MAX]; /* op = ncclNumOps + index */
};

/* The slot of a user operator, or NULL when op is not a live user operator
 * of comm. Any thread; the caller keeps comm alive. */
const brd_redop_slot_t *brd_redop_find(const struct ncclComm *comm, ncclRedOp_t op);

#endif /* BRD_CORE_REDOP_H */
