/*
 * NCCL 2.29/2.30 calls on live communicators, public API only: three ranks
 * as threads of this process (one host, so one lsa team of 3), in the mode
 * BRAID_DEVICE picks (host; CUDA on the simulator or a GPU).
 *
 *  - windows: each rank registers an ncclMemAlloc'd buffer holding its own
 *    pattern; ncclWinGetUserPtr gives the buffer back, and
 *    ncclGetPeerDevicePointer / ncclGetLsaDevicePointer give each peer's
 *    window as this process maps it: the words read there are the peer's
 *    pattern (computed here, not read from the library). Bad ranks and
 *    offsets, NULL and deregistered windows are errors with a message.
 *    NCCL_WIN_STRICT_ORDERING is accepted.
 *  - ncclCommQueryProperties: rank, size, lsa teams; a struct not from its
 *    initializer is refused; a smaller (older) struct is filled only as far
 *    as its size.
 *  - ncclCommMemStats: host mode holds no device memory; Total equals
 *    Suspend and Persist is 0 (CUDA mode's measured bytes are
 *    test_suspend's); unknown stats fail.
 *  - the calls Braid does not implement yet (multimem, GIN) return
 *    ncclInvalidUsage and say so. Suspend, resume, grow and put/signal/wait
 *    are test_suspend's, test_grow's and test_rma's.
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
#include "core/devapi.h" /* the device API's host declarations (NCCL's nccl_device.h) */
#include "tdev.h"

#define NRANKS 3
#define WORDS 3000 /* 12000 bytes: not a whole number of pages */

static ncclUniqueId g_id;
static pthread_barrier_t g_barrier;
/* ncclGetLastError is the process's last WARN: a rank checking its own
 * message holds this lock, and so does every rank making calls that WARN. */
static pthread_mutex_t g_err = PTHREAD_MUTEX_INITIALIZER;
#define ERR_BEGIN() (pthread_mutex_lock(&g_err), locked = 1)
#define ERR_END() (locked = 0, pthread_mutex_unlock(&g_err))

typedef struct {
  int rank;
  int failed_line;
  char msg[256];
} rank_t;

static uint32_t pattern(int rank, size_t word) {
  return 0x9e3779b9u * (uint32_t)(rank + 1) ^ (uint32_t)(word * 2654435761u);
}

#define RCHECK(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      R->failed_line = __LINE__;                                              \
      snprintf(R->msg, sizeof(R->msg), "rank %d: %s (last error: %s)",        \
               R->rank, #cond, ncclGetLastError(NULL));                       \
      goto out;                                                               \
    }                                                                         \
  } while (0)

static int has(const char *text) { return strstr(ncclGetLastError(NULL), text) != NULL; }

