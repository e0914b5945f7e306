/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats on live
 * communicators, public API only: three ranks as threads, in the mode
 * BRAID_DEVICE picks (host; CUDA on the simulator or a GPU).
 *
 * Each rank runs AllReduce, AllGather and Broadcast (results compared with
 * sums computed here), suspends with NCCL_SUSPEND_MEM (which frees the
 * collective runtime), checks that every launch is refused while suspended
 * and that the statistics say suspended, resumes, and runs the collectives
 * again with new inputs: exact, twice over (two suspend/resume cycles, so
 * the runtime is rebuilt twice). Misuse (suspending twice, resuming a
 * running communicator, unknown flags, inside a group) is refused with a
 * message.
 *
 * Memory: host mode reports 0 device bytes. CUDA mode reports more than 0
 * bytes to release before each suspend, 0 while suspended, Total equal to
 * it and Persist 0; on the simulator the device's used memory
 * (cudaMemGetInfo, counted by the simulator per allocation, rounded up to
 * pages) must drop across the suspend of all ranks by the sum of what the
 * ranks reported, plus at most the page rounding of their allocations. A
 * thread polls ncclCommGetAsyncError on every rank's communicator the
 * whole time, as PyTorch's watchdog does, so a release racing with it
 * shows up (under ASan/TSan as a use after free, otherwise as a crash).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "nccl.h"
#include "tdev.h"

#define NRANKS 3
#define COUNT 1001 /* odd */
#define SYNC_S 120.0

/* ncclGetLastError is process-wide: checks of it run one rank at a time. */
static pthread_mutex_t g_err = PTHREAD_MUTEX_INITIALIZER;

/* What the ranks reported, and the device memory around the suspend. */
static pthread_mutex_t g_bar_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_bar_cond = PTHREAD_COND_INITIALIZER;
static int g_bar_count, g_bar_gen, g_bar_broken;
static uint64_t g_reported[NRANKS];
static long long g_used_before, g_used_after;
/* The watchdog thread's view of the communicators. */
static ncclComm_t g_comms[NRANKS];          /* under g_dog_lock */
static pthread_mutex_t g_dog_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_stop, g_polls, g_poll_bad;

/* A barrier of the NRANKS threads that a failing rank breaks (so the
 * others fail instead of waiting for it). 0, or -1 when broken. */
static int bar_wait(void) {
  pthread_mutex_lock(&g_bar_lock);
  int gen = g_bar_gen;
  if (++g_bar_count == NRANKS) {
    g_bar_count = 0;
    g_bar_gen++;
    pthread_cond_broadcast(&g_bar_cond);
  }
  while (gen == g_bar_gen && !g_bar_broken) pthread_cond_wait(&g_bar_cond, &g_bar_lock);
  int broken = g_bar_broken;
  pthread_mutex_unlock(&g_bar_lock);
  return broken ? -1 : 0;
}

static void bar_break(void) {
  pthread_mutex_lock(&g_bar_lock);
  g_bar_broken = 1;
  pthread_cond_broadcast(&g_bar_cond);
  pthread_mutex_unlock(&g_bar_lock);
}

static void set_comm(int rank, ncclComm_t comm) {
  pthread_mutex_lock(&g_dog_lock);
  g_comms[rank] = comm;
  pthread_mutex_unlock(&g_dog_lock);
}

/* Device memory in use on every device, in bytes; -1 when not known (host
 * mode). */
static long long device_used(void) {
#if BRAID_CUDA
  int ndev = 0, saved = 0;
  long long used = 0;
  if (tdev_kind() != TDEV_CUDA || cudaGetDevice(&saved) != cudaSuccess ||
      cudaGetDeviceCount(&ndev) != cudaSuccess)
    return -1;
  for (int d = 0; d < ndev; d++) {
    size_t fr = 0, total = 0;
    if (cudaSetDevice(d) != cudaSuccess || cudaMemGetInfo(&fr, &total) != cudaSuccess)
      return -1;
    used += (long long)(total - fr);
  }
  cudaSetDevice(saved);
  return used;
#else
  return -1;
#endif
}

/* 1 on the CUDA simulator, whose cudaMemGetInfo counts each allocation
 * exactly (rounded to pages); a GPU's allocator caches and rounds to
 * larger blocks, so there the drop is only printed. */
static int on_simulator(void) {
#if BRAID_CUDA
  struct cudaDeviceProp prop;
  int dev = 0;
  return tdev_kind() == TDEV_CUDA && cudaGetDevice(&dev) == cudaSuccess &&
         cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
         strcmp(prop.name, "Braid CUDA simulator") == 0;
#else
  return 0;
#endif
}

