/*
 * Unit tests for MSCCL++ execution plans read as Braid plans
 * (src/plan/mscclpp.c), on MSCCL++'s sample plans (../shared/mscclpp-plans
 * or $BRAID_MSCCLPP_PLANS; the tests that need them skip without them) and
 * Braid's own in tests/data/mscclpp:
 *
 *   - allreduce.json (Simple, 8 thread blocks, rlxsignal/rlxwait/rres):
 *     each block's ops, op by op, against a table written from the JSON
 *     (rank r, thread block b reduces chunk 8r + b with the peer's chunk
 *     over GPU channel b, so semaphore b; its signals and waits count 1,
 *     2), plus the input-to-output copy an in-place plan that reads a
 *     peer's buffer starts with. It verifies in place; folded onto 2
 *     blocks it keeps every op and still verifies.
 *   - allreduce_packet.json (LL, ppkt/respkt/upkt): the same, with LL
 *     flags, slots and the slot-reuse credit; verifies.
 *   - The library fields: in place only, 2^64-1 as no limit, a set range.
 *   - reduce_nvls.json (glres on a switch channel over the input buffer):
 *     the buffer staged in scratch slots (a copy in, MC_REDUCE of slot r
 *     through the switch channel on rank r, a copy out); verifies. Out of
 *     place it is refused with the GPU, thread block, op index and op name.
 *   - Malformed or unsupported inputs: a missing field, an unknown op, a
 *     chunk out of range, a refused op (gstorepkt), a remote buffer the
 *     thread block does not reach, another collective, malformed JSON;
 *     each refused with a message naming the file and the place. Braid's
 *     own format is not taken for MSCCL++.
 *   - oop_scratch.json, a hand-written out-of-place Simple plan through
 *     scratch (put, re, put of the result): ops as written plus the
 *     slot-reuse credit; verifies out of place.
 *   - All-gathers (ag_put, ag_packet out of place, ag_get_inplace in
 *     place: the input copied to the rank's block first, as peers read
 *     it; ag_tbg_inplace: puts split over a thread-block group), reduce-scatters (rs_scratch, rs_inplace) and an all-to-all
 *     (a2a_put): segments and chunk indexes, the message range in the
 *     library's bytes, each verified as it declares.
 *   - A pipeline (ar_pipeline) unrolled at the count MSCCL++ runs at its
 *     max_message_size (2; 1 and 8 with other ranges; 3 over 2 chunks, the
 *     last iteration empty), op by op, each verified.
 *   - A refusal per feature still refused (gstorepkt, a flush on a switch
 *     channel, semaphore ops naming no semaphore, tbg_info in a pipeline
 *     or out of range, reuse_resources outside
 *     pipelines, nested pipelines, packets in a pipeline, broadcast, an
 *     in-place all-to-all, a reduce-scatter writing another block in
 *     place), each naming the place; a flush on memory channels is no op.
 *   - Device semaphores (ar_pipeline_sem, MSCCL++'s pipeline shape: 3
 *     thread blocks handing each iteration on with sem_acquire/
 *     sem_release, credits of init_value 2): the barriers each block gets,
 *     op by op against a table worked out by hand from the pairing, on 3
 *     blocks and folded onto 2, each verified; with one credit on gpu 0
 *     the extra barriers, and the deadlock the verifier then finds
 *     (ranks pairing differently), folded a cycle refused. Planted bugs:
 *     a missing sem_release, two acquirers, an unknown semaphore, a
 *     negative init_value refused naming the op; a release moved before
 *     the signal and wait translates and the verifier finds the race at
 *     the reduction. ar_nvls_pipeline_sem (MSCCL++'s own
 *     allreduce_pipeline.json on 2 ranks: switch channel, output_chunks
 *     0 in place, 32 credits): barriers, and each iteration's MC_REDUCE
 *     on the chunk its scratch slot holds; verifies in place on 3 blocks
 *     and folded. A port-channel flush (ag_port_flush) is no op and the
 *     plan verifies.
 *   - Allocation failures while translating (the pipeline, the in-place
 *     all-gather, the semaphore pipeline, each sample where present)
 *     unwind without leaks and return ncclSystemError.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "plan/mscclpp.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/verify.h"

#include "failalloc.h"

/* MSCCL++'s own sample plans are read where the project keeps them
 * (BRAID_MSCCLPP_PLANS, else ../shared/mscclpp-plans from the repository
 * root); tests that need them skip where they are absent. Braid's own
 * hand-written plan is in tests/data/mscclpp. */
#define OWN_DATA "tests/data/mscclpp/"

static void sample_path(const char *file, char *path, size_t n) {
  const char *dir = getenv("BRAID_MSCCLPP_PLANS");
  if (strcmp(file, "allreduce.json") != 0 && strcmp(file, "allreduce_packet.json") != 0 &&
      strcmp(file, "reduce_nvls.json") != 0)
    snprintf(path, n, OWN_DATA "%s", file);
  else
    snprintf(path, n, "%s/%s", dir != NULL && *dir ? dir : "../shared/mscclpp-plans", file);
}

