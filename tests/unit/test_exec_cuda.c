/*
 * Unit tests for the CUDA executor (src/device/exec.cu). Every rank of a
 * plan runs on the one visible GPU, in this process: each rank's kernel on
 * its own stream, all launched before any is waited for (ranks wait on each
 * other), few enough blocks per rank that every rank's blocks are resident
 * together.
 *
 *   - every all-reduce generator (ring, tree, one-shot, two-shot) x LL /
 *     Simple on nranks {1, 2, 3, 4, 8}, every datatype and op (sum, prod,
 *     max, min, avg, PreMulSum by 2) for counts {1, 7, 1023} in and out of
 *     place and at an offset that breaks 16-byte alignment, plus 1Mi+3
 *     elements for fp32 sum and int8 max (BRAID_TEST_QUICK=1: two of those
 *     five cases per datatype and op, in turn); outputs poisoned first and checked
 *     element by element against the CPU reference in tests/common (and
 *     for bytes written outside the output);
 *   - every generator of the other collectives (all-gather, reduce-scatter,
 *     broadcast, reduce, all-to-all, gather, scatter, the rank-ordered
 *     all-reduces) on nranks {1, 3, 4}, segment by segment; point-to-point
 *     plans with separate buffers and per-pair sequence numbers;
 *   - bit-exactness of the device arithmetic against the host reductions
 *     (brd_reduce_host_apply) on random bit patterns, NaN, infinities and
 *     fp8 saturation included, through plain and LL paths, the PreMulSum
 *     scalar from the host or from device memory;
 *   - a rank whose peer never launches: it returns within the deadline with
 *     the hang report filled; the abort flag; reset and reuse afterwards;
 *   - BARRIER among a rank's blocks, over several iterations and launches;
 *   - one launch per rank captured into a CUDA graph and replayed 100
 *     times, sequence numbers coming from the device;
 *   - argument and plan checks.
 *
 * Without a visible GPU (or in a CUDA=0 build) every test skips with a
 * message saying why.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#if BRAID_CUDA
#include <cuda_runtime.h>

#include "algos/algos.h"
#include "coll_ref.h"
#include "device/exec_cuda.h"
#include "device/redop.h"
#include "base/param.h"
#include "plan/plan.h"

#define MAXR 8
#define MAXCH 16
#define BIG_COUNT ((size_t)(1u << 20) + 3)
#define PAD 64 /* poisoned bytes before and after each rank's buffer */
#define OP_PREMUL 5 /* ref_* treat an op past ncclAvg as PreMulSum */
#define NOPS 6

typedef ncclResult_t (*gen_fn)(const brd_algos_args_t *, brd_ir_plan_t **);

static const gen_fn gens[4] = {brd_algos_ring_allreduce, brd_algos_tree_allreduce,
                               brd_algos_oneshot_allreduce,
                               brd_algos_twoshot_allreduce};
static const char *gen_names[4] = {"ring", "tree", "oneshot", "twoshot"};
static const int nranks_list[5] = {1, 2, 3, 4, 8};

static int have_gpu;
static cudaStream_t streams[MAXR];

#define NEED_GPU()                                                            \
  do {                                                                        \
    if (!have_gpu) {                                                          \
      print_message("SKIP: no CUDA device visible\n");                        \
      skip();                                                                 \
    }                                                                         \
  } while (0)

