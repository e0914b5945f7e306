/*
 * Braid CUDA executor, kernels: one kernel launch runs one rank's part of a
 * plan. See exec_cuda.h for the interface, exec_cuda.c for its host half
 * (objects, checks, launch set-up), exec_kernel.h for the two entry points
 * this file exports to it, ir.h and ir_addr.h for the semantics; the host
 * executor (exec_host.c) is the reference reading this file follows.
 *
 * Algorithm: block b of the grid runs the op list of plan block b, once per
 * loop iteration, all its threads together (with an output exchange, thread
 * 0 of every block first learns where each channel peer's output is). Data
 * ops split each chunk into 16-byte packs, pack j to thread j mod blockDim,
 * several packs per thread in flight (loads of every pack issued before any
 * is used); switch ops (MC_*, sm_90+: multimem through the multicast
 * mapping of a switch channel) split packs the same way, one in flight;
 * SIGNAL, WAIT, BARRIER and MC_BARRIER are done by thread 0. Every op ends with __syncthreads_or,
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
 *   MC_BARRIER __syncthreads, then thread 0: fence.sc.sys +
 *           multimem.st.release.sys of the sequence number into this
 *           rank's word of every member's copy, then ld.acquire.sys of
 *           every member's word in its own (unicast) copy;
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

#include <string.h>

#include <cuda_runtime.h>

#include "device/exec_cuda.h"
#include "device/exec_kernel.h"
#include "device/ir_addr.h"
#include "device/layout.h"
#include "device/redop.cuh"

extern "C" {
#include "device/redop.h"
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

/* Packs (16 bytes) in flight per thread: in a plain copy, and per source
 * in a reduction of 4- and 8-byte elements (narrower ones keep half as
 * many, their accumulators being wider than the data). A loop iteration
 * waits one memory latency for them, so with one block per SM these set
 * the bytes a block has in flight (512 threads x 4 x 16 = 32 KiB). The
 * build may set other values (make EXEC_UNROLL=8) to measure them. */
#ifndef BRD_EXEC_UNROLL
#define BRD_EXEC_UNROLL 4
#endif
const int COPY_UNROLL = BRD_EXEC_UNROLL;
const int REDUCE_UNROLL = BRD_EXEC_UNROLL;

/* The host half's types (exec_kernel.h), by their short names here. */
typedef brd_exec_report_t report_t;
typedef brd_exec_state_t state_t;
typedef brd_exec_kargs_t kargs_t;

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
  brd_ir_view_t v;       /* addressing (device/ir_addr.h) */
  const brd_exec_cuda_chan_t *chans;
  uint64_t out_off;      /* phase * out_half, into a peer's staged output */
  uint64_t arg;          /* the reduction's scalar or divisor */
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

/* ---- failure paths (out of line: never hot) ----------------------------- */

__device__ __noinline__ void stop_launch(const ctx_t &c) {
  atomicExch(&c.a->state->stop, 1u);
  __threadfence();
}

/* Claims the report for an abort (the first failure wins) and stops. */
__device__ __noinline__ void note_abort(const ctx_t &c) {
  if (atomicCAS(&c.a->state->claimed, 0u, 1u) == 0u) {
    volatile report_t *r = c.a->report;
    r->failed = BRD_EXEC_FAIL_ABORT;
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
    r->hang.epoch = c.v.epoch;
    r->hang.phase = c.v.phase;
    uint64_t stuck = r->stuck_ns;
    r->timeout_ns = stuck != 0 && stuck < c.a->timeout_ns ? stuck : c.a->timeout_ns;
    /* The fields reach host memory before `failed` says they are valid. */
    __threadfence_system();
    r->failed = BRD_EXEC_FAIL_HANG;
    __threadfence_system();
  }
  stop_launch(c);
}

enum { SPIN_GO = 0, SPIN_TIMEOUT = 1, SPIN_LEAVE = 2 };

struct spin_t {
  uint32_t n;
  uint64_t deadline; /* 0 until the first check */
};

/* The report's stuck_ns (exec_kernel.h): a shorter limit the host sets
 * once a peer is known gone. */
__device__ __forceinline__ bool spin_stuck(const ctx_t &c, const spin_t &s, uint64_t t) {
  uint64_t stuck = *(volatile uint64_t *)&c.a->report->stuck_ns;
  return stuck != 0 && t + c.a->timeout_ns > s.deadline + stuck;
}

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
  else if (t > s.deadline || spin_stuck(c, s, t)) return SPIN_TIMEOUT;
  return SPIN_GO;
}

/* ---- SIGNAL, WAIT, BARRIER (thread 0 only) ------------------------------ */

