/*
 * Braid: the communicator lifecycle entry points: unique ids, init (one
 * rank, all ranks of a process, several roots), split, shrink, finalize,
 * destroy, abort, revoke, and the queries. Each init builds a job and
 * hands it to init_job.c, which runs it (inline or on a helper thread)
 * and publishes its result in the communicator's async_error.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/api.h"
#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "plan/topo.h"
#include "plan/tuner_plugin.h"
#include "core/profiler.h"
#include "transport/ibverbs.h"
#include "core/config.h"
#include "core/gpu.h"
#include "core/launch.h"
#include "core/group.h"
#include "base/param.h"
#include "base/time.h"
#include "core/init.h"

#define ABORT_WAIT_NS 900000000LL   /* ncclCommAbort returns within 1 s */

/* Waits (bounded) until no split/shrink job uses comm any more. */
static int children_wait(struct ncclComm *comm, int64_t deadline_ns) {
  while (atomic_load_explicit(&comm->children_busy, memory_order_acquire) != 0) {
    struct timespec ts = {0, 1000000L};
    if (brd_time_now_ns() >= deadline_ns) return 0;
    nanosleep(&ts, NULL);
  }
  return 1;
}

/* ---------------------------------------------------------------------- */
/* Entry points.                                                           */

/* NCCL's ncclCommEnsureReady: an aborted comm passes; one still in an
 * asynchronous operation is ncclInvalidArgument; an error is returned. */
static ncclResult_t ensure_ready(struct ncclComm *comm, const char *fn) {
  ncclResult_t r;
  if (atomic_load_explicit(&comm->abort_flag, memory_order_acquire)) return ncclSuccess;
  r = atomic_load_explicit(&comm->async_error, memory_order_acquire);
  if (r == ncclInProgress) {
    WARN("%s: Attempt to use communicator before the previous operation "
         "returned ncclSuccess", fn);
    return ncclInvalidArgument;
  }
  return r;
}

BRD_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  ARG_NOT_NULL(uniqueId, "ncclGetUniqueId");
  return brd_boot_get_unique_id(uniqueId);
}

/* The common path of every root init (NCCL's ncclCommInitRankDev). dev:
 * the device, DEV_LOCAL for "current device" (CUDA) or "local index"
 * (host). threaded: run on a helper thread even when blocking (InitAll). */
static ncclResult_t init_rank(ncclComm_t *newcomm, int nranks, int nids,
                              const ncclUniqueId *ids, int rank, int dev,
                              const ncclConfig_t *config, const char *fn,
                              int threaded) {
  struct ncclComm *comm = NULL;
  struct brd_init_job *job = NULL;
  brd_device_backend_t backend;
  const char *env_id;
  ncclResult_t res;

  if (nids <= 0 || nids > nranks) {
    WARN("improper usage of ncclCommInitRank: nId = %d, nranks=%d", nids, nranks);
    return ncclInvalidArgument;
  }
  brd_log_banner();
  ARG_NOT_NULL(newcomm, fn);
  /* From here on a failure leaves *newcomm NULL, as NCCL does. */
  *newcomm = NULL;
  ARG_NOT_NULL(ids, fn);
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("Invalid rank requested : %d/%d", rank, nranks);
    return ncclInvalidArgument;
  }
  CHECK(brd_device_backend(&backend));
  if (backend == BRD_DEVICE_CUDA && dev == DEV_LOCAL) CHECK(brd_device_current(&dev));

  CHECK(brd_comm_create(&comm));
  comm->rank = rank;
  comm->nranks = nranks;
  comm->backend = backend;
  comm->host_mode = backend == BRD_DEVICE_HOST;
  CHECK_GOTO(brd_config_resolve(config, NULL, &comm->config), res, fail_comm);
  if (comm->config.commName != NULL)
    snprintf(comm->comm_name, sizeof(comm->comm_name), "%s", comm->config.commName);
  CHECK_GOTO(brd_init_job_create(&job), res, fail_comm);
  job->comm = comm;
  job->newcomm = newcomm;
  job->fn = fn;
  job->nranks = nranks;
  job->rank = rank;
  job->nids = nids;
  job->dev = dev;
  job->ids = malloc((size_t)nids * sizeof(*job->ids));
  if (job->ids == NULL) {
    WARN("out of host memory copying %d unique ids", nids);
    res = ncclSystemError;
    goto fail_job;
  }
  memcpy(job->ids, ids, (size_t)nids * sizeof(*job->ids));

  env_id = brd_param_str(BRD_P_COMM_ID);
  if (env_id != NULL && env_id[0] != '\0') {
    if (nids > 1) {
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_ENV, "NCCL_COMM_ID cannot be used with "
           "more than one ncclUniqueId");
      job->nids = 1;
    }
    /* Rank 0 serves the rendezvous at the address NCCL_COMM_ID names. */
    if (rank == 0) CHECK_GOTO(brd_boot_root_start(&job->ids[0]), res, fail_job);
  }
  return brd_init_job_launch(job, comm->config.blocking, threaded);

