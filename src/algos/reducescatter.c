/*
 * Reduce-scatter: ring (large messages) and direct (small), Simple and LL.
 * The input holds nranks segments; rank r's output is the reduction of
 * every rank's segment r.
 *
 * Ring. Algorithm: each block owns one chunk of every window. Transfer j
 * of position p carries the partial sum of segment (p - 1 - j): at step 0
 * a rank sends its own input of that segment, at later steps it adds its
 * input to what the predecessor sent and passes it on, and after n-1
 * transfers the partial of its own segment arrives, to which it adds its
 * input and applies the post-op into the output. Memory ordering and slot
 * reuse are the ring all-reduce's (data semaphore or LL flags forward,
 * credits back, BRD_ALGOS_RING_DEPTH slots per block). Every output holds
 * every rank's contribution, so no rank finishes before all have joined.
 * Blocks split the message.
 *
 * Direct. Algorithm: every rank pushes its segment q into one slot of rank
 * q's scratch, and reduces its own segment with the n-1 slots it received,
 * in one step. With `deterministic` the sources are combined in rank order
 * 0..n-1 (the own input at its rank's place), so every element sees the
 * same order whatever the block count or size. Memory ordering: Simple
 * signals the owner after each push, LL carries flags; credits back let a
 * sender reuse the slot one iteration later. Blocks split the message; n-1
 * slots per block share one buffer.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

static ncclResult_t rs_ring_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                  int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  const brd_algos_ring_t *c = ctx;
  int T = c->steps;
  int rank = brd_algos_rank_at(a, p), next = brd_algos_rank_at(a, p + 1);
  uint32_t chunk = (uint32_t)blk;
  uint8_t llf = c->ll ? BRD_IR_REF_LL : 0;

  for (int j = 0; j <= T; j++) {
    /* Step j consumes transfer j-1 and produces transfer j, both carrying
     * segment (p - 1 - j); the last step's segment is the rank's own. */
    int seg = brd_algos_rank_at(a, p - 1 - j);
    brd_plan_ref_t src[2], dst;
    int nsrc = 0;
    uint8_t code;

    CHECK(brd_algos_ring_step_open(b, a, c, p, blk, j));
    src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(c->nchunks, seg, chunk));
    if (j >= 1)
      src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                                 brd_algos_ring_slot(c, blk, j - 1));
    if (j < T)
      dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, next, brd_algos_ring_slot(c, blk, j));
    else
      dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    if (c->ll) code = j == 0 ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PKT_REDUCE;
    else code = j == 0 ? BRD_IR_OP_PUT : BRD_IR_OP_REDUCE;
    CHECK(brd_algos_move(b, rank, blk, code, j == T ? BRD_IR_F_POSTOP : 0,
                         chunk, j + 1, j, nsrc, src, 1, &dst));
    CHECK(brd_algos_ring_step_close(b, a, c, p, blk, j));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_reducescatter(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out) {
  return brd_algos_ring_segments(args, BRD_IR_COLL_REDUCESCATTER, rs_ring_block,
                                 "ring reduce-scatter", plan_out);
}

static ncclResult_t rs_direct_block(brd_plan_builder_t *b,
                                    const brd_algos_args_t *a, int p, int blk,
                                    brd_plan_ref_t *refs, const void *ctx) {
  int det = *(const int *)ctx; /* rank-ordered reduction */
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t nchunks = (uint32_t)a->nblocks, chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, q, chunk));
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, q,
                                      brd_algos_direct_slot(n, blk, p, p + i));
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, q, credit_sem, 0));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                         chunk, 1, 0, 1, &src, 1, &dst));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, q, data_sem, 1));
  }
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, -1, data_sem, 1));
  /* Sources: the own segment and one slot per peer, either in rank order
   * or own input first then the nearest predecessor onwards. */
  brd_algos_sources_t src = {
      .own = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, rank, chunk)),
      .chunk = chunk, .ordered = det, .dir = -1, .llf = llf,
      .own_slot = (uint32_t)(a->nblocks * (n - 1) + blk)};
  CHECK(brd_algos_reduce_slots(b, a, p, blk, &src, refs));
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, -1, credit_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_direct_reducescatter(const brd_algos_args_t *args,
                                            int deterministic,
                                            brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "direct reduce-scatter"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_ONESHOT,
                            0, plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, "direct reduce-scatter"));
  if ((size_t)args->nblocks * n > 65536 || (size_t)args->nblocks * n > 65535) {
    WARN("direct reduce-scatter: %d blocks x %d ranks exceed the IR's 16-bit "
         "chunk and slot indices", args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape =
      brd_algos_direct_reduce_shape(args, BRD_IR_COLL_REDUCESCATTER, 0, deterministic);
  return brd_algos_build(&shape, args, rs_direct_block, &deterministic,
                         "a direct reduce-scatter", plan_out);
}
