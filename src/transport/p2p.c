/*
 * Braid P2P transport: segments of GPU memory that the ranks of one host
 * reach directly (NVLink or PCIe peer access).
 *
 * How an importer reaches a segment, decided per import:
 *   same process  the creator's own pointer; the importing device is granted
 *                 access (cuMemSetAccess, or peer access for cudaMalloc
 *                 memory). A reference count keeps the memory alive until
 *                 the last holder in the process closes it, so a rank that
 *                 tears down first never frees memory a peer thread still
 *                 writes.
 *   cuMem (VMM)   the creator allocates with cuMemCreate asking for a POSIX
 *                 file descriptor handle, exports it, and serves the
 *                 descriptor on the abstract Unix socket
 *                 "braid-p2p-<pid>-<serial>" until the segment is sealed.
 *                 The importer connects, receives the descriptor
 *                 (SCM_RIGHTS), imports it and maps it into its own address
 *                 space with access for its device.
 *   CUDA IPC      where cuMem is unavailable (no VMM or no POSIX handles on
 *                 the device, driver entry points missing, or
 *                 NCCL_CUMEM_ENABLE=0): cudaMalloc + cudaIpcGetMemHandle,
 *                 the 64-byte IPC handle travelling inside the segment
 *                 handle.
 *
 * Driver calls go through a table of entry points resolved once with
 * cudaGetDriverEntryPointByVersion: the library links the static CUDA
 * runtime and never libcuda, so it loads on machines without a driver.
 *
 * Every mapping this process holds (segments created, imported, and
 * ncclMemAlloc blocks) is a record in one list keyed by its address.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "base/check.h"
#include "base/param.h"
#include "base/time.h"
#include "transport/transport.h"

/* ---- small helpers ------------------------------------------------------ */

static void say(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t n, const char *fmt, ...) {
  if (why == NULL || n == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

/* ---- descriptor passing ------------------------------------------------- */

#define FDSRV_POLL_MS 100 /* how often the server thread checks its stop flag */

struct brd_p2p_fdsrv {
  int listen_fd;     /* owned: bound abstract socket */
  int fd;            /* owned: duplicate of the descriptor served */
  uint32_t serial;
  _Atomic int stop;
  pthread_t thread;
};

static pthread_once_t serial_once = PTHREAD_ONCE_INIT;
static uint32_t serial_seed;
static _Atomic uint32_t serial_next;

/* Serials start from a clock-derived value so that two processes with the
 * same pid in different pid namespaces, sharing a network namespace, are
 * unlikely to pick the same name (the payload check below catches the
 * rest). */
static void serial_seed_init(void) {
  serial_seed = (uint32_t)(brd_time_now_ns() ^ ((int64_t)getpid() << 16));
}

void brd_p2p_sockname_format(uint32_t pid, uint32_t serial, char *buf, size_t n) {
  snprintf(buf, n, "braid-p2p-%u-%u", pid, serial);
}

static socklen_t sockaddr_fill(struct sockaddr_un *sa, uint32_t pid, uint32_t serial) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  /* Abstract namespace: a leading NUL, no file to clean up; the name goes
   * away with the socket. */
  brd_p2p_sockname_format(pid, serial, sa->sun_path + 1, sizeof(sa->sun_path) - 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                     strlen(sa->sun_path + 1));
}

/* Sends the serial as payload and the descriptor as ancillary data. */
static void fdsrv_reply(brd_p2p_fdsrv_t *s, int c) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      cred.uid != getuid()) {
    INFO(BRD_SUBSYS_P2P, "P2P: refused a descriptor request on serial %u from "
         "another user", s->serial);
    return;
  }
  /* A client that stops reading must not hold the server thread. */
  struct timeval tv = {1, 0};
  (void)setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

  uint32_t payload = s->serial;
  struct iovec iov = {.iov_base = &payload, .iov_len = sizeof(payload)};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof(ctl.buf);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &s->fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(c, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(payload))
    INFO(BRD_SUBSYS_P2P, "P2P: sending descriptor %u failed: %s", s->serial,
         n < 0 ? strerror(errno) : "short write");
}

/* The server thread: accept, reply, close, until told to stop. */
static void *fdsrv_main(void *arg) {
  brd_p2p_fdsrv_t *s = arg;
  while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
    struct pollfd p = {.fd = s->listen_fd, .events = POLLIN, .revents = 0};
    int r = poll(&p, 1, FDSRV_POLL_MS);
    if (r < 0 && errno != EINTR) {
      INFO(BRD_SUBSYS_P2P, "P2P: descriptor server %u stops: poll failed: %s",
           s->serial, strerror(errno));
      break;
    }
    if (r <= 0) continue;
    int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue; /* the client gave up, or EINTR: poll again */
    fdsrv_reply(s, c);
    close(c);
  }
  return NULL;
}

/* A listening abstract Unix socket under a fresh serial of this process,
 * in *fd_out and *serial_out. ncclSystemError (WARN) on failure. */
static ncclResult_t unix_listen(const char *what, int *fd_out, uint32_t *serial_out) {
  ncclResult_t res = ncclSuccess;
  uint32_t serial = 0;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    WARN("P2P: socket(AF_UNIX) for %s failed: %s", what, strerror(errno));
    return ncclSystemError;
  }
  pthread_once(&serial_once, serial_seed_init);
  for (int tries = 0;; tries++) {
    struct sockaddr_un sa;
    serial = serial_seed + atomic_fetch_add(&serial_next, 1u);
    socklen_t len = sockaddr_fill(&sa, (uint32_t)getpid(), serial);
    if (bind(s, (struct sockaddr *)&sa, len) == 0) break;
    if (errno != EADDRINUSE || tries >= 16) {
      WARN("P2P: binding the abstract Unix socket @%s for %s failed: %s", sa.sun_path + 1,
           what, strerror(errno));
      res = ncclSystemError;
      goto fail_close;
    }
  }
  SYS_CHECK_GOTO(listen(s, 128), "listen on a P2P Unix socket", res, fail_close);
  *fd_out = s;
  *serial_out = serial;
  return ncclSuccess;
fail_close:
  close(s);
  return res;
}

/* See transport.h. */
ncclResult_t brd_p2p_fdsrv_create(int fd, brd_p2p_fdsrv_t **srv_out) {
  ncclResult_t res = ncclSuccess;
  brd_p2p_fdsrv_t *s;
  BRD_CALLOC(s, 1, "a P2P descriptor server");
  s->listen_fd = -1;
  atomic_init(&s->stop, 0);
  s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (s->fd < 0) {
    WARN("P2P: duplicating descriptor %d to share it failed: %s", fd, strerror(errno));
    res = ncclSystemError;
    goto fail_free;
  }
  CHECK_GOTO(unix_listen("a descriptor server", &s->listen_fd, &s->serial), res, fail_close);
  PTHREAD_CHECK_GOTO(pthread_create(&s->thread, NULL, fdsrv_main, s),
                     "pthread_create for the P2P descriptor server", res, fail_close);
  *srv_out = s;
  return ncclSuccess;

fail_close:
  if (s->listen_fd >= 0) close(s->listen_fd);
  close(s->fd);
fail_free:
  free(s);
  return res;
}

/* See transport.h. */
uint32_t brd_p2p_fdsrv_serial(const brd_p2p_fdsrv_t *srv) { return srv->serial; }

