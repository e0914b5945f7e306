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
 *
 * The block bodies are the one-shot and two-shot all-reduce's
 * (brd_algos_oneshot_block, brd_algos_twoshot_block), told to reduce in
 * rank order; this file is the frame of the ordered plans.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

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
  static const int ordered = 1;
  return brd_algos_build(&shape, args, two ? brd_algos_twoshot_block : brd_algos_oneshot_block,
                         &ordered, name, plan_out);
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
