/*
 * Braid CUDA executor: one kernel launch runs one rank's part of a plan.
 * See exec_cuda.h for the interface and ir.h for the semantics; the host
 * executor (exec_host.c) is the reference reading this file follows.
 *
 * Algorithm: block b of the grid runs the op list of plan block b, once per
 * loop iteration, all its threads together (with an output exchange, thread
 * 0 of every block first learns where each channel peer's output is). Data
 * ops split each chunk into 16-byte packs, pack j to thread j mod blockDim,
 * several packs per thread in flight (loads of every pack issued before any
 * is used); SIGNAL, WAIT and BARRIER are done by thread 0. Every op ends with __syncthreads_or,
 * which orders the block's accesses between ops and tells every thread
 * whether some thread failed, so the block leaves together.
 *
 * Memory ordering:
 *   SIGNAL  __syncthreads (the block's writes happen-before thread 0), then
 *           thread 0: fence.sc.sys + st.release.sys of the sequence number;
 *   WAIT    thread 0: ld.acquire.sys until the value is reached, then
 *           __syncthreads before any thread reads the data;
 *   LL      a packet is one 64-bit word (data | flag << 32) stored and
 *           loaded with single volatile 64-bit accesses (v2.u64 moves two
 *           whole packets), so a reader that sees the flag sees the data;
 *   BARRIER __threadfence, atomicAdd on the rank's counter; the last block
 *           resets it and advances a generation that the others acquire;
 *   EXCHANGE block 0's thread 0, per channel, a seqlock in the peer's
 *           window: tag 0, fence.sc.sys, the words, st.release.sys of the
 *           tag; every block's thread 0 reads the peer's slot in its own
 *           window with ld.acquire.sys of the tag, the words, fence.sc.sys,
 *           the tag again.
 * Data loads bypass L1 (ld.global.cg): peers write this rank's buffers.
 *
 * Blocks and threads: one block per plan block (the plan already split the
 * work); 512 threads so one block moves enough bytes in flight to keep its
 * SM's share of memory bandwidth busy. Every block of a rank must be
 * resident at once (they wait on each other and on peers), which plan
 * creation checks against the number of SMs (launch bounds allow one block
 * per SM).
 *
 * Waits spin; every SPIN_CHECK_INTERVAL polls each waiting thread reads the
 * host-mapped abort flag, the launch's stop flag and %globaltimer. At the
 * deadline the first thread to time out claims the hang report (atomicCAS
 * in device memory), fills it in mapped host memory and raises the stop
 * flag; every other block leaves at its next poll.
 */
/* nvcc's host stubs for kernels otherwise cache a kernel handle in a
 * function-local static initialised at run time, which needs the C++
 * runtime (__cxa_guard_*, __gxx_personality_v0); this library is C, linked
 * by the C compiler with --no-undefined. Launches go through
 * cudaLaunchKernel on the stub's address either way. */
#define __NV_LEGACY_LAUNCH 1

#include <errno.h> /* check.h's SYS_ macros, included outside extern "C" */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "device/exec_cuda.h"
#include "device/reduce.cuh"

extern "C" {
#include "base/check.h"
#include "base/param.h"
#include "device/reduce.h"
#include "plan/plan.h"
}

/* A kernel's address for cudaLaunchKernel (the simulator's differs). */
#ifndef BRD_KERNEL
#define BRD_KERNEL(...) ((const void *)(__VA_ARGS__))
#endif

namespace {

/* Polls of a wait between two checks of the abort flag, the stop flag and
 * the clock. The abort flag lives in host memory, so each check is a PCIe
 * read; at about half a microsecond per poll this checks every few ms. */
const uint32_t SPIN_CHECK_INTERVAL = 8192;

/* Packs in flight per thread in a plain copy. */
const int COPY_UNROLL = 4;

/* How a launch failed (report_t.failed). */
enum { FAIL_NONE = 0, FAIL_HANG = 1, FAIL_ABORT = 2 };

/* Host-visible state of a rank, in mapped pinned memory. The host writes
 * `abort`; a kernel writes the rest once, after claiming it. */
struct report_t {
  int abort;                  /* host: raise to stop every launch */
  int failed;                 /* FAIL_*, written last */
  uint64_t timeout_ns;        /* the timed-out launch's timeout */
  brd_exec_cuda_hang_t hang;  /* valid when failed == FAIL_HANG */
};

/* Device-side state of a rank, in device memory; persists across
 * launches, which the status requires to be stream-ordered. */
struct state_t {
  unsigned int claimed;       /* report claimed by a failing thread */
  unsigned int stop;          /* a launch failed: every block leaves */
  unsigned int bar_count;     /* blocks arrived at the current barrier */
  unsigned int bar_gen;       /* barriers completed (wraps; compared ==) */
  unsigned int done;          /* blocks finished (device epochs) */
  unsigned int launches;      /* launches finished (device epochs) */
  unsigned long long cursor;  /* next sequence number (device epochs) */
};

/* Everything a kernel needs, passed by value (__grid_constant__), so a
 * captured graph keeps its own copy. */
struct kargs_t {
  const brd_ir_plan_t *plan;             /* device blob */
  const brd_exec_cuda_chan_t *chans_dev; /* NULL: `chans` below */
  const brd_exec_cuda_seg_t *in_segs_dev;  /* NULL: in_segs below, if any */
  const brd_exec_cuda_seg_t *out_segs_dev;
  const uint64_t *chan_epoch_dev;        /* NULL: chan_epoch below, if any */
  unsigned long long *chan_cursor;       /* per-pair cursors: chan_epoch holds spans */
  const char *input;
  char *output;
  char *scratch;                         /* base of both phases */
  const void *scalar_dev;                /* NULL: `arg` holds the scalar */
  report_t *report;                      /* device view of mapped memory */
  state_t *state;
  unsigned long long arg;                /* brd_reduce_op_t.arg */
  unsigned long long epoch;              /* host epochs */
  unsigned long long span;               /* sequence numbers per launch */
  unsigned long long niter;
  unsigned long long count;              /* brd_plan_layout_t, in 64 bits */
  unsigned long long esize;
  unsigned long long align;
  unsigned long long chunk_max;
  unsigned long long window;
  unsigned long long slot_bytes;
  unsigned long long half_bytes;
  unsigned long long out_half;           /* device epochs: output halves */
  unsigned long long timeout_ns;
  unsigned long long in_stride;          /* elements between segments */
  unsigned long long out_stride;
  uint32_t nchunks;
  uint32_t phase;                        /* host epochs */
  int rank;
  int fn;                                /* BRD_REDUCE_FN_* */
  int device_epoch;
  int fixed;                             /* BRD_IR_PLAN_F_FIXED */
  uint32_t n_in_segs, n_out_segs;        /* inline tables; 0: none */
  int has_chan_epoch;                    /* chan_epoch below is valid */
  /* Bytes, in the padding before `chans`: the parameters are exactly at
   * the 4 KiB limit since the channels carry their exchange slots. */
  uint8_t xchg;                          /* brd_exec_cuda_args_t's */
  uint8_t out_direct;                    /* own output has no half offset */
  brd_exec_cuda_chan_t chans[BRD_EXEC_CUDA_INLINE_CHANS];
  uint64_t chan_epoch[BRD_EXEC_CUDA_INLINE_CHANS];
  brd_exec_cuda_seg_t in_segs[BRD_EXEC_CUDA_INLINE_SEGS];
  brd_exec_cuda_seg_t out_segs[BRD_EXEC_CUDA_INLINE_SEGS];
};

/* Kernel parameters are limited to 4 KiB on every architecture built. */
static_assert(sizeof(kargs_t) <= 4096, "kernel arguments fit 4 KiB");

/* ---- PTX helpers ------------------------------------------------------ */

/* The CUDA simulator compiles this file for the CPU and supplies these
 * under the same names (tests/cudasim/devemu.h). */
#ifndef BRD_CUDASIM_DEVICE

__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t *p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
               : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;"
               :: "l"(p), "l"((unsigned long long)v) : "memory");
}

