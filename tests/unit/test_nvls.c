/*
 * NVLS (switch channel) plans end to end below the runtime: every NVLS
 * generator's plan passes the verifier for 2..8 ranks and 1..3 blocks in
 * and out of place, and runs on the host executor for every eligible
 * (datatype, op) on 2, 4 and 8 ranks, in and out of place, at counts that
 * take one and several loop iterations, against a CPU reference written
 * here (inputs are small nonzero integers, distinct per rank and element,
 * so every summation order is exact in every type). Also: the eligibility
 * rule against NCCL's table, hand-written plans for MC_STORE, MC_RED
 * (16-bit and 64-bit compare-and-swap under contention) and MC_BARRIER,
 * and the executor's hang report at a switch barrier; allocation failures
 * in the generators and in verifying a switch plan unwind without leaks.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/algos.h"
#include "device/exec_host.h"
#include "device/redop.h"
#include "plan/plan.h"
#include "plan/verify.h"

#include "failalloc.h"

#define MAXR 8

/* ---- the world: n ranks of one plan sharing plain memory --------------- */

typedef struct world {
  int n;
  const brd_ir_plan_t *plan;
  size_t scratch_bytes;
  void *scratch[MAXR];
  _Atomic uint64_t *ssems[MAXR];   /* each rank's switch semaphores */
  void *member_scratch[MAXR];
  _Atomic uint64_t *member_ssems[MAXR];
  brd_exec_chan_t chans[MAXR];     /* each rank's one (switch) channel */
  uint64_t cursor;
  uint32_t phase;
} world_t;

static void world_init(world_t *w, const brd_ir_plan_t *plan, size_t scratch_bytes) {
  memset(w, 0, sizeof(*w));
  w->n = plan->nranks;
  w->plan = plan;
  w->scratch_bytes = scratch_bytes;
  for (int r = 0; r < w->n; r++) {
    w->scratch[r] = calloc(1, scratch_bytes ? scratch_bytes : 1);
    w->ssems[r] = calloc((size_t)plan->nsems * w->n + 1, sizeof(uint64_t));
    assert_non_null(w->scratch[r]);
    assert_non_null(w->ssems[r]);
    w->member_scratch[r] = w->scratch[r];
    w->member_ssems[r] = w->ssems[r];
  }
  for (int r = 0; r < w->n; r++) {
    uint32_t nch = brd_ir_plan_rank(plan, r)->nchans;
    assert_true(nch <= 1);
    if (nch == 1) {
      assert_int_equal(brd_ir_plan_chan(plan, r, 0)->type, BRD_IR_CHAN_SWITCH);
      w->chans[r].member_scratch = w->member_scratch;
      w->chans[r].member_ssems = w->member_ssems;
    }
  }
}

static void world_fini(world_t *w) {
  for (int r = 0; r < w->n; r++) {
    free(w->scratch[r]);
    free(w->ssems[r]);
  }
}

typedef struct rank_run {
  brd_exec_args_t args;
  ncclResult_t res;
  brd_exec_hang_t hang;
} rank_run_t;

static void *rank_main(void *arg) {
  rank_run_t *rr = arg;
  rr->res = brd_exec_host_run(&rr->args, &rr->hang);
  return NULL;
}

/* One launch on ranks [0, active): in[r] / out[r] as given. Each rank's
 * result must be `expect`. */
static void world_launch(world_t *w, int active, void *const *in, void *const *out,
                         size_t count, int dt, int redop, double timeout,
                         ncclResult_t expect, rank_run_t *runs) {
  brd_plan_layout_t layout;
  uint64_t span = 0;
  if (count > 0) {
    assert_int_equal(brd_plan_layout_init(w->plan, count, dt, w->scratch_bytes, &layout),
                     ncclSuccess);
    span = brd_plan_epoch_span(w->plan, &layout);
  }
  uint64_t epoch = brd_plan_epoch_reserve(&w->cursor, span);
  pthread_t th[MAXR];
  for (int r = 0; r < active; r++) {
    brd_exec_args_t *a = &runs[r].args;
    memset(a, 0, sizeof(*a));
    a->plan = w->plan;
    a->rank = r;
    a->input = in[r];
    a->output = out[r];
    a->scratch = w->scratch[r];
    a->scratch_bytes = w->scratch_bytes;
    /* A zero-copy switch plan reaches every member's own buffers. */
    if (w->plan->flags & BRD_IR_PLAN_F_PEER_INPUT) {
      w->chans[r].member_input = (const void *const *)in;
      w->chans[r].member_output = out;
    }
    a->chans = &w->chans[r];
    a->count = count;
    a->dtype = dt;
    a->redop = redop;
    a->epoch = epoch;
    a->phase = w->phase;
    a->timeout_s = timeout;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &runs[r]), 0);
  }
  for (int r = 0; r < active; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < active; r++) assert_int_equal(runs[r].res, expect);
  w->phase ^= 1u;
}

