/*
 * nccl_profiler.h: the profiler plugin ABI (ncclProfiler_v1 .. ncclProfiler_v6),
 * as loaded by Braid and by NCCL.
 *
 * A profiler is a shared library exporting one or more structs
 * ncclProfiler_vN (no "Plugin" in the symbol); the loader takes the newest
 * version it finds. Build it against this header and nccl.h only:
 *
 *   cc -shared -fPIC -I<braid>/include -I<braid>/plugins/include my_profiler.c
 *
 * Per communicator the core calls init, which writes the bitmask of the
 * event types the plugin wants (ncclProfile*); then startEvent for each
 * event of those types, with a descriptor; recordEventState for state
 * changes; stopEvent once per started event; finalize at communicator
 * destroy. A plugin that does not track an event sets *eHandle = NULL and
 * receives no stop or state for it. Children name their parent through
 * parentObj (the parent's handle, NULL when it is not tracked).
 *
 * The member order and the argument lists are the ABI; each was checked
 * against NCCL's definitions, and the sizes are pinned by the
 * _Static_asserts at the end (LP64). plugins/README.md says which events
 * Braid emits and when.
 */
#ifndef NCCL_PROFILER_H_
#define NCCL_PROFILER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Event types (bits of the activation mask) ---- */
enum {
  ncclProfileGroup = (1 << 0),        /* a group of calls run together (legacy) */
  ncclProfileColl = (1 << 1),         /* one collective */
  ncclProfileP2p = (1 << 2),          /* one send or receive */
  ncclProfileProxyOp = (1 << 3),      /* one operation of the network proxy */
  ncclProfileProxyStep = (1 << 4),    /* one step of a proxy operation */
  ncclProfileProxyCtrl = (1 << 5),    /* the proxy thread's state */
  ncclProfileKernelCh = (1 << 6),     /* one channel of a kernel (v3+) */
  ncclProfileNetPlugin = (1 << 7),    /* events a net plugin defines (v3+) */
  ncclProfileGroupApi = (1 << 8),     /* ncclGroupStart .. ncclGroupEnd (v5+) */
  ncclProfileCollApi = (1 << 9),      /* a collective API call (v5+) */
  ncclProfileP2pApi = (1 << 10),      /* a send/receive API call (v5+) */
  ncclProfileKernelLaunch = (1 << 11),/* a kernel launch (v5+) */
  ncclProfileCeColl = (1 << 12),      /* copy-engine collective (v6) */
  ncclProfileCeSync = (1 << 13),      /* copy-engine synchronisation (v6) */
  ncclProfileCeBatch = (1 << 14),     /* copy-engine batch (v6) */
};

/* ---- Event states (recordEventState) ---- */
typedef enum {
  ncclProfilerProxyOpSendPosted = 0,        /* 0..7: v1..v3 only */
  ncclProfilerProxyOpSendRemFifoWait = 1,
  ncclProfilerProxyOpSendTransmitted = 2,
  ncclProfilerProxyOpSendDone = 3,
  ncclProfilerProxyOpRecvPosted = 4,
  ncclProfilerProxyOpRecvReceived = 5,
  ncclProfilerProxyOpRecvTransmitted = 6,
  ncclProfilerProxyOpRecvDone = 7,
  ncclProfilerProxyOpInProgress_v4 = 19,

  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,

  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,

  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,
  ncclProfilerGroupEndApiStart = 24,

  ncclProfilerCeCollStart = 25,             /* 25..30: v6 */
  ncclProfilerCeCollComplete = 26,
  ncclProfilerCeSyncStart = 27,
  ncclProfilerCeSyncComplete = 28,
  ncclProfilerCeBatchStart = 29,
  ncclProfilerCeBatchComplete = 30,
} ncclProfilerEventState_t;

typedef ncclProfilerEventState_t ncclProfilerEventState_v1_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v2_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v3_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v4_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v6_t;

typedef pid_t ncclPid_t;

/* ---- v1 (NCCL 2.23): numbers instead of names ---- */
typedef struct {
  uint8_t type;               /* ncclProfile* */
  void *parentObj;            /* the parent's handle */
  int rank;
  union {
    struct {
      const char *name;       /* the communicator's name */
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;           /* ncclFunc_t */
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      uint8_t datatype;       /* ncclDataType_t */
      uint32_t op;            /* ncclRedOp_t */
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      uint8_t algo;           /* NCCL_ALGO_* index */
      uint8_t proto;          /* NCCL_PROTO_* index */
      int isCollnet;
      int isNvls;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      uint8_t func;
      void *buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} ncclProfilerEventDescr_v1_t;

typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} ncclProfilerEventStateArgs_v1_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v1_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v1_t eState,
                                   ncclProfilerEventStateArgs_v1_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v1_t;

/* ---- v2 (NCCL 2.24): names as strings ---- */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
} ncclProfilerEventDescr_v2_t;

typedef ncclProfilerEventStateArgs_v1_t ncclProfilerEventStateArgs_v2_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v2_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v2_t eState,
                                   ncclProfilerEventStateArgs_v2_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v2_t;

/* ---- v3 (NCCL 2.26): kernel channels, net plugin events ---- */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v3_t;

typedef ncclProfilerEventStateArgs_v1_t ncclProfilerEventStateArgs_v3_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v3_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v3_t eState,
                                   ncclProfilerEventStateArgs_v3_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v3_t;

/* ---- v4 (NCCL 2.27): init learns the communicator; channel counts ---- */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      ncclPid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;        /* start time (Braid: ns, CLOCK_MONOTONIC) */
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v4_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v4_t eState,
                                   ncclProfilerEventStateArgs_v4_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

