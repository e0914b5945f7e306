/*
 * Braid: running checked calls. One launch runs every call a communicator
 * collected (one call outside a group, the whole group inside one): the
 * collectives in call order, then the group's sends and receives as
 * point-to-point rounds.
 *
 *   brd_launch_run
 *     backend begin      (backend.h; CUDA: device, stream, capture state)
 *     run_local          (CUDA, one rank: plain copies, no runtime)
 *     brd_window_connect (window.c; the first launch only: caps, plans'
 *                         sizes, windows made, exchanged and mapped)
 *     backend order      (CUDA: after the rank's earlier launches)
 *     brd_works_build    (works.c: plans, pieces, pointers, sequence numbers)
 *     backend run_works  (launch_host.c: worker threads run the host
 *                         executor; launch_cuda.c: executor kernels)
 *     backend end
 *
 * The runtime (window.h) is created on a communicator's first launch,
 * which every rank reaches at the same point of its call sequence, with
 * the backend of the communicator's mode, chosen then, once.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/param.h"
#include "core/backend.h"
#include "core/comm.h"
#include "core/launch.h"
#include "core/profiler.h"
#include "core/proxy.h"
#include "core/window.h"
#include "core/works.h"

/* See launch.h. */
void brd_rt_destroy(struct brd_rt *rt) {
  if (rt == NULL) return;
  /* A launch (on another thread, or a nonblocking group's helper) may
   * still be finishing: its waits see the abort flag the caller raised,
   * or it was about to report. */
  double limit = (double)brd_param_int(BRD_P_BRAID_TIMEOUT) + 10.0;
  struct timespec nap = {0, 1000000L};
  for (double waited = 0; atomic_load(&rt->busy); waited += 1e-3) {
    if (waited > limit) {
      WARN("a launch still runs on a communicator being freed after %.0f s; "
           "its runtime is left allocated", limit);
      return;
    }
    nanosleep(&nap, NULL);
  }
  brd_window_disconnect(rt);
  brd_plans_fini(&rt->plans);
  free(rt);
}

/*
 * Threads other than the launching one (ncclCommGetAsyncError, which
 * PyTorch's watchdog polls; ncclCommAbort; ncclCommMemStats) read comm->rt
 * between rt_enter and rt_leave, and never block there. A suspend frees
 * the runtime while they may run: it unpublishes comm->rt, then waits for
 * rt_readers to reach 0 before freeing (brd_rt_release). Both sides are
 * sequentially consistent, so either a reader's load sees NULL or the
 * releaser sees its count: no reader holds a freed runtime.
 */
static const struct brd_rt *rt_enter(struct ncclComm *comm) {
  atomic_fetch_add_explicit(&comm->rt_readers, 1, memory_order_seq_cst);
  return __atomic_load_n(&comm->rt, __ATOMIC_SEQ_CST);
}

static void rt_leave(struct ncclComm *comm) {
  atomic_fetch_sub_explicit(&comm->rt_readers, 1, memory_order_release);
}

/* The backend's state of rt, or NULL before its connection. */
static struct brd_backend *backend_of(const struct brd_rt *rt) {
  return rt != NULL ? __atomic_load_n(&rt->bk, __ATOMIC_ACQUIRE) : NULL;
}

/* See launch.h. */
ncclResult_t brd_rt_poll(struct ncclComm *comm) {
  const struct brd_rt *rt = rt_enter(comm);
  struct brd_backend *bk = backend_of(rt);
  ncclResult_t res = bk != NULL && rt->be->poll != NULL ? rt->be->poll(comm, bk) : ncclSuccess;
  rt_leave(comm);
  return res;
}

/* See launch.h. */
void brd_rt_abort(struct ncclComm *comm) {
  const struct brd_rt *rt = rt_enter(comm);
  struct brd_backend *bk = backend_of(rt);
  if (bk != NULL && rt->be->abort != NULL) rt->be->abort(bk);
  rt_leave(comm);
}

