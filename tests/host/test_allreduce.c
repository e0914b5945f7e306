/*
 * ncclAllReduce end to end in host mode, public API only.
 *
 * The parent runs this program once per algorithm x protocol (NCCL_ALGO,
 * NCCL_PROTO) and once with the tuner's own choice. Each run checks every
 * dtype x op, nranks {1,2,3,4,5,8}, counts {0,1,7,1023} and 1Mi+3 for a
 * subset, in place and out of place, with ranks as:
 *   - threads driven by one thread (ncclCommInitAll + a group),
 *   - threads with one rank each (ncclCommInitRank),
 *   - processes (fork, ncclCommInitRank over the bootstrap network).
 * Outputs are poisoned first; results are compared with an independent CPU
 * reference (tests/common/coll_ref.c).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"

#define NCOMBO (ncclNumTypes * ncclNumOps * 2)

static const int nranks_list[] = {1, 2, 3, 4, 5, 8};
static const size_t counts[] = {0, 1, 7, 1023};

typedef struct {
  ncclDataType_t dt;
  ncclRedOp_t op;
  int inplace;
} combo_t;

static combo_t combo(int i) {
  combo_t c;
  c.inplace = i % 2;
  c.op = (ncclRedOp_t)((i / 2) % ncclNumOps);
  c.dt = (ncclDataType_t)(i / 2 / ncclNumOps);
  return c;
}

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

/* Buffers of one rank for one combo. */
typedef struct {
  void *send, *recv;
} bufs_t;

static void bufs_init(bufs_t *b, combo_t c, int rank, size_t count) {
  size_t bytes = (count ? count : 1) * ref_dtype_size(c.dt);
  b->send = malloc(bytes);
  b->recv = c.inplace ? b->send : malloc(bytes);
  assert_non_null(b->send);
  assert_non_null(b->recv);
  ref_fill_input(c.dt, c.op, rank, b->send, count);
  if (!c.inplace) ref_poison(c.dt, b->recv, count);
}

static void bufs_check(bufs_t *b, combo_t c, int nranks, int rank,
                       size_t count, const char *mode) {
  size_t es = ref_dtype_size(c.dt);
  void *expect = malloc((count ? count : 1) * es);
  assert_non_null(expect);
  ref_reduce_expect(c.dt, c.op, nranks, 1.0, expect, count);
  char msg[160] = "";
  int tolerant = c.op == ncclAvg;
  size_t wrong = ref_compare(c.dt, tolerant, b->recv, expect, count, msg, sizeof(msg));
  if (wrong != 0)
    fail_msg("%s: %s %s %s nranks %d rank %d count %zu: %zu wrong, %s (NCCL_ALGO=%s "
             "NCCL_PROTO=%s)", mode, ref_dtype_name(c.dt), ref_op_name(c.op),
             c.inplace ? "in-place" : "out-of-place", nranks, rank, count, wrong, msg,
             getenv("NCCL_ALGO") ? getenv("NCCL_ALGO") : "auto",
             getenv("NCCL_PROTO") ? getenv("NCCL_PROTO") : "auto");
  free(expect);
  if (!c.inplace) free(b->recv);
  free(b->send);
}

/* One thread drives every rank: ncclCommInitAll and one group per count,
 * holding every dtype x op x in-place combination. */
static void test_one_thread_all_ranks(void **state) {
  (void)state;
  for (size_t ni = 0; ni < sizeof(nranks_list) / sizeof(nranks_list[0]); ni++) {
    int n = nranks_list[ni];
    ncclComm_t comms[8];
    NCCL_OK(ncclCommInitAll(comms, n, NULL));
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      size_t count = counts[ci];
      bufs_t *b = calloc((size_t)NCOMBO * (size_t)n, sizeof(*b));
      assert_non_null(b);
      for (int k = 0; k < NCOMBO; k++)
        for (int r = 0; r < n; r++) bufs_init(&b[k * n + r], combo(k), r, count);
      NCCL_OK(ncclGroupStart());
      for (int k = 0; k < NCOMBO; k++) {
        combo_t c = combo(k);
        for (int r = 0; r < n; r++)
          NCCL_OK(ncclAllReduce(b[k * n + r].send, b[k * n + r].recv, count, c.dt,
                                c.op, comms[r], NULL));
      }
      NCCL_OK(ncclGroupEnd());
      for (int k = 0; k < NCOMBO; k++)
        for (int r = 0; r < n; r++)
          bufs_check(&b[k * n + r], combo(k), n, r, count, "one thread");
      free(b);
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  }
}

/* Large messages (several staging pieces and loop iterations) for two
 * representative dtype/op pairs. */
