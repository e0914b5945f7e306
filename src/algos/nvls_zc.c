/*
 * Zero-copy NVLS plans: collectives over a switch channel that reaches the
 * user's own buffers (device/ir.h, "Switch channels", zero-copy). The
 * runtime runs them only where every rank's send and receive buffers lie
 * in windows registered with ncclCommWindowRegister and bound to one
 * multicast object, at the same offsets on every rank (NCCL's symmetric
 * rule), so the multicast mapping of a window reaches every rank's buffer
 * at once and no scratch is needed.
 *
 *   all-reduce      rank r ld_reduces its slice of the input over every
 *                   rank's send buffer and st's the result into every
 *                   rank's receive buffer: one load and one store of 1/n
 *                   of the message per rank, no copy.
 *   all-gather      rank r st's its input into segment r of every rank's
 *                   output.
 *   reduce-scatter  rank r ld_reduces segment r of every rank's input into
 *                   its own output.
 *
 * Memory ordering: every block opens with a multicast barrier (join: every
 * rank's input is ready and its output free, because every rank has
 * launched) and closes with one (done: no rank returns while another still
 * reads its input or writes its output). MC_BARRIER is a release store of
 * the rank's word into every copy and acquire waits on the own copy, so
 * the multicast stores of a block are visible to every rank after the
 * closing barrier. In place is safe: slice r of every buffer is read and
 * then written by rank r alone (all-reduce), segment r of the output is
 * the input of rank r only and read by no one else (all-gather), and
 * segment r of rank q's input is read by rank r only (reduce-scatter).
 *
 * Blocks: block b owns chunk range b of the window and switch semaphore b,
 * like NCCL's NVLS channels; one window covers the whole message (no
 * slots), so the loop of the plan runs once per launch.
 */
#include "base/check.h"
#include "algos/algos.h"

/* One switch data op over one chunk. */
static ncclResult_t zc_move(brd_plan_builder_t *b, int rank, int blk, uint8_t code,
                            uint8_t flags, uint32_t chunk, brd_plan_ref_t src,
                            brd_plan_ref_t dst) {
  return brd_algos_move(b, rank, blk, code, flags, chunk, 0, 0, 1, &src, 1, &dst);
}

/* Shape and checks shared by the three plans: nchunks chunks per window,
 * one switch semaphore per block, no scratch. */
static ncclResult_t zc_build(const brd_algos_args_t *args, uint8_t coll, uint32_t nchunks,
                             brd_algos_block_fn body, const char *what,
                             brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, what));
  if (args->nranks > BRD_ALGOS_NVLS_MAX_RANKS || args->proto != BRD_IR_PROTO_SIMPLE ||
      (size_t)args->nblocks * (size_t)args->nranks > 65535) {
    WARN("%s: Simple protocol only, at most %d ranks (a switch channel's members) and "
         "65535 chunks (%d blocks x %d ranks)", what, BRD_ALGOS_NVLS_MAX_RANKS,
         args->nblocks, args->nranks);
    return ncclInvalidArgument;
  }
  if (args->nranks == 1) return brd_algos_single(args, coll, BRD_IR_ALGO_NVLS, 0, plan_out);
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = nchunks,
      .nslots = 0, .slot_div = 1, .nsems = (uint32_t)args->nblocks,
      .seq_per_iter = 2, .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_NVLS,
      .coll = coll, .flags = BRD_IR_PLAN_F_PEER_INPUT};
  return brd_algos_build(&shape, args, body, NULL, what, plan_out);
}

/* All-reduce: chunk blk * n + r is rank r's slice of block blk. */
static ncclResult_t ar_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                             int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t c = (uint32_t)blk * (uint32_t)a->nranks + (uint32_t)r;
  CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 1));
  CHECK(zc_move(b, r, blk, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, c,
                brd_plan_ref(BRD_IR_BUF_INPUT, BRD_PLAN_PEER_SWITCH, c),
                brd_plan_ref(BRD_IR_BUF_OUTPUT, BRD_PLAN_PEER_SWITCH, c)));
  return brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 2);
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_zc_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  return zc_build(args, BRD_IR_COLL_ALLREDUCE,
                  (uint32_t)args->nblocks * (uint32_t)args->nranks, ar_block,
                  "a zero-copy NVLS all-reduce plan", plan_out);
}

/* All-gather: chunk blk of the input into segment r of every output. */
static ncclResult_t ag_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                             int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t c = (uint32_t)blk, nch = (uint32_t)a->nblocks;
  CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 1));
  CHECK(zc_move(b, r, blk, BRD_IR_OP_MC_STORE, 0, c, brd_plan_ref(BRD_IR_BUF_INPUT, -1, c),
                brd_plan_ref(BRD_IR_BUF_OUTPUT, BRD_PLAN_PEER_SWITCH,
                             brd_algos_seg(nch, r, c))));
  return brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 2);
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_zc_allgather(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  return zc_build(args, BRD_IR_COLL_ALLGATHER, (uint32_t)args->nblocks, ag_block,
                  "a zero-copy NVLS all-gather plan", plan_out);
}

/* Reduce-scatter: chunk blk of segment r over every input into the own
 * output. */
static ncclResult_t rs_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                             int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t c = (uint32_t)blk, nch = (uint32_t)a->nblocks;
  CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 1));
  CHECK(zc_move(b, r, blk, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, c,
                brd_plan_ref(BRD_IR_BUF_INPUT, BRD_PLAN_PEER_SWITCH,
                             brd_algos_seg(nch, r, c)),
                brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c)));
  return brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, 2);
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_zc_reducescatter(const brd_algos_args_t *args,
                                             brd_ir_plan_t **plan_out) {
  return zc_build(args, BRD_IR_COLL_REDUCESCATTER, (uint32_t)args->nblocks, rs_block,
                  "a zero-copy NVLS reduce-scatter plan", plan_out);
}
