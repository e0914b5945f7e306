/*
 * Braid: communicator helpers shared by every entry point.
 */
#include <stddef.h>

#include "check.h"
#include "comm.h"

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
