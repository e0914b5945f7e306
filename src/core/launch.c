/*
 * Braid: the collective runtime of a communicator, host mode.
 *
 * Every rank owns one window of channel memory, made by the host transport
 * when all ranks are threads of this process and by the SHM transport
 * otherwise:
 *
 *   [ inbound semaphores: nranks x nsems x 8 bytes ]
 *   [ point-to-point semaphores: nranks x 2 x 8 bytes ]
 *   [ scratch: the largest any collective plan needs, both phases ]
 *   [ point-to-point scratch: BRD_ALGOS_P2P_DEPTH slots per sender ]
 *   [ staging output: two halves of stage_bytes ]
 *
 * Peers reach a rank's scratch, semaphores and output through this window.
 * User buffers are private to their process, so a collective plan's output
 * is the staging half of the work's phase and is copied to the user's
 * buffer when the rank's part of the plan is done. A message whose output
 * does not fit a half runs as several pieces, each a work of its own: a
 * piece is the same element range of every segment (collectives are
 * element-wise), so all-gather, all-to-all and gather pieces hold the range
 * of every rank's segment, and in-place calls stay correct because a piece
 * only overwrites ranges its own inputs have been read from. Halves
 * alternate with the scratch phase, so a peer one work ahead never writes
 * the half still being copied out (every collective plan ends only after
 * every rank joined it; the verifier checks that).
 *
 * Point-to-point: a launch's sends and receives become one plan built for
 * this launch (brd_algos_p2p; the scheme is in algos.h): the sender puts
 * pieces into its slots of the receiver's point-to-point scratch and the
 * receiver copies them straight into its own receive buffers, so nothing
 * is staged. The transfers of a group run concurrently, so two receives
 * into overlapping memory are refused; a send whose buffer overlaps a
 * receive of the same group (nccl-tests' in-place sendrecv) sends a
 * snapshot taken when the launch starts, so it sends what the buffer held
 * then whatever the receive writes. Each pair of ranks counts its own
 * sequence numbers (p2p_cursor here in host mode; in CUDA mode the kernels
 * keep the cursors on the device and the works carry spans), so a rank
 * needs to know nothing about the pairs it is not part of. Transfers
 * longer than P2P_ROUND_CHUNKS pieces run in rounds, each a work of its own; round k moves pieces [k * R, (k + 1) * R) of
 * every transfer, which both ends of a pair derive from the count alone.
 *
 * One launch: all the works of one brd_launch_run (every call a group put
 * on this communicator) run on one set of worker threads, one per block of
 * the widest plan, started once; between works the workers meet so the
 * finished work's output can be copied out before the next one starts. A
 * group of a thousand small calls is therefore one launch with a thousand
 * works, not a thousand launches (brd_launch_count).
 *
 * All ranks create the runtime at their first launch, allgather their
 * window records, generate the same plans and reserve the same sequence
 * numbers in the same order, which is what lets semaphores only grow.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/api.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/bootstrap.h"
#include "core/device.h"
#include "core/launch.h"
#include "core/launch_cuda.h"
#include "base/param.h"
#include "algos/algos.h"
#include "device/exec_host.h"
#include "device/redop.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "plan/verify.h"
#include "transport/transport.h"
#include "base/time.h"

#define RT_NB_MAX_OPTS 4      /* block counts a runtime may use */
#define RT_ALGOS 4            /* ring, tree, one-shot, two-shot */
#define RT_PROTOS 2           /* LL, Simple */
#define P2P_ROUND_CHUNKS 16   /* pieces of one transfer per round */
#define P2P_MAX_OPS (65536 / P2P_ROUND_CHUNKS) /* sends (or receives) per launch */
#define RT_ALGO_PEER 0x40     /* plan cache: the zero-copy variant of an algorithm */
#define RT_PEER_MIN_BYTES ((size_t)64 << 10) /* zero-copy plans from here (per rank) */

static const brd_algo_t rt_algos[RT_ALGOS] = {BRD_ALGO_RING, BRD_ALGO_TREE,
                                              BRD_ALGO_ONESHOT,
                                              BRD_ALGO_TWOSHOT};
static const brd_proto_t rt_protos[RT_PROTOS] = {BRD_PROTO_LL,
                                                 BRD_PROTO_SIMPLE};

/* What a rank publishes about its window. */
typedef struct {
  brd_seg_handle_t handle;
  uint64_t sem_off;
  uint64_t nsems;       /* inbound semaphores per peer */
  uint64_t p2p_sem_off; /* 2 per peer */
  uint64_t xchg_off;    /* output exchange slots, one per peer (device/ir.h) */
  uint64_t svc_pid;     /* registration service (brd_reg_svc_create); 0: none */
  uint64_t svc_serial;
  uint64_t scratch_off;
  uint64_t scratch_bytes;
  uint64_t p2p_off;
  uint64_t p2p_bytes;
  uint64_t stage_off;
  uint64_t stage_bytes; /* one half */
  uint64_t deterministic;
  uint64_t nb_max;      /* most blocks per rank of any plan */
} rt_window_t;

/* A cached plan and what it was made for. */
typedef struct {
  uint8_t coll, algo, proto, det; /* BRD_IR_COLL_*, BRD_IR_ALGO_*, BRD_IR_PROTO_* */
  uint16_t nblocks, root;
  brd_ir_plan_t *plan;            /* owned */
} rt_plan_t;

struct brd_rt {
  int nranks;
  _Atomic int busy;             /* launches running and nonblocking groups
                                 * not yet done with this comm (a count: a
                                 * group may start before the previous
                                 * one's helper has let go, and an abort
                                 * may come from another thread) */
  _Atomic uint64_t launches;    /* brd_launch_count */
  int ready;                    /* window made and exchanged */
  int cuda;                     /* 1: CUDA backend (launch_cuda.c), which
                                 * owns the windows */
  const brd_transport_ops_t *ops; /* host mode */
  brd_seg_t self;               /* owned (host mode): this rank's window */
  brd_seg_t *peer;              /* owned (host mode): [nranks] imported windows */
  char **base;                  /* owned: [nranks] every window's address
                                 * (device addresses in CUDA mode) */
  int nb_opts[RT_NB_MAX_OPTS];  /* block counts of the plans, ascending */
  int nb_count;
  rt_window_t *win;             /* owned: [nranks] every rank's record */
  rt_plan_t *plans;             /* owned: generated plans */
  int nplans, cap_plans;
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;
  int deterministic;            /* BRAID_DETERMINISTIC, same on every rank */
  uint64_t epoch_cursor;        /* same on every rank */
  uint32_t phase;               /* alternates per collective work */
  uint64_t *p2p_cursor;         /* owned: [nranks] per-pair sequence numbers
                                 * (host mode; CUDA mode keeps them on the
                                 * device) */
  size_t p2p_piece;             /* bytes per point-to-point piece (slot) */
  int reg_shareable;            /* ranks may map each other's registered
                                 * buffers (host mode: always, the exchange
                                 * decides per buffer; CUDA mode: with P2P) */
  struct brd_p2p_svc *svc;      /* owned: registration service, when some
                                 * rank is in another process */
  brd_reg_peer_t *svc_peers;    /* owned: [nranks] every rank's service */
};

/* ---- plans ----------------------------------------------------------------- */

static uint8_t ir_coll(brd_coll_t c) {
  switch (c) {
  case BRD_COLL_ALLGATHER: return BRD_IR_COLL_ALLGATHER;
  case BRD_COLL_REDUCESCATTER: return BRD_IR_COLL_REDUCESCATTER;
  case BRD_COLL_BROADCAST: return BRD_IR_COLL_BROADCAST;
  case BRD_COLL_REDUCE: return BRD_IR_COLL_REDUCE;
  case BRD_COLL_ALLTOALL: return BRD_IR_COLL_ALLTOALL;
  case BRD_COLL_GATHER: return BRD_IR_COLL_GATHER;
  case BRD_COLL_SCATTER: return BRD_IR_COLL_SCATTER;
  case BRD_COLL_SEND: case BRD_COLL_RECV: return BRD_IR_COLL_SENDRECV;
  default: return BRD_IR_COLL_ALLREDUCE;
  }
}

static uint8_t ir_algo(brd_algo_t a) {
  switch (a) {
  case BRD_ALGO_RING: return BRD_IR_ALGO_RING;
  case BRD_ALGO_TREE: return BRD_IR_ALGO_TREE;
  case BRD_ALGO_ONESHOT: return BRD_IR_ALGO_ONESHOT;
  default: return BRD_IR_ALGO_TWOSHOT;
  }
}

static uint8_t ir_proto(brd_proto_t p) {
  return p == BRD_PROTO_LL ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE;
}

static int is_reduction(uint8_t coll) {
  return coll == BRD_IR_COLL_ALLREDUCE || coll == BRD_IR_COLL_REDUCESCATTER ||
         coll == BRD_IR_COLL_REDUCE;
}

static int is_rooted(uint8_t coll) {
  return coll == BRD_IR_COLL_BROADCAST || coll == BRD_IR_COLL_REDUCE ||
         coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER;
}

