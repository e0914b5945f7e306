/*
 * Braid host executor: one CPU thread per plan block, reading the IR
 * literally. See exec_host.h for the interface and ir.h for the semantics.
 *
 * Data ops move each chunk in tiles of TILE_BYTES: LL sources are unpacked
 * (spinning on each packet's flag) into per-source tile buffers, the tile
 * is reduced (or passed through when it is a plain copy), then stored to
 * every destination, as packets where the destination is LL. Sources read
 * from the INPUT buffer get the reduction's pre-op, which therefore hits
 * each rank's contribution exactly once; ops flagged POSTOP apply the
 * post-op to their result.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/param.h"
#include "device/exec_host.h"
#include "base/time.h"

#define TILE_BYTES 4096
#define SPIN_BEFORE_YIELD 64
#define SLEEP_AFTER 256   /* polls before yielding turns into sleeping */
#define SLEEP_NS 20000
#define BELL_SLEEP_NS 1000000 /* its longest sleep when every channel rings it */

typedef struct blk_ctx {
  brd_exec_run_t *l;
  int block;
  int opi;           /* index of the op being run */
  uint64_t iter;
  uint32_t bar_seen; /* barriers this block has passed */
  /* args.xchg: each channel peer's output and the elements between its
   * segments, as the exchange resolved them for this block. */
  char *xout[BRD_IR_XCHG_MAX_CHANS];
  size_t xstride[BRD_IR_XCHG_MAX_CHANS];
} blk_ctx_t;

/* A wait in progress: spins, yields, then sleeps; gives up at its deadline. */
typedef struct spin {
  uint32_t n;
  double deadline;    /* 0 until the first yield */
  uint32_t bell_seen; /* the doorbell's seq before the caller last looked */
} spin_t;

/* Records the launch's first failure and tells the other blocks to leave. */
static void launch_fail(brd_exec_run_t *l, ncclResult_t res) {
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&l->result, &expected, (int)res);
  atomic_store(&l->stop, 1);
}

/* One step of a wait. ncclSuccess: keep waiting. ncclInProgress: the
 * deadline passed (the caller reports the hang). Anything else: leave with
 * that result (abort, or a sibling block failed). */
static ncclResult_t spin_step(blk_ctx_t *b, spin_t *s) {
  brd_exec_run_t *l = b->l;
  if (++s->n < SPIN_BEFORE_YIELD) return ncclSuccess;
  if (l->args.abort_flag != NULL && atomic_load(l->args.abort_flag)) {
    INFO(BRD_SUBSYS_COLL, "rank %d block %d: launch aborted at op %d",
         l->args.rank, b->block, b->opi);
    launch_fail(l, ncclSystemError);
    return ncclSystemError;
  }
  if (atomic_load(&l->stop)) {
    int res = atomic_load(&l->result);
    return res == ncclSuccess ? ncclSystemError : (ncclResult_t)res;
  }
  if (l->args.port_failed != NULL && __atomic_load_n(l->args.port_failed, __ATOMIC_ACQUIRE)) {
    /* The proxy WARNed with the peer and the cause. */
    launch_fail(l, ncclRemoteError);
    return ncclRemoteError;
  }
  /* Yield while the wait is young; once it has lasted, sleep a little so
   * that oversubscribed cores go to the threads that can progress. With
   * ports, sleep on the proxy's doorbell: woken as soon as something lands
   * (and for as long as a memory channel's nap when one may be what the
   * wait is for, since memory channels ring nothing). */
  brd_exec_bell_t *bell = l->args.port_bell;
  if (bell != NULL && s->n >= SLEEP_AFTER) {
    __atomic_fetch_add(&bell->sleepers, 1, __ATOMIC_SEQ_CST);
    brd_futex_wait(&bell->seq, s->bell_seen, l->bell_only ? BELL_SLEEP_NS : SLEEP_NS);
    __atomic_fetch_sub(&bell->sleepers, 1, __ATOMIC_SEQ_CST);
  } else if (s->n < SLEEP_AFTER) {
    sched_yield();
  } else {
    struct timespec nap = {0, SLEEP_NS};
    nanosleep(&nap, NULL);
  }
  if (bell != NULL) s->bell_seen = __atomic_load_n(&bell->seq, __ATOMIC_SEQ_CST);
  if ((s->n & 63) == 0) {
    double t = brd_time_now_s();
    if (s->deadline == 0) {
      s->deadline = t + l->timeout_s;
    } else if (t > s->deadline) {
      return ncclInProgress;
    } else if (l->args.stuck_ns != NULL) {
      /* A peer is known gone: a shorter limit (exec_host.h). */
      uint64_t stuck = __atomic_load_n(l->args.stuck_ns, __ATOMIC_RELAXED);
      if (stuck != 0 && t - (s->deadline - l->timeout_s) > (double)stuck * 1e-9)
        return ncclInProgress;
    }
  }
  return ncclSuccess;
}

