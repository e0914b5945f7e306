/*
 * braid-plan: print or draw the plan Braid generates for a collective.
 *
 *   braid-plan [-c coll] [-a algo] [-p proto] [-n nranks] [-b blocks]
 *              [-r root] [-s bytes] [-t dtype] [-d] [-V] [-J] [-o out.svg]
 *   braid-plan -f plan.json [-s bytes] [-t dtype] [-J] [-o out.svg]
 *   ... -J [-m min_bytes] [-M max_bytes] [-i any|yes|no] [-N ranks_per_node]
 *
 * Text output lists, per rank and block, every op with its buffers in
 * channel terms resolved to peer ranks. With -s the chunks of the first
 * window are resolved to element ranges for that message size. -V runs the
 * plan verifier. -o writes an SVG: one lane per (rank, block), ops in
 * program order left to right, and an arrow for every op that writes into
 * or signals a peer, from the op to the peer's lane, and for every op that
 * reads a peer's memory, from the peer's lane to the op. -J writes the plan
 * as JSON (docs/plans.md) instead of the text. -f loads a JSON plan in
 * place of a built-in one, checks it and always runs the verifier on it:
 * out of place (a failure refuses the plan), then in place (reported);
 * a plan declaring "inplace" is checked only the way it declares. -m, -M,
 * -i and -N set the plan library's fields (docs/plans.md) in the -J
 * output, over those a loaded document has.
 *
 * With -s (and no -J or -o) it also prints the cost estimate computed
 * from the plan's own ops (plan/plan_cost.h) on the tuner's model of
 * -g h100|h200|pcie GPUs (h100 by default), -N ranks per node (all ranks
 * on one node by default; several nodes get 8 NICs of 400 Gbit/s each),
 * beside the tuner's formula for the plan's algorithm and protocol.
 *
 * Linked against the static library: it reads the internal plan API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "algos/algos.h"
#include "device/ir.h"
#include "plan/plan.h"
#include "plan/plan_cost.h"
#include "plan/mscclpp.h"
#include "plan/plan_json.h"
#include "plan/tune.h"
#include "plan/verify.h"

static const char *coll_names[] = {"allreduce", "allgather", "reducescatter",
                                   "broadcast", "reduce", "alltoall",
                                   "gather", "scatter"};
static const char *algo_names[] = {"copy", "ring", "tree", "oneshot",
                                   "twoshot", "nvls"};
static const char *op_names[] = {"NOP", "COPY", "REDUCE", "PUT", "GET",
                                 "PKT_PUT", "PKT_REDUCE", "SIGNAL", "WAIT",
                                 "BARRIER", "FLUSH", "MC_REDUCE", "MC_STORE",
                                 "MC_RED", "MC_BARRIER"};
static const char *buf_names[] = {"in", "out", "scr", "sem"};

static int lookup(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, names[i]) == 0) return i;
  return -1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: braid-plan [-c coll] [-a algo] [-p LL|Simple] [-n nranks] "
          "[-b blocks]\n"
          "                  [-r root] [-s bytes] [-t dtype-size] [-d] [-V] "
          "[-J] [-o out.svg]\n"
          "       braid-plan -f plan.json [-s bytes] [-t dtype-size] [-J] "
          "[-o out.svg]\n"
          "  coll: allreduce allgather reducescatter broadcast reduce "
          "alltoall gather scatter\n"
          "  algo: ring tree oneshot twoshot hier (allreduce; hier and the tree across\n"
          "        nodes need -N); ring oneshot (direct) for\n"
          "        the others; zerocopy (allreduce, allgather, reducescatter: reads and\n"
          "        writes registered buffers in place, Simple only); nvls (allreduce,\n"
          "        allgather, reducescatter: switch channels) and nvls-ll (the\n"
          "        low-latency NVLS allreduce); nvlstree (allreduce: NVLS inside each\n"
          "        node of -N ranks, a ring across the nodes)\n"
          "  -d deterministic (rank-ordered) variant, -V verify the plan\n"
          "  -J write the plan as JSON, -f load (and verify) a JSON plan\n"
          "  -m/-M min/max message bytes, -i any|yes|no in place, -N ranks per node:\n"
          "     the plan library's fields in the -J output (docs/plans.md)\n"
          "  -g h100|h200|pcie: the GPUs the cost estimate (printed with -s) assumes;\n"
          "     -N also places that many ranks per node for it and for the tree and\n"
          "     hierarchical generators\n");
}

/* Prints the plan-derived estimate for `bytes` and, for a plan of an
 * algorithm the tuner models, the tuner's formula beside it. */
