/*
 * Braid bootstrap: the rendezvous root, the rank ring, and tagged
 * point-to-point messages between ranks (see bootstrap.h).
 *
 * Wire formats are fixed-size structs; every rank runs the same library
 * build, so host byte order and layout are shared. A connection to a rank's
 * listener starts with conn_hdr (communicator magic, sender rank, tag);
 * connections with another magic (strays, liveness probes) are dropped.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "base/param.h"

#define BOOT_PROTO 0x3154304f42445242ull /* "BRDBO0T1" */
#define BOOT_MSG_LEN 1024

/* Tags below BRD_BOOT_TAG_MAX belong to callers; internal ones carry a kind
 * and a sequence number so successive collectives never match each other. */
#define TAG_RING (-1)
#define TAG_KIND_SPLIT 1
#define TAG_KIND_BCAST 2
#define TAG_KIND_BARRIER 3
#define TAG_INTERNAL(kind, seq) (BRD_BOOT_TAG_MAX | ((kind) << 24) | (int)((seq) & 0xffffffu))

#define PROBE_INTERVAL_NS 1000000000LL /* dead-peer check while receiving */
#define PROBE_TIMEOUT_MS 200
#define HDR_WAIT_NS 1000000000LL       /* a connection must identify itself within this */
#define REPLY_GRACE_S 2                /* a rank outwaits its root by this much */
#define SLICE_MS 20

_Static_assert(sizeof(brd_boot_handle_t) <= NCCL_UNIQUE_ID_BYTES,
               "bootstrap handle must fit in ncclUniqueId");

/* Rank -> root registration. */
struct boot_hello {
  uint64_t proto;
  uint64_t magic;            /* the magic of the id this rank was given */
  int32_t rank, nranks;
  int32_t iroot, nroots;     /* which root this is, out of how many ids */
  int32_t extra;             /* 1: first rank of the next root's block */
  int32_t pid;               /* of the registering process */
  union brd_sock_addr listen; /* where this rank accepts ring and p2p */
  uint8_t pad2[4];
};
_Static_assert(sizeof(struct boot_hello) == 72, "boot_hello is a wire format");

/* Root -> rank answer. */
struct boot_reply {
  int32_t status;            /* ncclResult_t */
  int32_t pad;
  union brd_sock_addr next;  /* listener of the next rank in the ring */
  uint8_t pad2[4];
  char msg[BOOT_MSG_LEN];    /* why, when status != ncclSuccess */
};

/* First bytes of every connection to a rank's listener. */
struct conn_hdr {
  uint64_t magic;
  int32_t rank;
  int32_t tag;
};

struct unexpected {
  int peer, tag;
  struct brd_sock sock;      /* owned; header already read */
  struct unexpected *next;
};

struct brd_boot {
  int rank, nranks;
  uint64_t magic;
  int64_t timeout_s;
  _Atomic int *abort;                 /* borrowed: the owner's abort flag */
  _Atomic(_Atomic int *) extra_abort; /* borrowed: a child's flag, or NULL */
  _Atomic int busy;                   /* operations in progress */
  uint32_t coll_seq;                  /* same on every rank: bcast/barrier count */
  struct brd_sock listen;             /* owned */
  struct brd_sock ring_next;          /* owned: to rank+1 */
  struct brd_sock ring_prev;          /* owned: from rank-1 */
  union brd_sock_addr *peer_addrs;    /* owned: nranks listeners */
  struct unexpected *unexpected;      /* owned: connections not yet received */
};

/* ---------------------------------------------------------------------- */
/* Rank blocks per root, NCCL's split of nranks over nroots ids.           */

static int root_first_rank(int root, int nranks, int nroots) {
  int rpr = nranks / nroots, rmr = nranks % nroots;
  return root * rpr + (root < rmr ? root : rmr);
}

static int root_nranks(int root, int nranks, int nroots) {
  return nranks / nroots + (root < nranks % nroots ? 1 : 0);
}

static int root_of_rank(int rank, int nranks, int nroots) {
  int rpr = nranks / nroots, rmr = nranks % nroots;
  int d = rmr * (rpr + 1);
  return rank < d ? rank / (rpr + 1) : (rank - d) / rpr + rmr;
}

