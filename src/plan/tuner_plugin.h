/*
 * Braid: external tuner plugins (ncclTunerPlugin_v2 .. v6).
 *
 * The library is loaded once per process, on the first communicator's
 * init, from NCCL_TUNER_PLUGIN by NCCL's rules (unset: libnccl-tuner.so,
 * then the net plugin's library; a name X: X, then libnccl-tuner-X.so,
 * then the net plugin's library; a path: that file; none: no tuner). The
 * newest ncclTunerPlugin_vN it exports wins. A failed load is remembered
 * for the process. Each communicator then gets its own plugin context
 * (init ... destroy / finalize), and every tuned collective (Broadcast,
 * Reduce, AllGather, ReduceScatter, AllReduce) asks the plugin through
 * NCCL's cost table before Braid picks a plan.
 *
 * Algorithm indices of the table (NCCL's) and Braid's algorithms:
 *   NCCL_ALGO_TREE 0 = BRD_ALGO_TREE, NCCL_ALGO_RING 1 = BRD_ALGO_RING,
 *   COLLNET_DIRECT 2, COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6 = Braid's
 *   algorithms of those names (no generator yet: always -1).
 *   OneShot and TwoShot have no NCCL index and are not in the table: the
 *   plugin cannot name them. When the plugin leaves the table exactly as
 *   Braid filled it (no opinion), Braid's own choice stands, OneShot and
 *   TwoShot included; when it changes any entry, the smallest entry that
 *   is not negative wins, among the pairs Braid offered.
 * Protocols: NCCL_PROTO_LL 0 = LL, LL128 1 = LL128, SIMPLE 2 = Simple.
 */
#ifndef BRD_PLAN_TUNER_PLUGIN_H
#define BRD_PLAN_TUNER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "plan/tune.h"

typedef struct brd_tuner brd_tuner_t;

/* What a plugin's init learns about the communicator. */
typedef struct {
  uint64_t comm_id;      /* the communicator's hash, same on every rank */
  int nranks;
  int nnodes;
  int nvl_domains;       /* hosts: ranks of one host share its NVLink domain */
  int min_per_domain;    /* fewest ranks on one host */
  int max_per_domain;    /* most ranks on one host */
} brd_tuner_comm_t;

/* Loads the process's tuner plugin if that was not tried yet, and makes a
 * context for one communicator with the plugin's init. *out is NULL when
 * there is no plugin (none named and none found, NCCL_TUNER_PLUGIN=none,
 * an earlier load failed) or its init failed (WARNed: the communicator
 * then uses Braid's own choice). A library named in NCCL_TUNER_PLUGIN that
 * cannot be opened or exports no ncclTunerPlugin_v2 .. v6 gives a WARN
 * saying what to fix; an unset variable only INFO lines. Returns
 * ncclSystemError only when out of memory. The init thread; blocks on
 * dlopen and on the plugin's init. */
ncclResult_t brd_tuner_create(const brd_tuner_comm_t *comm, brd_tuner_t **out);

/* Calls the plugin's destroy (v2 .. v4) or finalize (v5, v6) and drops
 * the process's reference; the library is closed with the last one
 * ("TUNER/Plugin: Closing tuner: '<name>'"). NULL is a no-op. Any thread,
 * once no launch uses t. */
void brd_tuner_destroy(brd_tuner_t *t);

/* The plugin's name and ABI version (2 .. 6). */
const char *brd_tuner_name(const brd_tuner_t *t);
int brd_tuner_version(const brd_tuner_t *t);

/* Picks the (algorithm, protocol) of one call. t NULL: exactly
 * brd_tune_select. Otherwise, for a tuned collective, builds NCCL's
 * float[7][3] cost table from Braid's model (brd_tune_costs) with every
 * pair Braid can run here (available_algos with an NCCL index,
 * available_protos, the mask) and -1 elsewhere, calls getCollInfo(ctx,
 * func, bytes, num_pipe_ops, table, 7, 3, reg_buff, &nChannels) and picks
 * as the header says. *nchannels_out gets the plugin's nChannels (0: keep
 * Braid's). When Braid offers no pair (only OneShot/TwoShot can run) the
 * plugin is not called. A getCollInfo error WARNs (once per
 * communicator) and Braid's own choice stands. A table the plugin left
 * with no pair Braid can run: ncclInternalError (ncclInvalidUsage when
 * NCCL_ALGO or NCCL_PROTO is set) with NCCL's WARN "no algorithm/protocol
 * available". Other errors are brd_tune_select's. The communicator's
 * launching thread. */
ncclResult_t brd_tuner_select(brd_tuner_t *t, const brd_tune_topo_t *topo, brd_coll_t coll,
                              size_t bytes, uint32_t available_algos,
                              uint32_t available_protos, const brd_tune_mask_t *mask,
                              int num_pipe_ops, int reg_buff, brd_tune_choice_t *choice_out,
                              int *nchannels_out);

/* Forgets a failed or finished load so the next brd_tuner_create reads
 * NCCL_TUNER_PLUGIN again. For tests: no context may be alive. */
void brd_tuner_reset(void);

#endif /* BRD_PLAN_TUNER_PLUGIN_H */