/* Fills the hang report once per launch, WARNs it, stops the launch. */
static ncclResult_t report_hang(blk_ctx_t *b, int what, int peer, int index,
                                uint64_t expected, uint64_t seen) {
  brd_exec_run_t *l = b->l;
  int unclaimed = 0;
  if (atomic_compare_exchange_strong(&l->hang_claimed, &unclaimed, 1)) {
    brd_exec_hang_t *h = &l->hang;
    double limit = l->timeout_s; /* or the shorter one after a peer left */
    uint64_t stuck = l->args.stuck_ns != NULL ? __atomic_load_n(l->args.stuck_ns, __ATOMIC_RELAXED) : 0;
    if (stuck != 0 && (double)stuck * 1e-9 < limit) limit = (double)stuck * 1e-9;
    h->rank = l->args.rank;
    h->block = b->block;
    h->op = b->opi;
    h->iter = b->iter;
    h->what = what;
    h->peer = peer;
    h->index = index;
    h->expected = expected;
    h->seen = seen;
    h->epoch = l->view.epoch;
    h->phase = l->view.phase;
    if (what == BRD_EXEC_WAIT_SEM) {
      WARN("rank %d block %d op %d (iteration %llu): no progress for %.0f s "
           "waiting for semaphore %d from rank %d to reach %llu; it holds "
           "%llu. Rank %d stopped making progress: check that every rank "
           "called the same collective with the same count, datatype and op, "
           "or raise BRAID_TIMEOUT",
           h->rank, h->block, h->op, (unsigned long long)h->iter,
           limit, index, peer, (unsigned long long)expected,
           (unsigned long long)seen, peer);
    } else if (what == BRD_EXEC_WAIT_PACKET) {
      WARN("rank %d block %d op %d (iteration %llu): no progress for %.0f s "
           "waiting for LL packets in scratch slot %d with flag %llu; the "
           "slot holds flag %llu. A peer stopped making progress: check that "
           "every rank called the same collective with the same count, "
           "datatype and op, or raise BRAID_TIMEOUT",
           h->rank, h->block, h->op, (unsigned long long)h->iter,
           limit, index, (unsigned long long)expected,
           (unsigned long long)seen);
    } else if (what == BRD_EXEC_WAIT_XCHG) {
      WARN("rank %d block %d: no word for %.0f s from rank %d on where its "
           "output is (exchange slot of channel %d, tag %llu; it holds %llu). "
           "This rank's output buffer is registered (ncclCommRegister): when "
           "one rank passes registered buffers, every rank must (NCCL's "
           "rule). Check that rank %d registered its buffers and called the "
           "same collective, or raise BRAID_TIMEOUT",
           h->rank, h->block, limit, peer, index,
           (unsigned long long)expected, (unsigned long long)seen, peer);
    } else if (what == BRD_EXEC_WAIT_SWITCH) {
      WARN("rank %d block %d op %d (iteration %llu): no progress for %.0f s "
           "at switch barrier %d waiting for rank %d's word to reach %llu; it "
           "holds %llu. Rank %d stopped making progress: check that every rank "
           "called the same collective with the same count, datatype and op, "
           "or raise BRAID_TIMEOUT",
           h->rank, h->block, h->op, (unsigned long long)h->iter,
           l->timeout_s, index, peer, (unsigned long long)expected,
           (unsigned long long)seen, peer);
    } else {
      WARN("rank %d block %d op %d (iteration %llu): no progress for %.0f s "
           "at barrier %d: %llu of %llu blocks arrived. Raise BRAID_TIMEOUT "
           "if the machine is oversubscribed",
           h->rank, h->block, h->op, (unsigned long long)h->iter,
           limit, index, (unsigned long long)seen,
           (unsigned long long)expected);
    }
  }
  launch_fail(l, ncclRemoteError);
  return ncclRemoteError;
}

