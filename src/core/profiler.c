/*
 * Braid: the profiler plugin loader, the per-version descriptors, and the
 * events of a launch (profiler.h).
 *
 * One library per process (NCCL's rule), counted by the communicators
 * holding a context. Events are described once in Braid's terms (ev_t)
 * and written into the version's descriptor only when the plugin asked for
 * their type, so a filtered event costs a mask test.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "base/plugin.h"
#include "base/time.h"
#include "core/comm.h"
#include "core/profiler.h"
#include "core/works.h"
#include "device/ir.h"
#include "nccl_profiler.h"
#include "plan/tune.h"
#include "transport/net.h"
#include "transport/net_plugin.h"

#define SUBSYS (BRD_SUBSYS_INIT | BRD_SUBSYS_PROFILE)
#define OLDEST 1
#define NEWEST 6

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


static brd_plugin_lib_t lib = BRD_PLUGIN_LIB_INIT; /* sym: an any_prof_t */
static char lib_name[128];
static char lib_path[PATH_MAX];

/* The types a launch can emit: a context asking for none of them skips
 * its launches altogether. */
#define LAUNCH_TYPES                                                                     \
  (ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh |          \
   ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileKernelLaunch |  \
   ncclProfileProxyOp | ncclProfileProxyStep)

/* Event types each version knows. */
static const int version_types[NEWEST + 1] = {
    0, 0x3f, 0x3f, 0xff, 0xff, 0xfff, 0x7fff,
};

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

static ncclDebugLogger_t logger(void) {
  /* brd_net_log has the logger's exact prototype but for the level's
   * type (int for the enum): one ABI, two C spellings. */
  return (ncclDebugLogger_t)(void (*)(void))brd_net_log;
}


/* Whether an ncclProfiler_vN table has a name, an init and the calls. */
static int usable(const void *table) {
  const any_prof_t *sym = table;
  return sym->v1.name != NULL && sym->v1.init != NULL && sym->v1.startEvent != NULL &&
         sym->v1.stopEvent != NULL;
}

/* Loads the library (brd_plugin_lib_acquire's load): 1 when it did. */
static int load(brd_plugin_lib_t *l) {
  brd_plugin_found_t f;
  int none;
  const char *spec = brd_plugin_spec("NCCL_PROFILER_PLUGIN", brd_param_str(BRD_P_PROFILER_PLUGIN),
                                     BRD_SUBSYS_ENV | BRD_SUBSYS_PROFILE, &none);
  int requested = spec != NULL;
  if (none) return 0;
  /* As NCCL, a profiler may also live in the net plugin's library. */
  void *dl = brd_net_plugin_open_other(spec, "profiler", "PROFILER/Plugin", SUBSYS, &f);
  if (dl == NULL) {
    if (requested)
      WARN("PROFILER/Plugin: cannot load NCCL_PROFILER_PLUGIN=%s: could not find%s%s%s. Give "
           "NCCL_PROFILER_PLUGIN a path, put the library on LD_LIBRARY_PATH, or unset it; "
           "Braid runs without a profiler", spec, f.missing[0] ? f.missing : " it",
           f.err[0] ? ": " : "", f.err);
    else
      INFO(SUBSYS, "PROFILER/Plugin: no profiler plugin (optional)");
    return 0;
  }
  snprintf(lib_path, sizeof(lib_path), "%s", f.path);
  int version = 0;
  const any_prof_t *sym =
      brd_plugin_find_versioned(dl, "ncclProfiler_v", NEWEST, OLDEST, usable, &version);
  if (sym == NULL) {
    if (requested && !f.in_net)
      WARN("PROFILER/Plugin: %s exports no usable ncclProfiler_v%d .. v%d (Braid loads "
           "those versions); Braid runs without a profiler", lib_path, NEWEST, OLDEST);
    else
      INFO(SUBSYS, "PROFILER/Plugin: %s exports no ncclProfiler_v%d .. v%d", lib_path, NEWEST,
           OLDEST);
    dlclose(dl);
    return 0;
  }
  l->dl = dl;
  l->sym = sym;
  l->version = version;
  snprintf(lib_name, sizeof(lib_name), "%s", sym->v1.name);
  INFO(SUBSYS, "PROFILER/Plugin: Loaded %s (v%d)", lib_name, version);
  return 1;
}

