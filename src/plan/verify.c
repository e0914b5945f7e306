/*
 * Braid plan verifier. See verify.h for what it proves and reports.
 *
 * State: one symbolic location per (rank, iteration, output segment,
 * chunk) of the output and per (rank, slot) of the scratch; input chunks
 * are implicit (they hold the rank's own contribution to their segment)
 * unless the launch is in place, where the input segment the collective
 * aliases shares the output segment's locations. Each location keeps its value,
 * its last two writers (thread, clock, op) and the reads of its value, so
 * every read can be checked against the write it observes (read after
 * write) and every write against the reads and the write it replaces.
 * Threads are (rank, block) pairs; a scheduler runs each until it blocks
 * and reports a deadlock when a full pass makes no progress.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/verify.h"

#define W_NONE (-1) /* never written */
#define W_INIT (-2) /* initial content (in-place input), owned by its rank */

enum { BLK_NONE = 0, BLK_SEM, BLK_PACKET, BLK_BARRIER, BLK_SWITCH };
enum { STEP_OK = 0, STEP_BLOCKED = 1, STEP_FAIL = -1 };

typedef struct vread {
  int32_t thr;
  uint32_t clk;
  int32_t op;
} vread_t;

typedef struct vloc {
  int32_t iter, chunk;     /* identity of the value */
  int32_t seg;             /* input segment the value was taken from */
  int32_t wrank;           /* one-phase plans: the rank that writes it */
  uint16_t post;           /* post-ops applied */
  uint8_t ll;              /* written as LL packets */
  int32_t ll_k;            /* packet flag offset of the last write */
  int32_t w_thr, w_op, w_iter;
  uint32_t w_clk;
  int32_t pw_thr, pw_op;   /* the write before */
  uint32_t pw_clk;
  uint32_t *w_vc;          /* owned: LL writer's clock at the write */
  vread_t *rd;             /* owned: reads of the current value */
  uint32_t nrd, caprd;
  vread_t *red;            /* owned: MC_REDs combined into the value since
                            * its last plain write (one per thread) */
  uint32_t nred, capred;
} vloc_t;

typedef struct vsig {
  int64_t value;
  uint32_t *vc; /* owned: signaller's clock */
} vsig_t;

typedef struct vsem {
  int64_t value;           /* relative sequence number, 0 before launch */
  vsig_t *hist;            /* owned: every signal, values increasing */
  uint32_t nhist, cap;
} vsem_t;

typedef struct vthr {
  uint32_t pc;
  int32_t iter;
  int done;
  uint32_t nbar;           /* barriers passed */
  int bar_arrived;         /* counted at barrier nbar */
  int mcb_arrived;         /* stored its word of the MC_BARRIER at pc */
  int why;                 /* BLK_* of the last blocked step */
  int64_t want, seen;
  int peer, index;
} vthr_t;

typedef struct vstate {
  const brd_ir_plan_t *p;
  int n, B, T, niter, inplace;
  int64_t S;
  int coll, root, one_phase;
  int nout_max;            /* output segments allocated per rank */
  int *nin, *nout;         /* [n]: input / output segments of each rank */
  const brd_verify_p2p_t *p2p; /* borrowed: SENDRECV pairing */
  size_t per_rank;         /* locations per rank */
  uint32_t *vc;            /* [T][T] */
  uint32_t *vc0;           /* [T][T]: each thread's clock after iteration 0 */
  vthr_t *thr;             /* [T] */
  vloc_t *locs;            /* [n * per_rank] */
  uint8_t *contrib;        /* [n * per_rank][n] */
  vsem_t *sems;            /* [sum over ranks of nchans * nsems] */
  size_t *sem_base;        /* [n] */
  int *rev_chan;           /* [nchans]: channel index back at the peer */
  int32_t *sig_blk;        /* [sems]: the block signalling it, -1 none */
  int32_t *sig_k;          /* [sems]: last k seen in program order */
  uint32_t *bar_gen;       /* [n][2] */
  uint32_t *bar_count;     /* [n][2] */
  uint32_t *bar_acc;       /* [n][2][T] */
  int *swch;               /* [n]: each rank's switch channel, -1 none */
  int nswitch;             /* ranks with a switch channel */
  vsem_t *swsem;           /* [nsems][n]: word m of switch semaphore i,
                            * the same in every member's copy */
  int32_t *sw_blk;         /* [n][nsems]: the block storing the rank's word */
  int32_t *sw_k;           /* [n][nsems]: last k seen in program order */
  uint8_t *acc;            /* [n] */
  struct vinrd *inrd;      /* reads of peers' inputs, for the end check */
  size_t ninrd, capinrd;
  brd_verify_report_t *rep;
  int failed, oom;
} vstate_t;

/* One read of another rank's input (a PEER_INPUT plan). */
typedef struct vinrd {
  int owner, thr, op;
  uint32_t clk, index;
} vinrd_t;

/* See verify.h. */
const char *brd_plan_verify_kind_name(brd_verify_kind_t kind) {
  switch (kind) {
  case BRD_VERIFY_OK: return "ok";
  case BRD_VERIFY_MALFORMED: return "malformed plan";
  case BRD_VERIFY_MISSING: return "missing contribution";
  case BRD_VERIFY_DUPLICATE: return "duplicated contribution";
  case BRD_VERIFY_MISMATCH: return "chunk mismatch";
  case BRD_VERIFY_POSTOP: return "post-op misuse";
  case BRD_VERIFY_UNWRITTEN: return "read of unwritten data";
  case BRD_VERIFY_RACE: return "data race";
  case BRD_VERIFY_REUSE: return "scratch reuse race";
  case BRD_VERIFY_DEADLOCK: return "deadlock";
  case BRD_VERIFY_LAUNCH_ORDER: return "launch order";
  }
  return "unknown";
}

__attribute__((format(printf, 7, 8)))
static int vfail(vstate_t *v, brd_verify_kind_t kind, int rank, int block,
                 int op, int peer, const char *fmt, ...) {
  if (v->failed) return STEP_FAIL;
  v->failed = 1;
  brd_verify_report_t *r = v->rep;
  r->kind = kind;
  r->rank = rank;
  r->block = block;
  r->op = op;
  r->peer = peer;
  r->chunk = -1;
  int len = snprintf(r->msg, sizeof(r->msg), "plan verifier: %s: ",
                     brd_plan_verify_kind_name(kind));
  if (len < 0) len = 0;
  if ((size_t)len < sizeof(r->msg)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + len, sizeof(r->msg) - (size_t)len, fmt, ap);
    va_end(ap);
  }
  return STEP_FAIL;
}

static int vfail_chunk(vstate_t *v, int chunk) {
  v->rep->chunk = chunk;
  return STEP_FAIL;
}

/* ---- small helpers -------------------------------------------------------- */

static int thr_rank(const vstate_t *v, int th) { return th / v->B; }
static int thr_block(const vstate_t *v, int th) { return th % v->B; }
static uint32_t *vc_of(vstate_t *v, int th) { return v->vc + (size_t)th * v->T; }

static void vc_join(uint32_t *dst, const uint32_t *src, int T) {
  for (int i = 0; i < T; i++)
    if (src[i] > dst[i]) dst[i] = src[i];
}

static uint32_t *vc_copy(vstate_t *v, const uint32_t *src) {
  uint32_t *c = malloc((size_t)v->T * sizeof(*c));
  if (c == NULL) {
    v->oom = 1;
    return NULL;
  }
  memcpy(c, src, (size_t)v->T * sizeof(*c));
  return c;
}

/* Has thread th seen any op of rank q (is q in this launch, from th's
 * point of view)? */
static int knows_rank(vstate_t *v, int th, int q) {
  if (thr_rank(v, th) == q) return 1;
  const uint32_t *c = vc_of(v, th);
  for (int b = 0; b < v->B; b++)
    if (c[q * v->B + b] > 0) return 1;
  return 0;
}

/* Is the event (thread w, clock clk) ordered before thread th's present?
 * W_INIT events belong to rank `owner` before the launch. */
static int ordered(vstate_t *v, int th, int w, uint32_t clk, int owner) {
  if (w == W_INIT) return knows_rank(v, th, owner);
  if (w == th) return 1;
  return vc_of(v, th)[w] >= clk;
}

static const char *buf_name(uint8_t buf) {
  switch (buf & BRD_IR_BUF_MASK) {
  case BRD_IR_BUF_INPUT: return "input chunk";
  case BRD_IR_BUF_OUTPUT: return "output chunk";
  case BRD_IR_BUF_SCRATCH: return "scratch slot";
  default: return "semaphore";
  }
}

static const brd_ir_chan_t *chan_of(const vstate_t *v, int rank, int chan) {
  return brd_ir_plan_chan(v->p, rank, chan);
}

static int ref_owner(const vstate_t *v, int rank, const brd_ir_ref_t *ref) {
  return ref->chan == BRD_IR_CHAN_LOCAL ? rank : chan_of(v, rank, ref->chan)->peer;
}

/* Does ref go through rank's switch channel (every member's copy)? */
static int ref_is_switch(const vstate_t *v, int rank, const brd_ir_ref_t *ref) {
  return ref->chan != BRD_IR_CHAN_LOCAL && (int)ref->chan == v->swch[rank];
}

/* Is rank m a member of rank r's switch group (device/ir.h: the ranks
 * whose switch channel has r's group)? */
static int sw_member(const vstate_t *v, int r, int m) {
  return v->swch[r] >= 0 && v->swch[m] >= 0 &&
         chan_of(v, r, v->swch[r])->group == chan_of(v, m, v->swch[m])->group;
}

/* How many ranks rank r's switch channel reaches. */
static int sw_nmembers(const vstate_t *v, int r) {
  int n = 0;
  for (int m = 0; m < v->n; m++) n += sw_member(v, r, m);
  return n;
}

static const char *op_name(uint8_t code) {
  switch (code) {
  case BRD_IR_OP_MC_REDUCE: return "MC_REDUCE";
  case BRD_IR_OP_MC_STORE: return "MC_STORE";
  case BRD_IR_OP_MC_RED: return "MC_RED";
  case BRD_IR_OP_MC_BARRIER: return "MC_BARRIER";
  case BRD_IR_OP_SIGNAL: return "SIGNAL";
  case BRD_IR_OP_WAIT: return "WAIT";
  default: return "data op";
  }
}

static size_t loc_out(const vstate_t *v, int rank, int iter, int seg,
                      uint32_t chunk) {
  return (size_t)rank * v->per_rank +
         ((size_t)iter * v->nout_max + (size_t)seg) * v->p->nchunks + chunk;
}

static size_t loc_scratch(const vstate_t *v, int rank, uint32_t slot) {
  return (size_t)rank * v->per_rank +
         (size_t)v->niter * v->nout_max * v->p->nchunks + slot;
}

/* Segment and chunk an INPUT/OUTPUT index names. */
static int ref_seg(const vstate_t *v, uint32_t index) {
  return (int)(index / v->p->nchunks);
}

static uint32_t ref_chunk(const vstate_t *v, uint32_t index) {
  return index % v->p->nchunks;
}

/* The output segment that input segment `seg` of `rank` shares in an
 * in-place launch, or -1. */
