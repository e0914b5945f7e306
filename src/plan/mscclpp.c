/*
 * MSCCL++ execution plans translated to Braid plans; see mscclpp.h.
 *
 * The document (MSCCL++'s executor defines it): top-level name,
 * collective, protocol ("Simple" or "LL"), inplace, min_message_size,
 * max_message_size and gpus[]. Each gpu has id, input_chunks,
 * output_chunks, scratch_chunks, channels[] (memory and port entries list
 * one peer per channel in connected_to; a switch entry names the buffer
 * it multicasts), remote_buffers[] ({rank, type}) and threadblocks[]. A
 * thread block lists the GPU channels it uses per type (its channel ids
 * index that list) and the remote buffers it reaches per channel type (an
 * op's buffer_id indexes that list); its ops run in order.
 *
 * Sizes are chunks: buffer refs are {type | buffer_id | switch_channel_id,
 * index, size}, in units of one chunk (a rank's input bytes divided by
 * input_chunks), the same unit for the output and scratch. Braid's
 * segments (the whole buffer of an all-reduce, a rank's block of an
 * all-gather's output, of a reduce-scatter's input, of an all-to-all's
 * buffers) hold whole chunks, so Braid's nchunks is the chunks of one
 * block and an index is an index (segment x nchunks + chunk); a data op's
 * input/output refs must name the same chunk of their blocks (Braid moves
 * chunk c to chunk c), every ref the same number of chunks, and an op
 * that crosses blocks becomes one op per block. In place, MSCCL++'s DSL
 * names one buffer per rank (an all-gather's input is the rank's block of
 * its output, a reduce-scatter's output the rank's block of its input);
 * brd_mscclpp_ref_resolve says which Braid buffer a chunk of it is.
 *
 * Pipelines (mscclpp_int.h) are unrolled: their inner ops run a fixed
 * number of times, each time on the next share of their chunks; an op of
 * a thread-block group (tbg_info) moves its thread block's share. Braid's
 * chunks are MSCCL++'s cut into R so that shares are whole chunks.
 *
 * Semaphores: the m-th memory channel from rank r to peer p pairs with the
 * m-th from p to r (MSCCL++ connects channels to one peer in order); it
 * becomes semaphore m of Braid's channel r -> p (port channels follow the
 * memory ones). The k-th signal on a channel stores k, the k-th wait waits
 * for k. LL packets all carry flag 1 of the iteration (MSCCL++ uses one
 * flag per launch). Device semaphores (sem_acquire/sem_release, shared by
 * a GPU's thread blocks) become barriers of the rank: mscclpp_sem.c.
 *
 * Translation runs three times over the document: a dry pass counts
 * sequence numbers, semaphores and (in place) writes and checks
 * everything, a second checks reads against those writes, then the
 * builder pass.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/mscclpp.h"
#include "plan/mscclpp_int.h"

static const struct {
  const char *name;
  int kind;
  const char *why; /* K_REFUSE */
} op_table[] = {
    {"nop", K_NOP, NULL},
    {"barrier", K_BARRIER, NULL},
    {"signal", K_SIGNAL, NULL},
    {"rlxsignal", K_SIGNAL, NULL},
    {"wait", K_WAIT, NULL},
    {"rlxwait", K_WAIT, NULL},
    {"put", K_PLAIN, NULL},
    {"get", K_PLAIN, NULL},
    {"copy", K_PLAIN, NULL},
    {"re", K_PLAIN, NULL},
    {"res", K_PLAIN, NULL},
    {"rre", K_PLAIN, NULL},
    {"rres", K_PLAIN, NULL},
    {"pws", K_PLAIN_SIGNAL, NULL},
    {"pwsf", K_PLAIN_SIGNAL, NULL},
    {"ppkt", K_PACKET, NULL},
    {"cpkt", K_PACKET, NULL},
    {"rppkt", K_PACKET, NULL},
    {"upkt", K_PACKET, NULL},
    {"repkt", K_PACKET, NULL},
    {"respkt", K_PACKET, NULL},
    {"recpkt", K_PACKET, NULL},
    {"recspkt", K_PACKET, NULL},
    {"glres", K_SWITCH_REDUCE, NULL},
    {"gstore", K_SWITCH_STORE, NULL},
    {"flush", K_FLUSH, NULL},
    {"pipeline", K_PIPELINE, NULL},
    {"sem_acquire", K_SEM_ACQUIRE, NULL},
    {"sem_release", K_SEM_RELEASE, NULL},
    {"gstorepkt", K_REFUSE,
     "a switch-channel store of LL packets: Braid's switch ops move plain data only (MC_STORE "
     "takes no LL refs, switch plans run the Simple protocol), so no op writes the packets' "
     "flags that the readers wait for"},
};

/* signal or wait on each of the op's channels. */
static ncclResult_t sync_op(mctx_t *c, const mtb_t *t, const brd_json_t *op, int type,
                            uint8_t code) {
  const brd_json_t *ids;
  CHECK(brd_mscclpp_get_arr(c, op, "channel_ids", &ids));
  if (ids->n == 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "field \"channel_ids\" is empty");
  for (size_t i = 0; i < ids->n; i++) {
    if (ids->kids[i].type != BRD_JSON_INT)
      return brd_mscclpp_fail(c, ncclInvalidArgument, "channel_ids[%zu] is not an integer", i);
    int gc;
    CHECK(brd_mscclpp_tb_chan(c, t, type, ids->kids[i].i, &gc));
    mchan_t *ch = &c->g[c->gpu].ch[type][gc];
    int32_t k = code == BRD_IR_OP_SIGNAL ? ++ch->nsig : ++ch->nwait;
    int sem = ch->sem + (type == MC_PORT ? c->mem_max : 0);
    if (k > c->kmax) c->kmax = k;
    if (sem > c->sem_max) c->sem_max = sem;
    if (c->b != NULL) {
      ncclResult_t res = brd_plan_op_sync(c->b, c->gpu, c->blk, code, ch->peer, (uint32_t)sem, k);
      if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
    }
  }
  return ncclSuccess;
}

/* One piece of a data op: its chunks [done, done + len), every ref
 * advanced by `done`, in-place refs resolved (brd_mscclpp_ref_resolve), as one IR op
 * (switch ops) or a builder move at op chunk `chunk`. Runs in every pass,
 * so that the resolution refuses early; adds to the plan in the build pass
 * only. */
