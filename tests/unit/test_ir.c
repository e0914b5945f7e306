/*
 * Unit tests for the plan IR (src/device/ir.h) and the plan module
 * (src/plan/plan.c): the binary layout against a hand-written table, the
 * blob being self-contained and relocatable, the builder's channel
 * handling and op splitting, the launch layout (chunks tile the buffer
 * exactly, 16-byte aligned, within one slot), epoch reservation, the
 * collective traits and op classes against hand-written tables, and the
 * shared addressing of device/ir_addr.h against hand-computed addresses.
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
#include "device/ir.h"
#include "device/ir_addr.h"
#include "plan/plan.h"
#include "plan/verify.h"

#define REF(buf, peer, idx) brd_plan_ref((buf), (peer), (idx))

/* ---- binary layout: the contract with the CUDA executor ------------------- */

static void test_struct_layout(void **state) {
  (void)state;
  assert_int_equal(sizeof(brd_ir_ref_t), 4);
  assert_int_equal(offsetof(brd_ir_ref_t, buf), 0);
  assert_int_equal(offsetof(brd_ir_ref_t, chan), 1);
  assert_int_equal(offsetof(brd_ir_ref_t, index), 2);
  assert_int_equal(sizeof(brd_ir_op_t), 64);
  assert_int_equal(offsetof(brd_ir_op_t, code), 0);
  assert_int_equal(offsetof(brd_ir_op_t, flags), 1);
  assert_int_equal(offsetof(brd_ir_op_t, nsrc), 2);
  assert_int_equal(offsetof(brd_ir_op_t, ndst), 3);
  assert_int_equal(offsetof(brd_ir_op_t, chunk), 4);
  assert_int_equal(offsetof(brd_ir_op_t, nchunks), 6);
  assert_int_equal(offsetof(brd_ir_op_t, k), 8);
  assert_int_equal(offsetof(brd_ir_op_t, k_src), 12);
  assert_int_equal(offsetof(brd_ir_op_t, ref), 16);
  assert_int_equal(sizeof(brd_ir_plan_t), 64);
  assert_int_equal(offsetof(brd_ir_plan_t, magic), 0);
  assert_int_equal(offsetof(brd_ir_plan_t, version), 4);
  assert_int_equal(offsetof(brd_ir_plan_t, proto), 6);
  assert_int_equal(offsetof(brd_ir_plan_t, algo), 7);
  assert_int_equal(offsetof(brd_ir_plan_t, total_bytes), 8);
  assert_int_equal(offsetof(brd_ir_plan_t, nranks), 12);
  assert_int_equal(offsetof(brd_ir_plan_t, nblocks), 14);
  assert_int_equal(offsetof(brd_ir_plan_t, nchunks), 16);
  assert_int_equal(offsetof(brd_ir_plan_t, nslots), 20);
  assert_int_equal(offsetof(brd_ir_plan_t, slot_div), 24);
  assert_int_equal(offsetof(brd_ir_plan_t, nsems), 28);
  assert_int_equal(offsetof(brd_ir_plan_t, seq_per_iter), 32);
  assert_int_equal(offsetof(brd_ir_plan_t, nchans), 36);
  assert_int_equal(offsetof(brd_ir_plan_t, nops), 40);
  assert_int_equal(offsetof(brd_ir_plan_t, rank_off), 44);
  assert_int_equal(offsetof(brd_ir_plan_t, block_off), 48);
  assert_int_equal(offsetof(brd_ir_plan_t, chan_off), 52);
  assert_int_equal(offsetof(brd_ir_plan_t, op_off), 56);
  assert_int_equal(offsetof(brd_ir_plan_t, coll), 60);
  assert_int_equal(sizeof(brd_ir_rank_t), 8);
  assert_int_equal(sizeof(brd_ir_block_t), 8);
  assert_int_equal(sizeof(brd_ir_chan_t), 8);
  /* "BIRD" in memory order. */
  uint32_t magic = BRD_IR_MAGIC;
  assert_memory_equal(&magic, "BIRD", 4);
}

/* ---- builder and blob ------------------------------------------------------ */

