/*
 * nccl-compare: one-rank figures of NCCL-ABI libraries, side by side.
 *
 *   nccl-compare --lib build/lib/libnccl.so.2 --lib /path/to/nvidia/libnccl.so.2
 *                [--json FILE] [--quick] [--init-reps N] [--device N]
 *                [--timeout SEC]
 *
 * Each library is loaded with dlopen (RTLD_LOCAL) in a fresh child process
 * of its own, since two libnccl.so.2 must never share a process; this
 * program is not linked to any libnccl. In the child, after the CUDA context
 * exists (cudaFree(0)), it measures:
 *   - ncclCommInitRank for one rank (ncclGetUniqueId + ncclCommInitRank):
 *     the first communicator of the process, then the median of --init-reps
 *     more fresh ones (each destroyed before the next);
 *   - device memory a communicator takes: cudaMemGetInfo before the first
 *     init, and after it plus one warm-up all-reduce of every size; also
 *     after all timings, and after ncclCommDestroy (what stays behind);
 *   - time per ncclAllReduce (float, sum, out of place) at 8 B, 64 KiB and
 *     256 MiB: warm-up, then rounds of many calls between two CUDA events on
 *     one stream (median of the rounds), and the same from a CUDA graph of
 *     K captured calls launched L times; every size's result is checked
 *     (one rank: output == input, bit for bit, and nothing written past it);
 *   - B, the device-to-device copy bandwidth: cudaMemcpyAsync of 1 GiB
 *     between two device buffers, (bytes read + bytes written) / time.
 * The parent prints a table, and writes the figures to --json FILE.
 *
 * Exit status: 0 when every library was measured, or when no GPU is visible
 * (a "SKIP" line says so); 1 when a library failed (the message names the
 * call); 2 for bad arguments.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "nccl.h"

#define MAX_LIBS 8
#define MAX_REPS 32
#define NSIZES 3
#define D2D_BYTES ((size_t)1 << 30)
#define D2D_REPS 10
/* Bytes past the largest message that must stay untouched. */
#define TAIL_BYTES 4096

static const size_t sizes[NSIZES] = {8, (size_t)64 << 10, (size_t)256 << 20};

typedef enum { RES_NONE = 0, RES_OK, RES_SKIP, RES_ERROR } res_status_t;

typedef struct {
  size_t bytes;
  int correct;        /* output == input and the tail untouched */
  int iters;          /* calls per stream round */
  int rounds;
  double stream_us;   /* median over rounds of time per call */
  double stream_min_us;
  int graph_calls;    /* calls captured in the graph */
  int graph_launches; /* launches per timed round */
  double graph_us;    /* median over rounds of time per call */
  double graph_min_us;
} ar_result_t;

/* Everything a child measures; sent to the parent as plain bytes. */
typedef struct {
  res_status_t status;
  char error[1024];   /* the first failure (or the reason for a skip) */
  char path[PATH_MAX];
  int version;        /* ncclGetVersion */
  char device[256];
  int cc_major, cc_minor;
  int driver, runtime;
  unsigned long long total_mem;
  double init_first_ms;
  int init_n;                     /* samples after the first */
  double init_ms[MAX_REPS];
  double init_median_ms, init_min_ms;
  long long mem_free_before;      /* cudaMemGetInfo free bytes */
  long long mem_free_after_init;  /* after init + one warm-up call per size */
  long long mem_free_after_runs;  /* after every timing (graphs destroyed) */
  long long mem_free_after_destroy;
  ar_result_t ar[NSIZES];
  double d2d_gbps, d2d_max_gbps;  /* median and best of D2D_REPS copies */
  int done;                       /* how far the child got, for messages */
} lib_result_t;

typedef struct {
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                             ncclComm_t, cudaStream_t);
  const char *(*get_error_string)(ncclResult_t);
  const char *(*get_last_error)(ncclComm_t); /* optional */
} api_t;

typedef struct {
  const char *libs[MAX_LIBS];
  int nlibs;
  const char *json;
  int quick;
  int init_reps;
  int device;
  int timeout_s;
} opts_t;

/* What the child holds; released in one place. */
typedef struct {
  const opts_t *o;
  api_t api;
  void *dl;
  lib_result_t *res;
  float *send, *recv;
  float *host_in, *host_out;
  void *d2d_src, *d2d_dst;
  cudaStream_t stream;
  cudaEvent_t ev[2];
  ncclComm_t comm;
} child_t;

