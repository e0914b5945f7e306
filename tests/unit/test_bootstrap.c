/*
 * Bootstrap: rendezvous, ring allgather, bcast, tagged send/recv, barrier
 * and child rings, with ranks as threads and as processes; every bad
 * rendezvous (wrong magic, mismatched nranks, duplicate rank, missing rank)
 * and every dead peer must end in NCCL's code and a message naming the
 * rank, never a hang. Data is checked against a pattern computed
 * independently from (rank, index).
 *
 * Each case runs in a child process (bootstrap state is per process) with a
 * short BRAID_BOOTSTRAP_TIMEOUT.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/bootstrap.h"
#include "base/debug.h"
#include "base/param.h"

#define MAX_RANKS 32
#define SLICE 37 /* odd, so slices straddle word boundaries */

/* Shared between the ranks of a case (threads or processes). */
struct shared {
  _Atomic int64_t entered[MAX_RANKS];   /* barrier entry times */
  int res[MAX_RANKS];                   /* what each rank's scenario returned */
  char err[MAX_RANKS][512];             /* that rank's ncclGetLastError text */
  int64_t elapsed_ns[MAX_RANKS];
  ncclUniqueId ids[4];                  /* published by rank 0 (processes) */
  _Atomic int ids_ready;
};

static struct shared *sh;

static int64_t now_ns(void) { return brd_time_now_ns(); }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static unsigned char pattern(int rank, size_t i) {
  return (unsigned char)(((unsigned)rank * 97u + (unsigned)i * 31u) % 251u + 1u);
}

#define FAILX(...)                                                            \
  do {                                                                        \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                        \
    return 1;                                                                 \
  } while (0)

/* Every primitive once, checked against the pattern. */
static int rank_work(struct brd_boot *boot, int rank, int n, int timed_barrier) {
  unsigned char all[MAX_RANKS * SLICE], b[SLICE + 3], m1[5], m2[11];
  int root = n - 1, next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  ncclResult_t r;

  memset(all, 0, sizeof(all));
  for (size_t i = 0; i < SLICE; i++) all[rank * SLICE + i] = pattern(rank, i);
  if ((r = brd_boot_allgather(boot, all, SLICE)) != ncclSuccess) FAILX("allgather: %d", r);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < SLICE; i++)
      if (all[q * SLICE + i] != pattern(q, i))
        FAILX("rank %d: allgather slice %d byte %zu is %d, want %d", rank, q, i,
              all[q * SLICE + i], pattern(q, i));

  for (size_t i = 0; i < sizeof(b); i++) b[i] = rank == root ? pattern(100 + root, i) : 0;
  if ((r = brd_boot_bcast(boot, root, b, sizeof(b))) != ncclSuccess) FAILX("bcast: %d", r);
  for (size_t i = 0; i < sizeof(b); i++)
    if (b[i] != pattern(100 + root, i)) FAILX("rank %d: bcast byte %zu wrong", rank, i);

  /* Two tags sent in one order, received in the other. */
  for (size_t i = 0; i < sizeof(m1); i++) m1[i] = pattern(rank + 200, i);
  for (size_t i = 0; i < sizeof(m2); i++) m2[i] = pattern(rank + 300, i);
  if ((r = brd_boot_send(boot, next, 7, m1, sizeof(m1))) != ncclSuccess) FAILX("send 7: %d", r);
  if ((r = brd_boot_send(boot, next, 3, m2, sizeof(m2))) != ncclSuccess) FAILX("send 3: %d", r);
  memset(m1, 0, sizeof(m1));
  memset(m2, 0, sizeof(m2));
  if ((r = brd_boot_recv(boot, prev, 3, m2, sizeof(m2))) != ncclSuccess) FAILX("recv 3: %d", r);
  if ((r = brd_boot_recv(boot, prev, 7, m1, sizeof(m1))) != ncclSuccess) FAILX("recv 7: %d", r);
  for (size_t i = 0; i < sizeof(m1); i++)
    if (m1[i] != pattern(prev + 200, i)) FAILX("rank %d: tag 7 payload wrong", rank);
  for (size_t i = 0; i < sizeof(m2); i++)
    if (m2[i] != pattern(prev + 300, i)) FAILX("rank %d: tag 3 payload wrong", rank);

  if (timed_barrier) sleep_ms(15 * rank);
  atomic_store(&sh->entered[rank], now_ns());
  if ((r = brd_boot_barrier(boot)) != ncclSuccess) FAILX("barrier: %d", r);
  for (int q = 0; q < n; q++) {
    int64_t e = atomic_load(&sh->entered[q]);
    if (e == 0 || e > now_ns()) FAILX("rank %d left the barrier before rank %d entered", rank, q);
  }
  /* Second barrier: its tag must not match the first one's messages. */
  if ((r = brd_boot_barrier(boot)) != ncclSuccess) FAILX("barrier 2: %d", r);
  return 0;
}

