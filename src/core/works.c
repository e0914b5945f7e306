/*
 * Braid: the works builder; see works.h for the rules. Pure C over the
 * runtime's view: no threads, no sockets, no CUDA (tests/unit/test_works.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/check.h"
#include "base/param.h"
#include "algos/algos.h"
#include "core/works.h"
#include "core/works_int.h"
#include "device/redop.h"
#include "plan/plan.h"
#include "plan/plan_cost.h"
#include "plan/tuner_plugin.h"

static int is_reduction(uint8_t coll) { return brd_ir_coll_traits(coll).reduction; }
static int is_rooted(uint8_t coll) { return brd_ir_coll_traits(coll).rooted; }

/* NCCL's names of a datatype and a reduction, for messages. */
static const char *dtype_name(int dt) {
  static const char *const names[] = {"ncclInt8",    "ncclUint8",    "ncclInt32",
                                      "ncclUint32",  "ncclInt64",    "ncclUint64",
                                      "ncclFloat16", "ncclFloat32",  "ncclFloat64",
                                      "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return dt >= 0 && dt < (int)(sizeof(names) / sizeof(names[0])) ? names[dt] : "unknown";
}

static const char *redop_name(int op) {
  switch (op) {
  case ncclSum: return "ncclSum";
  case ncclProd: return "ncclProd";
  case ncclMax: return "ncclMax";
  case ncclMin: return "ncclMin";
  case ncclAvg: return "ncclAvg";
  default: return "a PreMulSum op";
  }
}

/* See works.h. */
void brd_works_free(brd_works_t *ws) {
  for (int i = 0; i < ws->n; i++) {
    free(ws->w[i].chans);
    free(ws->w[i].members);
    free(ws->w[i].chan_epoch);
    free(ws->w[i].segs);
    brd_plan_destroy(ws->w[i].plan_owned);
  }
  free(ws->snaps);
  free(ws->w);
  memset(ws, 0, sizeof(*ws));
}

/* See works.h. */
void brd_works_snap_use(brd_works_t *ws, int s, char *copy) {
  const brd_works_snap_t *sn = &ws->snaps[s];
  for (int i = sn->w_lo; i < sn->w_hi && i < ws->n; i++) {
    brd_work_t *w = &ws->w[i];
    if (!w->p2p || (uint32_t)sn->seg >= w->args.n_in_segs) continue;
    brd_exec_seg_t *seg = &w->segs[sn->seg];
    if (seg->ptr != NULL) seg->ptr = copy + ((const char *)seg->ptr - sn->src);
  }
}

/* See works_int.h. */
ncclResult_t brd_works_work_add(brd_works_t *ws, const brd_ir_plan_t *plan, int rank,
                                brd_work_t **w_out) {
  brd_work_t *grown = brd_array_grow(ws->w, ws->n, &ws->cap, sizeof(*ws->w), 2);
  if (grown == NULL) {
    WARN("out of host memory growing a launch past %d works", ws->n);
    return ncclSystemError;
  }
  ws->w = grown;
  brd_work_t *w = &ws->w[ws->n];
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

static int is_multi_out(uint8_t coll) { return brd_ir_coll_traits(coll).out_segs_all; }

/* The plan's switch channel on `rank`, or -1. */
static int switch_chan(const brd_ir_plan_t *plan, int rank) {
  for (uint32_t c = 0; c < brd_ir_plan_rank(plan, rank)->nchans; c++)
    if (brd_ir_plan_chan(plan, rank, (int)c)->type == BRD_IR_CHAN_SWITCH) return (int)c;
  return -1;
}

/* The algorithm and protocol for a call (tuner, overrides, determinism). */
static ncclResult_t choose(const brd_works_view_t *v, const brd_call_t *c, uint8_t coll,
                           int pipe_ops, brd_tune_choice_t *choice_out, int *nchannels_out) {
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  int det = v->deterministic && is_reduction(coll);
  uint32_t avail = brd_plans_available(coll, det);
  /* Switch plans (NVLS on one node, NVLSTree across nodes) only where the
   * runtime turned switch channels on, and only for what multimem can
   * reduce (NCCL's rule); otherwise the others. */
  uint32_t sw = BRD_ALGO_BIT(BRD_ALGO_NVLS) | BRD_ALGO_BIT(BRD_ALGO_NVLS_TREE);
  if (avail & sw) {
    int redop = is_reduction(coll) ? (c->premul ? BRD_REDOP_PREMULSUM : (int)c->op) : ncclSum;
    /* The one that could run here: NVLS on one node, NVLSTree across. */
    int across = v->topo->nnodes > 1;
    uint32_t named = v->mask->algos[c->coll] & avail &
                     BRD_ALGO_BIT(across ? BRD_ALGO_NVLS_TREE : BRD_ALGO_NVLS);
    const char *which = across ? "NVLSTree" : "NVLS";
    if (!v->topo->nvls) {
      avail &= ~sw;
    } else if (!brd_algos_nvls_supported(coll, c->dtype, redop)) {
      avail &= ~sw;
      if (named && v->nranks > 1 && (v->mask->algos[c->coll] & avail) == 0) {
        /* NCCL's answer when NCCL_ALGO leaves nothing that can run it. */
        WARN("%s : no algorithm/protocol available for datatype %s with %s: NCCL_ALGO "
             "(%s) allows only %s here, which cannot reduce them (sum on 32- and "
             "64-bit integers, f16, bf16, f32 and f64, min/max on those integers, f16 and "
             "bf16); allow another algorithm or unset NCCL_ALGO", c->fn,
             dtype_name(c->dtype), redop_name(redop), v->mask->algo_env, which);
        return ncclInvalidUsage;
      }
      if (named)
        INFO(BRD_SUBSYS_COLL | BRD_SUBSYS_NVLS | BRD_SUBSYS_TUNING,
             "%s : %s cannot reduce %s with %s (multimem reduces sum on 32- and 64-bit "
             "integers, f16, bf16, f32 and f64, min/max on those integers, f16 and bf16); "
             "using the other algorithms NCCL_ALGO allows", c->fn, which,
             dtype_name(c->dtype), redop_name(redop));
    }
  }
  if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_BROADCAST &&
      coll != BRD_IR_COLL_REDUCE)
    bytes *= (size_t)v->nranks; /* NCCL tunes these on the larger buffer */
  if (det && v->nranks > 1 && (v->mask->algos[c->coll] & avail) == 0) {
    WARN("%s : BRAID_DETERMINISTIC=1 allows only %s for this reduction, and "
         "NCCL_ALGO (%s) excludes %s; allow it or unset BRAID_DETERMINISTIC",
         c->fn, coll == BRD_IR_COLL_ALLREDUCE ? "OneShot and TwoShot" : "OneShot",
         v->mask->algo_env, coll == BRD_IR_COLL_ALLREDUCE ? "both" : "it");
    return ncclInvalidUsage;
  }
  /* Without a tuner plugin this is brd_tune_select. */
  uint32_t protos = 0;
  for (int i = 0; i < BRD_PLANS_NPROTOS; i++) protos |= BRD_PROTO_BIT(brd_plans_protos[i]);
  CHECK(brd_tuner_select(v->tuner, v->topo, c->coll, bytes, avail, protos, v->mask, pipe_ops, 0,
                         choice_out, nchannels_out));
  if (choice_out->proto == BRD_PROTO_LL128) {
    WARN("%s : protocol LL128 is not available in host mode; choose LL or "
         "Simple (NCCL_PROTO)", c->fn);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* Offset and size of plan's scratch in window record w: LL plans have an
 * area of their own, which only ever holds LL packets (window.h). */
static uint64_t scratch_off(const brd_window_rec_t *w, const brd_ir_plan_t *plan) {
  return plan->proto == BRD_IR_PROTO_LL ? w->ll_scratch_off : w->scratch_off;
}

static size_t scratch_size(const brd_window_rec_t *w, const brd_ir_plan_t *plan) {
  return (size_t)(plan->proto == BRD_IR_PROTO_LL ? w->ll_scratch_bytes : w->scratch_bytes);
}

/* Fills the channels of a collective work: peers' scratch, staging half of
 * `phase` (or, with peer_out, their registered output buffers) and
 * semaphores, from the window records. */
static ncclResult_t coll_chans(const brd_works_view_t *v,
                               const brd_ir_plan_t *plan, uint32_t phase, char **peer_out,
                               brd_work_t *w) {
  int me = v->rank;
  const brd_window_rec_t *mw = &v->win[me];
  const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    if (brd_ir_plan_chan(plan, me, (int)ch)->type == BRD_IR_CHAN_SWITCH) {
      /* Every member's copy: the scratch and switch semaphores of each
       * rank of this rank's switch group (device/ir.h: every rank, or
       * those of this node), in rank order, as mapped here (window.h). */
      int n = v->nranks;
      /* Scratch bases, switch semaphores, then (zero-copy plans, filled
       * by the caller) inputs and outputs. */
      w->members = calloc(4 * (size_t)n, sizeof(*w->members));
      if (w->members == NULL) {
        WARN("out of host memory for the %d members of a switch channel", n);
        return ncclSystemError;
      }
      int m = 0;
      uint8_t group = brd_ir_plan_chan(plan, me, (int)ch)->group;
      for (int r = 0; r < n; r++) {
        int sc = brd_ir_switch_chan(plan, r);
        if (sc < 0 || brd_ir_plan_chan(plan, r, sc)->group != group) continue;
        w->members[m] = v->base[r] + v->win[r].scratch_off;
        w->members[n + m] = v->base[r] + v->win[r].sw_sem_off;
        m++;
      }
      w->chans[ch].member_scratch = w->members;
      w->chans[ch].member_ssems = (_Atomic uint64_t *const *)(w->members + n);
      continue;
    }
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    char *pw = v->base[p];
    const brd_window_rec_t *pwr = &v->win[p];
    w->chans[ch].peer_scratch = pw + scratch_off(pwr, plan);
    w->chans[ch].peer_output = peer_out != NULL ? peer_out[p]
                               : pw + pwr->stage_off + phase * pwr->stage_bytes;
    w->chans[ch].peer_sems =
        (_Atomic uint64_t *)(pw + pwr->sem_off) + (size_t)me * pwr->nsems;
    w->chans[ch].sems = (_Atomic uint64_t *)(v->base[me] + mw->sem_off) +
                        (size_t)p * mw->nsems;
    w->chans[ch].port = v->ports != NULL ? v->ports[p] : NULL;
  }
  return ncclSuccess;
}

/* Every rank's copy of registered buffer [buf, buf + bytes) as mapped here
 * (brd_reg_direct), in *peer_out (owned by the caller), or NULL when it is
 * not usable in place. */
static ncclResult_t reg_peers(const brd_works_view_t *v,
                              const brd_call_t *c, const void *buf, size_t bytes,
                              char ***peer_out) {
  int ok = 0;
  *peer_out = NULL;
  char **peer = calloc((size_t)v->nranks, sizeof(*peer));
  if (peer == NULL) {
    WARN("%s : out of host memory", c->fn);
    return ncclSystemError;
  }
  ncclResult_t res = v->reg.direct(v->reg.ctx, buf, bytes, c->fn, peer, &ok);
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
static ncclResult_t direct_output(const brd_works_view_t *v,
                                  const brd_call_t *c, uint8_t coll, char ***peer_out_out) {
  int n = v->nranks;
  *peer_out_out = NULL;
  if (n == 1 || !v->reg.any || coll == BRD_IR_COLL_REDUCE ||
      coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER)
    return ncclSuccess;
  size_t seg = c->count * brd_dtype_size(c->dtype);
  size_t bytes = seg * (is_multi_out(coll) ? (size_t)n : 1);
  /* An in-place reduce-scatter's output is segment `rank` of its input:
   * every rank's output lies at its own offset, so find the inputs (all at
   * one offset) and step to each rank's segment. Mixing in-place and
   * out-of-place ranks breaks the symmetric rule. */
  int rs_in_place = coll == BRD_IR_COLL_REDUCESCATTER &&
                    (const char *)c->recvbuff == (const char *)c->sendbuff + v->rank * seg;
  char **peer;
  CHECK(rs_in_place ? reg_peers(v, c, c->sendbuff, seg * (size_t)n, &peer)
                    : reg_peers(v, c, c->recvbuff, bytes, &peer));
  if (peer == NULL) return ncclSuccess;
  if (rs_in_place)
    for (int q = 0; q < n; q++) peer[q] += (size_t)q * seg;
  INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p written in place "
       "(registered on every rank)", c->fn, v->rank, c->recvbuff);
  *peer_out_out = peer;
  return ncclSuccess;
}

/* Whether call c, whose output is written in place, also reads every
 * rank's registered input in place (a zero-copy plan: two-shot all-reduce,
 * direct reduce-scatter and all-gather): *peer_in_out gets every rank's
 * send buffer as mapped here (owned by the caller) and *algo_out the plan
 * cache's code for that plan, or *peer_in_out stays NULL. From
 * BRD_WORKS_PEER_MIN_BYTES moved per rank (below, the LL plans' single round of
 * packets wins), when NCCL_ALGO and NCCL_PROTO allow the family (two-shot
 * for all-reduce, one-shot for the others) with Simple, and for
 * reductions not with PreMulSum (each rank scales only its own input) or
 * in deterministic mode (the plans add in owner order). The same answer
 * on every rank. */
static ncclResult_t peer_input(const brd_works_view_t *v,
                               const brd_call_t *c, uint8_t coll, char *const *peer_out,
                               char ***peer_in_out, uint8_t *algo_out) {
  int n = v->nranks;
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
  if ((is_reduction(coll) && (c->premul || v->deterministic)) ||
      moved < BRD_WORKS_PEER_MIN_BYTES ||
      !(v->mask->algos[c->coll] & BRD_ALGO_BIT(family)) ||
      !(v->mask->protos[c->coll] & BRD_PROTO_BIT(BRD_PROTO_SIMPLE)))
    return ncclSuccess;
  /* An in-place all-gather's input is segment `rank` of its output, at its
   * own offset: step from each rank's output (all at one offset). */
  int ag_in_place = coll == BRD_IR_COLL_ALLGATHER &&
                    (const char *)c->sendbuff ==
                        (const char *)c->recvbuff + (size_t)v->rank * bytes;
  char **peer;
  if (ag_in_place) {
    peer = calloc((size_t)n, sizeof(*peer));
    if (peer == NULL) {
      WARN("%s : out of host memory", c->fn);
      return ncclSystemError;
    }
    for (int q = 0; q < n; q++) peer[q] = peer_out[q] + (size_t)q * bytes;
  } else {
    CHECK(reg_peers(v, c, c->sendbuff, bytes, &peer));
    if (peer == NULL) return ncclSuccess;
  }
  INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: input %p read in place by "
       "every rank (zero-copy plan)", c->fn, v->rank, c->sendbuff);
  *peer_in_out = peer;
  *algo_out = (uint8_t)(family | BRD_PLANS_ALGO_PEER);
  return ncclSuccess;
}

/* Whether call c should try the zero-copy NVLS plan: the tuner chose
 * NVLS, or (Braid's own tuner only) NVLS is on, allowed by NCCL_ALGO and
 * NCCL_PROTO, eligible, and its zero-copy cost beats the tuner's choice.
 * The same answer on every rank. */
static int nvls_zc_wanted(const brd_works_view_t *v, const brd_call_t *c, uint8_t coll,
                          const brd_tune_choice_t *choice) {
  if (choice->algo == BRD_ALGO_NVLS) return 1;
  if (v->tuner != NULL || !v->topo->nvls || (v->deterministic && is_reduction(coll)) ||
      !(v->mask->algos[c->coll] & BRD_ALGO_BIT(BRD_ALGO_NVLS)) ||
      !(v->mask->protos[c->coll] & BRD_PROTO_BIT(BRD_PROTO_SIMPLE)))
    return 0;
  int redop = is_reduction(coll) ? (c->premul ? BRD_REDOP_PREMULSUM : (int)c->op) : ncclSum;
  if (!brd_algos_nvls_supported(coll, c->dtype, redop)) return 0;
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  if (coll != BRD_IR_COLL_ALLREDUCE) bytes *= (size_t)v->nranks; /* NCCL's tuning size */
  float zc = brd_tune_estimate_nvls_zc(v->topo, c->coll, bytes);
  return zc >= 0.0f && zc < choice->time_us;
}

/* The zero-copy NVLS plan's buffers (nvls_zc.c), for a call whose output
 * is written in place (direct_output): every member's input in
 * *peer_in_out (owned by the caller; NULL entries for an all-gather, which
 * reads no member's input through the switch) and, where the
 * backend maps multicast (CUDA), the multicast addresses of this rank's
 * input and output in mc_in_out / mc_out_out. *ok_out 1 when the plan may
 * run; 0 with an INFO naming why (the tuner's plan runs instead).
 * Only all-reduce, all-gather and reduce-scatter whose segments and
 * buffers are 16-byte aligned (multimem moves whole 16-byte packs). The
 * same answer on every rank for symmetric buffers. */
static ncclResult_t switch_io(const brd_works_view_t *v, const brd_call_t *c, uint8_t coll,
                              char ***peer_in_out, void **mc_in_out, void **mc_out_out,
                              int *ok_out) {
  int n = v->nranks;
  size_t seg = c->count * brd_dtype_size(c->dtype);
  const char *why = NULL;
  char whybuf[200] = "";
  *peer_in_out = NULL;
  *mc_in_out = *mc_out_out = NULL;
  *ok_out = 0;
  if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_ALLGATHER &&
      coll != BRD_IR_COLL_REDUCESCATTER)
    return ncclSuccess;
  /* An in-place reduce-scatter's output is its own segment of the input,
   * at a rank-dependent offset: the plan writes it locally only. */
  int reads_mc = coll != BRD_IR_COLL_ALLGATHER, writes_mc = coll != BRD_IR_COLL_REDUCESCATTER;
  if (seg % 16 != 0 || (uintptr_t)c->sendbuff % 16 != 0 || (uintptr_t)c->recvbuff % 16 != 0) {
    why = "multimem moves 16-byte packs: the buffers and the per-rank bytes must be "
          "multiples of 16";
    goto out;
  }
  char **peer = NULL;
  size_t in_bytes = coll == BRD_IR_COLL_REDUCESCATTER ? seg * (size_t)n : seg;
  if (coll == BRD_IR_COLL_ALLGATHER) {
    /* Each rank stores its own input: the members' inputs are never read
     * through the switch, so the input need not be registered. */
    peer = calloc((size_t)n, sizeof(*peer));
    if (peer == NULL) {
      WARN("%s : out of host memory", c->fn);
      return ncclSystemError;
    }
  } else {
    CHECK(reg_peers(v, c, c->sendbuff, in_bytes, &peer));
    if (peer == NULL) {
      why = "the input is not in a symmetric window registered on every rank";
      goto out;
    }
  }
  if (v->reg.mc != NULL) {
    size_t out_bytes = coll == BRD_IR_COLL_ALLGATHER ? seg * (size_t)n : seg;
    if (reads_mc) v->reg.mc(v->reg.ctx, c->sendbuff, in_bytes, mc_in_out, whybuf,
                            sizeof(whybuf));
    if (writes_mc && (!reads_mc || *mc_in_out != NULL))
      v->reg.mc(v->reg.ctx, c->recvbuff, out_bytes, mc_out_out, whybuf, sizeof(whybuf));
    if ((reads_mc && *mc_in_out == NULL) || (writes_mc && *mc_out_out == NULL)) {
      free(peer);
      *mc_in_out = *mc_out_out = NULL;
      why = whybuf;
      goto out;
    }
  }
  *peer_in_out = peer;
  *ok_out = 1;
  INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_COLL, "%s : rank %d: zero-copy NVLS plan over the "
       "windows of input %p and output %p", c->fn, v->rank, c->sendbuff, c->recvbuff);
  return ncclSuccess;
