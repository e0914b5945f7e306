/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats on live
 * communicators, public API only: three ranks as threads, in the mode
 * BRAID_DEVICE picks (host; CUDA on the simulator or a GPU).
 *
 * Each rank runs AllReduce, AllGather and Broadcast (results compared with
 * sums computed here), suspends (host mode: with NCCL_SUSPEND_MEM, which
 * frees the collective runtime; CUDA mode: without flags, since freeing the
 * device backend is not implemented yet and says so), checks that every
 * launch is refused while suspended and that the statistics say suspended,
 * resumes, and runs the collectives again with new inputs: exact, twice
 * over (two suspend/resume cycles, so the runtime is rebuilt twice). Misuse
 * (suspending twice, resuming a running communicator, unknown flags,
 * inside a group) is refused with a message.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nccl.h"
#include "tdev.h"

#define NRANKS 3
#define COUNT 1001 /* odd */
#define SYNC_S 120.0

/* ncclGetLastError is process-wide: checks of it run one rank at a time. */
static pthread_mutex_t g_err = PTHREAD_MUTEX_INITIALIZER;

static int32_t input(int rank, size_t i, int gen) {
  return (int32_t)((rank + 1) * 7 + (int)(i % 977) * 3 + gen * 100 + rank * (int)(i % 5));
}

#define FAILF(...)                                                            \
  do {                                                                        \
    snprintf(msg, msglen, __VA_ARGS__);                                       \
    goto out;                                                                 \
  } while (0)
#define TRY(call)                                                             \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      FAILF("rank %d: %s = %d (%s)", rank, #call, (int)r_, ncclGetLastError(NULL)); \
  } while (0)

/* The three collectives with generation gen's inputs, checked. */
static int run_colls(ncclComm_t comm, int rank, int gen, int32_t *send, int32_t *recv,
                     int32_t *gath, cudaStream_t stream, char *msg, size_t msglen) {
  for (size_t i = 0; i < COUNT; i++) send[i] = input(rank, i, gen);
  TRY(ncclAllReduce(send, recv, COUNT, ncclInt32, ncclSum, comm, stream));
  if (tdev_stream_sync(stream, SYNC_S) != 0) FAILF("rank %d: %s", rank, tdev_last_error());
  for (size_t i = 0; i < COUNT; i++) {
    int32_t want = 0;
    for (int r = 0; r < NRANKS; r++) want += input(r, i, gen);
    if (recv[i] != want)
      FAILF("rank %d gen %d: all-reduce element %zu is %d, expected %d", rank, gen, i,
            recv[i], want);
  }
  TRY(ncclAllGather(send, gath, COUNT, ncclInt32, comm, stream));
  if (tdev_stream_sync(stream, SYNC_S) != 0) FAILF("rank %d: %s", rank, tdev_last_error());
  for (int r = 0; r < NRANKS; r++)
    for (size_t i = 0; i < COUNT; i++)
      if (gath[r * COUNT + i] != input(r, i, gen))
        FAILF("rank %d gen %d: all-gather block %d element %zu is %d, expected %d", rank,
              gen, r, i, gath[r * COUNT + i], input(r, i, gen));
  TRY(ncclBroadcast(send, recv, COUNT, ncclInt32, 2, comm, stream));
  if (tdev_stream_sync(stream, SYNC_S) != 0) FAILF("rank %d: %s", rank, tdev_last_error());
  for (size_t i = 0; i < COUNT; i++)
    if (recv[i] != input(2, i, gen))
      FAILF("rank %d gen %d: broadcast element %zu is %d, expected %d", rank, gen, i,
            recv[i], input(2, i, gen));
  return 0;
out:
  return 1;
}

static int stat_of(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *v) {
  *v = 12345;
  return ncclCommMemStats(comm, stat, v) == ncclSuccess;
}