/* See launch.h. */
void brd_rt_peer_gone(struct ncclComm *comm, uint64_t ns) {
  const struct brd_rt *rt = rt_enter(comm);
  struct brd_backend *bk = backend_of(rt);
  if (bk != NULL && rt->be->peer_gone != NULL) rt->be->peer_gone(bk, ns);
  rt_leave(comm);
}

/* See launch.h. */
uint64_t brd_rt_mem_bytes(struct ncclComm *comm) {
  const struct brd_rt *rt = rt_enter(comm);
  struct brd_backend *bk = backend_of(rt);
  uint64_t bytes = bk != NULL && rt->be->mem_bytes != NULL ? rt->be->mem_bytes(bk) : 0;
  rt_leave(comm);
  return bytes;
}

/* See launch.h. */
ncclResult_t brd_rt_drain(struct ncclComm *comm) {
  struct brd_rt *rt = comm->rt;
  struct brd_backend *bk = backend_of(rt);
  return bk != NULL && rt->be->drain != NULL ? rt->be->drain(comm, bk) : ncclSuccess;
}

/* See launch.h. */
ncclResult_t brd_rt_release(struct ncclComm *comm) {
  struct brd_rt *rt = __atomic_exchange_n(&comm->rt, NULL, __ATOMIC_SEQ_CST);
  struct timespec nap = {0, 100000L};
  /* Readers never block: they leave within microseconds. */
  for (int i = 0; atomic_load_explicit(&comm->rt_readers, memory_order_seq_cst) != 0; i++) {
    if (i == 100000) {
      WARN("rank %d: a thread reading the communicator's state did not leave it in 10 s; "
           "the collective runtime is left allocated", comm->rank);
      return ncclInternalError;
    }
    nanosleep(&nap, NULL);
  }
  brd_rt_destroy(rt);
  return ncclSuccess;
}

/* The runtime shell (no window yet), with comm's backend. Local. */
static ncclResult_t rt_get(struct ncclComm *comm, struct brd_rt **rt_out) {
  if (comm->rt == NULL) {
    struct brd_rt *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) {
      WARN("out of host memory creating the collective runtime of rank %d",
           comm->rank);
      return ncclSystemError;
    }
    static _Atomic uint64_t serials;
    rt->nranks = comm->nranks;
    rt->serial = atomic_fetch_add(&serials, 1) + 1;
    rt->be = brd_backend_choose(comm);
    brd_plans_init(&rt->plans, comm->nranks);
    atomic_init(&rt->busy, 0);
    atomic_init(&rt->launches, 0);
    __atomic_store_n(&comm->rt, rt, __ATOMIC_RELEASE);
  }
  *rt_out = comm->rt;
  return ncclSuccess;
}

/* A failed launch leaves the communicator in error (what
 * ncclCommGetAsyncError reports), except for argument errors, which leave
 * it usable. */
static void record_error(struct ncclComm *comm, ncclResult_t res) {
  if (res == ncclSuccess || res == ncclInvalidUsage || res == ncclInvalidArgument)
    return;
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res);
}

static void works_view(struct ncclComm *comm, const struct brd_rt *rt, brd_works_view_t *v);

