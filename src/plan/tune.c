/*
 * Braid: the cost model behind algorithm and protocol choice, and the
 * NCCL_ALGO / NCCL_PROTO overrides.
 *
 * For n ranks on N nodes of L ranks each, S bytes, algorithm a, protocol p:
 *
 *   time = BASE
 *        + (h_intra * intra_lat + h_inter * inter_lat) * step[p]
 *        + max(v_intra / B_intra, v_inter / B_inter) / (1000 * eff[p] * fit[a])
 *
 * BASE (5 us; the topology's launch_us and block_us where it sets them, as
 * host mode does) is the launch and first handshake. h_* count the hops one
 * byte waits for on its way, v_* the bytes crossing one rank's busiest link
 * of each kind, B_* = link GB/s / ranks_per_device (ranks on one GPU share
 * its links); 1 GB/s moves 1000 bytes per us.
 *
 *   step[p] = LL 1, LL128 2.5, Simple 5: LL's flag travels inside every
 *             8-byte line, LL128 waits on 128-byte lines, Simple fences and
 *             signals once per chunk.
 *   eff[p]  = LL 4/8, LL128 120/128, Simple 1: payload per byte moved.
 *   fit[a]  = how close a pattern gets to link speed: Ring 1, Tree and
 *             CollNet 0.9 (pipeline fill of reduce-then-broadcast), OneShot
 *             and TwoShot 0.8 (many peers contending for one link), NVLS
 *             and NVLSTree 0.85, PAT 0.75.
 *
 * With f = (n-1)/n, clog2 = ceil(log2), and "one hop" meaning an intra hop
 * on one node and an inter hop otherwise:
 *
 *   Ring     AllReduce           2(n-1) hops, 2(N-1) of them inter; v = 2fS
 *            AllGather/RedScat   n-1 hops, N-1 inter;                v = fS
 *            Broadcast/Reduce    n-1 hops, N-1 inter (a pipeline);   v = S
 *   Tree     AllReduce           2 clog2(L) intra, 2 clog2(N) inter; v = 2S
 *            Broadcast/Reduce    clog2(L) intra, clog2(N) inter;     v = S
 *            (several nodes: L-1 intra hops for clog2(L), the chain inside
 *            each node under the trees between nodes, NCCL's shape)
 *   OneShot  AllReduce/Bcast/Red one hop; v_intra=(L-1)S, v_inter=(n-L)S
 *            AllGather/RedScat/AlltoAll/Gather/Scatter
 *                                one hop; (L-1)S/n and (n-L)S/n
 *            Send/Recv           one hop; S
 *   TwoShot  AllReduce/Bcast/Red two hops; 2(L-1)S/n and 2(n-L)S/n
 *   NVLS     AllReduce           2 intra (+1 inter); v_intra=S, v_inter=S/L
 *            AllGather/RedScat   1 intra (+1 inter); (L-1)S/n, (n-L)S/n
 *            (several nodes, with CollNet; on one node NVLS is timed as
 *            Braid's switch plans run it: nvls_time below)
 *   NVLSTree AllReduce           2 intra, 2(N-1) inter; S and 2(N-1)/N x S/L
 *            (Braid's plan runs a ring per local index across the nodes,
 *            algos/nvls_hier.c; on two nodes NCCL's tree moves the same)
 *   CollNetDirect AllReduce      2 intra, 1 inter; 2(L-1)S/L and S/L
 *            AllGather/RedScat   1 intra, 1 inter; (L-1)S/n, (n-L)S/n
 *   CollNetChain AllReduce       2(L-1) intra, 1 inter; S and S
 *   PAT      AllGather/RedScat   clog2(n) inter; v = fS
 *
 * With NIC counts (inter_nics > 0) the inter term is per node instead:
 * the bytes leaving one node over inter_nics x inter_bw. Ring, Tree and
 * CollNetChain cross between nodes once per ring or tree edge, whichever
 * rank does it, so v_inter above already is a node's egress; a tree on two
 * nodes is one exchange each way (each node is the root of one of the two
 * trees), so Tree AllReduce moves S, not 2S, at N = 2 (how it and NCCL's
 * NVLSTree "go beyond the network bottleneck" at 2 nodes, nvls-ib.md
 * §4.2); the other patterns send from every rank, so a node moves L x
 * v_inter (NVLSTree's rings: 2(N-1)/N x S, S at N = 2 as the tree).
 * nvls_bw, when set, is the rate NVLS moves S at inside a node.
 *
 *   Hier     AllReduce           2(L-1) intra + 2(N-1) inter hops;
 *            v_intra = 2(L-1)S/L (reduce-scatter, then all-gather);
 *            v_inter = 2(N-1)/N x S/L per rank, 2(N-1)/N x S per node (a
 *            ring per local index). fit 1: rings. One block runs its
 *            three phases in turn; the model overlaps the node links and
 *            the net (max, as for the others) because the blocks run
 *            independently and so keep both busy. Nodes of equal size, two
 *            ranks or more each (algos/hier.c).
 *
 * Host mode (host_mode: ranks are CPU threads moving bytes through shared
 * memory) keeps the formula with its own figures, fitted to measurements
 * (tune_hw.c's host.* entries; docs/perf/cost-model.md):
 *
 *   BASE     launch_us x L^2 (+ block_us x L from block2_bytes, when a
 *            rank runs a second worker block): a launch wakes every rank's
 *            threads, which take turns on the host's cores
 *   lat      intra_lat, per hop, grows with the ranks on the host (a wait
 *            is a thread the host's cores must get to); OneShot and
 *            TwoShot wait on every other rank at each hop, which adds
 *            host.fan_per_peer x (L - 1) x L per hop (host_shape,
 *            brd_tune_host_fan_us)
 *   B_intra  intra_bw, the host's copy rate shared by its ranks
 *   step[p]  LL host.ll_step, Simple 1: both wait on a flag the same way
 *   eff[p]   LL host.ll_eff, Simple 1: LL stores a flag with every 8-byte
 *            line and the reader polls each
 *   fit[a]   host.fit_ring, host.fit_tree, host.fit_twoshot; OneShot 1
 *            (brd_tune_host_fit)
 *   Tree     AllReduce on one node: host.tree_hops hops per level, the
 *            critical path of the tree plan as generated (braid-plan),
 *            not NCCL's 2 (Broadcast/Reduce: half); LL with bytes for
 *            k < 4 of the plan's 16-byte-aligned chunks: (k + 1) / 5 of
 *            them (LL waits on data; an empty chunk has none)
 *
 * Intra terms vanish on one rank per node, inter terms on one node. Any
 * other (algorithm, collective) pair cannot run. NVLS, NVLSTree, CollNet
 * and PAT move only Simple; NVLS needs multicast (or, in host mode, the
 * runtime's emulation), one rank per GPU and one node or CollNet;
 * NVLSTree NVLS per node on several nodes of one size; CollNet a network
 * reduction and several nodes; PAT one rank per node (as NCCL enables it).
 * AlltoAll, Gather, Scatter, Send and Recv have one pattern, direct
 * exchange, which goes by OneShot.
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/check.h"
#include "base/debug.h"
#include "nccl_common.h"
#include "plan/tune.h"

#define BASE_US 5.0
#define HW_HOST_TREE_HOPS (brd_hw_consts[BRD_HW_HOST_TREE_HOPS].value)
#define NFUNC 5 /* the collectives NCCL_ALGO / NCCL_PROTO name */
#define NAMES_MAX 192
#define TABLE_LINE_MAX 512
#define SEEN_SLOTS 32