static int print_estimate(FILE *f, const brd_ir_plan_t *p, size_t bytes, size_t esize,
                          const char *gpu_s, int rpn, int tuner_algo) {
  brd_hw_gpu_t gpu;
  if (!brd_hw_gpu_parse(gpu_s, &gpu)) {
    fprintf(stderr, "braid-plan: -g takes h100, h200 or pcie\n");
    return 1;
  }
  int n = p->nranks;
  if (rpn <= 0 || rpn > n) rpn = n;
  if (n % rpn != 0) {
    fprintf(stderr, "braid-plan: -N %d does not divide %d ranks\n", rpn, n);
    return 1;
  }
  brd_tune_topo_t topo;
  if (brd_hw_topo(gpu, n / rpn, rpn, n / rpn > 1 ? 8 : 0, 400.0, &topo) != ncclSuccess) return 1;
  int dtype = esize == 1 ? 0 : esize == 2 ? 6 : esize == 8 ? 8 : 7;
  brd_plan_cost_t c;
  if (brd_plan_cost_estimate(p, &topo, bytes / esize, dtype, brd_plan_scratch_bytes(p), &c) !=
      ncclSuccess) {
    fprintf(stderr, "braid-plan: no estimate for this plan\n");
    return 1;
  }
  fprintf(f, "estimate for %zu bytes: %.1f us (critical path %llu sync hops, %llu bytes on the "
             "busiest channel; links alone %.1f us; %d x %s, %d per node)\n",
          bytes, c.time_us, (unsigned long long)c.sync_hops,
          (unsigned long long)c.busiest_chan_bytes, c.link_us, n, gpu_s, rpn);
  /* The tuner's size: the larger buffer for all-gather and reduce-scatter. */
  size_t tb = bytes;
  if (p->coll == BRD_IR_COLL_ALLGATHER || p->coll == BRD_IR_COLL_REDUCESCATTER)
    tb *= (size_t)n;
  int a = tuner_algo >= 0 ? tuner_algo : p->algo;
  if (a != BRD_IR_ALGO_COPY && a != BRD_IR_ALGO_NVLS && p->coll < BRD_IR_COLL_SENDRECV) {
    float formula = brd_tune_estimate(&topo, (brd_coll_t)p->coll, tb, (brd_algo_t)a,
                                      (brd_proto_t)p->proto);
    if (formula >= 0.0f)
      fprintf(f, "tuner's formula for %s/%s: %.1f us\n", brd_algo_name((brd_algo_t)a),
              brd_proto_name((brd_proto_t)p->proto), formula);
  }
  return 0;
}

static int ref_peer(const brd_ir_plan_t *p, int rank, brd_ir_ref_t r) {
  if (r.chan == BRD_IR_CHAN_LOCAL) return -1;
  return brd_ir_plan_chan(p, rank, r.chan)->peer;
}

static void print_ref(FILE *f, const brd_ir_plan_t *p, int rank,
                      brd_ir_ref_t r) {
  int buf = r.buf & BRD_IR_BUF_MASK;
  int peer = ref_peer(p, rank, r);
  fprintf(f, "%s%s", buf < 4 ? buf_names[buf] : "?",
          (r.buf & BRD_IR_REF_LL) ? "(LL)" : "");
  if (peer >= 0) fprintf(f, "@%d", peer);
  if (r.chan != BRD_IR_CHAN_LOCAL &&
      brd_ir_plan_chan(p, rank, r.chan)->type == BRD_IR_CHAN_SWITCH)
    fprintf(f, "@switch");
  fprintf(f, "[%u]", (unsigned)r.index);
}

