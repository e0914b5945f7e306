/*
 * Braid proxy: port channels over the process's net. See proxy.h.
 *
 * Per port (one per peer reached over the net), a ring of NSEND send
 * slots registered once with the net. Executor threads append records
 * ({offset, length, kind} + bytes) to the open slot under the port's
 * lock; the progress thread closes a slot that holds data once every
 * earlier one is posted, isends slots in order and frees them when the
 * net says they are done. So small puts (a semaphore, an LL chunk)
 * travel together, and a put waits only when all NSEND slots are in
 * flight. On the other side NRECV receives stay posted; completed ones
 * are applied in order (the net matches in order per connection), then
 * posted again.
 *
 *   slots [tail, post)  posted, not yet done
 *         [post, head)  closed, not yet posted
 *         head          open (filling) while head - tail < NSEND
 *
 * A peer that is done sends BYE last; its connection closing after that
 * is the normal end. A connection that fails or closes without BYE fails
 * the communicator's launches (ncclRemoteError) with one WARN.
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/futex.h"
#include "base/param.h"
#include "base/socket.h"
#include "base/time.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/profiler.h"
#include "core/proxy.h"
#include "device/exec_host.h"
#include "plan/topo.h"
#include "transport/net.h"
#include "transport/transport.h"

#define SLOT_BYTES ((size_t)256 << 10) /* one net message at most */
#define NSEND 8
#define NRECV 4
#define BOOT_TAG 0x0b2a1d00 /* bootstrap tag of the listen handles */
#define SEND_BROKEN_GRACE_NS 2000000000LL /* how long a failed send waits for BYE */
#define DRAIN_NS 5000000000LL             /* destroy's wait for queued sends */
#define IDLE_YIELDS 64   /* idle passes that yield before the thread sleeps */
#define PROXY_HOT_NS 1000000LL /* CUDA mode: polling the FIFOs without naps
                                * this long after a trigger or a poke */
#define NAP_NS 20000     /* the nap where nothing can wake the thread */
#define SLEEP_MS 1       /* the longest sleep in poll (grace deadlines, stop) */

/* Record kinds. BYE: the sender is done (its connection closing next is
 * normal). FAIL: the sender stops because it lost rank `off` (so its
 * peers name the rank that failed, not the one that gave up). */
enum { REC_DATA = 0, REC_LL = 1, REC_SEM = 2, REC_BYE = 3, REC_FAIL = 4 };

typedef struct rec_hdr {
  uint64_t off;
  uint32_t len;
  uint32_t kind;
} rec_hdr_t;

typedef struct send_slot {
  size_t fill;  /* bytes of records */
  void *req;    /* the net's request while posted */
  brd_prof_op_t prof; /* the profiler's events while posted */
} send_slot_t;

typedef struct port {
  brd_exec_port_t ex;     /* first: the host executor's view (mirror: host) */
  char *mirror_dev;       /* the mirror as the CUDA executor addresses it */
  struct brd_proxy *px;
  int peer;
  void *listen_comm, *send_comm, *recv_comm; /* the net's */
  void *send_mh, *recv_mh;                   /* registrations of sbuf, rbuf */
  char *sbuf;             /* owned: NSEND slots */
  char *rbuf;             /* owned: NRECV slots */
  char handle[BRD_NET_HANDLE_BYTES];         /* this rank's listen handle */
  char peer_handle[BRD_NET_HANDLE_BYTES];    /* the peer's, for this rank */
  pthread_mutex_t mu;     /* guards the send ring */
  pthread_cond_t cv;      /* a slot went free, or the port failed */
  send_slot_t send[NSEND];
  uint64_t head, post, tail;
  void *rreq[NRECV];      /* posted receives (NULL: not posted) */
  uint64_t rnext;         /* the oldest posted receive */
  int bye_seen;           /* the peer said it is done */
  int dead;               /* no more traffic on this port */
  int64_t send_broken_ns; /* when a send failed (0: none) */
  char net_said[512];     /* the net's WARN about the connection that failed
                           * ("" when it gave none); the proxy thread's */
} port_t;

/* The trigger a FIFO's drain is in the middle of. */
typedef struct fifo_cursor {
  int active;
  int peer, kind;
  size_t off, len;
  uint64_t val[3];   /* a SEM trigger's words */
} fifo_cursor_t;

#define MAX_FIFOS 4

struct brd_proxy {
  struct ncclComm *comm;  /* borrowed */
  brd_proxy_mem_t mem;    /* how mirrors are allocated */
  brd_exec_fifo_t *fifos[MAX_FIFOS]; /* borrowed: the CUDA executor's */
  fifo_cursor_t fifo_cur[MAX_FIFOS];
  _Atomic int nfifos;
  int first;              /* the first port peer */
  const brd_net_ops_t *net;
  void *ctx;              /* the net's, from init */
  int dev;
  char *own;              /* borrowed: this rank's window */
  size_t bytes;
  int nranks;
  port_t **ports;         /* owned: [nranks], NULL for memory channels */
  int failed;             /* ncclResult_t, __atomic; 0 while healthy */
  int culprit;            /* the rank whose loss failed the proxy; -1 */
  char why[800];          /* the failure's WARN text, written once before
                           * `failed` is read as set by others (why_set) */
  int why_set;            /* __atomic */
  _Atomic int stop;
  pthread_t thread;
  int thread_started;
  brd_exec_bell_t bell;   /* rung after each message laid into own */
  int64_t hot_until_ns;   /* __atomic: CUDA mode, no naps before this
                           * (brd_proxy_poke, a trigger taken) */
  uint32_t poke;          /* futex: a nap ends when brd_proxy_poke bumps it */
  int napping;            /* __atomic: the thread is (about to be) in that nap */
  int efd;                /* eventfd: a put while the thread sleeps; -1: none */
  int sleeping;           /* __atomic: the thread is (about to be) in poll */
  struct pollfd *pfds;    /* owned: the bell's and two per port */
};

