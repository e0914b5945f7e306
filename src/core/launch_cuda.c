/*
 * Braid: the CUDA backend of the collective runtime; see launch_cuda.h for
 * the contract and launch.c for the works it runs.
 *
 * Per rank it keeps: the window (P2P segment, or host memory registered
 * with CUDA) and the peers' imported windows; two executor statuses, one
 * for collective works (device epochs) and one for point-to-point works
 * (host epochs), since a status serves one kind for its whole life; the
 * device copies of every plan it has launched (collective plans by
 * address: launch.c's cache keeps them; point-to-point plans, built per
 * launch, by content); an event marking the end of the rank's last
 * launch, so a launch on another stream first waits for it (launches
 * sharing a status must be ordered); and a device buffer for snapshots of
 * send buffers that overlap a receive of their group.
 *
 * Several ranks on one GPU (threads of one process): each rank's kernel
 * must run at the same time as the others', so every rank gets at most
 * SMs / ranks-per-GPU blocks (the executor's kernels hold one SM per
 * block), and the user must give each rank its own stream. Ranks of
 * different processes on one GPU are correct but slow without MPS: their
 * kernels time-slice, so a kernel waiting for a peer spins until the GPU
 * switches to the peer's context.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "core/api.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/launch_cuda.h"
#include "base/param.h"

#if BRAID_CUDA
#include "device/exec_cuda.h"
#include "plan/plan.h"
#include "base/time.h"

#define NB_LIMIT 8          /* most blocks per rank */
#define P2P_PLANS_WARN 4096 /* point-to-point plans kept before a WARN */

/* A plan on the device, and what identifies it. */
typedef struct dplan {
  const brd_ir_plan_t *key;     /* borrowed: launch.c's cached plan; NULL
                                   for a point-to-point plan */
  uint64_t hash;                /* point-to-point: hash of the blob */
  brd_ir_plan_t *copy;          /* owned: point-to-point: the blob */
  brd_exec_cuda_plan_t *dev;    /* owned */
} dplan_t;

struct brd_rt_cuda {
  int nranks;
  int rank;
  int dev;
  const brd_transport_ops_t *ops;  /* P2P, or HOST/SHM for host memory */
  int host_memory;                 /* 1: windows in host memory */
  brd_seg_t self;                  /* owned: this rank's window */
  brd_seg_t *peer;                 /* owned: [nranks] imported windows */
  unsigned char *registered;       /* owned: [nranks] 1 where this backend
                                      holds a host_reg reference */
  brd_exec_cuda_status_t *st_coll; /* owned: collective works */
  brd_exec_cuda_status_t *st_p2p;  /* owned: point-to-point works */
  uint64_t *p2p_cursor;            /* owned: cudaMalloc, [nranks] per-pair
                                      sequence numbers the p2p kernels keep */
  cudaEvent_t done;                /* owned: end of the last launch */
  cudaEvent_t join;                /* owned: joins a group's other streams */
  int events_made;
  int done_valid;                  /* done has been recorded */
  cudaStream_t last_stream;        /* stream of the last launch */
  pthread_mutex_t poll_lock;       /* brd_exec_cuda_poll is not reentrant */
  ncclResult_t failed;             /* enqueueing failed: ranks disagree */
  dplan_t *plans;                  /* owned */
  int nplans, cap_plans, np2p;
  uint64_t nlaunch;
  char *snap;                      /* owned: cudaMalloc, snapshots */
  size_t snap_cap;
  char **retired;                  /* owned: [nretired] outgrown snapshot
                                      buffers, freed at teardown: cudaFree
                                      waits for the whole device, including
                                      peers' kernels that wait for this rank */
  int nretired;
};

/* n zeroed per-pair cursors in device memory, zeroed on a private stream
 * (no other work on the device is waited for). */
