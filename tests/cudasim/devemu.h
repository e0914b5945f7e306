/*
 * Braid CUDA simulator: the device side of CUDA on the CPU, so that
 * src/device/exec.cu itself (its kernels and its host side) compiles with
 * the host C++ compiler and runs on the simulator (README.md, "exec.cu on
 * the CPU"). Force-included (-include) before exec.cu, with
 * BRD_CUDASIM_DEVICE defined; otherwise only test_devemu.cc, its test,
 * includes it.
 *
 * What it supplies:
 *   - the qualifiers (__global__, __device__, __shared__ ...): kernels are
 *     plain functions; __shared__ is thread-local storage of the block's
 *     CPU thread, which all fibers of the block share (grid.c);
 *   - threadIdx, blockIdx, blockDim, gridDim and __syncthreads_or (grid.c);
 *   - atomics and fences as GCC __atomic builtins, sequentially consistent;
 *   - exec.cu's PTX helpers under the same names (exec.cu leaves its own
 *     out when BRD_CUDASIM_DEVICE is defined): acquire/release and
 *     volatile accesses as __atomic loads and stores, %globaltimer as
 *     CLOCK_MONOTONIC. Each load of a flag yields the CPU every few polls,
 *     so spinning blocks on two cores leave room for the blocks they wait
 *     for;
 *   - every access of a PTX helper, __ldcg and __stcg checked for its
 *     natural alignment and against the runtime's memory table: a
 *     misaligned one faults the device (cudaErrorMisalignedAddress), one
 *     outside every allocation the kernel can reach faults it with
 *     cudaErrorIllegalAddress, as on a GPU, where the CPU would not mind;
 *   - __ldcg/__stcg as plain accesses, __stcg's stores delayed until a
 *     fence or release of the block (below, "delayed stores"), so a
 *     missing fence shows; and the float intrinsics of redop.cuh (one
 *     IEEE rounding per operation, as SSE does);
 *   - BRD_KERNEL(f), a kernel's address for cudaLaunchKernel: a
 *     brd_cudasim_kernel_t that packs f's parameters and calls f.
 */
#ifndef BRD_CUDASIM_DEVEMU_H
#define BRD_CUDASIM_DEVEMU_H

#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cudasim.h"

/* ---- qualifiers ------------------------------------------------------------ */

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __grid_constant__
#undef __launch_bounds__
#undef __forceinline__
#undef __noinline__
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __grid_constant__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))

/* ---- delayed stores ------------------------------------------------------------ */

/* On a GPU a plain store need not reach other blocks, or other GPUs, until
 * the storing thread fences or releases; a CPU (x86 above all) shows it to
 * everyone at once, so a missing fence would never show here. So plain
 * stores (__stcg) wait in a table of the block (its CPU thread's) until
 * their thread, or any thread of the block, fences (__threadfence*, a
 * release store), or the kernel thread ends. Until then:
 *   - the storing thread reads its own stores back;
 *   - the block's other threads read them once the storing thread has
 *     reached a __syncthreads (or when two threads stored to the same 16
 *     bytes: seeing a store early is always allowed);
 *   - other blocks and other ranks read the memory as it was.
 * A fence writes out every waiting store of the block: on a GPU the
 * fence of a thread that passed a barrier orders the stores it observed
 * through it (cumulativity), so this over-approximates the GPU, as
 * writing the table out when it fills or when a volatile or atomic access
 * lands on a waiting store does. Volatile, acquire/release and atomic
 * accesses go to memory at once (LL packets, flags, semaphores).
 * BRAID_CUDASIM_DELAY_STORES=0 turns the table off. */
struct brd_emu_pend_t {
  uintptr_t gran; /* address / 16; 0: free */
  uint32_t owner; /* the storing thread */
  uint32_t bar;   /* the owner's barrier count when it stored */
  uint32_t mask;  /* bytes of the 16 stored */
  bool shared;    /* visible to the whole block already */
  unsigned char bytes[16];
};

struct brd_emu_pend_tab_t {
  enum { CAP = 8192, MAX = 4096 }; /* slots (a power of 2), entries before a write-out */
  brd_emu_pend_t *slot = nullptr;
  uint32_t *used = nullptr; /* indexes of the slots in use */
  unsigned nused = 0;
  uint32_t bars[1024] = {}; /* __syncthreads reached, per thread of the block */
  ~brd_emu_pend_tab_t() {
    free(slot);
    free(used);
  }
};

static thread_local brd_emu_pend_tab_t brd_emu_pend;