/* Verifies a freshly generated plan when BRAID_VERIFY_PLANS asks (always
 * in debug builds), in and out of place. */
static ncclResult_t plan_check(const brd_ir_plan_t *plan) {
#ifndef BRAID_DEBUG
  if (brd_param_int(BRD_P_BRAID_VERIFY_PLANS) == 0) return ncclSuccess;
#endif
  for (int ip = 0; ip < 2; ip++) {
    brd_verify_opts_t opts = {ip, 2};
    CHECK(brd_plan_verify(plan, &opts, NULL));
  }
  return ncclSuccess;
}

/* The cached plan for these parameters, generated on first use. */
static ncclResult_t plan_get(struct brd_rt *rt, uint8_t coll, uint8_t algo,
                             uint8_t proto, int nblocks, int root, int det,
                             const brd_ir_plan_t **plan_out) {
  if (!is_rooted(coll)) root = 0;
  if (!is_reduction(coll)) det = 0;
  for (int i = 0; i < rt->nplans; i++) {
    const rt_plan_t *e = &rt->plans[i];
    if (e->coll == coll && e->algo == algo && e->proto == proto &&
        e->det == det && e->nblocks == nblocks && e->root == root) {
      *plan_out = e->plan;
      return ncclSuccess;
    }
  }
  if (rt->nplans == rt->cap_plans) {
    int cap = rt->cap_plans ? 2 * rt->cap_plans : 64;
    rt_plan_t *p = realloc(rt->plans, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("out of host memory growing the plan cache to %d plans", cap);
      return ncclSystemError;
    }
    rt->plans = p;
    rt->cap_plans = cap;
  }
  brd_algos_args_t args = {rt->nranks, NULL, nblocks, proto};
  brd_ir_plan_t *plan;
  if (algo & RT_ALGO_PEER) {
    switch (coll) {
    case BRD_IR_COLL_ALLREDUCE: CHECK(brd_algos_zerocopy_allreduce(&args, &plan)); break;
    case BRD_IR_COLL_REDUCESCATTER:
      CHECK(brd_algos_zerocopy_reducescatter(&args, &plan));
      break;
    case BRD_IR_COLL_ALLGATHER: CHECK(brd_algos_zerocopy_allgather(&args, &plan)); break;
    default:
      WARN("no zero-copy plan for collective %d", coll);
      return ncclInternalError;
    }
  } else {
    CHECK(brd_algos_generate(coll, algo, &args, root, det, &plan));
  }
  ncclResult_t res = plan_check(plan);
  if (res != ncclSuccess) {
    brd_plan_destroy(plan);
    return res;
  }
  rt_plan_t *e = &rt->plans[rt->nplans++];
  e->coll = coll;
  e->algo = algo;
  e->proto = proto;
  e->det = (uint8_t)det;
  e->nblocks = (uint16_t)nblocks;
  e->root = (uint16_t)root;
  e->plan = plan;
  *plan_out = plan;
  return ncclSuccess;
}

/* ---- the runtime -------------------------------------------------------------- */

static void rt_disconnect(struct brd_rt *rt) {
  if (rt->peer != NULL && rt->ops != NULL)
    for (int r = 0; r < rt->nranks; r++) rt->ops->seg_close(&rt->peer[r]);
  if (rt->ops != NULL) rt->ops->seg_close(&rt->self);
  free(rt->base);
  rt->base = NULL;
  free(rt->peer);
  free(rt->win);
  free(rt->p2p_cursor);
  /* Before the registrations go: the service maps into them. */
  brd_p2p_svc_destroy(rt->svc);
  rt->svc = NULL;
  free(rt->svc_peers);
  rt->svc_peers = NULL;
  rt->peer = NULL;
  rt->win = NULL;
  rt->p2p_cursor = NULL;
  rt->ops = NULL;
  rt->ready = 0;
}

/* See launch.h. */
void brd_rt_destroy(struct brd_rt *rt) {
  if (rt == NULL) return;
  /* A launch (on another thread, or a nonblocking group's helper) may
   * still be finishing: its waits see the abort flag the caller raised,
   * or it was about to report. */
  double limit = (double)brd_param_int(BRD_P_BRAID_TIMEOUT) + 10.0;
  struct timespec nap = {0, 1000000L};
  for (double waited = 0; atomic_load(&rt->busy); waited += 1e-3) {
    if (waited > limit) {
      WARN("a launch still runs on a communicator being freed after %.0f s; "
           "its runtime is left allocated", limit);
      return;
    }
    nanosleep(&nap, NULL);
  }
  for (int i = 0; i < rt->nplans; i++) brd_plan_destroy(rt->plans[i].plan);
  free(rt->plans);
  rt_disconnect(rt);
  free(rt);
}

/* The runtime shell (no window yet). Local. */
static ncclResult_t rt_get(struct ncclComm *comm, struct brd_rt **rt_out) {
  if (comm->rt == NULL) {
    struct brd_rt *rt = calloc(1, sizeof(*rt));
    if (rt == NULL) {
      WARN("out of host memory creating the collective runtime of rank %d",
           comm->rank);
      return ncclSystemError;
    }
    rt->nranks = comm->nranks;
    atomic_init(&rt->busy, 0);
    atomic_init(&rt->launches, 0);
    comm->rt = rt;
  }
  *rt_out = comm->rt;
  return ncclSuccess;
}

/* p2p: CUDA mode with GPU peer-to-peer (else through host memory). */
static void topo_init(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t) {
  memset(t, 0, sizeof(*t));
  t->nranks = comm->nranks;
  t->nnodes = comm->n_nodes > 0 ? comm->n_nodes : 1;
  t->local_nranks = comm->local_nranks > 0 ? comm->local_nranks : 1;
  t->host_mode = comm->host_mode;
  t->ll128_ok = 0; /* no LL128 generator */
  if (comm->host_mode) {
    /* Host mode moves data through memory: a few GB/s per rank pair, a
     * microsecond or so per synchronisation. */
    t->ranks_per_device = 1;
    t->intra_bw = 4.0f;
    t->intra_lat = 2.0f;
  } else {
    /* Rough link figures: GPU peer access (NVLink or PCIe) against host
     * memory across PCIe. Every rank sees the same numbers, which is all
     * the tuner needs to agree across ranks. */
    t->ranks_per_device = brd_comm_ranks_per_device(comm);
    t->intra_bw = p2p ? 100.0f : 8.0f;
    t->intra_lat = p2p ? 1.0f : 3.0f;
  }
  t->inter_bw = t->intra_bw;
  t->inter_lat = t->intra_lat;
}

/* Generates the plans every call may need (root 0; other roots have the
 * same sizes) and returns the scratch and semaphores they take. */
static ncclResult_t plans_size(struct brd_rt *rt, size_t *scratch_out,
                               size_t *nsems_out) {
  size_t scratch = 0, nsems = 1;
  for (uint8_t coll = 0; coll < BRD_IR_COLL_SENDRECV; coll++) {
    for (int a = 0; a < RT_ALGOS; a++) {
      for (int det = 0; det <= is_reduction(coll); det++) {
        uint8_t algo = ir_algo(rt_algos[a]);
        if (!brd_algos_available(coll, algo, det)) continue;
        for (int p = 0; p < RT_PROTOS; p++) {
          for (int bi = 0; bi < rt->nb_count; bi++) {
            const brd_ir_plan_t *plan;
            CHECK(plan_get(rt, coll, algo, ir_proto(rt_protos[p]), rt->nb_opts[bi], 0,
                           det, &plan));
            size_t s = brd_plan_scratch_bytes(plan);
            if (s > scratch) scratch = s;
            if (plan->nsems > nsems) nsems = plan->nsems;
          }
        }
      }
    }
  }
  *scratch_out = scratch;
  *nsems_out = nsems;
  return ncclSuccess;
}

