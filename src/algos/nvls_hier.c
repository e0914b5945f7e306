/*
 * All-reduce across nodes with NVLS inside each node (the tuner's
 * NVLSTree; Braid's phase between nodes is a ring, see below).
 *
 * Algorithm: on N nodes of L ranks each, every block cuts its window into
 * L pieces of N chunks. Each rank copies its window into its own scratch;
 * after a switch barrier, local index p loads the reduction of piece p
 * over its node's copies (MC_REDUCE, ld_reduce) into its output; the N
 * ranks of local index p, one per node, all-reduce that piece in place
 * with hier.c's ring across the nodes (brd_algos_nodes_ring: 2(N-1)
 * transfers of one chunk over port channels, the post-op at transfer
 * N-1); local index p then stores the finished piece into every copy of
 * its node's scratch (MC_STORE, multimem st); after a second barrier each
 * rank copies the other L-1 pieces from its scratch to its output. Each
 * node's ranks form a switch group of their own (device/ir.h: group =
 * node), one multicast object per node; nothing crosses nodes but the
 * rings. Per rank the network carries 2(N-1)/N of its 1/L share, as in
 * the hierarchical all-reduce; inside the node the switch replaces its
 * 2(L-1) ring steps with two barriers.
 *
 * NCCL's NVLSTree runs a tree between nodes; Braid runs the ring here
 * (the cost model's NVLSTree terms are this plan's: plan/tune.c). On two
 * nodes the two are the same exchange.
 *
 * Memory ordering: MC_BARRIER is a release store into every member's copy
 * and an acquire wait on the own copy (nvls.c). The copy-in precedes
 * barrier 1, so every MC_REDUCE reads finished copies; the MC_STOREs
 * precede barrier 2, so every copy-out reads finished pieces. A rank's
 * copy-in of the next window writes only its own copy, which no member
 * reads or writes after barrier 2 of the window before (the reductions
 * come before it, the next stores after the next barrier 1). The rings
 * order themselves with data and credit semaphores, as in hier.c.
 *
 * Blocks: each block is an independent instance over its L*N chunks, with
 * its own slots (L*N staged chunks, then min(2(N-1), ring depth) ring
 * slots), switch semaphore `blk`, and channel semaphores 2 blk (data) and
 * 2 blk + 1 (credit); the blocks' rings overlap each other's switch
 * phases, which keeps both the switch and the network busy.
 */
#include "base/check.h"
#include "algos/algos.h"

typedef struct nvls_hier {
  const brd_algos_nodes_t *nd;
  int N, L, spi, d2;
  uint32_t area2; /* first slot of the rings (all blocks) */
} nvls_hier_t;

static ncclResult_t nvls_hier_block(brd_plan_builder_t *b, const brd_algos_args_t *a, int pos,
                                    int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  const nvls_hier_t *h = ctx;
  const brd_algos_nodes_t *nd = h->nd;
  int rank = brd_algos_rank_at(a, pos), m = nd->node[rank], p = nd->local[rank];
  uint32_t L = (uint32_t)h->L, N = (uint32_t)h->N;
  uint32_t blk0 = (uint32_t)blk * L * N, mine = blk0 + (uint32_t)p * N;
  uint8_t sw;
  CHECK(brd_plan_switch_group(b, rank, (uint8_t)m, &sw));

  /* The window into the own copy (slot i holds chunk i). */
  brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, blk0);
  CHECK(brd_algos_move_n(b, rank, blk, BRD_IR_OP_COPY, 0, blk0, L * N,
                         brd_plan_ref(BRD_IR_BUF_INPUT, -1, blk0), 1, &slot));
  CHECK(brd_algos_mc_barrier(b, rank, blk, (uint32_t)blk, 1));
  /* The node's sum of piece p into the output, then the ring across. */
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, mine);
  CHECK(brd_algos_move_n(b, rank, blk, BRD_IR_OP_MC_REDUCE, 0, mine, N,
                         brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, mine), 1, &out));
  brd_algos_ring_at_t across = {
      .b = b, .rank = rank, .prev = brd_algos_node_rank(nd, (m + h->N - 1) % h->N, p),
      .next = brd_algos_node_rank(nd, (m + 1) % h->N, p), .steps = 2 * (h->N - 1),
      .depth = h->d2, .spi = h->spi, .ll = 0,
      .slot0 = h->area2 + (uint32_t)(blk * h->d2), .width = 1};
  CHECK(brd_algos_nodes_ring(&across, h->N, m, blk, mine));
  /* The finished piece into every copy of the node. */
  brd_plan_ref_t all = brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, mine);
  CHECK(brd_algos_move_n(b, rank, blk, BRD_IR_OP_MC_STORE, 0, mine, N, out, 1, &all));
  CHECK(brd_algos_mc_barrier(b, rank, blk, (uint32_t)blk, 2));
  /* The other pieces out: those before p, those after. */
  if (p > 0) {
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, blk0);
    CHECK(brd_algos_move_n(b, rank, blk, BRD_IR_OP_COPY, 0, blk0, (uint32_t)p * N,
                           brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, blk0), 1, &dst));
  }
  if ((uint32_t)p + 1 < L) {
    uint32_t c = mine + N;
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c);
    CHECK(brd_algos_move_n(b, rank, blk, BRD_IR_OP_COPY, 0, c, blk0 + L * N - c,
                           brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, c), 1, &dst));
  }
  return ncclSuccess;
}

