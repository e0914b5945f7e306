/*
 * Braid: the profiler plugin loader, the contexts, and the per-version
 * descriptors events are written into (profiler.h, profiler_int.h; the
 * events of a launch and of the proxy are profiler_launch.c's).
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
#include <time.h>
#include <unistd.h>

#include "base/debug.h"
#include "base/param.h"
#include "base/plugin.h"
#include "base/time.h"
#include "core/comm.h"
#include "core/profiler.h"
#include "core/profiler_int.h"
#include "device/ir.h"
#include "nccl_profiler.h"
#include "plan/tune.h"
#include "transport/net.h"
#include "transport/net_plugin.h"

#define SUBSYS (BRD_SUBSYS_INIT | BRD_SUBSYS_PROFILE)
#define OLDEST 1
#define NEWEST 6

static brd_plugin_lib_t lib = BRD_PLUGIN_LIB_INIT; /* sym: an any_prof_t */
static char lib_name[128];
static char lib_path[PATH_MAX];

/* Event types each version knows. */
static const int version_types[NEWEST + 1] = {
    0, 0x3f, 0x3f, 0xff, 0xff, 0xfff, 0x7fff,
};

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

/* See profiler_int.h. */
void brd_prof_lrec_free(lrec_t *L) {
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
    brd_prof_lrec_free(p->L);
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

/* See profiler_int.h. */
void *brd_prof_ev_start(brd_prof_t *p, const ev_t *e) {
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

/* See profiler_int.h. */
void brd_prof_ev_stop(brd_prof_t *p, void *h) {
  if (h != NULL) (void)p->sym->v1.stopEvent(h);
}

/* See profiler_int.h. */
void brd_prof_ev_state(brd_prof_t *p, void *h, ncclProfilerEventState_t st,
                       ncclProfilerEventStateArgs_v1_t *a1, ncclProfilerEventStateArgs_v4_t *a4) {
  if (h == NULL || p->sym->v1.recordEventState == NULL) return;
  if (p->version <= 3)
    (void)p->sym->v1.recordEventState(h, st, a1);
  else
    (void)p->sym->v4.recordEventState(h, st, (ncclProfilerEventStateArgs_v4_t *)a4);
}