/* Point-to-point scratch per rank and the bytes of one piece. */
static ncclResult_t p2p_size(int nranks, int rank, size_t *bytes_out,
                             size_t *piece_out) {
  brd_algos_p2p_rank_t *ranks = calloc((size_t)nranks, sizeof(*ranks));
  brd_ir_plan_t *plan = NULL;
  brd_plan_layout_t l;
  ncclResult_t res = ncclSuccess;
  if (ranks == NULL) {
    WARN("out of host memory sizing point-to-point buffers for %d ranks", nranks);
    return ncclSystemError;
  }
  brd_algos_p2p_args_t args = {nranks, rank, ranks};
  CHECK_GOTO(brd_algos_p2p(&args, &plan), res, fail_free_ranks);
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

/* Step 1 of the connection: what every rank can do, agreed on by all.
 * Host mode: plans of 1 and 2 blocks, BRAID_HOST_STAGING. CUDA mode: the
 * backend's report (P2P, blocks that fit the GPU, BRAID_CUDA_STAGING). */
static ncclResult_t caps_agree(struct ncclComm *comm, struct brd_rt *rt,
                               brd_launch_caps_t *caps_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank, blocker = -1;
  char why[512] = "";
  brd_launch_caps_t *all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) {
    WARN("out of host memory for the capabilities of %d ranks", n);
    return ncclSystemError;
  }
  if (rt->cuda) {
    CHECK_GOTO(brd_launch_cuda_caps(comm, &all[me], why, sizeof(why)), res, out);
  } else {
    int64_t stage = brd_param_int(BRD_P_BRAID_HOST_STAGING);
    if (stage < 4096) stage = 4096;
    all[me].p2p_ok = 0;
    all[me].nb_max = 2;
    all[me].stage_bytes = ((uint64_t)stage + 4095) & ~(uint64_t)4095;
  }
  if (n > 1) CHECK_GOTO(brd_boot_allgather(comm->boot, all, sizeof(*all)), res, out);
  brd_launch_caps_t c = all[me];
  for (int r = 0; r < n; r++) {
    if (!all[r].p2p_ok && c.p2p_ok) {
      c.p2p_ok = 0;
      blocker = r;
    }
    if (all[r].nb_max < c.nb_max) c.nb_max = all[r].nb_max;
    if (all[r].stage_bytes < c.stage_bytes) c.stage_bytes = all[r].stage_bytes;
  }
  if (rt->cuda && !c.p2p_ok) {
    if (blocker == me)
      WARN("rank %d: GPU peer-to-peer is not usable with %s; every rank of the "
           "communicator exchanges data through host memory instead, which is "
           "much slower", me, why);
    else
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_P2P, "rank %d: rank %d cannot use GPU "
           "peer-to-peer with every peer; channels go through host memory", me,
           blocker);
  }
  *caps_out = c;
out:
  free(all);
  return res;
}

/* Makes this rank's window, exchanges the records and maps the peers'.
 * Collective over the communicator. On failure the runtime is left
 * without a window (ready 0). */
static ncclResult_t rt_connect(struct ncclComm *comm, struct brd_rt *rt) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  size_t scratch, nsems, p2p_bytes;
  brd_launch_caps_t caps;
  rt->cuda = !comm->host_mode;
  CHECK(brd_tune_parse(brd_param_str(BRD_P_ALGO), brd_param_str(BRD_P_PROTO),
                       &rt->mask));
  rt->deterministic = brd_param_int(BRD_P_BRAID_DETERMINISTIC) != 0;
  CHECK(caps_agree(comm, rt, &caps));
  topo_init(comm, caps.p2p_ok, &rt->topo);
  rt->reg_shareable = rt->cuda ? caps.p2p_ok : 1;
  rt->nb_count = 0;
  for (int b = 1; b <= caps.nb_max && rt->nb_count < RT_NB_MAX_OPTS; b *= 2)
    rt->nb_opts[rt->nb_count++] = b;
  CHECK(plans_size(rt, &scratch, &nsems));
  CHECK(p2p_size(n, me, &p2p_bytes, &rt->p2p_piece));

  rt->peer = calloc((size_t)n, sizeof(*rt->peer));
  rt->win = calloc((size_t)n, sizeof(*rt->win));
  rt->base = calloc((size_t)n, sizeof(*rt->base));
  rt->p2p_cursor = calloc((size_t)n, sizeof(*rt->p2p_cursor));
  rt->svc_peers = calloc((size_t)n, sizeof(*rt->svc_peers));
  if (rt->peer == NULL || rt->win == NULL || rt->base == NULL || rt->p2p_cursor == NULL ||
      rt->svc_peers == NULL) {
    WARN("out of host memory for the channel tables of rank %d (%d ranks)", me, n);
    res = ncclSystemError;
    goto fail;
  }

  rt_window_t *mw = &rt->win[me];
  mw->nsems = nsems;
  mw->sem_off = 0;
  mw->p2p_sem_off = (uint64_t)n * nsems * sizeof(uint64_t);
  mw->xchg_off = mw->p2p_sem_off + (uint64_t)n * 2 * sizeof(uint64_t);
  mw->scratch_off = (mw->xchg_off + (uint64_t)n * BRD_IR_XCHG_WORDS * sizeof(uint64_t) +
                     4095) & ~(uint64_t)4095;
  mw->scratch_bytes = (scratch + 4095) & ~(size_t)4095;
  mw->p2p_off = mw->scratch_off + mw->scratch_bytes;
  mw->p2p_bytes = (p2p_bytes + 4095) & ~(size_t)4095;
  mw->stage_off = mw->p2p_off + mw->p2p_bytes;
  mw->stage_bytes = caps.stage_bytes;
  mw->deterministic = (uint64_t)rt->deterministic;
  mw->nb_max = (uint64_t)caps.nb_max;
  size_t total = mw->stage_off + 2 * mw->stage_bytes;

  if (rt->cuda) {
    CHECK_GOTO(brd_launch_cuda_create(comm, caps.p2p_ok, total, &mw->handle, &rt->base[me]),
               res, fail);
  } else {
    rt->ops = brd_comm_all_in_process(comm) ? &brd_transport_host : &brd_transport_shm;
    CHECK_GOTO(rt->ops->seg_create(total, "win", &rt->self), res, fail);
    mw->handle = rt->self.handle;
    rt->base[me] = rt->self.ptr;
  }
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_SHM,
       "rank %d: %s window of %zu bytes (scratch %zu, point-to-point %zu, "
       "staging 2x%zu, %zu semaphores per peer, up to %d blocks per rank)", me,
       rt->cuda ? (caps.p2p_ok ? "CUDA P2P" : "CUDA host-memory") : rt->ops->name,
       total, (size_t)mw->scratch_bytes, (size_t)mw->p2p_bytes,
       (size_t)mw->stage_bytes, nsems, caps.nb_max);

  if (n > 1 && !brd_comm_all_in_process(comm)) {
    /* Ranks in other processes map this rank's registered buffers on its
     * request (brd_reg_share), whichever thread of theirs is busy. */
    CHECK_GOTO(brd_reg_svc_create(comm, &rt->svc), res, fail);
    mw->svc_pid = (uint64_t)getpid();
    mw->svc_serial = brd_p2p_svc_serial(rt->svc);
  }
  if (n > 1) {
    CHECK_GOTO(brd_boot_allgather(comm->boot, rt->win, sizeof(rt_window_t)), res, fail);
    for (int r = 0; r < n; r++) {
      rt->svc_peers[r].pid = (uint32_t)rt->win[r].svc_pid;
      rt->svc_peers[r].serial = (uint32_t)rt->win[r].svc_serial;
    }
    for (int r = 0; r < n; r++) {
      if (r == me) continue;
      const rt_window_t *w = &rt->win[r];
      if (w->nsems != mw->nsems || w->stage_bytes != mw->stage_bytes ||
          w->scratch_bytes != mw->scratch_bytes || w->p2p_bytes != mw->p2p_bytes ||
          w->deterministic != mw->deterministic || w->nb_max != mw->nb_max) {
        WARN("rank %d and rank %d disagree on channel sizes (semaphores %zu "
             "vs %zu, scratch %zu vs %zu, staging %zu vs %zu, deterministic "
             "%d vs %d); give every rank the same NCCL_BUFFSIZE, "
             "NCCL_LL_BUFFSIZE, BRAID_HOST_STAGING, BRAID_CUDA_STAGING and "
             "BRAID_DETERMINISTIC", me, r, (size_t)mw->nsems, (size_t)w->nsems,
             (size_t)mw->scratch_bytes, (size_t)w->scratch_bytes,
             (size_t)mw->stage_bytes, (size_t)w->stage_bytes,
             (int)mw->deterministic, (int)w->deterministic);
        res = ncclInvalidUsage;
        goto fail;
      }
      if (rt->cuda) {
        CHECK_GOTO(brd_launch_cuda_import(comm, r, &w->handle, &rt->base[r]), res, fail);
      } else {
        CHECK_GOTO(rt->ops->seg_import(&w->handle, &rt->peer[r]), res, fail);
        rt->base[r] = rt->peer[r].ptr;
      }
    }
    /* Every rank has mapped every window: names may go. */
    CHECK_GOTO(brd_boot_barrier(comm->boot), res, fail);
  }
  if (rt->cuda)
    brd_launch_cuda_seal(comm);
  else
    rt->ops->seg_seal(&rt->self);
  rt->ready = 1;
  return ncclSuccess;

fail:
  rt_disconnect(rt);
  if (rt->cuda && comm->rt_cuda != NULL) {
    brd_launch_cuda_destroy(comm->rt_cuda);
    __atomic_store_n(&comm->rt_cuda, NULL, __ATOMIC_RELEASE);
  }
  return res;
}

/* See launch.h. */
const brd_redop_slot_t *brd_redop_find(const struct ncclComm *comm,
                                       ncclRedOp_t op) {
  if (op < ncclNumOps || comm->redops == NULL) return NULL;
  int i = (int)op - (int)ncclNumOps;
  if (i >= BRD_REDOPS_MAX || !comm->redops->slot[i].used) return NULL;
  return &comm->redops->slot[i];
}

/* ---- works ---------------------------------------------------------------------- */

/* One executor launch of one plan over one piece (or round), and what to
 * copy out of the staging once this rank's part of it is done. */