static void print_plan(FILE *f, const brd_ir_plan_t *p, size_t bytes,
                       size_t esize) {
  fprintf(f,
          "plan: coll %s algo %s proto %s nranks %u blocks %u chunks %u "
          "slots %u sems %u seq/iter %u ops %u bytes %u\n",
          p->coll < 8 ? coll_names[p->coll] : "sendrecv",
          p->algo < 6 ? algo_names[p->algo] : "?",
          p->proto == BRD_IR_PROTO_LL ? "LL" : "Simple", p->nranks, p->nblocks,
          p->nchunks, p->nslots, p->nsems, p->seq_per_iter, p->nops,
          p->total_bytes);
  fprintf(f, "scratch per rank: %zu bytes (NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE)\n",
          brd_plan_scratch_bytes(p));
  if (bytes > 0) {
    brd_plan_layout_t l;
    int dtype = esize == 1 ? 0 : esize == 2 ? 6 : esize == 8 ? 8 : 7;
    if (brd_plan_layout_init(p, bytes / esize, dtype, brd_plan_scratch_bytes(p),
                             &l) == ncclSuccess) {
      fprintf(f, "layout for %zu bytes: %llu iteration(s), window %zu elements, "
                 "chunk %zu elements\n", bytes, (unsigned long long)l.niter,
              l.window, l.chunk_max);
      for (uint32_t c = 0; c < p->nchunks && c < 64; c++) {
        size_t start, n;
        brd_plan_layout_chunk(&l, 0, c, &start, &n);
        fprintf(f, "  chunk %u: elements [%zu, %zu)\n", c, start, start + n);
      }
    }
  }
  for (int r = 0; r < p->nranks; r++) {
    for (int b = 0; b < p->nblocks; b++) {
      const brd_ir_block_t *blk = brd_ir_plan_block(p, r, b);
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, b);
      fprintf(f, "rank %d block %d: %u ops\n", r, b, blk->nops);
      for (uint32_t i = 0; i < blk->nops; i++) {
        const brd_ir_op_t *op = &ops[i];
        fprintf(f, "  [%3u] %-10s", i,
                op->code < BRD_IR_OP_COUNT ? op_names[op->code] : "?");
        if (op->code == BRD_IR_OP_MC_BARRIER) {
          fprintf(f, " switch sem %u k %d", (unsigned)op->ref[0].index, op->k);
        } else if (op->code == BRD_IR_OP_SIGNAL || op->code == BRD_IR_OP_WAIT) {
          fprintf(f, " peer %d sem %u k %d", ref_peer(p, r, op->ref[0]),
                  (unsigned)op->ref[0].index, op->k);
        } else if (op->code != BRD_IR_OP_BARRIER && op->code != BRD_IR_OP_NOP) {
          fprintf(f, " chunks %u+%u ", (unsigned)op->chunk,
                  (unsigned)(op->nchunks ? op->nchunks : 1));
          for (int s = 0; s < op->nsrc; s++) {
            print_ref(f, p, r, op->ref[s]);
            fputc(s + 1 < op->nsrc ? ',' : ' ', f);
          }
          fputs("->", f);
          for (int d = 0; d < op->ndst; d++) {
            fputc(' ', f);
            print_ref(f, p, r, op->ref[op->nsrc + d]);
          }
          if (op->flags & BRD_IR_F_POSTOP) fputs(" +postop", f);
        }
        fputc('\n', f);
      }
    }
  }
}