/* ---- running ranks ------------------------------------------------------ */

struct rank_arg {
  const ncclUniqueId *ids;
  int nids, rank, nranks, nranks_claimed;
  _Atomic int *abort;
  int (*fn)(struct rank_arg *);
};

static int rank_default(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  ncclResult_t r = brd_boot_create(a->ids, a->nids, a->rank, a->nranks_claimed, a->abort, &boot);
  int rc;
  if (r != ncclSuccess) return 100 + r;
  rc = rank_work(boot, a->rank, a->nranks, a->nranks <= 8);
  brd_boot_destroy(boot);
  return rc;
}

static void record(struct rank_arg *a, int rc, int64_t t0) {
  sh->res[a->rank] = rc;
  sh->elapsed_ns[a->rank] = now_ns() - t0;
  snprintf(sh->err[a->rank], sizeof(sh->err[0]), "%s", brd_log_last_error());
}

static void *rank_thread(void *p) {
  struct rank_arg *a = p;
  int64_t t0 = now_ns();
  record(a, a->fn(a), t0);
  return NULL;
}

/* Process ranks get their ids as an application would: rank 0 calls
 * brd_boot_get_unique_id and hands the ids over (here through shared
 * memory). Forking only from thread-free processes also keeps the sanitizers
 * out of the locks of threads that do not exist in the child. */
static int publish_or_wait_ids(struct rank_arg *a, int nids) {
  if (a->rank == 0) {
    for (int i = 0; i < nids; i++)
      if (brd_boot_get_unique_id(&sh->ids[i]) != ncclSuccess) return -1;
    atomic_store(&sh->ids_ready, 1);
  } else {
    for (int i = 0; !atomic_load(&sh->ids_ready); i++) {
      if (i > 5000) return -1;
      sleep_ms(2);
    }
  }
  a->ids = sh->ids;
  return 0;
}

/* Runs ranks [0, nstart) of an nranks rendezvous as threads or processes.
 * ids == NULL (processes only): rank 0 makes nids ids for everyone. */
static void run_ranks(const ncclUniqueId *ids, int nids, int nranks, int nstart,
                      int as_process, int (*fn)(struct rank_arg *), _Atomic int *abort) {
  pthread_t t[MAX_RANKS];
  pid_t pid[MAX_RANKS];
  struct rank_arg args[MAX_RANKS];
  for (int r = 0; r < nstart; r++) sh->res[r] = -1; /* a rank that never reports fails */
  atomic_store(&sh->ids_ready, 0);
  fflush(NULL);
  for (int r = 0; r < nstart; r++) {
    args[r] = (struct rank_arg){ids, nids, r, nranks, nranks, abort, fn};
    if (as_process) {
      pid[r] = fork();
      if (pid[r] == 0) {
        int64_t t0 = now_ns();
        if (ids == NULL && publish_or_wait_ids(&args[r], nids) != 0) {
          record(&args[r], 99, t0);
          _exit(0);
        }
        record(&args[r], fn(&args[r]), t0);
        fflush(NULL);
        _exit(0);
      }
    } else {
      pthread_create(&t[r], NULL, rank_thread, &args[r]);
    }
  }
  for (int r = 0; r < nstart; r++) {
    if (as_process) waitpid(pid[r], NULL, 0);
    else pthread_join(t[r], NULL);
  }
}

/* Runs body in a child with the given timeout; the test fails unless the
 * child exits 0. */
static void in_child(int (*body)(void), const char *timeout_s) {
  pid_t pid;
  int status;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("BRAID_BOOTSTRAP_TIMEOUT", timeout_s, 1);
    unsetenv("NCCL_COMM_ID");
    brd_param_reload();
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

static int all_ok(int n) {
  for (int r = 0; r < n; r++)
    if (sh->res[r] != 0) FAILX("rank %d returned %d (last error: %s)", r, sh->res[r], sh->err[r]);
  return 0;
}

/* ---- good rendezvous ---------------------------------------------------- */

static int body_threads(void) {
  static const int sizes[] = {1, 2, 3, 5, 8, 13};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    ncclUniqueId id;
    if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
    memset(sh, 0, sizeof(*sh));
    run_ranks(&id, 1, sizes[i], sizes[i], 0, rank_default, NULL);
    if (all_ok(sizes[i])) FAILX("with %d ranks", sizes[i]);
  }
  return 0;
}

static void test_threads(void **state) {
  (void)state;
  in_child(body_threads, "10");
}

static int body_processes(void) {
  run_ranks(NULL, 1, 5, 5, 1, rank_default, NULL);
  return all_ok(5);
}

static void test_processes(void **state) {
  (void)state;
  in_child(body_processes, "10");
}

