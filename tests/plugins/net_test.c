/*
 * A small real net plugin for tests: TCP over 127.0.0.1, one device,
 * non-blocking listen/connect/accept, in-order messages, one receive per
 * irecv. Compiled once per ABI version (-DNET_VERSION=6 .. 12) against
 * plugins/include/nccl_net.h only; -DNET_LAZY=1 exports a table holding
 * only name and init and fills the rest inside init, as some plugins do.
 *
 * Each message is an 8-byte length and the bytes. test() moves the
 * connection's requests forward in post order without blocking. Every call
 * is counted in nettest_counts_vN (net_test.h), and faults are injected
 * from the environment (net_test.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nccl_net.h"
#include "net_test.h"

#ifndef NET_VERSION
#error "build with -DNET_VERSION=6 .. 12"
#endif
#ifndef NET_LAZY
#define NET_LAZY 0
#endif

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define V(x) CAT(x, NET_VERSION)             /* V(ncclNet_v) -> ncclNet_v12 */
#define EXPORT __attribute__((visibility("default")))
#define STR2(x) #x
#define STR(x) STR2(x)

typedef CAT(V(ncclNet_v), _t) net_t;
typedef CAT(V(ncclNetProperties_v), _t) props_t;
#if NET_VERSION >= 7
typedef CAT(V(ncclNetDeviceHandle_v), _t) devhandle_t;
#endif
#if NET_VERSION >= 9
typedef CAT(V(ncclNetVDeviceProps_v), _t) vprops_t;
#endif
#if NET_VERSION < 9
typedef int xsize_t;                         /* isend/irecv sizes before v9 */
#else
typedef size_t xsize_t;
#endif
#if NET_VERSION < 8
typedef int regsize_t;
#else
typedef size_t regsize_t;
#endif

EXPORT long V(nettest_counts_v)[NT_NCOUNTERS];
#define COUNT(i) __atomic_add_fetch(&V(nettest_counts_v)[i], 1, __ATOMIC_RELAXED)
#define SETC(i, v) __atomic_store_n(&V(nettest_counts_v)[i], (long)(v), __ATOMIC_RELAXED)

static ncclDebugLogger_t logger;
#define LOG(level, ...)                                                       \
  do {                                                                        \
    if (logger) {                                                             \
      COUNT(NT_LOGGED);                                                       \
      logger(level, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__);               \
    }                                                                         \
  } while (0)

static const char *fault(void) {
  const char *f = getenv("NETTEST_FAULT");
  return f ? f : "";
}
static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && v[0] ? atoi(v) : def;
}

#define HANDLE_MAGIC 0x4e455454u
#define CTX_MAGIC 0xc7c7c7c7u
#define MR_MAGIC 0x4d524d52u
#define NREQ NCCL_NET_MAX_REQUESTS