static int alias_out(const vstate_t *v, int rank, int seg) {
  if (!v->inplace) return -1;
  int root = rank == v->root;
  switch (v->coll) {
  case BRD_IR_COLL_ALLREDUCE: return seg == 0 ? 0 : -1;
  case BRD_IR_COLL_ALLGATHER: return seg == 0 ? rank : -1;
  case BRD_IR_COLL_REDUCESCATTER: return seg == rank ? 0 : -1;
  case BRD_IR_COLL_BROADCAST:
  case BRD_IR_COLL_REDUCE: return root && seg == 0 ? 0 : -1;
  case BRD_IR_COLL_GATHER: return root && seg == 0 ? v->root : -1;
  case BRD_IR_COLL_SCATTER: return root && seg == v->root ? 0 : -1;
  default: return -1;
  }
}

static uint8_t *contrib_of(vstate_t *v, size_t li) {
  return v->contrib + li * (size_t)v->n;
}

/* Location a data ref names for chunk t of the op; INPUT only when it is
 * aliased to an output segment (in place). */
/* Where ref (element t of its run) lands in owner's buffers; a switch
 * reference stands for every member, each its own owner. */
static size_t loc_of(const vstate_t *v, int owner, int iter, const brd_ir_ref_t *ref,
                     uint32_t t) {
  uint32_t index = ref->index + t;
  switch (ref->buf & BRD_IR_BUF_MASK) {
  case BRD_IR_BUF_SCRATCH: return loc_scratch(v, owner, index);
  case BRD_IR_BUF_INPUT:
    return loc_out(v, owner, iter, alias_out(v, owner, ref_seg(v, index)),
                   ref_chunk(v, index));
  default:
    return loc_out(v, owner, iter, ref_seg(v, index), ref_chunk(v, index));
  }
}

static size_t ref_loc(const vstate_t *v, int rank, int iter,
                      const brd_ir_ref_t *ref, uint32_t t) {
  return loc_of(v, ref_owner(v, rank, ref), iter, ref, t);
}

static void describe_writer(const vstate_t *v, int w, int op, char *out,
                            size_t len) {
  if (w == W_INIT) snprintf(out, len, "the rank's own input");
  else if (w == W_NONE) snprintf(out, len, "nothing");
  else
    snprintf(out, len, "rank %d block %d op %d", thr_rank(v, w),
             thr_block(v, w), op);
}

/* ---- structure ------------------------------------------------------------ */

/* An INPUT/OUTPUT ref must name a segment the collective gives its owner
 * and, for point-to-point segments, chunks that hold data. */
static int check_segment_of(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op,
                            const brd_ir_ref_t *ref, int owner) {
  int seg = ref_seg(v, ref->index);
  int input = (ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT;
  int have = input ? v->nin[owner] : v->nout[owner];
  if (seg >= have) {
    if (have == 0)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, owner,
                   "rank %d block %d op %d: %s rank %d's %s, which this "
                   "collective does not give it (it may not even exist)", r,
                   b, i, input ? "reads" : "writes", owner,
                   input ? "input" : "output");
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, owner,
                 "rank %d block %d op %d: %s segment %d of rank %d, which "
                 "has %d", r, b, i, buf_name(ref->buf), seg, owner, have);
  }
  if (v->p2p == NULL) return STEP_OK;
  uint32_t data = input ? v->p2p[owner].in_chunks[seg]
                        : v->p2p[owner].out[seg].nchunks;
  if ((uint32_t)op->chunk + op->nchunks > data)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, owner,
                 "rank %d block %d op %d: %s %d of rank %d holds %u chunks; "
                 "the op touches chunks %u..%u", r, b, i,
                 input ? "send" : "receive", seg, owner, data, op->chunk,
                 op->chunk + op->nchunks - 1);
  return STEP_OK;
}

static int check_segment(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op,
                         const brd_ir_ref_t *ref) {
  return check_segment_of(v, r, b, i, op, ref, ref_owner(v, r, ref));
}

static int check_ref(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op,
                     int ri) {
  const brd_ir_ref_t *ref = &op->ref[ri];
  int is_src = ri < op->nsrc;
  uint8_t kind = ref->buf & BRD_IR_BUF_MASK;
  uint32_t nch = brd_ir_plan_rank(v->p, r)->nchans;
  if ((ref->buf & ~(BRD_IR_BUF_MASK | BRD_IR_REF_LL)) != 0 ||
      kind > BRD_IR_BUF_SCRATCH)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: reference %d has buffer kind 0x%x",
                 r, b, i, ri, ref->buf);
  if (ref->chan != BRD_IR_CHAN_LOCAL && ref->chan >= nch)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: reference %d uses channel %u of %u",
                 r, b, i, ri, ref->chan, nch);
  if (ref_is_switch(v, r, ref))
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: reference %d names switch channel %u, which "
                 "only the switch ops (MC_*) use", r, b, i, ri, ref->chan);
  /* A port channel only writes: the proxy ships what this rank put into
   * the peer's memory, and nothing carries the peer's memory back. */
  if (is_src && brd_ir_op_is_data(op->code) && ref->chan != BRD_IR_CHAN_LOCAL &&
      chan_of(v, r, ref->chan)->type == BRD_IR_CHAN_PORT)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, chan_of(v, r, ref->chan)->peer,
                 "rank %d block %d op %d: reference %d reads rank %d's memory through a "
                 "port channel, which only writes", r, b, i, ri,
                 chan_of(v, r, ref->chan)->peer);
  if (kind == BRD_IR_BUF_INPUT &&
      (!is_src || (ref->chan != BRD_IR_CHAN_LOCAL &&
                   !(v->p->flags & BRD_IR_PLAN_F_PEER_INPUT))))
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: the input buffer is only a source, "
                 "and a peer's only in a plan flagged to read peers' inputs",
                 r, b, i);
  if ((ref->buf & BRD_IR_REF_LL) &&
      (kind != BRD_IR_BUF_SCRATCH || (is_src && ref->chan != BRD_IR_CHAN_LOCAL)))
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: LL packets live in scratch and are "
                 "read by their owner only (reference %d)", r, b, i, ri);
  if (kind == BRD_IR_BUF_SCRATCH) {
    if ((uint32_t)ref->index + op->nchunks > v->p->nslots)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: scratch slots %u..%u beyond the "
                   "plan's %u", r, b, i, ref->index,
                   ref->index + op->nchunks - 1, v->p->nslots);
  } else if (ref_chunk(v, ref->index) != op->chunk) {
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s %u (segment %d, chunk %u) "
                 "differs from the op's chunk %u, whose size it must have",
                 r, b, i, buf_name(ref->buf), ref->index,
                 ref_seg(v, ref->index), ref_chunk(v, ref->index), op->chunk);
  } else {
    return check_segment(v, r, b, i, op, ref);
  }
  return STEP_OK;
}

static int check_data_op(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op) {
  if (op->nsrc < 1 || op->ndst < 1 || op->nsrc + op->ndst > BRD_IR_MAX_REFS)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %u sources and %u destinations",
                 r, b, i, op->nsrc, op->ndst);
  if (op->nchunks < 1 || (uint32_t)op->chunk + op->nchunks > v->p->nchunks)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: chunks %u (+%u) beyond the plan's %u",
                 r, b, i, op->chunk, op->nchunks, v->p->nchunks);
  if (op->flags & ~BRD_IR_F_POSTOP)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: unknown flags 0x%x", r, b, i, op->flags);
  int ll_src = 0, ll_dst = 0, remote_src = 0, remote_dst = 0, local_dst = 0;
  for (int ri = 0; ri < op->nsrc + op->ndst; ri++) {
    if (check_ref(v, r, b, i, op, ri) != STEP_OK) return STEP_FAIL;
    int ll = (op->ref[ri].buf & BRD_IR_REF_LL) != 0;
    int remote = op->ref[ri].chan != BRD_IR_CHAN_LOCAL;
    if (ri < op->nsrc) {
      ll_src += ll;
      remote_src += remote;
    } else {
      ll_dst += ll;
      remote_dst += remote;
      local_dst += !remote;
    }
  }
  const char *why = NULL;
  switch (op->code) {
  case BRD_IR_OP_COPY:
    if (op->nsrc != 1 || ll_src || ll_dst || remote_src || remote_dst)
      why = "COPY takes one local source to local destinations, no packets";
    break;
  case BRD_IR_OP_PUT:
    if (op->nsrc != 1 || ll_src || ll_dst || remote_src || local_dst)
      why = "PUT takes one local source to remote destinations, no packets";
    break;
  case BRD_IR_OP_GET:
    if (op->nsrc != 1 || ll_src || ll_dst || !remote_src || remote_dst)
      why = "GET takes one remote source to local destinations, no packets";
    break;
  case BRD_IR_OP_REDUCE:
    if (ll_src || ll_dst) why = "REDUCE does not handle packets";
    break;
  case BRD_IR_OP_PKT_PUT:
    if (op->nsrc != 1 || ll_src || ll_dst != op->ndst)
      why = "PKT_PUT takes one plain source to packet destinations";
    break;
  default:
    break;
  }
  if (why != NULL)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s", r, b, i, why);
  if ((ll_dst && (op->k < 1 || op->k > v->S)) ||
      (ll_src && (op->k_src < 1 || op->k_src > v->S)))
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: packet flag offsets %d/%d outside "
                 "1..%lld", r, b, i, op->k, op->k_src, (long long)v->S);
  return STEP_OK;
}

static int check_sync_op(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op) {
  const brd_ir_ref_t *ref = &op->ref[0];
  int sig = op->code == BRD_IR_OP_SIGNAL;
  uint32_t nch = brd_ir_plan_rank(v->p, r)->nchans;
  if (op->nsrc != (sig ? 0 : 1) || op->ndst != (sig ? 1 : 0) ||
      ref->buf != BRD_IR_BUF_SEM || ref->chan == BRD_IR_CHAN_LOCAL ||
      ref->chan >= nch || ref->index >= v->p->nsems)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s must name semaphore 0..%u of a "
                 "channel (0..%u)", r, b, i, sig ? "SIGNAL" : "WAIT",
                 v->p->nsems ? v->p->nsems - 1 : 0, nch ? nch - 1 : 0);
  if ((int)ref->chan == v->swch[r])
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s names switch channel %u; a switch channel "
                 "synchronises with MC_BARRIER only", r, b, i, sig ? "SIGNAL" : "WAIT",
                 ref->chan);
  int peer = chan_of(v, r, ref->chan)->peer;
  if (op->k > v->S || (sig && op->k < 1))
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, peer,
                 "rank %d block %d op %d: %s k=%d outside %s..%lld", r, b, i,
                 sig ? "SIGNAL" : "WAIT", op->k, sig ? "1" : "-inf",
                 (long long)v->S);
  if (!sig) return STEP_OK;
  int back = v->rev_chan[brd_ir_plan_rank(v->p, r)->chan_first + ref->chan];
  if (back < 0)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, peer,
                 "rank %d block %d op %d: signals rank %d, which has no "
                 "channel back to rank %d to receive it", r, b, i, peer, r);
  size_t s = v->sem_base[peer] + (size_t)back * v->p->nsems + ref->index;
  if (v->sig_blk[s] >= 0 && v->sig_blk[s] != b)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, peer,
                 "rank %d blocks %d and %d both signal semaphore %u of rank "
                 "%d: a semaphore has one writer", r, v->sig_blk[s], b,
                 ref->index, peer);
  if (v->sig_blk[s] == b && op->k <= v->sig_k[s])
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, peer,
                 "rank %d block %d op %d: signals semaphore %u of rank %d with "
                 "k=%d after k=%d; values must increase", r, b, i, ref->index,
                 peer, op->k, v->sig_k[s]);
  v->sig_blk[s] = b;
  v->sig_k[s] = op->k;
  return STEP_OK;
}