out:
  INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_COLL, "%s : rank %d: no zero-copy NVLS plan (%s); the "
       "tuner's plan runs", c->fn, v->rank, why);
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
static ncclResult_t exchange_output(const brd_works_view_t *v,
                                    const brd_call_t *c, uint8_t coll,
                                    const brd_ir_plan_t *plan, uint64_t **remote_out,
                                    int *xchg_out) {
  int n = v->nranks;
  *remote_out = NULL;
  *xchg_out = 0;
  if (n == 1 || !v->reg.any || coll == BRD_IR_COLL_REDUCE ||
      coll == BRD_IR_COLL_GATHER || coll == BRD_IR_COLL_SCATTER)
    return ncclSuccess;
  /* A switch plan writes only its own output: nothing to exchange. */
  if (switch_chan(plan, v->rank) >= 0) return ncclSuccess;
  for (int r = 0; r < n; r++)
    if (brd_ir_plan_rank(plan, r)->nchans > BRD_IR_XCHG_MAX_CHANS) return ncclSuccess;
  size_t bytes = c->count * brd_dtype_size(c->dtype) * (is_multi_out(coll) ? (size_t)n : 1);
  uint64_t *remote = calloc((size_t)n, sizeof(*remote));
  if (remote == NULL) {
    WARN("%s : out of host memory", c->fn);
    return ncclSystemError;
  }
  int state;
  ncclResult_t res = v->reg.share(v->reg.ctx, c->recvbuff, bytes, c->fn, remote, &state);
  if (res != ncclSuccess || state == BRD_REG_NONE) {
    free(remote);
    return res;
  }
  *xchg_out = 1;
  if (state == BRD_REG_SHARED) {
    *remote_out = remote;
    INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p written in place "
         "(registered; exchanged per call)", c->fn, v->rank, c->recvbuff);
  } else {
    free(remote);
    INFO(BRD_SUBSYS_REG | BRD_SUBSYS_COLL, "%s : rank %d: output %p staged (registered, "
         "but not every rank can map it; exchanged per call)", c->fn, v->rank,
         c->recvbuff);
  }
  return ncclSuccess;
}

