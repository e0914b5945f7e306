/*
 * Braid: the host backend. Windows are host memory (the host transport
 * when every rank is a thread of this process, SHM otherwise) and the host
 * executor runs the works on worker threads of the launching process.
 *
 * User buffers are private to their process, so a collective plan's output
 * is the window's staging half of the work's phase, copied to the user's
 * buffer when this rank's part of the plan is done (works.h).
 *
 * One launch: all the works of one brd_launch_run run on one set of worker
 * threads, one per block of the widest plan, started once; between works
 * the workers meet so the finished work's output can be copied out before
 * the next one starts. A group of a thousand small calls is therefore one
 * launch with a thousand works, not a thousand launches.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "base/time.h"
#include "core/backend.h"
#include "core/comm.h"
#include "core/mem.h"
#include "core/profiler.h"
#include "core/works.h"
#include "device/exec_host.h"

/* The host backend's state of one communicator. */
struct brd_backend {
  int nranks;
  const brd_transport_ops_t *t; /* host or SHM */
  brd_seg_t self;               /* owned: this rank's window */
  brd_seg_t *peer;              /* owned: [nranks] imported windows */
};

/* ---- windows ---------------------------------------------------------------- */

static ncclResult_t host_caps(struct ncclComm *comm, brd_backend_caps_t *caps_out, char *why,
                              size_t nwhy) {
  (void)comm, (void)nwhy;
  int64_t stage = brd_param_int(BRD_P_BRAID_HOST_STAGING);
  if (stage < 4096) stage = 4096;
  why[0] = '\0';
  caps_out->p2p_ok = 0;
  caps_out->nb_max = 2;
  caps_out->stage_bytes = ((uint64_t)stage + 4095) & ~(uint64_t)4095;
  return ncclSuccess;
}

/* Host threads are not cheap: a second block from 256 KiB (nb_sizes). */
#define HOST_BLOCK2_BYTES ((size_t)256 << 10)

static void host_topo(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t) {
  (void)comm, (void)p2p;
  /* Host mode moves data through memory that the host's ranks share, and
   * every wait is a thread that the host's cores must get to: the figures
   * measured in host mode (tune_hw.c), for t->local_nranks ranks here. */
  brd_hw_host_topo(t->local_nranks, HOST_BLOCK2_BYTES, t);
}

static void host_destroy(struct brd_backend *b) {
  if (b == NULL) return;
  if (b->peer != NULL)
    for (int r = 0; r < b->nranks; r++) b->t->seg_close(&b->peer[r]);
  b->t->seg_close(&b->self);
  free(b->peer);
  free(b);
}

static ncclResult_t host_window_create(struct ncclComm *comm, const brd_transport_ops_t *t,
                                       int p2p, size_t bytes, brd_seg_handle_t *handle_out,
                                       char **base_out, struct brd_backend **b_out) {
  ncclResult_t res = ncclSuccess;
  (void)p2p;
  struct brd_backend *b = calloc(1, sizeof(*b));
  if (b != NULL) b->peer = calloc((size_t)comm->nranks, sizeof(*b->peer));
  if (b == NULL || b->peer == NULL) {
    WARN("out of host memory for the window tables of rank %d (%d ranks)", comm->rank,
         comm->nranks);
    free(b);
    return ncclSystemError;
  }
  b->nranks = comm->nranks;
  b->t = t;
  CHECK_GOTO(t->seg_create(bytes, "win", &b->self), res, fail);
  *handle_out = b->self.handle;
  *base_out = b->self.ptr;
  *b_out = b;
  return ncclSuccess;
fail:
  free(b->peer);
  free(b);
  return res;
}

static ncclResult_t host_window_import(struct brd_backend *b, int r,
                                       const brd_seg_handle_t *handle, char **base_out) {
  CHECK(b->t->seg_import(handle, &b->peer[r]));
  *base_out = b->peer[r].ptr;
  return ncclSuccess;
}

static void host_window_seal(struct brd_backend *b) { b->t->seg_seal(&b->self); }

/* ---- registration ------------------------------------------------------------ */

