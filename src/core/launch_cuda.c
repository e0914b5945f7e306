/*
 * Braid: the CUDA backend (backend.h). The works are the same in both
 * modes (works.c: plans, pieces, channel pointers into every rank's
 * window); in CUDA mode this file provides the window memory and turns
 * each work into an executor kernel enqueued on the user's stream. The
 * host never waits for the kernels.
 *
 * Windows. At the rank's first launch each rank reports its capabilities
 * (cuda_caps: P2P with every peer, the blocks its GPU can run for every
 * rank sharing it at once); all agree (window.c), then every rank creates
 * its window through the P2P transport (device memory), or in host memory
 * registered with CUDA when some pair cannot use P2P, and imports its
 * peers' windows. This backend owns the windows; the runtime only holds
 * their device addresses.
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
 * rank's executor status (mapped host memory). cuda_poll reads it
 * without synchronising and stores it in comm->async_error, so
 * ncclCommGetAsyncError reports it; every later launch polls too and
 * returns the failure.
 *
 * Per rank it keeps: the window (P2P segment, or host memory registered
 * with CUDA) and the peers' imported windows; two executor statuses, one
 * for collective works (device epochs) and one for point-to-point works
 * (per-pair cursors), since a status serves one kind for its whole life;
 * the device copies of every plan it has launched (collective plans by
 * address: the plan cache, plans.c, keeps them; point-to-point plans, built per
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
#include "core/works.h"
#include "core/bootstrap.h"
#include "base/param.h"

#if BRAID_CUDA
#include "device/exec_cuda.h"
#include "transport/nvls.h"
#include "plan/plan.h"
#include "base/time.h"

#define NB_LIMIT 32         /* most blocks per rank, unless NCCL_MAX_CTAS or
                               ncclConfig_t.maxCTAs asks for more */
#define P2P_PLANS_WARN 4096 /* point-to-point plans kept before a WARN */

/* A plan on the device, and what identifies it. */
typedef struct dplan {
  const brd_ir_plan_t *key;     /* borrowed: the plan cache's plan; NULL
                                   for a point-to-point plan */
  uint64_t hash;                /* point-to-point: hash of the blob */
  brd_ir_plan_t *copy;          /* owned: point-to-point: the blob */
  brd_exec_cuda_plan_t *dev;    /* owned */
} dplan_t;

