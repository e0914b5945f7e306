/*
 * Group semantics and argument checks of every collective and
 * point-to-point call, end to end in host mode, public API only.
 *
 * Groups, as NCCL defines them: nesting (only the outermost ncclGroupEnd
 * runs anything), ncclGroupEnd without ncclGroupStart, a failed call
 * dropping its whole group, blocking and nonblocking communicators in one
 * group, nonblocking groups and calls (ncclInProgress, then
 * ncclCommGetAsyncError until done; a second call while busy refused), a
 * nonblocking communicator keeping an argument error as its state, one
 * thread driving several communicators, an abort from another thread
 * stopping a launch stuck on a missing peer.
 *
 * Arguments: count 0 succeeds with any buffers; bad dtype, op, root and
 * peer; NULL buffers that would be used; buffers NCCL ignores (non-root
 * broadcast and scatter inputs, reduce and gather outputs) may be NULL;
 * every in-place layout NCCL defines is accepted and every other overlap
 * refused, including all-to-all in place and overlapping send/receive
 * buffers of one group; NCCL_CHECK_POINTERS probing inaccessible and
 * read-only memory; a revoked communicator. Every error asserts the code
 * and a message naming the problem (ncclGetLastError).
 */
/* nccl.h declares ncclResetDebugInit on Linux only, as NCCL 2.30 does. */
#define NCCL_OS_LINUX 1

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
#include <unistd.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

/* The call returns `code` and the last error names `needle`. */
#define EXPECT_ERR(call, code, needle)                                        \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    const char *m_ = ncclGetLastError(NULL);                                  \
    if (r_ != (code) || m_ == NULL || strstr(m_, (needle)) == NULL)          \
      fail_msg("%s: got %d (%s), expected %d with \"%s\"", #call, (int)r_,  \
               m_ ? m_ : "(null)", (int)(code), (needle));                   \
  } while (0)

static void comms_init(ncclComm_t *comms, int n) {
  NCCL_OK(ncclCommInitAll(comms, n, NULL));
}

static void comms_destroy(ncclComm_t *comms, int n) {
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
}

/* ---- groups ------------------------------------------------------------------ */

static void test_group_end_without_start(void **state) {
  (void)state;
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupEnd());
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
}

/* Nested groups run at the outermost ncclGroupEnd; calls of one thread on
 * several communicators (one per rank) complete together. */
static void test_nesting(void **state) {
  (void)state;
  ncclComm_t c[3];
  comms_init(c, 3);
  int32_t in[3] = {1, 20, 300}, out[3] = {-1, -1, -1};
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 3; r++) NCCL_OK(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, c[r], NULL));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 3; r++) assert_int_equal(out[r], -1);
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 3; r++) assert_int_equal(out[r], 321);
  comms_destroy(c, 3);
}

/* A call that fails inside a group fails the group: nothing in it runs,
 * ncclGroupEnd returns the error, and the next group is clean. */
static void test_failed_call_drops_group(void **state) {
  (void)state;
  ncclComm_t c[2];
  comms_init(c, 2);
  int32_t in[2] = {4, 5}, out[2] = {-1, -1};
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCL_OK(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, c[r], NULL));
  EXPECT_ERR(ncclBroadcast(&in[0], &out[0], 1, ncclInt32, 7, c[0], NULL), ncclInvalidArgument,
             "root");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "root");
  assert_int_equal(out[0], -1);
  assert_int_equal(out[1], -1);
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCL_OK(ncclAllReduce(&in[r], &out[r], 1, ncclInt32, ncclSum, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  assert_int_equal(out[0], 9);
  assert_int_equal(out[1], 9);
  comms_destroy(c, 2);
}

/* Nonblocking communicators, made by one thread in a group. */
static void nb_init(ncclComm_t *comms, int n) {
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    ncclResult_t res = ncclCommInitRankConfig(&comms[r], n, id, r, &cfg);
    assert_true(res == ncclSuccess || res == ncclInProgress);
  }
  ncclResult_t res = ncclGroupEnd();
  assert_true(res == ncclSuccess || res == ncclInProgress);
}

/* Polls until no communicator is in progress (10 s at most); returns the
 * first non-success state, or ncclSuccess. */
