/*
 * Braid: the works of a launch's sends and receives (works.h): each pair's
 * transfers split into pieces, batched per peer and run as rounds of
 * point-to-point plans. Pure C over the runtime's view, as works.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/check.h"
#include "algos/algos.h"
#include "core/works.h"
#include "core/works_int.h"
#include "device/redop.h"
#include "plan/plan.h"

/* One send or receive of the launch. */
typedef struct p2p_xfer {
  int peer;
  int batch;      /* (index among the pair's transfers this way) / m */
  int sub;        /* index among its batch's sends (or receives) */
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
 * a send overlapping a receive is listed in ws->snaps, for the backend to
 * copy before any work runs. Sorting makes it O(n log n). */
static ncclResult_t p2p_overlaps(p2p_xfer_t *s, int ns, const p2p_xfer_t *r,
                                 int nr, int rank, brd_works_t *ws) {
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
  int nsnaps = 0;
  for (int i = 0; i < ns; i++)
    nsnaps += spans_hit(sp, nr, (uintptr_t)s[i].buf, (uintptr_t)s[i].buf + s[i].bytes);
  if (nsnaps == 0) goto out;
  ws->snaps = calloc((size_t)nsnaps, sizeof(*ws->snaps));
  if (ws->snaps == NULL) {
    WARN("out of host memory listing %d send buffers that overlap a receive of their "
         "group", nsnaps);
    res = ncclSystemError;
    goto out;
  }
  for (int i = 0; i < ns; i++) {
    if (!spans_hit(sp, nr, (uintptr_t)s[i].buf, (uintptr_t)s[i].buf + s[i].bytes)) continue;
    ws->snaps[ws->nsnaps++] = (brd_works_snap_t){.send = i, .src = s[i].buf, .bytes = s[i].bytes};
    ws->snap_bytes += (s[i].bytes + 255) & ~(size_t)255;
  }
out:
  free(sp);
  return res;
}

/* Chunks of transfer x in round k. */
static uint32_t round_chunks(const p2p_xfer_t *x, size_t k) {
  size_t lo = k * BRD_WORKS_ROUND_CHUNKS;
  if (x->pieces <= lo) return 0;
  size_t left = x->pieces - lo;
  return (uint32_t)(left < BRD_WORKS_ROUND_CHUNKS ? left : BRD_WORKS_ROUND_CHUNKS);
}

/* Segment of transfer x in round k. */
static brd_exec_seg_t round_seg(const p2p_xfer_t *x, size_t k, size_t piece) {
  brd_exec_seg_t s = {NULL, 0};
  size_t lo = k * BRD_WORKS_ROUND_CHUNKS * piece;
  if (x->bytes > lo) {
    size_t left = x->bytes - lo, max = BRD_WORKS_ROUND_CHUNKS * piece;
    s.ptr = x->buf + lo;
    s.count = left < max ? left : max;
  }
  return s;
}

/* The work of round k of the launch's point-to-point transfers. */
static ncclResult_t add_p2p_round(const brd_works_view_t *v, brd_works_seq_t *seq,
                                  const p2p_xfer_t *s, int ns, const p2p_xfer_t *r,
                                  int nr, size_t k, brd_algos_sendrecv_op_t *ops,
                                  brd_algos_sendrecv_rank_t *ranks, brd_works_t *ws) {
  int me = v->rank, n = v->nranks;
  const brd_window_rec_t *mw = &v->win[me];
  brd_ir_plan_t *plan;
  brd_work_t *w;
  for (int i = 0; i < ns; i++) ops[i] = (brd_algos_sendrecv_op_t){s[i].peer, round_chunks(&s[i], k)};
  for (int j = 0; j < nr; j++) ops[ns + j] = (brd_algos_sendrecv_op_t){r[j].peer, round_chunks(&r[j], k)};
  memset(ranks, 0, (size_t)n * sizeof(*ranks));
  ranks[me].nsend = ns;
  ranks[me].send = ops;
  ranks[me].nrecv = nr;
  ranks[me].recv = ops + ns;
  brd_algos_sendrecv_args_t args = {n, me, ranks};
  CHECK(brd_algos_sendrecv(&args, &plan));
  if (v->port_matrix != NULL) brd_plan_chans_mark(plan, v->port_matrix);
  ncclResult_t res = brd_works_work_add(ws, plan, me, &w);
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
    w->segs[i] = round_seg(i < ns ? &s[i] : &r[i - ns], k, v->p2p_piece);
    if (w->segs[i].count > count) count = w->segs[i].count;
  }
  for (uint32_t ch = 0; ch < nch; ch++) {
    int p = brd_ir_plan_chan(plan, me, (int)ch)->peer;
    char *pw = v->base[p];
    const brd_window_rec_t *pwr = &v->win[p];
    uint64_t to = 0, from = 0;
    for (int i = 0; i < ns; i++) if (s[i].peer == p) to += ops[i].nchunks;
    for (int j = 0; j < nr; j++) if (r[j].peer == p) from += ops[ns + j].nchunks;
    /* CUDA mode: the span, the kernel reserves from its device cursor. */
    w->chan_epoch[ch] = v->device_seq ? (to > from ? to : from)
                                 : brd_plan_epoch_reserve(&seq->p2p_cursor[p],
                                                          to > from ? to : from);
    w->chans[ch].peer_scratch = pw + pwr->p2p_off;
    w->chans[ch].peer_sems = (_Atomic uint64_t *)(pw + pwr->p2p_sem_off) + (size_t)me * 2;
    w->chans[ch].sems = (_Atomic uint64_t *)(v->base[me] + mw->p2p_sem_off) +
                        (size_t)p * 2;
    w->chans[ch].port = v->ports != NULL ? v->ports[p] : NULL;
  }
  brd_exec_args_t *a = &w->args;
  a->plan = plan;
  a->rank = me;
  a->scratch = v->base[me] + mw->p2p_off;
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
  a->abort_flag = v->abort_flag;
  a->port_failed = v->port_failed;
  a->port_bell = v->port_bell;
  return ncclSuccess;
}

