/*
 * Braid: host entry points of the device API — teams, resource
 * requirements, and the device communicator.
 *
 * Teams and requirements are arithmetic and behave as NCCL's do. Creating a
 * device communicator needs symmetric GPU memory, which Braid does not
 * provide: ncclDevCommCreate validates its arguments and then reports that
 * it is not implemented.
 *
 * Calls returning a team or a rank cannot report errors; on a bad
 * communicator they WARN and return a zeroed team or -1, as NCCL does when
 * it cannot set up its device runtime.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/api.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/devapi.h"
#include "core/gpu.h"
#include "core/rma.h"
#include "transport/nvls.h"

/* Every requirement buffer is a whole number of these (NCCL's sizes). */
#define DEVAPI_LSA_BARRIER_WORD sizeof(uint32_t)
#define DEVAPI_GIN_BARRIER_WORD sizeof(uint32_t)
#define DEVAPI_LLA2A_LINE 16u   /* one LL line: 8 data bytes, 8 flag bytes */
#define DEVAPI_LLA2A_ELT_BYTES 8 /* payload bytes one slot carries */

static int devapi_gcd(int a, int b) {
  while (b != 0) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* See devapi.h. */
int brd_devapi_lsa_size(const struct brd_peer_info *peers, int nranks) {
  int lsa = 0;
  int run = 1;
  if (peers == NULL || nranks < 1) return 0;
  for (int r = 1; r < nranks; r++) {
    if (peers[r].host_hash == peers[r - 1].host_hash) {
      run++;
    } else {
      lsa = devapi_gcd(lsa, run);
      run = 1;
    }
  }
  return devapi_gcd(lsa, run);
}

/*
 * The lsa team of a ready communicator as (size, caller's index).
 *
 * With the peer table from init, this is NCCL's rule exactly, and the
 * caller's index is rank % size (lsa teams start at multiples of the size).
 * A communicator without a peer table knows only the caller's own host
 * group (local_rank of local_nranks); when that group is a block of
 * local_nranks consecutive ranks starting at a multiple of local_nranks
 * (equal hosts filled in order, as mpirun, srun and torchrun place ranks)
 * it is the lsa team, otherwise the lsa team is the caller alone, which is
 * always a valid team.
 */
static void devapi_lsa(const struct ncclComm *comm, int *size_out,
                       int *self_out) {
  int size = 1;
  int n = comm->local_nranks;
  if (comm->peers != NULL) {
    size = brd_devapi_lsa_size(comm->peers, comm->nranks);
  } else if (n >= 1 && comm->nranks % n == 0 &&
             comm->local_rank == comm->rank % n) {
    size = n;
  }
  *size_out = size;
  *self_out = comm->rank % size;
}

/* brd_comm_check plus NCCL's readiness rule: a communicator still inside a
 * nonblocking operation (async_error ncclInProgress) is ncclInvalidArgument.
 * Loading async_error first (acquire) makes init's writes visible. */
static ncclResult_t devapi_comm_ready(struct ncclComm *comm, const char *fn) {
  CHECK(brd_comm_check(comm, fn));
  if (atomic_load_explicit(&comm->async_error, memory_order_acquire) ==
      ncclInProgress) {
    WARN("%s : the communicator is still busy with a nonblocking operation; "
         "call it after ncclCommGetAsyncError reports ncclSuccess", fn);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Creation needs symmetric device memory, which Braid lacks; arguments are
 * still checked first so misuse gets NCCL's codes. Any thread; does not
 * block. Writes nothing to *outDevComm. */
BRD_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm,
        ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm)
ncclResult_t pncclDevCommCreate(ncclComm_t comm,
                                ncclDevCommRequirements_t const *reqs,
                                ncclDevComm_t *outDevComm) {
  unsigned int magic;
  CHECK(devapi_comm_ready(comm, "ncclDevCommCreate"));
  ARG_NOT_NULL(reqs, "ncclDevCommCreate");
  ARG_NOT_NULL(outDevComm, "ncclDevCommCreate");
  /* 2.29 put size/magic/version in front; a 2.28 program's struct has
   * its team list pointer there instead. The magic at offset 8 tells. */
  memcpy(&magic, (const char *)reqs + offsetof(ncclDevCommRequirements_t, magic),
         sizeof(magic));
  INFO(BRD_SUBSYS_INIT, "ncclDevCommCreate : requirements in the %s layout",
       magic == NCCL_API_MAGIC ? "2.29+ (size/magic/version)" : "2.28");
  return brd_api_not_implemented("ncclDevCommCreate");
}

/* devComm NULL is a no-op. Since ncclDevCommCreate never succeeds, any other
 * devComm was not made by this library: reported as not implemented. Any
 * thread; does not block. */
BRD_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm,
        ncclDevComm_t const *devComm)
ncclResult_t pncclDevCommDestroy(ncclComm_t comm,
                                 ncclDevComm_t const *devComm) {
  CHECK(brd_comm_check(comm, "ncclDevCommDestroy"));
  if (devComm == NULL) return ncclSuccess;
  return brd_api_not_implemented("ncclDevCommDestroy");
}

/* {nranks, rank, 1}; zeroed on a bad comm. Any thread. */
BRD_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm)
ncclTeam_t pncclTeamWorld(ncclComm_t comm) {
  ncclTeam_t team = {0, 0, 0};
  if (devapi_comm_ready(comm, "ncclTeamWorld") != ncclSuccess) return team;
  team.nRanks = comm->nranks;
  team.rank = comm->rank;
  team.stride = 1;
  return team;
}

