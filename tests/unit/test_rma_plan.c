/*
 * The one-sided protocol as a plan (src/algos/rma.c), checked by the
 * verifier as the point-to-point transfer it implements:
 *   - every pair of ranks of 2..5, with and without data: the writer's
 *     input reaches the reader's output, and the reader's wait is ordered
 *     after it (the verifier's RACE and MISSING checks would fail
 *     otherwise);
 *   - the signal moved before the put: refused (the reader could see the
 *     count before the data);
 *   - the same plan without BRD_IR_PLAN_F_ONE_SIDED: refused as a launch
 *     order fault, which is what the flag waives (windows outlive
 *     launches);
 *   - a rank as its own peer, or out of range: refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/algos.h"
#include "plan/plan.h"
#include "plan/verify.h"

static const uint32_t one = 1;

/* The pairing a put from src to dst implements (tables of n). */
static void pairing(int n, int src, int dst, int data, brd_verify_p2p_t *p2p,
                    brd_verify_p2p_seg_t *seg) {
  memset(p2p, 0, (size_t)n * sizeof(*p2p));
  if (!data) return;
  seg->src_rank = src;
  seg->src_seg = 0;
  seg->nchunks = 1;
  p2p[src].nin = 1;
  p2p[src].in_chunks = &one;
  p2p[dst].nout = 1;
  p2p[dst].out = seg;
}

static void test_pairs_verify(void **state) {
  (void)state;
  brd_verify_p2p_t p2p[5];
  brd_verify_p2p_seg_t seg;
  for (int n = 2; n <= 5; n++)
    for (int src = 0; src < n; src++)
      for (int dst = 0; dst < n; dst++) {
        if (src == dst) continue;
        for (int data = 0; data <= 1; data++) {
          brd_ir_plan_t *plan = NULL;
          brd_verify_report_t rep;
          assert_int_equal(brd_algos_rma(n, src, dst, data, &plan), ncclSuccess);
          assert_true(plan->flags & BRD_IR_PLAN_F_ONE_SIDED);
          assert_int_equal(brd_ir_plan_block(plan, src, 0)->nops, (uint32_t)(data ? 2 : 1));
          assert_int_equal(brd_ir_plan_block(plan, dst, 0)->nops, 1u);
          pairing(n, src, dst, data, p2p, &seg);
          if (brd_plan_verify_p2p(plan, p2p, &rep) != ncclSuccess)
            fail_msg("%d ranks %d -> %d data %d: %s", n, src, dst, data, rep.msg);
          brd_plan_destroy(plan);
        }
      }
}

/* The writer's ops, editable in place. */
static brd_ir_op_t *writer_ops(brd_ir_plan_t *plan, int src) {
  return (brd_ir_op_t *)brd_ir_plan_ops(plan, src, 0);
}

static void test_signal_before_put_refused(void **state) {
  (void)state;
  brd_ir_plan_t *plan = NULL;
  brd_verify_p2p_t p2p[3];
  brd_verify_p2p_seg_t seg;
  brd_verify_report_t rep;
  assert_int_equal(brd_algos_rma(3, 2, 0, 1, &plan), ncclSuccess);
  brd_ir_op_t *ops = writer_ops(plan, 2);
  assert_int_equal(ops[0].code, BRD_IR_OP_PUT);
  assert_int_equal(ops[1].code, BRD_IR_OP_SIGNAL);
  brd_ir_op_t t = ops[0];
  ops[0] = ops[1];
  ops[1] = t;
  pairing(3, 2, 0, 1, p2p, &seg);
  assert_int_equal(brd_plan_verify_p2p(plan, p2p, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_RACE);
  assert_int_equal(rep.rank, 2);
  brd_plan_destroy(plan);
}

static void test_flag_needed(void **state) {
  (void)state;
  brd_ir_plan_t *plan = NULL;
  brd_verify_p2p_t p2p[2];
  brd_verify_p2p_seg_t seg;
  brd_verify_report_t rep;
  assert_int_equal(brd_algos_rma(2, 0, 1, 1, &plan), ncclSuccess);
  plan->flags &= (uint8_t)~BRD_IR_PLAN_F_ONE_SIDED;
  pairing(2, 0, 1, 1, p2p, &seg);
  assert_int_equal(brd_plan_verify_p2p(plan, p2p, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_LAUNCH_ORDER);
  brd_plan_destroy(plan);
}

static void test_bad_ranks(void **state) {
  (void)state;
  brd_ir_plan_t *plan = NULL;
  assert_int_equal(brd_algos_rma(4, 1, 1, 1, &plan), ncclInvalidArgument);
  assert_int_equal(brd_algos_rma(4, 0, 4, 0, &plan), ncclInvalidArgument);
  assert_int_equal(brd_algos_rma(1, 0, 0, 0, &plan), ncclInvalidArgument);
  assert_null(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pairs_verify),
      cmocka_unit_test(test_signal_before_put_refused),
      cmocka_unit_test(test_flag_needed),
      cmocka_unit_test(test_bad_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
