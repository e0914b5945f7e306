/*
 * Unit tests for the plan verifier (src/plan/verify.c).
 *
 *   - Every generated all-reduce plan verifies, for nranks 1..16, several
 *     block counts, both protocols, in and out of place, with a rank order
 *     that is not the identity, over three loop iterations.
 *   - Hand-made plans, one per fault kind, each asserting the specific
 *     report (kind, rank, block, op, peer). They start from a correct
 *     two-rank exchange, which must verify, and break one thing.
 *   - Removing any single data op from a generated plan is always caught.
 *   - Switch channels: a three-rank switch all-reduce and its faults (a
 *     contribution written without the barrier, a missing one, slot reuse
 *     without the closing barrier, an MC_RED not ordered before a read),
 *     and every structural refusal, each naming rank, block and op.
 *   - Allocation failures inside the verifier unwind without leaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/algos.h"
#include "plan/plan.h"
#include "plan/verify.h"

#include "failalloc.h"

/* ---- helpers -------------------------------------------------------------- */

#define REF(buf, peer, idx) brd_plan_ref((buf), (peer), (idx))
#define IN(c) REF(BRD_IR_BUF_INPUT, -1, (c))
#define OUT(peer, c) REF(BRD_IR_BUF_OUTPUT, (peer), (c))
#define SCR(peer, s) REF(BRD_IR_BUF_SCRATCH, (peer), (s))
#define SCRLL(peer, s) REF(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, (peer), (s))

static brd_plan_builder_t *mk(int nranks, int nchunks, int nslots, int nsems,
                              int S, int proto) {
  brd_plan_shape_t shape = {
      .nranks = nranks, .nblocks = 1, .nchunks = (uint32_t)nchunks,
      .nslots = (uint32_t)nslots, .slot_div = 1, .nsems = (uint32_t)nsems,
      .seq_per_iter = (uint32_t)S, .proto = (uint8_t)proto,
      .algo = BRD_IR_ALGO_COPY, .coll = BRD_IR_COLL_ALLREDUCE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  return b;
}

static void mv(brd_plan_builder_t *b, int rank, uint8_t code, uint8_t flags,
               uint32_t chunk, int32_t k, int32_t k_src, int nsrc,
               const brd_plan_ref_t *src, int ndst, const brd_plan_ref_t *dst) {
  assert_int_equal(brd_algos_move(b, rank, 0, code, flags, chunk, k, k_src, nsrc,
                                  src, ndst, dst),
                   ncclSuccess);
}

static void sync_op(brd_plan_builder_t *b, int rank, uint8_t code, int peer,
                    uint32_t sem, int32_t k) {
  assert_int_equal(brd_plan_op_sync(b, rank, 0, code, peer, sem, k), ncclSuccess);
}

/* Finishes the plan, verifies it over niter iterations and checks the
 * report. kind OK expects success; -2 in rank/block/op/peer: any. */
static void expect_n(brd_plan_builder_t *b, int in_place, int niter,
                     brd_verify_kind_t kind, int rank, int block, int op, int peer) {
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  brd_verify_opts_t opts = {in_place, niter};
  brd_verify_report_t rep;
  ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
  if (rep.kind != kind || (rank != -2 && rep.rank != rank) ||
      (block != -2 && rep.block != block) || (op != -2 && rep.op != op) ||
      (peer != -2 && rep.peer != peer))
    print_error("expected %s at rank %d block %d op %d peer %d, got %s at rank "
                "%d block %d op %d peer %d: %s\n", brd_plan_verify_kind_name(kind),
                rank, block, op, peer, brd_plan_verify_kind_name(rep.kind), rep.rank,
                rep.block, rep.op, rep.peer, rep.msg);
  assert_int_equal(rep.kind, kind);
  assert_int_equal(res, kind == BRD_VERIFY_OK ? ncclSuccess : ncclInternalError);
  if (rank != -2) assert_int_equal(rep.rank, rank);
  if (block != -2) assert_int_equal(rep.block, block);
  if (op != -2) assert_int_equal(rep.op, op);
  if (peer != -2) assert_int_equal(rep.peer, peer);
  if (kind != BRD_VERIFY_OK) assert_non_null(strstr(rep.msg, brd_plan_verify_kind_name(kind)));
  brd_plan_destroy(plan);
}

/* Plans with credits for their slots are checked over three iterations. */
static void expect(brd_plan_builder_t *b, int in_place, brd_verify_kind_t kind,
                   int rank, int block, int op, int peer) {
  expect_n(b, in_place, 3, kind, rank, block, op, peer);
}

/* Variations of a two-rank exchange: each rank puts its chunk into the
 * other's scratch slot 0, signals, waits for the other's data, reduces,
 * and returns a credit for the slot (waited on one iteration later). */
enum {
  EX_OK, EX_NO_PEER_READ, EX_DOUBLE_INPUT, EX_NO_POSTOP, EX_UNWRITTEN_SLOT,
  EX_R1_NO_WAIT, EX_NO_CREDIT, EX_WAIT_FIRST, EX_OUTPUT_FIRST,
};

static brd_plan_builder_t *exchange(int variant) {
  brd_plan_builder_t *b = mk(2, 1, 2, 2, 1, BRD_IR_PROTO_SIMPLE);
  for (int r = 0; r < 2; r++) {
    int q = 1 - r;
    if (variant == EX_WAIT_FIRST) sync_op(b, r, BRD_IR_OP_WAIT, q, 0, 1);
    if (variant != EX_NO_CREDIT) sync_op(b, r, BRD_IR_OP_WAIT, q, 1, 0);
    mv(b, r, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
       (brd_plan_ref_t[]){SCR(q, 0)});
    sync_op(b, r, BRD_IR_OP_SIGNAL, q, 0, 1);
    if (variant != EX_WAIT_FIRST && !(variant == EX_R1_NO_WAIT && r == 1))
      sync_op(b, r, BRD_IR_OP_WAIT, q, 0, 1);
    uint8_t flags = variant == EX_NO_POSTOP ? 0 : BRD_IR_F_POSTOP;
    if (variant == EX_OUTPUT_FIRST) /* stage the peer's data in the output */
      mv(b, r, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){SCR(-1, 0)}, 1,
         (brd_plan_ref_t[]){OUT(-1, 0)});
    if (variant == EX_NO_PEER_READ)
      mv(b, r, BRD_IR_OP_COPY, flags, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
         (brd_plan_ref_t[]){OUT(-1, 0)});
    else if (variant == EX_DOUBLE_INPUT)
      mv(b, r, BRD_IR_OP_REDUCE, flags, 0, 0, 0, 3,
         (brd_plan_ref_t[]){IN(0), SCR(-1, 0), IN(0)}, 1, (brd_plan_ref_t[]){OUT(-1, 0)});
    else
      mv(b, r, BRD_IR_OP_REDUCE, flags, 0, 0, 0, 2,
         (brd_plan_ref_t[]){IN(0), SCR(-1, variant == EX_UNWRITTEN_SLOT ? 1 : 0)}, 1,
         (brd_plan_ref_t[]){OUT(-1, 0)});
    if (variant != EX_NO_CREDIT) sync_op(b, r, BRD_IR_OP_SIGNAL, q, 1, 1);
  }
  return b;
}