static brd_plan_builder_t *small_builder(void) {
  brd_plan_shape_t shape = {.nranks = 3, .nblocks = 2, .nchunks = 6, .nslots = 4,
                            .slot_div = 2, .nsems = 3, .seq_per_iter = 2,
                            .proto = BRD_IR_PROTO_SIMPLE, .algo = BRD_IR_ALGO_RING,
                            .coll = BRD_IR_COLL_ALLREDUCE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  return b;
}

static void test_builder_blob(void **state) {
  (void)state;
  brd_plan_builder_t *b = small_builder();
  /* Rank 1 talks to 2, then 0, then 2 again: two channels, in that order. */
  uint8_t c;
  assert_int_equal(brd_plan_chan_get(b, 1, 2, &c), ncclSuccess);
  assert_int_equal(c, 0);
  assert_int_equal(brd_plan_chan_get(b, 1, 0, &c), ncclSuccess);
  assert_int_equal(c, 1);
  assert_int_equal(brd_plan_chan_get(b, 1, 2, &c), ncclSuccess);
  assert_int_equal(c, 0);
  assert_int_equal(brd_plan_chan_get(b, 1, 1, &c), ncclInternalError);
  assert_int_equal(brd_plan_chan_get(b, 1, 3, &c), ncclInternalError);
  assert_int_equal(brd_plan_op_sync(b, 1, 1, BRD_IR_OP_SIGNAL, 0, 2, 1), ncclSuccess);
  assert_int_equal(brd_plan_op_sync(b, 2, 0, BRD_IR_OP_WAIT, 1, 1, -3), ncclSuccess);
  assert_int_equal(brd_plan_op_barrier(b, 0, 1), ncclSuccess);
  brd_plan_ref_t src = REF(BRD_IR_BUF_INPUT, -1, 5);
  brd_plan_ref_t dst[2] = {REF(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, 2, 3),
                           REF(BRD_IR_BUF_OUTPUT, -1, 5)};
  assert_int_equal(brd_algos_move(b, 1, 1, BRD_IR_OP_PKT_REDUCE, BRD_IR_F_POSTOP, 5,
                                  7, 8, 1, &src, 2, dst),
                   ncclSuccess);
  assert_int_equal(brd_plan_op_barrier(b, 3, 0), ncclInternalError);
  assert_int_equal(brd_plan_op_barrier(b, 0, 2), ncclInternalError);

  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);

  assert_int_equal(p->magic, BRD_IR_MAGIC);
  assert_int_equal(p->version, BRD_IR_VERSION);
  assert_int_equal(p->nranks, 3);
  assert_int_equal(p->nblocks, 2);
  assert_int_equal(p->nchunks, 6);
  assert_int_equal(p->nslots, 4);
  assert_int_equal(p->nsems, 3);
  assert_int_equal(p->seq_per_iter, 2);
  assert_int_equal(p->nops, 4);
  assert_int_equal(p->nchans, 3); /* rank 1: {2, 0}; rank 2: {1} */
  /* Sections start on 64-byte boundaries, the ops last, filling the blob. */
  assert_int_equal(p->rank_off % 64, 0);
  assert_int_equal(p->block_off % 64, 0);
  assert_int_equal(p->chan_off % 64, 0);
  assert_int_equal(p->op_off % 64, 0);
  assert_int_equal(p->total_bytes, p->op_off + 4 * sizeof(brd_ir_op_t));
  assert_int_equal(brd_ir_plan_rank(p, 0)->nchans, 0);
  assert_int_equal(brd_ir_plan_rank(p, 1)->nchans, 2);
  assert_int_equal(brd_ir_plan_chan(p, 1, 0)->peer, 2);
  assert_int_equal(brd_ir_plan_chan(p, 1, 1)->peer, 0);
  assert_int_equal(brd_ir_plan_chan(p, 2, 0)->peer, 1);
  assert_int_equal(brd_ir_plan_chan(p, 1, 0)->type, BRD_IR_CHAN_MEMORY);

  assert_int_equal(brd_ir_plan_block(p, 0, 0)->nops, 0);
  assert_int_equal(brd_ir_plan_block(p, 0, 1)->nops, 1);
  assert_int_equal(brd_ir_plan_ops(p, 0, 1)->code, BRD_IR_OP_BARRIER);
  const brd_ir_op_t *o = brd_ir_plan_ops(p, 1, 1);
  assert_int_equal(brd_ir_plan_block(p, 1, 1)->nops, 2);
  assert_int_equal(o[0].code, BRD_IR_OP_SIGNAL);
  assert_int_equal(o[0].ndst, 1);
  assert_int_equal(o[0].ref[0].buf, BRD_IR_BUF_SEM);
  assert_int_equal(o[0].ref[0].chan, 1); /* to rank 0 */
  assert_int_equal(o[0].ref[0].index, 2);
  assert_int_equal(o[0].k, 1);
  assert_int_equal(o[1].code, BRD_IR_OP_PKT_REDUCE);
  assert_int_equal(o[1].flags, BRD_IR_F_POSTOP);
  assert_int_equal(o[1].nsrc, 1);
  assert_int_equal(o[1].ndst, 2);
  assert_int_equal(o[1].chunk, 5);
  assert_int_equal(o[1].nchunks, 1);
  assert_int_equal(o[1].k, 7);
  assert_int_equal(o[1].k_src, 8);
  assert_int_equal(o[1].ref[0].chan, BRD_IR_CHAN_LOCAL);
  assert_int_equal(o[1].ref[1].buf, BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL);
  assert_int_equal(o[1].ref[1].chan, 0); /* to rank 2 */
  assert_int_equal(o[1].ref[1].index, 3);
  const brd_ir_op_t *w = brd_ir_plan_ops(p, 2, 0);
  assert_int_equal(w->code, BRD_IR_OP_WAIT);
  assert_int_equal(w->nsrc, 1);
  assert_int_equal(w->k, -3);

  /* Relocation: a copy elsewhere reads the same after the original is
   * gone (no pointers inside the blob). */
  brd_ir_plan_t *copy;
  assert_int_equal(brd_plan_clone(p, &copy), ncclSuccess);
  assert_ptr_not_equal(copy, p);
  assert_memory_equal(copy, p, p->total_bytes);
  brd_plan_destroy(p);
  assert_int_equal(brd_ir_plan_ops(copy, 1, 1)[1].k_src, 8);
  assert_int_equal(brd_ir_plan_chan(copy, 1, 1)->peer, 0);
  brd_plan_destroy(copy);
  brd_plan_destroy(NULL);
  brd_plan_builder_destroy(NULL);
}

