/*
 * Braid: the CUDA backend's launch path (backend.h begin, order, run_local,
 * run_works, rma_run, end, poll; the ops table is in launch_cuda.c, the
 * shared state in launch_cuda.h). Each work becomes an executor kernel
 * enqueued on the user's stream; the host never waits for the kernels.
 *
 * Sequence numbers. Collective works take their epoch and their scratch
 * and staging phase from a cursor the kernels keep on the device (the
 * executor's device epochs), so a collective captured into a CUDA graph
 * gets fresh ones at every replay; their output goes to the window's
 * staging half of that phase and a copy-out kernel, reading the same
 * phase, moves it to the user's buffer. Point-to-point works carry spans:
 * the kernels keep each pair's cursor on the device, on a second executor
 * status, so a captured send/recv gets fresh sequence numbers too.
 *
 * Snapshots. A send whose buffer overlaps a receive of its group sends
 * what the buffer held when the launch started: a device copy enqueued
 * before the launch's kernels. Outside a capture the copies share one
 * buffer (launches of a rank are ordered); a captured launch gets a buffer
 * of its own, kept until the communicator goes, so every replay copies the
 * buffer as it is then, exactly as an uncaptured launch would.
 *
 * Asynchronous errors. A kernel that waits BRAID_TIMEOUT seconds without
 * progress, or that the abort flag stops, records the failure in the
 * rank's executor status (mapped host memory). brd_launch_cuda_poll reads
 * it without synchronising and stores it in comm->async_error, so
 * ncclCommGetAsyncError reports it; every later launch polls too and
 * returns the failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "core/api.h"
#include "base/array.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/backend.h"
#include "core/gpu.h"
#include "core/profiler.h"
#include "core/proxy.h"
#include "core/works.h"
#include "core/bootstrap.h"
#include "base/param.h"

#if BRAID_CUDA
#include "core/launch_cuda.h"
#include "plan/plan.h"
#include "base/time.h"

#define P2P_PLANS_WARN 4096 /* point-to-point plans kept before a WARN */

/* One launch's state, in brd_backend_launch_t.priv. */
typedef struct cuda_launch {
  int saved_dev;        /* the calling thread's device, restored at end */
  cudaStream_t stream;  /* the first call's stream: every work goes here */
  int capturing;        /* stream is being captured into a CUDA graph */
  size_t snap_used;     /* bytes of the snapshot buffer given out */
  char *snap;           /* this launch's snapshot buffer (rt's) */
  size_t snap_cap;      /* its size */
  int saved_mode;       /* the thread's capture mode, restored at end */
  int mode_set;
} cuda_launch_t;
_Static_assert(sizeof(cuda_launch_t) <= sizeof(((brd_backend_launch_t *)0)->priv),
               "cuda_launch_t outgrew brd_backend_launch_t.priv");

static cuda_launch_t *ctx_of(brd_backend_launch_t *l) { return (cuda_launch_t *)l->priv; }

/* Reads both statuses; records a failure in comm->async_error. */
static ncclResult_t poll_status(struct ncclComm *comm, struct brd_backend *rt) {
  pthread_mutex_lock(&rt->poll_lock);
  ncclResult_t r = brd_exec_cuda_poll(rt->st_coll, NULL);
  ncclResult_t r2 = brd_exec_cuda_poll(rt->st_p2p, NULL);
  pthread_mutex_unlock(&rt->poll_lock);
  if (r == ncclSuccess) r = r2;
  if (r != ncclSuccess) {
    int expected = ncclSuccess;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)r);
  }
  return r;
}

/* Starts a launch: switches to comm->cuda_dev, relaxes the thread's
 * stream-capture mode (the launch may allocate: the first one's windows, a
 * plan's first upload), learns whether the first call's stream is being
 * captured and, once the backend exists, returns an earlier launch's
 * failure. */