static void *rank_main(void *arg) {
  rank_t *R = arg;
  ncclComm_t comm = NULL;
  uint32_t *buf = NULL, *buf2 = NULL;
  ncclWindow_t win = NULL, strict = NULL, junk = NULL;
  int waited = 0, locked = 0;
  void *p = NULL;
  int r = R->rank;

  RCHECK(ncclCommInitRank(&comm, NRANKS, g_id, r) == ncclSuccess);
  RCHECK(ncclMemAlloc((void **)&buf, WORDS * sizeof(uint32_t)) == ncclSuccess);
  RCHECK(ncclMemAlloc((void **)&buf2, WORDS * sizeof(uint32_t)) == ncclSuccess);
  for (size_t w = 0; w < WORDS; w++) buf[w] = pattern(r, w);

  RCHECK(ncclCommWindowRegister(comm, buf, WORDS * sizeof(uint32_t), &win, 0) == ncclSuccess);
  RCHECK(win != NULL);
  RCHECK(ncclWinGetUserPtr(comm, win, &p) == ncclSuccess);
  RCHECK(p == buf);
  ERR_BEGIN();
  RCHECK(ncclWinGetUserPtr(comm, NULL, &p) == ncclInvalidArgument);
  RCHECK(ncclWinGetUserPtr(comm, win, NULL) == ncclInvalidArgument);
  ERR_END();

  /* Every peer's window, at the first, an odd and the last word. */
  static const size_t words[] = {0, 1, 777, WORDS - 1};
  for (int peer = 0; peer < NRANKS; peer++) {
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
      size_t off = words[i] * sizeof(uint32_t);
      void *pp = NULL, *lp = NULL;
      RCHECK(ncclGetPeerDevicePointer(win, off, peer, &pp) == ncclSuccess);
      RCHECK(pp != NULL);
      RCHECK(*(volatile uint32_t *)pp == pattern(peer, words[i]));
      /* One host: the lsa team is the world, lsa rank = world rank. */
      RCHECK(ncclGetLsaDevicePointer(win, off, peer, &lp) == ncclSuccess);
      RCHECK(lp == pp);
    }
  }
  ERR_BEGIN();
  RCHECK(ncclGetPeerDevicePointer(win, 0, r, &p) == ncclSuccess && p == buf);
  RCHECK(ncclGetPeerDevicePointer(win, 0, NRANKS, &p) == ncclInvalidArgument);
  RCHECK(has("not a rank"));
  RCHECK(ncclGetPeerDevicePointer(win, 0, -1, &p) == ncclInvalidArgument);
  RCHECK(ncclGetLsaDevicePointer(win, 0, NRANKS, &p) == ncclInvalidArgument);
  RCHECK(has("lsa team"));
  RCHECK(ncclGetLsaDevicePointer(win, WORDS * sizeof(uint32_t), 0, &p) == ncclInvalidArgument);
  RCHECK(has("outside window"));
  RCHECK(ncclGetPeerDevicePointer(NULL, 0, 0, &p) == ncclInvalidArgument);
  RCHECK(ncclGetPeerDevicePointer(win, 0, 0, NULL) == ncclInvalidArgument);
  RCHECK(ncclGetLsaMultimemDevicePointer(win, 0, &p) == ncclInvalidUsage);
  RCHECK(has("multicast"));
  ERR_END();

  /* A second window, strictly ordered (accepted since 2.29). */
  RCHECK(ncclCommWindowRegister(comm, buf2, WORDS * sizeof(uint32_t), &strict,
                                NCCL_WIN_STRICT_ORDERING) == ncclSuccess);
  ERR_BEGIN();
  RCHECK(ncclCommWindowRegister(comm, buf2, 4096, &junk, 0x40) == ncclInvalidArgument);
  RCHECK(has("unknown window flags"));
  ERR_END();

  ERR_BEGIN();
  /* Properties, with a full and a short (older) struct. */
  {
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    RCHECK(ncclCommQueryProperties(comm, &props) == ncclSuccess);
    RCHECK(props.rank == r && props.nRanks == NRANKS && props.nLsaTeams == 1);
    RCHECK(!props.deviceApiSupport && !props.multimemSupport && !props.hostRmaSupport);
    RCHECK(props.ginType == NCCL_GIN_TYPE_NONE);
    RCHECK(props.size == sizeof(props) && props.magic == NCCL_API_MAGIC);
    ncclCommProperties_t shortp;
    memset(&shortp, 0x5a, sizeof(shortp));
    shortp.size = offsetof(ncclCommProperties_t, cudaDev);
    shortp.magic = NCCL_API_MAGIC;
    shortp.version = 22907;
    RCHECK(ncclCommQueryProperties(comm, &shortp) == ncclSuccess);
    RCHECK(shortp.rank == r && shortp.nRanks == NRANKS);
    RCHECK(shortp.cudaDev == 0x5a5a5a5a);  /* past its size: untouched */
    ncclCommProperties_t bad;
    memset(&bad, 0, sizeof(bad));
    RCHECK(ncclCommQueryProperties(comm, &bad) == ncclInvalidArgument);
    RCHECK(has("NCCL_COMM_PROPERTIES_INITIALIZER"));
  }

  /* Memory statistics. */
  {
    uint64_t v = 99, suspend = 99;
    RCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &suspend) == ncclSuccess);
    if (tdev_kind() == TDEV_HOST) RCHECK(suspend == 0);
    RCHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v) == ncclSuccess && v == suspend);
    v = 99;
    RCHECK(ncclCommMemStats(comm, ncclStatGpuMemPersist, &v) == ncclSuccess && v == 0);
    v = 99;
    RCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v) == ncclSuccess && v == 0);
    RCHECK(ncclCommMemStats(comm, (ncclCommMemStat_t)4, &v) == ncclInvalidArgument);
    RCHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL) == ncclInvalidArgument);
  }

  /* Not implemented yet: ncclInvalidUsage, and the last error says so. */
  {
    ncclWaitSignalDesc_t desc = {1, (r + 1) % NRANKS, 0, 0};
    ncclGinOutboxHandle outbox;
    ncclGinInboxA2AHandle inbox;
    ncclDevResourceRequirements_t req;
    RCHECK(ncclGinOutboxCreateRequirement(2, 12, &outbox, &req) == ncclInvalidUsage);
    RCHECK(has("GPU-initiated networking"));
    RCHECK(ncclGinInboxA2ACreateRequirement(ncclTeamWorld(comm), 2, 12, &inbox, &req) ==
           ncclInvalidUsage);
    RCHECK(ncclGinOutboxCreateRequirement(2, 12, NULL, &req) == ncclInvalidArgument);
    /* One-sided calls: argument errors here; the calls are test_rma's. */
    RCHECK(ncclPutSignal(buf, 4, ncclInt32, NRANKS, win, 0, 0, 0, 0, comm, NULL) ==
           ncclInvalidArgument);
    RCHECK(ncclSignal(0, 0, 0, 1, comm, NULL) == ncclInvalidArgument);
    RCHECK(ncclWaitSignal(-1, &desc, comm, NULL) == ncclInvalidArgument);
    RCHECK(ncclWaitSignal(1, NULL, comm, NULL) == ncclInvalidArgument);
  }
  ERR_END();

  /* Nobody deregisters while a peer may still read its window. */
  pthread_barrier_wait(&g_barrier);
  waited = 1;
  RCHECK(ncclCommWindowDeregister(comm, strict) == ncclSuccess);
  RCHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess);
  ERR_BEGIN();
  RCHECK(ncclGetPeerDevicePointer(win, 0, 0, &p) == ncclInvalidArgument);
  RCHECK(has("not registered"));
  RCHECK(ncclWinGetUserPtr(comm, win, &p) == ncclInvalidArgument);
  ERR_END();
out:
  if (locked) ERR_END();
  if (!waited) pthread_barrier_wait(&g_barrier);  /* keep the others moving */
  if (comm != NULL) ncclCommDestroy(comm);
  if (buf != NULL) ncclMemFree(buf);
  if (buf2 != NULL) ncclMemFree(buf2);
  return NULL;
}

static void test_windows_and_new_calls(void **state) {
  pthread_t th[NRANKS];
  rank_t ranks[NRANKS];
  char why[256];
  (void)state;
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  assert_int_equal(ncclGetUniqueId(&g_id), ncclSuccess);
  assert_int_equal(pthread_barrier_init(&g_barrier, NULL, NRANKS), 0);
  for (int r = 0; r < NRANKS; r++) {
    memset(&ranks[r], 0, sizeof(ranks[r]));
    ranks[r].rank = r;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &ranks[r]), 0);
  }
  for (int r = 0; r < NRANKS; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&g_barrier);
  for (int r = 0; r < NRANKS; r++) {
    if (ranks[r].failed_line != 0) fail_msg("line %d: %s", ranks[r].failed_line, ranks[r].msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_windows_and_new_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
