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

/* Slot at the receiver (position pr) for data from the sender (ps). */
static uint32_t oneshot_slot(int n, int blk, int ps, int pr) {
  int rel = ((ps - pr - 1) % n + n) % n;
  return (uint32_t)(blk * (n - 1) + rel);
}

static ncclResult_t oneshot_block(brd_plan_builder_t *b,
                                  const brd_algos_args_t *a, int p, int blk,
                                  brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = ll ? (uint32_t)blk : data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, brd_algos_rank_at(a, p + i),
                           credit_sem, 0));
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  for (int i = 1; i < n; i++)
    refs[i - 1] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, brd_algos_rank_at(a, p + i),
                               oneshot_slot(n, blk, p, p + i));
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                       chunk, 1, 0, 1, &in, n - 1, refs));
  if (!ll) {
    for (int i = 1; i < n; i++)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL,
                             brd_algos_rank_at(a, p + i), data_sem, 1));
    for (int i = 1; i < n; i++)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT,
                             brd_algos_rank_at(a, p - i), data_sem, 1));
  }
  refs[0] = in;
  for (int i = 1; i < n; i++)
    refs[i] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                           oneshot_slot(n, blk, p - i, p));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE,
                       BRD_IR_F_POSTOP, chunk, 0, 1, n, refs, 1, &out));
  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL,
                           brd_algos_rank_at(a, p - i), credit_sem, 1));
  return ncclSuccess;
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
  return brd_algos_build(&shape, args, oneshot_block, NULL, "a one-shot plan", plan_out);
}
