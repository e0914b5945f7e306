/*
 * Unit tests for algorithm/protocol choice (src/plan/tune.c): NCCL_ALGO /
 * NCCL_PROTO parsing against masks written out by hand from NCCL 2.28's
 * rules, and the cost model against times worked out by hand from the
 * formula documented at the top of tune.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/debug.h"
#include "base/param.h"
#include "plan/tune.h"

#define A(x) BRD_ALGO_BIT(BRD_ALGO_##x)
#define P(x) BRD_PROTO_BIT(BRD_PROTO_##x)
/* The ten algorithms NCCL_ALGO names (NCCL's nine and Braid's Hier),
 * listed by name. */
#define ALL_ALGOS                                                                  \
  (A(RING) | A(TREE) | A(ONESHOT) | A(TWOSHOT) | A(NVLS) | A(NVLS_TREE) |          \
   A(COLLNET_DIRECT) | A(COLLNET_CHAIN) | A(PAT) | A(HIER))
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* The generators a single node offers for AllReduce in these tests. */
#define AVAIL_SHOTS (A(RING) | A(TREE) | A(ONESHOT) | A(TWOSHOT))

/* NCCL's five tuned functions, in the order the tables below use. */
static const brd_coll_t funcs[5] = {BRD_COLL_BROADCAST, BRD_COLL_REDUCE,
                                    BRD_COLL_ALLGATHER, BRD_COLL_REDUCESCATTER,
                                    BRD_COLL_ALLREDUCE};
static const brd_coll_t untuned[5] = {BRD_COLL_ALLTOALL, BRD_COLL_GATHER,
                                      BRD_COLL_SCATTER, BRD_COLL_SEND,
                                      BRD_COLL_RECV};

/* 8 ranks on one node: 100 GB/s links, 1 us per hop. */
static brd_tune_topo_t topo8(void) {
  brd_tune_topo_t t;
  memset(&t, 0, sizeof(t));
  t.nranks = 8;
  t.nnodes = 1;
  t.local_nranks = 8;
  t.ranks_per_device = 1;
  t.ll128_ok = 1;
  t.intra_bw = 100.0f;
  t.intra_lat = 1.0f;
  return t;
}

/* 16 ranks, 2 nodes of 8: inside 100 GB/s 1 us, between 25 GB/s 5 us. */
static brd_tune_topo_t topo16x2(void) {
  brd_tune_topo_t t = topo8();
  t.nranks = 16;
  t.nnodes = 2;
  t.inter_bw = 25.0f;
  t.inter_lat = 5.0f;
  return t;
}

static brd_tune_mask_t mask_of(const char *algo, const char *proto) {
  brd_tune_mask_t m;
  assert_int_equal(brd_tune_parse(algo, proto, &m), ncclSuccess);
  return m;
}

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-3 * fabs(want)) fail_msg("got %.6f, want %.6f", got, want);
}

static void assert_choice(const brd_tune_topo_t *t, brd_coll_t coll, size_t bytes,
                          uint32_t avail, const brd_tune_mask_t *m, brd_algo_t algo,
                          brd_proto_t proto, double time_us) {
  brd_tune_choice_t c;
  assert_int_equal(brd_tune_select(t, coll, bytes, avail, m, &c), ncclSuccess);
  if (c.algo != algo || c.proto != proto)
    fail_msg("%zu bytes: got %s/%s, want %s/%s", bytes, brd_algo_name(c.algo),
             brd_proto_name(c.proto), brd_algo_name(algo), brd_proto_name(proto));
  assert_close(c.time_us, time_us);
}

static void assert_error_mentions(const char *a, const char *b) {
  const char *e = brd_log_last_error();
  if (strstr(e, a) == NULL || (b != NULL && strstr(e, b) == NULL))
    fail_msg("last error \"%s\" does not name \"%s\"%s%s", e, a, b ? " and " : "", b ? b : "");
}

/* ---- names ---- */

static void test_names(void **state) {
  (void)state;
  assert_string_equal(brd_algo_name(BRD_ALGO_RING), "Ring");
  assert_string_equal(brd_algo_name(BRD_ALGO_TREE), "Tree");
  assert_string_equal(brd_algo_name(BRD_ALGO_ONESHOT), "OneShot");
  assert_string_equal(brd_algo_name(BRD_ALGO_TWOSHOT), "TwoShot");
  assert_string_equal(brd_algo_name(BRD_ALGO_NVLS), "NVLS");
  assert_string_equal(brd_algo_name(BRD_ALGO_NVLS_TREE), "NVLSTree");
  assert_string_equal(brd_algo_name(BRD_ALGO_COLLNET_DIRECT), "CollNetDirect");
  assert_string_equal(brd_algo_name(BRD_ALGO_COLLNET_CHAIN), "CollNetChain");
  assert_string_equal(brd_algo_name(BRD_ALGO_PAT), "PAT");
  assert_string_equal(brd_algo_name(BRD_ALGO_COUNT), "Unknown");
  assert_string_equal(brd_proto_name(BRD_PROTO_LL), "LL");
  assert_string_equal(brd_proto_name(BRD_PROTO_LL128), "LL128");
  assert_string_equal(brd_proto_name(BRD_PROTO_SIMPLE), "Simple");
  assert_string_equal(brd_proto_name((brd_proto_t)-1), "Unknown");
  /* One numbering: the tuner's codes are the plan IR's (device/ir.h). */
  assert_string_equal(brd_algo_name((brd_algo_t)BRD_IR_ALGO_COPY), "Unknown");
  assert_string_equal(brd_algo_name((brd_algo_t)BRD_IR_ALGO_TWOSHOT), "TwoShot");
  assert_string_equal(brd_proto_name((brd_proto_t)BRD_IR_PROTO_SIMPLE), "Simple");
  assert_string_equal(brd_proto_name((brd_proto_t)BRD_IR_PROTO_LL), "LL");
  assert_int_equal((int)BRD_COLL_SCATTER, (int)BRD_IR_COLL_SCATTER);
  assert_true((int)BRD_COLL_SEND >= (int)BRD_IR_COLL_COUNT && (int)BRD_COLL_RECV > (int)BRD_COLL_SEND);
}

