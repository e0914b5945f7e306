/*
 * Braid: the communicator lifecycle entry points: unique ids, init (one
 * rank, all ranks of a process, several roots), split, shrink, finalize,
 * destroy, abort, revoke, and the queries.
 *
 * An init is a job. A blocking init outside a group runs on the caller's
 * thread. A nonblocking init, one inside ncclGroupStart/End, and each rank
 * of ncclCommInitAll run on a helper thread; the communicator holds a
 * reference to its job so that abort and destroy can wait for it (bounded:
 * every wait in a job polls the communicator's abort flag). The job writes
 * the communicator's fields, then publishes its result in async_error with
 * release order; readers load async_error first.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/api.h"
#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "plan/topo.h"
#include "plan/tuner_plugin.h"
#include "core/profiler.h"
#include "transport/ibverbs.h"
#include "core/config.h"
#include "core/gpu.h"
#include "core/launch.h"
#include "core/group.h"
#include "base/param.h"
#include "base/time.h"

#define ABORT_WAIT_NS 900000000LL   /* ncclCommAbort returns within 1 s */
#define DEV_LOCAL (-1)              /* host-mode InitRank: device = local rank */

struct brd_init_job {
  /* Set by the entry point before the job runs. */
  struct ncclComm *comm;       /* borrowed: the communicator made, NULL for NOCOLOR */
  ncclComm_t *newcomm;         /* borrowed: the caller's handle, cleared on failure */
  const char *fn;              /* entry point name, for messages */
  int nranks, rank, nids, dev;
  ncclUniqueId *ids;           /* owned copy (root init) */
  struct ncclComm *parent;     /* borrowed (split/shrink): its children_busy counts us */
  int is_shrink, color, key;
  uint32_t seq;                /* parent's split count for this child */
  int *exclude;                /* owned sorted copy (shrink) */
  int nexclude;
  int parent_async;            /* nonblocking child: parent->async_error tracks us */
  /* Completion. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;                    /* under lock */
  ncclResult_t result;         /* valid once done */
  _Atomic int refs;            /* helper thread + communicator */
  struct brd_init_job *group_next;
};

/* Blocking inits started inside this thread's current group. */
static _Thread_local struct brd_init_job *group_jobs;
static _Thread_local int group_nonblocking;

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

/* ---------------------------------------------------------------------- */
/* Jobs.                                                                   */

static ncclResult_t job_create(struct brd_init_job **job_out) {
  struct brd_init_job *job;
  pthread_condattr_t attr;
  BRD_CALLOC(job, 1, "an init job");
  pthread_mutex_init(&job->lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&job->cond, &attr);
  pthread_condattr_destroy(&attr);
  atomic_init(&job->refs, 1);
  job->dev = DEV_LOCAL;
  *job_out = job;
  return ncclSuccess;
}

static void job_release(struct brd_init_job *job) {
  if (job == NULL || atomic_fetch_sub(&job->refs, 1) != 1) return;
  pthread_mutex_destroy(&job->lock);
  pthread_cond_destroy(&job->cond);
  free(job->ids);
  free(job->exclude);
  free(job);
}

/* Waits until job is done or deadline_ns passes. INT64_MAX is used only
 * where the job's own waits bound it: each has a deadline of
 * BRAID_BOOTSTRAP_TIMEOUT and polls the communicator's abort flag.
 * Returns 1 when done. */
static int job_wait(struct brd_init_job *job, int64_t deadline_ns) {
  int done;
  pthread_mutex_lock(&job->lock);
  while (!job->done) {
    struct timespec ts;
    if (deadline_ns == INT64_MAX) {
      pthread_cond_wait(&job->cond, &job->lock);
      continue;
    }
    if (brd_time_now_ns() >= deadline_ns) break;
    ts.tv_sec = deadline_ns / 1000000000LL;
    ts.tv_nsec = deadline_ns % 1000000000LL;
    pthread_cond_timedwait(&job->cond, &job->lock, &ts);
  }
  done = job->done;
  pthread_mutex_unlock(&job->lock);
  return done;
}

/* Waits (bounded) until no split/shrink job uses comm any more. */
static int children_wait(struct ncclComm *comm, int64_t deadline_ns) {
  while (atomic_load_explicit(&comm->children_busy, memory_order_acquire) != 0) {
    struct timespec ts = {0, 1000000L};
    if (brd_time_now_ns() >= deadline_ns) return 0;
    nanosleep(&ts, NULL);
  }
  return 1;
}

/* ---------------------------------------------------------------------- */
/* What every init does after the bootstrap: identities and topology.     */

/* NCCL_TOPO_DUMP_FILE: the rank NCCL_TOPO_DUMP_FILE_RANK (0 unless set;
 * NCCL's rule, one rank of the communicator) writes what it found about
 * its host, with every host of the communicator by hash. A failed write is
 * WARNed and does not fail the init, as a missing dump loses nothing. */