static void res_fail(lib_result_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Records the first failure of a child and prints it at once. */
static void res_fail(lib_result_t *r, const char *fmt, ...) {
  char buf[sizeof(r->error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "nccl-compare: %s: %s\n", r->path, buf);
  if (r->status != RES_ERROR) {
    r->status = RES_ERROR;
    snprintf(r->error, sizeof(r->error), "%s", buf);
  }
}

#define CUDA_TRY(c, call, label)                                                   \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      res_fail((c)->res, "%s failed: %s (%s, %d)", #call, cudaGetErrorString(e_), \
               cudaGetErrorName(e_), (int)e_);                                    \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

#define NCCL_TRY(c, call, label)                                                  \
  do {                                                                            \
    ncclResult_t n_ = (call);                                                     \
    if (n_ != ncclSuccess) {                                                      \
      const char *last_ = (c)->api.get_last_error ? (c)->api.get_last_error(NULL) \
                                                  : NULL;                         \
      res_fail((c)->res, "%s failed: %s (%d)%s%s", #call,                         \
               (c)->api.get_error_string(n_), (int)n_,                           \
               last_ && last_[0] ? "; last error: " : "", last_ ? last_ : "");    \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of n values (sorts a copy). */
static double median(const double *v, int n) {
  double tmp[MAX_REPS];
  if (n <= 0) return NAN;
  memcpy(tmp, v, (size_t)n * sizeof(*v));
  qsort(tmp, (size_t)n, sizeof(*tmp), cmp_double);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static double minimum(const double *v, int n) {
  double m = INFINITY;
  for (int i = 0; i < n; i++)
    if (v[i] < m) m = v[i];
  return m;
}

/* ------------------------------------------------------------------ child */

/* Resolves the nccl* entry points; fails naming the first one missing. */
static int load_api(child_t *c) {
  static const struct {
    const char *name;
    size_t off;
    int optional;
  } syms[] = {
      {"ncclGetVersion", offsetof(api_t, get_version), 0},
      {"ncclGetUniqueId", offsetof(api_t, get_unique_id), 0},
      {"ncclCommInitRank", offsetof(api_t, comm_init_rank), 0},
      {"ncclCommDestroy", offsetof(api_t, comm_destroy), 0},
      {"ncclAllReduce", offsetof(api_t, all_reduce), 0},
      {"ncclGetErrorString", offsetof(api_t, get_error_string), 0},
      {"ncclGetLastError", offsetof(api_t, get_last_error), 1},
  };
  c->dl = dlopen(c->res->path, RTLD_NOW | RTLD_LOCAL);
  if (c->dl == NULL) {
    res_fail(c->res, "dlopen failed: %s", dlerror());
    return -1;
  }
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    dlerror();
    void *p = dlsym(c->dl, syms[i].name);
    if (p == NULL && !syms[i].optional) {
      const char *why = dlerror();
      res_fail(c->res, "symbol %s not found (%s): not an NCCL library", syms[i].name,
               why ? why : "NULL");
      return -1;
    }
    /* POSIX guarantees function pointers round-trip through void *. */
    memcpy((char *)&c->api + syms[i].off, &p, sizeof(p));
  }
  return 0;
}

/* A value per element that exposes wrong indexing: no zeros, no runs. */
static float input_value(size_t i) {
  return (float)((uint32_t)(i * 2654435761u) >> 21) + 0.5f;
}

/* One call of size `bytes` on c->comm, out of place. */
static ncclResult_t call_ar(child_t *c, size_t bytes) {
  return c->api.all_reduce(c->send, c->recv, bytes / sizeof(float), ncclFloat, ncclSum,
                           c->comm, c->stream);
}

/* Poisons the receive buffer and the bytes past the largest message. */
static int poison(child_t *c, int k) {
  int rc = -1;
  CUDA_TRY(c, cudaMemsetAsync(c->recv, 0xff, sizes[k] + TAIL_BYTES, c->stream), out);
  rc = 0;
out:
  return rc;
}

/* After a poison() and the calls under test: the output must equal the
 * input (one rank) and the bytes past it must stay poisoned. */
static int verify(child_t *c, int k, const char *how) {
  int rc = -1;
  size_t bytes = sizes[k];
  CUDA_TRY(c, cudaStreamSynchronize(c->stream), out);
  CUDA_TRY(c, cudaMemcpy(c->host_out, c->recv, bytes + TAIL_BYTES, cudaMemcpyDeviceToHost),
           out);
  int ok = memcmp(c->host_out, c->host_in, bytes) == 0;
  const unsigned char *tail = (const unsigned char *)c->host_out + bytes;
  for (size_t i = 0; i < TAIL_BYTES && ok; i++)
    if (tail[i] != 0xff) ok = 0;
  if (!ok) {
    res_fail(c->res, "ncclAllReduce of %zu bytes on one rank (%s) gave a wrong result: the "
             "output differs from the input, or bytes past it were written", bytes, how);
    goto out;
  }
  rc = 0;
out:
  return rc;
}

static int check_stream(child_t *c, int k) {
  int rc = -1;
  if (poison(c, k) != 0) goto out;
  NCCL_TRY(c, call_ar(c, sizes[k]), out);
  if (verify(c, k, "stream") != 0) goto out;
  rc = 0;
out:
  return rc;
}

/* Rounds of `iters` calls between two events; fills stream_us. */
static int time_stream(child_t *c, int k, int warm, int iters, int rounds) {
  int rc = -1;
  double per[MAX_REPS];
  ar_result_t *ar = &c->res->ar[k];
  for (int i = 0; i < warm; i++) NCCL_TRY(c, call_ar(c, sizes[k]), out);
  CUDA_TRY(c, cudaStreamSynchronize(c->stream), out);
  for (int r = 0; r < rounds; r++) {
    CUDA_TRY(c, cudaEventRecord(c->ev[0], c->stream), out);
    for (int i = 0; i < iters; i++) NCCL_TRY(c, call_ar(c, sizes[k]), out);
    CUDA_TRY(c, cudaEventRecord(c->ev[1], c->stream), out);
    CUDA_TRY(c, cudaEventSynchronize(c->ev[1]), out);
    float ms = 0;
    CUDA_TRY(c, cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]), out);
    per[r] = (double)ms * 1e3 / iters;
  }
  ar->iters = iters;
  ar->rounds = rounds;
  ar->stream_us = median(per, rounds);
  ar->stream_min_us = minimum(per, rounds);
  rc = 0;
out:
  return rc;
}

/* A graph of `calls` captured calls, launched `launches` times per round. */
static int time_graph(child_t *c, int k, int calls, int launches, int rounds) {
  int rc = -1;
  double per[MAX_REPS];
  ar_result_t *ar = &c->res->ar[k];
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int capturing = 0;
  CUDA_TRY(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal), out);
  capturing = 1;
  for (int i = 0; i < calls; i++) NCCL_TRY(c, call_ar(c, sizes[k]), out);
  capturing = 0;
  CUDA_TRY(c, cudaStreamEndCapture(c->stream, &graph), out);
  CUDA_TRY(c, cudaGraphInstantiate(&exec, graph, 0), out);
  CUDA_TRY(c, cudaGraphLaunch(exec, c->stream), out); /* warm-up */
  CUDA_TRY(c, cudaStreamSynchronize(c->stream), out);
  for (int r = 0; r < rounds; r++) {
    CUDA_TRY(c, cudaEventRecord(c->ev[0], c->stream), out);
    for (int l = 0; l < launches; l++) CUDA_TRY(c, cudaGraphLaunch(exec, c->stream), out);
    CUDA_TRY(c, cudaEventRecord(c->ev[1], c->stream), out);
    CUDA_TRY(c, cudaEventSynchronize(c->ev[1]), out);
    float ms = 0;
    CUDA_TRY(c, cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]), out);
    per[r] = (double)ms * 1e3 / ((double)launches * calls);
  }
  /* The replays must compute the right result too. */
  if (poison(c, k) != 0) goto out;
  CUDA_TRY(c, cudaGraphLaunch(exec, c->stream), out);
  if (verify(c, k, "graph replay") != 0) goto out;
  ar->graph_calls = calls;
  ar->graph_launches = launches;
  ar->graph_us = median(per, rounds);
  ar->graph_min_us = minimum(per, rounds);
  rc = 0;
