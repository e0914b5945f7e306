/*
 * Braid: the cost estimate computed from a plan's ops (plan/plan_cost.h).
 *
 * The independent reference is the tuner's formula (plan/tune.c), which
 * never looks at a plan: for the built-in ring, one-shot and two-shot
 * all-reduce the plan-derived estimate must stay within a stated factor of
 * it, order the algorithms as the formula does where the difference is
 * large, and grow with the message. A hand-built plan checks the sync-hop
 * accounting against hand-computed hop costs; host mode is checked against
 * figures computed by hand from the fitted host constants (tune_hw.c).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/algos.h"
#include "failalloc.h"
#include "plan/plan.h"
#include "plan/plan_cost.h"
#include "plan/tune.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* One H100 node of n GPUs, the tuner's model (tune_hw.c). */
static brd_tune_topo_t node_topo(int n) {
  brd_tune_topo_t t;
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 1, n, 0, 400.0, &t), ncclSuccess);
  return t;
}

static brd_ir_plan_t *gen(int algo, int proto, int n, int nblocks) {
  brd_algos_args_t args = {.nranks = n, .order = NULL, .nblocks = nblocks, .proto = proto};
  brd_ir_plan_t *p = NULL;
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_ALLREDUCE, algo, &args, 0, 0, &p), ncclSuccess);
  return p;
}

/* Plan-derived estimate for `bytes` of floats. */
static brd_plan_cost_t est(const brd_ir_plan_t *p, const brd_tune_topo_t *t, size_t bytes) {
  brd_plan_cost_t c;
  assert_int_equal(
      brd_plan_cost_estimate(p, t, bytes / 4, ncclFloat32, brd_plan_scratch_bytes(p), &c),
      ncclSuccess);
  return c;
}

static const int algos[] = {BRD_IR_ALGO_RING, BRD_IR_ALGO_ONESHOT, BRD_IR_ALGO_TWOSHOT};
static const int ranks[] = {2, 3, 5, 8};
static const size_t sizes[] = {8, 4 * KIB, 64 * KIB, 1 * MIB, 64 * MIB};
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Within a factor of the formula: 2 for Simple everywhere, and for LL up
 * to 64 KiB; 5 for LL above (a plan's LL scratch holds a few windows, so
 * its iterations wait on each other's flags, which the formula's
 * pipelining ignores: the plan-derived figure is the higher one). */
static void test_within_factor_of_formula(void **state) {
  (void)state;
  for (size_t ai = 0; ai < N(algos); ai++)
    for (int proto = 0; proto <= BRD_IR_PROTO_LL; proto++)
      for (size_t ri = 0; ri < N(ranks); ri++)
        for (int nb = 1; nb <= 4; nb *= 4) {
          brd_tune_topo_t t = node_topo(ranks[ri]);
          brd_ir_plan_t *p = gen(algos[ai], proto, ranks[ri], nb);
          for (size_t si = 0; si < N(sizes); si++) {
            double plan_us = est(p, &t, sizes[si]).time_us;
            double formula = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, sizes[si],
                                               (brd_algo_t)algos[ai], (brd_proto_t)proto);
            double hi = proto == BRD_IR_PROTO_LL && sizes[si] > 64 * KIB ? 5.0 : 2.0;
            double r = plan_us / formula;
            if (!(r >= 0.5 && r <= hi))
              fail_msg("algo %d proto %d %d ranks %d blocks %zu bytes: plan %.2f us, "
                       "formula %.2f us (ratio %.2f, allowed 0.5..%.1f)", algos[ai], proto,
                       ranks[ri], nb, sizes[si], plan_us, formula, r, hi);
          }
          brd_plan_destroy(p);
        }
}

/* Small messages: latency alone, so the estimate is the formula's hops
 * exactly (BASE 5 us + hops x 0.6 us x step): ring 2(n-1) hops, one-shot
 * 1, two-shot 2. */
static void test_small_hops(void **state) {
  (void)state;
  const int want_hops[] = {14, 1, 2};
  for (size_t ai = 0; ai < N(algos); ai++) {
    brd_tune_topo_t t = node_topo(8);
    for (int proto = 0; proto <= BRD_IR_PROTO_LL; proto++) {
      brd_ir_plan_t *p = gen(algos[ai], proto, 8, 1);
      brd_plan_cost_t c = est(p, &t, 8);
      double step = proto == BRD_IR_PROTO_LL ? 1.0 : 5.0;
      assert_int_equal(c.sync_hops, want_hops[ai]);
      assert_true(fabs(c.time_us - (5.0 + want_hops[ai] * 0.6 * step)) < 0.05);
      brd_plan_destroy(p);
    }
  }
}