/* ---- parsing ---- */

static void assert_untuned_open(const brd_tune_mask_t *m) {
  for (int i = 0; i < 5; i++) {
    assert_int_equal(m->algos[untuned[i]], ALL_ALGOS);
    assert_int_equal(m->protos[untuned[i]], 0x7);
    assert_int_equal(m->protos_auto[untuned[i]], P(LL128));
  }
}

static void test_parse_unset(void **state) {
  (void)state;
  const char *cases[][2] = {{NULL, NULL}, {"", ""}};
  for (size_t k = 0; k < 2; k++) {
    brd_tune_mask_t m = mask_of(cases[k][0], cases[k][1]);
    for (int c = 0; c < BRD_COLL_COUNT; c++) {
      assert_int_equal(m.algos[c], ALL_ALGOS);   /* all ten algorithms */
      assert_int_equal(m.protos[c], 0x7);    /* LL, LL128, Simple */
      assert_int_equal(m.protos_auto[c], P(LL128));
    }
    assert_string_equal(m.algo_env, "");
    assert_string_equal(m.proto_env, "");
  }
}

/* Per NCCL function (Broadcast, Reduce, AllGather, ReduceScatter,
 * AllReduce): the bits NCCL_ALGO leaves. */
typedef struct {
  const char *env;
  uint32_t algos[5];
} algo_case_t;

static void test_parse_algo_forms(void **state) {
  (void)state;
  const uint32_t all = ALL_ALGOS;
  const algo_case_t cases[] = {
      {"Ring", {A(RING), A(RING), A(RING), A(RING), A(RING)}},
      {"ring", {A(RING), A(RING), A(RING), A(RING), A(RING)}},
      {"^Tree", {all & ~A(TREE), all & ~A(TREE), all & ~A(TREE), all & ~A(TREE), all & ~A(TREE)}},
      {"allreduce:tree,ring;allgather:^ring",
       {all, all, all & ~A(RING), all, A(TREE) | A(RING)}},
      /* NCCL's own example: a default for all, then two functions. */
      {"ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
       {A(RING), A(RING) | A(COLLNET_DIRECT), A(RING) | A(COLLNET_DIRECT),
        A(RING) | A(COLLNET_DIRECT), A(TREE) | A(COLLNET_DIRECT)}},
      {"RING,nvlstree,OneShot,TWOSHOT,pat,CollNetChain,nvls,hier",
       {ALL_ALGOS & ~(A(TREE) | A(COLLNET_DIRECT)), ALL_ALGOS & ~(A(TREE) | A(COLLNET_DIRECT)),
        ALL_ALGOS & ~(A(TREE) | A(COLLNET_DIRECT)), ALL_ALGOS & ~(A(TREE) | A(COLLNET_DIRECT)),
        ALL_ALGOS & ~(A(TREE) | A(COLLNET_DIRECT))}},
      /* A first entry may carry a prefix; the rest stay open. */
      {"broadcast:ring", {A(RING), all, all, all, all}},
      {"ReduceScatter:PAT;REDUCE:tree", {all, A(TREE), all, A(PAT), all}},
      /* A later entry for the same function replaces the earlier one. */
      {"allreduce:ring;allreduce:^oneshot,twoshot",
       {all, all, all, all, all & ~(A(ONESHOT) | A(TWOSHOT))}},
      {"^ring;allreduce:ring", {all & ~A(RING), all & ~A(RING), all & ~A(RING), all & ~A(RING), A(RING)}},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    brd_tune_mask_t m = mask_of(cases[k].env, NULL);
    for (int f = 0; f < 5; f++) {
      if (m.algos[funcs[f]] != cases[k].algos[f])
        fail_msg("NCCL_ALGO=%s function %d: got 0x%x want 0x%x", cases[k].env, f,
                 m.algos[funcs[f]], cases[k].algos[f]);
      assert_int_equal(m.protos[funcs[f]], 0x7);
      assert_int_equal(m.protos_auto[funcs[f]], P(LL128));
    }
    assert_untuned_open(&m);
    assert_string_equal(m.algo_env, cases[k].env);
  }
}

/* Per NCCL function: protocols left and those still on LL128's default. */
typedef struct {
  const char *env;
  uint32_t protos[5];
  uint32_t autos[5];
} proto_case_t;

static void test_parse_proto_forms(void **state) {
  (void)state;
  const uint32_t ls = P(LL) | P(SIMPLE), l8s = P(LL128) | P(SIMPLE), d = P(LL128);
  const proto_case_t cases[] = {
      {"LL,Simple", {ls, ls, ls, ls, ls}, {0, 0, 0, 0, 0}},
      {"^LL128", {ls, ls, ls, ls, ls}, {0, 0, 0, 0, 0}},
      /* Excluding LL switches LL128 on outright, as in NCCL. */
      {"^LL", {l8s, l8s, l8s, l8s, l8s}, {0, 0, 0, 0, 0}},
      {"simple", {P(SIMPLE), P(SIMPLE), P(SIMPLE), P(SIMPLE), P(SIMPLE)}, {0, 0, 0, 0, 0}},
      /* NCCL's examples. */
      {"LL,Simple;allreduce:^LL", {ls, ls, ls, ls, l8s}, {0, 0, 0, 0, 0}},
      {"^LL128;allreduce:LL128", {ls, ls, ls, ls, P(LL128)}, {0, 0, 0, 0, 0}},
      /* Untouched functions keep LL128 on its hardware default. */
      {"allgather:LL", {0x7, 0x7, P(LL), 0x7, 0x7}, {d, d, 0, d, d}},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    brd_tune_mask_t m = mask_of(NULL, cases[k].env);
    for (int f = 0; f < 5; f++) {
      if (m.protos[funcs[f]] != cases[k].protos[f] ||
          m.protos_auto[funcs[f]] != cases[k].autos[f])
        fail_msg("NCCL_PROTO=%s function %d: got 0x%x/0x%x want 0x%x/0x%x", cases[k].env,
                 f, m.protos[funcs[f]], m.protos_auto[funcs[f]], cases[k].protos[f],
                 cases[k].autos[f]);
      assert_int_equal(m.algos[funcs[f]], ALL_ALGOS);
    }
    assert_untuned_open(&m);
    assert_string_equal(m.proto_env, cases[k].env);
  }
}

