/*
 * Unit tests for plans as JSON (src/plan/plan_json.c).
 *
 *   - A hand-written document (the 2-rank Simple ring all-reduce, written
 *     with defaults, other key orders and whitespace than the writer uses)
 *     parses to a blob identical byte for byte to the generator's.
 *   - Every built-in generator, for 1..8 ranks, both protocols, 1 and 2
 *     blocks and several roots, survives export -> import byte-identical.
 *   - Schema errors (missing field, unknown op, chunk and slot index out of
 *     range, channel to a rank outside the plan, bad channel index, unknown
 *     field, wrong array length) and malformed JSON each give a message
 *     naming the file, the JSON path (or line and column) and the fault.
 *   - Plans with a planted missing SIGNAL and a wrong chunk index load but
 *     are refused by the verifier, with rank, block and op named.
 *   - Every prefix of a document and 4000 one-byte mutations parse or
 *     fail cleanly with the file named.
 *   - Allocation failures while parsing unwind without leaks.
 *   - The plan library's fields (size range, in place, ranks per node,
 *     types, reductions) parse to what the document says, write back byte
 *     for byte, default when absent, and each wrong value is refused at its
 *     path; a plan declared in place only is verified in place.
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

#include "algos/algos.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/verify.h"

#include "failalloc.h"

/* The 2-rank ring all-reduce (Simple, one block), written by hand from the
 * ring's definition: each rank puts its chunk into the peer's slot 0,
 * reduces the peer's chunk with its own into its output and the peer's
 * slot 1, then copies the peer's reduced chunk out of slot 1. Semaphore 0
 * carries data, semaphore 1 credits for slot reuse. */
static const char *ring2 =
    "{ \"format\": \"braid-plan\", \"version\": 1,\n"
    "  \"collective\": \"allreduce\", \"algo\": \"ring\", \"proto\": \"Simple\",\n"
    "  \"nranks\": 2, \"nblocks\": 1, \"nchunks\": 2, \"nslots\": 2,\n"
    "  \"slot_div\": 2, \"nsems\": 2, \"seq_per_iter\": 2,\n"
    "  \"ranks\": [\n"
    "   { \"chans\": [ { \"peer\": 1 } ],\n"
    "     \"blocks\": [ { \"ops\": [\n"
    "      { \"op\": \"wait\", \"k\": -1, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"put\", \"chunk\": 0, \"nchunks\": 1, \"k\": 1, \"nsrc\": 1, \"ndst\": 1,\n"
    "        \"refs\": [ {\"buf\": \"input\", \"index\": 0}, {\"index\": 0, \"chan\": 0, \"buf\": \"scratch\"} ] },\n"
    "      { \"op\": \"signal\", \"k\": 1, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"k\": 1, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"k\": 0, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"reduce\", \"flags\": [\"postop\"], \"chunk\": 1, \"nchunks\": 1, \"k\": 2, \"k_src\": 1,\n"
    "        \"nsrc\": 2, \"ndst\": 2, \"refs\": [ {\"buf\": \"input\", \"index\": 1}, {\"buf\": \"scratch\", \"index\": 0},\n"
    "        {\"buf\": \"output\", \"index\": 1}, {\"buf\": \"scratch\", \"chan\": 0, \"peer\": 1, \"index\": 1} ] },\n"
    "      { \"op\": \"signal\", \"k\": 1, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"signal\", \"k\": 2, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"k\": 2, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"copy\", \"nchunks\": 1, \"k\": 3, \"k_src\": 2, \"nsrc\": 1, \"ndst\": 1,\n"
    "        \"refs\": [ {\"buf\": \"scratch\", \"index\": 1}, {\"buf\": \"output\", \"index\": 0} ] },\n"
    "      { \"op\": \"signal\", \"k\": 2, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] }\n"
    "     ] } ] },\n"
    "   { \"rank\": 1, \"chans\": [ { \"peer\": 0, \"type\": \"memory\" } ],\n"
    "     \"blocks\": [ { \"ops\": [\n"
    "      { \"op\": \"wait\", \"k\": -1, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"put\", \"chunk\": 1, \"nchunks\": 1, \"k\": 1, \"nsrc\": 1, \"ndst\": 1,\n"
    "        \"refs\": [ {\"buf\": \"input\", \"index\": 1}, {\"buf\": \"scratch\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"signal\", \"k\": 1, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"k\": 1, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"reduce\", \"flags\": [\"postop\"], \"nchunks\": 1, \"k\": 2, \"k_src\": 1,\n"
    "        \"nsrc\": 2, \"ndst\": 2, \"refs\": [ {\"buf\": \"input\", \"index\": 0}, {\"buf\": \"scratch\", \"index\": 0},\n"
    "        {\"buf\": \"output\", \"index\": 0}, {\"buf\": \"scratch\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"signal\", \"k\": 1, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] },\n"
    "      { \"op\": \"signal\", \"k\": 2, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"wait\", \"k\": 2, \"nsrc\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n"
    "      { \"op\": \"copy\", \"chunk\": 1, \"nchunks\": 1, \"k\": 3, \"k_src\": 2, \"nsrc\": 1, \"ndst\": 1,\n"
    "        \"refs\": [ {\"buf\": \"scratch\", \"index\": 1}, {\"buf\": \"output\", \"index\": 1} ] },\n"
    "      { \"op\": \"signal\", \"k\": 2, \"ndst\": 1, \"refs\": [ {\"buf\": \"sem\", \"chan\": 0, \"index\": 1} ] }\n"
    "     ] } ] }\n"
    "  ]\n"
    "}\n";