/* A switch op (MC_*): its shape and references (device/ir.h, "Switch
 * channels"), and for MC_BARRIER the one writer of each semaphore word. */
static int check_switch_op(vstate_t *v, int r, int b, int i, const brd_ir_op_t *op) {
  uint32_t nch = brd_ir_plan_rank(v->p, r)->nchans;
  const char *name = op_name(op->code);
  if (v->swch[r] < 0)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s in a plan where rank %d has no switch channel",
                 r, b, i, name, r);
  if (op->code == BRD_IR_OP_MC_BARRIER) {
    const brd_ir_ref_t *ref = &op->ref[0];
    if (op->nsrc != 0 || op->ndst != 1 || ref->buf != BRD_IR_BUF_SEM ||
        ref->chan == BRD_IR_CHAN_LOCAL || ref->chan >= nch || ref->index >= v->p->nsems ||
        op->flags != 0)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: MC_BARRIER names one switch semaphore "
                   "0..%u in its one destination reference", r, b, i,
                   v->p->nsems ? v->p->nsems - 1 : 0);
    if (!ref_is_switch(v, r, ref))
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, chan_of(v, r, ref->chan)->peer,
                   "rank %d block %d op %d: MC_BARRIER names channel %u to rank %d, "
                   "which is not a switch channel", r, b, i, ref->chan,
                   chan_of(v, r, ref->chan)->peer);
    if (op->k < 1 || op->k > v->S)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: MC_BARRIER k=%d outside 1..%lld", r, b, i,
                   op->k, (long long)v->S);
    size_t s = (size_t)r * v->p->nsems + ref->index;
    if (v->sw_blk[s] >= 0 && v->sw_blk[s] != b)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d blocks %d and %d both run MC_BARRIER on switch semaphore "
                   "%u: each rank's word has one writer", r, v->sw_blk[s], b, ref->index);
    if (v->sw_blk[s] == b && op->k <= v->sw_k[s])
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: MC_BARRIER on switch semaphore %u with k=%d "
                   "after k=%d; values must increase", r, b, i, ref->index, op->k,
                   v->sw_k[s]);
    v->sw_blk[s] = b;
    v->sw_k[s] = op->k;
    return STEP_OK;
  }
  if (op->nsrc != 1 || op->ndst < 1 || op->nsrc + op->ndst > BRD_IR_MAX_REFS)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s with %u sources and %u destinations (one "
                 "source, at least one destination)", r, b, i, name, op->nsrc, op->ndst);
  if (op->nchunks < 1 || (uint32_t)op->chunk + op->nchunks > v->p->nchunks)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: chunks %u (+%u) beyond the plan's %u",
                 r, b, i, op->chunk, op->nchunks, v->p->nchunks);
  uint8_t allowed = op->code == BRD_IR_OP_MC_REDUCE ? BRD_IR_F_POSTOP : 0;
  if (op->flags & ~allowed)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                 "rank %d block %d op %d: %s takes flags 0x%x, not 0x%x", r, b, i, name,
                 allowed, op->flags);
  for (int ri = 0; ri < op->nsrc + op->ndst; ri++) {
    const brd_ir_ref_t *ref = &op->ref[ri];
    uint8_t kind = ref->buf & BRD_IR_BUF_MASK;
    int is_src = ri < op->nsrc;
    if (ref->buf & BRD_IR_REF_LL)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: %s reference %d is an LL reference; switch "
                   "ops move plain data only", r, b, i, name, ri);
    if ((ref->buf & ~BRD_IR_BUF_MASK) != 0 || kind > BRD_IR_BUF_SCRATCH)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: reference %d has buffer kind 0x%x",
                   r, b, i, ri, ref->buf);
    if (ref->chan != BRD_IR_CHAN_LOCAL && ref->chan >= nch)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: reference %d uses channel %u of %u",
                   r, b, i, ri, ref->chan, nch);
    int sw = ref_is_switch(v, r, ref);
    if (ref->chan != BRD_IR_CHAN_LOCAL && !sw)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, chan_of(v, r, ref->chan)->peer,
                   "rank %d block %d op %d: %s reference %d goes through channel %u to "
                   "rank %d, which is not a switch channel: switch ops reach other "
                   "ranks only through the switch", r, b, i, name, ri, ref->chan,
                   chan_of(v, r, ref->chan)->peer);
    /* A zero-copy switch plan (PEER_INPUT, device/ir.h) reaches every
     * member's input (MC_REDUCE's source) and output (a destination)
     * through the switch too; other plans only scratch slots. */
    int zc = (v->p->flags & BRD_IR_PLAN_F_PEER_INPUT) != 0;
    if (sw && kind != BRD_IR_BUF_SCRATCH &&
        (!zc || (kind == BRD_IR_BUF_INPUT && (!is_src || op->code != BRD_IR_OP_MC_REDUCE)) ||
         (kind == BRD_IR_BUF_OUTPUT && is_src)))
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: %s reference %d names the %s through the "
                   "switch channel; only scratch slots are reached through it, and in a "
                   "zero-copy plan the input as MC_REDUCE's source and the output as a "
                   "destination", r, b, i, name, ri,
                   kind == BRD_IR_BUF_INPUT ? "input" : "output");
    /* MC_REDUCE loads through the switch and stores anywhere; MC_STORE
     * and MC_RED read one local source and write through the switch. */
    int want_sw = op->code == BRD_IR_OP_MC_REDUCE ? is_src : !is_src;
    if (want_sw && !sw)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: %s reference %d is local; its %s is a "
                   "scratch slot through the switch channel", r, b, i, name, ri,
                   is_src ? "source" : "destination");
    if (!want_sw && sw && is_src)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: %s reads through the switch channel; only "
                   "MC_REDUCE does", r, b, i, name);
    if (kind == BRD_IR_BUF_INPUT && !is_src)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: the input buffer is only a source", r, b, i);
    if (kind == BRD_IR_BUF_SCRATCH) {
      if ((uint32_t)ref->index + op->nchunks > v->p->nslots)
        return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                     "rank %d block %d op %d: scratch slots %u..%u beyond the plan's %u",
                     r, b, i, ref->index, ref->index + op->nchunks - 1, v->p->nslots);
    } else if (ref_chunk(v, ref->index) != op->chunk) {
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, i, -1,
                   "rank %d block %d op %d: %s %u (segment %d, chunk %u) differs from "
                   "the op's chunk %u", r, b, i, buf_name(ref->buf), ref->index,
                   ref_seg(v, ref->index), ref_chunk(v, ref->index), op->chunk);
    } else {
      /* Through the switch: the segment of every member. */
      for (int m = sw ? 0 : ref_owner(v, r, ref); m < (sw ? v->n : ref_owner(v, r, ref) + 1);
           m++)
        if ((!sw || sw_member(v, r, m)) &&
            check_segment_of(v, r, b, i, op, ref, m) != STEP_OK)
          return STEP_FAIL;
    }
  }
  return STEP_OK;
}

/* Switch channels (device/ir.h): at most one per rank, peer
 * BRD_IR_SWITCH_PEER, on every rank or none, in a Simple plan. */
static int check_switch_chans(vstate_t *v) {
  int with = -1, without = -1;
  v->nswitch = 0;
  for (int r = 0; r < v->n; r++) {
    v->swch[r] = -1;
    const brd_ir_rank_t *rk = brd_ir_plan_rank(v->p, r);
    for (uint32_t c = 0; c < rk->nchans; c++) {
      const brd_ir_chan_t *ch = chan_of(v, r, (int)c);
      if (ch->type != BRD_IR_CHAN_SWITCH) continue;
      if (ch->peer != BRD_IR_SWITCH_PEER)
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, -1,
                     "rank %d channel %u is a switch channel with peer %d; a switch "
                     "channel reaches every rank and has peer %d", r, c, ch->peer,
                     BRD_IR_SWITCH_PEER);
      if (v->swch[r] >= 0)
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, -1,
                     "rank %d has two switch channels (%d, %u); a rank has at most one",
                     r, v->swch[r], c);
      v->swch[r] = (int)c;
    }
    if (v->swch[r] >= 0) {
      v->nswitch++;
      if (with < 0) with = r;
    } else if (without < 0) {
      without = r;
    }
  }
  if (v->nswitch > 0 && without >= 0)
    return vfail(v, BRD_VERIFY_MALFORMED, without, -1, -1, with,
                 "rank %d has no switch channel while rank %d has one: every rank "
                 "of a plan with switch channels has one (its group's members are "
                 "the ranks of its group)",
                 without, with);
  if (v->nswitch > 0 && v->p->proto != BRD_IR_PROTO_SIMPLE)
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "a plan with switch channels uses the Simple protocol (it has %u)",
                 v->p->proto);
  return STEP_OK;
}

static int check_structure(vstate_t *v) {
  const brd_ir_plan_t *p = v->p;
  if (check_switch_chans(v) != STEP_OK) return STEP_FAIL;
  for (int r = 0; r < v->n; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    for (uint32_t c = 0; c < rk->nchans; c++) {
      if ((int)c == v->swch[r]) continue;
      int peer = chan_of(v, r, (int)c)->peer;
      if (peer < 0 || peer >= v->n || peer == r)
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, -1,
                     "rank %d channel %u leads to rank %d", r, c, peer);
      for (uint32_t d = 0; d < c; d++)
        if ((int)d != v->swch[r] && chan_of(v, r, (int)d)->peer == peer)
          return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, peer,
                       "rank %d has two channels (%u, %u) to rank %d", r, d, c,
                       peer);
      uint8_t type = chan_of(v, r, (int)c)->type;
      if (type != BRD_IR_CHAN_MEMORY && type != BRD_IR_CHAN_PORT)
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, peer,
                     "rank %d channel %u has type %u; only memory and port "
                     "channels are verified", r, c, type);
    }
  }
  for (int r = 0; r < v->n; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    for (uint32_t c = 0; c < rk->nchans; c++) {
      v->rev_chan[rk->chan_first + c] = -1;
      if ((int)c == v->swch[r]) continue;
      int peer = chan_of(v, r, (int)c)->peer;
      const brd_ir_rank_t *pk = brd_ir_plan_rank(p, peer);
      for (uint32_t d = 0; d < pk->nchans; d++)
        if (chan_of(v, peer, (int)d)->peer == r)
          v->rev_chan[rk->chan_first + c] = (int)d;
      /* Both ends of a pair see the same kind of link. */
      int d = v->rev_chan[rk->chan_first + c];
      if (d >= 0 && chan_of(v, peer, d)->type != chan_of(v, r, (int)c)->type)
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, peer,
                     "rank %d reaches rank %d through a channel of type %u, and rank %d "
                     "reaches it back through type %u", r, peer, chan_of(v, r, (int)c)->type,
                     peer, chan_of(v, peer, d)->type);
    }
  }
  for (int r = 0; r < v->n; r++) {
    for (int b = 0; b < v->B; b++) {
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, b);
      uint32_t nops = brd_ir_plan_block(p, r, b)->nops;
      for (uint32_t i = 0; i < nops; i++) {
        const brd_ir_op_t *op = &ops[i];
        int res = STEP_OK;
        if (brd_ir_op_is_data(op->code))
          res = check_data_op(v, r, b, (int)i, op);
        else if (brd_ir_op_is_sync(op->code))
          res = check_sync_op(v, r, b, (int)i, op);
        else if (brd_ir_op_is_switch(op->code))
          res = check_switch_op(v, r, b, (int)i, op);
        else if (op->code == BRD_IR_OP_BARRIER && (op->nsrc || op->ndst))
          res = vfail(v, BRD_VERIFY_MALFORMED, r, b, (int)i, -1,
                      "rank %d block %d op %d: BARRIER takes no references",
                      r, b, i);
        else if (!brd_ir_op_is_runnable(op->code))
          res = vfail(v, BRD_VERIFY_MALFORMED, r, b, (int)i, -1,
                      "rank %d block %d op %d: opcode %u is not supported",
                      r, b, i, op->code);
        if (res != STEP_OK) return res;
      }
    }
  }
  return STEP_OK;
}