/* For the INFO line of a library plan: its estimate from its own ops
 * (plan/plan_cost.h) beside the cost model's for the built-in plan the
 * tuner would choose (the internal model's, without a tuner plugin). Only
 * computed while that line prints. */
static void library_estimate(const brd_works_view_t *v, const brd_call_t *c, uint8_t coll,
                             const brd_ir_plan_t *plan, char *buf, size_t len) {
  brd_plan_cost_t pc;
  int have = brd_plan_cost_estimate(plan, v->topo, c->count, (int)c->dtype,
                                    scratch_size(&v->win[v->rank], plan), &pc) == ncclSuccess;
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  if (coll != BRD_IR_COLL_ALLREDUCE && coll != BRD_IR_COLL_BROADCAST &&
      coll != BRD_IR_COLL_REDUCE)
    bytes *= (size_t)v->nranks; /* the tuner's size, as choose() gives it */
  uint32_t avail = brd_plans_available(coll, 0);
  if (!v->topo->nvls)
    avail &= ~(BRD_ALGO_BIT(BRD_ALGO_NVLS) | BRD_ALGO_BIT(BRD_ALGO_NVLS_TREE));
  float costs[BRD_ALGO_COUNT][BRD_PROTO_COUNT];
  int ba = -1, bp = -1;
  if (brd_tune_costs(v->topo, c->coll, bytes, avail, v->mask, costs) == ncclSuccess)
    for (int a = 0; a < BRD_ALGO_COUNT; a++)
      for (int i = 0; i < BRD_PLANS_NPROTOS; i++) {
        int p = brd_plans_protos[i];
        if (costs[a][p] >= 0.0f && (ba < 0 || costs[a][p] < costs[ba][bp])) {
          ba = a;
          bp = p;
        }
      }
  int w = have ? snprintf(buf, len, "plan estimate %.1f us, %llu sync hops", pc.time_us,
                          (unsigned long long)pc.sync_hops)
               : snprintf(buf, len, "no plan estimate");
  if (w < 0 || (size_t)w >= len) return;
  if (ba >= 0)
    snprintf(buf + w, len - (size_t)w, "; built-in %s/%s %.1f us by the cost model",
             brd_algo_name((brd_algo_t)ba), brd_proto_name((brd_proto_t)bp), costs[ba][bp]);
}