static void handle_get(const ncclUniqueId *id, brd_boot_handle_t *h) {
  memcpy(h, id->internal, sizeof(*h));
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---------------------------------------------------------------------- */
/* The root.                                                               */

enum { CONN_HELLO, CONN_HELD, CONN_DONE };

struct root_conn {
  struct brd_sock sock;
  struct boot_hello hello;
  size_t got;
  int state;
  int64_t accepted_ns;       /* a hello must arrive within HDR_WAIT_NS */
};

/* A root thread is detached; the registry and the thread each hold a
 * reference, and whoever drops the last one frees. Waiting for a root to
 * end means waiting for `done`, bounded. */
struct boot_root {
  /* Written before the thread starts, read-only after. */
  uint64_t magic;
  union brd_sock_addr addr;    /* where it listens */
  int64_t timeout_s;
  struct brd_sock listen;      /* owned by the thread once it runs */
  /* Cross-thread. */
  _Atomic int stop;            /* set by brd_boot_root_stop / exit */
  _Atomic int done;            /* set by the thread as it returns */
  _Atomic int refs;
  struct boot_root *next;      /* registry link, under roots_lock */
};

#define ROOT_STOP_WAIT_NS 2000000000LL
#define ROOT_LINGER_NS 2000000000LL

static void root_release(struct boot_root *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) free(r);
}

/* State of one root thread's run; only that thread touches it. */
struct root_run {
  struct boot_root *root;
  struct root_conn *conns;
  int nconns, cap;
  struct pollfd *pfds;
  int *pfd_conn;
  int have_params;
  int nranks, nroots, iroot, first, n_own, n_expected;
  int hint_expected;           /* n_expected as a rejected rank saw it */
  int *slot;                   /* n_expected entries: conn index or -1 */
  int registered, answered;
  int failed;
  struct boot_reply fail;
  int64_t deadline;            /* 0 until the first registration */
};

static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;
static struct boot_root *roots;
static pthread_once_t roots_once = PTHREAD_ONCE_INIT;

static void conn_who(const struct root_conn *c, char *buf, size_t len) {
  char line[BRD_SOCK_ADDR_STRLEN];
  /* A registration without a listener address is named by its connection. */
  const union brd_sock_addr *a =
      c->hello.listen.sa.sa_family == AF_UNSPEC ? &c->sock.addr : &c->hello.listen;
  snprintf(buf, len, "rank %d at %s (pid %d)", (int)c->hello.rank,
           brd_sock_addr_str(a, line), (int)c->hello.pid);
}

static void root_send_reply(struct root_run *run, struct root_conn *c,
                            const struct boot_reply *rep) {
  brd_sock_ctl_t ctl = {brd_time_now_ns() + 1000000000LL,
                        {&run->root->stop, NULL}, "a rank"};
  struct boot_reply copy = *rep;
  /* The rank may have died; it then learns nothing, and that is fine. */
  (void)brd_sock_send(&c->sock, &copy, sizeof(copy), &ctl);
  brd_sock_close(&c->sock);
  c->state = CONN_DONE;
  run->answered++;
}

/* Fails the rendezvous: every rank held now or arriving later gets the
 * same code and reason. The first reason wins. */
static void root_fail(struct root_run *run, ncclResult_t code, const char *msg) {
  if (!run->failed) {
    run->failed = 1;
    memset(&run->fail, 0, sizeof(run->fail));
    run->fail.status = code;
    snprintf(run->fail.msg, sizeof(run->fail.msg), "%s", msg);
    INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap root: rendezvous failed: %s", msg);
  }
  /* Ranks of other processes first: once a rank of this process has its
   * answer, the process may exit and take this thread with it. */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < run->nconns; i++) {
      struct root_conn *c = &run->conns[i];
      int local = c->hello.pid == (int32_t)getpid();
      if (c->state == CONN_HELD && local == pass) root_send_reply(run, c, &run->fail);
    }
  }
}

static void root_reject(struct root_run *run, struct root_conn *c, ncclResult_t code,
                        const char *msg) {
  c->state = CONN_HELD; /* answered with the others, in root_fail's order */
  root_fail(run, code, msg);
}

static int root_params_ok(const struct boot_hello *h) {
  return h->nranks >= 1 && h->nroots >= 1 && h->nroots <= h->nranks &&
         h->iroot >= 0 && h->iroot < h->nroots;
}

/* Drops a connection that did not authenticate: WARN with its address,
 * and, to a registration of the right protocol, a fixed refusal that says
 * nothing about the rendezvous (no magic, no ranks), so a rank given the
 * wrong id fails at once rather than at the timeout. */
