/*
 * Test helper: host or CUDA buffers and streams for end-to-end tests (see
 * tdev.h). Every CUDA call is behind #if BRAID_CUDA: CUDA=0 builds have no
 * CUDA header, and this file is linked into every test program.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "tdev.h"

#ifndef BRAID_CUDA
#define BRAID_CUDA 0
#endif

static _Thread_local char err_text[256];
static _Atomic int cuda_touched;

#if BRAID_CUDA
/* CUDA mode caches freed buffers instead of calling cudaFree, which
 * synchronises the whole device: with ranks as threads sharing a GPU, a
 * rank freeing a buffer while a peer's kernel already waits for this
 * rank's next launch would deadlock until BRAID_TIMEOUT. (Applications
 * avoid it the same way, with a caching allocator.) Sizes are rounded up
 * to a power of two so blocks are reused by exact size. */
typedef struct block {
  void *p;
  size_t size;
  struct block *next;
} block_t;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *pool_live;   /* handed out */
static block_t *pool_cached; /* freed, ready for reuse */

static size_t size_class(size_t bytes) {
  size_t c = 256;
  while (c < bytes) c <<= 1;
  return c;
}
#endif

static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(err_text, sizeof(err_text), fmt, ap);
  va_end(ap);
}

/* See tdev.h. */
tdev_kind_t tdev_kind(void) {
  const char *mode = getenv("BRAID_DEVICE");
  if (mode != NULL && strcmp(mode, "host") == 0) return TDEV_HOST;
  return BRAID_CUDA ? TDEV_CUDA : TDEV_HOST;
}

/* See tdev.h. */
const char *tdev_kind_name(void) { return tdev_kind() == TDEV_CUDA ? "cuda" : "host"; }

/* See tdev.h. */
int tdev_quick(void) {
  const char *q = getenv("BRAID_TEST_QUICK");
  return q != NULL && q[0] != '\0' && strcmp(q, "0") != 0;
}

/* See tdev.h. */
int tdev_usable(char *why, size_t whylen) {
  const char *mode = getenv("BRAID_DEVICE");
  if (!BRAID_CUDA && mode != NULL && strcmp(mode, "cuda") == 0) {
    snprintf(why, whylen, "BRAID_DEVICE=cuda but this build has no CUDA (CUDA=0)");
    return 0;
  }
  if (tdev_kind() == TDEV_HOST) return 1;
#if BRAID_CUDA
  /* Ask a child: a process that initialised CUDA cannot fork ranks that
   * use it, and the caller may want to. */
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(why, whylen, "pipe for the CUDA probe failed");
    return 0;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    snprintf(why, whylen, "fork for the CUDA probe failed");
    return 0;
  }
  if (pid == 0) {
    char msg[200] = "";
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
      snprintf(msg, sizeof(msg), "no CUDA device is visible (cudaGetDeviceCount: %s)",
               cudaGetErrorString(e));
    else if (n == 0)
      snprintf(msg, sizeof(msg), "no CUDA device is visible (cudaGetDeviceCount: 0 devices)");
    (void)!write(fds[1], msg, strlen(msg) + 1);
    _exit(msg[0] == '\0' ? 0 : 1);
  }
  close(fds[1]);
  char msg[200] = "";
  ssize_t got = read(fds[0], msg, sizeof(msg) - 1);
  close(fds[0]);
  int st = 0;
  (void)waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
  if (got > 0 && msg[0] != '\0')
    snprintf(why, whylen, "%s", msg);
  else
    snprintf(why, whylen, "the CUDA probe process died (status %d)", st);
  return 0;
#else
  snprintf(why, whylen, "this build has no CUDA");
  return 0;
#endif
}

/* See tdev.h. */
void *tdev_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (tdev_kind() == TDEV_HOST) {
    void *p = malloc(bytes);
    if (p == NULL) set_error("out of host memory allocating %zu bytes", bytes);
    return p;
  }
