/*
 * Braid CUDA simulator, the runtime: the CUDA runtime functions the library
 * and its tests call, on CPU threads and host memory (see README.md).
 *
 * Model:
 *   devices  BRAID_CUDASIM_DEVICES of them (default 1), BRAID_CUDASIM_SMS
 *            SMs each (default 132), compute capability BRAID_CUDASIM_CC
 *            (major x 10 + minor, read at each call; default 90), bus id
 *            0000:<device + 1>:00.0, peer access between any two.
 *   memory   host memory. cudaMalloc maps a memfd (MAP_SHARED) so that a
 *            CUDA IPC handle (magic, pid, fd, offset, size, serial) can be
 *            opened by another process through /proc/<pid>/fd/<fd>. Every
 *            allocation, registration and IPC mapping is in one table
 *            (cudaPointerGetAttributes, frees, kernels' pointer checks).
 *   streams  FIFO queues, one worker thread each, running ops in order.
 *            The legacy default stream and cudaStreamPerThread are queues
 *            too; the legacy stream waits for, and is waited for by, every
 *            blocking stream of its device, as in CUDA.
 *   events   the completion mark of the last record op; waits take the mark
 *            current at the call.
 *   capture  ops on a capturing stream are recorded (kernels with a copy of
 *            their arguments), not run. A graph keeps each stream of the
 *            capture as a lane; a launch runs lane 0 on the launch stream
 *            and the others on streams of the executable graph, with the
 *            captured event records and waits between them.
 *
 * One lock (S.lock) guards every table, queue and mark; S.done is
 * broadcast whenever an op completes. Host-side waits give up after
 * BRAID_CUDASIM_TIMEOUT seconds (default 600) with an error, never hang.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "cudasim.h"

#define STREAM_MAGIC 0x5354524du /* "STRM" */
#define EVENT_MAGIC 0x45564e54u  /* "EVNT" */
#define GRAPH_MAGIC 0x47525048u  /* "GRPH" */
#define EXEC_MAGIC 0x47455843u   /* "GEXC" */
#define IPC_MAGIC 0x4252445349504331ull /* "BRDSIPC1" */
#define MAX_DEVICES 16
#define MAX_CONNECTIONS 32
#define TOTAL_MEM ((size_t)80 << 30) /* what cudaMemGetInfo reports */

/* ---- state ---------------------------------------------------------------- */

/* Completion of one op; referenced by its stream, events and waits. */
typedef struct mark {
  int started; /* its op left the head of its hardware queue (connections) */
  int done;
  int refs;
  struct timespec when; /* completion time (event timing) */
} mark_t;

enum { OP_FN, OP_WAIT, OP_NOP };

typedef struct op {
  struct op *next;
  int kind;
  void (*fn)(void *);
  void *arg;      /* owned (malloc) */
  mark_t *wait;   /* OP_WAIT: the mark waited for (ref) */
  mark_t *done;   /* completed when the op has run (ref) */
  mark_t *conn_prev; /* the op before it in its hardware queue (ref), or NULL */
} op_t;

/* A captured op. */
enum { N_FN, N_RECORD, N_WAIT };
typedef struct node {
  int kind;
  int lane;
  int ev;            /* N_RECORD / N_WAIT: the capture's record number */
  void (*fn)(void *);
  void *arg;         /* owned */
  size_t bytes;
} node_t;

typedef struct capture {
  struct capture *next;
  unsigned long long id;
  enum cudaStreamCaptureMode mode;
  pthread_t thread;
  int invalid;
  cudaError_t why;            /* the error that invalidated it */
  struct CUstream_st *origin;
  node_t *nodes;
  int nnodes, cap_nodes;
  int nlanes;                 /* lane 0 is the origin */
  int *lane_last;             /* [nlanes]: index of the lane's last node, -1 */
  int nevents, ev_cap;        /* record numbers handed out; capacity */
  int *ev_node;               /* [nevents]: node index of the record */
  int *ev_waited;             /* [nevents]: waited for by another lane */
} capture_t;

struct CUstream_st {
  uint32_t magic;
  unsigned gen;               /* fork generation it belongs to */
  int device;
  unsigned flags;
  int legacy;                 /* the legacy default stream */
  int internal;               /* a graph's lane stream */
  int destroyed;
  op_t *head, *tail;
  mark_t *last;               /* mark of the last op enqueued (ref), or NULL */
  pthread_cond_t wake;
  capture_t *cap;             /* capture it belongs to, or NULL */
  int lane;
  int conn;                   /* hardware queue (connections), -1: none */
  struct CUstream_st *next_all;
};

struct CUevent_st {
  uint32_t magic;
  unsigned flags;
  int device;
  mark_t *mark;               /* last record outside capture (ref), or NULL */
  unsigned long long cap_id;  /* last record was in this capture; 0: not */
  int cap_ev;                 /* its record number there */
};

struct CUgraph_st {
  uint32_t magic;
  node_t *nodes;
  int nnodes, nlanes, nevents;
};

struct CUgraphExec_st {
  uint32_t magic;
  node_t *nodes;              /* deep copy */
  int nnodes, nlanes, nevents;
  struct CUstream_st **lanes; /* [nlanes]; [0] unused */
};

enum { MEM_DEVICE, MEM_MANAGED, MEM_HOST, MEM_REGISTERED, MEM_IPC, MEM_VMM };
/* MEM_VMM: a cuMemMap of a cuMemCreate allocation (its fd not owned here). */

typedef struct alloc {
  struct alloc *next;
  char *base;
  size_t size;
  size_t map_size;            /* what was mapped (>= 1 page) */
  int kind;
  int device;
  int fd;                     /* memfd, -1 if none */
  unsigned long long serial;  /* names the memfd, checked by importers */
} alloc_t;

/* What a CUDA IPC handle carries. */
typedef struct ipc_handle {
  uint64_t magic;
  int64_t pid;
  int64_t fd;
  uint64_t offset;
  uint64_t size;
  uint64_t serial;
  uint64_t pad[2];
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) == sizeof(cudaIpcMemHandle_t),
               "the simulator's IPC handle fills cudaIpcMemHandle_t");

/* A kernel loaded into a device's context (lazy loading, below). */
struct loaded {
  const void *key;
  int device;
  struct loaded *next;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int init;
  unsigned gen;
  int ndev, nsms;
  double timeout_s;
  int poison;
  int free_sync;                           /* cudaFree waits for the device */
  int lazy;                                /* kernels load at first use */
  struct loaded *loaded;                   /* kernels loaded, per device */
  int hold[MAX_DEVICES];                   /* a load or a pageable copy from
                                              the device holds the context */
  int pageable;                            /* model pageable copies */
  int mps;                                 /* cudaDevAttrMpsEnabled (BRAID_CUDASIM_MPS) */
  int nconn;                               /* hardware queues per device, 0: off */
  unsigned conn_next[MAX_DEVICES];         /* the next stream's queue, round robin */
  mark_t *conn_last[MAX_DEVICES][MAX_CONNECTIONS]; /* last op queued on each (ref) */
  struct CUstream_st *streams;             /* every live stream */
  struct CUstream_st *legacy[MAX_DEVICES]; /* created on first use */
  capture_t *captures;                     /* active captures */
  unsigned long long next_capture_id;
  alloc_t *allocs;
  unsigned long long next_serial;
  size_t used[MAX_DEVICES];
  uint32_t peer_enabled[MAX_DEVICES];      /* bit p: current -> p */
  cudaError_t sticky;                      /* a kernel faulted */
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local cudaError_t tl_error;
static _Thread_local int tl_device;
static _Thread_local enum cudaStreamCaptureMode tl_mode = cudaStreamCaptureModeGlobal;
static _Thread_local struct CUstream_st *tl_ptds; /* cudaStreamPerThread */
static _Thread_local unsigned tl_ptds_gen;

/* ---- helpers ---------------------------------------------------------------- */

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) tl_error = e;
  return e;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static void fork_child(void);
static void fork_prepare(void) { pthread_mutex_lock(&S.lock); }
static void fork_parent(void) { pthread_mutex_unlock(&S.lock); }

/* Reads the configuration once. Caller holds S.lock. */
static void init_locked(void) {
  if (S.init) return;
  S.init = 1;
  S.ndev = env_int("BRAID_CUDASIM_DEVICES", 1);
  if (S.ndev < 0) S.ndev = 0;
  if (S.ndev > MAX_DEVICES) S.ndev = MAX_DEVICES;
  S.nsms = env_int("BRAID_CUDASIM_SMS", 132);
  if (S.nsms < 1) S.nsms = 1;
  const char *t = getenv("BRAID_CUDASIM_TIMEOUT");
  S.timeout_s = t != NULL && atof(t) > 0 ? atof(t) : 600.0;
  S.poison = env_int("BRAID_CUDASIM_POISON", 1);
  S.free_sync = env_int("BRAID_CUDASIM_FREE_SYNC", 1);
  const char *ml = getenv("CUDA_MODULE_LOADING");
  S.lazy = env_int("BRAID_CUDASIM_LAZY_LOADING", 1) &&
           !(ml != NULL && strcmp(ml, "EAGER") == 0);
  S.pageable = env_int("BRAID_CUDASIM_PAGEABLE", 1);
  S.mps = env_int("BRAID_CUDASIM_MPS", 0);
  S.nconn = env_int("BRAID_CUDASIM_CONNECTIONS", 0);
  if (S.nconn < 0) S.nconn = 0;
  if (S.nconn > MAX_CONNECTIONS) S.nconn = MAX_CONNECTIONS;
  /* One memfd per allocation: allow as many as the hard limit. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void lock(void) {
  pthread_mutex_lock(&S.lock);
  init_locked();
}
static void unlock(void) { pthread_mutex_unlock(&S.lock); }

static struct timespec deadline_in(double s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  time_t whole = (time_t)s;
  ts.tv_sec += whole;
  ts.tv_nsec += (long)((s - (double)whole) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static mark_t *mark_new(void) {
  mark_t *m = calloc(1, sizeof(*m));
  if (m != NULL) m->refs = 1;
  return m;
}
static mark_t *mark_ref(mark_t *m) {
  if (m != NULL) m->refs++;
  return m;
}
static void mark_unref(mark_t *m) {
  if (m != NULL && --m->refs == 0) free(m);
}

/* Waits (S.lock held) until m is done or the deadline; cudaErrorLaunchTimeout
 * with a message on stderr if it never is. */
static cudaError_t mark_wait_locked(mark_t *m, const char *what) {
  if (m == NULL || m->done) return cudaSuccess;
  struct timespec dl = deadline_in(S.timeout_s);
  while (!m->done) {
    if (pthread_cond_timedwait(&S.done, &S.lock, &dl) == ETIMEDOUT && !m->done) {
      fprintf(stderr, "cudasim: %s still waiting after %.0f s "
              "(BRAID_CUDASIM_TIMEOUT): the work it waits for never "
              "finished; giving up with cudaErrorLaunchTimeout\n", what, S.timeout_s);
      return cudaErrorLaunchTimeout;
    }
  }
  return cudaSuccess;
}

/* ---- streams ---------------------------------------------------------------- */

static void *worker_main(void *arg);

/* Caller holds S.lock. */
static struct CUstream_st *stream_new_locked(int device, unsigned flags, int legacy) {
  struct CUstream_st *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->magic = STREAM_MAGIC;
  s->gen = S.gen;
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
  s->conn = S.nconn > 0 ? (int)(S.conn_next[device]++ % (unsigned)S.nconn) : -1;
  pthread_cond_init(&s->wake, NULL);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&th, &at, worker_main, s);
  pthread_attr_destroy(&at);
  if (err != 0) {
    pthread_cond_destroy(&s->wake);
    free(s);
    return NULL;
  }
  s->next_all = S.streams;
  S.streams = s;
  return s;
}

static void ptds_release(void *p);
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;
static void ptds_key_make(void) { pthread_key_create(&ptds_key, ptds_release); }

/* The stream a handle names (S.lock held), or NULL with *err set. */
static struct CUstream_st *resolve(cudaStream_t h, cudaError_t *err) {
  *err = cudaSuccess;
  if (h == NULL || h == cudaStreamLegacy) {
    int d = tl_device;
    if (d >= S.ndev) {
      *err = cudaErrorNoDevice;
      return NULL;
    }
    if (S.legacy[d] == NULL) S.legacy[d] = stream_new_locked(d, 0, 1);
    if (S.legacy[d] == NULL) *err = cudaErrorMemoryAllocation;
    return S.legacy[d];
  }
  if (h == cudaStreamPerThread) {
    if (tl_ptds == NULL || tl_ptds_gen != S.gen) {
      if (S.ndev == 0) {
        *err = cudaErrorNoDevice;
        return NULL;
      }
      tl_ptds = stream_new_locked(tl_device, 0, 0);
      tl_ptds_gen = S.gen;
      if (tl_ptds == NULL) {
        *err = cudaErrorMemoryAllocation;
        return NULL;
      }
      pthread_once(&ptds_once, ptds_key_make);
      pthread_setspecific(ptds_key, tl_ptds);
    }
    return tl_ptds;
  }
  struct CUstream_st *s = h;
  if (s->magic != STREAM_MAGIC || s->gen != S.gen || s->destroyed) {
    *err = cudaErrorInvalidResourceHandle;
    return NULL;
  }
  return s;
}