static int body_multi_root(void) {
  ncclUniqueId ids[3];
  for (int i = 0; i < 3; i++)
    if (brd_boot_get_unique_id(&ids[i]) != ncclSuccess) FAILX("get id %d", i);
  run_ranks(ids, 3, 7, 7, 0, rank_default, NULL);
  if (all_ok(7)) return 1;
  /* As many roots as ranks. */
  {
    ncclUniqueId more[4];
    for (int i = 0; i < 4; i++)
      if (brd_boot_get_unique_id(&more[i]) != ncclSuccess) FAILX("get id %d", i);
    memset(sh, 0, sizeof(*sh));
    run_ranks(more, 4, 4, 4, 0, rank_default, NULL);
    if (all_ok(4)) return 1;
  }
  return 0;
}

static void test_multi_root(void **state) {
  (void)state;
  in_child(body_multi_root, "10");
}

static int body_ipv6(void) {
  union brd_sock_addr a;
  struct brd_sock l;
  char env[64];
  ncclUniqueId id;
  int port;
  if (brd_sock_addr_parse("[::1]:0", &a) != ncclSuccess || brd_sock_listen(&a, &l) != ncclSuccess) {
    printf("SKIP: IPv6 loopback (::1) is not available on this machine\n");
    return 0;
  }
  port = brd_sock_addr_port(&l.addr);
  brd_sock_close(&l);
  snprintf(env, sizeof(env), "[::1]:%d", port);
  setenv("NCCL_COMM_ID", env, 1);
  brd_param_reload();
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  if (brd_boot_root_start(&id) != ncclSuccess) FAILX("root on %s", env);
  run_ranks(&id, 1, 3, 3, 0, rank_default, NULL);
  brd_boot_root_stop(&id);
  return all_ok(3);
}

static void test_ipv6(void **state) {
  (void)state;
  in_child(body_ipv6, "10");
}

/* Children: colors {1,4,5} ordered 4,1,5 and {0,2,3}; then a child of a
 * child. */
static int rank_child(struct rank_arg *a) {
  static const int red[3] = {4, 1, 5}, blue[3] = {0, 2, 3};
  struct brd_boot *boot = NULL, *child = NULL, *grand = NULL;
  const int *list;
  int me = -1, rc = 0;
  _Atomic int cflag = 0;
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  if (r != ncclSuccess) return 100 + r;
  list = (a->rank == 1 || a->rank == 4 || a->rank == 5) ? red : blue;
  for (int i = 0; i < 3; i++)
    if (list[i] == a->rank) me = i;
  r = brd_boot_create_child(boot, 1, list == red, 3, me, list, &cflag, &child);
  if (r != ncclSuccess) rc = 200 + r;
  if (rc == 0) rc = rank_work(child, me, 3, 0);
  if (rc == 0 && me < 2) {
    const int pair[2] = {0, 1};
    r = brd_boot_create_child(child, 1, 0, 2, me, pair, NULL, &grand);
    if (r != ncclSuccess) rc = 300 + r;
    if (rc == 0) rc = rank_work(grand, me, 2, 0);
  }
  brd_boot_destroy(grand);
  brd_boot_destroy(child);
  brd_boot_destroy(boot);
  return rc;
}

static int body_child(void) {
  ncclUniqueId id;
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  run_ranks(&id, 1, 6, 6, 0, rank_child, NULL);
  return all_ok(6);
}

static void test_child(void **state) {
  (void)state;
  in_child(body_child, "10");
}

/* Rank 3 dies after the rendezvous; the others build a child without it. */
static int rank_child_without_dead(struct rank_arg *a) {
  static const int alive[3] = {0, 1, 2};
  struct brd_boot *boot = NULL, *child = NULL;
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  int rc;
  if (r != ncclSuccess) return 100 + r;
  if (a->rank == 3) raise(SIGKILL);
  sleep_ms(100); /* make sure rank 3 is gone */
  r = brd_boot_create_child(boot, 9, 0, 3, a->rank, alive, NULL, &child);
  if (r != ncclSuccess) return 200 + r;
  rc = rank_work(child, a->rank, 3, 0);
  brd_boot_destroy(child);
  brd_boot_destroy(boot);
  return rc;
}

static int body_child_without_dead(void) {
  run_ranks(NULL, 1, 4, 4, 1, rank_child_without_dead, NULL);
  return all_ok(3);
}

static void test_child_without_dead_rank(void **state) {
  (void)state;
  in_child(body_child_without_dead, "5");
}

/* ---- one deadline for a whole exchange ---------------------------------- */

/* With every rank calling, brd_boot_allgather_timed gathers like
 * brd_boot_allgather; with rank 3 of 5 not calling, the others fail with
 * ncclRemoteError after the 1 s given, not the bootstrap timeout (10 s). */
static int timed_skip = -1;
/* With a rank skipping: the callers meet here after their failed exchange,
 * before any of them leaves, so no caller still waiting sees another leave
 * (whose reason would then be the process's last WARN, not the timeout). */
static pthread_barrier_t timed_bar;

