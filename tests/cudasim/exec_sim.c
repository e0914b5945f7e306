/*
 * Braid CUDA simulator, the executor: every function of
 * src/device/exec_cuda.h, with the host and device sides of
 * src/device/exec.cu mirrored in C and the "kernels" run by the simulator's
 * streams (brd_cudasim_launch) over the host executor (exec_host.h), one
 * CPU thread per plan block.
 *
 * What is the same as exec.cu: the plan checks, the argument checks and
 * their error codes, the objects' CUDA allocations (a plan blob in device
 * memory, the report in mapped pinned memory, the state in device memory),
 * the by-value kernel arguments (inline channel, segment and epoch tables
 * copied at enqueue), device epochs (epoch_reserve on the cursor, phase =
 * launches & 1, cursor and launches advanced after every launch, failed or
 * not), out_half_bytes and out_direct, the output exchange (block 0
 * publishes, every block resolves, before the ops; a published peer output
 * has no half offset, a staged one does), a device scalar read when the
 * kernel runs, the report (first failure wins), stop-after-failure until
 * brd_exec_cuda_status_reset, brd_exec_cuda_poll's messages, and the
 * copy-out kernel reading the phase of the last device-epoch launch.
 *
 * What differs: the waits are the host executor's (it also WARNs a hang
 * where it happens, before brd_exec_cuda_poll reports it), and every
 * pointer a kernel would dereference first is checked against the
 * simulator's memory table: host memory the GPU could not reach faults the
 * device (cudaErrorIllegalAddress), as the kernel would.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/param.h"
#include "device/exec_cuda.h"
#include "device/exec_host.h"
#include "device/reduce.h"
#include "plan/plan.h"

#include "cudasim.h"

/* How a launch failed (report_t.failed). */
enum { FAIL_NONE = 0, FAIL_HANG = 1, FAIL_ABORT = 2 };

/* Host-visible state of a rank, in mapped pinned memory (exec.cu's). */
typedef struct report {
  _Atomic int abort;
  _Atomic int failed;        /* FAIL_*, written last */
  uint64_t timeout_ns;
  brd_exec_cuda_hang_t hang;
} report_t;

/* Device-side state of a rank, in device memory (exec.cu's). */
typedef struct state {
  unsigned int claimed;
  unsigned int stop;
  unsigned int bar_count;
  unsigned int bar_gen;
  unsigned int done;
  unsigned int launches;
  unsigned long long cursor;
} state_t;

/* The kernel's parameters, copied at enqueue. */
typedef struct kargs {
  const brd_ir_plan_t *plan;             /* device blob */
  const brd_exec_cuda_chan_t *chans_dev;
  const brd_exec_cuda_seg_t *in_segs_dev, *out_segs_dev;
  const uint64_t *chan_epoch_dev;
  uint64_t *chan_cursor;                 /* per-pair cursors: chan_epoch holds spans */
  const char *input;
  char *output;
  char *scratch;
  size_t scratch_bytes;
  const void *scalar_dev;
  uint64_t scalar;                       /* host scalar's bytes */
  int has_scalar;
  report_t *report;                      /* device view */
  state_t *state;
  size_t count;
  int dtype, redop;
  uint64_t epoch, span;
  uint64_t out_half;
  double timeout_s;
  size_t in_stride, out_stride;          /* as given (0: count) */
  uint32_t phase;
  int rank;
  int device_epoch;
  uint32_t nchans;
  uint32_t n_in_segs, n_out_segs;        /* as given */
  int inline_in_segs, inline_out_segs;
  int has_chan_epoch;
  int xchg;                              /* output exchange */
  int out_direct;                        /* own output has no half offset */
  brd_exec_cuda_chan_t chans[BRD_EXEC_CUDA_INLINE_CHANS];
  uint64_t chan_epoch[BRD_EXEC_CUDA_INLINE_CHANS];
  brd_exec_cuda_seg_t in_segs[BRD_EXEC_CUDA_INLINE_SEGS];
  brd_exec_cuda_seg_t out_segs[BRD_EXEC_CUDA_INLINE_SEGS];
} kargs_t;

