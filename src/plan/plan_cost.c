/*
 * Braid: a plan's cost from its ops (plan_cost.h).
 *
 * Every (rank, block) is a stream that runs its op list once per
 * iteration. A stream's clock starts at 0 and each op moves it on:
 *
 *   data op      + (bytes through each channel it names) / rate of that
 *                  channel's link; local refs cost nothing (memory is far
 *                  faster than the links);
 *   SIGNAL       costs nothing here; the semaphore's new value reaches the
 *                  peer one hop later (lat x step[proto]);
 *   WAIT         clock = max(clock, arrival of the first value >= target);
 *   LL source    as WAIT, on the flags an LL write stored one hop after it
 *                  ended (no hop for a local LL write);
 *   BARRIER      every block of the rank leaves at the latest arrival;
 *   MC_BARRIER   every rank leaves one switch hop after the latest arrival.
 *
 * rate = link GB/s x 1000 x eff[proto] / blocks (the blocks share a rank's
 * links); the link is intra_bw / ranks_per_device inside a node, inter_bw /
 * ranks_per_device between nodes (or, with NIC counts, the node's NICs
 * shared by the node's ranks that reach another node in the plan), nvls_bw
 * over a switch channel. step[] and eff[] are the tuner's protocol factors
 * for the topology (tune.c: host mode has its own), and the launch costs
 * the tuner's launch for the plan's blocks (brd_tune_launch_us), so the
 * two estimates speak the same units. Each stream also counts the
 * sync hops of the longest chain of them that reaches it (a SIGNAL, a
 * remote LL write or a switch barrier adds one); the launch's count is the
 * longest chain's. Contention between streams on one link is not modelled beyond
 * the equal share.
 *
 * Iterations: up to BRD_PLAN_COST_ITERS are simulated; a longer launch
 * adds the last simulated iteration's increment for each further window
 * (fractionally for the short last one).
 *
 * Host mode (topo->host_mode on one host: ranks are CPU threads sharing
 * the host's cores, exec_host.c) follows how that executor runs:
 *
 *   - a rank that waits spins, yields and naps, so its core goes to the
 *     ranks that can copy: copies overlap the waits of other ranks and
 *     the host's copy rate is spent on whoever copies. The estimate is
 *     the sync chain (the simulation with data ops free: hops, LL flags,
 *     barriers) plus the busiest rank's bytes at its share of the host's
 *     copy rate (link_us), as the tuner adds its latency and wire terms,
 *     rather than one rank's copies chained through a tree's levels;
 *   - a copy runs at the plan's pattern's own rate (host.fit_ring,
 *     host.fit_tree, host.fit_twoshot by the plan's algo field:
 *     brd_tune_host_fit);
 *   - ops that wait back to back (WAITs, LL reads) and together wait on
 *     every other rank add host.fan_per_peer x (n - 1) x L once
 *     (brd_tune_host_fan_us, the tuner's own term): each
 *     peer is a thread the cores must get to (the tuner's direct-pattern
 *     fan; waits on fewer peers are plain hops);
 *   - a chunk with no elements in an iteration is neither written nor
 *     read (run_data skips it), so its LL packets carry no flag to wait on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"
#include "device/layout.h"
#include "plan/plan_cost.h"

/* The tuner's NVLS fit (tune.h). */
#define NVLS_FIT brd_tune_algo_fit(BRD_ALGO_NVLS)

enum { KIND_INTRA = 0, KIND_INTER = 1, KIND_SWITCH = 2, NKINDS = 3 };

/* One arrival: a semaphore value, an LL flag, a barrier generation. */
typedef struct {
  int64_t key;
  int count; /* barriers: arrivals so far */
  double t;  /* when it is visible to the waiter */
  uint64_t h;
  int from;  /* the rank whose op made it */
} ev_t;

typedef struct {
  ev_t *v;
  size_t n, cap;
} evlist_t;

typedef struct {
  uint32_t pc, it;
  double t;
  uint64_t h;
  uint32_t nbar;  /* BARRIERs passed */
  uint32_t run;   /* host: ordinal of the current run of waiting ops */
  int npeers;     /* host: distinct peers that run has waited on */
  int waited;     /* host: the op being run waited on a peer */
  int arrived;    /* counted at the barrier it is blocked on */
  int done;
} stream_t;

