/*
 * Braid: the collective runtime of a communicator, CUDA mode (see
 * launch_cuda.h). The layout mirrors launch.c's host path:
 *
 *   [ inbound semaphores: nranks x nsems x 8 bytes ]
 *   [ scratch: the largest any uploaded plan needs, both phases ]
 *   [ staging output: two halves of stage_bytes ]
 *
 * Peers write a rank's semaphores, scratch and staging through its window.
 * User buffers are not shared, so a plan's output is the staging half of
 * the launch's phase; the rank copies it to the user's buffer with
 * cudaMemcpyAsync on the same stream, right after its kernel. Messages
 * larger than a half run as several launches (all-reduce is element-wise).
 * Halves alternate with the scratch phase, so a peer one launch ahead never
 * writes the half still being read.
 *
 * Creation, collective over the communicator:
 *   1. every rank checks P2P against every peer (brd_p2p_usable) and how
 *      many blocks its GPU can run for every rank sharing it at once;
 *      allgather; all agree on P2P only if every pair can, and on the
 *      smallest block limit, so every rank keeps the same plans;
 *   2. plans with up to that many blocks are uploaded (executor), the
 *      window is created (P2P, or host memory registered with CUDA),
 *      allgather of the window records, every peer's window imported;
 *   3. per plan and phase, the channel table (peer pointers) goes to
 *      device memory once, so a launch only picks a pointer.
 *
 * A call then: tunes (the same inputs on every rank, so the same choice),
 * reserves sequence numbers exactly as launch.c does (same spans, same
 * order on every rank), enqueues the kernel and the copy-out, and records
 * an event. A call on another stream than the previous one first waits on
 * that event, so the launches sharing the rank's status block stay ordered
 * as the executor requires. Nothing on this path allocates or synchronises.
 *
 * Several ranks on one GPU (threads of one process): each rank's kernel
 * must run at the same time as the others', so every rank gets at most
 * SMs / ranks-per-GPU blocks (the executor's kernels hold one SM per
 * block), and the user must give each rank its own stream.
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

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "device.h"
#include "launch_cuda.h"
#include "param.h"

#if BRAID_CUDA
#include "algos/algos.h"
#include "device/exec_cuda.h"
#include "device/reduce.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "transport/transport.h"

#define RTC_ALGOS 4   /* ring, tree, one-shot, two-shot */
#define RTC_PROTOS 2  /* LL, Simple */
#define RTC_NB_OPTS 4 /* plans with 1, 2, 4 and 8 blocks per rank */

static const brd_algo_t rtc_algos[RTC_ALGOS] = {BRD_ALGO_RING, BRD_ALGO_TREE,
                                                BRD_ALGO_ONESHOT, BRD_ALGO_TWOSHOT};
static const brd_proto_t rtc_protos[RTC_PROTOS] = {BRD_PROTO_LL, BRD_PROTO_SIMPLE};
static const int rtc_nblocks[RTC_NB_OPTS] = {1, 2, 4, 8};

#define CUDA_GOTO(call, what, res, label)                                     \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      WARN("CUDA: %s failed: %s (%d)", (what), cudaGetErrorString(e_), (int)e_); \
      (void)cudaGetLastError();                                               \
      (res) = ncclUnhandledCudaError;                                         \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* What each rank reports before anything is allocated. */
typedef struct {
  int32_t p2p_ok;                   /* 1: P2P usable with every peer */
  int32_t nb_max;                   /* most blocks per rank (0: none fit) */
  uint64_t stage_bytes;             /* BRAID_CUDA_STAGING, rounded */
  uint64_t scratch[RTC_NB_OPTS];    /* scratch the plans up to each size need */
  uint64_t nsems[RTC_NB_OPTS];      /* semaphores the same plans need */
} rtc_caps_t;

