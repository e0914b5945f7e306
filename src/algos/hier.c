/*
 * Hierarchical all-reduce across nodes, Simple and LL.
 *
 * Algorithm: on N nodes of L ranks each, every block cuts its window into
 * L pieces of N chunks. Inside each node a ring reduce-scatter (L-1 steps)
 * leaves local index i with its node's partial of one piece; the N ranks
 * of that local index, one per node, all-reduce the piece with a ring
 * across the nodes (2(N-1) steps, one chunk each); a ring all-gather
 * inside the node (L-1 steps) hands every piece to every local rank. Only
 * the middle phase crosses nodes, and each rank sends 2(N-1)/N of its
 * 1/L share there, so a node's L ranks together put 2(N-1)/N of the data
 * on the network, spread over L ranks (and their NICs).
 *
 * The inside ring is the ring all-reduce's (ring_chunk below) with pieces
 * for chunks, split at its step L-1: that step reduces the last partial
 * into the output piece, the ring across nodes then runs in place on that
 * output piece (it reads the output, which already carries the pre-op,
 * and applies the post-op at its own step N-1), and only then is the
 * finished piece passed on. Local index i ends the reduce-scatter holding
 * piece i+1 mod L on every node, so the ranks of one local index share a
 * piece.
 *
 * Memory ordering: as the ring all-reduce's, per ring. Simple puts into
 * the successor's scratch slot and signals its data semaphore (2 blk);
 * LL packets carry their step in the flag. Readers credit the slot back
 * (semaphore 2 blk + 1) and writers wait for that credit before reusing a
 * slot. The two rings of a rank use different peers, so their semaphores
 * never meet; the inside ring numbers its steps 1..2(L-1) across both its
 * halves and the nodes' ring 1..2(N-1). The inside ring's step L-1
 * credits its predecessor before the nodes' phase and waits for its
 * successor's credit only after it: a credit waited on across that phase
 * could wait for the successor's own phase, which waits the same way.
 *
 * Blocks: each block is an independent instance over its L*N chunks of
 * the window, with its own slots: per inside transfer N slots (one piece),
 * DEPTH of those, then DEPTH one-chunk slots for the nodes' ring. Every
 * slot of a block shares one NCCL_BUFFSIZE buffer.
 */
#include "base/check.h"
#include "algos/algos.h"

#define DEPTH BRD_ALGOS_RING_DEPTH

/* Chunk (within n) that position p sends at transfer t of a ring
 * all-reduce over n. */