static int blocking(const struct CUstream_st *s) {
  return !s->legacy && !s->internal && !(s->flags & cudaStreamNonBlocking);
}

/* Appends op to s (S.lock held); takes over op. */
static void queue_locked(struct CUstream_st *s, op_t *op) {
  if (s->tail != NULL) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  if (s->conn >= 0) {
    /* The queue's last op passes its reference to this one. */
    op->conn_prev = S.conn_last[s->device][s->conn];
    S.conn_last[s->device][s->conn] = mark_ref(op->done);
  }
  mark_unref(s->last);
  s->last = mark_ref(op->done);
  pthread_cond_signal(&s->wake);
}

static op_t *op_new(int kind, void (*fn)(void *), void *arg, mark_t *wait) {
  op_t *op = calloc(1, sizeof(*op));
  if (op == NULL) return NULL;
  op->done = mark_new();
  if (op->done == NULL) {
    free(op);
    return NULL;
  }
  op->kind = kind;
  op->fn = fn;
  op->arg = arg;
  op->wait = mark_ref(wait);
  return op;
}

static cudaError_t wait_op_locked(struct CUstream_st *s, mark_t *m) {
  if (m == NULL || m->done) return cudaSuccess;
  op_t *w = op_new(OP_WAIT, NULL, NULL, m);
  if (w == NULL) return cudaErrorMemoryAllocation;
  queue_locked(s, w);
  return cudaSuccess;
}

/* Enqueues an op with the legacy stream's implicit ordering (S.lock
 * held). arg is taken over (freed) whatever happens. */
static cudaError_t enqueue_locked(struct CUstream_st *s, int kind, void (*fn)(void *),
                                  void *arg, mark_t **done_out) {
  cudaError_t e = cudaSuccess;
  if (s->legacy) {
    for (struct CUstream_st *o = S.streams; o != NULL && e == cudaSuccess; o = o->next_all)
      if (o != s && o->device == s->device && blocking(o)) e = wait_op_locked(s, o->last);
  } else if (blocking(s) && S.legacy[s->device] != NULL) {
    e = wait_op_locked(s, S.legacy[s->device]->last);
  }
  op_t *op = e == cudaSuccess ? op_new(kind, fn, arg, NULL) : NULL;
  if (op == NULL) {
    free(arg);
    return cudaErrorMemoryAllocation;
  }
  if (done_out != NULL) *done_out = mark_ref(op->done);
  queue_locked(s, op);
  return cudaSuccess;
}

static void *worker_main(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&S.lock);
  for (;;) {
    while (s->head == NULL && !s->destroyed) pthread_cond_wait(&s->wake, &S.lock);
    if (s->head == NULL) break;
    op_t *op = s->head;
    /* Its hardware queue holds it until every op queued there before it
     * has started (BRAID_CUDASIM_CONNECTIONS). */
    while (op->conn_prev != NULL && !op->conn_prev->started)
      pthread_cond_wait(&S.done, &S.lock);
    if (op->kind == OP_WAIT) {
      while (!op->wait->done) pthread_cond_wait(&S.done, &S.lock);
    }
    op->done->started = 1;
    if (op->done->refs > 1) pthread_cond_broadcast(&S.done);
    if (op->kind == OP_FN) {
      pthread_mutex_unlock(&S.lock);
      op->fn(op->arg);
      pthread_mutex_lock(&S.lock);
    }
    clock_gettime(CLOCK_MONOTONIC, &op->done->when);
    op->done->done = 1;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_cond_broadcast(&S.done);
    mark_unref(op->wait);
    mark_unref(op->conn_prev);
    mark_unref(op->done);
    free(op->arg);
    free(op);
  }
  /* Destroyed and drained. */
  struct CUstream_st **pp = &S.streams;
  while (*pp != NULL && *pp != s) pp = &(*pp)->next_all;
  if (*pp == s) *pp = s->next_all;
  mark_unref(s->last);
  s->magic = 0;
  pthread_mutex_unlock(&S.lock);
  pthread_cond_destroy(&s->wake);
  free(s);
  return NULL;
}

/* Marks s destroyed (S.lock held): its worker finishes the queue, then
 * frees it. */
static void stream_destroy_locked(struct CUstream_st *s) {
  s->destroyed = 1;
  pthread_cond_signal(&s->wake);
}

static void ptds_release(void *p) {
  pthread_mutex_lock(&S.lock);
  struct CUstream_st *s = p;
  if (s->magic == STREAM_MAGIC && s->gen == S.gen) stream_destroy_locked(s);
  pthread_mutex_unlock(&S.lock);
}

/* After fork only the calling thread exists: forget every stream and
 * capture (as CUDA, nothing runs on in the child); allocations and their
 * mappings stay. */
static void fork_child(void) {
  pthread_mutex_init(&S.lock, NULL);
  pthread_cond_init(&S.done, NULL);
  S.gen++;
  S.streams = NULL;
  memset(S.legacy, 0, sizeof(S.legacy));
  /* The parent's queued ops never run here (their marks are leaked). */
  memset(S.conn_last, 0, sizeof(S.conn_last));
  memset(S.conn_next, 0, sizeof(S.conn_next));
  S.captures = NULL;
}

/* ---- capture ---------------------------------------------------------------- */

static capture_t *capture_find(unsigned long long id) {
  for (capture_t *c = S.captures; c != NULL; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static void capture_invalidate(capture_t *c, cudaError_t why) {
  if (!c->invalid) {
    c->invalid = 1;
    c->why = why;
  }
}

/* Whether this thread may make a call CUDA calls potentially unsafe during
 * capture (S.lock held); if not, invalidates the captures it would disturb
 * and returns cudaErrorStreamCaptureUnsupported. */
static cudaError_t capture_guard(void) {
  if (tl_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  pthread_t self = pthread_self();
  for (capture_t *c = S.captures; c != NULL; c = c->next) {
    int mine = pthread_equal(c->thread, self);
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (!mine && tl_mode == cudaStreamCaptureModeGlobal &&
         c->mode == cudaStreamCaptureModeGlobal)) {
      capture_invalidate(c, cudaErrorStreamCaptureUnsupported);
      e = cudaErrorStreamCaptureUnsupported;
    }
  }
  return e;
}

/* The legacy stream cannot be used while a blocking stream of its device
 * captures (S.lock held). */
static cudaError_t legacy_guard(const struct CUstream_st *s, int invalidate) {
  if (!s->legacy) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  for (struct CUstream_st *o = S.streams; o != NULL; o = o->next_all) {
    if (o->cap != NULL && o->device == s->device && blocking(o)) {
      if (invalidate) capture_invalidate(o->cap, cudaErrorStreamCaptureImplicit);
      e = cudaErrorStreamCaptureImplicit;
    }
  }
  return e;
}

static int grow(void **p, int *cap, int want, size_t elem) {
  if (want <= *cap) return 0;
  int n = *cap > 0 ? *cap * 2 : 16;
  while (n < want) n *= 2;
  void *q = realloc(*p, (size_t)n * elem);
  if (q == NULL) return -1;
  *p = q;
  *cap = n;
  return 0;
}

/* Records a node on s's lane (S.lock held); arg is taken over. */
static cudaError_t capture_add(struct CUstream_st *s, int kind, int ev, void (*fn)(void *),
                               void *arg, size_t bytes) {
  capture_t *c = s->cap;
  if (c->invalid) {
    free(arg);
    return cudaErrorStreamCaptureInvalidated;
  }
  if (grow((void **)&c->nodes, &c->cap_nodes, c->nnodes + 1, sizeof(node_t)) != 0) {
    free(arg);
    capture_invalidate(c, cudaErrorMemoryAllocation);
    return cudaErrorMemoryAllocation;
  }
  node_t *n = &c->nodes[c->nnodes];
  n->kind = kind;
  n->lane = s->lane;
  n->ev = ev;
  n->fn = fn;
  n->arg = arg;
  n->bytes = bytes;
  c->lane_last[s->lane] = c->nnodes++;
  return cudaSuccess;
}

static void capture_free(capture_t *c) {
  for (int i = 0; i < c->nnodes; i++) free(c->nodes[i].arg);
  free(c->nodes);
  free(c->lane_last);
  free(c->ev_node);
  free(c->ev_waited);
  free(c);
}

/* ---- ops and their arguments --------------------------------------------------- */

typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
} copy_arg_t;
static void run_copy(void *p) {
  copy_arg_t *a = p;
  memmove(a->dst, a->src, a->bytes);
}

typedef struct {
  void *dst;
  int value;
  size_t bytes;
} set_arg_t;
static void run_set(void *p) {
  set_arg_t *a = p;
  memset(a->dst, a->value, a->bytes);
}

typedef struct {
  char *dst;
  size_t dpitch;
  const char *src;
  size_t spitch, width, height;
} copy2d_arg_t;
static void run_copy2d(void *p) {
  copy2d_arg_t *a = p;
  for (size_t r = 0; r < a->height; r++)
    memmove(a->dst + r * a->dpitch, a->src + r * a->spitch, a->width);
}

typedef struct {
  cudaHostFn_t fn;
  void *user;
} host_arg_t;
static void run_host(void *p) {
  host_arg_t *a = p;
  a->fn(a->user);
}

/* Submits fn(copy of arg) on stream h: recorded if it captures, else
 * queued. With done_out, the op's completion mark (ref). */
static cudaError_t submit_locked(cudaStream_t h, void (*fn)(void *), const void *arg,
                                 size_t bytes, mark_t **done_out) {
  cudaError_t e;
  struct CUstream_st *s = resolve(h, &e);
  if (s == NULL) return e;
  if (S.sticky != cudaSuccess) return S.sticky;
  if ((e = legacy_guard(s, 1)) != cudaSuccess) return e;
  void *copy = malloc(bytes > 0 ? bytes : 1);
  if (copy == NULL) return cudaErrorMemoryAllocation;
  memcpy(copy, arg, bytes);
  if (s->cap != NULL) return capture_add(s, N_FN, -1, fn, copy, bytes);
  return enqueue_locked(s, OP_FN, fn, copy, done_out);
}

static cudaError_t submit(cudaStream_t h, void (*fn)(void *), const void *arg, size_t bytes) {
  lock();
  cudaError_t e = submit_locked(h, fn, arg, bytes, NULL);
  unlock();
  return ret(e);
}

/* A synchronous op on the legacy stream of the current device: submit,
 * wait. */
static cudaError_t submit_sync(void (*fn)(void *), const void *arg, size_t bytes,
                               const char *what) {
  lock();
  mark_t *m = NULL;
  cudaError_t e = capture_guard();
  if (e == cudaSuccess) e = submit_locked(NULL, fn, arg, bytes, &m);
  if (e == cudaSuccess) e = mark_wait_locked(m, what);
  mark_unref(m);
  if (e == cudaSuccess) e = S.sticky;
  unlock();
  return ret(e);
}

cudaError_t brd_cudasim_launch(cudaStream_t stream, void (*fn)(void *), const void *args,
                               size_t bytes) {
  return submit(stream, fn, args, bytes);
}

void brd_cudasim_fault(cudaError_t err, const char *why) {
  lock();
  if (S.sticky == cudaSuccess) {
    S.sticky = err;
    fprintf(stderr, "cudasim: device fault (%s): %s; every later synchronising "
            "call returns this error\n", cudaGetErrorName(err), why);
  }
  unlock();
}

/* ---- memory table ----------------------------------------------------------------- */

static alloc_t *alloc_find(const void *p) {
  for (alloc_t *a = S.allocs; a != NULL; a = a->next)
    if ((const char *)p >= a->base && (const char *)p < a->base + (a->size ? a->size : 1))
      return a;
  return NULL;
}


/* Maps size bytes of a fresh memfd (S.lock held). */
static cudaError_t alloc_new(size_t size, int kind, void **out) {
  if (out == NULL) return cudaErrorInvalidValue;
  if (size == 0) {
    *out = NULL;
    return cudaSuccess;
  }
  if (kind == MEM_DEVICE && S.ndev == 0) return cudaErrorNoDevice;
  alloc_t *a = calloc(1, sizeof(*a));
  if (a == NULL) return cudaErrorMemoryAllocation;
  a->serial = ((unsigned long long)getpid() << 32) ^ ++S.next_serial;
  char name[64];
  snprintf(name, sizeof(name), "braid-cudasim-%llx", a->serial);
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  a->map_size = (size + pg - 1) / pg * pg;
  a->fd = memfd_create(name, MFD_CLOEXEC);
  if (a->fd < 0 || ftruncate(a->fd, (off_t)a->map_size) != 0) goto fail;
  a->base = mmap(NULL, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
  if (a->base == MAP_FAILED) goto fail;
  a->size = size;
  a->kind = kind;
  a->device = kind == MEM_HOST ? -1 : tl_device;
  /* CUDA does not zero new memory: neither does the simulator. */
  if (S.poison && kind != MEM_MANAGED) memset(a->base, 0xd5, size);
  if (kind == MEM_DEVICE) S.used[a->device] += a->map_size;
  a->next = S.allocs;
  S.allocs = a;
  *out = a->base;
  return cudaSuccess;
fail:
  if (a->fd >= 0) close(a->fd);
  free(a);
  return cudaErrorMemoryAllocation;
}

/* Bumped whenever memory leaves the table, so kernels' cached ranges lapse. */
unsigned long brd_cudasim_mem_gen;

static void alloc_unlink(alloc_t *a) {
  alloc_t **pp = &S.allocs;
  while (*pp != a) pp = &(*pp)->next;
  *pp = a->next;
  __atomic_add_fetch(&brd_cudasim_mem_gen, 1, __ATOMIC_RELEASE);
}

int brd_cudasim_find(const void *p, size_t bytes, brd_cudasim_range_t *r) {
  const char *c = p;
  memset(r, 0, sizeof(*r));
  lock();
  r->gen = __atomic_load_n(&brd_cudasim_mem_gen, __ATOMIC_ACQUIRE);
  int found = 0;
  for (alloc_t *a = S.allocs; a != NULL && !found; a = a->next) {
    if (a->size == 0 || a->base > c) continue;
    if (c < a->base + a->size) found = c + bytes <= a->base + a->size;
    /* Otherwise keep the nearest allocation below p, for the message. */
    if (found || r->base == NULL || a->base > r->base) {
      r->base = a->base;
      r->size = a->size;
    }
  }
  unlock();
  return found;
}

int brd_cudasim_accessible(const void *p, size_t bytes) {
  brd_cudasim_range_t r;
  return brd_cudasim_find(p, bytes, &r);
}

/* Waits (S.lock held) for the work queued on every stream of device d (all
 * devices if d < 0). */
static cudaError_t device_idle_locked(int d, const char *what) {
  int n = 0;
  for (struct CUstream_st *s = S.streams; s != NULL; s = s->next_all) n++;
  mark_t **ms = calloc((size_t)n + 1, sizeof(*ms));
  if (ms == NULL) return cudaErrorMemoryAllocation;
  int k = 0;
  for (struct CUstream_st *s = S.streams; s != NULL; s = s->next_all)
    if (d < 0 || s->device == d) ms[k++] = mark_ref(s->last);
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < k; i++) {
    if (e == cudaSuccess) e = mark_wait_locked(ms[i], what);
    mark_unref(ms[i]);
  }
  free(ms);
  return e != cudaSuccess ? e : S.sticky;
}

/* Lazy loading, as CUDA's default (CUDA_MODULE_LOADING=LAZY since 12.2):
 * a kernel is loaded into the device's context at its first launch, or
 * earlier by cudaFuncGetAttributes. Loading waits for every kernel running
 * on the device, and meanwhile holds the context: every other launch and
 * load on that device, from any thread, waits for it to end. Seen on an
 * H200: two ranks, threads of one process, on one GPU; rank 1's kernel
 * spins for rank 0's data, rank 1's thread then launches a kernel not yet
 * loaded and waits for the device to idle, and rank 0's launch waits for
 * that load: a deadlock until the spinning kernel gives up. key names the
 * kernel. CUDA_MODULE_LOADING=EAGER or BRAID_CUDASIM_LAZY_LOADING=0 load
 * everything up front. Caller holds S.lock. */
static int loaded_locked(const void *key) {
  for (struct loaded *l = S.loaded; l != NULL; l = l->next)
    if (l->key == key && l->device == tl_device) return 1;
  return 0;
}

/* Waits while another thread's load or pageable copy holds device d's
 * context. Caller holds S.lock. */
static cudaError_t hold_wait_locked(int d, const char *what) {
  if (d < 0 || d >= MAX_DEVICES) return cudaSuccess;
  struct timespec dl = deadline_in(S.timeout_s);
  while (S.hold[d] > 0) {
    if (pthread_cond_timedwait(&S.done, &S.lock, &dl) == ETIMEDOUT && S.hold[d] > 0) {
      fprintf(stderr, "cudasim: %s waited %.0f s (BRAID_CUDASIM_TIMEOUT) for another "
              "thread's kernel load or pageable copy on device %d, which waits for the "
              "device; giving up with cudaErrorLaunchTimeout\n", what, S.timeout_s, d);
      return cudaErrorLaunchTimeout;
    }
  }
  return cudaSuccess;
}

static void hold_release_locked(int d) {
  S.hold[d]--;
  pthread_cond_broadcast(&S.done);
}

static cudaError_t load_locked(const void *key, const char *what) {
  int d = tl_device;
  cudaError_t e = hold_wait_locked(d, what);
  if (e != cudaSuccess || !S.lazy || loaded_locked(key)) return e;
  struct loaded *l = malloc(sizeof(*l));
  if (l == NULL) return cudaErrorMemoryAllocation;
  S.hold[d]++;
  e = device_idle_locked(d, "loading a kernel (lazy loading)");
  hold_release_locked(d);
  if (e != cudaSuccess) {
    free(l);
    return e;
  }
  l->key = key;
  l->device = d;
  l->next = S.loaded;
  S.loaded = l;
  return cudaSuccess;
}

cudaError_t brd_cudasim_load(const void *key) {
  lock();
  cudaError_t e = load_locked(key, "a kernel launch or load");
  unlock();
  return ret(e);
}

static cudaError_t free_kind(void *p, int host) {
  if (p == NULL) return cudaSuccess;
  lock();
  cudaError_t e = capture_guard();
  alloc_t *a = e == cudaSuccess ? alloc_find(p) : NULL;
  if (e == cudaSuccess) {
    if (a == NULL || a->base != p ||
        (host ? a->kind != MEM_HOST : (a->kind != MEM_DEVICE && a->kind != MEM_MANAGED))) {
      e = cudaErrorInvalidValue;
    } else if (S.free_sync) {
      /* Freeing synchronises the device, as in CUDA. */
      e = device_idle_locked(host ? -1 : a->device, host ? "cudaFreeHost" : "cudaFree");
    }
  }
  if (e == cudaSuccess) {
    alloc_unlink(a);
    if (a->kind == MEM_DEVICE) S.used[a->device] -= a->map_size;
    munmap(a->base, a->map_size);
    close(a->fd);
    free(a);
  }
  unlock();
  return ret(e);
}

static cudaError_t malloc_kind(void **p, size_t size, int kind) {
  lock();
  cudaError_t e = capture_guard();
  if (e == cudaSuccess) e = alloc_new(size, kind, p);
  unlock();
  return ret(e);
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return malloc_kind(devPtr, size, MEM_DEVICE); }
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  (void)flags;
  return malloc_kind(devPtr, size, MEM_MANAGED);
}
cudaError_t cudaMallocHost(void **ptr, size_t size) { return malloc_kind(ptr, size, MEM_HOST); }
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  (void)flags;
  return malloc_kind(pHost, size, MEM_HOST);
}
cudaError_t cudaFree(void *devPtr) { return free_kind(devPtr, 0); }
cudaError_t cudaFreeHost(void *ptr) { return free_kind(ptr, 1); }

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  (void)flags;
  if (ptr == NULL || size == 0) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e = capture_guard();
  for (alloc_t *a = S.allocs; e == cudaSuccess && a != NULL; a = a->next)
    if ((char *)ptr < a->base + a->size && (char *)ptr + size > a->base)
      e = cudaErrorHostMemoryAlreadyRegistered;
  alloc_t *a = NULL;
  if (e == cudaSuccess && (a = calloc(1, sizeof(*a))) == NULL) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    a->base = ptr;
    a->size = size;
    a->kind = MEM_REGISTERED;
    a->device = -1;
    a->fd = -1;
    a->next = S.allocs;
    S.allocs = a;
  }
  unlock();
  return ret(e);
}