/* Wakes the progress thread if it sleeps in poll (proxy_sleep): after
 * records were appended or stop was set. Any thread; never blocks. */
static void proxy_wake(brd_proxy_t *px) {
  if (px->efd >= 0 && __atomic_exchange_n(&px->sleeping, 0, __ATOMIC_SEQ_CST)) {
    uint64_t one = 1;
    (void)!write(px->efd, &one, sizeof(one));
  }
}

/* CUDA mode: the thread polls the FIFOs without napping for PROXY_HOT_NS
 * from now (a launch poked it, or it took a trigger); hot() says whether
 * that time is still running. Sequentially consistent: proxy_sleep sets
 * napping before it looks, brd_proxy_poke heats before it looks at
 * napping, so one of the two sees the other. */
static void heat(brd_proxy_t *px) {
  __atomic_store_n(&px->hot_until_ns, brd_time_now_ns() + PROXY_HOT_NS, __ATOMIC_SEQ_CST);
}

static int hot(brd_proxy_t *px) {
  return brd_time_now_ns() < __atomic_load_n(&px->hot_until_ns, __ATOMIC_SEQ_CST);
}

static int port_failed(const port_t *pt) {
  return __atomic_load_n(&pt->px->failed, __ATOMIC_ACQUIRE);
}

/* The first failure of the proxy: WARNs it once and wakes every put.
 * lost >= 0: pt's peer gave up because it lost rank `lost` (REC_FAIL).
 * net_said: what the net said about pt's failed connection, or NULL/""
 * when the failure is not the net's or the net gave no reason. */