static void topo_dump(const struct ncclComm *comm) {
  const char *path = brd_param_str(BRD_P_TOPO_DUMP_FILE);
  if (path == NULL || path[0] == '\0' || comm->rank != brd_param_int(BRD_P_TOPO_DUMP_FILE_RANK))
    return;
  const brd_peer_info_t *p = comm->peers;
  brd_topo_host_ref_t *hosts = calloc((size_t)comm->nranks, sizeof(*hosts));
  brd_topo_rank_t *me = calloc(1, sizeof(*me));
  int nhosts = 0;
  if (hosts == NULL || me == NULL) {
    WARN("NCCL_TOPO_DUMP_FILE=%s: out of host memory; no dump written", path);
    goto out;
  }
  for (int r = 0; r < comm->nranks; r++) {
    int h = 0;
    while (h < nhosts && hosts[h].hash != p[r].host_hash) h++;
    if (h == nhosts) hosts[nhosts++] = (brd_topo_host_ref_t){p[r].host_hash, 0, r};
    hosts[h].nranks++;
  }
  brd_topo_rank_discover(p[comm->rank].host_hash,
                         p[comm->rank].backend == BRD_DEVICE_HOST ? NULL : p[comm->rank].bus_id_str, me);
  (void)brd_topo_dump_write(path, comm->rank, me, hosts, nhosts);
out:
  free(me);
  free(hosts);
}

static ncclResult_t topology(struct ncclComm *comm, const char *fn) {
  brd_peer_info_t *p = comm->peers;
  int n = comm->nranks, me = comm->rank;
  int local = 0, local_n = 0, node = -1, n_nodes = 0;

  for (int r = 0; r < n; r++) {
    if (p[r].version != p[me].version) {
      WARN("Mismatched NCCL version detected : rank %d version %d rank %d version %d",
           me, (int)p[me].version, r, (int)p[r].version);
      return ncclInvalidUsage;
    }
    if (p[r].backend != p[me].backend) {
      WARN("%s: rank %d uses the %s executor but rank %d uses the %s one; set "
           "the same BRAID_DEVICE on every rank", fn, me,
           p[me].backend == BRD_DEVICE_HOST ? "host" : "CUDA", r,
           p[r].backend == BRD_DEVICE_HOST ? "host" : "CUDA");
      return ncclInvalidUsage;
    }
  }
  /* Nodes in order of first appearance; local index in rank order. Host-mode
   * ranks without a device of their own get their local index, computed
   * here for every peer the same way each peer computes its own. */
  for (int r = 0; r < n; r++) {
    int first = -1, idx = 0;
    for (int q = 0; q < r && first < 0; q++)
      if (p[q].host_hash == p[r].host_hash) first = q;
    if (first < 0) {
      if (p[r].host_hash == p[me].host_hash) node = n_nodes;
      n_nodes++;
    }
    for (int q = 0; q < r; q++) idx += p[q].host_hash == p[r].host_hash;
    if (p[r].dev == DEV_LOCAL) p[r].dev = idx;
    if (p[r].host_hash == p[me].host_hash) {
      if (r < me) local++;
      local_n++;
    }
  }
  for (int r = 0; r < n; r++) {
    for (int q = r + 1; q < n; q++) {
      int same = p[q].host_hash == p[r].host_hash &&
                 (p[r].backend == BRD_DEVICE_CUDA ? p[q].bus_id == p[r].bus_id
                                                  : p[q].dev == p[r].dev);
      if (same && (r == me || q == me))
        INFO(BRD_SUBSYS_INIT, "%s: ranks %d and %d share device %d (busId %s) on "
             "one host; several ranks per device are allowed", fn, r, q,
             (int)p[r].dev, p[r].bus_id_str);
    }
  }
  brd_topo_host_t host;
  brd_topo_host(&host);
  comm->host_cores = host.cores;
  brd_ibv_log_devices();
  comm->local_rank = local;
  comm->local_nranks = local_n;
  comm->node = node;
  comm->n_nodes = n_nodes;
  comm->cuda_dev = p[me].dev;
  topo_dump(comm);
  return ncclSuccess;
}

static void log_timings(const struct ncclComm *comm, const char *fn, int64_t t0,
                        int64_t t_boot, int64_t t_gather, int64_t t_end) {
  INFO(BRD_SUBSYS_INIT, "Init timings - %s: rank %d nranks %d total %.4f "
       "(bootstrap %.4f, allgathers %.4f, topo %.4f)", fn, comm->rank,
       comm->nranks, (t_end - t0) / 1e9, (t_boot - t0) / 1e9,
       (t_gather - t_boot) / 1e9, (t_end - t_gather) / 1e9);
}

/* The tuner plugin's context for comm (none without a plugin): its
 * NVLink domains are the communicator's hosts. */
static ncclResult_t tuner_attach(struct ncclComm *comm) {
  brd_tuner_comm_t tc;
  memset(&tc, 0, sizeof(tc));
  tc.comm_id = comm->comm_hash;
  tc.nranks = comm->nranks;
  tc.nnodes = comm->n_nodes > 0 ? comm->n_nodes : 1;
  tc.nvl_domains = tc.nnodes;
  tc.min_per_domain = comm->nranks;
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    for (int q = 0; q < comm->nranks; q++)
      k += comm->peers[q].host_hash == comm->peers[r].host_hash;
    if (k < tc.min_per_domain) tc.min_per_domain = k;
    if (k > tc.max_per_domain) tc.max_per_domain = k;
  }
  return brd_tuner_create(&tc, &comm->tuner);
}