static inline bool brd_emu_delay_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("BRAID_CUDASIM_DELAY_STORES");
    on = v == NULL || atoi(v) != 0;
  }
  return on != 0;
}

static inline uint32_t brd_emu_thread_rank(void) {
  const uint3 *t = brd_cudasim_thread_idx();
  const dim3 *d = brd_cudasim_block_dim();
  return t->x + d->x * (t->y + d->y * t->z);
}

static inline brd_emu_pend_t *brd_emu_pend_find(uintptr_t gran, bool *fresh) {
  brd_emu_pend_tab_t &tb = brd_emu_pend;
  uint32_t i = (uint32_t)((gran * 0x9e3779b97f4a7c15ull) >> 51) & (tb.CAP - 1);
  while (tb.slot[i].gran != 0 && tb.slot[i].gran != gran) i = (i + 1) & (tb.CAP - 1);
  if (fresh != NULL && tb.slot[i].gran == 0) {
    *fresh = true;
    tb.slot[i].gran = gran;
    tb.used[tb.nused++] = i;
  }
  return tb.slot[i].gran == gran ? &tb.slot[i] : nullptr;
}

/* Every waiting store of the block to memory. */
static inline void brd_emu_pend_flush(void) {
  brd_emu_pend_tab_t &tb = brd_emu_pend;
  for (unsigned k = 0; k < tb.nused; k++) {
    brd_emu_pend_t &e = tb.slot[tb.used[k]];
    unsigned char *m = (unsigned char *)(e.gran << 4);
    if (e.mask == 0xffffu) memcpy(m, e.bytes, 16);
    else
      for (int b = 0; b < 16; b++)
        if ((e.mask >> b) & 1u) m[b] = e.bytes[b];
    memset(&e, 0, sizeof(e));
  }
  tb.nused = 0;
}

/* A plain store of w bytes (w <= 16, aligned to w) of v at p. */
static inline void brd_emu_pend_store(void *p, const void *v, size_t w) {
  brd_emu_pend_tab_t &tb = brd_emu_pend;
  if (!brd_emu_delay_on()) {
    memcpy(p, v, w);
    return;
  }
  if (tb.slot == nullptr) {
    tb.slot = (brd_emu_pend_t *)calloc(tb.CAP, sizeof(*tb.slot));
    tb.used = (uint32_t *)calloc(tb.CAP, sizeof(*tb.used));
    if (tb.slot == nullptr || tb.used == nullptr) {
      brd_cudasim_fault(cudaErrorMemoryAllocation, "no host memory for delayed stores");
      return;
    }
  }
  if (tb.nused >= tb.MAX) brd_emu_pend_flush();
  uint32_t me = brd_emu_thread_rank();
  bool fresh = false;
  brd_emu_pend_t *e = brd_emu_pend_find((uintptr_t)p >> 4, &fresh);
  /* Once the block may see a slot it stays so; two threads' stores to
   * one slot: both see both (early, which is allowed). */
  if (!fresh && (e->owner != me || e->shared || e->bar != tb.bars[e->owner]))
    e->shared = true;
  e->owner = me;
  e->bar = tb.bars[me];
  unsigned off = (unsigned)((uintptr_t)p & 15u);
  memcpy(e->bytes + off, v, w);
  e->mask |= ((1u << w) - 1u) << off;
}

/* What this thread sees at p (w bytes, aligned to w) after reading v from
 * memory: its own waiting stores, and the block's it may see. */
static inline void brd_emu_pend_overlay(const void *p, void *v, size_t w) {
  brd_emu_pend_tab_t &tb = brd_emu_pend;
  if (tb.nused == 0) return;
  brd_emu_pend_t *e = brd_emu_pend_find((uintptr_t)p >> 4, nullptr);
  if (e == nullptr) return;
  uint32_t me = brd_emu_thread_rank();
  if (e->owner != me && !e->shared && e->bar == tb.bars[e->owner]) return;
  unsigned off = (unsigned)((uintptr_t)p & 15u);
  for (unsigned b = 0; b < w; b++)
    if ((e->mask >> (off + b)) & 1u) ((unsigned char *)v)[b] = e->bytes[off + b];
}

/* Before a volatile or atomic access at p: a waiting plain store there
 * goes out first, or writing it out later would undo this access. */
static inline void brd_emu_pend_evict(const void *p) {
  brd_emu_pend_tab_t &tb = brd_emu_pend;
  if (tb.nused != 0 && brd_emu_pend_find((uintptr_t)p >> 4, nullptr) != nullptr)
    brd_emu_pend_flush();
}

