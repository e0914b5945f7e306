/*
 * Braid: net plugin loader and version adapters (net_plugin.h), and the
 * choice of the process's net (brd_net_get, net.h).
 *
 * The table handed out for a plugin holds small per-slot trampolines: the
 * members of brd_net_ops_t that carry no object of ours (devices, isend,
 * test, ...) must still know which plugin they serve, so slot k's functions
 * pass &slots[k] to one generic adapter per member. Members that carry a
 * context (listen, connect, setNetAttr, finalize) get it from the adapter
 * context init made. Data-path cost: one extra call and a switch.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/check.h"
#include "base/plugin.h"
#include "base/debug.h"
#include "base/param.h"
#include "nccl_net.h"
#include "transport/net.h"
#include "transport/net_ib.h"
#include "transport/net_plugin.h"

#define NET_SUBSYS (BRD_SUBSYS_INIT | BRD_SUBSYS_NET)
#define NAME_MAX_LEN 255          /* NCCL's limit per NCCL_NET_PLUGIN entry */
#define MAX_LIST (NCCL_NET_MAX_PLUGINS - 2)
#define OLDEST 6
#define NEWEST 12

/* The table is ncclNet_v12_t's with our own names: v12 calls pass through
 * field for field, and the one struct conversion that is a cast
 * (makeVDevice) is checked here. */
_Static_assert(sizeof(brd_net_vprops_t) == sizeof(ncclNetVDeviceProps_v12_t), "vprops");
_Static_assert(sizeof(brd_net_attr_t) == sizeof(ncclNetAttr_v12_t), "attr");
_Static_assert(offsetof(brd_net_ops_t, why) == sizeof(ncclNet_v12_t), "ops: v12's, then why");
_Static_assert(BRD_NET_MAX_DEVS_PER_NIC == NCCL_NET_MAX_DEVS_PER_NIC_V12, "devs per nic");

typedef union {
  ncclNet_v6_t v6;
  ncclNet_v7_t v7;
  ncclNet_v8_t v8;
  ncclNet_v9_t v9;
  ncclNet_v10_t v10;
  ncclNet_v11_t v11;
  ncclNet_v12_t v12;
} any_net_t;

struct brd_net_plugin {
  int slot;
  int used;                 /* slot taken (under slots_mu) */
  void *dl;                 /* dlopen handle, owned */
  char path[PATH_MAX];
  char name[128];           /* plugin's name, copied at load and after init */
  int version, collnet_version;
  const void *sym;          /* the exported ncclNetPlugin_vN, the plugin's */
  const void *collsym;      /* ncclCollNetPlugin_vN or NULL */
  pthread_mutex_t mu;       /* init/finalize */
  int ready;                /* fn holds the pointers the plugin left after init */
  int own_inits;            /* times the plugin's own init ran (v6..v10: at most 1) */
  int live;                 /* adapter contexts not yet finalized */
  any_net_t fn;             /* copy of the plugin's table, zeroed past its size */
  brd_net_ops_t ops;        /* what callers get */
};

/* What init hands out: every version gets one, so listen/connect/finalize
 * know their plugin; v10's connect gets cfg; v11+ get inner back. */
typedef struct {
  brd_net_plugin_t *p;
  void *inner;                  /* the plugin's ctx (v11+), the plugin's */
  ncclNetCommConfig_v10_t cfg;  /* the communicator's, for v10 connect */
} adctx_t;

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static brd_net_plugin_t slots[BRD_NET_PLUGIN_SLOTS];

static const char *res_name(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "ncclSuccess";
  case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
  case ncclSystemError: return "ncclSystemError";
  case ncclInternalError: return "ncclInternalError";
  case ncclInvalidArgument: return "ncclInvalidArgument";
  case ncclInvalidUsage: return "ncclInvalidUsage";
  case ncclRemoteError: return "ncclRemoteError";
  case ncclInProgress: return "ncclInProgress";
  default: return "unknown result";
  }
}

/* What this thread's last failed plugin call said (the why member): the
 * adapter's WARN and the plugin's own first WARN during that call, or ""
 * when neither WARNed (a quiet remote end). Per thread, as the proxy reads
 * it right after the failed call: the plugin's comms are its own, and
 * test() names a request, not a comm, so there is nothing per connection
 * to hang it on. Every failing path of an adapter call rewrites it. */
static _Thread_local char ad_said[768];