typedef struct {
  uint32_t magic;
  uint16_t port;         /* network order */
  uint32_t addr;         /* network order */
  int stage_fd;          /* connect in progress: fd + 1 (the caller keeps the handle) */
} handle_t;
_Static_assert(sizeof(handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle");

typedef struct {
  uint32_t magic;
  int trafficClass;
} ctx_t;

typedef struct {
  uint32_t magic;
} mr_t;

struct comm;
typedef struct {
  struct comm *comm;
  int used, send, complete;
  ncclResult_t result;
  char *buf;
  size_t cap;            /* receive buffer size */
  size_t size;           /* message size (send: given; recv: from the header) */
  uint64_t hdr;
  size_t hdr_done, done;
} req_t;

typedef struct comm {
  int fd;
  req_t reqs[NREQ];
  int q[NREQ];           /* posted, not complete, in order */
  int head, n;
} comm_t;

typedef struct {
  int fd;
} listen_t;

/* ---- init and devices ---- */

static ncclResult_t t_devices(int *ndev) {
  COUNT(NT_DEVICES);
  *ndev = env_int("NETTEST_NDEV", 1);
  return ncclSuccess;
}

static ncclResult_t t_props(int dev, props_t *p) {
  COUNT(NT_PROPS);
  memset(p, 0, sizeof(*p));
  p->name = (char *)"lo-test";
  p->pciPath = NULL;
  p->guid = NT_GUID + (uint64_t)dev;
  p->ptrSupport = NCCL_PTR_HOST;
  p->speed = NT_SPEED;
  p->port = NT_PORT;
  p->latency = NT_LATENCY;
  p->maxComms = NT_MAXCOMMS;
  p->maxRecvs = 1;
#if NET_VERSION >= 7
  p->netDeviceType = (ncclNetDeviceType)env_int("NETTEST_DEVTYPE", NCCL_NET_DEVICE_HOST);
  p->netDeviceVersion = env_int("NETTEST_DEVVER", NCCL_NET_DEVICE_INVALID_VERSION);
#endif
#if NET_VERSION >= 8
  p->regIsGlobal = 1;
#endif
#if NET_VERSION >= 9
  p->forceFlush = 1;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = NT_MAXP2P;
  p->maxCollBytes = NT_MAXCOLL;
#endif
#if NET_VERSION >= 11
  p->maxMultiRequestSize = NT_MAXMULTI;
#endif
#if NET_VERSION >= 12
  p->railId = NT_RAIL;
  p->planeId = NT_PLANE;
#endif
  return ncclSuccess;
}

#if NET_VERSION >= 11
static int bad_ctx(void *ctx) {
  const ctx_t *c = ctx;
  if (c != NULL && c->magic == CTX_MAGIC) return 0;
  COUNT(NT_BAD_CTX);
  return 1;
}
#endif

/* ---- connection setup ---- */

static ncclResult_t do_listen(int dev, void *handle, void **listen_comm) {
  (void)dev;
  COUNT(NT_LISTEN);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  listen_t *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  handle_t *h = handle;
  memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = HANDLE_MAGIC;
  h->port = a.sin_port;
  h->addr = a.sin_addr.s_addr;
  *listen_comm = l;
  return ncclSuccess;
}

static comm_t *comm_new(int fd) {
  comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->fd = fd;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return c;
}

/* A port nothing listens on: bind one, then close it. */
static uint16_t closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0) return htons(1);
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    a.sin_port = htons(1);
  close(fd);
  return a.sin_port;
}

static ncclResult_t do_connect(int dev, void *handle, void **send_comm) {
  (void)dev;
  COUNT(NT_CONNECT);
  handle_t *h = handle;
  *send_comm = NULL;
  if (h->magic != HANDLE_MAGIC) return ncclInternalError;
  if (h->stage_fd == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ncclSystemError;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = h->port};
    a.sin_addr.s_addr = h->addr;
    if (strcmp(fault(), "connect_refused") == 0) a.sin_port = closed_port();
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      LOG(NCCL_LOG_WARN, "nettest: connect to port %d failed: %s", ntohs(a.sin_port),
          strerror(e));
      return e == ECONNREFUSED ? ncclRemoteError : ncclSystemError;
    }
    h->stage_fd = fd + 1;
  }
  int fd = h->stage_fd - 1;
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  if (poll(&pfd, 1, 0) == 0) return ncclSuccess;  /* not yet: call again */
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  h->stage_fd = 0;
  if (err != 0) {
    close(fd);
    LOG(NCCL_LOG_WARN, "nettest: connect failed: %s", strerror(err));
    return err == ECONNREFUSED ? ncclRemoteError : ncclSystemError;
  }
  comm_t *c = comm_new(fd);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *send_comm = c;
  return ncclSuccess;
}