/* Polls every live communicator's async error, as PyTorch's watchdog. */
static void *watchdog(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    /* The lock only keeps a communicator from being destroyed under the
     * poll (as PyTorch's watchdog stops before destroying); suspends run
     * concurrently with it. */
    pthread_mutex_lock(&g_dog_lock);
    for (int r = 0; r < NRANKS; r++) {
      ncclResult_t async = ncclSuccess;
      if (g_comms[r] == NULL) continue;
      if (ncclCommGetAsyncError(g_comms[r], &async) != ncclSuccess || async != ncclSuccess)
        atomic_store(&g_poll_bad, 1);
      atomic_fetch_add(&g_polls, 1);
    }
    pthread_mutex_unlock(&g_dog_lock);
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  return NULL;
}

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
  set_comm(rank, comm);
  if (run_colls(comm, rank, 0, send, recv, gath, stream, msg, msglen)) goto out;
  if (!stat_of(comm, ncclStatGpuMemSuspended, &v) || v != 0)
    FAILF("rank %d: ncclStatGpuMemSuspended before suspending is %llu", rank,
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
    locked = 0;
    pthread_mutex_unlock(&g_err);

    /* What suspending will release, by the communicator's count. */
    uint64_t mine = 0, total = 0, persist = 1;
    if (!stat_of(comm, ncclStatGpuMemSuspend, &mine) ||
        !stat_of(comm, ncclStatGpuMemTotal, &total) ||
        !stat_of(comm, ncclStatGpuMemPersist, &persist))
      FAILF("rank %d: ncclCommMemStats failed: %s", rank, ncclGetLastError(NULL));
    if (host ? mine != 0 : mine == 0)
      FAILF("rank %d (%s mode): %llu bytes to release before suspending", rank,
            host ? "host" : "CUDA", (unsigned long long)mine);
    if (total != mine || persist != 0)
      FAILF("rank %d: Total %llu, Suspend %llu, Persist %llu: expected Total = Suspend, "
            "Persist 0", rank, (unsigned long long)total, (unsigned long long)mine,
            (unsigned long long)persist);
    g_reported[rank] = mine;
    if (bar_wait() != 0) FAILF("rank %d: another rank failed", rank);
    if (rank == 0) g_used_before = device_used();
    if (bar_wait() != 0) FAILF("rank %d: another rank failed", rank);

    /* Collective (a barrier) with NCCL_SUSPEND_MEM: outside the lock. */
    TRY(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    if (bar_wait() != 0) FAILF("rank %d: another rank failed", rank);
    if (rank == 0) g_used_after = device_used();
    if (bar_wait() != 0) FAILF("rank %d: another rank failed", rank);
    if (!stat_of(comm, ncclStatGpuMemSuspended, &v) || v != 1)
      FAILF("rank %d: ncclStatGpuMemSuspended while suspended is %llu", rank,
            (unsigned long long)v);
    if (!stat_of(comm, ncclStatGpuMemSuspend, &v) || v != 0)
      FAILF("rank %d: %llu bytes still to release while suspended", rank,
            (unsigned long long)v);
    if (rank == 0 && g_used_before >= 0) {
      long long sum = 0, freed = g_used_before - g_used_after;
      for (int r = 0; r < NRANKS; r++) sum += (long long)g_reported[r];
      /* Page rounding: under a page for each of a rank's few allocations. */
      long long slack = NRANKS * 16LL * sysconf(_SC_PAGESIZE);
      printf("cycle %d: the ranks reported %lld bytes; device memory in use fell by %lld\n",
             cycle, sum, freed);
      if (on_simulator() && (freed < sum || freed > sum + slack))
        FAILF("cycle %d: device memory in use fell by %lld bytes across the suspend; the "
              "ranks reported %lld to release (page rounding allows up to %lld more)",
              cycle, freed, sum, slack);
    }

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
  if (failed) bar_break();
  set_comm(rank, NULL);
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
  pthread_t dog;
  assert_int_equal(pthread_create(&dog, NULL, watchdog, NULL), 0);
  int failed = tdev_run_threads(NRANKS, rank_main, msg, sizeof(msg));
  atomic_store(&g_stop, 1);
  pthread_join(dog, NULL);
  if (failed != 0) fail_msg("%s", msg);
  printf("the watchdog thread polled %d times\n", atomic_load(&g_polls));
  assert_true(atomic_load(&g_polls) > 0);
  assert_false(atomic_load(&g_poll_bad));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_suspend_resume),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
