/*
 * Braid: the collective runtime of a communicator, host mode.
 *
 * Every rank owns one window of channel memory, made by the host transport
 * when all ranks are threads of this process and by the SHM transport
 * otherwise:
 *
 *   [ inbound semaphores: nranks x nsems x 8 bytes ]
 *   [ scratch: the largest any cached plan needs, both phases ]
 *   [ staging output: two halves of stage_bytes ]
 *
 * Peers reach a rank's scratch, semaphores and output through this window.
 * User buffers are private to their process, so a plan's output is the
 * staging half of the launch's phase and is copied to the user's buffer
 * when the rank's part of the plan is done; a message larger than a half
 * runs as several launches (all-reduce is element-wise, so pieces are
 * independent). Halves alternate with the scratch phase, so a peer one
 * launch ahead never writes the half still being copied out.
 *
 * All ranks create the runtime at their first launch, allgather their
 * window records, generate the same plans and reserve the same sequence
 * numbers in the same order, which is what lets semaphores only grow.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "comm.h"
#include "bootstrap.h"
#include "device.h"
#include "launch.h"
#include "param.h"
#include "algos/algos.h"
#include "device/exec_host.h"
#include "device/reduce.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "transport/transport.h"

#define RT_NBLOCK_OPTS 2 /* plans with 1 and 2 blocks per rank */
#define RT_ALGOS 4       /* ring, tree, one-shot, two-shot */
#define RT_PROTOS 2      /* LL, Simple */

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
  uint64_t scratch_off;
  uint64_t scratch_bytes;
  uint64_t stage_off;
  uint64_t stage_bytes; /* one half */
} rt_window_t;

struct brd_rt {
  int nranks;
  const brd_transport_ops_t *ops;
  brd_seg_t self;               /* owned: this rank's window */
  brd_seg_t *peer;              /* owned: [nranks] imported windows */
  rt_window_t *win;             /* owned: [nranks] every rank's record */
  brd_exec_chan_t *chans;       /* owned: [nranks] one launch's channels */
  brd_ir_plan_t *plans[RT_ALGOS][RT_PROTOS][RT_NBLOCK_OPTS]; /* owned */
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;
  uint64_t epoch_cursor;        /* same on every rank */
  uint32_t phase;               /* alternates per launch */
};

static int algo_index(brd_algo_t a) {
  for (int i = 0; i < RT_ALGOS; i++)
    if (rt_algos[i] == a) return i;
  return -1;
}

static int proto_index(brd_proto_t p) {
  for (int i = 0; i < RT_PROTOS; i++)
    if (rt_protos[i] == p) return i;
  return -1;
}

static ncclResult_t generate(brd_algo_t algo, const brd_algos_args_t *a,
                             brd_ir_plan_t **plan_out) {
  switch (algo) {
  case BRD_ALGO_RING: return brd_algos_ring_allreduce(a, plan_out);
  case BRD_ALGO_TREE: return brd_algos_tree_allreduce(a, plan_out);
  case BRD_ALGO_ONESHOT: return brd_algos_oneshot_allreduce(a, plan_out);
  case BRD_ALGO_TWOSHOT: return brd_algos_twoshot_allreduce(a, plan_out);
  default: break;
  }
  WARN("no all-reduce generator for algorithm %s", brd_algo_name(algo));
  return ncclInternalError;
}

void brd_rt_destroy(struct brd_rt *rt) {
  if (rt == NULL) return;
  for (int a = 0; a < RT_ALGOS; a++)
    for (int p = 0; p < RT_PROTOS; p++)
      for (int b = 0; b < RT_NBLOCK_OPTS; b++) brd_plan_destroy(rt->plans[a][p][b]);
  if (rt->peer != NULL && rt->ops != NULL)
    for (int r = 0; r < rt->nranks; r++) rt->ops->seg_close(&rt->peer[r]);
  free(rt->chans);
  free(rt->win);
  free(rt->peer);
  if (rt->ops != NULL) rt->ops->seg_close(&rt->self);
  free(rt);
}