/* See transport.h. */
void brd_p2p_fdsrv_destroy(brd_p2p_fdsrv_t *srv) {
  if (srv == NULL) return;
  atomic_store_explicit(&srv->stop, 1, memory_order_release);
  pthread_join(srv->thread, NULL);
  close(srv->listen_fd);
  close(srv->fd);
  free(srv);
}

/* Receives the reply of a server: the serial, and one descriptor. */
static ncclResult_t fd_recv(int s, uint32_t pid, uint32_t serial, int *fd_out) {
  uint32_t payload = 0;
  struct iovec iov = {.iov_base = &payload, .iov_len = sizeof(payload)};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof(ctl.buf);
  ssize_t n;
  do {
    n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    WARN("P2P: receiving a memory descriptor from pid %u failed: %s", pid,
         strerror(errno));
    return ncclSystemError;
  }
  int fd = -1;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
      cm->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  if (n != (ssize_t)sizeof(payload) || payload != serial || fd < 0 ||
      (msg.msg_flags & MSG_CTRUNC) != 0) {
    if (fd >= 0) close(fd);
    WARN("P2P: pid %u closed the descriptor connection for serial %u without a "
         "valid reply (%zd bytes, serial %u, %s); every rank of a host must run "
         "as the same user", pid, serial, n, payload,
         fd >= 0 ? "a descriptor" : "no descriptor");
    return ncclRemoteError;
  }
  *fd_out = fd;
  return ncclSuccess;
}

/* Connects to the server (pid, serial), `what` naming it for messages:
 * the connected socket in *s_out. Retries while the server's backlog is
 * full, until deadline (now_ns) or *abort_flag (ncclSystemError, no WARN). */
static ncclResult_t unix_connect(uint32_t pid, uint32_t serial, int64_t deadline,
                                 _Atomic int *abort_flag, const char *what, int *s_out) {
  struct sockaddr_un sa;
  socklen_t len = sockaddr_fill(&sa, pid, serial);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    WARN("P2P: socket(AF_UNIX) failed: %s", strerror(errno));
    return ncclSystemError;
  }
  /* A non-blocking Unix connect completes at once, or fails with EAGAIN
   * while the server's backlog is full (retry), or ECONNREFUSED when
   * nothing listens under the name. */
  for (;;) {
    if (connect(s, (struct sockaddr *)&sa, len) == 0) break;
    int err = errno;
    if (err == EINTR) continue;
    ncclResult_t res = ncclSuccess;
    if (err != EAGAIN) {
      WARN("P2P: connecting to @%s (pid %u) for %s failed: %s; the peer process may "
           "have exited or already sealed what it served", sa.sun_path + 1, pid, what,
           strerror(err));
      res = err == ECONNREFUSED || err == ENOENT ? ncclRemoteError : ncclSystemError;
    } else if (abort_flag != NULL && atomic_load(abort_flag)) {
      res = ncclSystemError;
    } else if (brd_time_now_ns() >= deadline) {
      WARN("P2P: the server @%s of pid %u for %s stayed busy past its deadline; "
           "raise BRAID_BOOTSTRAP_TIMEOUT if the host is overloaded", sa.sun_path + 1,
           pid, what);
      res = ncclRemoteError;
    }
    if (res != ncclSuccess) {
      close(s);
      return res;
    }
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  *s_out = s;
  return ncclSuccess;
}

/* Waits until socket s (connected to pid for `what`) has something to
 * read, until deadline or *abort_flag (ncclSystemError, no WARN). */
static ncclResult_t unix_wait(int s, uint32_t pid, int64_t deadline, double timeout_s,
                              _Atomic int *abort_flag, const char *what) {
  for (;;) {
    if (abort_flag != NULL && atomic_load(abort_flag)) return ncclSystemError;
    int64_t left = deadline - brd_time_now_ns();
    if (left <= 0) {
      WARN("P2P: no answer from pid %u for %s within %.1f s; the peer process is "
           "alive but does not answer (stuck, or it sealed what it served too early); "
           "raise BRAID_BOOTSTRAP_TIMEOUT if it is only slow", pid, what, timeout_s);
      return ncclRemoteError;
    }
    int ms = left / 1000000 < FDSRV_POLL_MS ? (int)(left / 1000000) + 1 : FDSRV_POLL_MS;
    struct pollfd p = {.fd = s, .events = POLLIN, .revents = 0};
    int r = poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) {
      WARN("P2P: poll on the connection to pid %u for %s failed: %s", pid, what,
           strerror(errno));
      return ncclSystemError;
    }
    if (r > 0) return ncclSuccess;
  }
}

/* See transport.h. */
ncclResult_t brd_p2p_fd_fetch(uint32_t pid, uint32_t serial, double timeout_s,
                              _Atomic int *abort_flag, int *fd_out) {
  const char *what = "a memory descriptor";
  int64_t deadline = brd_time_now_ns() + (int64_t)(timeout_s * 1e9);
  int s;
  CHECK(unix_connect(pid, serial, deadline, abort_flag, what, &s));
  ncclResult_t res = unix_wait(s, pid, deadline, timeout_s, abort_flag, what);
  if (res == ncclSuccess) res = fd_recv(s, pid, serial, fd_out);
  close(s);
  return res;
}

/* ---- request service ---------------------------------------------------- */

struct brd_p2p_svc {
  int listen_fd;            /* owned */
  int wake[2];              /* owned: a pipe; a byte on it stops the thread */
  uint32_t serial;
  size_t req_len, rep_len;
  brd_p2p_svc_fn_t fn;
  void *ctx;                /* borrowed: fn's */
  pthread_t thread;
};

/* Reads or writes exactly len bytes on a blocking socket with a timeout;
 * 0 on success. */
static int io_full(int s, void *buf, size_t len, int write_side) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = write_side ? send(s, p, len, MSG_NOSIGNAL) : recv(s, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* One connection: a request in, fn, the reply out. */
static void svc_serve(brd_p2p_svc_t *v, int c) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid()) {
    INFO(BRD_SUBSYS_P2P, "P2P: refused a request on service %u from another user",
         v->serial);
    return;
  }
  /* A client that stops talking must not hold the service thread. */
  struct timeval tv = {5, 0};
  (void)setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  char *req = calloc(1, v->req_len), *rep = calloc(1, v->rep_len);
  if (req != NULL && rep != NULL && io_full(c, req, v->req_len, 0) == 0) {
    v->fn(v->ctx, req, rep);
    if (io_full(c, rep, v->rep_len, 1) != 0)
      INFO(BRD_SUBSYS_P2P, "P2P: service %u could not send its reply: %s", v->serial,
           strerror(errno));
  }
  free(req);
  free(rep);
}

static void *svc_main(void *arg) {
  brd_p2p_svc_t *v = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = v->listen_fd, .events = POLLIN, .revents = 0},
                          {.fd = v->wake[0], .events = POLLIN, .revents = 0}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno != EINTR) {
      INFO(BRD_SUBSYS_P2P, "P2P: service %u stops: poll failed: %s", v->serial,
           strerror(errno));
      break;
    }
    if (r <= 0) continue;
    if (p[1].revents != 0) break;
    int c = accept4(v->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue; /* the client gave up, or EINTR: poll again */
    svc_serve(v, c);
    close(c);
  }
  return NULL;
}