/* The plan library's plan for call c, or NULL for the built-ins: only
 * while NCCL_ALGO is unset, and not for deterministic reductions (a
 * library plan's order of addition is its own). The inputs (the call's
 * sizes and collective, and in place or not) are the same on every rank,
 * and so is the library (window.c agreed on it), so is the answer. A plan
 * that will run is logged at INFO; `estimating` (brd_works_estimate, which
 * runs nothing) keeps quiet. */
static brd_plan_user_t *library_choice(const brd_works_view_t *v, brd_plan_cache_t *plans,
                                       const brd_call_t *c, uint8_t coll, int estimating) {
  if (plans->nlib == 0 || v->mask->algo_env[0] != '\0' ||
      (v->deterministic && is_reduction(coll)))
    return NULL;
  brd_ir_coll_traits_t t = brd_ir_coll_traits(coll);
  size_t seg = c->count * brd_dtype_size(c->dtype);
  brd_plans_call_t k;
  k.coll = coll;
  k.root = is_rooted(coll) ? c->root : 0;
  k.bytes = (uint64_t)seg * (t.in_segs_all ? (uint64_t)v->nranks : 1);
  /* NCCL's in-place layouts: the all-gather's input is block `rank` of
   * its output, the reduce-scatter's output block `rank` of its input. */
  const char *sb = c->sendbuff, *rb = c->recvbuff;
  if (coll == BRD_IR_COLL_ALLGATHER) k.in_place = sb == rb + (size_t)v->rank * seg;
  else if (coll == BRD_IR_COLL_REDUCESCATTER) k.in_place = rb == sb + (size_t)v->rank * seg;
  else k.in_place = sb == rb;
  k.dtype = (int)c->dtype;
  k.redop = c->premul ? BRD_PLAN_JSON_REDOP_PREMULSUM : (int)c->op;
  brd_plan_user_t *u = brd_plans_library_match(plans, &k);
  if (u != NULL && !estimating && brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_COLL | BRD_SUBSYS_TUNING)) {
    char est[160];
    INFO(BRD_SUBSYS_COLL | BRD_SUBSYS_TUNING, "%s : rank %d: plan library: %s runs (%llu "
         "bytes per rank, %s)", c->fn, v->rank, u->path, (unsigned long long)k.bytes,
         k.in_place ? "in place" : "out of place");
    library_estimate(v, c, coll, u->plan, est, sizeof(est));
    INFO(BRD_SUBSYS_COLL | BRD_SUBSYS_TUNING, "%s : rank %d: plan library: %s: %s", c->fn,
         v->rank, u->path, est);
  }
  return u;
}

