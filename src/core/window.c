/*
 * Braid: a runtime's window: what every rank can do, how big the window
 * is, which transport makes it, and the exchange that maps every rank's
 * window on every rank. See window.h for the layout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "algos/algos.h"
#include "core/bootstrap.h"
#include "core/proxy.h"
#include "core/rma.h"
#include "core/window.h"
#include "plan/plan.h"
#include "transport/net.h"

/* See window.h. */
void brd_window_topo(const struct ncclComm *comm, const brd_backend_ops_t *be, int p2p,
                     int nic_mbps, brd_tune_topo_t *t) {
  memset(t, 0, sizeof(*t));
  t->nranks = comm->nranks;
  t->nnodes = comm->n_nodes > 0 ? comm->n_nodes : 1;
  /* The most ranks any host has: the same on every rank (hosts may hold
   * different numbers of ranks), so every rank's tuner chooses alike. */
  t->local_nranks = 1;
  for (int r = 0; comm->peers != NULL && r < comm->nranks; r++) {
    int on_host = 0;
    for (int q = 0; q < comm->nranks; q++)
      on_host += comm->peers[q].host_hash == comm->peers[r].host_hash;
    if (on_host > t->local_nranks) t->local_nranks = on_host;
  }
  t->ll128_ok = 0; /* no LL128 generator */
  be->topo(comm, p2p, t);
  t->inter_bw = t->intra_bw;
  t->inter_lat = t->intra_lat;
  if (t->nnodes > 1) {
    /* Between hosts: a net hop's latency, and a rank's share of the net
     * taken as one NIC at the achievable fraction of line rate (no faster
     * than the backend's own links): the slowest NIC any rank's proxy uses
     * (nic_mbps, agreed at connect, so every rank's tuner chooses alike),
     * or 100 Gbit/s where that is not known. */
    double lat = brd_hw_consts[BRD_HW_LAT_NET].value;
    double gbit = nic_mbps > 0 ? nic_mbps / 1000.0 : 100.0;
    double bw = gbit / 8.0 * brd_hw_consts[BRD_HW_NIC_EFF].value;
    if (lat > t->inter_lat) t->inter_lat = (float)lat;
    if (bw < t->inter_bw) t->inter_bw = (float)bw;
  }
}

/* The node layout into host[nranks]: rank r's label is the first rank on
 * its host, the same on every rank (peers[] is; without peers, a node per
 * rank). */
static void host_labels(const struct ncclComm *comm, int *host) {
  int n = comm->nranks;
  for (int r = 0; r < n; r++) {
    host[r] = r;
    for (int q = 0; q < r && comm->peers != NULL; q++)
      if (comm->peers[q].host_hash == comm->peers[r].host_hash) {
        host[r] = q;
        break;
      }
  }
}

/* Gives the plan cache the node layout (host_labels). */
static ncclResult_t hosts_set(const struct ncclComm *comm, struct brd_rt *rt) {
  int n = comm->nranks;
  if (comm->peers == NULL || n < 2) return brd_plans_hosts_set(&rt->plans, NULL);
  int *host = malloc((size_t)n * sizeof(*host));
  if (host == NULL) {
    WARN("out of host memory for the node layout of %d ranks", n);
    return ncclSystemError;
  }
  host_labels(comm, host);
  ncclResult_t res = brd_plans_hosts_set(&rt->plans, host);
  free(host);
  return res;
}

/* Generates the plans every call may need (root 0; other roots have the
 * same sizes) and returns the scratch they take (Simple and switch plans
 * in *scratch_out, LL plans in *ll_scratch_out: window.h) and the
 * semaphores: per peer channel, and per switch channel (0 without NVLS). */
