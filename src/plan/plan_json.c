/*
 * Braid plans as JSON: writer, a small JSON reader, the schema check and
 * the conversion to the IR. See plan_json.h and docs/plans.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "plan/plan.h"
#include "plan/plan_json.h"

#define JSON_FORMAT "braid-plan"
#define JSON_VERSION 1
#define JSON_MAX_DEPTH 64
#define JSON_MAX_FILE (256u << 20)

/* JSON paths in messages ("ranks[2].blocks[0].ops[5].refs[1].chan"). */
#define JP 256

__attribute__((format(printf, 2, 3))) static void pathf(char *out,
                                                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, JP, fmt, ap);
  va_end(ap);
}

/* ---- names ------------------------------------------------------------------ */

static const char *const coll_names[BRD_IR_COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce",
    "alltoall",  "gather",    "scatter",       "sendrecv"};
static const char *const algo_names[] = {"copy",    "ring",    "tree",
                                         "oneshot", "twoshot", "nvls"};
static const char *const proto_names[] = {"Simple", "LL", "LL128"};
static const char *const op_names[BRD_IR_OP_COUNT] = {
    "nop",        "copy",   "reduce", "put",     "get",       "pkt_put",
    "pkt_reduce", "signal", "wait",   "barrier", "flush",     "mc_reduce",
    "mc_store",   "mc_red",  "mc_barrier"};
static const char *const buf_names[] = {"input", "output", "scratch", "sem"};
static const char *const chan_names[] = {"memory", "port", "switch"};
static const struct {
  const char *name;
  uint8_t bit;
} plan_flag_names[] = {{"fixed", BRD_IR_PLAN_F_FIXED},
                       {"one_phase", BRD_IR_PLAN_F_ONE_PHASE},
                       {"peer_input", BRD_IR_PLAN_F_PEER_INPUT},
                       {"one_sided", BRD_IR_PLAN_F_ONE_SIDED}};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Library fields (plan_json.h): in ncclDataType_t and ncclRedOp_t order. */
static const char *const dtype_names[] = {
    "int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
    "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const char *const redop_names[] = {"sum", "prod", "max", "min", "avg",
                                          "premulsum"};
static const char *const inplace_names[] = {"any", "yes", "no"};

static int name_find(const char *s, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return (int)i;
  return -1;
}

/* ---- writer ----------------------------------------------------------------- */

static ncclResult_t write_ref(FILE *f, const brd_ir_plan_t *p, int rank,
                              const brd_ir_ref_t *r) {
  unsigned kind = r->buf & BRD_IR_BUF_MASK;
  if (kind >= NELEM(buf_names)) {
    WARN("plan JSON export: rank %d names buffer kind %u, which the format "
         "does not know", rank, kind);
    return ncclInvalidArgument;
  }
  fprintf(f, "{\"buf\": \"%s\"", buf_names[kind]);
  if (r->buf & BRD_IR_REF_LL) fputs(", \"ll\": true", f);
  if (r->chan != BRD_IR_CHAN_LOCAL) {
    if (r->chan >= brd_ir_plan_rank(p, rank)->nchans) {
      WARN("plan JSON export: rank %d names channel %u of %u", rank, r->chan,
           brd_ir_plan_rank(p, rank)->nchans);
      return ncclInvalidArgument;
    }
    fprintf(f, ", \"chan\": %u, \"peer\": %d", (unsigned)r->chan,
            (int)brd_ir_plan_chan(p, rank, r->chan)->peer);
  }
  fprintf(f, ", \"index\": %u}", (unsigned)r->index);
  return ncclSuccess;
}

static ncclResult_t write_op(FILE *f, const brd_ir_plan_t *p, int rank,
                             const brd_ir_op_t *op) {
  if (op->code >= BRD_IR_OP_COUNT || (op->flags & ~BRD_IR_F_POSTOP) ||
      op->nsrc + op->ndst > BRD_IR_MAX_REFS) {
    WARN("plan JSON export: rank %d has an op (code %u, flags 0x%x, %u+%u "
         "refs) the format cannot express", rank, op->code, op->flags,
         op->nsrc, op->ndst);
    return ncclInvalidArgument;
  }
  /* Fields equal to 0 are left out; the reader defaults them to 0. */
  fprintf(f, "{\"op\": \"%s\"", op_names[op->code]);
  if (op->flags & BRD_IR_F_POSTOP) fputs(", \"flags\": [\"postop\"]", f);
  if (op->chunk) fprintf(f, ", \"chunk\": %u", (unsigned)op->chunk);
  if (op->nchunks) fprintf(f, ", \"nchunks\": %u", (unsigned)op->nchunks);
  if (op->k) fprintf(f, ", \"k\": %" PRId32, op->k);
  if (op->k_src) fprintf(f, ", \"k_src\": %" PRId32, op->k_src);
  if (op->nsrc) fprintf(f, ", \"nsrc\": %u", (unsigned)op->nsrc);
  if (op->ndst) fprintf(f, ", \"ndst\": %u", (unsigned)op->ndst);
  int nref = op->nsrc + op->ndst;
  if (nref > 0) {
    fputs(", \"refs\": [", f);
    for (int i = 0; i < nref; i++) {
      if (i) fputs(", ", f);
      CHECK(write_ref(f, p, rank, &op->ref[i]));
    }
    fputc(']', f);
  }
  fputc('}', f);
  return ncclSuccess;
}

/* See plan_json.h. */
const char *brd_plan_json_dtype_name(int dt) {
  return dt >= 0 && (size_t)dt < NELEM(dtype_names) ? dtype_names[dt] : "?";
}

/* See plan_json.h. */
const char *brd_plan_json_redop_name(int op) {
  return op >= 0 && (size_t)op < NELEM(redop_names) ? redop_names[op] : "?";
}

/* A name list field: the names of the bits of mask, in bit order. */
static void write_names(FILE *f, const char *key, uint32_t mask,
                        const char *const *names, size_t n) {
  fprintf(f, "  \"%s\": [", key);
  int first = 1;
  for (size_t i = 0; i < n; i++) {
    if (!(mask & (1u << i))) continue;
    fprintf(f, "%s\"%s\"", first ? "" : ", ", names[i]);
    first = 0;
  }
  fputs("],\n", f);
}