static ncclResult_t emit_piece(mctx_t *c, const brd_plan_move_t *m, const mref_t *s,
                               const mref_t *d, uint32_t done, uint32_t len, uint32_t chunk,
                               int sw) {
  brd_plan_ref_t sr[MAX_REFS], dr[MAX_REFS];
  for (int i = 0; i < m->nsrc + m->ndst; i++) {
    int dst = i >= m->nsrc;
    int j = dst ? i - m->nsrc : i;
    const mref_t *x = dst ? &d[j] : &s[j];
    brd_plan_ref_t *o = dst ? &dr[j] : &sr[j];
    *o = x->ref;
    o->index += done;
    if (x->one)
      CHECK(brd_mscclpp_ref_resolve(c, dst ? "dst_buff" : "src_buff", (size_t)j, dst, x->ref.peer,
                                    x->ref.index + done, o));
  }
  if (c->b == NULL) return ncclSuccess;
  /* In place, a copy between MSCCL++'s two names of one chunk (an
   * all-gather's input and the rank's block of its output) is nothing. */
  if (m->code == BRD_IR_OP_COPY && m->nsrc == 1 && m->ndst == 1 && sr[0].buf == dr[0].buf &&
      sr[0].peer == dr[0].peer && sr[0].index == dr[0].index)
    return ncclSuccess;
  brd_plan_move_t p = *m;
  p.chunk = chunk;
  p.nchunks = len;
  p.src = sr;
  p.dst = dr;
  ncclResult_t res;
  if (!sw) {
    res = brd_plan_op_move(c->b, c->gpu, c->blk, &p);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
    return ncclSuccess;
  }
  /* Switch ops go in as single IR ops (the builder's move splits data ops
   * only). */
  if (p.nsrc + p.ndst > BRD_IR_MAX_REFS)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "more than %d refs on a switch op",
                            BRD_IR_MAX_REFS);
  brd_ir_op_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.code = p.code;
  ir.flags = p.flags;
  ir.nsrc = (uint8_t)p.nsrc;
  ir.ndst = (uint8_t)p.ndst;
  ir.chunk = (uint16_t)p.chunk;
  ir.nchunks = (uint16_t)p.nchunks;
  for (int i = 0; i < p.nsrc + p.ndst; i++) {
    const brd_plan_ref_t *r = i < p.nsrc ? &sr[i] : &dr[i - p.nsrc];
    uint8_t ch = BRD_IR_CHAN_LOCAL;
    res = ncclSuccess;
    if (r->peer == BRD_PLAN_PEER_SWITCH)
      res = brd_plan_chan_switch(c->b, c->gpu, &ch);
    else if (r->peer >= 0)
      res = brd_plan_chan_get(c->b, c->gpu, r->peer, &ch);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
    ir.ref[i].buf = r->buf;
    ir.ref[i].chan = ch;
    ir.ref[i].index = (uint16_t)r->index;
  }
  res = brd_plan_op_add(c->b, c->gpu, c->blk, &ir);
  if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
  return ncclSuccess;
}

/* An LL packet op's refs: MSCCL++'s packet ops read their first source and
 * write their first destination as plain data (in the ops that have
 * one), every other ref as packets; Braid keeps packets in scratch and
 * plain data in the user's buffers. */
static ncclResult_t packet_refs_check(mctx_t *c, const mref_t *s, size_t nsrc, const mref_t *d,
                                      size_t ndst) {
  /* MSCCL++'s packet ops read their first source and write their first
   * destination as plain data whatever the buffer (in the ops that have
   * one), and every other ref as packets; Braid keeps packets in scratch
   * and plain data in the user's buffers. */
  static const char *const plain_src0[] = {"ppkt",  "cpkt",   "respkt",
                                           "repkt", "recpkt", "recspkt"};
  static const char *const plain_dst0[] = {"upkt", "respkt", "repkt", "recpkt", "recspkt"};
  int ps = 0, pd = 0;
  for (size_t i = 0; i < NELEM(plain_src0); i++) ps |= strcmp(c->opname, plain_src0[i]) == 0;
  for (size_t i = 0; i < NELEM(plain_dst0); i++) pd |= strcmp(c->opname, plain_dst0[i]) == 0;
  for (size_t i = 0; i < nsrc + ndst; i++) {
    int dst = i >= nsrc;
    size_t j = dst ? i - nsrc : i;
    const mref_t *x = dst ? &d[j] : &s[j];
    int plain = j == 0 && (dst ? pd : ps);
    if (plain && !x->io)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[0] is plain data in scratch; Braid's LL scratch holds packets only",
          dst ? "dst_buff" : "src_buff");
    if (!plain && x->io)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[%zu] holds packets in the user's buffer; Braid keeps packets in scratch",
          dst ? "dst_buff" : "src_buff", j);
  }
  return ncclSuccess;
}

/* The op a data op of kind becomes (m's code, counts, flags and packet
 * steps) from its refs' shape. */
static ncclResult_t move_code(mctx_t *c, int kind, const mref_t *s, size_t nsrc,
                              const mref_t *d, size_t ndst, int ll_src, int ll_dst,
                              int remote_src, int remote_dst, int local_dst, int out_dst,
                              brd_plan_move_t *mv) {
  brd_plan_move_t m;
  memset(&m, 0, sizeof(m));
  m.nsrc = (int)nsrc;
  m.ndst = (int)ndst;
  if (kind == K_PACKET) {
    m.k = 1;
    m.k_src = 1;
    if (ll_dst || ll_src) c->kmax = c->kmax > 1 ? c->kmax : 1;
    m.code = !ll_src && m.nsrc == 1 && !remote_src && ll_dst && !local_dst ? BRD_IR_OP_PKT_PUT
                                                                           : BRD_IR_OP_PKT_REDUCE;
    if (m.code == BRD_IR_OP_PKT_PUT)
      for (int i = 0; i < m.ndst; i++)
        m.code = (d[i].ref.buf & BRD_IR_REF_LL) ? m.code : BRD_IR_OP_PKT_REDUCE;
  } else if (kind == K_SWITCH_REDUCE) {
    if (m.nsrc != 1 || !s[0].sw)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "glres needs one source through the switch channel");
    m.code = BRD_IR_OP_MC_REDUCE;
  } else if (kind == K_SWITCH_STORE) {
    if (m.nsrc != 1 || s[0].sw)
      return brd_mscclpp_fail(c, ncclInvalidArgument, "gstore needs one local source");
    m.code = BRD_IR_OP_MC_STORE;
  } else if (m.nsrc == 1 && !remote_src && !remote_dst) {
    m.code = BRD_IR_OP_COPY;
  } else if (m.nsrc == 1 && !remote_src && !local_dst) {
    m.code = BRD_IR_OP_PUT;
  } else if (m.nsrc == 1 && remote_src && !remote_dst) {
    m.code = BRD_IR_OP_GET;
  } else {
    m.code = BRD_IR_OP_REDUCE;
  }
  /* A reduction written to an output is the finished value (for the
   * collectives translated): the post-op applies there; the verifier
   * refuses the plan if that is wrong. */
  if (m.nsrc >= 2 && out_dst) m.flags = BRD_IR_F_POSTOP;
  if (m.code == BRD_IR_OP_MC_REDUCE) m.flags = BRD_IR_F_POSTOP;
  *mv = m;
  return ncclSuccess;
}