static void root_drop_stranger(struct root_run *run, struct root_conn *c, int foreign) {
  char line[BRD_SOCK_ADDR_STRLEN], mine[BRD_SOCK_ADDR_STRLEN];
  WARN("bootstrap root at %s: dropping a connection from %s that %s; the "
       "rendezvous goes on (if that was a rank of this job, it was given "
       "another ncclUniqueId or another BRAID_COMM_SECRET)",
       brd_sock_addr_str(&run->root->addr, mine), brd_sock_addr_str(&c->sock.addr, line),
       foreign ? "is not a bootstrap registration"
               : "did not present the unique id's magic");
  if (!foreign) {
    struct boot_reply rep;
    brd_sock_ctl_t ctl = {brd_time_now_ns() + 100000000LL, {&run->root->stop, NULL},
                          "a stranger"};
    memset(&rep, 0, sizeof(rep));
    rep.status = ncclInvalidUsage;
    snprintf(rep.msg, sizeof(rep.msg), "the root refused this registration: the "
             "unique id's magic does not match (every rank must use the "
             "ncclUniqueId of the same ncclGetUniqueId call, and the same "
             "BRAID_COMM_SECRET with NCCL_COMM_ID)");
    (void)brd_sock_send(&c->sock, &rep, sizeof(rep), &ctl);
  }
  brd_sock_close(&c->sock);
  c->state = CONN_DONE;
}

static void root_on_hello(struct root_run *run, int ci) {
  struct root_conn *c = &run->conns[ci];
  const struct boot_hello *h = &c->hello;
  char who[BRD_SOCK_ADDR_STRLEN + 32], other[BRD_SOCK_ADDR_STRLEN + 32];
  char msg[BOOT_MSG_LEN];
  int s;

  /* Authentication first: nothing a connection says counts, and nothing
   * is sent to it, until it has shown the id's magic. One that fails is
   * dropped and the root keeps listening, so a stranger (or a rank given
   * another id) cannot end the rendezvous of the ranks that hold the id. */
  if (h->proto != BOOT_PROTO || h->magic != run->root->magic) {
    root_drop_stranger(run, c, h->proto != BOOT_PROTO);
    return;
  }
  conn_who(c, who, sizeof(who));
  if (run->deadline == 0) run->deadline = brd_sock_deadline(run->root->timeout_s);
  if (!run->have_params && run->hint_expected == 0 && root_params_ok(h))
    run->hint_expected = root_nranks(h->iroot, h->nranks, h->nroots) + (h->nroots > 1);
  if (run->failed) {
    root_send_reply(run, c, &run->fail);
    return;
  }
  if (!run->have_params) {
    if (!root_params_ok(h)) {
      snprintf(msg, sizeof(msg), "%s registered with nranks=%d, root %d of %d, "
               "which is not a valid rendezvous", who, (int)h->nranks,
               (int)h->iroot, (int)h->nroots);
      root_reject(run, c, ncclInvalidUsage, msg);
      return;
    }
    run->nranks = h->nranks;
    run->nroots = h->nroots;
    run->iroot = h->iroot;
    run->first = root_first_rank(h->iroot, h->nranks, h->nroots);
    run->n_own = root_nranks(h->iroot, h->nranks, h->nroots);
    run->n_expected = run->n_own + (h->nroots > 1 ? 1 : 0);
    run->slot = malloc((size_t)run->n_expected * sizeof(int));
    if (run->slot == NULL) {
      root_reject(run, c, ncclSystemError, "the bootstrap root ran out of host memory");
      return;
    }
    for (int i = 0; i < run->n_expected; i++) run->slot[i] = -1;
    run->have_params = 1;
  } else if (h->nranks != run->nranks || h->nroots != run->nroots ||
             h->iroot != run->iroot) {
    int ref = -1;
    for (int i = 0; i < run->n_expected && ref < 0; i++) ref = run->slot[i];
    if (ref >= 0) conn_who(&run->conns[ref], other, sizeof(other));
    else snprintf(other, sizeof(other), "the first rank to register");
    snprintf(msg, sizeof(msg), "%s called init with nranks=%d (unique id %d of "
             "%d) but %s used nranks=%d (unique id %d of %d); every rank must "
             "pass the same nranks and the same list of ids", who,
             (int)h->nranks, (int)h->iroot, (int)h->nroots, other, run->nranks,
             run->iroot, run->nroots);
    root_reject(run, c, ncclInvalidUsage, msg);
    return;
  }
  if (!h->extra) {
    if (h->rank < 0 || h->rank >= run->nranks) {
      snprintf(msg, sizeof(msg), "%s is outside [0, %d)", who, run->nranks);
      root_reject(run, c, ncclInvalidUsage, msg);
      return;
    }
    if (h->rank < run->first || h->rank >= run->first + run->n_own) {
      snprintf(msg, sizeof(msg), "%s registered with root %d, which serves "
               "ranks %d..%d; ranks disagree on the list of unique ids", who,
               run->iroot, run->first, run->first + run->n_own - 1);
      root_reject(run, c, ncclInvalidUsage, msg);
      return;
    }
    s = h->rank - run->first;
  } else {
    int want = root_first_rank((run->iroot + 1) % run->nroots, run->nranks, run->nroots);
    if (run->nroots == 1 || h->rank != want) {
      snprintf(msg, sizeof(msg), "%s registered as the link to root %d, which "
               "rank %d should be", who, (run->iroot + 1) % run->nroots, want);
      root_reject(run, c, ncclInvalidUsage, msg);
      return;
    }
    s = run->n_own;
  }
  if (run->slot[s] >= 0) {
    conn_who(&run->conns[run->slot[s]], other, sizeof(other));
    snprintf(msg, sizeof(msg), "rank %d registered twice, first as %s and "
             "again as %s; every rank number must be used by exactly one "
             "caller", (int)h->rank, other, who);
    root_reject(run, c, ncclInvalidUsage, msg);
    return;
  }
  run->slot[s] = ci;
  c->state = CONN_HELD;
  run->registered++;
  TRACE(BRD_SUBSYS_BOOTSTRAP, "bootstrap root: %s registered (%d/%d)", who,
        run->registered, run->n_expected);
}