static int rank_main(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  ncclComm_t comm = NULL;
  cudaStream_t stream = NULL;
  int32_t *send = tdev_alloc(COUNT * sizeof(int32_t));
  int32_t *recv = tdev_alloc(COUNT * sizeof(int32_t));
  int32_t *gath = tdev_alloc(NRANKS * COUNT * sizeof(int32_t));
  int host = tdev_kind() == TDEV_HOST, locked = 0, failed = 1;
  uint64_t v;
  if (send == NULL || recv == NULL || gath == NULL || tdev_stream_create(&stream) != 0)
    FAILF("rank %d: %s", rank, tdev_last_error());
  TRY(ncclCommInitRank(&comm, n, id, rank));
  if (run_colls(comm, rank, 0, send, recv, gath, stream, msg, msglen)) goto out;
  if (!stat_of(comm, ncclStatGpuMemSuspended, &v) || v != 0)
    FAILF("rank %d: ncclStatGpuMemSuspended before suspending is %llu", rank,
          (unsigned long long)v);
  if (host && (!stat_of(comm, ncclStatGpuMemTotal, &v) || v != 0))
    FAILF("rank %d: host mode reports %llu bytes of device memory", rank,
          (unsigned long long)v);

  for (int cycle = 1; cycle <= 2; cycle++) {
    pthread_mutex_lock(&g_err);
    locked = 1;
    if (ncclCommResume(comm) != ncclInvalidUsage || !strstr(ncclGetLastError(NULL), "not suspended"))
      FAILF("rank %d: resuming a running communicator was not refused", rank);
    if (ncclCommSuspend(comm, 0x4) != ncclInvalidArgument)
      FAILF("rank %d: unknown suspend flags were not refused", rank);
    if (ncclGroupStart() != ncclSuccess) FAILF("rank %d: ncclGroupStart", rank);
    ncclResult_t in_group = ncclCommSuspend(comm, 0);
    if (ncclGroupEnd() != ncclSuccess) FAILF("rank %d: ncclGroupEnd", rank);
    if (in_group != ncclInvalidUsage || !strstr(ncclGetLastError(NULL), "group"))
      FAILF("rank %d: a suspend inside a group was not refused", rank);
    if (!host) {
      if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclInvalidUsage ||
          !strstr(ncclGetLastError(NULL), "not implemented yet"))
        FAILF("rank %d: CUDA mode's NCCL_SUSPEND_MEM did not say it is not implemented",
              rank);
    }
    locked = 0;
    pthread_mutex_unlock(&g_err);

    /* Collective (a barrier) with NCCL_SUSPEND_MEM: outside the lock. */
    TRY(ncclCommSuspend(comm, host ? NCCL_SUSPEND_MEM : 0));
    if (!stat_of(comm, ncclStatGpuMemSuspended, &v) || v != 1)
      FAILF("rank %d: ncclStatGpuMemSuspended while suspended is %llu", rank,
            (unsigned long long)v);

    pthread_mutex_lock(&g_err);
    locked = 1;
    if (ncclAllReduce(send, recv, COUNT, ncclInt32, ncclSum, comm, stream) != ncclInvalidUsage ||
        !strstr(ncclGetLastError(NULL), "suspended"))
      FAILF("rank %d: an all-reduce on a suspended communicator was not refused", rank);
    if (ncclSend(send, 1, ncclInt32, (rank + 1) % n, comm, stream) != ncclInvalidUsage)
      FAILF("rank %d: a send on a suspended communicator was not refused", rank);
    if (ncclCommSuspend(comm, 0) != ncclInvalidUsage ||
        !strstr(ncclGetLastError(NULL), "suspended already"))
      FAILF("rank %d: suspending twice was not refused", rank);
    locked = 0;
    pthread_mutex_unlock(&g_err);

    TRY(ncclCommResume(comm));
    if (!stat_of(comm, ncclStatGpuMemSuspended, &v) || v != 0)
      FAILF("rank %d: ncclStatGpuMemSuspended after resuming is %llu", rank,
            (unsigned long long)v);
    if (run_colls(comm, rank, cycle, send, recv, gath, stream, msg, msglen)) goto out;
  }
  failed = 0;
out:
  if (locked) pthread_mutex_unlock(&g_err);
  if (comm != NULL) ncclCommDestroy(comm);
  tdev_stream_destroy(stream);
  tdev_free(send);
  tdev_free(recv);
  tdev_free(gath);
  return failed;
}

static void test_suspend_resume(void **state) {
  char msg[512] = "";
  char why[256];
  (void)state;
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  if (tdev_run_threads(NRANKS, rank_main, msg, sizeof(msg)) != 0) fail_msg("%s", msg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_suspend_resume),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