static ncclResult_t do_accept(void *listen_comm, void **recv_comm) {
  COUNT(NT_ACCEPT);
  listen_t *l = listen_comm;
  *recv_comm = NULL;
  int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? ncclSuccess : ncclSystemError;
  comm_t *c = comm_new(fd);
  if (c == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *recv_comm = c;
  return ncclSuccess;
}

/* ---- registration ---- */

static ncclResult_t t_regmr(void *comm, void *data, regsize_t size, int type, void **mhandle) {
  (void)comm, (void)data, (void)size;
  COUNT(NT_REGMR);
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  mr_t *m = malloc(sizeof(*m));
  if (m == NULL) return ncclSystemError;
  m->magic = MR_MAGIC;
  *mhandle = m;
  return ncclSuccess;
}

static ncclResult_t t_deregmr(void *comm, void *mhandle) {
  (void)comm;
  COUNT(NT_DEREGMR);
  free(mhandle);
  return ncclSuccess;
}

static void check_mr(void *mhandle) {
  const mr_t *m = mhandle;
  if (m == NULL || m->magic != MR_MAGIC) COUNT(NT_BAD_MHANDLE);
}

/* ---- requests ---- */

static req_t *req_post(comm_t *c, int send, void *buf, size_t size) {
  if (c->n == NREQ) return NULL;
  for (int i = 0; i < NREQ; i++) {
    req_t *r = &c->reqs[i];
    if (r->used) continue;
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->used = 1;
    r->send = send;
    r->buf = buf;
    r->cap = size;
    r->size = size;
    r->hdr = size;
    /* A header that promises more than was sent: the receiver's buffer
     * is too small for it. */
    if (send && size >= (size_t)env_int("NETTEST_FAULT_MIN", 0) &&
        strcmp(fault(), "oversize") == 0)
      r->hdr = (uint64_t)size + ((uint64_t)1 << 40);
    c->q[(c->head + c->n) % NREQ] = i;
    c->n++;
    return r;
  }
  return NULL;
}

/* Moves the head request forward; 1 when it completed (or failed). */
static int step(comm_t *c, req_t *r) {
  if (r->send) {
    int short_send = strcmp(fault(), "short_recv") == 0 && r->size > 1 &&
                     r->size >= (size_t)env_int("NETTEST_FAULT_MIN", 0);
    size_t body = short_send ? r->size / 2 : r->size;
    while (r->hdr_done < sizeof(r->hdr)) {
      ssize_t k = send(c->fd, (char *)&r->hdr + r->hdr_done, sizeof(r->hdr) - r->hdr_done,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) goto io_err;
      r->hdr_done += (size_t)k;
    }
    while (r->done < body) {
      ssize_t k = send(c->fd, r->buf + r->done, body - r->done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) goto io_err;
      r->done += (size_t)k;
    }
    if (short_send) shutdown(c->fd, SHUT_WR);
    r->complete = 1;
    return 1;
  }
  while (r->hdr_done < sizeof(r->hdr)) {
    ssize_t k = recv(c->fd, (char *)&r->hdr + r->hdr_done, sizeof(r->hdr) - r->hdr_done,
                     MSG_DONTWAIT);
    if (k == 0) goto closed;
    if (k < 0) goto io_err;
    r->hdr_done += (size_t)k;
  }
  if (r->hdr > r->cap) {
    LOG(NCCL_LOG_WARN, "nettest: message of %llu bytes for a %zu-byte receive",
        (unsigned long long)r->hdr, r->cap);
    r->result = ncclInternalError;
    return 1;
  }
  r->size = (size_t)r->hdr;
  while (r->done < r->size) {
    ssize_t k = recv(c->fd, r->buf + r->done, r->size - r->done, MSG_DONTWAIT);
    if (k == 0) goto closed;
    if (k < 0) goto io_err;
    r->done += (size_t)k;
  }
  r->complete = 1;
  return 1;
closed:
  LOG(NCCL_LOG_WARN, "nettest: connection closed after %zu of %zu bytes", r->done, r->size);
  r->result = ncclRemoteError;
  return 1;
io_err:
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  LOG(NCCL_LOG_WARN, "nettest: socket error: %s", strerror(errno));
  r->result = errno == ECONNRESET || errno == EPIPE ? ncclRemoteError : ncclSystemError;
  return 1;
}

static void progress(comm_t *c) {
  while (c->n > 0) {
    req_t *r = &c->reqs[c->q[c->head]];
    if (!step(c, r)) return;
    c->head = (c->head + 1) % NREQ;
    c->n--;
  }
}

static ncclResult_t do_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  (void)tag;
  COUNT(NT_ISEND);
  check_mr(mhandle);
  *request = req_post(send_comm, 1, data, size);
  return ncclSuccess;
}

static ncclResult_t do_irecv(void *recv_comm, int n, void **data, const size_t *sizes,
                             void **mhandles, void **request) {
  COUNT(NT_IRECV);
  if (*request == (void *)NCCL_NET_OPTIONAL_RECV_COMPLETION) COUNT(NT_SENTINEL);
  if (n != 1) return ncclInternalError;  /* maxRecvs is 1 */
  check_mr(mhandles[0]);
  *request = req_post(recv_comm, 0, data[0], sizes[0]);
  return ncclSuccess;
}

