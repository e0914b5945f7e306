/*
 * MSCCL++ execution plans translated to Braid plans; see mscclpp.h.
 *
 * The document (MSCCL++'s executor defines it): top-level name,
 * collective, protocol ("Simple" or "LL"), inplace, min_message_size,
 * max_message_size and gpus[]. Each gpu has id, input_chunks,
 * output_chunks, scratch_chunks, channels[] (memory and port entries list
 * one peer per channel in connected_to; a switch entry names the buffer
 * it multicasts), remote_buffers[] ({rank, type}) and threadblocks[]. A
 * thread block lists the GPU channels it uses per type (its channel ids
 * index that list) and the remote buffers it reaches per channel type (an
 * op's buffer_id indexes that list); its ops run in order.
 *
 * Sizes are chunks: buffer refs are {type | buffer_id | switch_channel_id,
 * index, size}, in units of one chunk (a rank's input bytes divided by
 * input_chunks), the same unit for scratch. Braid's window has as many
 * chunks, so an index is an index; a data op's input/output refs must
 * name the same chunks (Braid moves chunk c to chunk c) and every ref the
 * same number of chunks.
 *
 * Semaphores: the m-th memory channel from rank r to peer p pairs with the
 * m-th from p to r (MSCCL++ connects channels to one peer in order); it
 * becomes semaphore m of Braid's channel r -> p (port channels follow the
 * memory ones). The k-th signal on a channel stores k, the k-th wait waits
 * for k. LL packets all carry flag 1 of the iteration (MSCCL++ uses one
 * flag per launch).
 *
 * Translation runs twice over the document: a dry pass counts sequence
 * numbers and semaphores and checks everything, then the builder pass.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/mscclpp.h"
#include "plan/plan.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

enum { MB_INPUT = 0, MB_OUTPUT = 1, MB_SCRATCH = 2 };
enum { MC_MEMORY = 0, MC_PORT = 1, MC_NTYPES = 2 };
#define MAX_REFS 32

/* What an op name becomes. */
enum {
  K_NOP,
  K_BARRIER,
  K_SIGNAL,
  K_WAIT,
  K_PLAIN,       /* put, get, copy, re, res, rre, rres: COPY/PUT/GET/REDUCE */
  K_PLAIN_SIGNAL, /* pws, pwsf: the put, then a signal per channel */
  K_PACKET,      /* ppkt, cpkt, rppkt, upkt, repkt, respkt, recpkt, recspkt */
  K_SWITCH_REDUCE, /* glres */
  K_SWITCH_STORE,  /* gstore */
  K_PIPELINE,      /* pipeline: its inner ops, unrolled */
  K_FLUSH,         /* flush: nothing on memory channels, refused on port ones */
  K_REFUSE,
};

static const struct {
  const char *name;
  int kind;
  const char *why; /* K_REFUSE */
} op_table[] = {
    {"nop", K_NOP, NULL},
    {"barrier", K_BARRIER, NULL},
    {"signal", K_SIGNAL, NULL},
    {"rlxsignal", K_SIGNAL, NULL},
    {"wait", K_WAIT, NULL},
    {"rlxwait", K_WAIT, NULL},
    {"put", K_PLAIN, NULL},
    {"get", K_PLAIN, NULL},
    {"copy", K_PLAIN, NULL},
    {"re", K_PLAIN, NULL},
    {"res", K_PLAIN, NULL},
    {"rre", K_PLAIN, NULL},
    {"rres", K_PLAIN, NULL},
    {"pws", K_PLAIN_SIGNAL, NULL},
    {"pwsf", K_PLAIN_SIGNAL, NULL},
    {"ppkt", K_PACKET, NULL},
    {"cpkt", K_PACKET, NULL},
    {"rppkt", K_PACKET, NULL},
    {"upkt", K_PACKET, NULL},
    {"repkt", K_PACKET, NULL},
    {"respkt", K_PACKET, NULL},
    {"recpkt", K_PACKET, NULL},
    {"recspkt", K_PACKET, NULL},
    {"glres", K_SWITCH_REDUCE, NULL},
    {"gstore", K_SWITCH_STORE, NULL},
    {"flush", K_FLUSH, NULL},
    {"pipeline", K_PIPELINE, NULL},
    {"gstorepkt", K_REFUSE, "switch-channel stores of LL packets have no Braid op"},
    {"sem_acquire", K_REFUSE, "device semaphores (sem_acquire/sem_release) have no Braid op"},
    {"sem_release", K_REFUSE, "device semaphores (sem_acquire/sem_release) have no Braid op"},
};

typedef struct mchan {
  int peer;
  int sem;      /* Braid semaphore index on the channel to peer */
  int32_t nsig; /* signals so far (this pass) */
  int32_t nwait;
} mchan_t;

typedef struct mrbuf {
  int rank;
  int type; /* MB_* */
} mrbuf_t;

typedef struct mgpu {
  const brd_json_t *js;
  int64_t in_chunks, out_chunks, scratch_chunks;
  int nch[MC_NTYPES];
  mchan_t *ch[MC_NTYPES]; /* owned */
  int nsw;
  int *sw_buf;            /* owned: buffer type of each switch channel */
  int nrbuf;
  mrbuf_t *rbuf;          /* owned */
} mgpu_t;

typedef struct mctx {
  const char *name;
  char *err;
  size_t errlen;
  int failed;
  ncclResult_t res;
  int n;         /* ranks */
  mgpu_t *g;     /* owned, [n] */
  int ll;        /* protocol LL */
  int inplace;
  int coll;      /* BRD_IR_COLL_* */
  int reuse;     /* reuse_resources: scratch refs only inside pipelines */
  uint64_t max_msg; /* max_message_size as MSCCL++ counts it; 0: no limit */
  int64_t in_chunks; /* MSCCL++'s input_chunks (every GPU alike) */
  int64_t nb;    /* in place: chunks of the one buffer (before R) */
  int R;         /* Braid chunks per MSCCL++ chunk (pipelines cut chunks) */
  uint32_t cr;   /* Braid's nchunks: nchunks * R */
  /* The pipeline being unrolled: piece pipe_i of pipe_n, pipe_len Braid
   * chunks each (pipe_n 0: outside one). */
  int pipe_i, pipe_n;
  int64_t pipe_len;
  int nblocks;   /* thread blocks of the GPU with most */
  int nb_out;    /* blocks of the Braid plan (fewer when folded) */
  int blk;       /* the Braid block of the current thread block */
  int64_t nchunks; /* MSCCL++ chunks of one segment (Braid's before R) */
  int64_t nslots;  /* scratch chunks (Braid's slots before R) */
  int mem_max;   /* most memory channels from one rank to one peer */
  int32_t kmax;  /* largest sequence number used */
  int sem_max;   /* largest semaphore index used */
  int has_switch;
  uint8_t *wr;           /* owned, [n * n]: rank r writes rank p's scratch */
  uint8_t *waited;       /* owned, [n * nblocks * n]: credit wait emitted */
  uint32_t *wcount;      /* owned, [n * nb * R]: in place, ops writing each
                          * chunk of a rank's one buffer */
  int pass;              /* 0: count writes, 1: check reads, 2: build */
  int prologue;          /* in place: each rank first copies its input to
                          * its output, and every chunk ref is the output */
  int sw_stage;          /* switch refs to the user's buffer, staged in scratch */
  int64_t sw_base;       /* first slot of that staging */
  int credit_sem;        /* semaphore of the slot-reuse credits */
  int32_t credit_k;      /* their sequence number in an iteration */
  brd_plan_builder_t *b; /* NULL in the dry pass */
  /* where we are, for messages (-1: not inside one; inner: the op of a
   * pipeline) */
  int gpu, tb, op, inner;
  const char *opname;
} mctx_t;

/* Records the first error, WARNed once: "MSCCL++ plan FILE: gpu G, thread
 * block T, op I (NAME): what". */
__attribute__((format(printf, 3, 4))) static ncclResult_t fail(mctx_t *c, ncclResult_t res,
                                                                const char *fmt, ...) {
  if (c->failed) return c->res;
  char what[320], where[128] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  if (c->gpu >= 0 && c->tb >= 0 && c->op >= 0 && c->inner >= 0)
    snprintf(where, sizeof(where), "gpu %d, thread block %d, op %d (pipeline), inner op %d "
             "(%s): ", c->gpu, c->tb, c->op, c->inner, c->opname ? c->opname : "?");
  else if (c->gpu >= 0 && c->tb >= 0 && c->op >= 0)
    snprintf(where, sizeof(where), "gpu %d, thread block %d, op %d (%s): ", c->gpu, c->tb,
             c->op, c->opname ? c->opname : "?");
  else if (c->gpu >= 0 && c->tb >= 0)
    snprintf(where, sizeof(where), "gpu %d, thread block %d: ", c->gpu, c->tb);
  else if (c->gpu >= 0)
    snprintf(where, sizeof(where), "gpu %d: ", c->gpu);
  char msg[560];
  snprintf(msg, sizeof(msg), "MSCCL++ plan %s: %s%s", c->name, where, what);
  WARN("%s", msg);
  if (c->err && c->errlen) snprintf(c->err, c->errlen, "%s", msg);
  c->failed = 1;
  c->res = res;
  return res;
}

