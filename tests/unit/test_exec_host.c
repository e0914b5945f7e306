/*
 * Unit tests for the host executor (src/device/exec_host.c) running the
 * all-reduce generators' plans: ranks are threads of this process sharing
 * plain pointers. Every algorithm x protocol x datatype x op runs on nranks
 * {1,2,3,4,5,8} and counts {0,1,7,1023} in and out of place, plus 1Mi+3
 * elements for fp32 sum (out of place) and int8 max (in place) on 3 and 8
 * ranks; outputs are poisoned first and every element is compared with a
 * CPU reference written here (integers exact, floats built from small
 * integers so every summation order is exact; avg on floats within a
 * rounding bound). Small counts get 256 data bytes per scratch slot, so
 * their launches already run several loop iterations.
 * Also: hang reports on a missing peer, the abort flag, and the
 * thread-spawning entry point.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/check.h"
#include "algos/algos.h"
#include "device/exec_host.h"
#include "base/param.h"
#include "plan/plan.h"

/* ---- allocation failure injection (see test_verify.c) --------------------- */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static _Atomic int armed;
static long alloc_calls, fail_at = -1, live;

static int should_fail(void) {
  if (!atomic_load(&armed)) return 0;
  return alloc_calls++ == fail_at;
}

void *malloc(size_t n) {
  if (should_fail()) return NULL;
  void *p = __libc_malloc(n);
  if (atomic_load(&armed) && p) live++;
  return p;
}

void *calloc(size_t n, size_t m) {
  if (should_fail()) return NULL;
  void *p = __libc_calloc(n, m);
  if (atomic_load(&armed) && p) live++;
  return p;
}

void *realloc(void *old, size_t n) {
  if (should_fail()) return NULL;
  void *p = __libc_realloc(old, n);
  if (atomic_load(&armed) && p && old == NULL) live++;
  return p;
}

void free(void *p) {
  if (atomic_load(&armed) && p) live--;
  __libc_free(p);
}

#define MAXR 8
#define MAXB 3
#define BIG_COUNT ((size_t)(1u << 20) + 3)

typedef ncclResult_t (*gen_fn)(const brd_algos_args_t *, brd_ir_plan_t **);

/* A hand-made all-gather that writes its input into segment `rank` of
 * every peer's output (no generator writes a peer's segments other than
 * 0 yet): join, copy and put, done; one chunk per segment. */
static ncclResult_t push_allgather(const brd_algos_args_t *args, brd_ir_plan_t **plan_out) {
  int n = args->nranks;
  brd_plan_shape_t shape = {
      .nranks = n, .nblocks = 1, .nchunks = 1, .nslots = 0, .slot_div = 1, .nsems = 2,
      .seq_per_iter = 1, .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_COPY,
      .coll = BRD_IR_COLL_ALLGATHER};
  brd_plan_builder_t *b;
  CHECK(brd_plan_builder_create(&shape, &b));
  for (int r = 0; r < n; r++) {
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0), dst[MAXR];
    for (int sem = 0; sem < 2; sem++) {
      if (sem == 1) {
        int nd = 0;
        dst[nd++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (uint32_t)r);
        for (int q = 0; q < n; q++)
          if (q != r) dst[nd++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, q, (uint32_t)r);
        CHECK(brd_algos_move(b, r, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, &in, nd, dst));
      }
      for (int q = 0; q < n; q++)
        if (q != r) CHECK(brd_plan_op_sync(b, r, 0, BRD_IR_OP_SIGNAL, q, (uint32_t)sem, 1));
      for (int q = 0; q < n; q++)
        if (q != r) CHECK(brd_plan_op_sync(b, r, 0, BRD_IR_OP_WAIT, q, (uint32_t)sem, 1));
    }
  }
  ncclResult_t res = brd_plan_builder_finish(b, plan_out);
  brd_plan_builder_destroy(b);
  return res;
}

/* The all-reduces under test, and (last) push_allgather for
 * test_output_exchange. */
#define GEN_PUSH_ALLGATHER 4
static const gen_fn gens[5] = {brd_algos_ring_allreduce, brd_algos_tree_allreduce,
                               brd_algos_oneshot_allreduce,
                               brd_algos_twoshot_allreduce, push_allgather};
static const char *gen_names[5] = {"ring", "tree", "oneshot", "twoshot", "push-allgather"};
static const int nranks_list[6] = {1, 2, 3, 4, 5, 8};

/* The reductions under test: NCCL's five and a PreMulSum by 2. */
#define OP_PREMUL 5
static const char *op_names[6] = {"sum", "prod", "max", "min", "avg", "premul"};

/* ---- independent format helpers ------------------------------------------ */

