/*
 * Braid plan builder and scratch sizing. See plan.h.
 */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/param.h"
#include "plan/plan.h"

/* Ops of one (rank, block), grown by doubling. */
struct blk_ops {
  brd_ir_op_t *ops; /* owned */
  uint32_t n, cap;
};

/* Channel peers of one rank, in channel-index order. */
struct rank_chans {
  int32_t *peers; /* owned */
  uint32_t n, cap;
  uint8_t sw_group; /* the switch channel's group (device/ir.h) */
};

struct brd_plan_builder {
  brd_plan_shape_t shape;
  struct blk_ops *blocks;   /* owned: [nranks * nblocks] */
  struct rank_chans *ranks; /* owned: [nranks] */
};

/* See plan.h. */
ncclResult_t brd_plan_builder_create(const brd_plan_shape_t *shape,
                                     brd_plan_builder_t **b_out) {
  brd_plan_builder_t *b = NULL;
  if (shape->nranks < 1 || shape->nranks > 65535 || shape->nblocks < 1 ||
      shape->nblocks > 65535 || shape->seq_per_iter < 1 ||
      shape->nchunks < 1 || shape->nchunks > 65535 ||
      shape->nslots > 65535 || (shape->nslots > 0 && shape->slot_div < 1)) {
    WARN("plan shape out of range: %d ranks, %d blocks, %u chunks, %u slots "
         "(slot_div %u), %u sequence numbers per iteration",
         shape->nranks, shape->nblocks, shape->nchunks, shape->nslots,
         shape->slot_div, shape->seq_per_iter);
    return ncclInvalidArgument;
  }
  b = calloc(1, sizeof(*b));
  if (b == NULL) goto fail_oom;
  b->shape = *shape;
  b->blocks = calloc((size_t)shape->nranks * shape->nblocks, sizeof(*b->blocks));
  if (b->blocks == NULL) goto fail_free_builder;
  b->ranks = calloc((size_t)shape->nranks, sizeof(*b->ranks));
  if (b->ranks == NULL) goto fail_free_blocks;
  *b_out = b;
  return ncclSuccess;

fail_free_blocks:
  free(b->blocks);
fail_free_builder:
  free(b);
fail_oom:
  WARN("out of host memory creating a plan builder for %d ranks x %d blocks",
       shape->nranks, shape->nblocks);
  return ncclSystemError;
}

/* See plan.h. */
void brd_plan_builder_destroy(brd_plan_builder_t *b) {
  if (b == NULL) return;
  size_t nblk = (size_t)b->shape.nranks * b->shape.nblocks;
  for (size_t i = 0; i < nblk; i++) free(b->blocks[i].ops);
  for (int r = 0; r < b->shape.nranks; r++) free(b->ranks[r].peers);
  free(b->blocks);
  free(b->ranks);
  free(b);
}

/* Index of `peer` (a rank or BRD_IR_SWITCH_PEER) in rank's table, added
 * the first time. */
static ncclResult_t chan_find_add(brd_plan_builder_t *b, int rank, int peer,
                                  uint8_t *chan_out) {
  struct rank_chans *rc = &b->ranks[rank];
  for (uint32_t i = 0; i < rc->n; i++) {
    if (rc->peers[i] == peer) {
      *chan_out = (uint8_t)i;
      return ncclSuccess;
    }
  }
  if (rc->n >= BRD_IR_CHAN_LOCAL) {
    WARN("plan builder: rank %d needs more than %d channels", rank,
         BRD_IR_CHAN_LOCAL);
    return ncclInternalError;
  }
  if (rc->n == rc->cap) {
    uint32_t cap = rc->cap ? rc->cap * 2 : 8;
    int32_t *p = realloc(rc->peers, cap * sizeof(*p));
    if (p == NULL) {
      WARN("out of host memory growing rank %d's channel table to %u", rank,
           cap);
      return ncclSystemError;
    }
    rc->peers = p;
    rc->cap = cap;
  }
  rc->peers[rc->n] = peer;
  *chan_out = (uint8_t)rc->n;
  rc->n++;
  return ncclSuccess;
}

/* See plan.h. */
ncclResult_t brd_plan_chan_get(brd_plan_builder_t *b, int rank, int peer,
                               uint8_t *chan_out) {
  if (rank < 0 || rank >= b->shape.nranks || peer < 0 ||
      peer >= b->shape.nranks || peer == rank) {
    WARN("plan builder: no channel from rank %d to rank %d in a plan of %d "
         "ranks", rank, peer, b->shape.nranks);
    return ncclInternalError;
  }
  return chan_find_add(b, rank, peer, chan_out);
}