/* ---- values and the reference ---------------------------------------------- */

/* Rank r's input element i of segment s: a small nonzero integer. */
static int value_of(int r, int s, size_t i) {
  int v = (int)((i * 7 + (size_t)r * 13 + (size_t)s * 5) % 15) - 7;
  return v >= 0 ? v + 1 : v;
}

static void store(int dt, void *buf, size_t i, double x) {
  switch (dt) {
  case ncclInt32: ((int32_t *)buf)[i] = (int32_t)x; break;
  case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)(int32_t)x; break;
  case ncclInt64: ((int64_t *)buf)[i] = (int64_t)x; break;
  case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)x; break;
  case ncclFloat16: ((uint16_t *)buf)[i] = brd_reduce_f16_encode((float)x); break;
  case ncclBfloat16: ((uint16_t *)buf)[i] = brd_reduce_bf16_encode((float)x); break;
  case ncclFloat32: ((float *)buf)[i] = (float)x; break;
  case ncclFloat64: ((double *)buf)[i] = x; break;
  default: ((int8_t *)buf)[i] = (int8_t)x; break;
  }
}

/* Element i as a double; unsigned types read back through their signed
 * twins (the reference keeps negative values as two's complement). */
static double load(int dt, const void *buf, size_t i) {
  switch (dt) {
  case ncclInt32: return ((const int32_t *)buf)[i];
  case ncclUint32: return (int32_t)((const uint32_t *)buf)[i];
  case ncclInt64: return (double)((const int64_t *)buf)[i];
  case ncclUint64: return (double)(int64_t)((const uint64_t *)buf)[i];
  case ncclFloat16: return brd_reduce_f16_decode(((const uint16_t *)buf)[i]);
  case ncclBfloat16: return brd_reduce_bf16_decode(((const uint16_t *)buf)[i]);
  case ncclFloat32: return ((const float *)buf)[i];
  case ncclFloat64: return ((const double *)buf)[i];
  default: return ((const int8_t *)buf)[i];
  }
}

/* The reduction of element i of segment s over n ranks. Unsigned min/max
 * compare as unsigned: negative values are the largest. */
static double reference(int dt, int op, int n, int s, size_t i) {
  int uns = dt == ncclUint32 || dt == ncclUint64;
  double acc = value_of(0, s, i);
  for (int r = 1; r < n; r++) {
    double x = value_of(r, s, i);
    if (op == ncclSum) {
      acc += x;
    } else {
      int less = uns ? ((x < 0) != (acc < 0) ? x >= 0 : x < acc) : x < acc;
      if ((op == ncclMin) == less) acc = x;
    }
  }
  return acc;
}

/* ---- generated plans ---------------------------------------------------------- */

typedef struct nvls_gen {
  int coll;
  int code; /* algo code, with BRD_ALGOS_LOWLAT */
  const char *name;
} nvls_gen_t;

static const nvls_gen_t nvls_gens[] = {
    {BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_NVLS, "all-reduce"},
    {BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_NVLS | BRD_ALGOS_LOWLAT, "low-latency all-reduce"},
    {BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_NVLS, "all-gather"},
    {BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_NVLS, "reduce-scatter"},
};
#define NGENS ((int)(sizeof(nvls_gens) / sizeof(nvls_gens[0])))

/* The zero-copy plans (nvls_zc.c): the switch reaches the members' own
 * inputs and outputs. The verifier has no model of switch references to
 * inputs and outputs yet (it knows scratch slots only), so they are
 * checked here by running them. */