/* A failure the adapter WARNs about itself: WARNs once and records it. */
static ncclResult_t ad_warn(ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t ad_warn(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(ad_said, sizeof(ad_said), fmt, ap);
  va_end(ap);
  WARN("%s", ad_said);
  return r;
}

/* A plugin call failed: say which plugin, which call and what it means;
 * plugin_said is the plugin's own first WARN during the call ("" if none). */
static ncclResult_t failed(const brd_net_plugin_t *p, const char *call, ncclResult_t r,
                           const char *plugin_said) {
  const char *hint = r == ncclRemoteError   ? "the peer closed or the network failed"
                     : r == ncclSystemError ? "a system call or the NIC failed"
                     : r == ncclInternalError
                         ? "the plugin reports misuse"
                         : "see the plugin's own messages above";
  char msg[256];
  snprintf(msg, sizeof(msg), "NET/Plugin: %s (v%d) %s failed: %s (%s)", p->name, p->version,
           call, res_name(r), hint);
  /* A remote error in the data path is the peer's end, which may be its
   * normal goodbye: the proxy decides and WARNs; here it is INFO, and it is
   * the connection's failure only when the plugin itself WARNed. */
  int quiet = r == ncclRemoteError && (strcmp(call, "test") == 0 ||
                                        strcmp(call, "isend") == 0 || strcmp(call, "irecv") == 0);
  if (quiet)
    INFO(BRD_SUBSYS_NET, "%s", msg);
  else
    WARN("%s", msg);
  if (plugin_said[0] != '\0')
    snprintf(ad_said, sizeof(ad_said), "%s; the plugin said: %s", msg, plugin_said);
  else if (quiet)
    ad_said[0] = '\0';
  else
    snprintf(ad_said, sizeof(ad_said), "%s", msg);
  return r;
}

/* Calls the plugin, keeping what it WARNs on this thread meanwhile. */
#define PCALL(p, what, expr)                                                  \
  do {                                                                        \
    char pc_said_[384];                                                       \
    pc_said_[0] = '\0';                                                       \
    brd_net_log_capture(pc_said_, sizeof(pc_said_));                          \
    ncclResult_t pc_r_ = (expr);                                              \
    brd_net_log_capture(NULL, 0);                                             \
    if (pc_r_ != ncclSuccess) return failed((p), (what), pc_r_, pc_said_);    \
  } while (0)

static ncclResult_t not_ready(const brd_net_plugin_t *p, const char *call) {
  return ad_warn(ncclInternalError, "NET/Plugin: %s: %s called before init (call init first)",
                 p->name, call);
}
#define NEED_READY(p, call)                                                   \
  do {                                                                        \
    if (!__atomic_load_n(&(p)->ready, __ATOMIC_ACQUIRE)) return not_ready((p), (call)); \
  } while (0)

/* ---- Properties: each version's layout, field by field ---------------- */

/* Fields every version has; the rest take the defaults NCCL's adapters
 * give old plugins (one physical device per vNIC, 1 GiB / 512 MiB caps). */
#define COPY_COMMON(out, in, dev)                                             \
  do {                                                                        \
    memset((out), 0, sizeof(*(out)));                                         \
    (out)->name = (in).name;                                                  \
    (out)->pciPath = (in).pciPath;                                            \
    (out)->guid = (in).guid;                                                  \
    (out)->ptrSupport = (in).ptrSupport;                                      \
    (out)->speed = (in).speed;                                                \
    (out)->port = (in).port;                                                  \
    (out)->latency = (in).latency;                                            \
    (out)->maxComms = (in).maxComms;                                          \
    (out)->maxRecvs = (in).maxRecvs;                                          \
    (out)->netDeviceType = NCCL_NET_DEVICE_HOST;                              \
    (out)->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;                \
    (out)->vProps.ndevs = 1;                                                  \
    (out)->vProps.devs[0] = (dev);                                            \
    (out)->maxP2pBytes = MAX_NET_SIZE;                                        \
    (out)->maxCollBytes = MAX_COLLNET_SIZE;                                   \
    (out)->maxMultiRequestSize = 1;                                           \
    (out)->railId = NCCL_NET_ID_UNDEF;                                        \
    (out)->planeId = NCCL_NET_ID_UNDEF;                                       \
  } while (0)

#define COPY_V9(out, in)                                                      \
  do {                                                                        \
    int nd_ = (in).vProps.ndevs;                                              \
    if (nd_ < 0) nd_ = 0;                                                     \
    if (nd_ > NCCL_NET_MAX_DEVS_PER_NIC_V11) nd_ = NCCL_NET_MAX_DEVS_PER_NIC_V11; \
    (out)->regIsGlobal = (in).regIsGlobal;                                    \
    (out)->forceFlush = (in).forceFlush;                                      \
    (out)->netDeviceType = (in).netDeviceType;                                \
    (out)->netDeviceVersion = (in).netDeviceVersion;                          \
    (out)->vProps.ndevs = nd_;                                                \
    for (int i_ = 0; i_ < nd_; i_++) (out)->vProps.devs[i_] = (in).vProps.devs[i_]; \
    (out)->maxP2pBytes = (in).maxP2pBytes;                                    \
    (out)->maxCollBytes = (in).maxCollBytes;                                  \
  } while (0)

/* In ad_get_properties: a version-V table's answer for dev, as `in`, with
 * the members every version has copied into out. */
#define GET_PROPS_V(V)                                                        \
  ncclNetProperties_v##V##_t in;                                              \
  PCALL(p, "getProperties", p->fn.v##V.getProperties(dev, &in));              \
  COPY_COMMON(&out, in, dev)

static ncclResult_t ad_get_properties(brd_net_plugin_t *p, int dev, brd_net_props_t *props) {
  NEED_READY(p, "getProperties");
  brd_net_props_t out;
  switch (p->version) {
  case 6: {
    GET_PROPS_V(6);
    break;
  }
  case 7: {
    GET_PROPS_V(7);
    out.netDeviceType = in.netDeviceType;
    out.netDeviceVersion = in.netDeviceVersion;
    break;
  }
  case 8: {
    GET_PROPS_V(8);
    out.regIsGlobal = in.regIsGlobal;
    out.netDeviceType = in.netDeviceType;
    out.netDeviceVersion = in.netDeviceVersion;
    break;
  }
  case 9:
  case 10: {
    GET_PROPS_V(9);
    COPY_V9(&out, in);
    break;
  }
  case 11: {
    GET_PROPS_V(11);
    COPY_V9(&out, in);
    out.maxMultiRequestSize = in.maxMultiRequestSize;
    break;
  }
  default: {
    GET_PROPS_V(12);
    int nd = in.vProps.ndevs < 0 ? 0 : in.vProps.ndevs;
    if (nd > NCCL_NET_MAX_DEVS_PER_NIC_V12) nd = NCCL_NET_MAX_DEVS_PER_NIC_V12;
    out.regIsGlobal = in.regIsGlobal;
    out.forceFlush = in.forceFlush;
    out.netDeviceType = in.netDeviceType;
    out.netDeviceVersion = in.netDeviceVersion;
    out.vProps.ndevs = nd;
    for (int i = 0; i < nd; i++) out.vProps.devs[i] = in.vProps.devs[i];
    out.maxP2pBytes = in.maxP2pBytes;
    out.maxCollBytes = in.maxCollBytes;
    out.maxMultiRequestSize = in.maxMultiRequestSize;
    out.railId = in.railId;
    out.planeId = in.planeId;
    break;
  }
  }
  *props = out;
  return ncclSuccess;
}

/* ---- init / finalize ---------------------------------------------------- */

static size_t table_size(int version) {
  switch (version) {
  case 6: return sizeof(ncclNet_v6_t);
  case 7: return sizeof(ncclNet_v7_t);
  case 8: return sizeof(ncclNet_v8_t);
  case 9: return sizeof(ncclNet_v9_t);
  case 10: return sizeof(ncclNet_v10_t);
  case 11: return sizeof(ncclNet_v11_t);
  default: return sizeof(ncclNet_v12_t);
  }
}

/* Under p->mu, after the plugin's init succeeded the first time: take its
 * pointers now (plugins may fill the exported table inside init), and
 * expose the optional members it has. */
static void take_table(brd_net_plugin_t *p, const brd_net_ops_t *trampolines) {
  memset(&p->fn, 0, sizeof(p->fn));
  memcpy(&p->fn, p->sym, table_size(p->version));
  if (p->fn.v6.name != NULL) snprintf(p->name, sizeof(p->name), "%s", p->fn.v6.name);
  const ncclNet_v12_t *f = &p->fn.v12;  /* members whose type is alike in every version */
  p->ops.regMrDmaBuf = f->regMrDmaBuf ? trampolines->regMrDmaBuf : NULL;
  p->ops.iflush = f->iflush ? trampolines->iflush : NULL;
  p->ops.getDeviceMr = p->version >= 7 && f->getDeviceMr ? trampolines->getDeviceMr : NULL;
  p->ops.irecvConsumed =
      p->version >= 7 && f->irecvConsumed ? trampolines->irecvConsumed : NULL;
  p->ops.makeVDevice = p->version >= 9 && f->makeVDevice ? trampolines->makeVDevice : NULL;
  p->ops.setNetAttr = p->version >= 11 && f->setNetAttr ? trampolines->setNetAttr : NULL;
  __atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
}

static const brd_net_ops_t slot_ops[BRD_NET_PLUGIN_SLOTS];

static ncclResult_t ad_init(brd_net_plugin_t *p, void **ctx, uint64_t comm_id,
                            brd_net_config_t *config, brd_net_logger_t log,
                            brd_net_prof_cb_t prof) {
  ncclResult_t res = ncclSuccess;
  adctx_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("NET/Plugin: %s: out of memory for a context", p->name);
    return ncclSystemError;
  }
  c->p = p;
  c->cfg.trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  ncclDebugLogger_t logger = (ncclDebugLogger_t)log;
  ncclProfilerCallback_t profcb = (ncclProfilerCallback_t)prof;

  pthread_mutex_lock(&p->mu);
  if (p->version <= 10) {
    /* These versions initialise once per process: later communicators share
     * that initialisation, as with NCCL. */
    if (p->own_inits == 0) {
      if (p->version == 10)
        res = ((const ncclNet_v10_t *)p->sym)->init(logger, profcb);
      else
        res = ((const ncclNet_v6_t *)p->sym)->init(logger);  /* same slot, v6..v9 */
      if (res != ncclSuccess) goto fail;
      p->own_inits++;
    }
  } else {
    ncclNetCommConfig_v12_t cfg = {c->cfg.trafficClass};
    if (p->version == 11)
      res = ((const ncclNet_v11_t *)p->sym)->init(&c->inner, comm_id,
                                                  (ncclNetCommConfig_v11_t *)&cfg, logger,
                                                  profcb);
    else
      res = ((const ncclNet_v12_t *)p->sym)->init(&c->inner, comm_id, &cfg, logger, profcb);
    if (res != ncclSuccess) goto fail;
    p->own_inits++;
  }
  if (!p->ready) take_table(p, &slot_ops[p->slot]);
  p->live++;
  pthread_mutex_unlock(&p->mu);
  *ctx = c;
  return ncclSuccess;
fail:
  pthread_mutex_unlock(&p->mu);
  free(c);
  WARN("NET/Plugin: %s (v%d) init failed: %s (see the plugin's own messages; fix its "
       "setup, or set NCCL_NET_PLUGIN=none to use the built-in nets)",
       p->name, p->version, res_name(res));
  return res;
}

static ncclResult_t ad_finalize(void *ctx) {
  adctx_t *c = ctx;
  if (c == NULL) return ncclSuccess;
  brd_net_plugin_t *p = c->p;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p->mu);
  if (p->version >= 11 && p->fn.v12.finalize != NULL) res = p->fn.v12.finalize(c->inner);
  p->live--;
  pthread_mutex_unlock(&p->mu);
  free(c);
  if (res != ncclSuccess) return failed(p, "finalize", res, "");
  return ncclSuccess;
}

