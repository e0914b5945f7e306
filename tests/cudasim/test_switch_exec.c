/*
 * The CUDA executor's switch channels (NVLS multicast; device/ir.h
 * "Switch channels") on the CUDA simulator's multicast objects: hand-made
 * plans run by 2 and 4 ranks, each rank on its own simulated device, over a
 * real multicast object made through the driver entry points
 * (cuMulticastCreate, AddDevice, BindAddr, cuMemMap of the handle).
 *
 *   - all-reduce: copy in, MC_BARRIER, MC_REDUCE (ld_reduce of slot r into
 *     slot r of every member, and into the local output), MC_BARRIER, copy
 *     out; every datatype multimem reduces (f32, f16, bf16, f64, int32,
 *     uint32, int64, uint64) x sum, and min/max where PTX has them;
 *   - all-gather: MC_STORE of the input into slot r of every member,
 *     MC_BARRIER, copy out, MC_BARRIER;
 *   - reduction by MC_RED: rank 0 stores, the others red into one slot;
 *   - counts 1, 37 (tails of every width) and 5001 (several iterations of
 *     the plan's window), two launches each (both scratch phases), outputs
 *     compared bit for bit with brd_reduce_host_apply over the inputs in
 *     rank order, and the bytes after each output unchanged;
 *   - launches multimem cannot run refused (f32 min, int8 sum), a data op
 *     through a switch channel refused at plan creation, and an
 *     MC_BARRIER whose member never comes reported as a hang naming it.
 *
 * The simulator's flavour `cudasim-dev/` runs exec.cu's own kernels, whose
 * multimem helpers devemu.h emulates over every member's copy; `cudasim/`
 * runs the host executor, and skips (saying so) while that executor
 * rejects switch channels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudasim.h"
#include "device/exec_cuda.h"
#include "device/exec_host.h"
#include "device/redop.h"
#include "plan/plan.h"

#define MAXR 4
#define SW 0 /* the switch channel's index in every rank's table */
#define LOC BRD_IR_CHAN_LOCAL
#define GUARD 64 /* bytes checked unchanged after each output */
#define MAXCOUNT 5001

