/*
 * Zero-copy plans (BRD_IR_PLAN_F_PEER_INPUT): for registered buffers, which
 * every rank maps from every other rank, so a plan reads peers' inputs and
 * writes peers' outputs in place and needs no scratch at all. Simple
 * protocol only; one window covers the whole message (no slots).
 *
 * Every plan opens with a join signal to every peer (this rank's launch has
 * started: its input is ready and its output free) and a wait for theirs,
 * and closes with a done signal and a wait for theirs (no peer reads this
 * rank's input or writes its output any more), so no rank returns while
 * its buffers are still in use. The verifier checks both (peer inputs read
 * only between a peer's join and its end).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* Join (sem) or done (sem + 1) signals to every peer, then waits for
 * theirs. */
static ncclResult_t all_sync(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                             int blk, uint32_t sem) {
  int n = a->nranks, rank = brd_algos_rank_at(a, p);
  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, brd_algos_rank_at(a, p + i),
                           sem, 1));
  for (int i = 1; i < n; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, brd_algos_rank_at(a, p - i),
                           sem, 1));
  return ncclSuccess;
}

/* The zero-copy shape: no scratch, a join and a done semaphore per block,
 * Simple only; body per (position, block). */
static ncclResult_t zc_build(const brd_algos_args_t *args, uint8_t coll, uint8_t algo,
                             size_t nchunks, const char *what, brd_algos_block_fn body,
                             brd_ir_plan_t **plan_out) {
  if (args->proto != BRD_IR_PROTO_SIMPLE || nchunks > 65535) {
    WARN("%s: Simple protocol only, and at most 65535 chunks (%d blocks x %d ranks)",
         what, args->nblocks, args->nranks);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = (uint32_t)nchunks,
      .nslots = 0, .slot_div = 1, .nsems = 2u * (uint32_t)args->nblocks,
      .seq_per_iter = 1, .proto = BRD_IR_PROTO_SIMPLE, .algo = algo,
      .coll = coll, .flags = BRD_IR_PLAN_F_PEER_INPUT};
  char name[96];
  snprintf(name, sizeof(name), "a %s plan", what);
  return brd_algos_build(&shape, args, body, NULL, name, plan_out);
}

/* A one-shot zero-copy plan of coll (reduce-scatter, all-gather): one
 * chunk per block, each rank a direct peer of every other. */
static ncclResult_t zc_oneshot(const brd_algos_args_t *args, uint8_t coll, const char *what,
                               brd_algos_block_fn body, brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, what));
  CHECK(brd_algos_check_direct(args->nranks, what));
  return zc_build(args, coll, BRD_IR_ALGO_ONESHOT, (size_t)args->nblocks, what, body,
                  plan_out);
}

/* ---- all-reduce: two-shot ------------------------------------------------
 *
 * With every rank's send and receive buffers registered and mapped by its
 * peers (BRD_IR_PLAN_F_PEER_INPUT), the owner of shard s reads shard s of
 * every rank's input in place, reduces it into its own output and writes
 * the result into every peer's output: no scratch, each rank moving
 * 2(n-1)/n of the message over the links. Every rank first tells every
 * peer it has joined (its input is ready, its output free) and waits for
 * theirs; at the end it tells every peer it is done with their buffers and
 * waits for theirs, so no rank returns while a peer still reads its input
 * or writes its output. In place is safe: shard s of rank q's buffer is
 * read and then written by the owner of s alone. */
static ncclResult_t peer_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                               int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks;
  int rank = brd_algos_rank_at(a, p);
  uint32_t own = (uint32_t)(blk * n + p);
  uint32_t join_sem = 2u * (uint32_t)blk, done_sem = join_sem + 1;
  CHECK(all_sync(b, a, p, blk, join_sem));
  refs[0] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, own);
  for (int i = 1; i < n; i++)
    refs[i] = brd_plan_ref(BRD_IR_BUF_INPUT, brd_algos_rank_at(a, p + i), own);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, own);
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, own, 0, 1, n,
                       refs, 1, &out));
  for (int i = 1; i < n; i++)
    refs[i - 1] = brd_plan_ref(BRD_IR_BUF_OUTPUT, brd_algos_rank_at(a, p + i), own);
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_PUT, 0, own, 1, 0, 1, &out, n - 1, refs));
  CHECK(all_sync(b, a, p, blk, done_sem));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_zerocopy_allreduce(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "zero-copy two-shot all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TWOSHOT, 0, plan_out);
  return zc_build(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TWOSHOT,
                  (size_t)args->nblocks * (size_t)args->nranks,
                  "zero-copy two-shot all-reduce", peer_block, plan_out);
}

/* ---- reduce-scatter ------------------------------------------------------
 *
 * Rank r reduces segment r of every rank's input, read in place, straight
 * into its output. In place is safe: rank q's segment q (its output) is
 * read and written by q alone. */
static ncclResult_t rs_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                             int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, rank = brd_algos_rank_at(a, p);
  uint32_t nch = (uint32_t)a->nblocks, c = (uint32_t)blk;
  CHECK(all_sync(b, a, p, blk, 2u * (uint32_t)blk));
  refs[0] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nch, rank, c));
  for (int i = 1; i < n; i++)
    refs[i] = brd_plan_ref(BRD_IR_BUF_INPUT, brd_algos_rank_at(a, p + i),
                           brd_algos_seg(nch, rank, c));
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c);
  CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, c, 0, 1, n, refs,
                       1, &out));
  return all_sync(b, a, p, blk, 2u * (uint32_t)blk + 1);
}

/* See algos.h. */
ncclResult_t brd_algos_zerocopy_reducescatter(const brd_algos_args_t *args,
                                              brd_ir_plan_t **plan_out) {
  return zc_oneshot(args, BRD_IR_COLL_REDUCESCATTER, "zero-copy reduce-scatter", rs_block,
                    plan_out);
}

/* ---- all-gather ------------------------------------------------------------
 *
 * Rank r reads every peer's input in place into that peer's segment of its
 * output, and copies its own input into its own segment only after every
 * peer is done reading it: in place, that input is the segment itself. */
static ncclResult_t ag_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                             int p, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)ctx;
  int n = a->nranks, rank = brd_algos_rank_at(a, p);
  uint32_t nch = (uint32_t)a->nblocks, c = (uint32_t)blk;
  (void)refs;
  CHECK(all_sync(b, a, p, blk, 2u * (uint32_t)blk));
  for (int i = 1; i < n; i++) {
    int q = brd_algos_rank_at(a, p + i);
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, q, c);
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nch, q, c));
    CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_GET, 0, c, 0, 0, 1, &src, 1, &dst));
  }
  CHECK(all_sync(b, a, p, blk, 2u * (uint32_t)blk + 1));
  brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, c);
  brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nch, rank, c));
  return brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, c, 0, 0, 1, &src, 1, &dst);
}

/* See algos.h. */
ncclResult_t brd_algos_zerocopy_allgather(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out) {
  return zc_oneshot(args, BRD_IR_COLL_ALLGATHER, "zero-copy all-gather", ag_block, plan_out);
}