static size_t esize_of(int dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

static int is_int(int dt) { return dt <= ncclUint64; }
static int is_signed(int dt);
static int is_signed(int dt) {
  return dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64;
}

/* Decoders from the formats' definitions (sign, biased exponent, fraction). */
static double dec_generic(uint32_t bits, int ebits, int mbits, int has_inf) {
  uint32_t sign = bits >> (ebits + mbits);
  uint32_t e = (bits >> mbits) & ((1u << ebits) - 1);
  uint32_t m = bits & ((1u << mbits) - 1);
  int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (e == (1u << ebits) - 1 && has_inf) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
  else v = ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
  return sign ? -v : v;
}

static double decode(int dt, const void *buf, size_t i) {
  switch (dt) {
  case ncclFloat16: return dec_generic(((const uint16_t *)buf)[i], 5, 10, 1);
  case ncclBfloat16: return dec_generic(((const uint16_t *)buf)[i], 8, 7, 1);
  case ncclFloat8e4m3: {
    uint8_t b = ((const uint8_t *)buf)[i];
    if ((b & 0x7f) == 0x7f) return NAN;
    return dec_generic(b, 4, 3, 0);
  }
  case ncclFloat8e5m2: return dec_generic(((const uint8_t *)buf)[i], 5, 2, 1);
  case ncclFloat32: return ((const float *)buf)[i];
  default: return ((const double *)buf)[i];
  }
}

/* Stores v, which must be exactly representable, by searching the code
 * whose decoding equals it (narrow formats) or by a plain cast. */
static void encode_exact(int dt, void *buf, size_t i, double v) {
  switch (dt) {
  case ncclFloat32: ((float *)buf)[i] = (float)v; return;
  case ncclFloat64: ((double *)buf)[i] = v; return;
  case ncclBfloat16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    assert_int_equal(u & 0xffff, 0);
    ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
    return;
  }
  default: break;
  }
  static int32_t cache[4][257]; /* small integers and halves -128..128 */
  static int cache_ready;
  if (!cache_ready) {
    memset(cache, 0xff, sizeof(cache));
    int dts[4] = {ncclFloat16, ncclFloat8e4m3, ncclFloat8e5m2, ncclBfloat16};
    for (int k = 0; k < 3; k++) {
      uint32_t ncode = dts[k] == ncclFloat16 ? 65536 : 256;
      for (uint32_t c = 0; c < ncode; c++) {
        uint16_t c16 = (uint16_t)c;
        uint8_t c8 = (uint8_t)c;
        double d = dts[k] == ncclFloat16 ? decode(dts[k], &c16, 0) : decode(dts[k], &c8, 0);
        if (d != d || d != floor(d) || fabs(d) > 128) continue;
        if (d == 0 && (c & (dts[k] == ncclFloat16 ? 0x8000u : 0x80u))) continue;
        if (cache[k][(int)d + 128] < 0) cache[k][(int)d + 128] = (int32_t)c;
      }
    }
    cache_ready = 1;
  }
  int k = dt == ncclFloat16 ? 0 : dt == ncclFloat8e4m3 ? 1 : 2;
  assert_true(v == floor(v) && fabs(v) <= 128);
  int32_t code = cache[k][(int)v + 128];
  if (code < 0) print_error("no exact code for %g in datatype %d\n", v, dt);
  assert_true(code >= 0);
  if (dt == ncclFloat16) ((uint16_t *)buf)[i] = (uint16_t)code;
  else ((uint8_t *)buf)[i] = (uint8_t)code;
}

/* Cheap, well-spread bits for (rank, element). */
static inline uint64_t mix2(int rank, size_t i) {
  uint64_t x = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull ^
               (uint64_t)(rank + 1) * 0xc2b2ae3d27d4eb4full;
  return x ^ (x >> 29);
}

/* Float inputs: small integers such that every partial result is exact in
 * the datatype for up to 8 ranks, never zero. range 0 means {-2,-1,1,2}
 * (products stay powers of two). */
static int float_range(int dt, int op) {
  if (op == ncclProd) return 0;
  if (op == ncclMax || op == ncclMin) return dt == ncclFloat8e5m2 ? 8 : 15;
  if (dt == ncclFloat8e5m2) return 1;
  if (dt == ncclFloat8e4m3) return 2;
  if (dt == ncclBfloat16) return 15;
  return 100;
}

static inline double float_input(int range, int rank, size_t i) {
  uint64_t h = mix2(rank, i);
  if (range == 0) {
    static const double v[4] = {-2, -1, 1, 2};
    return v[(h >> 40) % 4];
  }
  int x = (int)((h >> 40) % (uint64_t)range) + 1;
  return (h >> 20) & 1 ? -x : x;
}

/* Integer inputs: any bits (wrap-around is part of the semantics). */
static uint64_t int_input(int rank, size_t i) { return mix2(rank, i) * 0xff51afd7ed558ccdull; }

static uint64_t int_trunc(int dt, uint64_t x) {
  int bits = (int)esize_of(dt) * 8;
  return bits == 64 ? x : x & ((1ull << bits) - 1);
}

