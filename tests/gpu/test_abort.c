/*
 * A collective whose peer never arrives, on a GPU, public API only.
 *
 * Two ranks share device 0, driven by one thread (ncclCommInitRank in a
 * group), each on its own non-blocking stream. Both first run one
 * all-reduce together (the library connects; result checked against a CPU
 * sum). Then rank 0 alone calls ncclAllReduce, and rank 1 never does:
 *   timeout: with BRAID_TIMEOUT=2, ncclAllReduce returns at once, rank 0's
 *            stream completes after the deadline and within 3 s of it,
 *            without a CUDA error; ncclCommGetAsyncError then reports
 *            ncclRemoteError and ncclGetLastError's text names rank 1 as
 *            the peer that was waited for;
 *   abort:   with BRAID_TIMEOUT=60, another thread calls ncclCommAbort on
 *            rank 0 half a second later: ncclCommAbort returns ncclSuccess
 *            within 5 s and the stream completes, without a CUDA error,
 *            within 10 s of the call.
 * NCCL_PROTO=Simple, so the stuck wait is a semaphore wait, whose report
 * names the peer. Each case runs in its own process (parameters are read
 * once per process): the parent re-executes this program.
 *
 * Skips (exit 77, "SKIP: ...") without CUDA in the build, with
 * BRAID_DEVICE=host, or when no CUDA device is visible.
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "tdev.h"

#if BRAID_CUDA
#define COUNT 4099

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  ncclComm_t comms[2];
  cudaStream_t streams[2];
  float *in[2], *out[2];
} pair_t;

/* Small integers: the two-rank sum is exact in float. */
static float value(int rank, size_t i) {
  return (float)((int)((i * 7 + (size_t)rank * 3) % 101) - 50);
}

/* Two ranks on the current device, connected by one checked all-reduce. */
static void pair_setup(pair_t *p) {
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCL_OK(ncclCommInitRank(&p->comms[r], 2, id, r));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    if (tdev_stream_create(&p->streams[r]) != 0) fail_msg("%s", tdev_last_error());
    p->in[r] = tdev_alloc(COUNT * sizeof(float));
    p->out[r] = tdev_alloc(COUNT * sizeof(float));
    if (p->in[r] == NULL || p->out[r] == NULL) fail_msg("%s", tdev_last_error());
    for (size_t i = 0; i < COUNT; i++) {
      p->in[r][i] = value(r, i);
      p->out[r][i] = -1000.0f;
    }
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++)
    NCCL_OK(ncclAllReduce(p->in[r], p->out[r], COUNT, ncclFloat32, ncclSum, p->comms[r],
                          p->streams[r]));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++)
    if (tdev_stream_sync(p->streams[r], 60.0) != 0)
      fail_msg("warm-up rank %d: %s (%s)", r, tdev_last_error(), ncclGetLastError(NULL));
  for (int r = 0; r < 2; r++)
    for (size_t i = 0; i < COUNT; i++)
      if (p->out[r][i] != value(0, i) + value(1, i))
        fail_msg("warm-up rank %d element %zu: %g, expected %g", r, i, (double)p->out[r][i],
                 (double)(value(0, i) + value(1, i)));
}

static void pair_free(pair_t *p) {
  for (int r = 0; r < 2; r++) {
    tdev_free(p->in[r]);
    tdev_free(p->out[r]);
    tdev_stream_destroy(p->streams[r]);
  }
}

/* Rank 0 alone: returns the time the call took to return. */
static double hang_rank0(pair_t *p, double *start_out) {
  double t0 = now_s();
  NCCL_OK(ncclAllReduce(p->in[0], p->out[0], COUNT, ncclFloat32, ncclSum, p->comms[0],
                        p->streams[0]));
  *start_out = t0;
  return now_s() - t0;
}

static void test_timeout(void **state) {
  (void)state;
  const double timeout = atof(getenv("BRAID_TIMEOUT")), margin = 3.0;
  pair_t p;
  memset(&p, 0, sizeof(p));
  pair_setup(&p);
  double t0;
  double call = hang_rank0(&p, &t0);
  if (call > timeout * 0.5)
    fail_msg("ncclAllReduce took %.2f s to return: it must not wait for the peer", call);
  if (tdev_stream_sync(p.streams[0], timeout + 30.0) != 0)
    fail_msg("rank 0's stream: %s (%s)", tdev_last_error(), ncclGetLastError(NULL));
  double took = now_s() - t0;
  printf("  rank 0's stream completed %.2f s after the call (BRAID_TIMEOUT=%g)\n", took,
         timeout);
  if (took > timeout + margin)
    fail_msg("rank 0's stream completed %.2f s after the call, later than BRAID_TIMEOUT=%g s "
             "+ %g s", took, timeout, margin);
  if (took < timeout * 0.5)
    fail_msg("rank 0's stream completed %.2f s after the call, long before BRAID_TIMEOUT=%g "
             "s: the collective did not wait for rank 1", took, timeout);

  /* The hang report is in host memory once the kernel has left. */
  ncclResult_t async = ncclSuccess;
  double deadline = now_s() + 5.0;
  do {
    NCCL_OK(ncclCommGetAsyncError(p.comms[0], &async));
    if (async != ncclSuccess && async != ncclInProgress) break;
    usleep(10000);
  } while (now_s() < deadline);
  const char *text = ncclGetLastError(p.comms[0]);
  printf("  ncclCommGetAsyncError: %s; ncclGetLastError: %s\n", ncclGetErrorString(async),
         text);
  if (async != ncclRemoteError)
    fail_msg("ncclCommGetAsyncError gave %d (%s), expected ncclRemoteError", (int)async,
             ncclGetErrorString(async));
  if (text == NULL || strstr(text, "from rank 1") == NULL)
    fail_msg("ncclGetLastError does not name rank 1 as the stuck peer: \"%s\"",
             text ? text : "(null)");
  assert_int_equal(ncclCommAbort(p.comms[0]), ncclSuccess);
  assert_int_equal(ncclCommAbort(p.comms[1]), ncclSuccess);
  pair_free(&p);
}