static void root_succeed(struct root_run *run) {
  for (int j = 0; j < run->n_expected; j++) {
    struct root_conn *c = &run->conns[run->slot[j]];
    struct boot_reply rep;
    memset(&rep, 0, sizeof(rep));
    rep.status = ncclSuccess;
    if (j < run->n_own) {
      int nj = j + 1 < run->n_own ? j + 1 : (run->nroots > 1 ? run->n_own : 0);
      rep.next = run->conns[run->slot[nj]].hello.listen;
    }
    root_send_reply(run, c, &rep);
  }
}

static void root_missing(struct root_run *run, char *msg, size_t len) {
  char line[BRD_SOCK_ADDR_STRLEN];
  int off, shown = 0;
  off = snprintf(msg, len, "only %d of %d ranks registered with the bootstrap "
                 "root at %s within %lld s; missing:", run->registered,
                 run->n_expected, brd_sock_addr_str(&run->root->addr, line),
                 (long long)run->root->timeout_s);
  for (int j = 0; j < run->n_expected && off < (int)len - 32; j++) {
    if (run->slot[j] >= 0) continue;
    if (shown++ == 8) {
      off += snprintf(msg + off, len - (size_t)off, " ...");
      break;
    }
    off += snprintf(msg + off, len - (size_t)off, " rank %d",
                    j < run->n_own ? run->first + j
                                   : root_first_rank((run->iroot + 1) % run->nroots,
                                                     run->nranks, run->nroots));
  }
  if (off < (int)len)
    snprintf(msg + off, len - (size_t)off, " (never called init, got another "
             "unique id, or died)");
}

static int root_grow(struct root_run *run) {
  int cap = run->cap ? run->cap * 2 : 64;
  struct root_conn *c = realloc(run->conns, (size_t)cap * sizeof(*c));
  struct pollfd *p;
  int *pc;
  if (c == NULL) return -1;
  run->conns = c;
  p = realloc(run->pfds, (size_t)(cap + 1) * sizeof(*p));
  if (p == NULL) return -1;
  run->pfds = p;
  pc = realloc(run->pfd_conn, (size_t)(cap + 1) * sizeof(*pc));
  if (pc == NULL) return -1;
  run->pfd_conn = pc;
  run->cap = cap;
  return 0;
}