/* ---- generated plans ------------------------------------------------------ */

typedef ncclResult_t (*gen_fn)(const brd_algos_args_t *, brd_ir_plan_t **);
static const gen_fn gens[4] = {brd_algos_ring_allreduce, brd_algos_tree_allreduce,
                               brd_algos_oneshot_allreduce,
                               brd_algos_twoshot_allreduce};
static const char *gen_names[4] = {"ring", "tree", "one-shot", "two-shot"};

static void verify_generated(int algo, int proto, int n, int nblocks, int in_place,
                             const int *order) {
  brd_algos_args_t args = {n, order, nblocks, proto};
  brd_ir_plan_t *plan;
  assert_int_equal(gens[algo](&args, &plan), ncclSuccess);
  brd_verify_opts_t opts = {in_place, 3};
  brd_verify_report_t rep;
  ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
  if (res != ncclSuccess)
    print_error("%s %s n=%d blocks=%d %s: %s\n", gen_names[algo],
                proto ? "LL" : "Simple", n, nblocks, in_place ? "in place" : "out of place",
                rep.msg);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_OK);
  brd_plan_destroy(plan);
}

static void test_generated_plans_verify(void **state) {
  (void)state;
  uint64_t x = 12345;
  for (int n = 1; n <= 16; n++) {
    /* A shuffled rank order (Fisher-Yates with a fixed xorshift). */
    int order[16];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      int j = (int)(x % (uint64_t)(i + 1));
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    for (int algo = 0; algo < 4; algo++)
      for (int proto = 0; proto < 2; proto++)
        for (int nb = 1; nb <= 4; nb++)
          for (int ip = 0; ip < 2; ip++)
            verify_generated(algo, proto, n, nb, ip, (n + nb) % 2 ? order : NULL);
  }
  for (int algo = 0; algo < 4; algo++)
    for (int proto = 0; proto < 2; proto++) {
      verify_generated(algo, proto, 16, 8, 1, NULL);
      verify_generated(algo, proto, 7, 8, 0, NULL);
    }
}

/* Port channels (ranks that share no memory): every generated plan that
 * only writes through channels verifies with its cross-host channels
 * marked as ports; a plan that reads through one (zero-copy, reading
 * peers' inputs) is refused; both ends of a pair must agree. */