#define CU(call)                                                              \
  do {                                                                        \
    cudaError_t cu_err_ = (call);                                             \
    if (cu_err_ != cudaSuccess) {                                             \
      print_error("%s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                  cudaGetErrorString(cu_err_));                               \
      fail();                                                                 \
    }                                                                         \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Host-side copies and memsets go through the legacy stream, which the
 * ranks' non-blocking streams do not wait for: finish them before a launch. */
static void device_idle(void) { CU(cudaDeviceSynchronize()); }

/* ---- the world: n ranks of one plan on one GPU ----------------------------- */

typedef struct world {
  int n, nblocks, algo, proto;
  int device_epoch;                  /* sequence numbers from the device */
  int chans_on_device;               /* channel tables as device arrays */
  brd_ir_plan_t *plan;
  brd_exec_cuda_plan_t *cplan;
  brd_exec_cuda_status_t *st[MAXR];
  size_t scratch_bytes;
  size_t buf_bytes;                  /* per rank, PAD included */
  char *d_in, *d_out;                /* n * buf_bytes each */
  char *h_in, *h_out;                /* host mirrors */
  char *scratch[MAXR];
  uint64_t *sems[MAXR];              /* [channel][nsems] inbound */
  brd_exec_cuda_chan_t chans[MAXR][MAXCH];
  brd_exec_cuda_chan_t *chans_dev[MAXR];
  uint64_t cursor;                   /* host epochs */
  uint32_t phase;
} world_t;

/* Sets up n ranks of `plan` (which the world then owns). */
static void world_setup(world_t *w, brd_ir_plan_t *plan, int algo, int proto,
                        int n, int nblocks, size_t max_count, int device_epoch,
                        int chans_on_device) {
  memset(w, 0, sizeof(*w));
  w->n = n;
  w->nblocks = nblocks;
  w->algo = algo;
  w->proto = proto;
  w->device_epoch = device_epoch;
  w->chans_on_device = chans_on_device;
  w->plan = plan;
  assert_int_equal(brd_exec_cuda_plan_create(w->plan, &w->cplan), ncclSuccess);
  w->scratch_bytes = brd_plan_scratch_bytes(w->plan);
  w->buf_bytes = (max_count * 8 + 2 * PAD + 255) & ~(size_t)255;
  CU(cudaMalloc((void **)&w->d_in, (size_t)n * w->buf_bytes));
  CU(cudaMalloc((void **)&w->d_out, (size_t)n * w->buf_bytes));
  w->h_in = malloc((size_t)n * w->buf_bytes);
  w->h_out = malloc((size_t)n * w->buf_bytes);
  assert_non_null(w->h_in);
  assert_non_null(w->h_out);
  uint32_t nsems = w->plan->nsems;
  for (int r = 0; r < n; r++) {
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    assert_true(nch <= MAXCH);
    if (w->scratch_bytes > 0) {
      CU(cudaMalloc((void **)&w->scratch[r], w->scratch_bytes));
      CU(cudaMemset(w->scratch[r], 0, w->scratch_bytes));
    }
    size_t sem_bytes = (size_t)(nch ? nch : 1) * (nsems ? nsems : 1) * sizeof(uint64_t);
    CU(cudaMalloc((void **)&w->sems[r], sem_bytes));
    CU(cudaMemset(w->sems[r], 0, sem_bytes));
    assert_int_equal(brd_exec_cuda_status_create(NULL, &w->st[r]), ncclSuccess);
  }
  for (int r = 0; r < n; r++) {
    uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
    for (uint32_t c = 0; c < nch; c++) {
      int q = brd_ir_plan_chan(w->plan, r, (int)c)->peer;
      uint32_t back = 0, qn = brd_ir_plan_rank(w->plan, q)->nchans;
      while (back < qn && brd_ir_plan_chan(w->plan, q, (int)back)->peer != r) back++;
      w->chans[r][c].peer_scratch = w->scratch[q];
      w->chans[r][c].peer_sems = back < qn ? w->sems[q] + (size_t)back * nsems : NULL;
      w->chans[r][c].sems = w->sems[r] + (size_t)c * nsems;
    }
    if (chans_on_device)
      assert_int_equal(brd_exec_cuda_chans_create(w->chans[r], nch, &w->chans_dev[r]),
                       ncclSuccess);
  }
  device_idle();
}

/* The rank order the generators get: not the identity. */
static void test_order(int n, int *order) {
  for (int p = 0; p < n; p++) order[p] = (n - 1 - p + 2) % n;
}

static void world_init(world_t *w, int algo, int proto, int n, int nblocks,
                       size_t max_count, int device_epoch, int chans_on_device) {
  int order[MAXR];
  test_order(n, order);
  brd_algos_args_t args = {n, order, nblocks, proto};
  brd_ir_plan_t *plan;
  assert_int_equal(gens[algo](&args, &plan), ncclSuccess);
  world_setup(w, plan, algo, proto, n, nblocks, max_count, device_epoch,
              chans_on_device);
}

static void world_fini(world_t *w) {
  CU(cudaDeviceSynchronize());
  for (int r = 0; r < w->n; r++) {
    brd_exec_cuda_status_destroy(w->st[r]);
    brd_exec_cuda_chans_destroy(w->chans_dev[r]);
    cudaFree(w->scratch[r]);
    cudaFree(w->sems[r]);
  }
  cudaFree(w->d_in);
  cudaFree(w->d_out);
  free(w->h_in);
  free(w->h_out);
  brd_exec_cuda_plan_destroy(w->cplan);
  brd_plan_destroy(w->plan);
}

/* Rank r's input and output for a launch at element offset `off`. */
static char *rank_in(const world_t *w, int r, size_t off, size_t es) {
  return w->d_in + (size_t)r * w->buf_bytes + PAD + off * es;
}
static char *rank_out(const world_t *w, int r, int in_place, size_t off, size_t es) {
  return in_place ? rank_in(w, r, off, es)
                  : w->d_out + (size_t)r * w->buf_bytes + PAD + off * es;
}

/* Fills args for rank r; the channel table gets this launch's outputs. */
static void rank_args(world_t *w, int r, size_t count, int dt, int redop,
                      const void *scalar, int in_place, size_t off,
                      uint64_t epoch, double timeout, brd_exec_cuda_args_t *a) {
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
  for (uint32_t c = 0; c < nch; c++) {
    int q = brd_ir_plan_chan(w->plan, r, (int)c)->peer;
    w->chans[r][c].peer_output = rank_out(w, q, in_place, off, es);
  }
  /* The caller finishes this copy (device_idle) before launching: not
   * between two ranks' launches, which would wait for a rank that waits for
   * the next. */
  if (w->chans_on_device && nch > 0)
    CU(cudaMemcpy(w->chans_dev[r], w->chans[r], nch * sizeof(w->chans[r][0]),
                  cudaMemcpyHostToDevice));
  memset(a, 0, sizeof(*a));
  a->plan = w->cplan;
  a->rank = r;
  a->input = rank_in(w, r, off, es);
  a->output = rank_out(w, r, in_place, off, es);
  a->scratch = w->scratch[r];
  a->scratch_bytes = w->scratch_bytes;
  if (w->chans_on_device) a->chans_dev = w->chans_dev[r];
  else a->chans = w->chans[r];
  a->count = count;
  a->dtype = dt;
  a->redop = redop;
  a->scalar = scalar;
  a->device_epoch = w->device_epoch;
  a->epoch = epoch;
  a->phase = w->phase;
  a->status = w->st[r];
  a->timeout_s = timeout;
}

/* Reserves the launch's sequence numbers (host epochs). */
static uint64_t world_epoch(world_t *w, size_t count, int dt) {
  uint64_t span = 0;
  if (count > 0) {
    brd_plan_layout_t l;
    assert_int_equal(brd_plan_layout_init(w->plan, count, dt, w->scratch_bytes, &l),
                     ncclSuccess);
    span = brd_plan_epoch_span(w->plan, &l);
  }
  return brd_plan_epoch_reserve(&w->cursor, span);
}

/* Launches ranks [0, active), waits for them, and checks every result is
 * `expect`. Returns the epoch used. */
static uint64_t world_launch(world_t *w, size_t count, int dt, int redop,
                             const void *scalar, int in_place, size_t off,
                             double timeout, int active, ncclResult_t expect) {
  uint64_t epoch = world_epoch(w, count, dt);
  brd_exec_cuda_args_t a[MAXR];
  for (int r = 0; r < active; r++)
    rank_args(w, r, count, dt, redop, scalar, in_place, off, epoch, timeout, &a[r]);
  device_idle();
  for (int r = 0; r < active; r++)
    assert_int_equal(brd_exec_cuda_launch(&a[r], streams[r]), ncclSuccess);
  w->phase ^= 1;
  for (int r = 0; r < active; r++) CU(cudaStreamSynchronize(streams[r]));
  for (int r = 0; r < active; r++)
    assert_int_equal(brd_exec_cuda_poll(w->st[r], NULL), expect);
  return epoch;
}

/* ---- all-reduce against the CPU reference ---------------------------------- */

static int failures;
static unsigned char *expect_buf;

/* Writes the ranks' inputs (poison around them and in every output) to
 * the device. */
static void upload_inputs(world_t *w, size_t count, int dt, int op, size_t off) {
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  size_t used = 2 * PAD + (off + count) * es;
  for (int r = 0; r < w->n; r++) {
    char *h = w->h_in + (size_t)r * w->buf_bytes;
    memset(h, 0xa5, used);
    ref_fill_input((ncclDataType_t)dt, (ncclRedOp_t)op, r, h + PAD + off * es, count);
  }
  /* One copy for all ranks: the gaps between them are never read. */
  CU(cudaMemcpy(w->d_in, w->h_in, (size_t)(w->n - 1) * w->buf_bytes + used,
                cudaMemcpyHostToDevice));
  CU(cudaMemset(w->d_out, 0xa5, (size_t)(w->n - 1) * w->buf_bytes + used));
  device_idle();
}

static void check_outputs(world_t *w, size_t count, int dt, int op, int in_place,
                          size_t off) {
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  size_t used = 2 * PAD + (off + count) * es;
  const char *src = in_place ? w->d_in : w->d_out;
  CU(cudaMemcpy(w->h_out, src, (size_t)(w->n - 1) * w->buf_bytes + used,
                cudaMemcpyDeviceToHost));
  int tolerant = ref_dtype_is_float((ncclDataType_t)dt) && (op == ncclAvg || op == OP_PREMUL);
  for (int r = 0; r < w->n; r++) {
    const unsigned char *h = (const unsigned char *)w->h_out + (size_t)r * w->buf_bytes;
    const unsigned char *got = h + PAD + off * es;
    char msg[160] = "";
    size_t wrong = ref_compare((ncclDataType_t)dt, tolerant, got, expect_buf, count,
                               msg, sizeof(msg));
    int outside = 0;
    for (size_t k = 0; k < 16; k++)
      if (got[-1 - (ptrdiff_t)k] != 0xa5 || got[count * es + k] != 0xa5) outside = 1;
    if ((wrong > 0 || outside) && failures++ < 10)
      print_error("%s %s n=%d blocks=%d %s %s count=%zu %s offset %zu: rank %d: "
                  "%zu wrong (%s)%s\n", gen_names[w->algo],
                  w->proto ? "LL" : "Simple", w->n, w->nblocks,
                  ref_dtype_name((ncclDataType_t)dt), ref_op_name((ncclRedOp_t)op),
                  count, in_place ? "in place" : "out of place", off, r, wrong, msg,
                  outside ? "; bytes written outside the output" : "");
  }
}

static void run_case(world_t *w, size_t count, int dt, int op, int in_place,
                     size_t off) {
  uint64_t two = 0;
  ref_store((ncclDataType_t)dt, &two, 0, 2.0);
  upload_inputs(w, count, dt, op, off);
  ref_reduce_expect((ncclDataType_t)dt, (ncclRedOp_t)op, w->n, 2.0, expect_buf, count);
  int redop = op == OP_PREMUL ? BRD_REDOP_PREMULSUM : op;
  world_launch(w, count, dt, redop, op == OP_PREMUL ? &two : NULL, in_place, off,
               30.0, w->n, ncclSuccess);
  check_outputs(w, count, dt, op, in_place, off);
}

/* BRAID_TEST_QUICK=1 (make test, on the CUDA simulators): each (datatype,
 * op) runs two of the five count/placement cases, chosen in turn, so every
 * pair and every case still runs on every rank count and protocol. */
static int quick_cases(void) {
  const char *q = getenv("BRAID_TEST_QUICK");
  return q != NULL && strcmp(q, "1") == 0;
}

static void run_algo(int algo) {
  static const size_t counts[3] = {1, 7, 1023};
  int quick = quick_cases();
  failures = 0;
  for (int proto = 0; proto < 2; proto++) {
    for (int ni = 0; ni < 5; ni++) {
      int n = nranks_list[ni];
      int nblocks = 1 + (ni % 3);
      int big = n == 3 || n == 8;
      world_t *w = calloc(1, sizeof(*w));
      assert_non_null(w);
      /* Half the worlds take sequence numbers from the device; rank count
       * 4 passes its channel tables as device arrays. */
      world_init(w, algo, proto, n, nblocks, big ? BIG_COUNT : 4096,
                 (ni + proto) % 2, n == 4);
      /* count 0 is a no-op that must not touch anything */
      world_launch(w, 0, ncclFloat32, ncclSum, NULL, 0, 0, 30.0, n, ncclSuccess);
      for (int dt = 0; dt < ncclNumTypes; dt++) {
        for (int op = 0; op < NOPS; op++) {
          /* Cases 0-2: the counts; 3: in place; 4: not 16-byte aligned. */
          int k = (dt * NOPS + op + ni) % 5;
          for (int c = 0; c < 5; c++) {
            if (quick && c != k && c != (k + 2) % 5) continue;
            if (c < 3) run_case(w, counts[c], dt, op, 0, 0);
            else run_case(w, 1023, dt, op, c == 3, c == 4);
          }
        }
      }
      if (big) {
        run_case(w, BIG_COUNT, ncclFloat32, ncclSum, 0, 0);
        run_case(w, BIG_COUNT, ncclInt8, ncclMax, 1, 0);
      }
      world_fini(w);
      free(w);
    }
  }
  assert_int_equal(failures, 0);
}

static void test_ring(void **state) { (void)state; NEED_GPU(); run_algo(0); }
static void test_tree(void **state) { (void)state; NEED_GPU(); run_algo(1); }
static void test_oneshot(void **state) { (void)state; NEED_GPU(); run_algo(2); }
static void test_twoshot(void **state) { (void)state; NEED_GPU(); run_algo(3); }

/* ---- the other collectives ----------------------------------------------- */

static const char *coll_names[BRD_IR_COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce",
    "alltoall", "gather", "scatter", "sendrecv"};

/* BRD_IR_ALGO_* names (ONESHOT is the direct family of the collectives). */
static const char *ir_algo_names[6] = {"copy", "ring", "tree", "direct",
                                       "twoshot", "nvls"};

static int coll_multi_in(int coll) {
  return coll == BRD_IR_COLL_REDUCESCATTER || coll == BRD_IR_COLL_ALLTOALL ||
         coll == BRD_IR_COLL_SCATTER;
}
static int coll_multi_out(int coll) {
  return coll == BRD_IR_COLL_ALLGATHER || coll == BRD_IR_COLL_ALLTOALL ||
         coll == BRD_IR_COLL_GATHER;
}
static int coll_reduces(int coll) {
  return coll == BRD_IR_COLL_ALLREDUCE || coll == BRD_IR_COLL_REDUCESCATTER ||
         coll == BRD_IR_COLL_REDUCE;
}

/* One launch of collective `coll` on every rank, checked segment by
 * segment: reductions against ref_reduce_expect(_range), data movement
 * against ref_move_value of the rank and segment the data must come from.
 * Segments sit `gap` elements apart (in_stride / out_stride = count + gap)
 * and the gaps must stay poisoned. Ranks the collective gives no input or
 * output get NULL, and their buffers must stay poisoned too. */
static void run_coll_case(world_t *w, int coll, int root, size_t count, size_t gap,
                          int dt, int op) {
  int n = w->n;
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  int nseg_in = coll_multi_in(coll) ? n : 1, nseg_out = coll_multi_out(coll) ? n : 1;
  size_t sin = count + gap, sout = count + gap;
  size_t in_span = (size_t)(nseg_in - 1) * sin + count;
  size_t out_span = (size_t)(nseg_out - 1) * sout + count;
  size_t used = 2 * PAD + (in_span > out_span ? in_span : out_span) * es;
  assert_true(used <= w->buf_bytes);
  for (int r = 0; r < n; r++) {
    char *h = w->h_in + (size_t)r * w->buf_bytes;
    memset(h, 0xa5, used);
    for (int sg = 0; sg < nseg_in; sg++) {
      char *seg = h + PAD + (size_t)sg * sin * es;
      if (!coll_reduces(coll)) {
        ref_fill_move((ncclDataType_t)dt, r, sg, seg, count);
        continue;
      }
      /* The reference reduces element i of the whole send buffer. */
      for (size_t i = 0; i < count; i++)
        ref_store((ncclDataType_t)dt, seg, i,
                  ref_input_value((ncclDataType_t)dt, (ncclRedOp_t)op, r,
                                  (size_t)sg * count + i));
    }
  }
  CU(cudaMemcpy(w->d_in, w->h_in, (size_t)(n - 1) * w->buf_bytes + used,
                cudaMemcpyHostToDevice));
  CU(cudaMemset(w->d_out, 0xa5, (size_t)(n - 1) * w->buf_bytes + used));

  uint64_t two = 0;
  ref_store((ncclDataType_t)dt, &two, 0, 2.0);
  int redop = op == OP_PREMUL ? BRD_REDOP_PREMULSUM : op;
  uint64_t epoch = world_epoch(w, count, dt);
  brd_exec_cuda_args_t a[MAXR];
  for (int r = 0; r < n; r++) {
    rank_args(w, r, count, dt, redop, op == OP_PREMUL ? &two : NULL, 0, 0, epoch,
              30.0, &a[r]);
    if ((coll == BRD_IR_COLL_BROADCAST || coll == BRD_IR_COLL_SCATTER) && r != root)
      a[r].input = NULL;
    if ((coll == BRD_IR_COLL_REDUCE || coll == BRD_IR_COLL_GATHER) && r != root)
      a[r].output = NULL;
    a[r].in_stride = nseg_in > 1 ? sin : 0;
    a[r].out_stride = nseg_out > 1 ? sout : 0;
  }
  device_idle();
  for (int r = 0; r < n; r++)
    assert_int_equal(brd_exec_cuda_launch(&a[r], streams[r]), ncclSuccess);
  w->phase ^= 1;
  for (int r = 0; r < n; r++) CU(cudaStreamSynchronize(streams[r]));
  for (int r = 0; r < n; r++) assert_int_equal(brd_exec_cuda_poll(w->st[r], NULL), ncclSuccess);
  CU(cudaMemcpy(w->h_out, w->d_out, (size_t)(n - 1) * w->buf_bytes + used,
                cudaMemcpyDeviceToHost));

  int tolerant = ref_dtype_is_float((ncclDataType_t)dt) && (op == ncclAvg || op == OP_PREMUL);
  for (int r = 0; r < n; r++) {
    const unsigned char *got = (const unsigned char *)w->h_out + (size_t)r * w->buf_bytes + PAD;
    int has_out = !((coll == BRD_IR_COLL_REDUCE || coll == BRD_IR_COLL_GATHER) && r != root);
    char msg[160] = "";
    size_t wrong = 0;
    switch (coll) {
    case BRD_IR_COLL_ALLREDUCE:
    case BRD_IR_COLL_REDUCE:
    case BRD_IR_COLL_REDUCESCATTER:
      if (!has_out) break;
      ref_reduce_expect_range((ncclDataType_t)dt, (ncclRedOp_t)op, n, 2.0, expect_buf,
                              coll == BRD_IR_COLL_REDUCESCATTER ? (size_t)r * count : 0,
                              count);
      wrong = ref_compare((ncclDataType_t)dt, tolerant, got, expect_buf, count, msg,
                          sizeof(msg));
      break;
    case BRD_IR_COLL_GATHER:
    case BRD_IR_COLL_ALLGATHER:
      /* A gather's root holds what an all-gather gives every rank. */
      if (!has_out) break;
      for (int q = 0; q < n; q++)
        wrong += ref_check_move((ncclDataType_t)dt, q, 0, got + (size_t)q * sout * es,
                                count, msg, sizeof(msg));
      break;
    case BRD_IR_COLL_BROADCAST:
      wrong = ref_check_move((ncclDataType_t)dt, root, 0, got, count, msg, sizeof(msg));
      break;
    case BRD_IR_COLL_ALLTOALL:
      for (int q = 0; q < n; q++)
        wrong += ref_check_move((ncclDataType_t)dt, q, r, got + (size_t)q * sout * es,
                                count, msg, sizeof(msg));
      break;
    default: /* scatter */
      wrong = ref_check_move((ncclDataType_t)dt, root, r, got, count, msg, sizeof(msg));
      break;
    }
    /* Nothing before the output, after it, between its segments, or
     * anywhere in an output the rank does not have. */
    int outside = 0;
    for (size_t k = 0; k < 16; k++)
      if (got[-1 - (ptrdiff_t)k] != 0xa5 || got[out_span * es + k] != 0xa5) outside = 1;
    for (int sg = 0; has_out && sg + 1 < nseg_out; sg++)
      if (ref_count_poison((ncclDataType_t)dt, got + ((size_t)sg * sout + count) * es, gap) != gap)
        outside = 1;
    if (!has_out && ref_count_poison((ncclDataType_t)dt, got, out_span) != out_span)
      outside = 1;
    if ((wrong > 0 || outside) && failures++ < 10)
      print_error("%s %s %s n=%d blocks=%d root=%d %s %s count=%zu gap=%zu: rank %d: "
                  "%zu wrong (%s)%s\n", coll_names[coll], ir_algo_names[w->algo],
                  w->proto ? "LL" : "Simple", n, w->nblocks, root,
                  ref_dtype_name((ncclDataType_t)dt), ref_op_name((ncclRedOp_t)op),
                  count, gap, r, wrong, msg,
                  outside ? "; bytes written outside the output" : "");
  }
}

/* Every generator of the other collectives (and the rank-ordered
 * all-reduces) on nranks {1, 3, 4}, both protocols, roots 0 and n-1, a few
 * datatypes and ops; counts give odd segment sizes (segments not 16-byte
 * aligned) and several loop iterations. */
static void test_collectives(void **state) {
  (void)state;
  NEED_GPU();
  static const int nr[3] = {1, 3, 4};
  static const size_t counts[3] = {7, 1023, 40001};
  static const int red_cases[4][2] = {{ncclFloat32, ncclSum}, {ncclInt8, ncclMax},
                                      {ncclFloat16, ncclAvg}, {ncclBfloat16, OP_PREMUL}};
  static const int move_types[2] = {ncclInt8, ncclFloat64};
  failures = 0;
  for (int coll = 0; coll < BRD_IR_COLL_SENDRECV; coll++) {
    for (int det = 0; det < 2; det++) {
      if (det && !coll_reduces(coll)) continue;
      /* NVLS plans need a switch channel (a multicast mapping): they run in
       * tests/cudasim/test_switch_exec.c and test_nvls_e2e.c. */
      for (int algo = 0; algo < BRD_IR_ALGO_NVLS; algo++) {
        if (!brd_algos_available(coll, algo, det)) continue;
        if (coll == BRD_IR_COLL_ALLREDUCE && !det) continue; /* test_ring etc. */
        for (int proto = 0; proto < 2; proto++) {
          for (int ni = 0; ni < 3; ni++) {
            int n = nr[ni];
            int rooted = coll == BRD_IR_COLL_BROADCAST || coll == BRD_IR_COLL_REDUCE ||
                         coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER;
            for (int root = 0; root < (rooted ? n : 1); root += (n > 1 ? n - 1 : 1)) {
              int order[MAXR];
              test_order(n, order);
              brd_algos_args_t args = {n, order, 2, proto};
              brd_ir_plan_t *plan;
              assert_int_equal(brd_algos_generate(coll, algo, &args, rooted ? root : -1,
                                                  det, &plan), ncclSuccess);
              world_t *w = calloc(1, sizeof(*w));
              assert_non_null(w);
              world_setup(w, plan, algo, proto, n, 2, (size_t)n * (counts[2] + 3),
                          ni == 1, 0);
              /* count 1023 runs twice: segments back to back, then 3 apart. */
              for (int ci = 0; ci < 4; ci++) {
                size_t count = counts[ci < 3 ? ci : 1], gap = ci < 3 ? 0 : 3;
                if (coll_reduces(coll)) {
                  for (int k = 0; k < 4; k++)
                    run_coll_case(w, coll, root, count, gap, red_cases[k][0],
                                  red_cases[k][1]);
                } else {
                  for (int k = 0; k < 2; k++)
                    run_coll_case(w, coll, root, count, gap, move_types[k], ncclSum);
                }
              }
              world_fini(w);
              free(w);
            }
          }
        }
      }
    }
  }
  assert_int_equal(failures, 0);
}

/* ---- point-to-point -------------------------------------------------------- */

/* Each rank sends two messages to its successor (sizes depending on the
 * sender) and one to itself, and receives the matching ones: separate
 * buffers per segment, per-pair sequence numbers, one-phase scratch, each
 * rank with its own plan. Rank 0 passes its segment tables and channel
 * epochs as device arrays. Three launches reuse the slots and advance every
 * pair's epochs. */
static void test_sendrecv(void **state) {
  (void)state;
  NEED_GPU();
  for (int n = 2; n <= 4; n += 2) {
    size_t piece = (size_t)((brd_param_int(BRD_P_BUFFSIZE) / BRD_ALGOS_SENDRECV_SLOT_DIV) & ~15);
    brd_ir_plan_t *plan[MAXR];
    brd_exec_cuda_plan_t *cplan[MAXR];
    brd_exec_cuda_status_t *st[MAXR];
    char *scratch[MAXR], *bufs[MAXR];
    uint64_t *sems[MAXR], cursor[MAXR][MAXR];
    size_t bytes[MAXR][3]; /* rank r's sends: to r+1, to r, to r+1 */
    brd_exec_cuda_seg_t in[MAXR][3], out[MAXR][3];
    size_t scratch_bytes = 0;
    memset(cursor, 0, sizeof(cursor));
    for (int r = 0; r < n; r++) {
      bytes[r][0] = 3 * piece + 100 + 77 * (size_t)r; /* several pieces, ragged */
      bytes[r][1] = 3001;
      bytes[r][2] = 123 + (size_t)r;
    }
    for (int r = 0; r < n; r++) {
      int next = (r + 1) % n, prev = (r + n - 1) % n;
      brd_algos_sendrecv_op_t sends[3], recvs[3];
      for (int i = 0; i < 3; i++) {
        sends[i].peer = i == 1 ? r : next;
        sends[i].nchunks = (uint32_t)((bytes[r][i] + piece - 1) / piece);
        recvs[i].peer = i == 1 ? r : prev;
        recvs[i].nchunks = (uint32_t)((bytes[i == 1 ? r : prev][i] + piece - 1) / piece);
      }
      brd_algos_sendrecv_rank_t ranks[MAXR];
      memset(ranks, 0, sizeof(ranks));
      ranks[r].nsend = 3;
      ranks[r].send = sends;
      ranks[r].nrecv = 3;
      ranks[r].recv = recvs;
      brd_algos_sendrecv_args_t pa = {n, r, ranks};
      assert_int_equal(brd_algos_sendrecv(&pa, &plan[r]), ncclSuccess);
      assert_int_equal(brd_exec_cuda_plan_create(plan[r], &cplan[r]), ncclSuccess);
      assert_int_equal(brd_exec_cuda_status_create(NULL, &st[r]), ncclSuccess);
      /* Every rank must cut its scratch into the same slots: peers write
       * there with their own plans. */
      assert_int_equal(plan[r]->nslots, plan[0]->nslots);
      size_t sb = brd_plan_scratch_bytes(plan[r]);
      if (sb > scratch_bytes) scratch_bytes = sb;
    }
    brd_plan_layout_t l;
    assert_int_equal(brd_plan_layout_init(plan[0], piece, ncclUint8, scratch_bytes, &l),
                     ncclSuccess);
    assert_int_equal(l.chunk_max, piece);
    size_t buf_bytes = 0;
    for (int r = 0; r < n; r++)
      for (int i = 0; i < 3; i++) buf_bytes += 2 * (bytes[r][i] + PAD);
    for (int r = 0; r < n; r++) {
      CU(cudaMalloc((void **)&scratch[r], scratch_bytes));
      CU(cudaMemset(scratch[r], 0, scratch_bytes));
      CU(cudaMalloc((void **)&sems[r], (size_t)n * 2 * sizeof(uint64_t)));
      CU(cudaMemset(sems[r], 0, (size_t)n * 2 * sizeof(uint64_t)));
      CU(cudaMalloc((void **)&bufs[r], buf_bytes));
      /* Send buffers, then receive buffers, PAD apart and misaligned. */
      char *cur = bufs[r] + 1;
      for (int i = 0; i < 3; i++) {
        in[r][i].ptr = cur;
        in[r][i].count = bytes[r][i];
        cur += bytes[r][i] + PAD;
      }
      for (int i = 0; i < 3; i++) {
        int from = i == 1 ? r : (r + n - 1) % n;
        out[r][i].ptr = cur;
        out[r][i].count = bytes[from][i];
        cur += bytes[from][i] + PAD;
      }
    }
    brd_exec_cuda_seg_t *segs_dev;
    uint64_t *epochs_dev;
    CU(cudaMalloc((void **)&segs_dev, 6 * sizeof(*segs_dev)));
    CU(cudaMalloc((void **)&epochs_dev, MAXR * sizeof(*epochs_dev)));
    char *h = malloc(buf_bytes);
    assert_non_null(h);
    for (int launch = 0; launch < 3; launch++) {
      brd_exec_cuda_args_t a[MAXR];
      brd_exec_cuda_chan_t chans[MAXR][MAXCH];
      uint64_t epochs[MAXR][MAXCH];
      for (int r = 0; r < n; r++) {
        memset(h, 0xa5, buf_bytes);
        for (int i = 0; i < 3; i++)
          ref_fill_move(ncclUint8, r, i + 3 * launch, h + ((char *)in[r][i].ptr - bufs[r]),
                        bytes[r][i]);
        CU(cudaMemcpy(bufs[r], h, buf_bytes, cudaMemcpyHostToDevice));
        uint32_t nch = brd_ir_plan_rank(plan[r], r)->nchans;
        assert_true(nch <= MAXCH);
        for (uint32_t c = 0; c < nch; c++) {
          int p = brd_ir_plan_chan(plan[r], r, (int)c)->peer;
          uint64_t to = 0, from = 0;
          for (int i = 0; i < 3; i++) {
            if (i != 1 && (r + 1) % n == p) to += (bytes[r][i] + piece - 1) / piece;
            if (i != 1 && (r + n - 1) % n == p) from += (bytes[p][i] + piece - 1) / piece;
          }
          epochs[r][c] = brd_plan_epoch_reserve(&cursor[r][p], to > from ? to : from);
          chans[r][c].peer_scratch = scratch[p];
          chans[r][c].peer_output = NULL;
          chans[r][c].peer_sems = sems[p] + (size_t)r * 2;
          chans[r][c].sems = sems[r] + (size_t)p * 2;
        }
        size_t count = 0;
        for (int i = 0; i < 3; i++) {
          if (in[r][i].count > count) count = in[r][i].count;
          if (out[r][i].count > count) count = out[r][i].count;
        }
        memset(&a[r], 0, sizeof(a[r]));
        a[r].plan = cplan[r];
        a[r].rank = r;
        a[r].scratch = scratch[r];
        a[r].scratch_bytes = scratch_bytes;
        a[r].chans = chans[r];
        a[r].count = count;
        a[r].dtype = ncclUint8;
        a[r].redop = ncclSum;
        a[r].status = st[r];
        a[r].timeout_s = 30;
        if (r == 0) {
          brd_exec_cuda_seg_t t[6] = {in[0][0], in[0][1], in[0][2],
                                      out[0][0], out[0][1], out[0][2]};
          CU(cudaMemcpy(segs_dev, t, sizeof(t), cudaMemcpyHostToDevice));
          CU(cudaMemcpy(epochs_dev, epochs[0], nch * sizeof(uint64_t),
                        cudaMemcpyHostToDevice));
          a[r].in_segs_dev = segs_dev;
          a[r].out_segs_dev = segs_dev + 3;
          a[r].chan_epoch_dev = epochs_dev;
        } else {
          a[r].in_segs = in[r];
          a[r].out_segs = out[r];
          a[r].chan_epoch = epochs[r];
        }
        a[r].n_in_segs = 3;
        a[r].n_out_segs = 3;
      }
      device_idle();
      for (int r = 0; r < n; r++)
        assert_int_equal(brd_exec_cuda_launch(&a[r], streams[r]), ncclSuccess);
      for (int r = 0; r < n; r++) CU(cudaStreamSynchronize(streams[r]));
      for (int r = 0; r < n; r++) assert_int_equal(brd_exec_cuda_poll(st[r], NULL), ncclSuccess);
      size_t bad = 0;
      for (int r = 0; r < n; r++) {
        CU(cudaMemcpy(h, bufs[r], buf_bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 3; i++) {
          int from = i == 1 ? r : (r + n - 1) % n;
          const unsigned char *got = (const unsigned char *)h + ((char *)out[r][i].ptr - bufs[r]);
          char msg[160] = "";
          size_t wrong = ref_check_move(ncclUint8, from, i + 3 * launch, got,
                                        out[r][i].count, msg, sizeof(msg));
          for (size_t k = 0; k < 16; k++)
            if (got[out[r][i].count + k] != 0xa5) wrong++;
          if (wrong > 0 && bad++ < 5)
            print_error("sendrecv n=%d launch %d: rank %d receive %d from %d: %zu "
                        "wrong (%s)\n", n, launch, r, i, from, wrong, msg);
        }
      }
      assert_int_equal(bad, 0);
    }
    free(h);
    cudaFree(segs_dev);
    cudaFree(epochs_dev);
    for (int r = 0; r < n; r++) {
      cudaFree(scratch[r]);
      cudaFree(sems[r]);
      cudaFree(bufs[r]);
      brd_exec_cuda_status_destroy(st[r]);
      brd_exec_cuda_plan_destroy(cplan[r]);
      brd_plan_destroy(plan[r]);
    }
  }
}

/* ---- arithmetic bit for bit against the host reductions -------------------- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rng(void) {
  uint64_t x = rng_state += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Whether the bits of element i of dt encode a NaN or a zero, from the
 * formats' layouts. */
static int is_nan_bits(int dt, uint64_t b) {
  switch (dt) {
  case ncclFloat16: return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
  case ncclBfloat16: return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
  case ncclFloat8e4m3: return (b & 0x7fu) == 0x7fu;
  case ncclFloat8e5m2: return (b & 0x7cu) == 0x7cu && (b & 3u) != 0;
  case ncclFloat32: return (b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0;
  case ncclFloat64:
    return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull &&
           (b & 0xfffffffffffffull) != 0;
  default: return 0;
  }
}

static int is_zero_bits(int dt, uint64_t b) {
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  uint64_t mag = es == 8 ? b << 1 : b & ((1ull << (8 * es - 1)) - 1);
  return ref_dtype_is_float((ncclDataType_t)dt) && mag == 0;
}

/* Random bits of dt; for min/max no NaN and no zero (NaN propagation and
 * the sign of min(+0, -0) are left to the platform's libm). */
static uint64_t random_elem(int dt, int op) {
  size_t es = ref_dtype_size((ncclDataType_t)dt);
  for (;;) {
    uint64_t b = rng();
    if (es < 8) b &= (1ull << (8 * es)) - 1;
    if ((op == ncclMax || op == ncclMin) && (is_nan_bits(dt, b) || is_zero_bits(dt, b)))
      continue;
    return b;
  }
}

/* Element-wise equality, any NaN matching any NaN for fp32/fp64 (their
 * payloads are the platform's). */
static size_t count_mismatch(int dt, const void *got, const void *want, size_t n,
                             size_t *first) {
  size_t es = ref_dtype_size((ncclDataType_t)dt), bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t g = 0, e = 0;
    memcpy(&g, (const char *)got + i * es, es);
    memcpy(&e, (const char *)want + i * es, es);
    if (g == e) continue;
    if ((dt == ncclFloat32 || dt == ncclFloat64) && is_nan_bits(dt, g) &&
        is_nan_bits(dt, e))
      continue;
    if (bad++ == 0) *first = i;
  }
  return bad;
}

/* One rank of a 3-rank plan (so the average divides by 3) reducing its
 * input into its output: Simple as one REDUCE, LL through a packet round
 * trip in its own scratch. The other ranks have no ops. */
static brd_ir_plan_t *bits_plan(int ll) {
  brd_plan_shape_t shape = {
      .nranks = 3, .nblocks = 1, .nchunks = 1, .nslots = ll ? 1u : 0u,
      .slot_div = 1, .nsems = 0, .seq_per_iter = 1,
      .proto = (uint8_t)(ll ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE),
      .algo = BRD_IR_ALGO_COPY, .coll = BRD_IR_COLL_ALLREDUCE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, 0);
  brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1, 0);
  brd_plan_ref_t srcs[2] = {ll ? slot : in, out};
  if (ll)
    assert_int_equal(brd_algos_move(b, 0, 0, BRD_IR_OP_PKT_PUT, 0, 0, 1, 0, 1, &in,
                                    1, &slot), ncclSuccess);
  assert_int_equal(brd_algos_move(b, 0, 0, ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE,
                                  BRD_IR_F_POSTOP, 0, 0, 1, 2, srcs, 1, &out),
                   ncclSuccess);
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  return plan;
}

static void test_reduce_bits(void **state) {
  (void)state;
  NEED_GPU();
  const size_t count = 4099, bytes = count * 8 + 64;
  unsigned char *h_in = malloc(bytes), *h_out = malloc(bytes), *got = malloc(bytes);
  unsigned char *want = malloc(bytes), *tmp = malloc(bytes);
  assert_true(h_in && h_out && got && want && tmp);
  char *d_in, *d_out, *d_scratch, *d_scalar;
  CU(cudaMalloc((void **)&d_in, bytes));
  CU(cudaMalloc((void **)&d_out, bytes));
  CU(cudaMalloc((void **)&d_scalar, 8));
  brd_exec_cuda_status_t *st;
  assert_int_equal(brd_exec_cuda_status_create(NULL, &st), ncclSuccess);
  uint64_t cursor = 0;
  int bad_cases = 0;
  for (int ll = 0; ll < 2; ll++) {
    brd_ir_plan_t *plan = bits_plan(ll);
    brd_exec_cuda_plan_t *cplan;
    assert_int_equal(brd_exec_cuda_plan_create(plan, &cplan), ncclSuccess);
    /* Small scratch: the 4099 elements take several loop iterations. */
    size_t scratch_bytes = ll ? 2 * 4096 : 0;
    d_scratch = NULL;
    if (ll) {
      CU(cudaMalloc((void **)&d_scratch, scratch_bytes));
      CU(cudaMemset(d_scratch, 0, scratch_bytes));
      device_idle();
    }
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      size_t es = ref_dtype_size((ncclDataType_t)dt);
      for (int op = 0; op < NOPS; op++) {
        for (size_t off = 0; off < 2; off++) {
          for (size_t i = 0; i < count; i++) {
            uint64_t x = random_elem(dt, op), y = random_elem(dt, op);
            memcpy(h_in + (off + i) * es, &x, es);
            memcpy(h_out + (off + i) * es, &y, es);
          }
          uint64_t scalar = random_elem(dt, ncclMax); /* finite, non-zero */
          int redop = op == OP_PREMUL ? BRD_REDOP_PREMULSUM : op;
          brd_reduce_op_t rop;
          assert_int_equal(brd_reduce_op_init(dt, redop, 3, &scalar, &rop), ncclSuccess);
          /* The reference, with the host executor's pre/post-op rules:
           * only INPUT sources get the pre-op. */
          const void *srcs[2];
          if (ll) {
            srcs[0] = h_in + off * es;
            brd_reduce_host_apply(&rop, tmp, srcs, 1, 1u, 0, count);
            srcs[0] = tmp;
            srcs[1] = h_out + off * es;
            brd_reduce_host_apply(&rop, want, srcs, 2, 0u, 1, count);
          } else {
            srcs[0] = h_in + off * es;
            srcs[1] = h_out + off * es;
            brd_reduce_host_apply(&rop, want, srcs, 2, 1u, 1, count);
          }
          CU(cudaMemcpy(d_in, h_in, (off + count) * es, cudaMemcpyHostToDevice));
          CU(cudaMemcpy(d_out, h_out, (off + count) * es, cudaMemcpyHostToDevice));
          /* Misaligned PreMulSum runs read the scalar on the device, as
           * ncclScalarDevice does. */
          int dev_scalar = op == OP_PREMUL && off == 1;
          if (dev_scalar) CU(cudaMemcpy(d_scalar, &scalar, es, cudaMemcpyHostToDevice));
          device_idle();
          brd_plan_layout_t l;
          assert_int_equal(brd_plan_layout_init(plan, count, dt, scratch_bytes, &l),
                           ncclSuccess);
          brd_exec_cuda_args_t a;
          memset(&a, 0, sizeof(a));
          a.plan = cplan;
          a.rank = 0;
          a.input = d_in + off * es;
          a.output = d_out + off * es;
          a.scratch = d_scratch;
          a.scratch_bytes = scratch_bytes;
          a.count = count;
          a.dtype = dt;
          a.redop = redop;
          a.scalar = dev_scalar ? NULL : &scalar;
          a.scalar_dev = dev_scalar ? d_scalar : NULL;
          a.epoch = brd_plan_epoch_reserve(&cursor, brd_plan_epoch_span(plan, &l));
          a.phase = (uint32_t)(cursor & 1);
          a.status = st;
          a.timeout_s = 30;
          assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclSuccess);
          CU(cudaStreamSynchronize(streams[0]));
          assert_int_equal(brd_exec_cuda_poll(st, NULL), ncclSuccess);
          CU(cudaMemcpy(got, d_out + off * es, count * es, cudaMemcpyDeviceToHost));
          size_t first = 0, bad = count_mismatch(dt, got, want, count, &first);
          if (bad > 0 && bad_cases++ < 10) {
            uint64_t g = 0, e = 0;
            memcpy(&g, got + first * es, es);
            memcpy(&e, want + first * es, es);
            print_error("%s %s %s offset %zu: %zu of %zu elements differ; first "
                        "%zu: device 0x%llx, host 0x%llx\n", ll ? "LL" : "Simple",
                        ref_dtype_name((ncclDataType_t)dt),
                        ref_op_name((ncclRedOp_t)op), off, bad, count, first,
                        (unsigned long long)g, (unsigned long long)e);
          }
        }
      }
    }
    cudaFree(d_scratch);
    brd_exec_cuda_plan_destroy(cplan);
    brd_plan_destroy(plan);
  }
  brd_exec_cuda_status_destroy(st);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_scalar);
  free(h_in);
  free(h_out);
  free(got);
  free(want);
  free(tmp);
  assert_int_equal(bad_cases, 0);
}

