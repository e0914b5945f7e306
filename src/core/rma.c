/*
 * Braid: windows as the one-sided calls see them, and the one-sided calls.
 *
 * A process-wide table maps each live window to the communicator it was
 * registered on, so the calls that name only a window (the device API's
 * pointer getters) find its communicator and check the handle before
 * anything dereferences it. ncclWinGetUserPtr answers from the
 * registration record (mem.c).
 *
 * ncclPutSignal / ncclSignal / ncclWaitSignal, with the ranks on one host
 * (host mode: threads of one process, or processes; CUDA mode: GPUs with
 * peer access):
 *   - signals: each rank owns counters [numRmaCtx][RMA_SIGNALS][nranks];
 *     counter (ctx, sig, src) counts the signals rank src sent it, and
 *     only src writes it. They live in a segment of the transport the
 *     backend names (rma_mem: HOST or SHM host memory in host mode, P2P
 *     GPU memory in CUDA mode), made, exchanged and mapped by every rank
 *     when the communicator registers its first window (a collective
 *     call, which also makes the runtime's window if no collective has),
 *     and freed with its last.
 *   - every call is a plan (algos/rma.c: put, signal, wait between two
 *     ranks, verified once per pair of ranks as brd_plan_verify_p2p) of
 *     which this rank runs its part through the backend (brd_launch_rma):
 *     the host executor, complete on return, or the CUDA executor, on the
 *     call's stream. The put writes the peer's window (mapped here by the
 *     registration: across processes the window must be ncclMemAlloc
 *     memory, which the registration shares), then the signal stores the
 *     new count with release order, so a waiter that sees it (acquire)
 *     sees the data. A wait waits for consumed + opCnt, one launch per
 *     descriptor. Who counts (signals sent per (peer, ctx, sig), consumed
 *     per (src, ctx, sig)): in host mode this file, passing explicit
 *     epochs; in CUDA mode the kernels, in device cursors the backend
 *     keeps (backend.h brd_backend_rma_t), so the calls may be captured
 *     into a CUDA graph and every replay signals and waits afresh.
 *     BRAID_TIMEOUT bounds each wait (ncclRemoteError; host mode also
 *     names the peer, signal and counts) and the abort flag is honoured.
 *   The calls are refused inside a group (they are not deferred to its
 *   end).
 * Across hosts they check their arguments and return ncclInvalidUsage:
 * not implemented yet.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/param.h"
#include "base/time.h"
#include "core/api.h"
#include "core/bootstrap.h"
#include "core/backend.h"
#include "core/comm.h"
#include "core/group.h"
#include "core/launch.h"
#include "core/rma.h"
#include "algos/algos.h"
#include "plan/verify.h"

#define RMA_SIGNALS BRD_RMA_SIGNALS

struct win_entry {
  ncclWindow_t win;
  struct ncclComm *comm;   /* borrowed: the window dies before its comm */
  struct win_entry *next;
};

/* One communicator's one-sided state. The counters live in the runtime's
 * windows (window.h: rma_off), looked up at every call (a suspend may
 * free the runtime and a resume make another, whose counters start at 0:
 * gen tells). */
struct rma_comm {
  struct ncclComm *comm;   /* borrowed */
  int nwin;                /* live windows; freed at 0 */
  int nctx;
  uint64_t gen;            /* the runtime the counts below belong to */
  uint64_t *sig;           /* this call's view: [nctx][RMA_SIGNALS][nranks] */
  uint64_t **peer_sig;     /* owned array: [nranks] each rank's counters, as
                              the executor addresses them (this call's view) */
  uint64_t *consumed;      /* owned: same shape, this rank's waits */
  uint64_t *sent;          /* owned: [nctx][RMA_SIGNALS][nranks] signals this
                              rank sent each peer */
  brd_ir_plan_t **put;     /* owned: [2 * nranks] verified plans me -> peer,
                              without data [peer], with data [nranks + peer] */
  brd_ir_plan_t **wait;    /* owned: [nranks] verified plans src -> me */
  struct rma_comm *next;
};

static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static struct win_entry *win_list;   /* owned, under win_lock */
static struct rma_comm *rma_list;    /* owned, under win_lock */

/* See rma.h. */
int brd_rma_ctx_count(const struct ncclComm *comm) {
  int n = comm->config.numRmaCtx > 0 ? comm->config.numRmaCtx : 1;
  return n > BRD_RMA_MAX_CTX ? BRD_RMA_MAX_CTX : n;
}

/* One-sided calls need a peer: communicators of one rank have none. */
static int rma_supported(const struct ncclComm *comm) { return comm->nranks > 1; }

