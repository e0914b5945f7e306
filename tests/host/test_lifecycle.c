/*
 * Communicator lifecycle through the public API, host mode: split (colors,
 * keys, NCCL_SPLIT_NOCOLOR, a split of a split, nonblocking and inherited
 * configs), shrink (with a process killed by SIGKILL, in default and abort
 * mode, and its argument checks), finalize, revoke, destroy and abort —
 * abort always local and under a second, even with a peer dead or missing.
 * Expected memberships and ranks are worked out by hand from NCCL's rules.
 *
 * Each case runs in a child process with a short BRAID_BOOTSTRAP_TIMEOUT.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"

#define MAX_RANKS 16
#define SEC 1000000000LL

struct shared {
  int res[MAX_RANKS];
  char err[MAX_RANKS][512];
  _Atomic int ready[MAX_RANKS];
  _Atomic int go;
  ncclUniqueId id;            /* published by rank 0 (processes) */
  _Atomic int id_ready;
};
static struct shared *sh;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#define FAILX(...)                                                            \
  do {                                                                        \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                        \
    return 1;                                                                 \
  } while (0)

#define CHECKX(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) FAILX(__VA_ARGS__);                                          \
  } while (0)

static void in_child(int (*body)(void), const char *timeout_s) {
  pid_t pid;
  int status;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("BRAID_DEVICE", "host", 1);
    setenv("BRAID_BOOTSTRAP_TIMEOUT", timeout_s, 1);
    unsetenv("NCCL_COMM_ID");
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) _exit(2);
    memset(sh, 0, sizeof(*sh));
    status = body();
    fflush(NULL);
    _exit(status);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("case failed (status %#x)", status);
}

struct rank_arg {
  ncclUniqueId id;
  int rank, nranks;
  int (*fn)(struct rank_arg *);
};

static void record(int rank, int rc) {
  sh->res[rank] = rc;
  snprintf(sh->err[rank], sizeof(sh->err[0]), "%s", ncclGetLastError(NULL));
}

static void *rank_thread(void *p) {
  struct rank_arg *a = p;
  record(a->rank, a->fn(a));
  return NULL;
}

static int run_threads(int n, int (*fn)(struct rank_arg *)) {
  pthread_t t[MAX_RANKS];
  struct rank_arg a[MAX_RANKS];
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  for (int r = 0; r < n; r++) {
    sh->res[r] = -1;
    a[r] = (struct rank_arg){id, r, n, fn};
    CHECKX(pthread_create(&t[r], NULL, rank_thread, &a[r]) == 0, "pthread_create");
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++) CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

static int wait_ready(ncclComm_t c, int64_t ms) {
  ncclResult_t st = ncclInProgress;
  int64_t deadline = now_ns() + ms * 1000000LL;
  while (st == ncclInProgress && now_ns() < deadline) {
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return -1;
    if (st == ncclInProgress) sleep_ms(1);
  }
  return st;
}

static int expect_comm(ncclComm_t c, int nranks, int rank) {
  int n = -1, r = -1;
  CHECKX(c != NULL, "no communicator");
  CHECKX(ncclCommCount(c, &n) == ncclSuccess && n == nranks, "count %d, want %d", n, nranks);
  CHECKX(ncclCommUserRank(c, &r) == ncclSuccess && r == rank, "rank %d, want %d", r, rank);
  return 0;
}

/* ---- split -------------------------------------------------------------- */

/* 7 ranks; color = rank % 2 except rank 6 (NOCOLOR); key = -rank, so each
 * group is in reverse order: odd {5,3,1}, even {4,2,0}. Then each group
 * splits again by child rank < 2: {5,3}+{1} and {4,2}+{0}. */
static int rank_split(struct rank_arg *a) {
  static const int want_rank[7] = {2, 2, 1, 1, 0, 0, -1};
  ncclComm_t c = NULL, s = NULL, g = NULL;
  int r = a->rank;
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, r) == ncclSuccess, "init");
  CHECKX(ncclCommSplit(c, r == 6 ? NCCL_SPLIT_NOCOLOR : r % 2, -r, &s, NULL) == ncclSuccess,
         "split");
  if (r == 6) {
    CHECKX(s == NULL, "NOCOLOR rank got a communicator");
  } else {
    int cr = want_rank[r];
    if (expect_comm(s, 3, cr)) return 1;
    CHECKX(ncclCommSplit(s, cr < 2, cr, &g, NULL) == ncclSuccess, "split of split");
    if (expect_comm(g, cr < 2 ? 2 : 1, cr < 2 ? cr : 0)) return 1;
    CHECKX(ncclCommDestroy(g) == ncclSuccess, "destroy grandchild");
    CHECKX(ncclCommDestroy(s) == ncclSuccess, "destroy child");
  }
  /* The parent is still usable after its children are gone. */
  if (expect_comm(c, 7, r)) return 1;
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static int body_split(void) { return run_threads(7, rank_split); }