static const char *const algo_names[BRD_ALGO_COUNT] = {
    [BRD_ALGO_RING] = "Ring",
    [BRD_ALGO_TREE] = "Tree",
    [BRD_ALGO_ONESHOT] = "OneShot",
    [BRD_ALGO_TWOSHOT] = "TwoShot",
    [BRD_ALGO_NVLS] = "NVLS",
    [BRD_ALGO_NVLS_TREE] = "NVLSTree",
    [BRD_ALGO_COLLNET_DIRECT] = "CollNetDirect",
    [BRD_ALGO_COLLNET_CHAIN] = "CollNetChain",
    [BRD_ALGO_PAT] = "PAT",
    [BRD_ALGO_HIER] = "Hier",
};

static const char *const proto_names[BRD_PROTO_COUNT] = {
    [BRD_PROTO_LL] = "LL",
    [BRD_PROTO_LL128] = "LL128",
    [BRD_PROTO_SIMPLE] = "Simple",
};

/* The order names are listed, parsed and tried in: on equal cost the
 * earlier wins (LL before Simple, whatever the IR's codes). */
#define NALGOS 10
static const int algo_order[NALGOS] = {
    BRD_ALGO_RING, BRD_ALGO_TREE, BRD_ALGO_ONESHOT, BRD_ALGO_TWOSHOT, BRD_ALGO_NVLS,
    BRD_ALGO_NVLS_TREE, BRD_ALGO_COLLNET_DIRECT, BRD_ALGO_COLLNET_CHAIN, BRD_ALGO_PAT,
    BRD_ALGO_HIER,
};
static const int proto_order[BRD_PROTO_COUNT] = {BRD_PROTO_LL, BRD_PROTO_LL128,
                                                 BRD_PROTO_SIMPLE};

/* NCCL's function names, in NCCL's order, and the collective each means. */
static const char *const func_names[NFUNC] = {
    "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
};
static const brd_coll_t func_colls[NFUNC] = {
    BRD_COLL_BROADCAST, BRD_COLL_REDUCE, BRD_COLL_ALLGATHER,
    BRD_COLL_REDUCESCATTER, BRD_COLL_ALLREDUCE,
};
static const int func_order[NFUNC] = {0, 1, 2, 3, 4};

/* ncclFuncToString's spellings, which the log line carries. */
static const char *const coll_names[BRD_COLL_COUNT] = {
    [BRD_COLL_ALLREDUCE] = "AllReduce",
    [BRD_COLL_ALLGATHER] = "AllGather",
    [BRD_COLL_REDUCESCATTER] = "ReduceScatter",
    [BRD_COLL_BROADCAST] = "Broadcast",
    [BRD_COLL_REDUCE] = "Reduce",
    [BRD_COLL_ALLTOALL] = "AlltoAll",
    [BRD_COLL_GATHER] = "Gather",
    [BRD_COLL_SCATTER] = "Scatter",
    [BRD_COLL_SEND] = "Send",
    [BRD_COLL_RECV] = "Recv",
};

static const double proto_step[BRD_PROTO_COUNT] = {
    [BRD_PROTO_LL] = 1.0, [BRD_PROTO_LL128] = 2.5, [BRD_PROTO_SIMPLE] = 5.0};
static const double proto_eff[BRD_PROTO_COUNT] = {
    [BRD_PROTO_LL] = 0.5, [BRD_PROTO_LL128] = 120.0 / 128.0, [BRD_PROTO_SIMPLE] = 1.0};
static const double algo_fit[BRD_ALGO_COUNT] = {
    [BRD_ALGO_RING] = 1.0,           [BRD_ALGO_TREE] = 0.9,
    [BRD_ALGO_ONESHOT] = 0.8,        [BRD_ALGO_TWOSHOT] = 0.8,
    [BRD_ALGO_NVLS] = 0.85,          [BRD_ALGO_NVLS_TREE] = 0.85,
    [BRD_ALGO_COLLNET_DIRECT] = 0.9, [BRD_ALGO_COLLNET_CHAIN] = 0.9,
    [BRD_ALGO_PAT] = 0.75,           [BRD_ALGO_HIER] = 1.0,
};

/* Host mode's protocol factors: LL's from the fit (brd_hw_consts),
 * Simple 1; LL128 does not run in host mode (Simple's). */
static double host_step(int p) {
  return p == BRD_PROTO_LL ? brd_hw_consts[BRD_HW_HOST_LL_STEP].value : 1.0;
}
static double host_eff(int p) {
  return p == BRD_PROTO_LL ? brd_hw_consts[BRD_HW_HOST_LL_EFF].value : 1.0;
}

/* See tune.h. */
double brd_tune_launch_us(const brd_tune_topo_t *t, int blocks) {
  double us = t != NULL && t->launch_us > 0.0f ? t->launch_us : BASE_US;
  if (t != NULL && blocks > 1) us += (blocks - 1) * (double)t->block_us;
  return us;
}
double brd_tune_proto_step(const brd_tune_topo_t *t, int proto) {
  if (proto < 0 || proto >= BRD_PROTO_COUNT) proto = BRD_PROTO_SIMPLE;
  return t != NULL && t->host_mode ? host_step(proto) : proto_step[proto];
}
double brd_tune_proto_eff(const brd_tune_topo_t *t, int proto) {
  if (proto < 0 || proto >= BRD_PROTO_COUNT) proto = BRD_PROTO_SIMPLE;
  return t != NULL && t->host_mode ? host_eff(proto) : proto_eff[proto];
}

/* The launch for a call of `bytes` per rank (the count times the element
 * size, as the backend's block rule reads it): one block, or two from the
 * size the topology says a second one starts at. */
static double launch_for(const brd_tune_topo_t *t, double bytes) {
  int two = t->block2_bytes > 0 && bytes >= (double)t->block2_bytes;
  return brd_tune_launch_us(t, two ? 2 : 1);
}
double brd_tune_algo_fit(int algo) {
  return algo >= 0 && algo < BRD_ALGO_COUNT ? algo_fit[algo] : 1.0;
}

/* Protocols each algorithm's kernels implement. */
static const uint32_t algo_protos[BRD_ALGO_COUNT] = {
    [BRD_ALGO_RING] = BRD_PROTO_ALL,
    [BRD_ALGO_TREE] = BRD_PROTO_ALL,
    [BRD_ALGO_ONESHOT] = BRD_PROTO_ALL,
    [BRD_ALGO_TWOSHOT] = BRD_PROTO_ALL,
    [BRD_ALGO_NVLS] = BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
    [BRD_ALGO_NVLS_TREE] = BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
    [BRD_ALGO_COLLNET_DIRECT] = BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
    [BRD_ALGO_COLLNET_CHAIN] = BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
    [BRD_ALGO_PAT] = BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
    /* Generated in LL and Simple (no LL128 generator exists for any). */
    [BRD_ALGO_HIER] = BRD_PROTO_BIT(BRD_PROTO_LL) | BRD_PROTO_BIT(BRD_PROTO_SIMPLE),
};

/* Sizes of the cost table in the TUNING log. */
static const size_t table_sizes[] = {1u << 10, 1u << 16, 1u << 22, 1u << 28};
static const char *const table_size_names[] = {"1 KiB", "64 KiB", "4 MiB", "256 MiB"};
#define TABLE_NSIZES (sizeof(table_sizes) / sizeof(table_sizes[0]))

