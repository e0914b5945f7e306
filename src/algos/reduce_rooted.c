/*
 * Reduce: pipelined chain (large messages) and direct (small), Simple and
 * LL. The root's output receives the reduction of every rank's input;
 * other ranks' outputs are never written.
 *
 * Chain. Algorithm: the ranks in ring order ending at the root form a
 * chain; each block owns BRD_ALGOS_CHAIN_CHUNKS chunks of every window.
 * The first rank sends its input chunk to the next, each rank adds its input to what
 * arrived and passes it on, and the root adds its own and applies the
 * post-op into its output; the chunks of a window are in flight along the
 * chain at once. Memory ordering: partials go into the successor's scratch
 * (one slot per chunk) with a data semaphore signal (Simple) or as LL
 * packets. At the end of its window the root acknowledges back up the
 * chain, each rank passing it on, so no rank finishes a window before
 * every rank joined it: slots may be rewritten in the next window and
 * scratch phases alternate between launches. Blocks are independent
 * chains over their own chunks.
 *
 * Direct. Algorithm: every other rank pushes its chunk into its own slot
 * of the root's scratch; the root reduces them with its input in one step
 * (in rank order 0..n-1 with `deterministic`) and then tells every rank it
 * is done. Memory ordering: Simple signals a data semaphore after the
 * push, LL carries flags; the done signal also releases the slots for the
 * next window. Blocks split the message; n-1 slots per block share one
 * buffer.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

static ncclResult_t chain_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  int proot = *(const int *)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int d = ((proot - p) % n + n) % n; /* hops to the root */
  int rank = brd_algos_rank_at(a, p);
  int next = brd_algos_rank_at(a, p + 1), prev = brd_algos_rank_at(a, p - 1);
  uint32_t data_sem = 2u * (uint32_t)blk, ack_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;
  int first = d == n - 1;

  for (int c = 0; c < BRD_ALGOS_CHAIN_CHUNKS; c++) {
    uint32_t chunk = (uint32_t)(blk * BRD_ALGOS_CHAIN_CHUNKS + c);
    brd_plan_ref_t src[2];
    src[0] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
    src[1] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1, chunk);
    brd_plan_ref_t dst = d == 0 ? brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk)
                                : brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, next, chunk);
    uint8_t code;
    if (first) code = ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT;
    else code = ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE;
    if (!first && !ll)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, prev, data_sem, c + 1));
    CHECK(brd_algos_move(b, rank, blk, code, d == 0 ? BRD_IR_F_POSTOP : 0, chunk,
                         c + 1, c + 1, first ? 1 : 2, src, 1, &dst));
    if (d != 0 && !ll)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, next, data_sem, c + 1));
  }
  /* Acknowledgements ripple from the root back to the start of the chain. */
  if (d != 0) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, next, ack_sem, 1));
  if (!first) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, prev, ack_sem, 1));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_chain_reduce(const brd_algos_args_t *args, int root,
                                    brd_ir_plan_t **plan_out) {
  return brd_algos_chain_build(args, root, BRD_IR_COLL_REDUCE, chain_block, "chain reduce", plan_out);
}

static ncclResult_t direct_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                 int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  int root = ((const int *)ctx)[0], det = ((const int *)ctx)[1]; /* {root, rank-ordered} */
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, done_sem = data_sem + 1;
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);

  if (rank != root)
    return brd_algos_push_to_root(b, a, p, blk, root, in, data_sem, done_sem);
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, 1, data_sem, 1));
  brd_algos_sources_t src = {.own = in, .chunk = chunk, .ordered = det, .dir = 1,
                             .llf = ll ? BRD_IR_REF_LL : 0,
                             .own_slot = (uint32_t)(a->nblocks * (n - 1) + blk)};
  CHECK(brd_algos_reduce_slots(b, a, p, blk, &src, refs));
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, done_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_direct_reduce(const brd_algos_args_t *args, int root,
                                     int deterministic,
                                     brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, root, "direct reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_REDUCE, BRD_IR_ALGO_ONESHOT, root,
                            plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, "direct reduce"));
  if ((size_t)args->nblocks * n > 65535) {
    WARN("direct reduce: %d blocks x %d ranks exceed the IR's 16-bit slot "
         "indices", args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape =
      brd_algos_direct_reduce_shape(args, BRD_IR_COLL_REDUCE, root, deterministic);
  const int ctx[2] = {root, deterministic};
  return brd_algos_build(&shape, args, direct_block, ctx, "a direct reduce", plan_out);
}