static ncclResult_t run_root_init(struct brd_init_job *job) {
  struct ncclComm *comm = job->comm;
  brd_peer_info_t mine;
  int64_t t0 = brd_time_now_ns(), t_boot, t_gather;
  ncclResult_t res;

  brd_log_set_thread_dev(job->dev >= 0 ? job->dev : job->rank);
  if (comm->backend == BRD_DEVICE_CUDA) CHECK(brd_device_set(job->dev));
  comm->comm_hash = hash_bytes(job->ids[0].internal, NCCL_UNIQUE_ID_BYTES,
                               0xcbf29ce484222325ull);
  INFO(BRD_SUBSYS_INIT, "%s comm %p rank %d nranks %d cudaDev %d commId %#llx - "
       "Init START", job->fn, (void *)comm, job->rank, job->nranks, job->dev,
       (unsigned long long)comm->comm_hash);

  CHECK(brd_boot_create(job->ids, job->nids, job->rank, job->nranks, &comm->abort_flag,
                        &comm->boot));
  t_boot = brd_time_now_ns();

  CHECK(brd_device_peer_info((brd_device_backend_t)comm->backend, job->dev, &mine));
  BRD_CALLOC(comm->peers, (size_t)job->nranks, "the peer table");
  comm->peers[job->rank] = mine;
  CHECK(brd_boot_allgather(comm->boot, comm->peers, sizeof(*comm->peers)));
  t_gather = brd_time_now_ns();

  res = topology(comm, job->fn);
  if (res != ncclSuccess) return res;
  CHECK(tuner_attach(comm));
  CHECK(brd_prof_create(comm, &comm->prof));
  brd_log_set_thread_dev(comm->cuda_dev);
  log_timings(comm, job->fn, t0, t_boot, t_gather, brd_time_now_ns());
  INFO(BRD_SUBSYS_INIT, "%s comm %p rank %d nranks %d cudaDev %d busId %s "
       "localRank %d localRanks %d nodes %d commId %#llx - Init COMPLETE", job->fn,
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev,
       comm->peers[comm->rank].bus_id_str, comm->local_rank, comm->local_nranks,
       comm->n_nodes, (unsigned long long)comm->comm_hash);
  return ncclSuccess;
}

struct split_info {
  int32_t color, key;
};

/* Split: members of our color ordered by key, ties by parent rank (NCCL's
 * insertion order). Shrink: everyone not excluded, in parent order. */
static ncclResult_t child_members(struct brd_init_job *job, int *ranks, int *n_out,
                                  int *me_out) {
  struct ncclComm *parent = job->parent;
  int n = 0, me = -1;
  if (job->is_shrink) {
    int j = 0;
    for (int r = 0; r < parent->nranks; r++) {
      if (j < job->nexclude && job->exclude[j] == r) {
        j++;
        continue;
      }
      if (r == parent->rank) me = n;
      ranks[n++] = r;
    }
  } else {
    struct split_info *info = calloc((size_t)parent->nranks, sizeof(*info));
    ncclResult_t res;
    if (info == NULL) {
      WARN("out of host memory allocating the split table");
      return ncclSystemError;
    }
    info[parent->rank].color = job->color;
    info[parent->rank].key = job->key;
    res = brd_boot_allgather(parent->boot, info, sizeof(*info));
    if (res == ncclSuccess && job->color != NCCL_SPLIT_NOCOLOR) {
      for (int r = 0; r < parent->nranks; r++) {
        int at = n;
        if (info[r].color != job->color) continue;
        while (at > 0 && info[ranks[at - 1]].key > info[r].key) at--;
        memmove(ranks + at + 1, ranks + at, (size_t)(n - at) * sizeof(int));
        ranks[at] = r;
        n++;
      }
      for (int i = 0; i < n; i++)
        if (ranks[i] == parent->rank) me = i;
    }
    free(info);
    if (res != ncclSuccess) return res;
  }
  *n_out = n;
  *me_out = me;
  return ncclSuccess;
}

