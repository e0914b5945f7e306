/*
 * What every plan generator shares: the argument checks, the frame that
 * runs a block body for every (position, block), the ring and chain
 * frames, the pieces of direct plans (pushes to every peer, reduction sources), the
 * one-rank plan and the rank positions. A generator is one function of src/algos/<family>.c
 * written with these, listed once in the table of generate.c.
 */
#include <stdlib.h>

#include "base/check.h"
#include "algos/algos.h"

/* See algos.h. */
ncclResult_t brd_algos_build(const brd_plan_shape_t *shape, const brd_algos_args_t *args,
                             brd_algos_block_fn body, const void *ctx, const char *what,
                             brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_builder_t *b = NULL;
  int n = args->nranks;
  brd_plan_ref_t *refs = calloc((size_t)n, sizeof(*refs));
  if (refs == NULL) {
    WARN("out of host memory generating %s for %d ranks", what, n);
    return ncclSystemError;
  }
  CHECK_GOTO(brd_plan_builder_create(shape, &b), res, fail_free_refs);
  for (int p = 0; p < n; p++)
    for (int blk = 0; blk < args->nblocks; blk++)
      CHECK_GOTO(body(b, args, p, blk, refs, ctx), res, fail_destroy_builder);
  res = brd_plan_builder_finish(b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(b);
fail_free_refs:
  free(refs);
  return res;
}

/* See algos.h. */
int brd_algos_pos_of(const brd_algos_args_t *args, int rank) {
  if (args->order == NULL) return rank;
  for (int p = 0; p < args->nranks; p++)
    if (args->order[p] == rank) return p;
  return -1;
}

/* See algos.h. */
ncclResult_t brd_algos_check(const brd_algos_args_t *args, int root,
                             const char *what) {
  ncclResult_t res = ncclSuccess;
  if (args->nranks < 1 || args->nranks > 65535 || args->nblocks < 1 ||
      args->nblocks > 65535) {
    WARN("%s: %d ranks and %d blocks per rank are out of range (1 to 65535 "
         "each)", what, args->nranks, args->nblocks);
    return ncclInvalidArgument;
  }
  if (args->proto != BRD_IR_PROTO_SIMPLE && args->proto != BRD_IR_PROTO_LL) {
    WARN("%s: protocol %d is not generated (Simple or LL)", what, args->proto);
    return ncclInvalidArgument;
  }
  if (root != -1 && (root < 0 || root >= args->nranks)) {
    WARN("%s: root %d is not a rank of %d", what, root, args->nranks);
    return ncclInvalidArgument;
  }
  if (args->order == NULL) return ncclSuccess;
  char *seen = calloc((size_t)args->nranks, 1);
  if (seen == NULL) {
    WARN("out of host memory checking a rank order of %d", args->nranks);
    return ncclSystemError;
  }
  for (int p = 0; p < args->nranks; p++) {
    int r = args->order[p];
    if (r < 0 || r >= args->nranks || seen[r]) {
      WARN("%s: rank order is not a permutation of 0..%d (position %d holds "
           "%d)", what, args->nranks - 1, p, r);
      res = ncclInvalidArgument;
      goto free_seen;
    }
    seen[r] = 1;
  }
free_seen:
  free(seen);
  return res;
}

/* See algos.h. */
ncclResult_t brd_algos_check_direct(int nranks, const char *what) {
  if (nranks - 1 <= (int)BRD_IR_CHAN_LOCAL - 1) return ncclSuccess;
  WARN("%s: %d ranks need %d channels per rank; a plan holds at most %d",
       what, nranks, nranks - 1, (int)BRD_IR_CHAN_LOCAL - 1);
  return ncclInvalidArgument;
}

/* See algos.h. */
brd_plan_shape_t brd_algos_direct_reduce_shape(const brd_algos_args_t *args, uint8_t coll,
                                               int root, int deterministic) {
  int n = args->nranks;
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = (uint32_t)args->nblocks * (uint32_t)(n - 1) +
                (deterministic && n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN
                     ? (uint32_t)args->nblocks : 0u),
      .slot_div = (uint32_t)(n - 1), .nsems = 2u * (uint32_t)args->nblocks,
      .seq_per_iter = 1, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_ONESHOT, .coll = coll, .root = (uint16_t)root};
  return shape;
}

