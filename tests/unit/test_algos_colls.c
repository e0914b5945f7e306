/*
 * Unit tests for the generators of every collective other than the plain
 * all-reduce (src/algos/): all-gather, reduce-scatter, broadcast, reduce,
 * all-to-all, gather, scatter, the rank-ordered all-reduces and the
 * point-to-point plans.
 *
 *   - Every generated plan verifies (src/plan/verify.c), for nranks 1..16,
 *     1 to 4 blocks, both protocols, in and out of place, every root for
 *     small n and three roots for larger, identity and shuffled rank
 *     orders, over three loop iterations.
 *   - The verifier catches a dropped data op in every generator, and a
 *     broken cross-launch handshake (acknowledgement removed).
 *   - Point-to-point: random groups of sends and receives (self included,
 *     several per pair, different sizes, empty ones) verify against a
 *     pairing computed here; each rank's own plan equals its part of the
 *     whole plan; mismatched pairs and bad peers are refused.
 *   - Rank-ordered reductions list their sources in rank order.
 *   - Argument errors, and allocation failures unwinding without leaks.
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
#include "plan/tune.h"
#include "plan/verify.h"

#include "failalloc.h"

/* ---- the generators under test ---------------------------------------------- */

typedef struct gen {
  const char *name;
  int coll, algo, det, rooted;
} gen_t;

static const gen_t gens[] = {
    {"ring all-gather", BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_RING, 0, 0},
    {"direct all-gather", BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_ONESHOT, 0, 0},
    {"ring reduce-scatter", BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_RING, 0, 0},
    {"direct reduce-scatter", BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_ONESHOT, 0, 0},
    {"ordered reduce-scatter", BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_ONESHOT, 1, 0},
    {"chain broadcast", BRD_IR_COLL_BROADCAST, BRD_IR_ALGO_RING, 0, 1},
    {"direct broadcast", BRD_IR_COLL_BROADCAST, BRD_IR_ALGO_ONESHOT, 0, 1},
    {"chain reduce", BRD_IR_COLL_REDUCE, BRD_IR_ALGO_RING, 0, 1},
    {"direct reduce", BRD_IR_COLL_REDUCE, BRD_IR_ALGO_ONESHOT, 0, 1},
    {"ordered reduce", BRD_IR_COLL_REDUCE, BRD_IR_ALGO_ONESHOT, 1, 1},
    {"pairwise all-to-all", BRD_IR_COLL_ALLTOALL, BRD_IR_ALGO_ONESHOT, 0, 0},
    {"direct gather", BRD_IR_COLL_GATHER, BRD_IR_ALGO_ONESHOT, 0, 1},
    {"direct scatter", BRD_IR_COLL_SCATTER, BRD_IR_ALGO_ONESHOT, 0, 1},
    {"ordered one-shot all-reduce", BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_ONESHOT, 1, 0},
    {"ordered two-shot all-reduce", BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TWOSHOT, 1, 0},
};
#define NGENS ((int)(sizeof(gens) / sizeof(gens[0])))

static brd_ir_plan_t *make(const gen_t *g, int n, const int *order, int nblocks,
                           int proto, int root) {
  brd_algos_args_t args = {n, order, nblocks, proto};
  brd_ir_plan_t *plan = NULL;
  ncclResult_t res = brd_algos_generate(g->coll, g->algo, &args, root, g->det, &plan);
  if (res != ncclSuccess)
    print_error("%s n=%d blocks=%d proto=%d root=%d: generation failed (%d)\n",
                g->name, n, nblocks, proto, root, res);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(plan->coll, g->coll);
  assert_int_equal(plan->root, g->rooted ? root : 0);
  return plan;
}

static void verify_one(const gen_t *g, int n, const int *order, int nblocks,
                       int proto, int root, int in_place) {
  brd_ir_plan_t *plan = make(g, n, order, nblocks, proto, root);
  brd_verify_opts_t opts = {in_place, 3};
  brd_verify_report_t rep;
  ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
  if (res != ncclSuccess)
    print_error("%s %s n=%d blocks=%d root=%d %s %s: %s\n", g->name,
                proto ? "LL" : "Simple", n, nblocks, root,
                in_place ? "in place" : "out of place",
                order ? "shuffled" : "identity", rep.msg);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_OK);
  brd_plan_destroy(plan);
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

static void test_generated_plans_verify(void **state) {
  (void)state;
  uint64_t x = 987654321;
  for (int n = 1; n <= 16; n++) {
    int order[16];
    shuffle(order, n, &x);
    int roots[3] = {0, n - 1, n / 2}, nroots = n <= 4 ? n : 3;
    for (int gi = 0; gi < NGENS; gi++) {
      const gen_t *g = &gens[gi];
      for (int ri = 0; ri < (g->rooted ? nroots : 1); ri++) {
        int root = g->rooted ? (n <= 4 ? ri : roots[ri]) : 0;
        for (int proto = 0; proto < 2; proto++) {
          for (int nb = 1; nb <= (n <= 8 ? 4 : 2); nb++) {
            for (int ip = 0; ip < 2; ip++) {
              const int *o = (n + nb + ip) % 2 ? order : NULL;
              verify_one(g, n, o, nb, proto, root, ip);
            }
          }
        }
      }
    }
  }
}

/* Removing any data op (or, for the chains and direct rooted plans, any
 * acknowledgement) is caught. */
