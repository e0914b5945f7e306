/*
 * Braid bootstrap: the rendezvous root, the rank ring, and tagged
 * point-to-point messages between ranks (see bootstrap.h).
 *
 * Wire formats are fixed-size structs; every rank runs the same library
 * build, so host byte order and layout are shared. A connection to a rank's
 * listener starts with conn_hdr (communicator magic, sender rank, tag);
 * connections with another magic (strays, liveness probes) are dropped.
 * The two ring connections carry frames (ring_hdr): allgather slices, and
 * the leave frame a rank sends before it goes (bootstrap_wire.h).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "base/param.h"
#include "core/bootstrap_wire.h"

/* ---------------------------------------------------------------------- */
/* Rank side.                                                              */

/* One socket operation's limit: BRAID_BOOTSTRAP_TIMEOUT from now, a
 * timeout WARNed by the socket layer. */
static brd_sock_ctl_t boot_ctl(struct brd_boot *boot, const char *who) {
  brd_sock_ctl_t c = {
      .deadline_ns = brd_sock_deadline(boot->timeout_s),
      .abort = {boot->abort, atomic_load_explicit(&boot->extra_abort, memory_order_acquire)},
      .who = who,
      .limit_s = boot->timeout_s,
      .limit_name = "BRAID_BOOTSTRAP_TIMEOUT",
      .caller_reports = 0,
  };
  return c;
}

static void peer_who(int peer, char *buf, size_t len) {
  snprintf(buf, len, "rank %d", peer);
}

/* ---------------------------------------------------------------------- */
/* Leaving with a reason (bootstrap_wire.h: RING_LEAVE).                   */

/* This process's live bootstraps, for the exit hook (boots_exit). */
static pthread_mutex_t boots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct brd_boot *boots;
static pthread_once_t boots_once = PTHREAD_ONCE_INIT;

static void boots_prefork(void) { pthread_mutex_lock(&boots_lock); }
static void boots_postfork_parent(void) { pthread_mutex_unlock(&boots_lock); }
static void boots_postfork_child(void) {
  boots = NULL; /* the parent's, not the child's to speak for */
  pthread_mutex_unlock(&boots_lock);
}
static void boots_init_once(void) {
  (void)pthread_atfork(boots_prefork, boots_postfork_parent, boots_postfork_child);
}

static void boots_add(struct brd_boot *boot) {
  pthread_once(&boots_once, boots_init_once);
  pthread_mutex_lock(&boots_lock);
  boot->live_next = boots;
  boots = boot;
  pthread_mutex_unlock(&boots_lock);
}

static void boots_del(struct brd_boot *boot) {
  pthread_mutex_lock(&boots_lock);
  for (struct brd_boot **pp = &boots; *pp != NULL; pp = &(*pp)->live_next) {
    if (*pp == boot) {
      *pp = boot->live_next;
      break;
    }
  }
  pthread_mutex_unlock(&boots_lock);
}

static int flag_set(_Atomic int *f) {
  return f != NULL && atomic_load_explicit(f, memory_order_acquire) != 0;
}

/* See bootstrap.h. */
void brd_boot_note_failure(struct brd_boot *boot, const char *why) {
  int expected = 0;
  if (boot == NULL || why == NULL || why[0] == '\0') return;
  if (!atomic_compare_exchange_strong(&boot->why_state, &expected, 1)) return;
  snprintf(boot->why, sizeof(boot->why), "%s", why);
  atomic_store_explicit(&boot->why_state, 2, memory_order_release);
}

/* Records that an operation on boot failed on its own (not an abort, not
 * a bad argument): destroying boot then tells the ring why, which is the
 * WARN the failing operation gave on this thread. Returns res. */
static ncclResult_t boot_note(struct brd_boot *boot, ncclResult_t res) {
  if (res != ncclSuccess && res != ncclInvalidArgument && !flag_set(boot->abort) &&
      !flag_set(atomic_load_explicit(&boot->extra_abort, memory_order_acquire))) {
    boot->failed = 1;
    brd_boot_note_failure(boot, brd_log_thread_last_error());
  }
  return res;
}

/* Why this rank leaves, for its peers: the failure noted on boot, else the
 * calling thread's last WARN (the one that aborts or exits; never another
 * thread's, which may be another communicator's), or what it did. */
static void leave_why(const struct brd_boot *boot, int at_exit, char *buf, size_t len) {
  const char *last = atomic_load_explicit(&boot->why_state, memory_order_acquire) == 2
                         ? boot->why
                         : brd_log_thread_last_error();
  if (at_exit && last[0] != '\0') {
    /* Cut to fit, as the frame is. */
    if (snprintf(buf, len, "its process exited with the communicator open, after: %s", last) <
        0)
      buf[0] = '\0';
  }
  else if (at_exit)
    snprintf(buf, len, "its process exited with the communicator open");
  else if (last[0] != '\0')
    snprintf(buf, len, "%s", last);
  else
    snprintf(buf, len, "it aborted the communicator (it reported no error)");
}

/* Puts a leave frame saying why on each ring connection whose outgoing
 * stream is whole, ends the stream (FIN), and discards what is queued to
 * be read, so that the close that follows does not reset the connection
 * (a reset could drop the frame on its way). Never waits: a frame that
 * does not fit the socket's buffer goes out in part or not at all. */