typedef struct {
  const brd_ir_plan_t *p;
  const brd_tune_topo_t *topo;
  brd_plan_layout_t l;
  uint32_t nsim;
  size_t count;       /* elements per segment, as given */
  int n, B;
  int host;           /* host mode on one host (see "Host mode" above) */
  int free_data;      /* this pass: data ops take no time (the sync chain) */
  double fan_us;      /* host: what a wait on every other rank adds */
  uint32_t *seen;     /* host: [n * B][n] run + 1 of a stream's last wait on a peer */
  double rate[NKINDS], lat[NKINDS]; /* per block: bytes/us; per hop: us */
  double rank_rate[NKINDS];         /* per rank, for link_us */
  int *back;          /* [nchans] the peer's channel back to the rank, or -1 */
  evlist_t *sems;     /* [nchans * nsems], by the waiter's channel */
  evlist_t *ll;       /* [n * nslots] */
  evlist_t *bars;     /* [n] rank barriers by generation */
  evlist_t *swbars;   /* [nsems] switch barriers by value */
  stream_t *s;        /* [n * B] */
  double *chan_bytes; /* [nchans] */
  double *link_bytes; /* [n][2 kinds][out, in] */
  double *node_out;   /* [nnodes] inter-node bytes leaving each node */
  double *iter_t;     /* [nsim] latest end of each iteration */
  uint64_t *iter_h;
} sim_t;

static int ev_push(evlist_t *e, int64_t key, double t, uint64_t h, int from) {
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 8;
    ev_t *v = realloc(e->v, cap * sizeof(*v));
    if (v == NULL) return -1;
    e->v = v;
    e->cap = cap;
  }
  e->v[e->n].key = key;
  e->v[e->n].count = 1;
  e->v[e->n].t = t;
  e->v[e->n].h = h;
  e->v[e->n].from = from;
  e->n++;
  return 0;
}

static ev_t *ev_find(evlist_t *e, int64_t key) {
  for (size_t i = 0; i < e->n; i++)
    if (e->v[i].key == key) return &e->v[i];
  return NULL;
}

/* The earliest arrival with key >= want (a semaphore only grows). */
static const ev_t *ev_first_at_least(const evlist_t *e, int64_t want) {
  const ev_t *best = NULL;
  for (size_t i = 0; i < e->n; i++)
    if (e->v[i].key >= want && (best == NULL || e->v[i].t < best->t)) best = &e->v[i];
  return best;
}

static void evlists_free(evlist_t *e, size_t n) {
  if (e == NULL) return;
  for (size_t i = 0; i < n; i++) free(e[i].v);
  free(e);
}

static int node_of(const sim_t *m, int rank) {
  return m->topo->local_nranks > 0 ? rank / m->topo->local_nranks : 0;
}

static int chan_kind(const sim_t *m, int rank, int chan) {
  const brd_ir_chan_t *c = brd_ir_plan_chan(m->p, rank, chan);
  if (c->type == BRD_IR_CHAN_SWITCH) return KIND_SWITCH;
  return node_of(m, rank) == node_of(m, c->peer) ? KIND_INTRA : KIND_INTER;
}

static int64_t seq_of(const sim_t *m, uint32_t it, int32_t k) {
  return (int64_t)it * m->p->seq_per_iter + k;
}

/* Bytes op moves per reference in iteration it. */
static double op_bytes(const sim_t *m, const brd_ir_op_t *op, uint32_t it) {
  size_t total = 0;
  for (uint32_t t = 0; t < op->nchunks; t++) {
    size_t start, cnt;
    brd_plan_layout_chunk(&m->l, it, op->chunk + t, &start, &cnt);
    total += cnt;
  }
  return (double)total * (double)m->l.esize;
}

/* Accounts b bytes from rank `from` to rank `to` over link kind. */
static void link_add(sim_t *m, int from, int to, int kind, double b) {
  if (kind == KIND_SWITCH) kind = KIND_INTRA;
  m->link_bytes[((size_t)from * 2 + kind) * 2 + 0] += b;
  m->link_bytes[((size_t)to * 2 + kind) * 2 + 1] += b;
  if (kind == KIND_INTER) m->node_out[node_of(m, from)] += b;
}

