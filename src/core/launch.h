/*
 * Braid: running checked calls. One launch runs every call a communicator
 * collected (one call outside a group, the whole group inside one) as plans
 * on the communicator's executor, in call order.
 *
 * The per-communicator runtime (channels, plan cache, sequence numbers) is
 * created on the first launch, which every rank reaches at the same point
 * of its call sequence: creating it exchanges segment handles over the
 * bootstrap network.
 */
#ifndef BRD_CORE_LAUNCH_H
#define BRD_CORE_LAUNCH_H

#include "nccl.h"
#include "enqueue.h"

struct ncclComm;
struct brd_rt;

/* Runs ncalls checked calls of comm, in order, as one launch. Host mode
 * completes them before returning (there is no stream to wait on). On a
 * failure the communicator's async error is set too. Blocks on peers; the
 * caller's thread, or a group worker thread. */
ncclResult_t brd_launch_run(struct ncclComm *comm, const brd_call_t *calls,
                            int ncalls);

/* Frees a runtime (comm teardown). Local: never waits on peers. NULL is a
 * no-op. */
void brd_rt_destroy(struct brd_rt *rt);

/* User reduction operators (ncclRedOpCreatePreMulSum) of a communicator. */
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
 * of comm. */
const brd_redop_slot_t *brd_redop_find(const struct ncclComm *comm,
                                       ncclRedOp_t op);

#endif /* BRD_CORE_LAUNCH_H */
