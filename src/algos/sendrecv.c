/*
 * Point-to-point: the sends and receives one communicator collected in one
 * launch, as one plan. The scheme (pairing rule, slots, semaphores,
 * per-pair sequence numbers) is described in algos.h.
 *
 * Algorithm: one block per peer; piece t of the stream to a peer (the
 * chunks of the sends to it, in call order) goes into the sender's slot
 * t % SENDRECV_DEPTH of the peer's scratch, and piece t of the stream from the
 * peer is copied out of the peer's slot into the receive buffer it
 * belongs to. Sends to this rank are paired with receives from it and
 * copied directly.
 *
 * Memory ordering: Simple only. The sender signals the receiver's data
 * semaphore after each put (release) and the receiver waits (acquire);
 * the receiver signals a credit after each copy, and the sender waits for
 * the credit of piece t - SENDRECV_DEPTH before reusing its slot and for the
 * last credit before finishing. Scratch is one area (no phases): the last
 * credit proves the peer read everything, so the next launch may write the
 * same slots.
 *
 * Blocks: one per peer, so exchanges with different peers never wait on
 * each other; a block interleaves the two directions piece by piece.
 */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "algos/algos.h"

/* Per-rank view while generating: block of each peer, and the stream to
 * and from one peer as (segment, chunks) lists. */
typedef struct stream {
  int *seg;          /* owned: segment of each transfer to/from the peer */
  uint32_t *nchunks; /* owned: chunks of each */
  int n;
  uint32_t total;    /* pieces */
} stream_t;

static void stream_free(stream_t *s) {
  free(s->seg);
  free(s->nchunks);
  memset(s, 0, sizeof(*s));
}

/* The transfers of `ops` with `peer`, in call order. */
static ncclResult_t stream_make(const brd_algos_sendrecv_op_t *ops, int nops, int peer,
                                stream_t *s) {
  memset(s, 0, sizeof(*s));
  s->seg = calloc((size_t)nops + 1, sizeof(*s->seg));
  s->nchunks = calloc((size_t)nops + 1, sizeof(*s->nchunks));
  if (s->seg == NULL || s->nchunks == NULL) {
    stream_free(s);
    WARN("out of host memory generating a point-to-point plan of %d transfers",
         nops);
    return ncclSystemError;
  }
  for (int i = 0; i < nops; i++) {
    if (ops[i].peer != peer) continue;
    s->seg[s->n] = i;
    s->nchunks[s->n] = ops[i].nchunks;
    s->total += ops[i].nchunks;
    s->n++;
  }
  return ncclSuccess;
}

/* Segment and chunk of piece t of a stream (t < total). */
static void stream_piece(const stream_t *s, uint32_t t, int *seg_out,
                         uint32_t *chunk_out) {
  int i = 0;
  while (t >= s->nchunks[i]) t -= s->nchunks[i++];
  *seg_out = s->seg[i];
  *chunk_out = t;
}

typedef struct gen {
  brd_plan_builder_t *b;
  const brd_algos_sendrecv_args_t *a;
  uint32_t nchunks; /* of the plan: the longest transfer */
} gen_t;

static ncclResult_t self_block(const gen_t *g, int r, int blk) {
  const brd_algos_sendrecv_rank_t *me = &g->a->ranks[r];
  stream_t out, in;
  ncclResult_t res = ncclSuccess;
  CHECK(stream_make(me->send, me->nsend, r, &out));
  CHECK_GOTO(stream_make(me->recv, me->nrecv, r, &in), res, fail_free_out);
  if (out.n != in.n) {
    WARN("rank %d sends %d buffers to itself but receives %d from itself; "
         "every ncclSend to self needs a matching ncclRecv in the same group",
         r, out.n, in.n);
    res = ncclInvalidArgument;
    goto fail_free_in;
  }
  for (int i = 0; i < out.n; i++) {
    if (out.nchunks[i] != in.nchunks[i]) {
      WARN("rank %d: send %d to itself and its receive %d differ in size "
           "(%u and %u chunks); counts and datatypes must match", r,
           out.seg[i], in.seg[i], out.nchunks[i], in.nchunks[i]);
      res = ncclInvalidArgument;
      goto fail_free_in;
    }
    if (out.nchunks[i] == 0) continue;
    brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1,
                                      brd_algos_seg(g->nchunks, out.seg[i], 0));
    brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                      brd_algos_seg(g->nchunks, in.seg[i], 0));
    brd_plan_move_t m = {.code = BRD_IR_OP_COPY, .chunk = 0,
                         .nchunks = out.nchunks[i], .nsrc = 1, .src = &src,
                         .ndst = 1, .dst = &dst};
    CHECK_GOTO(brd_plan_op_move(g->b, r, blk, &m), res, fail_free_in);
  }