static void test_relocated_plan_verifies(void **state) {
  (void)state;
  brd_algos_args_t args = {5, NULL, 2, BRD_IR_PROTO_LL};
  brd_ir_plan_t *p;
  assert_int_equal(brd_algos_ring_allreduce(&args, &p), ncclSuccess);
  /* Into a larger buffer, at a 64-byte offset, with junk around it. */
  char *area = aligned_alloc(64, p->total_bytes + 128);
  assert_non_null(area);
  memset(area, 0x5a, p->total_bytes + 128);
  memcpy(area + 64, p, p->total_bytes);
  brd_plan_destroy(p);
  brd_verify_report_t rep;
  assert_int_equal(brd_plan_verify((brd_ir_plan_t *)(area + 64), NULL, &rep), ncclSuccess);
  free(area);
}

static void test_builder_bad_shapes(void **state) {
  (void)state;
  brd_plan_shape_t ok = {.nranks = 2, .nblocks = 1, .nchunks = 2, .slot_div = 1,
                         .seq_per_iter = 1};
  brd_plan_builder_t *b;
  brd_plan_shape_t s = ok;
  s.nranks = 0;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclInvalidArgument);
  s = ok;
  s.nblocks = 0;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclInvalidArgument);
  s = ok;
  s.seq_per_iter = 0;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclInvalidArgument);
  s = ok;
  s.nchunks = 65536;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclInvalidArgument);
  s = ok;
  s.nslots = 4;
  s.slot_div = 0;
  assert_int_equal(brd_plan_builder_create(&s, &b), ncclInvalidArgument);
  assert_int_equal(brd_plan_builder_create(&ok, &b), ncclSuccess);
  brd_plan_builder_destroy(b);
}

/* A move with many destinations repeats the op over groups that fit; one
 * with many sources accumulates groups into its first destination and
 * keeps the post-op for the last pass. */
