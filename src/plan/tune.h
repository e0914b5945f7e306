/*
 * Braid: algorithm and protocol choice.
 *
 * A cost model estimates, for one collective of a given size on a given
 * topology, the time of every (algorithm, protocol) pair; the cheapest pair
 * that has a generator, suits the topology and survives the user's
 * NCCL_ALGO / NCCL_PROTO overrides wins. Everything here is pure C over
 * caller-owned memory: no allocation, no communicator, no GPU.
 */
#ifndef BRD_PLAN_TUNE_H
#define BRD_PLAN_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"

/* One numbering per concept: a collective, an algorithm and a protocol
 * here have the IR's values (device/ir.h), so a choice goes into a plan
 * with no translation. The tuner adds what the IR has no code for: SEND
 * and RECV after the IR's collectives (the IR runs both as one SENDRECV
 * plan, whose code 8 no call carries), and NCCL's algorithms without an
 * IR code after the IR's (NVLS_TREE..PAT). NCCL's own numbering
 * (NCCL_ALGO_*, NCCL_PROTO_*) appears nowhere: its names are only parsed
 * from NCCL_ALGO / NCCL_PROTO (tune.c). */
typedef enum {
  BRD_COLL_ALLREDUCE = BRD_IR_COLL_ALLREDUCE,
  BRD_COLL_ALLGATHER = BRD_IR_COLL_ALLGATHER,
  BRD_COLL_REDUCESCATTER = BRD_IR_COLL_REDUCESCATTER,
  BRD_COLL_BROADCAST = BRD_IR_COLL_BROADCAST,
  BRD_COLL_REDUCE = BRD_IR_COLL_REDUCE,
  BRD_COLL_ALLTOALL = BRD_IR_COLL_ALLTOALL,
  BRD_COLL_GATHER = BRD_IR_COLL_GATHER,
  BRD_COLL_SCATTER = BRD_IR_COLL_SCATTER,
  BRD_COLL_SEND = BRD_IR_COLL_COUNT,
  BRD_COLL_RECV,
  BRD_COLL_COUNT
} brd_coll_t;

/* 1 for the collectives of the IR (every code below BRD_COLL_SEND but
 * SENDRECV), 0 for SEND, RECV and out-of-range codes. */
static inline int brd_coll_is_ir(brd_coll_t c) {
  return (unsigned)c < BRD_IR_COLL_COUNT && (unsigned)c != BRD_IR_COLL_SENDRECV;
}

/* Algorithms: the IR's four families plus NCCL 2.28's others. Ties in
 * cost go to the lower value. 0 is the IR's COPY (a one-rank plan), which
 * the tuner never offers. */
typedef enum {
  BRD_ALGO_RING = BRD_IR_ALGO_RING,
  BRD_ALGO_TREE = BRD_IR_ALGO_TREE,
  BRD_ALGO_ONESHOT = BRD_IR_ALGO_ONESHOT, /* every rank reads/writes every peer directly */
  BRD_ALGO_TWOSHOT = BRD_IR_ALGO_TWOSHOT, /* direct reduce-scatter, then direct all-gather */
  BRD_ALGO_NVLS = BRD_IR_ALGO_NVLS,
  /* NCCL's NVLSTree (NCCL_ALGO_NVLS_TREE): Braid's generator runs NVLS
   * inside each node and a ring per local index across the nodes
   * (algos/nvls_hier.c); its plans say BRD_IR_ALGO_NVLS. */
  BRD_ALGO_NVLS_TREE,
  BRD_ALGO_COLLNET_DIRECT,
  BRD_ALGO_COLLNET_CHAIN,
  BRD_ALGO_PAT,
  /* Braid's hierarchical all-reduce (algos/hier.c): reduce-scatter inside
   * each node, all-reduce across nodes per local index, all-gather inside.
   * NCCL has no such algorithm; NCCL_ALGO names it "Hier". Its plans say
   * BRD_IR_ALGO_RING (they are rings), so this code is the tuner's and the
   * generator table's only. */
  BRD_ALGO_HIER,
  BRD_ALGO_COUNT
} brd_algo_t;

/* Protocols: the IR's. Ties in cost go to LL, then LL128, then Simple
 * (tune.c), whatever the values. */
