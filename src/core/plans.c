/*
 * Braid: the plan cache; see plans.h.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "algos/algos.h"
#include "device/redop.h"
#include "core/plans.h"
#include "plan/mscclpp.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "plan/verify.h"

const uint8_t brd_plans_algos[BRD_PLANS_NALGOS] = {BRD_IR_ALGO_RING, BRD_IR_ALGO_TREE,
                                                  BRD_IR_ALGO_ONESHOT, BRD_IR_ALGO_TWOSHOT,
                                                  BRD_IR_ALGO_NVLS, BRD_ALGO_HIER,
                                                  BRD_ALGO_NVLS_TREE};
const uint8_t brd_plans_protos[BRD_PLANS_NPROTOS] = {BRD_IR_PROTO_LL, BRD_IR_PROTO_SIMPLE};

/* See plans.h. The generators' table is constant: each (collective,
 * deterministic) answer is worked out once, by whichever thread asks
 * first (threads racing compute and store the same value), and kept with
 * bit 31 set. Every call asks. */
uint32_t brd_plans_available(uint8_t coll, int det) {
  static uint32_t known[256][2];
  det = det != 0;
  uint32_t avail = __atomic_load_n(&known[coll][det], __ATOMIC_RELAXED);
  if (avail & 0x80000000u) return avail & 0x7fffffffu;
  avail = 0;
  for (int a = 0; a < BRD_PLANS_NALGOS; a++)
    if (brd_algos_available(coll, brd_plans_algos[a], det))
      avail |= BRD_ALGO_BIT(brd_plans_algos[a]);
  __atomic_store_n(&known[coll][det], avail | 0x80000000u, __ATOMIC_RELAXED);
  return avail;
}

/* See plans.h. */
void brd_plans_init(brd_plan_cache_t *c, int nranks) {
  memset(c, 0, sizeof(*c));
  c->nranks = nranks;
}