static ncclResult_t cursors_create(int n, uint64_t **out) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  uint64_t *p = NULL;
  CUDA_CHECK_GOTO(cudaMalloc((void **)&p, (size_t)n * sizeof(*p)),
                  "cudaMalloc for the point-to-point cursors", res, out);
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags", res, fail_free);
  if (cudaMemsetAsync(p, 0, (size_t)n * sizeof(*p), s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("CUDA: zeroing the point-to-point cursors failed");
    res = ncclUnhandledCudaError;
  }
  cudaStreamDestroy(s);
  if (res != ncclSuccess) goto fail_free;
  *out = p;
  return ncclSuccess;
fail_free:
  cudaFree(p);
out:
  return res;
}

/* Host-memory windows are registered with CUDA once per process and
 * address, and unregistered by the last runtime that maps them, right
 * before that runtime's close frees the memory: a rank that tears down
 * first must not pull the registration from under a peer thread's kernel,
 * which may still store a last signal into this window. */
typedef struct host_reg {
  void *ptr;
  int refs;
  struct host_reg *next;
} host_reg_t;

static pthread_mutex_t host_regs_lock = PTHREAD_MUTEX_INITIALIZER;
static host_reg_t *host_regs; /* owned: under host_regs_lock */

static ncclResult_t host_reg_acquire(void *ptr, size_t size, const char *what) {
  ncclResult_t res = ncclSuccess;
  host_reg_t *r;
  pthread_mutex_lock(&host_regs_lock);
  for (r = host_regs; r != NULL && r->ptr != ptr; r = r->next) {
  }
  if (r != NULL) {
    r->refs++;
    goto out;
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    WARN("out of host memory registering %s", what);
    res = ncclSystemError;
    goto out;
  }
  cudaError_t e = cudaHostRegister(ptr, size, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    WARN("CUDA: cudaHostRegister of %s (%zu bytes) failed: %s (%d)", what, size,
         cudaGetErrorString(e), (int)e);
    (void)cudaGetLastError();
    free(r);
    res = ncclUnhandledCudaError;
    goto out;
  }
  r->ptr = ptr;
  r->refs = 1;
  r->next = host_regs;
  host_regs = r;
out:
  pthread_mutex_unlock(&host_regs_lock);
  return res;
}

static void host_reg_release(void *ptr) {
  host_reg_t *gone = NULL;
  pthread_mutex_lock(&host_regs_lock);
  for (host_reg_t **pp = &host_regs; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->ptr != ptr) continue;
    if (--(*pp)->refs == 0) {
      gone = *pp;
      *pp = gone->next;
    }
    break;
  }
  pthread_mutex_unlock(&host_regs_lock);
  if (gone != NULL) {
    if (cudaHostUnregister(gone->ptr) != cudaSuccess) (void)cudaGetLastError();
    free(gone);
  }
}

/* Waits (polling, with a deadline) until the rank's last launch has left
 * the device. 1 when idle, 0 when kernels still run after the abort. */
static int wait_idle(struct brd_rt_cuda *rt) {
  if (!rt->done_valid) return 1;
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT);
  int64_t deadline = brd_time_now_ns() + ((t > 0 ? t : 300) + 5) * 1000000000LL;
  int aborted = 0;
  for (;;) {
    cudaError_t e = cudaEventQuery(rt->done);
    /* Done, or the context is dead and nothing runs any more. */
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return 1;
    }
    if (brd_time_now_ns() >= deadline) {
      if (aborted) return 0;
      brd_exec_cuda_status_abort(rt->st_coll);
      brd_exec_cuda_status_abort(rt->st_p2p);
      aborted = 1;
      deadline = brd_time_now_ns() + 2000000000LL;
    }
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Frees what the backend holds, assuming no kernel uses it any more. */
static void rt_free(struct brd_rt_cuda *rt) {
  for (int i = 0; i < rt->nplans; i++) {
    brd_exec_cuda_plan_destroy(rt->plans[i].dev);
    brd_plan_destroy(rt->plans[i].copy);
  }
  free(rt->plans);
  if (rt->snap != NULL) cudaFree(rt->snap);
  for (int i = 0; i < rt->nretired; i++) cudaFree(rt->retired[i]);
  free(rt->retired);
  brd_exec_cuda_status_destroy(rt->st_coll);
  brd_exec_cuda_status_destroy(rt->st_p2p);
  if (rt->p2p_cursor != NULL) cudaFree(rt->p2p_cursor);
  if (rt->events_made) {
    cudaEventDestroy(rt->done);
    cudaEventDestroy(rt->join);
  }
  if (rt->peer != NULL && rt->ops != NULL) {
    for (int r = 0; r < rt->nranks; r++) {
      if (rt->registered != NULL && rt->registered[r]) host_reg_release(rt->peer[r].ptr);
      rt->ops->seg_close(&rt->peer[r]);
    }
  }
  if (rt->ops != NULL) {
    if (rt->registered != NULL && rt->registered[rt->rank]) host_reg_release(rt->self.ptr);
    rt->ops->seg_close(&rt->self);
  }
  (void)cudaGetLastError();
  pthread_mutex_destroy(&rt->poll_lock);
  free(rt->registered);
  free(rt->peer);
  free(rt);
}