static const nvls_gen_t zc_gens[] = {
    {BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_NVLS | BRD_ALGOS_ZEROCOPY, "zero-copy all-reduce"},
    {BRD_IR_COLL_ALLGATHER, BRD_IR_ALGO_NVLS | BRD_ALGOS_ZEROCOPY, "zero-copy all-gather"},
    {BRD_IR_COLL_REDUCESCATTER, BRD_IR_ALGO_NVLS | BRD_ALGOS_ZEROCOPY,
     "zero-copy reduce-scatter"},
};

static brd_ir_plan_t *gen(const nvls_gen_t *g, int n, int nb) {
  brd_algos_args_t a = {n, NULL, nb, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p = NULL;
  assert_int_equal(brd_algos_generate(g->coll, g->code, &a, 0, 0, &p), ncclSuccess);
  return p;
}

static void test_plans_verify(void **state) {
  (void)state;
  int done = 0;
  for (int gi = 0; gi < NGENS; gi++) {
    for (int n = 1; n <= MAXR; n++) {
      for (int nb = 1; nb <= 3; nb++) {
        brd_ir_plan_t *p = gen(&nvls_gens[gi], n, nb);
        assert_int_equal(p->algo, BRD_IR_ALGO_NVLS);
        if (n > 1) {
          /* Every rank has exactly the switch channel. */
          for (int r = 0; r < n; r++) {
            assert_int_equal(brd_ir_plan_rank(p, r)->nchans, 1);
            assert_int_equal(brd_ir_plan_chan(p, r, 0)->type, BRD_IR_CHAN_SWITCH);
            assert_int_equal(brd_ir_plan_chan(p, r, 0)->peer, BRD_IR_SWITCH_PEER);
          }
        }
        for (int ip = 0; ip < 2; ip++) {
          brd_verify_opts_t o = {ip, 3};
          brd_verify_report_t rep;
          ncclResult_t res = brd_plan_verify(p, &o, &rep);
          if (res != ncclSuccess)
            print_error("NVLS %s n=%d nb=%d in_place=%d: %s\n", nvls_gens[gi].name, n, nb,
                        ip, rep.msg);
          assert_int_equal(res, ncclSuccess);
          done++;
        }
        brd_plan_destroy(p);
      }
    }
  }
  print_message("%d NVLS plan verifications passed\n", done);
}

/* The generators refuse more members than one MC_REDUCE combines. */
static void test_too_many_ranks(void **state) {
  (void)state;
  brd_algos_args_t a = {BRD_ALGOS_NVLS_MAX_RANKS + 1, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p = (brd_ir_plan_t *)0x1;
  assert_int_equal(brd_algos_nvls_allreduce(&a, &p), ncclInvalidArgument);
  assert_ptr_equal(p, (brd_ir_plan_t *)0x1);
}

/* NCCL's table (nvls-ib.md 1.3, ncclNvlsSupported), written out here. */
static void test_eligibility(void **state) {
  (void)state;
  static const int dts[] = {ncclInt8,    ncclUint8,    ncclInt32,    ncclUint32,
                            ncclInt64,   ncclUint64,   ncclFloat16,  ncclFloat32,
                            ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  /*                        i8 u8 i32 u32 i64 u64 f16 f32 f64 bf16 e4m3 e5m2 */
  static const int sum[] = {0, 0, 1,  1,  1,  1,  1,  1,  1,  1,   0,   0};
  static const int mnx[] = {0, 0, 1,  1,  1,  1,  1,  0,  0,  1,   0,   0};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
    for (int coll = BRD_IR_COLL_ALLREDUCE; coll <= BRD_IR_COLL_REDUCESCATTER; coll++) {
      int ag = coll == BRD_IR_COLL_ALLGATHER;
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclSum), ag ? 1 : sum[d]);
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclMin), ag ? 1 : mnx[d]);
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclMax), ag ? 1 : mnx[d]);
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclProd), ag);
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclAvg), ag);
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], BRD_REDOP_PREMULSUM), ag);
    }
    for (int coll = BRD_IR_COLL_BROADCAST; coll < BRD_IR_COLL_COUNT; coll++)
      assert_int_equal(brd_algos_nvls_supported(coll, dts[d], ncclSum), 0);
  }
}

