/*
 * Faults and hostile input through the public API, host mode: teardown
 * inside an open group, counts that overflow, strangers on the bootstrap
 * ports, peers that never call or die, and calls that do not match across
 * ranks (BRAID_CHECK_CALLS=1). Each case runs in a child process under a
 * deadline (alarm), so a hang fails the case instead of the suite; nothing
 * here sleeps to wait for an outcome. Expected codes are NCCL's; expected
 * data comes from a reduction computed here.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "tdev.h"

#define MAX_RANKS 8
#define SEC 1000000000LL
#define COUNT 1021 /* odd, not a power of two */

struct shared {
  int res[MAX_RANKS];
  char err[MAX_RANKS][512];
  int64_t t_err_ns[MAX_RANKS];
  ncclUniqueId id;
  _Atomic int id_ready;
  _Atomic int pid[MAX_RANKS];
  _Atomic int phase[MAX_RANKS];
};
static struct shared *sh;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
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

/* Runs body in a child process with the given environment (NAME=VALUE
 * strings, NULL-terminated) and a deadline of limit_s seconds. */
static void in_child_env(int (*body)(void), int limit_s, const char *const *env) {
  pid_t pid;
  int status;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("BRAID_DEVICE", "host", 1);
    setenv("BRAID_BOOTSTRAP_TIMEOUT", "20", 1);
    unsetenv("NCCL_COMM_ID");
    unsetenv("BRAID_CHECK_CALLS");
    unsetenv("BRAID_TIMEOUT");
    for (int i = 0; env != NULL && env[i] != NULL; i++) putenv((char *)env[i]);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) _exit(2);
    memset(sh, 0, sizeof(*sh));
    alarm((unsigned)limit_s);
    status = body();
    fflush(NULL);
    _exit(status);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status))
    fail_msg("case died of signal %d (%s)", WTERMSIG(status),
             WTERMSIG(status) == SIGALRM ? "deadline passed: a hang" : "a crash");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("case failed (status %#x)", status);
}

static void in_child(int (*body)(void), int limit_s) { in_child_env(body, limit_s, NULL); }

static void fill(float *b, int rank, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = (float)((rank + 1) * 3 + (int)(i % 17));
}

/* 1 when b holds the sum over nranks of fill(). */
static int sum_ok(const float *b, int nranks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float want = 0.0f;
    for (int r = 0; r < nranks; r++) want += (float)((r + 1) * 3 + (int)(i % 17));
    if (b[i] != want) {
      fprintf(stderr, "element %zu is %g, want %g\n", i, (double)b[i], (double)want);
      return 0;
    }
  }
  return 1;
}

static int contains(const char *s, const char *want) { return strstr(s, want) != NULL; }

/* Whether the ranks listed after `label` in s (numbers up to the next ':')
 * include rank. */
static int lists_rank(const char *s, const char *label, int rank) {
  const char *p = strstr(s, label);
  if (p == NULL) return 0;
  p += strlen(label);
  while (*p != '\0' && *p != ':') {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) {
      p++;
      continue;
    }
    if (v == rank) return 1;
    p = end;
  }
  return 0;
}

/* ---- 1. teardown inside an open group ------------------------------------ */

/* Two ranks driven by one thread (ncclCommInitAll), an all-reduce of each
 * queued in an open group, then fn(comms) inside the group. */
static float *g_buf[2];
static ncclComm_t g_comm[2];

static int group_setup(void) {
  CHECKX(ncclCommInitAll(g_comm, 2, NULL) == ncclSuccess, "init all");
  for (int r = 0; r < 2; r++) {
    g_buf[r] = malloc(COUNT * sizeof(float));
    CHECKX(g_buf[r] != NULL, "malloc");
    fill(g_buf[r], r, COUNT);
  }
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  for (int r = 0; r < 2; r++)
    CHECKX(ncclAllReduce(g_buf[r], g_buf[r], COUNT, ncclFloat, ncclSum, g_comm[r], NULL) ==
               ncclSuccess,
           "queue all-reduce %d", r);
  return 0;
}

static int group_teardown(void) {
  for (int r = 0; r < 2; r++) {
    if (g_comm[r] != NULL) CHECKX(ncclCommDestroy(g_comm[r]) == ncclSuccess, "destroy %d", r);
    free(g_buf[r]);
  }
  return 0;
}

/* ncclCommDestroy of a communicator the open group holds a call on is
 * refused (the call has not been issued yet, so it cannot be flushed); the
 * group then runs as if the destroy had not been tried. */
static int body_destroy_in_group(void) {
  ncclResult_t r;
  if (group_setup()) return 1;
  r = ncclCommDestroy(g_comm[0]);
  CHECKX(r == ncclInvalidUsage, "destroy inside the group returned %d, want ncclInvalidUsage", r);
  CHECKX(contains(ncclGetLastError(NULL), "ncclGroupEnd"), "message does not name the fix: %s",
         ncclGetLastError(NULL));
  r = ncclGroupEnd();
  CHECKX(r == ncclSuccess, "group end returned %d: %s", r, ncclGetLastError(NULL));
  for (int k = 0; k < 2; k++) CHECKX(sum_ok(g_buf[k], 2, COUNT), "rank %d data", k);
  return group_teardown();
}