/* In place: MSCCL++ reads and writes one buffer; Braid's executors may
 * give the output its own memory (host staging), so a read that may
 * follow another op's write of the chunk, or a read of a peer's buffer,
 * needs the input copied to the output first (c->prologue). Pass 0
 * counts the writes of each chunk, pass 1 checks the reads. */
static void inplace_note(mctx_t *c, const mref_t *s, size_t nsrc, const mref_t *d, size_t ndst,
                         int64_t size) {
  /* MSCCL++ reads and writes one buffer in place; Braid's executors may
   * give the output its own memory (host staging), so a read that may
   * follow another op's write of the chunk, or a read of a peer's
   * buffer, needs the input copied to the output first. */
  size_t nbr = (size_t)c->nb * (size_t)c->R;
  int self = 0;
  for (size_t i = 0; i < ndst; i++) self |= d[i].io && d[i].ref.peer == -1;
  for (size_t i = 0; i < ndst && c->pass == 0; i++) {
    if (!d[i].io) continue;
    int owner = d[i].ref.peer == -1 ? c->gpu : d[i].ref.peer;
    for (int64_t k = 0; k < size; k++)
      c->wcount[(size_t)owner * nbr + (size_t)(d[i].index + k)]++;
  }
  for (size_t i = 0; i < nsrc && c->pass == 1; i++) {
    if (!s[i].io) continue;
    if (s[i].ref.peer != -1) c->prologue = 1;
    for (int64_t k = 0; k < size; k++)
      if (c->wcount[(size_t)c->gpu * nbr + (size_t)(s[i].index + k)] > (uint32_t)self)
        c->prologue = 1;
  }
}

/* Before this block's first write into a peer's scratch in an iteration,
 * a WAIT for that peer's credit: it has read what the previous iteration
 * left there. The credit is the iteration's last sequence number
 * (credit_k == seq_per_iter), so the previous iteration's is k 0 (at
 * once in the first). */