static void boot_leave(struct brd_boot *boot, const char *why) {
  char frame[sizeof(struct ring_hdr) + LEAVE_TEXT_MAX + sizeof(struct leave_tail)];
  size_t n = strnlen(why, LEAVE_TEXT_MAX);
  struct ring_hdr h = {RING_LEAVE, (uint32_t)n};
  struct leave_tail t = {(uint32_t)n, 0, LEAVE_MAGIC};
  struct brd_sock *socks[2] = {&boot->ring_next, &boot->ring_prev};

  boot->left = 1;
  memcpy(frame, &h, sizeof(h));
  memcpy(frame + sizeof(h), why, n);
  memcpy(frame + sizeof(h) + n, &t, sizeof(t));
  for (int i = 0; i < 2; i++) {
    int fd = socks[i]->fd;
    if (fd < 0) continue;
    if (!boot->torn[i])
      (void)!send(fd, frame, sizeof(h) + n + sizeof(t), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)shutdown(fd, SHUT_WR);
    for (int k = 0; k < 64; k++) {
      char sink[4096];
      if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
    }
  }
}

/* At exit (or when the library is unloaded), a communicator still open
 * and idle tells its ring neighbours that its process is going, with the
 * last error. A process killed by a signal never gets here: its peers see
 * the connection close and say the rank is gone. */
__attribute__((destructor)) static void boots_exit(void) {
  char why[LEAVE_TEXT_MAX + 1];
  if (pthread_mutex_trylock(&boots_lock) != 0) return;
  for (struct brd_boot *b = boots; b != NULL; b = b->live_next) {
    if (b->pid != (int)getpid() || b->left || b->nranks < 2 ||
        atomic_load_explicit(&b->busy, memory_order_acquire) != 0)
      continue;
    leave_why(b, 1, why, sizeof(why));
    boot_leave(b, why);
  }
  pthread_mutex_unlock(&boots_lock);
}

/* The text of the leave frame that ends what fd has queued, into why:
 * 1, or 0 when the stream does not end in one (yet). Peeks, so it never
 * consumes nor blocks; any thread. */
static int leave_peek(int fd, char *why, size_t len) {
  struct ring_hdr h;
  struct leave_tail t;
  char *b;
  ssize_t n;
  int found = 0;
  if (fd < 0 || len == 0) return 0;
  b = malloc(LEAVE_PEEK_MAX);
  if (b == NULL) return 0;
  n = recv(fd, b, LEAVE_PEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
  /* A full buffer may not hold the stream's end. */
  if (n >= (ssize_t)(sizeof(h) + sizeof(t)) && n < LEAVE_PEEK_MAX) {
    memcpy(&t, b + n - sizeof(t), sizeof(t));
    if (t.magic == LEAVE_MAGIC && t.len <= LEAVE_TEXT_MAX &&
        (size_t)n >= sizeof(h) + t.len + sizeof(t)) {
      const char *text = b + n - sizeof(t) - t.len;
      memcpy(&h, text - sizeof(h), sizeof(h));
      if (h.kind == RING_LEAVE && h.len == t.len) {
        size_t k = t.len < len - 1 ? t.len : len - 1;
        memcpy(why, text, k);
        why[k] = '\0';
        found = 1;
      }
    }
  }
  free(b);
  return found;
}

/* Why peer left, when it is a ring neighbour that said so: 1 and why
 * filled, else 0. Never blocks. */
static int peer_left(const struct brd_boot *boot, int peer, char *why, size_t len) {
  int n = boot->nranks;
  if (n < 2) return 0;
  if (peer == (boot->rank + 1) % n && leave_peek(boot->ring_next.fd, why, len)) return 1;
  if (peer == (boot->rank - 1 + n) % n && leave_peek(boot->ring_prev.fd, why, len)) return 1;
  return 0;
}

/* After an operation with peer failed with res: when peer is a ring
 * neighbour that left with a reason, WARNs it (the error's cause, so the
 * last error says it). Returns res. */
static ncclResult_t note_left(struct brd_boot *boot, int peer, const brd_sock_ctl_t *ctl,
                              ncclResult_t res) {
  char why[LEAVE_TEXT_MAX + 1], line[BRD_SOCK_ADDR_STRLEN];
  if (res == ncclRemoteError && !brd_sock_aborted(ctl) && peer_left(boot, peer, why, sizeof(why)))
    WARN("bootstrap: rank %d: rank %d (at %s) left: %s", boot->rank, peer,
         brd_sock_addr_str(&boot->peer_addrs[peer], line), why);
  return res;
}

/* A ring frame from peer whose first `have` bytes are in rx (room for at
 * least a header): when it is, or the bytes queued on sock begin, a leave
 * frame, reads its text (already on its way: waits until `until` at most,
 * reading what is there once even after it), WARNs "rank A left: why" and
 * returns 1; else 0. */
static int ring_leave_read(struct brd_boot *boot, struct brd_sock *sock, int peer,
                           char *rx, size_t have, int64_t until) {
  char why[LEAVE_TEXT_MAX + 1], line[BRD_SOCK_ADDR_STRLEN];
  struct ring_hdr h;
  size_t want, got;
  int closed = 0;
  while (have < sizeof(h) && !closed) {
    if (brd_sock_try_recv(sock, rx, sizeof(h), &have, &closed) != ncclSuccess) return 0;
    if (have < sizeof(h) && (closed || brd_time_now_ns() >= until)) return 0;
    if (have < sizeof(h)) (void)brd_sock_wait_readable(sock->fd, SLICE_MS);
  }
  if (have < sizeof(h)) return 0;
  memcpy(&h, rx, sizeof(h));
  if (h.kind != RING_LEAVE) return 0;
  want = h.len < LEAVE_TEXT_MAX ? h.len : LEAVE_TEXT_MAX;
  got = have - sizeof(h) < want ? have - sizeof(h) : want;
  memcpy(why, rx + sizeof(h), got);
  while (got < want && !closed) {
    if (brd_sock_try_recv(sock, why, want, &got, &closed) != ncclSuccess) break;
    if (got == want || closed || brd_time_now_ns() >= until) break;
    (void)brd_sock_wait_readable(sock->fd, SLICE_MS);
  }
  why[got] = '\0';
  WARN("bootstrap: rank %d: rank %d (at %s) left: %s%s", boot->rank, peer,
       brd_sock_addr_str(&boot->peer_addrs[peer], line), why,
       got < want ? " [cut off]" : "");
  return 1;
}

/* See bootstrap.h. */
void brd_boot_link_abort(struct brd_boot *boot, _Atomic int *extra) {
  atomic_store_explicit(&boot->extra_abort, extra, memory_order_release);
}

/* See bootstrap.h. */
int brd_boot_busy(const struct brd_boot *boot) {
  return atomic_load_explicit(&boot->busy, memory_order_acquire);
}

/* See bootstrap.h. */
uint64_t brd_boot_magic(const struct brd_boot *boot) { return boot->magic; }

/* See bootstrap.h. */
int brd_boot_ring_left(const struct brd_boot *boot, char *why, size_t len) {
  struct pollfd p[2] = {{boot->ring_prev.fd, POLLRDHUP, 0}, {boot->ring_next.fd, POLLRDHUP, 0}};
  int n = boot->nranks, side;
  if (why != NULL && len > 0) why[0] = '\0';
  if (n < 2 || p[0].fd < 0 || p[1].fd < 0) return -1;
  if (poll(p, 2, 0) <= 0) return -1;
  if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) side = 0;
  else if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) side = 1;
  else return -1;
  if (why != NULL) (void)leave_peek(p[side].fd, why, len);
  return side == 0 ? (boot->rank - 1 + n) % n : (boot->rank + 1) % n;
}