typedef struct work {
  brd_exec_args_t args;
  brd_exec_chan_t *chans;     /* owned: [the plan's channels of this rank] */
  uint64_t *chan_epoch;       /* owned: point-to-point only */
  brd_exec_seg_t *segs;       /* owned: point-to-point only, sends then receives */
  brd_ir_plan_t *plan_owned;  /* owned: point-to-point only */
  const brd_call_t *call;     /* borrowed: the call to copy out, or NULL */
  int direct;                 /* the output is the user's registered buffer:
                               * nothing to copy out */
  const void *scalar_dev;     /* CUDA mode: a PreMulSum scalar in device
                               * memory (ncclScalarDevice), else NULL */
  int p2p;                    /* a point-to-point work */
  size_t off, n;              /* elements of each output segment */
  int nout;                   /* output segments to copy out */
} work_t;

typedef struct works {
  work_t *w;                  /* owned */
  int n, cap;
  char **snaps;               /* owned: snapshots of overlapping send buffers */
  int nsnaps;
  struct ncclComm *comm;      /* borrowed */
  brd_launch_cuda_ctx_t *cuda; /* borrowed: CUDA mode's launch, else NULL */
} works_t;

static void works_free(works_t *ws) {
  for (int i = 0; i < ws->n; i++) {
    free(ws->w[i].chans);
    free(ws->w[i].chan_epoch);
    free(ws->w[i].segs);
    brd_plan_destroy(ws->w[i].plan_owned);
  }
  for (int i = 0; i < ws->nsnaps; i++) free(ws->snaps[i]);
  free(ws->snaps);
  free(ws->w);
  memset(ws, 0, sizeof(*ws));
}

/* Appends a zeroed work with a channel array for `plan` on `rank`. */
static ncclResult_t work_add(works_t *ws, const brd_ir_plan_t *plan, int rank,
                             work_t **w_out) {
  if (ws->n == ws->cap) {
    int cap = ws->cap ? 2 * ws->cap : 16;
    work_t *p = realloc(ws->w, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("out of host memory growing a launch to %d works", cap);
      return ncclSystemError;
    }
    ws->w = p;
    ws->cap = cap;
  }
  work_t *w = &ws->w[ws->n];
  memset(w, 0, sizeof(*w));
  uint32_t nch = brd_ir_plan_rank(plan, rank)->nchans;
  w->chans = calloc(nch ? nch : 1, sizeof(*w->chans));
  if (w->chans == NULL) {
    WARN("out of host memory for the %u channels of a work", nch);
    return ncclSystemError;
  }
  ws->n++;
  *w_out = w;
  return ncclSuccess;
}

static int is_multi_out(uint8_t coll) {
  return coll == BRD_IR_COLL_ALLGATHER || coll == BRD_IR_COLL_ALLTOALL ||
         coll == BRD_IR_COLL_GATHER;
}

/* The algorithm and protocol for a call (tuner, overrides, determinism). */
static ncclResult_t choose(struct brd_rt *rt, const brd_call_t *c, uint8_t coll,
                           brd_tune_choice_t *choice_out) {
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  int det = rt->deterministic && is_reduction(coll);
  uint32_t avail = 0;
  if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_BROADCAST &&
      coll != BRD_IR_COLL_REDUCE)
    bytes *= (size_t)rt->nranks; /* NCCL tunes these on the larger buffer */
  for (int a = 0; a < RT_ALGOS; a++)
    if (brd_algos_available(coll, ir_algo(rt_algos[a]), det))
      avail |= BRD_ALGO_BIT(rt_algos[a]);
  if (det && rt->nranks > 1 && (rt->mask.algos[c->coll] & avail) == 0) {
    WARN("%s : BRAID_DETERMINISTIC=1 allows only %s for this reduction, and "
         "NCCL_ALGO (%s) excludes %s; allow it or unset BRAID_DETERMINISTIC",
         c->fn, coll == BRD_IR_COLL_ALLREDUCE ? "OneShot and TwoShot" : "OneShot",
         rt->mask.algo_env, coll == BRD_IR_COLL_ALLREDUCE ? "both" : "it");
    return ncclInvalidUsage;
  }
  CHECK(brd_tune_select(&rt->topo, c->coll, bytes, avail, &rt->mask, choice_out));
  if (choice_out->proto == BRD_PROTO_LL128) {
    WARN("%s : protocol LL128 is not available in host mode; choose LL or "
         "Simple (NCCL_PROTO)", c->fn);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* Fills the channels of a collective work: peers' scratch, staging half of
 * `phase` (or, with peer_out, their registered output buffers) and
 * semaphores, from the window records. */
static void coll_chans(const struct ncclComm *comm, const struct brd_rt *rt,
                       const brd_ir_plan_t *plan, uint32_t phase, char **peer_out,
                       work_t *w) {
  int me = comm->rank;
  const rt_window_t *mw = &rt->win[me];
  const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    char *pw = rt->base[p];
    const rt_window_t *pwr = &rt->win[p];
    w->chans[ch].peer_scratch = pw + pwr->scratch_off;
    w->chans[ch].peer_output = peer_out != NULL ? peer_out[p]
                               : pw + pwr->stage_off + phase * pwr->stage_bytes;
    w->chans[ch].peer_sems =
        (_Atomic uint64_t *)(pw + pwr->sem_off) + (size_t)me * pwr->nsems;
    w->chans[ch].sems = (_Atomic uint64_t *)(rt->base[me] + mw->sem_off) +
                        (size_t)p * mw->nsems;
  }
}

/* Every rank's copy of registered buffer [buf, buf + bytes) as mapped here
 * (brd_reg_direct), in *peer_out (owned by the caller), or NULL when it is
 * not usable in place. */
static ncclResult_t reg_peers(struct ncclComm *comm, const struct brd_rt *rt,
                              const brd_call_t *c, const void *buf, size_t bytes,
                              char ***peer_out) {
  int ok = 0;
  *peer_out = NULL;
  char **peer = calloc((size_t)comm->nranks, sizeof(*peer));
  if (peer == NULL) {
    WARN("%s : out of host memory", c->fn);
    return ncclSystemError;
  }
  ncclResult_t res = brd_reg_direct(comm, buf, bytes, rt->reg_shareable, c->fn, peer, &ok);
  if (res != ncclSuccess || !ok) {
    free(peer);
    return res;
  }
  *peer_out = peer;
  return ncclSuccess;
}

/* Whether call c writes its registered output buffer in place on every
 * rank: *peer_out_out gets every rank's buffer as mapped here (owned by
 * the caller), or stays NULL for the staged path. Only collectives where
 * every rank has an output qualify (the works must be the same on every
 * rank, and a rank without an output cannot tell what the others do). */
static ncclResult_t direct_output(struct ncclComm *comm, const struct brd_rt *rt,
                                  const brd_call_t *c, uint8_t coll, char ***peer_out_out) {
  int n = comm->nranks;
  *peer_out_out = NULL;
  if (n == 1 || comm->regs == NULL || coll == BRD_IR_COLL_REDUCE ||
      coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER)
    return ncclSuccess;
  size_t seg = c->count * brd_dtype_size(c->dtype);
  size_t bytes = seg * (is_multi_out(coll) ? (size_t)n : 1);
  /* An in-place reduce-scatter's output is segment `rank` of its input:
   * every rank's output lies at its own offset, so find the inputs (all at
   * one offset) and step to each rank's segment. Mixing in-place and
   * out-of-place ranks breaks the symmetric rule. */
  int rs_in_place = coll == BRD_IR_COLL_REDUCESCATTER &&
                    (const char *)c->recvbuff == (const char *)c->sendbuff + comm->rank * seg;
  char **peer;
  CHECK(rs_in_place ? reg_peers(comm, rt, c, c->sendbuff, seg * (size_t)n, &peer)
                    : reg_peers(comm, rt, c, c->recvbuff, bytes, &peer));
  if (peer == NULL) return ncclSuccess;
  if (rs_in_place)
    for (int q = 0; q < n; q++) peer[q] += (size_t)q * seg;
  INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p written in place "
       "(registered on every rank)", c->fn, comm->rank, c->recvbuff);
  *peer_out_out = peer;
  return ncclSuccess;
}

/* Whether call c, whose output is written in place, also reads every
 * rank's registered input in place (a zero-copy plan: two-shot all-reduce,
 * direct reduce-scatter and all-gather): *peer_in_out gets every rank's
 * send buffer as mapped here (owned by the caller) and *algo_out the plan
 * cache's code for that plan, or *peer_in_out stays NULL. From
 * RT_PEER_MIN_BYTES moved per rank (below, the LL plans' single round of
 * packets wins), when NCCL_ALGO and NCCL_PROTO allow the family (two-shot
 * for all-reduce, one-shot for the others) with Simple, and for
 * reductions not with PreMulSum (each rank scales only its own input) or
 * in deterministic mode (the plans add in owner order). The same answer
 * on every rank. */
