/*
 * Braid: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.
 *
 * Depth, the queue of collected calls, the group's first error and its
 * blocking mode are per thread. Only the outermost ncclGroupEnd acts: it
 * waits for communicators being initialised in the group, then runs every
 * collected call as one launch per communicator. Launches of different
 * communicators run concurrently (one thread each), because one thread may
 * drive every rank of a clique (ncclCommInitAll) and those ranks wait on
 * each other. A nonblocking group does the same on a detached helper
 * thread and returns ncclInProgress at once; the helper publishes each
 * communicator's result in its async error as its last touch of it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "base/array.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/group.h"
#include "core/launch.h"
#include "base/param.h"
#include "base/time.h"
#include "core/backend.h"
#include "core/bootstrap.h"

static _Thread_local int group_depth;
static _Thread_local brd_call_t *queue;   /* owned: calls collected so far */
static _Thread_local int queue_len, queue_cap;
/* The queue's memory outlives a group while it is small (QUEUE_KEEP
 * calls), since nearly every call of a program makes a group of one; the
 * key frees it when its thread exits. */
#define QUEUE_KEEP 64
static pthread_key_t queue_key;
static pthread_once_t queue_key_once = PTHREAD_ONCE_INIT;
static int queue_key_ok;

static void queue_key_make(void) { queue_key_ok = pthread_key_create(&queue_key, free) == 0; }
static _Thread_local ncclResult_t group_err;  /* first failed call */
static _Thread_local int group_blocking = -1; /* -1 until the first call */

typedef struct group_job {
  struct ncclComm *comm;
  brd_group_job_fn fn;
  void *arg;                 /* owned */
} group_job_t;
static _Thread_local group_job_t *jobs;      /* owned: brd_group_add_job */
static _Thread_local int njobs, cap_jobs;

/* See group.h. */
int brd_group_depth(void) { return group_depth; }

/* See group.h. */
void brd_group_start(void) { group_depth++; }

/* See group.h. */
ncclResult_t brd_group_error(ncclResult_t res) {
  if (group_depth > 0 && res != ncclSuccess && res != ncclInProgress &&
      group_err == ncclSuccess)
    group_err = res;
  return res;
}

/* See group.h. */
ncclResult_t brd_group_add(const brd_call_t *call) {
  int blocking = call->comm->config.blocking != 0;
  if (group_blocking == -1) {
    group_blocking = blocking;
  } else if (group_blocking != blocking) {
    WARN("%s : blocking and nonblocking communicators are not allowed in the "
         "same group (rank %d's is %s); group them separately", call->fn,
         call->comm->rank, blocking ? "blocking" : "nonblocking");
    return ncclInvalidArgument;
  }
  brd_call_t *q = brd_array_grow(queue, queue_len, &queue_cap, sizeof(*queue), QUEUE_KEEP);
  if (q == NULL) {
    WARN("%s : out of host memory queueing call %d of a group", call->fn, queue_len + 1);
    return ncclSystemError;
  }
  if (q != queue) {
    (void)pthread_once(&queue_key_once, queue_key_make);
    if (queue_key_ok) (void)pthread_setspecific(queue_key, q);
  }
  queue = q;
  queue[queue_len++] = *call;
  return ncclSuccess;
}

/* See group.h. */
ncclResult_t brd_group_add_job(struct ncclComm *comm, brd_group_job_fn fn, void *arg) {
  group_job_t *j = brd_array_grow(jobs, njobs, &cap_jobs, sizeof(*jobs), 8);
  if (j == NULL) {
    free(arg);
    WARN("ncclGroupEnd : out of host memory queueing work of a group");
    return ncclSystemError;
  }
  jobs = j;
  jobs[njobs].comm = comm;
  jobs[njobs].fn = fn;
  jobs[njobs].arg = arg;
  njobs++;
  return ncclSuccess;
}

/* Calls and jobs of the calling thread's open group on comm. */
static int group_holds(const struct ncclComm *comm) {
  int n = 0;
  for (int i = 0; i < queue_len; i++) n += queue[i].comm == comm;
  for (int i = 0; i < njobs; i++) n += jobs[i].comm == comm;
  return n;
}

/* See group.h. */
ncclResult_t brd_group_check_teardown(const struct ncclComm *comm, const char *fn) {
  int n;
  if (group_depth == 0 || (n = group_holds(comm)) == 0) return ncclSuccess;
  WARN("%s : rank %d has %d call%s queued in this thread's open group that "
       "would run on it at ncclGroupEnd; call ncclGroupEnd first (or "
       "ncclCommAbort to discard them)", fn, comm->rank, n, n == 1 ? "" : "s");
  return ncclInvalidUsage;
}