fail_free_in:
  stream_free(&in);
fail_free_out:
  stream_free(&out);
  return res;
}

/* One piece through the slots between r and peer: waits for wait_sem to
 * reach wait_val (no wait when wait_val is 0), moves chunk from src to
 * dst with code, then signals signal_sem to signal_val. */
static ncclResult_t slot_step(const gen_t *g, int r, int blk, int peer, uint32_t wait_sem,
                              int32_t wait_val, uint8_t code, uint32_t chunk,
                              brd_plan_ref_t src, brd_plan_ref_t dst, uint32_t signal_sem,
                              int32_t signal_val) {
  if (wait_val > 0)
    CHECK(brd_plan_op_sync(g->b, r, blk, BRD_IR_OP_WAIT, peer, wait_sem, wait_val));
  CHECK(brd_algos_move(g->b, r, blk, code, 0, chunk, 0, 0, 1, &src, 1, &dst));
  return brd_plan_op_sync(g->b, r, blk, BRD_IR_OP_SIGNAL, peer, signal_sem, signal_val);
}

static ncclResult_t peer_block(const gen_t *g, int r, int peer, int blk) {
  const brd_algos_sendrecv_rank_t *me = &g->a->ranks[r];
  const uint32_t D = BRD_ALGOS_SENDRECV_DEPTH, data_sem = 0, credit_sem = 1;
  stream_t out, in;
  ncclResult_t res = ncclSuccess;
  CHECK(stream_make(me->send, me->nsend, peer, &out));
  CHECK_GOTO(stream_make(me->recv, me->nrecv, peer, &in), res, fail_free_out);
  uint32_t len = out.total > in.total ? out.total : in.total;
  for (uint32_t t = 0; t < len; t++) {
    int seg;
    uint32_t chunk;
    if (t < out.total) {
      stream_piece(&out, t, &seg, &chunk);
      uint32_t at = brd_algos_seg(g->nchunks, seg, chunk);
      CHECK_GOTO(slot_step(g, r, blk, peer, credit_sem, t >= D ? (int32_t)(t - D + 1) : 0,
                           BRD_IR_OP_PUT, chunk, brd_plan_ref(BRD_IR_BUF_INPUT, -1, at),
                           brd_plan_ref(BRD_IR_BUF_SCRATCH, peer, (uint32_t)r * D + t % D),
                           data_sem, (int32_t)(t + 1)),
                 res, fail_free_in);
    }
    if (t < in.total) {
      stream_piece(&in, t, &seg, &chunk);
      uint32_t at = brd_algos_seg(g->nchunks, seg, chunk);
      CHECK_GOTO(slot_step(g, r, blk, peer, data_sem, (int32_t)(t + 1), BRD_IR_OP_COPY, chunk,
                           brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (uint32_t)peer * D + t % D),
                           brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, at),
                           credit_sem, (int32_t)(t + 1)),
                 res, fail_free_in);
    }
  }
  if (out.total > 0)
    CHECK_GOTO(brd_plan_op_sync(g->b, r, blk, BRD_IR_OP_WAIT, peer, credit_sem,
                                (int32_t)out.total),
               res, fail_free_in);
fail_free_in:
  stream_free(&in);
fail_free_out:
  stream_free(&out);
  return res;
}

/* Pieces between r and p, each way, from r's lists. */
static void pair_pieces(const brd_algos_sendrecv_rank_t *me, int p, uint32_t *to_out,
                        uint32_t *from_out) {
  uint32_t to = 0, from = 0;
  for (int i = 0; i < me->nsend; i++)
    if (me->send[i].peer == p) to += me->send[i].nchunks;
  for (int j = 0; j < me->nrecv; j++)
    if (me->recv[j].peer == p) from += me->recv[j].nchunks;
  *to_out = to;
  *from_out = from;
}

/* Marks in `peers` (nranks entries) the ranks r exchanges with. */
static int rank_peers(const brd_algos_sendrecv_rank_t *me, char *peers, int nranks) {
  int n = 0;
  memset(peers, 0, (size_t)nranks);
  for (int i = 0; i < me->nsend; i++) peers[me->send[i].peer] = 1;
  for (int j = 0; j < me->nrecv; j++) peers[me->recv[j].peer] = 1;
  for (int q = 0; q < nranks; q++) n += peers[q];
  return n;
}

