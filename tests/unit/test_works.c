/*
 * The works builder (src/core/works.c) with no threads, no sockets and no
 * communicator: a hand-made view of a three-rank runtime (rank 1's, host
 * backend figures, staging halves of 4096 bytes, point-to-point pieces of
 * 1000 bytes) and fake registration lookups. Every expectation below is
 * computed by hand from the rules in works.h, not by the code under test:
 *   - pieces of a large call: 3000 floats through 4096-byte halves are
 *     pieces of 1024, 1024 and 952 elements, phases 0, 1, 0; an all-gather
 *     of 500 floats on 3 ranks pieces of 341 and 159, three segments each;
 *   - in place: an in-place all-gather reads its own segment and copies
 *     back exactly the ranges it read; an in-place registered
 *     reduce-scatter writes every rank's output at that rank's offset;
 *   - registered output: one work, in the user's buffers, no staging;
 *   - LL scratch: LL plans use the window's LL scratch, Simple plans the
 *     other, never the same bytes;
 *   - zero-copy input: from 64 KiB, registered inputs read in place, but
 *     not below, not with PreMulSum, not deterministic;
 *   - send/recv rounds: 40000 and 17000 bytes are 40 and 17 pieces, three
 *     rounds of 16, with the segment pointers, counts and per-pair
 *     sequence numbers of each; overlapping receives are refused; a send
 *     overlapping a receive gets a snapshot that every round then reads;
 *   - batches: on 3 ranks a batch holds 4096 / 3 = 1365 transfers per pair
 *     and direction, so 5000 sends to rank 2 (one piece each) interleaved
 *     with 2000 receives from rank 0 and 3000 sends to rank 0 are rounds of
 *     (1365 + 1365, 1365 recv), (1365 + 1365, 635 recv), (1365 + 270, 0),
 *     (905, 0): send i to rank 2 is segment i % 1365 of round i / 1365.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/reg.h"
#include "core/works.h"
#include "device/redop.h"
#include "nccl.h"

#define N 3
#define ME 1
#define STAGE 4096
#define PIECE 1000
#define SCRATCH ((uint64_t)256 << 20)
#define LL_SCRATCH ((uint64_t)16 << 20)
#define LL_OFF (0x10000 + SCRATCH) /* the LL plans' scratch (window.h) */

/* Fake window records and addresses: never dereferenced by the builder. */
static brd_window_rec_t win[N];
static char *base[N];
static const int nb_opts[1] = {1};
static const size_t nb_sizes[BRD_BACKEND_NB_SIZES] = {(size_t)256 << 10, 0};
static brd_tune_mask_t mask;
static brd_tune_topo_t topo;
static _Atomic int abort_flag;

/* Registered ranges of rank ME and where each rank's copy is mapped here. */
typedef struct {
  char *mine;
  size_t size;
  char *peer[N];
  int symmetric; /* brd_reg_direct answers; else brd_reg_share does */
} fake_reg_t;
static fake_reg_t regs[4];
static int nregs;

static ncclResult_t fake_direct(void *ctx, const void *buf, size_t bytes, const char *fn,
                                char **peer_out, int *ok_out) {
  (void)ctx, (void)fn;
  *ok_out = 0;
  for (int i = 0; i < nregs; i++) {
    const fake_reg_t *r = &regs[i];
    const char *b = buf;
    if (!r->symmetric || b < r->mine || b + bytes > r->mine + r->size) continue;
    for (int q = 0; q < N; q++) peer_out[q] = r->peer[q] + (b - r->mine);
    *ok_out = 1;
  }
  return ncclSuccess;
}

static ncclResult_t fake_share(void *ctx, const void *buf, size_t bytes, const char *fn,
                               uint64_t *remote_out, int *state_out) {
  (void)ctx, (void)fn;
  *state_out = BRD_REG_NONE;
  for (int i = 0; i < nregs; i++) {
    const fake_reg_t *r = &regs[i];
    const char *b = buf;
    if (r->symmetric || b < r->mine || b + bytes > r->mine + r->size) continue;
    for (int q = 0; q < N; q++) remote_out[q] = (uint64_t)(uintptr_t)(r->peer[q] + (b - r->mine));
    *state_out = BRD_REG_SHARED;
  }
  return ncclSuccess;
}

static char *fake(uint64_t a) { return (char *)(uintptr_t)a; }