static const char *const jtype_names[] = {"null",     "a boolean", "an integer", "a number",
                                          "a string", "an array",  "an object"};

static ncclResult_t want(mctx_t *c, const char *what, const brd_json_t *v, int type) {
  if (v == NULL) return fail(c, ncclInvalidArgument, "missing field \"%s\"", what);
  if (v->type != type)
    return fail(c, ncclInvalidArgument, "field \"%s\" is %s, expected %s", what,
                jtype_names[v->type], jtype_names[type]);
  return ncclSuccess;
}

/* Field key of o: an integer in [lo, hi]; absent gives def unless required. */
static ncclResult_t get_int(mctx_t *c, const brd_json_t *o, const char *key, int required,
                            int64_t def, int64_t lo, int64_t hi, int64_t *out) {
  const brd_json_t *v = brd_json_get(o, key);
  if (v == NULL && !required) {
    *out = def;
    return ncclSuccess;
  }
  CHECK(want(c, key, v, BRD_JSON_INT));
  if (v->i < lo || v->i > hi)
    return fail(c, ncclInvalidArgument,
                "field \"%s\" is %" PRId64 ", out of range [%" PRId64 ", %" PRId64 "]", key,
                v->i, lo, hi);
  *out = v->i;
  return ncclSuccess;
}

static ncclResult_t get_str(mctx_t *c, const brd_json_t *o, const char *key,
                            const char **out) {
  const brd_json_t *v = brd_json_get(o, key);
  CHECK(want(c, key, v, BRD_JSON_STR));
  *out = v->s;
  return ncclSuccess;
}

static ncclResult_t get_arr(mctx_t *c, const brd_json_t *o, const char *key,
                            const brd_json_t **out) {
  const brd_json_t *v = brd_json_get(o, key);
  CHECK(want(c, key, v, BRD_JSON_ARR));
  *out = v;
  return ncclSuccess;
}

static int buf_code(const char *s) {
  if (strcmp(s, "i") == 0) return MB_INPUT;
  if (strcmp(s, "o") == 0) return MB_OUTPUT;
  if (strcmp(s, "s") == 0) return MB_SCRATCH;
  return -1;
}

static int chan_code(const char *s) {
  if (strcmp(s, "memory") == 0) return MC_MEMORY;
  if (strcmp(s, "port") == 0) return MC_PORT;
  if (strcmp(s, "switch") == 0) return 2;
  return -1;
}

static ncclResult_t get_buf(mctx_t *c, const brd_json_t *o, const char *key, int *out) {
  const char *s;
  CHECK(get_str(c, o, key, &s));
  int b = buf_code(s);
  if (b < 0)
    return fail(c, ncclInvalidArgument, "field \"%s\" is \"%s\", expected \"i\", \"o\" or \"s\"",
                key, s);
  *out = b;
  return ncclSuccess;
}

static ncclResult_t get_chan_type(mctx_t *c, const brd_json_t *o, const char *key, int *out) {
  const char *s;
  CHECK(get_str(c, o, key, &s));
  int t = chan_code(s);
  if (t < 0)
    return fail(c, ncclInvalidArgument,
                "field \"%s\" is \"%s\", expected \"memory\", \"port\" or \"switch\"", key, s);
  *out = t;
  return ncclSuccess;
}

static void gpus_free(mctx_t *c) {
  if (c->g == NULL) return;
  for (int r = 0; r < c->n; r++) {
    for (int t = 0; t < MC_NTYPES; t++) free(c->g[r].ch[t]);
    free(c->g[r].sw_buf);
    free(c->g[r].rbuf);
  }
  free(c->g);
  c->g = NULL;
}

/* Channels and remote buffers of gpu r. */
static ncclResult_t read_gpu(mctx_t *c, int r) {
  mgpu_t *g = &c->g[r];
  const brd_json_t *chans, *rbufs;
  int64_t v;
  c->gpu = r;
  CHECK(get_int(c, g->js, "id", 1, 0, 0, INT32_MAX, &v));
  if (v != r)
    return fail(c, ncclInvalidArgument,
                "field \"id\" is %" PRId64 ", expected %d (gpus[] in rank order)", v, r);
  CHECK(get_int(c, g->js, "input_chunks", 1, 0, 0, 65535, &g->in_chunks));
  CHECK(get_int(c, g->js, "output_chunks", 1, 0, 0, 65535, &g->out_chunks));
  CHECK(get_int(c, g->js, "scratch_chunks", 1, 0, 0, 65535, &g->scratch_chunks));
  CHECK(get_arr(c, g->js, "channels", &chans));
  /* Count first, then fill. */
  for (int pass = 0; pass < 2; pass++) {
    int nch[MC_NTYPES] = {0, 0}, nsw = 0;
    for (size_t i = 0; i < chans->n; i++) {
      const brd_json_t *e = &chans->kids[i];
      int type;
      CHECK(get_chan_type(c, e, "channel_type", &type));
      if (type == 2) {
        const brd_json_t *groups;
        int bt;
        CHECK(get_buf(c, e, "buffer_type", &bt));
        CHECK(get_arr(c, e, "rank_groups", &groups));
        for (size_t k = 0; k < groups->n; k++) {
          const brd_json_t *ranks;
          CHECK(get_arr(c, &groups->kids[k], "ranks", &ranks));
          int all = ranks->n == (size_t)c->n;
          for (size_t q = 0; q < ranks->n && all; q++)
            all = ranks->kids[q].type == BRD_JSON_INT && ranks->kids[q].i == (int64_t)q;
          if (!all)
            return fail(c, ncclInvalidArgument,
                        "switch channel %d: its rank group is not every rank in order; Braid's "
                        "switch channel spans all ranks", nsw);
          if (pass) g->sw_buf[nsw] = bt;
          nsw++;
        }
        continue;
      }
      const brd_json_t *to;
      CHECK(get_arr(c, e, "connected_to", &to));
      for (size_t k = 0; k < to->n; k++) {
        const brd_json_t *p = &to->kids[k];
        if (p->type != BRD_JSON_INT || p->i < 0 || p->i >= c->n || p->i == r)
          return fail(c, ncclInvalidArgument,
                      "channels[%zu].connected_to[%zu] is not a peer rank (0..%d, not %d)", i,
                      k, c->n - 1, r);
        if (pass) g->ch[type][nch[type]].peer = (int)p->i;
        nch[type]++;
      }
    }
    if (!pass) {
      for (int t = 0; t < MC_NTYPES; t++) {
        g->nch[t] = nch[t];
        g->ch[t] = calloc((size_t)nch[t] + 1, sizeof(mchan_t));
        if (g->ch[t] == NULL) return fail(c, ncclSystemError, "out of host memory");
      }
      g->nsw = nsw;
      g->sw_buf = calloc((size_t)nsw + 1, sizeof(int));
      if (g->sw_buf == NULL) return fail(c, ncclSystemError, "out of host memory");
    }
  }
  if (g->nsw > 1)
    return fail(c, ncclInvalidArgument, "%d switch channels; Braid has one per rank", g->nsw);
  /* Semaphore of each channel: its ordinal among the rank's channels of
   * that type to the same peer. */
  for (int t = 0; t < MC_NTYPES; t++)
    for (int i = 0; i < g->nch[t]; i++) {
      int m = 0;
      for (int j = 0; j < i; j++) m += g->ch[t][j].peer == g->ch[t][i].peer;
      g->ch[t][i].sem = m;
      if (t == MC_MEMORY && m + 1 > c->mem_max) c->mem_max = m + 1;
    }
  CHECK(get_arr(c, g->js, "remote_buffers", &rbufs));
  g->nrbuf = (int)rbufs->n;
  g->rbuf = calloc(rbufs->n + 1, sizeof(mrbuf_t));
  if (g->rbuf == NULL) return fail(c, ncclSystemError, "out of host memory");
  for (size_t i = 0; i < rbufs->n; i++) {
    int64_t rk;
    CHECK(get_int(c, &rbufs->kids[i], "rank", 1, 0, 0, c->n - 1, &rk));
    if (rk == r)
      return fail(c, ncclInvalidArgument, "remote_buffers[%zu] is this rank's own buffer", i);
    g->rbuf[i].rank = (int)rk;
    CHECK(get_buf(c, &rbufs->kids[i], "type", &g->rbuf[i].type));
  }
  c->gpu = -1;
  return ncclSuccess;
}

/* Pipelines. MSCCL++'s executor runs a pipeline's inner ops
 * ceil(num_chunks x chunk bytes / unit_size) times, iteration i on bytes
 * [i x unit_size, (i + 1) x unit_size) of every ref, so the count grows
 * with the message. A Braid plan serves every size, so each pipeline is
 * unrolled a fixed number of times: as many as MSCCL++ runs at the plan's
 * max_message_size, at most PIPE_MAX (also with no max_message_size).
 * Braid's chunks are MSCCL++'s cut into R, a multiple of every pipeline's
 * count over its gcd with num_chunks, so each iteration's share is whole
 * chunks. A correct plan gives the same result at any count (MSCCL++'s
 * own varies), and the verifier checks the unrolled one. */
#define PIPE_MAX 8