/* ---- connection setup --------------------------------------------------- */

static ncclResult_t ad_devices(brd_net_plugin_t *p, int *ndev) {
  NEED_READY(p, "devices");
  PCALL(p, "devices", p->fn.v12.devices(ndev));
  return ncclSuccess;
}

static ncclResult_t ad_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  adctx_t *c = ctx;
  brd_net_plugin_t *p = c->p;
  if (p->version <= 10)
    PCALL(p, "listen", p->fn.v6.listen(dev, handle, listen_comm));
  else
    PCALL(p, "listen", p->fn.v12.listen(c->inner, dev, handle, listen_comm));
  return ncclSuccess;
}

static ncclResult_t ad_connect(void *ctx, int dev, void *handle, void **send_comm,
                               void **send_dev_comm) {
  adctx_t *c = ctx;
  brd_net_plugin_t *p = c->p;
  ncclNetDeviceHandle_v7_t **dc = (ncclNetDeviceHandle_v7_t **)send_dev_comm;
  switch (p->version) {
  case 6: PCALL(p, "connect", p->fn.v6.connect(dev, handle, send_comm)); break;
  case 7:
  case 8:
  case 9: PCALL(p, "connect", p->fn.v7.connect(dev, handle, send_comm, dc)); break;
  case 10: PCALL(p, "connect", p->fn.v10.connect(dev, &c->cfg, handle, send_comm, dc)); break;
  default: PCALL(p, "connect", p->fn.v12.connect(c->inner, dev, handle, send_comm, dc)); break;
  }
  return ncclSuccess;
}

