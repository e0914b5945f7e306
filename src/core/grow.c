/*
 * Braid: ncclCommGetUniqueId and ncclCommGrow (NCCL 2.29): new ranks join
 * the ranks of an existing communicator in a new, larger one.
 *
 * One existing rank (the root) makes an id with ncclCommGetUniqueId and
 * hands it to the new ranks (by any means, as with ncclGetUniqueId). Then
 * every rank calls ncclCommGrow: existing ranks with their communicator and
 * rank -1 (the root also with the id, the others with NULL), new ranks with
 * no communicator, the id and their rank. The existing ranks learn the id
 * from the root over their communicator's bootstrap (an allgather, which
 * also checks that exactly one of them is the root and that its id is the
 * one ncclCommGetUniqueId made); then all nRanks ranks create the new
 * communicator with ncclCommInitRankConfig. Existing ranks keep their rank
 * numbers. The old communicator stays valid.
 *
 * As in NCCL, a communicator has at most one unconsumed id at a time, and
 * an id is consumed by the grow that uses it (or by a failed one). An id a
 * destroyed communicator never used stays in a small table (a few hundred
 * bytes) for the life of the process.
 *
 * config NULL: existing ranks start from their communicator's settings,
 * new ranks from the defaults. Every call blocks until the new communicator
 * exists (or, nonblocking, returns ncclInProgress as ncclCommInitRankConfig
 * does). The caller's thread.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/api.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/group.h"

/* Ids made by ncclCommGetUniqueId and not consumed yet, per communicator. */
struct pending_id {
  const struct ncclComm *comm;   /* borrowed; compared only */
  uint64_t comm_hash;            /* with comm: a later communicator at the
                                  * same address is another one */
  ncclUniqueId id;
  struct pending_id *next;
};

static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_id *pending;   /* owned, under pending_lock */

/* Finds comm's pending id; with take, removes it into *id_out. */
static int pending_find(const struct ncclComm *comm, int take, ncclUniqueId *id_out) {
  int found = 0;
  pthread_mutex_lock(&pending_lock);
  for (struct pending_id **pp = &pending; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->comm != comm || (*pp)->comm_hash != comm->comm_hash) continue;
    found = 1;
    if (id_out != NULL) *id_out = (*pp)->id;
    if (take) {
      struct pending_id *gone = *pp;
      *pp = gone->next;
      free(gone);
    }
    break;
  }
  pthread_mutex_unlock(&pending_lock);
  return found;
}

/* See the top of this file. Any thread; does not block. */
BRD_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId)
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
  static const char fn[] = "ncclCommGetUniqueId";
  struct pending_id *p;
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(uniqueId, fn);
  if (pending_find(comm, 0, NULL)) {
    WARN("%s : rank %d: the id made before has not been used by ncclCommGrow yet; "
         "an id is made only once the previous one was consumed", fn, comm->rank);
    return ncclInvalidUsage;
  }
  BRD_CALLOC(p, 1, "a grow id");
  ncclResult_t res = pncclGetUniqueId(&p->id);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  p->comm = comm;
  p->comm_hash = comm->comm_hash;
  pthread_mutex_lock(&pending_lock);
  p->next = pending;
  pending = p;
  pthread_mutex_unlock(&pending_lock);
  *uniqueId = p->id;
  return ncclSuccess;
}

/* What each existing rank tells the others before growing. */
typedef struct {
  int root;                /* 1: this rank passed the id */
  int valid;               /* root only: the id is this comm's pending one */
  int nranks;              /* the nRanks it passed */
  int pad;
  ncclUniqueId id;         /* root only */
} grow_pub_t;

/* The existing ranks agree on the id (collective over comm). */
static ncclResult_t grow_agree(struct ncclComm *comm, int nRanks, const ncclUniqueId *uniqueId,
                               ncclUniqueId *id_out) {
  static const char fn[] = "ncclCommGrow";
  ncclResult_t res = ncclSuccess;
  grow_pub_t *pub = calloc((size_t)comm->nranks, sizeof(*pub));
  ncclUniqueId mine;
  int roots = 0, root = -1;
  if (pub == NULL) {
    WARN("%s : out of host memory", fn);
    return ncclSystemError;
  }
  grow_pub_t *me = &pub[comm->rank];
  me->nranks = nRanks;
  if (uniqueId != NULL) {
    me->root = 1;
    /* Consumed now, whatever happens next. */
    me->valid = pending_find(comm, 1, &mine) && memcmp(&mine, uniqueId, sizeof(mine)) == 0;
    me->id = *uniqueId;
  }
  CHECK_GOTO(brd_boot_allgather(comm->boot, pub, sizeof(*pub)), res, out);
  for (int r = 0; r < comm->nranks; r++) {
    if (pub[r].root) {
      roots++;
      root = r;
    }
    if (pub[r].nranks != nRanks) {
      WARN("%s : rank %d passed nRanks %d, rank %d passed %d; every rank passes the "
           "size of the grown communicator", fn, comm->rank, nRanks, r, pub[r].nranks);
      res = ncclInvalidArgument;
      goto out;
    }
  }
  if (roots != 1) {
    WARN("%s : %d of the existing ranks passed an id; exactly one (the rank that "
         "called ncclCommGetUniqueId) passes it, the others NULL", fn, roots);
    res = ncclInvalidArgument;
    goto out;
  }
  if (!pub[root].valid) {
    WARN("%s : rank %d's id was not made by ncclCommGetUniqueId on this communicator "
         "(or was used already); make one with ncclCommGetUniqueId", fn, root);
    res = ncclInvalidArgument;
    goto out;
  }
  *id_out = pub[root].id;
out:
  free(pub);
  return res;
}

/* See the top of this file. */
BRD_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks,
        const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm, ncclConfig_t *config)
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
                           int rank, ncclComm_t *newcomm, ncclConfig_t *config) {
  static const char fn[] = "ncclCommGrow";
  ncclUniqueId id;
  ARG_NOT_NULL(newcomm, fn);
  if (brd_group_depth() > 0) {
    WARN("%s : called inside ncclGroupStart/ncclGroupEnd; call it outside any group", fn);
    return ncclInvalidUsage;
  }
  if (comm == NULL) {
    /* A new rank. */
    ARG_NOT_NULL(uniqueId, fn);
    if (nRanks <= 0 || rank < 0 || rank >= nRanks) {
      WARN("%s : a new rank passes its rank in [0, nRanks) (got rank %d, nRanks %d)",
           fn, rank, nRanks);
      return ncclInvalidArgument;
    }
    return pncclCommInitRankConfig(newcomm, nRanks, *uniqueId, rank, config);
  }
  CHECK(brd_comm_check(comm, fn));
  if (nRanks <= comm->nranks || rank != -1) {
    WARN("%s : an existing rank passes rank -1 and nRanks above the current %d "
         "(got rank %d, nRanks %d)", fn, comm->nranks, rank, nRanks);
    if (uniqueId != NULL) (void)pending_find(comm, 1, NULL);
    return ncclInvalidArgument;
  }
  CHECK(grow_agree(comm, nRanks, uniqueId, &id));
  return pncclCommInitRankConfig(newcomm, nRanks, id, comm->rank,
                                 config != NULL ? config : &comm->config);
}