/* One-shot is cheaper than ring at 8 bytes on 8 ranks; ring and two-shot
 * are cheaper than one-shot at 64 MiB (Simple, the protocol of large
 * messages), as the formula says. */
static void test_order(void **state) {
  (void)state;
  brd_tune_topo_t t = node_topo(8);
  for (int proto = 0; proto <= BRD_IR_PROTO_LL; proto++) {
    brd_ir_plan_t *ring = gen(BRD_IR_ALGO_RING, proto, 8, 1);
    brd_ir_plan_t *one = gen(BRD_IR_ALGO_ONESHOT, proto, 8, 1);
    assert_true(est(one, &t, 8).time_us < est(ring, &t, 8).time_us);
    brd_plan_destroy(ring);
    brd_plan_destroy(one);
  }
  for (int nb = 1; nb <= 4; nb *= 2) {
    brd_ir_plan_t *ring = gen(BRD_IR_ALGO_RING, BRD_IR_PROTO_SIMPLE, 8, nb);
    brd_ir_plan_t *one = gen(BRD_IR_ALGO_ONESHOT, BRD_IR_PROTO_SIMPLE, 8, nb);
    brd_ir_plan_t *two = gen(BRD_IR_ALGO_TWOSHOT, BRD_IR_PROTO_SIMPLE, 8, nb);
    double r = est(ring, &t, 64 * MIB).time_us, o = est(one, &t, 64 * MIB).time_us,
           w = est(two, &t, 64 * MIB).time_us;
    assert_true(r < o);
    assert_true(w < o);
    brd_plan_destroy(ring);
    brd_plan_destroy(one);
    brd_plan_destroy(two);
  }
}

/* Grows with size: never less for a larger message, and 64 MiB costs
 * more than 8 bytes. The busiest channel's bytes follow the pattern:
 * 2(n-1)/n x S for the ring (one channel each way), S for one-shot (each
 * peer gets the whole message), 2 S/n for two-shot. */
static void test_grows(void **state) {
  (void)state;
  for (size_t ai = 0; ai < N(algos); ai++)
    for (int proto = 0; proto <= BRD_IR_PROTO_LL; proto++) {
      brd_tune_topo_t t = node_topo(5);
      brd_ir_plan_t *p = gen(algos[ai], proto, 5, 2);
      double prev = 0.0;
      for (size_t s = 16; s <= 64 * MIB; s *= 4) {
        double now = est(p, &t, s).time_us;
        assert_true(now >= prev);
        prev = now;
      }
      assert_true(est(p, &t, 64 * MIB).time_us > est(p, &t, 8).time_us);
      brd_plan_destroy(p);
    }
  brd_tune_topo_t t = node_topo(5);
  const size_t S = 5 * MIB; /* divides into equal shares */
  const double want[] = {2.0 * 4.0 / 5.0 * S, (double)S, 2.0 * S / 5.0};
  for (size_t ai = 0; ai < N(algos); ai++) {
    brd_ir_plan_t *p = gen(algos[ai], BRD_IR_PROTO_SIMPLE, 5, 1);
    double got = (double)est(p, &t, S).busiest_chan_bytes;
    if (fabs(got - want[ai]) > 0.02 * want[ai])
      fail_msg("algo %d: busiest channel %.0f bytes, expected %.0f", algos[ai], got, want[ai]);
    brd_plan_destroy(p);
  }
}

/* Two ranks: rank 0 puts its chunk into rank 1's output and signals;
 * rank 1 waits. With `chain` extra rounds, the ranks then ping-pong
 * semaphores `chain` times (each round: 1 -> 0, 0 -> 1) before rank 1
 * finishes. */