#define CU(call)                                                              \
  do {                                                                        \
    cudaError_t cu_err_ = (call);                                             \
    if (cu_err_ != cudaSuccess) {                                             \
      print_error("%s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                  cudaGetErrorString(cu_err_));                               \
      fail();                                                                 \
    }                                                                         \
  } while (0)
#define DRV(call) assert_int_equal((int)(call), (int)CUDA_SUCCESS)

/* ---- driver entry points ----------------------------------------------------- */

static struct {
  CUresult (*create)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
  CUresult (*add)(CUmemGenericAllocationHandle, CUdevice);
  CUresult (*bind)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                   unsigned long long);
  CUresult (*unbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*release)(CUmemGenericAllocationHandle);
} drv;

static void drv_load(void) {
  static const char *names[] = {
      "cuMulticastCreate", "cuMulticastAddDevice", "cuMulticastBindAddr",
      "cuMulticastUnbind", "cuMemAddressReserve",  "cuMemAddressFree",
      "cuMemMap",          "cuMemUnmap",           "cuMemSetAccess",
      "cuMemRelease"};
  void **slots[] = {(void **)&drv.create,  (void **)&drv.add,       (void **)&drv.bind,
                    (void **)&drv.unbind,  (void **)&drv.reserve,   (void **)&drv.addr_free,
                    (void **)&drv.map,     (void **)&drv.unmap,     (void **)&drv.set_access,
                    (void **)&drv.release};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    enum cudaDriverEntryPointQueryResult q;
    CU(cudaGetDriverEntryPointByVersion(names[i], slots[i], 12010, cudaEnableDefault, &q));
    assert_int_equal(q, cudaDriverEntryPointSuccess);
  }
}

/* ---- a world: n ranks, one per device, and their multicast window ------------ */

/* Each rank's window is one allocation bound to the multicast object at
 * offset 0: the plan's scratch, then the switch semaphores. */
#define SEMS_BYTES 4096

typedef struct world {
  int n;
  CUmemGenericAllocationHandle mc;
  size_t scratch_bytes;  /* the plans' (both phases) */
  size_t win_bytes;      /* scratch rounded to 4 KiB + SEMS_BYTES */
  char *uc[MAXR];        /* each rank's window (device r) */
  char *va;              /* the multicast mapping of the windows */
  char *in[MAXR], *out[MAXR];
  brd_exec_cuda_status_t *st[MAXR];
  cudaStream_t s[MAXR];
  uint64_t cursor;
  uint32_t phase;
} world_t;

static size_t sems_off(const world_t *w) { return w->win_bytes - SEMS_BYTES; }

static void world_init(world_t *w, int n) {
  if (drv.create == NULL) drv_load();
  memset(w, 0, sizeof(*w));
  w->n = n;
  w->scratch_bytes = 2 * (size_t)8192; /* NCCL_BUFFSIZE, slot_div = nslots */
  w->win_bytes = (w->scratch_bytes + 4095) / 4096 * 4096 + SEMS_BYTES;
  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = (unsigned)n;
  prop.size = w->win_bytes;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  DRV(drv.create(&w->mc, &prop));
  for (int r = 0; r < n; r++) DRV(drv.add(w->mc, r));
  for (int r = 0; r < n; r++) {
    CU(cudaSetDevice(r));
    CU(cudaMalloc((void **)&w->uc[r], w->win_bytes));
    CU(cudaMemset(w->uc[r] + sems_off(w), 0, SEMS_BYTES));
    CU(cudaMalloc((void **)&w->in[r], MAXCOUNT * 8));
    CU(cudaMalloc((void **)&w->out[r], MAXR * MAXCOUNT * 8 + GUARD));
    CU(cudaStreamCreateWithFlags(&w->s[r], cudaStreamNonBlocking));
    assert_int_equal(brd_exec_cuda_status_create(NULL, &w->st[r]), ncclSuccess);
    DRV(drv.bind(w->mc, 0, (CUdeviceptr)(uintptr_t)w->uc[r], w->win_bytes, 0));
  }
  CUdeviceptr va;
  DRV(drv.reserve(&va, w->win_bytes, 0, 0, 0));
  DRV(drv.map(va, w->win_bytes, 0, w->mc, 0));
  CUmemAccessDesc acc[MAXR];
  memset(acc, 0, sizeof(acc));
  for (int r = 0; r < n; r++) {
    acc[r].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[r].location.id = r;
    acc[r].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  DRV(drv.set_access(va, w->win_bytes, acc, (size_t)n));
  w->va = (char *)(uintptr_t)va;
  for (int r = 0; r < n; r++) {
    CU(cudaSetDevice(r));
    CU(cudaDeviceSynchronize());
  }
}

static void world_fini(world_t *w) {
  DRV(drv.unmap((CUdeviceptr)(uintptr_t)w->va, w->win_bytes));
  DRV(drv.addr_free((CUdeviceptr)(uintptr_t)w->va, w->win_bytes));
  for (int r = 0; r < w->n; r++) DRV(drv.unbind(w->mc, r, 0, w->win_bytes));
  DRV(drv.release(w->mc));
  for (int r = 0; r < w->n; r++) {
    CU(cudaSetDevice(r));
    brd_exec_cuda_status_destroy(w->st[r]);
    CU(cudaStreamDestroy(w->s[r]));
    CU(cudaFree(w->uc[r]));
    CU(cudaFree(w->in[r]));
    CU(cudaFree(w->out[r]));
  }
  CU(cudaSetDevice(0));
}

/* ---- plans, written op by op ---------------------------------------------------- */

#define MAXOPS 16

typedef struct plan_src {
  int n;
  uint8_t coll;
  uint32_t nchunks, nslots, seq_per_iter;
  brd_ir_op_t ops[MAXR][MAXOPS];
  int nops[MAXR];
} plan_src_t;

static brd_ir_ref_t ref(uint8_t buf, uint8_t chan, uint16_t index) {
  brd_ir_ref_t r = {buf, chan, index};
  return r;
}

static void add_op(plan_src_t *ps, int rank, uint8_t code, uint16_t chunk, uint16_t nchunks,
                   int32_t k, int nsrc, int ndst, ...) {
  assert_true(ps->nops[rank] < MAXOPS);
  brd_ir_op_t *op = &ps->ops[rank][ps->nops[rank]++];
  memset(op, 0, sizeof(*op));
  op->code = code;
  op->chunk = chunk;
  op->nchunks = nchunks;
  op->k = k;
  op->nsrc = (uint8_t)nsrc;
  op->ndst = (uint8_t)ndst;
  va_list ap;
  va_start(ap, ndst);
  for (int i = 0; i < nsrc + ndst; i++) op->ref[i] = va_arg(ap, brd_ir_ref_t);
  va_end(ap);
}

static void add_barrier(plan_src_t *ps, int rank, int32_t k) {
  add_op(ps, rank, BRD_IR_OP_MC_BARRIER, 0, 1, k, 0, 1, ref(BRD_IR_BUF_SEM, SW, 0));
}

/* One blob: every rank one block and one channel, the switch channel. */
static brd_ir_plan_t *plan_blob(const plan_src_t *ps) {
  int n = ps->n, nops = 0;
  for (int r = 0; r < n; r++) nops += ps->nops[r];
  size_t rank_off = sizeof(brd_ir_plan_t), block_off = rank_off + n * sizeof(brd_ir_rank_t),
         chan_off = block_off + n * sizeof(brd_ir_block_t),
         op_off = chan_off + n * sizeof(brd_ir_chan_t),
         total = op_off + (size_t)nops * sizeof(brd_ir_op_t);
  brd_ir_plan_t *p = calloc(1, total);
  assert_non_null(p);
  p->magic = BRD_IR_MAGIC;
  p->version = BRD_IR_VERSION;
  p->proto = BRD_IR_PROTO_SIMPLE;
  p->algo = BRD_IR_ALGO_NVLS;
  p->total_bytes = (uint32_t)total;
  p->nranks = (uint16_t)n;
  p->nblocks = 1;
  p->nchunks = ps->nchunks;
  p->nslots = ps->nslots;
  p->slot_div = ps->nslots;
  p->nsems = 1;
  p->seq_per_iter = ps->seq_per_iter;
  p->nchans = (uint32_t)n;
  p->nops = (uint32_t)nops;
  p->rank_off = (uint32_t)rank_off;
  p->block_off = (uint32_t)block_off;
  p->chan_off = (uint32_t)chan_off;
  p->op_off = (uint32_t)op_off;
  p->coll = ps->coll;
  brd_ir_rank_t *ranks = (brd_ir_rank_t *)((char *)p + rank_off);
  brd_ir_block_t *blocks = (brd_ir_block_t *)((char *)p + block_off);
  brd_ir_chan_t *chans = (brd_ir_chan_t *)((char *)p + chan_off);
  brd_ir_op_t *ops = (brd_ir_op_t *)((char *)p + op_off);
  int at = 0;
  for (int r = 0; r < n; r++) {
    ranks[r].chan_first = (uint32_t)r;
    ranks[r].nchans = 1;
    chans[r].peer = BRD_IR_SWITCH_PEER;
    chans[r].type = BRD_IR_CHAN_SWITCH;
    blocks[r].op_first = (uint32_t)at;
    blocks[r].nops = (uint32_t)ps->nops[r];
    memcpy(&ops[at], ps->ops[r], (size_t)ps->nops[r] * sizeof(brd_ir_op_t));
    at += ps->nops[r];
  }
  return p;
}

enum { PLAN_ALLREDUCE, PLAN_ALLGATHER, PLAN_RED };
static const char *plan_names[] = {"all-reduce (ld_reduce + st)", "all-gather (st)",
                                   "reduction (red)"};

static brd_ir_plan_t *make_plan(int kind, int n) {
  plan_src_t ps;
  memset(&ps, 0, sizeof(ps));
  ps.n = n;
  if (kind == PLAN_ALLREDUCE) {
    /* Chunk r is reduced by rank r, in slot r of every member. */
    ps.coll = BRD_IR_COLL_ALLREDUCE;
    ps.nchunks = ps.nslots = (uint32_t)n;
    ps.seq_per_iter = 2;
    for (int r = 0; r < n; r++) {
      add_op(&ps, r, BRD_IR_OP_COPY, 0, (uint16_t)n, 0, 1, 1, ref(BRD_IR_BUF_INPUT, LOC, 0),
             ref(BRD_IR_BUF_SCRATCH, LOC, 0));
      add_barrier(&ps, r, 1);
      add_op(&ps, r, BRD_IR_OP_MC_REDUCE, (uint16_t)r, 1, 0, 1, 2,
             ref(BRD_IR_BUF_SCRATCH, SW, (uint16_t)r), ref(BRD_IR_BUF_SCRATCH, SW, (uint16_t)r),
             ref(BRD_IR_BUF_OUTPUT, LOC, (uint16_t)r));
      add_barrier(&ps, r, 2);
      add_op(&ps, r, BRD_IR_OP_COPY, 0, (uint16_t)n, 0, 1, 1,
             ref(BRD_IR_BUF_SCRATCH, LOC, 0), ref(BRD_IR_BUF_OUTPUT, LOC, 0));
    }
  } else if (kind == PLAN_ALLGATHER) {
    ps.coll = BRD_IR_COLL_ALLGATHER;
    ps.nchunks = 1;
    ps.nslots = (uint32_t)n;
    ps.seq_per_iter = 2;
    for (int r = 0; r < n; r++) {
      add_op(&ps, r, BRD_IR_OP_MC_STORE, 0, 1, 0, 1, 1, ref(BRD_IR_BUF_INPUT, LOC, 0),
             ref(BRD_IR_BUF_SCRATCH, SW, (uint16_t)r));
      add_barrier(&ps, r, 1);
      for (int q = 0; q < n; q++)
        add_op(&ps, r, BRD_IR_OP_COPY, 0, 1, 0, 1, 1, ref(BRD_IR_BUF_SCRATCH, LOC, (uint16_t)q),
               ref(BRD_IR_BUF_OUTPUT, LOC, (uint16_t)q));
      add_barrier(&ps, r, 2);
    }
  } else {
    ps.coll = BRD_IR_COLL_ALLREDUCE;
    ps.nchunks = ps.nslots = 1;
    ps.seq_per_iter = 3;
    for (int r = 0; r < n; r++) {
      if (r == 0)
        add_op(&ps, r, BRD_IR_OP_MC_STORE, 0, 1, 0, 1, 1, ref(BRD_IR_BUF_INPUT, LOC, 0),
               ref(BRD_IR_BUF_SCRATCH, SW, 0));
      add_barrier(&ps, r, 1);
      if (r > 0)
        add_op(&ps, r, BRD_IR_OP_MC_RED, 0, 1, 0, 1, 1, ref(BRD_IR_BUF_INPUT, LOC, 0),
               ref(BRD_IR_BUF_SCRATCH, SW, 0));
      add_barrier(&ps, r, 2);
      add_op(&ps, r, BRD_IR_OP_COPY, 0, 1, 0, 1, 1, ref(BRD_IR_BUF_SCRATCH, LOC, 0),
             ref(BRD_IR_BUF_OUTPUT, LOC, 0));
      add_barrier(&ps, r, 3);
    }
  }
  return plan_blob(&ps);
}

/* ---- inputs and the reference ---------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Element i of an input: any value of the type for ld_reduce (member order
 * is rank order, as the reference's); for red, whose ranks combine in any
 * order, values whose sums are exact in every order (small multiples of
 * 1/4 for floats). Never all equal, never zero-filled. */
static void fill(int dt, int exact, void *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t x = rng();
    double f = exact ? (double)((int)(x % 64) - 31) * 0.25
                     : (double)(int64_t)(x % 2000001 - 1000000) * 1e-5;
    switch (dt) {
    case ncclInt32: case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)x; break;
    case ncclInt64: case ncclUint64: ((uint64_t *)buf)[i] = x; break;
    case ncclFloat32: ((float *)buf)[i] = (float)f; break;
    case ncclFloat64: ((double *)buf)[i] = f; break;
    case ncclFloat16: ((uint16_t *)buf)[i] = brd_reduce_f16_encode((float)f); break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = brd_reduce_bf16_encode((float)f); break;
    default: ((uint8_t *)buf)[i] = (uint8_t)x; break;
    }
  }
}

