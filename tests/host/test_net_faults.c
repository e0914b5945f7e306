/*
 * Faults on port channels (core/proxy.c) in host mode, ranks staged on two
 * hosts (BRAID_HOSTID) so that their channels cross the socket net:
 *   - a rank that dies in the middle of a stream of all-reduces: every
 *     other rank's call returns an error within seconds (well inside
 *     BRAID_TIMEOUT, which is set high to show the error does not come
 *     from the timeout), naming the dead rank where the net saw it;
 *   - a net with no usable interface (NCCL_SOCKET_IFNAME names none, the
 *     bootstrap running on loopback through NCCL_COMM_ID): the first
 *     collective returns ncclInvalidUsage at once, and the message names
 *     NCCL_SOCKET_IFNAME; with the bad setting on one rank of three, every
 *     rank fails so, naming that rank (the window records carry each
 *     rank's net state);
 *   - a normal end: ranks that finish at different times (one leaves
 *     right after its last call while the others still run) see no
 *     failure at all;
 *   - a rank that fails a call of its own and aborts while the others
 *     split the communicator (a bootstrap exchange): every other rank's
 *     error carries its reason (the bootstrap's leave message).
 * Every rank is a forked process; the parent bounds each with a deadline.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"

#define NRANKS 4
#define COUNT (1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What a rank reports to the parent through its pipe. */
typedef struct {
  int result;        /* ncclResult_t of the failing call, 0 when all passed */
  int calls;         /* calls that completed and checked out */
  double fail_after; /* seconds from the death to the failure, if any */
  char msg[1000];
} report_t;

static void stage(int rank) {
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_HOSTID", rank < NRANKS / 2 ? "node-a" : "node-b", 1);
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "20", 1);
}

/* What the ranks of one case do (each rank function reads its part). */
typedef struct {
  int iters;  /* rank_loop: all-reduces per rank */
  int victim; /* rank_loop: the rank that dies (-1: none) ... */
  int die_at; /* ... during this call */
  int leaver; /* rank_split: the rank that fails and leaves */
} case_t;

/* A rank's part, in a process of its own: writes one report_t to fd and
 * exits. */
typedef void (*rank_fn)(ncclUniqueId id, int rank, const case_t *c, int fd);

/* Runs c->iters all-reduces of COUNT floats, checking each result. The
 * victim (rank c->victim, -1: none) exits abruptly during call c->die_at;
 * the time of its death is in *t_death (shared through a pipe-free
 * convention: every rank computes it from a common start). */
static void rank_loop(ncclUniqueId id, int rank, const case_t *c, int fd) {
  int iters = c->iters, victim = c->victim, die_at = c->die_at;
  report_t rep;
  memset(&rep, 0, sizeof(rep));
  stage(rank);
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, NRANKS, id, rank);
  if (res != ncclSuccess) {
    rep.result = res;
    snprintf(rep.msg, sizeof(rep.msg), "init: %s", ncclGetLastError(NULL));
    goto out;
  }
  float *buf = malloc(COUNT * sizeof(float));
  for (int it = 0; it < iters; it++) {
    for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1 + (i % 5));
    if (rank == victim && it == die_at) {
      /* Die while the peers are in this call with us: 20 ms in. */
      pid_t killer = fork();
      if (killer == 0) {
        usleep(20000);
        kill(getppid(), SIGKILL);
        _exit(0);
      }
    }
    double t0 = now_s();
    res = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess) {
      rep.result = res;
      rep.fail_after = now_s() - t0;
      snprintf(rep.msg, sizeof(rep.msg), "%s", ncclGetLastError(comm));
      break;
    }
    for (int i = 0; i < COUNT; i++) {
      float want = (float)(NRANKS * (NRANKS + 1) / 2 + NRANKS * (i % 5));
      if (buf[i] != want) {
        rep.result = -1;
        snprintf(rep.msg, sizeof(rep.msg), "call %d element %d: %g, want %g", it, i,
                 (double)buf[i], (double)want);
        goto out;
      }
    }
    rep.calls++;
  }
  if (rep.result == ncclSuccess) ncclCommDestroy(comm);
  else ncclCommAbort(comm);
