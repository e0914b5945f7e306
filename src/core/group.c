/*
 * Braid: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.
 */
#include "api.h"
#include "check.h"
#include "group.h"

static _Thread_local int group_depth;

int brd_group_depth(void) { return group_depth; }

BRD_API(ncclResult_t, ncclGroupStart, void)
ncclResult_t pncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

static ncclResult_t group_end(const char *fn) {
  if (group_depth == 0) {
    WARN("%s: not in a group call; every ncclGroupEnd needs a matching "
         "ncclGroupStart on the same thread", fn);
    return ncclInvalidUsage;
  }
  group_depth--;
  return ncclSuccess;
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
  CHECK(group_end("ncclGroupSimulateEnd"));
  return brd_api_not_implemented("ncclGroupSimulateEnd");
}