static int64_t gcd64(int64_t a, int64_t b) {
  while (b != 0) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

static int pipe_iters(const mctx_t *c, int64_t unit, int64_t nck) {
  if (c->max_msg == 0 || c->in_chunks < 1 || unit < 1) return PIPE_MAX;
  /* MSCCL++ compares an all-gather's output size with the range, its
   * input size otherwise; a chunk is the input over input_chunks, in
   * 16-byte units. */
  uint64_t in = c->coll == BRD_IR_COLL_ALLGATHER ? c->max_msg / (uint64_t)c->n : c->max_msg;
  uint64_t cb = (in / 16 + (uint64_t)c->in_chunks - 1) / (uint64_t)c->in_chunks * 16;
  if (cb != 0 && (uint64_t)nck > UINT64_MAX / cb) return PIPE_MAX;
  uint64_t it = ((uint64_t)nck * cb + (uint64_t)unit - 1) / (uint64_t)unit;
  return it < 1 ? 1 : it > PIPE_MAX ? PIPE_MAX : (int)it;
}

/* R for every pipeline of the document (malformed ones are left to the
 * translation's messages). */
static int pipes_scan(const mctx_t *c) {
  int64_t r = 1;
  for (int g = 0; g < c->n; g++) {
    const brd_json_t *tbs = brd_json_get(c->g[g].js, "threadblocks");
    for (size_t b = 0; tbs != NULL && b < tbs->n; b++) {
      const brd_json_t *ops = brd_json_get(&tbs->kids[b], "ops");
      for (size_t i = 0; ops != NULL && ops->type == BRD_JSON_ARR && i < ops->n; i++) {
        const brd_json_t *nm = brd_json_get(&ops->kids[i], "name");
        const brd_json_t *ctx = brd_json_get(&ops->kids[i], "iter_context");
        if (nm == NULL || nm->type != BRD_JSON_STR || strcmp(nm->s, "pipeline") != 0 ||
            ctx == NULL)
          continue;
        const brd_json_t *u = brd_json_get(ctx, "unit_size"), *k = brd_json_get(ctx, "num_chunks");
        if (u == NULL || k == NULL || u->type != BRD_JSON_INT || k->type != BRD_JSON_INT ||
            u->i < 1 || k->i < 1 || k->i > 65535)
          continue;
        int64_t p = pipe_iters(c, u->i, k->i), need = p / gcd64(p, k->i);
        r = r / gcd64(r, need) * need;
        if (r > 65535) return 65536;
      }
    }
  }
  return (int)r;
}

/* A thread block's view: GPU channel ids per type, remote buffer ids per
 * channel type. */
typedef struct mtb {
  const brd_json_t *ch_ids[3];   /* per channel type (memory, port, switch), may be NULL */
  const brd_json_t *rbuf_ids[2]; /* per access channel type, may be NULL */
} mtb_t;

static ncclResult_t read_tb(mctx_t *c, const brd_json_t *tb, mtb_t *t) {
  memset(t, 0, sizeof(*t));
  const brd_json_t *chans = brd_json_get(tb, "channels");
  if (chans != NULL) {
    CHECK(want(c, "channels", chans, BRD_JSON_ARR));
    for (size_t i = 0; i < chans->n; i++) {
      int type;
      CHECK(get_chan_type(c, &chans->kids[i], "channel_type", &type));
      if (brd_json_get(&chans->kids[i], "buff") != NULL)
        return fail(c, ncclInvalidArgument,
                    "channels[%zu] names a \"buff\" (channels bound to one buffer) that Braid "
                    "does not translate", i);
      CHECK(get_arr(c, &chans->kids[i], "channel_ids", &t->ch_ids[type]));
    }
  }
  const brd_json_t *refs = brd_json_get(tb, "remote_buffer_refs");
  if (refs != NULL) {
    CHECK(want(c, "remote_buffer_refs", refs, BRD_JSON_ARR));
    for (size_t i = 0; i < refs->n; i++) {
      int type;
      CHECK(get_chan_type(c, &refs->kids[i], "access_channel_type", &type));
      if (type == 2)
        return fail(c, ncclInvalidArgument,
                    "remote_buffer_refs[%zu]: remote buffers through a switch channel", i);
      CHECK(get_arr(c, &refs->kids[i], "remote_buffer_ids", &t->rbuf_ids[type]));
    }
  }
  return ncclSuccess;
}

/* GPU channel `idx` of thread block channel list `ids`. */
static ncclResult_t tb_chan(mctx_t *c, const mtb_t *t, int type, int64_t idx, int *out) {
  static const char *const tn[] = {"memory", "port", "switch"};
  const brd_json_t *ids = t->ch_ids[type];
  if (ids == NULL || idx < 0 || (size_t)idx >= ids->n)
    return fail(c, ncclInvalidArgument,
                "%s channel %" PRId64 " is not one of the thread block's %zu %s channels",
                tn[type], idx, ids ? ids->n : 0, tn[type]);
  const brd_json_t *v = &ids->kids[idx];
  int ngpu = type == 2 ? c->g[c->gpu].nsw : c->g[c->gpu].nch[type];
  if (v->type != BRD_JSON_INT || v->i < 0 || v->i >= ngpu)
    return fail(c, ncclInvalidArgument,
                "thread block %s channel %" PRId64 " names GPU channel out of range (%d %s "
                "channels)", tn[type], idx, ngpu, tn[type]);
  *out = (int)v->i;
  return ncclSuccess;
}

/* One translated ref: where it points and which chunks. */
typedef struct mref {
  brd_plan_ref_t ref; /* for `one` refs, OUTPUT until resolve_one says */
  int io;          /* names an input/output chunk */
  int one;         /* in place: chunk `index` of the rank's one buffer */
  int sw;          /* through the switch channel */
  int staged;      /* ... to the user's buffer, staged in scratch */
  int64_t index, size; /* Braid chunks (MSCCL++'s times R): io refs the
                        * chunk in the buffer, others the slot */
} mref_t;

static const char *const mb_names[] = {"input", "output", "scratch"};

/* Translates one src_buff/dst_buff entry of an op. */
static ncclResult_t read_ref(mctx_t *c, const mtb_t *t, int op_chan_type, const brd_json_t *e,
                             int dst, const char *list, size_t i, mref_t *out) {
  mgpu_t *g = &c->g[c->gpu];
  int64_t index, size;
  char key[64];
  snprintf(key, sizeof(key), "%s[%zu].index", list, i);
  if (e->type != BRD_JSON_OBJ)
    return fail(c, ncclInvalidArgument, "%s[%zu] is %s, expected an object", list, i,
                jtype_names[e->type]);
  const brd_json_t *vi = brd_json_get(e, "index"), *vs = brd_json_get(e, "size");
  CHECK(want(c, key, vi, BRD_JSON_INT));
  snprintf(key, sizeof(key), "%s[%zu].size", list, i);
  CHECK(want(c, key, vs, BRD_JSON_INT));
  index = vi->i;
  size = vs->i;
  if (index < 0 || size < 1)
    return fail(c, ncclInvalidArgument, "%s[%zu]: index %" PRId64 ", size %" PRId64
                " (index >= 0, size >= 1)", list, i, index, size);
  memset(out, 0, sizeof(*out));
  out->index = index;
  out->size = size;
  int owner = c->gpu, type;
  const brd_json_t *vt = brd_json_get(e, "type"), *vb = brd_json_get(e, "buffer_id"),
                   *vw = brd_json_get(e, "switch_channel_id");
  if (vw != NULL) {
    snprintf(key, sizeof(key), "%s[%zu].switch_channel_id", list, i);
    CHECK(want(c, key, vw, BRD_JSON_INT));
    int sc;
    CHECK(tb_chan(c, t, 2, vw->i, &sc));
    type = g->sw_buf[sc];
    if (type != MB_SCRATCH && !c->inplace)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu] goes through a switch channel over the %s buffer (\"%s\") of an "
                  "out-of-place plan: Braid's switch channels reach scratch slots only, and "
                  "only the one buffer of an in-place plan is staged there", list, i,
                  mb_names[type], type == MB_INPUT ? "i" : "o");
    out->sw = 1;
    owner = -2;
    if (type != MB_SCRATCH) {
      /* The user's buffer through the switch: its chunks are staged in
       * slots sw_base.. of every rank's scratch (see run_pass). */
      if (index + size > c->nchunks)
        return fail(c, ncclInvalidArgument,
                    "%s[%zu]: chunks %" PRId64 "..%" PRId64 " of the switch channel's %s "
                    "buffer, which has %" PRId64 " chunks", list, i, index, index + size - 1,
                    mb_names[type], c->nchunks);
      if (c->coll != BRD_IR_COLL_ALLREDUCE)
        return fail(c, ncclInvalidArgument,
                    "%s[%zu] goes through a switch channel over the user's buffer, which Braid "
                    "stages for all-reduce plans only", list, i);
      c->sw_stage = 1;
      out->staged = 1;
      out->index = index * c->R;
      out->size = size * c->R;
      out->ref = brd_plan_ref(BRD_IR_BUF_SCRATCH, BRD_PLAN_PEER_SWITCH,
                              (uint32_t)((c->sw_base + index) * c->R));
      return ncclSuccess;
    }
  } else if (vb != NULL) {
    snprintf(key, sizeof(key), "%s[%zu].buffer_id", list, i);
    CHECK(want(c, key, vb, BRD_JSON_INT));
    if (op_chan_type != MC_MEMORY && op_chan_type != MC_PORT)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu] names remote buffer %" PRId64 " but the op's channel_type is not "
                  "memory or port", list, i, vb->i);
    const brd_json_t *ids = t->rbuf_ids[op_chan_type];
    if (ids == NULL || vb->i < 0 || (size_t)vb->i >= ids->n ||
        ids->kids[vb->i].type != BRD_JSON_INT || ids->kids[vb->i].i < 0 ||
        ids->kids[vb->i].i >= g->nrbuf)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu]: remote buffer %" PRId64 " is not one the thread block reaches", list,
                  i, vb->i);
    const mrbuf_t *rb = &g->rbuf[ids->kids[vb->i].i];
    owner = rb->rank;
    type = rb->type;
  } else if (vt != NULL) {
    snprintf(key, sizeof(key), "%s[%zu].type", list, i);
    CHECK(get_buf(c, e, "type", &type));
  } else {
    return fail(c, ncclInvalidArgument,
                "%s[%zu] has none of \"type\", \"buffer_id\", \"switch_channel_id\"", list, i);
  }
  /* Range, in the owner's chunks. */
  int64_t limit = type == MB_SCRATCH ? (owner == -2 ? c->nslots : c->g[owner].scratch_chunks)
                  : type == MB_INPUT ? (owner == -2 ? 0 : c->g[owner].in_chunks)
                                     : (owner == -2 ? 0 : c->g[owner].out_chunks);
  if (index + size > limit) {
    char whose[32];
    if (owner == c->gpu) snprintf(whose, sizeof(whose), "the local");
    else if (owner == -2) snprintf(whose, sizeof(whose), "the switch channel's");
    else snprintf(whose, sizeof(whose), "rank %d's", owner);
    return fail(c, ncclInvalidArgument,
                "%s[%zu]: chunks %" PRId64 "..%" PRId64 " of %s %s buffer, which has %" PRId64
                " chunks", list, i, index, index + size - 1, whose, mb_names[type], limit);
  }
  int remote = owner != c->gpu;
  out->index = index * c->R;
  out->size = size * c->R;
  if (type == MB_SCRATCH) {
    if (c->reuse && c->pipe_n == 0)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu] names scratch outside a pipeline in a plan with reuse_resources, "
                  "where MSCCL++ places scratch chunks by a fixed scratch size; Braid "
                  "translates such plans only where every scratch ref is in a pipeline", list,
                  i);
    out->ref = brd_plan_ref((uint8_t)(BRD_IR_BUF_SCRATCH | (c->ll ? BRD_IR_REF_LL : 0)),
                            owner == -2 ? BRD_PLAN_PEER_SWITCH : remote ? owner : -1,
                            (uint32_t)out->index);
    return ncclSuccess;
  }
  out->io = 1;
  if (c->inplace) {
    /* One buffer per rank (MSCCL++'s DSL names an in-place all-gather's
     * input as the rank's block of its output, a reduce-scatter's output
     * as the rank's block of its input); which Braid buffer a chunk of it
     * is, resolve_one says per piece. */
    int64_t j = index;
    if ((c->coll == BRD_IR_COLL_ALLGATHER && type == MB_INPUT) ||
        (c->coll == BRD_IR_COLL_REDUCESCATTER && type == MB_OUTPUT))
      j += (int64_t)owner * c->nchunks;
    out->one = 1;
    out->index = j * c->R;
    out->ref = brd_plan_ref(BRD_IR_BUF_OUTPUT, remote ? owner : -1, (uint32_t)out->index);
    return ncclSuccess;
  }
  if (type == MB_INPUT && dst)
    return fail(c, ncclInvalidArgument,
                "%s[%zu] writes %s input buffer of an out-of-place plan; Braid never writes "
                "inputs", list, i, remote ? "a peer's" : "the");
  if (type == MB_INPUT && remote)
    return fail(c, ncclInvalidArgument,
                "%s[%zu] reads a peer's input buffer in place; Braid reaches peers' outputs and "
                "scratch only (use an in-place plan, or stage through scratch)", list, i);
  out->ref = brd_plan_ref(type == MB_INPUT ? BRD_IR_BUF_INPUT : BRD_IR_BUF_OUTPUT,
                          remote ? owner : -1, (uint32_t)out->index);
  return ncclSuccess;
}