__device__ __forceinline__ unsigned int ld_acquire_gpu(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
               : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t ld_volatile_u64(const uint64_t *p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];"
               : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void ld_volatile_v2(const uint64_t *p, uint64_t &a,
                                               uint64_t &b) {
  unsigned long long x, y;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(x), "=l"(y) : "l"(p) : "memory");
  a = x;
  b = y;
}

__device__ __forceinline__ void st_volatile_u64(uint64_t *p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;"
               :: "l"(p), "l"((unsigned long long)v) : "memory");
}

__device__ __forceinline__ void st_volatile_v2(uint64_t *p, uint64_t a,
                                               uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};"
               :: "l"(p), "l"((unsigned long long)a),
                  "l"((unsigned long long)b) : "memory");
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif /* BRD_CUDASIM_DEVICE */

/* ---- per-block context ------------------------------------------------ */

/* A block's constants for the launch, in shared memory: thread 0 fills
 * them before the block's first barrier. */
struct ctx_t {
  const kargs_t *a;
  const brd_exec_cuda_chan_t *chans;
  const brd_exec_cuda_seg_t *in_segs;  /* NULL: inputs are strided */
  const brd_exec_cuda_seg_t *out_segs;
  const uint64_t *chan_epoch;          /* NULL: `epoch` for every channel */
  uint64_t epoch;
  uint64_t phase_off;    /* phase * half_bytes, into any rank's scratch */
  uint64_t out_off;      /* phase * out_half, into any rank's output */
  uint64_t arg;          /* the reduction's scalar or divisor */
  uint32_t seq_per_iter;
  /* Output exchange (a->xchg): each channel peer's output for this launch
   * and the elements between its segments, as thread 0 resolved them
   * (xchg_resolve) before the block's first op. */
  char *xout[BRD_IR_XCHG_MAX_CHANS];
  uint64_t xstride[BRD_IR_XCHG_MAX_CHANS];
};

/* Where a block is in its op list; passed by value to the slow paths so
 * the hot loop keeps it in registers. */
struct pos_t {
  uint64_t iter;
  int opi;
};

/* Sequence number of k in the current iteration, relative to the epoch. */
__device__ __forceinline__ int64_t seq_rel(const ctx_t &c, pos_t w, int32_t k) {
  return (int64_t)w.iter * c.seq_per_iter + k;
}

/* Element range of `chunk` in iteration `iter` of a segment of seg_count
 * elements, relative to the segment: brd_plan_layout_seg_chunk. */
__device__ __forceinline__ void seg_chunk(const kargs_t &a, uint64_t seg_count,
                                          uint64_t iter, uint32_t chunk,
                                          uint64_t *start, uint64_t *n) {
  uint64_t wstart = iter * a.window;
  uint64_t left = seg_count > wstart ? seg_count - wstart : 0;
  uint64_t w = left < a.window ? left : a.window;
  uint64_t q = a.chunk_max;
  if (w < a.window && !a.fixed) {
    q = (w + a.nchunks - 1) / a.nchunks;
    q = (q + a.align - 1) / a.align * a.align;
  }
  uint64_t lo = (uint64_t)chunk * q, hi = lo + q;
  if (lo > w) lo = w;
  if (hi > w) hi = w;
  *start = wstart + lo;
  *n = hi - lo;
}

/* The epoch the semaphores of channel `chan` count from. */
__device__ __forceinline__ uint64_t chan_epoch(const ctx_t &c, uint8_t chan) {
  return c.chan_epoch != NULL ? c.chan_epoch[chan] : c.epoch;
}

/* ---- failure paths (out of line: never hot) ----------------------------- */

__device__ __noinline__ void stop_launch(const ctx_t &c) {
  atomicExch(&c.a->state->stop, 1u);
  __threadfence();
}

/* Claims the report for an abort (the first failure wins) and stops. */
__device__ __noinline__ void note_abort(const ctx_t &c) {
  if (atomicCAS(&c.a->state->claimed, 0u, 1u) == 0u) {
    volatile report_t *r = c.a->report;
    r->failed = FAIL_ABORT;
    __threadfence_system();
  }
  stop_launch(c);
}

/* Claims the report for a hang, fills it, and stops. */
__device__ __noinline__ void report_hang(const ctx_t &c, pos_t w, int what,
                                         int peer, int index,
                                         uint64_t expected, uint64_t seen) {
  if (atomicCAS(&c.a->state->claimed, 0u, 1u) == 0u) {
    volatile report_t *r = c.a->report;
    r->hang.rank = c.a->rank;
    r->hang.block = (int)blockIdx.x;
    r->hang.op = w.opi;
    r->hang.iter = w.iter;
    r->hang.what = what;
    r->hang.peer = peer;
    r->hang.index = index;
    r->hang.expected = expected;
    r->hang.seen = seen;
    r->timeout_ns = c.a->timeout_ns;
    /* The fields reach host memory before `failed` says they are valid. */
    __threadfence_system();
    r->failed = FAIL_HANG;
    __threadfence_system();
  }
  stop_launch(c);
}

enum { SPIN_GO = 0, SPIN_TIMEOUT = 1, SPIN_LEAVE = 2 };

struct spin_t {
  uint32_t n;
  uint64_t deadline; /* 0 until the first check */
};

/* One poll of a wait: SPIN_GO to keep polling, SPIN_TIMEOUT at the
 * deadline (the caller reports the hang), SPIN_LEAVE on abort or when
 * another block of the launch failed. */
__device__ __forceinline__ int spin_step(const ctx_t &c, spin_t &s) {
  if (++s.n % SPIN_CHECK_INTERVAL != 0) return SPIN_GO;
  if (*(volatile int *)&c.a->report->abort) {
    note_abort(c);
    return SPIN_LEAVE;
  }
  if (*(volatile unsigned int *)&c.a->state->stop) return SPIN_LEAVE;
  uint64_t t = globaltimer_ns();
  if (s.deadline == 0) s.deadline = t + c.a->timeout_ns;
  else if (t > s.deadline) return SPIN_TIMEOUT;
  return SPIN_GO;
}

/* ---- SIGNAL, WAIT, BARRIER (thread 0 only) ------------------------------ */

__device__ __noinline__ bool run_wait(const ctx_t &c, pos_t w,
                                      const brd_ir_op_t *op) {
  int64_t rel = seq_rel(c, w, op->k);
  if (rel <= 0) return true; /* names a point before this launch */
  uint64_t target = chan_epoch(c, op->ref[0].chan) + (uint64_t)rel;
  const uint64_t *sem = c.chans[op->ref[0].chan].sems + op->ref[0].index;
  spin_t s = {0, 0};
  uint64_t v;
  while ((v = ld_acquire_sys(sem)) < target) {
    int r = spin_step(c, s);
    if (r == SPIN_TIMEOUT) {
      int peer = brd_ir_plan_chan(c.a->plan, c.a->rank, op->ref[0].chan)->peer;
      report_hang(c, w, BRD_EXEC_CUDA_WAIT_SEM, peer, op->ref[0].index, target, v);
      return false;
    }
    if (r == SPIN_LEAVE) return false;
  }
  return true;
}

__device__ __noinline__ void run_signal(const ctx_t &c, pos_t w,
                                        const brd_ir_op_t *op) {
  uint64_t value = chan_epoch(c, op->ref[0].chan) + (uint64_t)seq_rel(c, w, op->k);
  uint64_t *sem = c.chans[op->ref[0].chan].peer_sems + op->ref[0].index;
  /* The block's writes reached thread 0 through the previous op's
   * __syncthreads; the system-scope fence orders them, for every observer,
   * before the semaphore moves. */
  __threadfence_system();
  st_release_sys(sem, value);
}