static int64_t int_signed(int dt, uint64_t x) {
  int bits = (int)esize_of(dt) * 8;
  x = int_trunc(dt, x);
  if (bits < 64 && (x >> (bits - 1)) & 1) x |= ~0ull << bits;
  int64_t s;
  memcpy(&s, &x, sizeof(s));
  return s;
}

static void store_int(int dt, void *buf, size_t i, uint64_t v) {
  memcpy((char *)buf + i * esize_of(dt), &v, esize_of(dt)); /* little-endian */
}

static uint64_t load_int(int dt, const void *buf, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const char *)buf + i * esize_of(dt), esize_of(dt));
  return v;
}

/* Combines x into acc as op does, on values of the integer type dt. */
static uint64_t int_combine(int dt, int op, uint64_t acc, uint64_t x) {
  switch (op) {
  case ncclProd: return acc * x;
  case ncclMax:
  case ncclMin: {
    int gt = is_signed(dt) ? int_signed(dt, x) > int_signed(dt, acc)
                           : int_trunc(dt, x) > int_trunc(dt, acc);
    int lt = is_signed(dt) ? int_signed(dt, x) < int_signed(dt, acc)
                           : int_trunc(dt, x) < int_trunc(dt, acc);
    return (op == ncclMax && gt) || (op == ncclMin && lt) ? x : acc;
  }
  default: return acc + x;
  }
}

static double float_combine(int op, double acc, double x) {
  switch (op) {
  case ncclProd: return acc * x;
  case ncclMax: return x > acc ? x : acc;
  case ncclMin: return x < acc ? x : acc;
  default: return acc + x;
  }
}

static int mant_bits(int dt) {
  switch (dt) {
  case ncclFloat16: return 10;
  case ncclBfloat16: return 7;
  case ncclFloat8e4m3: return 3;
  case ncclFloat8e5m2: return 2;
  case ncclFloat32: return 23;
  default: return 52;
  }
}

/* ---- the world: n ranks, one plan ----------------------------------------- */

typedef struct world {
  int n, nblocks;
  brd_ir_plan_t *plan;
  size_t scratch_bytes;               /* allocated: brd_plan_scratch_bytes */
  size_t scratch_small;               /* used below 4096 elements */
  void *scratch[MAXR];
  void *in[MAXR], *out[MAXR];
  _Atomic uint64_t *sems[MAXR][MAXR]; /* [rank][channel] inbound */
  brd_exec_chan_t chans[MAXR][MAXR];
  brd_exec_run_t launch[MAXR];
  ncclResult_t block_res[MAXR][MAXB];
  uint64_t cursor;
  uint32_t phase;
  int active;                         /* ranks taking part */
  int quit;
  pthread_barrier_t start, done;
  pthread_t threads[MAXR][MAXB];
} world_t;

typedef struct worker {
  world_t *w;
  int rank, block;
} worker_t;

static worker_t workers[MAXR][MAXB];

static void *worker_main(void *arg) {
  worker_t *me = arg;
  world_t *w = me->w;
  for (;;) {
    pthread_barrier_wait(&w->start);
    if (w->quit) break;
    if (me->rank < w->active)
      w->block_res[me->rank][me->block] =
          brd_exec_host_block_run(&w->launch[me->rank], me->block);
    pthread_barrier_wait(&w->done);
  }
  return NULL;
}

static void world_init(world_t *w, int algo, int proto, int n, int nblocks,
                       size_t max_count) {
  memset(w, 0, sizeof(*w));
  w->n = n;
  w->nblocks = nblocks;
  w->active = n;
  brd_algos_args_t args = {n, NULL, nblocks, proto};
  int order[MAXR];
  for (int p = 0; p < n; p++) order[p] = (n - 1 - p + 2) % n; /* not identity */
  args.order = order;
  assert_int_equal(gens[algo](&args, &w->plan), ncclSuccess);
  w->scratch_bytes = brd_plan_scratch_bytes(w->plan);
  /* 256 data bytes per slot: 1023 elements take several loop iterations. */
  w->scratch_small = 2 * (size_t)w->plan->nslots * (proto == BRD_IR_PROTO_LL ? 512 : 256);
  assert_true(w->scratch_small <= w->scratch_bytes);
  for (int r = 0; r < n; r++) {
    w->scratch[r] = calloc(1, w->scratch_bytes ? w->scratch_bytes : 1);
    w->in[r] = malloc(max_count * 8 + 8);
    w->out[r] = malloc(max_count * 8 + 8);
    assert_non_null(w->scratch[r]);
    assert_non_null(w->in[r]);
    assert_non_null(w->out[r]);
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++) {
      w->sems[r][c] = calloc(w->plan->nsems ? w->plan->nsems : 1, sizeof(uint64_t));
      assert_non_null(w->sems[r][c]);
    }
  }
  for (int r = 0; r < n; r++) {
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++) {
      int q = brd_ir_plan_chan(w->plan, r, (int)c)->peer;
      uint32_t back = 0, qn = brd_ir_plan_rank(w->plan, q)->nchans;
      while (back < qn && brd_ir_plan_chan(w->plan, q, (int)back)->peer != r) back++;
      w->chans[r][c].peer_scratch = w->scratch[q];
      w->chans[r][c].peer_sems = back < qn ? w->sems[q][back] : NULL;
      w->chans[r][c].sems = w->sems[r][c];
    }
  }
  assert_int_equal(pthread_barrier_init(&w->start, NULL, (unsigned)(n * nblocks + 1)), 0);
  assert_int_equal(pthread_barrier_init(&w->done, NULL, (unsigned)(n * nblocks + 1)), 0);
  for (int r = 0; r < n; r++) {
    for (int b = 0; b < nblocks; b++) {
      workers[r][b].w = w;
      workers[r][b].rank = r;
      workers[r][b].block = b;
      assert_int_equal(pthread_create(&w->threads[r][b], NULL, worker_main, &workers[r][b]), 0);
    }
  }
}