static ncclResult_t t_test(void *request, int *done, int *sizes) {
  COUNT(NT_TEST);
  req_t *r = request;
  *done = 0;
  if (strcmp(fault(), "test_error") == 0) {
    LOG(NCCL_LOG_WARN, "nettest: injected test failure");
    return ncclSystemError;
  }
  progress(r->comm);
  if (r->result != ncclSuccess) {
    ncclResult_t res = r->result;
    r->used = 0;
    return res;
  }
  if (!r->complete) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = (int)(r->send ? r->done : r->size);
  r->used = 0;
  return ncclSuccess;
}

static ncclResult_t t_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                             void **request) {
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL;  /* host memory: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t close_comm(void *comm, int which) {
  COUNT(which);
  comm_t *c = comm;
  if (c == NULL) return ncclSuccess;
  close(c->fd);
  free(c);
  return ncclSuccess;
}
static ncclResult_t t_close_send(void *c) { return close_comm(c, NT_CLOSE_SEND); }
static ncclResult_t t_close_recv(void *c) { return close_comm(c, NT_CLOSE_RECV); }
static ncclResult_t t_close_listen(void *comm) {
  COUNT(NT_CLOSE_LISTEN);
  listen_t *l = comm;
  if (l == NULL) return ncclSuccess;
  close(l->fd);
  free(l);
  return ncclSuccess;
}

/* ---- per-version entry points ---- */

#if NET_VERSION < 10
static ncclResult_t t_isend(void *s, void *d, xsize_t size, int tag, void *m, void **r) {
  return do_isend(s, d, (size_t)size, tag, m, r);
}
static ncclResult_t t_irecv(void *rc, int n, void **d, xsize_t *sizes, int *tags, void **m,
                            void **r) {
  (void)tags;
  size_t s = n > 0 ? (size_t)sizes[0] : 0;
  return do_irecv(rc, n, d, &s, m, r);
}
#else
static ncclResult_t t_isend(void *s, void *d, size_t size, int tag, void *m, void *ph,
                            void **r) {
  (void)ph;
  return do_isend(s, d, size, tag, m, r);
}
static ncclResult_t t_irecv(void *rc, int n, void **d, size_t *sizes, int *tags, void **m,
                            void **ph, void **r) {
  (void)tags, (void)ph;
  return do_irecv(rc, n, d, sizes, m, r);
}
#endif

#if NET_VERSION == 6
static ncclResult_t t_connect(int dev, void *h, void **s) { return do_connect(dev, h, s); }
static ncclResult_t t_accept(void *l, void **r) { return do_accept(l, r); }
#elif NET_VERSION <= 9
static ncclResult_t t_connect(int dev, void *h, void **s, devhandle_t **dc) {
  (void)dc;
  return do_connect(dev, h, s);
}
#elif NET_VERSION == 10
static ncclResult_t t_connect(int dev, ncclNetCommConfig_v10_t *cfg, void *h, void **s,
                              devhandle_t **dc) {
  (void)dc;
  if (cfg == NULL) {
    COUNT(NT_BAD_CTX);
    return ncclInternalError;
  }
  SETC(NT_LAST_TC, cfg->trafficClass);
  return do_connect(dev, h, s);
}
#else
static ncclResult_t t_connect(void *ctx, int dev, void *h, void **s, devhandle_t **dc) {
  (void)dc;
  if (bad_ctx(ctx)) return ncclInternalError;
  return do_connect(dev, h, s);
}
#endif
#if NET_VERSION >= 7
static ncclResult_t t_accept(void *l, void **r, devhandle_t **dc) {
  (void)dc;
  return do_accept(l, r);
}
#endif

#if NET_VERSION >= 11
static ncclResult_t t_listen(void *ctx, int dev, void *h, void **l) {
  if (bad_ctx(ctx)) return ncclInternalError;
  return do_listen(dev, h, l);
}
#else
static ncclResult_t t_listen(int dev, void *h, void **l) { return do_listen(dev, h, l); }
#endif

#if NET_VERSION >= 9
static ncclResult_t t_vdev(int *d, vprops_t *props) {
  COUNT(NT_VDEV);
  SETC(NT_VDEV_NDEVS, props->ndevs);
  *d = 100 + props->ndevs;
  return ncclSuccess;
}
#endif

#if NET_VERSION >= 11
static ncclResult_t t_finalize(void *ctx) {
  COUNT(NT_FINALIZE);
  if (bad_ctx(ctx)) return ncclInternalError;
  free(ctx);
  return ncclSuccess;
}
static ncclResult_t t_set_attr(void *ctx, CAT(V(ncclNetAttr_v), _t) * attr) {
  (void)attr;
  COUNT(NT_SETATTR);
  if (bad_ctx(ctx)) return ncclInternalError;
  return ncclSuccess;
}
#endif

static void fill(net_t *n);

static ncclResult_t init_common(ncclDebugLogger_t log) {
  COUNT(NT_INIT);
  logger = log;
  if (strcmp(fault(), "init") == 0) {
    LOG(NCCL_LOG_WARN, "nettest: injected init failure");
    return ncclSystemError;
  }
  LOG(NCCL_LOG_INFO, "nettest: init (v%d%s)", NET_VERSION, NET_LAZY ? ", lazy" : "");
  return ncclSuccess;
}

#if NET_LAZY
#define TABLE_NAME "TestNetLazy_v" STR(NET_VERSION)
#else
#define TABLE_NAME "TestNet_v" STR(NET_VERSION)
#endif

EXPORT net_t V(ncclNetPlugin_v);

#if NET_VERSION < 10
static ncclResult_t t_init(ncclDebugLogger_t log) {
  ncclResult_t r = init_common(log);
  if (r == ncclSuccess && NET_LAZY) fill(&V(ncclNetPlugin_v));
  return r;
}
#elif NET_VERSION == 10
static ncclResult_t t_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  ncclResult_t r = init_common(log);
  if (r == ncclSuccess && NET_LAZY) fill(&V(ncclNetPlugin_v));
  return r;
}
#else
static ncclResult_t t_init(void **ctx, uint64_t comm_id, CAT(V(ncclNetCommConfig_v), _t) * cfg,
                           ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  ncclResult_t r = init_common(log);
  if (r != ncclSuccess) return r;
  ctx_t *c = malloc(sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->magic = CTX_MAGIC;
  c->trafficClass = cfg ? cfg->trafficClass : -99;
  SETC(NT_LAST_TC, c->trafficClass);
  SETC(NT_LAST_COMMID, (long)comm_id);
  *ctx = c;
  if (NET_LAZY) fill(&V(ncclNetPlugin_v));
  return ncclSuccess;
}
#endif

static void fill(net_t *n) {
  n->name = TABLE_NAME;
  n->init = t_init;
  n->devices = t_devices;
  n->getProperties = t_props;
  n->listen = t_listen;
  n->connect = t_connect;
  n->accept = t_accept;
  n->regMr = t_regmr;
  n->regMrDmaBuf = NULL;
  n->deregMr = t_deregmr;
  n->isend = t_isend;
  n->irecv = t_irecv;
  n->iflush = t_iflush;
  n->test = t_test;
  n->closeSend = t_close_send;
  n->closeRecv = t_close_recv;
  n->closeListen = t_close_listen;
#if NET_VERSION >= 7
  n->getDeviceMr = NULL;
  n->irecvConsumed = NULL;
#endif
#if NET_VERSION >= 9
  n->makeVDevice = t_vdev;
#endif
#if NET_VERSION >= 11
  n->finalize = t_finalize;
  n->setNetAttr = t_set_attr;
#endif
}

#if NET_LAZY
/* Only name and init until init runs. */
net_t V(ncclNetPlugin_v) = {.name = TABLE_NAME, .init = t_init};
#else
net_t V(ncclNetPlugin_v) = {
    .name = TABLE_NAME,
    .init = t_init,
    .devices = t_devices,
    .getProperties = t_props,
    .listen = t_listen,
    .connect = t_connect,
    .accept = t_accept,
    .regMr = t_regmr,
    .regMrDmaBuf = NULL,
    .deregMr = t_deregmr,
    .isend = t_isend,
    .irecv = t_irecv,
    .iflush = t_iflush,
    .test = t_test,
    .closeSend = t_close_send,
    .closeRecv = t_close_recv,
    .closeListen = t_close_listen,
#if NET_VERSION >= 9
    .makeVDevice = t_vdev,
#endif
#if NET_VERSION >= 11
    .finalize = t_finalize,
    .setNetAttr = t_set_attr,
#endif
};
#endif

#if NET_VERSION == 10
/* A collnet with no device, so the loader has one to find and report. */
static ncclResult_t c_init(ncclDebugLogger_t log) {
  (void)log;
  return ncclSuccess;
}
static ncclResult_t c_devices(int *ndev) {
  *ndev = 0;
  return ncclSuccess;
}
EXPORT ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
    .name = "TestCollNet", .init = c_init, .devices = c_devices};
#endif