static ncclResult_t ad_accept(brd_net_plugin_t *p, void *listen_comm, void **recv_comm,
                              void **recv_dev_comm) {
  NEED_READY(p, "accept");
  if (p->version == 6)
    PCALL(p, "accept", p->fn.v6.accept(listen_comm, recv_comm));
  else
    PCALL(p, "accept", p->fn.v7.accept(listen_comm, recv_comm,
                                       (ncclNetDeviceHandle_v7_t **)recv_dev_comm));
  return ncclSuccess;
}

/* ---- memory registration ------------------------------------------------ */

static ncclResult_t too_big(const brd_net_plugin_t *p, const char *call, size_t size,
                            size_t limit) {
  return ad_warn(ncclInternalError,
                 "NET/Plugin: %s is a v%d plugin, whose %s takes an int size: %zu bytes exceed "
                 "its limit of %zu (Braid splits transfers at maxP2pBytes; register smaller "
                 "buffers or use a plugin built for ncclNet_v9 or newer)",
                 p->name, p->version, call, size, limit);
}

static ncclResult_t ad_reg_mr(brd_net_plugin_t *p, void *comm, void *data, size_t size,
                              int type, void **mhandle) {
  NEED_READY(p, "regMr");
  if (p->version <= 7) {
    if (size > (size_t)INT_MAX) return too_big(p, "regMr", size, (size_t)INT_MAX);
    PCALL(p, "regMr", p->fn.v6.regMr(comm, data, (int)size, type, mhandle));
  } else {
    PCALL(p, "regMr", p->fn.v8.regMr(comm, data, size, type, mhandle));
  }
  return ncclSuccess;
}

static ncclResult_t ad_reg_mr_dmabuf(brd_net_plugin_t *p, void *comm, void *data, size_t size,
                                     int type, uint64_t offset, int fd, void **mhandle) {
  NEED_READY(p, "regMrDmaBuf");
  PCALL(p, "regMrDmaBuf", p->fn.v12.regMrDmaBuf(comm, data, size, type, offset, fd, mhandle));
  return ncclSuccess;
}

static ncclResult_t ad_dereg_mr(brd_net_plugin_t *p, void *comm, void *mhandle) {
  NEED_READY(p, "deregMr");
  PCALL(p, "deregMr", p->fn.v12.deregMr(comm, mhandle));
  return ncclSuccess;
}

/* ---- data path ---------------------------------------------------------- */

static ncclResult_t ad_isend(brd_net_plugin_t *p, void *send_comm, void *data, size_t size,
                             int tag, void *mhandle, void *phandle, void **request) {
  NEED_READY(p, "isend");
  switch (p->version) {
  case 6:
  case 7:
  case 8:
    if (size > (size_t)MAX_NET_SIZE) return too_big(p, "isend", size, (size_t)MAX_NET_SIZE);
    PCALL(p, "isend", p->fn.v6.isend(send_comm, data, (int)size, tag, mhandle, request));
    break;
  case 9:
    PCALL(p, "isend", p->fn.v9.isend(send_comm, data, size, tag, mhandle, request));
    break;
  default:
    PCALL(p, "isend", p->fn.v12.isend(send_comm, data, size, tag, mhandle, phandle, request));
    break;
  }
  return ncclSuccess;
}

static ncclResult_t ad_irecv(brd_net_plugin_t *p, void *recv_comm, int n, void **data,
                             size_t *sizes, int *tags, void **mhandles, void **phandles,
                             void **request) {
  NEED_READY(p, "irecv");
  switch (p->version) {
  case 6:
  case 7:
  case 8: {
    int isz[BRD_NET_MAX_REQUESTS];
    if (n < 0 || n > BRD_NET_MAX_REQUESTS)
      return ad_warn(ncclInternalError, "NET/Plugin: %s: irecv of %d buffers (at most %d)",
                     p->name, n, BRD_NET_MAX_REQUESTS);
    for (int i = 0; i < n; i++) {
      if (sizes[i] > (size_t)MAX_NET_SIZE)
        return too_big(p, "irecv", sizes[i], (size_t)MAX_NET_SIZE);
      isz[i] = (int)sizes[i];
    }
    /* The optional-completion hint came with v9; older plugins would take
     * the preset 0x1 for a request of theirs. */
    if (*request == (void *)NCCL_NET_OPTIONAL_RECV_COMPLETION) *request = NULL;
    PCALL(p, "irecv", p->fn.v6.irecv(recv_comm, n, data, isz, tags, mhandles, request));
    break;
  }
  case 9:
    PCALL(p, "irecv", p->fn.v9.irecv(recv_comm, n, data, sizes, tags, mhandles, request));
    break;
  default:
    PCALL(p, "irecv",
          p->fn.v12.irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request));
    break;
  }
  return ncclSuccess;
}

static ncclResult_t ad_iflush(brd_net_plugin_t *p, void *recv_comm, int n, void **data,
                              int *sizes, void **mhandles, void **request) {
  NEED_READY(p, "iflush");
  PCALL(p, "iflush", p->fn.v12.iflush(recv_comm, n, data, sizes, mhandles, request));
  return ncclSuccess;
}

static ncclResult_t ad_test(brd_net_plugin_t *p, void *request, int *done, int *sizes) {
  NEED_READY(p, "test");
  PCALL(p, "test", p->fn.v12.test(request, done, sizes));
  return ncclSuccess;
}

static ncclResult_t ad_close(brd_net_plugin_t *p, int which, void *comm) {
  static const char *const what[] = {"closeSend", "closeRecv", "closeListen"};
  NEED_READY(p, what[which]);
  const ncclNet_v12_t *f = &p->fn.v12;
  PCALL(p, what[which], which == 0   ? f->closeSend(comm)
                        : which == 1 ? f->closeRecv(comm)
                                     : f->closeListen(comm));
  return ncclSuccess;
}