/* See launch.h. */
ncclResult_t brd_launch_estimate(struct ncclComm *comm, const brd_call_t *c, int pipe_ops,
                                 float *us_out) {
  struct brd_rt *rt = comm->rt;
  if (rt != NULL && rt->ready && c->coll != BRD_COLL_SEND && c->coll != BRD_COLL_RECV) {
    /* Connected: the plan a launch would run, priced from its own ops. */
    brd_works_view_t v;
    works_view(comm, rt, &v);
    return brd_works_estimate(&v, &rt->plans, c, pipe_ops > 0 ? pipe_ops : 1, us_out);
  }
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;
  CHECK(brd_tune_parse(brd_param_str(BRD_P_ALGO), brd_param_str(BRD_P_PROTO),
                       &mask));
  brd_window_topo(comm, brd_backend_choose(comm), 1, 0, &topo);
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  uint32_t avail = 0;
  if (c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV) {
    avail = BRD_ALGO_BIT(BRD_ALGO_ONESHOT); /* direct exchange */
  } else {
    if (c->coll != BRD_COLL_ALLREDUCE && c->coll != BRD_COLL_BROADCAST &&
        c->coll != BRD_COLL_REDUCE)
      bytes *= (size_t)comm->nranks;
    avail = brd_plans_available((uint8_t)c->coll, 0);
  }
  brd_tune_choice_t ch;
  CHECK(brd_tune_select(&topo, c->coll, bytes, avail, &mask, &ch));
  *us_out = ch.time_us;
  return ncclSuccess;
}

static ncclResult_t reg_direct(void *ctx, const void *buf, size_t bytes, const char *fn,
                               char **peer_out, int *ok_out) {
  struct ncclComm *comm = ctx;
  return brd_reg_direct(comm, buf, bytes, comm->rt->reg_shareable, fn, peer_out, ok_out);
}

static ncclResult_t reg_share(void *ctx, const void *buf, size_t bytes, const char *fn,
                              uint64_t *remote_out, int *state_out) {
  struct ncclComm *comm = ctx;
  return brd_reg_share(comm, buf, bytes, comm->rt->svc_peers, comm->rt->reg_shareable, fn,
                       remote_out, state_out);
}

static void reg_mc(void *ctx, const void *buf, size_t bytes, void **mc_out, char *why,
                   size_t why_len) {
  brd_reg_switch((struct ncclComm *)ctx, buf, bytes, mc_out, why, why_len);
}

/* What the works builder reads of a connected runtime. */
static void works_view(struct ncclComm *comm, const struct brd_rt *rt, brd_works_view_t *v) {
  memset(v, 0, sizeof(*v));
  v->rank = comm->rank;
  v->nranks = comm->nranks;
  v->win = rt->win;
  v->base = rt->base;
  v->nb_opts = rt->nb_opts;
  v->nb_count = rt->nb_count;
  v->nb_sizes = rt->be->nb_sizes;
  v->device_seq = rt->be->device_seq;
  v->scalar_on_device = rt->be->scalar_on_device;
  v->mask = &rt->mask;
  v->topo = &rt->topo;
  v->tuner = comm->tuner;
  v->deterministic = rt->deterministic;
  v->p2p_piece = rt->p2p_piece;
  v->p2p_round_ops = rt->be->p2p_round_ops;
  v->reg.any = comm->regs != NULL;
  v->reg.direct = reg_direct;
  v->reg.share = reg_share;
  v->reg.mc = rt->be->reg_switch_bind != NULL ? reg_mc : NULL;
  v->reg.ctx = comm;
  v->abort_flag = &comm->abort_flag;
  v->ports = rt->nports > 0 ? rt->ports : NULL;
  v->port_failed = brd_proxy_failed(rt->proxy);
  v->port_bell = brd_proxy_bell(rt->proxy);
  v->port_matrix = rt->plans.port; /* the table the cached plans were marked with */
}

/* The launch between the backend's begin and end. */
static ncclResult_t launch(struct ncclComm *comm, struct brd_rt *rt, brd_backend_launch_t *l) {
  ncclResult_t res = ncclSuccess;
  brd_works_view_t v;
  brd_works_t ws;
  int done = 0;
  memset(&ws, 0, sizeof(ws));
  if (rt->be->run_local != NULL) {
    CHECK(rt->be->run_local(comm, l, &done));
    if (done) return ncclSuccess;
  }
  if (!rt->ready) CHECK(brd_window_connect(comm, rt));
  if (rt->be->order != NULL) CHECK(rt->be->order(rt->bk, l));
  works_view(comm, rt, &v);
  CHECK_GOTO(brd_works_build(&v, &rt->plans, &rt->seq, l->calls, l->ncalls, &ws), res, out);
  if (ws.n > 0) {
    atomic_fetch_add(&rt->launches, 1);
    INFO(BRD_SUBSYS_COLL, "rank %d: launch %llu runs %d calls as %d works", comm->rank,
         (unsigned long long)atomic_load(&rt->launches), l->ncalls, ws.n);
    if (comm->prof != NULL)
      brd_prof_launch_works(comm->prof, &ws, rt->be == &brd_backend_host);
    res = rt->be->run_works(comm, rt->bk, l, &ws);
  }
out:
  brd_works_free(&ws);
  return res;
}