typedef struct {
  const char *algo;
  const char *proto;
  const char *var;     /* the variable the message must name */
  const char *token;   /* and the offending text */
} reject_case_t;

static void test_parse_rejects(void **state) {
  (void)state;
  const reject_case_t cases[] = {
      {"ring,rnig", NULL, "NCCL_ALGO", "\"rnig\""},
      {"Ring;allreduce:Treee", NULL, "NCCL_ALGO", "\"Treee\""},
      {NULL, "LL,LL256", "NCCL_PROTO", "\"LL256\""},
      {"ring", "allreduce:^LL,Simpel", "NCCL_PROTO", "\"Simpel\""},
      {"allreduc:ring", NULL, "NCCL_ALGO", "\"allreduc\""},
      /* NCCL tunes five functions; others are not prefixes. */
      {"alltoall:ring", NULL, "NCCL_ALGO", "\"alltoall\""},
      {NULL, "send:LL", "NCCL_PROTO", "\"send\""},
      {":ring", NULL, "NCCL_ALGO", "\":ring\""},
      /* Empty lists. */
      {"allreduce:", NULL, "NCCL_ALGO", "\"allreduce:\""},
      {"^", NULL, "NCCL_ALGO", "\"^\""},
      {NULL, "allreduce:^", "NCCL_PROTO", "\"allreduce:^\""},
      /* Stray separators. */
      {"ring,,tree", NULL, "NCCL_ALGO", "\"ring,,tree\" has an empty algorithm name"},
      {",ring", NULL, "NCCL_ALGO", "\",ring\" has an empty algorithm name"},
      {"ring,", NULL, "NCCL_ALGO", "\"ring,\" has an empty algorithm name"},
      {"ring;", NULL, "NCCL_ALGO", "stray ';'"},
      {";ring", NULL, "NCCL_ALGO", "stray ';'"},
      {"ring;;allreduce:tree", NULL, "NCCL_ALGO", "stray ';'"},
      {NULL, "LL,,Simple", "NCCL_PROTO", "\"LL,,Simple\" has an empty protocol name"},
      /* Only the first entry may omit the function. */
      {"allreduce:tree;ring", NULL, "NCCL_ALGO", "\"ring\""},
      {"allreduce:ring:tree", NULL, "NCCL_ALGO", "\"allreduce:ring:tree\""},
      /* '^' only leads a list; names are matched as written. */
      {"ring,^tree", NULL, "NCCL_ALGO", "\"^tree\""},
      {" ring", NULL, "NCCL_ALGO", "\" ring\""},
      {"^^ring", NULL, "NCCL_ALGO", "\"^ring\""},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    brd_tune_mask_t m, before;
    memset(&m, 0x5a, sizeof(m));
    before = m;
    brd_log_set_last_error("%s", "");
    ncclResult_t rc = brd_tune_parse(cases[k].algo, cases[k].proto, &m);
    if (rc != ncclInvalidUsage)
      fail_msg("NCCL_ALGO=%s NCCL_PROTO=%s: rc %d, want ncclInvalidUsage",
               cases[k].algo ? cases[k].algo : "(unset)",
               cases[k].proto ? cases[k].proto : "(unset)", (int)rc);
    assert_error_mentions(cases[k].var, cases[k].token);
    assert_memory_equal(&m, &before, sizeof(m));
  }
  /* The message lists what would have been valid. */
  assert_int_equal(brd_tune_parse("ring,rnig", NULL, &(brd_tune_mask_t){0}), ncclInvalidUsage);
  assert_error_mentions("Ring, Tree, OneShot, TwoShot, NVLS, NVLSTree, CollNetDirect, "
                        "CollNetChain, PAT", NULL);
  assert_int_equal(brd_tune_parse(NULL, "LL9", &(brd_tune_mask_t){0}), ncclInvalidUsage);
  assert_error_mentions("LL, LL128, Simple", NULL);
  assert_int_equal(brd_tune_parse("gather:ring", NULL, &(brd_tune_mask_t){0}), ncclInvalidUsage);
  assert_error_mentions("Broadcast, Reduce, AllGather, ReduceScatter, AllReduce", NULL);
}

/* ---- the cost model ---- */

/* Times below follow tune.c's formula: 5 us base, per-hop latency times
 * step {LL 1, LL128 2.5, Simple 5}, bytes / (1000 * GB/s * eff * fit) with
 * eff {0.5, 0.9375, 1} and fit Ring 1, Tree 0.9, One/TwoShot 0.8. */
static void test_select_8_ranks(void **state) {
  (void)state;
  brd_tune_topo_t t = topo8();
  brd_tune_mask_t m = mask_of(NULL, NULL);
  /* 1 KiB: one hop, 7 x 1024 bytes in: 5 + 1 + 7168 / 40000. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, BRD_ALGO_ONESHOT,
                BRD_PROTO_LL, 6.1792);
  /* 1 MiB: two hops of 2.5, 2 x 7/8 MiB at 75 GB/s: 5 + 5 + 1835008 / 75000. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, AVAIL_SHOTS, &m, BRD_ALGO_TWOSHOT,
                BRD_PROTO_LL128, 34.466773);
  /* 256 MiB: 14 hops of 5, 2 x 7/8 x 256 MiB at 100 GB/s. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, 256 * MIB, AVAIL_SHOTS, &m, BRD_ALGO_RING,
                BRD_PROTO_SIMPLE, 4772.62048);
  /* Without the direct patterns a tiny message goes up and down the tree:
   * 2 x 3 hops, 2 KiB at 100 x 0.5 x 0.9. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, A(RING) | A(TREE), &m, BRD_ALGO_TREE,
                BRD_PROTO_LL, 11.045511);
  /* Two ranks sharing each GPU halve its bandwidth. */
  t.ranks_per_device = 2;
  assert_choice(&t, BRD_COLL_ALLREDUCE, 256 * MIB, AVAIL_SHOTS, &m, BRD_ALGO_RING,
                BRD_PROTO_SIMPLE, 9470.24096);
  /* With multicast, NVLS moves S once each way: 5 + 3 barriers of 1 us
   * (intra_lat; nvls_lat unset) + S / 85000. */
  t = topo8();
  t.nvls = 1;
  assert_choice(&t, BRD_COLL_ALLREDUCE, 256 * MIB, AVAIL_SHOTS | A(NVLS), &m, BRD_ALGO_NVLS,
                BRD_PROTO_SIMPLE, 3166.064209);
}