cudaError_t cudaHostUnregister(void *ptr) {
  lock();
  cudaError_t e = capture_guard();
  alloc_t *a = e == cudaSuccess ? alloc_find(ptr) : NULL;
  if (e == cudaSuccess && (a == NULL || a->base != ptr || a->kind != MEM_REGISTERED))
    e = cudaErrorHostMemoryNotRegistered;
  if (e == cudaSuccess) {
    alloc_unlink(a);
    free(a);
  }
  unlock();
  return ret(e);
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
  if (pDevice == NULL || flags != 0) return ret(cudaErrorInvalidValue);
  lock();
  alloc_t *a = alloc_find(pHost);
  cudaError_t e = a != NULL && (a->kind == MEM_HOST || a->kind == MEM_REGISTERED)
                      ? cudaSuccess : cudaErrorInvalidValue;
  if (e == cudaSuccess) *pDevice = pHost;
  unlock();
  return ret(e);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *ptr) {
  if (at == NULL) return ret(cudaErrorInvalidValue);
  lock();
  alloc_t *a = alloc_find(ptr);
  memset(at, 0, sizeof(*at));
  if (a == NULL) {
    at->type = cudaMemoryTypeUnregistered;
    at->device = -2;
  } else {
    at->device = a->device >= 0 ? a->device : tl_device;
    switch (a->kind) {
    case MEM_DEVICE:
    case MEM_IPC:
    case MEM_VMM:
      at->type = cudaMemoryTypeDevice;
      at->devicePointer = (void *)(uintptr_t)ptr;
      break;
    case MEM_MANAGED:
      at->type = cudaMemoryTypeManaged;
      at->devicePointer = at->hostPointer = (void *)(uintptr_t)ptr;
      break;
    default:
      at->type = cudaMemoryTypeHost;
      at->devicePointer = at->hostPointer = (void *)(uintptr_t)ptr;
      break;
    }
  }
  unlock();
  return ret(cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t *free_out, size_t *total) {
  lock();
  size_t used = tl_device < S.ndev ? S.used[tl_device] : 0;
  cudaError_t e = S.ndev == 0 ? cudaErrorNoDevice : cudaSuccess;
  unlock();
  if (e == cudaSuccess) {
    if (free_out != NULL) *free_out = used < TOTAL_MEM ? TOTAL_MEM - used : 0;
    if (total != NULL) *total = TOTAL_MEM;
  }
  return ret(e);
}

/* The device side of a copy must be memory the device reaches: dst_len
 * bytes at dst, src_len at src. */
static cudaError_t copy_check(void *dst, size_t dst_len, const void *src, size_t src_len,
                              enum cudaMemcpyKind kind) {
  if (dst_len == 0) return cudaSuccess;
  if (dst == NULL || src == NULL) return cudaErrorInvalidValue;
  int dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  int dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost && !dev_dst && !dev_src)
    return cudaErrorInvalidMemcpyDirection;
  if ((dev_dst && !brd_cudasim_accessible(dst, dst_len)) ||
      (dev_src && !brd_cudasim_accessible(src, src_len)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  cudaError_t e = copy_check(dst, count, src, count, kind);
  if (e != cudaSuccess || count == 0) return ret(e);
  copy_arg_t a = {dst, src, count};
  return submit_sync(run_copy, &a, sizeof(a), "cudaMemcpy");
}

/* Whether p is host memory the driver must stage: not pinned
 * (cudaMallocHost, cudaHostAlloc, cudaHostRegister), managed or device
 * memory. Caller holds S.lock. */
static int pageable_locked(const void *p) { return alloc_find(p) == NULL; }

/* Whether p is device memory (allocated, imported or mapped). */
static int devmem_locked(const void *p) {
  const alloc_t *a = alloc_find(p);
  return a != NULL && (a->kind == MEM_DEVICE || a->kind == MEM_IPC || a->kind == MEM_VMM);
}

/* Pageable copies, as CUDA's (its "API synchronization behavior", and
 * what a GPU shows): a copy from the device to pageable host memory
 * returns only once it is done, and while it waits it holds the context:
 * another thread's kernel launch or load on the device waits for it. A
 * copy from pageable memory to the device first waits for the stream's
 * earlier work. So a rank that is a thread sharing a GPU, copying its
 * result to pageable memory while its kernel waits for a peer, holds the
 * peer's launch: a deadlock. Copies on a capturing stream are recorded, as
 * any other. BRAID_CUDASIM_PAGEABLE=0 makes every copy asynchronous. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t e = copy_check(dst, count, src, count, kind);
  if (e != cudaSuccess || count == 0) return ret(e);
  copy_arg_t a = {dst, src, count};
  lock();
  struct CUstream_st *s = S.pageable ? resolve(stream, &e) : NULL;
  int to_pageable = 0, from_pageable = 0;
  if (s != NULL && s->cap == NULL) {
    to_pageable = devmem_locked(src) && pageable_locked(dst);
    from_pageable = devmem_locked(dst) && pageable_locked(src);
  }
  e = cudaSuccess;
  int d = s != NULL ? s->device : tl_device;
  if (to_pageable || from_pageable) e = hold_wait_locked(d, "a pageable cudaMemcpyAsync");
  if (e == cudaSuccess && from_pageable && s->last != NULL) {
    mark_t *m = mark_ref(s->last);
    e = mark_wait_locked(m, "cudaMemcpyAsync from pageable memory (a stream sync)");
    mark_unref(m);
  }
  mark_t *done = NULL;
  if (e == cudaSuccess) e = submit_locked(stream, run_copy, &a, sizeof(a), to_pageable ? &done : NULL);
  if (e == cudaSuccess && to_pageable) {
    S.hold[d]++;
    e = mark_wait_locked(done, "cudaMemcpyAsync to pageable memory");
    hold_release_locked(d);
  }
  mark_unref(done);
  unlock();
  return ret(e);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
  if (width > dpitch || width > spitch) return ret(cudaErrorInvalidPitchValue);
  if (width == 0 || height == 0) return ret(cudaSuccess);
  cudaError_t e = copy_check(dst, (height - 1) * dpitch + width, src,
                             (height - 1) * spitch + width, kind);
  if (e != cudaSuccess) return ret(e);
  copy2d_arg_t a = {dst, dpitch, src, spitch, width, height};
  return submit(stream, run_copy2d, &a, sizeof(a));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  if (count == 0) return ret(cudaSuccess);
  if (!brd_cudasim_accessible(devPtr, count)) return ret(cudaErrorInvalidValue);
  set_arg_t a = {devPtr, value, count};
  /* Asynchronous with respect to the host, on the legacy stream. */
  lock();
  cudaError_t e = capture_guard();
  if (e == cudaSuccess) e = submit_locked(NULL, run_set, &a, sizeof(a), NULL);
  unlock();
  return ret(e);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return ret(cudaSuccess);
  if (!brd_cudasim_accessible(devPtr, count)) return ret(cudaErrorInvalidValue);
  set_arg_t a = {devPtr, value, count};
  return submit(stream, run_set, &a, sizeof(a));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  if (fn == NULL) return ret(cudaErrorInvalidValue);
  host_arg_t a = {fn, userData};
  return submit(stream, run_host, &a, sizeof(a));
}

/* ---- kernels compiled for the CPU ----------------------------------------------------- */

/* A launch as the stream queues it: the packed parameters follow. */
typedef struct kernel_launch {
  const brd_cudasim_kernel_t *kernel;
  dim3 grid, block;
  _Alignas(16) unsigned char args[];
} kernel_launch_t;

static void run_kernel(void *p) {
  kernel_launch_t *l = p;
  brd_cudasim_grid_run(l->kernel, l->args, l->grid, l->block);
}

/* Only kernels of the devemu.h flavour: their address is a
 * brd_cudasim_kernel_t. Anything else is not a kernel of this "device". */
cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream) {
  const brd_cudasim_kernel_t *k = func;
  (void)sharedMem;
  if (k == NULL || k->magic != BRD_CUDASIM_KERNEL_MAGIC)
    return ret(cudaErrorInvalidDeviceFunction);
  if (gridDim.x * gridDim.y * gridDim.z == 0 || blockDim.x * blockDim.y * blockDim.z == 0 ||
      blockDim.x * blockDim.y * blockDim.z > 1024)
    return ret(cudaErrorInvalidConfiguration);
  cudaError_t le = brd_cudasim_load(func);
  if (le != cudaSuccess) return le;
  size_t bytes = sizeof(kernel_launch_t) + k->args_bytes;
  kernel_launch_t *l = calloc(1, bytes);
  if (l == NULL) return ret(cudaErrorMemoryAllocation);
  l->kernel = k;
  l->grid = gridDim;
  l->block = blockDim;
  k->pack(args, l->args);
  cudaError_t e = submit(stream, run_kernel, l, bytes);
  free(l);
  return e;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  const brd_cudasim_kernel_t *k = func;
  if (attr == NULL) return ret(cudaErrorInvalidValue);
  if (k == NULL || k->magic != BRD_CUDASIM_KERNEL_MAGIC)
    return ret(cudaErrorInvalidDeviceFunction);
  cudaError_t e = brd_cudasim_load(func);
  if (e != cudaSuccess) return e;
  memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = 1024;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return cudaSuccess;
}