/* Logs the closing of the library (brd_plugin_lib_release). */
static void on_close(void) {
  INFO(SUBSYS, "PROFILER/Plugin: Closing profiler plugin %s", lib_name);
}

static void unref(void) {
  brd_plugin_lib_release(&lib, on_close);
}

ncclResult_t brd_prof_create(struct ncclComm *comm, brd_prof_t **out) {
  *out = NULL;
  if (!brd_plugin_lib_acquire(&lib, load)) return ncclSuccess;

  brd_prof_t *p = aligned_alloc(128, (sizeof(brd_prof_t) + 127) / 128 * 128);
  if (p != NULL) memset(p, 0, sizeof(*p));
  if (p == NULL) {
    WARN("out of host memory creating the profiler plugin's context");
    unref();
    return ncclSystemError;
  }
  p->comm = comm;
  p->sym = lib.sym;
  p->version = lib.version;
  p->pid = getpid();
  p->kch_work = -1;
  pthread_mutex_init(&p->mu, NULL);
  int mask = (int)brd_param_int(BRD_P_PROFILE_EVENT_MASK);
  int nnodes = comm->n_nodes > 0 ? comm->n_nodes : 1;
  ncclResult_t r;
  switch (p->version) {
  case 1: case 2: case 3: r = p->sym->v1.init(&p->ctx, &mask); break;
  case 4:
    r = p->sym->v4.init(&p->ctx, &mask, comm->comm_name, comm->comm_hash, nnodes, comm->nranks,
                        comm->rank, logger());
    break;
  default:
    r = p->sym->v5.init(&p->ctx, comm->comm_hash, &mask, comm->comm_name, nnodes, comm->nranks,
                        comm->rank, logger());
    break;
  }
  if (r != ncclSuccess) {
    WARN("PROFILER/Plugin: Profiler init failed with error '%d': %s. Continue without "
         "profiler (%s v%d, rank %d of %d). See the plugin's messages above, or unset "
         "NCCL_PROFILER_PLUGIN", (int)r, ncclGetErrorString(r), lib_name, p->version,
         comm->rank, comm->nranks);
    pthread_mutex_destroy(&p->mu);
    free(p);
    unref();
    return ncclSuccess;
  }
  p->mask = mask & version_types[p->version];
  INFO(SUBSYS, "PROFILER/Plugin: rank %d: %s (v%d) asked for events 0x%x", comm->rank,
       lib_name, p->version, p->mask);
  *out = p;
  return ncclSuccess;
}

static void lrec_free(lrec_t *L) {
  if (L == NULL) return;
  free(L->pc);
  free(L->kch);
  free(L);
}

void brd_prof_destroy(brd_prof_t *p) {
  if (p == NULL) return;
  /* A completion callback still queued on a stream holds this context:
   * wait for it (the streams' work is normally done by now). */
  int64_t deadline = brd_time_now_ns() + 10LL * 1000000000LL;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int pending = p->pending;
    pthread_mutex_unlock(&p->mu);
    if (pending == 0) break;
    int aborted = atomic_load(&p->comm->abort_flag) != 0;
    if (aborted || brd_time_now_ns() > deadline) {
      if (!aborted)
        WARN("PROFILER/Plugin: rank %d: %d launches' KernelCh events still wait for their "
             "stream after 10 s; finalizing %s without them. Synchronize the streams before "
             "ncclCommDestroy", p->comm->rank, pending, lib_name);
      pthread_mutex_lock(&p->mu);
      p->dead = 1; /* the late callbacks then only free their records */
      pthread_mutex_unlock(&p->mu);
      break;
    }
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
  ncclResult_t r = p->sym->v1.finalize != NULL ? p->sym->v1.finalize(p->ctx) : ncclSuccess;
  if (r != ncclSuccess)
    WARN("PROFILER/Plugin: %s (v%d) finalize failed: %s (ignored: the communicator is "
         "going away)", lib_name, p->version, ncclGetErrorString(r));
  pthread_mutex_lock(&p->mu);
  int leaked = p->pending;
  pthread_mutex_unlock(&p->mu);
  if (leaked == 0) {
    lrec_free(p->L);
    free(p->kch);
    pthread_mutex_destroy(&p->mu);
    free(p);
  } /* else the late callbacks still read p: it stays (a bounded leak) */
  unref();
}