/* Barrier number `seen` among the rank's blocks. */
__device__ __noinline__ bool run_barrier(const ctx_t &c, pos_t w, uint32_t seen) {
  state_t *st = c.a->state;
  uint32_t nblocks = gridDim.x;
  /* The generation cannot move before this block arrives, so reading it
   * first gives the value the last arrival will advance. */
  unsigned int gen = *(volatile unsigned int *)&st->bar_gen;
  __threadfence();
  if (atomicAdd(&st->bar_count, 1u) + 1u == nblocks) {
    /* Last to arrive: reset the count before releasing the others, so a
     * block racing to the next barrier counts from zero. */
    atomicExch(&st->bar_count, 0u);
    __threadfence();
    atomicAdd(&st->bar_gen, 1u);
  } else {
    spin_t s = {0, 0};
    while (ld_acquire_gpu(&st->bar_gen) == gen) {
      int r = spin_step(c, s);
      if (r == SPIN_TIMEOUT) {
        report_hang(c, w, BRD_EXEC_CUDA_WAIT_BARRIER, -1, (int)seen, nblocks,
                    *(volatile unsigned int *)&st->bar_count);
        return false;
      }
      if (r == SPIN_LEAVE) return false;
    }
  }
  __threadfence();
  return true;
}

/* ---- output exchange (thread 0 only; device/ir.h) ------------------------ */

/* Block 0: this rank's output, as each channel peer should address it,
 * into the peer's slot. A seqlock: the tag is 0 while the words change,
 * so a reader never takes words of one launch under the tag of another.
 * The stride is the launch's, already normalised (0 -> count) as the host
 * executor publishes it. */
__device__ __noinline__ void xchg_publish(const ctx_t &c) {
  const kargs_t &a = *c.a;
  uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
  for (uint32_t ch = 0; ch < nch; ch++) {
    uint64_t *s = c.chans[ch].xchg_pub;
    st_volatile_u64(s, 0);
    /* Every observer sees the cleared tag before any word changes. */
    __threadfence_system();
    st_volatile_u64(s + 1, (uint64_t)(uintptr_t)c.chans[ch].xchg_output);
    st_volatile_u64(s + 2, a.out_stride);
    st_release_sys(s, c.epoch + 1);
  }
}

/* Every channel peer's output for this launch into c.xout / c.xstride,
 * waiting for its slot (xchg_resolve of exec_host.c). A slot already past
 * this launch means the peer finished it, so nothing writes its output any
 * more: its staging (with this launch's half) stands in, as for a peer
 * that publishes none. false: the wait timed out (reported) or was told to
 * leave. */
__device__ __noinline__ bool xchg_resolve(ctx_t &c) {
  const kargs_t &a = *c.a;
  uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
  uint64_t want = c.epoch + 1;
  for (uint32_t ch = 0; ch < nch; ch++) {
    const uint64_t *s = c.chans[ch].xchg_slot;
    c.xout[ch] = (char *)c.chans[ch].peer_output + c.out_off;
    c.xstride[ch] = a.count;
    spin_t sp = {0, 0};
    for (;;) {
      uint64_t t1 = ld_acquire_sys(s);
      if (t1 == want) {
        uint64_t out = ld_volatile_u64(s + 1);
        uint64_t stride = ld_volatile_u64(s + 2);
        /* The words are read before the tag is read again: an unchanged
         * tag means they are the ones published under it. */
        __threadfence_system();
        if (ld_volatile_u64(s) == want && out != 0) {
          c.xout[ch] = (char *)(uintptr_t)out;
          c.xstride[ch] = stride;
        }
        break;
      }
      if (t1 > want) break;
      int r = spin_step(c, sp);
      if (r == SPIN_TIMEOUT) {
        /* Before any op, as the host executor reports it. */
        pos_t w;
        w.iter = 0;
        w.opi = 0;
        int peer = brd_ir_plan_chan(a.plan, a.rank, (int)ch)->peer;
        report_hang(c, w, BRD_EXEC_CUDA_WAIT_XCHG, peer, (int)ch, want, t1);
        return false;
      }
      if (r == SPIN_LEAVE) return false;
    }
  }
  return true;
}

/* ---- packs: 16 data bytes ---------------------------------------------- */

union pack_t {
  uint4 u4;
  uint64_t u64[2];
  uint32_t u32[4];
  uint16_t u16[8];
  uint8_t u8[16];
};

/* Element i of a pack, as raw bits of R. */
template <typename R>
__device__ __forceinline__ R pack_get(const pack_t &p, int i);
template <>
__device__ __forceinline__ uint8_t pack_get<uint8_t>(const pack_t &p, int i) {
  return p.u8[i];
}
template <>
__device__ __forceinline__ uint16_t pack_get<uint16_t>(const pack_t &p, int i) {
  return p.u16[i];
}
template <>
__device__ __forceinline__ uint32_t pack_get<uint32_t>(const pack_t &p, int i) {
  return p.u32[i];
}
template <>
__device__ __forceinline__ uint64_t pack_get<uint64_t>(const pack_t &p, int i) {
  return p.u64[i];
}

__device__ __forceinline__ void pack_set(pack_t &p, int i, uint8_t v) { p.u8[i] = v; }
__device__ __forceinline__ void pack_set(pack_t &p, int i, uint16_t v) { p.u16[i] = v; }
__device__ __forceinline__ void pack_set(pack_t &p, int i, uint32_t v) { p.u32[i] = v; }
__device__ __forceinline__ void pack_set(pack_t &p, int i, uint64_t v) { p.u64[i] = v; }

/* Widest access (1..16 bytes) that both the address and the byte count
 * allow: 16 for a whole aligned pack, less for a ragged tail or a buffer
 * that is not 16-byte aligned. */
__device__ __forceinline__ uint32_t access_width(const void *p, uint32_t valid) {
  uint32_t x = (uint32_t)(uintptr_t)p | valid | 16u;
  return x & (0u - x);
}

/* `valid` bytes at p in accesses of w bytes; the rest of the pack zero.
 * Out of line: only tails and unaligned buffers come here. */
__device__ __noinline__ uint4 load_plain_narrow(const char *p, uint32_t valid,
                                                uint32_t w) {
  pack_t v;
  v.u4 = make_uint4(0, 0, 0, 0);
  for (uint32_t off = 0; off < valid; off += w) {
    switch (w) {
    case 8: v.u64[off / 8] = __ldcg((const unsigned long long *)(p + off)); break;
    case 4: v.u32[off / 4] = __ldcg((const unsigned int *)(p + off)); break;
    case 2: v.u16[off / 2] = __ldcg((const unsigned short *)(p + off)); break;
    default: v.u8[off] = __ldcg((const unsigned char *)(p + off)); break;
    }
  }
  return v.u4;
}

__device__ __noinline__ void store_plain_narrow(char *p, uint32_t valid,
                                                uint32_t w, uint4 data) {
  pack_t v;
  v.u4 = data;
  for (uint32_t off = 0; off < valid; off += w) {
    switch (w) {
    case 8:
      __stcg((unsigned long long *)(p + off), (unsigned long long)v.u64[off / 8]);
      break;
    case 4: __stcg((unsigned int *)(p + off), v.u32[off / 4]); break;
    case 2: __stcg((unsigned short *)(p + off), v.u16[off / 2]); break;
    default: __stcg((unsigned char *)(p + off), v.u8[off]); break;
    }
  }
}

/* Loads `valid` (1..16) bytes at p; the rest of the pack is zero. */
__device__ __forceinline__ void load_plain(const char *p, uint32_t valid,
                                           pack_t &v) {
  uint32_t w = access_width(p, valid);
  if (w == 16) v.u4 = __ldcg((const uint4 *)p);
  else v.u4 = load_plain_narrow(p, valid, w);
}