/* Host: stream s (index si) has waited on peer. Ops that wait back to
 * back form one run; the run that has waited on every other rank (a
 * direct pattern's hop) costs the fan once. */
static void wait_on(sim_t *m, stream_t *s, int si, int peer) {
  if (!m->host || peer < 0 || peer >= m->n || peer == si / m->B) return;
  s->waited = 1;
  uint32_t *seen = &m->seen[(size_t)si * m->n + peer];
  if (*seen == s->run + 1) return;
  *seen = s->run + 1;
  if (++s->npeers == m->n - 1 && m->n > 2) s->t += m->fan_us;
}

/* Elements of chunk c of op in iteration it. */
static size_t chunk_count(const sim_t *m, const brd_ir_op_t *op, uint32_t it, uint32_t c) {
  size_t start, cnt;
  brd_plan_layout_chunk(&m->l, it, op->chunk + c, &start, &cnt);
  return cnt;
}

/* The latest LL flag arrival op's LL sources need; -1 when one is not
 * written yet. from_out[*nwait_out]: the writers it waits on. In host mode a
 * chunk with no elements in this iteration is skipped: the executor
 * neither writes nor reads its packets (exec_host.c, run_data). */
static int ll_ready(sim_t *m, int r, const brd_ir_op_t *op, uint32_t it, double *t_out,
                    uint64_t *h_out, int from_out[BRD_IR_MAX_REFS], int *nwait_out) {
  double t = -1.0;
  uint64_t h = 0;
  int nwait = 0;
  for (int i = 0; i < op->nsrc; i++) {
    brd_ir_ref_t ref = op->ref[i];
    if (!(ref.buf & BRD_IR_REF_LL) || (ref.buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SCRATCH)
      continue;
    int from = -1;
    for (uint32_t c = 0; c < op->nchunks; c++) {
      uint32_t slot = ref.index + c;
      if (slot >= m->p->nslots) continue;
      if (m->host && chunk_count(m, op, it, c) == 0) continue;
      ev_t *e = ev_find(&m->ll[(size_t)r * m->p->nslots + slot], seq_of(m, it, op->k_src));
      if (e == NULL) return -1;
      if (e->t > t) t = e->t;
      if (e->h > h) h = e->h;
      from = e->from;
    }
    if (from >= 0 && nwait < BRD_IR_MAX_REFS) from_out[nwait++] = from;
  }
  *t_out = t;
  *h_out = h;
  *nwait_out = nwait;
  return 0;
}

/* Runs one data or switch-data op of stream (r, b). 1: done, 0: blocked,
 * -1: out of memory. */
static int step_data(sim_t *m, stream_t *s, int si, int r, const brd_ir_op_t *op) {
  double ready;
  uint64_t rh;
  int from[BRD_IR_MAX_REFS], nwait;
  if (ll_ready(m, r, op, s->it, &ready, &rh, from, &nwait) < 0) return 0;
  if (ready > s->t) s->t = ready;
  if (rh > s->h) s->h = rh;
  for (int i = 0; i < nwait; i++) wait_on(m, s, si, from[i]);
  double b = op_bytes(m, op, s->it), dur = 0.0;
  const brd_ir_rank_t *rk = brd_ir_plan_rank(m->p, r);
  for (int i = 0; i < op->nsrc + op->ndst && i < BRD_IR_MAX_REFS; i++) {
    brd_ir_ref_t ref = op->ref[i];
    if (ref.chan == BRD_IR_CHAN_LOCAL || ref.chan >= rk->nchans) continue;
    int kind = chan_kind(m, r, ref.chan);
    int peer = brd_ir_plan_chan(m->p, r, ref.chan)->peer;
    dur += b / m->rate[kind];
    m->chan_bytes[rk->chan_first + ref.chan] += b;
    if (kind == KIND_SWITCH) {
      link_add(m, r, r, kind, b);
    } else if (i < op->nsrc) {
      link_add(m, peer, r, kind, b);
    } else {
      link_add(m, r, peer, kind, b);
    }
  }
  if (!m->free_data) s->t += dur;
  /* LL destinations: the flags land one hop later on a peer. */
  for (int i = op->nsrc; i < op->nsrc + op->ndst && i < BRD_IR_MAX_REFS; i++) {
    brd_ir_ref_t ref = op->ref[i];
    if (!(ref.buf & BRD_IR_REF_LL) || (ref.buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SCRATCH)
      continue;
    int local = ref.chan == BRD_IR_CHAN_LOCAL || ref.chan >= rk->nchans;
    int to = local ? r : brd_ir_plan_chan(m->p, r, ref.chan)->peer;
    if (to < 0 || to >= m->n) continue;
    double at = local ? s->t : s->t + m->lat[chan_kind(m, r, ref.chan)];
    for (uint32_t c = 0; c < op->nchunks; c++) {
      uint32_t slot = ref.index + c;
      if (slot >= m->p->nslots) continue;
      if (m->host && chunk_count(m, op, s->it, c) == 0) continue;
      if (ev_push(&m->ll[(size_t)to * m->p->nslots + slot], seq_of(m, s->it, op->k), at,
                  s->h + (local ? 0 : 1), r) < 0)
        return -1;
    }
  }
  return 1;
}

/* Arrives at a barrier (list e, key) once; 1 when all `need` arrived, with
 * the latest arrival in *ev_out. -1: out of memory. */
static int barrier_arrive(stream_t *s, evlist_t *e, int64_t key, int need, ev_t **ev_out) {
  ev_t *ev = ev_find(e, key);
  if (!s->arrived) {
    if (ev == NULL) {
      if (ev_push(e, key, s->t, s->h, -1) < 0) return -1;
      ev = &e->v[e->n - 1];
    } else {
      ev->count++;
      if (s->t > ev->t) ev->t = s->t;
      if (s->h > ev->h) ev->h = s->h;
    }
    s->arrived = 1;
  }
  *ev_out = ev;
  return ev->count >= need;
}

/* Runs the op at stream (r, b)'s pc. 1: done, 0: blocked, -1: out of
 * memory. */
static int step(sim_t *m, stream_t *s, int si, int r, const brd_ir_op_t *op) {
  const brd_ir_rank_t *rk = brd_ir_plan_rank(m->p, r);
  switch (op->code) {
  case BRD_IR_OP_SIGNAL: {
    brd_ir_ref_t ref = op->ref[0];
    if (ref.chan >= rk->nchans) return 1;
    int d = m->back[rk->chan_first + ref.chan];
    int peer = brd_ir_plan_chan(m->p, r, ref.chan)->peer;
    if (d < 0 || ref.index >= m->p->nsems) return 1;
    size_t key = ((size_t)brd_ir_plan_rank(m->p, peer)->chan_first + (size_t)d) * m->p->nsems +
                 ref.index;
    return ev_push(&m->sems[key], seq_of(m, s->it, op->k),
                   s->t + m->lat[chan_kind(m, r, ref.chan)], s->h + 1, r) < 0 ? -1 : 1;
  }
  case BRD_IR_OP_WAIT: {
    brd_ir_ref_t ref = op->ref[0];
    int64_t want = seq_of(m, s->it, op->k);
    if (want <= 0 || ref.chan >= rk->nchans || ref.index >= m->p->nsems) return 1;
    const ev_t *e = ev_first_at_least(
        &m->sems[((size_t)rk->chan_first + ref.chan) * m->p->nsems + ref.index], want);
    if (e == NULL) return 0;
    if (e->t > s->t) s->t = e->t;
    if (e->h > s->h) s->h = e->h;
    wait_on(m, s, si, brd_ir_plan_chan(m->p, r, ref.chan)->peer);
    return 1;
  }
  case BRD_IR_OP_BARRIER: {
    ev_t *ev;
    int rc = barrier_arrive(s, &m->bars[r], s->nbar, m->B, &ev);
    if (rc <= 0) return rc;
    if (ev->t > s->t) s->t = ev->t;
    if (ev->h > s->h) s->h = ev->h;
    s->nbar++;
    s->arrived = 0;
    return 1;
  }
  case BRD_IR_OP_MC_BARRIER: {
    ev_t *ev;
    brd_ir_ref_t ref = op->ref[0];
    if (ref.index >= m->p->nsems) return 1;
    int rc = barrier_arrive(s, &m->swbars[ref.index], seq_of(m, s->it, op->k), m->n, &ev);
    if (rc <= 0) return rc;
    s->t = ev->t + m->lat[KIND_SWITCH];
    s->h = ev->h + 1;
    s->arrived = 0;
    return 1;
  }
  default:
    if (brd_ir_op_is_data(op->code) || brd_ir_op_is_switch(op->code))
      return step_data(m, s, si, r, op);
    return 1; /* NOP, FLUSH */
  }
}

/* Runs every stream to its end. 0, or -1 out of memory, -2 stuck. */
static int run(sim_t *m) {
  int left = m->n * m->B;
  while (left > 0) {
    int progress = 0;
    for (int r = 0; r < m->n; r++) {
      for (int b = 0; b < m->B; b++) {
        stream_t *s = &m->s[r * m->B + b];
        const brd_ir_op_t *ops = brd_ir_plan_ops(m->p, r, b);
        uint32_t nops = brd_ir_plan_block(m->p, r, b)->nops;
        while (!s->done) {
          if (s->pc == nops) {
            if (s->t > m->iter_t[s->it]) m->iter_t[s->it] = s->t;
            if (s->h > m->iter_h[s->it]) m->iter_h[s->it] = s->h;
            s->pc = 0;
            if (++s->it == m->nsim || nops == 0) {
              s->done = 1;
              left--;
              progress = 1;
            }
            continue;
          }
          s->waited = 0;
          int rc = step(m, s, r * m->B + b, r, &ops[s->pc]);
          if (rc < 0) return -1;
          if (rc == 0) break;
          if (!s->waited) {
            s->run++; /* an op that waits on no peer ends the run */
            s->npeers = 0;
          }
          s->pc++;
          progress = 1;
        }
      }
    }
    if (!progress) return -2;
  }
  return 0;
}

static void sim_free(sim_t *m) {
  size_t nchans = m->p->nchans;
  free(m->back);
  evlists_free(m->sems, nchans * m->p->nsems);
  evlists_free(m->ll, (size_t)m->n * m->p->nslots);
  evlists_free(m->bars, (size_t)m->n);
  evlists_free(m->swbars, m->p->nsems);
  free(m->s);
  free(m->chan_bytes);
  free(m->link_bytes);
  free(m->node_out);
  free(m->iter_t);
  free(m->iter_h);
  free(m->seen);
}

/* Per-block and per-rank link rates, and per-hop latencies. */
static void rates_init(sim_t *m) {
  const brd_tune_topo_t *t = m->topo;
  double rpd = t->ranks_per_device, eff = brd_tune_proto_eff(t, m->p->proto);
  double step = brd_tune_proto_step(t, m->p->proto);
  double inter = t->inter_bw / rpd;
  if (t->inter_nics > 0) {
    /* A node's NICs are shared by the ranks of the node that reach
     * another node in this plan (a ring crosses at one rank per node,
     * which then has them all, as the tuner's node-egress term assumes). */
    int most = 1;
    for (int nd = 0; nd < t->nnodes; nd++) {
      int users = 0;
      for (int r = 0; r < m->n; r++) {
        if (node_of(m, r) != nd) continue;
        const brd_ir_rank_t *rk = brd_ir_plan_rank(m->p, r);
        for (uint32_t c = 0; c < rk->nchans; c++)
          if (chan_kind(m, r, (int)c) == KIND_INTER) {
            users++;
            break;
          }
      }
      if (users > most) most = users;
    }
    inter = t->inter_nics * (double)t->inter_bw / most;
  }
  double sw = (t->nvls_bw > 0.0f ? t->nvls_bw : t->intra_bw * NVLS_FIT) / rpd;
  if (m->host) {
    /* The pattern's own copy rate, and the fan of a wait on every other
     * rank: the tuner's own rules (tune.h; m->n is local_nranks here). */
    eff *= brd_tune_host_fit(m->p->algo);
    m->fan_us = brd_tune_host_fan_us(t->local_nranks) * step;
  }
  m->rank_rate[KIND_INTRA] = t->intra_bw / rpd * 1000.0 * eff;
  m->rank_rate[KIND_INTER] = inter * 1000.0 * eff;
  m->rank_rate[KIND_SWITCH] = sw * 1000.0 * eff;
  for (int k = 0; k < NKINDS; k++) m->rate[k] = m->rank_rate[k] / m->B;
  m->lat[KIND_INTRA] = t->intra_lat * step;
  m->lat[KIND_INTER] = t->inter_lat * step;
  m->lat[KIND_SWITCH] = (t->nvls_lat > 0.0f ? t->nvls_lat : t->intra_lat) * step;
}

/* Busiest rank link's bytes over its rate (scale: simulated to launch). */
static double link_time(const sim_t *m, double scale) {
  double worst = 0.0;
  for (int r = 0; r < m->n; r++)
    for (int k = 0; k < 2; k++)
      for (int d = 0; d < 2; d++) {
        double b = m->link_bytes[((size_t)r * 2 + k) * 2 + d] * scale;
        if (k == KIND_INTER && m->topo->inter_nics > 0) continue;
        if (b > 0.0 && m->rank_rate[k] > 0.0 && b / m->rank_rate[k] > worst)
          worst = b / m->rank_rate[k];
      }
  if (m->topo->inter_nics > 0) {
    double node_rate = m->topo->inter_nics * (double)m->topo->inter_bw * 1000.0 *
                       brd_tune_proto_eff(m->topo, m->p->proto);
    for (int i = 0; i < m->topo->nnodes; i++)
      if (m->node_out[i] * scale / node_rate > worst) worst = m->node_out[i] * scale / node_rate;
  }
  return worst;
}

/* One pass of the simulation (m->free_data says which): the critical
 * path's end in *t_out and its sync hops in *h_out, extrapolated to the
 * launch's windows, and link_us and busiest_chan_bytes in *out. m holds
 * the plan, topology, layout and mode; its working memory is its own. */
static ncclResult_t sim_pass(sim_t *m, double *t_out, double *h_out, brd_plan_cost_t *out) {
  const brd_ir_plan_t *plan = m->p;
  size_t nchans = plan->nchans;
  ncclResult_t res = ncclSuccess;
  m->back = malloc((nchans ? nchans : 1) * sizeof(*m->back));
  m->sems = calloc(nchans * plan->nsems + 1, sizeof(*m->sems));
  m->ll = calloc((size_t)m->n * plan->nslots + 1, sizeof(*m->ll));
  m->bars = calloc((size_t)m->n, sizeof(*m->bars));
  m->swbars = calloc((size_t)plan->nsems + 1, sizeof(*m->swbars));
  m->s = calloc((size_t)m->n * m->B, sizeof(*m->s));
  m->chan_bytes = calloc(nchans + 1, sizeof(*m->chan_bytes));
  m->link_bytes = calloc((size_t)m->n * 4, sizeof(*m->link_bytes));
  m->node_out = calloc((size_t)m->topo->nnodes + 1, sizeof(*m->node_out));
  m->iter_t = calloc(m->nsim, sizeof(*m->iter_t));
  m->iter_h = calloc(m->nsim, sizeof(*m->iter_h));
  m->seen = m->host ? calloc((size_t)m->n * m->B * m->n, sizeof(*m->seen)) : NULL;
  if ((m->host && !m->seen) || !m->back || !m->sems || !m->ll || !m->bars || !m->swbars || !m->s || !m->chan_bytes ||
      !m->link_bytes || !m->node_out || !m->iter_t || !m->iter_h) {
    WARN("plan cost: out of memory for a plan of %u ranks and %u ops", plan->nranks, plan->nops);
    res = ncclSystemError;
    goto out;
  }
  /* Which channel of the peer leads back (the verifier's pairing). */
  for (int r = 0; r < m->n; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(plan, r);
    for (uint32_t c = 0; c < rk->nchans; c++) {
      int peer = brd_ir_plan_chan(plan, r, (int)c)->peer;
      m->back[rk->chan_first + c] = -1;
      if (peer < 0 || peer >= m->n) continue;
      const brd_ir_rank_t *pk = brd_ir_plan_rank(plan, peer);
      for (uint32_t d = 0; d < pk->nchans; d++)
        if (brd_ir_plan_chan(plan, peer, (int)d)->peer == r) m->back[rk->chan_first + c] = (int)d;
    }
  }
  int rc = run(m);
  if (rc == -1) {
    WARN("plan cost: out of memory simulating a plan of %u ranks", plan->nranks);
    res = ncclSystemError;
    goto out;
  }
  if (rc == -2) {
    WARN("plan cost: the plan's ops never complete (a WAIT or LL read that nothing "
         "satisfies); run the verifier on it (braid-plan -V)");
    res = ncclInvalidArgument;
    goto out;
  }
  double t = m->iter_t[m->nsim - 1];
  double h = (double)m->iter_h[m->nsim - 1];
  double scale = 1.0;
  if (m->l.niter > m->nsim) {
    /* Windows past the simulated ones (the last may be short), at the
     * steady increment of the last simulated one. */
    double windows = (double)m->count / (double)m->l.window;
    double extra = windows - m->nsim;
    if (extra < 0.0) extra = 0.0;
    t += extra * (m->iter_t[m->nsim - 1] - m->iter_t[m->nsim - 2]);
    double dh = (double)m->iter_h[m->nsim - 1] - (double)m->iter_h[m->nsim - 2];
    if (dh > 0.0) h += extra * dh;
    scale = windows / m->nsim;
  }
  *t_out = t;
  *h_out = h;
  out->link_us = link_time(m, scale);
  double busiest = 0.0;
  for (size_t c = 0; c < nchans; c++)
    if (m->chan_bytes[c] > busiest) busiest = m->chan_bytes[c];
  out->busiest_chan_bytes = (uint64_t)llround(busiest * scale);
out:
  sim_free(m);
  return res;
}

/* See plan_cost.h. */
ncclResult_t brd_plan_cost_estimate(const brd_ir_plan_t *plan, const brd_tune_topo_t *topo,
                                    size_t count, int dtype, size_t scratch_bytes,
                                    brd_plan_cost_t *cost_out) {
  if (plan == NULL || topo == NULL || cost_out == NULL) {
    WARN("plan cost: NULL argument");
    return ncclInvalidArgument;
  }
  /* The tuner's own check of the topology (a ring all-reduce runs on any
   * topology it accepts). */
  if (brd_tune_estimate(topo, BRD_COLL_ALLREDUCE, 1, BRD_ALGO_RING, BRD_PROTO_SIMPLE) < 0.0f ||
      topo->nranks != plan->nranks) {
    WARN("plan cost: the topology (%d ranks) is malformed or does not fit the plan's %u "
         "ranks; describe the communicator the plan runs on", topo->nranks, plan->nranks);
    return ncclInvalidArgument;
  }
  sim_t m;
  memset(&m, 0, sizeof(m));
  m.p = plan;
  m.topo = topo;
  m.n = plan->nranks;
  m.B = plan->nblocks;
  m.count = count;
  m.host = topo->host_mode && topo->nnodes == 1;
  CHECK(brd_plan_layout_init(plan, count, dtype, scratch_bytes, &m.l));
  brd_plan_cost_t out;
  memset(&out, 0, sizeof(out));
  out.niter = m.l.niter;
  if (m.l.niter == 0 || plan->nranks == 1 || m.B == 0) {
    *cost_out = out;
    return ncclSuccess;
  }
  m.nsim = m.l.niter < BRD_PLAN_COST_ITERS ? (uint32_t)m.l.niter : BRD_PLAN_COST_ITERS;
  rates_init(&m);
  /* Host mode: the sync chain (data free) plus the busiest rank's bytes
   * at its share of the host's copy rate (see "Host mode" above). */
  m.free_data = m.host;
  double t, h;
  CHECK(sim_pass(&m, &t, &h, &out));
  if (m.host) t += out.link_us;
  out.time_us = brd_tune_launch_us(topo, m.B) + t;
  out.sync_hops = (uint64_t)llround(h);
  *cost_out = out;
  return ncclSuccess;
}