static void test_port_channels(void **state) {
  (void)state;
  for (int n = 2; n <= 6; n++) {
    /* Two "hosts": ranks below n / 2 and the rest. */
    uint8_t port[36];
    for (int q = 0; q < n; q++)
      for (int r = 0; r < n; r++) port[q * n + r] = (uint8_t)((q < n / 2) != (r < n / 2));
    for (int algo = 0; algo < 4; algo++)
      for (int proto = 0; proto < 2; proto++) {
        brd_algos_args_t args = {n, NULL, 2, proto};
        brd_ir_plan_t *plan;
        assert_int_equal(gens[algo](&args, &plan), ncclSuccess);
        int marked = brd_plan_chans_mark(plan, port);
        /* Count the cross pairs' channels independently. */
        int want = 0;
        for (int r = 0; r < n; r++)
          for (uint32_t c = 0; c < brd_ir_plan_rank(plan, r)->nchans; c++) {
            const brd_ir_chan_t *ch = brd_ir_plan_chan(plan, r, (int)c);
            int cross = (r < n / 2) != (ch->peer < n / 2);
            want += cross;
            assert_int_equal(ch->type, cross ? BRD_IR_CHAN_PORT : BRD_IR_CHAN_MEMORY);
          }
        assert_int_equal(marked, want);
        assert_true(want > 0);
        for (int ip = 0; ip < 2; ip++) {
          brd_verify_opts_t opts = {ip, 3};
          brd_verify_report_t rep;
          if (brd_plan_verify(plan, &opts, &rep) != ncclSuccess)
            fail_msg("%s %s n=%d with ports: %s", gen_names[algo], proto ? "LL" : "Simple",
                     n, rep.msg);
        }
        brd_plan_destroy(plan);
      }
  }
  /* A read through a port: a zero-copy plan reads peers' inputs. */
  brd_algos_args_t zargs = {4, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *zc;
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_ALLREDUCE,
                                      BRD_IR_ALGO_TWOSHOT | BRD_ALGOS_ZEROCOPY, &zargs, 0, 0,
                                      &zc),
                   ncclSuccess);
  assert_true(brd_plan_reads_peers(zc));
  uint8_t all[16];
  for (int i = 0; i < 16; i++) all[i] = (uint8_t)(i / 4 != i % 4);
  brd_plan_chans_mark(zc, all);
  brd_verify_opts_t opts = {0, 2};
  brd_verify_report_t rep;
  assert_int_not_equal(brd_plan_verify(zc, &opts, &rep), ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_MALFORMED);
  assert_non_null(strstr(rep.msg, "port channel"));
  brd_plan_destroy(zc);
  /* One end a port, the other memory. */
  brd_algos_args_t args = {3, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *ring;
  assert_int_equal(brd_algos_ring_allreduce(&args, &ring), ncclSuccess);
  uint8_t lop[9] = {0, 1, 0, 0, 0, 0, 0, 0, 0}; /* 0 -> 1 a port, 1 -> 0 not */
  assert_int_equal(brd_plan_chans_mark(ring, lop), 1);
  assert_int_not_equal(brd_plan_verify(ring, &opts, &rep), ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_MALFORMED);
  assert_non_null(strstr(rep.msg, "reaches it back"));
  brd_plan_destroy(ring);
}

/* Removing any data op breaks the result, and the verifier says so. */
static void test_dropped_data_op_caught(void **state) {
  (void)state;
  long tried = 0;
  for (int algo = 0; algo < 4; algo++) {
    for (int proto = 0; proto < 2; proto++) {
      for (int n = 1; n <= 5; n++) {
        for (int nb = 1; nb <= 2; nb++) {
          brd_algos_args_t args = {n, NULL, nb, proto};
          brd_ir_plan_t *plan;
          assert_int_equal(gens[algo](&args, &plan), ncclSuccess);
          brd_ir_op_t *ops = (brd_ir_op_t *)((char *)plan + plan->op_off);
          for (uint32_t i = 0; i < plan->nops; i++) {
            if (ops[i].code == BRD_IR_OP_WAIT || ops[i].code == BRD_IR_OP_SIGNAL) continue;
            brd_ir_op_t saved = ops[i];
            memset(&ops[i], 0, sizeof(ops[i])); /* NOP */
            for (int ip = 0; ip < 2; ip++) {
              brd_verify_opts_t opts = {ip, 2};
              brd_verify_report_t rep;
              if (brd_plan_verify(plan, &opts, &rep) == ncclSuccess) {
                print_error("%s %s n=%d blocks=%d: dropping op %u went unnoticed\n",
                            gen_names[algo], proto ? "LL" : "Simple", n, nb, i);
                fail();
              }
              tried++;
            }
            ops[i] = saved;
          }
          brd_plan_destroy(plan);
        }
      }
    }
  }
  assert_true(tried > 1000);
}

/* ---- hand-made faults ----------------------------------------------------- */

static void test_exchange_is_correct(void **state) {
  (void)state;
  expect(exchange(EX_OK), 0, BRD_VERIFY_OK, -1, -1, -1, -1);
  expect(exchange(EX_OK), 1, BRD_VERIFY_OK, -1, -1, -1, -1);
}

static void test_missing_contribution(void **state) {
  (void)state;
  /* Rank 0 copies only its own input: rank 1's contribution is missing
   * from rank 0's output, written by op 4. */
  expect(exchange(EX_NO_PEER_READ), 0, BRD_VERIFY_MISSING, 0, 0, 4, 1);
}

static void test_duplicate_contribution(void **state) {
  (void)state;
  expect(exchange(EX_DOUBLE_INPUT), 0, BRD_VERIFY_DUPLICATE, 0, 0, 4, 0);
}

static void test_missing_postop(void **state) {
  (void)state;
  expect(exchange(EX_NO_POSTOP), 0, BRD_VERIFY_POSTOP, 0, 0, 4, -1);
}

static void test_unwritten_scratch(void **state) {
  (void)state;
  /* Both ranks read their slot 1; rank 0 is still waiting for rank 1's
   * signal when rank 1 gets there. */
  expect(exchange(EX_UNWRITTEN_SLOT), 0, BRD_VERIFY_UNWRITTEN, 1, 0, 4, 1);
}

