/*
 * Gather and scatter, direct, Simple and LL. Gather: segment q of the
 * root's output receives rank q's input; other ranks' outputs are never
 * written. Scatter: rank q's output receives segment q of the root's
 * input; other ranks' inputs are never read.
 *
 * Gather. Algorithm: every other rank pushes its chunk into its own slot
 * of the root's scratch; the root copies each into its segment and its
 * own input into its own segment, then tells every rank it is done.
 * Memory ordering: Simple signals a data semaphore after the push, LL
 * carries flags; the done signal, sent once the root read every slot,
 * releases the slots for the next window and lets every rank finish only
 * after all joined.
 *
 * Scatter. Algorithm: the root pushes segment q of its input into a slot
 * of rank q's scratch and copies its own segment; each rank copies its
 * slot into its output and acknowledges; once all have, the root tells
 * everyone it is done (so every rank has heard of every other before it
 * finishes). Memory ordering as for gather.
 *
 * Blocks split the message (one chunk each); gather needs n-1 slots per
 * block at the root, sharing one buffer, scatter one slot per block.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

static ncclResult_t gather_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                 int root, int p, int blk) {
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t nchunks = (uint32_t)a->nblocks, chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, done_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);

  if (rank != root)
    return brd_algos_push_to_root(b, a, p, blk, root, in, data_sem, done_sem);
  brd_plan_ref_t own = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nchunks, rank, chunk));
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &in, 1, &own));
  for (int i = 1; i < n; i++) {
    int from = brd_algos_rank_at(a, p + i);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                                      brd_algos_direct_slot(n, blk, p + i, p));
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                      brd_algos_seg(nchunks, from, chunk));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, from, data_sem, 1));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_COPY,
                         0, chunk, 0, 1, 1, &src, 1, &dst));
  }
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, done_sem, 1);
}

static ncclResult_t scatter_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                  int root, int p, int blk) {
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t nchunks = (uint32_t)a->nblocks, chunk = (uint32_t)blk;
  uint32_t data_sem = 3u * (uint32_t)blk, ack_sem = data_sem + 1, done_sem = data_sem + 2;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  if (rank != root)
    return brd_algos_recv_from_root(b, a, p, blk, root, data_sem, ack_sem, done_sem);
  for (int i = 1; i < n; i++) {
    int to = brd_algos_rank_at(a, p + i);
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, to, chunk));
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, to, chunk);
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                         chunk, 1, 0, 1, &in, 1, &dst));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, to, data_sem, 1));
  }
  brd_plan_ref_t own = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, rank, chunk));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &own, 1, &out));
  CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, 1, ack_sem, 1));
  return brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, done_sem, 1);
}

/* Shared driver: shape check, builder, every (position, block). */
static ncclResult_t generate(const brd_algos_args_t *args, int root, int gather,
                             brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_builder_t *b = NULL;
  const char *what = gather ? "direct gather" : "direct scatter";
  uint8_t coll = gather ? BRD_IR_COLL_GATHER : BRD_IR_COLL_SCATTER;
  CHECK(brd_algos_check(args, root, what));
  if (args->nranks == 1)
    return brd_algos_single(args, coll, BRD_IR_ALGO_ONESHOT, root, plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, what));
  size_t nslots = gather ? (size_t)args->nblocks * (n - 1) : (size_t)args->nblocks;
  if ((size_t)args->nblocks * n > 65536 || nslots > 65535 ||
      (size_t)args->nblocks * 3 > 65535) {
    WARN("%s: %d blocks x %d ranks exceed the IR's 16-bit chunk, slot and "
         "semaphore indices", what, args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = (uint32_t)nslots, .slot_div = gather ? (uint32_t)(n - 1) : 1u,
      .nsems = (gather ? 2u : 3u) * (uint32_t)args->nblocks, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_ONESHOT, .coll = coll,
      .root = (uint16_t)root};
  CHECK(brd_plan_builder_create(&shape, &b));
  for (int p = 0; p < n; p++) {
    for (int blk = 0; blk < args->nblocks; blk++) {
      if (gather) CHECK_GOTO(gather_block(b, args, root, p, blk), res, fail_destroy_builder);
      else CHECK_GOTO(scatter_block(b, args, root, p, blk), res, fail_destroy_builder);
    }
  }
  res = brd_plan_builder_finish(b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(b);
  return res;
}

/* See algos.h. */
ncclResult_t brd_algos_direct_gather(const brd_algos_args_t *args, int root,
                                     brd_ir_plan_t **plan_out) {
  return generate(args, root, 1, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_direct_scatter(const brd_algos_args_t *args, int root,
                                      brd_ir_plan_t **plan_out) {
  return generate(args, root, 0, plan_out);
}