/* ---- failures: hang report, abort, reset -------------------------------- */

/* A rank whose peer never launches reports the wait it is stuck in. */
static void test_hang_report(void **state) {
  (void)state;
  NEED_GPU();
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 0, BRD_IR_PROTO_SIMPLE, 2, 1, 4096, 0, 0);
  upload_inputs(w, 64, ncclFloat32, ncclSum, 0);
  double t0 = now_s();
  uint64_t epoch = world_launch(w, 64, ncclFloat32, ncclSum, NULL, 0, 0, 0.5, 1,
                                ncclRemoteError);
  double took = now_s() - t0;
  assert_true(took >= 0.4 && took < 10.0);
  brd_exec_cuda_hang_t hang;
  memset(&hang, 0xff, sizeof(hang));
  assert_int_equal(brd_exec_cuda_poll(w->st[0], &hang), ncclRemoteError);
  assert_int_equal(hang.rank, 0);
  assert_int_equal(hang.block, 0);
  assert_int_equal(hang.what, BRD_EXEC_CUDA_WAIT_SEM);
  assert_int_equal(hang.peer, 1);
  assert_int_equal(hang.iter, 0);
  /* Ring step 1 waits for the predecessor's first transfer: data semaphore
   * 0 at epoch + 1, still 0; the op after step 0's credit wait, put and
   * signal (the host executor's test names the same op). */
  assert_int_equal(hang.index, 0);
  assert_int_equal(hang.expected, epoch + 1);
  assert_int_equal(hang.seen, 0);
  assert_int_equal(hang.op, 3);
  /* The launch's own epoch, so ranks' reports can be compared. */
  assert_int_equal(hang.epoch, epoch);
  assert_true(hang.phase <= 1);

  /* Until reset, a launch on the failed status leaves at once. */
  t0 = now_s();
  world_launch(w, 64, ncclFloat32, ncclSum, NULL, 0, 0, 30.0, 1, ncclRemoteError);
  assert_true(now_s() - t0 < 5.0);

  /* After a reset both ranks run a correct all-reduce again. */
  for (int r = 0; r < 2; r++) assert_int_equal(brd_exec_cuda_status_reset(w->st[r], streams[r]), ncclSuccess);
  assert_int_equal(brd_exec_cuda_poll(w->st[0], NULL), ncclSuccess);
  failures = 0;
  run_case(w, 1023, ncclFloat32, ncclSum, 0, 0);
  assert_int_equal(failures, 0);
  world_fini(w);
  free(w);
}

