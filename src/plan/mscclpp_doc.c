/*
 * MSCCL++ execution plans: reading the document (see mscclpp.c for what it
 * holds and how it is translated): its fields with messages that name
 * them, each GPU's channels and remote buffers, a thread block's lists,
 * buffer refs in Braid's units, how finely pipelines and thread-block
 * groups cut chunks; and the entry points that recognise a document and
 * read one from a file (mscclpp.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/mscclpp.h"
#include "plan/mscclpp_int.h"

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_fail(mctx_t *c, ncclResult_t res, const char *fmt, ...) {
  if (c->failed) return c->res;
  char what[320], where[128] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  if (c->gpu >= 0 && c->tb >= 0 && c->op >= 0 && c->inner >= 0)
    snprintf(where, sizeof(where),
             "gpu %d, thread block %d, op %d (pipeline), inner op %d (%s): ",
             c->gpu, c->tb, c->op, c->inner, c->opname ? c->opname : "?");
  else if (c->gpu >= 0 && c->tb >= 0 && c->op >= 0)
    snprintf(where, sizeof(where), "gpu %d, thread block %d, op %d (%s): ", c->gpu, c->tb, c->op,
             c->opname ? c->opname : "?");
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

/* See mscclpp_int.h. */
const char *const brd_mscclpp_jtype_names[] = {"null",     "a boolean", "an integer", "a number",
                                               "a string", "an array",  "an object"};

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_want(mctx_t *c, const char *what, const brd_json_t *v, int type) {
  if (v == NULL) return brd_mscclpp_fail(c, ncclInvalidArgument, "missing field \"%s\"", what);
  if (v->type != type)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "field \"%s\" is %s, expected %s", what,
                            brd_mscclpp_jtype_names[v->type], brd_mscclpp_jtype_names[type]);
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_get_int(mctx_t *c, const brd_json_t *o, const char *key, int required,
                                 int64_t def, int64_t lo, int64_t hi, int64_t *out) {
  const brd_json_t *v = brd_json_get(o, key);
  if (v == NULL && !required) {
    *out = def;
    return ncclSuccess;
  }
  CHECK(brd_mscclpp_want(c, key, v, BRD_JSON_INT));
  if (v->i < lo || v->i > hi)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "field \"%s\" is %" PRId64 ", out of range [%" PRId64 ", %" PRId64 "]",
                            key, v->i, lo, hi);
  *out = v->i;
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_get_str(mctx_t *c, const brd_json_t *o, const char *key,
                                 const char **out) {
  const brd_json_t *v = brd_json_get(o, key);
  CHECK(brd_mscclpp_want(c, key, v, BRD_JSON_STR));
  *out = v->s;
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_get_arr(mctx_t *c, const brd_json_t *o, const char *key,
                                 const brd_json_t **out) {
  const brd_json_t *v = brd_json_get(o, key);
  CHECK(brd_mscclpp_want(c, key, v, BRD_JSON_ARR));
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
  CHECK(brd_mscclpp_get_str(c, o, key, &s));
  int b = buf_code(s);
  if (b < 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "field \"%s\" is \"%s\", expected \"i\", \"o\" or \"s\"", key, s);
  *out = b;
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_get_chan_type(mctx_t *c, const brd_json_t *o, const char *key, int *out) {
  const char *s;
  CHECK(brd_mscclpp_get_str(c, o, key, &s));
  int t = chan_code(s);
  if (t < 0)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "field \"%s\" is \"%s\", expected \"memory\", \"port\" or \"switch\"",
                            key, s);
  *out = t;
  return ncclSuccess;
}

/* See mscclpp_int.h. */
void brd_mscclpp_gpus_free(mctx_t *c) {
  if (c->g == NULL) return;
  for (int r = 0; r < c->n; r++) {
    for (int t = 0; t < MC_NTYPES; t++) free(c->g[r].ch[t]);
    free(c->g[r].sw_buf);
    free(c->g[r].rbuf);
    free(c->g[r].sem);
  }
  free(c->g);
  c->g = NULL;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_gpu_read(mctx_t *c, int r) {
  mgpu_t *g = &c->g[r];
  const brd_json_t *chans, *rbufs;
  int64_t v;
  c->gpu = r;
  CHECK(brd_mscclpp_get_int(c, g->js, "id", 1, 0, 0, INT32_MAX, &v));
  if (v != r)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "field \"id\" is %" PRId64 ", expected %d (gpus[] in rank order)", v,
                            r);
  CHECK(brd_mscclpp_get_int(c, g->js, "input_chunks", 1, 0, 0, 65535, &g->in_chunks));
  CHECK(brd_mscclpp_get_int(c, g->js, "output_chunks", 1, 0, 0, 65535, &g->out_chunks));
  CHECK(brd_mscclpp_get_int(c, g->js, "scratch_chunks", 1, 0, 0, 65535, &g->scratch_chunks));
  /* In place, MSCCL++'s DSL may give output_chunks 0 (the output is the
   * input's buffer): the output then has the chunks the collective
   * implies. */
  if (c->inplace && g->out_chunks == 0)
    g->out_chunks = c->coll == BRD_IR_COLL_ALLGATHER       ? g->in_chunks * c->n
                    : c->coll == BRD_IR_COLL_REDUCESCATTER ? g->in_chunks / c->n
                                                           : g->in_chunks;
  /* Device semaphores (optional): {init_value} each, shared by the GPU's
   * thread blocks (sem_acquire / sem_release, mscclpp_sem.c). */
  const brd_json_t *sems = brd_json_get(g->js, "semaphores");
  if (sems != NULL) {
    CHECK(brd_mscclpp_get_arr(c, g->js, "semaphores", &sems));
    if (sems->n > 65535)
      return brd_mscclpp_fail(c, ncclInvalidArgument, "%zu semaphores (at most 65535)", sems->n);
    if (sems->n > 0) {
      g->sem = calloc(sems->n, sizeof(*g->sem));
      if (g->sem == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
      g->nsem = (int)sems->n;
      c->has_sem = 1;
    }
    for (size_t i = 0; i < sems->n; i++) {
      if (sems->kids[i].type != BRD_JSON_OBJ)
        return brd_mscclpp_fail(c, ncclInvalidArgument, "semaphores[%zu] is %s, expected an object",
                                i, brd_mscclpp_jtype_names[sems->kids[i].type]);
      CHECK(brd_mscclpp_get_int(c, &sems->kids[i], "init_value", 1, 0, 0, 65535, &v));
      g->sem[i].init = (int)v;
      g->sem[i].rel_tb = g->sem[i].acq_tb = -1;
    }
  }
  CHECK(brd_mscclpp_get_arr(c, g->js, "channels", &chans));
  /* Count first, then fill. */
  for (int pass = 0; pass < 2; pass++) {
    int nch[MC_NTYPES] = {0, 0}, nsw = 0;
    for (size_t i = 0; i < chans->n; i++) {
      const brd_json_t *e = &chans->kids[i];
      int type;
      CHECK(brd_mscclpp_get_chan_type(c, e, "channel_type", &type));
      if (type == 2) {
        const brd_json_t *groups;
        int bt;
        CHECK(get_buf(c, e, "buffer_type", &bt));
        CHECK(brd_mscclpp_get_arr(c, e, "rank_groups", &groups));
        for (size_t k = 0; k < groups->n; k++) {
          const brd_json_t *ranks;
          CHECK(brd_mscclpp_get_arr(c, &groups->kids[k], "ranks", &ranks));
          int all = ranks->n == (size_t)c->n;
          for (size_t q = 0; q < ranks->n && all; q++)
            all = ranks->kids[q].type == BRD_JSON_INT && ranks->kids[q].i == (int64_t)q;
          if (!all)
            return brd_mscclpp_fail(
                c, ncclInvalidArgument,
                "switch channel %d: its rank group is not every rank in order; Braid's "
                "switch channel spans all ranks",
                nsw);
          if (pass) g->sw_buf[nsw] = bt;
          nsw++;
        }
        continue;
      }
      const brd_json_t *to;
      CHECK(brd_mscclpp_get_arr(c, e, "connected_to", &to));
      for (size_t k = 0; k < to->n; k++) {
        const brd_json_t *p = &to->kids[k];
        if (p->type != BRD_JSON_INT || p->i < 0 || p->i >= c->n || p->i == r)
          return brd_mscclpp_fail(
              c, ncclInvalidArgument,
              "channels[%zu].connected_to[%zu] is not a peer rank (0..%d, not %d)", i, k, c->n - 1,
              r);
        if (pass) g->ch[type][nch[type]].peer = (int)p->i;
        nch[type]++;
      }
    }
    if (!pass) {
      for (int t = 0; t < MC_NTYPES; t++) {
        g->nch[t] = nch[t];
        g->ch[t] = calloc((size_t)nch[t] + 1, sizeof(mchan_t));
        if (g->ch[t] == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
      }
      g->nsw = nsw;
      g->sw_buf = calloc((size_t)nsw + 1, sizeof(int));
      if (g->sw_buf == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
    }
  }
  if (g->nsw > 1)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "%d switch channels; Braid has one per rank",
                            g->nsw);
  /* Semaphore of each channel: its ordinal among the rank's channels of
   * that type to the same peer. */
  for (int t = 0; t < MC_NTYPES; t++)
    for (int i = 0; i < g->nch[t]; i++) {
      int m = 0;
      for (int j = 0; j < i; j++) m += g->ch[t][j].peer == g->ch[t][i].peer;
      g->ch[t][i].sem = m;
      if (t == MC_MEMORY && m + 1 > c->mem_max) c->mem_max = m + 1;
    }
  CHECK(brd_mscclpp_get_arr(c, g->js, "remote_buffers", &rbufs));
  g->nrbuf = (int)rbufs->n;
  g->rbuf = calloc(rbufs->n + 1, sizeof(mrbuf_t));
  if (g->rbuf == NULL) return brd_mscclpp_fail(c, ncclSystemError, "out of host memory");
  for (size_t i = 0; i < rbufs->n; i++) {
    int64_t rk;
    CHECK(brd_mscclpp_get_int(c, &rbufs->kids[i], "rank", 1, 0, 0, c->n - 1, &rk));
    if (rk == r)
      return brd_mscclpp_fail(c, ncclInvalidArgument,
                              "remote_buffers[%zu] is this rank's own buffer", i);
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

static int64_t gcd64(int64_t a, int64_t b) {
  while (b != 0) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

/* See mscclpp_int.h. */
int brd_mscclpp_pipe_iters(const mctx_t *c, int64_t unit, int64_t nck) {
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

/* See mscclpp_int.h. */
int brd_mscclpp_cut_scan(const mctx_t *c) {
  int64_t r = 1;
  for (int g = 0; g < c->n; g++) {
    const brd_json_t *tbs = brd_json_get(c->g[g].js, "threadblocks");
    for (size_t b = 0; tbs != NULL && b < tbs->n; b++) {
      const brd_json_t *ops = brd_json_get(&tbs->kids[b], "ops");
      for (size_t i = 0; ops != NULL && ops->type == BRD_JSON_ARR && i < ops->n; i++) {
        const brd_json_t *op = &ops->kids[i];
        const brd_json_t *nm = brd_json_get(op, "name");
        const brd_json_t *ctx = brd_json_get(op, "iter_context");
        const brd_json_t *tbg = brd_json_get(op, "tbg_info");
        int64_t parts, whole;
        if (tbg != NULL) {
          /* tbg_size shares of the op's chunks (its first ref's size). */
          const brd_json_t *n = brd_json_get(tbg, "tbg_size");
          const brd_json_t *src = brd_json_get(op, "src_buff");
          const brd_json_t *sz = src != NULL && src->type == BRD_JSON_ARR && src->n > 0
                                     ? brd_json_get(&src->kids[0], "size")
                                     : NULL;
          if (n == NULL || sz == NULL || n->type != BRD_JSON_INT || sz->type != BRD_JSON_INT ||
              n->i < 1 || n->i > 65535 || sz->i < 1 || sz->i > 65535)
            continue;
          parts = n->i;
          whole = sz->i;
        } else if (nm != NULL && nm->type == BRD_JSON_STR && strcmp(nm->s, "pipeline") == 0 &&
                   ctx != NULL) {
          /* Iterations over num_chunks chunks. */
          const brd_json_t *u = brd_json_get(ctx, "unit_size");
          const brd_json_t *k = brd_json_get(ctx, "num_chunks");
          if (u == NULL || k == NULL || u->type != BRD_JSON_INT || k->type != BRD_JSON_INT ||
              u->i < 1 || k->i < 1 || k->i > 65535)
            continue;
          parts = brd_mscclpp_pipe_iters(c, u->i, k->i);
          whole = k->i;
        } else {
          continue;
        }
        int64_t need = parts / gcd64(parts, whole);
        r = r / gcd64(r, need) * need;
        if (r > 65535) return 65536;
      }
    }
  }
  return (int)r;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_tb_read(mctx_t *c, const brd_json_t *tb, mtb_t *t) {
  memset(t, 0, sizeof(*t));
  const brd_json_t *chans = brd_json_get(tb, "channels");
  if (chans != NULL) {
    CHECK(brd_mscclpp_want(c, "channels", chans, BRD_JSON_ARR));
    for (size_t i = 0; i < chans->n; i++) {
      int type;
      CHECK(brd_mscclpp_get_chan_type(c, &chans->kids[i], "channel_type", &type));
      /* A switch channel's buffer is the GPU channel's (MSCCL++'s executor
       * reads a thread block's "buff" and keeps its switch channel ids as
       * they are); memory and port channels bound to one buffer are an
       * older form. */
      if (type != 2 && brd_json_get(&chans->kids[i], "buff") != NULL)
        return brd_mscclpp_fail(
            c, ncclInvalidArgument,
            "channels[%zu] names a \"buff\" (channels bound to one buffer) that Braid "
            "does not translate",
            i);
      CHECK(brd_mscclpp_get_arr(c, &chans->kids[i], "channel_ids", &t->ch_ids[type]));
    }
  }
  const brd_json_t *refs = brd_json_get(tb, "remote_buffer_refs");
  if (refs != NULL) {
    CHECK(brd_mscclpp_want(c, "remote_buffer_refs", refs, BRD_JSON_ARR));
    for (size_t i = 0; i < refs->n; i++) {
      int type;
      CHECK(brd_mscclpp_get_chan_type(c, &refs->kids[i], "access_channel_type", &type));
      if (type == 2)
        return brd_mscclpp_fail(c, ncclInvalidArgument,
                                "remote_buffer_refs[%zu]: remote buffers through a switch channel",
                                i);
      CHECK(brd_mscclpp_get_arr(c, &refs->kids[i], "remote_buffer_ids", &t->rbuf_ids[type]));
    }
  }
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_tb_chan(mctx_t *c, const mtb_t *t, int type, int64_t idx, int *out) {
  static const char *const tn[] = {"memory", "port", "switch"};
  const brd_json_t *ids = t->ch_ids[type];
  if (ids == NULL || idx < 0 || (size_t)idx >= ids->n)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "%s channel %" PRId64
                            " is not one of the thread block's %zu %s channels",
                            tn[type], idx, ids ? ids->n : 0, tn[type]);
  const brd_json_t *v = &ids->kids[idx];
  int ngpu = type == 2 ? c->g[c->gpu].nsw : c->g[c->gpu].nch[type];
  if (v->type != BRD_JSON_INT || v->i < 0 || v->i >= ngpu)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "thread block %s channel %" PRId64
                            " names GPU channel out of range (%d %s "
                            "channels)",
                            tn[type], idx, ngpu, tn[type]);
  *out = (int)v->i;
  return ncclSuccess;
}

static const char *const mb_names[] = {"input", "output", "scratch"};

/* Ref list[i]'s remote buffer vb (an index into the thread block's
 * remote buffers of the op's channel type) into its rank and MB_* type;
 * fails (brd_mscclpp_fail) where the thread block does not reach it. */
static ncclResult_t ref_remote(mctx_t *c, const mtb_t *t, int op_chan_type, const brd_json_t *vb,
                               const char *list, size_t i, int *owner_out, int *type_out) {
  const mgpu_t *g = &c->g[c->gpu];
  if (op_chan_type != MC_MEMORY && op_chan_type != MC_PORT)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "%s[%zu] names remote buffer %" PRId64
                            " but the op's channel_type is not "
                            "memory or port",
                            list, i, vb->i);
  const brd_json_t *ids = t->rbuf_ids[op_chan_type];
  if (ids == NULL || vb->i < 0 || (size_t)vb->i >= ids->n ||
      ids->kids[vb->i].type != BRD_JSON_INT || ids->kids[vb->i].i < 0 ||
      ids->kids[vb->i].i >= g->nrbuf)
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "%s[%zu]: remote buffer %" PRId64 " is not one the thread block reaches", list, i, vb->i);
  const mrbuf_t *rb = &g->rbuf[ids->kids[vb->i].i];
  *owner_out = rb->rank;
  *type_out = rb->type;
  return ncclSuccess;
}

/* Fails (brd_mscclpp_fail) unless MSCCL++ chunks index..index+size-1 lie
 * in the owner's buffer of MB_* type (owner -2: the switch channel's). */
static ncclResult_t ref_range_check(mctx_t *c, const char *list, size_t i, int owner, int type,
                                    int64_t index, int64_t size) {
  int64_t limit = type == MB_SCRATCH ? (owner == -2 ? c->nslots : c->g[owner].scratch_chunks)
                  : type == MB_INPUT ? (owner == -2 ? 0 : c->g[owner].in_chunks)
                                     : (owner == -2 ? 0 : c->g[owner].out_chunks);
  if (index + size <= limit) return ncclSuccess;
  char whose[32];
  if (owner == c->gpu)
    snprintf(whose, sizeof(whose), "the local");
  else if (owner == -2)
    snprintf(whose, sizeof(whose), "the switch channel's");
  else
    snprintf(whose, sizeof(whose), "rank %d's", owner);
  return brd_mscclpp_fail(c, ncclInvalidArgument,
                          "%s[%zu]: chunks %" PRId64 "..%" PRId64
                          " of %s %s buffer, which has %" PRId64 " chunks",
                          list, i, index, index + size - 1, whose, mb_names[type], limit);
}

/* out->ref (and io, one) for a checked ref to MSCCL++ chunk `index` of
 * the owner's buffer of MB_* type (owner -2: the switch channel's
 * scratch), read or written (dst); out->index and out->size come in
 * Braid chunks. Fails (brd_mscclpp_fail) on what Braid cannot name. */
static ncclResult_t ref_place(mctx_t *c, const char *list, size_t i, int dst, int owner, int type,
                              int64_t index, mref_t *out) {
  int remote = owner != c->gpu;
  if (type == MB_SCRATCH) {
    if (c->reuse && c->pipe_n == 0)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[%zu] names scratch outside a pipeline in a plan with reuse_resources, "
          "where MSCCL++ places scratch chunks by a fixed scratch size; Braid "
          "translates such plans only where every scratch ref is in a pipeline",
          list, i);
    out->ref = brd_plan_ref((uint8_t)(BRD_IR_BUF_SCRATCH | (c->ll ? BRD_IR_REF_LL : 0)),
                            owner == -2 ? BRD_PLAN_PEER_SWITCH
                            : remote    ? owner
                                        : -1,
                            (uint32_t)out->index);
    return ncclSuccess;
  }
  out->io = 1;
  if (c->inplace) {
    /* One buffer per rank (MSCCL++'s DSL names an in-place all-gather's
     * input as the rank's block of its output, a reduce-scatter's output
     * as the rank's block of its input); which Braid buffer a chunk of it
     * is, brd_mscclpp_ref_resolve says per piece. */
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
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "%s[%zu] writes %s input buffer of an out-of-place plan; Braid never writes "
        "inputs",
        list, i, remote ? "a peer's" : "the");
  if (type == MB_INPUT && remote)
    return brd_mscclpp_fail(
        c, ncclInvalidArgument,
        "%s[%zu] reads a peer's input buffer in place; Braid reaches peers' outputs and "
        "scratch only (use an in-place plan, or stage through scratch)",
        list, i);
  out->ref = brd_plan_ref(type == MB_INPUT ? BRD_IR_BUF_INPUT : BRD_IR_BUF_OUTPUT,
                          remote ? owner : -1, (uint32_t)out->index);
  return ncclSuccess;
}

/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_ref_read(mctx_t *c, const mtb_t *t, int op_chan_type, const brd_json_t *e,
                                  int dst, const char *list, size_t i, mref_t *out) {
  mgpu_t *g = &c->g[c->gpu];
  int64_t index, size;
  char key[64];
  snprintf(key, sizeof(key), "%s[%zu].index", list, i);
  if (e->type != BRD_JSON_OBJ)
    return brd_mscclpp_fail(c, ncclInvalidArgument, "%s[%zu] is %s, expected an object", list, i,
                            brd_mscclpp_jtype_names[e->type]);
  const brd_json_t *vi = brd_json_get(e, "index"), *vs = brd_json_get(e, "size");
  CHECK(brd_mscclpp_want(c, key, vi, BRD_JSON_INT));
  snprintf(key, sizeof(key), "%s[%zu].size", list, i);
  CHECK(brd_mscclpp_want(c, key, vs, BRD_JSON_INT));
  index = vi->i;
  size = vs->i;
  if (index < 0 || size < 1)
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "%s[%zu]: index %" PRId64 ", size %" PRId64 " (index >= 0, size >= 1)",
                            list, i, index, size);
  memset(out, 0, sizeof(*out));
  out->index = index;
  out->size = size;
  int owner = c->gpu, type = -1;
  const brd_json_t *vt = brd_json_get(e, "type"), *vb = brd_json_get(e, "buffer_id"),
                   *vw = brd_json_get(e, "switch_channel_id");
  if (vw != NULL) {
    snprintf(key, sizeof(key), "%s[%zu].switch_channel_id", list, i);
    CHECK(brd_mscclpp_want(c, key, vw, BRD_JSON_INT));
    int sc;
    CHECK(brd_mscclpp_tb_chan(c, t, 2, vw->i, &sc));
    type = g->sw_buf[sc];
    if (type != MB_SCRATCH && !c->inplace)
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[%zu] goes through a switch channel over the %s buffer (\"%s\") of an "
          "out-of-place plan: Braid's switch channels reach scratch slots only, and "
          "only the one buffer of an in-place plan is staged there",
          list, i, mb_names[type], type == MB_INPUT ? "i" : "o");
    out->sw = 1;
    owner = -2;
    if (type != MB_SCRATCH) {
      /* The user's buffer through the switch: its chunks are staged in
       * slots sw_base.. of every rank's scratch (see run_pass). */
      if (index + size > c->nchunks)
        return brd_mscclpp_fail(c, ncclInvalidArgument,
                                "%s[%zu]: chunks %" PRId64 "..%" PRId64
                                " of the switch channel's %s "
                                "buffer, which has %" PRId64 " chunks",
                                list, i, index, index + size - 1, mb_names[type], c->nchunks);
      if (c->coll != BRD_IR_COLL_ALLREDUCE)
        return brd_mscclpp_fail(
            c, ncclInvalidArgument,
            "%s[%zu] goes through a switch channel over the user's buffer, which Braid "
            "stages for all-reduce plans only",
            list, i);
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
    CHECK(brd_mscclpp_want(c, key, vb, BRD_JSON_INT));
    CHECK(ref_remote(c, t, op_chan_type, vb, list, i, &owner, &type));
  } else if (vt != NULL) {
    snprintf(key, sizeof(key), "%s[%zu].type", list, i);
    CHECK(get_buf(c, e, "type", &type));
  } else {
    return brd_mscclpp_fail(c, ncclInvalidArgument,
                            "%s[%zu] has none of \"type\", \"buffer_id\", \"switch_channel_id\"",
                            list, i);
  }
  CHECK(ref_range_check(c, list, i, owner, type, index, size));
  out->index = index * c->R;
  out->size = size * c->R;
  return ref_place(c, list, i, dst, owner, type, index, out);
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
/* See mscclpp_int.h. */
ncclResult_t brd_mscclpp_ref_resolve(mctx_t *c, const char *list, size_t i, int dst, int peer,
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
      return brd_mscclpp_fail(
          c, ncclInvalidArgument,
          "%s[%zu] %s block %u of %s buffer, which in place is input only (the "
          "output is block %d): Braid %s",
          list, i, dst ? "writes" : "reads", seg, peer >= 0 ? "a peer's" : "the", q,
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

/* See mscclpp.h. */
int brd_plan_mscclpp_detect(const brd_json_t *root) {
  const brd_json_t *g = brd_json_get(root, "gpus");
  return g != NULL && g->type == BRD_JSON_ARR && brd_json_get(root, "format") == NULL &&
         (brd_json_get(root, "collective") != NULL ||
          brd_json_get(root, "num_threads_per_block") != NULL);
}

/* See mscclpp.h. */
ncclResult_t brd_plan_mscclpp_read(const char *path, int max_blocks, int *is_mscclpp_out,
                                   brd_ir_plan_t **plan_out, brd_plan_json_meta_t *meta_out,
                                   char *err, size_t errlen) {
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