/* In place, chunk j (Braid's) of the one buffer of the rank at the other
 * end of `peer` (-1: this rank) as Braid names it, for a read (dst 0) or
 * a write. The rank's input is all of it (all-reduce, reduce-scatter) or
 * its own block (all-gather), its output all of it (all-reduce,
 * all-gather) or its own block (reduce-scatter). Local reads of the input
 * name the input unless every rank first copies its input to its output
 * (c->prologue); writes and peers' buffers name the output, and a chunk
 * outside it (a reduce-scatter's other blocks) can only be read locally,
 * as input. */
static ncclResult_t resolve_one(mctx_t *c, const char *list, size_t i, int dst, int peer,
                                uint32_t j, brd_plan_ref_t *out) {
  int q = peer < 0 ? c->gpu : peer;
  uint32_t seg = j / c->cr, qs = (uint32_t)q * c->cr;
  int in_in = 1, in_out = 1;
  uint32_t in_idx = j, out_idx = j;
  if (c->coll == BRD_IR_COLL_ALLGATHER) {
    in_in = seg == (uint32_t)q;
    in_idx = j - qs;
  } else if (c->coll == BRD_IR_COLL_REDUCESCATTER) {
    in_out = seg == (uint32_t)q;
    out_idx = j - qs;
  }
  if (dst || peer >= 0) {
    if (!in_out)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu] %s block %u of %s buffer, which in place is input only (the "
                  "output is block %d): Braid %s", list, i, dst ? "writes" : "reads", seg,
                  peer >= 0 ? "a peer's" : "the", q,
                  dst ? "never writes inputs" : "reads peers' outputs and scratch only");
    *out = brd_plan_ref(BRD_IR_BUF_OUTPUT, peer, out_idx);
  } else if (in_in && !c->prologue) {
    *out = brd_plan_ref(BRD_IR_BUF_INPUT, -1, in_idx);
  } else if (in_out) {
    *out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, out_idx);
  } else {
    *out = brd_plan_ref(BRD_IR_BUF_INPUT, -1, in_idx);
  }
  return ncclSuccess;
}

/* signal or wait on each of the op's channels. */
static ncclResult_t sync_op(mctx_t *c, const mtb_t *t, const brd_json_t *op, int type,
                            uint8_t code) {
  const brd_json_t *ids;
  CHECK(get_arr(c, op, "channel_ids", &ids));
  if (ids->n == 0) return fail(c, ncclInvalidArgument, "field \"channel_ids\" is empty");
  for (size_t i = 0; i < ids->n; i++) {
    if (ids->kids[i].type != BRD_JSON_INT)
      return fail(c, ncclInvalidArgument, "channel_ids[%zu] is not an integer", i);
    int gc;
    CHECK(tb_chan(c, t, type, ids->kids[i].i, &gc));
    mchan_t *ch = &c->g[c->gpu].ch[type][gc];
    int32_t k = code == BRD_IR_OP_SIGNAL ? ++ch->nsig : ++ch->nwait;
    int sem = ch->sem + (type == MC_PORT ? c->mem_max : 0);
    if (k > c->kmax) c->kmax = k;
    if (sem > c->sem_max) c->sem_max = sem;
    if (c->b != NULL) {
      ncclResult_t res = brd_plan_op_sync(c->b, c->gpu, c->blk, code, ch->peer, (uint32_t)sem, k);
      if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
    }
  }
  return ncclSuccess;
}

/* One piece of a data op: its chunks [done, done + len), every ref
 * advanced by `done`, in-place refs resolved (resolve_one), as one IR op
 * (switch ops) or a builder move at op chunk `chunk`. Runs in every pass,
 * so that resolve_one refuses early; adds to the plan in the build pass
 * only. */
