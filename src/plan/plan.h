/*
 * Braid plans: building a plan blob (device/ir.h) op by op and sizing its
 * scratch from NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE. Resolving its chunks for
 * one launch, reserving sequence numbers, copying and freeing blobs are
 * the executors' and live below, in device/layout.h (included here).
 *
 * Builder use (single thread):
 *
 *   brd_plan_shape_t shape = { nranks, nblocks, nchunks, nslots, slot_div,
 *                              nsems, seq_per_iter, proto, algo, coll };
 *   brd_plan_builder_t *b;
 *   CHECK(brd_plan_builder_create(&shape, &b));
 *   brd_plan_op_sync(b, rank, block, BRD_IR_OP_WAIT, peer, sem, k);
 *   brd_plan_op_move(b, rank, block, &move);   // data ops, peers by rank
 *   brd_plan_builder_finish(b, &plan);         // one malloc'd blob
 *   brd_plan_builder_destroy(b);
 *   ... brd_plan_destroy(plan);
 *
 * Channels are created on demand: naming a peer rank in a sync op or a
 * move ref adds a memory channel rank -> peer to the rank's table once;
 * naming BRD_PLAN_PEER_SWITCH adds the rank's switch channel once.
 */
#ifndef BRD_PLAN_PLAN_H
#define BRD_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"
#include "device/layout.h"

typedef struct brd_plan_shape {
  int nranks;
  int nblocks;            /* blocks per rank */
  uint32_t nchunks;       /* chunks per iteration window */
  uint32_t nslots;        /* scratch slots per rank (and phase) */
  uint32_t slot_div;      /* slots per NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE */
  uint32_t nsems;         /* inbound semaphores per channel */
  uint32_t seq_per_iter;  /* >= 1 */
  uint8_t proto;          /* BRD_IR_PROTO_* */
  uint8_t algo;           /* BRD_IR_ALGO_* */
  uint8_t coll;           /* BRD_IR_COLL_* */
  uint8_t flags;          /* BRD_IR_PLAN_F_* */
  uint16_t root;          /* rooted collectives */
} brd_plan_shape_t;

typedef struct brd_plan_builder brd_plan_builder_t;

/* A buffer reference with the peer named by rank (-1: this rank;
 * BRD_PLAN_PEER_SWITCH: every rank's copy, through the switch channel). */
#define BRD_PLAN_PEER_SWITCH (-2)
typedef struct brd_plan_ref {
  uint8_t buf;    /* BRD_IR_BUF_* | BRD_IR_REF_LL */
  int peer;       /* -1 for local, BRD_PLAN_PEER_SWITCH for the switch */
  uint32_t index; /* chunk or slot */
} brd_plan_ref_t;

/* A data op with any number of sources and destinations; see
 * brd_plan_op_move for how it is split into IR ops. */
typedef struct brd_plan_move {
  uint8_t code;     /* COPY, REDUCE, PUT, GET, PKT_PUT, PKT_REDUCE */
  uint8_t flags;    /* BRD_IR_F_* */
  uint32_t chunk;
  uint32_t nchunks; /* 0 means 1 */
  int32_t k;        /* flag of LL destinations */
  int32_t k_src;    /* flag of LL sources */
  int nsrc;
  const brd_plan_ref_t *src;
  int ndst;
  const brd_plan_ref_t *dst;
} brd_plan_move_t;

static inline brd_plan_ref_t brd_plan_ref(uint8_t buf, int peer,
                                          uint32_t index) {
  brd_plan_ref_t r;
  r.buf = buf;
  r.peer = peer;
  r.index = index;
  return r;
}

/* Allocates an empty builder for a plan of this shape. Returns
 * ncclInvalidArgument for a shape out of range (nranks 1..65535, nblocks
 * 1..65535, seq_per_iter >= 1, chunks and slots below 65536),
 * ncclSystemError when out of memory. */
ncclResult_t brd_plan_builder_create(const brd_plan_shape_t *shape,
                                     brd_plan_builder_t **b_out);

