/*
 * Braid: the plan cache; see plans.h.
 */
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "algos/algos.h"
#include "core/plans.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "plan/verify.h"

const uint8_t brd_plans_algos[BRD_PLANS_NALGOS] = {BRD_IR_ALGO_RING, BRD_IR_ALGO_TREE,
                                                  BRD_IR_ALGO_ONESHOT, BRD_IR_ALGO_TWOSHOT,
                                                  BRD_IR_ALGO_NVLS, BRD_ALGO_HIER};
const uint8_t brd_plans_protos[BRD_PLANS_NPROTOS] = {BRD_IR_PROTO_LL, BRD_IR_PROTO_SIMPLE};

/* See plans.h. */
uint32_t brd_plans_available(uint8_t coll, int det) {
  uint32_t avail = 0;
  for (int a = 0; a < BRD_PLANS_NALGOS; a++)
    if (brd_algos_available(coll, brd_plans_algos[a], det))
      avail |= BRD_ALGO_BIT(brd_plans_algos[a]);
  return avail;
}

/* See plans.h. */
void brd_plans_init(brd_plan_cache_t *c, int nranks) {
  memset(c, 0, sizeof(*c));
  c->nranks = nranks;
}

/* See plans.h. */
void brd_plans_fini(brd_plan_cache_t *c) {
  for (int i = 0; i < c->n; i++) brd_plan_destroy(c->e[i].plan);
  free(c->e);
  free(c->host);
  c->host = NULL;
  c->e = NULL;
  c->n = c->cap = 0;
}

/* See plans.h. */
ncclResult_t brd_plans_hosts_set(brd_plan_cache_t *c, const int *host) {
  size_t bytes = (size_t)c->nranks * sizeof(int);
  if (host == c->host || (host != NULL && c->host != NULL && memcmp(host, c->host, bytes) == 0))
    return ncclSuccess;
  int *copy = NULL;
  if (host != NULL) {
    copy = malloc(bytes);
    if (copy == NULL) {
      WARN("out of host memory for the node layout of %d ranks", c->nranks);
      return ncclSystemError;
    }
    memcpy(copy, host, bytes);
  }
  for (int i = 0; i < c->n; i++) brd_plan_destroy(c->e[i].plan);
  c->n = 0;
  c->last = -1;
  free(c->host);
  c->host = copy;
  return ncclSuccess;
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

static ncclResult_t generate(const brd_plan_cache_t *c, uint8_t coll, uint8_t algo,
                             uint8_t proto, int nblocks, int root, int det,
                             brd_ir_plan_t **plan_out) {
  brd_algos_args_t args = {c->nranks, NULL, nblocks, proto};
  return brd_algos_generate_hosts(coll, algo, &args, c->host, root, det, plan_out);
}

/* See plans.h. */
ncclResult_t brd_plans_get(brd_plan_cache_t *c, uint8_t coll, uint8_t algo, uint8_t proto,
                           int nblocks, int root, int det, const brd_ir_plan_t **plan_out) {
  brd_ir_coll_traits_t t = brd_ir_coll_traits(coll);
  if (!t.rooted) root = 0;
  if (!t.reduction) det = 0;
  if ((algo & ~BRD_ALGOS_LOWLAT) == BRD_IR_ALGO_NVLS) proto = BRD_IR_PROTO_SIMPLE;
  for (int i = 0; i < c->n; i++) {
    const brd_plan_entry_t *e = &c->e[i];
    if (e->coll == coll && e->algo == algo && e->proto == proto && e->det == det &&
        e->nblocks == nblocks && e->root == root) {
      c->last = i;
      *plan_out = e->plan;
      return ncclSuccess;
    }
  }
  brd_plan_entry_t *grown = brd_array_grow(c->e, c->n, &c->cap, sizeof(*c->e), 64);
  if (grown == NULL) {
    WARN("out of host memory growing the plan cache past %d plans", c->n);
    return ncclSystemError;
  }
  c->e = grown;
  brd_ir_plan_t *plan;
  CHECK(generate(c, coll, algo, proto, nblocks, root, det, &plan));
  if (brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_TUNING)) {
    const brd_algos_gen_t *g = brd_algos_find(coll, algo, det);
    INFO(BRD_SUBSYS_TUNING, "plan: %s, %s, %d blocks, %d ranks%s (%u chunks, %u slots)",
         g != NULL ? g->name : "?", plan->proto == BRD_IR_PROTO_LL ? "LL" : "Simple", nblocks,
         c->nranks, c->host != NULL ? " placed by node" : "", plan->nchunks, plan->nslots);
  }
  if (c->port != NULL) brd_plan_chans_mark(plan, c->port);
  ncclResult_t res = plan_check(plan);
  if (res != ncclSuccess) {
    brd_plan_destroy(plan);
    return res;
  }
  brd_plan_entry_t *e = &c->e[c->n++];
  e->coll = coll;
  e->algo = algo;
  e->proto = proto;
  e->det = (uint8_t)det;
  e->nblocks = (uint16_t)nblocks;
  e->root = (uint16_t)root;
  e->plan = plan;
  e->runs = 0;
  c->last = c->n - 1;
  *plan_out = plan;
  return ncclSuccess;
}

/* See plans.h. */
void brd_plans_ran(brd_plan_cache_t *c, const brd_ir_plan_t *plan) {
  if (c->last >= 0 && c->last < c->n && c->e[c->last].plan == plan) {
    c->e[c->last].runs++;
    return;
  }
  for (int i = 0; i < c->n; i++)
    if (c->e[i].plan == plan) {
      c->e[i].runs++;
      return;
    }
}
