/*
 * Prints the layout of the device API's host-visible types. run.sh builds
 * it as C against Braid's src/core/devapi.h and, where NVIDIA's headers are
 * installed, as C++ against <nccl_device.h> (-DBRAID_REF_DEVICE), and
 * requires identical output.
 */
#include <stddef.h>
#include <stdio.h>

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
  FIELD(ncclGinBarrierHandle_t, bufHandle);

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
#ifdef BRAID_REF_DEVICE
  printf("gin max contexts %d\n", NCCL_GIN_MAX_CONTEXTS);
#else
  printf("gin max contexts %d\n", BRD_DEVAPI_GIN_MAX_CONTEXTS);
#endif
  return 0;
}