ncclResult_t brd_launch_cuda_begin(struct ncclComm *comm, struct brd_backend *rt,
                                   brd_backend_launch_t *l) {
  ncclResult_t res = ncclSuccess;
  cuda_launch_t *ctx = ctx_of(l);
  const brd_call_t *calls = l->calls;
  memset(ctx, 0, sizeof(*ctx));
  ctx->saved_dev = -1;
  ctx->stream = l->ncalls > 0 ? calls[0].stream : NULL;
  CUDA_CHECK_GOTO(cudaGetDevice(&ctx->saved_dev), "cudaGetDevice", res, out);
  if (ctx->saved_dev != comm->cuda_dev)
    CUDA_CHECK_GOTO(cudaSetDevice(comm->cuda_dev), "cudaSetDevice to the communicator's GPU",
              res, out);
  /* Allocations and blocking copies of this launch (the first one's
   * windows, a plan's upload) must not join, nor be refused by, a capture
   * in progress on this or another thread. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_CHECK_GOTO(cudaThreadExchangeStreamCaptureMode(&mode),
            "cudaThreadExchangeStreamCaptureMode", res, out);
  ctx->saved_mode = (int)mode;
  ctx->mode_set = 1;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDA_CHECK_GOTO(cudaStreamIsCapturing(ctx->stream, &cs), "cudaStreamIsCapturing", res, out);
  if (cs == cudaStreamCaptureStatusInvalidated) {
    WARN("%s : the stream's CUDA graph capture has been invalidated by an earlier "
         "error; end the capture and start again", calls[0].fn);
    return ncclInvalidUsage;
  }
  ctx->capturing = cs == cudaStreamCaptureStatusActive;
  if (rt != NULL) {
    if (rt->failed != ncclSuccess) return rt->failed;
    CHECK(poll_status(comm, rt));
  }
out:
  return res;
}

/* Orders the launch after the rank's previous one (when it used another
 * stream) and after the group's other streams. */
ncclResult_t brd_launch_cuda_order(struct brd_backend *rt, brd_backend_launch_t *l) {
  ncclResult_t res = ncclSuccess;
  cuda_launch_t *ctx = ctx_of(l);
  /* A capture is ordered by the graph's launches, which the user makes on
   * one stream; outside a capture, launches sharing the statuses must
   * follow each other whatever streams they use. */
  if (!ctx->capturing && rt->done_valid && rt->last_stream != ctx->stream)
    CUDA_CHECK_GOTO(cudaStreamWaitEvent(ctx->stream, rt->done, 0),
              "cudaStreamWaitEvent on the rank's previous launch", res, out);
  for (int i = 1; i < l->ncalls; i++) {
    cudaStream_t s = l->calls[i].stream;
    int seen = s == ctx->stream;
    for (int j = 1; j < i && !seen; j++) seen = l->calls[j].stream == s;
    if (seen) continue;
    /* The event is captured at the wait, so it can be recorded again. */
    CUDA_CHECK_GOTO(cudaEventRecord(rt->join, s), "cudaEventRecord on a group stream", res, out);
    CUDA_CHECK_GOTO(cudaStreamWaitEvent(ctx->stream, rt->join, 0),
              "cudaStreamWaitEvent on a group stream", res, out);
  }
out:
  return res;
}

/* A device copy of bytes at src, enqueued now on the launch's stream, for
 * a send whose buffer overlaps a receive of its group; valid until the
 * launch's kernels have run (captured: as long as the communicator).
 * total: the bytes all of the launch's snapshots take, each rounded up to
 * 256. Outside a capture launches share rt->snap, which the first
 * snapshot of a launch grows to total (earlier launches may still read the
 * old buffer: it is retired, not freed, see `retired`; growth doubles, so
 * they take at most as much again). A captured launch gets a buffer of its
 * own, retired at once so it lives until teardown: every replay of the
 * graph copies the send buffer into it again, before its kernels. */
static ncclResult_t snapshot(struct brd_backend *rt, cuda_launch_t *ctx, const void *src,
                             size_t bytes, size_t total, void **copy_out) {
  ncclResult_t res = ncclSuccess;
  size_t at = (ctx->snap_used + 255) & ~(size_t)255;
  if (at == 0) {
    int own = ctx->capturing;
    char *grown = NULL, **list;
    size_t cap = own ? total : total > 2 * rt->snap_cap ? total : 2 * rt->snap_cap;
    if (own || total > rt->snap_cap) {
      list = realloc(rt->retired, ((size_t)rt->nretired + 1) * sizeof(*list));
      if (list == NULL) {
        WARN("out of host memory growing the send snapshot buffer of rank %d", rt->rank);
        return ncclSystemError;
      }
      rt->retired = list;
      CUDA_CHECK_GOTO(cudaMalloc((void **)&grown, cap), "cudaMalloc for send snapshots", res,
                      out);
      atomic_fetch_add(&rt->dev_bytes, (uint64_t)cap);
      if (own) {
        rt->retired[rt->nretired++] = grown;
      } else {
        if (rt->snap != NULL) rt->retired[rt->nretired++] = rt->snap;
        rt->snap = grown;
        rt->snap_cap = cap;
      }
    }
    ctx->snap = own ? grown : rt->snap;
    ctx->snap_cap = own ? cap : rt->snap_cap;
  }
  if (at + bytes > ctx->snap_cap) {
    WARN("rank %d: send snapshots need more than the %zu bytes reserved for them",
         rt->rank, ctx->snap_cap);
    return ncclInternalError;
  }
  CUDA_CHECK_GOTO(cudaMemcpyAsync(ctx->snap + at, src, bytes, cudaMemcpyDefault, ctx->stream),
                  "cudaMemcpyAsync of a send snapshot", res, out);
  ctx->snap_used = at + bytes;
  *copy_out = ctx->snap + at;
out:
  return res;
}

/* Enqueues a copy of bytes from src to dst on the launch's stream (a
 * one-rank communicator's collective); nothing when dst == src. */
static ncclResult_t local_copy(cuda_launch_t *ctx, void *dst, const void *src, size_t bytes) {
  ncclResult_t res = ncclSuccess;
  if (bytes == 0 || dst == src) return ncclSuccess;
  CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream),
            "cudaMemcpyAsync of a one-rank collective", res, out);