static const int dtypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat64,
                             ncclInt32,   ncclUint32,  ncclInt64,    ncclUint64};
static const char *dtype_names[] = {"f32", "f16", "bf16", "f64", "i32", "u32", "i64", "u64"};
static const int redops[] = {ncclSum, ncclMin, ncclMax};
static const char *redop_names[] = {"sum", "min", "max"};
static const size_t counts[] = {1, 37, MAXCOUNT};

static int failures;

/* The datatypes and reductions multimem has (PTX ISA, sm_90): sum on all
 * eight, min and max on f16, bf16 and the integers. */
static int mc_legal(int dt, int redop) {
  if (redop == ncclSum) return 1;
  return (redop == ncclMin || redop == ncclMax) && dt != ncclFloat32 && dt != ncclFloat64;
}

/* Runs one launch of plan on every rank (rank `absent` launches nothing;
 * -1: all do) and returns each rank's poll result. */
static void launch_all(world_t *w, const brd_exec_cuda_plan_t *cp, const brd_ir_plan_t *plan,
                       size_t count, int dt, int redop, int absent, double timeout,
                       ncclResult_t *res) {
  brd_plan_layout_t l;
  assert_int_equal(brd_plan_layout_init(plan, count, dt, w->scratch_bytes, &l), ncclSuccess);
  uint64_t epoch = brd_plan_epoch_reserve(&w->cursor, brd_plan_epoch_span(plan, &l));
  for (int r = 0; r < w->n; r++) {
    if (r == absent) continue;
    brd_exec_cuda_chan_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.peer_scratch = w->va;
    ch.peer_sems = (uint64_t *)(w->va + sems_off(w));
    ch.sems = (uint64_t *)(w->uc[r] + sems_off(w));
    brd_exec_cuda_args_t a;
    memset(&a, 0, sizeof(a));
    a.plan = cp;
    a.rank = r;
    a.input = w->in[r];
    a.output = w->out[r];
    a.scratch = w->uc[r];
    a.scratch_bytes = w->scratch_bytes;
    a.chans = &ch;
    a.count = count;
    a.dtype = dt;
    a.redop = redop;
    a.epoch = epoch;
    a.phase = w->phase;
    a.status = w->st[r];
    a.timeout_s = timeout;
    CU(cudaSetDevice(r));
    assert_int_equal(brd_exec_cuda_launch(&a, w->s[r]), ncclSuccess);
  }
  w->phase ^= 1;
  for (int r = 0; r < w->n; r++) {
    if (r == absent) continue;
    CU(cudaSetDevice(r));
    CU(cudaStreamSynchronize(w->s[r]));
    res[r] = brd_exec_cuda_poll(w->st[r], NULL);
  }
  CU(cudaSetDevice(0));
}