/* Skips the calling test where MSCCL++'s samples are not to be found. */
static void need_samples(void) {
  char path[512];
  sample_path("allreduce.json", path, sizeof(path));
  if (access(path, R_OK) != 0) {
    print_message("SKIP: MSCCL++'s sample plans are not at %s (set BRAID_MSCCLPP_PLANS to "
                  "their directory)\n", path);
    skip();
  }
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *s = malloc(1 << 20);
  size_t n = s ? fread(s, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (s) s[n] = '\0';
  return s;
}

/* The sample text with the first `a` replaced by `b`. */
static char *edited(const char *file, const char *a, const char *b) {
  char path[512];
  sample_path(file, path, sizeof(path));
  char *t = slurp(path);
  assert_non_null(t);
  if (a == NULL) return t;
  char *q = strstr(t, a);
  assert_non_null(q);
  char *u = malloc(strlen(t) + strlen(b) + 1);
  memcpy(u, t, (size_t)(q - t));
  strcpy(u + (q - t), b);
  strcat(u, q + strlen(a));
  free(t);
  return u;
}

/* Parses and translates text; returns the result, the plan in *plan_out. */
static ncclResult_t translate(const char *text, const char *name, int max_blocks,
                              brd_ir_plan_t **plan_out, brd_plan_json_meta_t *meta_out,
                              char *err, size_t errlen) {
  brd_json_t *root = NULL;
  ncclResult_t res = brd_json_parse(text, strlen(text), name, &root, err, errlen);
  if (res != ncclSuccess) return res;
  assert_int_equal(brd_plan_mscclpp_detect(root), 1);
  res = brd_plan_mscclpp_translate(root, name, max_blocks, plan_out, meta_out, err, errlen);
  brd_json_free(root);
  return res;
}

static brd_ir_plan_t *load(const char *file, int max_blocks, brd_plan_json_meta_t *meta) {
  char path[512], err[600];
  int is = 0;
  brd_ir_plan_t *plan = NULL;
  sample_path(file, path, sizeof(path));
  ncclResult_t res = brd_plan_mscclpp_read(path, max_blocks, &is, &plan, meta, err, sizeof(err));
  if (res != ncclSuccess) print_error("%s\n", err);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(is, 1);
  assert_non_null(plan);
  return plan;
}

static void verify_in_place(const brd_ir_plan_t *plan) {
  brd_verify_opts_t opts = {1, 3};
  brd_verify_report_t rep;
  ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
  if (res != ncclSuccess) print_error("%s\n", rep.msg);
  assert_int_equal(res, ncclSuccess);
}

/* Expected refs: {buf, peer (-1 local), index}. */
typedef struct xref {
  int buf, peer, index;
} xref_t;

static void check_ref(const brd_ir_plan_t *p, int rank, const brd_ir_ref_t *r, xref_t x) {
  assert_int_equal(r->buf, x.buf);
  assert_int_equal(r->index, x.index);
  if (x.peer < 0) {
    assert_int_equal(r->chan, BRD_IR_CHAN_LOCAL);
  } else {
    assert_int_not_equal(r->chan, BRD_IR_CHAN_LOCAL);
    assert_int_equal(brd_ir_plan_chan(p, rank, r->chan)->peer, x.peer);
  }
}

#define LLS (BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL)
#define IN BRD_IR_BUF_INPUT
#define OUT BRD_IR_BUF_OUTPUT
#define SEM BRD_IR_BUF_SEM

static void check_sync(const brd_ir_plan_t *p, int rank, const brd_ir_op_t *op, int code,
                       int peer, int sem, int k) {
  assert_int_equal(op->code, code);
  assert_int_equal(op->k, k);
  check_ref(p, rank, &op->ref[0], (xref_t){SEM, peer, sem});
}

static void test_allreduce_simple(void **state) {
  (void)state;
  need_samples();
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("allreduce.json", 0, &meta);
  assert_int_equal(p->nranks, 2);
  assert_int_equal(p->nblocks, 8);
  assert_int_equal(p->nchunks, 16);
  assert_int_equal(p->nslots, 0);
  assert_int_equal(p->proto, BRD_IR_PROTO_SIMPLE);
  assert_int_equal(p->coll, BRD_IR_COLL_ALLREDUCE);
  assert_int_equal(p->nsems, 8); /* 8 channels to the one peer */
  assert_int_equal(p->seq_per_iter, 2);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_YES);
  assert_int_equal(meta.min_bytes, 0);
  assert_int_equal(meta.max_bytes, 0); /* 2^64-1: no limit */
  for (int r = 0; r < 2; r++) {
    assert_int_equal(brd_ir_plan_rank(p, r)->nchans, 1);
    assert_int_equal(brd_ir_plan_chan(p, r, 0)->peer, 1 - r);
    for (int b = 0; b < 8; b++) {
      /* The JSON's 7 ops (rlxsignal, rlxwait, nop, rres, nop, signal,
       * wait), after block 0's input copy and the barrier every block
       * passes before touching the buffers. */
      const brd_ir_op_t *op = brd_ir_plan_ops(p, r, b);
      uint32_t n = brd_ir_plan_block(p, r, b)->nops;
      int pre = b == 0 ? 2 : 1;
      assert_int_equal(n, 7 + pre);
      if (b == 0) {
        assert_int_equal(op[0].code, BRD_IR_OP_COPY);
        assert_int_equal(op[0].nchunks, 16);
        check_ref(p, r, &op[0].ref[0], (xref_t){IN, -1, 0});
        check_ref(p, r, &op[0].ref[1], (xref_t){OUT, -1, 0});
      }
      assert_int_equal(op[pre - 1].code, BRD_IR_OP_BARRIER);
      op += pre;
      int chunk = 8 * r + b, peer = 1 - r;
      check_sync(p, r, &op[0], BRD_IR_OP_SIGNAL, peer, b, 1);
      check_sync(p, r, &op[1], BRD_IR_OP_WAIT, peer, b, 1);
      assert_int_equal(op[2].code, BRD_IR_OP_NOP);
      assert_int_equal(op[3].code, BRD_IR_OP_REDUCE);
      assert_int_equal(op[3].chunk, chunk);
      assert_int_equal(op[3].nchunks, 1);
      assert_int_equal(op[3].nsrc, 2);
      assert_int_equal(op[3].ndst, 2);
      assert_int_equal(op[3].flags, BRD_IR_F_POSTOP);
      check_ref(p, r, &op[3].ref[0], (xref_t){OUT, -1, chunk});
      check_ref(p, r, &op[3].ref[1], (xref_t){OUT, peer, chunk});
      check_ref(p, r, &op[3].ref[2], (xref_t){OUT, -1, chunk});
      check_ref(p, r, &op[3].ref[3], (xref_t){OUT, peer, chunk});
      assert_int_equal(op[4].code, BRD_IR_OP_NOP);
      check_sync(p, r, &op[5], BRD_IR_OP_SIGNAL, peer, b, 2);
      check_sync(p, r, &op[6], BRD_IR_OP_WAIT, peer, b, 2);
    }
  }
  verify_in_place(p);
  brd_plan_destroy(p);

  /* Folded onto 2 blocks: thread blocks 0-3 in block 0, 4-7 in block 1,
   * one after another; nothing lost, still correct. */
  p = load("allreduce.json", 2, NULL);
  assert_int_equal(p->nblocks, 2);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 2 + 4 * 7);
    assert_int_equal(brd_ir_plan_block(p, r, 1)->nops, 1 + 4 * 7);
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 1) + 1;
    assert_int_equal(op[3].chunk, 8 * r + 4);
    assert_int_equal(op[7 + 3].chunk, 8 * r + 5);
    check_sync(p, r, &op[7], BRD_IR_OP_SIGNAL, 1 - r, 5, 1);
  }
  verify_in_place(p);
  brd_plan_destroy(p);
}

static void test_allreduce_packet(void **state) {
  (void)state;
  need_samples();
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("allreduce_packet.json", 0, &meta);
  assert_int_equal(p->nranks, 2);
  assert_int_equal(p->nblocks, 2);
  assert_int_equal(p->nchunks, 4);
  assert_int_equal(p->nslots, 4);
  assert_int_equal(p->proto, BRD_IR_PROTO_LL);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_YES);
  /* LL flag 1; the credit is semaphore 1 (after the channel's 0, unused
   * by signals here) at the iteration's last sequence number, 2. */
  assert_int_equal(p->seq_per_iter, 2);
  assert_int_equal(p->nsems, 2);
  /* From the JSON: gpu 0 tb 0 = ppkt i[2..3] -> peer s[0..1];
   * respkt i[0] + s[0] -> i[0], peer s[2]. gpu 0 tb 1 = respkt i[1] + s[1]
   * -> i[1], peer s[3]; upkt s[2..3] -> i[2..3]. gpu 1: the same with the
   * halves swapped, its tb 0 holding the upkt. */
  for (int r = 0; r < 2; r++) {
    int peer = 1 - r, mine = 2 * r, other = 2 - 2 * r;
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    uint32_t n0 = brd_ir_plan_block(p, r, 0)->nops, n1 = brd_ir_plan_block(p, r, 1)->nops;
    /* copy, barrier, credit wait, JSON ops, barrier, credit signal */
    assert_int_equal(n0, 3 + (r == 0 ? 2 : 3) + 2);
    assert_int_equal(n1, 2 + (r == 0 ? 2 : 1) + 1);
    assert_int_equal(op[0].code, BRD_IR_OP_COPY);
    assert_int_equal(op[1].code, BRD_IR_OP_BARRIER);
    check_sync(p, r, &op[2], BRD_IR_OP_WAIT, peer, 1, 0);
    assert_int_equal(op[3].code, BRD_IR_OP_PKT_PUT);
    assert_int_equal(op[3].chunk, other);
    assert_int_equal(op[3].nchunks, 2);
    assert_int_equal(op[3].k, 1);
    check_ref(p, r, &op[3].ref[0], (xref_t){OUT, -1, other});
    check_ref(p, r, &op[3].ref[1], (xref_t){LLS, peer, 0});
    assert_int_equal(op[4].code, BRD_IR_OP_PKT_REDUCE);
    assert_int_equal(op[4].chunk, mine);
    assert_int_equal(op[4].nsrc, 2);
    assert_int_equal(op[4].ndst, 2);
    assert_int_equal(op[4].k_src, 1);
    assert_int_equal(op[4].flags, BRD_IR_F_POSTOP);
    check_ref(p, r, &op[4].ref[0], (xref_t){OUT, -1, mine});
    check_ref(p, r, &op[4].ref[1], (xref_t){LLS, -1, 0});
    check_ref(p, r, &op[4].ref[2], (xref_t){OUT, -1, mine});
    check_ref(p, r, &op[4].ref[3], (xref_t){LLS, peer, 2});
    const brd_ir_op_t *unpack = r == 0 ? &brd_ir_plan_ops(p, r, 1)[3] : &op[5];
    assert_int_equal(unpack->code, BRD_IR_OP_PKT_REDUCE);
    assert_int_equal(unpack->nsrc, 1);
    assert_int_equal(unpack->flags, 0); /* a copy of the finished value */
    check_ref(p, r, &unpack->ref[0], (xref_t){LLS, -1, 2});
    check_ref(p, r, &unpack->ref[1], (xref_t){OUT, -1, other});
    check_sync(p, r, &op[n0 - 1], BRD_IR_OP_SIGNAL, peer, 1, 2);
    assert_int_equal(op[n0 - 2].code, BRD_IR_OP_BARRIER);
  }
  verify_in_place(p);
  brd_plan_destroy(p);

  /* A set range. */
  char *t = edited("allreduce_packet.json", "\"max_message_size\": 18446744073709551615",
                   "\"max_message_size\": 4096");
  char *u = NULL;
  char err[600];
  assert_int_equal(translate(t, "ranged.json", 0, &p, &meta, err, sizeof(err)), ncclSuccess);
  assert_int_equal(meta.max_bytes, 4096);
  brd_plan_destroy(p);
  u = edited("allreduce_packet.json", "\"min_message_size\": 0", "\"min_message_size\": 8192");
  free(t);
  t = u;
  u = NULL;
  char *v = strstr(t, "18446744073709551615");
  memcpy(v, "4096                ", 20);
  assert_int_equal(translate(t, "backwards.json", 0, &p, &meta, err, sizeof(err)),
                   ncclInvalidArgument);
  assert_non_null(strstr(err, "backwards.json: max_message_size is below min_message_size"));
  free(t);
}

