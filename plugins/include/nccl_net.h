/*
 * nccl_net.h: the network plugin ABI (ncclNet_v6 .. ncclNet_v12 and
 * ncclCollNet_v6 .. ncclCollNet_v12), as loaded by Braid and by NCCL.
 *
 * A plugin is a shared library exporting one or more of the structs
 * ncclNetPlugin_vN (and optionally ncclCollNetPlugin_vN); the loader takes
 * the newest version it finds. Build a plugin against this header and
 * nccl.h only (ncclResult_t, ncclDataType_t, ncclRedOp_t):
 *
 *   cc -shared -fPIC -I<braid>/include -I<braid>/plugins/include my_net.c
 *
 * The member order, the argument lists and the property layouts below are
 * the ABI: each was checked against NCCL's definitions, and the sizes and
 * offsets are pinned by the _Static_asserts at the end (LP64). A new field
 * was inserted in the middle of the properties struct in v8 and v9, and
 * v12 widened vProps, so a newer properties struct is never a prefix of an
 * older one: each version has its own. plugins/README.md says what Braid
 * calls, when, and from which thread.
 */
#ifndef NCCL_NET_H_
#define NCCL_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Constants ---- */
#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32  /* in flight per comm (times maxRecvs on send comms) */
#define NCCL_NET_MAX_REQUESTS_V6 8
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1  /* *request preset before irecv (v9+) */
#define NCCL_NET_MULTI_REQUEST 0x2
#define NCCL_MAX_NET_SIZE_BYTES (1LL << 40)   /* bound of maxP2pBytes/maxCollBytes */
#define MAX_NET_SIZE (1LL << 30)              /* transfer cap for plugins older than v9 */
#define MAX_COLLNET_SIZE (512LL << 20)        /* collnet cap for plugins older than v9 */
#define NCCL_NET_MAX_PLUGINS 16
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4       /* vProps.devs in v9, v10, v11 */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define NCCL_NET_MAX_DEVS_PER_NIC NCCL_NET_MAX_DEVS_PER_NIC_V12
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)
#define NCCL_NET_ID_UNDEF (-1)

/* ---- Device offload ---- */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,       /* the only type Braid drives */
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3,
  NCCL_NET_DEVICE_GIN_GPI = 4
} ncclNetDeviceType;

#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_DEVICE_UNPACK_VERSION 0x7

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void *handle;              /* device-side state, owned by the plugin */
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v12_t;

/* ---- Per-communicator configuration and hints ---- */
typedef struct { int trafficClass; } ncclNetCommConfig_v10_t;  /* given to v10 connect */
typedef struct { int trafficClass; } ncclNetCommConfig_v11_t;  /* given to v11 init */
typedef struct { int trafficClass; } ncclNetCommConfig_v12_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;     /* bitmask over ncclFunc_t */
  uint32_t algo;   /* bitmask */
  uint32_t proto;  /* bitmask */
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

/* Every field undefined (-1). */
#define NCCL_NET_ATTR_INIT                                                        \
  {{NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF}, \
   {NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF}, \
   (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF}

/* ---- Virtual (fused) devices ---- */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

/* ---- Scatter-gather element of collnet allgather/reducescatter ---- */
typedef struct {
  void *mhandle;
  void *address;
  uint32_t size;
} ncclNetSGE_v8_t;
typedef struct {
  void *mhandle;
  void *address;
  size_t size;
} ncclNetSGE_v9_t;
typedef ncclNetSGE_v9_t ncclNetSGE_v10_t;
typedef ncclNetSGE_v9_t ncclNetSGE_v11_t;
typedef ncclNetSGE_v9_t ncclNetSGE_v12_t;

/* ---- Device properties, one layout per version ----
 * name and pciPath are owned by the plugin and must outlive the library's
 * use. speed is in Mbit/s, latency in microseconds. */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;     /* NCCL_PTR_* bits */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;       /* receives one irecv may group */
} ncclNetProperties_v6_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v7_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;    /* v8: registrations are cached, not tied to a comm */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;     /* v9: flush every receive */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;   /* largest isend/irecv */
  size_t maxCollBytes;
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;   /* v11 */
} ncclNetProperties_v11_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;  /* v12: 8 devices */
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;                    /* v12; NCCL_NET_ID_UNDEF when unknown */
  int16_t planeId;
} ncclNetProperties_v12_t;