static ncclResult_t scratch_credits(mctx_t *c, const mref_t *d, size_t ndst) {
  for (size_t i = 0; i < ndst; i++) {
    int p = d[i].ref.peer;
    if (p < 0 || (d[i].ref.buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SCRATCH) continue;
    c->wr[(size_t)c->gpu * c->n + p] = 1;
    uint8_t *w = &c->waited[((size_t)c->gpu * c->nb_out + c->blk) * c->n + p];
    if (c->b == NULL || *w) continue;
    *w = 1;
    ncclResult_t res =
        brd_plan_op_sync(c->b, c->gpu, c->blk, BRD_IR_OP_WAIT, p, (uint32_t)c->credit_sem, 0);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
  }
  return ncclSuccess;
}

/* A switch op on scratch only moves the chunk its first source slot holds
 * (the last write into it the passes saw), so that its element count is
 * that chunk's; 0 where none was seen. */
static int64_t slot_chunk(const mctx_t *c, const mref_t *s, size_t nsrc) {
  for (size_t i = 0; i < nsrc; i++) {
    int64_t slot = s[i].index;
    int owner = s[i].sw || s[i].ref.peer < 0 ? c->gpu : s[i].ref.peer;
    if (s[i].io || s[i].staged || slot < 0 || slot >= c->slot_cap) continue;
    int32_t ck = c->slot_ck[(size_t)owner * (size_t)c->slot_cap + (size_t)slot];
    return ck >= 0 ? ck : 0;
  }
  return 0;
}

/* Notes which chunk each scratch slot an op writes now holds (every
 * member's, through the switch channel): chunk + k in slot index + k. */
static void slot_chunk_note(mctx_t *c, const mref_t *d, size_t ndst, int64_t chunk,
                            int64_t size) {
  for (size_t i = 0; i < ndst; i++) {
    const mref_t *x = &d[i];
    if (x->io || x->staged || (x->ref.buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SCRATCH) continue;
    for (int q = 0; q < (x->sw ? c->n : 1); q++) {
      int owner = x->sw ? q : x->ref.peer < 0 ? c->gpu : x->ref.peer;
      for (int64_t k = 0; k < size && x->index + k < c->slot_cap; k++)
        c->slot_ck[(size_t)owner * (size_t)c->slot_cap + (size_t)(x->index + k)] =
            (int32_t)(chunk + k);
    }
  }
}

/* c->slot_ck, every slot unwritten (its staging slots included). */
static ncclResult_t slot_chunks_alloc(mctx_t *c) {
  c->slot_cap = (c->nslots + c->nchunks) * c->R;
  c->slot_ck = malloc((size_t)c->n * (size_t)c->slot_cap * sizeof(int32_t) + 1);
  if (c->slot_ck == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  for (size_t i = 0; i < (size_t)c->n * (size_t)c->slot_cap; i++) c->slot_ck[i] = -1;
  return ncclSuccess;
}

static ncclResult_t data_op(mctx_t *c, const mtb_t *t, const brd_json_t *op, int kind) {
  int ctype = -1;
  if (brd_json_get(op, "channel_type") != NULL)
    CHECK(brd_mscclpp_get_chan_type(c, op, "channel_type", &ctype));
  /* A thread-block group: tbg_size thread blocks each move a share of the
   * op's chunks, tb_id's share here (MSCCL++ splits the bytes of every
   * ref evenly; Braid's chunks are cut so that shares are whole chunks). */
  const brd_json_t *tbg = brd_json_get(op, "tbg_info");
  int64_t tbg_id = 0, tbg_size = 0;
  if (tbg != NULL) {
    if (c->pipe_n > 0)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "a thread-block group (tbg_info) inside a pipeline is not "
                              "translated");
    CHECK(brd_mscclpp_want(c, "tbg_info", tbg, BRD_JSON_OBJ));
    CHECK(brd_mscclpp_get_int(c, tbg, "tbg_size", 1, 0, 1, 65535, &tbg_size));
    CHECK(brd_mscclpp_get_int(c, tbg, "tb_id", 1, 0, 0, tbg_size - 1, &tbg_id));
  }
  if (kind == K_PACKET && c->pipe_n > 0)
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "a packet op inside a pipeline: MSCCL++'s executor runs packet ops on their "
        "whole chunks in every iteration, ignoring the pipeline's offsets; Braid does "
        "not translate that");
  const brd_json_t *srcs, *dsts;
  CHECK(brd_mscclpp_get_arr(c, op, "src_buff", &srcs));
  CHECK(brd_mscclpp_get_arr(c, op, "dst_buff", &dsts));
  if (srcs->n == 0 || dsts->n == 0 || srcs->n > MAX_REFS || dsts->n > MAX_REFS)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "%zu sources and %zu destinations (1 to %d each)", srcs->n, dsts->n,
                            MAX_REFS);
  mref_t s[MAX_REFS], d[MAX_REFS];
  int64_t size = -1;
  int ll_src = 0, ll_dst = 0, remote_src = 0, remote_dst = 0, local_dst = 0, out_dst = 0;
  for (int pass = 0; pass < 2; pass++) {
    const brd_json_t *list = pass ? dsts : srcs;
    mref_t *m = pass ? d : s;
    for (size_t i = 0; i < list->n; i++) {
      CHECK(brd_mscclpp_ref_read(c, t, ctype, &list->kids[i], pass, pass ? "dst_buff" : "src_buff",
                                 i, &m[i]));
      if (size < 0) size = m[i].size;
      if (m[i].size != size)
        return brd_mscclpp_fail(c, ncclInvalidArgument,
                                "%s[%zu] moves %" PRId64 " chunks, an earlier ref %" PRId64
                                "; Braid moves "
                                "the same chunks from every source to every destination",
                                pass ? "dst_buff" : "src_buff", i, m[i].size / c->R, size / c->R);
      int ll = (m[i].ref.buf & BRD_IR_REF_LL) != 0, rem = m[i].ref.peer != -1;
      if (pass) {
        ll_dst |= ll;
        remote_dst |= rem;
        local_dst |= !rem;
        out_dst |= m[i].io;
      } else {
        ll_src |= ll;
        remote_src |= rem;
        if (ll && rem)
          return brd_mscclpp_fail(
              c, ncclInvalidArgument,
              "src_buff[%zu] reads LL packets from a peer's scratch; Braid reads packets "
              "from local scratch only",
              i);
      }
    }
  }
  /* Input/output and staged refs: Braid moves chunk c of a buffer (or of
   * a block of one) only to chunk c of another. */
  int64_t chunk = -1;
  for (size_t i = 0; i < srcs->n + dsts->n; i++) {
    int dst = i >= srcs->n;
    size_t j = dst ? i - srcs->n : i;
    const mref_t *x = dst ? &d[j] : &s[j];
    if (!x->io && !x->staged) continue;
    if (chunk < 0) chunk = x->index;
    if (x->index % c->cr != chunk % c->cr)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[%zu] names chunk %" PRId64 " of its buffer, an earlier ref chunk %" PRId64
          "; Braid moves chunk c of a buffer (or of a rank's block of one, %" PRId64
          " chunks) only to chunk c of another",
          dst ? "dst_buff" : "src_buff", j, x->index / c->R, chunk / c->R, c->nchunks);
  }
  int sw = 0;
  for (size_t i = 0; i < srcs->n; i++) sw |= s[i].sw;
  for (size_t i = 0; i < dsts->n; i++) sw |= d[i].sw;
  if (sw != (kind == K_SWITCH_REDUCE || kind == K_SWITCH_STORE))
    return brd_mscclpp_fail(c, ncclInvalidArgument, "%s",
                            sw ? "a switch-channel ref on an op that is not a switch op"
                               : "a switch op without a switch-channel ref");
  if (chunk < 0) {
    if (!sw)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "moves scratch to scratch only; Braid sizes chunks by their place in the "
          "user's buffer, so an op must name an input or output chunk");
    chunk = slot_chunk(c, s, srcs->n);
  }
  if (kind == K_PACKET && !c->ll)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "an LL packet op in a plan of protocol Simple");
  if (kind == K_PACKET) CHECK(packet_refs_check(c, s, srcs->n, d, dsts->n));
  if (kind != K_PACKET && (ll_src || ll_dst))
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "a plain op on scratch, which holds LL packets in a plan of protocol LL");
  brd_plan_move_t m;
  CHECK(move_code(c, kind, s, srcs->n, d, dsts->n, ll_src, ll_dst, remote_src, remote_dst,
                  local_dst, out_dst, &m));
  /* Inside a pipeline this iteration moves its share of the chunks:
   * piece pipe_i of pipe_n, pipe_len Braid chunks each, as MSCCL++ moves
   * unit_size bytes from offset i x unit_size of every ref (a ref shorter
   * than the pipeline's chunks has nothing left in the last pieces). A
   * member of a thread-block group moves share tb_id of tbg_size. */
  int empty = 0;
  if (c->pipe_n > 0 || tbg != NULL) {
    int64_t len = tbg != NULL ? size / tbg_size : c->pipe_len;
    int64_t start = (tbg != NULL ? tbg_id : c->pipe_i) * len;
    int64_t end = start + len < size ? start + len : size;
    if (start >= end) {
      empty = 1;
    } else {
      for (size_t i = 0; i < srcs->n + dsts->n; i++) {
        mref_t *x = i < srcs->n ? &s[i] : &d[i - srcs->n];
        x->index += start;
        x->ref.index += (uint32_t)start;
      }
      chunk += start;
      size = end - start;
    }
  }
  if (c->inplace && c->pass < 2 && !empty) inplace_note(c, s, srcs->n, d, dsts->n, size);
  if (!empty) slot_chunk_note(c, d, dsts->n, chunk, size);
  if (sw) c->has_switch = 1;
  if (!sw && !empty) CHECK(scratch_credits(c, d, dsts->n));
  /* One op per block of the buffers it crosses (an op's input/output
   * refs lie in one segment each: device/ir.h). */
  for (uint32_t done = 0; done < (uint32_t)size && !empty;) {
    uint32_t ch = (uint32_t)((chunk + done) % c->cr), len = (uint32_t)size - done;
    if (len > c->cr - ch) len = c->cr - ch;
    CHECK(emit_piece(c, &m, s, d, done, len, ch, sw));
    done += len;
  }
  if (kind == K_PLAIN_SIGNAL) {
    if (ctype != MC_MEMORY && ctype != MC_PORT)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "a put with signal needs channel_type memory or port");
    CHECK(sync_op(c, t, op, ctype, BRD_IR_OP_SIGNAL));
  }
  return ncclSuccess;
}