/* Every rank a thread of this process: the address as it is (pid 0).
 * Otherwise the memfd of the ncclMemAlloc block holding the range, served
 * to the other processes. */
static ncclResult_t host_reg_export(const struct ncclComm *comm, const char *ptr, size_t size,
                                    brd_seg_handle_t *handle_out, uint64_t *offset_out,
                                    brd_p2p_export_t *ex, char *why, size_t nwhy, int *ok_out) {
  int found = 0;
  *ok_out = 0;
  if (brd_comm_all_in_process(comm)) {
    handle_out->local_addr = (uint64_t)(uintptr_t)ptr;
    *offset_out = 0;
    *ok_out = 1;
    return ncclSuccess;
  }
  ncclResult_t res = brd_mem_host_export(ptr, size, handle_out, offset_out, &ex->srv, &found);
  if (!found)
    snprintf(why, nwhy, "%p is process-private host memory; allocate it with ncclMemAlloc "
             "so other processes can map it", (const void *)ptr);
  else if (res != ncclSuccess)
    snprintf(why, nwhy, "serving its memory failed (see the WARN above)");
  else
    *ok_out = 1;
  return ncclSuccess;
}

/* A range of this process (pid 0) as it is; another process's
 * ncclMemAlloc block mapped from its memfd. */
static ncclResult_t host_reg_import(struct ncclComm *comm, const brd_seg_handle_t *h,
                                    uint64_t offset, brd_seg_t *imp, char **addr_out) {
  uint32_t serial;
  int fd = -1;
  memset(imp, 0, sizeof(*imp));
  if (h->pid == 0) {
    *addr_out = (char *)(uintptr_t)h->local_addr + offset;
    return ncclSuccess;
  }
  memcpy(&serial, h->name, sizeof(serial));
  double timeout = (double)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  CHECK(brd_ipc_fd_fetch(h->pid, serial, timeout > 0 ? timeout : 300.0, &comm->abort_flag,
                         &fd));
  void *p = mmap(NULL, (size_t)h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    WARN("ncclCommRegister : mapping %llu bytes of process %u's registered buffer "
         "failed: %s", (unsigned long long)h->size, h->pid, strerror(err));
    return ncclSystemError;
  }
  imp->ptr = p;
  imp->size = (size_t)h->size;
  imp->handle.transport = BRD_TRANSPORT_SHM; /* unmapped with munmap */
  *addr_out = (char *)p + offset;
  return ncclSuccess;
}

/* ---- running works ------------------------------------------------------------ */

typedef struct runner {
  struct ncclComm *comm;
  brd_works_t *ws;
  int nthreads;
  brd_exec_run_t launch;   /* the current work */
  ncclResult_t res;           /* first failure; written by thread 0 */
  int stop;                   /* under mu: leave at the next meeting */
  int stop_seen;              /* under mu: stop as of the last meeting */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;                /* under mu */
  uint64_t gen;               /* under mu: meetings completed */
} runner_t;

typedef struct worker {
  runner_t *r;
  int index;
  pthread_t thread;
} worker_t;

/* All workers meet. The others are running blocks, each of which returns
 * within the executor's timeout or when the abort flag rises; past twice
 * that, the current launch is told to stop so that they do. Returns the
 * stop flag as seen by everyone at this meeting. */
static int runner_meet(runner_t *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t gen = r->gen;
  if (++r->arrived == r->nthreads) {
    /* Everyone leaving this meeting sees the same stop flag. */
    r->stop_seen = r->stop;
    r->arrived = 0;
    r->gen++;
    pthread_cond_broadcast(&r->cv);
  } else {
    double limit = 2.0 * (double)brd_param_int(BRD_P_BRAID_TIMEOUT) + 10.0;
    double deadline = brd_time_now_s() + limit;
    int warned = 0;
    while (r->gen == gen) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&r->cv, &r->mu, &ts);
      if (r->gen != gen) break;
      if (atomic_load(&r->comm->abort_flag) || (!warned && brd_time_now_s() > deadline)) {
        if (!warned && !atomic_load(&r->comm->abort_flag))
          WARN("rank %d: launch workers did not meet within %.0f s; stopping "
               "the launch", r->comm->rank, limit);
        warned = 1;
        /* Blocks see this at their next wait and return. */
        atomic_store(&r->launch.stop, 1);
      }
    }
  }
  int stop = r->stop_seen;
  pthread_mutex_unlock(&r->mu);
  return stop;
}

