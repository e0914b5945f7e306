/*
 * Braid: NCCL 2.29's communicator offload and growth calls.
 *
 * ncclCommSuspend/ncclCommResume (releasing and restoring the scratch
 * windows, plan caches and staging a communicator owns) and
 * ncclCommGetUniqueId/ncclCommGrow (new ranks joining a communicator) are
 * not implemented yet: after checking their arguments as NCCL does they
 * return ncclInvalidUsage, and ncclGetLastError says so.
 *
 * ncclCommMemStats answers what is known exactly: nothing can be suspended
 * (so ncclStatGpuMemSuspend is 0 and ncclStatGpuMemSuspended 0), and a
 * host-mode communicator (BRAID_DEVICE=host) holds no device memory at all.
 * A CUDA-mode communicator's device bytes are not counted yet; asking for
 * them returns ncclInvalidUsage rather than an estimate.
 */
#include <stdint.h>

#include "base/check.h"
#include "core/api.h"
#include "core/comm.h"

static ncclResult_t not_yet(const char *fn, const char *what) {
  WARN("%s is not implemented yet in braid %s: %s", fn, BRAID_VERSION, what);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  CHECK(brd_comm_check(comm, "ncclCommSuspend"));
  if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
    WARN("ncclCommSuspend : unknown flags 0x%x (known: NCCL_SUSPEND_MEM)",
         (unsigned)flags);
    return ncclInvalidArgument;
  }
  return not_yet("ncclCommSuspend",
                 "the communicator keeps its memory; destroy it and create a new "
                 "one to release it");
}

BRD_API(ncclResult_t, ncclCommResume, ncclComm_t comm)
ncclResult_t pncclCommResume(ncclComm_t comm) {
  CHECK(brd_comm_check(comm, "ncclCommResume"));
  return not_yet("ncclCommResume", "ncclCommSuspend never suspends a communicator");
}

/* See the top of this file. Any thread; does not block. */
BRD_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat,
        uint64_t *value)
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value) {
  static const char fn[] = "ncclCommMemStats";
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(value, fn);
  switch (stat) {
  case ncclStatGpuMemSuspend:
  case ncclStatGpuMemSuspended:
    *value = 0;
    return ncclSuccess;
  case ncclStatGpuMemPersist:
  case ncclStatGpuMemTotal:
    if (comm->host_mode) {
      *value = 0;
      return ncclSuccess;
    }
    return not_yet(fn, "the device memory of a CUDA-mode communicator is not "
                       "counted yet (ncclStatGpuMemPersist, ncclStatGpuMemTotal)");
  }
  WARN("%s : unknown statistic %d (ncclStatGpuMemSuspend 0 to ncclStatGpuMemTotal 3)",
       fn, (int)stat);
  return ncclInvalidArgument;
}

BRD_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId)
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
  CHECK(brd_comm_check(comm, "ncclCommGetUniqueId"));
  ARG_NOT_NULL(uniqueId, "ncclCommGetUniqueId");
  return not_yet("ncclCommGetUniqueId",
                 "communicators cannot grow; create a new one with ncclGetUniqueId "
                 "and ncclCommInitRank over all the ranks");
}

BRD_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks,
        const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm, ncclConfig_t *config)
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
                           int rank, ncclComm_t *newcomm, ncclConfig_t *config) {
  static const char fn[] = "ncclCommGrow";
  (void)config;
  ARG_NOT_NULL(newcomm, fn);
  if (comm != NULL) {
    CHECK(brd_comm_check(comm, fn));
    if (nRanks <= comm->nranks || rank != -1) {
      WARN("%s : an existing rank passes rank -1 and nRanks above the current %d "
           "(got rank %d, nRanks %d)", fn, comm->nranks, rank, nRanks);
      return ncclInvalidArgument;
    }
  } else {
    ARG_NOT_NULL(uniqueId, fn);
    if (nRanks <= 0 || rank < 0 || rank >= nRanks) {
      WARN("%s : a new rank passes its rank in [0, nRanks) (got rank %d, nRanks %d)",
           fn, rank, nRanks);
      return ncclInvalidArgument;
    }
  }
  return not_yet(fn, "communicators cannot grow; create a new one with "
                     "ncclGetUniqueId and ncclCommInitRank over all the ranks");
}