static ncclResult_t pipeline_op(mctx_t *c, const mtb_t *t, const brd_json_t *op);

static ncclResult_t one_op(mctx_t *c, const mtb_t *t, const brd_json_t *op) {
  const char *name;
  c->opname = NULL;
  if (op->type != BRD_JSON_OBJ)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "is %s, expected an object",
                            brd_mscclpp_jtype_names[op->type]);
  CHECK(brd_mscclpp_get_str(c, op, "name", &name));
  c->opname = name;
  int kind = -1;
  const char *why = NULL;
  for (size_t i = 0; i < NELEM(op_table); i++)
    if (strcmp(name, op_table[i].name) == 0) {
      kind = op_table[i].kind;
      why = op_table[i].why;
    }
  if (kind < 0) return brd_mscclpp_fail(c, ncclInvalidArgument, "unknown op name");
  if (kind == K_REFUSE) return brd_mscclpp_fail(c, ncclInvalidArgument, "%s", why);
  switch (kind) {
  case K_PIPELINE: return pipeline_op(c, t, op);
  case K_FLUSH: {
    /* Completion of earlier puts at their source, so that it may be
     * written again. A memory channel's stores are complete when issued;
     * a port channel's PUT copies its source into the peer's mirror
     * before it ends (the proxy ships the mirror, records in order), so
     * the source is free already: nothing to do either way. */
    if (brd_json_get(op, "channel_type") != NULL) {
      int type;
      CHECK(brd_mscclpp_get_chan_type(c, op, "channel_type", &type));
      if (type == 2)
        return brd_mscclpp_fail(c, ncclInvalidArgument,
                                "a flush on a switch channel (MSCCL++ flushes port channels)");
    }
    return ncclSuccess;
  }
  case K_SEM_ACQUIRE:
  case K_SEM_RELEASE: return brd_mscclpp_sem_op(c, op, kind);
  case K_NOP:
    if (c->b != NULL) {
      brd_ir_op_t nop;
      memset(&nop, 0, sizeof(nop));
      nop.code = BRD_IR_OP_NOP;
      ncclResult_t res = brd_plan_op_add(c->b, c->gpu, c->blk, &nop);
      if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
    }
    return ncclSuccess;
  case K_BARRIER: {
    int64_t ntb;
    CHECK(brd_mscclpp_get_int(c, op, "num_threadblocks", 1, 0, 0, INT32_MAX, &ntb));
    if (c->nb_out != c->nblocks)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "a barrier in a plan of %d thread blocks folded onto %d Braid blocks",
                              c->nblocks, c->nb_out);
    if (ntb != c->nblocks || (size_t)c->nblocks != brd_json_get(c->g[c->gpu].js, "threadblocks")->n)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "a barrier of %" PRId64
                              " thread blocks; Braid's barrier spans all %d blocks "
                              "of a rank (and every GPU must have that many)",
                              ntb, c->nblocks);
    /* With device semaphores, barriers are ordered with theirs. */
    if (c->has_sem) return brd_mscclpp_sem_op(c, op, K_BARRIER);
    if (c->b != NULL) {
      ncclResult_t res = brd_plan_op_barrier(c->b, c->gpu, c->blk);
      if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the op");
    }
    return ncclSuccess;
  }
  case K_SIGNAL:
  case K_WAIT: {
    int type;
    CHECK(brd_mscclpp_get_chan_type(c, op, "channel_type", &type));
    if (type == 2)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "a signal or wait on a switch channel has no Braid op");
    return sync_op(c, t, op, type, kind == K_SIGNAL ? BRD_IR_OP_SIGNAL : BRD_IR_OP_WAIT);
  }
  default: return data_op(c, t, op, kind);
  }
}

/* A pipeline: its inner ops `pipe_n` times (brd_mscclpp_pipe_iters),
 * iteration i on piece i of every data op's chunks. Sync ops, nops and
 * barriers inside run every iteration, as in MSCCL++. */
static ncclResult_t pipeline_op(mctx_t *c, const mtb_t *t, const brd_json_t *op) {
  if (c->pipe_n > 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "a pipeline inside a pipeline");
  const brd_json_t *ctx = brd_json_get(op, "iter_context"), *ops;
  int64_t unit, nck;
  CHECK(brd_mscclpp_want(c, "iter_context", ctx, BRD_JSON_OBJ));
  CHECK(brd_mscclpp_get_int(c, ctx, "unit_size", 1, 0, 1, INT64_MAX, &unit));
  CHECK(brd_mscclpp_get_int(c, ctx, "num_chunks", 1, 0, 1, 65535, &nck));
  CHECK(brd_mscclpp_get_arr(c, op, "ops", &ops));
  int p = brd_mscclpp_pipe_iters(c, unit, nck);
  const char *name = c->opname;
  c->pipe_n = p;
  c->pipe_len = nck * c->R / p; /* exact: R is a multiple of p / gcd(p, nck) */
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < p && res == ncclSuccess; i++) {
    c->pipe_i = i;
    for (size_t j = 0; j < ops->n && res == ncclSuccess; j++) {
      c->inner = (int)j;
      res = one_op(c, t, &ops->kids[j]);
    }
  }
  c->pipe_n = 0;
  c->inner = -1;
  c->opname = name;
  return res;
}

/* Block 0 of rank r copies its input into the switch staging slots
 * (back = 0), or the staging slots into its output (back = 1). */
static ncclResult_t stage_copy(mctx_t *c, int r, int back) {
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, 0);
  brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (uint32_t)(c->sw_base * c->R));
  brd_plan_move_t m;
  memset(&m, 0, sizeof(m));
  m.code = BRD_IR_OP_COPY;
  m.nchunks = c->cr;
  m.nsrc = 1;
  m.src = back ? &slot : &in;
  m.ndst = 1;
  m.dst = back ? &out : &slot;
  return brd_plan_op_move(c->b, r, 0, &m);
}