/* {lsa size, index in it, 1}; zeroed on a bad comm. Any thread. */
BRD_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm)
ncclTeam_t pncclTeamLsa(ncclComm_t comm) {
  ncclTeam_t team = {0, 0, 0};
  int size, self;
  if (devapi_comm_ready(comm, "ncclTeamLsa") != ncclSuccess) return team;
  devapi_lsa(comm, &size, &self);
  team.nRanks = size;
  team.rank = self;
  team.stride = 1;
  return team;
}

/* The ranks at the caller's lsa index on every host:
 * {nranks / lsa, rank / lsa, lsa}; zeroed on a bad comm. Any thread. */
BRD_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm)
ncclTeam_t pncclTeamRail(ncclComm_t comm) {
  ncclTeam_t team = {0, 0, 0};
  int size, self;
  if (devapi_comm_ready(comm, "ncclTeamRail") != ncclSuccess) return team;
  devapi_lsa(comm, &size, &self);
  team.nRanks = comm->nranks / size;
  team.rank = comm->rank / size;
  team.stride = size;
  return team;
}

/* self + (rank - team.rank) * team.stride: where member `rank` of a team
 * containing the caller lands in a reference team (world or lsa) in which
 * the caller is member `self`. 64-bit, so no input overflows. */
static int64_t devapi_rank_map(ncclTeam_t team, int rank, int self) {
  return (int64_t)self + ((int64_t)rank - team.rank) * team.stride;
}

/* World rank of team member `rank`. NCCL returns the bare formula; here a
 * result outside [0, nranks) — a team not from this communicator, or a rank
 * outside [0, team.nRanks) — gets a WARN and -1. -1 on a bad comm too. Any
 * thread. */
BRD_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank)
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  int64_t world;
  if (devapi_comm_ready(comm, "ncclTeamRankToWorld") != ncclSuccess) return -1;
  world = devapi_rank_map(team, rank, comm->rank);
  if (world < 0 || world >= comm->nranks) {
    WARN("ncclTeamRankToWorld : member %d of team {nRanks %d, rank %d, "
         "stride %d} would be world rank %lld, outside [0, %d); pass a team "
         "from this communicator and a member index in [0, nRanks)",
         rank, team.nRanks, team.rank, team.stride, (long long)world,
         comm->nranks);
    return -1;
  }
  return (int)world;
}

