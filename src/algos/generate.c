/*
 * Plan generation by (collective, algorithm, determinism, zero-copy): one
 * table of every generator, and the two lookups the runtime, the tools
 * and the tests use (brd_algos_available, brd_algos_generate). Adding a
 * generator is adding its row here; nothing else picks one.
 */
#include <stddef.h>

#include "base/check.h"
#include "algos/algos.h"
#include "plan/tune.h"

/* The table's one signature over the generators' own: a generator takes
 * what its collective needs and ignores the rest. GEN(name, arguments)
 * passes brd_algos_<name> those arguments of gen_<name>'s. */
#define GEN(name, ...)                                                                 \
  static ncclResult_t gen_##name(const brd_algos_args_t *a, const int *host, int root, \
                                 int det, brd_ir_plan_t **plan_out) {                  \
    (void)host;                                                                        \
    (void)root;                                                                        \
    (void)det;                                                                         \
    return brd_algos_##name(__VA_ARGS__);                                              \
  }

/* The arguments alone. */
GEN(ring_allreduce, a, plan_out)
GEN(oneshot_allreduce, a, plan_out)
GEN(twoshot_allreduce, a, plan_out)
GEN(ordered_oneshot_allreduce, a, plan_out)
GEN(ordered_twoshot_allreduce, a, plan_out)
GEN(ring_allgather, a, plan_out)
GEN(direct_allgather, a, plan_out)
GEN(ring_reducescatter, a, plan_out)
GEN(pairwise_alltoall, a, plan_out)
GEN(zerocopy_allreduce, a, plan_out)
GEN(zerocopy_reducescatter, a, plan_out)
GEN(zerocopy_allgather, a, plan_out)
GEN(nvls_allreduce, a, plan_out)
GEN(nvls_ll_allreduce, a, plan_out)
GEN(nvls_allgather, a, plan_out)
GEN(nvls_reducescatter, a, plan_out)
GEN(nvls_zc_allreduce, a, plan_out)
GEN(nvls_zc_allgather, a, plan_out)
GEN(nvls_zc_reducescatter, a, plan_out)

/* The root of a rooted collective. */
GEN(chain_broadcast, a, root, plan_out)
GEN(direct_broadcast, a, root, plan_out)
GEN(chain_reduce, a, root, plan_out)
GEN(direct_gather, a, root, plan_out)
GEN(direct_scatter, a, root, plan_out)

/* Determinism, where a rank-ordered variant exists. */
GEN(direct_reducescatter, a, det, plan_out)
GEN(direct_reduce, a, root, det, plan_out)

/* The node layout, for generators that place by node. */
GEN(tree_allreduce_hosts, a, host, plan_out)
GEN(hier_allreduce, a, host, plan_out)
GEN(nvls_hier_allreduce, a, host, plan_out)

#define AR BRD_IR_COLL_ALLREDUCE
#define AG BRD_IR_COLL_ALLGATHER
#define RS BRD_IR_COLL_REDUCESCATTER
#define BC BRD_IR_COLL_BROADCAST
#define RE BRD_IR_COLL_REDUCE
#define A2A BRD_IR_COLL_ALLTOALL
#define GA BRD_IR_COLL_GATHER
#define SC BRD_IR_COLL_SCATTER
#define RING BRD_IR_ALGO_RING
#define TREE BRD_IR_ALGO_TREE
#define ONE BRD_IR_ALGO_ONESHOT
#define TWO BRD_IR_ALGO_TWOSHOT
#define HIER BRD_ALGO_HIER /* the tuner's code: the IR has none (algos.h) */
#define NVLS BRD_IR_ALGO_NVLS
#define NVLS_TREE BRD_ALGO_NVLS_TREE /* the tuner's code, as HIER */

/* Reductions have a row per determinism only where a rank-ordered variant
 * exists (the unordered ring and tree have none); the other collectives
 * move data without combining it, so one generator serves both. The
 * zero-copy plans are asked for without determinism (the runtime does not
 * use them for reductions in deterministic mode; all-gather's plan is the
 * same either way). */