static int rank_timed(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  int v[MAX_RANKS];
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  if (r != ncclSuccess) return 100 + r;
  for (int q = 0; q < a->nranks; q++) v[q] = q == a->rank ? 1000 + 7 * q : -1;
  if (a->rank != timed_skip) {
    r = brd_boot_allgather_timed(boot, v, sizeof(v[0]), 1, "test exchange");
    if (r != ncclSuccess) {
      if (timed_skip >= 0) pthread_barrier_wait(&timed_bar);
      brd_boot_destroy(boot);
      return 100 + r;
    }
    for (int q = 0; q < a->nranks; q++)
      if (v[q] != 1000 + 7 * q) FAILX("rank %d: slot %d holds %d", a->rank, q, v[q]);
  } else {
    sleep_ms(2500); /* past the others' deadline, then leave */
  }
  brd_boot_destroy(boot);
  return 0;
}

/* Counts the WARN lines of the log file at path containing needle (and
 * needle2 when not NULL); -1 when the file cannot be read. */
static int count_warns(const char *path, const char *needle, const char *needle2) {
  char line[2048];
  int n = 0;
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strstr(line, "NCCL WARN") == NULL || strstr(line, needle) == NULL) continue;
    if (needle2 == NULL || strstr(line, needle2) != NULL) n++;
  }
  fclose(f);
  return n;
}

static int body_timed(void) {
  char log_path[64];
  int warned, sock_warned;
  ncclUniqueId id;
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  timed_skip = -1;
  run_ranks(&id, 1, 5, 5, 0, rank_timed, NULL);
  if (all_ok(5)) FAILX("every rank calling");
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  timed_skip = 3;
  memset(sh, 0, sizeof(*sh));
  /* Every WARN of the failing exchange, in a file of its own. */
  snprintf(log_path, sizeof(log_path), "/tmp/braid_test_timed.%d.log", (int)getpid());
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  brd_log_reset();
  if (pthread_barrier_init(&timed_bar, NULL, 4) != 0) FAILX("pthread_barrier_init");
  run_ranks(&id, 1, 5, 5, 0, rank_timed, NULL);
  pthread_barrier_destroy(&timed_bar);
  for (int r = 0; r < 5; r++) {
    if (r == 3) continue;
    if (sh->res[r] != 100 + (int)ncclRemoteError)
      FAILX("rank %d returned %d: %s", r, sh->res[r], sh->err[r]);
    if (sh->elapsed_ns[r] > 8000000000LL)
      FAILX("rank %d took %lld ms", r, (long long)(sh->elapsed_ns[r] / 1000000));
  }
  brd_log_reset(); /* closes the file */
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("NCCL_DEBUG");
  if (strstr(brd_log_last_error(), "BRAID_TIMEOUT") == NULL ||
      strstr(brd_log_last_error(), "test exchange") == NULL)
    FAILX("message: %s", brd_log_last_error());
  /* The exchange's only WARNs are its callers' (one each, naming the cause
   * and the fix): a socket-layer timeout WARN from one rank thread could be
   * the last error another thread reads (ncclGetLastError is per process). */
  warned = count_warns(log_path, "test exchange: rank ", "raise BRAID_TIMEOUT");
  sock_warned = count_warns(log_path, "timed out after", NULL);
  unlink(log_path);
  if (warned != 4) FAILX("%d callers WARNed the timeout, want 4", warned);
  if (sock_warned != 0) FAILX("%d socket-layer timeout WARNs, want 0", sock_warned);
  return 0;
}

static void test_allgather_deadline(void **state) {
  (void)state;
  in_child(body_timed, "10");
}

/* ---- bad rendezvous ----------------------------------------------------- */

static int expect_all(int n, ncclResult_t code, const char *needle1, const char *needle2) {
  for (int r = 0; r < n; r++) {
    if (sh->res[r] != 100 + (int)code)
      FAILX("rank %d returned %d, want %d (last error: %s)", r, sh->res[r], 100 + code, sh->err[r]);
    if (needle1 && strstr(sh->err[r], needle1) == NULL)
      FAILX("rank %d: \"%s\" does not mention \"%s\"", r, sh->err[r], needle1);
    if (needle2 && strstr(sh->err[r], needle2) == NULL)
      FAILX("rank %d: \"%s\" does not mention \"%s\"", r, sh->err[r], needle2);
  }
  return 0;
}

static int bad_rank = -1, bad_nranks = 0, bad_as_rank = -1;

/* Rank bad_rank flips a bit of the id's magic, claims bad_nranks, or
 * registers as bad_as_rank. */
static int rank_bad(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  const ncclUniqueId *ids = a->ids;
  ncclUniqueId bad_id;
  int nranks = a->nranks, rank = a->rank;
  ncclResult_t r;
  if (a->rank == bad_rank) {
    if (bad_nranks) {
      nranks = bad_nranks;
    } else if (bad_as_rank >= 0) {
      rank = bad_as_rank;
    } else {
      brd_boot_handle_t h;
      bad_id = ids[0];
      memcpy(&h, bad_id.internal, sizeof(h));
      h.magic ^= 0x5a5a;
      memcpy(bad_id.internal, &h, sizeof(h));
      ids = &bad_id;
    }
  }
  r = brd_boot_create(ids, 1, rank, nranks, NULL, &boot);
  brd_boot_destroy(boot);
  return r == ncclSuccess ? 0 : 100 + r;
}