const char *brd_prof_name(const brd_prof_t *p) { return p != NULL ? p->sym->v1.name : ""; }
int brd_prof_version(const brd_prof_t *p) { return p != NULL ? p->version : 0; }
int brd_prof_mask(const brd_prof_t *p) { return p != NULL ? p->mask : 0; }

void brd_prof_reset(void) {
  brd_plugin_lib_reset(&lib);
}

/* ---- descriptors ---------------------------------------------------------- */

static const char *dtype_str(ncclDataType_t t) {
  static const char *const names[ncclNumTypes] = {
      "ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",
      "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
      "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2",
  };
  return (unsigned)t < ncclNumTypes ? names[t] : "Unknown";
}

static const char *algo_str(int a) {
  if (a < 0) return "Unknown";
  if (a == BRD_IR_ALGO_COPY) return "Copy";
  return brd_algo_name((brd_algo_t)a);
}

static const char *proto_str(int pr) {
  return pr < 0 ? "Unknown" : brd_proto_name((brd_proto_t)pr);
}

/* NCCL's table indices (v1 descriptors); 255 (-1) for Braid's own. */
static uint8_t algo_num(int a) {
  switch (a) {
  case BRD_IR_ALGO_RING: return 1;
  case BRD_IR_ALGO_TREE: return 0;
  case BRD_IR_ALGO_NVLS: return 4;
  default: return 255;
  }
}

static uint8_t proto_num(int pr) {
  switch (pr) {
  case BRD_IR_PROTO_LL: return 0;
  case BRD_IR_PROTO_LL128: return 1;
  case BRD_IR_PROTO_SIMPLE: return 2;
  default: return 255;
  }
}

static uint8_t u8(int v) { return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v; }

static void *p2p_buff(const brd_call_t *c) {
  return c->coll == BRD_COLL_SEND ? (void *)c->sendbuff : c->recvbuff;
}

static size_t coll_bytes(const brd_call_t *c) { return c->count * brd_dtype_size(c->dtype); }

/* The descriptor members that keep their names from one version to the
 * next, a group each; in the fill_vN below, where p, e and c are in scope.
 * v1 numbers func and datatype where later versions name them. */
#define FILL_COLL_CALL(d, func_v, dtype_v)                \
  do {                                                    \
    (d)->coll.seqNumber = e->seq;                         \
    (d)->coll.func = func_v;                              \
    (d)->coll.sendBuff = c->sendbuff;                     \
    (d)->coll.recvBuff = c->recvbuff;                     \
    (d)->coll.count = c->count;                           \
    (d)->coll.root = c->root;                             \
    (d)->coll.datatype = dtype_v;                         \
  } while (0)

#define FILL_P2P_CALL(d, func_v, dtype_v)                 \
  do {                                                    \
    (d)->p2p.func = func_v;                               \
    (d)->p2p.buff = p2p_buff(c);                          \
    (d)->p2p.datatype = dtype_v;                          \
    (d)->p2p.count = c->count;                            \
    (d)->p2p.peer = c->root;                              \
  } while (0)

#define FILL_PROXY_OP(d)                                  \
  do {                                                    \
    (d)->proxyOp.pid = p->pid;                            \
    (d)->proxyOp.channelId = u8(e->chan);                 \
    (d)->proxyOp.peer = e->peer;                          \
    (d)->proxyOp.nSteps = 1;                              \
    (d)->proxyOp.chunkSize = e->chunk;                    \
    (d)->proxyOp.isSend = e->is_send;                     \
  } while (0)

