/*
 * bench_mem: memory of many communicators, ranks as threads of one process
 * (host mode by default), through the public API (links libnccl.so).
 *
 *   bench_mem [comms [ranks [count]]]     default 64 communicators of 4
 *                                         ranks, all-reduce of 1024 floats
 *
 * Makes `comms` communicators of `ranks` ranks each with ncclCommInitAll,
 * then runs on each one all-reduce of `count` floats and one ring of
 * sends and receives of `count` floats (one thread drives every rank of a
 * communicator in a group), checks the results, and prints the process's
 * resident memory (VmRSS) before and after, its peak (VmHWM), and the
 * growth per rank. Every rank's runtime window exists once its first
 * collective ran, so this is the steady state of an idle-ish job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

/* A field of /proc/self/status in KiB, or -1. */
static long status_kib(const char *field) {
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  while (fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, field, n) == 0 && line[n] == ':') v = strtol(line + n + 1, NULL, 10);
  fclose(f);
  return v;
}

#define NCCL_DO(call)                                                                 \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess) {                                                          \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, ncclGetErrorString(r_),         \
              ncclGetLastError(NULL));                                                \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  int ncomms = argc > 1 ? atoi(argv[1]) : 64;
  int nranks = argc > 2 ? atoi(argv[2]) : 4;
  size_t count = argc > 3 ? (size_t)atol(argv[3]) : 1024;
  if (ncomms < 1 || nranks < 1 || nranks > 64 || count < 1) {
    fprintf(stderr, "usage: %s [comms >= 1 [ranks 1..64 [count >= 1]]]\n", argv[0]);
    return 2;
  }
  setenv("BRAID_DEVICE", "host", 0);
  ncclComm_t *comms = calloc((size_t)ncomms * (size_t)nranks, sizeof(*comms));
  float *in = malloc((size_t)nranks * count * sizeof(float));
  float *out = malloc((size_t)nranks * count * sizeof(float));
  if (comms == NULL || in == NULL || out == NULL) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (int r = 0; r < nranks; r++)
    for (size_t e = 0; e < count; e++) in[(size_t)r * count + e] = (float)(r + 1) + (float)(e % 7);
  long rss0 = status_kib("VmRSS");
  for (int c = 0; c < ncomms; c++) NCCL_DO(ncclCommInitAll(comms + (size_t)c * nranks, nranks, NULL));
  long rss_init = status_kib("VmRSS");
  int bad = 0;
  for (int c = 0; c < ncomms; c++) {
    ncclComm_t *cm = comms + (size_t)c * nranks;
    NCCL_DO(ncclGroupStart());
    for (int r = 0; r < nranks; r++)
      NCCL_DO(ncclAllReduce(in + (size_t)r * count, out + (size_t)r * count, count, ncclFloat32,
                            ncclSum, cm[r], NULL));
    NCCL_DO(ncclGroupEnd());
    for (int r = 0; r < nranks; r++)
      for (size_t e = 0; e < count; e++) {
        /* sum over ranks q of (q + 1) + e % 7 */
        float want = (float)(nranks * (nranks + 1) / 2) + (float)nranks * (float)(e % 7);
        bad += out[(size_t)r * count + e] != want;
      }
    NCCL_DO(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      NCCL_DO(ncclSend(in + (size_t)r * count, count, ncclFloat32, (r + 1) % nranks, cm[r], NULL));
      NCCL_DO(ncclRecv(out + (size_t)r * count, count, ncclFloat32, (r + nranks - 1) % nranks,
                       cm[r], NULL));
    }
    NCCL_DO(ncclGroupEnd());
    for (int r = 0; r < nranks; r++)
      bad += memcmp(out + (size_t)r * count, in + (size_t)((r + nranks - 1) % nranks) * count,
                    count * sizeof(float)) != 0;
  }
  long rss_run = status_kib("VmRSS"), hwm = status_kib("VmHWM");
  for (int i = 0; i < ncomms * nranks; i++) NCCL_DO(ncclCommDestroy(comms[i]));
  long rss_end = status_kib("VmRSS");
  int total = ncomms * nranks;
  printf("# bench_mem: %d communicators x %d ranks as threads, BRAID_DEVICE=%s, "
         "all-reduce and send/recv ring of %zu floats each\n", ncomms, nranks,
         getenv("BRAID_DEVICE"), count);
  printf("rss_start_kib      %ld\n", rss0);
  printf("rss_after_init_kib %ld\n", rss_init);
  printf("rss_after_run_kib  %ld\n", rss_run);
  printf("rss_peak_kib       %ld\n", hwm);
  printf("rss_after_destroy_kib %ld\n", rss_end);
  printf("per_rank_kib       %.1f\n", (double)(rss_run - rss0) / total);
  if (bad) fprintf(stderr, "bench_mem: %d wrong results\n", bad);
  free(comms);
  free(in);
  free(out);
  return bad ? 1 : 0;
}