static void test_split(void **state) {
  (void)state;
  in_child(body_split, "10");
}

/* A nonblocking parent: split with config NULL inherits nonblocking (returns
 * ncclInProgress), an explicit blocking config does not, and a NOCOLOR rank
 * polls the parent. */
static int rank_split_nonblocking(struct rank_arg *a) {
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER, bl = NCCL_CONFIG_INITIALIZER;
  ncclComm_t c = NULL, s = NULL, t = NULL;
  ncclResult_t r;
  nb.blocking = 0;
  bl.blocking = 1;
  r = ncclCommInitRankConfig(&c, a->nranks, a->id, a->rank, &nb);
  CHECKX(r == ncclInProgress || r == ncclSuccess, "init %d", r);
  CHECKX(wait_ready(c, 5000) == ncclSuccess, "init did not complete");
  r = ncclCommSplit(c, a->rank == 3 ? NCCL_SPLIT_NOCOLOR : 0, a->rank, &s, NULL);
  CHECKX(r == ncclInProgress || r == ncclSuccess, "split returned %d", r);
  if (a->rank == 3) {
    CHECKX(s == NULL, "NOCOLOR rank got a communicator");
    CHECKX(wait_ready(c, 5000) == ncclSuccess, "parent did not settle");
  } else {
    CHECKX(wait_ready(s, 5000) == ncclSuccess, "child did not complete");
    CHECKX(wait_ready(c, 5000) == ncclSuccess, "parent did not settle");
    if (expect_comm(s, 3, a->rank)) return 1;
  }
  /* Explicit blocking config: returns only when done. */
  CHECKX(ncclCommSplit(c, 0, a->nranks - a->rank, &t, &bl) == ncclSuccess, "blocking split");
  if (expect_comm(t, 4, a->nranks - 1 - a->rank)) return 1;
  if (s) CHECKX(ncclCommDestroy(s) == ncclSuccess, "destroy s");
  CHECKX(ncclCommDestroy(t) == ncclSuccess, "destroy t");
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy c");
  return 0;
}

static int body_split_nonblocking(void) { return run_threads(4, rank_split_nonblocking); }

static void test_split_nonblocking(void **state) {
  (void)state;
  in_child(body_split_nonblocking, "10");
}

/* ---- shrink ------------------------------------------------------------- */

static int shrink_flags;

/* 5 processes; rank 2 dies by SIGKILL after init. The survivors shrink
 * without it: new ranks 0,1,_,2,3. The new communicator works: a split by
 * new rank parity gives two pairs. */
