/*
 * MSCCL++ device semaphores (sem_acquire / sem_release) as Braid barriers.
 *
 * MSCCL++'s executor gives each GPU the counting semaphores its
 * "semaphores" list declares ({init_value}), shared by the GPU's thread
 * blocks: sem_release adds 1 (release order), sem_acquire takes 1,
 * waiting while the value is 0 (acquire order). Pipelines use them to
 * hand each iteration's chunks from one thread block to the next.
 *
 * Braid's IR orders blocks of one rank only with BARRIER (every block of
 * the rank meets; signals and waits join ranks). Where each semaphore is
 * released by one thread block and acquired by one, as often per
 * iteration (so it holds init_value again at every launch's end), the
 * n-th acquire completes after release n - init_value, and that pairing
 * becomes barriers:
 *
 *   - a pair whose release and acquire lie in one iteration and in
 *     different Braid blocks is a barrier that the releasing block passes
 *     right after the release and the acquiring block right before the
 *     acquire; the pairs (and, in such plans, the plan's own barriers)
 *     are put in one order that agrees with every block's program order,
 *     and every block of the rank passes every barrier in that order
 *     (a block passes the ones it takes no part in just before its next
 *     own one, or after its last op);
 *   - a pair in one Braid block (thread blocks folded onto one) is
 *     ordered by program order, where the release comes first;
 *   - an acquire of a credit (n <= init_value) pairs with a release of an
 *     earlier iteration, or of an earlier launch (a rank's launches run
 *     one after another): it must already be ordered by the barriers
 *     above, or by program order.
 *
 * Every barrier is stronger than the semaphore it stands for, so results
 * are those of MSCCL++; blocks only overlap less. What cannot be said so
 * is refused: several thread blocks releasing (or acquiring) one
 * semaphore (which acquire takes which release is then a race), unequal
 * release and acquire counts, an order with a cycle, a credit the
 * barriers do not cover. The verifier checks the result like any plan.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/mscclpp_int.h"

static const char *const sev_name[] = {"sem_release", "sem_acquire", "barrier"};

static msblk_t *blk_of(mctx_t *c, int r, int b) { return &c->sb[(size_t)r * c->nb_out + b]; }

/* Points the message context at event e of gpu r. */
static void at_event(mctx_t *c, int r, const msev_t *e) {
  c->gpu = r;
  c->tb = e->tb;
  c->op = e->op;
  c->inner = e->inner;
  c->opname = sev_name[e->kind];
}