/* See plan.h. */
ncclResult_t brd_plan_chan_switch(brd_plan_builder_t *b, int rank, uint8_t *chan_out) {
  if (rank < 0 || rank >= b->shape.nranks) {
    WARN("plan builder: no switch channel for rank %d in a plan of %d ranks", rank,
         b->shape.nranks);
    return ncclInternalError;
  }
  return chan_find_add(b, rank, BRD_IR_SWITCH_PEER, chan_out);
}

/* See plan.h. */
ncclResult_t brd_plan_switch_group(brd_plan_builder_t *b, int rank, uint8_t group,
                                   uint8_t *chan_out) {
  CHECK(brd_plan_chan_switch(b, rank, chan_out));
  b->ranks[rank].sw_group = group;
  return ncclSuccess;
}

/* See plan.h. */
ncclResult_t brd_plan_op_add(brd_plan_builder_t *b, int rank, int block,
                             const brd_ir_op_t *op) {
  if (rank < 0 || rank >= b->shape.nranks || block < 0 ||
      block >= b->shape.nblocks) {
    WARN("plan builder: op for rank %d block %d outside %d ranks x %d blocks",
         rank, block, b->shape.nranks, b->shape.nblocks);
    return ncclInternalError;
  }
  struct blk_ops *bo = &b->blocks[(size_t)rank * b->shape.nblocks + block];
  if (bo->n == bo->cap) {
    uint32_t cap = bo->cap ? bo->cap * 2 : 32;
    brd_ir_op_t *p = realloc(bo->ops, cap * sizeof(*p));
    if (p == NULL) {
      WARN("out of host memory growing the ops of rank %d block %d to %u",
           rank, block, cap);
      return ncclSystemError;
    }
    bo->ops = p;
    bo->cap = cap;
  }
  bo->ops[bo->n++] = *op;
  return ncclSuccess;
}

/* See plan.h. */
ncclResult_t brd_plan_op_sync(brd_plan_builder_t *b, int rank, int block,
                              uint8_t code, int peer, uint32_t sem, int32_t k) {
  brd_ir_op_t op;
  memset(&op, 0, sizeof(op));
  op.code = code;
  op.k = k;
  op.ref[0].buf = BRD_IR_BUF_SEM;
  op.ref[0].index = (uint16_t)sem;
  if (code == BRD_IR_OP_WAIT) op.nsrc = 1;
  else op.ndst = 1;
  CHECK(brd_plan_chan_get(b, rank, peer, &op.ref[0].chan));
  return brd_plan_op_add(b, rank, block, &op);
}

/* See plan.h. */
ncclResult_t brd_plan_op_barrier(brd_plan_builder_t *b, int rank, int block) {
  brd_ir_op_t op;
  memset(&op, 0, sizeof(op));
  op.code = BRD_IR_OP_BARRIER;
  return brd_plan_op_add(b, rank, block, &op);
}

static ncclResult_t ref_resolve(brd_plan_builder_t *b, int rank,
                                const brd_plan_ref_t *in, brd_ir_ref_t *out) {
  if (in->index > 0xffffu) {
    WARN("plan builder: reference index %u does not fit the IR", in->index);
    return ncclInternalError;
  }
  out->buf = in->buf;
  out->index = (uint16_t)in->index;
  if (in->peer == BRD_PLAN_PEER_SWITCH) return brd_plan_chan_switch(b, rank, &out->chan);
  if (in->peer < 0) {
    out->chan = BRD_IR_CHAN_LOCAL;
    return ncclSuccess;
  }
  return brd_plan_chan_get(b, rank, in->peer, &out->chan);
}

/* One IR op from m's header and the given source and destination lists. */
static ncclResult_t emit_one(brd_plan_builder_t *b, int rank, int block,
                             const brd_plan_move_t *m, uint8_t flags,
                             const brd_plan_ref_t *const *src, int nsrc,
                             const brd_plan_ref_t *dst, int ndst) {
  brd_ir_op_t op;
  memset(&op, 0, sizeof(op));
  if (m->chunk > 0xffffu || m->nchunks > 0xffffu) {
    WARN("plan builder: chunk %u (+%u) does not fit the IR", m->chunk,
         m->nchunks);
    return ncclInternalError;
  }
  op.code = m->code;
  op.flags = flags;
  op.nsrc = (uint8_t)nsrc;
  op.ndst = (uint8_t)ndst;
  op.chunk = (uint16_t)m->chunk;
  op.nchunks = (uint16_t)(m->nchunks ? m->nchunks : 1);
  op.k = m->k;
  op.k_src = m->k_src;
  for (int i = 0; i < nsrc; i++) CHECK(ref_resolve(b, rank, src[i], &op.ref[i]));
  for (int i = 0; i < ndst; i++)
    CHECK(ref_resolve(b, rank, &dst[i], &op.ref[nsrc + i]));
  return brd_plan_op_add(b, rank, block, &op);
}

