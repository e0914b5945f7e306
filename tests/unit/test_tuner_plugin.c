/*
 * Tuner plugins: the loader (NCCL_TUNER_PLUGIN as a path, a name, none, a
 * library exporting several versions, a tuner inside the net plugin's
 * library, a failed load remembered), every ABI version (v2 .. v6) against
 * the test plugin (tests/plugins/tuner_test.c) built per version, the cost
 * table as the plugin sees it (shape, NCCL's indices, -1 where Braid has
 * no plan), the pick (0 wins, -1 never, all -1 is NCCL's error, a failing
 * getCollInfo falls back), and communicators of 3 and 4 host-mode ranks
 * whose tuner forces each (algorithm, protocol) Braid can run: the results
 * are compared with a CPU sum and the plan actually generated is read from
 * the communicator's plan cache, not from the plugin.
 */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testenv.h"
#include "../plugins/tuner_test.h"

#include "nccl.h"
#include "nccl_tuner.h"
#include "base/debug.h"
#include "base/param.h"
#include "core/comm.h"
#include "core/window.h"
#include "plan/tune.h"
#include "plan/tuner_plugin.h"
#include "transport/net_plugin.h"

static char plugdir[1024]; /* <build>/tests/plugins */
static char exampledir[1024 + 16]; /* <build>/plugins */

static void lib_file(char *out, size_t n, const char *which) {
  snprintf(out, n, "%s/%s", plugdir, which);
}

static void env_clean(void) {
  brd_test_env_clear();
  unsetenv("TUNERTEST_FORCE");
  unsetenv("TUNERTEST_FAULT");
  unsetenv("TUNERTEST_NCHANNELS");
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "60", 1);
  brd_param_reload();
}

static int setup(void **state) {
  (void)state;
  brd_tuner_reset();
  brd_net_reset();
  env_clean();
  brd_log_set_last_error("(none)");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  brd_tuner_reset();
  brd_net_reset();
  env_clean();
  return 0;
}

static void use_tuner(const char *spec) {
  setenv("NCCL_TUNER_PLUGIN", spec, 1);
  brd_param_reload();
}

static void use_tuner_file(const char *which) {
  char f[PATH_MAX];
  lib_file(f, sizeof(f), which);
  use_tuner(f);
}

/* The plugin's record, from the library Braid loaded (file, version).
 * With hold_out the caller keeps a reference of its own (dlclose it),
 * so the record outlives the loader's last reference. */
static tunertest_state_t *state_hold(const char *which, int ver, void **hold_out) {
  char f[PATH_MAX];
  lib_file(f, sizeof(f), which);
  void *h = dlopen(f, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) fail_msg("%s is not loaded", f);
  char sym[64];
  snprintf(sym, sizeof(sym), "tunertest_state_v%d", ver);
  tunertest_state_t *s = dlsym(h, sym);
  if (s == NULL) fail_msg("%s has no %s", f, sym);
  if (hold_out != NULL)
    *hold_out = h;
  else
    dlclose(h); /* the loader keeps its own reference */
  return s;
}

static tunertest_state_t *state_of(const char *which, int ver) {
  return state_hold(which, ver, NULL);
}

static brd_tuner_comm_t comm4(void) {
  brd_tuner_comm_t c = {0xabcdef0123ull, 4, 1, 1, 4, 4};
  return c;
}

/* Four ranks on one host in host mode, as window.c describes them. */
static brd_tune_topo_t topo4(void) {
  brd_tune_topo_t t;
  memset(&t, 0, sizeof(t));
  t.nranks = 4;
  t.nnodes = 1;
  t.local_nranks = 4;
  t.ranks_per_device = 1;
  t.host_mode = 1;
  t.intra_bw = 10.0f;
  t.intra_lat = 1.0f;
  return t;
}

#define ALGOS_AR                                                                          \
  (BRD_ALGO_BIT(BRD_ALGO_RING) | BRD_ALGO_BIT(BRD_ALGO_TREE) |                             \
   BRD_ALGO_BIT(BRD_ALGO_ONESHOT) | BRD_ALGO_BIT(BRD_ALGO_TWOSHOT))
