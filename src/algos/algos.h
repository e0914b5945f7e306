/*
 * Braid plan generators: each turns (collective, ranks, rank order, blocks,
 * protocol) into a plan (device/ir.h) through the builder in plan/plan.h.
 * Pure C; no communicator, no CUDA.
 *
 * Every generator returns a plan that brd_plan_verify accepts, for any
 * nranks >= 1, any permutation and any nblocks >= 1, in place or not. The
 * plan is a malloc'd blob the caller frees with brd_plan_destroy.
 */
#ifndef BRD_ALGOS_ALGOS_H
#define BRD_ALGOS_ALGOS_H

#include "nccl.h"
#include "plan/plan.h"

typedef struct brd_algos_args {
  int nranks;
  /* order[p] is the rank at position p of the ring / tree numbering (a
   * permutation of 0..nranks-1); NULL means the identity. Borrowed. */
  const int *order;
  int nblocks; /* blocks per rank, >= 1; each works on its own data slice */
  int proto;   /* BRD_IR_PROTO_SIMPLE or BRD_IR_PROTO_LL */
} brd_algos_args_t;

/* Node layouts. The generators that place traffic by node (the tree
 * all-reduce across nodes, the hierarchical all-reduce) take `host` as
 * well: host[r] labels the node of rank r, ranks with equal labels sharing
 * one (any int values); NULL means every rank on one node. Borrowed. */

/* All generators: ncclInvalidArgument (with a WARN) for nranks or nblocks
 * out of range (1..65535, and nblocks * chunks per block below 65536), an
 * order that is not a permutation, or an unknown protocol;
 * ncclSystemError when out of memory. Writes *plan_out only on success.
 * Any thread. */
ncclResult_t brd_algos_ring_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_tree_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
/* The tree all-reduce on the node layout `host`: with two nodes or more,
 * the double binary tree between nodes with a chain inside each node
 * (NCCL's shape); otherwise brd_algos_tree_allreduce's plan. */