__device__ __noinline__ bool run_wait(const ctx_t &c, pos_t w,
                                      const brd_ir_op_t *op) {
  if (brd_ir_seq_rel(&c.v, w.iter, op->k) <= 0)
    return true; /* names a point before this launch */
  uint64_t target = brd_ir_sem_value(&c.v, op->ref[0].chan, w.iter, op->k);
  const uint64_t *sem = c.chans[op->ref[0].chan].sems + op->ref[0].index;
  spin_t s = {0, 0};
  uint64_t v;
  while ((v = ld_acquire_sys(sem)) < target) {
    int r = spin_step(c, s);
    if (r == SPIN_TIMEOUT) {
      int peer = brd_ir_plan_chan(c.a->plan, c.a->rank, op->ref[0].chan)->peer;
      report_hang(c, w, BRD_EXEC_WAIT_SEM, peer, op->ref[0].index, target, v);
      return false;
    }
    if (r == SPIN_LEAVE) return false;
  }
  return true;
}

/* ---- port channels (thread 0 only; device/exec.h) ------------------------ */

/* Is channel `chan` of this rank a port channel? */
__device__ __forceinline__ bool is_port(const ctx_t &c, unsigned chan) {
  return chan != BRD_IR_CHAN_LOCAL &&
         brd_ir_plan_chan(c.a->plan, c.a->rank, (int)chan)->type == BRD_IR_CHAN_PORT;
}

/* Posts "ship [addr, addr + len) of the mirror of chan's peer" to the
 * proxy: reserves a slot, waits while the FIFO is full, writes the entry
 * and, after a system-scope fence (which also orders the block's writes
 * to the mirror, made visible to thread 0 by the op's __syncthreads),
 * its seq. false: the wait timed out (reported) or was told to leave. */
__device__ __noinline__ bool port_post(const ctx_t &c, pos_t w, unsigned chan,
                                       const void *addr, uint64_t len, uint32_t kind) {
  brd_exec_fifo_t *f = c.a->state->fifo;
  int peer = brd_ir_plan_chan(c.a->plan, c.a->rank, (int)chan)->peer;
  uint64_t base = ld_volatile_u64(&f->mirror[peer]);
  unsigned long long slot = atomicAdd(&c.a->state->port_head, 1ull);
  spin_t s = {0, 0};
  uint64_t tail;
  while (slot - (tail = ld_volatile_u64(&f->tail)) >= BRD_EXEC_FIFO_ENTRIES) {
    int r = spin_step(c, s);
    if (r == SPIN_TIMEOUT) {
      report_hang(c, w, BRD_EXEC_WAIT_PORT, peer, -1, slot, tail);
      return false;
    }
    if (r == SPIN_LEAVE) return false;
  }
  brd_exec_trigger_t *e = &f->ring[slot % BRD_EXEC_FIFO_ENTRIES];
  if (kind == BRD_EXEC_PUT_SEM)
    for (uint64_t i = 0; i < len / 8 && i < 3; i++)
      st_volatile_u64(&e->val[i], ld_volatile_u64((const uint64_t *)addr + i));
  st_volatile_u64(&e->off, (uint64_t)((const char *)addr - (const char *)(uintptr_t)base));
  st_volatile_u64(&e->len, len);
  st_volatile_u64((uint64_t *)&e->peer, (uint64_t)(uint32_t)peer | ((uint64_t)kind << 32));
  __threadfence_system();
  st_volatile_u64(&e->seq, slot + 1);
  return true;
}

