/*
 * One-sided put, signal and wait as a plan: see brd_algos_rma (algos.h).
 * The executors run the writer's and the reader's parts as separate
 * launches (core/rma.c); the plan as a whole states the protocol so the
 * verifier can prove it: the put's data is ordered before the signal
 * (release), the wait acquires it, so the reader sees the data once it
 * sees the count.
 */
#include "base/check.h"
#include "algos/algos.h"

/* See algos.h. */
ncclResult_t brd_algos_rma(int nranks, int src, int dst, int with_data,
                           brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_builder_t *b = NULL;
  if (nranks < 2 || nranks > 65535 || src < 0 || src >= nranks || dst < 0 || dst >= nranks ||
      src == dst) {
    WARN("one-sided plan: ranks %d -> %d of %d are out of range (two different ranks)", src,
         dst, nranks);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {0};
  shape.nranks = nranks;
  shape.nblocks = 1;
  shape.nchunks = 1;
  shape.nslots = 1; /* sizes the chunk: the caller's scratch size holds a whole put */
  shape.slot_div = 1;
  shape.nsems = 1;
  shape.seq_per_iter = 1;
  shape.proto = BRD_IR_PROTO_SIMPLE;
  shape.algo = BRD_IR_ALGO_COPY;
  shape.coll = BRD_IR_COLL_SENDRECV;
  shape.flags = BRD_IR_PLAN_F_ONE_PHASE | BRD_IR_PLAN_F_ONE_SIDED;
  CHECK(brd_plan_builder_create(&shape, &b));
  if (with_data) {
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, dst, 0);
    brd_plan_move_t m = {0};
    m.code = BRD_IR_OP_PUT;
    m.nchunks = 1;
    m.nsrc = 1;
    m.src = &in;
    m.ndst = 1;
    m.dst = &out;
    CHECK_GOTO(brd_plan_op_move(b, src, 0, &m), res, out);
  }
  CHECK_GOTO(brd_plan_op_sync(b, src, 0, BRD_IR_OP_SIGNAL, dst, 0, 1), res, out);
  CHECK_GOTO(brd_plan_op_sync(b, dst, 0, BRD_IR_OP_WAIT, src, 0, 1), res, out);
  res = brd_plan_builder_finish(b, plan_out);
out:
  brd_plan_builder_destroy(b);
  return res;
}