/* Stores the first `valid` (1..16) bytes of v at p. */
__device__ __forceinline__ void store_plain(char *p, uint32_t valid,
                                            const pack_t &v) {
  uint32_t w = access_width(p, valid);
  if (w == 16) __stcg((uint4 *)p, v.u4);
  else store_plain_narrow(p, valid, w, v.u4);
}

/* LL: pack j of a chunk is packets 4j .. 4j+3 of its slot (32 bytes,
 * 16-byte aligned); only the packets holding valid bytes are touched. */

/* Issues the loads of pack j's packets without waiting for them. */
__device__ __forceinline__ void ll_issue(const char *slot, uint64_t j,
                                         uint32_t valid, uint64_t (&pk)[4]) {
  const uint64_t *p = (const uint64_t *)slot + 4 * j;
  if (valid == 16) {
    ld_volatile_v2(p, pk[0], pk[1]);
    ld_volatile_v2(p + 2, pk[2], pk[3]);
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; q++) pk[q] = q * 4u < valid ? ld_volatile_u64(p + q) : 0;
}

/* The data of one LL pack, or ok == 0 when a wait failed. */
struct ll_pack_t {
  uint4 data;
  int ok;
};

/* Polls pack j's packets (at p) until each carries `flag`. ok == 0: a wait
 * failed (timed out and reported, or told to leave). Out of line: data
 * that already arrived never gets here. */
__device__ __noinline__ ll_pack_t ll_wait_pack(const ctx_t &c, pos_t w,
                                               const uint64_t *p,
                                               uint32_t valid, uint32_t flag,
                                               uint32_t slot_index) {
  ll_pack_t res;
  pack_t v;
  v.u4 = make_uint4(0, 0, 0, 0);
  res.ok = 1;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    if (q * 4u >= valid) break;
    spin_t s = {0, 0};
    uint64_t x;
    while ((uint32_t)((x = ld_volatile_u64(p + q)) >> 32) != flag) {
      int r = spin_step(c, s);
      if (r == SPIN_TIMEOUT)
        report_hang(c, w, BRD_EXEC_CUDA_WAIT_PACKET, -1, (int)slot_index, flag,
                    x >> 32);
      if (r != SPIN_GO) {
        res.ok = 0;
        res.data = v.u4;
        return res;
      }
    }
    v.u32[q] = (uint32_t)x;
  }
  res.data = v.u4;
  return res;
}

/* Unpacks pack j from the packets ll_issue loaded, waiting for those whose
 * flag is not `flag` yet. false: a wait failed. */
__device__ __forceinline__ bool ll_finish(const ctx_t &c, pos_t w,
                                          const char *slot, uint64_t j,
                                          uint32_t valid, uint32_t flag,
                                          uint32_t slot_index,
                                          const uint64_t (&pk)[4], pack_t &v) {
  bool arrived = true;
#pragma unroll
  for (int q = 0; q < 4; q++)
    if (q * 4u < valid && (uint32_t)(pk[q] >> 32) != flag) arrived = false;
  if (arrived) {
#pragma unroll
    for (int q = 0; q < 4; q++) v.u32[q] = q * 4u < valid ? (uint32_t)pk[q] : 0u;
    return true;
  }
  ll_pack_t r = ll_wait_pack(c, w, (const uint64_t *)slot + 4 * j, valid, flag,
                             slot_index);
  v.u4 = r.data;
  return r.ok != 0;
}

/* Stores pack j as packets carrying `flag`; bytes past `valid` in the last
 * packet are zero, as the host executor writes them. */
__device__ __forceinline__ void ll_store(char *slot, uint64_t j,
                                         uint32_t valid, uint32_t flag,
                                         const pack_t &v) {
  uint64_t *p = (uint64_t *)slot + 4 * j;
  uint64_t f = (uint64_t)flag << 32;
  if (valid == 16) {
    st_volatile_v2(p, f | v.u32[0], f | v.u32[1]);
    st_volatile_v2(p + 2, f | v.u32[2], f | v.u32[3]);
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; q++)
    if (q * 4u < valid) st_volatile_u64(p + q, f | v.u32[q]);
}

/* Where the packs of one chunk of one op are. */
struct chunk_io_t {
  char *addr[BRD_IR_MAX_REFS]; /* chunk data, or LL slot */
  uint32_t llmask;             /* bit r: ref r is LL */
  uint32_t flag_src, flag_dst;
  uint64_t nbytes;
  uint64_t npacks;
};

__device__ __forceinline__ uint32_t pack_valid(const chunk_io_t &io, uint64_t j) {
  uint64_t left = io.nbytes - 16 * j;
  return left < 16 ? (uint32_t)left : 16u;
}

/* Loads packs j0 + u * stride (u < U) of source ref s; packs past the end
 * are zero. false: an LL wait failed. */
template <int U>
__device__ __forceinline__ bool load_packs(const ctx_t &c, pos_t w,
                                           const chunk_io_t &io, int s,
                                           uint32_t slot_index, uint64_t j0,
                                           uint32_t stride, pack_t (&v)[U]) {
  const char *base = io.addr[s];
  if (((io.llmask >> s) & 1u) == 0) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      uint64_t j = j0 + (uint64_t)u * stride;
      if (j < io.npacks) load_plain(base + 16 * j, pack_valid(io, j), v[u]);
      else v[u].u4 = make_uint4(0, 0, 0, 0);
    }
    return true;
  }
  uint64_t pk[U][4];
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint64_t j = j0 + (uint64_t)u * stride;
    if (j < io.npacks) ll_issue(base, j, pack_valid(io, j), pk[u]);
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint64_t j = j0 + (uint64_t)u * stride;
    if (j < io.npacks) {
      if (!ll_finish(c, w, base, j, pack_valid(io, j), io.flag_src, slot_index,
                     pk[u], v[u]))
        return false;
    } else {
      v[u].u4 = make_uint4(0, 0, 0, 0);
    }
  }
  return true;
}

/* Stores packs j0 + u * stride (u < U) to destination ref d. */
template <int U>
__device__ __forceinline__ void store_packs(const chunk_io_t &io, int d,
                                            uint64_t j0, uint32_t stride,
                                            const pack_t (&v)[U]) {
  char *base = io.addr[d];
  bool ll = ((io.llmask >> d) & 1u) != 0;
#pragma unroll
  for (int u = 0; u < U; u++) {
    uint64_t j = j0 + (uint64_t)u * stride;
    if (j >= io.npacks) continue;
    if (ll) ll_store(base, j, pack_valid(io, j), io.flag_dst, v[u]);
    else store_plain(base + 16 * j, pack_valid(io, j), v[u]);
  }
}

/* One source to every destination, bytes unchanged. One copy shared by
 * every kernel. */
__device__ __noinline__ bool copy_chunk(const ctx_t &c, pos_t w,
                                        const brd_ir_op_t *op,
                                        const chunk_io_t &io, uint32_t t) {
  const uint32_t stride = blockDim.x;
  const int nref = op->nsrc + op->ndst;
  for (uint64_t j0 = threadIdx.x; j0 < io.npacks;
       j0 += (uint64_t)COPY_UNROLL * stride) {
    pack_t v[COPY_UNROLL];
    if (!load_packs<COPY_UNROLL>(c, w, io, 0, op->ref[0].index + t, j0, stride, v))
      return false;
    for (int d = 1; d < nref; d++) store_packs<COPY_UNROLL>(io, d, j0, stride, v);
  }
  return true;
}

/* Every source combined (pre-op on the sources in pre_mask, post-op when
 * post), the result to every destination. Sources are combined in ref
 * order, as the host does. */
