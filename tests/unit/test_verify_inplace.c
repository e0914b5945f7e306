/*
 * In-place all-gather and the rank's own block (NCCL: in place, a rank's
 * input already is block `rank` of its output, so nothing need write it).
 *
 *   - The verifier: tests/data/plans/ag_inplace/ag3_inplace_no_own_block.json,
 *     a 3-rank all-gather whose ranks put their input into every peer's
 *     output and never into their own, holds in place and is refused out
 *     of place, naming the unwritten chunk of rank 0's own block.
 *   - The runtime: that plan from BRAID_PLAN_DIR runs the in-place calls
 *     (3 ranks as threads; in host mode through a staging of 4096 bytes,
 *     so a call of 1001 floats runs as three pieces). The output is checked
 *     block by block against each rank's fill, the rank's own block
 *     included: the copy out of the staging must leave that block alone,
 *     as the plan wrote nothing there. INFO (NCCL_DEBUG_FILE) must name the
 *     file once per rank and in-place call; out-of-place calls run the
 *     built-ins and are exact too.
 * Built for the CUDA simulator as well (make build/cudasim/tests/...), where
 * the kernels' copy-out takes the same rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/verify.h"
#include "tdev.h"

#define PLAN_DIR "tests/data/plans/ag_inplace"
#define PLAN_FILE PLAN_DIR "/ag3_inplace_no_own_block.json"
#define NRANKS 3
#define SYNC_TIMEOUT_S 60.0

static void test_verifier_rule(void **state) {
  (void)state;
  brd_ir_plan_t *plan = NULL;
  brd_verify_report_t rep;
  char err[512];
  brd_verify_opts_t in_place = {1, 0}, out_of_place = {0, 0};
  assert_int_equal(brd_plan_json_load(PLAN_FILE, &in_place, &plan, NULL, &rep, err,
                                      sizeof(err)),
                   ncclSuccess);
  assert_non_null(plan);
  assert_int_equal(rep.kind, BRD_VERIFY_OK);
  brd_plan_destroy(plan);
  plan = NULL;
  /* Out of place the own block is the plan's to fill: refused. */
  assert_int_equal(brd_plan_json_load(PLAN_FILE, &out_of_place, &plan, NULL, &rep, err,
                                      sizeof(err)),
                   ncclInternalError);
  assert_null(plan);
  assert_int_equal(rep.kind, BRD_VERIFY_MISSING);
  assert_int_equal(rep.rank, 0);
  if (strstr(rep.msg, "output chunk 0 of rank 0 (segment 0") == NULL)
    fail_msg("the report does not name rank 0's own block: %s", rep.msg);
}

/* The value element i of rank q's block holds: never zero, distinct per
 * rank, call and element. */
static float fill(int q, int call, size_t i) {
  return (float)(1 + q * 100000 + call * 7919 + (int)(i % 9973));
}

typedef struct {
  size_t count;
  int inplace;
} call_t;

static const call_t calls[] = {
    {1001, 1}, /* three pieces of the 4096-byte staging in host mode */
    {5, 1},    {1001, 0}, {77, 1}, {1001, 1},
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

static int rank_fn(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  ncclComm_t comm;
  cudaStream_t stream;
  int bad = 0;
  if (tdev_stream_create(&stream) != 0) {
    snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
    return 1;
  }
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    snprintf(msg, msglen, "rank %d init: %s", rank, ncclGetLastError(NULL));
    tdev_stream_destroy(stream);
    return 1;
  }
  for (size_t c = 0; c < NCALLS && !bad; c++) {
    size_t cnt = calls[c].count, total = (size_t)n * cnt, bytes = total * sizeof(float);
    float *host = malloc(bytes), *in = malloc(cnt * sizeof(float));
    char *out = tdev_alloc(bytes), *send = tdev_alloc(cnt * sizeof(float));
    if (host == NULL || in == NULL || out == NULL || send == NULL) {
      snprintf(msg, msglen, "rank %d: out of memory", rank);
      bad = 1;
      goto next;
    }
    /* Other blocks poisoned; the own block (in place) or the input holds
     * the rank's values. */
    for (size_t i = 0; i < total; i++) host[i] = -1.0f - (float)i;
    for (size_t i = 0; i < cnt; i++) in[i] = fill(rank, (int)c, i);
    if (calls[c].inplace) memcpy(host + (size_t)rank * cnt, in, cnt * sizeof(float));
    if (tdev_copy(out, host, bytes, stream, SYNC_TIMEOUT_S) != 0 ||
        tdev_copy(send, in, cnt * sizeof(float), stream, SYNC_TIMEOUT_S) != 0) {
      snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
      bad = 1;
      goto next;
    }
    const void *sb = calls[c].inplace ? out + (size_t)rank * cnt * sizeof(float) : send;
    ncclResult_t r = ncclAllGather(sb, out, cnt, ncclFloat32, comm, stream);
    if (r != ncclSuccess) {
      snprintf(msg, msglen, "rank %d call %zu: %s", rank, c, ncclGetLastError(comm));
      bad = 1;
      goto next;
    }
    if (tdev_stream_sync(stream, SYNC_TIMEOUT_S) != 0 ||
        tdev_copy(host, out, bytes, stream, SYNC_TIMEOUT_S) != 0) {
      snprintf(msg, msglen, "rank %d call %zu: %s", rank, c, tdev_last_error());
      bad = 1;
      goto next;
    }
    for (int q = 0; q < n && !bad; q++)
      for (size_t i = 0; i < cnt; i++) {
        float want = fill(q, (int)c, i), got = host[(size_t)q * cnt + i];
        if (got == want) continue;
        snprintf(msg, msglen, "rank %d call %zu (%zu floats, %s): block %d%s element %zu "
                 "is %g, want %g", rank, c, cnt, calls[c].inplace ? "in place" : "out of place",
                 q, q == rank ? " (its own)" : "", i, (double)got, (double)want);
        bad = 1;
        break;
      }
  next:
    tdev_free(send);
    tdev_free(out);
    free(in);
    free(host);
  }
  ncclCommDestroy(comm);
  tdev_stream_destroy(stream);
  return bad;
}

static char debug_file[64];

static void test_own_block_kept(void **state) {
  (void)state;
  char msg[512] = "";
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    print_message("SKIP: %s\n", why);
    skip();
  }
  if (tdev_run_threads(NRANKS, rank_fn, msg, sizeof(msg)) != 0) fail_msg("%s", msg);
  /* The library plan ran each in-place call on every rank: the INFO line
   * names it (debug_file's pattern "%p" is this process). */
  char path[96];
  snprintf(path, sizeof(path), "/tmp/braid-test-verify-inplace.%d", (int)getpid());
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[1024];
  int runs = 0, inplace_calls = 0;
  while (fgets(line, sizeof(line), f) != NULL)
    runs += strstr(line, "ag3_inplace_no_own_block.json runs") != NULL;
  fclose(f);
  unlink(path);
  for (size_t c = 0; c < NCALLS; c++) inplace_calls += calls[c].inplace;
  assert_int_equal(runs, NRANKS * inplace_calls);
}

int main(void) {
  /* Parameters are read once per process: set before any call. */
  snprintf(debug_file, sizeof(debug_file), "/tmp/braid-test-verify-inplace.%%p");
  setenv("BRAID_PLAN_DIR", PLAN_DIR, 1);
  setenv("BRAID_HOST_STAGING", "4096", 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  setenv("NCCL_DEBUG_FILE", debug_file, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_verifier_rule),
      cmocka_unit_test(test_own_block_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