typedef enum {
  BRD_PROTO_SIMPLE = BRD_IR_PROTO_SIMPLE,
  BRD_PROTO_LL = BRD_IR_PROTO_LL,
  BRD_PROTO_LL128 = BRD_IR_PROTO_LL128,
  BRD_PROTO_COUNT
} brd_proto_t;

#define BRD_ALGO_BIT(a) (1u << (unsigned)(a))
#define BRD_PROTO_BIT(p) (1u << (unsigned)(p))
/* Every algorithm the tuner knows (not the IR's COPY). */
#define BRD_ALGO_ALL ((BRD_ALGO_BIT(BRD_ALGO_COUNT) - 1u) & ~BRD_ALGO_BIT(BRD_IR_ALGO_COPY))
#define BRD_PROTO_ALL (BRD_PROTO_BIT(BRD_PROTO_COUNT) - 1u)

/* Longest override text kept in a mask for messages (longer is cut). */
#define BRD_TUNE_ENV_MAX 128

/* What NCCL_ALGO and NCCL_PROTO allow, per collective. Filled by
 * brd_tune_parse; plain data, copyable, lives in the caller's memory. */
typedef struct {
  uint32_t algos[BRD_COLL_COUNT];   /* BRD_ALGO_BIT()s allowed */
  uint32_t protos[BRD_COLL_COUNT];  /* BRD_PROTO_BIT()s allowed */
  /* Allowed protocols still on their hardware default: LL128 until an
   * NCCL_PROTO entry covers the collective (then it is on or off for good,
   * as in NCCL). brd_tune_select drops these unless topo->ll128_ok. */
  uint32_t protos_auto[BRD_COLL_COUNT];
  char algo_env[BRD_TUNE_ENV_MAX];  /* NCCL_ALGO as parsed; "" when unset */
  char proto_env[BRD_TUNE_ENV_MAX]; /* NCCL_PROTO as parsed; "" when unset */
} brd_tune_mask_t;

/* What the cost model needs to know about a communicator. Bandwidths are a
 * rank's own link bandwidth in GB/s (1 GB/s = 1000 bytes/us), latencies the
 * cost of one hop in microseconds. */
typedef struct {
  int nranks;
  int nnodes;
  int local_nranks;        /* ranks per node */
  int ranks_per_device;    /* ranks sharing one GPU; they share its links */
  int host_mode;           /* 1: host executor (no NVLS, no CollNet) */
  int nvls;                /* 1: NVLink SHARP multicast is present (host
                              mode: the runtime turned its emulation on) */
  int collnet;             /* 1: an in-network reduction (CollNet) is usable */
  int ll128_ok;            /* 1: LL128 is safe here, so it is on by default */
  float intra_bw;          /* GB/s, link inside a node; > 0 when local_nranks > 1 */
  float intra_lat;         /* us per hop inside a node */
  float inter_bw;          /* GB/s, link between nodes; > 0 when nnodes > 1 */
  float inter_lat;         /* us per hop between nodes */
  /* NICs per node. 0: inter_bw is one rank's own link and the inter term
   * counts a rank's bytes (the model before NIC counts). > 0: inter_bw is
   * one NIC's achievable GB/s and the inter term counts the bytes leaving
   * a node over all its NICs (tune.c). */
  int inter_nics;
  float nvls_bw;           /* GB/s NVLS moves S at inside a node (algbw,
                              fit included); 0: intra_bw with NVLS's fit */
  float nvls_lat;          /* us per switch barrier (MC_BARRIER: a
                              multicast release store, then an acquire
                              wait on the local copy); 0: intra_lat */
  /* What a launch costs before its first hop: launch_us with one block,
   * plus block_us for each further block (host mode: a worker thread per
   * block, and a rank runs a second one from block2_bytes, the host
   * backend's rule). 0: the model's default launch (5 us), no block term,
   * one block at every size. brd_hw_host_topo sets them in host mode. */
  float launch_us;
  float block_us;
  size_t block2_bytes;
} brd_tune_topo_t;

typedef struct {
  brd_algo_t algo;
  brd_proto_t proto;
  float time_us;           /* the model's estimate for this call */
} brd_tune_choice_t;