__device__ __noinline__ bool run_signal(const ctx_t &c, pos_t w,
                                        const brd_ir_op_t *op) {
  uint64_t value = brd_ir_sem_value(&c.v, op->ref[0].chan, w.iter, op->k);
  uint64_t *sem = c.chans[op->ref[0].chan].peer_sems + op->ref[0].index;
  /* The block's writes reached thread 0 through the previous op's
   * __syncthreads; the system-scope fence orders them, for every observer,
   * before the semaphore moves. */
  __threadfence_system();
  st_release_sys(sem, value);
  if (is_port(c, op->ref[0].chan))
    return port_post(c, w, op->ref[0].chan, sem, sizeof(*sem), BRD_EXEC_PUT_SEM);
  return true;
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
        report_hang(c, w, BRD_EXEC_WAIT_BARRIER, -1, (int)seen, nblocks,
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
__device__ __noinline__ bool xchg_publish(const ctx_t &c) {
  const kargs_t &a = *c.a;
  uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
  for (uint32_t ch = 0; ch < nch; ch++) {
    uint64_t *s = c.chans[ch].xchg_pub;
    st_volatile_u64(s, 0);
    /* Every observer sees the cleared tag before any word changes. */
    __threadfence_system();
    st_volatile_u64(s + 1, (uint64_t)(uintptr_t)c.chans[ch].xchg_output);
    st_volatile_u64(s + 2, a.out_stride);
    st_release_sys(s, c.v.epoch + 1);
    pos_t w = {0, -1};
    if (is_port(c, ch) && !port_post(c, w, ch, s, 3 * sizeof(*s), BRD_EXEC_PUT_SEM))
      return false;
  }
  return true;
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
  uint64_t want = c.v.epoch + 1;
  for (uint32_t ch = 0; ch < nch; ch++) {
    const uint64_t *s = c.chans[ch].xchg_slot;
    c.xout[ch] = (char *)c.chans[ch].peer_output + c.out_off;
    c.xstride[ch] = a.layout.count;
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
        report_hang(c, w, BRD_EXEC_WAIT_XCHG, peer, (int)ch, want, t1);
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
        report_hang(c, w, BRD_EXEC_WAIT_PACKET, -1, (int)slot_index, flag,
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
  const int U = sizeof(raw_t) >= 4 ? REDUCE_UNROLL : (REDUCE_UNROLL + 1) / 2;
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

/* Start of segment `seg` of an input or output: this rank's own
 * (ir_addr.h), a peer's input, or a peer's output as the exchange
 * resolved it (a published output has no half offset; a staged one got
 * this launch's in xchg_resolve) or in the launch's half of its staging. */
__device__ __forceinline__ char *seg_base(const ctx_t &c, const brd_ir_ref_t &ref,
                                          uint32_t seg) {
  if (ref.chan == BRD_IR_CHAN_LOCAL) return brd_ir_local_seg(&c.v, &ref, seg);
  const brd_exec_cuda_chan_t &ch = c.chans[ref.chan];
  if ((ref.buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT)
    return brd_ir_seg_at(&c.v, ch.peer_input, seg, c.v.in_stride);
  if (c.a->xchg) return brd_ir_seg_at(&c.v, c.xout[ref.chan], seg, c.xstride[ref.chan]);
  return brd_ir_seg_at(&c.v, (char *)ch.peer_output + c.out_off, seg, c.v.out_stride);
}

/* Address of chunk index+t (input/output, within its segment) or of slot
 * index+t (scratch). */
__device__ __forceinline__ char *ref_addr(const ctx_t &c, uint64_t iter,
                                          const brd_ir_ref_t &ref, uint32_t t) {
  uint32_t index = ref.index + t;
  if ((ref.buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH)
    return brd_ir_slot_addr(&c.v, ref.chan == BRD_IR_CHAN_LOCAL
                                      ? c.a->scratch : (char *)c.chans[ref.chan].peer_scratch,
                            index);
  uint32_t seg = index / c.v.layout.nchunks;
  return brd_ir_chunk_addr(&c.v, seg_base(c, ref, seg), brd_ir_seg_count(&c.v, &ref, seg),
                           iter, index % c.v.layout.nchunks);
}

/* Thread 0, after a data op: every chunk it wrote through a port channel
 * to the proxy (LL chunks as whole packets). */
__device__ __noinline__ bool post_data(const ctx_t &c, pos_t w, const brd_ir_op_t *op) {
  for (int d = op->nsrc; d < op->nsrc + op->ndst; d++) {
    if (!is_port(c, op->ref[d].chan)) continue;
    bool ll = (op->ref[d].buf & BRD_IR_REF_LL) != 0;
    for (uint32_t t = 0; t < op->nchunks; t++) {
      uint64_t nbytes = brd_ir_op_chunk_len(&c.v, op, w.iter, t) * c.a->layout.esize;
      if (nbytes == 0) continue;
      if (!port_post(c, w, op->ref[d].chan, ref_addr(c, w.iter, op->ref[d], t),
                     ll ? (nbytes + 3) / 4 * 8 : nbytes,
                     ll ? BRD_EXEC_PUT_LL : BRD_EXEC_PUT_DATA))
        return false;
    }
  }
  return true;
}

/* A data op (COPY .. PKT_REDUCE): every thread of the block. Out of line,
 * so the op loop and the data path are register-allocated apart. */
template <int DT, int FN>
__device__ __noinline__ bool run_data(const ctx_t &c, pos_t w, const brd_ir_op_t *op) {
  typedef brd::dt_traits<DT> Tr;
  const kargs_t &a = *c.a;
  const int nsrc = op->nsrc, nref = op->nsrc + op->ndst;
  chunk_io_t io;
  io.flag_dst = brd_ir_ll_flag(&c.v, w.iter, op->k);
  io.flag_src = brd_ir_ll_flag(&c.v, w.iter, op->k_src);
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
    io.nbytes = brd_ir_op_chunk_len(&c.v, op, w.iter, t) * a.layout.esize;
    if (io.nbytes == 0) continue;
    io.npacks = (io.nbytes + 15) / 16;
    for (int r = 0; r < nref; r++) io.addr[r] = ref_addr(c, w.iter, op->ref[r], t);
    bool ok = copy ? copy_chunk(c, w, op, io, t)
                   : reduce_chunk<DT, FN>(c, w, op, io, t, pre_mask, post);
    if (!ok) return false;
  }
  return true;
}

/* ---- switch channels (device/ir.h "Switch channels") --------------------- */

/* The kernels' reduction kinds are the host's BRD_REDUCE_FN_* for the
 * three that multimem has, so brd_exec_mc_reduces reads either. */
static_assert((int)brd::FN_SUM == (int)BRD_REDUCE_FN_SUM &&
                  (int)brd::FN_MIN == (int)BRD_REDUCE_FN_MIN &&
                  (int)brd::FN_MAX == (int)BRD_REDUCE_FN_MAX,
              "kernel and host reduction kinds agree on sum, min and max");

/* Is channel `chan` of this rank its switch channel? */
__device__ __forceinline__ bool is_switch(const ctx_t &c, unsigned chan) {
  return chan != BRD_IR_CHAN_LOCAL &&
         brd_ir_plan_chan(c.a->plan, c.a->rank, (int)chan)->type == BRD_IR_CHAN_SWITCH;
}

/* multimem on one 16-byte pack at a multicast address (16-byte aligned):
 * ld_reduce into v, red of v, st of v, and the release store of a
 * semaphore word. Vector forms where PTX has them (f32 .v4, f16 and bf16
 * .v4 of pairs, accumulating sums in f32), one instruction per element
 * otherwise (f64 and the integers; sums as unsigned, min/max signed or
 * not by type). Only the (DT, FN) brd_exec_mc_reduces allows are
 * instantiated. The CUDA simulator emulates them over every member's copy
 * (devemu.h). */
#ifndef BRD_CUDASIM_DEVICE
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define BRD_MC_ARCH 0 /* no multimem before sm_90: the ops fail the launch */
#else
#define BRD_MC_ARCH 1
#endif

#if BRD_MC_ARCH
#define MC_LDR_V4(ins)                                                                 \
  asm volatile("multimem.ld_reduce.relaxed.sys.global." ins " {%0, %1, %2, %3}, [%4];"  \
               : "=r"(v.u32[0]), "=r"(v.u32[1]), "=r"(v.u32[2]), "=r"(v.u32[3])          \
               : "l"(mc) : "memory")
#define MC_LDR_32(ins)                                                                 \
  do {                                                                                 \
    for (int i = 0; i < 4; i++)                                                        \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." ins " %0, [%1];"            \
                   : "=r"(v.u32[i]) : "l"(mc + 4 * i) : "memory");                     \
  } while (0)
#define MC_LDR_64(ins)                                                                 \
  do {                                                                                 \
    for (int i = 0; i < 2; i++) {                                                      \
      unsigned long long x_;                                                           \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." ins " %0, [%1];"            \
                   : "=l"(x_) : "l"(mc + 8 * i) : "memory");                           \
      v.u64[i] = x_;                                                                   \
    }                                                                                  \
  } while (0)
#define MC_RED_V4(ins)                                                                 \
  asm volatile("multimem.red.relaxed.sys.global." ins " [%0], {%1, %2, %3, %4};"        \
               :: "l"(mc), "r"(v.u32[0]), "r"(v.u32[1]), "r"(v.u32[2]), "r"(v.u32[3])    \
               : "memory")
#define MC_RED_32(ins)                                                                 \
  do {                                                                                 \
    for (int i = 0; i < 4; i++)                                                        \
      asm volatile("multimem.red.relaxed.sys.global." ins " [%0], %1;"                  \
                   :: "l"(mc + 4 * i), "r"(v.u32[i]) : "memory");                      \
  } while (0)
#define MC_RED_64(ins)                                                                 \
  do {                                                                                 \
    for (int i = 0; i < 2; i++)                                                        \
      asm volatile("multimem.red.relaxed.sys.global." ins " [%0], %1;"                  \
                   :: "l"(mc + 8 * i), "l"((unsigned long long)v.u64[i]) : "memory");  \
  } while (0)
/* One of three instructions by reduction kind. */
#define MC_BY_FN(M, add, min, max)                                                     \
  do {                                                                                 \
    if constexpr (FN == brd::FN_SUM) M(add);                                           \
    else if constexpr (FN == brd::FN_MIN) M(min);                                      \
    else M(max);                                                                       \
  } while (0)
#endif

template <int DT, int FN>
__device__ __forceinline__ void mc_ld_reduce(const char *mc, pack_t &v) {
  static_assert(brd_exec_mc_reduces(DT, FN), "a multimem reduction exists");
#if BRD_MC_ARCH
  if constexpr (DT == ncclFloat32) MC_LDR_V4("add.v4.f32");
  else if constexpr (DT == ncclFloat16)
    MC_BY_FN(MC_LDR_V4, "add.acc::f32.v4.f16x2", "min.v4.f16x2", "max.v4.f16x2");
  else if constexpr (DT == ncclBfloat16)
    MC_BY_FN(MC_LDR_V4, "add.acc::f32.v4.bf16x2", "min.v4.bf16x2", "max.v4.bf16x2");
  else if constexpr (DT == ncclFloat64) MC_LDR_64("add.f64");
  else if constexpr (DT == ncclInt32) MC_BY_FN(MC_LDR_32, "add.u32", "min.s32", "max.s32");
  else if constexpr (DT == ncclUint32) MC_BY_FN(MC_LDR_32, "add.u32", "min.u32", "max.u32");
  else if constexpr (DT == ncclInt64) MC_BY_FN(MC_LDR_64, "add.u64", "min.s64", "max.s64");
  else MC_BY_FN(MC_LDR_64, "add.u64", "min.u64", "max.u64");
#else
  (void)mc;
  v.u4 = make_uint4(0, 0, 0, 0);
#endif
}

template <int DT, int FN>
__device__ __forceinline__ void mc_red(char *mc, const pack_t &v) {
  static_assert(brd_exec_mc_reduces(DT, FN), "a multimem reduction exists");
#if BRD_MC_ARCH
  if constexpr (DT == ncclFloat32) MC_RED_V4("add.v4.f32");
  else if constexpr (DT == ncclFloat16)
    MC_BY_FN(MC_RED_V4, "add.v4.f16x2", "min.v4.f16x2", "max.v4.f16x2");
  else if constexpr (DT == ncclBfloat16)
    MC_BY_FN(MC_RED_V4, "add.v4.bf16x2", "min.v4.bf16x2", "max.v4.bf16x2");
  else if constexpr (DT == ncclFloat64) MC_RED_64("add.f64");
  else if constexpr (DT == ncclInt32) MC_BY_FN(MC_RED_32, "add.u32", "min.s32", "max.s32");
  else if constexpr (DT == ncclUint32) MC_BY_FN(MC_RED_32, "add.u32", "min.u32", "max.u32");
  else if constexpr (DT == ncclInt64) MC_BY_FN(MC_RED_64, "add.u64", "min.s64", "max.s64");
  else MC_BY_FN(MC_RED_64, "add.u64", "min.u64", "max.u64");
#else
  (void)mc;
  (void)v;
#endif
}

/* The bytes move unchanged whatever the datatype: .f32 is only the
 * vector form st has. */
__device__ __forceinline__ void mc_st(char *mc, const pack_t &v) {
#if BRD_MC_ARCH
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
               :: "l"(mc), "r"(v.u32[0]), "r"(v.u32[1]), "r"(v.u32[2]), "r"(v.u32[3])
               : "memory");
#else
  (void)mc;
  (void)v;
#endif
}

__device__ __forceinline__ void mc_st_release_u64(uint64_t *mc, uint64_t x) {
#if BRD_MC_ARCH
  asm volatile("multimem.st.release.sys.global.u64 [%0], %1;"
               :: "l"(mc), "l"((unsigned long long)x) : "memory");
#else
  (void)mc;
  (void)x;
#endif
}

#else /* BRD_CUDASIM_DEVICE: over every member's copy (devemu.h) */
#define BRD_MC_ARCH 1

/* The reduction of every member's copy, in member order, with the
 * kernels' own arithmetic: narrow types accumulate in f32 and round once,
 * as .acc::f32 does. */
template <int DT, int FN>
__device__ __forceinline__ void mc_ld_reduce(const char *mc, pack_t &v) {
  static_assert(brd_exec_mc_reduces(DT, FN), "a multimem reduction exists");
  typedef brd::dt_traits<DT> Tr;
  typedef typename Tr::raw_t raw_t;
  const int N = 16 / (int)sizeof(raw_t);
  char *uc[BRD_CUDASIM_MC_MAX];
  int n = brd_emu_mc_copies(mc, 16, "multimem.ld_reduce", uc);
  typename Tr::acc_t acc[N];
  v.u4 = make_uint4(0, 0, 0, 0);
  for (int m = 0; m < n; m++) {
    pack_t x;
    x.u4 = __ldcg((const uint4 *)uc[m]);
    for (int i = 0; i < N; i++) {
      typename Tr::acc_t e = Tr::widen(pack_get<raw_t>(x, i));
      acc[i] = m == 0 ? e : brd::combine<Tr, FN>(acc[i], e);
    }
  }
  for (int i = 0; n > 0 && i < N; i++) pack_set(v, i, Tr::narrow(acc[i]));
}

/* Every member's copy becomes copy (op) v, atomically (one lock for every
 * red of the process), each element rounded to its type. */
template <int DT, int FN>
__device__ __forceinline__ void mc_red(char *mc, const pack_t &v) {
  static_assert(brd_exec_mc_reduces(DT, FN), "a multimem reduction exists");
  typedef brd::dt_traits<DT> Tr;
  typedef typename Tr::raw_t raw_t;
  const int N = 16 / (int)sizeof(raw_t);
  char *uc[BRD_CUDASIM_MC_MAX];
  int n = brd_emu_mc_copies(mc, 16, "multimem.red", uc);
  for (int m = 0; m < n; m++) {
    brd_emu_mc_atomic([&](void *copy) {
      pack_t x;
      memcpy(&x, copy, 16);
      for (int i = 0; i < N; i++)
        pack_set(x, i, Tr::narrow(brd::combine<Tr, FN>(Tr::widen(pack_get<raw_t>(x, i)),
                                                       Tr::widen(pack_get<raw_t>(v, i)))));
      memcpy(copy, &x, 16);
    }, uc[m]);
  }
}

/* A plain (delayed) store to every member's copy. */
__device__ __forceinline__ void mc_st(char *mc, const pack_t &v) {
  char *uc[BRD_CUDASIM_MC_MAX];
  int n = brd_emu_mc_copies(mc, 16, "multimem.st", uc);
  for (int m = 0; m < n; m++) __stcg((uint4 *)uc[m], v.u4);
}

__device__ __forceinline__ void mc_st_release_u64(uint64_t *mc, uint64_t x) {
  char *uc[BRD_CUDASIM_MC_MAX];
  int n = brd_emu_mc_copies(mc, 8, "multimem.st.release", uc);
  for (int m = 0; m < n; m++) st_release_sys((uint64_t *)uc[m], x);
}
#endif /* BRD_CUDASIM_DEVICE */

/* Claims the report for a switch op this code cannot run (before sm_90,
 * or a datatype and reduction without a multimem form, which the host
 * half rejects first), and stops. */
__device__ __noinline__ void report_unsupported(const ctx_t &c, pos_t w, int code) {
  if (atomicCAS(&c.a->state->claimed, 0u, 1u) == 0u) {
    volatile report_t *r = c.a->report;
    r->hang.rank = c.a->rank;
    r->hang.block = (int)blockIdx.x;
    r->hang.op = w.opi;
    r->hang.iter = w.iter;
    r->hang.index = code;
    __threadfence_system();
    r->failed = BRD_EXEC_FAIL_UNSUPPORTED;
    __threadfence_system();
  }
  stop_launch(c);
}

/* MC_BARRIER (thread 0): seq into this rank's word of the switch
 * semaphore in every member's copy, then every member's word of this
 * rank's own copy up to seq. The words are the switch group's members
 * (device/ir.h "Switch channels"): every rank on one node, the node's
 * ranks in a plan across nodes, whose multicast object holds that node's
 * windows only. The block's writes reached thread 0 through the previous
 * op's __syncthreads; the system-scope fence orders them, multimem stores
 * included, before the release store. */
__device__ __noinline__ bool mc_barrier(const ctx_t &c, pos_t w, const brd_ir_op_t *op) {
  const unsigned ch = op->ref[0].chan;
  int nm = 0;
  const int me = brd_ir_switch_member(c.a->plan, c.a->rank, &nm);
  const uint32_t n = (uint32_t)nm;
  const size_t base = (size_t)op->ref[0].index * n;
  uint64_t value = brd_ir_sem_value(&c.v, ch, w.iter, op->k);
  __threadfence_system();
  mc_st_release_u64(c.chans[ch].peer_sems + base + me, value);
  if (brd_ir_seq_rel(&c.v, w.iter, op->k) <= 0) return true; /* before this launch */
  const uint64_t *own = c.chans[ch].sems + base;
  for (uint32_t m = 0; m < n; m++) {
    spin_t s = {0, 0};
    uint64_t v;
    while ((v = ld_acquire_sys(own + m)) < value) {
      int r = spin_step(c, s);
      if (r == SPIN_TIMEOUT) {
        report_hang(c, w, BRD_EXEC_WAIT_SWITCH,
                    brd_ir_switch_member_rank(c.a->plan, c.a->rank, (int)m),
                    op->ref[0].index, value, v);
        return false;
      }
      if (r == SPIN_LEAVE) return false;
    }
  }
  return true;
}

/* A switch op (MC_REDUCE, MC_STORE, MC_RED, MC_BARRIER): every thread of
 * the block; the barrier by thread 0. A multicast reference names a
 * scratch slot, whose size is a multiple of 16 bytes, so every multimem
 * access moves a whole pack: the bytes of a chunk's last pack past its end
 * are padding of the slot that no op reads. In a zero-copy switch plan it
 * may name a chunk of the members' own input or output (through the
 * multicast mapping of their windows, chans[ch].peer_input/peer_output),
 * which the runtime runs only where every chunk is 16-byte aligned and a
 * multiple of 16 bytes long (works.c), so there too packs are whole. Local (unicast) sources and
 * destinations move the chunk's bytes only. One pack per thread in
 * flight. */
template <int DT, int FN>
__device__ __noinline__ bool run_mc(const ctx_t &c, pos_t w, const brd_ir_op_t *op) {
  constexpr bool reduces = brd_exec_mc_reduces(DT, FN);
  const bool reducing = op->code == BRD_IR_OP_MC_REDUCE || op->code == BRD_IR_OP_MC_RED;
  if (!BRD_MC_ARCH || (reducing && !reduces)) {
    if (threadIdx.x == 0) report_unsupported(c, w, op->code);
    return false;
  }
  if (op->code == BRD_IR_OP_MC_BARRIER) return threadIdx.x != 0 || mc_barrier(c, w, op);
  const int nsrc = op->nsrc, nref = op->nsrc + op->ndst;
  uint32_t mcmask = 0;
  for (int r = 0; r < nref; r++)
    if (is_switch(c, op->ref[r].chan)) mcmask |= 1u << r;
  for (uint32_t t = 0; t < op->nchunks; t++) {
    uint64_t nbytes = brd_ir_op_chunk_len(&c.v, op, w.iter, t) * c.a->layout.esize;
    if (nbytes == 0) continue;
    char *addr[BRD_IR_MAX_REFS];
    for (int r = 0; r < nref; r++) addr[r] = ref_addr(c, w.iter, op->ref[r], t);
    const uint64_t npacks = (nbytes + 15) / 16;
    for (uint64_t j = threadIdx.x; j < npacks; j += blockDim.x) {
      const uint32_t valid = nbytes - 16 * j < 16 ? (uint32_t)(nbytes - 16 * j) : 16u;
      pack_t v;
      if (op->code == BRD_IR_OP_MC_REDUCE) {
        if constexpr (reduces) mc_ld_reduce<DT, FN>(addr[0] + 16 * j, v);
      } else {
        load_plain(addr[0] + 16 * j, valid, v);
      }
      for (int d = nsrc; d < nref; d++) {
        if (((mcmask >> d) & 1u) == 0) {
          store_plain(addr[d] + 16 * j, valid, v);
        } else if (op->code == BRD_IR_OP_MC_RED) {
          if constexpr (reduces) mc_red<DT, FN>(addr[d] + 16 * j, v);
        } else {
          mc_st(addr[d] + 16 * j, v);
        }
      }
    }
  }
  return true;
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
      memcpy(&arg, a.scalar_dev, a.layout.esize); /* little-endian: low bytes */
    }
    uint32_t launches;
    if (a.device_epoch) {
      /* Stable for the whole launch: only the last block to finish moves
       * them, after every block has read them. */
      s_ctx.v.epoch = brd_plan_epoch_at(*(volatile unsigned long long *)&st->cursor, a.span);
      launches = *(volatile unsigned int *)&st->launches;
    } else {
      s_ctx.v.epoch = a.epoch;
      launches = a.phase;
    }
    s_launches = launches;
    s_ctx.out_off = a.device_epoch ? (uint64_t)(launches & 1u) * a.out_half : 0;
    s_ctx.a = &a;
    s_ctx.chans = a.chans_dev != NULL ? a.chans_dev : a.chans;
    brd_ir_view_t &v = s_ctx.v;
    v.layout = a.layout;
    v.in_segs = a.in_segs_dev != NULL ? a.in_segs_dev : a.n_in_segs > 0 ? a.in_segs : NULL;
    v.out_segs = a.out_segs_dev != NULL ? a.out_segs_dev : a.n_out_segs > 0 ? a.out_segs : NULL;
    v.input = a.input;
    /* A direct output is the user's buffer: one half only. */
    v.output = a.output == NULL ? NULL : a.output + (a.out_direct ? 0 : s_ctx.out_off);
    v.in_stride = a.in_stride;
    v.out_stride = a.out_stride;
    v.chan_epoch = a.chan_epoch_dev != NULL ? a.chan_epoch_dev
                   : a.has_chan_epoch ? a.chan_epoch : NULL;
    v.seq_per_iter = a.plan->seq_per_iter;
    v.phase = launches & 1u;
    if (a.chan_cursor != NULL) {
      /* Stable for the launch, as the device epoch: only the last block
       * out advances the cursors. */
      uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
      for (uint32_t ch = 0; ch < nch; ch++) {
        int peer = brd_ir_plan_chan(a.plan, a.rank, (int)ch)->peer;
        s_chan_ep[ch] = brd_plan_chan_epoch(
            a.plan, *(volatile unsigned long long *)&a.chan_cursor[peer], a.chan_epoch[ch]);
      }
      v.chan_epoch = s_chan_ep;
    }
    s_ctx.arg = arg;
  }
  /* A launch after a failure leaves at once (brd_exec_cuda_status_reset). */
  bool leave = __syncthreads_or(threadIdx.x == 0 &&
                                *(volatile unsigned int *)&st->stop != 0);
  if (a.xchg && a.layout.niter > 0 && !leave) {
    /* Every rank publishes before it waits, so no rank waits on one that
     * has not published; the other blocks need not wait for block 0 (all
     * are resident). A failed resolve leaves like a failed op. */
    bool ok = true;
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) ok = xchg_publish(s_ctx);
      ok = ok && xchg_resolve(s_ctx);
    }
    leave = __syncthreads_or(!ok);
  }
  const ctx_t &c = s_ctx;
  const brd_ir_block_t *blk = brd_ir_plan_block(a.plan, a.rank, (int)blockIdx.x);
  const brd_ir_op_t *ops = brd_ir_plan_ops(a.plan, a.rank, (int)blockIdx.x);
  const uint32_t nops = blk->nops;
  uint32_t bar_seen = 0; /* barriers passed in this launch (thread 0) */
  pos_t w;

  for (w.iter = 0; w.iter < a.layout.niter && !leave; w.iter++) {
    for (uint32_t i = 0; i < nops; i++) {
      const brd_ir_op_t *op = &ops[i];
      w.opi = (int)i;
      bool ok = true;
      if (brd_ir_op_is_data(op->code)) {
        ok = run_data<DT, FN>(c, w, op);
      } else if (brd_ir_op_is_switch(op->code)) {
        ok = run_mc<DT, FN>(c, w, op);
      } else if (threadIdx.x == 0) {
        switch (op->code) {
        case BRD_IR_OP_WAIT: ok = run_wait(c, w, op); break;
        case BRD_IR_OP_SIGNAL: ok = run_signal(c, w, op); break;
        case BRD_IR_OP_BARRIER: ok = run_barrier(c, w, bar_seen++); break;
        default: break; /* NOP; plan creation rejected every other code */
        }
      }
      if (__syncthreads_or(!ok)) {
        leave = true;
        break;
      }
      /* Writes through port channels go to the proxy once the whole block
       * has made them (the __syncthreads_or above). */
      if (brd_ir_op_is_data(op->code) && a.state->fifo != NULL) {
        if (threadIdx.x == 0) ok = post_data(c, w, op);
        if (__syncthreads_or(!ok)) {
          leave = true;
          break;
        }
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
        st->cursor = c.v.epoch + a.span;
        st->launches = s_launches + 1u;
      }
      if (a.chan_cursor != NULL) {
        uint32_t nch = brd_ir_plan_rank(a.plan, a.rank)->nchans;
        for (uint32_t ch = 0; ch < nch; ch++)
          a.chan_cursor[brd_ir_plan_chan(a.plan, a.rank, (int)ch)->peer] =
              brd_plan_chan_next(a.plan, s_chan_ep[ch], a.chan_epoch[ch]);
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

/* ---- copy out of a staging half ------------------------------------------ */

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

/* ---- entry points (exec_kernel.h) ------------------------------------------ */

/* See exec_kernel.h. */
extern "C" cudaError_t brd_exec_kernel_launch(const brd_exec_kargs_t *ka,
                                              const brd_exec_cuda_args_t *args,
                                              uint32_t nblocks, cudaStream_t stream) {
  void *params[1] = {(void *)ka};
  return cudaLaunchKernel(kernels[args->dtype][fn_kind(ka->fn)], dim3(nblocks),
                          dim3(BRD_EXEC_CUDA_NTHREADS), params, 0, stream);
}

/* See exec_kernel.h. cudaFuncGetAttributes loads a kernel that lazy
 * loading has not loaded yet. */
extern "C" cudaError_t brd_exec_kernels_load(void) {
  cudaFuncAttributes attr;
  for (int dt = 0; dt < ncclNumTypes; dt++)
    for (int fn = 0; fn < brd::FN_COUNT; fn++) {
      cudaError_t e = cudaFuncGetAttributes(&attr, kernels[dt][fn]);
      if (e != cudaSuccess) return e;
    }
  const void *copyouts[4] = {BRD_KERNEL(copyout_kernel<uint4>),
                             BRD_KERNEL(copyout_kernel<unsigned long long>),
                             BRD_KERNEL(copyout_kernel<unsigned int>),
                             BRD_KERNEL(copyout_kernel<unsigned char>)};
  for (int i = 0; i < 4; i++) {
    cudaError_t e = cudaFuncGetAttributes(&attr, copyouts[i]);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

/* See exec_kernel.h. */
extern "C" cudaError_t brd_exec_kernel_copyout(const brd_exec_copyout_kargs_t *c,
                                               cudaStream_t stream) {
  const state_t *st = c->state;
  const char *src = c->src;
  char *dst = c->dst;
  unsigned long long half = c->half, units = c->units, ss = c->src_stride,
                     ds = c->dst_stride;
  unsigned int nseg = c->nseg;
  const void *fn = c->width == 16  ? BRD_KERNEL(copyout_kernel<uint4>)
                   : c->width == 8 ? BRD_KERNEL(copyout_kernel<unsigned long long>)
                   : c->width == 4 ? BRD_KERNEL(copyout_kernel<unsigned int>)
                                   : BRD_KERNEL(copyout_kernel<unsigned char>);
  void *params[8] = {&st, &src, &half, &dst, &units, &nseg, &ss, &ds};
  return cudaLaunchKernel(fn, dim3(c->blocks), dim3(BRD_EXEC_CUDA_NTHREADS), params, 0,
                          stream);
}
