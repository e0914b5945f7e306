/*
 * Braid: the profiler's events of a launch and of the proxy (profiler.h),
 * in Braid's terms: which events a launch's calls, works and blocks and
 * the proxy's messages emit, their parents, and when each starts and
 * stops. profiler.c writes them into the plugin's descriptors.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/debug.h"
#include "base/time.h"
#include "core/comm.h"
#include "core/profiler.h"
#include "core/profiler_int.h"
#include "core/works.h"
#include "device/ir.h"
#include "nccl_profiler.h"

/* The types a launch can emit: a context asking for none of them skips
 * its launches altogether. */
#define LAUNCH_TYPES                                                                     \
  (ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh |          \
   ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileKernelLaunch |  \
   ncclProfileProxyOp | ncclProfileProxyStep)

/* The types only the proxy thread emits. */
#define PROXY_TYPES (ncclProfileProxyOp | ncclProfileProxyStep)

/* The types launch_begin emits before the works. */
#define API_TYPES \
  (ncclProfileGroup | ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi)

/* ---- launches --------------------------------------------------------------- */

/* p->mu around the launching thread's changes to the fields it guards,
 * unless this launch is alone (launch_begin): then no other thread reads
 * them and the lock's two atomic operations are saved. The proxy thread
 * and the completion callback always lock. */
static void mu_lock(brd_prof_t *p) {
  if (!p->alone) pthread_mutex_lock(&p->mu);
}

static void mu_unlock(brd_prof_t *p) {
  if (!p->alone) pthread_mutex_unlock(&p->mu);
}

static int is_p2p(const brd_call_t *c) {
  return c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV;
}

/* A table of n entries of `size` bytes in whole cache lines of its own
 * (ranks' tables are written on every launch), or NULL. Its contents are
 * not kept: every user fills it first. */
static void *lines_alloc(size_t n, size_t size) {
  return aligned_alloc(128, (n * size + 127) / 128 * 128);
}


/* Makes p->L hold ncalls calls (a new record after a detach); 0 when out
 * of memory. The launching thread. */
static int lrec_ready(brd_prof_t *p, int ncalls) {
  lrec_t *L = p->L;
  if (L == NULL) {
    L = calloc(1, sizeof(*L));
    if (L == NULL) return 0;
    mu_lock(p);
    p->L = L;
    mu_unlock(p);
  }
  if (ncalls > L->pc_cap) {
    int cap = ncalls < 8 ? 8 : ncalls;
    pcall_t *pc = lines_alloc((size_t)cap, sizeof(*pc));
    if (pc == NULL) return 0;
    free(L->pc);
    L->pc = pc;
    L->pc_cap = cap;
  }
  return 1;
}

/* Stops a call's Coll/P2p and its API event (mu held). */
static void call_events_stop(brd_prof_t *p, pcall_t *pc) {
  brd_prof_ev_stop(p, pc->ev);
  brd_prof_ev_stop(p, pc->api);
  pc->ev = pc->api = NULL;
}

/* The launch's own events, after all its calls' (mu held, or L private). */
static void group_stop(brd_prof_t *p, lrec_t *L) {
  brd_prof_ev_stop(p, L->group);
  brd_prof_ev_stop(p, L->group_api);
  L->group = L->group_api = NULL;
}

/* Drops one child's hold on call i of L (mu held): the call's events stop
 * with the last one once the call ended, and a detached launch's with its
 * last child (L is freed then: returns 1). */
static int unpin(brd_prof_t *p, lrec_t *L, int i) {
  pcall_t *pc = &L->pc[i];
  pc->refs--;
  L->refs--;
  if (pc->closed && pc->refs == 0) call_events_stop(p, pc);
  if (L->ended && L->refs == 0) {
    group_stop(p, L);
    brd_prof_lrec_free(L);
    return 1;
  }
  return 0;
}