/* See works.h. */
int brd_works_p2p_batch_ops(int nranks, int round_ops) {
  if (round_ops <= 0 || round_ops > BRD_WORKS_ROUND_MAX_OPS) round_ops = BRD_WORKS_ROUND_MAX_OPS;
  int m = round_ops / (nranks > 0 ? nranks : 1);
  return m > 0 ? m : 1;
}

/* Batch of every transfer of x (one direction, call order): the i-th
 * with a given peer goes into batch i / m. Returns the number of batches. */
static int p2p_batches(p2p_xfer_t *x, int nx, int nranks, int m, int *per_peer) {
  int nb = 0;
  memset(per_peer, 0, (size_t)nranks * sizeof(*per_peer));
  for (int i = 0; i < nx; i++) {
    x[i].batch = per_peer[x[i].peer]++ / m;
    if (x[i].batch + 1 > nb) nb = x[i].batch + 1;
  }
  return nb;
}

/* Copies the transfers of batch b out of x[nx] into out (call order),
 * noting each one's index there; returns how many, and the batch's
 * rounds of 16 pieces in *rounds_out (the larger of it and its value). */
static int p2p_batch(p2p_xfer_t *x, int nx, int b, p2p_xfer_t *out, size_t *rounds_out) {
  int n = 0;
  for (int i = 0; i < nx; i++) {
    if (x[i].batch != b) continue;
    x[i].sub = n;
    out[n++] = x[i];
    size_t rounds = (x[i].pieces + BRD_WORKS_ROUND_CHUNKS - 1) / BRD_WORKS_ROUND_CHUNKS;
    if (rounds > *rounds_out) *rounds_out = rounds;
  }
  return n;
}