static struct rma_comm *rma_find(const struct ncclComm *comm) {
  for (struct rma_comm *c = rma_list; c != NULL; c = c->next)
    if (c->comm == comm) return c;
  return NULL;
}

static void rma_free(struct rma_comm *c) {
  if (c == NULL) return;
  for (int p = 0; c->put != NULL && p < 2 * c->comm->nranks; p++) brd_plan_destroy(c->put[p]);
  for (int p = 0; c->wait != NULL && p < c->comm->nranks; p++) brd_plan_destroy(c->wait[p]);
  free(c->put);
  free(c->wait);
  free(c->sent);
  free(c->consumed);
  free(c->peer_sig);
  free(c);
}

/* The one-sided state of comm, made at its first window: collective
 * (every rank registers the window), so the runtime's windows, which hold
 * the counters, are made here if no collective made them yet. */
static ncclResult_t rma_create(struct ncclComm *comm, struct rma_comm **out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks;
  struct rma_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) goto oom;
  c->comm = comm;
  c->nctx = brd_rma_ctx_count(comm);
  size_t cells = (size_t)c->nctx * RMA_SIGNALS * (size_t)n;
  c->consumed = calloc(cells, sizeof(*c->consumed));
  c->sent = calloc(cells, sizeof(*c->sent));
  c->peer_sig = calloc((size_t)n, sizeof(*c->peer_sig));
  c->put = calloc(2 * (size_t)n, sizeof(*c->put));
  c->wait = calloc((size_t)n, sizeof(*c->wait));
  if (c->consumed == NULL || c->sent == NULL || c->peer_sig == NULL || c->put == NULL ||
      c->wait == NULL)
    goto oom;
  CHECK_GOTO(brd_launch_connect(comm, "ncclCommWindowRegister"), res, fail);
  *out = c;
  return ncclSuccess;
oom:
  WARN("ncclCommWindowRegister : out of host memory for the one-sided state of rank %d",
       comm->rank);
  res = ncclSystemError;
fail:
  rma_free(c);
  return res;
}

/* See rma.h. */
ncclResult_t brd_rma_window_track(struct ncclComm *comm, ncclWindow_t win) {
  struct win_entry *e = malloc(sizeof(*e));
  struct rma_comm *fresh = NULL;
  if (e == NULL) {
    WARN("ncclCommWindowRegister : out of host memory recording window %p", (void *)win);
    return ncclSystemError;
  }
  if (rma_supported(comm)) {
    pthread_mutex_lock(&win_lock);
    int first = rma_find(comm) == NULL;
    pthread_mutex_unlock(&win_lock);
    /* Every rank sees its first window at the same registration. */
    if (first) {
      ncclResult_t res = rma_create(comm, &fresh);
      if (res != ncclSuccess) {
        free(e);
        return res;
      }
    }
  }
  e->win = win;
  e->comm = comm;
  pthread_mutex_lock(&win_lock);
  e->next = win_list;
  win_list = e;
  if (fresh != NULL) {
    fresh->next = rma_list;
    rma_list = fresh;
  }
  struct rma_comm *c = rma_find(comm);
  if (c != NULL) c->nwin++;
  pthread_mutex_unlock(&win_lock);
  return ncclSuccess;
}

/* See rma.h. */
void brd_rma_window_untrack(ncclWindow_t win) {
  struct win_entry *gone = NULL;
  struct rma_comm *dead = NULL;
  pthread_mutex_lock(&win_lock);
  for (struct win_entry **pp = &win_list; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->win == win) {
      gone = *pp;
      *pp = gone->next;
      break;
    }
  }
  if (gone != NULL) {
    for (struct rma_comm **cp = &rma_list; *cp != NULL; cp = &(*cp)->next) {
      if ((*cp)->comm != gone->comm) continue;
      if (--(*cp)->nwin == 0) {
        dead = *cp;
        *cp = dead->next;
      }
      break;
    }
  }
  pthread_mutex_unlock(&win_lock);
  free(gone);
  rma_free(dead);
}

/* See rma.h. */
ncclResult_t brd_rma_window_comm(ncclWindow_t win, const char *fn,
                                 struct ncclComm **comm_out) {
  struct ncclComm *comm = NULL;
  if (win == NULL) {
    WARN("%s : window argument is NULL", fn);
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&win_lock);
  for (struct win_entry *e = win_list; e != NULL; e = e->next)
    if (e->win == win) {
      comm = e->comm;
      break;
    }
  pthread_mutex_unlock(&win_lock);
  if (comm == NULL) {
    WARN("%s : window %p is not registered (ncclCommWindowRegister returns "
         "windows; this one was deregistered already, or never registered)", fn,
         (void *)win);
    return ncclInvalidArgument;
  }
  *comm_out = comm;
  return ncclSuccess;
}