/* A rank with a wrong magic is refused at once (ncclInvalidUsage, and the
 * refusal does not carry the root's magic); it cannot end the others'
 * rendezvous, which wait for rank 2 and then report it missing. */
static int body_wrong_magic(void) {
  bad_rank = 2;
  run_ranks(NULL, 1, 3, 3, 1, rank_bad, NULL);
  if (sh->res[2] != 100 + (int)ncclInvalidUsage || strstr(sh->err[2], "magic") == NULL)
    FAILX("rank 2 returned %d: %s", sh->res[2], sh->err[2]);
  if (sh->elapsed_ns[2] > 500000000LL) FAILX("rank 2 took %lld ms", (long long)sh->elapsed_ns[2] / 1000000);
  for (int r = 0; r < 2; r++) {
    if (sh->res[r] != 100 + (int)ncclRemoteError || strstr(sh->err[r], "missing: rank 2") == NULL)
      FAILX("rank %d returned %d: %s", r, sh->res[r], sh->err[r]);
  }
  return 0;
}

static void test_wrong_magic(void **state) {
  (void)state;
  in_child(body_wrong_magic, "1");
}

/* A stranger on a rank's listener: a header with another magic is dropped
 * with nothing sent back, and the ranks' own messages still arrive. */

static int rank_stranger_listener(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  int value = 0;
  if (r != ncclSuccess) return 100 + r;
  if (a->rank == 0) {
    const union brd_sock_addr *to = brd_boot_peer_addr(boot, 1);
    struct { uint64_t magic; int32_t rank, tag; } hdr = {brd_boot_magic(boot) ^ 1, 0, 7};
    char byte;
    int fd = socket(to->sa.sa_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, &to->sa, brd_sock_addr_len(to)) != 0) return 1;
    if (write(fd, &hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) return 2;
    value = 4242;
    if (brd_boot_send(boot, 1, 7, &value, sizeof(value)) != ncclSuccess) return 3;
    /* Rank 1 drops the stranger without a word: end of stream, no bytes. */
    if (read(fd, &byte, 1) != 0) return 4;
    close(fd);
  } else {
    if (brd_boot_recv(boot, 0, 7, &value, sizeof(value)) != ncclSuccess) return 5;
    if (value != 4242) return 6;
  }
  if (brd_boot_barrier(boot) != ncclSuccess) return 7;
  brd_boot_destroy(boot);
  return 0;
}

static int body_stranger_listener(void) {
  ncclUniqueId id;
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  run_ranks(&id, 1, 2, 2, 0, rank_stranger_listener, NULL);
  if (strstr(brd_log_last_error(), "did not present this communicator's magic") == NULL)
    FAILX("no WARN about the stranger: %s", brd_log_last_error());
  return all_ok(2);
}

static void test_stranger_on_rank_listener(void **state) {
  (void)state;
  in_child(body_stranger_listener, "5");
}

static int body_mismatched_nranks(void) {
  bad_rank = 2;
  bad_nranks = 4;
  run_ranks(NULL, 1, 3, 3, 1, rank_bad, NULL);
  return expect_all(3, ncclInvalidUsage, "nranks=4", "nranks=3");
}

static void test_mismatched_nranks(void **state) {
  (void)state;
  in_child(body_mismatched_nranks, "5");
}

static int body_duplicate_rank(void) {
  bad_rank = 2;
  bad_as_rank = 1;
  run_ranks(NULL, 1, 3, 3, 1, rank_bad, NULL);
  return expect_all(3, ncclInvalidUsage, "rank 1 registered twice", NULL);
}

static void test_duplicate_rank(void **state) {
  (void)state;
  in_child(body_duplicate_rank, "5");
}

static void test_local_range_checks(void **state) {
  (void)state;
  ncclUniqueId id;
  struct brd_boot *boot = NULL;
  memset(&id, 0, sizeof(id));
  assert_int_equal(brd_boot_create(&id, 1, 3, 3, NULL, &boot), ncclInvalidArgument);
  assert_non_null(strstr(brd_log_last_error(), "rank 3 is outside [0, 3)"));
  assert_int_equal(brd_boot_create(&id, 1, -1, 3, NULL, &boot), ncclInvalidArgument);
  assert_int_equal(brd_boot_create(&id, 0, 0, 3, NULL, &boot), ncclInvalidArgument);
  assert_int_equal(brd_boot_create(&id, 4, 0, 3, NULL, &boot), ncclInvalidArgument);
  assert_null(boot);
}