/* Fingerprints of the (topology, collective) pairs whose table was logged.
 * A lost race logs a table twice, which is harmless. */
static _Atomic uint64_t seen_tables[SEEN_SLOTS];
static atomic_uint seen_next;

/* One algorithm's shape for one call: see the table at the top. */
typedef struct {
  double hops_intra;
  double hops_inter;
  double vol_intra;   /* bytes over a rank's busiest intra-node link */
  double vol_inter;   /* bytes over a rank's busiest inter-node link */
} shape_t;

/* What a list override is about: NCCL_ALGO or NCCL_PROTO. */
typedef struct {
  const char *var;            /* "NCCL_ALGO" */
  const char *what;           /* "algorithm" */
  const char *const *names;   /* valid names, bit i = names[i] */
  const int *order;           /* the codes with a name, in NCCL's order */
  int count;                  /* entries of order */
  const char *example;        /* a valid list, for messages */
} list_spec_t;

/* See tune.h. */
const char *brd_algo_name(brd_algo_t algo) {
  if ((unsigned)algo >= BRD_ALGO_COUNT || algo_names[algo] == NULL) return "Unknown";
  return algo_names[algo];
}

/* See tune.h. */
const char *brd_proto_name(brd_proto_t proto) {
  if ((unsigned)proto >= BRD_PROTO_COUNT) return "Unknown";
  return proto_names[proto];
}

static const char *coll_name(brd_coll_t coll) {
  if ((unsigned)coll >= BRD_COLL_COUNT || coll_names[coll] == NULL) return "Unknown";
  return coll_names[coll];
}

/* Code of the name equal (ignoring case) to s[0..len), or -1. */
static int name_find(const char *const *names, const int *order, int count, const char *s,
                     size_t len) {
  for (int i = 0; i < count; i++) {
    const char *name = names[order[i]];
    if (strlen(name) == len && strncasecmp(name, s, len) == 0) return order[i];
  }
  return -1;
}

/* "A, B, C" for the names whose bit is set in bits, in `order`. */
static void names_join(const char *const *names, const int *order, int count,
                       uint32_t bits, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < count; i++) {
    if ((bits & (1u << order[i])) == 0) continue;
    int n = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", names[order[i]]);
    if (n < 0 || (size_t)n >= size - len) break;
    len += (size_t)n;
  }
}

/* Parses one override into rows[f] (bits allowed for NCCL function f);
 * touched_out gets a bit per function some entry set. */
static ncclResult_t list_parse(const list_spec_t *spec, const char *str,
                               uint32_t rows[NFUNC], uint32_t *touched_out) {
  uint32_t all = 0;
  for (int i = 0; i < spec->count; i++) all |= 1u << spec->order[i];
  uint32_t touched = 0;
  char valid[NAMES_MAX];
  char funcs[NAMES_MAX];
  names_join(spec->names, spec->order, spec->count, all, valid, sizeof(valid));
  names_join(func_names, func_order, NFUNC, (1u << NFUNC) - 1u, funcs, sizeof(funcs));

  const char *entry = str;
  for (int first = 1;; first = 0) {
    const char *end = entry + strcspn(entry, ";");
    int elen = (int)(end - entry);
    if (elen == 0) {
      WARN("%s=\"%s\": empty entry (stray ';'); separate entries with single "
           "semicolons, e.g. %s;allreduce:%s", spec->var, str, spec->example, spec->example);
      return ncclInvalidUsage;
    }
    const char *list = entry;
    const char *colon = memchr(entry, ':', (size_t)elen);
    int func = -1; /* -1: every function */
    if (colon != NULL) {
      if (memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL) {
        WARN("%s=\"%s\": entry \"%.*s\" has more than one ':'; write one function "
             "per entry, e.g. allreduce:%s;broadcast:%s", spec->var, str, elen, entry,
             spec->example, spec->example);
        return ncclInvalidUsage;
      }
      int flen = (int)(colon - entry);
      func = name_find(func_names, func_order, NFUNC, entry, (size_t)flen);
      if (flen == 0) {
        WARN("%s=\"%s\": entry \"%.*s\" has no function before ':'; valid functions "
             "are %s (case-insensitive)", spec->var, str, elen, entry, funcs);
        return ncclInvalidUsage;
      }
      if (func < 0) {
        WARN("%s=\"%s\": unknown function \"%.*s\" in entry \"%.*s\"; valid functions "
             "are %s (case-insensitive)", spec->var, str, flen, entry, elen, entry, funcs);
        return ncclInvalidUsage;
      }
      list = colon + 1;
    } else if (!first) {
      /* Unprefixed, it would overwrite every entry before it (NCCL's rule). */
      WARN("%s=\"%s\": entry \"%.*s\" has no function prefix; only the first entry "
           "may omit it, e.g. allreduce:%.*s", spec->var, str, elen, entry, elen, entry);
      return ncclInvalidUsage;
    }

    int negate = list < end && list[0] == '^';
    if (negate) list++;
    if (list == end) {
      WARN("%s=\"%s\": entry \"%.*s\" names no %s; valid %ss are %s (case-insensitive, "
           "a leading ^ excludes the names that follow)", spec->var, str, elen, entry,
           spec->what, spec->what, valid);
      return ncclInvalidUsage;
    }

    uint32_t bits = 0;
    for (const char *tok = list;;) {
      const char *tend = tok + strcspn(tok, ",;");
      int tlen = (int)(tend - tok);
      if (tlen == 0) {
        WARN("%s=\"%s\": entry \"%.*s\" has an empty %s name (stray ','); separate "
             "names with single commas, e.g. %s", spec->var, str, elen, entry, spec->what,
             spec->example);
        return ncclInvalidUsage;
      }
      int idx = name_find(spec->names, spec->order, spec->count, tok, (size_t)tlen);
      if (idx < 0) {
        WARN("%s=\"%s\": unknown %s \"%.*s\"; valid %ss are %s (case-insensitive, "
             "a leading ^ excludes the names that follow)", spec->var, str, spec->what,
             tlen, tok, spec->what, valid);
        return ncclInvalidUsage;
      }
      bits |= 1u << idx;
      if (tend == end) break;
      tok = tend + 1;
    }

    uint32_t row = negate ? (all & ~bits) : bits;
    for (int f = 0; f < NFUNC; f++) {
      if (func >= 0 && f != func) continue;
      rows[f] = row;
      touched |= 1u << f;
    }
    if (*end == '\0') break;
    entry = end + 1;
  }
  *touched_out = touched;
  return ncclSuccess;
}

/* One INFO/ENV line per function with what the overrides leave. */
static void mask_log(const brd_tune_mask_t *m) {
  for (int f = 0; f < NFUNC; f++) {
    brd_coll_t c = func_colls[f];
    char algos[NAMES_MAX], protos[NAMES_MAX];
    names_join(algo_names, algo_order, NALGOS, m->algos[c], algos, sizeof(algos));
    names_join(proto_names, proto_order, BRD_PROTO_COUNT, m->protos[c], protos,
               sizeof(protos));
    INFO(BRD_SUBSYS_ENV, "NCCL_ALGO/NCCL_PROTO leave %s with algorithms {%s} and "
         "protocols {%s}%s", func_names[f], algos, protos,
         (m->protos_auto[c] & BRD_PROTO_BIT(BRD_PROTO_LL128)) ? " (LL128 where safe)" : "");
  }
}