/* See transport.h. */
ncclResult_t brd_p2p_svc_create(size_t req_len, size_t rep_len, brd_p2p_svc_fn_t fn,
                                void *ctx, brd_p2p_svc_t **svc_out) {
  ncclResult_t res = ncclSuccess;
  brd_p2p_svc_t *v;
  BRD_CALLOC(v, 1, "a P2P request service");
  v->req_len = req_len;
  v->rep_len = rep_len;
  v->fn = fn;
  v->ctx = ctx;
  v->listen_fd = -1;
  SYS_CHECK_GOTO(pipe2(v->wake, O_CLOEXEC), "pipe2 for the P2P request service", res,
                 fail_free);
  CHECK_GOTO(unix_listen("a request service", &v->listen_fd, &v->serial), res, fail_pipe);
  PTHREAD_CHECK_GOTO(pthread_create(&v->thread, NULL, svc_main, v),
                     "pthread_create for the P2P request service", res, fail_listen);
  *svc_out = v;
  return ncclSuccess;

fail_listen:
  close(v->listen_fd);
fail_pipe:
  close(v->wake[0]);
  close(v->wake[1]);
fail_free:
  free(v);
  return res;
}

/* See transport.h. */
uint32_t brd_p2p_svc_serial(const brd_p2p_svc_t *svc) { return svc->serial; }

/* See transport.h. */
void brd_p2p_svc_destroy(brd_p2p_svc_t *svc) {
  if (svc == NULL) return;
  char byte = 1;
  ssize_t n;
  do {
    n = write(svc->wake[1], &byte, 1);
  } while (n < 0 && errno == EINTR);
  pthread_join(svc->thread, NULL);
  close(svc->listen_fd);
  close(svc->wake[0]);
  close(svc->wake[1]);
  free(svc);
}

/* See transport.h. */
ncclResult_t brd_p2p_svc_call(uint32_t pid, uint32_t serial, const void *req,
                              size_t req_len, void *rep, size_t rep_len, double timeout_s,
                              _Atomic int *abort_flag) {
  const char *what = "a registration request";
  int64_t deadline = brd_time_now_ns() + (int64_t)(timeout_s * 1e9);
  int s;
  CHECK(unix_connect(pid, serial, deadline, abort_flag, what, &s));
  ncclResult_t res = ncclSuccess;
  /* The request is small: it fits the socket buffer, so a non-blocking
   * send completes at once. */
  if (io_full(s, (void *)req, req_len, 1) != 0) {
    WARN("P2P: sending %s to pid %u failed: %s", what, pid, strerror(errno));
    res = ncclRemoteError;
    goto out;
  }
  char *p = rep;
  size_t left = rep_len;
  while (left > 0) {
    CHECK_GOTO(unix_wait(s, pid, deadline, timeout_s, abort_flag, what), res, out);
    ssize_t n = recv(s, p, left, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      WARN("P2P: pid %u closed the connection for %s without a full reply (%s); it "
           "may have exited", pid, what, n < 0 ? strerror(errno) : "end of stream");
      res = ncclRemoteError;
      goto out;
    }
    p += n;
    left -= (size_t)n;
  }
out:
  close(s);
  return res;
}

/* ---- P2P usability ------------------------------------------------------- */

/* NCCL's path types, in NCCL's order; NCCL_P2P_LEVEL names one of them. */
enum {
  PATH_LOC = 0, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C,
  PATH_PXN, PATH_PHB, PATH_SYS, PATH_COUNT
};
static const char *const path_names[PATH_COUNT] = {
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"};

/* NCCL_P2P_LEVEL as a path type, or -1 when unset or not understood (NCCL
 * ignores a value it cannot read). Old numeric levels map as NCCL maps
 * them. */
static int user_level(void) {
  static const int old_levels[] = {PATH_LOC, PATH_PIX, PATH_PXB, PATH_PHB, PATH_SYS,
                                   PATH_SYS};
  const char *s = brd_param_str(BRD_P_P2P_LEVEL);
  if (s == NULL || s[0] == '\0') return -1;
  for (int i = 0; i < PATH_COUNT; i++)
    if (strcmp(s, path_names[i]) == 0) return i;
  if (s[0] >= '0' && s[0] <= '9') {
    long v = strtol(s, NULL, 0);
    int max = (int)(sizeof(old_levels) / sizeof(old_levels[0])) - 1;
    return old_levels[v > max ? max : v];
  }
  INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ENV, "NCCL_P2P_LEVEL=%s is not a path type "
       "(LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS); ignored", s);
  return -1;
}

/* ---- topology from sysfs (CUDA builds only use it) ------------------------ */
#if BRAID_CUDA

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int cpu_default_level = PATH_SYS;

/* NCCL's default level: P2P through any path, except PXB at most on Intel
 * (and Zhaoxin) x86 CPUs and on ARM, whose root complexes forward peer
 * traffic poorly. */
static void cpu_level_init(void) {
#if defined(__aarch64__)
  cpu_default_level = PATH_PXB;
#else
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  if (f == NULL) return;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "vendor_id", 9) != 0) continue;
    if (strstr(line, "GenuineIntel") != NULL || strstr(line, "CentaurHauls") != NULL ||
        strstr(line, "Shanghai") != NULL)
      cpu_default_level = PATH_PXB;
    break;
  }
  fclose(f);
#endif
}

/* Resolves /sys/bus/pci/devices/<bus> to its place in the PCI tree. */
static int pci_realpath(const char *bus, char *out) {
  char p[128];
  snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s", bus);
  return realpath(p, out) != NULL;
}

/* Splits a sysfs device path below /sys/devices into components. */
static int pci_split(char *path, char **comp, int max) {
  const char *pre = "/sys/devices/";
  if (strncmp(path, pre, strlen(pre)) != 0) return 0;
  int n = 0;
  for (char *save = NULL, *t = strtok_r(path + strlen(pre), "/", &save);
       t != NULL && n < max; t = strtok_r(NULL, "/", &save))
    comp[n++] = t;
  return n;
}

static int read_int_file(const char *path, int def) {
  FILE *f = fopen(path, "r");
  int v = def;
  if (f == NULL) return def;
  if (fscanf(f, "%d", &v) != 1) v = def;
  fclose(f);
  return v;
}

/* PCI distance between two GPUs from the sysfs tree: PIX when they share
 * one PCIe switch (at most two levels below the common bridge), PXB when
 * they share deeper bridges, PHB when they meet only at the host bridge or
 * under different host bridges of one NUMA node, SYS across NUMA nodes or
 * when sysfs cannot tell. */
static int pci_path(const char *bus_a, const char *bus_b, char *detail, size_t n) {
  char pa[PATH_MAX], pb[PATH_MAX];
  char *ca[32], *cb[32];
  if (!pci_realpath(bus_a, pa) || !pci_realpath(bus_b, pb)) {
    say(detail, n, "PCI path unknown (no sysfs entry)");
    return PATH_SYS;
  }
  int na = pci_split(pa, ca, 32), nb = pci_split(pb, cb, 32);
  if (na < 2 || nb < 2) {
    say(detail, n, "PCI path unknown (unexpected sysfs layout)");
    return PATH_SYS;
  }
  int m = 0;
  while (m < na - 1 && m < nb - 1 && strcmp(ca[m], cb[m]) == 0) m++;
  if (m == 0) {
    char p[128];
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/numa_node", bus_a);
    int numa_a = read_int_file(p, -1);
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/numa_node", bus_b);
    int numa_b = read_int_file(p, -1);
    say(detail, n, "different host bridges, NUMA nodes %d and %d", numa_a, numa_b);
    return numa_a >= 0 && numa_a == numa_b ? PATH_PHB : PATH_SYS;
  }
  if (m == 1) {
    say(detail, n, "host bridge %s", ca[0]);
    return PATH_PHB;
  }
  say(detail, n, "common PCI bridge %s", ca[m - 1]);
  return na - m <= 2 && nb - m <= 2 ? PATH_PIX : PATH_PXB;
}

