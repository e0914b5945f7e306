/*
 * nccl.h: the public interface of Braid, a collective-communication library
 * for NVIDIA GPUs.
 *
 * The types, constants and calls below have the same names, values, layouts
 * and signatures as NCCL 2.30.7, so programs built against NCCL's header run
 * against Braid's libnccl.so.2 unchanged, and the reverse. Programs built
 * against an older NCCL header (2.28, 2.29) run too: the structs they pass
 * carry their own size and version.
 *
 * CUDA: the header pulls in the CUDA runtime (for cudaStream_t) and the
 * half/bfloat16 headers, as NCCL's does. A build without CUDA defines
 * BRAID_NO_CUDA, or simply lacks <cuda_runtime.h>; the header then declares
 * cudaStream_t itself, with the CUDA runtime's definition, and nothing else
 * changes.
 *
 * Every call has a twin named pnccl<Name>. nccl<Name> is a weak alias of
 * pnccl<Name>, so a profiling layer can provide its own nccl<Name> and
 * forward to pnccl<Name>.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if !defined(BRAID_NO_CUDA) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define BRAID_NCCL_H_HAVE_CUDA 1
#endif
#elif !defined(BRAID_NO_CUDA)
/* A compiler without __has_include: assume CUDA is there, as NCCL does. */
#define BRAID_NCCL_H_HAVE_CUDA 1
#endif

#ifdef BRAID_NCCL_H_HAVE_CUDA
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if __cplusplus && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
/* The CUDA runtime's own definition; repeating it later is harmless. */
typedef struct CUstream_st *cudaStream_t;
#endif
#undef BRAID_NCCL_H_HAVE_CUDA

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Version of the NCCL interface this header describes. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 23007
/* Releases up to 2.8 were coded X*1000+Y*100+Z; later ones X*10000+Y*100+Z. */
#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator and a registered memory window; both are opaque. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The rendezvous token every rank of a new communicator must share. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

/* Result of every call that can fail. */
typedef enum { ncclSuccess                 =  0,
               ncclUnhandledCudaError      =  1,
               ncclSystemError             =  2,
               ncclInternalError           =  3,
               ncclInvalidArgument         =  4,
               ncclInvalidUsage            =  5,
               ncclRemoteError             =  6,
               ncclInProgress              =  7,
               ncclTimeout                 =  8,
               ncclNumResults              =  9 } ncclResult_t;

/* Markers for "not set by the user" in ncclConfig_t and ncclSimInfo_t. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* The magic number the library's versioned structs carry (ncclConfig_t,
 * ncclCommProperties_t, the device API's requirements). */
#define NCCL_API_MAGIC 0xcafebeef

/* winFlags of ncclCommWindowRegister. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02

/* Buffers registered as windows must start on this boundary (bytes). */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* Values of ncclConfig_t.CTAPolicy. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* shrinkFlags of ncclCommShrink: DEFAULT shrinks a healthy communicator;
 * ABORT first stops whatever the parent still has in flight. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* revokeFlags of ncclCommRevoke; the only value accepted. */
#define NCCL_REVOKE_DEFAULT 0x00

/*
 * Options for a new communicator. Start from NCCL_CONFIG_INITIALIZER, then
 * set the fields you care about; a field left at its NCCL_CONFIG_UNDEF_*
 * value takes the environment's or the library's default. size, magic and
 * version identify the struct and are not the user's to change.
 */
typedef struct ncclConfig_v23000 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  /* Since 2.29. */
  int graphUsageMode;
  int numRmaCtx;
  /* Since 2.30. */
  int maxP2pPeers;
  int graphStreamOrdering;
} ncclConfig_t;

/* A config that was not set from this initializer is rejected. */
#define NCCL_CONFIG_INITIALIZER {                                             \
  sizeof(ncclConfig_t),                             /* size */                \
  NCCL_API_MAGIC,                                   /* magic */               \
  NCCL_VERSION_CODE,                                /* version */             \
  NCCL_CONFIG_UNDEF_INT,                            /* blocking */            \
  NCCL_CONFIG_UNDEF_INT,                            /* cgaClusterSize */      \
  NCCL_CONFIG_UNDEF_INT,                            /* minCTAs */             \
  NCCL_CONFIG_UNDEF_INT,                            /* maxCTAs */             \
  NCCL_CONFIG_UNDEF_PTR,                            /* netName */             \
  NCCL_CONFIG_UNDEF_INT,                            /* splitShare */          \
  NCCL_CONFIG_UNDEF_INT,                            /* trafficClass */        \
  NCCL_CONFIG_UNDEF_PTR,                            /* commName */            \
  NCCL_CONFIG_UNDEF_INT,                            /* collnetEnable */       \
  NCCL_CONFIG_UNDEF_INT,                            /* CTAPolicy */           \
  NCCL_CONFIG_UNDEF_INT,                            /* shrinkShare */         \
  NCCL_CONFIG_UNDEF_INT,                            /* nvlsCTAs */            \
  NCCL_CONFIG_UNDEF_INT,                            /* nChannelsPerNetPeer */ \
  NCCL_CONFIG_UNDEF_INT,                            /* nvlinkCentricSched */  \
  NCCL_CONFIG_UNDEF_INT,                            /* graphUsageMode */      \
  NCCL_CONFIG_UNDEF_INT,                            /* numRmaCtx */           \
  NCCL_CONFIG_UNDEF_INT,                            /* maxP2pPeers */         \
  NCCL_CONFIG_UNDEF_INT,                            /* graphStreamOrdering */ \
}