static void view_init(brd_works_view_t *v, int det) {
  memset(win, 0, sizeof(win));
  for (int r = 0; r < N; r++) {
    base[r] = fake(0x100000000ull * (uint64_t)(r + 1));
    win[r].nsems = 64;
    win[r].sem_off = 0;
    win[r].p2p_sem_off = 0x1000;
    win[r].xchg_off = 0x2000;
    win[r].scratch_off = 0x10000;
    win[r].scratch_bytes = SCRATCH;
    win[r].ll_scratch_off = LL_OFF;
    win[r].ll_scratch_bytes = LL_SCRATCH;
    win[r].p2p_off = LL_OFF + LL_SCRATCH;
    win[r].p2p_bytes = 1 << 20;
    win[r].stage_off = LL_OFF + LL_SCRATCH + (1 << 20);
    win[r].stage_bytes = STAGE;
  }
  assert_int_equal(brd_tune_parse(NULL, NULL, &mask), ncclSuccess);
  memset(&topo, 0, sizeof(topo));
  topo.nranks = N;
  topo.nnodes = 1;
  topo.local_nranks = N;
  topo.ranks_per_device = 1;
  topo.host_mode = 1;
  topo.intra_bw = topo.inter_bw = 4.0f;
  topo.intra_lat = topo.inter_lat = 2.0f;
  memset(v, 0, sizeof(*v));
  v->rank = ME;
  v->nranks = N;
  v->win = win;
  v->base = base;
  v->nb_opts = nb_opts;
  v->nb_count = 1;
  v->nb_sizes = nb_sizes;
  v->mask = &mask;
  v->topo = &topo;
  v->deterministic = det;
  v->p2p_piece = PIECE;
  v->reg.any = nregs > 0;
  v->reg.direct = fake_direct;
  v->reg.share = fake_share;
  v->abort_flag = &abort_flag;
}

/* The staging half `phase` of rank r. */
static char *stage(int r, int phase) {
  return base[r] + win[r].stage_off + (size_t)phase * STAGE;
}

static brd_call_t call(brd_coll_t coll, const void *s, void *r, size_t count) {
  brd_call_t c;
  memset(&c, 0, sizeof(c));
  c.coll = coll;
  c.fn = "test";
  c.sendbuff = s;
  c.recvbuff = r;
  c.count = count;
  c.dtype = ncclFloat32;
  c.op = ncclSum;
  return c;
}

typedef struct {
  brd_works_view_t v;
  brd_plan_cache_t plans;
  brd_works_seq_t seq;
  uint64_t cursor[N];
  brd_works_t ws;
} fixture_t;

static void fx_init(fixture_t *f, int det) {
  memset(f, 0, sizeof(*f));
  view_init(&f->v, det);
  brd_plans_init(&f->plans, N);
  f->seq.p2p_cursor = f->cursor;
}

static void fx_fini(fixture_t *f) {
  brd_works_free(&f->ws);
  brd_plans_fini(&f->plans);
  nregs = 0;
}

static ncclResult_t build(fixture_t *f, const brd_call_t *calls, int n) {
  return brd_works_build(&f->v, &f->plans, &f->seq, calls, n, &f->ws);
}

/* The channel of work w that talks to peer p, or -1. */
static int chan_of(const brd_work_t *w, int p) {
  const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
  for (uint32_t ch = 0; ch < pr->nchans; ch++)
    if (brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer == p) return (int)ch;
  return -1;
}

/* ---- pieces ---- */

