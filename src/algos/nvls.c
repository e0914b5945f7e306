/*
 * NVLS plans: collectives over a switch channel (NVLink SHARP multicast;
 * device/ir.h, "Switch channels"). Every rank reaches one slot of every
 * rank's scratch at once: MC_REDUCE loads the reduction of that slot over
 * all copies (ld_reduce), MC_STORE writes every copy (st), MC_BARRIER
 * orders all ranks through per-member semaphore words.
 *
 *   all-reduce   each rank copies its n chunks of a group into its own
 *                slots; barrier; rank r reduces slot r over all copies and
 *                stores the result into every copy; barrier; each rank
 *                copies the n reduced slots to its output. Three memory
 *                passes (NCCL's scatter / reduce-broadcast / gather warps).
 *   low-latency all-reduce
 *                each rank copies its chunk into its own slot; barrier;
 *                each rank reduces the whole chunk over all copies into its
 *                output. One barrier and one pass, but every rank loads
 *                n times the message, so it only pays off while latency
 *                dominates.
 *   all-gather   each rank stores its chunk into slot r of every copy;
 *                barrier; each rank copies the n slots to its output.
 *   reduce-scatter
 *                each rank copies its n input segments into its own slots;
 *                barrier; rank r reduces slot r over all copies into its
 *                output.
 *
 * Pipelining: a block moves BRD_ALGOS_NVLS_DEPTH groups of chunks per
 * window, each in its own slots; step s of a block copies group s in,
 * runs the switch op of group s-1 and copies group s-2 out, with one
 * barrier between steps, so the passes of neighbouring groups overlap
 * and a window of D groups costs D + 1 barriers (all-reduce) instead of
 * 2D. The low-latency all-reduce alternates two slots the same way: a
 * slot is rewritten only after the barrier that follows every rank's
 * reduction of it.
 *
 * Memory ordering: MC_BARRIER is a release store into every copy and
 * acquire waits on the rank's own copy, so everything written before a
 * rank's barrier (its copies into its own slots, its multicast stores)
 * is visible to every rank after the barrier. A slot group is rewritten
 * only after a barrier that every reader of its previous contents passed
 * (the verifier proves it, whatever the schedule).
 *
 * Blocks: block b owns groups of its own (chunks and slots b * D * n ..),
 * its own switch semaphore b, and runs independently of the others, like
 * NCCL's NVLS channels. Members are the plan's ranks in rank order; the
 * rank order argument is ignored (a switch has no topology).
 */
#include "base/check.h"
#include "algos/algos.h"

/* See algos.h. */
ncclResult_t brd_algos_mc_barrier(brd_plan_builder_t *b, int rank, int blk, uint32_t sem,
                                  int32_t k) {
  brd_ir_op_t op = {0};
  op.code = BRD_IR_OP_MC_BARRIER;
  op.ndst = 1;
  op.k = k;
  op.ref[0].buf = BRD_IR_BUF_SEM;
  op.ref[0].index = (uint16_t)sem;
  CHECK(brd_plan_chan_switch(b, rank, &op.ref[0].chan));
  return brd_plan_op_add(b, rank, blk, &op);
}

/* See algos.h. */
ncclResult_t brd_algos_move_n(brd_plan_builder_t *b, int rank, int blk, uint8_t code,
                              uint8_t flags, uint32_t chunk, uint32_t nchunks,
                              brd_plan_ref_t src, int ndst, const brd_plan_ref_t *dst) {
  brd_plan_move_t m = {0};
  m.code = code;
  m.flags = flags;
  m.chunk = chunk;
  m.nchunks = nchunks;
  m.nsrc = 1;
  m.src = &src;
  m.ndst = ndst;
  m.dst = dst;
  return brd_plan_op_move(b, rank, blk, &m);
}

/* Checks args for an NVLS generator: ranks above what one MC_REDUCE
 * combines are refused (a switch spans one NVLink domain anyway). */