static void proxy_fail(brd_proxy_t *px, port_t *pt, ncclResult_t res, const char *what,
                       int lost, const char *net_said) {
  int expected = 0;
  __atomic_store_n(&pt->dead, 1, __ATOMIC_RELEASE);
  if (__atomic_compare_exchange_n(&px->failed, &expected, (int)res, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    char addr[BRD_SOCK_ADDR_STRLEN];
    brd_sock_addr_str(brd_boot_peer_addr(px->comm->boot, pt->peer), addr);
    __atomic_store_n(&px->culprit, lost >= 0 ? lost : pt->peer, __ATOMIC_RELEASE);
    if (lost >= 0)
      snprintf(px->why, sizeof(px->why), "rank %d: rank %d (host %s) stopped because it lost "
               "rank %d; every launch on this communicator now fails. Check why rank %d "
               "exited or became unreachable", px->comm->rank, pt->peer, addr, lost, lost);
    else if (net_said != NULL && net_said[0] != '\0')
      /* The net said why this connection failed (a port down, a
       * completion error): that is the cause, with its own fix. */
      snprintf(px->why, sizeof(px->why), "rank %d: the network connection to rank %d (host "
               "%s, net %s) failed: %s: %s; every launch on this communicator now fails",
               px->comm->rank, pt->peer, addr, px->net->name, what, net_said);
    else
      snprintf(px->why, sizeof(px->why), "rank %d: the network connection to rank %d (host "
               "%s, net %s) failed: %s. The peer process may have exited or its host become "
               "unreachable; every launch on this communicator now fails. Check that every "
               "rank is alive and that NCCL_SOCKET_IFNAME names an interface that reaches "
               "every host", px->comm->rank, pt->peer, addr, px->net->name, what);
    __atomic_store_n(&px->why_set, 1, __ATOMIC_RELEASE);
    /* The communicator's own record: what its bootstrap tells the ring
     * when it leaves. */
    brd_boot_note_failure(px->comm->boot, px->why);
    WARN("%s", px->why);
  }
  for (int r = 0; r < px->nranks; r++) {
    port_t *q = px->ports[r];
    if (q == NULL) continue;
    pthread_mutex_lock(&q->mu);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
  }
}

/* The open slot has room for a record of `need` bytes, or the put must
 * wait. Called with pt->mu held; returns the slot or NULL. */
static send_slot_t *open_slot(port_t *pt, size_t need) {
  if (pt->head - pt->tail >= NSEND) return NULL;
  send_slot_t *s = &pt->send[pt->head % NSEND];
  if (s->fill + need <= SLOT_BYTES) return s;
  /* Full: close it, open the next one if it is free. */
  if (s->fill > 0) pt->head++;
  if (pt->head - pt->tail >= NSEND) return NULL;
  return &pt->send[pt->head % NSEND];
}

/* Appends one record: the header, then len bytes from src. pt->mu held. */
static void rec_append(port_t *pt, send_slot_t *s, uint64_t off, size_t len, int kind,
                       const void *src) {
  char *at = pt->sbuf + (size_t)(s - pt->send) * SLOT_BYTES + s->fill;
  rec_hdr_t h = {off, (uint32_t)len, (uint32_t)kind};
  memcpy(at, &h, sizeof(h));
  if (len > 0) memcpy(at + sizeof(h), src, len);
  s->fill += sizeof(h) + ((len + 7) & ~(size_t)7);
}

/* Waits for a free slot with room for need bytes: BRAID_TIMEOUT, the
 * comm's abort and the proxy's failure end it. pt->mu held. */
static ncclResult_t slot_wait(port_t *pt, size_t need, send_slot_t **s_out) {
  int64_t deadline = 0;
  for (;;) {
    send_slot_t *s = open_slot(pt, need);
    if (s != NULL) {
      *s_out = s;
      return ncclSuccess;
    }
    if (port_failed(pt)) return ncclRemoteError;
    if (__atomic_load_n(&pt->bye_seen, __ATOMIC_ACQUIRE)) {
      *s_out = NULL; /* the peer is done: drop */
      return ncclSuccess;
    }
    if (atomic_load(&pt->px->comm->abort_flag)) return ncclSystemError;
    int64_t now = brd_time_now_ns();
    if (deadline == 0) deadline = now + (int64_t)brd_param_int(BRD_P_BRAID_TIMEOUT) * 1000000000LL;
    if (now > deadline) {
      WARN("rank %d: no progress for %d s sending to rank %d over net %s: every send slot "
           "stays in flight. The peer stopped receiving; check that it is alive, or raise "
           "BRAID_TIMEOUT", pt->px->comm->rank, (int)brd_param_int(BRD_P_BRAID_TIMEOUT),
           pt->peer, pt->px->net->name);
      return ncclRemoteError;
    }
    proxy_wake(pt->px); /* full slots for it to post (puts wake it only after appending) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&pt->cv, &pt->mu, &ts);
  }
}

/* Appends [off, off + len) of the mirror (or the len bytes at src, when
 * not NULL) as records of at most a slot each, advancing *off and *len.
 * wait: block for free slots (executor threads); else return as soon as
 * none is free (the proxy thread, which frees them). pt->mu held. */
static ncclResult_t append_range(port_t *pt, size_t *off, size_t *len, int rk, int wait,
                                 const char *src) {
  const size_t off0 = *off;
  const size_t max_piece = SLOT_BYTES - sizeof(rec_hdr_t);
  while (*len > 0) {
    size_t piece = *len < max_piece ? *len : max_piece;
    send_slot_t *s;
    /* Big data fills what is left of the open slot rather than wait for
     * a whole one; semaphores are never split. */
    if (rk != REC_SEM) {
      send_slot_t *cur = pt->head - pt->tail < NSEND ? &pt->send[pt->head % NSEND] : NULL;
      if (cur != NULL && cur->fill + sizeof(rec_hdr_t) + 4096 <= SLOT_BYTES) {
        size_t room = (SLOT_BYTES - cur->fill - sizeof(rec_hdr_t)) & ~(size_t)7;
        if (room < piece) piece = room;
      }
    }
    size_t need = sizeof(rec_hdr_t) + ((piece + 7) & ~(size_t)7);
    if (wait) {
      CHECK(slot_wait(pt, need, &s));
      if (s == NULL) { /* the peer is done: drop */
        *len = 0;
        return ncclSuccess;
      }
    } else if ((s = open_slot(pt, need)) == NULL) {
      return ncclSuccess;
    }
    rec_append(pt, s, *off, piece, rk,
               src != NULL ? src + (*off - off0) : pt->ex.mirror + *off);
    *off += piece;
    *len -= piece;
  }
  return ncclSuccess;
}

static int rec_kind(int kind) {
  return kind == BRD_EXEC_PUT_LL ? REC_LL : kind == BRD_EXEC_PUT_SEM ? REC_SEM : REC_DATA;
}

/* A peer that said it is done reads nothing more: late writes (credits it
 * never waits for) go nowhere. */
static int port_gone(const port_t *pt) {
  return __atomic_load_n(&pt->bye_seen, __ATOMIC_ACQUIRE) &&
         __atomic_load_n(&pt->dead, __ATOMIC_ACQUIRE);
}

/* brd_exec_port_t.put. */
static int port_put(brd_exec_port_t *ex, size_t off, size_t len, int kind) {
  port_t *pt = (port_t *)ex;
  if (port_gone(pt)) return ncclSuccess;
  pthread_mutex_lock(&pt->mu);
  ncclResult_t res = append_range(pt, &off, &len, rec_kind(kind), 1, NULL);
  pthread_mutex_unlock(&pt->mu);
  proxy_wake(pt->px);
  return (int)res;
}

/* brd_exec_port_t.put_from. */
static int port_put_from(brd_exec_port_t *ex, size_t off, size_t len, const void *src) {
  port_t *pt = (port_t *)ex;
  if (port_gone(pt)) return ncclSuccess;
  pthread_mutex_lock(&pt->mu);
  ncclResult_t res = append_range(pt, &off, &len, REC_DATA, 1, src);
  pthread_mutex_unlock(&pt->mu);
  proxy_wake(pt->px);
  return (int)res;
}

/* The proxy thread: takes what the CUDA executor posted to fifo, in slot
 * order, as far as send slots allow (the entry being taken keeps its
 * progress in px->fifo_cur). Returns 1 when something was taken. */
static int fifo_drain(brd_proxy_t *px, int fi) {
  brd_exec_fifo_t *f = px->fifos[fi];
  fifo_cursor_t *cur = &px->fifo_cur[fi];
  int busy = 0;
  for (;;) {
    uint64_t tail = f->tail;
    brd_exec_trigger_t *e = &f->ring[tail % BRD_EXEC_FIFO_ENTRIES];
    if (!cur->active) {
      if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != tail + 1) return busy;
      cur->active = 1;
      cur->off = (size_t)__atomic_load_n(&e->off, __ATOMIC_RELAXED);
      cur->len = (size_t)__atomic_load_n(&e->len, __ATOMIC_RELAXED);
      cur->peer = (int)__atomic_load_n(&e->peer, __ATOMIC_RELAXED);
      cur->kind = (int)__atomic_load_n(&e->kind, __ATOMIC_RELAXED);
      for (int i = 0; i < 3; i++) cur->val[i] = __atomic_load_n(&e->val[i], __ATOMIC_RELAXED);
      if (cur->peer < 0 || cur->peer >= px->nranks || px->ports[cur->peer] == NULL ||
          cur->off > px->bytes || cur->len > px->bytes - cur->off ||
          (cur->kind == BRD_EXEC_PUT_SEM && cur->len > sizeof(cur->val))) {
        proxy_fail(px, px->ports[cur->peer >= 0 && cur->peer < px->nranks &&
                                         px->ports[cur->peer] != NULL ? cur->peer : px->first],
                   ncclInternalError, "a trigger outside every port's window", -1, NULL);
        return busy;
      }
    }
    port_t *pt = px->ports[cur->peer];
    if (!port_gone(pt)) {
      pthread_mutex_lock(&pt->mu);
      (void)append_range(pt, &cur->off, &cur->len, rec_kind(cur->kind), 0,
                         cur->kind == BRD_EXEC_PUT_SEM ? (const char *)cur->val : NULL);
      pthread_mutex_unlock(&pt->mu);
      if (cur->len > 0) return busy; /* no free slot: after the next sends */
    }
    cur->active = 0;
    __atomic_store_n(&f->tail, tail + 1, __ATOMIC_RELEASE);
    busy = 1;
  }
}

/* Lays one received message (bytes of records) into this rank's window. */
static ncclResult_t apply(port_t *pt, const char *msg, size_t bytes) {
  brd_proxy_t *px = pt->px;
  size_t at = 0;
  while (at + sizeof(rec_hdr_t) <= bytes) {
    rec_hdr_t h;
    memcpy(&h, msg + at, sizeof(h));
    const char *data = msg + at + sizeof(h);
    size_t padded = ((size_t)h.len + 7) & ~(size_t)7;
    if (h.kind == REC_BYE) {
      __atomic_store_n(&pt->bye_seen, 1, __ATOMIC_RELEASE);
    } else if (h.kind == REC_FAIL) {
      proxy_fail(px, pt, ncclRemoteError, "", (int)h.off, NULL);
      return ncclRemoteError;
    } else if (at + sizeof(h) + h.len > bytes || h.off > px->bytes ||
               h.len > px->bytes - h.off) {
      proxy_fail(px, pt, ncclInternalError, "a damaged message (a write outside the window)",
                 -1, NULL);
      return ncclInternalError;
    } else if (h.kind == REC_DATA) {
      memcpy(px->own + h.off, data, h.len);
    } else {
      /* LL packets and semaphore words land whole: 8-byte atomic stores.
       * A semaphore record's first word is stored last (a release): it
       * publishes the others (the output exchange's tag). */
      _Atomic uint64_t *dst = (_Atomic uint64_t *)(void *)(px->own + h.off);
      size_t nw = h.len / 8;
      for (size_t w = h.kind == REC_SEM ? 1 : 0; w < nw; w++) {
        uint64_t v;
        memcpy(&v, data + w * 8, 8);
        atomic_store_explicit(&dst[w], v, memory_order_release);
      }
      if (h.kind == REC_SEM && nw > 0) {
        uint64_t v;
        memcpy(&v, data, 8);
        atomic_store_explicit(&dst[0], v, memory_order_release);
      }
    }
    at += sizeof(h) + padded;
  }
  return ncclSuccess;
}

/* A net call on comm (one of pt's) failed: the end of a peer that said
 * BYE is normal; a failed send waits a little for the BYE that may be in
 * flight. What the net said about comm is taken now, on the thread that
 * made the call, before any other call can replace it. */
static void net_error(port_t *pt, void *comm, int is_send, ncclResult_t res, const char *what) {
  const brd_net_ops_t *net = pt->px->net;
  if (__atomic_load_n(&pt->bye_seen, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&pt->dead, 1, __ATOMIC_RELEASE);
    return;
  }
  if (pt->net_said[0] == '\0' && net->why != NULL)
    (void)net->why(comm, pt->net_said, sizeof(pt->net_said));
  if (is_send) {
    if (pt->send_broken_ns == 0) pt->send_broken_ns = brd_time_now_ns();
    return;
  }
  proxy_fail(pt->px, pt, res, what, -1, pt->net_said);
}

/* One pass over one port. Returns 1 when something happened. */
static int port_progress(port_t *pt) {
  brd_proxy_t *px = pt->px;
  const brd_net_ops_t *net = px->net;
  int busy = 0;
  if (pt->dead) return 0;
  if (pt->send_broken_ns != 0) {
    if (pt->bye_seen) {
      __atomic_store_n(&pt->dead, 1, __ATOMIC_RELEASE);
      return 0;
    }
    if (brd_time_now_ns() - pt->send_broken_ns > SEND_BROKEN_GRACE_NS)
      proxy_fail(px, pt, ncclRemoteError, "a send failed and the peer never said it was done",
                 -1, pt->net_said);
  } else {
    /* Close the open slot when everything before it is posted. */
    pthread_mutex_lock(&pt->mu);
    if (pt->post == pt->head && pt->head - pt->tail < NSEND && pt->send[pt->head % NSEND].fill > 0)
      pt->head++;
    uint64_t head = pt->head;
    pthread_mutex_unlock(&pt->mu);
    while (pt->post < head) {
      send_slot_t *s = &pt->send[pt->post % NSEND];
      void *req = NULL;
      ncclResult_t res = net->isend(pt->send_comm, pt->sbuf + (pt->post % NSEND) * SLOT_BYTES,
                                    s->fill, 0, pt->send_mh, NULL, &req);
      if (res != ncclSuccess) {
        net_error(pt, pt->send_comm, 1, res, "isend");
        return 1;
      }
      if (req == NULL) break; /* the net is full: later */
      s->req = req;
      if (px->comm->prof != NULL)
        brd_prof_proxy_start(px->comm->prof, pt->peer, 1, s->fill, &s->prof);
      pt->post++;
      busy = 1;
    }
    while (pt->tail < pt->post) {
      send_slot_t *s = &pt->send[pt->tail % NSEND];
      int done = 0, size = 0;
      ncclResult_t res = net->test(s->req, &done, &size);
      if (res != ncclSuccess) {
        net_error(pt, pt->send_comm, 1, res, "a send");
        return 1;
      }
      if (!done) break;
      if (px->comm->prof != NULL) brd_prof_proxy_stop(px->comm->prof, &s->prof);
      pthread_mutex_lock(&pt->mu);
      s->fill = 0;
      s->req = NULL;
      pt->tail++;
      pthread_cond_broadcast(&pt->cv);
      pthread_mutex_unlock(&pt->mu);
      busy = 1;
    }
  }
  /* Receives: keep NRECV posted, apply completions in order. */
  for (int i = 0; i < NRECV && !pt->dead; i++) {
    uint64_t k = pt->rnext + (uint64_t)i;
    if (pt->rreq[k % NRECV] != NULL) continue;
    void *data = pt->rbuf + (k % NRECV) * SLOT_BYTES;
    size_t size = SLOT_BYTES;
    int tag = 0;
    void *req = NULL;
    ncclResult_t res = net->irecv(pt->recv_comm, 1, &data, &size, &tag, &pt->recv_mh, NULL, &req);
    if (res != ncclSuccess) {
      net_error(pt, pt->recv_comm, 0, res, "irecv");
      return 1;
    }
    if (req == NULL) break;
    pt->rreq[k % NRECV] = req;
  }
  while (!pt->dead && pt->rreq[pt->rnext % NRECV] != NULL) {
    int done = 0, size = 0;
    ncclResult_t res = net->test(pt->rreq[pt->rnext % NRECV], &done, &size);
    if (res != ncclSuccess) {
      net_error(pt, pt->recv_comm, 0, res, "a receive (the connection closed or timed out "
                "before the peer was done)");
      return 1;
    }
    if (!done) break;
    pt->rreq[pt->rnext % NRECV] = NULL;
    brd_prof_op_t prof;
    if (px->comm->prof != NULL)
      brd_prof_proxy_start(px->comm->prof, pt->peer, 0, (size_t)size, &prof);
    ncclResult_t ares = apply(pt, pt->rbuf + (pt->rnext % NRECV) * SLOT_BYTES, (size_t)size);
    if (px->comm->prof != NULL) brd_prof_proxy_stop(px->comm->prof, &prof);
    if (ares != ncclSuccess) return 1;
    brd_exec_bell_ring(&px->bell); /* host executor threads asleep on it */
    pt->rnext++;
    busy = 1;
  }
  return busy;
}

/* Records a put appended that the thread has not taken: an open slot it
 * would close, or closed slots it has not tried to post (when sends are in
 * flight, their completion is what wakes it). */
static int proxy_has_work(brd_proxy_t *px) {
  int work = 0;
  for (int r = 0; r < px->nranks && !work; r++) {
    port_t *pt = px->ports[r];
    if (pt == NULL || __atomic_load_n(&pt->dead, __ATOMIC_ACQUIRE)) continue;
    pthread_mutex_lock(&pt->mu);
    work = (pt->post < pt->head && pt->post == pt->tail) ||
           (pt->post == pt->head && pt->head - pt->tail < NSEND &&
            pt->send[pt->head % NSEND].fill > 0);
    pthread_mutex_unlock(&pt->mu);
  }
  return work;
}

/* A pass found nothing to do: sleep in poll until a connection can
 * progress (the net's descriptors: the socket net's control sockets, the
 * IB net's completion channels), an executor puts (the eventfd) or
 * SLEEP_MS pass; not at all when a net says progress just came in. Where
 * that cannot cover every source of work (a net without descriptors, an
 * IB send waiting for its clear-to-send, or the CUDA executor's FIFOs,
 * which ring nothing), a 20 us nap instead. The progress thread. */
static void proxy_sleep(brd_proxy_t *px) {
  int n = 0, ok = px->efd >= 0 && px->pfds != NULL && px->net->poll_fd != NULL &&
                  atomic_load(&px->nfifos) == 0;
  if (ok) px->pfds[n++] = (struct pollfd){px->efd, POLLIN, 0};
  for (int r = 0; r < px->nranks && ok; r++) {
    port_t *pt = px->ports[r];
    if (pt == NULL || pt->dead) continue;
    /* A failed send's socket stays readable with its error: the grace
     * before failing is a time, which SLEEP_MS covers. */
    void *comms[2] = {pt->send_broken_ns != 0 ? NULL : pt->send_comm, pt->recv_comm};
    for (int k = 0; k < 2 && ok; k++) {
      if (comms[k] == NULL) continue;
      short ev = 0;
      int fd = px->net->poll_fd(comms[k], &ev);
      if (fd == BRD_NET_POLL_READY) return; /* progress came in: no sleep */
      if (fd < 0) ok = 0;
      else if (ev != 0) px->pfds[n++] = (struct pollfd){fd, ev, 0};
    }
  }
  if (!ok) {
    if (atomic_load(&px->nfifos) > 0) {
      /* CUDA mode: the FIFOs ring nothing, but a launch pokes (heat). */
      uint32_t seen = __atomic_load_n(&px->poke, __ATOMIC_SEQ_CST);
      __atomic_store_n(&px->napping, 1, __ATOMIC_SEQ_CST);
      if (!hot(px)) brd_futex_wait(&px->poke, seen, NAP_NS);
      __atomic_store_n(&px->napping, 0, __ATOMIC_SEQ_CST);
    } else {
      struct timespec nap = {0, NAP_NS};
      nanosleep(&nap, NULL);
    }
    return;
  }
  __atomic_store_n(&px->sleeping, 1, __ATOMIC_SEQ_CST);
  if (!proxy_has_work(px) && !atomic_load(&px->stop)) (void)poll(px->pfds, (nfds_t)n, SLEEP_MS);
  __atomic_store_n(&px->sleeping, 0, __ATOMIC_SEQ_CST);
  if (px->pfds[0].revents & POLLIN) {
    uint64_t v;
    (void)!read(px->efd, &v, sizeof(v));
  }
}

static void *proxy_main(void *arg) {
  brd_proxy_t *px = arg;
  uint32_t idle = 0;
  int quiet = 0;
  while (!atomic_load(&px->stop)) {
    int busy = 0;
    /* Once failed, the nets' warnings about the other connections are
     * consequences: logged as INFO, so the cause stays the last error. */
    if (!quiet && __atomic_load_n(&px->failed, __ATOMIC_ACQUIRE)) {
      (void)brd_log_nowarn_swap(BRD_SUBSYS_NET);
      quiet = 1;
    }
    int nf = atomic_load(&px->nfifos), took = 0;
    for (int f = 0; f < nf && !__atomic_load_n(&px->failed, __ATOMIC_ACQUIRE); f++)
      took |= fifo_drain(px, f);
    if (took) heat(px);
    busy = took;
    for (int r = 0; r < px->nranks; r++)
      if (px->ports[r] != NULL) busy |= port_progress(px->ports[r]);
    if (busy) {
      idle = 0;
    } else if (++idle < IDLE_YIELDS || (nf > 0 && hot(px))) {
      sched_yield(); /* CUDA mode, hot: the next trigger may come any moment */
    } else {
      proxy_sleep(px);
    }
  }
  return NULL;
}

/* Listen, exchange handles, then connect and accept every port until all
 * are up. */
static ncclResult_t ports_connect(brd_proxy_t *px) {
  struct ncclComm *comm = px->comm;
  const brd_net_ops_t *net = px->net;
  for (int r = 0; r < px->nranks; r++) {
    port_t *pt = px->ports[r];
    if (pt == NULL) continue;
    CHECK(net->listen(px->ctx, px->dev, pt->handle, &pt->listen_comm));
    CHECK(brd_boot_send(comm->boot, r, BOOT_TAG, pt->handle, sizeof(pt->handle)));
  }
  for (int r = 0; r < px->nranks; r++) {
    port_t *pt = px->ports[r];
    if (pt == NULL) continue;
    CHECK(brd_boot_recv(comm->boot, r, BOOT_TAG, pt->peer_handle, sizeof(pt->peer_handle)));
  }
  int64_t deadline =
      brd_time_now_ns() + (int64_t)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT) * 1000000000LL;
  for (;;) {
    int pending = 0, progressed = 0;
    for (int r = 0; r < px->nranks; r++) {
      port_t *pt = px->ports[r];
      if (pt == NULL) continue;
      if (pt->send_comm == NULL) {
        CHECK(net->connect(px->ctx, px->dev, pt->peer_handle, &pt->send_comm, NULL));
        progressed |= pt->send_comm != NULL;
      }
      if (pt->recv_comm == NULL) {
        CHECK(net->accept(pt->listen_comm, &pt->recv_comm, NULL));
        progressed |= pt->recv_comm != NULL;
      }
      pending += (pt->send_comm == NULL) + (pt->recv_comm == NULL);
    }
    if (pending == 0) break;
    if (atomic_load(&comm->abort_flag)) return ncclSystemError;
    if (brd_time_now_ns() > deadline) {
      for (int r = 0; r < px->nranks; r++) {
        port_t *pt = px->ports[r];
        if (pt == NULL || (pt->send_comm != NULL && pt->recv_comm != NULL)) continue;
        WARN("rank %d: no network connection to rank %d over net %s after %d s (%s side "
             "pending). Check that both hosts reach each other on the interface "
             "NCCL_SOCKET_IFNAME selects, or raise BRAID_BOOTSTRAP_TIMEOUT",
             comm->rank, r, net->name, (int)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT),
             pt->send_comm == NULL ? "connect" : "accept");
        break;
      }
      return ncclRemoteError;
    }
    if (!progressed) {
      struct timespec nap = {0, 100000};
      nanosleep(&nap, NULL);
    }
  }
  for (int r = 0; r < px->nranks; r++) {
    port_t *pt = px->ports[r];
    if (pt == NULL) continue;
    CHECK(net->regMr(pt->send_comm, pt->sbuf, NSEND * SLOT_BYTES, BRD_NET_PTR_HOST,
                     &pt->send_mh));
    CHECK(net->regMr(pt->recv_comm, pt->rbuf, NRECV * SLOT_BYTES, BRD_NET_PTR_HOST,
                     &pt->recv_mh));
  }
  return ncclSuccess;
}