template <int DT, int FN>
__device__ __forceinline__ bool reduce_chunk(const ctx_t &c, pos_t w,
                                             const brd_ir_op_t *op,
                                             const chunk_io_t &io, uint32_t t,
                                             uint32_t pre_mask, bool post) {
  typedef brd::dt_traits<DT> Tr;
  typedef typename Tr::acc_t acc_t;
  typedef typename Tr::raw_t raw_t;
  const int N = 16 / (int)sizeof(raw_t);
  /* Narrow types hold 8 or 16 accumulators per pack: fewer packs in
   * flight keep them in registers. */
  const int U = sizeof(raw_t) >= 4 ? 4 : 2;
  const uint32_t stride = blockDim.x;
  const int nsrc = op->nsrc, nref = op->nsrc + op->ndst;
  const acc_t scalar = Tr::scalar(c.arg);

  for (uint64_t j0 = threadIdx.x; j0 < io.npacks; j0 += (uint64_t)U * stride) {
    pack_t v[U];
    acc_t acc[U][N];
    for (int s = 0; s < nsrc; s++) {
      if (!load_packs<U>(c, w, io, s, op->ref[s].index + t, j0, stride, v))
        return false;
      const bool pre = ((pre_mask >> s) & 1u) != 0;
#pragma unroll
      for (int u = 0; u < U; u++) {
#pragma unroll
        for (int i = 0; i < N; i++) {
          acc_t x = Tr::widen(pack_get<raw_t>(v[u], i));
          if (pre) x = Tr::pre(x, scalar);
          acc[u][i] = s == 0 ? x : brd::combine<Tr, FN>(acc[u][i], x);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
#pragma unroll
      for (int i = 0; i < N; i++) {
        acc_t r = post ? Tr::postdiv(acc[u][i], c.arg) : acc[u][i];
        pack_set(v[u], i, Tr::narrow(r));
      }
    }
    for (int d = nsrc; d < nref; d++) store_packs<U>(io, d, j0, stride, v);
  }
  return true;
}

/* Start of segment `seg` of an input or output (this rank's, or a peer's
 * output through a channel), and its element count in *count. */
__device__ __forceinline__ char *seg_base(const ctx_t &c, const brd_ir_ref_t &ref,
                                          uint32_t seg, uint64_t *count) {
  const kargs_t &a = *c.a;
  bool input = (ref.buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT;
  bool local = ref.chan == BRD_IR_CHAN_LOCAL;
  const brd_exec_cuda_seg_t *table = input ? c.in_segs : c.out_segs;
  if (table != NULL && local) {
    *count = table[seg].count;
    return (char *)table[seg].ptr;
  }
  *count = a.count;
  if (input) {
    const char *base = local ? a.input : (const char *)c.chans[ref.chan].peer_input;
    return (char *)base + (uint64_t)seg * a.in_stride * a.esize;
  }
  /* A direct output is the user's buffer: one half only. */
  if (local)
    return a.output + (a.out_direct ? 0 : c.out_off) + (uint64_t)seg * a.out_stride * a.esize;
  /* Exchanged: a published output has no half offset; a staged one got
   * this launch's in xchg_resolve. */
  if (a.xchg) return c.xout[ref.chan] + (uint64_t)seg * c.xstride[ref.chan] * a.esize;
  return (char *)c.chans[ref.chan].peer_output + c.out_off +
         (uint64_t)seg * a.out_stride * a.esize;
}

/* Address of chunk index+t (input/output, within its segment) or of slot
 * index+t (scratch). */
__device__ __forceinline__ char *ref_addr(const ctx_t &c, uint64_t iter,
                                          const brd_ir_ref_t &ref, uint32_t t) {
  const kargs_t &a = *c.a;
  uint32_t index = ref.index + t;
  if ((ref.buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH) {
    char *base = ref.chan == BRD_IR_CHAN_LOCAL
                     ? a.scratch : (char *)c.chans[ref.chan].peer_scratch;
    return base + c.phase_off + (uint64_t)index * a.slot_bytes;
  }
  uint64_t count, start, n;
  char *base = seg_base(c, ref, index / a.nchunks, &count);
  seg_chunk(a, count, iter, index % a.nchunks, &start, &n);
  return base + start * a.esize;
}

/* Elements of chunk op->chunk + t: those of the segment the op's first
 * input or output reference names (the launch's count for strided
 * segments and for ops between scratch slots). */
__device__ __forceinline__ uint64_t op_chunk_len(const ctx_t &c, uint64_t iter,
                                                 const brd_ir_op_t *op,
                                                 uint32_t t) {
  const kargs_t &a = *c.a;
  uint64_t count = a.count, start, n;
  for (int r = 0; r < op->nsrc + op->ndst; r++) {
    uint32_t kind = op->ref[r].buf & BRD_IR_BUF_MASK;
    if (kind != BRD_IR_BUF_INPUT && kind != BRD_IR_BUF_OUTPUT) continue;
    seg_base(c, op->ref[r], (op->ref[r].index + t) / a.nchunks, &count);
    break;
  }
  seg_chunk(a, count, iter, op->chunk + t, &start, &n);
  return n;
}

/* A data op (COPY .. PKT_REDUCE): every thread of the block. Out of line,
 * so the op loop and the data path are register-allocated apart. */
template <int DT, int FN>
__device__ __noinline__ bool run_data(const ctx_t &c, pos_t w, const brd_ir_op_t *op) {
  typedef brd::dt_traits<DT> Tr;
  const kargs_t &a = *c.a;
  const int nsrc = op->nsrc, nref = op->nsrc + op->ndst;
  chunk_io_t io;
  io.flag_dst = (uint32_t)(c.epoch + (uint64_t)seq_rel(c, w, op->k));
  io.flag_src = (uint32_t)(c.epoch + (uint64_t)seq_rel(c, w, op->k_src));
  io.llmask = 0;
  for (int r = 0; r < nref; r++)
    if (op->ref[r].buf & BRD_IR_REF_LL) io.llmask |= 1u << r;
  /* Only PreMulSum has a pre-op (on each rank's input, so it counts once
   * per rank) and only the integer average a post-op. */
  uint32_t pre_mask = 0;
  bool post = false;
  if (FN == brd::FN_SUMX) {
    if (a.fn == BRD_REDUCE_FN_PREMULSUM) {
      for (int s = 0; s < nsrc; s++)
        if ((op->ref[s].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT) pre_mask |= 1u << s;
    }
    post = Tr::is_int && a.fn == BRD_REDUCE_FN_SUMPOSTDIV &&
           (op->flags & BRD_IR_F_POSTOP) != 0;
  }
  const bool copy = nsrc == 1 && pre_mask == 0 && !post;

  for (uint32_t t = 0; t < op->nchunks; t++) {
    io.nbytes = op_chunk_len(c, w.iter, op, t) * a.esize;
    if (io.nbytes == 0) continue;
    io.npacks = (io.nbytes + 15) / 16;
    for (int r = 0; r < nref; r++) io.addr[r] = ref_addr(c, w.iter, op->ref[r], t);
    bool ok = copy ? copy_chunk(c, w, op, io, t)
                   : reduce_chunk<DT, FN>(c, w, op, io, t, pre_mask, post);
    if (!ok) return false;
  }
  return true;
}

/* Same reservation as brd_plan_epoch_reserve, from the device cursor. */
__device__ __forceinline__ uint64_t epoch_reserve(uint64_t cursor, uint64_t span) {
  const uint64_t wrap = (uint64_t)1 << 32;
  uint64_t next = (cursor / wrap + 1) * wrap;
  return span > 0 && cursor + span >= next ? next : cursor;
}

/* One rank's plan: block b runs plan block b's ops for every iteration,
 * BRD_EXEC_CUDA_NTHREADS threads sharing each data op and thread 0 doing
 * the synchronisation; templated over datatype and reduction kind only.
 * Ordering and sizing: see the file comment. */
template <int DT, int FN>
__global__ void __launch_bounds__(BRD_EXEC_CUDA_NTHREADS, 1)
exec_kernel(const __grid_constant__ kargs_t a) {
  __shared__ ctx_t s_ctx;
  __shared__ unsigned int s_launches;
  __shared__ uint64_t s_chan_ep[BRD_EXEC_CUDA_INLINE_CHANS];
  state_t *st = a.state;
  if (threadIdx.x == 0) {
    unsigned long long arg = a.arg;
    if (a.scalar_dev != NULL) {
      arg = 0;
      memcpy(&arg, a.scalar_dev, a.esize); /* little-endian: low bytes */
    }
    uint32_t launches;
    if (a.device_epoch) {
      /* Stable for the whole launch: only the last block to finish moves
       * them, after every block has read them. */
      s_ctx.epoch = epoch_reserve(*(volatile unsigned long long *)&st->cursor, a.span);
      launches = *(volatile unsigned int *)&st->launches;
    } else {
      s_ctx.epoch = a.epoch;
      launches = a.phase;
    }
    s_launches = launches;
    s_ctx.a = &a;
    s_ctx.chans = a.chans_dev != NULL ? a.chans_dev : a.chans;
    s_ctx.in_segs = a.in_segs_dev != NULL ? a.in_segs_dev
                    : a.n_in_segs > 0 ? a.in_segs : NULL;
    s_ctx.out_segs = a.out_segs_dev != NULL ? a.out_segs_dev
                     : a.n_out_segs > 0 ? a.out_segs : NULL;
    s_ctx.chan_epoch = a.chan_epoch_dev != NULL ? a.chan_epoch_dev
                       : a.has_chan_epoch ? a.chan_epoch : NULL;
    if (a.chan_cursor != NULL) {
      /* Stable for the launch, as the device epoch: only the last block
       * out advances the cursors. */
      uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
      for (uint32_t ch = 0; ch < nch; ch++) {
        int peer = brd_ir_plan_chan(a.plan, a.rank, (int)ch)->peer;
        s_chan_ep[ch] = epoch_reserve(*(volatile unsigned long long *)&a.chan_cursor[peer],
                                      a.chan_epoch[ch]);
      }
      s_ctx.chan_epoch = s_chan_ep;
    }
    s_ctx.phase_off = (uint64_t)(launches & 1u) * a.half_bytes;
    s_ctx.out_off = a.device_epoch ? (uint64_t)(launches & 1u) * a.out_half : 0;
    s_ctx.arg = arg;
    s_ctx.seq_per_iter = a.plan->seq_per_iter;
  }
  /* A launch after a failure leaves at once (brd_exec_cuda_status_reset). */
  bool leave = __syncthreads_or(threadIdx.x == 0 &&
                                *(volatile unsigned int *)&st->stop != 0);
  if (a.xchg && a.niter > 0 && !leave) {
    /* Every rank publishes before it waits, so no rank waits on one that
     * has not published; the other blocks need not wait for block 0 (all
     * are resident). A failed resolve leaves like a failed op. */
    bool ok = true;
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) xchg_publish(s_ctx);
      ok = xchg_resolve(s_ctx);
    }
    leave = __syncthreads_or(!ok);
  }
  const ctx_t &c = s_ctx;
  const brd_ir_block_t *blk = brd_ir_plan_block(a.plan, a.rank, (int)blockIdx.x);
  const brd_ir_op_t *ops = brd_ir_plan_ops(a.plan, a.rank, (int)blockIdx.x);
  const uint32_t nops = blk->nops;
  uint32_t bar_seen = 0; /* barriers passed in this launch (thread 0) */
  pos_t w;

  for (w.iter = 0; w.iter < a.niter && !leave; w.iter++) {
    for (uint32_t i = 0; i < nops; i++) {
      const brd_ir_op_t *op = &ops[i];
      w.opi = (int)i;
      bool ok = true;
      switch (op->code) {
      case BRD_IR_OP_WAIT:
        if (threadIdx.x == 0) ok = run_wait(c, w, op);
        break;
      case BRD_IR_OP_SIGNAL:
        if (threadIdx.x == 0) run_signal(c, w, op);
        break;
      case BRD_IR_OP_BARRIER:
        if (threadIdx.x == 0) ok = run_barrier(c, w, bar_seen++);
        break;
      case BRD_IR_OP_COPY:
      case BRD_IR_OP_REDUCE:
      case BRD_IR_OP_PUT:
      case BRD_IR_OP_GET:
      case BRD_IR_OP_PKT_PUT:
      case BRD_IR_OP_PKT_REDUCE:
        ok = run_data<DT, FN>(c, w, op);
        break;
      default: /* NOP; plan creation rejected every other code */
        break;
      }
      if (__syncthreads_or(!ok)) {
        leave = true;
        break;
      }
    }
  }

  if ((a.device_epoch || a.chan_cursor != NULL) && threadIdx.x == 0) {
    /* The last block out advances the cursors past this launch (failed or
     * not, so every rank's cursors stay in step) and flips the phase. */
    __threadfence();
    if (atomicAdd(&st->done, 1u) + 1u == gridDim.x) {
      st->done = 0;
      if (a.device_epoch) {
        st->cursor = c.epoch + a.span;
        st->launches = s_launches + 1u;
      }
      if (a.chan_cursor != NULL) {
        uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
        for (uint32_t ch = 0; ch < nch; ch++)
          a.chan_cursor[brd_ir_plan_chan(a.plan, a.rank, (int)ch)->peer] =
              s_chan_ep[ch] + a.chan_epoch[ch];
      }
      __threadfence();
    }
  }
}

#define BRD_KERNELS_OF(DT)                                                    \
  {BRD_KERNEL(exec_kernel<DT, brd::FN_SUM>),                                  \
   BRD_KERNEL(exec_kernel<DT, brd::FN_PROD>),                                 \
   BRD_KERNEL(exec_kernel<DT, brd::FN_MIN>),                                  \
   BRD_KERNEL(exec_kernel<DT, brd::FN_MAX>),                                  \
   BRD_KERNEL(exec_kernel<DT, brd::FN_SUMX>)}

/* [ncclDataType_t][FN_*] */
const void *const kernels[ncclNumTypes][brd::FN_COUNT] = {
    BRD_KERNELS_OF(ncclInt8),     BRD_KERNELS_OF(ncclUint8),
    BRD_KERNELS_OF(ncclInt32),    BRD_KERNELS_OF(ncclUint32),
    BRD_KERNELS_OF(ncclInt64),    BRD_KERNELS_OF(ncclUint64),
    BRD_KERNELS_OF(ncclFloat16),  BRD_KERNELS_OF(ncclFloat32),
    BRD_KERNELS_OF(ncclFloat64),  BRD_KERNELS_OF(ncclBfloat16),
    BRD_KERNELS_OF(ncclFloat8e4m3), BRD_KERNELS_OF(ncclFloat8e5m2),
};

int fn_kind(int fn) {
  switch (fn) {
  case BRD_REDUCE_FN_PROD: return brd::FN_PROD;
  case BRD_REDUCE_FN_MIN: return brd::FN_MIN;
  case BRD_REDUCE_FN_MAX: return brd::FN_MAX;
  case BRD_REDUCE_FN_PREMULSUM:
  case BRD_REDUCE_FN_SUMPOSTDIV: return brd::FN_SUMX;
  default: return brd::FN_SUM;
  }
}

/* ---- host side --------------------------------------------------------- */

/* Copies bytes from src to dst (src NULL: zeroes dst) on a private
 * non-blocking stream and waits for it, so a setup copy neither waits for
 * nor is overtaken by other streams' work: the legacy default stream would
 * wait for peers' kernels, which may be spinning on this rank. */
ncclResult_t private_copy(void *dst, const void *src, size_t bytes,
                          cudaMemcpyKind kind, const char *what) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags", res, out);
  if (src == NULL) {
    CUDA_CHECK_GOTO(cudaMemsetAsync(dst, 0, bytes, s), what, res, out_stream);
  } else {
    CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, kind, s), what, res,
                    out_stream);
  }
  CUDA_CHECK_GOTO(cudaStreamSynchronize(s), what, res, out_stream);
out_stream:
  cudaStreamDestroy(s);
out:
  return res;
}

} /* namespace */

