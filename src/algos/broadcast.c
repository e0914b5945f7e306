/*
 * Broadcast: pipelined chain (large messages) and direct (small), Simple
 * and LL. Every rank's output receives the root's input; other ranks'
 * inputs are never read.
 *
 * Chain. Algorithm: the ranks in ring order starting at the root form a
 * chain; each block owns BRD_ALGOS_CHAIN_CHUNKS chunks of every window,
 * and each chunk moves down the chain as soon as it arrives, so the chunks
 * of a window are in flight along the chain at once. Memory ordering: the data
 * goes into the successor's scratch (one slot per chunk) with a data
 * semaphore signal (Simple) or as LL packets. At the end of its window
 * the last rank acknowledges to its predecessor, and each rank passes the
 * acknowledgement up once its own successor's has arrived, so the root
 * (and everyone) finishes a window only after every rank joined it: that
 * is what lets slots be rewritten in the next window, and scratch phases
 * alternate between launches. Blocks are independent chains over their
 * own chunks.
 *
 * Direct. Algorithm: the root pushes its chunk into a slot of every other
 * rank's scratch; each copies it to its output and acknowledges; once all
 * have, the root tells everyone it is done (so every rank has heard of
 * every other before it finishes). One step of data for latency-bound
 * sizes. Memory ordering: Simple signals a data semaphore after the push,
 * LL carries flags. Blocks split the message, one slot each.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

static ncclResult_t chain_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  int proot = *(const int *)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int d = ((p - proot) % n + n) % n; /* hops from the root */
  int rank = brd_algos_rank_at(a, p);
  int next = brd_algos_rank_at(a, p + 1), prev = brd_algos_rank_at(a, p - 1);
  uint32_t data_sem = 2u * (uint32_t)blk, ack_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  for (int c = 0; c < BRD_ALGOS_CHAIN_CHUNKS; c++) {
    uint32_t chunk = (uint32_t)(blk * BRD_ALGOS_CHAIN_CHUNKS + c);
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    brd_plan_ref_t fwd = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, next, chunk);
    if (d == 0) {
      brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
      CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT,
                           0, chunk, c + 1, 0, 1, &in, 1, &fwd));
      if (!ll)
        CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, next, data_sem, c + 1));
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &in,
                           1, &out));
      continue;
    }
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1, chunk);
    brd_plan_ref_t dst[2] = {out, fwd};
    int last = d == n - 1;
    if (!ll)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, prev, data_sem, c + 1));
    uint8_t code = ll ? BRD_IR_OP_PKT_REDUCE : last ? BRD_IR_OP_COPY : BRD_IR_OP_REDUCE;
    CHECK(brd_algos_move(b, rank, blk, code, 0, chunk, c + 1, c + 1, 1, &src,
                         last ? 1 : 2, dst));
    if (!last && !ll)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, next, data_sem, c + 1));
  }
  /* Acknowledgements ripple from the end of the chain back to the root. */
  if (d != n - 1)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, next, ack_sem, 1));
  if (d != 0)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, prev, ack_sem, 1));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_chain_broadcast(const brd_algos_args_t *args, int root,
                                       brd_ir_plan_t **plan_out) {
  return brd_algos_chain_build(args, root, BRD_IR_COLL_BROADCAST, chain_block, "chain broadcast", plan_out);
}

static ncclResult_t direct_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                 int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  int root = *(const int *)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t chunk = (uint32_t)blk;
  uint32_t data_sem = 3u * (uint32_t)blk, ack_sem = data_sem + 1, done_sem = data_sem + 2;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  if (rank != root)
    return brd_algos_recv_from_root(b, a, p, blk, root, data_sem, ack_sem, done_sem);
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  for (int i = 1; i < n; i++)
    refs[i - 1] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, brd_algos_rank_at(a, p + i),
                               chunk);
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                       chunk, 1, 0, 1, &in, n - 1, refs));
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, data_sem, 1));
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &in, 1, &out));
  CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, 1, ack_sem, 1));
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, done_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_direct_broadcast(const brd_algos_args_t *args, int root,
                                        brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, root, "direct broadcast"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_BROADCAST, BRD_IR_ALGO_ONESHOT,
                            root, plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, "direct broadcast"));
  if ((size_t)args->nblocks * 3 > 65535) {
    WARN("direct broadcast: %d blocks exceed the IR's 16-bit semaphore indices",
         args->nblocks);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = (uint32_t)args->nblocks, .slot_div = 1,
      .nsems = 3u * (uint32_t)args->nblocks, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_ONESHOT,
      .coll = BRD_IR_COLL_BROADCAST, .root = (uint16_t)root};
  return brd_algos_build(&shape, args, direct_block, &root, "a direct broadcast", plan_out);
}