/* The IOMMU group of a PCI device, or -1 when the IOMMU is off. */
static int iommu_group(const char *bus) {
  char p[128], link[PATH_MAX];
  snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/iommu_group", bus);
  ssize_t k = readlink(p, link, sizeof(link) - 1);
  if (k <= 0) return -1;
  link[k] = '\0';
  const char *base = strrchr(link, '/');
  return atoi(base != NULL ? base + 1 : link);
}

/* GPUs behind one PCIe switch share an IOMMU group unless the switch
 * enforces ACS, which redirects peer traffic to the root complex; with DMA
 * translation on (group type other than "identity") that traffic faults or
 * crawls. */
static int acs_suspected(const char *bus_a, const char *bus_b, char *why, size_t n) {
  int ga = iommu_group(bus_a), gb = iommu_group(bus_b);
  if (ga < 0 || gb < 0 || ga == gb) return 0;
  char p[128], type[64] = "";
  snprintf(p, sizeof(p), "/sys/kernel/iommu_groups/%d/type", ga);
  FILE *f = fopen(p, "r");
  if (f == NULL) return 0;
  if (fgets(type, sizeof(type), f) == NULL) type[0] = '\0';
  fclose(f);
  type[strcspn(type, "\n")] = '\0';
  if (type[0] == '\0' || strcmp(type, "identity") == 0) return 0;
  say(why, n, "GPUs %s and %s share a PCIe switch but sit in IOMMU groups %d and "
      "%d with DMA translation on (%s): ACS is probably enabled on the switch, "
      "which breaks or slows peer traffic; disable ACS or boot with iommu=pt, "
      "or set NCCL_P2P_LEVEL to use P2P anyway", bus_a, bus_b, ga, gb, type);
  return 1;
}

/* The GPU-dependent part of brd_p2p_usable, for two GPUs of one host. */
static int gpu_pair_usable(const brd_peer_info_t *a, const brd_peer_info_t *b,
                           int level, char *why, size_t n) {
  char detail[128];
  int path = pci_path(a->bus_id_str, b->bus_id_str, detail, sizeof(detail));
  int da = -1, db = -1;
  /* Peers of other processes may see other device numbers: map both GPUs
   * to this process's numbering by bus id; a GPU not visible here cannot be
   * queried, and its pair is judged on the PCI path alone. */
  if (cudaDeviceGetByPCIBusId(&da, a->bus_id_str) != cudaSuccess ||
      cudaDeviceGetByPCIBusId(&db, b->bus_id_str) != cudaSuccess) {
    (void)cudaGetLastError();
    da = db = -1;
  }
  if (da >= 0 && db >= 0) {
    int can = 0, atomics = 0;
    if (cudaDeviceCanAccessPeer(&can, da, db) != cudaSuccess) {
      (void)cudaGetLastError();
      can = 0;
    }
    if (!can) {
      say(why, n, "CUDA reports no peer access from GPU %s to GPU %s "
          "(cudaDeviceCanAccessPeer)", a->bus_id_str, b->bus_id_str);
      return 0;
    }
    /* Native peer atomics exist over NVLink, not over PCIe: the cheapest
     * NVLink test without NVML. */
    if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, da,
                                  db) != cudaSuccess) {
      (void)cudaGetLastError();
      atomics = 0;
    }
    if (atomics) {
      path = PATH_NVL;
      snprintf(detail, sizeof(detail), "NVLink");
    }
  }
  pthread_once(&cpu_once, cpu_level_init);
  int max = level >= 0 ? level : cpu_default_level;
  if (path > max) {
    say(why, n, "GPUs %s and %s are %s apart (%s), beyond NCCL_P2P_LEVEL=%s%s",
        a->bus_id_str, b->bus_id_str, path_names[path], detail, path_names[max],
        level >= 0 ? "" : " (NCCL's default for this CPU)");
    return 0;
  }
  if (level < 0 && (path == PATH_PIX || path == PATH_PXB) &&
      acs_suspected(a->bus_id_str, b->bus_id_str, why, n))
    return 0;
  say(why, n, "GPUs %s and %s: %s (%s)", a->bus_id_str, b->bus_id_str,
      path_names[path], detail);
  return 1;
}
#endif /* BRAID_CUDA */

/* See transport.h. */
int brd_p2p_usable(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                   size_t n) {
  if (a->host_hash != b->host_hash) {
    say(why, n, "the ranks are on different hosts");
    return 0;
  }
  if (a->backend != BRD_DEVICE_CUDA || b->backend != BRD_DEVICE_CUDA) {
    say(why, n, "a rank runs on the host executor, without GPU memory");
    return 0;
  }
  if (brd_param_int(BRD_P_P2P_DISABLE) == 1) {
    say(why, n, "NCCL_P2P_DISABLE=1");
    return 0;
  }
  if (!a->p2p || !b->p2p) {
    say(why, n, "NCCL_P2P_DISABLE=1 on the rank using GPU %s",
        !a->p2p ? a->bus_id_str : b->bus_id_str);
    return 0;
  }
  if (a->bus_id == b->bus_id) {
    say(why, n, "both ranks use GPU %s", a->bus_id_str);
    return 1;
  }
  int level = user_level();
  if (level == PATH_LOC) {
    say(why, n, "NCCL_P2P_LEVEL=LOC allows P2P only between ranks on one GPU");
    return 0;
  }
#if BRAID_CUDA
  return gpu_pair_usable(a, b, level, why, n);
#else
  say(why, n, "this library was built without CUDA (CUDA=0)");
  return 0;
#endif
}

/* ---- the rest needs CUDA ------------------------------------------------- */
#if BRAID_CUDA

/* Driver entry points, resolved once. */
typedef struct {
  CUresult (*get_error_string)(CUresult, const char **);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*mem_get_allocation_granularity)(size_t *, const CUmemAllocationProp *,
                                             CUmemAllocationGranularity_flags);
  CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t,
                         const CUmemAllocationProp *, unsigned long long);
  CUresult (*mem_release)(CUmemGenericAllocationHandle);
  CUresult (*mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                  unsigned long long);
  CUresult (*mem_address_free)(CUdeviceptr, size_t);
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                      unsigned long long);
  CUresult (*mem_unmap)(CUdeviceptr, size_t);
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*mem_export)(void *, CUmemGenericAllocationHandle,
                         CUmemAllocationHandleType, unsigned long long);
  CUresult (*mem_import)(CUmemGenericAllocationHandle *, void *,
                         CUmemAllocationHandleType);
} drv_t;

/* The ABI the prototypes above describe: CUDA 12.0's. */
#define DRV_ABI_VERSION 12000

