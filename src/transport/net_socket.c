/*
 * Braid's built-in socket net ("Socket"): TCP over the interfaces that
 * NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY select, with NCCL's properties,
 * handle contents and parameters (plugins.md §1.6).
 *
 * A connection is one control socket plus nsocks data sockets (nsocks =
 * NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, 0 by default on plain
 * Ethernet). Every message starts with a header on the control socket
 * (its size and how it is cut); with no data sockets, or when it is no
 * larger than NCCL_SOCKET_INLINE, its bytes follow on the control socket,
 * moved by whoever calls test(). Otherwise the sender cuts it into at most
 * nsocks pieces of at least NCCL_SOCKET_MIN_TASKSIZE, dealt round-robin to
 * the data sockets, and helper threads (each owning every nthreads-th
 * socket) move them straight between the caller's buffer and the kernel:
 * no copy anywhere. Both ends deal pieces in message order from the same
 * socket cursor, so each data socket carries the same sequence of pieces
 * on both sides and needs no framing of its own.
 *
 * Nothing here waits: listen binds, connect issues non-blocking connects
 * and returns the comm once every socket is up and has sent its hello,
 * accept collects queued connections and hellos (grouped by the
 * connector's nonce) until a whole set is there. Connect never needs the
 * peer's accept, so one thread can connect to itself. Helper threads sleep
 * in poll() on their sockets and an eventfd, and end when the comm closes.
 *
 * This file logs only through the logger given to init (nothing before
 * it), and uses only base/socket.c, base/param.c and libc, so the same
 * source builds into the external plugin.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "base/socket.h"
#include "transport/net.h"

#define SOCK_MAX_DEVS BRD_SOCK_MAX_IFS /* NCCL's MAX_IFS */
#define SOCK_MAX_SOCKS 64              /* NCCL's MAX_SOCKETS */
#define SOCK_MAX_THREADS 16            /* NCCL's MAX_THREADS */
#define SOCK_NREQ BRD_NET_MAX_REQUESTS
#define SOCK_MAX_PENDING 1024          /* accepted sockets awaiting their set */
#define SOCK_LINE_MAX 2048

/* ---- logging through the init logger ---------------------------------- */

static brd_net_logger_t sock_logger; /* set by init; atomic access */

static void fmt_check(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fmt_check(const char *fmt, ...) { (void)fmt; }

#define SOCK_LOG(level, flags, ...)                                            \
  do {                                                                         \
    brd_net_logger_t lg_ = __atomic_load_n(&sock_logger, __ATOMIC_ACQUIRE);    \
    if (0) fmt_check(__VA_ARGS__);                                             \
    if (lg_ != NULL) lg_((level), (flags), __FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)
#define SOCK_WARN(...) SOCK_LOG(BRD_LOG_WARN, BRD_SUBSYS_ALL, __VA_ARGS__)
#define SOCK_INFO(flags, ...) SOCK_LOG(BRD_LOG_INFO, (flags), __VA_ARGS__)
#define SOCK_TRACE(flags, ...) SOCK_LOG(BRD_LOG_TRACE, (flags), __VA_ARGS__)

/* ---- devices ------------------------------------------------------------ */

typedef struct {
  char name[BRD_SOCK_IFNAME_LEN];
  union brd_sock_addr addr;
  char *pci_path; /* realpath of /sys/class/net/<if>/device or NULL; owned */
} sock_dev_t;

typedef struct {
  uint64_t comm_id;
  int traffic_class;
} sock_ctx_t;

static pthread_mutex_t sock_lock = PTHREAD_MUTEX_INITIALIZER;
static int sock_refs;                 /* inits without finalize; under sock_lock */
static int sock_ndev = -1;            /* -1 until a scan; under sock_lock for writes */
static sock_dev_t sock_devs[SOCK_MAX_DEVS];
static char sock_last_line[SOCK_LINE_MAX]; /* the last "Using" line printed */

static int socket_family(void) {
  const char *env = brd_param_str(BRD_P_SOCKET_FAMILY);
  if (env != NULL && strcmp(env, "AF_INET") == 0) return AF_INET;
  if (env != NULL && strcmp(env, "AF_INET6") == 0) return AF_INET6;
  return AF_UNSPEC;
}

/* Fills sock_devs with NCCL's interface choice. sock_lock held. */
static ncclResult_t scan_devices(void) {
  brd_sock_iface_t *all = NULL, found[SOCK_MAX_DEVS];
  int n_all = 0, n = 0;
  const char *spec = brd_param_str(BRD_P_SOCKET_IFNAME);
  const char *comm_id = brd_param_str(BRD_P_COMM_ID);
  union brd_sock_addr id_addr, *id_ptr = NULL;
  char line[SOCK_LINE_MAX], addr[BRD_SOCK_ADDR_STRLEN];

  /* NCCL ignores a one-character spec ("^" or "="). */
  if (spec != NULL && strlen(spec) <= 1) spec = NULL;
  if (spec == NULL && comm_id != NULL && comm_id[0] != '\0' &&
      brd_sock_addr_parse(comm_id, &id_addr) == ncclSuccess)
    id_ptr = &id_addr;
  CHECK(brd_sock_ifaces_list(&all, &n_all));
  brd_sock_ifaces_select(all, n_all, spec, socket_family(), id_ptr, found, SOCK_MAX_DEVS, &n);
  free(all);

  line[0] = '\0';
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX];
    size_t len = strlen(line);
    sock_devs[i].addr = found[i].addr;
    snprintf(sock_devs[i].name, sizeof(sock_devs[i].name), "%s", found[i].name);
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", found[i].name);
    sock_devs[i].pci_path = realpath(path, NULL); /* NULL: a virtual interface */
    snprintf(line + len, sizeof(line) - len, " [%d]%s:%s", i, found[i].name,
             brd_sock_addr_str(&found[i].addr, addr));
  }
  __atomic_store_n(&sock_ndev, n, __ATOMIC_RELEASE);
  if (n == 0) {
    const char *fam = brd_param_str(BRD_P_SOCKET_FAMILY);
    SOCK_WARN("NET/Socket : no interface found (NCCL_SOCKET_IFNAME=%s, NCCL_SOCKET_FAMILY=%s); "
              "set NCCL_SOCKET_IFNAME to the name or prefix of an interface that is up "
              "(see 'ip -brief address'), or unset it",
              spec != NULL ? spec : "unset", fam != NULL ? fam : "unset");
    sock_last_line[0] = '\0';
  } else if (strcmp(line, sock_last_line) != 0) {
    SOCK_INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "NET/Socket : Using%s", line);
    snprintf(sock_last_line, sizeof(sock_last_line), "%s", line);
  }
  return ncclSuccess;
}