static void test_move_splitting(void **state) {
  (void)state;
  brd_plan_shape_t shape = {.nranks = 30, .nblocks = 1, .nchunks = 1, .nslots = 40,
                            .slot_div = 1, .seq_per_iter = 1,
                            .proto = BRD_IR_PROTO_SIMPLE};
  brd_plan_builder_t *b;
  assert_int_equal(brd_plan_builder_create(&shape, &b), ncclSuccess);
  brd_plan_ref_t src[25], dst[20];
  src[0] = REF(BRD_IR_BUF_INPUT, -1, 0);
  for (int i = 1; i < 25; i++) src[i] = REF(BRD_IR_BUF_SCRATCH, -1, (uint32_t)i);
  for (int i = 0; i < 20; i++) dst[i] = REF(BRD_IR_BUF_OUTPUT, i + 1, 0);
  /* 1 source, 20 remote destinations: 11 + 9. */
  assert_int_equal(brd_algos_move(b, 0, 0, BRD_IR_OP_PUT, 0, 0, 0, 0, 1, src, 20, dst),
                   ncclSuccess);
  /* 25 sources into the output and 3 peers' outputs: 11 sources into the
   * output, then output + 10, then output + the last 4 into all four. */
  brd_plan_ref_t rdst[4] = {REF(BRD_IR_BUF_OUTPUT, -1, 0), dst[0], dst[1], dst[2]};
  assert_int_equal(brd_algos_move(b, 0, 0, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 0, 0, 0,
                                  25, src, 4, rdst),
                   ncclSuccess);
  /* 25 sources, 9 destinations: the last group no longer fits with all
   * destinations, so a final one-source pass fans out. */
  brd_plan_ref_t wide[9];
  wide[0] = REF(BRD_IR_BUF_OUTPUT, -1, 0);
  for (int i = 1; i < 9; i++) wide[i] = dst[i];
  assert_int_equal(brd_algos_move(b, 0, 0, BRD_IR_OP_REDUCE, BRD_IR_F_POSTOP, 0, 0, 0,
                                  25, src, 9, wide),
                   ncclSuccess);
  /* Accumulating needs a local plain first destination. */
  assert_int_equal(brd_algos_move(b, 0, 0, BRD_IR_OP_REDUCE, 0, 0, 0, 0, 25, src, 1,
                                  &dst[0]),
                   ncclInternalError);
  brd_ir_plan_t *p;
  assert_int_equal(brd_plan_builder_finish(b, &p), ncclSuccess);
  brd_plan_builder_destroy(b);
  const brd_ir_op_t *o = brd_ir_plan_ops(p, 0, 0);
  static const struct { int nsrc, ndst, post, first_src_is_acc; } want[] = {
      {1, 11, 0, 0}, {1, 9, 0, 0},                      /* PUT */
      {11, 1, 0, 0}, {11, 1, 0, 1}, {5, 4, 1, 1},       /* REDUCE, 4 dsts */
      {11, 1, 0, 0}, {11, 1, 0, 1}, {5, 1, 0, 1}, {1, 9, 1, 1}, /* 9 dsts */
  };
  assert_int_equal(brd_ir_plan_block(p, 0, 0)->nops, sizeof(want) / sizeof(want[0]));
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    assert_int_equal(o[i].nsrc, want[i].nsrc);
    assert_int_equal(o[i].ndst, want[i].ndst);
    assert_int_equal(!!(o[i].flags & BRD_IR_F_POSTOP), want[i].post);
    if (want[i].first_src_is_acc) {
      assert_int_equal(o[i].ref[0].buf, BRD_IR_BUF_OUTPUT);
      assert_int_equal(o[i].ref[0].chan, BRD_IR_CHAN_LOCAL);
    }
  }
  /* Every source appears exactly once across a chain. */
  int seen[25] = {0};
  for (int i = 2; i <= 4; i++) {
    for (int s = 0; s < o[i].nsrc; s++) {
      if (o[i].ref[s].buf == BRD_IR_BUF_INPUT) seen[0]++;
      else if (o[i].ref[s].buf == BRD_IR_BUF_SCRATCH) seen[o[i].ref[s].index]++;
    }
  }
  for (int i = 0; i < 25; i++) assert_int_equal(seen[i], 1);
  brd_plan_destroy(p);
}

/* ---- launch layout ---------------------------------------------------------- */

static void check_tiling(const brd_ir_plan_t *p, size_t count, int dtype,
                         size_t scratch) {
  brd_plan_layout_t l;
  assert_int_equal(brd_plan_layout_init(p, count, dtype, scratch, &l), ncclSuccess);
  size_t esize = l.esize;
  assert_int_equal(l.align * esize, 16);
  if (p->nslots > 0) {
    size_t data = p->proto == BRD_IR_PROTO_LL ? l.slot_bytes / 2 : l.slot_bytes;
    assert_true(l.chunk_max * esize <= data);
    assert_int_equal(l.slot_bytes % 16, 0);
    assert_true(l.half_bytes >= l.slot_bytes * p->nslots);
  }
  assert_int_equal(l.chunk_max % l.align, 0);
  assert_int_equal(l.window, l.chunk_max * p->nchunks);
  assert_int_equal(l.niter, count ? (count + l.window - 1) / l.window : 0);
  size_t next = 0;
  for (uint64_t it = 0; it < l.niter; it++) {
    for (uint32_t c = 0; c < p->nchunks; c++) {
      size_t start, n;
      brd_plan_layout_chunk(&l, it, c, &start, &n);
      if (n == 0) continue;
      assert_int_equal(start, next); /* contiguous, in order, no overlap */
      assert_true(n <= l.chunk_max);
      assert_int_equal(start % l.align, 0);
      next = start + n;
    }
  }
  assert_int_equal(next, count);
}

