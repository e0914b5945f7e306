/*
 * A test profiler plugin, compiled once per ABI version (-DPROF_VERSION=N,
 * N = 1 .. 6): it records every call in proftest_state_vN and checks the
 * rules profiler_test.h lists. Built against the public headers only.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_profiler.h"
#include "profiler_test.h"

#ifndef PROF_VERSION
#error "build with -DPROF_VERSION=N"
#endif

#define EXPORT __attribute__((visibility("default")))
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STATE CAT(proftest_state_v, PROF_VERSION)
#define SYM CAT(ncclProfiler_v, PROF_VERSION)
#define DESCR CAT(CAT(ncclProfilerEventDescr_v, PROF_VERSION), _t)
#define STATE_ARGS CAT(CAT(ncclProfilerEventStateArgs_v, PROF_VERSION), _t)

EXPORT proftest_state_t STATE;

#define CTX_MAGIC 0x9f0f11e5u
#define EV_MAGIC 0x3e7e47a1u

typedef struct event {
  uint32_t magic;
  int bit;                   /* type's bit index */
  struct ctx *ctx;
  struct event *parent;
  int open_children;
  int stopped;
  int kch_stop_state;
  struct event *next;        /* the context's list (freed at finalize) */
} event_t;

typedef struct ctx {
  uint32_t magic;
  int rank;                  /* -1 until known (v1..v3) */
  int mask;
  uint64_t next_seq;
  long open;
  event_t *events;
} ctx_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* mu held. */
static void violation(const char *fmt, ...) {
  if (STATE.violations++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(STATE.first_violation, sizeof(STATE.first_violation), fmt, ap);
    va_end(ap);
  }
}

static int bit_of(uint64_t type) {
  if (type == 0 || (type & (type - 1)) != 0) return -1;
  int b = 0;
  while ((type >> b) != 1) b++;
  return b < PROFTEST_NTYPES ? b : -1;
}

static int live(const event_t *e) { return e != NULL && e->magic == EV_MAGIC && !e->stopped; }

#if PROF_VERSION <= 3
static ncclResult_t init_common(void **context, int *mask) {
  int rank = -1;
#else
static ncclResult_t init_common(void **context, int *mask, const char *name, uint64_t id,
                                int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)name;
#endif
  pthread_mutex_lock(&mu);
  STATE.inits++;
  STATE.mask_in = *mask;
#if PROF_VERSION >= 4
  STATE.comm_id = id;
  STATE.nnodes = nnodes;
  STATE.nranks = nranks;
  if (rank >= 0 && rank < 31) STATE.rank_mask |= 1 << rank;
  if (logfn != NULL)
    logfn(NCCL_LOG_INFO, NCCL_PROFILE, __FILE__, __LINE__, "profiler test v%d: rank %d of %d",
          PROF_VERSION, rank, nranks);
#endif
  const char *fault = getenv("PROFTEST_FAULT");
  if (fault != NULL && strcmp(fault, "init") == 0) {
    STATE.init_fails++;
    pthread_mutex_unlock(&mu);
    return ncclSystemError;
  }
  pthread_mutex_unlock(&mu);
  ctx_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->magic = CTX_MAGIC;
  c->rank = rank;
  const char *m = getenv("PROFTEST_MASK");
  if (m == NULL)
    *mask = 0x7fff;
  else if (strcmp(m, "keep") != 0)
    *mask = (int)strtol(m, NULL, 0);
  c->mask = *mask;
  *context = c;
  return ncclSuccess;
}

#if PROF_VERSION <= 3
static ncclResult_t p_init(void **context, int *mask) { return init_common(context, mask); }
#elif PROF_VERSION == 4
static ncclResult_t p_init(void **context, int *mask, const char *name, uint64_t hash,
                           int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return init_common(context, mask, name, hash, nnodes, nranks, rank, logfn);
}
#else
static ncclResult_t p_init(void **context, uint64_t id, int *mask, const char *name, int nnodes,
                           int nranks, int rank, ncclDebugLogger_t logfn) {
  return init_common(context, mask, name, id, nnodes, nranks, rank, logfn);
}
#endif

#if PROF_VERSION >= 2
static void copy_name(char *dst, const char *src) {
  snprintf(dst, 32, "%s", src != NULL ? src : "(null)");
}

static int one_of(const char *s, const char *const *list) {
  if (s == NULL) return 0;
  for (int i = 0; list[i] != NULL; i++)
    if (strcmp(s, list[i]) == 0) return 1;
  return 0;
}

static const char *const funcs[] = {"AllReduce", "Broadcast", "Reduce", "AllGather",
                                    "ReduceScatter", "AlltoAll", "Gather", "Scatter", NULL};