fail_job:
  brd_init_job_release(job);
fail_comm:
  brd_comm_destroy(comm);
  return res;
}

BRD_API(ncclResult_t, ncclCommInitRank, ncclComm_t *newcomm, int nranks,
        ncclUniqueId commId, int rank)
ncclResult_t pncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
                               int rank) {
  return init_rank(newcomm, nranks, 1, &commId, rank, DEV_LOCAL, NULL,
                   "ncclCommInitRank", 0);
}

BRD_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *newcomm, int nranks,
        ncclUniqueId commId, int rank, ncclConfig_t *config)
ncclResult_t pncclCommInitRankConfig(ncclComm_t *newcomm, int nranks,
                                     ncclUniqueId commId, int rank,
                                     ncclConfig_t *config) {
  return init_rank(newcomm, nranks, 1, &commId, rank, DEV_LOCAL, config,
                   "ncclCommInitRankConfig", 0);
}

BRD_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks,
        int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config)
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                       int nId, ncclUniqueId *commIds,
                                       ncclConfig_t *config) {
  return init_rank(newcomm, nranks, nId, commIds, myrank, DEV_LOCAL, config,
                   "ncclCommInitRankScalable", 0);
}

BRD_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist)
ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  brd_device_backend_t backend;
  ncclUniqueId id;
  ncclResult_t res = ncclSuccess;
  int total = 0;

  ARG_NOT_NULL(comms, "ncclCommInitAll");
  if (ndev < 0) {
    WARN("Invalid device count requested : %d", ndev);
    return ncclInvalidArgument;
  }
  CHECK(brd_device_backend(&backend));
  if (backend == BRD_DEVICE_CUDA) CHECK(brd_device_count(&total));
  if (devlist != NULL) {
    for (int i = 0; i < ndev; i++) {
      if (devlist[i] < 0 || (backend == BRD_DEVICE_CUDA && devlist[i] >= total)) {
        if (backend == BRD_DEVICE_CUDA)
          WARN("Invalid device %d (totalnDev=%d)", devlist[i], total);
        else
          WARN("Invalid device %d: host-mode devices are numbered from 0", devlist[i]);
        return ncclInvalidArgument;
      }
      for (int j = 0; j < i; j++) {
        if (devlist[j] == devlist[i]) {
          WARN("ncclCommInitAll: device %d appears twice in devlist (entries %d "
               "and %d)", devlist[i], j, i);
          return ncclInvalidUsage;
        }
      }
    }
  }
  if (ndev == 0) return ncclSuccess;
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  CHECK(brd_boot_get_unique_id(&id));
  /* All ranks at once, each on its own thread: they must meet. */
  for (int i = 0; i < ndev && res == ncclSuccess; i++)
    res = init_rank(&comms[i], ndev, 1, &id, i, devlist ? devlist[i] : i, NULL,
                    "ncclCommInitAll", 1);
  if (res != ncclSuccess) {
    for (int i = 0; i < ndev; i++)
      if (comms[i] != NULL) atomic_store(&comms[i]->abort_flag, 1);
    brd_boot_root_stop(&id);
  }
  for (int i = 0; i < ndev; i++) {
    struct brd_init_job *job;
    if (comms[i] == NULL || comms[i]->init_job == NULL) continue;
    job = comms[i]->init_job;
    brd_init_job_wait(job, INT64_MAX);
    if (job->result != ncclSuccess && res == ncclSuccess) {
      res = job->result;
      for (int k = 0; k < ndev; k++)
        if (comms[k] != NULL) atomic_store(&comms[k]->abort_flag, 1);
    }
  }
  for (int i = 0; i < ndev; i++) {
    struct brd_init_job *job;
    if (comms[i] == NULL) continue;
    job = comms[i]->init_job;
    comms[i]->init_job = NULL;
    if (res != ncclSuccess) {
      brd_comm_destroy(comms[i]);
      comms[i] = NULL;
    }
    brd_init_job_release(job);
  }
  return res;
}