/* See launch_cuda.h. */
void brd_launch_cuda_destroy(struct brd_rt_cuda *rt) {
  int saved = -1;
  if (rt == NULL) return;
  if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
  if (cudaSetDevice(rt->dev) != cudaSuccess) (void)cudaGetLastError();
  if (!wait_idle(rt)) {
    WARN("rank %d: its CUDA kernels still run at communicator teardown, even "
         "after the abort flag; leaking the rank's channel memory rather than "
         "freeing memory in use", rt->rank);
  } else {
    rt_free(rt);
  }
  if (saved >= 0 && cudaSetDevice(saved) != cudaSuccess) (void)cudaGetLastError();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_caps(struct ncclComm *comm, brd_launch_caps_t *caps_out,
                                  char *why, size_t nwhy) {
  ncclResult_t res = ncclSuccess;
  int me = comm->rank, nsm = 0;
  brd_launch_caps_t caps = {1, 0, 0};
  why[0] = '\0';
  for (int r = 0; r < comm->nranks; r++) {
    if (comm->peers[r].host_hash != comm->peers[me].host_hash)
      return brd_api_not_implemented("collectives across hosts in CUDA mode (no "
                                     "network transport yet)");
  }
  caps.p2p_ok = brd_transport_choose(comm->peers, comm->nranks, me, BRD_TRANSPORT_MEM_GPU,
                                     why, nwhy) != NULL;
  CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, comm->cuda_dev),
            "cudaDeviceGetAttribute(multiProcessorCount)", res, out);
  int share = brd_comm_ranks_per_device(comm);
  int nb = nsm / share;
  if (nb < 1) {
    WARN("rank %d: its GPU has %d SMs and %d ranks of the communicator share it: "
         "every rank's kernel needs at least one SM at the same time; use fewer "
         "ranks per GPU", me, nsm, share);
    res = ncclInvalidUsage;
    goto out;
  }
  if (nb > NB_LIMIT) nb = NB_LIMIT;
  if (comm->config.maxCTAs > 0 && nb > comm->config.maxCTAs) nb = comm->config.maxCTAs;
  caps.nb_max = nb;
  int64_t stage = brd_param_int(BRD_P_BRAID_CUDA_STAGING);
  if (stage < 65536) stage = 65536;
  caps.stage_bytes = ((uint64_t)stage + 4095) & ~(uint64_t)4095;
  *caps_out = caps;