static ncclResult_t run_child_init(struct brd_init_job *job) {
  struct ncclComm *parent = job->parent, *comm = job->comm;
  int64_t t0 = brd_time_now_ns(), t_boot, t_gather;
  int *ranks, n = 0, me = -1;
  ncclResult_t res;

  brd_log_set_thread_dev(parent->cuda_dev);
  if (parent->backend == BRD_DEVICE_CUDA) CHECK(brd_device_set(parent->cuda_dev));
  ranks = calloc((size_t)parent->nranks, sizeof(int));
  if (ranks == NULL) {
    WARN("out of host memory allocating %d parent ranks", parent->nranks);
    return ncclSystemError;
  }
  if (comm != NULL) brd_boot_link_abort(parent->boot, &comm->abort_flag);
  CHECK_GOTO(child_members(job, ranks, &n, &me), res, out);
  if (comm == NULL) {
    INFO(BRD_SUBSYS_INIT, "Rank %d has color with NCCL_SPLIT_NOCOLOR, not creating "
         "a new communicator", parent->rank);
    res = ncclSuccess;
    goto out;
  }
  comm->rank = me;
  comm->nranks = n;
  comm->backend = parent->backend;
  comm->host_mode = parent->host_mode;
  {
    uint64_t mix[3] = {parent->comm_hash, job->seq, (uint64_t)(int64_t)job->color};
    comm->comm_hash = hash_bytes(mix, sizeof(mix), 0xcbf29ce484222325ull);
  }
  INFO(BRD_SUBSYS_INIT, "%s comm %p rank %d nranks %d cudaDev %d parent %p "
       "splitCount %u color %d key %d - Init START", job->fn, (void *)comm, me, n,
       parent->cuda_dev, (void *)parent, job->seq, job->color, job->key);
  CHECK_GOTO(brd_boot_create_child(parent->boot, job->seq, job->color, n, me, ranks,
                                   &comm->abort_flag, &comm->boot), res, out);
  t_boot = brd_time_now_ns();
  /* Identities come from the parent's table: no second allgather. */
  BRD_CALLOC_GOTO(comm->peers, (size_t)n, "the peer table", res, out);
  for (int i = 0; i < n; i++) comm->peers[i] = parent->peers[ranks[i]];
  t_gather = brd_time_now_ns();
  CHECK_GOTO(topology(comm, job->fn), res, out);
  CHECK_GOTO(tuner_attach(comm), res, out);
  CHECK_GOTO(brd_prof_create(comm, &comm->prof), res, out);
  log_timings(comm, job->fn, t0, t_boot, t_gather, brd_time_now_ns());
  INFO(BRD_SUBSYS_INIT, "%s comm %p rank %d nranks %d cudaDev %d parent %p "
       "splitCount %u color %d key %d - Init COMPLETE", job->fn, (void *)comm,
       comm->rank, comm->nranks, comm->cuda_dev, (void *)parent, job->seq,
       job->color, job->key);
  res = ncclSuccess;
out:
  if (comm != NULL) brd_boot_link_abort(parent->boot, NULL);
  free(ranks);
  return res;
}

/* Runs the job on the current thread and publishes its result. After this
 * returns, the job no longer touches parent. */
static ncclResult_t job_run(struct brd_init_job *job) {
  ncclResult_t res = job->parent ? run_child_init(job) : run_root_init(job);
  /* Close our sockets now so peers waiting on this rank learn at once. */
  if (res != ncclSuccess && job->comm != NULL) {
    brd_boot_destroy(job->comm->boot);
    job->comm->boot = NULL;
  }
  if (job->parent != NULL) {
    if (job->parent_async)
      atomic_store_explicit(&job->parent->async_error, res, memory_order_release);
    atomic_fetch_sub_explicit(&job->parent->children_busy, 1, memory_order_release);
  } else if (res != ncclSuccess && res != ncclInvalidUsage) {
    /* A root of ours that still waits would keep the other ranks waiting
     * until their deadline; stopping it tells them at once. A root that
     * rejected the rendezvous (ncclInvalidUsage) stays to tell late ranks. */
    for (int i = 0; i < job->nids; i++) brd_boot_root_stop(&job->ids[i]);
  } else {
    brd_boot_roots_sweep();
  }
  if (job->comm != NULL)
    atomic_store_explicit(&job->comm->async_error, res, memory_order_release);
  pthread_mutex_lock(&job->lock);
  job->result = res;
  job->done = 1;
  pthread_cond_broadcast(&job->cond);
  pthread_mutex_unlock(&job->lock);
  return res;
}

static void *job_main(void *arg) {
  struct brd_init_job *job = arg;
  (void)job_run(job);
  job_release(job);
  return NULL;
}

static ncclResult_t job_start_thread(struct brd_init_job *job) {
  pthread_attr_t attr;
  pthread_t t;
  int rc;
  atomic_fetch_add(&job->refs, 1);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rc = pthread_create(&t, &attr, job_main, job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&job->refs, 1);
    WARN("%s: cannot start the init thread: %s", job->fn, strerror(rc));
    return ncclSystemError;
  }
  pthread_setname_np(t, "braid-init");
  return ncclSuccess;
}

/* Releases what a failed init leaves: the communicator and the handle. */
static void init_failed(struct brd_init_job *job) {
  if (job->comm != NULL) {
    job->comm->init_job = NULL;
    brd_comm_destroy(job->comm);
    job->comm = NULL;
  }
  if (job->newcomm != NULL) *job->newcomm = NULL;
}

/* Runs job inline, on a helper thread (nonblocking or `threaded`), or on a
 * helper thread the enclosing group waits for. The caller's handle is
 * written when the communicator exists: at the end of an inline init (so no
 * other thread can reach a communicator that is still being made on the
 * caller's stack), before the thread starts otherwise, once init_job is set
 * so that abort and destroy can wait for the job. References: the job's
 * communicator holds the creator's; a helper thread takes another. */
static ncclResult_t job_launch(struct brd_init_job *job, int blocking, int threaded) {
  ncclResult_t res;
  int in_group = brd_group_depth() > 0;
  if (blocking && !in_group && !threaded) {
    res = job_run(job);
    if (res != ncclSuccess) init_failed(job);
    else if (job->comm != NULL) *job->newcomm = job->comm;
    job_release(job);
    return res;
  }
  if (job->comm != NULL) {
    job->comm->init_job = job;
    *job->newcomm = job->comm;
  }
  res = job_start_thread(job);
  if (res != ncclSuccess) {
    if (job->parent != NULL) atomic_fetch_sub(&job->parent->children_busy, 1);
    if (job->parent != NULL && job->parent_async)
      atomic_store(&job->parent->async_error, ncclSuccess);
    init_failed(job);
    job_release(job);
    return res;
  }
  if (job->comm == NULL) {
    job_release(job);            /* NOCOLOR: the thread's reference suffices */
    return blocking ? ncclSuccess : ncclInProgress;
  }
  if (threaded) return ncclSuccess;
  if (!blocking) {
    /* In a group, ncclGroupEnd reports ncclInProgress (as NCCL does). */
    if (!in_group) return ncclInProgress;
    group_nonblocking = 1;
    return ncclSuccess;
  }
  job->group_next = group_jobs;
  group_jobs = job;
  return ncclSuccess;
}