static void test_layout_tiles_buffer(void **state) {
  (void)state;
  brd_algos_args_t args = {5, NULL, 3, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *ring, *ll, *single;
  assert_int_equal(brd_algos_ring_allreduce(&args, &ring), ncclSuccess);
  args.proto = BRD_IR_PROTO_LL;
  assert_int_equal(brd_algos_oneshot_allreduce(&args, &ll), ncclSuccess);
  args.nranks = 1;
  assert_int_equal(brd_algos_tree_allreduce(&args, &single), ncclSuccess);
  static const size_t counts[] = {0, 1, 2, 7, 15, 16, 17, 1023, 4096, 100003, 1000003};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      check_tiling(ring, counts[i], dt, 2 * ring->nslots * 1024);
      check_tiling(ll, counts[i], dt, 2 * ll->nslots * 512);
      check_tiling(single, counts[i], dt, 0);
    }
  }
  /* Small counts: only the first chunks get data, 16 bytes each. */
  brd_plan_layout_t l;
  assert_int_equal(brd_plan_layout_init(ring, 7, ncclFloat32, 2 * ring->nslots * 1024, &l),
                   ncclSuccess);
  size_t s, n;
  brd_plan_layout_chunk(&l, 0, 0, &s, &n);
  assert_int_equal(s, 0);
  assert_int_equal(n, 4);
  brd_plan_layout_chunk(&l, 0, 1, &s, &n);
  assert_int_equal(s, 4);
  assert_int_equal(n, 3);
  brd_plan_layout_chunk(&l, 0, 2, &s, &n);
  assert_int_equal(n, 0);
  /* Errors: a scratch without 16 data bytes per slot, a bad datatype. */
  assert_int_equal(brd_plan_layout_init(ring, 10, ncclFloat32, 2 * ring->nslots * 8, &l),
                   ncclInternalError);
  assert_int_equal(brd_plan_layout_init(ring, 10, ncclFloat32, 2 * ring->nslots * 16, &l),
                   ncclSuccess);
  assert_int_equal(brd_plan_layout_init(ll, 10, ncclFloat32, 2 * ll->nslots * 16, &l),
                   ncclInternalError); /* LL: 8 data bytes per 16 */
  assert_int_equal(brd_plan_layout_init(ring, 10, 12, 1 << 20, &l), ncclInvalidArgument);
  brd_plan_destroy(ring);
  brd_plan_destroy(ll);
  brd_plan_destroy(single);
}

/* The loop construct: one plan serves every size; only the iteration count
 * grows with the message. */