static ncclResult_t nb_wait(ncclComm_t *comms, int n) {
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < n; r++) {
    ncclResult_t st = ncclInProgress;
    for (int i = 0; i < 10000 && st == ncclInProgress; i++) {
      NCCL_OK(ncclCommGetAsyncError(comms[r], &st));
      if (st == ncclInProgress) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
      }
    }
    if (st != ncclSuccess && first == ncclSuccess) first = st;
  }
  return first;
}

static void test_nonblocking(void **state) {
  (void)state;
  ncclComm_t c[2];
  nb_init(c, 2);
  assert_int_equal(nb_wait(c, 2), ncclSuccess);

  /* Rank 0 alone: its group cannot finish until rank 1 joins. */
  int32_t in[2] = {3, 4}, out[2] = {-1, -1};
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(&in[0], &out[0], 1, ncclInt32, ncclSum, c[0], NULL));
  assert_int_equal(ncclGroupEnd(), ncclInProgress);
  for (int i = 0; i < 3; i++) {
    ncclResult_t st;
    NCCL_OK(ncclCommGetAsyncError(c[0], &st));
    assert_int_equal(st, ncclInProgress);
    struct timespec ts = {0, 10000000L};
    nanosleep(&ts, NULL);
  }
  /* A second call while the first runs is refused and changes nothing. */
  EXPECT_ERR(ncclAllReduce(&in[0], &out[0], 1, ncclInt32, ncclSum, c[0], NULL),
             ncclInvalidArgument, "previous operation");
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(&in[1], &out[1], 1, ncclInt32, ncclSum, c[1], NULL));
  assert_int_equal(ncclGroupEnd(), ncclInProgress);
  assert_int_equal(nb_wait(c, 2), ncclSuccess);
  assert_int_equal(out[0], 7);
  assert_int_equal(out[1], 7);

  /* Outside a group a call on a nonblocking communicator is a group of
   * one: ncclInProgress (or ncclSuccess if already done). */
  float x[2] = {1.5f, 2.5f}, y[2][2] = {{0, 0}, {0, 0}};
  for (int r = 0; r < 2; r++) {
    ncclResult_t res = ncclAllGather(&x[r], y[r], 1, ncclFloat32, c[r], NULL);
    assert_true(res == ncclInProgress || res == ncclSuccess);
  }
  assert_int_equal(nb_wait(c, 2), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    assert_true(y[r][0] == 1.5f);
    assert_true(y[r][1] == 2.5f);
  }

  /* Send/recv on nonblocking communicators. */
  int64_t s[2] = {111, 222}, t[2] = {0, 0};
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) {
    NCCL_OK(ncclSend(&s[r], 1, ncclInt64, 1 - r, c[r], NULL));
    NCCL_OK(ncclRecv(&t[r], 1, ncclInt64, 1 - r, c[r], NULL));
  }
  assert_int_equal(ncclGroupEnd(), ncclInProgress);
  assert_int_equal(nb_wait(c, 2), ncclSuccess);
  assert_int_equal(t[0], 222);
  assert_int_equal(t[1], 111);

  /* An argument error on a nonblocking communicator becomes its state, as
   * in NCCL; it can then only be aborted. */
  EXPECT_ERR(ncclAllReduce(&in[0], &out[0], 1, (ncclDataType_t)99, ncclSum, c[0], NULL),
             ncclInvalidArgument, "invalid type");
  ncclResult_t st;
  NCCL_OK(ncclCommGetAsyncError(c[0], &st));
  assert_int_equal(st, ncclInvalidArgument);
  NCCL_OK(ncclCommAbort(c[0]));
  NCCL_OK(ncclCommDestroy(c[1]));
}