/* Header and table bounds, before anything else is read. */
static int check_header(vstate_t *v, const brd_ir_plan_t *p) {
  if (p->magic != BRD_IR_MAGIC || p->version != BRD_IR_VERSION)
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "not a plan (magic 0x%08x, version %u)", p->magic, p->version);
  if (p->nranks < 1 || p->nblocks < 1 || p->nchunks < 1 ||
      p->seq_per_iter < 1 || p->proto > BRD_IR_PROTO_LL ||
      (p->nslots > 0 && p->slot_div < 1))
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "bad header: %u ranks, %u blocks, %u chunks, %u sequence "
                 "numbers per iteration, protocol %u, slot_div %u",
                 p->nranks, p->nblocks, p->nchunks, p->seq_per_iter, p->proto,
                 p->slot_div);
  uint64_t total = p->total_bytes;
  uint64_t nblk = (uint64_t)p->nranks * p->nblocks;
  if (p->rank_off + (uint64_t)p->nranks * sizeof(brd_ir_rank_t) > total ||
      p->block_off + nblk * sizeof(brd_ir_block_t) > total ||
      p->chan_off + (uint64_t)p->nchans * sizeof(brd_ir_chan_t) > total ||
      p->op_off + (uint64_t)p->nops * sizeof(brd_ir_op_t) > total)
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "tables run past the blob's %u bytes", p->total_bytes);
  for (int r = 0; r < p->nranks; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    if ((uint64_t)rk->chan_first + rk->nchans > p->nchans ||
        rk->nchans > BRD_IR_CHAN_LOCAL)
      return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, -1,
                   "rank %d channels %u (+%u) beyond the table's %u", r,
                   rk->chan_first, rk->nchans, p->nchans);
    for (int b = 0; b < p->nblocks; b++) {
      const brd_ir_block_t *bk = brd_ir_plan_block(p, r, b);
      if ((uint64_t)bk->op_first + bk->nops > p->nops)
        return vfail(v, BRD_VERIFY_MALFORMED, r, b, -1, -1,
                     "rank %d block %d ops %u (+%u) beyond the table's %u", r,
                     b, bk->op_first, bk->nops, p->nops);
    }
  }
  return STEP_OK;
}

/* The collective, root, flags and (point-to-point) pairing table. */
static int check_kind(vstate_t *v) {
  const brd_ir_plan_t *p = v->p;
  if (p->coll >= BRD_IR_COLL_COUNT ||
      (p->flags & ~BRD_IR_PLAN_F_ALL) != 0 ||
      p->root >= p->nranks)
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "bad header: collective %u, flags 0x%x, root %u of %u ranks",
                 p->coll, p->flags, p->root, p->nranks);
  if (v->coll != BRD_IR_COLL_SENDRECV) return STEP_OK;
  if (v->p2p == NULL)
    return vfail(v, BRD_VERIFY_MALFORMED, -1, -1, -1, -1,
                 "a point-to-point plan is verified with its pairing "
                 "(brd_plan_verify_p2p)");
  for (int r = 0; r < v->n; r++) {
    const brd_verify_p2p_t *t = &v->p2p[r];
    if (t->nin < 0 || t->nout < 0 || (t->nin > 0 && t->in_chunks == NULL) ||
        (t->nout > 0 && t->out == NULL))
      return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, -1,
                   "pairing of rank %d: %d sends, %d receives", r, t->nin,
                   t->nout);
    for (int j = 0; j < t->nout; j++) {
      const brd_verify_p2p_seg_t *o = &t->out[j];
      if (o->src_rank < 0 || o->src_rank >= v->n || o->src_seg < 0 ||
          o->src_seg >= v->p2p[o->src_rank].nin ||
          o->nchunks > p->nchunks ||
          o->nchunks != v->p2p[o->src_rank].in_chunks[o->src_seg])
        return vfail(v, BRD_VERIFY_MALFORMED, r, -1, -1, o->src_rank,
                     "pairing of rank %d: receive %d names send %d of rank "
                     "%d with %u chunks, which does not exist or differs",
                     r, j, o->src_seg, o->src_rank, o->nchunks);
    }
  }
  return STEP_OK;
}

/* ---- execution ------------------------------------------------------------ */

static int record_read(vstate_t *v, vloc_t *l, int th, uint32_t clk, int op) {
  for (uint32_t i = 0; i < l->nrd; i++) {
    if (l->rd[i].thr == th) {
      l->rd[i].clk = clk;
      l->rd[i].op = op;
      return STEP_OK;
    }
  }
  if (l->nrd == l->caprd) {
    uint32_t cap = l->caprd ? l->caprd * 2 : 4;
    vread_t *rd = realloc(l->rd, cap * sizeof(*rd));
    if (rd == NULL) {
      v->oom = 1;
      return STEP_FAIL;
    }
    l->rd = rd;
    l->caprd = cap;
  }
  l->rd[l->nrd].thr = th;
  l->rd[l->nrd].clk = clk;
  l->rd[l->nrd].op = op;
  l->nrd++;
  return STEP_OK;
}

/* A plain read of l by th: the write it observes must be ordered before. */
static int check_raw(vstate_t *v, int th, int opi, const vloc_t *l, int owner,
                     const brd_ir_ref_t *ref, uint32_t index) {
  int r = thr_rank(v, th), b = thr_block(v, th);
  if (ordered(v, th, l->w_thr, l->w_clk, owner)) return STEP_OK;
  char w[96], pw[96];
  describe_writer(v, l->w_thr, l->w_op, w, sizeof(w));
  if (l->w_thr == W_INIT)
    return vfail(v, BRD_VERIFY_LAUNCH_ORDER, r, b, opi, owner,
                 "rank %d block %d op %d reads %s %u of rank %d before "
                 "synchronising with rank %d in this launch", r, b, opi,
                 buf_name(ref->buf), index, owner, owner);
  if (l->pw_thr != W_NONE && ordered(v, th, l->pw_thr, l->pw_clk, owner)) {
    describe_writer(v, l->pw_thr, l->pw_op, pw, sizeof(pw));
    return vfail(v, BRD_VERIFY_REUSE, r, b, opi, thr_rank(v, l->w_thr),
                 "%s overwrote %s %u of rank %d before rank %d block %d op %d "
                 "read the data %s had put there", w, buf_name(ref->buf),
                 index, owner, r, b, opi, pw);
  }
  return vfail(v, BRD_VERIFY_RACE, r, b, opi, thr_rank(v, l->w_thr),
               "rank %d block %d op %d reads %s %u of rank %d, written by %s "
               "without waiting for it", r, b, opi, buf_name(ref->buf), index,
               owner, w);
}

/* A write by th over l: the reads and the write it replaces must be
 * ordered before it. */
static int check_overwrite(vstate_t *v, int th, int opi, const vloc_t *l,
                           int owner, const brd_ir_ref_t *ref, uint32_t index) {
  int r = thr_rank(v, th), b = thr_block(v, th);
  for (uint32_t i = 0; i < l->nrd; i++) {
    const vread_t *rd = &l->rd[i];
    if (rd->thr == th || vc_of(v, th)[rd->thr] >= rd->clk) continue;
    return vfail(v, BRD_VERIFY_REUSE, r, b, opi, thr_rank(v, rd->thr),
                 "rank %d block %d op %d overwrites %s %u of rank %d before "
                 "rank %d block %d op %d finished reading it", r, b, opi,
                 buf_name(ref->buf), index, owner, thr_rank(v, rd->thr),
                 thr_block(v, rd->thr), rd->op);
  }
  if (l->w_thr >= 0 && !ordered(v, th, l->w_thr, l->w_clk, owner)) {
    char w[96];
    describe_writer(v, l->w_thr, l->w_op, w, sizeof(w));
    return vfail(v, BRD_VERIFY_RACE, r, b, opi, thr_rank(v, l->w_thr),
                 "rank %d block %d op %d and %s write %s %u of rank %d "
                 "without ordering", r, b, opi, w, buf_name(ref->buf), index,
                 owner);
  }
  return STEP_OK;
}

/* Packet sources must hold this iteration's flag before the op can run. */
static int packets_ready(vstate_t *v, int th, int opi, const brd_ir_op_t *op) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  int64_t want = (int64_t)t->iter * v->S + op->k_src;
  for (uint32_t c = 0; c < op->nchunks; c++) {
    for (int s = 0; s < op->nsrc; s++) {
      const brd_ir_ref_t *ref = &op->ref[s];
      if (!(ref->buf & BRD_IR_REF_LL)) continue;
      const vloc_t *l = &v->locs[loc_scratch(v, r, ref->index + c)];
      int64_t seen = l->w_thr != W_NONE && l->ll
                         ? (int64_t)l->w_iter * v->S + l->ll_k : -1;
      if (seen > want) {
        char w[96];
        describe_writer(v, l->w_thr, l->w_op, w, sizeof(w));
        return vfail(v, BRD_VERIFY_REUSE, r, b, opi, thr_rank(v, l->w_thr),
                     "%s rewrote LL scratch slot %u of rank %d (flag "
                     "sequence %lld) before rank %d block %d op %d read the "
                     "packets with sequence %lld", w, ref->index + c, r,
                     (long long)seen, r, b, opi, (long long)want);
      }
      if (seen < want) {
        t->why = BLK_PACKET;
        t->want = want;
        t->seen = seen;
        t->peer = -1;
        t->index = ref->index + (int)c;
        return STEP_BLOCKED;
      }
    }
  }
  return STEP_OK;
}

/* A one-phase plan's scratch slot has one writer rank: records r as the
 * writer of l, or fails when another rank wrote it. */
static int one_writer(vstate_t *v, vloc_t *l, int r, int b, int opi, int owner,
                      uint32_t index) {
  if (l->wrank >= 0 && l->wrank != r) {
    vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, owner,
          "rank %d block %d op %d writes scratch slot %u of rank %d, "
          "which rank %d writes too: a one-phase plan needs one writer "
          "rank per slot", r, b, opi, index, owner, l->wrank);
    return STEP_FAIL;
  }
  l->wrank = r;
  return STEP_OK;
}

/* A read of another rank's input: that rank must have joined the launch
 * (its input may still be in use before), and it must not finish before
 * the read (the caller may reuse the buffer then; checked at the end). */
static int note_input_read_of(vstate_t *v, int th, uint32_t clk, int opi, int owner,
                              const brd_ir_ref_t *ref, uint32_t c) {
  int r = thr_rank(v, th), b = thr_block(v, th);
  if (!knows_rank(v, th, owner))
    return vfail(v, BRD_VERIFY_LAUNCH_ORDER, r, b, opi, owner,
                 "rank %d block %d op %d reads input chunk %u of rank %d "
                 "before synchronising with rank %d in this launch", r, b, opi,
                 ref->index + c, owner, owner);
  if (v->ninrd == v->capinrd) {
    size_t cap = v->capinrd ? 2 * v->capinrd : 64;
    vinrd_t *p = realloc(v->inrd, cap * sizeof(*p));
    if (p == NULL) {
      v->oom = 1;
      return STEP_FAIL;
    }
    v->inrd = p;
    v->capinrd = cap;
  }
  vinrd_t *rd = &v->inrd[v->ninrd++];
  rd->owner = owner;
  rd->thr = th;
  rd->op = opi;
  rd->clk = clk;
  rd->index = ref->index + c;
  return STEP_OK;
}