static const brd_algos_gen_t gens[] = {
    /* coll, algo, deterministic, zero-copy, low-latency, name, generator */
    {AR, RING, 0, 0, 0, "ring all-reduce", gen_ring_allreduce},
    {AR, TREE, 0, 0, 0, "tree all-reduce", gen_tree_allreduce_hosts},
    {AR, ONE, 0, 0, 0, "one-shot all-reduce", gen_oneshot_allreduce},
    {AR, ONE, 1, 0, 0, "ordered one-shot all-reduce", gen_ordered_oneshot_allreduce},
    {AR, TWO, 0, 0, 0, "two-shot all-reduce", gen_twoshot_allreduce},
    {AR, TWO, 1, 0, 0, "ordered two-shot all-reduce", gen_ordered_twoshot_allreduce},
    {AR, TWO, 0, 1, 0, "zero-copy two-shot all-reduce", gen_zerocopy_allreduce},
    {AR, HIER, 0, 0, 0, "hierarchical all-reduce", gen_hier_allreduce},
    {RS, RING, 0, 0, 0, "ring reduce-scatter", gen_ring_reducescatter},
    {RS, ONE, 0, 0, 0, "direct reduce-scatter", gen_direct_reducescatter},
    {RS, ONE, 1, 0, 0, "ordered reduce-scatter", gen_direct_reducescatter},
    {RS, ONE, 0, 1, 0, "zero-copy reduce-scatter", gen_zerocopy_reducescatter},
    {RE, RING, 0, 0, 0, "chain reduce", gen_chain_reduce},
    {RE, ONE, 0, 0, 0, "direct reduce", gen_direct_reduce},
    {RE, ONE, 1, 0, 0, "ordered reduce", gen_direct_reduce},
    {AG, RING, 0, 0, 0, "ring all-gather", gen_ring_allgather},
    {AG, RING, 1, 0, 0, "ring all-gather", gen_ring_allgather},
    {AG, ONE, 0, 0, 0, "direct all-gather", gen_direct_allgather},
    {AG, ONE, 1, 0, 0, "direct all-gather", gen_direct_allgather},
    {AG, ONE, 0, 1, 0, "zero-copy all-gather", gen_zerocopy_allgather},
    {BC, RING, 0, 0, 0, "chain broadcast", gen_chain_broadcast},
    {BC, RING, 1, 0, 0, "chain broadcast", gen_chain_broadcast},
    {BC, ONE, 0, 0, 0, "direct broadcast", gen_direct_broadcast},
    {BC, ONE, 1, 0, 0, "direct broadcast", gen_direct_broadcast},
    {A2A, ONE, 0, 0, 0, "pairwise all-to-all", gen_pairwise_alltoall},
    {A2A, ONE, 1, 0, 0, "pairwise all-to-all", gen_pairwise_alltoall},
    {GA, ONE, 0, 0, 0, "direct gather", gen_direct_gather},
    {GA, ONE, 1, 0, 0, "direct gather", gen_direct_gather},
    {SC, ONE, 0, 0, 0, "direct scatter", gen_direct_scatter},
    {SC, ONE, 1, 0, 0, "direct scatter", gen_direct_scatter},
    /* Switch plans (NVLS): not rank-ordered on hardware (the switch sums
     * in its own order), so no deterministic rows. */
    {AR, NVLS, 0, 0, 0, "NVLS all-reduce", gen_nvls_allreduce},
    {AR, NVLS, 0, 0, 1, "low-latency NVLS all-reduce", gen_nvls_ll_allreduce},
    {AG, NVLS, 0, 0, 0, "NVLS all-gather", gen_nvls_allgather},
    {AG, NVLS, 1, 0, 0, "NVLS all-gather", gen_nvls_allgather},
    {RS, NVLS, 0, 0, 0, "NVLS reduce-scatter", gen_nvls_reducescatter},
    /* NVLS inside each node, a ring across the nodes (nvls_hier.c). */
    {AR, NVLS_TREE, 0, 0, 0, "NVLS all-reduce across nodes", gen_nvls_hier_allreduce},
    /* Zero-copy NVLS: the switch reaches the user's windows. */
    {AR, NVLS, 0, 1, 0, "zero-copy NVLS all-reduce", gen_nvls_zc_allreduce},
    {AG, NVLS, 0, 1, 0, "zero-copy NVLS all-gather", gen_nvls_zc_allgather},
    {RS, NVLS, 0, 1, 0, "zero-copy NVLS reduce-scatter", gen_nvls_zc_reducescatter},
};

/* See algos.h. */
const brd_algos_gen_t *brd_algos_gens(int *count_out) {
  *count_out = (int)(sizeof(gens) / sizeof(gens[0]));
  return gens;
}

/* See algos.h. */
const brd_algos_gen_t *brd_algos_find(int coll, int algo, int deterministic) {
  int zerocopy = (algo & BRD_ALGOS_ZEROCOPY) != 0;
  int lowlat = (algo & BRD_ALGOS_LOWLAT) != 0;
  algo &= ~(BRD_ALGOS_ZEROCOPY | BRD_ALGOS_LOWLAT);
  deterministic = deterministic != 0;
  for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]); i++) {
    const brd_algos_gen_t *g = &gens[i];
    if (g->coll == coll && g->algo == algo && g->deterministic == deterministic &&
        g->zerocopy == zerocopy && g->lowlat == lowlat)
      return g;
  }
  return NULL;
}

/* See algos.h. */
int brd_algos_available(int coll, int algo, int deterministic) {
  return brd_algos_find(coll, algo, deterministic) != NULL;
}

/* See algos.h. */
ncclResult_t brd_algos_generate_hosts(int coll, int algo, const brd_algos_args_t *args,
                                      const int *host, int root, int deterministic,
                                      brd_ir_plan_t **plan_out) {
  const brd_algos_gen_t *g = brd_algos_find(coll, algo, deterministic);
  if (g == NULL) {
    WARN("no %s%s%splan generator for collective %d with algorithm %d",
         deterministic ? "rank-ordered " : "",
         (algo & BRD_ALGOS_ZEROCOPY) ? "zero-copy " : "",
         (algo & BRD_ALGOS_LOWLAT) ? "low-latency " : "", coll,
         algo & ~(BRD_ALGOS_ZEROCOPY | BRD_ALGOS_LOWLAT));
    return ncclInvalidArgument;
  }
  return g->fn(args, host, root, deterministic != 0, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_generate(int coll, int algo, const brd_algos_args_t *args,
                                int root, int deterministic,
                                brd_ir_plan_t **plan_out) {
  return brd_algos_generate_hosts(coll, algo, args, NULL, root, deterministic, plan_out);
}