/* Mirrors of the host executor: plain zeroed memory. */
static ncclResult_t host_alloc(void *ctx, size_t bytes, void **host_out, char **dev_out) {
  (void)ctx;
  void *p = calloc(1, bytes);
  if (p == NULL) return ncclSystemError;
  *host_out = p;
  *dev_out = p;
  return ncclSuccess;
}

static void host_free(void *ctx, void *host) {
  (void)ctx;
  free(host);
}

static void port_free(brd_proxy_t *px, port_t *pt) {
  const brd_net_ops_t *net = px->net;
  if (px->comm->prof != NULL) /* sends still posted: their events end here */
    for (int i = 0; i < NSEND; i++) brd_prof_proxy_stop(px->comm->prof, &pt->send[i].prof);
  if (pt->send_mh != NULL) net->deregMr(pt->send_comm, pt->send_mh);
  if (pt->recv_mh != NULL) net->deregMr(pt->recv_comm, pt->recv_mh);
  if (pt->send_comm != NULL) net->closeSend(pt->send_comm);
  if (pt->recv_comm != NULL) net->closeRecv(pt->recv_comm);
  if (pt->listen_comm != NULL) net->closeListen(pt->listen_comm);
  pthread_cond_destroy(&pt->cv);
  pthread_mutex_destroy(&pt->mu);
  if (pt->ex.mirror != NULL) px->mem.free(px->mem.ctx, pt->ex.mirror);
  free(pt->sbuf);
  free(pt->rbuf);
  free(pt);
}