static int body_missing_rank(void) {
  ncclUniqueId id;
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  run_ranks(&id, 1, 3, 2, 0, rank_default, NULL);
  for (int r = 0; r < 2; r++) {
    if (sh->res[r] != 100 + ncclRemoteError) FAILX("rank %d returned %d", r, sh->res[r]);
    if (sh->elapsed_ns[r] > 4000000000LL) FAILX("rank %d took too long", r);
  }
  /* Threads share one last-error text: the root's reason. */
  if (strstr(sh->err[0], "missing: rank 2") == NULL) FAILX("message: %s", sh->err[0]);
  return 0;
}

static void test_missing_rank(void **state) {
  (void)state;
  in_child(body_missing_rank, "1");
}

/* Rank 1 exits right after the rendezvous; rank 0 waits for a message from
 * it, rank 2 for one from rank 0 that never comes because rank 0 fails. */
static int rank_dead_sender(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  char buf[8];
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  if (r != ncclSuccess) return 100 + r;
  if (a->rank == 1) raise(SIGKILL);
  if (a->rank == 0) {
    r = brd_boot_recv(boot, 1, 5, buf, sizeof(buf));
    brd_boot_destroy(boot);
    return r == ncclSuccess ? 0 : 100 + r;
  }
  r = brd_boot_recv(boot, 0, 5, buf, sizeof(buf));
  brd_boot_destroy(boot);
  return r == ncclSuccess ? 0 : 100 + r;
}

static int body_dead_sender(void) {
  run_ranks(NULL, 1, 3, 3, 1, rank_dead_sender, NULL);
  for (int r = 0; r < 3; r += 2) {
    if (sh->res[r] != 100 + ncclRemoteError) FAILX("rank %d returned %d", r, sh->res[r]);
    if (sh->elapsed_ns[r] > 4000000000LL) FAILX("rank %d took %lld ns", r, (long long)sh->elapsed_ns[r]);
  }
  if (strstr(sh->err[0], "rank 1 at") == NULL || strstr(sh->err[0], "gone") == NULL)
    FAILX("rank 0 message: %s", sh->err[0]);
  if (strstr(sh->err[2], "rank 0") == NULL) FAILX("rank 2 message: %s", sh->err[2]);
  return 0;
}

static void test_dead_sender(void **state) {
  (void)state;
  in_child(body_dead_sender, "20");
}

static int rank_dead_in_ring(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  unsigned char all[4 * SLICE];
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, NULL, &boot);
  if (r != ncclSuccess) return 100 + r;
  if (a->rank == 2) raise(SIGKILL);
  memset(all, 1, sizeof(all));
  r = brd_boot_allgather(boot, all, SLICE);
  brd_boot_destroy(boot);
  return r == ncclSuccess ? 0 : 100 + r;
}

static int body_dead_in_ring(void) {
  run_ranks(NULL, 1, 4, 4, 1, rank_dead_in_ring, NULL);
  for (int r = 0; r < 4; r++) {
    if (r == 2) continue;
    if (sh->res[r] != 100 + ncclRemoteError) FAILX("rank %d returned %d", r, sh->res[r]);
  }
  /* Ring neighbours of rank 2 name it. */
  if (strstr(sh->err[1], "rank 2") == NULL || strstr(sh->err[3], "rank 2") == NULL)
    FAILX("messages: \"%s\" / \"%s\"", sh->err[1], sh->err[3]);
  return 0;
}

static void test_dead_in_ring(void **state) {
  (void)state;
  in_child(body_dead_in_ring, "20");
}

/* Rank 1 of 4 leaves with a reason (its last WARN) right after the
 * rendezvous: by ncclCommAbort's way (abort flag set, then destroyed) or by
 * exiting with the bootstrap open. Rank 0 (its previous neighbour) sees the
 * ring close with that reason, then fails an allgather naming rank 1 and
 * the reason; rank 2 (its next) fails a receive from it alike; rank 3,
 * whose neighbours 0 and 2 fail and leave in turn, hears the reason
 * through them. Every survivor within seconds (the bootstrap timeout is
 * 20 s). A rank killed by a signal gives no reason (test_dead_in_ring).
 * The reason is the communicator's own, never another thread's WARN:
 * mode 2 notes a failure on the bootstrap (as the proxy does) and mode 3
 * aborts after its own WARN, each after another thread of the process
 * WARNed about something else. */
static int leave_by_exit;
static int leave_mode; /* 0: abort, 1: exit, 2: noted failure, 3: other WARN, abort */

static void *warn_unrelated(void *arg) {
  (void)arg;
  WARN("test: another communicator's trouble: gadget 9 jammed");
  return NULL;
}