static const struct {
  const char *name;
  size_t off;
} drv_syms[] = {
    {"cuGetErrorString", offsetof(drv_t, get_error_string)},
    {"cuDeviceGet", offsetof(drv_t, device_get)},
    {"cuDeviceGetAttribute", offsetof(drv_t, device_get_attribute)},
    {"cuMemGetAllocationGranularity", offsetof(drv_t, mem_get_allocation_granularity)},
    {"cuMemCreate", offsetof(drv_t, mem_create)},
    {"cuMemRelease", offsetof(drv_t, mem_release)},
    {"cuMemAddressReserve", offsetof(drv_t, mem_address_reserve)},
    {"cuMemAddressFree", offsetof(drv_t, mem_address_free)},
    {"cuMemMap", offsetof(drv_t, mem_map)},
    {"cuMemUnmap", offsetof(drv_t, mem_unmap)},
    {"cuMemSetAccess", offsetof(drv_t, mem_set_access)},
    {"cuMemExportToShareableHandle", offsetof(drv_t, mem_export)},
    {"cuMemImportFromShareableHandle", offsetof(drv_t, mem_import)},
};

static drv_t drv;                 /* valid when drv_res is ncclSuccess */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static ncclResult_t drv_res = ncclSuccess;
static char drv_err[256];         /* why the table is unusable */

static void drv_load(void) {
  drv_t t;
  memset(&t, 0, sizeof(t));
  for (size_t i = 0; i < sizeof(drv_syms) / sizeof(drv_syms[0]); i++) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(drv_syms[i].name, &fn,
                                                     DRV_ABI_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == NULL) {
      (void)cudaGetLastError();
      snprintf(drv_err, sizeof(drv_err),
               "CUDA driver entry point %s is unavailable (%s); cuMem needs an "
               "NVIDIA driver for CUDA 12.0 or later", drv_syms[i].name,
               e != cudaSuccess ? cudaGetErrorString(e)
               : q == cudaDriverEntryPointVersionNotSufficent ? "the driver is too old"
                                                              : "symbol not found");
      drv_res = ncclUnhandledCudaError;
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_INIT, "P2P: %s", drv_err);
      return;
    }
    /* Entry points are plain function pointers returned as void *. */
    memcpy((char *)&t + drv_syms[i].off, &fn, sizeof(fn));
  }
  drv = t;
}

/* The table, or the reason it is unusable (no WARN: callers fall back). */
static ncclResult_t drv_get(void) {
  pthread_once(&drv_once, drv_load);
  return drv_res;
}

static const char *cu_errstr(CUresult r) {
  const char *s = NULL;
  if (drv.get_error_string == NULL || drv.get_error_string(r, &s) != CUDA_SUCCESS ||
      s == NULL)
    return "unknown CUDA driver error";
  return s;
}

#define CU_GOTO(call, what, res, label)                                       \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      WARN("CUDA driver: %s failed: %s (%d)", (what), cu_errstr(r_), (int)r_); \
      (res) = ncclUnhandledCudaError;                                         \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* See transport.h. */
ncclResult_t brd_p2p_driver_check(void) {
  ncclResult_t res = drv_get();
  if (res != ncclSuccess) WARN("P2P: %s", drv_err);
  return res;
}

/* ---- the mapping registry ----------------------------------------------- */

typedef enum { MODE_VMM = 1, MODE_IPC = 2 } p2p_mode_t;

/* The transport-specific part of a segment handle. */
typedef struct {
  uint16_t mode;         /* p2p_mode_t */
  int16_t dev;           /* creator's CUDA device (same-process importers) */
  uint32_t serial;       /* VMM: descriptor server serial (with handle.pid) */
  union {
    unsigned char ipc[64];     /* IPC: cudaIpcMemHandle_t */
    struct {
      uint64_t alloc_size;     /* VMM: bytes to map */
    } vmm;
  } u;
} p2p_name_t;

_Static_assert(sizeof(p2p_name_t) == sizeof(((brd_seg_handle_t *)0)->name),
               "the P2P name fills the handle's name field exactly");
_Static_assert(sizeof(cudaIpcMemHandle_t) == 64, "CUDA IPC handles are 64 bytes");

typedef struct p2p_mem {
  void *ptr;              /* key: the address mapped in this process */
  size_t size;            /* bytes asked for */
  size_t alloc_size;      /* bytes mapped (VMM: a granularity multiple) */
  p2p_mode_t mode;
  int dev;                /* device the memory lives on (this process's number) */
  int imported;           /* 1: another process's memory, mapped here */
  int memalloc;           /* 1: an ncclMemAlloc block, not a segment */
  int refs;               /* holders in this process */
  CUmemGenericAllocationHandle cu; /* VMM: this process's handle */
  brd_p2p_fdsrv_t *srv;   /* owned: VMM creator, until sealed */
  brd_seg_handle_t key;   /* imported: the handle it was mapped from */
  struct p2p_mem *next;
} p2p_mem_t;

static pthread_mutex_t mems_lock = PTHREAD_MUTEX_INITIALIZER;
static p2p_mem_t *mems; /* owned: every live mapping; under mems_lock */

static p2p_mem_t *mem_find_locked(const void *ptr) {
  for (p2p_mem_t *m = mems; m != NULL; m = m->next)
    if (m->ptr == ptr) return m;
  return NULL;
}

static void mem_insert(p2p_mem_t *m) {
  pthread_mutex_lock(&mems_lock);
  m->next = mems;
  mems = m;
  pthread_mutex_unlock(&mems_lock);
}

static void mem_unlink_locked(p2p_mem_t *m) {
  for (p2p_mem_t **pp = &mems; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == m) {
      *pp = m->next;
      return;
    }
  }
}

/* Gives back what a record maps; errors only INFO (nothing to recover). */
static void mem_unmap(p2p_mem_t *m) {
  if (m->ptr == NULL) return;
  if (m->mode == MODE_VMM) {
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)m->ptr;
    CUresult r1 = drv.mem_unmap(va, m->alloc_size);
    CUresult r2 = drv.mem_address_free(va, m->alloc_size);
    CUresult r3 = drv.mem_release(m->cu);
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS || r3 != CUDA_SUCCESS)
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: releasing %p (%zu bytes) "
           "failed: %s", m->ptr, m->alloc_size,
           cu_errstr(r1 != CUDA_SUCCESS ? r1 : r2 != CUDA_SUCCESS ? r2 : r3));
  } else {
    cudaError_t e = m->imported ? cudaIpcCloseMemHandle(m->ptr) : cudaFree(m->ptr);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: releasing %p failed: %s",
           m->ptr, cudaGetErrorString(e));
    }
  }
  m->ptr = NULL;
}

/* ---- cuMem -------------------------------------------------------------- */

/* Whether segments on dev can use cuMem with POSIX descriptors. */
static int vmm_supported(int dev) {
  CUdevice cd;
  int vmm = 0, posix = 0;
  if (brd_param_int(BRD_P_CUMEM_ENABLE) == 0) return 0;
  if (drv_get() != ncclSuccess) return 0;
  if (drv.device_get(&cd, dev) != CUDA_SUCCESS) return 0;
  if (drv.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               cd) != CUDA_SUCCESS ||
      drv.device_get_attribute(&posix,
                               CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                               cd) != CUDA_SUCCESS)
    return 0;
  return vmm && posix;
}

/* The devices there may be: cuMemSetAccess takes one entry per device. */
#define P2P_MAX_DEVS 64

/* Grants read-write access to [va, va + size) to dev, and with all_peers
 * to every other device that has peer access to dev. */