static void test_select_two_nodes(void **state) {
  (void)state;
  brd_tune_topo_t t = topo16x2();
  brd_tune_mask_t m = mask_of(NULL, NULL);
  /* Tree: a chain of 8 inside each node, up and down (14 intra hops), +
   * 2 inter hops of 5 us; 2 KiB over the 25 GB/s link. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, A(RING) | A(TREE), &m, BRD_ALGO_TREE,
                BRD_PROTO_LL, 29.182044);
  /* Ring: 28 intra + 2 inter hops of Simple, 2 x 15/16 x 256 MiB at 25 GB/s. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, 256 * MIB, A(RING) | A(TREE), &m, BRD_ALGO_RING,
                BRD_PROTO_SIMPLE, 20327.6592);
}

/* Doubling the size never makes the call cheaper, and the choice moves one
 * way only: one-shot, then two-shot, then ring. */
static void test_select_monotone(void **state) {
  (void)state;
  static const brd_algo_t order[] = {BRD_ALGO_ONESHOT, BRD_ALGO_TWOSHOT, BRD_ALGO_RING};
  brd_tune_topo_t t = topo8();
  brd_tune_mask_t m = mask_of(NULL, NULL);
  double prev = 0.0;
  int stage = 0;
  for (size_t bytes = 1; bytes <= ((size_t)1 << 32); bytes *= 2) {
    brd_tune_choice_t c;
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, bytes, AVAIL_SHOTS, &m, &c),
                     ncclSuccess);
    assert_true(c.time_us >= prev);
    prev = c.time_us;
    while (stage < 3 && order[stage] != c.algo) stage++;
    if (stage == 3) fail_msg("%zu bytes went back to %s", bytes, brd_algo_name(c.algo));
    /* Nothing available is cheaper than the choice. */
    for (int a = 0; a < BRD_ALGO_COUNT; a++) {
      if (!(AVAIL_SHOTS & BRD_ALGO_BIT(a))) continue;
      for (int p = 0; p < BRD_PROTO_COUNT; p++) {
        float e = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, bytes, (brd_algo_t)a, (brd_proto_t)p);
        if (e >= 0.0f) assert_true(e >= c.time_us);
      }
    }
  }
  assert_int_equal(stage, 2); /* it did reach the ring */
}

static void test_overrides_force(void **state) {
  (void)state;
  brd_tune_topo_t t = topo8();
  brd_tune_mask_t m;

  m = mask_of("Ring", NULL); /* 14 LL hops, 1792 bytes at 50 GB/s */
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, BRD_ALGO_RING, BRD_PROTO_LL,
                19.03584);
  m = mask_of(NULL, "Simple"); /* one Simple hop, 7168 bytes at 80 GB/s */
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, BRD_ALGO_ONESHOT,
                BRD_PROTO_SIMPLE, 10.0896);
  m = mask_of("allreduce:^oneshot,twoshot", NULL);
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, BRD_ALGO_TREE, BRD_PROTO_LL,
                11.045511);
  /* An entry for another function leaves AllReduce alone. */
  m = mask_of("allgather:ring", "broadcast:simple");
  assert_choice(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, BRD_ALGO_ONESHOT,
                BRD_PROTO_LL, 6.1792);

  /* Where LL128 is not safe it is off by default ... */
  t.ll128_ok = 0;
  m = mask_of(NULL, NULL);
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, AVAIL_SHOTS, &m, BRD_ALGO_TWOSHOT,
                BRD_PROTO_SIMPLE, 37.9376);
  /* ... unless the user names it, either way round. */
  m = mask_of(NULL, "LL128");
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, AVAIL_SHOTS, &m, BRD_ALGO_TWOSHOT,
                BRD_PROTO_LL128, 34.466773);
  m = mask_of(NULL, "^LL");
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, AVAIL_SHOTS, &m, BRD_ALGO_TWOSHOT,
                BRD_PROTO_LL128, 34.466773);
  m = mask_of(NULL, "allgather:LL128");
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, AVAIL_SHOTS, &m, BRD_ALGO_TWOSHOT,
                BRD_PROTO_SIMPLE, 37.9376);
}

static void assert_select_fails(const brd_tune_topo_t *t, brd_coll_t coll, uint32_t avail,
                                const brd_tune_mask_t *m, ncclResult_t want,
                                const char *a, const char *b) {
  brd_tune_choice_t c = {BRD_ALGO_PAT, BRD_PROTO_LL128, 42.0f};
  brd_log_set_last_error("%s", "");
  assert_int_equal(brd_tune_select(t, coll, MIB, avail, m, &c), want);
  assert_error_mentions(a, b);
  assert_int_equal(c.algo, BRD_ALGO_PAT); /* untouched */
  assert_int_equal(c.proto, BRD_PROTO_LL128);
  assert_true(c.time_us == 42.0f);
}

