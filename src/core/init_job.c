/*
 * Braid: the init job: what every communicator init runs (the bootstrap,
 * the identities, the topology, the tuner and profiler contexts; for a
 * split or shrink, the child's members from its parent) and on which
 * thread it runs. The entry points that make jobs are in init.c; the job
 * and these functions' contracts are in init.h.
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
#include "core/init.h"

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

/* See init.h. */
ncclResult_t brd_init_job_create(struct brd_init_job **job_out) {
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

/* See init.h. */
void brd_init_job_release(struct brd_init_job *job) {
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
int brd_init_job_wait(struct brd_init_job *job, int64_t deadline_ns) {
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
  brd_init_job_release(job);
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
ncclResult_t brd_init_job_launch(struct brd_init_job *job, int blocking, int threaded) {
  ncclResult_t res;
  int in_group = brd_group_depth() > 0;
  if (blocking && !in_group && !threaded) {
    res = job_run(job);
    if (res != ncclSuccess) init_failed(job);
    else if (job->comm != NULL) *job->newcomm = job->comm;
    brd_init_job_release(job);
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
    brd_init_job_release(job);
    return res;
  }
  if (job->comm == NULL) {
    brd_init_job_release(job); /* NOCOLOR: the thread's reference suffices */
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
    brd_init_job_wait(j, INT64_MAX);
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
    brd_init_job_release(j);
  }
  if (first != ncclSuccess) return first;
  return nonblocking ? ncclInProgress : ncclSuccess;
}
