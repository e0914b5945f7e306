/*
 * Braid: the host half of the device API (NCCL's nccl_device headers).
 *
 * The device API lets user kernels talk to peers directly. Its host entry
 * points describe teams of ranks, size the resources a kernel will need
 * ("requirements") and create the device-side communicator. This header
 * declares the types those entry points take, with NCCL 2.28.9's names and
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
  ncclDevResourceHandle_t bufHandle;
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

/* Everything ncclDevCommCreate is asked to provide. */
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
struct ncclDevCommRequirements {
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
};

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
_Static_assert(sizeof(struct ncclDevCommRequirements) == 56, "ncclDevCommRequirements layout");
_Static_assert(offsetof(struct ncclDevCommRequirements, ginForceEnable) == 40, "ncclDevCommRequirements layout");
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

struct brd_peer_info;   /* device.h */

/* NCCL's lsa size for a communicator whose rank r runs on the host named
 * by peers[r].host_hash (nranks entries): the gcd of the lengths of the
 * maximal runs of consecutive ranks on one host. Returns 0 when nranks < 1
 * or peers is NULL. Pure; any thread. */
int brd_devapi_lsa_size(const struct brd_peer_info *peers, int nranks);

#endif /* BRD_CORE_DEVAPI_H */
