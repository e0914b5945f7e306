/*
 * ncclAllReduce end to end, public API only, in host mode or on a GPU.
 *
 * The parent runs this program once per algorithm x protocol (NCCL_ALGO,
 * NCCL_PROTO) and once with the tuner's own choice. Each run checks every
 * dtype x op, nranks {1,2,3,4,5,8}, counts {0,1,7,1023} and 1Mi+3 for a
 * subset, in place and out of place, with ranks as:
 *   - processes (fork, ncclCommInitRank over the bootstrap network),
 *   - threads driven by one thread (ncclCommInitAll, or on one GPU
 *     ncclCommInitRank in a group; then a group of calls),
 *   - threads with one rank each (ncclCommInitRank).
 * Outputs are poisoned first; results are compared with an independent CPU
 * reference (tests/common/coll_ref.c).
 *
 * The mode follows BRAID_DEVICE (host when unset; tests/common/tdev.h):
 * in CUDA mode buffers are managed memory, every rank has its own stream
 * (ranks sharing a GPU need that), results are read after the stream is
 * synchronised, and threads and processes run 1, 2, 4 and 8 ranks.
 * Processes are forked first, before this process touches CUDA.
 * BRAID_TEST_QUICK=1 shrinks the matrix (3 dtypes x 3 ops, 3
 * configurations, fewer rank counts) for slow targets.
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
#include "tdev.h"

#define NCOMBO (ncclNumTypes * ncclNumOps * 2)

static const int nranks_list[] = {1, 2, 3, 4, 5, 8};
static const int nranks_list_quick[] = {1, 2, 3, 4};
static const size_t counts[] = {0, 1, 7, 1023};

/* A stream's work must finish within this (the kernels' own BRAID_TIMEOUT
 * is 60 s unless the caller set another). */
#define SYNC_TIMEOUT_S 300.0

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

/* Whether the matrix includes combination c: all of them, or with
 * BRAID_TEST_QUICK an integer, a float and a bfloat16 type x sum, max and
 * avg. */
static int combo_wanted(combo_t c) {
  if (!tdev_quick()) return 1;
  int dt_ok = c.dt == ncclInt8 || c.dt == ncclFloat32 || c.dt == ncclBfloat16;
  int op_ok = c.op == ncclSum || c.op == ncclMax || c.op == ncclAvg;
  return dt_ok && op_ok;
}

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

#define SYNC_OK(stream)                                                       \
  do {                                                                        \
    if (tdev_stream_sync((stream), SYNC_TIMEOUT_S) != 0)                      \
      fail_msg("waiting for a rank's stream: %s (%s)", tdev_last_error(),     \
               ncclGetLastError(NULL));                                       \
  } while (0)

/* A buffer the library can use in this mode (tdev.h). */
static void *xalloc(size_t bytes) {
  void *p = tdev_alloc(bytes);
  if (p == NULL) fail_msg("%s", tdev_last_error());
  return p;
}

/* n communicators of one clique driven by this thread: ncclCommInitAll in
 * host mode; in CUDA mode every rank on the current device (ncclCommInitAll
 * would put rank r on device r), by ncclCommInitRank in one group. */
static void comms_init(ncclComm_t *comms, int n) {
  if (tdev_kind() == TDEV_HOST) {
    NCCL_OK(ncclCommInitAll(comms, n, NULL));
    return;
  }
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommInitRank(&comms[r], n, id, r));
  NCCL_OK(ncclGroupEnd());
}

/* One stream per rank: NULL in host mode. */
static void streams_create(cudaStream_t *s, int n) {
  for (int r = 0; r < n; r++)
    if (tdev_stream_create(&s[r]) != 0) fail_msg("%s", tdev_last_error());
}

static void streams_destroy(cudaStream_t *s, int n) {
  for (int r = 0; r < n; r++) tdev_stream_destroy(s[r]);
}

/* Buffers of one rank for one combo. */
typedef struct {
  void *send, *recv;
} bufs_t;

static void bufs_init(bufs_t *b, combo_t c, int rank, size_t count) {
  size_t bytes = (count ? count : 1) * ref_dtype_size(c.dt);
  b->send = xalloc(bytes);
  b->recv = c.inplace ? b->send : xalloc(bytes);
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
  if (!c.inplace) tdev_free(b->recv);
  tdev_free(b->send);
}