/* Copies a finished collective work's staging into the user's buffer,
 * except a segment the call's in-place input already holds (brd_work_own_seg). */
static void copy_out(const brd_work_t *w) {
  if (w->call == NULL || w->direct) return;
  size_t esize = brd_dtype_size(w->call->dtype);
  const char *stage = w->args.output;
  int keep = brd_work_own_seg(w);
  for (int s = 0; s < w->nout; s++)
    if (s != keep)
      memcpy((char *)w->call->recvbuff + ((size_t)s * w->call->count + w->off) * esize,
             stage + (size_t)s * w->n * esize, w->n * esize);
}

/* Thread 0's step between works: finish work `done` (or -1), start
 * `next` (or nworks). Sets stop on failure. Called with no lock held, while
 * the other workers wait at a meeting. */
static void runner_step(runner_t *r, int done, int next) {
  ncclResult_t res = ncclSuccess;
  if (done >= 0) {
    brd_exec_hang_t hang;
    res = brd_exec_host_run_fini(&r->launch, &hang);
    if (res == ncclSuccess) copy_out(&r->ws->w[done]);
    if (r->comm->prof != NULL) brd_prof_work_end(r->comm->prof, done);
  }
  if (res == ncclSuccess && next < r->ws->n) {
    if (r->comm->prof != NULL) brd_prof_work_begin(r->comm->prof, next);
    res = brd_exec_host_run_init(&r->launch, &r->ws->w[next].args);
  }
  if (res != ncclSuccess) {
    if (r->res == ncclSuccess) r->res = res;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
  }
}

static void runner_loop(runner_t *r, int index) {
  for (int w = 0; w < r->ws->n; w++) {
    if (runner_meet(r)) return;
    if (index < r->ws->w[w].args.plan->nblocks)
      brd_exec_host_block_run(&r->launch, index);
    if (runner_meet(r)) return;
    if (index == 0) runner_step(r, w, w + 1);
  }
}

static void *worker_main(void *arg) {
  worker_t *k = arg;
  runner_loop(k->r, k->index);
  return NULL;
}

/* Runs every work in order as one launch: one worker per block of the
 * widest plan (this thread is worker 0). */
static ncclResult_t run_threads(struct ncclComm *comm, brd_works_t *ws) {
  ncclResult_t res = ncclSuccess;
  int nthreads = 1;
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].args.plan->nblocks > nthreads) nthreads = ws->w[i].args.plan->nblocks;

  if (nthreads == 1) {
    /* Every plan has one block: no threads, no meetings, nothing to
     * allocate (the launch's state is this frame's). */
    brd_exec_run_t launch;
    for (int w = 0; w < ws->n && res == ncclSuccess; w++) {
      if (comm->prof != NULL) brd_prof_work_begin(comm->prof, w);
      CHECK(brd_exec_host_run_init(&launch, &ws->w[w].args));
      brd_exec_host_block_run(&launch, 0);
      res = brd_exec_host_run_fini(&launch, NULL);
      if (res == ncclSuccess) copy_out(&ws->w[w]);
      if (comm->prof != NULL) brd_prof_work_end(comm->prof, w);
    }
    return res;
  }
  runner_t *r = calloc(1, sizeof(*r));
  worker_t *k = calloc((size_t)nthreads, sizeof(*k));
  if (r == NULL || k == NULL) {
    WARN("out of host memory starting a launch of %d works", ws->n);
    res = ncclSystemError;
    goto free_mem;
  }
  r->comm = comm;
  r->ws = ws;
  r->nthreads = nthreads;
  PTHREAD_CHECK_GOTO(pthread_mutex_init(&r->mu, NULL), "pthread_mutex_init", res, free_mem);
  PTHREAD_CHECK_GOTO(pthread_cond_init(&r->cv, NULL), "pthread_cond_init", res,
                     destroy_mutex);
  runner_step(r, -1, 0);
  int started = 1;
  for (; started < nthreads; started++) {
    k[started].r = r;
    k[started].index = started;
    int err = pthread_create(&k[started].thread, NULL, worker_main, &k[started]);
    if (err != 0) {
      WARN("rank %d: cannot start launch worker %d of %d: %s", comm->rank, started,
           nthreads, strerror(err));
      res = ncclSystemError;
      break;
    }
  }
  if (started == nthreads) {
    runner_loop(r, 0);
  } else {
    /* The workers that did start leave at their first meeting. */
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    r->nthreads = started;
    pthread_mutex_unlock(&r->mu);
    runner_meet(r);
  }
  for (int i = 1; i < started; i++) pthread_join(k[i].thread, NULL);
  if (res == ncclSuccess) res = r->res;
  pthread_cond_destroy(&r->cv);