struct brd_exec_cuda_plan {
  brd_ir_plan_t *host; /* owned: brd_plan_clone */
  brd_ir_plan_t *dev;  /* owned: cudaMalloc, the same bytes */
};

struct brd_exec_cuda_status {
  report_t *host;      /* owned: cudaHostAlloc (mapped) */
  report_t *dev;       /* the device's view of host */
  state_t *state;      /* owned: cudaMalloc */
  int reported;
};

const char *brd_cudasim_executor(void) { return "exec_sim.c"; }

/* ---- the kernels ------------------------------------------------------------ */

/* Same reservation as brd_plan_epoch_reserve, from the device cursor. */
static uint64_t epoch_reserve(uint64_t cursor, uint64_t span) {
  const uint64_t wrap = (uint64_t)1 << 32;
  uint64_t next = (cursor / wrap + 1) * wrap;
  return span > 0 && cursor + span >= next ? next : cursor;
}

/* BRAID_CUDASIM_TRACE: 1 traces every launch, 2 also its pointers. */
static int trace_level(void) {
  static _Atomic int level = -1;
  int v = atomic_load(&level);
  if (v < 0) {
    const char *e = getenv("BRAID_CUDASIM_TRACE");
    v = e != NULL ? atoi(e) : 0;
    atomic_store(&level, v);
  }
  return v;
}

/* Whether the kernel may touch p (NULL is never dereferenced). */
static int reach(const void *p, const char *what, int rank, char *why, size_t n) {
  if (p == NULL || brd_cudasim_accessible(p, 1)) return 1;
  snprintf(why, n, "rank %d's executor kernel reads %s at %p, which is not device-accessible "
           "memory (cudaMalloc, cudaHostAlloc, cudaHostRegister or CUDA IPC)", rank, what, p);
  return 0;
}

static int kernel_reaches(const kargs_t *a, const brd_exec_cuda_chan_t *chans,
                          char *why, size_t n) {
  int ok = reach(a->plan, "the plan", a->rank, why, n) &&
           reach(a->state, "the status block", a->rank, why, n) &&
           reach(a->report, "the hang report", a->rank, why, n) &&
           reach(a->input, "the input", a->rank, why, n) &&
           reach(a->output, "the output", a->rank, why, n) &&
           reach(a->scratch, "the scratch", a->rank, why, n) &&
           reach(a->scalar_dev, "the device scalar", a->rank, why, n) &&
           reach(a->chans_dev, "the channel table", a->rank, why, n) &&
           reach(a->in_segs_dev, "the input segment table", a->rank, why, n) &&
           reach(a->out_segs_dev, "the output segment table", a->rank, why, n) &&
           reach(a->chan_epoch_dev, "the channel epochs", a->rank, why, n) &&
           reach(a->chan_cursor, "the channel cursors", a->rank, why, n);
  for (uint32_t c = 0; ok && c < a->nchans; c++)
    ok = reach(chans[c].peer_scratch, "a peer's scratch", a->rank, why, n) &&
         reach(chans[c].peer_output, "a peer's output", a->rank, why, n) &&
         (!(a->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) ||
          reach(chans[c].peer_input, "a peer's input", a->rank, why, n)) &&
         reach(chans[c].peer_sems, "a peer's semaphores", a->rank, why, n) &&
         reach(chans[c].sems, "its semaphores", a->rank, why, n) &&
         (!a->xchg ||
          (reach(chans[c].xchg_pub, "a peer's exchange slot", a->rank, why, n) &&
           reach(chans[c].xchg_slot, "its exchange slot", a->rank, why, n)));
  const brd_exec_cuda_seg_t *in = a->in_segs_dev ? a->in_segs_dev : a->inline_in_segs ? a->in_segs : NULL;
  const brd_exec_cuda_seg_t *out = a->out_segs_dev ? a->out_segs_dev : a->inline_out_segs ? a->out_segs : NULL;
  for (uint32_t i = 0; ok && in != NULL && i < a->n_in_segs; i++)
    ok = reach(in[i].ptr, "an input segment", a->rank, why, n);
  for (uint32_t i = 0; ok && out != NULL && i < a->n_out_segs; i++)
    ok = reach(out[i].ptr, "an output segment", a->rank, why, n);
  return ok;
}