out:
  if (capturing) {
    /* End a capture a failed call left open, so the stream is usable. */
    cudaGraph_t g = NULL;
    if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g != NULL) cudaGraphDestroy(g);
    cudaGetLastError();
  }
  if (exec != NULL) cudaGraphExecDestroy(exec);
  if (graph != NULL) cudaGraphDestroy(graph);
  return rc;
}

/* One communicator of one rank, timed from ncclGetUniqueId to the return
 * of ncclCommInitRank. */
static int init_comm(child_t *c, double *ms_out) {
  int rc = -1;
  ncclUniqueId id;
  double t0 = now_ms();
  NCCL_TRY(c, c->api.get_unique_id(&id), out);
  NCCL_TRY(c, c->api.comm_init_rank(&c->comm, 1, id, 0), out);
  *ms_out = now_ms() - t0;
  rc = 0;
out:
  return rc;
}

static int mem_free(child_t *c, long long *free_out) {
  int rc = -1;
  size_t fr = 0, total = 0;
  CUDA_TRY(c, cudaMemGetInfo(&fr, &total), out);
  *free_out = (long long)fr;
  c->res->total_mem = total;
  rc = 0;
out:
  return rc;
}

static int measure_d2d(child_t *c) {
  int rc = -1;
  double gbps[D2D_REPS];
  CUDA_TRY(c, cudaMalloc(&c->d2d_src, D2D_BYTES), out);
  CUDA_TRY(c, cudaMalloc(&c->d2d_dst, D2D_BYTES), out);
  CUDA_TRY(c, cudaMemsetAsync(c->d2d_src, 0x5a, D2D_BYTES, c->stream), out);
  for (int i = 0; i < 2; i++)
    CUDA_TRY(c, cudaMemcpyAsync(c->d2d_dst, c->d2d_src, D2D_BYTES, cudaMemcpyDeviceToDevice,
                                c->stream), out);
  for (int r = 0; r < D2D_REPS; r++) {
    CUDA_TRY(c, cudaEventRecord(c->ev[0], c->stream), out);
    CUDA_TRY(c, cudaMemcpyAsync(c->d2d_dst, c->d2d_src, D2D_BYTES, cudaMemcpyDeviceToDevice,
                                c->stream), out);
    CUDA_TRY(c, cudaEventRecord(c->ev[1], c->stream), out);
    CUDA_TRY(c, cudaEventSynchronize(c->ev[1]), out);
    float ms = 0;
    CUDA_TRY(c, cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]), out);
    /* Bytes read plus bytes written, in 10^9 bytes per second. */
    gbps[r] = 2.0 * (double)D2D_BYTES / ((double)ms * 1e-3) / 1e9;
  }
  c->res->d2d_gbps = median(gbps, D2D_REPS);
  double best = 0;
  for (int r = 0; r < D2D_REPS; r++)
    if (gbps[r] > best) best = gbps[r];
  c->res->d2d_max_gbps = best;
  rc = 0;