static void test_pieces_allreduce(void **state) {
  (void)state;
  fixture_t f;
  fx_init(&f, 0);
  char *sb = fake(0x7000000000ull), *rb = fake(0x7100000000ull);
  brd_call_t c = call(BRD_COLL_ALLREDUCE, sb, rb, 3000);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  /* 4096 / 4 = 1024 elements per piece: 1024, 1024, 952. */
  static const size_t off[3] = {0, 1024, 2048}, n[3] = {1024, 1024, 952};
  assert_int_equal(f.ws.n, 3);
  uint64_t last_epoch = 0;
  for (int k = 0; k < 3; k++) {
    const brd_work_t *w = &f.ws.w[k];
    assert_int_equal(w->off, off[k]);
    assert_int_equal(w->n, n[k]);
    assert_int_equal(w->args.count, n[k]);
    assert_int_equal(w->nout, 1);
    assert_false(w->direct);
    assert_ptr_equal(w->call, &c);
    assert_ptr_equal(w->args.input, sb + off[k] * 4);
    /* Halves alternate: 0, 1, 0. */
    assert_int_equal(w->args.phase, (uint32_t)(k & 1));
    assert_ptr_equal(w->args.output, stage(ME, k & 1));
    /* LL plans have a scratch of their own (window.h). */
    uint64_t scr = w->args.plan->proto == BRD_IR_PROTO_LL ? LL_OFF : 0x10000;
    assert_ptr_equal(w->args.scratch, base[ME] + scr);
    if (k > 0) assert_true(w->args.epoch > last_epoch);
    last_epoch = w->args.epoch;
    /* Every channel reaches its peer's staging half of the same phase. */
    const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
    for (uint32_t ch = 0; ch < pr->nchans; ch++) {
      int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
      assert_ptr_equal(w->chans[ch].peer_output, stage(p, k & 1));
      assert_ptr_equal(w->chans[ch].peer_scratch, base[p] + scr);
      assert_ptr_equal((char *)w->chans[ch].peer_sems, base[p] + (size_t)ME * 64 * 8);
      assert_ptr_equal((char *)w->chans[ch].sems, base[ME] + (size_t)p * 64 * 8);
    }
  }
  assert_int_equal(f.seq.phase, 1);
  fx_fini(&f);
}

static void test_pieces_allgather_device_seq(void **state) {
  (void)state;
  fixture_t f;
  fx_init(&f, 0);
  f.v.device_seq = 1; /* the CUDA backend: phases on the device */
  char *sb = fake(0x7000000000ull), *rb = fake(0x7100000000ull);
  brd_call_t c = call(BRD_COLL_ALLGATHER, sb, rb, 500);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  /* 4096 / (3 segments x 4 bytes) = 341 elements: pieces 341 and 159. */
  assert_int_equal(f.ws.n, 2);
  assert_int_equal(f.ws.w[0].n, 341);
  assert_int_equal(f.ws.w[1].off, 341);
  assert_int_equal(f.ws.w[1].n, 159);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(f.ws.w[k].nout, 3);
    /* Device-kept phases: both pieces carry phase 0 and the bases. */
    assert_int_equal(f.ws.w[k].args.phase, 0);
    assert_ptr_equal(f.ws.w[k].args.output, stage(ME, 0));
  }
  assert_int_equal(f.ws.stage_half, STAGE);
  fx_fini(&f);
}

/* ---- in place ---- */

static void test_inplace_allgather_staged(void **state) {
  (void)state;
  fixture_t f;
  fx_init(&f, 0);
  const size_t count = 700; /* pieces of 341, 341, 18 */
  char *rb = fake(0x7100000000ull);
  char *sb = rb + (size_t)ME * count * 4; /* NCCL's in-place all-gather */
  brd_call_t c = call(BRD_COLL_ALLGATHER, sb, rb, count);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  static const size_t off[3] = {0, 341, 682}, n[3] = {341, 341, 18};
  assert_int_equal(f.ws.n, 3);
  for (int k = 0; k < 3; k++) {
    const brd_work_t *w = &f.ws.w[k];
    /* Piece k reads [off, off + n) of this rank's own segment, and its
     * copy-out writes that range of every segment: in this rank's own
     * segment exactly the bytes it has just read. */
    assert_ptr_equal(w->args.input, rb + (ME * count + off[k]) * 4);
    assert_int_equal(w->off, off[k]);
    assert_int_equal(w->n, n[k]);
    assert_int_equal(w->nout, 3);
  }
  fx_fini(&f);
}

static void test_inplace_reducescatter_registered(void **state) {
  (void)state;
  fixture_t f;
  const size_t count = 5000, seg = count * 4; /* beyond one staging half */
  char *mine = fake(0x7000000000ull);
  regs[0] = (fake_reg_t){mine, N * seg,
                         {fake(0x9000000000ull), mine, fake(0xA000000000ull)}, 1};
  nregs = 1;
  fx_init(&f, 0);
  /* NCCL's in-place reduce-scatter: recvbuff = sendbuff + rank * count. */
  brd_call_t c = call(BRD_COLL_REDUCESCATTER, mine, mine + ME * seg, count);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  /* Written in place: one work, no staging, no pieces. */
  assert_int_equal(f.ws.n, 1);
  const brd_work_t *w = &f.ws.w[0];
  assert_true(w->direct);
  assert_int_equal(w->args.count, count);
  /* Every rank's output is segment `rank` of its own registered input. */
  assert_ptr_equal(w->args.output, mine + ME * seg);
  const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
    assert_ptr_equal(w->chans[ch].peer_output, regs[0].peer[p] + (size_t)p * seg);
  }
  fx_fini(&f);
}