static ncclResult_t plans_size(struct brd_rt *rt, size_t *scratch_out, size_t *ll_scratch_out,
                               size_t *nsems_out, size_t *sw_nsems_out) {
  size_t scratch = 0, ll_scratch = 0, nsems = 1, sw_nsems = 0;
  for (uint8_t coll = 0; coll < BRD_IR_COLL_SENDRECV; coll++) {
    for (int a = 0; a < BRD_PLANS_NALGOS; a++) {
      for (int det = 0; det <= brd_ir_coll_traits(coll).reduction; det++) {
        for (int ll = 0; ll < 2; ll++) {
          uint8_t algo = (uint8_t)(brd_plans_algos[a] | (ll ? BRD_ALGOS_LOWLAT : 0));
          /* Switch plans where NVLS is on: the NVLS plans on one node,
           * NVLSTree's across nodes (window.c's nvls_decide). */
          int flat = brd_plans_algos[a] == BRD_IR_ALGO_NVLS;
          int nvls = flat || brd_plans_algos[a] == BRD_ALGO_NVLS_TREE;
          if (nvls && (!rt->nvls || flat != (rt->topo.nnodes == 1))) continue;
          if (!brd_algos_available(coll, algo, det)) continue;
          /* NVLS plans are Simple whatever the protocol asked. */
          for (int p = nvls ? BRD_PLANS_NPROTOS - 1 : 0; p < BRD_PLANS_NPROTOS; p++) {
            for (int bi = 0; bi < rt->nb_count; bi++) {
              const brd_ir_plan_t *plan;
              CHECK(brd_plans_get(&rt->plans, coll, algo, brd_plans_protos[p],
                                  rt->nb_opts[bi], 0, det, &plan));
              size_t s = brd_plan_scratch_bytes(plan);
              size_t *area = plan->proto == BRD_IR_PROTO_LL ? &ll_scratch : &scratch;
              if (s > *area) *area = s;
              /* NVLSTree's plan has both kinds, with nsems of each. */
              if (nvls && plan->nsems > sw_nsems) sw_nsems = plan->nsems;
              if (!flat && plan->nsems > nsems) nsems = plan->nsems;
            }
          }
        }
      }
    }
  }
  /* The library's plans (library_fit left only those that can run). */
  for (int i = 0; i < rt->plans.nlib; i++) {
    const brd_ir_plan_t *plan = rt->plans.lib[i].plan;
    size_t s = brd_plan_scratch_bytes(plan);
    size_t *area = plan->proto == BRD_IR_PROTO_LL ? &ll_scratch : &scratch;
    if (s > *area) *area = s;
    int sw = 0;
    for (uint32_t ch = 0; ch < brd_ir_plan_rank(plan, 0)->nchans; ch++)
      sw |= brd_ir_plan_chan(plan, 0, (int)ch)->type == BRD_IR_CHAN_SWITCH;
    size_t *sems = sw ? &sw_nsems : &nsems;
    if (plan->nsems > *sems) *sems = plan->nsems;
  }
  *scratch_out = scratch;
  *ll_scratch_out = ll_scratch;
  *nsems_out = nsems;
  *sw_nsems_out = sw_nsems;
  return ncclSuccess;
}

/* Whether this rank takes part in switch channels (device/ir.h) as far as
 * its own settings go: NCCL_NVLS_ENABLE and the backend. Host mode has no
 * switch, so its emulation needs NCCL_NVLS_ENABLE=1 or NCCL_ALGO naming
 * NVLS or NVLSTree. Every rank reports it in the capabilities exchange
 * (caps_agree), so all turn NVLS on together or none does, whatever their
 * environments. why (nwhy bytes) says why not when it was asked for;
 * *asked_out says whether it was. */
static int nvls_local(const struct brd_rt *rt, int *asked_out, char *why, size_t nwhy) {
  int64_t en = brd_param_int(BRD_P_NVLS_ENABLE);
  int asked = en == 1 || brd_tune_mask_names(&rt->mask, BRD_ALGO_NVLS) ||
              brd_tune_mask_names(&rt->mask, BRD_ALGO_NVLS_TREE);
  *asked_out = asked;
  why[0] = '\0';
  if (en == 0) {
    if (asked) snprintf(why, nwhy, "NCCL_NVLS_ENABLE=0");
    return 0;
  }
  if (rt->be->switch_chans == BRD_BACKEND_SWITCH_NONE) {
    snprintf(why, nwhy, "the %s backend has no switch channels (multicast) yet", rt->be->name);
    return 0;
  }
  /* Automatic: no switch here, or not yet trusted. */
  return asked || (rt->be->switch_chans != BRD_BACKEND_SWITCH_EMULATED &&
                   rt->be->switch_chans != BRD_BACKEND_SWITCH_OPT_IN);
}

/* Across nodes: why switch channels per node cannot be (into why), or ""
 * when they can: nodes of one size from 2 to BRD_ALGOS_NVLS_MAX_RANKS
 * ranks whose ranks share memory (algos/nvls_hier.c), on a backend that
 * addresses every member's copy itself (the CUDA backend maps one
 * multicast object over every rank). */
