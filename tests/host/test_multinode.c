/*
 * The plans across nodes end to end, host mode, public API only: ranks are
 * processes staged on 2 and 3 "hosts" of this machine (BRAID_HOSTID per
 * process, so ranks of different hosts share no memory and talk over the
 * net through port channels, ranks of one host through shared memory).
 *
 * For each layout (2x2, 2x3, 3x2, 3x1, 2x2 with the hosts' ranks
 * interleaved, and the uneven 2+1 and 1+2+1) and each forced all-reduce
 * plan (NCCL_ALGO=allreduce:Tree and allreduce:Hier; NCCL_PROTO LL and
 * Simple on the first three layouts, one of them, alternating, on the
 * others), every rank checks against an independent CPU reference
 * (tests/common/coll_ref.c), outputs poisoned first:
 *   - ncclAllReduce for several dtypes x every op x in place and out of
 *     place x counts 1, 7, 1023 and 70001 (several windows of several
 *     chunks), exactly (avg within one ulp);
 *   - every other collective once (all-gather, reduce-scatter, broadcast,
 *     reduce, all-to-all, gather, scatter, send/recv with both
 *     neighbours), so the node layout the plans now carry breaks nothing.
 * Hier needs nodes of one size: on the uneven layouts a forced Hier
 * all-reduce is refused with ncclInvalidUsage naming NCCL_ALGO, and the
 * communicator goes on working. BRAID_TEST_QUICK=1 runs fewer dtypes, ops,
 * counts and protocols. In CUDA mode (BRAID_DEVICE=cuda, the simulator's
 * builds) buffers are managed memory, each rank has a stream, and only
 * the 3x2 layout runs, Simple, a smaller matrix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"
#include "tdev.h"
#include "trank.h"

#define MAXR 8

typedef struct {
  const char *name;
  int n;
  int host[MAXR]; /* node of each rank */
  int even;       /* nodes of one size, two ranks or more each */
} layout_t;

static const layout_t layouts[] = {
    {"2 hosts x 2", 4, {0, 0, 1, 1}, 1},
    {"2 hosts x 3", 6, {0, 0, 0, 1, 1, 1}, 1},
    {"3 hosts x 2", 6, {0, 0, 1, 1, 2, 2}, 1},
    {"3 hosts x 1", 3, {0, 1, 2}, 0},
    {"2 hosts x 2, interleaved", 4, {0, 1, 0, 1}, 1},
    {"2 hosts, 2+1", 3, {0, 0, 1}, 0},
    {"3 hosts, 1+2+1", 4, {0, 1, 1, 2}, 0},
};

typedef struct {
  const char *algo, *proto;
} config_t;

static const config_t configs[] = {
    {"allreduce:Tree", "LL"},
    {"allreduce:Tree", "Simple"},
    {"allreduce:Hier", "LL"},
    {"allreduce:Hier", "Simple"},
};

static int quick(void) { return tdev_quick() || tdev_kind() == TDEV_CUDA; }

/* A stream's work must finish within this. */
#define SYNC_TIMEOUT_S 300.0

/* ---- one rank ---------------------------------------------------------------- */

/* Buffers the library may be given (managed memory in CUDA mode). */
static void *xmalloc(size_t bytes) {
  void *p = tdev_alloc(bytes ? bytes : 1);
  if (p == NULL) abort();
  return p;
}

static void xfree(void *p) { tdev_free(p); }

static void allreduce_matrix(trank_t *c, ncclComm_t comm) {
  static const ncclDataType_t dts[] = {ncclInt32, ncclFloat32, ncclInt8, ncclBfloat16};
  static const size_t counts[] = {1, 7, 1023, 70001};
  /* CUDA mode runs on the simulator, which is slow: one dtype, sum and
   * avg, two counts. */
  int cuda = tdev_kind() == TDEV_CUDA;
  int ndt = cuda ? 1 : quick() ? 2 : 4;
  for (int d = 0; d < ndt && !c->failures; d++)
    for (int op = 0; op < ncclNumOps && !c->failures; op++) {
      if (quick() && op != ncclSum && op != ncclAvg && (cuda || op != ncclMax)) continue;
      for (int ip = 0; ip < 2; ip++)
        for (size_t k = cuda ? 2 : quick() ? 1 : 0; k < 4; k++) {
          ncclResult_t res =
              trank_allreduce_check(c, comm, dts[d], (ncclRedOp_t)op, ip, counts[k]);
          if (res != ncclSuccess) {
            trank_fail(c, "all-reduce count %zu: %s (%s)", counts[k], ncclGetErrorString(res),
                       ncclGetLastError(comm));
            return;
          }
        }
    }
}