static ncclResult_t peer_input(struct ncclComm *comm, const struct brd_rt *rt,
                               const brd_call_t *c, uint8_t coll, char *const *peer_out,
                               char ***peer_in_out, uint8_t *algo_out) {
  int n = comm->nranks;
  size_t esize = brd_dtype_size(c->dtype);
  /* What every rank reads of each input, and the NCCL_ALGO family the plan
   * stands for. */
  size_t bytes = c->count * esize, moved = bytes;
  brd_algo_t family = BRD_ALGO_ONESHOT;
  *peer_in_out = NULL;
  switch (coll) {
  case BRD_IR_COLL_ALLREDUCE: family = BRD_ALGO_TWOSHOT; break;
  case BRD_IR_COLL_REDUCESCATTER: bytes *= (size_t)n; moved = bytes; break;
  case BRD_IR_COLL_ALLGATHER: moved = bytes * (size_t)n; break;
  default: return ncclSuccess;
  }
  if ((is_reduction(coll) && (c->premul || rt->deterministic)) ||
      moved < RT_PEER_MIN_BYTES ||
      !(rt->mask.algos[c->coll] & BRD_ALGO_BIT(family)) ||
      !(rt->mask.protos[c->coll] & BRD_PROTO_BIT(BRD_PROTO_SIMPLE)))
    return ncclSuccess;
  /* An in-place all-gather's input is segment `rank` of its output, at its
   * own offset: step from each rank's output (all at one offset). */
  int ag_in_place = coll == BRD_IR_COLL_ALLGATHER &&
                    (const char *)c->sendbuff ==
                        (const char *)c->recvbuff + (size_t)comm->rank * bytes;
  char **peer;
  if (ag_in_place) {
    peer = calloc((size_t)n, sizeof(*peer));
    if (peer == NULL) {
      WARN("%s : out of host memory", c->fn);
      return ncclSystemError;
    }
    for (int q = 0; q < n; q++) peer[q] = peer_out[q] + (size_t)q * bytes;
  } else {
    CHECK(reg_peers(comm, rt, c, c->sendbuff, bytes, &peer));
    if (peer == NULL) return ncclSuccess;
  }
  INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: input %p read in place by "
       "every rank (zero-copy plan)", c->fn, comm->rank, c->sendbuff);
  *peer_in_out = peer;
  *algo_out = (uint8_t)(ir_algo(family) | RT_ALGO_PEER);
  return ncclSuccess;
}

/* Whether call c, whose output is not written in place through the
 * symmetric path, exchanges outputs at run time (device/ir.h): when its
 * output buffer is registered with ncclCommRegister (NCCL's rule: then
 * every rank's is), *xchg_out is 1 and, when every rank maps this rank's
 * buffer, *remote_out (owned by the caller) gets it as each rank
 * addresses it: this rank's output is then written in place while the
 * others may still be staged, each rank deciding for its own. Only where
 * every rank has an output, and over few enough channels on every rank
 * (the same answer everywhere). */
static ncclResult_t exchange_output(struct ncclComm *comm, const struct brd_rt *rt,
                                    const brd_call_t *c, uint8_t coll,
                                    const brd_ir_plan_t *plan, uint64_t **remote_out,
                                    int *xchg_out) {
  int n = comm->nranks;
  *remote_out = NULL;
  *xchg_out = 0;
  if (n == 1 || comm->regs == NULL || coll == BRD_IR_COLL_REDUCE ||
      coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER)
    return ncclSuccess;
  for (int r = 0; r < n; r++)
    if (brd_ir_plan_rank(plan, r)->nchans > BRD_IR_XCHG_MAX_CHANS) return ncclSuccess;
  size_t bytes = c->count * brd_dtype_size(c->dtype) * (is_multi_out(coll) ? (size_t)n : 1);
  uint64_t *remote = calloc((size_t)n, sizeof(*remote));
  if (remote == NULL) {
    WARN("%s : out of host memory", c->fn);
    return ncclSystemError;
  }
  int state;
  ncclResult_t res = brd_reg_share(comm, c->recvbuff, bytes, rt->svc_peers,
                                   rt->reg_shareable, c->fn, remote, &state);
  if (res != ncclSuccess || state == BRD_REG_NONE) {
    free(remote);
    return res;
  }
  *xchg_out = 1;
  if (state == BRD_REG_SHARED) {
    *remote_out = remote;
    INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p written in place "
         "(registered; exchanged per call)", c->fn, comm->rank, c->recvbuff);
  } else {
    free(remote);
    INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p staged (registered, "
         "but not every rank can map it; exchanged per call)", c->fn, comm->rank,
         c->recvbuff);
  }
  return ncclSuccess;
}

/* The works of one collective call: one per piece. */
static ncclResult_t add_collective(struct ncclComm *comm, struct brd_rt *rt,
                                   const brd_call_t *c, works_t *ws) {
  int me = comm->rank, n = comm->nranks;
  uint8_t coll = ir_coll(c->coll);
  size_t esize = brd_dtype_size(c->dtype);
  int root = is_rooted(coll) ? c->root : 0;
  brd_tune_choice_t choice;
  CHECK(choose(rt, c, coll, &choice));
  size_t bytes = c->count * esize;
  /* Blocks grow with the message; the same sizes give the same choice on
   * every rank, as the plans must be the same everywhere. GPU blocks are
   * cheap to add, host threads are not. */
  int want = !rt->cuda ? (bytes >= ((size_t)256 << 10) ? 2 : 1)
           : bytes < ((size_t)64 << 10) ? 1 : bytes < ((size_t)1 << 20) ? 2
           : bytes < ((size_t)16 << 20) ? 4 : 8;
  int nb = rt->nb_opts[0];
  for (int i = 0; i < rt->nb_count; i++)
    if (rt->nb_opts[i] <= want) nb = rt->nb_opts[i];
  const brd_ir_plan_t *plan;
  CHECK(plan_get(rt, coll, ir_algo(choice.algo), ir_proto(choice.proto), nb, root,
                 rt->deterministic, &plan));
  if (brd_plan_scratch_bytes(plan) > rt->win[me].scratch_bytes) {
    WARN("%s : plan needs %zu scratch bytes, the window has %zu", c->fn,
         brd_plan_scratch_bytes(plan), (size_t)rt->win[me].scratch_bytes);
    return ncclInternalError;
  }

  int redop = is_reduction(coll) ? (int)c->op : ncclSum;
  const void *scalar = NULL, *scalar_dev = NULL;
  if (is_reduction(coll) && c->premul) {
    redop = BRD_REDOP_PREMULSUM;
    /* Host-immediate scalars travel inside the call (premul_scalar NULL);
     * a device-resident one is read where it is (host memory in host
     * mode, by the kernel in CUDA mode). */
    if (c->premul_scalar == NULL)
      scalar = c->premul_value;
    else if (rt->cuda)
      scalar_dev = c->premul_scalar;
    else
      scalar = c->premul_scalar;
  }
  int uses_input = !((coll == BRD_IR_COLL_BROADCAST || coll == BRD_IR_COLL_SCATTER) &&
                     me != root);
  int multi_in = coll == BRD_IR_COLL_REDUCESCATTER || coll == BRD_IR_COLL_ALLTOALL ||
                 coll == BRD_IR_COLL_SCATTER;
  int nout = is_multi_out(coll) ? n : 1;
  if ((coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_REDUCE) && me != root) nout = 0;
  const rt_window_t *mw = &rt->win[me];
  size_t piece = mw->stage_bytes / ((is_multi_out(coll) ? (size_t)n : 1) * esize);
  /* Registered output buffers on every rank: one piece written in place. */
  char **peer_out = NULL, **peer_in = NULL;
  ncclResult_t res = direct_output(comm, rt, c, coll, &peer_out);
  if (res != ncclSuccess) return res;
  if (peer_out != NULL) piece = c->count;
  /* Registered without the symmetric promise: outputs exchanged per call,
   * pieces as for the staging (a peer may be staged). */
  uint64_t *remote = NULL;
  int xchg = 0;
  if (peer_out == NULL)
    CHECK_GOTO(exchange_output(comm, rt, c, coll, plan, &remote, &xchg), res, out);
  /* Registered inputs too: a zero-copy plan reads them in place. */
  if (peer_out != NULL) {
    uint8_t zc_algo = 0;
    CHECK_GOTO(peer_input(comm, rt, c, coll, peer_out, &peer_in, &zc_algo), res, out);
    if (peer_in != NULL)
      CHECK_GOTO(plan_get(rt, coll, zc_algo, BRD_IR_PROTO_SIMPLE, nb, 0, 0, &plan), res,
                 out);
  }

  for (size_t off = 0; off < c->count; off += piece) {
    size_t cnt = c->count - off < piece ? c->count - off : piece;
    brd_plan_layout_t layout;
    work_t *w;
    CHECK_GOTO(brd_plan_layout_init(plan, cnt, c->dtype, mw->scratch_bytes, &layout),
               res, out);
    CHECK_GOTO(work_add(ws, plan, me, &w), res, out);
    /* CUDA mode: the kernels alternate phases on the device; the pointers
     * are the bases of both halves. */
    uint32_t phase = rt->cuda ? 0 : rt->phase;
    rt->phase ^= 1u;
    coll_chans(comm, rt, plan, phase, peer_out, w);
    if (xchg) {
      const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
      for (uint32_t ch = 0; ch < pr->nchans; ch++) {
        int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
        w->chans[ch].xchg_pub = (_Atomic uint64_t *)(rt->base[p] + rt->win[p].xchg_off) +
                                (size_t)me * BRD_IR_XCHG_WORDS;
        w->chans[ch].xchg_slot = (_Atomic uint64_t *)(rt->base[me] + mw->xchg_off) +
                                 (size_t)p * BRD_IR_XCHG_WORDS;
        w->chans[ch].xchg_output =
            remote != NULL ? (char *)(uintptr_t)remote[p] + off * esize : NULL;
      }
      w->args.xchg = 1;
    }
    if (peer_in != NULL) {
      const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
      for (uint32_t ch = 0; ch < pr->nchans; ch++)
        w->chans[ch].peer_input = peer_in[brd_ir_plan_chan(plan, me, (int)ch)->peer];
    }
    brd_exec_args_t *a = &w->args;
    a->plan = plan;
    a->rank = me;
    a->input = uses_input ? (const char *)c->sendbuff + off * esize : NULL;
    a->in_stride = multi_in ? c->count : 0;
    if (peer_out != NULL) {
      a->output = peer_out[me];
      a->out_stride = is_multi_out(coll) ? c->count : 0;
      w->direct = 1;
    } else if (remote != NULL) {
      a->output = (char *)c->recvbuff + off * esize;
      a->out_stride = is_multi_out(coll) ? c->count : 0;
      w->direct = 1;
    } else {
      a->output = rt->base[me] + mw->stage_off + phase * mw->stage_bytes;
    }
    a->scratch = rt->base[me] + mw->scratch_off;
    a->scratch_bytes = mw->scratch_bytes;
    a->chans = w->chans;
    a->count = cnt;
    a->dtype = c->dtype;
    a->redop = redop;
    a->scalar = scalar;
    a->epoch = brd_plan_epoch_reserve(&rt->epoch_cursor,
                                      brd_plan_epoch_span(plan, &layout));
    a->phase = phase;
    a->abort_flag = &comm->abort_flag;
    w->call = c;
    w->scalar_dev = scalar_dev;
    w->off = off;
    w->n = cnt;
    w->nout = nout;
  }
out:
  free(remote);
  free(peer_out);
  free(peer_in);
  return res;
}