static int rank_shrink(struct rank_arg *a) {
  static const int new_rank[5] = {0, 1, -1, 2, 3};
  int exclude[1] = {2};
  ncclComm_t c = NULL, s = NULL, p = NULL;
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  if (a->rank == 2) raise(SIGKILL);
  /* Proceed only once rank 2 is really gone. */
  for (int i = 0; !atomic_load(&sh->go); i++) {
    CHECKX(i < 2000, "rank 2 was never reported dead");
    sleep_ms(5);
  }
  CHECKX(ncclCommShrink(c, exclude, 1, &s, NULL, shrink_flags) == ncclSuccess,
         "shrink (flags %d)", shrink_flags);
  if (expect_comm(s, 4, new_rank[a->rank])) return 1;
  CHECKX(ncclCommSplit(s, new_rank[a->rank] % 2, 0, &p, NULL) == ncclSuccess, "split");
  if (expect_comm(p, 2, new_rank[a->rank] / 2)) return 1;
  CHECKX(ncclCommDestroy(p) == ncclSuccess && ncclCommDestroy(s) == ncclSuccess, "destroy");
  /* The parent still has a dead member: only abort is safe, and local. */
  CHECKX(ncclCommAbort(c) == ncclSuccess, "abort parent");
  return 0;
}

/* Process ranks get the id from rank 0, as applications do; nothing here
 * forks while threads exist. */
static int publish_or_wait_id(struct rank_arg *a) {
  if (a->rank == 0) {
    CHECKX(ncclGetUniqueId(&sh->id) == ncclSuccess, "id");
    atomic_store(&sh->id_ready, 1);
  } else {
    for (int i = 0; !atomic_load(&sh->id_ready); i++) {
      CHECKX(i < 5000, "no id from rank 0");
      sleep_ms(2);
    }
  }
  a->id = sh->id;
  return 0;
}

