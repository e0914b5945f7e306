/*
 * libnccl-net-braidsock.so: Braid's socket net (src/transport/net_socket.c)
 * as an external net plugin, ncclNet_v12 against plugins/include/nccl_net.h.
 * It is the same code as the built-in "Socket" net, compiled into its own
 * library, so the loader is exercised by a real plugin: NCCL_NET_PLUGIN=
 * braidsock (or this file's path) makes Braid, or any program that loads
 * ncclNet_v12 plugins, send over it. The net's name is "BraidSocket".
 *
 * Each member converts its arguments to Braid's internal net table
 * (transport/net.h), which has the same members and meaning.
 */
#include <string.h>

#include "nccl_net.h"
#include "transport/net.h"

#define NET (&brd_net_socket)

static ncclResult_t plugin_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  brd_net_config_t cfg = {config != NULL ? config->trafficClass : BRD_NET_TRAFFIC_CLASS_UNDEF};
  (void)prof; /* the socket net reports no profiler events */
  return NET->init(ctx, comm_id, &cfg, (brd_net_logger_t)log, NULL);
}

static ncclResult_t plugin_devices(int *ndev) { return NET->devices(ndev); }

static ncclResult_t plugin_get_properties(int dev, ncclNetProperties_v12_t *props) {
  brd_net_props_t p;
  memset(&p, 0, sizeof(p));
  ncclResult_t res = NET->getProperties(dev, &p);
  if (res != ncclSuccess) return res;
  memset(props, 0, sizeof(*props));
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->forceFlush = p.forceFlush;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = (ncclNetDeviceType)p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  props->vProps.ndevs = p.vProps.ndevs;
  for (int i = 0; i < p.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V12; i++)
    props->vProps.devs[i] = p.vProps.devs[i];
  props->maxP2pBytes = p.maxP2pBytes;
  props->maxCollBytes = p.maxCollBytes;
  props->maxMultiRequestSize = p.maxMultiRequestSize;
  props->railId = p.railId;
  props->planeId = p.planeId;
  return ncclSuccess;
}

static ncclResult_t plugin_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  return NET->listen(ctx, dev, handle, listen_comm);
}

static ncclResult_t plugin_connect(void *ctx, int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_v12_t **send_dev_comm) {
  return NET->connect(ctx, dev, handle, send_comm, (void **)send_dev_comm);
}

static ncclResult_t plugin_accept(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v12_t **recv_dev_comm) {
  return NET->accept(listen_comm, recv_comm, (void **)recv_dev_comm);
}

static ncclResult_t plugin_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  return NET->regMr(comm, data, size, type, mh);
}

static ncclResult_t plugin_dereg_mr(void *comm, void *mh) { return NET->deregMr(comm, mh); }

static ncclResult_t plugin_isend(void *send_comm, void *data, size_t size, int tag, void *mh,
                                 void *phandle, void **request) {
  return NET->isend(send_comm, data, size, tag, mh, phandle, request);
}

static ncclResult_t plugin_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                 void **mhs, void **phandles, void **request) {
  return NET->irecv(recv_comm, n, data, sizes, tags, mhs, phandles, request);
}

static ncclResult_t plugin_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhs,
                                  void **request) {
  return NET->iflush(recv_comm, n, data, sizes, mhs, request);
}

static ncclResult_t plugin_test(void *request, int *done, int *sizes) {
  return NET->test(request, done, sizes);
}

static ncclResult_t plugin_close_send(void *c) { return NET->closeSend(c); }
static ncclResult_t plugin_close_recv(void *c) { return NET->closeRecv(c); }
static ncclResult_t plugin_close_listen(void *c) { return NET->closeListen(c); }
static ncclResult_t plugin_finalize(void *ctx) { return NET->finalize(ctx); }

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "BraidSocket",
    .init = plugin_init,
    .devices = plugin_devices,
    .getProperties = plugin_get_properties,
    .listen = plugin_listen,
    .connect = plugin_connect,
    .accept = plugin_accept,
    .regMr = plugin_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = plugin_dereg_mr,
    .isend = plugin_isend,
    .irecv = plugin_irecv,
    .iflush = plugin_iflush,
    .test = plugin_test,
    .closeSend = plugin_close_send,
    .closeRecv = plugin_close_recv,
    .closeListen = plugin_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = plugin_finalize,
    .setNetAttr = NULL,
};