static void test_dropped_op_caught(void **state) {
  (void)state;
  long tried = 0;
  for (int gi = 0; gi < NGENS; gi++) {
    for (int proto = 0; proto < 2; proto++) {
      for (int n = 2; n <= 4; n++) {
        brd_ir_plan_t *plan = make(&gens[gi], n, NULL, 2, proto, n - 1);
        brd_ir_op_t *ops = (brd_ir_op_t *)((char *)plan + plan->op_off);
        for (uint32_t i = 0; i < plan->nops; i++) {
          brd_ir_op_t saved = ops[i];
          int sync = ops[i].code == BRD_IR_OP_WAIT || ops[i].code == BRD_IR_OP_SIGNAL;
          memset(&ops[i], 0, sizeof(ops[i])); /* NOP */
          for (int ip = 0; ip < 2; ip++) {
            brd_verify_opts_t opts = {ip, 2};
            brd_verify_report_t rep;
            ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
            /* Every data op is needed, except the copy of an all-gather's
             * or gather's own input into its own segment in place. A
             * removed wait or signal either breaks the plan or was
             * redundant; it must never crash. */
            int own_copy = ip && saved.code == BRD_IR_OP_COPY &&
                           (saved.ref[0].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT &&
                           (gens[gi].coll == BRD_IR_COLL_ALLGATHER ||
                            gens[gi].coll == BRD_IR_COLL_GATHER ||
                            gens[gi].coll == BRD_IR_COLL_BROADCAST ||
                            gens[gi].coll == BRD_IR_COLL_SCATTER);
            if (!sync && !own_copy && res == ncclSuccess) {
              print_error("%s %s n=%d: dropping op %u went unnoticed\n",
                          gens[gi].name, proto ? "LL" : "Simple", n, i);
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
  assert_true(tried > 2000);
}

/* Each plan's end needs its acknowledgements: without the last signal of
 * the chain (or the root's done signals) a rank could finish before
 * another joined, and the verifier says why. */
static void test_missing_ack_caught(void **state) {
  (void)state;
  static const int rooted[] = {5, 6, 7, 8, 11, 12}; /* indices in gens */
  for (size_t k = 0; k < sizeof(rooted) / sizeof(rooted[0]); k++) {
    const gen_t *g = &gens[rooted[k]];
    brd_ir_plan_t *plan = make(g, 4, NULL, 1, BRD_IR_PROTO_SIMPLE, 1);
    int caught = 0, dropped = 0;
    for (int r = 0; r < 4; r++) {
      brd_ir_op_t *ops = (brd_ir_op_t *)((char *)plan + plan->op_off) +
                         brd_ir_plan_block(plan, r, 0)->op_first;
      uint32_t nops = brd_ir_plan_block(plan, r, 0)->nops;
      /* The last op of a rank that ends in a WAIT is its handshake. */
      if (nops == 0 || ops[nops - 1].code != BRD_IR_OP_WAIT) continue;
      brd_ir_op_t saved = ops[nops - 1];
      memset(&ops[nops - 1], 0, sizeof(saved));
      brd_verify_report_t rep;
      if (brd_plan_verify(plan, NULL, &rep) != ncclSuccess) {
        caught++;
        assert_true(rep.kind == BRD_VERIFY_LAUNCH_ORDER || rep.kind == BRD_VERIFY_REUSE ||
                    rep.kind == BRD_VERIFY_RACE);
      }
      dropped++;
      ops[nops - 1] = saved;
    }
    if (dropped == 0 || caught != dropped)
      print_error("%s: %d of %d final waits dropped were caught\n", g->name, caught,
                  dropped);
    assert_true(dropped > 0);
    assert_int_equal(caught, dropped);
    brd_plan_destroy(plan);
  }
}

/* ---- structure ------------------------------------------------------------- */

static int peer_of(const brd_ir_plan_t *p, int rank, const brd_ir_ref_t *ref) {
  return ref->chan == BRD_IR_CHAN_LOCAL ? rank : brd_ir_plan_chan(p, rank, ref->chan)->peer;
}

/* Rank-ordered reductions: the final reduce of each rank lists rank 0's
 * data first, then rank 1's, ..., with the own input at its own place,
 * under a shuffled order. */
static void test_ordered_sources(void **state) {
  (void)state;
  static const int order[5] = {3, 0, 4, 2, 1};
  const int det_gens[] = {4, 9, 13, 14};
  for (size_t k = 0; k < sizeof(det_gens) / sizeof(det_gens[0]); k++) {
    const gen_t *g = &gens[det_gens[k]];
    for (int proto = 0; proto < 2; proto++) {
      brd_ir_plan_t *plan = make(g, 5, order, 2, proto, 2);
      int reduces = 0;
      for (int r = 0; r < 5; r++) {
        for (int b = 0; b < 2; b++) {
          const brd_ir_op_t *o = brd_ir_plan_ops(plan, r, b);
          for (uint32_t i = 0; i < brd_ir_plan_block(plan, r, b)->nops; i++) {
            if (!(o[i].flags & BRD_IR_F_POSTOP)) continue;
            reduces++;
            assert_int_equal(o[i].nsrc, 5);
            for (int s = 0; s < 5; s++) {
              const brd_ir_ref_t *ref = &o[i].ref[s];
              if ((ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT) {
                assert_int_equal(s, r);
                continue;
              }
              /* A scratch slot: find who writes it. */
              int writer = -1;
              for (int q = 0; q < 5 && writer < 0; q++) {
                for (uint32_t j = 0; j < brd_ir_plan_block(plan, q, b)->nops; j++) {
                  const brd_ir_op_t *w = &brd_ir_plan_ops(plan, q, b)[j];
                  for (int d = w->nsrc; d < w->nsrc + w->ndst; d++)
                    if ((w->ref[d].buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH &&
                        peer_of(plan, q, &w->ref[d]) == r && q != r &&
                        w->ref[d].index == ref->index)
                      writer = q;
                }
              }
              assert_int_equal(writer, s);
            }
          }
        }
      }
      assert_true(reduces > 0);
      brd_plan_destroy(plan);
    }
  }
}

/* Non-roots never read their input in a broadcast or scatter, nor write
 * their output in a reduce or gather (the verifier says so too; this
 * checks the plans directly). */
static void test_root_only_buffers(void **state) {
  (void)state;
  for (int gi = 0; gi < NGENS; gi++) {
    const gen_t *g = &gens[gi];
    if (!g->rooted) continue;
    int in_root_only = g->coll == BRD_IR_COLL_BROADCAST || g->coll == BRD_IR_COLL_SCATTER;
    for (int proto = 0; proto < 2; proto++) {
      brd_ir_plan_t *plan = make(g, 5, NULL, 2, proto, 3);
      for (int r = 0; r < 5; r++) {
        if (r == 3) continue;
        for (int b = 0; b < 2; b++) {
          const brd_ir_op_t *o = brd_ir_plan_ops(plan, r, b);
          for (uint32_t i = 0; i < brd_ir_plan_block(plan, r, b)->nops; i++) {
            for (int k = 0; k < o[i].nsrc + o[i].ndst; k++) {
              uint8_t kind = o[i].ref[k].buf & BRD_IR_BUF_MASK;
              int local = o[i].ref[k].chan == BRD_IR_CHAN_LOCAL;
              if (in_root_only) assert_true(kind != BRD_IR_BUF_INPUT);
              else assert_false(kind == BRD_IR_BUF_OUTPUT && local);
            }
          }
        }
      }
      brd_plan_destroy(plan);
    }
  }
}

/* All-to-all spreads the peer offsets over the blocks. */
static void test_alltoall_blocks(void **state) {
  (void)state;
  brd_ir_plan_t *plan = make(&gens[10], 7, NULL, 3, BRD_IR_PROTO_SIMPLE, 0);
  for (int r = 0; r < 7; r++) {
    for (int b = 0; b < 3; b++) {
      int peers = 0;
      const brd_ir_op_t *o = brd_ir_plan_ops(plan, r, b);
      for (uint32_t i = 0; i < brd_ir_plan_block(plan, r, b)->nops; i++)
        if (o[i].code == BRD_IR_OP_PUT) peers |= 1 << peer_of(plan, r, &o[i].ref[1]);
      /* Offsets s with (s - 1) % 3 == b: b+1 and b+4 (and 7 for none). */
      int want = (1 << ((r + b + 1) % 7)) | (1 << ((r + b + 4) % 7));
      assert_int_equal(peers, want);
    }
  }
  brd_plan_destroy(plan);
}

/* ---- point-to-point ---------------------------------------------------------- */

#define SR_MAXN 6
#define SR_MAXOPS 24

typedef struct sendrecv_world {
  int n;
  brd_algos_sendrecv_op_t send[SR_MAXN][SR_MAXOPS], recv[SR_MAXN][SR_MAXOPS];
  brd_algos_sendrecv_rank_t ranks[SR_MAXN];
  /* The pairing, worked out here for the verifier. */
  uint32_t in_chunks[SR_MAXN][SR_MAXOPS];
  brd_verify_p2p_seg_t out[SR_MAXN][SR_MAXOPS];
  brd_verify_p2p_t table[SR_MAXN];
} sendrecv_world_t;

/* A random group: each rank sends to random peers (itself included) with
 * random chunk counts; every receive is listed in the order the sender's
 * calls come, interleaved between senders at random. */
static void sendrecv_random(sendrecv_world_t *w, int n, uint64_t *x) {
  memset(w, 0, sizeof(*w));
  w->n = n;
  int nsend[SR_MAXN] = {0};
  /* Sends in call order per rank. */
  for (int r = 0; r < n; r++) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    int k = (int)(*x % 6);
    for (int i = 0; i < k; i++) {
      *x ^= *x << 13;
      *x ^= *x >> 7;
      *x ^= *x << 17;
      w->send[r][i].peer = (int)(*x % (uint64_t)n);
      w->send[r][i].nchunks = (uint32_t)((*x >> 8) % 7); /* 0..6 */
    }
    nsend[r] = k;
  }
  /* Receives: walk the senders' lists in a random interleaving, keeping
   * each sender's order per receiver. */
  int next[SR_MAXN] = {0}, left = 0;
  int nrecv[SR_MAXN] = {0};
  for (int r = 0; r < n; r++) left += nsend[r];
  while (left > 0) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    int s = (int)(*x % (uint64_t)n);
    if (next[s] == nsend[s]) continue;
    const brd_algos_sendrecv_op_t *op = &w->send[s][next[s]];
    int d = op->peer, j = nrecv[d]++;
    w->recv[d][j].peer = s;
    w->recv[d][j].nchunks = op->nchunks;
    w->out[d][j].src_rank = s;
    w->out[d][j].src_seg = next[s];
    w->out[d][j].nchunks = op->nchunks;
    w->in_chunks[s][next[s]] = op->nchunks;
    next[s]++;
    left--;
  }
  for (int r = 0; r < n; r++) {
    w->ranks[r].nsend = nsend[r];
    w->ranks[r].send = w->send[r];
    w->ranks[r].nrecv = nrecv[r];
    w->ranks[r].recv = w->recv[r];
    w->table[r].nin = nsend[r];
    w->table[r].in_chunks = w->in_chunks[r];
    w->table[r].nout = nrecv[r];
    w->table[r].out = w->out[r];
  }
}

static void test_sendrecv_random_groups_verify(void **state) {
  (void)state;
  uint64_t x = 424242;
  int verified = 0;
  for (int trial = 0; trial < 300; trial++) {
    sendrecv_world_t w;
    int n = 1 + trial % SR_MAXN;
    sendrecv_random(&w, n, &x);
    brd_algos_sendrecv_args_t args = {n, -1, w.ranks};
    brd_ir_plan_t *plan;
    assert_int_equal(brd_algos_sendrecv(&args, &plan), ncclSuccess);
    assert_int_equal(plan->coll, BRD_IR_COLL_SENDRECV);
    assert_int_equal(plan->flags, BRD_IR_PLAN_F_FIXED | BRD_IR_PLAN_F_ONE_PHASE);
    brd_verify_report_t rep;
    ncclResult_t res = brd_plan_verify_p2p(plan, w.table, &rep);
    if (res != ncclSuccess) print_error("trial %d n=%d: %s\n", trial, n, rep.msg);
    assert_int_equal(res, ncclSuccess);
    verified++;
    /* Each rank's own plan is its part of the whole: same ops per block
     * and the same peers behind its channels. */
    for (int r = 0; r < n; r++) {
      brd_algos_sendrecv_args_t one = {n, r, w.ranks};
      brd_ir_plan_t *mine;
      assert_int_equal(brd_algos_sendrecv(&one, &mine), ncclSuccess);
      for (int q = 0; q < n; q++) {
        if (q == r) continue;
        for (int b = 0; b < mine->nblocks; b++)
          assert_int_equal(brd_ir_plan_block(mine, q, b)->nops, 0);
      }
      for (int b = 0; b < mine->nblocks; b++) {
        uint32_t nops = brd_ir_plan_block(mine, r, b)->nops;
        assert_int_equal(nops, brd_ir_plan_block(plan, r, b)->nops);
        const brd_ir_op_t *a = brd_ir_plan_ops(mine, r, b), *c = brd_ir_plan_ops(plan, r, b);
        for (uint32_t i = 0; i < nops; i++) {
          assert_int_equal(a[i].code, c[i].code);
          assert_int_equal(a[i].k, c[i].k);
          assert_int_equal(a[i].chunk, c[i].chunk);
          for (int k = 0; k < a[i].nsrc + a[i].ndst; k++) {
            assert_int_equal(peer_of(mine, r, &a[i].ref[k]), peer_of(plan, r, &c[i].ref[k]));
            uint8_t kind = a[i].ref[k].buf & BRD_IR_BUF_MASK;
            if (kind == BRD_IR_BUF_INPUT || kind == BRD_IR_BUF_OUTPUT)
              /* Same segment and chunk, whatever nchunks each plan has. */
              assert_int_equal(a[i].ref[k].index / mine->nchunks * 65536u +
                                   a[i].ref[k].index % mine->nchunks,
                               c[i].ref[k].index / plan->nchunks * 65536u +
                                   c[i].ref[k].index % plan->nchunks);
            else
              assert_int_equal(a[i].ref[k].index, c[i].ref[k].index);
          }
        }
      }
      brd_plan_destroy(mine);
    }
    brd_plan_destroy(plan);
  }
  assert_int_equal(verified, 300);
}

/* All pairs exchange in both directions with different sizes per pair,
 * self included, several transfers per pair, deep enough to reuse slots. */
static void test_sendrecv_all_pairs(void **state) {
  (void)state;
  for (int n = 1; n <= 5; n++) {
    sendrecv_world_t w;
    memset(&w, 0, sizeof(w));
    int nrecv[SR_MAXN] = {0};
    for (int r = 0; r < n; r++) {
      for (int k = 0; k < 2 * n; k++) {
        int p = (r + k) % n;
        uint32_t ch = (uint32_t)(1 + (r * 7 + p * 3 + k) % 11);
        w.send[r][k].peer = p;
        w.send[r][k].nchunks = ch;
        w.in_chunks[r][k] = ch;
      }
      w.ranks[r].nsend = 2 * n;
      w.ranks[r].send = w.send[r];
    }
    /* Receivers list their receives by sender, then in the sender's order. */
    for (int d = 0; d < n; d++) {
      for (int s = n - 1; s >= 0; s--) {
        for (int k = 0; k < 2 * n; k++) {
          if (w.send[s][k].peer != d) continue;
          int j = nrecv[d]++;
          w.recv[d][j].peer = s;
          w.recv[d][j].nchunks = w.send[s][k].nchunks;
          w.out[d][j].src_rank = s;
          w.out[d][j].src_seg = k;
          w.out[d][j].nchunks = w.send[s][k].nchunks;
        }
      }
      w.ranks[d].nrecv = nrecv[d];
      w.ranks[d].recv = w.recv[d];
    }
    for (int r = 0; r < n; r++) {
      w.table[r].nin = 2 * n;
      w.table[r].in_chunks = w.in_chunks[r];
      w.table[r].nout = nrecv[r];
      w.table[r].out = w.out[r];
    }
    brd_algos_sendrecv_args_t args = {n, -1, w.ranks};
    brd_ir_plan_t *plan;
    assert_int_equal(brd_algos_sendrecv(&args, &plan), ncclSuccess);
    assert_int_equal(plan->nblocks, n);
    brd_verify_report_t rep;
    ncclResult_t res = brd_plan_verify_p2p(plan, w.table, &rep);
    if (res != ncclSuccess) print_error("n=%d: %s\n", n, rep.msg);
    assert_int_equal(res, ncclSuccess);

    /* The verifier notices a pairing the plan does not implement: two
     * receives from the same sender swapped. */
    if (n >= 2) {
      brd_verify_p2p_seg_t saved[2];
      int d = 1, a = -1, c = -1;
      for (int j = 0; j < nrecv[d]; j++) {
        if (w.out[d][j].src_rank != 0) continue;
        if (a < 0) a = j;
        else if (c < 0 && w.out[d][j].nchunks == w.out[d][a].nchunks) c = j;
      }
      if (c >= 0) {
        saved[0] = w.out[d][a];
        saved[1] = w.out[d][c];
        w.out[d][a] = saved[1];
        w.out[d][c] = saved[0];
        assert_int_equal(brd_plan_verify_p2p(plan, w.table, &rep), ncclInternalError);
        assert_int_equal(rep.kind, BRD_VERIFY_MISMATCH);
        w.out[d][a] = saved[0];
        w.out[d][c] = saved[1];
      }
    }
    brd_plan_destroy(plan);
  }
}

/* A sender that does not wait for its last credit could finish while the
 * receiver still reads its slots: one-phase plans forbid that. */
static void test_sendrecv_final_credit_needed(void **state) {
  (void)state;
  brd_algos_sendrecv_op_t s = {1, 3}, r = {0, 3};
  brd_algos_sendrecv_rank_t ranks[2] = {{1, 0, &s, NULL}, {0, 1, NULL, &r}};
  uint32_t in_chunks[1] = {3};
  brd_verify_p2p_seg_t out[1] = {{0, 0, 3}};
  brd_verify_p2p_t table[2] = {{1, in_chunks, 0, NULL}, {0, NULL, 1, out}};
  brd_algos_sendrecv_args_t args = {2, -1, ranks};
  brd_ir_plan_t *plan;
  assert_int_equal(brd_algos_sendrecv(&args, &plan), ncclSuccess);
  brd_verify_report_t rep;
  assert_int_equal(brd_plan_verify_p2p(plan, table, &rep), ncclSuccess);
  brd_ir_op_t *ops = (brd_ir_op_t *)((char *)plan + plan->op_off) +
                     brd_ir_plan_block(plan, 0, 0)->op_first;
  uint32_t nops = brd_ir_plan_block(plan, 0, 0)->nops;
  assert_int_equal(ops[nops - 1].code, BRD_IR_OP_WAIT);
  memset(&ops[nops - 1], 0, sizeof(ops[0]));
  assert_int_equal(brd_plan_verify_p2p(plan, table, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_REUSE);
  /* Without its pairing a point-to-point plan is not verified at all. */
  assert_int_equal(brd_plan_verify(plan, NULL, &rep), ncclInternalError);
  assert_int_equal(rep.kind, BRD_VERIFY_MALFORMED);
  brd_plan_destroy(plan);
}

static void test_sendrecv_bad_groups(void **state) {
  (void)state;
  brd_ir_plan_t *plan = (brd_ir_plan_t *)0x1;
  /* Sizes that do not match across a pair (whole-plan generation). */
  brd_algos_sendrecv_op_t s = {1, 3}, r = {0, 2};
  brd_algos_sendrecv_rank_t ranks[2] = {{1, 0, &s, NULL}, {0, 1, NULL, &r}};
  brd_algos_sendrecv_args_t args = {2, -1, ranks};
  assert_int_equal(brd_algos_sendrecv(&args, &plan), ncclInvalidArgument);
  /* A send to self without its receive, or of another size. */
  brd_algos_sendrecv_op_t self_s = {0, 2}, self_r = {0, 1};
  brd_algos_sendrecv_rank_t lone[1] = {{1, 0, &self_s, NULL}};
  brd_algos_sendrecv_args_t one = {1, 0, lone};
  assert_int_equal(brd_algos_sendrecv(&one, &plan), ncclInvalidArgument);
  lone[0].nrecv = 1;
  lone[0].recv = &self_r;
  assert_int_equal(brd_algos_sendrecv(&one, &plan), ncclInvalidArgument);
  /* A peer out of range; a rank out of range. */
  brd_algos_sendrecv_op_t bad = {5, 1};
  brd_algos_sendrecv_rank_t far[2] = {{1, 0, &bad, NULL}, {0, 0, NULL, NULL}};
  brd_algos_sendrecv_args_t fa = {2, 0, far};
  assert_int_equal(brd_algos_sendrecv(&fa, &plan), ncclInvalidArgument);
  fa.rank = 2;
  assert_int_equal(brd_algos_sendrecv(&fa, &plan), ncclInvalidArgument);
  /* Too many transfers x chunks for 16-bit indices. */
  static brd_algos_sendrecv_op_t many[300];
  for (int i = 0; i < 300; i++) many[i] = (brd_algos_sendrecv_op_t){1, 300};
  brd_algos_sendrecv_rank_t big[2] = {{300, 0, many, NULL}, {0, 0, NULL, NULL}};
  brd_algos_sendrecv_args_t ba = {2, 0, big};
  assert_int_equal(brd_algos_sendrecv(&ba, &plan), ncclInvalidArgument);
  assert_ptr_equal(plan, (brd_ir_plan_t *)0x1);
}

/* ---- sizes, errors, allocation failures ------------------------------------ */

static void test_scratch_sizes(void **state) {
  (void)state;
  setenv("NCCL_BUFFSIZE", "1048576", 1);
  setenv("NCCL_LL_BUFFSIZE", "65536", 1);
  brd_param_reload();
  /* Ring all-gather, 4 ranks, 2 blocks: 3 transfers, 3 slots per block
   * sharing a buffer: 2 phases x 6 x 349520 (1048576 / 3 to 16). */
  brd_ir_plan_t *p = make(&gens[0], 4, NULL, 2, BRD_IR_PROTO_SIMPLE, 0);
  assert_int_equal(brd_plan_scratch_bytes(p), 2 * 6 * 349520);
  brd_plan_destroy(p);
  /* Chain broadcast LL: 4 slots per block share the LL buffer. */
  p = make(&gens[5], 3, NULL, 1, BRD_IR_PROTO_LL, 0);
  assert_int_equal(brd_plan_scratch_bytes(p), 2 * 4 * 16384);
  brd_plan_destroy(p);
  /* All-to-all: one slot per sender whatever the block count. */
  p = make(&gens[10], 5, NULL, 3, BRD_IR_PROTO_SIMPLE, 0);
  assert_int_equal(brd_plan_scratch_bytes(p), 2 * 4 * 262144);
  brd_plan_destroy(p);
  /* Point-to-point: one phase, 4 slots per sender, a quarter of the
   * buffer per sender. */
  brd_algos_sendrecv_rank_t none[3] = {{0, 0, NULL, NULL}, {0, 0, NULL, NULL},
                                  {0, 0, NULL, NULL}};
  brd_algos_sendrecv_args_t args = {3, 0, none};
  assert_int_equal(brd_algos_sendrecv(&args, &p), ncclSuccess);
  assert_int_equal(brd_plan_scratch_bytes(p), 3 * 4 * 65536);
  brd_plan_layout_t l;
  assert_int_equal(brd_plan_layout_init(p, 1000, ncclFloat32, 3 * 4 * 65536, &l),
                   ncclSuccess);
  assert_int_equal(l.half_bytes, 0);
  assert_int_equal(l.slot_bytes, 65536);
  assert_int_equal(l.fixed, 1);
  brd_plan_destroy(p);
  unsetenv("NCCL_BUFFSIZE");
  unsetenv("NCCL_LL_BUFFSIZE");
  brd_param_reload();
}

/* Fixed chunks: a segment's chunks start at multiples of chunk_max, so two
 * plans with different chunk counts cut one transfer the same way. */
static void test_fixed_layout(void **state) {
  (void)state;
  brd_algos_sendrecv_op_t a1 = {1, 2}, a2 = {1, 9};
  brd_algos_sendrecv_rank_t r1[2] = {{1, 0, &a1, NULL}, {0, 0, NULL, NULL}};
  brd_algos_sendrecv_rank_t r2[2] = {{1, 0, &a2, NULL}, {0, 0, NULL, NULL}};
  brd_algos_sendrecv_args_t g1 = {2, 0, r1}, g2 = {2, 0, r2};
  brd_ir_plan_t *p1, *p2;
  assert_int_equal(brd_algos_sendrecv(&g1, &p1), ncclSuccess);
  assert_int_equal(brd_algos_sendrecv(&g2, &p2), ncclSuccess);
  size_t scratch = brd_plan_scratch_bytes(p1);
  brd_plan_layout_t l1, l2;
  assert_int_equal(brd_plan_layout_init(p1, 100000, ncclInt8, scratch, &l1), ncclSuccess);
  assert_int_equal(brd_plan_layout_init(p2, 900000, ncclInt8, scratch, &l2), ncclSuccess);
  /* A segment of one full chunk and 100 more elements. */
  size_t seg = l1.chunk_max + 100;
  for (uint32_t c = 0; c < 2; c++) {
    size_t s1, n1, s2, n2;
    brd_plan_layout_seg_chunk(&l1, seg, 0, c, &s1, &n1);
    brd_plan_layout_seg_chunk(&l2, seg, 0, c, &s2, &n2);
    assert_int_equal(s1, s2);
    assert_int_equal(n1, n2);
    assert_int_equal(s1, c * l1.chunk_max);
    assert_int_equal(n1, c == 0 ? l1.chunk_max : 100);
  }
  /* A spreading plan would have cut it in two halves. */
  brd_plan_layout_t spread = l1;
  spread.fixed = 0;
  size_t s0, n0;
  brd_plan_layout_seg_chunk(&spread, seg, 0, 0, &s0, &n0);
  assert_int_equal(n0, (seg + 1) / 2 + ((16 - (seg + 1) / 2 % 16) % 16));
  brd_plan_destroy(p1);
  brd_plan_destroy(p2);
}

static void test_bad_arguments(void **state) {
  (void)state;
  static const int dup[3] = {0, 1, 1};
  for (int gi = 0; gi < NGENS; gi++) {
    const gen_t *g = &gens[gi];
    brd_ir_plan_t *p = (brd_ir_plan_t *)0x1;
    brd_algos_args_t a = {0, NULL, 1, BRD_IR_PROTO_SIMPLE};
    assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, 0, g->det, &p),
                     ncclInvalidArgument);
    a.nranks = 3;
    a.proto = BRD_IR_PROTO_LL128;
    assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, 0, g->det, &p),
                     ncclInvalidArgument);
    a.proto = BRD_IR_PROTO_SIMPLE;
    a.order = dup;
    assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, 0, g->det, &p),
                     ncclInvalidArgument);
    a.order = NULL;
    if (g->rooted) {
      assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, 3, g->det, &p),
                       ncclInvalidArgument);
      assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, -2, g->det, &p),
                       ncclInvalidArgument);
    }
    a.nranks = 300;
    a.nblocks = 30000;
    assert_int_equal(brd_algos_generate(g->coll, g->algo, &a, 0, g->det, &p),
                     ncclInvalidArgument);
    assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
  }
  /* Pairs without a generator, and reductions that cannot be ordered. */
  brd_ir_plan_t *p = (brd_ir_plan_t *)0x1;
  brd_algos_args_t a = {4, NULL, 1, BRD_IR_PROTO_SIMPLE};
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_TREE, &a, 0, 0, &p),
                   ncclInvalidArgument);
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_RING, &a, 0, 1, &p),
                   ncclInvalidArgument);
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_REDUCE, BRD_IR_ALGO_RING, &a, 0, 1, &p),
                   ncclInvalidArgument);
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_SENDRECV, BRD_IR_ALGO_ONESHOT, &a, 0, 0, &p),
                   ncclInvalidArgument);
  assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
  assert_false(brd_algos_available(BRD_IR_COLL_ALLTOALL, BRD_IR_ALGO_RING, 0));
  assert_true(brd_algos_available(BRD_IR_COLL_BROADCAST, BRD_IR_ALGO_RING, 1));
}