static void world_fini(world_t *w) {
  w->quit = 1;
  pthread_barrier_wait(&w->start);
  for (int r = 0; r < w->n; r++)
    for (int b = 0; b < w->nblocks; b++) pthread_join(w->threads[r][b], NULL);
  pthread_barrier_destroy(&w->start);
  pthread_barrier_destroy(&w->done);
  for (int r = 0; r < w->n; r++) {
    free(w->scratch[r]);
    free(w->in[r]);
    free(w->out[r]);
    for (int c = 0; c < MAXR; c++) free(w->sems[r][c]);
  }
  brd_plan_destroy(w->plan);
}

/* Rank r's arguments for a launch of count elements: its own input and
 * output, the whole scratch, its channels; callers adjust the rest. */
static void world_args(world_t *w, int r, size_t count, int dt, int redop, uint64_t epoch,
                       double timeout, brd_exec_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->plan = w->plan;
  a->rank = r;
  a->input = w->in[r];
  a->output = w->out[r];
  a->scratch = w->scratch[r];
  a->scratch_bytes = w->scratch_bytes;
  a->chans = w->chans[r];
  a->count = count;
  a->dtype = dt;
  a->redop = redop;
  a->epoch = epoch;
  a->phase = w->phase;
  a->timeout_s = timeout;
}

/* Runs the launches prepared on every active rank; every block's and
 * every rank's result must match `expect`; rank 0's hang report goes to
 * *hang_out (may be NULL). */
static void world_run(world_t *w, ncclResult_t expect, brd_exec_hang_t *hang_out) {
  pthread_barrier_wait(&w->start);
  pthread_barrier_wait(&w->done);
  for (int r = 0; r < w->active; r++) {
    for (int b = 0; b < w->nblocks; b++) assert_int_equal(w->block_res[r][b], expect);
    brd_exec_hang_t hang;
    assert_int_equal(brd_exec_host_run_fini(&w->launch[r], &hang), expect);
    if (hang_out != NULL && r == 0) *hang_out = hang;
  }
}

/* One launch on every active rank; see world_run. */
static void world_launch(world_t *w, size_t count, int dt, int redop,
                         const void *scalar, int in_place, double timeout,
                         _Atomic int *abort_flag, ncclResult_t expect,
                         brd_exec_hang_t *hang_out) {
  brd_plan_layout_t layout;
  uint64_t span = 0;
  size_t scratch_bytes = count < 4096 ? w->scratch_small : w->scratch_bytes;
  if (count > 0) {
    assert_int_equal(brd_plan_layout_init(w->plan, count, dt, scratch_bytes, &layout),
                     ncclSuccess);
    span = brd_plan_epoch_span(w->plan, &layout);
  }
  uint64_t epoch = brd_plan_epoch_reserve(&w->cursor, span);
  for (int r = 0; r < w->n; r++) {
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++) {
      int q = brd_ir_plan_chan(w->plan, r, (int)c)->peer;
      w->chans[r][c].peer_output = in_place ? w->in[q] : w->out[q];
    }
  }
  for (int r = 0; r < w->active; r++) {
    brd_exec_args_t a;
    world_args(w, r, count, dt, redop, epoch, timeout, &a);
    if (in_place) a.output = w->in[r];
    a.scratch_bytes = scratch_bytes;
    a.scalar = scalar;
    a.abort_flag = abort_flag;
    assert_int_equal(brd_exec_host_run_init(&w->launch[r], &a), ncclSuccess);
  }
  w->phase ^= 1;
  world_run(w, expect, hang_out);
}

static int failures;

static void fill_inputs(world_t *w, size_t count, int dt, int op, int in_place) {
  int range = float_range(dt, op);
  for (int r = 0; r < w->n; r++) {
    if (dt == ncclFloat32) {
      for (size_t i = 0; i < count; i++)
        ((float *)w->in[r])[i] = (float)float_input(range, r, i);
    } else if (dt == ncclInt8) {
      for (size_t i = 0; i < count; i++)
        ((int8_t *)w->in[r])[i] = (int8_t)int_input(r, i);
    } else {
      for (size_t i = 0; i < count; i++) {
        if (is_int(dt)) store_int(dt, w->in[r], i, int_input(r, i));
        else encode_exact(dt, w->in[r], i, float_input(range, r, i));
      }
    }
    /* Poison the output, and the element past the end in both buffers. */
    if (!in_place) memset(w->out[r], 0xa5, count * esize_of(dt) + 8);
    else memset((char *)w->in[r] + count * esize_of(dt), 0xa5, 8);
  }
}