static void forget_devices(void) {
  for (int i = 0; i < sock_ndev; i++) {
    free(sock_devs[i].pci_path);
    sock_devs[i].pci_path = NULL;
  }
  __atomic_store_n(&sock_ndev, -1, __ATOMIC_RELEASE);
}

static int dev_valid(int dev) {
  return dev >= 0 && dev < __atomic_load_n(&sock_ndev, __ATOMIC_ACQUIRE);
}

static ncclResult_t sock_init(void **ctx, uint64_t comm_id, brd_net_config_t *config,
                              brd_net_logger_t log, brd_net_prof_cb_t prof) {
  sock_ctx_t *c;
  ncclResult_t res = ncclSuccess;
  (void)prof;
  if (ctx == NULL) return ncclInternalError;
  c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->comm_id = comm_id;
  c->traffic_class = config != NULL ? config->trafficClass : BRD_NET_TRAFFIC_CLASS_UNDEF;
  pthread_mutex_lock(&sock_lock);
  if (log != NULL) __atomic_store_n(&sock_logger, log, __ATOMIC_RELEASE);
  /* NCCL scans once per process; a rescan after the last finalize lets a
   * later communicator see a changed NCCL_SOCKET_IFNAME. */
  if (sock_refs == 0) CHECK_GOTO(scan_devices(), res, fail_unlock);
  sock_refs++;
  pthread_mutex_unlock(&sock_lock);
  *ctx = c;
  return ncclSuccess;
fail_unlock:
  pthread_mutex_unlock(&sock_lock);
  free(c);
  return res;
}

static ncclResult_t sock_finalize(void *ctx) {
  pthread_mutex_lock(&sock_lock);
  if (sock_refs > 0 && --sock_refs == 0) forget_devices();
  pthread_mutex_unlock(&sock_lock);
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t sock_devices(int *ndev) {
  int n = __atomic_load_n(&sock_ndev, __ATOMIC_ACQUIRE);
  *ndev = n > 0 ? n : 0;
  return ncclSuccess;
}

static int read_speed(const char *ifname) {
  char path[PATH_MAX], text[16] = {0};
  int speed = 0, fd;
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, text, sizeof(text) - 1) > 0) speed = (int)strtol(text, NULL, 0);
    close(fd);
  }
  if (speed <= 0) {
    SOCK_INFO(BRD_SUBSYS_NET, "Could not get speed from %s. Defaulting to 10 Gbps.", path);
    speed = 10000;
  }
  return speed;
}

static ncclResult_t sock_get_properties(int dev, brd_net_props_t *props) {
  if (!dev_valid(dev)) {
    SOCK_WARN("NET/Socket : getProperties of device %d, but there are %d", dev,
              __atomic_load_n(&sock_ndev, __ATOMIC_ACQUIRE));
    return ncclInternalError;
  }
  memset(props, 0, sizeof(*props));
  props->name = sock_devs[dev].name;
  props->pciPath = sock_devs[dev].pci_path;
  props->guid = (uint64_t)dev;
  props->ptrSupport = BRD_NET_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = read_speed(sock_devs[dev].name);
  props->latency = 0;
  props->port = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = 0;    /* host */
  props->netDeviceVersion = 0; /* NCCL_NET_DEVICE_INVALID_VERSION */
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = (size_t)1 << 40;   /* NCCL_MAX_NET_SIZE_BYTES */
  props->maxCollBytes = (size_t)512 << 20; /* MAX_COLLNET_SIZE */
  props->maxMultiRequestSize = 1;
  props->railId = -1;  /* NCCL_NET_ID_UNDEF */
  props->planeId = -1;
  return ncclSuccess;
}

/* ---- wire formats -------------------------------------------------------- */

/* What listen writes into the caller's 128-byte handle. `stage` is the
 * connecting side's comm in progress; listen sets it to NULL, so the copy
 * that travels to the peer carries none. */
typedef struct {
  union brd_sock_addr addr;
  uint64_t magic;
  int32_t nsocks;
  int32_t nthreads;
  struct sock_comm *stage;
} sock_handle_t;
_Static_assert(sizeof(sock_handle_t) <= BRD_NET_HANDLE_BYTES, "socket handle too large");

/* First bytes on every socket of a connection, connector to listener. */
typedef struct {
  uint64_t magic;  /* the listener's, from the handle */
  uint64_t nonce;  /* one per connection: groups its sockets */
  uint32_t index;  /* 0..nsocks-1: data socket; nsocks: control */
  uint32_t nsocks;
} sock_hello_t;

/* Each message's header on the control socket. */
typedef struct {
  uint64_t size;      /* bytes sent */
  uint64_t task_size; /* 0: the bytes follow on the control socket; else
                         the piece size on the data sockets */
  uint32_t seq;       /* message number, to catch a stream out of step */
  uint32_t pad;
} sock_hdr_t;

/* ---- comms ---------------------------------------------------------------- */

enum { REQ_FREE = 0, REQ_CTRL, REQ_TASKS, REQ_DONE };

typedef struct sock_req {
  struct sock_comm *comm;
  int state;
  char *buf;           /* caller's, borrowed until done */
  size_t cap;          /* posted size */
  size_t size;         /* message size (receive: from the header) */
  uint32_t seq;
  sock_hdr_t hdr;
  size_t hdr_done;
  size_t ctrl_bytes;   /* payload bytes on the control socket */
  size_t ctrl_done;
  _Atomic int tasks_left;
} sock_req_t;

typedef struct {
  char *buf;
  size_t size;
  size_t done;
  sock_req_t *req;
} sock_task_t;

/* One data socket's pieces in order; the comm's caller thread produces,
 * the owning helper consumes. */
typedef struct {
  sock_task_t tasks[SOCK_NREQ];
  _Atomic unsigned head, tail;
} sock_queue_t;

typedef struct {
  struct sock_comm *comm;
  int index;
  int efd;          /* eventfd: new pieces or stop; -1 until started */
  int started;
  pthread_t tid;
} sock_helper_t;