static void nvls_nodes_why(const struct ncclComm *comm, const struct brd_rt *rt, char *why,
                           size_t nwhy) {
  int n = comm->nranks;
  int *host = calloc((size_t)n, sizeof(*host));
  why[0] = '\0';
  if (host == NULL) {
    snprintf(why, nwhy, "out of host memory for the node layout");
    return;
  }
  host_labels(comm, host);
  if (rt->be->switch_chans != BRD_BACKEND_SWITCH_EMULATED) {
    snprintf(why, nwhy, "%d nodes, and the %s backend maps one multicast object over every "
             "rank (switch channels per node run in host mode only)", comm->n_nodes,
             rt->be->name);
  } else if (!brd_algos_nvls_hier_fits(host, n)) {
    snprintf(why, nwhy, "%d ranks on %d nodes; NVLS across nodes needs two nodes or more "
             "with the same number of ranks, 2 to %d, on each", n, comm->n_nodes,
             BRD_ALGOS_NVLS_MAX_RANKS);
  } else {
    for (int q = 0; q < n && why[0] == '\0'; q++)
      for (int r = 0; r < n; r++)
        if (host[q] == host[r] && rt->plans.port != NULL && rt->plans.port[(size_t)q * n + r]) {
          snprintf(why, nwhy, "ranks %d and %d share a node but no memory", q, r);
          break;
        }
  }
  free(host);
}

/* NVLS (switch channels, device/ir.h): on when every rank's settings let
 * it (caps->nvls_ok, agreed) and the communicator allows it: on one node
 * every rank must share memory with every other (one switch group, the
 * NVLS plans); across nodes each node's ranks form a switch group (the
 * NVLSTree plan, algos/nvls_hier.c). The inputs are the same on every
 * rank, so is the answer. INFO says why NVLS stays off when it was asked
 * for. */
static int nvls_decide(const struct ncclComm *comm, const struct brd_rt *rt,
                       const brd_backend_caps_t *caps) {
  int n = comm->nranks, asked;
  char why[320] = "", mine[160];
  int local = nvls_local(rt, &asked, mine, sizeof(mine));
  int nodes = comm->n_nodes > 1 || rt->plans.port != NULL;
  if (!local) {
    snprintf(why, sizeof(why), "%s", mine);
  } else if (!caps->nvls_ok) {
    snprintf(why, sizeof(why), "rank %d does not take part (NCCL_NVLS_ENABLE, NCCL_ALGO or "
             "its backend), and every rank turns NVLS on or off together",
             caps->nvls_rank);
  } else if (!nodes && (n < 2 || n > BRD_ALGOS_NVLS_MAX_RANKS)) {
    snprintf(why, sizeof(why), "%d ranks (NVLS needs 2 to %d)", n, BRD_ALGOS_NVLS_MAX_RANKS);
  } else if (nodes) {
    nvls_nodes_why(comm, rt, why, sizeof(why));
    if (why[0] == '\0') {
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NVLS, "rank %d: NVLS on: switch channels per node "
           "(%d nodes, emulated in shared memory), for the NVLSTree all-reduce", comm->rank,
           comm->n_nodes);
      return 1;
    }
  } else {
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NVLS, "rank %d: NVLS on: switch channels over %d "
         "ranks (%s)", comm->rank, n,
         rt->be->switch_chans == BRD_BACKEND_SWITCH_EMULATED ? "emulated in shared memory"
                                                             : "multicast, if every rank maps it");
    return 1;
  }
  if (asked || why[0] != '\0')
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NVLS, "rank %d: NVLS off: %s", comm->rank, why);
  return 0;
}

/* Ranks per node when every node holds as many (the same on every rank:
 * peers[] is), else 0. */
static int ranks_per_node(const struct ncclComm *comm) {
  int n = comm->nranks, rpn = -1;
  if (comm->peers == NULL) return n;
  for (int r = 0; r < n; r++) {
    int first = 1, on = 0;
    for (int q = 0; q < n; q++) {
      if (comm->peers[q].host_hash != comm->peers[r].host_hash) continue;
      if (q < r) first = 0;
      on++;
    }
    if (!first) continue;
    if (rpn >= 0 && on != rpn) return 0;
    rpn = on;
  }
  return rpn > 0 ? rpn : n;
}

/* The plan library (BRAID_PLAN_DIR): loaded by every rank before the
 * capabilities are exchanged; the exchange carries what each loaded
 * (caps_agree), and where any two ranks differ, every rank WARNs and runs
 * without it (they would choose different plans). */
static ncclResult_t library_load(struct ncclComm *comm, struct brd_rt *rt) {
  const char *dirs = brd_param_str(BRD_P_BRAID_PLAN_DIR);
  return brd_plans_library_load(&rt->plans, dirs != NULL && dirs[0] != '\0' ? dirs : NULL,
                                comm->rank, ranks_per_node(comm));
}

