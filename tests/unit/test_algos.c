/*
 * Unit tests for the all-reduce generators (src/algos/).
 *
 *   - Double binary trees against the two figures in NCCL's trees.cc
 *     (12 ranks, mirrored; 13 ranks, shifted), copied out by hand, and
 *     shape invariants for every n up to 64.
 *   - Plan structure: who talks to whom under a rank order, what each
 *     rank owns, the one-rank plan.
 *   - Scratch sizes following NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE, worked out
 *     by hand.
 *   - Argument errors, and allocation failures at every point unwinding
 *     without leaks.
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
#include "base/param.h"
#include "plan/plan.h"

#include "failalloc.h"

typedef ncclResult_t (*gen_fn)(const brd_algos_args_t *, brd_ir_plan_t **);
static const gen_fn gens[4] = {brd_algos_ring_allreduce, brd_algos_tree_allreduce,
                               brd_algos_oneshot_allreduce,
                               brd_algos_twoshot_allreduce};

/* ---- trees ------------------------------------------------------------------ */

static void check_tree(int n, int tree, const int *want_parent) {
  for (int x = 0; x < n; x++) {
    int parent, child[2];
    brd_algos_tree_links(n, tree, x, &parent, child);
    if (parent != want_parent[x])
      print_error("n=%d tree %d: position %d has parent %d, expected %d\n", n, tree,
                  x, parent, want_parent[x]);
    assert_int_equal(parent, want_parent[x]);
    /* The children are exactly the positions naming x as parent. */
    int nwant = 0, nchild = 0;
    for (int y = 0; y < n; y++) nwant += want_parent[y] == x;
    for (int i = 0; i < 2; i++) {
      if (child[i] < 0) continue;
      nchild++;
      assert_int_equal(want_parent[child[i]], x);
    }
    assert_int_equal(nchild, nwant);
  }
}

static void test_trees_match_nccl_figures(void **state) {
  (void)state;
  /*  0---------------8                   3----------------11
   *           ______/ \                 / \______
   *          4         \               /         7
   *        /   \        \             /        /   \
   *      2       6       10         1        5      9
   *     / \     / \     /  \       / \      / \    / \
   *    1   3   5   7   9   11     0   2    4   6  8   10      */
  static const int t12_0[12] = {-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 8, 10};
  static const int t12_1[12] = {1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1};
  /*  0---------------8            1---------------9
   *           ______/ \______              ______/ \______
   *          4               12           5                0
   *        /   \            /           /   \            /
   *      2       6       10           3       7       11
   *     / \     / \     /  \         / \     / \     /  \
   *    1   3   5   7   9   11       2   4   6   8  10   12     */
  static const int t13_0[13] = {-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8};
  static const int t13_1[13] = {9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11};
  check_tree(12, 0, t12_0);
  check_tree(12, 1, t12_1);
  check_tree(13, 0, t13_0);
  check_tree(13, 1, t13_1);
}

static void test_tree_shapes(void **state) {
  (void)state;
  for (int n = 1; n <= 64; n++) {
    int depth_bound = 1;
    while ((1 << depth_bound) < n) depth_bound++;
    for (int tree = 0; tree < 2; tree++) {
      int roots = 0;
      for (int x = 0; x < n; x++) {
        int parent, child[2];
        brd_algos_tree_links(n, tree, x, &parent, child);
        if (parent < 0) {
          roots++;
        } else {
          int pp, pc[2];
          brd_algos_tree_links(n, tree, parent, &pp, pc);
          assert_true(pc[0] == x || pc[1] == x);
        }
        /* Logarithmic: every path to the root is short. */
        int depth = 0;
        for (int y = x; parent >= 0; depth++) {
          y = parent;
          brd_algos_tree_links(n, tree, y, &parent, child);
          assert_true(depth <= depth_bound);
        }
      }
      assert_int_equal(roots, 1);
    }
    /* The second tree's root differs from the first's when n > 1. */
    if (n > 1) {
      int p0, p1, c[2];
      brd_algos_tree_links(n, 0, 0, &p0, c);
      brd_algos_tree_links(n, 1, 0, &p1, c);
      assert_int_equal(p0, -1);
      assert_true(p1 >= 0);
    }
  }
}

