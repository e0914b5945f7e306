/*
 * Every collective other than all-reduce, and send/recv, end to end in
 * host mode or on a GPU, public API only: ncclAllGather, ncclReduceScatter,
 * ncclBroadcast (and ncclBcast), ncclReduce, ncclAlltoAll, ncclGather,
 * ncclScatter, ncclSend/ncclRecv.
 *
 * The parent runs this program once per configuration (NCCL_ALGO /
 * NCCL_PROTO forcing ring or direct plans with LL or Simple, the tuner's
 * own choice, tiny NCCL_BUFFSIZE / BRAID_HOST_STAGING so messages run in
 * many pieces, iterations and point-to-point rounds, and
 * BRAID_DETERMINISTIC=1). Each run checks, with outputs poisoned first and
 * an independent CPU reference (tests/common/coll_ref.c):
 *   - every dtype, every op of the reductions, nranks {1,2,3,4,5,8}, counts
 *     {0,1,7,1023}, every root, in place and out of place, as one group
 *     per count driven by one thread (comms_init); buffers the call
 *     must ignore (non-root inputs of broadcast and scatter, outputs of
 *     reduce and gather) are passed poisoned or NULL and must stay so;
 *   - 1Mi+3 elements for a subset;
 *   - all pairs send/recv with a different count per pair, self included,
 *     several transfers per pair, zero-length ones;
 *   - one group mixing collectives and point-to-point;
 *   - threads with one rank each, and processes (fork).
 * In deterministic mode: fp32 sums of random floats (not exact in every
 * order, checked here) equal the sequential rank-order sum bit for bit at
 * every size and block count, for AllReduce, ReduceScatter and Reduce.
 *
 * The mode follows BRAID_DEVICE (host when unset; tests/common/tdev.h):
 * in CUDA mode buffers are managed memory, every rank has its own stream,
 * results are read after the streams are synchronised, and threads and
 * processes run 1, 2, 4 and 8 ranks (processes first, before this process
 * touches CUDA). BRAID_TEST_QUICK=1 shrinks the matrix (3 dtypes, 3 ops,
 * nranks {1,2,3,4}, 3 configurations) for slow targets.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"
#include "tdev.h"

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

#define SYNC_OK(stream)                                                       \
  do {                                                                        \
    if (tdev_stream_sync((stream), SYNC_TIMEOUT_S) != 0)                      \
      fail_msg("waiting for a rank's stream: %s (%s)", tdev_last_error(),     \
               ncclGetLastError(NULL));                                       \
  } while (0)

/* A stream's work must finish within this (the kernels' own BRAID_TIMEOUT
 * is 60 s unless the caller set another). */
#define SYNC_TIMEOUT_S 300.0

static const int nranks_list[] = {1, 2, 3, 4, 5, 8};
static const int nranks_list_quick[] = {1, 2, 3, 4};
static const size_t counts[] = {0, 1, 7, 1023};

/* With BRAID_TEST_QUICK: an integer, a float and a bfloat16 type, and
 * sum, max and avg. */
static int dtype_wanted(ncclDataType_t dt) {
  return !tdev_quick() || dt == ncclInt8 || dt == ncclFloat32 || dt == ncclBfloat16;
}

static int op_wanted(ncclRedOp_t op) {
  return !tdev_quick() || op == ncclSum || op == ncclMax || op == ncclAvg;
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v ? v : dflt;
}

/* ---- one call of one collective on one rank ------------------------------ */

typedef enum { K_AG, K_RS, K_BC, K_RD, K_A2A, K_GA, K_SC, K_COUNT } kind_t;
static const char *kind_names[K_COUNT] = {"allgather", "reducescatter", "broadcast",
                                          "reduce", "alltoall", "gather", "scatter"};

typedef struct {
  kind_t kind;
  ncclDataType_t dt;
  ncclRedOp_t op;
  int root;
  int inplace;
} tcase_t;

/* A rank's buffers for a case: `mem` is what was allocated, send/recv
 * point into it (or are NULL where the call must not use them), `other`
 * is a buffer the call must leave alone. */
typedef struct {
  char *mem, *other;
  const void *send;
  void *recv;
} tbuf_t;

static int is_reduction(kind_t k) { return k == K_RS || k == K_RD; }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

/* A buffer the library can use in this mode (tdev.h). */
static void *xalloc(size_t n) {
  void *p = tdev_alloc(n);
  if (p == NULL) fail_msg("%s", tdev_last_error());
  return p;
}

/* n communicators of one clique driven by this thread: ncclCommInitAll in
 * host mode; in CUDA mode every rank on the current device (ncclCommInitAll
 * would put rank r on device r), by ncclCommInitRank in one group. */
static void comms_init(ncclComm_t *comms, int n) {
  if (tdev_kind() == TDEV_HOST) {
    NCCL_OK(ncclCommInitAll(comms, n, NULL));
    return;
  }
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommInitRank(&comms[r], n, id, r));
  NCCL_OK(ncclGroupEnd());
}

/* One stream per rank: NULL in host mode. */
static void streams_create(cudaStream_t *s, int n) {
  for (int r = 0; r < n; r++)
    if (tdev_stream_create(&s[r]) != 0) fail_msg("%s", tdev_last_error());
}