void brd_prof_launch_begin(brd_prof_t *p, const brd_call_t *calls, int ncalls, int callbacks,
                           int proxy) {
  p->active = 0;
  if ((p->mask & LAUNCH_TYPES) == 0) return;
  p->alone = !callbacks && (!proxy || (p->mask & PROXY_TYPES) == 0);
  if (!lrec_ready(p, ncalls)) {
    WARN("rank %d: out of host memory for the profiler's view of a launch of %d calls; "
         "this launch is not profiled", p->comm->rank, ncalls);
    return;
  }
  lrec_t *L = p->L;
  /* L is not live (launch_end made it so): nothing else reads it now. */
  memset(L->pc, 0, (size_t)ncalls * sizeof(*L->pc));
  for (int i = 0; i < ncalls; i++) {
    L->pc[i].dir = is_p2p(&calls[i]) ? calls[i].coll == BRD_COLL_SEND : -1;
    L->pc[i].peer = calls[i].root;
  }
  L->ncalls = ncalls;
  L->kch_n = 0;
  L->kch_armed = 0;
  p->active = 1;
  p->calls = calls;
  p->ncalls = ncalls;
  p->pc = L->pc;
  p->ws = NULL;
  p->per_work = 0;
  p->p2p_works_left = 0;
  p->p2p_started = 0;
  p->first_p2p = NULL;
  p->kch_work = -1;
  p->kch_n = 0;
  p->klaunch = NULL;
  L->group = L->group_api = NULL;
  if (p->mask & API_TYPES) {
    ev_t e;
    memset(&e, 0, sizeof(e));
    e.type = ncclProfileGroup;
    L->group = brd_prof_ev_start(p, &e);
    e.type = ncclProfileGroupApi;
    L->group_api = brd_prof_ev_start(p, &e);
    for (int i = 0; i < ncalls; i++) {
      e.type = is_p2p(&calls[i]) ? ncclProfileP2pApi : ncclProfileCollApi;
      e.parent = L->group_api;
      e.call = &calls[i];
      p->pc[i].api = brd_prof_ev_start(p, &e);
    }
  }
  mu_lock(p);
  L->refs = 0;
  L->ended = 0;
  L->cur_call = -1;
  L->live = 1;
  p->live_L = L;
  mu_unlock(p);
}

/* Starts call i's Coll or P2p event (w: its first work, or NULL);
 * current: call i's work runs now (L->cur_call, in the same locking). */
static void call_start(brd_prof_t *p, int i, const brd_work_t *w, int current) {
  pcall_t *pc = &p->pc[i];
  const brd_call_t *c = &p->calls[i];
  void *h = NULL;
  int fresh = !pc->started;
  if (fresh) {
    pc->started = 1;
    ev_t e;
    memset(&e, 0, sizeof(e));
    e.call = c;
    e.parent = p->version >= 5 ? pc->api : p->L->group;
    e.parent_group = p->L->group;
    e.algo = w != NULL ? w->args.plan->algo : -1;
    e.proto = w != NULL ? w->args.plan->proto : -1;
    e.nch = w != NULL ? w->args.plan->nblocks : 0;
    if (is_p2p(c)) {
      e.type = ncclProfileP2p;
    } else {
      e.type = ncclProfileColl;
      e.seq = p->coll_seq++;
    }
    h = brd_prof_ev_start(p, &e);
  } else if (!current) {
    return;
  }
  mu_lock(p);
  if (fresh) {
    pc->ev = h;
    pc->open = 1;
  }
  if (current) p->L->cur_call = i;
  mu_unlock(p);
  if (fresh && is_p2p(c) && p->first_p2p == NULL) p->first_p2p = h;
}

/* Call i ended: its events stop now, or with the last child still open. */
static void call_stop(brd_prof_t *p, int i) {
  pcall_t *pc = &p->pc[i];
  if (!pc->started || pc->stopped) return;
  pc->stopped = 1;
  mu_lock(p);
  pc->closed = 1;
  if (pc->refs == 0) call_events_stop(p, pc);
  mu_unlock(p);
}

/* The call index of a collective work, -1 for point-to-point. */
static int work_call(const brd_prof_t *p, const brd_work_t *w) {
  if (w->p2p || w->call == NULL) return -1;
  ptrdiff_t i = w->call - p->calls;
  return i >= 0 && i < p->ncalls ? (int)i : -1;
}

