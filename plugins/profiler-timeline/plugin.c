/*
 * libnccl-profiler-timeline.so: a profiler plugin (ncclProfiler_v6 and v5)
 * that writes each communicator's events as a Chrome trace (the JSON that
 * Perfetto and chrome://tracing open), one file per rank and communicator:
 *
 *   <prefix>-<commId as 16 hex digits>-r<rank>.json
 *
 * Tracks (one "process" per rank, named "rank R"): "calls" holds the
 * groups, collectives (name = function; args: seq, count, bytes, datatype,
 * algo, proto, nChannels, root) and sends/receives (args: peer, count,
 * bytes); "channel C" the kernel channels of each call; "proxy peer P" the
 * net proxy's messages. Times are CLOCK_MONOTONIC microseconds, the same
 * clock in every process of a host, so files of one host merge as they
 * are (tools/timeline merges them).
 *
 * Environment:
 *   NCCL_PROFILE_EVENT_MASK   event types to record (default 0x4e: Coll,
 *                             P2p, ProxyOp, KernelCh; 0x4f adds groups)
 *   NCCL_PROFILE_DUMP_FILE    the prefix (default "braid-timeline")
 *   BRAID_TIMELINE_MAX_EVENTS events kept per communicator (default
 *                             1000000); later ones are counted, not kept
 *
 * Built against the public headers only; every call is thread-safe (the
 * proxy thread and the launching thread start events concurrently).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "nccl_profiler.h"

#define EXPORT __attribute__((visibility("default")))
#define BLOCK 4096
/* Groups are left out by default: one more pair of clock reads per
 * launch, and a launch of one call is the call. */
#define DEFAULT_MASK (ncclProfileColl | ncclProfileP2p | ncclProfileProxyOp | ncclProfileKernelCh)

#define MAX_NAMES 64

/* The descriptor fields that carry names (ctx_t.hint). */
enum { F_FUNC, F_DTYPE, F_ALGO, F_PROTO, F_P2P_FUNC, F_P2P_DTYPE, NAME_FIELDS };

/* One event: 64 bytes, names as indices into the context's name table. */
typedef struct rec {
  uint64_t t0, t1;            /* ns; t1 0 while open */
  uint64_t seq;
  uint64_t count;
  struct rec *parent;         /* KernelCh: its Coll/P2p record */
  int32_t peer;               /* root, peer, or the proxy's peer; -1 */
  int32_t chunk;              /* ProxyOp bytes */
  uint16_t type;              /* ncclProfile* (bits 0..15) */
  uint8_t func, dtype, algo, proto; /* name indices */
  uint8_t chan, nch, is_send;
} rec_t;
_Static_assert(sizeof(rec_t) == 64, "a record is one cache line");

typedef struct block {
  rec_t r[BLOCK];
  int used;                   /* slots claimed (may pass BLOCK) */
  struct block *next;
} block_t;

/* Aligned so that two ranks' contexts (threads of one process) never
 * share a cache line: each is written on every event. */
typedef struct ctx {
  _Alignas(128) block_t *tail; /* the block being filled (atomic) */
  pthread_mutex_t mu;         /* new blocks, new names */
  block_t *head;              /* owned, oldest first */
  long nblocks, max_blocks, dropped;
  const char *name_ptr[MAX_NAMES]; /* as the core passed them (atomic count) */
  char names[MAX_NAMES][24];  /* copies */
  int nnames;
  int hint[NAME_FIELDS];      /* each field's last index (atomic): calls repeat */
  int rank, nranks;
  uint64_t comm_id;
  char name[64];
  ncclDebugLogger_t log;
} ctx_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A communicator name as a JSON string body: quotes, backslashes and
 * control characters become '_'. */
static void copy_json(char *dst, size_t n, const char *src) {
  size_t i = 0;
  for (; src != NULL && src[i] != '\0' && i + 1 < n; i++)
    dst[i] = (src[i] == '"' || src[i] == '\\' || (unsigned char)src[i] < 0x20) ? '_' : src[i];
  dst[i] = '\0';
}

/* name_index's search past the field's hint: the table without a lock,
 * then (a pointer not seen yet) the lock and a comparison by text. */