typedef struct block_arg {
  brd_exec_launch_t *l;
  int block;
} block_arg_t;

static void *block_main(void *p) {
  block_arg_t *b = p;
  brd_exec_host_block_run(b->l, b->block);
  return NULL;
}

/* Claims the report (first failure wins) and stops the status. */
static void note_failure(const kargs_t *a, ncclResult_t res, const brd_exec_hang_t *h) {
  if (__atomic_exchange_n(&a->state->claimed, 1u, __ATOMIC_ACQ_REL) == 0u) {
    report_t *r = a->report;
    if (res == ncclRemoteError) {
      memcpy(&r->hang, h, sizeof(r->hang));
      r->timeout_ns = (uint64_t)(a->timeout_s * 1e9);
      atomic_store(&r->failed, FAIL_HANG);
    } else {
      atomic_store(&r->failed, FAIL_ABORT);
    }
  }
  __atomic_store_n(&a->state->stop, 1u, __ATOMIC_RELEASE);
}

/* Runs the plan blocks of one rank's launch: exec_kernel of exec.cu. */
static void exec_kernel(void *p) {
  kargs_t *a = p;
  state_t *st = a->state;
  const brd_exec_cuda_chan_t *src = a->chans_dev != NULL ? a->chans_dev : a->chans;
  char why[256];
  if (!kernel_reaches(a, src, why, sizeof(why))) {
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return;
  }
  uint64_t epoch;
  uint32_t launches;
  if (a->device_epoch) {
    epoch = epoch_reserve(__atomic_load_n(&st->cursor, __ATOMIC_ACQUIRE), a->span);
    launches = __atomic_load_n(&st->launches, __ATOMIC_ACQUIRE);
  } else {
    epoch = a->epoch;
    launches = a->phase;
  }
  uint64_t out_off = a->device_epoch ? (uint64_t)(launches & 1u) * a->out_half : 0;
  /* A direct output is the user's buffer: one half only (peers' staging
   * still has two). */
  uint64_t own_off = a->out_direct ? 0 : out_off;
  /* Per-pair cursors: each channel's epoch reserved from its peer's. */
  uint64_t chan_ep[BRD_EXEC_CUDA_INLINE_CHANS];
  if (a->chan_cursor != NULL)
    for (uint32_t c = 0; c < a->nchans; c++)
      chan_ep[c] = epoch_reserve(
          __atomic_load_n(&a->chan_cursor[brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer],
                          __ATOMIC_ACQUIRE),
          a->chan_epoch[c]);
  if (trace_level() > 0)
    fprintf(stderr, "cudasim: rank %d kernel: %s epoch %llu span %llu phase %u, %zu "
            "elements, %u blocks, status %p%s\n", a->rank,
            a->device_epoch ? "device" : "host", (unsigned long long)epoch,
            (unsigned long long)a->span, launches & 1u, a->count, a->plan->nblocks,
            (void *)a->state, __atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) ? " (stopped)" : "");
  if (trace_level() > 1) {
    fprintf(stderr, "cudasim:   rank %d input %p output %p scratch %p (%zu bytes)\n", a->rank,
            (const void *)a->input, (void *)a->output, (void *)a->scratch, a->scratch_bytes);
    for (uint32_t c = 0; c < a->nchans; c++)
      fprintf(stderr, "cudasim:   rank %d chan %u: peer %d scratch %p output %p sems %p/%p\n",
              a->rank, c, brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer,
              src[c].peer_scratch, src[c].peer_output, (void *)src[c].peer_sems,
              (void *)src[c].sems);
    for (uint32_t c = 0; a->xchg && c < a->nchans; c++)
      fprintf(stderr, "cudasim:   rank %d chan %u: exchange slots %p/%p, publishes %p\n",
              a->rank, c, (void *)src[c].xchg_pub, (void *)src[c].xchg_slot,
              src[c].xchg_output);
  }

  /* A launch after a failure leaves at once (brd_exec_cuda_status_reset). */
  if (__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) == 0) {
    brd_exec_chan_t *chans = calloc(a->nchans ? a->nchans : 1, sizeof(*chans));
    brd_exec_launch_t *l = malloc(sizeof(*l));
    uint32_t nblocks = a->plan->nblocks;
    pthread_t *th = calloc(nblocks, sizeof(*th));
    block_arg_t *ba = calloc(nblocks, sizeof(*ba));
    if (chans == NULL || l == NULL || th == NULL || ba == NULL) {
      brd_cudasim_fault(cudaErrorMemoryAllocation, "out of host memory starting a kernel");
      goto out;
    }
    for (uint32_t c = 0; c < a->nchans; c++) {
      chans[c].peer_scratch = src[c].peer_scratch;
      chans[c].peer_output = src[c].peer_output != NULL
                                 ? (char *)src[c].peer_output + out_off : NULL;
      /* Meaningful (and set) only for plans reading peers' inputs. */
      chans[c].peer_input = (a->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) ? src[c].peer_input
                                                                          : NULL;
      chans[c].peer_sems = (_Atomic uint64_t *)src[c].peer_sems;
      chans[c].sems = (_Atomic uint64_t *)src[c].sems;
      /* The host executor resolves the exchange as exec.cu does: a
       * published output as given, else peer_output (this half's staging)
       * count elements apart. */
      chans[c].xchg_pub = (_Atomic uint64_t *)src[c].xchg_pub;
      chans[c].xchg_slot = (_Atomic uint64_t *)src[c].xchg_slot;
      chans[c].xchg_output = src[c].xchg_output;
    }
    brd_exec_args_t ea;
    memset(&ea, 0, sizeof(ea));
    ea.plan = a->plan;
    ea.rank = a->rank;
    ea.input = a->input;
    ea.output = a->output != NULL ? a->output + own_off : NULL;
    ea.scratch = a->scratch;
    ea.scratch_bytes = a->scratch_bytes;
    ea.chans = chans;
    ea.count = a->count;
    ea.dtype = a->dtype;
    ea.redop = a->redop;
    ea.scalar = a->scalar_dev != NULL ? a->scalar_dev : a->has_scalar ? &a->scalar : NULL;
    ea.epoch = epoch;
    ea.phase = launches & 1u;
    ea.abort_flag = &a->report->abort;
    ea.timeout_s = a->timeout_s;
    ea.in_stride = a->in_stride;
    ea.out_stride = a->out_stride;
    ea.in_segs = (const brd_exec_seg_t *)(a->in_segs_dev ? a->in_segs_dev
                                          : a->inline_in_segs ? a->in_segs : NULL);
    ea.out_segs = (const brd_exec_seg_t *)(a->out_segs_dev ? a->out_segs_dev
                                           : a->inline_out_segs ? a->out_segs : NULL);
    ea.n_in_segs = ea.in_segs != NULL ? a->n_in_segs : 0;
    ea.n_out_segs = ea.out_segs != NULL ? a->n_out_segs : 0;
    ea.chan_epoch = a->chan_cursor ? chan_ep
                    : a->chan_epoch_dev ? a->chan_epoch_dev
                    : a->has_chan_epoch ? a->chan_epoch : NULL;
    ea.xchg = a->xchg;
    if (brd_exec_host_launch_init(l, &ea) != ncclSuccess) {
      /* The checks at enqueue passed: only device tables read now can be
       * wrong, which on a GPU is a fault. */
      brd_cudasim_fault(cudaErrorIllegalAddress, "the executor kernel read a device table "
                        "with a NULL buffer or a count above the launch's");
      goto out;
    }
    uint32_t started = 1;
    for (; started < nblocks; started++) {
      ba[started].l = l;
      ba[started].block = (int)started;
      if (pthread_create(&th[started], NULL, block_main, &ba[started]) != 0) break;
    }
    if (started == nblocks) {
      brd_exec_host_block_run(l, 0);
    } else {
      /* Blocks that cannot all be resident: what a GPU would never run. */
      atomic_store(&l->stop, 1);
      brd_cudasim_fault(cudaErrorLaunchOutOfResources, "cannot start a thread per block");
    }
    for (uint32_t b = 1; b < started; b++) pthread_join(th[b], NULL);
    brd_exec_hang_t hang;
    memset(&hang, 0, sizeof(hang));
    ncclResult_t res = brd_exec_host_launch_fini(l, &hang);
    if (trace_level() > 0) {
      fprintf(stderr, "cudasim: rank %d kernel epoch %llu done: %d; peer sems[0]:", a->rank,
              (unsigned long long)epoch, (int)res);
      for (uint32_t c = 0; c < a->nchans; c++)
        fprintf(stderr, " %llu", src[c].peer_sems ? (unsigned long long)src[c].peer_sems[0] : 0ull);
      fprintf(stderr, "\n");
    }
    if (res != ncclSuccess) note_failure(a, res, &hang);
  out:
    free(ba);
    free(th);
    free(l);
    free(chans);
  }

  if (a->device_epoch) {
    /* Advanced past this launch, failed or not, so every rank's cursor
     * stays in step; the phase flips. */
    __atomic_store_n(&st->cursor, epoch + a->span, __ATOMIC_RELEASE);
    __atomic_store_n(&st->launches, launches + 1u, __ATOMIC_RELEASE);
  }
  if (a->chan_cursor != NULL)
    for (uint32_t c = 0; c < a->nchans; c++)
      __atomic_store_n(&a->chan_cursor[brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer],
                       chan_ep[c] + a->chan_epoch[c], __ATOMIC_RELEASE);
}