/* See launch.h. */
/* What a launch does between the backend's begin and end. */
typedef ncclResult_t (*launch_body_t)(struct ncclComm *comm, struct brd_rt *rt,
                                      brd_backend_launch_t *l, const void *arg);

/* Every launch of comm, of ncalls calls (at least one: the first names
 * the stream), runs body inside this: the runtime held busy until the last
 * touch of comm, so an abort from another thread frees nothing under it;
 * the backend's begin and end around body (the profiler's launch events
 * around those, with profile); the failure recorded (record_error). */
static ncclResult_t bracketed(struct ncclComm *comm, struct brd_rt *rt, const brd_call_t *calls,
                              int ncalls, int profile, launch_body_t body, const void *arg) {
  ncclResult_t res;
  brd_backend_launch_t l;
  memset(&l, 0, sizeof(l));
  l.calls = calls;
  l.ncalls = ncalls;
  atomic_fetch_add(&rt->busy, 1);
  if (profile && comm->prof != NULL)
    brd_prof_launch_begin(comm->prof, calls, ncalls, rt->be != &brd_backend_host,
                          rt->nports > 0);
  res = rt->be->begin(comm, rt->bk, &l);
  if (res == ncclSuccess) res = body(comm, rt, &l, arg);
  if (rt->be->end != NULL) res = rt->be->end(comm, rt->bk, &l, res);
  if (profile && comm->prof != NULL) brd_prof_launch_end(comm->prof, res);
  /* A lost peer: the proxy's WARN names it; the nets' later warnings about
   * the same connections, or a host-mate's ring closing as it gives up
   * (it sends this rank the lost rank's name over the net first: a FAIL
   * record may still be in flight, so a failed launch gives it a moment),
   * are consequences. */
  if (res != ncclSuccess && res != ncclInvalidUsage && res != ncclInvalidArgument &&
      rt->proxy != NULL) {
    const char *lost = brd_proxy_failure(rt->proxy);
    for (int i = 0; lost == NULL && i < 50; i++) {
      struct timespec nap = {0, 5000000};
      nanosleep(&nap, NULL);
      lost = brd_proxy_failure(rt->proxy);
    }
    if (lost != NULL) brd_log_set_last_error("%s", lost);
  }
  record_error(comm, res);
  atomic_fetch_sub(&rt->busy, 1);
  return res;
}

static ncclResult_t calls_body(struct ncclComm *comm, struct brd_rt *rt,
                               brd_backend_launch_t *l, const void *arg) {
  (void)arg;
  return launch(comm, rt, l);
}

ncclResult_t brd_launch_run(struct ncclComm *comm, const brd_call_t *calls,
                            int ncalls) {
  struct brd_rt *rt;
  ncclResult_t res = rt_get(comm, &rt);
  if (res != ncclSuccess) {
    record_error(comm, res);
    return res;
  }
  return bracketed(comm, rt, calls, ncalls, 1, calls_body, NULL);
}

/* A launch of no calls but one on stream, named fn (one-sided calls). */
static void bare_call(brd_call_t *c, cudaStream_t stream, const char *fn) {
  memset(c, 0, sizeof(*c));
  c->stream = stream;
  c->fn = fn;
}