static void streams_destroy(cudaStream_t *s, int n) {
  for (int r = 0; r < n; r++) tdev_stream_destroy(s[r]);
}

/* Sets up rank r's buffers for case t with per-call count c. */
static void case_init(const tcase_t *t, int n, int r, size_t c, tbuf_t *b) {
  size_t es = ref_dtype_size(t->dt), nc = (size_t)n * c;
  int root = r == t->root;
  memset(b, 0, sizeof(*b));
  switch (t->kind) {
  case K_AG:
    b->mem = xalloc(nc * es);
    ref_poison(t->dt, b->mem, nc);
    b->recv = b->mem;
    if (t->inplace) {
      b->send = b->mem + (size_t)r * c * es;
    } else {
      b->other = xalloc(c * es);
      b->send = b->other;
    }
    ref_fill_move(t->dt, r, 0, (void *)b->send, c);
    break;
  case K_RS:
    b->mem = xalloc(nc * es);
    ref_fill_input(t->dt, t->op, r, b->mem, nc);
    b->send = b->mem;
    if (t->inplace) {
      b->recv = b->mem + (size_t)r * c * es;
    } else {
      b->other = xalloc(c * es);
      ref_poison(t->dt, b->other, c);
      b->recv = b->other;
    }
    break;
  case K_BC:
    b->mem = xalloc(c * es);
    if (t->inplace) {
      /* ncclBcast style: one buffer everywhere, the root's holds the data. */
      if (root) ref_fill_move(t->dt, r, 0, b->mem, c);
      else ref_poison(t->dt, b->mem, c);
      b->send = b->recv = b->mem;
    } else {
      ref_poison(t->dt, b->mem, c);
      b->recv = b->mem;
      if (root) {
        b->other = xalloc(c * es);
        ref_fill_move(t->dt, r, 0, b->other, c);
        b->send = b->other;
      }
      /* Non-roots pass NULL: the send buffer is ignored off the root. */
    }
    break;
  case K_RD:
    b->mem = xalloc(c * es);
    ref_fill_input(t->dt, t->op, r, b->mem, c);
    b->send = b->mem;
    if (t->inplace) {
      b->recv = b->mem;
    } else {
      /* Off the root the receive buffer must stay untouched. */
      b->other = xalloc(c * es);
      ref_poison(t->dt, b->other, c);
      b->recv = b->other;
    }
    break;
  case K_A2A:
    b->mem = xalloc(nc * es);
    b->other = xalloc(nc * es);
    for (int q = 0; q < n; q++) ref_fill_move(t->dt, r, q, b->mem + (size_t)q * c * es, c);
    ref_poison(t->dt, b->other, nc);
    b->send = b->mem;
    b->recv = b->other;
    break;
  case K_GA:
    if (root) {
      b->mem = xalloc(nc * es);
      ref_poison(t->dt, b->mem, nc);
      b->recv = b->mem;
      if (t->inplace) {
        b->send = b->mem + (size_t)r * c * es;
      } else {
        b->other = xalloc(c * es);
        b->send = b->other;
      }
    } else {
      b->mem = xalloc(c * es);
      b->send = b->mem;
      /* Off the root: a poisoned receive buffer that must stay so. */
      b->other = xalloc(nc * es);
      ref_poison(t->dt, b->other, nc);
      b->recv = b->other;
    }
    ref_fill_move(t->dt, r, 0, (void *)b->send, c);
    break;
  case K_SC:
    if (root) {
      b->mem = xalloc(nc * es);
      for (int q = 0; q < n; q++) ref_fill_move(t->dt, r, q, b->mem + (size_t)q * c * es, c);
      b->send = b->mem;
      if (t->inplace) {
        b->recv = b->mem + (size_t)r * c * es;
      } else {
        b->other = xalloc(c * es);
        ref_poison(t->dt, b->other, c);
        b->recv = b->other;
      }
    } else {
      b->mem = xalloc(c * es);
      ref_poison(t->dt, b->mem, c);
      b->recv = b->mem;
    }
    break;
  default:
    break;
  }
}

static ncclResult_t case_call(const tcase_t *t, const tbuf_t *b, size_t c,
                              ncclComm_t comm, cudaStream_t s) {
  switch (t->kind) {
  case K_AG: return ncclAllGather(b->send, b->recv, c, t->dt, comm, s);
  case K_RS: return ncclReduceScatter(b->send, b->recv, c, t->dt, t->op, comm, s);
  case K_BC:
    if (t->inplace) return ncclBcast(b->recv, c, t->dt, t->root, comm, s);
    return ncclBroadcast(b->send, b->recv, c, t->dt, t->root, comm, s);
  case K_RD: return ncclReduce(b->send, b->recv, c, t->dt, t->op, t->root, comm, s);
  case K_A2A: return ncclAlltoAll(b->send, b->recv, c, t->dt, comm, s);
  case K_GA: return ncclGather(b->send, b->recv, c, t->dt, t->root, comm, s);
  case K_SC: return ncclScatter(b->send, b->recv, c, t->dt, t->root, comm, s);
  default: return ncclInternalError;
  }
}