/* See group.h. */
int brd_group_forget(const struct ncclComm *comm) {
  int kept = 0, dropped = 0;
  for (int i = 0; i < queue_len; i++) {
    if (queue[i].comm == comm) {
      dropped++;
      continue;
    }
    queue[kept++] = queue[i];
  }
  queue_len = kept;
  kept = 0;
  for (int i = 0; i < njobs; i++) {
    if (jobs[i].comm == comm) {
      free(jobs[i].arg);
      dropped++;
      continue;
    }
    jobs[kept++] = jobs[i];
  }
  njobs = kept;
  return dropped;
}

/* One communicator's share of the group's end, run on a thread of its own
 * when there are several: the first member of comm_batch_t and job_run_t. */
typedef struct comm_task {
  struct ncclComm *comm;
  void (*run)(struct comm_task *t); /* does the work, sets res */
  ncclResult_t res;
  pthread_t thread;
  int started;
} comm_task_t;

static void *task_main(void *arg) {
  comm_task_t *t = arg;
  t->run(t);
  return NULL;
}

/* Runs n tasks (each the first member of an element of `size` bytes at
 * base), concurrently when there are several, since one thread may drive
 * every rank of a clique and those ranks wait on each other. Returns the
 * first failure; a task that could not start gets ncclSystemError and the
 * communicators already started are aborted. Blocks until all are done. */
static ncclResult_t tasks_run(void *base, int n, size_t size) {
  ncclResult_t res = ncclSuccess;
#define TASK(i) ((comm_task_t *)((char *)base + (size_t)(i) * size))
  if (n == 1) {
    TASK(0)->run(TASK(0));
    return TASK(0)->res;
  }
  for (int i = 0; i < n; i++) {
    int err = pthread_create(&TASK(i)->thread, NULL, task_main, TASK(i));
    if (err != 0) {
      WARN("ncclGroupEnd : creating a launch thread failed: %s; aborting "
           "the communicators already launched", strerror(err));
      for (int k = 0; k < i; k++) atomic_store(&TASK(k)->comm->abort_flag, 1);
      for (int k = i; k < n; k++) TASK(k)->res = ncclSystemError;
      res = ncclSystemError;
      break;
    }
    TASK(i)->started = 1;
  }
  for (int i = 0; i < n; i++) {
    if (!TASK(i)->started) continue;
    pthread_join(TASK(i)->thread, NULL);
    if (res == ncclSuccess) res = TASK(i)->res;
  }
#undef TASK
  return res;
}

/* The index of comm's task among the first n of the `size`-byte elements
 * at base (each beginning with its comm_task_t, as for tasks_run); n when
 * comm has none yet. */
static int task_find(const void *base, int n, size_t size, const struct ncclComm *comm) {
  int i = 0;
  while (i < n && ((const comm_task_t *)((const char *)base + (size_t)i * size))->comm != comm)
    i++;
  return i;
}

/* One communicator's jobs. */
typedef struct {
  comm_task_t t;
  const group_job_t *list;   /* borrowed: the calling thread's jobs */
  int n;
} job_run_t;

static void jobs_main(comm_task_t *t) {
  job_run_t *jr = (job_run_t *)t;
  for (int i = 0; i < jr->n && t->res == ncclSuccess; i++)
    if (jr->list[i].comm == t->comm) t->res = jr->list[i].fn(t->comm, jr->list[i].arg);
}

/* Runs the group's jobs: each communicator's in order, communicators
 * concurrently. Returns the first failure. */
static ncclResult_t jobs_run(void) {
  if (njobs == 0) return ncclSuccess;
  job_run_t *runs = calloc((size_t)njobs, sizeof(*runs));
  if (runs == NULL) {
    WARN("ncclGroupEnd : out of host memory running the group's work");
    return ncclSystemError;
  }
  int nr = 0;
  for (int i = 0; i < njobs; i++) {
    if (task_find(runs, nr, sizeof(*runs), jobs[i].comm) == nr) {
      runs[nr].t.comm = jobs[i].comm;
      runs[nr].t.run = jobs_main;
      runs[nr].list = jobs;
      runs[nr].n = njobs;
      nr++;
    }
  }
  ncclResult_t res = tasks_run(runs, nr, sizeof(*runs));
  free(runs);
  return res;
}