static void test_unsynchronised_read(void **state) {
  (void)state;
  /* Rank 1 reduces without waiting for rank 0's data (op 3 once the wait
   * is gone). */
  expect(exchange(EX_R1_NO_WAIT), 0, BRD_VERIFY_RACE, 1, 0, 3, 0);
}

static void test_slot_reuse_without_credit(void **state) {
  (void)state;
  /* Without credits, rank 0 refills rank 1's slot in iteration 1 while
   * rank 1 may still read iteration 0's data. */
  brd_plan_builder_t *b = exchange(EX_NO_CREDIT);
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  brd_verify_opts_t one = {0, 1};
  brd_verify_report_t rep;
  /* One iteration alone is fine; the second one exposes the reuse. */
  assert_int_equal(brd_plan_verify(plan, &one, &rep), ncclSuccess);
  brd_verify_opts_t two = {0, 2};
  assert_int_equal(brd_plan_verify(plan, &two, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_REUSE);
  brd_plan_destroy(plan);
}

static void test_reuse_plain(void **state) {
  (void)state;
  /* Rank 0 puts chunk 0 and then chunk 1 into the same slot of rank 1; rank
   * 1 waits for the first signal only, so it can read the second chunk's
   * data: its op 1 reads data rank 0 overwrote. */
  brd_plan_builder_t *b = mk(2, 2, 1, 1, 2, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){SCR(1, 0)});
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 0, 1);
  mv(b, 0, BRD_IR_OP_PUT, 0, 1, 0, 0, 1, (brd_plan_ref_t[]){IN(1)}, 1,
     (brd_plan_ref_t[]){SCR(1, 0)});
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 0, 2);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 0, 1);
  mv(b, 1, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 0, 0, 0, 2,
     (brd_plan_ref_t[]){IN(0), SCR(-1, 0)}, 1, (brd_plan_ref_t[]){OUT(-1, 0)});
  expect_n(b, 0, 1, BRD_VERIFY_REUSE, 1, 0, 1, 0);
}

static void test_reuse_packets(void **state) {
  (void)state;
  /* The same with LL packets: the second packet write replaces the first
   * before rank 1 read it, so rank 1 would wait forever. */
  brd_plan_builder_t *b = mk(2, 2, 1, 0, 2, BRD_IR_PROTO_LL);
  mv(b, 0, BRD_IR_OP_PKT_PUT, 0, 0, 1, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){SCRLL(1, 0)});
  mv(b, 0, BRD_IR_OP_PKT_PUT, 0, 1, 2, 0, 1, (brd_plan_ref_t[]){IN(1)}, 1,
     (brd_plan_ref_t[]){SCRLL(1, 0)});
  mv(b, 1, BRD_IR_OP_PKT_REDUCE, BRD_IR_F_POSTOP, 0, 0, 1, 2,
     (brd_plan_ref_t[]){IN(0), SCRLL(-1, 0)}, 1, (brd_plan_ref_t[]){OUT(-1, 0)});
  expect_n(b, 0, 1, BRD_VERIFY_REUSE, 1, 0, 0, 0);
}

static void test_deadlock(void **state) {
  (void)state;
  /* Both ranks wait for the other's data before sending their own. */
  expect(exchange(EX_WAIT_FIRST), 0, BRD_VERIFY_DEADLOCK, 0, 0, 0, 1);
}

static void test_deadlock_packets_and_barrier(void **state) {
  (void)state;
  /* A packet read nothing writes. */
  brd_plan_builder_t *b = mk(1, 1, 1, 0, 1, BRD_IR_PROTO_LL);
  mv(b, 0, BRD_IR_OP_PKT_REDUCE, BRD_IR_F_POSTOP, 0, 0, 1, 2,
     (brd_plan_ref_t[]){IN(0), SCRLL(-1, 0)}, 1, (brd_plan_ref_t[]){OUT(-1, 0)});
  expect(b, 0, BRD_VERIFY_DEADLOCK, 0, 0, 0, -1);
  /* A barrier only one of two blocks reaches. */
  brd_plan_shape_t shape = {.nranks = 1, .nblocks = 2, .nchunks = 2, .slot_div = 1,
                            .seq_per_iter = 1, .coll = BRD_IR_COLL_ALLREDUCE};
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  for (int blk = 0; blk < 2; blk++) {
    if (blk == 1) assert_int_equal(brd_plan_op_barrier(b, 0, blk), ncclSuccess);
    assert_int_equal(brd_algos_move(b, 0, blk, BRD_IR_OP_COPY, BRD_IR_F_POSTOP,
                                    (uint32_t)blk, 0, 0, 1,
                                    (brd_plan_ref_t[]){IN((uint32_t)blk)}, 1,
                                    (brd_plan_ref_t[]){OUT(-1, (uint32_t)blk)}),
                     ncclSuccess);
  }
  expect(b, 0, BRD_VERIFY_DEADLOCK, 0, 1, 0, -1);
}

static void test_mismatched_chunk(void **state) {
  (void)state;
  /* Rank 1 adds rank 0's chunk 0 to its own chunk 1. */
  brd_plan_builder_t *b = mk(2, 2, 1, 1, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){SCR(1, 0)});
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 0, 1);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 0, 1);
  mv(b, 1, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 1, 0, 0, 2,
     (brd_plan_ref_t[]){IN(1), SCR(-1, 0)}, 1, (brd_plan_ref_t[]){OUT(-1, 1)});
  expect_n(b, 0, 1, BRD_VERIFY_MISMATCH, 1, 0, 1, 0);
}

