/*
 * Braid: communicator helpers shared by every entry point, and the
 * communicator's allocation and release.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/launch.h"
#include "core/config.h"
#include "core/gpu.h"
#include "core/reg.h"

/* See comm.h. */
ncclResult_t brd_comm_check(const struct ncclComm *comm, const char *fn) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", fn);
    return ncclInvalidArgument;
  }
  if (comm->magic != BRD_COMM_MAGIC) {
    WARN("%s : comm argument is not a live communicator (destroyed, "
         "aborted or never initialised)", fn);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* See comm.h. */
ncclResult_t brd_comm_create(struct ncclComm **comm_out) {
  struct ncclComm *comm;
  BRD_CALLOC(comm, 1, "a communicator");
  comm->magic = BRD_COMM_MAGIC;
  comm->rank = comm->nranks = comm->cuda_dev = -1;
  atomic_init(&comm->abort_flag, 0);
  atomic_init(&comm->async_error, ncclInProgress);
  atomic_init(&comm->children_busy, 0);
  *comm_out = comm;
  return ncclSuccess;
}

/* See comm.h. */
void brd_comm_destroy(struct ncclComm *comm) {
  if (comm == NULL) return;
  /* A stale handle used after this point fails brd_comm_check (as long as
   * the memory is not reused), which is all NCCL promises too. */
  /* The runtime waits (bounded) for a launch another thread still runs on
   * comm, and that launch reads comm; only then is the handle marked dead. */
  brd_rt_destroy(comm->rt);
  comm->magic = 0;
  brd_regs_destroy(comm);
  free(comm->redops);
  brd_boot_destroy(comm->boot);
  comm->boot = NULL;
  free(comm->peers);
  brd_config_fini(&comm->config);
  free(comm);
}

/* See comm.h. */
int brd_comm_ranks_per_device(const struct ncclComm *comm) {
  int most = 1;
  if (comm->peers == NULL) return 1;
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    for (int q = 0; q < comm->nranks; q++)
      k += comm->peers[q].host_hash == comm->peers[r].host_hash &&
           comm->peers[q].bus_id == comm->peers[r].bus_id;
    if (k > most) most = k;
  }
  return most;
}

/* See comm.h. */
int brd_comm_all_in_process(const struct ncclComm *comm) {
  if (comm->peers == NULL) return comm->nranks == 1;
  for (int r = 0; r < comm->nranks; r++)
    if (comm->peers[r].pid_hash != comm->peers[comm->rank].pid_hash) return 0;
  return 1;
}