struct brd_exec_cuda_plan {
  brd_ir_plan_t *host; /* owned: brd_plan_clone */
  brd_ir_plan_t *dev;  /* owned: cudaMalloc, the same bytes */
};

struct brd_exec_cuda_status {
  report_t *host;   /* owned: cudaHostAlloc (mapped) */
  report_t *dev;    /* the device's view of host */
  state_t *state;   /* owned: cudaMalloc */
  int reported;     /* the current failure was logged */
};

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_plan_create(const brd_ir_plan_t *plan,
                                                  brd_exec_cuda_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_plan_t *cp;
  int dev = 0, nsm = 0;
  CHECK(brd_exec_cuda_plan_check(plan));
  CUDA_CHECK_GOTO(cudaGetDevice(&dev), "cudaGetDevice", res, out);
  CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev),
                  "cudaDeviceGetAttribute(multiProcessorCount)", res, out);
  if (plan->nblocks > nsm) {
    WARN("CUDA executor: a plan of %u blocks per rank cannot have every block "
         "resident on device %d, which has %d SMs; generate it with at most "
         "%d blocks (NCCL_MAX_CTAS)", plan->nblocks, dev, nsm, nsm);
    res = ncclInvalidArgument;
    goto out;
  }
  cp = (brd_exec_cuda_plan_t *)calloc(1, sizeof(*cp));
  if (cp == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor plan",
         sizeof(*cp));
    res = ncclSystemError;
    goto out;
  }
  CHECK_GOTO(brd_plan_clone(plan, &cp->host), res, fail_free);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&cp->dev, plan->total_bytes),
                  "cudaMalloc for a plan", res, fail_destroy_host);
  CHECK_GOTO(private_copy(cp->dev, plan, plan->total_bytes, cudaMemcpyHostToDevice,
                          "copying a plan to the device"), res, fail_free_dev);
  *plan_out = cp;
  return ncclSuccess;