/* See comm.h. */
ncclResult_t brd_init_group_wait(void) {
  struct brd_init_job *list = group_jobs, *j;
  ncclResult_t first = ncclSuccess;
  int nonblocking = group_nonblocking;
  group_jobs = NULL;
  group_nonblocking = 0;
  for (j = list; j != NULL; j = j->group_next) {
    job_wait(j, INT64_MAX);
    if (j->result != ncclSuccess && first == ncclSuccess) {
      first = j->result;
      /* The rest would wait for this rank until their deadline. */
      for (struct brd_init_job *k = j->group_next; k != NULL; k = k->group_next)
        if (k->comm != NULL) atomic_store(&k->comm->abort_flag, 1);
    }
  }
  while (list != NULL) {
    j = list;
    list = j->group_next;
    if (j->result != ncclSuccess) {
      init_failed(j);
    } else if (j->comm != NULL) {
      j->comm->init_job = NULL;
    }
    job_release(j);
  }
  if (first != ncclSuccess) return first;
  return nonblocking ? ncclInProgress : ncclSuccess;
}

/* ---------------------------------------------------------------------- */
/* Entry points.                                                           */

/* NCCL's ncclCommEnsureReady: an aborted comm passes; one still in an
 * asynchronous operation is ncclInvalidArgument; an error is returned. */
static ncclResult_t ensure_ready(struct ncclComm *comm, const char *fn) {
  ncclResult_t r;
  if (atomic_load_explicit(&comm->abort_flag, memory_order_acquire)) return ncclSuccess;
  r = atomic_load_explicit(&comm->async_error, memory_order_acquire);
  if (r == ncclInProgress) {
    WARN("%s: Attempt to use communicator before the previous operation "
         "returned ncclSuccess", fn);
    return ncclInvalidArgument;
  }
  return r;
}

BRD_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  ARG_NOT_NULL(uniqueId, "ncclGetUniqueId");
  return brd_boot_get_unique_id(uniqueId);
}

/* The common path of every root init (NCCL's ncclCommInitRankDev). dev:
 * the device, DEV_LOCAL for "current device" (CUDA) or "local index"
 * (host). threaded: run on a helper thread even when blocking (InitAll). */
static ncclResult_t init_rank(ncclComm_t *newcomm, int nranks, int nids,
                              const ncclUniqueId *ids, int rank, int dev,
                              const ncclConfig_t *config, const char *fn,
                              int threaded) {
  struct ncclComm *comm = NULL;
  struct brd_init_job *job = NULL;
  brd_device_backend_t backend;
  const char *env_id;
  ncclResult_t res;

  if (nids <= 0 || nids > nranks) {
    WARN("improper usage of ncclCommInitRank: nId = %d, nranks=%d", nids, nranks);
    return ncclInvalidArgument;
  }
  brd_log_banner();
  ARG_NOT_NULL(newcomm, fn);
  /* From here on a failure leaves *newcomm NULL, as NCCL does. */
  *newcomm = NULL;
  ARG_NOT_NULL(ids, fn);
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("Invalid rank requested : %d/%d", rank, nranks);
    return ncclInvalidArgument;
  }
  CHECK(brd_device_backend(&backend));
  if (backend == BRD_DEVICE_CUDA && dev == DEV_LOCAL) CHECK(brd_device_current(&dev));

  CHECK(brd_comm_create(&comm));
  comm->rank = rank;
  comm->nranks = nranks;
  comm->backend = backend;
  comm->host_mode = backend == BRD_DEVICE_HOST;
  CHECK_GOTO(brd_config_resolve(config, NULL, &comm->config), res, fail_comm);
  if (comm->config.commName != NULL)
    snprintf(comm->comm_name, sizeof(comm->comm_name), "%s", comm->config.commName);
  CHECK_GOTO(job_create(&job), res, fail_comm);
  job->comm = comm;
  job->newcomm = newcomm;
  job->fn = fn;
  job->nranks = nranks;
  job->rank = rank;
  job->nids = nids;
  job->dev = dev;
  job->ids = malloc((size_t)nids * sizeof(*job->ids));
  if (job->ids == NULL) {
    WARN("out of host memory copying %d unique ids", nids);
    res = ncclSystemError;
    goto fail_job;
  }
  memcpy(job->ids, ids, (size_t)nids * sizeof(*job->ids));

  env_id = brd_param_str(BRD_P_COMM_ID);
  if (env_id != NULL && env_id[0] != '\0') {
    if (nids > 1) {
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_ENV, "NCCL_COMM_ID cannot be used with "
           "more than one ncclUniqueId");
      job->nids = 1;
    }
    /* Rank 0 serves the rendezvous at the address NCCL_COMM_ID names. */
    if (rank == 0) CHECK_GOTO(brd_boot_root_start(&job->ids[0]), res, fail_job);
  }
  return job_launch(job, comm->config.blocking, threaded);