/* Checks rank r's result; 0 or the number of wrong elements with msg. */
static size_t case_check(const tcase_t *t, const tbuf_t *b, int n, int r, size_t c,
                         char *msg, size_t msglen) {
  size_t es = ref_dtype_size(t->dt), nc = (size_t)n * c, wrong = 0;
  int root = r == t->root;
  char *expect = NULL;
  switch (t->kind) {
  case K_AG: case K_GA:
    if (t->kind == K_GA && !root) {
      wrong = nc - ref_count_poison(t->dt, b->other, nc);
      if (wrong) snprintf(msg, msglen, "non-root receive buffer was written");
      break;
    }
    for (int q = 0; q < n && !wrong; q++)
      wrong = ref_check_move(t->dt, q, 0, (const char *)b->recv + (size_t)q * c * es, c,
                             msg, msglen);
    break;
  case K_RS:
    expect = xmalloc(c * es);
    ref_reduce_expect_range(t->dt, t->op, n, 1.0, expect, (size_t)r * c, c);
    wrong = ref_compare(t->dt, t->op == ncclAvg, b->recv, expect, c, msg, msglen);
    break;
  case K_BC:
    wrong = ref_check_move(t->dt, t->root, 0, b->recv, c, msg, msglen);
    break;
  case K_RD:
    if (root) {
      expect = xmalloc(c * es);
      ref_reduce_expect(t->dt, t->op, n, 1.0, expect, c);
      wrong = ref_compare(t->dt, t->op == ncclAvg, b->recv, expect, c, msg, msglen);
    } else if (t->inplace) {
      /* The buffer is this rank's input and must still be. */
      expect = xmalloc(c * es);
      ref_fill_input(t->dt, t->op, r, expect, c);
      wrong = ref_compare(t->dt, 0, b->recv, expect, c, msg, msglen);
    } else {
      wrong = c - ref_count_poison(t->dt, b->other, c);
      if (wrong) snprintf(msg, msglen, "non-root receive buffer was written");
    }
    break;
  case K_A2A:
    for (int q = 0; q < n && !wrong; q++)
      wrong = ref_check_move(t->dt, q, r, (const char *)b->recv + (size_t)q * c * es, c,
                             msg, msglen);
    break;
  case K_SC:
    wrong = ref_check_move(t->dt, t->root, r, b->recv, c, msg, msglen);
    break;
  default:
    break;
  }
  free(expect);
  return wrong;
}

static void case_free(tbuf_t *b) {
  tdev_free(b->mem);
  if (b->other != b->mem) tdev_free(b->other);
  memset(b, 0, sizeof(*b));
}

static void case_fail(const tcase_t *t, int n, int r, size_t c, size_t wrong,
                      const char *msg, const char *mode) {
  fail_msg("%s: %s %s %s root %d %s nranks %d rank %d count %zu: %zu wrong, %s "
           "(NCCL_ALGO=%s NCCL_PROTO=%s)", mode, kind_names[t->kind],
           ref_dtype_name(t->dt), is_reduction(t->kind) ? ref_op_name(t->op) : "-",
           t->root, t->inplace ? "in-place" : "out-of-place", n, r, c, wrong, msg,
           env_or("NCCL_ALGO", "auto"), env_or("NCCL_PROTO", "auto"));
}

/* The cases for n ranks: every dtype (and op) for each kind, every root
 * with a rotating dtype, in place and out of place. With BRAID_TEST_QUICK
 * the per-dtype and per-op cases keep the quick dtypes and ops only. */
static int make_cases(int n, tcase_t *out) {
  int k = 0, kept = 0;
  for (int d = 0; d < ncclNumTypes; d++)
    for (int ip = 0; ip < 2; ip++)
      out[k++] = (tcase_t){K_AG, (ncclDataType_t)d, ncclSum, 0, ip};
  for (int d = 0; d < ncclNumTypes; d++)
    for (int o = 0; o < ncclNumOps; o++)
      out[k++] = (tcase_t){K_RS, (ncclDataType_t)d, (ncclRedOp_t)o, 0, (d + o) % 2};
  for (int d = 0; d < ncclNumTypes; d++) {
    out[k++] = (tcase_t){K_A2A, (ncclDataType_t)d, ncclSum, 0, 0};
    out[k++] = (tcase_t){K_BC, (ncclDataType_t)d, ncclSum, n - 1, d % 2};
    out[k++] = (tcase_t){K_GA, (ncclDataType_t)d, ncclSum, 0, d % 2};
    out[k++] = (tcase_t){K_SC, (ncclDataType_t)d, ncclSum, n / 2, d % 2};
    for (int o = 0; o < ncclNumOps; o++)
      out[k++] = (tcase_t){K_RD, (ncclDataType_t)d, (ncclRedOp_t)o, 0, (d + o) % 2};
  }
  for (int root = 0; root < n; root++) {
    for (int ip = 0; ip < 2; ip++) {
      ncclDataType_t dt = (ncclDataType_t)((root * 5 + ip * 7) % ncclNumTypes);
      ncclRedOp_t op = (ncclRedOp_t)((root + ip) % ncclNumOps);
      out[k++] = (tcase_t){K_BC, dt, ncclSum, root, ip};
      out[k++] = (tcase_t){K_RD, dt, op, root, ip};
      out[k++] = (tcase_t){K_GA, dt, ncclSum, root, ip};
      out[k++] = (tcase_t){K_SC, dt, ncclSum, root, ip};
    }
  }
  for (int i = 0; i < k; i++) {
    int rooted_sweep = i >= k - 8 * n; /* every root: keep whatever dtype */
    if (rooted_sweep || (dtype_wanted(out[i].dt) && op_wanted(out[i].op)))
      out[kept++] = out[i];
  }
  return kept;
}