static void test_out_of_place(void **state) {
  (void)state;
  /* oop_scratch.json, rank r (peer q): put input chunk q into q's
   * scratch slot 0, signal, wait, reduce input chunk r with slot 0 into
   * output chunk r, put that into q's output chunk r, signal, wait. */
  char *t = edited("oop_scratch.json", NULL, NULL);
  char err[600];
  brd_ir_plan_t *p = NULL;
  brd_plan_json_meta_t meta;
  ncclResult_t res = translate(t, "oop.json", 0, &p, &meta, err, sizeof(err));
  if (res != ncclSuccess) print_error("%s\n", err);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_NO);
  assert_int_equal(meta.min_bytes, 64);
  assert_int_equal(meta.max_bytes, 1048576);
  assert_int_equal(p->nblocks, 1);
  assert_int_equal(p->nchunks, 2);
  assert_int_equal(p->nslots, 1);
  assert_int_equal(p->seq_per_iter, 3); /* two signals, then the credit */
  for (int r = 0; r < 2; r++) {
    int q = 1 - r;
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 9);
    check_sync(p, r, &op[0], BRD_IR_OP_WAIT, q, 1, 0); /* credit */
    assert_int_equal(op[1].code, BRD_IR_OP_PUT);
    assert_int_equal(op[1].chunk, q);
    check_ref(p, r, &op[1].ref[0], (xref_t){IN, -1, q});
    check_ref(p, r, &op[1].ref[1], (xref_t){BRD_IR_BUF_SCRATCH, q, 0});
    check_sync(p, r, &op[2], BRD_IR_OP_SIGNAL, q, 0, 1);
    check_sync(p, r, &op[3], BRD_IR_OP_WAIT, q, 0, 1);
    assert_int_equal(op[4].code, BRD_IR_OP_REDUCE);
    assert_int_equal(op[4].flags, BRD_IR_F_POSTOP);
    check_ref(p, r, &op[4].ref[0], (xref_t){IN, -1, r});
    check_ref(p, r, &op[4].ref[1], (xref_t){BRD_IR_BUF_SCRATCH, -1, 0});
    check_ref(p, r, &op[4].ref[2], (xref_t){OUT, -1, r});
    assert_int_equal(op[5].code, BRD_IR_OP_PUT);
    check_ref(p, r, &op[5].ref[0], (xref_t){OUT, -1, r});
    check_ref(p, r, &op[5].ref[1], (xref_t){OUT, q, r});
    check_sync(p, r, &op[6], BRD_IR_OP_SIGNAL, q, 0, 2);
    check_sync(p, r, &op[7], BRD_IR_OP_WAIT, q, 0, 2);
    check_sync(p, r, &op[8], BRD_IR_OP_SIGNAL, q, 1, 3);
  }
  brd_verify_opts_t opts = {0, 3};
  brd_verify_report_t rep;
  res = brd_plan_verify(p, &opts, &rep);
  if (res != ncclSuccess) print_error("%s\n", rep.msg);
  assert_int_equal(res, ncclSuccess);
  brd_plan_destroy(p);
  free(t);
}

static void expect_refusal(const char *file, const char *a, const char *b, const char *msg) {
  char *t = edited(file, a, b);
  char err[600] = "";
  brd_ir_plan_t *p = NULL;
  ncclResult_t res = translate(t, "bad.json", 0, &p, NULL, err, sizeof(err));
  if (res == ncclSuccess || strstr(err, msg) == NULL)
    print_error("expected \"%s\", got (%d) \"%s\"\n", msg, res, err);
  assert_int_equal(res, ncclInvalidArgument);
  assert_null(p);
  assert_non_null(strstr(err, "MSCCL++ plan bad.json: "));
  assert_non_null(strstr(err, msg));
  free(t);
}

static void test_nvls(void **state) {
  (void)state;
  need_samples();
  brd_ir_plan_t *p = load("reduce_nvls.json", 0, NULL);
  assert_int_equal(p->nranks, 2);
  assert_int_equal(p->nblocks, 1);
  assert_int_equal(p->nchunks, 2);
  assert_int_equal(p->nslots, 2); /* the staged buffer */
  assert_int_equal(p->algo, BRD_IR_ALGO_NVLS);
  for (int r = 0; r < 2; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    assert_int_equal(rk->nchans, 2);
    int sw = brd_ir_plan_chan(p, r, 0)->type == BRD_IR_CHAN_SWITCH ? 0 : 1;
    assert_int_equal(brd_ir_plan_chan(p, r, sw)->type, BRD_IR_CHAN_SWITCH);
    assert_int_equal(brd_ir_plan_chan(p, r, sw)->peer, BRD_IR_SWITCH_PEER);
    assert_int_equal(brd_ir_plan_chan(p, r, 1 - sw)->peer, 1 - r);
    /* copy in, the JSON's 11 ops, copy out */
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 13);
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(op[0].code, BRD_IR_OP_COPY);
    assert_int_equal(op[0].nchunks, 2);
    check_ref(p, r, &op[0].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[0].ref[1], (xref_t){BRD_IR_BUF_SCRATCH, -1, 0});
    check_sync(p, r, &op[1 + 1], BRD_IR_OP_SIGNAL, 1 - r, 0, 1);
    check_sync(p, r, &op[1 + 3], BRD_IR_OP_WAIT, 1 - r, 0, 1);
    const brd_ir_op_t *g = &op[1 + 5];
    assert_int_equal(g->code, BRD_IR_OP_MC_REDUCE);
    assert_int_equal(g->chunk, r);
    assert_int_equal(g->nsrc, 1);
    assert_int_equal(g->ndst, 1);
    assert_int_equal(g->ref[0].chan, sw);
    assert_int_equal(g->ref[0].index, r);
    assert_int_equal(g->ref[1].chan, sw);
    assert_int_equal(g->ref[1].index, r);
    check_sync(p, r, &op[1 + 7], BRD_IR_OP_SIGNAL, 1 - r, 0, 2);
    check_sync(p, r, &op[1 + 9], BRD_IR_OP_WAIT, 1 - r, 0, 2);
    assert_int_equal(op[12].code, BRD_IR_OP_COPY);
    check_ref(p, r, &op[12].ref[0], (xref_t){BRD_IR_BUF_SCRATCH, -1, 0});
    check_ref(p, r, &op[12].ref[1], (xref_t){OUT, -1, 0});
  }
  verify_in_place(p);
  brd_plan_destroy(p);
}