static ncclResult_t connect_body(struct ncclComm *comm, struct brd_rt *rt,
                                 brd_backend_launch_t *l, const void *arg) {
  (void)l, (void)arg;
  return rt->ready ? ncclSuccess : brd_window_connect(comm, rt);
}

/* See launch.h. */
ncclResult_t brd_launch_connect(struct ncclComm *comm, const char *fn) {
  struct brd_rt *rt;
  brd_call_t call;
  CHECK(rt_get(comm, &rt));
  if (rt->ready) return ncclSuccess;
  bare_call(&call, NULL, fn);
  return bracketed(comm, rt, &call, 1, 0, connect_body, NULL);
}

/* See launch.h. */
ncclResult_t brd_launch_rma_words(struct ncclComm *comm, const char *fn, uint64_t **mine,
                                  uint64_t **peers, uint64_t *words, uint64_t *gen) {
  struct brd_rt *rt = comm->rt;
  if (rt == NULL || !rt->ready) {
    WARN("%s : rank %d: the communicator's channels are not set up (a window must be "
         "registered first; after ncclCommResume, run a collective first)", fn, comm->rank);
    return ncclInvalidUsage;
  }
  if (rt->nports > 0) {
    WARN("%s is not implemented yet in braid %s for this communicator: one-sided "
         "put/signal/wait runs with every rank on one host, not yet across hosts; use "
         "ncclSend/ncclRecv meanwhile", fn, BRAID_VERSION);
    return ncclInvalidUsage;
  }
  for (int p = 0; p < comm->nranks; p++)
    peers[p] = (uint64_t *)(rt->base[p] + rt->win[p].rma_off);
  *mine = peers[comm->rank];
  *words = rt->win[comm->rank].rma_words;
  *gen = rt->serial;
  return ncclSuccess;
}

static ncclResult_t rma_body(struct ncclComm *comm, struct brd_rt *rt,
                             brd_backend_launch_t *l, const void *arg) {
  ncclResult_t res = rt->be->order != NULL ? rt->be->order(rt->bk, l) : ncclSuccess;
  return res == ncclSuccess ? rt->be->rma_run(comm, rt->bk, l, arg) : res;
}

/* See launch.h. */
ncclResult_t brd_launch_rma(struct ncclComm *comm, const struct brd_backend_rma *r,
                            cudaStream_t stream, const char *fn) {
  struct brd_rt *rt;
  brd_call_t call;
  CHECK(rt_get(comm, &rt));
  if (!rt->ready || rt->be->rma_run == NULL) {
    WARN("%s : rank %d: the one-sided calls need a registered window first "
         "(ncclCommWindowRegister)%s", fn, comm->rank,
         rt->be->rma_run == NULL ? ", and a mode that runs them" : "");
    return ncclInvalidUsage;
  }
  bare_call(&call, stream, fn);
  return bracketed(comm, rt, &call, 1, 0, rma_body, r);
}

/* See launch.h. */
ncclResult_t brd_launch_async_begin(struct ncclComm *comm) {
  struct brd_rt *rt;
  CHECK(rt_get(comm, &rt));
  atomic_fetch_add(&rt->busy, 1);
  atomic_store_explicit(&comm->async_error, ncclInProgress, memory_order_release);
  return ncclSuccess;
}

/* See launch.h. */
void brd_launch_async_end(struct ncclComm *comm, ncclResult_t res) {
  struct brd_rt *rt = comm->rt;
  atomic_store_explicit(&comm->async_error, (int)res, memory_order_release);
  /* Last touch: from here the communicator may be destroyed. */
  atomic_fetch_sub(&rt->busy, 1);
}

/* See launch.h. */
uint64_t brd_launch_count(struct ncclComm *comm) {
  const struct brd_rt *rt = rt_enter(comm);
  uint64_t n = rt != NULL ? atomic_load(&rt->launches) : 0;
  rt_leave(comm);
  return n;
}
