/*
 * bench_profiler: the latency of one small all-reduce in host mode, ranks as
 * threads of this process, robust to a busy machine (links libnccl.so).
 *
 *   bench_profiler [ranks [bytes]]          default 2 ranks, 8 bytes
 *
 * Every rank runs 500 warm-up calls, then 400 blocks of 100 calls; the
 * ranks start each block together, and a block's time is its slowest
 * rank's. Prints the fastest block, the 10th percentile and the median, in
 * microseconds per call: on a machine shared with other work the low
 * percentiles show the cost of the code, the median the cost of the
 * neighbours. Run it with and without NCCL_PROFILER_PLUGIN to see what a
 * profiler adds (docs/perf/profiler.md). BRAID_DEVICE defaults to host.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl.h"

#define MAX_RANKS 16
#define BLOCK 100
#define NBLOCKS 400
#define WARMUP 500

static int nranks;
static size_t count;
static ncclComm_t comms[MAX_RANKS];
static double block_us[MAX_RANKS][NBLOCKS];
static pthread_barrier_t start_line;
static int failed;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void *rank_main(void *arg) {
  int r = (int)(long)arg;
  float *send = calloc(count, sizeof(float)), *recv = calloc(count, sizeof(float));
  if (send == NULL || recv == NULL) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    count = 0;
  }
  for (int i = 0; i < WARMUP; i++)
    if (ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comms[r], NULL) != ncclSuccess)
      __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
  for (int b = 0; b < NBLOCKS; b++) {
    pthread_barrier_wait(&start_line);
    double t0 = now_us();
    for (int i = 0; i < BLOCK; i++)
      if (ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comms[r], NULL) != ncclSuccess)
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    block_us[r][b] = (now_us() - t0) / BLOCK;
  }
  free(send);
  free(recv);
  return NULL;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  nranks = argc > 1 ? atoi(argv[1]) : 2;
  size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 8;
  if (nranks < 1 || nranks > MAX_RANKS || bytes < sizeof(float)) {
    fprintf(stderr, "usage: bench_profiler [ranks (1..%d) [bytes (>= 4)]]\n", MAX_RANKS);
    return 2;
  }
  count = bytes / sizeof(float);
  setenv("BRAID_DEVICE", "host", 0);
  ncclResult_t res = ncclCommInitAll(comms, nranks, NULL);
  if (res != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(res));
    return 1;
  }
  pthread_barrier_init(&start_line, NULL, (unsigned)nranks);
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rank_main, (void *)(long)r);
  for (int r = 0; r < nranks; r++) pthread_join(threads[r], NULL);
  static double slowest[NBLOCKS];
  for (int b = 0; b < NBLOCKS; b++) {
    slowest[b] = 0;
    for (int r = 0; r < nranks; r++)
      if (block_us[r][b] > slowest[b]) slowest[b] = block_us[r][b];
  }
  qsort(slowest, NBLOCKS, sizeof(double), by_value);
  printf("ranks %d bytes %zu: us per call: min %.3f p10 %.3f median %.3f%s\n", nranks,
         count * sizeof(float), slowest[0], slowest[NBLOCKS / 10], slowest[NBLOCKS / 2],
         failed ? " (some calls FAILED)" : "");
  for (int r = 0; r < nranks; r++) ncclCommDestroy(comms[r]);
  return failed;
}