static ncclResult_t emit_piece(mctx_t *c, const brd_plan_move_t *m, const mref_t *s,
                               const mref_t *d, uint32_t done, uint32_t len, uint32_t chunk,
                               int sw) {
  brd_plan_ref_t sr[MAX_REFS], dr[MAX_REFS];
  for (int i = 0; i < m->nsrc + m->ndst; i++) {
    int dst = i >= m->nsrc;
    int j = dst ? i - m->nsrc : i;
    const mref_t *x = dst ? &d[j] : &s[j];
    brd_plan_ref_t *o = dst ? &dr[j] : &sr[j];
    *o = x->ref;
    o->index += done;
    if (x->one)
      CHECK(resolve_one(c, dst ? "dst_buff" : "src_buff", (size_t)j, dst, x->ref.peer,
                        x->ref.index + done, o));
  }
  if (c->b == NULL) return ncclSuccess;
  brd_plan_move_t p = *m;
  p.chunk = chunk;
  p.nchunks = len;
  p.src = sr;
  p.dst = dr;
  ncclResult_t res;
  if (!sw) {
    res = brd_plan_op_move(c->b, c->gpu, c->blk, &p);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
    return ncclSuccess;
  }
  /* Switch ops go in as single IR ops (the builder's move splits data ops
   * only). */
  if (p.nsrc + p.ndst > BRD_IR_MAX_REFS)
    return fail(c, ncclInvalidArgument, "more than %d refs on a switch op", BRD_IR_MAX_REFS);
  brd_ir_op_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.code = p.code;
  ir.flags = p.flags;
  ir.nsrc = (uint8_t)p.nsrc;
  ir.ndst = (uint8_t)p.ndst;
  ir.chunk = (uint16_t)p.chunk;
  ir.nchunks = (uint16_t)p.nchunks;
  for (int i = 0; i < p.nsrc + p.ndst; i++) {
    const brd_plan_ref_t *r = i < p.nsrc ? &sr[i] : &dr[i - p.nsrc];
    uint8_t ch = BRD_IR_CHAN_LOCAL;
    res = ncclSuccess;
    if (r->peer == BRD_PLAN_PEER_SWITCH) res = brd_plan_chan_switch(c->b, c->gpu, &ch);
    else if (r->peer >= 0) res = brd_plan_chan_get(c->b, c->gpu, r->peer, &ch);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
    ir.ref[i].buf = r->buf;
    ir.ref[i].chan = ch;
    ir.ref[i].index = (uint16_t)r->index;
  }
  res = brd_plan_op_add(c->b, c->gpu, c->blk, &ir);
  if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
  return ncclSuccess;
}

