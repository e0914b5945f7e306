/*
 * Braid: what the profiler's two files share. profiler.c speaks the
 * plugin's ABI: it loads the library, makes and finalizes the contexts and
 * writes each event into the version's descriptor; profiler_launch.c
 * decides which events a launch and the proxy emit, in Braid's terms
 * (ev_t), and when they start and stop. Not for other modules: profiler.h
 * is the interface.
 */
#ifndef BRD_CORE_PROFILER_INT_H
#define BRD_CORE_PROFILER_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/profiler.h"
#include "nccl_profiler.h"

typedef union {
  ncclProfiler_v1_t v1;
  ncclProfiler_v2_t v2;
  ncclProfiler_v3_t v3;
  ncclProfiler_v4_t v4;
  ncclProfiler_v5_t v5;
  ncclProfiler_v6_t v6;
} any_prof_t;

/* Every member but init's and startEvent's arguments has one prototype
 * across versions (the descriptor and state-argument pointers differ only
 * in their pointee), so stop, record and finalize go through v1's slots
 * with the right pointee cast at the call. */

/* One call of the launch. The fields under "mu" are shared with the
 * proxy thread and the CUDA completion callback (brd_prof_t.mu). */
typedef struct pcall {
  void *api;          /* CollApi / P2pApi handle */
  void *ev;           /* Coll / P2p handle */
  int started, stopped; /* the launching thread's view */
  int works_left;     /* works of this call not ended yet */
  int peer, dir;      /* point-to-point: the peer, 1 send / 0 receive; -1 collective */
  int open;           /* mu: ev started, children may attach */
  int closed;         /* mu: the call ended; ev stops with its last child */
  int refs;           /* mu: open children outside the launching thread */
} pcall_t;

/* A launch's events that children outside the launching thread (the
 * proxy's ProxyOps, CUDA-mode KernelChs) may keep open past its end. The
 * current one belongs to brd_prof_t; one that ends with children still
 * open is detached and belongs to them: the last to stop stops the
 * launch's remaining events and frees it. */
typedef struct lrec {
  pcall_t *pc;        /* owned: [pc_cap] */
  int pc_cap, ncalls;
  void *group, *group_api;
  int refs;           /* mu: open children of all its calls */
  int ended;          /* mu: detached at launch_end, stops with refs 0 */
  int live;           /* mu: proxy operations may attach to its calls */
  int cur_call;       /* mu: the collective whose work runs now, -1 */
  /* CUDA mode: one KernelCh per block of each work, stopped when the
   * stream reaches the launch's completion callback. */
  void **kch;         /* owned: [kch_cap] */
  int kch_n, kch_cap;
  int kch_armed;      /* mu: the completion callback is enqueued */
  struct brd_prof *p; /* the context, for the completion callback */
} lrec_t;

/* Aligned: the contexts of ranks that are threads of one process are
 * written on every launch and must not share a cache line. */
struct brd_prof {
  _Alignas(128) struct ncclComm *comm; /* borrowed */
  const any_prof_t *sym;      /* lib.sym, valid while this holds a reference */
  int version;
  void *ctx;                  /* the plugin's */
  int mask;                   /* what init asked for, cut to the version's types */
  pid_t pid;
  pthread_mutex_t mu;         /* the lrec fields marked mu, pending */
  int pending;                /* mu: armed completion callbacks not run yet */
  int dead;                   /* mu: finalized with callbacks pending: they only free */
  struct lrec *live_L;        /* mu: the launch proxy operations attach to, NULL: none
                               * (p->L, or a detached one whose kernel still runs) */
  /* The launch running now (the launching thread only). */
  int active;                 /* between launch_begin and launch_end */
  int alone;                  /* no other thread reads this launch's mu fields:
                               * the launching thread skips the lock */
  const brd_call_t *calls;    /* borrowed for the launch */
  int ncalls;
  lrec_t *L;                  /* owned: this launch's record (NULL: none yet) */
  pcall_t *pc;                /* L->pc while active */
  void *klaunch;
  const struct brd_works *ws; /* borrowed for the launch */
  int per_work;
  int p2p_works_left;
  int p2p_started;
  void *first_p2p;            /* parent of the point-to-point works' channels */
  int first_p2p_call;         /* its call index, -1 */
  int kch_work;               /* the work whose channels are open, -1: none */
  void **kch;                 /* owned: [kch_cap] that work's KernelCh handles */
  int kch_n, kch_cap;
  uint64_t coll_seq;          /* collectives of this communicator so far */
};

/* One event in Braid's terms. */
typedef struct ev {
  uint64_t type;
  void *parent, *parent_group;
  const brd_call_t *call;
  uint64_t seq;
  int algo, proto;            /* BRD_IR_ALGO_* / BRD_IR_PROTO_*, -1 unknown */
  int nch;
  int peer, is_send, chunk, chan, step;
  uint64_t ptimer;
} ev_t;

/* Starts event e when the plugin asked for its type (the context's mask),
 * through the version's table; the plugin's handle, or NULL when the type
 * is filtered or the plugin failed to start it. Any thread that may touch
 * p's launch state (see brd_prof_t.mu); does not block beyond the plugin. */
void *brd_prof_ev_start(brd_prof_t *p, const ev_t *e);

/* Stops the event of handle h; NULL is a no-op. As brd_prof_ev_start. */
void brd_prof_ev_stop(brd_prof_t *p, void *h);

/* Records a state change of the event of handle h (NULL, or a plugin
 * without recordEventState: nothing): a1 for v1 .. v3, a4 for v4 and
 * later. As brd_prof_ev_start. */
void brd_prof_ev_state(brd_prof_t *p, void *h, ncclProfilerEventState_t st,
                       ncclProfilerEventStateArgs_v1_t *a1, ncclProfilerEventStateArgs_v4_t *a4);

/* Frees a launch record and its tables; NULL is a no-op. Whoever owns L
 * (see lrec_t). */
void brd_prof_lrec_free(lrec_t *L);

#endif /* BRD_CORE_PROFILER_INT_H */
