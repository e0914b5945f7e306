/*
 * Braid: the host half of the device API (NCCL's nccl_device headers).
 *
 * The device API lets user kernels talk to peers directly. Its host entry
 * points describe teams of ranks, size the resources a kernel will need
 * ("requirements") and create the device-side communicator. This header
 * declares the types those entry points take, with NCCL 2.30.7's names and
 * byte layouts (LP64), and the entry points themselves.
 *
 * Teams. A team is an arithmetic progression of world ranks: nRanks
 * members, the caller being member `rank`, consecutive members `stride`
 * world ranks apart.
 *   world: every rank, stride 1.
 *   lsa:   the ranks that can load/store each other's memory, i.e. a block
 *          of consecutive world ranks on one host, stride 1.
 *   rail:  the ranks with the same position in their lsa team, stride lsa
 *          size.
 * The lsa size is the same on every rank: the greatest common divisor of
 * the lengths of the runs of consecutive world ranks that share a host
 * (brd_devapi_lsa_size), so every lsa team lies within one host and starts
 * at a multiple of the lsa size.
 */
#ifndef BRD_CORE_DEVAPI_H
#define BRD_CORE_DEVAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Contexts of the GPU-initiated network (NCCL_GIN_MAX_CONTEXTS). */
#define BRD_DEVAPI_GIN_MAX_CONTEXTS 4

typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;

/* The device-side communicator. Braid does not create one (see
 * ncclDevCommCreate), so its layout is left undeclared; only pointers to it
 * pass through. */
struct ncclDevComm;
typedef struct ncclDevComm ncclDevComm_t;

/* A team of ranks; see the top of this file. Returned by value. */
typedef struct ncclTeam ncclTeam_t;
struct ncclTeam {
  int nRanks, rank, stride;
};

/* A multicast mapping of a team's memory. */
typedef struct ncclMultimemHandle ncclMultimemHandle_t;
struct ncclMultimemHandle {
  void *mcBasePtr;           /* device address of the multicast range */
};

/* Handles the requirement calls fill in; bufHandle (and signal0) receive
 * their values only when ncclDevCommCreate places the resources. */
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
};

typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t unused;  /* bufHandle before 2.30; Braid still
                                    * points the requirement's buffer
                                    * handle here */
};

typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;
struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
};

/* One resource a kernel needs: a buffer in the communicator's resource
 * window and/or network signals and counters. The out* pointers (borrowed,
 * may be NULL) say where ncclDevCommCreate writes what it assigned. */
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
struct ncclDevResourceRequirements {
  ncclDevResourceRequirements_t *next;      /* borrowed; singly linked */
  size_t bufferSize, bufferAlign;           /* bytes */
  ncclDevResourceHandle_t *outBufferHandle; /* borrowed */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t *outGinSignalStart;       /* borrowed */
  ncclGinCounter_t *outGinCounterStart;     /* borrowed */
};

/* A team that needs its own multicast mapping. */
typedef struct ncclTeamRequirements ncclTeamRequirements_t;
struct ncclTeamRequirements {
  ncclTeamRequirements_t *next;             /* borrowed; singly linked */
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t *outMultimemHandle;  /* borrowed, may be NULL */
};

/* How GPU-initiated networking connects the ranks. */
typedef enum {
  NCCL_GIN_CONNECTION_NONE,
  NCCL_GIN_CONNECTION_FULL,
  NCCL_GIN_CONNECTION_RAIL,
} ncclGinConnectionType_t;

/* Everything ncclDevCommCreate is asked to provide. Since 2.29 it starts
 * with size, magic and version (NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER);
 * a 2.28 struct starts with resourceRequirementsList instead, which
 * devapi.c tells apart by the magic at offset 8. */
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
struct ncclDevCommRequirements {
  size_t size;               /* set by the initializer */
  unsigned int magic;        /* NCCL_API_MAGIC */
  unsigned int version;      /* the header's NCCL_VERSION_CODE */
  ncclDevResourceRequirements_t *resourceRequirementsList; /* borrowed */
  ncclTeamRequirements_t *teamRequirementsList;            /* borrowed */
  bool lsaMultimem;          /* multicast mapping for the lsa team */
  int barrierCount;          /* barriers over the world team */
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount;       /* a hint */
  int ginSignalCount;        /* numbered from 0 */
  int ginCounterCount;       /* numbered from 0 */
  ncclGinConnectionType_t ginConnectionType;
  bool ginExclusiveContexts;
  int ginQueueDepth;
  int ginTrafficClass;
  int worldGinBarrierCount;
  bool ginStrongSignalsRequired;
  bool ginVaSignalsRequired;
};

#define NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER {                              \
    sizeof(ncclDevCommRequirements_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,     \
    NULL, NULL,      /* resource and team lists */                            \
    false,           /* lsaMultimem */                                        \
    0, 0, 0,         /* barrierCount, lsaBarrierCount, railGinBarrierCount */ \
    0, 0,            /* lsaLLA2ABlockCount, lsaLLA2ASlotCount */              \
    false,           /* ginForceEnable */                                     \
    4, 0, 0,         /* ginContextCount, ginSignalCount, ginCounterCount */   \
    NCCL_GIN_CONNECTION_NONE, false, 0,                                       \
    NCCL_CONFIG_UNDEF_INT, /* ginTrafficClass */                              \
    0,               /* worldGinBarrierCount */                               \
    true, true,      /* ginStrongSignalsRequired, ginVaSignalsRequired */     \
}

/* Kinds of GPU-initiated networking. */
typedef enum {
  NCCL_GIN_TYPE_NONE = 0,
  NCCL_GIN_TYPE_PROXY = 2,
  NCCL_GIN_TYPE_GDAKI = 3,
  NCCL_GIN_TYPE_GPI = 4,
} ncclGinType_t;