static ncclResult_t port_alloc(brd_proxy_t *px, int peer, port_t **pt_out) {
  port_t *pt = calloc(1, sizeof(*pt));
  if (pt == NULL) goto oom;
  pt->px = px;
  pt->peer = peer;
  pthread_mutex_init(&pt->mu, NULL);
  pthread_cond_init(&pt->cv, NULL);
  pt->ex.put = port_put;
  pt->ex.put_from = port_put_from;
  pt->ex.bytes = px->bytes;
  pt->ex.failed = &px->failed;
  void *host = NULL;
  if (px->mem.alloc(px->mem.ctx, px->bytes, &host, &pt->mirror_dev) == ncclSuccess)
    pt->ex.mirror = host;
  pt->sbuf = malloc(NSEND * SLOT_BYTES);
  pt->rbuf = malloc(NRECV * SLOT_BYTES);
  if (pt->ex.mirror == NULL || pt->sbuf == NULL || pt->rbuf == NULL) {
    port_free(px, pt);
    goto oom;
  }
  *pt_out = pt;
  return ncclSuccess;
oom:
  WARN("rank %d: out of host memory for the port channel to rank %d (%zu bytes)",
       px->comm->rank, peer, 2 * px->bytes);
  return ncclSystemError;
}

/* See proxy.h. */
ncclResult_t brd_proxy_check(struct ncclComm *comm, const uint8_t *port) {
  char why[512] = "";
  int nports = 0, first = -1;
  for (int r = 0; r < comm->nranks; r++)
    if (port[r]) {
      nports++;
      if (first < 0) first = r;
    }
  if (nports == 0 || brd_net_get(why, sizeof(why)) != NULL) return ncclSuccess;
  WARN("rank %d: %d peers (rank %d first) cannot share memory with this rank and no "
       "network is usable (%s). Put the ranks on one host, allow shared memory and "
       "peer-to-peer (NCCL_SHM_DISABLE, NCCL_P2P_DISABLE), or fix NCCL_NET / "
       "NCCL_NET_PLUGIN / NCCL_SOCKET_IFNAME", comm->rank, nports, first, why);
  return ncclInvalidUsage;
}