static ncclResult_t data_op(mctx_t *c, const mtb_t *t, const brd_json_t *op, int kind) {
  int ctype = -1;
  if (brd_json_get(op, "channel_type") != NULL)
    CHECK(get_chan_type(c, op, "channel_type", &ctype));
  if (brd_json_get(op, "tbg_info") != NULL)
    return fail(c, ncclInvalidArgument,
                "thread block groups (tbg_info: one op split over several thread blocks) are "
                "not translated");
  if (kind == K_PACKET && c->pipe_n > 0)
    return fail(c, ncclInvalidArgument,
                "a packet op inside a pipeline: MSCCL++'s executor runs packet ops on their "
                "whole chunks in every iteration, ignoring the pipeline's offsets; Braid does "
                "not translate that");
  const brd_json_t *srcs, *dsts;
  CHECK(get_arr(c, op, "src_buff", &srcs));
  CHECK(get_arr(c, op, "dst_buff", &dsts));
  if (srcs->n == 0 || dsts->n == 0 || srcs->n > MAX_REFS || dsts->n > MAX_REFS)
    return fail(c, ncclInvalidArgument, "%zu sources and %zu destinations (1 to %d each)",
                srcs->n, dsts->n, MAX_REFS);
  mref_t s[MAX_REFS], d[MAX_REFS];
  int64_t size = -1;
  int ll_src = 0, ll_dst = 0, remote_src = 0, remote_dst = 0, local_dst = 0, out_dst = 0;
  for (int pass = 0; pass < 2; pass++) {
    const brd_json_t *list = pass ? dsts : srcs;
    mref_t *m = pass ? d : s;
    for (size_t i = 0; i < list->n; i++) {
      CHECK(read_ref(c, t, ctype, &list->kids[i], pass, pass ? "dst_buff" : "src_buff", i,
                     &m[i]));
      if (size < 0) size = m[i].size;
      if (m[i].size != size)
        return fail(c, ncclInvalidArgument,
                    "%s[%zu] moves %" PRId64 " chunks, an earlier ref %" PRId64 "; Braid moves "
                    "the same chunks from every source to every destination",
                    pass ? "dst_buff" : "src_buff", i, m[i].size / c->R, size / c->R);
      int ll = (m[i].ref.buf & BRD_IR_REF_LL) != 0, rem = m[i].ref.peer != -1;
      if (pass) {
        ll_dst |= ll;
        remote_dst |= rem;
        local_dst |= !rem;
        out_dst |= m[i].io;
      } else {
        ll_src |= ll;
        remote_src |= rem;
        if (ll && rem)
          return fail(c, ncclInvalidArgument,
                      "src_buff[%zu] reads LL packets from a peer's scratch; Braid reads packets "
                      "from local scratch only", i);
      }
    }
  }
  /* Input/output and staged refs: Braid moves chunk c of a buffer (or of
   * a block of one) only to chunk c of another. */
  int64_t chunk = -1;
  for (size_t i = 0; i < srcs->n + dsts->n; i++) {
    int dst = i >= srcs->n;
    size_t j = dst ? i - srcs->n : i;
    const mref_t *x = dst ? &d[j] : &s[j];
    if (!x->io && !x->staged) continue;
    if (chunk < 0) chunk = x->index;
    if (x->index % c->cr != chunk % c->cr)
      return fail(c, ncclInvalidArgument,
                  "%s[%zu] names chunk %" PRId64 " of its buffer, an earlier ref chunk %" PRId64
                  "; Braid moves chunk c of a buffer (or of a rank's block of one, %" PRId64
                  " chunks) only to chunk c of another", dst ? "dst_buff" : "src_buff", j,
                  x->index / c->R, chunk / c->R, c->nchunks);
  }
  int sw = 0;
  for (size_t i = 0; i < srcs->n; i++) sw |= s[i].sw;
  for (size_t i = 0; i < dsts->n; i++) sw |= d[i].sw;
  if (sw != (kind == K_SWITCH_REDUCE || kind == K_SWITCH_STORE))
    return fail(c, ncclInvalidArgument, "%s",
                sw ? "a switch-channel ref on an op that is not a switch op"
                   : "a switch op without a switch-channel ref");
  if (chunk < 0) {
    if (!sw)
      return fail(c, ncclInvalidArgument,
                  "moves scratch to scratch only; Braid sizes chunks by their place in the "
                  "user's buffer, so an op must name an input or output chunk");
    chunk = 0;
  }
  if (kind == K_PACKET && !c->ll)
    return fail(c, ncclInvalidArgument, "an LL packet op in a plan of protocol Simple");
  if (kind == K_PACKET) {
    /* MSCCL++'s packet ops read their first source and write their first
     * destination as plain data whatever the buffer (in the ops that have
     * one), and every other ref as packets; Braid keeps packets in scratch
     * and plain data in the user's buffers. */
    static const char *const plain_src0[] = {"ppkt", "cpkt", "respkt", "repkt", "recpkt",
                                             "recspkt"};
    static const char *const plain_dst0[] = {"upkt", "respkt", "repkt", "recpkt", "recspkt"};
    int ps = 0, pd = 0;
    for (size_t i = 0; i < NELEM(plain_src0); i++) ps |= strcmp(c->opname, plain_src0[i]) == 0;
    for (size_t i = 0; i < NELEM(plain_dst0); i++) pd |= strcmp(c->opname, plain_dst0[i]) == 0;
    for (size_t i = 0; i < srcs->n + dsts->n; i++) {
      int dst = i >= srcs->n;
      size_t j = dst ? i - srcs->n : i;
      const mref_t *x = dst ? &d[j] : &s[j];
      int plain = j == 0 && (dst ? pd : ps);
      if (plain && !x->io)
        return fail(c, ncclInvalidArgument,
                    "%s[0] is plain data in scratch; Braid's LL scratch holds packets only",
                    dst ? "dst_buff" : "src_buff");
      if (!plain && x->io)
        return fail(c, ncclInvalidArgument,
                    "%s[%zu] holds packets in the user's buffer; Braid keeps packets in scratch",
                    dst ? "dst_buff" : "src_buff", j);
    }
  }
  if (kind != K_PACKET && (ll_src || ll_dst))
    return fail(c, ncclInvalidArgument,
                "a plain op on scratch, which holds LL packets in a plan of protocol LL");
  brd_plan_move_t m;
  memset(&m, 0, sizeof(m));
  m.nsrc = (int)srcs->n;
  m.ndst = (int)dsts->n;
  if (kind == K_PACKET) {
    m.k = 1;
    m.k_src = 1;
    if (ll_dst || ll_src) c->kmax = c->kmax > 1 ? c->kmax : 1;
    m.code = !ll_src && m.nsrc == 1 && !remote_src && ll_dst && !local_dst
                 ? BRD_IR_OP_PKT_PUT
                 : BRD_IR_OP_PKT_REDUCE;
    if (m.code == BRD_IR_OP_PKT_PUT)
      for (int i = 0; i < m.ndst; i++) m.code = (d[i].ref.buf & BRD_IR_REF_LL) ? m.code
                                                                              : BRD_IR_OP_PKT_REDUCE;
  } else if (kind == K_SWITCH_REDUCE) {
    if (m.nsrc != 1 || !s[0].sw)
      return fail(c, ncclInvalidArgument, "glres needs one source through the switch channel");
    m.code = BRD_IR_OP_MC_REDUCE;
  } else if (kind == K_SWITCH_STORE) {
    if (m.nsrc != 1 || s[0].sw)
      return fail(c, ncclInvalidArgument, "gstore needs one local source");
    m.code = BRD_IR_OP_MC_STORE;
  } else if (m.nsrc == 1 && !remote_src && !remote_dst) {
    m.code = BRD_IR_OP_COPY;
  } else if (m.nsrc == 1 && !remote_src && !local_dst) {
    m.code = BRD_IR_OP_PUT;
  } else if (m.nsrc == 1 && remote_src && !remote_dst) {
    m.code = BRD_IR_OP_GET;
  } else {
    m.code = BRD_IR_OP_REDUCE;
  }
  /* A reduction written to an output is the finished value (for the
   * collectives translated): the post-op applies there; the verifier
   * refuses the plan if that is wrong. */
  if (m.nsrc >= 2 && out_dst) m.flags = BRD_IR_F_POSTOP;
  if (m.code == BRD_IR_OP_MC_REDUCE) m.flags = BRD_IR_F_POSTOP;
  /* Inside a pipeline this iteration moves its share of the chunks:
   * piece pipe_i of pipe_n, pipe_len Braid chunks each, as MSCCL++ moves
   * unit_size bytes from offset i x unit_size of every ref (a ref shorter
   * than the pipeline's chunks has nothing left in the last pieces). */
  int empty = 0;
  if (c->pipe_n > 0) {
    int64_t start = (int64_t)c->pipe_i * c->pipe_len;
    int64_t end = start + c->pipe_len < size ? start + c->pipe_len : size;
    if (start >= end) {
      empty = 1;
    } else {
      for (size_t i = 0; i < srcs->n + dsts->n; i++) {
        mref_t *x = i < srcs->n ? &s[i] : &d[i - srcs->n];
        x->index += start;
        x->ref.index += (uint32_t)start;
      }
      chunk += start;
      size = end - start;
    }
  }
  if (c->inplace && c->pass < 2 && !empty) {
    /* MSCCL++ reads and writes one buffer in place; Braid's executors may
     * give the output its own memory (host staging), so a read that may
     * follow another op's write of the chunk, or a read of a peer's
     * buffer, needs the input copied to the output first. */
    size_t nbr = (size_t)c->nb * (size_t)c->R;
    int self = 0;
    for (size_t i = 0; i < dsts->n; i++) self |= d[i].io && d[i].ref.peer == -1;
    for (size_t i = 0; i < dsts->n && c->pass == 0; i++) {
      if (!d[i].io) continue;
      int owner = d[i].ref.peer == -1 ? c->gpu : d[i].ref.peer;
      for (int64_t k = 0; k < size; k++) c->wcount[(size_t)owner * nbr + (size_t)(d[i].index + k)]++;
    }
    for (size_t i = 0; i < srcs->n && c->pass == 1; i++) {
      if (!s[i].io) continue;
      if (s[i].ref.peer != -1) c->prologue = 1;
      for (int64_t k = 0; k < size; k++)
        if (c->wcount[(size_t)c->gpu * nbr + (size_t)(s[i].index + k)] > (uint32_t)self)
          c->prologue = 1;
    }
  }
  if (sw) c->has_switch = 1;
  for (size_t i = 0; i < dsts->n && !sw && !empty; i++) {
    int p = d[i].ref.peer;
    if (p < 0 || (d[i].ref.buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SCRATCH) continue;
    c->wr[(size_t)c->gpu * c->n + p] = 1;
    uint8_t *w = &c->waited[((size_t)c->gpu * c->nb_out + c->blk) * c->n + p];
    if (c->b == NULL || *w) continue;
    /* Before this block's first write into p's scratch in an iteration:
     * p has read what the previous iteration left there. The credit is the
     * iteration's last sequence number (credit_k == seq_per_iter), so the
     * previous iteration's is k 0 (at once in the first). */
    *w = 1;
    ncclResult_t res = brd_plan_op_sync(c->b, c->gpu, c->blk, BRD_IR_OP_WAIT, p,
                                        (uint32_t)c->credit_sem, 0);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
  }
  /* One op per block of the buffers it crosses (an op's input/output
   * refs lie in one segment each: device/ir.h). */
  for (uint32_t done = 0; done < (uint32_t)size && !empty;) {
    uint32_t ch = (uint32_t)((chunk + done) % c->cr), len = (uint32_t)size - done;
    if (len > c->cr - ch) len = c->cr - ch;
    CHECK(emit_piece(c, &m, s, d, done, len, ch, sw));
    done += len;
  }
  if (kind == K_PLAIN_SIGNAL) {
    if (ctype != MC_MEMORY && ctype != MC_PORT)
      return fail(c, ncclInvalidArgument, "a put with signal needs channel_type memory or port");
    CHECK(sync_op(c, t, op, ctype, BRD_IR_OP_SIGNAL));
  }
  return ncclSuccess;
}

static ncclResult_t pipeline_op(mctx_t *c, const mtb_t *t, const brd_json_t *op);

static ncclResult_t one_op(mctx_t *c, const mtb_t *t, const brd_json_t *op) {
  const char *name;
  c->opname = NULL;
  if (op->type != BRD_JSON_OBJ)
    return fail(c, ncclInvalidArgument, "is %s, expected an object", jtype_names[op->type]);
  CHECK(get_str(c, op, "name", &name));
  c->opname = name;
  int kind = -1;
  const char *why = NULL;
  for (size_t i = 0; i < NELEM(op_table); i++)
    if (strcmp(name, op_table[i].name) == 0) {
      kind = op_table[i].kind;
      why = op_table[i].why;
    }
  if (kind < 0) return fail(c, ncclInvalidArgument, "unknown op name");
  if (kind == K_REFUSE) return fail(c, ncclInvalidArgument, "%s", why);
  switch (kind) {
  case K_PIPELINE: return pipeline_op(c, t, op);
  case K_FLUSH: {
    /* Completion of earlier port-channel puts at their source. A memory
     * channel's stores are complete when issued: nothing to do. */
    int type = MC_PORT;
    if (brd_json_get(op, "channel_type") != NULL)
      CHECK(get_chan_type(c, op, "channel_type", &type));
    if (type != MC_MEMORY)
      return fail(c, ncclInvalidArgument,
                  "a port-channel flush (local completion of earlier puts): Braid's IR reserves "
                  "FLUSH but neither executor runs it yet");
    return ncclSuccess;
  }
  case K_NOP:
    if (c->b != NULL) {
      brd_ir_op_t nop;
      memset(&nop, 0, sizeof(nop));
      nop.code = BRD_IR_OP_NOP;
      ncclResult_t res = brd_plan_op_add(c->b, c->gpu, c->blk, &nop);
      if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
    }
    return ncclSuccess;
  case K_BARRIER: {
    int64_t ntb;
    CHECK(get_int(c, op, "num_threadblocks", 1, 0, 0, INT32_MAX, &ntb));
    if (c->nb_out != c->nblocks)
      return fail(c, ncclInvalidArgument,
                  "a barrier in a plan of %d thread blocks folded onto %d Braid blocks",
                  c->nblocks, c->nb_out);
    if (ntb != c->nblocks || (size_t)c->nblocks != brd_json_get(c->g[c->gpu].js,
                                                                  "threadblocks")->n)
      return fail(c, ncclInvalidArgument,
                  "a barrier of %" PRId64 " thread blocks; Braid's barrier spans all %d blocks "
                  "of a rank (and every GPU must have that many)", ntb, c->nblocks);
    if (c->b != NULL) {
      ncclResult_t res = brd_plan_op_barrier(c->b, c->gpu, c->blk);
      if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the op");
    }
    return ncclSuccess;
  }
  case K_SIGNAL:
  case K_WAIT: {
    int type;
    CHECK(get_chan_type(c, op, "channel_type", &type));
    if (type == 2)
      return fail(c, ncclInvalidArgument,
                  "a signal or wait on a switch channel has no Braid op");
    return sync_op(c, t, op, type, kind == K_SIGNAL ? BRD_IR_OP_SIGNAL : BRD_IR_OP_WAIT);
  }
  default: return data_op(c, t, op, kind);
  }
}

/* A pipeline: its inner ops `pipe_n` times, iteration i on piece i of
 * every data op's chunks (see pipe_iters). Sync ops, nops and barriers
 * inside run every iteration, as in MSCCL++. */
static ncclResult_t pipeline_op(mctx_t *c, const mtb_t *t, const brd_json_t *op) {
  if (c->pipe_n > 0) return fail(c, ncclInvalidArgument, "a pipeline inside a pipeline");
  const brd_json_t *ctx = brd_json_get(op, "iter_context"), *ops;
  int64_t unit, nck;
  CHECK(want(c, "iter_context", ctx, BRD_JSON_OBJ));
  CHECK(get_int(c, ctx, "unit_size", 1, 0, 1, INT64_MAX, &unit));
  CHECK(get_int(c, ctx, "num_chunks", 1, 0, 1, 65535, &nck));
  CHECK(get_arr(c, op, "ops", &ops));
  int p = pipe_iters(c, unit, nck);
  const char *name = c->opname;
  c->pipe_n = p;
  c->pipe_len = nck * c->R / p; /* exact: R is a multiple of p / gcd(p, nck) */
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < p && res == ncclSuccess; i++) {
    c->pipe_i = i;
    for (size_t j = 0; j < ops->n && res == ncclSuccess; j++) {
      c->inner = (int)j;
      res = one_op(c, t, &ops->kids[j]);
    }
  }
  c->pipe_n = 0;
  c->inner = -1;
  c->opname = name;
  return res;
}

/* Block 0 of rank r copies its input into the switch staging slots
 * (back = 0), or the staging slots into its output (back = 1). */