/* See bootstrap.h. */
const union brd_sock_addr *brd_boot_peer_addr(const struct brd_boot *boot, int peer) {
  return &boot->peer_addrs[peer];
}

static ncclResult_t boot_alloc(int rank, int nranks, uint64_t magic, _Atomic int *abort,
                               struct brd_boot **boot_out) {
  struct brd_boot *boot;
  union brd_sock_addr local;
  char name[BRD_SOCK_IFNAME_LEN];
  ncclResult_t res;

  BRD_CALLOC(boot, 1, "bootstrap state");
  boot->rank = rank;
  boot->nranks = nranks;
  boot->magic = magic;
  boot->abort = abort;
  boot->timeout_s = brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  if (boot->timeout_s < 1) boot->timeout_s = 1;
  boot->listen.fd = boot->ring_next.fd = boot->ring_prev.fd = -1;
  BRD_CALLOC_GOTO(boot->peer_addrs, (size_t)nranks, "bootstrap addresses", res, fail_free);
  CHECK_GOTO(brd_sock_boot_iface(&local, name), res, fail_free_addrs);
  CHECK_GOTO(brd_sock_listen(&local, &boot->listen), res, fail_free_addrs);
  boot->peer_addrs[rank] = boot->listen.addr;
  boot->pid = (int)getpid();
  boots_add(boot);
  *boot_out = boot;
  return ncclSuccess;
fail_free_addrs:
  free(boot->peer_addrs);
fail_free:
  free(boot);
  return res;
}

/* See bootstrap.h. */
void brd_boot_destroy(struct brd_boot *boot) {
  if (boot == NULL) return;
  boots_del(boot);
  if (!boot->left && boot->nranks > 1 && (flag_set(boot->abort) || boot->failed)) {
    char why[LEAVE_TEXT_MAX + 1];
    leave_why(boot, 0, why, sizeof(why));
    boot_leave(boot, why);
  }
  while (boot->unexpected != NULL) {
    struct unexpected *u = boot->unexpected;
    boot->unexpected = u->next;
    brd_sock_close(&u->sock);
    free(u);
  }
  brd_sock_close(&boot->ring_next);
  brd_sock_close(&boot->ring_prev);
  brd_sock_close(&boot->listen);
  free(boot->peer_addrs);
  free(boot);
}

/* Reads a connection's header. *valid_out = 0 for anything that does not
 * identify itself as one of this communicator's ranks within HDR_WAIT_NS
 * (a liveness probe, a stray): the caller drops it. */
