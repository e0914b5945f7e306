/*
 * Two-shot all-reduce (Simple and LL), by direct access to peers' memory.
 *
 * Algorithm: each block's window slice is cut into n shards, shard s owned
 * by position s. Reduce-scatter: every rank pushes shard s of its input into
 * a slot of the owner's scratch, and the owner reduces its own input shard
 * with the n-1 slots into its output. All-gather: the owner pushes the
 * finished shard to every peer (Simple: straight into their output; LL: as
 * packets into their scratch, which they unpack into their output).
 *
 * Memory ordering: Simple signals the receiver after each push (release)
 * and the receiver waits (acquire) before reading or before relying on its
 * output; LL relies on packet flags. Slot reuse across iterations needs no
 * credit: a rank writes an owner's reduce-scatter slot again only after it
 * received that owner's all-gather data of the previous iteration, sent
 * after the owner consumed the slot; LL all-gather slots are rewritten only
 * after the reader's next reduce-scatter data arrived, sent after it
 * consumed them.
 *
 * Blocks: each block owns n chunks (one shard per rank) of every window,
 * so blocks split the message evenly; every block talks to every peer.
 * Each block has n-1 slots per phase, sharing one NCCL_BUFFSIZE
 * (NCCL_LL_BUFFSIZE) buffer.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* Slot at the receiver (position pr) for data from the sender (ps), in the
 * reduce-scatter (ag = 0) or all-gather (ag = 1) area. */
static uint32_t twoshot_slot(int n, int nblocks, int blk, int ps, int pr, int ag) {
  return brd_algos_direct_slot(n, ag * nblocks + blk, ps, pr);
}

/* See algos.h. */
ncclResult_t brd_algos_twoshot_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                     int p, int blk, brd_plan_ref_t *refs,
                                     const void *ctx) {
  int det = *(const int *)ctx;
  int n = a->nranks, nb = a->nblocks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t own = (uint32_t)(blk * n + p);
  uint32_t rs_sem = 2u * (uint32_t)blk, ag_sem = rs_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  /* Reduce-scatter: shard of position p+i goes to that position. */
  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    uint32_t chunk = (uint32_t)(blk * n + (p + i) % n);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, q,
                                      twoshot_slot(n, nb, blk, p, p + i, 0));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT,
                         0, chunk, 1, 0, 1, &src, 1, &dst));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, q, rs_sem, 1));
  }
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, -1, rs_sem, 1));
  brd_algos_sources_t sources = {
      .own = brd_plan_ref(BRD_IR_BUF_INPUT, -1, own), .chunk = own, .ordered = det,
      .dir = -1, .llf = llf, .own_slot = (uint32_t)(nb * (n - 1) * (ll ? 2 : 1) + blk)};
  CHECK(brd_algos_reduce_slots(b, a, p, blk, &sources, refs));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, own);

  /* All-gather of the own shard. */
  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    refs[i - 1] = ll ? brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, q,
                                    twoshot_slot(n, nb, blk, p, p + i, 1))
                     : brd_plan_ref(BRD_IR_BUF_OUTPUT, q, own);
  }
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                       own, 1, 0, 1, &out, n - 1, refs));
  for (int i = 1; i < n; i++) {
    int from = p - i;
    uint32_t chunk = (uint32_t)(blk * n + ((from % n) + n) % n);
    if (ll) {
      brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1,
                                        twoshot_slot(n, nb, blk, from, p, 1));
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_PKT_REDUCE, 0, chunk, 0, 1,
                           1, &src, 1, &dst));
    } else {
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL,
                             brd_algos_rank_at(a, p + i), ag_sem, 1));
    }
  }
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, -1, ag_sem, 1));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_twoshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "two-shot all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TWOSHOT, 0, plan_out);
  int n = args->nranks, ll = args->proto == BRD_IR_PROTO_LL;
  size_t nslots = (size_t)args->nblocks * (n - 1) * (ll ? 2 : 1);
  if ((size_t)args->nblocks * n > 65535 || nslots > 65535) {
    WARN("two-shot all-reduce: %d blocks x %d ranks exceed 65535 chunks or "
         "slots", args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks,
      .nchunks = (uint32_t)args->nblocks * (uint32_t)n,
      .nslots = (uint32_t)nslots, .slot_div = (uint32_t)(n - 1) * (ll ? 2u : 1u),
      .nsems = ll ? 0 : 2u * (uint32_t)args->nblocks, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_TWOSHOT,
      .coll = BRD_IR_COLL_ALLREDUCE};
  static const int plain = 0;
  return brd_algos_build(&shape, args, brd_algos_twoshot_block, &plain, "a two-shot plan",
                         plan_out);
}
