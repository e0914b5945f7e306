/*
 * Prints the layout of the device API's host-visible types. run.sh builds
 * it as C against Braid's src/core/devapi.h and, where NVIDIA's headers are
 * installed, as C++ against <nccl_device.h> (-DBRAID_REF_DEVICE), and
 * requires identical output.
 */
#include <stddef.h>
#include <stdio.h>

/* The initializers fill the leading fields only, as NCCL's do. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#ifdef BRAID_REF_DEVICE
#include <cuda_runtime.h>
#include <nccl_device.h>
#else
#include "core/devapi.h"
#endif

#define SIZE(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define FIELD(t, f)                                                           \
  printf("field %s.%s offset %zu size %zu\n", #t, #f, offsetof(t, f),         \
         sizeof(((t *)0)->f))

int main(void) {
  SIZE(ncclDevResourceHandle_t);
  SIZE(ncclGinSignal_t);
  SIZE(ncclGinCounter_t);

  SIZE(ncclTeam_t);
  FIELD(ncclTeam_t, nRanks);
  FIELD(ncclTeam_t, rank);
  FIELD(ncclTeam_t, stride);

  SIZE(ncclMultimemHandle_t);
  FIELD(ncclMultimemHandle_t, mcBasePtr);

  SIZE(ncclLsaBarrierHandle_t);
  FIELD(ncclLsaBarrierHandle_t, bufHandle);
  FIELD(ncclLsaBarrierHandle_t, nBarriers);

  SIZE(ncclGinBarrierHandle_t);
  FIELD(ncclGinBarrierHandle_t, signal0);
  FIELD(ncclGinBarrierHandle_t, unused);

  SIZE(ncclLLA2AHandle_t);
  FIELD(ncclLLA2AHandle_t, bufHandle);
  FIELD(ncclLLA2AHandle_t, nSlots);

  SIZE(ncclDevResourceRequirements_t);
  FIELD(ncclDevResourceRequirements_t, next);
  FIELD(ncclDevResourceRequirements_t, bufferSize);
  FIELD(ncclDevResourceRequirements_t, bufferAlign);
  FIELD(ncclDevResourceRequirements_t, outBufferHandle);
  FIELD(ncclDevResourceRequirements_t, ginSignalCount);
  FIELD(ncclDevResourceRequirements_t, ginCounterCount);
  FIELD(ncclDevResourceRequirements_t, outGinSignalStart);
  FIELD(ncclDevResourceRequirements_t, outGinCounterStart);

  SIZE(ncclTeamRequirements_t);
  FIELD(ncclTeamRequirements_t, next);
  FIELD(ncclTeamRequirements_t, team);
  FIELD(ncclTeamRequirements_t, multimem);
  FIELD(ncclTeamRequirements_t, outMultimemHandle);

  SIZE(ncclDevCommRequirements_t);
  FIELD(ncclDevCommRequirements_t, size);
  FIELD(ncclDevCommRequirements_t, magic);
  FIELD(ncclDevCommRequirements_t, version);
  FIELD(ncclDevCommRequirements_t, resourceRequirementsList);
  FIELD(ncclDevCommRequirements_t, teamRequirementsList);
  FIELD(ncclDevCommRequirements_t, lsaMultimem);
  FIELD(ncclDevCommRequirements_t, barrierCount);
  FIELD(ncclDevCommRequirements_t, lsaBarrierCount);
  FIELD(ncclDevCommRequirements_t, railGinBarrierCount);
  FIELD(ncclDevCommRequirements_t, lsaLLA2ABlockCount);
  FIELD(ncclDevCommRequirements_t, lsaLLA2ASlotCount);
  FIELD(ncclDevCommRequirements_t, ginForceEnable);
  FIELD(ncclDevCommRequirements_t, ginContextCount);
  FIELD(ncclDevCommRequirements_t, ginSignalCount);
  FIELD(ncclDevCommRequirements_t, ginCounterCount);
  FIELD(ncclDevCommRequirements_t, ginConnectionType);
  FIELD(ncclDevCommRequirements_t, ginExclusiveContexts);
  FIELD(ncclDevCommRequirements_t, ginQueueDepth);
  FIELD(ncclDevCommRequirements_t, ginTrafficClass);
  FIELD(ncclDevCommRequirements_t, worldGinBarrierCount);
  FIELD(ncclDevCommRequirements_t, ginStrongSignalsRequired);
  FIELD(ncclDevCommRequirements_t, ginVaSignalsRequired);
  {
    ncclDevCommRequirements_t r = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    printf("reqs init size %zu magic %#x version %u ginContextCount %d "
           "ginTrafficClass %d strong %d va %d\n", r.size, r.magic, r.version,
           r.ginContextCount, r.ginTrafficClass, (int)r.ginStrongSignalsRequired,
           (int)r.ginVaSignalsRequired);
  }

  SIZE(ncclCommProperties_t);
  FIELD(ncclCommProperties_t, size);
  FIELD(ncclCommProperties_t, magic);
  FIELD(ncclCommProperties_t, version);
  FIELD(ncclCommProperties_t, rank);
  FIELD(ncclCommProperties_t, nRanks);
  FIELD(ncclCommProperties_t, cudaDev);
  FIELD(ncclCommProperties_t, nvmlDev);
  FIELD(ncclCommProperties_t, deviceApiSupport);
  FIELD(ncclCommProperties_t, multimemSupport);
  FIELD(ncclCommProperties_t, ginType);
  FIELD(ncclCommProperties_t, nLsaTeams);
  FIELD(ncclCommProperties_t, hostRmaSupport);
  FIELD(ncclCommProperties_t, railedGinType);
  {
    ncclCommProperties_t p = NCCL_COMM_PROPERTIES_INITIALIZER;
    printf("props init size %zu magic %#x version %u\n", p.size, p.magic, p.version);
  }
  printf("enum NCCL_GIN_CONNECTION_NONE %d FULL %d RAIL %d\n", (int)NCCL_GIN_CONNECTION_NONE,
         (int)NCCL_GIN_CONNECTION_FULL, (int)NCCL_GIN_CONNECTION_RAIL);
  printf("enum NCCL_GIN_TYPE_NONE %d PROXY %d GDAKI %d GPI %d\n", (int)NCCL_GIN_TYPE_NONE,
         (int)NCCL_GIN_TYPE_PROXY, (int)NCCL_GIN_TYPE_GDAKI, (int)NCCL_GIN_TYPE_GPI);
  return 0;
}