#define PROTOS (BRD_PROTO_BIT(BRD_PROTO_LL) | BRD_PROTO_BIT(BRD_PROTO_SIMPLE))

static ncclResult_t pick(brd_tuner_t *t, brd_coll_t coll, size_t bytes, uint32_t algos,
                         const char *algo_env, brd_tune_choice_t *ch, int *nch) {
  brd_tune_topo_t topo = topo4();
  brd_tune_mask_t mask;
  assert_int_equal(brd_tune_parse(algo_env, NULL, &mask), ncclSuccess);
  return brd_tuner_select(t, &topo, coll, bytes, algos, PROTOS, &mask, 3, 0, ch, nch);
}

static void expect_last_error(const char *needle) {
  const char *msg = brd_log_last_error();
  if (strstr(msg, needle) == NULL)
    fail_msg("last error \"%s\" does not mention \"%s\"", msg, needle);
}

/* ---- every version loads; init, the table, finalize ---- */

static void check_version(const char *which, int ver) {
  use_tuner_file(which);
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_non_null(t);
  assert_int_equal(brd_tuner_version(t), ver);
  char name[32];
  snprintf(name, sizeof(name), "TunerTest_v%d", ver);
  assert_string_equal(brd_tuner_name(t), name);
  void *hold = NULL;
  tunertest_state_t *s = state_hold(which, ver, &hold);
  memset(s, 0, sizeof(*s));
  /* A second communicator: one more init on the same library. */
  brd_tuner_t *t2 = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t2), ncclSuccess);
  assert_non_null(t2);
  assert_int_equal(s->inits, 1);
  assert_int_equal((int)s->nranks, 4);
  assert_int_equal((int)s->nnodes, 1);
  assert_int_equal(s->logged, 1);
  if (ver >= 5) {
    assert_true(s->comm_id == 0xabcdef0123ull);
    assert_int_equal(s->nvl[0], 1);
    assert_int_equal(s->nvl[1], 4);
    assert_int_equal(s->nvl[2], 4);
    assert_int_equal(s->constants_whole, 1);
    assert_true(s->base_latency > 0.0);
  }

  /* The table as the plugin sees it: 7 x 3, NCCL's indices; Braid's ring
   * and tree under NCCL_ALGO_RING (1) and NCCL_ALGO_TREE (0), LL in
   * column 0 and Simple in column 2, -1 everywhere else. */
  brd_tune_choice_t ch;
  int nch = -1;
  size_t bytes = 1 << 20;
  assert_int_equal(pick(t2, BRD_COLL_ALLREDUCE, bytes, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
  assert_int_equal(s->calls, 1);
  assert_int_equal(s->func, 4); /* ncclFuncAllReduce */
  assert_true(s->bytes == bytes);
  assert_int_equal(s->pipe_ops, 3);
  assert_int_equal(s->nch_in, 0);
  assert_int_equal(s->bad_ctx, 0);
  if (ver >= 3) {
    assert_int_equal(s->num_algo, 7);
    assert_int_equal(s->num_proto, 3);
    if (ver >= 4) assert_int_equal(s->reg_buff, 0);
    brd_tune_topo_t topo = topo4();
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) {
        float want = -1.0f;
        if ((a == NCCL_ALGO_RING || a == NCCL_ALGO_TREE) && p != NCCL_PROTO_LL128)
          want = brd_tune_estimate(&topo, BRD_COLL_ALLREDUCE, bytes,
                                   a == NCCL_ALGO_RING ? BRD_ALGO_RING : BRD_ALGO_TREE,
                                   p == NCCL_PROTO_LL ? BRD_PROTO_LL : BRD_PROTO_SIMPLE);
        if (s->table[a][p] != want)
          fail_msg("v%d table[%d][%d] = %g, expected %g", ver, a, p, (double)s->table[a][p],
                   (double)want);
        if (want != -1.0f) assert_true(want > 0.0f);
      }
  } else {
    assert_int_equal(s->v2_nvls, 0);
    assert_int_equal(s->v2_collnet, 0);
  }
  brd_tuner_destroy(t2);
  brd_tuner_destroy(t);
  assert_int_equal(s->finalizes, 2);
  assert_int_equal(s->bad_ctx, 0);
  dlclose(hold);
  /* The last context closed the library. */
  char f[PATH_MAX];
  lib_file(f, sizeof(f), which);
  assert_null(dlopen(f, RTLD_NOW | RTLD_NOLOAD));
}