/* ---- Point-to-point nets ----
 * Contract (every version): listen never blocks; connect and accept never
 * block and return success with a NULL comm until the connection is up
 * (the core calls them again); isend/irecv may return a NULL request
 * ("retry later"); test is called until *done, then never again on that
 * request; messages match in order per connection; a receive may be larger
 * than its send. test's sizes and iflush's sizes stay int in every
 * version. Members after closeListen may be NULL where a version allows. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm);
  ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
} ncclNet_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v7_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v7_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v7_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v8_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v8_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v9_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v9_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                          void **sendComm, ncclNetDeviceHandle_v10_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v10_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

/* v11: init runs once per communicator and returns a ctx that comes back
 * in listen, connect, setNetAttr and finalize (once per successful init). */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v11_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v11_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v11_t;

/* v12: v11's signatures; properties with 8 fused devices, railId, planeId. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v12_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v12_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v12_t *netAttr);
} ncclNet_v12_t;

/* ---- Collective nets (in-network reduction; optional, same library) ----
 * If devices() reports 0, every other member may be NULL. Braid loads and
 * reports these but does not drive them yet. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                          void **collComm);
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
  ncclResult_t (*regMr)(void *collComm, void *data, int size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
                              uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *collComm, void *mhandle);
  ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, int count,
                             ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                             void *recvMhandle, void **request);
  ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
  ncclResult_t (*test)(void *request, int *done, int *size);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
} ncclCollNet_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                          void **collComm);
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
  ncclResult_t (*regMr)(void *collComm, void *data, int size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
                              uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *collComm, void *mhandle);
  ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, int count,
                             ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                             void *recvMhandle, void **request);
  ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
  ncclResult_t (*test)(void *request, int *done, int *size);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
} ncclCollNet_v7_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                          void **collComm);
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
  ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
                              uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *collComm, void *mhandle);
  ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, int count,
                             ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                             void *recvMhandle, void **request);
  ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
                             ncclNetSGE_v8_t *recvParts, size_t bytesPerRank,
                             size_t windowOffset, size_t windowBytes, void *sendMhandle,
                             void **request);
  ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v8_t *sendParts,
                                 void *recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void *recvMhandle, void **request);
  ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
  ncclResult_t (*test)(void *request, int *done, int *size);
  ncclResult_t (*closeColl)(void *collComm);
  ncclResult_t (*closeListen)(void *listenComm);
} ncclCollNet_v8_t;

/* v9 and v10 share one layout (v10 only renames the properties type). */
#define NCCL_COLLNET_V9_BODY(PROPS, SGE, VPROPS)                                           \
  const char *name;                                                                         \
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);                                      \
  ncclResult_t (*devices)(int *ndev);                                                       \
  ncclResult_t (*getProperties)(int dev, PROPS *props);                                     \
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);                         \
  ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,          \
                          void **collComm);                                                 \
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported); \
  ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle); \
  ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,            \
                              uint64_t offset, int fd, void **mhandle);                     \
  ncclResult_t (*deregMr)(void *collComm, void *mhandle);                                   \
  ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,  \
                             ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle, \
                             void *recvMhandle, void **request);                            \
  ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts, SGE *recvParts, \
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes,  \
                             void *sendMhandle, void **request);                            \
  ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, SGE *sendParts,            \
                                 void *recvData, size_t bytesPerRank, size_t windowOffset,  \
                                 size_t windowBytes, ncclDataType_t dataType,               \
                                 ncclRedOp_t redOp, void *recvMhandle, void **request);     \
  ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle,               \
                         void **request);                                                   \
  ncclResult_t (*test)(void *request, int *done, int *size);                                \
  ncclResult_t (*closeColl)(void *collComm);                                                \
  ncclResult_t (*closeListen)(void *listenComm);                                            \
  ncclResult_t (*makeVDevice)(int *d, VPROPS *props)

