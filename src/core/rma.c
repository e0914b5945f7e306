/*
 * Braid: windows as the one-sided calls see them.
 *
 * A process-wide table maps each live window to the communicator it was
 * registered on, so the calls that name only a window (the device API's
 * pointer getters) find its communicator and check the handle before
 * anything dereferences it. ncclWinGetUserPtr answers from the
 * registration record (mem.c).
 *
 * ncclPutSignal, ncclSignal and ncclWaitSignal check their arguments as
 * NCCL does and then report that they are not implemented yet: the one-
 * sided put/signal/wait plans they need do not exist in the IR yet.
 */
#include <pthread.h>
#include <stdlib.h>

#include "base/check.h"
#include "core/api.h"
#include "core/comm.h"
#include "core/rma.h"

struct win_entry {
  ncclWindow_t win;
  struct ncclComm *comm;   /* borrowed: the window dies before its comm */
  struct win_entry *next;
};

static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static struct win_entry *win_list;   /* owned, under win_lock */

/* See rma.h. */
ncclResult_t brd_rma_window_track(struct ncclComm *comm, ncclWindow_t win) {
  struct win_entry *e = malloc(sizeof(*e));
  if (e == NULL) {
    WARN("ncclCommWindowRegister : out of host memory recording window %p", (void *)win);
    return ncclSystemError;
  }
  e->win = win;
  e->comm = comm;
  pthread_mutex_lock(&win_lock);
  e->next = win_list;
  win_list = e;
  pthread_mutex_unlock(&win_lock);
  return ncclSuccess;
}

/* See rma.h. */
void brd_rma_window_untrack(ncclWindow_t win) {
  struct win_entry *gone = NULL;
  pthread_mutex_lock(&win_lock);
  for (struct win_entry **pp = &win_list; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->win == win) {
      gone = *pp;
      *pp = gone->next;
      break;
    }
  }
  pthread_mutex_unlock(&win_lock);
  free(gone);
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
static ncclResult_t rma_check_peer(ncclComm_t comm, int peer, int ctx,
                                   unsigned int flags, const char *fn) {
  CHECK(brd_comm_check(comm, fn));
  if (peer < 0 || peer >= comm->nranks) {
    WARN("%s : peer %d is not a rank of this communicator (0 to %d)", fn, peer,
         comm->nranks - 1);
    return ncclInvalidArgument;
  }
  if (ctx < 0) {
    WARN("%s : ctx %d is negative; contexts are numbered from 0", fn, ctx);
    return ncclInvalidArgument;
  }
  if (flags != 0) {
    WARN("%s : flags 0x%x: no flags are defined; pass 0", fn, flags);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t rma_not_yet(const char *fn) {
  WARN("%s is not implemented yet in braid %s: one-sided put/signal/wait on "
       "windows is planned; use ncclSend/ncclRecv meanwhile", fn, BRAID_VERSION);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count,
        ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset,
        int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset,
                            int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                            cudaStream_t stream) {
  static const char fn[] = "ncclPutSignal";
  brd_window_view_t v;
  (void)sigIdx;
  (void)stream;
  (void)peerWinOffset;
  CHECK(rma_check_peer(comm, peer, ctx, flags, fn));
  ARG_NOT_NULL(peerWin, fn);
  if (count > 0) ARG_NOT_NULL(localbuff, fn);
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("%s : invalid datatype %d", fn, (int)datatype);
    return ncclInvalidArgument;
  }
  CHECK(brd_mem_window_view(comm, peerWin, -1, fn, &v));
  return rma_not_yet(fn);
}

BRD_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                         ncclComm_t comm, cudaStream_t stream) {
  (void)sigIdx;
  (void)stream;
  CHECK(rma_check_peer(comm, peer, ctx, flags, "ncclSignal"));
  return rma_not_yet("ncclSignal");
}

BRD_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs,
                             ncclComm_t comm, cudaStream_t stream) {
  static const char fn[] = "ncclWaitSignal";
  (void)stream;
  CHECK(brd_comm_check(comm, fn));
  if (nDesc < 0) {
    WARN("%s : nDesc %d is negative", fn, nDesc);
    return ncclInvalidArgument;
  }
  if (nDesc > 0) ARG_NOT_NULL(signalDescs, fn);
  for (int i = 0; i < nDesc; i++) {
    CHECK(rma_check_peer(comm, signalDescs[i].peer, signalDescs[i].ctx, 0, fn));
    if (signalDescs[i].opCnt < 0) {
      WARN("%s : descriptor %d waits for %d signals; the count must be zero or more",
           fn, i, signalDescs[i].opCnt);
      return ncclInvalidArgument;
    }
  }
  return rma_not_yet(fn);
}