/* Connecting side's progress on each socket. */
typedef struct {
  int connected[SOCK_MAX_SOCKS + 1];
  size_t hello_done[SOCK_MAX_SOCKS + 1];
  sock_hello_t hello;
} sock_dial_t;

typedef struct sock_comm {
  int is_send;
  int nsocks, nthreads;
  struct brd_sock ctrl;
  struct brd_sock socks[SOCK_MAX_SOCKS];
  sock_queue_t *queues;            /* nsocks entries; owned */
  sock_helper_t helpers[SOCK_MAX_THREADS];
  _Atomic int stop;
  _Atomic int error;               /* sticky ncclResult_t of the first failure */
  _Atomic int fail_claimed;        /* set by the one that WARNs about it */
  char why[512];                   /* that WARN ("" when quiet), written
                                    * before error is published */
  int quiet_close;                 /* the failure is a close between messages */
  int next_sock;                   /* next data socket a piece goes to */
  uint32_t post_seq, ctrl_seq;     /* next message to post / on the control socket */
  size_t inline_max, min_task;
  sock_dial_t *dial;               /* connect in progress; owned */
  char peer[BRD_SOCK_ADDR_STRLEN]; /* for messages */
  sock_req_t reqs[SOCK_NREQ];
} sock_comm_t;

typedef struct {
  struct brd_sock s;
  sock_hello_t hello;
  size_t done;
} sock_pending_t;

typedef struct {
  struct brd_sock sock;
  uint64_t magic;
  int nsocks, nthreads, dev;
  sock_pending_t *pend;  /* accepted sockets whose set is incomplete; owned */
  int npend, cap;
} sock_listen_t;

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
        (uint64_t)(uintptr_t)&v;
  }
  return v;
}

static void comm_destroy(sock_comm_t *c) {
  if (c == NULL) return;
  atomic_store(&c->stop, 1);
  for (int t = 0; t < SOCK_MAX_THREADS; t++) {
    sock_helper_t *h = &c->helpers[t];
    if (h->started) {
      uint64_t one = 1;
      (void)!write(h->efd, &one, sizeof(one));
      pthread_join(h->tid, NULL);
    }
    if (h->efd >= 0) close(h->efd);
  }
  brd_sock_close(&c->ctrl);
  for (int s = 0; s < SOCK_MAX_SOCKS; s++) brd_sock_close(&c->socks[s]);
  free(c->queues);
  free(c->dial);
  free(c);
}

static ncclResult_t comm_create(int is_send, int nsocks, int nthreads, sock_comm_t **out) {
  sock_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    SOCK_WARN("NET/Socket : out of host memory allocating a comm (%zu bytes)", sizeof(*c));
    return ncclSystemError;
  }
  c->is_send = is_send;
  c->nsocks = nsocks;
  c->nthreads = nsocks > 0 ? (nthreads < 1 ? 1 : (nthreads > nsocks ? nsocks : nthreads)) : 0;
  c->ctrl.fd = -1;
  for (int s = 0; s < SOCK_MAX_SOCKS; s++) c->socks[s].fd = -1;
  for (int t = 0; t < SOCK_MAX_THREADS; t++) {
    c->helpers[t].efd = -1;
    c->helpers[t].comm = c;
    c->helpers[t].index = t;
  }
  for (int i = 0; i < SOCK_NREQ; i++) c->reqs[i].comm = c;
  if (nsocks > 0) {
    c->queues = calloc((size_t)nsocks, sizeof(*c->queues));
    if (c->queues == NULL) {
      SOCK_WARN("NET/Socket : out of host memory allocating %d socket queues", nsocks);
      free(c);
      return ncclSystemError;
    }
  }
  {
    int64_t v = brd_param_int(BRD_P_SOCKET_INLINE);
    c->inline_max = v > 0 ? (size_t)v : 0;
    v = brd_param_int(BRD_P_SOCKET_MIN_TASKSIZE);
    c->min_task = v > 0 ? (size_t)v : 1;
  }
  *out = c;
  return ncclSuccess;
}

/* Records the comm's first failure and WARNs about it; later failures
 * (other sockets of the same dead peer) stay quiet. Returns res. */
static ncclResult_t comm_fail(sock_comm_t *c, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ncclResult_t comm_fail(sock_comm_t *c, ncclResult_t res, const char *fmt, ...) {
  int expected = 0, err;
  if (atomic_compare_exchange_strong(&c->fail_claimed, &expected, 1)) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A peer that closed between messages may simply be done: the caller
     * decides whether that is a failure, and WARNs if so. */
    if (c->quiet_close) {
      SOCK_INFO(BRD_SUBSYS_NET, "%s", msg);
    } else {
      SOCK_WARN("%s", msg);
      if (snprintf(c->why, sizeof(c->why), "%s", msg) < 0) c->why[0] = '\0'; /* cut to fit */
    }
    /* Published after the WARN: whoever sees the error finds the text. */
    atomic_store(&c->error, (int)res);
    return res;
  }
  err = atomic_load(&c->error);
  return err != ncclSuccess ? (ncclResult_t)err : res;
}

/* ---- non-blocking transfers ---------------------------------------------- */

enum { IO_DONE, IO_AGAIN, IO_CLOSED, IO_ERROR };

/* Moves bytes between fd and the two pieces (a, b) from *done on, without
 * waiting. IO_CLOSED: the peer closed or reset the connection. */
static int io_step(int fd, int is_send, char *a, size_t na, char *b, size_t nb, size_t *done) {
  size_t total = na + nb;
  while (*done < total) {
    struct iovec iov[2];
    int n_iov = 0;
    ssize_t n;
    if (*done < na) {
      iov[n_iov].iov_base = a + *done;
      iov[n_iov++].iov_len = na - *done;
      if (nb > 0) {
        iov[n_iov].iov_base = b;
        iov[n_iov++].iov_len = nb;
      }
    } else {
      iov[n_iov].iov_base = b + (*done - na);
      iov[n_iov++].iov_len = total - *done;
    }
    if (n_iov == 1) {
      n = is_send ? send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT)
                  : recv(fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT);
    } else {
      struct msghdr mh;
      memset(&mh, 0, sizeof(mh));
      mh.msg_iov = iov;
      mh.msg_iovlen = (size_t)n_iov;
      n = is_send ? sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT)
                  : recvmsg(fd, &mh, MSG_DONTWAIT);
    }
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n == 0) {
      errno = 0; /* an orderly close: no error to report */
      return is_send ? IO_AGAIN : IO_CLOSED;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IO_AGAIN;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT ||
        errno == EHOSTUNREACH || errno == ENETUNREACH)
      return IO_CLOSED;
    return IO_ERROR;
  }
  return IO_DONE;
}