static ncclResult_t read_hdr(struct brd_boot *boot, struct brd_sock *s,
                             const brd_sock_ctl_t *ctl, struct conn_hdr *hdr,
                             int *valid_out) {
  int64_t until = brd_time_now_ns() + HDR_WAIT_NS;
  size_t got = 0;
  *valid_out = 0;
  while (got < sizeof(*hdr)) {
    int closed = 0;
    if (brd_sock_aborted(ctl)) return ncclInternalError;
    if (brd_sock_try_recv(s, hdr, sizeof(*hdr), &got, &closed) != ncclSuccess || closed)
      return ncclSuccess;
    if (got == sizeof(*hdr)) break;
    if (brd_time_now_ns() >= until) return ncclSuccess;
    (void)brd_sock_wait_readable(s->fd, SLICE_MS);
  }
  *valid_out = hdr->magic == boot->magic && hdr->rank >= 0 && hdr->rank < boot->nranks;
  if (!*valid_out) {
    /* A whole header with the wrong magic is someone else talking to this
     * port (liveness probes send nothing and never get here). */
    char line[BRD_SOCK_ADDR_STRLEN];
    WARN("bootstrap: rank %d dropped a connection from %s that did not present "
         "this communicator's magic; it keeps listening", boot->rank,
         brd_sock_addr_str(&s->addr, line));
  }
  return ncclSuccess;
}

/* Waits for the connection from peer with tag, keeping others for later. */
static ncclResult_t accept_from(struct brd_boot *boot, int peer, int tag,
                                const brd_sock_ctl_t *ctl, int probe,
                                struct brd_sock *sock_out) {
  struct unexpected **pp = &boot->unexpected;
  int64_t next_probe = brd_time_now_ns() + PROBE_INTERVAL_NS;
  char line[BRD_SOCK_ADDR_STRLEN];

  for (; *pp != NULL; pp = &(*pp)->next) {
    struct unexpected *u = *pp;
    if (u->peer == peer && u->tag == tag) {
      *pp = u->next;
      *sock_out = u->sock;
      free(u);
      return ncclSuccess;
    }
  }
  for (;;) {
    struct brd_sock s;
    int got = 0;
    if (brd_sock_aborted(ctl)) {
      INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap: rank %d: abort requested while "
           "waiting for rank %d", boot->rank, peer);
      return ncclInternalError;
    }
    if (brd_time_now_ns() >= ctl->deadline_ns) {
      WARN("bootstrap: rank %d timed out after %lld s waiting for %s from rank "
           "%d%s%s; that rank may have died, be stuck, or not have made the "
           "matching call (raise BRAID_BOOTSTRAP_TIMEOUT if it is only slow)",
           boot->rank, (long long)boot->timeout_s,
           tag == TAG_RING ? "the ring connection" : "a message", peer,
           probe ? " at " : "",
           probe ? brd_sock_addr_str(&boot->peer_addrs[peer], line) : "");
      return ncclRemoteError;
    }
    CHECK(brd_sock_accept_try(&boot->listen, &s, &got));
    if (got) {
      struct conn_hdr hdr;
      int valid;
      ncclResult_t res = read_hdr(boot, &s, ctl, &hdr, &valid);
      if (res != ncclSuccess || !valid) {
        brd_sock_close(&s);
        if (res != ncclSuccess) return res;
        continue;
      }
      if (hdr.rank == peer && hdr.tag == tag) {
        *sock_out = s;
        return ncclSuccess;
      } else {
        struct unexpected *u = malloc(sizeof(*u));
        if (u == NULL) {
          brd_sock_close(&s);
          WARN("out of host memory queueing a bootstrap message");
          return ncclSystemError;
        }
        u->peer = hdr.rank;
        u->tag = hdr.tag;
        u->sock = s;
        u->next = NULL;
        for (pp = &boot->unexpected; *pp != NULL; pp = &(*pp)->next) {
        }
        *pp = u;
      }
      continue;
    }
    if (probe && brd_time_now_ns() >= next_probe) {
      int refused = 0;
      brd_sock_probe(&boot->peer_addrs[peer], PROBE_TIMEOUT_MS, &refused);
      if (refused && !brd_sock_aborted(ctl)) {
        char why[LEAVE_TEXT_MAX + 1];
        if (peer_left(boot, peer, why, sizeof(why)))
          WARN("bootstrap: rank %d waited for a message from rank %d at %s, but that "
               "rank left: %s", boot->rank, peer,
               brd_sock_addr_str(&boot->peer_addrs[peer], line), why);
        else
          WARN("bootstrap: rank %d waited for a message from rank %d at %s, but "
               "that rank is gone (nothing listens there any more): its process "
               "exited or it destroyed the communicator", boot->rank, peer,
               brd_sock_addr_str(&boot->peer_addrs[peer], line));
        return ncclRemoteError;
      }
      next_probe = brd_time_now_ns() + PROBE_INTERVAL_NS;
    }
    if (brd_sock_wait_readable(boot->listen.fd, SLICE_MS) != 0) {
      WARN("bootstrap: poll failed: %s", strerror(errno));
      return ncclSystemError;
    }
  }
}

static ncclResult_t connect_to(struct brd_boot *boot, int peer, int tag,
                               const union brd_sock_addr *addr,
                               const brd_sock_ctl_t *ctl, struct brd_sock *sock_out) {
  struct conn_hdr hdr = {boot->magic, boot->rank, tag};
  struct brd_sock s;
  ncclResult_t res;
  (void)peer;
  CHECK(brd_sock_connect(addr, 0, ctl, &s));
  CHECK_GOTO(brd_sock_send(&s, &hdr, sizeof(hdr), ctl), res, fail_close);
  *sock_out = s;
  return ncclSuccess;
fail_close:
  brd_sock_close(&s);
  return res;
}