fail_job:
  job_release(job);
fail_comm:
  brd_comm_destroy(comm);
  return res;
}

BRD_API(ncclResult_t, ncclCommInitRank, ncclComm_t *newcomm, int nranks,
        ncclUniqueId commId, int rank)
ncclResult_t pncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
                               int rank) {
  return init_rank(newcomm, nranks, 1, &commId, rank, DEV_LOCAL, NULL,
                   "ncclCommInitRank", 0);
}

BRD_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *newcomm, int nranks,
        ncclUniqueId commId, int rank, ncclConfig_t *config)
ncclResult_t pncclCommInitRankConfig(ncclComm_t *newcomm, int nranks,
                                     ncclUniqueId commId, int rank,
                                     ncclConfig_t *config) {
  return init_rank(newcomm, nranks, 1, &commId, rank, DEV_LOCAL, config,
                   "ncclCommInitRankConfig", 0);
}

BRD_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks,
        int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config)
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                       int nId, ncclUniqueId *commIds,
                                       ncclConfig_t *config) {
  return init_rank(newcomm, nranks, nId, commIds, myrank, DEV_LOCAL, config,
                   "ncclCommInitRankScalable", 0);
}

BRD_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist)
ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  brd_device_backend_t backend;
  ncclUniqueId id;
  ncclResult_t res = ncclSuccess;
  int total = 0;

  ARG_NOT_NULL(comms, "ncclCommInitAll");
  if (ndev < 0) {
    WARN("Invalid device count requested : %d", ndev);
    return ncclInvalidArgument;
  }
  CHECK(brd_device_backend(&backend));
  if (backend == BRD_DEVICE_CUDA) CHECK(brd_device_count(&total));
  if (devlist != NULL) {
    for (int i = 0; i < ndev; i++) {
      if (devlist[i] < 0 || (backend == BRD_DEVICE_CUDA && devlist[i] >= total)) {
        if (backend == BRD_DEVICE_CUDA)
          WARN("Invalid device %d (totalnDev=%d)", devlist[i], total);
        else
          WARN("Invalid device %d: host-mode devices are numbered from 0", devlist[i]);
        return ncclInvalidArgument;
      }
      for (int j = 0; j < i; j++) {
        if (devlist[j] == devlist[i]) {
          WARN("ncclCommInitAll: device %d appears twice in devlist (entries %d "
               "and %d)", devlist[i], j, i);
          return ncclInvalidUsage;
        }
      }
    }
  }
  if (ndev == 0) return ncclSuccess;
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  CHECK(brd_boot_get_unique_id(&id));
  /* All ranks at once, each on its own thread: they must meet. */
  for (int i = 0; i < ndev && res == ncclSuccess; i++)
    res = init_rank(&comms[i], ndev, 1, &id, i, devlist ? devlist[i] : i, NULL,
                    "ncclCommInitAll", 1);
  if (res != ncclSuccess) {
    for (int i = 0; i < ndev; i++)
      if (comms[i] != NULL) atomic_store(&comms[i]->abort_flag, 1);
    brd_boot_root_stop(&id);
  }
  for (int i = 0; i < ndev; i++) {
    struct brd_init_job *job;
    if (comms[i] == NULL || comms[i]->init_job == NULL) continue;
    job = comms[i]->init_job;
    job_wait(job, INT64_MAX);
    if (job->result != ncclSuccess && res == ncclSuccess) {
      res = job->result;
      for (int k = 0; k < ndev; k++)
        if (comms[k] != NULL) atomic_store(&comms[k]->abort_flag, 1);
    }
  }
  for (int i = 0; i < ndev; i++) {
    struct brd_init_job *job;
    if (comms[i] == NULL) continue;
    job = comms[i]->init_job;
    comms[i]->init_job = NULL;
    if (res != ncclSuccess) {
      brd_comm_destroy(comms[i]);
      comms[i] = NULL;
    }
    job_release(job);
  }
  return res;
}