static void test_empty_intersection(void **state) {
  (void)state;
  brd_tune_topo_t t = topo8();
  brd_tune_mask_t m;

  /* NVLS has a generator but no multicast here. */
  m = mask_of("NVLS", NULL);
  assert_select_fails(&t, BRD_COLL_ALLREDUCE, AVAIL_SHOTS | A(NVLS), &m, ncclInvalidUsage,
                      "NCCL_ALGO", "AllReduce");
  /* There is no tree all-gather. */
  m = mask_of("Tree", NULL);
  assert_select_fails(&t, BRD_COLL_ALLGATHER, A(RING) | A(TREE) | A(ONESHOT), &m,
                      ncclInvalidUsage, "NCCL_ALGO", "AllGather");
  /* NVLS moves only Simple. */
  t.nvls = 1;
  m = mask_of("allreduce:nvls", "LL");
  assert_select_fails(&t, BRD_COLL_ALLREDUCE, AVAIL_SHOTS | A(NVLS), &m, ncclInvalidUsage,
                      "NCCL_PROTO", "AllReduce");
  m = mask_of(NULL, "^LL,LL128,Simple");
  assert_select_fails(&t, BRD_COLL_REDUCESCATTER, A(RING), &m, ncclInvalidUsage,
                      "NCCL_PROTO", "ReduceScatter");
  /* Nothing to run and nobody to blame but the caller. */
  m = mask_of(NULL, NULL);
  assert_select_fails(&t, BRD_COLL_ALLREDUCE, 0, &m, ncclInternalError, "AllReduce", NULL);
  t.nvls = 0;
  assert_select_fails(&t, BRD_COLL_ALLREDUCE, A(NVLS), &m, ncclInternalError, "AllReduce",
                      NULL);
}

static void test_single_rank(void **state) {
  (void)state;
  brd_tune_topo_t t = topo8();
  t.nranks = t.local_nranks = 1;
  brd_tune_mask_t m = mask_of("Tree", "LL");
  /* A local copy: overrides do not apply, as in NCCL. */
  assert_choice(&t, BRD_COLL_ALLREDUCE, MIB, A(RING) | A(TREE), &m, BRD_ALGO_RING,
                BRD_PROTO_SIMPLE, 0.0);
  assert_choice(&t, BRD_COLL_BROADCAST, MIB, A(TREE) | A(ONESHOT), &m, BRD_ALGO_TREE,
                BRD_PROTO_SIMPLE, 0.0);
}

static void test_estimate(void **state) {
  (void)state;
  brd_tune_topo_t t = topo8();
  assert_close(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_ONESHOT, BRD_PROTO_LL),
               6.1792);
  /* Pairs that cannot run here. */
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLGATHER, KIB, BRD_ALGO_TREE, BRD_PROTO_LL) < 0);
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_NVLS, BRD_PROTO_SIMPLE) < 0);
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLGATHER, KIB, BRD_ALGO_PAT, BRD_PROTO_SIMPLE) < 0);
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_NVLS_TREE, BRD_PROTO_SIMPLE) < 0);
  t.nvls = 1;
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_NVLS, BRD_PROTO_LL) < 0);
  /* In host mode nvls is the runtime's emulation: NVLS runs. */
  t.host_mode = 1;
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_NVLS, BRD_PROTO_SIMPLE) > 0);
  t.nvls = 0;
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_NVLS, BRD_PROTO_SIMPLE) < 0);

  /* PAT on 4 nodes of 1: 2 inter hops of 5 us x 5, 3/4 x 4 KiB at 25 x 0.75. */
  brd_tune_topo_t p;
  memset(&p, 0, sizeof(p));
  p.nranks = p.nnodes = 4;
  p.local_nranks = p.ranks_per_device = 1;
  p.inter_bw = 25.0f;
  p.inter_lat = 5.0f;
  assert_close(brd_tune_estimate(&p, BRD_COLL_ALLGATHER, 4 * KIB, BRD_ALGO_PAT,
                                 BRD_PROTO_SIMPLE), 55.16384);
  assert_true(brd_tune_estimate(&p, BRD_COLL_ALLGATHER, 4 * KIB, BRD_ALGO_PAT, BRD_PROTO_LL) < 0);

  /* Malformed topologies and arguments. */
  brd_tune_topo_t bad[5];
  for (int i = 0; i < 5; i++) bad[i] = topo8();
  bad[0].nranks = 0;
  bad[1].local_nranks = 4;          /* 1 node x 4 < 8 ranks */
  bad[2].intra_bw = 0.0f;
  bad[3].intra_lat = NAN;
  bad[4].nnodes = 2;                /* two nodes, no inter bandwidth */
  brd_tune_mask_t m = mask_of(NULL, NULL);
  for (int i = 0; i < 5; i++) {
    brd_tune_choice_t c;
    assert_true(brd_tune_estimate(&bad[i], BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_RING,
                                  BRD_PROTO_LL) < 0);
    assert_int_equal(brd_tune_select(&bad[i], BRD_COLL_ALLREDUCE, KIB, A(RING), &m, &c),
                     ncclInternalError);
  }
  t = topo8();
  assert_true(brd_tune_estimate(&t, BRD_COLL_COUNT, KIB, BRD_ALGO_RING, BRD_PROTO_LL) < 0);
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_COUNT, BRD_PROTO_LL) < 0);
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, KIB, BRD_ALGO_RING, BRD_PROTO_COUNT) < 0);
}

/* ---- NVLS: the switch plans' model and NCCL_ALGO naming it ---- */

/* Host mode with the fitted figures (tune_hw.c, brd_hw_host_topo): the
 * choices that the medians measured on 4 and 8 ranks make
 * (docs/perf/cost-model.md, "Host mode: the model against measurements"). */