/* One message with peer over a connection of its own, sent (send) or
 * received: its length, then its bytes. A receive fails when the length
 * is not size. */
static ncclResult_t p2p_xfer(struct brd_boot *boot, int peer, int tag, void *buf, size_t size,
                             int send) {
  char who[32];
  brd_sock_ctl_t ctl;
  struct brd_sock s;
  uint64_t sz = size;
  ncclResult_t res;

  peer_who(peer, who, sizeof(who));
  ctl = boot_ctl(boot, who);
  if (send) {
    res = connect_to(boot, peer, tag, &boot->peer_addrs[peer], &ctl, &s);
    if (res != ncclSuccess) return note_left(boot, peer, &ctl, res);
    CHECK_GOTO(brd_sock_send(&s, &sz, sizeof(sz), &ctl), res, out_close);
  } else {
    CHECK(accept_from(boot, peer, tag, &ctl, 1, &s));
    CHECK_GOTO(brd_sock_recv(&s, &sz, sizeof(sz), &ctl), res, out_close);
    if (sz != size) {
      WARN("bootstrap: rank %d sent %llu bytes with tag %d but rank %d expected "
           "%zu; the two sides disagree on the message", peer,
           (unsigned long long)sz, tag, boot->rank, size);
      res = ncclInternalError;
      goto out_close;
    }
  }
  if (size > 0)
    CHECK_GOTO(send ? brd_sock_send(&s, buf, size, &ctl) : brd_sock_recv(&s, buf, size, &ctl),
               res, out_close);
  res = ncclSuccess;
out_close:
  brd_sock_close(&s);
  return note_left(boot, peer, &ctl, res);
}

static ncclResult_t p2p_send(struct brd_boot *boot, int peer, int tag, const void *buf,
                             size_t size) {
  return p2p_xfer(boot, peer, tag, (void *)buf, size, 1);
}

static ncclResult_t p2p_recv(struct brd_boot *boot, int peer, int tag, void *buf,
                             size_t size) {
  return p2p_xfer(boot, peer, tag, buf, size, 0);
}

