/*
 * Braid CUDA simulator, the executor's kernels (flavour `cudasim/`): the
 * two entry points of src/device/exec_kernel.h, run by the simulator's
 * streams (brd_cudasim_launch) over the host executor (exec_host.h), one
 * CPU thread per plan block. Everything else of the CUDA executor (its
 * objects, checks, launch set-up, status and messages) is
 * src/device/exec_cuda.c itself, linked into both flavours.
 *
 * What these kernels do as exec.cu's do: read the resolved kernel
 * arguments (inline channel, segment and epoch tables copied at enqueue),
 * device epochs (brd_plan_epoch_at on the cursor, phase = launches & 1,
 * cursor and launches advanced after every launch, failed or not),
 * out_half and out_direct, the output exchange (the host executor
 * publishes and resolves it; a published peer output has no half offset,
 * a staged one does), a device scalar read when the kernel runs, the
 * report (first failure wins), leaving at once after a failure, and the
 * copy-out reading the phase of the last device-epoch launch.
 *
 * What differs: the waits are the host executor's (it also WARNs a hang
 * where it happens, before brd_exec_cuda_poll reports it), and every
 * pointer a kernel would dereference first is checked against the
 * simulator's memory table: host memory the GPU could not reach faults the
 * device (cudaErrorIllegalAddress), as the kernel would.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "device/exec_cuda.h"
#include "device/exec_host.h"
#include "device/exec_kernel.h"
#include "device/layout.h"

#include "cudasim.h"

/* The executor kernel's arguments, and what the host executor needs that
 * exec.cu's kernels do not (taken from the checked launch arguments). */
typedef struct sim_kargs {
  brd_exec_kargs_t k;
  int dtype;
  int redop;
  size_t scratch_bytes;
  uint32_t nchans;                 /* the rank's channels (read by the kernel) */
  uint32_t n_in_segs, n_out_segs;  /* as given, device tables too */
} sim_kargs_t;

const char *brd_cudasim_executor(void) { return "exec_sim.c"; }

/* ---- port channels ---------------------------------------------------------- */

/* What exec.cu's port_post does, for the host executor's puts: a trigger
 * into the status's FIFO, in slot order. */
typedef struct sim_port {
  brd_exec_port_t ex;
  brd_exec_state_t *st;
  brd_exec_fifo_t *fifo;
  int peer;
  _Atomic int *abort_flag;
  double timeout_s;
} sim_port_t;