/* One thread drives every rank: comms_init and one group per count,
 * holding every dtype x op x in-place combination. */
static void test_one_thread_all_ranks(void **state) {
  (void)state;
  int quick = tdev_quick();
  const int *ns = quick ? nranks_list_quick : nranks_list;
  size_t nns = quick ? sizeof(nranks_list_quick) / sizeof(nranks_list_quick[0])
                     : sizeof(nranks_list) / sizeof(nranks_list[0]);
  for (size_t ni = 0; ni < nns; ni++) {
    int n = ns[ni];
    ncclComm_t comms[8];
    cudaStream_t streams[8];
    comms_init(comms, n);
    streams_create(streams, n);
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      size_t count = counts[ci];
      bufs_t *b = calloc((size_t)NCOMBO * (size_t)n, sizeof(*b));
      assert_non_null(b);
      for (int k = 0; k < NCOMBO; k++)
        if (combo_wanted(combo(k)))
          for (int r = 0; r < n; r++) bufs_init(&b[k * n + r], combo(k), r, count);
      NCCL_OK(ncclGroupStart());
      for (int k = 0; k < NCOMBO; k++) {
        combo_t c = combo(k);
        if (!combo_wanted(c)) continue;
        for (int r = 0; r < n; r++)
          NCCL_OK(ncclAllReduce(b[k * n + r].send, b[k * n + r].recv, count, c.dt,
                                c.op, comms[r], streams[r]));
      }
      NCCL_OK(ncclGroupEnd());
      for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
      for (int k = 0; k < NCOMBO; k++)
        if (combo_wanted(combo(k)))
          for (int r = 0; r < n; r++)
            bufs_check(&b[k * n + r], combo(k), n, r, count, "one thread");
      free(b);
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    streams_destroy(streams, n);
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
  /* Quick: three ranks, the first two pairs. */
  int quick = tdev_quick();
  size_t nns = quick ? 1 : sizeof(ns) / sizeof(ns[0]);
  size_t ncs = quick ? 2 : sizeof(cs) / sizeof(cs[0]);
  for (size_t ni = 0; ni < nns; ni++) {
    int n = quick ? 3 : ns[ni];
    ncclComm_t comms[8];
    cudaStream_t streams[8];
    comms_init(comms, n);
    streams_create(streams, n);
    for (size_t k = 0; k < ncs; k++) {
      bufs_t b[8];
      for (int r = 0; r < n; r++) bufs_init(&b[r], cs[k], r, count);
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < n; r++)
        NCCL_OK(ncclAllReduce(b[r].send, b[r].recv, count, cs[k].dt, cs[k].op,
                              comms[r], streams[r]));
      NCCL_OK(ncclGroupEnd());
      for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
      for (int r = 0; r < n; r++) bufs_check(&b[r], cs[k], n, r, count, "large");
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    streams_destroy(streams, n);
  }
}

/* PreMulSum with a host-immediate and a device-resident scalar. */
static void test_premulsum(void **state) {
  (void)state;
  const int n = 3;
  const size_t count = 1023;
  ncclComm_t comms[3];
  cudaStream_t streams[3];
  comms_init(comms, n);
  streams_create(streams, n);
  for (int residence = 0; residence < 2; residence++) {
    /* In CUDA mode a device-resident scalar must be device-accessible. */
    float *scalar = xalloc(3 * sizeof(float));
    for (int r = 0; r < n; r++) scalar[r] = 2.0f;
    ncclRedOp_t ops[3];
    for (int r = 0; r < n; r++)
      NCCL_OK(ncclRedOpCreatePreMulSum(&ops[r], &scalar[r], ncclFloat32,
                                       residence ? ncclScalarDevice
                                                 : ncclScalarHostImmediate,
                                       comms[r]));
    float *in[3], *out[3];
    for (int r = 0; r < n; r++) {
      in[r] = xalloc(count * sizeof(float));
      out[r] = xalloc(count * sizeof(float));
      ref_fill_input(ncclFloat32, ncclSum, r, in[r], count);
      ref_poison(ncclFloat32, out[r], count);
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; r++)
      NCCL_OK(ncclAllReduce(in[r], out[r], count, ncclFloat32, ops[r], comms[r],
                            streams[r]));
    /* NCCL allows destroying an operator once the last call using it has
     * returned, even before the group runs. */
    for (int r = 0; r < n; r++) NCCL_OK(ncclRedOpDestroy(ops[r], comms[r]));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
    float *expect = malloc(count * sizeof(float));
    ref_reduce_expect(ncclFloat32, (ncclRedOp_t)ncclNumOps, n, 2.0, expect, count);
    for (int r = 0; r < n; r++) {
      char msg[128];
      size_t wrong = ref_compare(ncclFloat32, 0, out[r], expect, count, msg, sizeof(msg));
      if (wrong) fail_msg("premulsum residence %d rank %d: %s", residence, r, msg);
      tdev_free(in[r]);
      tdev_free(out[r]);
    }
    free(expect);
    /* A destroyed operator is unknown again (refused before any launch). */
    float *x = xalloc(sizeof(float));
    *x = 1;
    assert_int_equal(ncclAllReduce(x, x, 1, ncclFloat32, ops[0], comms[0], streams[0]),
                     ncclInvalidArgument);
    tdev_free(x);
    tdev_free(scalar);
  }
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  streams_destroy(streams, n);
}

/* One rank of a clique, through ncclCommInitRank (a thread or a process). */
static int run_rank(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  ncclComm_t comm;
  cudaStream_t stream;
  if (tdev_stream_create(&stream) != 0) {
    snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
    return 1;
  }
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  if (r != ncclSuccess) {
    snprintf(msg, msglen, "rank %d init: %s", rank, ncclGetLastError(NULL));
    tdev_stream_destroy(stream);
    return 1;
  }
  int failures = 0;
  const size_t cnts[] = {1, 7, 1023, 70000};
  for (int k = 0; k < NCOMBO; k++) {
    combo_t c = combo(k);
    if (!combo_wanted(c)) continue;
    for (size_t ci = 0; ci < sizeof(cnts) / sizeof(cnts[0]); ci++) {
      if (cnts[ci] > 1023 && !(c.dt == ncclFloat32 || c.dt == ncclInt32)) continue;
      size_t count = cnts[ci], es = ref_dtype_size(c.dt);
      void *send = tdev_alloc(count * es);
      void *recv = c.inplace ? send : tdev_alloc(count * es);
      void *expect = malloc(count * es);
      if (send == NULL || recv == NULL || expect == NULL) {
        snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
        if (!c.inplace) tdev_free(recv);
        tdev_free(send);
        free(expect);
        failures++;
        break;
      }
      ref_fill_input(c.dt, c.op, rank, send, count);
      if (!c.inplace) ref_poison(c.dt, recv, count);
      r = ncclAllReduce(send, recv, count, c.dt, c.op, comm, stream);
      ref_reduce_expect(c.dt, c.op, n, 1.0, expect, count);
      char m[128] = "";
      if (r != ncclSuccess) {
        snprintf(msg, msglen, "rank %d %s %s: %s", rank, ref_dtype_name(c.dt),
                 ref_op_name(c.op), ncclGetLastError(NULL));
        failures++;
      } else if (tdev_stream_sync(stream, SYNC_TIMEOUT_S) != 0) {
        snprintf(msg, msglen, "rank %d %s %s count %zu: %s (%s)", rank,
                 ref_dtype_name(c.dt), ref_op_name(c.op), count, tdev_last_error(),
                 ncclGetLastError(NULL));
        failures++;
      } else if (ref_compare(c.dt, c.op == ncclAvg, recv, expect, count, m, sizeof(m))) {
        snprintf(msg, msglen, "rank %d %s %s %s count %zu: %s", rank,
                 ref_dtype_name(c.dt), ref_op_name(c.op),
                 c.inplace ? "in-place" : "out-of-place", count, m);
        failures++;
      }
      if (!c.inplace) tdev_free(recv);
      tdev_free(send);
      free(expect);
      if (failures) break;
    }
    if (failures) break;
  }
  ncclCommDestroy(comm);
  tdev_stream_destroy(stream);
  return failures;
}

static void test_threads_one_rank_each(void **state) {
  (void)state;
  int ns[4];
  int nn = tdev_rank_counts(4, 3, ns);
  for (int ni = 0; ni < nn; ni++) {
    char msg[256];
    if (tdev_run_threads(ns[ni], run_rank, msg, sizeof(msg)) != 0)
      fail_msg("threads, %d ranks: %s", ns[ni], msg);
  }
}

/* Processes: rank 0 creates the unique id after the fork (a process must
 * not fork while it runs threads) and hands it to the others by pipe. In
 * CUDA mode this runs before anything else in this process touched CUDA:
 * a forked child cannot use a CUDA its parent initialised. */
static void run_processes(int n) {
  tdev_id_pipes_t idp;
  int pipes[8][2];
  pid_t pids[8];
  if (tdev_id_pipes_open(&idp, n) != 0) fail_msg("%s", tdev_last_error());
  for (int r = 0; r < n; r++) assert_int_equal(pipe(pipes[r]), 0);
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      char msg[256] = "";
      ncclUniqueId id;
      tdev_stage_host(r, n);
      int f = 1;
      if (tdev_id_pipes_share(&idp, r, &id) != 0)
        snprintf(msg, sizeof(msg), "%s", tdev_last_error());
      else
        f = run_rank(id, n, r, msg, sizeof(msg));
      (void)!write(pipes[r][1], msg, strlen(msg) + 1);
      _exit(f ? 1 : 0);
    }
    close(pipes[r][1]);
  }
  tdev_id_pipes_close(&idp);
  for (int r = 0; r < n; r++) {
    int st;
    char msg[256] = "";
    (void)!read(pipes[r][0], msg, sizeof(msg) - 1);
    close(pipes[r][0]);
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("process rank %d of %d failed (status %d): %s", r, n, st, msg);
  }
}

