/*
 * Braid IPC: file descriptors and small requests between the processes of
 * one host, over abstract Unix sockets named "braid-ipc-<pid>-<serial>".
 *
 * Two services, each a thread of its own:
 *   descriptor server  hands a duplicate of one descriptor (SCM_RIGHTS) to
 *                      every process of the same user that connects: the
 *                      P2P transport serves cuMem segments with it, core's
 *                      ncclMemAlloc blocks in host mode their memfds.
 *   request service    answers fixed-size requests one connection at a
 *                      time (core's registration service).
 * The abstract namespace leaves no file behind: a name goes away with its
 * socket. Peers are checked to be the same user (SO_PEERCRED).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/time.h"
#include "transport/ipc.h"

/* ---- descriptor passing ------------------------------------------------- */

#define FDSRV_POLL_MS 100 /* how often the server thread checks its stop flag */

struct brd_ipc_fdsrv {
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

void brd_ipc_sockname_format(uint32_t pid, uint32_t serial, char *buf, size_t n) {
  snprintf(buf, n, "braid-ipc-%u-%u", pid, serial);
}

static socklen_t sockaddr_fill(struct sockaddr_un *sa, uint32_t pid, uint32_t serial) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  /* Abstract namespace: a leading NUL, no file to clean up; the name goes
   * away with the socket. */
  brd_ipc_sockname_format(pid, serial, sa->sun_path + 1, sizeof(sa->sun_path) - 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                     strlen(sa->sun_path + 1));
}


/* One descriptor-passing message: a uint32_t payload (the server's serial)
 * and room for one descriptor. The message points into the struct itself,
 * so it must not be copied once initialised. */
typedef struct {
  uint32_t payload;
  struct iovec iov;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg;
} fd_msg_t;

static void fd_msg_init(fd_msg_t *m, uint32_t payload) {
  memset(m, 0, sizeof(*m));
  m->payload = payload;
  m->iov.iov_base = &m->payload;
  m->iov.iov_len = sizeof(m->payload);
  m->msg.msg_iov = &m->iov;
  m->msg.msg_iovlen = 1;
  m->msg.msg_control = m->ctl.buf;
  m->msg.msg_controllen = sizeof(m->ctl.buf);
}

/* Sends the serial as payload and the descriptor as ancillary data. */
static void fdsrv_reply(brd_ipc_fdsrv_t *s, int c) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      cred.uid != getuid()) {
    INFO(BRD_SUBSYS_P2P, "IPC: refused a descriptor request on serial %u from "
         "another user", s->serial);
    return;
  }
  /* A client that stops reading must not hold the server thread. */
  struct timeval tv = {1, 0};
  (void)setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

  fd_msg_t m;
  fd_msg_init(&m, s->serial);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m.msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &s->fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(c, &m.msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(m.payload))
    INFO(BRD_SUBSYS_P2P, "IPC: sending descriptor %u failed: %s", s->serial,
         n < 0 ? strerror(errno) : "short write");
}

