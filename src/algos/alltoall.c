/*
 * All-to-all by pairwise exchange, Simple and LL. Input and output hold
 * nranks segments; segment q of rank r's output receives segment r of
 * rank q's input.
 *
 * Algorithm: at peer offset s (1..n-1) every rank sends its segment for
 * rank+s into its own slot of that rank's scratch and copies what rank-s
 * sent it into segment rank-s of its output; the own segment is a local
 * copy. Offsets are spread across blocks (offset s goes to block
 * (s-1) % nblocks; at most n-1 blocks, more would idle), so with enough blocks every exchange runs in parallel,
 * and the offsets of one block run in turn, each pairing every rank with
 * the same partner distance so no block waits on a block that waits on it.
 * Each window is one chunk per segment.
 *
 * Memory ordering: Simple signals the receiver's data semaphore after the
 * put, LL carries flags; the receiver signals a credit once it copied the
 * slot out, and the sender waits for it before reusing the slot one
 * iteration later. Every rank reads from every other, so no rank finishes
 * before all have joined. Scratch: one slot per sender at each receiver,
 * n-1 slots sharing one buffer.
 */
#include "base/check.h"
#include "algos/algos.h"

/* Slot at the receiver (position pr) for data from the sender (ps). */
static uint32_t a2a_slot(int n, int ps, int pr) {
  return (uint32_t)(((ps - pr - 1) % n + n) % n);
}

static ncclResult_t a2a_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                              int p, int blk) {
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  const uint32_t nchunks = 1, data_sem = 0, credit_sem = 1;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;

  if (blk == 0) {
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, rank, 0));
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nchunks, rank, 0));
    CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, &in, 1, &out));
  }
  for (int s = blk + 1; s < n; s += a->nblocks) {
    int to = brd_algos_rank_at(a, p + s), from = brd_algos_rank_at(a, p - s);
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, to, 0));
    brd_plan_ref_t put = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, to, a2a_slot(n, p, p + s));
    brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, -1, a2a_slot(n, p - s, p));
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nchunks, from, 0));
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, to, credit_sem, 0));
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0, 0,
                         1, 0, 1, &in, 1, &put));
    if (!ll) {
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, to, data_sem, 1));
      CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, from, data_sem, 1));
    }
    CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_COPY, 0,
                         0, 0, 1, 1, &slot, 1, &out));
    CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, from, credit_sem, 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_pairwise_alltoall(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_builder_t *b = NULL;
  CHECK(brd_algos_check(args, -1, "pairwise all-to-all"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLTOALL, BRD_IR_ALGO_ONESHOT, 0,
                            plan_out);
  int n = args->nranks;
  CHECK(brd_algos_check_direct(n, "pairwise all-to-all"));
  /* More blocks than peer offsets would have nothing to do. */
  int nblocks = args->nblocks < n - 1 ? args->nblocks : n - 1;
  brd_algos_args_t a = *args;
  a.nblocks = nblocks;
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = nblocks, .nchunks = 1,
      .nslots = (uint32_t)(n - 1), .slot_div = (uint32_t)(n - 1), .nsems = 2,
      .seq_per_iter = 1, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_ONESHOT, .coll = BRD_IR_COLL_ALLTOALL};
  CHECK(brd_plan_builder_create(&shape, &b));
  for (int p = 0; p < n; p++)
    for (int blk = 0; blk < nblocks; blk++)
      CHECK_GOTO(a2a_block(b, &a, p, blk), res, fail_destroy_builder);
  res = brd_plan_builder_finish(b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(b);
  return res;
}