static void test_processes(void **state) {
  (void)state;
  if (tdev_kind() == TDEV_CUDA && tdev_cuda_touched())
    fail_msg("this process used CUDA before forking ranks that use it");
  int ns[4];
  int nn = tdev_rank_counts(3, 2, ns);
  for (int ni = 0; ni < nn; ni++) run_processes(ns[ni]);
}

static int run_child(void) {
  /* Processes first: they fork, which CUDA mode allows only before this
   * process touched CUDA. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_processes),
      cmocka_unit_test(test_one_thread_all_ranks),
      cmocka_unit_test(test_large),
      cmocka_unit_test(test_premulsum),
      cmocka_unit_test(test_threads_one_rank_each),
  };
  char name[112];
  snprintf(name, sizeof(name), "allreduce (%s%s) NCCL_ALGO=%s NCCL_PROTO=%s",
           tdev_kind_name(), tdev_quick() ? ", quick" : "",
           getenv("NCCL_ALGO") ? getenv("NCCL_ALGO") : "auto",
           getenv("NCCL_PROTO") ? getenv("NCCL_PROTO") : "auto");
  return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}

int main(int argc, char **argv) {
  (void)argc;
  /* Host mode unless the caller chose (BRAID_DEVICE=cuda for a GPU). */
  setenv("BRAID_DEVICE", "host", 0);
  setenv("BRAID_TIMEOUT", "60", 0);
  if (getenv("BRAID_TEST_CHILD")) return run_child();

  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: allreduce with BRAID_DEVICE=%s: %s\n", getenv("BRAID_DEVICE"), why);
    return TDEV_EXIT_SKIP;
  }
  static const char *algos[] = {"Ring", "Tree", "OneShot", "TwoShot", NULL, NULL};
  static const char *protos[] = {"LL", "Simple"};
  int quick = tdev_quick();
  int failed = 0;
  /* The last configuration is the tuner's choice with every plan verified
   * before its first use (BRAID_VERIFY_PLANS=1): a plan the verifier
   * rejects fails the call. Quick: ring Simple, two-shot LL and that one. */
  for (int a = 0; a < 6; a++) {
    for (int p = 0; p < (a < 4 ? 2 : 1); p++) {
      if (quick && !((a == 0 && p == 1) || (a == 3 && p == 0) || a == 5)) continue;
      fflush(NULL);
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