static void jobs_reset(void) {
  for (int i = 0; i < njobs; i++) free(jobs[i].arg);
  free(jobs);
  jobs = NULL;
  njobs = cap_jobs = 0;
}

/* Forgets the group: queue, error and mode. */
static void group_reset(void) {
  jobs_reset();
  /* A thread with a queue went through queue_key_once (brd_group_add). */
  if (queue != NULL && (queue_cap > QUEUE_KEEP || !queue_key_ok)) {
    free(queue);
    queue = NULL;
    queue_cap = 0;
    if (queue_key_ok) (void)pthread_setspecific(queue_key, NULL);
  }
  queue_len = 0;
  group_err = ncclSuccess;
  group_blocking = -1;
}

BRD_API(ncclResult_t, ncclGroupStart, void)
ncclResult_t pncclGroupStart(void) {
  brd_group_start();
  return ncclSuccess;
}

/* One communicator's share of a group. */
typedef struct {
  comm_task_t t;
  brd_call_t *calls;      /* owned: this comm's calls, in call order */
  int ncalls;
} comm_batch_t;

static void batches_free(comm_batch_t *bs, int nb) {
  for (int i = 0; i < nb; i++) free(bs[i].calls);
  free(bs);
}

/* ---- BRAID_CHECK_CALLS: the same call on every rank ---------------------
 * Before a launch moves data, every rank's collective calls of the batch
 * (name, count, datatype, op, root, and the sequence number of the first)
 * are allgathered through the bootstrap and compared with rank 0's; a
 * difference fails every rank with ncclInvalidUsage naming the two ranks
 * and the field. Up to SIG_CALLS calls are compared field by field, the
 * rest by a hash. Sends and receives are not compared (their peers and
 * counts differ by design). */
#define SIG_CALLS 8

typedef struct {
  char fn[16];
  uint64_t count;
  int32_t dtype, op, root, pad;
} sig_call_t;

typedef struct {
  uint64_t seq;              /* collectives this rank ran before this batch */
  uint32_t ncalls;           /* collectives in this batch */
  uint32_t pad;
  uint64_t rest_hash;        /* of the calls past SIG_CALLS */
  sig_call_t call[SIG_CALLS];
} sig_t;

static uint64_t sig_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

static void sig_fill(const struct ncclComm *comm, const brd_call_t *calls, int n, sig_t *s) {
  memset(s, 0, sizeof(*s));
  s->seq = comm->calls_seq;
  for (int i = 0; i < n; i++) {
    const brd_call_t *c = &calls[i];
    if (c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV) continue;
    /* A user operator's handle is local to each rank: compare its kind. */
    int32_t op = c->premul ? -1 : (int32_t)c->op;
    if (s->ncalls < SIG_CALLS) {
      sig_call_t *e = &s->call[s->ncalls];
      snprintf(e->fn, sizeof(e->fn), "%s", c->fn);
      e->count = c->count;
      e->dtype = (int32_t)c->dtype;
      e->op = op;
      e->root = c->root;
    } else {
      for (const char *p = c->fn; *p != '\0'; p++) s->rest_hash = sig_mix(s->rest_hash, (uint8_t)*p);
      s->rest_hash = sig_mix(s->rest_hash, c->count);
      s->rest_hash = sig_mix(s->rest_hash, ((uint64_t)(uint32_t)c->dtype << 32) | (uint32_t)op);
      s->rest_hash = sig_mix(s->rest_hash, (uint64_t)(uint32_t)c->root);
    }
    s->ncalls++;
  }
}