static ncclResult_t ev_add(mctx_t *c, int kind, int sem, int n) {
  msblk_t *sb = blk_of(c, c->gpu, c->blk);
  if (sb->nev == sb->cap) {
    int cap = sb->cap ? sb->cap * 2 : 16;
    msev_t *ev = realloc(sb->ev, (size_t)cap * sizeof(*ev));
    if (ev == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
    sb->ev = ev;
    sb->cap = cap;
  }
  msev_t *e = &sb->ev[sb->nev++];
  memset(e, 0, sizeof(*e));
  e->kind = kind;
  e->sem = sem;
  e->n = n;
  e->tb = c->tb;
  e->op = c->op;
  e->inner = c->inner;
  e->gen = -1;
  return ncclSuccess;
}

/* Build pass: the barriers of the block's next event. */
static ncclResult_t ev_emit(mctx_t *c) {
  msblk_t *sb = blk_of(c, c->gpu, c->blk);
  if (sb->cur >= sb->nev)
    return brd_mscclpp_fail(c, ncclInternalError, "more synchronisation than the dry pass saw");
  int emit = sb->ev[sb->cur++].emit;
  for (int i = 0; i < emit; i++) {
    ncclResult_t res = brd_plan_op_barrier(c->b, c->gpu, c->blk);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the barrier");
  }
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_sem_op(mctx_t *c, const brd_json_t *op, int kind) {
  if (c->sb == NULL) {
    c->sb = calloc((size_t)c->n * (size_t)c->nb_out, sizeof(*c->sb));
    if (c->sb == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  }
  if (kind == K_BARRIER) {
    if (c->pass == 0) return ev_add(c, SEV_BAR, -1, ++blk_of(c, c->gpu, c->blk)->nbar);
    return c->b != NULL ? ev_emit(c) : ncclSuccess;
  }
  const brd_json_t *ids;
  mgpu_t *g = &c->g[c->gpu];
  CHECK(brd_mscclpp_get_arr(c, op, "semaphore_ids", &ids));
  if (ids->n == 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "field \"semaphore_ids\" is empty");
  for (size_t i = 0; i < ids->n; i++) {
    const brd_json_t *id = &ids->kids[i];
    if (id->type != BRD_JSON_INT || id->i < 0 || id->i >= g->nsem)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "semaphore_ids[%zu] is not a semaphore of the gpu (it declares %d)",
                              i, g->nsem);
    /* Each listed semaphore is taken (or given) once, as MSCCL++'s
     * threads do one each. */
    if (c->b != NULL) {
      CHECK(ev_emit(c));
      continue;
    }
    if (c->pass != 0) continue;
    msem_t *s = &g->sem[id->i];
    int *who = kind == K_SEM_RELEASE ? &s->rel_tb : &s->acq_tb;
    if (*who >= 0 && *who != c->tb)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "semaphore %" PRId64 " is %s by thread blocks %d and %d: Braid pairs "
                              "each acquire with one release, which several %s make a race",
                              id->i, kind == K_SEM_RELEASE ? "released" : "acquired", *who, c->tb,
                              kind == K_SEM_RELEASE ? "releasers" : "acquirers");
    *who = c->tb;
    int n = kind == K_SEM_RELEASE ? ++s->nrel : ++s->nacq;
    CHECK(ev_add(c, kind == K_SEM_RELEASE ? SEV_REL : SEV_ACQ, (int)id->i, n));
  }
  return ncclSuccess;
}

/* The event of block b of gpu r that is the n-th (kind) of sem, or NULL. */
static msev_t *find_ev(mctx_t *c, int r, int kind, int sem, int n, int *blk_out) {
  for (int b = 0; b < c->nb_out; b++) {
    msblk_t *sb = blk_of(c, r, b);
    for (int i = 0; i < sb->nev; i++)
      if (sb->ev[i].kind == kind && sb->ev[i].sem == sem && sb->ev[i].n == n) {
        *blk_out = b;
        return &sb->ev[i];
      }
  }
  return NULL;
}

/* Gives every node event of gpu r its barrier (gen) in one order that
 * agrees with each block's program order; *g_out: the barriers. Nodes are
 * named by their first event (acquire of a pair, or barrier k): node id
 * = (kind, sem, n) of that event, compared through key(). */
typedef struct node {
  int kind, sem, n; /* SEV_ACQ pair (sem, n) or SEV_BAR k (n) */
  int gen;
  int preds;        /* unplaced predecessors */
} node_t;

static int node_find(const node_t *nd, int nn, int kind, int sem, int n) {
  for (int i = 0; i < nn; i++)
    if (nd[i].kind == kind && nd[i].sem == sem && nd[i].n == n) return i;
  return -1;
}

/* The node of a node event (-1: none). */
static int node_of(const mgpu_t *g, const node_t *nd, int nn, const msev_t *e) {
  if (e->gen < -1) return -1;
  if (e->kind == SEV_BAR) return node_find(nd, nn, SEV_BAR, -1, e->n);
  if (e->kind == SEV_ACQ) return node_find(nd, nn, SEV_ACQ, e->sem, e->n);
  /* A release pairs with acquire n + init. */
  return node_find(nd, nn, SEV_ACQ, e->sem, e->n + g->sem[e->sem].init);
}

static ncclResult_t order_gpu(mctx_t *c, int r, int *g_out) {
  mgpu_t *g = &c->g[r];
  int total = 0;
  for (int b = 0; b < c->nb_out; b++) total += blk_of(c, r, b)->nev;
  node_t *nd = calloc((size_t)total + 1, sizeof(*nd));
  if (nd == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  int nn = 0;
  ncclResult_t res = ncclSuccess;
  /* Nodes: barriers, and pairs across Braid blocks within an iteration.
   * An event that joins none gets gen -2. */
  for (int b = 0; b < c->nb_out && res == ncclSuccess; b++) {
    msblk_t *sb = blk_of(c, r, b);
    for (int i = 0; i < sb->nev && res == ncclSuccess; i++) {
      msev_t *e = &sb->ev[i];
      e->gen = -2;
      if (e->kind == SEV_BAR) {
        if (node_find(nd, nn, SEV_BAR, -1, e->n) < 0) nd[nn++] = (node_t){SEV_BAR, -1, e->n, -1, 0};
        e->gen = -1;
        continue;
      }
      const msem_t *s = &g->sem[e->sem];
      int acq = e->kind == SEV_ACQ ? e->n : e->n + s->init;
      int rel = acq - s->init;
      if (rel < 1 || acq > s->nacq) continue; /* a credit: checked below */
      int rb, ab;
      const msev_t *re = find_ev(c, r, SEV_REL, e->sem, rel, &rb);
      const msev_t *ae = find_ev(c, r, SEV_ACQ, e->sem, acq, &ab);
      if (rb == ab) {
        /* One Braid block: program order must put the release first. */
        if (e->kind == SEV_ACQ && re > ae) {
          at_event(c, r, e);
          res = brd_mscclpp_fail(c, ncclInvalidArgument,
                                 "acquire %d of semaphore %d waits for its release %d by thread "
                                 "block %d, which runs after it (thread blocks folded onto one "
                                 "Braid block run one after another)",
                                 acq, e->sem, rel, re->tb);
        }
        continue;
      }
      e->gen = -1;
      if (e->kind == SEV_ACQ) nd[nn++] = (node_t){SEV_ACQ, e->sem, acq, -1, 0};
    }
  }
  /* Predecessors: the node event before in each block's program order. */
  for (int b = 0; b < c->nb_out && res == ncclSuccess; b++) {
    msblk_t *sb = blk_of(c, r, b);
    int prev = -1;
    for (int i = 0; i < sb->nev; i++) {
      int k = node_of(g, nd, nn, &sb->ev[i]);
      if (k < 0) continue;
      if (prev >= 0 && prev != k) nd[k].preds++;
      prev = k;
    }
  }
  /* Kahn's order, first ready node first. A node's successors are the
   * next node events in the blocks where it occurs. */
  int placed = 0;
  while (res == ncclSuccess && placed < nn) {
    int k = -1;
    for (int i = 0; i < nn && k < 0; i++)
      if (nd[i].gen < 0 && nd[i].preds == 0) k = i;
    if (k < 0) {
      c->gpu = r;
      c->tb = c->op = c->inner = -1;
      res = brd_mscclpp_fail(c, ncclInvalidArgument,
                             "its thread blocks' sem_acquire/sem_release (and barriers) order "
                             "each other in a cycle: no barrier order agrees with all of them");
      break;
    }
    nd[k].gen = placed++;
    for (int b = 0; b < c->nb_out; b++) {
      msblk_t *sb = blk_of(c, r, b);
      for (int i = 0; i < sb->nev; i++) {
        if (node_of(g, nd, nn, &sb->ev[i]) != k) continue;
        for (int j = i + 1; j < sb->nev; j++) {
          int q = node_of(g, nd, nn, &sb->ev[j]);
          if (q < 0 || q == k) continue;
          nd[q].preds--;
          break;
        }
      }
    }
  }
  /* Each block passes the barriers it takes no part in as early as it
   * may: those before its first node at its start, the others right
   * after its node before them (a release precedes its node's barrier,
   * an acquire follows it; neither is an op of its own, so an event's
   * barriers are one run). Passing them late instead would hold the
   * other blocks' hand-offs until this block's later work, which may
   * wait on peers whose own order differs: a deadlock. */
  for (int b = 0; b < c->nb_out && res == ncclSuccess; b++) {
    msblk_t *sb = blk_of(c, r, b);
    int passed = nn, i0;
    for (i0 = 0; i0 < sb->nev; i0++) {
      int k = node_of(g, nd, nn, &sb->ev[i0]);
      if (k >= 0) {
        passed = nd[k].gen;
        break;
      }
    }
    sb->head = passed;
    for (int i = 0; i < sb->nev; i++) {
      msev_t *e = &sb->ev[i];
      int k = node_of(g, nd, nn, e), next = nn;
      e->before = passed;
      e->emit = 0;
      if (k < 0) continue;
      for (int j = i + 1; j < sb->nev; j++) {
        int q = node_of(g, nd, nn, &sb->ev[j]);
        if (q >= 0) {
          next = nd[q].gen;
          break;
        }
      }
      e->gen = nd[k].gen;
      e->emit = next - passed;
      passed = next;
    }
    sb->tail = nn - passed;
  }
  free(nd);
  if (res == ncclSuccess) *g_out = nn;
  return res;
}

/* A credit acquire (n <= init) of gpu r, in iteration it, pairs with a
 * release q iterations back (or of an earlier launch, which a rank's
 * launch order covers); that release must precede a barrier the acquire
 * follows: (it - q) G + before(release) <= it G + before(acquire) - 1.
 * Returns the first acquire that fails it (NULL: none). */
static const msev_t *uncovered_credit(mctx_t *c, int r, int G, const msev_t **rel_out, int *q_out) {
  mgpu_t *g = &c->g[r];
  for (int b = 0; b < c->nb_out; b++) {
    msblk_t *sb = blk_of(c, r, b);
    for (int i = 0; i < sb->nev; i++) {
      const msev_t *a = &sb->ev[i];
      if (a->kind != SEV_ACQ) continue;
      const msem_t *s = &g->sem[a->sem];
      int j = a->n - s->init;
      if (j >= 1) continue;
      int q = (1 - j + s->nrel - 1) / s->nrel;
      int rb;
      const msev_t *re = find_ev(c, r, SEV_REL, a->sem, j + q * s->nrel, &rb);
      if (re == NULL || rb == b) continue;
      if ((int64_t)re->before + 1 <= (int64_t)a->before + (int64_t)q * G) continue;
      *rel_out = re;
      *q_out = q;
      return a;
    }
  }
  return NULL;
}

/* Credits the barriers do not cover get one more barrier, after every
 * block's last op: a release then precedes it, and an acquire of a later
 * iteration follows it. */
static ncclResult_t check_credits(mctx_t *c, int r, int G) {
  const msev_t *re, *a;
  int q;
  if (uncovered_credit(c, r, G, &re, &q) == NULL) return ncclSuccess;
  for (int b = 0; b < c->nb_out; b++) blk_of(c, r, b)->tail++;
  if ((a = uncovered_credit(c, r, G + 1, &re, &q)) == NULL) return ncclSuccess;
  at_event(c, r, a);
  return brd_mscclpp_fail(c, ncclInvalidArgument,
                          "acquire %d of semaphore %d (init_value %d) takes a release by thread "
                          "block %d %d iteration(s) earlier, which no barrier of the "
                          "translation orders before it",
                          a->n, a->sem, c->g[r].sem[a->sem].init, re->tb, q);
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_sem_plan(mctx_t *c) {
  if (c->sb == NULL) return ncclSuccess;
  for (int r = 0; r < c->n; r++) {
    mgpu_t *g = &c->g[r];
    c->gpu = r;
    c->tb = c->op = c->inner = -1;
    for (int k = 0; k < g->nsem; k++) {
      const msem_t *s = &g->sem[k];
      if (s->nrel == s->nacq) continue;
      /* Point at the first op of the one in excess. */
      int kind = s->nrel < s->nacq ? SEV_ACQ : SEV_REL, n = (s->nrel < s->nacq ? s->nrel : s->nacq) + 1;
      int b;
      const msev_t *e = find_ev(c, r, kind, k, n, &b);
      if (e != NULL) at_event(c, r, e);
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "semaphore %d is released %d and acquired %d times per iteration: "
                              "%s %d has no %s (Braid needs the counts equal; MSCCL++'s value "
                              "would drift from launch to launch)",
                              k, s->nrel, s->nacq, kind == SEV_ACQ ? "acquire" : "release", n,
                              kind == SEV_ACQ ? "release" : "acquire");
    }
    int G = 0;
    CHECK(order_gpu(c, r, &G));
    CHECK(check_credits(c, r, G));
  }
  c->gpu = c->tb = c->op = c->inner = -1;
  return ncclSuccess;
}

static ncclResult_t emit_n(mctx_t *c, int r, int b, int n) {
  for (int i = 0; i < n; i++) {
    ncclResult_t res = brd_plan_op_barrier(c->b, r, b);
    if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the barrier");
  }
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_sem_head(mctx_t *c) {
  if (c->sb == NULL || c->b == NULL) return ncclSuccess;
  msblk_t *sb = blk_of(c, c->gpu, c->blk);
  if (sb->started) return ncclSuccess;
  sb->started = 1;
  return emit_n(c, c->gpu, c->blk, sb->head);
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_sem_tail(mctx_t *c, int r) {
  if (c->sb == NULL || c->b == NULL) return ncclSuccess;
  for (int b = 0; b < c->nb_out; b++) {
    msblk_t *sb = blk_of(c, r, b);
    if (sb->cur != sb->nev)
      return brd_mscclpp_fail(c, ncclInternalError, "less synchronisation than the dry pass saw");
    if (!sb->started) CHECK(emit_n(c, r, b, sb->head));
    sb->started = 1;
    for (int i = 0; i < sb->tail; i++) {
      ncclResult_t res = brd_plan_op_barrier(c->b, r, b);
      if (res != ncclSuccess) return brd_mscclpp_fail(c, res, "the plan builder refuses the barrier");
    }
  }
  return ncclSuccess;
}

/* See mscclpp_int.h. */
void brd_mscclpp_sem_free(mctx_t *c) {
  if (c->sb == NULL) return;
  for (size_t i = 0; i < (size_t)c->n * (size_t)c->nb_out; i++) free(c->sb[i].ev);
  free(c->sb);
  c->sb = NULL;
}