/* ---- v5 (NCCL 2.28): API events, 64-bit type, commId first ---- */
#define NCCL_PROFILER_V5_UNION_                                                     \
  struct {                                                                          \
    bool graphCaptured;                                                             \
    int groupDepth;                                                                 \
  } groupApi;                                                                       \
  struct {                                                                          \
    const char *func;                                                               \
    size_t count;                                                                   \
    const char *datatype;                                                           \
    int root;                                                                       \
    void *stream;                                                                   \
    bool graphCaptured;                                                             \
  } collApi;                                                                        \
  struct {                                                                          \
    const char *func;                                                               \
    size_t count;                                                                   \
    const char *datatype;                                                           \
    void *stream;                                                                   \
    bool graphCaptured;                                                             \
  } p2pApi;                                                                         \
  struct {                                                                          \
    void *stream;                                                                   \
  } kernelLaunch;                                                                   \
  struct {                                                                          \
    uint64_t seqNumber;                                                             \
    const char *func;                                                               \
    void const *sendBuff;                                                           \
    void *recvBuff;                                                                 \
    size_t count;                                                                   \
    int root;                                                                       \
    const char *datatype;                                                           \
    uint8_t nChannels;                                                              \
    uint8_t nWarps;                                                                 \
    const char *algo;                                                               \
    const char *proto;                                                              \
    void *parentGroup;  /* the Group event (v4's parent) */                         \
  } coll;                                                                           \
  struct {                                                                          \
    const char *func;                                                               \
    void *buff;                                                                     \
    const char *datatype;                                                           \
    size_t count;                                                                   \
    int peer;                                                                       \
    uint8_t nChannels;                                                              \
    void *parentGroup;                                                              \
  } p2p;                                                                            \
  struct {                                                                          \
    ncclPid_t pid;                                                                  \
    uint8_t channelId;                                                              \
    int peer;                                                                       \
    int nSteps;                                                                     \
    int chunkSize;                                                                  \
    int isSend;                                                                     \
  } proxyOp;                                                                        \
  struct {                                                                          \
    int step;                                                                       \
  } proxyStep;                                                                      \
  struct {                                                                          \
    uint8_t channelId;                                                              \
    uint64_t pTimer;                                                                \
  } kernelCh;                                                                       \
  struct {                                                                          \
    int64_t id;                                                                     \
    void *data;                                                                     \
  } netPlugin;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    NCCL_PROFILER_V5_UNION_
  };
} ncclProfilerEventDescr_v5_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

/* ---- v6 (NCCL 2.29): copy-engine events (Braid emits none) ---- */
typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    NCCL_PROFILER_V5_UNION_
    struct {
      uint8_t channelId;
      uint8_t isSend;
      uint8_t peer;
      uint32_t step;
      uint32_t size;
      uint64_t startTs;
      uint64_t readyTs;
    } kernelStep;
    struct {
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      const char *syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void *stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v6_t *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v6_t eState,
                                   ncclProfilerEventStateArgs_v6_t *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} ncclProfiler_v6_t;

typedef ncclProfiler_v6_t ncclProfiler_t;
typedef ncclProfilerEventDescr_v6_t ncclProfilerEventDescr_t;
typedef ncclProfilerEventStateArgs_v6_t ncclProfilerEventStateArgs_t;

/* ---- Layout (LP64) ---- */
_Static_assert(sizeof(ncclProfiler_v1_t) == 48, "ncclProfiler_v1_t is 48 bytes");
_Static_assert(sizeof(ncclProfiler_v5_t) == 48, "ncclProfiler_v5_t is 48 bytes");
_Static_assert(sizeof(ncclProfiler_v6_t) == 48, "ncclProfiler_v6_t is 48 bytes");
_Static_assert(offsetof(ncclProfiler_v5_t, finalize) == 40, "finalize at 40");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll) == 24, "v1 union at 24");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll.seqNumber) == 40, "v1 seqNumber at 40");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll.sendBuff) == 56, "v1 sendBuff at 56");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll.op) == 88, "v1 op at 88");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll.trafficBytes) == 96, "v1 trafficBytes at 96");
_Static_assert(offsetof(ncclProfilerEventDescr_v1_t, coll.isNvls) == 112, "v1 isNvls at 112");
_Static_assert(sizeof(ncclProfilerEventDescr_v1_t) == 120, "v1 descriptor is 120 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v2_t, coll.trafficBytes) == 96, "v2 trafficBytes at 96");
_Static_assert(offsetof(ncclProfilerEventDescr_v2_t, coll.proto) == 120, "v2 proto at 120");
_Static_assert(sizeof(ncclProfilerEventDescr_v2_t) == 128, "v2 descriptor is 128 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v3_t, coll.nMaxChannels) == 96, "v3 nMaxChannels at 96");
_Static_assert(sizeof(ncclProfilerEventDescr_v3_t) == 120, "v3 descriptor is 120 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.nChannels) == 80, "v4 nChannels at 80");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, kernelCh.pTimer) == 32, "v4 pTimer at 32");
_Static_assert(sizeof(ncclProfilerEventDescr_v4_t) == 104, "v4 descriptor is 104 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24, "v5 union at 24");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.parentGroup) == 104, "v5 parentGroup at 104");
_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "v5 descriptor is 112 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.parentGroup) == 104, "v6 parentGroup at 104");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.stream) == 104, "v6 ceColl.stream at 104");
_Static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 112, "v6 descriptor is 112 bytes");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v1_t) == 16, "v1 state args are 16 bytes");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v5_t) == 8, "v5 state args are 8 bytes");

#ifdef __cplusplus
}
#endif

#endif /* NCCL_PROFILER_H_ */