#define MAX_CASES 512

/* One thread drives every rank: one group per count holding every case. */
static void test_one_thread_all_ranks(void **state) {
  (void)state;
  tcase_t *cases = xmalloc(MAX_CASES * sizeof(*cases));
  int quick = tdev_quick();
  const int *ns = quick ? nranks_list_quick : nranks_list;
  size_t nns = quick ? sizeof(nranks_list_quick) / sizeof(nranks_list_quick[0])
                     : sizeof(nranks_list) / sizeof(nranks_list[0]);
  for (size_t ni = 0; ni < nns; ni++) {
    int n = ns[ni];
    int nc = make_cases(n, cases);
    assert_true(nc <= MAX_CASES);
    ncclComm_t comms[8];
    cudaStream_t streams[8];
    comms_init(comms, n);
    streams_create(streams, n);
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      size_t c = counts[ci];
      tbuf_t *b = xmalloc((size_t)nc * (size_t)n * sizeof(*b));
      for (int k = 0; k < nc; k++)
        for (int r = 0; r < n; r++) case_init(&cases[k], n, r, c, &b[k * n + r]);
      NCCL_OK(ncclGroupStart());
      for (int k = 0; k < nc; k++)
        for (int r = 0; r < n; r++)
          NCCL_OK(case_call(&cases[k], &b[k * n + r], c, comms[r], streams[r]));
      NCCL_OK(ncclGroupEnd());
      for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
      for (int k = 0; k < nc; k++) {
        for (int r = 0; r < n; r++) {
          char msg[200] = "";
          size_t wrong = case_check(&cases[k], &b[k * n + r], n, r, c, msg, sizeof(msg));
          if (wrong) case_fail(&cases[k], n, r, c, wrong, msg, "one thread");
          case_free(&b[k * n + r]);
        }
      }
      free(b);
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    streams_destroy(streams, n);
  }
  free(cases);
}

/* 1Mi+3 elements: several staging pieces, loop iterations and blocks. */
static void test_large(void **state) {
  (void)state;
  const size_t count = (1u << 20) + 3;
  static const struct {
    int n;
    tcase_t t;
  } big[] = {
      {3, {K_AG, ncclFloat32, ncclSum, 0, 0}},
      {3, {K_RS, ncclFloat32, ncclSum, 0, 1}},
      {3, {K_A2A, ncclInt32, ncclSum, 0, 0}},
      {8, {K_BC, ncclBfloat16, ncclSum, 5, 0}},
      {8, {K_RD, ncclFloat32, ncclSum, 2, 1}},
      {8, {K_RD, ncclInt8, ncclMax, 7, 0}},
      {5, {K_GA, ncclInt8, ncclSum, 4, 1}},
      {5, {K_SC, ncclUint8, ncclSum, 1, 0}},
      {2, {K_AG, ncclFloat16, ncclSum, 0, 1}},
  };
  /* Quick: the first three (all-gather, reduce-scatter, all-to-all). */
  size_t nbig = tdev_quick() ? 3 : sizeof(big) / sizeof(big[0]);
  for (size_t k = 0; k < nbig; k++) {
    int n = big[k].n;
    ncclComm_t comms[8];
    cudaStream_t streams[8];
    tbuf_t b[8];
    comms_init(comms, n);
    streams_create(streams, n);
    for (int r = 0; r < n; r++) case_init(&big[k].t, n, r, count, &b[r]);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; r++)
      NCCL_OK(case_call(&big[k].t, &b[r], count, comms[r], streams[r]));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
    for (int r = 0; r < n; r++) {
      char msg[200] = "";
      size_t wrong = case_check(&big[k].t, &b[r], n, r, count, msg, sizeof(msg));
      if (wrong) case_fail(&big[k].t, n, r, count, wrong, msg, "large");
      case_free(&b[r]);
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    streams_destroy(streams, n);
  }
}

/* ---- point-to-point ---------------------------------------------------------- */

/* Elements rank s sends to rank d in its k-th transfer to d. Zero for
 * some, larger than a piece for others. */
static size_t p2p_count(int s, int d, int k, int big) {
  size_t c = (size_t)((s * 7 + d * 3 + k * 5) % 23);
  if (big && (s + d + k) % 3 == 0) c += 300000;
  return c;
}

/* All pairs, both directions and self, two transfers per pair with
 * different counts and dtypes (int32 then float64), the receives posted
 * in an order different from the sends. */
