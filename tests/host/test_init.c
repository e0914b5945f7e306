/*
 * Communicator creation through the public API, host mode: ncclCommInitAll,
 * ncclCommInitRank from threads and from processes, NCCL_COMM_ID over IPv4
 * and IPv6, nonblocking init, init inside a group, several unique ids, 32
 * ranks, BRAID_DEVICE, and every bad argument or rendezvous answered with
 * NCCL's code and a message that names what is wrong. Expected ranks and
 * devices are worked out by hand from NCCL's rules (host mode: a rank's
 * device is its index among the ranks of its host).
 *
 * Each case runs in a child process so that it sees only its own
 * environment.
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
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"

#define MAX_RANKS 32

struct shared {
  int res[MAX_RANKS];
  char err[MAX_RANKS][512];
  int64_t elapsed_ns[MAX_RANKS];
  ncclUniqueId id;            /* published by rank 0 (processes) */
  _Atomic int id_ready;
};
static struct shared *sh;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

/* Checks a code and that the last error mentions needle. */
#define EXPECTX(expr, code, needle)                                           \
  do {                                                                        \
    ncclResult_t r_ = (expr);                                                 \
    const char *m_ = ncclGetLastError(NULL);                                  \
    CHECKX(r_ == (code), "%s returned %d, want %d (%s)", #expr, r_, (code), m_); \
    const char *n_ = (needle);                                                \
    CHECKX(n_ == NULL || strstr(m_, n_) != NULL,                              \
           "%s: last error \"%s\" does not mention \"%s\"", #expr, m_, n_);  \
  } while (0)

/* Runs body in a child process with the given extra environment
 * ("NAME=value" strings, NULL-terminated). */
static void in_child(int (*body)(void), const char *const *env) {
  pid_t pid;
  int status;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("BRAID_DEVICE", "host", 1);
    setenv("BRAID_BOOTSTRAP_TIMEOUT", "10", 1);
    unsetenv("NCCL_COMM_ID");
    for (int i = 0; env != NULL && env[i] != NULL; i++) putenv((char *)env[i]);
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

/* ---- running ranks ------------------------------------------------------ */

struct rank_arg {
  ncclUniqueId id;
  int rank, nranks;
  int (*fn)(struct rank_arg *);
  void *extra;
};

static void record(int rank, int rc, int64_t t0) {
  sh->res[rank] = rc;
  sh->elapsed_ns[rank] = now_ns() - t0;
  snprintf(sh->err[rank], sizeof(sh->err[0]), "%s", ncclGetLastError(NULL));
}

static void *rank_thread(void *p) {
  struct rank_arg *a = p;
  int64_t t0 = now_ns();
  record(a->rank, a->fn(a), t0);
  return NULL;
}

static int run_threads(const ncclUniqueId *id, int n, int (*fn)(struct rank_arg *), void *extra) {
  pthread_t t[MAX_RANKS];
  struct rank_arg a[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    sh->res[r] = -1;
    a[r] = (struct rank_arg){*id, r, n, fn, extra};
    if (pthread_create(&t[r], NULL, rank_thread, &a[r]) != 0) FAILX("pthread_create");
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++) CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

/* As an application does: rank 0 makes the id and hands it to the others
 * (here through shared memory). The ranks are forked before any thread
 * exists, which also keeps the sanitizers' locks consistent in children. */
static int publish_or_wait_id(struct rank_arg *a) {
  if (a->rank == 0) {
    if (ncclGetUniqueId(&sh->id) != ncclSuccess) return -1;
    atomic_store(&sh->id_ready, 1);
  } else {
    for (int i = 0; !atomic_load(&sh->id_ready); i++) {
      if (i > 5000) return -1;
      sleep_ms(2);
    }
  }
  a->id = sh->id;
  return 0;
}

/* Ranks as processes; env_of(rank) may add environment for that rank.
 * id == NULL: rank 0 makes the id. */
static int run_processes(const ncclUniqueId *id, int n, int (*fn)(struct rank_arg *),
                         const char *(*env_of)(int rank)) {
  pid_t pid[MAX_RANKS];
  atomic_store(&sh->id_ready, 0);
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    sh->res[r] = -1;
    pid[r] = fork();
    if (pid[r] == 0) {
      struct rank_arg a = {{{0}}, r, n, fn, NULL};
      int64_t t0 = now_ns();
      if (env_of && env_of(r)) putenv((char *)env_of(r));
      if (id != NULL) a.id = *id;
      else if (publish_or_wait_id(&a) != 0) _exit(0);
      record(r, fn(&a), t0);
      fflush(NULL);
      _exit(0);
    }
  }
  for (int r = 0; r < n; r++) waitpid(pid[r], NULL, 0);
  return 0;
}

static int all_ok(int n) {
  for (int r = 0; r < n; r++) CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

/* Init, then check count, rank and device (expected device: rank, or
 * a->extra[rank] when given). */
static int rank_init_check(struct rank_arg *a) {
  ncclComm_t c = NULL;
  int n = -1, rk = -1, dev = -1, want_dev = a->extra ? ((int *)a->extra)[a->rank] : a->rank;
  ncclResult_t r = ncclCommInitRank(&c, a->nranks, a->id, a->rank);
  CHECKX(r == ncclSuccess, "rank %d: init returned %d", a->rank, r);
  CHECKX(ncclCommCount(c, &n) == ncclSuccess && n == a->nranks, "count %d", n);
  CHECKX(ncclCommUserRank(c, &rk) == ncclSuccess && rk == a->rank, "rank %d", rk);
  CHECKX(ncclCommCuDevice(c, &dev) == ncclSuccess && dev == want_dev,
         "rank %d: device %d, want %d", a->rank, dev, want_dev);
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

/* ---- cases -------------------------------------------------------------- */

static int body_init_all(void) {
  ncclComm_t comms[4];
  static const int devlist[3] = {5, 2, 7};
  int dup[2] = {1, 1}, neg[1] = {-1};
  CHECKX(ncclCommInitAll(comms, 4, NULL) == ncclSuccess, "InitAll 4");
  for (int i = 0; i < 4; i++) {
    int n, rk, dev;
    CHECKX(ncclCommCount(comms[i], &n) == ncclSuccess && n == 4, "count");
    CHECKX(ncclCommUserRank(comms[i], &rk) == ncclSuccess && rk == i, "rank");
    CHECKX(ncclCommCuDevice(comms[i], &dev) == ncclSuccess && dev == i, "dev %d", dev);
  }
  for (int i = 0; i < 4; i++) CHECKX(ncclCommDestroy(comms[i]) == ncclSuccess, "destroy");
  /* devlist order is rank order; each rank gets its entry as device. */
  CHECKX(ncclCommInitAll(comms, 3, devlist) == ncclSuccess, "InitAll devlist");
  for (int i = 0; i < 3; i++) {
    int rk, dev;
    CHECKX(ncclCommUserRank(comms[i], &rk) == ncclSuccess && rk == i, "rank");
    CHECKX(ncclCommCuDevice(comms[i], &dev) == ncclSuccess && dev == devlist[i], "dev %d", dev);
    CHECKX(ncclCommDestroy(comms[i]) == ncclSuccess, "destroy");
  }
  EXPECTX(ncclCommInitAll(comms, 2, dup), ncclInvalidUsage, "twice");
  EXPECTX(ncclCommInitAll(comms, 1, neg), ncclInvalidArgument, "-1");
  EXPECTX(ncclCommInitAll(NULL, 1, NULL), ncclInvalidArgument, "comms");
  EXPECTX(ncclCommInitAll(comms, -1, NULL), ncclInvalidArgument, "Invalid device count requested : -1");
  CHECKX(ncclCommInitAll(comms, 0, NULL) == ncclSuccess, "ndev 0");
  return 0;
}

static void test_init_all(void **state) {
  (void)state;
  in_child(body_init_all, NULL);
}

static int body_threads(void) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  return run_threads(&id, 5, rank_init_check, NULL);
}

static void test_threads(void **state) {
  (void)state;
  in_child(body_threads, NULL);
}

static int body_processes(void) {
  run_processes(NULL, 4, rank_init_check, NULL);
  return all_ok(4);
}

static void test_processes(void **state) {
  (void)state;
  in_child(body_processes, NULL);
}

/* Two hosts staged by BRAID_HOSTID: devices restart at 0 on each. */
static const char *hostid_of(int rank) {
  return rank < 2 ? "BRAID_HOSTID=node-a" : "BRAID_HOSTID=node-b";
}

static int rank_two_hosts(struct rank_arg *a) {
  static int want[4] = {0, 1, 0, 1};
  a->extra = want;
  return rank_init_check(a);
}

static int body_two_hosts(void) {
  run_processes(NULL, 4, rank_two_hosts, hostid_of);
  return all_ok(4);
}

static void test_two_hosts_by_hostid(void **state) {
  (void)state;
  in_child(body_two_hosts, NULL);
}

/* NCCL_COMM_ID: every rank builds the id from the variable; rank 0 serves
 * the rendezvous and starts last, so the others must retry. */
static char comm_id_env[96];

static int free_port(int family) {
  union {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
  } a;
  socklen_t len = family == AF_INET ? sizeof(a.in4) : sizeof(a.in6);
  int fd = socket(family, SOCK_STREAM, 0), port = -1;
  memset(&a, 0, sizeof(a));
  a.sa.sa_family = (sa_family_t)family;
  if (family == AF_INET) a.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else a.in6.sin6_addr = in6addr_loopback;
  if (fd >= 0 && bind(fd, &a.sa, len) == 0 && getsockname(fd, &a.sa, &len) == 0)
    port = ntohs(family == AF_INET ? a.in4.sin_port : a.in6.sin6_port);
  if (fd >= 0) close(fd);
  return port;
}

static int rank_comm_id(struct rank_arg *a) {
  ncclUniqueId id;
  if (a->rank == 0) sleep_ms(300);
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id from NCCL_COMM_ID");
  a->id = id;
  return rank_init_check(a);
}

static int body_comm_id(void) {
  ncclUniqueId unused;
  memset(&unused, 0, sizeof(unused));
  run_processes(&unused, 3, rank_comm_id, NULL);
  return all_ok(3);
}

static void test_comm_id_ipv4(void **state) {
  (void)state;
  const char *env[] = {comm_id_env, NULL};
  int port = free_port(AF_INET);
  assert_true(port > 0);
  snprintf(comm_id_env, sizeof(comm_id_env), "NCCL_COMM_ID=127.0.0.1:%d", port);
  in_child(body_comm_id, env);
}

static void test_comm_id_ipv6(void **state) {
  (void)state;
  const char *env[] = {comm_id_env, NULL};
  int port = free_port(AF_INET6);
  if (port <= 0) {
    printf("SKIP: IPv6 loopback (::1) is not available on this machine\n");
    skip();
  }
  snprintf(comm_id_env, sizeof(comm_id_env), "NCCL_COMM_ID=[::1]:%d", port);
  in_child(body_comm_id, env);
}

/* Nonblocking: rank 3 comes late, so the others see ncclInProgress, must
 * not use the communicator yet, and poll until it is ready. */
static int rank_nonblocking(struct rank_arg *a) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclComm_t c = NULL;
  ncclResult_t r, st = ncclInProgress;
  int64_t deadline = now_ns() + 5000000000LL;
  int n = -1;
  cfg.blocking = 0;
  if (a->rank == 3) sleep_ms(300);
  r = ncclCommInitRankConfig(&c, a->nranks, a->id, a->rank, &cfg);
  CHECKX(r == ncclInProgress || r == ncclSuccess, "rank %d: init returned %d", a->rank, r);
  CHECKX(c != NULL, "no handle");
  if (a->rank != 3) {
    CHECKX(r == ncclInProgress, "rank %d finished before rank 3 arrived", a->rank);
    CHECKX(ncclCommCount(c, &n) == ncclInvalidArgument, "count usable during init");
  }
  while (st == ncclInProgress && now_ns() < deadline) {
    CHECKX(ncclCommGetAsyncError(c, &st) == ncclSuccess, "poll");
    if (st == ncclInProgress) sleep_ms(2);
  }
  CHECKX(st == ncclSuccess, "rank %d: async state %d", a->rank, st);
  CHECKX(ncclCommCount(c, &n) == ncclSuccess && n == 4, "count %d", n);
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static int body_nonblocking(void) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  return run_threads(&id, 4, rank_nonblocking, NULL);
}

static void test_nonblocking(void **state) {
  (void)state;
  in_child(body_nonblocking, NULL);
}

/* One thread inits every rank inside a group: must not deadlock. */
static int body_group(void) {
  ncclUniqueId id;
  ncclComm_t c[4];
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  for (int i = 0; i < 4; i++)
    CHECKX(ncclCommInitRank(&c[i], 4, id, i) == ncclSuccess, "init %d in group", i);
  CHECKX(ncclGroupEnd() == ncclSuccess, "group end");
  for (int i = 0; i < 4; i++) {
    int n = -1, rk = -1;
    CHECKX(ncclCommCount(c[i], &n) == ncclSuccess && n == 4, "count %d", n);
    CHECKX(ncclCommUserRank(c[i], &rk) == ncclSuccess && rk == i, "rank %d", rk);
  }
  for (int i = 0; i < 4; i++) CHECKX(ncclCommDestroy(c[i]) == ncclSuccess, "destroy");
  return 0;
}

static void test_group(void **state) {
  (void)state;
  in_child(body_group, NULL);
}

/* Several roots: 7 ranks over 3 ids, and the checks on nId. */
static ncclUniqueId scal_ids[3];

static int rank_scalable(struct rank_arg *a) {
  ncclComm_t c = NULL;
  int n = -1;
  ncclResult_t r = ncclCommInitRankScalable(&c, a->nranks, a->rank, 3, scal_ids, NULL);
  CHECKX(r == ncclSuccess, "rank %d: %d", a->rank, r);
  CHECKX(ncclCommCount(c, &n) == ncclSuccess && n == 7, "count %d", n);
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static int body_scalable(void) {
  ncclComm_t c;
  for (int i = 0; i < 3; i++) CHECKX(ncclGetUniqueId(&scal_ids[i]) == ncclSuccess, "id");
  EXPECTX(ncclCommInitRankScalable(&c, 7, 0, 0, scal_ids, NULL), ncclInvalidArgument,
          "nId = 0");
  EXPECTX(ncclCommInitRankScalable(&c, 2, 0, 3, scal_ids, NULL), ncclInvalidArgument,
          "nId = 3, nranks=2");
  return run_threads(&scal_ids[0], 7, rank_scalable, NULL);
}

static void test_scalable(void **state) {
  (void)state;
  in_child(body_scalable, NULL);
}

static int body_bad_args(void) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclResult_t st;
  int x;
  EXPECTX(ncclGetUniqueId(NULL), ncclInvalidArgument, "NULL");
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  EXPECTX(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument, "newcomm");
  EXPECTX(ncclCommInitRank(&c, 3, id, 3), ncclInvalidArgument, "Invalid rank requested : 3/3");
  EXPECTX(ncclCommInitRank(&c, 3, id, -1), ncclInvalidArgument, "Invalid rank requested : -1/3");
  EXPECTX(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, NULL);
  cfg.magic = 0x12345678;
  EXPECTX(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  CHECKX(c == NULL, "handle set on failure");
  /* Queries and teardown with NULL. */
  EXPECTX(ncclCommCount(NULL, &x), ncclInvalidArgument, "comm");
  EXPECTX(ncclCommUserRank(NULL, &x), ncclInvalidArgument, "comm");
  EXPECTX(ncclCommCuDevice(NULL, &x), ncclInvalidArgument, "comm");
  EXPECTX(ncclCommGetAsyncError(NULL, &st), ncclInvalidArgument, "comm");
  CHECKX(ncclCommDestroy(NULL) == ncclSuccess, "destroy NULL");
  CHECKX(ncclCommAbort(NULL) == ncclSuccess, "abort NULL");
  CHECKX(ncclCommFinalize(NULL) == ncclSuccess, "finalize NULL");
  CHECKX(ncclCommRevoke(NULL, 0) == ncclSuccess, "revoke NULL");
  CHECKX(ncclCommInitAll(&c, 1, NULL) == ncclSuccess, "one rank");
  EXPECTX(ncclCommCount(c, NULL), ncclInvalidArgument, "count");
  EXPECTX(ncclCommUserRank(c, NULL), ncclInvalidArgument, "rank");
  EXPECTX(ncclCommCuDevice(c, NULL), ncclInvalidArgument, "device");
  EXPECTX(ncclCommGetAsyncError(c, NULL), ncclInvalidArgument, "asyncError");
  CHECKX(ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclSuccess, "async");
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static void test_bad_args(void **state) {
  (void)state;
  in_child(body_bad_args, NULL);
}

/* Bad rendezvous: every rank gets ncclInvalidUsage quickly, and its
 * ncclGetLastError says why. */
static int bad_kind;

static int rank_bad(struct rank_arg *a) {
  ncclComm_t c = NULL;
  ncclUniqueId id = a->id;
  int rank = a->rank, nranks = a->nranks;
  ncclResult_t r;
  if (a->rank == 2) {
    if (bad_kind == 0) id.internal[0] ^= 0x21;   /* the magic's first byte */
    if (bad_kind == 1) nranks = 5;
    if (bad_kind == 2) rank = 0;
  }
  r = ncclCommInitRank(&c, nranks, id, rank);
  CHECKX(r == ncclInvalidUsage, "rank %d: init returned %d", a->rank, r);
  CHECKX(c == NULL, "handle left set");
  return 0;
}

static int body_bad_rendezvous(void) {
  static const char *needles[3][2] = {
      {"magic", "rank 2 at"}, {"nranks=5", "nranks=3"}, {"rank 0 registered twice", NULL}};
  /* kind 0 (a wrong magic) no longer fails the others: test_faults. */
  for (bad_kind = 1; bad_kind < 3; bad_kind++) {
    run_processes(NULL, 3, rank_bad, NULL);
    for (int r = 0; r < 3; r++) {
      CHECKX(sh->res[r] == 0, "case %d rank %d: %s", bad_kind, r, sh->err[r]);
      CHECKX(sh->elapsed_ns[r] < 3000000000LL, "case %d rank %d slow", bad_kind, r);
      for (int k = 0; k < 2; k++)
        CHECKX(needles[bad_kind][k] == NULL || strstr(sh->err[r], needles[bad_kind][k]),
               "case %d rank %d: \"%s\" lacks \"%s\"", bad_kind, r, sh->err[r],
               needles[bad_kind][k]);
    }
  }
  return 0;
}

static void test_bad_rendezvous(void **state) {
  (void)state;
  in_child(body_bad_rendezvous, NULL);
}

/* A rank that never comes: the others fail with ncclRemoteError naming it
 * once BRAID_BOOTSTRAP_TIMEOUT passes. */
static int rank_missing(struct rank_arg *a) {
  ncclComm_t c = NULL;
  ncclResult_t r;
  if (a->rank == 2) return 0;
  r = ncclCommInitRank(&c, a->nranks, a->id, a->rank);
  CHECKX(r == ncclRemoteError, "rank %d: init returned %d", a->rank, r);
  CHECKX(strstr(ncclGetLastError(NULL), "missing: rank 2"), "message: %s", ncclGetLastError(NULL));
  return 0;
}

static int body_missing(void) {
  run_processes(NULL, 3, rank_missing, NULL);
  for (int r = 0; r < 2; r++) CHECKX(sh->elapsed_ns[r] < 4000000000LL, "rank %d slow", r);
  return all_ok(3);
}

static void test_missing_rank(void **state) {
  (void)state;
  const char *env[] = {"BRAID_BOOTSTRAP_TIMEOUT=1", NULL};
  in_child(body_missing, env);
}

/* 32 ranks as threads, then a split into three. */
static int rank_32(struct rank_arg *a) {
  ncclComm_t c = NULL, s = NULL;
  int n = -1, rk = -1;
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init %d", a->rank);
  CHECKX(ncclCommSplit(c, a->rank % 3, a->rank, &s, NULL) == ncclSuccess, "split");
  CHECKX(ncclCommCount(s, &n) == ncclSuccess && n == (a->rank % 3 == 2 ? 10 : 11), "count %d", n);
  CHECKX(ncclCommUserRank(s, &rk) == ncclSuccess && rk == a->rank / 3, "child rank %d", rk);
  CHECKX(ncclCommDestroy(s) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess, "destroy");
  return 0;
}

static int body_32(void) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  return run_threads(&id, 32, rank_32, NULL);
}

static void test_32_threads(void **state) {
  (void)state;
  in_child(body_32, NULL);
}

static int body_device_bogus(void) {
  ncclComm_t c;
  EXPECTX(ncclCommInitAll(&c, 1, NULL), ncclInvalidArgument, "BRAID_DEVICE=bogus");
  return 0;
}

static int no_gpu(void) {
#if BRAID_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) != cudaSuccess || n == 0;
#else
  return 1;
#endif
}

/* BRAID_DEVICE unset (auto): the host executor in a build without CUDA;
 * with CUDA but no GPU, NCCL's no-device code and a hint. */
static int body_device_auto(void) {
  ncclComm_t c = NULL;
  ncclResult_t r;
  unsetenv("BRAID_DEVICE");
  r = ncclCommInitAll(&c, 1, NULL);
  if (BRAID_CUDA && !no_gpu()) {
    printf("SKIP: a GPU is visible; the no-GPU answer of BRAID_DEVICE=auto is not testable here\n");
  } else if (BRAID_CUDA) {
    CHECKX(r == ncclUnhandledCudaError, "auto without a GPU returned %d", r);
    CHECKX(strstr(ncclGetLastError(NULL), "BRAID_DEVICE=host"), "no hint: %s",
           ncclGetLastError(NULL));
  } else {
    CHECKX(r == ncclSuccess, "auto in a build without CUDA returned %d", r);
  }
  if (r == ncclSuccess) ncclCommDestroy(c);
  return 0;
}

static int body_device_cuda(void) {
  ncclComm_t c = NULL;
  if (BRAID_CUDA && !no_gpu()) {
    printf("SKIP: a GPU is visible; BRAID_DEVICE=cuda would use it\n");
    return 0;
  }
  if (BRAID_CUDA)
    EXPECTX(ncclCommInitAll(&c, 1, NULL), ncclUnhandledCudaError, "BRAID_DEVICE=host");
  else
    EXPECTX(ncclCommInitAll(&c, 1, NULL), ncclInvalidUsage, "without CUDA");
  return 0;
}

static void test_device_modes(void **state) {
  (void)state;
  const char *bogus[] = {"BRAID_DEVICE=bogus", NULL};
  const char *cuda[] = {"BRAID_DEVICE=cuda", NULL};
  in_child(body_device_bogus, bogus);
  in_child(body_device_auto, NULL);
  in_child(body_device_cuda, cuda);
}

/* Failure injection: ncclCommInitAll with the open-files limit lowered one
 * descriptor at a time fails at each step in turn; every failure is a code
 * with a message, leaves the handle NULL, and gives back every descriptor. */
static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    if (fcntl(fd, F_GETFD) != -1) n++;
  return n;
}

static int body_fd_exhaustion(void) {
  struct rlimit saved, lim;
  ncclComm_t c[2];
  int base, ok = 0, failed = 0;
  /* The first root raises the soft limit once; get that done first. */
  CHECKX(ncclCommInitAll(c, 2, NULL) == ncclSuccess, "warm-up");
  CHECKX(ncclCommDestroy(c[0]) == ncclSuccess && ncclCommDestroy(c[1]) == ncclSuccess, "destroy");
  CHECKX(getrlimit(RLIMIT_NOFILE, &saved) == 0, "getrlimit");
  base = count_fds();
  for (int extra = 0; extra <= 12; extra++) {
    int limit = 0, spare = 0;
    ncclResult_t r;
    while (spare < extra || fcntl(limit, F_GETFD) != -1) {
      if (fcntl(limit, F_GETFD) == -1) spare++;
      limit++;
    }
    lim = saved;
    lim.rlim_cur = (rlim_t)limit;
    CHECKX(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit");
    c[0] = c[1] = (ncclComm_t)0x1;
    r = ncclCommInitAll(c, 2, NULL);
    CHECKX(setrlimit(RLIMIT_NOFILE, &saved) == 0, "setrlimit");
    if (r == ncclSuccess) {
      ok++;
      CHECKX(ncclCommDestroy(c[0]) == ncclSuccess && ncclCommDestroy(c[1]) == ncclSuccess, "destroy");
    } else {
      failed++;
      CHECKX(r == ncclSystemError || r == ncclRemoteError, "%d spare: code %d", extra, r);
      CHECKX(c[0] == NULL && c[1] == NULL, "%d spare: handles left set", extra);
      CHECKX(strlen(ncclGetLastError(NULL)) > 0, "no message");
    }
    /* The root of a failed rendezvous may still be closing its sockets. */
    for (int i = 0; i < 200 && count_fds() != base; i++) sleep_ms(5);
    CHECKX(count_fds() == base, "%d spare: %d descriptors open, %d before", extra, count_fds(), base);
  }
  CHECKX(ok > 0 && failed > 0, "ok %d failed %d", ok, failed);
  return 0;
}

static void test_fd_exhaustion_unwinds(void **state) {
  (void)state;
  const char *env[] = {"BRAID_BOOTSTRAP_TIMEOUT=2", NULL};
  in_child(body_fd_exhaustion, env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_init_all),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_processes),
      cmocka_unit_test(test_two_hosts_by_hostid),
      cmocka_unit_test(test_comm_id_ipv4),
      cmocka_unit_test(test_comm_id_ipv6),
      cmocka_unit_test(test_nonblocking),
      cmocka_unit_test(test_group),
      cmocka_unit_test(test_scalable),
      cmocka_unit_test(test_bad_rendezvous),
      cmocka_unit_test(test_missing_rank),
      cmocka_unit_test(test_32_threads),
      cmocka_unit_test(test_device_modes),
      cmocka_unit_test(test_fd_exhaustion_unwinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