out:
  return rc;
}

/* Sets up the device and buffers; returns 1 for "no GPU" (res says why). */
static int setup(child_t *c) {
  int rc = -1, n = 0;
  lib_result_t *r = c->res;
  size_t big = sizes[NSIZES - 1];
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    r->status = RES_SKIP;
    snprintf(r->error, sizeof(r->error), "no GPU visible (cudaGetDeviceCount: %s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 1;
  }
  if (c->o->device >= n) {
    res_fail(r, "--device %d: only %d GPU%s visible", c->o->device, n, n > 1 ? "s" : "");
    goto out;
  }
  CUDA_TRY(c, cudaSetDevice(c->o->device), out);
  CUDA_TRY(c, cudaFree(0), out); /* the context, before anything is timed */
  struct cudaDeviceProp prop;
  CUDA_TRY(c, cudaGetDeviceProperties(&prop, c->o->device), out);
  snprintf(r->device, sizeof(r->device), "%s", prop.name);
  r->cc_major = prop.major;
  r->cc_minor = prop.minor;
  CUDA_TRY(c, cudaDriverGetVersion(&r->driver), out);
  CUDA_TRY(c, cudaRuntimeGetVersion(&r->runtime), out);
  CUDA_TRY(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), out);
  CUDA_TRY(c, cudaEventCreate(&c->ev[0]), out);
  CUDA_TRY(c, cudaEventCreate(&c->ev[1]), out);
  CUDA_TRY(c, cudaMalloc((void **)&c->send, big), out);
  CUDA_TRY(c, cudaMalloc((void **)&c->recv, big + TAIL_BYTES), out);
  c->host_in = malloc(big);
  c->host_out = malloc(big + TAIL_BYTES);
  if (c->host_in == NULL || c->host_out == NULL) {
    res_fail(r, "malloc of %zu bytes of host memory failed", big);
    goto out;
  }
  for (size_t i = 0; i < big / sizeof(float); i++) c->host_in[i] = input_value(i);
  CUDA_TRY(c, cudaMemcpy(c->send, c->host_in, big, cudaMemcpyHostToDevice), out);
  rc = 0;
out:
  return rc;
}