static void test_malformed(void **state) {
  (void)state;
  need_samples();
  expect_refusal("allreduce_packet.json", "\"input_chunks\": 4", "\"in_chunks\": 4",
                 "gpu 0: missing field \"input_chunks\"");
  expect_refusal("allreduce_packet.json", "\"name\": \"respkt\"", "\"name\": \"frobnicate\"",
                 "gpu 0, thread block 0, op 1 (frobnicate): unknown op name");
  expect_refusal("allreduce_packet.json", "\"name\": \"upkt\"", "\"name\": \"gstorepkt\"",
                 "gpu 0, thread block 1, op 1 (gstorepkt): a switch-channel store of LL packets");
  /* gpu 0 tb 0's ppkt reads i[2..3]: make it i[3..4] of 4 chunks. */
  expect_refusal("allreduce_packet.json", "\"index\": 2,", "\"index\": 3,",
                 "gpu 0, thread block 0, op 0 (ppkt): src_buff[0]: chunks 3..4 of the local "
                 "input buffer, which has 4 chunks");
  /* gpu 0 tb 0's ppkt writes the peer's s[0..1]: make it s[3..4]. */
  expect_refusal("allreduce_packet.json", "\"index\": 0,\n                  \"size\": 2",
                 "\"index\": 3,\n                  \"size\": 2",
                 "gpu 0, thread block 0, op 0 (ppkt): dst_buff[0]: chunks 3..4 of rank 1's "
                 "scratch buffer, which has 4 chunks");
  expect_refusal("allreduce_packet.json", "\"buffer_id\": 0", "\"buffer_id\": 3",
                 "gpu 0, thread block 0, op 0 (ppkt): dst_buff[0]: remote buffer 3 is not one "
                 "the thread block reaches");
  expect_refusal("reduce_nvls.json", "\"inplace\": true", "\"inplace\": false",
                 "gpu 0, thread block 0, op 5 (glres): src_buff[0] goes through a switch "
                 "channel over the input buffer (\"i\") of an out-of-place plan");
  /* upkt's source is packets: in the input buffer Braid cannot hold them. */
  expect_refusal("allreduce_packet.json",
                 "\"type\": \"s\",\n                  \"index\": 2,",
                 "\"type\": \"i\",\n                  \"index\": 2,",
                 "gpu 0, thread block 1, op 1 (upkt): src_buff[0] holds packets in the user's "
                 "buffer");
  expect_refusal("allreduce_packet.json", "\"collective\": \"allreduce\"",
                 "\"collective\": \"allgather\"",
                 "gpu 0: input_chunks 4 and output_chunks 4; an all-gather needs output_chunks "
                 "= ranks x input_chunks");
  expect_refusal("allreduce.json", "\"rres\"", "\"rppkt\"",
                 "gpu 0, thread block 0, op 3 (rppkt): an LL packet op in a plan of protocol "
                 "Simple");
  expect_refusal("allreduce.json", "\"channel_ids\": [", "\"channel_ids\": [4, ",
                 "gpu 0, thread block 0, op 0 (rlxsignal): memory channel 4 is not one of the "
                 "thread block's 1 memory channels");
  /* Malformed JSON: the reader's line and column. */
  char *t = edited("allreduce.json", NULL, NULL);
  t[strlen(t) / 2] = '\0';
  char err[600];
  brd_json_t *root = NULL;
  assert_int_equal(brd_json_parse(t, strlen(t), "cut.json", &root, err, sizeof(err)),
                   ncclInvalidArgument);
  assert_non_null(strstr(err, "cut.json: line "));
  free(t);
  /* Braid's own format is not MSCCL++. */
  const char *own = "{\"format\": \"braid-plan\", \"version\": 1, \"collective\": \"allreduce\", "
                    "\"gpus\": []}";
  assert_int_equal(brd_json_parse(own, strlen(own), "own.json", &root, err, sizeof(err)),
                   ncclSuccess);
  assert_int_equal(brd_plan_mscclpp_detect(root), 0);
  brd_json_free(root);
}

static void verify_as(const brd_ir_plan_t *plan, int in_place) {
  brd_verify_opts_t opts = {in_place, 3};
  brd_verify_report_t rep;
  ncclResult_t res = brd_plan_verify(plan, &opts, &rep);
  if (res != ncclSuccess) print_error("%s\n", rep.msg);
  assert_int_equal(res, ncclSuccess);
}

/* A translation of the file with the first `a` replaced by `b` that must
 * succeed. */
static brd_ir_plan_t *load_edited(const char *file, const char *a, const char *b,
                                  brd_plan_json_meta_t *meta) {
  char *t = edited(file, a, b);
  char err[600] = "";
  brd_ir_plan_t *p = NULL;
  ncclResult_t res = translate(t, file, 0, &p, meta, err, sizeof(err));
  if (res != ncclSuccess) print_error("%s\n", err);
  assert_int_equal(res, ncclSuccess);
  free(t);
  return p;
}