/* One send or receive of the launch. */
typedef struct p2p_xfer {
  int peer;
  char *buf;      /* borrowed (or a snapshot in the works): the user buffer */
  size_t bytes;
  size_t pieces;
} p2p_xfer_t;

typedef struct p2p_span {
  uintptr_t lo, hi;
} p2p_span_t;

static int span_cmp(const void *a, const void *b) {
  const p2p_span_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Does [lo, hi) overlap any of the n sorted, disjoint spans? */
static int spans_hit(const p2p_span_t *sp, int n, uintptr_t lo, uintptr_t hi) {
  int a = 0, b = n; /* first span with sp.hi > lo */
  while (a < b) {
    int m = (a + b) / 2;
    if (sp[m].hi > lo) b = m;
    else a = m + 1;
  }
  return a < n && sp[a].lo < hi;
}

/* Receives into overlapping memory are refused (they run concurrently);
 * a send overlapping a receive sends a snapshot of its buffer. Sorting
 * makes it O(n log n). */
static ncclResult_t p2p_overlaps(p2p_xfer_t *s, int ns, const p2p_xfer_t *r,
                                 int nr, int rank, works_t *ws) {
  ncclResult_t res = ncclSuccess;
  p2p_span_t *sp = malloc(((size_t)nr + 1) * sizeof(*sp));
  if (sp == NULL) {
    WARN("out of host memory checking %d point-to-point buffers", ns + nr);
    return ncclSystemError;
  }
  for (int j = 0; j < nr; j++) {
    sp[j].lo = (uintptr_t)r[j].buf;
    sp[j].hi = (uintptr_t)r[j].buf + r[j].bytes;
  }
  qsort(sp, (size_t)nr, sizeof(*sp), span_cmp);
  for (int j = 1; j < nr; j++) {
    if (sp[j].lo >= sp[j - 1].hi) continue;
    WARN("ncclGroupEnd : rank %d: two receive buffers of one group overlap "
         "(at %p and %p); the receives of a group run concurrently, so use "
         "separate buffers", rank, (void *)sp[j - 1].lo, (void *)sp[j].lo);
    res = ncclInvalidArgument;
    goto out;
  }
  size_t snap_total = 0;
  for (int i = 0; i < ns; i++)
    if (spans_hit(sp, nr, (uintptr_t)s[i].buf, (uintptr_t)s[i].buf + s[i].bytes))
      snap_total += (s[i].bytes + 255) & ~(size_t)255;
  for (int i = 0; i < ns; i++) {
    if (!spans_hit(sp, nr, (uintptr_t)s[i].buf, (uintptr_t)s[i].buf + s[i].bytes)) continue;
    if (ws->cuda != NULL) {
      void *dev_copy;
      CHECK_GOTO(brd_launch_cuda_snapshot(ws->comm, ws->cuda, s[i].buf, s[i].bytes,
                                          snap_total, &dev_copy), res, out);
      s[i].buf = dev_copy;
      continue;
    }
    char **grown = realloc(ws->snaps, ((size_t)ws->nsnaps + 1) * sizeof(*grown));
    if (grown == NULL) goto out_oom;
    ws->snaps = grown;
    char *copy = malloc(s[i].bytes);
    if (copy == NULL) goto out_oom;
    memcpy(copy, s[i].buf, s[i].bytes);
    ws->snaps[ws->nsnaps++] = copy;
    s[i].buf = copy;
  }
  goto out;
out_oom:
  WARN("out of host memory copying a %zu-byte send buffer that overlaps a "
       "receive of its group", s[ns ? ns - 1 : 0].bytes);
  res = ncclSystemError;
out:
  free(sp);
  return res;
}

/* Chunks of transfer x in round k. */
static uint32_t round_chunks(const p2p_xfer_t *x, size_t k) {
  size_t lo = k * P2P_ROUND_CHUNKS;
  if (x->pieces <= lo) return 0;
  size_t left = x->pieces - lo;
  return (uint32_t)(left < P2P_ROUND_CHUNKS ? left : P2P_ROUND_CHUNKS);
}

/* Segment of transfer x in round k. */
static brd_exec_seg_t round_seg(const p2p_xfer_t *x, size_t k, size_t piece) {
  brd_exec_seg_t s = {NULL, 0};
  size_t lo = k * P2P_ROUND_CHUNKS * piece;
  if (x->bytes > lo) {
    size_t left = x->bytes - lo, max = P2P_ROUND_CHUNKS * piece;
    s.ptr = x->buf + lo;
    s.count = left < max ? left : max;
  }
  return s;
}

/* The work of round k of the launch's point-to-point transfers. */
static ncclResult_t add_p2p_round(struct ncclComm *comm, struct brd_rt *rt,
                                  const p2p_xfer_t *s, int ns, const p2p_xfer_t *r,
                                  int nr, size_t k, brd_algos_p2p_op_t *ops,
                                  brd_algos_p2p_rank_t *ranks, works_t *ws) {
  int me = comm->rank, n = comm->nranks;
  const rt_window_t *mw = &rt->win[me];
  brd_ir_plan_t *plan;
  work_t *w;
  for (int i = 0; i < ns; i++) ops[i] = (brd_algos_p2p_op_t){s[i].peer, round_chunks(&s[i], k)};
  for (int j = 0; j < nr; j++) ops[ns + j] = (brd_algos_p2p_op_t){r[j].peer, round_chunks(&r[j], k)};
  memset(ranks, 0, (size_t)n * sizeof(*ranks));
  ranks[me].nsend = ns;
  ranks[me].send = ops;
  ranks[me].nrecv = nr;
  ranks[me].recv = ops + ns;
  brd_algos_p2p_args_t args = {n, me, ranks};
  CHECK(brd_algos_p2p(&args, &plan));
  ncclResult_t res = work_add(ws, plan, me, &w);
  if (res != ncclSuccess) {
    brd_plan_destroy(plan);
    return res;
  }
  w->plan_owned = plan;
  w->p2p = 1;
  uint32_t nch = brd_ir_plan_rank(plan, me)->nchans;
  w->chan_epoch = calloc(nch ? nch : 1, sizeof(*w->chan_epoch));
  w->segs = calloc((size_t)ns + (size_t)nr + 1, sizeof(*w->segs));
  if (w->chan_epoch == NULL || w->segs == NULL) {
    WARN("out of host memory for a point-to-point work of %d transfers", ns + nr);
    return ncclSystemError;
  }
  size_t count = 0;
  for (int i = 0; i < ns + nr; i++) {
    w->segs[i] = round_seg(i < ns ? &s[i] : &r[i - ns], k, rt->p2p_piece);
    if (w->segs[i].count > count) count = w->segs[i].count;
  }
  for (uint32_t ch = 0; ch < nch; ch++) {
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    char *pw = rt->base[p];
    const rt_window_t *pwr = &rt->win[p];
    uint64_t to = 0, from = 0;
    for (int i = 0; i < ns; i++) if (s[i].peer == p) to += ops[i].nchunks;
    for (int j = 0; j < nr; j++) if (r[j].peer == p) from += ops[ns + j].nchunks;
    /* CUDA mode: the span, the kernel reserves from its device cursor. */
    w->chan_epoch[ch] = rt->cuda ? (to > from ? to : from)
                                 : brd_plan_epoch_reserve(&rt->p2p_cursor[p],
                                                          to > from ? to : from);
    w->chans[ch].peer_scratch = pw + pwr->p2p_off;
    w->chans[ch].peer_sems = (_Atomic uint64_t *)(pw + pwr->p2p_sem_off) + (size_t)me * 2;
    w->chans[ch].sems = (_Atomic uint64_t *)(rt->base[me] + mw->p2p_sem_off) +
                        (size_t)p * 2;
  }
  brd_exec_args_t *a = &w->args;
  a->plan = plan;
  a->rank = me;
  a->scratch = rt->base[me] + mw->p2p_off;
  a->scratch_bytes = mw->p2p_bytes;
  a->chans = w->chans;
  a->count = count;
  a->dtype = ncclUint8; /* point-to-point moves bytes, whatever the types */
  a->redop = ncclSum;
  a->epoch = 0;         /* every channel has its own */
  a->chan_epoch = w->chan_epoch;
  a->in_segs = w->segs;
  a->n_in_segs = (uint32_t)ns;
  a->out_segs = w->segs + ns;
  a->n_out_segs = (uint32_t)nr;
  a->abort_flag = &comm->abort_flag;
  return ncclSuccess;
}

/* The works of the launch's sends and receives, if any. */
static ncclResult_t add_p2p(struct ncclComm *comm, struct brd_rt *rt,
                            const brd_call_t *calls, int ncalls, works_t *ws) {
  ncclResult_t res = ncclSuccess;
  int ns = 0, nr = 0, n = comm->nranks, me = comm->rank;
  for (int i = 0; i < ncalls; i++) {
    if (calls[i].count == 0) continue;
    if (calls[i].coll == BRD_COLL_SEND) ns++;
    if (calls[i].coll == BRD_COLL_RECV) nr++;
  }
  if (ns + nr == 0) return ncclSuccess;
  if (ns > P2P_MAX_OPS || nr > P2P_MAX_OPS) {
    WARN("ncclGroupEnd : rank %d has %d sends and %d receives in one group; "
         "host mode runs at most %d of each per group and communicator: "
         "split the group", me, ns, nr, P2P_MAX_OPS);
    return ncclInvalidUsage;
  }
  p2p_xfer_t *x = calloc((size_t)ns + (size_t)nr, sizeof(*x));
  brd_algos_p2p_op_t *ops = calloc((size_t)ns + (size_t)nr, sizeof(*ops));
  brd_algos_p2p_rank_t *ranks = calloc((size_t)n, sizeof(*ranks));
  if (x == NULL || ops == NULL || ranks == NULL) {
    WARN("out of host memory for %d point-to-point transfers", ns + nr);
    res = ncclSystemError;
    goto out;
  }
  p2p_xfer_t *s = x, *r = x + ns;
  int is = 0, ir = 0;
  size_t nrounds = 0;
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0 || (c->coll != BRD_COLL_SEND && c->coll != BRD_COLL_RECV)) continue;
    p2p_xfer_t *t = c->coll == BRD_COLL_SEND ? &s[is++] : &r[ir++];
    t->peer = c->root;
    t->buf = c->coll == BRD_COLL_SEND ? (char *)(uintptr_t)c->sendbuff : (char *)c->recvbuff;
    t->bytes = c->count * brd_dtype_size(c->dtype);
    t->pieces = (t->bytes + rt->p2p_piece - 1) / rt->p2p_piece;
    size_t rounds = (t->pieces + P2P_ROUND_CHUNKS - 1) / P2P_ROUND_CHUNKS;
    if (rounds > nrounds) nrounds = rounds;
  }
  CHECK_GOTO(p2p_overlaps(s, ns, r, nr, me, ws), res, out);
  for (size_t k = 0; k < nrounds; k++)
    CHECK_GOTO(add_p2p_round(comm, rt, s, ns, r, nr, k, ops, ranks, ws), res, out);