static __attribute__((noinline)) uint8_t name_search(ctx_t *c, const char *s, int field) {
  int n = __atomic_load_n(&c->nnames, __ATOMIC_ACQUIRE);
  for (int i = 1; i < n; i++)
    if (c->name_ptr[i] == s) {
      __atomic_store_n(&c->hint[field], i, __ATOMIC_RELEASE);
      return (uint8_t)i;
    }
  pthread_mutex_lock(&c->mu);
  int found = 0;
  n = c->nnames;
  for (int i = 1; i < n && !found; i++)
    if (strncmp(c->names[i], s, sizeof(c->names[i]) - 1) == 0) found = i;
  if (!found && n < MAX_NAMES) {
    copy_json(c->names[n], sizeof(c->names[n]), s);
    c->name_ptr[n] = s;
    found = n;
    __atomic_store_n(&c->nnames, n + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&c->mu);
  if (found > 0) __atomic_store_n(&c->hint[field], found, __ATOMIC_RELEASE);
  return (uint8_t)found;
}

/* The index of a name in c's table, for descriptor field `field`. Names
 * come from static tables in practice, and a field's name rarely changes
 * from one event to the next: the index this field had last time is
 * tried first, without a lock. 0 is "" (also when the table is full). */
static inline uint8_t name_index(ctx_t *c, const char *s, int field) {
  if (s == NULL) return 0;
  int h = __atomic_load_n(&c->hint[field], __ATOMIC_ACQUIRE);
  if (h > 0 && c->name_ptr[h] == s) return (uint8_t)h;
  return name_search(c, s, field);
}

static size_t dtype_bytes(const char *t) {
  static const struct { const char *name; size_t size; } sizes[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},   {"ncclInt32", 4},      {"ncclUint32", 4},
      {"ncclInt64", 8},   {"ncclUint64", 8},  {"ncclFloat16", 2},    {"ncclFloat32", 4},
      {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (strcmp(t, sizes[i].name) == 0) return sizes[i].size;
  return 0;
}

static ncclResult_t tl_init(void **context, uint64_t comm_id, int *mask, const char *name,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t log) {
  (void)nnodes;
  ctx_t *c = aligned_alloc(128, (sizeof(*c) + 127) / 128 * 128);
  if (c == NULL) return ncclSystemError;
  memset(c, 0, sizeof(*c));
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    return ncclSystemError;
  }
  c->rank = rank;
  c->nranks = nranks;
  c->comm_id = comm_id;
  c->log = log;
  c->nnames = 1; /* 0: "" */
  copy_json(c->name, sizeof(c->name), name);
  const char *m = getenv("NCCL_PROFILE_EVENT_MASK");
  const char *max = getenv("BRAID_TIMELINE_MAX_EVENTS");
  long max_events = max != NULL ? atol(max) : 1000000;
  c->max_blocks = max_events <= 0 ? 0 : (max_events + BLOCK - 1) / BLOCK;
  *mask = m != NULL ? (int)strtol(m, NULL, 0) : DEFAULT_MASK;
  *context = c;
  return ncclSuccess;
}

/* A new record (zero), or NULL past the cap. Any thread: a slot is
 * claimed with one atomic add; only a full block takes the lock. */
static rec_t *rec_new(ctx_t *c) {
  for (;;) {
    block_t *b = __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE);
    if (b != NULL) {
      int i = __atomic_fetch_add(&b->used, 1, __ATOMIC_RELAXED);
      if (i < BLOCK) return &b->r[i];
    }
    pthread_mutex_lock(&c->mu);
    if (__atomic_load_n(&c->tail, __ATOMIC_RELAXED) == b) {
      block_t *nb = MAP_FAILED;
      if (c->nblocks < c->max_blocks)
        /* Mapped with its pages present: a fault per page while the
         * collectives run would cost more than the records. */
        nb = mmap(NULL, sizeof(*nb), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (nb == MAP_FAILED) {
        c->dropped++;
        pthread_mutex_unlock(&c->mu);
        return NULL;
      }
      if (b != NULL) b->next = nb;
      else c->head = nb;
      c->nblocks++;
      __atomic_store_n(&c->tail, nb, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->mu);
  }
}

static ncclResult_t tl_start(void *context, void **handle, ncclProfilerEventDescr_v5_t *d) {
  ctx_t *c = context;
  *handle = NULL;
  rec_t *r = rec_new(c);
  if (r == NULL) return ncclSuccess;
  r->type = (uint16_t)d->type;
  r->peer = -1;
  switch (d->type) {
  case ncclProfileColl:
    r->seq = d->coll.seqNumber;
    r->count = d->coll.count;
    r->peer = d->coll.root;
    r->nch = d->coll.nChannels;
    r->func = name_index(c, d->coll.func, F_FUNC);
    r->dtype = name_index(c, d->coll.datatype, F_DTYPE);
    r->algo = name_index(c, d->coll.algo, F_ALGO);
    r->proto = name_index(c, d->coll.proto, F_PROTO);
    break;
  case ncclProfileP2p:
    r->count = d->p2p.count;
    r->peer = d->p2p.peer;
    r->nch = d->p2p.nChannels;
    r->func = name_index(c, d->p2p.func, F_P2P_FUNC);
    r->dtype = name_index(c, d->p2p.datatype, F_P2P_DTYPE);
    break;
  case ncclProfileKernelCh:
    /* Braid's pTimer is CLOCK_MONOTONIC ns (host mode): this clock. */
    r->t0 = d->kernelCh.pTimer;
    r->chan = d->kernelCh.channelId;
    r->parent = d->parentObj;
    break;
  case ncclProfileProxyOp:
    r->peer = d->proxyOp.peer;
    r->chan = d->proxyOp.channelId;
    r->is_send = (uint8_t)d->proxyOp.isSend;
    r->chunk = d->proxyOp.chunkSize;
    break;
  default:
    break;
  }
  if (r->t0 == 0) r->t0 = now_ns();
  *handle = r;
  return ncclSuccess;
}

static ncclResult_t tl_stop(void *handle) {
  rec_t *r = handle;
  if (r != NULL && __atomic_load_n(&r->t1, __ATOMIC_ACQUIRE) == 0)
    __atomic_store_n(&r->t1, now_ns(), __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* A kernel channel's stop time comes with KernelChStop (pTimer, as at
 * its start); stopEvent then keeps it. */
static ncclResult_t tl_state(void *handle, ncclProfilerEventState_t st,
                             ncclProfilerEventStateArgs_v5_t *args) {
  rec_t *r = handle;
  if (r != NULL && st == ncclProfilerKernelChStop && args != NULL && args->kernelCh.pTimer != 0)
    __atomic_store_n(&r->t1, args->kernelCh.pTimer, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* One complete ("X") event. */
static void put_event(FILE *f, int *first, const char *name, const char *cat, int pid, int tid,
                      uint64_t t0, uint64_t t1, const char *args) {
  fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}", *first ? "" : ",", name, cat, pid, tid,
          (double)t0 / 1e3, (double)(t1 > t0 ? t1 - t0 : 0) / 1e3, args);
  *first = 0;
}

static void put_track(FILE *f, int *first, int pid, int tid, const char *name) {
  fprintf(f, "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":\"%s\"}}", *first ? "" : ",", pid, tid, name);
  fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"sort_index\":%d}}", pid, tid, tid);
  *first = 0;
}

#define TID_CALLS 0
#define TID_CHAN(c) (1 + (c))
#define TID_PROXY(p) (1000 + (p))

static int write_trace(ctx_t *c, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  int first = 1, pid = c->rank;
  char args[512], name[64];
  uint8_t seen_chan[256] = {0};
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"commId\":\"%016" PRIx64 "\","
          "\"commName\":\"%s\",\"rank\":%d,\"nranks\":%d,\"dropped\":%ld},\"traceEvents\":[",
          c->comm_id, c->name, c->rank, c->nranks, c->dropped);
  const char(*nm)[24] = c->names;
  fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
          "\"rank %d\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
          "\"args\":{\"sort_index\":%d}}", pid, c->rank, pid, c->rank);
  first = 0;
  put_track(f, &first, pid, TID_CALLS, "calls");
  int *seen_peer = calloc((size_t)(c->nranks > 0 ? c->nranks : 1), sizeof(int));
  for (block_t *b = c->head; b != NULL; b = b->next) {
    int n = b->used < BLOCK ? b->used : BLOCK;
    for (int i = 0; i < n; i++) {
      const rec_t *r = &b->r[i];
      uint64_t t1 = __atomic_load_n(&r->t1, __ATOMIC_ACQUIRE);
      switch (r->type) {
      case ncclProfileGroup:
        put_event(f, &first, "Group", "group", pid, TID_CALLS, r->t0, t1, "");
        break;
      case ncclProfileColl:
        snprintf(args, sizeof(args), "\"seq\":%" PRIu64 ",\"count\":%" PRIu64 ",\"bytes\":%"
                 PRIu64 ",\"datatype\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\","
                 "\"nChannels\":%d,\"root\":%d", r->seq, r->count,
                 r->count * dtype_bytes(nm[r->dtype]), nm[r->dtype], nm[r->algo], nm[r->proto],
                 r->nch, r->peer);
        put_event(f, &first, nm[r->func], "coll", pid, TID_CALLS, r->t0, t1, args);
        break;
      case ncclProfileP2p:
        snprintf(args, sizeof(args), "\"peer\":%d,\"count\":%" PRIu64 ",\"bytes\":%" PRIu64
                 ",\"datatype\":\"%s\",\"nChannels\":%d", r->peer, r->count,
                 r->count * dtype_bytes(nm[r->dtype]), nm[r->dtype], r->nch);
        snprintf(name, sizeof(name), "%s %s %d", nm[r->func],
                 strcmp(nm[r->func], "Send") == 0 ? "to" : "from", r->peer);
        put_event(f, &first, name, "p2p", pid, TID_CALLS, r->t0, t1, args);
        break;
      case ncclProfileKernelCh: {
        const rec_t *p = r->parent;
        if (!seen_chan[r->chan]) {
          seen_chan[r->chan] = 1;
          snprintf(name, sizeof(name), "channel %d", r->chan);
          put_track(f, &first, pid, TID_CHAN(r->chan), name);
        }
        if (p != NULL && p->type == ncclProfileColl)
          snprintf(args, sizeof(args), "\"seq\":%" PRIu64 ",\"algo\":\"%s\",\"proto\":\"%s\"",
                   p->seq, nm[p->algo], nm[p->proto]);
        else
          args[0] = '\0';
        put_event(f, &first, p != NULL ? nm[p->func] : "kernel", "channel", pid, TID_CHAN(r->chan),
                  r->t0, t1, args);
        break;
      }
      case ncclProfileProxyOp:
        if (seen_peer != NULL && r->peer >= 0 && r->peer < c->nranks && !seen_peer[r->peer]) {
          seen_peer[r->peer] = 1;
          snprintf(name, sizeof(name), "proxy peer %d", r->peer);
          put_track(f, &first, pid, TID_PROXY(r->peer), name);
        }
        snprintf(args, sizeof(args), "\"peer\":%d,\"bytes\":%d", r->peer, r->chunk);
        put_event(f, &first, r->is_send ? "net send" : "net recv", "proxy", pid,
                  TID_PROXY(r->peer), r->t0, t1, args);
        break;
      default:
        break;
      }
    }
  }
  free(seen_peer);
  fprintf(f, "\n]}\n");
  return fclose(f) == 0 ? 0 : -1;
}

