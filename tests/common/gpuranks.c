/*
 * Test helper: ranks as threads that take their steps together
 * (gpuranks.h).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuranks.h"
#include "tdev.h"

/* See gpuranks.h. */
int gpuranks_fail(gpuranks_arg_t *a, const char *fmt, ...) {
  if (!a->failed) {
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(a->msg, sizeof(a->msg), fmt, ap);
    va_end(ap);
  }
  a->failed = 1;
  atomic_store(&a->shared->any_failed, 1);
  return -1;
}

/* See gpuranks.h. */
int gpuranks_meet(gpuranks_arg_t *a) {
  pthread_barrier_wait(&a->shared->barrier);
  return atomic_load(&a->shared->any_failed) ? -1 : 0;
}

/* See gpuranks.h. */
int gpuranks_any_failed(const gpuranks_arg_t *a) {
  return atomic_load(&a->shared->any_failed) != 0;
}

/* The threads wait at this gate until every one of them exists: a rank
 * must not reach the barrier of n when fewer than n threads could start. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state; /* 0 closed, 1 run, -1 do not run */
} gate_t;

typedef struct {
  gpuranks_arg_t arg;
  gate_t *gate;
  void *(*rank_main)(void *);
} rank_thread_t;

static void *rank_thread(void *p) {
  rank_thread_t *t = p;
  pthread_mutex_lock(&t->gate->mu);
  while (t->gate->state == 0) pthread_cond_wait(&t->gate->cv, &t->gate->mu);
  int run = t->gate->state > 0;
  pthread_mutex_unlock(&t->gate->mu);
  return run ? t->rank_main(&t->arg) : NULL;
}

static void gate_open(gate_t *g, int state) {
  pthread_mutex_lock(&g->mu);
  g->state = state;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* See gpuranks.h. */
int gpuranks_run(int n, void *(*rank_main)(void *arg), char *msg, size_t msglen) {
  gpuranks_shared_t shared;
  gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  rank_thread_t t[GPURANKS_MAX];
  pthread_t th[GPURANKS_MAX];
  ncclUniqueId id;
  int started = 0, rc = 0;
  msg[0] = '\0';
  if (n < 1 || n > GPURANKS_MAX) {
    snprintf(msg, msglen, "gpuranks_run: %d ranks (1 to %d)", n, GPURANKS_MAX);
    return -1;
  }
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) {
    snprintf(msg, msglen, "ncclGetUniqueId failed: %s", ncclGetErrorString(res));
    return -1;
  }
  atomic_init(&shared.any_failed, 0);
  if (pthread_barrier_init(&shared.barrier, NULL, (unsigned)n) != 0) {
    snprintf(msg, msglen, "pthread_barrier_init for %d ranks failed", n);
    return -1;
  }
  for (; started < n; started++) {
    rank_thread_t *r = &t[started];
    memset(r, 0, sizeof(*r));
    r->arg.id = id;
    r->arg.n = n;
    r->arg.rank = started;
    r->arg.shared = &shared;
    r->gate = &gate;
    r->rank_main = rank_main;
    if (pthread_create(&th[started], NULL, rank_thread, r) != 0) {
      snprintf(msg, msglen, "cannot start the thread of rank %d", started);
      rc = -1;
      break;
    }
  }
  gate_open(&gate, rc == 0 ? 1 : -1);
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  pthread_barrier_destroy(&shared.barrier);
  for (int k = 0; k < started && rc == 0; k++)
    if (t[k].arg.failed) {
      snprintf(msg, msglen, "%s", t[k].arg.msg);
      rc = -1;
    }
  return rc;
}

/* See gpuranks.h. */
int gpuranks_cuda_ready(const char *prog, const char *what) {
  char why[256];
  setenv("BRAID_DEVICE", "cuda", 0);
  setenv("BRAID_TIMEOUT", "30", 0);
  if (tdev_kind() != TDEV_CUDA) {
    printf("SKIP: %s: %s need BRAID_DEVICE=cuda (it is %s)\n", prog, what,
           getenv("BRAID_DEVICE"));
    return TDEV_EXIT_SKIP;
  }
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s: %s\n", prog, why);
    return TDEV_EXIT_SKIP;
  }
  return 0;
}