/* Split and shrink (NCCL's ncclCommInitChildComm). */
static ncclResult_t init_child(struct ncclComm *parent, ncclComm_t *newcomm, int is_shrink,
                               int error_mode, int color, int key, const int *exclude,
                               int nexclude, const ncclConfig_t *config, const char *fn) {
  struct ncclComm *child = NULL;
  struct brd_init_job *job = NULL;
  ncclResult_t res;
  int blocking;

  CHECK(brd_comm_check(parent, fn));
  ARG_NOT_NULL(newcomm, fn);
  res = ensure_ready(parent, fn);
  /* In error mode (NCCL_SHRINK_ABORT) a parent in error may still shrink. */
  if (res != ncclSuccess && !(error_mode && res != ncclInvalidArgument)) return res;
  *newcomm = NULL;
  CHECK(brd_init_job_create(&job));
  job->fn = fn;
  job->newcomm = newcomm;
  job->parent = parent;
  job->is_shrink = is_shrink;
  job->color = color;
  job->key = key;
  job->seq = ++parent->split_count;
  if (is_shrink) {
    job->exclude = malloc((size_t)nexclude * sizeof(int));
    if (job->exclude == NULL) {
      WARN("out of host memory copying %d excluded ranks", nexclude);
      res = ncclSystemError;
      goto fail_job;
    }
    memcpy(job->exclude, exclude, (size_t)nexclude * sizeof(int));
    job->nexclude = nexclude;
    /* Ascending insertion sort: lists are short. */
    for (int i = 1; i < nexclude; i++)
      for (int j = i; j > 0 && job->exclude[j - 1] > job->exclude[j]; j--) {
        int t = job->exclude[j];
        job->exclude[j] = job->exclude[j - 1];
        job->exclude[j - 1] = t;
      }
    for (int i = 0; i < nexclude; i++) {
      if (job->exclude[i] < 0 || job->exclude[i] >= parent->nranks) {
        WARN("%s: excluded rank %d is outside [0, %d)", fn, job->exclude[i],
             parent->nranks);
        res = ncclInvalidArgument;
        goto fail_job;
      }
      if (i > 0 && job->exclude[i] == job->exclude[i - 1]) {
        WARN("%s: rank %d is listed twice in excludeRanksList", fn, job->exclude[i]);
        res = ncclInvalidArgument;
        goto fail_job;
      }
      if (job->exclude[i] == parent->rank) {
        WARN("%s: rank %d is in excludeRanksList; excluded ranks must not call "
             "ncclCommShrink", fn, parent->rank);
        res = ncclInvalidArgument;
        goto fail_job;
      }
    }
  }
  if (!is_shrink && color == NCCL_SPLIT_NOCOLOR) {
    blocking = parent->config.blocking;
  } else {
    CHECK_GOTO(brd_comm_create(&child), res, fail_job);
    CHECK_GOTO(brd_config_resolve(config, &parent->config, &child->config), res,
               fail_child);
    if (child->config.commName != NULL)
      snprintf(child->comm_name, sizeof(child->comm_name), "%s", child->config.commName);
    blocking = child->config.blocking;
    job->comm = child;
  }
  atomic_fetch_add(&parent->children_busy, 1);
  if (!blocking) {
    job->parent_async = 1;
    atomic_store(&parent->async_error, ncclInProgress);
  }
  return brd_init_job_launch(job, blocking, 0);

fail_child:
  brd_comm_destroy(child);
fail_job:
  brd_init_job_release(job);
  return res;
}