ncclResult_t brd_algos_tree_allreduce_hosts(const brd_algos_args_t *args, const int *host,
                                            brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_oneshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
/* Zero-copy plans (zerocopy.c, Simple only): they read peers' inputs and
 * write their outputs in place, with no scratch (BRD_IR_PLAN_F_PEER_INPUT:
 * only where every rank's buffers are registered and mapped). All-reduce
 * is two-shot; reduce-scatter and all-gather read every rank directly. */
ncclResult_t brd_algos_zerocopy_allreduce(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_zerocopy_reducescatter(const brd_algos_args_t *args,
                                              brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_zerocopy_allgather(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_twoshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
/* Hierarchical all-reduce (hier.c): a ring reduce-scatter inside each node,
 * a ring all-reduce of each piece across the nodes among the ranks of the
 * same local index, a ring all-gather inside each node. Needs a layout
 * `host` of two nodes or more, all of one size >= 2; any other layout gets
 * the ring all-reduce's plan (its header says BRD_IR_ALGO_RING, as the
 * hierarchical plan's does: the IR has no code for a composition of
 * rings). */
ncclResult_t brd_algos_hier_allreduce(const brd_algos_args_t *args, const int *host,
                                      brd_ir_plan_t **plan_out);

/* NVLS inside each node, a ring across the nodes (nvls_hier.c; the
 * tuner's NVLSTree, BRD_ALGO_NVLS_TREE): each node's ranks reduce their
 * pieces through a switch channel of their own (switch group = node),
 * the ranks of one local index all-reduce their piece with a ring across
 * the nodes (hier.c's, brd_algos_nodes_ring), and each stores its piece
 * to its node's copies by multicast. Needs a layout `host` of two nodes
 * or more, all of one size from 2 to BRD_ALGOS_NVLS_MAX_RANKS
 * (brd_algos_nvls_hier_fits, which the runtime asks first); one node (or
 * host NULL) gets the NVLS all-reduce's plan, other layouts the ring
 * all-reduce's. Simple only, the NVLS operators (brd_algos_nvls_supported). */
ncclResult_t brd_algos_nvls_hier_allreduce(const brd_algos_args_t *args, const int *host,
                                           brd_ir_plan_t **plan_out);

/* 1 when the node layout `host` of n ranks (NULL: one node) suits
 * brd_algos_nvls_hier_allreduce: two nodes or more, all of one size from
 * 2 to BRD_ALGOS_NVLS_MAX_RANKS. Any thread. */
int brd_algos_nvls_hier_fits(const int *host, int n);

/* One rank's view of one ring of a plan across nodes (hier.c; the
 * hierarchical and the NVLS-inside-node all-reduces): its peers, its
 * slots, the semaphores 2 blk (data) and 2 blk + 1 (credit) of its
 * channels to them. */
typedef struct brd_algos_ring_at {
  brd_plan_builder_t *b; /* borrowed */
  int rank, prev, next;
  int steps, depth;      /* transfers per iteration; slots they cycle through */
  int spi;               /* the plan's seq_per_iter (>= steps) */
  int ll;                /* 1: LL packets, no data semaphore */
  uint32_t slot0;        /* the block's first slot in this ring's area */
  uint32_t width;        /* slots (and chunks) per transfer */
} brd_algos_ring_at_t;

/* Appends to (r->rank, blk) the ring all-reduce across n ranks (one per
 * node) of the n output chunks from `base`, in place, for the rank at
 * index m of that ring: 2(n-1) transfers of one chunk, the post-op at
 * transfer n-1. It reads the output, so the caller has put the rank's
 * contribution there first. */
ncclResult_t brd_algos_nodes_ring(const brd_algos_ring_at_t *r, int n, int m, int blk,
                                  uint32_t base);

/* ---- NVLS plans (nvls.c) ------------------------------------------------------
 *
 * Plans over a switch channel (device/ir.h, "Switch channels"; Simple,
 * rank order, BRD_ALGOS_NVLS_DEPTH groups of chunks per block and window
 * pipelined one barrier apart). nranks up to BRD_ALGOS_NVLS_MAX_RANKS.
 * The runtime asks brd_algos_nvls_supported before it runs one. */
#define BRD_ALGOS_NVLS_DEPTH 2
#define BRD_ALGOS_NVLS_MAX_RANKS 32

/* All-reduce: copy in, reduce each rank's slice over the switch and store
 * it into every copy, copy out (three passes, D + 1 barriers per window). */
ncclResult_t brd_algos_nvls_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
/* Low-latency all-reduce: copy in, barrier, reduce the whole chunk over
 * the switch into the output (one barrier per chunk). */
ncclResult_t brd_algos_nvls_ll_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
/* All-gather: store the own chunk into every copy, barrier, copy out. */
ncclResult_t brd_algos_nvls_allgather(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
/* Reduce-scatter: copy the input segments in, barrier, reduce the own
 * segment over the switch into the output. */
ncclResult_t brd_algos_nvls_reducescatter(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out);

/* Appends one op `code` with one source over nchunks chunks from `chunk`
 * to (rank, blk): the NVLS plans' copies and switch ops. Codes as
 * brd_plan_op_move. */
ncclResult_t brd_algos_move_n(brd_plan_builder_t *b, int rank, int blk, uint8_t code,
                              uint8_t flags, uint32_t chunk, uint32_t nchunks,
                              brd_plan_ref_t src, int ndst, const brd_plan_ref_t *dst);

/* Appends MC_BARRIER on switch semaphore `sem` with target k to block blk
 * of rank (nvls.c; the NVLS and zero-copy NVLS plans). Errors as
 * brd_plan_op_add's. */
ncclResult_t brd_algos_mc_barrier(brd_plan_builder_t *b, int rank, int blk, uint32_t sem,
                                  int32_t k);

/* Zero-copy NVLS plans (nvls_zc.c; BRD_IR_PLAN_F_PEER_INPUT, no scratch):
 * the switch channel reaches every rank's own send and receive buffers
 * (device/ir.h, "Switch channels"), so the runtime runs them only where
 * both lie in windows bound to one multicast object at the same offsets
 * on every rank. Each block opens and closes with a multicast barrier.
 * All-reduce: rank r ld_reduces its slice over every input and st's it
 * into every output. All-gather: rank r st's its input into segment r of
 * every output. Reduce-scatter: rank r ld_reduces segment r of every
 * input into its output. */
ncclResult_t brd_algos_nvls_zc_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_nvls_zc_allgather(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_nvls_zc_reducescatter(const brd_algos_args_t *args,
                                             brd_ir_plan_t **plan_out);

/* The one NVLS eligibility rule (NCCL's ncclNvlsSupported): 1 when a
 * switch plan may run collective coll (BRD_IR_COLL_*) on dtype
 * (ncclDataType_t) with redop (ncclRedOp_t; anything else, PreMulSum
 * included, is not eligible): all-gather always; all-reduce and
 * reduce-scatter with sum on 32- and 64-bit integers, f16, bf16, f32 and
 * f64, and with min/max on those integers, f16 and bf16. 0 otherwise.
 * Pure; any thread. */
int brd_algos_nvls_supported(int coll, int dtype, int redop);

/* ---- the other collectives ------------------------------------------------
 *
 * The same contract as the all-reduce generators (including in place, in
 * the layout the collective defines). `root` is a rank (not a position) for
 * Broadcast, Reduce, Gather and Scatter; ncclInvalidArgument when it is out
 * of range. `deterministic` makes a reduction combine the ranks' data in
 * rank order 0..n-1 in every element, whatever the block count, protocol or
 * message size. */
ncclResult_t brd_algos_ring_allgather(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_allgather(const brd_algos_args_t *args,
                                        brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_ring_reducescatter(const brd_algos_args_t *args,
                                          brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_reducescatter(const brd_algos_args_t *args,
                                            int deterministic,
                                            brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_chain_broadcast(const brd_algos_args_t *args, int root,
                                       brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_broadcast(const brd_algos_args_t *args, int root,
                                        brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_chain_reduce(const brd_algos_args_t *args, int root,
                                    brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_reduce(const brd_algos_args_t *args, int root,
                                     int deterministic,
                                     brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_pairwise_alltoall(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_gather(const brd_algos_args_t *args, int root,
                                     brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_direct_scatter(const brd_algos_args_t *args, int root,
                                      brd_ir_plan_t **plan_out);
/* One-shot and two-shot all-reduce reducing in rank order (deterministic). */
ncclResult_t brd_algos_ordered_oneshot_allreduce(const brd_algos_args_t *args,
                                                 brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_ordered_twoshot_allreduce(const brd_algos_args_t *args,
                                                 brd_ir_plan_t **plan_out);

/* ---- the generator table (generate.c) ---------------------------------------
 *
 * Every generator above is one row {collective, algorithm, deterministic,
 * zero-copy}; a generator serving several rows (a collective that does not
 * reduce, whose plans are the same in deterministic mode) is listed once
 * per row. The lookups below are the only way the runtime picks one. */

/* Set in an algorithm code to ask for the zero-copy plan of that
 * algorithm (above; it reads peers' registered inputs in place). Above
 * every BRD_IR_ALGO_*. */
#define BRD_ALGOS_ZEROCOPY 0x40
/* Set in an algorithm code to ask for the low-latency variant of that
 * algorithm (the NVLS all-reduce's one-barrier plan). */
#define BRD_ALGOS_LOWLAT 0x20

/* One signature for every generator: root is read by rooted collectives
 * only; deterministic (0 or 1) by the reductions with an ordered variant;
 * host (the node layout, above) by the generators that place by node. */
typedef ncclResult_t (*brd_algos_gen_fn)(const brd_algos_args_t *args, const int *host,
                                         int root, int deterministic,
                                         brd_ir_plan_t **plan_out);

typedef struct brd_algos_gen {
  uint8_t coll;          /* BRD_IR_COLL_* (never SENDRECV: brd_algos_sendrecv) */
  uint8_t algo;          /* BRD_IR_ALGO_*, or BRD_ALGO_HIER (plan/tune.h) */
  uint8_t deterministic; /* 1: combines the ranks' data in rank order */
  uint8_t zerocopy;      /* 1: reads peers' registered inputs in place */
  uint8_t lowlat;        /* 1: the low-latency variant (BRD_ALGOS_LOWLAT) */
  const char *name;      /* "ring all-reduce", for messages and tools */
  brd_algos_gen_fn fn;
} brd_algos_gen_t;

/* The whole table (static storage), its length in *count_out. */
const brd_algos_gen_t *brd_algos_gens(int *count_out);

/* The row of (coll, algo, deterministic), algo possibly carrying
 * BRD_ALGOS_ZEROCOPY or BRD_ALGOS_LOWLAT; NULL when there is none. Pure. */
const brd_algos_gen_t *brd_algos_find(int coll, int algo, int deterministic);

/* Runs the generator of (coll, algo, deterministic) (brd_algos_find's
 * arguments). root is used by rooted collectives. ncclInvalidArgument
 * with a WARN when the table has no such row; otherwise the generator's
 * result. Any thread. */
ncclResult_t brd_algos_generate(int coll, int algo, const brd_algos_args_t *args,
                                int root, int deterministic,
                                brd_ir_plan_t **plan_out);

/* brd_algos_generate on the node layout `host` (above; NULL: one node).
 * Any thread. */
ncclResult_t brd_algos_generate_hosts(int coll, int algo, const brd_algos_args_t *args,
                                      const int *host, int root, int deterministic,
                                      brd_ir_plan_t **plan_out);

/* 1 when brd_algos_generate has a generator for (coll, algo) (and, with
 * deterministic, one that reduces in rank order), else 0. Pure. */
int brd_algos_available(int coll, int algo, int deterministic);

/* ---- point-to-point ---------------------------------------------------------
 *
 * The sends and receives of one communicator in one launch, as a plan
 * (BRD_IR_COLL_SENDRECV, Simple, one window, chunks that never spread and
 * one scratch phase). Each rank only knows its own lists; pairing is by
 * rule: rank r's i-th send to p is p's i-th receive from r, and both have
 * the same number of chunks (a chunk is one scratch slot of data, so equal
 * counts give equal chunks). From that alone every rank builds its part:
 *
 *   - block per peer (ascending peer order, the rank itself included) so
 *     that each pair's traffic is independent; a block interleaves its
 *     pieces to and from the peer (send piece t, then receive piece t), so
 *     a pair exchanging in both directions cannot deadlock;
 *   - the receiver's scratch has SENDRECV_DEPTH slots reserved for each
 *     sender (slot sender * SENDRECV_DEPTH + t % SENDRECV_DEPTH for piece
 *     t), so senders never share a slot;
 *   - semaphore 0 of a channel carries data (k = piece + 1), semaphore 1
 *     credits (k = piece + 1); the sender waits for a credit before reusing
 *     a slot and, at the end, for the last credit, so it finishes only once
 *     the receiver has read everything (the one-phase rule);
 *   - sequence numbers count per pair of ranks: the pair reserves
 *     max(pieces one way, pieces the other way) from its own cursor, which
 *     only its two ranks advance, in the same order, and passes the epoch
 *     per channel (brd_exec_args_t.chan_epoch). No rank needs to know what
 *     other pairs do. */
#define BRD_ALGOS_SENDRECV_DEPTH 4
#define BRD_ALGOS_SENDRECV_SLOT_DIV 16 /* slots per NCCL_BUFFSIZE: a sender's
                                        * SENDRECV_DEPTH slots are a quarter
                                        * of it */

typedef struct brd_algos_sendrecv_op {
  int peer;          /* the other rank (may be this rank) */
  uint32_t nchunks;  /* chunks of data (0: nothing to move this time) */
} brd_algos_sendrecv_op_t;

typedef struct brd_algos_sendrecv_rank {
  int nsend, nrecv;
  const brd_algos_sendrecv_op_t *send; /* in call order: send i is input segment i */
  const brd_algos_sendrecv_op_t *recv; /* in call order: receive j is output seg j */
} brd_algos_sendrecv_rank_t;

typedef struct brd_algos_sendrecv_args {
  int nranks;
  int rank;                          /* only this rank's part; -1: every rank */
  const brd_algos_sendrecv_rank_t *ranks; /* [nranks]; with rank >= 0 only
                                      * ranks[rank] is read. Borrowed. */
} brd_algos_sendrecv_args_t;

/* Builds the plan. Other ranks' blocks are empty when args->rank >= 0; the
 * whole plan (rank -1) is what the verifier checks. ncclInvalidArgument
 * with a WARN for a peer out of range, sends to this rank that do not
 * match its receives from itself (or, for rank -1, any pair that does not
 * match), or more segments x chunks than the IR's 16-bit indices hold;
 * ncclSystemError when out of memory. Any thread. */
ncclResult_t brd_algos_sendrecv(const brd_algos_sendrecv_args_t *args,
                                brd_ir_plan_t **plan_out);

/* ---- one-sided put, signal and wait (rma.c) ------------------------------------ */

/* The one-sided protocol between rank src and rank dst of nranks, as one
 * plan (BRD_IR_COLL_SENDRECV, BRD_IR_PLAN_F_ONE_SIDED | ONE_PHASE, one
 * block, one chunk, one semaphore, one sequence number per launch):
 *   src  [PUT input segment 0 -> dst's output (with_data)], then SIGNAL
 *        semaphore 0 of its channel to dst, k = 1;
 *   dst  WAIT semaphore 0 of its channel from src, k = 1.
 * Each side runs as a launch of its own (ncclPutSignal or ncclSignal;
 * ncclWaitSignal), with its channel's epoch set to the signals counted so
 * far (minus one more for a wait of several): the semaphore word is the
 * count of signals src sent dst, written by src only. The whole plan is
 * what brd_plan_verify_p2p checks: data is in dst's output when its wait
 * sees the signal. ncclInvalidArgument (WARN) for ranks out of range or
 * equal; ncclSystemError when out of memory. Any thread. */
ncclResult_t brd_algos_rma(int nranks, int src, int dst, int with_data,
                           brd_ir_plan_t **plan_out);

/* ---- shared by the generators (common.c) ------------------------------------ */

/* Validates args (and root, for rooted collectives; -1 otherwise) for the
 * generator named `what` ("ring all-gather"); codes as above. */
ncclResult_t brd_algos_check(const brd_algos_args_t *args, int root,
                             const char *what);

/* Direct plans link every rank to every other: ncclInvalidArgument with a
 * WARN naming `what` when nranks - 1 exceeds the channels a rank may have
 * in a plan (255). */
ncclResult_t brd_algos_check_direct(int nranks, const char *what);

/* The shape of a direct reduction (reduce, reduce-scatter) over args:
 * a chunk per block, a scratch slot per block and peer, and, for a
 * rank-ordered one at n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN ranks, an own
 * slot per block (brd_algos_sources_t.own_slot); two semaphores per block.
 * root is 0 for an unrooted collective. */
brd_plan_shape_t brd_algos_direct_reduce_shape(const brd_algos_args_t *args, uint8_t coll,
                                               int root, int deterministic);

/* The one-rank plan of coll: each block copies its chunk of the input to
 * the output, with the post-op for reductions. */
ncclResult_t brd_algos_single(const brd_algos_args_t *args, uint8_t coll,
                              uint8_t algo, int root, brd_ir_plan_t **plan_out);

/* Position of `rank` in the order. */
int brd_algos_pos_of(const brd_algos_args_t *args, int rank);

/* A node layout `host` in position order: nodes numbered by their first
 * rank's position, each node's ranks listed by position. */
typedef struct brd_algos_nodes {
  int nnodes;
  int lmin, lmax; /* fewest and most ranks on one node */
  int *node;      /* [nranks] node of each rank */
  int *local;     /* [nranks] index of each rank within its node */
  int *first;     /* [nnodes + 1] offsets of each node's ranks in members */
  int *members;   /* [nranks] ranks grouped by node */
} brd_algos_nodes_t;

/* Builds the layout of host over args' ranks and order (one node when
 * host is NULL) in one allocation that brd_algos_nodes_destroy frees.
 * ncclSystemError with a WARN when out of memory. Any thread. */
ncclResult_t brd_algos_nodes_create(const brd_algos_args_t *args, const int *host,
                                    brd_algos_nodes_t **nodes_out);
void brd_algos_nodes_destroy(brd_algos_nodes_t *nodes);

/* Rank of local index i of node m. */
static inline int brd_algos_node_rank(const brd_algos_nodes_t *nd, int m, int i) {
  return nd->members[nd->first[m] + i];
}

/* Rank-ordered reductions of more sources than one op holds are cut into
 * groups accumulated in the output (brd_plan_op_move); in place the
 * output is the rank's own input, which a later group would read
 * overwritten. Such plans first copy the own input into a scratch slot of
 * their own (nranks >= this), so every group reads intact data. */
#define BRD_ALGOS_ORDERED_OWN_SLOT_MIN BRD_IR_MAX_REFS

/* INPUT/OUTPUT index of chunk `chunk` of segment `seg` (device/ir.h). */
static inline uint32_t brd_algos_seg(uint32_t nchunks, int seg, uint32_t chunk) {
  return (uint32_t)seg * nchunks + chunk;
}

/* Credit target before ring transfer t (of `steps` per iteration, through
 * `depth` slots) may overwrite its slot: the successor must have consumed
 * the slot's previous use, in this iteration or (k <= 0) the one before. */
static inline int32_t brd_algos_ring_credit_k(int depth, int steps, int t) {
  if (t >= depth) return t - depth + 1;
  int last = t + depth * ((steps - 1 - t) / depth);
  return last + 1 - steps;
}

/* Positions linked to position `pos` in tree `tree` (0 or 1) of NCCL's
 * double binary tree over n positions: *parent_out is -1 at the root,
 * children_out[i] is -1 where absent. Tree 0 is the binary tree rooted at
 * 0; tree 1 mirrors it (n even) or shifts it by one (n odd). */
void brd_algos_tree_links(int n, int tree, int pos, int *parent_out,
                          int children_out[2]);

/* Rank at position pos (mod nranks). */
static inline int brd_algos_rank_at(const brd_algos_args_t *args, int pos) {
  int n = args->nranks;
  pos = ((pos % n) + n) % n;
  return args->order ? args->order[pos] : pos;
}

/* One (position, block) of a plan: appends that block's ops for the rank
 * at position p. refs is scratch of args->nranks references the body may
 * use freely; ctx is the generator's own (root, determinism, ...). */
typedef ncclResult_t (*brd_algos_block_fn)(brd_plan_builder_t *b,
                                           const brd_algos_args_t *a, int p, int blk,
                                           brd_plan_ref_t *refs, const void *ctx);

/* The frame every direct generator shares: a builder for shape, body for
 * every position and block (positions outer), the finished plan in
 * *plan_out. `what` names the plan in the out-of-memory WARN ("out of host
 * memory generating <what> for <n> ranks"). ncclSystemError when out of
 * memory; body's error otherwise. Any thread. */
ncclResult_t brd_algos_build(const brd_plan_shape_t *shape, const brd_algos_args_t *args,
                             brd_algos_block_fn body, const void *ctx, const char *what,
                             brd_ir_plan_t **plan_out);

/* ---- direct plans: every rank talks to every other ---------------------------- */

/* Slot at the receiver (position pr) for data from the sender (ps) where
 * each block `blk` has n-1 slots, one per sender, nearest predecessor
 * first. An area of several blocks' slots is a block index past them. */
static inline uint32_t brd_algos_direct_slot(int n, int blk, int ps, int pr) {
  int rel = ((ps - pr - 1) % n + n) % n;
  return (uint32_t)(blk * (n - 1) + rel);
}

/* Appends to position p's block one sync op (code, semaphore sem, target
 * k) with each peer, at positions p + dir, p + 2 dir, ... (dir 1 or -1). */
ncclResult_t brd_algos_sync_peers(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                  int blk, uint8_t code, int dir, uint32_t sem, int32_t k);

/* Position p's block pushes `in` (chunk `chunk`) into its slot
 * (brd_algos_direct_slot) at every peer in one op: first it waits for
 * each peer's credit (credit_sem, k 0: the slot's previous use was read),
 * after it signals each peer's data_sem (Simple; LL flags carry the data).
 * refs is scratch of nranks - 1 references. */
ncclResult_t brd_algos_direct_push(brd_plan_builder_t *b, const brd_algos_args_t *a, int p,
                                   int blk, brd_plan_ref_t in, uint32_t chunk,
                                   uint32_t data_sem, uint32_t credit_sem,
                                   brd_plan_ref_t *refs);

/* Rooted direct plans (one chunk, blk, per block), a rank other than the
 * root at position p. Pushes `in` into its slot at the root
 * (brd_algos_direct_slot), signals the root's data_sem (Simple; LL flags
 * carry it), then waits for the root's done_sem (the slot is free again). */
ncclResult_t brd_algos_push_to_root(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                    int p, int blk, int root, brd_plan_ref_t in,
                                    uint32_t data_sem, uint32_t done_sem);

/* The other way: copies what the root put into its own slot blk (after
 * data_sem, Simple) into its output chunk, acknowledges on ack_sem, then
 * waits for the root's done_sem. */
ncclResult_t brd_algos_recv_from_root(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                      int p, int blk, int root, uint32_t data_sem,
                                      uint32_t ack_sem, uint32_t done_sem);

/* The n sources of a direct reduction at position p: the rank's own data
 * and, for each peer, the slot it pushed into (brd_algos_direct_slot of
 * block blk). */
typedef struct brd_algos_sources {
  brd_plan_ref_t own; /* the rank's own contribution */
  uint32_t chunk;     /* the chunk reduced */
  int ordered;        /* 1: in rank order 0..n-1, own at its rank's place;
                       * 0: own first, then the peers at p + dir, p + 2 dir, ... */
  int dir;            /* 1 or -1 */
  uint8_t llf;        /* BRD_IR_REF_LL where the slots hold LL packets */
  uint32_t own_slot;  /* ordered, n >= BRD_ALGOS_ORDERED_OWN_SLOT_MIN: the
                       * scratch slot own is copied into first, and read from */
} brd_algos_sources_t;

/* Reduces those sources into the output chunk src->chunk in one op with
 * the post-op (after the copy of own where src->own_slot applies). refs
 * is scratch of nranks references; on return it holds the sources. */
ncclResult_t brd_algos_reduce_slots(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                    int p, int blk, const brd_algos_sources_t *src,
                                    brd_plan_ref_t *refs);

/* Block bodies of the one-shot and two-shot all-reduce
 * (allreduce_oneshot.c, allreduce_twoshot.c), for brd_algos_build: ctx
 * points to an int, 1 to reduce in rank order (allreduce_ordered.c). */
ncclResult_t brd_algos_oneshot_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                     int p, int blk, brd_plan_ref_t *refs, const void *ctx);
ncclResult_t brd_algos_twoshot_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                     int p, int blk, brd_plan_ref_t *refs, const void *ctx);

/* ---- chain plans (chain broadcast, chain reduce) ------------------------------
 *
 * Positions form a chain through the root; each block moves
 * BRD_ALGOS_CHAIN_CHUNKS chunks per window, each into its own slot at the
 * next rank (semaphore 2 blk data, 2 blk + 1 acknowledgements). */
#define BRD_ALGOS_CHAIN_CHUNKS 4

/* The whole chain generator of coll: checks args and root for `what`
 * ("chain broadcast"), gives the one-rank plan for one rank, else runs
 * body for every (position, block) with ctx pointing to the root's
 * position (an int). Codes as brd_algos_check and brd_algos_build. */
ncclResult_t brd_algos_chain_build(const brd_algos_args_t *args, int root, uint8_t coll,
                                   brd_algos_block_fn body, const char *what,
                                   brd_ir_plan_t **plan_out);

/* ---- ring plans (ring all-reduce, all-gather, reduce-scatter) ----------------
 *
 * Each block moves `steps` transfers per iteration around the ring; transfer
 * t lands in slot t % depth of the block's `depth` slots at the successor
 * (depth = min(steps, BRD_ALGOS_RING_DEPTH), so a rank runs depth-1
 * transfers ahead of it). Semaphore 2 blk carries data forward (Simple; LL
 * flags carry it), 2 blk + 1 credits back. */
#define BRD_ALGOS_RING_DEPTH 4

typedef struct brd_algos_ring {
  int steps;        /* transfers per block and iteration */
  int depth;        /* slots per block */
  int ll;           /* 1: LL protocol */
  uint32_t nchunks; /* chunks per window (all blocks) */
} brd_algos_ring_t;

/* The scratch slot of block blk that transfer t (t >= -1) lands in. */
static inline uint32_t brd_algos_ring_slot(const brd_algos_ring_t *ring, int blk,
                                           int t) {
  return (uint32_t)(blk * ring->depth + (t + ring->depth) % ring->depth);
}

/* Opens step j (0..steps) of position p's block: waits for the
 * predecessor's transfer j-1 (Simple, j >= 1) and, when the step sends
 * (j < steps), for the successor's credit on the slot it overwrites. */
ncclResult_t brd_algos_ring_step_open(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                      const brd_algos_ring_t *ring, int p, int blk,
                                      int j);

/* Closes step j: credits the predecessor for the slot the step read
 * (j >= 1) and signals transfer j to the successor (Simple, j < steps). */
ncclResult_t brd_algos_ring_step_close(brd_plan_builder_t *b, const brd_algos_args_t *a,
                                       const brd_algos_ring_t *ring, int p, int blk,
                                       int j);

/* Builds a ring plan of coll (args checked, nranks >= 2): `steps`
 * transfers and `nchunks` chunks per window, body for every (position,
 * block) with the brd_algos_ring_t as ctx. Codes as brd_algos_build. */
ncclResult_t brd_algos_ring_build(const brd_algos_args_t *args, uint8_t coll, int steps,
                                  uint32_t nchunks, brd_algos_block_fn body,
                                  const char *what, brd_ir_plan_t **plan_out);

/* The whole ring generator of a collective over nranks segments of one
 * chunk per block (all-gather, reduce-scatter): n-1 steps. Checks args for
 * the generator named `what` ("ring all-gather"), gives the one-rank plan
 * for one rank; otherwise brd_algos_ring_build's. */
ncclResult_t brd_algos_ring_segments(const brd_algos_args_t *args, uint8_t coll,
                                     brd_algos_block_fn body, const char *what,
                                     brd_ir_plan_t **plan_out);

/* Appends a data op of one chunk; see brd_plan_op_move. */
static inline ncclResult_t brd_algos_move(brd_plan_builder_t *b, int rank,
                                          int block, uint8_t code,
                                          uint8_t flags, uint32_t chunk,
                                          int32_t k, int32_t k_src, int nsrc,
                                          const brd_plan_ref_t *src, int ndst,
                                          const brd_plan_ref_t *dst) {
  brd_plan_move_t m;
  m.code = code;
  m.flags = flags;
  m.chunk = chunk;
  m.nchunks = 1;
  m.k = k;
  m.k_src = k_src;
  m.nsrc = nsrc;
  m.src = src;
  m.ndst = ndst;
  m.dst = dst;
  return brd_plan_op_move(b, rank, block, &m);
}

#endif /* BRD_ALGOS_ALGOS_H */