out:
  return res;
}

static uint64_t blob_hash(const brd_ir_plan_t *p) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < p->total_bytes; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* The device copy of plan, uploaded at its first use on the launch's
 * stream from pinned memory, ahead of its kernel; the host never waits
 * for it: ranks that are threads sharing a GPU launch while their peers'
 * kernels already wait for them, and a copy waited for on a stream of its
 * own can sit in a hardware queue CUDA shares between streams behind such
 * a peer's queued work (its copy-out, held by its kernel), which never
 * runs (docs/architecture.md). Outside a capture later launches on other
 * streams follow it (brd_launch_cuda_order). Inside a capture the copy is
 * a node of the graph; a capture using a plan whose copy is not known to
 * be done copies it again in its graph, rather than waiting: peers that
 * ended their captures first may already run their graphs, waiting for
 * this rank's (brd_exec_cuda_plan_use). The thread's capture mode is
 * relaxed meanwhile (brd_launch_cuda_begin), so the allocations may be
 * made. */
static ncclResult_t dplan_get(struct brd_backend *rt, const brd_ir_plan_t *plan, int p2p,
                              int capturing, cudaStream_t stream,
                              const brd_exec_cuda_plan_t **out) {
  ncclResult_t res = ncclSuccess;
  uint64_t h = p2p ? blob_hash(plan) : 0;
  for (int i = 0; i < rt->nplans; i++) {
    dplan_t *d = &rt->plans[i];
    if (p2p ? (d->key == NULL && d->hash == h && d->copy->total_bytes == plan->total_bytes &&
               memcmp(d->copy, plan, plan->total_bytes) == 0)
            : d->key == plan) {
      CHECK(brd_exec_cuda_plan_use(d->dev, stream, capturing));
      *out = d->dev;
      return ncclSuccess;
    }
  }
  /* Point-to-point plans are never evicted: freeing device memory waits
   * for the whole device, including peers' kernels waiting for this rank.
   * They are small (a few KiB); a program with that many patterns is told. */
  if (p2p && rt->np2p == P2P_PLANS_WARN)
    WARN("rank %d: %d different point-to-point patterns (peers and sizes per "
         "group) have been uploaded to the GPU; each stays until the "
         "communicator is destroyed", rt->rank, P2P_PLANS_WARN);
  dplan_t *grown = brd_array_grow(rt->plans, rt->nplans, &rt->cap_plans, sizeof(*rt->plans), 64);
  if (grown == NULL) {
    WARN("out of host memory growing the device plan table past %d plans", rt->nplans);
    return ncclSystemError;
  }
  rt->plans = grown;
  dplan_t d;
  memset(&d, 0, sizeof(d));
  d.key = p2p ? NULL : plan;
  d.hash = h;
  if (p2p) {
    d.copy = malloc(plan->total_bytes);
    if (d.copy == NULL) {
      WARN("out of host memory copying a %zu-byte plan", (size_t)plan->total_bytes);
      return ncclSystemError;
    }
    memcpy(d.copy, plan, plan->total_bytes);
  }
  CHECK_GOTO(brd_exec_cuda_plan_create_on(plan, stream, capturing, &d.dev), res, fail);
  atomic_fetch_add(&rt->dev_bytes, (uint64_t)plan->total_bytes);
  rt->plans[rt->nplans++] = d;
  if (p2p) rt->np2p++;
  *out = d.dev;
  return ncclSuccess;
fail:
  brd_plan_destroy(d.copy);
  return res;
}