/* What a rank publishes about its window. */
typedef struct {
  brd_seg_handle_t handle;
  uint64_t sem_off;
  uint64_t nsems;       /* inbound semaphores per peer */
  uint64_t scratch_off;
  uint64_t scratch_bytes;
  uint64_t stage_off;
  uint64_t stage_bytes; /* one half */
} rtc_window_t;

struct brd_rt_cuda {
  int nranks;
  int rank;
  int dev;
  const brd_transport_ops_t *ops;  /* P2P, or HOST/SHM for host memory */
  int host_memory;                 /* 1: windows in host memory */
  brd_seg_t self;                  /* owned: this rank's window */
  brd_seg_t *peer;                 /* owned: [nranks] imported windows */
  unsigned char *registered;       /* owned: [nranks] 1 where this runtime
                                      holds a host_reg reference */
  char **base;                     /* owned: [nranks] device address of each
                                      window (borrowed memory) */
  rtc_window_t *win;               /* owned: [nranks] every rank's record */
  int nb_count;                    /* plan sizes uploaded: rtc_nblocks[0..) */
  brd_ir_plan_t *plans[RTC_ALGOS][RTC_PROTOS][RTC_NB_OPTS];       /* owned */
  brd_exec_cuda_plan_t *dplans[RTC_ALGOS][RTC_PROTOS][RTC_NB_OPTS]; /* owned */
  brd_exec_cuda_chan_t *dchans[RTC_ALGOS][RTC_PROTOS][RTC_NB_OPTS][2]; /* owned */
  brd_exec_cuda_status_t *status;  /* owned: the rank's executor status */
  cudaEvent_t done;                /* owned: end of the last call's work */
  int event_made;
  int done_valid;                  /* done has been recorded */
  pthread_mutex_t poll_lock;       /* brd_exec_cuda_poll is not reentrant */
  ncclResult_t failed;             /* a launch failed: later calls refuse */
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;
  uint64_t epoch_cursor;           /* same on every rank */
  uint32_t phase;                  /* alternates per launch */
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int algo_index(brd_algo_t a) {
  for (int i = 0; i < RTC_ALGOS; i++)
    if (rtc_algos[i] == a) return i;
  return -1;
}

static int proto_index(brd_proto_t p) {
  for (int i = 0; i < RTC_PROTOS; i++)
    if (rtc_protos[i] == p) return i;
  return -1;
}

static ncclResult_t generate(brd_algo_t algo, const brd_algos_args_t *a,
                             brd_ir_plan_t **plan_out) {
  switch (algo) {
  case BRD_ALGO_RING: return brd_algos_ring_allreduce(a, plan_out);
  case BRD_ALGO_TREE: return brd_algos_tree_allreduce(a, plan_out);
  case BRD_ALGO_ONESHOT: return brd_algos_oneshot_allreduce(a, plan_out);
  case BRD_ALGO_TWOSHOT: return brd_algos_twoshot_allreduce(a, plan_out);
  default: break;
  }
  WARN("no all-reduce generator for algorithm %s", brd_algo_name(algo));
  return ncclInternalError;
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

/* Waits (polling, with a deadline) until the rank's last call has left the
 * device. 1 when idle, 0 when kernels still run after the abort. */
static int wait_idle(struct brd_rt_cuda *rt) {
  if (!rt->done_valid) return 1;
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT);
  int64_t deadline = now_ns() + ((t > 0 ? t : 300) + 5) * 1000000000LL;
  int aborted = 0;
  for (;;) {
    cudaError_t e = cudaEventQuery(rt->done);
    /* Done, or the context is dead and nothing runs any more. */
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return 1;
    }
    if (now_ns() >= deadline) {
      if (aborted) return 0;
      brd_exec_cuda_status_abort(rt->status);
      aborted = 1;
      deadline = now_ns() + 2000000000LL;
    }
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Frees what the runtime holds, assuming no kernel uses it any more. */
static void rt_free(struct brd_rt_cuda *rt) {
  for (int a = 0; a < RTC_ALGOS; a++) {
    for (int p = 0; p < RTC_PROTOS; p++) {
      for (int b = 0; b < RTC_NB_OPTS; b++) {
        brd_exec_cuda_chans_destroy(rt->dchans[a][p][b][0]);
        brd_exec_cuda_chans_destroy(rt->dchans[a][p][b][1]);
        brd_exec_cuda_plan_destroy(rt->dplans[a][p][b]);
        brd_plan_destroy(rt->plans[a][p][b]);
      }
    }
  }
  brd_exec_cuda_status_destroy(rt->status);
  if (rt->event_made) cudaEventDestroy(rt->done);
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
  free(rt->base);
  free(rt->registered);
  free(rt->win);
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

/* Ranks on the GPU that is used by the most ranks of the communicator. */
static int ranks_per_device(const struct ncclComm *comm) {
  int most = 1;
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    for (int q = 0; q < comm->nranks; q++)
      k += comm->peers[q].host_hash == comm->peers[r].host_hash &&
           comm->peers[q].bus_id == comm->peers[r].bus_id;
    if (k > most) most = k;
  }
  return most;
}

static int all_in_this_process(const struct ncclComm *comm) {
  for (int r = 0; r < comm->nranks; r++)
    if (comm->peers[r].pid_hash != comm->peers[comm->rank].pid_hash) return 0;
  return 1;
}

/* Step 1 of the file comment: this rank's capabilities. Generates every
 * plan (host copies) on the way. */
static ncclResult_t caps_local(struct ncclComm *comm, struct brd_rt_cuda *rt,
                               rtc_caps_t *caps, char *why, size_t nwhy) {
  ncclResult_t res = ncclSuccess;
  int me = comm->rank, nsm = 0;
  memset(caps, 0, sizeof(*caps));
  caps->p2p_ok = 1;
  why[0] = '\0';
  for (int r = 0; r < comm->nranks && caps->p2p_ok; r++) {
    char w[384];
    if (r == me) continue;
    if (!brd_p2p_usable(&comm->peers[me], &comm->peers[r], w, sizeof(w))) {
      caps->p2p_ok = 0;
      snprintf(why, nwhy, "rank %d: %s", r, w);
    }
  }
  CUDA_GOTO(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, rt->dev),
            "cudaDeviceGetAttribute(multiProcessorCount)", res, out);
  int nb = nsm / ranks_per_device(comm);
  if (nb > rtc_nblocks[RTC_NB_OPTS - 1]) nb = rtc_nblocks[RTC_NB_OPTS - 1];
  if (comm->config.maxCTAs > 0 && nb > comm->config.maxCTAs) nb = comm->config.maxCTAs;
  caps->nb_max = nb;
  int64_t stage = brd_param_int(BRD_P_BRAID_CUDA_STAGING);
  if (stage < 65536) stage = 65536;
  caps->stage_bytes = ((uint64_t)stage + 4095) & ~(uint64_t)4095;

  uint64_t scratch = 0, nsems = 1;
  for (int b = 0; b < RTC_NB_OPTS; b++) {
    for (int a = 0; a < RTC_ALGOS; a++) {
      for (int p = 0; p < RTC_PROTOS; p++) {
        brd_algos_args_t args = {
            .nranks = comm->nranks, .order = NULL, .nblocks = rtc_nblocks[b],
            .proto = rtc_protos[p] == BRD_PROTO_LL ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE,
        };
        CHECK_GOTO(generate(rtc_algos[a], &args, &rt->plans[a][p][b]), res, out);
        uint64_t s = brd_plan_scratch_bytes(rt->plans[a][p][b]);
        if (s > scratch) scratch = s;
        if (rt->plans[a][p][b]->nsems > nsems) nsems = rt->plans[a][p][b]->nsems;
      }
    }
    caps->scratch[b] = (scratch + 4095) & ~(uint64_t)4095;
    caps->nsems[b] = nsems;
  }
out:
  return res;
}

/* Makes this rank's window and its device address. */
static ncclResult_t window_create(struct brd_rt_cuda *rt, rtc_window_t *me) {
  ncclResult_t res = ncclSuccess;
  size_t total = me->stage_off + 2 * me->stage_bytes;
  CHECK(rt->ops->seg_create(total, "cuda-win", &rt->self));
  me->handle = rt->self.handle;
  if (!rt->host_memory) {
    rt->base[rt->rank] = rt->self.ptr;
    return ncclSuccess;
  }
  /* Peers of this process find it registered once the allgather is over. */
  CHECK_GOTO(host_reg_acquire(rt->self.ptr, total, "the rank's channel window"), res, out);
  rt->registered[rt->rank] = 1;
  CUDA_GOTO(cudaHostGetDevicePointer((void **)&rt->base[rt->rank], rt->self.ptr, 0),
            "cudaHostGetDevicePointer of the rank's channel window", res, out);
out:
  return res;
}

/* Imports peer r's window and finds its device address. */
static ncclResult_t window_import(struct brd_rt_cuda *rt, int r) {
  ncclResult_t res = ncclSuccess;
  CHECK(rt->ops->seg_import(&rt->win[r].handle, &rt->peer[r]));
  if (!rt->host_memory) {
    rt->base[r] = rt->peer[r].ptr;
    return ncclSuccess;
  }
  /* A window of this process is the creator's memory, registered before
   * the allgather (this takes one more reference); one of another process
   * is a mapping of our own, registered here. */
  CHECK_GOTO(host_reg_acquire(rt->peer[r].ptr, rt->peer[r].size,
                              "a peer's channel window"), res, out);
  rt->registered[r] = 1;
  CUDA_GOTO(cudaHostGetDevicePointer((void **)&rt->base[r], rt->peer[r].ptr, 0),
            "cudaHostGetDevicePointer of a peer's channel window", res, out);
out:
  return res;
}

/* Step 3: the channel tables of every uploaded plan, both phases. */
static ncclResult_t chans_build(struct brd_rt_cuda *rt) {
  ncclResult_t res = ncclSuccess;
  int me = rt->rank;
  const rtc_window_t *mw = &rt->win[me];
  brd_exec_cuda_chan_t *host = calloc((size_t)rt->nranks, sizeof(*host));
  if (host == NULL) {
    WARN("out of host memory for the channel tables of rank %d", me);
    return ncclSystemError;
  }
  for (int a = 0; a < RTC_ALGOS; a++) {
    for (int p = 0; p < RTC_PROTOS; p++) {
      for (int b = 0; b < rt->nb_count; b++) {
        const brd_ir_plan_t *plan = rt->plans[a][p][b];
        uint32_t nchans = brd_ir_plan_rank(plan, me)->nchans;
        for (uint32_t phase = 0; phase < 2; phase++) {
          for (uint32_t ch = 0; ch < nchans; ch++) {
            int peer = brd_ir_plan_chan(plan, me, (int)ch)->peer;
            const rtc_window_t *w = &rt->win[peer];
            char *pw = rt->base[peer];
            host[ch].peer_scratch = pw + w->scratch_off;
            host[ch].peer_output = pw + w->stage_off + phase * w->stage_bytes;
            host[ch].peer_sems = (uint64_t *)(pw + w->sem_off) + (size_t)me * w->nsems;
            host[ch].sems = (uint64_t *)(rt->base[me] + mw->sem_off) + (size_t)peer * mw->nsems;
          }
          CHECK_GOTO(brd_exec_cuda_chans_create(host, nchans, &rt->dchans[a][p][b][phase]),
                     res, out);
        }
      }
    }
  }
out:
  free(host);
  return res;
}

static void topo_init(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t) {
  memset(t, 0, sizeof(*t));
  t->nranks = comm->nranks;
  t->nnodes = 1;
  t->local_nranks = comm->local_nranks > 0 ? comm->local_nranks : comm->nranks;
  t->ranks_per_device = ranks_per_device(comm);
  t->host_mode = 0;
  t->ll128_ok = 0; /* no LL128 generator */
  /* Rough link figures: GPU peer access (NVLink or PCIe) against host
   * memory across PCIe. Both sides of the choice see the same numbers,
   * which is all the tuner needs to agree across ranks. */
  t->intra_bw = p2p ? 100.0f : 8.0f;
  t->intra_lat = p2p ? 1.0f : 3.0f;
  t->inter_bw = t->intra_bw;
  t->inter_lat = t->intra_lat;
}

/* Creates the runtime; collective over the communicator. */
static ncclResult_t rt_create(struct ncclComm *comm, struct brd_rt_cuda **rt_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  char why[512];
  rtc_caps_t *caps = NULL;
  struct brd_rt_cuda *rt;
  BRD_CALLOC(rt, 1, "the CUDA collective runtime");
  rt->nranks = n;
  rt->rank = me;
  rt->dev = comm->cuda_dev;
  rt->failed = ncclSuccess;
  PTHREAD_CHECK_GOTO(pthread_mutex_init(&rt->poll_lock, NULL), "pthread_mutex_init",
                     res, fail_free);

  for (int r = 0; r < n; r++) {
    if (comm->peers[r].host_hash != comm->peers[me].host_hash) {
      res = brd_api_not_implemented("collectives across hosts in CUDA mode (no "
                                    "network transport yet)");
      goto fail;
    }
  }
  CHECK_GOTO(brd_tune_parse(brd_param_str(BRD_P_ALGO), brd_param_str(BRD_P_PROTO),
                            &rt->mask), res, fail);
  rt->peer = calloc((size_t)n, sizeof(*rt->peer));
  rt->win = calloc((size_t)n, sizeof(*rt->win));
  rt->registered = calloc((size_t)n, sizeof(*rt->registered));
  rt->base = calloc((size_t)n, sizeof(*rt->base));
  caps = calloc((size_t)n, sizeof(*caps));
  if (rt->peer == NULL || rt->win == NULL || rt->registered == NULL ||
      rt->base == NULL || caps == NULL) {
    WARN("out of host memory for the channel tables of rank %d (%d ranks)", me, n);
    res = ncclSystemError;
    goto fail;
  }

  /* 1. Agree on P2P, block limit, staging and scratch. */
  CHECK_GOTO(caps_local(comm, rt, &caps[me], why, sizeof(why)), res, fail);
  if (n > 1)
    CHECK_GOTO(brd_boot_allgather(comm->boot, caps, sizeof(*caps)), res, fail);
  int p2p = 1, nb_max = caps[me].nb_max, blocker = -1;
  uint64_t stage = caps[me].stage_bytes;
  for (int r = 0; r < n; r++) {
    if (!caps[r].p2p_ok && p2p) {
      p2p = 0;
      blocker = r;
    }
    if (caps[r].nb_max < nb_max) nb_max = caps[r].nb_max;
    if (caps[r].stage_bytes < stage) stage = caps[r].stage_bytes;
  }
  if (nb_max < 1) {
    WARN("rank %d: a GPU of this communicator has fewer SMs than ranks sharing "
         "it (%d ranks on one GPU): every rank's kernel needs at least one SM at "
         "the same time; use fewer ranks per GPU", me, ranks_per_device(comm));
    res = ncclInvalidUsage;
    goto fail;
  }
  for (int b = 0; b < RTC_NB_OPTS && rtc_nblocks[b] <= nb_max; b++) rt->nb_count = b + 1;
  uint64_t scratch = 0, nsems = 1;
  for (int r = 0; r < n; r++) {
    if (caps[r].scratch[rt->nb_count - 1] > scratch) scratch = caps[r].scratch[rt->nb_count - 1];
    if (caps[r].nsems[rt->nb_count - 1] > nsems) nsems = caps[r].nsems[rt->nb_count - 1];
  }
  if (!p2p) {
    if (blocker == me)
      WARN("rank %d: GPU peer-to-peer is not usable with %s; every rank of the "
           "communicator exchanges data through host memory instead, which is "
           "much slower", me, why);
    else
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P, "rank %d: rank %d cannot use GPU "
           "peer-to-peer with every peer; channels go through host memory", me,
           blocker);
  }
  rt->host_memory = !p2p;
  rt->ops = p2p ? &brd_transport_p2p
                : all_in_this_process(comm) ? &brd_transport_host : &brd_transport_shm;
  topo_init(comm, p2p, &rt->topo);