static void test_allgather(void **state) {
  (void)state;
  /* ag_put.json, rank r of 3 (2 chunks each): signal and wait with both
   * peers, copy input 0..1 to output block r (chunks 2r..2r+1), put it
   * into block r of both peers' outputs, signal, wait. */
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("ag_put.json", 0, &meta);
  assert_int_equal(p->coll, BRD_IR_COLL_ALLGATHER);
  assert_int_equal(p->nranks, 3);
  assert_int_equal(p->nchunks, 2); /* a segment's chunks: input_chunks */
  assert_int_equal(p->nslots, 0);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_NO);
  assert_int_equal(meta.min_bytes, 4096); /* 12288 bytes of output over 3 ranks */
  assert_int_equal(meta.max_bytes, 0);
  for (int r = 0; r < 3; r++) {
    int a = r == 0 ? 1 : 0, b = r == 2 ? 1 : 2; /* the peers, in order */
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 10);
    check_sync(p, r, &op[0], BRD_IR_OP_SIGNAL, a, 0, 1);
    check_sync(p, r, &op[1], BRD_IR_OP_SIGNAL, b, 0, 1);
    check_sync(p, r, &op[3], BRD_IR_OP_WAIT, b, 0, 1);
    assert_int_equal(op[4].code, BRD_IR_OP_COPY);
    assert_int_equal(op[4].chunk, 0);
    assert_int_equal(op[4].nchunks, 2);
    check_ref(p, r, &op[4].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[4].ref[1], (xref_t){OUT, -1, 2 * r});
    assert_int_equal(op[5].code, BRD_IR_OP_PUT);
    assert_int_equal(op[5].ndst, 2);
    check_ref(p, r, &op[5].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[5].ref[1], (xref_t){OUT, a, 2 * r});
    check_ref(p, r, &op[5].ref[2], (xref_t){OUT, b, 2 * r});
    check_sync(p, r, &op[9], BRD_IR_OP_WAIT, b, 0, 2);
  }
  verify_as(p, 0);
  brd_plan_destroy(p);

  /* A set max_message_size, also in output bytes. */
  p = load_edited("ag_put.json", "\"max_message_size\": 18446744073709551615",
                  "\"max_message_size\": 36001", &meta);
  assert_int_equal(meta.max_bytes, 12000);
  brd_plan_destroy(p);

  /* ag_put.json declared in place: MSCCL++'s executor then reads the
   * input ("i") as the rank's block of the output, so the copy is one
   * onto itself and goes; the input is copied to the output first. */
  p = load_edited("ag_put.json", "\"inplace\": false", "\"inplace\": true", &meta);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_YES);
  for (int r = 0; r < 3; r++) {
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 10);
    assert_int_equal(op[0].code, BRD_IR_OP_COPY);
    check_ref(p, r, &op[0].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[0].ref[1], (xref_t){OUT, -1, 2 * r});
    assert_int_equal(op[5].code, BRD_IR_OP_PUT);
    check_ref(p, r, &op[5].ref[0], (xref_t){OUT, -1, 2 * r});
  }
  verify_as(p, 1);
  brd_plan_destroy(p);

  /* ag_tbg_inplace.json (1 chunk each, in place, 2 thread blocks): each
   * put is a thread-block group of both, so Braid's chunks are halves and
   * thread block b puts half b of the rank's block, between barriers. As
   * in every in-place all-gather, the input is first copied to the rank's
   * block of the output (block 0, then a barrier of both): the executors
   * may copy every block of a staged output back. */
  p = load("ag_tbg_inplace.json", 0, &meta);
  assert_int_equal(p->nchunks, 2);
  assert_int_equal(meta.max_bytes, 4096);
  for (int r = 0; r < 3; r++) {
    int a = r == 0 ? 1 : 0;
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(op[0].code, BRD_IR_OP_COPY);
    check_ref(p, r, &op[0].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[0].ref[1], (xref_t){OUT, -1, 2 * r});
    for (int b = 0; b < 2; b++) {
      const brd_ir_op_t *put = &brd_ir_plan_ops(p, r, b)[b == 0 ? 5 : 2];
      assert_int_equal(put[-1].code, BRD_IR_OP_BARRIER);
      assert_int_equal(put->code, BRD_IR_OP_PUT);
      assert_int_equal(put->chunk, b);
      assert_int_equal(put->nchunks, 1);
      check_ref(p, r, &put->ref[0], (xref_t){OUT, -1, 2 * r + b});
      check_ref(p, r, &put->ref[1], (xref_t){OUT, a, 2 * r + b});
      assert_int_equal(put[1].code, BRD_IR_OP_BARRIER);
    }
  }
  verify_as(p, 1);
  brd_plan_destroy(p);

  /* ag_packet.json (LL): packets of the input into both peers' scratch,
   * the copy into the own block, the peers' packets unpacked into theirs. */
  p = load("ag_packet.json", 0, &meta);
  assert_int_equal(p->proto, BRD_IR_PROTO_LL);
  assert_int_equal(meta.max_bytes, 65536);
  for (int r = 0; r < 3; r++) {
    int a = r == 0 ? 1 : 0, b = r == 2 ? 1 : 2;
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(op[1].code, BRD_IR_OP_PKT_PUT);
    check_ref(p, r, &op[1].ref[1], (xref_t){LLS, a, 2 * (r < a ? r : r - 1)});
    assert_int_equal(op[5].code, BRD_IR_OP_PKT_REDUCE);
    check_ref(p, r, &op[5].ref[0], (xref_t){LLS, -1, 0});
    check_ref(p, r, &op[5].ref[1], (xref_t){OUT, -1, 2 * a});
    check_ref(p, r, &op[6].ref[1], (xref_t){OUT, -1, 2 * b});
  }
  verify_as(p, 0);
  brd_plan_destroy(p);

  /* ag_get_inplace.json (3 chunks each, in place): thread block k of rank
   * r pulls peer k's block from that peer's output. Reading a peer's
   * buffer, every rank first copies its input to its block of the output
   * (block 0, then a barrier of both blocks). */
  p = load("ag_get_inplace.json", 0, &meta);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_YES);
  assert_int_equal(p->nchunks, 3);
  assert_int_equal(p->nblocks, 2);
  for (int r = 0; r < 3; r++) {
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    assert_int_equal(op[0].code, BRD_IR_OP_COPY);
    check_ref(p, r, &op[0].ref[0], (xref_t){IN, -1, 0});
    check_ref(p, r, &op[0].ref[1], (xref_t){OUT, -1, 3 * r});
    assert_int_equal(op[1].code, BRD_IR_OP_BARRIER);
    for (int k = 0; k < 2; k++) {
      int q = k < r ? k : k + 1;
      const brd_ir_op_t *g = &brd_ir_plan_ops(p, r, k)[k == 0 ? 4 : 3];
      assert_int_equal(g->code, BRD_IR_OP_GET);
      assert_int_equal(g->chunk, 0);
      assert_int_equal(g->nchunks, 3);
      check_ref(p, r, &g->ref[0], (xref_t){OUT, q, 3 * q});
      check_ref(p, r, &g->ref[1], (xref_t){OUT, -1, 3 * q});
    }
  }
  verify_as(p, 1);
  brd_plan_destroy(p);
}

static void test_reducescatter(void **state) {
  (void)state;
  /* rs_scratch.json, rank r of 3 (2 chunks each): put input block q into
   * peer q's scratch (after its slot-reuse credit), signal, wait, reduce
   * block r with the two blocks the peers put into the output. */
  brd_plan_json_meta_t meta;
  for (int ip = 0; ip < 2; ip++) {
    brd_ir_plan_t *p = load(ip ? "rs_inplace.json" : "rs_scratch.json", 0, &meta);
    assert_int_equal(p->coll, BRD_IR_COLL_REDUCESCATTER);
    assert_int_equal(p->nchunks, 2); /* output_chunks */
    assert_int_equal(p->nslots, 4);
    assert_int_equal(meta.inplace, ip ? BRD_PLAN_JSON_INPLACE_YES : BRD_PLAN_JSON_INPLACE_NO);
    for (int r = 0; r < 3; r++) {
      int a = r == 0 ? 1 : 0;
      const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
      assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 11);
      check_sync(p, r, &op[0], BRD_IR_OP_WAIT, a, 1, 0);
      assert_int_equal(op[1].code, BRD_IR_OP_PUT);
      assert_int_equal(op[1].chunk, 0);
      assert_int_equal(op[1].nchunks, 2);
      check_ref(p, r, &op[1].ref[0], (xref_t){IN, -1, 2 * a});
      /* r's slot in a's scratch: r's place among a's peers. */
      check_ref(p, r, &op[1].ref[1], (xref_t){BRD_IR_BUF_SCRATCH, a, 2 * (r < a ? r : r - 1)});
      const brd_ir_op_t *red = &op[8];
      assert_int_equal(red->code, BRD_IR_OP_REDUCE);
      assert_int_equal(red->flags, BRD_IR_F_POSTOP);
      assert_int_equal(red->nsrc, 3);
      check_ref(p, r, &red->ref[0], (xref_t){IN, -1, 2 * r});
      check_ref(p, r, &red->ref[1], (xref_t){BRD_IR_BUF_SCRATCH, -1, 0});
      check_ref(p, r, &red->ref[2], (xref_t){BRD_IR_BUF_SCRATCH, -1, 2});
      check_ref(p, r, &red->ref[3], (xref_t){OUT, -1, 0});
    }
    verify_as(p, ip);
    brd_plan_destroy(p);
  }
}

static void test_alltoall(void **state) {
  (void)state;
  /* a2a_put.json: rank r copies input block r to output block r and puts
   * block q into block r of peer q's output. An all-to-all plan holds in
   * place and out of place alike (the library's rule). */
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("a2a_put.json", 0, &meta);
  assert_int_equal(p->coll, BRD_IR_COLL_ALLTOALL);
  assert_int_equal(p->nchunks, 1);
  assert_int_equal(meta.inplace, BRD_PLAN_JSON_INPLACE_ANY);
  for (int r = 0; r < 3; r++) {
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    int a = r == 0 ? 1 : 0;
    check_ref(p, r, &op[4].ref[0], (xref_t){IN, -1, r});
    check_ref(p, r, &op[4].ref[1], (xref_t){OUT, -1, r});
    assert_int_equal(op[5].code, BRD_IR_OP_PUT);
    check_ref(p, r, &op[5].ref[0], (xref_t){IN, -1, a});
    check_ref(p, r, &op[5].ref[1], (xref_t){OUT, a, r});
  }
  verify_as(p, 0);
  verify_as(p, 1);
  brd_plan_destroy(p);
}

