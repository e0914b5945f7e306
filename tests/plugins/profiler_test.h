/*
 * The test profiler plugin's record (profiler_test.c), shared with the
 * tests that read it. A library built with -DPROF_VERSION=N exports
 * `ncclProfiler_vN` and `proftest_state_t proftest_state_vN`.
 *
 * The plugin checks the ABI's rules as events arrive and counts each
 * broken one in `violations` (the first is described in `first_violation`):
 *   - every handle stopped or given a state was started and not stopped yet
 *   - a parent (parentObj) is a live event of the same context, started
 *     before its child and not stopped until the child is
 *   - the descriptor's rank is the context's rank (v4+), its type one bit
 *     the plugin asked for
 *   - Coll seqNumber counts 0, 1, 2 .. per context; v5+ parentGroup of a
 *     Coll/P2p is a live Group event; Coll/P2p parents are Group (v1..v4)
 *     or CollApi/P2pApi (v5+); KernelCh and ProxyOp under Coll/P2p
 *     (of the same context: the same rank); ProxyStep under ProxyOp
 *   - a child started with no parent although its parent's type was asked
 *     for is counted in `orphans` (ProxyOp, KernelCh, ProxyStep)
 *   - KernelCh gets ncclProfilerKernelChStop before its stop (v4+)
 *   - finalize finds no event of its context still open
 *
 * Environment, read at init:
 *   PROFTEST_MASK   the mask init writes (number; default 0x7fff);
 *                   "keep" leaves what the core passed in
 *   PROFTEST_FAULT  init: init fails (ncclSystemError)
 *   PROFTEST_REPORT set: each finalize prints the violation count to stderr
 *                   (to run other test programs under the plugin)
 */
#ifndef BRD_TESTS_PROFILER_TEST_H
#define BRD_TESTS_PROFILER_TEST_H

#include <stddef.h>
#include <stdint.h>

#define PROFTEST_NTYPES 15

typedef struct {
  int inits, init_fails, finalizes;
  int mask_in;                  /* *eActivationMask as the core passed it */
  long starts[PROFTEST_NTYPES]; /* by bit index of the event type */
  long stops[PROFTEST_NTYPES];
  long states[PROFTEST_NTYPES];
  long open;                    /* started, not stopped, all contexts */
  long violations;
  char first_violation[256];
  /* Descriptors seen (sums over all contexts). */
  uint64_t comm_id;             /* v4+ (commHash) / v5+ (commId) of the last init */
  int nranks, nnodes;           /* v4+ */
  int rank_mask;                /* v4+: bit r set by init of rank r */
  size_t coll_count_sum;        /* Coll count */
  size_t p2p_count_sum;         /* P2p count */
  long coll_bytes_bad;          /* v1/v2: trafficBytes != count * size */
  long coll_nch_zero;           /* Coll with nChannels 0 */
  long coll_names_bad;          /* Coll func/datatype/algo/proto not as expected */
  long p2p_peer_bad;            /* P2p peer out of [0, nranks) */
  long proxy_bytes;             /* ProxyOp chunkSize, summed */
  long proxy_desc_bad;          /* ProxyOp pid/peer/nSteps/chunkSize/isSend out of range */
  long orphans[PROFTEST_NTYPES]; /* children without the parent they should have */
  long proxy_under_p2p;         /* ProxyOps whose parent is a P2p event */
  char last_func[32], last_dtype[32], last_algo[32], last_proto[32];
} proftest_state_t;

#endif