/* Index in the caller's lsa team of team member `rank`, or -1 when that
 * member is not in the lsa team (another host: a plain answer, logged at
 * INFO) or comm is bad. NCCL returns the bare formula there. Any thread. */
BRD_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank)
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  int size, self;
  int64_t lsa;
  if (devapi_comm_ready(comm, "ncclTeamRankToLsa") != ncclSuccess) return -1;
  devapi_lsa(comm, &size, &self);
  lsa = devapi_rank_map(team, rank, self);
  if (lsa < 0 || lsa >= size) {
    INFO(BRD_SUBSYS_INIT, "ncclTeamRankToLsa : member %d of team {nRanks %d, "
         "rank %d, stride %d} is not in rank %d's lsa team of %d",
         rank, team.nRanks, team.rank, team.stride, comm->rank, size);
    return -1;
  }
  return (int)lsa;
}

/* Checks a count argument of a requirement call. */
static ncclResult_t devapi_count_check(const char *fn, const char *what,
                                       int value) {
  if (value < 0) {
    WARN("%s : %s is %d; it must be zero or more", fn, what, value);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* a*b*c bytes, or ncclInvalidArgument when that does not fit a size_t. */
static ncclResult_t devapi_bytes(const char *fn, size_t a, size_t b, size_t c,
                                 size_t *bytes_out) {
  size_t ab, abc;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) {
    WARN("%s : the requested buffer (%zu x %zu x %zu bytes) does not fit in "
         "memory; ask for fewer barriers, blocks or slots", fn, a, b, c);
    return ncclInvalidArgument;
  }
  *bytes_out = abc;
  return ncclSuccess;
}

/* Sizes nBarriers barriers over `team`: per barrier three words of state
 * plus one inbox word per member. Fills *outReq (its outBufferHandle points
 * at outHandle->bufHandle) and outHandle->nBarriers. Pure; any thread. */
BRD_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team,
        int nBarriers, ncclLsaBarrierHandle_t *outHandle,
        ncclDevResourceRequirements_t *outReq)
ncclResult_t pncclLsaBarrierCreateRequirement(
    ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
    ncclDevResourceRequirements_t *outReq) {
  static const char fn[] = "ncclLsaBarrierCreateRequirement";
  size_t bytes;
  ARG_NOT_NULL(outHandle, fn);
  ARG_NOT_NULL(outReq, fn);
  CHECK(devapi_count_check(fn, "nBarriers", nBarriers));
  CHECK(devapi_count_check(fn, "team.nRanks", team.nRanks));
  CHECK(devapi_bytes(fn, (size_t)nBarriers, 3 + (size_t)team.nRanks,
                     DEVAPI_LSA_BARRIER_WORD, &bytes));
  memset(outReq, 0, sizeof(*outReq));
  outReq->bufferSize = bytes;
  outReq->bufferAlign = DEVAPI_LSA_BARRIER_WORD;
  outReq->outBufferHandle = &outHandle->bufHandle;
  outHandle->nBarriers = nBarriers;
  return ncclSuccess;
}

/* Sizes nBarriers network barriers: one word per barrier per GIN context
 * and one signal per barrier. Fills *outReq (buffer handle and first signal
 * land in *outHandle at creation). team is unused, as in NCCL. Any thread. */
BRD_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm,
        ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle,
        ncclDevResourceRequirements_t *outReq)
ncclResult_t pncclGinBarrierCreateRequirement(
    ncclComm_t comm, ncclTeam_t team, int nBarriers,
    ncclGinBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq) {
  static const char fn[] = "ncclGinBarrierCreateRequirement";
  (void)team;
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(outHandle, fn);
  ARG_NOT_NULL(outReq, fn);
  CHECK(devapi_count_check(fn, "nBarriers", nBarriers));
  memset(outReq, 0, sizeof(*outReq));
  /* At most 2^31 * 16 bytes: cannot overflow a 64-bit size_t. */
  outReq->bufferSize =
      (size_t)nBarriers * BRD_DEVAPI_GIN_MAX_CONTEXTS * DEVAPI_GIN_BARRIER_WORD;
  outReq->bufferAlign = DEVAPI_GIN_BARRIER_WORD;
  outReq->outBufferHandle = &outHandle->unused;
  outReq->ginSignalCount = nBarriers;
  outReq->outGinSignalStart = &outHandle->signal0;
  return ncclSuccess;
}

