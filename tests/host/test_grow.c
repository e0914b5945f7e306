/*
 * ncclCommGetUniqueId and ncclCommGrow on live communicators, public API
 * only, ranks as threads, in the mode BRAID_DEVICE picks: an old
 * communicator of `old` ranks grows to `total` ranks (2 -> 4 and 3 -> 5).
 * On the grown communicator AllReduce, AllGather, Broadcast, ReduceScatter,
 * Reduce and AlltoAll are compared with results computed here; existing
 * ranks keep their numbers; the old communicator still works. The id rules
 * (one unconsumed id per communicator; an id is used once; exactly one
 * existing rank passes it) are checked.
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

#define MAXR 8
#define COUNT 515 /* odd */
#define SYNC_S 120.0

static int g_old, g_total;
static ncclUniqueId g_old_id, g_grow_id;
static pthread_barrier_t g_barrier;

typedef struct {
  int rank;
  char msg[512];
  int failed;
} rank_t;

static int32_t input(int rank, size_t i) {
  return (int32_t)((rank + 3) * 11 + (int)(i % 613) * 5 - rank * (int)(i % 7));
}

#define FAILF(...)                                                            \
  do {                                                                        \
    snprintf(R->msg, sizeof(R->msg), __VA_ARGS__);                            \
    R->failed = 1;                                                            \
    goto out;                                                                 \
  } while (0)
#define TRY(call)                                                             \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      FAILF("rank %d: %s = %d (%s)", R->rank, #call, (int)r_, ncclGetLastError(NULL)); \
  } while (0)
#define SYNC()                                                                \
  do {                                                                        \
    if (tdev_stream_sync(stream, SYNC_S) != 0)                                \
      FAILF("rank %d: %s", R->rank, tdev_last_error());                       \
  } while (0)
#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) FAILF(__VA_ARGS__);                                          \
  } while (0)

/* Every collective on comm (n ranks, this one `me`), checked. */
static int run_colls(rank_t *R, ncclComm_t comm, int n, int me, cudaStream_t stream,
                     int32_t *send, int32_t *recv) {
  int32_t want;
  for (size_t i = 0; i < (size_t)n * COUNT; i++) send[i] = input(me, i);

  TRY(ncclAllReduce(send, recv, COUNT, ncclInt32, ncclSum, comm, stream));
  SYNC();
  for (size_t i = 0; i < COUNT; i++) {
    want = 0;
    for (int r = 0; r < n; r++) want += input(r, i);
    EXPECT(recv[i] == want, "rank %d: all-reduce [%zu] %d, expected %d", me, i, recv[i], want);
  }
  TRY(ncclAllGather(send, recv, COUNT, ncclInt32, comm, stream));
  SYNC();
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < COUNT; i++)
      EXPECT(recv[r * COUNT + i] == input(r, i), "rank %d: all-gather block %d [%zu]", me, r, i);
  TRY(ncclBroadcast(send, recv, COUNT, ncclInt32, n - 1, comm, stream));
  SYNC();
  for (size_t i = 0; i < COUNT; i++)
    EXPECT(recv[i] == input(n - 1, i), "rank %d: broadcast [%zu]", me, i);
  TRY(ncclReduceScatter(send, recv, COUNT, ncclInt32, ncclSum, comm, stream));
  SYNC();
  for (size_t i = 0; i < COUNT; i++) {
    want = 0;
    for (int r = 0; r < n; r++) want += input(r, (size_t)me * COUNT + i);
    EXPECT(recv[i] == want, "rank %d: reduce-scatter [%zu] %d, expected %d", me, i, recv[i], want);
  }
  TRY(ncclReduce(send, recv, COUNT, ncclInt32, ncclMax, 1, comm, stream));
  SYNC();
  if (me == 1)
    for (size_t i = 0; i < COUNT; i++) {
      want = input(0, i);
      for (int r = 1; r < n; r++) want = input(r, i) > want ? input(r, i) : want;
      EXPECT(recv[i] == want, "rank 1: reduce(max) [%zu] %d, expected %d", i, recv[i], want);
    }
  TRY(ncclAlltoAll(send, recv, COUNT, ncclInt32, comm, stream));
  SYNC();
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < COUNT; i++)
      EXPECT(recv[r * COUNT + i] == input(r, (size_t)me * COUNT + i),
             "rank %d: all-to-all from %d [%zu]", me, r, i);
  return 0;
out:
  return 1;
}

