/*
 * Braid: the CUDA backend (backend.h). The works are the same in both
 * modes (works.c: plans, pieces, channel pointers into every rank's
 * window); in CUDA mode the backend provides the window memory and turns
 * each work into an executor kernel enqueued on the user's stream. The
 * host never waits for the kernels.
 *
 * The backend is three files. This one holds the backend object and its
 * ops table: capabilities and topology figures, window creation and
 * import, registration of user memory, switch channels, port channels,
 * abort and teardown. launch_cuda_run.c holds the launch path (begin,
 * order, the works' kernels, one-sided runs, end, polling); launch_cuda.h
 * is the state both share.
 *
 * Windows. At the rank's first launch each rank reports its capabilities
 * (cuda_caps: P2P with every peer, the blocks its GPU can run for every
 * rank sharing it at once); all agree (window.c), then every rank creates
 * its window through the P2P transport (device memory), or in host memory
 * registered with CUDA when some pair cannot use P2P, and imports its
 * peers' windows. This backend owns the windows; the runtime only holds
 * their device addresses.
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
#include "base/cuda_wait.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/backend.h"
#include "core/gpu.h"
#include "core/works.h"
#include "core/bootstrap.h"
#include "base/param.h"

#if BRAID_CUDA
#include "core/launch_cuda.h"
#include "core/rma.h"
#include "transport/nvls.h"
#include "plan/plan.h"
#include "base/time.h"

#define NB_LIMIT 32         /* most blocks per rank, unless NCCL_MAX_CTAS or
                               ncclConfig_t.maxCTAs asks for more */
#define NB_LIMIT_SHARED 8   /* the same where ranks share the GPU */

/* n zeroed cursors in device memory, zeroed on a private stream (no other
 * work on the device is waited for), at the communicator's creation; the
 * wait is bounded (brd_cuda_stream_wait) and stops at abort_flag, and
 * the memory is leaked when it gives up (the memset is still queued). */