/* The first field where b differs from a, written into what/va/vb. */
static int sig_diff(const sig_t *a, const sig_t *b, char *what, size_t wl, char *va,
                    size_t val, char *vb, size_t vl) {
  if (a->seq != b->seq) {
    snprintf(what, wl, "sequence number");
    snprintf(va, val, "%llu", (unsigned long long)a->seq);
    snprintf(vb, vl, "%llu", (unsigned long long)b->seq);
    return 1;
  }
  if (a->ncalls != b->ncalls) {
    snprintf(what, wl, "number of collectives in the group");
    snprintf(va, val, "%u", a->ncalls);
    snprintf(vb, vl, "%u", b->ncalls);
    return 1;
  }
  for (uint32_t i = 0; i < a->ncalls && i < SIG_CALLS; i++) {
    const sig_call_t *x = &a->call[i], *y = &b->call[i];
    const char *f = NULL;
    long long u = 0, v = 0;
    if (strncmp(x->fn, y->fn, sizeof(x->fn)) != 0) {
      snprintf(what, wl, "collective (call %u of the group)", i + 1);
      snprintf(va, val, "%.16s", x->fn);
      snprintf(vb, vl, "%.16s", y->fn);
      return 1;
    }
    if (x->count != y->count) f = "count", u = (long long)x->count, v = (long long)y->count;
    else if (x->dtype != y->dtype) f = "datatype", u = x->dtype, v = y->dtype;
    else if (x->op != y->op) f = "op", u = x->op, v = y->op;
    else if (x->root != y->root) f = "root", u = x->root, v = y->root;
    if (f != NULL) {
      snprintf(what, wl, "%s of %.16s (call %u of the group)", f, x->fn, i + 1);
      snprintf(va, val, "%lld", u);
      snprintf(vb, vl, "%lld", v);
      return 1;
    }
  }
  if (a->rest_hash != b->rest_hash) {
    snprintf(what, wl, "collectives past the %dth of the group", SIG_CALLS);
    snprintf(va, val, "one list");
    snprintf(vb, vl, "another");
    return 1;
  }
  return 0;
}

/* See the section comment. Blocks on every rank (BRAID_TIMEOUT). */
static ncclResult_t calls_check(struct ncclComm *comm, const brd_call_t *calls, int n) {
  ncclResult_t res = ncclSuccess;
  sig_t *all;
  if (comm->nranks < 2 || comm->boot == NULL) return ncclSuccess;
  all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL) {
    WARN("BRAID_CHECK_CALLS: out of host memory for %d ranks' calls", comm->nranks);
    return ncclSystemError;
  }
  sig_fill(comm, calls, n, &all[comm->rank]);
  comm->calls_seq += all[comm->rank].ncalls;
  CHECK_GOTO(brd_boot_allgather_timed(comm->boot, all, sizeof(*all),
                                      brd_param_int(BRD_P_BRAID_TIMEOUT),
                                      "BRAID_CHECK_CALLS"),
             res, out);
  for (int r = 1; r < comm->nranks; r++) {
    char what[96], va[40], vb[40];
    if (!sig_diff(&all[0], &all[r], what, sizeof(what), va, sizeof(va), vb, sizeof(vb)))
      continue;
    WARN("BRAID_CHECK_CALLS: ranks 0 and %d made different calls: %s is %s on rank 0 "
         "but %s on rank %d (seen by rank %d); every rank must make the same "
         "collective calls in the same order", r, what, va, vb, r, comm->rank);
    res = ncclInvalidUsage;
    break;
  }
out:
  free(all);
  return res;
}

static void batch_main(comm_task_t *t) {
  comm_batch_t *b = (comm_batch_t *)t;
  struct ncclComm *comm = t->comm;
  const char *fn = b->calls[0].fn;
  /* Liveness (comm.h): a rank known gone fails the launch at once; one
   * found gone while it runs stops it, and the result says who. */
  t->res = brd_comm_live_check(comm, fn);
  if (t->res != ncclSuccess) return;
  brd_comm_live_watch(comm);
  if (brd_param_int(BRD_P_BRAID_CHECK_CALLS) != 0) {
    t->res = calls_check(comm, b->calls, b->ncalls);
    if (t->res != ncclSuccess) return;
  }
  atomic_store_explicit(&comm->launch_since_ns, brd_time_now_ns(), memory_order_release);
  t->res = brd_launch_run(comm, b->calls, b->ncalls);
  atomic_store_explicit(&comm->launch_since_ns, 0, memory_order_release);
  if (t->res != ncclSuccess && t->res != ncclInProgress &&
      atomic_load_explicit(&comm->peer_dead, memory_order_acquire) != 0)
    t->res = brd_comm_live_check(comm, fn);
}

/* Takes the queue, split by communicator keeping call order. */
static ncclResult_t batches_make(comm_batch_t **out, int *nout) {
  comm_batch_t *bs = calloc((size_t)queue_len, sizeof(*bs));
  if (bs == NULL) {
    WARN("ncclGroupEnd : out of host memory for %d calls", queue_len);
    return ncclSystemError;
  }
  int nb = 0;
  for (int i = 0; i < queue_len; i++) {
    int j = task_find(bs, nb, sizeof(*bs), queue[i].comm);
    if (j == nb) {
      int n = 0;
      for (int k = i; k < queue_len; k++) n += queue[k].comm == queue[i].comm;
      bs[nb].t.comm = queue[i].comm;
      bs[nb].t.run = batch_main;
      bs[nb].calls = calloc((size_t)n, sizeof(brd_call_t));
      if (bs[nb].calls == NULL) {
        batches_free(bs, nb);
        WARN("ncclGroupEnd : out of host memory for %d calls", n);
        return ncclSystemError;
      }
      nb++;
    }
    bs[j].calls[bs[j].ncalls++] = queue[i];
  }
  *out = bs;
  *nout = nb;
  return ncclSuccess;
}