static int proxy_dev(const struct ncclComm *comm, int ndev);

/* proxy_dev, taking the choice brd_proxy_nic_mbps kept in the
 * communicator if it was made for as many devices. */
static int choice_take(struct ncclComm *comm, int ndev) {
  int kept = comm->proxy_dev_kept;
  comm->proxy_dev_kept = 0;
  if (kept > 0 && comm->proxy_ndev_kept == ndev) return kept - 1;
  return proxy_dev(comm, ndev);
}

/* See proxy.h. A context of the net's own for the question (a net lists
 * its devices once initialised), given back at once; the device chosen is
 * kept for this rank's proxy. */
int brd_proxy_nic_mbps(struct ncclComm *comm) {
  char why[512] = "";
  const brd_net_ops_t *net = brd_net_get(why, sizeof(why));
  if (net == NULL) return 0;
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  if (net->init(&ctx, comm->comm_hash, &cfg, brd_net_log, NULL) != ncclSuccess) return 0;
  int ndev = 0, mbps = 0;
  brd_net_props_t props;
  memset(&props, 0, sizeof(props));
  if (net->devices(&ndev) == ncclSuccess && ndev > 0) {
    int dev = proxy_dev(comm, ndev);
    comm->proxy_dev_kept = dev + 1;
    comm->proxy_ndev_kept = ndev;
    if (net->getProperties(dev, &props) == ncclSuccess && props.speed > 0) mbps = props.speed;
  }
  if (net->finalize != NULL) (void)net->finalize(ctx);
  return mbps;
}

