/*
 * Braid: communicator helpers shared by every entry point, and the
 * communicator's allocation and release.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/launch.h"
#include "core/config.h"
#include "core/gpu.h"
#include "core/reg.h"
#include "plan/tuner_plugin.h"
#include "core/profiler.h"
#include "base/time.h"

#define LIVE_PERIOD_MS 50
#define BRD_LIVE_GRACE_MS 1000

/* The watchdog: one thread per process, started with the first watched
 * communicator, over a list under live_lock. A communicator leaves the
 * list (brd_comm_destroy) before anything it owns is freed, and the
 * thread only touches listed communicators under the lock. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *live_list;
/* Process that runs the thread (0 in a forked child, which starts its
 * own); written under live_lock, read without it by the fast path. */
static _Atomic int live_pid;

/* Records that rank `peer` of comm is gone ("is gone: how") or left
 * giving a reason ("left: how"); the first finding wins. */
static void live_mark(struct ncclComm *comm, int peer, const char *what, const char *how) {
  char line[BRD_SOCK_ADDR_STRLEN];
  int pid = comm->peers != NULL ? comm->peers[peer].pid : -1;
  if (atomic_load_explicit(&comm->peer_dead, memory_order_acquire) != 0) return;
  snprintf(comm->dead_msg, sizeof(comm->dead_msg),
           "rank %d (host %s, pid %d) %s: %s", peer,
           brd_sock_addr_str(brd_boot_peer_addr(comm->boot, peer), line), pid, what, how);
  atomic_store_explicit(&comm->dead_since_ns, brd_time_now_ns(), memory_order_relaxed);
  atomic_store_explicit(&comm->peer_dead, peer + 1, memory_order_release);
  INFO(BRD_SUBSYS_INIT, "liveness: %s", comm->dead_msg);
}

/* One look at comm's peers. Under live_lock. */
static void live_scan(struct ncclComm *comm, int64_t now) {
  if (atomic_load_explicit(&comm->peer_dead, memory_order_acquire) == 0) {
    char why[BRD_BOOT_WHY_LEN];
    int gone = comm->boot != NULL ? brd_boot_ring_left(comm->boot, why, sizeof(why)) : -1;
    if (gone >= 0 && why[0] != '\0') {
      live_mark(comm, gone, "left", why);
    } else if (gone >= 0) {
      live_mark(comm, gone, "is gone", "its bootstrap ring connection closed (its process "
                "died, or it destroyed the communicator)");
    } else if (comm->peers != NULL) {
      const brd_peer_info_t *me = &comm->peers[comm->rank];
      for (int r = 0; r < comm->nranks; r++) {
        const brd_peer_info_t *p = &comm->peers[r];
        if (r == comm->rank || p->host_hash != me->host_hash || p->pid_hash == me->pid_hash)
          continue;
        /* Only a pid of this pid namespace can be looked up here. */
        if (brd_device_pid_hash(p->pid) != p->pid_hash) continue;
        if (kill(p->pid, 0) != 0 && errno == ESRCH) {
          live_mark(comm, r, "is gone", "its process no longer exists");
          break;
        }
      }
    }
  }
  if (atomic_load_explicit(&comm->peer_dead, memory_order_acquire) != 0) {
    int64_t since = atomic_load_explicit(&comm->launch_since_ns, memory_order_acquire);
    int64_t dead = atomic_load_explicit(&comm->dead_since_ns, memory_order_relaxed);
    /* A launch that outlives the grace after the death waits on the dead
     * rank: stop it. (A rank that finished the same call and exited
     * cleanly leaves a launch that ends well within the grace.) */
    if (since != 0 && now - dead >= BRD_LIVE_GRACE_MS * 1000000LL)
      atomic_store_explicit(&comm->abort_flag, 1, memory_order_release);
    /* Device work already queued: each of its waits that then sees no
     * progress for the grace fails as a hang; work still progressing (a
     * peer that finished the call and left) is not disturbed. Told at
     * every scan: a runtime made (or resumed) after the death hears it too. */
    brd_rt_peer_gone(comm, (uint64_t)BRD_LIVE_GRACE_MS * 1000000ull);
  }
}