static void test_every_version_loads(void **state) {
  (void)state;
  static const int vers[] = {2, 3, 4, 5, 6};
  for (size_t i = 0; i < sizeof(vers) / sizeof(vers[0]); i++) {
    char which[64];
    snprintf(which, sizeof(which), "libnccl-tuner-testv%d.so", vers[i]);
    check_version(which, vers[i]);
    brd_tuner_reset();
  }
}

/* ---- the pick ---- */

/* Each forced pair Braid can run wins, in every table version; v2's pair
 * goes through NCCL's adapter rule (set to 0). */
static void test_forced_pairs(void **state) {
  (void)state;
  static const int vers[] = {2, 3, 5, 6};
  static const struct {
    const char *force;
    brd_algo_t algo;
    brd_proto_t proto;
  } cases[] = {{"0,0", BRD_ALGO_TREE, BRD_PROTO_LL},
               {"0,2", BRD_ALGO_TREE, BRD_PROTO_SIMPLE},
               {"1,0", BRD_ALGO_RING, BRD_PROTO_LL},
               {"1,2", BRD_ALGO_RING, BRD_PROTO_SIMPLE}};
  for (size_t v = 0; v < sizeof(vers) / sizeof(vers[0]); v++) {
    char which[64];
    snprintf(which, sizeof(which), "libnccl-tuner-testv%d.so", vers[v]);
    use_tuner_file(which);
    brd_tuner_comm_t cc = comm4();
    brd_tuner_t *t = NULL;
    assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
    assert_non_null(t);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
      for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 64) {
        setenv("TUNERTEST_FORCE", cases[i].force, 1);
        brd_tune_choice_t ch;
        int nch = -1;
        assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, bytes, ALGOS_AR, NULL, &ch, &nch),
                         ncclSuccess);
        if (ch.algo != cases[i].algo || ch.proto != cases[i].proto)
          fail_msg("v%d force %s at %zu bytes: got %s/%s", vers[v], cases[i].force, bytes,
                   brd_algo_name(ch.algo), brd_proto_name(ch.proto));
        assert_int_equal(nch, 0);
      }
    unsetenv("TUNERTEST_FORCE");
    brd_tuner_destroy(t);
    brd_tuner_reset();
  }
}

/* No change: Braid's own choice (OneShot/TwoShot included); a pair Braid
 * cannot run set to 0 is ignored and the cheapest offered pair wins;
 * nChannels comes back; non-tuned collectives never reach the plugin. */
