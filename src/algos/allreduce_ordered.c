/*
 * Rank-ordered all-reduce (BRAID_DETERMINISTIC): one-shot and two-shot,
 * Simple and LL, where every element is the reduction of the ranks' data
 * in rank order 0..n-1, in one reduce op with the same sources whatever
 * the algorithm, protocol, block count or message size, so the result is
 * bit-identical across all of them.
 *
 * One-shot. Algorithm: every rank pushes its chunk into a slot of every
 * peer's scratch, then reduces the n inputs (its own at its rank's place)
 * into its output. Two-shot. Algorithm: each block's window slice is cut
 * into n shards; shard s is reduced (in rank order) by the rank at
 * position s from the shards every rank pushed into its scratch, then
 * pushed to every peer's output (Simple) or scratch (LL).
 *
 * Memory ordering: as the one-shot and two-shot all-reduce: Simple signals
 * a data semaphore after each push (release) and the reader waits
 * (acquire); LL carries flags. One-shot reuses slots after a credit from
 * the reader; two-shot needs none (a rank writes an owner's slot again
 * only after that owner's all-gather data of the previous window arrived).
 * Every output holds every rank's contribution, so no rank finishes
 * before all joined.
 *
 * Blocks: one-shot gives each block one chunk of every window and n-1
 * slots; two-shot n chunks (one shard per rank) and n-1 slots per phase.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* Slot at the receiver (position pr) for data from the sender (ps), in the
 * area `area` (two-shot: 0 reduce-scatter, 1 all-gather). */
static uint32_t slot_of(int n, int nblocks, int blk, int ps, int pr, int area) {
  int rel = ((ps - pr - 1) % n + n) % n;
  return (uint32_t)((area * nblocks + blk) * (n - 1) + rel);
}

/* Sources of position p's reduction of `chunk`, in rank order: its own
 * input at its rank's place, elsewhere the slot the rank at that place
 * filled. With many ranks the own input is first copied into the block's
 * own slot `own_slot` (BRD_ALGOS_ORDERED_OWN_SLOT_MIN). */
static ncclResult_t ordered_sources(brd_plan_builder_t *b,
                                    const brd_algos_args_t *a, int p, int blk,
                                    uint32_t chunk, uint8_t llf,
                                    uint32_t own_slot, brd_plan_ref_t *refs) {
  int n = a->nranks, rank = brd_algos_rank_at(a, p);
  brd_plan_ref_t own = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  if (n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN) {
    brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, own_slot);
    CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, chunk, 0, 0, 1, &own,
                         1, &slot));
    own = slot;
  }
  for (int q = 0; q < n; q++)
    refs[q] = q == rank ? own
                        : brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1,
                                       slot_of(n, a->nblocks, blk,
                                               brd_algos_pos_of(a, q), p, 0));
  return ncclSuccess;
}

static ncclResult_t oneshot_block(brd_plan_builder_t *b,
                                  const brd_algos_args_t *a, int p, int blk,
                                  brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t chunk = (uint32_t)blk;
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, brd_algos_rank_at(a, p + i),
                           credit_sem, 0));
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  for (int i = 1; i < n; i++)
    refs[i - 1] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, brd_algos_rank_at(a, p + i),
                               slot_of(n, a->nblocks, blk, p, p + i, 0));
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
  CHECK(ordered_sources(b, a, p, blk, chunk, llf,
                        (uint32_t)(a->nblocks * (n - 1) + blk), refs));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE,
                       BRD_IR_F_POSTOP, chunk, 0, 1, n, refs, 1, &out));
  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL,
                           brd_algos_rank_at(a, p - i), credit_sem, 1));
  return ncclSuccess;
}

static ncclResult_t twoshot_block(brd_plan_builder_t *b,
                                  const brd_algos_args_t *a, int p, int blk,
                                  brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, nb = a->nblocks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  uint32_t own = (uint32_t)(blk * n + p);
  uint32_t rs_sem = 2u * (uint32_t)blk, ag_sem = rs_sem + 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    uint32_t chunk = (uint32_t)(blk * n + (p + i) % n);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, q,
                                      slot_of(n, nb, blk, p, p + i, 0));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT,
                         0, chunk, 1, 0, 1, &src, 1, &dst));
    if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, q, rs_sem, 1));
  }
  if (!ll) {
    for (int i = 1; i < n; i++)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT,
                             brd_algos_rank_at(a, p - i), rs_sem, 1));
  }
  CHECK(ordered_sources(b, a, p, blk, own, llf,
                        (uint32_t)(nb * (n - 1) * (ll ? 2 : 1) + blk), refs));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, own);
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE,
                       BRD_IR_F_POSTOP, own, 0, 1, n, refs, 1, &out));

  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    refs[i - 1] = ll ? brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, q,
                                    slot_of(n, nb, blk, p, p + i, 1))
                     : brd_plan_ref(BRD_IR_BUF_OUTPUT, q, own);
  }
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                       own, 1, 0, 1, &out, n - 1, refs));
  for (int i = 1; i < n; i++) {
    int from = p - i;
    uint32_t chunk = (uint32_t)(blk * n + ((from % n) + n) % n);
    if (ll) {
      brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1,
                                        slot_of(n, nb, blk, from, p, 1));
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_PKT_REDUCE, 0, chunk, 0, 1,
                           1, &src, 1, &dst));
    } else {
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL,
                             brd_algos_rank_at(a, p + i), ag_sem, 1));
    }
  }
  if (!ll) {
    for (int i = 1; i < n; i++)
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT,
                             brd_algos_rank_at(a, p - i), ag_sem, 1));
  }
  return ncclSuccess;
}

static ncclResult_t generate(const brd_algos_args_t *args, int two,
                             brd_ir_plan_t **plan_out) {
  const char *what = two ? "rank-ordered two-shot all-reduce"
                         : "rank-ordered one-shot all-reduce";
  uint8_t algo = two ? BRD_IR_ALGO_TWOSHOT : BRD_IR_ALGO_ONESHOT;
  CHECK(brd_algos_check(args, -1, what));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, algo, 0, plan_out);
  int n = args->nranks, ll = args->proto == BRD_IR_PROTO_LL;
  CHECK(brd_algos_check_direct(n, what));
  size_t nchunks = (size_t)args->nblocks * (two ? n : 1);
  size_t nslots = (size_t)args->nblocks * (n - 1) * (two && ll ? 2 : 1) +
                  (n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN ? (size_t)args->nblocks : 0);
  if (nchunks > 65535 || nslots > 65535) {
    WARN("%s: %d blocks x %d ranks exceed 65535 chunks or slots", what,
         args->nblocks, n);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)nchunks,
      .nslots = (uint32_t)nslots,
      .slot_div = (uint32_t)(n - 1) * (two && ll ? 2u : 1u),
      .nsems = 2u * (uint32_t)args->nblocks, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = algo,
      .coll = BRD_IR_COLL_ALLREDUCE};
  char name[128];
  snprintf(name, sizeof(name), "a %s", what);
  return brd_algos_build(&shape, args, two ? twoshot_block : oneshot_block, NULL, name,
                         plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_ordered_oneshot_allreduce(const brd_algos_args_t *args,
                                                 brd_ir_plan_t **plan_out) {
  return generate(args, 0, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_ordered_twoshot_allreduce(const brd_algos_args_t *args,
                                                 brd_ir_plan_t **plan_out) {
  return generate(args, 1, plan_out);
}