/* SVG: lanes are (rank, block); x is the op's index in its block. */
static int write_svg(const char *path, const brd_ir_plan_t *p) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  uint32_t maxops = 1;
  for (int r = 0; r < p->nranks; r++)
    for (int b = 0; b < p->nblocks; b++) {
      uint32_t n = brd_ir_plan_block(p, r, b)->nops;
      if (n > maxops) maxops = n;
    }
  const int lane_h = 36, op_w = 30, left = 110, top = 40;
  int lanes = p->nranks * p->nblocks;
  int width = left + (int)maxops * op_w + 40;
  int height = top + lanes * lane_h + 20;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
             "font-family='monospace' font-size='10'>\n", width, height);
  fprintf(f, "<defs><marker id='a' markerWidth='6' markerHeight='6' refX='5' "
             "refY='3' orient='auto'><path d='M0,0 L6,3 L0,6 z' fill='#555'/>"
             "</marker></defs>\n");
  fprintf(f, "<text x='8' y='20' font-size='13'>%s %s %s, %u ranks x %u "
             "blocks</text>\n",
          p->coll < 8 ? coll_names[p->coll] : "sendrecv",
          p->algo < 6 ? algo_names[p->algo] : "?",
          p->proto == BRD_IR_PROTO_LL ? "LL" : "Simple", p->nranks, p->nblocks);
  for (int r = 0; r < p->nranks; r++) {
    for (int b = 0; b < p->nblocks; b++) {
      int y = top + (r * p->nblocks + b) * lane_h;
      fprintf(f, "<rect x='0' y='%d' width='%d' height='%d' fill='%s'/>\n", y,
              width, lane_h, r % 2 ? "#f4f4f4" : "#ffffff");
      fprintf(f, "<text x='8' y='%d'>rank %d blk %d</text>\n", y + 22, r, b);
    }
  }
  static const char *colors[] = {"#ccc", "#8fd18f", "#f2b05e", "#7fb2e5",
                                 "#b39ddb", "#64c7c7", "#e57f7f", "#ffe066",
                                 "#ffe066", "#999", "#999", "#f48fb1", "#f48fb1",
                                 "#f48fb1", "#999"};
  for (int r = 0; r < p->nranks; r++) {
    for (int b = 0; b < p->nblocks; b++) {
      const brd_ir_block_t *blk = brd_ir_plan_block(p, r, b);
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, b);
      int y = top + (r * p->nblocks + b) * lane_h;
      for (uint32_t i = 0; i < blk->nops; i++) {
        const brd_ir_op_t *op = &ops[i];
        int x = left + (int)i * op_w;
        int code = op->code < BRD_IR_OP_COUNT ? op->code : 0;
        fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' rx='3' "
                   "fill='%s'><title>%s</title></rect>\n",
                x, y + 6, op_w - 4, lane_h - 12, colors[code], op_names[code]);
        fprintf(f, "<text x='%d' y='%d' font-size='8'>%.3s</text>\n", x + 2,
                y + 22, op_names[code]);
        /* Arrows to peers this op writes into or signals. */
        int first = op->code == BRD_IR_OP_SIGNAL ? 0 : op->nsrc;
        int last = op->code == BRD_IR_OP_SIGNAL ? 1 : op->nsrc + op->ndst;
        if (op->code == BRD_IR_OP_WAIT || op->code == BRD_IR_OP_BARRIER) last = first;
        for (int k = first; k < last; k++) {
          int peer = ref_peer(p, r, op->ref[k]);
          if (peer < 0) continue;
          int py = top + (peer * p->nblocks + b) * lane_h + lane_h / 2;
          fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#555' "
                     "stroke-width='0.8' %smarker-end='url(#a)'/>\n",
                  x + op_w / 2, y + lane_h / 2, x + op_w / 2 + 8, py,
                  op->code == BRD_IR_OP_SIGNAL ? "stroke-dasharray='3,2' " : "");
        }
        /* Arrows from peers whose memory this op reads (peer inputs of
         * zero-copy plans, peers' outputs and scratch). */
        int data = op->code != BRD_IR_OP_SIGNAL && op->code != BRD_IR_OP_WAIT &&
                   op->code != BRD_IR_OP_BARRIER;
        for (int k = 0; data && k < op->nsrc; k++) {
          int peer = ref_peer(p, r, op->ref[k]);
          if (peer < 0) continue;
          int py = top + (peer * p->nblocks + b) * lane_h + lane_h / 2;
          fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#2a7' "
                     "stroke-width='0.8' marker-end='url(#a)'/>\n",
                  x + op_w / 2 + 8, py, x + op_w / 2, y + lane_h / 2);
        }
      }
    }
  }
  fprintf(f, "</svg>\n");
  fclose(f);
  return 0;
}