/* The built-in plan for call c: the tuner's algorithm and protocol, and
 * the blocks the message size (or a tuner plugin) asks for. */
static ncclResult_t builtin_plan(const brd_works_view_t *v, brd_plan_cache_t *plans,
                                 const brd_call_t *c, uint8_t coll, int pipe_ops,
                                 brd_tune_choice_t *choice_out, int *nb_out,
                                 const brd_ir_plan_t **plan_out) {
  int me = v->rank;
  int root = is_rooted(coll) ? c->root : 0;
  brd_tune_choice_t choice;
  int plugin_nch = 0;
  CHECK(choose(v, c, coll, pipe_ops, &choice, &plugin_nch));
  size_t bytes = c->count * brd_dtype_size(c->dtype);
  /* Blocks grow with the message; the same sizes give the same choice on
   * every rank, as the plans must be the same everywhere. GPU blocks are
   * cheap to add, host threads are not. */
  int want = 1;
  for (int i = 0; i < BRD_BACKEND_NB_SIZES && v->nb_sizes[i] != 0 && bytes >= v->nb_sizes[i];
       i++)
    want *= 2;
  int nb = v->nb_opts[0];
  /* A tuner plugin's nChannels replaces the size rule (the plugin must
   * answer alike on every rank, as under NCCL). */
  if (plugin_nch > 0) want = plugin_nch;
  for (int i = 0; i < v->nb_count; i++)
    if (v->nb_opts[i] <= want) nb = v->nb_opts[i];
  uint8_t algo = (uint8_t)choice.algo;
  /* NVLS all-reduce: the one-barrier plan while latency dominates. */
  if (choice.algo == BRD_ALGO_NVLS && coll == BRD_IR_COLL_ALLREDUCE &&
      brd_tune_nvls_lowlat(v->topo, bytes)) {
    algo |= BRD_ALGOS_LOWLAT;
    INFO(BRD_SUBSYS_COLL | BRD_SUBSYS_NVLS, "%s : rank %d: low-latency NVLS all-reduce "
         "(%zu bytes)", c->fn, me, bytes);
  }
  CHECK(brd_plans_get(plans, coll, algo, (uint8_t)choice.proto, nb, root,
                 v->deterministic, plan_out));
  *choice_out = choice;
  *nb_out = nb;
  return ncclSuccess;
}