/* Seconds of unacknowledged data after which a connection fails: a third
 * of BRAID_TIMEOUT, at least 1. */
static int ack_deadline_s(void) {
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT) / 3;
  return t < 1 ? 1 : t > 3600 ? 3600 : (int)t;
}

/* Turns an IO_CLOSED or IO_ERROR on one of c's sockets into the comm's
 * error. what: "receiving a message header", ... */
static ncclResult_t io_fail(sock_comm_t *c, int rc, int err, const char *what, size_t done,
                            size_t size) {
  if (rc == IO_CLOSED && err == ETIMEDOUT) { /* set_liveness's limit */
    c->quiet_close = 0;
    return comm_fail(c, ncclRemoteError,
                     "NET/Socket : %s acknowledged nothing for %d s while %s (%zu of %zu "
                     "bytes): the link to its host is down or the host is unreachable. Check "
                     "the network between the hosts, or raise BRAID_TIMEOUT, of which this "
                     "limit is a third",
                     c->peer, ack_deadline_s(), what, done, size);
  }
  if (rc == IO_CLOSED) err = 0; /* an end of stream and a reset read alike */
  c->quiet_close = rc == IO_CLOSED && done == 0 && !c->is_send &&
                   strcmp(what, "receiving a message header") == 0;
  if (rc == IO_CLOSED)
    return comm_fail(c, ncclRemoteError,
                     "NET/Socket : connection with %s closed while %s (%zu of %zu bytes, %s); "
                     "the remote process may have exited or closed its communicator",
                     c->peer, what, done, size, err != 0 ? strerror(err) : "end of stream");
  return comm_fail(c, ncclSystemError, "NET/Socket : %s with %s failed: %s", what, c->peer,
                   strerror(err));
}

/* ---- helper threads -------------------------------------------------------- */

static void *helper_main(void *arg) {
  sock_helper_t *h = arg;
  sock_comm_t *c = h->comm;
  struct pollfd pfd[SOCK_MAX_SOCKS + 1];

  while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
    int np = 1;
    pfd[0].fd = h->efd;
    pfd[0].events = POLLIN;
    pfd[0].revents = 0;
    for (int s = h->index; s < c->nsocks; s += c->nthreads) {
      sock_queue_t *q = &c->queues[s];
      unsigned head = atomic_load_explicit(&q->head, memory_order_relaxed);
      unsigned tail = atomic_load_explicit(&q->tail, memory_order_acquire);
      while (head != tail) {
        sock_task_t *t = &q->tasks[head % SOCK_NREQ];
        sock_req_t *r = t->req;
        int rc = io_step(c->socks[s].fd, c->is_send, t->buf, t->size, NULL, 0, &t->done);
        if (rc == IO_AGAIN) {
          pfd[np].fd = c->socks[s].fd;
          pfd[np].events = c->is_send ? POLLOUT : POLLIN;
          pfd[np++].revents = 0;
          break;
        }
        if (rc != IO_DONE) {
          (void)io_fail(c, rc, errno,
                        c->is_send ? "sending data" : "receiving data", t->done, t->size);
          return NULL;
        }
        /* The slot may be refilled once head moves: read it before. */
        head++;
        atomic_store_explicit(&q->head, head, memory_order_release);
        atomic_fetch_sub_explicit(&r->tasks_left, 1, memory_order_release);
      }
    }
    /* Sleep until a socket is ready or the owner posts a piece or stops.
     * The owner writes the eventfd after publishing, so nothing is lost
     * between the scan above and this poll. */
    if (poll(pfd, (nfds_t)np, np == 1 ? -1 : 1000) < 0 && errno != EINTR) {
      (void)comm_fail(c, ncclSystemError, "NET/Socket : poll in a helper thread failed: %s",
                      strerror(errno));
      return NULL;
    }
    if (pfd[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(h->efd, &v, sizeof(v));
    }
  }
  return NULL;
}

static ncclResult_t helper_start(sock_comm_t *c, int t) {
  sock_helper_t *h = &c->helpers[t];
  int rc;
  if (h->started) return ncclSuccess;
  if (h->efd < 0) {
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->efd < 0)
      return comm_fail(c, ncclSystemError, "NET/Socket : eventfd failed: %s", strerror(errno));
  }
  rc = pthread_create(&h->tid, NULL, helper_main, h);
  if (rc != 0)
    return comm_fail(c, ncclSystemError,
                     "NET/Socket : cannot start a helper thread: %s (lower NCCL_SOCKET_NTHREADS)",
                     strerror(rc));
  h->started = 1;
  return ncclSuccess;
}

/* Deals r's payload to the data sockets and wakes their helpers. */
static ncclResult_t post_tasks(sock_comm_t *c, sock_req_t *r, size_t task_size) {
  size_t n = (r->size + task_size - 1) / task_size;
  int wake[SOCK_MAX_THREADS] = {0};
  atomic_store_explicit(&r->tasks_left, (int)n, memory_order_relaxed);
  for (size_t k = 0; k < n; k++) {
    int s = c->next_sock;
    sock_queue_t *q = &c->queues[s];
    unsigned tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    sock_task_t *t;
    size_t off = k * task_size;
    c->next_sock = (s + 1) % c->nsocks;
    CHECK(helper_start(c, s % c->nthreads));
    if (tail - atomic_load_explicit(&q->head, memory_order_acquire) >= SOCK_NREQ)
      return comm_fail(c, ncclInternalError, "NET/Socket : piece queue of socket %d is full", s);
    t = &q->tasks[tail % SOCK_NREQ];
    t->buf = r->buf + off;
    t->size = r->size - off < task_size ? r->size - off : task_size;
    t->done = 0;
    t->req = r;
    atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
    wake[s % c->nthreads] = 1;
  }
  for (int t = 0; t < c->nthreads; t++) {
    if (wake[t]) {
      uint64_t one = 1;
      (void)!write(c->helpers[t].efd, &one, sizeof(one));
    }
  }
  return ncclSuccess;
}

/* Moves the control stream as far as it goes without waiting: headers,
 * inline and control-socket payloads, in message order; deals striped
 * payloads to the helpers as their headers pass. Caller's thread. */