static void teardown(child_t *c) {
  if (c->comm != NULL) c->api.comm_destroy(c->comm);
  c->comm = NULL;
  if (c->d2d_src) cudaFree(c->d2d_src);
  if (c->d2d_dst) cudaFree(c->d2d_dst);
  if (c->send) cudaFree(c->send);
  if (c->recv) cudaFree(c->recv);
  if (c->ev[0]) cudaEventDestroy(c->ev[0]);
  if (c->ev[1]) cudaEventDestroy(c->ev[1]);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c->host_in);
  free(c->host_out);
  /* The library stays loaded: its destructors may still run at exit. */
}

/* Everything for one library, in this (child) process. */
static void measure(const opts_t *o, lib_result_t *r) {
  child_t c;
  memset(&c, 0, sizeof(c));
  c.o = o;
  c.res = r;
  int quick = o->quick;
  int rounds = quick ? 3 : 7;
  if (load_api(&c) != 0) goto out;
  NCCL_TRY(&c, c.api.get_version(&r->version), out);
  int s = setup(&c);
  if (s != 0) goto out;
  fprintf(stderr, "nccl-compare: %s: version %d on %s\n", r->path, r->version, r->device);

  /* Memory: everything of ours is allocated; only the library's changes. */
  if (mem_free(&c, &r->mem_free_before) != 0) goto out;
  if (init_comm(&c, &r->init_first_ms) != 0) goto out;
  for (int k = 0; k < NSIZES; k++) NCCL_TRY(&c, call_ar(&c, sizes[k]), out);
  CUDA_TRY(&c, cudaStreamSynchronize(c.stream), out);
  if (mem_free(&c, &r->mem_free_after_init) != 0) goto out;
  r->done = 1;

  for (int k = 0; k < NSIZES; k++) {
    int large = sizes[k] >= ((size_t)1 << 20);
    if (check_stream(&c, k) != 0) goto out;
    if (time_stream(&c, k, large ? 5 : 50, large ? (quick ? 10 : 50) : (quick ? 200 : 2000),
                    rounds) != 0)
      goto out;
    if (time_graph(&c, k, large ? 10 : 100, large ? (quick ? 1 : 5) : (quick ? 2 : 20),
                   rounds) != 0)
      goto out;
    r->ar[k].correct = 1;
    fprintf(stderr, "nccl-compare: %s: %zu B: %.2f us per call (stream), %.2f us (graph)\n",
            r->path, sizes[k], r->ar[k].stream_us, r->ar[k].graph_us);
  }
  CUDA_TRY(&c, cudaStreamSynchronize(c.stream), out);
  if (mem_free(&c, &r->mem_free_after_runs) != 0) goto out;
  r->done = 2;

  NCCL_TRY(&c, c.api.comm_destroy(c.comm), out);
  c.comm = NULL;
  CUDA_TRY(&c, cudaDeviceSynchronize(), out);
  if (mem_free(&c, &r->mem_free_after_destroy) != 0) goto out;

  /* More fresh communicators: init timed, destroy not. */
  for (int i = 0; i < o->init_reps; i++) {
    if (init_comm(&c, &r->init_ms[i]) != 0) goto out;
    NCCL_TRY(&c, c.api.comm_destroy(c.comm), out);
    c.comm = NULL;
    r->init_n = i + 1;
  }
  r->init_median_ms = median(r->init_ms, r->init_n);
  r->init_min_ms = minimum(r->init_ms, r->init_n);
  r->done = 3;

  if (measure_d2d(&c) != 0) goto out;
  r->done = 4;
  r->status = RES_OK;
out:
  if (r->status == RES_NONE) res_fail(r, "stopped without a result (internal error)");
  teardown(&c);
}