/* One (plan, n, dtype, op, count, in place) case against the reference. */
static void run_case(world_t *w, const nvls_gen_t *g, int n, int dt, int op, size_t count,
                     int in_place) {
  size_t es = brd_reduce_dtype_size(dt);
  int in_segs = g->coll == BRD_IR_COLL_REDUCESCATTER ? n : 1;
  int out_segs = g->coll == BRD_IR_COLL_ALLGATHER ? n : 1;
  size_t big = (size_t)n * count;
  void *bufs[MAXR], *in[MAXR], *out[MAXR];
  for (int r = 0; r < n; r++) {
    bufs[r] = malloc(2 * big * es + 64);
    assert_non_null(bufs[r]);
    memset(bufs[r], 0xa5, 2 * big * es + 64); /* poison */
    char *b = bufs[r];
    if (!in_place) {
      in[r] = b;
      out[r] = b + big * es;
    } else if (g->coll == BRD_IR_COLL_ALLGATHER) {
      out[r] = b;
      in[r] = b + (size_t)r * count * es;
    } else if (g->coll == BRD_IR_COLL_REDUCESCATTER) {
      in[r] = b;
      out[r] = b + (size_t)r * count * es;
    } else {
      in[r] = out[r] = b;
    }
    for (int s = 0; s < in_segs; s++)
      for (size_t i = 0; i < count; i++)
        store(dt, (char *)in[r] + (size_t)s * count * es, i, value_of(r, s, i));
  }
  rank_run_t runs[MAXR];
  world_launch(w, n, in, out, count, dt, op, 30.0, ncclSuccess, runs);
  for (int r = 0; r < n; r++) {
    for (int s = 0; s < out_segs; s++) {
      for (size_t i = 0; i < count; i++) {
        double want = g->coll == BRD_IR_COLL_ALLGATHER
                          ? value_of(s, 0, i)
                          : reference(dt, op, n, g->coll == BRD_IR_COLL_REDUCESCATTER ? r : 0, i);
        double got = load(dt, (char *)out[r] + (size_t)s * count * es, i);
        if (got != want)
          print_error("NVLS %s n=%d dt=%d op=%d count=%zu in_place=%d: rank %d segment %d "
                      "element %zu is %g, want %g\n", g->name, n, dt, op, count, in_place,
                      r, s, i, got, want);
        assert_true(got == want);
      }
    }
  }
  for (int r = 0; r < n; r++) free(bufs[r]);
}

/* Every eligible (datatype, op) of the plans gens[0 .. ngens) on 2, 4 and
 * 8 ranks, in and out of place, against the reference. */
static void matrix(const nvls_gen_t *gens, int ngens) {
  static const int dts[] = {ncclInt32,   ncclUint32,  ncclInt64,  ncclUint64,
                            ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64};
  static const int ops[] = {ncclSum, ncclMin, ncclMax};
  static const int ranks[] = {2, 4, 8};
  int cases = 0;
  for (int gi = 0; gi < ngens; gi++) {
    const nvls_gen_t *g = &gens[gi];
    for (size_t ni = 0; ni < sizeof(ranks) / sizeof(ranks[0]); ni++) {
      int n = ranks[ni];
      int nb = 1 + (int)ni % 2;
      brd_ir_plan_t *p = gen(g, n, nb);
      world_t w;
      /* 256 data bytes per slot: the larger count runs several iterations. */
      world_init(&w, p, 2 * (size_t)p->nslots * 256);
      for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++) {
        for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
          int dt = dts[di], op = ops[oi];
          if (!brd_algos_nvls_supported(g->coll, dt, op)) continue;
          /* All-gather moves bytes: one op is enough per type. */
          if (g->coll == BRD_IR_COLL_ALLGATHER && op != ncclSum) continue;
          for (int ip = 0; ip < 2; ip++) {
            run_case(&w, g, n, dt, op, 1, ip);
            run_case(&w, g, n, dt, op, 1000 + (size_t)n, ip);
            cases += 2;
          }
        }
      }
      world_fini(&w);
      brd_plan_destroy(p);
    }
  }
  print_message("%d NVLS launches matched the reference\n", cases);
}

static void test_matrix(void **state) {
  (void)state;
  matrix(nvls_gens, NGENS);
}

/* The zero-copy plans: one switch channel, no scratch, flagged to reach
 * the members' buffers; then the same matrix. */