/* The abort flag ends LL waits for a rank that never comes, well before
 * the timeout. */
static void test_abort(void **state) {
  (void)state;
  NEED_GPU();
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 2, BRD_IR_PROTO_LL, 3, 2, 4096, 1, 0);
  upload_inputs(w, 64, ncclInt32, ncclSum, 0);
  double t0 = now_s();
  for (int r = 0; r < 2; r++) {
    brd_exec_cuda_args_t a;
    rank_args(w, r, 64, ncclInt32, ncclSum, NULL, 0, 0, 0, 120.0, &a);
    assert_int_equal(brd_exec_cuda_launch(&a, streams[r]), ncclSuccess);
  }
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  /* Still waiting for rank 2. */
  assert_int_equal(cudaStreamQuery(streams[0]), cudaErrorNotReady);
  for (int r = 0; r < 2; r++) brd_exec_cuda_status_abort(w->st[r]);
  for (int r = 0; r < 2; r++) CU(cudaStreamSynchronize(streams[r]));
  assert_true(now_s() - t0 < 10.0);
  for (int r = 0; r < 2; r++) assert_int_equal(brd_exec_cuda_poll(w->st[r], NULL), ncclSystemError);
  /* Rank 2 runs the launch the others gave up on: their packets are in its
   * scratch, so it finishes alone and every rank's device cursor is in step
   * again. After a reset all three run a correct all-reduce. */
  brd_exec_cuda_args_t a2;
  rank_args(w, 2, 64, ncclInt32, ncclSum, NULL, 0, 0, 0, 30.0, &a2);
  assert_int_equal(brd_exec_cuda_launch(&a2, streams[2]), ncclSuccess);
  CU(cudaStreamSynchronize(streams[2]));
  assert_int_equal(brd_exec_cuda_poll(w->st[2], NULL), ncclSuccess);
  for (int r = 0; r < 3; r++) assert_int_equal(brd_exec_cuda_status_reset(w->st[r], streams[r]), ncclSuccess);
  failures = 0;
  run_case(w, 1023, ncclInt32, ncclSum, 0, 0);
  assert_int_equal(failures, 0);
  world_fini(w);
  free(w);
}