static void fill_v1(const brd_prof_t *p, const ev_t *e, ncclProfilerEventDescr_v1_t *d) {
  const struct ncclComm *comm = p->comm;
  const brd_call_t *c = e->call;
  switch (e->type) {
  case ncclProfileColl:
    d->coll.name = comm->comm_name;
    d->coll.commHash = comm->comm_hash;
    FILL_COLL_CALL(d, (uint8_t)brd_coll_nccl_func(c->coll), (uint8_t)c->dtype);
    d->coll.op = (uint32_t)c->op;
    d->coll.trafficBytes = coll_bytes(c);
    d->coll.nMaxChannels = u8(e->nch);
    d->coll.algo = algo_num(e->algo);
    d->coll.proto = proto_num(e->proto);
    d->coll.isNvls = e->algo == BRD_IR_ALGO_NVLS;
    break;
  case ncclProfileP2p:
    d->p2p.name = comm->comm_name;
    d->p2p.commHash = comm->comm_hash;
    FILL_P2P_CALL(d, (uint8_t)brd_coll_nccl_func(c->coll), (uint8_t)c->dtype);
    break;
  case ncclProfileProxyOp: FILL_PROXY_OP(d); break;
  case ncclProfileProxyStep: d->proxyStep.step = e->step; break;
  default: break;
  }
}

/* v2 and v3 share their coll/p2p members up to datatype. */
#define FILL_V23_COMMON(d)                                           \
  do {                                                               \
    if (e->type == ncclProfileColl) {                                \
      (d)->coll.name = comm->comm_name;                              \
      (d)->coll.commHash = comm->comm_hash;                          \
      FILL_COLL_CALL(d, brd_coll_name(c->coll), dtype_str(c->dtype));     \
      (d)->coll.nMaxChannels = u8(e->nch);                           \
      (d)->coll.algo = algo_str(e->algo);                            \
      (d)->coll.proto = proto_str(e->proto);                         \
    } else if (e->type == ncclProfileP2p) {                          \
      (d)->p2p.name = comm->comm_name;                               \
      (d)->p2p.commHash = comm->comm_hash;                           \
      FILL_P2P_CALL(d, brd_coll_name(c->coll), dtype_str(c->dtype));      \
    } else if (e->type == ncclProfileProxyOp) {                      \
      FILL_PROXY_OP(d);                                              \
    } else if (e->type == ncclProfileProxyStep) {                    \
      (d)->proxyStep.step = e->step;                                 \
    }                                                                \
  } while (0)

static void fill_v2(const brd_prof_t *p, const ev_t *e, ncclProfilerEventDescr_v2_t *d) {
  const struct ncclComm *comm = p->comm;
  const brd_call_t *c = e->call;
  FILL_V23_COMMON(d);
  if (e->type == ncclProfileColl) d->coll.trafficBytes = coll_bytes(c);
}

static void fill_v3(const brd_prof_t *p, const ev_t *e, ncclProfilerEventDescr_v3_t *d) {
  const struct ncclComm *comm = p->comm;
  const brd_call_t *c = e->call;
  FILL_V23_COMMON(d);
  if (e->type == ncclProfileKernelCh) d->kernelCh.channelId = u8(e->chan);
}

/* v4 .. v6 share coll/p2p/proxy/kernelCh members. */
#define FILL_V456_COMMON(d)                                          \
  do {                                                               \
    switch (e->type) {                                               \
    case ncclProfileColl:                                            \
      FILL_COLL_CALL(d, brd_coll_name(c->coll), dtype_str(c->dtype));     \
      (d)->coll.nChannels = u8(e->nch);                              \
      (d)->coll.algo = algo_str(e->algo);                            \
      (d)->coll.proto = proto_str(e->proto);                         \
      break;                                                         \
    case ncclProfileP2p:                                             \
      FILL_P2P_CALL(d, brd_coll_name(c->coll), dtype_str(c->dtype));      \
      (d)->p2p.nChannels = u8(e->nch);                               \
      break;                                                         \
    case ncclProfileProxyOp: FILL_PROXY_OP(d); break;                \
    case ncclProfileProxyStep: (d)->proxyStep.step = e->step; break; \
    case ncclProfileKernelCh:                                        \
      (d)->kernelCh.channelId = u8(e->chan);                         \
      (d)->kernelCh.pTimer = e->ptimer;                              \
      break;                                                         \
    default: break;                                                  \
    }                                                                \
  } while (0)

static void fill_v4(const brd_prof_t *p, const ev_t *e, ncclProfilerEventDescr_v4_t *d) {
  const brd_call_t *c = e->call;
  FILL_V456_COMMON(d);
}