/* ---- registered output ---- */

static void test_registered_output(void **state) {
  (void)state;
  fixture_t f;
  const size_t count = 5000; /* 20000 bytes: five staging pieces otherwise */
  char *rb = fake(0x7100000000ull);
  regs[0] = (fake_reg_t){rb, 1 << 20,
                         {fake(0x9100000000ull), rb, fake(0xA100000000ull)}, 1};
  nregs = 1;
  fx_init(&f, 0);
  char *sb = fake(0x7000000000ull); /* not registered */
  brd_call_t c = call(BRD_COLL_ALLREDUCE, sb, rb + 64, count);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  assert_int_equal(f.ws.n, 1);
  const brd_work_t *w = &f.ws.w[0];
  assert_true(w->direct);
  assert_ptr_equal(w->args.output, rb + 64);
  assert_ptr_equal(w->args.input, sb);
  assert_int_equal(w->args.count, count);
  assert_int_equal(w->args.plan->flags & BRD_IR_PLAN_F_PEER_INPUT, 0);
  const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
  assert_true(pr->nchans > 0);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
    assert_ptr_equal(w->chans[ch].peer_output, regs[0].peer[p] + 64);
    assert_null(w->chans[ch].peer_input);
  }
  fx_fini(&f);
}

static void test_registered_output_exchanged(void **state) {
  (void)state;
  fixture_t f;
  const size_t count = 3000;
  char *rb = fake(0x7100000000ull);
  /* Registered without the symmetric promise: outputs exchanged per call. */
  regs[0] = (fake_reg_t){rb, 1 << 20,
                         {fake(0x9100000000ull), fake(0x9200000000ull), fake(0xA100000000ull)},
                         0};
  nregs = 1;
  fx_init(&f, 0);
  brd_call_t c = call(BRD_COLL_ALLREDUCE, fake(0x7000000000ull), rb, count);
  assert_int_equal(build(&f, &c, 1), ncclSuccess);
  /* Pieces as for the staging (1024, 1024, 952), each written in place. */
  assert_int_equal(f.ws.n, 3);
  for (int k = 0; k < 3; k++) {
    const brd_work_t *w = &f.ws.w[k];
    size_t off = (size_t)k * 1024;
    assert_true(w->args.xchg);
    assert_true(w->direct);
    assert_ptr_equal(w->args.output, rb + off * 4);
    const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
    for (uint32_t ch = 0; ch < pr->nchans; ch++) {
      int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
      /* This rank's output as peer p addresses it, at the piece. */
      assert_ptr_equal(w->chans[ch].xchg_output, regs[0].peer[p] + off * 4);
      assert_ptr_equal((char *)w->chans[ch].xchg_slot,
                       base[ME] + 0x2000 + (size_t)p * BRD_IR_XCHG_WORDS * 8);
      assert_ptr_equal((char *)w->chans[ch].xchg_pub,
                       base[p] + 0x2000 + (size_t)ME * BRD_IR_XCHG_WORDS * 8);
    }
  }
  fx_fini(&f);
}

/* ---- LL scratch ---- */

/* LL and Simple works of the same call use separate scratch: an LL reader
 * takes any word whose upper half is the flag it waits for as its packet,
 * so raw data a Simple plan left in a slot (rank 0's all-gather input,
 * 1, 2, 3, ...) must never lie where LL packets go. That happened on a
 * GPU: a chain broadcast (LL, epoch 23) read element 24 of an all-gather
 * (Simple, epoch 21, same phase) in its slot 2 as the packet of flag 26. */