/* What ncclGroupSimulateEnd reports: the estimated time of the group. */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

/* As with the config, a sim info must start from its initializer. */
#define NCCL_SIM_INFO_INITIALIZER {                                           \
  sizeof(ncclSimInfo_t),                            /* size */                \
  0x74685283,                                       /* magic */               \
  NCCL_VERSION_CODE,                                /* version */             \
  NCCL_UNDEF_FLOAT                                  /* estimatedTime */       \
}

/*
 * Memory.
 *
 * ncclMemAlloc allocates device memory suited to every optimisation the
 * library has (registration, windows, multicast); the allocation may be
 * rounded up to the allocation granularity. Release it with ncclMemFree.
 */
ncclResult_t  ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);

ncclResult_t  ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/*
 * Library identity and communicator creation.
 */

/* Stores the library's NCCL_VERSION_CODE in *version. */
ncclResult_t  ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/* Makes a fresh id on one rank; hand it to every rank (by MPI, a file, ...)
 * before they call one of the ncclCommInitRank* functions. */
ncclResult_t  ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* Joins communicator commId as rank (0 <= rank < nranks) with the options in
 * config (NULL: all defaults). Uses the current CUDA device. */
ncclResult_t  ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);

/* ncclCommInitRankConfig with default options. Every rank blocks until all
 * nranks have joined, so each rank needs its own thread or process, or the
 * calls must sit inside ncclGroupStart/ncclGroupEnd. */
ncclResult_t  ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/* Creates ndev communicators in one process, one per device, into comm[0..
 * ndev-1]. devlist names the devices in rank order; NULL means devices 0..
 * ndev-1. */
ncclResult_t  ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/* Completes every operation already issued and releases shared resources.
 * A nonblocking communicator reports ncclInProgress until that is done;
 * ncclCommDestroy afterwards frees the rest without blocking. */
ncclResult_t  ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Frees the communicator's local resources. */
ncclResult_t  ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops whatever the communicator still has running, then frees it. */
ncclResult_t  ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Cancels every operation in flight and reports ncclInProgress until the
 * communicator is quiet; after that it may be destroyed, split or shrunk
 * (but not finalized), without sharing resources. revokeFlags must be
 * NCCL_REVOKE_DEFAULT. */
ncclResult_t  ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* Partitions comm: ranks passing the same color form one new communicator,
 * ordered by key (then by old rank). color NCCL_SPLIT_NOCOLOR leaves the
 * caller out and sets *newcomm to NULL. config NULL copies comm's options. */
ncclResult_t  ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config);

/* A new communicator of comm's ranks minus the excludeRanksCount ranks in
 * excludeRanksList, renumbered without gaps. config NULL copies comm's
 * options; shrinkFlags is one of NCCL_SHRINK_*. */
ncclResult_t  ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/* Like ncclCommInitRankConfig, but rendezvous through nId ids at once (at
 * most one per rank), which spreads the start-up traffic. Every rank passes
 * the same ids in the same order. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);

/* Makes a one-use id with which new ranks join comm through ncclCommGrow.
 * Called on one existing rank (the grow's root). */
ncclResult_t  ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);

/* Makes a communicator of nRanks ranks: comm's ranks keep their numbers and
 * new ranks join. Existing ranks pass comm and rank -1 (the root also the id
 * from ncclCommGetUniqueId, the others NULL); new ranks pass comm NULL, the
 * id, and their rank. */
ncclResult_t  ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm, ncclConfig_t* config);

/*
 * Errors and queries.
 */

/* A fixed text for a result code. */
const char*  ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);

/* The message of the most recent error, in words a user can act on. */
const char*  ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);