/* ---- CUDA IPC ---------------------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  if (handle == NULL) return ret(cudaErrorInvalidValue);
  lock();
  alloc_t *a = alloc_find(devPtr);
  cudaError_t e = a != NULL && a->kind == MEM_DEVICE ? cudaSuccess : cudaErrorInvalidValue;
  if (e == cudaSuccess) {
    ipc_handle_t h;
    memset(&h, 0, sizeof(h));
    h.magic = IPC_MAGIC;
    h.pid = (int64_t)getpid();
    h.fd = a->fd;
    h.offset = 0; /* the handle names the whole allocation, as in CUDA */
    h.size = a->size;
    h.serial = a->serial;
    memcpy(handle, &h, sizeof(h));
  }
  unlock();
  return ret(e);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  (void)flags;
  ipc_handle_t h;
  memcpy(&h, &handle, sizeof(h));
  if (devPtr == NULL || h.magic != IPC_MAGIC) return ret(cudaErrorInvalidValue);
  /* CUDA refuses handles of the calling process. */
  if (h.pid == (int64_t)getpid()) return ret(cudaErrorDeviceUninitialized);
  char path[64], link[256], want[64];
  snprintf(path, sizeof(path), "/proc/%lld/fd/%lld", (long long)h.pid, (long long)h.fd);
  snprintf(want, sizeof(want), "/memfd:braid-cudasim-%llx ", (unsigned long long)h.serial);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  if (n < 0) return ret(cudaErrorInvalidResourceHandle); /* exporter gone */
  link[n] = '\0';
  /* The descriptor must still be the exported allocation, not a reuse. */
  if (strncmp(link, want, strlen(want)) != 0) return ret(cudaErrorInvalidResourceHandle);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return ret(cudaErrorInvalidResourceHandle);
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t map = (h.offset + h.size + pg - 1) / pg * pg;
  char *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ret(cudaErrorMemoryAllocation);
  alloc_t *a = calloc(1, sizeof(*a));
  if (a == NULL) {
    munmap(p, map);
    return ret(cudaErrorMemoryAllocation);
  }
  lock();
  a->base = p + h.offset;
  a->size = h.size;
  a->map_size = map;
  a->kind = MEM_IPC;
  a->device = tl_device;
  a->fd = -1;
  a->serial = h.serial;
  a->next = S.allocs;
  S.allocs = a;
  unlock();
  *devPtr = a->base;
  return ret(cudaSuccess);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  lock();
  alloc_t *a = alloc_find(devPtr);
  cudaError_t e = a != NULL && a->kind == MEM_IPC && a->base == devPtr
                      ? cudaSuccess : cudaErrorInvalidValue;
  if (e == cudaSuccess) {
    alloc_unlink(a);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *map_base = (char *)((uintptr_t)a->base / pg * pg);
    munmap(map_base, a->map_size);
    free(a);
  }
  unlock();
  return ret(e);
}

/* ---- devices ------------------------------------------------------------------------ */

static cudaError_t dev_check(int d) {
  lock();
  int n = S.ndev;
  unlock();
  if (n == 0) return cudaErrorNoDevice;
  return d >= 0 && d < n ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (count == NULL) return ret(cudaErrorInvalidValue);
  lock();
  int n = S.ndev;
  unlock();
  *count = n;
  return ret(n == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
  cudaError_t e = dev_check(device);
  if (e == cudaSuccess) tl_device = device;
  return ret(e);
}

cudaError_t cudaGetDevice(int *device) {
  if (device == NULL) return ret(cudaErrorInvalidValue);
  cudaError_t e = dev_check(0);
  if (e == cudaSuccess) *device = tl_device;
  return ret(e);
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  cudaError_t e = dev_check(device);
  if (e != cudaSuccess) return ret(e);
  if (value == NULL) return ret(cudaErrorInvalidValue);
  int v;
  switch (attr) {
  case cudaDevAttrMultiProcessorCount: v = S.nsms; break;
  case cudaDevAttrMpsEnabled: v = S.mps; break;
  case cudaDevAttrComputeCapabilityMajor: v = env_int("BRAID_CUDASIM_CC", 90) / 10; break;
  case cudaDevAttrComputeCapabilityMinor: v = env_int("BRAID_CUDASIM_CC", 90) % 10; break;
  case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
  case cudaDevAttrWarpSize: v = 32; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: v = 49152; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = 232448; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: v = 32; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: v = 2048; break;
  case cudaDevAttrL2CacheSize: v = 50 << 20; break;
  case cudaDevAttrPciBusId: v = device + 1; break;
  case cudaDevAttrPciDeviceId: v = 0; break;
  case cudaDevAttrPciDomainId: v = 0; break;
  case cudaDevAttrIntegrated: v = 0; break;
  case cudaDevAttrCanMapHostMemory: v = 1; break;
  case cudaDevAttrUnifiedAddressing: v = 1; break;
  case cudaDevAttrManagedMemory: v = 1; break;
  case cudaDevAttrConcurrentManagedAccess: v = 1; break;
  case cudaDevAttrCooperativeLaunch: v = 1; break;
  case cudaDevAttrHostRegisterSupported: v = 1; break;
  case cudaDevAttrGlobalMemoryBusWidth: v = 5120; break;
  case cudaDevAttrMemoryPoolsSupported: v = 0; break;
  case cudaDevAttrGPUDirectRDMASupported: v = 0; break;
  default: return ret(cudaErrorInvalidValue);
  }
  *value = v;
  return ret(cudaSuccess);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  cudaError_t e = dev_check(device);
  if (e != cudaSuccess) return ret(e);
  if (prop == NULL) return ret(cudaErrorInvalidValue);
  memset(prop, 0, sizeof(*prop));
  snprintf(prop->name, sizeof(prop->name), "Braid CUDA simulator");
  prop->totalGlobalMem = TOTAL_MEM;
  prop->sharedMemPerBlock = 49152;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->major = env_int("BRAID_CUDASIM_CC", 90) / 10;
  prop->minor = env_int("BRAID_CUDASIM_CC", 90) % 10;
  prop->multiProcessorCount = S.nsms;
  prop->canMapHostMemory = 1;
  prop->unifiedAddressing = 1;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->pciBusID = device + 1;
  prop->l2CacheSize = 50 << 20;
  return ret(cudaSuccess);
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  cudaError_t e = dev_check(device);
  if (e != cudaSuccess) return ret(e);
  if (pciBusId == NULL || len < 13) return ret(cudaErrorInvalidValue);
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", device + 1);
  return ret(cudaSuccess);
}

cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) {
  if (device == NULL || pciBusId == NULL) return ret(cudaErrorInvalidValue);
  unsigned dom = 0, bus = 0, slot = 0, fn = 0;
  if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4) {
    dom = 0;
    if (sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &fn) != 3) return ret(cudaErrorInvalidValue);
  }
  lock();
  int n = S.ndev;
  unlock();
  if (dom != 0 || slot != 0 || fn != 0 || bus < 1 || (int)bus > n)
    return ret(cudaErrorInvalidDevice);
  *device = (int)bus - 1;
  return ret(cudaSuccess);
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  cudaError_t e = dev_check(device);
  if (e == cudaSuccess) e = dev_check(peerDevice);
  if (e != cudaSuccess) return ret(e);
  if (canAccessPeer == NULL) return ret(cudaErrorInvalidValue);
  *canAccessPeer = device != peerDevice;
  return ret(cudaSuccess);
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  cudaError_t e = dev_check(peerDevice);
  if (e != cudaSuccess) return ret(e);
  if (flags != 0) return ret(cudaErrorInvalidValue);
  if (peerDevice == tl_device) return ret(cudaErrorInvalidDevice);
  lock();
  uint32_t bit = 1u << peerDevice;
  if (S.peer_enabled[tl_device] & bit) e = cudaErrorPeerAccessAlreadyEnabled;
  S.peer_enabled[tl_device] |= bit;
  unlock();
  return ret(e);
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  cudaError_t e = dev_check(peerDevice);
  if (e != cudaSuccess) return ret(e);
  lock();
  uint32_t bit = 1u << peerDevice;
  if (!(S.peer_enabled[tl_device] & bit)) e = cudaErrorPeerAccessNotEnabled;
  S.peer_enabled[tl_device] &= ~bit;
  unlock();
  return ret(e);
}

cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr, int srcDevice,
                                      int dstDevice) {
  cudaError_t e = dev_check(srcDevice);
  if (e == cudaSuccess) e = dev_check(dstDevice);
  if (e == cudaSuccess && srcDevice == dstDevice) e = cudaErrorInvalidDevice;
  if (e != cudaSuccess) return ret(e);
  if (value == NULL) return ret(cudaErrorInvalidValue);
  switch (attr) {
  case cudaDevP2PAttrPerformanceRank: *value = 0; break;
  case cudaDevP2PAttrAccessSupported:
  case cudaDevP2PAttrNativeAtomicSupported:
  case cudaDevP2PAttrCudaArrayAccessSupported: *value = 1; break;
  default: return ret(cudaErrorInvalidValue);
  }
  return ret(cudaSuccess);
}

cudaError_t cudaDeviceSynchronize(void) {
  lock();
  cudaError_t e = capture_guard();
  if (e == cudaSuccess) e = device_idle_locked(tl_device, "cudaDeviceSynchronize");
  unlock();
  return ret(e);
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == NULL) return ret(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return ret(cudaSuccess);
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == NULL) return ret(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return ret(cudaSuccess);
}

/* ---- the driver API: multicast objects ------------------------------------------ */