/* See tune.h. */
ncclResult_t brd_tune_parse(const char *algo_env, const char *proto_env,
                            brd_tune_mask_t *mask_out) {
  static const list_spec_t algo_spec = {"NCCL_ALGO", "algorithm", algo_names,
                                        algo_order, NALGOS, "ring,tree"};
  static const list_spec_t proto_spec = {"NCCL_PROTO", "protocol", proto_names,
                                         proto_order, BRD_PROTO_COUNT, "LL,Simple"};
  brd_tune_mask_t m;
  uint32_t algo_rows[NFUNC], proto_rows[NFUNC];
  uint32_t algo_touched = 0, proto_touched = 0;

  if (mask_out == NULL) {
    WARN("brd_tune_parse: mask_out is NULL");
    return ncclInternalError;
  }
  for (int f = 0; f < NFUNC; f++) {
    algo_rows[f] = BRD_ALGO_ALL;
    proto_rows[f] = BRD_PROTO_ALL;
  }
  if (algo_env != NULL && algo_env[0] != '\0')
    CHECK(list_parse(&algo_spec, algo_env, algo_rows, &algo_touched));
  if (proto_env != NULL && proto_env[0] != '\0')
    CHECK(list_parse(&proto_spec, proto_env, proto_rows, &proto_touched));

  memset(&m, 0, sizeof(m));
  for (int c = 0; c < BRD_COLL_COUNT; c++) {
    m.algos[c] = BRD_ALGO_ALL;
    m.protos[c] = BRD_PROTO_ALL;
    m.protos_auto[c] = BRD_PROTO_BIT(BRD_PROTO_LL128);
  }
  for (int f = 0; f < NFUNC; f++) {
    brd_coll_t c = func_colls[f];
    m.algos[c] = algo_rows[f];
    m.protos[c] = proto_rows[f];
    /* Once an entry names protocols for a function, LL128 is on or off as
     * written, whatever the hardware (NCCL: "^LL" turns LL128 on). */
    if (proto_touched & (1u << f)) m.protos_auto[c] = 0;
  }
  snprintf(m.algo_env, sizeof(m.algo_env), "%s", algo_env != NULL ? algo_env : "");
  snprintf(m.proto_env, sizeof(m.proto_env), "%s", proto_env != NULL ? proto_env : "");

  if ((algo_touched | proto_touched) != 0 && brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_ENV))
    mask_log(&m);
  *mask_out = m;
  return ncclSuccess;
}

static int finite_nonneg(float x) { return x >= 0.0f && x <= FLT_MAX; }

/* NULL when topo is usable, else what is wrong with it. */
static const char *topo_problem(const brd_tune_topo_t *t) {
  if (t->nranks < 1 || t->nnodes < 1 || t->local_nranks < 1 || t->ranks_per_device < 1)
    return "a count below 1";
  if (t->nnodes > t->nranks || t->local_nranks > t->nranks)
    return "more nodes or ranks per node than ranks";
  if ((long long)t->nnodes * t->local_nranks < t->nranks)
    return "nodes x ranks per node below the rank count";
  if (!finite_nonneg(t->intra_lat) || !finite_nonneg(t->inter_lat) ||
      !finite_nonneg(t->intra_bw) || !finite_nonneg(t->inter_bw) ||
      !finite_nonneg(t->nvls_bw) || !finite_nonneg(t->nvls_lat) ||
      !finite_nonneg(t->launch_us) || !finite_nonneg(t->block_us))
    return "a negative or non-finite bandwidth or latency";
  if (t->inter_nics < 0) return "a negative NIC count";
  if (t->local_nranks > 1 && !(t->intra_bw > 0.0f)) return "no intra-node bandwidth";
  if (t->nnodes > 1 && !(t->inter_bw > 0.0f)) return "no inter-node bandwidth";
  return NULL;
}

static int clog2(int x) {
  int r = 0;
  while ((1LL << r) < x) r++;
  return r;
}

/* Whether the topology can host algorithm a at all. */
static int algo_fits_topo(const brd_tune_topo_t *t, brd_algo_t a) {
  int gpu = !t->host_mode && t->ranks_per_device == 1;
  switch (a) {
    case BRD_ALGO_NVLS:
      /* In host mode nvls means the runtime turned the emulation on. */
      return t->nvls && t->ranks_per_device == 1 && t->local_nranks > 1 &&
             (t->nnodes == 1 || (t->collnet && gpu));
    case BRD_ALGO_NVLS_TREE:
      /* Switch channels per node (in host mode the runtime's emulation),
       * nodes of one size, two ranks or more each (algos/nvls_hier.c). */
      return t->nvls && t->ranks_per_device == 1 && t->local_nranks > 1 && t->nnodes > 1 &&
             (long long)t->nnodes * t->local_nranks == t->nranks;
    case BRD_ALGO_COLLNET_DIRECT:
    case BRD_ALGO_COLLNET_CHAIN:
      return t->collnet && !t->host_mode && t->nnodes > 1;
    case BRD_ALGO_PAT:
      return t->local_nranks == 1 && t->nnodes > 1;
    case BRD_ALGO_HIER:
      /* Nodes of equal size (local_nranks is the largest node's), two
       * ranks or more on each: its generator falls back to the ring's plan
       * otherwise, which Ring already models. */
      return t->nnodes > 1 && t->local_nranks > 1 &&
             (long long)t->nnodes * t->local_nranks == t->nranks;
    default:
      return 1;
  }
}

/* See tune.h. */
int brd_tune_mask_names(const brd_tune_mask_t *m, brd_algo_t a) {
  const char *name = brd_algo_name(a);
  size_t nlen = strlen(name);
  const char *p = m->algo_env;
  while (*p != '\0') {
    const char *end = strchr(p, ';');
    if (end == NULL) end = p + strlen(p);
    const char *list = p;
    for (const char *q = p; q < end; q++)
      if (*q == ':') list = q + 1;
    while (list < end && (*list == ' ' || *list == '\t')) list++;
    if (list < end && *list != '^') {
      const char *t = list;
      while (t < end) {
        const char *comma = t;
        while (comma < end && *comma != ',') comma++;
        const char *s0 = t, *s1 = comma;
        while (s0 < s1 && (*s0 == ' ' || *s0 == '\t')) s0++;
        while (s1 > s0 && (s1[-1] == ' ' || s1[-1] == '\t')) s1--;
        if ((size_t)(s1 - s0) == nlen && strncasecmp(s0, name, nlen) == 0) return 1;
        t = comma < end ? comma + 1 : end;
      }
    }
    p = *end == ';' ? end + 1 : end;
  }
  return 0;
}

/* Fills *out with a's shape for coll over S bytes; returns 0 when a cannot
 * run coll. */