/* Blocking and nonblocking communicators may not share a group. */
static void test_mixed_blocking_modes(void **state) {
  (void)state;
  ncclComm_t nb[1], bl[1];
  nb_init(nb, 1);
  assert_int_equal(nb_wait(nb, 1), ncclSuccess);
  comms_init(bl, 1);
  int32_t a = 1, b = 0;
  NCCL_OK(ncclGroupStart());
  /* Queued in the nonblocking mode... */
  assert_true(ncclAllReduce(&a, &b, 1, ncclInt32, ncclSum, nb[0], NULL) == ncclSuccess);
  /* ...then a blocking communicator joins. */
  EXPECT_ERR(ncclAllReduce(&a, &b, 1, ncclInt32, ncclSum, bl[0], NULL), ncclInvalidArgument,
             "blocking and nonblocking");
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "blocking and nonblocking");
  assert_int_equal(b, 0);
  /* The dropped group's nonblocking communicator holds the error. */
  ncclResult_t st;
  NCCL_OK(ncclCommGetAsyncError(nb[0], &st));
  assert_int_equal(st, ncclInvalidArgument);
  NCCL_OK(ncclCommAbort(nb[0]));
  /* The blocking one is fine. */
  NCCL_OK(ncclAllReduce(&a, &b, 1, ncclInt32, ncclSum, bl[0], NULL));
  assert_int_equal(b, 1);
  comms_destroy(bl, 1);
}

/* ---- arguments ------------------------------------------------------------- */

/* Runs `call` for every rank of c in one group with rank `bad`'s call
 * expected to fail with code/needle; the group then fails the same way. */
#define GROUP_EXPECT(n, bad, call, code, needle)                              \
  do {                                                                        \
    NCCL_OK(ncclGroupStart());                                                \
    for (int r = 0; r < (n); r++) {                                           \
      if (r == (bad)) EXPECT_ERR(call, code, needle);                         \
      else NCCL_OK(call);                                                     \
    }                                                                         \
    EXPECT_ERR(ncclGroupEnd(), code, needle);                                 \
  } while (0)