out:
  free(ranks);
  free(ops);
  free(x);
  return res;
}

/* ---- running works ------------------------------------------------------------ */

typedef struct runner {
  struct ncclComm *comm;
  works_t *ws;
  int nthreads;
  brd_exec_run_t launch;      /* the current work */
  ncclResult_t res;           /* first failure; written by thread 0 */
  int stop;                   /* under mu: leave at the next meeting */
  int stop_seen;              /* under mu: stop as of the last meeting */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;                /* under mu */
  uint64_t gen;               /* under mu: meetings completed */
} runner_t;

typedef struct worker {
  runner_t *r;
  int index;
  pthread_t thread;
} worker_t;

/* All workers meet. The others are running blocks, each of which returns
 * within the executor's timeout or when the abort flag rises; past twice
 * that, the current launch is told to stop so that they do. Returns the
 * stop flag as seen by everyone at this meeting. */
static int runner_meet(runner_t *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t gen = r->gen;
  if (++r->arrived == r->nthreads) {
    /* Everyone leaving this meeting sees the same stop flag. */
    r->stop_seen = r->stop;
    r->arrived = 0;
    r->gen++;
    pthread_cond_broadcast(&r->cv);
  } else {
    double limit = 2.0 * (double)brd_param_int(BRD_P_BRAID_TIMEOUT) + 10.0;
    double deadline = brd_time_now_s() + limit;
    int warned = 0;
    while (r->gen == gen) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&r->cv, &r->mu, &ts);
      if (r->gen != gen) break;
      if (atomic_load(&r->comm->abort_flag) || (!warned && brd_time_now_s() > deadline)) {
        if (!warned && !atomic_load(&r->comm->abort_flag))
          WARN("rank %d: launch workers did not meet within %.0f s; stopping "
               "the launch", r->comm->rank, limit);
        warned = 1;
        /* Blocks see this at their next wait and return. */
        atomic_store(&r->launch.stop, 1);
      }
    }
  }
  int stop = r->stop_seen;
  pthread_mutex_unlock(&r->mu);
  return stop;
}

/* Copies a finished collective work's staging into the user's buffer. */
static void copy_out(const work_t *w) {
  if (w->call == NULL || w->direct) return;
  size_t esize = brd_dtype_size(w->call->dtype);
  const char *stage = w->args.output;
  for (int s = 0; s < w->nout; s++)
    memcpy((char *)w->call->recvbuff + ((size_t)s * w->call->count + w->off) * esize,
           stage + (size_t)s * w->n * esize, w->n * esize);
}

/* Thread 0's step between works: finish work `done` (or -1), start
 * `next` (or nworks). Sets stop on failure. Called with no lock held, while
 * the other workers wait at a meeting. */
static void runner_step(runner_t *r, int done, int next) {
  ncclResult_t res = ncclSuccess;
  if (done >= 0) {
    brd_exec_hang_t hang;
    res = brd_exec_host_run_fini(&r->launch, &hang);
    if (res == ncclSuccess) copy_out(&r->ws->w[done]);
  }
  if (res == ncclSuccess && next < r->ws->n)
    res = brd_exec_host_run_init(&r->launch, &r->ws->w[next].args);
  if (res != ncclSuccess) {
    if (r->res == ncclSuccess) r->res = res;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
  }
}

static void runner_loop(runner_t *r, int index) {
  for (int w = 0; w < r->ws->n; w++) {
    if (runner_meet(r)) return;
    if (index < r->ws->w[w].args.plan->nblocks)
      brd_exec_host_block_run(&r->launch, index);
    if (runner_meet(r)) return;
    if (index == 0) runner_step(r, w, w + 1);
  }
}

static void *worker_main(void *arg) {
  worker_t *k = arg;
  runner_loop(k->r, k->index);
  return NULL;
}

/* Runs every work in order as one launch: one worker per block of the
 * widest plan (this thread is worker 0). */