static void p2p_round(ncclComm_t *comms, cudaStream_t *streams, int n, int big) {
  enum { T = 2 };
  void *sbuf[8][8][T], *rbuf[8][8][T];
  static const ncclDataType_t dts[T] = {ncclInt32, ncclFloat64};
  for (int s = 0; s < n; s++) {
    for (int d = 0; d < n; d++) {
      for (int k = 0; k < T; k++) {
        size_t c = p2p_count(s, d, k, big), es = ref_dtype_size(dts[k]);
        sbuf[s][d][k] = xalloc(c * es);
        rbuf[d][s][k] = xalloc(c * es);
        ref_fill_move(dts[k], s, d * T + k, sbuf[s][d][k], c);
        ref_poison(dts[k], rbuf[d][s][k], c);
      }
    }
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    /* Receives first, from the highest peer down; sends from the lowest. */
    for (int p = n - 1; p >= 0; p--)
      for (int k = 0; k < T; k++)
        NCCL_OK(ncclRecv(rbuf[r][p][k], p2p_count(p, r, k, big), dts[k], p, comms[r],
                         streams[r]));
    for (int p = 0; p < n; p++)
      for (int k = 0; k < T; k++)
        NCCL_OK(ncclSend(sbuf[r][p][k], p2p_count(r, p, k, big), dts[k], p, comms[r],
                         streams[r]));
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
  for (int d = 0; d < n; d++) {
    for (int s = 0; s < n; s++) {
      for (int k = 0; k < T; k++) {
        char msg[200] = "";
        size_t c = p2p_count(s, d, k, big);
        size_t wrong = ref_check_move(dts[k], s, d * T + k, rbuf[d][s][k], c, msg, sizeof(msg));
        if (wrong)
          fail_msg("p2p n=%d %d -> %d transfer %d (%zu elements): %zu wrong, %s", n, s,
                   d, k, c, wrong, msg);
        tdev_free(sbuf[s][d][k]);
        tdev_free(rbuf[d][s][k]);
      }
    }
  }
}

static void test_p2p_all_pairs(void **state) {
  (void)state;
  static const int ns[] = {1, 2, 3, 5, 8};
  size_t nns = tdev_quick() ? 3 : sizeof(ns) / sizeof(ns[0]);
  for (size_t i = 0; i < nns; i++) {
    int n = ns[i];
    ncclComm_t comms[8];
    cudaStream_t streams[8];
    comms_init(comms, n);
    streams_create(streams, n);
    p2p_round(comms, streams, n, 0);
    p2p_round(comms, streams, n, n <= 3); /* again: sequence numbers carry on */
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
    streams_destroy(streams, n);
  }
}

/* One group mixing collectives and point-to-point on the same
 * communicators: all-reduce, all-gather, broadcast, a ring of sends, a
 * reduce-scatter, in that order on every rank. */
static void test_mixed_group(void **state) {
  (void)state;
  const int n = 4;
  const size_t c = 777;
  ncclComm_t comms[4];
  cudaStream_t streams[4];
  comms_init(comms, n);
  streams_create(streams, n);
  float *ar_in[4], *ar_out[4], *p_in[4], *p_out[4];
  tbuf_t ag[4], bc[4], rs[4];
  tcase_t t_ag = {K_AG, ncclFloat16, ncclSum, 0, 0};
  tcase_t t_bc = {K_BC, ncclInt64, ncclSum, 2, 0};
  tcase_t t_rs = {K_RS, ncclUint8, ncclMax, 0, 1};
  for (int r = 0; r < n; r++) {
    ar_in[r] = xalloc(c * 4);
    ar_out[r] = xalloc(c * 4);
    p_in[r] = xalloc(c * 4);
    p_out[r] = xalloc(c * 4);
    ref_fill_input(ncclFloat32, ncclSum, r, ar_in[r], c);
    ref_poison(ncclFloat32, ar_out[r], c);
    ref_fill_move(ncclFloat32, r, 9, p_in[r], c);
    ref_poison(ncclFloat32, p_out[r], c);
    case_init(&t_ag, n, r, c, &ag[r]);
    case_init(&t_bc, n, r, c, &bc[r]);
    case_init(&t_rs, n, r, c, &rs[r]);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    NCCL_OK(ncclAllReduce(ar_in[r], ar_out[r], c, ncclFloat32, ncclSum, comms[r],
                          streams[r]));
    NCCL_OK(case_call(&t_ag, &ag[r], c, comms[r], streams[r]));
    NCCL_OK(ncclSend(p_in[r], c, ncclFloat32, (r + 1) % n, comms[r], streams[r]));
    NCCL_OK(case_call(&t_bc, &bc[r], c, comms[r], streams[r]));
    NCCL_OK(ncclRecv(p_out[r], c, ncclFloat32, (r + n - 1) % n, comms[r], streams[r]));
    NCCL_OK(case_call(&t_rs, &rs[r], c, comms[r], streams[r]));
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
  float *expect = xmalloc(c * 4);
  ref_reduce_expect(ncclFloat32, ncclSum, n, 1.0, expect, c);
  for (int r = 0; r < n; r++) {
    char msg[200] = "";
    if (ref_compare(ncclFloat32, 0, ar_out[r], expect, c, msg, sizeof(msg)))
      fail_msg("mixed group all-reduce rank %d: %s", r, msg);
    if (ref_check_move(ncclFloat32, (r + n - 1) % n, 9, p_out[r], c, msg, sizeof(msg)))
      fail_msg("mixed group recv rank %d: %s", r, msg);
    size_t wrong = case_check(&t_ag, &ag[r], n, r, c, msg, sizeof(msg));
    if (wrong) case_fail(&t_ag, n, r, c, wrong, msg, "mixed group");
    wrong = case_check(&t_bc, &bc[r], n, r, c, msg, sizeof(msg));
    if (wrong) case_fail(&t_bc, n, r, c, wrong, msg, "mixed group");
    wrong = case_check(&t_rs, &rs[r], n, r, c, msg, sizeof(msg));
    if (wrong) case_fail(&t_rs, n, r, c, wrong, msg, "mixed group");
    tdev_free(ar_in[r]);
    tdev_free(ar_out[r]);
    tdev_free(p_in[r]);
    tdev_free(p_out[r]);
    case_free(&ag[r]);
    case_free(&bc[r]);
    case_free(&rs[r]);
  }
  free(expect);
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  streams_destroy(streams, n);
}

/* ---- one rank per thread or process ---------------------------------------- */

/* Every kind, every root, two counts, each call on its own (no group),
 * then a send/recv exchange with both neighbours in a group. Returns the
 * number of failures with the first in msg. */
static int run_rank(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  ncclComm_t comm;
  cudaStream_t stream;
  if (tdev_stream_create(&stream) != 0) {
    snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
    return 1;
  }
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  if (r != ncclSuccess) {
    snprintf(msg, msglen, "rank %d init: %s", rank, ncclGetLastError(NULL));
    tdev_stream_destroy(stream);
    return 1;
  }
  int failures = 0;
  static const size_t cnts[] = {7, 70001};
  for (int kind = 0; kind < K_COUNT && !failures; kind++) {
    for (int root = 0; root < n && !failures; root++) {
      for (size_t ci = 0; ci < 2 && !failures; ci++) {
        tcase_t t = {(kind_t)kind, ci ? ncclFloat32 : ncclInt8,
                     ci ? ncclSum : ncclMax, root, (root + (int)ci) % 2};
        if (t.kind == K_A2A) t.inplace = 0;
        tbuf_t b;
        case_init(&t, n, rank, cnts[ci], &b);
        r = case_call(&t, &b, cnts[ci], comm, stream);
        char m[200] = "";
        if (r == ncclSuccess && tdev_stream_sync(stream, SYNC_TIMEOUT_S) != 0) {
          snprintf(m, sizeof(m), "%s (%s)", tdev_last_error(), ncclGetLastError(NULL));
          r = ncclSystemError;
        }
        size_t wrong = r == ncclSuccess ? case_check(&t, &b, n, rank, cnts[ci], m, sizeof(m)) : 0;
        if (r != ncclSuccess || wrong) {
          snprintf(msg, msglen, "rank %d %s root %d count %zu: %s", rank,
                   kind_names[kind], root, cnts[ci],
                   m[0] != '\0' ? m : ncclGetLastError(NULL));
          failures++;
        }
        case_free(&b);
        int rooted = t.kind == K_BC || t.kind == K_RD || t.kind == K_GA || t.kind == K_SC;
        if (!rooted) break; /* one root is enough */
      }
    }
  }
  if (!failures) {
    size_t c = 100003;
    int32_t *out[2], *in[2];
    int peer[2] = {(rank + 1) % n, (rank + n - 1) % n};
    for (int k = 0; k < 2; k++) {
      in[k] = xalloc(c * 4);
      out[k] = xalloc(c * 4);
      ref_fill_move(ncclInt32, rank, peer[k], in[k], c);
      ref_poison(ncclInt32, out[k], c);
    }
    ncclGroupStart();
    for (int k = 0; k < 2; k++) {
      ncclSend(in[k], c, ncclInt32, peer[k], comm, stream);
      ncclRecv(out[k], c, ncclInt32, peer[k], comm, stream);
    }
    r = ncclGroupEnd();
    char sync_msg[200] = "";
    if (r == ncclSuccess && tdev_stream_sync(stream, SYNC_TIMEOUT_S) != 0) {
      snprintf(sync_msg, sizeof(sync_msg), "%s (%s)", tdev_last_error(),
               ncclGetLastError(NULL));
      r = ncclSystemError;
    }
    for (int k = 0; k < 2 && !failures; k++) {
      char m[200] = "";
      if (r != ncclSuccess || ref_check_move(ncclInt32, peer[k], rank, out[k], c, m, sizeof(m))) {
        snprintf(msg, msglen, "rank %d send/recv with %d: %s", rank, peer[k],
                 r != ncclSuccess ? (sync_msg[0] ? sync_msg : ncclGetLastError(NULL)) : m);
        failures++;
      }
    }
    for (int k = 0; k < 2; k++) {
      tdev_free(in[k]);
      tdev_free(out[k]);
    }
  }
  ncclCommDestroy(comm);
  tdev_stream_destroy(stream);
  return failures;
}

static void test_threads_one_rank_each(void **state) {
  (void)state;
  int ns[4];
  int nn = tdev_rank_counts(4, 3, ns);
  for (int ni = 0; ni < nn; ni++) {
    char msg[256];
    if (tdev_run_threads(ns[ni], run_rank, msg, sizeof(msg)) != 0)
      fail_msg("threads, %d ranks: %s", ns[ni], msg);
  }
}

/* In CUDA mode this runs before anything else in this process touched
 * CUDA: a forked child cannot use a CUDA its parent initialised. */
static void run_processes(int n) {
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  int pipes[8][2];
  pid_t pids[8];
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    assert_int_equal(pipe(pipes[r]), 0);
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      char msg[256] = "";
      tdev_stage_host(r, n);
      int f = run_rank(id, n, r, msg, sizeof(msg));
      (void)!write(pipes[r][1], msg, strlen(msg) + 1);
      _exit(f ? 1 : 0);
    }
    close(pipes[r][1]);
  }
  for (int r = 0; r < n; r++) {
    int st;
    char msg[256] = "";
    (void)!read(pipes[r][0], msg, sizeof(msg) - 1);
    close(pipes[r][0]);
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("process rank %d of %d failed (status %d): %s", r, n, st, msg);
  }
}