static int algo_shape(const brd_tune_topo_t *t, brd_coll_t coll, brd_algo_t a,
                      double S, shape_t *out) {
  const double n = t->nranks, N = t->nnodes, L = t->local_nranks;
  const int multi = t->nnodes > 1, local = t->local_nranks > 1;
  const double f = (n - 1.0) / n;
  const int ar = coll == BRD_COLL_ALLREDUCE;
  const int agrs = coll == BRD_COLL_ALLGATHER || coll == BRD_COLL_REDUCESCATTER;
  const int rooted = coll == BRD_COLL_BROADCAST || coll == BRD_COLL_REDUCE;
  const int direct = coll == BRD_COLL_ALLTOALL || coll == BRD_COLL_GATHER ||
                     coll == BRD_COLL_SCATTER;
  const int p2p = coll == BRD_COLL_SEND || coll == BRD_COLL_RECV;
  shape_t s = {0, 0, 0, 0};
  double v;

  if (!algo_fits_topo(t, a)) return 0;
  switch (a) {
    case BRD_ALGO_RING:
      if (!(ar || agrs || rooted)) return 0;
      s.hops_inter = ar ? 2.0 * (N - 1.0) : N - 1.0;
      s.hops_intra = (ar ? 2.0 * (n - 1.0) : n - 1.0) - s.hops_inter;
      v = ar ? 2.0 * f * S : agrs ? f * S : S;
      s.vol_intra = local ? v : 0.0;
      s.vol_inter = multi ? v : 0.0;
      break;
    case BRD_ALGO_TREE:
      if (!(ar || rooted)) return 0;
      /* One node: a binary tree over its ranks. Several: a chain inside
       * each node under the binary trees between nodes (NCCL's shape and
       * latency term, nvls-ib.md 4.1). */
      s.hops_intra = (ar ? 2.0 : 1.0) * (multi ? L - 1.0 : clog2(t->local_nranks));
      /* Host mode, one node: the hops of the tree plan as it runs (see
       * the host-mode paragraph at the top). */
      if (t->host_mode && !multi)
        s.hops_intra = (ar ? 1.0 : 0.5) * HW_HOST_TREE_HOPS * clog2(t->local_nranks);
      s.hops_inter = (ar ? 2.0 : 1.0) * clog2(t->nnodes);
      v = ar ? 2.0 * S : S;
      s.vol_intra = local ? v : 0.0;
      s.vol_inter = multi ? v : 0.0;
      break;
    case BRD_ALGO_ONESHOT:
      if (multi) s.hops_inter = 1.0; else s.hops_intra = 1.0;
      if (ar || rooted) {
        s.vol_intra = (L - 1.0) * S;
        s.vol_inter = (n - L) * S;
      } else if (agrs || direct) {
        s.vol_intra = (L - 1.0) * S / n;
        s.vol_inter = (n - L) * S / n;
      } else if (p2p) {
        s.vol_intra = multi ? 0.0 : S;
        s.vol_inter = multi ? S : 0.0;
      } else {
        return 0;
      }
      break;
    case BRD_ALGO_TWOSHOT:
      if (!(ar || rooted)) return 0;
      if (multi) s.hops_inter = 2.0; else s.hops_intra = 2.0;
      s.vol_intra = 2.0 * (L - 1.0) * S / n;
      s.vol_inter = 2.0 * (n - L) * S / n;
      break;
    case BRD_ALGO_NVLS:
      if (ar) {
        s.hops_intra = 2.0;
        s.vol_intra = S;
        s.vol_inter = multi ? S / L : 0.0;
      } else if (agrs) {
        s.hops_intra = 1.0;
        s.vol_intra = (L - 1.0) * S / n;
        s.vol_inter = (n - L) * S / n;
      } else {
        return 0;
      }
      s.hops_inter = multi ? 1.0 : 0.0;
      break;
    case BRD_ALGO_NVLS_TREE:
      /* Braid's plan: NVLS inside the node, a ring per local index across
       * the nodes (algos/nvls_hier.c); on two nodes the same exchange as
       * NCCL's tree. */
      if (!ar) return 0;
      s.hops_intra = 2.0;
      s.hops_inter = 2.0 * (N - 1.0);
      s.vol_intra = S;
      s.vol_inter = 2.0 * (N - 1.0) / N * S / L; /* per rank; a node sends L of these */
      break;
    case BRD_ALGO_COLLNET_DIRECT:
      if (ar) {
        s.hops_intra = 2.0;
        s.vol_intra = 2.0 * (L - 1.0) * S / L;
        s.vol_inter = S / L;
      } else if (agrs) {
        s.hops_intra = 1.0;
        s.vol_intra = (L - 1.0) * S / n;
        s.vol_inter = (n - L) * S / n;
      } else {
        return 0;
      }
      s.hops_inter = 1.0;
      break;
    case BRD_ALGO_COLLNET_CHAIN:
      if (!ar) return 0;
      s.hops_intra = 2.0 * (L - 1.0);
      s.hops_inter = 1.0;
      s.vol_intra = local ? S : 0.0;
      s.vol_inter = S;
      break;
    case BRD_ALGO_PAT:
      if (!agrs) return 0;
      s.hops_inter = clog2(t->nranks);
      s.vol_inter = f * S;
      break;
    case BRD_ALGO_HIER:
      if (!ar) return 0;
      s.hops_intra = 2.0 * (L - 1.0);
      s.hops_inter = 2.0 * (N - 1.0);
      s.vol_intra = 2.0 * (L - 1.0) * S / L;
      s.vol_inter = 2.0 * (N - 1.0) / N * S / L; /* per rank; a node sends L of these */
      break;
    default:
      return 0;
  }
  *out = s;
  return 1;
}

/* The model's time for shape s: vol_inter is one rank's bytes, or with
 * NIC counts node_inter is the node's (see the NIC paragraph at the top);
 * nvls: the intra term runs at nvls_bw when that is set. */
static double shape_time(const brd_tune_topo_t *t, const shape_t *s, double node_inter,
                         int nvls, double fit, brd_proto_t p, double bytes) {
  double rpd = t->ranks_per_device;
  double wire_intra = 0.0, wire_inter = 0.0;
  if (s->vol_intra > 0.0) {
    if (nvls && t->nvls_bw > 0.0f)
      wire_intra = s->vol_intra * fit / (t->nvls_bw / rpd); /* fit is in nvls_bw */
    else
      wire_intra = s->vol_intra / (t->intra_bw / rpd);
  }
  if (s->vol_inter > 0.0) {
    if (t->inter_nics > 0)
      wire_inter = node_inter / (t->inter_nics * (double)t->inter_bw);
    else
      wire_inter = s->vol_inter / (t->inter_bw / rpd);
  }
  double wire = wire_intra > wire_inter ? wire_intra : wire_inter;
  double lat = (s->hops_intra * t->intra_lat + s->hops_inter * t->inter_lat) *
               brd_tune_proto_step(t, p);
  return launch_for(t, bytes) + lat + wire / (1000.0 * brd_tune_proto_eff(t, p) * fit);
}

/* NVLS on one node, as Braid's switch plans run it (algos/nvls.c, two
 * groups of chunks per block and window, pipelined one barrier apart):
 *
 *   time = BASE + barriers x nvls_lat + bytes / rate
 *
 *   AllReduce        3 barriers; S at nvls_bw (each rank's slice reduced
 *                    by the switch and multicast back: a GPU's link
 *                    carries S each way, the published NVLS rate)
 *   AllReduce, low latency
 *                    2 barriers; L x S at intra_bw (every rank loads the
 *                    whole message over the switch, so each GPU's copy is
 *                    read L times)
 *   AllGather / ReduceScatter
 *                    2 barriers; (L-1)S/n at nvls_bw
 *
 * nvls_lat defaults to intra_lat, nvls_bw to intra_bw x NVLS's fit; both
 * divide by ranks_per_device. S here is NCCL's tuning size (AllGather and
 * ReduceScatter: the larger buffer). */