/* Split and shrink (NCCL's ncclCommInitChildComm). */
static ncclResult_t init_child(struct ncclComm *parent, ncclComm_t *newcomm, int is_shrink,
                               int error_mode, int color, int key, const int *exclude,
                               int nexclude, const ncclConfig_t *config, const char *fn) {
  struct ncclComm *child = NULL;
  struct brd_init_job *job = NULL;
  ncclResult_t res;
  int blocking;

  CHECK(brd_comm_check(parent, fn));
  ARG_NOT_NULL(newcomm, fn);
  res = ensure_ready(parent, fn);
  /* In error mode (NCCL_SHRINK_ABORT) a parent in error may still shrink. */
  if (res != ncclSuccess && !(error_mode && res != ncclInvalidArgument)) return res;
  *newcomm = NULL;
  CHECK(job_create(&job));
  job->fn = fn;
  job->newcomm = newcomm;
  job->parent = parent;
  job->is_shrink = is_shrink;
  job->color = color;
  job->key = key;
  job->seq = ++parent->split_count;
  if (is_shrink) {
    job->exclude = malloc((size_t)nexclude * sizeof(int));
    if (job->exclude == NULL) {
      WARN("out of host memory copying %d excluded ranks", nexclude);
      res = ncclSystemError;
      goto fail_job;
    }
    memcpy(job->exclude, exclude, (size_t)nexclude * sizeof(int));
    job->nexclude = nexclude;
    /* Ascending insertion sort: lists are short. */
    for (int i = 1; i < nexclude; i++)
      for (int j = i; j > 0 && job->exclude[j - 1] > job->exclude[j]; j--) {
        int t = job->exclude[j];
        job->exclude[j] = job->exclude[j - 1];
        job->exclude[j - 1] = t;
      }
    for (int i = 0; i < nexclude; i++) {
      if (job->exclude[i] < 0 || job->exclude[i] >= parent->nranks) {
        WARN("%s: excluded rank %d is outside [0, %d)", fn, job->exclude[i],
             parent->nranks);
        res = ncclInvalidArgument;
        goto fail_job;
      }
      if (i > 0 && job->exclude[i] == job->exclude[i - 1]) {
        WARN("%s: rank %d is listed twice in excludeRanksList", fn, job->exclude[i]);
        res = ncclInvalidArgument;
        goto fail_job;
      }
      if (job->exclude[i] == parent->rank) {
        WARN("%s: rank %d is in excludeRanksList; excluded ranks must not call "
             "ncclCommShrink", fn, parent->rank);
        res = ncclInvalidArgument;
        goto fail_job;
      }
    }
  }
  if (!is_shrink && color == NCCL_SPLIT_NOCOLOR) {
    blocking = parent->config.blocking;
  } else {
    CHECK_GOTO(brd_comm_create(&child), res, fail_job);
    CHECK_GOTO(brd_config_resolve(config, &parent->config, &child->config), res,
               fail_child);
    if (child->config.commName != NULL)
      snprintf(child->comm_name, sizeof(child->comm_name), "%s", child->config.commName);
    blocking = child->config.blocking;
    job->comm = child;
  }
  atomic_fetch_add(&parent->children_busy, 1);
  if (!blocking) {
    job->parent_async = 1;
    atomic_store(&parent->async_error, ncclInProgress);
  }
  return job_launch(job, blocking, 0);

fail_child:
  brd_comm_destroy(child);
fail_job:
  job_release(job);
  return res;
}

BRD_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key,
        ncclComm_t *newcomm, ncclConfig_t *config)
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config) {
  return init_child(comm, newcomm, 0, 0, color, key, NULL, 0, config, "ncclCommSplit");
}

/* Sets the abort flag so operations in flight on comm return, waits (up to
 * the bootstrap timeout) until none is left, then clears the flag. */
static ncclResult_t quiesce(struct ncclComm *comm, const char *fn) {
  int64_t deadline = brd_sock_deadline(brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT));
  atomic_store(&comm->abort_flag, 1);
  while ((comm->boot != NULL && brd_boot_busy(comm->boot) != 0) ||
         atomic_load(&comm->children_busy) != 0) {
    struct timespec ts = {0, 1000000L};
    if (brd_time_now_ns() >= deadline) {
      WARN("%s: operations on rank %d did not stop after the abort flag was set",
           fn, comm->rank);
      return ncclInternalError;
    }
    nanosleep(&ts, NULL);
  }
  atomic_store(&comm->abort_flag, 0);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
        int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config,
        int shrinkFlags)
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                             int excludeRanksCount, ncclComm_t *newcomm,
                             ncclConfig_t *config, int shrinkFlags) {
  CHECK(brd_comm_check(comm, "ncclCommShrink"));
  ARG_NOT_NULL(newcomm, "ncclCommShrink");
  ARG_NOT_NULL(excludeRanksList, "ncclCommShrink");
  if (excludeRanksCount <= 0) {
    WARN("ncclCommShrink: excludeRanksCount is %d; it must be at least 1",
         excludeRanksCount);
    return ncclInvalidArgument;
  }
  /* Error mode: first stop whatever the parent is doing. */
  if (shrinkFlags & NCCL_SHRINK_ABORT) CHECK(quiesce(comm, "ncclCommShrink"));
  return init_child(comm, newcomm, 1, (shrinkFlags & NCCL_SHRINK_ABORT) != 0, 0,
                    comm->rank, excludeRanksList, excludeRanksCount, config,
                    "ncclCommShrink");
}