/* The server thread: accept, reply, close, until told to stop. */
static void *fdsrv_main(void *arg) {
  brd_ipc_fdsrv_t *s = arg;
  while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
    struct pollfd p = {.fd = s->listen_fd, .events = POLLIN, .revents = 0};
    int r = poll(&p, 1, FDSRV_POLL_MS);
    if (r < 0 && errno != EINTR) {
      INFO(BRD_SUBSYS_P2P, "IPC: descriptor server %u stops: poll failed: %s",
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
    WARN("IPC: socket(AF_UNIX) for %s failed: %s", what, strerror(errno));
    return ncclSystemError;
  }
  pthread_once(&serial_once, serial_seed_init);
  for (int tries = 0;; tries++) {
    struct sockaddr_un sa;
    serial = serial_seed + atomic_fetch_add(&serial_next, 1u);
    socklen_t len = sockaddr_fill(&sa, (uint32_t)getpid(), serial);
    if (bind(s, (struct sockaddr *)&sa, len) == 0) break;
    if (errno != EADDRINUSE || tries >= 16) {
      WARN("IPC: binding the abstract Unix socket @%s for %s failed: %s", sa.sun_path + 1,
           what, strerror(errno));
      res = ncclSystemError;
      goto fail_close;
    }
  }
  SYS_CHECK_GOTO(listen(s, 128), "listen on an IPC Unix socket", res, fail_close);
  *fd_out = s;
  *serial_out = serial;
  return ncclSuccess;
fail_close:
  close(s);
  return res;
}

/* See ipc.h. */
ncclResult_t brd_ipc_fdsrv_create(int fd, brd_ipc_fdsrv_t **srv_out) {
  ncclResult_t res = ncclSuccess;
  brd_ipc_fdsrv_t *s;
  BRD_CALLOC(s, 1, "a descriptor server");
  s->listen_fd = -1;
  atomic_init(&s->stop, 0);
  s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (s->fd < 0) {
    WARN("IPC: duplicating descriptor %d to share it failed: %s", fd, strerror(errno));
    res = ncclSystemError;
    goto fail_free;
  }
  CHECK_GOTO(unix_listen("a descriptor server", &s->listen_fd, &s->serial), res, fail_close);
  PTHREAD_CHECK_GOTO(pthread_create(&s->thread, NULL, fdsrv_main, s),
                     "pthread_create for the descriptor server", res, fail_close);
  *srv_out = s;
  return ncclSuccess;

fail_close:
  if (s->listen_fd >= 0) close(s->listen_fd);
  close(s->fd);
fail_free:
  free(s);
  return res;
}

/* See ipc.h. */
uint32_t brd_ipc_fdsrv_serial(const brd_ipc_fdsrv_t *srv) { return srv->serial; }

/* See ipc.h. */
void brd_ipc_fdsrv_destroy(brd_ipc_fdsrv_t *srv) {
  if (srv == NULL) return;
  atomic_store_explicit(&srv->stop, 1, memory_order_release);
  pthread_join(srv->thread, NULL);
  close(srv->listen_fd);
  close(srv->fd);
  free(srv);
}

/* Receives the reply of a server: the serial, and one descriptor. */
static ncclResult_t fd_recv(int s, uint32_t pid, uint32_t serial, int *fd_out) {
  fd_msg_t m;
  fd_msg_init(&m, 0);
  ssize_t n;
  do {
    n = recvmsg(s, &m.msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    WARN("IPC: receiving a memory descriptor from pid %u failed: %s", pid,
         strerror(errno));
    return ncclSystemError;
  }
  int fd = -1;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m.msg);
  if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
      cm->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  if (n != (ssize_t)sizeof(m.payload) || m.payload != serial || fd < 0 ||
      (m.msg.msg_flags & MSG_CTRUNC) != 0) {
    if (fd >= 0) close(fd);
    WARN("IPC: pid %u closed the descriptor connection for serial %u without a "
         "valid reply (%zd bytes, serial %u, %s); every rank of a host must run "
         "as the same user", pid, serial, n, m.payload,
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
    WARN("IPC: socket(AF_UNIX) failed: %s", strerror(errno));
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
      WARN("IPC: connecting to @%s (pid %u) for %s failed: %s; the peer process may "
           "have exited or already sealed what it served", sa.sun_path + 1, pid, what,
           strerror(err));
      res = err == ECONNREFUSED || err == ENOENT ? ncclRemoteError : ncclSystemError;
    } else if (abort_flag != NULL && atomic_load(abort_flag)) {
      res = ncclSystemError;
    } else if (brd_time_now_ns() >= deadline) {
      WARN("IPC: the server @%s of pid %u for %s stayed busy past its deadline; "
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
      WARN("IPC: no answer from pid %u for %s within %.1f s; the peer process is "
           "alive but does not answer (stuck, or it sealed what it served too early); "
           "raise BRAID_BOOTSTRAP_TIMEOUT if it is only slow", pid, what, timeout_s);
      return ncclRemoteError;
    }
    int ms = left / 1000000 < FDSRV_POLL_MS ? (int)(left / 1000000) + 1 : FDSRV_POLL_MS;
    struct pollfd p = {.fd = s, .events = POLLIN, .revents = 0};
    int r = poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) {
      WARN("IPC: poll on the connection to pid %u for %s failed: %s", pid, what,
           strerror(errno));
      return ncclSystemError;
    }
    if (r > 0) return ncclSuccess;
  }
}

/* See ipc.h. */
ncclResult_t brd_ipc_fd_fetch(uint32_t pid, uint32_t serial, double timeout_s,
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

struct brd_ipc_svc {
  int listen_fd;            /* owned */
  int wake[2];              /* owned: a pipe; a byte on it stops the thread */
  uint32_t serial;
  size_t req_len, rep_len;
  brd_ipc_svc_fn_t fn;
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
static void svc_serve(brd_ipc_svc_t *v, int c) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid()) {
    INFO(BRD_SUBSYS_P2P, "IPC: refused a request on service %u from another user",
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
      INFO(BRD_SUBSYS_P2P, "IPC: service %u could not send its reply: %s", v->serial,
           strerror(errno));
  }
  free(req);
  free(rep);
}

static void *svc_main(void *arg) {
  brd_ipc_svc_t *v = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = v->listen_fd, .events = POLLIN, .revents = 0},
                          {.fd = v->wake[0], .events = POLLIN, .revents = 0}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno != EINTR) {
      INFO(BRD_SUBSYS_P2P, "IPC: service %u stops: poll failed: %s", v->serial,
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

/* See ipc.h. */
ncclResult_t brd_ipc_svc_create(size_t req_len, size_t rep_len, brd_ipc_svc_fn_t fn,
                                void *ctx, brd_ipc_svc_t **svc_out) {
  ncclResult_t res = ncclSuccess;
  brd_ipc_svc_t *v;
  BRD_CALLOC(v, 1, "a request service");
  v->req_len = req_len;
  v->rep_len = rep_len;
  v->fn = fn;
  v->ctx = ctx;
  v->listen_fd = -1;
  SYS_CHECK_GOTO(pipe2(v->wake, O_CLOEXEC), "pipe2 for the request service", res,
                 fail_free);
  CHECK_GOTO(unix_listen("a request service", &v->listen_fd, &v->serial), res, fail_pipe);
  PTHREAD_CHECK_GOTO(pthread_create(&v->thread, NULL, svc_main, v),
                     "pthread_create for the request service", res, fail_listen);
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

/* See ipc.h. */
uint32_t brd_ipc_svc_serial(const brd_ipc_svc_t *svc) { return svc->serial; }

/* See ipc.h. */
void brd_ipc_svc_destroy(brd_ipc_svc_t *svc) {
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

/* See ipc.h. */
ncclResult_t brd_ipc_svc_call(uint32_t pid, uint32_t serial, const void *req,
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
    WARN("IPC: sending %s to pid %u failed: %s", what, pid, strerror(errno));
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
      WARN("IPC: pid %u closed the connection for %s without a full reply (%s); it "
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