/* The generator table: exactly one row per (collective, algorithm,
 * determinism, zero-copy) that the runtime could ask for before the table
 * existed, and none elsewhere. The reference is written out here: the
 * pairs the generators were dispatched by (reductions have a rank-ordered
 * variant only for one-shot and two-shot all-reduce and one-shot
 * reduce-scatter and reduce; the rest do not reduce, so determinism does
 * not matter to them), plus the three zero-copy plans, asked for without
 * determinism. Each row's generator makes a plan of its own row. */
static int table_expects(int coll, int algo, int det, int zc, int lowlat) {
  if (lowlat) /* the low-latency NVLS all-reduce */
    return !det && !zc && coll == BRD_IR_COLL_ALLREDUCE && algo == BRD_IR_ALGO_NVLS;
  if (zc) /* zero-copy: over peers' registered buffers, or NVLS over bound windows */
    return !det && ((coll == BRD_IR_COLL_ALLREDUCE && algo == BRD_IR_ALGO_TWOSHOT) ||
                    (coll == BRD_IR_COLL_REDUCESCATTER && algo == BRD_IR_ALGO_ONESHOT) ||
                    (coll == BRD_IR_COLL_ALLGATHER && algo == BRD_IR_ALGO_ONESHOT) ||
                    ((coll == BRD_IR_COLL_ALLREDUCE || coll == BRD_IR_COLL_ALLGATHER ||
                      coll == BRD_IR_COLL_REDUCESCATTER) && algo == BRD_IR_ALGO_NVLS));
  static const char *const want[BRD_IR_COLL_COUNT] = {
      /* algorithms by letter: R ring, T tree, O one-shot, W two-shot;
       * N NVLS; lower case: only without determinism */
      [BRD_IR_COLL_ALLREDUCE] = "rtOWn",
      [BRD_IR_COLL_ALLGATHER] = "RON",
      [BRD_IR_COLL_REDUCESCATTER] = "rOn",
      [BRD_IR_COLL_BROADCAST] = "RO",
      [BRD_IR_COLL_REDUCE] = "rO",
      [BRD_IR_COLL_ALLTOALL] = "O",
      [BRD_IR_COLL_GATHER] = "O",
      [BRD_IR_COLL_SCATTER] = "O",
      [BRD_IR_COLL_SENDRECV] = "",
  };
  static const char letter[] = {[BRD_IR_ALGO_RING] = 'R', [BRD_IR_ALGO_TREE] = 'T',
                                [BRD_IR_ALGO_ONESHOT] = 'O', [BRD_IR_ALGO_TWOSHOT] = 'W',
                                [BRD_IR_ALGO_NVLS] = 'N'};
  /* The hierarchical all-reduce and NVLSTree: the tuner's codes, no IR
   * code, unordered. */
  if (algo == BRD_ALGO_HIER || algo == BRD_ALGO_NVLS_TREE)
    return coll == BRD_IR_COLL_ALLREDUCE && !det;
  if (coll < 0 || coll >= BRD_IR_COLL_COUNT || algo < BRD_IR_ALGO_RING ||
      algo > BRD_IR_ALGO_NVLS)
    return 0;
  for (const char *c = want[coll]; *c != '\0'; c++) {
    if (*c == letter[algo]) return 1;
    if (*c == letter[algo] + ('a' - 'A')) return !det;
  }
  return 0;
}