/* What ncclCommQueryProperties reports; start from the initializer. */
typedef struct ncclCommProperties ncclCommProperties_t;
struct ncclCommProperties {
  size_t size;               /* set by the initializer */
  unsigned int magic;        /* NCCL_API_MAGIC */
  unsigned int version;      /* the header's NCCL_VERSION_CODE */
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  ncclGinType_t ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  ncclGinType_t railedGinType;
};

/* NCCL's sets size, magic and version only; the rest is spelled out as
 * zeros (the same values) so -Wextra builds stay quiet. */
#define NCCL_COMM_PROPERTIES_INITIALIZER                                      \
  { sizeof(ncclCommProperties_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,          \
    0, 0, 0, 0, false, false, NCCL_GIN_TYPE_NONE, 0, false, NCCL_GIN_TYPE_NONE }

/* Handles of the GPU-initiated networking requirement calls. */
typedef struct ncclGinOutboxHandle ncclGinOutboxHandle;
struct ncclGinOutboxHandle {
  ncclDevResourceHandle bufHandle;
  uint32_t size_log2;
};
typedef struct ncclGinInboxA2AHandle ncclGinInboxA2AHandle;
struct ncclGinInboxA2AHandle {
  ncclDevResourceHandle bufHandle;
  ncclGinSignal_t signals;
  uint32_t size_log2;
  uint32_t nPeers_rcp32;
};
/* NCCL spells these without _t in some prototypes (C++ names). */
typedef struct ncclTeam ncclTeam;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements;

#ifndef __cplusplus
/* NCCL's layouts on LP64, byte for byte. */
_Static_assert(sizeof(void *) == 8, "the device API layouts assume LP64");
_Static_assert(sizeof(struct ncclTeam) == 12, "ncclTeam layout");
_Static_assert(sizeof(struct ncclMultimemHandle) == 8, "ncclMultimemHandle layout");
_Static_assert(sizeof(struct ncclLsaBarrierHandle) == 8, "ncclLsaBarrierHandle layout");
_Static_assert(sizeof(struct ncclGinBarrierHandle) == 8, "ncclGinBarrierHandle layout");
_Static_assert(sizeof(struct ncclLLA2AHandle) == 8, "ncclLLA2AHandle layout");
_Static_assert(sizeof(struct ncclDevResourceRequirements) == 56, "ncclDevResourceRequirements layout");
_Static_assert(offsetof(struct ncclDevResourceRequirements, ginSignalCount) == 32, "ncclDevResourceRequirements layout");
_Static_assert(sizeof(struct ncclTeamRequirements) == 32, "ncclTeamRequirements layout");
_Static_assert(offsetof(struct ncclTeamRequirements, multimem) == 20, "ncclTeamRequirements layout");
_Static_assert(sizeof(struct ncclDevCommRequirements) == 96, "ncclDevCommRequirements layout");
_Static_assert(offsetof(struct ncclDevCommRequirements, resourceRequirementsList) == 16, "ncclDevCommRequirements layout");
_Static_assert(offsetof(struct ncclDevCommRequirements, ginForceEnable) == 56, "ncclDevCommRequirements layout");
_Static_assert(sizeof(struct ncclCommProperties) == 56, "ncclCommProperties layout");
_Static_assert(offsetof(struct ncclCommProperties, railedGinType) == 48, "ncclCommProperties layout");
#endif

/* The public entry points and their pnccl twins (defined in devapi.c). */
ncclResult_t  ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm);
ncclResult_t  ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);
ncclTeam_t  ncclTeamWorld(ncclComm_t comm);
ncclTeam_t pncclTeamWorld(ncclComm_t comm);
ncclTeam_t  ncclTeamLsa(ncclComm_t comm);
ncclTeam_t pncclTeamLsa(ncclComm_t comm);
ncclTeam_t  ncclTeamRail(ncclComm_t comm);
ncclTeam_t pncclTeamRail(ncclComm_t comm);
int  ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int  ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
ncclResult_t  ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);
ncclResult_t  ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);
int  ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t  ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle, ncclDevResourceRequirements_t *outReq);

ncclResult_t  ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props);
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props);
ncclResult_t  ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void **outPtr);
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void **outPtr);
ncclResult_t  ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, ncclMultimemHandle_t multimem, void **outPtr);
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, ncclMultimemHandle_t multimem, void **outPtr);
ncclResult_t  ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void **outPtr);
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void **outPtr);
ncclResult_t  ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void **outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void **outPtr);
ncclResult_t  ncclGinOutboxCreateRequirement(int nBlocks, int size_log2, ncclGinOutboxHandle *outHandle, ncclDevResourceRequirements *outReq);
ncclResult_t pncclGinOutboxCreateRequirement(int nBlocks, int size_log2, ncclGinOutboxHandle *outHandle, ncclDevResourceRequirements *outReq);
ncclResult_t  ncclGinInboxA2ACreateRequirement(ncclTeam peers, int nBlocks, int size_log2, ncclGinInboxA2AHandle *outHandle, ncclDevResourceRequirements *outReq);
ncclResult_t pncclGinInboxA2ACreateRequirement(ncclTeam peers, int nBlocks, int size_log2, ncclGinInboxA2AHandle *outHandle, ncclDevResourceRequirements *outReq);

struct brd_peer_info;   /* device.h */

/* NCCL's lsa size for a communicator whose rank r runs on the host named
 * by peers[r].host_hash (nranks entries): the gcd of the lengths of the
 * maximal runs of consecutive ranks on one host. Returns 0 when nranks < 1
 * or peers is NULL. Pure; any thread. */
int brd_devapi_lsa_size(const struct brd_peer_info *peers, int nranks);

#endif /* BRD_CORE_DEVAPI_H */