/* The library fields that differ from the defaults. */
static void write_meta(FILE *f, const brd_plan_json_meta_t *m) {
  if (m == NULL) return;
  if (m->min_bytes) fprintf(f, "  \"min_bytes\": %" PRIu64 ",\n", m->min_bytes);
  if (m->max_bytes) fprintf(f, "  \"max_bytes\": %" PRIu64 ",\n", m->max_bytes);
  if (m->inplace > 0 && (size_t)m->inplace < NELEM(inplace_names))
    fprintf(f, "  \"inplace\": \"%s\",\n", inplace_names[m->inplace]);
  if (m->ranks_per_node > 0)
    fprintf(f, "  \"ranks_per_node\": %d,\n", m->ranks_per_node);
  if (m->dtypes) write_names(f, "dtypes", m->dtypes, dtype_names, NELEM(dtype_names));
  if (m->redops) write_names(f, "redops", m->redops, redop_names, NELEM(redop_names));
}

/* See plan_json.h. */
ncclResult_t brd_plan_json_write(const brd_ir_plan_t *p, const brd_plan_json_meta_t *meta,
                                 FILE *f) {
  if (p->coll >= BRD_IR_COLL_COUNT || p->algo >= NELEM(algo_names) ||
      p->proto >= NELEM(proto_names) || (p->flags & ~BRD_IR_PLAN_F_ALL)) {
    WARN("plan JSON export: header (coll %u, algo %u, proto %u, flags 0x%x) "
         "has a value the format does not know", p->coll, p->algo, p->proto,
         p->flags);
    return ncclInvalidArgument;
  }
  fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n", JSON_FORMAT,
          JSON_VERSION);
  fprintf(f, "  \"collective\": \"%s\",\n  \"algo\": \"%s\",\n"
             "  \"proto\": \"%s\",\n",
          coll_names[p->coll], algo_names[p->algo], proto_names[p->proto]);
  fputs("  \"flags\": [", f);
  int first = 1;
  for (size_t i = 0; i < NELEM(plan_flag_names); i++) {
    if (!(p->flags & plan_flag_names[i].bit)) continue;
    fprintf(f, "%s\"%s\"", first ? "" : ", ", plan_flag_names[i].name);
    first = 0;
  }
  fputs("],\n", f);
  fprintf(f, "  \"root\": %u,\n  \"nranks\": %u,\n  \"nblocks\": %u,\n"
             "  \"nchunks\": %u,\n  \"nslots\": %u,\n  \"slot_div\": %u,\n"
             "  \"nsems\": %u,\n  \"seq_per_iter\": %u,\n",
          p->root, p->nranks, p->nblocks, p->nchunks, p->nslots, p->slot_div,
          p->nsems, p->seq_per_iter);
  write_meta(f, meta);
  fputs("  \"ranks\": [", f);
  for (int r = 0; r < p->nranks; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    fprintf(f, "%s\n    {\"rank\": %d,\n     \"chans\": [", r ? "," : "", r);
    for (uint32_t c = 0; c < rk->nchans; c++) {
      const brd_ir_chan_t *ch = brd_ir_plan_chan(p, r, (int)c);
      if (ch->type >= NELEM(chan_names)) {
        WARN("plan JSON export: rank %d channel %u has type %u, which the "
             "format does not know", r, c, ch->type);
        return ncclInvalidArgument;
      }
      fprintf(f, "%s{\"peer\": %d, \"type\": \"%s\"", c ? ", " : "",
              (int)ch->peer, chan_names[ch->type]);
      /* A switch group other than 0 (device/ir.h: one per node). */
      if (ch->type == BRD_IR_CHAN_SWITCH && ch->group != 0)
        fprintf(f, ", \"group\": %u", (unsigned)ch->group);
      fputc('}', f);
    }
    fputs("],\n     \"blocks\": [", f);
    for (int b = 0; b < p->nblocks; b++) {
      const brd_ir_block_t *blk = brd_ir_plan_block(p, r, b);
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, b);
      fprintf(f, "%s\n       {\"ops\": [", b ? "," : "");
      for (uint32_t i = 0; i < blk->nops; i++) {
        fprintf(f, "%s\n         ", i ? "," : "");
        CHECK(write_op(f, p, r, &ops[i]));
      }
      fputs(blk->nops ? "\n       ]}" : "]}", f);
    }
    fputs("\n     ]}", f);
  }
  fputs("\n  ]\n}\n", f);
  if (fflush(f) != 0 || ferror(f)) {
    WARN("plan JSON export: writing failed: %s", strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ---- JSON reader -------------------------------------------------------------- */

enum {
  J_NULL = BRD_JSON_NULL,
  J_BOOL = BRD_JSON_BOOL,
  J_INT = BRD_JSON_INT,
  J_NUM = BRD_JSON_NUM,
  J_STR = BRD_JSON_STR,
  J_ARR = BRD_JSON_ARR,
  J_OBJ = BRD_JSON_OBJ,
};

typedef brd_json_t jval_t;

typedef struct jctx {
  const char *name; /* file name for messages */
  const char *p, *end, *start;
  char *err;        /* caller's buffer, may be NULL */
  size_t errlen;
  int failed;
  ncclResult_t res;
} jctx_t;

static void jval_fini(jval_t *v) {
  for (size_t i = 0; i < v->n; i++) {
    jval_fini(&v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->s);
}

/* Records the first error: "name: where: what", WARNed once. */
__attribute__((format(printf, 4, 5))) static ncclResult_t
fail(jctx_t *c, ncclResult_t res, const char *where, const char *fmt, ...) {
  if (c->failed) return c->res;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  char msg[512];
  snprintf(msg, sizeof(msg), "%s: %s: %s", c->name, where, what);
  WARN("plan JSON: %s", msg);
  if (c->err && c->errlen) snprintf(c->err, c->errlen, "%s", msg);
  c->failed = 1;
  c->res = res;
  return res;
}

static ncclResult_t syntax(jctx_t *c, const char *what) {
  int line = 1, col = 1;
  for (const char *q = c->start; q < c->p && q < c->end; q++) {
    if (*q == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  char where[JP];
  pathf(where, "line %d column %d", line, col);
  return fail(c, ncclInvalidArgument, where, "malformed JSON: %s", what);
}

static ncclResult_t oom(jctx_t *c) {
  return fail(c, ncclSystemError, "reading", "out of host memory");
}

static void skip_ws(jctx_t *c) {
  while (c->p < c->end &&
         (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

static int hex4(const char *q, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char ch = q[i];
    v <<= 4;
    if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
    else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
    else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

static ncclResult_t parse_string(jctx_t *c, char **out) {
  /* c->p is at the opening quote. The decoded text is never longer. */
  const char *q = c->p + 1;
  size_t cap = 0;
  while (q + cap < c->end && q[cap] != '"') cap += (q[cap] == '\\') ? 2 : 1;
  char *s = malloc(cap + 1), *w = s;
  if (s == NULL) return oom(c);
  c->p++;
  for (;;) {
    if (c->p >= c->end) {
      free(s);
      return syntax(c, "unterminated string");
    }
    unsigned char ch = (unsigned char)*c->p;
    if (ch == '"') break;
    if (ch < 0x20) {
      free(s);
      return syntax(c, "control character in a string");
    }
    if (ch != '\\') {
      *w++ = (char)ch;
      c->p++;
      continue;
    }
    if (c->p + 1 >= c->end) {
      free(s);
      return syntax(c, "unterminated string");
    }
    char e = c->p[1];
    c->p += 2;
    switch (e) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '/': *w++ = '/'; break;
    case 'b': *w++ = '\b'; break;
    case 'f': *w++ = '\f'; break;
    case 'n': *w++ = '\n'; break;
    case 'r': *w++ = '\r'; break;
    case 't': *w++ = '\t'; break;
    case 'u': {
      unsigned u;
      if (c->end - c->p < 4 || hex4(c->p, &u) != 0) {
        free(s);
        return syntax(c, "bad \\u escape");
      }
      c->p += 4;
      /* Only the Basic Multilingual Plane without surrogates: plan names
       * never need more, and 3 UTF-8 bytes fit the 6 escape bytes. */
      if (u >= 0xd800 && u <= 0xdfff) {
        free(s);
        return syntax(c, "surrogate \\u escapes are not supported");
      }
      if (u < 0x80) {
        *w++ = (char)u;
      } else if (u < 0x800) {
        *w++ = (char)(0xc0 | (u >> 6));
        *w++ = (char)(0x80 | (u & 0x3f));
      } else {
        *w++ = (char)(0xe0 | (u >> 12));
        *w++ = (char)(0x80 | ((u >> 6) & 0x3f));
        *w++ = (char)(0x80 | (u & 0x3f));
      }
      break;
    }
    default:
      free(s);
      return syntax(c, "bad escape in a string");
    }
  }
  c->p++;
  *w = '\0';
  *out = s;
  return ncclSuccess;
}

static ncclResult_t parse_number(jctx_t *c, jval_t *v) {
  const char *q = c->p;
  int frac = 0;
  if (q < c->end && *q == '-') q++;
  if (q >= c->end || *q < '0' || *q > '9') return syntax(c, "bad number");
  if (*q == '0' && q + 1 < c->end && q[1] >= '0' && q[1] <= '9')
    return syntax(c, "number with a leading zero");
  while (q < c->end && *q >= '0' && *q <= '9') q++;
  if (q < c->end && *q == '.') {
    frac = 1;
    q++;
    if (q >= c->end || *q < '0' || *q > '9') return syntax(c, "bad number");
    while (q < c->end && *q >= '0' && *q <= '9') q++;
  }
  if (q < c->end && (*q == 'e' || *q == 'E')) {
    frac = 1;
    q++;
    if (q < c->end && (*q == '+' || *q == '-')) q++;
    if (q >= c->end || *q < '0' || *q > '9') return syntax(c, "bad number");
    while (q < c->end && *q >= '0' && *q <= '9') q++;
  }
  v->type = frac ? J_NUM : J_INT;
  if (!frac) {
    /* Digits only: at most 20 characters are meaningful for int64. */
    char buf[32];
    size_t n = (size_t)(q - c->p);
    if (n >= sizeof(buf)) {
      v->type = J_NUM; /* out of range: reported by the schema check */
    } else {
      memcpy(buf, c->p, n);
      buf[n] = '\0';
      errno = 0;
      v->i = strtoll(buf, NULL, 10);
      if (errno == ERANGE) v->type = J_NUM;
    }
  }
  c->p = q;
  return ncclSuccess;
}

static ncclResult_t parse_value(jctx_t *c, jval_t *v, int depth);

static ncclResult_t push(jctx_t *c, jval_t *v, char *key, jval_t **slot_out) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    jval_t *k = realloc(v->kids, cap * sizeof(*k));
    if (k == NULL) return oom(c);
    v->kids = k;
    if (v->type == J_OBJ) {
      char **ks = realloc(v->keys, cap * sizeof(*ks));
      if (ks == NULL) return oom(c);
      v->keys = ks;
    }
    v->cap = cap;
  }
  memset(&v->kids[v->n], 0, sizeof(jval_t));
  if (v->type == J_OBJ) v->keys[v->n] = key;
  *slot_out = &v->kids[v->n++];
  return ncclSuccess;
}

static ncclResult_t parse_container(jctx_t *c, jval_t *v, int depth) {
  int obj = *c->p == '{';
  char close = obj ? '}' : ']';
  v->type = obj ? J_OBJ : J_ARR;
  c->p++;
  skip_ws(c);
  if (c->p < c->end && *c->p == close) {
    c->p++;
    return ncclSuccess;
  }
  for (;;) {
    char *key = NULL;
    jval_t *slot = NULL;
    skip_ws(c);
    if (obj) {
      if (c->p >= c->end || *c->p != '"') return syntax(c, "expected a key");
      CHECK(parse_string(c, &key));
      for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->keys[i], key) == 0) {
          free(key);
          return syntax(c, "duplicate key");
        }
      }
      skip_ws(c);
      if (c->p >= c->end || *c->p != ':') {
        free(key);
        return syntax(c, "expected ':'");
      }
      c->p++;
    }
    if (push(c, v, key, &slot) != ncclSuccess) {
      free(key);
      return c->res;
    }
    CHECK(parse_value(c, slot, depth + 1));
    skip_ws(c);
    if (c->p < c->end && *c->p == ',') {
      c->p++;
      continue;
    }
    if (c->p < c->end && *c->p == close) {
      c->p++;
      return ncclSuccess;
    }
    return syntax(c, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int literal(jctx_t *c, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
  c->p += n;
  return 1;
}

static ncclResult_t parse_value(jctx_t *c, jval_t *v, int depth) {
  if (depth > JSON_MAX_DEPTH) return syntax(c, "nested too deeply");
  skip_ws(c);
  if (c->p >= c->end) return syntax(c, "unexpected end of input");
  switch (*c->p) {
  case '{':
  case '[': return parse_container(c, v, depth);
  case '"': v->type = J_STR; return parse_string(c, &v->s);
  case 't':
  case 'f':
  case 'n':
    if (literal(c, "true")) {
      v->type = J_BOOL;
      v->i = 1;
    } else if (literal(c, "false")) {
      v->type = J_BOOL;
    } else if (literal(c, "null")) {
      v->type = J_NULL;
    } else {
      return syntax(c, "unknown literal");
    }
    return ncclSuccess;
  default:
    if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) return parse_number(c, v);
    return syntax(c, "unexpected character");
  }
}

/* ---- schema ------------------------------------------------------------------ */

static const char *type_name(int t) {
  static const char *const n[] = {"null",   "a boolean", "an integer", "a number",
                                  "a string", "an array", "an object"};
  return n[t];
}

static const jval_t *obj_get(const jval_t *o, const char *key) {
  for (size_t i = 0; i < o->n; i++)
    if (strcmp(o->keys[i], key) == 0) return &o->kids[i];
  return NULL;
}

/* Every key of object o is one of keys[] (a typo is an error, not a
 * silently ignored field). */
static ncclResult_t obj_keys(jctx_t *c, const char *path, const jval_t *o,
                             const char *const *keys, size_t nkeys) {
  for (size_t i = 0; i < o->n; i++) {
    if (name_find(o->keys[i], keys, nkeys) < 0)
      return fail(c, ncclInvalidArgument, path, "unknown field \"%s\"",
                  o->keys[i]);
  }
  return ncclSuccess;
}

static ncclResult_t want(jctx_t *c, const char *path, const jval_t *v, int type) {
  if (v->type != type)
    return fail(c, ncclInvalidArgument, path, "is %s, expected %s",
                type_name(v->type), type_name(type));
  return ncclSuccess;
}

/* Field `key` of o as an integer in [lo, hi]; absent gives def, or an
 * error when required. */
static ncclResult_t get_int(jctx_t *c, const char *path, const jval_t *o,
                            const char *key, int required, int64_t def,
                            int64_t lo, int64_t hi, int64_t *out) {
  char where[JP];
  pathf(where, "%s%s%s", path, *path ? "." : "", key);
  const jval_t *v = obj_get(o, key);
  if (v == NULL) {
    if (required) return fail(c, ncclInvalidArgument, where, "missing field");
    *out = def;
    return ncclSuccess;
  }
  CHECK(want(c, where, v, J_INT));
  if (v->i < lo || v->i > hi)
    return fail(c, ncclInvalidArgument, where,
                "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", v->i,
                lo, hi);
  *out = v->i;
  return ncclSuccess;
}

/* Field `key` of o as one of names[]; absent gives def or an error. */
static ncclResult_t get_name(jctx_t *c, const char *path, const jval_t *o,
                             const char *key, int required, int def,
                             const char *const *names, size_t nnames, int *out) {
  char where[JP];
  pathf(where, "%s%s%s", path, *path ? "." : "", key);
  const jval_t *v = obj_get(o, key);
  if (v == NULL) {
    if (required) return fail(c, ncclInvalidArgument, where, "missing field");
    *out = def;
    return ncclSuccess;
  }
  CHECK(want(c, where, v, J_STR));
  int i = name_find(v->s, names, nnames);
  if (i < 0) {
    char list[256];
    size_t off = 0;
    for (size_t k = 0; k < nnames && off < sizeof(list); k++)
      off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s",
                              k ? ", " : "", names[k]);
    return fail(c, ncclInvalidArgument, where, "unknown name \"%s\" (one of: %s)",
                v->s, list);
  }
  *out = i;
  return ncclSuccess;
}

/* Field `key` of o as an array (required), its length in [lo, hi]. */
static ncclResult_t get_arr(jctx_t *c, const char *path, const jval_t *o,
                            const char *key, size_t lo, size_t hi,
                            const jval_t **out) {
  char where[JP];
  pathf(where, "%s%s%s", path, *path ? "." : "", key);
  const jval_t *v = obj_get(o, key);
  if (v == NULL) return fail(c, ncclInvalidArgument, where, "missing field");
  CHECK(want(c, where, v, J_ARR));
  if (v->n < lo || v->n > hi)
    return lo == hi ? fail(c, ncclInvalidArgument, where,
                           "has %zu entries, expected %zu", v->n, lo)
                    : fail(c, ncclInvalidArgument, where,
                           "has %zu entries, expected %zu to %zu", v->n, lo, hi);
  *out = v;
  return ncclSuccess;
}

/* A flags array: each entry one of names (bits[i]), or-ed into *out. */
static ncclResult_t get_flags(jctx_t *c, const char *path, const jval_t *o,
                              const char *const *names, const uint8_t *bits,
                              size_t n, uint8_t *out) {
  char where[JP];
  pathf(where, "%s%sflags", path, *path ? "." : "");
  const jval_t *v = obj_get(o, "flags");
  *out = 0;
  if (v == NULL) return ncclSuccess;
  CHECK(want(c, where, v, J_ARR));
  for (size_t i = 0; i < v->n; i++) {
    char w2[JP];
    pathf(w2, "%s[%zu]", where, i);
    CHECK(want(c, w2, &v->kids[i], J_STR));
    int k = name_find(v->kids[i].s, names, n);
    if (k < 0)
      return fail(c, ncclInvalidArgument, w2, "unknown flag \"%s\"",
                  v->kids[i].s);
    *out |= bits[k];
  }
  return ncclSuccess;
}

/* What the schema check needs of the header while reading ops. */
typedef struct shape_ctx {
  brd_plan_shape_t shape;
  uint32_t io_limit;       /* input/output indices below this */
  const uint32_t *nchans;  /* [nranks] */
  const int32_t *peer0;    /* [sum nchans]: peers, by rank's chan_first */
  const uint32_t *chan_first;
} shape_ctx_t;

static ncclResult_t read_ref(jctx_t *c, const shape_ctx_t *s, int rank,
                             const char *path, const jval_t *v, uint32_t span,
                             brd_ir_ref_t *out) {
  static const char *const keys[] = {"buf", "ll", "chan", "peer", "index"};
  int64_t chan, peer, index;
  int kind;
  CHECK(want(c, path, v, J_OBJ));
  CHECK(obj_keys(c, path, v, keys, NELEM(keys)));
  CHECK(get_name(c, path, v, "buf", 1, 0, buf_names, NELEM(buf_names), &kind));
  const jval_t *ll = obj_get(v, "ll");
  int is_ll = 0;
  char where[JP];
  if (ll != NULL) {
    pathf(where, "%s.ll", path);
    CHECK(want(c, where, ll, J_BOOL));
    is_ll = (int)ll->i;
  }
  pathf(where, "%s.chan", path);
  /* Absent: this rank's own buffer. */
  CHECK(get_int(c, path, v, "chan", 0, -1, 0, BRD_IR_CHAN_LOCAL - 1, &chan));
  if (chan >= 0 && (uint32_t)chan >= s->nchans[rank])
    return fail(c, ncclInvalidArgument, where,
                "channel %" PRId64 " but rank %d has %u channels", chan, rank,
                s->nchans[rank]);
  CHECK(get_int(c, path, v, "peer", 0, -1, -1, s->shape.nranks - 1, &peer));
  if (obj_get(v, "peer") != NULL) {
    int32_t actual = chan < 0 ? -1 : s->peer0[s->chan_first[rank] + (uint32_t)chan];
    if (peer != actual) {
      pathf(where, "%s.peer", path);
      return fail(c, ncclInvalidArgument, where,
                  chan < 0 ? "peer %" PRId64 " given for a local reference "
                             "(no \"chan\"); add the channel's index"
                           : "peer %" PRId64 " does not match channel's peer %d",
                  peer, (int)actual);
    }
  }
  uint32_t limit;
  const char *what;
  switch (kind) {
  case BRD_IR_BUF_INPUT:
  case BRD_IR_BUF_OUTPUT: limit = s->io_limit; what = "chunks (segments x nchunks)"; break;
  case BRD_IR_BUF_SCRATCH: limit = s->shape.nslots; what = "scratch slots (nslots)"; break;
  default: limit = s->shape.nsems; what = "semaphores per channel (nsems)"; span = 1; break;
  }
  CHECK(get_int(c, path, v, "index", 1, 0, 0, 0xffff, &index));
  if ((uint64_t)index + span > limit) {
    pathf(where, "%s.index", path);
    return fail(c, ncclInvalidArgument, where,
                "%" PRId64 "%s is out of range: the plan has %u %s", index,
                span > 1 ? " (plus the op's further chunks)" : "", limit, what);
  }
  out->buf = (uint8_t)(kind | (is_ll ? BRD_IR_REF_LL : 0));
  out->chan = chan < 0 ? BRD_IR_CHAN_LOCAL : (uint8_t)chan;
  out->index = (uint16_t)index;
  return ncclSuccess;
}

static ncclResult_t read_op(jctx_t *c, const shape_ctx_t *s, int rank,
                            const char *path, const jval_t *v, brd_ir_op_t *op) {
  static const char *const keys[] = {"op",  "flags", "chunk", "nchunks", "k",
                                     "k_src", "nsrc", "ndst",  "refs"};
  static const char *const fnames[] = {"postop"};
  static const uint8_t fbits[] = {BRD_IR_F_POSTOP};
  int code;
  int64_t chunk, nchunks, k, k_src, nsrc, ndst;
  memset(op, 0, sizeof(*op));
  CHECK(want(c, path, v, J_OBJ));
  CHECK(obj_keys(c, path, v, keys, NELEM(keys)));
  CHECK(get_name(c, path, v, "op", 1, 0, op_names, NELEM(op_names), &code));
  CHECK(get_flags(c, path, v, fnames, fbits, NELEM(fnames), &op->flags));
  CHECK(get_int(c, path, v, "chunk", 0, 0, 0, (int64_t)s->shape.nchunks - 1, &chunk));
  CHECK(get_int(c, path, v, "nchunks", 0, 0, 0, s->shape.nchunks, &nchunks));
  if (chunk + (nchunks ? nchunks : 1) > (int64_t)s->shape.nchunks) {
    char where[JP];
    pathf(where, "%s.nchunks", path);
    return fail(c, ncclInvalidArgument, where,
                "chunks %" PRId64 "..%" PRId64 " run past the plan's %u chunks",
                chunk, chunk + nchunks - 1, s->shape.nchunks);
  }
  CHECK(get_int(c, path, v, "k", 0, 0, INT32_MIN, INT32_MAX, &k));
  CHECK(get_int(c, path, v, "k_src", 0, 0, INT32_MIN, INT32_MAX, &k_src));
  CHECK(get_int(c, path, v, "nsrc", 0, 0, 0, BRD_IR_MAX_REFS, &nsrc));
  CHECK(get_int(c, path, v, "ndst", 0, 0, 0, BRD_IR_MAX_REFS, &ndst));
  const jval_t *refs = obj_get(v, "refs");
  size_t nref = 0;
  char where[JP];
  pathf(where, "%s.refs", path);
  if (refs != NULL) {
    CHECK(want(c, where, refs, J_ARR));
    nref = refs->n;
  }
  if ((int64_t)nref != nsrc + ndst)
    return fail(c, ncclInvalidArgument, refs ? where : path,
                "%zu references for nsrc %" PRId64 " + ndst %" PRId64, nref,
                nsrc, ndst);
  uint32_t span = nchunks ? (uint32_t)nchunks : 1;
  if (!brd_ir_op_is_data((unsigned)code)) span = 1;
  for (size_t i = 0; i < nref; i++) {
    char rp[JP];
    pathf(rp, "%s[%zu]", where, i);
    CHECK(read_ref(c, s, rank, rp, &refs->kids[i], span, &op->ref[i]));
  }
  op->code = (uint8_t)code;
  op->chunk = (uint16_t)chunk;
  op->nchunks = (uint16_t)nchunks;
  op->k = (int32_t)k;
  op->k_src = (int32_t)k_src;
  op->nsrc = (uint8_t)nsrc;
  op->ndst = (uint8_t)ndst;
  return ncclSuccess;
}

/* A name list field (dtypes, redops): absent gives 0 (every one), else a
 * non-empty array of names[] whose bits are or-ed into *out. */
static ncclResult_t get_names(jctx_t *c, const jval_t *o, const char *key,
                              const char *const *names, size_t n, uint32_t *out) {
  const jval_t *v = obj_get(o, key);
  *out = 0;
  if (v == NULL) return ncclSuccess;
  CHECK(want(c, key, v, J_ARR));
  if (v->n == 0)
    return fail(c, ncclInvalidArgument, key,
                "lists nothing; leave the field out to allow every one");
  for (size_t i = 0; i < v->n; i++) {
    char w[JP];
    pathf(w, "%s[%zu]", key, i);
    CHECK(want(c, w, &v->kids[i], J_STR));
    int k = name_find(v->kids[i].s, names, n);
    if (k < 0) {
      char list[256];
      size_t off = 0;
      for (size_t j = 0; j < n && off < sizeof(list); j++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", j ? ", " : "",
                                names[j]);
      return fail(c, ncclInvalidArgument, w, "unknown name \"%s\" (one of: %s)",
                  v->kids[i].s, list);
    }
    *out |= 1u << k;
  }
  return ncclSuccess;
}

/* The library fields (docs/plans.md, "Plan library"). */
static ncclResult_t read_meta(jctx_t *c, const jval_t *root, const brd_plan_shape_t *sh,
                              brd_plan_json_meta_t *m) {
  int64_t lo, hi, rpn;
  memset(m, 0, sizeof(*m));
  CHECK(get_int(c, "", root, "min_bytes", 0, 0, 0, INT64_MAX, &lo));
  CHECK(get_int(c, "", root, "max_bytes", 0, 0, 0, INT64_MAX, &hi));
  if (hi != 0 && hi < lo)
    return fail(c, ncclInvalidArgument, "max_bytes",
                "%" PRId64 " is below min_bytes %" PRId64 " (0 means no limit)", hi, lo);
  CHECK(get_name(c, "", root, "inplace", 0, BRD_PLAN_JSON_INPLACE_ANY, inplace_names,
                 NELEM(inplace_names), &m->inplace));
  /* In place is the same on every rank only where every rank has an
   * input and an output that a call can alias. */
  if (m->inplace != BRD_PLAN_JSON_INPLACE_ANY && sh->coll != BRD_IR_COLL_ALLREDUCE &&
      sh->coll != BRD_IR_COLL_ALLGATHER && sh->coll != BRD_IR_COLL_REDUCESCATTER)
    return fail(c, ncclInvalidArgument, "inplace",
                "\"%s\" is for allreduce, allgather and reducescatter only (a %s plan "
                "must hold in place and out of place: leave the field out)",
                inplace_names[m->inplace], coll_names[sh->coll]);
  CHECK(get_int(c, "", root, "ranks_per_node", 0, 0, 1, sh->nranks, &rpn));
  if (rpn != 0 && sh->nranks % rpn != 0)
    return fail(c, ncclInvalidArgument, "ranks_per_node",
                "%" PRId64 " does not divide nranks %d", rpn, sh->nranks);
  CHECK(get_names(c, root, "dtypes", dtype_names, NELEM(dtype_names), &m->dtypes));
  CHECK(get_names(c, root, "redops", redop_names, NELEM(redop_names), &m->redops));
  if (m->redops != 0 && !brd_ir_coll_traits(sh->coll).reduction)
    return fail(c, ncclInvalidArgument, "redops",
                "a %s plan has no reduction: leave the field out", coll_names[sh->coll]);
  m->min_bytes = (uint64_t)lo;
  m->max_bytes = (uint64_t)hi;
  m->ranks_per_node = (int)rpn;
  return ncclSuccess;
}

static ncclResult_t read_header(jctx_t *c, const jval_t *root,
                                brd_plan_shape_t *sh) {
  static const char *const keys[] = {
      "format",  "version", "collective", "algo",   "proto",
      "flags",   "root",    "nranks",     "nblocks", "nchunks",
      "nslots",  "slot_div", "nsems",     "seq_per_iter", "ranks",
      "min_bytes", "max_bytes", "inplace", "ranks_per_node", "dtypes", "redops"};
  const char *pf[NELEM(plan_flag_names)];
  uint8_t pb[NELEM(plan_flag_names)];
  int64_t version, nranks, nblocks, nchunks, nslots, slot_div, nsems, spi, rt;
  int coll, algo, proto, fmt;
  static const char *const fmts[] = {JSON_FORMAT};
  for (size_t i = 0; i < NELEM(plan_flag_names); i++) {
    pf[i] = plan_flag_names[i].name;
    pb[i] = plan_flag_names[i].bit;
  }
  memset(sh, 0, sizeof(*sh));
  CHECK(want(c, "(document)", root, J_OBJ));
  CHECK(obj_keys(c, "(top level)", root, keys, NELEM(keys)));
  CHECK(get_name(c, "", root, "format", 1, 0, fmts, 1, &fmt));
  CHECK(get_int(c, "", root, "version", 1, 0, JSON_VERSION, JSON_VERSION, &version));
  CHECK(get_name(c, "", root, "collective", 1, 0, coll_names, NELEM(coll_names), &coll));
  CHECK(get_name(c, "", root, "algo", 0, BRD_IR_ALGO_COPY, algo_names,
                 NELEM(algo_names), &algo));
  CHECK(get_name(c, "", root, "proto", 1, 0, proto_names, NELEM(proto_names), &proto));
  CHECK(get_flags(c, "", root, pf, pb, NELEM(pf), &sh->flags));
  CHECK(get_int(c, "", root, "nranks", 1, 0, 1, 65535, &nranks));
  CHECK(get_int(c, "", root, "root", 0, 0, 0, nranks - 1, &rt));
  CHECK(get_int(c, "", root, "nblocks", 1, 0, 1, 65535, &nblocks));
  CHECK(get_int(c, "", root, "nchunks", 1, 0, 1, 65535, &nchunks));
  CHECK(get_int(c, "", root, "nslots", 1, 0, 0, 65535, &nslots));
  CHECK(get_int(c, "", root, "slot_div", 1, 0, nslots ? 1 : 0, UINT32_MAX, &slot_div));
  CHECK(get_int(c, "", root, "nsems", 1, 0, 0, 65536, &nsems));
  CHECK(get_int(c, "", root, "seq_per_iter", 1, 0, 1, UINT32_MAX, &spi));
  sh->nranks = (int)nranks;
  sh->nblocks = (int)nblocks;
  sh->nchunks = (uint32_t)nchunks;
  sh->nslots = (uint32_t)nslots;
  sh->slot_div = (uint32_t)slot_div;
  sh->nsems = (uint32_t)nsems;
  sh->seq_per_iter = (uint32_t)spi;
  sh->proto = (uint8_t)proto;
  sh->algo = (uint8_t)algo;
  sh->coll = (uint8_t)coll;
  sh->root = (uint16_t)rt;
  return ncclSuccess;
}

/* Schema check and conversion of the whole document. */
static ncclResult_t build_plan(jctx_t *c, const jval_t *root,
                               brd_ir_plan_t **plan_out, brd_plan_json_meta_t *meta_out) {
  static const char *const rank_keys[] = {"rank", "chans", "blocks"};
  static const char *const chan_keys[] = {"peer", "type", "group"};
  static const char *const block_keys[] = {"ops"};
  shape_ctx_t s;
  memset(&s, 0, sizeof(s));
  brd_plan_builder_t *b = NULL;
  brd_ir_plan_t *plan = NULL;
  uint32_t *nchans = NULL, *chan_first = NULL;
  int32_t *peers = NULL;
  uint8_t *types = NULL, *groups = NULL;
  const jval_t *ranks;
  ncclResult_t res = ncclSuccess;

  CHECK(read_header(c, root, &s.shape));
  CHECK(read_meta(c, root, &s.shape, meta_out));
  int nranks = s.shape.nranks;
  CHECK(get_arr(c, "", root, "ranks", (size_t)nranks, (size_t)nranks, &ranks));
  brd_ir_coll_traits_t t = brd_ir_coll_traits(s.shape.coll);
  uint32_t nseg = (t.in_segs_all || t.out_segs_all) ? (uint32_t)nranks : 1;
  /* Point-to-point segments are separate buffers: any 16-bit index. */
  s.io_limit = t.has_io ? nseg * s.shape.nchunks : 0x10000u;
  if (s.io_limit > 0x10000u) s.io_limit = 0x10000u;

  /* Pass 1: channel tables, so that refs can be checked against them. */
  size_t total = 0;
  nchans = calloc((size_t)nranks, sizeof(*nchans));
  chan_first = calloc((size_t)nranks, sizeof(*chan_first));
  if (nchans == NULL || chan_first == NULL) {
    res = oom(c);
    goto out;
  }
  for (int r = 0; r < nranks; r++) {
    char rp[JP];
    const jval_t *rk = &ranks->kids[r], *chans;
    int64_t rnum;
    pathf(rp, "ranks[%d]", r);
    CHECK_GOTO(want(c, rp, rk, J_OBJ), res, out);
    CHECK_GOTO(obj_keys(c, rp, rk, rank_keys, NELEM(rank_keys)), res, out);
    CHECK_GOTO(get_int(c, rp, rk, "rank", 0, r, r, r, &rnum), res, out);
    CHECK_GOTO(get_arr(c, rp, rk, "chans", 0, BRD_IR_CHAN_LOCAL, &chans), res, out);
    chan_first[r] = (uint32_t)total;
    nchans[r] = (uint32_t)chans->n;
    total += chans->n;
  }
  peers = malloc((total ? total : 1) * sizeof(*peers));
  types = malloc(total ? total : 1);
  groups = calloc(total ? total : 1, 1);
  if (peers == NULL || types == NULL || groups == NULL) {
    res = oom(c);
    goto out;
  }
  for (int r = 0; r < nranks; r++) {
    const jval_t *chans = obj_get(&ranks->kids[r], "chans");
    for (uint32_t i = 0; i < nchans[r]; i++) {
      char cp[JP];
      const jval_t *ch = &chans->kids[i];
      int64_t peer;
      int type;
      pathf(cp, "ranks[%d].chans[%u]", r, i);
      CHECK_GOTO(want(c, cp, ch, J_OBJ), res, out);
      CHECK_GOTO(obj_keys(c, cp, ch, chan_keys, NELEM(chan_keys)), res, out);
      CHECK_GOTO(get_name(c, cp, ch, "type", 0, BRD_IR_CHAN_MEMORY, chan_names,
                          NELEM(chan_names), &type), res, out);
      /* A switch channel reaches every rank: its peer is BRD_IR_SWITCH_PEER. */
      int sw = type == BRD_IR_CHAN_SWITCH;
      CHECK_GOTO(get_int(c, cp, ch, "peer", 1, 0, sw ? BRD_IR_SWITCH_PEER : 0,
                         sw ? BRD_IR_SWITCH_PEER : nranks - 1, &peer), res, out);
      if (peer == r) {
        res = fail(c, ncclInvalidArgument, cp, "a channel from rank %d to itself", r);
        goto out;
      }
      for (uint32_t j = 0; j < i; j++) {
        if (peers[chan_first[r] + j] == peer) {
          res = fail(c, ncclInvalidArgument, cp,
                     "a second channel to peer %" PRId64 " (channel %u is one)",
                     peer, j);
          goto out;
        }
      }
      int64_t group;
      CHECK_GOTO(get_int(c, cp, ch, "group", 0, 0, 0, sw ? 255 : 0, &group), res, out);
      peers[chan_first[r] + i] = (int32_t)peer;
      types[chan_first[r] + i] = (uint8_t)type;
      groups[chan_first[r] + i] = (uint8_t)group;
    }
  }
  s.nchans = nchans;
  s.chan_first = chan_first;
  s.peer0 = peers;

  CHECK_GOTO(brd_plan_builder_create(&s.shape, &b), res, fail_builder);
  for (int r = 0; r < nranks; r++) {
    for (uint32_t i = 0; i < nchans[r]; i++) {
      uint8_t got;
      int32_t peer = peers[chan_first[r] + i];
      CHECK_GOTO(peer == BRD_IR_SWITCH_PEER
                     ? brd_plan_switch_group(b, r, groups[chan_first[r] + i], &got)
                     : brd_plan_chan_get(b, r, peer, &got),
                 res, fail_builder);
    }
  }

  /* Pass 2: ops. */
  for (int r = 0; r < nranks; r++) {
    char rp[JP];
    const jval_t *blocks;
    pathf(rp, "ranks[%d]", r);
    CHECK_GOTO(get_arr(c, rp, &ranks->kids[r], "blocks", (size_t)s.shape.nblocks,
                       (size_t)s.shape.nblocks, &blocks), res, out);
    for (int bl = 0; bl < s.shape.nblocks; bl++) {
      char bp[JP];
      const jval_t *blk = &blocks->kids[bl], *ops;
      pathf(bp, "ranks[%d].blocks[%d]", r, bl);
      CHECK_GOTO(want(c, bp, blk, J_OBJ), res, out);
      CHECK_GOTO(obj_keys(c, bp, blk, block_keys, NELEM(block_keys)), res, out);
      CHECK_GOTO(get_arr(c, bp, blk, "ops", 0, UINT32_MAX, &ops), res, out);
      for (size_t i = 0; i < ops->n; i++) {
        char opp[JP];
        brd_ir_op_t op;
        pathf(opp, "%s.ops[%zu]", bp, i);
        CHECK_GOTO(read_op(c, &s, r, opp, &ops->kids[i], &op), res, out);
        CHECK_GOTO(brd_plan_op_add(b, r, bl, &op), res, fail_builder);
      }
    }
  }
  CHECK_GOTO(brd_plan_builder_finish(b, &plan), res, fail_builder);
  {
    /* The builder makes memory channels; set the types the file gives. */
    brd_ir_chan_t *ct = (brd_ir_chan_t *)((char *)plan + plan->chan_off);
    for (size_t i = 0; i < total; i++) ct[i].type = types[i];
  }
  *plan_out = plan;
  goto out;

fail_builder:
  /* The builder WARNed already; keep its result and give a location. */
  if (!c->failed) {
    c->failed = 1;
    c->res = res;
    if (c->err && c->errlen)
      snprintf(c->err, c->errlen, "%s: building the plan failed (%s)", c->name,
               ncclGetErrorString(res));
  }
out:
  brd_plan_builder_destroy(b);
  free(nchans);
  free(chan_first);
  free(peers);
  free(types);
  free(groups);
  return res;
}

/* See plan_json.h. */
ncclResult_t brd_plan_json_parse(const char *text, size_t len, const char *name,
                                 brd_ir_plan_t **plan_out,
                                 brd_plan_json_meta_t *meta_out, char *err,
                                 size_t errlen) {
  jctx_t c;
  jval_t root;
  brd_plan_json_meta_t meta;
  ncclResult_t res;
  memset(&c, 0, sizeof(c));
  memset(&root, 0, sizeof(root));
  c.name = name ? name : "(plan)";
  c.start = c.p = text;
  c.end = text + len;
  c.err = err;
  c.errlen = errlen;
  if (err && errlen) err[0] = '\0';
  CHECK_GOTO(parse_value(&c, &root, 0), res, out);
  skip_ws(&c);
  if (c.p != c.end) {
    res = syntax(&c, "text after the document");
    goto out;
  }
  res = build_plan(&c, &root, plan_out, &meta);
  if (res == ncclSuccess && meta_out != NULL) *meta_out = meta;
out:
  jval_fini(&root);
  return res;
}

/* See plan_json.h. */
ncclResult_t brd_json_parse(const char *text, size_t len, const char *name,
                            brd_json_t **root_out, char *err, size_t errlen) {
  jctx_t c;
  ncclResult_t res;
  memset(&c, 0, sizeof(c));
  c.name = name ? name : "(json)";
  c.start = c.p = text;
  c.end = text + len;
  c.err = err;
  c.errlen = errlen;
  if (err && errlen) err[0] = '\0';
  brd_json_t *root = calloc(1, sizeof(*root));
  if (root == NULL) return oom(&c);
  CHECK_GOTO(parse_value(&c, root, 0), res, fail_free);
  skip_ws(&c);
  if (c.p != c.end) {
    res = syntax(&c, "text after the document");
    goto fail_free;
  }
  *root_out = root;
  return ncclSuccess;
fail_free:
  brd_json_free(root);
  return res;
}

/* See plan_json.h. */
void brd_json_free(brd_json_t *root) {
  if (root == NULL) return;
  jval_fini(root);
  free(root);
}

/* See plan_json.h. */
const brd_json_t *brd_json_get(const brd_json_t *obj, const char *key) {
  if (obj == NULL || obj->type != J_OBJ) return NULL;
  return obj_get(obj, key);
}

/* See plan_json.h. */
ncclResult_t brd_plan_json_text_read(const char *path, char **text_out, size_t *len_out,
                                     char *err, size_t errlen) {
  ncclResult_t res = ncclSuccess;
  char *text = NULL;
  size_t len = 0, cap = 0;
  if (err && errlen) err[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    WARN("plan JSON: cannot open %s: %s; check the path", path, strerror(errno));
    if (err && errlen)
      snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return ncclInvalidArgument;
  }
  for (;;) {
    if (len == cap) {
      if (cap >= JSON_MAX_FILE) {
        WARN("plan JSON: %s is larger than %u bytes", path, JSON_MAX_FILE);
        if (err && errlen)
          snprintf(err, errlen, "%s: larger than %u bytes", path, JSON_MAX_FILE);
        res = ncclInvalidArgument;
        goto out;
      }
      size_t ncap = cap ? cap * 2 : 65536;
      char *t = realloc(text, ncap);
      if (t == NULL) {
        WARN("plan JSON: out of host memory reading %s", path);
        res = ncclSystemError;
        goto out;
      }
      text = t;
      cap = ncap;
    }
    size_t n = fread(text + len, 1, cap - len, f);
    len += n;
    if (n == 0) break;
  }
  if (ferror(f)) {
    WARN("plan JSON: reading %s failed: %s", path, strerror(errno));
    if (err && errlen) snprintf(err, errlen, "%s: read failed", path);
    res = ncclSystemError;
    goto out;
  }
  *text_out = text;
  *len_out = len;
  text = NULL;
out:
  free(text);
  fclose(f);
  return res;
}

/* See plan_json.h. */
ncclResult_t brd_plan_json_read(const char *path, brd_ir_plan_t **plan_out,
                                brd_plan_json_meta_t *meta_out, char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  CHECK(brd_plan_json_text_read(path, &text, &len, err, errlen));
  ncclResult_t res = brd_plan_json_parse(text, len, path, plan_out, meta_out, err, errlen);
  free(text);
  return res;
}

/* See plan_json.h. */
ncclResult_t brd_plan_json_load(const char *path, const brd_verify_opts_t *opts,
                                brd_ir_plan_t **plan_out,
                                brd_plan_json_meta_t *meta_out,
                                brd_verify_report_t *report_out, char *err,
                                size_t errlen) {
  ncclResult_t res = ncclSuccess;
  brd_ir_plan_t *plan = NULL;
  brd_plan_json_meta_t meta;
  if (report_out) {
    memset(report_out, 0, sizeof(*report_out));
    report_out->rank = report_out->block = report_out->op = -1;
    report_out->peer = report_out->chunk = -1;
  }
  CHECK(brd_plan_json_read(path, &plan, &meta, err, errlen));
  if (plan->coll == BRD_IR_COLL_SENDRECV) {
    WARN("plan JSON: %s is a point-to-point plan; those are built per launch "
         "from the pairing of sends and receives and cannot be loaded", path);
    if (err && errlen)
      snprintf(err, errlen, "%s: point-to-point plans cannot be loaded", path);
    res = ncclInvalidArgument;
    goto out;
  }
  brd_verify_report_t rep;
  /* A plan meant only for in-place calls is checked in place. */
  brd_verify_opts_t in_place = {1, 0};
  if (opts == NULL && meta.inplace == BRD_PLAN_JSON_INPLACE_YES) opts = &in_place;
  res = brd_plan_verify(plan, opts, &rep);
  if (report_out) *report_out = rep;
  if (res != ncclSuccess) {
    if (err && errlen)
      snprintf(err, errlen, "%s: verifier refused the plan (%s): %s", path,
               brd_plan_verify_kind_name(rep.kind), rep.msg);
    goto out;
  }
  *plan_out = plan;
  if (meta_out != NULL) *meta_out = meta;
  plan = NULL;
out:
  brd_plan_destroy(plan);
  return res;
}