static ncclResult_t check_peer_tag(const struct brd_boot *boot, int peer, int tag,
                                   const char *fn) {
  if (peer < 0 || peer >= boot->nranks) {
    WARN("%s: peer %d is outside [0, %d)", fn, peer, boot->nranks);
    return ncclInvalidArgument;
  }
  if (tag < 0 || tag >= BRD_BOOT_TAG_MAX) {
    WARN("%s: tag %d is outside [0, %d)", fn, tag, BRD_BOOT_TAG_MAX);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* brd_boot_send and brd_boot_recv (fn): checked, and counted in busy
 * while they run. */
static ncclResult_t user_xfer(struct brd_boot *boot, int peer, int tag, void *buf,
                              size_t size, int send, const char *fn) {
  CHECK(check_peer_tag(boot, peer, tag, fn));
  atomic_fetch_add(&boot->busy, 1);
  ncclResult_t res = boot_note(boot, p2p_xfer(boot, peer, tag, buf, size, send));
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_send(struct brd_boot *boot, int peer, int tag, const void *buf,
                           size_t size) {
  return user_xfer(boot, peer, tag, (void *)buf, size, 1, "brd_boot_send");
}

/* See bootstrap.h. */
ncclResult_t brd_boot_recv(struct brd_boot *boot, int peer, int tag, void *buf,
                           size_t size) {
  return user_xfer(boot, peer, tag, buf, size, 0, "brd_boot_recv");
}

/* Ring allgather in both directions at once: step s moves slice rank-s to
 * the next rank and slice rank+s to the previous one, so n-1 slices arrive
 * in n/2 steps (NCCL's double ring). Each slice travels as a RING_DATA
 * frame; a RING_LEAVE frame instead is the neighbour's reason for leaving:
 * WARNed here, ncclRemoteError, and *left_out = 1 (may be NULL).
 * deadline_ns 0: each step waits BRAID_BOOTSTRAP_TIMEOUT and a timeout is
 * WARNed by the socket layer. Otherwise the whole exchange ends at
 * deadline_ns (limit_s seconds of BRAID_TIMEOUT) and a timeout is only
 * INFO there: the caller WARNs it, naming the ranks not heard from. */
static ncclResult_t ring_allgather_until(struct brd_boot *boot, char *data, size_t size,
                                         int64_t deadline_ns, int64_t limit_s,
                                         unsigned char *have, int *left_out) {
  int n = boot->nranks, r = boot->rank, steps = n / 2, left = 0;
  int nx = (r + 1) % n, pv = (r - 1 + n) % n;
  size_t fsz = sizeof(struct ring_hdr) + size;
  struct ring_hdr dh = {RING_DATA, (uint32_t)size};
  char who_next[32], who_prev[32];
  ncclResult_t res = ncclSuccess;
  char *f;
  if (left_out != NULL) *left_out = 0;
  if (size > UINT32_MAX - sizeof(struct ring_hdr)) {
    WARN("bootstrap: an allgather of %zu bytes per rank is over the ring's limit", size);
    return ncclInvalidArgument;
  }
  /* Frames: [0] to next, [1] from prev, [2] to prev, [3] from next. */
  f = malloc(4 * fsz);
  if (f == NULL) {
    WARN("out of host memory for a bootstrap allgather of %zu bytes per rank", size);
    return ncclSystemError;
  }
  peer_who(nx, who_next, sizeof(who_next));
  peer_who(pv, who_prev, sizeof(who_prev));
  for (int s = 0; s < steps && res == ncclSuccess; s++) {
    brd_sock_ctl_t ctl = boot_ctl(boot, NULL);
    int last_single = s == steps - 1 && n % 2 == 0;
    int nops = last_single ? 2 : 4;
    int from[4] = {-1, (r - s - 1 + n) % n, -1, (r + s + 1) % n};
    if (deadline_ns != 0) {
      ctl.deadline_ns = deadline_ns;
      ctl.limit_s = limit_s;
      ctl.limit_name = "BRAID_TIMEOUT";
      ctl.caller_reports = 1;
    }
    memcpy(f, &dh, sizeof(dh));
    memcpy(f + sizeof(dh), data + (size_t)((r - s + n) % n) * size, size);
    memcpy(f + 2 * fsz, &dh, sizeof(dh));
    memcpy(f + 2 * fsz + sizeof(dh), data + (size_t)((r + s) % n) * size, size);
    brd_sock_op_t ops[4] = {
        {&boot->ring_next, 1, f, fsz, 0, who_next},
        {&boot->ring_prev, 0, f + fsz, fsz, 0, who_prev},
        {&boot->ring_prev, 1, f + 2 * fsz, fsz, 0, who_prev},
        {&boot->ring_next, 0, f + 3 * fsz, fsz, 0, who_next},
    };
    res = brd_sock_multi(ops, nops, &ctl);
    /* A frame sent in part leaves that stream unfit for a leave frame. */
    if (ops[0].done > 0 && ops[0].done < fsz) boot->torn[0] = 1;
    if (nops == 4 && ops[2].done > 0 && ops[2].done < fsz) boot->torn[1] = 1;
    for (int k = 1; k < nops; k += 2) {
      struct ring_hdr h;
      int peer = k == 1 ? pv : nx;
      char *rx = ops[k].buf;
      if (ops[k].done < sizeof(h) || memcmp(rx, &dh, sizeof(dh)) != 0) {
        /* Not a whole data frame: a leave frame (whole, in part, or still
         * queued after a failure elsewhere), or a disagreement. */
        int64_t until = brd_time_now_ns() + LEAVE_READ_MS * 1000000LL;
        if (until > ctl.deadline_ns) until = ctl.deadline_ns;
        if (!left && (res != ncclSuccess || ops[k].done >= sizeof(h)) &&
            !brd_sock_aborted(&ctl) &&
            ring_leave_read(boot, ops[k].sock, peer, rx, ops[k].done, until))
          left = 1;
        else if (ops[k].done >= sizeof(h) && res == ncclSuccess) {
          memcpy(&h, rx, sizeof(h));
          WARN("bootstrap: rank %d: rank %d sent a ring frame of kind %#x and %u bytes to an "
               "allgather of %zu bytes per rank; the ranks disagree on the exchange",
               r, peer, h.kind, h.len, size);
          res = ncclInternalError;
        }
        continue;
      }
      /* Each slice that arrived, even in a failed step, is a rank heard. */
      if (ops[k].done == fsz) {
        memcpy(data + (size_t)from[k] * size, rx + sizeof(dh), size);
        if (have != NULL) have[from[k]] = 1;
      }
    }
    if (left) res = ncclRemoteError;
  }
  free(f);
  if (left_out != NULL) *left_out = left;
  return res;
}

static ncclResult_t ring_allgather(struct brd_boot *boot, char *data, size_t size) {
  return ring_allgather_until(boot, data, size, 0, 0, NULL, NULL);
}

/* See bootstrap.h. */
ncclResult_t brd_boot_allgather(struct brd_boot *boot, void *buf, size_t size_per_rank) {
  ncclResult_t res;
  if (boot->nranks == 1 || size_per_rank == 0) return ncclSuccess;
  atomic_fetch_add(&boot->busy, 1);
  res = boot_note(boot, ring_allgather(boot, buf, size_per_rank));
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_allgather_timed(struct brd_boot *boot, void *buf, size_t size_per_rank,
                                      int64_t timeout_s, const char *what) {
  ncclResult_t res;
  unsigned char *have;
  int left = 0;
  int64_t t0 = brd_time_now_ns();
  if (boot->nranks == 1 || size_per_rank == 0) return ncclSuccess;
  if (timeout_s < 1) timeout_s = 1;
  have = calloc((size_t)boot->nranks, 1);
  if (have == NULL) {
    WARN("%s: out of host memory", what);
    return ncclSystemError;
  }
  have[boot->rank] = 1;
  atomic_fetch_add(&boot->busy, 1);
  res = ring_allgather_until(boot, buf, size_per_rank, t0 + timeout_s * 1000000000LL,
                             timeout_s, have, &left);
  if (res == ncclRemoteError && !left) {
    /* One message for the caller: who has not been heard from (also when
     * a neighbour gave up first and closed its connection). A rank named
     * here either never made the call or sits behind one that did not
     * (the exchange runs around the ring). */
    char list[256];
    int off = 0, shown = 0;
    list[0] = '\0';
    for (int q = 0; q < boot->nranks && off < (int)sizeof(list) - 16; q++) {
      if (have[q]) continue;
      if (shown++ == 16) {
        off += snprintf(list + off, sizeof(list) - (size_t)off, " ...");
        break;
      }
      off += snprintf(list + off, sizeof(list) - (size_t)off, " %d", q);
    }
    WARN("%s: rank %d waited %.1f s of %lld s (BRAID_TIMEOUT) for every rank to "
         "make the same call; nothing arrived from rank(s)%s: check that every "
         "rank of the communicator makes this call, or raise BRAID_TIMEOUT", what,
         boot->rank, (double)(brd_time_now_ns() - t0) / 1e9, (long long)timeout_s, list);
  }
  /* After the WARN above: the reason noted for the ring is this one. */
  res = boot_note(boot, res);
  atomic_fetch_sub(&boot->busy, 1);
  free(have);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_bcast(struct brd_boot *boot, int root, void *buf, size_t size) {
  int tag = TAG_INTERNAL(TAG_KIND_BCAST, boot->coll_seq++);
  ncclResult_t res = ncclSuccess;
  if (root < 0 || root >= boot->nranks) {
    WARN("brd_boot_bcast: root %d is outside [0, %d)", root, boot->nranks);
    return ncclInvalidArgument;
  }
  atomic_fetch_add(&boot->busy, 1);
  if (boot->rank == root) {
    for (int i = 1; i < boot->nranks && res == ncclSuccess; i++)
      res = p2p_send(boot, (root + i) % boot->nranks, tag, buf, size);
  } else {
    res = p2p_recv(boot, root, tag, buf, size);
  }
  res = boot_note(boot, res);
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* Dissemination barrier (Hensgen, Finkel and Manber): in round k each rank
 * signals rank+2^k and waits for rank-2^k; after ceil(log2 n) rounds every
 * rank has heard, directly or not, from all others. */
ncclResult_t brd_boot_barrier(struct brd_boot *boot) {
  int tag = TAG_INTERNAL(TAG_KIND_BARRIER, boot->coll_seq++);
  int n = boot->nranks, r = boot->rank;
  ncclResult_t res = ncclSuccess;
  char token = 1;
  atomic_fetch_add(&boot->busy, 1);
  for (int mask = 1; mask < n && res == ncclSuccess; mask <<= 1) {
    res = p2p_send(boot, (r + mask) % n, tag, &token, 1);
    if (res == ncclSuccess) res = p2p_recv(boot, (r - mask + n) % n, tag, &token, 1);
  }
  res = boot_note(boot, res);
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* Connects to the next rank's listener and accepts the previous rank. */
static ncclResult_t ring_connect(struct brd_boot *boot, const union brd_sock_addr *next) {
  int n = boot->nranks;
  int nx = (boot->rank + 1) % n, pv = (boot->rank - 1 + n) % n;
  char who[32];
  brd_sock_ctl_t ctl;
  peer_who(nx, who, sizeof(who));
  ctl = boot_ctl(boot, who);
  CHECK(connect_to(boot, nx, TAG_RING, next, &ctl, &boot->ring_next));
  peer_who(pv, who, sizeof(who));
  ctl = boot_ctl(boot, who);
  CHECK(accept_from(boot, pv, TAG_RING, &ctl, 0, &boot->ring_prev));
  return ncclSuccess;
}

/* Sends our registration to one root; the connection stays open for the
 * answer. */
static ncclResult_t root_register(struct brd_boot *boot, const brd_boot_handle_t *h,
                                  int iroot, int nroots, int extra,
                                  struct brd_sock *sock_out) {
  struct boot_hello hello;
  brd_sock_ctl_t ctl = boot_ctl(boot, "the bootstrap root");
  ncclResult_t res;
  memset(&hello, 0, sizeof(hello));
  hello.proto = BOOT_PROTO;
  hello.magic = h->magic;
  hello.rank = boot->rank;
  hello.nranks = boot->nranks;
  hello.iroot = iroot;
  hello.nroots = nroots;
  hello.extra = extra;
  hello.pid = (int32_t)getpid();
  hello.listen = boot->listen.addr;
  CHECK(brd_sock_connect(&h->addr, 1, &ctl, sock_out));
  CHECK_GOTO(brd_sock_send(sock_out, &hello, sizeof(hello), &ctl), res, fail_close);
  return ncclSuccess;
fail_close:
  brd_sock_close(sock_out);
  return res;
}

static ncclResult_t root_answer(struct brd_boot *boot, struct brd_sock *s,
                                union brd_sock_addr *next_out) {
  struct boot_reply rep;
  brd_sock_ctl_t ctl = boot_ctl(boot, "the bootstrap root");
  char line[BRD_SOCK_ADDR_STRLEN];
  ctl.deadline_ns += REPLY_GRACE_S * 1000000000LL;
  ctl.limit_s += REPLY_GRACE_S;
  CHECK(brd_sock_recv(s, &rep, sizeof(rep), &ctl));
  rep.msg[sizeof(rep.msg) - 1] = '\0';
  if (rep.status != ncclSuccess && brd_sock_aborted(&ctl)) {
    /* The rendezvous failed because ranks were aborted, this one too. */
    INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap: rank %d: abort requested; the root "
         "ended the rendezvous meanwhile: %s", boot->rank, rep.msg);
    return ncclInternalError;
  }
  if (rep.status != ncclSuccess) {
    WARN("bootstrap: rank %d: the root at %s ended the rendezvous: %s", boot->rank,
         brd_sock_addr_str(&s->addr, line), rep.msg);
    return (ncclResult_t)rep.status;
  }
  if (next_out != NULL) *next_out = rep.next;
  return ncclSuccess;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_create(const ncclUniqueId *ids, int nids, int rank, int nranks,
                             _Atomic int *abort, struct brd_boot **boot_out) {
  struct brd_boot *boot = NULL;
  struct brd_sock own = {.fd = -1}, link = {.fd = -1};
  brd_boot_handle_t h;
  union brd_sock_addr next;
  ncclResult_t res;
  int iroot;

  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("bootstrap: rank %d is outside [0, %d)", rank, nranks);
    return ncclInvalidArgument;
  }
  if (nids < 1 || nids > nranks) {
    WARN("bootstrap: %d unique ids for %d ranks; use between 1 and nranks", nids, nranks);
    return ncclInvalidArgument;
  }
  handle_get(&ids[0], &h);
  CHECK(boot_alloc(rank, nranks, h.magic, abort, &boot));
  atomic_fetch_add(&boot->busy, 1);

  iroot = root_of_rank(rank, nranks, nids);
  handle_get(&ids[iroot], &h);
  CHECK_GOTO(root_register(boot, &h, iroot, nids, 0, &own), res, fail);
  if (nids > 1 && rank == root_first_rank(iroot, nranks, nids)) {
    int prev_root = (iroot - 1 + nids) % nids;
    handle_get(&ids[prev_root], &h);
    CHECK_GOTO(root_register(boot, &h, prev_root, nids, 1, &link), res, fail);
  }
  res = root_answer(boot, &own, &next);
  if (res == ncclSuccess && link.fd >= 0) res = root_answer(boot, &link, NULL);
  if (res == ncclInvalidUsage) {
    for (int i = 0; i < nids; i++) {
      handle_get(&ids[i], &h);
      brd_boot_root_linger(&h);
    }
  }
  if (res != ncclSuccess) goto fail;
  brd_sock_close(&own);
  brd_sock_close(&link);

  if (nranks > 1) {
    CHECK_GOTO(ring_connect(boot, &next), res, fail);
    CHECK_GOTO(ring_allgather(boot, (char *)boot->peer_addrs, sizeof(*boot->peer_addrs)),
               res, fail);
  }
  atomic_fetch_sub(&boot->busy, 1);
  TRACE(BRD_SUBSYS_BOOTSTRAP, "bootstrap: rank %d of %d connected", rank, nranks);
  *boot_out = boot;
  return ncclSuccess;
fail:
  brd_sock_close(&own);
  brd_sock_close(&link);
  (void)boot_note(boot, res);
  brd_boot_destroy(boot);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_create_child(struct brd_boot *parent, uint32_t seq, int color,
                                   int nranks, int rank, const int *parent_ranks,
                                   _Atomic int *abort, struct brd_boot **boot_out) {
  struct brd_boot *boot = NULL;
  union brd_sock_addr next;
  uint64_t magic;
  ncclResult_t res;
  int tag = TAG_INTERNAL(TAG_KIND_SPLIT, seq);

  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("bootstrap: child rank %d is outside [0, %d)", rank, nranks);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < nranks; i++) {
    if (parent_ranks[i] < 0 || parent_ranks[i] >= parent->nranks) {
      WARN("bootstrap: child rank %d maps to parent rank %d, outside [0, %d)", i,
           parent_ranks[i], parent->nranks);
      return ncclInvalidArgument;
    }
  }
  magic = mix64(parent->magic ^ mix64(((uint64_t)seq << 32) | (uint32_t)color));
  CHECK(boot_alloc(rank, nranks, magic, abort, &boot));
  /* Until the child stands, aborting the parent stops it too. */
  atomic_store(&boot->extra_abort, parent->abort);
  atomic_fetch_add(&parent->busy, 1);
  if (nranks > 1) {
    int prev = parent_ranks[(rank - 1 + nranks) % nranks];
    int nx = parent_ranks[(rank + 1) % nranks];
    /* Our listener goes to the previous member, the next one's comes to us:
     * both over direct connections of the parent, never through a rank
     * outside the child. */
    CHECK_GOTO(p2p_send(parent, prev, tag, &boot->listen.addr, sizeof(boot->listen.addr)),
               res, fail);
    CHECK_GOTO(p2p_recv(parent, nx, tag, &next, sizeof(next)), res, fail);
    atomic_fetch_add(&boot->busy, 1);
    res = ring_connect(boot, &next);
    if (res == ncclSuccess)
      res = ring_allgather(boot, (char *)boot->peer_addrs, sizeof(*boot->peer_addrs));
    atomic_fetch_sub(&boot->busy, 1);
    if (res != ncclSuccess) goto fail;
  }
  atomic_fetch_sub(&parent->busy, 1);
  atomic_store(&boot->extra_abort, NULL);
  *boot_out = boot;
  return ncclSuccess;
fail:
  atomic_fetch_sub(&parent->busy, 1);
  (void)boot_note(boot, res);
  brd_boot_destroy(boot);
  return res;
}
