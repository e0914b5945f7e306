/*
 * Unit tests for groups (src/core/group.c) and launches (src/core/launch.c)
 * that need the library's internals: how many launches a group costs.
 *
 *   - A group of 1000 all-reduces, of 1000 sends and receives, and of
 *     both mixed is one launch per communicator (brd_launch_count), and
 *     the results are right (an independent sum computed here).
 *   - Nested groups launch only at the outermost end: nothing runs, and no
 *     launch is counted, before it.
 *   - Calls outside a group launch once each; count 0 launches nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/comm.h"
#include "core/launch.h"
#include "nccl.h"

#define NOPS 1000

static void test_thousand_allreduces_one_launch(void **state) {
  (void)state;
  const int n = 3;
  ncclComm_t comms[3];
  assert_int_equal(ncclCommInitAll(comms, n, NULL), ncclSuccess);
  int32_t(*in)[3][4] = calloc(NOPS, sizeof(*in));
  int32_t(*out)[3][4] = calloc(NOPS, sizeof(*out));
  assert_non_null(in);
  assert_non_null(out);
  for (int i = 0; i < NOPS; i++)
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 4; k++) {
        in[i][r][k] = i * 10 + r * 3 + k;
        out[i][r][k] = -1;
      }
  for (int r = 0; r < n; r++) assert_int_equal(brd_launch_count(comms[r]), 0);
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < NOPS; i++)
    for (int r = 0; r < n; r++)
      assert_int_equal(ncclAllReduce(in[i][r], out[i][r], 4, ncclInt32, ncclSum, comms[r], NULL),
                       ncclSuccess);
  /* Queued, not run. */
  for (int r = 0; r < n; r++) assert_int_equal(brd_launch_count(comms[r]), 0);
  assert_int_equal(out[NOPS - 1][0][0], -1);
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) assert_int_equal(brd_launch_count(comms[r]), 1);
  for (int i = 0; i < NOPS; i++)
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 4; k++) {
        int32_t want = 0;
        for (int q = 0; q < n; q++) want += i * 10 + q * 3 + k;
        assert_int_equal(out[i][r][k], want);
      }
  free(in);
  free(out);
  for (int r = 0; r < n; r++) assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

static void test_thousand_sends_one_launch(void **state) {
  (void)state;
  const int n = 2;
  ncclComm_t comms[2];
  assert_int_equal(ncclCommInitAll(comms, n, NULL), ncclSuccess);
  /* Rank r sends NOPS/2 small messages to the other and receives as many:
   * 1000 calls per communicator. */
  const int per = NOPS / 2;
  int32_t(*sbuf)[2][3] = calloc((size_t)per, sizeof(*sbuf));
  int32_t(*rbuf)[2][3] = calloc((size_t)per, sizeof(*rbuf));
  assert_non_null(sbuf);
  assert_non_null(rbuf);
  for (int i = 0; i < per; i++)
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 3; k++) {
        sbuf[i][r][k] = 1000000 * r + 100 * i + k;
        rbuf[i][r][k] = -1;
      }
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < per; i++) {
      assert_int_equal(ncclSend(sbuf[i][r], 3, ncclInt32, 1 - r, comms[r], NULL), ncclSuccess);
      assert_int_equal(ncclRecv(rbuf[i][r], 3, ncclInt32, 1 - r, comms[r], NULL), ncclSuccess);
    }
  }
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) assert_int_equal(brd_launch_count(comms[r]), 1);
  /* The i-th receive matched the peer's i-th send. */
  for (int i = 0; i < per; i++)
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 3; k++)
        assert_int_equal(rbuf[i][r][k], 1000000 * (1 - r) + 100 * i + k);
  free(sbuf);
  free(rbuf);
  for (int r = 0; r < n; r++) assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* Collectives and point-to-point in one group: still one launch. */
static void test_mixed_one_launch(void **state) {
  (void)state;
  const int n = 2;
  ncclComm_t comms[2];
  assert_int_equal(ncclCommInitAll(comms, n, NULL), ncclSuccess);
  float x[2][8], y[2][8], g[2][16];
  int32_t s[2] = {11, 22}, t[2] = {0, 0};
  for (int r = 0; r < n; r++)
    for (int k = 0; k < 8; k++) x[r][k] = (float)(r * 8 + k);
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < 300; i++) {
      assert_int_equal(ncclAllReduce(x[r], y[r], 8, ncclFloat32, ncclMax, comms[r], NULL),
                       ncclSuccess);
      assert_int_equal(ncclAllGather(x[r], g[r], 8, ncclFloat32, comms[r], NULL), ncclSuccess);
    }
    assert_int_equal(ncclSend(&s[r], 1, ncclInt32, 1 - r, comms[r], NULL), ncclSuccess);
    assert_int_equal(ncclRecv(&t[r], 1, ncclInt32, 1 - r, comms[r], NULL), ncclSuccess);
  }
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    assert_int_equal(brd_launch_count(comms[r]), 1);
    for (int k = 0; k < 8; k++) assert_true(y[r][k] == (float)(8 + k));
    for (int k = 0; k < 16; k++) assert_true(g[r][k] == (float)k);
    assert_int_equal(t[r], s[1 - r]);
  }
  for (int r = 0; r < n; r++) assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* Nested groups run at the outermost end only; calls outside a group run
 * one launch each; count 0 runs nothing. */
static void test_nesting_and_single_calls(void **state) {
  (void)state;
  ncclComm_t comm;
  assert_int_equal(ncclCommInitAll(&comm, 1, NULL), ncclSuccess);
  int32_t a = 5, b = -1;
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  assert_int_equal(ncclAllReduce(&a, &b, 1, ncclInt32, ncclSum, comm, NULL), ncclSuccess);
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  assert_int_equal(b, -1);
  assert_int_equal(brd_launch_count(comm), 0);
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  assert_int_equal(b, 5);
  assert_int_equal(brd_launch_count(comm), 1);
  for (int i = 0; i < 3; i++)
    assert_int_equal(ncclBroadcast(&a, &b, 1, ncclInt32, 0, comm, NULL), ncclSuccess);
  assert_int_equal(brd_launch_count(comm), 4);
  assert_int_equal(ncclAllGather(NULL, NULL, 0, ncclInt32, comm, NULL), ncclSuccess);
  assert_int_equal(brd_launch_count(comm), 4);
  assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

int main(void) {
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "60", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_thousand_allreduces_one_launch),
      cmocka_unit_test(test_thousand_sends_one_launch),
      cmocka_unit_test(test_mixed_one_launch),
      cmocka_unit_test(test_nesting_and_single_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