fail_free_dev:
  cudaFree(cp->dev);
fail_destroy_host:
  brd_plan_destroy(cp->host);
fail_free:
  free(cp);
out:
  return res;
}

/* See exec_cuda.h. */
extern "C" void brd_exec_cuda_plan_destroy(brd_exec_cuda_plan_t *plan) {
  if (plan == NULL) return;
  cudaFree(plan->dev);
  brd_plan_destroy(plan->host);
  free(plan);
}

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_status_create(brd_exec_cuda_status_t **st_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_status_t *st =
      (brd_exec_cuda_status_t *)calloc(1, sizeof(brd_exec_cuda_status_t));
  if (st == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor status",
         sizeof(*st));
    return ncclSystemError;
  }
  CUDA_CHECK_GOTO(cudaHostAlloc((void **)&st->host, sizeof(report_t),
                                cudaHostAllocMapped),
                  "cudaHostAlloc (mapped) for the hang report", res, fail_free);
  memset(st->host, 0, sizeof(report_t));
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&st->dev, st->host, 0),
                  "cudaHostGetDevicePointer for the hang report", res, fail_free_host);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&st->state, sizeof(state_t)),
                  "cudaMalloc for the executor state", res, fail_free_host);
  CHECK_GOTO(private_copy(st->state, NULL, sizeof(state_t), cudaMemcpyDefault,
                          "zeroing the executor state"), res, fail_free_state);
  *st_out = st;
  return ncclSuccess;
fail_free_state:
  cudaFree(st->state);
fail_free_host:
  cudaFreeHost(st->host);
fail_free:
  free(st);
  return res;
}

/* See exec_cuda.h. */
extern "C" size_t brd_exec_cuda_status_device_bytes(void) { return sizeof(state_t); }

/* See exec_cuda.h. */
extern "C" void brd_exec_cuda_status_destroy(brd_exec_cuda_status_t *st) {
  if (st == NULL) return;
  cudaFree(st->state);
  cudaFreeHost(st->host);
  free(st);
}

/* See exec_cuda.h. */
extern "C" void brd_exec_cuda_status_abort(brd_exec_cuda_status_t *st) {
  __atomic_store_n(&st->host->abort, 1, __ATOMIC_RELEASE);
}

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_status_reset(brd_exec_cuda_status_t *st) {
  ncclResult_t res = ncclSuccess;
  state_t s;
  CHECK_GOTO(private_copy(&s, st->state, sizeof(s), cudaMemcpyDeviceToHost,
                          "reading the executor state"), res, out);
  s.claimed = 0;
  s.stop = 0;
  s.bar_count = 0;
  s.done = 0;
  CHECK_GOTO(private_copy(st->state, &s, sizeof(s), cudaMemcpyHostToDevice,
                          "resetting the executor state"), res, out);
  memset(st->host, 0, sizeof(report_t));
  st->reported = 0;
out:
  return res;
}

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_poll(brd_exec_cuda_status_t *st,
                                           brd_exec_cuda_hang_t *hang_out) {
  const volatile report_t *r = st->host;
  int failed = r->failed;
  if (failed == FAIL_NONE) return ncclSuccess;
  if (failed == FAIL_ABORT) {
    if (!st->reported)
      INFO(BRD_SUBSYS_COLL, "CUDA executor: launch stopped by the abort flag");
    st->reported = 1;
    return ncclSystemError;
  }
  brd_exec_cuda_hang_t h;
  h.rank = r->hang.rank;
  h.block = r->hang.block;
  h.op = r->hang.op;
  h.iter = r->hang.iter;
  h.what = r->hang.what;
  h.peer = r->hang.peer;
  h.index = r->hang.index;
  h.expected = r->hang.expected;
  h.seen = r->hang.seen;
  if (!st->reported) brd_exec_cuda_hang_warn(&h, (double)r->timeout_ns * 1e-9);
  st->reported = 1;
  if (hang_out != NULL) *hang_out = h;
  return ncclRemoteError;
}

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_chans_create(const brd_exec_cuda_chan_t *chans,
                                                   uint32_t n,
                                                   brd_exec_cuda_chan_t **dev_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_chan_t *dev = NULL;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(*dev);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&dev, bytes), "cudaMalloc for a channel table",
                  res, out);
  if (n > 0)
    CHECK_GOTO(private_copy(dev, chans, (size_t)n * sizeof(*dev),
                            cudaMemcpyHostToDevice, "copying a channel table"),
               res, fail_free);
  *dev_out = dev;
  return ncclSuccess;
fail_free:
  cudaFree(dev);
out:
  return res;
}