/* The members v5's collApi and p2pApi share, in fill_v5. */
#define FILL_API_CALL(m)                                  \
  do {                                                    \
    d->m.func = brd_coll_name(c->coll);                        \
    d->m.count = c->count;                                \
    d->m.datatype = dtype_str(c->dtype);                  \
    d->m.stream = c->stream;                              \
    d->m.graphCaptured = false;                           \
  } while (0)

static void fill_v5(const brd_prof_t *p, const ev_t *e, ncclProfilerEventDescr_v5_t *d) {
  const brd_call_t *c = e->call;
  FILL_V456_COMMON(d);
  switch (e->type) {
  case ncclProfileColl: d->coll.parentGroup = e->parent_group; break;
  case ncclProfileP2p: d->p2p.parentGroup = e->parent_group; break;
  case ncclProfileGroupApi:
    d->groupApi.graphCaptured = false;
    d->groupApi.groupDepth = 1;
    break;
  case ncclProfileCollApi:
    FILL_API_CALL(collApi);
    d->collApi.root = c->root;
    break;
  case ncclProfileP2pApi: FILL_API_CALL(p2pApi); break;
  case ncclProfileKernelLaunch:
    d->kernelLaunch.stream = p->ncalls > 0 ? p->calls[0].stream : NULL;
    break;
  default: break;
  }
}

_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) <= sizeof(ncclProfilerEventDescr_v6_t),
               "v6 descriptors begin with v5's");

/* In ev_start: fills a version-V descriptor for e (its header, then
 * fill_vV) and starts it through the plugin's vV table into h and r. */
#define START_VN(V)                                                         \
  do {                                                                      \
    ncclProfilerEventDescr_v##V##_t d;                                      \
    memset(&d, 0, sizeof(d));                                               \
    d.type = e->type, d.parentObj = e->parent, d.rank = p->comm->rank;      \
    fill_v##V(p, e, &d);                                                    \
    r = p->sym->v##V.startEvent(p->ctx, &h, &d);                            \
  } while (0)

/* Starts event e when the plugin asked for its type; the handle or NULL. */
static void *ev_start(brd_prof_t *p, const ev_t *e) {
  if ((p->mask & (int)e->type) == 0) return NULL;
  void *h = NULL;
  ncclResult_t r;
  switch (p->version) {
  case 1: START_VN(1); break;
  case 2: START_VN(2); break;
  case 3: START_VN(3); break;
  case 4: START_VN(4); break;
  case 5: START_VN(5); break;
  default: {
    /* v6's descriptor begins with v5's members at the same offsets (the
     * header's asserts): filled through v5's view of the same bytes. */
    union {
      ncclProfilerEventDescr_v5_t v5;
      ncclProfilerEventDescr_v6_t v6;
    } d;
    memset(&d, 0, sizeof(d));
    d.v5.type = e->type, d.v5.parentObj = e->parent, d.v5.rank = p->comm->rank;
    fill_v5(p, e, &d.v5);
    r = p->sym->v6.startEvent(p->ctx, &h, &d.v6);
    break;
  }
  }
  return r == ncclSuccess ? h : NULL;
}

static void ev_stop(brd_prof_t *p, void *h) {
  if (h != NULL) (void)p->sym->v1.stopEvent(h);
}

/* A state change; args_v1 for v1..v3, args_v4 for v4 and later. */
static void ev_state(brd_prof_t *p, void *h, ncclProfilerEventState_t st,
                     ncclProfilerEventStateArgs_v1_t *a1, ncclProfilerEventStateArgs_v4_t *a4) {
  if (h == NULL || p->sym->v1.recordEventState == NULL) return;
  if (p->version <= 3)
    (void)p->sym->v1.recordEventState(h, st, a1);
  else
    (void)p->sym->v4.recordEventState(h, st, (ncclProfilerEventStateArgs_v4_t *)a4);
}

/* ---- launches --------------------------------------------------------------- */

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
    pthread_mutex_lock(&p->mu);
    p->L = L;
    pthread_mutex_unlock(&p->mu);
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
  ev_stop(p, pc->ev);
  ev_stop(p, pc->api);
  pc->ev = pc->api = NULL;
}