/* ---- plan structure ---------------------------------------------------------- */

static int peer_of(const brd_ir_plan_t *p, int rank, const brd_ir_ref_t *ref) {
  return ref->chan == BRD_IR_CHAN_LOCAL ? rank : brd_ir_plan_chan(p, rank, ref->chan)->peer;
}

static void test_single_rank_plans(void **state) {
  (void)state;
  for (int g = 0; g < 4; g++) {
    brd_algos_args_t args = {1, NULL, 3, BRD_IR_PROTO_LL};
    brd_ir_plan_t *p;
    assert_int_equal(gens[g](&args, &p), ncclSuccess);
    assert_int_equal(p->nranks, 1);
    assert_int_equal(p->nslots, 0);
    assert_int_equal(p->nops, 3);
    for (int b = 0; b < 3; b++) {
      const brd_ir_op_t *o = brd_ir_plan_ops(p, 0, b);
      assert_int_equal(brd_ir_plan_block(p, 0, b)->nops, 1);
      assert_int_equal(o->code, BRD_IR_OP_COPY);
      assert_int_equal(o->flags, BRD_IR_F_POSTOP);
      assert_int_equal(o->chunk, b);
      assert_int_equal(o->ref[0].buf, BRD_IR_BUF_INPUT);
      assert_int_equal(o->ref[1].buf, BRD_IR_BUF_OUTPUT);
    }
    assert_int_equal(brd_plan_scratch_bytes(p), 0);
    brd_plan_destroy(p);
  }
}