static int note_input_read(vstate_t *v, int th, uint32_t clk, int opi,
                           const brd_ir_ref_t *ref, uint32_t c) {
  return note_input_read_of(v, th, clk, opi, ref_owner(v, thr_rank(v, th), ref), ref, c);
}

/* A red (MC_RED) that thread th must have ordered before its plain access
 * (read or write) of l, or NULL when all are. */
static const vread_t *unordered_red(vstate_t *v, int th, const vloc_t *l) {
  for (uint32_t i = 0; i < l->nred; i++) {
    const vread_t *rd = &l->red[i];
    if (rd->thr != th && vc_of(v, th)[rd->thr] < rd->clk) return rd;
  }
  return NULL;
}

/* Records a read (or red) of th at clk into list *lst (one entry per
 * thread, the latest). */
static int record_access(vstate_t *v, vread_t **lst, uint32_t *n, uint32_t *cap, int th,
                         uint32_t clk, int op) {
  for (uint32_t i = 0; i < *n; i++) {
    if ((*lst)[i].thr == th) {
      (*lst)[i].clk = clk;
      (*lst)[i].op = op;
      return STEP_OK;
    }
  }
  if (*n == *cap) {
    uint32_t c = *cap ? *cap * 2 : 4;
    vread_t *g = realloc(*lst, c * sizeof(*g));
    if (g == NULL) {
      v->oom = 1;
      return STEP_FAIL;
    }
    *lst = g;
    *cap = c;
  }
  (*lst)[*n].thr = th;
  (*lst)[*n].clk = clk;
  (*lst)[*n].op = op;
  (*n)++;
  return STEP_OK;
}

/* What one chunk of a data or switch op has read so far. */
typedef struct vval {
  int32_t seg;   /* input segment of the value, -1 before the first */
  uint16_t post; /* post-ops applied to the last source */
  int multi;     /* the op combines several sources */
} vval_t;

/* Thread th (op opi, clock clk, iteration t->iter, chunk `chunk`) reads
 * location li of rank `owner` through ref (slot or chunk `index`), adding
 * its contributions to v->acc. */
static int read_loc(vstate_t *v, int th, uint32_t clk, int opi, const brd_ir_ref_t *ref,
                    int owner, size_t li, uint32_t index, uint32_t chunk, vval_t *val) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  vloc_t *l = &v->locs[li];
  if (l->w_thr == W_NONE) {
    vfail(v, BRD_VERIFY_UNWRITTEN, r, b, opi, owner,
          "rank %d block %d op %d (iteration %d) reads %s %u of rank %d, "
          "which nothing has written", r, b, opi, t->iter, buf_name(ref->buf), index,
          owner);
    return vfail_chunk(v, (int)index);
  }
  if (ref->buf & BRD_IR_REF_LL) {
    vc_join(vc_of(v, th), l->w_vc, v->T);
  } else {
    if (l->ll) {
      vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, owner,
            "rank %d block %d op %d reads scratch slot %u of rank %d as "
            "plain data, but it holds LL packets", r, b, opi, index, owner);
      return vfail_chunk(v, (int)index);
    }
    const vread_t *rd = unordered_red(v, th, l);
    if (rd != NULL) {
      vfail(v, BRD_VERIFY_RACE, r, b, opi, thr_rank(v, rd->thr),
            "rank %d block %d op %d reads %s %u of rank %d while the MC_RED of rank "
            "%d block %d op %d into it is not ordered before the read", r, b, opi,
            buf_name(ref->buf), index, owner, thr_rank(v, rd->thr),
            thr_block(v, rd->thr), rd->op);
      return vfail_chunk(v, (int)index);
    }
    if (check_raw(v, th, opi, l, owner, ref, index) != STEP_OK)
      return vfail_chunk(v, (int)index);
  }
  if (record_read(v, l, th, clk, opi) != STEP_OK) return STEP_FAIL;
  if (l->iter != t->iter || (uint32_t)l->chunk != chunk ||
      (val->seg >= 0 && l->seg != val->seg)) {
    vfail(v, BRD_VERIFY_MISMATCH, r, b, opi, l->w_thr >= 0 ? thr_rank(v, l->w_thr) : owner,
          "rank %d block %d op %d (iteration %d, chunk %u%s) reads %s %u "
          "of rank %d holding chunk %d of iteration %d, segment %d", r,
          b, opi, t->iter, chunk, val->seg >= 0 ? ", after other sources" : "",
          buf_name(ref->buf), index, owner, l->chunk, l->iter, l->seg);
    return vfail_chunk(v, (int)chunk);
  }
  val->seg = l->seg;
  if (val->multi && l->post > 0) {
    vfail(v, BRD_VERIFY_POSTOP, r, b, opi, owner,
          "rank %d block %d op %d reduces %s %u of rank %d, which already "
          "had the post-op applied", r, b, opi, buf_name(ref->buf), index, owner);
    return vfail_chunk(v, (int)chunk);
  }
  val->post = l->post;
  const uint8_t *src = contrib_of(v, li);
  for (int q = 0; q < v->n; q++) {
    unsigned sum = (unsigned)v->acc[q] + src[q];
    v->acc[q] = (uint8_t)(sum > 255 ? 255 : sum);
  }
  return STEP_OK;
}

/* Thread th writes the value in v->acc (val) over location li of rank
 * `owner` through ref. */
static int write_loc(vstate_t *v, int th, uint32_t clk, int opi, const brd_ir_op_t *op,
                     const brd_ir_ref_t *ref, int owner, size_t li, uint32_t index,
                     uint32_t chunk, const vval_t *val) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  uint8_t kind = ref->buf & BRD_IR_BUF_MASK;
  vloc_t *l = &v->locs[li];
  if (owner != r && kind == BRD_IR_BUF_OUTPUT && !knows_rank(v, th, owner) &&
      !(v->p->flags & BRD_IR_PLAN_F_ONE_SIDED)) {
    vfail(v, BRD_VERIFY_LAUNCH_ORDER, r, b, opi, owner,
          "rank %d block %d op %d writes output chunk %u of rank %d "
          "before synchronising with rank %d in this launch (its output "
          "may still be in use)", r, b, opi, index, owner, owner);
    return vfail_chunk(v, (int)index);
  }
  const vread_t *rd = unordered_red(v, th, l);
  if (rd != NULL) {
    vfail(v, BRD_VERIFY_RACE, r, b, opi, thr_rank(v, rd->thr),
          "rank %d block %d op %d writes %s %u of rank %d while the MC_RED of rank "
          "%d block %d op %d into it is not ordered before the write", r, b, opi,
          buf_name(ref->buf), index, owner, thr_rank(v, rd->thr), thr_block(v, rd->thr),
          rd->op);
    return vfail_chunk(v, (int)index);
  }
  if (check_overwrite(v, th, opi, l, owner, ref, index) != STEP_OK)
    return vfail_chunk(v, (int)index);
  if (v->one_phase && kind == BRD_IR_BUF_SCRATCH &&
      one_writer(v, l, r, b, opi, owner, index) != STEP_OK)
    return vfail_chunk(v, (int)index);
  int ll = (ref->buf & BRD_IR_REF_LL) != 0;
  if (ll && l->ll && l->w_thr >= 0 &&
      (int64_t)t->iter * v->S + op->k <= (int64_t)l->w_iter * v->S + l->ll_k) {
    vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, owner,
          "rank %d block %d op %d writes LL slot %u of rank %d with flag "
          "sequence %lld, not above its last %lld: a reader could take "
          "the old packets", r, b, opi, index, owner,
          (long long)t->iter * v->S + op->k,
          (long long)l->w_iter * v->S + l->ll_k);
    return vfail_chunk(v, (int)index);
  }
  l->pw_thr = l->w_thr;
  l->pw_clk = l->w_clk;
  l->pw_op = l->w_op;
  l->w_thr = th;
  l->w_clk = clk;
  l->w_op = opi;
  l->w_iter = t->iter;
  l->iter = t->iter;
  l->chunk = (int32_t)chunk;
  l->seg = val->seg;
  l->post = val->post;
  l->ll = (uint8_t)ll;
  l->ll_k = op->k;
  l->nrd = 0;
  l->nred = 0;
  memcpy(contrib_of(v, li), v->acc, (size_t)v->n);
  if (ll) {
    uint32_t *vc = vc_of(v, th);
    if (l->w_vc == NULL && (l->w_vc = vc_copy(v, vc)) == NULL) return STEP_FAIL;
    memcpy(l->w_vc, vc, (size_t)v->T * sizeof(*vc));
  }
  return STEP_OK;
}

/* Thread th combines the value in v->acc (val) into location li of rank
 * `owner` (MC_RED): ordered after the write it combines with and every
 * read of it, unordered against other reds. */
static int red_loc(vstate_t *v, int th, uint32_t clk, int opi, const brd_ir_ref_t *ref,
                   int owner, size_t li, uint32_t index, uint32_t chunk, const vval_t *val) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  vloc_t *l = &v->locs[li];
  if (l->w_thr == W_NONE) {
    vfail(v, BRD_VERIFY_UNWRITTEN, r, b, opi, owner,
          "rank %d block %d op %d (iteration %d) combines into %s %u of rank %d, "
          "which nothing has written", r, b, opi, t->iter, buf_name(ref->buf), index,
          owner);
    return vfail_chunk(v, (int)index);
  }
  if (l->ll) {
    vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, owner,
          "rank %d block %d op %d combines into scratch slot %u of rank %d, which "
          "holds LL packets", r, b, opi, index, owner);
    return vfail_chunk(v, (int)index);
  }
  if (!ordered(v, th, l->w_thr, l->w_clk, owner)) {
    char w[96];
    describe_writer(v, l->w_thr, l->w_op, w, sizeof(w));
    vfail(v, BRD_VERIFY_RACE, r, b, opi, l->w_thr >= 0 ? thr_rank(v, l->w_thr) : owner,
          "rank %d block %d op %d combines into %s %u of rank %d, written by %s "
          "without waiting for it", r, b, opi, buf_name(ref->buf), index, owner, w);
    return vfail_chunk(v, (int)index);
  }
  for (uint32_t i = 0; i < l->nrd; i++) {
    const vread_t *rd = &l->rd[i];
    if (rd->thr == th || vc_of(v, th)[rd->thr] >= rd->clk) continue;
    vfail(v, BRD_VERIFY_RACE, r, b, opi, thr_rank(v, rd->thr),
          "rank %d block %d op %d combines into %s %u of rank %d while rank %d "
          "block %d op %d may still be reading it", r, b, opi, buf_name(ref->buf),
          index, owner, thr_rank(v, rd->thr), thr_block(v, rd->thr), rd->op);
    return vfail_chunk(v, (int)index);
  }
  if (l->iter != t->iter || (uint32_t)l->chunk != chunk ||
      (val->seg >= 0 && l->seg != val->seg)) {
    vfail(v, BRD_VERIFY_MISMATCH, r, b, opi, -1,
          "rank %d block %d op %d (iteration %d, chunk %u) combines into %s %u of "
          "rank %d holding chunk %d of iteration %d, segment %d", r, b, opi, t->iter,
          chunk, buf_name(ref->buf), index, owner, l->chunk, l->iter, l->seg);
    return vfail_chunk(v, (int)chunk);
  }
  if (l->post > 0 || val->post > 0) {
    vfail(v, BRD_VERIFY_POSTOP, r, b, opi, owner,
          "rank %d block %d op %d combines into %s %u of rank %d with the post-op "
          "already applied to one side", r, b, opi, buf_name(ref->buf), index, owner);
    return vfail_chunk(v, (int)chunk);
  }
  uint8_t *dst = contrib_of(v, li);
  for (int q = 0; q < v->n; q++) {
    unsigned sum = (unsigned)dst[q] + v->acc[q];
    dst[q] = (uint8_t)(sum > 255 ? 255 : sum);
  }
  return record_access(v, &l->red, &l->nred, &l->capred, th, clk, opi);
}