/* The zero-copy plans verify (the switch reaching every member's input
 * and output, device/ir.h), in and out of place; with every block's first
 * barrier made a NOP a member's buffers are touched before that member
 * joined, which the verifier refuses. */
static void test_zerocopy_verify(void **state) {
  (void)state;
  int nzc = (int)(sizeof(zc_gens) / sizeof(zc_gens[0])), done = 0, refused = 0;
  for (int gi = 0; gi < nzc; gi++) {
    for (int n = 2; n <= MAXR; n++) {
      for (int nb = 1; nb <= 3; nb++) {
        brd_ir_plan_t *p = gen(&zc_gens[gi], n, nb);
        for (int ip = 0; ip < 2; ip++) {
          brd_verify_opts_t o = {ip, 3};
          brd_verify_report_t rep;
          ncclResult_t res = brd_plan_verify(p, &o, &rep);
          if (res != ncclSuccess)
            print_error("%s n=%d nb=%d in_place=%d: %s\n", zc_gens[gi].name, n, nb, ip,
                        rep.msg);
          assert_int_equal(res, ncclSuccess);
          done++;
        }
        /* Every block's first MC_BARRIER becomes a NOP. */
        for (int r = 0; r < n; r++)
          for (int b = 0; b < nb; b++) {
            brd_ir_op_t *op = (brd_ir_op_t *)brd_ir_plan_ops(p, r, b);
            uint32_t nops = brd_ir_plan_block(p, r, b)->nops;
            for (uint32_t i = 0; i < nops; i++)
              if (op[i].code == BRD_IR_OP_MC_BARRIER) {
                op[i].code = BRD_IR_OP_NOP;
                op[i].ndst = 0;
                op[i].k = 0;
                break;
              }
          }
        {
          brd_verify_opts_t o = {0, 3};
          brd_verify_report_t rep;
          assert_int_not_equal(brd_plan_verify(p, &o, &rep), ncclSuccess);
          refused++;
        }
        brd_plan_destroy(p);
      }
    }
  }
  print_message("%d zero-copy NVLS plan verifications passed, %d broken plans refused\n",
                done, refused);
}

static void test_zerocopy_matrix(void **state) {
  (void)state;
  int nzc = (int)(sizeof(zc_gens) / sizeof(zc_gens[0]));
  for (int gi = 0; gi < nzc; gi++) {
    for (int n = 2; n <= MAXR; n++) {
      brd_ir_plan_t *p = gen(&zc_gens[gi], n, 2);
      assert_int_equal(p->algo, BRD_IR_ALGO_NVLS);
      assert_int_equal(p->nslots, 0);
      assert_true(p->flags & BRD_IR_PLAN_F_PEER_INPUT);
      for (int r = 0; r < n; r++) {
        assert_int_equal(brd_ir_plan_rank(p, r)->nchans, 1);
        assert_int_equal(brd_ir_plan_chan(p, r, 0)->type, BRD_IR_CHAN_SWITCH);
      }
      brd_plan_destroy(p);
    }
  }
  matrix(zc_gens, nzc);
}

/* ---- hand-written plans ---------------------------------------------------- */

static brd_plan_builder_t *mk(int n, int nb, uint32_t nchunks, uint32_t nslots,
                              uint32_t nsems, uint32_t spi, uint8_t coll) {
  brd_plan_shape_t s = {.nranks = n, .nblocks = nb, .nchunks = nchunks, .nslots = nslots,
                        .slot_div = nslots ? nslots : 1, .nsems = nsems,
                        .seq_per_iter = spi, .proto = BRD_IR_PROTO_SIMPLE,
                        .algo = BRD_IR_ALGO_NVLS, .coll = coll};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclSuccess);
  return b;
}

static void op1(brd_plan_builder_t *b, int r, int blk, uint8_t code, uint8_t flags,
                uint32_t chunk, brd_plan_ref_t src, brd_plan_ref_t dst) {
  brd_plan_move_t m = {.code = code, .flags = flags, .chunk = chunk, .nchunks = 1,
                       .nsrc = 1, .src = &src, .ndst = 1, .dst = &dst};
  assert_int_equal(brd_plan_op_move(b, r, blk, &m), ncclSuccess);
}

