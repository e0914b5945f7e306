/*
 * Braid: the plan cache of a runtime. A plan is generated (src/algos) on
 * its first use for a (collective, algorithm, protocol, blocks, root,
 * deterministic) key, verified when BRAID_VERIFY_PLANS asks, and kept
 * until the communicator goes. Every rank generates the same plans in the
 * same order. It lives in core, above the generators it calls.
 *
 * The cache also holds the plan library: the JSON plans (docs/plans.md)
 * of BRAID_PLAN_DIR, read and verified once when the runtime connects
 * (window.c), and preferred to the generated plans for the calls they
 * declare themselves for (works.c).
 */
#ifndef BRD_CORE_PLANS_H
#define BRD_CORE_PLANS_H

#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"
#include "algos/algos.h"
#include "plan/plan_json.h"

/* Plan-cache algorithm code of the zero-copy variant of an algorithm (the
 * plans that read peers' registered inputs). */
#define BRD_PLANS_ALGO_PEER BRD_ALGOS_ZEROCOPY

typedef struct brd_plan_entry {
  uint8_t coll, algo, proto, det; /* BRD_IR_COLL_*, BRD_IR_ALGO_* (| PEER), BRD_IR_PROTO_* */
  uint16_t nblocks, root;
  brd_ir_plan_t *plan;            /* owned */
  uint64_t runs;                  /* works built from it (brd_plans_ran): what
                                   * actually ran, for tests and statistics */
} brd_plan_entry_t;

/* A plan of the library. */
typedef struct brd_plan_user {
  char *path;                     /* owned: the file it came from */
  brd_ir_plan_t *plan;            /* owned */
  brd_plan_json_meta_t meta;      /* when it may run */
  uint64_t runs;                  /* works built from it */
} brd_plan_user_t;

typedef struct brd_plan_cache {
  int nranks;
  int *host;                      /* owned: [nranks] node label of each rank
                                   * (brd_plans_hosts_set); NULL: one node */
  const uint8_t *port;            /* borrowed: [nranks * nranks] pairs whose
                                   * channels are ports (brd_plan_chans_mark);
                                   * NULL: every channel is memory */
  brd_plan_entry_t *e;            /* owned: [n] */
  int n, cap;
  int last;                       /* entry brd_plans_get returned last */
  brd_plan_user_t *lib;           /* owned: [nlib] the plan library, in
                                   * load order (the order of a match) */
  int nlib;
  uint64_t lib_hash;              /* of the files loaded: names, fields and
                                   * plans (brd_plans_library_load) */
} brd_plan_cache_t;

/* The algorithms and protocols the runtime generates plans for. */
#define BRD_PLANS_NALGOS 7
#define BRD_PLANS_NPROTOS 2
/* ring, tree, one-shot, two-shot, NVLS (switch channels: only where the
 * runtime turned NVLS on, rt->nvls, on one node, and the call is eligible,
 * brd_algos_nvls_supported), hierarchical, NVLSTree (NVLS inside each
 * node, a ring across: the same rules, across nodes) */
extern const uint8_t brd_plans_algos[BRD_PLANS_NALGOS];
extern const uint8_t brd_plans_protos[BRD_PLANS_NPROTOS]; /* LL, Simple */

/* BRD_ALGO_BIT()s of the algorithms with a generator for coll (det: a
 * deterministic reduction), as brd_tune_select takes them. */
uint32_t brd_plans_available(uint8_t coll, int det);

/* An empty cache for plans of nranks ranks (nothing allocated). */
void brd_plans_init(brd_plan_cache_t *c, int nranks);

/* Frees every plan. The cache may be used again after brd_plans_init. */
void brd_plans_fini(brd_plan_cache_t *c);

/* The node layout the generators place traffic by (the tree and the
 * hierarchical all-reduce across nodes): host[r] labels rank r's node,
 * equal labels sharing one; it must be the same on every rank. Copied;
 * NULL means one node. Plans generated under another layout are dropped
 * (they are part of the key). ncclSystemError with a WARN when out of
 * memory (the cache keeps its old layout). Not thread-safe: the
 * runtime's launching thread, before any plan of the cache is in use. */
ncclResult_t brd_plans_hosts_set(brd_plan_cache_t *c, const int *host);

/* The cached plan for these parameters, generated (and verified when
 * BRAID_VERIFY_PLANS asks, always in debug builds) on first use. root is
 * ignored for collectives without one, det for those without a reduction.
 * algo | BRD_PLANS_ALGO_PEER picks the zero-copy plan (all-reduce,
 * reduce-scatter, all-gather); BRD_IR_ALGO_NVLS | BRD_ALGOS_LOWLAT the
 * low-latency NVLS all-reduce. NVLS plans are Simple whatever proto says. The plan stays owned by the cache.
 * Generator and verifier errors pass through; ncclSystemError when out of
 * memory. Plans get port channels where c->port says. Not thread-safe:
 * the runtime's launching thread. */
ncclResult_t brd_plans_get(brd_plan_cache_t *c, uint8_t coll, uint8_t algo, uint8_t proto,
                           int nblocks, int root, int det, const brd_ir_plan_t **plan_out);

/* Counts one collective work built from plan (a plan of c, generated or
 * of the library) in its entry's runs. Not thread-safe: the runtime's launching thread. */
void brd_plans_ran(brd_plan_cache_t *c, const brd_ir_plan_t *plan);

/* Loads the plan library: every *.json file of the colon-separated
 * directories dirs (in that order, the files of each by name), through
 * brd_plan_json_read. A file that does not parse, a point-to-point plan, a
 * plan the library cannot run (LL128, plans reading peers' inputs,
 * one-sided plans) and a plan the verifier refuses (in place and out of
 * place, or only the way its "inplace" field says) are refused with a
 * WARN naming the file and the reason (the verifier's rank, block and op);
 * a plan for another rank count than the cache's, or another
 * ranks_per_node than rpn (the communicator's ranks per node, 0 when nodes
 * hold different numbers), is skipped with an INFO. rank only labels the
 * messages. Replaces what was loaded before and sets c->lib_hash (0 when
 * nothing loaded). Returns ncclSystemError (WARN) only when out of memory;
 * a refused file is not an error. Not thread-safe: the runtime's
 * launching thread; blocks reading the files and verifying. */
ncclResult_t brd_plans_library_load(brd_plan_cache_t *c, const char *dirs, int rank, int rpn);

/* Drops plan i of the library (i < 0: every plan). */
void brd_plans_library_drop(brd_plan_cache_t *c, int i);

/* What a collective call is, for brd_plans_library_match. */
typedef struct brd_plans_call {
  uint8_t coll;                   /* BRD_IR_COLL_* */
  int root;                       /* rooted collectives */
  uint64_t bytes;                 /* per-rank input bytes: count x type size,
                                   * x nranks where the input holds one
                                   * segment per rank */
  int in_place;                   /* sendbuff aliases recvbuff as NCCL defines
                                   * in place for coll */
  int dtype;                      /* ncclDataType_t */
  int redop;                      /* ncclRedOp_t, or BRD_PLAN_JSON_REDOP_PREMULSUM */
} brd_plans_call_t;

/* The first plan of the library that declares itself for call k (the
 * collective, root, size range, in place or not, type and reduction;
 * switch-channel plans only for what multimem reduces), or NULL. Pure. */
brd_plan_user_t *brd_plans_library_match(brd_plan_cache_t *c, const brd_plans_call_t *k);

#endif /* BRD_CORE_PLANS_H */