static const char *const protos[] = {"LL", "LL128", "Simple", NULL};
#endif

/* Descriptor checks and sums. mu held. */
static void look_at(const DESCR *d, event_t *e) {
  (void)e;
  switch (d->type) {
  case ncclProfileColl: {
    STATE.coll_count_sum += d->coll.count;
    if (d->coll.seqNumber != e->ctx->next_seq)
      violation("Coll seqNumber %llu, expected %llu", (unsigned long long)d->coll.seqNumber,
                (unsigned long long)e->ctx->next_seq);
    e->ctx->next_seq = d->coll.seqNumber + 1;
#if PROF_VERSION == 1
    if (d->coll.func > 10 || d->coll.datatype > 11 || d->coll.proto > 2)
      STATE.coll_names_bad++;
    if (d->coll.nMaxChannels == 0) STATE.coll_nch_zero++;
    snprintf(STATE.last_func, 32, "%d", d->coll.func);
    snprintf(STATE.last_dtype, 32, "%d", d->coll.datatype);
    snprintf(STATE.last_algo, 32, "%d", d->coll.algo);
    snprintf(STATE.last_proto, 32, "%d", d->coll.proto);
    {
      static const size_t sizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
      if (d->coll.datatype < 12 && d->coll.trafficBytes != d->coll.count * sizes[d->coll.datatype])
        STATE.coll_bytes_bad++;
    }
#else
    if (!one_of(d->coll.func, funcs) || d->coll.datatype == NULL ||
        strncmp(d->coll.datatype, "nccl", 4) != 0 || d->coll.algo == NULL ||
        strcmp(d->coll.algo, "Unknown") == 0 || !one_of(d->coll.proto, protos))
      STATE.coll_names_bad++;
    copy_name(STATE.last_func, d->coll.func);
    copy_name(STATE.last_dtype, d->coll.datatype);
    copy_name(STATE.last_algo, d->coll.algo);
    copy_name(STATE.last_proto, d->coll.proto);
#if PROF_VERSION <= 3
    if (d->coll.nMaxChannels == 0) STATE.coll_nch_zero++;
#else
    if (d->coll.nChannels == 0) STATE.coll_nch_zero++;
#endif
#if PROF_VERSION == 2
    if (strcmp(d->coll.datatype, "ncclFloat32") == 0 && d->coll.trafficBytes != d->coll.count * 4)
      STATE.coll_bytes_bad++;
#endif
#endif
#if PROF_VERSION >= 5
    /* The Group event when the plugin tracks Groups, else NULL. */
    if ((e->ctx->mask & ncclProfileGroup) ? !live((event_t *)d->coll.parentGroup) ||
                                                ((event_t *)d->coll.parentGroup)->bit != 0
                                          : d->coll.parentGroup != NULL)
      violation("Coll parentGroup %p is not the Group event", d->coll.parentGroup);
#endif
    break;
  }
  case ncclProfileP2p:
    STATE.p2p_count_sum += d->p2p.count;
#if PROF_VERSION >= 4
    if (STATE.nranks > 0 && (d->p2p.peer < 0 || d->p2p.peer >= STATE.nranks))
      STATE.p2p_peer_bad++;
#endif
#if PROF_VERSION >= 5
    if ((e->ctx->mask & ncclProfileGroup) ? !live((event_t *)d->p2p.parentGroup) ||
                                                ((event_t *)d->p2p.parentGroup)->bit != 0
                                          : d->p2p.parentGroup != NULL)
      violation("P2p parentGroup %p is not the Group event", d->p2p.parentGroup);
#endif
    break;
  case ncclProfileProxyOp:
    STATE.proxy_bytes += d->proxyOp.chunkSize;
    if (d->proxyOp.pid != getpid() || d->proxyOp.nSteps < 1 || d->proxyOp.chunkSize <= 0 ||
        (d->proxyOp.isSend != 0 && d->proxyOp.isSend != 1) ||
        (STATE.nranks > 0 && (d->proxyOp.peer < 0 || d->proxyOp.peer >= STATE.nranks)))
      STATE.proxy_desc_bad++;
    break;
  default:
    break;
  }
}

/* The parent's type each child type must have (bit index; -1: none). */
static int parent_ok(int bit, int pbit) {
  switch (bit) {
  case 1: case 2: return PROF_VERSION >= 5 ? pbit == (bit == 1 ? 9 : 10) : pbit == 0;
  case 3: case 6: return pbit == 1 || pbit == 2;
  case 4: return pbit == 3;
  case 9: case 10: case 11: return pbit == 8;
  default: return 0;
  }
}