#define CALL(c, call)                                                                \
  do {                                                                               \
    ncclResult_t r_ = trank_synced((c), (call));                                     \
    if (r_ != ncclSuccess) {                                                         \
      trank_fail((c), "%s: %s (%s)", #call, ncclGetErrorString(r_),                  \
                 ncclGetLastError(NULL));                                            \
      goto out;                                                                      \
    }                                                                                \
  } while (0)

/* Every other collective once, int32, 1023 elements a segment. */
static void others(trank_t *c, ncclComm_t comm) {
  const size_t cnt = 1023, es = 4;
  const ncclDataType_t dt = ncclInt32;
  int n = c->n, r = c->rank;
  char m[160] = "";
  void *in = xmalloc((size_t)n * cnt * es), *out = xmalloc((size_t)n * cnt * es);
  void *expect = malloc(cnt * es);
  if (expect == NULL) abort();
  int next = (r + 1) % n, prev = (r + n - 1) % n;

  /* All-gather: segment q of the output is q's input. */
  ref_fill_move(dt, r, 0, in, cnt);
  ref_poison(dt, out, (size_t)n * cnt);
  CALL(c, ncclAllGather(in, out, cnt, dt, comm, c->stream));
  for (int q = 0; q < n; q++)
    if (ref_check_move(dt, q, 0, (char *)out + (size_t)q * cnt * es, cnt, m, sizeof(m)))
      trank_fail(c, "all-gather segment %d: %s", q, m);

  /* Reduce-scatter: the sum of every rank's segment r. */
  ref_fill_input(dt, ncclSum, r, in, (size_t)n * cnt);
  ref_poison(dt, out, cnt);
  CALL(c, ncclReduceScatter(in, out, cnt, dt, ncclSum, comm, c->stream));
  ref_reduce_expect_range(dt, ncclSum, n, 1.0, expect, (size_t)r * cnt, cnt);
  if (ref_compare(dt, 0, out, expect, cnt, m, sizeof(m))) trank_fail(c, "reduce-scatter: %s", m);

  /* Broadcast from the last rank. */
  ref_fill_move(dt, r, 0, in, cnt);
  ref_poison(dt, out, cnt);
  CALL(c, ncclBroadcast(in, out, cnt, dt, n - 1, comm, c->stream));
  if (ref_check_move(dt, n - 1, 0, out, cnt, m, sizeof(m))) trank_fail(c, "broadcast: %s", m);

  /* Reduce (max) onto rank 1. */
  ref_fill_input(dt, ncclMax, r, in, cnt);
  ref_poison(dt, out, cnt);
  CALL(c, ncclReduce(in, out, cnt, dt, ncclMax, 1, comm, c->stream));
  if (r == 1) {
    ref_reduce_expect(dt, ncclMax, n, 1.0, expect, cnt);
    if (ref_compare(dt, 0, out, expect, cnt, m, sizeof(m))) trank_fail(c, "reduce: %s", m);
  }

  /* All-to-all: segment q of the output is q's segment r. */
  for (int q = 0; q < n; q++) ref_fill_move(dt, r, q, (char *)in + (size_t)q * cnt * es, cnt);
  ref_poison(dt, out, (size_t)n * cnt);
  CALL(c, ncclAlltoAll(in, out, cnt, dt, comm, c->stream));
  for (int q = 0; q < n; q++)
    if (ref_check_move(dt, q, r, (char *)out + (size_t)q * cnt * es, cnt, m, sizeof(m)))
      trank_fail(c, "all-to-all from %d: %s", q, m);

  /* Gather onto rank 0, scatter from the last rank. */
  ref_fill_move(dt, r, 0, in, cnt);
  ref_poison(dt, out, (size_t)n * cnt);
  CALL(c, ncclGather(in, out, cnt, dt, 0, comm, c->stream));
  for (int q = 0; r == 0 && q < n; q++)
    if (ref_check_move(dt, q, 0, (char *)out + (size_t)q * cnt * es, cnt, m, sizeof(m)))
      trank_fail(c, "gather from %d: %s", q, m);
  for (int q = 0; q < n; q++) ref_fill_move(dt, r, q, (char *)in + (size_t)q * cnt * es, cnt);
  ref_poison(dt, out, cnt);
  CALL(c, ncclScatter(in, out, cnt, dt, n - 1, comm, c->stream));
  if (ref_check_move(dt, n - 1, r, out, cnt, m, sizeof(m))) trank_fail(c, "scatter: %s", m);

  /* Send/recv with both neighbours (one when there are two ranks). */
  ref_fill_move(dt, r, next, in, cnt);
  ref_fill_move(dt, r, prev, (char *)in + cnt * es, cnt);
  ref_poison(dt, out, 2 * cnt);
  /* Inside the group nothing is queued yet, so syncing is harmless. */
  CALL(c, ncclGroupStart());
  CALL(c, ncclSend(in, cnt, dt, next, comm, c->stream));
  CALL(c, ncclRecv(out, cnt, dt, prev, comm, c->stream));
  CALL(c, ncclSend((char *)in + cnt * es, cnt, dt, prev, comm, c->stream));
  CALL(c, ncclRecv((char *)out + cnt * es, cnt, dt, next, comm, c->stream));
  CALL(c, ncclGroupEnd());
  if (ref_check_move(dt, prev, r, out, cnt, m, sizeof(m)))
    trank_fail(c, "recv from %d: %s", prev, m);
  if (ref_check_move(dt, next, r, (char *)out + cnt * es, cnt, m, sizeof(m)))
    trank_fail(c, "recv from %d: %s", next, m);
out:
  xfree(in);
  xfree(out);
  free(expect);
}