/* Expected values, computed once per launch from the input buffers (which
 * the test encoded itself) before an in-place launch overwrites them. */
static uint64_t *want_int;
static double *want_flt, *want_tol;

/* Element i widened to 64 bits: sign-extended for signed types, so that
 * 64-bit comparisons order values as the type does. */
static inline uint64_t load_ext(int dt, const void *buf, size_t i) {
  switch (dt) {
  case ncclInt8: return (uint64_t)(int64_t)((const int8_t *)buf)[i];
  case ncclUint8: return ((const uint8_t *)buf)[i];
  case ncclInt32: return (uint64_t)(int64_t)((const int32_t *)buf)[i];
  case ncclUint32: return ((const uint32_t *)buf)[i];
  default: return ((const uint64_t *)buf)[i];
  }
}

static void compute_expected(const world_t *w, size_t count, int dt, int op) {
  int n = w->n;
  if (is_int(dt)) {
    int sgn = is_signed(dt);
    for (int r = 0; r < n; r++) {
      for (size_t i = 0; i < count; i++) {
        uint64_t x = load_ext(dt, w->in[r], i);
        if (op == OP_PREMUL) x *= 2;
        if (r == 0) {
          want_int[i] = x;
        } else if (op == ncclMax || op == ncclMin) {
          uint64_t a = want_int[i];
          int gt = sgn ? (int64_t)x > (int64_t)a : x > a;
          int lt = sgn ? (int64_t)x < (int64_t)a : x < a;
          if ((op == ncclMax && gt) || (op == ncclMin && lt)) want_int[i] = x;
        } else {
          want_int[i] = int_combine(dt, op, want_int[i], x);
        }
      }
    }
    for (size_t i = 0; i < count; i++) {
      uint64_t v = want_int[i];
      if (op == ncclAvg) {
        if (is_signed(dt)) {
          int64_t q = int_signed(dt, v) / n; /* C rounds toward zero */
          memcpy(&v, &q, sizeof(v));
        } else {
          v = int_trunc(dt, v) / (uint64_t)n;
        }
      }
      want_int[i] = int_trunc(dt, v);
    }
    return;
  }
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++) {
      double x = dt == ncclFloat32 ? ((const float *)w->in[r])[i] : decode(dt, w->in[r], i);
      if (op == OP_PREMUL) x *= 2;
      want_flt[i] = r == 0 ? x : float_combine(op, want_flt[i], x);
      want_tol[i] = r == 0 ? fabs(x) : want_tol[i] + fabs(x);
    }
  }
  for (size_t i = 0; i < count; i++) {
    /* avg: each input is multiplied by 1/n rounded to the datatype, and the
     * products and sums round again; everything else is exact. */
    if (op == ncclAvg) {
      want_flt[i] /= n;
      want_tol[i] = (n + 3) * ldexp(want_tol[i] / n, -mant_bits(dt));
    } else {
      want_tol[i] = 0;
    }
  }
}

static void check_outputs(world_t *w, size_t count, int dt, int op, int in_place,
                          int algo, int proto) {
  for (int r = 0; r < w->n; r++) {
    const void *out = in_place ? w->in[r] : w->out[r];
    for (size_t i = 0; i < count; i++) {
      int ok;
      double got, want;
      if (is_int(dt)) {
        uint64_t g = load_int(dt, out, i);
        ok = g == want_int[i];
        got = (double)g;
        want = (double)want_int[i];
      } else {
        want = want_flt[i];
        got = dt == ncclFloat32 ? ((const float *)out)[i] : decode(dt, out, i);
        ok = fabs(got - want) <= want_tol[i];
      }
      if (!ok) {
        if (failures++ < 10)
          print_error("%s %s n=%d blocks=%d dtype=%d op=%s count=%zu %s: rank %d "
                      "element %zu is %g, expected %g\n", gen_names[algo],
                      proto ? "LL" : "Simple", w->n, w->nblocks, dt,
                      op_names[op], count, in_place ? "in place" : "out of place",
                      r, i, got, want);
        return;
      }
    }
    const unsigned char *tail = (const unsigned char *)out + count * esize_of(dt);
    for (int k = 0; k < 8; k++) {
      if (tail[k] != 0xa5) {
        if (failures++ < 10)
          print_error("%s n=%d: rank %d wrote past element %zu\n", gen_names[algo],
                      w->n, r, count);
        return;
      }
    }
  }
}