/* NCCL's spelling of an algorithm ("Ring", "NVLSTree", "OneShot") or
 * protocol ("LL", "LL128", "Simple"); "Unknown" when out of range. The
 * strings are static. Any thread. */
const char *brd_algo_name(brd_algo_t algo);
const char *brd_proto_name(brd_proto_t proto);
/* NCCL's spelling of a collective ("AllReduce"); "Unknown" out of range. */
const char *brd_coll_name(brd_coll_t coll);

/* NCCL's ncclFunc_t number for coll (what plugins are told); ncclNumFuncs
 * for a value that is none of Braid's collectives. */
int brd_coll_nccl_func(brd_coll_t coll);

/* Parses NCCL_ALGO and NCCL_PROTO (either may be NULL or "" for unset) with
 * NCCL 2.28's syntax: entries separated by ';', each "[func:]name,name" or
 * "[func:]^name,name" (^ allows all but the names). Only the first entry may
 * omit "func:", and then applies to the five functions NCCL tunes
 * (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce); a later entry
 * replaces its function's list. Names are case-insensitive. AlltoAll,
 * Gather, Scatter, Send and Recv are never restricted, as in NCCL.
 * Returns ncclInvalidUsage (NCCL's code for a bad NCCL_ALGO/NCCL_PROTO) with
 * a WARN naming the variable, the bad token and the valid names for an
 * unknown name or function, an empty list or name, a missing "func:" after
 * the first entry, or a second ':'. Writes *mask_out only on success.
 * Any thread; does not block. */
ncclResult_t brd_tune_parse(const char *algo_env, const char *proto_env,
                            brd_tune_mask_t *mask_out);

/* 1 when NCCL_ALGO, as parsed into m, names algorithm a in a list that
 * allows it (an entry without ^), for any collective; 0 otherwise (unset,
 * or a only allowed by omission, as in "^Ring"). Pure; any thread. */
int brd_tune_mask_names(const brd_tune_mask_t *m, brd_algo_t a);

/* Picks the cheapest (algorithm, protocol) for one call. bytes is NCCL's
 * tuning size: count x element size, times nranks for AllGather and
 * ReduceScatter (the larger buffer). available_algos holds BRD_ALGO_BIT()s
 * of the algorithms that have a generator for coll. A pair is a candidate
 * when its algorithm is available, suits the topology, supports the
 * protocol and is allowed by mask. With one rank the call is a local copy:
 * the mask is ignored (as NCCL does) and the time is 0.
 * Errors: ncclInvalidUsage with a WARN naming NCCL_ALGO/NCCL_PROTO and the
 * collective when the overrides leave no candidate; ncclInternalError when
 * nothing could run even without overrides, or for a malformed topo or
 * coll. Writes *choice_out only on success. Logs the choice at INFO/TUNING,
 * and the cost table the first time a (topology, collective) is seen. Any
 * thread; does not block. */
ncclResult_t brd_tune_select(const brd_tune_topo_t *topo, brd_coll_t coll,
                             size_t bytes, uint32_t available_algos,
                             const brd_tune_mask_t *mask,
                             brd_tune_choice_t *choice_out);

/* The model's time in microseconds for one (algo, proto) pair, ignoring
 * overrides and generators (used by ncclGroupSimulateEnd), or -1.0f when
 * the pair cannot run coll on this topology or an argument is malformed.
 * 0 for a single rank. Any thread. */
float brd_tune_estimate(const brd_tune_topo_t *topo, brd_coll_t coll,
                        size_t bytes, brd_algo_t algo, brd_proto_t proto);

/* The model's time for the hierarchical AllReduce (BRD_ALGO_HIER: a
 * reduce-scatter inside each node, an all-reduce of each rank's 1/L share
 * across the nodes, one ring per local index, an all-gather inside the
 * node), whether or not the layout suits it: brd_tune_estimate's for
 * Hier, which answers -1 where the nodes differ in size. -1.0f for
 * another collective, a malformed topology, one node, or a protocol out
 * of range. Any thread. */
float brd_tune_estimate_hier(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                             brd_proto_t proto);

/* 1 when the low-latency NVLS all-reduce (one barrier per chunk, every
 * rank loading the whole message over the switch) is cheaper than the
 * pipelined one for an all-reduce of `bytes` on topo (NVLS present, one
 * node); 0 otherwise. Pure; any thread. */