static ncclResult_t ctrl_progress(sock_comm_t *c) {
  while (c->ctrl_seq != c->post_seq) {
    sock_req_t *r = &c->reqs[c->ctrl_seq % SOCK_NREQ];
    int rc;
    if (c->is_send) {
      size_t done = r->hdr_done + r->ctrl_done;
      rc = io_step(c->ctrl.fd, 1, (char *)&r->hdr, sizeof(r->hdr), r->buf, r->ctrl_bytes, &done);
      r->hdr_done = done < sizeof(r->hdr) ? done : sizeof(r->hdr);
      r->ctrl_done = done - r->hdr_done;
      if (rc == IO_AGAIN) return ncclSuccess;
      if (rc != IO_DONE)
        return io_fail(c, rc, errno, "sending on the control socket",
                       done, sizeof(r->hdr) + r->ctrl_bytes);
    } else {
      if (r->hdr_done < sizeof(r->hdr)) {
        rc = io_step(c->ctrl.fd, 0, (char *)&r->hdr, sizeof(r->hdr), NULL, 0, &r->hdr_done);
        if (rc == IO_AGAIN) return ncclSuccess;
        if (rc != IO_DONE)
          return io_fail(c, rc, errno, "receiving a message header",
                         r->hdr_done, sizeof(r->hdr));
        if (r->hdr.seq != r->seq)
          return comm_fail(c, ncclInternalError,
                           "NET/Socket : stream from %s out of step: message %u arrived as %u",
                           c->peer, r->hdr.seq, r->seq);
        if (r->hdr.size > r->cap)
          return comm_fail(c, ncclInvalidUsage,
                           "NET/Socket : peer %s message truncated : receiving %llu bytes "
                           "instead of %zu. The ranks may disagree on collective sizes or "
                           "settings (e.g. NCCL_PROTO, NCCL_ALGO)",
                           c->peer, (unsigned long long)r->hdr.size, r->cap);
        if (r->hdr.task_size != 0 &&
            (c->nsocks == 0 || (r->hdr.size + r->hdr.task_size - 1) / r->hdr.task_size >
                                   (uint64_t)c->nsocks))
          return comm_fail(c, ncclInternalError,
                           "NET/Socket : bad header from %s: %llu bytes in pieces of %llu over "
                           "%d sockets",
                           c->peer, (unsigned long long)r->hdr.size,
                           (unsigned long long)r->hdr.task_size, c->nsocks);
        r->size = (size_t)r->hdr.size;
        r->ctrl_bytes = r->hdr.task_size == 0 ? r->size : 0;
      }
      rc = io_step(c->ctrl.fd, 0, r->buf, r->ctrl_bytes, NULL, 0, &r->ctrl_done);
      if (rc == IO_AGAIN) return ncclSuccess;
      if (rc != IO_DONE)
        return io_fail(c, rc, errno, "receiving on the control socket",
                       r->ctrl_done, r->ctrl_bytes);
    }
    if (r->hdr.task_size != 0 && r->size > 0) {
      CHECK(post_tasks(c, r, (size_t)r->hdr.task_size));
      r->state = REQ_TASKS;
    } else {
      r->state = REQ_DONE;
    }
    c->ctrl_seq++;
  }
  return ncclSuccess;
}

/* ---- listen / connect / accept ---------------------------------------------- */

static void nsocks_nthreads(int dev, int *nsocks_out, int *nthreads_out) {
  int64_t nt = brd_param_int(BRD_P_SOCKET_NTHREADS);
  int64_t ns = brd_param_int(BRD_P_NSOCKS_PERTHREAD);
  if (nt > SOCK_MAX_THREADS) {
    SOCK_WARN("NET/Socket : NCCL_SOCKET_NTHREADS is greater than the maximum allowed, "
              "setting to %d", SOCK_MAX_THREADS);
    nt = SOCK_MAX_THREADS;
  }
  if (nt == -2 || ns == -2) {
    /* NCCL's automatic choice by NIC vendor: AWS ENA, Google gVNIC. */
    int64_t auto_nt = 0, auto_ns = 1;
    char path[PATH_MAX], vendor[8] = {0};
    int fd;
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/vendor", sock_devs[dev].name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (read(fd, vendor, 6) == 6) {
        if (strcmp(vendor, "0x1d0f") == 0) {
          auto_nt = 2;
          auto_ns = 8;
        } else if (strcmp(vendor, "0x1ae0") == 0) {
          auto_nt = 4;
          auto_ns = 1;
        }
      }
      close(fd);
    }
    if (nt == -2) nt = auto_nt;
    if (ns == -2) ns = auto_ns;
  }
  if (nt < 0) nt = 0;
  if (ns < 0) ns = 0;
  if (nt * ns > SOCK_MAX_SOCKS) {
    ns = SOCK_MAX_SOCKS / nt;
    SOCK_WARN("NET/Socket : the total number of sockets is greater than the maximum allowed, "
              "setting NCCL_NSOCKS_PERTHREAD to %d", (int)ns);
  }
  *nsocks_out = (int)(nt * ns);
  *nthreads_out = nt * ns > 0 ? (int)nt : 0;
  if (nt * ns > 0)
    SOCK_INFO(BRD_SUBSYS_INIT, "NET/Socket: Using %d threads and %d sockets per thread",
              (int)nt, (int)ns);
}

static ncclResult_t sock_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  sock_handle_t hd;
  sock_listen_t *l;
  union brd_sock_addr addr;
  socklen_t len;
  char line[BRD_SOCK_ADDR_STRLEN];
  ncclResult_t res = ncclSystemError;
  (void)ctx;
  if (!dev_valid(dev)) {
    SOCK_WARN("NET/Socket : listen on device %d, but there are %d", dev,
              __atomic_load_n(&sock_ndev, __ATOMIC_ACQUIRE));
    return ncclInternalError;
  }
  l = calloc(1, sizeof(*l));
  if (l == NULL) {
    SOCK_WARN("NET/Socket : out of host memory allocating a listen comm");
    return ncclSystemError;
  }
  l->dev = dev;
  l->magic = random_u64();
  addr = sock_devs[dev].addr;
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  len = brd_sock_addr_len(&addr);
  l->sock.fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->sock.fd < 0) {
    SOCK_WARN("NET/Socket : socket() failed: %s", strerror(errno));
    goto fail_free;
  }
  if (bind(l->sock.fd, &addr.sa, len) != 0 || getsockname(l->sock.fd, &addr.sa, &len) != 0 ||
      listen(l->sock.fd, 16384) != 0) {
    SOCK_WARN("NET/Socket : cannot listen on %s (%s): %s", brd_sock_addr_str(&addr, line),
              sock_devs[dev].name, strerror(errno));
    goto fail_close;
  }
  l->sock.addr = addr;
  nsocks_nthreads(dev, &l->nsocks, &l->nthreads);
  /* The caller's handle may be unaligned: built here, copied out. */
  memset(&hd, 0, sizeof(hd));
  hd.addr = addr;
  hd.magic = l->magic;
  hd.nsocks = l->nsocks;
  hd.nthreads = l->nthreads;
  hd.stage = NULL;
  memset(handle, 0, BRD_NET_HANDLE_BYTES);
  memcpy(handle, &hd, sizeof(hd));
  *listen_comm = l;
  return ncclSuccess;