/* Keeps the library's plans this runtime can run (the same answer on
 * every rank: its inputs are agreed) and gives them the channel types
 * of the links. */
static void library_fit(const struct ncclComm *comm, struct brd_rt *rt,
                        const brd_backend_caps_t *caps) {
  brd_plan_cache_t *c = &rt->plans;
  for (int i = 0; i < c->nlib;) {
    brd_plan_user_t *u = &c->lib[i];
    brd_ir_plan_t *plan = u->plan;
    int sw = 0;
    for (int r = 0; r < plan->nranks; r++)
      for (uint32_t ch = 0; ch < brd_ir_plan_rank(plan, r)->nchans; ch++)
        sw |= brd_ir_plan_chan(plan, r, (int)ch)->type == BRD_IR_CHAN_SWITCH;
    if (sw && !rt->nvls) {
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d skips %s: it has "
           "switch channels and NVLS is off", comm->rank, u->path);
    } else if (c->port != NULL && brd_plan_reads_peers(plan)) {
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d skips %s: it reads "
           "peers' memory and some ranks reach each other only over the network",
           comm->rank, u->path);
    } else if (plan->nblocks > caps->nb_max) {
      WARN("plan library: rank %d skips %s: it has %u blocks per rank and the %s backend "
           "runs at most %d here; write it with fewer blocks", comm->rank, u->path,
           (unsigned)plan->nblocks, rt->be->name, caps->nb_max);
    } else {
      if (c->port != NULL) {
        brd_plan_chans_mark(plan, c->port);
      } else {
        /* Every link is memory here, whatever the file said. */
        brd_ir_chan_t *ct = (brd_ir_chan_t *)((char *)plan + plan->chan_off);
        for (int r = 0; r < plan->nranks; r++) {
          const brd_ir_rank_t *rk = brd_ir_plan_rank(plan, r);
          for (uint32_t ch = 0; ch < rk->nchans; ch++)
            if (ct[rk->chan_first + ch].type == BRD_IR_CHAN_PORT)
              ct[rk->chan_first + ch].type = BRD_IR_CHAN_MEMORY;
        }
      }
      i++;
      continue;
    }
    brd_plans_library_drop(c, i);
  }
}

/* Point-to-point scratch per rank and the bytes of one piece. */
static ncclResult_t p2p_size(int nranks, int rank, size_t *bytes_out, size_t *piece_out) {
  brd_algos_sendrecv_rank_t *ranks = calloc((size_t)nranks, sizeof(*ranks));
  brd_ir_plan_t *plan = NULL;
  brd_plan_layout_t l;
  ncclResult_t res = ncclSuccess;
  if (ranks == NULL) {
    WARN("out of host memory sizing point-to-point buffers for %d ranks", nranks);
    return ncclSystemError;
  }
  brd_algos_sendrecv_args_t args = {nranks, rank, ranks};
  CHECK_GOTO(brd_algos_sendrecv(&args, &plan), res, fail_free_ranks);
  *bytes_out = brd_plan_scratch_bytes(plan);
  CHECK_GOTO(brd_plan_layout_init(plan, 1, ncclUint8, *bytes_out, &l), res,
             fail_destroy_plan);
  *piece_out = l.chunk_max;
fail_destroy_plan:
  brd_plan_destroy(plan);
fail_free_ranks:
  free(ranks);
  return res;
}

/* Step 1 of the connection: what every rank can do (the backend's report:
 * P2P, blocks, staging), agreed on by all. */
