/*
 * bench_profiler: the latency of one small all-reduce in host mode, ranks as
 * threads of this process, robust to a busy machine (links libnccl.so).
 *
 *   bench_profiler [ranks [bytes [paired]]]   default 2 ranks, 8 bytes
 *
 * Every rank runs 500 warm-up calls, then 400 blocks of 100 calls; the
 * ranks start each block together, and a block's time is its slowest
 * rank's. Prints the fastest block, the 10th percentile and the median, in
 * microseconds per call: on a machine shared with other work the low
 * percentiles show the cost of the code, the median the cost of the
 * neighbours. Run it with and without NCCL_PROFILER_PLUGIN to see what a
 * profiler adds (docs/perf/profiler.md). BRAID_DEVICE defaults to host.
 *
 * "paired" (with NCCL_PROFILER_PLUGIN set) measures both in one process:
 * a second set of communicators is created with NCCL_PROFILE_EVENT_MASK=0,
 * which a plugin that reads the variable in its init (profiler-timeline
 * does) answers by asking for no events, so that set runs as without a
 * plugin. Each block then runs on both sets back to back, in alternating
 * order, and the ratio of each pair is kept: a machine whose speed drifts
 * moves both halves of a pair together. Prints both sets' figures and the
 * median (and 25th..75th percentiles) of the paired ratios.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

#define MAX_RANKS 16
#define BLOCK 100
#define NBLOCKS 400
#define WARMUP 500

static int nranks, nsets;
static size_t count;
static ncclComm_t comms[2][MAX_RANKS]; /* [0]: profiled as asked; [1]: mask 0 (paired) */
static double block_us[2][MAX_RANKS][NBLOCKS];
static pthread_barrier_t start_line;
static int failed;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void calls(ncclComm_t comm, const float *send, float *recv, int n) {
  for (int i = 0; i < n; i++)
    if (ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess)
      __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
}

static void *rank_main(void *arg) {
  int r = (int)(long)arg;
  float *send = calloc(count, sizeof(float)), *recv = calloc(count, sizeof(float));
  if (send == NULL || recv == NULL) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    count = 0;
  }
  for (int s = 0; s < nsets; s++) calls(comms[s][r], send, recv, WARMUP);
  for (int b = 0; b < NBLOCKS; b++)
    for (int k = 0; k < nsets; k++) {
      int s = (b + k) % nsets;
      pthread_barrier_wait(&start_line);
      double t0 = now_us();
      calls(comms[s][r], send, recv, BLOCK);
      block_us[s][r][b] = (now_us() - t0) / BLOCK;
    }
  free(send);
  free(recv);
  return NULL;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Set s's block times, the slowest rank's per block, into out. */
static void slowest_of(int s, double *out) {
  for (int b = 0; b < NBLOCKS; b++) {
    out[b] = 0;
    for (int r = 0; r < nranks; r++)
      if (block_us[s][r][b] > out[b]) out[b] = block_us[s][r][b];
  }
}

static void report(const char *what, double *v) {
  qsort(v, NBLOCKS, sizeof(double), by_value);
  printf("%sranks %d bytes %zu: us per call: min %.3f p10 %.3f median %.3f%s\n", what, nranks,
         count * sizeof(float), v[0], v[NBLOCKS / 10], v[NBLOCKS / 2],
         failed ? " (some calls FAILED)" : "");
}

int main(int argc, char **argv) {
  nranks = argc > 1 ? atoi(argv[1]) : 2;
  size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 8;
  int paired = argc > 3 && strcmp(argv[3], "paired") == 0;
  if (nranks < 1 || nranks > MAX_RANKS || bytes < sizeof(float) ||
      (argc > 3 && !paired)) {
    fprintf(stderr, "usage: bench_profiler [ranks (1..%d) [bytes (>= 4) [paired]]]\n",
            MAX_RANKS);
    return 2;
  }
  if (paired && getenv("NCCL_PROFILER_PLUGIN") == NULL) {
    fprintf(stderr, "bench_profiler: paired needs NCCL_PROFILER_PLUGIN (the plugin to "
            "measure)\n");
    return 2;
  }
  count = bytes / sizeof(float);
  nsets = paired ? 2 : 1;
  setenv("BRAID_DEVICE", "host", 0);
  ncclResult_t res = ncclCommInitAll(comms[0], nranks, NULL);
  if (res == ncclSuccess && paired) {
    const char *m = getenv("NCCL_PROFILE_EVENT_MASK");
    char *keep = m != NULL ? strdup(m) : NULL;
    setenv("NCCL_PROFILE_EVENT_MASK", "0", 1);
    res = ncclCommInitAll(comms[1], nranks, NULL);
    if (keep != NULL) setenv("NCCL_PROFILE_EVENT_MASK", keep, 1);
    else unsetenv("NCCL_PROFILE_EVENT_MASK");
    free(keep);
  }
  if (res != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(res));
    return 1;
  }
  pthread_barrier_init(&start_line, NULL, (unsigned)nranks);
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rank_main, (void *)(long)r);
  for (int r = 0; r < nranks; r++) pthread_join(threads[r], NULL);
  static double t[2][NBLOCKS], ratio[NBLOCKS];
  for (int s = 0; s < nsets; s++) slowest_of(s, t[s]);
  for (int b = 0; b < NBLOCKS && paired; b++) ratio[b] = t[0][b] / t[1][b];
  if (paired) {
    report("without events: ", t[1]);
    report("with the plugin: ", t[0]);
    qsort(ratio, NBLOCKS, sizeof(double), by_value);
    printf("paired ratio (with / without): median %.3f (p25 %.3f, p75 %.3f)\n",
           ratio[NBLOCKS / 2], ratio[NBLOCKS / 4], ratio[3 * NBLOCKS / 4]);
  } else {
    report("", t[0]);
  }
  for (int s = 0; s < nsets; s++)
    for (int r = 0; r < nranks; r++) ncclCommDestroy(comms[s][r]);
  return failed;
}