static ncclResult_t run_pass(mctx_t *c) {
  for (int r = 0; r < c->n; r++)
    for (int t = 0; t < MC_NTYPES; t++)
      for (int i = 0; i < c->g[r].nch[t]; i++) c->g[r].ch[t][i].nsig = c->g[r].ch[t][i].nwait = 0;
  memset(c->waited, 0, (size_t)c->n * (size_t)c->nb_out * (size_t)c->n);
  for (int r = 0; r < c->n && c->b != NULL && c->prologue; r++) {
    /* The input to where it lies in the one buffer: the whole output
     * (all-reduce), the rank's block of the output (all-gather), the
     * output from the rank's block of the input (reduce-scatter). */
    uint32_t rs = (uint32_t)r * c->cr;
    brd_plan_ref_t in =
        brd_plan_ref(BRD_IR_BUF_INPUT, -1, c->coll == BRD_IR_COLL_REDUCESCATTER ? rs : 0);
    brd_plan_ref_t out =
        brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, c->coll == BRD_IR_COLL_ALLGATHER ? rs : 0);
    brd_plan_move_t m;
    memset(&m, 0, sizeof(m));
    m.code = BRD_IR_OP_COPY;
    m.nchunks = c->cr;
    m.nsrc = 1;
    m.src = &in;
    m.ndst = 1;
    m.dst = &out;
    ncclResult_t res = brd_plan_op_move(c->b, r, 0, &m);
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res != ncclSuccess)
      return brd_mscclpp_fail(c, res, "the plan builder refuses the input copy");
  }
  for (int r = 0; r < c->n && c->b != NULL && c->sw_stage; r++) {
    ncclResult_t res = stage_copy(c, r, 0);
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res != ncclSuccess)
      return brd_mscclpp_fail(c, res, "the plan builder refuses the staging copy");
  }
  for (int r = 0; r < c->n; r++) {
    const brd_json_t *tbs = brd_json_get(c->g[r].js, "threadblocks");
    c->gpu = r;
    for (size_t b = 0; b < tbs->n; b++) {
      const brd_json_t *tb = &tbs->kids[b], *ops;
      mtb_t t;
      c->tb = (int)b;
      c->blk = (int)((int64_t)b * c->nb_out / c->nblocks);
      c->op = -1;
      if (tb->type != BRD_JSON_OBJ)
        return brd_mscclpp_fail(c, ncclInvalidArgument, "is %s, expected an object",
                                brd_mscclpp_jtype_names[tb->type]);
      int64_t id;
      CHECK(brd_mscclpp_get_int(c, tb, "id", 1, 0, 0, INT32_MAX, &id));
      if (id != (int64_t)b)
        return brd_mscclpp_fail(c, ncclInvalidArgument, "field \"id\" is %" PRId64 ", expected %zu",
                                id, b);
      CHECK(brd_mscclpp_tb_read(c, tb, &t));
      CHECK(brd_mscclpp_get_arr(c, tb, "ops", &ops));
      CHECK(brd_mscclpp_sem_head(c));
      for (size_t i = 0; i < ops->n; i++) {
        c->op = (int)i;
        CHECK(one_op(c, &t, &ops->kids[i]));
      }
    }
    c->tb = c->op = c->inner = -1;
    CHECK(brd_mscclpp_sem_tail(c, r));
  }
  c->gpu = c->tb = c->op = c->inner = -1;
  if (c->b == NULL) return ncclSuccess;
  /* The staged buffer back to the output, once every block is done (the
   * plan's own synchronisation orders the other ranks' multicast writes
   * before its end). */
  for (int r = 0; r < c->n && c->sw_stage; r++) {
    ncclResult_t res = ncclSuccess;
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res == ncclSuccess) res = stage_copy(c, r, 1);
    if (res != ncclSuccess)
      return brd_mscclpp_fail(c, res, "the plan builder refuses the staging copy");
  }
  /* Slot-reuse credits: Braid runs the plan once per window of the
   * buffers, MSCCL++ once per launch, so a rank whose scratch peers write
   * tells them, once all its blocks are past their reads, that the next
   * window may write again. */
  for (int p = 0; p < c->n; p++) {
    int readers = 0;
    for (int r = 0; r < c->n; r++) readers |= c->wr[(size_t)r * c->n + p];
    if (!readers) continue;
    ncclResult_t res = ncclSuccess;
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, p, b);
    for (int r = 0; r < c->n && res == ncclSuccess; r++)
      if (c->wr[(size_t)r * c->n + p])
        res =
            brd_plan_op_sync(c->b, p, 0, BRD_IR_OP_SIGNAL, r, (uint32_t)c->credit_sem, c->credit_k);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the credits");
  }
  return ncclSuccess;
}

/* The document's kind: collective, protocol, inplace and reuse_resources
 * into c; fails (brd_mscclpp_fail) on one Braid does not translate. */
static ncclResult_t read_kind(mctx_t *c, const brd_json_t *root) {
  static const struct {
    const char *name;
    int coll;
  } colls[] = {{"allreduce", BRD_IR_COLL_ALLREDUCE},
               {"allgather", BRD_IR_COLL_ALLGATHER},
               {"reducescatter", BRD_IR_COLL_REDUCESCATTER},
               {"alltoall", BRD_IR_COLL_ALLTOALL}};
  const char *coll, *proto;
  CHECK(brd_mscclpp_get_str(c, root, "collective", &coll));
  c->coll = -1;
  for (size_t i = 0; i < NELEM(colls); i++)
    if (strcmp(coll, colls[i].name) == 0) c->coll = colls[i].coll;
  if (c->coll < 0)
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "collective \"%s\": only \"allreduce\", \"allgather\", \"reducescatter\" "
        "and \"alltoall\" plans are translated%s",
        coll, strcmp(coll, "broadcast") == 0 ? " (the format names no broadcast root)" : "");
  CHECK(brd_mscclpp_get_str(c, root, "protocol", &proto));
  if (strcmp(proto, "LL") == 0)
    c->ll = 1;
  else if (strcmp(proto, "Simple") != 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "protocol \"%s\": only \"Simple\" and \"LL\" are translated", proto);
  const brd_json_t *ip = brd_json_get(root, "inplace");
  CHECK(brd_mscclpp_want(c, "inplace", ip, BRD_JSON_BOOL));
  c->inplace = (int)ip->i;
  if (c->inplace && c->coll == BRD_IR_COLL_ALLTOALL)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "an in-place all-to-all: Braid's all-to-all has no in-place layout");
  /* reuse_resources folds scratch offsets onto a fixed scratch size,
   * which only pipelines use (their iterations share the space); Braid
   * gives each iteration slots of its own, so such plans translate where
   * every scratch ref is in a pipeline (brd_mscclpp_ref_read). */
  const brd_json_t *reuse = brd_json_get(root, "reuse_resources");
  c->reuse = reuse != NULL && reuse->type == BRD_JSON_BOOL && reuse->i;
  return ncclSuccess;
}

