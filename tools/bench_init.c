/*
 * bench_init: how long communicator creation takes, ranks as processes and
 * as threads, through the public API (links libnccl.so).
 *
 *   bench_init [max_ranks [iterations]]     default 64 ranks, 5 iterations
 *
 * For each size (2, 4, 8, ... max_ranks) every rank is started, waits at a
 * start line, and calls ncclCommInitRank when released; the time is from
 * the release to the last rank's return, so process or thread start-up is
 * not counted. Prints the median and the fastest of the iterations.
 * BRAID_DEVICE defaults to host.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAX_RANKS 256

struct shared {
  _Atomic int ready;
  _Atomic int go;
  _Atomic int failed;
  int64_t start_ns;
  int64_t end_ns[MAX_RANKS];
};

static struct shared *sh;
static ncclUniqueId bench_id;
static int bench_n;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void one_rank(int rank) {
  ncclComm_t comm = NULL;
  struct timespec nap = {0, 20000};
  atomic_fetch_add(&sh->ready, 1);
  while (!atomic_load(&sh->go)) nanosleep(&nap, NULL);
  if (ncclCommInitRank(&comm, bench_n, bench_id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed: %s\n", rank, ncclGetLastError(NULL));
    atomic_store(&sh->failed, 1);
    return;
  }
  sh->end_ns[rank] = now_ns();
  ncclCommDestroy(comm);
}

static void *rank_thread(void *arg) {
  one_rank((int)(intptr_t)arg);
  return NULL;
}

static void release_when_ready(int n) {
  struct timespec nap = {0, 100000};
  while (atomic_load(&sh->ready) < n) nanosleep(&nap, NULL);
  sh->start_ns = now_ns();
  atomic_store(&sh->go, 1);
}

/* One measurement in milliseconds, or -1 on failure. */
static double measure(int n, int as_process) {
  pid_t pid[MAX_RANKS];
  pthread_t thr[MAX_RANKS];
  int64_t last = 0;
  memset(sh, 0, sizeof(*sh));
  if (ncclGetUniqueId(&bench_id) != ncclSuccess) {
    fprintf(stderr, "ncclGetUniqueId failed: %s\n", ncclGetLastError(NULL));
    return -1;
  }
  bench_n = n;
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    if (as_process) {
      pid[r] = fork();
      if (pid[r] < 0) return -1;
      if (pid[r] == 0) {
        one_rank(r);
        _exit(0);
      }
    } else if (pthread_create(&thr[r], NULL, rank_thread, (void *)(intptr_t)r) != 0) {
      return -1;
    }
  }
  release_when_ready(n);
  for (int r = 0; r < n; r++) {
    if (as_process) waitpid(pid[r], NULL, 0);
    else pthread_join(thr[r], NULL);
  }
  if (atomic_load(&sh->failed)) return -1;
  for (int r = 0; r < n; r++)
    if (sh->end_ns[r] > last) last = sh->end_ns[r];
  return (double)(last - sh->start_ns) / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int stats(int n, int as_process, int iters, double *median, double *best) {
  double t[64];
  if (iters > 64) iters = 64;
  for (int i = 0; i < iters; i++) {
    t[i] = measure(n, as_process);
    if (t[i] < 0) return -1;
  }
  qsort(t, (size_t)iters, sizeof(t[0]), cmp_double);
  *median = t[iters / 2];
  *best = t[0];
  return 0;
}

int main(int argc, char **argv) {
  int max_ranks = argc > 1 ? atoi(argv[1]) : 64;
  int iters = argc > 2 ? atoi(argv[2]) : 5;
  if (max_ranks < 2 || max_ranks > MAX_RANKS || iters < 1) {
    fprintf(stderr, "usage: %s [max_ranks 2..%d [iterations]]\n", argv[0], MAX_RANKS);
    return 2;
  }
  setenv("BRAID_DEVICE", "host", 0);
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  printf("# ncclCommInitRank, release to last rank done, ms (median / fastest of %d)\n", iters);
  printf("# BRAID_DEVICE=%s, %ld online CPUs\n", getenv("BRAID_DEVICE"),
         sysconf(_SC_NPROCESSORS_ONLN));
  printf("%6s  %20s  %20s\n", "ranks", "processes", "threads");
  for (int n = 2; n <= max_ranks; n *= 2) {
    double pm, pb, tm, tb;
    if (stats(n, 1, iters, &pm, &pb) != 0 || stats(n, 0, iters, &tm, &tb) != 0) {
      fprintf(stderr, "init of %d ranks failed\n", n);
      return 1;
    }
    printf("%6d  %9.2f / %8.2f  %9.2f / %8.2f\n", n, pm, pb, tm, tb);
    fflush(stdout);
  }
  return 0;
}