out:
  (void)!write(fd, &rep, sizeof(rep));
  _exit(0);
}

/* Forks NRANKS ranks running fn; collects their reports (got[r]: rank r
 * sent one) and fails the test when a rank outlives the deadline. */
static void run_ranks(rank_fn fn, const case_t *c, report_t reps[NRANKS], int got[NRANKS]) {
  ncclUniqueId id;
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  int fds[NRANKS][2];
  pid_t pids[NRANKS];
  fflush(NULL);
  for (int r = 0; r < NRANKS; r++) {
    assert_int_equal(pipe(fds[r]), 0);
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      close(fds[r][0]);
      fn(id, r, c, fds[r][1]);
    }
    close(fds[r][1]);
  }
  double deadline = now_s() + 60;
  for (int r = 0; r < NRANKS; r++) {
    int st;
    got[r] = read(fds[r][0], &reps[r], sizeof(reps[r])) == (ssize_t)sizeof(reps[r]);
    close(fds[r][0]);
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (now_s() > deadline) {
        kill(pids[r], SIGKILL);
        fail_msg("rank %d still runs 60 s after the start: a hang", r);
      }
      usleep(10000);
    }
  }
}

static void test_peer_dies(void **state) {
  (void)state;
  report_t reps[NRANKS];
  int got[NRANKS];
  const int victim = 3;
  const case_t c = {.iters = 40, .victim = victim, .die_at = 3, .leaver = -1};
  setenv("BRAID_TIMEOUT", "120", 1);
  run_ranks(rank_loop, &c, reps, got);
  assert_false(got[victim]); /* killed: it never reported */
  for (int r = 0; r < NRANKS; r++) {
    if (r == victim) continue;
    assert_true(got[r]);
    printf("rank %d: %d calls, result %d after %.1f s: %s\n", r, reps[r].calls, reps[r].result,
           reps[r].fail_after, reps[r].msg);
    assert_int_not_equal(reps[r].result, ncclSuccess);
    assert_int_not_equal(reps[r].result, -1); /* never a wrong result */
    /* The victim dies 20 ms into its call 3; a survivor may still be
     * finishing call 2 then (ranks leave a call at different times). */
    assert_true(reps[r].calls >= 2);
    /* Far inside BRAID_TIMEOUT (120 s): the dead connection, not the
     * timeout, ended the call. */
    assert_true(reps[r].fail_after < 30.0);
  }
  /* Every survivor names the rank that died: the other host's saw its
   * connection end, its host-mate hears it from them (FAIL records) or
   * from its ring; a survivor that gave up before it heard, because a
   * ring neighbour aborted first, carries that neighbour's reason ("rank
   * q ... left: ..."), which names rank 3. */
  for (int r = 0; r < NRANKS; r++) {
    if (r != victim && strstr(reps[r].msg, "rank 3 ") == NULL)
      fail_msg("rank %d's error does not name rank 3: %s", r, reps[r].msg);
  }
}

/* Ranks 0-2 split the communicator (an exchange over the bootstrap ring)
 * while rank `leaver` fails a call of its own (an invalid datatype: a WARN
 * that becomes its last error) and aborts instead. */
static void rank_split(ncclUniqueId id, int rank, const case_t *c, int fd) {
  int leaver = c->leaver;
  report_t rep;
  ncclComm_t comm, child = NULL;
  memset(&rep, 0, sizeof(rep));
  stage(rank);
  ncclResult_t res = ncclCommInitRank(&comm, NRANKS, id, rank);
  if (res != ncclSuccess) {
    rep.result = res;
    snprintf(rep.msg, sizeof(rep.msg), "init: %s", ncclGetLastError(NULL));
  } else if (rank == leaver) {
    float x[4] = {1, 2, 3, 4};
    rep.result = ncclAllReduce(x, x, 4, (ncclDataType_t)77, ncclSum, comm, NULL);
    snprintf(rep.msg, sizeof(rep.msg), "%s", ncclGetLastError(comm));
    ncclCommAbort(comm);
  } else {
    double t0 = now_s();
    rep.result = ncclCommSplit(comm, 0, rank, &child, NULL);
    rep.fail_after = now_s() - t0;
    snprintf(rep.msg, sizeof(rep.msg), "%s", ncclGetLastError(comm));
    if (rep.result == ncclSuccess) ncclCommDestroy(child);
    ncclCommAbort(comm);
  }
  (void)!write(fd, &rep, sizeof(rep));
  _exit(0);
}