static void test_pipeline(void **state) {
  (void)state;
  /* ar_pipeline.json: a pipeline (unit_size 65536, num_chunks 1) of 8
   * inner ops: put input chunk q to peer q's scratch (two puts), signal,
   * wait, reduce chunk r into the output, put it to both peers' outputs,
   * signal, wait. At its max_message_size (393216 bytes: chunks of 131072)
   * MSCCL++ runs 2 iterations: Braid's chunks are halves, and each
   * iteration moves one half. */
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("ar_pipeline.json", 0, &meta);
  assert_int_equal(meta.max_bytes, 393216);
  assert_int_equal(p->nchunks, 6);
  assert_int_equal(p->nslots, 4);
  assert_int_equal(p->seq_per_iter, 5); /* 2 x 2 signals per channel, the credit */
  for (int r = 0; r < 3; r++) {
    int a = r == 0 ? 1 : 0, b = r == 2 ? 1 : 2;
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 0);
    /* The credit waits before the first writes into each peer's scratch,
     * 2 x 12 ops, the credit signals. */
    assert_int_equal(brd_ir_plan_block(p, r, 0)->nops, 2 + 24 + 2);
    for (int it = 0; it < 2; it++) {
      const brd_ir_op_t *q = it == 0 ? &op[0] : &op[14];
      const brd_ir_op_t *put_a = it == 0 ? &q[1] : &q[0];
      assert_int_equal(put_a->code, BRD_IR_OP_PUT);
      assert_int_equal(put_a->chunk, 2 * a + it);
      assert_int_equal(put_a->nchunks, 1);
      check_ref(p, r, &put_a->ref[0], (xref_t){IN, -1, 2 * a + it});
      check_ref(p, r, &put_a->ref[1],
                (xref_t){BRD_IR_BUF_SCRATCH, a, 2 * (r < a ? r : r - 1) + it});
      const brd_ir_op_t *red = it == 0 ? &q[8] : &q[6];
      assert_int_equal(red->code, BRD_IR_OP_REDUCE);
      assert_int_equal(red->chunk, 2 * r + it);
      check_ref(p, r, &red->ref[0], (xref_t){IN, -1, 2 * r + it});
      check_ref(p, r, &red->ref[1], (xref_t){BRD_IR_BUF_SCRATCH, -1, it});
      check_ref(p, r, &red->ref[2], (xref_t){BRD_IR_BUF_SCRATCH, -1, 2 + it});
      check_ref(p, r, &red->ref[3], (xref_t){OUT, -1, 2 * r + it});
      const brd_ir_op_t *bc = red + 1;
      assert_int_equal(bc->code, BRD_IR_OP_PUT);
      check_ref(p, r, &bc->ref[1], (xref_t){OUT, a, 2 * r + it});
      check_ref(p, r, &bc->ref[2], (xref_t){OUT, b, 2 * r + it});
      /* The signals of iteration it count 2 it + 1 and 2 it + 2. */
      check_sync(p, r, red - 4, BRD_IR_OP_SIGNAL, a, 0, 2 * it + 1);
      check_sync(p, r, bc + 4, BRD_IR_OP_WAIT, b, 0, 2 * it + 2);
    }
    check_sync(p, r, &op[27], BRD_IR_OP_SIGNAL, b, 1, 5);
  }
  verify_as(p, 0);
  brd_plan_destroy(p);

  /* Chunks of 65536 (196608 bytes): one iteration, chunks as written. */
  p = load_edited("ar_pipeline.json", "\"max_message_size\": 393216",
                  "\"max_message_size\": 196608", NULL);
  assert_int_equal(p->nchunks, 3);
  assert_int_equal(p->seq_per_iter, 3);
  verify_as(p, 0);
  brd_plan_destroy(p);
  /* No max_message_size: 8 iterations. */
  p = load_edited("ar_pipeline.json", "\"max_message_size\": 393216",
                  "\"max_message_size\": 18446744073709551615", NULL);
  assert_int_equal(p->nchunks, 24);
  assert_int_equal(p->nslots, 16);
  assert_int_equal(p->seq_per_iter, 17);
  verify_as(p, 0);
  brd_plan_destroy(p);
  /* 3 iterations of num_chunks 2 (chunks of 98304): Braid's chunks are
   * thirds, each iteration two of them. */
  char *t = edited("ar_pipeline.json", "\"max_message_size\": 393216",
                   "\"max_message_size\": 294912");
  int npipes = 0;
  for (char *q = t; (q = strstr(q, "\"num_chunks\": 1")) != NULL; q++, npipes++) q[14] = '2';
  assert_int_equal(npipes, 3);
  char err[600];
  assert_int_equal(translate(t, "p.json", 0, &p, NULL, err, sizeof(err)), ncclSuccess);
  assert_int_equal(p->nchunks, 9);
  assert_int_equal(p->seq_per_iter, 7); /* 3 x 2 signals, the credit */
  verify_as(p, 0);
  /* gpu 0's first put moves input chunk 1 (Braid's 3..5) in iterations
   * of 2: chunks 3..4, then 5 (the ref ends there), then nothing. */
  const brd_ir_op_t *op = brd_ir_plan_ops(p, 0, 0);
  assert_int_equal(op[1].chunk, 3);
  assert_int_equal(op[1].nchunks, 2);
  brd_plan_destroy(p);
  free(t);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refusal("ag_put.json", "\"collective\": \"allgather\"", "\"collective\": \"broadcast\"",
                 "collective \"broadcast\": only \"allreduce\", \"allgather\", \"reducescatter\" "
                 "and \"alltoall\" plans are translated (the format names no broadcast root)");
  expect_refusal("ag_put.json", "\"output_chunks\": 6", "\"output_chunks\": 5",
                 "gpu 0: input_chunks 2 and output_chunks 5; an all-gather needs output_chunks "
                 "= ranks x input_chunks");
  expect_refusal("ag_put.json",
                 "\"min_message_size\": 12288,\n \"max_message_size\": 18446744073709551615",
                 "\"min_message_size\": 0,\n \"max_message_size\": 2",
                 "min_message_size 0 to max_message_size 2 holds no all-gather of 3 ranks");
  expect_refusal("a2a_put.json", "\"inplace\": false", "\"inplace\": true",
                 "an in-place all-to-all");
  /* Ops Braid has no counterpart for, each named; a semaphore op on a
   * gpu that declares none. */
  expect_refusal("ag_put.json", "\"name\": \"copy\"", "\"name\": \"sem_acquire\", \"semaphore_ids\": [0]",
                 "gpu 0, thread block 0, op 2 (sem_acquire): semaphore_ids[0] is not a semaphore "
                 "of the gpu (it declares 0)");
  expect_refusal("ag_put.json", "\"name\": \"copy\"", "\"name\": \"sem_release\"",
                 "gpu 0, thread block 0, op 2 (sem_release): missing field \"semaphore_ids\"");
  expect_refusal("ag_put.json", "\"name\": \"copy\"", "\"name\": \"gstorepkt\"",
                 "gpu 0, thread block 0, op 2 (gstorepkt): a switch-channel store of LL packets: "
                 "Braid's switch ops move plain data only");
  expect_refusal("ar_pipeline.json", "\"name\": \"re\"",
                 "\"tbg_info\": {\"tb_id\": 0, \"tbg_size\": 2}, \"name\": \"re\"",
                 "gpu 0, thread block 0, op 0 (pipeline), inner op 4 (re): a thread-block "
                 "group (tbg_info) inside a pipeline");
  expect_refusal("ag_put.json", "\"name\": \"copy\"",
                 "\"tbg_info\": {\"tb_id\": 2, \"tbg_size\": 2}, \"name\": \"copy\"",
                 "gpu 0, thread block 0, op 2 (copy): field \"tb_id\" is 2, out of range [0, 1]");
  expect_refusal("rs_scratch.json", "\"reuse_resources\": false", "\"reuse_resources\": true",
                 "gpu 0, thread block 0, op 0 (put): dst_buff[0] names scratch outside a "
                 "pipeline in a plan with reuse_resources");
  expect_refusal("ag_put.json", "\"name\": \"copy\"", "\"channel_type\": \"switch\", \"name\": \"flush\"",
                 "gpu 0, thread block 0, op 2 (flush): a flush on a switch channel");
  /* Pipelines: one inside another; a packet op inside one; each names the
   * pipeline's op and the inner op. */
  expect_refusal("ar_pipeline.json", "\"name\": \"signal\"", "\"name\": \"pipeline\"",
                 "gpu 0, thread block 0, op 0 (pipeline), inner op 2 (pipeline): a pipeline "
                 "inside a pipeline");
  expect_refusal("ar_pipeline.json", "\"name\": \"re\"", "\"name\": \"repkt\"",
                 "gpu 0, thread block 0, op 0 (pipeline), inner op 4 (repkt): a packet op inside "
                 "a pipeline");
  /* In place, a reduce-scatter's blocks other than the rank's own are its
   * input only: gpu 0's reduce writing block 1 is refused. */
  expect_refusal("rs_inplace.json",
                 "\"dst_buff\": [\n        {\n         \"type\": \"i\",\n         \"index\": 0",
                 "\"dst_buff\": [\n        {\n         \"type\": \"i\",\n         \"index\": 2",
                 "gpu 0, thread block 0, op 4 (re): dst_buff[0] writes block 1 of the buffer, "
                 "which in place is input only (the output is block 0): Braid never writes "
                 "inputs");

  /* A flush on memory channels has nothing to wait for: no op. */
  brd_ir_plan_t *p = load_edited("ag_put.json", "\"name\": \"copy\"",
                                 "\"name\": \"flush\", \"channel_type\": \"memory\", "
                                 "\"channel_ids\": [0, 1]}, {\"name\": \"copy\"", NULL);
  assert_int_equal(brd_ir_plan_block(p, 0, 0)->nops, 10);
  verify_as(p, 0);
  brd_plan_destroy(p);
  /* reuse_resources where every scratch ref is in a pipeline. */
  p = load_edited("ar_pipeline.json", "\"reuse_resources\": false", "\"reuse_resources\": true",
                  NULL);
  assert_int_equal(p->nchunks, 6);
  verify_as(p, 0);
  brd_plan_destroy(p);
}