static void test_loop_construct(void **state) {
  (void)state;
  brd_algos_args_t args = {8, NULL, 4, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *p;
  assert_int_equal(brd_algos_ring_allreduce(&args, &p), ncclSuccess);
  size_t scratch = 2 * (size_t)p->nslots * (1 << 20); /* 1 MiB slots */
  brd_plan_layout_t mb, gb;
  assert_int_equal(brd_plan_layout_init(p, (1 << 20) / 4, ncclFloat32, scratch, &mb),
                   ncclSuccess);
  assert_int_equal(brd_plan_layout_init(p, ((size_t)1 << 30) / 4, ncclFloat32, scratch, &gb),
                   ncclSuccess);
  /* 32 chunks of at most 1 MiB per window: 1 MiB fits one iteration; 1 GiB
   * takes 1024 / 32 = 32 full ones. */
  assert_int_equal(mb.niter, 1);
  assert_int_equal(gb.niter, 32);
  assert_int_equal(gb.chunk_max, (1 << 20) / 4);
  assert_int_equal(brd_plan_epoch_span(p, &gb), 32 * p->seq_per_iter);
  check_tiling(p, ((size_t)1 << 30) / 4 + 5, ncclFloat32, scratch);
  brd_plan_destroy(p);
}

/* ---- epochs ---------------------------------------------------------------- */

static void test_epoch_reserve(void **state) {
  (void)state;
  const uint64_t wrap = (uint64_t)1 << 32;
  uint64_t cur = 0;
  assert_int_equal(brd_plan_epoch_reserve(&cur, 10), 0);
  assert_int_equal(cur, 10);
  assert_int_equal(brd_plan_epoch_reserve(&cur, 0), 10);
  assert_int_equal(cur, 10);
  cur = wrap - 5;
  assert_int_equal(brd_plan_epoch_reserve(&cur, 4), wrap - 5); /* ends at 2^32 - 1 */
  assert_int_equal(cur, wrap - 1);
  assert_int_equal(brd_plan_epoch_reserve(&cur, 1), wrap); /* would reach 2^32 */
  assert_int_equal(cur, wrap + 1);
  cur = 3 * wrap - 2;
  assert_int_equal(brd_plan_epoch_reserve(&cur, 100), 3 * wrap);
  assert_int_equal(cur, 3 * wrap + 100);
  /* Never a flag of 0 inside a launch, for a spread of spans. */
  cur = 0;
  for (int i = 0; i < 100000; i++) {
    uint64_t span = (uint64_t)(i % 97) * 1000003u;
    uint64_t before = cur;
    uint64_t e = brd_plan_epoch_reserve(&cur, span);
    assert_true(e >= before);
    assert_int_equal(cur, e + span);
    /* (e, e + span] holds no multiple of 2^32. */
    assert_true(e / wrap == (e + span) / wrap);
  }
}

/* ---- the IR's rules: collective traits, op classes, addressing ------------ */

/* What each collective means for its buffers, written out by hand from
 * NCCL's definitions (not from ir.h): {rooted, reduction, input holds
 * nranks segments, output holds nranks segments, input on the root only,
 * output on the root only, has input/output}. */
static const struct {
  unsigned coll;
  uint8_t t[7];
} coll_rules[] = {
    {BRD_IR_COLL_ALLREDUCE, {0, 1, 0, 0, 0, 0, 1}},
    {BRD_IR_COLL_ALLGATHER, {0, 0, 0, 1, 0, 0, 1}},
    {BRD_IR_COLL_REDUCESCATTER, {0, 1, 1, 0, 0, 0, 1}},
    {BRD_IR_COLL_BROADCAST, {1, 0, 0, 0, 1, 0, 1}},
    {BRD_IR_COLL_REDUCE, {1, 1, 0, 0, 0, 1, 1}},
    {BRD_IR_COLL_ALLTOALL, {0, 0, 1, 1, 0, 0, 1}},
    {BRD_IR_COLL_GATHER, {1, 0, 0, 1, 0, 1, 1}},
    {BRD_IR_COLL_SCATTER, {1, 0, 1, 0, 1, 0, 1}},
    {BRD_IR_COLL_SENDRECV, {0, 0, 0, 0, 0, 0, 0}},
    {BRD_IR_COLL_COUNT, {0, 0, 0, 0, 0, 0, 0}},
    {200, {0, 0, 0, 0, 0, 0, 0}},
};

static void test_coll_traits(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(coll_rules) / sizeof(coll_rules[0]); i++) {
    unsigned c = coll_rules[i].coll;
    const uint8_t *want = coll_rules[i].t;
    brd_ir_coll_traits_t t = brd_ir_coll_traits(c);
    uint8_t got[7] = {t.rooted, t.reduction, t.in_segs_all, t.out_segs_all,
                      t.input_root_only, t.output_root_only, t.has_io};
    for (int f = 0; f < 7; f++) {
      if (got[f] != want[f]) print_error("collective %u field %d: %u, want %u\n", c, f, got[f], want[f]);
      assert_int_equal(got[f], want[f]);
    }
    /* Rank 2 is the root of 4; ranks 0 and 3 are not. */
    for (int r = 0; r < 4; r++) {
      int root = r == 2;
      assert_int_equal(brd_ir_coll_has_input(c, r, 2), want[6] && (!want[4] || root));
      assert_int_equal(brd_ir_coll_has_output(c, r, 2), want[6] && (!want[5] || root));
    }
  }
  /* Spot checks in words: Broadcast reads only the root's input and writes
   * every output; Reduce the other way round; Gather's non-roots have no
   * output at all. */
  assert_false(brd_ir_coll_has_input(BRD_IR_COLL_BROADCAST, 0, 1));
  assert_true(brd_ir_coll_has_output(BRD_IR_COLL_BROADCAST, 0, 1));
  assert_true(brd_ir_coll_has_input(BRD_IR_COLL_REDUCE, 0, 1));
  assert_false(brd_ir_coll_has_output(BRD_IR_COLL_REDUCE, 0, 1));
  assert_false(brd_ir_coll_has_output(BRD_IR_COLL_GATHER, 3, 0));
  assert_true(brd_ir_coll_has_output(BRD_IR_COLL_GATHER, 0, 0));
}