static void bar(brd_plan_builder_t *b, int r, int blk, uint32_t sem, int32_t k) {
  brd_ir_op_t op = {0};
  op.code = BRD_IR_OP_MC_BARRIER;
  op.ndst = 1;
  op.k = k;
  op.ref[0].buf = BRD_IR_BUF_SEM;
  op.ref[0].index = (uint16_t)sem;
  assert_int_equal(brd_plan_chan_switch(b, r, &op.ref[0].chan), ncclSuccess);
  assert_int_equal(brd_plan_op_add(b, r, blk, &op), ncclSuccess);
}

#define SW(i) brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH, (i))
#define LSCR(i) brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (i))
#define IN(i) brd_plan_ref(BRD_IR_BUF_INPUT, -1, (i))
#define OUT(i) brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, (i))

/* An all-reduce through MC_RED: rank 0 stores its input into slot 0 of
 * every copy; barrier; every other rank combines its input into every
 * copy (concurrently: the compare-and-swap loops must not lose one);
 * barrier; each rank copies its own slot out with the post-op. Run on
 * 16-bit and 64-bit types, 8 ranks, so the reds contend. */
static brd_ir_plan_t *red_plan(int n) {
  brd_plan_builder_t *b = mk(n, 1, 1, 1, 1, 3, BRD_IR_COLL_ALLREDUCE);
  for (int r = 0; r < n; r++) {
    if (r == 0) op1(b, r, 0, BRD_IR_OP_MC_STORE, 0, 0, IN(0), SW(0));
    bar(b, r, 0, 0, 1);
    if (r != 0) op1(b, r, 0, BRD_IR_OP_MC_RED, 0, 0, IN(0), SW(0));
    bar(b, r, 0, 0, 2);
    op1(b, r, 0, BRD_IR_OP_COPY, BRD_IR_F_POSTOP, 0, LSCR(0), OUT(0));
    bar(b, r, 0, 0, 3); /* nobody rewrites slot 0 before every copy-out */
  }
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  return p;
}

static void test_mc_red(void **state) {
  (void)state;
  static const int dts[] = {ncclFloat16, ncclBfloat16, ncclInt64, ncclUint32};
  static const int ops[] = {ncclSum, ncclMax, ncclMin};
  int n = 8;
  brd_ir_plan_t *p = red_plan(n);
  for (int ip = 0; ip < 2; ip++) {
    brd_verify_opts_t o = {ip, 3};
    assert_int_equal(brd_plan_verify(p, &o, NULL), ncclSuccess);
  }
  world_t w;
  world_init(&w, p, 2 * 4096);
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
      if (ops[o] != ncclSum && dts[d] == ncclUint32) continue;
      nvls_gen_t g = {BRD_IR_COLL_ALLREDUCE, 0, "MC_RED all-reduce"};
      run_case(&w, &g, n, dts[d], ops[o], 3001, 0);
    }
  }
  world_fini(&w);
  brd_plan_destroy(p);
}

/* An all-gather through MC_STORE of one segment into every copy, read
 * back by MC_REDUCE of a one-contributor slot is not what MC_REDUCE
 * does: check instead that MC_REDUCE's switch destination lands in every
 * copy (rank 0 reduces slot 0 and stores it into slot 1 of every copy;
 * every rank copies slot 1 out). */
static void test_mc_reduce_switch_dst(void **state) {
  (void)state;
  int n = 5;
  brd_plan_builder_t *b = mk(n, 1, 1, 2, 1, 3, BRD_IR_COLL_ALLREDUCE);
  for (int r = 0; r < n; r++) {
    op1(b, r, 0, BRD_IR_OP_COPY, 0, 0, IN(0), LSCR(0));
    bar(b, r, 0, 0, 1);
    if (r == 0) op1(b, r, 0, BRD_IR_OP_MC_REDUCE, BRD_IR_F_POSTOP, 0, SW(0), SW(1));
    bar(b, r, 0, 0, 2);
    op1(b, r, 0, BRD_IR_OP_COPY, 0, 0, LSCR(1), OUT(0));
    bar(b, r, 0, 0, 3);
  }
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  assert_int_equal(brd_plan_verify(p, NULL, NULL), ncclSuccess);
  world_t w;
  world_init(&w, p, 2 * 2 * 1024);
  nvls_gen_t g = {BRD_IR_COLL_ALLREDUCE, 0, "MC_REDUCE to the switch"};
  run_case(&w, &g, n, ncclInt32, ncclMax, 999, 0);
  run_case(&w, &g, n, ncclFloat32, ncclSum, 999, 1);
  world_fini(&w);
  brd_plan_destroy(p);
}