/* The plan's meta (message-size range, in place or not) into *meta_out
 * and the ranks (the gpus array) into c->n and *gpus_out; c->coll and
 * c->inplace are read. Writes *meta_out only on success. */
static ncclResult_t read_range(mctx_t *c, const brd_json_t *root, const brd_json_t **gpus_out,
                               brd_plan_json_meta_t *meta_out) {
  brd_plan_json_meta_t meta;
  const brd_json_t *gpus;
  int64_t v;
  memset(&meta, 0, sizeof(meta));
  CHECK(brd_mscclpp_get_int(c, root, "min_message_size", 0, 0, 0, INT64_MAX, &v));
  meta.min_bytes = (uint64_t)v;
  const brd_json_t *mx = brd_json_get(root, "max_message_size");
  /* The DSL writes 2^64-1 (beyond int64) for "no limit". */
  if (mx != NULL && mx->type == BRD_JSON_NUM) {
    meta.max_bytes = 0;
  } else {
    CHECK(brd_mscclpp_get_int(c, root, "max_message_size", 0, 0, 0, INT64_MAX, &v));
    meta.max_bytes = (uint64_t)v;
    if (meta.max_bytes != 0 && meta.max_bytes < meta.min_bytes)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "max_message_size is below min_message_size");
  }
  c->max_msg = meta.max_bytes;
  /* Plans of every collective but all-to-all declare in place or out of
   * place (the library's rule: an all-to-all plan holds both ways). */
  meta.inplace = c->coll == BRD_IR_COLL_ALLTOALL ? BRD_PLAN_JSON_INPLACE_ANY
                 : c->inplace                    ? BRD_PLAN_JSON_INPLACE_YES
                                                 : BRD_PLAN_JSON_INPLACE_NO;
  CHECK(brd_mscclpp_get_arr(c, root, "gpus", &gpus));
  if (gpus->n < 1 || gpus->n > 65535)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "%zu gpus (1 to 65535)", gpus->n);
  c->n = (int)gpus->n;
  if (c->coll == BRD_IR_COLL_ALLGATHER) {
    /* MSCCL++ sizes an all-gather by its output, Braid by each rank's
     * input: the range divided by the ranks, rounded inwards. */
    uint64_t min_raw = meta.min_bytes;
    meta.min_bytes = (meta.min_bytes + (uint64_t)c->n - 1) / (uint64_t)c->n;
    if (meta.max_bytes != 0) {
      meta.max_bytes /= (uint64_t)c->n;
      if (meta.max_bytes == 0 || meta.max_bytes < meta.min_bytes)
        return brd_mscclpp_fail(c, ncclInvalidArgument,
                                "min_message_size %" PRIu64 " to max_message_size %" PRIu64
                                " holds no "
                                "all-gather of %d ranks (whole bytes per rank)",
                                min_raw, c->max_msg, c->n);
    }
  }
  *gpus_out = gpus;
  *meta_out = meta;
  return ncclSuccess;
}

/* Every GPU of `gpus` into c->g (allocated here; the caller frees it with
 * brd_mscclpp_gpus_free, also on failure), and the sizes that follow:
 * thread blocks, chunks per segment, scratch slots. */
static ncclResult_t read_gpus(mctx_t *c, const brd_json_t *gpus) {
  c->g = calloc((size_t)c->n, sizeof(*c->g));
  if (c->g == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  for (int r = 0; r < c->n; r++) {
    c->g[r].js = &gpus->kids[r];
    c->gpu = r;
    if (c->g[r].js->type != BRD_JSON_OBJ)
      return brd_mscclpp_fail(c, ncclInvalidArgument, "is not an object");
    const brd_json_t *tbs;
    CHECK(brd_mscclpp_get_arr(c, c->g[r].js, "threadblocks", &tbs));
    if ((int)tbs->n > c->nblocks) c->nblocks = (int)tbs->n;
  }
  for (int r = 0; r < c->n; r++) CHECK(brd_mscclpp_gpu_read(c, r));
  /* Chunks per segment: MSCCL++ cuts every buffer into chunks of one
   * size (the input over input_chunks); Braid's segments (a rank's block
   * of an all-gather's output, ...) are whole ones. */
  c->in_chunks = c->g[0].in_chunks;
  int64_t out0 = c->g[0].out_chunks;
  c->nchunks = c->coll == BRD_IR_COLL_REDUCESCATTER ? out0
               : c->coll == BRD_IR_COLL_ALLTOALL    ? c->in_chunks / c->n
                                                    : c->in_chunks;
  c->nb = c->coll == BRD_IR_COLL_ALLREDUCE ? c->nchunks : c->nchunks * c->n;
  for (int r = 0; r < c->n; r++) {
    c->gpu = r;
    const mgpu_t *g = &c->g[r];
    int64_t want_in = c->coll == BRD_IR_COLL_ALLREDUCE || c->coll == BRD_IR_COLL_ALLGATHER
                          ? c->nchunks
                          : c->nchunks * c->n;
    int64_t want_out = c->coll == BRD_IR_COLL_ALLREDUCE || c->coll == BRD_IR_COLL_REDUCESCATTER
                           ? c->nchunks
                           : c->nchunks * c->n;
    if (c->nchunks < 1 || g->in_chunks != want_in || g->out_chunks != want_out) {
      static const char *const need[] = {
          [BRD_IR_COLL_ALLREDUCE] = "an all-reduce needs both equal",
          [BRD_IR_COLL_ALLGATHER] = "an all-gather needs output_chunks = ranks x input_chunks",
          [BRD_IR_COLL_REDUCESCATTER] =
              "a reduce-scatter needs input_chunks = ranks x output_chunks",
          [BRD_IR_COLL_ALLTOALL] = "an all-to-all needs both equal, a multiple of the ranks",
      };
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "input_chunks %" PRId64 " and output_chunks %" PRId64
                              "; %s, at least 1 and "
                              "the same on every GPU (%" PRId64 " and %" PRId64 " on gpu 0)",
                              g->in_chunks, g->out_chunks, need[c->coll], c->in_chunks, out0);
    }
    if (g->scratch_chunks > c->nslots) c->nslots = g->scratch_chunks;
  }
  c->gpu = -1;
  if (c->nblocks < 1) return brd_mscclpp_fail(c, ncclInvalidArgument, "no thread blocks");
  return ncclSuccess;
}