static ncclResult_t ad_get_device_mr(brd_net_plugin_t *p, void *comm, void *mhandle,
                                     void **dptr) {
  NEED_READY(p, "getDeviceMr");
  PCALL(p, "getDeviceMr", p->fn.v12.getDeviceMr(comm, mhandle, dptr));
  return ncclSuccess;
}

static ncclResult_t ad_irecv_consumed(brd_net_plugin_t *p, void *recv_comm, int n,
                                      void *request) {
  NEED_READY(p, "irecvConsumed");
  PCALL(p, "irecvConsumed", p->fn.v12.irecvConsumed(recv_comm, n, request));
  return ncclSuccess;
}

static ncclResult_t ad_make_vdevice(brd_net_plugin_t *p, int *d, brd_net_vprops_t *props) {
  NEED_READY(p, "makeVDevice");
  if (p->version >= 12) {
    PCALL(p, "makeVDevice", p->fn.v12.makeVDevice(d, (ncclNetVDeviceProps_v12_t *)props));
    return ncclSuccess;
  }
  if (props->ndevs < 0 || props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC_V11) {
    WARN("NET/Plugin: %s is a v%d plugin: a virtual device fuses at most %d devices, not %d",
         p->name, p->version, NCCL_NET_MAX_DEVS_PER_NIC_V11, props->ndevs);
    return ncclInvalidUsage;
  }
  ncclNetVDeviceProps_v9_t old = {props->ndevs, {0}};
  for (int i = 0; i < props->ndevs; i++) old.devs[i] = props->devs[i];
  PCALL(p, "makeVDevice", p->fn.v9.makeVDevice(d, &old));
  return ncclSuccess;
}

/* The why member: this thread's last failed call (ad_said), whichever
 * connection it was on. */
static size_t ad_why(void *comm, char *buf, size_t n) {
  (void)comm;
  if (n == 0) return 0;
  snprintf(buf, n, "%s", ad_said);
  return strlen(buf);
}

static ncclResult_t ad_set_net_attr(void *ctx, brd_net_attr_t *attr) {
  adctx_t *c = ctx;
  brd_net_plugin_t *p = c->p;
  PCALL(p, "setNetAttr", p->fn.v12.setNetAttr(c->inner, (ncclNetAttr_v12_t *)attr));
  return ncclSuccess;
}

/* ---- per-slot trampolines ----------------------------------------------- */

#define SLOT_FUNCS(k)                                                                     \
  static ncclResult_t s##k##_init(void **c, uint64_t id, brd_net_config_t *cf,            \
                                  brd_net_logger_t l, brd_net_prof_cb_t pf) {             \
    return ad_init(&slots[k], c, id, cf, l, pf);                                          \
  }                                                                                       \
  static ncclResult_t s##k##_devices(int *n) { return ad_devices(&slots[k], n); }         \
  static ncclResult_t s##k##_props(int d, brd_net_props_t *pr) {                          \
    return ad_get_properties(&slots[k], d, pr);                                           \
  }                                                                                       \
  static ncclResult_t s##k##_accept(void *l, void **r, void **rd) {                       \
    return ad_accept(&slots[k], l, r, rd);                                                \
  }                                                                                       \
  static ncclResult_t s##k##_regmr(void *c, void *d, size_t s, int t, void **m) {         \
    return ad_reg_mr(&slots[k], c, d, s, t, m);                                           \
  }                                                                                       \
  static ncclResult_t s##k##_regdmabuf(void *c, void *d, size_t s, int t, uint64_t o,     \
                                       int fd, void **m) {                                \
    return ad_reg_mr_dmabuf(&slots[k], c, d, s, t, o, fd, m);                             \
  }                                                                                       \
  static ncclResult_t s##k##_dereg(void *c, void *m) { return ad_dereg_mr(&slots[k], c, m); } \
  static ncclResult_t s##k##_isend(void *c, void *d, size_t s, int t, void *m, void *ph,  \
                                   void **r) {                                            \
    return ad_isend(&slots[k], c, d, s, t, m, ph, r);                                     \
  }                                                                                       \
  static ncclResult_t s##k##_irecv(void *c, int n, void **d, size_t *s, int *t, void **m, \
                                   void **ph, void **r) {                                 \
    return ad_irecv(&slots[k], c, n, d, s, t, m, ph, r);                                  \
  }                                                                                       \
  static ncclResult_t s##k##_iflush(void *c, int n, void **d, int *s, void **m, void **r) { \
    return ad_iflush(&slots[k], c, n, d, s, m, r);                                        \
  }                                                                                       \
  static ncclResult_t s##k##_test(void *r, int *d, int *s) {                              \
    return ad_test(&slots[k], r, d, s);                                                   \
  }                                                                                       \
  static ncclResult_t s##k##_csend(void *c) { return ad_close(&slots[k], 0, c); }         \
  static ncclResult_t s##k##_crecv(void *c) { return ad_close(&slots[k], 1, c); }         \
  static ncclResult_t s##k##_clisten(void *c) { return ad_close(&slots[k], 2, c); }       \
  static ncclResult_t s##k##_devmr(void *c, void *m, void **dp) {                         \
    return ad_get_device_mr(&slots[k], c, m, dp);                                         \
  }                                                                                       \
  static ncclResult_t s##k##_consumed(void *c, int n, void *r) {                          \
    return ad_irecv_consumed(&slots[k], c, n, r);                                         \
  }                                                                                       \
  static ncclResult_t s##k##_vdev(int *d, brd_net_vprops_t *pr) {                         \
    return ad_make_vdevice(&slots[k], d, pr);                                             \
  }

#define SLOT_OPS(k)                                                                       \
  {                                                                                       \
    .name = NULL, .init = s##k##_init, .devices = s##k##_devices,                         \
    .getProperties = s##k##_props, .listen = ad_listen, .connect = ad_connect,            \
    .accept = s##k##_accept, .regMr = s##k##_regmr, .regMrDmaBuf = s##k##_regdmabuf,      \
    .deregMr = s##k##_dereg, .isend = s##k##_isend, .irecv = s##k##_irecv,                \
    .iflush = s##k##_iflush, .test = s##k##_test, .closeSend = s##k##_csend,              \
    .closeRecv = s##k##_crecv, .closeListen = s##k##_clisten,                             \
    .getDeviceMr = s##k##_devmr, .irecvConsumed = s##k##_consumed,                        \
    .makeVDevice = s##k##_vdev, .finalize = ad_finalize, .setNetAttr = ad_set_net_attr,   \
    .why = ad_why,                                                                        \
  }