static void *rank_main(void *arg) {
  rank_t *R = arg;
  int me = R->rank, existing = me < g_old;
  ncclComm_t old = NULL, grown = NULL;
  cudaStream_t stream = NULL;
  size_t bytes = (size_t)g_total * COUNT * sizeof(int32_t);
  int32_t *send = tdev_alloc(bytes), *recv = tdev_alloc(bytes);
  int waited = 0;
  if (send == NULL || recv == NULL || tdev_stream_create(&stream) != 0)
    FAILF("rank %d: %s", me, tdev_last_error());
  if (existing) {
    TRY(ncclCommInitRank(&old, g_old, g_old_id, me));
    if (run_colls(R, old, g_old, me, stream, send, recv)) goto out;
    if (me == 0) {
      ncclUniqueId again;
      TRY(ncclCommGetUniqueId(old, &g_grow_id));
      /* The others wait at the barrier: this rank's WARN is the last one. */
      EXPECT(ncclCommGetUniqueId(old, &again) == ncclInvalidUsage &&
                 strstr(ncclGetLastError(NULL), "has not been used") != NULL,
             "rank 0: a second id before the first was used was not refused");
      EXPECT(ncclCommGrow(old, g_old, &g_grow_id, -1, &grown, NULL) == ncclInvalidArgument,
             "rank 0: growing to the same size was not refused");
      /* That failed grow consumed the id, as in NCCL: make another. */
      TRY(ncclCommGetUniqueId(old, &g_grow_id));
    }
  }
  pthread_barrier_wait(&g_barrier); /* the id is published */
  waited = 1;
  if (existing)
    TRY(ncclCommGrow(old, g_total, me == 0 ? &g_grow_id : NULL, -1, &grown, NULL));
  else
    TRY(ncclCommGrow(NULL, g_total, &g_grow_id, me, &grown, NULL));
  {
    int count = 0, rank = -1;
    TRY(ncclCommCount(grown, &count));
    TRY(ncclCommUserRank(grown, &rank));
    EXPECT(count == g_total && rank == me, "rank %d: the grown comm says rank %d of %d", me,
           rank, count);
  }
  if (run_colls(R, grown, g_total, me, stream, send, recv)) goto out;
  if (existing) {
    /* The old communicator is still whole; and a new id may be made. */
    if (run_colls(R, old, g_old, me, stream, send, recv)) goto out;
    if (me == 0) {
      ncclUniqueId next;
      TRY(ncclCommGetUniqueId(old, &next));
    }
  }
out:
  if (!waited) pthread_barrier_wait(&g_barrier);
  if (grown != NULL) ncclCommDestroy(grown);
  if (old != NULL) ncclCommDestroy(old);
  tdev_stream_destroy(stream);
  tdev_free(send);
  tdev_free(recv);
  return NULL;
}

static void grow_case(int old, int total) {
  pthread_t th[MAXR];
  rank_t ranks[MAXR];
  g_old = old;
  g_total = total;
  assert_int_equal(ncclGetUniqueId(&g_old_id), ncclSuccess);
  assert_int_equal(pthread_barrier_init(&g_barrier, NULL, (unsigned)total), 0);
  for (int r = 0; r < total; r++) {
    memset(&ranks[r], 0, sizeof(ranks[r]));
    ranks[r].rank = r;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &ranks[r]), 0);
  }
  for (int r = 0; r < total; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&g_barrier);
  for (int r = 0; r < total; r++)
    if (ranks[r].failed) fail_msg("%d -> %d ranks: %s", old, total, ranks[r].msg);
}

static int usable(void) {
  char why[256];
  if (tdev_usable(why, sizeof(why))) return 1;
  printf("SKIP: %s\n", why);
  return 0;
}

static void test_grow_2_to_4(void **state) {
  (void)state;
  if (!usable()) skip();
  grow_case(2, 4);
}

static void test_grow_3_to_5(void **state) {
  (void)state;
  if (!usable()) skip();
  grow_case(3, 5);
}

/* Argument errors need no peers. */
static void test_grow_arguments(void **state) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  (void)state;
  memset(&id, 0, sizeof(id));
  assert_int_equal(ncclCommGrow(NULL, 4, &id, 4, &c, NULL), ncclInvalidArgument);
  assert_int_equal(ncclCommGrow(NULL, 4, &id, -1, &c, NULL), ncclInvalidArgument);
  assert_int_equal(ncclCommGrow(NULL, 4, NULL, 1, &c, NULL), ncclInvalidArgument);
  assert_int_equal(ncclCommGrow(NULL, 4, &id, 1, NULL, NULL), ncclInvalidArgument);
  assert_int_equal(ncclCommGetUniqueId(NULL, &id), ncclInvalidArgument);
  assert_null(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grow_arguments),
      cmocka_unit_test(test_grow_2_to_4),
      cmocka_unit_test(test_grow_3_to_5),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