static void root_loop(struct root_run *run) {
  struct boot_root *root = run->root;
  char msg[BOOT_MSG_LEN];
  for (;;) {
    int np = 0;
    if (atomic_load_explicit(&root->stop, memory_order_acquire)) {
      root_fail(run, ncclRemoteError, "the bootstrap root was stopped by its "
                "process (a rank there aborted or failed its init)");
      return;
    }
    if (run->deadline != 0 && brd_time_now_ns() >= run->deadline) {
      if (!run->failed && run->have_params) {
        root_missing(run, msg, sizeof(msg));
        root_fail(run, ncclRemoteError, msg);
      }
      return;
    }
    /* Failed and everyone told: nothing left to wait for. */
    if (run->failed &&
        run->answered >= (run->have_params ? run->n_expected : run->hint_expected) &&
        (run->have_params || run->hint_expected > 0))
      return;

    run->pfds[np].fd = root->listen.fd;
    run->pfds[np].events = POLLIN;
    run->pfds[np].revents = 0;
    run->pfd_conn[np++] = -1;
    for (int i = 0; i < run->nconns; i++) {
      if (run->conns[i].state == CONN_DONE) continue;
      /* Silent connections must not pile up: a hello comes at once. */
      if (run->conns[i].state == CONN_HELLO &&
          brd_time_now_ns() - run->conns[i].accepted_ns > HDR_WAIT_NS) {
        char line[BRD_SOCK_ADDR_STRLEN];
        INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap root: dropping a connection from %s "
             "that sent no registration within 1 s",
             brd_sock_addr_str(&run->conns[i].sock.addr, line));
        brd_sock_close(&run->conns[i].sock);
        run->conns[i].state = CONN_DONE;
        continue;
      }
      run->pfds[np].fd = run->conns[i].sock.fd;
      run->pfds[np].events = POLLIN;
      run->pfds[np].revents = 0;
      run->pfd_conn[np++] = i;
    }
    if (poll(run->pfds, (nfds_t)np, SLICE_MS) < 0 && errno != EINTR) {
      root_fail(run, ncclSystemError, "the bootstrap root's poll() failed");
      return;
    }
    for (int k = 1; k < np; k++) {
      int ci = run->pfd_conn[k], closed = 0;
      struct root_conn *c = &run->conns[ci];
      if (run->pfds[k].revents == 0) continue;
      if (c->state == CONN_HELLO) {
        if (brd_sock_try_recv(&c->sock, &c->hello, sizeof(c->hello), &c->got,
                              &closed) != ncclSuccess || closed) {
          brd_sock_close(&c->sock);
          c->state = CONN_DONE;
        } else if (c->got == sizeof(c->hello)) {
          root_on_hello(run, ci);
        }
      } else if (c->state == CONN_HELD) {
        /* A registered rank sends nothing more; readable means it is gone. */
        char byte;
        size_t got = 0;
        if (brd_sock_try_recv(&c->sock, &byte, 1, &got, &closed) != ncclSuccess || closed) {
          char who[BRD_SOCK_ADDR_STRLEN + 32];
          conn_who(c, who, sizeof(who));
          brd_sock_close(&c->sock);
          c->state = CONN_DONE;
          run->registered--;
          snprintf(msg, sizeof(msg), "%s disconnected from the bootstrap root "
                   "before every rank registered (its process exited or "
                   "aborted)", who);
          root_fail(run, ncclRemoteError, msg);
        }
      }
    }
    if (run->pfds[0].revents != 0) {
      for (;;) {
        struct brd_sock s;
        int got = 0;
        if (brd_sock_accept_try(&root->listen, &s, &got) != ncclSuccess) {
          /* Out of descriptors, say: the queued ranks see the listener
           * close, the registered ones get this reason. */
          root_fail(run, ncclSystemError, "the bootstrap root could not accept "
                    "connections (too many open files?); see the root process's log");
          return;
        }
        if (!got) break;
        if (run->nconns == run->cap && root_grow(run) != 0) {
          brd_sock_close(&s);
          root_fail(run, ncclSystemError, "the bootstrap root ran out of host memory");
          break;
        }
        memset(&run->conns[run->nconns], 0, sizeof(run->conns[0]));
        run->conns[run->nconns].sock = s;
        run->conns[run->nconns].state = CONN_HELLO;
        run->conns[run->nconns].accepted_ns = brd_time_now_ns();
        run->nconns++;
      }
    }
    if (run->have_params && !run->failed && run->registered == run->n_expected) {
      root_succeed(run);
      return;
    }
  }
}

static void *root_main(void *arg) {
  struct root_run run;
  memset(&run, 0, sizeof(run));
  run.root = arg;
  if (root_grow(&run) == 0) root_loop(&run);
  for (int i = 0; i < run.nconns; i++) brd_sock_close(&run.conns[i].sock);
  brd_sock_close(&run.root->listen);
  free(run.conns);
  free(run.pfds);
  free(run.pfd_conn);
  free(run.slot);
  atomic_store_explicit(&run.root->done, 1, memory_order_release);
  root_release(run.root);
  return NULL;
}

static void roots_take(struct boot_root **list, int (*pick)(struct boot_root *, const void *),
                       const void *arg) {
  struct boot_root **pp;
  pthread_mutex_lock(&roots_lock);
  pp = &roots;
  while (*pp != NULL) {
    struct boot_root *r = *pp;
    if (pick(r, arg)) {
      *pp = r->next;
      r->next = *list;
      *list = r;
    } else {
      pp = &r->next;
    }
  }
  pthread_mutex_unlock(&roots_lock);
}

/* Drops the registry's references; with stop, first asks each root to end
 * and waits (bounded) until it has. */
static void roots_release(struct boot_root *list, int stop) {
  while (list != NULL) {
    struct boot_root *next = list->next;
    if (stop) {
      int64_t deadline = brd_time_now_ns() + ROOT_STOP_WAIT_NS;
      atomic_store_explicit(&list->stop, 1, memory_order_release);
      while (!atomic_load_explicit(&list->done, memory_order_acquire) &&
             brd_time_now_ns() < deadline) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
      }
    }
    root_release(list);
    list = next;
  }
}

static int pick_done(struct boot_root *r, const void *arg) {
  (void)arg;
  return atomic_load_explicit(&r->done, memory_order_acquire) != 0;
}