static void test_op_classes(void **state) {
  (void)state;
  /* code: data, sync, runnable (hand-written from ir.h's op list). */
  static const uint8_t want[][4] = {
      {BRD_IR_OP_NOP, 0, 0, 1},        {BRD_IR_OP_COPY, 1, 0, 1},
      {BRD_IR_OP_REDUCE, 1, 0, 1},     {BRD_IR_OP_PUT, 1, 0, 1},
      {BRD_IR_OP_GET, 1, 0, 1},        {BRD_IR_OP_PKT_PUT, 1, 0, 1},
      {BRD_IR_OP_PKT_REDUCE, 1, 0, 1}, {BRD_IR_OP_SIGNAL, 0, 1, 1},
      {BRD_IR_OP_WAIT, 0, 1, 1},       {BRD_IR_OP_BARRIER, 0, 0, 1},
      {BRD_IR_OP_FLUSH, 0, 0, 0},      {BRD_IR_OP_MC_REDUCE, 0, 0, 0},
      {BRD_IR_OP_MC_STORE, 0, 0, 0},   {BRD_IR_OP_MC_RED, 0, 0, 0},
      {BRD_IR_OP_MC_BARRIER, 0, 0, 0}, {BRD_IR_OP_COUNT, 0, 0, 0},
      {255, 0, 0, 0},
  };
  for (unsigned c = 0; c < 256; c++)
    assert_int_equal(brd_ir_op_is_switch(c),
                     c == BRD_IR_OP_MC_REDUCE || c == BRD_IR_OP_MC_STORE ||
                         c == BRD_IR_OP_MC_RED || c == BRD_IR_OP_MC_BARRIER);
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    assert_int_equal(brd_ir_op_is_data(want[i][0]), want[i][1]);
    assert_int_equal(brd_ir_op_is_sync(want[i][0]), want[i][2]);
    assert_int_equal(brd_ir_op_is_runnable(want[i][0]), want[i][3]);
  }
  assert_true(brd_ir_buf_is_io(BRD_IR_BUF_INPUT));
  assert_true(brd_ir_buf_is_io(BRD_IR_BUF_OUTPUT));
  assert_false(brd_ir_buf_is_io(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL));
  assert_false(brd_ir_buf_is_io(BRD_IR_BUF_SEM));
}

/* A view of 100 int32 elements, 2 chunks of at most 8 per window (16 per
 * window, 7 iterations), 64-byte slots, phases 1024 bytes apart. */
static brd_ir_view_t addr_view(void) {
  brd_ir_view_t v;
  memset(&v, 0, sizeof(v));
  v.layout.count = 100;
  v.layout.esize = 4;
  v.layout.align = 4;
  v.layout.chunk_max = 8;
  v.layout.window = 16;
  v.layout.niter = 7;
  v.layout.slot_bytes = 64;
  v.layout.half_bytes = 1024;
  v.layout.nchunks = 2;
  v.in_stride = 100;
  v.out_stride = 100;
  v.seq_per_iter = 3;
  v.epoch = 1000;
  return v;
}