static int body_shrink(void) {
  pid_t pid[5];
  fflush(NULL);
  for (int r = 0; r < 5; r++) {
    sh->res[r] = -1;
    pid[r] = fork();
    if (pid[r] == 0) {
      struct rank_arg a = {{{0}}, r, 5, rank_shrink};
      if (publish_or_wait_id(&a) != 0) _exit(0);
      record(r, rank_shrink(&a));
      fflush(NULL);
      _exit(0);
    }
  }
  {
    int status;
    CHECKX(waitpid(pid[2], &status, 0) == pid[2], "wait rank 2");
    CHECKX(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank 2 was not killed");
  }
  atomic_store(&sh->go, 1);
  for (int r = 0; r < 5; r++)
    if (r != 2) waitpid(pid[r], NULL, 0);
  for (int r = 0; r < 5; r++)
    CHECKX(r == 2 || sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

static void test_shrink_killed_rank(void **state) {
  (void)state;
  shrink_flags = NCCL_SHRINK_DEFAULT;
  in_child(body_shrink, "5");
}

static void test_shrink_abort_mode(void **state) {
  (void)state;
  shrink_flags = NCCL_SHRINK_ABORT;
  in_child(body_shrink, "5");
}

static int rank_shrink_args(struct rank_arg *a) {
  ncclComm_t c = NULL, s = (ncclComm_t)0x1;
  int own[1] = {a->rank}, out[1] = {3}, twice[2] = {1, 1}, ok[1] = {1 - a->rank};
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  CHECKX(ncclCommShrink(c, NULL, 1, &s, NULL, 0) == ncclInvalidArgument, "NULL list");
  CHECKX(ncclCommShrink(c, ok, 0, &s, NULL, 0) == ncclInvalidArgument, "count 0");
  CHECKX(ncclCommShrink(c, ok, 1, NULL, NULL, 0) == ncclInvalidArgument, "NULL newcomm");
  CHECKX(ncclCommShrink(c, own, 1, &s, NULL, 0) == ncclInvalidArgument, "own rank");
  CHECKX(ncclCommShrink(c, out, 1, &s, NULL, 0) == ncclInvalidArgument, "rank 3 of 2");
  CHECKX(ncclCommShrink(c, twice, 2, &s, NULL, 0) == ncclInvalidArgument, "listed twice");
  CHECKX(ncclCommShrink(NULL, ok, 1, &s, NULL, 0) == ncclInvalidArgument, "NULL comm");
  /* Shrinking to one rank (the other excluded and not calling). */
  CHECKX(ncclCommShrink(c, ok, 1, &s, NULL, 0) == ncclSuccess, "shrink to one");
  if (expect_comm(s, 1, 0)) return 1;
  CHECKX(ncclCommDestroy(s) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static int body_shrink_args(void) { return run_threads(2, rank_shrink_args); }

static void test_shrink_args(void **state) {
  (void)state;
  in_child(body_shrink_args, "5");
}

/* ---- abort, finalize, revoke, destroy ----------------------------------- */

/* A peer is dead: abort returns at once (local). A nonblocking split that
 * waits on a live but absent peer is aborted too, child and parent. */
static int rank_abort_dead_peer(struct rank_arg *a) {
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  ncclComm_t c = NULL, s = NULL;
  int64_t t0;
  ncclResult_t r;
  nb.blocking = 0;
  r = ncclCommInitRankConfig(&c, a->nranks, a->id, a->rank, &nb);
  CHECKX((r == ncclInProgress || r == ncclSuccess) && wait_ready(c, 5000) == ncclSuccess, "init");
  if (a->rank == 3) raise(SIGKILL);
  if (a->rank == 2) {
    /* Alive, but never joins the split; leaves once the others are done. */
    for (int i = 0; !atomic_load(&sh->go); i++) {
      CHECKX(i < 2000, "the others never finished");
      sleep_ms(5);
    }
    CHECKX(ncclCommAbort(c) == ncclSuccess, "abort");
    return 0;
  }
  for (int i = 0; !atomic_load(&sh->ready[3]); i++) {
    CHECKX(i < 2000, "rank 3 was never reported dead");
    sleep_ms(5);
  }
  r = ncclCommSplit(c, 0, a->rank, &s, NULL);
  CHECKX(r == ncclInProgress, "split returned %d", r);
  sleep_ms(100);
  t0 = now_ns();
  CHECKX(ncclCommAbort(s) == ncclSuccess, "abort child");
  CHECKX(ncclCommAbort(c) == ncclSuccess, "abort parent");
  CHECKX(now_ns() - t0 < SEC, "aborts took %lld ms", (long long)(now_ns() - t0) / 1000000);
  return 0;
}

/* A free loopback port for NCCL_COMM_ID. */
static int free_port(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, len) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static int body_abort_dead_peer(void) {
  pid_t pid[4];
  ncclUniqueId id;
  char env[64];
  /* The ranks use threads; with NCCL_COMM_ID this process starts none
   * before forking them (rank 0 serves the rendezvous). */
  snprintf(env, sizeof(env), "127.0.0.1:%d", free_port());
  setenv("NCCL_COMM_ID", env, 1);
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  for (int r = 0; r < 4; r++) {
    sh->res[r] = -1;
    pid[r] = fork();
    if (pid[r] == 0) {
      struct rank_arg a = {id, r, 4, rank_abort_dead_peer};
      record(r, rank_abort_dead_peer(&a));
      fflush(NULL);
      _exit(0);
    }
  }
  waitpid(pid[3], NULL, 0);
  atomic_store(&sh->ready[3], 1);
  waitpid(pid[0], NULL, 0);
  waitpid(pid[1], NULL, 0);
  atomic_store(&sh->go, 1);
  waitpid(pid[2], NULL, 0);
  for (int r = 0; r < 3; r++)
    CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

static void test_abort_with_dead_peer(void **state) {
  (void)state;
  in_child(body_abort_dead_peer, "30");
}

/* Ranks 0 and 1 of 3 start a nonblocking init; rank 2 never arrives. A
 * second thread aborts them; each abort returns within a second. */
static ncclComm_t pending[2];

static void *aborter(void *arg) {
  int64_t *took = arg;
  sleep_ms(200);
  for (int i = 0; i < 2; i++) {
    int64_t t0 = now_ns();
    took[2 * i] = ncclCommAbort(pending[i]);
    took[2 * i + 1] = now_ns() - t0;
  }
  return NULL;
}

static int body_abort_during_init(void) {
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  pthread_t t;
  int64_t took[4];
  nb.blocking = 0;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  for (int r = 0; r < 2; r++) {
    ncclResult_t st;
    CHECKX(ncclCommInitRankConfig(&pending[r], 3, id, r, &nb) == ncclInProgress, "init %d", r);
    CHECKX(ncclCommGetAsyncError(pending[r], &st) == ncclSuccess && st == ncclInProgress,
           "state %d", st);
  }
  CHECKX(pthread_create(&t, NULL, aborter, took) == 0, "thread");
  pthread_join(t, NULL);
  for (int i = 0; i < 2; i++) {
    CHECKX(took[2 * i] == ncclSuccess, "abort %d returned %lld", i, (long long)took[2 * i]);
    CHECKX(took[2 * i + 1] < SEC, "abort %d took %lld ms", i, (long long)took[2 * i + 1] / 1000000);
  }
  return 0;
}

static void test_abort_during_init(void **state) {
  (void)state;
  in_child(body_abort_during_init, "30");
}

static ncclUniqueId second_id; /* a unique id serves one rendezvous */

static int rank_teardown(struct rank_arg *a) {
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  ncclComm_t c = NULL, d = NULL, s = NULL;
  ncclResult_t r;
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  CHECKX(ncclCommFinalize(c) == ncclSuccess, "finalize");
  CHECKX(ncclCommFinalize(c) == ncclInvalidArgument, "second finalize");
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");

  CHECKX(ncclCommInitRank(&c, a->nranks, second_id, a->rank) == ncclSuccess, "init 2");
  CHECKX(ncclCommRevoke(c, 1) == ncclInvalidArgument, "revoke flags 1");
  CHECKX(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclSuccess, "revoke");
  CHECKX(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInvalidArgument, "second revoke");
  CHECKX(ncclCommFinalize(c) == ncclInvalidArgument, "finalize after revoke");
  /* Management operations still work after a revoke. */
  CHECKX(ncclCommSplit(c, 0, -a->rank, &s, NULL) == ncclSuccess, "split after revoke");
  if (expect_comm(s, a->nranks, a->nranks - 1 - a->rank)) return 1;
  CHECKX(ncclCommDestroy(s) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "destroy");

  /* Destroy while a nonblocking init runs is refused; abort is not. Use a
   * private id that nobody else joins. */
  if (a->rank == 0) {
    ncclUniqueId lone;
    nb.blocking = 0;
    CHECKX(ncclGetUniqueId(&lone) == ncclSuccess, "id");
    r = ncclCommInitRankConfig(&d, 2, lone, 0, &nb);
    CHECKX(r == ncclInProgress, "lone init %d", r);
    CHECKX(ncclCommDestroy(d) == ncclInvalidArgument, "destroy during init");
    CHECKX(strstr(ncclGetLastError(NULL), "before the previous operation"), "message: %s",
           ncclGetLastError(NULL));
    CHECKX(ncclCommAbort(d) == ncclSuccess, "abort during init");
  }
  return 0;
}

static int body_teardown(void) {
  CHECKX(ncclGetUniqueId(&second_id) == ncclSuccess, "id");
  return run_threads(3, rank_teardown);
}

static void test_finalize_revoke_destroy(void **state) {
  (void)state;
  in_child(body_teardown, "5");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_split_nonblocking),
      cmocka_unit_test(test_shrink_args),
      cmocka_unit_test(test_shrink_killed_rank),
      cmocka_unit_test(test_shrink_abort_mode),
      cmocka_unit_test(test_abort_with_dead_peer),
      cmocka_unit_test(test_abort_during_init),
      cmocka_unit_test(test_finalize_revoke_destroy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