/* ---- scheduling jitter ------------------------------------------------------------ */

/* BRAID_CUDASIM_JITTER=N (default 0: off) perturbs the interleaving of
 * blocks and ranks, which on two cores otherwise follows the OS scheduler
 * closely from run to run: at every barrier, fence, atomic and flag or
 * packet access a thread yields its CPU about one time in 32 and sleeps
 * up to N microseconds about one time in 512 (a per-thread random
 * stream, seeded by time and thread). Sleeping inside a wait, between a
 * store and the next, or before a fence is what a GPU's warps do when
 * preempted, throttled or behind another kernel's blocks. */
static inline unsigned brd_emu_jitter_level(void) {
  /* Read once: C++ initialises a local static exactly once, however many
   * block threads arrive here together, and they all see the value. */
  static const unsigned level = [] {
    const char *v = getenv("BRAID_CUDASIM_JITTER");
    int n = v != NULL ? atoi(v) : 0;
    return n > 0 ? (unsigned)n : 0u;
  }();
  return level;
}

static inline void brd_emu_jitter(void) {
  unsigned level = brd_emu_jitter_level();
  if (level == 0) return;
  static thread_local uint64_t x;
  if (x == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    x = ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&x;
    if (x == 0) x = 1;
  }
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  if ((x & 511u) == 0) {
    struct timespec d = {0, (long)((x >> 16) % level) * 1000 + 1000};
    nanosleep(&d, NULL);
  } else if ((x & 31u) == 0) {
    sched_yield();
  }
}

/* ---- built-in variables and the block barrier --------------------------------- */

#define threadIdx (*brd_cudasim_thread_idx())
#define blockIdx (*brd_cudasim_block_idx())
#define blockDim (*brd_cudasim_block_dim())
#define gridDim (*brd_cudasim_grid_dim())

/* The thread's waiting stores become the block's (delayed stores). */
static inline int __syncthreads_or(int pred) {
  brd_emu_jitter();
  brd_emu_pend.bars[brd_emu_thread_rank()]++;
  return brd_cudasim_syncthreads_or(pred != 0);
}

/* ---- atomics and fences -------------------------------------------------------- */