static ncclResult_t vmm_grant(CUdeviceptr va, size_t size, int dev, int all_peers) {
  ncclResult_t res = ncclSuccess;
  CUmemAccessDesc desc[P2P_MAX_DEVS];
  size_t nd = 0;
  int ndev = 1;
  memset(desc, 0, sizeof(desc));
  desc[nd].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc[nd].location.id = dev;
  desc[nd++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (all_peers) {
    CUDA_CHECK_GOTO(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount", res, out);
    for (int d = 0; d < ndev && nd < P2P_MAX_DEVS; d++) {
      int can = 0;
      if (d == dev) continue;
      if (cudaDeviceCanAccessPeer(&can, d, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (!can) continue;
      desc[nd].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc[nd].location.id = d;
      desc[nd++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
  }
  CU_GOTO(drv.mem_set_access(va, size, desc, nd), "cuMemSetAccess", res, out);
out:
  return res;
}

/* Allocates and maps size bytes (rounded up to the recommended granularity)
 * on dev, exportable as a POSIX descriptor; fills m's mapping fields. */
static ncclResult_t vmm_alloc(int dev, size_t size, int all_peers, p2p_mem_t *m) {
  ncclResult_t res = ncclSuccess;
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h;
  CUdeviceptr va = 0;
  size_t gran = 0;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CU_GOTO(drv.mem_get_allocation_granularity(&gran, &prop,
                                             CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity", res, out);
  if (gran == 0) gran = 2u << 20;
  size_t alloc = (size + gran - 1) / gran * gran;
  CU_GOTO(drv.mem_create(&h, alloc, &prop, 0), "cuMemCreate", res, out);
  CU_GOTO(drv.mem_address_reserve(&va, alloc, gran, 0, 0), "cuMemAddressReserve", res,
          fail_release);
  CU_GOTO(drv.mem_map(va, alloc, 0, h, 0), "cuMemMap", res, fail_free_va);
  CHECK_GOTO(vmm_grant(va, alloc, dev, all_peers), res, fail_unmap);
  m->ptr = (void *)(uintptr_t)va;
  m->alloc_size = alloc;
  m->cu = h;
  m->mode = MODE_VMM;
  m->dev = dev;
  return ncclSuccess;

fail_unmap:
  drv.mem_unmap(va, alloc);
fail_free_va:
  drv.mem_address_free(va, alloc);
fail_release:
  drv.mem_release(h);
out:
  return res;
}

/* Zeroes device memory on a private stream, so no other work on the device
 * (another rank's kernel, say) is waited for. Blocks. */
static ncclResult_t zero_device(void *ptr, size_t size) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", res, out);
  CUDA_CHECK_GOTO(cudaMemsetAsync(ptr, 0, size, s), "cudaMemsetAsync (zeroing a segment)",
            res, fail_destroy);
  CUDA_CHECK_GOTO(cudaStreamSynchronize(s), "cudaStreamSynchronize (zeroing a segment)",
            res, fail_destroy);
fail_destroy:
  cudaStreamDestroy(s);
out:
  return res;
}

/* The calling thread's device, with its primary context made current
 * (driver calls need one). */
static ncclResult_t current_device(int *dev_out) {
  ncclResult_t res = ncclSuccess;
  int dev = 0;
  CUDA_CHECK_GOTO(cudaGetDevice(&dev), "cudaGetDevice", res, out);
  CUDA_CHECK_GOTO(cudaSetDevice(dev), "cudaSetDevice", res, out);
  *dev_out = dev;
out:
  return res;
}

/* ---- segment ops ---------------------------------------------------------- */

static ncclResult_t p2p_create(size_t size, const char *tag, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  p2p_name_t nm;
  p2p_mem_t *m;
  int dev;
  CHECK(current_device(&dev));
  BRD_CALLOC(m, 1, "a P2P segment record");
  memset(&nm, 0, sizeof(nm));
  if (vmm_supported(dev)) {
    int fd = -1;
    CHECK_GOTO(vmm_alloc(dev, size, 0, m), res, fail_free);
    CU_GOTO(drv.mem_export(&fd, m->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle", res, fail_unmap);
    res = brd_p2p_fdsrv_create(fd, &m->srv);
    close(fd);
    if (res != ncclSuccess) goto fail_unmap;
    nm.serial = brd_p2p_fdsrv_serial(m->srv);
    nm.u.vmm.alloc_size = m->alloc_size;
  } else {
    cudaIpcMemHandle_t ih;
    m->mode = MODE_IPC;
    m->dev = dev;
    m->alloc_size = size;
    CUDA_CHECK_GOTO(cudaMalloc(&m->ptr, size), "cudaMalloc for a P2P segment", res, fail_free);
    CUDA_CHECK_GOTO(cudaIpcGetMemHandle(&ih, m->ptr), "cudaIpcGetMemHandle", res, fail_unmap);
    memcpy(nm.u.ipc, &ih, sizeof(nm.u.ipc));
  }
  CHECK_GOTO(zero_device(m->ptr, m->alloc_size), res, fail_stop);
  m->size = size;
  m->refs = 1;
  nm.mode = (uint16_t)m->mode;
  nm.dev = (int16_t)dev;

  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = size;
  seg_out->owner = 1;
  seg_out->handle.transport = BRD_TRANSPORT_P2P;
  seg_out->handle.pid = (uint32_t)getpid();
  seg_out->handle.size = size;
  seg_out->handle.local_addr = (uint64_t)(uintptr_t)m->ptr;
  memcpy(seg_out->handle.name, &nm, sizeof(nm));
  mem_insert(m);
  INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: %zu bytes for %s on device %d "
       "through %s", size, tag != NULL ? tag : "a segment", dev,
       m->mode == MODE_VMM ? "cuMem" : "CUDA IPC");
  return ncclSuccess;

fail_stop:
  brd_p2p_fdsrv_destroy(m->srv);
fail_unmap:
  mem_unmap(m);
fail_free:
  free(m);
  return res;
}

/* Lets the current device (dev) reach peer_dev's cudaMalloc memory; `fix`
 * ends the WARN when it cannot. */
static ncclResult_t peer_access(int dev, int peer_dev, const char *fix) {
  cudaError_t e = cudaDeviceEnablePeerAccess(peer_dev, 0);
  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
    WARN("CUDA: cudaDeviceEnablePeerAccess from device %d to device %d failed: %s; %s",
         dev, peer_dev, cudaGetErrorString(e), fix);
    (void)cudaGetLastError();
    return ncclUnhandledCudaError;
  }
  (void)cudaGetLastError();
  return ncclSuccess;
}

/* A segment of this process: alias the creator's memory, after granting
 * the importing device access to it. */
static ncclResult_t import_local(const brd_seg_handle_t *h, int dev, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  void *ptr = (void *)(uintptr_t)h->local_addr;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(ptr);
  if (m == NULL || m->memalloc) {
    WARN("P2P: segment %p of this process is gone; its creator closed it before "
         "every rank imported it", ptr);
    res = ncclInternalError;
    goto out;
  }
  if (dev != m->dev) {
    if (m->mode == MODE_VMM) {
      CHECK_GOTO(vmm_grant((CUdeviceptr)(uintptr_t)m->ptr, m->alloc_size, dev, 0), res,
                 out);
    } else {
      CHECK_GOTO(peer_access(dev, m->dev, "set NCCL_P2P_DISABLE=1 to use host memory instead"),
                 res, out);
    }
  }
  m->refs++;
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = (size_t)h->size;
  seg_out->handle = *h;
out:
  pthread_mutex_unlock(&mems_lock);
  return res;
}

/* Another process's cuMem segment: fetch its descriptor, import, map. */
static ncclResult_t import_vmm(const brd_seg_handle_t *h, const p2p_name_t *nm, int dev,
                               p2p_mem_t *m) {
  ncclResult_t res = ncclSuccess;
  CUdeviceptr va = 0;
  size_t alloc = (size_t)nm->u.vmm.alloc_size;
  int fd = -1;
  /* The creator had cuMem; this process must too. */
  if (drv_get() != ncclSuccess) return brd_p2p_driver_check();
  double timeout = (double)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  CHECK(brd_p2p_fd_fetch(h->pid, nm->serial, timeout > 0 ? timeout : 300.0, NULL, &fd));
  CU_GOTO(drv.mem_import(&m->cu, (void *)(uintptr_t)fd,
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle", res, fail_close);
  close(fd);
  fd = -1;
  CU_GOTO(drv.mem_address_reserve(&va, alloc, 0, 0, 0), "cuMemAddressReserve", res,
          fail_release);
  CU_GOTO(drv.mem_map(va, alloc, 0, m->cu, 0), "cuMemMap (peer memory)", res,
          fail_free_va);
  CHECK_GOTO(vmm_grant(va, alloc, dev, 0), res, fail_unmap);
  m->ptr = (void *)(uintptr_t)va;
  m->alloc_size = alloc;
  m->mode = MODE_VMM;
  return ncclSuccess;

fail_unmap:
  drv.mem_unmap(va, alloc);
fail_free_va:
  drv.mem_address_free(va, alloc);
fail_release:
  drv.mem_release(m->cu);
fail_close:
  if (fd >= 0) close(fd);
  return res;
}

/* Another process's memory this process has mapped already (CUDA IPC
 * refuses to open a handle twice, and one mapping is enough): 1 with a
 * new reference in seg_out, else 0. */
static int import_again(const brd_seg_handle_t *h, int dev, brd_seg_t *seg_out) {
  int found = 0;
  pthread_mutex_lock(&mems_lock);
  for (p2p_mem_t *m = mems; m != NULL; m = m->next) {
    if (!m->imported || m->dev != dev || memcmp(&m->key, h, sizeof(*h)) != 0) continue;
    m->refs++;
    memset(seg_out, 0, sizeof(*seg_out));
    seg_out->ptr = m->ptr;
    seg_out->size = m->size;
    seg_out->handle = *h;
    found = 1;
    break;
  }
  pthread_mutex_unlock(&mems_lock);
  return found;
}

static ncclResult_t p2p_import(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  p2p_name_t nm;
  p2p_mem_t *m;
  int dev;
  if (h->transport != BRD_TRANSPORT_P2P) {
    WARN("P2P: import of a segment handle made by transport %u", h->transport);
    return ncclInternalError;
  }
  memcpy(&nm, h->name, sizeof(nm));
  if (nm.mode != MODE_VMM && nm.mode != MODE_IPC) {
    WARN("P2P: segment handle of pid %u has unknown mode %u (a different "
         "library version on that rank?)", h->pid, nm.mode);
    return ncclInternalError;
  }
  CHECK(current_device(&dev));
  if (h->pid == (uint32_t)getpid()) return import_local(h, dev, seg_out);
  if (import_again(h, dev, seg_out)) return ncclSuccess;

  BRD_CALLOC(m, 1, "a P2P import record");
  m->imported = 1;
  m->dev = dev;
  m->size = (size_t)h->size;
  if (nm.mode == MODE_VMM) {
    CHECK_GOTO(import_vmm(h, &nm, dev, m), res, fail_free);
  } else {
    cudaIpcMemHandle_t ih;
    memcpy(&ih, nm.u.ipc, sizeof(ih));
    m->mode = MODE_IPC;
    m->alloc_size = m->size;
    CUDA_CHECK_GOTO(cudaIpcOpenMemHandle(&m->ptr, ih, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle (peer memory)", res, fail_free);
  }
  m->refs = 1;
  m->key = *h;
  mem_insert(m);
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = m->size;
  seg_out->handle = *h;
  return ncclSuccess;

fail_free:
  free(m);
  return res;
}

static void p2p_seal(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL || !seg->owner) return;
  brd_p2p_fdsrv_t *srv = NULL;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(seg->ptr);
  if (m != NULL) {
    srv = m->srv;
    m->srv = NULL;
  }
  pthread_mutex_unlock(&mems_lock);
  brd_p2p_fdsrv_destroy(srv);
}

static void p2p_close(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL) return;
  p2p_mem_t *gone = NULL;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(seg->ptr);
  if (m != NULL && !m->memalloc && --m->refs == 0) {
    mem_unlink_locked(m);
    gone = m;
  }
  pthread_mutex_unlock(&mems_lock);
  if (gone != NULL) {
    brd_p2p_fdsrv_destroy(gone->srv);
    mem_unmap(gone);
    free(gone);
  }
  memset(seg, 0, sizeof(*seg));
}

/* ---- ncclMemAlloc --------------------------------------------------------- */

/* See transport.h. */
ncclResult_t brd_p2p_mem_alloc(size_t size, void **ptr_out) {
  ncclResult_t res = ncclSuccess;
  p2p_mem_t *m;
  int dev;
  CHECK(current_device(&dev));
  if (!vmm_supported(dev)) {
    void *p = NULL;
    CUDA_CHECK_GOTO(cudaMalloc(&p, size), "ncclMemAlloc : cudaMalloc", res, out);
    *ptr_out = p;
    return ncclSuccess;
  }
  BRD_CALLOC(m, 1, "an ncclMemAlloc record");
  CHECK_GOTO(vmm_alloc(dev, size, 1, m), res, fail_free);
  m->size = size;
  m->memalloc = 1;
  m->refs = 1;
  mem_insert(m);
  INFO(BRD_SUBSYS_ALLOC, "ncclMemAlloc: %zu bytes (%zu mapped) at %p on device %d "
       "through cuMem", size, m->alloc_size, m->ptr, dev);
  *ptr_out = m->ptr;
  return ncclSuccess;

fail_free:
  free(m);
out:
  return res;
}

/* See transport.h. */
ncclResult_t brd_p2p_mem_free(void *ptr) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(ptr);
  int segment = m != NULL && !m->memalloc;
  if (m != NULL && m->memalloc) mem_unlink_locked(m);
  pthread_mutex_unlock(&mems_lock);
  if (segment) {
    WARN("ncclMemFree : %p is communicator channel memory, not an ncclMemAlloc "
         "block", ptr);
    return ncclInvalidArgument;
  }
  if (m != NULL) {
    mem_unmap(m);
    free(m);
    return ncclSuccess;
  }
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("ncclMemFree : cudaFree(%p) failed: %s; was it allocated by ncclMemAlloc?",
         ptr, cudaGetErrorString(e));
    res = ncclUnhandledCudaError;
  }
  return res;
}


/* ---- registered user memory ------------------------------------------------ */

typedef CUresult (*addr_range_fn_t)(CUdeviceptr *, size_t *, CUdeviceptr);
static addr_range_fn_t addr_range; /* cuMemGetAddressRange, or NULL */
static pthread_once_t addr_once = PTHREAD_ONCE_INIT;

/* cuMemGetAddressRange on its own: CUDA IPC needs an allocation's base even
 * where the rest of the cuMem table is missing. */
static void addr_load(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, DRV_ABI_VERSION,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    fn = NULL;
  }
  memcpy(&addr_range, &fn, sizeof(fn));
}

/* See transport.h. */
ncclResult_t brd_p2p_export(const void *ptr, size_t size, brd_p2p_export_t *ex_out,
                            char *why, size_t n) {
  ncclResult_t res = ncclSuccess;
  struct cudaPointerAttributes attr;
  p2p_name_t nm;
  memset(ex_out, 0, sizeof(*ex_out));
  memset(&nm, 0, sizeof(nm));
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess ||
      attr.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    say(why, n, "%p is not device memory (host, managed or unknown memory cannot be "
        "mapped by peers); allocate it with ncclMemAlloc", ptr);
    return ncclInvalidArgument;
  }
  nm.dev = (int16_t)attr.device;
  uint64_t base = 0, span = 0;
  int fd = -1;
  pthread_mutex_lock(&mems_lock);
  for (p2p_mem_t *m = mems; m != NULL; m = m->next) {
    if (!m->memalloc || (const char *)ptr < (char *)m->ptr ||
        (const char *)ptr >= (char *)m->ptr + m->alloc_size)
      continue;
    base = (uint64_t)(uintptr_t)m->ptr;
    span = m->alloc_size;
    if (m->mode == MODE_VMM &&
        drv.mem_export(&fd, m->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
            CUDA_SUCCESS)
      fd = -2;
    break;
  }
  pthread_mutex_unlock(&mems_lock);
  if (fd == -2) {
    say(why, n, "cuMemExportToShareableHandle refused the ncclMemAlloc block at %p",
        (void *)(uintptr_t)base);
    return ncclInvalidArgument;
  }
  if (fd >= 0) {
    res = brd_p2p_fdsrv_create(fd, &ex_out->srv);
    close(fd);
    if (res != ncclSuccess) return res;
    nm.mode = MODE_VMM;
    nm.serial = brd_p2p_fdsrv_serial(ex_out->srv);
    nm.u.vmm.alloc_size = span;
  } else {
    cudaIpcMemHandle_t ih;
    CUdeviceptr b = 0;
    size_t sz = 0;
    pthread_once(&addr_once, addr_load);
    if (base == 0) {
      if (addr_range == NULL ||
          addr_range(&b, &sz, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) {
        say(why, n, "the allocation holding %p is unknown to the CUDA driver "
            "(cuMemGetAddressRange)", ptr);
        return ncclInvalidArgument;
      }
      base = (uint64_t)b;
      span = sz;
    }
    if (cudaIpcGetMemHandle(&ih, (void *)(uintptr_t)base) != cudaSuccess) {
      (void)cudaGetLastError();
      say(why, n, "CUDA IPC cannot export the allocation at %p (memory from cuMem "
          "without ncclMemAlloc, or a driver without IPC)", (void *)(uintptr_t)base);
      return ncclInvalidArgument;
    }
    nm.mode = MODE_IPC;
    memcpy(nm.u.ipc, &ih, sizeof(nm.u.ipc));
  }
  if ((uint64_t)(uintptr_t)ptr + size > base + span) {
    brd_p2p_fdsrv_destroy(ex_out->srv);
    ex_out->srv = NULL;
    say(why, n, "[%p, +%zu) runs past the end of its allocation", ptr, size);
    return ncclInvalidArgument;
  }
  ex_out->handle.transport = BRD_TRANSPORT_P2P;
  ex_out->handle.pid = (uint32_t)getpid();
  ex_out->handle.size = span;
  ex_out->handle.local_addr = base;
  memcpy(ex_out->handle.name, &nm, sizeof(nm));
  ex_out->offset = (uint64_t)(uintptr_t)ptr - base;
  return ncclSuccess;
}

/* See transport.h. */
void brd_p2p_export_seal(brd_p2p_export_t *ex) {
  if (ex == NULL) return;
  brd_p2p_fdsrv_destroy(ex->srv);
  ex->srv = NULL;
}

/* See transport.h. */
ncclResult_t brd_p2p_import_user(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  p2p_name_t nm;
  int dev;
  if (h->transport != BRD_TRANSPORT_P2P || h->pid != (uint32_t)getpid())
    return p2p_import(h, seg_out);
  /* This process's own memory: the exporter's address, reachable once the
   * importing device has access (ncclMemAlloc blocks grant every peer). */
  memcpy(&nm, h->name, sizeof(nm));
  CHECK(current_device(&dev));
  if (dev != nm.dev && nm.mode == MODE_IPC)
    CHECK(peer_access(dev, nm.dev,
                      "set NCCL_LOCAL_REGISTER=0 to stop using registered buffers directly"));
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = (void *)(uintptr_t)h->local_addr;
  seg_out->size = (size_t)h->size;
  seg_out->handle = *h;
  return ncclSuccess;
}

#else /* !BRAID_CUDA: the ops exist so the table links; each one refuses. */

static ncclResult_t no_cuda(const char *what) {
  WARN("P2P: %s needs CUDA, but this library was built with CUDA=0; set "
       "BRAID_DEVICE=host", what);
  return ncclInvalidUsage;
}

static ncclResult_t p2p_create(size_t size, const char *tag, brd_seg_t *seg_out) {
  (void)size;
  (void)tag;
  (void)seg_out;
  return no_cuda("creating a GPU memory segment");
}

static ncclResult_t p2p_import(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  (void)h;
  (void)seg_out;
  return no_cuda("importing a GPU memory segment");
}

static void p2p_seal(brd_seg_t *seg) { (void)seg; }

static void p2p_close(brd_seg_t *seg) {
  if (seg != NULL) memset(seg, 0, sizeof(*seg));
}

/* See transport.h. */
ncclResult_t brd_p2p_driver_check(void) { return no_cuda("the CUDA driver table"); }

/* See transport.h. */
ncclResult_t brd_p2p_mem_alloc(size_t size, void **ptr_out) {
  (void)size;
  (void)ptr_out;
  return no_cuda("device memory (ncclMemAlloc)");
}

/* See transport.h. */
ncclResult_t brd_p2p_mem_free(void *ptr) {
  (void)ptr;
  return no_cuda("device memory (ncclMemFree)");
}

/* See transport.h. */
ncclResult_t brd_p2p_export(const void *ptr, size_t size, brd_p2p_export_t *ex_out,
                            char *why, size_t n) {
  (void)ptr;
  (void)size;
  memset(ex_out, 0, sizeof(*ex_out));
  say(why, n, "this library was built without CUDA (CUDA=0)");
  return ncclInvalidArgument;
}

/* See transport.h. */
void brd_p2p_export_seal(brd_p2p_export_t *ex) { (void)ex; }

/* See transport.h. */
ncclResult_t brd_p2p_import_user(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  (void)h;
  (void)seg_out;
  return no_cuda("importing registered GPU memory");
}
#endif /* BRAID_CUDA */

const brd_transport_ops_t brd_transport_p2p = {
    .name = "P2P",
    .kind = BRD_TRANSPORT_P2P,
    .can_connect = brd_p2p_usable,
    .seg_create = p2p_create,
    .seg_import = p2p_import,
    .seg_seal = p2p_seal,
    .seg_close = p2p_close,
};