int brd_tune_nvls_lowlat(const brd_tune_topo_t *topo, size_t bytes);

/* The cost model's constants on topo, for estimates made elsewhere
 * (plan_cost.c): the launch cost in us of a launch of `blocks` blocks per
 * rank, a protocol's per-step latency factor and bandwidth efficiency
 * (proto: BRD_PROTO_*, which equal BRD_IR_PROTO_*; out of range reads
 * Simple's; host mode has its own, measured: tune.c), and an algorithm's
 * fit (BRD_ALGO_*). Pure; any thread. */
double brd_tune_launch_us(const brd_tune_topo_t *topo, int blocks);
double brd_tune_proto_step(const brd_tune_topo_t *topo, int proto);
double brd_tune_proto_eff(const brd_tune_topo_t *topo, int proto);
double brd_tune_algo_fit(int algo);

/* Host mode on one host (topo->host_mode, one node), for the tuner's
 * host_shape and plan_cost.c's simulation alike, so that both estimates
 * follow one rule. brd_tune_host_fit: a pattern's copy rate against
 * OneShot's (host.fit_ring, host.fit_tree, host.fit_twoshot; 1 for any
 * other algo), by BRD_ALGO_* or the equal BRD_IR_ALGO_* code.
 * brd_tune_host_fan_us: the us a wait on every other rank adds to one
 * Simple hop with local_nranks ranks on the host, host.fan_per_peer x
 * (L - 1) x L (each peer is a thread the host's cores must get to).
 * Pure; any thread. */
double brd_tune_host_fit(int algo);
double brd_tune_host_fan_us(int local_nranks);

/* The model's time for either NVLS all-reduce plan (lowlat 1: the
 * low-latency one) or, for all-gather and reduce-scatter, the NVLS plan;
 * -1.0f where NVLS cannot run coll on topo. Any thread. */
float brd_tune_estimate_nvls(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                             int lowlat);

/* The model's time for the zero-copy NVLS plans (algos/nvls_zc.c: the
 * switch reaches the user's multicast-bound windows): two barriers and
 * the switch traffic of the staged plan, no copies (all-reduce: S at the
 * NVLS rate; all-gather and reduce-scatter: (L-1)S/n). -1.0f where NVLS
 * cannot run coll on topo. Any thread. */
float brd_tune_estimate_nvls_zc(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes);

/* ---- hardware figures (tune_hw.c) ---------------------------------------- */

/* Every constant the cluster model uses, with where it comes from. */
typedef enum {
  BRD_HW_NVLINK4_LINK_BW,    /* GB/s per NVLink 4 link */
  BRD_HW_H100_NVLINKS,       /* links per H100 SXM */
  BRD_HW_H100_RING_BUSBW,    /* GB/s ring busbw over NVLink, 8 x H100 */
  BRD_HW_H100_NVLS_BUSBW,    /* GB/s NVLS busbw, 8 x H100 */
  BRD_HW_H200_NVLS_BUSBW,    /* GB/s NVLS busbw, 8 x H200 */
  BRD_HW_H100_NVLS_BUSBW_2_4, /* GB/s NVLS busbw, 2 to 4 x H100 */
  BRD_HW_H100_NVLS_BUSBW_5,  /* GB/s NVLS busbw, 5 x H100 */
  BRD_HW_H100_NVLS_BUSBW_6,  /* GB/s NVLS busbw, 6 x H100 */
  BRD_HW_H100_NVLS_BUSBW_7,  /* GB/s NVLS busbw, 7 x H100 */
  BRD_HW_LAT_NVLS_BARRIER,   /* us per switch barrier */
  BRD_HW_PCI_BW,             /* GB/s, PCIe Gen3 x16 */
  BRD_HW_NIC_EFF,            /* achievable / line rate of one NIC */
  BRD_HW_LAT_NVLINK,         /* us per hop */
  BRD_HW_LAT_PCI,            /* us per hop */
  BRD_HW_LAT_NET,            /* us per hop */
  BRD_HW_PUB_MULTI_LO,       /* published multi-node busbw range, 8 x H100, 8 x 400G */
  BRD_HW_PUB_MULTI_HI,
  BRD_HW_PUB_2NODE_NVLSTREE, /* published 2-node NVLSTree busbw, same layout */
  /* Host mode (BRAID_DEVICE=host), fitted to measurements on one host
   * (docs/perf/cost-model.md): "per rank" figures are multiplied by the
   * ranks on the host, the copy rate is shared by them. */
  BRD_HW_HOST_LAUNCH_US,     /* us per launch, per rank squared on the host */
  BRD_HW_HOST_BLOCK_US,      /* us a second block adds, per rank on the host */
  BRD_HW_HOST_HOP_US,        /* us per hop, per rank on the host */
  BRD_HW_HOST_COPY_GBPS,     /* GB/s the host's ranks copy at, together */
  BRD_HW_HOST_LL_STEP,       /* LL's hop factor (Simple's is 1) */
  BRD_HW_HOST_LL_EFF,        /* LL's payload rate against Simple's */
  BRD_HW_HOST_TREE_HOPS,     /* Tree AllReduce hops per tree level, one node */
  BRD_HW_HOST_FAN_US,        /* us per hop per peer waited on, per rank: direct patterns */
  BRD_HW_HOST_FIT_RING,      /* Ring's copy rate against OneShot's */
  BRD_HW_HOST_FIT_TREE,      /* Tree's copy rate against OneShot's */
  BRD_HW_HOST_FIT_TWOSHOT,   /* TwoShot's copy rate against OneShot's */
  BRD_HW_COUNT
} brd_hw_id_t;