/* Slots an all-to-all exchange needs for maxElts elements of maxEltSize
 * bytes: one slot carries 8 bytes, so maxElts * ceil(maxEltSize / 8).
 * -1 with a WARN on a negative argument or a count beyond INT_MAX. Pure. */
BRD_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize)
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  int64_t slots;
  if (maxElts < 0 || maxEltSize < 0) {
    WARN("ncclLLA2ACalcSlots : maxElts %d and maxEltSize %d must be zero or "
         "more", maxElts, maxEltSize);
    return -1;
  }
  slots = (int64_t)maxElts *
          (((int64_t)maxEltSize + DEVAPI_LLA2A_ELT_BYTES - 1) /
           DEVAPI_LLA2A_ELT_BYTES);
  if (slots > INT32_MAX) {
    WARN("ncclLLA2ACalcSlots : %d elements of %d bytes need %lld slots, more "
         "than an int holds; exchange fewer or smaller elements",
         maxElts, maxEltSize, (long long)slots);
    return -1;
  }
  return (int)slots;
}

/* Sizes an all-to-all area for nBlocks thread blocks of nSlots slots each:
 * per block one header line and two banks of nSlots lines (alternate
 * epochs), 16-byte lines. Sets outHandle->nSlots and fills *outReq. Pure;
 * any thread. */
BRD_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots,
        ncclLLA2AHandle_t *outHandle, ncclDevResourceRequirements_t *outReq)
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots,
                                         ncclLLA2AHandle_t *outHandle,
                                         ncclDevResourceRequirements_t *outReq) {
  static const char fn[] = "ncclLLA2ACreateRequirement";
  size_t bytes;
  ARG_NOT_NULL(outHandle, fn);
  ARG_NOT_NULL(outReq, fn);
  CHECK(devapi_count_check(fn, "nBlocks", nBlocks));
  CHECK(devapi_count_check(fn, "nSlots", nSlots));
  CHECK(devapi_bytes(fn, (size_t)nBlocks, 1 + 2 * (size_t)nSlots,
                     DEVAPI_LLA2A_LINE, &bytes));
  memset(outReq, 0, sizeof(*outReq));
  outReq->bufferSize = bytes;
  outReq->bufferAlign = DEVAPI_LLA2A_LINE;
  outReq->outBufferHandle = &outHandle->bufHandle;
  outHandle->nSlots = (uint32_t)nSlots;
  return ncclSuccess;
}

/* Fills what the caller's struct has room for (its size field says, as
 * with ncclConfig_t), after checking the initializer's magic. Braid has no
 * device communicator, multicast or GPU-initiated networking yet, and its
 * one-sided calls are not implemented, so those answers are false/none.
 * nvmlDev is the CUDA device index (NVML's numbering differs only under
 * CUDA_VISIBLE_DEVICES). Any thread; does not block. */