/* A copy-out of a collective work: nseg segments of seg_bytes from the
 * staging half of the work's phase (seg_bytes apart) to dst (dst_stride
 * apart), all but segment keep (UINT32_MAX: none), which the call's
 * in-place input already holds (brd_work_own_seg). nseg 0: nothing to copy. */
typedef struct copy_out {
  void *dst;
  uint32_t nseg;
  uint32_t keep;
  size_t seg_bytes;
  size_t dst_stride;
} copy_out_t;

/* The kernel's arguments for work a on device plan dp: every channel's
 * pointers in chans (the rank's channel count; a switch channel through
 * the window's multicast mapping), and the fields every launch takes from
 * a; with segs (point-to-point and one-sided plans) also its explicit
 * epochs and segment tables. The caller sets the status and what its kind
 * of launch adds. */
static ncclResult_t cuda_args(const struct brd_backend *rt, const brd_exec_args_t *a,
                              const brd_exec_cuda_plan_t *dp, int segs,
                              brd_exec_cuda_chan_t *chans, brd_exec_cuda_args_t *ca) {
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  for (uint32_t c = 0; c < nch; c++) {
    if (brd_ir_plan_chan(a->plan, a->rank, (int)c)->type == BRD_IR_CHAN_SWITCH) {
      /* Through the multicast mapping (exec_cuda.h): this rank's own copy
       * of scratch and switch semaphores, at the same offsets there. */
      char *own_scr = a->chans[c].member_scratch[a->rank];
      char *own_sem = (char *)a->chans[c].member_ssems[a->rank];
      char *win = rt->self.ptr;
      memset(&chans[c], 0, sizeof(chans[c]));
      if (rt->mc_base == NULL) {
        WARN("rank %d: a plan with a switch channel, but the window has no multicast "
             "mapping", a->rank);
        return ncclInternalError;
      }
      chans[c].peer_scratch = rt->mc_base + (own_scr - win);
      chans[c].peer_sems = (uint64_t *)(rt->mc_base + (own_sem - win));
      chans[c].sems = (uint64_t *)own_sem;
      /* A zero-copy switch plan: this rank's input and output through
       * the multicast mappings of their windows (works.c). */
      chans[c].peer_input = a->chans[c].peer_input;
      chans[c].peer_output = a->chans[c].peer_output;
      if ((a->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) && chans[c].peer_input == NULL &&
          chans[c].peer_output == NULL) {
        WARN("rank %d: a zero-copy switch plan, but its buffers have no multicast "
             "mapping", a->rank);
        return ncclInternalError;
      }
      continue;
    }
    chans[c].peer_scratch = a->chans[c].peer_scratch;
    chans[c].peer_output = a->chans[c].peer_output;
    chans[c].peer_input = a->chans[c].peer_input;
    chans[c].peer_sems = (uint64_t *)a->chans[c].peer_sems;
    chans[c].sems = (uint64_t *)a->chans[c].sems;
    chans[c].xchg_pub = (uint64_t *)a->chans[c].xchg_pub;
    chans[c].xchg_slot = (uint64_t *)a->chans[c].xchg_slot;
    chans[c].xchg_output = a->chans[c].xchg_output;
  }
  memset(ca, 0, sizeof(*ca));
  ca->plan = dp;
  ca->rank = a->rank;
  ca->input = a->input;
  ca->output = a->output;
  ca->scratch = a->scratch;
  ca->scratch_bytes = a->scratch_bytes;
  ca->chans = nch > 0 ? chans : NULL;
  ca->count = a->count;
  ca->dtype = a->dtype;
  ca->redop = a->redop;
  ca->in_stride = a->in_stride;
  ca->out_stride = a->out_stride;
  ca->scalar = a->scalar;
  ca->xchg = a->xchg;
  if (segs) {
    ca->epoch = a->epoch;
    ca->chan_epoch = a->chan_epoch;
    ca->in_segs = (const brd_exec_cuda_seg_t *)a->in_segs;
    ca->out_segs = (const brd_exec_cuda_seg_t *)a->out_segs;
    ca->n_in_segs = a->n_in_segs;
    ca->n_out_segs = a->n_out_segs;
  }
  return ncclSuccess;
}