struct brd_backend {
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
  _Atomic uint64_t dev_bytes;      /* device memory the above own, added where
                                      each is allocated (cuda_mem_bytes) */
  brd_nvls_t *nvls;                /* owned: the window's multicast mapping
                                      (switch channels), or NULL */
  char *mc_base;                   /* the window's first byte through it */
};

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
static int wait_idle(struct brd_backend *rt) {
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
static void rt_free(struct brd_backend *rt) {
  brd_nvls_destroy(rt->nvls); /* before the memory it binds */
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

static void cuda_destroy(struct brd_backend *rt) {
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

/* Reads the count kept at each allocation; nothing is freed before
 * destroy, so it only grows while b lives. */
static uint64_t cuda_mem_bytes(const struct brd_backend *rt) {
  return atomic_load(&((struct brd_backend *)rt)->dev_bytes);
}

/* Polls the event of the rank's last launch: its kernels end when every
 * peer's matching kernels have, so once each rank has drained, none reads
 * another's window. No abort is raised: a kernel still running at the
 * deadline is reported, and the caller frees nothing. */
static ncclResult_t cuda_drain(struct ncclComm *comm, struct brd_backend *rt) {
  if (!rt->done_valid) return ncclSuccess;
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT);
  int64_t deadline = brd_time_now_ns() + (t > 0 ? t : 300) * 1000000000LL;
  for (;;) {
    cudaError_t e = cudaEventQuery(rt->done);
    if (e == cudaSuccess) return ncclSuccess;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      WARN("rank %d: waiting for its last launch to finish failed: %s (%d)", comm->rank,
           cudaGetErrorString(e), (int)e);
      return ncclUnhandledCudaError;
    }
    if (atomic_load(&comm->abort_flag) || brd_time_now_ns() >= deadline) {
      WARN("rank %d: its last launch still runs after %lld s (BRAID_TIMEOUT)%s; is a "
           "peer missing from the collective? Nothing was freed", comm->rank,
           (long long)(t > 0 ? t : 300),
           atomic_load(&comm->abort_flag) ? " or the communicator was aborted" : "");
      return ncclRemoteError;
    }
    struct timespec ts = {0, 200000L};
    nanosleep(&ts, NULL);
  }
}

/* Ranks in different processes that share a GPU without MPS get separate
 * contexts, which the GPU runs in turns (time slices of milliseconds): a
 * kernel that waits for a peer's kernel waits for the next turn. Say so
 * once per communicator, with the fix. */
static void mps_check(struct ncclComm *comm) {
  int other = brd_comm_device_other_process(comm), mps = 0;
  if (other < 0) return;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->cuda_dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (mps) {
    INFO(BRD_SUBSYS_INIT, "rank %d: GPU %d is shared with rank %d's process through MPS",
         comm->rank, comm->cuda_dev, other);
    return;
  }
  WARN("rank %d: rank %d, in another process, shares GPU %d without MPS: the GPU runs "
       "the two processes' kernels in turns, so every step of a collective waits for a "
       "time slice (2.2 ms per all-reduce of 2 processes on an H200, 26 us under MPS); "
       "start the MPS control daemon (nvidia-cuda-mps-control -d) before the job, or "
       "run the ranks on one GPU as threads of one process",
       comm->rank, other, comm->cuda_dev);
}

static ncclResult_t cuda_caps(struct ncclComm *comm, brd_backend_caps_t *caps_out, char *why,
                              size_t nwhy) {
  ncclResult_t res = ncclSuccess;
  int me = comm->rank, nsm = 0;
  brd_backend_caps_t caps = {.p2p_ok = 1};
  why[0] = '\0';
  int remote = 0;
  for (int r = 0; r < comm->nranks; r++)
    remote |= comm->peers[r].host_hash != comm->peers[me].host_hash;
  if (remote) {
    /* Ranks on other hosts are reached over port channels (proxy.h), whose
     * windows are host memory: no GPU peer-to-peer, and nothing to warn. */
    caps.p2p_ok = 0;
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "rank %d: the communicator spans hosts; channels "
         "use host memory, port channels to the other hosts", me);
  } else {
    caps.p2p_ok = brd_transport_choose(comm->peers, comm->nranks, me, BRD_TRANSPORT_MEM_GPU,
                                       why, nwhy) != NULL;
  }
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
  /* By default half the SMs, shared among the ranks on the GPU, and at
   * most NB_LIMIT blocks per rank: the rest stay free for the job's own
   * kernels, and every block of every sharing rank is resident with room
   * to spare (each takes a whole SM). The user may ask for more
   * (NCCL_MAX_CTAS, ncclConfig_t.maxCTAs), up to every SM. The scratch
   * window does not grow with the blocks (brd_plan_scratch_bytes). */
  int asked = brd_param_getenv(brd_param_table[BRD_P_MAX_CTAS].name) != NULL ||
              comm->config.maxCTAs != BRD_CONFIG_MAX_CTAS;
  if (!asked) nb = nb / 2 > NB_LIMIT ? NB_LIMIT : nb / 2 > 0 ? nb / 2 : 1;
  mps_check(comm);
  if (comm->config.maxCTAs > 0 && nb > comm->config.maxCTAs) nb = comm->config.maxCTAs;
  caps.nb_max = nb;
  int64_t stage = brd_param_int(BRD_P_BRAID_CUDA_STAGING);
  if (stage < 65536) stage = 65536;
  caps.stage_bytes = ((uint64_t)stage + 4095) & ~(uint64_t)4095;
  *caps_out = caps;
out:
  return res;
}