  /* 2. Local device resources, then the window exchange. */
  for (int a = 0; a < RTC_ALGOS; a++)
    for (int p = 0; p < RTC_PROTOS; p++)
      for (int b = 0; b < rt->nb_count; b++)
        CHECK_GOTO(brd_exec_cuda_plan_create(rt->plans[a][p][b], &rt->dplans[a][p][b]),
                   res, fail);
  CHECK_GOTO(brd_exec_cuda_status_create(&rt->status), res, fail);
  CUDA_GOTO(cudaEventCreateWithFlags(&rt->done, cudaEventDisableTiming),
            "cudaEventCreateWithFlags", res, fail);
  rt->event_made = 1;

  rtc_window_t *mw = &rt->win[me];
  mw->nsems = nsems;
  mw->sem_off = 0;
  mw->scratch_off = ((uint64_t)n * nsems * sizeof(uint64_t) + 4095) & ~(uint64_t)4095;
  mw->scratch_bytes = scratch;
  mw->stage_off = mw->scratch_off + mw->scratch_bytes;
  mw->stage_bytes = stage;
  CHECK_GOTO(window_create(rt, mw), res, fail);
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P,
       "rank %d: %s window of %zu bytes on device %d (scratch %zu, staging 2x%zu, "
       "%zu semaphores per peer), up to %d blocks per rank", me, rt->ops->name,
       (size_t)(mw->stage_off + 2 * mw->stage_bytes), rt->dev,
       (size_t)mw->scratch_bytes, (size_t)mw->stage_bytes, (size_t)nsems,
       rtc_nblocks[rt->nb_count - 1]);
  if (n > 1) {
    CHECK_GOTO(brd_boot_allgather(comm->boot, rt->win, sizeof(rtc_window_t)), res, fail);
    for (int r = 0; r < n; r++)
      if (r != me) CHECK_GOTO(window_import(rt, r), res, fail);
  }

  /* 3. Channel tables; then every window is mapped everywhere and the
   * descriptor servers may stop. */
  CHECK_GOTO(chans_build(rt), res, fail);
  if (n > 1) CHECK_GOTO(brd_boot_barrier(comm->boot), res, fail);
  rt->ops->seg_seal(&rt->self);
  free(caps);
  *rt_out = rt;
  return ncclSuccess;