static void test_generator_table(void **state) {
  (void)state;
  int n = 0, covered = 0;
  const brd_algos_gen_t *t = brd_algos_gens(&n);
  for (int coll = 0; coll <= BRD_IR_COLL_COUNT; coll++)
    for (int algo = 0; algo <= BRD_ALGO_HIER; algo++)
      for (int det = 0; det < 2; det++)
        for (int zc = 0; zc < 2; zc++)
        for (int ll = 0; ll < 2; ll++) {
          int rows = 0;
          for (int i = 0; i < n; i++)
            rows += t[i].coll == coll && t[i].algo == algo && t[i].deterministic == det &&
                    t[i].zerocopy == zc && t[i].lowlat == ll;
          int want = table_expects(coll, algo, det, zc, ll);
          if (rows != want)
            print_error("coll %d algo %d det %d zero-copy %d low-latency %d: %d rows, "
                        "want %d\n", coll, algo, det, zc, ll, rows, want);
          assert_int_equal(rows, want);
          int code = algo | (zc ? BRD_ALGOS_ZEROCOPY : 0) | (ll ? BRD_ALGOS_LOWLAT : 0);
          assert_int_equal(brd_algos_available(coll, code, det), want);
          const brd_algos_gen_t *g = brd_algos_find(coll, code, det);
          assert_true((g != NULL) == want);
          covered += want;
        }
  assert_int_equal(covered, n);
  /* Every row's generator makes a plan of that row, at 5 ranks. */
  for (int i = 0; i < n; i++) {
    brd_algos_args_t a = {5, NULL, 2, BRD_IR_PROTO_SIMPLE};
    brd_ir_plan_t *p = NULL;
    int code = t[i].algo | (t[i].zerocopy ? BRD_ALGOS_ZEROCOPY : 0) |
               (t[i].lowlat ? BRD_ALGOS_LOWLAT : 0);
    assert_int_equal(brd_algos_generate(t[i].coll, code, &a, 3, t[i].deterministic, &p),
                     ncclSuccess);
    assert_int_equal(p->coll, t[i].coll);
    /* Hierarchical plans are rings (algos.h); here, on one node, the ring's;
     * NVLSTree's, on one node, the NVLS all-reduce's. */
    assert_int_equal(p->algo, t[i].algo == BRD_ALGO_HIER        ? BRD_IR_ALGO_RING
                              : t[i].algo == BRD_ALGO_NVLS_TREE ? BRD_IR_ALGO_NVLS
                                                                : t[i].algo);
    assert_int_equal((p->flags & BRD_IR_PLAN_F_PEER_INPUT) != 0, t[i].zerocopy);
    assert_non_null(t[i].name);
    brd_plan_destroy(p);
  }
  /* A zero-copy code the table lacks is refused, not served unflagged. */
  brd_algos_args_t a = {4, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p = (brd_ir_plan_t *)0x1;
  assert_int_equal(brd_algos_generate(BRD_IR_COLL_ALLREDUCE,
                                      BRD_IR_ALGO_RING | BRD_ALGOS_ZEROCOPY, &a, 0, 0, &p),
                   ncclInvalidArgument);
  assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
}

static void test_alloc_failures(void **state) {
  (void)state;
  static const int order[13] = {12, 0, 11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6};
  for (int gi = 0; gi < NGENS; gi++) {
    const gen_t *g = &gens[gi];
    for (int proto = 0; proto < 2; proto++) {
      brd_algos_args_t args = {13, order, 2, proto};
      int failures_seen = 0;
      for (long k = 0;; k++) {
        brd_ir_plan_t *p = NULL;
        alloc_calls = 0;
        fail_at = k;
        live = 0;
        armed = 1;
        ncclResult_t res = brd_algos_generate(g->coll, g->algo, &args, 5, g->det, &p);
        armed = 0;
        if (res == ncclSuccess) {
          assert_int_equal(live, 1);
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
  /* Point-to-point generation. */
  uint64_t x = 77;
  sendrecv_world_t w;
  sendrecv_random(&w, 5, &x);
  brd_algos_sendrecv_args_t pargs = {5, -1, w.ranks};
  int failures_seen = 0;
  for (long k = 0;; k++) {
    brd_ir_plan_t *p = NULL;
    alloc_calls = 0;
    fail_at = k;
    live = 0;
    armed = 1;
    ncclResult_t res = brd_algos_sendrecv(&pargs, &p);
    armed = 0;
    if (res == ncclSuccess) {
      assert_int_equal(live, 1);
      brd_plan_destroy(p);
      break;
    }
    assert_int_equal(res, ncclSystemError);
    assert_int_equal(live, 0);
    failures_seen++;
  }
  assert_true(failures_seen >= 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_generated_plans_verify),
      cmocka_unit_test(test_dropped_op_caught),
      cmocka_unit_test(test_missing_ack_caught),
      cmocka_unit_test(test_ordered_sources),
      cmocka_unit_test(test_root_only_buffers),
      cmocka_unit_test(test_alltoall_blocks),
      cmocka_unit_test(test_sendrecv_random_groups_verify),
      cmocka_unit_test(test_sendrecv_all_pairs),
      cmocka_unit_test(test_sendrecv_final_credit_needed),
      cmocka_unit_test(test_sendrecv_bad_groups),
      cmocka_unit_test(test_scratch_sizes),
      cmocka_unit_test(test_fixed_layout),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_generator_table),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