static ncclResult_t stage_copy(mctx_t *c, int r, int back) {
  brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1, 0);
  brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, 0);
  brd_plan_ref_t slot = brd_plan_ref(BRD_IR_BUF_SCRATCH, -1, (uint32_t)(c->sw_base * c->R));
  brd_plan_move_t m;
  memset(&m, 0, sizeof(m));
  m.code = BRD_IR_OP_COPY;
  m.nchunks = c->cr;
  m.nsrc = 1;
  m.src = back ? &slot : &in;
  m.ndst = 1;
  m.dst = back ? &out : &slot;
  return brd_plan_op_move(c->b, r, 0, &m);
}

static ncclResult_t run_pass(mctx_t *c) {
  for (int r = 0; r < c->n; r++)
    for (int t = 0; t < MC_NTYPES; t++)
      for (int i = 0; i < c->g[r].nch[t]; i++) c->g[r].ch[t][i].nsig = c->g[r].ch[t][i].nwait = 0;
  memset(c->waited, 0, (size_t)c->n * (size_t)c->nb_out * (size_t)c->n);
  for (int r = 0; r < c->n && c->b != NULL && c->prologue; r++) {
    /* The input to where it lies in the one buffer: the whole output
     * (all-reduce), the rank's block of the output (all-gather), the
     * output from the rank's block of the input (reduce-scatter). */
    uint32_t rs = (uint32_t)r * c->cr;
    brd_plan_ref_t in = brd_plan_ref(BRD_IR_BUF_INPUT, -1,
                                     c->coll == BRD_IR_COLL_REDUCESCATTER ? rs : 0);
    brd_plan_ref_t out = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1,
                                      c->coll == BRD_IR_COLL_ALLGATHER ? rs : 0);
    brd_plan_move_t m;
    memset(&m, 0, sizeof(m));
    m.code = BRD_IR_OP_COPY;
    m.nchunks = c->cr;
    m.nsrc = 1;
    m.src = &in;
    m.ndst = 1;
    m.dst = &out;
    ncclResult_t res = brd_plan_op_move(c->b, r, 0, &m);
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the input copy");
  }
  for (int r = 0; r < c->n && c->b != NULL && c->sw_stage; r++) {
    ncclResult_t res = stage_copy(c, r, 0);
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the staging copy");
  }
  for (int r = 0; r < c->n; r++) {
    const brd_json_t *tbs = brd_json_get(c->g[r].js, "threadblocks");
    c->gpu = r;
    for (size_t b = 0; b < tbs->n; b++) {
      const brd_json_t *tb = &tbs->kids[b], *ops;
      mtb_t t;
      c->tb = (int)b;
      c->blk = (int)((int64_t)b * c->nb_out / c->nblocks);
      c->op = -1;
      if (tb->type != BRD_JSON_OBJ)
        return fail(c, ncclInvalidArgument, "is %s, expected an object", jtype_names[tb->type]);
      int64_t id;
      CHECK(get_int(c, tb, "id", 1, 0, 0, INT32_MAX, &id));
      if (id != (int64_t)b)
        return fail(c, ncclInvalidArgument, "field \"id\" is %" PRId64 ", expected %zu", id, b);
      CHECK(read_tb(c, tb, &t));
      CHECK(get_arr(c, tb, "ops", &ops));
      for (size_t i = 0; i < ops->n; i++) {
        c->op = (int)i;
        CHECK(one_op(c, &t, &ops->kids[i]));
      }
    }
  }
  c->gpu = c->tb = c->op = c->inner = -1;
  if (c->b == NULL) return ncclSuccess;
  /* The staged buffer back to the output, once every block is done (the
   * plan's own synchronisation orders the other ranks' multicast writes
   * before its end). */
  for (int r = 0; r < c->n && c->sw_stage; r++) {
    ncclResult_t res = ncclSuccess;
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, r, b);
    if (res == ncclSuccess) res = stage_copy(c, r, 1);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the staging copy");
  }
  /* Slot-reuse credits: Braid runs the plan once per window of the
   * buffers, MSCCL++ once per launch, so a rank whose scratch peers write
   * tells them, once all its blocks are past their reads, that the next
   * window may write again. */
  for (int p = 0; p < c->n; p++) {
    int readers = 0;
    for (int r = 0; r < c->n; r++) readers |= c->wr[(size_t)r * c->n + p];
    if (!readers) continue;
    ncclResult_t res = ncclSuccess;
    for (int b = 0; b < c->nb_out && c->nb_out > 1 && res == ncclSuccess; b++)
      res = brd_plan_op_barrier(c->b, p, b);
    for (int r = 0; r < c->n && res == ncclSuccess; r++)
      if (c->wr[(size_t)r * c->n + p])
        res = brd_plan_op_sync(c->b, p, 0, BRD_IR_OP_SIGNAL, r, (uint32_t)c->credit_sem,
                               c->credit_k);
    if (res != ncclSuccess) return fail(c, res, "the plan builder refuses the credits");
  }
  return ncclSuccess;
}

/* See mscclpp.h. */
int brd_plan_mscclpp_detect(const brd_json_t *root) {
  const brd_json_t *g = brd_json_get(root, "gpus");
  return g != NULL && g->type == BRD_JSON_ARR && brd_json_get(root, "format") == NULL &&
         (brd_json_get(root, "collective") != NULL ||
          brd_json_get(root, "num_threads_per_block") != NULL);
}