/* Grows a table of handles to n entries (its contents are not kept). */
static int kch_room(void ***h, int *cap, int n) {
  if (n <= *cap) return 1;
  int c = n < 16 ? 16 : n;
  void **k = lines_alloc((size_t)c, sizeof(*k));
  if (k == NULL) return 0;
  free(*h);
  *h = k;
  *cap = c;
  return 1;
}

/* CUDA mode: one KernelCh per block of every work, started now (the
 * launch), children of their work's call. */
static void kch_start_all(brd_prof_t *p, const struct brd_works *ws) {
  lrec_t *L = p->L;
  int n = 0;
  for (int w = 0; w < ws->n; w++) n += ws->w[w].args.plan->nblocks;
  if (!kch_room(&L->kch, &L->kch_cap, n)) return; /* untracked */
  ev_t e;
  memset(&e, 0, sizeof(e));
  e.type = ncclProfileKernelCh;
  e.ptimer = (uint64_t)brd_time_now_ns();
  for (int w = 0; w < ws->n; w++) {
    int i = work_call(p, &ws->w[w]);
    if (i < 0) i = p->first_p2p_call;
    if (i < 0) continue;
    e.parent = p->pc[i].ev;
    for (int b = 0; b < ws->w[w].args.plan->nblocks; b++) {
      e.chan = b;
      L->kch[L->kch_n++] = brd_prof_ev_start(p, &e);
    }
  }
}

void brd_prof_launch_works(brd_prof_t *p, const struct brd_works *ws, int per_work) {
  if (!p->active) return;
  p->ws = ws;
  p->per_work = per_work;
  p->first_p2p_call = -1;
  for (int w = 0; w < ws->n; w++) {
    int i = work_call(p, &ws->w[w]);
    if (i >= 0)
      p->pc[i].works_left++;
    else if (ws->w[w].p2p)
      p->p2p_works_left++;
  }
  p->klaunch = NULL;
  if (p->mask & ncclProfileKernelLaunch) {
    ev_t e;
    memset(&e, 0, sizeof(e));
    e.type = ncclProfileKernelLaunch;
    e.parent = p->L->group_api;
    p->klaunch = brd_prof_ev_start(p, &e);
  }
  if (!per_work) {
    /* Without work hooks, each call's first work describes it. */
    for (int w = 0; w < ws->n; w++) {
      int i = work_call(p, &ws->w[w]);
      if (i >= 0) call_start(p, i, &ws->w[w], 0);
    }
    const brd_work_t *pw = NULL;
    for (int w = 0; w < ws->n && pw == NULL; w++)
      if (ws->w[w].p2p) pw = &ws->w[w];
    for (int i = 0; i < p->ncalls; i++)
      if (is_p2p(&p->calls[i])) {
        call_start(p, i, pw, 0);
        if (p->first_p2p_call < 0) p->first_p2p_call = i;
      }
    mu_lock(p);
    for (int i = 0; i < p->ncalls && p->L->cur_call < 0; i++)
      if (!is_p2p(&p->calls[i])) p->L->cur_call = i;
    mu_unlock(p);
    if (p->mask & ncclProfileKernelCh) kch_start_all(p, ws);
  }
}

/* Stops the KernelCh events h[0..n), KernelChStop with pTimer now first
 * (v4 and later), and clears their slots. */
static void kch_stop(brd_prof_t *p, void **h, int n) {
  ncclProfilerEventStateArgs_v4_t a4;
  memset(&a4, 0, sizeof(a4));
  a4.kernelCh.pTimer = (uint64_t)brd_time_now_ns();
  for (int k = 0; k < n; k++) {
    if (h[k] == NULL) continue;
    if (p->version >= 4) brd_prof_ev_state(p, h[k], ncclProfilerKernelChStop, NULL, &a4);
    brd_prof_ev_stop(p, h[k]);
    h[k] = NULL;
  }
}

/* Host mode: stops the channels of the work that ran last. */
static void kch_close(brd_prof_t *p) {
  if (p->kch_n == 0) return;
  kch_stop(p, p->kch, p->kch_n);
  p->kch_n = 0;
  p->kch_work = -1;
}

/* Stops L's CUDA-mode KernelCh events, pTimer now (before their calls). */
static void kch_stop_all(brd_prof_t *p, lrec_t *L) {
  kch_stop(p, L->kch, L->kch_n);
  L->kch_n = 0;
}