/* One layout under one configuration (the ranks' ctx). */
typedef struct {
  const layout_t *l;
  const config_t *cfg;
  int refuse; /* Hier on nodes of different sizes: refused */
} job_t;

static void rank_env(const void *ctx, int rank) {
  const job_t *j = ctx;
  char hostid[32];
  snprintf(hostid, sizeof(hostid), "multinode-%d", j->l->host[rank]);
  setenv("BRAID_HOSTID", hostid, 1);
  setenv("NCCL_ALGO", j->cfg->algo, 1);
  setenv("NCCL_PROTO", j->cfg->proto, 1);
}

static int run_rank(const void *ctx, ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  const job_t *j = ctx;
  trank_t c = {rank, n, 0, msg, msglen, NULL, SYNC_TIMEOUT_S};
  ncclComm_t comm;
  if (trank_init(&c, id, &comm) != 0) return c.failures;
  if (j->refuse) {
    /* Hier on nodes of different sizes: refused, naming the override. */
    ncclResult_t res = trank_allreduce_check(&c, comm, ncclInt32, ncclSum, 0, 7);
    if (res != ncclInvalidUsage || strstr(ncclGetLastError(comm), "NCCL_ALGO") == NULL)
      trank_fail(&c, "forced Hier on uneven nodes gave %s (%s), not ncclInvalidUsage naming "
                 "NCCL_ALGO", ncclGetErrorString(res), ncclGetLastError(comm));
  } else {
    allreduce_matrix(&c, comm);
  }
  if (!c.failures) others(&c, comm);
  trank_fini(&c, comm);
  return c.failures;
}

/* ---- the parent ---------------------------------------------------------------- */

/* Runs one layout under one configuration: a process per rank, rank 0
 * making the unique id after the fork and handing it on by pipe. */
static void run_layout(const layout_t *l, const config_t *cfg) {
  job_t j = {l, cfg, strstr(cfg->algo, "Hier") != NULL && !l->even};
  const tdev_proc_ops_t ops = {rank_env, run_rank, NULL};
  char first[512];
  int failed = tdev_run_procs(l->n, &ops, &j, first, sizeof(first));
  if (failed)
    fail_msg("%s, NCCL_ALGO=%s NCCL_PROTO=%s: %d rank(s) failed; first %s", l->name,
             cfg->algo, cfg->proto, failed, first);
}

static void test_layout(void **state) {
  const layout_t *l = *state;
  if (tdev_kind() == TDEV_CUDA && tdev_cuda_touched())
    fail_msg("this process used CUDA before forking ranks that use it");
  for (size_t k = 0; k < sizeof(configs) / sizeof(configs[0]); k++) {
    /* Both protocols on the first three layouts; otherwise (and in quick
     * mode everywhere) one per plan, alternating every two layouts (so
     * 2x2 and 3x2 differ). */
    int li = (int)(l - layouts);
    if ((quick() || li >= 3) && (int)(k % 2) != li / 2 % 2) continue;
    run_layout(l, &configs[k]);
  }
}

int main(void) {
  setenv("BRAID_DEVICE", "host", 0);
  setenv("BRAID_TIMEOUT", "60", 0);
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: staged hosts with BRAID_DEVICE=%s: %s\n", getenv("BRAID_DEVICE"), why);
    return TDEV_EXIT_SKIP;
  }
  /* The layouts set BRAID_HOSTID per process themselves. */
  unsetenv("BRAID_TEST_HOSTS");
  enum { NL = sizeof(layouts) / sizeof(layouts[0]) };
  struct CMUnitTest tests[NL];
  int nt = 0;
  for (int i = 0; i < NL; i++) {
    if (tdev_kind() == TDEV_CUDA && i != 2) continue;
    tests[nt++] = (struct CMUnitTest){layouts[i].name, test_layout, NULL, NULL,
                                      (void *)&layouts[i]};
  }
  return _cmocka_run_group_tests(tdev_kind() == TDEV_CUDA ? "plans across staged hosts (CUDA)"
                                                          : "plans across staged hosts",
                                 tests, (size_t)nt, NULL, NULL);
}