/* Enqueues one work: a (pointers into the windows, from the works; its
 * epoch and phase are ignored for a collective work, which uses device
 * epochs), then its copy-out. p2p: a point-to-point work (spans).
 * stage_half: a collective's output and its channels' peer outputs are
 * staging of two halves of that many bytes, the launch using the half of
 * its phase; 0: the pointers as given. out_direct: a->output is the user's
 * buffer, so it gets no half offset even when stage_half is not 0 (the
 * peers' staging does; with a->xchg a peer that publishes its own buffer
 * gets none either). scalar_dev: a PreMulSum scalar the kernel reads from
 * device memory, else NULL and the scalar is a->scalar. Uploads the plan
 * to the device at its first use. Never synchronises otherwise. */
static ncclResult_t enqueue_work(struct brd_backend *rt, cuda_launch_t *ctx,
                                 const brd_exec_args_t *a, int p2p, size_t stage_half,
                                 int out_direct, const void *scalar_dev,
                                 const copy_out_t *copy) {
  ncclResult_t res = ncclSuccess;
  const brd_exec_cuda_plan_t *dp;
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  brd_exec_cuda_chan_t chans[BRD_EXEC_CUDA_INLINE_CHANS];
  if (nch > BRD_EXEC_CUDA_INLINE_CHANS) {
    WARN("rank %d: a plan with %u channels; CUDA mode carries at most %d per launch "
         "(communicators of up to %d ranks for direct plans)", a->rank, nch,
         BRD_EXEC_CUDA_INLINE_CHANS, BRD_EXEC_CUDA_INLINE_CHANS + 1);
    return ncclInvalidUsage;
  }
  if (p2p && (a->n_in_segs > BRD_EXEC_CUDA_INLINE_SEGS ||
              a->n_out_segs > BRD_EXEC_CUDA_INLINE_SEGS)) {
    WARN("ncclGroupEnd : rank %d has %u sends and %u receives in one group; CUDA mode "
         "runs at most %d of each per group and communicator: split the group",
         a->rank, a->n_in_segs, a->n_out_segs, BRD_EXEC_CUDA_INLINE_SEGS);
    return ncclInvalidUsage;
  }
  CHECK(dplan_get(rt, a->plan, p2p, ctx->capturing, ctx->stream, &dp));
  brd_exec_cuda_args_t ca;
  CHECK(cuda_args(rt, a, dp, p2p, chans, &ca));
  ca.status = p2p ? rt->st_p2p : rt->st_coll;
  ca.scalar_dev = scalar_dev; /* wins: the kernel reads it */
  if (p2p) {
    /* Spans: the kernels keep each pair's sequence numbers on the device,
     * so a captured send/recv gets fresh ones at every replay. */
    ca.chan_cursor_dev = rt->p2p_cursor;
  } else {
    ca.device_epoch = 1;
    ca.out_half_bytes = stage_half;
    ca.out_direct = out_direct;
  }
  res = brd_exec_cuda_launch(&ca, ctx->stream);
  if (res == ncclSuccess && rt->proxy != NULL) brd_proxy_poke(rt->proxy); /* its triggers */
  if (res == ncclSuccess && !p2p && copy != NULL && copy->nseg > 0) {
    /* Segments [0, keep) and (keep, nseg): one copy each, either may be
     * empty. */
    uint32_t keep = copy->keep < copy->nseg ? copy->keep : copy->nseg;
    brd_exec_cuda_copyout_t co = {rt->st_coll, a->output, stage_half, copy->dst,
                                  keep, copy->seg_bytes, copy->seg_bytes,
                                  copy->dst_stride};
    if (co.nseg > 0) res = brd_exec_cuda_copyout(&co, ctx->stream);
    co.src = (const char *)a->output + (size_t)(keep + 1) * copy->seg_bytes;
    co.dst = (char *)copy->dst + (size_t)(keep + 1) * copy->dst_stride;
    co.nseg = keep + 1 < copy->nseg ? copy->nseg - keep - 1 : 0;
    if (res == ncclSuccess && co.nseg > 0) res = brd_exec_cuda_copyout(&co, ctx->stream);
  }
  if (res != ncclSuccess && res != ncclInvalidArgument)
    rt->failed = res; /* sequence numbers moved here only: ranks disagree now */
  return res;
}

