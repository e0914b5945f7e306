/*
 * All-gather: ring (large messages) and direct (small), Simple and LL.
 * The output holds nranks segments; segment q receives rank q's input.
 *
 * Ring. Algorithm: each block owns one chunk of every window. Around the
 * ring, a rank copies its own input into its segment and passes it on;
 * each of the next n-1 steps stores the segment that arrived from the
 * predecessor and forwards it, until every segment has gone n-1 hops.
 * Memory ordering and slot reuse are the ring all-reduce's (data
 * semaphore or LL flags forward, credits back, BRD_ALGOS_RING_DEPTH slots
 * per block). Every rank's output holds every rank's data, so no rank finishes
 * before all have joined. Blocks split the message: more blocks, more
 * transfers in flight.
 *
 * Direct. Algorithm: every rank pushes its chunk into one slot of every
 * peer's scratch and copies the n-1 slots it received into their segments:
 * one step, n-1 times the data per rank, for latency-bound sizes. Memory
 * ordering: Simple signals each peer's data semaphore after the push, LL
 * carries flags; a credit back after each copy lets the sender reuse the
 * slot one iteration later. Blocks split the message; n-1 slots per block
 * share one buffer.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

static ncclResult_t ag_ring_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                  int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  const brd_algos_ring_t *c = ctx;
  int T = c->steps;
  int rank = brd_algos_rank_at(a, p), next = brd_algos_rank_at(a, p + 1);
  uint32_t chunk = (uint32_t)blk;
  uint8_t llf = c->ll ? BRD_IR_REF_LL : 0;

  for (int j = 0; j <= T; j++) {
    /* Step j stores (and, before the last, forwards) the segment of
     * position p - j: step 0 the own input, later ones what came in. */
    int owner = brd_algos_rank_at(a, p - j);
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                      brd_algos_seg(c->nchunks, owner, chunk));
    brd_plan_ref_t fwd = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, next,
                                      brd_algos_ring_slot(c, blk, j));

    CHECK(brd_algos_ring_step_open(b, a, c, p, blk, j));
    if (j == 0) {
      brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1,
                           &in, 1, &out));
      CHECK(brd_algos_move(b, rank, blk, c->ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT,
                           0, chunk, 1, 0, 1, &in, 1, &fwd));
    } else {
      brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                                        brd_algos_ring_slot(c, blk, j - 1));
      brd_plan_ref_t dst[2] = {out, fwd};
      uint8_t code = c->ll ? BRD_IR_OP_PKT_REDUCE
                           : j < T ? BRD_IR_OP_REDUCE : BRD_IR_OP_COPY;
      CHECK(brd_algos_move(b, rank, blk, code, 0, chunk, j + 1, j, 1, &src,
                           j < T ? 2 : 1, dst));
    }
    CHECK(brd_algos_ring_step_close(b, a, c, p, blk, j));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_allgather(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out) {
  return brd_algos_ring_segments(args, BRD_IR_COLL_ALLGATHER, ag_ring_block,
                                 "ring all-gather", plan_out);
}

static ncclResult_t ag_direct_block(brd_plan_builder_t *b,
                                    const brd_algos_args_t *a, int p, int blk,
                                    brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t nchunks = (uint32_t)a->nblocks, chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  CHECK(brd_algos_direct_push(b, a, p, blk, in, chunk, data_sem, credit_sem, refs));
  brd_plan_ref_t own = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                    brd_algos_seg(nchunks, rank, chunk));
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &in, 1, &own));
  for (int i = 1; i < n; i++) {
    int from = brd_algos_rank_at(a, p - i);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                                      brd_algos_direct_slot(n, blk, p - i, p));
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                      brd_algos_seg(nchunks, from, chunk));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, from, data_sem, 1));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_COPY,
                         0, chunk, 0, 1, 1, &src, 1, &dst));
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, from, credit_sem, 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_direct_allgather(const brd_algos_args_t *args,
                                        brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "direct all-gather"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_ONESHOT, 0,
                            plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, "direct all-gather"));
  if ((size_t)args->nblocks * n > 65536 || (size_t)args->nblocks * (n - 1) > 65535) {
    WARN("direct all-gather: %d blocks x %d ranks exceed the IR's 16-bit "
         "chunk and slot indices", args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = (uint32_t)args->nblocks * (uint32_t)(n - 1),
      .slot_div = (uint32_t)(n - 1), .nsems = 2u * (uint32_t)args->nblocks,
      .seq_per_iter = 1, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_ONESHOT, .coll = BRD_IR_COLL_ALLGATHER};
  return brd_algos_build(&shape, args, ag_direct_block, NULL, "a direct all-gather",
                         plan_out);
}