BRD_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommFinalize"));
  CHECK(ensure_ready(comm, "ncclCommFinalize"));
  if (comm->finalized) {
    WARN("ncclCommFinalize: rank %d was already finalized (or revoked)", comm->rank);
    return ncclInvalidArgument;
  }
  comm->finalized = 1;
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nranks %d cudaDev %d - Finalize COMPLETE",
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  int rank, nranks, dev;
  ncclResult_t r;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommDestroy"));
  CHECK(brd_group_check_teardown(comm, "ncclCommDestroy"));
  /* A split or shrink of comm still running reads it. One started in this
   * thread's open group ends only at ncclGroupEnd: refuse. Otherwise it
   * is finishing (its result is already published): wait for it. */
  if (atomic_load_explicit(&comm->children_busy, memory_order_acquire) != 0 &&
      (brd_group_depth() > 0 || !children_wait(comm, brd_time_now_ns() + ABORT_WAIT_NS))) {
    WARN("ncclCommDestroy : a split or shrink of rank %d's communicator is still "
         "running%s; it reads the communicator, so destroy it after %s", comm->rank,
         brd_group_depth() > 0 ? " (started in the open group)" : "",
         brd_group_depth() > 0 ? "ncclGroupEnd" : "the split returns");
    return ncclInvalidUsage;
  }
  r = ensure_ready(comm, "ncclCommDestroy");
  if (r != ncclSuccess) {
    if (r != ncclInvalidArgument)
      WARN("ncclCommDestroy: rank %d is in error state %d (%s); use ncclCommAbort "
           "to free it", comm->rank, (int)r, pncclGetErrorString(r));
    return r;
  }
  rank = comm->rank;
  nranks = comm->nranks;
  dev = comm->cuda_dev;
  /* Done jobs only here: ensure_ready saw the init finish. */
  if (comm->init_job != NULL) {
    job_wait(comm->init_job, INT64_MAX);
    job_release(comm->init_job);
    comm->init_job = NULL;
  }
  brd_comm_destroy(comm);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nranks %d cudaDev %d - Destroy COMPLETE",
       (void *)comm, rank, nranks, dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  int64_t deadline = brd_time_now_ns() + ABORT_WAIT_NS;
  int rank, nranks, dev;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommAbort"));
  rank = comm->rank;
  nranks = comm->nranks;
  dev = comm->cuda_dev;
  /* Work of this thread's open group on comm is discarded with it. */
  int dropped = brd_group_forget(comm);
  if (dropped > 0)
    INFO(BRD_SUBSYS_INIT, "ncclCommAbort: rank %d drops %d call(s) of the open group",
         rank, dropped);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Abort START",
       (void *)comm, rank, nranks, dev);
  atomic_store_explicit(&comm->abort_flag, 1, memory_order_release);
  brd_rt_abort(comm);
  if (comm->init_job != NULL && !job_wait(comm->init_job, deadline)) {
    /* Every wait of a job polls the flag, so this means a bug; freeing the
     * communicator under the running job would be worse than the leak. */
    WARN("ncclCommAbort: the init of rank %d did not stop within 1 s; the "
         "communicator is left allocated", rank);
    return ncclSuccess;
  }
  if (!children_wait(comm, deadline)) {
    WARN("ncclCommAbort: a split/shrink from rank %d did not stop within 1 s; "
         "the communicator is left allocated", rank);
    return ncclSuccess;
  }
  if (comm->init_job != NULL) {
    job_release(comm->init_job);
    comm->init_job = NULL;
  }
  brd_comm_destroy(comm);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Abort COMPLETE",
       (void *)comm, rank, nranks, dev);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  ncclResult_t res;
  if (comm == NULL) return ncclSuccess;
  CHECK(brd_comm_check(comm, "ncclCommRevoke"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), not %d",
         revokeFlags);
    return ncclInvalidArgument;
  }
  if (comm->finalized || comm->revoked) {
    WARN("ncclCommRevoke: rank %d was already %s", comm->rank,
         comm->revoked ? "revoked" : "finalized");
    return ncclInvalidArgument;
  }
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d nRanks %d cudaDev %d - Revoke START",
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev);
  comm->revoked = 1;
  comm->finalized = 1;
  if (comm->init_job != NULL) {
    atomic_store(&comm->abort_flag, 1);
    job_wait(comm->init_job, INT64_MAX);
  }
  res = quiesce(comm, "ncclCommRevoke");
  if (res == ncclSuccess && atomic_load(&comm->async_error) == ncclInProgress)
    atomic_store(&comm->async_error, ncclSuccess);
  INFO(BRD_SUBSYS_INIT, "comm %p rank %d - Revoke COMPLETE, result %d", (void *)comm,
       comm->rank, (int)res);
  return res;
}

BRD_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  CHECK(brd_comm_check(comm, "ncclCommGetAsyncError"));
  ARG_NOT_NULL(asyncError, "ncclCommGetAsyncError");
  /* CUDA mode: fold in a failure the executor recorded on the device. */
  (void)brd_rt_poll(comm);
  *asyncError = (ncclResult_t)atomic_load_explicit(&comm->async_error, memory_order_acquire);
  return ncclSuccess;
}

/* The int getters: NCCL's checks on comm, the output `arg` and the
 * communicator's readiness, then the int member at `offset` of comm. */
static ncclResult_t comm_get_int(const ncclComm_t comm, size_t offset, int *out,
                                 const char *fn, const char *arg) {
  CHECK(brd_comm_check(comm, fn));
  if (out == NULL) {
    WARN("%s : %s argument is NULL", fn, arg);
    return ncclInvalidArgument;
  }
  CHECK(ensure_ready(comm, fn));
  *out = *(const int *)((const char *)comm + offset);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  return comm_get_int(comm, offsetof(struct ncclComm, nranks), count, "ncclCommCount",
                      "count");
}

BRD_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device) {
  return comm_get_int(comm, offsetof(struct ncclComm, cuda_dev), device,
                      "ncclCommCuDevice", "device");
}

BRD_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  return comm_get_int(comm, offsetof(struct ncclComm, rank), rank, "ncclCommUserRank",
                      "rank");
}