static double nvls_time(const brd_tune_topo_t *t, brd_coll_t coll, double S, int lowlat) {
  double rpd = t->ranks_per_device, L = t->local_nranks, n = t->nranks;
  double bar = t->nvls_lat > 0.0f ? t->nvls_lat : t->intra_lat;
  double rate = (t->nvls_bw > 0.0f ? t->nvls_bw : t->intra_bw * algo_fit[BRD_ALGO_NVLS]) / rpd;
  double nbar, wire;
  if (coll == BRD_COLL_ALLREDUCE && lowlat) {
    nbar = 2.0;
    wire = L * S / (t->intra_bw / rpd);
  } else if (coll == BRD_COLL_ALLREDUCE) {
    nbar = 3.0;
    wire = S / rate;
  } else {
    nbar = 2.0;
    wire = (L - 1.0) * S / n / rate;
  }
  return launch_for(t, coll == BRD_COLL_ALLREDUCE ? S : S / n) + nbar * bar + wire / 1000.0;
}

/* The zero-copy NVLS plans (algos/nvls_zc.c): an opening and a closing
 * barrier around one ld_reduce / st pass over the user's windows, so the
 * staged plan's switch traffic without its local copies and its third
 * barrier. */
static double nvls_zc_time(const brd_tune_topo_t *t, brd_coll_t coll, double S) {
  double rpd = t->ranks_per_device, L = t->local_nranks, n = t->nranks;
  double bar = t->nvls_lat > 0.0f ? t->nvls_lat : t->intra_lat;
  double rate = (t->nvls_bw > 0.0f ? t->nvls_bw : t->intra_bw * algo_fit[BRD_ALGO_NVLS]) / rpd;
  double wire = coll == BRD_COLL_ALLREDUCE ? S / rate : (L - 1.0) * S / n / rate;
  return launch_for(t, coll == BRD_COLL_ALLREDUCE ? S : S / n) + 2.0 * bar + wire / 1000.0;
}

/* Host mode on one host (see the host-mode paragraph at the top): the
 * direct patterns' waits cost more per peer they wait on (fan), a Tree LL
 * call whose bytes fill fewer than the plan's chunks skips the empty
 * chunks' hops (LL waits on data, and an empty chunk has none), and each
 * pattern's copy rate is its own. Adjusts s; returns the pattern's fit. */
#define HOST_TREE_CHUNKS 4      /* algos/allreduce_tree.c's TREE_CHUNKS, per block */
#define HOST_TREE_CHUNK_GRAIN 16 /* bytes: the layout's chunk alignment */
static double host_shape(const brd_tune_topo_t *t, brd_algo_t a, brd_proto_t p, double bytes,
                         shape_t *s) {
  /* A plain hop is hop x L (brd_hw_host_topo's intra_lat); the fan adds
   * its share of that in hops. */
  double L = t->local_nranks, hop = brd_hw_consts[BRD_HW_HOST_HOP_US].value * L;
  switch (a) {
    case BRD_ALGO_ONESHOT:
    case BRD_ALGO_TWOSHOT:
      if (hop > 0.0) s->hops_intra *= 1.0 + brd_tune_host_fan_us(t->local_nranks) / hop;
      break;
    case BRD_ALGO_TREE:
      if (p == BRD_PROTO_LL) {
        double k = ceil(bytes / HOST_TREE_CHUNK_GRAIN);
        if (k < HOST_TREE_CHUNKS) s->hops_intra *= (k + 1.0) / (HOST_TREE_CHUNKS + 1.0);
      }
      break;
    default:
      break;
  }
  return brd_tune_host_fit(a);
}

/* See tune.h. */
double brd_tune_host_fit(int algo) {
  switch (algo) {
    case BRD_ALGO_RING: return brd_hw_consts[BRD_HW_HOST_FIT_RING].value;
    case BRD_ALGO_TREE: return brd_hw_consts[BRD_HW_HOST_FIT_TREE].value;
    case BRD_ALGO_TWOSHOT: return brd_hw_consts[BRD_HW_HOST_FIT_TWOSHOT].value;
    default: return 1.0;
  }
}

/* See tune.h. */
double brd_tune_host_fan_us(int local_nranks) {
  double L = local_nranks;
  return brd_hw_consts[BRD_HW_HOST_FAN_US].value * (L - 1.0) * L;
}

/* The model's time, or -1 when (a, p) cannot run coll here. topo is valid. */
static double cost(const brd_tune_topo_t *t, brd_coll_t coll, size_t bytes,
                   brd_algo_t a, brd_proto_t p) {
  shape_t s;
  if (t->nranks == 1) return 0.0;
  if ((algo_protos[a] & BRD_PROTO_BIT(p)) == 0) return -1.0;
  if (!algo_shape(t, coll, a, (double)bytes, &s)) return -1.0;
  double node = s.vol_inter;
  if (a == BRD_ALGO_TREE) {
    if (coll == BRD_COLL_ALLREDUCE && t->nnodes == 2) node = (double)bytes;
  } else if (a != BRD_ALGO_RING && a != BRD_ALGO_COLLNET_CHAIN) {
    node *= t->local_nranks;
  }
  if (a == BRD_ALGO_NVLS && t->nnodes == 1) {
    /* The runtime runs whichever NVLS all-reduce plan is cheaper. */
    double pipelined = nvls_time(t, coll, (double)bytes, 0);
    if (coll != BRD_COLL_ALLREDUCE) return pipelined;
    double lowlat = nvls_time(t, coll, (double)bytes, 1);
    return lowlat < pipelined ? lowlat : pipelined;
  }
  /* The tuning size of AllGather, ReduceScatter and the direct patterns
   * is nranks times a rank's count. */
  double call = (double)bytes;
  if (coll != BRD_COLL_ALLREDUCE && coll != BRD_COLL_BROADCAST && coll != BRD_COLL_REDUCE &&
      coll != BRD_COLL_SEND && coll != BRD_COLL_RECV)
    call /= t->nranks;
  double fit = algo_fit[a];
  if (t->host_mode && t->nnodes == 1) fit = host_shape(t, a, p, (double)bytes, &s);
  return shape_time(t, &s, node, a == BRD_ALGO_NVLS || a == BRD_ALGO_NVLS_TREE, fit, p, call);
}

/* See tune.h. */
int brd_tune_nvls_lowlat(const brd_tune_topo_t *topo, size_t bytes) {
  if (topo == NULL || topo_problem(topo) != NULL || !algo_fits_topo(topo, BRD_ALGO_NVLS) ||
      topo->nnodes != 1 || topo->nranks < 2)
    return 0;
  return nvls_time(topo, BRD_COLL_ALLREDUCE, (double)bytes, 1) <
         nvls_time(topo, BRD_COLL_ALLREDUCE, (double)bytes, 0);
}

/* See tune.h. */
float brd_tune_estimate_nvls(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                             int lowlat) {
  if (topo == NULL || topo_problem(topo) != NULL || !algo_fits_topo(topo, BRD_ALGO_NVLS) ||
      topo->nnodes != 1)
    return -1.0f;
  if (coll != BRD_COLL_ALLREDUCE && coll != BRD_COLL_ALLGATHER &&
      coll != BRD_COLL_REDUCESCATTER)
    return -1.0f;
  if (topo->nranks == 1) return 0.0f;
  return (float)nvls_time(topo, coll, (double)bytes, lowlat && coll == BRD_COLL_ALLREDUCE);
}

/* See tune.h. */
float brd_tune_estimate_hier(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                             brd_proto_t proto) {
  if (topo == NULL || topo_problem(topo) != NULL || coll != BRD_COLL_ALLREDUCE ||
      topo->nnodes < 2 || (unsigned)proto >= BRD_PROTO_COUNT)
    return -1.0f;
  return (float)cost(topo, coll, bytes, BRD_ALGO_HIER, proto);
}