/* The net device this rank's proxy uses, of ndev: with several, the
 * nearest to this rank's GPU (or CPU) as topology finds it, the local
 * ranks spread over the devices equally near; without topology (or with
 * one device) local_rank % ndev. Blocks on sysfs and hwloc once. */
static int proxy_dev(const struct ncclComm *comm, int ndev) {
  int dev = comm->local_rank % ndev;
  if (ndev < 2 || comm->peers == NULL) return dev;
  brd_topo_rank_t *me = calloc(1, sizeof(*me));
  if (me == NULL) return dev; /* the fallback needs no memory */
  const brd_peer_info_t *p = &comm->peers[comm->rank];
  brd_topo_rank_discover(p->host_hash, p->backend == BRD_DEVICE_HOST ? NULL : p->bus_id_str,
                         me);
  int best = brd_topo_rank_nearest_nic(me);
  if (best >= 0 && me->nics[best].dev >= 0) {
    int ties[BRD_TOPO_NICS_MAX], nt = 0;
    for (int i = 0; i < me->nnics; i++)
      if (me->nics[i].dev >= 0 && me->nics[i].dev < ndev &&
          me->nics[i].path == me->nics[best].path)
        ties[nt++] = me->nics[i].dev;
    if (nt > 0) dev = ties[comm->local_rank % nt];
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "rank %d: net device %d, %s from this rank "
         "(%d device(s) as near)", comm->rank, dev,
         brd_topo_path_name(me->nics[best].path), nt);
  }
  free(me);
  return dev;
}

/* See proxy.h. */
ncclResult_t brd_proxy_create(struct ncclComm *comm, const uint8_t *port, char *own,
                              size_t bytes, const brd_proxy_mem_t *mem,
                              brd_proxy_t **proxy_out) {
  ncclResult_t res = ncclSuccess;
  char why[512] = "";
  int nports = 0;
  for (int r = 0; r < comm->nranks; r++) nports += port[r] != 0;
  CHECK(brd_proxy_check(comm, port));
  const brd_net_ops_t *net = brd_net_get(why, sizeof(why));
  if (net == NULL) return ncclInternalError; /* brd_proxy_check said yes */
  brd_proxy_t *px = calloc(1, sizeof(*px));
  if (px != NULL) px->ports = calloc((size_t)comm->nranks, sizeof(*px->ports));
  if (px == NULL || px->ports == NULL) {
    free(px);
    WARN("rank %d: out of host memory for the proxy", comm->rank);
    return ncclSystemError;
  }
  px->comm = comm;
  px->culprit = -1;
  px->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* -1: the proxy naps instead */
  px->pfds = calloc(1 + 2 * (size_t)nports, sizeof(*px->pfds));
  px->mem = mem != NULL ? *mem : (brd_proxy_mem_t){NULL, host_alloc, host_free};
  for (int r = comm->nranks - 1; r >= 0; r--)
    if (port[r]) px->first = r;
  px->net = net;
  px->own = own;
  px->bytes = bytes;
  px->nranks = comm->nranks;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  CHECK_GOTO(net->init(&px->ctx, comm->comm_hash, &cfg, brd_net_log, NULL), res, fail);
  int ndev = 0;
  CHECK_GOTO(net->devices(&ndev), res, fail);
  if (ndev <= 0) {
    WARN("rank %d: net %s has no device", comm->rank, net->name);
    res = ncclInvalidUsage;
    goto fail;
  }
  px->dev = choice_take(comm, ndev);
  for (int r = 0; r < comm->nranks; r++)
    if (port[r]) CHECK_GOTO(port_alloc(px, r, &px->ports[r]), res, fail);
  CHECK_GOTO(ports_connect(px), res, fail);
  int err = pthread_create(&px->thread, NULL, proxy_main, px);
  if (err != 0) {
    WARN("rank %d: cannot start the proxy thread: %s", comm->rank, strerror(err));
    res = ncclSystemError;
    goto fail;
  }
  px->thread_started = 1;
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "rank %d: %d port channels over net %s device %d "
       "(%d send slots of %zu KiB per peer)", comm->rank, nports, net->name, px->dev, NSEND,
       SLOT_BYTES >> 10);
  *proxy_out = px;
  return ncclSuccess;