static void test_large(void **state) {
  (void)state;
  const size_t count = (1u << 20) + 3;
  const combo_t cs[] = {{ncclFloat32, ncclSum, 0}, {ncclFloat32, ncclSum, 1},
                        {ncclInt8, ncclMax, 0}, {ncclBfloat16, ncclSum, 1}};
  const int ns[] = {2, 3, 8};
  for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
    int n = ns[ni];
    ncclComm_t comms[8];
    NCCL_OK(ncclCommInitAll(comms, n, NULL));
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++) {
      bufs_t b[8];
      for (int r = 0; r < n; r++) bufs_init(&b[r], cs[k], r, count);
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < n; r++)
        NCCL_OK(ncclAllReduce(b[r].send, b[r].recv, count, cs[k].dt, cs[k].op,
                              comms[r], NULL));
      NCCL_OK(ncclGroupEnd());
      for (int r = 0; r < n; r++) bufs_check(&b[r], cs[k], n, r, count, "large");
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  }
}

/* PreMulSum with a host-immediate and a device-resident scalar. */
static void test_premulsum(void **state) {
  (void)state;
  const int n = 3;
  const size_t count = 1023;
  ncclComm_t comms[3];
  NCCL_OK(ncclCommInitAll(comms, n, NULL));
  for (int residence = 0; residence < 2; residence++) {
    float scalar[3] = {2.0f, 2.0f, 2.0f};
    ncclRedOp_t ops[3];
    for (int r = 0; r < n; r++)
      NCCL_OK(ncclRedOpCreatePreMulSum(&ops[r], &scalar[r], ncclFloat32,
                                       residence ? ncclScalarDevice
                                                 : ncclScalarHostImmediate,
                                       comms[r]));
    float *in[3], *out[3];
    for (int r = 0; r < n; r++) {
      in[r] = malloc(count * sizeof(float));
      out[r] = malloc(count * sizeof(float));
      ref_fill_input(ncclFloat32, ncclSum, r, in[r], count);
      ref_poison(ncclFloat32, out[r], count);
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; r++)
      NCCL_OK(ncclAllReduce(in[r], out[r], count, ncclFloat32, ops[r], comms[r], NULL));
    /* NCCL allows destroying an operator once the last call using it has
     * returned, even before the group runs. */
    for (int r = 0; r < n; r++) NCCL_OK(ncclRedOpDestroy(ops[r], comms[r]));
    NCCL_OK(ncclGroupEnd());
    float *expect = malloc(count * sizeof(float));
    ref_reduce_expect(ncclFloat32, (ncclRedOp_t)ncclNumOps, n, 2.0, expect, count);
    for (int r = 0; r < n; r++) {
      char msg[128];
      size_t wrong = ref_compare(ncclFloat32, 0, out[r], expect, count, msg, sizeof(msg));
      if (wrong) fail_msg("premulsum residence %d rank %d: %s", residence, r, msg);
      free(in[r]);
      free(out[r]);
    }
    free(expect);
    /* A destroyed operator is unknown again. */
    float x = 1;
    assert_int_equal(ncclAllReduce(&x, &x, 1, ncclFloat32, ops[0], comms[0], NULL),
                     ncclInvalidArgument);
  }
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
}

/* Threads with one rank each, through ncclGetUniqueId / ncclCommInitRank. */
typedef struct {
  ncclUniqueId id;
  int n, rank;
  int failures;
  char msg[256];
} thread_arg_t;

static int run_rank(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  if (r != ncclSuccess) {
    snprintf(msg, msglen, "rank %d init: %s", rank, ncclGetLastError(NULL));
    return 1;
  }
  int failures = 0;
  const size_t cnts[] = {1, 7, 1023, 70000};
  for (int k = 0; k < NCOMBO; k++) {
    combo_t c = combo(k);
    for (size_t ci = 0; ci < sizeof(cnts) / sizeof(cnts[0]); ci++) {
      if (cnts[ci] > 1023 && !(c.dt == ncclFloat32 || c.dt == ncclInt32)) continue;
      size_t count = cnts[ci], es = ref_dtype_size(c.dt);
      void *send = malloc(count * es), *recv = c.inplace ? send : malloc(count * es);
      void *expect = malloc(count * es);
      ref_fill_input(c.dt, c.op, rank, send, count);
      if (!c.inplace) ref_poison(c.dt, recv, count);
      r = ncclAllReduce(send, recv, count, c.dt, c.op, comm, NULL);
      ref_reduce_expect(c.dt, c.op, n, 1.0, expect, count);
      char m[128] = "";
      if (r != ncclSuccess) {
        snprintf(msg, msglen, "rank %d %s %s: %s", rank, ref_dtype_name(c.dt),
                 ref_op_name(c.op), ncclGetLastError(NULL));
        failures++;
      } else if (ref_compare(c.dt, c.op == ncclAvg, recv, expect, count, m, sizeof(m))) {
        snprintf(msg, msglen, "rank %d %s %s %s count %zu: %s", rank,
                 ref_dtype_name(c.dt), ref_op_name(c.op),
                 c.inplace ? "in-place" : "out-of-place", count, m);
        failures++;
      }
      if (!c.inplace) free(recv);
      free(send);
      free(expect);
      if (failures) break;
    }
    if (failures) break;
  }
  ncclCommDestroy(comm);
  return failures;
}