static int ring_chunk(int n, int p, int t) {
  int c = t <= n - 2 ? p - t : p + 1 - (t - (n - 1));
  return ((c % n) + n) % n;
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* Credit target before transfer t (of `steps`, through `depth` slots) may
 * overwrite its slot; see brd_algos_ring_credit_k. A previous iteration's
 * credit is counted in seq_per_iter, which here may exceed the ring's own
 * steps (the plan's two rings have different lengths). */
static int32_t credit_k(int depth, int steps, int spi, int t) {
  if (t >= depth) return t - depth + 1;
  int last = t + depth * ((steps - 1 - t) / depth);
  return last + 1 - spi;
}

typedef struct hier {
  const brd_algos_nodes_t *nd;
  int N, L, ll, spi;
  int t1, d1;     /* inside ring: 2(L-1) transfers through d1 pieces of slots */
  int t2, d2;     /* nodes' ring: 2(N-1) transfers through d2 slots */
  uint32_t area2; /* first slot of the nodes' rings (all blocks) */
} hier_t;

typedef brd_algos_ring_at_t ring_at_t;

static uint32_t ring_slot(const ring_at_t *r, int t) {
  return r->slot0 + (uint32_t)((t + r->depth) % r->depth) * r->width;
}

static ncclResult_t wait_data(const ring_at_t *r, int blk, int j) {
  if (j < 1 || r->ll) return ncclSuccess;
  return brd_plan_op_sync(r->b, r->rank, blk, BRD_IR_OP_WAIT, r->prev, 2u * (uint32_t)blk, j);
}

static ncclResult_t wait_credit(const ring_at_t *r, int blk, int j) {
  if (j >= r->steps) return ncclSuccess;
  return brd_plan_op_sync(r->b, r->rank, blk, BRD_IR_OP_WAIT, r->next, 2u * (uint32_t)blk + 1,
                          credit_k(r->depth, r->steps, r->spi, j));
}

static ncclResult_t signal_credit(const ring_at_t *r, int blk, int j) {
  if (j < 1) return ncclSuccess;
  return brd_plan_op_sync(r->b, r->rank, blk, BRD_IR_OP_SIGNAL, r->prev,
                          2u * (uint32_t)blk + 1, j);
}

static ncclResult_t signal_data(const ring_at_t *r, int blk, int j) {
  if (j >= r->steps || r->ll) return ncclSuccess;
  return brd_plan_op_sync(r->b, r->rank, blk, BRD_IR_OP_SIGNAL, r->next, 2u * (uint32_t)blk,
                          j + 1);
}

/* The op code moving src to dst: LL packs plain sources (PKT_PUT) or
 * reads packets (PKT_REDUCE); Simple puts one source to peers, copies one
 * source locally, and reduces otherwise (REDUCE also stores to peers). */
static uint8_t move_code(int ll, int nsrc, const brd_plan_ref_t *src, int ndst,
                         const brd_plan_ref_t *dst) {
  int remote = 0;
  for (int i = 0; i < ndst; i++) remote += dst[i].peer >= 0;
  if (ll)
    return nsrc == 1 && !(src[0].buf & BRD_IR_REF_LL) && remote == ndst ? BRD_IR_OP_PKT_PUT
                                                                         : BRD_IR_OP_PKT_REDUCE;
  if (nsrc == 1 && remote == ndst) return BRD_IR_OP_PUT;
  if (nsrc == 1 && remote == 0) return BRD_IR_OP_COPY;
  return BRD_IR_OP_REDUCE;
}

/* One data op of ring step j over the ring's width of chunks from `chunk`
 * (LL flags: the step's transfer j+1, reading transfer j). */
static ncclResult_t ring_move(const ring_at_t *r, int blk, int j, uint8_t flags,
                              uint32_t chunk, int nsrc, const brd_plan_ref_t *src, int ndst,
                              const brd_plan_ref_t *dst) {
  brd_plan_move_t m = {.code = move_code(r->ll, nsrc, src, ndst, dst), .flags = flags,
                       .chunk = chunk, .nchunks = r->width, .k = j + 1, .k_src = j,
                       .nsrc = nsrc, .src = src, .ndst = ndst, .dst = dst};
  return brd_plan_op_move(r->b, r->rank, blk, &m);
}

/* See algos.h. */
ncclResult_t brd_algos_nodes_ring(const brd_algos_ring_at_t *r, int n, int m, int blk,
                                  uint32_t base) {
  uint8_t ll = r->ll ? BRD_IR_REF_LL : 0;
  int T = r->steps;
  for (int j = 0; j <= T; j++) {
    uint32_t chunk = base + (uint32_t)(j < T ? ring_chunk(n, m, j) : ring_chunk(n, m - 1, j - 1));
    brd_plan_ref_t src[2], dst[2];
    int nsrc = 0, ndst = 0;
    CHECK(wait_data(r, blk, j));
    CHECK(wait_credit(r, blk, j));
    if (j <= n - 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    if (j >= 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1, ring_slot(r, j - 1));
    if (j >= n - 1) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    if (j < T) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, r->next, ring_slot(r, j));
    CHECK(ring_move(r, blk, j, j == n - 1 ? BRD_IR_F_POSTOP : 0, chunk, nsrc, src, ndst, dst));
    CHECK(signal_credit(r, blk, j));
    CHECK(signal_data(r, blk, j));
  }
  return ncclSuccess;
}

/* Position pos's block: the inside ring, split at step L-1 by the nodes'
 * ring. */
static ncclResult_t hier_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int pos,
                               int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  const hier_t *h = ctx;
  const brd_algos_nodes_t *nd = h->nd;
  int rank = brd_algos_rank_at(a, pos), m = nd->node[rank], p = nd->local[rank];
  int L = h->L, N = h->N, T = h->t1;
  uint8_t ll = h->ll ? BRD_IR_REF_LL : 0;
  uint32_t blk0 = (uint32_t)blk * (uint32_t)(L * N);
  ring_at_t in = {.b = b, .rank = rank, .prev = brd_algos_node_rank(nd, m, (p + L - 1) % L),
                  .next = brd_algos_node_rank(nd, m, (p + 1) % L), .steps = T, .depth = h->d1,
                  .spi = h->spi, .ll = h->ll, .slot0 = (uint32_t)(blk * h->d1 * N),
                  .width = (uint32_t)N};
  ring_at_t across = {.b = b, .rank = rank, .prev = brd_algos_node_rank(nd, (m + N - 1) % N, p),
                      .next = brd_algos_node_rank(nd, (m + 1) % N, p), .steps = h->t2,
                      .depth = h->d2, .spi = h->spi, .ll = h->ll,
                      .slot0 = h->area2 + (uint32_t)(blk * h->d2), .width = 1};

  for (int j = 0; j <= T; j++) {
    int piece = j < T ? ring_chunk(L, p, j) : ring_chunk(L, p - 1, j - 1);
    uint32_t chunk = blk0 + (uint32_t)(piece * N);
    brd_plan_ref_t src[2], dst[2];
    int nsrc = 0, ndst = 0;
    if (j == L - 1) {
      /* The reduce-scatter's last step into the output piece, the nodes'
       * ring on it, then the all-gather's first transfer. */
      brd_plan_ref_t red[2] = {brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk),
                               brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1, ring_slot(&in, j - 1))};
      brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
      CHECK(wait_data(&in, blk, j));
      CHECK(ring_move(&in, blk, j, 0, chunk, 2, red, 1, &out));
      CHECK(signal_credit(&in, blk, j));
      CHECK(brd_algos_nodes_ring(&across, N, m, blk, chunk));
      brd_plan_ref_t put = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, in.next, ring_slot(&in, j));
      CHECK(wait_credit(&in, blk, j));
      CHECK(ring_move(&in, blk, j, 0, chunk, 1, &out, 1, &put));
      CHECK(signal_data(&in, blk, j));
      continue;
    }
    CHECK(wait_data(&in, blk, j));
    CHECK(wait_credit(&in, blk, j));
    if (j < L - 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
    if (j >= 1) src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1, ring_slot(&in, j - 1));
    if (j > L - 1) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    if (j < T) dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, in.next, ring_slot(&in, j));
    CHECK(ring_move(&in, blk, j, 0, chunk, nsrc, src, ndst, dst));
    CHECK(signal_credit(&in, blk, j));
    CHECK(signal_data(&in, blk, j));
  }
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_hier_allreduce(const brd_algos_args_t *args, const int *host,
                                      brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "hierarchical all-reduce"));
  brd_algos_nodes_t *nd = NULL;
  ncclResult_t res;
  CHECK(brd_algos_nodes_create(args, host, &nd));
  /* Two nodes or more, the same number of ranks on each, two or more:
   * otherwise there is nothing to split (or the pieces would not line
   * up across nodes), and the ring all-reduce is the plan. */
  if (nd->nnodes < 2 || nd->lmin != nd->lmax || nd->lmin < 2) {
    brd_algos_nodes_destroy(nd);
    return brd_algos_ring_allreduce(args, plan_out);
  }
  hier_t h = {.nd = nd, .N = nd->nnodes, .L = nd->lmin, .ll = args->proto == BRD_IR_PROTO_LL};
  h.t1 = 2 * (h.L - 1);
  h.t2 = 2 * (h.N - 1);
  h.d1 = min_int(h.t1, DEPTH);
  h.d2 = min_int(h.t2, DEPTH);
  h.spi = h.t1 > h.t2 ? h.t1 : h.t2;
  size_t per_block = (size_t)h.d1 * h.N + (size_t)h.d2;
  size_t nchunks = (size_t)args->nblocks * h.L * h.N;
  if (nchunks > 65535 || per_block * (size_t)args->nblocks > 65535) {
    WARN("hierarchical all-reduce: %d blocks x %d ranks exceed the IR's 16-bit chunk "
         "and slot indices", args->nblocks, args->nranks);
    res = ncclInvalidArgument;
    goto out;
  }
  h.area2 = (uint32_t)((size_t)args->nblocks * h.d1 * h.N);
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = (uint32_t)nchunks,
      .nslots = (uint32_t)(per_block * (size_t)args->nblocks), .slot_div = (uint32_t)per_block,
      .nsems = 2u * (uint32_t)args->nblocks, .seq_per_iter = (uint32_t)h.spi,
      .proto = (uint8_t)args->proto, .algo = BRD_IR_ALGO_RING,
      .coll = BRD_IR_COLL_ALLREDUCE};
  res = brd_algos_build(&shape, args, hier_block, &h, "a hierarchical all-reduce", plan_out);
out:
  brd_algos_nodes_destroy(nd);
  return res;
}