/* Counts ops of `code` in block b of rank r. */
static int count_ops(const brd_ir_plan_t *p, int r, int b, int code) {
  const brd_ir_op_t *op = brd_ir_plan_ops(p, r, b);
  int n = 0;
  for (uint32_t i = 0; i < brd_ir_plan_block(p, r, b)->nops; i++) n += op[i].code == code;
  return n;
}

/* Block b of rank r has exactly the op codes of `want` (ending in -1). */
static void check_codes(const brd_ir_plan_t *p, int r, int b, const int *want) {
  const brd_ir_op_t *op = brd_ir_plan_ops(p, r, b);
  uint32_t n = 0;
  while (want[n] >= 0) n++;
  assert_int_equal(brd_ir_plan_block(p, r, b)->nops, n);
  for (uint32_t i = 0; i < n; i++) {
    if (op[i].code != want[i]) print_error("rank %d block %d op %u: code %d, expected %d\n", r, b, i, op[i].code, want[i]);
    assert_int_equal(op[i].code, want[i]);
  }
}

/* The text of `file` with the first `a` replaced by `b`, then the first
 * `c` by `d`. */
static char *edited2(const char *file, const char *a, const char *b, const char *c,
                     const char *d) {
  char *t = edited(file, a, b), *q = strstr(t, c);
  assert_non_null(q);
  char *u = malloc(strlen(t) + strlen(d) + 1);
  memcpy(u, t, (size_t)(q - t));
  strcpy(u + (q - t), d);
  strcat(u, q + strlen(c));
  free(t);
  return u;
}

enum { W = BRD_IR_OP_WAIT, S = BRD_IR_OP_SIGNAL, B = BRD_IR_OP_BARRIER, P = BRD_IR_OP_PUT,
       RD = BRD_IR_OP_REDUCE, CP = BRD_IR_OP_COPY };

#define SEM_RELEASE_1 "\"name\": \"sem_release\",\n         \"semaphore_ids\": [\n          1"
#define SEM_ACQUIRE_1 "\"name\": \"sem_acquire\",\n         \"semaphore_ids\": [\n          1"
#define SEM_RELEASE_0 "\"name\": \"sem_release\",\n         \"semaphore_ids\": [\n          0\n         ]"
#define SEM_INIT_2 "\"init_value\": 2"

