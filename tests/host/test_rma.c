/*
 * ncclPutSignal / ncclSignal / ncclWaitSignal over registered windows,
 * public API only, ranks as threads (3 and 5 ranks, numRmaCtx 2).
 *
 *  - ordering: each rank puts 40 chunks into the next rank's window, one
 *    signal each; the next rank waits for them one at a time and checks
 *    each chunk as soon as its signal is seen (the data must be there:
 *    put-then-signal is release, wait is acquire). Values are computed
 *    here from (sender, chunk, word).
 *  - many signals, wait on several: every rank signals every other rank
 *    150 times on signal 7 of context 1; each waits with one descriptor per
 *    peer, then for 0 more (no wait), then the counts carry on (a second
 *    round of 150).
 *  - a wait for a signal nobody sends (rank 0's) ends after BRAID_TIMEOUT
 *    (set to 3 s here) with ncclRemoteError and a message naming the peer and counts,
 *    not ncclTimeout: NCCL 2.30.7 returns ncclTimeout only from the device
 *    API's timed barriers, never from a host call (docs/abi.md). In CUDA
 *    mode the wait is enqueued and ends as the communicator's async
 *    ncclRemoteError.
 *  - errors: signal index, context, window bounds, inside a group.
 *  - the same with the ranks as processes (3 ranks, forked before any
 *    other case touches the library): signals in shared memory, windows
 *    from ncclMemAlloc mapped by the registration.
 * Host mode and CUDA mode (the calls on each rank's stream; windows from
 * ncclMemAlloc, read back with copies after a stream synchronisation).
 * The process case runs in host mode.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "tdev.h"

#define MAXR 8
#define CHUNKS 40
#define CHUNK_WORDS 257 /* odd */
#define SIGS 150

static int g_n;
static ncclUniqueId g_id;
static pthread_barrier_t *g_barrier; /* process-shared in the process case */
static pthread_mutex_t g_err = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
  int rank;
  int failed;
  char msg[512];
} rank_t;

static uint32_t value(int sender, int chunk, int word) {
  return 0x85ebca6bu * (uint32_t)(sender + 1) + 0xc2b2ae35u * (uint32_t)chunk +
         (uint32_t)word * 2654435761u;
}

#define FAILF(...)                                                            \
  do {                                                                        \
    snprintf(R->msg, sizeof(R->msg), __VA_ARGS__);                            \
    R->failed = 1;                                                            \
    goto out;                                                                 \
  } while (0)
#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond))                                                              \
      FAILF("rank %d line %d: %s (last error: %s)", R->rank, __LINE__, #cond, \
            ncclGetLastError(NULL));                                          \
  } while (0)

static int has(const char *text) { return strstr(ncclGetLastError(NULL), text) != NULL; }