/* Re-reads the logging settings from the environment. Not a supported part
 * of the interface; kept for programs that already call it. Declared on
 * Linux (NCCL_OS_LINUX) only, as NCCL does; elsewhere it does nothing. */
#ifndef NCCL_OS_LINUX
#define ncclResetDebugInit()
#define pncclResetDebugInit()
#elif defined(__cplusplus)
__attribute__ ((deprecated("ncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void  ncclResetDebugInit();
__attribute__ ((deprecated("pncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void pncclResetDebugInit();
#else
__attribute__ ((deprecated("ncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void  ncclResetDebugInit(void);
__attribute__ ((deprecated("pncclResetDebugInit is not supported as part of the NCCL API and will be removed in the future")))
void pncclResetDebugInit(void);
#endif

/* ncclCommSuspend flags: NCCL_SUSPEND_MEM releases the device memory the
 * communicator can rebuild (scratch, staging, cached plans). */
#define NCCL_SUSPEND_MEM 0x01

/* Releases what flags name; the communicator runs nothing until
 * ncclCommResume. */
ncclResult_t  ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);

/* Restores what ncclCommSuspend released. */
ncclResult_t  ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);

/* What ncclCommMemStats reports. */
typedef enum {
  ncclStatGpuMemSuspend   = 0, /* bytes of device memory a suspend releases */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist   = 2, /* bytes of device memory a suspend keeps */
  ncclStatGpuMemTotal     = 3  /* every byte of device memory the library holds */
} ncclCommMemStat_t;

ncclResult_t  ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);

/* The error, if any, that the communicator hit while working in the
 * background; ncclInProgress while a nonblocking call is still running. */
ncclResult_t  ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

/* Number of ranks in the communicator. */
ncclResult_t  ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);

/* The CUDA device the communicator runs on. */
ncclResult_t  ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);

/* The caller's rank in the communicator. */
ncclResult_t  ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/*
 * Registration.
 */

/* Registers a device buffer so collectives can use it without staging
 * copies; *handle is what ncclCommDeregister takes back. */
ncclResult_t  ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);

ncclResult_t  ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/* Registers buff as a window every rank can address (collective over comm);
 * winFlags is a combination of NCCL_WIN_*. */
ncclResult_t  ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);

ncclResult_t  ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* The buffer this rank registered as win. */
ncclResult_t  ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);

/*
 * Reductions and element types.
 */

/* Only here so ncclMaxRedOp can be expressed in terms of an enum's size. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;

/* Built-in reductions. Values from ncclNumOps up to ncclMaxRedOp are handles
 * returned by ncclRedOpCreatePreMulSum. ncclMaxRedOp is the largest positive
 * value an enum of this size holds, so the type never grows. */
typedef enum { ncclSum        = 0,
               ncclProd       = 1,
               ncclMax        = 2,
               ncclMin        = 3,
               ncclAvg        = 4,
               ncclNumOps     = 5,
               ncclMaxRedOp   = 0x7fffffff>>(32-8*sizeof(ncclRedOp_dummy_t))
             } ncclRedOp_t;

/* Element types; the second name on a line is an older spelling. */
typedef enum { ncclInt8       = 0, ncclChar       = 0,
               ncclUint8      = 1,
               ncclInt32      = 2, ncclInt        = 2,
               ncclUint32     = 3,
               ncclInt64      = 4,
               ncclUint64     = 5,
               ncclFloat16    = 6, ncclHalf       = 6,
               ncclFloat32    = 7, ncclFloat      = 7,
               ncclFloat64    = 8, ncclDouble     = 8,
               ncclBfloat16   = 9,
               ncclFloat8e4m3 = 10,
               ncclFloat8e5m2 = 11,
               ncclNumTypes   = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  /* Device memory, read by the collective while it runs. */
  ncclScalarDevice = 0,
  /* Host memory, read before ncclRedOpCreatePreMulSum returns. */
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* Makes a reduction that multiplies each input by *scalar (of type datatype)
 * and then sums. The new op is valid only on comm and with datatype. */
ncclResult_t  ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);

/* Releases an op made on comm. Allowed as soon as the last call that used
 * the op has returned. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/*
 * Collectives and point-to-point.
 *
 * Every rank of the communicator makes the same call, in the same order.
 * A call returns once the work is queued on stream. Because a call may wait
 * for other ranks on the host, one thread driving several ranks must wrap
 * the calls in ncclGroupStart/ncclGroupEnd.
 */

/* Reduces count elements from every rank into recvbuff on rank root
 * (recvbuff is ignored elsewhere). In place when sendbuff == recvbuff. */
ncclResult_t  ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

/* Older in-place broadcast: buff on root is copied into buff everywhere. */
ncclResult_t  ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);