typedef struct {
  NCCL_COLLNET_V9_BODY(ncclNetProperties_v9_t, ncclNetSGE_v9_t, ncclNetVDeviceProps_v9_t);
} ncclCollNet_v9_t;
typedef struct {
  NCCL_COLLNET_V9_BODY(ncclNetProperties_v10_t, ncclNetSGE_v10_t, ncclNetVDeviceProps_v10_t);
} ncclCollNet_v10_t;

/* v11 and v12: init per communicator with a ctx (no profiler callback),
 * listen takes the ctx, finalize added. */
#define NCCL_COLLNET_V11_BODY(PROPS, SGE, VPROPS)                                          \
  const char *name;                                                                         \
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);         \
  ncclResult_t (*devices)(int *ndev);                                                       \
  ncclResult_t (*getProperties)(int dev, PROPS *props);                                     \
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);              \
  ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,          \
                          void **collComm);                                                 \
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported); \
  ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle); \
  ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,            \
                              uint64_t offset, int fd, void **mhandle);                     \
  ncclResult_t (*deregMr)(void *collComm, void *mhandle);                                   \
  ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,  \
                             ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle, \
                             void *recvMhandle, void **request);                            \
  ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts, SGE *recvParts, \
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes,  \
                             void *sendMhandle, void **request);                            \
  ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, SGE *sendParts,            \
                                 void *recvData, size_t bytesPerRank, size_t windowOffset,  \
                                 size_t windowBytes, ncclDataType_t dataType,               \
                                 ncclRedOp_t redOp, void *recvMhandle, void **request);     \
  ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle,               \
                         void **request);                                                   \
  ncclResult_t (*test)(void *request, int *done, int *size);                                \
  ncclResult_t (*closeColl)(void *collComm);                                                \
  ncclResult_t (*closeListen)(void *listenComm);                                            \
  ncclResult_t (*makeVDevice)(int *d, VPROPS *props);                                       \
  ncclResult_t (*finalize)(void *ctx)

typedef struct {
  NCCL_COLLNET_V11_BODY(ncclNetProperties_v11_t, ncclNetSGE_v11_t, ncclNetVDeviceProps_v11_t);
} ncclCollNet_v11_t;
typedef struct {
  NCCL_COLLNET_V11_BODY(ncclNetProperties_v12_t, ncclNetSGE_v12_t, ncclNetVDeviceProps_v12_t);
} ncclCollNet_v12_t;

/* ---- The current version's names ---- */
typedef ncclNet_v12_t ncclNet_t;
typedef ncclCollNet_v12_t ncclCollNet_t;
typedef ncclNetProperties_v12_t ncclNetProperties_t;
typedef ncclNetVDeviceProps_v12_t ncclNetVDeviceProps_t;
typedef ncclNetCommConfig_v12_t ncclNetCommConfig_t;
typedef ncclNetAttr_v12_t ncclNetAttr_t;
typedef ncclNetSGE_v12_t ncclNetSGE_t;
typedef ncclNetDeviceHandle_v12_t ncclNetDeviceHandle_t;
#define NCCL_NET_PLUGIN_SYMBOL ncclNetPlugin_v12
#define NCCL_COLLNET_PLUGIN_SYMBOL ncclCollNetPlugin_v12

/* ---- Layout pins (x86-64 and aarch64, LP64) ---- */
#if !defined(__cplusplus) && defined(__LP64__) && defined(__STDC_VERSION__) && \
    __STDC_VERSION__ >= 201112L