static void topo_init(const struct ncclComm *comm, brd_tune_topo_t *t) {
  memset(t, 0, sizeof(*t));
  t->nranks = comm->nranks;
  t->nnodes = comm->n_nodes > 0 ? comm->n_nodes : 1;
  t->local_nranks = comm->local_nranks > 0 ? comm->local_nranks : 1;
  t->ranks_per_device = 1;
  t->host_mode = comm->host_mode;
  t->ll128_ok = 0;
  /* Host mode moves data through memory: a few GB/s per rank pair, a
   * microsecond or so per synchronisation. */
  t->intra_bw = 4.0f;
  t->intra_lat = 2.0f;
  t->inter_bw = 4.0f;
  t->inter_lat = 2.0f;
}

static int all_in_this_process(const struct ncclComm *comm) {
  if (comm->peers == NULL) return comm->nranks == 1;
  for (int r = 0; r < comm->nranks; r++)
    if (comm->peers[r].pid_hash != comm->peers[comm->rank].pid_hash) return 0;
  return 1;
}

/* Creates the runtime: plans, this rank's window, the window exchange and
 * the peers' mappings. Collective over the communicator. */
static ncclResult_t rt_create(struct ncclComm *comm, struct brd_rt **rt_out) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks;
  struct brd_rt *rt = calloc(1, sizeof(*rt));
  if (rt == NULL) {
    WARN("out of host memory creating the collective runtime of rank %d",
         comm->rank);
    return ncclSystemError;
  }
  rt->nranks = n;
  CHECK_GOTO(brd_tune_parse(brd_param_str(BRD_P_ALGO),
                            brd_param_str(BRD_P_PROTO), &rt->mask),
             res, fail);
  topo_init(comm, &rt->topo);

  size_t scratch = 0, nsems = 1;
  for (int a = 0; a < RT_ALGOS; a++) {
    for (int p = 0; p < RT_PROTOS; p++) {
      for (int b = 0; b < RT_NBLOCK_OPTS; b++) {
        brd_algos_args_t args = {
            .nranks = n, .order = NULL, .nblocks = b + 1,
            .proto = rt_protos[p] == BRD_PROTO_LL ? BRD_IR_PROTO_LL
                                                  : BRD_IR_PROTO_SIMPLE,
        };
        CHECK_GOTO(generate(rt_algos[a], &args, &rt->plans[a][p][b]), res,
                   fail);
        size_t s = brd_plan_scratch_bytes(rt->plans[a][p][b]);
        if (s > scratch) scratch = s;
        if (rt->plans[a][p][b]->nsems > nsems) nsems = rt->plans[a][p][b]->nsems;
      }
    }
  }

  rt->peer = calloc((size_t)n, sizeof(*rt->peer));
  rt->win = calloc((size_t)n, sizeof(*rt->win));
  rt->chans = calloc((size_t)n, sizeof(*rt->chans));
  if (rt->peer == NULL || rt->win == NULL || rt->chans == NULL) {
    WARN("out of host memory for the channel tables of rank %d (%d ranks)",
         comm->rank, n);
    res = ncclSystemError;
    goto fail;
  }

  rt_window_t *me = &rt->win[comm->rank];
  me->nsems = nsems;
  me->sem_off = 0;
  me->scratch_off = ((size_t)n * nsems * sizeof(uint64_t) + 4095) & ~(size_t)4095;
  me->scratch_bytes = (scratch + 4095) & ~(size_t)4095;
  me->stage_off = me->scratch_off + me->scratch_bytes;
  int64_t stage = brd_param_int(BRD_P_BRAID_HOST_STAGING);
  if (stage < 4096) stage = 4096;
  me->stage_bytes = ((size_t)stage + 4095) & ~(size_t)4095;
  size_t total = me->stage_off + 2 * me->stage_bytes;

  rt->ops = all_in_this_process(comm) ? &brd_transport_host : &brd_transport_shm;
  CHECK_GOTO(rt->ops->seg_create(total, "win", &rt->self), res, fail);
  me->handle = rt->self.handle;
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_SHM,
       "rank %d: %s window of %zu bytes (scratch %zu, staging 2x%zu, %zu "
       "semaphores per peer)", comm->rank, rt->ops->name, total,
       (size_t)me->scratch_bytes, (size_t)me->stage_bytes, (size_t)nsems);

  if (n > 1) {
    CHECK_GOTO(brd_boot_allgather(comm->boot, rt->win, sizeof(rt_window_t)),
               res, fail);
    for (int r = 0; r < n; r++) {
      if (r == comm->rank) continue;
      if (rt->win[r].nsems != nsems || rt->win[r].stage_bytes != me->stage_bytes) {
        WARN("rank %d and rank %d disagree on channel sizes (semaphores %zu "
             "vs %zu, staging %zu vs %zu); give every rank the same "
             "NCCL_BUFFSIZE, NCCL_LL_BUFFSIZE and BRAID_HOST_STAGING",
             comm->rank, r, (size_t)nsems, (size_t)rt->win[r].nsems,
             (size_t)me->stage_bytes, (size_t)rt->win[r].stage_bytes);
        res = ncclInvalidUsage;
        goto fail;
      }
      CHECK_GOTO(rt->ops->seg_import(&rt->win[r].handle, &rt->peer[r]), res,
                 fail);
    }
    /* Every rank has mapped every window: names may go. */
    CHECK_GOTO(brd_boot_barrier(comm->boot), res, fail);
  }
  rt->ops->seg_seal(&rt->self);
  *rt_out = rt;
  return ncclSuccess;