static ncclResult_t run_works(struct ncclComm *comm, works_t *ws) {
  ncclResult_t res = ncclSuccess;
  int nthreads = 1;
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].args.plan->nblocks > nthreads) nthreads = ws->w[i].args.plan->nblocks;

  runner_t *r = calloc(1, sizeof(*r));
  worker_t *k = calloc((size_t)nthreads, sizeof(*k));
  if (r == NULL || k == NULL) {
    WARN("out of host memory starting a launch of %d works", ws->n);
    res = ncclSystemError;
    goto free_mem;
  }
  r->comm = comm;
  r->ws = ws;
  r->nthreads = nthreads;
  if (nthreads == 1) {
    /* Every plan has one block: no threads, no meetings. */
    for (int w = 0; w < ws->n && res == ncclSuccess; w++) {
      CHECK_GOTO(brd_exec_host_run_init(&r->launch, &ws->w[w].args), res, free_mem);
      brd_exec_host_block_run(&r->launch, 0);
      res = brd_exec_host_run_fini(&r->launch, NULL);
      if (res == ncclSuccess) copy_out(&ws->w[w]);
    }
    goto free_mem;
  }
  PTHREAD_CHECK_GOTO(pthread_mutex_init(&r->mu, NULL), "pthread_mutex_init", res, free_mem);
  PTHREAD_CHECK_GOTO(pthread_cond_init(&r->cv, NULL), "pthread_cond_init", res,
                     destroy_mutex);
  runner_step(r, -1, 0);
  int started = 1;
  for (; started < nthreads; started++) {
    k[started].r = r;
    k[started].index = started;
    int err = pthread_create(&k[started].thread, NULL, worker_main, &k[started]);
    if (err != 0) {
      WARN("rank %d: cannot start launch worker %d of %d: %s", comm->rank, started,
           nthreads, strerror(err));
      res = ncclSystemError;
      break;
    }
  }
  if (started == nthreads) {
    runner_loop(r, 0);
  } else {
    /* The workers that did start leave at their first meeting. */
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    r->nthreads = started;
    pthread_mutex_unlock(&r->mu);
    runner_meet(r);
  }
  for (int i = 1; i < started; i++) pthread_join(k[i].thread, NULL);
  if (res == ncclSuccess) res = r->res;
  pthread_cond_destroy(&r->cv);
destroy_mutex:
  pthread_mutex_destroy(&r->mu);
free_mem:
  free(k);
  free(r);
  return res;
}

/* ---- entry ---------------------------------------------------------------------- */

/* A failed launch leaves the communicator in error (what
 * ncclCommGetAsyncError reports), except for argument errors, which leave
 * it usable. */
static void record_error(struct ncclComm *comm, ncclResult_t res) {
  if (res == ncclSuccess || res == ncclInvalidUsage || res == ncclInvalidArgument)
    return;
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res);
}

/* See launch.h. */
ncclResult_t brd_launch_estimate(const struct ncclComm *comm,
                                 const brd_call_t *c, float *us_out) {
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;
  CHECK(brd_tune_parse(brd_param_str(BRD_P_ALGO), brd_param_str(BRD_P_PROTO),
                       &mask));
  topo_init(comm, 1, &topo);
  uint8_t coll = ir_coll(c->coll);
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  uint32_t avail = 0;
  if (c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV) {
    avail = BRD_ALGO_BIT(BRD_ALGO_ONESHOT); /* direct exchange */
  } else {
    if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_BROADCAST &&
        coll != BRD_IR_COLL_REDUCE)
      bytes *= (size_t)comm->nranks;
    for (int a = 0; a < RT_ALGOS; a++)
      if (brd_algos_available(coll, ir_algo(rt_algos[a]), 0))
        avail |= BRD_ALGO_BIT(rt_algos[a]);
  }
  brd_tune_choice_t ch;
  CHECK(brd_tune_select(&topo, c->coll, bytes, avail, &mask, &ch));
  *us_out = ch.time_us;
  return ncclSuccess;
}

/* CUDA mode: enqueues every work in order on the launch's stream. */
static ncclResult_t run_works_cuda(struct ncclComm *comm, const struct brd_rt *rt,
                                   brd_launch_cuda_ctx_t *ctx, const works_t *ws) {
  size_t half = rt->win[comm->rank].stage_bytes;
  for (int i = 0; i < ws->n; i++) {
    const work_t *w = &ws->w[i];
    brd_launch_copy_t cp;
    memset(&cp, 0, sizeof(cp));
    if (w->call != NULL && w->nout > 0 && !w->direct) {
      size_t esize = brd_dtype_size(w->call->dtype);
      cp.dst = (char *)w->call->recvbuff + w->off * esize;
      cp.nseg = (uint32_t)w->nout;
      cp.seg_bytes = w->n * esize;
      cp.dst_stride = w->call->count * esize;
    }
    /* A rank writing its own buffer in place while exchanging outputs
     * may still write peers' staging halves. */
    CHECK(brd_launch_cuda_work(comm, ctx, &w->args, w->p2p,
                               w->direct && !w->args.xchg ? 0 : half, w->direct,
                               w->scalar_dev, &cp));
  }
  return ncclSuccess;
}

/* A one-rank communicator in CUDA mode: every collective without a
 * PreMulSum (sum, product, min, max and average of one input are the
 * input) is a copy of count elements from the send to the receive buffer,
 * and a send to itself is a copy into the matching receive (the i-th send
 * and the i-th receive), as the pairing rule of point-to-point plans says.
 * No runtime, no window: 1 when the calls were all handled so, 0 when
 * the launch must take the general path. */
static int single_rank_eligible(const struct ncclComm *comm, const brd_call_t *calls,
                                int ncalls) {
  if (comm->host_mode || comm->nranks != 1) return 0;
  size_t sends = 0, recvs = 0;
  for (int i = 0; i < ncalls; i++) {
    if (calls[i].premul) return 0;
    if (calls[i].count == 0) continue;
    sends += calls[i].coll == BRD_COLL_SEND;
    recvs += calls[i].coll == BRD_COLL_RECV;
  }
  return sends == recvs;
}

static ncclResult_t run_single_cuda(brd_launch_cuda_ctx_t *ctx, const brd_call_t *calls,
                                    int ncalls) {
  int next_recv = 0;
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    size_t bytes = c->count * brd_dtype_size(c->dtype);
    if (c->count == 0 || c->coll == BRD_COLL_RECV) continue;
    if (c->coll != BRD_COLL_SEND) {
      CHECK(brd_launch_cuda_copy(ctx, c->recvbuff, c->sendbuff, bytes));
      continue;
    }
    while (calls[next_recv].coll != BRD_COLL_RECV || calls[next_recv].count == 0) next_recv++;
    const brd_call_t *r = &calls[next_recv++];
    if (r->count * brd_dtype_size(r->dtype) != bytes) {
      WARN("ncclSend/ncclRecv : rank 0 sends %zu bytes to itself and receives %zu; "
           "a send and its receive must have the same size", bytes,
           r->count * brd_dtype_size(r->dtype));
      return ncclInvalidArgument;
    }
    CHECK(brd_launch_cuda_copy(ctx, r->recvbuff, c->sendbuff, bytes));
  }
  return ncclSuccess;
}

/* See launch.h. */
ncclResult_t brd_launch_run(struct ncclComm *comm, const brd_call_t *calls,
                            int ncalls) {
  ncclResult_t res = ncclSuccess;
  struct brd_rt *rt;
  works_t ws;
  brd_launch_cuda_ctx_t cctx;
  int began = 0;
  memset(&ws, 0, sizeof(ws));
  ws.comm = comm;
  CHECK_GOTO(rt_get(comm, &rt), res, fail);
  /* Held until the last touch of comm, so an abort from another thread
   * frees nothing under this launch. */
  atomic_fetch_add(&rt->busy, 1);
  if (!comm->host_mode) {
    began = 1;
    ws.cuda = &cctx;
    CHECK_GOTO(brd_launch_cuda_begin(comm, calls, ncalls, &cctx), res, leave_free_works);
  }
  if (single_rank_eligible(comm, calls, ncalls)) {
    res = run_single_cuda(&cctx, calls, ncalls);
    goto leave_free_works;
  }
  if (!rt->ready) CHECK_GOTO(rt_connect(comm, rt), res, leave_free_works);
  if (rt->cuda) CHECK_GOTO(brd_launch_cuda_order(comm, &cctx), res, leave_free_works);
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0 || c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV) continue;
    CHECK_GOTO(add_collective(comm, rt, c, &ws), res, leave_free_works);
  }
  CHECK_GOTO(add_p2p(comm, rt, calls, ncalls, &ws), res, leave_free_works);
  if (ws.n > 0) {
    atomic_fetch_add(&rt->launches, 1);
    INFO(BRD_SUBSYS_COLL, "rank %d: launch %llu runs %d calls as %d works",
         comm->rank, (unsigned long long)atomic_load(&rt->launches), ncalls, ws.n);
    res = rt->cuda ? run_works_cuda(comm, rt, &cctx, &ws) : run_works(comm, &ws);
  }
leave_free_works:
  works_free(&ws);
  if (began) res = brd_launch_cuda_end(comm, &cctx, res);
  record_error(comm, res);
  atomic_fetch_sub(&rt->busy, 1);
  return res;
fail:
  record_error(comm, res);
  return res;
}

/* See launch.h. */
ncclResult_t brd_launch_async_begin(struct ncclComm *comm) {
  struct brd_rt *rt;
  CHECK(rt_get(comm, &rt));
  atomic_fetch_add(&rt->busy, 1);
  atomic_store_explicit(&comm->async_error, ncclInProgress, memory_order_release);
  return ncclSuccess;
}

/* See launch.h. */
void brd_launch_async_end(struct ncclComm *comm, ncclResult_t res) {
  struct brd_rt *rt = comm->rt;
  atomic_store_explicit(&comm->async_error, (int)res, memory_order_release);
  /* Last touch: from here the communicator may be destroyed. */
  atomic_fetch_sub(&rt->busy, 1);
}

/* See launch.h. */
uint64_t brd_launch_count(const struct ncclComm *comm) {
  return comm->rt != NULL ? atomic_load(&comm->rt->launches) : 0;
}