/* See works.h. */
ncclResult_t brd_works_estimate(const brd_works_view_t *v, brd_plan_cache_t *plans,
                                const brd_call_t *c, int pipe_ops, float *us_out) {
  uint8_t coll = (uint8_t)c->coll;
  const brd_ir_plan_t *plan;
  brd_plan_user_t *user = library_choice(v, plans, c, coll, 1);
  if (user != NULL) {
    plan = user->plan;
  } else {
    brd_tune_choice_t choice;
    int nb = 0;
    CHECK(builtin_plan(v, plans, c, coll, pipe_ops, &choice, &nb, &plan));
  }
  brd_plan_cost_t pc;
  CHECK(brd_plan_cost_estimate(plan, v->topo, c->count, (int)c->dtype,
                               scratch_size(&v->win[v->rank], plan), &pc));
  *us_out = (float)pc.time_us;
  return ncclSuccess;
}

/* The executor's reduction op for call c (ncclSum where the collective
 * reduces nothing) and, for a premultiplied sum, its scalar: read on the
 * host through *scalar_out, or by the kernel through *scalar_dev_out
 * (the other one NULL, both NULL for other ops). */
static int call_redop(const brd_works_view_t *v, const brd_call_t *c, uint8_t coll,
                      const void **scalar_out, const void **scalar_dev_out) {
  *scalar_out = NULL;
  *scalar_dev_out = NULL;
  if (!is_reduction(coll)) return ncclSum;
  if (!c->premul) return (int)c->op;
  /* Host-immediate scalars travel inside the call (premul_scalar NULL);
   * a device-resident one is read where it is (host memory in host
   * mode, by the kernel in CUDA mode). */
  if (c->premul_scalar == NULL)
    *scalar_out = c->premul_value;
  else if (v->scalar_on_device)
    *scalar_dev_out = c->premul_scalar;
  else
    *scalar_out = c->premul_scalar;
  return BRD_REDOP_PREMULSUM;
}

