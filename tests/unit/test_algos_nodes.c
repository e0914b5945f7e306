/*
 * Unit tests for the plans that place traffic by node (src/algos/): the
 * tree all-reduce across nodes (allreduce_tree.c), the hierarchical
 * all-reduce (hier.c), NVLS inside the node with a ring across
 * (nvls_hier.c), and the node layout they read (common.c).
 *
 *   - The layout of a hand-written labelling under a rank order, worked
 *     out by hand.
 *   - Every plan verifies (src/plan/verify.c) on 2 and 3 nodes of 1 to 4
 *     ranks, uneven nodes, nodes whose ranks are not consecutive, identity
 *     and shuffled orders, both protocols, 1 and 2 blocks, in and out of
 *     place, over three loop iterations.
 *   - Structure, counted from the plan's channel tables: the tree crosses
 *     nodes only between node heads, 4(N-1) channels in all; the
 *     hierarchical plan links a rank to its node's ring neighbours and,
 *     across nodes, only to ranks of its own local index.
 *   - NVLS across nodes: each node's ranks are one switch group, member
 *     index = place in the node; the only other channels join ranks of
 *     one local index; layouts it does not split get the NVLS all-reduce
 *     (one node) or the ring all-reduce.
 *   - Layouts the hierarchical plan cannot split (one node, one rank per
 *     node, uneven nodes) get the ring all-reduce's plan, byte for byte.
 *   - The plan cache generates by the layout it was given, keeps its plans
 *     while the layout stays, and drops them when it changes.
 *   - Allocation failures unwind without leaks.
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
#include "core/plans.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "plan/verify.h"

#include "failalloc.h"

#define MAXR 16

typedef ncclResult_t (*hosts_fn)(const brd_algos_args_t *, const int *, brd_ir_plan_t **);

/* Labels for `sizes` (ranks per node): consecutive ranks per node, or
 * interleaved (rank r on the node r falls to round-robin over the nodes
 * that still have room). Labels are arbitrary ints (100 + 7 m). */
static int layout(const int *sizes, int nnodes, int interleave, int *host) {
  int n = 0, left[8];
  for (int m = 0; m < nnodes; m++) n += left[m] = sizes[m];
  if (!interleave) {
    int r = 0;
    for (int m = 0; m < nnodes; m++)
      for (int i = 0; i < sizes[m]; i++) host[r++] = 100 + 7 * m;
    return n;
  }
  int m = 0;
  for (int r = 0; r < n; r++) {
    while (left[m] == 0) m = (m + 1) % nnodes;
    host[r] = 100 + 7 * m;
    left[m]--;
    m = (m + 1) % nnodes;
  }
  return n;
}