/* ---- helpers -------------------------------------------------------------- */

static char *export_text(const brd_ir_plan_t *plan, size_t *len_out) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(brd_plan_json_write(plan, NULL, f), ncclSuccess);
  assert_int_equal(fclose(f), 0);
  *len_out = len;
  return text;
}

/* A copy of s with the nth (0-based) occurrence of from replaced by to. */
static char *replace(const char *s, const char *from, const char *to, int nth) {
  const char *at = s;
  for (int i = 0;; i++) {
    at = strstr(at, from);
    if (at == NULL) fail_msg("\"%s\" occurs fewer than %d times", from, nth + 1);
    if (i == nth) break;
    at += strlen(from);
  }
  size_t pre = (size_t)(at - s), n = strlen(s) - strlen(from) + strlen(to);
  char *out = malloc(n + 1);
  assert_non_null(out);
  memcpy(out, s, pre);
  strcpy(out + pre, to);
  strcat(out, at + strlen(from));
  return out;
}

/* Parses text and expects a failure whose message holds every one of the
 * given fragments (NULL-terminated list). */
static void expect_error(const char *text, ncclResult_t want, ...) {
  char err[640];
  brd_ir_plan_t *plan = NULL;
  ncclResult_t res = brd_plan_json_parse(text, strlen(text), "t.json", &plan, NULL, err,
                                         sizeof(err));
  if (res != want) print_error("expected %d, got %d: %s\n", want, res, err);
  assert_int_equal(res, want);
  assert_null(plan);
  va_list ap;
  va_start(ap, want);
  for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;) {
    if (strstr(err, frag) == NULL)
      print_error("message \"%s\" lacks \"%s\"\n", err, frag);
    assert_non_null(strstr(err, frag));
  }
  va_end(ap);
  assert_int_equal(strncmp(err, "t.json: ", 8), 0);
}

/* Replaces one occurrence and expects the error fragments. */
static void mutate(const char *from, const char *to, int nth, const char *path,
                   const char *what) {
  char *t = replace(ring2, from, to, nth);
  expect_error(t, ncclInvalidArgument, path, what, (const char *)NULL);
  free(t);
}

/* ---- tests ----------------------------------------------------------------- */