#if BRAID_CUDA
  atomic_store(&cuda_touched, 1);
  size_t size = size_class(bytes);
  block_t *b = NULL;
  pthread_mutex_lock(&pool_lock);
  for (block_t **at = &pool_cached; *at != NULL; at = &(*at)->next) {
    if ((*at)->size == size) {
      b = *at;
      *at = b->next;
      break;
    }
  }
  pthread_mutex_unlock(&pool_lock);
  if (b == NULL) {
    b = malloc(sizeof(*b));
    if (b == NULL) {
      set_error("out of host memory");
      return NULL;
    }
    b->size = size;
    b->p = NULL;
    cudaError_t e = cudaMallocManaged(&b->p, size, cudaMemAttachGlobal);
    if (e != cudaSuccess) {
      set_error("cudaMallocManaged of %zu bytes failed: %s", size, cudaGetErrorString(e));
      (void)cudaGetLastError();
      free(b);
      return NULL;
    }
  }
  pthread_mutex_lock(&pool_lock);
  b->next = pool_live;
  pool_live = b;
  pthread_mutex_unlock(&pool_lock);
  return b->p;
#else
  return NULL;
#endif
}

/* See tdev.h. */
void tdev_free(void *p) {
  if (p == NULL) return;
  if (tdev_kind() == TDEV_HOST) {
    free(p);
    return;
  }
#if BRAID_CUDA
  pthread_mutex_lock(&pool_lock);
  for (block_t **at = &pool_live; *at != NULL; at = &(*at)->next) {
    if ((*at)->p == p) {
      block_t *b = *at;
      *at = b->next;
      b->next = pool_cached;
      pool_cached = b;
      break;
    }
  }
  pthread_mutex_unlock(&pool_lock);
#endif
}

/* See tdev.h. */
void *tdev_host_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (tdev_kind() == TDEV_HOST) {
    void *p = calloc(1, bytes);
    if (p == NULL) set_error("out of host memory allocating %zu bytes", bytes);
    return p;
  }
#if BRAID_CUDA
  atomic_store(&cuda_touched, 1);
  void *p = NULL;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    set_error("cudaMallocHost of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return NULL;
  }
  memset(p, 0, bytes);
  return p;
#else
  return NULL;
#endif
}

/* See tdev.h. */
void tdev_host_free(void *p) {
  if (p == NULL) return;
  if (tdev_kind() == TDEV_HOST) {
    free(p);
    return;
  }
#if BRAID_CUDA
  if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
#endif
}

/* See tdev.h. */
int tdev_device_count(void) {
  if (tdev_kind() == TDEV_HOST) return 0;
#if BRAID_CUDA
  int n = 0;
  atomic_store(&cuda_touched, 1);
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

/* See tdev.h. */
int tdev_device_per_rank(int rank) {
  if (tdev_kind() == TDEV_HOST) return 0;
#if BRAID_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (rank >= n || cudaSetDevice(rank) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  atomic_store(&cuda_touched, 1);
  return 1;
#else
  (void)rank;
  return 0;
#endif
}

/* See tdev.h. */
int tdev_stream_create(cudaStream_t *stream_out) {
  if (tdev_kind() == TDEV_HOST) {
    *stream_out = NULL;
    return 0;
  }
#if BRAID_CUDA
  atomic_store(&cuda_touched, 1);
  cudaStream_t s = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    set_error("cudaStreamCreateWithFlags failed: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
  }
  *stream_out = s;
  return 0;
#else
  return -1;
#endif
}

/* See tdev.h. */
void tdev_stream_destroy(cudaStream_t stream) {
  if (stream == NULL || tdev_kind() == TDEV_HOST) return;
#if BRAID_CUDA
  (void)cudaStreamDestroy(stream);
#endif
}

#if BRAID_CUDA
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* See tdev.h. */
int tdev_stream_sync(cudaStream_t stream, double timeout_s) {
  if (tdev_kind() == TDEV_HOST) return 0;
#if BRAID_CUDA
  atomic_store(&cuda_touched, 1);
  double deadline = now_s() + timeout_s;
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) {
      set_error("stream %p failed: %s", (void *)stream, cudaGetErrorString(e));
      (void)cudaGetLastError();
      return -1;
    }
    if (now_s() > deadline) {
      set_error("stream %p did not finish within %.0f s", (void *)stream, timeout_s);
      return -1;
    }
    struct timespec nap = {0, 200000};
    nanosleep(&nap, NULL);
  }