SLOT_FUNCS(0)
SLOT_FUNCS(1)
SLOT_FUNCS(2)
SLOT_FUNCS(3)
SLOT_FUNCS(4)
SLOT_FUNCS(5)
SLOT_FUNCS(6)
SLOT_FUNCS(7)
_Static_assert(BRD_NET_PLUGIN_SLOTS == 8, "one SLOT_FUNCS and SLOT_OPS line per slot");
static const brd_net_ops_t slot_ops[BRD_NET_PLUGIN_SLOTS] = {
    SLOT_OPS(0), SLOT_OPS(1), SLOT_OPS(2), SLOT_OPS(3),
    SLOT_OPS(4), SLOT_OPS(5), SLOT_OPS(6), SLOT_OPS(7),
};

/* ---- opening a library -------------------------------------------------- */

/* dlopen one name; on failure appends the name to missing (ENOENT) or logs
 * the dlerror text, and copies that text to err. */
static void *try_open(const char *name, int loud, char *missing, size_t mlen, char *err,
                      size_t elen) {
  const char *file = name;
  if (strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0) file = NULL;
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) return h;
  const char *e = dlerror();
  snprintf(err, elen, "%s", e ? e : "unknown dlopen error");
  if (strstr(err, name) != NULL && strstr(err, "No such file or directory") != NULL) {
    size_t used = strlen(missing);
    snprintf(missing + used, mlen - used, " %s", name);
  } else if (loud) {
    WARN("NET/Plugin: %s: %s (fix the library or its dependencies, or set "
         "NCCL_NET_PLUGIN=none)", name, err);
  } else {
    INFO(NET_SUBSYS, "NET/Plugin: %s: %s", name, err);
  }
  return NULL;
}

static void *open_lib(const char *spec, int loud) {
  char missing[2 * PATH_MAX] = "", err[512] = "", alt[NAME_MAX_LEN + 32];
  const char *name = (spec != NULL && spec[0] != '\0') ? spec : "libnccl-net.so";
  void *h = try_open(name, loud, missing, sizeof(missing), err, sizeof(err));
  if (h != NULL) return h;
  size_t len = strlen(name);
  int full_lib = strncmp(name, "lib", 3) == 0 && len >= 3 && strcmp(name + len - 3, ".so") == 0;
  if (spec != NULL && spec[0] != '\0' && strchr(spec, '/') == NULL && !full_lib) {
    snprintf(alt, sizeof(alt), "libnccl-net-%s.so", spec);
    h = try_open(alt, loud, missing, sizeof(missing), err, sizeof(err));
    if (h != NULL) return h;
  }
  if (missing[0] != '\0') {
    if (loud)
      WARN("NET/Plugin: Could not find:%s (%s). Give NCCL_NET_PLUGIN a path, or put the "
           "library on LD_LIBRARY_PATH; NCCL_NET_PLUGIN=none uses the built-in nets",
           missing, err);
    else
      INFO(NET_SUBSYS, "NET/Plugin: Could not find:%s. Using the built-in nets (a net "
           "plugin is optional)", missing);
  }
  return NULL;
}


static ncclResult_t load(const char *spec, int loud, brd_net_plugin_t **out) {
  ncclResult_t res = ncclSuccess;
  void *dl = open_lib(spec, loud);
  if (dl == NULL) return ncclSystemError;
  const char *label = (spec && spec[0]) ? spec : "libnccl-net.so";

  int version = 0, coll_version = 0;
  const void *sym = NULL, *collsym = NULL;
  sym = brd_plugin_find_versioned(dl, "ncclNetPlugin_v", NEWEST, OLDEST, NULL, &version);
  /* name and init are all a table holds before init. */
  const ncclNet_v6_t *head = sym;
  if (sym == NULL || head->name == NULL || head->init == NULL) {
    char path[PATH_MAX];
    brd_plugin_path(dl, label, path, sizeof(path));
    if (loud)
      WARN("External network plugin %s is unsupported: it exports no usable "
           "ncclNetPlugin_v%d .. v%d (Braid loads those versions)", path, OLDEST, NEWEST);
    else
      INFO(NET_SUBSYS, "External network plugin %s is unsupported", path);
    dlclose(dl);
    return ncclInvalidUsage;
  }
  collsym =
      brd_plugin_find_versioned(dl, "ncclCollNetPlugin_v", NEWEST, OLDEST, NULL, &coll_version);

  pthread_mutex_lock(&slots_mu);
  brd_net_plugin_t *p = NULL;
  for (int k = 0; k < BRD_NET_PLUGIN_SLOTS; k++) {
    if (slots[k].used && slots[k].dl == dl) {
      WARN("NET/Plugin: %s is loaded already (as %s); load each plugin library once",
           label, slots[k].path);
      res = ncclInvalidUsage;
      goto fail_unlock;
    }
    if (!slots[k].used && p == NULL) p = &slots[k];
  }
  if (p == NULL) {
    WARN("NET/Plugin: cannot load %s: all %d plugin slots are in use (unload one first)",
         label, BRD_NET_PLUGIN_SLOTS);
    res = ncclInternalError;
    goto fail_unlock;
  }
  int slot = (int)(p - slots);
  memset(p, 0, sizeof(*p));
  p->slot = slot;
  p->used = 1;
  p->dl = dl;
  p->version = version;
  p->collnet_version = coll_version;
  p->sym = sym;
  p->collsym = collsym;
  brd_plugin_path(dl, label, p->path, sizeof(p->path));
  snprintf(p->name, sizeof(p->name), "%s", head->name);
  pthread_mutex_init(&p->mu, NULL);
  p->ops = slot_ops[slot];
  p->ops.name = p->name;
  /* Optional members appear once init has shown what the plugin has. */
  p->ops.regMrDmaBuf = NULL;
  p->ops.iflush = NULL;
  p->ops.getDeviceMr = NULL;
  p->ops.irecvConsumed = NULL;
  p->ops.makeVDevice = NULL;
  p->ops.setNetAttr = NULL;
  pthread_mutex_unlock(&slots_mu);

  INFO(NET_SUBSYS, "NET/Plugin: Loaded net plugin %s (v%d)", p->name, version);
  if (collsym != NULL)
    INFO(NET_SUBSYS, "NET/Plugin: Loaded collnet plugin %s (v%d) (Braid does not use "
         "collnet yet)", ((const ncclCollNet_v6_t *)collsym)->name
                             ? ((const ncclCollNet_v6_t *)collsym)->name : "(unnamed)",
         coll_version);
  INFO(NET_SUBSYS, "Successfully loaded external network plugin %s", p->path);
  *out = p;
  return ncclSuccess;
fail_unlock:
  pthread_mutex_unlock(&slots_mu);
  dlclose(dl);
  return res;
}