/* One (plan, datatype, op, count) case: two launches, each checked. */
static void run_case(world_t *w, int kind, const brd_exec_cuda_plan_t *cp,
                     const brd_ir_plan_t *plan, int di, int oi, size_t count) {
  int dt = dtypes[di], n = w->n;
  size_t es = brd_reduce_dtype_size(dt);
  size_t out_elems = kind == PLAN_ALLGATHER ? (size_t)n * count : count;
  size_t out_bytes = out_elems * es;
  static unsigned char in[MAXR][MAXCOUNT * 8], got[MAXR * MAXCOUNT * 8 + GUARD],
      want[MAXR * MAXCOUNT * 8];
  for (int launch = 0; launch < 2; launch++) {
    for (int r = 0; r < n; r++) {
      fill(dt, kind == PLAN_RED, in[r], count);
      CU(cudaMemcpy(w->in[r], in[r], count * es, cudaMemcpyHostToDevice));
      CU(cudaMemset(w->out[r], 0xd5, out_bytes + GUARD));
    }
    /* The memsets went on the legacy stream, which the ranks' streams do
     * not wait for. */
    CU(cudaDeviceSynchronize());
    if (kind == PLAN_ALLGATHER) {
      for (int q = 0; q < n; q++) memcpy(want + (size_t)q * count * es, in[q], count * es);
    } else {
      brd_reduce_op_t op;
      assert_int_equal(brd_reduce_op_init(dt, redops[oi], n, NULL, &op), ncclSuccess);
      const void *srcs[MAXR];
      for (int r = 0; r < n; r++) srcs[r] = in[r];
      brd_reduce_host_apply(&op, want, srcs, n, 0, 0, count);
    }
    ncclResult_t res[MAXR];
    launch_all(w, cp, plan, count, dt, redops[oi], -1, 0, res);
    for (int r = 0; r < n; r++) {
      assert_int_equal(res[r], ncclSuccess);
      CU(cudaMemcpy(got, w->out[r], out_bytes + GUARD, cudaMemcpyDeviceToHost));
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < out_elems; i++)
        if (memcmp(got + i * es, want + i * es, es) != 0 && bad++ == 0) first = i;
      size_t spill = 0;
      for (size_t b = 0; b < GUARD; b++) spill += got[out_bytes + b] != 0xd5;
      if (bad != 0 || spill != 0) {
        if (failures++ < 10)
          print_error("%s, %d ranks, %s %s, count %zu, launch %d: rank %d has %zu wrong "
                      "elements (first %zu) and %zu bytes written past its output\n",
                      plan_names[kind], n, dtype_names[di], redop_names[oi], count, launch, r,
                      bad, first, spill);
      }
    }
  }
}