/* See works_int.h: batch by batch, round by round (works.h). */
ncclResult_t brd_works_add_p2p(const brd_works_view_t *v, brd_works_seq_t *seq,
                               const brd_call_t *calls, int ncalls, brd_works_t *ws) {
  ncclResult_t res = ncclSuccess;
  int ns = 0, nr = 0, n = v->nranks, me = v->rank;
  for (int i = 0; i < ncalls; i++) {
    if (calls[i].count == 0) continue;
    if (calls[i].coll == BRD_COLL_SEND) ns++;
    if (calls[i].coll == BRD_COLL_RECV) nr++;
  }
  if (ns + nr == 0) return ncclSuccess;
  int m = brd_works_p2p_batch_ops(n, v->p2p_round_ops);
  int cap = v->p2p_round_ops > 0 && v->p2p_round_ops < BRD_WORKS_ROUND_MAX_OPS
                ? v->p2p_round_ops : BRD_WORKS_ROUND_MAX_OPS;
  /* Only with more ranks than a round holds transfers can a batch of one
   * per pair overflow a round. */
  if ((size_t)m * (size_t)n > (size_t)cap && (ns > cap || nr > cap)) {
    WARN("ncclGroupEnd : rank %d has %d sends and %d receives in one group on a "
         "communicator of %d ranks; with more than %d ranks at most %d of each run "
         "per group and communicator: split the group", me, ns, nr, n, cap, cap);
    return ncclInvalidUsage;
  }
  p2p_xfer_t *x = calloc(2 * ((size_t)ns + (size_t)nr), sizeof(*x));
  brd_algos_sendrecv_op_t *ops = calloc((size_t)ns + (size_t)nr, sizeof(*ops));
  brd_algos_sendrecv_rank_t *ranks = calloc((size_t)n, sizeof(*ranks));
  int *per_peer = calloc((size_t)n, sizeof(*per_peer));
  int *w_lo = NULL;
  if (x == NULL || ops == NULL || ranks == NULL || per_peer == NULL) {
    WARN("out of host memory for %d point-to-point transfers", ns + nr);
    res = ncclSystemError;
    goto out;
  }
  p2p_xfer_t *s = x, *r = x + ns, *bs = x + ns + nr, *br = bs + ns;
  int is = 0, ir = 0;
  for (int i = 0; i < ncalls; i++) {
    const brd_call_t *c = &calls[i];
    if (c->count == 0 || (c->coll != BRD_COLL_SEND && c->coll != BRD_COLL_RECV)) continue;
    p2p_xfer_t *t = c->coll == BRD_COLL_SEND ? &s[is++] : &r[ir++];
    t->peer = c->root;
    t->buf = c->coll == BRD_COLL_SEND ? (char *)(uintptr_t)c->sendbuff : (char *)c->recvbuff;
    t->bytes = c->count * brd_dtype_size(c->dtype);
    t->pieces = (t->bytes + v->p2p_piece - 1) / v->p2p_piece;
  }
  CHECK_GOTO(p2p_overlaps(s, ns, r, nr, me, ws), res, out);
  int sb = p2p_batches(s, ns, n, m, per_peer), rb = p2p_batches(r, nr, n, m, per_peer);
  int nbatch = sb > rb ? sb : rb;
  w_lo = calloc((size_t)nbatch + 1, sizeof(*w_lo));
  if (w_lo == NULL) {
    WARN("out of host memory for %d batches of point-to-point transfers", nbatch);
    res = ncclSystemError;
    goto out;
  }
  for (int b = 0; b < nbatch; b++) {
    size_t nrounds = 0;
    int nbs = p2p_batch(s, ns, b, bs, &nrounds), nbr = p2p_batch(r, nr, b, br, &nrounds);
    w_lo[b] = ws->n;
    for (size_t k = 0; k < nrounds; k++)
      CHECK_GOTO(add_p2p_round(v, seq, bs, nbs, br, nbr, k, ops, ranks, ws), res, out);
  }
  w_lo[nbatch] = ws->n;
  for (int i = 0; i < ws->nsnaps; i++) {
    brd_works_snap_t *sn = &ws->snaps[i];
    const p2p_xfer_t *t = &s[sn->send];
    sn->seg = t->sub;
    sn->w_lo = w_lo[t->batch];
    sn->w_hi = w_lo[t->batch + 1];
  }
out:
  free(w_lo);
  free(per_peer);
  free(ranks);
  free(ops);
  free(x);
  return res;
}