ncclResult_t brd_net_plugin_load(const char *spec, brd_net_plugin_t **out) {
  if (out == NULL) return ncclInvalidArgument;
  return load(spec, 1, out);
}

void brd_net_plugin_unload(brd_net_plugin_t *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&slots_mu);
  if (p->live > 0)
    WARN("NET/Plugin: unloading %s with %d contexts not finalized", p->name, p->live);
  INFO(BRD_SUBSYS_NET, "Unloading plugin %s", p->path);
  void *dl = p->dl;
  pthread_mutex_destroy(&p->mu);
  memset(p, 0, sizeof(*p));
  pthread_mutex_unlock(&slots_mu);
  dlclose(dl);
}

const brd_net_ops_t *brd_net_plugin_ops(const brd_net_plugin_t *p) { return &p->ops; }
int brd_net_plugin_version(const brd_net_plugin_t *p) { return p->version; }
int brd_net_plugin_collnet_version(const brd_net_plugin_t *p) { return p->collnet_version; }
const char *brd_net_plugin_path(const brd_net_plugin_t *p) { return p->path; }

/* ---- the process's net -------------------------------------------------- */

static pthread_mutex_t net_mu = PTHREAD_MUTEX_INITIALIZER;
static int net_chosen;
static const brd_net_ops_t *net_cur;
static brd_net_plugin_t *net_plugin;   /* the plugin behind net_cur, if any */
static char net_why[512];

/* A net is usable when init works, devices() reports at least one device
 * and device 0 is one Braid can drive (host memory; no device offload). */
/* Why the last net usable() refused was refused, for the final message. */
static const char *unusable_why = "";

static int usable(const brd_net_ops_t *net, int loud) {
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  int ndev = 0, ok = 0;
  brd_net_props_t props;
  unusable_why = "init failed";
  if (net->init(&ctx, 0, &cfg, brd_net_log, NULL) != ncclSuccess) {
    INFO(NET_SUBSYS, "Failed to initialize NET plugin %s", net->name);
    return 0;
  }
  unusable_why = "no device";
  if (net->devices(&ndev) != ncclSuccess || ndev <= 0) {
    if (loud)
      WARN("NET/Plugin: %s reports no device (devices() gave %d); skipping it", net->name,
           ndev);
    else
      INFO(NET_SUBSYS, "NET/Plugin: %s reports no device; skipping it", net->name);
    goto out;
  }
  unusable_why = "no properties";
  if (net->getProperties(0, &props) != ncclSuccess) goto out;
  unusable_why = "a device type Braid does not drive";
  switch (props.netDeviceType) {
  case NCCL_NET_DEVICE_HOST: ok = 1; break;
  case NCCL_NET_DEVICE_UNPACK:
    if (props.netDeviceVersion != NCCL_NET_DEVICE_UNPACK_VERSION)
      WARN("NCCL_DEVICE_UNPACK plugin has incompatible version %d, this NCCL build is "
           "compatible with %d, not using it", props.netDeviceVersion,
           NCCL_NET_DEVICE_UNPACK_VERSION);
    else
      WARN("NET/Plugin: %s needs NCCL_NET_DEVICE_UNPACK device offload, which Braid does "
           "not implement; not using it", net->name);
    break;
  default: WARN("Unknown device code index %d", props.netDeviceType); break;
  }
  if (ok) INFO(NET_SUBSYS, "Initialized NET plugin %s", net->name);
out:
  (void)net->finalize(ctx);
  return ok;
}

static void names_add(char *list, size_t n, const char *name) {
  size_t used = strlen(list);
  snprintf(list + used, n - used, "%s%s", used ? ", " : "", name);
}