static void test_destroy_in_group(void **state) {
  (void)state;
  in_child(body_destroy_in_group, 30);
}

/* ncclCommAbort inside the group wins: the aborted communicators' queued
 * calls are dropped and the group end touches nothing of them. */
static int body_abort_in_group(void) {
  ncclWindow_t win[2] = {NULL, NULL};
  void *mem[2] = {NULL, NULL};
  ncclResult_t r;
  if (group_setup()) return 1;
  /* A window registration is queued work of the group too. */
  for (int k = 0; k < 2; k++) {
    CHECKX(ncclMemAlloc(&mem[k], 4096) == ncclSuccess, "mem alloc");
    CHECKX(ncclCommWindowRegister(g_comm[k], mem[k], 4096, &win[k], 0) == ncclSuccess,
           "window register %d", k);
  }
  for (int k = 0; k < 2; k++) {
    CHECKX(ncclCommAbort(g_comm[k]) == ncclSuccess, "abort %d", k);
    g_comm[k] = NULL;
  }
  r = ncclGroupEnd();
  CHECKX(r == ncclSuccess, "group end after abort returned %d: %s", r, ncclGetLastError(NULL));
  CHECKX(win[0] == NULL && win[1] == NULL, "a dropped registration filled its handle");
  for (int k = 0; k < 2; k++) CHECKX(ncclMemFree(mem[k]) == ncclSuccess, "mem free");
  return group_teardown();
}

static void test_abort_in_group(void **state) {
  (void)state;
  in_child(body_abort_in_group, 30);
}

/* ncclCommSplit of a communicator with calls queued in the group: NCCL
 * allows splits in a group; the split runs at the group's end, the calls
 * run, and both the data and the children are right. */
static int body_split_in_group(void) {
  ncclComm_t child[2] = {NULL, NULL};
  ncclResult_t r;
  if (group_setup()) return 1;
  for (int k = 0; k < 2; k++)
    CHECKX(ncclCommSplit(g_comm[k], 0, 1 - k, &child[k], NULL) == ncclSuccess, "split %d", k);
  r = ncclGroupEnd();
  CHECKX(r == ncclSuccess, "group end returned %d: %s", r, ncclGetLastError(NULL));
  for (int k = 0; k < 2; k++) CHECKX(sum_ok(g_buf[k], 2, COUNT), "rank %d data", k);
  for (int k = 0; k < 2; k++) {
    int rank = -1;
    CHECKX(child[k] != NULL, "no child %d", k);
    CHECKX(ncclCommUserRank(child[k], &rank) == ncclSuccess && rank == 1 - k,
           "child %d has rank %d", k, rank);
  }
  for (int k = 0; k < 2; k++) CHECKX(ncclCommDestroy(child[k]) == ncclSuccess, "destroy child");
  return group_teardown();
}

static void test_split_in_group(void **state) {
  (void)state;
  in_child(body_split_in_group, 30);
}

/* ncclCommDestroy of a parent whose split, started in the open group, is
 * still running (waiting for the other rank's split) is refused; the group
 * end completes the splits. */
static int body_destroy_split_parent(void) {
  ncclComm_t child[2] = {NULL, NULL};
  ncclResult_t r;
  CHECKX(ncclCommInitAll(g_comm, 2, NULL) == ncclSuccess, "init all");
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  CHECKX(ncclCommSplit(g_comm[0], 0, 0, &child[0], NULL) == ncclSuccess, "split 0");
  r = ncclCommDestroy(g_comm[0]);
  CHECKX(r == ncclInvalidUsage, "destroying a parent while its split runs returned %d", r);
  CHECKX(ncclCommSplit(g_comm[1], 0, 1, &child[1], NULL) == ncclSuccess, "split 1");
  CHECKX(ncclGroupEnd() == ncclSuccess, "group end: %s", ncclGetLastError(NULL));
  for (int k = 0; k < 2; k++) {
    int rank = -1;
    CHECKX(child[k] != NULL && ncclCommUserRank(child[k], &rank) == ncclSuccess && rank == k,
           "child %d", k);
    CHECKX(ncclCommDestroy(child[k]) == ncclSuccess, "destroy child");
    CHECKX(ncclCommDestroy(g_comm[k]) == ncclSuccess, "destroy parent");
  }
  return 0;
}

static void test_destroy_split_parent_in_group(void **state) {
  (void)state;
  in_child(body_destroy_split_parent, 30);
}

/* Window deregistration inside a group holding a call on the communicator
 * is refused, since the queued call may read the window; the window stays
 * usable and is deregistered after the group. */