fail:
  brd_rt_destroy(rt);
  return res;
}

static char *win_ptr(const struct brd_rt *rt, int me, int r) {
  return r == me ? (char *)rt->self.ptr : (char *)rt->peer[r].ptr;
}

const brd_redop_slot_t *brd_redop_find(const struct ncclComm *comm,
                                       ncclRedOp_t op) {
  if (op < ncclNumOps || comm->redops == NULL) return NULL;
  int i = (int)op - (int)ncclNumOps;
  if (i >= BRD_REDOPS_MAX || !comm->redops->slot[i].used) return NULL;
  return &comm->redops->slot[i];
}

/* One launch of plan over [off, off + n) of an all-reduce. */
static ncclResult_t run_piece(struct ncclComm *comm, struct brd_rt *rt,
                              const brd_ir_plan_t *plan, const brd_call_t *c,
                              int redop, const void *scalar, size_t off,
                              size_t n) {
  int me = comm->rank;
  size_t esize = brd_reduce_dtype_size(c->dtype);
  const rt_window_t *mw = &rt->win[me];
  brd_plan_layout_t layout;
  CHECK(brd_plan_layout_init(plan, n, c->dtype, mw->scratch_bytes, &layout));
  uint64_t epoch = brd_plan_epoch_reserve(&rt->epoch_cursor,
                                          brd_plan_epoch_span(plan, &layout));
  uint32_t phase = rt->phase;
  rt->phase ^= 1u;

  const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    char *pw = win_ptr(rt, me, p);
    const rt_window_t *w = &rt->win[p];
    rt->chans[ch].peer_scratch = pw + w->scratch_off;
    rt->chans[ch].peer_output = pw + w->stage_off + phase * w->stage_bytes;
    rt->chans[ch].peer_sems =
        (_Atomic uint64_t *)(pw + w->sem_off) + (size_t)me * w->nsems;
    rt->chans[ch].sems =
        (_Atomic uint64_t *)((char *)rt->self.ptr + mw->sem_off) +
        (size_t)p * mw->nsems;
  }
  char *stage = (char *)rt->self.ptr + mw->stage_off + phase * mw->stage_bytes;
  brd_exec_args_t args = {
      .plan = plan,
      .rank = me,
      .input = (const char *)c->sendbuff + off * esize,
      .output = stage,
      .scratch = (char *)rt->self.ptr + mw->scratch_off,
      .scratch_bytes = mw->scratch_bytes,
      .chans = rt->chans,
      .count = n,
      .dtype = c->dtype,
      .redop = redop,
      .scalar = scalar,
      .epoch = epoch,
      .phase = phase,
      .abort_flag = &comm->abort_flag,
      .timeout_s = 0,
  };
  brd_exec_hang_t hang;
  CHECK(brd_exec_host_run(&args, &hang));
  memcpy((char *)c->recvbuff + off * esize, stage, n * esize);
  return ncclSuccess;
}