static void test_ring_follows_order(void **state) {
  (void)state;
  static const int order[6] = {4, 1, 5, 0, 3, 2};
  for (int proto = 0; proto < 2; proto++) {
    brd_algos_args_t args = {6, order, 2, proto};
    brd_ir_plan_t *p;
    assert_int_equal(brd_algos_ring_allreduce(&args, &p), ncclSuccess);
    assert_int_equal(p->nchunks, 12);
    for (int pos = 0; pos < 6; pos++) {
      int rank = order[pos], next = order[(pos + 1) % 6], prev = order[(pos + 5) % 6];
      assert_int_equal(brd_ir_plan_rank(p, rank)->nchans, 2);
      for (int b = 0; b < 2; b++) {
        const brd_ir_op_t *o = brd_ir_plan_ops(p, rank, b);
        uint32_t nops = brd_ir_plan_block(p, rank, b)->nops;
        int data_ops = 0, first = 1;
        for (uint32_t i = 0; i < nops; i++) {
          const brd_ir_op_t *op = &o[i];
          if (op->code == BRD_IR_OP_SIGNAL || op->code == BRD_IR_OP_WAIT) {
            int peer = peer_of(p, rank, &op->ref[0]);
            assert_true(peer == next || peer == prev);
            continue;
          }
          data_ops++;
          /* Scratch writes go to the successor only; the first transfer
           * sends the block's chunk at this position. */
          for (int d = op->nsrc; d < op->nsrc + op->ndst; d++) {
            if ((op->ref[d].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH)
              assert_int_equal(peer_of(p, rank, &op->ref[d]), next);
          }
          if (first) {
            assert_int_equal(op->ref[0].buf, BRD_IR_BUF_INPUT);
            assert_int_equal(op->chunk, b * 6 + pos);
            first = 0;
          }
        }
        assert_int_equal(data_ops, 2 * 6 - 1); /* 2(n-1) transfers + last copy */
      }
    }
    brd_plan_destroy(p);
  }
}

/* The op that finishes a chunk (POSTOP) and the ranks that write it. */
static void test_owners(void **state) {
  (void)state;
  static const int order[5] = {2, 4, 0, 3, 1};
  /* Two-shot: position s reduces shard s of each block. */
  brd_algos_args_t args = {5, order, 2, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p;
  assert_int_equal(brd_algos_twoshot_allreduce(&args, &p), ncclSuccess);
  for (int pos = 0; pos < 5; pos++) {
    for (int b = 0; b < 2; b++) {
      const brd_ir_op_t *o = brd_ir_plan_ops(p, order[pos], b);
      uint32_t nops = brd_ir_plan_block(p, order[pos], b)->nops, posts = 0;
      for (uint32_t i = 0; i < nops; i++) {
        if (!(o[i].flags & BRD_IR_F_POSTOP)) continue;
        posts++;
        assert_int_equal(o[i].chunk, b * 5 + pos);
        assert_int_equal(o[i].nsrc, 5); /* own input + 4 slots */
      }
      assert_int_equal(posts, 1);
    }
  }
  brd_plan_destroy(p);
  /* One-shot LL: every rank sends its chunk to all 4 peers and reduces 5
   * sources itself. */
  args.proto = BRD_IR_PROTO_LL;
  assert_int_equal(brd_algos_oneshot_allreduce(&args, &p), ncclSuccess);
  for (int r = 0; r < 5; r++) {
    const brd_ir_op_t *o = brd_ir_plan_ops(p, r, 1);
    uint32_t nops = brd_ir_plan_block(p, r, 1)->nops;
    int peers = 0, reduces = 0;
    for (uint32_t i = 0; i < nops; i++) {
      if (o[i].code == BRD_IR_OP_PKT_PUT) {
        for (int d = 0; d < o[i].ndst; d++) {
          assert_int_equal(o[i].ref[1 + d].buf, BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL);
          peers |= 1 << peer_of(p, r, &o[i].ref[1 + d]);
        }
      }
      if (o[i].code == BRD_IR_OP_PKT_REDUCE) {
        reduces++;
        assert_int_equal(o[i].nsrc, 5);
        assert_int_equal(o[i].flags, BRD_IR_F_POSTOP);
      }
    }
    assert_int_equal(peers, 0x1f & ~(1 << r));
    assert_int_equal(reduces, 1);
  }
  brd_plan_destroy(p);
  /* Tree: the root of tree 0 (position 0) finishes the even chunks of each
   * block, the root of tree 1 (for odd n the tree shifted by one: position
   * 1) the odd ones. */
  args.proto = BRD_IR_PROTO_SIMPLE;
  assert_int_equal(brd_algos_tree_allreduce(&args, &p), ncclSuccess);
  for (int pos = 0; pos < 5; pos++) {
    const brd_ir_op_t *o = brd_ir_plan_ops(p, order[pos], 0);
    uint32_t nops = brd_ir_plan_block(p, order[pos], 0)->nops;
    for (uint32_t i = 0; i < nops; i++) {
      if (!(o[i].flags & BRD_IR_F_POSTOP)) continue;
      assert_int_equal(pos == 0 ? 0 : 1, o[i].chunk % 2);
      assert_true(pos == 0 || pos == 1);
    }
  }
  brd_plan_destroy(p);
}

/* ---- scratch sizes ------------------------------------------------------------ */

static size_t scratch_of(int g, int n, int nblocks, int proto) {
  brd_algos_args_t args = {n, NULL, nblocks, proto};
  brd_ir_plan_t *p;
  assert_int_equal(gens[g](&args, &p), ncclSuccess);
  size_t bytes = brd_plan_scratch_bytes(p);
  brd_plan_destroy(p);
  return bytes;
}

static void test_scratch_follows_buffsize(void **state) {
  (void)state;
  setenv("NCCL_BUFFSIZE", "1048576", 1);
  setenv("NCCL_LL_BUFFSIZE", "65536", 1);
  brd_param_reload();
  /* Two phases x slots x (buffer / slots sharing it):
   * ring: 4 slots per block share one buffer: 2 x 8 x 256 KiB. */
  assert_int_equal(scratch_of(0, 4, 2, BRD_IR_PROTO_SIMPLE), 4u << 20);
  assert_int_equal(scratch_of(0, 4, 2, BRD_IR_PROTO_LL), 2 * 8 * 16384);
  /* ring with 2 ranks: only 2 transfers, so 2 slots per block. */
  assert_int_equal(scratch_of(0, 2, 1, BRD_IR_PROTO_SIMPLE), 2 * 2 * 524288);
  /* tree: 4 chunks x 2 children per block, 8 sharing a buffer; LL adds a
   * down slot: 12 per block. */
  assert_int_equal(scratch_of(1, 6, 1, BRD_IR_PROTO_SIMPLE), 2 * 8 * 131072);
  assert_int_equal(scratch_of(1, 6, 1, BRD_IR_PROTO_LL), 2 * 12 * (65536 / 12 / 16 * 16));
  /* one-shot LL: one slot per peer per block, the peers sharing a buffer
   * (65536 / 3 = 21845, rounded down to 21840). */
  assert_int_equal(scratch_of(2, 4, 2, BRD_IR_PROTO_LL), 2 * 6 * 21840);
  /* two-shot Simple: 3 slots sharing a buffer (1048576 / 3 -> 349520). */
  assert_int_equal(scratch_of(3, 4, 1, BRD_IR_PROTO_SIMPLE), 2 * 3 * 349520);
  /* A tiny buffer still leaves 64 bytes per slot. */
  setenv("NCCL_BUFFSIZE", "100", 1);
  brd_param_reload();
  assert_int_equal(scratch_of(0, 4, 1, BRD_IR_PROTO_SIMPLE), 2 * 4 * 64);
  unsetenv("NCCL_BUFFSIZE");
  unsetenv("NCCL_LL_BUFFSIZE");
  brd_param_reload();
  /* NCCL's defaults: 4 MiB and 256 KiB. */
  assert_int_equal(scratch_of(0, 3, 1, BRD_IR_PROTO_SIMPLE), 2 * 4 * (1u << 20));
  assert_int_equal(scratch_of(0, 3, 1, BRD_IR_PROTO_LL), 2 * 4 * 65536);
}

/* ---- errors ---------------------------------------------------------------------- */

static void test_bad_arguments(void **state) {
  (void)state;
  static const int dup[3] = {0, 1, 1}, range[3] = {0, 3, 1}, neg[3] = {-1, 0, 1};
  for (int g = 0; g < 4; g++) {
    brd_ir_plan_t *p = (brd_ir_plan_t *)0x1; /* must stay untouched */
    brd_algos_args_t a = {0, NULL, 1, BRD_IR_PROTO_SIMPLE};
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    a.nranks = 3;
    a.nblocks = 0;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    a.nblocks = 1;
    a.proto = BRD_IR_PROTO_LL128;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    a.proto = BRD_IR_PROTO_SIMPLE;
    a.order = dup;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    a.order = range;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    a.order = neg;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    /* Too many chunks or slots for the IR's 16-bit indices. */
    a.order = NULL;
    a.nranks = 300;
    a.nblocks = 20000;
    assert_int_equal(gens[g](&a, &p), ncclInvalidArgument);
    assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
  }
}

static void test_alloc_failures(void **state) {
  (void)state;
  static const int order[13] = {12, 0, 11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6};
  for (int g = 0; g < 4; g++) {
    for (int proto = 0; proto < 2; proto++) {
      /* 13 ranks: one-shot and two-shot reduce in chained groups. */
      brd_algos_args_t args = {13, order, 2, proto};
      int failures_seen = 0;
      for (long k = 0;; k++) {
        brd_ir_plan_t *p = NULL;
        alloc_calls = 0;
        fail_at = k;
        live = 0;
        armed = 1;
        ncclResult_t res = gens[g](&args, &p);
        armed = 0;
        if (res == ncclSuccess) {
          assert_int_equal(live, 1); /* the plan */
          brd_ir_plan_t *copy = NULL;
          armed = 1;
          alloc_calls = 0;
          fail_at = 0;
          assert_int_equal(brd_plan_clone(p, &copy), ncclSystemError);
          armed = 0;
          assert_null(copy);
          brd_plan_destroy(p);
          break;
        }
        assert_int_equal(res, ncclSystemError);
        assert_int_equal(live, 0);
        assert_null(p);
        failures_seen++;
      }
      assert_true(failures_seen >= 5);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trees_match_nccl_figures),
      cmocka_unit_test(test_tree_shapes),
      cmocka_unit_test(test_single_rank_plans),
      cmocka_unit_test(test_ring_follows_order),
      cmocka_unit_test(test_owners),
      cmocka_unit_test(test_scratch_follows_buffsize),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
