/*
 * Braid: windows as the one-sided calls see them, and the one-sided calls.
 *
 * A process-wide table maps each live window to the communicator it was
 * registered on, so the calls that name only a window (the device API's
 * pointer getters) find its communicator and check the handle before
 * anything dereferences it. ncclWinGetUserPtr answers from the
 * registration record (mem.c).
 *
 * ncclPutSignal / ncclSignal / ncclWaitSignal, host mode with the ranks on
 * one host (BRAID_DEVICE=host; threads of one process, or processes):
 *   - signals: each rank owns counters [numRmaCtx][RMA_SIGNALS][nranks];
 *     counter (ctx, sig, src) counts the signals rank src sent it. They
 *     live in a segment of the transport that connects the ranks' host
 *     memory (HOST for threads of one process, SHM for processes), made,
 *     exchanged and mapped by every rank when the communicator registers
 *     its first window (a collective call), and freed with its last.
 *   - put: the data is copied into the peer's window (mapped here by the
 *     registration: across processes the window must be ncclMemAlloc
 *     memory, which the registration shares), then the counter is raised
 *     with release order, so a waiter that sees the signal (acquire) sees
 *     the data.
 *   - wait: until each descriptor's counter reaches what this rank has
 *     consumed plus opCnt, then those signals are consumed; BRAID_TIMEOUT
 *     seconds at most (ncclRemoteError naming rank, peer, signal, count
 *     expected and seen) and the abort flag is honoured.
 *   The calls complete before they return, as host mode's collectives do,
 *   and are refused inside a group (they are not deferred to its end).
 * Elsewhere (CUDA mode, ranks on several hosts) they check their
 * arguments and return ncclInvalidUsage: not implemented yet.
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
#include "core/rma.h"
#include "transport/transport.h"

/* Signal indices per context. */
#define RMA_SIGNALS 64
/* Contexts at most (numRmaCtx beyond this is capped). */
#define RMA_MAX_CTX 16

struct win_entry {
  ncclWindow_t win;
  struct ncclComm *comm;   /* borrowed: the window dies before its comm */
  struct win_entry *next;
};

/* One communicator's signals (host mode, ranks in this process). */
struct rma_comm {
  struct ncclComm *comm;   /* borrowed */
  int nwin;                /* live windows; freed at 0 */
  int nctx;
  const brd_transport_ops_t *t; /* HOST or SHM: makes and maps the segments */
  brd_seg_t self;          /* owned: this rank's counters, raised by peers */
  brd_seg_t *peer;         /* owned: [nranks] the peers' segments, mapped */
  uint64_t *sig;           /* self.ptr: [nctx][RMA_SIGNALS][nranks] */
  uint64_t *consumed;      /* owned: same shape, this rank's waits */
  uint64_t **peer_sig;     /* owned array: [nranks] each rank's sig, as
                              mapped here (peer[p].ptr, self for this rank) */
  struct rma_comm *next;
};

static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static struct win_entry *win_list;   /* owned, under win_lock */
static struct rma_comm *rma_list;    /* owned, under win_lock */

/* The transport that connects the ranks' host memory, or NULL (CUDA mode,
 * ranks on several hosts). */
static const brd_transport_ops_t *rma_transport(const struct ncclComm *comm) {
  if (!brd_backend_choose(comm)->host_rma) return NULL;
  return brd_transport_choose(comm->peers, comm->nranks, comm->rank, BRD_TRANSPORT_MEM_HOST,
                              NULL, 0);
}

static int rma_supported(const struct ncclComm *comm) { return rma_transport(comm) != NULL; }

static struct rma_comm *rma_find(const struct ncclComm *comm) {
  for (struct rma_comm *c = rma_list; c != NULL; c = c->next)
    if (c->comm == comm) return c;
  return NULL;
}

static void rma_free(struct rma_comm *c) {
  if (c == NULL) return;
  if (c->peer != NULL && c->t != NULL)
    for (int p = 0; p < c->comm->nranks; p++) c->t->seg_close(&c->peer[p]);
  if (c->t != NULL) c->t->seg_close(&c->self);
  free(c->peer);
  free(c->consumed);
  free(c->peer_sig);
  free(c);
}

/* The signal counters of comm, made at its first window: collective (every
 * rank registers the window), so the addresses are exchanged here. */