/* Work w's channels for outputs exchanged per call: each channel's word
 * published on its peer, its slot here, and the peer's output at
 * off_bytes (remote NULL: no peer's output is reachable, all staged). */
static void piece_xchg(const brd_works_view_t *v, const brd_ir_plan_t *plan,
                       const uint64_t *remote, size_t off_bytes, brd_work_t *w) {
  int me = v->rank;
  const brd_ir_rank_t *pr = brd_ir_plan_rank(plan, me);
  for (uint32_t ch = 0; ch < pr->nchans; ch++) {
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    w->chans[ch].xchg_pub = (_Atomic uint64_t *)(v->base[p] + v->win[p].xchg_off) +
                            (size_t)me * BRD_IR_XCHG_WORDS;
    w->chans[ch].xchg_slot = (_Atomic uint64_t *)(v->base[me] + v->win[me].xchg_off) +
                             (size_t)p * BRD_IR_XCHG_WORDS;
    w->chans[ch].xchg_output = remote != NULL ? (char *)(uintptr_t)remote[p] + off_bytes : NULL;
  }
  w->args.xchg = 1;
}

/* Work w's switch channel (none in the plan: nothing) for the zero-copy
 * NVLS plan: the members' own buffers (host executor, simulator) and, on
 * a GPU, this rank's buffers through the windows' multicast mappings
 * mc_in, mc_out (device/ir.h, "Switch channels"; launch_cuda_run.c).
 * sw_in may be NULL; peer_out holds every member's output. */
static void piece_switch(const brd_works_view_t *v, const brd_ir_plan_t *plan, char **sw_in,
                         char **peer_out, void *mc_in, void *mc_out, brd_work_t *w) {
  int n = v->nranks;
  int sc = switch_chan(plan, v->rank);
  if (sc < 0) return;
  for (int m = 0; m < n; m++) {
    w->members[2 * n + m] = sw_in != NULL ? sw_in[m] : NULL;
    w->members[3 * n + m] = peer_out[m];
  }
  w->chans[sc].member_input = (const void *const *)(w->members + 2 * n);
  w->chans[sc].member_output = w->members + 3 * n;
  w->chans[sc].peer_input = mc_in;
  w->chans[sc].peer_output = mc_out;
}

/* The works of one collective call, one per piece, appended to ws; the
 * plan's channels reach the registered, exchanged or staged buffers that
 * this call may use. */