static int body_window_dereg_in_group(void) {
  ncclWindow_t win[2] = {NULL, NULL};
  void *mem[2] = {NULL, NULL};
  ncclResult_t r;
  CHECKX(ncclCommInitAll(g_comm, 2, NULL) == ncclSuccess, "init all");
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  for (int k = 0; k < 2; k++) {
    CHECKX(ncclMemAlloc(&mem[k], COUNT * sizeof(float)) == ncclSuccess, "mem alloc");
    CHECKX(ncclCommWindowRegister(g_comm[k], mem[k], COUNT * sizeof(float), &win[k], 0) ==
               ncclSuccess,
           "window register %d", k);
  }
  CHECKX(ncclGroupEnd() == ncclSuccess, "register group: %s", ncclGetLastError(NULL));
  for (int k = 0; k < 2; k++) fill(mem[k], k, COUNT);
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  for (int k = 0; k < 2; k++)
    CHECKX(ncclAllReduce(mem[k], mem[k], COUNT, ncclFloat, ncclSum, g_comm[k], NULL) ==
               ncclSuccess,
           "queue all-reduce");
  r = ncclCommWindowDeregister(g_comm[0], win[0]);
  CHECKX(r == ncclInvalidUsage, "deregistration inside the group returned %d", r);
  CHECKX(ncclGroupEnd() == ncclSuccess, "group end: %s", ncclGetLastError(NULL));
  for (int k = 0; k < 2; k++) CHECKX(sum_ok(mem[k], 2, COUNT), "rank %d data", k);
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  for (int k = 0; k < 2; k++)
    CHECKX(ncclCommWindowDeregister(g_comm[k], win[k]) == ncclSuccess, "deregister %d: %s", k,
           ncclGetLastError(NULL));
  CHECKX(ncclGroupEnd() == ncclSuccess, "dereg group end");
  for (int k = 0; k < 2; k++) {
    CHECKX(ncclMemFree(mem[k]) == ncclSuccess, "mem free");
    CHECKX(ncclCommDestroy(g_comm[k]) == ncclSuccess, "destroy");
  }
  return 0;
}

static void test_window_dereg_in_group(void **state) {
  (void)state;
  in_child(body_window_dereg_in_group, 30);
}

/* ---- 2. counts that overflow --------------------------------------------- */

/* A rejected call must fail at once: well under this. */
#define REJECT_NS (200LL * 1000000LL)

/* Runs fn, expects ncclInvalidArgument within REJECT_NS and a message
 * naming count (as printed) and, when limit is set, the limit. */