static void test_ll_scratch_apart(void **state) {
  (void)state;
  static const char *const protos[2] = {"LL", "Simple"};
  for (int i = 0; i < 2; i++) {
    fixture_t f;
    fx_init(&f, 0);
    assert_int_equal(brd_tune_parse(NULL, protos[i], &mask), ncclSuccess);
    brd_call_t c = call(BRD_COLL_ALLREDUCE, fake(0x7000000000ull), fake(0x7100000000ull),
                        3000);
    assert_int_equal(build(&f, &c, 1), ncclSuccess);
    assert_true(f.ws.n >= 1);
    for (int k = 0; k < f.ws.n; k++) {
      const brd_work_t *w = &f.ws.w[k];
      int ll = i == 0;
      assert_int_equal(w->args.plan->proto, ll ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE);
      uint64_t off = ll ? LL_OFF : 0x10000, bytes = ll ? LL_SCRATCH : SCRATCH;
      assert_ptr_equal(w->args.scratch, base[ME] + off);
      assert_int_equal(w->args.scratch_bytes, bytes);
      const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
      assert_true(pr->nchans > 0);
      for (uint32_t ch = 0; ch < pr->nchans; ch++) {
        int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
        assert_ptr_equal(w->chans[ch].peer_scratch, base[p] + off);
      }
    }
    fx_fini(&f);
  }
}

/* ---- zero-copy input ---- */

/* An all-reduce of count floats with both buffers registered on every
 * rank; returns the fixture with its works built. */
static void zc_build(fixture_t *f, size_t count, int det, int premul) {
  char *sb = fake(0x7000000000ull), *rb = fake(0x7100000000ull);
  regs[0] = (fake_reg_t){sb, 1 << 20, {fake(0x9000000000ull), sb, fake(0xA000000000ull)}, 1};
  regs[1] = (fake_reg_t){rb, 1 << 20, {fake(0x9100000000ull), rb, fake(0xA100000000ull)}, 1};
  nregs = 2;
  fx_init(f, det);
  static brd_call_t c;
  c = call(BRD_COLL_ALLREDUCE, sb, rb, count);
  c.premul = premul;
  assert_int_equal(build(f, &c, 1), ncclSuccess);
  assert_int_equal(f->ws.n, 1);
  assert_true(f->ws.w[0].direct);
}

static void test_zero_copy_input(void **state) {
  (void)state;
  fixture_t f;
  zc_build(&f, 16384, 0, 0); /* 64 KiB per rank: the threshold */
  const brd_work_t *w = &f.ws.w[0];
  assert_true(w->args.plan->flags & BRD_IR_PLAN_F_PEER_INPUT);
  assert_int_equal(w->args.plan->algo, BRD_IR_ALGO_TWOSHOT);
  const brd_ir_rank_t *pr = brd_ir_plan_rank(w->args.plan, ME);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(w->args.plan, ME, (int)ch)->peer;
    assert_ptr_equal(w->chans[ch].peer_input, regs[0].peer[p]);
    assert_ptr_equal(w->chans[ch].peer_output, regs[1].peer[p]);
  }
  fx_fini(&f);

  /* One element less: below 64 KiB, the output alone is in place. */
  zc_build(&f, 16383, 0, 0);
  assert_int_equal(f.ws.w[0].args.plan->flags & BRD_IR_PLAN_F_PEER_INPUT, 0);
  fx_fini(&f);
  /* Deterministic reductions and PreMulSum keep the ordinary plans. */
  zc_build(&f, 16384, 1, 0);
  assert_int_equal(f.ws.w[0].args.plan->flags & BRD_IR_PLAN_F_PEER_INPUT, 0);
  fx_fini(&f);
  zc_build(&f, 16384, 0, 1);
  assert_int_equal(f.ws.w[0].args.plan->flags & BRD_IR_PLAN_F_PEER_INPUT, 0);
  assert_int_equal(f.ws.w[0].args.redop, BRD_REDOP_PREMULSUM);
  fx_fini(&f);
}

/* ---- send/recv rounds ---- */