static void test_hand_written_matches_generator(void **state) {
  (void)state;
  brd_algos_args_t args = {2, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *gen, *parsed;
  char err[512];
  assert_int_equal(brd_algos_ring_allreduce(&args, &gen), ncclSuccess);
  assert_int_equal(brd_plan_json_parse(ring2, strlen(ring2), "ring2.json", &parsed, NULL,
                                       err, sizeof(err)),
                   ncclSuccess);
  assert_int_equal(parsed->total_bytes, gen->total_bytes);
  assert_memory_equal(parsed, gen, gen->total_bytes);
  assert_int_equal(brd_plan_verify(parsed, NULL, NULL), ncclSuccess);
  brd_plan_destroy(gen);
  brd_plan_destroy(parsed);
}

static int round_trip(const brd_algos_gen_t *g, int n, int proto, int nblocks,
                      int root) {
  brd_algos_args_t args = {n, NULL, nblocks, proto};
  brd_ir_plan_t *plan, *back;
  if (g->fn(&args, NULL, root, g->deterministic, &plan) != ncclSuccess) return 0;
  size_t len;
  char *text = export_text(plan, &len);
  char err[640];
  ncclResult_t res = brd_plan_json_parse(text, len, "rt.json", &back, NULL, err, sizeof(err));
  if (res != ncclSuccess)
    print_error("%s n=%d proto=%d blocks=%d root=%d: %s\n", g->name, n, proto,
                nblocks, root, err);
  assert_int_equal(res, ncclSuccess);
  assert_int_equal(back->total_bytes, plan->total_bytes);
  if (memcmp(back, plan, plan->total_bytes) != 0)
    print_error("%s n=%d proto=%d blocks=%d root=%d differs after the round "
                "trip\n", g->name, n, proto, nblocks, root);
  assert_memory_equal(back, plan, plan->total_bytes);
  /* The second export is the first, character for character. */
  size_t len2;
  char *text2 = export_text(back, &len2);
  assert_int_equal(len2, len);
  assert_memory_equal(text2, text, len);
  free(text2);
  free(text);
  brd_plan_destroy(back);
  brd_plan_destroy(plan);
  return 1;
}

static void test_every_generator_round_trips(void **state) {
  (void)state;
  int ngen, done = 0, gens_done = 0;
  const brd_algos_gen_t *gens = brd_algos_gens(&ngen);
  assert_true(ngen > 10);
  for (int i = 0; i < ngen; i++) {
    const brd_algos_gen_t *g = &gens[i];
    int rooted = brd_ir_coll_traits(g->coll).rooted, mine = 0;
    for (int n = 1; n <= 8; n++) {
      int roots[3] = {0, n - 1, n / 2}, nroots = rooted ? 3 : 1;
      for (int proto = BRD_IR_PROTO_SIMPLE; proto <= BRD_IR_PROTO_LL; proto++)
        for (int nb = 1; nb <= 2; nb++)
          for (int ri = 0; ri < nroots; ri++) {
            if (ri > 0 && roots[ri] == roots[ri - 1]) continue;
            mine += round_trip(g, n, proto, nb, roots[ri]);
          }
    }
    if (mine == 0) print_error("generator %s made no plan\n", g->name);
    assert_true(mine > 0);
    done += mine;
    gens_done++;
  }
  assert_int_equal(gens_done, ngen);
  print_message("%d plans of %d generators round-tripped\n", done, ngen);
}

static void test_port_channel_round_trips(void **state) {
  (void)state;
  brd_algos_args_t args = {3, NULL, 1, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *plan, *back;
  assert_int_equal(brd_algos_ring_allgather(&args, &plan), ncclSuccess);
  uint8_t port[9] = {0, 1, 0, 1, 0, 0, 0, 0, 0}; /* ranks 0 and 1 */
  assert_true(brd_plan_chans_mark(plan, port) > 0);
  size_t len;
  char *text = export_text(plan, &len);
  assert_non_null(strstr(text, "\"type\": \"port\""));
  assert_int_equal(brd_plan_json_parse(text, len, "p.json", &back, NULL, NULL, 0),
                   ncclSuccess);
  assert_memory_equal(back, plan, plan->total_bytes);
  free(text);
  brd_plan_destroy(back);
  brd_plan_destroy(plan);
}

static void test_schema_errors(void **state) {
  (void)state;
  /* Missing fields: in the header, in an op, in a reference. */
  mutate("\"nchunks\": 2, ", "", 0, "t.json: nchunks: ", "missing field");
  mutate("{ \"op\": \"put\", ", "{ ", 1, "ranks[1].blocks[0].ops[1].op: ",
         "missing field");
  mutate("{\"buf\": \"input\", \"index\": 1}", "{\"buf\": \"input\"}", 0,
         "ranks[0].blocks[0].ops[5].refs[0].index: ", "missing field");
  /* Unknown names and fields. */
  mutate("\"op\": \"copy\"", "\"op\": \"copy_all\"", 1,
         "ranks[1].blocks[0].ops[9].op: ", "unknown name \"copy_all\"");
  mutate("\"buf\": \"scratch\"", "\"buf\": \"scrach\"", 0,
         "ranks[0].blocks[0].ops[1].refs[1].buf: ", "unknown name \"scrach\"");
  mutate("\"proto\": \"Simple\"", "\"proto\": \"simple\"", 0, "t.json: proto: ",
         "unknown name \"simple\"");
  mutate("\"nslots\": 2", "\"nslot\": 2", 0, "(top level)", "unknown field \"nslot\"");
  mutate("\"k_src\": 2", "\"ksrc\": 2", 1, "ranks[1].blocks[0].ops[9]: ",
         "unknown field \"ksrc\"");
  mutate("\"postop\"", "\"post\"", 0, "ranks[0].blocks[0].ops[5].flags[0]: ",
         "unknown flag \"post\"");
  /* Indices out of range: a chunk, a scratch slot, an output chunk, a
   * semaphore, a channel, and a channel to a rank outside the plan. */
  mutate("\"chunk\": 1, \"nchunks\": 1, \"k\": 2", "\"chunk\": 2, \"nchunks\": 1, \"k\": 2",
         0, "ranks[0].blocks[0].ops[5].chunk: ", "2 is out of range [0, 1]");
  mutate("\"nchunks\": 1, \"k\": 1", "\"nchunks\": 2, \"k\": 1", 1,
         "ranks[1].blocks[0].ops[1].nchunks: ", "run past the plan's 2 chunks");
  mutate("{\"buf\": \"scratch\", \"index\": 1}", "{\"buf\": \"scratch\", \"index\": 2}", 1,
         "ranks[1].blocks[0].ops[9].refs[0].index: ", "the plan has 2 scratch slots");
  mutate("{\"buf\": \"output\", \"index\": 0}", "{\"buf\": \"output\", \"index\": 7}", 0,
         "ranks[0].blocks[0].ops[9].refs[1].index: ", "out of range");
  mutate("\"chan\": 0, \"index\": 1}", "\"chan\": 0, \"index\": 2}", 0,
         "ranks[0].blocks[0].ops[0].refs[0].index: ", "semaphores per channel");
  mutate("{\"index\": 0, \"chan\": 0,", "{\"index\": 0, \"chan\": 1,", 0,
         "ranks[0].blocks[0].ops[1].refs[1].chan: ", "rank 0 has 1 channels");
  mutate("{ \"peer\": 1 }", "{ \"peer\": 2 }", 0, "ranks[0].chans[0].peer: ",
         "2 is out of range [0, 1]");
  mutate("{ \"peer\": 1 }", "{ \"peer\": 0 }", 0, "ranks[0].chans[0]: ",
         "to itself");
  mutate("\"chan\": 0, \"peer\": 1, \"index\": 1}", "\"chan\": 0, \"peer\": 0, \"index\": 1}",
         0, "ranks[0].blocks[0].ops[5].refs[3].peer: ", "does not match channel's peer 1");
  /* Structure: wrong counts and types. */
  mutate("\"nranks\": 2", "\"nranks\": 3", 0, "t.json: ranks: ", "has 2 entries, expected 3");
  mutate("\"nblocks\": 1", "\"nblocks\": 2", 0, "ranks[0].blocks: ",
         "has 1 entries, expected 2");
  mutate("\"nsrc\": 2, \"ndst\": 2", "\"nsrc\": 2, \"ndst\": 1", 1,
         "ranks[1].blocks[0].ops[5].refs: ", "4 references for nsrc 2 + ndst 1");
  mutate("\"k\": -1", "\"k\": \"-1\"", 0, "ranks[0].blocks[0].ops[0].k: ",
         "is a string, expected an integer");
  mutate("\"k\": 3", "\"k\": 3.5", 0, "ranks[0].blocks[0].ops[9].k: ",
         "is a number, expected an integer");
  mutate("\"k\": 3", "\"k\": 99999999999", 0, "ranks[0].blocks[0].ops[9].k: ",
         "out of range");
  mutate("\"version\": 1", "\"version\": 2", 0, "t.json: version: ", "out of range");
  mutate("\"rank\": 1", "\"rank\": 0", 0, "ranks[1].rank: ", "out of range [1, 1]");
}

static void test_malformed_json(void **state) {
  (void)state;
  /* A missing comma on line 2 (after "allreduce"). */
  char *t = replace(ring2, "\"allreduce\",", "\"allreduce\"", 0);
  expect_error(t, ncclInvalidArgument, "t.json: line 2 column 29", "malformed JSON",
               "expected ',' or '}'", (const char *)NULL);
  free(t);
  t = replace(ring2, "\"format\"", "\"format", 0);
  expect_error(t, ncclInvalidArgument, "malformed JSON", (const char *)NULL);
  free(t);
  expect_error("{\"a\": [1, 2", ncclInvalidArgument, "t.json: line 1 column 12",
               "expected ',' or ']'", (const char *)NULL);
  expect_error("{\"a\": ", ncclInvalidArgument, "t.json: line 1 column 7",
               "unexpected end of input", (const char *)NULL);
  expect_error("{} x", ncclInvalidArgument, "line 1 column 4",
               "text after the document", (const char *)NULL);
  expect_error("{\"a\": 1, \"a\": 2}", ncclInvalidArgument, "duplicate key",
               (const char *)NULL);
  expect_error("{\"a\": 01}", ncclInvalidArgument, "leading zero", (const char *)NULL);
  expect_error("{\"a\": \"x\ty\"}", ncclInvalidArgument, "control character",
               (const char *)NULL);
  expect_error("{\"a\": tru}", ncclInvalidArgument, "unknown literal", (const char *)NULL);
  expect_error("", ncclInvalidArgument, "unexpected end of input", (const char *)NULL);
  expect_error("[]", ncclInvalidArgument, "(document): is an array, expected an object",
               (const char *)NULL);
  /* Nesting beyond the limit is refused, not a stack overflow. */
  char deep[400];
  memset(deep, '[', 300);
  deep[300] = '\0';
  expect_error(deep, ncclInvalidArgument, "nested too deeply", (const char *)NULL);
  /* Escapes decode: a \u escape in a known name is the same name. */
  t = replace(ring2, "\"ring\"", "\"r\\u0069ng\"", 0);
  brd_ir_plan_t *plan;
  assert_int_equal(brd_plan_json_parse(t, strlen(t), "t.json", &plan, NULL, NULL, 0),
                   ncclSuccess);
  assert_int_equal(plan->algo, BRD_IR_ALGO_RING);
  brd_plan_destroy(plan);
  free(t);
}


/* The library fields after "seq_per_iter": 2 of ring2. */
static char *with_fields(const char *fields) {
  char to[512];
  snprintf(to, sizeof(to), "\"seq_per_iter\": 2, %s,", fields);
  return replace(ring2, "\"seq_per_iter\": 2,", to, 0);
}

static void test_library_fields(void **state) {
  (void)state;
  brd_plan_json_meta_t m;
  brd_ir_plan_t *plan;
  char err[640];
  /* Absent: the defaults. */
  memset(&m, 0x5a, sizeof(m));
  assert_int_equal(brd_plan_json_parse(ring2, strlen(ring2), "t.json", &plan, &m, err,
                                       sizeof(err)), ncclSuccess);
  brd_plan_destroy(plan);
  assert_int_equal(m.min_bytes, 0);
  assert_int_equal(m.max_bytes, 0);
  assert_int_equal(m.inplace, BRD_PLAN_JSON_INPLACE_ANY);
  assert_int_equal(m.ranks_per_node, 0);
  assert_int_equal(m.dtypes, 0);
  assert_int_equal(m.redops, 0);
  /* Given: what they say (bits in ncclDataType_t and ncclRedOp_t order). */
  char *t = with_fields("\"min_bytes\": 1025, \"max_bytes\": 9000000000, \"inplace\": \"no\", "
                        "\"ranks_per_node\": 2, \"dtypes\": [\"bfloat16\", \"int8\"], "
                        "\"redops\": [\"premulsum\", \"max\"]");
  assert_int_equal(brd_plan_json_parse(t, strlen(t), "t.json", &plan, &m, err, sizeof(err)),
                   ncclSuccess);
  free(t);
  assert_int_equal(m.min_bytes, 1025);
  assert_true(m.max_bytes == 9000000000ull);
  assert_int_equal(m.inplace, BRD_PLAN_JSON_INPLACE_NO);
  assert_int_equal(m.ranks_per_node, 2);
  assert_int_equal(m.dtypes, (1u << ncclBfloat16) | (1u << ncclInt8));
  assert_int_equal(m.redops, (1u << 5) | (1u << ncclMax));
  /* Written back in the writer's order, then read and written again: the
   * same text. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(brd_plan_json_write(plan, &m, f), ncclSuccess);
  fclose(f);
  assert_non_null(strstr(text, "\"min_bytes\": 1025,\n  \"max_bytes\": 9000000000,\n"
                               "  \"inplace\": \"no\",\n  \"ranks_per_node\": 2,\n"
                               "  \"dtypes\": [\"int8\", \"bfloat16\"],\n"
                               "  \"redops\": [\"max\", \"premulsum\"],\n  \"ranks\""));
  brd_plan_json_meta_t m2;
  brd_ir_plan_t *back;
  assert_int_equal(brd_plan_json_parse(text, len, "t.json", &back, &m2, err, sizeof(err)),
                   ncclSuccess);
  assert_memory_equal(&m2, &m, sizeof(m));
  assert_memory_equal(back, plan, plan->total_bytes);
  char *text2 = NULL;
  size_t len2 = 0;
  f = open_memstream(&text2, &len2);
  assert_int_equal(brd_plan_json_write(back, &m2, f), ncclSuccess);
  fclose(f);
  assert_int_equal(len2, len);
  assert_memory_equal(text2, text, len);
  free(text);
  free(text2);
  brd_plan_destroy(back);
  brd_plan_destroy(plan);

  /* Wrong values, each at its path. */
  static const struct {
    const char *fields, *path, *what;
  } bad[] = {
      {"\"min_bytes\": -1", "t.json: min_bytes", "out of range"},
      {"\"min_bytes\": 100, \"max_bytes\": 99", "t.json: max_bytes", "below min_bytes 100"},
      {"\"max_bytes\": 1.5", "t.json: max_bytes", "expected an integer"},
      {"\"inplace\": \"maybe\"", "t.json: inplace", "unknown name \"maybe\""},
      {"\"ranks_per_node\": 3", "t.json: ranks_per_node", "out of range [1, 2]"},
      {"\"ranks_per_node\": 0", "t.json: ranks_per_node", "out of range"},
      {"\"dtypes\": []", "t.json: dtypes", "lists nothing"},
      {"\"dtypes\": [\"float32\", \"float128\"]", "t.json: dtypes[1]", "unknown name \"float128\""},
      {"\"dtypes\": \"float32\"", "t.json: dtypes", "expected an array"},
      {"\"redops\": [\"xor\"]", "t.json: redops[0]", "unknown name \"xor\""},
      {"\"min_byte\": 4", "(top level)", "unknown field \"min_byte\""},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    t = with_fields(bad[i].fields);
    expect_error(t, ncclInvalidArgument, bad[i].path, bad[i].what, (const char *)NULL);
    free(t);
  }
  /* In place is declared only where every rank can alias its buffers;
   * a reduction only where there is one. */
  t = replace(ring2, "\"allreduce\"", "\"broadcast\", \"inplace\": \"yes\"", 0);
  expect_error(t, ncclInvalidArgument, "t.json: inplace", "allreduce, allgather and "
               "reducescatter only", (const char *)NULL);
  free(t);
  t = replace(ring2, "\"allreduce\"", "\"allgather\", \"redops\": [\"sum\"]", 0);
  expect_error(t, ncclInvalidArgument, "t.json: redops", "no reduction", (const char *)NULL);
  free(t);
}

/* Writes text to a temporary file and loads it; returns the result. */
static ncclResult_t load_text(const char *text, brd_verify_report_t *rep,
                              char *err, size_t errlen) {
  char path[] = "/tmp/test_plan_json_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = strlen(text);
  assert_int_equal(write(fd, text, n), (ssize_t)n);
  close(fd);
  brd_ir_plan_t *plan = NULL;
  ncclResult_t res = brd_plan_json_load(path, NULL, &plan, NULL, rep, err, errlen);
  if (res == ncclSuccess) {
    assert_non_null(plan);
    brd_plan_destroy(plan);
  } else {
    assert_null(plan);
  }
  unlink(path);
  return res;
}

static void test_verifier_refuses_planted_faults(void **state) {
  (void)state;
  brd_verify_report_t rep;
  char err[1024];
  assert_int_equal(load_text(ring2, &rep, err, sizeof(err)), ncclSuccess);
  assert_int_equal(rep.kind, BRD_VERIFY_OK);

  /* Rank 1 never signals semaphore 0 with k 2 after its reduce (op 7):
   * rank 0's wait for it (op 8) can never complete. (Dropping rank 1's
   * first data signal instead is harmless: the later one covers it, as
   * waits are for "at least k", and the verifier rightly accepts that.) */
  char *t = replace(ring2,
                    "      { \"op\": \"signal\", \"k\": 2, \"ndst\": 1, \"refs\": "
                    "[ {\"buf\": \"sem\", \"chan\": 0, \"index\": 0} ] },\n",
                    "", 1);
  assert_int_equal(load_text(t, &rep, err, sizeof(err)), ncclInternalError);
  free(t);
  if (rep.kind != BRD_VERIFY_DEADLOCK || rep.rank != 0 || rep.op != 8)
    print_error("got %s at rank %d block %d op %d: %s\n",
                brd_plan_verify_kind_name(rep.kind), rep.rank, rep.block, rep.op,
                rep.msg);
  assert_int_equal(rep.kind, BRD_VERIFY_DEADLOCK);
  assert_int_equal(rep.rank, 0);
  assert_int_equal(rep.block, 0);
  assert_int_equal(rep.op, 8);
  assert_non_null(strstr(err, "verifier refused the plan (deadlock)"));
  assert_non_null(strstr(err, "/tmp/test_plan_json_"));

  /* Rank 0's final copy writes output chunk 1 instead of chunk 0 (op 9):
   * an index outside the op's chunk, refused as malformed at that op. */
  t = replace(ring2, "{\"buf\": \"output\", \"index\": 0} ] }", "{\"buf\": \"output\", \"index\": 1} ] }",
              0);
  assert_int_equal(load_text(t, &rep, err, sizeof(err)), ncclInternalError);
  free(t);
  if (rep.rank != 0 || rep.op != 9)
    print_error("got %s at rank %d block %d op %d: %s\n",
                brd_plan_verify_kind_name(rep.kind), rep.rank, rep.block, rep.op,
                rep.msg);
  assert_int_equal(rep.kind, BRD_VERIFY_MALFORMED);
  assert_int_equal(rep.rank, 0);
  assert_int_equal(rep.block, 0);
  assert_int_equal(rep.op, 9);
  assert_non_null(strstr(err, "verifier refused the plan (malformed plan)"));

  /* Declared in place only, the ring (which holds in place: it reads each
   * input chunk before it writes that output chunk) loads, verified in
   * place, and the planted wrong chunk is still found at its op. */
  t = replace(ring2, "\"allreduce\",", "\"allreduce\", \"inplace\": \"yes\",", 0);
  assert_int_equal(load_text(t, &rep, err, sizeof(err)), ncclSuccess);
  char *t2 = replace(t, "{\"buf\": \"output\", \"index\": 0} ] }",
                     "{\"buf\": \"output\", \"index\": 1} ] }", 0);
  assert_int_equal(load_text(t2, &rep, err, sizeof(err)), ncclInternalError);
  assert_int_equal(rep.rank, 0);
  assert_int_equal(rep.op, 9);
  free(t2);
  free(t);

  /* A missing file names itself. */
  assert_int_equal(brd_plan_json_load("/nonexistent/p.json", NULL, &(brd_ir_plan_t *){NULL}, NULL,
                                      &rep, err, sizeof(err)),
                   ncclInvalidArgument);
  assert_non_null(strstr(err, "/nonexistent/p.json: cannot open"));
}

/* Every prefix of a document, and documents with one byte changed (a fixed
 * pseudo-random sequence), either parse to a plan or fail with a message
 * naming the file; none crashes or reads past the text (run under
 * valgrind or ASan to see the latter). */
static void test_truncated_and_mutated(void **state) {
  (void)state;
  size_t n = strlen(ring2);
  char *buf = malloc(n + 1);
  assert_non_null(buf);
  for (size_t cut = 0; cut < n; cut++) {
    char err[640];
    brd_ir_plan_t *plan = NULL;
    /* No terminating NUL in the copy's reach: len is all the parser sees. */
    memcpy(buf, ring2, cut);
    ncclResult_t res = brd_plan_json_parse(buf, cut, "t.json", &plan, NULL, err, sizeof(err));
    /* Only the trailing whitespace may go. */
    if (res == ncclSuccess) {
      for (size_t i = cut; i < n; i++) assert_true(ring2[i] == '\n' || ring2[i] == ' ');
      brd_plan_destroy(plan);
    } else {
      assert_int_equal(res, ncclInvalidArgument);
      assert_int_equal(strncmp(err, "t.json: ", 8), 0);
    }
  }
  static const char repl[] = "{}[]:,\"\\0123456789-.eEtfnu xZ\x01\xff";
  uint32_t seed = 12345;
  int ok = 0, refused = 0;
  for (int i = 0; i < 4000; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t at = (seed >> 8) % n;
    seed = seed * 1103515245u + 12345u;
    memcpy(buf, ring2, n);
    buf[at] = repl[(seed >> 8) % (sizeof(repl) - 1)];
    char err[640];
    brd_ir_plan_t *plan = NULL;
    ncclResult_t res = brd_plan_json_parse(buf, n, "t.json", &plan, NULL, err, sizeof(err));
    if (res == ncclSuccess) {
      /* Whatever parsed is a blob the verifier can read without faulting. */
      (void)brd_plan_verify(plan, NULL, NULL);
      brd_plan_destroy(plan);
      ok++;
    } else {
      assert_int_equal(res, ncclInvalidArgument);
      assert_int_equal(strncmp(err, "t.json: ", 8), 0);
      refused++;
    }
  }
  assert_true(refused > 1000);
  print_message("%d mutations parsed, %d refused\n", ok, refused);
  free(buf);
}

static void test_parse_alloc_failures(void **state) {
  (void)state;
  int failures_seen = 0;
  for (long k = 0;; k++) {
    brd_ir_plan_t *plan = NULL;
    alloc_calls = 0;
    fail_at = k;
    live = 0;
    armed = 1;
    ncclResult_t res = brd_plan_json_parse(ring2, strlen(ring2), "a.json", &plan, NULL,
                                           NULL, 0);
    if (res == ncclSuccess) brd_plan_destroy(plan);
    armed = 0;
    assert_int_equal(live, 0);
    if (res == ncclSuccess) break;
    assert_int_equal(res, ncclSystemError);
    assert_null(plan);
    failures_seen++;
  }
  assert_true(failures_seen > 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_written_matches_generator),
      cmocka_unit_test(test_every_generator_round_trips),
      cmocka_unit_test(test_port_channel_round_trips),
      cmocka_unit_test(test_schema_errors),
      cmocka_unit_test(test_malformed_json),
      cmocka_unit_test(test_library_fields),
      cmocka_unit_test(test_verifier_refuses_planted_faults),
      cmocka_unit_test(test_truncated_and_mutated),
      cmocka_unit_test(test_parse_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