int main(int argc, char **argv) {
  const char *coll_s = "allreduce", *algo_s = "ring", *proto_s = "Simple";
  const char *svg = NULL, *json_in = NULL;
  int nranks = 4, nblocks = 1, root = 0, det = 0, verify = 0, json_out = 0, opt;
  size_t bytes = 0, esize = 4;
  brd_plan_json_meta_t meta;
  const char *min_s = NULL, *max_s = NULL, *inplace_s = NULL, *rpn_s = NULL, *gpu_s = "h100";
  memset(&meta, 0, sizeof(meta));
  while ((opt = getopt(argc, argv, "c:a:p:n:b:r:s:t:dVJf:o:m:M:i:N:g:h")) != -1) {
    switch (opt) {
    case 'c': coll_s = optarg; break;
    case 'a': algo_s = optarg; break;
    case 'p': proto_s = optarg; break;
    case 'n': nranks = atoi(optarg); break;
    case 'b': nblocks = atoi(optarg); break;
    case 'r': root = atoi(optarg); break;
    case 's': bytes = strtoull(optarg, NULL, 0); break;
    case 't': esize = strtoull(optarg, NULL, 0); break;
    case 'd': det = 1; break;
    case 'V': verify = 1; break;
    case 'o': svg = optarg; break;
    case 'J': json_out = 1; break;
    case 'f': json_in = optarg; break;
    case 'm': min_s = optarg; break;
    case 'M': max_s = optarg; break;
    case 'i': inplace_s = optarg; break;
    case 'N': rpn_s = optarg; break;
    case 'g': gpu_s = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  int coll = lookup(coll_s, coll_names, 8);
  int algo = lookup(algo_s, algo_names, 6);
  int zerocopy = strcasecmp(algo_s, "zerocopy") == 0;
  if (strcasecmp(algo_s, "nvls-ll") == 0) algo = BRD_IR_ALGO_NVLS | BRD_ALGOS_LOWLAT;
  if (zerocopy) algo = BRD_IR_ALGO_TWOSHOT;
  if (algo < 0 && strcasecmp(algo_s, "direct") == 0) algo = BRD_IR_ALGO_ONESHOT;
  if (algo < 0 && strcasecmp(algo_s, "chain") == 0) algo = BRD_IR_ALGO_RING;
  if (algo < 0 && strcasecmp(algo_s, "pairwise") == 0) algo = BRD_IR_ALGO_ONESHOT;
  if (algo < 0 && strcasecmp(algo_s, "hier") == 0) algo = BRD_ALGO_HIER;
  if (algo < 0 && strcasecmp(algo_s, "nvlstree") == 0) algo = BRD_ALGO_NVLS_TREE;
  int proto = strcasecmp(proto_s, "LL") == 0       ? BRD_IR_PROTO_LL
              : strcasecmp(proto_s, "Simple") == 0 ? BRD_IR_PROTO_SIMPLE
                                                   : -1;
  if (coll < 0 || algo < 0 || proto < 0 || nranks < 1 || nblocks < 1 ||
      (esize != 1 && esize != 2 && esize != 4 && esize != 8)) {
    fprintf(stderr, "braid-plan: unknown collective, algorithm, protocol or "
                    "size\n");
    usage(stderr);
    return 2;
  }
  brd_ir_plan_t *plan = NULL;
  ncclResult_t res;
  if (json_in != NULL) {
    /* Loading verifies: a plan that the verifier refuses is never shown
     * as if it were usable. */
    char err[640];
    brd_verify_report_t rep;
    /* An MSCCL++ execution plan (as the plan library reads it, one Braid
     * block per thread block): translated, then checked as below. */
    int is_ms = 0;
    res = brd_plan_mscclpp_read(json_in, 0, &is_ms, &plan, &meta, err, sizeof(err));
    if (res == ncclSuccess && is_ms) {
      brd_verify_opts_t vo = {meta.inplace == BRD_PLAN_JSON_INPLACE_YES, 2};
      if (brd_plan_verify(plan, &vo, &rep) != ncclSuccess) {
        fprintf(stderr, "braid-plan: %s: the MSCCL++ plan is wrong: %s\n", json_in, rep.msg);
        brd_plan_destroy(plan);
        return 1;
      }
    } else if (res == ncclSuccess) {
      res = brd_plan_json_load(json_in, NULL, &plan, &meta, &rep, err, sizeof(err));
    }
    if (res != ncclSuccess) {
      fprintf(stderr, "braid-plan: %s\n", err);
      return 1;
    }
    verify = 0;
    FILE *vf = json_out || svg != NULL ? stderr : stdout;
    if (meta.inplace != BRD_PLAN_JSON_INPLACE_ANY) {
      /* Loading verified it the one way it declares. */
      fprintf(vf, "verifier: plan is correct %s (as it declares)\n",
              meta.inplace == BRD_PLAN_JSON_INPLACE_YES ? "in place" : "out of place");
      goto show;
    }
    /* Loading verified it out of place; say whether in place holds too
     * (a plan may be meant for out-of-place calls only). */
    brd_verify_opts_t ip = {1, 2};
    int in_place_ok = brd_plan_verify(plan, &ip, &rep) == ncclSuccess;
    if (!in_place_ok)
      fprintf(stderr, "braid-plan: %s: wrong in place: %s\n", json_in, rep.msg);
    fprintf(vf, "verifier: plan is correct%s\n",
            in_place_ok ? "" : " out of place only (WRONG in place)");
    goto show;
  }
  brd_algos_args_t args = {.nranks = nranks, .order = NULL, .nblocks = nblocks,
                           .proto = proto};
  /* -N: the node layout the generators that place by node (tree, hier)
   * follow, rank r on node r / N. */
  int *host = NULL;
  if (rpn_s != NULL && atoi(rpn_s) > 0 && nranks > 0) {
    host = malloc((size_t)nranks * sizeof(*host));
    if (host == NULL) return 1;
    for (int r = 0; r < nranks; r++) host[r] = r / atoi(rpn_s);
  }
  if (!zerocopy)
    res = brd_algos_generate_hosts(coll, algo, &args, host, root, det, &plan);
  else if (det)
    res = ncclInvalidArgument;
  else if (coll == BRD_IR_COLL_ALLREDUCE)
    res = brd_algos_zerocopy_allreduce(&args, &plan);
  else if (coll == BRD_IR_COLL_REDUCESCATTER)
    res = brd_algos_zerocopy_reducescatter(&args, &plan);
  else if (coll == BRD_IR_COLL_ALLGATHER)
    res = brd_algos_zerocopy_allgather(&args, &plan);
  else
    res = ncclInvalidArgument;
  free(host);
  if (res != ncclSuccess) {
    fprintf(stderr, "braid-plan: no plan for %s/%s/%s with %d ranks: %s\n",
            coll_s, algo_s, proto_s, nranks, ncclGetErrorString(res));
    return 1;
  }
show:;
  int rc = 0;
  if (min_s != NULL) meta.min_bytes = strtoull(min_s, NULL, 0);
  if (max_s != NULL) meta.max_bytes = strtoull(max_s, NULL, 0);
  if (rpn_s != NULL) meta.ranks_per_node = atoi(rpn_s);
  if (inplace_s != NULL) {
    static const char *const ip_names[] = {"any", "yes", "no"};
    meta.inplace = lookup(inplace_s, ip_names, 3);
    if (meta.inplace < 0) {
      fprintf(stderr, "braid-plan: -i takes any, yes or no\n");
      brd_plan_destroy(plan);
      return 2;
    }
  }
  if (json_out) {
    if (brd_plan_json_write(plan, &meta, stdout) != ncclSuccess) rc = 1;
  } else if (svg != NULL) {
    rc = write_svg(svg, plan);
    if (rc == 0) printf("wrote %s\n", svg);
  } else {
    print_plan(stdout, plan, bytes, esize);
    if (bytes > 0 && print_estimate(stdout, plan, bytes, esize, gpu_s,
                                    rpn_s != NULL ? atoi(rpn_s) : 0,
                                    json_in == NULL && (algo == BRD_ALGO_HIER || algo == BRD_ALGO_NVLS_TREE) ? algo
                                                                                     : -1) != 0)
      rc = 1;
  }
  if (verify) {
    brd_verify_opts_t vo;
    memset(&vo, 0, sizeof(vo));
    vo.niter = 2;
    brd_verify_report_t rep;
    res = brd_plan_verify(plan, &vo, &rep);
    fprintf(json_out ? stderr : stdout, "verifier: %s\n", res == ncclSuccess ? "plan is correct"
                                                 : "plan is WRONG (see above)");
    if (res != ncclSuccess) rc = 1;
  }
  brd_plan_destroy(plan);
  return rc;
}