/* Frees the builder and everything it holds (not a finished plan).
 * NULL is a no-op. */
void brd_plan_builder_destroy(brd_plan_builder_t *b);

/* Channel index of rank -> peer in rank's table, adding a memory channel
 * the first time. ncclInternalError for peer == rank or out of range,
 * ncclSystemError when out of memory. */
ncclResult_t brd_plan_chan_get(brd_plan_builder_t *b, int rank, int peer,
                               uint8_t *chan_out);

/* Channel index of rank's switch channel (BRD_IR_CHAN_SWITCH, peer
 * BRD_IR_SWITCH_PEER; device/ir.h), adding it the first time. Codes as
 * brd_plan_chan_get. */
ncclResult_t brd_plan_chan_switch(brd_plan_builder_t *b, int rank, uint8_t *chan_out);

/* As brd_plan_chan_switch, and puts rank's switch channel in switch
 * group `group` (device/ir.h: members are the ranks of one group; every
 * rank is in group 0 unless told otherwise). */
ncclResult_t brd_plan_switch_group(brd_plan_builder_t *b, int rank, uint8_t group,
                                   uint8_t *chan_out);

/* Appends one IR op, already in channel terms, to (rank, block). */
ncclResult_t brd_plan_op_add(brd_plan_builder_t *b, int rank, int block,
                             const brd_ir_op_t *op);

/* Appends a SIGNAL or WAIT on semaphore `sem` of the channel to `peer`. */
ncclResult_t brd_plan_op_sync(brd_plan_builder_t *b, int rank, int block,
                              uint8_t code, int peer, uint32_t sem, int32_t k);

/* Appends a BARRIER among the blocks of `rank`. */
ncclResult_t brd_plan_op_barrier(brd_plan_builder_t *b, int rank, int block);

/* Appends a data op, split to fit BRD_IR_MAX_REFS references per op:
 * too many destinations repeat the op over groups of destinations; too
 * many sources reduce them in groups into dst[0], which must then be a
 * local plain buffer (each later group reads it back as a source), with
 * the post-op flag kept for the last group only. */
ncclResult_t brd_plan_op_move(brd_plan_builder_t *b, int rank, int block,
                              const brd_plan_move_t *m);

/* Lays the plan out as one blob in a single malloc'd block that
 * brd_plan_destroy frees. The builder stays valid and unchanged.
 * ncclSystemError when out of memory, ncclInternalError when the plan
 * exceeds the blob's 32-bit offsets. */
ncclResult_t brd_plan_builder_finish(const brd_plan_builder_t *b,
                                     brd_ir_plan_t **plan_out);

/* Scratch bytes one rank needs for this plan, both phases included (one
 * area for BRD_IR_PLAN_F_ONE_PHASE plans): each slot is NCCL_BUFFSIZE /
 * slot_div bytes (NCCL_LL_BUFFSIZE for LL plans), rounded down to 16 and at
 * least 64, so every slot_div slots share one buffer of NCCL's size; but
 * never more than 16 such buffers in all (64 MiB at NCCL's default 4 MiB):
 * a plan of more slots gets smaller ones. 0 for a plan without slots. Reads the parameters through brd_param_int; any
 * thread. */
size_t brd_plan_scratch_bytes(const brd_ir_plan_t *plan);

/* 1 when some op of plan reads memory through a channel (a peer's
 * scratch, output or input as a source): such plans need load/store
 * channels, and a port channel, which only writes, cannot run them. Pure. */
int brd_plan_reads_peers(const brd_ir_plan_t *plan);

/* Marks the channels of plan between ranks q and r with port[q * nranks
 * + r] != 0 as port channels (BRD_IR_CHAN_PORT), the others as memory
 * channels. port is symmetric, nranks x nranks (the plan's). Returns the
 * number of port channels. In place; any thread. */
int brd_plan_chans_mark(brd_ir_plan_t *plan, const uint8_t *port);

#endif /* BRD_PLAN_PLAN_H */