static void test_peer_output_before_join(void **state) {
  (void)state;
  /* Rank 0 writes rank 1's output as its first op. */
  brd_plan_builder_t *b = mk(2, 1, 0, 1, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){OUT(1, 0)});
  expect_n(b, 0, 1, BRD_VERIFY_LAUNCH_ORDER, 0, 0, 0, 1);
}

static void test_output_after_rank_end(void **state) {
  (void)state;
  /* Rank 1 computes the result and writes both outputs, but rank 0 never
   * waits for it: rank 0 could finish with its output still unwritten. */
  brd_plan_builder_t *b = mk(2, 1, 1, 1, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){SCR(1, 0)});
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 0, 1);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 0, 1);
  mv(b, 1, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 0, 0, 0, 2,
     (brd_plan_ref_t[]){IN(0), SCR(-1, 0)}, 2,
     (brd_plan_ref_t[]){OUT(-1, 0), OUT(0, 0)});
  expect_n(b, 0, 1, BRD_VERIFY_RACE, 1, 0, 1, 0);
}

/* ---- plans reading peers' inputs (registered buffers) --------------------- */

enum { PI_OK, PI_NO_JOIN, PI_NO_DONE, PI_NO_FLAG };

/* Two ranks: join, reduce the own input with the peer's input read in
 * place, then tell the peer its input is no longer needed and wait for the
 * same from it. */
static brd_plan_builder_t *peer_input_plan(int variant) {
  brd_plan_shape_t shape = {
      .nranks = 2, .nblocks = 1, .nchunks = 1, .nslots = 0, .slot_div = 1, .nsems = 2,
      .seq_per_iter = 1, .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_COPY,
      .coll = BRD_IR_COLL_ALLREDUCE,
      .flags = variant == PI_NO_FLAG ? 0 : BRD_IR_PLAN_F_PEER_INPUT};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    int q = 1 - r;
    sync_op(b, r, BRD_IR_OP_SIGNAL, q, 0, 1);
    if (variant != PI_NO_JOIN) sync_op(b, r, BRD_IR_OP_WAIT, q, 0, 1);
    mv(b, r, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 0, 0, 0, 2,
       (brd_plan_ref_t[]){IN(0), REF(BRD_IR_BUF_INPUT, q, 0)}, 1,
       (brd_plan_ref_t[]){OUT(-1, 0)});
    sync_op(b, r, BRD_IR_OP_SIGNAL, q, 1, 1);
    if (variant != PI_NO_DONE) sync_op(b, r, BRD_IR_OP_WAIT, q, 1, 1);
  }
  return b;
}

static void test_peer_input(void **state) {
  (void)state;
  expect(peer_input_plan(PI_OK), 0, BRD_VERIFY_OK, -1, -1, -1, -1);
  /* In place each rank overwrites the input its peer is still reading. */
  brd_plan_builder_t *b = peer_input_plan(PI_OK);
  brd_ir_plan_t *plan;
  brd_verify_report_t rep;
  brd_verify_opts_t in_place = {1, 2};
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  assert_int_equal(brd_plan_verify(plan, &in_place, &rep), ncclInternalError);
  assert_true(rep.kind == BRD_VERIFY_REUSE || rep.kind == BRD_VERIFY_RACE);
  brd_plan_destroy(plan);
  /* Reading the peer's input before it joined the launch. */
  expect(peer_input_plan(PI_NO_JOIN), 0, BRD_VERIFY_LAUNCH_ORDER, -2, 0, 1, -2);
  /* Finishing while the peer may still read this rank's input. */
  expect(peer_input_plan(PI_NO_DONE), 0, BRD_VERIFY_RACE, -2, 0, -2, -2);
  /* A peer's input in a plan not flagged for it. */
  expect(peer_input_plan(PI_NO_FLAG), 0, BRD_VERIFY_MALFORMED, 0, 0, 2, -1);

  /* The zero-copy generators, in place and out of place. */
  typedef ncclResult_t (*zc_fn)(const brd_algos_args_t *, brd_ir_plan_t **);
  static const zc_fn zcs[3] = {brd_algos_zerocopy_allreduce,
                               brd_algos_zerocopy_reducescatter,
                               brd_algos_zerocopy_allgather};
  static const char *zc_names[3] = {"all-reduce", "reduce-scatter", "all-gather"};
  static const int ns[] = {2, 3, 5, 8, 12, 17};
  for (int g = 0; g < 3; g++) {
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
      for (int nb = 1; nb <= 3; nb++) {
        brd_algos_args_t args = {.nranks = ns[i], .nblocks = nb,
                                 .proto = BRD_IR_PROTO_SIMPLE};
        assert_int_equal(zcs[g](&args, &plan), ncclSuccess);
        assert_true(plan->flags & BRD_IR_PLAN_F_PEER_INPUT);
        assert_int_equal(plan->nslots, 0);
        for (int ip = 0; ip < 2; ip++) {
          brd_verify_opts_t opts = {ip, 2};
          ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
          if (res != ncclSuccess)
            print_error("zero-copy %s n=%d nb=%d %s: %s\n", zc_names[g], ns[i], nb,
                        ip ? "in place" : "out of place", rep.msg);
          assert_int_equal(res, ncclSuccess);
        }
        brd_plan_destroy(plan);
      }
    }
    brd_algos_args_t ll = {.nranks = 4, .nblocks = 1, .proto = BRD_IR_PROTO_LL};
    assert_int_equal(zcs[g](&ll, &plan), ncclInvalidArgument);
  }
}