static ncclResult_t caps_agree(struct ncclComm *comm, struct brd_rt *rt,
                               brd_backend_caps_t *caps_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank, blocker = -1;
  char why[512] = "";
  brd_backend_caps_t *all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) {
    WARN("out of host memory for the capabilities of %d ranks", n);
    return ncclSystemError;
  }
  CHECK_GOTO(rt->be->caps(comm, &all[me], why, sizeof(why)), res, out);
  all[me].lib_hash = rt->plans.lib_hash;
  all[me].lib_n = rt->plans.nlib;
  int asked;
  char nwhy[160];
  all[me].nvls_ok = nvls_local(rt, &asked, nwhy, sizeof(nwhy));
  /* Between hosts: the NIC this rank's proxy would use, for the tuner. */
  if (comm->n_nodes > 1) all[me].nic_mbps = brd_proxy_nic_mbps(comm);
  /* The first collective's exchange waits BRAID_TIMEOUT, as every later
   * wait does, and names the ranks that never came. */
  if (n > 1)
    CHECK_GOTO(brd_boot_allgather_timed(comm->boot, all, sizeof(*all),
                                        brd_param_int(BRD_P_BRAID_TIMEOUT), "first collective"),
               res, out);
  brd_backend_caps_t c = all[me];
  c.lib_same = 1;
  c.nic_rank = -1;
  c.nic_mbps = 0;
  c.nvls_rank = -1;
  for (int r = 0; r < n; r++) {
    if (!all[r].nvls_ok && c.nvls_ok) {
      c.nvls_ok = 0;
      c.nvls_rank = r;
    }
    if (all[r].nic_mbps > 0 && (c.nic_mbps == 0 || all[r].nic_mbps < c.nic_mbps)) {
      c.nic_mbps = all[r].nic_mbps;
      c.nic_rank = r;
    }
    if (all[r].lib_hash != all[me].lib_hash && c.lib_same) {
      c.lib_same = 0;
      WARN("plan library: rank %d loaded %d plans from BRAID_PLAN_DIR, rank %d loaded %d "
           "or others (names, fields or plans differ); every rank ignores the library and "
           "runs the built-in plans: give every rank the same BRAID_PLAN_DIR files", me,
           all[me].lib_n, r, all[r].lib_n);
    }
    if (!all[r].p2p_ok && c.p2p_ok) {
      c.p2p_ok = 0;
      blocker = r;
    }
    if (all[r].nb_max < c.nb_max) c.nb_max = all[r].nb_max;
    if (all[r].stage_bytes < c.stage_bytes) c.stage_bytes = all[r].stage_bytes;
  }
  /* A backend that offers P2P gives the reason when this rank cannot use
   * it; then every rank goes through host memory. */
  if (!all[me].p2p_ok && why[0] != '\0')
    WARN("rank %d: GPU peer-to-peer is not usable with %s; every rank of the "
         "communicator exchanges data through host memory instead, which is "
         "much slower", me, why);
  else if (blocker >= 0)
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P, "rank %d: rank %d cannot use GPU "
         "peer-to-peer with every peer; channels go through host memory", me, blocker);
  *caps_out = c;
out:
  free(all);
  return res;
}

/* This rank's window record: the layout of window.h, for the plans'
 * scratch and semaphores. Returns the window's size. */
static size_t window_layout(int n, size_t nsems, size_t sw_nsems, int rma_ctx,
                            size_t scratch, size_t ll_scratch, size_t p2p_bytes,
                            const brd_backend_caps_t *caps, int det, brd_window_rec_t *mw) {
  mw->nsems = nsems;
  mw->sem_off = 0;
  mw->p2p_sem_off = (uint64_t)n * nsems * sizeof(uint64_t);
  mw->xchg_off = mw->p2p_sem_off + (uint64_t)n * 2 * sizeof(uint64_t);
  mw->sw_sem_off = mw->xchg_off + (uint64_t)n * BRD_IR_XCHG_WORDS * sizeof(uint64_t);
  mw->sw_nsems = sw_nsems;
  mw->rma_off = mw->sw_sem_off + (uint64_t)sw_nsems * n * sizeof(uint64_t);
  mw->rma_words = (uint64_t)rma_ctx * BRD_RMA_SIGNALS * (uint64_t)n;
  mw->scratch_off = (mw->rma_off + mw->rma_words * sizeof(uint64_t) + 4095) &
                    ~(uint64_t)4095;
  mw->scratch_bytes = (scratch + 4095) & ~(size_t)4095;
  mw->ll_scratch_off = mw->scratch_off + mw->scratch_bytes;
  mw->ll_scratch_bytes = (ll_scratch + 4095) & ~(size_t)4095;
  mw->p2p_off = mw->ll_scratch_off + mw->ll_scratch_bytes;
  mw->p2p_bytes = (p2p_bytes + 4095) & ~(size_t)4095;
  mw->stage_off = mw->p2p_off + mw->p2p_bytes;
  mw->stage_bytes = caps->stage_bytes;
  mw->deterministic = (uint64_t)det;
  mw->nb_max = (uint64_t)caps->nb_max;
  return mw->stage_off + 2 * mw->stage_bytes;
}

/* Bytes of the window a record describes (the same on every rank). */
static size_t window_bytes(const brd_window_rec_t *w) {
  return (size_t)(w->stage_off + 2 * w->stage_bytes);
}