static brd_ir_plan_t *pingpong(int chain) {
  brd_plan_shape_t sh = {2, 1, 1, 0, 1, 2, (uint32_t)(1 + 2 * chain),
                         BRD_IR_PROTO_SIMPLE, BRD_IR_ALGO_RING, BRD_IR_COLL_BROADCAST, 0, 0};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&sh, &b), ncclSuccess);
  brd_plan_ref_t src = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
  brd_plan_ref_t dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, 1, 0);
  brd_plan_move_t mv = {BRD_IR_OP_PUT, 0, 0, 1, 0, 0, 1, &src, 1, &dst};
  assert_int_equal(brd_plan_op_move(b, 0, 0, &mv), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 0, 0, BRD_IR_OP_SIGNAL, 1, 0, 1), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 1, 0, BRD_IR_OP_WAIT, 0, 0, 1), ncclSuccess);
  for (int i = 0; i < chain; i++) {
    assert_int_equal(brd_plan_op_sync(b, 1, 0, BRD_IR_OP_SIGNAL, 0, 1, 2 + 2 * i), ncclSuccess);
    assert_int_equal(brd_plan_op_sync(b, 0, 0, BRD_IR_OP_WAIT, 1, 1, 2 + 2 * i), ncclSuccess);
    assert_int_equal(brd_plan_op_sync(b, 0, 0, BRD_IR_OP_SIGNAL, 1, 0, 3 + 2 * i), ncclSuccess);
    assert_int_equal(brd_plan_op_sync(b, 1, 0, BRD_IR_OP_WAIT, 0, 0, 3 + 2 * i), ncclSuccess);
  }
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  return p;
}

/* A serial chain of sync hops costs exactly its hops: 2 per round, each
 * intra_lat x 5 (Simple), on top of the plan without it. */
static void test_sync_chain(void **state) {
  (void)state;
  brd_tune_topo_t t = node_topo(2);
  brd_ir_plan_t *base = pingpong(0), *longer = pingpong(3);
  size_t bytes = 4 * KIB;
  brd_plan_cost_t a = est(base, &t, bytes), c = est(longer, &t, bytes);
  assert_int_equal(a.sync_hops, 1);
  assert_int_equal(c.sync_hops, 7);
  double hop = t.intra_lat * 5.0;
  assert_true(c.time_us > a.time_us);
  assert_true(fabs((c.time_us - a.time_us) - 6.0 * hop) < 1e-3);
  /* The base: launch, the put of 4 KiB at the link's rate, one hop. */
  double put = (double)bytes / (t.intra_bw * 1000.0);
  assert_true(fabs(a.time_us - (5.0 + put + hop)) < 1e-3);
  assert_int_equal(a.busiest_chan_bytes, bytes);
  brd_plan_destroy(base);
  brd_plan_destroy(longer);
}

/* A WAIT nothing signals never completes: refused, not looped on. Bad
 * arguments and a topology of another size are refused too. */
static void test_refusals(void **state) {
  (void)state;
  brd_plan_shape_t sh = {2, 1, 1, 0, 1, 1, 1, BRD_IR_PROTO_SIMPLE, BRD_IR_ALGO_RING,
                         BRD_IR_COLL_BROADCAST, 0, 0};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&sh, &b), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 1, 0, BRD_IR_OP_WAIT, 0, 0, 1), ncclSuccess);
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  brd_tune_topo_t t2 = node_topo(2), t4 = node_topo(4);
  brd_plan_cost_t c;
  memset(&c, 0x5a, sizeof(c));
  brd_plan_cost_t before = c;
  assert_int_equal(brd_plan_cost_estimate(p, &t2, 64, ncclFloat32, 0, &c), ncclInvalidArgument);
  assert_int_equal(brd_plan_cost_estimate(p, &t4, 64, ncclFloat32, 0, &c), ncclInvalidArgument);
  assert_int_equal(brd_plan_cost_estimate(NULL, &t2, 64, ncclFloat32, 0, &c),
                   ncclInvalidArgument);
  assert_memory_equal(&c, &before, sizeof(c));
  /* count 0 costs nothing. */
  assert_int_equal(brd_plan_cost_estimate(p, &t2, 0, ncclFloat32, 0, &c), ncclSuccess);
  assert_true(c.time_us == 0.0 && c.niter == 0);
  brd_plan_destroy(p);
}

/* Two nodes of 8 (8 x 400G NICs each): at 8 bytes the hierarchical plan
 * pays 2(L-1) = 14 hops inside the nodes and 2(N-1) = 2 across, by hand
 * 5 + 14 x intra_lat x 5 + 2 x inter_lat x 5 (the formula's count too);
 * the ring's longest chain is its 2(n-1) = 30 steps. */
