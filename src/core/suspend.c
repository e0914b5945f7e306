/*
 * Braid: NCCL 2.29's communicator offload calls.
 *
 * ncclCommSuspend pauses a communicator: until ncclCommResume, every call
 * that would launch work on it fails with ncclInvalidUsage. With
 * NCCL_SUSPEND_MEM it also frees the collective runtime the communicator
 * built at its first launch: the channel windows and their scratch and
 * staging, and the plan cache. ncclCommResume lets the next launch build
 * them again (as the first launch did), so results after it are those of a
 * fresh communicator. Registered buffers and windows, and the bootstrap,
 * are kept.
 *
 * Both are collective: every rank suspends and resumes. The memory is freed
 * only after a barrier, so no rank frees a window a peer is still reading,
 * and the runtime is rebuilt by the ranks together at their first launch
 * after resuming.
 *
 * The same in both modes: each rank first waits for its launched work to
 * leave the executor (CUDA mode: its kernels, which end only when the
 * peers' matching kernels have), then the barrier, then the runtime is
 * unpublished and freed once no other thread (ncclCommGetAsyncError,
 * which PyTorch's watchdog polls) is reading it (launch.c).
 *
 * ncclCommMemStats measures: ncclStatGpuMemSuspend is the device memory
 * the runtime owns now, summed by the backend where each allocation is
 * made (host mode allocates none: 0); it is what NCCL_SUSPEND_MEM gives
 * back, and 0 while suspended. Braid keeps no other device memory per
 * communicator (registered buffers and windows are the caller's), so
 * ncclStatGpuMemPersist is 0 and ncclStatGpuMemTotal equals
 * ncclStatGpuMemSuspend.
 */
#include <stdatomic.h>
#include <stdint.h>

#include "base/check.h"
#include "core/api.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/group.h"
#include "core/launch.h"

/* A communicator that may be suspended or resumed now: ready, not revoked,
 * and not inside a group (the group would launch on it). */
static ncclResult_t suspend_check(struct ncclComm *comm, const char *fn) {
  CHECK(brd_comm_check(comm, fn));
  if (atomic_load(&comm->async_error) == ncclInProgress) {
    WARN("%s : rank %d: the communicator is still busy with a nonblocking "
         "operation; call it after ncclCommGetAsyncError reports ncclSuccess",
         fn, comm->rank);
    return ncclInvalidArgument;
  }
  if (comm->revoked) {
    WARN("%s : rank %d: the communicator was revoked (ncclCommRevoke)", fn, comm->rank);
    return ncclInvalidUsage;
  }
  if (brd_group_depth() > 0) {
    WARN("%s : rank %d: called inside ncclGroupStart/ncclGroupEnd; call it "
         "outside any group", fn, comm->rank);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* See the top of this file. Collective; blocks in a barrier with the other
 * ranks when NCCL_SUSPEND_MEM is set. The communicator's launching thread. */
BRD_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  static const char fn[] = "ncclCommSuspend";
  CHECK(suspend_check(comm, fn));
  if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
    WARN("%s : unknown flags 0x%x (known: NCCL_SUSPEND_MEM)", fn, (unsigned)flags);
    return ncclInvalidArgument;
  }
  if (atomic_load(&comm->suspended)) {
    WARN("%s : rank %d: the communicator is suspended already; call "
         "ncclCommResume first", fn, comm->rank);
    return ncclInvalidUsage;
  }
  if (flags & NCCL_SUSPEND_MEM) {
    /* Every rank's work has left the executor before any frees its windows. */
    CHECK(brd_rt_drain(comm));
    CHECK(brd_boot_barrier(comm->boot));
    CHECK(brd_rt_release(comm));
  }
  atomic_store(&comm->suspended, 1);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d suspended%s", (void *)comm, comm->rank,
       (flags & NCCL_SUSPEND_MEM) ? ", collective runtime freed" : "");
  return ncclSuccess;
}

/* See the top of this file. Does not block; the runtime is rebuilt by the
 * next launch. The communicator's launching thread. */
BRD_API(ncclResult_t, ncclCommResume, ncclComm_t comm)
ncclResult_t pncclCommResume(ncclComm_t comm) {
  CHECK(suspend_check(comm, "ncclCommResume"));
  if (!atomic_load(&comm->suspended)) {
    WARN("ncclCommResume : rank %d: the communicator is not suspended", comm->rank);
    return ncclInvalidUsage;
  }
  atomic_store(&comm->suspended, 0);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d resumed", (void *)comm, comm->rank);
  return ncclSuccess;
}

/* See the top of this file. Any thread; does not block. */
BRD_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat,
        uint64_t *value)
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value) {
  static const char fn[] = "ncclCommMemStats";
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(value, fn);
  switch (stat) {
  case ncclStatGpuMemSuspended:
    *value = atomic_load(&comm->suspended) ? 1 : 0;
    return ncclSuccess;
  case ncclStatGpuMemSuspend:
  case ncclStatGpuMemTotal:
    *value = brd_rt_mem_bytes(comm);
    return ncclSuccess;
  case ncclStatGpuMemPersist:
    *value = 0;
    return ncclSuccess;
  }
  WARN("%s : unknown statistic %d (ncclStatGpuMemSuspend 0 to ncclStatGpuMemTotal 3)",
       fn, (int)stat);
  return ncclInvalidArgument;
}
