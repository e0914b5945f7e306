/*
 * Braid: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.
 *
 * Depth and the queue of collected calls are per thread. Only the outermost
 * ncclGroupEnd acts: it waits for communicators being initialised in the
 * group, then runs every collected call as one launch per communicator.
 * Launches of different communicators run concurrently (one worker thread
 * each), because one thread may drive every rank of a clique
 * (ncclCommInitAll) and those ranks wait on each other.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "comm.h"
#include "group.h"
#include "launch.h"

static _Thread_local int group_depth;
static _Thread_local brd_call_t *queue;   /* owned: calls collected so far */
static _Thread_local int queue_len, queue_cap;

int brd_group_depth(void) { return group_depth; }

ncclResult_t brd_group_add(const brd_call_t *call) {
  if (queue_len == queue_cap) {
    int cap = queue_cap ? 2 * queue_cap : 64;
    brd_call_t *q = realloc(queue, (size_t)cap * sizeof(*q));
    if (q == NULL) {
      WARN("%s : out of host memory queueing call %d of a group", call->fn,
           queue_len + 1);
      return ncclSystemError;
    }
    queue = q;
    queue_cap = cap;
  }
  queue[queue_len++] = *call;
  return ncclSuccess;
}

static void queue_clear(void) {
  free(queue);
  queue = NULL;
  queue_len = queue_cap = 0;
}

BRD_API(ncclResult_t, ncclGroupStart, void)
ncclResult_t pncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

/* One communicator's share of a group. */
typedef struct {
  struct ncclComm *comm;
  brd_call_t *calls;      /* owned: this comm's calls, in call order */
  int ncalls;
  ncclResult_t res;
  pthread_t thread;
  int started;
} comm_batch_t;

static void *batch_main(void *arg) {
  comm_batch_t *b = arg;
  b->res = brd_launch_run(b->comm, b->calls, b->ncalls);
  return NULL;
}

/* Splits the queue by communicator, keeping call order. */
static ncclResult_t batches_make(comm_batch_t **out, int *nout) {
  comm_batch_t *bs = calloc((size_t)queue_len, sizeof(*bs));
  if (bs == NULL) {
    WARN("ncclGroupEnd : out of host memory for %d calls", queue_len);
    return ncclSystemError;
  }
  int nb = 0;
  for (int i = 0; i < queue_len; i++) {
    int j = 0;
    while (j < nb && bs[j].comm != queue[i].comm) j++;
    if (j == nb) {
      bs[nb].comm = queue[i].comm;
      bs[nb].calls = calloc((size_t)queue_len, sizeof(brd_call_t));
      if (bs[nb].calls == NULL) {
        for (int k = 0; k < nb; k++) free(bs[k].calls);
        free(bs);
        WARN("ncclGroupEnd : out of host memory for %d calls", queue_len);
        return ncclSystemError;
      }
      nb++;
    }
    bs[j].calls[bs[j].ncalls++] = queue[i];
  }
  *out = bs;
  *nout = nb;
  return ncclSuccess;
}

static ncclResult_t run_queue(void) {
  if (queue_len == 0) return ncclSuccess;
  comm_batch_t *bs;
  int nb;
  CHECK(batches_make(&bs, &nb));
  ncclResult_t res = ncclSuccess;

  for (int i = 1; i < nb; i++) {
    if ((bs[i].comm->config.blocking != 0) != (bs[0].comm->config.blocking != 0)) {
      WARN("ncclGroupEnd : blocking and nonblocking communicators in one "
           "group (ranks %d and %d); group them separately",
           bs[0].comm->rank, bs[i].comm->rank);
      res = ncclInvalidArgument;
      goto out;
    }
  }
  if (nb == 1) {
    res = brd_launch_run(bs[0].comm, bs[0].calls, bs[0].ncalls);
    goto out;
  }
  for (int i = 0; i < nb; i++) {
    int err = pthread_create(&bs[i].thread, NULL, batch_main, &bs[i]);
    if (err != 0) {
      WARN("ncclGroupEnd : creating a launch thread failed: %s; aborting "
           "the communicators already launched", strerror(err));
      for (int k = 0; k < i; k++) atomic_store(&bs[k].comm->abort_flag, 1);
      res = ncclSystemError;
      break;
    }
    bs[i].started = 1;
  }
  for (int i = 0; i < nb; i++) {
    if (!bs[i].started) continue;
    pthread_join(bs[i].thread, NULL);
    if (res == ncclSuccess) res = bs[i].res;
  }

out:
  for (int i = 0; i < nb; i++) free(bs[i].calls);
  free(bs);
  return res;
}

static ncclResult_t group_end(const char *fn) {
  if (group_depth == 0) {
    WARN("%s: not in a group call; every ncclGroupEnd needs a matching "
         "ncclGroupStart on the same thread", fn);
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t init_res = brd_init_group_wait();
  ncclResult_t res = run_queue();
  queue_clear();
  if (init_res != ncclSuccess && init_res != ncclInProgress) return init_res;
  if (res != ncclSuccess) return res;
  return init_res;
}

BRD_API(ncclResult_t, ncclGroupEnd, void)
ncclResult_t pncclGroupEnd(void) { return group_end("ncclGroupEnd"); }

#define SIM_INFO_MAGIC 0x74685283u

BRD_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo)
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  ARG_NOT_NULL(simInfo, "ncclGroupSimulateEnd");
  if (simInfo->magic != SIM_INFO_MAGIC) {
    WARN("ncclGroupSimulateEnd : simInfo argument not initialized via "
         "NCCL_SIM_INFO_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (group_depth == 0) {
    WARN("ncclGroupSimulateEnd: not in a group call; call ncclGroupStart "
         "first");
    return ncclInvalidUsage;
  }
  /* Simulating consumes the group without running it. */
  group_depth = 0;
  queue_clear();
  return brd_api_not_implemented("ncclGroupSimulateEnd");
}