static void test_across_nodes(void **state) {
  (void)state;
  brd_tune_topo_t t;
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 2, 8, 8, 400.0, &t), ncclSuccess);
  int host[16];
  for (int r = 0; r < 16; r++) host[r] = r / 8;
  brd_algos_args_t args = {.nranks = 16, .order = NULL, .nblocks = 1,
                           .proto = BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *hier = NULL, *ring = NULL;
  assert_int_equal(brd_algos_generate_hosts(BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, &args, host, 0,
                                            0, &hier),
                   ncclSuccess);
  assert_int_equal(brd_algos_generate_hosts(BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_RING, &args, host,
                                            0, 0, &ring),
                   ncclSuccess);
  brd_plan_cost_t h = est(hier, &t, 8), r = est(ring, &t, 8);
  assert_int_equal(h.sync_hops, 16);
  assert_true(fabs(h.time_us - (5.0 + 14 * t.intra_lat * 5.0 + 2 * t.inter_lat * 5.0)) < 0.05);
  assert_int_equal(r.sync_hops, 30);
  /* At least its forward hops: 28 inside the nodes, 2 across. */
  assert_true(r.time_us >= 5.0 + 28 * t.intra_lat * 5.0 + 2 * t.inter_lat * 5.0 - 0.05);
  /* Large: within 4 x of the formula (slot credits across the net, see
   * cost-model.md), and more than the links alone. */
  brd_plan_cost_t big = est(ring, &t, 64 * MIB);
  double f = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, 64 * MIB, BRD_ALGO_RING,
                               BRD_PROTO_SIMPLE);
  assert_true(big.time_us > f / 2.0 && big.time_us < 4.0 * f);
  assert_true(big.time_us > big.link_us);
  brd_plan_destroy(hier);
  brd_plan_destroy(ring);
}

/* LL flags synchronise like semaphores: rank 0 writes packets into rank
 * 1's scratch, rank 1 reduces them when the flags are there. One hop of
 * intra_lat x 1 (LL); a reader whose flag nobody writes never completes. */
static brd_ir_plan_t *ll_pair(int32_t k_src) {
  brd_plan_shape_t sh = {2, 1, 1, 1, 1, 1, 1, BRD_IR_PROTO_LL, BRD_IR_ALGO_ONESHOT,
                         BRD_IR_COLL_BROADCAST, 0, 0};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&sh, &b), ncclSuccess);
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
  brd_plan_ref_t far = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, 1, 0);
  brd_plan_ref_t near = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1, 0);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, 0);
  brd_plan_move_t put = {BRD_IR_OP_PKT_PUT, 0, 0, 1, 1, 0, 1, &in, 1, &far};
  brd_plan_move_t red = {BRD_IR_OP_PKT_REDUCE, 0, 0, 1, 0, k_src, 1, &near, 1, &out};
  assert_int_equal(brd_plan_op_move(b, 0, 0, &put), ncclSuccess);
  assert_int_equal(brd_plan_op_move(b, 1, 0, &red), ncclSuccess);
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  return p;
}

static void test_ll_flags(void **state) {
  (void)state;
  brd_tune_topo_t t = node_topo(2);
  brd_ir_plan_t *p = ll_pair(1);
  size_t bytes = 64;
  brd_plan_cost_t c;
  assert_int_equal(brd_plan_cost_estimate(p, &t, bytes / 4, ncclFloat32, 4096, &c), ncclSuccess);
  assert_int_equal(c.sync_hops, 1);
  /* Launch, the write of 64 bytes at half the link's rate (LL), a hop. */
  double put = (double)bytes / (t.intra_bw * 1000.0 * 0.5);
  assert_true(fabs(c.time_us - (5.0 + put + t.intra_lat)) < 1e-3);
  brd_plan_destroy(p);
  p = ll_pair(2);
  assert_int_equal(brd_plan_cost_estimate(p, &t, bytes / 4, ncclFloat32, 4096, &c),
                   ncclInvalidArgument);
  brd_plan_destroy(p);
}

/* One host of n ranks in host mode, with the fitted figures (tune_hw.c). */
static brd_tune_topo_t host_topo(int n) {
  brd_tune_topo_t t;
  memset(&t, 0, sizeof(t));
  t.nranks = t.local_nranks = n;
  t.nnodes = 1;
  brd_hw_host_topo(n, 256 * KIB, &t);
  return t;
}

#define HOST(c) ((double)brd_hw_consts[c].value)

/* Host mode, against figures computed by hand from the fitted constants:
 * a one-shot's hop pays the fan of a wait on every other rank once; a
 * tree's copies overlap across its levels (the busiest rank's 2S at its
 * share of the copy rate and Tree's fit, plus a sync chain that is small
 * beside it), not chained level after level; and an LL tree call of 8
 * bytes, one of the plan's 4 chunks, waits on no flag of the empty three. */