static void test_addressing(void **state) {
  (void)state;
  static char in[4096], out[4096], scratch[4096], seg0[256], seg1[256];
  brd_ir_view_t v = addr_view();
  v.input = in;
  v.output = out;
  v.phase = 1;

  /* Sequence numbers: epoch + iter * seq_per_iter + k; a channel's own
   * epoch for its semaphores; LL flags from the launch's epoch, 32 bits. */
  assert_int_equal(brd_ir_seq_rel(&v, 2, -1), 5);
  assert_int_equal(brd_ir_seq_rel(&v, 0, -2), -2);
  assert_int_equal(brd_ir_sem_value(&v, 1, 2, -1), 1005);
  uint64_t chan_ep[2] = {500, 7000};
  v.chan_epoch = chan_ep;
  assert_int_equal(brd_ir_sem_value(&v, 1, 2, -1), 7005);
  assert_int_equal(brd_ir_sem_value(&v, 0, 0, 2), 502);
  assert_int_equal(brd_ir_ll_flag(&v, 2, -1), 1005);
  v.epoch = ((uint64_t)1 << 32) + 5;
  assert_int_equal(brd_ir_ll_flag(&v, 0, 1), 6);
  v.epoch = 1000;

  /* Slot 3 of phase 1: 1024 + 3 * 64 bytes in. */
  assert_ptr_equal(brd_ir_slot_addr(&v, scratch, 3), scratch + 1024 + 192);
  v.phase = 0;
  assert_ptr_equal(brd_ir_slot_addr(&v, scratch, 3), scratch + 192);

  /* A COPY from slot 3 to output index 3: segment 1, chunk 1. */
  brd_ir_op_t op;
  memset(&op, 0, sizeof(op));
  op.code = BRD_IR_OP_COPY;
  op.nsrc = 1;
  op.ndst = 1;
  op.chunk = 1;
  op.nchunks = 1;
  op.ref[0] = (brd_ir_ref_t){BRD_IR_BUF_SCRATCH, BRD_IR_CHAN_LOCAL, 3};
  op.ref[1] = (brd_ir_ref_t){BRD_IR_BUF_OUTPUT, BRD_IR_CHAN_LOCAL, 3};
  const brd_ir_ref_t *dst = &op.ref[1];

  /* Strided: segment 1 starts 100 elements in; chunk 1 of iteration 0 is
   * elements [8, 16) of it; the last window (iteration 6) holds 4
   * elements, all in chunk 0 (spread 16-byte aligned), so chunk 1 is empty. */
  assert_ptr_equal(brd_ir_local_seg(&v, dst, 1), out + 400);
  assert_int_equal(brd_ir_seg_count(&v, dst, 1), 100);
  assert_ptr_equal(brd_ir_chunk_addr(&v, brd_ir_local_seg(&v, dst, 1), 100, 0, 1),
                   out + 400 + 32);
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 0, 0), 8);
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 6, 0), 0);
  op.chunk = 0;
  op.ref[1].index = 2;
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 6, 0), 4);
  op.chunk = 1;
  op.ref[1].index = 3;

  /* Separate outputs (point-to-point): segment 1 is its own buffer of 20
   * elements, so iteration 1 holds 4 of them, all in chunk 0. A peer's
   * output through a channel keeps the launch's count. */
  brd_exec_seg_t segs[2] = {{seg0, 50}, {seg1, 20}};
  v.out_segs = segs;
  assert_ptr_equal(brd_ir_local_seg(&v, dst, 1), seg1);
  assert_int_equal(brd_ir_seg_count(&v, dst, 1), 20);
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 0, 0), 8);
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 1, 0), 0);
  assert_ptr_equal(brd_ir_chunk_addr(&v, seg1, 20, 1, 0), seg1 + 64);
  brd_ir_ref_t peer_out = {BRD_IR_BUF_OUTPUT, 0, 3};
  assert_int_equal(brd_ir_seg_count(&v, &peer_out, 1), 100);
  /* Inputs stay strided: input segment 2 at 200 elements. */
  brd_ir_ref_t in_ref = {BRD_IR_BUF_INPUT, BRD_IR_CHAN_LOCAL, 4};
  assert_ptr_equal(brd_ir_local_seg(&v, &in_ref, 2), in + 800);
  assert_ptr_equal(brd_ir_seg_at(&v, in, 3, 10), in + 120);

  /* An op with no input or output ref counts the launch's elements. */
  op.ref[1] = (brd_ir_ref_t){BRD_IR_BUF_SCRATCH, 0, 5};
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 1, 0), 8);
  assert_int_equal(brd_ir_op_chunk_len(&v, &op, 6, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_struct_layout),
      cmocka_unit_test(test_builder_blob),
      cmocka_unit_test(test_relocated_plan_verifies),
      cmocka_unit_test(test_builder_bad_shapes),
      cmocka_unit_test(test_move_splitting),
      cmocka_unit_test(test_layout_tiles_buffer),
      cmocka_unit_test(test_loop_construct),
      cmocka_unit_test(test_epoch_reserve),
      cmocka_unit_test(test_coll_traits),
      cmocka_unit_test(test_op_classes),
      cmocka_unit_test(test_addressing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