static void run_case(world_t *w, int algo, int proto, size_t count, int dt, int op,
                     int in_place) {
  uint64_t two = 0;
  if (op == OP_PREMUL) {
    if (is_int(dt)) {
      two = 2;
    } else {
      uint64_t bits = 0;
      encode_exact(dt, &bits, 0, 2.0);
      two = bits;
    }
  }
  fill_inputs(w, count, dt, op, in_place);
  compute_expected(w, count, dt, op);
  int redop = op == OP_PREMUL ? BRD_REDOP_PREMULSUM : op;
  world_launch(w, count, dt, redop, op == OP_PREMUL ? &two : NULL, in_place, 30.0,
               NULL, ncclSuccess, NULL);
  check_outputs(w, count, dt, op, in_place, algo, proto);
}

static void run_algo(int algo) {
  static const size_t counts[4] = {0, 1, 7, 1023};
  failures = 0;
  for (int proto = 0; proto < 2; proto++) {
    for (int ni = 0; ni < 6; ni++) {
      int n = nranks_list[ni];
      static const int blocks_for[6] = {3, 2, 1, 3, 2, 2};
      int nblocks = blocks_for[ni];
      world_t *w = calloc(1, sizeof(*w));
      assert_non_null(w);
      world_init(w, algo, proto, n, nblocks, BIG_COUNT);
      for (int dt = 0; dt < ncclNumTypes; dt++) {
        for (int op = 0; op < 6; op++) {
          for (int ci = 0; ci < 4; ci++) {
            if (counts[ci] == 0 && op > 0) continue; /* nothing to vary */
            for (int ip = 0; ip < 2; ip++)
              run_case(w, algo, proto, counts[ci], dt, op, ip);
          }
        }
      }
      if (n == 3 || n == 8) {
        run_case(w, algo, proto, BIG_COUNT, ncclFloat32, ncclSum, 0);
        run_case(w, algo, proto, BIG_COUNT, ncclInt8, ncclMax, 1);
      }
      world_fini(w);
      free(w);
    }
  }
  assert_int_equal(failures, 0);
}

static void test_ring(void **state) { (void)state; run_algo(0); }
static void test_tree(void **state) { (void)state; run_algo(1); }
static void test_oneshot(void **state) { (void)state; run_algo(2); }
static void test_twoshot(void **state) { (void)state; run_algo(3); }

/* A rank that never joins: the others time out with a report naming it. */
static void test_hang_report(void **state) {
  (void)state;
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 0, BRD_IR_PROTO_SIMPLE, 2, 1, 64);
  fill_inputs(w, 64, ncclFloat32, ncclSum, 0);
  w->active = 1; /* rank 1 stays out */
  brd_exec_hang_t hang;
  memset(&hang, 0, sizeof(hang));
  world_launch(w, 64, ncclFloat32, ncclSum, NULL, 0, 0.2, NULL, ncclRemoteError,
               &hang);
  assert_int_equal(hang.rank, 0);
  assert_int_equal(hang.block, 0);
  assert_int_equal(hang.what, BRD_EXEC_WAIT_SEM);
  assert_int_equal(hang.peer, 1);
  assert_int_equal(hang.iter, 0);
  /* Ring step 1 waits for the predecessor's first transfer: data
   * semaphore 0, sequence epoch + 1, still 0. The op is the step's wait,
   * after step 0's credit wait, put and signal. */
  assert_int_equal(hang.index, 0);
  assert_int_equal(hang.expected, w->launch[0].args.epoch + 1);
  assert_int_equal(hang.seen, 0);
  assert_int_equal(hang.op, 3);
  w->active = 2;
  world_fini(w);
  free(w);
}

/* Output exchange slots of a 3-rank world: [reader][writer]. */
static _Atomic uint64_t xslots[3][3][BRD_IR_XCHG_WORDS];

/* One push_allgather of `count` int32 elements with the output
 * exchange: rank 0 publishes its own buffer `user0`, segments `stride`
 * apart; the others publish nothing, so peers write their staging
 * (out[r], count apart). Inputs carry the round. */
static void xchg_launch(world_t *w, int32_t *user0, size_t count, size_t stride,
                        int round, double timeout, ncclResult_t expect,
                        brd_exec_hang_t *hang_out) {
  brd_plan_layout_t layout;
  assert_int_equal(brd_plan_layout_init(w->plan, count, ncclInt32, w->scratch_bytes,
                                        &layout), ncclSuccess);
  uint64_t epoch = brd_plan_epoch_reserve(&w->cursor, brd_plan_epoch_span(w->plan, &layout));
  for (int r = 0; r < w->n; r++) {
    for (size_t i = 0; i < count; i++) ((int32_t *)w->in[r])[i] = r * 100000 + (int)i + round;
    memset(w->out[r], 0xff, count * (size_t)w->n * 4);
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++) {
      int q = brd_ir_plan_chan(w->plan, r, (int)c)->peer;
      w->chans[r][c].peer_output = w->out[q];
      w->chans[r][c].xchg_pub = xslots[q][r];
      w->chans[r][c].xchg_slot = xslots[r][q];
      w->chans[r][c].xchg_output = r == 0 ? (void *)user0 : NULL;
    }
  }
  memset(user0, 0xff, stride * (size_t)w->n * 4);
  for (int r = 0; r < w->active; r++) {
    brd_exec_args_t a;
    world_args(w, r, count, ncclInt32, ncclSum, epoch, timeout, &a);
    if (r == 0) {
      a.output = user0;
      a.out_stride = stride;
    }
    a.xchg = 1;
    assert_int_equal(brd_exec_host_run_init(&w->launch[r], &a), ncclSuccess);
  }
  world_run(w, expect, hang_out);
}