fail:
  free(caps);
  rt_free(rt);
  return res;
fail_free:
  free(rt);
  return res;
}

/* One launch of plan (a, p, b) over [off, off + n) of an all-reduce. */
static ncclResult_t run_piece(struct brd_rt_cuda *rt, int a, int p, int b,
                              const brd_call_t *c, int redop, const void *scalar,
                              const void *scalar_dev, size_t off, size_t n) {
  ncclResult_t res = ncclSuccess;
  int me = rt->rank;
  size_t esize = brd_reduce_dtype_size(c->dtype);
  const rtc_window_t *mw = &rt->win[me];
  brd_plan_layout_t layout;
  CHECK(brd_plan_layout_init(rt->plans[a][p][b], n, c->dtype, mw->scratch_bytes, &layout));
  uint64_t epoch = brd_plan_epoch_reserve(
      &rt->epoch_cursor, brd_plan_epoch_span(rt->plans[a][p][b], &layout));
  uint32_t phase = rt->phase;
  rt->phase ^= 1u;

  char *stage = rt->base[me] + mw->stage_off + phase * mw->stage_bytes;
  brd_exec_cuda_args_t args;
  memset(&args, 0, sizeof(args));
  args.plan = rt->dplans[a][p][b];
  args.rank = me;
  args.input = (const char *)c->sendbuff + off * esize;
  args.output = stage;
  args.scratch = rt->base[me] + mw->scratch_off;
  args.scratch_bytes = mw->scratch_bytes;
  args.chans = NULL;
  args.chans_dev = rt->dchans[a][p][b][phase];
  args.count = n;
  args.dtype = (int)c->dtype;
  args.redop = redop;
  args.scalar = scalar;
  args.scalar_dev = scalar_dev;
  args.device_epoch = 0;
  args.epoch = epoch;
  args.phase = phase;
  args.status = rt->status;
  args.timeout_s = 0;
  CHECK(brd_exec_cuda_launch(&args, c->stream));
  CUDA_GOTO(cudaMemcpyAsync((char *)c->recvbuff + off * esize, stage, n * esize,
                            cudaMemcpyDefault, c->stream),
            "cudaMemcpyAsync of the all-reduce result", res, out);
out:
  return res;
}