static ncclResult_t p_start(void *context, void **handle, DESCR *d) {
  ctx_t *c = context;
  *handle = NULL;
  pthread_mutex_lock(&mu);
  if (c == NULL || c->magic != CTX_MAGIC) {
    violation("startEvent with a context init did not make");
    goto out;
  }
  int bit = bit_of(d->type);
  if (bit < 0) {
    violation("startEvent with type %#llx", (unsigned long long)d->type);
    goto out;
  }
  if ((c->mask & (1 << bit)) == 0) violation("event type %d the plugin did not ask for", bit);
#if PROF_VERSION >= 4
  if (d->rank != c->rank) violation("descriptor rank %d in the context of rank %d", d->rank, c->rank);
#else
  if (c->rank < 0) c->rank = d->rank;
  else if (d->rank != c->rank) violation("descriptor rank %d, earlier %d", d->rank, c->rank);
#endif
  event_t *e = calloc(1, sizeof(*e));
  if (e == NULL) goto out;
  e->magic = EV_MAGIC;
  e->bit = bit;
  e->ctx = c;
  e->next = c->events;
  c->events = e;
  /* A child with no parent although the plugin asked for its parent's
   * type (ProxyOp and KernelCh under Coll/P2p, ProxyStep under ProxyOp). */
  int want_parent = (bit == 3 || bit == 6) ? (c->mask & (ncclProfileColl | ncclProfileP2p)) ==
                                                  (ncclProfileColl | ncclProfileP2p)
                    : bit == 4 ? (c->mask & ncclProfileProxyOp) != 0
                               : 0;
  if (d->parentObj == NULL && want_parent) STATE.orphans[bit]++;
  if (d->parentObj != NULL) {
    event_t *p = d->parentObj;
    if (!live(p))
      violation("type %d: parent %p is not a live event", bit, d->parentObj);
    else if (p->ctx != c)
      violation("type %d: parent of another context", bit);
    else {
      if (!parent_ok(bit, p->bit)) violation("type %d under parent of type %d", bit, p->bit);
      if (bit == 3 && p->bit == 2) STATE.proxy_under_p2p++;
      p->open_children++;
      e->parent = p;
    }
  }
  look_at(d, e);
  STATE.starts[bit]++;
  STATE.open++;
  c->open++;
  *handle = e;
out:
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

static ncclResult_t p_stop(void *handle) {
  event_t *e = handle;
  pthread_mutex_lock(&mu);
  if (!live(e)) {
    violation("stopEvent of %p: not a live event", handle);
  } else {
    if (e->open_children != 0)
      violation("type %d stopped with %d children open", e->bit, e->open_children);
#if PROF_VERSION >= 4
    if (e->bit == 6 && !e->kch_stop_state) violation("KernelCh stopped without KernelChStop");
#endif
    e->stopped = 1;
    if (e->parent != NULL) e->parent->open_children--;
    STATE.stops[e->bit]++;
    STATE.open--;
    e->ctx->open--;
  }
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

static ncclResult_t p_state(void *handle, ncclProfilerEventState_t st, STATE_ARGS *args) {
  event_t *e = handle;
  (void)args;
  pthread_mutex_lock(&mu);
  if (!live(e)) {
    violation("recordEventState of %p: not a live event", handle);
  } else {
    STATE.states[e->bit]++;
    if (st == ncclProfilerKernelChStop) e->kch_stop_state = 1;
  }
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

static ncclResult_t p_finalize(void *context) {
  ctx_t *c = context;
  pthread_mutex_lock(&mu);
  if (c == NULL || c->magic != CTX_MAGIC) {
    violation("finalize with a context init did not make");
    pthread_mutex_unlock(&mu);
    return ncclInternalError;
  }
  if (c->open != 0) violation("finalize with %ld events of rank %d open", c->open, c->rank);
  STATE.finalizes++;
  if (getenv("PROFTEST_REPORT") != NULL)
    fprintf(stderr, "proftest v%d: rank %d finalize: %ld violations%s%s\n", PROF_VERSION,
            c->rank, STATE.violations, STATE.violations ? ", first: " : "",
            STATE.first_violation);
  for (event_t *e = c->events, *n; e != NULL; e = n) {
    n = e->next;
    e->magic = 0;
    free(e);
  }
  c->magic = 0;
  free(c);
  pthread_mutex_unlock(&mu);
  return ncclSuccess;
}

EXPORT const CAT(CAT(ncclProfiler_v, PROF_VERSION), _t) SYM = {
    .name = "proftest",
    .init = p_init,
    .startEvent = p_start,
    .stopEvent = p_stop,
    .recordEventState = p_state,
    .finalize = p_finalize,
};