fail:
  brd_proxy_destroy(px);
  return res;
}

/* See proxy.h. */
char *brd_proxy_mirror_dev(brd_proxy_t *p, int peer) {
  return p != NULL && p->ports[peer] != NULL ? p->ports[peer]->mirror_dev : NULL;
}

/* See proxy.h. */
ncclResult_t brd_proxy_fifo_add(brd_proxy_t *p, brd_exec_fifo_t *fifo) {
  int n = atomic_load(&p->nfifos);
  if (n >= MAX_FIFOS) {
    WARN("rank %d: the proxy drains at most %d trigger FIFOs", p->comm->rank, MAX_FIFOS);
    return ncclInternalError;
  }
  p->fifos[n] = fifo;
  atomic_store(&p->nfifos, n + 1); /* published after the pointer */
  return ncclSuccess;
}

/* See proxy.h. */
brd_exec_port_t *brd_proxy_port(brd_proxy_t *p, int peer) {
  return p != NULL && p->ports[peer] != NULL ? &p->ports[peer]->ex : NULL;
}

/* See proxy.h. */
int *brd_proxy_failed(brd_proxy_t *p) { return p != NULL ? &p->failed : NULL; }

/* See proxy.h. */
brd_exec_bell_t *brd_proxy_bell(brd_proxy_t *p) { return p != NULL ? &p->bell : NULL; }

/* See proxy.h. */
void brd_proxy_poke(brd_proxy_t *p) {
  if (p == NULL) return;
  heat(p);
  if (__atomic_exchange_n(&p->napping, 0, __ATOMIC_SEQ_CST)) {
    __atomic_add_fetch(&p->poke, 1, __ATOMIC_SEQ_CST);
    brd_futex_wake_all(&p->poke);
  }
}

/* See proxy.h. */
const char *brd_proxy_failure(brd_proxy_t *p) {
  return p != NULL && __atomic_load_n(&p->why_set, __ATOMIC_ACQUIRE) ? p->why : NULL;
}

/* See proxy.h. */
void brd_proxy_destroy(brd_proxy_t *px) {
  if (px == NULL) return;
  if (px->thread_started) {
    /* The executor is done (the backend quiesced it), but triggers it
     * posted may still wait in a FIFO: they go before BYE, which must be
     * the last record a peer gets. */
    int64_t deadline = brd_time_now_ns() + DRAIN_NS;
    for (int f = 0; f < atomic_load(&px->nfifos); f++) {
      brd_exec_fifo_t *fifo = px->fifos[f];
      for (;;) {
        uint64_t tail = __atomic_load_n(&fifo->tail, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&fifo->ring[tail % BRD_EXEC_FIFO_ENTRIES].seq, __ATOMIC_ACQUIRE) !=
                tail + 1 ||
            __atomic_load_n(&px->failed, __ATOMIC_ACQUIRE) || brd_time_now_ns() >= deadline)
          break;
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
      }
    }
    /* BYE last on every healthy port (FAIL, naming the lost rank, when
     * this rank gives up), then a bounded wait for the sends. */
    int failed = __atomic_load_n(&px->failed, __ATOMIC_ACQUIRE) != 0;
    int culprit = __atomic_load_n(&px->culprit, __ATOMIC_ACQUIRE);
    for (int r = 0; r < px->nranks; r++) {
      port_t *pt = px->ports[r];
      if (pt == NULL || __atomic_load_n(&pt->dead, __ATOMIC_ACQUIRE)) continue;
      pthread_mutex_lock(&pt->mu);
      send_slot_t *s = open_slot(pt, sizeof(rec_hdr_t));
      if (s != NULL)
        rec_append(pt, s, failed ? (uint64_t)culprit : 0, 0, failed ? REC_FAIL : REC_BYE, NULL);
      pthread_mutex_unlock(&pt->mu);
    }
    proxy_wake(px);
    deadline = brd_time_now_ns() + DRAIN_NS;
    for (int r = 0; r < px->nranks; r++) {
      port_t *pt = px->ports[r];
      while (pt != NULL && !__atomic_load_n(&pt->dead, __ATOMIC_ACQUIRE) &&
             brd_time_now_ns() < deadline) {
        pthread_mutex_lock(&pt->mu);
        int drained = pt->tail == pt->head && pt->send[pt->head % NSEND].fill == 0;
        pthread_mutex_unlock(&pt->mu);
        if (drained) break;
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
      }
    }
    atomic_store(&px->stop, 1);
    proxy_wake(px);
    pthread_join(px->thread, NULL);
  }
  for (int r = 0; r < px->nranks; r++)
    if (px->ports[r] != NULL) port_free(px, px->ports[r]);
  if (px->ctx != NULL && px->net->finalize != NULL) px->net->finalize(px->ctx);
  if (px->efd >= 0) close(px->efd);
  free(px->pfds);
  free(px->ports);
  free(px);
}