/* ---- BARRIER among the blocks of a rank ----------------------------------- */

/* One rank, three blocks: each copies its chunk to scratch, waits at a
 * barrier, adds its neighbour's scratch chunk to its own input, and waits
 * again before the next iteration reuses the slots. Without the barriers a
 * block would read a slot its neighbour has not written (or has already
 * overwritten). Run twice: the barrier state persists across launches. */
static void test_barrier(void **state) {
  (void)state;
  NEED_GPU();
  const int nb = 3;
  brd_plan_shape_t shape = {
      .nranks = 1, .nblocks = nb, .nchunks = (uint32_t)nb, .nslots = (uint32_t)nb,
      .slot_div = 1, .nsems = 0, .seq_per_iter = 1, .proto = BRD_IR_PROTO_SIMPLE,
      .algo = BRD_IR_ALGO_COPY, .coll = BRD_IR_COLL_ALLREDUCE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  for (int blk = 0; blk < nb; blk++) {
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, (uint32_t)blk);
    brd_plan_ref_t mine = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (uint32_t)blk);
    brd_plan_ref_t next = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (uint32_t)((blk + 1) % nb));
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (uint32_t)blk);
    brd_plan_ref_t srcs[2] = {next, in};
    assert_int_equal(brd_algos_move(b, 0, blk, BRD_IR_OP_COPY, 0, (uint32_t)blk, 0, 0,
                                    1, &in, 1, &mine), ncclSuccess);
    assert_int_equal(brd_plan_op_barrier(b, 0, blk), ncclSuccess);
    assert_int_equal(brd_algos_move(b, 0, blk, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP,
                                    (uint32_t)blk, 0, 0, 2, srcs, 1, &out), ncclSuccess);
    assert_int_equal(brd_plan_op_barrier(b, 0, blk), ncclSuccess);
  }
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  brd_exec_cuda_plan_t *cplan;
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cplan), ncclSuccess);
  brd_exec_cuda_status_t *st;
  assert_int_equal(brd_exec_cuda_status_create(NULL, &st), ncclSuccess);

  /* 1 KiB slots: 256 floats per chunk, 768 per window, 5 full windows. */
  const size_t scratch_bytes = 2 * (size_t)nb * 1024, chunk = 256, count = 5 * 3 * 256;
  float *h_in = malloc(count * sizeof(float)), *h_out = malloc(count * sizeof(float));
  assert_true(h_in && h_out);
  for (size_t i = 0; i < count; i++) h_in[i] = (float)(i % 1000) + 1.0f;
  char *d_in, *d_out, *d_scratch;
  CU(cudaMalloc((void **)&d_in, count * sizeof(float)));
  CU(cudaMalloc((void **)&d_out, count * sizeof(float)));
  CU(cudaMalloc((void **)&d_scratch, scratch_bytes));
  CU(cudaMemset(d_scratch, 0, scratch_bytes));
  CU(cudaMemcpy(d_in, h_in, count * sizeof(float), cudaMemcpyHostToDevice));
  uint64_t cursor = 0;
  for (int launch = 0; launch < 2; launch++) {
    CU(cudaMemset(d_out, 0xa5, count * sizeof(float)));
    device_idle();
    brd_plan_layout_t l;
    assert_int_equal(brd_plan_layout_init(plan, count, ncclFloat32, scratch_bytes, &l),
                     ncclSuccess);
    assert_int_equal(l.niter, 5);
    brd_exec_cuda_args_t a;
    memset(&a, 0, sizeof(a));
    a.plan = cplan;
    a.input = d_in;
    a.output = d_out;
    a.scratch = d_scratch;
    a.scratch_bytes = scratch_bytes;
    a.count = count;
    a.dtype = ncclFloat32;
    a.redop = ncclSum;
    a.epoch = brd_plan_epoch_reserve(&cursor, brd_plan_epoch_span(plan, &l));
    a.phase = (uint32_t)launch & 1u;
    a.status = st;
    a.timeout_s = 30;
    assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclSuccess);
    CU(cudaStreamSynchronize(streams[0]));
    assert_int_equal(brd_exec_cuda_poll(st, NULL), ncclSuccess);
    CU(cudaMemcpy(h_out, d_out, count * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      size_t win = i / (3 * chunk), c = (i / chunk) % 3, k = i % chunk;
      size_t nb_i = win * 3 * chunk + ((c + 1) % 3) * chunk + k;
      float want = h_in[nb_i] + h_in[i];
      if (h_out[i] != want && bad++ < 5)
        print_error("launch %d element %zu is %g, expected %g\n", launch, i,
                    (double)h_out[i], (double)want);
    }
    assert_int_equal(bad, 0);
  }
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_scratch);
  free(h_in);
  free(h_out);
  brd_exec_cuda_status_destroy(st);
  brd_exec_cuda_plan_destroy(cplan);
  brd_plan_destroy(plan);
}