static void test_pick_rules(void **state) {
  (void)state;
  use_tuner_file("libnccl-tuner-testv5.so");
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  tunertest_state_t *s = state_of("libnccl-tuner-testv5.so", 5);
  brd_tune_topo_t topo = topo4();
  brd_tune_mask_t mask;
  assert_int_equal(brd_tune_parse(NULL, NULL, &mask), ncclSuccess);
  for (size_t bytes = 8; bytes <= (64u << 20); bytes *= 16) {
    brd_tune_choice_t own, ch;
    int nch = -1;
    assert_int_equal(brd_tune_select(&topo, BRD_COLL_ALLREDUCE, bytes, ALGOS_AR, &mask, &own),
                     ncclSuccess);
    assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, bytes, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
    assert_int_equal(ch.algo, own.algo);
    assert_int_equal(ch.proto, own.proto);

    /* NVLS/Simple (4,2) and Ring/LL128 (1,1) are -1 here: set to 0, they
     * are ignored, so the cheapest offered (ring/tree x LL/Simple) wins. */
    static const char *const unoffered[] = {"4,2", "1,1"};
    for (int u = 0; u < 2; u++) {
      setenv("TUNERTEST_FORCE", unoffered[u], 1);
      assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, bytes, ALGOS_AR, NULL, &ch, &nch),
                       ncclSuccess);
      float best = -1.0f;
      brd_algo_t ba = BRD_ALGO_COUNT;
      brd_proto_t bp = BRD_PROTO_COUNT;
      /* NCCL's scan order: TREE before RING, LL before Simple; first min wins. */
      const brd_algo_t order_a[2] = {BRD_ALGO_TREE, BRD_ALGO_RING};
      const brd_proto_t order_p[2] = {BRD_PROTO_LL, BRD_PROTO_SIMPLE};
      for (int a = 0; a < 2; a++)
        for (int p = 0; p < 2; p++) {
          float c = brd_tune_estimate(&topo, BRD_COLL_ALLREDUCE, bytes, order_a[a], order_p[p]);
          if (c >= 0.0f && (best < 0.0f || c < best)) {
            best = c;
            ba = order_a[a];
            bp = order_p[p];
          }
        }
      assert_int_equal(ch.algo, ba);
      assert_int_equal(ch.proto, bp);
      unsetenv("TUNERTEST_FORCE");
    }
  }

  setenv("TUNERTEST_NCHANNELS", "3", 1);
  brd_tune_choice_t ch;
  int nch = -1;
  assert_int_equal(pick(t, BRD_COLL_ALLGATHER, 4096, BRD_ALGO_BIT(BRD_ALGO_RING) |
                                                         BRD_ALGO_BIT(BRD_ALGO_ONESHOT),
                        NULL, &ch, &nch), ncclSuccess);
  assert_int_equal(nch, 3);
  assert_int_equal(s->func, 2); /* ncclFuncAllGather */
  unsetenv("TUNERTEST_NCHANNELS");

  int calls = s->calls;
  assert_int_equal(pick(t, BRD_COLL_ALLTOALL, 4096, BRD_ALGO_BIT(BRD_ALGO_ONESHOT), NULL, &ch,
                        &nch), ncclSuccess);
  assert_int_equal(ch.algo, BRD_ALGO_ONESHOT);
  /* Only OneShot/TwoShot can run (a deterministic reduction): no call. */
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 4096,
                        BRD_ALGO_BIT(BRD_ALGO_ONESHOT) | BRD_ALGO_BIT(BRD_ALGO_TWOSHOT), NULL,
                        &ch, &nch), ncclSuccess);
  assert_int_equal(s->calls, calls);
  brd_tuner_destroy(t);
}

/* Every entry -1: NCCL's error (ncclInternalError; ncclInvalidUsage when
 * NCCL_ALGO is set). getCollInfo failing: a WARN and Braid's choice. */
static void test_errors(void **state) {
  (void)state;
  use_tuner_file("libnccl-tuner-testv6.so");
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  brd_tune_choice_t ch, own;
  int nch;
  setenv("TUNERTEST_FAULT", "ignore_all", 1);
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 4096, ALGOS_AR, NULL, &ch, &nch),
                   ncclInternalError);
  expect_last_error("no algorithm/protocol available");
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 4096, ALGOS_AR, "ring,tree", &ch, &nch),
                   ncclInvalidUsage);
  expect_last_error("NCCL_ALGO=ring,tree");

  setenv("TUNERTEST_FAULT", "getcollinfo", 1);
  brd_log_set_last_error("(none)");
  brd_tune_topo_t topo = topo4();
  brd_tune_mask_t mask;
  assert_int_equal(brd_tune_parse(NULL, NULL, &mask), ncclSuccess);
  assert_int_equal(brd_tune_select(&topo, BRD_COLL_ALLREDUCE, 4096, ALGOS_AR, &mask, &own),
                   ncclSuccess);
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 4096, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
  assert_int_equal(ch.algo, own.algo);
  assert_int_equal(ch.proto, own.proto);
  expect_last_error("getCollInfo failed");
  /* Once per communicator. */
  brd_log_set_last_error("(none)");
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 4096, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
  expect_last_error("(none)");
  brd_tuner_destroy(t);

  /* init fails: no context, a WARN, the library closed again. */
  setenv("TUNERTEST_FAULT", "init", 1);
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_null(t);
  expect_last_error("init failed");
  char f[PATH_MAX];
  lib_file(f, sizeof(f), "libnccl-tuner-testv6.so");
  assert_null(dlopen(f, RTLD_NOW | RTLD_NOLOAD));
}