static ncclResult_t nvls_check(const brd_algos_args_t *args, const char *what) {
  CHECK(brd_algos_check(args, -1, what));
  if (args->nranks > BRD_ALGOS_NVLS_MAX_RANKS) {
    WARN("%s: %d ranks; a switch channel has at most %d members", what, args->nranks,
         BRD_ALGOS_NVLS_MAX_RANKS);
    return ncclInvalidArgument;
  }
  size_t chunks = (size_t)args->nblocks * BRD_ALGOS_NVLS_DEPTH * (size_t)args->nranks;
  if (chunks > 65535) {
    WARN("%s: %d blocks x %d groups x %d ranks exceed 65535 chunks", what, args->nblocks,
         BRD_ALGOS_NVLS_DEPTH, args->nranks);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The shape shared by the NVLS plans: D groups of `per_group` chunks per
 * block and window, n slots per group. */
static brd_plan_shape_t nvls_shape(const brd_algos_args_t *a, uint8_t coll,
                                   uint32_t per_group, uint32_t seq_per_iter) {
  uint32_t n = (uint32_t)a->nranks, nb = (uint32_t)a->nblocks, D = BRD_ALGOS_NVLS_DEPTH;
  brd_plan_shape_t s = {
      .nranks = a->nranks, .nblocks = a->nblocks, .nchunks = nb * D * per_group,
      .nslots = nb * D * n, .slot_div = D * n, .nsems = nb,
      .seq_per_iter = seq_per_iter, .proto = BRD_IR_PROTO_SIMPLE,
      .algo = BRD_IR_ALGO_NVLS, .coll = coll};
  return s;
}

/* All-reduce block: steps 0 .. D + 1 (see the file comment). */
static ncclResult_t allreduce_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                    int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t n = (uint32_t)a->nranks, D = BRD_ALGOS_NVLS_DEPTH;
  for (uint32_t step = 0; step <= D + 1; step++) {
    if (step < D) { /* copy group `step` in */
      uint32_t base = ((uint32_t)blk * D + step) * n;
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, base);
      CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_COPY, 0, base, n,
                   brd_plan_ref(BRD_IR_BUF_INPUT, -1, base), 1, &dst));
    }
    if (step >= 1 && step <= D) { /* reduce this rank's slice of group step-1 */
      uint32_t c = ((uint32_t)blk * D + step - 1) * n + (uint32_t)r;
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, c);
      CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, c, 1,
                   brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, c), 1, &dst));
    }
    if (step >= 2) { /* copy group step-2 out */
      uint32_t base = ((uint32_t)blk * D + step - 2) * n;
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, base);
      CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_COPY, 0, base, n,
                   brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, base), 1, &dst));
    }
    if (step <= D) CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, (int32_t)step + 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_allreduce(const brd_algos_args_t *args, brd_ir_plan_t **plan_out) {
  CHECK(nvls_check(args, "NVLS all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_NVLS, 0, plan_out);
  brd_plan_shape_t shape = nvls_shape(args, BRD_IR_COLL_ALLREDUCE, (uint32_t)args->nranks,
                                      BRD_ALGOS_NVLS_DEPTH + 1);
  return brd_algos_build(&shape, args, allreduce_block, NULL, "an NVLS all-reduce plan",
                         plan_out);
}

/* Low-latency all-reduce block: per group, copy in, barrier, reduce out. */
static ncclResult_t allreduce_ll_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                       int p, int blk, brd_plan_ref_t *refs,
                                       const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t D = BRD_ALGOS_NVLS_DEPTH;
  for (uint32_t g = 0; g < D; g++) {
    uint32_t c = (uint32_t)blk * D + g;
    brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, c);
    CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_COPY, 0, c, 1, brd_plan_ref(BRD_IR_BUF_INPUT, -1, c),
                 1, &slot));
    CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, (int32_t)g + 1));
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c);
    CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, c, 1,
                 brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, c), 1, &out));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_ll_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out) {
  CHECK(nvls_check(args, "low-latency NVLS all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_NVLS, 0, plan_out);
  uint32_t D = BRD_ALGOS_NVLS_DEPTH, nb = (uint32_t)args->nblocks;
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = nb * D,
      .nslots = nb * D, .slot_div = D, .nsems = nb, .seq_per_iter = D,
      .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_NVLS,
      .coll = BRD_IR_COLL_ALLREDUCE};
  return brd_algos_build(&shape, args, allreduce_ll_block, NULL,
                         "a low-latency NVLS all-reduce plan", plan_out);
}

/* All-gather block: steps 0 .. D; group g stored at step g, copied out at
 * step g + 1. */
static ncclResult_t allgather_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                    int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t n = (uint32_t)a->nranks, D = BRD_ALGOS_NVLS_DEPTH;
  uint32_t nchunks = (uint32_t)a->nblocks * D;
  for (uint32_t step = 0; step <= D; step++) {
    if (step < D) {
      uint32_t c = (uint32_t)blk * D + step;
      brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, c * n + (uint32_t)r);
      CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_MC_STORE, 0, c, 1,
                   brd_plan_ref(BRD_IR_BUF_INPUT, -1, c), 1, &dst));
    }
    if (step >= 1) {
      uint32_t c = (uint32_t)blk * D + step - 1;
      for (uint32_t q = 0; q < n; q++) {
        brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, brd_algos_seg(nchunks, (int)q, c));
        CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_COPY, 0, c, 1,
                     brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, c * n + q), 1, &dst));
      }
    }
    if (step < D) CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, (int32_t)step + 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_allgather(const brd_algos_args_t *args, brd_ir_plan_t **plan_out) {
  CHECK(nvls_check(args, "NVLS all-gather"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_NVLS, 0, plan_out);
  brd_plan_shape_t shape = nvls_shape(args, BRD_IR_COLL_ALLGATHER, 1, BRD_ALGOS_NVLS_DEPTH);
  return brd_algos_build(&shape, args, allgather_block, NULL, "an NVLS all-gather plan",
                         plan_out);
}

/* Reduce-scatter block: steps 0 .. D; group g copied in at step g,
 * reduced at step g + 1. */
static ncclResult_t reducescatter_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                        int p, int blk, brd_plan_ref_t *refs,
                                        const void *ctx) {
  (void)refs;
  (void)ctx;
  int r = brd_algos_rank_at(a, p);
  uint32_t n = (uint32_t)a->nranks, D = BRD_ALGOS_NVLS_DEPTH;
  uint32_t nchunks = (uint32_t)a->nblocks * D;
  for (uint32_t step = 0; step <= D; step++) {
    if (step < D) {
      uint32_t c = (uint32_t)blk * D + step;
      for (uint32_t q = 0; q < n; q++) {
        brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, c * n + q);
        CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_COPY, 0, c, 1,
                     brd_plan_ref(BRD_IR_BUF_INPUT, -1, brd_algos_seg(nchunks, (int)q, c)), 1,
                     &dst));
      }
    }
    if (step >= 1) {
      uint32_t c = (uint32_t)blk * D + step - 1;
      brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c);
      CHECK(brd_algos_move_n(b, r, blk, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, c, 1,
                   brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, c * n + (uint32_t)r),
                   1, &out));
    }
    if (step < D) CHECK(brd_algos_mc_barrier(b, r, blk, (uint32_t)blk, (int32_t)step + 1));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_reducescatter(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out) {
  CHECK(nvls_check(args, "NVLS reduce-scatter"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_NVLS, 0, plan_out);
  brd_plan_shape_t shape = nvls_shape(args, BRD_IR_COLL_REDUCESCATTER, 1, BRD_ALGOS_NVLS_DEPTH);
  return brd_algos_build(&shape, args, reducescatter_block, NULL,
                         "an NVLS reduce-scatter plan", plan_out);
}

/* See algos.h. */
int brd_algos_nvls_supported(int coll, int dtype, int redop) {
  if (coll == BRD_IR_COLL_ALLGATHER) return 1;
  if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_REDUCESCATTER) return 0;
  int ints = dtype == ncclInt32 || dtype == ncclUint32 || dtype == ncclInt64 ||
             dtype == ncclUint64;
  int half = dtype == ncclFloat16 || dtype == ncclBfloat16;
  switch (redop) {
  case ncclSum: return ints || half || dtype == ncclFloat32 || dtype == ncclFloat64;
  case ncclMin:
  case ncclMax: return ints || half;
  default: return 0; /* prod, avg, PreMulSum: no multimem form */
  }
}