/* Runs every batch, concurrently when there are several, and returns the
 * first failure. Blocks until all are done. */
static ncclResult_t batches_run(comm_batch_t *bs, int nb) {
  return tasks_run(bs, nb, sizeof(*bs));
}

/* A nonblocking group on its helper thread. */
typedef struct {
  comm_batch_t *bs;       /* owned */
  int nb;
} async_group_t;

static void *async_main(void *arg) {
  async_group_t *g = arg;
  comm_batch_t *bs = g->bs;
  int nb = g->nb;
  free(g);
  batches_run(bs, nb);
  for (int i = 0; i < nb; i++) {
    free(bs[i].calls);
    bs[i].calls = NULL;
  }
  /* Each report is the last touch of that communicator. */
  for (int i = 0; i < nb; i++) brd_launch_async_end(bs[i].t.comm, bs[i].t.res);
  free(bs);
  return NULL;
}

/* Starts a nonblocking group; returns ncclInProgress, or an error with
 * every communicator's async error set to it. Takes ownership of bs. */
static ncclResult_t async_start(comm_batch_t *bs, int nb) {
  ncclResult_t res = ncclSuccess;
  pthread_attr_t attr;
  pthread_t thread;
  int begun = 0;
  async_group_t *g = calloc(1, sizeof(*g));
  if (g == NULL) {
    WARN("ncclGroupEnd : out of host memory starting a nonblocking group");
    res = ncclSystemError;
    goto fail;
  }
  g->bs = bs;
  g->nb = nb;
  for (; begun < nb; begun++) CHECK_GOTO(brd_launch_async_begin(bs[begun].t.comm), res, fail);
  PTHREAD_CHECK_GOTO(pthread_attr_init(&attr), "pthread_attr_init", res, fail);
  PTHREAD_CHECK_GOTO(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED),
                     "pthread_attr_setdetachstate", res, fail_attr);
  PTHREAD_CHECK_GOTO(pthread_create(&thread, &attr, async_main, g),
                     "ncclGroupEnd: starting the nonblocking group's thread", res,
                     fail_attr);
  pthread_attr_destroy(&attr);
  return ncclInProgress;

fail_attr:
  pthread_attr_destroy(&attr);
fail:
  free(g);
  for (int i = 0; i < begun; i++) brd_launch_async_end(bs[i].t.comm, res);
  for (int i = begun; i < nb; i++) atomic_store(&bs[i].t.comm->async_error, (int)res);
  batches_free(bs, nb);
  return res;
}

/* Ranks sharing a GPU wait for each other inside their kernels, so two
 * ranks of one communicator on one GPU must not queue a group's calls on
 * the same stream: the second kernel would wait behind the first, which
 * waits for it (until BRAID_TIMEOUT). NCCL never meets this (one rank per GPU).
 * ncclInvalidUsage (WARN naming both ranks) in CUDA mode; host mode has
 * no streams to wait on. */
static ncclResult_t shared_stream_check(void) {
  if (queue_len < 2) return ncclSuccess;
  /* The distinct (communicator, stream) pairs of the group's calls, so a
   * group of many calls on few communicators costs calls x pairs. */
  int *pairs = malloc((size_t)queue_len * sizeof(*pairs));
  int npairs = 0;
  ncclResult_t res = ncclSuccess;
  if (pairs == NULL) {
    WARN("ncclGroupEnd: out of host memory checking %d calls", queue_len);
    return ncclSystemError;
  }
  for (int i = 0; i < queue_len && res == ncclSuccess; i++) {
    struct ncclComm *a = queue[i].comm;
    if (a == NULL || queue[i].count == 0) continue;
    int seen = 0;
    for (int k = 0; k < npairs && !seen && res == ncclSuccess; k++) {
      const brd_call_t *q = &queue[pairs[k]];
      struct ncclComm *b = q->comm;
      seen = b == a && q->stream == queue[i].stream;
      if (seen || b == a || b->comm_hash != a->comm_hash || q->stream != queue[i].stream ||
          b->cuda_dev != a->cuda_dev || brd_backend_choose(a) == &brd_backend_host)
        continue;
      WARN("%s : rank %d and rank %d share GPU %d and this group queues calls of both on the "
           "same stream: each rank's kernel would wait behind the other's, which waits for "
           "it; give every communicator on a GPU a stream of its own", queue[i].fn,
           b->rank, a->rank, a->cuda_dev);
      res = ncclInvalidUsage;
    }
    if (!seen) pairs[npairs++] = i;
  }
  free(pairs);
  return res;
}