/* A rank that fails with a reason and leaves while the others are in a
 * bootstrap exchange with it: every other rank's error carries that
 * reason, its ring neighbours' directly ("rank 3 ... left: <reason>"),
 * the others' through a neighbour that left in turn; each within
 * seconds, not the bootstrap timeout (20 s). */
static void test_peer_leaves_with_reason(void **state) {
  (void)state;
  const int leaver = 3;
  const case_t c = {.iters = 0, .victim = -1, .die_at = 0, .leaver = leaver};
  report_t reps[NRANKS];
  int got[NRANKS];
  run_ranks(rank_split, &c, reps, got);
  for (int r = 0; r < NRANKS; r++) {
    assert_true(got[r]);
    printf("rank %d: result %d after %.1f s: %s\n", r, reps[r].result, reps[r].fail_after,
           reps[r].msg);
  }
  /* The leaver's own reason, as it reported it. */
  assert_int_equal(reps[leaver].result, ncclInvalidArgument);
  assert_true(strlen(reps[leaver].msg) > 10);
  for (int r = 0; r < NRANKS; r++) {
    if (r == leaver) continue;
    assert_int_equal(reps[r].result, ncclRemoteError);
    assert_true(reps[r].fail_after < 10.0);
    if (strstr(reps[r].msg, reps[leaver].msg) == NULL || strstr(reps[r].msg, " left: ") == NULL)
      fail_msg("rank %d's error does not carry rank %d's reason (%s): %s", r, leaver,
               reps[leaver].msg, reps[r].msg);
    /* Ring neighbours name the leaver itself. */
    if ((r == (leaver + 1) % NRANKS || r == (leaver + NRANKS - 1) % NRANKS) &&
        strstr(reps[r].msg, "rank 3 ") == NULL)
      fail_msg("rank %d (a ring neighbour of rank 3) does not name it: %s", r, reps[r].msg);
  }
}

static void test_staggered_end(void **state) {
  (void)state;
  report_t reps[NRANKS];
  int got[NRANKS];
  const case_t c = {.iters = 6, .victim = -1, .die_at = 0, .leaver = -1};
  setenv("BRAID_TIMEOUT", "60", 1);
  run_ranks(rank_loop, &c, reps, got);
  for (int r = 0; r < NRANKS; r++) {
    assert_true(got[r]);
    if (reps[r].result != ncclSuccess)
      fail_msg("rank %d: %d (%s)", r, reps[r].result, reps[r].msg);
    assert_int_equal(reps[r].calls, 6);
  }
}

/* Ranks of n processes on hosts of their own, bootstrapped on loopback
 * through NCCL_COMM_ID, each running one all-reduce; rank r's
 * NCCL_SOCKET_IFNAME is ifname[r] (NULL: unset). Fills reps[n]. */