static ncclResult_t cuda_window_create(struct ncclComm *comm, const brd_transport_ops_t *t,
                                       int p2p, size_t win_bytes, brd_seg_handle_t *handle_out,
                                       char **base_out, struct brd_backend **b_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  char *base = NULL;
  int saved = -1;
  struct brd_backend *rt;
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
  /* Before this communicator's first kernel: see brd_exec_cuda_load. */
  CHECK_GOTO(brd_exec_cuda_load(), res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(&rt->st_coll), res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(&rt->st_p2p), res, fail);
  atomic_fetch_add(&rt->dev_bytes, 2 * (uint64_t)brd_exec_cuda_status_device_bytes());
  CHECK_GOTO(cursors_create(n, &rt->p2p_cursor), res, fail);
  atomic_fetch_add(&rt->dev_bytes, (uint64_t)n * sizeof(*rt->p2p_cursor));
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
  rt->ops = t;
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
    atomic_fetch_add(&rt->dev_bytes, (uint64_t)rt->self.size);
  }
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P, "rank %d: %s window of %zu bytes on device %d",
       me, rt->ops->name, win_bytes, rt->dev);
  *handle_out = rt->self.handle;
  *base_out = base;
  *b_out = rt;
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

static ncclResult_t cuda_window_import(struct brd_backend *rt, int r,
                                       const brd_seg_handle_t *handle, char **base_out) {
  ncclResult_t res = ncclSuccess;
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

static void cuda_window_seal(struct brd_backend *rt) { rt->ops->seg_seal(&rt->self); }

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
static ncclResult_t cuda_begin(struct ncclComm *comm, struct brd_backend *rt,
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
static ncclResult_t cuda_order(struct brd_backend *rt, brd_backend_launch_t *l) {
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

/* The device copy of plan, uploaded at its first use. The upload
 * allocates and copies on a private stream; inside a capture that must not
 * join the graph, so the thread's capture mode is relaxed meanwhile. */
static ncclResult_t dplan_get(struct brd_backend *rt, const brd_ir_plan_t *plan, int p2p,
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
  /* The thread's capture mode is relaxed (cuda_begin). */
  CHECK_GOTO(brd_exec_cuda_plan_create(plan, &d.dev), res, fail);
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
 * apart). nseg 0: nothing to copy. */
typedef struct copy_out {
  void *dst;
  uint32_t nseg;
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
  CHECK(dplan_get(rt, a->plan, p2p, ctx->capturing, &dp));
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

/* The bootstrap's allgather over every rank, for nvls.c (every rank of a
 * communicator with switch channels shares memory with every other). */
static ncclResult_t nvls_allgather(void *ctx, const void *in, void *out, size_t len) {
  struct ncclComm *comm = ctx;
  memcpy((char *)out + (size_t)comm->rank * len, in, len);
  return brd_boot_allgather(comm->boot, out, len);
}

/* Switch channels (backend.h switch_bind): the whole window bound to a
 * multicast object by address (transport/nvls.c), which needs cuMem
 * windows on every rank: asked first, so that all ranks skip together. */
static ncclResult_t cuda_switch_bind(struct ncclComm *comm, struct brd_backend *rt,
                                     int *on_out) {
  size_t room = 0;
  int *vmm = calloc((size_t)comm->nranks, sizeof(*vmm));
  ncclResult_t res = ncclSuccess;
  *on_out = 0;
  if (vmm == NULL) {
    WARN("out of host memory deciding NVLS for %d ranks", comm->nranks);
    return ncclSystemError;
  }
  vmm[comm->rank] = !rt->host_memory && brd_p2p_seg_vmm(&rt->self, &room);
  CHECK_GOTO(brd_boot_allgather(comm->boot, vmm, sizeof(*vmm)), res, out);
  for (int r = 0; r < comm->nranks; r++) {
    if (vmm[r]) continue;
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NVLS, "rank %d: NVLS off: rank %d's window is not "
         "cuMem memory (CUDA IPC or host memory), which multicast cannot bind", comm->rank, r);
    if (brd_param_int(BRD_P_NVLS_ENABLE) == 1) {
      WARN("NCCL_NVLS_ENABLE=1: rank %d's channel window is not cuMem memory, which "
           "multicast needs; unset NCCL_NVLS_ENABLE or let the P2P transport use cuMem", r);
      res = ncclInvalidUsage;
    }
    goto out;
  }
  brd_nvls_args_t a;
  memset(&a, 0, sizeof(a));
  a.nranks = comm->nranks;
  a.rank = comm->rank;
  a.dev = rt->dev;
  a.enable = -1;
  a.allgather = nvls_allgather;
  a.allgather_ctx = comm;
  a.bind = BRD_NVLS_BIND_ADDR;
  a.addr = (uintptr_t)rt->self.ptr;
  a.addr_room = room;
  a.size = rt->self.size;
  a.abort_flag = &comm->abort_flag;
  brd_nvls_status_t st;
  CHECK_GOTO(brd_nvls_create(&a, &rt->nvls, &st), res, out);
  if (rt->nvls != NULL) {
    rt->mc_base = brd_nvls_mc_ptr(rt->nvls);
    *on_out = 1;
  }
out:
  free(vmm);
  return res;
}

/* One-sided runs (backend.h rma_run): the rank's part of a one-sided plan,
 * uploaded by content like point-to-point plans, on the point-to-point
 * status with explicit per-channel epochs (the host counts the signals),
 * which is why a capture is refused: a replay would repeat the counts. */
static ncclResult_t cuda_rma_run(struct ncclComm *comm, struct brd_backend *rt,
                                 brd_backend_launch_t *l, const brd_exec_args_t *a) {
  cuda_launch_t *ctx = ctx_of(l);
  const brd_exec_cuda_plan_t *dp;
  brd_exec_cuda_chan_t chans[1];
  uint32_t nch = brd_ir_plan_rank(a->plan, a->rank)->nchans;
  (void)comm;
  if (ctx->capturing) {
    WARN("%s : the stream is being captured into a CUDA graph; braid %s runs one-sided "
         "calls outside captures only (a replay would repeat their signal counts)",
         l->calls[0].fn, BRAID_VERSION);
    return ncclInvalidUsage;
  }
  if (nch > 1) {
    WARN("%s : rank %d: a one-sided plan with %u channels (1 expected)", l->calls[0].fn,
         a->rank, nch);
    return ncclInternalError;
  }
  CHECK(dplan_get(rt, a->plan, 1, 0, &dp));
  brd_exec_cuda_args_t ca;
  CHECK(cuda_args(rt, a, dp, 1, chans, &ca));
  ca.status = rt->st_p2p;
  ncclResult_t res = brd_exec_cuda_launch(&ca, ctx->stream);
  if (res != ncclSuccess && res != ncclInvalidArgument) rt->failed = res;
  return res;
}

/* Ends a launch: records its completion (not while capturing), makes the
 * group's other streams wait for it, restores the thread's capture mode
 * and device. */
static ncclResult_t cuda_end(struct ncclComm *comm, struct brd_backend *rt,
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

static ncclResult_t cuda_poll(struct ncclComm *comm, struct brd_backend *rt) {
  return poll_status(comm, rt);
}

static void cuda_abort(struct brd_backend *rt) {
  brd_exec_cuda_status_abort(rt->st_coll);
  brd_exec_cuda_status_abort(rt->st_p2p);
}

static void cuda_peer_gone(struct brd_backend *rt, uint64_t ns) {
  brd_exec_cuda_status_stuck(rt->st_coll, ns);
  brd_exec_cuda_status_stuck(rt->st_p2p, ns);
}

/* A range of device memory exported by the P2P transport (cuMem or CUDA
 * IPC). */
static ncclResult_t cuda_reg_export(const struct ncclComm *comm, const char *ptr, size_t size,
                                    brd_seg_handle_t *handle_out, uint64_t *offset_out,
                                    brd_p2p_export_t *ex, char *why, size_t nwhy, int *ok_out) {
  (void)comm;
  *ok_out = 0;
  ncclResult_t e = brd_p2p_export(ptr, size, ex, why, nwhy);
  if (e == ncclSuccess) {
    *ok_out = 1;
    *handle_out = ex->handle;
    *offset_out = ex->offset;
  }
  return e == ncclInvalidArgument ? ncclSuccess : e;
}

/* Maps a peer's exported device memory on the communicator's GPU. */
static ncclResult_t cuda_reg_import(struct ncclComm *comm, const brd_seg_handle_t *h,
                                    uint64_t offset, brd_seg_t *imp, char **addr_out) {
  CHECK(brd_device_set(comm->cuda_dev));
  CHECK(brd_p2p_import_user(h, imp));
  *addr_out = (char *)imp->ptr + offset;
  return ncclSuccess;
}

/* Enqueues every work in order on the launch's stream, after the
 * snapshots of send buffers that overlap a receive. */
static ncclResult_t cuda_run_works(struct ncclComm *comm, struct brd_backend *rt,
                                   brd_backend_launch_t *l, brd_works_t *ws) {
  cuda_launch_t *ctx = ctx_of(l);
  (void)comm;
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
    }
    /* A rank writing its own buffer in place while exchanging outputs
     * may still write peers' staging halves. */
    CHECK(enqueue_work(rt, ctx, &w->args, w->p2p,
                       w->direct && !w->args.xchg ? 0 : ws->stage_half, w->direct,
                       w->scalar_dev, &cp));
  }
  return ncclSuccess;
}

/* A one-rank communicator: every collective without a PreMulSum (sum,
 * product, min, max and average of one input are the input) is a copy of
 * count elements from the send to the receive buffer, and a send to itself
 * is a copy into the matching receive (the i-th send and the i-th
 * receive), as the pairing rule of point-to-point plans says. No runtime,
 * no window. *done_out 0 when the launch must take the general path. */
static ncclResult_t cuda_run_local(struct ncclComm *comm, brd_backend_launch_t *l,
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

/* ---- port channels (proxy.h) ------------------------------------------------ */

/* Mirrors the kernels write: mapped, portable host memory. */
static ncclResult_t mirror_alloc(void *ctx, size_t bytes, void **host_out, char **dev_out) {
  (void)ctx;
  void *h = NULL;
  char *d = NULL;
  cudaError_t e = cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("CUDA: cudaHostAlloc of a port channel's mirror (%zu bytes) failed: %s (%d)", bytes,
         cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  memset(h, 0, bytes);
  e = cudaHostGetDevicePointer((void **)&d, h, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFreeHost(h);
    WARN("CUDA: cudaHostGetDevicePointer of a port channel's mirror failed: %s (%d)",
         cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  *host_out = h;
  *dev_out = d;
  return ncclSuccess;
}

static void mirror_free(void *ctx, void *host) {
  (void)ctx;
  if (cudaFreeHost(host) != cudaSuccess) (void)cudaGetLastError();
}

static void cuda_port_mem(struct brd_backend *rt, brd_proxy_mem_t *mem) {
  (void)rt;
  mem->ctx = NULL;
  mem->alloc = mirror_alloc;
  mem->free = mirror_free;
}

/* Port peers exist only when some pair has no GPU peer-to-peer, so the
 * windows are host memory, which the proxy writes directly. */
static char *cuda_window_host(struct brd_backend *rt) {
  return rt->host_memory ? (char *)rt->self.ptr : NULL;
}

/* Both statuses (collectives, point-to-point) get a trigger FIFO the
 * proxy drains. */
static ncclResult_t cuda_ports_bind(struct brd_backend *rt, brd_proxy_t *px, int n) {
  ncclResult_t res = ncclSuccess;
  int saved = -1;
  if (!rt->host_memory) {
    WARN("rank %d: port channels need host-memory windows", rt->rank);
    return ncclInternalError;
  }
  uint64_t *mirror = calloc((size_t)n, sizeof(*mirror));
  if (mirror == NULL) {
    WARN("out of host memory for the port table of %d ranks", n);
    return ncclSystemError;
  }
  for (int r = 0; r < n; r++) mirror[r] = (uint64_t)(uintptr_t)brd_proxy_mirror_dev(px, r);
  if (cudaGetDevice(&saved) != cudaSuccess) {
    (void)cudaGetLastError();
    saved = -1;
  }
  brd_exec_cuda_status_t *sts[2] = {rt->st_coll, rt->st_p2p};
  CUDA_CHECK_GOTO(cudaSetDevice(rt->dev), "cudaSetDevice to the communicator's GPU", res, out);
  for (int i = 0; i < 2; i++) {
    brd_exec_fifo_t *fifo;
    CHECK_GOTO(brd_exec_cuda_status_ports(sts[i], n, mirror, &fifo), res, out);
    CHECK_GOTO(brd_proxy_fifo_add(px, fifo), res, out);
  }
out:
  if (saved >= 0 && saved != rt->dev && cudaSetDevice(saved) != cudaSuccess)
    (void)cudaGetLastError();
  free(mirror);
  return res;
}

static void cuda_quiesce(struct brd_backend *rt) { (void)wait_idle(rt); }

#define CUDA_OPS_RUN                                                                     \
  .port_mem = cuda_port_mem, .window_host = cuda_window_host,                            \
  .ports_bind = cuda_ports_bind, .quiesce = cuda_quiesce,                                \
  .window_create = cuda_window_create, .window_import = cuda_window_import,              \
  .window_seal = cuda_window_seal, .begin = cuda_begin, .run_local = cuda_run_local,     \
  .order = cuda_order, .run_works = cuda_run_works, .rma_run = cuda_rma_run,            \
  .switch_bind = cuda_switch_bind,                                                       \
  .end = cuda_end, .poll = cuda_poll,                                                    \
  .abort = cuda_abort, .peer_gone = cuda_peer_gone, .destroy = cuda_destroy,             \
  .reg_export = cuda_reg_export, .reg_import = cuda_reg_import,                          \
  .mem_bytes = cuda_mem_bytes, .drain = cuda_drain


/* Rough link figures: GPU peer access (NVLink or PCIe) against host memory
 * across PCIe. Every rank sees the same numbers, which is all the tuner
 * needs to agree across ranks. */
static void cuda_topo(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t) {
  t->host_mode = 0;
  t->ranks_per_device = brd_comm_ranks_per_device(comm);
  t->intra_bw = p2p ? 100.0f : 8.0f;
  t->intra_lat = p2p ? 1.0f : 3.0f;
}

const brd_backend_ops_t brd_backend_cuda = {
    .name = "CUDA",
    .device_seq = 1,
    .scalar_on_device = 1,
    .reg_needs_p2p = 1,
    .rma_mem = BRD_TRANSPORT_MEM_GPU,
    .switch_chans = BRD_BACKEND_SWITCH_OPT_IN,
    /* GPU blocks are cheap to add: 2 from 64 KiB, 4 from 1 MiB, 8 from 16 MiB,
     * 16 from 32 MiB, 32 from 64 MiB, and where NCCL_MAX_CTAS allows, 64 from
     * 128 MiB. One block moves 15-20 GB/s (docs/perf/gpu.md), so more blocks
     * from smaller sizes would help; on an H200 that (8 blocks from 1 MiB)
     * hung the deterministic 5-rank case of test_collectives, not yet
     * understood (tests/gpu/det_diag.sh). */
    .nb_sizes = {(size_t)64 << 10, (size_t)1 << 20, (size_t)16 << 20, (size_t)32 << 20,
                 (size_t)64 << 20, (size_t)128 << 20},
    .p2p_round_ops = 48, /* BRD_EXEC_CUDA_INLINE_SEGS: segments ride in the kernel's parameters */
    .topo = cuda_topo,
    .caps = cuda_caps,
    CUDA_OPS_RUN,
};
#endif /* BRAID_CUDA; launch_nocuda.c has this backend in CUDA=0 builds */