/* Whether rank r's record has the sizes of this rank's (WARN if not). */
static ncclResult_t window_agree(int me, int r, const brd_window_rec_t *mw,
                                 const brd_window_rec_t *w) {
  if (w->nsems == mw->nsems && w->stage_bytes == mw->stage_bytes &&
      w->scratch_bytes == mw->scratch_bytes && w->ll_scratch_bytes == mw->ll_scratch_bytes &&
      w->p2p_bytes == mw->p2p_bytes &&
      w->deterministic == mw->deterministic && w->nb_max == mw->nb_max &&
      w->sw_nsems == mw->sw_nsems && w->rma_words == mw->rma_words)
    return ncclSuccess;
  WARN("rank %d and rank %d disagree on channel sizes (semaphores %zu "
       "vs %zu, scratch %zu vs %zu, LL scratch %zu vs %zu, staging %zu vs %zu, deterministic "
       "%d vs %d, switch semaphores %zu vs %zu, one-sided counters %zu vs %zu); give "
       "every rank the same NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE, BRAID_HOST_STAGING, "
       "BRAID_CUDA_STAGING, BRAID_DETERMINISTIC, NCCL_NVLS_ENABLE, NCCL_ALGO and "
       "ncclConfig_t.numRmaCtx", me, r, (size_t)mw->nsems,
       (size_t)w->nsems, (size_t)mw->scratch_bytes, (size_t)w->scratch_bytes,
       (size_t)mw->ll_scratch_bytes, (size_t)w->ll_scratch_bytes,
       (size_t)mw->stage_bytes, (size_t)w->stage_bytes, (int)mw->deterministic,
       (int)w->deterministic, (size_t)mw->sw_nsems, (size_t)w->sw_nsems,
       (size_t)mw->rma_words, (size_t)w->rma_words);
  return ncclInvalidUsage;
}

/* This rank's net state for its record: unusable when it has port peers
 * and no net. Not an error here: every rank reads every record at the
 * exchange and fails together, naming the rank (net_check). */
static void net_state(const struct brd_rt *rt, brd_window_rec_t *mw) {
  char why[192] = "";
  mw->net_bad = 0;
  mw->net_why[0] = '\0';
  if (rt->nports == 0 || brd_net_get(why, sizeof(why)) != NULL) return;
  /* The other ranks see this rank's setting, not their own. */
  const char *ifname = brd_param_str(BRD_P_SOCKET_IFNAME);
  mw->net_bad = 1;
  snprintf(mw->net_why, sizeof(mw->net_why), "%s; NCCL_SOCKET_IFNAME=%.40s there", why,
           ifname != NULL ? ifname : "(unset)");
}

/* Whether every rank that needs the net has one (the records' net_bad):
 * else ncclInvalidUsage on every rank, the WARN naming the first such rank,
 * its reason and NCCL_SOCKET_IFNAME, instead of each rank naming whichever
 * peer it saw leave. */
static ncclResult_t net_check(int me, int n, brd_window_rec_t *win) {
  int bad = -1, nbad = 0;
  for (int r = 0; r < n; r++)
    if (win[r].net_bad) {
      if (bad < 0) bad = r;
      nbad++;
    }
  if (bad < 0) return ncclSuccess;
  win[bad].net_why[sizeof(win[bad].net_why) - 1] = '\0';
  char others[48] = "";
  if (nbad > 1) snprintf(others, sizeof(others), " (the first of %d such ranks)", nbad);
  WARN("rank %d: rank %d%s has peers on other hosts and no usable network (%s), so no "
       "rank of the communicator can run collectives. Fix NCCL_SOCKET_IFNAME (or NCCL_NET / "
       "NCCL_NET_PLUGIN) on rank %d's host, or put the ranks on one host and allow shared "
       "memory and peer-to-peer (NCCL_SHM_DISABLE, NCCL_P2P_DISABLE)", me, bad, others,
       win[bad].net_why, bad);
  return ncclInvalidUsage;
}