static void run_iface(int n, const char *const *ifname, report_t *reps) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  char comm_id[64];
  snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", ntohs(a.sin_port));
  int fds[NRANKS][2], go[2];
  pid_t pids[NRANKS];
  /* No rank gives up its communicator before all have tried: a rank that
   * has gone is an error of its own for the others. */
  assert_int_equal(pipe(go), 0);
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    assert_int_equal(pipe(fds[r]), 0);
    pids[r] = fork();
    if (pids[r] == 0) {
      report_t rep;
      char host[16];
      memset(&rep, 0, sizeof(rep));
      snprintf(host, sizeof(host), "node-%c", 'a' + r);
      setenv("BRAID_DEVICE", "host", 1);
      setenv("BRAID_HOSTID", host, 1);
      setenv("NCCL_COMM_ID", comm_id, 1);
      if (ifname[r] != NULL) setenv("NCCL_SOCKET_IFNAME", ifname[r], 1);
      else unsetenv("NCCL_SOCKET_IFNAME");
      setenv("BRAID_BOOTSTRAP_TIMEOUT", "20", 1);
      setenv("BRAID_TIMEOUT", "60", 1);
      /* With NCCL_COMM_ID every rank's id names the same root. */
      ncclUniqueId id;
      ncclComm_t comm;
      ncclResult_t res = ncclGetUniqueId(&id);
      if (res == ncclSuccess) res = ncclCommInitRank(&comm, n, id, r);
      if (res == ncclSuccess) {
        float x[4] = {1, 2, 3, 4};
        double t0 = now_s();
        res = ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL);
        rep.fail_after = now_s() - t0;
        snprintf(rep.msg, sizeof(rep.msg), "%s", ncclGetLastError(comm));
        rep.result = res;
        (void)!write(fds[r][1], &rep, sizeof(rep));
        char c;
        close(go[1]);
        (void)!read(go[0], &c, 1); /* the parent closes it when all reported */
        ncclCommAbort(comm);
        _exit(0);
      }
      snprintf(rep.msg, sizeof(rep.msg), "init: %s", ncclGetLastError(NULL));
      rep.result = res;
      (void)!write(fds[r][1], &rep, sizeof(rep));
      _exit(0);
    }
    close(fds[r][1]);
  }
  close(go[0]);
  for (int r = 0; r < n; r++) {
    assert_int_equal(read(fds[r][0], &reps[r], sizeof(reps[r])), (ssize_t)sizeof(reps[r]));
    close(fds[r][0]);
  }
  close(go[1]);
  for (int r = 0; r < n; r++) {
    int st;
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    printf("rank %d: result %d after %.1f s: %s\n", r, reps[r].result, reps[r].fail_after,
           reps[r].msg);
  }
}

static void test_no_interface(void **state) {
  (void)state;
  /* The net's interface choice finds nothing on either rank. */
  const char *const ifname[2] = {"=nosuchif0", "=nosuchif0"};
  report_t reps[2];
  run_iface(2, ifname, reps);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(reps[r].result, ncclInvalidUsage);
    assert_true(reps[r].fail_after < 15.0);
    assert_non_null(strstr(reps[r].msg, "NCCL_SOCKET_IFNAME"));
  }
}

/* One rank of three with an interface name that matches nothing: every
 * rank fails the first collective at once with ncclInvalidUsage, naming
 * that rank and NCCL_SOCKET_IFNAME, not whichever peer it saw leave. */
static void test_one_bad_interface(void **state) {
  (void)state;
  const char *const ifname[3] = {"lo", "=nosuchif0", "lo"};
  report_t reps[3];
  run_iface(3, ifname, reps);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(reps[r].result, ncclInvalidUsage);
    assert_true(reps[r].fail_after < 15.0);
    /* Rank 1's own setting, as the others cannot see it otherwise. */
    if (strstr(reps[r].msg, "NCCL_SOCKET_IFNAME") == NULL ||
        strstr(reps[r].msg, "rank 1 ") == NULL || strstr(reps[r].msg, "nosuchif0") == NULL)
      fail_msg("rank %d's error does not name rank 1 and its NCCL_SOCKET_IFNAME: %s", r,
               reps[r].msg);
  }
}

int main(void) {
  /* The interface tests first: their ranks' NCCL_COMM_ID and
   * NCCL_SOCKET_IFNAME must reach a library this process has not used yet
   * (parameters are read once per process, and forked ranks inherit). */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_interface),
      cmocka_unit_test(test_one_bad_interface),
      cmocka_unit_test(test_staggered_end),
      cmocka_unit_test(test_peer_dies),
      cmocka_unit_test(test_peer_leaves_with_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