static ncclResult_t cursors_create(size_t n, _Atomic int *abort_flag, uint64_t **out) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  uint64_t *p = NULL;
  CUDA_CHECK_GOTO(cudaMalloc((void **)&p, (size_t)n * sizeof(*p)),
                  "cudaMalloc for the sequence-number cursors", res, out);
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags", res, fail_free);
  if (cudaMemsetAsync(p, 0, (size_t)n * sizeof(*p), s) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("CUDA: zeroing the sequence-number cursors failed");
    res = ncclUnhandledCudaError;
  } else {
    int stuck = 0;
    res = brd_cuda_stream_wait(s, "zeroing the sequence-number cursors", abort_flag, &stuck);
    if (stuck) {
      cudaStreamDestroy(s); /* returns at once; released after its work */
      brd_cuda_leak_info((size_t)n * sizeof(*p), "the sequence-number cursors");
      goto out;
    }
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

/* Frees rt unless work that a bounded creation wait gave up on may still
 * be queued on its device (brd_cuda_stuck): every cudaFree there would
 * wait behind it, maybe for ever, so rt is leaked instead. The caller has
 * made rt->dev current. */
static void rt_free_unless_stuck(struct brd_backend *rt) {
  if (!brd_cuda_stuck(rt->dev)) {
    rt_free(rt);
    return;
  }
  brd_cuda_leak_info((size_t)atomic_load(&rt->dev_bytes),
                     "a rank's CUDA backend (status, cursors, window)");
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
    rt_free_unless_stuck(rt);
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
   * to spare (each takes a whole SM). Ranks sharing the GPU take at most
   * NB_LIMIT_SHARED: on an H200, 2 to 8 ranks as threads of one process
   * with up to 32 blocks each hung now and then in their first collective
   * (a rank's block never started; about one run in six, cause not yet
   * found: docs/perf/gpu.md), where 8 blocks passed every check. The user
   * may ask for more (NCCL_MAX_CTAS, ncclConfig_t.maxCTAs), up to every
   * SM. The scratch window does not grow with the blocks
   * (brd_plan_scratch_bytes). */
  int asked = brd_param_getenv(brd_param_table[BRD_P_MAX_CTAS].name) != NULL ||
              comm->config.maxCTAs != BRD_CONFIG_MAX_CTAS;
  int limit = share > 1 ? NB_LIMIT_SHARED : NB_LIMIT;
  if (!asked) nb = nb / 2 > limit ? limit : nb / 2 > 0 ? nb / 2 : 1;
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
  rt->abort_flag = &comm->abort_flag;
  CHECK_GOTO(brd_exec_cuda_status_create(rt->abort_flag, &rt->st_coll), res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(rt->abort_flag, &rt->st_p2p), res, fail);
  atomic_fetch_add(&rt->dev_bytes, 2 * (uint64_t)brd_exec_cuda_status_device_bytes());
  /* One allocation: the point-to-point pairs', then the one-sided calls'
   * (what this rank signalled, what it waited for: brd_backend_rma_t). */
  rt->rma_cells = (size_t)brd_rma_ctx_count(comm) * BRD_RMA_SIGNALS * (size_t)n;
  size_t ncur = (size_t)n + 2 * rt->rma_cells;
  CHECK_GOTO(cursors_create(ncur, rt->abort_flag, &rt->p2p_cursor), res, fail);
  rt->rma_cursor = rt->p2p_cursor + n;
  atomic_fetch_add(&rt->dev_bytes, (uint64_t)ncur * sizeof(*rt->p2p_cursor));
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
  rt_free_unless_stuck(rt);
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

/* The bootstrap's allgather over every rank, for nvls.c (every rank of a
 * communicator with switch channels shares memory with every other). */
static ncclResult_t nvls_allgather(void *ctx, const void *in, void *out, size_t len) {
  struct ncclComm *comm = ctx;
  memcpy((char *)out + (size_t)comm->rank * len, in, len);
  return brd_boot_allgather(comm->boot, out, len);
}

/* A multicast object over every rank's [ptr, ptr + size) of device dev,
 * bound by address (room: the bytes of the cuMem allocation from ptr on),
 * NVLS_ENABLE's choice left to brd_nvls_create. */
static void nvls_addr_args(struct ncclComm *comm, int dev, void *ptr, size_t room, size_t size,
                           brd_nvls_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->nranks = comm->nranks;
  a->rank = comm->rank;
  a->dev = dev;
  a->enable = -1;
  a->allgather = nvls_allgather;
  a->allgather_ctx = comm;
  a->bind = BRD_NVLS_BIND_ADDR;
  a->addr = (uintptr_t)ptr;
  a->addr_room = room;
  a->size = size;
  a->abort_flag = &comm->abort_flag;
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
  nvls_addr_args(comm, rt->dev, rt->self.ptr, room, rt->self.size, &a);
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

/* A registered window (backend.h reg_switch_bind): every rank's range
 * bound by address to one multicast object, which needs ncclMemAlloc
 * (cuMem) memory of the same size on every rank of one host; asked first,
 * so that all ranks skip together. */
static ncclResult_t cuda_reg_switch(struct ncclComm *comm, char *ptr, size_t size,
                                    struct brd_nvls **mc_out, char *why, size_t nwhy) {
  typedef struct {
    uint64_t size;
    int32_t vmm, off; /* off: NCCL_NVLS_ENABLE=0 on this rank */
  } pub_t;
  int n = comm->nranks, me = comm->rank, saved = -1;
  size_t room = 0;
  ncclResult_t res = ncclSuccess;
  *mc_out = NULL;
  if (comm->n_nodes > 1) {
    snprintf(why, nwhy, "the communicator spans hosts, and a multicast object lives on one");
    return ncclSuccess;
  }
  pub_t *all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) {
    WARN("out of host memory binding a window of %d ranks to multicast", n);
    return ncclSystemError;
  }
  all[me].size = size;
  all[me].vmm = brd_p2p_mem_vmm_room(ptr, &room);
  all[me].off = brd_param_int(BRD_P_NVLS_ENABLE) == 0;
  if (n > 1) CHECK_GOTO(brd_boot_allgather(comm->boot, all, sizeof(*all)), res, out);
  for (int r = 0; r < n; r++) {
    if (all[r].off) {
      snprintf(why, nwhy, "NVLS is off on rank %d (NCCL_NVLS_ENABLE=0)", r);
      goto out;
    }
  }
  for (int r = 0; r < n; r++) {
    if (!all[r].vmm) {
      snprintf(why, nwhy, "rank %d's window is not ncclMemAlloc (cuMem) memory, which "
               "multicast cannot bind", r);
      goto out;
    }
    if (all[r].size != size) {
      snprintf(why, nwhy, "the ranks' windows differ in size (rank %d: %llu bytes, rank "
               "%d: %zu), and one multicast object binds the same size on every rank", r,
               (unsigned long long)all[r].size, me, size);
      goto out;
    }
  }
  if (cudaGetDevice(&saved) != cudaSuccess) {
    (void)cudaGetLastError();
    saved = -1;
  }
  CHECK_GOTO(brd_device_set(comm->cuda_dev), res, out);
  brd_nvls_args_t a;
  nvls_addr_args(comm, comm->cuda_dev, ptr, room, size, &a);
  brd_nvls_status_t st;
  memset(&st, 0, sizeof(st));
  res = brd_nvls_create(&a, mc_out, &st);
  if (res == ncclSuccess && *mc_out == NULL) snprintf(why, nwhy, "%s", st.why);
out:
  if (saved >= 0 && saved != comm->cuda_dev) (void)cudaSetDevice(saved);
  free(all);
  return res;
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
    CHECK_GOTO(brd_exec_cuda_status_ports(sts[i], n, mirror, rt->abort_flag, &fifo), res, out);
    CHECK_GOTO(brd_proxy_fifo_add(px, fifo), res, out);
  }
  rt->proxy = px;
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
  .window_seal = cuda_window_seal, .begin = brd_launch_cuda_begin,                       \
  .run_local = brd_launch_cuda_run_local, .order = brd_launch_cuda_order,                \
  .run_works = brd_launch_cuda_run_works, .rma_run = brd_launch_cuda_rma_run,            \
  .switch_bind = cuda_switch_bind, .reg_switch_bind = cuda_reg_switch,                  \
  .end = brd_launch_cuda_end, .poll = brd_launch_cuda_poll,                              \
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