typedef struct {
  ncclComm_t comm;
  double delay, took;
  ncclResult_t res;
} aborter_t;

static void *aborter_main(void *v) {
  aborter_t *a = v;
  usleep((useconds_t)(a->delay * 1e6));
  double t0 = now_s();
  a->res = ncclCommAbort(a->comm);
  a->took = now_s() - t0;
  return NULL;
}

static void test_abort(void **state) {
  (void)state;
  const double timeout = atof(getenv("BRAID_TIMEOUT")), bound = 10.0;
  pair_t p;
  memset(&p, 0, sizeof(p));
  pair_setup(&p);
  double t0;
  double call = hang_rank0(&p, &t0);
  if (call > 1.0) fail_msg("ncclAllReduce took %.2f s to return", call);
  aborter_t ab = {p.comms[0], 0.5, 0.0, ncclInternalError};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, aborter_main, &ab), 0);
  int sync = tdev_stream_sync(p.streams[0], bound + 20.0);
  double took = now_s() - t0;
  char why[256];
  snprintf(why, sizeof(why), "%s", sync ? tdev_last_error() : "");
  pthread_join(th, NULL);
  printf("  ncclCommAbort returned %s after %.2f s; rank 0's stream completed %.2f s after "
         "the call (BRAID_TIMEOUT=%g)\n", ncclGetErrorString(ab.res), ab.took, took, timeout);
  if (sync != 0) fail_msg("rank 0's stream: %s", why);
  if (ab.res != ncclSuccess)
    fail_msg("ncclCommAbort: %s (%s)", ncclGetErrorString(ab.res), ncclGetLastError(NULL));
  if (ab.took > 5.0) fail_msg("ncclCommAbort took %.2f s", ab.took);
  if (took > bound)
    fail_msg("rank 0's stream completed %.2f s after the call: the abort did not end the "
             "wait (BRAID_TIMEOUT=%g)", took, timeout);
  assert_int_equal(ncclCommAbort(p.comms[1]), ncclSuccess);
  pair_free(&p);
}

/* Runs one case in a fresh process with its parameters. */
static int run_case(char **argv, const char *which, const char *timeout) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("BRAID_TEST_ABORT_CASE", which, 1);
    setenv("BRAID_TIMEOUT", timeout, 1);
    setenv("NCCL_PROTO", "Simple", 1);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  return !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}
#endif /* BRAID_CUDA */

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
#if !BRAID_CUDA
  printf("SKIP: test_abort: this build has no CUDA (CUDA=0)\n");
  return TDEV_EXIT_SKIP;
#else
  setenv("BRAID_DEVICE", "cuda", 0);
  const char *which = getenv("BRAID_TEST_ABORT_CASE");
  if (which != NULL) {
    const struct CMUnitTest timeout_tests[] = {cmocka_unit_test(test_timeout)};
    const struct CMUnitTest abort_tests[] = {cmocka_unit_test(test_abort)};
    if (strcmp(which, "timeout") == 0)
      return cmocka_run_group_tests_name("peer never arrives: timeout", timeout_tests,
                                         NULL, NULL);
    return cmocka_run_group_tests_name("peer never arrives: ncclCommAbort", abort_tests,
                                       NULL, NULL);
  }
  char why[256];
  if (tdev_kind() != TDEV_CUDA) {
    printf("SKIP: test_abort: needs BRAID_DEVICE=cuda (it is %s)\n", getenv("BRAID_DEVICE"));
    return TDEV_EXIT_SKIP;
  }
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: test_abort: %s\n", why);
    return TDEV_EXIT_SKIP;
  }
  int failed = run_case(argv, "timeout", "2") + run_case(argv, "abort", "60");
  printf("%s: %d case(s) failed\n", failed ? "FAIL" : "PASS", failed);
  return failed ? 1 : 0;
#endif
}