fail_close:
  close(l->sock.fd);
fail_free:
  free(l);
  return res;
}

/* A dead link is named by the net before a collective's wait on it gives
 * up: data or a keepalive probe (sent after ack_deadline_s idle seconds)
 * unacknowledged for ack_deadline_s fails the connection with ETIMEDOUT
 * (TCP_USER_TIMEOUT), which the next send or the posted receive reports.
 * A live peer's kernel acknowledges whatever its process is doing.
 * Returns 0, or -1 with errno. */
static int set_liveness(int fd) {
  int one = 1, idle = ack_deadline_s(), intvl = idle > 3 ? idle / 3 : 1;
  unsigned ms = (unsigned)idle * 1000u;
  if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0)
    return -1;
  return 0;
}

static ncclResult_t set_nodelay(sock_comm_t *c, int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return comm_fail(c, ncclSystemError, "NET/Socket : setsockopt(TCP_NODELAY) failed: %s",
                     strerror(errno));
  if (set_liveness(fd) != 0)
    return comm_fail(c, ncclSystemError, "NET/Socket : setting TCP keepalive and "
                     "TCP_USER_TIMEOUT failed: %s", strerror(errno));
  return ncclSuccess;
}

static ncclResult_t refused(sock_comm_t *c, int err) {
  if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
      err == ECONNRESET)
    return comm_fail(c, ncclRemoteError,
                     "NET/Socket : cannot connect to %s: %s; the remote process may have exited "
                     "or closed its communicator",
                     c->peer, strerror(err));
  return comm_fail(c, ncclSystemError, "NET/Socket : connect to %s failed: %s", c->peer,
                   strerror(err));
}

/* Starts the non-blocking connects of every socket. */
static ncclResult_t dial_start(sock_comm_t *c, const sock_handle_t *h) {
  socklen_t len = brd_sock_addr_len(&h->addr);
  c->dial = calloc(1, sizeof(*c->dial));
  if (c->dial == NULL) return comm_fail(c, ncclSystemError, "NET/Socket : out of host memory");
  c->dial->hello.magic = h->magic;
  c->dial->hello.nonce = random_u64();
  c->dial->hello.nsocks = (uint32_t)c->nsocks;
  for (int i = 0; i <= c->nsocks; i++) {
    struct brd_sock *s = i == c->nsocks ? &c->ctrl : &c->socks[i];
    s->addr = h->addr;
    s->fd = socket(h->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0)
      return comm_fail(c, ncclSystemError, "NET/Socket : socket() failed: %s%s", strerror(errno),
                       errno == EMFILE ? " (raise the open-files limit, ulimit -n)" : "");
    if (connect(s->fd, &h->addr.sa, len) == 0) {
      c->dial->connected[i] = 1;
      CHECK(set_nodelay(c, s->fd));
    } else if (errno != EINPROGRESS && errno != EINTR) {
      return refused(c, errno);
    }
  }
  return ncclSuccess;
}

/* One look at every socket: finished connects, hellos sent. *ready_out
 * when all are done. */