static void *rank_main(void *arg) {
  rank_t *R = arg;
  int me = R->rank, n = g_n, next = (me + 1) % n, prev = (me + n - 1) % n;
  int locked = 0, waited = 0;
  int cuda = tdev_kind() != TDEV_HOST, async_failed = 0;
  ncclComm_t comm = NULL;
  ncclWindow_t win = NULL;
  cudaStream_t st = NULL;
  uint32_t *buf = NULL, *src = NULL, *host = NULL;
  size_t bytes = (size_t)CHUNKS * CHUNK_WORDS * sizeof(uint32_t);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.numRmaCtx = 2;

  EXPECT(ncclCommInitRankConfig(&comm, n, g_id, me, &config) == ncclSuccess);
  EXPECT(tdev_stream_create(&st) == 0);
  EXPECT(ncclMemAlloc((void **)&buf, bytes) == ncclSuccess);
  src = tdev_alloc(bytes);
  host = tdev_host_alloc(bytes);
  EXPECT(src != NULL && host != NULL);
  EXPECT(tdev_copy(buf, host, bytes, st, 20) == 0); /* zeros */
  for (int k = 0; k < CHUNKS; k++)
    for (int w = 0; w < CHUNK_WORDS; w++) src[k * CHUNK_WORDS + w] = value(me, k, w);
  EXPECT(ncclCommWindowRegister(comm, buf, bytes, &win, 0) == ncclSuccess);

  /* Ordering: chunk k is complete once its signal is seen. */
  for (int k = 0; k < CHUNKS; k++) {
    size_t off = (size_t)k * CHUNK_WORDS;
    EXPECT(ncclPutSignal(src + off, CHUNK_WORDS, ncclUint32, next, win,
                         off * sizeof(uint32_t), 3, 0, 0, comm, st) == ncclSuccess);
    /* Interleave: receive as we send, so both directions are in flight. */
    ncclWaitSignalDesc_t d = {1, prev, 3, 0};
    EXPECT(ncclWaitSignal(1, &d, comm, st) == ncclSuccess);
    EXPECT(tdev_copy(host + off, buf + off, CHUNK_WORDS * sizeof(uint32_t), st, 20) == 0);
    for (int w = 0; w < CHUNK_WORDS; w++)
      if (host[off + w] != value(prev, k, w))
        FAILF("rank %d: chunk %d word %d is %#x after its signal, expected %#x", me, k, w,
              host[off + w], value(prev, k, w));
  }

  /* Many signals from everyone, waited for with one descriptor per peer. */
  for (int round = 0; round < 2; round++) {
    ncclWaitSignalDesc_t d[MAXR];
    int nd = 0;
    for (int i = 0; i < SIGS; i++)
      for (int p = 0; p < n; p++)
        if (p != me) EXPECT(ncclSignal(p, 7, 1, 0, comm, st) == ncclSuccess);
    for (int p = 0; p < n; p++)
      if (p != me) d[nd++] = (ncclWaitSignalDesc_t){SIGS, p, 7, 1};
    EXPECT(ncclWaitSignal(nd, d, comm, st) == ncclSuccess);
    for (int i = 0; i < nd; i++) d[i].opCnt = 0;
    EXPECT(ncclWaitSignal(nd, d, comm, st) == ncclSuccess);
    EXPECT(tdev_stream_sync(st, 60) == 0);
  }
  /* Self as the peer is refused, with a reason. */
  EXPECT(ncclSignal(me, 0, 0, 0, comm, st) == ncclInvalidArgument);
  EXPECT(has("names itself"));

  /* Everyone is past the signal traffic before the error checks. */
  pthread_barrier_wait(g_barrier);
  waited = 1;
  pthread_mutex_lock(&g_err);
  locked = 1;
  if (me == 0) {
    /* One rank is enough: the wait takes BRAID_TIMEOUT, under the lock. */
    ncclWaitSignalDesc_t never = {1, prev, 9, 0};
    ncclResult_t late = ncclWaitSignal(1, &never, comm, st);
    if (cuda) {
      /* Enqueued; the kernel's wait ends at BRAID_TIMEOUT as an async error. */
      ncclResult_t async = ncclSuccess;
      EXPECT(late == ncclSuccess);
      for (int i = 0; i < 4000 && async == ncclSuccess; i++) {
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
        EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
      }
      EXPECT(async == ncclRemoteError);
      async_failed = 1;
      EXPECT(has("semaphore 0 from rank"));
    } else {
      EXPECT(late == ncclRemoteError);
      EXPECT(has("expected 1 in all, seen 0"));
    }
  }
  {
    EXPECT(strcmp(ncclGetErrorString(ncclTimeout), "timeout") == 0);
    EXPECT(ncclSignal(next, 64, 0, 0, comm, NULL) == ncclInvalidArgument);
    EXPECT(ncclSignal(next, 0, 2, 0, comm, NULL) == ncclInvalidArgument);
    EXPECT(has("numRmaCtx"));
    EXPECT(ncclPutSignal(src, 2, ncclUint32, next, win, bytes - 4, 0, 0, 0, comm, st) ==
           ncclInvalidArgument);
    EXPECT(has("do not fit"));
    EXPECT(ncclGroupStart() == ncclSuccess);
    ncclResult_t in_group = ncclSignal(next, 0, 0, 0, comm, NULL);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    EXPECT(in_group == ncclInvalidUsage);
  }
out:
  if (locked) pthread_mutex_unlock(&g_err);
  if (!waited) pthread_barrier_wait(g_barrier);
  /* Nobody deregisters while a peer may still put into its window. */
  pthread_barrier_wait(g_barrier);
  if (async_failed) {
    /* The communicator is in error (the failed wait): abort frees it all. */
    if (comm != NULL) ncclCommAbort(comm);
  } else {
    if (win != NULL && ncclCommWindowDeregister(comm, win) != ncclSuccess && !R->failed) {
      snprintf(R->msg, sizeof(R->msg), "rank %d: ncclCommWindowDeregister failed", me);
      R->failed = 1;
    }
    if (comm != NULL) ncclCommDestroy(comm);
  }
  if (buf != NULL) ncclMemFree(buf);
  tdev_free(src);
  tdev_host_free(host);
  tdev_stream_destroy(st);
  return NULL;
}

