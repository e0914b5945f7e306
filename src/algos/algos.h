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

/* All generators: ncclInvalidArgument (with a WARN) for nranks or nblocks
 * out of range (1..65535, and nblocks * chunks per block below 65536), an
 * order that is not a permutation, or an unknown protocol;
 * ncclSystemError when out of memory. Writes *plan_out only on success.
 * Any thread. */
ncclResult_t brd_algos_ring_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_tree_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_oneshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);
ncclResult_t brd_algos_twoshot_allreduce(const brd_algos_args_t *args,
                                         brd_ir_plan_t **plan_out);

/* Positions linked to position `pos` in tree `tree` (0 or 1) of NCCL's
 * double binary tree over n positions: *parent_out is -1 at the root,
 * children_out[i] is -1 where absent. Tree 0 is the binary tree rooted at
 * 0; tree 1 mirrors it (n even) or shifts it by one (n odd). */
void brd_algos_tree_links(int n, int tree, int pos, int *parent_out,
                          int children_out[2]);

/* Shared by the generators (allreduce_ring.c). */

/* Validates args for the generator named `who`; see above for the codes. */
ncclResult_t brd_algos_args_check(const brd_algos_args_t *args,
                                  const char *who);

/* The one-rank plan: each block copies its chunk from input to output,
 * applying the post-op. */
ncclResult_t brd_algos_single_allreduce(const brd_algos_args_t *args,
                                        uint8_t algo, brd_ir_plan_t **plan_out);

/* Rank at position pos (mod nranks). */
static inline int brd_algos_rank_at(const brd_algos_args_t *args, int pos) {
  int n = args->nranks;
  pos = ((pos % n) + n) % n;
  return args->order ? args->order[pos] : pos;
}

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