static ncclResult_t run_allreduce(struct ncclComm *comm, struct brd_rt *rt,
                                  const brd_call_t *c) {
  size_t esize = brd_reduce_dtype_size(c->dtype);
  size_t bytes = c->count * esize;
  brd_tune_choice_t choice;
  uint32_t avail = 0;
  for (int a = 0; a < RT_ALGOS; a++) avail |= BRD_ALGO_BIT(rt_algos[a]);
  CHECK(brd_tune_select(&rt->topo, BRD_COLL_ALLREDUCE, bytes, avail,
                        &rt->mask, &choice));
  int ai = algo_index(choice.algo), pi = proto_index(choice.proto);
  if (ai < 0 || pi < 0) {
    WARN("AllReduce: %s/%s is not available in host mode; choose Ring, "
         "Tree, OneShot or TwoShot with LL or Simple (NCCL_ALGO/NCCL_PROTO)",
         brd_algo_name(choice.algo), brd_proto_name(choice.proto));
    return ncclInvalidUsage;
  }

  int redop = (int)c->op;
  const void *scalar = NULL;
  if (c->premul) {
    redop = BRD_REDOP_PREMULSUM;
    /* Host-immediate scalars travel inside the call (premul_scalar NULL). */
    scalar = c->premul_scalar != NULL ? c->premul_scalar : c->premul_value;
  }

  size_t piece = rt->win[comm->rank].stage_bytes / esize;
  int nb = bytes >= ((size_t)256 << 10) ? 2 : 1;
  const brd_ir_plan_t *plan = rt->plans[ai][pi][nb - 1];
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = c->count - off < piece ? c->count - off : piece;
    CHECK(run_piece(comm, rt, plan, c, redop, scalar, off, n));
  }
  return ncclSuccess;
}

static const char *coll_name(brd_coll_t coll) {
  static const char *const names[BRD_COLL_COUNT] = {
      "ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
      "ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend",
      "ncclRecv"};
  return coll < BRD_COLL_COUNT ? names[coll] : "collective";
}

ncclResult_t brd_launch_run(struct ncclComm *comm, const brd_call_t *calls,
                            int ncalls) {
  ncclResult_t res = ncclSuccess;
  if (!comm->host_mode) {
    char what[96];
    snprintf(what, sizeof(what), "%s on a CUDA device (use BRAID_DEVICE=host)",
             coll_name(calls[0].coll));
    return brd_api_not_implemented(what);
  }
  if (comm->rt == NULL) CHECK_GOTO(rt_create(comm, &comm->rt), res, fail);
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0) continue;
    switch (c->coll) {
    case BRD_COLL_ALLREDUCE:
      CHECK_GOTO(run_allreduce(comm, comm->rt, c), res, fail);
      break;
    default:
      res = brd_api_not_implemented(coll_name(c->coll));
      goto fail;
    }
  }
  return ncclSuccess;

fail:
  if (res != ncclInvalidUsage && res != ncclInvalidArgument) {
    int expected = ncclSuccess;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res);
  }
  return res;
}