/* The launch's own events, after all its calls' (mu held, or L private). */
static void group_stop(brd_prof_t *p, lrec_t *L) {
  ev_stop(p, L->group);
  ev_stop(p, L->group_api);
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
    lrec_free(L);
    return 1;
  }
  return 0;
}

void brd_prof_launch_begin(brd_prof_t *p, const brd_call_t *calls, int ncalls) {
  p->active = 0;
  if ((p->mask & LAUNCH_TYPES) == 0) return;
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
  ev_t e;
  memset(&e, 0, sizeof(e));
  e.type = ncclProfileGroup;
  L->group = ev_start(p, &e);
  e.type = ncclProfileGroupApi;
  L->group_api = ev_start(p, &e);
  for (int i = 0; i < ncalls; i++) {
    e.type = is_p2p(&calls[i]) ? ncclProfileP2pApi : ncclProfileCollApi;
    e.parent = L->group_api;
    e.call = &calls[i];
    p->pc[i].api = ev_start(p, &e);
  }
  pthread_mutex_lock(&p->mu);
  L->refs = 0;
  L->ended = 0;
  L->cur_call = -1;
  L->live = 1;
  p->live_L = L;
  pthread_mutex_unlock(&p->mu);
}

/* Starts call i's Coll or P2p event (w: its first work, or NULL). */
static void call_start(brd_prof_t *p, int i, const brd_work_t *w) {
  pcall_t *pc = &p->pc[i];
  const brd_call_t *c = &p->calls[i];
  if (pc->started) return;
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
  void *h = ev_start(p, &e);
  pthread_mutex_lock(&p->mu);
  pc->ev = h;
  pc->open = 1;
  pthread_mutex_unlock(&p->mu);
  if (is_p2p(c) && p->first_p2p == NULL) p->first_p2p = h;
}

/* Call i ended: its events stop now, or with the last child still open. */
static void call_stop(brd_prof_t *p, int i) {
  pcall_t *pc = &p->pc[i];
  if (!pc->started || pc->stopped) return;
  pc->stopped = 1;
  pthread_mutex_lock(&p->mu);
  pc->closed = 1;
  if (pc->refs == 0) call_events_stop(p, pc);
  pthread_mutex_unlock(&p->mu);
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
      L->kch[L->kch_n++] = ev_start(p, &e);
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
  ev_t e;
  memset(&e, 0, sizeof(e));
  e.type = ncclProfileKernelLaunch;
  e.parent = p->L->group_api;
  p->klaunch = ev_start(p, &e);
  if (!per_work) {
    /* Without work hooks, each call's first work describes it. */
    for (int w = 0; w < ws->n; w++) {
      int i = work_call(p, &ws->w[w]);
      if (i >= 0) call_start(p, i, &ws->w[w]);
    }
    const brd_work_t *pw = NULL;
    for (int w = 0; w < ws->n && pw == NULL; w++)
      if (ws->w[w].p2p) pw = &ws->w[w];
    for (int i = 0; i < p->ncalls; i++)
      if (is_p2p(&p->calls[i])) {
        call_start(p, i, pw);
        if (p->first_p2p_call < 0) p->first_p2p_call = i;
      }
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->ncalls && p->L->cur_call < 0; i++)
      if (!is_p2p(&p->calls[i])) p->L->cur_call = i;
    pthread_mutex_unlock(&p->mu);
    if (p->mask & ncclProfileKernelCh) kch_start_all(p, ws);
  }
}

static void kch_close(brd_prof_t *p) {
  if (p->kch_n == 0) return;
  ncclProfilerEventStateArgs_v4_t a4;
  memset(&a4, 0, sizeof(a4));
  a4.kernelCh.pTimer = (uint64_t)brd_time_now_ns();
  for (int b = 0; b < p->kch_n; b++) {
    if (p->kch[b] == NULL) continue;
    if (p->version >= 4) ev_state(p, p->kch[b], ncclProfilerKernelChStop, NULL, &a4);
    ev_stop(p, p->kch[b]);
  }
  p->kch_n = 0;
  p->kch_work = -1;
}