static int rank_leaving(struct rank_arg *a) {
  struct brd_boot *boot = NULL;
  _Atomic int flag = 0;
  unsigned char all[4 * SLICE];
  char why[BRD_BOOT_WHY_LEN];
  int who = -1;
  ncclResult_t r = brd_boot_create(a->ids, 1, a->rank, a->nranks, &flag, &boot);
  if (r != ncclSuccess) return 100 + r;
  memset(all, 1, sizeof(all));
  if (a->rank == 1) {
    WARN("test: rank 1 cannot go on: widget 42 is missing");
    if (leave_mode == 2)
      brd_boot_note_failure(boot, "test: rank 1's proxy: widget 42 is missing its net");
    if (leave_mode >= 2) {
      pthread_t th;
      if (pthread_create(&th, NULL, warn_unrelated, NULL) != 0) return 98;
      pthread_join(th, NULL);
    }
    if (leave_by_exit) {
      fflush(NULL);
      exit(0);
    }
    atomic_store(&flag, 1);
    brd_boot_destroy(boot);
    return 0;
  }
  if (a->rank == 0) {
    for (int64_t until = now_ns() + 5000000000LL; now_ns() < until; sleep_ms(5))
      if ((who = brd_boot_ring_left(boot, why, sizeof(why))) >= 0) break;
    if (who != 1 || strstr(why, "widget 42 is missing") == NULL)
      FAILX("rank 0: the ring reports rank %d closed, reason \"%s\"", who, why);
  }
  if (a->rank == 2) r = brd_boot_recv(boot, 1, 5, all, 8);
  else r = brd_boot_allgather(boot, all, SLICE);
  brd_boot_destroy(boot);
  return r == ncclSuccess ? 0 : 100 + r;
}

static int body_leave_reason(void) {
  for (leave_mode = 0; leave_mode < 4; leave_mode++) {
    leave_by_exit = leave_mode == 1;
    memset(sh, 0, sizeof(*sh));
    run_ranks(NULL, 1, 4, 4, 1, rank_leaving, NULL);
    for (int r = 0; r < 4; r++) {
      if (r == 1) continue;
      if (sh->res[r] != 100 + ncclRemoteError)
        FAILX("mode %d: rank %d returned %d: %s", leave_mode, r, sh->res[r], sh->err[r]);
      if (sh->elapsed_ns[r] > 5000000000LL)
        FAILX("mode %d: rank %d took %lld ns", leave_mode, r, (long long)sh->elapsed_ns[r]);
      /* The neighbours name rank 1; rank 3 names whichever neighbour
       * left first, whose reason names rank 1. All carry the text. */
      if (strstr(sh->err[r], " left: ") == NULL ||
          strstr(sh->err[r], "widget 42 is missing") == NULL ||
          (r != 3 && strstr(sh->err[r], "rank 1 ") == NULL) ||
          (leave_by_exit && strstr(sh->err[r], "exited with the communicator open") == NULL) ||
          (leave_mode == 2 && strstr(sh->err[r], "proxy: widget 42 is missing its net") == NULL) ||
          strstr(sh->err[r], "gadget 9") != NULL)
        FAILX("mode %d: rank %d's error does not carry rank 1's reason: %s", leave_mode, r,
              sh->err[r]);
    }
  }
  return 0;
}

static void test_leave_reason(void **state) {
  (void)state;
  in_child(body_leave_reason, "20");
}

/* Two of three ranks wait for the third; another thread aborts them. */
static int body_abort_during_create(void) {
  ncclUniqueId id;
  _Atomic int flag = 0;
  pthread_t t[2];
  struct rank_arg args[2];
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  for (int r = 0; r < 2; r++) {
    sh->res[r] = -1;
    args[r] = (struct rank_arg){&id, 1, r, 3, 3, &flag, rank_default};
    pthread_create(&t[r], NULL, rank_thread, &args[r]);
  }
  sleep_ms(150);
  atomic_store(&flag, 1);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (sh->res[r] != 100 + ncclInternalError) FAILX("rank %d returned %d", r, sh->res[r]);
    if (sh->elapsed_ns[r] > 1000000000LL) FAILX("rank %d took %lld ns", r, (long long)sh->elapsed_ns[r]);
  }
  return 0;
}

static void test_abort_during_create(void **state) {
  (void)state;
  in_child(body_abort_during_create, "30");
}

/* The root's process stops it while ranks wait: they hear why at once. */
static int body_root_stopped(void) {
  ncclUniqueId id;
  pthread_t t[2];
  struct rank_arg args[2];
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  for (int r = 0; r < 2; r++) {
    sh->res[r] = -1;
    args[r] = (struct rank_arg){&id, 1, r, 3, 3, NULL, rank_default};
    pthread_create(&t[r], NULL, rank_thread, &args[r]);
  }
  sleep_ms(150);
  brd_boot_root_stop(&id);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (sh->res[r] != 100 + ncclRemoteError) FAILX("rank %d returned %d", r, sh->res[r]);
    if (sh->elapsed_ns[r] > 1000000000LL) FAILX("rank %d took %lld ns", r, (long long)sh->elapsed_ns[r]);
  }
  if (strstr(sh->err[0], "stopped") == NULL) FAILX("message: %s", sh->err[0]);
  return 0;
}