static void shuffle(int *order, int n, uint64_t *x) {
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = n - 1; i > 0; i--) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    int j = (int)(*x % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* ---- the layout --------------------------------------------------------------- */

static void test_layout_by_hand(void **state) {
  (void)state;
  /* Ranks 0..5 on hosts labelled 9 9 4 9 4 2, positions in order
   * {3, 1, 4, 0, 5, 2}: rank 3 (host 9) comes first, so host 9 is node 0,
   * then host 4 (rank 4) node 1, host 2 (rank 5) node 2. */
  static const int host[6] = {9, 9, 4, 9, 4, 2};
  static const int order[6] = {3, 1, 4, 0, 5, 2};
  brd_algos_args_t args = {6, order, 1, BRD_IR_PROTO_SIMPLE};
  brd_algos_nodes_t *nd = NULL;
  assert_int_equal(brd_algos_nodes_create(&args, host, &nd), ncclSuccess);
  assert_int_equal(nd->nnodes, 3);
  assert_int_equal(nd->lmin, 1);
  assert_int_equal(nd->lmax, 3);
  static const int want_node[6] = {0, 0, 1, 0, 1, 2};
  static const int want_local[6] = {2, 1, 1, 0, 0, 0};
  for (int r = 0; r < 6; r++) {
    assert_int_equal(nd->node[r], want_node[r]);
    assert_int_equal(nd->local[r], want_local[r]);
  }
  /* Node 0: ranks 3, 1, 0 (positions 0, 1, 3); node 1: 4, 2; node 2: 5. */
  static const int want_members[6] = {3, 1, 0, 4, 2, 5};
  static const int want_first[4] = {0, 3, 5, 6};
  for (int i = 0; i < 6; i++) assert_int_equal(nd->members[i], want_members[i]);
  for (int m = 0; m < 4; m++) assert_int_equal(nd->first[m], want_first[m]);
  assert_int_equal(brd_algos_node_rank(nd, 1, 1), 2);
  brd_algos_nodes_destroy(nd);
  /* No labels: one node in position order. */
  assert_int_equal(brd_algos_nodes_create(&args, NULL, &nd), ncclSuccess);
  assert_int_equal(nd->nnodes, 1);
  assert_int_equal(nd->lmin, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(nd->members[i], order[i]);
  brd_algos_nodes_destroy(nd);
}

/* ---- every plan verifies -------------------------------------------------------- */

static void verify_plan(const char *what, hosts_fn fn, int n, const int *order,
                        const int *host, int nb, int proto) {
  brd_algos_args_t args = {n, order, nb, proto};
  brd_ir_plan_t *plan = NULL;
  assert_int_equal(fn(&args, host, &plan), ncclSuccess);
  for (int ip = 0; ip < 2; ip++) {
    brd_verify_opts_t opts = {ip, 3};
    brd_verify_report_t rep;
    ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
    if (res != ncclSuccess) {
      print_error("%s n=%d blocks=%d %s %s %s: %s\nhosts:", what, n, nb,
                  proto ? "LL" : "Simple", ip ? "in place" : "out of place",
                  order ? "shuffled" : "identity", rep.msg);
      for (int r = 0; r < n; r++) print_error(" %d", host[r]);
      print_error("\n");
    }
    assert_int_equal(res, ncclSuccess);
  }
  brd_plan_destroy(plan);
}

static const int layouts[][5] = {
    /* nnodes, sizes... */
    {2, 1, 1}, {2, 2, 2}, {2, 3, 3}, {2, 4, 4}, {3, 1, 1, 1}, {3, 2, 2, 2},
    {3, 3, 3, 3}, {3, 4, 4, 4}, {2, 2, 1}, {2, 1, 3}, {3, 3, 1, 2}, {3, 2, 2, 1},
    {3, 4, 1, 4},
};
#define NLAYOUTS ((int)(sizeof(layouts) / sizeof(layouts[0])))

static void test_plans_verify(void **state) {
  (void)state;
  uint64_t x = 20261125;
  for (int li = 0; li < NLAYOUTS; li++) {
    for (int il = 0; il < 2; il++) {
      int host[MAXR], order[MAXR];
      int n = layout(&layouts[li][1], layouts[li][0], il, host);
      shuffle(order, n, &x);
      for (int proto = 0; proto < 2; proto++)
        for (int nb = 1; nb <= 2; nb++) {
          const int *o = (nb + il) % 2 ? order : NULL;
          verify_plan("tree across nodes", brd_algos_tree_allreduce_hosts, n, o, host, nb,
                      proto);
          verify_plan("hierarchical", brd_algos_hier_allreduce, n, o, host, nb, proto);
          verify_plan("NVLS across nodes", brd_algos_nvls_hier_allreduce, n, o, host, nb,
                      proto);
        }
    }
  }
}

/* ---- structure ---------------------------------------------------------------- */

/* Calls f(ctx, rank, peer) for every channel of the plan. */
static void each_chan(const brd_ir_plan_t *p, void (*f)(void *, int, int), void *ctx) {
  for (int r = 0; r < p->nranks; r++)
    for (uint32_t c = 0; c < brd_ir_plan_rank(p, r)->nchans; c++)
      f(ctx, r, brd_ir_plan_chan(p, r, (int)c)->peer);
}

typedef struct {
  const int *host;
  int L;           /* ranks per node, consecutive ranks per node */
  int cross, bad;  /* channels between nodes; those breaking the rule */
  int intra_peers[MAXR], inter_peers[MAXR];
} count_t;

static void count_tree(void *ctx, int r, int q) {
  count_t *c = ctx;
  if (c->host[r] == c->host[q]) return;
  c->cross++;
  /* Heads: the node's first rank (tree 0) or its last (tree 1). */
  int lr = r % c->L, lq = q % c->L;
  if ((lr != 0 && lr != c->L - 1) || (lq != 0 && lq != c->L - 1)) c->bad++;
}

static void test_tree_crosses_at_heads(void **state) {
  (void)state;
  for (int N = 2; N <= 3; N++)
    for (int L = 2; L <= 4; L++) {
      int sizes[3] = {L, L, L}, host[MAXR];
      int n = layout(sizes, N, 0, host);
      brd_algos_args_t args = {n, NULL, 2, BRD_IR_PROTO_SIMPLE};
      brd_ir_plan_t *p = NULL;
      assert_int_equal(brd_algos_tree_allreduce_hosts(&args, host, &p), ncclSuccess);
      assert_int_equal(p->algo, BRD_IR_ALGO_TREE);
      count_t c = {.host = host, .L = L};
      each_chan(p, count_tree, &c);
      assert_int_equal(c.bad, 0);
      /* Two trees of N-1 node edges, each edge a channel both ways, the
       * trees' heads being different ranks. */
      assert_int_equal(c.cross, 4 * (N - 1));
      brd_plan_destroy(p);
      /* Without the layout the flat tree crosses more often. */
      assert_int_equal(brd_algos_tree_allreduce(&args, &p), ncclSuccess);
      count_t flat = {.host = host, .L = L};
      each_chan(p, count_tree, &flat);
      assert_true(flat.cross > c.cross);
      brd_plan_destroy(p);
    }
}

static void count_hier(void *ctx, int r, int q) {
  count_t *c = ctx;
  if (c->host[r] == c->host[q]) {
    c->intra_peers[r]++;
    /* Ring neighbours inside the node. */
    int d = ((q % c->L) - (r % c->L) + c->L) % c->L;
    if (d != 1 && d != c->L - 1) c->bad++;
  } else {
    c->inter_peers[r]++;
    c->cross++;
    if (r % c->L != q % c->L) c->bad++;
  }
}

static void test_hier_links(void **state) {
  (void)state;
  for (int N = 2; N <= 3; N++)
    for (int L = 2; L <= 4; L++) {
      int sizes[3] = {L, L, L}, host[MAXR];
      int n = layout(sizes, N, 0, host);
      for (int proto = 0; proto < 2; proto++) {
        brd_algos_args_t args = {n, NULL, 2, proto};
        brd_ir_plan_t *p = NULL;
        assert_int_equal(brd_algos_generate_hosts(BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, &args,
                                                  host, 0, 0, &p),
                         ncclSuccess);
        assert_int_equal(p->nchunks, 2u * (uint32_t)(L * N));
        count_t c = {.host = host, .L = L};
        each_chan(p, count_hier, &c);
        assert_int_equal(c.bad, 0);
        for (int r = 0; r < n; r++) {
          /* Predecessor and successor, one rank when there are two. */
          assert_int_equal(c.intra_peers[r], L == 2 ? 1 : 2);
          assert_int_equal(c.inter_peers[r], N == 2 ? 1 : 2);
        }
        brd_plan_destroy(p);
      }
    }
}

/* NVLS across nodes (nvls_hier.c): each node's ranks are one switch group
 * (device/ir.h), every rank's member index is its place in the node, and
 * the only other channels join ranks of one local index on neighbouring
 * nodes; nodes interleaved too. */
static void test_nvls_hier_groups(void **state) {
  (void)state;
  for (int N = 2; N <= 3; N++)
    for (int L = 2; L <= 4; L++)
      for (int il = 0; il < 2; il++) {
        int sizes[3] = {L, L, L}, host[MAXR];
        int n = layout(sizes, N, il, host);
        assert_true(brd_algos_nvls_hier_fits(host, n));
        brd_algos_args_t args = {n, NULL, 2, BRD_IR_PROTO_SIMPLE};
        brd_ir_plan_t *p = NULL;
        assert_int_equal(brd_algos_generate_hosts(BRD_IR_COLL_ALLREDUCE, BRD_ALGO_NVLS_TREE,
                                                  &args, host, 0, 0, &p),
                         ncclSuccess);
        assert_int_equal(p->algo, BRD_IR_ALGO_NVLS);
        assert_int_equal(p->proto, BRD_IR_PROTO_SIMPLE);
        assert_int_equal(p->nchunks, 2u * (uint32_t)(L * N));
        for (int r = 0; r < n; r++) {
          int nm = 0, self = brd_ir_switch_member(p, r, &nm), before = 0, same = 0;
          for (int q = 0; q < n; q++) {
            before += q < r && host[q] == host[r];
            same += host[q] == host[r];
          }
          assert_int_equal(nm, L);
          assert_int_equal(self, before);
          assert_int_equal(same, L);
          int cross = 0;
          for (uint32_t c = 0; c < brd_ir_plan_rank(p, r)->nchans; c++) {
            const brd_ir_chan_t *ch = brd_ir_plan_chan(p, r, (int)c);
            if (ch->type == BRD_IR_CHAN_SWITCH) continue;
            int q = ch->peer, lq = 0;
            for (int k = 0; k < q; k++) lq += host[k] == host[q];
            assert_int_not_equal(host[q], host[r]); /* nothing inside the node but the switch */
            assert_int_equal(lq, before);           /* the same local index */
            cross++;
          }
          assert_int_equal(cross, N == 2 ? 1 : 2);
        }
        brd_plan_destroy(p);
      }
  /* The groups carry the plan: with every switch channel put in group 0
   * (one switch over every rank), the ranks of one local index on every
   * node would reduce and store the same slots of every copy, and the
   * verifier says so. */
  {
    int sizes[2] = {2, 2}, host[MAXR];
    int n = layout(sizes, 2, 0, host);
    brd_algos_args_t args = {n, NULL, 1, BRD_IR_PROTO_SIMPLE};
    brd_ir_plan_t *p = NULL;
    assert_int_equal(brd_algos_nvls_hier_allreduce(&args, host, &p), ncclSuccess);
    brd_verify_opts_t opts = {0, 2};
    brd_verify_report_t rep;
    assert_int_equal(brd_plan_verify(p, &opts, &rep), ncclSuccess);
    brd_ir_chan_t *ct = (brd_ir_chan_t *)((char *)p + p->chan_off);
    for (uint32_t c = 0; c < p->nchans; c++) ct[c].group = 0;
    assert_int_not_equal(brd_plan_verify(p, &opts, &rep), ncclSuccess);
    /* Local index p of every node stores piece p into every copy. */
    assert_non_null(strstr(rep.msg, "race"));
    brd_plan_destroy(p);
  }
  /* Layouts it does not split: one node gets the NVLS all-reduce, nodes of
   * one rank or of different sizes the ring's. */
  int host[4] = {5, 5, 9, 9}, uneven[3] = {5, 5, 9};
  assert_false(brd_algos_nvls_hier_fits(NULL, 4));
  assert_false(brd_algos_nvls_hier_fits(uneven, 3));
  assert_true(brd_algos_nvls_hier_fits(host, 4));
  brd_algos_args_t args = {3, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p = NULL;
  assert_int_equal(brd_algos_nvls_hier_allreduce(&args, uneven, &p), ncclSuccess);
  assert_int_equal(p->algo, BRD_IR_ALGO_RING);
  brd_plan_destroy(p);
  assert_int_equal(brd_algos_nvls_hier_allreduce(&args, NULL, &p), ncclSuccess);
  assert_int_equal(p->algo, BRD_IR_ALGO_NVLS);
  brd_plan_destroy(p);
}

/* ---- the ring where the layout does not split --------------------------------- */

static void test_hier_falls_back_to_ring(void **state) {
  (void)state;
  static const int sizes[][4] = {{1, 4}, {2, 1, 1}, {3, 1, 1, 1}, {2, 2, 1}, {3, 2, 2, 3}};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    int host[MAXR];
    int n = layout(&sizes[i][1], sizes[i][0], 0, host);
    for (int proto = 0; proto < 2; proto++) {
      brd_algos_args_t args = {n, NULL, 2, proto};
      brd_ir_plan_t *h = NULL, *r = NULL;
      assert_int_equal(brd_algos_hier_allreduce(&args, host, &h), ncclSuccess);
      assert_int_equal(brd_algos_ring_allreduce(&args, &r), ncclSuccess);
      assert_int_equal(h->total_bytes, r->total_bytes);
      assert_memory_equal(h, r, r->total_bytes);
      brd_plan_destroy(h);
      brd_plan_destroy(r);
      /* No layout at all: one node. */
      assert_int_equal(brd_algos_hier_allreduce(&args, NULL, &h), ncclSuccess);
      assert_int_equal(h->algo, BRD_IR_ALGO_RING);
      assert_int_equal(h->nchunks, 2u * (uint32_t)n);
      brd_plan_destroy(h);
    }
  }
  /* Bad arguments are refused before the layout is read. */
  brd_algos_args_t bad = {4, NULL, 0, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p = (brd_ir_plan_t *)0x1;
  int host[4] = {0, 0, 1, 1};
  assert_int_equal(brd_algos_hier_allreduce(&bad, host, &p), ncclInvalidArgument);
  assert_int_equal(brd_algos_tree_allreduce_hosts(&bad, host, &p), ncclInvalidArgument);
  assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
}

/* ---- the plan cache and the layout ---------------------------------------------- */

/* Peers of rank r's channels, as a bit set. */
static unsigned peers_of(const brd_ir_plan_t *p, int r) {
  unsigned bits = 0;
  for (uint32_t c = 0; c < brd_ir_plan_rank(p, r)->nchans; c++)
    bits |= 1u << brd_ir_plan_chan(p, r, (int)c)->peer;
  return bits;
}

static void test_plan_cache_layout(void **state) {
  (void)state;
  brd_plan_cache_t c;
  brd_plans_init(&c, 4);
  static const int split[4] = {3, 3, 8, 8}, inter[4] = {3, 8, 3, 8};
  const brd_ir_plan_t *p, *q;
  /* One node: the ring's plan, rank 0 between 3 and 1. */
  assert_int_equal(brd_plans_get(&c, BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, BRD_IR_PROTO_SIMPLE,
                                 1, 0, 0, &p), ncclSuccess);
  assert_int_equal(peers_of(p, 0), (1u << 1) | (1u << 3));
  /* Ranks 0,1 | 2,3: rank 0 links to 1 inside, 2 across. */
  assert_int_equal(brd_plans_hosts_set(&c, split), ncclSuccess);
  assert_int_equal(brd_plans_get(&c, BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, BRD_IR_PROTO_SIMPLE,
                                 1, 0, 0, &p), ncclSuccess);
  assert_int_equal(peers_of(p, 0), (1u << 1) | (1u << 2));
  /* The same layout again keeps the plan. */
  assert_int_equal(brd_plans_hosts_set(&c, split), ncclSuccess);
  assert_int_equal(brd_plans_get(&c, BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, BRD_IR_PROTO_SIMPLE,
                                 1, 0, 0, &q), ncclSuccess);
  assert_ptr_equal(p, q);
  assert_int_equal(c.n, 1);
  /* Ranks 0,2 | 1,3: rank 0 links to 2 inside, 1 across. */
  assert_int_equal(brd_plans_hosts_set(&c, inter), ncclSuccess);
  assert_int_equal(c.n, 0);
  assert_int_equal(brd_plans_get(&c, BRD_IR_COLL_ALLREDUCE, BRD_ALGO_HIER, BRD_IR_PROTO_SIMPLE,
                                 1, 0, 0, &p), ncclSuccess);
  assert_int_equal(peers_of(p, 0), (1u << 2) | (1u << 1));
  assert_int_equal(peers_of(p, 1), (1u << 3) | (1u << 0));
  /* The tree across those nodes: rank 0 heads tree 0 on its node. */
  assert_int_equal(brd_plans_get(&c, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TREE, BRD_IR_PROTO_LL,
                                 1, 0, 0, &p), ncclSuccess);
  assert_int_equal(p->nslots, 4u * 4u); /* 4 chunks x (3 children + a down slot) */
  brd_plans_fini(&c);
}

/* ---- the verifier sees every op -------------------------------------------------- */

/* Dropping any data op, or the post-op flag, is caught; dropping waits
 * is caught at least once per Simple plan (some are redundant). LL plans
 * wait only for credits, which the verifier sees missing once a ring has
 * more transfers than slots (4 ranks a node here; as for the ring
 * all-reduce's own). */
static void test_dropped_op_caught(void **state) {
  (void)state;
  static const int sizes[][4] = {{2, 2, 2}, {3, 2, 2, 2}, {2, 3, 1}, {2, 4, 4}};
  hosts_fn fns[2] = {brd_algos_tree_allreduce_hosts, brd_algos_hier_allreduce};
  long tried = 0;
  for (size_t li = 0; li < sizeof(sizes) / sizeof(sizes[0]); li++) {
    int host[MAXR];
    int n = layout(&sizes[li][1], sizes[li][0], 0, host);
    for (int g = 0; g < 2; g++)
      for (int proto = 0; proto < 2; proto++) {
        brd_algos_args_t args = {n, NULL, 1, proto};
        brd_ir_plan_t *plan = NULL;
        assert_int_equal(fns[g](&args, host, &plan), ncclSuccess);
        brd_ir_op_t *ops = (brd_ir_op_t *)((char *)plan + plan->op_off);
        int waits_caught = 0, postops = 0;
        for (uint32_t i = 0; i < plan->nops; i++) {
          brd_ir_op_t saved = ops[i];
          int data = brd_ir_op_is_data(saved.code);
          for (int what = 0; what < 2; what++) {
            if (what == 0) {
              memset(&ops[i], 0, sizeof(ops[i])); /* NOP */
            } else {
              if (!(saved.flags & BRD_IR_F_POSTOP)) continue;
              ops[i].flags &= (uint8_t)~BRD_IR_F_POSTOP;
              postops++;
            }
            for (int ip = 0; ip < 2; ip++) {
              brd_verify_opts_t opts = {ip, 2};
              brd_verify_report_t rep;
              ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
              if ((data || what == 1) && res == ncclSuccess) {
                print_error("%s %s layout %zu: dropping %s of op %u went unnoticed\n",
                            g ? "hierarchical" : "tree", proto ? "LL" : "Simple", li,
                            what ? "the post-op" : "the op", i);
                fail();
              }
              if (saved.code == BRD_IR_OP_WAIT && what == 0 && res != ncclSuccess)
                waits_caught++;
              tried++;
            }
            ops[i] = saved;
          }
        }
        assert_true(postops > 0);
        if (proto == BRD_IR_PROTO_SIMPLE || (g == 1 && sizes[li][1] == 4))
          assert_true(waits_caught > 0);
        brd_plan_destroy(plan);
      }
  }
  assert_true(tried > 500);
}

/* ---- allocation failures -------------------------------------------------------- */

static void test_alloc_failures(void **state) {
  (void)state;
  static const int host[6] = {5, 5, 5, 8, 8, 8};
  static const int order[6] = {4, 0, 3, 1, 5, 2};
  hosts_fn fns[2] = {brd_algos_tree_allreduce_hosts, brd_algos_hier_allreduce};
  for (int g = 0; g < 2; g++) {
    for (int proto = 0; proto < 2; proto++) {
      brd_algos_args_t args = {6, order, 2, proto};
      int failures_seen = 0;
      for (long k = 0;; k++) {
        brd_ir_plan_t *p = NULL;
        alloc_calls = 0;
        fail_at = k;
        live = 0;
        armed = 1;
        ncclResult_t res = fns[g](&args, host, &p);
        armed = 0;
        if (res == ncclSuccess) {
          assert_int_equal(live, 1); /* the plan */
          brd_plan_destroy(p);
          break;
        }
        assert_int_equal(res, ncclSystemError);
        assert_int_equal(live, 0);
        assert_null(p);
        failures_seen++;
      }
      assert_true(failures_seen >= 3);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_by_hand),
      cmocka_unit_test(test_plans_verify),
      cmocka_unit_test(test_tree_crosses_at_heads),
      cmocka_unit_test(test_hier_links),
      cmocka_unit_test(test_nvls_hier_groups),
      cmocka_unit_test(test_hier_falls_back_to_ring),
      cmocka_unit_test(test_plan_cache_layout),
      cmocka_unit_test(test_dropped_op_caught),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