/* Step 3: every rank's record, then every peer's window mapped here. */
static ncclResult_t window_exchange(struct ncclComm *comm, struct brd_rt *rt) {
  int n = comm->nranks, me = comm->rank;
  CHECK(brd_boot_allgather(comm->boot, rt->win, sizeof(brd_window_rec_t)));
  CHECK(net_check(me, n, rt->win));
  for (int r = 0; r < n; r++) {
    rt->svc_peers[r].pid = (uint32_t)rt->win[r].svc_pid;
    rt->svc_peers[r].serial = (uint32_t)rt->win[r].svc_serial;
  }
  for (int r = 0; r < n; r++) {
    if (r == me) continue;
    CHECK(window_agree(me, r, &rt->win[me], &rt->win[r]));
    /* A port peer's window is its mirror here (proxy.h). */
    if (rt->port[r]) continue;
    CHECK(rt->be->window_import(rt->bk, r, &rt->win[r].handle, &rt->base[r]));
  }
  if (rt->nports > 0) {
    brd_proxy_mem_t mem = {NULL, NULL, NULL};
    if (rt->be->port_mem != NULL) rt->be->port_mem(rt->bk, &mem);
    char *own = rt->be->window_host != NULL ? rt->be->window_host(rt->bk) : rt->base[me];
    CHECK(brd_proxy_create(comm, rt->port, own, window_bytes(&rt->win[me]),
                           mem.alloc != NULL ? &mem : NULL, &rt->proxy));
    for (int r = 0; r < n; r++) {
      rt->ports[r] = brd_proxy_port(rt->proxy, r);
      if (rt->ports[r] != NULL) rt->base[r] = brd_proxy_mirror_dev(rt->proxy, r);
    }
    if (rt->be->ports_bind != NULL) CHECK(rt->be->ports_bind(rt->bk, rt->proxy, n));
  }
  /* Every rank has mapped every window: names may go. */
  return brd_boot_barrier(comm->boot);
}

/* See window.h. */
ncclResult_t brd_window_connect(struct ncclComm *comm, struct brd_rt *rt) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  size_t scratch, ll_scratch, nsems, sw_nsems, p2p_bytes;
  brd_backend_caps_t caps;
  struct brd_backend *bk = NULL;
  CHECK(brd_tune_parse(brd_param_str(BRD_P_ALGO), brd_param_str(BRD_P_PROTO), &rt->mask));
  rt->deterministic = brd_param_int(BRD_P_BRAID_DETERMINISTIC) != 0;
  CHECK(library_load(comm, rt));
  CHECK(caps_agree(comm, rt, &caps));
  if (!caps.lib_same) brd_plans_library_drop(&rt->plans, -1);
  brd_window_topo(comm, rt->be, caps.p2p_ok, caps.nic_mbps, &rt->topo);
  if (comm->n_nodes > 1)
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "rank %d: between hosts the tuner takes "
         "%.2f GB/s per rank: %s", me, (double)rt->topo.inter_bw,
         caps.nic_mbps > 0 ? "the slowest NIC of the ranks' proxies" : "no NIC speed known, "
         "100 Gbit/s assumed");
  if (comm->n_nodes > 1 && caps.nic_mbps > 0)
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "rank %d: slowest NIC %d Mbit/s (rank %d's)", me,
         caps.nic_mbps, caps.nic_rank);
  rt->reg_shareable = rt->be->reg_needs_p2p ? caps.p2p_ok : 1;
  rt->nb_count = 0;
  for (int b = 1; b <= caps.nb_max && rt->nb_count < BRD_RT_NB_MAX_OPTS; b *= 2)
    rt->nb_opts[rt->nb_count++] = b;
  if (n > 1 && !caps.p2p_ok) {
    /* Every pair's link, as every rank sees it, for the plans' channels. */
    rt->port_matrix = calloc((size_t)n * (size_t)n, 1);
    if (rt->port_matrix == NULL) {
      WARN("out of host memory for the link table of %d ranks", n);
      res = ncclSystemError;
      goto fail;
    }
    int any = 0;
    for (int q = 0; q < n; q++)
      for (int r = 0; r < n; r++)
        any |= rt->port_matrix[(size_t)q * n + r] =
            (uint8_t)(q != r && brd_transport_host_port(&comm->peers[q], &comm->peers[r]));
    if (any) rt->plans.port = rt->port_matrix;
  }
  rt->nvls = nvls_decide(comm, rt, &caps);
  rt->topo.nvls = rt->nvls;
  CHECK_GOTO(hosts_set(comm, rt), res, fail);
  library_fit(comm, rt, &caps);
  CHECK_GOTO(plans_size(rt, &scratch, &ll_scratch, &nsems, &sw_nsems), res, fail);
  CHECK_GOTO(p2p_size(n, me, &p2p_bytes, &rt->p2p_piece), res, fail);

  rt->win = calloc((size_t)n, sizeof(*rt->win));
  rt->base = calloc((size_t)n, sizeof(*rt->base));
  rt->seq.p2p_cursor = calloc((size_t)n, sizeof(*rt->seq.p2p_cursor));
  rt->svc_peers = calloc((size_t)n, sizeof(*rt->svc_peers));
  rt->port = calloc((size_t)n, sizeof(*rt->port));
  rt->ports = calloc((size_t)n, sizeof(*rt->ports));
  if (rt->win == NULL || rt->base == NULL || rt->seq.p2p_cursor == NULL ||
      rt->svc_peers == NULL || rt->port == NULL || rt->ports == NULL) {
    WARN("out of host memory for the channel tables of rank %d (%d ranks)", me, n);
    res = ncclSystemError;
    goto fail;
  }
  brd_window_rec_t *mw = &rt->win[me];
  size_t total = window_layout(n, nsems, sw_nsems, brd_rma_ctx_count(comm), scratch,
                               ll_scratch, p2p_bytes, &caps, rt->deterministic, mw);
  /* GPU peer-to-peer when every pair has it, else host memory (threads of
   * this process, or processes), and port channels over the net to the
   * peers that share no memory with this rank: chosen once per runtime. */
  char twhy[512];
  const brd_transport_ops_t *t =
      brd_transport_split(comm->peers, n, me,
                          caps.p2p_ok ? BRD_TRANSPORT_MEM_GPU : BRD_TRANSPORT_MEM_HOST,
                          rt->port, twhy, sizeof(twhy));
  if (t == NULL) {
    WARN("rank %d: no transport reaches the peers sharing memory with this rank (%s)",
         me, twhy);
    res = ncclInternalError;
    goto fail;
  }
  for (int r = 0; r < n; r++) rt->nports += rt->port[r];
  /* Registered buffers cannot be mapped over a net. */
  if (rt->nports > 0) rt->reg_shareable = 0;
  /* A rank without the net it needs fails at the exchange with every
   * other rank (net_check), not here alone. */
  net_state(rt, mw);
  CHECK_GOTO(rt->be->window_create(comm, t, caps.p2p_ok, total, &mw->handle, &rt->base[me],
                                   &bk), res, fail);
  __atomic_store_n(&rt->bk, bk, __ATOMIC_RELEASE);
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_SHM,
       "rank %d: %s %s window of %zu bytes (scratch %zu, LL scratch %zu, point-to-point "
       "%zu, staging 2x%zu, %zu semaphores per peer, up to %d blocks per rank)", me,
       rt->be->name, t->name, total, (size_t)mw->scratch_bytes,
       (size_t)mw->ll_scratch_bytes, (size_t)mw->p2p_bytes,
       (size_t)mw->stage_bytes, nsems, caps.nb_max);

  if (n > 1 && !brd_comm_all_in_process(comm)) {
    /* Ranks in other processes map this rank's registered buffers on its
     * request (brd_reg_share), whichever thread of theirs is busy. */
    CHECK_GOTO(brd_reg_svc_create(comm, &rt->svc), res, fail);
    mw->svc_pid = (uint64_t)getpid();
    mw->svc_serial = brd_ipc_svc_serial(rt->svc);
  }
  if (n > 1) CHECK_GOTO(window_exchange(comm, rt), res, fail);
  rt->be->window_seal(rt->bk);
  if (rt->nvls && rt->be->switch_bind != NULL) {
    int on = 0;
    CHECK_GOTO(rt->be->switch_bind(comm, rt->bk, &on), res, fail);
    if (!on) rt->nvls = rt->topo.nvls = 0;
    else INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NVLS, "rank %d: NVLS on: the window is mapped "
              "for multicast", me);
  }
  rt->ready = 1;
  return ncclSuccess;