typedef struct {
  const char *name;          /* "h100.nvlink.ring_busbw" */
  double value;
  const char *unit;
  const char *source;        /* where the figure is published */
} brd_hw_const_t;

/* The table, indexed by brd_hw_id_t. Static. */
extern const brd_hw_const_t brd_hw_consts[BRD_HW_COUNT];

typedef enum { BRD_HW_GPU_H100, BRD_HW_GPU_H200, BRD_HW_GPU_PCIE, BRD_HW_GPU_COUNT } brd_hw_gpu_t;

/* "h100", "h200", "pcie" (case-insensitive) into *out; 0 when unknown. */
int brd_hw_gpu_parse(const char *name, brd_hw_gpu_t *out);

/* A model topology for nodes x gpus_per_node GPUs of one kind (NVLink and
 * NVSwitch for H100/H200, PCIe otherwise) joined by nics NICs of nic_gbps
 * Gbit/s per node: intra link, NVLS rate, per-NIC achievable GB/s and
 * per-hop latencies from brd_hw_consts. Returns ncclInvalidArgument with a
 * WARN for a count below 1 or a speed <= 0 (nics may be 0 on one node).
 * Writes *out only on success. Any thread. */
ncclResult_t brd_hw_topo(brd_hw_gpu_t gpu, int nodes, int gpus_per_node, int nics,
                         double nic_gbps, brd_tune_topo_t *out);

/* Fills the host-mode fields of *t for local_nranks ranks on one host
 * (host_mode, ranks_per_device, intra_bw, intra_lat, launch_us, block_us)
 * from brd_hw_consts' host figures, and block2_bytes, the size from which
 * the host backend runs a second block (0: never). Leaves the rest of *t
 * alone. Any thread. */
void brd_hw_host_topo(int local_nranks, size_t block2_bytes, brd_tune_topo_t *t);

/* The model's time in microseconds for every (algorithm, protocol) pair
 * brd_tune_select would weigh for this call (same arguments), in
 * costs_out[algo][proto]; -1.0f for every other pair. With one rank only
 * the local copy's pair (Ring, or the lowest available algorithm, with
 * Simple) is set, to 0. Used to build a tuner plugin's cost table.
 * ncclInternalError with a WARN for a malformed topo or coll; writes
 * costs_out only on success. Any thread. */
ncclResult_t brd_tune_costs(const brd_tune_topo_t *topo, brd_coll_t coll, size_t bytes,
                            uint32_t available_algos, const brd_tune_mask_t *mask,
                            float costs_out[BRD_ALGO_COUNT][BRD_PROTO_COUNT]);

#endif /* BRD_PLAN_TUNE_H */