/* The driver entry points served (cudaGetDriverEntryPointByVersion) are
 * cuMemGetAddressRange and those of multicast objects (NVLS) with what
 * mapping one needs. cuMemCreate and cuMemGetAllocationGranularity are
 * served only with BRAID_CUDASIM_CUMEM=1: without them the library's cuMem
 * table (src/transport/cudrv.c) stays unresolved and P2P memory keeps to
 * cudaMalloc + CUDA IPC, and memory joins a multicast object by address
 * (cuMulticastBindAddr on cudaMalloc memory). A cuMemCreate allocation is
 * a memfd (phys_t); cuMemMap maps it MAP_SHARED into a reserved range and
 * enters it in the memory table (MEM_VMM); it exports as a duplicate of
 * the memfd (passable to another process) and imports from one by its
 * name; cuMulticastBindMem maps the bound part for the member's copy.
 *
 * A multicast object is a handle (MC_HANDLE_TAG | serial) naming an
 * mc_obj_t of this process: the devices added and, per bind, the member
 * range it covers. cuMemAddressReserve reserves address space the CPU
 * cannot touch (PROT_NONE); cuMemMap of a multicast handle there makes a
 * multicast mapping, an emulated range: a plain access faults, and kernels
 * reach it through brd_cudasim_mc_find, which gives every member's copy of
 * an address of it, in device order. A handle exports as a POSIX file
 * descriptor (a memfd holding a magic, the pid and the serial) that
 * imports in the same process only. */

#define MC_HANDLE_TAG (1ull << 62)
#define MC_EXPORT_MAGIC 0x4252444d43415354ull /* "BRDMCAST" */
#define MC_GRAN_MIN ((size_t)4096)
#define MC_GRAN_REC ((size_t)65536)

typedef struct mc_bind {
  struct mc_bind *next;
  int device;
  size_t mc_off, size;
  char *uc;      /* the member's memory: borrowed (BindAddr) or own's */
  struct alloc *own; /* BindMem: a mapping of the handle's memory, owned */
} mc_bind_t;

/* A physical allocation (cuMemCreate, or an import of one): a memfd. */
typedef struct phys {
  struct phys *next;
  unsigned long long serial;
  int fd;        /* owned */
  size_t size;
  int device;    /* where it was created; -1: imported */
  int refs;      /* handles and mappings */
} phys_t;

typedef struct vmm_map {
  struct vmm_map *next;
  struct alloc *a;  /* its entry in the memory table (MEM_VMM), owned */
  phys_t *phys;     /* a reference */
} vmm_map_t;

typedef struct mc_obj {
  struct mc_obj *next;
  unsigned long long serial;
  unsigned ndev;   /* prop.numDevices */
  size_t size;     /* prop.size, rounded up to the minimum granularity */
  uint32_t added;  /* bit d: device d was added */
  int refs;        /* handles (create, imports) and mappings */
  mc_bind_t *binds; /* owned */
} mc_obj_t;

typedef struct va_res {
  struct va_res *next;
  char *base;
  size_t size;
} va_res_t;

typedef struct mc_map {
  struct mc_map *next;
  char *va;
  size_t size;
  mc_obj_t *obj; /* a reference */
} mc_map_t;

/* What an exported handle's memfd holds. */
typedef struct mc_export {
  uint64_t magic;
  int64_t pid;
  uint64_t serial;
} mc_export_t;

static struct {
  mc_obj_t *objs;
  va_res_t *res;
  mc_map_t *maps;
  phys_t *phys;
  vmm_map_t *vmaps;
  unsigned long long next_serial;
} M; /* guarded by S.lock */

#define PHYS_HANDLE_TAG (1ull << 61)

static phys_t *phys_find(CUmemGenericAllocationHandle h) {
  if ((h & PHYS_HANDLE_TAG) == 0) return NULL;
  for (phys_t *p = M.phys; p != NULL; p = p->next)
    if ((p->serial | PHYS_HANDLE_TAG) == h) return p;
  return NULL;
}

static void phys_unref(phys_t *p) {
  if (--p->refs > 0) return;
  phys_t **pp = &M.phys;
  while (*pp != p) pp = &(*pp)->next;
  *pp = p->next;
  close(p->fd);
  free(p);
}

/* Maps [off, off + size) of p's memfd at va (MAP_FIXED when va is not
 * NULL) and enters it in the memory table as MEM_VMM of device dev. */
static alloc_t *phys_map_locked(phys_t *p, char *va, size_t off, size_t size, int dev) {
  alloc_t *a = calloc(1, sizeof(*a));
  if (a == NULL) return NULL;
  char *m = mmap(va, size, PROT_READ | PROT_WRITE, MAP_SHARED | (va != NULL ? MAP_FIXED : 0),
                 p->fd, (off_t)off);
  if (m == MAP_FAILED) {
    free(a);
    return NULL;
  }
  a->base = m;
  a->size = a->map_size = size;
  a->kind = MEM_VMM;
  a->device = dev;
  a->fd = -1;
  a->serial = p->serial;
  a->next = S.allocs;
  S.allocs = a;
  return a;
}

/* Takes a phys_map_locked mapping out of the table; a reserved range
 * (reserved != 0) goes back to address space the CPU cannot touch. */
static void phys_unmap_locked(alloc_t *a, int reserved) {
  alloc_unlink(a);
  if (reserved)
    mmap(a->base, a->map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
         -1, 0);
  else
    munmap(a->base, a->map_size);
  free(a);
}

static void mc_bind_free(mc_bind_t *b) {
  if (b->own != NULL) phys_unmap_locked(b->own, 0);
  free(b);
}

/* Whether BRAID_CUDASIM_MC_FAIL (a comma-separated list of step[:device],
 * the steps create, add and bind) makes `step` fail on `device`. Read at
 * every call, so a test can change it between steps. */
static int mc_fail(const char *step, int device) {
  const char *v = getenv("BRAID_CUDASIM_MC_FAIL");
  size_t n = strlen(step);
  while (v != NULL && *v != '\0') {
    if (strncmp(v, step, n) == 0 && (v[n] == '\0' || v[n] == ',' || v[n] == ':')) {
      if (v[n] != ':') return 1;
      if (device >= 0 && atoi(v + n + 1) == device) return 1;
    }
    v = strchr(v, ',');
    if (v != NULL) v++;
  }
  return 0;
}

static int mc_supported(void) { return env_int("BRAID_CUDASIM_MULTICAST", 1) != 0; }

static mc_obj_t *mc_obj_find(CUmemGenericAllocationHandle h) {
  if ((h & MC_HANDLE_TAG) == 0) return NULL;
  for (mc_obj_t *o = M.objs; o != NULL; o = o->next)
    if ((o->serial | MC_HANDLE_TAG) == h) return o;
  return NULL;
}

static void mc_obj_unref(mc_obj_t *o) {
  if (--o->refs > 0) return;
  mc_obj_t **pp = &M.objs;
  while (*pp != o) pp = &(*pp)->next;
  *pp = o->next;
  while (o->binds != NULL) {
    mc_bind_t *b = o->binds;
    o->binds = b->next;
    mc_bind_free(b);
  }
  free(o);
  __atomic_add_fetch(&brd_cudasim_mem_gen, 1, __ATOMIC_RELEASE);
}