void brd_prof_work_begin(brd_prof_t *p, int w) {
  if (!p->active || p->ws == NULL || w < 0 || w >= p->ws->n) return;
  const brd_work_t *wk = &p->ws->w[w];
  int i = work_call(p, wk);
  void *parent;
  if (i >= 0) {
    call_start(p, i, wk, 1);
    parent = p->pc[i].ev;
  } else {
    if (!p->p2p_started) {
      p->p2p_started = 1;
      for (int k = 0; k < p->ncalls; k++)
        if (is_p2p(&p->calls[k])) call_start(p, k, wk, 0);
    }
    parent = p->first_p2p;
  }
  if ((p->mask & ncclProfileKernelCh) == 0) return;
  int nb = wk->args.plan->nblocks;
  if (!kch_room(&p->kch, &p->kch_cap, nb)) return; /* channels untracked for this work */
  ev_t e;
  memset(&e, 0, sizeof(e));
  e.type = ncclProfileKernelCh;
  e.parent = parent;
  e.ptimer = (uint64_t)brd_time_now_ns();
  for (int b = 0; b < nb; b++) {
    e.chan = b;
    p->kch[b] = brd_prof_ev_start(p, &e);
  }
  p->kch_n = nb;
  p->kch_work = w;
}

void brd_prof_work_end(brd_prof_t *p, int w) {
  if (!p->active || p->ws == NULL || w < 0 || w >= p->ws->n) return;
  if (p->kch_work == w) kch_close(p);
  const brd_work_t *wk = &p->ws->w[w];
  int i = work_call(p, wk);
  if (i >= 0) {
    if (--p->pc[i].works_left == 0) call_stop(p, i);
  } else if (wk->p2p && --p->p2p_works_left == 0) {
    for (int k = 0; k < p->ncalls; k++)
      if (is_p2p(&p->calls[k])) call_stop(p, k);
  }
}

/* The stream reached the end of a CUDA-mode launch (a host function on
 * the launch's stream, or brd_prof_launch_end when none could be queued):
 * its KernelChs stop, then the holds on its calls are dropped. */
static void launch_done(void *arg) {
  lrec_t *L = arg;
  brd_prof_t *p = L->p;
  pthread_mutex_lock(&p->mu);
  p->pending--;
  L->live = 0;
  if (p->live_L == L) p->live_L = NULL;
  L->kch_armed = 0;
  if (p->dead) { /* finalized: nothing may reach the plugin now */
    L->kch_n = 0;
    L->refs -= L->ncalls;
    if (L->ended && L->refs == 0) brd_prof_lrec_free(L);
    pthread_mutex_unlock(&p->mu);
    return;
  }
  kch_stop_all(p, L);
  int n = L->ncalls;
  for (int i = 0; i < n; i++)
    if (unpin(p, L, i)) break; /* the last hold: L is gone */
  pthread_mutex_unlock(&p->mu);
}

int brd_prof_launch_enqueued(brd_prof_t *p, void (**fn_out)(void *), void **arg_out) {
  *fn_out = NULL;
  *arg_out = NULL;
  if (!p->active || p->per_work || p->ws == NULL ||
      (p->mask & (ncclProfileKernelCh | ncclProfileProxyOp | ncclProfileProxyStep)) == 0)
    return 0;
  lrec_t *L = p->L;
  mu_lock(p);
  for (int i = 0; i < L->ncalls; i++) {
    L->pc[i].refs++;
    L->refs++;
  }
  L->kch_armed = 1;
  L->p = p;
  p->pending++;
  mu_unlock(p);
  *fn_out = launch_done;
  *arg_out = L;
  return 1;
}