static void test_host_model(void **state) {
  (void)state;
  brd_tune_mask_t m = mask_of(NULL, NULL);
  brd_tune_choice_t c, c128;
  for (int L = 4; L <= 8; L += 4) {
    brd_tune_topo_t t;
    memset(&t, 0, sizeof(t));
    t.nranks = t.local_nranks = L;
    t.nnodes = 1;
    brd_hw_host_topo(L, 256 * KIB, &t);
    assert_int_equal(t.host_mode, 1);
    /* A host's ranks share its copy rate: 8 ranks get half of 4's. */
    assert_close(t.intra_bw * L, brd_hw_consts[BRD_HW_HOST_COPY_GBPS].value);

    /* 8 B: a direct pattern (measured on 4 ranks: one-shot and two-shot
     * 25-29 us, ring 40-48, tree 44-85). */
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, 8, AVAIL_SHOTS, &m, &c),
                     ncclSuccess);
    assert_true(c.algo == BRD_ALGO_ONESHOT || c.algo == BRD_ALGO_TWOSHOT);

    /* 32 KiB: Simple, two-shot or ring (measured on 4 ranks: two-shot
     * 87 us, ring 108, one-shot 144, tree 157, every LL 737 or more). The
     * model used to choose TwoShot/LL here, slower than its choice at
     * 128 KiB. */
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, 32 * KIB, AVAIL_SHOTS, &m, &c),
                     ncclSuccess);
    assert_int_equal(c.proto, BRD_PROTO_SIMPLE);
    assert_true(c.algo == BRD_ALGO_TWOSHOT || c.algo == BRD_ALGO_RING);
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, 128 * KIB, AVAIL_SHOTS, &m,
                                     &c128), ncclSuccess);
    assert_true(c.time_us < c128.time_us);
    for (int a = BRD_ALGO_RING; a <= BRD_ALGO_TWOSHOT; a++)
      assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, 32 * KIB, (brd_algo_t)a,
                                    BRD_PROTO_LL) >
                  2.0f * brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, 32 * KIB, (brd_algo_t)a,
                                           BRD_PROTO_SIMPLE));

    /* 64 MiB: TwoShot/Simple (measured: 133 ms on 4 ranks against tree
     * 161 and ring 182; 332 on 8 against tree 371 and ring 379). */
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, 64 * MIB, AVAIL_SHOTS, &m, &c),
                     ncclSuccess);
    assert_int_equal(c.algo, BRD_ALGO_TWOSHOT);
    assert_int_equal(c.proto, BRD_PROTO_SIMPLE);

    /* The second block (from 256 KiB) adds its launch cost once. */
    double below = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, 256 * KIB - 4, BRD_ALGO_RING,
                                     BRD_PROTO_SIMPLE);
    double at = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, 256 * KIB, BRD_ALGO_RING,
                                  BRD_PROTO_SIMPLE);
    assert_true(fabs(at - below - t.block_us) < 0.01 * t.block_us);
  }
}

static void test_nvls_model(void **state) {
  (void)state;
  /* NCCL_ALGO names NVLS only in a list that allows it. */
  brd_tune_mask_t m = mask_of("NVLS", NULL);
  assert_true(brd_tune_mask_names(&m, BRD_ALGO_NVLS));
  m = mask_of("ring;allreduce:tree,nvls", NULL);
  assert_true(brd_tune_mask_names(&m, BRD_ALGO_NVLS));
  m = mask_of("^NVLS", NULL);
  assert_false(brd_tune_mask_names(&m, BRD_ALGO_NVLS));
  m = mask_of("NVLSTree", NULL);
  assert_false(brd_tune_mask_names(&m, BRD_ALGO_NVLS));
  m = mask_of("^ring", NULL);
  assert_false(brd_tune_mask_names(&m, BRD_ALGO_NVLS));
  m = mask_of(NULL, NULL);
  assert_false(brd_tune_mask_names(&m, BRD_ALGO_NVLS));

  /* 8 x H100: barriers of 1.5 us, algbw 480 x 8 / 14 = 274.3 GB/s. */
  brd_tune_topo_t t;
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 1, 8, 0, 0, &t), ncclSuccess);
  assert_true(fabs(t.nvls_bw - 480.0 * 8 / 14) < 0.01);
  /* 1 KiB: 5 + 3 x 1.5 + 1024 / 274286 (pipelined); 5 + 2 x 1.5 +
   * 8 x 1024 / 370000 (low latency), which wins. */
  assert_close(brd_tune_estimate_nvls(&t, BRD_COLL_ALLREDUCE, KIB, 0), 9.503733);
  assert_close(brd_tune_estimate_nvls(&t, BRD_COLL_ALLREDUCE, KIB, 1), 8.022140);
  assert_true(brd_tune_nvls_lowlat(&t, KIB));
  /* 1 MiB: pipelining wins (the low-latency plan reads 8 MiB per GPU). */
  assert_false(brd_tune_nvls_lowlat(&t, MIB));
  /* The crossover, where 3 + 8S/370000 = 4.5 + S/274286: about 83 KB. */
  assert_true(brd_tune_nvls_lowlat(&t, 80 * 1000));
  assert_false(brd_tune_nvls_lowlat(&t, 90 * 1000));
  /* 2 x H100: the published 2-4 GPU busbw, 367 x 2 / 2 GB/s algbw. */
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 1, 2, 0, 0, &t), ncclSuccess);
  assert_true(fabs(t.nvls_bw - 367.0) < 0.01);
  /* No NVLS on PCIe; none for broadcast. */
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_PCIE, 1, 8, 0, 0, &t), ncclSuccess);
  assert_true(brd_tune_estimate_nvls(&t, BRD_COLL_ALLREDUCE, KIB, 0) < 0);
  assert_false(brd_tune_nvls_lowlat(&t, KIB));
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 1, 8, 0, 0, &t), ncclSuccess);
  assert_true(brd_tune_estimate_nvls(&t, BRD_COLL_BROADCAST, KIB, 0) < 0);
}

/* ---- the cluster model: NIC counts, NVLS rate, hierarchical ---- */

#define GIB ((size_t)1 << 30)

static brd_tune_topo_t cluster(int nodes, int nics, double gbps) {
  brd_tune_topo_t t;
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, nodes, 8, nics, gbps, &t), ncclSuccess);
  return t;
}

static double busbw(const brd_tune_topo_t *t, size_t bytes, double us) {
  return (double)bytes / (us * 1000.0) * 2.0 * (t->nranks - 1) / t->nranks;
}

/* Hand-computed from tune.c's formula with the table's H100 figures
 * (NVLink 370 GB/s 0.6 us, NET 2.7 us, NIC 0.94 of line rate): 2 nodes of
 * 8, one 100 Gbit/s NIC per node = 11.75 GB/s, 1 GiB AllReduce, Simple. */