out:
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_create(struct ncclComm *comm, int p2p, size_t win_bytes,
                                    brd_seg_handle_t *handle_out, char **base_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  char *base = NULL;
  int saved = -1;
  struct brd_rt_cuda *rt;
  if (cudaGetDevice(&saved) != cudaSuccess) {
    (void)cudaGetLastError();
    saved = -1;
  }
  BRD_CALLOC(rt, 1, "the CUDA collective backend");
  rt->nranks = n;
  rt->rank = me;
  rt->dev = comm->cuda_dev;
  rt->failed = ncclSuccess;
  PTHREAD_CHECK_GOTO(pthread_mutex_init(&rt->poll_lock, NULL), "pthread_mutex_init",
                     res, fail_free);
  rt->peer = calloc((size_t)n, sizeof(*rt->peer));
  rt->registered = calloc((size_t)n, sizeof(*rt->registered));
  if (rt->peer == NULL || rt->registered == NULL) {
    WARN("out of host memory for the window tables of rank %d (%d ranks)", me, n);
    res = ncclSystemError;
    goto fail;
  }
  CUDA_CHECK_GOTO(cudaSetDevice(rt->dev), "cudaSetDevice to the communicator's GPU", res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(&rt->st_coll), res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(&rt->st_p2p), res, fail);
  CHECK_GOTO(cursors_create(n, &rt->p2p_cursor), res, fail);
  CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&rt->done, cudaEventDisableTiming),
            "cudaEventCreateWithFlags", res, fail);
  if (cudaEventCreateWithFlags(&rt->join, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaEventDestroy(rt->done);
    WARN("CUDA: cudaEventCreateWithFlags failed for rank %d", me);
    res = ncclUnhandledCudaError;
    goto fail;
  }
  rt->events_made = 1;

  rt->host_memory = !p2p;
  rt->ops = brd_transport_choose(comm->peers, n, me,
                                 p2p ? BRD_TRANSPORT_MEM_GPU : BRD_TRANSPORT_MEM_HOST, NULL, 0);
  if (rt->ops == NULL) {
    WARN("rank %d: the transport agreed on for the channel windows no longer reaches "
         "every peer", me);
    res = ncclInternalError;
    goto fail;
  }
  CHECK_GOTO(rt->ops->seg_create(win_bytes, "cuda-win", &rt->self), res, fail);
  if (rt->host_memory) {
    /* Peers of this process find it registered once the allgather is over. */
    CHECK_GOTO(host_reg_acquire(rt->self.ptr, win_bytes, "the rank's channel window"),
               res, fail);
    rt->registered[me] = 1;
    CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&base, rt->self.ptr, 0),
              "cudaHostGetDevicePointer of the rank's channel window", res, fail);
  } else {
    base = rt->self.ptr;
  }
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P, "rank %d: %s window of %zu bytes on device %d",
       me, rt->ops->name, win_bytes, rt->dev);
  __atomic_store_n(&comm->rt_cuda, rt, __ATOMIC_RELEASE);
  *handle_out = rt->self.handle;
  *base_out = base;
  goto out;

fail:
  rt_free(rt);
  goto out;
fail_free:
  free(rt);
out:
  if (saved >= 0 && saved != comm->cuda_dev && cudaSetDevice(saved) != cudaSuccess)
    (void)cudaGetLastError();
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_import(struct ncclComm *comm, int r,
                                    const brd_seg_handle_t *handle, char **base_out) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt_cuda *rt = comm->rt_cuda;
  char *base = NULL;
  CHECK(rt->ops->seg_import(handle, &rt->peer[r]));
  if (!rt->host_memory) {
    *base_out = rt->peer[r].ptr;
    return ncclSuccess;
  }
  /* A window of this process is the creator's memory, registered before
   * the allgather (this takes one more reference); one of another process
   * is a mapping of our own, registered here. */
  CHECK_GOTO(host_reg_acquire(rt->peer[r].ptr, rt->peer[r].size,
                              "a peer's channel window"), res, out);
  rt->registered[r] = 1;
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&base, rt->peer[r].ptr, 0),
            "cudaHostGetDevicePointer of a peer's channel window", res, out);
  *base_out = base;
out:
  return res;
}

/* See launch_cuda.h. */
void brd_launch_cuda_seal(struct ncclComm *comm) {
  struct brd_rt_cuda *rt = comm->rt_cuda;
  if (rt != NULL) rt->ops->seg_seal(&rt->self);
}