/* ---- the loader ---- */

static int loaded_version(void) {
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  int v = brd_tuner_version(t);
  brd_tuner_destroy(t);
  brd_tuner_reset();
  return v;
}

static void test_loader(void **state) {
  (void)state;
  /* A bare name: libnccl-tuner-<name>.so through LD_LIBRARY_PATH. */
  use_tuner("testv3");
  assert_int_equal(loaded_version(), 3);
  /* The lib*.so name as given. */
  use_tuner("libnccl-tuner-testv5.so");
  assert_int_equal(loaded_version(), 5);
  /* Several versions in one library: the newest (v6) wins over v5, v3, v2. */
  use_tuner_file("libnccl-tuner-testmulti.so");
  assert_int_equal(loaded_version(), 6);
  /* none, in any case, even with a tuner in the net library. */
  char net[PATH_MAX];
  lib_file(net, sizeof(net), "libnccl-net-withtuner.so");
  setenv("NCCL_NET_PLUGIN", net, 1);
  use_tuner("NoNe");
  assert_int_equal(loaded_version(), 0);
  /* Unset: libnccl-tuner.so is absent, so the net plugin's library. */
  unsetenv("NCCL_TUNER_PLUGIN");
  brd_param_reload();
  assert_int_equal(loaded_version(), 5);
  /* Named but missing: the net library still (NCCL's order). */
  use_tuner("nosuchtuner");
  assert_int_equal(loaded_version(), 5);
  unsetenv("NCCL_NET_PLUGIN");
  /* Named, missing, nothing in the net library: a WARN naming the fix. */
  use_tuner("nosuchtuner");
  assert_int_equal(loaded_version(), 0);
  expect_last_error("NCCL_TUNER_PLUGIN=nosuchtuner");
  /* A library with no tuner symbol. */
  use_tuner("libnccl-net-testv12.so");
  assert_int_equal(loaded_version(), 0);
  expect_last_error("unsupported");
}

/* A failed load is not retried until reset (NCCL's rule). */
static void test_failure_remembered(void **state) {
  (void)state;
  use_tuner("nosuchtuner");
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_null(t);
  use_tuner_file("libnccl-tuner-testv5.so");
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_null(t);
  brd_tuner_reset();
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_non_null(t);
  brd_tuner_destroy(t);
}

/* ---- communicators: the forced plan is the one that runs ---- */

#define MAXR 4

/* Runs one all-reduce of count int32 on n ranks and checks every output
 * against a CPU sum. */
static void allreduce_check(ncclComm_t *c, int n, size_t count) {
  int32_t *in[MAXR], *out[MAXR];
  for (int r = 0; r < n; r++) {
    in[r] = malloc(count * sizeof(int32_t));
    out[r] = malloc(count * sizeof(int32_t));
    assert_non_null(in[r]);
    assert_non_null(out[r]);
    for (size_t i = 0; i < count; i++) {
      in[r][i] = (int32_t)(r * 1000 + (int)(i % 977) * 7 + 1);
      out[r][i] = -7;
    }
  }
  assert_int_equal(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    assert_int_equal(ncclAllReduce(in[r], out[r], count, ncclInt32, ncclSum, c[r], NULL),
                     ncclSuccess);
  assert_int_equal(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++) {
      int32_t want = 0;
      for (int q = 0; q < n; q++) want += (int32_t)(q * 1000 + (int)(i % 977) * 7 + 1);
      if (out[r][i] != want)
        fail_msg("rank %d element %zu: %d, expected %d", r, i, out[r][i], want);
    }
    free(in[r]);
    free(out[r]);
  }
}