static void test_host_mode(void **state) {
  (void)state;
  /* OneShot Simple, 4 ranks, 32 bytes: launch 0.82 x 16, one hop 0.80 x 4,
   * the fan 0.125 x 3 x 4, the busiest rank's 3 x 32 bytes at 3.45 / 4
   * GB/s. */
  brd_tune_topo_t t = host_topo(4);
  brd_ir_plan_t *p = gen(BRD_IR_ALGO_ONESHOT, BRD_IR_PROTO_SIMPLE, 4, 1);
  double want = HOST(BRD_HW_HOST_LAUNCH_US) * 16 + HOST(BRD_HW_HOST_HOP_US) * 4 +
                HOST(BRD_HW_HOST_FAN_US) * 3 * 4 +
                3 * 32 / (HOST(BRD_HW_HOST_COPY_GBPS) / 4 * 1000.0);
  brd_plan_cost_t c = est(p, &t, 32);
  if (fabs(c.time_us - want) > 1e-3 * want)
    fail_msg("one-shot, host mode: %.3f us, want %.3f us", c.time_us, want);
  brd_plan_destroy(p);

  /* Tree Simple, 8 ranks, 64 MiB, 2 blocks (a second worker from 256
   * KiB): 2S at the rank's share (3.45 / 8 GB/s) x fit_tree, within 10%. */
  t = host_topo(8);
  p = gen(BRD_IR_ALGO_TREE, BRD_IR_PROTO_SIMPLE, 8, 2);
  want = 2.0 * 64 * MIB /
         (HOST(BRD_HW_HOST_COPY_GBPS) / 8 * 1000.0 * HOST(BRD_HW_HOST_FIT_TREE));
  c = est(p, &t, 64 * MIB);
  if (!(c.time_us >= want && c.time_us <= 1.1 * want))
    fail_msg("tree, host mode, 64 MiB: %.0f us, want %.0f us to +10%%", c.time_us, want);
  brd_plan_destroy(p);

  /* Tree LL, 4 ranks: 8 bytes (one chunk with data) is cheaper than 64
   * (four full chunks) by more than one hop; on a GPU topology, which
   * does not skip empty chunks, the two differ by less than a hop. */
  t = host_topo(4);
  p = gen(BRD_IR_ALGO_TREE, BRD_IR_PROTO_LL, 4, 1);
  double one = est(p, &t, 8).time_us, four = est(p, &t, 64).time_us;
  if (!(four - one > t.intra_lat))
    fail_msg("tree LL, host mode: 8 B %.2f us, 64 B %.2f us; want a hop (%.2f us) apart",
             one, four, t.intra_lat);
  brd_tune_topo_t g = node_topo(4);
  double gone = est(p, &g, 8).time_us, gfour = est(p, &g, 64).time_us;
  if (!(gfour - gone < g.intra_lat))
    fail_msg("tree LL, GPU: 8 B %.2f us, 64 B %.2f us; want under a hop (%.2f us) apart",
             gone, gfour, g.intra_lat);
  brd_plan_destroy(p);
}

/* Out of memory at every allocation: ncclSystemError, nothing left
 * allocated, nothing written (on a GPU topology and in host mode). */
static void test_alloc_failures(void **state) {
  (void)state;
  brd_ir_plan_t *p = gen(BRD_IR_ALGO_RING, BRD_IR_PROTO_SIMPLE, 5, 2);
  size_t scratch = brd_plan_scratch_bytes(p);
  brd_plan_cost_t c;
  for (int host = 0; host <= 1; host++) {
    brd_tune_topo_t t = host ? host_topo(5) : node_topo(5);
    int failures = 0;
    for (long at = 0;; at++) {
      memset(&c, 0x5a, sizeof(c));
      brd_plan_cost_t before = c;
      alloc_calls = 0;
      fail_at = at;
      live = 0;
      armed = 1;
      ncclResult_t res = brd_plan_cost_estimate(p, &t, 1 << 20, ncclFloat32, scratch, &c);
      armed = 0;
      assert_int_equal(live, 0);
      if (res == ncclSuccess) break;
      assert_int_equal(res, ncclSystemError);
      assert_memory_equal(&c, &before, sizeof(c));
      failures++;
    }
    assert_true(failures > 5);
  }
  brd_plan_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_within_factor_of_formula),
      cmocka_unit_test(test_small_hops),
      cmocka_unit_test(test_order),
      cmocka_unit_test(test_grows),
      cmocka_unit_test(test_sync_chain),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_across_nodes),
      cmocka_unit_test(test_ll_flags),
      cmocka_unit_test(test_host_mode),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