/* Reads both statuses; records a failure in comm->async_error. */
static ncclResult_t poll_status(struct ncclComm *comm, struct brd_rt_cuda *rt) {
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

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_begin(struct ncclComm *comm, const brd_call_t *calls,
                                   int ncalls, brd_launch_cuda_ctx_t *ctx) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt_cuda *rt = comm->rt_cuda;
  memset(ctx, 0, sizeof(*ctx));
  ctx->saved_dev = -1;
  ctx->calls = calls;
  ctx->ncalls = ncalls;
  ctx->stream = ncalls > 0 ? calls[0].stream : NULL;
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

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_order(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt_cuda *rt = comm->rt_cuda;
  /* A capture is ordered by the graph's launches, which the user makes on
   * one stream; outside a capture, launches sharing the statuses must
   * follow each other whatever streams they use. */
  if (!ctx->capturing && rt->done_valid && rt->last_stream != ctx->stream)
    CUDA_CHECK_GOTO(cudaStreamWaitEvent(ctx->stream, rt->done, 0),
              "cudaStreamWaitEvent on the rank's previous launch", res, out);
  for (int i = 1; i < ctx->ncalls; i++) {
    cudaStream_t s = ctx->calls[i].stream;
    int seen = s == ctx->stream;
    for (int j = 1; j < i && !seen; j++) seen = ctx->calls[j].stream == s;
    if (seen) continue;
    /* The event is captured at the wait, so it can be recorded again. */
    CUDA_CHECK_GOTO(cudaEventRecord(rt->join, s), "cudaEventRecord on a group stream", res, out);
    CUDA_CHECK_GOTO(cudaStreamWaitEvent(ctx->stream, rt->join, 0),
              "cudaStreamWaitEvent on a group stream", res, out);
  }
out:
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_snapshot(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                      const void *src, size_t bytes, size_t total,
                                      void **copy_out) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt_cuda *rt = comm->rt_cuda;
  size_t at = (ctx->snap_used + 255) & ~(size_t)255;
  if (ctx->capturing) {
    WARN("ncclSend : a send buffer that overlaps a receive of its group cannot be "
         "captured into a CUDA graph in braid yet; use separate buffers");
    return ncclInvalidUsage;
  }
  if (at == 0 && total > rt->snap_cap) {
    /* Earlier launches may still read the old buffer: it is retired, not
     * freed (see `retired`); growth doubles, so they take at most as much
     * again. */
    char *grown = NULL, **list;
    size_t cap = total > 2 * rt->snap_cap ? total : 2 * rt->snap_cap;
    list = realloc(rt->retired, ((size_t)rt->nretired + 1) * sizeof(*list));
    if (list == NULL) {
      WARN("out of host memory growing the send snapshot buffer of rank %d", rt->rank);
      return ncclSystemError;
    }
    rt->retired = list;
    CUDA_CHECK_GOTO(cudaMalloc((void **)&grown, cap), "cudaMalloc for send snapshots", res, out);
    if (rt->snap != NULL) rt->retired[rt->nretired++] = rt->snap;
    rt->snap = grown;
    rt->snap_cap = cap;
  }
  if (at + bytes > rt->snap_cap) {
    WARN("rank %d: send snapshots need more than the %zu bytes reserved for them",
         rt->rank, rt->snap_cap);
    return ncclInternalError;
  }
  CUDA_CHECK_GOTO(cudaMemcpyAsync(rt->snap + at, src, bytes, cudaMemcpyDefault, ctx->stream),
            "cudaMemcpyAsync of a send snapshot", res, out);
  ctx->snap_used = at + bytes;
  *copy_out = rt->snap + at;
out:
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_copy(brd_launch_cuda_ctx_t *ctx, void *dst, const void *src,
                                  size_t bytes) {
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

/* The device copy of plan, uploaded at its first use. The upload
 * allocates and copies on a private stream; inside a capture that must not
 * join the graph, so the thread's capture mode is relaxed meanwhile. */
static ncclResult_t dplan_get(struct brd_rt_cuda *rt, const brd_ir_plan_t *plan, int p2p,
                              int capturing, const brd_exec_cuda_plan_t **out) {
  ncclResult_t res = ncclSuccess;
  uint64_t h = p2p ? blob_hash(plan) : 0;
  for (int i = 0; i < rt->nplans; i++) {
    dplan_t *d = &rt->plans[i];
    if (p2p ? (d->key == NULL && d->hash == h && d->copy->total_bytes == plan->total_bytes &&
               memcmp(d->copy, plan, plan->total_bytes) == 0)
            : d->key == plan) {
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
  (void)capturing;
  if (rt->nplans == rt->cap_plans) {
    int cap = rt->cap_plans ? 2 * rt->cap_plans : 64;
    dplan_t *p = realloc(rt->plans, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("out of host memory growing the device plan table to %d plans", cap);
      return ncclSystemError;
    }
    rt->plans = p;
    rt->cap_plans = cap;
  }
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
  /* The thread's capture mode is relaxed (brd_launch_cuda_begin). */
  CHECK_GOTO(brd_exec_cuda_plan_create(plan, &d.dev), res, fail);
  rt->plans[rt->nplans++] = d;
  if (p2p) rt->np2p++;
  *out = d.dev;
  return ncclSuccess;
fail:
  brd_plan_destroy(d.copy);
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_work(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                  const brd_exec_args_t *a, int p2p,
                                  size_t stage_half, int out_direct,
                                  const void *scalar_dev,
                                  const brd_launch_copy_t *copy) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt_cuda *rt = comm->rt_cuda;
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
  CHECK(dplan_get(rt, a->plan, p2p, ctx->capturing, &dp));
  for (uint32_t c = 0; c < nch; c++) {
    chans[c].peer_scratch = a->chans[c].peer_scratch;
    chans[c].peer_output = a->chans[c].peer_output;
    chans[c].peer_input = a->chans[c].peer_input;
    chans[c].peer_sems = (uint64_t *)a->chans[c].peer_sems;
    chans[c].sems = (uint64_t *)a->chans[c].sems;
    chans[c].xchg_pub = (uint64_t *)a->chans[c].xchg_pub;
    chans[c].xchg_slot = (uint64_t *)a->chans[c].xchg_slot;
    chans[c].xchg_output = a->chans[c].xchg_output;
  }
  brd_exec_cuda_args_t ca;
  memset(&ca, 0, sizeof(ca));
  ca.plan = dp;
  ca.rank = a->rank;
  ca.input = a->input;
  ca.output = a->output;
  ca.scratch = a->scratch;
  ca.scratch_bytes = a->scratch_bytes;
  ca.chans = nch > 0 ? chans : NULL;
  ca.count = a->count;
  ca.dtype = a->dtype;
  ca.redop = a->redop;
  ca.in_stride = a->in_stride;
  ca.out_stride = a->out_stride;
  ca.status = p2p ? rt->st_p2p : rt->st_coll;
  ca.scalar = a->scalar;
  ca.scalar_dev = scalar_dev; /* wins: the kernel reads it */
  if (p2p) {
    ca.epoch = a->epoch;
    ca.phase = 0;
    /* Spans: the kernels keep each pair's sequence numbers on the device,
     * so a captured send/recv gets fresh ones at every replay. */
    ca.chan_epoch = a->chan_epoch;
    ca.chan_cursor_dev = rt->p2p_cursor;
    ca.in_segs = (const brd_exec_cuda_seg_t *)a->in_segs;
    ca.out_segs = (const brd_exec_cuda_seg_t *)a->out_segs;
    ca.n_in_segs = a->n_in_segs;
    ca.n_out_segs = a->n_out_segs;
  } else {
    ca.device_epoch = 1;
    ca.out_half_bytes = stage_half;
    ca.out_direct = out_direct;
  }
  ca.xchg = a->xchg;
  res = brd_exec_cuda_launch(&ca, ctx->stream);
  if (res == ncclSuccess && !p2p && copy != NULL && copy->nseg > 0) {
    brd_exec_cuda_copyout_t co = {rt->st_coll, a->output, stage_half, copy->dst,
                                  copy->nseg, copy->seg_bytes, copy->seg_bytes,
                                  copy->dst_stride};
    res = brd_exec_cuda_copyout(&co, ctx->stream);
  }
  if (res != ncclSuccess && res != ncclInvalidArgument)
    rt->failed = res; /* sequence numbers moved here only: ranks disagree now */
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_end(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                 ncclResult_t res) {
  struct brd_rt_cuda *rt = comm->rt_cuda;
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
    for (int i = 1; i < ctx->ncalls && !ctx->capturing; i++)
      if (ctx->calls[i].stream != ctx->stream)
        CUDA_CHECK_GOTO(cudaStreamWaitEvent(ctx->calls[i].stream, rt->done, 0),
                  "cudaStreamWaitEvent of a group stream", r, out);
  }
out:
  if (ctx->saved_dev >= 0 && ctx->saved_dev != comm->cuda_dev &&
      cudaSetDevice(ctx->saved_dev) != cudaSuccess)
    (void)cudaGetLastError();
  return res != ncclSuccess ? res : r;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm) {
  struct brd_rt_cuda *rt = __atomic_load_n(&comm->rt_cuda, __ATOMIC_ACQUIRE);
  if (rt == NULL) return ncclSuccess;
  return poll_status(comm, rt);
}

/* See launch_cuda.h. */
void brd_launch_cuda_abort(struct ncclComm *comm) {
  struct brd_rt_cuda *rt = __atomic_load_n(&comm->rt_cuda, __ATOMIC_ACQUIRE);
  if (rt == NULL) return;
  brd_exec_cuda_status_abort(rt->st_coll);
  brd_exec_cuda_status_abort(rt->st_p2p);
}

#else /* !BRAID_CUDA */

static ncclResult_t no_cuda(void) {
  WARN("a CUDA-mode collective in a library built with CUDA=0; set BRAID_DEVICE=host");
  return ncclInvalidUsage;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_caps(struct ncclComm *comm, brd_launch_caps_t *caps_out,
                                  char *why, size_t nwhy) {
  (void)comm, (void)caps_out, (void)why, (void)nwhy;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_create(struct ncclComm *comm, int p2p, size_t win_bytes,
                                    brd_seg_handle_t *handle_out, char **base_out) {
  (void)comm, (void)p2p, (void)win_bytes, (void)handle_out, (void)base_out;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_import(struct ncclComm *comm, int r,
                                    const brd_seg_handle_t *handle, char **base_out) {
  (void)comm, (void)r, (void)handle, (void)base_out;
  return no_cuda();
}

/* See launch_cuda.h. */
void brd_launch_cuda_seal(struct ncclComm *comm) { (void)comm; }

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_begin(struct ncclComm *comm, const brd_call_t *calls,
                                   int ncalls, brd_launch_cuda_ctx_t *ctx) {
  (void)comm, (void)calls, (void)ncalls, (void)ctx;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_order(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx) {
  (void)comm, (void)ctx;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_copy(brd_launch_cuda_ctx_t *ctx, void *dst, const void *src,
                                  size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_snapshot(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                      const void *src, size_t bytes, size_t total,
                                      void **copy_out) {
  (void)comm, (void)ctx, (void)src, (void)bytes, (void)total, (void)copy_out;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_work(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                  const brd_exec_args_t *a, int p2p,
                                  size_t stage_half, int out_direct,
                                  const void *scalar_dev,
                                  const brd_launch_copy_t *copy) {
  (void)comm, (void)ctx, (void)a, (void)p2p, (void)stage_half, (void)out_direct;
  (void)scalar_dev, (void)copy;
  return no_cuda();
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_end(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                 ncclResult_t res) {
  (void)comm, (void)ctx;
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm) {
  (void)comm;
  return ncclSuccess;
}

/* See launch_cuda.h. */
void brd_launch_cuda_abort(struct ncclComm *comm) { (void)comm; }

/* See launch_cuda.h. */
void brd_launch_cuda_destroy(struct brd_rt_cuda *rt) { (void)rt; }

#endif /* BRAID_CUDA */