static void test_processes(void **state) {
  (void)state;
  if (tdev_kind() == TDEV_CUDA && tdev_cuda_touched())
    fail_msg("this process used CUDA before forking ranks that use it");
  int ns[4];
  int nn = tdev_rank_counts(3, 2, ns);
  for (int ni = 0; ni < nn; ni++) run_processes(ns[ni]);
}

/* ---- deterministic mode --------------------------------------------------- */

/* Random floats of mixed magnitude: sums depend on the order. */
static float det_value(int rank, size_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  float m = (float)(x & 0xffffff) / (float)0x1000000; /* [0, 1) */
  int e = (int)((x >> 24) % 24) - 12;
  return ((x >> 60) & 1 ? -m : m) * ldexpf(1.0f, e);
}

/* The rank-order sum 0..n-1 in fp32, as deterministic mode promises. */
static float det_sum(int n, size_t i) {
  float acc = det_value(0, i);
  for (int r = 1; r < n; r++) acc += det_value(r, i);
  return acc;
}

static void test_deterministic(void **state) {
  (void)state;
  const int n = 5;
  /* The inputs really are order-sensitive: summing in reverse differs
   * somewhere, so equality below is not an accident of exact data. */
  size_t differ = 0;
  for (size_t i = 0; i < 4096; i++) {
    float rev = det_value(n - 1, i);
    for (int r = n - 2; r >= 0; r--) rev += det_value(r, i);
    differ += memcmp(&rev, &(float){det_sum(n, i)}, 4) != 0;
  }
  assert_true(differ > 100);

  ncclComm_t comms[5];
  cudaStream_t streams[5];
  comms_init(comms, n);
  streams_create(streams, n);
  /* Sizes chosen for one block and two, one piece and several, direct
   * and two-step plans. */
  static const size_t sizes[] = {1, 7, 1023, 70001, 300001};
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    size_t c = sizes[si];
    float *in[5], *ar[5], *rs_in[5], *rs[5], *rd[5];
    for (int r = 0; r < n; r++) {
      in[r] = xalloc(c * 4);
      ar[r] = xalloc(c * 4);
      rd[r] = xalloc(c * 4);
      rs_in[r] = xalloc((size_t)n * c * 4);
      rs[r] = xalloc(c * 4);
      for (size_t i = 0; i < c; i++) in[r][i] = det_value(r, i);
      for (size_t i = 0; i < (size_t)n * c; i++) rs_in[r][i] = det_value(r, i);
      ref_poison(ncclFloat32, ar[r], c);
      ref_poison(ncclFloat32, rd[r], c);
      ref_poison(ncclFloat32, rs[r], c);
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; r++) {
      NCCL_OK(ncclAllReduce(in[r], ar[r], c, ncclFloat32, ncclSum, comms[r], streams[r]));
      NCCL_OK(ncclReduceScatter(rs_in[r], rs[r], c, ncclFloat32, ncclSum, comms[r],
                                streams[r]));
      NCCL_OK(ncclReduce(in[r], rd[r], c, ncclFloat32, ncclSum, 3, comms[r], streams[r]));
    }
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < n; r++) SYNC_OK(streams[r]);
    for (int r = 0; r < n; r++) {
      for (size_t i = 0; i < c; i++) {
        float want = det_sum(n, i), want_rs = det_sum(n, (size_t)r * c + i);
        if (memcmp(&ar[r][i], &want, 4) != 0)
          fail_msg("deterministic all-reduce count %zu rank %d element %zu: %a, "
                   "rank-order sum %a", c, r, i, (double)ar[r][i], (double)want);
        if (memcmp(&rs[r][i], &want_rs, 4) != 0)
          fail_msg("deterministic reduce-scatter count %zu rank %d element %zu: %a, "
                   "rank-order sum %a", c, r, i, (double)rs[r][i], (double)want_rs);
        if (r == 3 && memcmp(&rd[r][i], &want, 4) != 0)
          fail_msg("deterministic reduce count %zu element %zu: %a, rank-order sum %a",
                   c, i, (double)rd[r][i], (double)want);
      }
      tdev_free(in[r]);
      tdev_free(ar[r]);
      tdev_free(rd[r]);
      tdev_free(rs_in[r]);
      tdev_free(rs[r]);
    }
  }
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  streams_destroy(streams, n);
}