/* See plans.h. */
void brd_plans_fini(brd_plan_cache_t *c) {
  brd_plans_library_drop(c, -1);
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
  if ((algo & ~BRD_ALGOS_LOWLAT) == BRD_IR_ALGO_NVLS || algo == BRD_ALGO_NVLS_TREE)
    proto = BRD_IR_PROTO_SIMPLE;
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
  for (int i = 0; i < c->nlib; i++)
    if (c->lib[i].plan == plan) {
      c->lib[i].runs++;
      return;
    }
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

/* ---- the plan library ------------------------------------------------------- */

/* See plans.h. */
void brd_plans_library_drop(brd_plan_cache_t *c, int i) {
  if (i < 0) {
    for (int k = 0; k < c->nlib; k++) {
      brd_plan_destroy(c->lib[k].plan);
      free(c->lib[k].path);
    }
    free(c->lib);
    c->lib = NULL;
    c->nlib = 0;
    c->lib_hash = 0;
    return;
  }
  if (i >= c->nlib) return;
  brd_plan_destroy(c->lib[i].plan);
  free(c->lib[i].path);
  memmove(&c->lib[i], &c->lib[i + 1], (size_t)(c->nlib - i - 1) * sizeof(*c->lib));
  c->nlib--;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s != NULL ? s + 1 : path;
}

static const char *const coll_text[BRD_IR_COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce",
    "alltoall",  "gather",    "scatter",       "sendrecv"};

/* Verifies plan the ways meta allows; WARNs naming the file when the
 * verifier refuses it (1), else 0. */
static int library_verify(const char *path, int rank, const brd_ir_plan_t *plan,
                          const brd_plan_json_meta_t *meta) {
  for (int ip = 0; ip < 2; ip++) {
    if ((ip && meta->inplace == BRD_PLAN_JSON_INPLACE_NO) ||
        (!ip && meta->inplace == BRD_PLAN_JSON_INPLACE_YES))
      continue;
    brd_verify_opts_t opts = {ip, 2};
    brd_verify_report_t rep;
    if (brd_plan_verify(plan, &opts, &rep) == ncclSuccess) continue;
    WARN("plan library: rank %d refuses %s: the verifier finds it wrong %s (%s): %s; "
         "it never runs, the built-in plans do (fix the plan, or declare \"inplace\" "
         "if it is meant for one kind of call)", rank, path,
         ip ? "in place" : "out of place", brd_plan_verify_kind_name(rep.kind), rep.msg);
    return 1;
  }
  return 0;
}

/* Blocks per rank of the host backend (core/launch_host.c). */
#define MSCCLPP_HOST_BLOCKS 2

/* Loads one file into the library (or refuses or skips it). */
static ncclResult_t library_file(brd_plan_cache_t *c, const char *path, int rank, int rpn) {
  brd_ir_plan_t *plan = NULL;
  brd_plan_json_meta_t meta;
  char err[640];
  int mscclpp = 0;
  /* An MSCCL++ execution plan is translated (plan/mscclpp.h); any other
   * document is read as Braid's own format. The host executor runs two
   * blocks per rank, so there its thread blocks fold onto two. */
  const char *dev = brd_param_str(BRD_P_BRAID_DEVICE);
  int max_blocks = dev != NULL && strcmp(dev, "host") == 0 ? MSCCLPP_HOST_BLOCKS : 0;
  ncclResult_t res =
      brd_plan_mscclpp_read(path, max_blocks, &mscclpp, &plan, &meta, err, sizeof(err));
  if (res == ncclSuccess && !mscclpp)
    res = brd_plan_json_read(path, &plan, &meta, err, sizeof(err));
  if (res == ncclSystemError) return res;
  if (res != ncclSuccess) {
    /* The reader WARNed with the file and the JSON path. */
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d refuses %s; it never "
         "runs", rank, path);
    return ncclSuccess;
  }
  const char *why = NULL;
  if (plan->nranks != c->nranks) {
    INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d skips %s: a plan of "
         "%u ranks, the communicator has %d", rank, path, (unsigned)plan->nranks, c->nranks);
    goto drop;
  }
  if (meta.ranks_per_node != 0 && meta.ranks_per_node != rpn) {
    if (rpn > 0)
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d skips %s: it is for "
           "%d ranks per node, the communicator has %d", rank, path, meta.ranks_per_node,
           rpn);
    else
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d skips %s: it is for "
           "%d ranks per node, the communicator's nodes hold different numbers", rank, path,
           meta.ranks_per_node);
    goto drop;
  }
  if (plan->coll == BRD_IR_COLL_SENDRECV)
    why = "a point-to-point plan (those are built per launch from its sends and receives)";
  else if (plan->proto != BRD_IR_PROTO_SIMPLE && plan->proto != BRD_IR_PROTO_LL)
    why = "protocol LL128 has no executor; use LL or Simple";
  else if (plan->flags & BRD_IR_PLAN_F_PEER_INPUT)
    why = "it reads peers' inputs (peer_input), which only registered buffers allow";
  else if (plan->flags & BRD_IR_PLAN_F_ONE_SIDED)
    why = "a one-sided plan";
  if (why != NULL) {
    WARN("plan library: rank %d refuses %s: %s; it never runs", rank, path, why);
    goto drop;
  }
  if (library_verify(path, rank, plan, &meta)) goto drop;
  brd_plan_user_t *grown = realloc(c->lib, (size_t)(c->nlib + 1) * sizeof(*c->lib));
  char *copy = strdup(path);
  if (grown != NULL) c->lib = grown;
  if (grown == NULL || copy == NULL) {
    free(copy);
    WARN("out of host memory loading the plan library (%s)", path);
    brd_plan_destroy(plan);
    return ncclSystemError;
  }
  brd_plan_user_t *u = &c->lib[c->nlib++];
  u->path = copy;
  u->plan = plan;
  u->meta = meta;
  u->runs = 0;
  char range[64];
  if (meta.max_bytes)
    snprintf(range, sizeof(range), "%" PRIu64 " to %" PRIu64 " bytes", meta.min_bytes,
             meta.max_bytes);
  else
    snprintf(range, sizeof(range), "from %" PRIu64 " bytes", meta.min_bytes);
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "plan library: rank %d loaded %s (%s%s, %u ranks, "
       "%u blocks, %s, %s%s)", rank, path, mscclpp ? "MSCCL++ plan, " : "", coll_text[plan->coll],
       (unsigned)plan->nranks,
       (unsigned)plan->nblocks, plan->proto == BRD_IR_PROTO_LL ? "LL" : "Simple", range,
       meta.inplace == BRD_PLAN_JSON_INPLACE_YES  ? ", in place only"
       : meta.inplace == BRD_PLAN_JSON_INPLACE_NO ? ", out of place only"
                                                  : "");
  return ncclSuccess;
drop:
  brd_plan_destroy(plan);
  return ncclSuccess;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads the *.json files of one directory, by name. */