/* Braid's blocks (at most max_blocks when above 0) and chunk cut
 * (c->R, c->cr), and the passes' tables (c->wr, c->waited, c->slot_ck,
 * c->wcount; the caller frees them, also on failure). */
static ncclResult_t passes_init(mctx_t *c, int max_blocks) {
  c->nb_out = max_blocks > 0 && max_blocks < c->nblocks ? max_blocks : c->nblocks;
  c->wr = calloc((size_t)c->n * (size_t)c->n, 1);
  c->waited = calloc((size_t)c->n * (size_t)c->nblocks * (size_t)c->n, 1);
  if (c->wr == NULL || c->waited == NULL)
    return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  c->sw_base = c->nslots;
  c->R = brd_mscclpp_cut_scan(c);
  if ((int64_t)c->R * c->nchunks * (c->nb / c->nchunks) > 65535 ||
      (int64_t)c->R * (c->nslots + c->nchunks) > 65535)
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "its pipelines and thread-block groups cut each chunk into %d, more chunks or "
        "scratch slots than a Braid plan holds (65535)",
        c->R);
  c->cr = (uint32_t)(c->nchunks * c->R);
  CHECK(slot_chunks_alloc(c));
  c->wcount = calloc((size_t)c->n * (size_t)c->nb * (size_t)c->R, sizeof(uint32_t));
  if (c->wcount == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  /* An in-place all-gather's own block may be left as it is (the input
   * already is the answer there), but the executors may give the output
   * memory of its own and copy every block of it back, the rank's own
   * included: each rank copies its input there first, always. */
  if (c->inplace && c->coll == BRD_IR_COLL_ALLGATHER) c->prologue = 1;
  return ncclSuccess;
}

/* After the dry passes: the scratch slots (Braid's, staging included),
 * the slot-reuse credits' semaphore and sequence number, and the shape
 * of the Braid plan into *shape_out. */
static ncclResult_t build_shape(mctx_t *c, brd_plan_shape_t *shape_out) {
  if (c->sw_stage) c->nslots = c->sw_base + c->nchunks;
  c->nslots *= c->R;
  int credits = 0;
  for (size_t i = 0; i < (size_t)c->n * (size_t)c->n; i++) credits |= c->wr[i];
  if (credits) {
    c->credit_sem = ++c->sem_max;
    c->credit_k = ++c->kmax;
  }
  brd_plan_shape_t shape;
  memset(&shape, 0, sizeof(shape));
  shape.nranks = c->n;
  shape.nblocks = c->nb_out;
  shape.nchunks = c->cr;
  shape.nslots = (uint32_t)c->nslots;
  shape.slot_div = c->nslots > 0 ? (uint32_t)c->nslots : 1;
  shape.nsems = (uint32_t)c->sem_max + 1;
  shape.seq_per_iter = c->kmax > 0 ? (uint32_t)c->kmax : 1;
  shape.proto = c->ll ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE;
  shape.algo = c->has_switch ? BRD_IR_ALGO_NVLS : BRD_IR_ALGO_ONESHOT;
  shape.coll = (uint8_t)c->coll;
  if (c->has_switch && c->ll)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "switch-channel ops in a plan of protocol LL");
  *shape_out = shape;
  return ncclSuccess;
}

/* See mscclpp.h. */
ncclResult_t brd_plan_mscclpp_translate(const brd_json_t *root, const char *name, int max_blocks,
                                        brd_ir_plan_t **plan_out, brd_plan_json_meta_t *meta_out,
                                        char *err, size_t errlen) {
  mctx_t c;
  ncclResult_t res = ncclSuccess;
  brd_ir_plan_t *plan = NULL;
  brd_plan_json_meta_t meta;
  brd_plan_shape_t shape;
  const brd_json_t *gpus = NULL;
  memset(&c, 0, sizeof(c));
  c.name = name ? name : "(plan)";
  c.err = err;
  c.errlen = errlen;
  c.gpu = c.tb = c.op = c.inner = -1;
  c.R = 1;
  if (err && errlen) err[0] = '\0';
  if (root == NULL || root->type != BRD_JSON_OBJ)
    return brd_mscclpp_fail(&c, ncclInvalidArgument, "the document is not an object");
  CHECK(read_kind(&c, root));
  CHECK(read_range(&c, root, &gpus, &meta));
  CHECK_GOTO(read_gpus(&c, gpus), res, out);
  CHECK_GOTO(passes_init(&c, max_blocks), res, out);
  CHECK_GOTO(run_pass(&c), res, out);
  CHECK_GOTO(brd_mscclpp_sem_plan(&c), res, out);
  c.pass = 1;
  CHECK_GOTO(run_pass(&c), res, out);
  c.pass = 2;
  CHECK_GOTO(build_shape(&c, &shape), res, out);
  res = brd_plan_builder_create(&shape, &c.b);
  if (res != ncclSuccess) {
    brd_mscclpp_fail(&c, res,
                     "the plan builder refuses the shape (%d ranks, %d blocks, %" PRId64
                     " chunks, %" PRId64 " slots)",
                     c.n, c.nblocks, c.nchunks, c.nslots);
    goto out;
  }
  CHECK_GOTO(run_pass(&c), res, fail_destroy);
  res = brd_plan_builder_finish(c.b, &plan);
  if (res != ncclSuccess) {
    brd_mscclpp_fail(&c, res, "the plan builder cannot lay the plan out");
    goto fail_destroy;
  }
  *plan_out = plan;
  if (meta_out != NULL) *meta_out = meta;
fail_destroy:
  brd_plan_builder_destroy(c.b);
out:
  free(c.wcount);
  free(c.slot_ck);
  free(c.wr);
  free(c.waited);
  brd_mscclpp_sem_free(&c);
  brd_mscclpp_gpus_free(&c);
  return res;
}