/* Checks the lists of the ranks generated and sizes the plan. */
static ncclResult_t sendrecv_shape(const brd_algos_sendrecv_args_t *a, char *peers,
                              brd_plan_shape_t *shape) {
  int lo = a->rank < 0 ? 0 : a->rank, hi = a->rank < 0 ? a->nranks : a->rank + 1;
  uint32_t nchunks = 1, seq = 1;
  int nblocks = 1;
  for (int r = lo; r < hi; r++) {
    const brd_algos_sendrecv_rank_t *me = &a->ranks[r];
    for (int k = 0; k < me->nsend + me->nrecv; k++) {
      const brd_algos_sendrecv_op_t *op = k < me->nsend ? &me->send[k] : &me->recv[k - me->nsend];
      if (op->peer < 0 || op->peer >= a->nranks) {
        WARN("point-to-point plan: rank %d names peer %d of %d ranks", r,
             op->peer, a->nranks);
        return ncclInvalidArgument;
      }
      if (op->nchunks > nchunks) nchunks = op->nchunks;
    }
    int np = rank_peers(me, peers, a->nranks);
    if (np > nblocks) nblocks = np;
    for (int p = 0; p < a->nranks; p++) {
      uint32_t to, from;
      if (!peers[p]) continue;
      pair_pieces(me, p, &to, &from);
      if (to > seq) seq = to;
      if (from > seq) seq = from;
      if (a->rank >= 0 || p == r) continue;
      /* Every rank's lists are known: the pair must agree. */
      uint32_t pto, pfrom;
      pair_pieces(&a->ranks[p], r, &pto, &pfrom);
      if (to != pfrom) {
        WARN("point-to-point plan: rank %d sends %u chunks to rank %d, which "
             "receives %u from it", r, to, p, pfrom);
        return ncclInvalidArgument;
      }
    }
  }
  for (int r = lo; r < hi; r++) {
    const brd_algos_sendrecv_rank_t *me = &a->ranks[r];
    int nseg = me->nsend > me->nrecv ? me->nsend : me->nrecv;
    if ((uint64_t)nseg * nchunks > 65536 || seq > INT32_MAX) {
      WARN("point-to-point plan: rank %d has %d transfers of up to %u chunks, "
           "more than the IR's 16-bit indices hold", r, nseg, nchunks);
      return ncclInvalidArgument;
    }
  }
  if ((uint64_t)a->nranks * BRD_ALGOS_SENDRECV_DEPTH > 65535) {
    WARN("point-to-point plan: %d ranks need more than 65535 scratch slots",
         a->nranks);
    return ncclInvalidArgument;
  }
  memset(shape, 0, sizeof(*shape));
  shape->nranks = a->nranks;
  shape->nblocks = nblocks;
  shape->nchunks = nchunks;
  shape->nslots = (uint32_t)a->nranks * BRD_ALGOS_SENDRECV_DEPTH;
  shape->slot_div = BRD_ALGOS_SENDRECV_SLOT_DIV;
  shape->nsems = 2;
  shape->seq_per_iter = seq;
  shape->proto = BRD_IR_PROTO_SIMPLE;
  shape->algo = BRD_IR_ALGO_ONESHOT;
  shape->coll = BRD_IR_COLL_SENDRECV;
  shape->flags = BRD_IR_PLAN_F_FIXED | BRD_IR_PLAN_F_ONE_PHASE;
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_sendrecv(const brd_algos_sendrecv_args_t *args,
                                brd_ir_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_plan_shape_t shape;
  gen_t g = {NULL, args, 0};
  if (args->nranks < 1 || args->nranks > 65535 || args->rank < -1 ||
      args->rank >= args->nranks) {
    WARN("point-to-point plan: rank %d of %d ranks is out of range", args->rank,
         args->nranks);
    return ncclInvalidArgument;
  }
  char *peers = malloc((size_t)args->nranks);
  if (peers == NULL) {
    WARN("out of host memory generating a point-to-point plan for %d ranks",
         args->nranks);
    return ncclSystemError;
  }
  CHECK_GOTO(sendrecv_shape(args, peers, &shape), res, fail_free_peers);
  g.nchunks = shape.nchunks;
  CHECK_GOTO(brd_plan_builder_create(&shape, &g.b), res, fail_free_peers);
  int lo = args->rank < 0 ? 0 : args->rank;
  int hi = args->rank < 0 ? args->nranks : args->rank + 1;
  for (int r = lo; r < hi; r++) {
    rank_peers(&args->ranks[r], peers, args->nranks);
    int blk = 0;
    for (int p = 0; p < args->nranks; p++) {
      if (!peers[p]) continue;
      if (p == r) CHECK_GOTO(self_block(&g, r, blk), res, fail_destroy_builder);
      else CHECK_GOTO(peer_block(&g, r, p, blk), res, fail_destroy_builder);
      blk++;
    }
  }
  res = brd_plan_builder_finish(g.b, plan_out);
fail_destroy_builder:
  brd_plan_builder_destroy(g.b);
fail_free_peers:
  free(peers);
  return res;
}