/* ---- CUDA graphs ----------------------------------------------------------- */

/* Each rank captures one in-place int32 sum into its own graph; 100
 * replays multiply the sum by n^99 (mod 2^32), which only holds if every
 * replay ran, in order, on fresh sequence numbers. */
static void test_graph_replay(void **state) {
  (void)state;
  NEED_GPU();
  static const int cfg[2][3] = {{0, BRD_IR_PROTO_SIMPLE, 2}, {2, BRD_IR_PROTO_LL, 1}};
  const size_t count = 100003;
  const int n = 3, replays = 100;
  for (int k = 0; k < 2; k++) {
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    world_init(w, cfg[k][0], cfg[k][1], n, cfg[k][2], count, 1, 0);
    upload_inputs(w, count, ncclInt32, ncclSum, 0);
    uint32_t mult = 1;
    for (int i = 1; i < replays; i++) mult *= (uint32_t)n;
    uint32_t *want = malloc(count * sizeof(*want));
    assert_non_null(want);
    for (size_t i = 0; i < count; i++) {
      uint32_t s = 0;
      for (int r = 0; r < n; r++)
        s += (uint32_t)(int32_t)ref_input_value(ncclInt32, ncclSum, r, i);
      want[i] = s * mult;
    }
    cudaGraph_t graph[MAXR];
    cudaGraphExec_t exec[MAXR];
    for (int r = 0; r < n; r++) {
      brd_exec_cuda_args_t a;
      rank_args(w, r, count, ncclInt32, ncclSum, NULL, 1, 0, 0, 30.0, &a);
      CU(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      ncclResult_t res = brd_exec_cuda_launch(&a, streams[r]);
      CU(cudaStreamEndCapture(streams[r], &graph[r]));
      assert_int_equal(res, ncclSuccess);
      CU(cudaGraphInstantiate(&exec[r], graph[r], 0));
    }
    for (int it = 0; it < replays; it++)
      for (int r = 0; r < n; r++) CU(cudaGraphLaunch(exec[r], streams[r]));
    for (int r = 0; r < n; r++) CU(cudaStreamSynchronize(streams[r]));
    for (int r = 0; r < n; r++) assert_int_equal(brd_exec_cuda_poll(w->st[r], NULL), ncclSuccess);
    CU(cudaMemcpy(w->h_out, w->d_in, (size_t)n * w->buf_bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < n; r++) {
      const uint32_t *got = (const uint32_t *)(w->h_out + (size_t)r * w->buf_bytes + PAD);
      for (size_t i = 0; i < count; i++) {
        if (got[i] != want[i] && bad++ < 5)
          print_error("%s graph: rank %d element %zu is %u, expected %u\n",
                      gen_names[w->algo], r, i, got[i], want[i]);
      }
    }
    assert_int_equal(bad, 0);
    for (int r = 0; r < n; r++) {
      CU(cudaGraphExecDestroy(exec[r]));
      CU(cudaGraphDestroy(graph[r]));
    }
    free(want);
    world_fini(w);
    free(w);
  }
}

/* Device epochs with staging halves, as the CUDA runtime runs collectives:
 * each rank's plan writes the half of its phase (out_half_bytes, also in
 * the peers' channel pointers) and brd_exec_cuda_copyout, reading the same
 * phase, copies it to the user's buffer; both captured in one graph per
 * rank. Each replay gets inputs scaled by its number (uploaded between
 * replays), so every replay's output differs, and the halves must hold
 * this replay's result (in the half of its parity) and the previous one's. */
static void test_staged_graph(void **state) {
  (void)state;
  NEED_GPU();
  const size_t count = 40009;
  const int n = 3, replays = 6;
  for (int algo = 0; algo < 4; algo++) {
    world_t *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    world_init(w, algo, algo == 2 ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE, n, 2, count, 1, 0);
    size_t half = (count * 4 + 255) & ~(size_t)255;
    char *stage[MAXR];
    for (int r = 0; r < n; r++) {
      CU(cudaMalloc((void **)&stage[r], 2 * half));
      CU(cudaMemset(stage[r], 0, 2 * half));
    }
    cudaGraph_t graph[MAXR];
    cudaGraphExec_t exec[MAXR];
    for (int r = 0; r < n; r++) {
      brd_exec_cuda_args_t a;
      rank_args(w, r, count, ncclInt32, ncclSum, NULL, 0, 0, 0, 30.0, &a);
      uint32_t nch = brd_ir_plan_rank(w->plan, r)->nchans;
      for (uint32_t c = 0; c < nch; c++)
        w->chans[r][c].peer_output = stage[brd_ir_plan_chan(w->plan, r, (int)c)->peer];
      a.chans = w->chans[r];
      a.output = stage[r];
      a.out_half_bytes = half;
      brd_exec_cuda_copyout_t co = {w->st[r], stage[r], half, rank_out(w, r, 0, 0, 4),
                                    1, count * 4, count * 4, count * 4};
      CU(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      ncclResult_t res = brd_exec_cuda_launch(&a, streams[r]);
      ncclResult_t res2 = brd_exec_cuda_copyout(&co, streams[r]);
      CU(cudaStreamEndCapture(streams[r], &graph[r]));
      assert_int_equal(res, ncclSuccess);
      assert_int_equal(res2, ncclSuccess);
      CU(cudaGraphInstantiate(&exec[r], graph[r], 0));
    }
    uint32_t *in = malloc(count * 4), *want = malloc(count * 4), *prev = calloc(count, 4);
    uint32_t *got = malloc(2 * half);
    assert_true(in != NULL && want != NULL && prev != NULL && got != NULL);
    for (int it = 1; it <= replays; it++) {
      for (size_t i = 0; i < count; i++) want[i] = 0;
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < count; i++) {
          in[i] = (uint32_t)it * (uint32_t)(int32_t)ref_input_value(ncclInt32, ncclSum, r, i);
          want[i] += in[i];
        }
        CU(cudaMemcpy(rank_in(w, r, 0, 4), in, count * 4, cudaMemcpyHostToDevice));
      }
      device_idle();
      for (int r = 0; r < n; r++) CU(cudaGraphLaunch(exec[r], streams[r]));
      for (int r = 0; r < n; r++) CU(cudaStreamSynchronize(streams[r]));
      for (int r = 0; r < n; r++) {
        assert_int_equal(brd_exec_cuda_poll(w->st[r], NULL), ncclSuccess);
        CU(cudaMemcpy(got, rank_out(w, r, 0, 0, 4), count * 4, cudaMemcpyDeviceToHost));
        assert_memory_equal(got, want, count * 4);
        /* Replay it ran in phase (it - 1) & 1. */
        CU(cudaMemcpy(got, stage[r], 2 * half, cudaMemcpyDeviceToHost));
        int h = (it - 1) & 1;
        assert_memory_equal((char *)got + (size_t)h * half, want, count * 4);
        if (it > 1) assert_memory_equal((char *)got + (size_t)(1 - h) * half, prev, count * 4);
      }
      memcpy(prev, want, count * 4);
    }
    for (int r = 0; r < n; r++) {
      CU(cudaGraphExecDestroy(exec[r]));
      CU(cudaGraphDestroy(graph[r]));
      CU(cudaFree(stage[r]));
    }
    free(in);
    free(want);
    free(prev);
    free(got);
    world_fini(w);
    free(w);
  }
}

/* ---- argument and plan checks ---------------------------------------------- */

static void test_bad_args(void **state) {
  (void)state;
  NEED_GPU();
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  world_init(w, 0, BRD_IR_PROTO_SIMPLE, 2, 1, 4096, 0, 0);
  brd_exec_cuda_args_t a;
  rank_args(w, 0, 16, ncclFloat32, ncclSum, NULL, 0, 0, 0, 30.0, &a);
  a.rank = 2;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.rank = 0;
  a.dtype = ncclNumTypes;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.dtype = ncclFloat32;
  a.redop = 7;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.redop = BRD_REDOP_PREMULSUM; /* without a scalar */
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.redop = ncclSum;
  a.input = NULL;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.count = 0; /* count 0 needs no buffers and launches nothing */
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclSuccess);
  a.count = 16;
  a.input = rank_in(w, 0, 0, 4);
  a.scratch = w->scratch[0] + 8;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.scratch = w->scratch[0];
  a.scratch_bytes = 32; /* 8-byte slots: too small for the plan */
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInternalError);
  a.scratch_bytes = w->scratch_bytes;
  a.chans = NULL;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  a.chans = w->chans[0];
  a.epoch = 0xfffffffeull; /* the launch would cross 2^32 */
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInternalError);
  a.epoch = 0;
  a.status = NULL;
  assert_int_equal(brd_exec_cuda_launch(&a, streams[0]), ncclInvalidArgument);
  CU(cudaStreamSynchronize(streams[0]));
  world_fini(w);
  free(w);

  /* Plans: an op this executor does not run, and more blocks than SMs. */
  brd_plan_shape_t shape = {
      .nranks = 1, .nblocks = 1, .nchunks = 1, .nslots = 0, .slot_div = 1,
      .nsems = 0, .seq_per_iter = 1, .proto = BRD_IR_PROTO_SIMPLE,
      .algo = BRD_IR_ALGO_COPY, .coll = BRD_IR_COLL_ALLREDUCE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  brd_ir_op_t op;
  memset(&op, 0, sizeof(op));
  op.code = BRD_IR_OP_FLUSH;
  assert_int_equal(brd_plan_op_add(b, 0, 0, &op), ncclSuccess);
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_builder_finish(b, &plan), ncclSuccess);
  brd_plan_builder_destroy(b);
  brd_exec_cuda_plan_t *cplan = NULL;
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cplan), ncclInternalError);
  assert_null(cplan);
  plan->magic ^= 1;
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cplan), ncclInternalError);
  brd_plan_destroy(plan);

  int dev = 0, nsm = 0;
  CU(cudaGetDevice(&dev));
  CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  brd_algos_args_t args = {2, NULL, nsm + 1, BRD_IR_PROTO_SIMPLE};
  assert_int_equal(brd_algos_ring_allreduce(&args, &plan), ncclSuccess);
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cplan), ncclInvalidArgument);
  brd_plan_destroy(plan);
}