/* Node layout of host over n ranks: nodes, and the smallest and largest. */
static void layout_of(const int *host, int n, int *nnodes_out, int *lmin_out, int *lmax_out) {
  int nnodes = 0, lmin = n, lmax = 0;
  for (int r = 0; r < n; r++) {
    int first = 1, on = 0;
    for (int q = 0; q < n; q++) {
      int same = host == NULL || host[q] == host[r];
      if (same && q < r) first = 0;
      on += same;
    }
    if (!first) continue;
    nnodes++;
    if (on < lmin) lmin = on;
    if (on > lmax) lmax = on;
  }
  *nnodes_out = nnodes;
  *lmin_out = lmin;
  *lmax_out = lmax;
}

/* See algos.h. */
int brd_algos_nvls_hier_fits(const int *host, int n) {
  int nnodes, lmin, lmax;
  if (host == NULL || n < 4) return 0;
  layout_of(host, n, &nnodes, &lmin, &lmax);
  return nnodes >= 2 && nnodes <= 255 && lmin == lmax && lmin >= 2 &&
         lmin <= BRD_ALGOS_NVLS_MAX_RANKS;
}

/* See algos.h. */
ncclResult_t brd_algos_nvls_hier_allreduce(const brd_algos_args_t *args, const int *host,
                                           brd_ir_plan_t **plan_out) {
  const char *what = "NVLS all-reduce across nodes";
  CHECK(brd_algos_check(args, -1, what));
  if (!brd_algos_nvls_hier_fits(host, args->nranks)) {
    /* One node: the switch alone (the NVLS all-reduce). Other layouts
     * the runtime never asks for (brd_algos_nvls_hier_fits): the ring's,
     * as the hierarchical all-reduce falls back. */
    int nnodes, lmin, lmax;
    layout_of(host, args->nranks, &nnodes, &lmin, &lmax);
    if (nnodes == 1) return brd_algos_nvls_allreduce(args, plan_out);
    return brd_algos_ring_allreduce(args, plan_out);
  }
  brd_algos_nodes_t *nd = NULL;
  ncclResult_t res;
  CHECK(brd_algos_nodes_create(args, host, &nd));
  nvls_hier_t h = {.nd = nd, .N = nd->nnodes, .L = nd->lmin};
  int t2 = 2 * (h.N - 1);
  h.d2 = t2 < BRD_ALGOS_RING_DEPTH ? t2 : BRD_ALGOS_RING_DEPTH;
  h.spi = t2 > 2 ? t2 : 2; /* the ring's transfers, the two barriers */
  size_t per_block = (size_t)h.L * h.N + (size_t)h.d2;
  size_t nchunks = (size_t)args->nblocks * h.L * h.N;
  if (nchunks > 65535 || per_block * (size_t)args->nblocks > 65535) {
    WARN("%s: %d blocks x %d ranks exceed the IR's 16-bit chunk and slot indices", what,
         args->nblocks, args->nranks);
    res = ncclInvalidArgument;
    goto out;
  }
  h.area2 = (uint32_t)nchunks;
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = (uint32_t)nchunks,
      .nslots = (uint32_t)(per_block * (size_t)args->nblocks), .slot_div = (uint32_t)per_block,
      .nsems = 2u * (uint32_t)args->nblocks, .seq_per_iter = (uint32_t)h.spi,
      .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_NVLS,
      .coll = BRD_IR_COLL_ALLREDUCE};
  res = brd_algos_build(&shape, args, nvls_hier_block, &h, "an NVLS all-reduce across nodes",
                        plan_out);
out:
  brd_algos_nodes_destroy(nd);
  return res;
}