/* See algos.h. */
ncclResult_t brd_algos_single(const brd_algos_args_t *args, uint8_t coll,
                              uint8_t algo, int root, brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_builder_t *b = NULL;
  int reduction = coll == BRD_IR_COLL_ALLREDUCE ||
                  coll == BRD_IR_COLL_REDUCESCATTER || coll == BRD_IR_COLL_REDUCE;
  brd_plan_shape_t shape = {
      .nranks = 1, .nblocks = args->nblocks, .nchunks = (uint32_t)args->nblocks,
      .nslots = 0, .slot_div = 1, .nsems = 0, .seq_per_iter = 1,
      .proto = (uint8_t)args->proto, .algo = algo, .coll = coll,
      .root = (uint16_t)(root > 0 ? root : 0)};
  CHECK(brd_plan_builder_create(&shape, &b));
  for (int blk = 0; blk < args->nblocks; blk++) {
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, (uint32_t)blk);
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (uint32_t)blk);
    CHECK_GOTO(brd_algos_move(b, 0, blk, BRD_IR_OP_COPY,
                              reduction ? BRD_IR_F_POSTOP : 0, (uint32_t)blk, 0,
                              0, 1, &src, 1, &dst),
               res, fail_destroy_builder);
  }
  res = brd_plan_builder_finish(b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(b);
  return res;
}

/* One sync op of position p's block with the rank `dir` positions away. */
static ncclResult_t ring_sync(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                              int blk, uint8_t code, int dir, uint32_t sem, int32_t k) {
  return brd_plan_op_sync(b, brd_algos_rank_at(a, p), blk, code,
                          brd_algos_rank_at(a, p + dir), sem, k);
}