/* Deterministic mode with only ring allowed for all-reduce: refused with
 * a message naming the knob. */
static void test_deterministic_refuses_ring(void **state) {
  (void)state;
  ncclComm_t comms[2];
  cudaStream_t streams[2];
  comms_init(comms, 2);
  streams_create(streams, 2);
  float *a = xalloc(4 * sizeof(float)), *b = xalloc(2 * 4 * sizeof(float));
  for (int i = 0; i < 4; i++) a[i] = (float)(i + 1);
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++)
    ncclAllReduce(a, b + 4 * r, 4, ncclFloat32, ncclSum, comms[r], streams[r]);
  ncclResult_t res = ncclGroupEnd();
  assert_int_equal(res, ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "BRAID_DETERMINISTIC"));
  /* Not a broken communicator: other collectives still run. */
  int32_t *x = xalloc(2 * sizeof(int32_t)), *y = xalloc(2 * 4 * sizeof(int32_t));
  x[0] = 1;
  x[1] = 2;
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++)
    NCCL_OK(ncclAllGather(&x[r], y + 4 * r, 1, ncclInt32, comms[r], streams[r]));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) SYNC_OK(streams[r]);
  assert_int_equal(y[4 * 1 + 0], 1);
  assert_int_equal(y[4 * 0 + 1], 2);
  tdev_free(a);
  tdev_free(b);
  tdev_free(x);
  tdev_free(y);
  for (int r = 0; r < 2; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  streams_destroy(streams, 2);
}