/* Hier: NCCL_ALGO spells it "Hier" (any case); on 3 nodes of 2 H100 with
 * one 400G NIC each, its 2(N-1) + 2(L-1) = 6 hops beat the ring's 10 and
 * the tree's chain plus 2 clog2(3) = 4 inter hops, and its per-node
 * egress 2(N-1)/N x S = 4/3 S beats the tree's 2S at every size, among
 * the protocols Braid generates (LL, Simple; the ring's LL128 would win
 * at 1 MiB). */
static void test_select_hier(void **state) {
  (void)state;
  brd_tune_mask_t m = mask_of("allreduce:HIER", NULL);
  assert_int_equal(m.algos[BRD_COLL_ALLREDUCE], A(HIER));
  assert_string_equal(brd_algo_name(BRD_ALGO_HIER), "Hier");
  m = mask_of(NULL, "LL,Simple");
  brd_tune_topo_t t = cluster(3, 1, 400.0);
  t.nranks = 6;
  t.local_nranks = 2;
  uint32_t avail = A(RING) | A(TREE) | A(HIER);
  for (size_t bytes = KIB; bytes <= GIB; bytes *= 32) {
    brd_tune_choice_t c;
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, bytes, avail, &m, &c), ncclSuccess);
    if (c.algo != BRD_ALGO_HIER)
      fail_msg("%zu bytes: %s/%s", bytes, brd_algo_name(c.algo), brd_proto_name(c.proto));
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, bytes, A(RING) | A(TREE), &m, &c),
                     ncclSuccess);
    assert_true(c.algo == BRD_ALGO_RING || c.algo == BRD_ALGO_TREE);
  }
  /* Uneven nodes: forced Hier has nothing left to run, and says so. */
  t.nranks = 5;
  brd_tune_mask_t only = mask_of("allreduce:hier", NULL);
  brd_tune_choice_t c;
  assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, MIB, avail, &only, &c),
                   ncclInvalidUsage);
}

static void test_cluster_by_hand(void **state) {
  (void)state;
  brd_tune_topo_t t = cluster(2, 1, 100.0);
  assert_close(t.inter_bw, 11.75);
  assert_int_equal(t.inter_nics, 1);
  /* Ring: 28 intra + 2 inter hops x 5; 2 x 15/16 GiB leave each node. */
  assert_close(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_RING, BRD_PROTO_SIMPLE),
               5.0 + (28 * 0.6 + 2 * 2.7) * 5 + 2.0 * 15 / 16 * GIB / 11.75 / 1000.0);
  /* Tree on two nodes: a chain of 8 in each node (14 intra hops), one
   * exchange each way between them, S per node, fit 0.9. */
  assert_close(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_TREE, BRD_PROTO_SIMPLE),
               5.0 + (14 * 0.6 + 2 * 2.7) * 5 + (double)GIB / 11.75 / 900.0);
  /* Hierarchical: 14 intra + 2 inter hops; 2 x 1/2 x S per node over the
   * NIC, the busier link (2 x 7/8 x S over NVLink at 370 GB/s is less). */
  double hier = 5.0 + (14 * 0.6 + 2 * 2.7) * 5 + (double)GIB / 11.75 / 1000.0;
  assert_close(brd_tune_estimate_hier(&t, BRD_COLL_ALLREDUCE, GIB, BRD_PROTO_SIMPLE), hier);
  assert_close(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_HIER, BRD_PROTO_SIMPLE),
               hier);
  /* LL moves half a payload per byte and has no LL128 generator. */
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_HIER, BRD_PROTO_LL128) < 0);
  /* Nodes of different sizes: the plan would be the ring's, so no Hier. */
  brd_tune_topo_t uneven = t;
  uneven.nranks = 15;
  assert_true(brd_tune_estimate(&uneven, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_HIER,
                                BRD_PROTO_SIMPLE) < 0);
  /* One rank per node: nothing to split either. */
  brd_tune_topo_t single = t;
  single.nranks = 2;
  single.local_nranks = 1;
  assert_true(brd_tune_estimate(&single, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_HIER,
                                BRD_PROTO_SIMPLE) < 0);
  /* Four NICs: the ring's node egress spreads over them. */
  t = cluster(2, 4, 100.0);
  assert_close(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_RING, BRD_PROTO_SIMPLE),
               5.0 + (28 * 0.6 + 2 * 2.7) * 5 + 2.0 * 15 / 16 * GIB / 47.0 / 1000.0);
  /* Hierarchical is an AllReduce of several nodes only. */
  assert_true(brd_tune_estimate_hier(&t, BRD_COLL_ALLGATHER, GIB, BRD_PROTO_SIMPLE) < 0);
  brd_tune_topo_t one = topo8();
  assert_true(brd_tune_estimate_hier(&one, BRD_COLL_ALLREDUCE, GIB, BRD_PROTO_SIMPLE) < 0);
  /* Bad layouts are refused. */
  brd_tune_topo_t bad;
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 0, 8, 8, 400, &bad), ncclInvalidArgument);
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 2, 8, 0, 400, &bad), ncclInvalidArgument);
  assert_int_equal(brd_hw_topo(BRD_HW_GPU_H100, 2, 8, 8, 0, &bad), ncclInvalidArgument);
  t.inter_nics = -1;
  assert_true(brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_RING, BRD_PROTO_SIMPLE) < 0);
}

/* Published AllReduce busbw for nodes of 8 H100 with 8 x 400G NICs: the
 * flat Ring/Tree ceiling is 8 x 46-48 = 370-385 GB/s, measured 350-360 at
 * scale (nccl-tests#290, #283; nvls-ib.md 4.3); 2-node NVLSTree ~470
 * (nccl#2409). The large-message prediction must land within 15%. */