static void test_semaphores(void **state) {
  (void)state;
  /* ar_pipeline_sem.json (2 pipeline iterations, chunks halved): thread
   * block 0 puts, signals and waits, releases 0; 1 acquires 0, reduces,
   * puts, releases 1; 2 acquires 1, signals and waits, releases 2, which
   * 0 acquires with 2 credits. The pairs across blocks, in the one order
   * every block agrees with: (0, it 0), (1, it 0), (0, it 1), (1, it 1),
   * barriers 0..3; a block passes those it takes no part in as early as
   * it may: block 0 passes 1 right after 0 (its first release), 3 after
   * 2; block 2 passes 0 at its start, 2 right after 1. Releases of 2 pair
   * with the next iteration's acquires, which barriers 0..3 already
   * order (release 1 precedes block 2's barrier 3, before block 0's
   * first acquire in the next iteration; release 2 precedes the next
   * iteration's barrier 0, before block 0's second acquire). Then the
   * credits' barrier and signals. */
  brd_plan_json_meta_t meta;
  brd_ir_plan_t *p = load("ar_pipeline_sem.json", 0, &meta);
  assert_int_equal(meta.min_bytes, 393220);
  assert_int_equal(meta.max_bytes, 786432);
  assert_int_equal(p->nblocks, 3);
  assert_int_equal(p->nchunks, 6);
  static const int b0[] = {W, P, W, P, S, S, W, W, B, B, P, P, S, S, W, W, B, B, B, S, S, -1};
  static const int b1[] = {B, RD, P, B, B, RD, P, B, B, -1};
  static const int b2[] = {B, B, B, S, S, W, W, B, S, S, W, W, B, -1};
  for (int r = 0; r < 3; r++) {
    int a = r == 0 ? 1 : 0;
    check_codes(p, r, 0, b0);
    check_codes(p, r, 1, b1);
    check_codes(p, r, 2, b2);
    const brd_ir_op_t *op0 = brd_ir_plan_ops(p, r, 0), *op1 = brd_ir_plan_ops(p, r, 1),
                      *op2 = brd_ir_plan_ops(p, r, 2);
    /* Block 0 on the second channel to each peer (semaphore 1), block 2
     * on the first (semaphore 0), each counting 1 then 2. */
    check_sync(p, r, &op0[4], S, a, 1, 1);
    check_sync(p, r, &op0[15], W, 3 - r - a, 1, 2);
    check_sync(p, r, &op2[3], S, a, 0, 1);
    check_sync(p, r, &op2[11], W, 3 - r - a, 0, 2);
    for (int it = 0; it < 2; it++) {
      const brd_ir_op_t *red = &op1[1 + 4 * it];
      assert_int_equal(red->chunk, 2 * r + it);
      check_ref(p, r, &red->ref[0], (xref_t){IN, -1, 2 * r + it});
      check_ref(p, r, &red->ref[3], (xref_t){OUT, -1, 2 * r + it});
    }
  }
  verify_as(p, 0);
  brd_plan_destroy(p);

  /* Folded onto 2 blocks (host mode): thread blocks 0 and 1 run one
   * after another in block 0, so releases of 0 precede its acquires
   * there; pairs of 1 are barriers 0 and 1. A release of 2 (block 1,
   * after barrier 1 at the latest) would not precede block 0's next
   * acquire of 2 (before any barrier): one more barrier after every
   * block's last op orders them. */
  p = load("ar_pipeline_sem.json", 2, NULL);
  assert_int_equal(p->nblocks, 2);
  static const int f0[] = {W, P, W, P, S, S, W, W, P, P, S, S, W, W, RD, P, B, RD, P, B, B, B,
                           S, S, -1};
  static const int f1[] = {B, S, S, W, W, B, S, S, W, W, B, B, -1};
  for (int r = 0; r < 3; r++) {
    check_codes(p, r, 0, f0);
    check_codes(p, r, 1, f1);
  }
  verify_as(p, 0);
  brd_plan_destroy(p);

  /* gpu 0 with one credit (the others keep 2): acquire 2 of semaphore 2
   * pairs with release 1 in the same iteration, one more pair (5
   * barriers); acquire 1 pairs with the previous iteration's release 2,
   * which follows block 2's last barrier, so one more after every
   * block's last op; then the credits'. Ranks whose barriers stand for
   * different pairs hold each other up: rank 0's block 0 waits at its
   * third barrier for its block 2, which waits for rank 1's block 2,
   * which passed rank 1's third barrier, where rank 1's block 0 waits for
   * rank 0's block 0. The verifier finds the deadlock. */
  p = load_edited("ar_pipeline_sem.json", SEM_INIT_2, "\"init_value\": 1", NULL);
  for (int r = 0; r < 3; r++)
    for (int b = 0; b < 3; b++) assert_int_equal(count_ops(p, r, b, B), r == 0 ? 7 : 5);
  brd_verify_opts_t opts = {0, 3};
  brd_verify_report_t rep;
  assert_int_not_equal(brd_plan_verify(p, &opts, &rep), ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_DEADLOCK);
  brd_plan_destroy(p);
  /* Folded, thread block 0's second acquire would wait for thread block
   * 2, which waits for thread block 1, which runs after thread block 0 in
   * the same block: a cycle, refused. */
  char *t = edited("ar_pipeline_sem.json", SEM_INIT_2, "\"init_value\": 1");
  char err[600] = "";
  assert_int_equal(translate(t, "fold.json", 2, &p, NULL, err, sizeof(err)), ncclInvalidArgument);
  assert_non_null(strstr(err, "MSCCL++ plan fold.json: gpu 0: its thread blocks' "
                              "sem_acquire/sem_release (and barriers) order each other in a cycle"));
  free(t);

  /* Planted bugs. A missing release: refused, naming the acquire that
   * has none. */
  expect_refusal("ar_pipeline_sem.json", SEM_RELEASE_1,
                 "\"name\": \"nop\",\n         \"semaphore_ids\": [\n          1",
                 "gpu 0, thread block 2, op 0 (pipeline), inner op 0 (sem_acquire): semaphore 1 "
                 "is released 0 and acquired 2 times per iteration: acquire 1 has no release");
  /* Two acquirers of one semaphore. */
  expect_refusal("ar_pipeline_sem.json", SEM_ACQUIRE_1,
                 "\"name\": \"sem_acquire\",\n         \"semaphore_ids\": [\n          0",
                 "gpu 0, thread block 2, op 0 (pipeline), inner op 0 (sem_acquire): semaphore 0 "
                 "is acquired by thread blocks 1 and 2");
  expect_refusal("ar_pipeline_sem.json", SEM_ACQUIRE_1,
                 "\"name\": \"sem_acquire\",\n         \"semaphore_ids\": [\n          3",
                 "gpu 0, thread block 2, op 0 (pipeline), inner op 0 (sem_acquire): "
                 "semaphore_ids[0] is not a semaphore of the gpu (it declares 3)");
  expect_refusal("ar_pipeline_sem.json", SEM_INIT_2, "\"init_value\": -1",
                 "gpu 0: field \"init_value\" is -1");
  /* gpu 0's thread block 0 releases before its signal and wait: the
   * translation holds, and the verifier finds rank 0's reduction reading
   * scratch that the peers' puts are not ordered before. */
  t = edited2("ar_pipeline_sem.json", "\"name\": \"signal\"",
              "\"name\": \"sem_release\", \"semaphore_ids\": [0], \"was\": \"signal\"",
              SEM_RELEASE_0, "\"name\": \"signal\", \"channel_ids\": [0, 1], "
              "\"channel_type\": \"memory\"");
  assert_int_equal(translate(t, "early.json", 0, &p, NULL, err, sizeof(err)), ncclSuccess);
  assert_int_not_equal(brd_plan_verify(p, &opts, &rep), ncclSuccess);
  print_message("early release: %s\n", rep.msg);
  assert_int_equal(rep.kind, BRD_VERIFY_RACE);
  assert_int_equal(rep.rank, 0);
  assert_int_equal(rep.block, 1);
  assert_int_equal(brd_ir_plan_ops(p, 0, 1)[rep.op].code, RD);
  brd_plan_destroy(p);
  free(t);

  /* ar_nvls_pipeline_sem.json, MSCCL++'s allreduce_pipeline.json on 2
   * ranks (in place, output_chunks 0 as its DSL writes, a thread block's
   * switch channel given a "buff"): 4 iterations, so Braid's chunks are
   * quarters; block 1 of rank r reduces slot (chunk) 4r + it through the
   * switch channel in iteration it, the chunk its slot holds (thread
   * block 0 copied input chunk 4r + it there). Semaphore 2 starts with 32
   * credits, more than the iterations: block 0 never waits for it. Each
   * block: the input copy's barrier, then the pairs of semaphores 0 and 1
   * of 4 iterations (8 barriers). */
  p = load("ar_nvls_pipeline_sem.json", 0, &meta);
  assert_int_equal(meta.min_bytes, 200000);
  assert_int_equal(meta.max_bytes, 262144);
  assert_int_equal(p->nchunks, 8);
  for (int r = 0; r < 2; r++) {
    for (int b = 0; b < 3; b++) assert_int_equal(count_ops(p, r, b, B), 9);
    assert_int_equal(count_ops(p, r, 1, BRD_IR_OP_MC_REDUCE), 4);
    const brd_ir_op_t *op = brd_ir_plan_ops(p, r, 1);
    int it = 0;
    for (uint32_t i = 0; i < brd_ir_plan_block(p, r, 1)->nops; i++) {
      if (op[i].code != BRD_IR_OP_MC_REDUCE) continue;
      assert_int_equal(op[i].chunk, 4 * r + it);
      assert_int_equal(op[i].nchunks, 1);
      assert_int_equal(op[i].ref[0].buf, BRD_IR_BUF_SCRATCH);
      assert_int_equal(op[i].ref[0].index, 4 * r + it);
      assert_int_equal(brd_ir_plan_chan(p, r, op[i].ref[0].chan)->type, BRD_IR_CHAN_SWITCH);
      it++;
    }
  }
  verify_as(p, 1);
  brd_plan_destroy(p);
  p = load("ar_nvls_pipeline_sem.json", 2, NULL);
  verify_as(p, 1);
  brd_plan_destroy(p);

  /* ag_port_flush.json: port channels, a flush after the put, which
   * becomes nothing (the put has read its source when it ends). */
  p = load("ag_port_flush.json", 0, &meta);
  assert_int_equal(meta.min_bytes, 300000);
  assert_int_equal(meta.max_bytes, 400000);
  static const int pf[] = {S, S, W, W, CP, P, S, S, W, W, -1};
  for (int r = 0; r < 3; r++) check_codes(p, r, 0, pf);
  verify_as(p, 0);
  brd_plan_destroy(p);
}

static void test_alloc_failures(void **state) {
  (void)state;
  /* Braid's own plans first: they are always there; MSCCL++'s samples
   * where they are found. */
  static const char *const files[] = {"ar_pipeline.json", "ag_get_inplace.json",
                                      "ar_pipeline_sem.json", "allreduce_packet.json",
                                      "allreduce.json", "reduce_nvls.json"};
  char path[512];
  sample_path("allreduce.json", path, sizeof(path));
  size_t nfiles = access(path, R_OK) == 0 ? sizeof(files) / sizeof(files[0]) : 3;
  if (nfiles == 3)
    print_message("note: MSCCL++'s sample plans are not at %s; Braid's own plans only\n", path);
  for (size_t f = 0; f < nfiles; f++) {
    char *t = edited(files[f], NULL, NULL);
    brd_json_t *root = NULL;
    assert_int_equal(brd_json_parse(t, strlen(t), "a.json", &root, NULL, 0), ncclSuccess);
    int failures_seen = 0;
    for (long k = 0;; k++) {
      brd_ir_plan_t *plan = NULL;
      alloc_calls = 0;
      fail_at = k;
      live = 0;
      armed = 1;
      ncclResult_t res = brd_plan_mscclpp_translate(root, "a.json", 2, &plan, NULL, NULL, 0);
      if (res == ncclSuccess) brd_plan_destroy(plan);
      armed = 0;
      assert_int_equal(live, 0);
      if (res == ncclSuccess) break;
      assert_int_equal(res, ncclSystemError);
      assert_null(plan);
      failures_seen++;
    }
    assert_true(failures_seen > 5);
    brd_json_free(root);
    free(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_simple),
      cmocka_unit_test(test_allreduce_packet),
      cmocka_unit_test(test_nvls),
      cmocka_unit_test(test_out_of_place),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_reducescatter),
      cmocka_unit_test(test_alltoall),
      cmocka_unit_test(test_pipeline),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_semaphores),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