#define NCCL_NET_PIN_(t, sz) _Static_assert(sizeof(t) == (sz), #t " is " #sz " bytes")
#define NCCL_NET_AT_(t, f, off) \
  _Static_assert(offsetof(t, f) == (off), #t "." #f " is at " #off)
NCCL_NET_PIN_(ncclNetProperties_v6_t, 48);
NCCL_NET_PIN_(ncclNetProperties_v7_t, 56);
NCCL_NET_PIN_(ncclNetProperties_v8_t, 64);
NCCL_NET_PIN_(ncclNetProperties_v9_t, 104);
NCCL_NET_PIN_(ncclNetProperties_v11_t, 112);
NCCL_NET_PIN_(ncclNetProperties_v12_t, 128);
NCCL_NET_AT_(ncclNetProperties_v6_t, speed, 28);
NCCL_NET_AT_(ncclNetProperties_v6_t, maxRecvs, 44);
NCCL_NET_AT_(ncclNetProperties_v7_t, netDeviceType, 48);
NCCL_NET_AT_(ncclNetProperties_v7_t, netDeviceVersion, 52);
NCCL_NET_AT_(ncclNetProperties_v8_t, regIsGlobal, 28);
NCCL_NET_AT_(ncclNetProperties_v8_t, speed, 32);
NCCL_NET_AT_(ncclNetProperties_v8_t, netDeviceType, 52);
NCCL_NET_AT_(ncclNetProperties_v9_t, forceFlush, 32);
NCCL_NET_AT_(ncclNetProperties_v9_t, speed, 36);
NCCL_NET_AT_(ncclNetProperties_v9_t, vProps, 64);
NCCL_NET_AT_(ncclNetProperties_v9_t, maxP2pBytes, 88);
NCCL_NET_AT_(ncclNetProperties_v9_t, maxCollBytes, 96);
NCCL_NET_AT_(ncclNetProperties_v11_t, maxP2pBytes, 88);
NCCL_NET_AT_(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
NCCL_NET_AT_(ncclNetProperties_v12_t, vProps, 64);
NCCL_NET_AT_(ncclNetProperties_v12_t, maxP2pBytes, 104);
NCCL_NET_AT_(ncclNetProperties_v12_t, maxCollBytes, 112);
NCCL_NET_AT_(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
NCCL_NET_AT_(ncclNetProperties_v12_t, railId, 124);
NCCL_NET_AT_(ncclNetProperties_v12_t, planeId, 126);
NCCL_NET_PIN_(ncclNetVDeviceProps_v9_t, 20);
NCCL_NET_PIN_(ncclNetVDeviceProps_v12_t, 36);
NCCL_NET_PIN_(ncclNetDeviceHandle_v7_t, 32);
NCCL_NET_AT_(ncclNetDeviceHandle_v7_t, handle, 8);
NCCL_NET_AT_(ncclNetDeviceHandle_v7_t, size, 16);
NCCL_NET_AT_(ncclNetDeviceHandle_v7_t, needsProxyProgress, 24);
NCCL_NET_PIN_(ncclNetAttr_v11_t, 44);
NCCL_NET_PIN_(ncclNetCommConfig_v10_t, 4);
NCCL_NET_PIN_(ncclNetSGE_v8_t, 24);
NCCL_NET_PIN_(ncclNetSGE_v9_t, 24);
NCCL_NET_PIN_(ncclNet_v6_t, 136);
NCCL_NET_PIN_(ncclNet_v7_t, 152);
NCCL_NET_PIN_(ncclNet_v8_t, 152);
NCCL_NET_PIN_(ncclNet_v9_t, 160);
NCCL_NET_PIN_(ncclNet_v10_t, 160);
NCCL_NET_PIN_(ncclNet_v11_t, 176);
NCCL_NET_PIN_(ncclNet_v12_t, 176);
NCCL_NET_AT_(ncclNet_v6_t, isend, 80);
NCCL_NET_AT_(ncclNet_v6_t, test, 104);
NCCL_NET_AT_(ncclNet_v7_t, irecvConsumed, 144);
NCCL_NET_AT_(ncclNet_v9_t, makeVDevice, 152);
NCCL_NET_AT_(ncclNet_v12_t, finalize, 160);
NCCL_NET_AT_(ncclNet_v12_t, setNetAttr, 168);
NCCL_NET_PIN_(ncclCollNet_v6_t, 120);
NCCL_NET_PIN_(ncclCollNet_v7_t, 120);
NCCL_NET_PIN_(ncclCollNet_v8_t, 136);
NCCL_NET_PIN_(ncclCollNet_v9_t, 144);
NCCL_NET_PIN_(ncclCollNet_v10_t, 144);
NCCL_NET_PIN_(ncclCollNet_v11_t, 152);
NCCL_NET_PIN_(ncclCollNet_v12_t, 152);
#undef NCCL_NET_PIN_
#undef NCCL_NET_AT_
#endif

#ifdef __cplusplus
}
#endif

#endif /* NCCL_NET_H_ */