/* Data ops and the switch data ops (MC_REDUCE, MC_STORE, MC_RED): a ref
 * through the switch channel stands for the slot in every member's copy
 * (read: every member's contribution; write: every copy). */
static int exec_data(vstate_t *v, int th, int opi, const brd_ir_op_t *op) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  int res = packets_ready(v, th, opi, op);
  if (res != STEP_OK) return res;
  uint32_t *vc = vc_of(v, th);
  uint32_t clk = ++vc[th];
  int nsrc_eff = 0;
  for (int s = 0; s < op->nsrc; s++)
    nsrc_eff += ref_is_switch(v, r, &op->ref[s]) ? sw_nmembers(v, r) : 1;

  for (uint32_t c = 0; c < op->nchunks; c++) {
    uint32_t chunk = op->chunk + c;
    vval_t val = {-1, 0, nsrc_eff > 1};
    memset(v->acc, 0, (size_t)v->n);
    for (int s = 0; s < op->nsrc; s++) {
      const brd_ir_ref_t *ref = &op->ref[s];
      uint8_t kind = ref->buf & BRD_IR_BUF_MASK;
      uint32_t index = ref->index + c;
      if (ref_is_switch(v, r, ref)) {
        for (int m = 0; m < v->n; m++) {
          if (!sw_member(v, r, m)) continue;
          if (kind == BRD_IR_BUF_INPUT && alias_out(v, m, ref_seg(v, index)) < 0) {
            /* A zero-copy switch plan reads member m's own input: m
             * must have joined, and it counts once in the sum. */
            if (note_input_read_of(v, th, clk, opi, m, ref, c) != STEP_OK)
              return vfail_chunk(v, (int)index);
            int32_t seg = ref_seg(v, index);
            if (val.seg >= 0 && seg != val.seg) {
              vfail(v, BRD_VERIFY_MISMATCH, r, b, opi, -1,
                    "rank %d block %d op %d (iteration %d, chunk %u) combines input "
                    "segment %d with data of segment %d", r, b, opi, t->iter, chunk, seg,
                    val.seg);
              return vfail_chunk(v, (int)chunk);
            }
            val.seg = seg;
            if (v->acc[m] < 255) v->acc[m]++;
            continue;
          }
          size_t li = kind == BRD_IR_BUF_SCRATCH ? loc_scratch(v, m, index)
                                                 : loc_of(v, m, t->iter, ref, c);
          if (read_loc(v, th, clk, opi, ref, m, li, index, chunk, &val) != STEP_OK)
            return STEP_FAIL;
        }
        continue;
      }
      if (kind == BRD_IR_BUF_INPUT && ref->chan != BRD_IR_CHAN_LOCAL &&
          note_input_read(v, th, clk, opi, ref, c) != STEP_OK)
        return vfail_chunk(v, (int)(ref->index + c));
      if (kind == BRD_IR_BUF_INPUT &&
          alias_out(v, ref_owner(v, r, ref), ref_seg(v, ref->index + c)) < 0) {
        int32_t seg = ref_seg(v, ref->index + c);
        if (val.seg >= 0 && seg != val.seg) {
          vfail(v, BRD_VERIFY_MISMATCH, r, b, opi, -1,
                "rank %d block %d op %d (iteration %d, chunk %u) combines "
                "input segment %d with data of segment %d", r, b, opi,
                t->iter, chunk, seg, val.seg);
          return vfail_chunk(v, (int)chunk);
        }
        val.seg = seg;
        int owner = ref_owner(v, r, ref);
        if (v->acc[owner] < 255) v->acc[owner]++;
        continue;
      }
      if (read_loc(v, th, clk, opi, ref, ref_owner(v, r, ref),
                   ref_loc(v, r, t->iter, ref, c), index, chunk, &val) != STEP_OK)
        return STEP_FAIL;
    }
    if (op->flags & BRD_IR_F_POSTOP) {
      if (val.post > 0) {
        vfail(v, BRD_VERIFY_POSTOP, r, b, opi, -1,
              "rank %d block %d op %d applies the post-op to chunk %u a "
              "second time", r, b, opi, chunk);
        return vfail_chunk(v, (int)chunk);
      }
      val.post = 1;
    }
    for (int d = op->nsrc; d < op->nsrc + op->ndst; d++) {
      const brd_ir_ref_t *ref = &op->ref[d];
      uint32_t index = ref->index + c;
      if (ref_is_switch(v, r, ref)) {
        for (int m = 0; m < v->n; m++) {
          if (!sw_member(v, r, m)) continue;
          size_t li = (ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_SCRATCH
                          ? loc_scratch(v, m, index)
                          : loc_of(v, m, t->iter, ref, c);
          int rc = op->code == BRD_IR_OP_MC_RED
                       ? red_loc(v, th, clk, opi, ref, m, li, index, chunk, &val)
                       : write_loc(v, th, clk, opi, op, ref, m, li, index, chunk, &val);
          if (rc != STEP_OK) return STEP_FAIL;
        }
        continue;
      }
      if (write_loc(v, th, clk, opi, op, ref, ref_owner(v, r, ref),
                    ref_loc(v, r, t->iter, ref, c), index, chunk, &val) != STEP_OK)
        return STEP_FAIL;
    }
  }
  return STEP_OK;
}

static vsem_t *sem_of(vstate_t *v, int rank, int chan, uint32_t index) {
  return &v->sems[v->sem_base[rank] + (size_t)chan * v->p->nsems + index];
}

/* Appends a store of `value` with the storer's clock vc to s's history. */
static int sem_push(vstate_t *v, vsem_t *s, int64_t value, const uint32_t *vc) {
  if (s->nhist == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 4;
    vsig_t *h = realloc(s->hist, cap * sizeof(*h));
    if (h == NULL) {
      v->oom = 1;
      return STEP_FAIL;
    }
    s->hist = h;
    s->cap = cap;
  }
  uint32_t *snap = vc_copy(v, vc);
  if (snap == NULL) return STEP_FAIL;
  s->hist[s->nhist].value = value;
  s->hist[s->nhist].vc = snap;
  s->nhist++;
  s->value = value;
  return STEP_OK;
}

/* Joins into vc the clock of the first store to s that reached want
 * (a later one may not have been visible yet). s->value >= want. */
static void sem_acquire(vstate_t *v, const vsem_t *s, int64_t want, uint32_t *vc) {
  uint32_t lo = 0, hi = s->nhist - 1;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (s->hist[mid].value >= want) hi = mid;
    else lo = mid + 1;
  }
  vc_join(vc, s->hist[lo].vc, v->T);
}

/* MC_BARRIER: the rank's word of switch semaphore `index` (one value in
 * every member's copy) gets seq(it, k) with the rank's clock (release);
 * then the thread waits until every member's word reached it and joins
 * their clocks (acquire). */
static int exec_mc_barrier(vstate_t *v, int th, int opi, const brd_ir_op_t *op) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  uint32_t idx = op->ref[0].index;
  int64_t want = (int64_t)t->iter * v->S + op->k;
  uint32_t *vc = vc_of(v, th);
  if (!t->mcb_arrived) {
    vsem_t *s = &v->swsem[(size_t)idx * v->n + r];
    if (want <= s->value)
      return vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, -1,
                   "rank %d block %d op %d stores %lld to its word of switch semaphore "
                   "%u, which already holds %lld: values must increase", r, b, opi,
                   (long long)want, idx, (long long)s->value);
    ++vc[th];
    if (sem_push(v, s, want, vc) != STEP_OK) return STEP_FAIL;
    t->mcb_arrived = 1;
  }
  for (int m = 0; m < v->n; m++) {
    const vsem_t *s = &v->swsem[(size_t)idx * v->n + m];
    if (!sw_member(v, r, m) || s->value >= want) continue;
    t->why = BLK_SWITCH;
    t->want = want;
    t->seen = s->value;
    t->peer = m;
    t->index = (int)idx;
    return STEP_BLOCKED;
  }
  ++vc[th];
  for (int m = 0; m < v->n; m++)
    if (sw_member(v, r, m)) sem_acquire(v, &v->swsem[(size_t)idx * v->n + m], want, vc);
  t->mcb_arrived = 0;
  return STEP_OK;
}

static int exec_signal(vstate_t *v, int th, int opi, const brd_ir_op_t *op) {
  int r = thr_rank(v, th), b = thr_block(v, th);
  const brd_ir_ref_t *ref = &op->ref[0];
  int peer = chan_of(v, r, ref->chan)->peer;
  int back = v->rev_chan[brd_ir_plan_rank(v->p, r)->chan_first + ref->chan];
  vsem_t *s = sem_of(v, peer, back, ref->index);
  int64_t value = (int64_t)v->thr[th].iter * v->S + op->k;
  if (value <= s->value)
    return vfail(v, BRD_VERIFY_MALFORMED, r, b, opi, peer,
                 "rank %d block %d op %d stores %lld to semaphore %u of rank "
                 "%d, which already holds %lld: values must increase", r, b,
                 opi, (long long)value, ref->index, peer, (long long)s->value);
  uint32_t *vc = vc_of(v, th);
  ++vc[th];
  return sem_push(v, s, value, vc);
}

static int exec_wait(vstate_t *v, int th, const brd_ir_op_t *op) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th);
  const brd_ir_ref_t *ref = &op->ref[0];
  int64_t want = (int64_t)t->iter * v->S + op->k;
  uint32_t *vc = vc_of(v, th);
  if (want <= 0) {
    ++vc[th];
    return STEP_OK;
  }
  vsem_t *s = sem_of(v, r, ref->chan, ref->index);
  if (s->value < want) {
    t->why = BLK_SEM;
    t->want = want;
    t->seen = s->value;
    t->peer = chan_of(v, r, ref->chan)->peer;
    t->index = ref->index;
    return STEP_BLOCKED;
  }
  ++vc[th];
  sem_acquire(v, s, want, vc);
  return STEP_OK;
}

static int exec_barrier(vstate_t *v, int th) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th);
  uint32_t g = t->nbar, slot = g % 2;
  uint32_t *gen = &v->bar_gen[r * 2 + slot];
  uint32_t *count = &v->bar_count[r * 2 + slot];
  uint32_t *acc = v->bar_acc + ((size_t)r * 2 + slot) * v->T;
  uint32_t *vc = vc_of(v, th);
  if (!t->bar_arrived) {
    if (*gen != g) {
      *gen = g;
      *count = 0;
      memset(acc, 0, (size_t)v->T * sizeof(*acc));
    }
    ++vc[th];
    vc_join(acc, vc, v->T);
    (*count)++;
    t->bar_arrived = 1;
  }
  if (*count < (uint32_t)v->B) {
    t->why = BLK_BARRIER;
    t->want = v->B;
    t->seen = *count;
    t->peer = -1;
    t->index = (int)g;
    return STEP_BLOCKED;
  }
  vc_join(vc, acc, v->T);
  t->nbar++;
  t->bar_arrived = 0;
  return STEP_OK;
}