static void test_root_stopped(void **state) {
  (void)state;
  in_child(body_root_stopped, "30");
}

static int body_bad_tags(void) {
  ncclUniqueId id;
  struct brd_boot *boot = NULL;
  char c = 0;
  if (brd_boot_get_unique_id(&id) != ncclSuccess) FAILX("get id");
  if (brd_boot_create(&id, 1, 0, 1, NULL, &boot) != ncclSuccess) FAILX("one rank");
  if (brd_boot_send(boot, 1, 0, &c, 1) != ncclInvalidArgument) FAILX("peer 1 of 1");
  if (brd_boot_recv(boot, 0, -1, &c, 1) != ncclInvalidArgument) FAILX("tag -1");
  if (brd_boot_send(boot, 0, BRD_BOOT_TAG_MAX, &c, 1) != ncclInvalidArgument) FAILX("tag max");
  if (brd_boot_bcast(boot, 2, &c, 1) != ncclInvalidArgument) FAILX("root 2 of 1");
  /* A rank may message itself. */
  c = 42;
  if (brd_boot_send(boot, 0, 1, &c, 1) != ncclSuccess) FAILX("self send");
  c = 0;
  if (brd_boot_recv(boot, 0, 1, &c, 1) != ncclSuccess || c != 42) FAILX("self recv");
  /* Size disagreement is caught, not truncated. */
  if (brd_boot_send(boot, 0, 2, &c, 1) != ncclSuccess) FAILX("self send 2");
  {
    int wide = 0;
    if (brd_boot_recv(boot, 0, 2, &wide, sizeof(wide)) != ncclInternalError) FAILX("size check");
  }
  brd_boot_destroy(boot);
  return 0;
}

static void test_bad_tags(void **state) {
  (void)state;
  in_child(body_bad_tags, "5");
}

/* Failure injection: with the open-files limit lowered one descriptor at a
 * time, every step of a one-rank rendezvous fails in turn (socket, accept,
 * listen...). Each failure must be an error code with a message, and must
 * give back every descriptor it took (counted in /proc/self/fd); under
 * ASan, LeakSanitizer checks the memory at exit. Runs in this process, last,
 * after the root threads of earlier cases are gone. */
static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    if (fcntl(fd, F_GETFD) != -1) n++;
  return n;
}

static void test_fd_exhaustion_unwinds(void **state) {
  (void)state;
  struct rlimit saved, lim;
  ncclUniqueId id;
  int base, ok = 0, failed = 0;
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "2", 1);
  brd_param_reload();
  /* The first root raises the soft limit once; do that before lowering it. */
  assert_int_equal(brd_boot_get_unique_id(&id), ncclSuccess);
  brd_boot_root_stop(&id);
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
  base = count_fds();
  for (int extra = 0; extra <= 8; extra++) {
    struct brd_boot *boot = NULL;
    ncclResult_t r1, r2 = ncclSuccess;
    int limit = 0, spare = 0;
    /* The lowest limit that leaves exactly `extra` descriptors free. */
    while (spare < extra || fcntl(limit, F_GETFD) != -1) {
      if (fcntl(limit, F_GETFD) == -1) spare++;
      limit++;
    }
    lim = saved;
    lim.rlim_cur = (rlim_t)limit;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    r1 = brd_boot_get_unique_id(&id);
    if (r1 == ncclSuccess) r2 = brd_boot_create(&id, 1, 0, 1, NULL, &boot);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    if (r1 == ncclSuccess) brd_boot_root_stop(&id);
    if (r1 == ncclSuccess && r2 == ncclSuccess) {
      ok++;
      brd_boot_destroy(boot);
    } else {
      failed++;
      if (r1 != ncclSuccess) assert_int_equal(r1, ncclSystemError);
      else assert_true(r2 == ncclSystemError || r2 == ncclRemoteError);
      assert_null(boot);
      assert_true(strlen(brd_log_last_error()) > 0);
    }
    if (count_fds() != base) fail_msg("with %d spare descriptors: %d open, %d before", extra, count_fds(), base);
  }
  assert_true(ok > 0);
  assert_true(failed > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_range_checks),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_processes),
      cmocka_unit_test(test_multi_root),
      cmocka_unit_test(test_ipv6),
      cmocka_unit_test(test_child),
      cmocka_unit_test(test_child_without_dead_rank),
      cmocka_unit_test(test_bad_tags),
      cmocka_unit_test(test_allgather_deadline),
      cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_stranger_on_rank_listener),
      cmocka_unit_test(test_mismatched_nranks),
      cmocka_unit_test(test_duplicate_rank),
      cmocka_unit_test(test_missing_rank),
      cmocka_unit_test(test_dead_sender),
      cmocka_unit_test(test_dead_in_ring),
      cmocka_unit_test(test_leave_reason),
      cmocka_unit_test(test_abort_during_create),
      cmocka_unit_test(test_root_stopped),
      cmocka_unit_test(test_fd_exhaustion_unwinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