static ncclResult_t run_allreduce(struct brd_rt_cuda *rt, const brd_call_t *c) {
  ncclResult_t res = ncclSuccess;
  size_t esize = brd_reduce_dtype_size(c->dtype);
  size_t bytes = c->count * esize;
  brd_tune_choice_t choice;
  uint32_t avail = 0;
  for (int a = 0; a < RTC_ALGOS; a++) avail |= BRD_ALGO_BIT(rtc_algos[a]);
  CHECK(brd_tune_select(&rt->topo, BRD_COLL_ALLREDUCE, bytes, avail, &rt->mask, &choice));
  int ai = algo_index(choice.algo), pi = proto_index(choice.proto);
  if (ai < 0 || pi < 0) {
    WARN("AllReduce: %s/%s is not available in CUDA mode yet; choose Ring, Tree, "
         "OneShot or TwoShot with LL or Simple (NCCL_ALGO/NCCL_PROTO)",
         brd_algo_name(choice.algo), brd_proto_name(choice.proto));
    return ncclInvalidUsage;
  }
  /* Blocks grow with the message; the same sizes give the same choice on
   * every rank, as the plans must be the same everywhere. */
  int want = bytes < ((size_t)64 << 10) ? 1 : bytes < ((size_t)1 << 20) ? 2
           : bytes < ((size_t)16 << 20) ? 4 : 8;
  int bi = 0;
  for (int b = 0; b < rt->nb_count; b++)
    if (rtc_nblocks[b] <= want) bi = b;

  int redop = (int)c->op;
  const void *scalar = NULL, *scalar_dev = NULL;
  if (c->premul) {
    redop = BRD_REDOP_PREMULSUM;
    /* premul_scalar is NULL for a host-immediate scalar (copied into the
     * call), else the user's device pointer, read by the kernel. */
    if (c->premul_scalar != NULL)
      scalar_dev = c->premul_scalar;
    else
      scalar = c->premul_value;
  }

  if (rt->done_valid)
    CUDA_GOTO(cudaStreamWaitEvent(c->stream, rt->done, 0),
              "cudaStreamWaitEvent on the rank's previous call", res, out);
  size_t piece = rt->win[rt->rank].stage_bytes / esize;
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = c->count - off < piece ? c->count - off : piece;
    res = run_piece(rt, ai, pi, bi, c, redop, scalar, scalar_dev, off, n);
    if (res != ncclSuccess) {
      /* Sequence numbers moved on this rank only: it can no longer agree
       * with its peers. */
      rt->failed = res;
      goto out;
    }
  }
  CUDA_GOTO(cudaEventRecord(rt->done, c->stream), "cudaEventRecord after a call", res,
            out);
  rt->done_valid = 1;