/* ----------------------------------------------------------------- parent */

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Runs measure() for one library in a child; waits at most timeout_s. */
static void run_child(const opts_t *o, const char *path, lib_result_t *r) {
  int fds[2];
  memset(r, 0, sizeof(*r));
  snprintf(r->path, sizeof(r->path), "%s", path);
  if (pipe(fds) != 0) {
    res_fail(r, "pipe failed: %s", strerror(errno));
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    res_fail(r, "fork failed: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    measure(o, r);
    int bad = write_all(fds[1], r, sizeof(*r)) != 0;
    close(fds[1]);
    fflush(stdout);
    fflush(stderr);
    /* _exit: the library's and CUDA's destructors are not this tool's to
     * judge; what matters was measured. */
    _exit(bad ? 3 : 0);
  }
  close(fds[1]);
  /* Read with a deadline: a hung library must not hang the benchmark. */
  size_t got = 0;
  double deadline = now_ms() + o->timeout_s * 1e3;
  int timed_out = 0;
  while (got < sizeof(*r)) {
    double left = deadline - now_ms();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fds[0], &set);
    struct timeval tv = {.tv_sec = (long)(left / 1e3),
                         .tv_usec = (long)((left - (long)(left / 1e3) * 1e3) * 1e3)};
    int sel = select(fds[0] + 1, &set, NULL, NULL, &tv);
    if (sel < 0 && errno == EINTR) continue;
    if (sel <= 0) continue;
    ssize_t n = read(fds[0], (char *)r + got, sizeof(*r) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  /* The child exits right after reporting; give it what is left of the
   * deadline (at least 10 s) to do so, then kill it. */
  int st = 0;
  double exit_by = deadline > now_ms() + 10e3 ? deadline : now_ms() + 10e3;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    if (w == 0 && now_ms() > exit_by) {
      fprintf(stderr, "nccl-compare: %s: the child did not exit after reporting; killed\n",
              path);
      kill(pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    usleep(10000);
  }
  if (got == sizeof(*r) && !timed_out) return;
  memset(r, 0, sizeof(*r));
  snprintf(r->path, sizeof(r->path), "%s", path);
  if (timed_out)
    res_fail(r, "no result after %d s (--timeout): the library hung; the child was killed",
             o->timeout_s);
  else if (WIFSIGNALED(st))
    res_fail(r, "the child measuring it died of signal %d (%s)", WTERMSIG(st),
             strsignal(WTERMSIG(st)));
  else
    res_fail(r, "the child measuring it exited with status %d before reporting",
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static double mib(long long bytes) { return (double)bytes / (1024.0 * 1024.0); }

static void print_row(const char *label, const lib_result_t *res, int n, int which, int k) {
  printf("%-34s", label);
  for (int i = 0; i < n; i++) {
    const lib_result_t *r = &res[i];
    char cell[64] = "-";
    if (r->status == RES_OK) {
      switch (which) {
      case 0: snprintf(cell, sizeof(cell), "%d", r->version); break;
      case 1: snprintf(cell, sizeof(cell), "%.2f", r->init_first_ms); break;
      case 2: snprintf(cell, sizeof(cell), "%.2f", r->init_median_ms); break;
      case 3:
        snprintf(cell, sizeof(cell), "%.1f", mib(r->mem_free_before - r->mem_free_after_init));
        break;
      case 4:
        snprintf(cell, sizeof(cell), "%.1f", mib(r->mem_free_before - r->mem_free_after_runs));
        break;
      case 5:
        snprintf(cell, sizeof(cell), "%.1f",
                 mib(r->mem_free_before - r->mem_free_after_destroy));
        break;
      case 6: snprintf(cell, sizeof(cell), "%.2f", r->ar[k].stream_us); break;
      case 7: snprintf(cell, sizeof(cell), "%.2f", r->ar[k].graph_us); break;
      case 8: snprintf(cell, sizeof(cell), "%.0f", r->d2d_gbps); break;
      default: break;
      }
    } else if (which == 0) {
      snprintf(cell, sizeof(cell), "%s", r->status == RES_SKIP ? "skipped" : "FAILED");
    }
    printf("  %20s", cell);
  }
  printf("\n");
}

static void print_table(const lib_result_t *res, int n) {
  const lib_result_t *first = NULL;
  for (int i = 0; i < n && first == NULL; i++)
    if (res[i].status == RES_OK) first = &res[i];
  if (first == NULL) {
    for (int i = 0; i < n; i++)
      printf("# lib %d: %s %s: %s\n", i + 1, res[i].path,
             res[i].status == RES_SKIP ? "skipped" : "FAILED", res[i].error);
    return;
  }
  printf("# device %s (sm_%d%d), %.1f GiB, driver API %d, runtime %d\n", first->device,
           first->cc_major, first->cc_minor, (double)first->total_mem / (1 << 30),
           first->driver, first->runtime);
  for (int i = 0; i < n; i++) printf("# lib %d: %s\n", i + 1, res[i].path);
  printf("%-34s", "one rank, float sum, out of place");
  for (int i = 0; i < n; i++) printf("  %14s lib %d", "", i + 1);
  printf("\n");
  print_row("ncclGetVersion", res, n, 0, 0);
  print_row("init, first comm (ms)", res, n, 1, 0);
  print_row("init, median of fresh comms (ms)", res, n, 2, 0);
  print_row("device memory, comm (MiB)", res, n, 3, 0);
  print_row("device memory, after runs (MiB)", res, n, 4, 0);
  print_row("device memory, after destroy (MiB)", res, n, 5, 0);
  for (int k = 0; k < NSIZES; k++) {
    char label[64];
    const char *unit = sizes[k] >= (1u << 20) ? "MiB" : sizes[k] >= 1024 ? "KiB" : "B";
    size_t v = sizes[k] >= (1u << 20) ? sizes[k] >> 20 : sizes[k] >= 1024 ? sizes[k] >> 10
                                                                          : sizes[k];
    snprintf(label, sizeof(label), "all-reduce %zu %s, stream (us)", v, unit);
    print_row(label, res, n, 6, k);
    snprintf(label, sizeof(label), "all-reduce %zu %s, graph (us)", v, unit);
    print_row(label, res, n, 7, k);
  }
  print_row("D2D copy B, 1 GiB (GB/s, r+w)", res, n, 8, 0);
  for (int i = 0; i < n; i++)
    if (res[i].status == RES_ERROR) printf("# lib %d FAILED: %s\n", i + 1, res[i].error);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6f", v);
  else fprintf(f, "null");
}

static int write_json(const char *path, const lib_result_t *res, int n, const opts_t *o) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "nccl-compare: cannot write --json %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"tool\": \"nccl-compare\",\n  \"quick\": %s,\n  \"libraries\": [",
          o->quick ? "true" : "false");
  for (int i = 0; i < n; i++) {
    const lib_result_t *r = &res[i];
    static const char *names[] = {"none", "ok", "skip", "error"};
    fprintf(f, "%s\n    {\"path\": ", i ? "," : "");
    json_str(f, r->path);
    fprintf(f, ", \"status\": \"%s\", \"error\": ", names[r->status]);
    if (r->status == RES_OK) fprintf(f, "null");
    else json_str(f, r->error);
    if (r->status != RES_OK) {
      fprintf(f, "}");
      continue;
    }
    fprintf(f, ",\n     \"version\": %d, \"device\": ", r->version);
    json_str(f, r->device);
    fprintf(f, ", \"cc\": \"%d.%d\", \"driver\": %d, \"runtime\": %d, \"total_mem\": %llu,\n",
            r->cc_major, r->cc_minor, r->driver, r->runtime, r->total_mem);
    fprintf(f, "     \"init_ms\": {\"first\": ");
    json_num(f, r->init_first_ms);
    fprintf(f, ", \"median\": ");
    json_num(f, r->init_median_ms);
    fprintf(f, ", \"min\": ");
    json_num(f, r->init_min_ms);
    fprintf(f, ", \"samples\": [");
    for (int s = 0; s < r->init_n; s++) {
      if (s) fprintf(f, ", ");
      json_num(f, r->init_ms[s]);
    }
    fprintf(f, "]},\n     \"mem_free\": {\"before\": %lld, \"after_init\": %lld, "
               "\"after_runs\": %lld, \"after_destroy\": %lld},\n",
            r->mem_free_before, r->mem_free_after_init, r->mem_free_after_runs,
            r->mem_free_after_destroy);
    fprintf(f, "     \"comm_mem_bytes\": %lld,\n",
            r->mem_free_before - r->mem_free_after_init);
    fprintf(f, "     \"allreduce\": [");
    for (int k = 0; k < NSIZES; k++) {
      const ar_result_t *a = &r->ar[k];
      fprintf(f, "%s\n       {\"bytes\": %zu, \"correct\": %s, \"iters\": %d, \"rounds\": %d, "
                 "\"stream_us\": ",
              k ? "," : "", sizes[k], a->correct ? "true" : "false", a->iters, a->rounds);
      json_num(f, a->stream_us);
      fprintf(f, ", \"stream_min_us\": ");
      json_num(f, a->stream_min_us);
      fprintf(f, ", \"graph_calls\": %d, \"graph_launches\": %d, \"graph_us\": ",
              a->graph_calls, a->graph_launches);
      json_num(f, a->graph_us);
      fprintf(f, ", \"graph_min_us\": ");
      json_num(f, a->graph_min_us);
      fprintf(f, "}");
    }
    fprintf(f, "],\n     \"d2d\": {\"bytes\": %zu, \"reps\": %d, \"gbps\": ", D2D_BYTES,
            D2D_REPS);
    json_num(f, r->d2d_gbps);
    fprintf(f, ", \"max_gbps\": ");
    json_num(f, r->d2d_max_gbps);
    fprintf(f, "}}");
  }
  fprintf(f, "\n  ]\n}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "nccl-compare: writing --json %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: nccl-compare --lib PATH [--lib PATH ...] [--json FILE] [--quick]\n"
          "                    [--init-reps N] [--device N] [--timeout SEC]\n"
          "Loads each NCCL-ABI library (dlopen) in a child process of its own and\n"
          "measures, on one rank: ncclCommInitRank time, device memory per\n"
          "communicator, time per ncclAllReduce at 8 B, 64 KiB, 256 MiB (stream and\n"
          "CUDA graph), and the device-to-device copy bandwidth.\n"
          "  --lib PATH      a libnccl.so.2 (up to %d)\n"
          "  --json FILE     also write the figures as JSON\n"
          "  --quick         fewer iterations (a smoke run)\n"
          "  --init-reps N   fresh communicators timed after the first (default 5, max %d)\n"
          "  --device N      the GPU to use (default 0)\n"
          "  --timeout SEC   give up on a library after SEC seconds (default 300)\n",
          MAX_LIBS, MAX_REPS);
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "nccl-compare: %s wants an integer from %d to %d, not '%s'\n", flag, lo,
            hi, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_args(int argc, char **argv, opts_t *o) {
  static const struct option longs[] = {
      {"lib", required_argument, 0, 'l'},      {"json", required_argument, 0, 'j'},
      {"quick", no_argument, 0, 'q'},          {"init-reps", required_argument, 0, 'r'},
      {"device", required_argument, 0, 'd'},   {"timeout", required_argument, 0, 't'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  memset(o, 0, sizeof(*o));
  o->init_reps = 5;
  o->timeout_s = 300;
  int ch;
  opterr = 0;
  /* A leading ':' makes a missing value ':' rather than '?'. */
  while ((ch = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
    switch (ch) {
    case 'l':
      if (o->nlibs == MAX_LIBS) {
        fprintf(stderr, "nccl-compare: at most %d --lib\n", MAX_LIBS);
        return -1;
      }
      o->libs[o->nlibs++] = optarg;
      break;
    case 'j': o->json = optarg; break;
    case 'q': o->quick = 1; break;
    case 'r':
      if (parse_int("--init-reps", optarg, 1, MAX_REPS, &o->init_reps) != 0) return -1;
      break;
    case 'd':
      if (parse_int("--device", optarg, 0, 1023, &o->device) != 0) return -1;
      break;
    case 't':
      if (parse_int("--timeout", optarg, 1, 86400, &o->timeout_s) != 0) return -1;
      break;
    case 'h': usage(stdout); exit(0);
    case ':':
      fprintf(stderr, "nccl-compare: %s needs a value\n", argv[optind - 1]);
      usage(stderr);
      return -1;
    default:
      fprintf(stderr, "nccl-compare: unknown option %s\n", argv[optind - 1]);
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "nccl-compare: unexpected argument '%s' (libraries go after --lib)\n",
            argv[optind]);
    return -1;
  }
  if (o->nlibs == 0) {
    fprintf(stderr, "nccl-compare: no library given: pass --lib PATH (a libnccl.so.2), "
                    "once per library to compare\n");
    usage(stderr);
    return -1;
  }
  for (int i = 0; i < o->nlibs; i++) {
    if (access(o->libs[i], R_OK) != 0) {
      fprintf(stderr, "nccl-compare: cannot read --lib %s: %s\n", o->libs[i],
              strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* Measures every --lib in its own child; see the file comment. */
int main(int argc, char **argv) {
  opts_t o;
  static lib_result_t res[MAX_LIBS];
  if (parse_args(argc, argv, &o) != 0) return 2;
  int errors = 0, skipped = 0;
  for (int i = 0; i < o.nlibs; i++) {
    run_child(&o, o.libs[i], &res[i]);
    if (res[i].status == RES_ERROR) errors++;
    if (res[i].status == RES_SKIP) skipped++;
  }
  if (skipped > 0 && errors == 0) {
    int i = 0;
    while (res[i].status != RES_SKIP) i++;
    printf("SKIP: nccl-compare: %s; nothing measured\n", res[i].error);
  } else {
    print_table(res, o.nlibs);
  }
  if (o.json != NULL && write_json(o.json, res, o.nlibs, &o) != 0) errors++;
  return errors ? 1 : 0;
}