static void test_p2p_rounds(void **state) {
  (void)state;
  fixture_t f;
  fx_init(&f, 0);
  char *sb = fake(0x7000000000ull), *rb = fake(0x7100000000ull);
  brd_call_t c[3];
  c[0] = call(BRD_COLL_SEND, sb, NULL, 10000);  /* 40000 bytes to rank 2 */
  c[0].root = 2;
  c[1] = call(BRD_COLL_RECV, NULL, rb, 4250);   /* 17000 bytes from rank 0 */
  c[1].root = 0;
  c[2] = call(BRD_COLL_SEND, sb, NULL, 0);      /* count 0: no transfer */
  c[2].root = 0;
  assert_int_equal(build(&f, c, 3), ncclSuccess);
  /* 40 and 17 pieces of 1000 bytes, 16 per round: 3 rounds. */
  assert_int_equal(f.ws.n, 3);
  static const size_t send_n[3] = {16000, 16000, 8000};
  static const size_t recv_n[3] = {16000, 1000, 0};
  static const uint64_t epoch_to2[3] = {0, 16, 32}, epoch_from0[3] = {0, 16, 17};
  for (int k = 0; k < 3; k++) {
    const brd_work_t *w = &f.ws.w[k];
    assert_true(w->p2p);
    assert_null(w->call);
    assert_int_equal(w->args.n_in_segs, 1);
    assert_int_equal(w->args.n_out_segs, 1);
    assert_ptr_equal(w->args.in_segs[0].ptr, sb + (size_t)k * 16000);
    assert_int_equal(w->args.in_segs[0].count, send_n[k]);
    assert_int_equal(w->args.out_segs[0].count, recv_n[k]);
    if (recv_n[k] > 0) assert_ptr_equal(w->args.out_segs[0].ptr, rb + (size_t)k * 16000);
    else assert_null(w->args.out_segs[0].ptr);
    assert_int_equal(w->args.count, send_n[k] > recv_n[k] ? send_n[k] : recv_n[k]);
    assert_int_equal(w->args.dtype, ncclUint8);
    int ch2 = chan_of(w, 2), ch0 = chan_of(w, 0);
    assert_true(ch2 >= 0);
    assert_int_equal(w->chan_epoch[ch2], epoch_to2[k]);
    if (ch0 >= 0) assert_int_equal(w->chan_epoch[ch0], epoch_from0[k]);
    assert_ptr_equal(w->chans[ch2].peer_scratch, base[2] + win[2].p2p_off);
    assert_ptr_equal((char *)w->chans[ch2].peer_sems, base[2] + 0x1000 + (size_t)ME * 16);
    assert_ptr_equal((char *)w->chans[ch2].sems, base[ME] + 0x1000 + 2 * 16);
  }
  /* Each pair's cursor moved by its pieces: 40 to rank 2, 17 from rank 0. */
  assert_int_equal(f.cursor[2], 40);
  assert_int_equal(f.cursor[0], 17);
  assert_int_equal(f.cursor[1], 0);
  assert_int_equal(f.ws.nsnaps, 0);
  fx_fini(&f);

  /* The CUDA backend keeps the cursors: works carry spans. */
  fx_init(&f, 0);
  f.v.device_seq = 1;
  assert_int_equal(build(&f, c, 2), ncclSuccess);
  static const uint64_t span_to2[3] = {16, 16, 8};
  for (int k = 0; k < 3; k++)
    assert_int_equal(f.ws.w[k].chan_epoch[chan_of(&f.ws.w[k], 2)], span_to2[k]);
  assert_int_equal(f.cursor[2], 0);
  fx_fini(&f);
}

static void test_p2p_overlaps(void **state) {
  (void)state;
  fixture_t f;
  fx_init(&f, 0);
  char *buf = fake(0x7000000000ull);
  brd_call_t c[3];
  /* nccl-tests' in-place sendrecv: send and receive the same buffer. */
  c[0] = call(BRD_COLL_SEND, buf, NULL, 10000);
  c[0].root = 2;
  c[1] = call(BRD_COLL_RECV, NULL, buf, 10000);
  c[1].root = 0;
  assert_int_equal(build(&f, c, 2), ncclSuccess);
  assert_int_equal(f.ws.nsnaps, 1);
  assert_int_equal(f.ws.snaps[0].send, 0);
  assert_ptr_equal(f.ws.snaps[0].src, buf);
  assert_int_equal(f.ws.snaps[0].bytes, 40000);
  assert_int_equal(f.ws.snap_bytes, 40192); /* rounded up to 256 */
  /* Every round's send segment moves to the snapshot, the receive stays. */
  char *copy = fake(0x7700000000ull);
  brd_works_snap_use(&f.ws, 0, copy);
  assert_int_equal(f.ws.n, 3);
  for (int k = 0; k < 3; k++) {
    assert_ptr_equal(f.ws.w[k].args.in_segs[0].ptr, copy + (size_t)k * 16000);
    assert_ptr_equal(f.ws.w[k].args.out_segs[0].ptr, buf + (size_t)k * 16000);
  }
  fx_fini(&f);

  /* Two receives into overlapping memory run concurrently: refused. */
  fx_init(&f, 0);
  c[0] = call(BRD_COLL_RECV, NULL, buf, 100);
  c[0].root = 2;
  c[1] = call(BRD_COLL_RECV, NULL, buf + 396, 100);
  c[1].root = 0;
  assert_int_equal(build(&f, c, 2), ncclInvalidArgument);
  fx_fini(&f);
  /* Adjacent is fine. */
  fx_init(&f, 0);
  c[1].recvbuff = buf + 400;
  assert_int_equal(build(&f, c, 2), ncclSuccess);
  assert_int_equal(f.ws.n, 1);
  fx_fini(&f);
}