/* See exec_cuda.h. */
extern "C" void brd_exec_cuda_chans_destroy(brd_exec_cuda_chan_t *dev) {
  if (dev != NULL) cudaFree(dev);
}

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_launch(const brd_exec_cuda_args_t *args,
                                             cudaStream_t stream) {
  if (args->plan == NULL || args->status == NULL) {
    WARN("CUDA executor: launch without a %s",
         args->plan == NULL ? "plan" : "status block");
    return ncclInvalidArgument;
  }
  const brd_ir_plan_t *p = args->plan->host;
  if (args->rank < 0 || args->rank >= p->nranks) {
    WARN("CUDA executor: rank %d outside a plan of %d ranks", args->rank, p->nranks);
    return ncclInvalidArgument;
  }
  if (!args->device_epoch && args->phase > 1) {
    WARN("CUDA executor: scratch phase %u (expected 0 or 1)", args->phase);
    return ncclInvalidArgument;
  }
  /* A device scalar is read by the kernel; any value of the type serves to
   * resolve the op here. */
  uint64_t zero = 0;
  brd_reduce_op_t op;
  CHECK(brd_reduce_op_init(args->dtype, args->redop, p->nranks,
                           args->scalar_dev != NULL ? &zero : args->scalar, &op));
  if (args->count == 0) return ncclSuccess;

  uint32_t nchans = brd_ir_plan_rank(p, args->rank)->nchans;
  CHECK(brd_exec_cuda_args_check(args, p, nchans));
  brd_plan_layout_t l;
  CHECK(brd_plan_layout_init(p, args->count, args->dtype, args->scratch_bytes, &l));
  if (l.half_bytes % 16 != 0) {
    WARN("CUDA executor: rank %d scratch of %zu bytes: each phase must be a "
         "multiple of 16 bytes (brd_plan_scratch_bytes)", args->rank,
         args->scratch_bytes);
    return ncclInvalidArgument;
  }
  uint64_t span = brd_plan_epoch_span(p, &l);
  if (!args->device_epoch && args->chan_cursor_dev == NULL)
    CHECK(brd_exec_cuda_epochs_check(args, nchans, span));

  kargs_t ka;
  memset(&ka, 0, sizeof(ka));
  ka.plan = args->plan->dev;
  ka.chans_dev = args->chans_dev;
  ka.in_segs_dev = args->in_segs_dev;
  ka.out_segs_dev = args->out_segs_dev;
  ka.chan_epoch_dev = args->chan_epoch_dev;
  ka.chan_cursor = (unsigned long long *)args->chan_cursor_dev;
  ka.input = (const char *)args->input;
  ka.output = (char *)args->output;
  ka.scratch = (char *)args->scratch;
  ka.scalar_dev = args->scalar_dev;
  ka.report = args->status->dev;
  ka.state = args->status->state;
  ka.arg = op.arg;
  ka.epoch = args->epoch;
  ka.span = span;
  ka.niter = l.niter;
  ka.count = l.count;
  ka.esize = l.esize;
  ka.align = l.align;
  ka.chunk_max = l.chunk_max;
  ka.window = l.window;
  ka.slot_bytes = l.slot_bytes;
  ka.half_bytes = l.half_bytes;
  ka.out_half = args->device_epoch ? args->out_half_bytes : 0;
  double timeout_s = args->timeout_s > 0 ? args->timeout_s
                                         : (double)brd_param_int(BRD_P_BRAID_TIMEOUT);
  ka.timeout_ns = (unsigned long long)(timeout_s * 1e9);
  ka.in_stride = args->in_stride ? args->in_stride : args->count;
  ka.out_stride = args->out_stride ? args->out_stride : args->count;
  ka.nchunks = l.nchunks;
  ka.phase = args->phase;
  ka.rank = args->rank;
  ka.fn = op.fn;
  ka.device_epoch = args->device_epoch != 0;
  ka.fixed = l.fixed;
  ka.xchg = args->xchg != 0;
  ka.out_direct = args->out_direct != 0;
  if (args->chans_dev == NULL && nchans > 0)
    memcpy(ka.chans, args->chans, nchans * sizeof(ka.chans[0]));
  if (args->chan_epoch_dev == NULL && args->chan_epoch != NULL) {
    ka.has_chan_epoch = 1;
    memcpy(ka.chan_epoch, args->chan_epoch, nchans * sizeof(ka.chan_epoch[0]));
  }
  if (args->in_segs_dev == NULL && args->in_segs != NULL && args->n_in_segs > 0) {
    ka.n_in_segs = args->n_in_segs;
    memcpy(ka.in_segs, args->in_segs, args->n_in_segs * sizeof(ka.in_segs[0]));
  }
  if (args->out_segs_dev == NULL && args->out_segs != NULL && args->n_out_segs > 0) {
    ka.n_out_segs = args->n_out_segs;
    memcpy(ka.out_segs, args->out_segs, args->n_out_segs * sizeof(ka.out_segs[0]));
  }

  void *params[1] = {&ka};
  cudaError_t e = cudaLaunchKernel(kernels[args->dtype][fn_kind(op.fn)],
                                   dim3(p->nblocks), dim3(BRD_EXEC_CUDA_NTHREADS),
                                   params, 0, stream);
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching rank %d's kernel (%u blocks) failed: %s "
         "(CUDA error %d)", args->rank, p->nblocks, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ---- copy out of a staging half ------------------------------------------ */

namespace {

/* Copies nseg segments out of the half of src the last device-epoch launch
 * used. W is the width of one move (16, 8, 4 or 1 bytes), which divides
 * every pointer, size and stride. Grid-stride over every W-unit of every
 * segment, each unit read and written once (cache-global: nothing is
 * reused). The phase is read once per thread (it does not change while
 * this kernel runs: the launch that set it has finished on this stream). */
template <typename W>
__global__ void copyout_kernel(const state_t *st, const char *src,
                               unsigned long long half, char *dst,
                               unsigned long long units, unsigned int nseg,
                               unsigned long long src_stride,
                               unsigned long long dst_stride) {
  unsigned int launches = *(volatile const unsigned int *)&st->launches;
  const char *s = src + (unsigned long long)((launches - 1u) & 1u) * half;
  unsigned long long total = units * nseg;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
       i < total; i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long seg = i / units, u = i % units;
    __stcg((W *)(dst + seg * dst_stride + u * sizeof(W)),
           __ldcg((const W *)(s + seg * src_stride + u * sizeof(W))));
  }
}

} /* namespace */

/* See exec_cuda.h. */
extern "C" ncclResult_t brd_exec_cuda_copyout(const brd_exec_cuda_copyout_t *c,
                                              cudaStream_t stream) {
  if (c->nseg == 0 || c->seg_bytes == 0) return ncclSuccess;
  if (c->status == NULL || c->src == NULL || c->dst == NULL) {
    WARN("CUDA executor: copy-out without a %s",
         c->status == NULL ? "status block" : c->src == NULL ? "source" : "destination");
    return ncclInvalidArgument;
  }
  if ((c->nseg - 1) * c->src_stride + c->seg_bytes > c->half_bytes) {
    WARN("CUDA executor: copy-out of %u segments of %zu bytes %zu apart leaves a "
         "staging half of %zu bytes", c->nseg, c->seg_bytes, c->src_stride,
         c->half_bytes);
    return ncclInvalidArgument;
  }
  uintptr_t any = (uintptr_t)c->src | (uintptr_t)c->dst | c->seg_bytes | c->half_bytes |
                  c->src_stride | c->dst_stride;
  int w = any % 16 == 0 ? 16 : any % 8 == 0 ? 8 : any % 4 == 0 ? 4 : 1;
  unsigned long long units = c->seg_bytes / (size_t)w;
  unsigned long long total = units * c->nseg;
  unsigned long long want = (total + BRD_EXEC_CUDA_NTHREADS - 1) / BRD_EXEC_CUDA_NTHREADS;
  unsigned int blocks = want < 256 ? (unsigned int)want : 256u;
  const state_t *st = c->status->state;
  const char *src = (const char *)c->src;
  char *dst = (char *)c->dst;
  unsigned long long half = c->half_bytes, ss = c->src_stride, ds = c->dst_stride;
  unsigned int nseg = c->nseg;
  const void *fn = w == 16  ? BRD_KERNEL(copyout_kernel<uint4>)
                   : w == 8 ? BRD_KERNEL(copyout_kernel<unsigned long long>)
                   : w == 4 ? BRD_KERNEL(copyout_kernel<unsigned int>)
                            : BRD_KERNEL(copyout_kernel<unsigned char>);
  void *params[8] = {&st, &src, &half, &dst, &units, &nseg, &ss, &ds};
  cudaError_t e = cudaLaunchKernel(fn, dim3(blocks), dim3(BRD_EXEC_CUDA_NTHREADS),
                                   params, 0, stream);
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching a copy-out of %u x %zu bytes failed: %s (CUDA "
         "error %d)", c->nseg, c->seg_bytes, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}