/* The buffer this rank registered as win on comm. Any thread; takes the
 * registration lock only. */
BRD_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win,
        void **outUserPtr)
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr) {
  static const char fn[] = "ncclWinGetUserPtr";
  brd_window_view_t v;
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(win, fn);
  ARG_NOT_NULL(outUserPtr, fn);
  CHECK(brd_mem_window_view(comm, win, -1, fn, &v));
  *outUserPtr = v.user_ptr;
  return ncclSuccess;
}

/* Checks shared by the three one-sided calls. */
static ncclResult_t rma_check_peer(ncclComm_t comm, int peer, int sig, int ctx,
                                   unsigned int flags, const char *fn) {
  if (peer < 0 || peer >= comm->nranks) {
    WARN("%s : peer %d is not a rank of this communicator (0 to %d)", fn, peer,
         comm->nranks - 1);
    return ncclInvalidArgument;
  }
  if (ctx < 0 || sig < 0 || sig >= RMA_SIGNALS) {
    WARN("%s : signal %d of context %d: signals are 0 to %d, contexts from 0", fn, sig,
         ctx, RMA_SIGNALS - 1);
    return ncclInvalidArgument;
  }
  if (flags != 0) {
    WARN("%s : flags 0x%x: no flags are defined; pass 0", fn, flags);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The communicator's signals, or why there are none: ncclInvalidUsage. */
static ncclResult_t rma_get(ncclComm_t comm, const char *fn, struct rma_comm **out) {
  struct rma_comm *c;
  if (!rma_supported(comm)) {
    WARN("%s : a communicator of one rank has no peer to put to, signal or wait for", fn);
    return ncclInvalidArgument;
  }
  if (brd_group_depth() > 0) {
    WARN("%s : called inside ncclGroupStart/ncclGroupEnd; braid runs one-sided calls "
         "at once, so call it outside any group", fn);
    return ncclInvalidUsage;
  }
  pthread_mutex_lock(&win_lock);
  c = rma_find(comm);
  pthread_mutex_unlock(&win_lock);
  if (c == NULL) {
    WARN("%s : rank %d: the communicator has no window; signals exist once every rank "
         "has registered one (ncclCommWindowRegister)", fn, comm->rank);
    return ncclInvalidUsage;
  }
  /* The counters, where the runtime's windows are now. */
  uint64_t words = 0, gen = 0;
  CHECK(brd_launch_rma_words(comm, fn, &c->sig, c->peer_sig, &words, &gen));
  if (words < (uint64_t)c->nctx * RMA_SIGNALS * (uint64_t)comm->nranks) {
    WARN("%s : rank %d: the window holds %llu one-sided counters, fewer than numRmaCtx "
         "%d needs", fn, comm->rank, (unsigned long long)words, c->nctx);
    return ncclInternalError;
  }
  if (gen != c->gen) {
    /* A new runtime (resumed): its counters start at zero, and so do ours. */
    size_t cells = (size_t)c->nctx * RMA_SIGNALS * (size_t)comm->nranks;
    if (c->gen != 0) {
      memset(c->sent, 0, cells * sizeof(*c->sent));
      memset(c->consumed, 0, cells * sizeof(*c->consumed));
    }
    c->gen = gen;
  }
  *out = c;
  return ncclSuccess;
}

static size_t sig_cell(const struct rma_comm *c, int ctx, int sig, int src) {
  return ((size_t)ctx * RMA_SIGNALS + (size_t)sig) * (size_t)c->comm->nranks + (size_t)src;
}

static ncclResult_t rma_check_ctx(const struct rma_comm *c, int ctx, const char *fn) {
  if (ctx >= c->nctx) {
    WARN("%s : context %d, but the communicator has %d (ncclConfig_t.numRmaCtx)", fn, ctx,
         c->nctx);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The verified one-sided plan src -> dst (algos/rma.c), made at its first
 * use and kept in *slot. */
static ncclResult_t rma_plan(struct rma_comm *c, int src, int dst, int with_data,
                             brd_ir_plan_t **slot, const char *fn) {
  ncclResult_t res = ncclSuccess;
  int n = c->comm->nranks;
  brd_ir_plan_t *plan = NULL;
  brd_verify_p2p_t *p2p = NULL;
  static const uint32_t one = 1;
  brd_verify_p2p_seg_t seg = {src, 0, 1};
  if (*slot != NULL) return ncclSuccess;
  CHECK(brd_algos_rma(n, src, dst, with_data, &plan));
  p2p = calloc((size_t)n, sizeof(*p2p));
  if (p2p == NULL) {
    WARN("%s : out of host memory checking a one-sided plan", fn);
    res = ncclSystemError;
    goto out;
  }
  if (with_data) {
    p2p[src].nin = 1;
    p2p[src].in_chunks = &one;
    p2p[dst].nout = 1;
    p2p[dst].out = &seg;
  }
  CHECK_GOTO(brd_plan_verify_p2p(plan, p2p, NULL), res, out);
  *slot = plan;
  plan = NULL;
out:
  free(p2p);
  brd_plan_destroy(plan);
  return res;
}

/* Executor arguments for this rank's part of a one-sided plan: one
 * channel, count elements of dtype (at least one: a launch of 0 elements
 * runs no op), one sequence number from chan_epoch. The chunk holds the
 * whole message: the scratch size says so (no op touches scratch). */
static void rma_args(struct rma_comm *c, const brd_ir_plan_t *plan, const brd_exec_chan_t *ch,
                     const uint64_t *chan_epoch, const brd_exec_seg_t *in, size_t count,
                     int dtype, size_t bytes, brd_exec_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->plan = plan;
  a->rank = c->comm->rank;
  a->scratch = c->sig; /* never touched */
  a->scratch_bytes = bytes < 64 ? 64 : (bytes + 15) / 16 * 16;
  a->chans = ch;
  a->count = count;
  a->dtype = dtype;
  a->redop = ncclSum;
  a->epoch = *chan_epoch;
  a->chan_epoch = chan_epoch;
  a->abort_flag = &c->comm->abort_flag;
  if (in != NULL) {
    a->in_segs = in;
    a->n_in_segs = 1;
  }
}

/* Signal (ctx, sig) to peer from this rank, after `bytes` of localbuff
 * (count elements of dtype) into the peer's window at dst when bytes > 0. */
static ncclResult_t rma_put(struct rma_comm *c, int peer, int ctx, int sig, const void *localbuff,
                            size_t count, int dtype, size_t bytes, char *dst,
                            cudaStream_t stream, const char *fn) {
  int n = c->comm->nranks, me = c->comm->rank, data = bytes > 0;
  if (peer == me) {
    WARN("%s : rank %d names itself as the peer; braid's one-sided calls reach other "
         "ranks only (copy locally instead)", fn, me);
    return ncclInvalidArgument;
  }
  brd_ir_plan_t **slot = &c->put[(size_t)data * (size_t)n + (size_t)peer];
  CHECK(rma_plan(c, me, peer, data, slot, fn));
  size_t cell = sig_cell(c, ctx, sig, peer);
  uint64_t epoch = c->sent[cell];
  brd_exec_chan_t ch;
  memset(&ch, 0, sizeof(ch));
  ch.peer_output = dst;
  ch.peer_sems = (_Atomic uint64_t *)&c->peer_sig[peer][sig_cell(c, ctx, sig, me)];
  brd_exec_seg_t in = {(void *)localbuff, count};
  brd_exec_args_t a;
  if (data) rma_args(c, *slot, &ch, &epoch, &in, count, dtype, bytes, &a);
  else rma_args(c, *slot, &ch, &epoch, NULL, 1, ncclUint8, 1, &a);
  brd_backend_rma_t r = {&a, sig_cell(c, ctx, sig, 0), 1, 0};
  CHECK(brd_launch_rma(c->comm, &r, stream, fn));
  c->sent[cell] = epoch + 1;
  return ncclSuccess;
}

/* See the top of this file. Host mode: complete on return; CUDA mode:
 * enqueued on stream. */
BRD_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count,
        ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset,
        int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset,
                            int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                            cudaStream_t stream) {
  static const char fn[] = "ncclPutSignal";
  static const size_t type_bytes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  brd_window_view_t v;
  struct rma_comm *c;
  size_t bytes;
  CHECK(brd_comm_check(comm, fn));
  CHECK(rma_check_peer(comm, peer, sigIdx, ctx, flags, fn));
  ARG_NOT_NULL(peerWin, fn);
  if (count > 0) ARG_NOT_NULL(localbuff, fn);
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("%s : invalid datatype %d", fn, (int)datatype);
    return ncclInvalidArgument;
  }
  if (__builtin_mul_overflow(count, type_bytes[datatype], &bytes)) {
    WARN("%s : %zu elements do not fit in memory", fn, count);
    return ncclInvalidArgument;
  }
  CHECK(brd_mem_window_view(comm, peerWin, peer, fn, &v));
  CHECK(rma_get(comm, fn, &c));
  CHECK(rma_check_ctx(c, ctx, fn));
  if (bytes > 0) {
    if (v.peer_base == NULL) {
      WARN("%s : rank %d's part of window %p is not mapped in rank %d's process; ranks in "
           "different processes share a window only when every rank's buffer comes from "
           "ncclMemAlloc", fn, peer, (void *)peerWin, comm->rank);
      return ncclInvalidUsage;
    }
    if (peerWinOffset > v.peer_size || bytes > v.peer_size - peerWinOffset) {
      WARN("%s : %zu bytes at offset %zu do not fit rank %d's part of window %p (%zu "
           "bytes)", fn, bytes, peerWinOffset, peer, (void *)peerWin, v.peer_size);
      return ncclInvalidArgument;
    }
  }
  return rma_put(c, peer, ctx, sigIdx, localbuff, count, datatype, bytes,
                 bytes > 0 ? v.peer_base + peerWinOffset : NULL, stream, fn);
}

BRD_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                         ncclComm_t comm, cudaStream_t stream) {
  static const char fn[] = "ncclSignal";
  struct rma_comm *c;
  CHECK(brd_comm_check(comm, fn));
  CHECK(rma_check_peer(comm, peer, sigIdx, ctx, flags, fn));
  CHECK(rma_get(comm, fn, &c));
  CHECK(rma_check_ctx(c, ctx, fn));
  return rma_put(c, peer, ctx, sigIdx, NULL, 0, ncclUint8, 0, NULL, stream, fn);
}

/* See the top of this file. Blocks until every descriptor is satisfied,
 * BRAID_TIMEOUT seconds at most, or the communicator is aborted. */
BRD_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs,
                             ncclComm_t comm, cudaStream_t stream) {
  static const char fn[] = "ncclWaitSignal";
  struct rma_comm *c;
  CHECK(brd_comm_check(comm, fn));
  if (nDesc < 0) {
    WARN("%s : nDesc %d is negative", fn, nDesc);
    return ncclInvalidArgument;
  }
  if (nDesc > 0) ARG_NOT_NULL(signalDescs, fn);
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t *d = &signalDescs[i];
    CHECK(rma_check_peer(comm, d->peer, d->sigIdx, d->ctx, 0, fn));
    if (d->opCnt < 0) {
      WARN("%s : descriptor %d waits for %d signals; the count must be zero or more",
           fn, i, d->opCnt);
      return ncclInvalidArgument;
    }
  }
  CHECK(rma_get(comm, fn, &c));
  for (int i = 0; i < nDesc; i++) {
    CHECK(rma_check_ctx(c, signalDescs[i].ctx, fn));
    if (signalDescs[i].peer == comm->rank) {
      WARN("%s : descriptor %d waits for signals from rank %d itself; a rank signals "
           "its peers only", fn, i, comm->rank);
      return ncclInvalidArgument;
    }
  }
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t *d = &signalDescs[i];
    if (d->opCnt == 0) continue;
    size_t cell = sig_cell(c, d->ctx, d->sigIdx, d->peer);
    uint64_t want = c->consumed[cell] + (uint64_t)d->opCnt;
    uint64_t epoch = want - 1; /* the plan's WAIT is for epoch + 1 */
    CHECK(rma_plan(c, d->peer, comm->rank, 1, &c->wait[d->peer], fn));
    brd_exec_chan_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.sems = (_Atomic uint64_t *)&c->sig[cell];
    brd_exec_args_t a;
    rma_args(c, c->wait[d->peer], &ch, &epoch, NULL, 1, ncclUint8, 1, &a);
    brd_backend_rma_t r = {&a, sig_cell(c, d->ctx, d->sigIdx, 0), (uint64_t)d->opCnt, 1};
    ncclResult_t res = brd_launch_rma(comm, &r, stream, fn);
    if (res == ncclRemoteError && brd_backend_choose(comm)->rma_mem == BRD_TRANSPORT_MEM_HOST) {
      /* The counter is host memory: say what the wait saw, in the call's terms. */
      WARN("%s : rank %d waited %lld s for signal %d (context %d) from rank %d: "
           "expected %llu in all, seen %llu; does rank %d put or signal that many?",
           fn, comm->rank, (long long)brd_param_int(BRD_P_BRAID_TIMEOUT), d->sigIdx,
           d->ctx, d->peer, (unsigned long long)want,
           (unsigned long long)__atomic_load_n(&c->sig[cell], __ATOMIC_ACQUIRE), d->peer);
    }
    if (res != ncclSuccess) return res;
    c->consumed[cell] = want;
  }
  return ncclSuccess;
}