/* More transfers per pair than one round holds (3 ranks: 1365 per pair
 * and direction and batch). The calls interleave the three streams, so
 * the batches are per pair, not per call index. */
static void test_p2p_batches(void **state) {
  (void)state;
  enum { NS2 = 5000, NS0 = 3000, NR0 = 2000, NC = NS2 + NS0 + NR0, M = 1365 };
  fixture_t f;
  fx_init(&f, 0);
  assert_int_equal(brd_works_p2p_batch_ops(N, 0), M);
  assert_int_equal(brd_works_p2p_batch_ops(2, 4096), 2048);
  assert_int_equal(brd_works_p2p_batch_ops(8192, 4096), 1);
  assert_int_equal(brd_works_p2p_batch_ops(4, 48), 12);  /* CUDA's figure */
  assert_int_equal(brd_works_p2p_batch_ops(64, 48), 1);
  brd_call_t *c = calloc(NC, sizeof(*c));
  assert_non_null(c);
  char *sb2 = fake(0x7000000000ull), *sb0 = fake(0x7100000000ull),
       *rb0 = fake(0x7200000000ull);
  int k2 = 0, k0 = 0, kr = 0;
  for (int i = 0; i < NC; i++) {
    /* A cycle of send-to-2, send-to-0, recv-from-0, send-to-2, ... until a
     * stream is used up. */
    int pick = i % 3;
    if (pick == 2 && kr == NR0) pick = 0;
    if (pick == 1 && k0 == NS0) pick = 0;
    if (pick == 0 && k2 == NS2) pick = k0 < NS0 ? 1 : 2;
    if (pick == 0) {
      c[i] = call(BRD_COLL_SEND, sb2 + (size_t)k2++ * 4096, NULL, 250); /* 1000 bytes */
      c[i].root = 2;
    } else if (pick == 1) {
      c[i] = call(BRD_COLL_SEND, sb0 + (size_t)k0++ * 4096, NULL, 25); /* 100 bytes */
      c[i].root = 0;
    } else {
      c[i] = call(BRD_COLL_RECV, NULL, rb0 + (size_t)kr++ * 4096, 50); /* 200 bytes */
      c[i].root = 0;
    }
  }
  assert_int_equal(k2, NS2);
  assert_int_equal(k0, NS0);
  assert_int_equal(kr, NR0);
  assert_int_equal(build(&f, c, NC), ncclSuccess);
  /* ceil(5000 / 1365) = 4 batches of one round each (one piece per send). */
  assert_int_equal(f.ws.n, 4);
  static const int to2[4] = {1365, 1365, 1365, 905}, to0[4] = {1365, 1365, 270, 0},
                   from0[4] = {1365, 635, 0, 0};
  uint64_t e2 = 0, e0 = 0;
  for (int b = 0; b < 4; b++) {
    const brd_work_t *w = &f.ws.w[b];
    assert_true(w->p2p);
    assert_int_equal(w->args.n_in_segs, to2[b] + to0[b]);
    assert_int_equal(w->args.n_out_segs, from0[b]);
    /* Sends of the batch in call order: each stream's next ones. */
    int j2 = 0, j0 = 0;
    for (uint32_t j = 0; j < w->args.n_in_segs; j++) {
      const brd_exec_seg_t *sg = &w->args.in_segs[j];
      char *p = (char *)sg->ptr;
      if (p >= sb2 && p < sb0) {
        assert_ptr_equal(p, sb2 + ((size_t)b * M + (size_t)j2++) * 4096);
        assert_int_equal(sg->count, 1000);
      } else {
        assert_ptr_equal(p, sb0 + ((size_t)b * M + (size_t)j0++) * 4096);
        assert_int_equal(sg->count, 100);
      }
    }
    assert_int_equal(j2, to2[b]);
    assert_int_equal(j0, to0[b]);
    for (int j = 0; j < from0[b]; j++) {
      assert_ptr_equal(w->args.out_segs[j].ptr, rb0 + ((size_t)b * M + (size_t)j) * 4096);
      assert_int_equal(w->args.out_segs[j].count, 200);
    }
    /* Per-pair sequence numbers: one piece per transfer. */
    int ch2 = chan_of(w, 2), ch0 = chan_of(w, 0);
    assert_true(ch2 >= 0);
    assert_int_equal(w->chan_epoch[ch2], e2);
    e2 += (uint64_t)to2[b];
    if (to0[b] + from0[b] > 0) {
      assert_true(ch0 >= 0);
      assert_int_equal(w->chan_epoch[ch0], e0);
      e0 += (uint64_t)(to0[b] > from0[b] ? to0[b] : from0[b]);
    } else {
      assert_int_equal(ch0, -1);
    }
  }
  assert_int_equal(f.cursor[2], NS2);
  assert_int_equal(f.cursor[0], 1365 + 1365 + 270);
  fx_fini(&f);

  /* A snapshot follows its send into its batch's round only: send 1366
   * to rank 2 (the second of batch 1) overlaps a receive. */
  fx_init(&f, 0);
  c[0] = call(BRD_COLL_RECV, NULL, sb2 + 1366 * 4096 + 8, 2); /* inside send 1366 */
  c[0].root = 0;
  for (int i = 0; i < 1400; i++) {
    c[1 + i] = call(BRD_COLL_SEND, sb2 + (size_t)i * 4096, NULL, 250);
    c[1 + i].root = 2;
  }
  assert_int_equal(build(&f, c, 1401), ncclSuccess);
  assert_int_equal(f.ws.n, 2);
  assert_int_equal(f.ws.nsnaps, 1);
  assert_int_equal(f.ws.snaps[0].send, 1366);
  char *copy = fake(0x7700000000ull);
  brd_works_snap_use(&f.ws, 0, copy);
  /* Send 1366 is the second send of batch 1 (1366 - 1365). */
  assert_int_equal(f.ws.w[1].args.n_in_segs, 35);
  assert_ptr_equal(f.ws.w[1].args.in_segs[1].ptr, copy);
  assert_ptr_equal(f.ws.w[1].args.in_segs[0].ptr, sb2 + 1365 * 4096);
  assert_ptr_equal(f.ws.w[1].args.in_segs[2].ptr, sb2 + 1367 * 4096);
  for (int j = 0; j < M; j++)
    assert_ptr_equal(f.ws.w[0].args.in_segs[j].ptr, sb2 + (size_t)j * 4096);
  fx_fini(&f);

  /* CUDA's figure, 48 segments per work: 16 per pair on 3 ranks, so 40
   * sends to rank 2 are batches of 16, 16 and 8. */
  fx_init(&f, 0);
  f.v.p2p_round_ops = 48;
  f.v.device_seq = 1;
  assert_int_equal(build(&f, c + 1, 40), ncclSuccess);
  assert_int_equal(f.ws.n, 3);
  static const uint32_t cuda_n[3] = {16, 16, 8};
  for (int b = 0; b < 3; b++) {
    assert_int_equal(f.ws.w[b].args.n_in_segs, cuda_n[b]);
    assert_ptr_equal(f.ws.w[b].args.in_segs[0].ptr, sb2 + (size_t)b * 16 * 4096);
  }
  fx_fini(&f);
  free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pieces_allreduce),
      cmocka_unit_test(test_pieces_allgather_device_seq),
      cmocka_unit_test(test_inplace_allgather_staged),
      cmocka_unit_test(test_inplace_reducescatter_registered),
      cmocka_unit_test(test_registered_output),
      cmocka_unit_test(test_registered_output_exchanged),
      cmocka_unit_test(test_ll_scratch_apart),
      cmocka_unit_test(test_zero_copy_input),
      cmocka_unit_test(test_p2p_rounds),
      cmocka_unit_test(test_p2p_overlaps),
      cmocka_unit_test(test_p2p_batches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