/* A rank that never comes: the others stop at their switch barrier with
 * a hang report naming the missing member. */
static void test_barrier_hang(void **state) {
  (void)state;
  brd_algos_args_t a = {3, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p;
  assert_int_equal(brd_algos_nvls_allreduce(&a, &p), ncclSuccess);
  world_t w;
  world_init(&w, p, brd_plan_scratch_bytes(p));
  int32_t bufs[3][64];
  void *in[3] = {bufs[0], bufs[1], bufs[2]}, *out[3] = {bufs[0], bufs[1], bufs[2]};
  memset(bufs, 1, sizeof(bufs));
  rank_run_t runs[3];
  world_launch(&w, 2, in, out, 64, ncclInt32, ncclSum, 1.0, ncclRemoteError, runs);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(runs[r].hang.rank, r);
    assert_int_equal(runs[r].hang.what, BRD_EXEC_WAIT_SWITCH);
    assert_int_equal(runs[r].hang.peer, 2);
    assert_int_equal(runs[r].hang.index, 0);
  }
  world_fini(&w);
  brd_plan_destroy(p);
}

/* A switch plan launched without member copies is refused up front. */
static void test_missing_members(void **state) {
  (void)state;
  brd_algos_args_t a = {2, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p;
  assert_int_equal(brd_algos_nvls_allgather(&a, &p), ncclSuccess);
  char scratch[8192];
  int32_t in[4] = {1, 2, 3, 4}, out[8];
  brd_exec_chan_t ch;
  memset(&ch, 0, sizeof(ch));
  brd_exec_args_t args = {.plan = p, .rank = 0, .input = in, .output = out,
                          .scratch = scratch, .scratch_bytes = sizeof(scratch),
                          .chans = &ch, .count = 4, .dtype = ncclInt32, .redop = ncclSum,
                          .epoch = 1};
  brd_exec_run_t run;
  assert_int_equal(brd_exec_host_run_init(&run, &args), ncclInvalidArgument);
  brd_plan_destroy(p);
}

/* Every allocation of a generator, then of the verifier on a switch plan
 * with MC_RED, failing in turn: each fails cleanly, with nothing left. */
static void test_alloc_failures(void **state) {
  (void)state;
  for (int gi = 0; gi < NGENS; gi++) {
    int failures = 0;
    for (long k = 0;; k++) {
      brd_algos_args_t a = {5, NULL, 2, BRD_IR_PROTO_SIMPLE};
      brd_ir_plan_t *p = NULL;
      alloc_calls = 0;
      fail_at = k;
      live = 0;
      armed = 1;
      ncclResult_t res = brd_algos_generate(nvls_gens[gi].coll, nvls_gens[gi].code, &a, 0, 0, &p);
      armed = 0;
      if (res == ncclSuccess) {
        assert_int_equal(live, 1);
        brd_plan_destroy(p);
        break;
      }
      assert_int_equal(res, ncclSystemError);
      assert_int_equal(live, 0);
      failures++;
    }
    assert_true(failures > 3);
  }
  brd_ir_plan_t *p = red_plan(4);
  int failures = 0;
  for (long k = 0;; k++) {
    alloc_calls = 0;
    fail_at = k;
    live = 0;
    armed = 1;
    ncclResult_t res = brd_plan_verify(p, NULL, NULL);
    armed = 0;
    assert_int_equal(live, 0);
    if (res == ncclSuccess) break;
    assert_int_equal(res, ncclSystemError);
    failures++;
  }
  assert_true(failures > 10);
  brd_plan_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eligibility),
      cmocka_unit_test(test_plans_verify),
      cmocka_unit_test(test_too_many_ranks),
      cmocka_unit_test(test_matrix),
      cmocka_unit_test(test_zerocopy_verify),
      cmocka_unit_test(test_zerocopy_matrix),
      cmocka_unit_test(test_mc_red),
      cmocka_unit_test(test_mc_reduce_switch_dst),
      cmocka_unit_test(test_barrier_hang),
      cmocka_unit_test(test_missing_members),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