static void test_count_zero_and_bad_values(void **state) {
  (void)state;
  ncclComm_t c[1];
  comms_init(c, 1);
  void *junk = (void *)(uintptr_t)0x10; /* never dereferenced with count 0 */
  NCCL_OK(ncclAllGather(junk, junk, 0, ncclInt32, c[0], NULL));
  NCCL_OK(ncclReduceScatter(NULL, NULL, 0, ncclFloat32, ncclMax, c[0], NULL));
  NCCL_OK(ncclBroadcast(NULL, NULL, 0, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclReduce(junk, NULL, 0, ncclInt8, ncclSum, 0, c[0], NULL));
  NCCL_OK(ncclAlltoAll(junk, junk, 0, ncclInt8, c[0], NULL));
  NCCL_OK(ncclGather(NULL, NULL, 0, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclScatter(NULL, NULL, 0, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclSend(NULL, 0, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclRecv(NULL, 0, ncclInt8, 0, c[0], NULL));

  int32_t a[8], b[8];
  ncclDataType_t bad_t = (ncclDataType_t)ncclNumTypes;
  EXPECT_ERR(ncclAllGather(a, b, 1, bad_t, c[0], NULL), ncclInvalidArgument, "invalid type");
  EXPECT_ERR(ncclReduceScatter(a, b, 1, bad_t, ncclSum, c[0], NULL), ncclInvalidArgument,
             "invalid type");
  EXPECT_ERR(ncclAlltoAll(a, b, 1, (ncclDataType_t)-1, c[0], NULL), ncclInvalidArgument,
             "invalid type");
  EXPECT_ERR(ncclSend(a, 1, bad_t, 0, c[0], NULL), ncclInvalidArgument, "invalid type");
  EXPECT_ERR(ncclReduceScatter(a, b, 1, ncclInt32, (ncclRedOp_t)-1, c[0], NULL),
             ncclInvalidArgument, "invalid reduction operation");
  EXPECT_ERR(ncclReduce(a, b, 1, ncclInt32, (ncclRedOp_t)(ncclNumOps + 3), 0, c[0], NULL),
             ncclInvalidArgument, "unknown to this communicator");
  EXPECT_ERR(ncclBroadcast(a, b, 1, ncclInt32, 1, c[0], NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclBcast(a, 1, ncclInt32, -1, c[0], NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclReduce(a, b, 1, ncclInt32, ncclSum, 2, c[0], NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclGather(a, b, 1, ncclInt32, 5, c[0], NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclScatter(a, b, 1, ncclInt32, -3, c[0], NULL), ncclInvalidArgument, "root");
  EXPECT_ERR(ncclSend(a, 1, ncclInt32, 1, c[0], NULL), ncclInvalidArgument, "peer");
  EXPECT_ERR(ncclRecv(a, 1, ncclInt32, -1, c[0], NULL), ncclInvalidArgument, "peer");
  EXPECT_ERR(ncclAllGather(NULL, b, 1, ncclInt32, c[0], NULL), ncclInvalidArgument, "sendbuff");
  EXPECT_ERR(ncclAllGather(a, NULL, 1, ncclInt32, c[0], NULL), ncclInvalidArgument, "recvbuff");
  EXPECT_ERR(ncclReduceScatter(NULL, b, 1, ncclInt32, ncclSum, c[0], NULL),
             ncclInvalidArgument, "sendbuff");
  EXPECT_ERR(ncclAlltoAll(a, NULL, 1, ncclInt32, c[0], NULL), ncclInvalidArgument, "recvbuff");
  EXPECT_ERR(ncclBroadcast(NULL, b, 1, ncclInt32, 0, c[0], NULL), ncclInvalidArgument,
             "sendbuff");
  EXPECT_ERR(ncclReduce(a, NULL, 1, ncclInt32, ncclSum, 0, c[0], NULL), ncclInvalidArgument,
             "recvbuff");
  EXPECT_ERR(ncclGather(a, NULL, 1, ncclInt32, 0, c[0], NULL), ncclInvalidArgument, "recvbuff");
  EXPECT_ERR(ncclScatter(NULL, b, 1, ncclInt32, 0, c[0], NULL), ncclInvalidArgument, "sendbuff");
  EXPECT_ERR(ncclSend(NULL, 1, ncclInt32, 0, c[0], NULL), ncclInvalidArgument, "sendbuff");
  EXPECT_ERR(ncclRecv(NULL, 1, ncclInt32, 0, c[0], NULL), ncclInvalidArgument, "recvbuff");
  comms_destroy(c, 1);
}

/* Buffers NCCL ignores may be NULL off the root. */
static void test_ignored_buffers(void **state) {
  (void)state;
  ncclComm_t c[3];
  comms_init(c, 3);
  int32_t v[3] = {7, 8, 9}, out[3] = {0, 0, 0}, all[3] = {0, 0, 0};
  /* Broadcast from 1: non-roots pass no send buffer. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 3; r++)
    NCCL_OK(ncclBroadcast(r == 1 ? &v[1] : NULL, &out[r], 1, ncclInt32, 1, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 3; r++) assert_int_equal(out[r], 8);
  /* Reduce to 2: non-roots pass no receive buffer. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 3; r++)
    NCCL_OK(ncclReduce(&v[r], r == 2 ? &out[2] : NULL, 1, ncclInt32, ncclSum, 2, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  assert_int_equal(out[2], 24);
  /* Gather to 0 and scatter from 0 likewise. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 3; r++)
    NCCL_OK(ncclGather(&v[r], r == 0 ? all : NULL, 1, ncclInt32, 0, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int q = 0; q < 3; q++) assert_int_equal(all[q], v[q]);
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 3; r++)
    NCCL_OK(ncclScatter(r == 0 ? all : NULL, &out[r], 1, ncclInt32, 0, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 3; r++) assert_int_equal(out[r], v[r]);
  comms_destroy(c, 3);
}

/* In-place layouts NCCL defines pass; any other overlap is refused. */
static void test_overlaps(void **state) {
  (void)state;
  enum { N = 2, C = 4 };
  ncclComm_t c[N];
  comms_init(c, N);
  int32_t buf[N][N * C + 8];
  for (int r = 0; r < N; r++)
    for (int k = 0; k < N * C + 8; k++) buf[r][k] = 100 * r + k;

  /* Legal: all-gather sendbuff == recvbuff + rank * count. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++)
    NCCL_OK(ncclAllGather(buf[r] + r * C, buf[r], C, ncclInt32, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < N; r++)
    for (int q = 0; q < N; q++) assert_int_equal(buf[r][q * C], 100 * q + q * C);
  /* Illegal: rank 1 in place at offset 0. */
  GROUP_EXPECT(N, 1, ncclAllGather(buf[r] + (r == 1 ? 0 : r * C), buf[r], C, ncclInt32, c[r], NULL),
               ncclInvalidArgument, "overlap");
  /* Reduce-scatter: recvbuff == sendbuff + rank * count is legal. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++)
    NCCL_OK(ncclReduceScatter(buf[r], buf[r] + r * C, C, ncclInt32, ncclSum, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  GROUP_EXPECT(N, 0, ncclReduceScatter(buf[r], buf[r] + (r == 0 ? 1 : r * C), C, ncclInt32,
                                       ncclSum, c[r], NULL),
               ncclInvalidArgument, "overlap");
  /* All-to-all has no in-place form. */
  GROUP_EXPECT(N, 1, ncclAlltoAll(buf[r], r == 1 ? buf[r] : buf[r] + N * C, C / 2, ncclInt32,
                                  c[r], NULL),
               ncclInvalidArgument, "overlap");
  /* Broadcast and reduce: only sendbuff == recvbuff. */
  GROUP_EXPECT(N, 0, ncclBroadcast(buf[r], buf[r] + (r == 0 ? 1 : 0), C, ncclInt32, 0, c[r], NULL),
               ncclInvalidArgument, "overlap");
  GROUP_EXPECT(N, 1, ncclReduce(buf[r], buf[r] + (r == 1 ? 2 : 0), C, ncclInt32, ncclSum, 1,
                                c[r], NULL),
               ncclInvalidArgument, "overlap");
  /* Gather and scatter: in place on the root at root * count. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++)
    NCCL_OK(ncclGather(r == 1 ? buf[r] + C : buf[r], buf[r], C, ncclInt32, 1, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  GROUP_EXPECT(N, 1, ncclGather(buf[r], buf[r], C, ncclInt32, 1, c[r], NULL),
               ncclInvalidArgument, "overlap");
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++)
    NCCL_OK(ncclScatter(buf[r], r == 0 ? buf[r] : buf[r] + N * C, C, ncclInt32, 0, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  GROUP_EXPECT(N, 0, ncclScatter(buf[r], r == 0 ? buf[r] + 3 : buf[r] + N * C, C, ncclInt32, 0,
                                 c[r], NULL),
               ncclInvalidArgument, "overlap");

  /* Send/recv: two receive buffers of a group overlapping are refused
   * when the group ends. */
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL_OK(ncclSend(buf[r], C, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclSend(buf[r], C, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclRecv(buf[r] + N * C, C, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclRecv(buf[r] + N * C + 2, C, ncclInt32, 1 - r, c[r], NULL));
  }
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "overlap");
  /* A send overlapping a receive of its group sends what the buffer held
   * when the group started (nccl-tests' in-place sendrecv): a ring shift
   * in one buffer. */
  int32_t before[N][C];
  for (int r = 0; r < N; r++) memcpy(before[r], buf[r] + 1, sizeof(before[r]));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL_OK(ncclSend(buf[r] + 1, C, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclRecv(buf[r] + 3, C, ncclInt32, 1 - r, c[r], NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < N; r++)
    for (int k = 0; k < C; k++) assert_int_equal(buf[r][3 + k], before[1 - r][k]);
  /* The refused group reserved nothing: the next exchange works. */
  int32_t self_before[N];
  for (int r = 0; r < N; r++) self_before[r] = buf[r][N * C + 2];
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL_OK(ncclSend(buf[r], 2, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclRecv(buf[r] + C, 2, ncclInt32, 1 - r, c[r], NULL));
    NCCL_OK(ncclSend(buf[r] + N * C, 3, ncclInt32, r, c[r], NULL));
    NCCL_OK(ncclRecv(buf[r] + N * C, 3, ncclInt32, r, c[r], NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < N; r++) {
    assert_int_equal(buf[r][C], buf[1 - r][0]);
    assert_int_equal(buf[r][N * C + 2], self_before[r]);
  }
  comms_destroy(c, N);
}

/* Parameters are read once per process; ncclResetDebugInit (deprecated
 * for users, still exported) reloads them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* NCCL_CHECK_POINTERS=1 probes buffers: unmapped or read-only memory is
 * refused up front instead of failing inside the group. */
static void test_check_pointers(void **state) {
  (void)state;
  long page = sysconf(_SC_PAGESIZE);
  /* Inaccessible memory (PROT_NONE: unlike an unmapped range, no other
   * mapping can take its place during the test) and read-only memory. */
  char *gone = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *ro = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(gone != MAP_FAILED && ro != MAP_FAILED);
  ncclComm_t c[1];
  comms_init(c, 1);
  int32_t a[4] = {1, 2, 3, 4}, b[4];
  setenv("NCCL_CHECK_POINTERS", "1", 1);
  ncclResetDebugInit();
  EXPECT_ERR(ncclAllReduce(gone, b, 4, ncclInt32, ncclSum, c[0], NULL), ncclInvalidArgument,
             "not a valid pointer");
  EXPECT_ERR(ncclBroadcast(a, ro, 4, ncclInt32, 0, c[0], NULL), ncclInvalidArgument,
             "not a valid pointer");
  EXPECT_ERR(ncclSend(gone, 4, ncclInt32, 0, c[0], NULL), ncclInvalidArgument,
             "not a valid pointer");
  /* Readable is enough for a send buffer; good buffers pass. */
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(ro, 4, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclRecv(b, 4, ncclInt8, 0, c[0], NULL));
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclAllReduce(a, b, 4, ncclInt32, ncclSum, c[0], NULL));
  assert_int_equal(b[3], 4);
  unsetenv("NCCL_CHECK_POINTERS");
  ncclResetDebugInit();
  munmap(ro, (size_t)page);
  munmap(gone, (size_t)page);
  comms_destroy(c, 1);
}

/* ncclCommAbort from another thread stops a launch stuck waiting for a
 * peer that never comes, and frees the communicator once it returned. */
typedef struct {
  ncclComm_t comm;
  ncclResult_t res;
} stuck_t;

static void *stuck_main(void *p) {
  stuck_t *s = p;
  float a[64] = {0}, b[64];
  s->res = ncclAllReduce(a, b, 64, ncclFloat32, ncclSum, s->comm, NULL);
  return NULL;
}

static void test_abort_from_other_thread(void **state) {
  (void)state;
  ncclComm_t c[2];
  comms_init(c, 2);
  /* A first collective sets the runtime up on this thread. */
  int32_t x[2] = {1, 2}, y[2];
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCL_OK(ncclAllReduce(&x[r], &y[r], 1, ncclInt32, ncclSum, c[r], NULL));
  NCCL_OK(ncclGroupEnd());
  stuck_t s = {c[0], ncclSuccess};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, stuck_main, &s), 0);
  struct timespec ts = {0, 200000000L};
  nanosleep(&ts, NULL); /* rank 1 never calls: rank 0 waits */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  NCCL_OK(ncclCommAbort(c[0]));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(th, NULL);
  assert_int_not_equal(s.res, ncclSuccess);
  assert_true((t1.tv_sec - t0.tv_sec) < 2);
  NCCL_OK(ncclCommAbort(c[1]));
}

static void test_revoked(void **state) {
  (void)state;
  ncclComm_t c[1];
  comms_init(c, 1);
  NCCL_OK(ncclCommRevoke(c[0], NCCL_REVOKE_DEFAULT));
  int32_t a = 1, b;
  EXPECT_ERR(ncclAllGather(&a, &b, 1, ncclInt32, c[0], NULL), ncclInvalidUsage, "revoked");
  EXPECT_ERR(ncclSend(&a, 1, ncclInt32, 0, c[0], NULL), ncclInvalidUsage, "revoked");
  NCCL_OK(ncclCommDestroy(c[0]));
}

int main(void) {
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "30", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_end_without_start),
      cmocka_unit_test(test_nesting),
      cmocka_unit_test(test_failed_call_drops_group),
      cmocka_unit_test(test_nonblocking),
      cmocka_unit_test(test_mixed_blocking_modes),
      cmocka_unit_test(test_count_zero_and_bad_values),
      cmocka_unit_test(test_ignored_buffers),
      cmocka_unit_test(test_overlaps),
      cmocka_unit_test(test_check_pointers),
      cmocka_unit_test(test_abort_from_other_thread),
      cmocka_unit_test(test_revoked),
  };
  return cmocka_run_group_tests_name("group", tests, NULL, NULL);
}