typedef struct copyout_args {
  const state_t *st;
  const char *src;
  size_t half;
  char *dst;
  size_t seg_bytes;
  uint32_t nseg;
  size_t src_stride, dst_stride;
} copyout_args_t;

/* copyout_kernel of exec.cu: the half of the last device-epoch launch. */
static void copyout_kernel(void *p) {
  copyout_args_t *c = p;
  char why[256];
  int rank = -1;
  if (!reach(c->st, "the status block", rank, why, sizeof(why)) ||
      !reach(c->src, "the staging buffer", rank, why, sizeof(why)) ||
      !reach(c->dst, "the copy-out destination", rank, why, sizeof(why))) {
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return;
  }
  unsigned int launches = __atomic_load_n(&c->st->launches, __ATOMIC_ACQUIRE);
  const char *s = c->src + (size_t)((launches - 1u) & 1u) * c->half;
  for (uint32_t i = 0; i < c->nseg; i++)
    memcpy(c->dst + i * c->dst_stride, s + i * c->src_stride, c->seg_bytes);
}

/* ---- host side: exec.cu's, in C ------------------------------------------------- */

/* Copies bytes from src to dst (src NULL: zeroes dst) on a private
 * non-blocking stream and waits for it (see exec.cu). */
static ncclResult_t private_copy(void *dst, const void *src, size_t bytes,
                                 enum cudaMemcpyKind kind, const char *what) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags", res, out);
  if (src == NULL) {
    CUDA_CHECK_GOTO(cudaMemsetAsync(dst, 0, bytes, s), what, res, out_stream);
  } else {
    CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, kind, s), what, res, out_stream);
  }
  CUDA_CHECK_GOTO(cudaStreamSynchronize(s), what, res, out_stream);