static void run_case(int n) {
  pthread_t th[MAXR];
  rank_t ranks[MAXR];
  pthread_barrier_t bar;
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  g_n = n;
  g_barrier = &bar;
  assert_int_equal(ncclGetUniqueId(&g_id), ncclSuccess);
  assert_int_equal(pthread_barrier_init(g_barrier, NULL, (unsigned)n), 0);
  for (int r = 0; r < n; r++) {
    memset(&ranks[r], 0, sizeof(ranks[r]));
    ranks[r].rank = r;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &ranks[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(g_barrier);
  for (int r = 0; r < n; r++)
    if (ranks[r].failed) fail_msg("%d ranks: %s", n, ranks[r].msg);
}

/* The ranks as processes: barrier and results in shared memory. */
static void test_rma_procs(void **state) {
  struct shared {
    pthread_barrier_t bar;
    rank_t ranks[MAXR];
  } *sh;
  pthread_barrierattr_t attr;
  pid_t pids[MAXR];
  int n = 3;
  char why[256];
  (void)state;
  if (tdev_kind() != TDEV_HOST) {
    printf("SKIP: the process case runs in host mode (the thread cases run CUDA mode)\n");
    skip();
  }
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  assert_int_equal(pthread_barrierattr_init(&attr), 0);
  assert_int_equal(pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED), 0);
  assert_int_equal(pthread_barrier_init(&sh->bar, &attr, (unsigned)n), 0);
  g_n = n;
  g_barrier = &sh->bar;
  assert_int_equal(ncclGetUniqueId(&g_id), ncclSuccess);
  for (int r = 0; r < n; r++) {
    sh->ranks[r].rank = r;
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      rank_main(&sh->ranks[r]);
      _exit(0);
    }
  }
  for (int r = 0; r < n; r++) {
    int st = 0;
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("rank %d (process) ended with status %d", r, st);
  }
  for (int r = 0; r < n; r++)
    if (sh->ranks[r].failed) fail_msg("%d ranks as processes: %s", n, sh->ranks[r].msg);
  pthread_barrier_destroy(&sh->bar);
  munmap(sh, sizeof(*sh));
}

static void test_rma_3(void **state) {
  (void)state;
  run_case(3);
}

static void test_rma_5(void **state) {
  (void)state;
  run_case(5);
}

int main(void) {
  /* The never-sent signal gives up after this long. */
  setenv("BRAID_TIMEOUT", "3", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rma_procs), /* first: forks before threads exist */
      cmocka_unit_test(test_rma_3),
      cmocka_unit_test(test_rma_5),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