void brd_prof_launch_end(brd_prof_t *p, ncclResult_t res) {
  (void)res;
  if (!p->active) return;
  lrec_t *L = p->L;
  kch_close(p);
  mu_lock(p);
  int armed = L->kch_armed;
  if (!armed) { /* armed: proxy operations attach until the stream is done */
    L->live = 0;
    if (p->live_L == L) p->live_L = NULL;
  }
  mu_unlock(p);
  if (!armed) kch_stop_all(p, L);
  /* Calls that never reached a work (a failed launch, or a call with
   * nothing to move) still get their event, so every call has one. */
  for (int i = 0; i < p->ncalls; i++) {
    call_start(p, i, NULL, 0);
    call_stop(p, i);
  }
  brd_prof_ev_stop(p, p->klaunch);
  p->klaunch = NULL;
  mu_lock(p);
  if (L->refs == 0) {
    group_stop(p, L);
  } else {
    L->ended = 1; /* its last child stops the rest and frees it */
    p->L = NULL;
  }
  mu_unlock(p);
  p->active = 0;
  p->ws = NULL;
  p->calls = NULL;
  p->pc = NULL;
}

/* ---- the proxy ---------------------------------------------------------------- */

/* Whether a proxy operation may become a child of pc (mu held): its event
 * started and it has not ended, or something still holds it open. */
static int attachable(const pcall_t *pc) {
  return pc->open && (!pc->closed || pc->refs > 0);
}

/* The call a message to (is_send) or from peer serves (mu held), -1 none:
 * the send or receive with that peer, else the collective running now,
 * else the launch's first call still open. */
static int attach_pick(const lrec_t *L, int peer, int is_send) {
  for (int i = 0; i < L->ncalls; i++)
    if (L->pc[i].dir == is_send && L->pc[i].peer == peer && attachable(&L->pc[i])) return i;
  if (L->cur_call >= 0 && attachable(&L->pc[L->cur_call])) return L->cur_call;
  for (int i = 0; i < L->ncalls; i++)
    if (attachable(&L->pc[i])) return i;
  return -1;
}

void brd_prof_proxy_start(brd_prof_t *p, int peer, int is_send, size_t bytes,
                          brd_prof_op_t *op) {
  memset(op, 0, sizeof(*op));
  if ((p->mask & (ncclProfileProxyOp | ncclProfileProxyStep)) == 0) return;
  pthread_mutex_lock(&p->mu);
  lrec_t *L = p->live_L;
  int i = L != NULL && L->live ? attach_pick(L, peer, is_send) : -1;
  void *parent = NULL;
  if (i >= 0) {
    L->pc[i].refs++;
    L->refs++;
    parent = L->pc[i].ev;
  }
  pthread_mutex_unlock(&p->mu);
  if (i < 0) return; /* no launch it serves: not tracked */
  op->owner = L;
  op->call = i;
  ev_t e;
  memset(&e, 0, sizeof(e));
  e.type = ncclProfileProxyOp;
  e.parent = parent;
  e.peer = peer;
  e.is_send = is_send;
  e.chunk = bytes > (size_t)INT32_MAX ? INT32_MAX : (int)bytes;
  op->op = brd_prof_ev_start(p, &e);
  ncclProfilerEventStateArgs_v1_t a1;
  memset(&a1, 0, sizeof(a1));
  a1.proxyOp.transSize = bytes;
  a1.proxyOp.steps = 1;
  if (p->version <= 3)
    brd_prof_ev_state(p, op->op,
                      is_send ? ncclProfilerProxyOpSendPosted : ncclProfilerProxyOpRecvReceived,
                      &a1, NULL);
  else
    brd_prof_ev_state(p, op->op, ncclProfilerProxyOpInProgress_v4, NULL, NULL);
  e.type = ncclProfileProxyStep;
  e.parent = op->op;
  e.step = 0;
  op->step = brd_prof_ev_start(p, &e);
  ncclProfilerEventStateArgs_v4_t a4;
  memset(&a4, 0, sizeof(a4));
  a4.proxyStep.transSize = bytes;
  brd_prof_ev_state(p, op->step,
                    is_send ? ncclProfilerProxyStepSendWait : ncclProfilerProxyStepRecvWait, &a1,
                    &a4);
}

void brd_prof_proxy_stop(brd_prof_t *p, brd_prof_op_t *op) {
  brd_prof_ev_stop(p, op->step);
  brd_prof_ev_stop(p, op->op);
  if (op->owner != NULL) {
    pthread_mutex_lock(&p->mu);
    (void)unpin(p, op->owner, op->call);
    pthread_mutex_unlock(&p->mu);
  }
  memset(op, 0, sizeof(*op));
}