static CUresult sim_get_error_string(CUresult r, const char **s) {
  if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (r) {
  case CUDA_SUCCESS: *s = "no error"; break;
  case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
  case CUDA_ERROR_NO_DEVICE: *s = "no CUDA-capable device is detected"; break;
  case CUDA_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
  case CUDA_ERROR_INVALID_HANDLE: *s = "invalid resource handle"; break;
  case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
  case CUDA_ERROR_ILLEGAL_STATE:
    *s = "the operation cannot be performed in the present state";
    break;
  case CUDA_ERROR_NOT_SUPPORTED: *s = "operation not supported"; break;
  case CUDA_ERROR_SYSTEM_NOT_READY: *s = "system not yet initialized"; break;
  case CUDA_ERROR_TIMEOUT: *s = "the wait operation has timed out"; break;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static CUresult sim_device_get(CUdevice *d, int ordinal) {
  if (d == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev_check(ordinal) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

/* Multicast support is BRAID_CUDASIM_MULTICAST (1 by default); any other
 * attribute is cudaDeviceGetAttribute's of the same number (the driver's
 * and the runtime's numbering agree on those it models). */
static CUresult sim_device_get_attribute(int *v, CUdevice_attribute attr, CUdevice d) {
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev_check(d) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  if (attr == CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) {
    *v = mc_supported();
    return CUDA_SUCCESS;
  }
  if (attr == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) {
    *v = env_int("BRAID_CUDASIM_DMABUF", 1) != 0;
    return CUDA_SUCCESS;
  }
  if (attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ||
      attr == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) {
    /* cuMem (POSIX descriptors) exactly when BRAID_CUDASIM_CUMEM serves it. */
    *v = env_int("BRAID_CUDASIM_CUMEM", 0) != 0;
    return CUDA_SUCCESS;
  }
  cudaError_t saved = tl_error;
  cudaError_t e = cudaDeviceGetAttribute(v, (enum cudaDeviceAttr)attr, d);
  tl_error = saved;
  return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult sim_mc_get_granularity(size_t *g, const CUmulticastObjectProp *prop,
                                       CUmulticastGranularity_flags opt) {
  if (g == NULL || prop == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!mc_supported()) return CUDA_ERROR_NOT_SUPPORTED;
  *g = opt == CU_MULTICAST_GRANULARITY_RECOMMENDED ? MC_GRAN_REC : MC_GRAN_MIN;
  return CUDA_SUCCESS;
}

static CUresult sim_mc_create(CUmemGenericAllocationHandle *h,
                              const CUmulticastObjectProp *prop) {
  if (h == NULL || prop == NULL || prop->numDevices == 0 || prop->size == 0 ||
      prop->flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!mc_supported()) return CUDA_ERROR_NOT_SUPPORTED;
  /* FABRIC handles need IMEX, which is not modelled. */
  if (prop->handleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (mc_fail("create", -1)) return CUDA_ERROR_NOT_SUPPORTED;
  lock();
  init_locked();
  CUresult r = CUDA_SUCCESS;
  mc_obj_t *o = NULL;
  if (prop->numDevices > (unsigned)S.ndev) r = CUDA_ERROR_INVALID_VALUE;
  else if ((o = calloc(1, sizeof(*o))) == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) {
    o->serial = ++M.next_serial;
    o->ndev = prop->numDevices;
    o->size = (prop->size + MC_GRAN_MIN - 1) / MC_GRAN_MIN * MC_GRAN_MIN;
    o->refs = 1;
    o->next = M.objs;
    M.objs = o;
    *h = o->serial | MC_HANDLE_TAG;
  }
  unlock();
  return r;
}

static CUresult sim_mc_add_device(CUmemGenericAllocationHandle h, CUdevice d) {
  if (dev_check(d) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  if (mc_fail("add", d)) return CUDA_ERROR_ILLEGAL_STATE;
  lock();
  mc_obj_t *o = mc_obj_find(h);
  CUresult r = CUDA_SUCCESS;
  if (o == NULL) r = CUDA_ERROR_INVALID_HANDLE;
  else if ((o->added >> d) & 1u) r = CUDA_ERROR_INVALID_VALUE; /* one member per device */
  else if ((unsigned)__builtin_popcount(o->added) >= o->ndev) r = CUDA_ERROR_INVALID_VALUE;
  else if (o->binds != NULL) r = CUDA_ERROR_ILLEGAL_STATE; /* adds precede binds */
  else o->added |= 1u << d;
  unlock();
  return r;
}

/* Records a bind of `size` bytes at mc_off for `device` (S.lock held; its
 * checks passed), after waiting, as CUDA does, until all numDevices
 * devices are added (BRAID_CUDASIM_TIMEOUT, then CUDA_ERROR_TIMEOUT with
 * a line on stderr). Exactly one of uc (borrowed) and p (mapped here at
 * mem_off, owned by the bind) gives the member's memory. */
static CUresult mc_bind_locked(mc_obj_t *o, int device, size_t mc_off, size_t size, char *uc,
                               phys_t *p, size_t mem_off, const char *what) {
  CUresult r = CUDA_SUCCESS;
  if (!((o->added >> device) & 1u)) r = CUDA_ERROR_INVALID_DEVICE;
  else if (mc_off + size > o->size) r = CUDA_ERROR_INVALID_VALUE;
  else if (mc_fail("bind", device)) r = CUDA_ERROR_SYSTEM_NOT_READY;
  for (mc_bind_t *b = r == CUDA_SUCCESS ? o->binds : NULL; b != NULL; b = b->next)
    if (b->device == device && mc_off < b->mc_off + b->size && b->mc_off < mc_off + size)
      r = CUDA_ERROR_INVALID_VALUE;
  unsigned long long serial = o->serial, pserial = p != NULL ? p->serial : 0;
  struct timespec dl = deadline_in(S.timeout_s);
  while (r == CUDA_SUCCESS && (unsigned)__builtin_popcount(o->added) < o->ndev) {
    unlock();
    struct timespec now, nap = {0, 1000000};
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_REALTIME, &now);
    lock();
    if ((o = mc_obj_find(serial | MC_HANDLE_TAG)) == NULL ||
        (p != NULL && (p = phys_find(pserial | PHYS_HANDLE_TAG)) == NULL)) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec > dl.tv_nsec)) {
      fprintf(stderr, "cudasim: %s on device %d waited %.0f s for %u devices to join the "
              "multicast object (%d have); giving up\n", what, device, S.timeout_s, o->ndev,
              __builtin_popcount(o->added));
      r = CUDA_ERROR_TIMEOUT;
    }
  }
  mc_bind_t *b = NULL;
  if (r == CUDA_SUCCESS && (b = calloc(1, sizeof(*b))) == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS && p != NULL) {
    b->own = phys_map_locked(p, NULL, mem_off, size, device);
    if (b->own == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
    else uc = b->own->base;
  }
  if (r == CUDA_SUCCESS) {
    b->device = device;
    b->mc_off = mc_off;
    b->size = size;
    b->uc = uc;
    b->next = o->binds;
    o->binds = b;
  } else {
    free(b);
  }
  return r;
}

/* cuMulticastBindAddr: [ptr, +size) of one device allocation (cudaMalloc
 * or a cuMemMap), at mc_off, for the allocation's device, which must have
 * been added. */
static CUresult sim_mc_bind_addr(CUmemGenericAllocationHandle h, size_t mc_off,
                                 CUdeviceptr ptr, size_t size, unsigned long long flags) {
  char *p = (char *)(uintptr_t)ptr;
  if (flags != 0 || size == 0 || size % MC_GRAN_MIN != 0 || mc_off % MC_GRAN_MIN != 0 ||
      (uintptr_t)p % MC_GRAN_MIN != 0)
    return CUDA_ERROR_INVALID_VALUE;
  lock();
  init_locked();
  CUresult r = CUDA_SUCCESS;
  alloc_t *a = alloc_find(p);
  mc_obj_t *o = mc_obj_find(h);
  if (a == NULL || (a->kind != MEM_DEVICE && a->kind != MEM_VMM) ||
      p + size > a->base + a->size)
    r = CUDA_ERROR_INVALID_VALUE;
  else if (o == NULL) r = CUDA_ERROR_INVALID_HANDLE;
  else r = mc_bind_locked(o, a->device, mc_off, size, p, NULL, 0, "cuMulticastBindAddr");
  unlock();
  return r;
}

/* cuMulticastBindMem: [mem_off, +size) of a cuMemCreate allocation of an
 * added device (BRAID_CUDASIM_CUMEM=1; no handle exists otherwise). */
static CUresult sim_mc_bind_mem(CUmemGenericAllocationHandle h, size_t mc_off,
                                CUmemGenericAllocationHandle mem, size_t mem_off, size_t size,
                                unsigned long long flags) {
  if (flags != 0 || size == 0 || size % MC_GRAN_MIN != 0 || mc_off % MC_GRAN_MIN != 0 ||
      mem_off % MC_GRAN_MIN != 0)
    return CUDA_ERROR_INVALID_VALUE;
  lock();
  init_locked();
  CUresult r = CUDA_SUCCESS;
  mc_obj_t *o = mc_obj_find(h);
  phys_t *p = phys_find(mem);
  if (o == NULL || p == NULL) r = CUDA_ERROR_INVALID_HANDLE;
  else if (p->device < 0) r = CUDA_ERROR_INVALID_DEVICE; /* only the creator binds it */
  else if (mem_off + size > p->size) r = CUDA_ERROR_INVALID_VALUE;
  else r = mc_bind_locked(o, p->device, mc_off, size, NULL, p, mem_off, "cuMulticastBindMem");
  unlock();
  return r;
}

static CUresult sim_mc_unbind(CUmemGenericAllocationHandle h, CUdevice d, size_t mc_off,
                              size_t size) {
  lock();
  mc_obj_t *o = mc_obj_find(h);
  CUresult r = o == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
  for (mc_bind_t **pp = o != NULL ? &o->binds : NULL; pp != NULL && *pp != NULL;
       pp = &(*pp)->next) {
    mc_bind_t *b = *pp;
    if (b->device != d || b->mc_off != mc_off || b->size != size) continue;
    *pp = b->next;
    mc_bind_free(b);
    __atomic_add_fetch(&brd_cudasim_mem_gen, 1, __ATOMIC_RELEASE);
    r = CUDA_SUCCESS;
    break;
  }
  unlock();
  return r;
}

static CUresult sim_mem_address_reserve(CUdeviceptr *ptr, size_t size, size_t align,
                                        CUdeviceptr addr, unsigned long long flags) {
  (void)addr; /* a hint */
  if (ptr == NULL || size == 0 || size % MC_GRAN_MIN != 0 || flags != 0 ||
      (align & (align - 1)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (align < MC_GRAN_MIN) align = MC_GRAN_MIN;
  va_res_t *v = calloc(1, sizeof(*v));
  if (v == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  char *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    free(v);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char *base = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
  if (base > m) munmap(m, (size_t)(base - m));
  if (base + size < m + size + align) munmap(base + size, (size_t)(m + size + align - (base + size)));
  v->base = base;
  v->size = size;
  lock();
  v->next = M.res;
  M.res = v;
  unlock();
  *ptr = (CUdeviceptr)(uintptr_t)base;
  return CUDA_SUCCESS;
}

static CUresult sim_mem_address_free(CUdeviceptr ptr, size_t size) {
  char *p = (char *)(uintptr_t)ptr;
  lock();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  va_res_t **pp = &M.res;
  while (*pp != NULL && ((*pp)->base != p || (*pp)->size != size)) pp = &(*pp)->next;
  va_res_t *v = *pp;
  int mapped = 0;
  for (mc_map_t *m = M.maps; v != NULL && m != NULL; m = m->next)
    if (m->va >= v->base && m->va < v->base + v->size) mapped = 1;
  for (vmm_map_t *m = M.vmaps; v != NULL && m != NULL; m = m->next)
    if (m->a->base >= v->base && m->a->base < v->base + v->size) mapped = 1;
  if (v != NULL && !mapped) {
    *pp = v->next;
    munmap(v->base, v->size);
    free(v);
    r = CUDA_SUCCESS;
  }
  unlock();
  return r;
}

/* Whether [p, p + size) is free address space of one reservation. */
static int va_free_locked(const char *p, size_t size) {
  va_res_t *v = M.res;
  while (v != NULL && !(p >= v->base && p + size <= v->base + v->size)) v = v->next;
  if (v == NULL) return 0;
  for (mc_map_t *x = M.maps; x != NULL; x = x->next)
    if (p < x->va + x->size && x->va < p + size) return 0;
  for (vmm_map_t *x = M.vmaps; x != NULL; x = x->next)
    if (p < x->a->base + x->a->size && x->a->base < p + size) return 0;
  return 1;
}

/* cuMemMap into a reserved range: of a multicast handle (offset 0, as CUDA
 * requires) or of a cuMemCreate allocation (memory a kernel may touch,
 * shared with every other mapping of it). */
static CUresult sim_mem_map(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle h, unsigned long long flags) {
  char *p = (char *)(uintptr_t)ptr;
  if (size == 0 || size % MC_GRAN_MIN != 0 || offset % MC_GRAN_MIN != 0 || flags != 0 ||
      (uintptr_t)p % MC_GRAN_MIN != 0)
    return CUDA_ERROR_INVALID_VALUE;
  lock();
  CUresult r = CUDA_SUCCESS;
  mc_obj_t *o = mc_obj_find(h);
  phys_t *ph = phys_find(h);
  if (o == NULL && ph == NULL) r = CUDA_ERROR_INVALID_HANDLE;
  else if (o != NULL && (offset != 0 || size > o->size)) r = CUDA_ERROR_INVALID_VALUE;
  else if (ph != NULL && offset + size > ph->size) r = CUDA_ERROR_INVALID_VALUE;
  else if (!va_free_locked(p, size)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && o != NULL) {
    mc_map_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      m->va = p;
      m->size = size;
      m->obj = o;
      o->refs++;
      m->next = M.maps;
      M.maps = m;
    }
  } else if (r == CUDA_SUCCESS) {
    vmm_map_t *m = calloc(1, sizeof(*m));
    alloc_t *a = m != NULL ? phys_map_locked(ph, p, offset, size,
                                             ph->device >= 0 ? ph->device : tl_device)
                           : NULL;
    if (a == NULL) {
      free(m);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      m->a = a;
      m->phys = ph;
      ph->refs++;
      m->next = M.vmaps;
      M.vmaps = m;
    }
  }
  unlock();
  return r;
}

static CUresult sim_mem_unmap(CUdeviceptr ptr, size_t size) {
  char *p = (char *)(uintptr_t)ptr;
  lock();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  for (mc_map_t **pp = &M.maps; *pp != NULL; pp = &(*pp)->next) {
    mc_map_t *m = *pp;
    if (m->va != p || m->size != size) continue;
    *pp = m->next;
    mc_obj_unref(m->obj);
    free(m);
    __atomic_add_fetch(&brd_cudasim_mem_gen, 1, __ATOMIC_RELEASE);
    r = CUDA_SUCCESS;
    break;
  }
  for (vmm_map_t **pp = &M.vmaps; r != CUDA_SUCCESS && *pp != NULL; pp = &(*pp)->next) {
    vmm_map_t *m = *pp;
    if (m->a->base != p || m->a->size != size) continue;
    *pp = m->next;
    phys_unmap_locked(m->a, 1);
    phys_unref(m->phys);
    free(m);
    r = CUDA_SUCCESS;
    break;
  }
  unlock();
  return r;
}

static CUresult sim_mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                   size_t count) {
  char *p = (char *)(uintptr_t)ptr;
  if (desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++)
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        dev_check(desc[i].location.id) != cudaSuccess)
      return CUDA_ERROR_INVALID_DEVICE;
  lock();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  for (mc_map_t *m = M.maps; m != NULL; m = m->next)
    if (p >= m->va && p + size <= m->va + m->size) r = CUDA_SUCCESS;
  /* A cuMemMap of a cuMemCreate allocation (BRAID_CUDASIM_CUMEM=1). */
  for (vmm_map_t *m = M.vmaps; m != NULL; m = m->next)
    if (p >= m->a->base && p + size <= m->a->base + m->a->size) r = CUDA_SUCCESS;
  unlock();
  return r;
}

static CUresult sim_mem_release(CUmemGenericAllocationHandle h) {
  lock();
  mc_obj_t *o = mc_obj_find(h);
  phys_t *p = phys_find(h);
  if (o != NULL) mc_obj_unref(o);
  if (p != NULL) phys_unref(p);
  unlock();
  return o != NULL || p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* cuMemGetAllocationGranularity (BRAID_CUDASIM_CUMEM=1): pinned device
 * memory of a simulated device, 4 KiB minimum, 64 KiB recommended. */
static CUresult sim_mem_get_granularity(size_t *g, const CUmemAllocationProp *prop,
                                        CUmemAllocationGranularity_flags opt) {
  if (g == NULL || prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev_check(prop->location.id) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  *g = opt == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? MC_GRAN_REC : MC_GRAN_MIN;
  return CUDA_SUCCESS;
}

/* cuMemCreate (BRAID_CUDASIM_CUMEM=1): a memfd of `size` bytes for a
 * device, POSIX-fd shareable. Its memory is zero (unlike cudaMalloc's
 * poison) until written. */
static CUresult sim_mem_create(CUmemGenericAllocationHandle *h, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
  if (h == NULL || prop == NULL || size == 0 || size % MC_GRAN_MIN != 0 || flags != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev_check(prop->location.id) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  phys_t *p = calloc(1, sizeof(*p));
  if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  p->fd = memfd_create("braid-cudasim-vmm", MFD_CLOEXEC);
  if (p->fd < 0 || ftruncate(p->fd, (off_t)size) != 0) {
    if (p->fd >= 0) close(p->fd);
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->size = size;
  p->device = prop->location.id;
  p->refs = 1;
  lock();
  p->serial = ++M.next_serial;
  p->next = M.phys;
  M.phys = p;
  *h = p->serial | PHYS_HANDLE_TAG;
  unlock();
  return CUDA_SUCCESS;
}

static CUresult sim_mem_export(void *out, CUmemGenericAllocationHandle h,
                               CUmemAllocationHandleType type, unsigned long long flags) {
  if (out == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  lock();
  mc_obj_t *o = mc_obj_find(h);
  phys_t *p = phys_find(h);
  int pfd = p != NULL ? fcntl(p->fd, F_DUPFD_CLOEXEC, 0) : -1;
  mc_export_t rec = {MC_EXPORT_MAGIC, (int64_t)getpid(), o != NULL ? o->serial : 0};
  unlock();
  if (p != NULL) {
    /* A physical allocation exports as its memfd, which another process
     * can receive (SCM_RIGHTS) and import. */
    if (pfd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = pfd;
    return CUDA_SUCCESS;
  }
  if (o == NULL) return CUDA_ERROR_INVALID_HANDLE;
  int fd = memfd_create("braid-cudasim-mc", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(int *)out = fd;
  return CUDA_SUCCESS;
}

static CUresult sim_mem_import(CUmemGenericAllocationHandle *h, void *os,
                               CUmemAllocationHandleType type) {
  if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  mc_export_t rec;
  int fd = (int)(intptr_t)os;
  /* A physical allocation's memfd, by its name: a new handle to it. */
  char link[64], name[128];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t nl = readlink(link, name, sizeof(name) - 1);
  name[nl > 0 ? nl : 0] = '\0';
  if (strstr(name, "braid-cudasim-vmm") != NULL) {
    struct stat sb;
    phys_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (p->fd < 0 || fstat(p->fd, &sb) != 0) {
      if (p->fd >= 0) close(p->fd);
      free(p);
      return CUDA_ERROR_INVALID_VALUE;
    }
    p->size = (size_t)sb.st_size;
    p->device = -1;
    p->refs = 1;
    lock();
    p->serial = ++M.next_serial;
    p->next = M.phys;
    M.phys = p;
    *h = p->serial | PHYS_HANDLE_TAG;
    unlock();
    return CUDA_SUCCESS;
  }
  if (pread(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) || rec.magic != MC_EXPORT_MAGIC)
    return CUDA_ERROR_INVALID_VALUE;
  if (rec.pid != (int64_t)getpid()) {
    fprintf(stderr, "cudasim: a multicast handle of process %lld imported in process %lld: "
            "multicast objects are modelled within one process only\n",
            (long long)rec.pid, (long long)getpid());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  lock();
  mc_obj_t *o = mc_obj_find(rec.serial | MC_HANDLE_TAG);
  if (o != NULL) {
    o->refs++;
    *h = o->serial | MC_HANDLE_TAG;
  }
  unlock();
  return o != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* See cudasim.h. */
int brd_cudasim_mc_find(const void *p, size_t bytes, brd_cudasim_mc_t *out) {
  const char *c = p;
  int ok = 0;
  memset(out, 0, sizeof(*out));
  lock();
  out->gen = __atomic_load_n(&brd_cudasim_mem_gen, __ATOMIC_ACQUIRE);
  mc_map_t *m = M.maps;
  while (m != NULL && !(c >= m->va && c + bytes <= m->va + m->size)) m = m->next;
  mc_obj_t *o = m != NULL ? m->obj : NULL;
  if (o != NULL && (unsigned)__builtin_popcount(o->added) == o->ndev) {
    size_t off = (size_t)(c - m->va), lo = 0, hi = m->size;
    ok = 1;
    for (int d = 0; ok && d < MAX_DEVICES; d++) {
      if (!((o->added >> d) & 1u)) continue;
      mc_bind_t *b = o->binds;
      while (b != NULL && !(b->device == d && off >= b->mc_off && off + bytes <= b->mc_off + b->size))
        b = b->next;
      alloc_t *a = b != NULL ? alloc_find(b->uc) : NULL;
      if (a == NULL || b->uc + b->size > a->base + a->size) {
        ok = 0; /* unbound, or its memory was freed */
        break;
      }
      if (b->mc_off > lo) lo = b->mc_off;
      if (b->mc_off + b->size < hi) hi = b->mc_off + b->size;
      out->uc[out->n++] = b->uc - b->mc_off; /* + offset below */
    }
    if (ok) {
      out->base = m->va + lo;
      out->size = hi - lo;
      for (int i = 0; i < out->n; i++) out->uc[i] += lo;
    }
  }
  unlock();
  if (!ok) out->n = 0;
  return ok;
}

/* cuMemGetAddressRange (v2): the device allocation holding dptr. */
static CUresult sim_mem_get_address_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  lock();
  alloc_t *a = alloc_find((const void *)(uintptr_t)dptr);
  CUresult r = a != NULL && (a->kind == MEM_DEVICE || a->kind == MEM_MANAGED ||
                            a->kind == MEM_IPC || a->kind == MEM_VMM)
                   ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  if (r == CUDA_SUCCESS) {
    if (pbase != NULL) *pbase = (CUdeviceptr)(uintptr_t)a->base;
    if (psize != NULL) *psize = a->size;
  }
  unlock();
  return r;
}

/* cuMemGetHandleForAddressRange, DMA-BUF only (BRAID_CUDASIM_DMABUF, 1 by
 * default; 0: CUDA_ERROR_NOT_SUPPORTED): the handle is a duplicate of the
 * cudaMalloc allocation's memfd, so byte k of it is byte k of the
 * allocation; the range must therefore start at the allocation's base (a
 * subset of what CUDA takes), and, as CUDA asks, dptr and size are
 * multiples of the host page and the range lies in the allocation's
 * pages. The caller closes the fd. */
static CUresult sim_mem_get_handle_for_address_range(void *handle, CUdeviceptr dptr, size_t size,
                                                     CUmemRangeHandleType type,
                                                     unsigned long long flags) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (handle == NULL || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || size == 0 ||
      dptr % pg != 0 || size % pg != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (env_int("BRAID_CUDASIM_DMABUF", 1) == 0 || flags != 0) return CUDA_ERROR_NOT_SUPPORTED;
  lock();
  alloc_t *a = alloc_find((const void *)(uintptr_t)dptr);
  CUresult r = CUDA_SUCCESS;
  if (a == NULL || a->kind != MEM_DEVICE || a->fd < 0 ||
      (uintptr_t)a->base != (uintptr_t)dptr || size > a->map_size) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else *(int *)handle = fd;
  }
  unlock();
  return r;
}

#define DRV_FN(name, fn) {name, (void (*)(void))(fn)}
static const struct {
  const char *name;
  void (*fn)(void);
} drv_fns[] = {
    DRV_FN("cuGetErrorString", sim_get_error_string),
    DRV_FN("cuDeviceGet", sim_device_get),
    DRV_FN("cuDeviceGetAttribute", sim_device_get_attribute),
    DRV_FN("cuMemGetAddressRange", sim_mem_get_address_range),
    DRV_FN("cuMemGetHandleForAddressRange", sim_mem_get_handle_for_address_range),
    DRV_FN("cuMulticastGetGranularity", sim_mc_get_granularity),
    DRV_FN("cuMulticastCreate", sim_mc_create),
    DRV_FN("cuMulticastAddDevice", sim_mc_add_device),
    DRV_FN("cuMulticastBindAddr", sim_mc_bind_addr),
    DRV_FN("cuMulticastBindMem", sim_mc_bind_mem),
    DRV_FN("cuMulticastUnbind", sim_mc_unbind),
    DRV_FN("cuMemAddressReserve", sim_mem_address_reserve),
    DRV_FN("cuMemAddressFree", sim_mem_address_free),
    DRV_FN("cuMemMap", sim_mem_map),
    DRV_FN("cuMemUnmap", sim_mem_unmap),
    DRV_FN("cuMemSetAccess", sim_mem_set_access),
    DRV_FN("cuMemRelease", sim_mem_release),
    DRV_FN("cuMemExportToShareableHandle", sim_mem_export),
    DRV_FN("cuMemImportFromShareableHandle", sim_mem_import),
    /* Served only with BRAID_CUDASIM_CUMEM=1 (see cudaGetDriverEntryPointByVersion). */
    DRV_FN("cuMemCreate", sim_mem_create),
    DRV_FN("cuMemGetAllocationGranularity", sim_mem_get_granularity),
};

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus) {
  (void)cudaVersion;
  (void)flags;
  if (symbol == NULL || funcPtr == NULL) return ret(cudaErrorInvalidValue);
  *funcPtr = NULL;
  /* cuMem allocations on request only: with them the library's cuMem table
   * resolves and P2P memory takes its cuMem path. */
  int cumem = env_int("BRAID_CUDASIM_CUMEM", 0) != 0;
  for (size_t i = 0; i < sizeof(drv_fns) / sizeof(drv_fns[0]); i++) {
    if (strcmp(symbol, drv_fns[i].name) != 0) continue;
    if (!cumem && (strcmp(symbol, "cuMemCreate") == 0 ||
                   strcmp(symbol, "cuMemGetAllocationGranularity") == 0))
      break;
    memcpy(funcPtr, &drv_fns[i].fn, sizeof(drv_fns[i].fn));
    if (driverStatus != NULL) *driverStatus = cudaDriverEntryPointSuccess;
    return cudaSuccess;
  }
  if (driverStatus != NULL) *driverStatus = cudaDriverEntryPointSymbolNotFound;
  return ret(cudaErrorSymbolNotFound);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

/* ---- errors -------------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void) {
  cudaError_t e = tl_error;
  tl_error = cudaSuccess;
  lock();
  if (S.sticky != cudaSuccess) e = S.sticky;
  unlock();
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  cudaError_t e = tl_error;
  lock();
  if (S.sticky != cudaSuccess) e = S.sticky;
  unlock();
  return e;
}

static const struct {
  cudaError_t code;
  const char *name, *text;
} errors[] = {
#define E(c, t) {c, #c, t}
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorDeviceUninitialized, "invalid device context"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorSymbolNotFound, "named symbol not found"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorMisalignedAddress, "misaligned address"),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    E(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    E(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    E(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    E(cudaErrorNotSupported, "operation not supported"),
    E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    E(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
    E(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences"),
    E(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
    E(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    E(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream"),
    E(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream"),
    E(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread"),
#undef E
};

const char *cudaGetErrorString(cudaError_t error) {
  for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
    if (errors[i].code == error) return errors[i].text;
  return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error) {
  for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
    if (errors[i].code == error) return errors[i].name;
  return "cudaErrorUnknown";
}

/* ---- streams (API) ---------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  if (pStream == NULL || (flags & ~(unsigned)cudaStreamNonBlocking) != 0)
    return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e = S.ndev == 0 ? cudaErrorNoDevice : cudaSuccess;
  struct CUstream_st *s = e == cudaSuccess ? stream_new_locked(tl_device, flags, 0) : NULL;
  if (e == cudaSuccess && s == NULL) e = cudaErrorMemoryAllocation;
  unlock();
  if (e == cudaSuccess) *pStream = s;
  return ret(e);
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return ret(cudaErrorInvalidResourceHandle);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL && s->cap != NULL) {
    /* Destroying a capturing stream invalidates its capture. */
    capture_invalidate(s->cap, cudaErrorStreamCaptureInvalidated);
    e = cudaErrorStreamCaptureUnsupported;
  } else if (s != NULL) {
    stream_destroy_locked(s);
  }
  unlock();
  return ret(e);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL && s->cap != NULL) {
    capture_invalidate(s->cap, cudaErrorStreamCaptureUnsupported);
    e = cudaErrorStreamCaptureUnsupported;
  }
  if (s != NULL && e == cudaSuccess) e = legacy_guard(s, 1);
  if (s != NULL && e == cudaSuccess) e = capture_guard();
  if (s != NULL && e == cudaSuccess) {
    mark_t *m = mark_ref(s->last);
    e = mark_wait_locked(m, "cudaStreamSynchronize");
    mark_unref(m);
  }
  if (e == cudaSuccess) e = S.sticky;
  unlock();
  return ret(e);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL && s->cap != NULL) {
    capture_invalidate(s->cap, cudaErrorStreamCaptureUnsupported);
    e = cudaErrorStreamCaptureUnsupported;
  }
  if (s != NULL && e == cudaSuccess) e = legacy_guard(s, 1);
  if (s != NULL && e == cudaSuccess) e = capture_guard();
  if (s != NULL && e == cudaSuccess && s->last != NULL && !s->last->done) e = cudaErrorNotReady;
  if (e == cudaSuccess) e = S.sticky;
  unlock();
  return ret(e);
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(hStream, &e);
  if (s != NULL && flags != NULL) *flags = s->flags;
  unlock();
  return ret(flags == NULL ? cudaErrorInvalidValue : e);
}

/* ---- events ---------------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == NULL || (flags & ~known) != 0 ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return ret(cudaErrorInvalidValue);
  struct CUevent_st *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return ret(cudaErrorMemoryAllocation);
  ev->magic = EVENT_MAGIC;
  ev->flags = flags;
  ev->device = tl_device;
  *event = ev;
  return ret(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

static int event_ok(cudaEvent_t ev) { return ev != NULL && ev->magic == EVENT_MAGIC; }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event_ok(event)) return ret(cudaErrorInvalidResourceHandle);
  lock();
  mark_unref(event->mark);
  event->magic = 0;
  unlock();
  free(event);
  return ret(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event_ok(event)) return ret(cudaErrorInvalidResourceHandle);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL) e = legacy_guard(s, 1);
  if (s != NULL && e == cudaSuccess && s->cap != NULL) {
    capture_t *c = s->cap;
    int k = c->nevents;
    if (c->invalid) {
      e = cudaErrorStreamCaptureInvalidated;
    } else if (k + 1 > c->ev_cap) {
      int n = c->ev_cap > 0 ? 2 * c->ev_cap : 16;
      int *a = realloc(c->ev_node, (size_t)n * sizeof(int));
      if (a != NULL) c->ev_node = a;
      int *b = a != NULL ? realloc(c->ev_waited, (size_t)n * sizeof(int)) : NULL;
      if (b != NULL) {
        c->ev_waited = b;
        c->ev_cap = n;
      } else {
        capture_invalidate(c, cudaErrorMemoryAllocation);
        e = cudaErrorMemoryAllocation;
      }
    }
    if (e == cudaSuccess) e = capture_add(s, N_RECORD, k, NULL, NULL, 0);
    if (e == cudaSuccess) {
      c->ev_node[k] = c->nnodes - 1;
      c->ev_waited[k] = 0;
      c->nevents = k + 1;
      event->cap_id = c->id;
      event->cap_ev = k;
    }
  } else if (s != NULL && e == cudaSuccess) {
    mark_t *m = NULL;
    e = enqueue_locked(s, OP_NOP, NULL, NULL, &m);
    if (e == cudaSuccess) {
      mark_unref(event->mark);
      event->mark = m;
      event->cap_id = 0;
    }
  }
  unlock();
  return ret(e);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!event_ok(event)) return ret(cudaErrorInvalidResourceHandle);
  if (flags & ~(unsigned)cudaEventWaitExternal) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL) e = legacy_guard(s, 1);
  if (s != NULL && e == cudaSuccess && event->cap_id != 0) {
    capture_t *c = capture_find(event->cap_id);
    if (c == NULL) {
      e = cudaErrorCapturedEvent; /* recorded in a capture that has ended */
    } else if (s->cap != NULL && s->cap != c) {
      capture_invalidate(c, cudaErrorStreamCaptureMerge);
      capture_invalidate(s->cap, cudaErrorStreamCaptureMerge);
      e = cudaErrorStreamCaptureMerge;
    } else {
      if (s->cap == NULL) {
        /* The stream joins the capture as a new lane. */
        int n = c->nlanes + 1;
        int *ll = realloc(c->lane_last, (size_t)n * sizeof(int));
        if (ll == NULL) {
          e = cudaErrorMemoryAllocation;
        } else {
          c->lane_last = ll;
          ll[c->nlanes] = -1;
          s->cap = c;
          s->lane = c->nlanes++;
        }
      }
      if (e == cudaSuccess) {
        int k = event->cap_ev;
        if (c->nodes[c->ev_node[k]].lane != s->lane) c->ev_waited[k] = 1;
        e = capture_add(s, N_WAIT, k, NULL, NULL, 0);
      }
    }
  } else if (s != NULL && e == cudaSuccess && s->cap != NULL) {
    /* Work recorded outside the capture: CUDA refuses the dependency. */
    if (event->mark != NULL) {
      capture_invalidate(s->cap, cudaErrorStreamCaptureIsolation);
      e = cudaErrorStreamCaptureIsolation;
    }
  } else if (s != NULL && e == cudaSuccess) {
    e = wait_op_locked(s, event->mark);
  }
  unlock();
  return ret(e);
}

static cudaError_t event_captured(cudaEvent_t event) {
  if (event->cap_id == 0) return cudaSuccess;
  capture_t *c = capture_find(event->cap_id);
  if (c != NULL) capture_invalidate(c, cudaErrorCapturedEvent);
  return cudaErrorCapturedEvent;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event_ok(event)) return ret(cudaErrorInvalidResourceHandle);
  lock();
  cudaError_t e = event_captured(event);
  if (e == cudaSuccess) e = capture_guard();
  if (e == cudaSuccess && event->mark != NULL && !event->mark->done) e = cudaErrorNotReady;
  if (e == cudaSuccess) e = S.sticky;
  unlock();
  return ret(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event_ok(event)) return ret(cudaErrorInvalidResourceHandle);
  lock();
  cudaError_t e = event_captured(event);
  if (e == cudaSuccess) e = capture_guard();
  if (e == cudaSuccess) {
    mark_t *m = mark_ref(event->mark);
    e = mark_wait_locked(m, "cudaEventSynchronize");
    mark_unref(m);
  }
  if (e == cudaSuccess) e = S.sticky;
  unlock();
  return ret(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == NULL) return ret(cudaErrorInvalidValue);
  if (!event_ok(start) || !event_ok(end)) return ret(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return ret(cudaErrorInvalidResourceHandle);
  lock();
  cudaError_t e = event_captured(start);
  if (e == cudaSuccess) e = event_captured(end);
  if (e == cudaSuccess && (start->mark == NULL || end->mark == NULL))
    e = cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && (!start->mark->done || !end->mark->done)) e = cudaErrorNotReady;
  if (e == cudaSuccess) {
    struct timespec a = start->mark->when, b = end->mark->when;
    *ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6);
  }
  unlock();
  return ret(e);
}

/* ---- capture (API) ----------------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL && s->legacy) e = cudaErrorStreamCaptureUnsupported;
  else if (s != NULL && s->cap != NULL) e = cudaErrorIllegalState;
  capture_t *c = NULL;
  if (s != NULL && e == cudaSuccess) {
    c = calloc(1, sizeof(*c));
    if (c != NULL) c->lane_last = malloc(sizeof(int));
    if (c == NULL || c->lane_last == NULL) {
      free(c);
      e = cudaErrorMemoryAllocation;
    }
  }
  if (e == cudaSuccess) {
    c->id = ++S.next_capture_id;
    c->mode = mode;
    c->thread = pthread_self();
    c->origin = s;
    c->nlanes = 1;
    c->lane_last[0] = -1;
    c->next = S.captures;
    S.captures = c;
    s->cap = c;
    s->lane = 0;
  }
  unlock();
  return ret(e);
}

/* Whether every lane but the origin ends with a record another lane waited
 * for (it rejoined the capture). */
static int capture_joined(const capture_t *c) {
  for (int l = 1; l < c->nlanes; l++) {
    int last = c->lane_last[l];
    if (last < 0) continue;
    const node_t *n = &c->nodes[last];
    if (n->kind != N_RECORD || !c->ev_waited[n->ev]) return 0;
  }
  return 1;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  if (pGraph == NULL) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  capture_t *c = s != NULL ? s->cap : NULL;
  if (s != NULL && c == NULL) e = cudaErrorIllegalState;
  else if (c != NULL && c->origin != s) e = cudaErrorStreamCaptureUnmatched;
  else if (c != NULL && c->mode != cudaStreamCaptureModeRelaxed &&
           !pthread_equal(c->thread, pthread_self()))
    e = cudaErrorStreamCaptureWrongThread;
  if (e == cudaSuccess) {
    /* The capture ends whatever the outcome. */
    capture_t **pp = &S.captures;
    while (*pp != c) pp = &(*pp)->next;
    *pp = c->next;
    for (struct CUstream_st *o = S.streams; o != NULL; o = o->next_all)
      if (o->cap == c) o->cap = NULL;
    *pGraph = NULL;
    if (c->invalid) e = cudaErrorStreamCaptureInvalidated;
    else if (!capture_joined(c)) e = cudaErrorStreamCaptureUnjoined;
    struct CUgraph_st *g = NULL;
    if (e == cudaSuccess && (g = calloc(1, sizeof(*g))) == NULL) e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess) {
      g->magic = GRAPH_MAGIC;
      g->nodes = c->nodes;
      g->nnodes = c->nnodes;
      g->nlanes = c->nlanes;
      g->nevents = c->nevents;
      c->nodes = NULL;
      c->nnodes = 0;
      *pGraph = g;
    }
    capture_free(c);
  }
  unlock();
  return ret(e);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  if (pCaptureStatus == NULL) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL) e = legacy_guard(s, 0);
  if (s != NULL && e == cudaSuccess)
    *pCaptureStatus = s->cap == NULL ? cudaStreamCaptureStatusNone
                      : s->cap->invalid ? cudaStreamCaptureStatusInvalidated
                                        : cudaStreamCaptureStatusActive;
  unlock();
  return ret(e);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const cudaGraphEdgeData **edgeData_out,
                                     size_t *numDependencies_out) {
  if (captureStatus_out == NULL) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL) e = legacy_guard(s, 0);
  if (s != NULL && e == cudaSuccess) {
    capture_t *c = s->cap;
    *captureStatus_out = c == NULL ? cudaStreamCaptureStatusNone
                         : c->invalid ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
    if (id_out != NULL && c != NULL) *id_out = c->id;
    /* The graph under construction is not an object here. */
    if (graph_out != NULL) *graph_out = NULL;
    if (dependencies_out != NULL) *dependencies_out = NULL;
    if (edgeData_out != NULL) *edgeData_out = NULL;
    if (numDependencies_out != NULL) *numDependencies_out = 0;
  }
  unlock();
  return ret(e);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (mode == NULL || (*mode != cudaStreamCaptureModeGlobal &&
                       *mode != cudaStreamCaptureModeThreadLocal &&
                       *mode != cudaStreamCaptureModeRelaxed))
    return ret(cudaErrorInvalidValue);
  enum cudaStreamCaptureMode old = tl_mode;
  tl_mode = *mode;
  *mode = old;
  return ret(cudaSuccess);
}