out:
  return res;
}

static const char *coll_name(brd_coll_t coll) {
  static const char *const names[BRD_COLL_COUNT] = {
      "ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
      "ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend",
      "ncclRecv"};
  return coll < BRD_COLL_COUNT ? names[coll] : "collective";
}

/* Reads the status block; records a failure in comm->async_error. */
static ncclResult_t poll_status(struct ncclComm *comm, struct brd_rt_cuda *rt) {
  pthread_mutex_lock(&rt->poll_lock);
  ncclResult_t r = brd_exec_cuda_poll(rt->status, NULL);
  pthread_mutex_unlock(&rt->poll_lock);
  if (r != ncclSuccess) {
    int expected = ncclSuccess;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)r);
  }
  return r;
}

/* Refuses streams being captured: a captured launch would replay the
 * sequence numbers and staging half it was captured with. */
static ncclResult_t check_not_capturing(const brd_call_t *c) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDA_GOTO(cudaStreamIsCapturing(c->stream, &cs), "cudaStreamIsCapturing", res, out);
  if (cs != cudaStreamCaptureStatusNone) {
    WARN("%s: capturing CUDA-mode collectives into a CUDA graph is not supported "
         "yet (a replay would reuse the captured sequence numbers); run the "
         "collective outside the capture", c->fn);
    res = ncclInvalidUsage;
  }