/* Whether this simulator's executor runs switch channels: exec.cu's does;
 * the host executor under cudasim/ does once a one-rank switch plan
 * (MC_STORE, MC_BARRIER, copy out) moves its data. */
static int executor_runs_switch(void) {
  if (strcmp(brd_cudasim_executor(), "exec.cu") == 0) return 1;
  brd_ir_plan_t *plan = make_plan(PLAN_RED, 1);
  static uint32_t in[8], out[8];
  static char scratch[16384] __attribute__((aligned(16)));
  static uint64_t sems[1];
  for (int i = 0; i < 8; i++) in[i] = 0x1000u + (uint32_t)i;
  void *ms[1] = {scratch};
  _Atomic uint64_t *mss[1] = {(_Atomic uint64_t *)sems};
  brd_exec_chan_t ch;
  memset(&ch, 0, sizeof(ch));
  ch.member_scratch = ms;
  ch.member_ssems = mss;
  brd_exec_args_t a;
  memset(&a, 0, sizeof(a));
  a.plan = plan;
  a.input = in;
  a.output = out;
  a.scratch = scratch;
  a.scratch_bytes = sizeof(scratch);
  a.chans = &ch;
  a.count = 8;
  a.dtype = ncclInt32;
  a.redop = ncclSum;
  a.epoch = 1;
  a.timeout_s = 0.2;
  ncclResult_t r = brd_exec_host_run(&a, NULL);
  free(plan);
  return r == ncclSuccess && memcmp(in, out, sizeof(in)) == 0;
}