/* Every all-reduce plan rank r ran is (algo, proto): the plan cache
 * counts the works built from each plan (every plan is generated ahead,
 * so what was generated says nothing). */
static void expect_plans(ncclComm_t c, int algo, int proto) {
  const brd_plan_cache_t *pc = &c->rt->plans;
  int seen = 0;
  for (int i = 0; i < pc->n; i++) {
    const brd_plan_entry_t *e = &pc->e[i];
    if (e->coll != BRD_IR_COLL_ALLREDUCE || e->runs == 0) continue;
    seen++;
    if (e->algo != algo || e->proto != proto)
      fail_msg("rank %d ran %s/%s, the tuner forced %s/%s", c->rank,
               brd_algo_name((brd_algo_t)e->algo), brd_proto_name((brd_proto_t)e->proto),
               brd_algo_name((brd_algo_t)algo), brd_proto_name((brd_proto_t)proto));
  }
  if (seen == 0) fail_msg("rank %d ran no all-reduce plan", c->rank);
}

static void test_forced_algorithm_runs(void **state) {
  (void)state;
  static const struct {
    const char *force;
    int algo, proto;
  } cases[] = {{"1,2", BRD_ALGO_RING, BRD_PROTO_SIMPLE},
               {"1,0", BRD_ALGO_RING, BRD_PROTO_LL},
               {"0,2", BRD_ALGO_TREE, BRD_PROTO_SIMPLE},
               {"0,0", BRD_ALGO_TREE, BRD_PROTO_LL}};
  static const int vers[] = {2, 6};
  for (int n = 3; n <= MAXR; n++)
    for (size_t v = 0; v < sizeof(vers) / sizeof(vers[0]); v++)
      for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char which[64];
        snprintf(which, sizeof(which), "libnccl-tuner-testv%d.so", vers[v]);
        use_tuner_file(which);
        setenv("TUNERTEST_FORCE", cases[i].force, 1);
        ncclComm_t c[MAXR];
        assert_int_equal(ncclCommInitAll(c, n, NULL), ncclSuccess);
        for (int r = 0; r < n; r++) {
          assert_non_null(c[r]->tuner);
          assert_int_equal(brd_tuner_version(c[r]->tuner), vers[v]);
        }
        allreduce_check(c, n, 1031);
        allreduce_check(c, n, 70001);
        for (int r = 0; r < n; r++) expect_plans(c[r], cases[i].algo, cases[i].proto);
        tunertest_state_t *s = state_of(which, vers[v]);
        assert_true(s->calls >= 2 * n);
        assert_int_equal(s->bad_ctx, 0);
        for (int r = 0; r < n; r++) assert_int_equal(ncclCommDestroy(c[r]), ncclSuccess);
        brd_tuner_reset();
      }
}

/* getCollInfo failing inside a real communicator: still exact. */
static void test_fallback_runs(void **state) {
  (void)state;
  use_tuner_file("libnccl-tuner-testv5.so");
  setenv("TUNERTEST_FAULT", "getcollinfo", 1);
  ncclComm_t c[3];
  assert_int_equal(ncclCommInitAll(c, 3, NULL), ncclSuccess);
  allreduce_check(c, 3, 4099);
  expect_last_error("getCollInfo failed");
  for (int r = 0; r < 3; r++) assert_int_equal(ncclCommDestroy(c[r]), ncclSuccess);
}

/* ---- plugins/tuner-example with a CSV in NVIDIA's format ---- */