static ncclResult_t tl_finalize(void *context) {
  ctx_t *c = context;
  const char *prefix = getenv("NCCL_PROFILE_DUMP_FILE");
  char path[4096];
  snprintf(path, sizeof(path), "%s-%016" PRIx64 "-r%d.json",
           prefix != NULL && prefix[0] ? prefix : "braid-timeline", c->comm_id, c->rank);
  ncclResult_t res = ncclSuccess;
  if (write_trace(c, path) != 0) {
    if (c->log != NULL)
      c->log(NCCL_LOG_WARN, NCCL_PROFILE, __FILE__, __LINE__,
             "timeline profiler: cannot write %s; set NCCL_PROFILE_DUMP_FILE to a writable "
             "prefix", path);
    res = ncclSystemError;
  } else if (c->log != NULL) {
    c->log(NCCL_LOG_INFO, NCCL_PROFILE, __FILE__, __LINE__,
           "timeline profiler: rank %d wrote %s (%ld events dropped)", c->rank, path,
           c->dropped);
  }
  for (block_t *b = c->head, *n; b != NULL; b = n) {
    n = b->next;
    munmap(b, sizeof(*b));
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
  return res;
}

/* v6 descriptors begin with v5's members at the same offsets. */
static ncclResult_t tl_start_v6(void *context, void **handle, ncclProfilerEventDescr_v6_t *d) {
  return tl_start(context, handle, (ncclProfilerEventDescr_v5_t *)(void *)d);
}

EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "timeline",
    .init = tl_init,
    .startEvent = tl_start_v6,
    .stopEvent = tl_stop,
    .recordEventState = tl_state,
    .finalize = tl_finalize,
};

EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "timeline",
    .init = tl_init,
    .startEvent = tl_start,
    .stopEvent = tl_stop,
    .recordEventState = tl_state,
    .finalize = tl_finalize,
};