static const brd_net_ops_t *choose(void) {
  const char *spec = brd_param_str(BRD_P_NET_PLUGIN);
  const char *want = brd_param_str(BRD_P_NET);
  if (want != NULL && want[0] == '\0') want = NULL;
  char seen[512] = "";
  net_why[0] = '\0';

  /* NCCL_NET_PLUGIN's libraries in order (libnccl-net.so when unset). */
  char *list = NULL;
  int loud = spec != NULL;
  if (spec != NULL) {
    INFO(BRD_SUBSYS_ENV | BRD_SUBSYS_NET, "NCCL_NET_PLUGIN set by environment to %s", spec);
    list = strdup(strcasecmp(spec, "none") == 0 ? "" : spec);
  } else {
    list = strdup("libnccl-net.so");
  }
  if (list == NULL) {
    snprintf(net_why, sizeof(net_why), "out of memory reading NCCL_NET_PLUGIN");
    return NULL;
  }
  int count = 0;
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    if (count >= MAX_LIST) {
      INFO(NET_SUBSYS, "NCCL_NET_PLUGIN list contains more than %d plugins, ignoring the rest",
           MAX_LIST);
      break;
    }
    if (strlen(tok) + 1 > NAME_MAX_LEN) {
      INFO(NET_SUBSYS, "NCCL_NET_PLUGIN list contains a plugin name %s longer than %d "
           "characters, ignoring it.", tok, NAME_MAX_LEN);
      continue;
    }
    count++;
    brd_net_plugin_t *p = NULL;
    if (load(spec ? tok : NULL, loud, &p) != ncclSuccess) continue;
    names_add(seen, sizeof(seen), p->name);
    if (want != NULL && strcasecmp(want, p->name) != 0) {
      INFO(NET_SUBSYS, "NET/Plugin: %s is not NCCL_NET=%s; skipping it", p->name, want);
      brd_net_plugin_unload(p);
      continue;
    }
    if (!usable(&p->ops, loud)) {
      brd_net_plugin_unload(p);
      continue;
    }
    free(list);
    net_plugin = p;
    INFO(NET_SUBSYS, "Using network %s", p->name);
    return &p->ops;
  }
  free(list);

  /* The built-in nets. */
  /* IB first, as NCCL: with no verbs library, no active port or
   * NCCL_IB_DISABLE it has no device and Socket is next (INFO only, unless
   * NCCL_NET asked for it). */
  const brd_net_ops_t *builtin[] = {&brd_net_ib, &brd_net_socket};
  for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
    const brd_net_ops_t *net = builtin[i];
    if (want != NULL && strcasecmp(want, net->name) != 0) {
      names_add(seen, sizeof(seen), net->name);
      continue;
    }
    if (!usable(net, want != NULL || net != &brd_net_ib)) {
      char entry[128];
      snprintf(entry, sizeof(entry), "%s: %s", net->name, unusable_why);
      names_add(seen, sizeof(seen), entry);
      continue;
    }
    INFO(NET_SUBSYS, "Using network %s", net->name);
    return net;
  }
  if (want != NULL)
    snprintf(net_why, sizeof(net_why),
             "Failed to initialize any NET plugin: NCCL_NET=%s names none of the usable "
             "networks (tried: %s); set NCCL_NET to one of them, or unset it", want, seen);
  else
    snprintf(net_why, sizeof(net_why),
             "Failed to initialize any NET plugin (tried: %s); see the messages above", seen);
  WARN("%s", net_why);
  return NULL;
}

const brd_net_ops_t *brd_net_get(char *why, size_t n) {
  pthread_mutex_lock(&net_mu);
  if (!net_chosen) {
    net_cur = choose();
    net_chosen = 1;
  }
  const brd_net_ops_t *net = net_cur;
  if (net == NULL && why != NULL && n > 0) snprintf(why, n, "%s", net_why);
  pthread_mutex_unlock(&net_mu);
  return net;
}

/* dlopen of one NCCL_NET_PLUGIN entry by the loader's naming rules, with
 * no message (a net library is opened here only to look inside it). */
static void *open_quiet(const char *spec) {
  const char *name = (spec != NULL && spec[0] != '\0') ? spec : "libnccl-net.so";
  const char *file = strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0 ? NULL : name;
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  size_t len = strlen(name);
  int full_lib = strncmp(name, "lib", 3) == 0 && len >= 3 && strcmp(name + len - 3, ".so") == 0;
  if (h == NULL && spec != NULL && spec[0] != '\0' && strchr(spec, '/') == NULL && !full_lib) {
    char alt[NAME_MAX_LEN + 32];
    snprintf(alt, sizeof(alt), "libnccl-net-%s.so", spec);
    h = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
  }
  if (h == NULL) (void)dlerror();
  return h;
}

void *brd_net_plugin_lib_open(char *path_out, size_t n) {
  void *h = NULL;
  pthread_mutex_lock(&net_mu);
  if (net_plugin != NULL) {
    h = dlopen(net_plugin->path, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL && path_out != NULL && n > 0) snprintf(path_out, n, "%s", net_plugin->path);
    pthread_mutex_unlock(&net_mu);
    return h;
  }
  pthread_mutex_unlock(&net_mu);
  const char *spec = brd_param_str(BRD_P_NET_PLUGIN);
  if (spec != NULL && strcasecmp(spec, "none") == 0) return NULL;
  char *list = strdup(spec != NULL ? spec : "");
  if (list == NULL) return NULL;
  char *save = NULL;
  int count = 0;
  if (spec == NULL) {
    h = open_quiet(NULL);
  } else {
    for (char *tok = strtok_r(list, ",", &save); tok != NULL && h == NULL && count < MAX_LIST;
         tok = strtok_r(NULL, ",", &save), count++)
      if (strlen(tok) + 1 <= NAME_MAX_LEN) h = open_quiet(tok);
  }
  free(list);
  if (h != NULL && path_out != NULL && n > 0) brd_plugin_path(h, spec ? spec : "libnccl-net.so", path_out, n);
  return h;
}

/* See net_plugin.h. */
void *brd_net_plugin_open_other(const char *spec, const char *kind, const char *prefix,
                                unsigned long subsys, brd_plugin_found_t *f) {
  memset(f, 0, sizeof(*f));
  void *dl = brd_plugin_open(spec, kind, f->missing, sizeof(f->missing), f->err,
                             sizeof(f->err));
  if (dl != NULL) {
    char def[64];
    snprintf(def, sizeof(def), "libnccl-%s.so", kind);
    brd_plugin_path(dl, spec ? spec : def, f->path, sizeof(f->path));
    return dl;
  }
  if (f->missing[0] != '\0') INFO(subsys, "%s: Could not find:%s", prefix, f->missing);
  if (f->err[0] != '\0') INFO(subsys, "%s: %s", prefix, f->err);
  dl = brd_net_plugin_lib_open(f->path, sizeof(f->path));
  f->in_net = dl != NULL;
  return dl;
}

void brd_net_reset(void) {
  pthread_mutex_lock(&net_mu);
  brd_net_plugin_t *p = net_plugin;
  net_plugin = NULL;
  net_cur = NULL;
  net_chosen = 0;
  net_why[0] = '\0';
  pthread_mutex_unlock(&net_mu);
  brd_net_plugin_unload(p);
}