/* Runs thread th until it blocks, fails or finishes; *progress is set when
 * it executed at least one op. */
static int run_thread(vstate_t *v, int th, int *progress) {
  vthr_t *t = &v->thr[th];
  int r = thr_rank(v, th), b = thr_block(v, th);
  const brd_ir_op_t *ops = brd_ir_plan_ops(v->p, r, b);
  uint32_t nops = brd_ir_plan_block(v->p, r, b)->nops;
  if (nops == 0) t->done = 1;
  while (!t->done) {
    const brd_ir_op_t *op = &ops[t->pc];
    int opi = (int)t->pc, res;
    t->why = BLK_NONE;
    switch (op->code) {
    case BRD_IR_OP_NOP: res = STEP_OK; break;
    case BRD_IR_OP_SIGNAL: res = exec_signal(v, th, opi, op); break;
    case BRD_IR_OP_WAIT: res = exec_wait(v, th, op); break;
    case BRD_IR_OP_BARRIER: res = exec_barrier(v, th); break;
    case BRD_IR_OP_MC_BARRIER: res = exec_mc_barrier(v, th, opi, op); break;
    default: res = exec_data(v, th, opi, op); break;
    }
    if (res != STEP_OK) return res;
    *progress = 1;
    if (++t->pc == nops) {
      t->pc = 0;
      if (t->iter == 0)
        memcpy(v->vc0 + (size_t)th * v->T, vc_of(v, th), (size_t)v->T * sizeof(uint32_t));
      if (++t->iter == v->niter) t->done = 1;
    }
  }
  return STEP_OK;
}

static int report_deadlock(vstate_t *v) {
  int first = -1, nblocked = 0;
  for (int th = 0; th < v->T; th++) {
    if (v->thr[th].done) continue;
    nblocked++;
    if (first < 0) first = th;
  }
  const vthr_t *t = &v->thr[first];
  int r = thr_rank(v, first), b = thr_block(v, first);
  switch (t->why) {
  case BLK_SEM:
    return vfail(v, BRD_VERIFY_DEADLOCK, r, b, (int)t->pc, t->peer,
                 "rank %d block %d op %d (iteration %d) waits for semaphore %d "
                 "from rank %d to reach sequence %lld; it holds %lld and no "
                 "remaining op raises it (%d blocks stuck)", r, b, t->pc,
                 t->iter, t->index, t->peer, (long long)t->want,
                 (long long)t->seen, nblocked);
  case BLK_SWITCH:
    return vfail(v, BRD_VERIFY_DEADLOCK, r, b, (int)t->pc, t->peer,
                 "rank %d block %d op %d (iteration %d) waits at MC_BARRIER for rank "
                 "%d's word of switch semaphore %d to reach sequence %lld; it holds "
                 "%lld and no remaining op raises it (%d blocks stuck)", r, b, t->pc,
                 t->iter, t->peer, t->index, (long long)t->want, (long long)t->seen,
                 nblocked);
  case BLK_PACKET:
    return vfail(v, BRD_VERIFY_DEADLOCK, r, b, (int)t->pc, -1,
                 "rank %d block %d op %d (iteration %d) waits for LL packets "
                 "with sequence %lld in its scratch slot %d, which holds %lld; "
                 "no remaining op writes them (%d blocks stuck)", r, b, t->pc,
                 t->iter, (long long)t->want, t->index, (long long)t->seen,
                 nblocked);
  default:
    return vfail(v, BRD_VERIFY_DEADLOCK, r, b, (int)t->pc, -1,
                 "rank %d block %d op %d (iteration %d) waits at barrier %d "
                 "with %lld of %lld blocks arrived; the others never reach it "
                 "(%d blocks stuck)", r, b, t->pc, t->iter, t->index,
                 (long long)t->seen, (long long)t->want, nblocked);
  }
}

static int run_all(vstate_t *v) {
  for (;;) {
    int progress = 0, alive = 0;
    for (int th = 0; th < v->T; th++) {
      if (run_thread(v, th, &progress) == STEP_FAIL) return STEP_FAIL;
      if (!v->thr[th].done) alive = 1;
    }
    if (!alive) return STEP_OK;
    if (!progress) return report_deadlock(v);
  }
}

/* Rank r's clock at the end of the launch: the join of its blocks'. */
static void rank_end_clock(vstate_t *v, int r, uint32_t *out) {
  memset(out, 0, (size_t)v->T * sizeof(*out));
  for (int b = 0; b < v->B; b++) vc_join(out, vc_of(v, r * v->B + b), v->T);
}

/* What output segment `seg` of rank r must hold. */
typedef struct expect {
  int seg;      /* input segment of the value */
  int one;      /* the one contributing rank, -1 for all */
  int post;     /* post-ops applied */
  uint32_t nchunks; /* chunks holding data */
} expect_t;

static expect_t expect_of(const vstate_t *v, int r, int seg) {
  /* Reductions apply the post-op once; the rest move values unchanged. */
  expect_t e = {0, -1, brd_ir_coll_traits(v->coll).reduction, v->p->nchunks};
  switch (v->coll) {
  case BRD_IR_COLL_ALLREDUCE: break;
  case BRD_IR_COLL_ALLGATHER: e.one = seg; break;
  case BRD_IR_COLL_REDUCESCATTER: e.seg = r; break;
  case BRD_IR_COLL_BROADCAST: e.one = v->root; break;
  case BRD_IR_COLL_REDUCE: break;
  case BRD_IR_COLL_ALLTOALL: e.seg = r; e.one = seg; break;
  case BRD_IR_COLL_GATHER: e.one = seg; break;
  case BRD_IR_COLL_SCATTER: e.seg = r; e.one = v->root; break;
  default: /* SENDRECV */
    e.seg = v->p2p[r].out[seg].src_seg;
    e.one = v->p2p[r].out[seg].src_rank;
    e.nchunks = v->p2p[r].out[seg].nchunks;
    break;
  }
  return e;
}

/* Does the clock `c` (a rank's end) cover any op of rank q? */
static int clock_knows(const vstate_t *v, const uint32_t *c, int q) {
  for (int b = 0; b < v->B; b++)
    if (c[q * v->B + b] > 0) return 1;
  return 0;
}

/* Outputs: every chunk of every output segment, rank and iteration holds
 * what the collective defines, written before its rank can finish. */
static int check_outputs(vstate_t *v) {
  uint32_t *end = v->bar_acc; /* free after the run; T entries */
  for (int r = 0; r < v->n; r++) {
    rank_end_clock(v, r, end);
    for (int seg = 0; seg < v->nout[r]; seg++) {
      expect_t e = expect_of(v, r, seg);
      for (int it = 0; it < v->niter; it++) {
        for (uint32_t c = 0; c < e.nchunks; c++) {
          size_t li = loc_out(v, r, it, seg, c);
          const vloc_t *l = &v->locs[li];
          int wb = l->w_thr >= 0 ? thr_block(v, l->w_thr) : -1;
          int wr = l->w_thr >= 0 ? thr_rank(v, l->w_thr) : r;
          /* A reduction always writes its output (even one rank's: the
           * runtime copies it out of the staging); a collective whose
           * in-place input already is the answer (all-gather's own
           * segment, the root's broadcast output, ...) may leave it, and
           * the runtime's copy-outs leave it alone (verify.h). */
          if (l->w_thr == W_NONE ||
              (v->inplace && l->w_thr == W_INIT &&
               brd_ir_coll_traits((unsigned)v->coll).reduction)) {
            vfail(v, BRD_VERIFY_MISSING, r, -1, -1, -1,
                  "output chunk %u of rank %d (segment %d, iteration %d) is "
                  "never written", c, r, seg, it);
            return vfail_chunk(v, (int)c);
          }
          if (l->iter != it || (uint32_t)l->chunk != c || l->seg != e.seg) {
            vfail(v, BRD_VERIFY_MISMATCH, wr, wb, l->w_op, -1,
                  "output chunk %u of rank %d (segment %d, iteration %d) "
                  "holds chunk %d of iteration %d of input segment %d, not "
                  "of segment %d, written by rank %d block %d op %d", c, r,
                  seg, it, l->chunk, l->iter, l->seg, e.seg, wr, wb, l->w_op);
            return vfail_chunk(v, (int)c);
          }
          const uint8_t *got = contrib_of(v, li);
          for (int q = 0; q < v->n; q++) {
            int want = e.one < 0 || e.one == q ? 1 : 0;
            if (got[q] == want) continue;
            vfail(v, got[q] > want ? BRD_VERIFY_DUPLICATE : BRD_VERIFY_MISSING,
                  wr, wb, l->w_op, q,
                  "output chunk %u of rank %d (segment %d, iteration %d) has "
                  "rank %d's contribution %d times, expected %d (last "
                  "written by rank %d block %d op %d)", c, r, seg, it, q,
                  got[q], want, wr, wb, l->w_op);
            return vfail_chunk(v, (int)c);
          }
          if (l->post != e.post) {
            vfail(v, BRD_VERIFY_POSTOP, wr, wb, l->w_op, -1,
                  "output chunk %u of rank %d (segment %d, iteration %d) had "
                  "the post-op applied %u times, expected %d (last written by "
                  "rank %d block %d op %d)", c, r, seg, it, l->post, e.post,
                  wr, wb, l->w_op);
            return vfail_chunk(v, (int)c);
          }
          /* The launch on rank r may only end once its output is final. */
          if (l->w_thr >= 0 && end[l->w_thr] < l->w_clk) {
            vfail(v, BRD_VERIFY_RACE, wr, wb, l->w_op, r,
                  "rank %d can finish the launch before rank %d block %d op "
                  "%d writes its output chunk %u (segment %d, iteration %d): "
                  "no wait orders that write before rank %d's last op", r,
                  wr, wb, l->w_op, c, seg, it, r);
            return vfail_chunk(v, (int)c);
          }
        }
      }
    }
  }
  return STEP_OK;
}

/* Across launches. With scratch phases, a rank writes a peer's half of
 * phase X in launch L assuming the peer finished launch L-2; that holds
 * when no rank finished L-1 before every rank had started it, so every
 * rank's end must follow an op of every other rank, even in a launch of a
 * single iteration: checked on the clocks at the end of iteration 0 (later
 * iterations may learn of a rank only through an earlier one's waits). A
 * one-phase plan instead reuses its slots in the next launch at once, so
 * every write to another rank's scratch must have been read before the
 * writer finishes. */