static ncclResult_t library_dir(brd_plan_cache_t *c, const char *dir, int rank, int rpn) {
  ncclResult_t res = ncclSuccess;
  char **names = NULL;
  size_t n = 0, cap = 0;
  DIR *d = opendir(dir);
  if (d == NULL) {
    WARN("plan library: rank %d cannot open BRAID_PLAN_DIR directory %s: %s; check the "
         "path", rank, dir, strerror(errno));
    return ncclSuccess;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0 || e->d_name[0] == '.') continue;
    if (n == cap) {
      size_t ncap = cap ? 2 * cap : 16;
      char **g = realloc(names, ncap * sizeof(*names));
      if (g == NULL) goto oom;
      names = g;
      cap = ncap;
    }
    size_t plen = strlen(dir) + 1 + len + 1;
    names[n] = malloc(plen);
    if (names[n] == NULL) goto oom;
    snprintf(names[n], plen, "%s/%s", dir, e->d_name);
    n++;
  }
  qsort(names, n, sizeof(*names), name_cmp);
  for (size_t i = 0; i < n && res == ncclSuccess; i++) res = library_file(c, names[i], rank, rpn);
  goto out;
oom:
  WARN("out of host memory listing the plan library directory %s", dir);
  res = ncclSystemError;
out:
  closedir(d);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return res;
}

/* See plans.h. */
ncclResult_t brd_plans_library_load(brd_plan_cache_t *c, const char *dirs, int rank, int rpn) {
  brd_plans_library_drop(c, -1);
  if (dirs == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  const char *p = dirs;
  while (*p != '\0' && res == ncclSuccess) {
    size_t len = strcspn(p, ":");
    if (len > 0) {
      char *dir = strndup(p, len);
      if (dir == NULL) {
        WARN("out of host memory reading BRAID_PLAN_DIR");
        res = ncclSystemError;
        break;
      }
      res = library_dir(c, dir, rank, rpn);
      free(dir);
    }
    p += len;
    if (*p == ':') p++;
  }
  if (res != ncclSuccess) {
    brd_plans_library_drop(c, -1);
    return res;
  }
  /* What every rank must have loaded alike: names, fields and plans. */
  uint64_t h = 0;
  if (c->nlib > 0) {
    h = 0xcbf29ce484222325ull;
    for (int i = 0; i < c->nlib; i++) {
      const brd_plan_user_t *u = &c->lib[i];
      const char *b = base_name(u->path);
      const brd_plan_json_meta_t *m = &u->meta;
      uint64_t f[6] = {m->min_bytes, m->max_bytes, (uint64_t)m->inplace,
                       (uint64_t)m->ranks_per_node, m->dtypes, m->redops};
      h = fnv(h, b, strlen(b) + 1);
      h = fnv(h, f, sizeof(f));
      h = fnv(h, u->plan, u->plan->total_bytes);
    }
    if (h == 0) h = 1;
  }
  c->lib_hash = h;
  return ncclSuccess;
}

/* See plans.h. */
brd_plan_user_t *brd_plans_library_match(brd_plan_cache_t *c, const brd_plans_call_t *k) {
  for (int i = 0; i < c->nlib; i++) {
    brd_plan_user_t *u = &c->lib[i];
    const brd_plan_json_meta_t *m = &u->meta;
    const brd_ir_plan_t *p = u->plan;
    if (p->coll != k->coll || k->bytes < m->min_bytes ||
        (m->max_bytes != 0 && k->bytes > m->max_bytes))
      continue;
    if (brd_ir_coll_traits(k->coll).rooted && p->root != k->root) continue;
    if ((m->inplace == BRD_PLAN_JSON_INPLACE_YES && !k->in_place) ||
        (m->inplace == BRD_PLAN_JSON_INPLACE_NO && k->in_place))
      continue;
    if (m->dtypes != 0 && (k->dtype < 0 || k->dtype >= 32 || !(m->dtypes & (1u << k->dtype))))
      continue;
    int red = brd_ir_coll_traits(k->coll).reduction;
    if (red && m->redops != 0 &&
        (k->redop < 0 || k->redop >= 32 || !(m->redops & (1u << k->redop))))
      continue;
    int sw = 0;
    for (int r = 0; r < p->nranks && !sw; r++)
      for (uint32_t ch = 0; ch < brd_ir_plan_rank(p, r)->nchans; ch++)
        sw |= brd_ir_plan_chan(p, r, (int)ch)->type == BRD_IR_CHAN_SWITCH;
    if (sw && !brd_algos_nvls_supported(k->coll, k->dtype,
                                        red ? (k->redop == BRD_PLAN_JSON_REDOP_PREMULSUM
                                                   ? BRD_REDOP_PREMULSUM
                                                   : k->redop)
                                            : ncclSum))
      continue;
    return u;
  }
  return NULL;
}