static ncclResult_t run_wait(blk_ctx_t *b, const brd_ir_op_t *op) {
  brd_exec_run_t *l = b->l;
  if (brd_ir_seq_rel(&l->view, b->iter, op->k) <= 0)
    return ncclSuccess; /* names a point before this launch */
  uint64_t target = brd_ir_sem_value(&l->view, op->ref[0].chan, b->iter, op->k);
  const brd_exec_chan_t *ch = &l->args.chans[op->ref[0].chan];
  _Atomic uint64_t *sem = &ch->sems[op->ref[0].index];
  spin_t s = {0};
  uint64_t v;
  while ((v = atomic_load_explicit(sem, memory_order_acquire)) < target) {
    ncclResult_t res = spin_step(b, &s);
    if (res == ncclInProgress) {
      int peer = brd_ir_plan_chan(l->args.plan, l->args.rank, op->ref[0].chan)->peer;
      return report_hang(b, BRD_EXEC_WAIT_SEM, peer, op->ref[0].index, target, v);
    }
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

/* The offset in port's window of [addr, addr + len), an address in its
 * mirror; ncclInternalError (WARN) when the range is outside it. */
static ncclResult_t port_off(const blk_ctx_t *b, unsigned chan, const brd_exec_port_t *port,
                             const void *addr, size_t len, size_t *off_out) {
  size_t off = (size_t)((const char *)addr - port->mirror);
  if ((const char *)addr < port->mirror || off + len > port->bytes) {
    WARN("rank %d block %d op %d: a write of %zu bytes through port channel %u falls "
         "outside the peer's window (%zu bytes)", b->l->args.rank, b->block, b->opi, len,
         chan, port->bytes);
    return ncclInternalError;
  }
  *off_out = off;
  return ncclSuccess;
}

/* A write through port channel `chan` of [addr, addr + len) onto the
 * port (ncclSuccess at once for a memory channel). */
static ncclResult_t port_put(blk_ctx_t *b, unsigned chan, const void *addr, size_t len,
                             int kind) {
  if (chan == BRD_IR_CHAN_LOCAL) return ncclSuccess;
  brd_exec_port_t *port = b->l->args.chans[chan].port;
  if (port == NULL) return ncclSuccess;
  size_t off = 0;
  CHECK(port_off(b, chan, port, addr, len, &off));
  return (ncclResult_t)port->put(port, off, len, kind);
}

/* Plain bytes through port channel `chan`: len bytes from src, to where
 * the peer's window has [addr, addr + len) (its mirror here is not
 * written). */
static ncclResult_t port_put_from(blk_ctx_t *b, unsigned chan, const void *addr, size_t len,
                                  const void *src) {
  brd_exec_port_t *port = b->l->args.chans[chan].port;
  size_t off = 0;
  CHECK(port_off(b, chan, port, addr, len, &off));
  return (ncclResult_t)port->put_from(port, off, len, src);
}

static ncclResult_t run_signal(blk_ctx_t *b, const brd_ir_op_t *op) {
  brd_exec_run_t *l = b->l;
  uint64_t value = brd_ir_sem_value(&l->view, op->ref[0].chan, b->iter, op->k);
  const brd_exec_chan_t *ch = &l->args.chans[op->ref[0].chan];
  _Atomic uint64_t *sem = &ch->peer_sems[op->ref[0].index];
  atomic_store_explicit(sem, value, memory_order_release);
  return port_put(b, op->ref[0].chan, (const void *)sem, sizeof(*sem), BRD_EXEC_PUT_SEM);
}

static ncclResult_t run_barrier(blk_ctx_t *b) {
  brd_exec_run_t *l = b->l;
  uint32_t nblocks = l->args.plan->nblocks;
  uint32_t want = b->bar_seen + 1;
  if (atomic_fetch_add_explicit(&l->bar_count, 1, memory_order_acq_rel) + 1 ==
      nblocks) {
    /* Last to arrive: reset the count before releasing the others, so a
     * block racing to the next barrier counts from zero. */
    atomic_store_explicit(&l->bar_count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->bar_gen, 1, memory_order_release);
    brd_exec_bell_ring(l->args.port_bell); /* blocks asleep on the doorbell */
  } else {
    spin_t s = {0};
    while (atomic_load_explicit(&l->bar_gen, memory_order_acquire) < want) {
      ncclResult_t res = spin_step(b, &s);
      if (res == ncclInProgress)
        return report_hang(b, BRD_EXEC_WAIT_BARRIER, -1, (int)b->bar_seen,
                           nblocks, atomic_load(&l->bar_count));
      if (res != ncclSuccess) return res;
    }
  }
  b->bar_seen = want;
  return ncclSuccess;
}

/* Start of segment `seg` of an input or output: this rank's own (ir_addr.h),
 * a peer's input, or a peer's output as the exchange resolved it or at
 * its channel pointer. */
static char *seg_base(const blk_ctx_t *b, const brd_ir_ref_t *ref, uint32_t seg) {
  const brd_exec_run_t *l = b->l;
  if (ref->chan == BRD_IR_CHAN_LOCAL) return brd_ir_local_seg(&l->view, ref, seg);
  const brd_exec_chan_t *ch = &l->args.chans[ref->chan];
  if ((ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT)
    return brd_ir_seg_at(&l->view, ch->peer_input, seg, l->view.in_stride);
  if (l->args.xchg)
    return brd_ir_seg_at(&l->view, b->xout[ref->chan], seg, b->xstride[ref->chan]);
  return brd_ir_seg_at(&l->view, ch->peer_output, seg, l->view.out_stride);
}

/* Address of the data of chunk index+t (input/output, within its segment)
 * or of slot index+t (scratch) named by ref. */
static char *ref_addr(const blk_ctx_t *b, const brd_ir_ref_t *ref,
                      uint32_t t) {
  const brd_exec_run_t *l = b->l;
  const brd_ir_view_t *v = &l->view;
  uint32_t index = ref->index + t;
  if ((ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH)
    return brd_ir_slot_addr(v, ref->chan == BRD_IR_CHAN_LOCAL
                                   ? (char *)l->args.scratch
                                   : (char *)l->args.chans[ref->chan].peer_scratch,
                            index);
  uint32_t seg = index / v->layout.nchunks;
  return brd_ir_chunk_addr(v, seg_base(b, ref, seg), brd_ir_seg_count(v, ref, seg),
                           b->iter, index % v->layout.nchunks);
}

/* Reads packets for data bytes [off, off + len) of a chunk of nbytes from
 * the LL slot at `slot` into out, spinning on each packet's flag. */
static ncclResult_t ll_read(blk_ctx_t *b, const char *slot, size_t off,
                            size_t len, size_t nbytes, uint32_t flag,
                            uint32_t slot_index, char *out) {
  _Atomic uint64_t *pkt = (_Atomic uint64_t *)(uintptr_t)slot;
  for (size_t p = off / 4; p * 4 < off + len; p++) {
    uint64_t v = atomic_load_explicit(&pkt[p], memory_order_acquire);
    if ((uint32_t)(v >> 32) != flag) {
      spin_t s = {0};
      while ((uint32_t)((v = atomic_load_explicit(&pkt[p],
                                                  memory_order_acquire)) >>
                        32) != flag) {
        ncclResult_t res = spin_step(b, &s);
        if (res == ncclInProgress)
          return report_hang(b, BRD_EXEC_WAIT_PACKET, -1, (int)slot_index,
                             flag, v >> 32);
        if (res != ncclSuccess) return res;
      }
    }
    uint32_t data = (uint32_t)v;
    size_t n = nbytes - p * 4 < 4 ? nbytes - p * 4 : 4;
    memcpy(out + (p * 4 - off), &data, n);
  }
  return ncclSuccess;
}

/* Writes data bytes [off, off + len) of a chunk of nbytes as packets. */
static void ll_write(char *slot, size_t off, size_t len, size_t nbytes,
                     uint32_t flag, const char *in) {
  _Atomic uint64_t *pkt = (_Atomic uint64_t *)(uintptr_t)slot;
  for (size_t p = off / 4; p * 4 < off + len; p++) {
    uint32_t data = 0;
    size_t n = nbytes - p * 4 < 4 ? nbytes - p * 4 : 4;
    memcpy(&data, in + (p * 4 - off), n);
    atomic_store_explicit(&pkt[p], ((uint64_t)flag << 32) | data,
                          memory_order_release);
  }
}

static ncclResult_t run_data(blk_ctx_t *b, const brd_ir_op_t *op) {
  brd_exec_run_t *l = b->l;
  size_t esize = l->view.layout.esize;
  int nref = op->nsrc + op->ndst;
  uint32_t flag_dst = brd_ir_ll_flag(&l->view, b->iter, op->k);
  uint32_t flag_src = brd_ir_ll_flag(&l->view, b->iter, op->k_src);
  uint32_t pre_mask = 0;
  int post = (op->flags & BRD_IR_F_POSTOP) != 0;
  for (int s = 0; s < op->nsrc; s++) {
    if ((op->ref[s].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT)
      pre_mask |= 1u << s;
  }
  _Alignas(16) char tmp[BRD_IR_MAX_REFS][TILE_BYTES];
  _Alignas(16) char result[TILE_BYTES];
  /* Whether a tile is computed (reduced, scaled) rather than copied. */
  int computes = op->nsrc > 1 || (pre_mask != 0 && l->op.fn == BRD_REDUCE_FN_PREMULSUM) ||
                 (post && l->op.fn == BRD_REDUCE_FN_SUMPOSTDIV);
  /* A plain copy to a port channel goes from the source straight onto the
   * port (put_from), not through the mirror: direct has a bit per such
   * destination. */
  int plain = !computes && !(op->ref[0].buf & BRD_IR_REF_LL);
  uint32_t direct = 0;
  for (int d = op->nsrc; d < nref && plain; d++)
    if (!(op->ref[d].buf & BRD_IR_REF_LL) && op->ref[d].chan != BRD_IR_CHAN_LOCAL &&
        l->args.chans[op->ref[d].chan].port != NULL &&
        l->args.chans[op->ref[d].chan].port->put_from != NULL)
      direct |= 1u << d;

  for (uint32_t t = 0; t < op->nchunks; t++) {
    size_t nbytes = brd_ir_op_chunk_len(&l->view, op, b->iter, t) * esize;
    if (nbytes == 0) continue;
    char *addr[BRD_IR_MAX_REFS];
    for (int r = 0; r < nref; r++) addr[r] = ref_addr(b, &op->ref[r], t);

    for (size_t off = 0; off < nbytes; off += TILE_BYTES) {
      size_t len = nbytes - off < TILE_BYTES ? nbytes - off : TILE_BYTES;
      const void *src[BRD_IR_MAX_REFS] = {0};
      for (int s = 0; s < op->nsrc; s++) {
        if (op->ref[s].buf & BRD_IR_REF_LL) {
          CHECK(ll_read(b, addr[s], off, len, nbytes, flag_src,
                        op->ref[s].index + t, tmp[s]));
          src[s] = tmp[s];
        } else {
          src[s] = addr[s] + off;
        }
      }
      const char *res = src[0];
      if (computes) {
        brd_reduce_host_apply(&l->op, result, src, op->nsrc, pre_mask, post,
                              len / esize);
        res = result;
      }
      for (int d = op->nsrc; d < nref; d++) {
        if (direct & (1u << d)) continue;
        if (op->ref[d].buf & BRD_IR_REF_LL) {
          ll_write(addr[d], off, len, nbytes, flag_dst, res);
        } else if (addr[d] + off != res) {
          memmove(addr[d] + off, res, len);
        }
      }
    }
    for (int d = op->nsrc; d < nref; d++) {
      int ll = (op->ref[d].buf & BRD_IR_REF_LL) != 0;
      if (direct & (1u << d))
        CHECK(port_put_from(b, op->ref[d].chan, addr[d], nbytes, addr[0]));
      else
        CHECK(port_put(b, op->ref[d].chan, addr[d], ll ? (nbytes + 3) / 4 * 8 : nbytes,
                       ll ? BRD_EXEC_PUT_LL : BRD_EXEC_PUT_DATA));
    }
  }
  return ncclSuccess;
}

/* ---- switch channels (device/ir.h) ----------------------------------------
 * Every member's copy is addressed directly (chans[c].member_scratch and
 * member_ssems): ld_reduce reads the slot in every copy, st writes every
 * copy, red combines into every copy with a compare-and-swap loop per
 * element. */

/* Slot index+t of member m's copy, for a ref through the switch channel;
 * in a zero-copy switch plan, chunk index+t of member m's input or output
 * (its own segment layout: every member's buffers have the same shape). */
static char *member_slot(const blk_ctx_t *b, const brd_ir_ref_t *ref, uint32_t t, int m) {
  const brd_exec_run_t *l = b->l;
  const brd_exec_chan_t *ch = &l->args.chans[ref->chan];
  const brd_ir_view_t *v = &l->view;
  uint32_t index = ref->index + t;
  uint8_t kind = ref->buf & BRD_IR_BUF_MASK;
  if (kind == BRD_IR_BUF_SCRATCH)
    return brd_ir_slot_addr(v, (char *)ch->member_scratch[m], index);
  uint32_t seg = index / v->layout.nchunks;
  char *base = kind == BRD_IR_BUF_INPUT
                   ? brd_ir_seg_at(v, ch->member_input[m], seg, v->in_stride)
                   : brd_ir_seg_at(v, ch->member_output[m], seg, v->out_stride);
  return brd_ir_chunk_addr(v, base, brd_ir_seg_count(v, ref, seg), b->iter,
                           index % v->layout.nchunks);
}

static int ref_is_switch(const blk_ctx_t *b, const brd_ir_ref_t *ref) {
  const brd_exec_run_t *l = b->l;
  return ref->chan != BRD_IR_CHAN_LOCAL &&
         brd_ir_plan_chan(l->args.plan, l->args.rank, ref->chan)->type == BRD_IR_CHAN_SWITCH;
}

/* *addr = *addr (op) *val for one element of esize bytes, atomically:
 * a compare-and-swap loop on the element's own width. */
static void red_element(const brd_reduce_op_t *op, char *addr, const char *val, size_t esize) {
  _Alignas(8) char old[8], sum[8];
  const void *srcs[2] = {old, val};
  switch (esize) {
  case 1: {
    uint8_t o = __atomic_load_n((uint8_t *)addr, __ATOMIC_RELAXED), n;
    do {
      memcpy(old, &o, 1);
      brd_reduce_host_apply(op, sum, srcs, 2, 0, 0, 1);
      memcpy(&n, sum, 1);
    } while (!__atomic_compare_exchange_n((uint8_t *)addr, &o, n, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    break;
  }
  case 2: {
    uint16_t o = __atomic_load_n((uint16_t *)addr, __ATOMIC_RELAXED), n;
    do {
      memcpy(old, &o, 2);
      brd_reduce_host_apply(op, sum, srcs, 2, 0, 0, 1);
      memcpy(&n, sum, 2);
    } while (!__atomic_compare_exchange_n((uint16_t *)addr, &o, n, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    break;
  }
  case 4: {
    uint32_t o = __atomic_load_n((uint32_t *)addr, __ATOMIC_RELAXED), n;
    do {
      memcpy(old, &o, 4);
      brd_reduce_host_apply(op, sum, srcs, 2, 0, 0, 1);
      memcpy(&n, sum, 4);
    } while (!__atomic_compare_exchange_n((uint32_t *)addr, &o, n, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    break;
  }
  default: {
    uint64_t o = __atomic_load_n((uint64_t *)addr, __ATOMIC_RELAXED), n;
    do {
      memcpy(old, &o, 8);
      brd_reduce_host_apply(op, sum, srcs, 2, 0, 0, 1);
      memcpy(&n, sum, 8);
    } while (!__atomic_compare_exchange_n((uint64_t *)addr, &o, n, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    break;
  }
  }
}

/* MC_REDUCE, MC_STORE, MC_RED. */
static ncclResult_t run_switch_data(blk_ctx_t *b, const brd_ir_op_t *op) {
  brd_exec_run_t *l = b->l;
  int n = l->sw_n;
  size_t esize = l->view.layout.esize;
  int post = (op->flags & BRD_IR_F_POSTOP) != 0;
  int mc_reduce = op->code == BRD_IR_OP_MC_REDUCE;
  if (mc_reduce && n > 32) {
    WARN("rank %d block %d op %d: MC_REDUCE over %d members; the host executor "
         "reduces at most 32", l->args.rank, b->block, b->opi, n);
    return ncclInternalError;
  }
  /* Only an INPUT source carries the pre-op (exec_host.c's rule). */
  uint32_t pre_mask = !mc_reduce && (op->ref[0].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT;
  _Alignas(16) char result[TILE_BYTES];
  for (uint32_t t = 0; t < op->nchunks; t++) {
    size_t nbytes = brd_ir_op_chunk_len(&l->view, op, b->iter, t) * esize;
    if (nbytes == 0) continue;
    const char *src[32];
    int nsrc = 1;
    if (mc_reduce) {
      nsrc = n;
      for (int m = 0; m < n; m++) src[m] = member_slot(b, &op->ref[0], t, m);
    } else {
      src[0] = ref_addr(b, &op->ref[0], t);
    }
    for (size_t off = 0; off < nbytes; off += TILE_BYTES) {
      size_t len = nbytes - off < TILE_BYTES ? nbytes - off : TILE_BYTES;
      const void *tile[32];
      for (int s = 0; s < nsrc; s++) tile[s] = src[s] + off;
      const char *res = tile[0];
      if (nsrc > 1 || (pre_mask && l->op.fn == BRD_REDUCE_FN_PREMULSUM) ||
          (post && l->op.fn == BRD_REDUCE_FN_SUMPOSTDIV)) {
        brd_reduce_host_apply(&l->op, result, tile, nsrc, pre_mask, post, len / esize);
        res = result;
      }
      for (int d = op->nsrc; d < op->nsrc + op->ndst; d++) {
        const brd_ir_ref_t *ref = &op->ref[d];
        if (!ref_is_switch(b, ref)) {
          char *dst = ref_addr(b, ref, t) + off;
          if (dst != res) memmove(dst, res, len);
          continue;
        }
        for (int m = 0; m < n; m++) {
          char *dst = member_slot(b, ref, t, m) + off;
          if (op->code == BRD_IR_OP_MC_RED) {
            for (size_t e = 0; e < len; e += esize) red_element(&l->op, dst + e, res + e, esize);
          } else if (dst != res) {
            memmove(dst, res, len);
          }
        }
      }
    }
  }
  return ncclSuccess;
}

/* MC_BARRIER: this rank's word of switch semaphore `index` in every
 * member's copy gets seq(it, k) (release); then every member's word in
 * this rank's copy must reach it (acquire). */
static ncclResult_t run_mc_barrier(blk_ctx_t *b, const brd_ir_op_t *op) {
  brd_exec_run_t *l = b->l;
  int n = l->sw_n, me = l->sw_me;
  const brd_exec_chan_t *ch = &l->args.chans[op->ref[0].chan];
  size_t word = (size_t)op->ref[0].index * (size_t)n;
  uint64_t value = brd_ir_sem_value(&l->view, op->ref[0].chan, b->iter, op->k);
  for (int m = 0; m < n; m++)
    atomic_store_explicit(&ch->member_ssems[m][word + (size_t)me], value, memory_order_release);
  _Atomic uint64_t *own = ch->member_ssems[me] + word;
  for (int m = 0; m < n; m++) {
    spin_t s = {0};
    uint64_t v;
    while ((v = atomic_load_explicit(&own[m], memory_order_acquire)) < value) {
      ncclResult_t res = spin_step(b, &s);
      if (res == ncclInProgress)
        return report_hang(b, BRD_EXEC_WAIT_SWITCH,
                           brd_ir_switch_member_rank(l->args.plan, l->args.rank, m),
                           op->ref[0].index, value, v);
      if (res != ncclSuccess) return res;
    }
  }
  return ncclSuccess;
}

static ncclResult_t run_op(blk_ctx_t *b, const brd_ir_op_t *op) {
  if (brd_ir_op_is_data(op->code)) return run_data(b, op);
  if (op->code == BRD_IR_OP_MC_BARRIER) return run_mc_barrier(b, op);
  if (brd_ir_op_is_switch(op->code)) return run_switch_data(b, op);
  switch (op->code) {
  case BRD_IR_OP_NOP: return ncclSuccess;
  case BRD_IR_OP_WAIT: return run_wait(b, op);
  case BRD_IR_OP_SIGNAL: return run_signal(b, op);
  case BRD_IR_OP_BARRIER: return run_barrier(b);
  default:
    WARN("rank %d block %d op %d: opcode %u is not supported by the host "
         "executor", b->l->args.rank, b->block, b->opi, op->code);
    return ncclInternalError;
  }
}

/* See exec_host.h. */
ncclResult_t brd_exec_host_run_init(brd_exec_run_t *l,
                                   const brd_exec_args_t *args) {
  const brd_ir_plan_t *p = args->plan;
  if (p == NULL || p->magic != BRD_IR_MAGIC || p->version != BRD_IR_VERSION) {
    WARN("host executor: not a Braid plan (magic/version mismatch)");
    return ncclInternalError;
  }
  if (args->rank < 0 || args->rank >= p->nranks) {
    WARN("host executor: rank %d outside a plan of %d ranks", args->rank,
         p->nranks);
    return ncclInvalidArgument;
  }
  if (args->phase > 1) {
    WARN("host executor: scratch phase %u (expected 0 or 1)", args->phase);
    return ncclInvalidArgument;
  }
  memset(l, 0, sizeof(*l));
  l->args = *args;
  l->sw_me = brd_ir_switch_member(p, args->rank, &l->sw_n);
  CHECK(brd_reduce_op_init(args->dtype, args->redop, p->nranks, args->scalar,
                           &l->op));
  if (args->count > 0) {
    CHECK(brd_exec_bufs_check(p, (int)args->rank, args->input, args->output, args->count,
                              "host executor"));
    CHECK(brd_exec_segs_check(args->in_segs, args->n_in_segs, args->count, args->rank,
                              "host executor", "input"));
    CHECK(brd_exec_segs_check(args->out_segs, args->n_out_segs, args->count, args->rank,
                              "host executor", "output"));
    if (brd_ir_plan_rank(p, args->rank)->nchans > 0 && args->chans == NULL) {
      WARN("host executor: rank %d has no channel pointers for a plan with "
           "%u channels", args->rank, brd_ir_plan_rank(p, args->rank)->nchans);
      return ncclInvalidArgument;
    }
    for (uint32_t c = 0; c < brd_ir_plan_rank(p, args->rank)->nchans; c++) {
      int sw = brd_ir_plan_chan(p, args->rank, (int)c)->type == BRD_IR_CHAN_SWITCH;
      if (sw && (args->chans[c].member_scratch == NULL ||
                 args->chans[c].member_ssems == NULL || args->xchg)) {
        WARN("host executor: rank %d channel %u is a switch channel, but the launch "
             "gives no member copies (or exchanges outputs, which switch plans never "
             "need)", args->rank, c);
        return ncclInvalidArgument;
      }
      if (sw && (p->flags & BRD_IR_PLAN_F_PEER_INPUT) &&
          (args->chans[c].member_input == NULL || args->chans[c].member_output == NULL)) {
        WARN("host executor: rank %d channel %u is the switch channel of a zero-copy "
             "plan, but the launch gives no member buffers", args->rank, c);
        return ncclInvalidArgument;
      }
      if (sw) continue;
      int port = brd_ir_plan_chan(p, args->rank, (int)c)->type == BRD_IR_CHAN_PORT;
      if (port != (args->chans[c].port != NULL)) {
        WARN("host executor: rank %d channel %u is a %s channel in the plan but %s at "
             "launch", args->rank, c, port ? "port" : "memory",
             args->chans[c].port != NULL ? "has a port" : "has no port");
        return ncclInvalidArgument;
      }
    }
    if (p->nslots > 0 && args->scratch == NULL) {
      WARN("host executor: rank %d has no scratch buffer", args->rank);
      return ncclInvalidArgument;
    }
    if (args->xchg) {
      uint32_t nch = brd_ir_plan_rank(p, args->rank)->nchans;
      int bad = nch > BRD_IR_XCHG_MAX_CHANS;
      for (uint32_t c = 0; c < nch && !bad; c++)
        bad = args->chans[c].xchg_pub == NULL || args->chans[c].xchg_slot == NULL;
      if (bad) {
        WARN("host executor: rank %d exchanges outputs over %u channels (at most %u), "
             "each with both slots", args->rank, nch, BRD_IR_XCHG_MAX_CHANS);
        return ncclInvalidArgument;
      }
    }
    if (p->flags & BRD_IR_PLAN_F_PEER_INPUT) {
      for (uint32_t c = 0; c < brd_ir_plan_rank(p, args->rank)->nchans; c++) {
        /* A switch channel's members were checked above. */
        if (args->chans[c].peer_input != NULL ||
            brd_ir_plan_chan(p, args->rank, (int)c)->type == BRD_IR_CHAN_SWITCH)
          continue;
        WARN("host executor: rank %d runs a plan reading peers' inputs, but channel "
             "%u has no input pointer", args->rank, c);
        return ncclInvalidArgument;
      }
    }
    CHECK(brd_plan_layout_init(p, args->count, args->dtype, args->scratch_bytes,
                               &l->view.layout));
    /* LL flags count from the launch's epoch (per-channel epochs only
     * drive semaphores, which are 64-bit). */
    uint64_t span = brd_plan_epoch_span(p, &l->view.layout);
    uint64_t wrap = (uint64_t)1 << 32;
    if (args->epoch / wrap != (args->epoch + span) / wrap) {
      WARN("host executor: epoch %llu + %llu sequence numbers crosses a "
           "multiple of 2^32; reserve epochs with brd_plan_epoch_reserve",
           (unsigned long long)args->epoch, (unsigned long long)span);
      return ncclInternalError;
    }
  }
  brd_ir_view_t *v = &l->view;
  v->in_segs = args->in_segs;
  v->out_segs = args->out_segs;
  v->input = (const char *)args->input;
  v->output = (char *)args->output;
  v->in_stride = args->in_stride ? args->in_stride : args->count;
  v->out_stride = args->out_stride ? args->out_stride : args->count;
  v->chan_epoch = args->chan_epoch;
  v->epoch = args->epoch;
  v->seq_per_iter = p->seq_per_iter;
  v->phase = args->phase;
  l->timeout_s = args->timeout_s > 0
                     ? args->timeout_s
                     : (double)brd_param_int(BRD_P_BRAID_TIMEOUT);
  atomic_init(&l->stop, 0);
  atomic_init(&l->result, ncclSuccess);
  atomic_init(&l->hang_claimed, 0);
  atomic_init(&l->bar_count, 0);
  atomic_init(&l->bar_gen, 0);
  l->bell_only = 0;
  if (args->port_bell != NULL) {
    uint32_t nch = brd_ir_plan_rank(p, args->rank)->nchans;
    l->bell_only = nch > 0;
    for (uint32_t c = 0; c < nch; c++)
      if (args->chans[c].port == NULL) l->bell_only = 0;
  }
  return ncclSuccess;
}

/* Output exchange (device/ir.h): this rank's output, as each channel
 * peer should address it, into the peer's slot. A seqlock: the tag is 0
 * while the words change. */
static ncclResult_t xchg_publish(blk_ctx_t *b) {
  const brd_exec_run_t *l = b->l;
  const brd_exec_args_t *a = &l->args;
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  uint64_t stride = a->out_stride ? a->out_stride : a->count;
  for (uint32_t c = 0; c < nch; c++) {
    _Atomic uint64_t *s = a->chans[c].xchg_pub;
    atomic_store_explicit(&s[0], 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s[1], (uint64_t)(uintptr_t)a->chans[c].xchg_output,
                          memory_order_relaxed);
    atomic_store_explicit(&s[2], stride, memory_order_relaxed);
    atomic_store_explicit(&s[0], a->epoch + 1, memory_order_release);
    CHECK(port_put(b, c, (const void *)s, 3 * sizeof(*s), BRD_EXEC_PUT_SEM));
  }
  return ncclSuccess;
}

/* Output exchange: every channel peer's output for this launch into
 * b->xout and b->xstride, waiting for its slot. A slot already past this
 * launch means the peer finished it, so nothing here writes its output
 * any more: its staging stands in. */
static ncclResult_t xchg_resolve(blk_ctx_t *b) {
  const brd_exec_args_t *a = &b->l->args;
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  uint64_t want = a->epoch + 1;
  for (uint32_t c = 0; c < nch; c++) {
    _Atomic uint64_t *s = a->chans[c].xchg_slot;
    b->xout[c] = a->chans[c].peer_output;
    b->xstride[c] = a->count;
    spin_t spin = {0};
    for (;;) {
      uint64_t t1 = atomic_load_explicit(&s[0], memory_order_acquire);
      if (t1 == want) {
        uint64_t out = atomic_load_explicit(&s[1], memory_order_relaxed);
        uint64_t stride = atomic_load_explicit(&s[2], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s[0], memory_order_relaxed) == want && out != 0) {
          b->xout[c] = (char *)(uintptr_t)out;
          b->xstride[c] = (size_t)stride;
        }
        break;
      }
      if (t1 > want) break;
      ncclResult_t res = spin_step(b, &spin);
      if (res == ncclInProgress)
        return report_hang(b, BRD_EXEC_WAIT_XCHG,
                           brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer, (int)c,
                           want, t1);
      if (res != ncclSuccess) return res;
    }
  }
  return ncclSuccess;
}

/* See exec_host.h. */
ncclResult_t brd_exec_host_block_run(brd_exec_run_t *l, int block) {
  const brd_ir_plan_t *p = l->args.plan;
  const brd_ir_op_t *ops = brd_ir_plan_ops(p, l->args.rank, block);
  uint32_t nops = brd_ir_plan_block(p, l->args.rank, block)->nops;
  blk_ctx_t b = {l, block, 0, 0, 0, {NULL}, {0}};
  if (l->args.xchg && l->view.layout.niter > 0) {
    /* Every rank publishes before it waits: no rank waits on one that
     * has not published. */
    ncclResult_t res = block == 0 ? xchg_publish(&b) : ncclSuccess;
    if (res == ncclSuccess) res = xchg_resolve(&b);
    if (res != ncclSuccess) {
      launch_fail(l, res);
      return (ncclResult_t)atomic_load(&l->result);
    }
  }
  for (b.iter = 0; b.iter < l->view.layout.niter; b.iter++) {
    for (uint32_t i = 0; i < nops; i++) {
      b.opi = (int)i;
      ncclResult_t res = run_op(&b, &ops[i]);
      if (res != ncclSuccess) {
        launch_fail(l, res);
        return (ncclResult_t)atomic_load(&l->result);
      }
    }
  }
  return ncclSuccess;
}

/* See exec_host.h. */
ncclResult_t brd_exec_host_run_fini(brd_exec_run_t *l,
                                   brd_exec_hang_t *hang_out) {
  ncclResult_t res = (ncclResult_t)atomic_load(&l->result);
  if (res == ncclRemoteError && hang_out != NULL) *hang_out = l->hang;
  return res;
}

typedef struct thread_arg {
  brd_exec_run_t *l;
  int block;
} thread_arg_t;

static void *block_thread(void *arg) {
  thread_arg_t *t = arg;
  brd_exec_host_block_run(t->l, t->block);
  return NULL;
}

/* See exec_host.h. */
ncclResult_t brd_exec_host_run(const brd_exec_args_t *args,
                               brd_exec_hang_t *hang_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_run_t l;
  CHECK(brd_exec_host_run_init(&l, args));
  int nblocks = args->plan->nblocks;
  if (nblocks == 1 || l.view.layout.niter == 0) {
    for (int blk = 0; blk < nblocks; blk++) brd_exec_host_block_run(&l, blk);
    return brd_exec_host_run_fini(&l, hang_out);
  }
  pthread_t *threads = calloc((size_t)nblocks, sizeof(*threads));
  thread_arg_t *targs = calloc((size_t)nblocks, sizeof(*targs));
  int started = 1;
  if (threads == NULL || targs == NULL) {
    WARN("out of host memory starting %d executor threads", nblocks);
    res = ncclSystemError;
    goto free_arrays;
  }
  for (; started < nblocks; started++) {
    targs[started].l = &l;
    targs[started].block = started;
    int err = pthread_create(&threads[started], NULL, block_thread,
                             &targs[started]);
    if (err != 0) {
      WARN("rank %d: cannot start a thread for block %d of %d: %s",
           args->rank, started, nblocks, strerror(err));
      launch_fail(&l, ncclSystemError);
      break;
    }
  }
  if (started == nblocks) brd_exec_host_block_run(&l, 0);
  for (int blk = 1; blk < started; blk++) pthread_join(threads[blk], NULL);
  res = brd_exec_host_run_fini(&l, hang_out);
free_arrays:
  free(targs);
  free(threads);
  return res;
}