BRD_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm,
        ncclCommProperties_t *props)
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props) {
  static const char fn[] = "ncclCommQueryProperties";
  ncclCommProperties_t p;
  size_t size;
  int lsa, self;
  CHECK(devapi_comm_ready(comm, fn));
  ARG_NOT_NULL(props, fn);
  memcpy(&size, props, sizeof(size));
  if (size < offsetof(ncclCommProperties_t, rank) || props->magic != NCCL_API_MAGIC) {
    WARN("%s : props (size %zu, magic 0x%x) was not set from "
         "NCCL_COMM_PROPERTIES_INITIALIZER; initialise it first", fn, size,
         size >= offsetof(ncclCommProperties_t, rank) ? props->magic : 0u);
    return ncclInvalidArgument;
  }
  devapi_lsa(comm, &lsa, &self);
  memset(&p, 0, sizeof(p));
  p.rank = comm->rank;
  p.nRanks = comm->nranks;
  p.cudaDev = comm->cuda_dev;
  p.nvmlDev = comm->cuda_dev;
  p.deviceApiSupport = false;
  p.multimemSupport = false;
  p.ginType = NCCL_GIN_TYPE_NONE;
  p.nLsaTeams = comm->nranks / lsa;
  p.hostRmaSupport = false;
  p.railedGinType = NCCL_GIN_TYPE_NONE;
  if (size > sizeof(p)) size = sizeof(p);
  memcpy((char *)props + offsetof(ncclCommProperties_t, rank),
         (const char *)&p + offsetof(ncclCommProperties_t, rank),
         size - offsetof(ncclCommProperties_t, rank));
  return ncclSuccess;
}

/* World rank `world`'s part of a window as a pointer this process can load
 * and store, offset bytes in: ncclInvalidUsage when that part is not
 * mapped here, ncclInvalidArgument past its end. Any thread. */
static ncclResult_t devapi_window_ptr(ncclWindow_t window, size_t offset, int world,
                                      const char *fn, void **out) {
  struct ncclComm *comm;
  brd_window_view_t v;
  CHECK(brd_rma_window_comm(window, fn, &comm));
  CHECK(brd_mem_window_view(comm, window, world, fn, &v));
  if (v.peer_base == NULL) {
    WARN("%s : rank %d's part of window %p is not mapped in rank %d's process "
         "(its memory cannot be shared, e.g. GPUs without peer access)", fn, world,
         (void *)window, comm->rank);
    return ncclInvalidUsage;
  }
  if (offset >= v.peer_size) {
    WARN("%s : offset %zu is outside window %p (rank %d registered %zu bytes)", fn,
         offset, (void *)window, world, v.peer_size);
    return ncclInvalidArgument;
  }
  *out = v.peer_base + offset;
  return ncclSuccess;
}

/* Member lsaRank of the caller's lsa team; ncclInvalidArgument outside
 * [0, lsa size), as NCCL. */
BRD_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset,
        int lsaRank, void **outPtr)
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                      void **outPtr) {
  static const char fn[] = "ncclGetLsaDevicePointer";
  struct ncclComm *comm;
  int lsa, self;
  ARG_NOT_NULL(outPtr, fn);
  CHECK(brd_rma_window_comm(window, fn, &comm));
  devapi_lsa(comm, &lsa, &self);
  if (lsaRank < 0 || lsaRank >= lsa) {
    WARN("%s : lsaRank %d is outside the lsa team of window %p (0 to %d)", fn, lsaRank,
         (void *)window, lsa - 1);
    return ncclInvalidArgument;
  }
  return devapi_window_ptr(window, offset, comm->rank - self + lsaRank, fn, outPtr);
}

/* World rank peer's part of the window; NULL (and ncclSuccess) when peer
 * is not in the caller's lsa team, as NCCL. */
BRD_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset,
        int peer, void **outPtr)
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                       void **outPtr) {
  static const char fn[] = "ncclGetPeerDevicePointer";
  struct ncclComm *comm;
  int lsa, self;
  ARG_NOT_NULL(outPtr, fn);
  CHECK(brd_rma_window_comm(window, fn, &comm));
  if (peer < 0 || peer >= comm->nranks) {
    WARN("%s : peer %d is not a rank of window %p's communicator (0 to %d)", fn, peer,
         (void *)window, comm->nranks - 1);
    return ncclInvalidArgument;
  }
  devapi_lsa(comm, &lsa, &self);
  if (peer < comm->rank - self || peer >= comm->rank - self + lsa) {
    *outPtr = NULL;
    return ncclSuccess;
  }
  return devapi_window_ptr(window, offset, peer, fn, outPtr);
}

