/*
 * Ring all-reduce, Simple and LL.
 *
 * Algorithm: each block owns nranks chunks of every window. Around the ring
 * (order[0] -> order[1] -> ...), nranks-1 steps reduce-scatter (receive a
 * partial chunk, add the own input, pass it on) and nranks-1 steps
 * all-gather (receive a finished chunk, keep it, pass it on).
 *
 * Memory ordering: Simple puts the data into the next rank's scratch slot
 * and then signals its data semaphore (release); the next rank waits on it
 * (acquire) before reading. LL writes packets whose flags carry the step, so
 * the reader needs no semaphore. Either way the reader signals a credit
 * semaphore back once it has consumed a slot, and the writer waits on that
 * credit before reusing the slot DEPTH transfers later (or, for the first
 * transfers of an iteration, the last use of the slot in the iteration
 * before, which completes at once in the first iteration).
 *
 * Blocks: every block is an independent ring over its own slice of the
 * window, so more blocks mean more transfers in flight; the count is the
 * tuner's choice. Each block gets DEPTH (BRD_ALGOS_RING_DEPTH, the ring
 * frame in common.c) scratch slots (its share of
 * NCCL_BUFFSIZE split DEPTH ways) so a rank can run DEPTH-1 transfers ahead
 * of its successor; DEPTH >= 2 is what keeps the ring from waiting on
 * itself.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* Chunk (within the block's n) that position p sends at transfer t. */
static int ring_chunk(int n, int p, int t) {
  int c = t <= n - 2 ? p - t : p + 1 - (t - (n - 1));
  return ((c % n) + n) % n;
}

static ncclResult_t ring_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                               int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  const brd_algos_ring_t *c = ctx;
  int n = a->nranks, T = c->steps;
  int rank = brd_algos_rank_at(a, p), next = brd_algos_rank_at(a, p + 1);
  uint8_t ll = c->ll ? BRD_IR_REF_LL : 0;

  for (int j = 0; j <= T; j++) {
    /* Step j consumes the predecessor's transfer j-1 and produces
     * transfer j; both carry the same chunk. */
    int chunk = blk * n + (j < T ? ring_chunk(n, p, j) : ring_chunk(n, p - 1, j - 1));
    brd_plan_ref_t src[2], dst[2];
    int nsrc = 0, ndst = 0;
    uint8_t code, flags = 0;

    CHECK(brd_algos_ring_step_open(b, a, c, p, blk, j));
    if (j <= n - 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, (uint32_t)chunk);
    if (j >= 1)
      src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1,
                                 brd_algos_ring_slot(c, blk, j - 1));
    if (j >= n - 1) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (uint32_t)chunk);
    if (j < T)
      dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, next,
                                 brd_algos_ring_slot(c, blk, j));
    if (j == n - 1) flags = BRD_IR_F_POSTOP;

    if (c->ll) code = j == 0 ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PKT_REDUCE;
    else if (j == 0) code = BRD_IR_OP_PUT;
    else if (j == T) code = BRD_IR_OP_COPY;
    else code = BRD_IR_OP_REDUCE;
    CHECK(brd_algos_move(b, rank, blk, code, flags, (uint32_t)chunk, j + 1, j,
                         nsrc, src, ndst, dst));
    CHECK(brd_algos_ring_step_close(b, a, c, p, blk, j));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "ring all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_RING, 0, plan_out);
  int n = args->nranks;
  if ((size_t)args->nblocks * n > 65535) {
    WARN("ring all-reduce: %d blocks x %d ranks exceed 65535 chunks",
         args->nblocks, n);
    return ncclInvalidArgument;
  }
  return brd_algos_ring_build(args, BRD_IR_COLL_ALLREDUCE, 2 * (n - 1),
                              (uint32_t)args->nblocks * (uint32_t)n, ring_block,
                              "a ring all-reduce", plan_out);
}