static int pick_all(struct boot_root *r, const void *arg) {
  (void)r;
  (void)arg;
  return 1;
}

static int pick_handle(struct boot_root *r, const void *arg) {
  const brd_boot_handle_t *h = arg;
  return r->magic == h->magic &&
         brd_sock_addr_port(&r->addr) == brd_sock_addr_port(&h->addr);
}

/* A forked child has none of the parent's threads: forget their roots
 * without shutting the listeners down (they are the parent's). */
static void roots_prefork(void) { pthread_mutex_lock(&roots_lock); }
static void roots_postfork_parent(void) { pthread_mutex_unlock(&roots_lock); }
static void roots_postfork_child(void) {
  /* The copies of the root structs stay allocated: their threads do not
   * exist here to release them. */
  for (struct boot_root *r = roots; r != NULL; r = r->next)
    if (!atomic_load(&r->done) && r->listen.fd >= 0) close(r->listen.fd);
  roots = NULL;
  pthread_mutex_init(&roots_lock, NULL);
}

static void roots_init_once(void) {
  struct rlimit lim;
  (void)pthread_atfork(roots_prefork, roots_postfork_parent, roots_postfork_child);
  /* A root holds one connection per rank of its block, as NCCL's does. */
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
}

__attribute__((destructor)) static void roots_at_exit(void) {
  struct boot_root *list = NULL;
  roots_take(&list, pick_all, NULL);
  roots_release(list, 1);
}

/* Binds handle->addr, starts the thread, writes the bound address back. */
static ncclResult_t root_start(brd_boot_handle_t *handle) {
  struct boot_root *r;
  pthread_attr_t attr;
  pthread_t thread;
  ncclResult_t res = ncclSuccess;
  char line[BRD_SOCK_ADDR_STRLEN];
  int rc;

  pthread_once(&roots_once, roots_init_once);
  BRD_CALLOC(r, 1, "the bootstrap root");
  r->magic = handle->magic;
  r->timeout_s = brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  if (r->timeout_s < 1) r->timeout_s = 1;
  atomic_init(&r->refs, 2); /* the registry's and the thread's */
  CHECK_GOTO(brd_sock_listen(&handle->addr, &r->listen), res, fail_free);
  r->addr = r->listen.addr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rc = pthread_create(&thread, &attr, root_main, r);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    WARN("bootstrap: cannot start the root thread: %s", strerror(rc));
    res = ncclSystemError;
    goto fail_close;
  }
  pthread_setname_np(thread, "braid-bootroot");
  handle->addr = r->addr;
  INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap root listening on %s",
       brd_sock_addr_str(&r->addr, line));
  pthread_mutex_lock(&roots_lock);
  r->next = roots;
  roots = r;
  pthread_mutex_unlock(&roots_lock);
  return ncclSuccess;
fail_close:
  brd_sock_close(&r->listen);
fail_free:
  free(r);
  return res;
}

/* After a rejected rendezvous, gives a root of this process time (bounded)
 * to tell the other ranks why before this process, which may exit next,
 * takes the thread with it. Returns at once when there is no such root or
 * it has told everyone it knows of. */
static void root_linger(const brd_boot_handle_t *h, int64_t ns) {
  struct boot_root *r;
  int64_t deadline = brd_time_now_ns() + ns;
  pthread_mutex_lock(&roots_lock);
  for (r = roots; r != NULL && !pick_handle(r, h); r = r->next) {
  }
  if (r != NULL) atomic_fetch_add(&r->refs, 1);
  pthread_mutex_unlock(&roots_lock);
  if (r == NULL) return;
  while (!atomic_load_explicit(&r->done, memory_order_acquire) &&
         brd_time_now_ns() < deadline) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  root_release(r);
}

/* See bootstrap.h. */
ncclResult_t brd_boot_root_start(const ncclUniqueId *id) {
  brd_boot_handle_t h;
  handle_get(id, &h);
  return root_start(&h);
}

/* See bootstrap.h. */
void brd_boot_root_stop(const ncclUniqueId *id) {
  struct boot_root *list = NULL;
  brd_boot_handle_t h;
  handle_get(id, &h);
  roots_take(&list, pick_handle, &h);
  roots_release(list, 1);
}

/* See bootstrap.h. */
void brd_boot_roots_sweep(void) {
  struct boot_root *list = NULL;
  roots_take(&list, pick_done, NULL);
  roots_release(list, 0);
}

/* The magic of an id built from NCCL_COMM_ID. NCCL's is a public constant,
 * so anyone who can reach the port can register as a rank. With
 * BRAID_COMM_SECRET set (the same on every rank), the magic is derived
 * from it and the root's address instead: a registration without it is
 * refused. The secret is read with secure_getenv and never logged (it is
 * not a parameter of the table, whose values INFO prints). Without it,
 * NCCL's constant, so a job that mixes Braid and NCCL ranks still meets. */