#else
  (void)stream;
  (void)timeout_s;
  return 0;
#endif
}

/* See tdev.h. */
const char *tdev_last_error(void) { return err_text; }

/* See tdev.h. */
int tdev_cuda_touched(void) { return atomic_load(&cuda_touched); }

/* See tdev.h. */
int tdev_rank_counts(int host_n, int quick_n, int out[4]) {
  static const int gpu[] = {1, 2, 4, 8};
  if (tdev_quick()) {
    out[0] = quick_n;
    return 1;
  }
  if (tdev_kind() == TDEV_HOST) {
    out[0] = host_n;
    return 1;
  }
  memcpy(out, gpu, sizeof(gpu));
  return 4;
}

typedef struct {
  tdev_rank_fn fn;
  ncclUniqueId id;
  int n, rank;
  int failures;
  char msg[256];
} rank_thread_t;

static void *rank_thread_main(void *p) {
  rank_thread_t *a = p;
  a->failures = a->fn(a->id, a->n, a->rank, a->msg, sizeof(a->msg));
  return NULL;
}

/* See tdev.h. */
int tdev_run_threads(int n, tdev_rank_fn fn, char *msg, size_t msglen) {
  pthread_t th[8];
  rank_thread_t args[8];
  ncclUniqueId id;
  int started = 0, failures = 0;
  msg[0] = '\0';
  if (n < 1 || n > 8) {
    snprintf(msg, msglen, "tdev_run_threads: %d ranks (1 to 8)", n);
    return 1;
  }
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    snprintf(msg, msglen, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    return 1;
  }
  for (; started < n; started++) {
    rank_thread_t *a = &args[started];
    memset(a, 0, sizeof(*a));
    a->fn = fn;
    a->id = id;
    a->n = n;
    a->rank = started;
    if (pthread_create(&th[started], NULL, rank_thread_main, a) != 0) {
      snprintf(msg, msglen, "cannot start the thread of rank %d", started);
      failures++;
      break;
    }
  }
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < started; k++) {
    if (args[k].failures == 0) continue;
    if (failures == 0 || msg[0] == '\0') snprintf(msg, msglen, "%s", args[k].msg);
    failures += args[k].failures;
  }
  return failures;
}