/* See algos.h. */
ncclResult_t brd_algos_ring_step_open(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                      const brd_algos_ring_t *ring, int p, int blk,
                                      int j) {
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  int32_t credit_k = brd_algos_ring_credit_k(ring->depth, ring->steps, j);
  if (j >= 1 && !ring->ll) CHECK(ring_sync(b, a, p, blk, BRD_IR_OP_WAIT, -1, data_sem, j));
  if (j < ring->steps)
    CHECK(ring_sync(b, a, p, blk, BRD_IR_OP_WAIT, 1, credit_sem, credit_k));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_step_close(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                       const brd_algos_ring_t *ring, int p, int blk,
                                       int j) {
  uint32_t data_sem = 2u * (uint32_t)blk, credit_sem = data_sem + 1;
  if (j >= 1) CHECK(ring_sync(b, a, p, blk, BRD_IR_OP_SIGNAL, -1, credit_sem, j));
  if (j < ring->steps && !ring->ll)
    CHECK(ring_sync(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, data_sem, j + 1));
  return ncclSuccess;
}

static int ring_depth(int steps) {
  return steps < BRD_ALGOS_RING_DEPTH ? steps : BRD_ALGOS_RING_DEPTH;
}

/* See algos.h. */
ncclResult_t brd_algos_ring_build(const brd_algos_args_t *args, uint8_t coll, int steps,
                                  uint32_t nchunks, brd_algos_block_fn body,
                                  const char *what, brd_ir_plan_t **plan_out) {
  brd_algos_ring_t ring = {.steps = steps, .depth = ring_depth(steps),
                           .ll = args->proto == BRD_IR_PROTO_LL, .nchunks = nchunks};
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = nchunks,
      .nslots = (uint32_t)args->nblocks * (uint32_t)ring.depth,
      .slot_div = (uint32_t)ring.depth, .nsems = 2u * (uint32_t)args->nblocks,
      .seq_per_iter = (uint32_t)steps, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_RING, .coll = coll};
  return brd_algos_build(&shape, args, body, &ring, what, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_ring_segments(const brd_algos_args_t *args, uint8_t coll,
                                     brd_algos_block_fn body, const char *what,
                                     brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, what));
  if (args->nranks == 1)
    return brd_algos_single(args, coll, BRD_IR_ALGO_RING, 0, plan_out);
  int n = args->nranks, depth = ring_depth(n - 1);
  if ((size_t)args->nblocks * n > 65536 || (size_t)args->nblocks * depth > 65535) {
    WARN("%s: %d blocks x %d ranks exceed the IR's 16-bit chunk and slot "
         "indices", what, args->nblocks, n);
    return ncclInvalidArgument;
  }
  return brd_algos_ring_build(args, coll, n - 1, (uint32_t)args->nblocks, body, what,
                              plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_sync_peers(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                  int blk, uint8_t code, int dir, uint32_t sem, int32_t k) {
  int rank = brd_algos_rank_at(a, p);
  for (int i = 1; i < a->nranks; i++)
    CHECK(brd_plan_op_sync(b, rank, blk, code, brd_algos_rank_at(a, p + dir * i), sem, k));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_direct_push(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                   int blk, brd_plan_ref_t in, uint32_t chunk,
                                   uint32_t data_sem, uint32_t credit_sem,
                                   brd_plan_ref_t *refs) {
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  uint8_t llf = ll ? BRD_IR_REF_LL : 0;
  CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_WAIT, 1, credit_sem, 0));
  for (int i = 1; i < n; i++)
    refs[i - 1] = brd_plan_ref(BRD_IR_BUF_SCRATCH | llf, brd_algos_rank_at(a, p + i),
                               brd_algos_direct_slot(n, blk, p, p + i));
  CHECK(brd_algos_move(b, brd_algos_rank_at(a, p), blk,
                       ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0, chunk, 1, 0, 1, &in,
                       n - 1, refs));
  if (!ll) CHECK(brd_algos_sync_peers(b, a, p, blk, BRD_IR_OP_SIGNAL, 1, data_sem, 1));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_reduce_slots(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                    int p, int blk, const brd_algos_sources_t *src,
                                    brd_plan_ref_t *refs) {
  int n = a->nranks, rank = brd_algos_rank_at(a, p);
  brd_plan_ref_t own = src->own;
  if (src->ordered && n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN) {
    /* LL plans write their scratch as packets only (with the flag the
     * reduction reads its sources with): raw data left there could pass
     * for a later launch's packet (core/window.h). */
    brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH | src->llf, -1, src->own_slot);
    if (src->llf)
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_PKT_PUT, 0, src->chunk, 1, 0, 1, &own, 1,
                           &slot));
    else
      CHECK(brd_algos_move(b, rank, blk, BRD_IR_OP_COPY, 0, src->chunk, 0, 0, 1, &own, 1,
                           &slot));
    own = slot;
  }
  for (int i = 0; i < n; i++) {
    int q = src->ordered ? i : brd_algos_rank_at(a, p + src->dir * i);
    int pq = src->ordered ? brd_algos_pos_of(a, q) : p + src->dir * i;
    refs[i] = q == rank ? own
                        : brd_plan_ref(BRD_IR_BUF_SCRATCH | src->llf, -1,
                                       brd_algos_direct_slot(n, blk, pq, p));
  }
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, src->chunk);
  return brd_algos_move(b, rank, blk,
                        a->proto == BRD_IR_PROTO_LL ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE,
                        BRD_IR_F_POSTOP, src->chunk, 0, 1, n, refs, 1, &out);
}

/* See algos.h. */
ncclResult_t brd_algos_push_to_root(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                    int p, int blk, int root, brd_plan_ref_t in,
                                    uint32_t data_sem, uint32_t done_sem) {
  int n = a->nranks, ll = a->proto == BRD_IR_PROTO_LL;
  int rank = brd_algos_rank_at(a, p);
  brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | (ll ? BRD_IR_REF_LL : 0), root,
                                    brd_algos_direct_slot(n, blk, p, brd_algos_pos_of(a, root)));
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_PUT : BRD_IR_OP_PUT, 0,
                       (uint32_t)blk, 1, 0, 1, &in, 1, &dst));
  if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, root, data_sem, 1));
  return brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, root, done_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_recv_from_root(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                      int p, int blk, int root, uint32_t data_sem,
                                      uint32_t ack_sem, uint32_t done_sem) {
  int ll = a->proto == BRD_IR_PROTO_LL, rank = brd_algos_rank_at(a, p);
  uint32_t chunk = (uint32_t)blk;
  brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_SCRATCH | (ll ? BRD_IR_REF_LL : 0), -1, chunk);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  if (!ll) CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, root, data_sem, 1));
  CHECK(brd_algos_move(b, rank, blk, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_COPY, 0, chunk,
                       0, 1, 1, &src, 1, &out));
  CHECK(brd_plan_op_sync(b, rank, blk, BRD_IR_OP_SIGNAL, root, ack_sem, 1));
  return brd_plan_op_sync(b, rank, blk, BRD_IR_OP_WAIT, root, done_sem, 1);
}