static void test_in_place_hazard(void **state) {
  (void)state;
  /* Staging the peer's data in the output before reading the input is
   * harmless out of place, but in place it overwrites the input: rank 0's
   * own contribution is lost. */
  expect(exchange(EX_OUTPUT_FIRST), 0, BRD_VERIFY_OK, -1, -1, -1, -1);
  expect(exchange(EX_OUTPUT_FIRST), 1, BRD_VERIFY_MISSING, 0, 0, 5, 0);
}

static void test_malformed(void **state) {
  (void)state;
  /* A scratch slot beyond the plan's. */
  brd_plan_builder_t *b = mk(1, 1, 1, 0, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){SCR(-1, 1)});
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 0, 0, -1);
  /* A wait target beyond one iteration's sequence numbers. */
  b = exchange(EX_OK);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 0, 2);
  expect(b, 0, BRD_VERIFY_MALFORMED, 1, 0, 6, 0);
  /* Signals that do not increase. */
  b = exchange(EX_OK);
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 1, 1);
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 0, 6, 1);
  /* The input as a destination. */
  b = mk(1, 1, 1, 0, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){SCR(-1, 0)}, 1,
     (brd_plan_ref_t[]){IN(0)});
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 0, 0, -1);
  /* PUT to a local buffer. */
  b = mk(1, 1, 1, 0, 1, BRD_IR_PROTO_SIMPLE);
  mv(b, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
     (brd_plan_ref_t[]){OUT(-1, 0)});
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 0, 0, -1);
  /* Packets read from a peer's scratch. */
  b = mk(2, 1, 1, 0, 1, BRD_IR_PROTO_LL);
  mv(b, 0, BRD_IR_OP_PKT_REDUCE, 0, 0, 1, 1, 1, (brd_plan_ref_t[]){SCRLL(1, 0)}, 1,
     (brd_plan_ref_t[]){OUT(-1, 0)});
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 0, 0, -1);
  /* Two blocks signalling the same semaphore. */
  brd_plan_shape_t shape = {.nranks = 2, .nblocks = 2, .nchunks = 2, .slot_div = 1,
                            .nsems = 1, .seq_per_iter = 2,
                            .coll = BRD_IR_COLL_ALLREDUCE};
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 0, 0, BRD_IR_OP_SIGNAL, 1, 0, 1), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 1, 0, BRD_IR_OP_SIGNAL, 0, 0, 1), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 0, 1, BRD_IR_OP_SIGNAL, 1, 0, 2), ncclSuccess);
  expect(b, 0, BRD_VERIFY_MALFORMED, 0, 1, 0, 1);
  /* A blob that is not a plan. */
  brd_ir_plan_t junk;
  memset(&junk, 0, sizeof(junk));
  brd_verify_report_t rep;
  assert_int_equal(brd_plan_verify(&junk, NULL, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_MALFORMED);
}


/* ---- switch channels ---------------------------------------------------------- */

#define SW(s) REF(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, (s))

static void swbar(brd_plan_builder_t *b, int rank, uint32_t sem, int32_t k) {
  brd_ir_op_t op = {0};
  op.code = BRD_IR_OP_MC_BARRIER;
  op.ndst = 1;
  op.k = k;
  op.ref[0].buf = BRD_IR_BUF_SEM;
  op.ref[0].index = (uint16_t)sem;
  assert_int_equal(brd_plan_chan_switch(b, rank, &op.ref[0].chan), ncclSuccess);
  assert_int_equal(brd_plan_op_add(b, rank, 0, &op), ncclSuccess);
}

/* A three-rank switch all-reduce and its faults: each rank copies its
 * input into its own slot 0 (op 0), barrier (op 1), reduces slot 0 over
 * every copy into its output (op 2), barrier (op 3) before the slot is
 * rewritten. */
enum { SW_OK, SW_R2_NO_BAR1, SW_R1_NO_COPY, SW_NO_POSTOP, SW_NO_BAR2, SW_LL_REF,
       SW_INPUT_REF, SW_COPY_VIA_SWITCH, SW_K_DOWN };

static brd_plan_builder_t *switch_ar(int variant) {
  brd_plan_builder_t *b = mk(3, 1, 1, 2, 2, BRD_IR_PROTO_SIMPLE);
  for (int r = 0; r < 3; r++) {
    if (!(variant == SW_R1_NO_COPY && r == 1))
      mv(b, r, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
         (brd_plan_ref_t[]){SCR(-1, 0)});
    if (!(variant == SW_R2_NO_BAR1 && r == 2)) swbar(b, r, 0, 1);
    brd_plan_ref_t src = SW(0);
    if (variant == SW_LL_REF && r == 0) src.buf |= BRD_IR_REF_LL;
    if (variant == SW_INPUT_REF && r == 0) src.buf = BRD_IR_BUF_INPUT;
    mv(b, r, BRD_IR_OP_MC_REDUCE, variant == SW_NO_POSTOP ? 0 : BRD_IR_F_POSTOP, 0, 0, 0, 1,
       &src, 1, (brd_plan_ref_t[]){OUT(-1, 0)});
    if (variant == SW_COPY_VIA_SWITCH && r == 1)
      mv(b, r, BRD_IR_OP_COPY, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
         (brd_plan_ref_t[]){SW(1)});
    if (variant != SW_NO_BAR2) swbar(b, r, 0, variant == SW_K_DOWN && r == 2 ? 1 : 2);
  }
  return b;
}

