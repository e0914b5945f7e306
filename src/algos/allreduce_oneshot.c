/*
 * One-shot all-reduce, for small messages (LL; Simple also generated).
 *
 * Algorithm: every rank pushes its whole input chunk into a slot of every
 * peer's scratch, then reduces its own input with the n-1 slots it received
 * into its output. One step of latency; each rank moves (n-1) times the
 * message, so it only pays off while latency dominates.
 *
 * Memory ordering: LL packets carry their flag, so a rank reads peers' data
 * as it arrives, with no semaphore. Simple puts, then signals each peer's
 * data semaphore (release); the reader waits (acquire). Slot reuse across
 * iterations: after reducing, a rank signals a credit to each peer, and a
 * peer waits for it before writing the same slot one iteration later (the
 * first iteration's credit wait completes at once).
 *
 * Blocks: one chunk per block and window; blocks split the message so
 * several cores/SMs push and reduce in parallel. Each block has one slot
 * per peer, n-1 slots sharing one NCCL_LL_BUFFSIZE (NCCL_BUFFSIZE) buffer.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* See algos.h. The rank-ordered variant keeps its credits on their own
 * semaphore in LL too (the plain one shares the block's one). */
ncclResult_t brd_algos_oneshot_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                     int p, int blk, brd_plan_ref_t *refs,
                                     const void *ctx) {
  int det = *(const int *)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  uint32_t chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk;
  uint32_t credit_sem = ll && !det ? (uint32_t)blk : data_sem + 1;
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);

  CHECK(brd_algos_direct_push(b, a, p, blk, in, chunk, data_sem, credit_sem, refs));
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, -1, data_sem, 1));
  brd_algos_sources_t src = {.own = in, .chunk = chunk, .ordered = det, .dir = -1,
                             .llf = ll ? BRD_IR_REF_LL : 0,
                             .own_slot = (uint32_t)(a->nblocks * (n - 1) + blk)};
  CHECK(brd_algos_reduce_slots(b, a, p, blk, &src, refs));
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, -1, credit_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_oneshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "one-shot all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_ONESHOT, 0, plan_out);
  int n = args->nranks, ll = args->proto == BRD_IR_PROTO_LL;
  if ((size_t)args->nblocks * (n - 1) > 65535) {
    WARN("one-shot all-reduce: %d blocks x %d peers exceed 65535 slots",
         args->nblocks, n - 1);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = (uint32_t)args->nblocks * (uint32_t)(n - 1),
      .slot_div = (uint32_t)(n - 1),
      .nsems = (ll ? 1u : 2u) * (uint32_t)args->nblocks, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_ONESHOT,
      .coll = BRD_IR_COLL_ALLREDUCE};
  static const int plain = 0;
  return brd_algos_build(&shape, args, brd_algos_oneshot_block, &plain, "a one-shot plan",
                         plan_out);
}