/* ---- graphs -------------------------------------------------------------------------------- */

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == NULL || graph->magic != GRAPH_MAGIC) return ret(cudaErrorInvalidValue);
  for (int i = 0; i < graph->nnodes; i++) free(graph->nodes[i].arg);
  free(graph->nodes);
  graph->magic = 0;
  free(graph);
  return ret(cudaSuccess);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ge) {
  if (ge == NULL || ge->magic != EXEC_MAGIC) return ret(cudaErrorInvalidValue);
  lock();
  /* Launches already queued own copies of their ops: they still run. */
  for (int l = 1; l < ge->nlanes; l++)
    if (ge->lanes[l] != NULL) stream_destroy_locked(ge->lanes[l]);
  unlock();
  for (int i = 0; i < ge->nnodes; i++) free(ge->nodes[i].arg);
  free(ge->nodes);
  free(ge->lanes);
  ge->magic = 0;
  free(ge);
  return ret(cudaSuccess);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  (void)flags;
  if (pGraphExec == NULL || graph == NULL || graph->magic != GRAPH_MAGIC)
    return ret(cudaErrorInvalidValue);
  struct CUgraphExec_st *ge = calloc(1, sizeof(*ge));
  if (ge == NULL) return ret(cudaErrorMemoryAllocation);
  ge->magic = EXEC_MAGIC;
  ge->nnodes = graph->nnodes;
  ge->nlanes = graph->nlanes;
  ge->nevents = graph->nevents;
  ge->nodes = calloc((size_t)graph->nnodes + 1, sizeof(node_t));
  ge->lanes = calloc((size_t)graph->nlanes, sizeof(*ge->lanes));
  cudaError_t e = ge->nodes != NULL && ge->lanes != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
  for (int i = 0; e == cudaSuccess && i < graph->nnodes; i++) {
    ge->nodes[i] = graph->nodes[i];
    ge->nodes[i].arg = NULL;
    if (graph->nodes[i].arg != NULL) {
      ge->nodes[i].arg = malloc(graph->nodes[i].bytes ? graph->nodes[i].bytes : 1);
      if (ge->nodes[i].arg == NULL) e = cudaErrorMemoryAllocation;
      else memcpy(ge->nodes[i].arg, graph->nodes[i].arg, graph->nodes[i].bytes);
    }
  }
  lock();
  for (int l = 1; e == cudaSuccess && l < ge->nlanes; l++) {
    ge->lanes[l] = stream_new_locked(tl_device, cudaStreamNonBlocking, 0);
    if (ge->lanes[l] == NULL) e = cudaErrorMemoryAllocation;
    else {
      ge->lanes[l]->internal = 1;
      ge->lanes[l]->conn = -1;
    }
  }
  unlock();
  if (e != cudaSuccess) {
    if (ge->nodes != NULL && ge->lanes != NULL) cudaGraphExecDestroy(ge);
    else {
      free(ge->nodes);
      free(ge->lanes);
      free(ge);
    }
    return ret(e);
  }
  *pGraphExec = ge;
  return ret(cudaSuccess);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

/* Queues one replay: lane 0 on s, lane l on ge->lanes[l] after the work
 * queued on s so far; the captured records and waits become fresh marks;
 * s then waits for every lane. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t ge, cudaStream_t stream) {
  if (ge == NULL || ge->magic != EXEC_MAGIC) return ret(cudaErrorInvalidValue);
  lock();
  cudaError_t e;
  struct CUstream_st *s = resolve(stream, &e);
  if (s != NULL) e = legacy_guard(s, 1);
  if (s != NULL && e == cudaSuccess && s->cap != NULL) e = cudaErrorNotSupported;
  if (s != NULL && e == cudaSuccess) e = hold_wait_locked(s->device, "cudaGraphLaunch");
  if (e == cudaSuccess) e = S.sticky;
  if (e != cudaSuccess) {
    unlock();
    return ret(e);
  }
  mark_t **ev = calloc((size_t)ge->nevents + 1, sizeof(*ev));
  int *started = calloc((size_t)ge->nlanes, sizeof(int));
  mark_t *fork = NULL;
  if (ev == NULL || started == NULL) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess && ge->nlanes > 1) e = enqueue_locked(s, OP_NOP, NULL, NULL, &fork);
  for (int i = 0; e == cudaSuccess && i < ge->nnodes; i++) {
    const node_t *n = &ge->nodes[i];
    struct CUstream_st *ls = n->lane == 0 ? s : ge->lanes[n->lane];
    if (!started[n->lane]) {
      started[n->lane] = 1;
      if (n->lane != 0) e = wait_op_locked(ls, fork);
      if (e != cudaSuccess) break;
    }
    if (n->kind == N_FN) {
      void *copy = malloc(n->bytes ? n->bytes : 1);
      if (copy == NULL) {
        e = cudaErrorMemoryAllocation;
        break;
      }
      memcpy(copy, n->arg, n->bytes);
      e = enqueue_locked(ls, OP_FN, n->fn, copy, NULL);
    } else if (n->kind == N_RECORD) {
      e = enqueue_locked(ls, OP_NOP, NULL, NULL, &ev[n->ev]);
    } else {
      e = wait_op_locked(ls, ev[n->ev]);
    }
  }
  for (int l = 1; e == cudaSuccess && l < ge->nlanes; l++)
    if (started[l]) e = wait_op_locked(s, ge->lanes[l]->last);
  for (int k = 0; ev != NULL && k < ge->nevents; k++) mark_unref(ev[k]);
  mark_unref(fork);
  free(ev);
  free(started);
  unlock();
  return ret(e);
}