/* The multicast address of a window's byte: from the NVLS transport's
 * registry of bound windows (transport/nvls.h). mc_base NULL: the window's
 * own multicast object (the lsa team's); else the base a caller's
 * ncclMultimemHandle names, which must be that object. NVIDIA: the
 * handle's base + the window's offset in the object + offset. */
static ncclResult_t devapi_multimem(ncclWindow_t window, size_t offset, const void *mc_base,
                                    void **outPtr, const char *fn) {
  struct ncclComm *comm;
  char why[400];
  void *p = NULL;
  ARG_NOT_NULL(outPtr, fn);
  CHECK(brd_rma_window_comm(window, fn, &comm));
  ncclResult_t res = brd_nvls_window_lookup(window, offset, mc_base, &p, why, sizeof(why));
  if (res != ncclSuccess) {
    WARN("%s : %s%s", fn, why,
         res == ncclInvalidUsage ? "; use ncclGetLsaDevicePointer for each peer instead" : "");
    return res;
  }
  *outPtr = p;
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window,
        size_t offset, void **outPtr)
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                              void **outPtr) {
  return devapi_multimem(window, offset, NULL, outPtr, "ncclGetLsaMultimemDevicePointer");
}

BRD_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset,
        ncclMultimemHandle_t multimem, void **outPtr)
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                           ncclMultimemHandle_t multimem, void **outPtr) {
  static const char fn[] = "ncclGetMultimemDevicePointer";
  if (multimem.mcBasePtr == NULL) {
    struct ncclComm *comm;
    ARG_NOT_NULL(outPtr, fn);
    CHECK(brd_rma_window_comm(window, fn, &comm));
    WARN("%s : the ncclMultimemHandle has no multicast base (mcBasePtr is NULL): NVLS is "
         "not bound for it (Braid's ncclDevCommCreate makes no multicast object); use "
         "ncclGetLsaMultimemDevicePointer for a window's own mapping", fn);
    return ncclInvalidUsage;
  }
  return devapi_multimem(window, offset, multimem.mcBasePtr, outPtr, fn);
}

static ncclResult_t devapi_no_gin(const char *fn) {
  WARN("%s : braid %s has no GPU-initiated networking (GIN) yet; kernels cannot "
       "use GIN outboxes or inboxes", fn, BRAID_VERSION);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int size_log2,
        ncclGinOutboxHandle *outHandle, ncclDevResourceRequirements *outReq)
ncclResult_t pncclGinOutboxCreateRequirement(int nBlocks, int size_log2,
                                             ncclGinOutboxHandle *outHandle,
                                             ncclDevResourceRequirements *outReq) {
  static const char fn[] = "ncclGinOutboxCreateRequirement";
  ARG_NOT_NULL(outHandle, fn);
  ARG_NOT_NULL(outReq, fn);
  CHECK(devapi_count_check(fn, "nBlocks", nBlocks));
  CHECK(devapi_count_check(fn, "size_log2", size_log2));
  return devapi_no_gin(fn);
}

BRD_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, ncclTeam peers, int nBlocks,
        int size_log2, ncclGinInboxA2AHandle *outHandle, ncclDevResourceRequirements *outReq)
ncclResult_t pncclGinInboxA2ACreateRequirement(ncclTeam peers, int nBlocks, int size_log2,
                                               ncclGinInboxA2AHandle *outHandle,
                                               ncclDevResourceRequirements *outReq) {
  static const char fn[] = "ncclGinInboxA2ACreateRequirement";
  ARG_NOT_NULL(outHandle, fn);
  ARG_NOT_NULL(outReq, fn);
  CHECK(devapi_count_check(fn, "peers.nRanks", peers.nRanks));
  CHECK(devapi_count_check(fn, "nBlocks", nBlocks));
  CHECK(devapi_count_check(fn, "size_log2", size_log2));
  return devapi_no_gin(fn);
}