/* The outermost group end: runs (or, after a failed call, drops) the
 * queue. */
static ncclResult_t run_queue(void) {
  comm_batch_t *bs;
  int nb;
  if (group_err == ncclSuccess) group_err = shared_stream_check();
  if (group_err != ncclSuccess) {
    /* NCCL drops the whole group; nonblocking communicators keep the
     * error as their state. */
    for (int i = 0; i < queue_len; i++)
      if (!queue[i].comm->config.blocking)
        atomic_store(&queue[i].comm->async_error, (int)group_err);
    return group_err;
  }
  if (queue_len == 0) return ncclSuccess;
  if (group_blocking != 0) {
    /* Every call on one communicator (any call made outside a group, the
     * usual case): the queue is the batch, run here. */
    int one = 1;
    for (int i = 1; i < queue_len && one; i++) one = queue[i].comm == queue[0].comm;
    if (one) {
      comm_batch_t b = {.t = {.comm = queue[0].comm, .run = batch_main},
                        .calls = queue,
                        .ncalls = queue_len};
      return batches_run(&b, 1);
    }
  }
  CHECK(batches_make(&bs, &nb));
  if (group_blocking == 0) return async_start(bs, nb);
  ncclResult_t res = batches_run(bs, nb);
  batches_free(bs, nb);
  return res;
}

/* See group.h. */
ncclResult_t brd_group_end(void) {
  if (group_depth == 0) {
    WARN("ncclGroupEnd: not in a group call; every ncclGroupEnd needs a "
         "matching ncclGroupStart on the same thread");
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t init_res = brd_init_group_wait();
  if (group_err == ncclSuccess && (init_res == ncclSuccess || init_res == ncclInProgress)) {
    ncclResult_t jr = jobs_run();
    if (jr != ncclSuccess) group_err = jr;
  }
  ncclResult_t res = run_queue();
  group_reset();
  if (init_res != ncclSuccess && init_res != ncclInProgress) return init_res;
  if (res != ncclSuccess) return res;
  return init_res;
}

BRD_API(ncclResult_t, ncclGroupEnd, void)
ncclResult_t pncclGroupEnd(void) { return brd_group_end(); }

#define SIM_INFO_MAGIC 0x74685283u

BRD_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo)
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  ARG_NOT_NULL(simInfo, "ncclGroupSimulateEnd");
  if (simInfo->magic != SIM_INFO_MAGIC) {
    WARN("ncclGroupSimulateEnd : simInfo argument not initialized via "
         "NCCL_SIM_INFO_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (group_depth == 0) {
    WARN("ncclGroupSimulateEnd: not in a group call; call ncclGroupStart "
         "first");
    return ncclInvalidUsage;
  }
  /* Simulating consumes the group without running it: the estimate is
   * each communicator's calls back to back, communicators in parallel. */
  ncclResult_t res = brd_init_group_wait();
  if (res == ncclInProgress) res = ncclSuccess;
  float worst = 0.0f;
  for (int i = 0; i < queue_len && res == ncclSuccess; i++) {
    if (queue[i].comm == NULL) continue;
    int seen = 0;
    for (int k = 0; k < i; k++) seen |= queue[k].comm == queue[i].comm;
    if (seen) continue;
    float total = 0.0f;
    for (int j = i; j < queue_len && res == ncclSuccess; j++) {
      if (queue[j].comm != queue[i].comm || queue[j].count == 0) continue;
      float us = 0.0f;
      int pipe_ops = 0; /* NCCL's numPipeOps: this collective's calls on the comm */
      for (int k = i; k < queue_len; k++)
        pipe_ops += queue[k].comm == queue[i].comm && queue[k].coll == queue[j].coll &&
                    queue[k].count != 0;
      res = brd_launch_estimate(queue[j].comm, &queue[j], pipe_ops, &us);
      total += us;
    }
    if (total > worst) worst = total;
  }
  if (res == ncclSuccess && group_err != ncclSuccess) res = group_err;
  group_depth = 0;
  group_reset();
  if (res == ncclSuccess) simInfo->estimatedTime = worst;
  return res;
}