static ncclResult_t dial_progress(sock_comm_t *c, int *ready_out) {
  sock_dial_t *d = c->dial;
  struct pollfd pfd[SOCK_MAX_SOCKS + 1];
  int idx[SOCK_MAX_SOCKS + 1], np = 0, ready = 1;
  for (int i = 0; i <= c->nsocks; i++) {
    if (d->connected[i]) continue;
    pfd[np].fd = i == c->nsocks ? c->ctrl.fd : c->socks[i].fd;
    pfd[np].events = POLLOUT;
    pfd[np].revents = 0;
    idx[np++] = i;
  }
  if (np > 0 && poll(pfd, (nfds_t)np, 0) < 0 && errno != EINTR)
    return comm_fail(c, ncclSystemError, "NET/Socket : poll failed: %s", strerror(errno));
  for (int k = 0; k < np; k++) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (pfd[k].revents == 0) continue;
    if (getsockopt(pfd[k].fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
    if (err != 0) return refused(c, err);
    d->connected[idx[k]] = 1;
    CHECK(set_nodelay(c, pfd[k].fd));
  }
  for (int i = 0; i <= c->nsocks; i++) {
    sock_hello_t hello = d->hello;
    int fd = i == c->nsocks ? c->ctrl.fd : c->socks[i].fd, rc;
    if (!d->connected[i]) {
      ready = 0;
      continue;
    }
    if (d->hello_done[i] == sizeof(hello)) continue;
    hello.index = (uint32_t)i;
    /* The bytes already sent came from the same hello. */
    rc = io_step(fd, 1, (char *)&hello, sizeof(hello), NULL, 0, &d->hello_done[i]);
    if (rc == IO_AGAIN) ready = 0;
    else if (rc != IO_DONE) return refused(c, rc == IO_CLOSED ? ECONNRESET : errno);
  }
  *ready_out = ready;
  return ncclSuccess;
}

static void set_stage(void *handle, sock_comm_t *c) {
  memcpy((char *)handle + offsetof(sock_handle_t, stage), &c, sizeof(c));
}

static ncclResult_t sock_connect(void *ctx, int dev, void *handle, void **send_comm,
                                 void **send_dev_comm) {
  sock_handle_t hd, *h = &hd; /* an aligned copy; stage is written back */
  sock_comm_t *c;
  ncclResult_t res;
  int ready = 0;
  (void)ctx;
  *send_comm = NULL;
  if (send_dev_comm != NULL) *send_dev_comm = NULL;
  if (!dev_valid(dev)) {
    SOCK_WARN("NET/Socket : connect on device %d, but there are %d", dev,
              __atomic_load_n(&sock_ndev, __ATOMIC_ACQUIRE));
    return ncclInternalError;
  }
  memcpy(&hd, handle, sizeof(hd));
  c = h->stage;
  if (c == NULL) {
    if (brd_sock_addr_len(&h->addr) == 0 || h->nsocks < 0 || h->nsocks > SOCK_MAX_SOCKS ||
        h->nthreads < 0 || h->nthreads > SOCK_MAX_THREADS || (h->nsocks > 0 && h->nthreads == 0)) {
      SOCK_WARN("NET/Socket : connect with a handle that is not a socket net handle "
                "(family %d, %d sockets, %d threads)",
                h->addr.sa.sa_family, h->nsocks, h->nthreads);
      return ncclInternalError;
    }
    CHECK(comm_create(1, h->nsocks, h->nthreads, &c));
    brd_sock_addr_str(&h->addr, c->peer);
    set_stage(handle, c);
    CHECK_GOTO(dial_start(c, h), res, fail);
  }
  CHECK_GOTO(dial_progress(c, &ready), res, fail);
  if (!ready) return ncclSuccess;
  free(c->dial);
  c->dial = NULL;
  set_stage(handle, NULL);
  *send_comm = c;
  return ncclSuccess;
fail:
  set_stage(handle, NULL);
  comm_destroy(c);
  return res;
}

static void pending_drop(sock_listen_t *l, int k) {
  brd_sock_close(&l->pend[k].s);
  l->pend[k] = l->pend[--l->npend];
}

/* Takes every queued connection and reads what hellos have arrived. */
static ncclResult_t accept_collect(sock_listen_t *l) {
  char line[BRD_SOCK_ADDR_STRLEN];
  while (l->npend < SOCK_MAX_PENDING) {
    union brd_sock_addr peer;
    socklen_t len = sizeof(peer);
    int fd, one = 1;
    memset(&peer, 0, sizeof(peer));
    fd = accept4(l->sock.fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      /* A connection that died in the queue (accept(2)). */
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == ENETDOWN ||
          errno == EHOSTDOWN || errno == ENONET || errno == EHOSTUNREACH ||
          errno == ENETUNREACH || errno == ENOPROTOOPT || errno == EOPNOTSUPP)
        continue;
      SOCK_WARN("NET/Socket : accept on %s failed: %s%s", brd_sock_addr_str(&l->sock.addr, line),
                strerror(errno), errno == EMFILE ? " (raise the open-files limit, ulimit -n)" : "");
      return ncclSystemError;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)set_liveness(fd);
    if (l->npend == l->cap) {
      int cap = l->cap ? l->cap * 2 : 2 * (SOCK_MAX_SOCKS + 1);
      sock_pending_t *p = realloc(l->pend, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        close(fd);
        SOCK_WARN("NET/Socket : out of host memory accepting connections");
        return ncclSystemError;
      }
      l->pend = p;
      l->cap = cap;
    }
    memset(&l->pend[l->npend], 0, sizeof(l->pend[0]));
    l->pend[l->npend].s.fd = fd;
    l->pend[l->npend].s.addr = peer;
    l->npend++;
  }
  for (int k = 0; k < l->npend;) {
    sock_pending_t *p = &l->pend[k];
    int rc;
    if (p->done < sizeof(p->hello)) {
      rc = io_step(p->s.fd, 0, (char *)&p->hello, sizeof(p->hello), NULL, 0, &p->done);
      if (rc == IO_CLOSED || rc == IO_ERROR) {
        /* A connector that gave up: its comm is gone too. */
        SOCK_INFO(BRD_SUBSYS_NET, "NET/Socket : connection from %s closed before its hello",
                  brd_sock_addr_str(&p->s.addr, line));
        pending_drop(l, k);
        continue;
      }
      if (rc == IO_DONE &&
          (p->hello.magic != l->magic || p->hello.nsocks != (uint32_t)l->nsocks ||
           p->hello.index > (uint32_t)l->nsocks)) {
        char mine[BRD_SOCK_ADDR_STRLEN];
        SOCK_INFO(BRD_SUBSYS_NET, "NET/Socket : dropped a connection from %s on %s: not a peer of "
                  "this listener (bad magic or socket count)",
                  brd_sock_addr_str(&p->s.addr, line), brd_sock_addr_str(&l->sock.addr, mine));
        pending_drop(l, k);
        continue;
      }
    }
    k++;
  }
  return ncclSuccess;
}

static ncclResult_t sock_accept(void *listen_comm, void **recv_comm, void **recv_dev_comm) {
  sock_listen_t *l = listen_comm;
  sock_comm_t *c;
  int slot[SOCK_MAX_SOCKS + 1];
  uint64_t nonce = 0;
  int found = 0;
  *recv_comm = NULL;
  if (recv_dev_comm != NULL) *recv_dev_comm = NULL;
  CHECK(accept_collect(l));
  /* The first connection whose sockets have all said hello. */
  for (int k = 0; k < l->npend && !found; k++) {
    int n = 0;
    if (l->pend[k].done < sizeof(sock_hello_t)) continue;
    nonce = l->pend[k].hello.nonce;
    for (int i = 0; i <= l->nsocks; i++) slot[i] = -1;
    for (int j = 0; j < l->npend; j++) {
      sock_pending_t *p = &l->pend[j];
      if (p->done < sizeof(p->hello) || p->hello.nonce != nonce) continue;
      if (slot[p->hello.index] < 0) n++;
      slot[p->hello.index] = j;
    }
    found = n == l->nsocks + 1;
  }
  if (!found) return ncclSuccess;
  CHECK(comm_create(0, l->nsocks, l->nthreads, &c));
  for (int i = 0; i <= l->nsocks; i++) {
    struct brd_sock *dst = i == l->nsocks ? &c->ctrl : &c->socks[i];
    *dst = l->pend[slot[i]].s;
    l->pend[slot[i]].s.fd = -1;
  }
  brd_sock_addr_str(&c->ctrl.addr, c->peer);
  /* Compact: drop the entries just taken (their fds moved to c). */
  for (int k = 0; k < l->npend;) {
    if (l->pend[k].s.fd < 0) l->pend[k] = l->pend[--l->npend];
    else k++;
  }
  *recv_comm = c;
  return ncclSuccess;
}

/* ---- data path --------------------------------------------------------------- */