/* One-sided runs (backend.h rma_run): the rank's part of a one-sided plan,
 * uploaded by content like point-to-point plans, on the point-to-point
 * status. The counts are kept on the device (rt->rma_cursor, one cursor
 * per cell of what this rank sent and of what it waited for; the kernel
 * reads the channel peer's cell, brd_plan_chan_epoch, and advances it), so
 * a call captured into a graph signals and waits afresh at every replay,
 * and captured and direct calls count together. */
ncclResult_t brd_launch_cuda_rma_run(struct ncclComm *comm, struct brd_backend *rt,
                                     brd_backend_launch_t *l, const brd_backend_rma_t *r) {
  cuda_launch_t *ctx = ctx_of(l);
  const brd_exec_args_t *a = r->a;
  const brd_exec_cuda_plan_t *dp;
  brd_exec_cuda_chan_t chans[1];
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  (void)comm;
  if (nch != 1 || r->nsig == 0 || r->row + (size_t)rt->nranks > rt->rma_cells) {
    WARN("%s : rank %d: a one-sided plan with %u channels, %llu signals at counter row "
         "%zu of %zu (1 channel, 1 signal or more, a row inside the table expected)",
         l->calls[0].fn, a->rank, nch, (unsigned long long)r->nsig, r->row, rt->rma_cells);
    return ncclInternalError;
  }
  CHECK(dplan_get(rt, a->plan, 1, ctx->capturing, ctx->stream, &dp));
  brd_exec_cuda_args_t ca;
  CHECK(cuda_args(rt, a, dp, 1, chans, &ca));
  uint64_t span = r->nsig; /* copied into the launch */
  ca.status = rt->st_p2p;
  ca.epoch = 0;
  ca.chan_epoch = &span;
  ca.chan_cursor_dev = rt->rma_cursor + (r->wait ? rt->rma_cells : 0) + r->row;
  ncclResult_t res = brd_exec_cuda_launch(&ca, ctx->stream);
  if (res == ncclSuccess && rt->proxy != NULL) brd_proxy_poke(rt->proxy); /* its triggers */
  if (res != ncclSuccess && res != ncclInvalidArgument) rt->failed = res;
  return res;
}

/* Ends a launch: records its completion (not while capturing), makes the
 * group's other streams wait for it, restores the thread's capture mode
 * and device. */
ncclResult_t brd_launch_cuda_end(struct ncclComm *comm, struct brd_backend *rt,
                                 brd_backend_launch_t *l, ncclResult_t res) {
  cuda_launch_t *ctx = ctx_of(l);
  ncclResult_t r = ncclSuccess;
  if (ctx->mode_set) {
    enum cudaStreamCaptureMode mode = (enum cudaStreamCaptureMode)ctx->saved_mode;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
    ctx->mode_set = 0;
  }
  if (rt != NULL && res == ncclSuccess) {
    rt->nlaunch++;
    if (!ctx->capturing) {
      CUDA_CHECK_GOTO(cudaEventRecord(rt->done, ctx->stream), "cudaEventRecord after a launch",
                r, out);
      rt->done_valid = 1;
      rt->last_stream = ctx->stream;
    }
    for (int i = 1; i < l->ncalls && !ctx->capturing; i++)
      if (l->calls[i].stream != ctx->stream)
        CUDA_CHECK_GOTO(cudaStreamWaitEvent(l->calls[i].stream, rt->done, 0),
                  "cudaStreamWaitEvent of a group stream", r, out);
  }
out:
  if (ctx->saved_dev >= 0 && ctx->saved_dev != comm->cuda_dev &&
      cudaSetDevice(ctx->saved_dev) != cudaSuccess)
    (void)cudaGetLastError();
  return res != ncclSuccess ? res : r;
}

ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm, struct brd_backend *rt) {
  return poll_status(comm, rt);
}