static int sim_port_put(brd_exec_port_t *ex, size_t off, size_t len, int kind) {
  sim_port_t *p = (sim_port_t *)ex;
  uint64_t slot = __atomic_fetch_add(&p->st->port_head, 1ull, __ATOMIC_ACQ_REL);
  double deadline = 0;
  while (slot - __atomic_load_n(&p->fifo->tail, __ATOMIC_ACQUIRE) >= BRD_EXEC_FIFO_ENTRIES) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    if (deadline == 0) deadline = now + p->timeout_s;
    if (now > deadline || atomic_load(p->abort_flag)) return ncclRemoteError;
    sched_yield();
  }
  brd_exec_trigger_t *e = &p->fifo->ring[slot % BRD_EXEC_FIFO_ENTRIES];
  if (kind == BRD_EXEC_PUT_SEM)
    for (size_t i = 0; i < len / 8 && i < 3; i++)
      __atomic_store_n(&e->val[i],
                       __atomic_load_n((const uint64_t *)(p->ex.mirror + off) + i,
                                       __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
  __atomic_store_n(&e->off, (uint64_t)off, __ATOMIC_RELAXED);
  __atomic_store_n(&e->len, (uint64_t)len, __ATOMIC_RELAXED);
  __atomic_store_n(&e->peer, (uint32_t)p->peer, __ATOMIC_RELAXED);
  __atomic_store_n(&e->kind, (uint32_t)kind, __ATOMIC_RELAXED);
  __atomic_store_n(&e->seq, slot + 1, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* ---- the kernels ------------------------------------------------------------ */

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

static int kernel_reaches(const sim_kargs_t *s, const brd_exec_cuda_chan_t *chans,
                          char *why, size_t n) {
  const brd_exec_kargs_t *a = &s->k;
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
  for (uint32_t c = 0; ok && c < s->nchans; c++) {
    /* A switch channel's peer pointers are multicast addresses, resolved
     * (and checked) by switch_members. */
    if (brd_ir_plan_chan(a->plan, a->rank, (int)c)->type == BRD_IR_CHAN_SWITCH) {
      ok = reach(chans[c].sems, "its switch semaphores", a->rank, why, n);
      continue;
    }
    ok = reach(chans[c].peer_scratch, "a peer's scratch", a->rank, why, n) &&
         reach(chans[c].peer_output, "a peer's output", a->rank, why, n) &&
         (!(a->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) ||
          reach(chans[c].peer_input, "a peer's input", a->rank, why, n)) &&
         reach(chans[c].peer_sems, "a peer's semaphores", a->rank, why, n) &&
         reach(chans[c].sems, "its semaphores", a->rank, why, n) &&
         (!a->xchg ||
          (reach(chans[c].xchg_pub, "a peer's exchange slot", a->rank, why, n) &&
           reach(chans[c].xchg_slot, "its exchange slot", a->rank, why, n)));
  }
  const brd_exec_seg_t *in = a->in_segs_dev ? a->in_segs_dev : a->n_in_segs ? a->in_segs : NULL;
  const brd_exec_seg_t *out = a->out_segs_dev ? a->out_segs_dev : a->n_out_segs ? a->out_segs : NULL;
  for (uint32_t i = 0; ok && in != NULL && i < s->n_in_segs; i++)
    ok = reach(in[i].ptr, "an input segment", a->rank, why, n);
  for (uint32_t i = 0; ok && out != NULL && i < s->n_out_segs; i++)
    ok = reach(out[i].ptr, "an output segment", a->rank, why, n);
  return ok;
}

/* A switch channel (device/ir.h) as the host executor takes it: every
 * member's scratch base and switch semaphores, in rank order, from the
 * multicast mappings of the CUDA channel's peer_scratch and peer_sems
 * (the simulator's members are in device order, which must be rank
 * order). 0 after faulting the device when either is no multicast
 * address of the plan's nranks members covering the whole range. */
static int switch_members(const sim_kargs_t *sk, const brd_exec_cuda_chan_t *src,
                          void **scratch_out, _Atomic uint64_t **ssems_out) {
  const brd_exec_kargs_t *a = &sk->k;
  const brd_ir_plan_t *p = a->plan;
  struct {
    const void *mc;
    size_t bytes;
    const char *what;
  } want[2] = {{src->peer_scratch, sk->scratch_bytes, "scratch"},
               {src->peer_sems, (size_t)p->nsems * p->nranks * sizeof(uint64_t),
                "switch semaphores"}};
  for (int i = 0; i < 2; i++) {
    brd_cudasim_mc_t mc;
    if (want[i].bytes == 0) continue;
    if (!brd_cudasim_mc_find(want[i].mc, want[i].bytes, &mc) || mc.n != p->nranks) {
      char why[256];
      snprintf(why, sizeof(why), "rank %d's executor kernel reaches its switch channel's %s "
               "at %p (%zu bytes), which is not a multicast mapping of %d members with "
               "memory bound under it (it has %d)", a->rank, want[i].what, want[i].mc,
               want[i].bytes, p->nranks, mc.n);
      brd_cudasim_fault(cudaErrorIllegalAddress, why);
      return 0;
    }
    for (int m = 0; m < mc.n; m++) {
      char *uc = mc.uc[m] + ((const char *)want[i].mc - mc.base);
      if (i == 0) scratch_out[m] = uc;
      else ssems_out[m] = (_Atomic uint64_t *)uc;
    }
  }
  return 1;
}

/* A zero-copy switch plan (device/ir.h): every member's input and output
 * from the multicast mappings of the CUDA channel's peer_input and
 * peer_output (NULL where the plan does not reach them through the
 * switch; then that member array stays NULL entries). 0 after faulting
 * the device when one is no multicast mapping of nranks members covering
 * the buffer. */
static int switch_io_members(const sim_kargs_t *sk, const brd_exec_cuda_chan_t *src,
                             const void **input_out, void **output_out) {
  const brd_exec_kargs_t *a = &sk->k;
  const brd_ir_plan_t *p = a->plan;
  brd_ir_coll_traits_t t = brd_ir_coll_traits(p->coll);
  size_t es = a->layout.esize, cnt = a->layout.count;
  size_t in_bytes = ((t.in_segs_all ? (size_t)(p->nranks - 1) * a->in_stride : 0) + cnt) * es;
  size_t out_bytes =
      ((t.out_segs_all ? (size_t)(p->nranks - 1) * a->out_stride : 0) + cnt) * es;
  const void *mcs[2] = {src->peer_input, src->peer_output};
  size_t bytes[2] = {in_bytes, out_bytes};
  for (int i = 0; i < 2; i++) {
    brd_cudasim_mc_t mc;
    if (mcs[i] == NULL || bytes[i] == 0) continue;
    if (!brd_cudasim_mc_find(mcs[i], bytes[i], &mc) || mc.n != p->nranks) {
      char why[256];
      snprintf(why, sizeof(why), "rank %d's executor kernel reaches its %s through the "
               "switch channel at %p (%zu bytes), which is not a multicast mapping of %d "
               "members with memory bound under it (it has %d)", a->rank,
               i == 0 ? "input" : "output", mcs[i], bytes[i], p->nranks, mc.n);
      brd_cudasim_fault(cudaErrorIllegalAddress, why);
      return 0;
    }
    for (int m = 0; m < mc.n; m++) {
      char *uc = mc.uc[m] + ((const char *)mcs[i] - mc.base);
      if (i == 0) input_out[m] = uc;
      else output_out[m] = uc;
    }
  }
  return 1;
}

typedef struct block_arg {
  brd_exec_run_t *l;
  int block;
} block_arg_t;

static void *block_main(void *p) {
  block_arg_t *b = p;
  brd_exec_host_block_run(b->l, b->block);
  return NULL;
}

/* Claims the report (first failure wins) and stops the status. */
static void note_failure(const brd_exec_kargs_t *a, ncclResult_t res, const brd_exec_hang_t *h) {
  if (__atomic_exchange_n(&a->state->claimed, 1u, __ATOMIC_ACQ_REL) == 0u) {
    brd_exec_report_t *r = a->report;
    if (res == ncclRemoteError) {
      r->hang = *h;
      r->timeout_ns = r->stuck_ns != 0 && r->stuck_ns < a->timeout_ns ? r->stuck_ns
                                                                       : a->timeout_ns;
      __atomic_store_n(&r->failed, BRD_EXEC_FAIL_HANG, __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(&r->failed, BRD_EXEC_FAIL_ABORT, __ATOMIC_RELEASE);
    }
  }
  __atomic_store_n(&a->state->stop, 1u, __ATOMIC_RELEASE);
}

/* Runs the plan blocks of one rank's launch: exec_kernel of exec.cu. */
static void exec_kernel(void *p) {
  sim_kargs_t *sk = p;
  brd_exec_kargs_t *a = &sk->k;
  brd_exec_state_t *st = a->state;
  const brd_exec_cuda_chan_t *src = a->chans_dev != NULL ? a->chans_dev : a->chans;
  char why[256];
  if (!reach(a->plan, "the plan", a->rank, why, sizeof(why))) {
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return;
  }
  sk->nchans = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  if (!kernel_reaches(sk, src, why, sizeof(why))) {
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return;
  }
  uint64_t epoch;
  uint32_t launches;
  if (a->device_epoch) {
    epoch = brd_plan_epoch_at(__atomic_load_n(&st->cursor, __ATOMIC_ACQUIRE), a->span);
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
    for (uint32_t c = 0; c < sk->nchans; c++)
      chan_ep[c] = brd_plan_chan_epoch(
          a->plan,
          __atomic_load_n(&a->chan_cursor[brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer],
                          __ATOMIC_ACQUIRE),
          a->chan_epoch[c]);
  if (trace_level() > 0)
    fprintf(stderr, "cudasim: rank %d kernel: %s epoch %llu span %llu phase %u, %zu "
            "elements, %u blocks, status %p%s\n", a->rank,
            a->device_epoch ? "device" : "host", (unsigned long long)epoch,
            (unsigned long long)a->span, launches & 1u, (size_t)a->layout.count, a->plan->nblocks,
            (void *)a->state, __atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) ? " (stopped)" : "");
  if (trace_level() > 1) {
    fprintf(stderr, "cudasim:   rank %d input %p output %p scratch %p (%zu bytes)\n", a->rank,
            (const void *)a->input, (void *)a->output, (void *)a->scratch, sk->scratch_bytes);
    for (uint32_t c = 0; c < sk->nchans; c++)
      fprintf(stderr, "cudasim:   rank %d chan %u: peer %d scratch %p output %p sems %p/%p\n",
              a->rank, c, brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer,
              src[c].peer_scratch, src[c].peer_output, (void *)src[c].peer_sems,
              (void *)src[c].sems);
    for (uint32_t c = 0; a->xchg && c < sk->nchans; c++)
      fprintf(stderr, "cudasim:   rank %d chan %u: exchange slots %p/%p, publishes %p\n",
              a->rank, c, (void *)src[c].xchg_pub, (void *)src[c].xchg_slot,
              src[c].xchg_output);
  }

  /* A launch after a failure leaves at once (brd_exec_cuda_status_reset). */
  if (__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) == 0) {
    brd_exec_chan_t *chans = calloc(sk->nchans ? sk->nchans : 1, sizeof(*chans));
    sim_port_t *ports = calloc(sk->nchans ? sk->nchans : 1, sizeof(*ports));
    brd_exec_run_t *l = malloc(sizeof(*l));
    uint32_t nblocks = a->plan->nblocks;
    /* Members of the switch channel, if any (at most one per rank). */
    void **mscratch = calloc(a->plan->nranks, sizeof(*mscratch));
    _Atomic uint64_t **mssems = calloc(a->plan->nranks, sizeof(*mssems));
    const void **minput = calloc(a->plan->nranks, sizeof(*minput));
    void **moutput = calloc(a->plan->nranks, sizeof(*moutput));
    pthread_t *th = calloc(nblocks, sizeof(*th));
    block_arg_t *ba = calloc(nblocks, sizeof(*ba));
    if (chans == NULL || ports == NULL || l == NULL || th == NULL || ba == NULL ||
        mscratch == NULL || mssems == NULL || minput == NULL || moutput == NULL) {
      brd_cudasim_fault(cudaErrorMemoryAllocation, "out of host memory starting a kernel");
      goto out;
    }
    for (uint32_t c = 0; c < sk->nchans; c++) {
      if (brd_ir_plan_chan(a->plan, a->rank, (int)c)->type == BRD_IR_CHAN_SWITCH) {
        if (!switch_members(sk, &src[c], mscratch, mssems)) goto out;
        chans[c].member_scratch = mscratch;
        chans[c].member_ssems = mssems;
        if (a->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) {
          if (!switch_io_members(sk, &src[c], minput, moutput)) goto out;
          chans[c].member_input = minput;
          chans[c].member_output = moutput;
        }
        continue;
      }
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
      const brd_ir_chan_t *ic = brd_ir_plan_chan(a->plan, a->rank, (int)c);
      if (ic->type == BRD_IR_CHAN_PORT) {
        brd_exec_fifo_t *f = st->fifo;
        ports[c].ex.put = sim_port_put;
        ports[c].ex.mirror = (char *)(uintptr_t)f->mirror[ic->peer];
        ports[c].ex.bytes = SIZE_MAX / 2; /* the proxy checks the window's bounds */
        ports[c].st = st;
        ports[c].fifo = f;
        ports[c].peer = ic->peer;
        ports[c].abort_flag = (_Atomic int *)&a->report->abort;
        ports[c].timeout_s = (double)a->timeout_ns * 1e-9;
        chans[c].port = &ports[c].ex;
      }
    }
    brd_exec_args_t ea;
    memset(&ea, 0, sizeof(ea));
    ea.plan = a->plan;
    ea.rank = a->rank;
    ea.input = a->input;
    ea.output = a->output != NULL ? a->output + own_off : NULL;
    ea.scratch = a->scratch;
    ea.scratch_bytes = sk->scratch_bytes;
    ea.chans = chans;
    ea.count = (size_t)a->layout.count;
    ea.dtype = sk->dtype;
    ea.redop = sk->redop;
    /* PreMulSum's scalar: read now from the device, or the bits the host
     * half resolved (the host executor reads it for PreMulSum only). */
    ea.scalar = a->scalar_dev != NULL ? a->scalar_dev : (const void *)&a->arg;
    ea.epoch = epoch;
    ea.phase = launches & 1u;
    ea.abort_flag = (_Atomic int *)&a->report->abort;
    ea.timeout_s = (double)a->timeout_ns * 1e-9;
    ea.stuck_ns = (const uint64_t *)&a->report->stuck_ns;
    ea.in_stride = a->in_stride;
    ea.out_stride = a->out_stride;
    ea.in_segs = a->in_segs_dev ? a->in_segs_dev : a->n_in_segs ? a->in_segs : NULL;
    ea.out_segs = a->out_segs_dev ? a->out_segs_dev : a->n_out_segs ? a->out_segs : NULL;
    ea.n_in_segs = ea.in_segs != NULL ? sk->n_in_segs : 0;
    ea.n_out_segs = ea.out_segs != NULL ? sk->n_out_segs : 0;
    ea.chan_epoch = a->chan_cursor ? (const uint64_t *)chan_ep
                    : a->chan_epoch_dev ? a->chan_epoch_dev
                    : a->has_chan_epoch ? a->chan_epoch : NULL;
    ea.xchg = a->xchg;
    if (brd_exec_host_run_init(l, &ea) != ncclSuccess) {
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
    ncclResult_t res = brd_exec_host_run_fini(l, &hang);
    if (trace_level() > 0) {
      fprintf(stderr, "cudasim: rank %d kernel epoch %llu done: %d; peer sems[0]:", a->rank,
              (unsigned long long)epoch, (int)res);
      for (uint32_t c = 0; c < sk->nchans; c++)
        fprintf(stderr, " %llu",
                src[c].peer_sems && chans[c].member_ssems == NULL
                    ? (unsigned long long)src[c].peer_sems[0] : 0ull);
      fprintf(stderr, "\n");
    }
    if (res != ncclSuccess) note_failure(a, res, &hang);
  out:
    free(mssems);
    free(minput);
    free(moutput);
    free(mscratch);
    free(ba);
    free(th);
    free(l);
    free(ports);
    free(chans);
  }

  if (a->device_epoch) {
    /* Advanced past this launch, failed or not, so every rank's cursor
     * stays in step; the phase flips. */
    __atomic_store_n(&st->cursor, epoch + a->span, __ATOMIC_RELEASE);
    __atomic_store_n(&st->launches, launches + 1u, __ATOMIC_RELEASE);
  }
  if (a->chan_cursor != NULL)
    for (uint32_t c = 0; c < sk->nchans; c++)
      __atomic_store_n(&a->chan_cursor[brd_ir_plan_chan(a->plan, a->rank, (int)c)->peer],
                       brd_plan_chan_next(a->plan, chan_ep[c], a->chan_epoch[c]),
                       __ATOMIC_RELEASE);
}

/* copyout_kernel of exec.cu: the half of the last device-epoch launch. */
static void copyout_kernel(void *p) {
  const brd_exec_copyout_kargs_t *c = p;
  char why[256];
  int rank = -1;
  if (!reach(c->state, "the status block", rank, why, sizeof(why)) ||
      !reach(c->src, "the staging buffer", rank, why, sizeof(why)) ||
      !reach(c->dst, "the copy-out destination", rank, why, sizeof(why))) {
    brd_cudasim_fault(cudaErrorIllegalAddress, why);
    return;
  }
  unsigned int launches = __atomic_load_n(&c->state->launches, __ATOMIC_ACQUIRE);
  const char *s = c->src + (size_t)((launches - 1u) & 1u) * c->half;
  for (uint32_t i = 0; i < c->nseg; i++)
    memcpy(c->dst + i * c->dst_stride, s + i * c->src_stride, c->units * c->width);
}

/* ---- entry points (exec_kernel.h) --------------------------------------------- */

/* What stands for each kernel the CUDA executor has (exec.cu's
 * exec_kernel<dtype, fn> and copyout_kernel<width>), for the simulator's
 * lazy loading (brd_cudasim_load). */
static const char exec_keys[ncclNumTypes][BRD_REDUCE_FN_SUMPOSTDIV + 1];
static const char copyout_keys[4];

static const void *copyout_key(uint32_t width) {
  return &copyout_keys[width == 16 ? 0 : width == 8 ? 1 : width == 4 ? 2 : 3];
}

/* See exec_kernel.h. */
cudaError_t brd_exec_kernels_load(void) {
  cudaError_t e = cudaSuccess;
  for (int dt = 0; dt < ncclNumTypes && e == cudaSuccess; dt++)
    for (int fn = 0; fn <= BRD_REDUCE_FN_SUMPOSTDIV && e == cudaSuccess; fn++)
      e = brd_cudasim_load(&exec_keys[dt][fn]);
  for (int i = 0; i < 4 && e == cudaSuccess; i++) e = brd_cudasim_load(&copyout_keys[i]);
  return e;
}

/* See exec_kernel.h. */
cudaError_t brd_exec_kernel_launch(const brd_exec_kargs_t *ka, const brd_exec_cuda_args_t *args,
                                   uint32_t nblocks, cudaStream_t stream) {
  (void)nblocks; /* the plan's, read by the kernel */
  if (args->dtype < 0 || args->dtype >= ncclNumTypes || ka->fn < 0 ||
      ka->fn > BRD_REDUCE_FN_SUMPOSTDIV)
    return cudaErrorInvalidDeviceFunction;
  cudaError_t le = brd_cudasim_load(&exec_keys[args->dtype][ka->fn]);
  if (le != cudaSuccess) return le;
  sim_kargs_t *sk = malloc(sizeof(*sk));
  if (sk == NULL) return cudaErrorMemoryAllocation;
  sk->k = *ka;
  sk->dtype = args->dtype;
  sk->redop = args->redop;
  sk->scratch_bytes = args->scratch_bytes;
  sk->n_in_segs = args->n_in_segs;
  sk->n_out_segs = args->n_out_segs;
  cudaError_t e = brd_cudasim_launch(stream, exec_kernel, sk, sizeof(*sk));
  free(sk);
  return e;
}

/* See exec_kernel.h. */
cudaError_t brd_exec_kernel_copyout(const brd_exec_copyout_kargs_t *c, cudaStream_t stream) {
  cudaError_t le = brd_cudasim_load(copyout_key(c->width));
  if (le != cudaSuccess) return le;
  return brd_cudasim_launch(stream, copyout_kernel, c, sizeof(*c));
}