BRD_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key,
        ncclComm_t *newcomm, ncclConfig_t *config)
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config) {
  return init_child(comm, newcomm, 0, 0, color, key, NULL, 0, config, "ncclCommSplit");
}

/* Sets the abort flag so operations in flight on comm return, waits (up to
 * the bootstrap timeout) until none is left, then clears the flag. */
static ncclResult_t quiesce(struct ncclComm *comm, const char *fn) {
  int64_t deadline = brd_sock_deadline(brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT));
  atomic_store(&comm->abort_flag, 1);
  while ((comm->boot != NULL && brd_boot_busy(comm->boot) != 0) ||
         atomic_load(&comm->children_busy) != 0) {
    struct timespec ts = {0, 1000000L};
    if (brd_time_now_ns() >= deadline) {
      WARN("%s: operations on rank %d did not stop after the abort flag was set",
           fn, comm->rank);
      return ncclInternalError;
    }
    nanosleep(&ts, NULL);
  }
  atomic_store(&comm->abort_flag, 0);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
        int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config,
        int shrinkFlags)
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                             int excludeRanksCount, ncclComm_t *newcomm,
                             ncclConfig_t *config, int shrinkFlags) {
  CHECK(brd_comm_check(comm, "ncclCommShrink"));
  ARG_NOT_NULL(newcomm, "ncclCommShrink");
  ARG_NOT_NULL(excludeRanksList, "ncclCommShrink");
  if (excludeRanksCount <= 0) {
    WARN("ncclCommShrink: excludeRanksCount is %d; it must be at least 1",
         excludeRanksCount);
    return ncclInvalidArgument;
  }
  /* Error mode: first stop whatever the parent is doing. */
  if (shrinkFlags & NCCL_SHRINK_ABORT) CHECK(quiesce(comm, "ncclCommShrink"));
  return init_child(comm, newcomm, 1, (shrinkFlags & NCCL_SHRINK_ABORT) != 0, 0,
                    comm->rank, excludeRanksList, excludeRanksCount, config,
                    "ncclCommShrink");
}