#define NEED_SWITCH()                                                                  \
  do {                                                                                 \
    if (!executor_runs_switch()) {                                                     \
      print_message("SKIP: the host executor (cudasim/ flavour) does not run switch "  \
                    "channels yet\n");                                                 \
      skip();                                                                          \
    }                                                                                  \
  } while (0)

static void run_plans(int n) {
  world_t w;
  world_init(&w, n);
  for (int kind = PLAN_ALLREDUCE; kind <= PLAN_RED; kind++) {
    brd_ir_plan_t *plan = make_plan(kind, n);
    assert_true(brd_plan_scratch_bytes(plan) <= w.scratch_bytes);
    brd_exec_cuda_plan_t *cp;
    assert_int_equal(brd_exec_cuda_plan_create(plan, &cp), ncclSuccess);
    for (int di = 0; di < (int)(sizeof(dtypes) / sizeof(dtypes[0])); di++) {
      for (int oi = 0; oi < 3; oi++) {
        /* All-gather reduces nothing: one op. */
        if (kind == PLAN_ALLGATHER && oi > 0) continue;
        if (kind != PLAN_ALLGATHER && !mc_legal(dtypes[di], redops[oi]))
          continue;
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
          run_case(&w, kind, cp, plan, di, oi, counts[ci]);
      }
    }
    brd_exec_cuda_plan_destroy(cp);
    free(plan);
  }
  world_fini(&w);
  assert_int_equal(failures, 0);
}

static void test_switch_2ranks(void **state) {
  (void)state;
  NEED_SWITCH();
  run_plans(2);
}

static void test_switch_4ranks(void **state) {
  (void)state;
  NEED_SWITCH();
  run_plans(4);
}