out:
  return res;
}

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_run(struct ncclComm *comm, const brd_call_t *calls,
                                 int ncalls) {
  ncclResult_t res = ncclSuccess;
  int saved = -1;
  CUDA_GOTO(cudaGetDevice(&saved), "cudaGetDevice", res, fail);
  if (saved != comm->cuda_dev)
    CUDA_GOTO(cudaSetDevice(comm->cuda_dev), "cudaSetDevice to the communicator's GPU",
              res, fail);
  /* Before anything else: creating the runtime must not happen inside a
   * capture either. */
  for (int i = 0; i < ncalls; i++)
    if (calls[i].count > 0) CHECK_GOTO(check_not_capturing(&calls[i]), res, out);
  struct brd_rt_cuda *rt = __atomic_load_n(&comm->rt_cuda, __ATOMIC_ACQUIRE);
  if (rt == NULL) {
    CHECK_GOTO(rt_create(comm, &rt), res, fail);
    __atomic_store_n(&comm->rt_cuda, rt, __ATOMIC_RELEASE);
  }
  if (rt->failed != ncclSuccess) {
    res = rt->failed;
    goto out;
  }
  CHECK_GOTO(poll_status(comm, rt), res, fail);
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0) continue;
    switch (c->coll) {
    case BRD_COLL_ALLREDUCE:
      CHECK_GOTO(run_allreduce(rt, c), res, fail);
      break;
    default:
      res = brd_api_not_implemented(coll_name(c->coll));
      goto out;
    }
  }
  goto out;

fail:
  if (res != ncclInvalidUsage && res != ncclInvalidArgument) {
    int expected = ncclSuccess;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res);
  }
out:
  if (saved >= 0 && saved != comm->cuda_dev && cudaSetDevice(saved) != cudaSuccess)
    (void)cudaGetLastError();
  return res;
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
  if (rt != NULL) brd_exec_cuda_status_abort(rt->status);
}

#else /* !BRAID_CUDA */

/* See launch_cuda.h. */
ncclResult_t brd_launch_cuda_run(struct ncclComm *comm, const brd_call_t *calls,
                                 int ncalls) {
  (void)comm;
  (void)calls;
  (void)ncalls;
  WARN("a CUDA-mode collective in a library built with CUDA=0; set BRAID_DEVICE=host");
  return ncclInvalidUsage;
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
