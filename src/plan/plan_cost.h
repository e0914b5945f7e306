/*
 * Braid: a cost estimate computed from a plan itself.
 *
 * The tuner (plan/tune.h) prices an algorithm by formula; this prices any
 * plan (built-in or from the plan library) by walking its ops for one
 * message size and timing them on the tuner's hardware terms
 * (brd_tune_topo_t): each (rank, block) runs its ops in order, a data op
 * takes its bytes over the link its channel crosses, a WAIT (or an LL read,
 * or a barrier) starts only when what it waits for has arrived, one hop's
 * latency after it was sent. The estimate is the time the last op ends,
 * plus the tuner's launch cost. docs/perf/cost-model.md ("Costs from a
 * plan") gives the rules and how they compare with the formulas.
 */
#ifndef BRD_PLAN_PLAN_COST_H
#define BRD_PLAN_PLAN_COST_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"
#include "plan/tune.h"

/* Iterations simulated one by one; a launch of more is extrapolated from
 * the last simulated iteration's increment (the pipeline's steady state). */
#define BRD_PLAN_COST_ITERS 8

typedef struct {
  double time_us;             /* the estimate: launch cost + critical path */
  double link_us;             /* busiest rank link's bytes / its bandwidth
                               * (a lower bound for the data alone) */
  uint64_t sync_hops;         /* the longest chain of sync hops (SIGNAL to
                               * WAIT, LL flag, switch barrier) in the launch */
  uint64_t busiest_chan_bytes; /* bytes through the busiest channel, both
                                * directions, over the whole launch */
  uint64_t niter;             /* iterations of the launch */
} brd_plan_cost_t;

/* Estimates one launch of plan for count elements of dtype (per segment,
 * as brd_plan_layout_init takes it) with scratch_bytes of scratch per rank
 * (brd_plan_scratch_bytes(plan) is what a plan needs), on topo. Ranks are
 * placed node by node: rank r is on node r / topo->local_nranks. A
 * channel to a rank of the same node is priced at intra_bw / intra_lat,
 * one to another node at inter_bw / inter_lat (NIC counts: the node's
 * NICs shared by its ranks that reach another node in the plan), a switch
 * channel at nvls_bw / nvls_lat; each
 * block of a rank gets an equal share of the rank's links. Per hop the
 * latency is multiplied, and the payload rate divided, by the tuner's
 * protocol factors. In host mode on one host (topo->host_mode, ranks
 * sharing the host's cores) the estimate is instead the plan's sync chain
 * plus its busiest rank's bytes at the pattern's copy rate, with the fan
 * of waits on every other rank and no waits on empty LL chunks (the
 * "Host mode" paragraph of plan_cost.c). count 0 costs 0.
 * ncclInvalidArgument for a NULL argument, a bad dtype, a topology the
 * tuner would refuse, or a plan whose ops do not complete (a WAIT no
 * SIGNAL satisfies: the verifier refuses such plans); ncclSystemError when
 * out of memory. Writes *cost_out only on success. Allocates and frees
 * its own working memory; pure otherwise; any thread. */
ncclResult_t brd_plan_cost_estimate(const brd_ir_plan_t *plan, const brd_tune_topo_t *topo,
                                    size_t count, int dtype, size_t scratch_bytes,
                                    brd_plan_cost_t *cost_out);

#endif /* BRD_PLAN_PLAN_COST_H */