static void test_cluster_published(void **state) {
  (void)state;
  const double published = (350.0 + 385.0) / 2.0;
  const size_t big = 8 * GIB;
  brd_tune_mask_t m = mask_of(NULL, NULL);
  const int layouts[2] = {2, 16};
  for (int k = 0; k < 2; k++) {
    brd_tune_topo_t t = cluster(layouts[k], 8, 400.0);
    double ring = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, big, BRD_ALGO_RING, BRD_PROTO_SIMPLE);
    double bw = busbw(&t, big, ring);
    if (fabs(bw - published) > 0.15 * published)
      fail_msg("%d nodes: Ring busbw %.1f GB/s, published %.1f", layouts[k], bw, published);
    /* What Braid can generate picks the ring here, at that figure. */
    assert_choice(&t, BRD_COLL_ALLREDUCE, big, AVAIL_SHOTS, &m, BRD_ALGO_RING, BRD_PROTO_SIMPLE,
                  ring);
  }
  brd_tune_topo_t t = cluster(2, 8, 400.0);
  double nt = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, big, BRD_ALGO_NVLS_TREE,
                                BRD_PROTO_SIMPLE);
  double bw = busbw(&t, big, nt);
  if (fabs(bw - 470.0) > 0.15 * 470.0) fail_msg("2 nodes: NVLSTree busbw %.1f, published 470", bw);
}

/* Bigger calls never take less time, for every algorithm, the hierarchical
 * pattern and the choice; more nodes never make a large ring faster. */
static void test_cluster_monotone(void **state) {
  (void)state;
  brd_tune_mask_t m = mask_of(NULL, NULL);
  const int layouts[2] = {2, 16};
  for (int k = 0; k < 2; k++) {
    brd_tune_topo_t t = cluster(layouts[k], 8, 400.0);
    double prev[BRD_ALGO_COUNT + 2] = {0};
    for (size_t bytes = 8; bytes <= 8 * GIB; bytes *= 2) {
      for (int a = 0; a <= BRD_ALGO_COUNT + 1; a++) {
        double e;
        if (a == BRD_ALGO_COUNT + 1) {
          brd_tune_choice_t c;
          assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, bytes, ALL_ALGOS, &m, &c),
                           ncclSuccess);
          e = c.time_us;
        } else if (a == BRD_ALGO_COUNT) {
          e = brd_tune_estimate_hier(&t, BRD_COLL_ALLREDUCE, bytes, BRD_PROTO_SIMPLE);
          assert_true(e > 0);
        } else {
          e = brd_tune_estimate(&t, BRD_COLL_ALLREDUCE, bytes, (brd_algo_t)a, BRD_PROTO_SIMPLE);
          if (e < 0) continue;
        }
        if (e < prev[a]) fail_msg("%d nodes, %zu bytes, column %d: %.3f < %.3f", layouts[k],
                                  bytes, a, e, prev[a]);
        prev[a] = e;
      }
    }
  }
  brd_tune_topo_t t2 = cluster(2, 8, 400.0), t16 = cluster(16, 8, 400.0);
  assert_true(brd_tune_estimate(&t16, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_RING, BRD_PROTO_SIMPLE) >
              brd_tune_estimate(&t2, BRD_COLL_ALLREDUCE, GIB, BRD_ALGO_RING, BRD_PROTO_SIMPLE));
}

/* ---- logging ---- */

static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void test_log_lines(void **state) {
  (void)state;
  char dir[] = "/tmp/test_tune.XXXXXX";
  char path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/log", dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  brd_param_reload();
  brd_log_reset();

  /* A topology no other test uses (CollNet changes nothing on one node). */
  brd_tune_topo_t t = topo8();
  t.collnet = 1;
  brd_tune_mask_t m = mask_of(NULL, NULL);
  brd_tune_choice_t c;
  for (int i = 0; i < 2; i++)
    assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, KIB, AVAIL_SHOTS, &m, &c),
                     ncclSuccess);
  assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLREDUCE, 256 * MIB, AVAIL_SHOTS, &m, &c),
                   ncclSuccess);
  assert_int_equal(brd_tune_select(&t, BRD_COLL_ALLGATHER, 8 * KIB, A(RING), &m, &c),
                   ncclSuccess);

  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG_FILE");
  brd_param_reload();
  brd_log_reset(); /* closes the file */

  static char text[1 << 16];
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  rmdir(dir);

  /* The line a benchmark parses, exactly. Ring all-gather of 8 KiB:
   * 5 + 7 + 7168 / 50000. */
  assert_int_equal(count_lines(text, "NCCL INFO AllReduce: 1024 Bytes -> Algo OneShot proto LL "
                                     "time 6.18 us\n"), 2);
  assert_int_equal(count_lines(text, "NCCL INFO AllReduce: 268435456 Bytes -> Algo Ring proto "
                                     "Simple time 4772.62 us\n"), 1);
  assert_int_equal(count_lines(text, "NCCL INFO AllGather: 8192 Bytes -> Algo Ring proto LL "
                                     "time 12.14 us\n"), 1);
  /* One table per (topology, collective), with a row per generator. */
  assert_int_equal(count_lines(text, "AllReduce cost model: 8 ranks, 1 nodes"), 1);
  assert_int_equal(count_lines(text, "AllGather cost model: 8 ranks, 1 nodes"), 1);
  assert_int_equal(count_lines(text, "      OneShot |"), 1);
  assert_int_equal(count_lines(text, "         Ring |"), 2);
  /* The 1 KiB one-shot LL cell of the AllReduce table. */
  assert_non_null(strstr(text, "      OneShot |      6.2 "));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_parse_unset),
      cmocka_unit_test(test_parse_algo_forms),
      cmocka_unit_test(test_parse_proto_forms),
      cmocka_unit_test(test_parse_rejects),
      cmocka_unit_test(test_select_8_ranks),
      cmocka_unit_test(test_select_two_nodes),
      cmocka_unit_test(test_select_monotone),
      cmocka_unit_test(test_select_hier),
      cmocka_unit_test(test_overrides_force),
      cmocka_unit_test(test_empty_intersection),
      cmocka_unit_test(test_single_rank),
      cmocka_unit_test(test_estimate),
      cmocka_unit_test(test_nvls_model),
      cmocka_unit_test(test_host_model),
      cmocka_unit_test(test_cluster_by_hand),
      cmocka_unit_test(test_cluster_published),
      cmocka_unit_test(test_cluster_monotone),
      cmocka_unit_test(test_log_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