#define EXPECT_REJECT(call, count_str, limit)                                           \
  do {                                                                                  \
    int64_t t0_ = now_ns();                                                             \
    ncclResult_t r_ = (call);                                                           \
    int64_t dt_ = now_ns() - t0_;                                                       \
    const char *m_ = ncclGetLastError(NULL);                                            \
    CHECKX(r_ == ncclInvalidArgument, "%s returned %d, want ncclInvalidArgument (%s)",  \
           #call, r_, m_);                                                              \
    CHECKX(dt_ < REJECT_NS, "%s took %lld ms to fail", #call, (long long)(dt_ / 1000000)); \
    if (dt_ > reject_worst_ns) reject_worst_ns = dt_;                                   \
    CHECKX(contains(m_, "count " count_str), "%s: message does not name the count: %s", \
           #call, m_);                                                                  \
    CHECKX(!(limit) || contains(m_, "140737488355328"),                                 \
           "%s: message does not name the limit: %s", #call, m_);                       \
  } while (0)

#define SMAX "18446744073709551615"
static int64_t reject_worst_ns;

static int body_counts(void) {
  ncclComm_t c[2];
  char *a = malloc(4096), *b = malloc(4096);
  CHECKX(a != NULL && b != NULL, "malloc");
  CHECKX(ncclCommInitAll(c, 2, NULL) == ncclSuccess, "init all");
  /* SIZE_MAX at every entry point, outside a group. */
  EXPECT_REJECT(ncclAllReduce(a, b, SIZE_MAX, ncclFloat, ncclSum, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclBroadcast(a, b, SIZE_MAX, ncclInt8, 0, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclReduce(a, b, SIZE_MAX, ncclInt8, ncclSum, 0, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclAllGather(a, b, SIZE_MAX, ncclInt8, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclReduceScatter(a, b, SIZE_MAX, ncclInt8, ncclSum, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclAlltoAll(a, b, SIZE_MAX, ncclInt8, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclGather(a, b, SIZE_MAX, ncclInt8, 1, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclScatter(a, b, SIZE_MAX, ncclInt8, 1, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclSend(a, SIZE_MAX, ncclInt8, 1, c[0], NULL), SMAX, 1);
  EXPECT_REJECT(ncclRecv(b, SIZE_MAX, ncclInt8, 1, c[0], NULL), SMAX, 1);
  /* count x 4 fits, x nranks wraps (gather-type); and count x 8 wraps. */
  EXPECT_REJECT(ncclAllGather(a, b, ((size_t)1 << 62) - 1 + ((size_t)1 << 62), ncclFloat,
                              c[0], NULL),
                "9223372036854775807", 1);
  EXPECT_REJECT(ncclAllReduce(a, b, (size_t)1 << 61, ncclDouble, ncclSum, c[0], NULL),
                "2305843009213693952", 1);
  /* Inside a group: the call and the group fail, nothing runs. */
  CHECKX(ncclGroupStart() == ncclSuccess, "group start");
  EXPECT_REJECT(ncclSend(a, SIZE_MAX, ncclInt8, 1, c[0], NULL), SMAX, 1);
  CHECKX(ncclGroupEnd() == ncclInvalidArgument, "group end after a rejected call");
  /* 2^40 floats with 4 KiB buffers: the count, not the layout, is named. */
  EXPECT_REJECT(ncclAllReduce(a, b, (size_t)1 << 40, ncclFloat, ncclSum, c[0], NULL),
                "1099511627776", 0);
  for (int k = 0; k < 2; k++) CHECKX(ncclCommDestroy(c[k]) == ncclSuccess, "destroy");
  free(a);
  free(b);
  fprintf(stderr, "observed: slowest rejection %lld us\n", (long long)(reject_worst_ns / 1000));
  return 0;
}

static void test_counts(void **state) {
  (void)state;
  in_child(body_counts, 30);
}

/* ---- 3. strangers on the root's port -------------------------------------- */

/* The registration a rank sends to the unique id's root (the wire format of
 * src/core/bootstrap.c, written out here as a stranger would): protocol
 * word, magic, rank, nranks, root index, roots, extra, pid, listener. */
struct stranger_hello {
  uint64_t proto;
  uint64_t magic;
  int32_t rank, nranks, iroot, nroots, extra, pid;
  unsigned char listen[28];
  unsigned char pad[4];
};

struct rank_arg {
  ncclUniqueId id;
  int rank, nranks;
  int (*fn)(struct rank_arg *);
};

static void record(int rank, int rc) {
  sh->res[rank] = rc;
  snprintf(sh->err[rank], sizeof(sh->err[0]), "%s", ncclGetLastError(NULL));
}

static int rank_comm_id(struct rank_arg *a);

static void *rank_thread(void *p) {
  struct rank_arg *a = p;
  record(a->rank, a->fn != NULL ? a->fn(a) : rank_comm_id(a));
  return NULL;
}

/* n ranks as threads of this process on id; 0 when every rank returned 0. */
static int run_threads(const ncclUniqueId *id, int n, int (*fn)(struct rank_arg *)) {
  pthread_t t[MAX_RANKS];
  struct rank_arg a[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    sh->res[r] = -1;
    a[r] = (struct rank_arg){*id, r, n, fn};
    CHECKX(pthread_create(&t[r], NULL, rank_thread, &a[r]) == 0, "pthread_create");
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++)
    CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

static int rank_allreduce(struct rank_arg *a) {
  ncclComm_t c = NULL;
  float *buf = malloc(COUNT * sizeof(float));
  ncclResult_t r;
  CHECKX(buf != NULL, "malloc");
  fill(buf, a->rank, COUNT);
  r = ncclCommInitRank(&c, a->nranks, a->id, a->rank);
  CHECKX(r == ncclSuccess, "rank %d init returned %d", a->rank, r);
  r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, NULL);
  CHECKX(r == ncclSuccess, "rank %d all-reduce returned %d", a->rank, r);
  CHECKX(sum_ok(buf, a->nranks, COUNT), "rank %d data", a->rank);
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  free(buf);
  return 0;
}

/* Connects to the root of id, sends a registration with a wrong magic (or,
 * with garbage set, 72 bytes of noise) and reads what comes back (at most
 * sizeof(reply) bytes, until the root closes). Returns the byte count. */
static ssize_t stranger(const ncclUniqueId *id, int garbage, unsigned char *reply,
                        size_t cap) {
  struct sockaddr_storage ss;
  struct stranger_hello h;
  ssize_t got = 0, n;
  int fd;
  memset(&ss, 0, sizeof(ss));
  memcpy(&ss, id->internal + 8, 28);
  fd = socket(ss.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&ss,
              ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                       : sizeof(struct sockaddr_in)) != 0) {
    close(fd);
    return -1;
  }
  memset(&h, 0, sizeof(h));
  if (garbage) {
    memset(&h, 0xa5, sizeof(h));
  } else {
    h.proto = 0x3154304f42445242ull;
    memcpy(&h.magic, id->internal, 8);
    h.magic ^= 0x1234; /* a wrong guess */
    h.rank = 0;
    h.nranks = 3;
    h.nroots = 1;
    h.pid = (int32_t)getpid();
  }
  if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
    close(fd);
    return -1;
  }
  while ((size_t)got < cap && (n = read(fd, reply + got, cap - (size_t)got)) > 0) got += n;
  close(fd);
  return got;
}

/* 1 when the magic appears in buf, as 8 bytes or as hexadecimal text. */
static int holds_magic(const unsigned char *buf, size_t n, const ncclUniqueId *id) {
  uint64_t magic;
  char hex[32];
  size_t hl;
  memcpy(&magic, id->internal, 8);
  hl = (size_t)snprintf(hex, sizeof(hex), "%llx", (unsigned long long)magic);
  for (size_t i = 0; i + 8 <= n; i++)
    if (memcmp(buf + i, id->internal, 8) == 0) return 1;
  for (size_t i = 0; i + hl <= n; i++)
    if (strncasecmp((const char *)buf + i, hex, hl) == 0) return 1;
  return 0;
}

/* Before any rank registers, a stranger with a wrong magic and one with
 * noise talk to the root: neither gets the magic, and the three real ranks
 * then form the communicator and all-reduce correctly. */
static int body_stranger_root(void) {
  ncclUniqueId id;
  unsigned char reply[4096];
  ssize_t n;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  n = stranger(&id, 0, reply, sizeof(reply));
  CHECKX(n >= 0, "could not reach the root: %s", strerror(errno));
  CHECKX(!holds_magic(reply, (size_t)n, &id), "the root sent its magic to a stranger");
  n = stranger(&id, 1, reply, sizeof(reply));
  CHECKX(n >= 0, "could not reach the root: %s", strerror(errno));
  CHECKX(!holds_magic(reply, (size_t)n, &id), "the root sent its magic to noise");
  return run_threads(&id, 3, rank_allreduce);
}

static void test_stranger_root(void **state) {
  (void)state;
  in_child(body_stranger_root, 30);
}

/* ---- 4. a peer that never makes the first collective --------------------- */

/* Ranks 0 and 1 all-reduce; rank 2 initialises but never calls. The first
 * collective (which connects the ranks) must fail by BRAID_TIMEOUT (1 s
 * here), not BRAID_BOOTSTRAP_TIMEOUT (30 s), naming rank 2. */
static int rank_first_call_missing(struct rank_arg *a) {
  ncclComm_t c = NULL;
  float *buf = malloc(COUNT * sizeof(float));
  ncclResult_t r;
  int64_t t0;
  CHECKX(buf != NULL, "malloc");
  fill(buf, a->rank, COUNT);
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  if (a->rank == 2) {
    /* Until the others have given up; the deadline is the case's alarm. */
    while (atomic_load(&sh->phase[0]) == 0 || atomic_load(&sh->phase[1]) == 0) {
      struct timespec ts = {0, 1000000L};
      nanosleep(&ts, NULL);
    }
  } else {
    t0 = now_ns();
    r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, NULL);
    sh->t_err_ns[a->rank] = now_ns() - t0;
    atomic_store(&sh->phase[a->rank], 1);
    CHECKX(r == ncclRemoteError, "rank %d: all-reduce returned %d (%s)", a->rank, r,
           ncclGetLastError(NULL));
    /* Read once: the ranks are threads, and another's WARN may follow. A
     * rank whose ring neighbour gave up first has heard from neither, so
     * the list may be "0 2" or "1 2": it must hold 2. */
    char err[512];
    snprintf(err, sizeof(err), "%s", ncclGetLastError(NULL));
    CHECKX(contains(err, "BRAID_TIMEOUT") && lists_rank(err, "rank(s)", 2),
           "rank %d: message does not name rank 2 and BRAID_TIMEOUT: %s", a->rank, err);
    CHECKX(sh->t_err_ns[a->rank] < 5 * SEC, "rank %d took %lld ms", a->rank,
           (long long)(sh->t_err_ns[a->rank] / 1000000));
    /* Both have their answer before either closes its connections. */
    while (atomic_load(&sh->phase[1 - a->rank]) == 0) {
      struct timespec ts = {0, 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  CHECKX(ncclCommAbort(c) == ncclSuccess, "abort");
  free(buf);
  return 0;
}

static int body_first_call_missing(void) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  if (run_threads(&id, 3, rank_first_call_missing)) return 1;
  fprintf(stderr, "observed: first collective failed after %lld ms (rank 0), %lld ms (rank 1)\n",
          (long long)(sh->t_err_ns[0] / 1000000), (long long)(sh->t_err_ns[1] / 1000000));
  return 0;
}

static void test_first_call_timeout(void **state) {
  static const char *env[] = {"BRAID_TIMEOUT=1", "BRAID_BOOTSTRAP_TIMEOUT=30", NULL};
  (void)state;
  in_child_env(body_first_call_missing, 15, env);
}

/* ---- 5. NCCL_COMM_ID with a secret --------------------------------------- */

/* A TCP port of 127.0.0.1 free a moment ago. */
static int free_port(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* Registers at 127.0.0.1:port as rank `rank` of 3 with NCCL's public
 * NCCL_COMM_ID magic, retrying until the root listens (up to 5 s). Returns
 * the connected socket, left open, or -1. */
static int stranger_register(int port, int rank) {
  struct stranger_hello h;
  struct sockaddr_in a;
  int64_t until = now_ns() + 5 * SEC;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  memset(&h, 0, sizeof(h));
  h.proto = 0x3154304f42445242ull;
  h.magic = 0x0280028002800280ull;
  h.rank = rank;
  h.nranks = 3;
  h.nroots = 1;
  h.pid = (int32_t)getpid();
  while (now_ns() < until) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
      if (write(fd, &h, sizeof(h)) == (ssize_t)sizeof(h)) return fd;
      close(fd);
      return -1;
    }
    close(fd);
    struct timespec ts = {0, 2000000L};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static int rank_comm_id(struct rank_arg *a) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id from NCCL_COMM_ID");
  a->id = id;
  return rank_allreduce(a);
}

/* With BRAID_COMM_SECRET, a stranger who registers first as rank 1 with
 * NCCL's public magic is refused, and the three real ranks meet. */
static int body_comm_id_secret(void) {
  static char env[64];
  pthread_t t[3];
  struct rank_arg a[3];
  ncclUniqueId none;
  int port = free_port(), fd;
  unsigned char reply[2048];
  ssize_t n = 0, k;
  CHECKX(port > 0, "no free port");
  snprintf(env, sizeof(env), "NCCL_COMM_ID=127.0.0.1:%d", port);
  putenv(env);
  memset(&none, 0, sizeof(none));
  a[0] = (struct rank_arg){none, 0, 3, NULL};
  CHECKX(pthread_create(&t[0], NULL, rank_thread, &a[0]) == 0, "thread");
  (void)rank_comm_id;
  fd = stranger_register(port, 1);
  CHECKX(fd >= 0, "the stranger could not reach the root");
  for (int r = 1; r < 3; r++) {
    a[r] = (struct rank_arg){none, r, 3, NULL};
    CHECKX(pthread_create(&t[r], NULL, rank_thread, &a[r]) == 0, "thread");
  }
  for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
  while ((size_t)n < sizeof(reply) && (k = read(fd, reply + n, sizeof(reply) - (size_t)n)) > 0)
    n += k;
  close(fd);
  for (int r = 0; r < 3; r++)
    CHECKX(sh->res[r] == 0, "rank %d failed (%d): %s", r, sh->res[r], sh->err[r]);
  return 0;
}

static void test_comm_id_secret(void **state) {
  static const char *env[] = {"BRAID_COMM_SECRET=correct horse battery staple", NULL};
  (void)state;
  in_child_env(body_comm_id_secret, 30, env);
}

/* Two real ranks claim rank 1 (with the secret): every rank fails with
 * ncclInvalidUsage saying rank 1 registered twice. */
static int rank_claims(struct rank_arg *a) {
  ncclUniqueId id;
  ncclComm_t c = NULL;
  ncclResult_t r;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id from NCCL_COMM_ID");
  r = ncclCommInitRank(&c, a->nranks, id, a->rank == 2 ? 1 : a->rank);
  CHECKX(r == ncclInvalidUsage, "rank %d: init returned %d", a->rank, r);
  CHECKX(contains(ncclGetLastError(NULL), "rank 1 registered twice"), "rank %d: %s", a->rank,
         ncclGetLastError(NULL));
  CHECKX(c == NULL, "handle left set");
  return 0;
}

static int body_comm_id_taken_rank(void) {
  static char env[64];
  ncclUniqueId none;
  int port = free_port();
  CHECKX(port > 0, "no free port");
  snprintf(env, sizeof(env), "NCCL_COMM_ID=127.0.0.1:%d", port);
  putenv(env);
  memset(&none, 0, sizeof(none));
  return run_threads(&none, 3, rank_claims);
}

static void test_comm_id_taken_rank(void **state) {
  static const char *env[] = {"BRAID_COMM_SECRET=correct horse battery staple", NULL};
  (void)state;
  in_child_env(body_comm_id_taken_rank, 30, env);
}

/* ---- 6. liveness: a rank killed with SIGKILL ------------------------------ */

/* A unique id whose rendezvous root runs in a process of its own (*holder,
 * which the caller kills when the ranks are done), so the ranks can be
 * forked from a process without threads: a fork while the root thread
 * holds a lock of the allocator (ASan's in particular) would leave the
 * child waiting on that lock for ever. */
static int id_from_holder(ncclUniqueId *id, pid_t *holder) {
  int fds[2];
  CHECKX(pipe(fds) == 0, "pipe");
  fflush(NULL);
  pid_t p = fork();
  CHECKX(p >= 0, "fork");
  if (p == 0) {
    ncclUniqueId mine;
    close(fds[0]);
    if (ncclGetUniqueId(&mine) != ncclSuccess) _exit(1);
    if (write(fds[1], &mine, sizeof(mine)) != (ssize_t)sizeof(mine)) _exit(1);
    close(fds[1]);
    for (;;) pause(); /* the root thread serves until the caller kills us */
  }
  close(fds[1]);
  ssize_t n = read(fds[0], id, sizeof(*id));
  close(fds[0]);
  *holder = p;
  CHECKX(n == (ssize_t)sizeof(*id), "the id holder did not send an id");
  return 0;
}

static void holder_stop(pid_t holder) {
  kill(holder, SIGKILL);
  (void)waitpid(holder, NULL, 0);
}

/* n ranks as processes on id; each child's exit status is its result
 * (a rank killed on purpose is expected to die of SIGKILL). */
static int run_processes(const ncclUniqueId *id, int n, int (*fn)(struct rank_arg *),
                         int killed) {
  pid_t pid[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    fflush(NULL);
    pid[r] = fork();
    CHECKX(pid[r] >= 0, "fork");
    if (pid[r] == 0) {
      struct rank_arg a = {*id, r, n, fn};
      atomic_store(&sh->pid[r], (int)getpid());
      record(r, fn(&a));
      fflush(NULL);
      _exit(sh->res[r]);
    }
  }
  for (int r = 0; r < n; r++) {
    int status;
    CHECKX(waitpid(pid[r], &status, 0) == pid[r], "waitpid");
    if (r == killed) {
      CHECKX(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rank %d was not killed", r);
      continue;
    }
    CHECKX(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed (%#x): %s", r,
           status, sh->err[r]);
  }
  return 0;
}

/* Rank 2 dies after the first all-reduce; the others' second all-reduce
 * (pending while, or started after, it dies) fails with ncclRemoteError
 * within 2 s naming rank 2 and its pid, and so does a third call. */
static int rank_killed(struct rank_arg *a) {
  ncclComm_t c = NULL;
  float *buf = malloc(COUNT * sizeof(float));
  char pid_text[32];
  ncclResult_t r;
  int64_t t0, dt;
  CHECKX(buf != NULL, "malloc");
  fill(buf, a->rank, COUNT);
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  CHECKX(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, NULL) == ncclSuccess,
         "first all-reduce: %s", ncclGetLastError(NULL));
  CHECKX(sum_ok(buf, a->nranks, COUNT), "rank %d data", a->rank);
  if (a->rank == 2) raise(SIGKILL);
  t0 = now_ns();
  r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, NULL);
  dt = now_ns() - t0;
  sh->t_err_ns[a->rank] = dt;
  snprintf(pid_text, sizeof(pid_text), "pid %d", atomic_load(&sh->pid[2]));
  CHECKX(r == ncclRemoteError, "rank %d: second all-reduce returned %d: %s", a->rank, r,
         ncclGetLastError(NULL));
  CHECKX(dt < 2 * SEC, "rank %d: the error took %lld ms", a->rank, (long long)(dt / 1000000));
  CHECKX(contains(ncclGetLastError(NULL), "rank 2 (host") &&
             contains(ncclGetLastError(NULL), pid_text),
         "rank %d: message does not name rank 2, its host and %s: %s", a->rank, pid_text,
         ncclGetLastError(NULL));
  t0 = now_ns();
  r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, NULL);
  CHECKX(r == ncclRemoteError && now_ns() - t0 < SEC / 10,
         "rank %d: a later call returned %d after %lld ms", a->rank, r,
         (long long)((now_ns() - t0) / 1000000));
  CHECKX(ncclCommAbort(c) == ncclSuccess, "abort");
  free(buf);
  return 0;
}

static int body_killed(void) {
  ncclUniqueId id;
  pid_t holder;
  if (id_from_holder(&id, &holder)) return 1;
  int rc = run_processes(&id, 3, rank_killed, 2);
  holder_stop(holder);
  if (rc) return 1;
  fprintf(stderr, "observed: liveness error after %lld ms (rank 0), %lld ms (rank 1)\n",
          (long long)(sh->t_err_ns[0] / 1000000), (long long)(sh->t_err_ns[1] / 1000000));
  return 0;
}

static void test_killed_rank(void **state) {
  static const char *env[] = {"BRAID_TIMEOUT=60", NULL};
  (void)state;
  in_child_env(body_killed, 30, env);
}

/* ---- 7. BRAID_CHECK_CALLS=1: calls that do not match across ranks --------- */

/* Case k: one rank's call differs in one field (or is another collective
 * over the same bytes). Every rank must fail with ncclInvalidUsage naming
 * the field, then a matching all-reduce still works. */
static const char *const mismatch_field[] = {"datatype", "op", "collective", "root", "count"};
#define NMISMATCH 5

static int rank_mismatch(struct rank_arg *a) {
  ncclComm_t c = NULL;
  const int n = a->nranks;
  float *send = malloc(COUNT * (size_t)n * sizeof(float));
  float *recv = malloc(COUNT * (size_t)n * sizeof(float));
  int odd = a->rank == 1;
  CHECKX(send != NULL && recv != NULL, "malloc");
  CHECKX(ncclCommInitRank(&c, n, a->id, a->rank) == ncclSuccess, "init");
  for (int k = 0; k < NMISMATCH; k++) {
    ncclResult_t r = ncclSuccess;
    fill(send, a->rank, COUNT * (size_t)n);
    switch (k) {
    case 0: /* float against int32: the same bytes */
      r = ncclAllReduce(send, recv, COUNT, odd ? ncclInt32 : ncclFloat, ncclSum, c, NULL);
      break;
    case 1:
      r = ncclAllReduce(send, recv, COUNT, ncclFloat, odd ? ncclMax : ncclSum, c, NULL);
      break;
    case 2: /* reduce-scatter against all-gather of the same bytes */
      r = odd ? ncclReduceScatter(send, recv, COUNT, ncclFloat, ncclSum, c, NULL)
              : ncclAllGather(send, recv, COUNT, ncclFloat, c, NULL);
      break;
    case 3:
      r = ncclBroadcast(send, recv, COUNT, ncclFloat, odd ? 1 : 0, c, NULL);
      break;
    case 4:
      r = ncclAllReduce(send, recv, odd ? COUNT - 1 : COUNT, ncclFloat, ncclSum, c, NULL);
      break;
    }
    CHECKX(r == ncclInvalidUsage, "rank %d case %s: returned %d (%s)", a->rank,
           mismatch_field[k], r, ncclGetLastError(NULL));
    CHECKX(contains(ncclGetLastError(NULL), mismatch_field[k]) &&
               contains(ncclGetLastError(NULL), "ranks 0 and 1"),
           "rank %d case %s: message: %s", a->rank, mismatch_field[k], ncclGetLastError(NULL));
    fill(send, a->rank, COUNT);
    r = ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, c, NULL);
    CHECKX(r == ncclSuccess, "rank %d: all-reduce after case %s: %d (%s)", a->rank,
           mismatch_field[k], r, ncclGetLastError(NULL));
    CHECKX(sum_ok(recv, n, COUNT), "rank %d data after case %s", a->rank, mismatch_field[k]);
  }
  CHECKX(ncclCommDestroy(c) == ncclSuccess, "destroy");
  free(send);
  free(recv);
  return 0;
}

static int body_mismatch(void) {
  ncclUniqueId id;
  CHECKX(ncclGetUniqueId(&id) == ncclSuccess, "id");
  return run_threads(&id, 3, rank_mismatch);
}

static void test_check_calls(void **state) {
  static const char *env[] = {"BRAID_CHECK_CALLS=1", "BRAID_TIMEOUT=10", NULL};
  (void)state;
  in_child_env(body_mismatch, 60, env);
}

/* CUDA mode (the cudasim suites set BRAID_DEVICE=cuda; skipped otherwise):
 * the watchdog does not stop device work already queued, which ends by the
 * executor's BRAID_TIMEOUT (2 s here) as an async error; a call made after
 * the death is found fails at once naming the rank. */
static int rank_killed_cuda(struct rank_arg *a) {
  ncclComm_t c = NULL;
  cudaStream_t st = NULL;
  float *buf = tdev_alloc(COUNT * sizeof(float));
  ncclResult_t r, async = ncclSuccess;
  int64_t t0;
  CHECKX(buf != NULL, "alloc: %s", tdev_last_error());
  CHECKX(tdev_stream_create(&st) == 0, "stream: %s", tdev_last_error());
  fill(buf, a->rank, COUNT);
  CHECKX(ncclCommInitRank(&c, a->nranks, a->id, a->rank) == ncclSuccess, "init");
  CHECKX(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, st) == ncclSuccess, "first");
  CHECKX(tdev_stream_sync(st, 20) == 0, "sync: %s", tdev_last_error());
  CHECKX(sum_ok(buf, a->nranks, COUNT), "rank %d data", a->rank);
  if (a->rank == 2) raise(SIGKILL);
  r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, st);
  CHECKX(r == ncclSuccess || r == ncclRemoteError, "rank %d: second call %d", a->rank, r);
  if (r == ncclSuccess) {
    /* Queued: the watchdog finds rank 2 gone and the kernel's stuck wait
     * fails after the grace (1 s), long before BRAID_TIMEOUT (60 s). */
    t0 = now_ns();
    while (async == ncclSuccess && now_ns() - t0 < 20 * SEC) {
      CHECKX(ncclCommGetAsyncError(c, &async) == ncclSuccess, "async");
      struct timespec ts = {0, 5000000L};
      nanosleep(&ts, NULL);
    }
    CHECKX(async == ncclRemoteError, "rank %d: async error %d after %lld ms", a->rank, async,
           (long long)((now_ns() - t0) / 1000000));
    fprintf(stderr, "observed: CUDA mode rank %d: queued call failed as async error after "
            "%lld ms\n", a->rank, (long long)((now_ns() - t0) / 1000000));
  } else {
    fprintf(stderr, "observed: CUDA mode rank %d: second call refused at once\n", a->rank);
  }
  t0 = now_ns();
  r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, c, st);
  CHECKX(r == ncclRemoteError && now_ns() - t0 < SEC / 10 &&
             contains(ncclGetLastError(NULL), "rank 2 (host"),
         "rank %d: a later call returned %d: %s", a->rank, r, ncclGetLastError(NULL));
  CHECKX(ncclCommAbort(c) == ncclSuccess, "abort");
  return 0;
}

static int body_killed_cuda(void) {
  ncclUniqueId id;
  pid_t holder;
  if (id_from_holder(&id, &holder)) return 1;
  int rc = run_processes(&id, 3, rank_killed_cuda, 2);
  holder_stop(holder);
  return rc;
}

static void test_killed_rank_cuda(void **state) {
  static const char *env[] = {"BRAID_DEVICE=cuda", "BRAID_TIMEOUT=60", NULL};
  const char *dev = getenv("BRAID_DEVICE");
  (void)state;
  if (dev == NULL || strcmp(dev, "cuda") != 0) skip();
  in_child_env(body_killed_cuda, 60, env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_destroy_in_group),
      cmocka_unit_test(test_abort_in_group),
      cmocka_unit_test(test_split_in_group),
      cmocka_unit_test(test_destroy_split_parent_in_group),
      cmocka_unit_test(test_window_dereg_in_group),
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_stranger_root),
      cmocka_unit_test(test_first_call_timeout),
      cmocka_unit_test(test_comm_id_secret),
      cmocka_unit_test(test_comm_id_taken_rank),
      cmocka_unit_test(test_killed_rank),
      cmocka_unit_test(test_killed_rank_cuda),
      cmocka_unit_test(test_check_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