static void *thread_main(void *p) {
  thread_arg_t *a = p;
  a->failures = run_rank(a->id, a->n, a->rank, a->msg, sizeof(a->msg));
  return NULL;
}

static void test_threads_one_rank_each(void **state) {
  (void)state;
  const int n = 4;
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  pthread_t th[4];
  thread_arg_t args[4];
  for (int r = 0; r < n; r++) {
    memset(&args[r], 0, sizeof(args[r]));
    args[r].id = id;
    args[r].n = n;
    args[r].rank = r;
    assert_int_equal(pthread_create(&th[r], NULL, thread_main, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++)
    if (args[r].failures) fail_msg("%s", args[r].msg);
}

/* Processes: rank 0 creates the unique id after the fork (a process must
 * not fork while it runs threads) and hands it to the others by pipe. */
static void test_processes(void **state) {
  (void)state;
  const int n = 3;
  int idpipe[3][2], pipes[3][2];
  pid_t pids[3];
  for (int r = 0; r < n; r++) {
    assert_int_equal(pipe(idpipe[r]), 0);
    assert_int_equal(pipe(pipes[r]), 0);
  }
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      char msg[256] = "";
      ncclUniqueId id;
      if (r == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
        for (int p = 1; p < n; p++)
          if (write(idpipe[p][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(4);
      } else if (read(idpipe[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        _exit(5);
      }
      int f = run_rank(id, n, r, msg, sizeof(msg));
      (void)!write(pipes[r][1], msg, strlen(msg) + 1);
      _exit(f ? 1 : 0);
    }
    close(pipes[r][1]);
  }
  for (int r = 0; r < n; r++) {
    close(idpipe[r][0]);
    close(idpipe[r][1]);
  }
  for (int r = 0; r < n; r++) {
    int st;
    char msg[256] = "";
    (void)!read(pipes[r][0], msg, sizeof(msg) - 1);
    close(pipes[r][0]);
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("process rank %d failed (status %d): %s", r, st, msg);
  }
}

static int run_child(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_thread_all_ranks),
      cmocka_unit_test(test_large),
      cmocka_unit_test(test_premulsum),
      cmocka_unit_test(test_threads_one_rank_each),
      cmocka_unit_test(test_processes),
  };
  char name[96];
  snprintf(name, sizeof(name), "allreduce NCCL_ALGO=%s NCCL_PROTO=%s",
           getenv("NCCL_ALGO") ? getenv("NCCL_ALGO") : "auto",
           getenv("NCCL_PROTO") ? getenv("NCCL_PROTO") : "auto");
  return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}

int main(int argc, char **argv) {
  (void)argc;
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "60", 0);
  if (getenv("BRAID_TEST_CHILD")) return run_child();

  static const char *algos[] = {"Ring", "Tree", "OneShot", "TwoShot", NULL, NULL};
  static const char *protos[] = {"LL", "Simple"};
  int failed = 0;
  /* The last configuration is the tuner's choice with every plan verified
   * before its first use (BRAID_VERIFY_PLANS=1): a plan the verifier
   * rejects fails the call. */
  for (int a = 0; a < 6; a++) {
    for (int p = 0; p < (a < 4 ? 2 : 1); p++) {
      pid_t pid = fork();
      if (pid == 0) {
        setenv("BRAID_TEST_CHILD", "1", 1);
        if (a == 5) setenv("BRAID_VERIFY_PLANS", "1", 1);
        if (algos[a]) {
          setenv("NCCL_ALGO", algos[a], 1);
          setenv("NCCL_PROTO", protos[p], 1);
        } else {
          unsetenv("NCCL_ALGO");
          unsetenv("NCCL_PROTO");
        }
        execv("/proc/self/exe", argv);
        _exit(127);
      }
      int st;
      waitpid(pid, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
  }
  printf("%s: %d configuration(s) failed\n", failed ? "FAIL" : "PASS", failed);
  return failed ? 1 : 0;
}