static int check_launch_end(vstate_t *v) {
  uint32_t *end = v->bar_acc;
  for (int r = 0; r < v->n; r++) {
    if (!v->one_phase) {
      memset(end, 0, (size_t)v->T * sizeof(*end));
      for (int b = 0; b < v->B; b++)
        vc_join(end, v->vc0 + (size_t)(r * v->B + b) * v->T, v->T);
      for (int q = 0; q < v->n; q++) {
        if (q == r || clock_knows(v, end, q)) continue;
        return vfail(v, BRD_VERIFY_LAUNCH_ORDER, r, -1, -1, q,
                     "rank %d can finish the launch before rank %d has run "
                     "any op of it: the next launch could then write scratch "
                     "rank %d still uses (add an acknowledgement from rank "
                     "%d)", r, q, q, q);
      }
      continue;
    }
    rank_end_clock(v, r, end);
    for (int q = 0; q < v->n; q++) {
      for (uint32_t slot = 0; slot < v->p->nslots; slot++) {
        const vloc_t *l = &v->locs[loc_scratch(v, q, slot)];
        if (l->w_thr < 0 || thr_rank(v, l->w_thr) != r || q == r) continue;
        for (uint32_t i = 0; i < l->nrd; i++) {
          if (end[l->rd[i].thr] >= l->rd[i].clk) continue;
          vfail(v, BRD_VERIFY_REUSE, r, thr_block(v, l->w_thr), l->w_op, q,
                "rank %d can finish the launch before rank %d block %d op %d "
                "reads what rank %d block %d op %d wrote in its scratch slot "
                "%u: the next launch would overwrite it (wait for an "
                "acknowledgement)", r, q, thr_block(v, l->rd[i].thr),
                l->rd[i].op, r, thr_block(v, l->w_thr), l->w_op, slot);
          return vfail_chunk(v, (int)slot);
        }
      }
    }
  }
  return STEP_OK;
}

/* Reads of a peer's input end before that peer can finish the launch. */
static int check_input_reads(vstate_t *v) {
  uint32_t *end = v->bar_acc;
  for (int q = 0; q < v->n; q++) {
    int have = 0;
    for (size_t i = 0; i < v->ninrd && !have; i++) have = v->inrd[i].owner == q;
    if (!have) continue;
    rank_end_clock(v, q, end);
    for (size_t i = 0; i < v->ninrd; i++) {
      const vinrd_t *rd = &v->inrd[i];
      if (rd->owner != q || end[rd->thr] >= rd->clk) continue;
      int r = thr_rank(v, rd->thr), b = thr_block(v, rd->thr);
      return vfail(v, BRD_VERIFY_RACE, r, b, rd->op, q,
                   "rank %d can finish the launch before rank %d block %d op "
                   "%d reads its input chunk %u: no wait orders that read "
                   "before rank %d's last op (its caller may reuse the buffer)",
                   q, r, b, rd->op, rd->index, q);
    }
  }
  return STEP_OK;
}

/* ---- setup ---------------------------------------------------------------- */

static void vstate_free(vstate_t *v) {
  free(v->inrd);
  size_t nlocs = (size_t)v->n * v->per_rank;
  if (v->locs != NULL) {
    for (size_t i = 0; i < nlocs; i++) {
      free(v->locs[i].w_vc);
      free(v->locs[i].rd);
      free(v->locs[i].red);
    }
  }
  if (v->sems != NULL) {
    size_t nsems = v->sem_base ? v->sem_base[v->n] : 0;
    for (size_t i = 0; i < nsems; i++) {
      for (uint32_t h = 0; h < v->sems[i].nhist; h++) free(v->sems[i].hist[h].vc);
      free(v->sems[i].hist);
    }
  }
  if (v->swsem != NULL) {
    size_t nsw = (size_t)v->p->nsems * v->n;
    for (size_t i = 0; i < nsw; i++) {
      for (uint32_t h = 0; h < v->swsem[i].nhist; h++) free(v->swsem[i].hist[h].vc);
      free(v->swsem[i].hist);
    }
  }
  free(v->swsem);
  free(v->swch);
  free(v->sw_blk);
  free(v->sw_k);
  free(v->vc);
  free(v->vc0);
  free(v->thr);
  free(v->locs);
  free(v->contrib);
  free(v->sems);
  free(v->sem_base);
  free(v->rev_chan);
  free(v->sig_blk);
  free(v->sig_k);
  free(v->bar_gen);
  free(v->bar_count);
  free(v->bar_acc);
  free(v->acc);
  free(v->nin);
  free(v->nout);
}

/* Segments per rank (the collective's), before anything is sized. */
static int vstate_segments(vstate_t *v) {
  v->nin = calloc((size_t)v->n, sizeof(*v->nin));
  v->nout = calloc((size_t)v->n, sizeof(*v->nout));
  if (v->nin == NULL || v->nout == NULL) return -1;
  v->nout_max = 1;
  for (int r = 0; r < v->n; r++) {
    /* The collective's buffers (device/ir.h); point-to-point's are the
     * launch's own tables. */
    brd_ir_coll_traits_t t = brd_ir_coll_traits(v->coll);
    int ni = !brd_ir_coll_has_input(v->coll, r, v->root) ? 0 : t.in_segs_all ? v->n : 1;
    int no = !brd_ir_coll_has_output(v->coll, r, v->root) ? 0 : t.out_segs_all ? v->n : 1;
    if (v->coll == BRD_IR_COLL_SENDRECV) {
      ni = v->p2p[r].nin;
      no = v->p2p[r].nout;
    }
    v->nin[r] = ni;
    v->nout[r] = no;
    if (no > v->nout_max) v->nout_max = no;
  }
  return 0;
}

static int vstate_alloc(vstate_t *v) {
  const brd_ir_plan_t *p = v->p;
  size_t n = (size_t)v->n, T = (size_t)v->T;
  size_t nlocs = n * v->per_rank;
  v->sem_base = calloc(n + 1, sizeof(*v->sem_base));
  if (v->sem_base == NULL) return -1;
  for (int r = 0; r < v->n; r++)
    v->sem_base[r + 1] = v->sem_base[r] +
                         (size_t)brd_ir_plan_rank(p, r)->nchans * p->nsems;
  size_t nsems = v->sem_base[n];
  v->vc = calloc(T * T, sizeof(*v->vc));
  v->vc0 = calloc(T * T, sizeof(*v->vc0));
  v->thr = calloc(T, sizeof(*v->thr));
  v->locs = calloc(nlocs, sizeof(*v->locs));
  v->contrib = calloc(nlocs * n, 1);
  v->sems = calloc(nsems ? nsems : 1, sizeof(*v->sems));
  v->rev_chan = calloc(p->nchans ? p->nchans : 1, sizeof(*v->rev_chan));
  v->sig_blk = malloc((nsems ? nsems : 1) * sizeof(*v->sig_blk));
  v->sig_k = calloc(nsems ? nsems : 1, sizeof(*v->sig_k));
  v->bar_gen = calloc(n * 2, sizeof(*v->bar_gen));
  v->bar_count = calloc(n * 2, sizeof(*v->bar_count));
  v->bar_acc = calloc(n * 2 * T, sizeof(*v->bar_acc));
  v->acc = calloc(n, 1);
  size_t nsw = (size_t)p->nsems * n;
  v->swch = calloc(n, sizeof(*v->swch));
  v->swsem = calloc(nsw ? nsw : 1, sizeof(*v->swsem));
  v->sw_blk = malloc((nsw ? nsw : 1) * sizeof(*v->sw_blk));
  v->sw_k = calloc(nsw ? nsw : 1, sizeof(*v->sw_k));
  if (!v->swch || !v->swsem || !v->sw_blk || !v->sw_k) return -1;
  for (size_t i = 0; i < nsw; i++) v->sw_blk[i] = -1;
  if (!v->vc || !v->vc0 || !v->thr || !v->locs || !v->contrib || !v->sems ||
      !v->rev_chan || !v->sig_blk || !v->sig_k || !v->bar_gen ||
      !v->bar_count || !v->bar_acc || !v->acc)
    return -1;
  for (size_t i = 0; i < nsems; i++) v->sig_blk[i] = -1;
  for (size_t i = 0; i < n * 2; i++) v->bar_gen[i] = UINT32_MAX;
  for (size_t i = 0; i < nlocs; i++) {
    v->locs[i].w_thr = W_NONE;
    v->locs[i].pw_thr = W_NONE;
    v->locs[i].iter = -1;
    v->locs[i].chunk = -1;
    v->locs[i].seg = -1;
    v->locs[i].wrank = -1;
  }
  /* In place, the aliased output segment starts as the rank's own input
   * segment. */
  for (int r = 0; r < v->n; r++) {
    for (int seg = 0; seg < v->nin[r]; seg++) {
      int out = alias_out(v, r, seg);
      if (out < 0 || out >= v->nout[r]) continue;
      for (int it = 0; it < v->niter; it++) {
        for (uint32_t c = 0; c < p->nchunks; c++) {
          size_t li = loc_out(v, r, it, out, c);
          v->locs[li].w_thr = W_INIT;
          v->locs[li].iter = it;
          v->locs[li].chunk = (int32_t)c;
          v->locs[li].seg = seg;
          contrib_of(v, li)[r] = 1;
        }
      }
    }
  }
  return 0;
}

static ncclResult_t verify(const brd_ir_plan_t *plan,
                           const brd_verify_opts_t *opts,
                           const brd_verify_p2p_t *p2p,
                           brd_verify_report_t *report_out) {
  ncclResult_t res = ncclSuccess;
  brd_verify_report_t rep;
  vstate_t v;
  memset(&rep, 0, sizeof(rep));
  memset(&v, 0, sizeof(v));
  rep.kind = BRD_VERIFY_OK;
  rep.rank = rep.block = rep.op = rep.peer = rep.chunk = -1;
  v.rep = &rep;
  v.p = plan;
  if (check_header(&v, plan) != STEP_OK) goto fail_report;
  v.n = plan->nranks;
  v.B = plan->nblocks;
  v.T = v.n * v.B;
  v.S = plan->seq_per_iter;
  v.coll = plan->coll;
  v.root = plan->root;
  v.one_phase = (plan->flags & BRD_IR_PLAN_F_ONE_PHASE) != 0;
  v.niter = opts && opts->niter > 0 ? opts->niter : 2;
  v.inplace = opts ? opts->in_place : 0;
  if (v.coll == BRD_IR_COLL_SENDRECV) {
    /* A point-to-point plan is made per launch for one window. */
    v.niter = 1;
    v.inplace = 0;
    v.p2p = p2p;
  }
  if (check_kind(&v) != STEP_OK) goto fail_report;
  if (vstate_segments(&v) != 0) goto fail_oom;
  v.per_rank = (size_t)v.niter * v.nout_max * plan->nchunks + plan->nslots;
  if (vstate_alloc(&v) != 0) goto fail_oom;
  if (check_structure(&v) != STEP_OK) goto fail_report;
  if (run_all(&v) != STEP_OK) {
    if (v.oom) goto fail_oom;
    goto fail_report;
  }
  if (check_outputs(&v) != STEP_OK) goto fail_report;
  if (check_launch_end(&v) != STEP_OK) goto fail_report;
  if (check_input_reads(&v) != STEP_OK) goto fail_report;
  goto done;

fail_oom:
  WARN("out of host memory verifying a plan of %d ranks x %d blocks", v.n, v.B);
  res = ncclSystemError;
  goto done;
fail_report:
  WARN("%s", rep.msg);
  res = ncclInternalError;
done:
  vstate_free(&v);
  if (report_out != NULL) *report_out = rep;
  return res;
}

/* See verify.h. */
ncclResult_t brd_plan_verify(const brd_ir_plan_t *plan,
                             const brd_verify_opts_t *opts,
                             brd_verify_report_t *report_out) {
  return verify(plan, opts, NULL, report_out);
}

/* See verify.h. */
ncclResult_t brd_plan_verify_p2p(const brd_ir_plan_t *plan,
                                 const brd_verify_p2p_t *p2p,
                                 brd_verify_report_t *report_out) {
  return verify(plan, NULL, p2p, report_out);
}