/* ---- driver ------------------------------------------------------------------ */

static int run_child(const char *what) {
  char name[192];
  snprintf(name, sizeof(name), "collectives %s (%s%s) NCCL_ALGO=%s NCCL_PROTO=%s", what,
           tdev_kind_name(), tdev_quick() ? ", quick" : "",
           env_or("NCCL_ALGO", "auto"), env_or("NCCL_PROTO", "auto"));
  if (strcmp(what, "deterministic") == 0) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deterministic)};
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
  }
  if (strcmp(what, "deterministic-ring") == 0) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deterministic_refuses_ring)};
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
  }
  if (strcmp(what, "full") == 0) {
    /* Processes first: they fork, which CUDA mode allows only before this
     * process touched CUDA. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_one_thread_all_ranks),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_p2p_all_pairs),
        cmocka_unit_test(test_mixed_group),
        cmocka_unit_test(test_threads_one_rank_each),
    };
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_thread_all_ranks),
      cmocka_unit_test(test_p2p_all_pairs),
      cmocka_unit_test(test_mixed_group),
  };
  return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}

typedef struct {
  const char *what;  /* "full", "quick", "deterministic", ... */
  const char *env[6]; /* NAME=value pairs */
} config_t;

int main(int argc, char **argv) {
  (void)argc;
  /* Host mode unless the caller chose (BRAID_DEVICE=cuda for a GPU). */
  setenv("BRAID_DEVICE", "host", 0);
  setenv("BRAID_TIMEOUT", "60", 0);
  if (getenv("BRAID_TEST_CHILD")) return run_child(getenv("BRAID_TEST_CHILD"));

  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: collectives with BRAID_DEVICE=%s: %s\n", getenv("BRAID_DEVICE"), why);
    return TDEV_EXIT_SKIP;
  }

#define FORCE(a) "NCCL_ALGO=allgather:" a ";reducescatter:" a ";broadcast:" a ";reduce:" a
  static const config_t configs[] = {
      {"full", {NULL}},
      {"quick", {FORCE("ring"), "NCCL_PROTO=Simple", NULL}},
      {"quick", {FORCE("ring"), "NCCL_PROTO=LL", NULL}},
      {"quick", {FORCE("oneshot"), "NCCL_PROTO=Simple", NULL}},
      {"quick", {FORCE("oneshot"), "NCCL_PROTO=LL", NULL}},
      /* Tiny buffers: every message is many pieces, iterations, rounds. */
      {"quick", {"NCCL_BUFFSIZE=4096", "NCCL_LL_BUFFSIZE=4096",
                 "BRAID_HOST_STAGING=4096", NULL}},
      {"deterministic", {"BRAID_DETERMINISTIC=1", NULL}},
      {"deterministic", {"BRAID_DETERMINISTIC=1", "NCCL_ALGO=allreduce:twoshot",
                         "NCCL_PROTO=LL", NULL}},
      {"deterministic-ring", {"BRAID_DETERMINISTIC=1", "NCCL_ALGO=allreduce:ring", NULL}},
  };
  /* Quick: the full set once with the tuner's choice, ring LL, and the
   * deterministic all-reduce. */
  static const int quick_configs[] = {0, 2, 6};
  int quick = tdev_quick();
  size_t nconfigs = quick ? sizeof(quick_configs) / sizeof(quick_configs[0])
                          : sizeof(configs) / sizeof(configs[0]);
  int failed = 0;
  for (size_t j = 0; j < nconfigs; j++) {
    size_t i = quick ? (size_t)quick_configs[j] : j;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("BRAID_TEST_CHILD", configs[i].what, 1);
      unsetenv("NCCL_ALGO");
      unsetenv("NCCL_PROTO");
      for (int e = 0; configs[i].env[e] != NULL; e++) putenv((char *)configs[i].env[e]);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("FAIL: configuration %zu (%s)\n", i, configs[i].what);
      failed++;
    }
  }
  printf("%s: %d configuration(s) failed\n", failed ? "FAIL" : "PASS", failed);
  return failed ? 1 : 0;
}