out_stream:
  cudaStreamDestroy(s);
out:
  return res;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_create(const brd_ir_plan_t *plan,
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
  cp = calloc(1, sizeof(*cp));
  if (cp == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor plan", sizeof(*cp));
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
void brd_exec_cuda_plan_destroy(brd_exec_cuda_plan_t *plan) {
  if (plan == NULL) return;
  cudaFree(plan->dev);
  brd_plan_destroy(plan->host);
  free(plan);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_status_create(brd_exec_cuda_status_t **st_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_status_t *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor status", sizeof(*st));
    return ncclSystemError;
  }
  CUDA_CHECK_GOTO(cudaHostAlloc((void **)&st->host, sizeof(report_t), cudaHostAllocMapped),
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
size_t brd_exec_cuda_status_device_bytes(void) { return sizeof(state_t); }

/* See exec_cuda.h. */
void brd_exec_cuda_status_destroy(brd_exec_cuda_status_t *st) {
  if (st == NULL) return;
  cudaFree(st->state);
  cudaFreeHost(st->host);
  free(st);
}

/* See exec_cuda.h. */
void brd_exec_cuda_status_abort(brd_exec_cuda_status_t *st) {
  atomic_store_explicit(&st->host->abort, 1, memory_order_release);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_status_reset(brd_exec_cuda_status_t *st) {
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
ncclResult_t brd_exec_cuda_poll(brd_exec_cuda_status_t *st, brd_exec_cuda_hang_t *hang_out) {
  report_t *r = st->host;
  int failed = atomic_load_explicit(&r->failed, memory_order_acquire);
  if (failed == FAIL_NONE) return ncclSuccess;
  if (failed == FAIL_ABORT) {
    if (!st->reported) INFO(BRD_SUBSYS_COLL, "CUDA executor: launch stopped by the abort flag");
    st->reported = 1;
    return ncclSystemError;
  }
  brd_exec_cuda_hang_t h = r->hang;
  if (!st->reported) brd_exec_cuda_hang_warn(&h, (double)r->timeout_ns * 1e-9);
  st->reported = 1;
  if (hang_out != NULL) *hang_out = h;
  return ncclRemoteError;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_chans_create(const brd_exec_cuda_chan_t *chans, uint32_t n,
                                        brd_exec_cuda_chan_t **dev_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_chan_t *dev = NULL;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(*dev);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&dev, bytes), "cudaMalloc for a channel table", res, out);
  if (n > 0)
    CHECK_GOTO(private_copy(dev, chans, (size_t)n * sizeof(*dev), cudaMemcpyHostToDevice,
                            "copying a channel table"), res, fail_free);
  *dev_out = dev;
  return ncclSuccess;
fail_free:
  cudaFree(dev);
out:
  return res;
}

/* See exec_cuda.h. */
void brd_exec_cuda_chans_destroy(brd_exec_cuda_chan_t *dev) {
  if (dev != NULL) cudaFree(dev);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_launch(const brd_exec_cuda_args_t *args, cudaStream_t stream) {
  if (args->plan == NULL || args->status == NULL) {
    WARN("CUDA executor: launch without a %s", args->plan == NULL ? "plan" : "status block");
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
         "multiple of 16 bytes (brd_plan_scratch_bytes)", args->rank, args->scratch_bytes);
    return ncclInvalidArgument;
  }
  uint64_t span = brd_plan_epoch_span(p, &l);
  if (!args->device_epoch && args->chan_cursor_dev == NULL)
    CHECK(brd_exec_cuda_epochs_check(args, nchans, span));

  kargs_t *ka = calloc(1, sizeof(*ka));
  if (ka == NULL) {
    WARN("out of host memory building rank %d's kernel arguments", args->rank);
    return ncclSystemError;
  }
  ka->plan = args->plan->dev;
  ka->chans_dev = args->chans_dev;
  ka->in_segs_dev = args->in_segs_dev;
  ka->out_segs_dev = args->out_segs_dev;
  ka->chan_epoch_dev = args->chan_epoch_dev;
  ka->chan_cursor = args->chan_cursor_dev;
  ka->input = args->input;
  ka->output = args->output;
  ka->scratch = args->scratch;
  ka->scratch_bytes = args->scratch_bytes;
  ka->scalar_dev = args->scalar_dev;
  if (args->scalar_dev == NULL && args->scalar != NULL) {
    memcpy(&ka->scalar, args->scalar, brd_reduce_dtype_size(args->dtype));
    ka->has_scalar = 1;
  }
  ka->report = args->status->dev;
  ka->state = args->status->state;
  ka->count = args->count;
  ka->dtype = args->dtype;
  ka->redop = args->redop;
  ka->epoch = args->epoch;
  ka->span = span;
  ka->out_half = args->device_epoch ? args->out_half_bytes : 0;
  ka->timeout_s = args->timeout_s > 0 ? args->timeout_s
                                      : (double)brd_param_int(BRD_P_BRAID_TIMEOUT);
  ka->in_stride = args->in_stride;
  ka->out_stride = args->out_stride;
  ka->phase = args->phase;
  ka->rank = args->rank;
  ka->device_epoch = args->device_epoch != 0;
  ka->nchans = nchans;
  ka->n_in_segs = args->n_in_segs;
  ka->n_out_segs = args->n_out_segs;
  ka->xchg = args->xchg != 0;
  ka->out_direct = args->out_direct != 0;
  if (args->chans_dev == NULL && nchans > 0)
    memcpy(ka->chans, args->chans, nchans * sizeof(ka->chans[0]));
  if (args->chan_epoch_dev == NULL && args->chan_epoch != NULL) {
    ka->has_chan_epoch = 1;
    memcpy(ka->chan_epoch, args->chan_epoch, nchans * sizeof(ka->chan_epoch[0]));
  }
  if (args->in_segs_dev == NULL && args->in_segs != NULL && args->n_in_segs > 0) {
    ka->inline_in_segs = 1;
    memcpy(ka->in_segs, args->in_segs, args->n_in_segs * sizeof(ka->in_segs[0]));
  }
  if (args->out_segs_dev == NULL && args->out_segs != NULL && args->n_out_segs > 0) {
    ka->inline_out_segs = 1;
    memcpy(ka->out_segs, args->out_segs, args->n_out_segs * sizeof(ka->out_segs[0]));
  }
  cudaError_t e = brd_cudasim_launch(stream, exec_kernel, ka, sizeof(*ka));
  free(ka);
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching rank %d's kernel (%u blocks) failed: %s "
         "(CUDA error %d)", args->rank, p->nblocks, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_copyout(const brd_exec_cuda_copyout_t *c, cudaStream_t stream) {
  if (c->nseg == 0 || c->seg_bytes == 0) return ncclSuccess;
  if (c->status == NULL || c->src == NULL || c->dst == NULL) {
    WARN("CUDA executor: copy-out without a %s",
         c->status == NULL ? "status block" : c->src == NULL ? "source" : "destination");
    return ncclInvalidArgument;
  }
  if ((c->nseg - 1) * c->src_stride + c->seg_bytes > c->half_bytes) {
    WARN("CUDA executor: copy-out of %u segments of %zu bytes %zu apart leaves a "
         "staging half of %zu bytes", c->nseg, c->seg_bytes, c->src_stride, c->half_bytes);
    return ncclInvalidArgument;
  }
  copyout_args_t a = {c->status->state, c->src, c->half_bytes, c->dst,
                      c->seg_bytes, c->nseg, c->src_stride, c->dst_stride};
  cudaError_t e = brd_cudasim_launch(stream, copyout_kernel, &a, sizeof(a));
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching a copy-out of %u x %zu bytes failed: %s (CUDA "
         "error %d)", c->nseg, c->seg_bytes, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}