static uint64_t env_magic(const union brd_sock_addr *addr) {
  const char *secret = secure_getenv("BRAID_COMM_SECRET");
  uint64_t h = BRD_BOOT_ENV_MAGIC;
  if (secret == NULL || secret[0] == '\0') return h;
  for (const unsigned char *p = (const unsigned char *)secret; *p != '\0'; p++)
    h = mix64(h ^ *p);
  h = mix64(h ^ (uint64_t)brd_sock_addr_port(addr));
  /* Never the public constant, whatever the secret. */
  if (h == BRD_BOOT_ENV_MAGIC) h = ~h;
  INFO(BRD_SUBSYS_BOOTSTRAP | BRD_SUBSYS_ENV, "NCCL_COMM_ID: magic derived from "
       "BRAID_COMM_SECRET (%zu characters)", strlen(secret));
  return h;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_get_unique_id(ncclUniqueId *id_out) {
  const char *env = brd_param_str(BRD_P_COMM_ID);
  brd_boot_handle_t h;
  char name[BRD_SOCK_IFNAME_LEN];

  brd_boot_roots_sweep();
  memset(&h, 0, sizeof(h));
  if (env != NULL && env[0] != '\0') {
    INFO(BRD_SUBSYS_ENV, "NCCL_COMM_ID set by environment to %s", env);
    if (brd_sock_addr_parse(env, &h.addr) != ncclSuccess) {
      WARN("Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or "
           "[<ipv6>]:<port> or <hostname>:<port>");
      return ncclInvalidArgument;
    }
    h.magic = env_magic(&h.addr);
  } else {
    CHECK(brd_sock_boot_iface(&h.addr, name));
    if (getrandom(&h.magic, sizeof(h.magic), 0) != (ssize_t)sizeof(h.magic))
      h.magic = mix64((uint64_t)brd_time_now_ns() ^ ((uint64_t)getpid() << 32));
    CHECK(root_start(&h));
  }
  memset(id_out, 0, sizeof(*id_out));
  memcpy(id_out->internal, &h, sizeof(h));
  return ncclSuccess;
}

/* ---------------------------------------------------------------------- */
/* Rank side.                                                              */

static brd_sock_ctl_t boot_ctl(struct brd_boot *boot, const char *who) {
  brd_sock_ctl_t c;
  c.deadline_ns = brd_sock_deadline(boot->timeout_s);
  c.abort[0] = boot->abort;
  c.abort[1] = atomic_load_explicit(&boot->extra_abort, memory_order_acquire);
  c.who = who;
  return c;
}

static void peer_who(int peer, char *buf, size_t len) {
  snprintf(buf, len, "rank %d", peer);
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
int brd_boot_ring_closed(const struct brd_boot *boot) {
  struct pollfd p[2] = {{boot->ring_prev.fd, POLLRDHUP, 0}, {boot->ring_next.fd, POLLRDHUP, 0}};
  int n = boot->nranks;
  if (n < 2 || p[0].fd < 0 || p[1].fd < 0) return -1;
  if (poll(p, 2, 0) <= 0) return -1;
  if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) return (boot->rank - 1 + n) % n;
  if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) return (boot->rank + 1) % n;
  return -1;
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
  boot->peer_addrs = calloc((size_t)nranks, sizeof(*boot->peer_addrs));
  if (boot->peer_addrs == NULL) {
    WARN("out of host memory allocating %zu bytes for bootstrap addresses",
         (size_t)nranks * sizeof(*boot->peer_addrs));
    res = ncclSystemError;
    goto fail_free;
  }
  CHECK_GOTO(brd_sock_boot_iface(&local, name), res, fail_free_addrs);
  CHECK_GOTO(brd_sock_listen(&local, &boot->listen), res, fail_free_addrs);
  boot->peer_addrs[rank] = boot->listen.addr;
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

static ncclResult_t p2p_send(struct brd_boot *boot, int peer, int tag, const void *buf,
                             size_t size) {
  char who[32];
  brd_sock_ctl_t ctl;
  struct brd_sock s;
  uint64_t sz = size;
  ncclResult_t res;

  peer_who(peer, who, sizeof(who));
  ctl = boot_ctl(boot, who);
  CHECK(connect_to(boot, peer, tag, &boot->peer_addrs[peer], &ctl, &s));
  CHECK_GOTO(brd_sock_send(&s, &sz, sizeof(sz), &ctl), res, out_close);
  if (size > 0) CHECK_GOTO(brd_sock_send(&s, buf, size, &ctl), res, out_close);
  res = ncclSuccess;
out_close:
  brd_sock_close(&s);
  return res;
}

static ncclResult_t p2p_recv(struct brd_boot *boot, int peer, int tag, void *buf,
                             size_t size) {
  char who[32];
  brd_sock_ctl_t ctl;
  struct brd_sock s;
  uint64_t sz = 0;
  ncclResult_t res;

  peer_who(peer, who, sizeof(who));
  ctl = boot_ctl(boot, who);
  CHECK(accept_from(boot, peer, tag, &ctl, 1, &s));
  CHECK_GOTO(brd_sock_recv(&s, &sz, sizeof(sz), &ctl), res, out_close);
  if (sz != size) {
    WARN("bootstrap: rank %d sent %llu bytes with tag %d but rank %d expected "
         "%zu; the two sides disagree on the message", peer,
         (unsigned long long)sz, tag, boot->rank, size);
    res = ncclInternalError;
    goto out_close;
  }
  if (size > 0) CHECK_GOTO(brd_sock_recv(&s, buf, size, &ctl), res, out_close);
  res = ncclSuccess;
out_close:
  brd_sock_close(&s);
  return res;
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

/* See bootstrap.h. */
ncclResult_t brd_boot_send(struct brd_boot *boot, int peer, int tag, const void *buf,
                           size_t size) {
  ncclResult_t res;
  CHECK(check_peer_tag(boot, peer, tag, "brd_boot_send"));
  atomic_fetch_add(&boot->busy, 1);
  res = p2p_send(boot, peer, tag, buf, size);
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_recv(struct brd_boot *boot, int peer, int tag, void *buf,
                           size_t size) {
  ncclResult_t res;
  CHECK(check_peer_tag(boot, peer, tag, "brd_boot_recv"));
  atomic_fetch_add(&boot->busy, 1);
  res = p2p_recv(boot, peer, tag, buf, size);
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* Ring allgather in both directions at once: step s moves slice rank-s to
 * the next rank and slice rank+s to the previous one, so n-1 slices arrive
 * in n/2 steps (NCCL's double ring). */
static ncclResult_t ring_allgather_until(struct brd_boot *boot, char *data, size_t size,
                                         int64_t deadline_ns, unsigned char *have) {
  int n = boot->nranks, r = boot->rank, steps = n / 2;
  char who_next[32], who_prev[32];
  peer_who((r + 1) % n, who_next, sizeof(who_next));
  peer_who((r - 1 + n) % n, who_prev, sizeof(who_prev));
  for (int s = 0; s < steps; s++) {
    brd_sock_ctl_t ctl = boot_ctl(boot, NULL);
    int last_single = s == steps - 1 && n % 2 == 0;
    if (deadline_ns != 0) ctl.deadline_ns = deadline_ns;
    brd_sock_op_t ops[4] = {
        {&boot->ring_next, 1, data + (size_t)((r - s + n) % n) * size, size, 0, who_next},
        {&boot->ring_prev, 0, data + (size_t)((r - s - 1 + n) % n) * size, size, 0, who_prev},
        {&boot->ring_prev, 1, data + (size_t)((r + s) % n) * size, size, 0, who_prev},
        {&boot->ring_next, 0, data + (size_t)((r + s + 1) % n) * size, size, 0, who_next},
    };
    ncclResult_t res = brd_sock_multi(ops, last_single ? 2 : 4, &ctl);
    /* Each receive that completed, even in a failed step, is a rank heard. */
    if (have != NULL) {
      if (ops[1].done == size) have[(r - s - 1 + n) % n] = 1;
      if (!last_single && ops[3].done == size) have[(r + s + 1) % n] = 1;
    }
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

static ncclResult_t ring_allgather(struct brd_boot *boot, char *data, size_t size) {
  return ring_allgather_until(boot, data, size, 0, NULL);
}

/* See bootstrap.h. */
ncclResult_t brd_boot_allgather(struct brd_boot *boot, void *buf, size_t size_per_rank) {
  ncclResult_t res;
  if (boot->nranks == 1 || size_per_rank == 0) return ncclSuccess;
  atomic_fetch_add(&boot->busy, 1);
  res = ring_allgather(boot, buf, size_per_rank);
  atomic_fetch_sub(&boot->busy, 1);
  return res;
}

/* See bootstrap.h. */
ncclResult_t brd_boot_allgather_timed(struct brd_boot *boot, void *buf, size_t size_per_rank,
                                      int64_t timeout_s, const char *what) {
  ncclResult_t res;
  unsigned char *have;
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
  res = ring_allgather_until(boot, buf, size_per_rank, t0 + timeout_s * 1000000000LL, have);
  atomic_fetch_sub(&boot->busy, 1);
  if (res == ncclRemoteError) {
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
      root_linger(&h, ROOT_LINGER_NS);
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
  brd_boot_destroy(boot);
  return res;
}