static inline void __threadfence(void) {
  brd_emu_jitter();
  brd_emu_pend_flush();
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
static inline void __threadfence_system(void) {
  brd_emu_jitter();
  brd_emu_pend_flush();
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Relaxed on a GPU: they order no waiting store. */
static inline unsigned int atomicAdd(unsigned int *p, unsigned int v) {
  brd_emu_jitter();
  brd_emu_pend_evict(p);
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  brd_emu_jitter();
  brd_emu_pend_evict(p);
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned int atomicExch(unsigned int *p, unsigned int v) {
  brd_emu_jitter();
  brd_emu_pend_evict(p);
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned int atomicCAS(unsigned int *p, unsigned int cmp,
                                     unsigned int v) {
  brd_emu_jitter();
  brd_emu_pend_evict(p);
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}

/* ---- exec.cu's PTX helpers ------------------------------------------------------ */

/* A GPU faults on an access not aligned to its width, and on one outside
 * every allocation it can reach (cudaErrorIllegalAddress). The CPU would
 * mind neither when the address is in some mapping of the process: a host
 * pointer, or a few bytes past the end of an allocation (mappings are
 * page-sized). So every access is checked against the runtime's memory
 * table, exactly to the allocation's end, as compute-sanitizer's memcheck
 * does. Each block's thread keeps its last few ranges, dropped when
 * memory leaves the table. */
static inline bool brd_emu_access(const void *p, size_t width, const char *what) {
  if (((uintptr_t)p & (width - 1)) != 0) {
    char why[96];
    snprintf(why, sizeof(why), "a %zu-byte %s at %p is misaligned", width, what, p);
    brd_cudasim_fault(cudaErrorMisalignedAddress, why);
    return false;
  }
  enum { WAYS = 4 };
  static thread_local brd_cudasim_range_t seen[WAYS];
  static thread_local unsigned next;
  unsigned long gen = __atomic_load_n(&brd_cudasim_mem_gen, __ATOMIC_ACQUIRE);
  const char *c = (const char *)p;
  for (int i = 0; i < WAYS; i++)
    if (seen[i].base != NULL && seen[i].gen == gen && c >= seen[i].base &&
        c + width <= seen[i].base + seen[i].size)
      return true;
  brd_cudasim_range_t r;
  if (brd_cudasim_find(p, width, &r)) {
    seen[next++ % WAYS] = r;
    return true;
  }
  char why[256];
  if (r.base != NULL)
    snprintf(why, sizeof(why), "a %zu-byte %s at %p is outside every allocation the "
             "kernel can reach; the nearest below it is [%p, +%zu), and the access "
             "%s %td bytes past its end", width, what, p, (const void *)r.base, r.size,
             c < r.base + r.size ? "ends" : "starts",
             c < r.base + r.size ? c + width - (r.base + r.size) : c - (r.base + r.size));
  else
    snprintf(why, sizeof(why), "a %zu-byte %s at %p is outside every allocation the "
             "kernel can reach", width, what, p);
  brd_cudasim_fault(cudaErrorIllegalAddress, why);
  return false;
}

/* Every few flag loads, give the CPU to another thread: the block (or the
 * peer) being waited for may need this core. */
static inline void brd_emu_poll_yield(void) {
  static thread_local unsigned n;
  brd_emu_jitter();
  if (++n % 16 == 0) sched_yield();
}

/* A faulted access reads zeros and writes nothing; the fault sticks to
 * the next synchronising call. */
static inline uint64_t ld_acquire_sys(const uint64_t *p) {
  brd_emu_poll_yield();
  if (!brd_emu_access(p, 8, "load")) return 0;
  uint64_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  brd_emu_pend_overlay(p, &v, 8);
  return v;
}
/* A release orders every earlier store of the thread (and, over-
 * approximated, of its block): the waiting ones go out first. */
static inline void st_release_sys(uint64_t *p, uint64_t v) {
  brd_emu_jitter();
  if (!brd_emu_access(p, 8, "store")) return;
  brd_emu_pend_flush();
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline unsigned int ld_acquire_gpu(const unsigned int *p) {
  brd_emu_poll_yield();
  if (!brd_emu_access(p, 4, "load")) return 0;
  unsigned int v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  brd_emu_pend_overlay(p, &v, 4);
  return v;
}
static inline uint64_t ld_volatile_u64(const uint64_t *p) {
  brd_emu_poll_yield();
  if (!brd_emu_access(p, 8, "load")) return 0;
  uint64_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
  brd_emu_pend_overlay(p, &v, 8);
  return v;
}
static inline void ld_volatile_v2(const uint64_t *p, uint64_t &a, uint64_t &b) {
  brd_emu_poll_yield();
  uint64_t v[2] = {0, 0};
  if (brd_emu_access(p, 16, "load")) {
    v[0] = __atomic_load_n(p, __ATOMIC_RELAXED);
    v[1] = __atomic_load_n(p + 1, __ATOMIC_RELAXED);
    brd_emu_pend_overlay(p, v, 16);
  }
  a = v[0];
  b = v[1];
}
static inline void st_volatile_u64(uint64_t *p, uint64_t v) {
  brd_emu_jitter();
  if (!brd_emu_access(p, 8, "store")) return;
  brd_emu_pend_evict(p);
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void st_volatile_v2(uint64_t *p, uint64_t a, uint64_t b) {
  brd_emu_jitter();
  if (!brd_emu_access(p, 16, "store")) return;
  brd_emu_pend_evict(p);
  __atomic_store_n(p, a, __ATOMIC_RELAXED);
  __atomic_store_n(p + 1, b, __ATOMIC_RELAXED);
}
static inline uint64_t globaltimer_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- multimem (switch channels) ----------------------------------------------------- */

/* exec.cu's multimem helpers (mc_ld_reduce, mc_red, mc_st,
 * mc_st_release_u64) run over every member's copy of a multicast address
 * (runtime.c's multicast mappings): the arithmetic is exec.cu's, the
 * memory is this. An access must be aligned to its width and lie inside a
 * multicast mapping whose every member has memory bound under it, or the
 * device faults (cudaErrorMisalignedAddress, cudaErrorIllegalAddress), as
 * memcheck would. Stores to the copies are plain (delayed) or release
 * stores, loads __ldcg's, so the delayed-store model covers them. */

/* Every member's copy of the `bytes` at multicast address p, in member
 * order, into uc: their number, or 0 after faulting the device. Each
 * block's thread keeps the last mapping it looked up. */
static inline int brd_emu_mc_copies(const void *p, size_t bytes, const char *what,
                                    char **uc) {
  char why[192];
  if (((uintptr_t)p & (bytes - 1)) != 0) {
    snprintf(why, sizeof(why), "a %zu-byte %s at %p is misaligned", bytes, what, p);
    brd_cudasim_fault(cudaErrorMisalignedAddress, why);
    return 0;
  }
  static thread_local brd_cudasim_mc_t last;
  const char *c = (const char *)p;
  unsigned long gen = __atomic_load_n(&brd_cudasim_mem_gen, __ATOMIC_ACQUIRE);
  if (!(last.n > 0 && last.gen == gen && c >= last.base &&
        c + bytes <= last.base + last.size) &&
      !brd_cudasim_mc_find(p, bytes, &last)) {
    snprintf(why, sizeof(why), "a %zu-byte %s at %p is not inside a multicast mapping "
             "with memory of every member bound under it", bytes, what, p);
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return 0;
  }
  for (int m = 0; m < last.n; m++) uc[m] = last.uc[m] + (c - last.base);
  return last.n;
}

/* Runs f(p) (a read-modify-write of 16 bytes at p, a member's copy)
 * atomically with every other one of the process. */
template <typename F> static inline void brd_emu_mc_atomic(F f, char *p) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  if (!brd_emu_access(p, 16, "multimem.red")) return;
  brd_emu_pend_evict(p); /* a waiting plain store there must not undo it */
  pthread_mutex_lock(&mu);
  f((void *)p);
  pthread_mutex_unlock(&mu);
}

/* ---- cache-hinted accesses --------------------------------------------------------- */

template <typename T> static inline T __ldcg(const T *p) {
  T v;
  if (brd_emu_access(p, sizeof(T), "load")) {
    memcpy(&v, p, sizeof(v));
    brd_emu_pend_overlay(p, &v, sizeof(v));
  } else {
    memset(&v, 0, sizeof(v));
  }
  return v;
}
template <typename T> static inline void __stcg(T *p, T v) {
  if (brd_emu_access(p, sizeof(T), "store")) brd_emu_pend_store(p, &v, sizeof(v));
}

/* ---- float intrinsics of redop.cuh ------------------------------------------------- */

/* The bits of a value as another type of the same size. */
template <typename To, typename From> static inline To brd_emu_bits(From v) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To t;
  memcpy(&t, &v, sizeof(t));
  return t;
}
static inline float __uint_as_float(unsigned int x) { return brd_emu_bits<float>(x); }
static inline unsigned int __float_as_uint(float f) { return brd_emu_bits<unsigned int>(f); }
static inline double __longlong_as_double(long long x) { return brd_emu_bits<double>(x); }
static inline long long __double_as_longlong(double d) { return brd_emu_bits<long long>(d); }
/* Out of line, so no caller's multiply and add can be contracted. */
__attribute__((noinline, unused)) static float __fadd_rn(float a, float b) { return a + b; }
__attribute__((noinline, unused)) static float __fmul_rn(float a, float b) { return a * b; }
__attribute__((noinline, unused)) static double __dadd_rn(double a, double b) { return a + b; }
__attribute__((noinline, unused)) static double __dmul_rn(double a, double b) { return a * b; }

/* ---- kernel addresses ------------------------------------------------------------- */

template <auto F> struct brd_emu_kernel;

template <typename... A, void (*F)(A...)> struct brd_emu_kernel<F> {
  typedef std::tuple<typename std::decay<A>::type...> params_t;

  template <size_t... I>
  static void pack_at(void **params, void *buf, std::index_sequence<I...>) {
    new (buf) params_t(*(const typename std::decay<A>::type *)params[I]...);
  }
  static void pack(void **params, void *buf) {
    pack_at(params, buf, std::index_sequence_for<A...>{});
  }
  /* Each thread gets its own by-value copies, as kernel parameters. */
  static void call(void *buf) {
    std::apply(F, *(const params_t *)buf);
    brd_emu_pend_flush(); /* a kernel's stores are all out when it ends */
  }

  static const brd_cudasim_kernel_t desc;
};

template <typename... A, void (*F)(A...)>
const brd_cudasim_kernel_t brd_emu_kernel<F>::desc = {
    BRD_CUDASIM_KERNEL_MAGIC, sizeof(params_t), brd_emu_kernel<F>::pack,
    brd_emu_kernel<F>::call};

#define BRD_KERNEL(...) ((const void *)&brd_emu_kernel<__VA_ARGS__>::desc)

/* Defined here because this header is part of exactly one translation
 * unit of the library, exec.cu's (test_devemu.cc, which links no
 * executor, defines BRD_EMU_OWN_TEST). */
#ifndef BRD_EMU_OWN_TEST
extern "C" const char *brd_cudasim_executor(void) { return "exec.cu"; }
#endif

#endif /* BRD_CUDASIM_DEVEMU_H */