static ncclResult_t rma_create(struct ncclComm *comm, struct rma_comm **out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank, ok = 1;
  struct rma_comm *c = calloc(1, sizeof(*c));
  brd_seg_handle_t *handles = calloc((size_t)n, sizeof(*handles));
  int *oks = calloc((size_t)n, sizeof(*oks));
  if (c == NULL || handles == NULL || oks == NULL) goto oom;
  c->comm = comm;
  c->t = rma_transport(comm);
  c->nctx = comm->config.numRmaCtx > 0 ? comm->config.numRmaCtx : 1;
  if (c->nctx > RMA_MAX_CTX) c->nctx = RMA_MAX_CTX;
  size_t cells = (size_t)c->nctx * RMA_SIGNALS * (size_t)n;
  c->consumed = calloc(cells, sizeof(*c->consumed));
  c->peer_sig = calloc((size_t)n, sizeof(*c->peer_sig));
  c->peer = calloc((size_t)n, sizeof(*c->peer));
  if (c->consumed == NULL || c->peer_sig == NULL || c->peer == NULL) goto oom;
  /* A rank that fails to make or map a segment still takes part in both
   * exchanges, so no peer waits for it; all fail together. */
  if (c->t->seg_create(cells * sizeof(uint64_t), "rma-sig", &c->self) == ncclSuccess) {
    memset(c->self.ptr, 0, cells * sizeof(uint64_t));
    handles[me] = c->self.handle;
  } else {
    ok = 0;
  }
  oks[me] = ok;
  CHECK_GOTO(brd_boot_allgather(comm->boot, handles, sizeof(*handles)), res, fail);
  CHECK_GOTO(brd_boot_allgather(comm->boot, oks, sizeof(*oks)), res, fail);
  for (int p = 0; p < n; p++) ok &= oks[p];
  for (int p = 0; p < n && ok; p++) {
    if (p == me) {
      c->peer_sig[p] = c->self.ptr;
    } else if (c->t->seg_import(&handles[p], &c->peer[p]) == ncclSuccess) {
      c->peer_sig[p] = c->peer[p].ptr;
    } else {
      ok = 0;
    }
  }
  /* Every rank has mapped every segment (or failed) before names go. */
  oks[me] = ok;
  CHECK_GOTO(brd_boot_allgather(comm->boot, oks, sizeof(*oks)), res, fail);
  for (int p = 0; p < n; p++) ok &= oks[p];
  if (!ok) {
    WARN("ncclCommWindowRegister : rank %d: the one-sided signals could not be shared "
         "between the ranks (%s transport; see the WARN above, or a peer's)", me,
         c->t->name);
    res = ncclSystemError;
    goto fail;
  }
  c->t->seg_seal(&c->self);
  c->sig = c->self.ptr;
  free(handles);
  free(oks);
  *out = c;
  return ncclSuccess;
oom:
  WARN("ncclCommWindowRegister : out of host memory for the signals of rank %d",
       comm->rank);
  res = ncclSystemError;
fail:
  free(handles);
  free(oks);
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
    WARN("%s is not implemented yet in braid %s for this communicator: one-sided "
         "put/signal/wait runs in host mode (BRAID_DEVICE=host) with the ranks on one "
         "host, not yet in CUDA mode or across hosts; use ncclSend/ncclRecv meanwhile",
         fn, BRAID_VERSION);
    return ncclInvalidUsage;
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

/* Raises signal (ctx, sig) at peer, from this rank; release order. */
static void rma_raise(struct rma_comm *c, int peer, int ctx, int sig) {
  __atomic_fetch_add(&c->peer_sig[peer][sig_cell(c, ctx, sig, c->comm->rank)], 1,
                     __ATOMIC_RELEASE);
}

/* See the top of this file. Host mode: complete on return. */
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
  (void)stream;
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
    memcpy(v.peer_base + peerWinOffset, localbuff, bytes);
  }
  rma_raise(c, peer, ctx, sigIdx);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                         ncclComm_t comm, cudaStream_t stream) {
  static const char fn[] = "ncclSignal";
  struct rma_comm *c;
  (void)stream;
  CHECK(brd_comm_check(comm, fn));
  CHECK(rma_check_peer(comm, peer, sigIdx, ctx, flags, fn));
  CHECK(rma_get(comm, fn, &c));
  CHECK(rma_check_ctx(c, ctx, fn));
  rma_raise(c, peer, ctx, sigIdx);
  return ncclSuccess;
}

/* See the top of this file. Blocks until every descriptor is satisfied,
 * BRAID_TIMEOUT seconds at most, or the communicator is aborted. */
BRD_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs,
                             ncclComm_t comm, cudaStream_t stream) {
  static const char fn[] = "ncclWaitSignal";
  struct rma_comm *c;
  (void)stream;
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
  for (int i = 0; i < nDesc; i++) CHECK(rma_check_ctx(c, signalDescs[i].ctx, fn));
  int64_t deadline = brd_time_now_ns() + brd_param_int(BRD_P_BRAID_TIMEOUT) * 1000000000ll;
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t *d = &signalDescs[i];
    size_t cell = sig_cell(c, d->ctx, d->sigIdx, d->peer);
    uint64_t want = c->consumed[cell] + (uint64_t)d->opCnt, seen;
    struct timespec nap = {0, 20000};
    for (int spins = 0;; spins++) {
      seen = __atomic_load_n(&c->sig[cell], __ATOMIC_ACQUIRE);
      if (seen >= want) break;
      if (atomic_load(&comm->abort_flag)) {
        WARN("%s : rank %d: the communicator was aborted while waiting for signal %d "
             "(context %d) from rank %d", fn, comm->rank, d->sigIdx, d->ctx, d->peer);
        return ncclSystemError;
      }
      if ((spins & 63) == 63) {
        if (brd_time_now_ns() > deadline) {
          WARN("%s : rank %d waited %lld s for signal %d (context %d) from rank %d: "
               "expected %llu in all, seen %llu; does rank %d put or signal that many?",
               fn, comm->rank, (long long)brd_param_int(BRD_P_BRAID_TIMEOUT), d->sigIdx,
               d->ctx, d->peer, (unsigned long long)want, (unsigned long long)seen,
               d->peer);
          return ncclRemoteError;
        }
        nanosleep(&nap, NULL);
      }
    }
    c->consumed[cell] = want;
  }
  return ncclSuccess;
}