/* Stops L's CUDA-mode KernelCh events, pTimer now (before their calls). */
static void kch_stop_all(brd_prof_t *p, lrec_t *L) {
  ncclProfilerEventStateArgs_v4_t a4;
  memset(&a4, 0, sizeof(a4));
  a4.kernelCh.pTimer = (uint64_t)brd_time_now_ns();
  for (int k = 0; k < L->kch_n; k++) {
    if (L->kch[k] == NULL) continue;
    if (p->version >= 4) ev_state(p, L->kch[k], ncclProfilerKernelChStop, NULL, &a4);
    ev_stop(p, L->kch[k]);
    L->kch[k] = NULL;
  }
  L->kch_n = 0;
}

void brd_prof_work_begin(brd_prof_t *p, int w) {
  if (!p->active || p->ws == NULL || w < 0 || w >= p->ws->n) return;
  const brd_work_t *wk = &p->ws->w[w];
  int i = work_call(p, wk);
  void *parent;
  if (i >= 0) {
    call_start(p, i, wk);
    parent = p->pc[i].ev;
    pthread_mutex_lock(&p->mu);
    p->L->cur_call = i;
    pthread_mutex_unlock(&p->mu);
  } else {
    if (!p->p2p_started) {
      p->p2p_started = 1;
      for (int k = 0; k < p->ncalls; k++)
        if (is_p2p(&p->calls[k])) call_start(p, k, wk);
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
    p->kch[b] = ev_start(p, &e);
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
    if (L->ended && L->refs == 0) lrec_free(L);
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
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < L->ncalls; i++) {
    L->pc[i].refs++;
    L->refs++;
  }
  L->kch_armed = 1;
  L->p = p;
  p->pending++;
  pthread_mutex_unlock(&p->mu);
  *fn_out = launch_done;
  *arg_out = L;
  return 1;
}

void brd_prof_launch_end(brd_prof_t *p, ncclResult_t res) {
  (void)res;
  if (!p->active) return;
  lrec_t *L = p->L;
  kch_close(p);
  pthread_mutex_lock(&p->mu);
  int armed = L->kch_armed;
  if (!armed) { /* armed: proxy operations attach until the stream is done */
    L->live = 0;
    if (p->live_L == L) p->live_L = NULL;
  }
  pthread_mutex_unlock(&p->mu);
  if (!armed) kch_stop_all(p, L);
  /* Calls that never reached a work (a failed launch, or a call with
   * nothing to move) still get their event, so every call has one. */
  for (int i = 0; i < p->ncalls; i++) {
    call_start(p, i, NULL);
    call_stop(p, i);
  }
  ev_stop(p, p->klaunch);
  p->klaunch = NULL;
  pthread_mutex_lock(&p->mu);
  if (L->refs == 0) {
    group_stop(p, L);
  } else {
    L->ended = 1; /* its last child stops the rest and frees it */
    p->L = NULL;
  }
  pthread_mutex_unlock(&p->mu);
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
  op->op = ev_start(p, &e);
  ncclProfilerEventStateArgs_v1_t a1;
  memset(&a1, 0, sizeof(a1));
  a1.proxyOp.transSize = bytes;
  a1.proxyOp.steps = 1;
  if (p->version <= 3)
    ev_state(p, op->op, is_send ? ncclProfilerProxyOpSendPosted : ncclProfilerProxyOpRecvReceived,
             &a1, NULL);
  else
    ev_state(p, op->op, ncclProfilerProxyOpInProgress_v4, NULL, NULL);
  e.type = ncclProfileProxyStep;
  e.parent = op->op;
  e.step = 0;
  op->step = ev_start(p, &e);
  ncclProfilerEventStateArgs_v4_t a4;
  memset(&a4, 0, sizeof(a4));
  a4.proxyStep.transSize = bytes;
  ev_state(p, op->step, is_send ? ncclProfilerProxyStepSendWait : ncclProfilerProxyStepRecvWait,
           &a1, &a4);
}

void brd_prof_proxy_stop(brd_prof_t *p, brd_prof_op_t *op) {
  ev_stop(p, op->step);
  ev_stop(p, op->op);
  if (op->owner != NULL) {
    pthread_mutex_lock(&p->mu);
    (void)unpin(p, op->owner, op->call);
    pthread_mutex_unlock(&p->mu);
  }
  memset(op, 0, sizeof(*op));
}