static void test_example_tuner(void **state) {
  (void)state;
  char lib[PATH_MAX], conf[PATH_MAX];
  snprintf(lib, sizeof(lib), "%s/libnccl-tuner-example.so", exampledir);
  if (access(lib, R_OK) != 0) fail_msg("%s not built", lib);
  snprintf(conf, sizeof(conf), "/tmp/braid-tuner-conf-%d.csv", (int)getpid());
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f, "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,"
             "nRanks,numPipeOps,regBuff\n"
             "allreduce,0,65536,tree,ll,-1,1,-1,-1,-1\n"
             "allreduce,65537,4294967295,ring,simple,2,-1,4,-1,-1\n"
             "allreduce,65537,4294967295,tree,simple,-1,-1,3\n"
             "broadcast,0,4294967295,nvls,simple,-1,-1,-1\n");
  fclose(f);
  setenv("NCCL_TUNER_CONFIG_FILE", conf, 1);
  use_tuner(lib);
  brd_tuner_comm_t cc = comm4();
  brd_tuner_t *t = NULL;
  assert_int_equal(brd_tuner_create(&cc, &t), ncclSuccess);
  assert_non_null(t);
  assert_int_equal(brd_tuner_version(t), 5);
  brd_tune_choice_t ch;
  int nch;
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 1000, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
  assert_int_equal(ch.algo, BRD_ALGO_TREE);
  assert_int_equal(ch.proto, BRD_PROTO_LL);
  assert_int_equal(pick(t, BRD_COLL_ALLREDUCE, 1 << 20, ALGOS_AR, NULL, &ch, &nch), ncclSuccess);
  assert_int_equal(ch.algo, BRD_ALGO_RING);
  assert_int_equal(ch.proto, BRD_PROTO_SIMPLE);
  assert_int_equal(nch, 2);
  brd_tuner_destroy(t);
  /* nRanks 3 matches the third line instead. */
  brd_tuner_comm_t c3 = {1, 3, 1, 1, 3, 3};
  assert_int_equal(brd_tuner_create(&c3, &t), ncclSuccess);
  brd_tune_topo_t topo = topo4();
  topo.nranks = topo.local_nranks = 3;
  brd_tune_mask_t mask;
  assert_int_equal(brd_tune_parse(NULL, NULL, &mask), ncclSuccess);
  assert_int_equal(brd_tuner_select(t, &topo, BRD_COLL_ALLREDUCE, 1 << 20, ALGOS_AR, PROTOS,
                                    &mask, 1, 0, &ch, &nch), ncclSuccess);
  assert_int_equal(ch.algo, BRD_ALGO_TREE);
  assert_int_equal(ch.proto, BRD_PROTO_SIMPLE);
  /* NVLS is -1 here: the example leaves the table alone (no opinion). */
  brd_tune_choice_t own;
  assert_int_equal(brd_tune_select(&topo, BRD_COLL_BROADCAST, 4096, ALGOS_AR, &mask, &own),
                   ncclSuccess);
  assert_int_equal(brd_tuner_select(t, &topo, BRD_COLL_BROADCAST, 4096, ALGOS_AR, PROTOS, &mask,
                                    1, 0, &ch, &nch), ncclSuccess);
  assert_int_equal(ch.algo, own.algo);
  brd_tuner_destroy(t);
  unlink(conf);
  unsetenv("NCCL_TUNER_CONFIG_FILE");
}

int main(int argc, char **argv) {
  (void)argc;
  int go = brd_test_plugin_dir(argv, "BRD_TEST_TUNER_PLUGIN_PATHSET",
                               "libnccl-tuner-testmulti.so", plugdir, sizeof(plugdir));
  if (go != 0) return go;
  snprintf(exampledir, sizeof(exampledir), "%s/../../plugins", plugdir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_version_loads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_forced_pairs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pick_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_loader, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failure_remembered, setup, teardown),
      cmocka_unit_test_setup_teardown(test_forced_algorithm_runs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fallback_runs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_example_tuner, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