/* The blob of a finished switch plan, for faults the builder cannot make. */
static brd_ir_plan_t *switch_blob(brd_plan_builder_t *b) {
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  return p;
}

static void expect_blob(brd_ir_plan_t *p, brd_verify_kind_t kind, int rank, int block,
                        int op, int peer, const char *text) {
  brd_verify_report_t rep;
  assert_int_equal(brd_plan_verify(p, NULL, &rep), ncclInternalError);
  if (rep.kind != kind || rep.rank != rank || rep.block != block || rep.op != op ||
      rep.peer != peer || strstr(rep.msg, text) == NULL)
    print_error("expected %s at %d/%d/%d peer %d (\"%s\"), got: %s\n",
                brd_plan_verify_kind_name(kind), rank, block, op, peer, text, rep.msg);
  assert_int_equal(rep.kind, kind);
  assert_int_equal(rep.rank, rank);
  assert_int_equal(rep.block, block);
  assert_int_equal(rep.op, op);
  assert_int_equal(rep.peer, peer);
  assert_non_null(strstr(rep.msg, text));
  brd_plan_destroy(p);
}

static brd_ir_chan_t *chan_w(brd_ir_plan_t *p, int rank, int c) {
  return (brd_ir_chan_t *)((char *)p + p->chan_off) + brd_ir_plan_rank(p, rank)->chan_first + c;
}

static void test_switch_semantics(void **state) {
  (void)state;
  expect(switch_ar(SW_OK), 0, BRD_VERIFY_OK, -1, -1, -1, -1);
  expect(switch_ar(SW_OK), 1, BRD_VERIFY_OK, -1, -1, -1, -1);
  /* Rank 2 reduces before its barrier: rank 0's copy into its own slot
   * does not happen before rank 2's ld_reduce of it. */
  expect(switch_ar(SW_R2_NO_BAR1), 0, BRD_VERIFY_RACE, 2, 0, 1, 0);
  /* Rank 1 never writes its slot: a missing contribution, seen as the
   * read of an unwritten copy by the first reducer. */
  expect(switch_ar(SW_R1_NO_COPY), 0, BRD_VERIFY_UNWRITTEN, 2, 0, 2, 1);
  expect(switch_ar(SW_NO_POSTOP), 0, BRD_VERIFY_POSTOP, 0, 0, 2, -1);
  /* No barrier after the reduction: the next iteration's copy into a
   * slot overtakes a peer's ld_reduce of it. */
  expect(switch_ar(SW_NO_BAR2), 0, BRD_VERIFY_REUSE, 0, 0, 2, 2);
}

/* MC_RED: reds of several ranks into one slot between two barriers
 * combine in any order; a plain read not ordered after them races. */
static brd_plan_builder_t *switch_red(int reader_waits) {
  brd_plan_builder_t *b = mk(3, 1, 1, 1, 3, BRD_IR_PROTO_SIMPLE);
  for (int r = 0; r < 3; r++) {
    if (r == 0)
      mv(b, r, BRD_IR_OP_MC_STORE, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
         (brd_plan_ref_t[]){SW(0)});
    swbar(b, r, 0, 1);
    if (r != 0)
      mv(b, r, BRD_IR_OP_MC_RED, 0, 0, 0, 0, 1, (brd_plan_ref_t[]){IN(0)}, 1,
         (brd_plan_ref_t[]){SW(0)});
    if (reader_waits || r != 0) swbar(b, r, 0, 2);
    mv(b, r, BRD_IR_OP_COPY, BRD_IR_F_POSTOP, 0, 0, 0, 1, (brd_plan_ref_t[]){SCR(-1, 0)}, 1,
       (brd_plan_ref_t[]){OUT(-1, 0)});
    swbar(b, r, 0, 3);
  }
  return b;
}

static void test_switch_red(void **state) {
  (void)state;
  expect(switch_red(1), 0, BRD_VERIFY_OK, -1, -1, -1, -1);
  /* Rank 0 copies its slot out without the barrier after the reds. */
  brd_ir_plan_t *p = switch_blob(switch_red(0));
  expect_blob(p, BRD_VERIFY_RACE, 0, 0, 2, 2, "MC_RED of rank 2 block 0 op 1");
}