/* Output exchange (args.xchg): each segment lands where its owner said,
 * a published buffer with its own spacing or the staging, call after
 * call; a rank that never publishes gets a hang report naming it. */
static void test_output_exchange(void **state) {
  (void)state;
  const size_t count = 1000, stride = count + 7;
  world_t *w = calloc(1, sizeof(*w));
  int32_t *user0 = calloc(stride * 3, 4);
  assert_non_null(w);
  assert_non_null(user0);
  world_init(w, GEN_PUSH_ALLGATHER, BRD_IR_PROTO_SIMPLE, 3, 1, count * 3);
  memset(xslots, 0, sizeof(xslots));
  for (int round = 0; round < 3; round++) {
    xchg_launch(w, user0, count, stride, round, 0, ncclSuccess, NULL);
    for (int r = 0; r < 3; r++)
      for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < count; i++) {
          int32_t got = r == 0 ? user0[(size_t)s * stride + i]
                               : ((int32_t *)w->out[r])[(size_t)s * count + i];
          if (got != s * 100000 + (int)i + round)
            fail_msg("round %d rank %d segment %d element %zu: got %d, want %d", round, r,
                     s, i, got, s * 100000 + (int)i + round);
        }
    /* Nothing outside rank 0's segments was written. */
    for (int s = 0; s < 3; s++)
      for (size_t i = count; i < stride; i++) assert_int_equal(user0[(size_t)s * stride + i], -1);
  }
  w->active = 2; /* rank 2 never publishes */
  brd_exec_hang_t hang;
  memset(&hang, 0, sizeof(hang));
  xchg_launch(w, user0, count, stride, 3, 0.2, ncclRemoteError, &hang);
  assert_int_equal(hang.rank, 0);
  assert_int_equal(hang.what, BRD_EXEC_WAIT_XCHG);
  assert_int_equal(hang.peer, 2);
  assert_int_equal(hang.expected, w->launch[0].args.epoch + 1);
  assert_true(hang.seen < hang.expected);
  w->active = 3;
  world_fini(w);
  free(user0);
  free(w);
}

/* A raised abort flag ends the wait with ncclSystemError. */
static void test_abort(void **state) {
  (void)state;
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 2, BRD_IR_PROTO_LL, 3, 2, 64);
  fill_inputs(w, 64, ncclInt32, ncclSum, 0);
  w->active = 2; /* rank 2 stays out; the flag ends the wait, not the timeout */
  _Atomic int abort_flag = 1;
  world_launch(w, 64, ncclInt32, ncclSum, NULL, 0, 60.0, &abort_flag,
               ncclSystemError, NULL);
  w->active = 3;
  world_fini(w);
  free(w);
}

typedef struct spawn_arg {
  brd_exec_args_t args;
  ncclResult_t res;
} spawn_arg_t;

static void *spawn_rank(void *p) {
  spawn_arg_t *s = p;
  s->res = brd_exec_host_run(&s->args, NULL);
  return NULL;
}

/* brd_exec_host_run starts the blocks itself. */
static void test_run_spawns_blocks(void **state) {
  (void)state;
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 3, BRD_IR_PROTO_SIMPLE, 3, 3, 5000);
  size_t count = 4099;
  fill_inputs(w, count, ncclUint32, ncclSum, 0);
  brd_plan_layout_t l;
  assert_int_equal(brd_plan_layout_init(w->plan, count, ncclUint32, w->scratch_bytes, &l),
                   ncclSuccess);
  uint64_t epoch = brd_plan_epoch_reserve(&w->cursor, brd_plan_epoch_span(w->plan, &l));
  spawn_arg_t s[3];
  pthread_t t[3];
  for (int r = 0; r < 3; r++) {
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++)
      w->chans[r][c].peer_output = w->out[brd_ir_plan_chan(w->plan, r, (int)c)->peer];
    memset(&s[r], 0, sizeof(s[r]));
    s[r].args.plan = w->plan;
    s[r].args.rank = r;
    s[r].args.input = w->in[r];
    s[r].args.output = w->out[r];
    s[r].args.scratch = w->scratch[r];
    s[r].args.scratch_bytes = w->scratch_bytes;
    s[r].args.chans = w->chans[r];
    s[r].args.count = count;
    s[r].args.dtype = ncclUint32;
    s[r].args.redop = ncclSum;
    s[r].args.epoch = epoch;
    s[r].args.timeout_s = 30;
    assert_int_equal(pthread_create(&t[r], NULL, spawn_rank, &s[r]), 0);
  }
  for (int r = 0; r < 3; r++) {
    pthread_join(t[r], NULL);
    assert_int_equal(s[r].res, ncclSuccess);
  }
  failures = 0;
  compute_expected(w, count, ncclUint32, ncclSum);
  check_outputs(w, count, ncclUint32, ncclSum, 0, 3, 0);
  assert_int_equal(failures, 0);
  world_fini(w);
  free(w);
}