/* Sources src[0..nsrc) to every destination, in groups that fit. */
static ncclResult_t emit_fanout(brd_plan_builder_t *b, int rank, int block,
                                const brd_plan_move_t *m, uint8_t flags,
                                const brd_plan_ref_t *const *src, int nsrc) {
  int per = BRD_IR_MAX_REFS - nsrc;
  for (int d = 0; d < m->ndst; d += per) {
    int nd = m->ndst - d < per ? m->ndst - d : per;
    CHECK(emit_one(b, rank, block, m, flags, src, nsrc, m->dst + d, nd));
  }
  return ncclSuccess;
}

/* See plan.h. */
ncclResult_t brd_plan_op_move(brd_plan_builder_t *b, int rank, int block,
                              const brd_plan_move_t *m) {
  const brd_plan_ref_t *src[BRD_IR_MAX_REFS];
  if (m->nsrc < 1 || m->ndst < 1) {
    WARN("plan builder: data op %u with %d sources and %d destinations",
         m->code, m->nsrc, m->ndst);
    return ncclInternalError;
  }
  if (m->nsrc < BRD_IR_MAX_REFS) {
    for (int i = 0; i < m->nsrc; i++) src[i] = &m->src[i];
    return emit_fanout(b, rank, block, m, m->flags, src, m->nsrc);
  }

  /* Too many sources: accumulate groups into dst[0]. */
  const brd_plan_ref_t *acc = &m->dst[0];
  uint8_t acc_kind = acc->buf & BRD_IR_BUF_MASK;
  if (acc->peer >= 0 || (acc->buf & BRD_IR_REF_LL) ||
      (acc_kind != BRD_IR_BUF_OUTPUT && acc_kind != BRD_IR_BUF_SCRATCH)) {
    WARN("plan builder: %d sources need a local plain first destination to "
         "accumulate into", m->nsrc);
    return ncclInternalError;
  }
  uint8_t part_flags = (uint8_t)(m->flags & ~BRD_IR_F_POSTOP);
  int done = BRD_IR_MAX_REFS - 1;
  for (int i = 0; i < done; i++) src[i] = &m->src[i];
  CHECK(emit_one(b, rank, block, m, part_flags, src, done, acc, 1));
  while (done < m->nsrc) {
    int g = m->nsrc - done;
    if (g > BRD_IR_MAX_REFS - 2) g = BRD_IR_MAX_REFS - 2;
    src[0] = acc;
    for (int i = 0; i < g; i++) src[1 + i] = &m->src[done + i];
    done += g;
    if (done == m->nsrc && 1 + g + m->ndst <= BRD_IR_MAX_REFS)
      return emit_one(b, rank, block, m, m->flags, src, 1 + g, m->dst, m->ndst);
    CHECK(emit_one(b, rank, block, m, part_flags, src, 1 + g, acc, 1));
  }
  /* Every source is in acc: finish with a one-source pass to all dsts. */
  src[0] = acc;
  return emit_fanout(b, rank, block, m, m->flags, src, 1);
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* See plan.h. */
ncclResult_t brd_plan_builder_finish(const brd_plan_builder_t *b,
                                     brd_ir_plan_t **plan_out) {
  const brd_plan_shape_t *s = &b->shape;
  size_t nblk = (size_t)s->nranks * s->nblocks;
  size_t nchans = 0, nops = 0;
  for (int r = 0; r < s->nranks; r++) nchans += b->ranks[r].n;
  for (size_t i = 0; i < nblk; i++) nops += b->blocks[i].n;

  size_t rank_off = align64(sizeof(brd_ir_plan_t));
  size_t block_off = align64(rank_off + (size_t)s->nranks * sizeof(brd_ir_rank_t));
  size_t chan_off = align64(block_off + nblk * sizeof(brd_ir_block_t));
  size_t op_off = align64(chan_off + nchans * sizeof(brd_ir_chan_t));
  size_t total = op_off + nops * sizeof(brd_ir_op_t);
  if (total > UINT32_MAX) {
    WARN("plan of %zu ops does not fit a 32-bit blob", nops);
    return ncclInternalError;
  }
  char *blob = calloc(1, total);
  if (blob == NULL) {
    WARN("out of host memory allocating a %zu-byte plan", total);
    return ncclSystemError;
  }
  brd_ir_plan_t *p = (brd_ir_plan_t *)blob;
  p->magic = BRD_IR_MAGIC;
  p->version = BRD_IR_VERSION;
  p->proto = s->proto;
  p->algo = s->algo;
  p->coll = s->coll;
  p->flags = s->flags;
  p->root = s->root;
  p->total_bytes = (uint32_t)total;
  p->nranks = (uint16_t)s->nranks;
  p->nblocks = (uint16_t)s->nblocks;
  p->nchunks = s->nchunks;
  p->nslots = s->nslots;
  p->slot_div = s->slot_div;
  p->nsems = s->nsems;
  p->seq_per_iter = s->seq_per_iter;
  p->nchans = (uint32_t)nchans;
  p->nops = (uint32_t)nops;
  p->rank_off = (uint32_t)rank_off;
  p->block_off = (uint32_t)block_off;
  p->chan_off = (uint32_t)chan_off;
  p->op_off = (uint32_t)op_off;

  brd_ir_rank_t *ranks = (brd_ir_rank_t *)(blob + rank_off);
  brd_ir_block_t *blocks = (brd_ir_block_t *)(blob + block_off);
  brd_ir_chan_t *chans = (brd_ir_chan_t *)(blob + chan_off);
  brd_ir_op_t *ops = (brd_ir_op_t *)(blob + op_off);
  uint32_t c = 0, o = 0;
  for (int r = 0; r < s->nranks; r++) {
    ranks[r].chan_first = c;
    ranks[r].nchans = b->ranks[r].n;
    for (uint32_t i = 0; i < b->ranks[r].n; i++) {
      chans[c].peer = b->ranks[r].peers[i];
      chans[c].type = chans[c].peer == BRD_IR_SWITCH_PEER ? BRD_IR_CHAN_SWITCH
                                                          : BRD_IR_CHAN_MEMORY;
      chans[c].group = chans[c].type == BRD_IR_CHAN_SWITCH ? b->ranks[r].sw_group : 0;
      c++;
    }
  }
  for (size_t i = 0; i < nblk; i++) {
    blocks[i].op_first = o;
    blocks[i].nops = b->blocks[i].n;
    if (b->blocks[i].n > 0)
      memcpy(&ops[o], b->blocks[i].ops, b->blocks[i].n * sizeof(brd_ir_op_t));
    o += b->blocks[i].n;
  }
  *plan_out = p;
  return ncclSuccess;
}

/* Scratch of a plan, in NCCL_BUFFSIZE (or NCCL_LL_BUFFSIZE) units: 16, 64 MiB
 * at the default 4 MiB (two phases of 8 blocks' slots). */
#define SCRATCH_SLOTS 16

/* See plan.h. */
size_t brd_plan_scratch_bytes(const brd_ir_plan_t *plan) {
  if (plan->nslots == 0) return 0;
  int64_t buff = plan->proto == BRD_IR_PROTO_LL
                     ? brd_param_int(BRD_P_LL_BUFFSIZE)
                     : brd_param_int(BRD_P_BUFFSIZE);
  int64_t slot = buff > 0 ? buff / (int64_t)plan->slot_div : 0;
  slot &= ~(int64_t)15;
  if (slot < 64) slot = 64;
  size_t phases = (plan->flags & BRD_IR_PLAN_F_ONE_PHASE) ? 1 : 2;
  /* At most SCRATCH_SLOTS buffers of the size in all: a plan of many
   * blocks gets smaller slots, not more memory. */
  size_t cap = (size_t)SCRATCH_SLOTS * (size_t)(buff > 64 ? buff : 64);
  size_t want = phases * (size_t)plan->nslots * (size_t)slot;
  if (want > cap) {
    slot = (int64_t)(cap / (phases * plan->nslots)) & ~(int64_t)15;
    if (slot < 64) slot = 64;
    want = phases * (size_t)plan->nslots * (size_t)slot;
  }
  return want;
}

/* See plan.h. */
int brd_plan_reads_peers(const brd_ir_plan_t *plan) {
  const brd_ir_op_t *ops = (const brd_ir_op_t *)((const char *)plan + plan->op_off);
  for (uint32_t i = 0; i < plan->nops; i++) {
    if (!brd_ir_op_is_data(ops[i].code)) continue;
    for (int s = 0; s < ops[i].nsrc; s++)
      if (ops[i].ref[s].chan != BRD_IR_CHAN_LOCAL) return 1;
  }
  return 0;
}

/* See plan.h. */
int brd_plan_chans_mark(brd_ir_plan_t *plan, const uint8_t *port) {
  int nport = 0;
  for (int r = 0; r < plan->nranks; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(plan, r);
    brd_ir_chan_t *chans = (brd_ir_chan_t *)((char *)plan + plan->chan_off) + rk->chan_first;
    for (uint32_t c = 0; c < rk->nchans; c++) {
      if (chans[c].type == BRD_IR_CHAN_SWITCH) continue; /* no port carries one */
      int is_port = port[(size_t)r * plan->nranks + (size_t)chans[c].peer] != 0;
      chans[c].type = is_port ? BRD_IR_CHAN_PORT : BRD_IR_CHAN_MEMORY;
      nport += is_port;
    }
  }
  return nport;
}