/* What multimem cannot do is refused before anything runs. */
static void test_switch_refused(void **state) {
  (void)state;
  world_t w;
  world_init(&w, 2);
  brd_ir_plan_t *plan = make_plan(PLAN_ALLREDUCE, 2);
  brd_exec_cuda_plan_t *cp;
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cp), ncclSuccess);
  static const int bad[][2] = {{ncclFloat32, ncclMin}, {ncclFloat64, ncclMax},
                               {ncclInt8, ncclSum},    {ncclFloat32, ncclProd},
                               {ncclInt32, ncclAvg}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    brd_exec_cuda_chan_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.peer_scratch = w.va;
    ch.peer_sems = (uint64_t *)(w.va + sems_off(&w));
    ch.sems = (uint64_t *)(w.uc[0] + sems_off(&w));
    brd_exec_cuda_args_t a;
    memset(&a, 0, sizeof(a));
    a.plan = cp;
    a.input = w.in[0];
    a.output = w.out[0];
    a.scratch = w.uc[0];
    a.scratch_bytes = w.scratch_bytes;
    a.chans = &ch;
    a.count = 7;
    a.dtype = bad[i][0];
    a.redop = bad[i][1];
    a.status = w.st[0];
    assert_int_equal(brd_exec_cuda_launch(&a, w.s[0]), ncclInvalidArgument);
    /* A switch channel without its multicast semaphores. */
    if (i == 0) {
      a.dtype = ncclFloat32;
      a.redop = ncclSum;
      ch.peer_sems = NULL;
      assert_int_equal(brd_exec_cuda_launch(&a, w.s[0]), ncclInvalidArgument);
    }
  }
  brd_exec_cuda_plan_destroy(cp);
  /* A data op through the switch channel, and an MC_STORE to a local
   * slot, are not switch-channel plans. */
  for (int variant = 0; variant < 2; variant++) {
    plan_src_t ps;
    memset(&ps, 0, sizeof(ps));
    ps.n = 2;
    ps.coll = BRD_IR_COLL_ALLREDUCE;
    ps.nchunks = ps.nslots = 1;
    ps.seq_per_iter = 1;
    for (int r = 0; r < 2; r++)
      add_op(&ps, r, variant == 0 ? BRD_IR_OP_COPY : BRD_IR_OP_MC_STORE, 0, 1, 0, 1, 1,
             ref(BRD_IR_BUF_INPUT, LOC, 0),
             ref(BRD_IR_BUF_SCRATCH, variant == 0 ? SW : LOC, 0));
    brd_ir_plan_t *badp = plan_blob(&ps);
    assert_int_equal(brd_exec_cuda_plan_create(badp, &cp), ncclInternalError);
    free(badp);
  }
  free(plan);
  world_fini(&w);
}

/* An MC_BARRIER whose member never launches: the others report a hang on
 * the switch semaphore, naming that member, within the deadline. */
static void test_switch_hang(void **state) {
  (void)state;
  NEED_SWITCH();
  world_t w;
  world_init(&w, 2);
  brd_ir_plan_t *plan = make_plan(PLAN_RED, 2);
  brd_exec_cuda_plan_t *cp;
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cp), ncclSuccess);
  ncclResult_t res[MAXR];
  launch_all(&w, cp, plan, 5, ncclInt32, ncclSum, 1, 0.3, res);
  assert_int_equal(res[0], ncclRemoteError);
  brd_exec_cuda_hang_t h;
  assert_int_equal(brd_exec_cuda_poll(w.st[0], &h), ncclRemoteError);
  assert_int_equal(h.rank, 0);
  assert_int_equal(h.what, BRD_EXEC_WAIT_SWITCH);
  assert_int_equal(h.peer, 1);
  assert_int_equal(h.op, 1); /* rank 0's ops: MC_STORE, then the first barrier */
  brd_exec_cuda_plan_destroy(cp);
  free(plan);
  world_fini(&w);
}

int main(void) {
  setenv("BRAID_CUDASIM_DEVICES", "4", 1);
  setenv("NCCL_BUFFSIZE", "8192", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_switch_2ranks),
      cmocka_unit_test(test_switch_4ranks),
      cmocka_unit_test(test_switch_refused),
      cmocka_unit_test(test_switch_hang),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