static void *live_main(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {0, LIVE_PERIOD_MS * 1000000L};
    pthread_mutex_lock(&live_lock);
    if (live_pid != getpid()) { /* a forked child: its own thread runs */
      pthread_mutex_unlock(&live_lock);
      return NULL;
    }
    int64_t now = brd_time_now_ns();
    for (struct ncclComm *c = live_list; c != NULL; c = c->watch_next) live_scan(c, now);
    pthread_mutex_unlock(&live_lock);
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* fork: the child has no watchdog thread and must find the lock free. */
static void live_prefork(void) { pthread_mutex_lock(&live_lock); }
static void live_postfork_parent(void) { pthread_mutex_unlock(&live_lock); }
static void live_postfork_child(void) {
  live_list = NULL;
  live_pid = 0;
  pthread_mutex_unlock(&live_lock);
}
static pthread_once_t live_once = PTHREAD_ONCE_INIT;
static void live_init_once(void) {
  (void)pthread_atfork(live_prefork, live_postfork_parent, live_postfork_child);
}

/* See comm.h. */
void brd_comm_live_watch(struct ncclComm *comm) {
  /* The fast path of every launch: no lock. watched is written under the
   * lock (an abort on another thread may be taking comm off the list). */
  int w = atomic_load_explicit(&comm->watched, memory_order_acquire);
  if (w != 0 && w == atomic_load_explicit(&live_pid, memory_order_acquire)) return;
  if (comm->nranks < 2 || comm->boot == NULL) return;
  pthread_once(&live_once, live_init_once);
  pthread_mutex_lock(&live_lock);
  if (live_pid != getpid()) {
    /* First use in this process (or in a forked child, whose list holds
     * the parent's communicators, which are not its own to watch). */
    pthread_t t;
    pthread_attr_t attr;
    live_list = NULL;
    if (pthread_attr_init(&attr) == 0) {
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&t, &attr, live_main, NULL) == 0) live_pid = getpid();
      else INFO(BRD_SUBSYS_INIT, "liveness: could not start the watchdog thread; "
                "dead peers are found by BRAID_TIMEOUT only");
      pthread_attr_destroy(&attr);
    }
  }
  if (live_pid == getpid() && atomic_load(&comm->watched) != live_pid) {
    comm->watch_next = live_list;
    live_list = comm;
    atomic_store_explicit(&comm->watched, (int)getpid(), memory_order_release);
  }
  pthread_mutex_unlock(&live_lock);
}

/* Takes comm off the watchdog's list. */
static void live_unwatch(struct ncclComm *comm) {
  pthread_mutex_lock(&live_lock);
  for (struct ncclComm **pp = &live_list; *pp != NULL; pp = &(*pp)->watch_next) {
    if (*pp == comm) {
      *pp = comm->watch_next;
      break;
    }
  }
  atomic_store_explicit(&comm->watched, 0, memory_order_release);
  pthread_mutex_unlock(&live_lock);
}

/* See comm.h. */
ncclResult_t brd_comm_live_check(struct ncclComm *comm, const char *fn) {
  if (atomic_load_explicit(&comm->peer_dead, memory_order_acquire) == 0) return ncclSuccess;
  WARN("%s : %s; the communicator cannot complete collectives any more: "
       "ncclCommAbort it (or ncclCommShrink without the dead rank)", fn, comm->dead_msg);
  return ncclRemoteError;
}

/* See comm.h. */
ncclResult_t brd_comm_check(const struct ncclComm *comm, const char *fn) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", fn);
    return ncclInvalidArgument;
  }
  if (comm->magic != BRD_COMM_MAGIC) {
    WARN("%s : comm argument is not a live communicator (destroyed, "
         "aborted or never initialised)", fn);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* See comm.h. */
ncclResult_t brd_comm_create(struct ncclComm **comm_out) {
  struct ncclComm *comm;
  BRD_CALLOC(comm, 1, "a communicator");
  comm->magic = BRD_COMM_MAGIC;
  comm->rank = comm->nranks = comm->cuda_dev = -1;
  atomic_init(&comm->abort_flag, 0);
  atomic_init(&comm->async_error, ncclInProgress);
  atomic_init(&comm->children_busy, 0);
  *comm_out = comm;
  return ncclSuccess;
}

/* See comm.h. */
void brd_comm_destroy(struct ncclComm *comm) {
  if (comm == NULL) return;
  live_unwatch(comm);
  /* A stale handle used after this point fails brd_comm_check (as long as
   * the memory is not reused), which is all NCCL promises too. */
  /* The runtime waits (bounded) for a launch another thread still runs on
   * comm, and that launch reads comm; only then is the handle marked dead. */
  brd_rt_destroy(comm->rt);
  brd_tuner_destroy(comm->tuner);
  comm->tuner = NULL;
  brd_prof_destroy(comm->prof); /* after the runtime: the proxy emits events */
  comm->prof = NULL;
  comm->magic = 0;
  brd_regs_destroy(comm);
  free(comm->redops);
  brd_boot_destroy(comm->boot);
  comm->boot = NULL;
  free(comm->peers);
  brd_config_fini(&comm->config);
  free(comm);
}

/* See comm.h. */
int brd_comm_ranks_per_device(const struct ncclComm *comm) {
  int most = 1;
  if (comm->peers == NULL) return 1;
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    for (int q = 0; q < comm->nranks; q++)
      k += comm->peers[q].host_hash == comm->peers[r].host_hash &&
           comm->peers[q].bus_id == comm->peers[r].bus_id;
    if (k > most) most = k;
  }
  return most;
}

/* See comm.h. */
int brd_comm_device_other_process(const struct ncclComm *comm) {
  if (comm->peers == NULL) return -1;
  const brd_peer_info_t *me = &comm->peers[comm->rank];
  for (int r = 0; r < comm->nranks; r++)
    if (comm->peers[r].host_hash == me->host_hash && comm->peers[r].bus_id == me->bus_id &&
        comm->peers[r].pid_hash != me->pid_hash)
      return r;
  return -1;
}

/* See comm.h. */
int brd_comm_all_in_process(const struct ncclComm *comm) {
  if (comm->peers == NULL) return comm->nranks == 1;
  for (int r = 0; r < comm->nranks; r++)
    if (comm->peers[r].pid_hash != comm->peers[comm->rank].pid_hash) return 0;
  return 1;
}
