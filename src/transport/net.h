/*
 * Braid nets: the one interface the proxy drives for every network, the
 * built-in socket net (net_socket.c), the IB verbs net (net_ib.c) and every
 * external net plugin (net_plugin.c adapts ncclNet_v6 .. v12 to it).
 *
 * The table has ncclNet_v12's members, in its order and with its
 * semantics (plugins.md §1.3 and §1.5), then one of Braid's own (why: what
 * the net said when a connection failed): init once per communicator with a
 * context; listen never blocks; connect and accept are retried until they
 * return a comm; isend/irecv may return a NULL request ("retry later");
 * test until done; matching is in order per connection; a receive may be
 * larger than the send. The proxy calls only these members, so a built-in
 * net and a plugin are the same thing to it.
 *
 * A net is process-wide: brd_net_get picks it once, from NCCL_NET and
 * NCCL_NET_PLUGIN, and every communicator of the process uses it.
 */
#ifndef BRD_TRANSPORT_NET_H
#define BRD_TRANSPORT_NET_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define BRD_NET_HANDLE_BYTES 128   /* NCCL_NET_HANDLE_MAXSIZE */
#define BRD_NET_MAX_REQUESTS 32    /* NCCL_NET_MAX_REQUESTS */
#define BRD_NET_MAX_DEVS_PER_NIC 8 /* v12 */
#define BRD_NET_PTR_HOST 0x1
#define BRD_NET_PTR_CUDA 0x2
#define BRD_NET_PTR_DMABUF 0x4
#define BRD_NET_TRAFFIC_CLASS_UNDEF (-1)

/* NCCL's logger, exactly (the prototype is ABI: plugins call it). The level
 * is ncclDebugLogLevel (NONE 0, VERSION 1, WARN 2, INFO 3, ABORT 4, TRACE
 * 5), flags the subsystem bits (NET 0x10, ...). */
typedef void (*brd_net_logger_t)(int level, unsigned long flags, const char *file, int line,
                                 const char *fmt, ...);
/* NCCL's profiler callback (Braid passes NULL until the profiler lands). */
typedef ncclResult_t (*brd_net_prof_cb_t)(void **ehandle, int type, void *phandle,
                                          int64_t plugin_id, void *ext);

typedef struct {
  int ndevs;
  int devs[BRD_NET_MAX_DEVS_PER_NIC];
} brd_net_vprops_t;

/* ncclNetProperties_v12_t's fields. Strings are owned by the net. */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;          /* Mbit/s */
  int port;
  float latency;      /* µs */
  int maxComms;
  int maxRecvs;
  int netDeviceType;  /* 0: host */
  int netDeviceVersion;
  brd_net_vprops_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} brd_net_props_t;

typedef struct {
  int trafficClass;   /* BRD_NET_TRAFFIC_CLASS_UNDEF when unset */
} brd_net_config_t;

/* ncclNetAttr_v11_t: concurrency hints (setNetAttr). */
typedef struct {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
} brd_net_comm_attr_t;
typedef struct {
  brd_net_comm_attr_t sendCommAttr;
  brd_net_comm_attr_t recvCommAttr;
  uint32_t op, algo, proto;
} brd_net_attr_t;

typedef struct brd_net_ops {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t comm_id, brd_net_config_t *config,
                       brd_net_logger_t log, brd_net_prof_cb_t prof);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, brd_net_props_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **send_comm,
                          void **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm, void **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                              uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, brd_net_vprops_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, brd_net_attr_t *attr);
  /* Braid's own, after ncclNet_v12's members. Copies into buf (n bytes,
   * NUL-terminated) the WARN this net gave when comm (a send or receive
   * comm) failed, and returns its length; 0 when the net gave none for it
   * (a quiet close, or no failure). Call it on the thread whose call on comm
   * (or on one of comm's requests) just failed, before that thread calls
   * the net again: an external plugin's record is that thread's last failed
   * call (net_plugin.c). NULL: the net keeps no record. Never blocks. */
  size_t (*why)(void *comm, char *buf, size_t n);
  /* Braid's own. The file descriptor whose readiness for *events_out
   * (poll(2) events) means a call on comm (a send or receive comm) or its
   * requests may progress: a caller with nothing else to do may sleep in
   * poll() on it instead of calling test again. *events_out is 0 when no
   * request of comm waits on the descriptor. -1 when comm's progress does
   * not come from one descriptor (the net's own threads move its bytes):
   * the caller must keep polling test. BRD_NET_POLL_READY: comm has
   * progress to report now (test it before sleeping). Caller's thread;
   * never blocks. NULL: the net has no such descriptor. */
  int (*poll_fd)(void *comm, short *events_out);
} brd_net_ops_t;

/* poll_fd's answer when a call on the comm has progress to report now. */
#define BRD_NET_POLL_READY (-2)

/* The built-in socket net ("Socket", net_socket.c). */
extern const brd_net_ops_t brd_net_socket;

/* Braid's logger in NCCL's prototype: what Braid passes to every net's
 * init (debug.c's sink, with NCCL's levels and subsystem bits). */
void brd_net_log(int level, unsigned long flags, const char *file, int line,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* While buf is not NULL, the first WARN a net logs through brd_net_log on
 * the calling thread is copied into buf (n bytes; the caller sets buf[0] to
 * NUL first); NULL stops. Only this thread's messages: a plugin's message
 * logged from another thread is not attributed to the call. The external
 * plugin adapter brackets each plugin call with it. */
void brd_net_log_capture(char *buf, size_t n);

/* The net this process uses, chosen on the first call (net_plugin.c):
 * NCCL_NET_PLUGIN's libraries first (NCCL's loader rules), then the
 * built-in nets; NCCL_NET=<name> picks by name (case-insensitive). A net
 * whose devices() reports no device is skipped. Returns NULL with the
 * reason in why (n bytes) when nothing is usable or NCCL_NET names no
 * loaded net. Thread-safe; may dlopen. */
const brd_net_ops_t *brd_net_get(char *why, size_t n);

#endif /* BRD_TRANSPORT_NET_H */