BRD_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommFinalize"));
  CHECK(ensure_ready(comm, "ncclCommFinalize"));
  if (comm->finalized) {
    WARN("ncclCommFinalize: rank %d was already finalized (or revoked)", comm->rank);
    return ncclInvalidArgument;
  }
  comm->finalized = 1;
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nranks %d cudaDev %d - Finalize COMPLETE",
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  int rank, nranks, dev;
  ncclResult_t r;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommDestroy"));
  CHECK(brd_group_check_teardown(comm, "ncclCommDestroy"));
  /* A split or shrink of comm still running reads it. One started in this
   * thread's open group ends only at ncclGroupEnd: refuse. Otherwise it
   * is finishing (its result is already published): wait for it. */
  if (atomic_load_explicit(&comm->children_busy, memory_order_acquire) != 0 &&
      (brd_group_depth() > 0 || !children_wait(comm, brd_time_now_ns() + ABORT_WAIT_NS))) {
    WARN("ncclCommDestroy : a split or shrink of rank %d's communicator is still "
         "running%s; it reads the communicator, so destroy it after %s", comm->rank,
         brd_group_depth() > 0 ? " (started in the open group)" : "",
         brd_group_depth() > 0 ? "ncclGroupEnd" : "the split returns");
    return ncclInvalidUsage;
  }
  r = ensure_ready(comm, "ncclCommDestroy");
  if (r != ncclSuccess) {
    if (r != ncclInvalidArgument)
      WARN("ncclCommDestroy: rank %d is in error state %d (%s); use ncclCommAbort "
           "to free it", comm->rank, (int)r, pncclGetErrorString(r));
    return r;
  }
  rank = comm->rank;
  nranks = comm->nranks;
  dev = comm->cuda_dev;
  /* Done jobs only here: ensure_ready saw the init finish. */
  if (comm->init_job != NULL) {
    brd_init_job_wait(comm->init_job, INT64_MAX);
    brd_init_job_release(comm->init_job);
    comm->init_job = NULL;
  }
  brd_comm_destroy(comm);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nranks %d cudaDev %d - Destroy COMPLETE",
       (void *)comm, rank, nranks, dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  int64_t deadline = brd_time_now_ns() + ABORT_WAIT_NS;
  int rank, nranks, dev;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommAbort"));
  rank = comm->rank;
  nranks = comm->nranks;
  dev = comm->cuda_dev;
  /* Work of this thread's open group on comm is discarded with it. */
  int dropped = brd_group_forget(comm);
  if (dropped > 0)
    INFO(BRD_SUBSYS_INIT, "ncclCommAbort: rank %d drops %d call(s) of the open group",
         rank, dropped);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Abort START",
       (void *)comm, rank, nranks, dev);
  atomic_store_explicit(&comm->abort_flag, 1, memory_order_release);
  brd_rt_abort(comm);
  if (comm->init_job != NULL && !brd_init_job_wait(comm->init_job, deadline)) {
    /* Every wait of a job polls the flag, so this means a bug; freeing the
     * communicator under the running job would be worse than the leak. */
    WARN("ncclCommAbort: the init of rank %d did not stop within 1 s; the "
         "communicator is left allocated", rank);
    return ncclSuccess;
  }
  if (!children_wait(comm, deadline)) {
    WARN("ncclCommAbort: a split/shrink from rank %d did not stop within 1 s; "
         "the communicator is left allocated", rank);
    return ncclSuccess;
  }
  if (comm->init_job != NULL) {
    brd_init_job_release(comm->init_job);
    comm->init_job = NULL;
  }
  brd_comm_destroy(comm);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Abort COMPLETE",
       (void *)comm, rank, nranks, dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  ncclResult_t res;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommRevoke"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), not %d",
         revokeFlags);
    return ncclInvalidArgument;
  }
  if (comm->finalized || comm->revoked) {
    WARN("ncclCommRevoke: rank %d was already %s", comm->rank,
         comm->revoked ? "revoked" : "finalized");
    return ncclInvalidArgument;
  }
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Revoke START",
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev);
  comm->revoked = 1;
  comm->finalized = 1;
  if (comm->init_job != NULL) {
    atomic_store(&comm->abort_flag, 1);
    brd_init_job_wait(comm->init_job, INT64_MAX);
  }
  res = quiesce(comm, "ncclCommRevoke");
  if (res == ncclSuccess && atomic_load(&comm->async_error) == ncclInProgress)
    atomic_store(&comm->async_error, ncclSuccess);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d - Revoke COMPLETE, result %d", (void *)comm,
       comm->rank, (int)res);
  return res;
}

BRD_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  CHECK(brd_comm_check(comm, "ncclCommGetAsyncError"));
  ARG_NOT_NULL(asyncError, "ncclCommGetAsyncError");
  /* CUDA mode: fold in a failure the executor recorded on the device. */
  (void)brd_rt_poll(comm);
  *asyncError = (ncclResult_t)atomic_load_explicit(&comm->async_error, memory_order_acquire);
  return ncclSuccess;
}

/* The int getters: NCCL's checks on comm, the output `arg` and the
 * communicator's readiness, then the int member at `offset` of comm. */
static ncclResult_t comm_get_int(const ncclComm_t comm, size_t offset, int *out,
                                 const char *fn, const char *arg) {
  CHECK(brd_comm_check(comm, fn));
  if (out == NULL) {
    WARN("%s : %s argument is NULL", fn, arg);
    return ncclInvalidArgument;
  }
  CHECK(ensure_ready(comm, fn));
  *out = *(const int *)((const char *)comm + offset);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  return comm_get_int(comm, offsetof(struct ncclComm, nranks), count, "ncclCommCount",
                      "count");
}

BRD_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device) {
  return comm_get_int(comm, offsetof(struct ncclComm, cuda_dev), device,
                      "ncclCommCuDevice", "device");
}

BRD_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  return comm_get_int(comm, offsetof(struct ncclComm, rank), rank, "ncclCommUserRank",
                      "rank");
}