/* brd_exec_host_run on one rank with three blocks: each allocation it
 * makes fails in turn, returning ncclSystemError without leaks, until
 * the launch goes through and computes the copy. */
static void test_run_alloc_failures(void **state) {
  (void)state;
  brd_algos_args_t args = {1, NULL, 3, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *plan;
  assert_int_equal(brd_algos_ring_allreduce(&args, &plan), ncclSuccess);
  int32_t in[100], out[100];
  for (int i = 0; i < 100; i++) in[i] = 7 * i - 300;
  brd_exec_args_t a;
  memset(&a, 0, sizeof(a));
  a.plan = plan;
  a.input = in;
  a.output = out;
  a.count = 100;
  a.dtype = ncclInt32;
  a.redop = ncclSum;
  a.timeout_s = 30;
  int failures_seen = 0;
  for (long k = 0;; k++) {
    memset(out, 0, sizeof(out));
    alloc_calls = 0;
    fail_at = k;
    live = 0;
    atomic_store(&armed, 1);
    ncclResult_t res = brd_exec_host_run(&a, NULL);
    atomic_store(&armed, 0);
    assert_int_equal(live, 0);
    if (res == ncclSuccess) break;
    assert_int_equal(res, ncclSystemError);
    failures_seen++;
  }
  assert_int_equal(failures_seen, 2); /* the thread and argument arrays */
  for (int i = 0; i < 100; i++) assert_int_equal(out[i], 7 * i - 300);
  brd_plan_destroy(plan);
}

/* Bad launch arguments are rejected before anything runs. */
static void test_bad_args(void **state) {
  (void)state;
  brd_algos_args_t args = {2, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *plan;
  assert_int_equal(brd_algos_ring_allreduce(&args, &plan), ncclSuccess);
  brd_exec_run_t l;
  brd_exec_args_t a;
  memset(&a, 0, sizeof(a));
  a.plan = plan;
  a.count = 10;
  a.dtype = ncclFloat32;
  a.redop = ncclSum;
  a.rank = 2;
  assert_int_equal(brd_exec_host_run_init(&l, &a), ncclInvalidArgument);
  a.rank = 0;
  assert_int_equal(brd_exec_host_run_init(&l, &a), ncclInvalidArgument); /* NULL buffers */
  a.dtype = 12;
  assert_int_equal(brd_exec_host_run_init(&l, &a), ncclInvalidArgument);
  a.dtype = ncclFloat32;
  a.redop = 7;
  assert_int_equal(brd_exec_host_run_init(&l, &a), ncclInvalidArgument);
  /* count 0 needs no buffers at all */
  a.redop = ncclSum;
  a.count = 0;
  assert_int_equal(brd_exec_host_run(&a, NULL), ncclSuccess);
  /* scratch too small for the plan */
  float buf[16] = {0};
  brd_exec_chan_t ch[1];
  memset(ch, 0, sizeof(ch));
  a.count = 16;
  a.input = buf;
  a.output = buf;
  a.scratch = buf;
  a.scratch_bytes = 32; /* 8 bytes per slot: no room for 16 data bytes */
  a.chans = ch;
  assert_int_equal(brd_exec_host_run_init(&l, &a), ncclInternalError);
  brd_plan_destroy(plan);
}

int main(void) {
  want_int = malloc(BIG_COUNT * sizeof(*want_int));
  want_flt = malloc(BIG_COUNT * sizeof(*want_flt));
  want_tol = malloc(BIG_COUNT * sizeof(*want_tol));
  if (!want_int || !want_flt || !want_tol) return 1;
  /* Smaller buffers than NCCL's defaults keep the scratch small. */
  setenv("NCCL_BUFFSIZE", "262144", 1);
  setenv("NCCL_LL_BUFFSIZE", "65536", 1);
  brd_param_reload();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring),
      cmocka_unit_test(test_tree),
      cmocka_unit_test(test_oneshot),
      cmocka_unit_test(test_twoshot),
      cmocka_unit_test(test_hang_report),
      cmocka_unit_test(test_output_exchange),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_run_spawns_blocks),
      cmocka_unit_test(test_run_alloc_failures),
      cmocka_unit_test(test_bad_args),
  };
  int res = cmocka_run_group_tests(tests, NULL, NULL);
  free(want_int);
  free(want_flt);
  free(want_tol);
  return res;
}