static ncclResult_t add_collective(const brd_works_view_t *v, brd_plan_cache_t *plans,
                                   brd_works_seq_t *seq, const brd_call_t *c, int pipe_ops,
                                   brd_works_t *ws) {
  int me = v->rank, n = v->nranks;
  uint8_t coll = (uint8_t)c->coll;
  size_t esize = brd_dtype_size(c->dtype);
  int root = is_rooted(coll) ? c->root : 0;
  brd_tune_choice_t choice;
  const brd_ir_plan_t *plan;
  int nb = v->nb_opts[0];
  brd_plan_user_t *user = library_choice(v, plans, c, coll, 0);
  if (user != NULL) {
    plan = user->plan;
    memset(&choice, 0, sizeof(choice));
  } else {
    CHECK(builtin_plan(v, plans, c, coll, pipe_ops, &choice, &nb, &plan));
  }
  const void *scalar, *scalar_dev;
  int redop = call_redop(v, c, coll, &scalar, &scalar_dev);
  int uses_input = brd_ir_coll_has_input(coll, me, root);
  int multi_in = brd_ir_coll_traits(coll).in_segs_all;
  int nout = !brd_ir_coll_has_output(coll, me, root) ? 0 : is_multi_out(coll) ? n : 1;
  const brd_window_rec_t *mw = &v->win[me];
  size_t piece = mw->stage_bytes / ((is_multi_out(coll) ? (size_t)n : 1) * esize);
  /* Registered output buffers on every rank: one piece written in place. */
  char **peer_out = NULL, **peer_in = NULL;
  /* The zero-copy NVLS plan's members' inputs and multicast addresses. */
  char **sw_in = NULL;
  void *mc_in = NULL, *mc_out = NULL;
  int sw_zc = 0;
  ncclResult_t res = direct_output(v, c, coll, &peer_out);
  if (res != ncclSuccess) return res;
  if (peer_out != NULL) piece = c->count;
  /* Registered without the symmetric promise: outputs exchanged per call,
   * pieces as for the staging (a peer may be staged). */
  uint64_t *remote = NULL;
  int xchg = 0;
  if (peer_out == NULL)
    CHECK_GOTO(exchange_output(v, c, coll, plan, &remote, &xchg), res, out);
  /* Registered inputs too: a zero-copy plan reads them in place (not
   * instead of a switch plan the tuner chose). */
  /* The switch reaches the user's windows themselves where NVLS runs
   * (or would win with them): no scratch, no copy; else the staged NVLS
   * plan, or a zero-copy plan over peers' inputs below. */
  if (peer_out != NULL && user == NULL && n > 1 && nvls_zc_wanted(v, c, coll, &choice)) {
    CHECK_GOTO(switch_io(v, c, coll, &sw_in, &mc_in, &mc_out, &sw_zc), res, out);
    if (sw_zc)
      CHECK_GOTO(brd_plans_get(plans, coll, BRD_IR_ALGO_NVLS | BRD_PLANS_ALGO_PEER,
                               BRD_IR_PROTO_SIMPLE, nb, 0, 0, &plan), res, out);
  }
  if (peer_out != NULL && user == NULL && choice.algo != BRD_ALGO_NVLS && !sw_zc) {
    uint8_t zc_algo = 0;
    CHECK_GOTO(peer_input(v, c, coll, peer_out, &peer_in, &zc_algo), res, out);
    if (peer_in != NULL)
      CHECK_GOTO(brd_plans_get(plans, coll, zc_algo, BRD_IR_PROTO_SIMPLE, nb, 0, 0, &plan), res,
                 out);
  }
  brd_plans_ran(plans, plan);
  if (brd_plan_scratch_bytes(plan) > scratch_size(mw, plan)) {
    WARN("%s : plan needs %zu %sscratch bytes, the window has %zu", c->fn,
         brd_plan_scratch_bytes(plan), plan->proto == BRD_IR_PROTO_LL ? "LL " : "",
         scratch_size(mw, plan));
    res = ncclInternalError;
    goto out;
  }

  for (size_t off = 0; off < c->count; off += piece) {
    size_t cnt = c->count - off < piece ? c->count - off : piece;
    brd_plan_layout_t layout;
    brd_work_t *w;
    CHECK_GOTO(brd_plan_layout_init(plan, cnt, c->dtype, scratch_size(mw, plan), &layout),
               res, out);
    CHECK_GOTO(brd_works_work_add(ws, plan, me, &w), res, out);
    /* CUDA mode: the kernels alternate phases on the device; the pointers
     * are the bases of both halves. */
    uint32_t phase = v->device_seq ? 0 : seq->phase;
    seq->phase ^= 1u;
    CHECK_GOTO(coll_chans(v, plan, phase, peer_out, w), res, out);
    if (xchg) piece_xchg(v, plan, remote, off * esize, w);
    if (sw_zc) piece_switch(v, plan, sw_in, peer_out, mc_in, mc_out, w);
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
      a->output = v->base[me] + mw->stage_off + phase * mw->stage_bytes;
    }
    a->scratch = v->base[me] + scratch_off(mw, plan);
    a->scratch_bytes = scratch_size(mw, plan);
    a->chans = w->chans;
    a->count = cnt;
    a->dtype = c->dtype;
    a->redop = redop;
    a->scalar = scalar;
    a->epoch = brd_plan_epoch_reserve(&seq->epoch_cursor,
                                      brd_plan_epoch_span(plan, &layout));
    a->phase = phase;
    a->abort_flag = v->abort_flag;
    a->port_failed = v->port_failed;
    a->port_bell = v->port_bell;
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
  free(sw_in);
  return res;
}

/* See works.h. */
ncclResult_t brd_works_build(const brd_works_view_t *v, brd_plan_cache_t *plans,
                             brd_works_seq_t *seq, const brd_call_t *calls, int ncalls,
                             brd_works_t *ws) {
  ws->stage_half = v->win[v->rank].stage_bytes;
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0 || c->coll == BRD_COLL_SEND || c->coll == BRD_COLL_RECV) continue;
    /* NCCL's numPipeOps: the calls of this collective in the launch. */
    int pipe_ops = 0;
    for (int j = 0; j < ncalls; j++)
      pipe_ops += calls[j].coll == c->coll && calls[j].count != 0;
    CHECK(add_collective(v, plans, seq, c, pipe_ops, ws));
  }
  return brd_works_add_p2p(v, seq, calls, ncalls, ws);
}

/* See works.h. */
int brd_work_own_seg(const brd_work_t *w) {
  const brd_call_t *c = w->call;
  int me = w->args.rank, out_seg, in_seg;
  switch ((int)c->coll) {
  case BRD_COLL_ALLGATHER: out_seg = me, in_seg = 0; break;
  case BRD_COLL_ALLTOALL: out_seg = me, in_seg = me; break;
  case BRD_COLL_BROADCAST: out_seg = 0, in_seg = 0; break;
  case BRD_COLL_GATHER: out_seg = c->root, in_seg = 0; break;
  case BRD_COLL_SCATTER: out_seg = 0, in_seg = c->root; break;
  default: return -1;
  }
  /* Elsewhere a rooted collective's answer is the root's input, not this
   * rank's, whatever its buffers. */
  if (brd_ir_coll_traits((unsigned)c->coll).rooted && me != c->root) return -1;
  if (w->nout <= out_seg || c->sendbuff == NULL) return -1;
  size_t seg = c->count * brd_dtype_size(c->dtype);
  const char *dst = (const char *)c->recvbuff + (size_t)out_seg * seg;
  const char *src = (const char *)c->sendbuff + (size_t)in_seg * seg;
  return dst == src ? out_seg : -1;
}
