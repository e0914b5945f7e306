/*
 * Braid: the plan cache of a runtime. A plan is generated (src/algos) on
 * its first use for a (collective, algorithm, protocol, blocks, root,
 * deterministic) key, verified when BRAID_VERIFY_PLANS asks, and kept
 * until the communicator goes. Every rank generates the same plans in the
 * same order. It lives in core, above the generators it calls.
 */
#ifndef BRD_CORE_PLANS_H
#define BRD_CORE_PLANS_H

#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"
#include "algos/algos.h"

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
} brd_plan_cache_t;

/* The algorithms and protocols the runtime generates plans for. */
#define BRD_PLANS_NALGOS 6
#define BRD_PLANS_NPROTOS 2
/* ring, tree, one-shot, two-shot, NVLS (switch channels: only where the
 * runtime turned NVLS on, rt->nvls, and the call is eligible,
 * brd_algos_nvls_supported), hierarchical */
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

/* Counts one collective work built from plan (a plan of c) in its
 * entry's runs. Not thread-safe: the runtime's launching thread. */
void brd_plans_ran(brd_plan_cache_t *c, const brd_ir_plan_t *plan);

#endif /* BRD_CORE_PLANS_H */