/* Enqueues every work in order on the launch's stream, after the
 * snapshots of send buffers that overlap a receive. */
ncclResult_t brd_launch_cuda_run_works(struct ncclComm *comm, struct brd_backend *rt,
                                       brd_backend_launch_t *l, brd_works_t *ws) {
  cuda_launch_t *ctx = ctx_of(l);
  for (int s = 0; s < ws->nsnaps; s++) {
    void *copy;
    CHECK(snapshot(rt, ctx, ws->snaps[s].src, ws->snaps[s].bytes, ws->snap_bytes, &copy));
    brd_works_snap_use(ws, s, copy);
  }
  for (int i = 0; i < ws->n; i++) {
    const brd_work_t *w = &ws->w[i];
    copy_out_t cp;
    memset(&cp, 0, sizeof(cp));
    if (w->call != NULL && w->nout > 0 && !w->direct) {
      size_t esize = brd_dtype_size(w->call->dtype);
      cp.dst = (char *)w->call->recvbuff + w->off * esize;
      cp.nseg = (uint32_t)w->nout;
      cp.seg_bytes = w->n * esize;
      cp.dst_stride = w->call->count * esize;
      int keep = brd_work_own_seg(w);
      cp.keep = keep < 0 ? UINT32_MAX : (uint32_t)keep;
    }
    /* A rank writing its own buffer in place while exchanging outputs
     * may still write peers' staging halves. */
    CHECK(enqueue_work(rt, ctx, &w->args, w->p2p,
                       w->direct && !w->args.xchg ? 0 : ws->stage_half, w->direct,
                       w->scalar_dev, &cp));
  }
  /* The profiler's KernelCh events end when the stream gets past the
   * works (not in a captured graph: they end with the launch). */
  void (*prof_fn)(void *);
  void *prof_arg;
  if (comm->prof != NULL && !ctx->capturing &&
      brd_prof_launch_enqueued(comm->prof, &prof_fn, &prof_arg) &&
      cudaLaunchHostFunc(ctx->stream, prof_fn, prof_arg) != cudaSuccess) {
    (void)cudaGetLastError();
    prof_fn(prof_arg); /* not queued: they end now */
  }
  return ncclSuccess;
}

/* A one-rank communicator: every collective without a PreMulSum (sum,
 * product, min, max and average of one input are the input) is a copy of
 * count elements from the send to the receive buffer, and a send to itself
 * is a copy into the matching receive (the i-th send and the i-th
 * receive), as the pairing rule of point-to-point plans says. No runtime,
 * no window. *done_out 0 when the launch must take the general path. */
ncclResult_t brd_launch_cuda_run_local(struct ncclComm *comm, brd_backend_launch_t *l,
                                       int *done_out) {
  const brd_call_t *calls = l->calls;
  int ncalls = l->ncalls, next_recv = 0;
  size_t sends = 0, recvs = 0;
  *done_out = 0;
  if (comm->nranks != 1) return ncclSuccess;
  for (int i = 0; i < ncalls; i++) {
    if (calls[i].premul) return ncclSuccess;
    if (calls[i].count == 0) continue;
    sends += calls[i].coll == BRD_COLL_SEND;
    recvs += calls[i].coll == BRD_COLL_RECV;
  }
  if (sends != recvs) return ncclSuccess;
  *done_out = 1;
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    size_t bytes = c->count * brd_dtype_size(c->dtype);
    if (c->count == 0 || c->coll == BRD_COLL_RECV) continue;
    if (c->coll != BRD_COLL_SEND) {
      CHECK(local_copy(ctx_of(l), c->recvbuff, c->sendbuff, bytes));
      continue;
    }
    while (calls[next_recv].coll != BRD_COLL_RECV || calls[next_recv].count == 0) next_recv++;
    const brd_call_t *r = &calls[next_recv++];
    if (r->count * brd_dtype_size(r->dtype) != bytes) {
      WARN("ncclSend/ncclRecv : rank 0 sends %zu bytes to itself and receives %zu; "
           "a send and its receive must have the same size", bytes,
           r->count * brd_dtype_size(r->dtype));
      return ncclInvalidArgument;
    }
    CHECK(local_copy(ctx_of(l), r->recvbuff, c->sendbuff, bytes));
  }
  return ncclSuccess;
}
#endif /* BRAID_CUDA */