/* Whether mask lets (a, p) run coll on this topology. */
static int pair_allowed(const brd_tune_topo_t *t, const brd_tune_mask_t *m,
                        brd_coll_t coll, brd_algo_t a, brd_proto_t p) {
  uint32_t pb = BRD_PROTO_BIT(p);
  if ((m->algos[coll] & BRD_ALGO_BIT(a)) == 0) return 0;
  if ((m->protos[coll] & pb) == 0) return 0;
  if ((m->protos_auto[coll] & pb) != 0 && !t->ll128_ok) return 0;
  return 1;
}

/* See tune.h. */
float brd_tune_estimate(const brd_tune_topo_t *topo, brd_coll_t coll,
                        size_t bytes, brd_algo_t algo, brd_proto_t proto) {
  if (topo == NULL || topo_problem(topo) != NULL) return -1.0f;
  if ((unsigned)coll >= BRD_COLL_COUNT || coll_names[coll] == NULL ||
      (unsigned)algo >= BRD_ALGO_COUNT || (unsigned)proto >= BRD_PROTO_COUNT)
    return -1.0f;
  return (float)cost(topo, coll, bytes, algo, proto);
}

/* FNV-1a over the fields that shape a table, never 0. */
static uint64_t table_key(const brd_tune_topo_t *t, brd_coll_t coll) {
  const int ints[] = {t->nranks, t->nnodes, t->local_nranks, t->ranks_per_device,
                      t->host_mode, t->nvls, t->collnet, t->ll128_ok, (int)coll,
                      t->inter_nics};
  const float floats[] = {t->intra_bw, t->intra_lat, t->inter_bw, t->inter_lat, t->nvls_bw,
                          t->nvls_lat};
  uint64_t h = 1469598103934665603ull;
  const unsigned char *b = (const unsigned char *)ints;
  for (size_t i = 0; i < sizeof(ints); i++) h = (h ^ b[i]) * 1099511628211ull;
  b = (const unsigned char *)floats;
  for (size_t i = 0; i < sizeof(floats); i++) h = (h ^ b[i]) * 1099511628211ull;
  return h | 1u;
}

/* True the first time this (topology, collective) asks. */
static int table_first_time(uint64_t key) {
  for (int i = 0; i < SEEN_SLOTS; i++) {
    if (atomic_load_explicit(&seen_tables[i], memory_order_relaxed) == key) return 0;
  }
  unsigned slot = atomic_fetch_add_explicit(&seen_next, 1u, memory_order_relaxed);
  atomic_store_explicit(&seen_tables[slot % SEEN_SLOTS], key, memory_order_relaxed);
  return 1;
}

/* Logs the cost of every available algorithm x protocol at a few sizes. */
static void table_log(const brd_tune_topo_t *t, brd_coll_t coll, uint32_t avail,
                      const brd_tune_mask_t *m) {
  char line[TABLE_LINE_MAX];
  int len;

  INFO(BRD_SUBSYS_TUNING, "%s cost model: %d ranks, %d nodes, %d per node, %d per "
       "device%s%s%s%s, intra %.1f GB/s %.2f us, inter %.1f GB/s %.2f us; time in us, "
       "- when not selectable", coll_name(coll), t->nranks, t->nnodes, t->local_nranks,
       t->ranks_per_device, t->host_mode ? ", host mode" : "", t->nvls ? ", NVLS" : "",
       t->collnet ? ", CollNet" : "", t->ll128_ok ? ", LL128 safe" : "",
       (double)t->intra_bw, (double)t->intra_lat, (double)t->inter_bw, (double)t->inter_lat);

  len = snprintf(line, sizeof(line), "%13s |", "Size");
  for (size_t s = 0; s < TABLE_NSIZES; s++)
    len += snprintf(line + len, sizeof(line) - (size_t)len, " %26s |", table_size_names[s]);
  INFO(BRD_SUBSYS_TUNING, "%s", line);

  len = snprintf(line, sizeof(line), "%13s |", "Algorithm");
  for (size_t s = 0; s < TABLE_NSIZES; s++) {
    for (int i = 0; i < BRD_PROTO_COUNT; i++)
      len += snprintf(line + len, sizeof(line) - (size_t)len, " %8s",
                      proto_names[proto_order[i]]);
    len += snprintf(line + len, sizeof(line) - (size_t)len, " |");
  }
  INFO(BRD_SUBSYS_TUNING, "%s", line);

  for (int a = 0; a < BRD_ALGO_COUNT; a++) {
    shape_t unused;
    /* Rows for what could run here; an excluded pair still shows as '-'. */
    if ((avail & BRD_ALGO_BIT(a)) == 0 || !algo_shape(t, coll, (brd_algo_t)a, 1.0, &unused))
      continue;
    len = snprintf(line, sizeof(line), "%13s |", algo_names[a]);
    for (size_t s = 0; s < TABLE_NSIZES; s++) {
      for (int i = 0; i < BRD_PROTO_COUNT; i++) {
        int p = proto_order[i];
        double c = cost(t, coll, table_sizes[s], (brd_algo_t)a, (brd_proto_t)p);
        if (c < 0.0 || !pair_allowed(t, m, coll, (brd_algo_t)a, (brd_proto_t)p))
          len += snprintf(line + len, sizeof(line) - (size_t)len, " %8s", "-");
        else
          len += snprintf(line + len, sizeof(line) - (size_t)len, " %8.1f", c);
      }
      len += snprintf(line + len, sizeof(line) - (size_t)len, " |");
    }
    INFO(BRD_SUBSYS_TUNING, "%s", line);
  }
}

/* WARNs why no candidate is left and returns NCCL's code for it: with an
 * override set the user's setting is to blame (ncclInvalidUsage), without
 * one the caller offered nothing that can run (ncclInternalError). */
static ncclResult_t explain_empty(const brd_tune_topo_t *t, brd_coll_t coll,
                                  size_t bytes, uint32_t avail,
                                  const brd_tune_mask_t *m) {
  const char *cname = coll_name(coll);
  int overridden = m->algo_env[0] != '\0' || m->proto_env[0] != '\0';
  uint32_t runnable = 0;     /* algorithms with some runnable protocol */
  uint32_t protos_runnable = 0;
  uint32_t algo_ok = 0;      /* runnable and allowed by NCCL_ALGO */
  char names[NAMES_MAX], pnames[NAMES_MAX];

  for (int a = 0; a < BRD_ALGO_COUNT; a++) {
    if ((avail & BRD_ALGO_BIT(a)) == 0) continue;
    for (int p = 0; p < BRD_PROTO_COUNT; p++) {
      if (cost(t, coll, bytes, (brd_algo_t)a, (brd_proto_t)p) < 0.0) continue;
      runnable |= BRD_ALGO_BIT(a);
      if (m->algos[coll] & BRD_ALGO_BIT(a)) {
        algo_ok |= BRD_ALGO_BIT(a);
        protos_runnable |= BRD_PROTO_BIT(p);
      }
    }
  }
  if (runnable == 0) {
    names_join(algo_names, algo_order, NALGOS, avail, names, sizeof(names));
    WARN("no algorithm can run %s on this topology (%d ranks, %d nodes, %d per node): "
         "the algorithms offered were {%s}%s%s%s%s%s", cname, t->nranks, t->nnodes,
         t->local_nranks, names, m->algo_env[0] ? "; NCCL_ALGO was set to " : "",
         m->algo_env, m->proto_env[0] ? "; NCCL_PROTO was set to " : "", m->proto_env,
         overridden ? "" : "; this is a bug in Braid, please report it");
    return overridden ? ncclInvalidUsage : ncclInternalError;
  }
  if (algo_ok == 0) {
    names_join(algo_names, algo_order, NALGOS, runnable, names, sizeof(names));
    WARN("no algorithm left for %s: NCCL_ALGO=\"%s\" excludes every algorithm that can "
         "run it here ({%s}); allow one of them for %s or unset NCCL_ALGO", cname,
         m->algo_env, names, cname);
    return ncclInvalidUsage;
  }
  names_join(algo_names, algo_order, NALGOS, algo_ok, names, sizeof(names));
  names_join(proto_names, proto_order, BRD_PROTO_COUNT, protos_runnable, pnames,
             sizeof(pnames));
  WARN("no protocol left for %s: NCCL_PROTO=\"%s\"%s%s%s leaves none of the protocols "
       "{%s} that the allowed algorithms {%s} run here; allow one of them for %s or "
       "unset NCCL_PROTO", cname, m->proto_env, m->algo_env[0] ? " with NCCL_ALGO=\"" : "",
       m->algo_env, m->algo_env[0] ? "\"" : "", pnames, names, cname);
  return ncclInvalidUsage;
}