/* See algos.h. */
ncclResult_t brd_algos_chain_build(const brd_algos_args_t *args, int root, uint8_t coll,
                                   brd_algos_block_fn body, const char *what,
                                   brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, root, what));
  if (args->nranks == 1)
    return brd_algos_single(args, coll, BRD_IR_ALGO_RING, root, plan_out);
  if ((size_t)args->nblocks * BRD_ALGOS_CHAIN_CHUNKS > 65535) {
    WARN("%s: %d blocks exceed the IR's 16-bit chunk indices", what, args->nblocks);
    return ncclInvalidArgument;
  }
  uint32_t nchunks = (uint32_t)args->nblocks * BRD_ALGOS_CHAIN_CHUNKS;
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = nchunks,
      .nslots = nchunks, .slot_div = BRD_ALGOS_CHAIN_CHUNKS,
      .nsems = 2u * (uint32_t)args->nblocks, .seq_per_iter = BRD_ALGOS_CHAIN_CHUNKS,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_RING, .coll = coll,
      .root = (uint16_t)root};
  int proot = brd_algos_pos_of(args, root);
  return brd_algos_build(&shape, args, body, &proot, what, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_nodes_create(const brd_algos_args_t *args, const int *host,
                                    brd_algos_nodes_t **nodes_out) {
  int n = args->nranks;
  /* One block: the struct, then node, local, first (n + 1), members and
   * the labels of the nodes found so far. */
  size_t ints = (size_t)n * 4 + 1 + (size_t)n;
  brd_algos_nodes_t *nd = malloc(sizeof(*nd) + ints * sizeof(int));
  if (nd == NULL) {
    WARN("out of host memory for the node layout of %d ranks", n);
    return ncclSystemError;
  }
  nd->node = (int *)(nd + 1);
  nd->local = nd->node + n;
  nd->first = nd->local + n;
  nd->members = nd->first + n + 1;
  int *label = nd->members + n;
  int nnodes = 0;
  for (int p = 0; p < n; p++) {
    int r = brd_algos_rank_at(args, p), h = host != NULL ? host[r] : 0, m = 0;
    while (m < nnodes && label[m] != h) m++;
    if (m == nnodes) label[nnodes++] = h;
    nd->node[r] = m;
  }
  /* Counting sort by node, positions ascending within each. */
  for (int m = 0; m <= nnodes; m++) nd->first[m] = 0;
  for (int r = 0; r < n; r++) nd->first[nd->node[r] + 1]++;
  nd->lmin = n;
  nd->lmax = 0;
  for (int m = 0; m < nnodes; m++) {
    int cnt = nd->first[m + 1];
    if (cnt < nd->lmin) nd->lmin = cnt;
    if (cnt > nd->lmax) nd->lmax = cnt;
    nd->first[m + 1] += nd->first[m];
  }
  for (int m = 0; m < nnodes; m++) label[m] = 0; /* now: ranks placed so far */
  for (int p = 0; p < n; p++) {
    int r = brd_algos_rank_at(args, p), m = nd->node[r];
    nd->local[r] = label[m]++;
    nd->members[nd->first[m] + nd->local[r]] = r;
  }
  nd->nnodes = nnodes;
  *nodes_out = nd;
  return ncclSuccess;
}

/* See algos.h. */
void brd_algos_nodes_destroy(brd_algos_nodes_t *nodes) { free(nodes); }