static ncclResult_t sock_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  if (mhandle != NULL) *mhandle = NULL;
  return type == BRD_NET_PTR_HOST ? ncclSuccess : ncclInternalError;
}

static ncclResult_t sock_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  (void)mhandle;
  return ncclSuccess;
}

/* The slot for the next message, or NULL when 32 are in flight. */
static sock_req_t *req_next(sock_comm_t *c) {
  sock_req_t *r = &c->reqs[c->post_seq % SOCK_NREQ];
  if (r->state != REQ_FREE) return NULL;
  r->seq = c->post_seq;
  r->hdr_done = 0;
  r->ctrl_done = 0;
  r->ctrl_bytes = 0;
  memset(&r->hdr, 0, sizeof(r->hdr));
  atomic_store_explicit(&r->tasks_left, 0, memory_order_relaxed);
  return r;
}

/* The start of a post on c: *request NULL, then c's failure if it has
 * one, else the next free request in *r_out (NULL when all are in flight:
 * the post returns ncclSuccess without a request, as the net API asks). */
static ncclResult_t req_take(sock_comm_t *c, void **request, sock_req_t **r_out) {
  int err = atomic_load(&c->error);
  *request = NULL;
  if (err != ncclSuccess) return (ncclResult_t)err;
  *r_out = req_next(c);
  return ncclSuccess;
}

/* The end of a post: r, its buffer set, starts with its control message. */
static ncclResult_t req_post(sock_comm_t *c, sock_req_t *r, void **request) {
  r->state = REQ_CTRL;
  c->post_seq++;
  *request = r;
  return ncclSuccess;
}

static ncclResult_t sock_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void *phandle, void **request) {
  sock_comm_t *c = send_comm;
  sock_req_t *r = NULL;
  (void)tag;
  (void)mhandle;
  (void)phandle;
  CHECK(req_take(c, request, &r));
  if (r == NULL) return ncclSuccess;
  r->buf = data;
  r->cap = r->size = size;
  r->hdr.size = size;
  r->hdr.seq = r->seq;
  if (c->nsocks > 0 && size > c->inline_max) {
    size_t per = (size + (size_t)c->nsocks - 1) / (size_t)c->nsocks;
    r->hdr.task_size = per > c->min_task ? per : c->min_task;
  } else {
    r->ctrl_bytes = size;
  }
  return req_post(c, r, request);
}

static ncclResult_t sock_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **phandles, void **request) {
  sock_comm_t *c = recv_comm;
  sock_req_t *r = NULL;
  (void)tags;
  (void)mhandles;
  (void)phandles;
  *request = NULL;
  if (n != 1) {
    SOCK_WARN("NET/Socket : irecv of %d buffers; this net receives one at a time (maxRecvs 1)", n);
    return ncclInternalError;
  }
  CHECK(req_take(c, request, &r));
  if (r == NULL) return ncclSuccess;
  r->buf = data[0];
  r->cap = sizes[0];
  r->size = 0;
  return req_post(c, r, request);
}

static ncclResult_t sock_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                void **request) {
  (void)recv_comm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  if (request != NULL) *request = NULL;
  /* Host memory only: nothing to flush, and the core never asks. */
  return ncclInternalError;
}

static ncclResult_t sock_test(void *request, int *done, int *sizes) {
  sock_req_t *r = request;
  sock_comm_t *c;
  ncclResult_t res;
  *done = 0;
  if (r == NULL || r->state == REQ_FREE) {
    SOCK_WARN("NET/Socket : test called with a %s request", r == NULL ? "NULL" : "finished");
    return ncclInternalError;
  }
  c = r->comm;
  /* Progress first: a request whose bytes all moved is done even when the
   * connection failed right after it (the peer closed after its last
   * message, seen while reading the next header). */
  ncclResult_t pr = atomic_load(&c->error) == ncclSuccess ? ctrl_progress(c) : ncclSuccess;
  if (r->state == REQ_TASKS &&
      atomic_load_explicit(&r->tasks_left, memory_order_acquire) == 0)
    r->state = REQ_DONE;
  if (r->state != REQ_DONE) {
    /* A helper may have failed meanwhile. */
    res = (ncclResult_t)atomic_load(&c->error);
    return res != ncclSuccess ? res : pr;
  }
  *done = 1;
  if (sizes != NULL) sizes[0] = r->size > (size_t)INT_MAX ? INT_MAX : (int)r->size;
  r->state = REQ_FREE;
  return ncclSuccess;
}

/* The poll_fd member: the control socket, while a request waits on it and
 * no helper thread moves the payloads. */
static int sock_poll_fd(void *comm, short *events_out) {
  sock_comm_t *c = comm;
  *events_out = 0;
  if (c == NULL || c->nsocks > 0 || c->ctrl.fd < 0) return -1;
  if (c->ctrl_seq != c->post_seq) *events_out = c->is_send ? POLLOUT : POLLIN;
  return c->ctrl.fd;
}

/* The why member: the comm's WARN, once its failure is published (the
 * helper threads may be the ones that failed it). */
static size_t sock_why(void *comm, char *buf, size_t n) {
  sock_comm_t *c = comm;
  if (c == NULL || n == 0 || atomic_load(&c->error) == ncclSuccess) return 0;
  snprintf(buf, n, "%s", c->why);
  return strlen(buf);
}

static ncclResult_t sock_close(void *comm) {
  comm_destroy(comm);
  return ncclSuccess;
}

static ncclResult_t sock_close_listen(void *listen_comm) {
  sock_listen_t *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  for (int k = 0; k < l->npend; k++) brd_sock_close(&l->pend[k].s);
  free(l->pend);
  brd_sock_close(&l->sock);
  free(l);
  return ncclSuccess;
}

/* See net.h. */
const brd_net_ops_t brd_net_socket = {
    .name = "Socket",
    .init = sock_init,
    .devices = sock_devices,
    .getProperties = sock_get_properties,
    .listen = sock_listen,
    .connect = sock_connect,
    .accept = sock_accept,
    .regMr = sock_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = sock_dereg_mr,
    .isend = sock_isend,
    .irecv = sock_irecv,
    .iflush = sock_iflush,
    .test = sock_test,
    .closeSend = sock_close,
    .closeRecv = sock_close,
    .closeListen = sock_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = sock_finalize,
    .setNetAttr = NULL,
    .why = sock_why,
    .poll_fd = sock_poll_fd,
};