/* A host function that holds its stream until upload_gate is set, for at
 * most 5 s (then upload_gate_timed_out). */
static volatile int upload_gate, upload_gate_timed_out;
static void CUDART_CB hold_stream(void *arg) {
  (void)arg;
  double t0 = now_s();
  while (!__atomic_load_n(&upload_gate, __ATOMIC_ACQUIRE)) {
    if (now_s() - t0 > 5.0) {
      upload_gate_timed_out = 1;
      return;
    }
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
}

/* brd_exec_cuda_plan_create_on queues the upload on the given stream and
 * returns while that stream is still held (the host does not wait for it,
 * nor for any other stream); once the stream moves and
 * brd_exec_cuda_plan_ready returns, the device copy runs a ring all-reduce
 * to the reference result (fresh device memory is poisoned in the
 * simulator, so a missing copy fails it). */
static void test_plan_upload_on_stream(void **state) {
  (void)state;
  NEED_GPU();
  world_t *w = calloc(1, sizeof(*w));
  assert_non_null(w);
  failures = 0;
  world_init(w, 0, BRD_IR_PROTO_SIMPLE, 2, 1, 4096, 1, 0);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  upload_gate = 0;
  upload_gate_timed_out = 0;
  CU(cudaLaunchHostFunc(s, hold_stream, NULL));
  brd_exec_cuda_plan_t *cp = NULL;
  assert_int_equal(brd_exec_cuda_plan_create_on(w->plan, s, 0, &cp), ncclSuccess);
  __atomic_store_n(&upload_gate, 1, __ATOMIC_RELEASE);
  assert_int_equal(brd_exec_cuda_plan_ready(cp), ncclSuccess);
  assert_int_equal(upload_gate_timed_out, 0);
  assert_int_equal(brd_exec_cuda_plan_ready(cp), ncclSuccess); /* again: at once */
  brd_exec_cuda_plan_destroy(w->cplan);
  w->cplan = cp;
  run_case(w, 1023, ncclFloat32, ncclSum, 0, 0);
  CU(cudaStreamDestroy(s));
  world_fini(w);
  free(w);
  assert_int_equal(failures, 0);
}

static int group_setup(void **state) {
  (void)state;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    print_message("no CUDA device visible (cudaGetDeviceCount: %s): every test "
                  "skips\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  for (int r = 0; r < MAXR; r++) {
    if (cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) != cudaSuccess)
      return -1;
  }
  expect_buf = malloc(BIG_COUNT * 8);
  if (expect_buf == NULL) return -1;
  have_gpu = 1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (!have_gpu) return 0;
  for (int r = 0; r < MAXR; r++) cudaStreamDestroy(streams[r]);
  free(expect_buf);
  return 0;
}

int main(void) {
  /* Small buffers: many loop iterations per launch, small scratch. */
  setenv("NCCL_BUFFSIZE", "65536", 1);
  setenv("NCCL_LL_BUFFSIZE", "16384", 1);
  brd_param_reload();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_bits),
      cmocka_unit_test(test_ring),
      cmocka_unit_test(test_tree),
      cmocka_unit_test(test_oneshot),
      cmocka_unit_test(test_twoshot),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_sendrecv),
      cmocka_unit_test(test_hang_report),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_barrier),
      cmocka_unit_test(test_graph_replay),
      cmocka_unit_test(test_staged_graph),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_plan_upload_on_stream),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

#else /* !BRAID_CUDA */

static void test_built_without_cuda(void **state) {
  (void)state;
  print_message("SKIP: built without CUDA (CUDA=0): the CUDA executor is not "
                "in this library\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_built_without_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* BRAID_CUDA */
