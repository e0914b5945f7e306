/*
 * Braid bootstrap: the rendezvous root (see bootstrap.h). A root is a
 * thread with a listening socket that the ranks of one id register with;
 * it answers each rank with its ring neighbour once every rank of its block
 * has registered, and drops connections that do not show the id's magic.
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
#include "core/bootstrap_wire.h"

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
  /* The rank may have died; it then learns nothing, and that is fine: a
   * timeout here is no error of the root's (INFO, caller_reports). */
  brd_sock_ctl_t ctl = {.deadline_ns = brd_time_now_ns() + 1000000000LL,
                        .abort = {&run->root->stop, NULL},
                        .who = "a rank",
                        .limit_s = 1,
                        .limit_name = NULL,
                        .caller_reports = 1};
  struct boot_reply copy = *rep;
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
    /* Best effort, as for a rank's reply (root_send_reply): already WARNed. */
    brd_sock_ctl_t ctl = {.deadline_ns = brd_time_now_ns() + 100000000LL,
                          .abort = {&run->root->stop, NULL},
                          .who = "a stranger",
                          .limit_s = 0,
                          .limit_name = NULL,
                          .caller_reports = 1};
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

/* See bootstrap_wire.h. */
void brd_boot_root_linger(const brd_boot_handle_t *h) {
  int64_t ns = ROOT_LINGER_NS;
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