destroy_mutex:
  pthread_mutex_destroy(&r->mu);
free_mem:
  free(k);
  free(r);
  return res;
}


/* Copies each send buffer that overlaps a receive of its launch, before
 * any work runs, and points the works at the copies (owned by *copies). */
static ncclResult_t take_snapshots(brd_works_t *ws, char ***copies_out) {
  char **copies = NULL;
  *copies_out = NULL;
  if (ws->nsnaps == 0) return ncclSuccess;
  copies = calloc((size_t)ws->nsnaps, sizeof(*copies));
  if (copies == NULL) goto oom;
  *copies_out = copies;
  for (int s = 0; s < ws->nsnaps; s++) {
    copies[s] = malloc(ws->snaps[s].bytes);
    if (copies[s] == NULL) goto oom;
    memcpy(copies[s], ws->snaps[s].src, ws->snaps[s].bytes);
    brd_works_snap_use(ws, s, copies[s]);
  }
  return ncclSuccess;
oom:
  WARN("out of host memory copying the send buffers that overlap a receive of their "
       "group (%zu bytes)", ws->snap_bytes);
  return ncclSystemError;
}

static ncclResult_t host_run_works(struct ncclComm *comm, struct brd_backend *b,
                                   brd_backend_launch_t *l, brd_works_t *ws) {
  char **copies;
  (void)b, (void)l;
  ncclResult_t res = take_snapshots(ws, &copies);
  if (res == ncclSuccess) res = run_threads(comm, ws);
  if (copies != NULL)
    for (int s = 0; s < ws->nsnaps; s++) free(copies[s]);
  free(copies);
  return res;
}

static ncclResult_t host_begin(struct ncclComm *comm, struct brd_backend *b,
                               brd_backend_launch_t *l) {
  (void)comm, (void)b, (void)l;
  return ncclSuccess;
}

/* One-sided runs complete here, on the caller's thread; the executor
 * WARNs a hang itself. */
static ncclResult_t host_rma_run(struct ncclComm *comm, struct brd_backend *b,
                                 brd_backend_launch_t *l, const brd_backend_rma_t *r) {
  (void)comm, (void)b, (void)l;
  return brd_exec_host_run(r->a, NULL);
}

const brd_backend_ops_t brd_backend_host = {
    .name = "host",
    .device_seq = 0,
    .scalar_on_device = 0,
    .reg_needs_p2p = 0,
    .rma_mem = BRD_TRANSPORT_MEM_HOST,
    .nb_sizes = {HOST_BLOCK2_BYTES, 0, 0, 0},
    .p2p_round_ops = BRD_WORKS_ROUND_MAX_OPS,
    .switch_chans = BRD_BACKEND_SWITCH_EMULATED,
    .topo = host_topo,
    .caps = host_caps,
    .window_create = host_window_create,
    .window_import = host_window_import,
    .window_seal = host_window_seal,
    .reg_export = host_reg_export,
    .reg_import = host_reg_import,
    .begin = host_begin,
    .run_local = NULL,
    .order = NULL,
    .run_works = host_run_works,
    .rma_run = host_rma_run,
    /* Host launches complete before they return, and their waits watch
     * the communicator's abort flag themselves. */
    .end = NULL,
    .poll = NULL,
    .abort = NULL,
    .destroy = host_destroy,
};