/* See tdev.h. */
int tdev_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream,
              double timeout_s) {
  if (bytes == 0) return 0;
  if (tdev_kind() == TDEV_HOST) {
    memcpy(dst, src, bytes);
    return 0;
  }
#if BRAID_CUDA
  atomic_store(&cuda_touched, 1);
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  if (e != cudaSuccess) {
    set_error("cudaMemcpyAsync of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
  }
  return tdev_stream_sync(stream, timeout_s);
#else
  (void)stream;
  (void)timeout_s;
  set_error("this build has no CUDA");
  return -1;
#endif
}

/* See tdev.h. */
int tdev_stage_host(int rank, int n) {
  const char *v = getenv("BRAID_TEST_HOSTS");
  int k = v != NULL ? atoi(v) : 0;
  if (k <= 1 || n <= 0) return 0;
  int host = rank * k / n;
  char id[32];
  snprintf(id, sizeof(id), "node-%d", host);
  setenv("BRAID_HOSTID", id, 1);
  return host;
}

/* See tdev.h. */
int tdev_id_pipes_open(tdev_id_pipes_t *p, int n) {
  p->n = 0;
  if (n < 1 || n > 8) {
    set_error("tdev_id_pipes_open: %d ranks (1 to 8)", n);
    return -1;
  }
  for (; p->n < n; p->n++) {
    if (pipe(p->fd[p->n]) != 0) {
      set_error("pipe for the unique id of rank %d failed", p->n);
      tdev_id_pipes_close(p);
      return -1;
    }
  }
  return 0;
}

/* See tdev.h. */
int tdev_id_pipes_share(tdev_id_pipes_t *p, int rank, ncclUniqueId *id_out) {
  ncclUniqueId id;
  int rc = 0;
  /* Drop every end this rank does not use, so that a reader sees end of
   * file rather than waiting for ever when rank 0 died. */
  for (int r = 0; r < p->n; r++) {
    if (r != rank) close(p->fd[r][0]);
    if (rank != 0) close(p->fd[r][1]);
  }
  if (rank == 0) {
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) {
      set_error("ncclGetUniqueId failed: %s", ncclGetErrorString(res));
      rc = -1;
    }
    for (int r = 1; r < p->n; r++) {
      if (rc == 0 && write(p->fd[r][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        set_error("writing the unique id to rank %d failed", r);
        rc = -1;
      }
      close(p->fd[r][1]);
    }
    close(p->fd[0][1]);
  } else if (read(p->fd[rank][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
    set_error("rank %d could not read the unique id from rank 0", rank);
    rc = -1;
  }
  close(p->fd[rank][0]);
  p->n = 0;
  if (rc == 0) *id_out = id;
  return rc;
}

/* See tdev.h. */
void tdev_id_pipes_close(tdev_id_pipes_t *p) {
  for (int r = 0; r < p->n; r++) {
    close(p->fd[r][0]);
    close(p->fd[r][1]);
  }
  p->n = 0;
}

/* See tdev.h. */
int tdev_run_procs(int n, const tdev_proc_ops_t *ops, const void *ctx, char *first,
                   size_t firstlen) {
  tdev_id_pipes_t idp;
  int pipes[8][2];
  pid_t pids[8];
  int started = 0, failed = 0;
  first[0] = '\0';
  if (tdev_id_pipes_open(&idp, n) != 0) {
    snprintf(first, firstlen, "%s", tdev_last_error());
    return n > 0 ? n : 1;
  }
  for (int r = 0; r < n; r++) {
    if (pipe(pipes[r]) != 0) {
      snprintf(first, firstlen, "pipe for the report of rank %d: %s", r, strerror(errno));
      for (int k = 0; k < r; k++) {
        close(pipes[k][0]);
        close(pipes[k][1]);
      }
      tdev_id_pipes_close(&idp);
      return n;
    }
  }
  fflush(NULL);
  for (; started < n; started++) {
    int r = started;
    pids[r] = fork();
    if (pids[r] < 0) {
      snprintf(first, firstlen, "rank %d: fork failed: %s", r, strerror(errno));
      failed = n - r;
      for (int k = r; k < n; k++) {
        close(pipes[k][0]);
        close(pipes[k][1]);
      }
      break;
    }
    if (pids[r] == 0) {
      char msg[512] = "";
      ncclUniqueId id;
      int f = 1;
      if (ops->before != NULL) ops->before(ctx, r);
      if (tdev_id_pipes_share(&idp, r, &id) != 0)
        snprintf(msg, sizeof(msg), "%s", tdev_last_error());
      else
        f = ops->run(ctx, id, n, r, msg, sizeof(msg));
      if (ops->after != NULL) ops->after(ctx, r);
      (void)!write(pipes[r][1], msg, strlen(msg) + 1);
      _exit(f ? 1 : 0);
    }
    close(pipes[r][1]);
  }
  /* Ranks still waiting for the id once a fork failed now read end of
   * file, and fail. */
  tdev_id_pipes_close(&idp);
  for (int r = 0; r < started; r++) {
    int st = -1;
    char msg[512] = "";
    (void)!read(pipes[r][0], msg, sizeof(msg) - 1);
    close(pipes[r][0]);
    pid_t w;
    do w = waitpid(pids[r], &st, 0);
    while (w < 0 && errno == EINTR);
    if (w != pids[r]) {
      st = -1;
      snprintf(msg, sizeof(msg), "waitpid: %s", strerror(errno));
    }
    if ((w != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) && failed++ == 0)
      snprintf(first, firstlen, "rank %d (status %d): %s", r, st, msg);
  }
  return failed;
}
