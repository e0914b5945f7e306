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
 * tuner's choice. Each block gets DEPTH scratch slots (its share of
 * NCCL_BUFFSIZE split DEPTH ways) so a rank can run DEPTH-1 transfers ahead
 * of its successor; DEPTH >= 2 is what keeps the ring from waiting on
 * itself.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

#define RING_DEPTH 4

typedef struct ring_ctx {
  brd_plan_builder_t *b;
  int n, nblocks, depth, steps, ll;
} ring_ctx_t;

/* Chunk (within the block's n) that position p sends at transfer t. */
static int ring_chunk(int n, int p, int t) {
  int c = t <= n - 2 ? p - t : p + 1 - (t - (n - 1));
  return ((c % n) + n) % n;
}

/* Credit target before transfer t may overwrite its slot: the successor
 * must have consumed the slot's previous use. */
static int32_t ring_credit_k(const ring_ctx_t *c, int t) {
  if (t >= c->depth) return t - c->depth + 1;
  int last = t + c->depth * ((c->steps - 1 - t) / c->depth);
  return last + 1 - c->steps; /* in the previous iteration */
}

static ncclResult_t ring_block(const ring_ctx_t *c, const brd_algos_args_t *a,
                               int p, int blk) {
  int n = c->n, T = c->steps;
  int rank = brd_algos_rank_at(a, p);
  int next = brd_algos_rank_at(a, p + 1);
  int prev = brd_algos_rank_at(a, p - 1);
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  uint8_t ll = c->ll ? BRD_IR_REF_LL : 0;

  for (int j = 0; j <= T; j++) {
    /* Step j consumes the predecessor's transfer j-1 and produces
     * transfer j; both carry the same chunk. */
    int chunk = blk * n + (j < T ? ring_chunk(n, p, j) : ring_chunk(n, p - 1, j - 1));
    uint32_t in_slot = (uint32_t)(blk * c->depth + (j + c->depth - 1) % c->depth);
    uint32_t out_slot = (uint32_t)(blk * c->depth + j % c->depth);
    brd_plan_ref_t src[2], dst[2];
    int nsrc = 0, ndst = 0;
    uint8_t code, flags = 0;

    if (j >= 1 && !c->ll)
      CHECK(brd_plan_op_sync(c->b, rank, blk, BRD_IR_OP_WAIT, prev, data_sem, j));
    if (j < T)
      CHECK(brd_plan_op_sync(c->b, rank, blk, BRD_IR_OP_WAIT, next, credit_sem,
                             ring_credit_k(c, j)));

    if (j <= n - 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, (uint32_t)chunk);
    if (j >= 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1, in_slot);
    if (j >= n - 1) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (uint32_t)chunk);
    if (j < T) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, next, out_slot);
    if (j == n - 1) flags = BRD_IR_F_POSTOP;

    if (c->ll) code = j == 0 ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PKT_REDUCE;
    else if (j == 0) code = BRD_IR_OP_PUT;
    else if (j == T) code = BRD_IR_OP_COPY;
    else code = BRD_IR_OP_REDUCE;
    CHECK(brd_algos_move(c->b, rank, blk, code, flags, (uint32_t)chunk, j + 1, j,
                         nsrc, src, ndst, dst));

    if (j >= 1)
      CHECK(brd_plan_op_sync(c->b, rank, blk, BRD_IR_OP_SIGNAL, prev, credit_sem, j));
    if (j < T && !c->ll)
      CHECK(brd_plan_op_sync(c->b, rank, blk, BRD_IR_OP_SIGNAL, next, data_sem, j + 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  CHECK(brd_algos_check(args, -1, "ring all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_RING, 0, plan_out);

  ring_ctx_t c;
  c.n = args->nranks;
  c.nblocks = args->nblocks;
  c.steps = 2 * (c.n - 1);
  c.depth = c.steps < RING_DEPTH ? c.steps : RING_DEPTH;
  c.ll = args->proto == BRD_IR_PROTO_LL;
  brd_plan_shape_t shape = {
      .nranks = c.n, .nblocks = c.nblocks,
      .nchunks = (uint32_t)c.nblocks * (uint32_t)c.n,
      .nslots = (uint32_t)c.nblocks * (uint32_t)c.depth,
      .slot_div = (uint32_t)c.depth, .nsems = 2u * (uint32_t)c.nblocks,
      .seq_per_iter = (uint32_t)c.steps, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_RING, .coll = BRD_IR_COLL_ALLREDUCE};
  if ((size_t)c.nblocks * c.n > 65535) {
    WARN("ring all-reduce: %d blocks x %d ranks exceed 65535 chunks",
         c.nblocks, c.n);
    return ncclInvalidArgument;
  }
  CHECK(brd_plan_builder_create(&shape, &c.b));
  for (int p = 0; p < c.n; p++) {
    for (int blk = 0; blk < c.nblocks; blk++)
      CHECK_GOTO(ring_block(&c, args, p, blk), res, fail_destroy_builder);
  }
  res = brd_plan_builder_finish(c.b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(c.b);
  return res;
}