fail:
  brd_window_disconnect(rt);
  return res;
}

/* See window.h. */
void brd_window_disconnect(struct brd_rt *rt) {
  struct brd_backend *bk = __atomic_exchange_n(&rt->bk, NULL, __ATOMIC_ACQ_REL);
  /* The proxy writes into this rank's window: it goes before the window,
   * once no work that may need it runs. */
  if (rt->proxy != NULL && bk != NULL && rt->be->quiesce != NULL) rt->be->quiesce(bk);
  brd_proxy_destroy(rt->proxy);
  rt->proxy = NULL;
  /* The backend next: it waits for the executor to leave the windows and
   * the registered buffers the service maps. */
  if (bk != NULL) rt->be->destroy(bk);
  brd_ipc_svc_destroy(rt->svc);
  rt->svc = NULL;
  free(rt->svc_peers);
  free(rt->base);
  free(rt->win);
  free(rt->seq.p2p_cursor);
  free(rt->port);
  free(rt->ports);
  free(rt->port_matrix);
  rt->port_matrix = NULL;
  rt->plans.port = NULL;
  rt->nvls = 0;
  rt->topo.nvls = 0;
  rt->port = NULL;
  rt->ports = NULL;
  rt->nports = 0;
  rt->svc_peers = NULL;
  rt->base = NULL;
  rt->win = NULL;
  rt->seq.p2p_cursor = NULL;
  rt->ready = 0;
}