/* See tune.h. */
ncclResult_t brd_tune_select(const brd_tune_topo_t *topo, brd_coll_t coll,
                             size_t bytes, uint32_t available_algos,
                             const brd_tune_mask_t *mask,
                             brd_tune_choice_t *choice_out) {
  brd_tune_choice_t best = {BRD_ALGO_COUNT, BRD_PROTO_SIMPLE, 0.0f};
  double best_time = -1.0;
  const char *problem;

  if (topo == NULL || mask == NULL || choice_out == NULL) {
    WARN("brd_tune_select: NULL %s", topo == NULL ? "topo" : mask == NULL ? "mask" : "choice_out");
    return ncclInternalError;
  }
  if ((unsigned)coll >= BRD_COLL_COUNT || coll_names[coll] == NULL) {
    WARN("brd_tune_select: collective %d out of range", (int)coll);
    return ncclInternalError;
  }
  problem = topo_problem(topo);
  if (problem != NULL) {
    WARN("brd_tune_select: topology for %s has %s (%d ranks, %d nodes, %d per node, "
         "%d per device)", coll_name(coll), problem, topo->nranks, topo->nnodes,
         topo->local_nranks, topo->ranks_per_device);
    return ncclInternalError;
  }
  available_algos &= BRD_ALGO_ALL;

  if (topo->nranks == 1) {
    /* A local copy: every algorithm degenerates to it, so NCCL ignores the
     * overrides; prefer Ring as NCCL does. */
    if (available_algos == 0) {
      WARN("brd_tune_select: no generator offered for %s", coll_name(coll));
      return ncclInternalError;
    }
    best.algo = (available_algos & BRD_ALGO_BIT(BRD_ALGO_RING))
                    ? BRD_ALGO_RING
                    : (brd_algo_t)__builtin_ctz(available_algos);
    best_time = 0.0;
  } else {
    if (brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_TUNING) && table_first_time(table_key(topo, coll)))
      table_log(topo, coll, available_algos, mask);
    for (int a = 0; a < BRD_ALGO_COUNT; a++) {
      if ((available_algos & BRD_ALGO_BIT(a)) == 0) continue;
      for (int i = 0; i < BRD_PROTO_COUNT; i++) {
        int p = proto_order[i];
        if (!pair_allowed(topo, mask, coll, (brd_algo_t)a, (brd_proto_t)p)) continue;
        double c = cost(topo, coll, bytes, (brd_algo_t)a, (brd_proto_t)p);
        if (c < 0.0 || (best_time >= 0.0 && c >= best_time)) continue;
        best.algo = (brd_algo_t)a;
        best.proto = (brd_proto_t)p;
        best_time = c;
      }
    }
    if (best_time < 0.0) return explain_empty(topo, coll, bytes, available_algos, mask);
  }
  best.time_us = (float)best_time;
  INFO(BRD_SUBSYS_TUNING, "%s: %zu Bytes -> Algo %s proto %s time %.2f us", coll_name(coll),
       bytes, algo_names[best.algo], proto_names[best.proto], (double)best.time_us);
  *choice_out = best;
  return ncclSuccess;
}

/* See tune.h. */
const char *brd_coll_name(brd_coll_t coll) { return coll_name(coll); }

/* See tune.h. */
int brd_coll_nccl_func(brd_coll_t coll) {
  switch (coll) {
  case BRD_COLL_BROADCAST: return ncclFuncBroadcast;
  case BRD_COLL_REDUCE: return ncclFuncReduce;
  case BRD_COLL_ALLGATHER: return ncclFuncAllGather;
  case BRD_COLL_REDUCESCATTER: return ncclFuncReduceScatter;
  case BRD_COLL_ALLREDUCE: return ncclFuncAllReduce;
  case BRD_COLL_SEND: return ncclFuncSend;
  case BRD_COLL_RECV: return ncclFuncRecv;
  case BRD_COLL_ALLTOALL: return ncclFuncAlltoAll;
  case BRD_COLL_SCATTER: return ncclFuncScatter;
  case BRD_COLL_GATHER: return ncclFuncGather;
  default: return ncclNumFuncs;
  }
}

/* See tune.h. */
ncclResult_t brd_tune_costs(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                            uint32_t available_algos, const brd_tune_mask_t *mask,
                            float costs_out[BRD_ALGO_COUNT][BRD_PROTO_COUNT]) {
  if (topo == NULL || mask == NULL || costs_out == NULL || topo_problem(topo) != NULL ||
      (unsigned)coll >= BRD_COLL_COUNT || coll_names[coll] == NULL) {
    WARN("brd_tune_costs: malformed arguments (collective %d)", (int)coll);
    return ncclInternalError;
  }
  available_algos &= BRD_ALGO_ALL;
  for (int a = 0; a < BRD_ALGO_COUNT; a++)
    for (int p = 0; p < BRD_PROTO_COUNT; p++) costs_out[a][p] = -1.0f;
  if (topo->nranks == 1) {
    /* A local copy, as brd_tune_select runs it. */
    if (available_algos != 0) {
      int a = (available_algos & BRD_ALGO_BIT(BRD_ALGO_RING)) ? BRD_ALGO_RING
                                                              : __builtin_ctz(available_algos);
      costs_out[a][BRD_PROTO_SIMPLE] = 0.0f;
    }
    return ncclSuccess;
  }
  for (int a = 0; a < BRD_ALGO_COUNT; a++) {
    if ((available_algos & BRD_ALGO_BIT(a)) == 0) continue;
    for (int p = 0; p < BRD_PROTO_COUNT; p++) {
      if (!pair_allowed(topo, mask, coll, (brd_algo_t)a, (brd_proto_t)p)) continue;
      double c = cost(topo, coll, bytes, (brd_algo_t)a, (brd_proto_t)p);
      if (c >= 0.0) costs_out[a][p] = (float)c;
    }
  }
  return ncclSuccess;
}

/* See tune.h. */
float brd_tune_estimate_nvls_zc(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes) {
  if (brd_tune_estimate_nvls(topo, coll, bytes, 0) < 0.0f) return -1.0f;
  if (topo->nranks == 1) return 0.0f;
  return (float)nvls_zc_time(topo, coll, (double)bytes);
}