/* Copies count elements of sendbuff on root into recvbuff on every rank.
 * In place when sendbuff == recvbuff. */
ncclResult_t  ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
    ncclComm_t comm, cudaStream_t stream);

/* Reduces count elements across ranks; every rank gets the result.
 * In place when sendbuff == recvbuff. */
ncclResult_t  ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

/* Reduces nranks*recvcount elements across ranks; rank i keeps block i of
 * the result. In place when recvbuff == sendbuff + rank*recvcount. */
ncclResult_t  ncclReduceScatter(const void* sendbuff, void* recvbuff,
    size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff,
    size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    cudaStream_t stream);

/* Rank i's sendcount elements land at recvbuff + i*sendcount on every rank.
 * In place when sendbuff == recvbuff + rank*sendcount. */
ncclResult_t  ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j of sendbuff (count elements at sendbuff + j*count) goes to rank j,
 * which stores it at recvbuff + i*count, i being the sender. */
ncclResult_t  ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Rank i's count elements land at recvbuff + i*count on root only.
 * In place when sendbuff == recvbuff + root*count. */
ncclResult_t  ncclGather(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Root sends sendbuff + i*count to rank i, which stores count elements in
 * recvbuff. In place when recvbuff == sendbuff + root*count. */
ncclResult_t  ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Sends count elements to rank peer, which must post the matching ncclRecv.
 * The GPU waits for the peer, so sends and receives that must overlap
 * belong in one ncclGroupStart/ncclGroupEnd. */
ncclResult_t  ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);

/* Receives count elements from rank peer's matching ncclSend. */
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);
ncclResult_t  ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
    ncclComm_t comm, cudaStream_t stream);

/*
 * One-sided operations on windows.
 *
 * ncclPutSignal writes count elements of localbuff into peer's window
 * peerWin at byte offset peerWinOffset, then raises signal sigIdx of
 * context ctx at peer; ncclSignal raises the signal alone. ncclWaitSignal
 * waits, on stream, until every descriptor's peer has raised its signal
 * opCnt more times; data put before a signal is visible once it is seen.
 * flags is reserved (0).
 */
ncclResult_t  ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
    int peer, ncclWindow_t peerWin, size_t peerWinOffset,
    int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
    int peer, ncclWindow_t peerWin, size_t peerWinOffset,
    int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);

ncclResult_t  ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);

/* One wait of ncclWaitSignal: opCnt signals from peer on (sigIdx, ctx). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

ncclResult_t  ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream);

/*
 * Groups.
 *
 * Calls between ncclGroupStart and ncclGroupEnd are only recorded; the
 * outermost ncclGroupEnd launches them together. That lets one thread drive
 * several ranks, fuses small operations, and lets sends and receives
 * progress together. Communicator creation may be grouped too, but not in
 * the same group as operations. After ncclGroupEnd the work is queued on
 * its streams, not necessarily finished.
 */
#ifdef __cplusplus
ncclResult_t  ncclGroupStart();
ncclResult_t pncclGroupStart();

ncclResult_t  ncclGroupEnd();
ncclResult_t pncclGroupEnd();
#else
ncclResult_t  ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);

ncclResult_t  ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
#endif

/* Ends the group without launching anything and reports the estimated time
 * it would have taken in *simInfo (set from NCCL_SIM_INFO_INITIALIZER). */
ncclResult_t  ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

/*
 * Parameters: the library's settings (NCCL_* variables, conf files and
 * defaults), read by key, which is the variable's name ("NCCL_BUFFSIZE").
 *
 * ncclParamBind looks a key up once; the handle belongs to the library and
 * stays valid for the life of the process. The typed getters succeed only
 * for the parameter's own type (ncclInvalidArgument otherwise).
 * ncclParamGetStr's and ncclParamGetParameter's strings, and the key table,
 * stay valid until the same call on the same thread.
 */
typedef struct ncclParamHandle* ncclParamHandle_t;

ncclResult_t  ncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key);

ncclResult_t  ncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t  ncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t  ncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t  ncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t  ncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t  ncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t  ncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t  ncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t* out);

/* The value as text. */
ncclResult_t  ncclParamGetStr(ncclParamHandle_t h, const char** out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out);

/* The value's bytes, copied into out (maxLen bytes); *len receives the
 * value's size, also when maxLen is too small (then ncclInvalidArgument). */
ncclResult_t  ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);

/* The value of key as text and its length; ncclInvalidArgument for a key
 * the library does not have. */
ncclResult_t  ncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen);

/* Every key, in no particular order. */
ncclResult_t  ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen);

/* Logs every parameter with its value and where it came from. */
void  ncclParamDumpAll(void);
void pncclParamDumpAll(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