/* See mscclpp.h. */
ncclResult_t brd_plan_mscclpp_translate(const brd_json_t *root, const char *name,
                                        int max_blocks, brd_ir_plan_t **plan_out,
                                        brd_plan_json_meta_t *meta_out, char *err,
                                        size_t errlen) {
  mctx_t c;
  ncclResult_t res = ncclSuccess;
  brd_ir_plan_t *plan = NULL;
  brd_plan_json_meta_t meta;
  memset(&c, 0, sizeof(c));
  memset(&meta, 0, sizeof(meta));
  c.name = name ? name : "(plan)";
  c.err = err;
  c.errlen = errlen;
  c.gpu = c.tb = c.op = c.inner = -1;
  c.R = 1;
  if (err && errlen) err[0] = '\0';
  if (root == NULL || root->type != BRD_JSON_OBJ)
    return fail(&c, ncclInvalidArgument, "the document is not an object");
  const char *coll, *proto;
  const brd_json_t *gpus, *ip;
  CHECK(get_str(&c, root, "collective", &coll));
  static const struct {
    const char *name;
    int coll;
  } colls[] = {{"allreduce", BRD_IR_COLL_ALLREDUCE},
               {"allgather", BRD_IR_COLL_ALLGATHER},
               {"reducescatter", BRD_IR_COLL_REDUCESCATTER},
               {"alltoall", BRD_IR_COLL_ALLTOALL}};
  c.coll = -1;
  for (size_t i = 0; i < NELEM(colls); i++)
    if (strcmp(coll, colls[i].name) == 0) c.coll = colls[i].coll;
  if (c.coll < 0)
    return fail(&c, ncclInvalidArgument,
                "collective \"%s\": only \"allreduce\", \"allgather\", \"reducescatter\" "
                "and \"alltoall\" plans are translated%s", coll,
                strcmp(coll, "broadcast") == 0 ? " (the format names no broadcast root)" : "");
  CHECK(get_str(&c, root, "protocol", &proto));
  if (strcmp(proto, "LL") == 0) c.ll = 1;
  else if (strcmp(proto, "Simple") != 0)
    return fail(&c, ncclInvalidArgument,
                "protocol \"%s\": only \"Simple\" and \"LL\" are translated", proto);
  ip = brd_json_get(root, "inplace");
  CHECK(want(&c, "inplace", ip, BRD_JSON_BOOL));
  c.inplace = (int)ip->i;
  if (c.inplace && c.coll == BRD_IR_COLL_ALLTOALL)
    return fail(&c, ncclInvalidArgument,
                "an in-place all-to-all: Braid's all-to-all has no in-place layout");
  /* reuse_resources folds scratch offsets onto a fixed scratch size,
   * which only pipelines use (their iterations share the space); Braid
   * gives each iteration slots of its own, so such plans translate where
   * every scratch ref is in a pipeline (read_ref). */
  const brd_json_t *reuse = brd_json_get(root, "reuse_resources");
  c.reuse = reuse != NULL && reuse->type == BRD_JSON_BOOL && reuse->i;
  int64_t v;
  CHECK(get_int(&c, root, "min_message_size", 0, 0, 0, INT64_MAX, &v));
  meta.min_bytes = (uint64_t)v;
  const brd_json_t *mx = brd_json_get(root, "max_message_size");
  /* The DSL writes 2^64-1 (beyond int64) for "no limit". */
  if (mx != NULL && mx->type == BRD_JSON_NUM) {
    meta.max_bytes = 0;
  } else {
    CHECK(get_int(&c, root, "max_message_size", 0, 0, 0, INT64_MAX, &v));
    meta.max_bytes = (uint64_t)v;
    if (meta.max_bytes != 0 && meta.max_bytes < meta.min_bytes)
      return fail(&c, ncclInvalidArgument, "max_message_size is below min_message_size");
  }
  c.max_msg = meta.max_bytes;
  /* Plans of every collective but all-to-all declare in place or out of
   * place (the library's rule: an all-to-all plan holds both ways). */
  meta.inplace = c.coll == BRD_IR_COLL_ALLTOALL ? BRD_PLAN_JSON_INPLACE_ANY
                 : c.inplace                    ? BRD_PLAN_JSON_INPLACE_YES
                                                : BRD_PLAN_JSON_INPLACE_NO;
  CHECK(get_arr(&c, root, "gpus", &gpus));
  if (gpus->n < 1 || gpus->n > 65535)
    return fail(&c, ncclInvalidArgument, "%zu gpus (1 to 65535)", gpus->n);
  c.n = (int)gpus->n;
  if (c.coll == BRD_IR_COLL_ALLGATHER) {
    /* MSCCL++ sizes an all-gather by its output, Braid by each rank's
     * input: the range divided by the ranks, rounded inwards. */
    uint64_t min_raw = meta.min_bytes;
    meta.min_bytes = (meta.min_bytes + (uint64_t)c.n - 1) / (uint64_t)c.n;
    if (meta.max_bytes != 0) {
      meta.max_bytes /= (uint64_t)c.n;
      if (meta.max_bytes == 0 || meta.max_bytes < meta.min_bytes)
        return fail(&c, ncclInvalidArgument,
                    "min_message_size %" PRIu64 " to max_message_size %" PRIu64 " holds no "
                    "all-gather of %d ranks (whole bytes per rank)", min_raw, c.max_msg, c.n);
    }
  }
  c.g = calloc((size_t)c.n, sizeof(*c.g));
  if (c.g == NULL) return fail(&c, ncclSystemError, "out of host memory");
  for (int r = 0; r < c.n; r++) {
    c.g[r].js = &gpus->kids[r];
    c.gpu = r;
    if (c.g[r].js->type != BRD_JSON_OBJ) {
      res = fail(&c, ncclInvalidArgument, "is not an object");
      goto out;
    }
    const brd_json_t *tbs;
    CHECK_GOTO(get_arr(&c, c.g[r].js, "threadblocks", &tbs), res, out);
    if ((int)tbs->n > c.nblocks) c.nblocks = (int)tbs->n;
  }
  for (int r = 0; r < c.n; r++) CHECK_GOTO(read_gpu(&c, r), res, out);
  /* Chunks per segment: MSCCL++ cuts every buffer into chunks of one
   * size (the input over input_chunks); Braid's segments (a rank's block
   * of an all-gather's output, ...) are whole ones. */
  c.in_chunks = c.g[0].in_chunks;
  int64_t out0 = c.g[0].out_chunks;
  c.nchunks = c.coll == BRD_IR_COLL_REDUCESCATTER ? out0
              : c.coll == BRD_IR_COLL_ALLTOALL    ? c.in_chunks / c.n
                                                  : c.in_chunks;
  c.nb = c.coll == BRD_IR_COLL_ALLREDUCE ? c.nchunks : c.nchunks * c.n;
  for (int r = 0; r < c.n; r++) {
    c.gpu = r;
    const mgpu_t *g = &c.g[r];
    int64_t want_in = c.coll == BRD_IR_COLL_ALLREDUCE || c.coll == BRD_IR_COLL_ALLGATHER
                          ? c.nchunks : c.nchunks * c.n;
    int64_t want_out = c.coll == BRD_IR_COLL_ALLREDUCE || c.coll == BRD_IR_COLL_REDUCESCATTER
                           ? c.nchunks : c.nchunks * c.n;
    if (c.nchunks < 1 || g->in_chunks != want_in || g->out_chunks != want_out) {
      static const char *const need[] = {
          [BRD_IR_COLL_ALLREDUCE] = "an all-reduce needs both equal",
          [BRD_IR_COLL_ALLGATHER] = "an all-gather needs output_chunks = ranks x input_chunks",
          [BRD_IR_COLL_REDUCESCATTER] =
              "a reduce-scatter needs input_chunks = ranks x output_chunks",
          [BRD_IR_COLL_ALLTOALL] = "an all-to-all needs both equal, a multiple of the ranks",
      };
      res = fail(&c, ncclInvalidArgument,
                 "input_chunks %" PRId64 " and output_chunks %" PRId64 "; %s, at least 1 and "
                 "the same on every GPU (%" PRId64 " and %" PRId64 " on gpu 0)",
                 g->in_chunks, g->out_chunks, need[c.coll], c.in_chunks, out0);
      goto out;
    }
    if (g->scratch_chunks > c.nslots) c.nslots = g->scratch_chunks;
  }
  c.gpu = -1;
  if (c.nblocks < 1) {
    res = fail(&c, ncclInvalidArgument, "no thread blocks");
    goto out;
  }
  c.nb_out = max_blocks > 0 && max_blocks < c.nblocks ? max_blocks : c.nblocks;
  c.wr = calloc((size_t)c.n * (size_t)c.n, 1);
  c.waited = calloc((size_t)c.n * (size_t)c.nblocks * (size_t)c.n, 1);
  if (c.wr == NULL || c.waited == NULL) {
    res = fail(&c, ncclSystemError, "out of host memory");
    goto out;
  }
  c.sw_base = c.nslots;
  c.R = pipes_scan(&c);
  if ((int64_t)c.R * c.nchunks * (c.nb / c.nchunks) > 65535 ||
      (int64_t)c.R * (c.nslots + c.nchunks) > 65535) {
    res = fail(&c, ncclInvalidArgument,
               "its pipelines cut each chunk into %d, more chunks or scratch slots than a "
               "Braid plan holds (65535)", c.R);
    goto out;
  }
  c.cr = (uint32_t)(c.nchunks * c.R);
  c.wcount = calloc((size_t)c.n * (size_t)c.nb * (size_t)c.R, sizeof(uint32_t));
  if (c.wcount == NULL) {
    res = fail(&c, ncclSystemError, "out of host memory");
    goto out;
  }
  CHECK_GOTO(run_pass(&c), res, out);
  c.pass = 1;
  CHECK_GOTO(run_pass(&c), res, out);
  c.pass = 2;
  if (c.sw_stage) c.nslots = c.sw_base + c.nchunks;
  c.nslots *= c.R;
  int credits = 0;
  for (size_t i = 0; i < (size_t)c.n * (size_t)c.n; i++) credits |= c.wr[i];
  if (credits) {
    c.credit_sem = ++c.sem_max;
    c.credit_k = ++c.kmax;
  }
  brd_plan_shape_t shape;
  memset(&shape, 0, sizeof(shape));
  shape.nranks = c.n;
  shape.nblocks = c.nb_out;
  shape.nchunks = c.cr;
  shape.nslots = (uint32_t)c.nslots;
  shape.slot_div = c.nslots > 0 ? (uint32_t)c.nslots : 1;
  shape.nsems = (uint32_t)c.sem_max + 1;
  shape.seq_per_iter = c.kmax > 0 ? (uint32_t)c.kmax : 1;
  shape.proto = c.ll ? BRD_IR_PROTO_LL : BRD_IR_PROTO_SIMPLE;
  shape.algo = c.has_switch ? BRD_IR_ALGO_NVLS : BRD_IR_ALGO_ONESHOT;
  shape.coll = (uint8_t)c.coll;
  if (c.has_switch && c.ll) {
    res = fail(&c, ncclInvalidArgument, "switch-channel ops in a plan of protocol LL");
    goto out;
  }
  res = brd_plan_builder_create(&shape, &c.b);
  if (res != ncclSuccess) {
    fail(&c, res, "the plan builder refuses the shape (%d ranks, %d blocks, %" PRId64
         " chunks, %" PRId64 " slots)", c.n, c.nblocks, c.nchunks, c.nslots);
    goto out;
  }
  CHECK_GOTO(run_pass(&c), res, fail_destroy);
  res = brd_plan_builder_finish(c.b, &plan);
  if (res != ncclSuccess) {
    fail(&c, res, "the plan builder cannot lay the plan out");
    goto fail_destroy;
  }
  *plan_out = plan;
  if (meta_out != NULL) *meta_out = meta;
fail_destroy:
  brd_plan_builder_destroy(c.b);
out:
  free(c.wcount);
  free(c.wr);
  free(c.waited);
  gpus_free(&c);
  return res;
}

/* See mscclpp.h. */
ncclResult_t brd_plan_mscclpp_read(const char *path, int max_blocks, int *is_mscclpp_out,
                                   brd_ir_plan_t **plan_out,
                                   brd_plan_json_meta_t *meta_out, char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  brd_json_t *root = NULL;
  ncclResult_t res = brd_plan_json_text_read(path, &text, &len, err, errlen);
  if (res != ncclSuccess) {
    *is_mscclpp_out = 1;
    return res;
  }
  res = brd_json_parse(text, len, path, &root, err, errlen);
  free(text);
  if (res != ncclSuccess) {
    *is_mscclpp_out = 1;
    return res;
  }
  if (!brd_plan_mscclpp_detect(root)) {
    *is_mscclpp_out = 0;
    brd_json_free(root);
    return ncclSuccess;
  }
  *is_mscclpp_out = 1;
  res = brd_plan_mscclpp_translate(root, path, max_blocks, plan_out, meta_out, err, errlen);
  brd_json_free(root);
  return res;
}