static void test_switch_malformed(void **state) {
  (void)state;
  expect_blob(switch_blob(switch_ar(SW_LL_REF)), BRD_VERIFY_MALFORMED, 0, 0, 2, -1,
              "LL reference");
  expect_blob(switch_blob(switch_ar(SW_INPUT_REF)), BRD_VERIFY_MALFORMED, 0, 0, 2, -1,
              "names the input through the switch");
  expect_blob(switch_blob(switch_ar(SW_COPY_VIA_SWITCH)), BRD_VERIFY_MALFORMED, 1, 0, 3, -1,
              "only the switch ops");
  expect_blob(switch_blob(switch_ar(SW_K_DOWN)), BRD_VERIFY_MALFORMED, 2, 0, 3, -1,
              "values must increase");
  /* The output through the switch. */
  brd_ir_plan_t *p = switch_blob(switch_ar(SW_OK));
  brd_ir_op_t *op = (brd_ir_op_t *)brd_ir_plan_ops(p, 1, 0) + 2;
  op->ref[0].buf = BRD_IR_BUF_OUTPUT;
  expect_blob(p, BRD_VERIFY_MALFORMED, 1, 0, 2, -1, "names the output through the switch");
  /* A switch channel with a rank as its peer. */
  p = switch_blob(switch_ar(SW_OK));
  chan_w(p, 0, 0)->peer = 1;
  expect_blob(p, BRD_VERIFY_MALFORMED, 0, -1, -1, -1, "with peer 1");
  /* A rank without the switch channel. */
  p = switch_blob(switch_ar(SW_OK));
  chan_w(p, 2, 0)->type = BRD_IR_CHAN_MEMORY;
  chan_w(p, 2, 0)->peer = 0;
  expect_blob(p, BRD_VERIFY_MALFORMED, 2, -1, -1, 0, "no switch channel while rank 0");
  /* Two switch channels on one rank. */
  brd_plan_builder_t *b = switch_ar(SW_OK);
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 1, 1);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 1, 1);
  p = switch_blob(b);
  chan_w(p, 0, 1)->type = BRD_IR_CHAN_SWITCH;
  chan_w(p, 0, 1)->peer = BRD_IR_SWITCH_PEER;
  expect_blob(p, BRD_VERIFY_MALFORMED, 0, -1, -1, -1, "two switch channels");
  /* A switch op naming a memory channel, and a signal on the switch. */
  b = switch_ar(SW_OK);
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 1, 1);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 1, 1);
  p = switch_blob(b);
  op = (brd_ir_op_t *)brd_ir_plan_ops(p, 0, 0) + 1; /* rank 0's first barrier */
  op->ref[0].chan = 1;
  expect_blob(p, BRD_VERIFY_MALFORMED, 0, 0, 1, 1, "not a switch channel");
  b = switch_ar(SW_OK);
  sync_op(b, 0, BRD_IR_OP_SIGNAL, 1, 1, 1);
  sync_op(b, 1, BRD_IR_OP_WAIT, 0, 1, 1);
  p = switch_blob(b);
  op = (brd_ir_op_t *)brd_ir_plan_ops(p, 0, 0) + 4; /* rank 0's SIGNAL */
  op->ref[0].chan = 0;
  expect_blob(p, BRD_VERIFY_MALFORMED, 0, 0, 4, -1, "synchronises with MC_BARRIER only");
  /* A switch plan in the LL protocol. */
  p = switch_blob(switch_ar(SW_OK));
  p->proto = BRD_IR_PROTO_LL;
  expect_blob(p, BRD_VERIFY_MALFORMED, -1, -1, -1, -1, "Simple protocol");
}

/* ---- allocation failures ---------------------------------------------------- */

static void test_verify_alloc_failures(void **state) {
  (void)state;
  brd_algos_args_t args = {3, NULL, 2, BRD_IR_PROTO_LL};
  brd_ir_plan_t *plan;
  assert_int_equal(brd_algos_twoshot_allreduce(&args, &plan), ncclSuccess);
  brd_verify_report_t rep;
  int failures_seen = 0;
  for (long k = 0;; k++) {
    alloc_calls = 0;
    fail_at = k;
    live = 0;
    armed = 1;
    ncclResult_t res = brd_plan_verify(plan, NULL, &rep);
    armed = 0;
    assert_int_equal(live, 0);
    if (res == ncclSuccess) break;
    assert_int_equal(res, ncclSystemError);
    failures_seen++;
  }
  assert_true(failures_seen > 10);
  brd_plan_destroy(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_generated_plans_verify),
      cmocka_unit_test(test_dropped_data_op_caught),
      cmocka_unit_test(test_port_channels),
      cmocka_unit_test(test_exchange_is_correct),
      cmocka_unit_test(test_missing_contribution),
      cmocka_unit_test(test_duplicate_contribution),
      cmocka_unit_test(test_missing_postop),
      cmocka_unit_test(test_unwritten_scratch),
      cmocka_unit_test(test_unsynchronised_read),
      cmocka_unit_test(test_slot_reuse_without_credit),
      cmocka_unit_test(test_reuse_plain),
      cmocka_unit_test(test_reuse_packets),
      cmocka_unit_test(test_deadlock),
      cmocka_unit_test(test_deadlock_packets_and_barrier),
      cmocka_unit_test(test_mismatched_chunk),
      cmocka_unit_test(test_peer_output_before_join),
      cmocka_unit_test(test_output_after_rank_end),
      cmocka_unit_test(test_in_place_hazard),
      cmocka_unit_test(test_peer_input),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_switch_semantics),
      cmocka_unit_test(test_switch_red),
      cmocka_unit_test(test_switch_malformed),
      cmocka_unit_test(test_verify_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
