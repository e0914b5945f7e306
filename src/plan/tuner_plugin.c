/*
 * Braid: the tuner plugin loader, the per-version calls, and the choice
 * from NCCL's cost table (tuner_plugin.h).
 *
 * One library per process (NCCL's rule), counted by the communicators
 * holding a context; the exported table is the plugin's and is read at
 * each call (only name and init are needed to accept it).
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "nccl_tuner.h"
#include "plan/tuner_plugin.h"
#include "base/plugin.h"
#include "transport/net.h"
#include "transport/net_plugin.h"

#define SUBSYS (BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING)
#define OLDEST 2
#define NEWEST 6
#define BASE_LATENCY_US 5.0 /* Braid's per-call base cost (tune.c) */

/* NCCL's table index -> Braid's algorithm, and protocols both ways. */
static const brd_algo_t algo_of_nccl[NCCL_NUM_ALGORITHMS] = {
    [NCCL_ALGO_TREE] = BRD_ALGO_TREE,
    [NCCL_ALGO_RING] = BRD_ALGO_RING,
    [NCCL_ALGO_COLLNET_DIRECT] = BRD_ALGO_COLLNET_DIRECT,
    [NCCL_ALGO_COLLNET_CHAIN] = BRD_ALGO_COLLNET_CHAIN,
    [NCCL_ALGO_NVLS] = BRD_ALGO_NVLS,
    [NCCL_ALGO_NVLS_TREE] = BRD_ALGO_NVLS_TREE,
    [NCCL_ALGO_PAT] = BRD_ALGO_PAT,
};
static const brd_proto_t proto_of_nccl[NCCL_NUM_PROTOCOLS] = {
    [NCCL_PROTO_LL] = BRD_PROTO_LL,
    [NCCL_PROTO_LL128] = BRD_PROTO_LL128,
    [NCCL_PROTO_SIMPLE] = BRD_PROTO_SIMPLE,
};

typedef union {
  ncclTuner_v2_t v2;
  ncclTuner_v3_t v3;
  ncclTuner_v4_t v4;
  ncclTuner_v5_t v5;
  ncclTuner_v6_t v6;
} any_tuner_t;


/* The process's library: one per process, shared by the communicators. */
static brd_plugin_lib_t lib = BRD_PLUGIN_LIB_INIT; /* sym: an any_tuner_t */
static char lib_name[128];
static char lib_path[PATH_MAX];

struct brd_tuner {
  void *ctx;                         /* the plugin's context, the plugin's */
  const any_tuner_t *sym;            /* lib.sym, valid while this holds a reference */
  int version;
  int warned;                        /* a getCollInfo error was WARNed */
  int warned_unoffered;              /* a pick of a pair Braid lacks was logged */
  ncclNvlDomainInfo_v6_t nvl;
  ncclTunerConstants_v6_t constants; /* the full 1152 bytes, rewritable by init */
};

static ncclDebugLogger_t logger(void) {
  /* brd_net_log has the logger's exact prototype but for the level's
   * type (int for the enum): one ABI, two C spellings. */
  return (ncclDebugLogger_t)(void (*)(void))brd_net_log;
}

static const char *res_text(ncclResult_t r) { return ncclGetErrorString(r); }


/* Whether an ncclTunerPlugin_vN table has a name and an init. */
static int usable(const void *table) {
  const any_tuner_t *sym = table;
  return sym->v2.name != NULL && sym->v2.init != NULL;
}

/* Loads the library (brd_plugin_lib_acquire's load): 1 when it did. */
static int load(brd_plugin_lib_t *l) {
  brd_plugin_found_t f;
  int none;
  const char *spec = brd_plugin_spec("NCCL_TUNER_PLUGIN", brd_param_str(BRD_P_TUNER_PLUGIN),
                                     BRD_SUBSYS_ENV | BRD_SUBSYS_TUNING, &none);
  int requested = spec != NULL;
  if (none) return 0;
  /* NCCL looks for a tuner inside the net plugin's library next. */
  void *dl = brd_net_plugin_open_other(spec, "tuner", "TUNER/Plugin", SUBSYS, &f);
  if (dl == NULL) {
    if (requested)
      WARN("TUNER/Plugin: cannot load NCCL_TUNER_PLUGIN=%s: could not find%s%s%s (and no "
           "tuner in the net plugin library). Give NCCL_TUNER_PLUGIN a path, put the library "
           "on LD_LIBRARY_PATH, or set NCCL_TUNER_PLUGIN=none; Braid tunes by itself",
           spec, f.missing[0] ? f.missing : " it", f.err[0] ? ": " : "", f.err);
    else
      INFO(SUBSYS, "TUNER/Plugin: no tuner plugin (optional); Braid tunes by itself");
    return 0;
  }
  snprintf(lib_path, sizeof(lib_path), "%s", f.path);
  int version = 0;
  const any_tuner_t *sym =
      brd_plugin_find_versioned(dl, "ncclTunerPlugin_v", NEWEST, OLDEST, usable, &version);
  if (sym == NULL) {
    if (!f.in_net && requested)
      WARN("External tuner plugin %s is unsupported: it exports no usable "
           "ncclTunerPlugin_v%d .. v%d (Braid loads those versions); Braid tunes by itself",
           lib_path, OLDEST, NEWEST);
    else
      INFO(SUBSYS, "TUNER/Plugin: %s exports no ncclTunerPlugin_v%d .. v%d", lib_path,
           OLDEST, NEWEST);
    dlclose(dl);
    return 0;
  }
  l->dl = dl;
  l->sym = sym;
  l->version = version;
  snprintf(lib_name, sizeof(lib_name), "%s", sym->v2.name);
  INFO(SUBSYS, "TUNER/Plugin: Using %s (v%d)", lib_name, version);
  INFO(SUBSYS, "Successfully loaded external tuner plugin %s", lib_path);
  return 1;
}

/* Logs the closing of the library (brd_plugin_lib_release). */
static void on_close(void) {
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_TUNING, "TUNER/Plugin: Closing tuner: '%s'", lib_name);
}

ncclResult_t brd_tuner_create(const brd_tuner_comm_t *comm, brd_tuner_t **out) {
  *out = NULL;
  if (!brd_plugin_lib_acquire(&lib, load)) return ncclSuccess;

  brd_tuner_t *t = calloc(1, sizeof(*t));
  if (t == NULL) {
    WARN("out of host memory creating the tuner plugin's context");
    brd_plugin_lib_release(&lib, on_close);
    return ncclSystemError;
  }
  t->sym = lib.sym;
  t->version = lib.version;
  t->nvl.nNvlDomains = comm->nvl_domains;
  t->nvl.minRanksPerNvlDomain = comm->min_per_domain;
  t->nvl.maxRanksPerNvlDomain = comm->max_per_domain;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) t->constants.baseLatencies[a][p] = BASE_LATENCY_US;

  ncclResult_t r;
  size_t nr = (size_t)comm->nranks, nn = (size_t)comm->nnodes;
  switch (t->version) {
  case 2: r = t->sym->v2.init(nr, nn, logger(), &t->ctx); break;
  case 3: r = t->sym->v3.init(nr, nn, logger(), &t->ctx); break;
  case 4: r = t->sym->v4.init(nr, nn, logger(), &t->ctx); break;
  case 5:
    r = t->sym->v5.init(&t->ctx, comm->comm_id, nr, nn, logger(), &t->nvl, &t->constants);
    break;
  default:
    r = t->sym->v6.init(&t->ctx, comm->comm_id, nr, nn, logger(), &t->nvl, &t->constants);
    break;
  }
  if (r != ncclSuccess) {
    WARN("TUNER/Plugin: %s (v%d) init failed: %s (for %d ranks on %d nodes); this "
         "communicator uses Braid's own tuning. See the plugin's messages above, or set "
         "NCCL_TUNER_PLUGIN=none", lib_name, t->version, res_text(r), comm->nranks,
         comm->nnodes);
    free(t);
    brd_plugin_lib_release(&lib, on_close);
    return ncclSuccess;
  }
  *out = t;
  return ncclSuccess;
}

void brd_tuner_destroy(brd_tuner_t *t) {
  if (t == NULL) return;
  ncclResult_t r;
  switch (t->version) {
  case 2: r = t->sym->v2.destroy ? t->sym->v2.destroy(t->ctx) : ncclSuccess; break;
  case 3: r = t->sym->v3.destroy ? t->sym->v3.destroy(t->ctx) : ncclSuccess; break;
  case 4: r = t->sym->v4.destroy ? t->sym->v4.destroy(t->ctx) : ncclSuccess; break;
  case 5: r = t->sym->v5.finalize ? t->sym->v5.finalize(t->ctx) : ncclSuccess; break;
  default: r = t->sym->v6.finalize ? t->sym->v6.finalize(t->ctx) : ncclSuccess; break;
  }
  if (r != ncclSuccess)
    WARN("TUNER/Plugin: %s (v%d) %s failed: %s (ignored: the communicator is going away)",
         lib_name, t->version, t->version < 5 ? "destroy" : "finalize", res_text(r));
  free(t);
  brd_plugin_lib_release(&lib, on_close);
}

const char *brd_tuner_name(const brd_tuner_t *t) { return t != NULL ? t->sym->v2.name : ""; }
int brd_tuner_version(const brd_tuner_t *t) { return t != NULL ? t->version : 0; }

void brd_tuner_reset(void) {
  brd_plugin_lib_reset(&lib);
}

/* NCCL's number for the collectives it tunes; -1 for the others. */
static int func_of(brd_coll_t coll) {
  int func = brd_coll_nccl_func(coll);
  return func <= ncclFuncAllReduce ? func : -1;
}

/* The version's getCollInfo, with v2's pair turned into a 0.0 entry as
 * NCCL's adapter does. */
static ncclResult_t call_plugin(brd_tuner_t *t, ncclFunc_t func, size_t bytes, int pipe_ops,
                                float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS],
                                int reg_buff, int *nch) {
  float **as_nccl = (float **)(void *)table; /* NCCL's cast: one contiguous block */
  switch (t->version) {
  case 2: {
    int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
    int nvls = table[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE ||
               table[NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE;
    int collnet = table[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE;
    if (t->sym->v2.getCollInfo == NULL) return ncclInternalError;
    ncclResult_t r = t->sym->v2.getCollInfo(t->ctx, func, bytes, collnet, nvls, pipe_ops,
                                            &algo, &proto, nch);
    if (r != ncclSuccess) return r;
    if (algo >= 0 && algo < NCCL_NUM_ALGORITHMS && proto >= 0 && proto < NCCL_NUM_PROTOCOLS &&
        table[algo][proto] != NCCL_ALGO_PROTO_IGNORE)
      table[algo][proto] = 0.0f;
    return ncclSuccess;
  }
  case 3:
    if (t->sym->v3.getCollInfo == NULL) return ncclInternalError;
    return t->sym->v3.getCollInfo(t->ctx, func, bytes, pipe_ops, as_nccl, NCCL_NUM_ALGORITHMS,
                                  NCCL_NUM_PROTOCOLS, nch);
  case 4:
    if (t->sym->v4.getCollInfo == NULL) return ncclInternalError;
    return t->sym->v4.getCollInfo(t->ctx, func, bytes, pipe_ops, as_nccl, NCCL_NUM_ALGORITHMS,
                                  NCCL_NUM_PROTOCOLS, reg_buff, nch);
  case 5:
    if (t->sym->v5.getCollInfo == NULL) return ncclInternalError;
    return t->sym->v5.getCollInfo(t->ctx, func, bytes, pipe_ops, as_nccl, NCCL_NUM_ALGORITHMS,
                                  NCCL_NUM_PROTOCOLS, reg_buff, nch);
  default:
    if (t->sym->v6.getCollInfo == NULL) return ncclInternalError;
    return t->sym->v6.getCollInfo(t->ctx, func, bytes, pipe_ops, as_nccl, NCCL_NUM_ALGORITHMS,
                                  NCCL_NUM_PROTOCOLS, reg_buff, nch);
  }
}

ncclResult_t brd_tuner_select(brd_tuner_t *t, const brd_tune_topo_t *topo, brd_coll_t coll,
                              size_t bytes, uint32_t available_algos,
                              uint32_t available_protos, const brd_tune_mask_t *mask,
                              int num_pipe_ops, int reg_buff, brd_tune_choice_t *choice_out,
                              int *nchannels_out) {
  *nchannels_out = 0;
  int func = func_of(coll);
  if (t == NULL || func < 0)
    return brd_tune_select(topo, coll, bytes, available_algos, mask, choice_out);

  float costs[BRD_ALGO_COUNT][BRD_PROTO_COUNT];
  CHECK(brd_tune_costs(topo, coll, bytes, available_algos, mask, costs));
  float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], offered[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  int noffered = 0;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
      brd_algo_t ba = algo_of_nccl[a];
      brd_proto_t bp = proto_of_nccl[p];
      float c = (float)NCCL_ALGO_PROTO_IGNORE;
      if ((available_protos & BRD_PROTO_BIT(bp)) != 0 && costs[ba][bp] >= 0.0f) {
        c = costs[ba][bp];
        noffered++;
      }
      table[a][p] = offered[a][p] = c;
    }
  /* Only OneShot/TwoShot can run this call: nothing to ask about. */
  if (noffered == 0)
    return brd_tune_select(topo, coll, bytes, available_algos, mask, choice_out);

  int nch = 0;
  ncclResult_t r = call_plugin(t, (ncclFunc_t)func, bytes, num_pipe_ops, table, reg_buff, &nch);
  if (r != ncclSuccess) {
    if (!t->warned)
      WARN("TUNER/Plugin: %s (v%d) getCollInfo failed for %s of %zu bytes: %s; Braid "
           "chooses by itself (said once per communicator)", brd_tuner_name(t), t->version,
           brd_coll_name(coll), bytes, res_text(r));
    t->warned = 1;
    return brd_tune_select(topo, coll, bytes, available_algos, mask, choice_out);
  }
  if (nch > 0) *nchannels_out = nch;
  if (memcmp(table, offered, sizeof(table)) == 0) {
    /* No opinion: Braid's choice, over every algorithm it has. */
    return brd_tune_select(topo, coll, bytes, available_algos, mask, choice_out);
  }

  int best_a = -1, best_p = -1;
  float best = 0.0f;
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
      float v = table[a][p];
      if (!(v >= 0.0f)) continue; /* ignored, forbidden or NaN */
      if (offered[a][p] < 0.0f) {
        if (!t->warned_unoffered)
          INFO(BRD_SUBSYS_TUNING, "TUNER/Plugin: %s set %s/%s for %s, which Braid cannot run "
               "here; ignoring that entry", brd_tuner_name(t),
               brd_algo_name(algo_of_nccl[a]), brd_proto_name(proto_of_nccl[p]),
               brd_coll_name(coll));
        t->warned_unoffered = 1;
        continue;
      }
      if (best_a < 0 || v < best) {
        best_a = a;
        best_p = p;
        best = v;
      }
    }
  if (best_a < 0) {
    int user = mask->algo_env[0] != '\0' || mask->proto_env[0] != '\0';
    WARN("%s : no algorithm/protocol available for %zu bytes: the tuner plugin %s (v%d) "
         "left no entry of the cost table that can run%s%s%s%s. Fix the plugin's "
         "configuration%s, or set NCCL_TUNER_PLUGIN=none", brd_coll_name(coll), bytes,
         brd_tuner_name(t), t->version, user ? " (NCCL_ALGO=" : "", user ? mask->algo_env : "",
         user ? ", NCCL_PROTO=" : "", user ? mask->proto_env : "",
         user ? " or NCCL_ALGO/NCCL_PROTO" : "");
    return user ? ncclInvalidUsage : ncclInternalError;
  }
  choice_out->algo = algo_of_nccl[best_a];
  choice_out->proto = proto_of_nccl[best_p];
  choice_out->time_us = offered[best_a][best_p];
  INFO(BRD_SUBSYS_TUNING, "%s: %zu Bytes -> Algo %s proto %s time %.2f us (tuner plugin %s, "
       "nChannels %d)", brd_coll_name(coll), bytes, brd_algo_name(choice_out->algo),
       brd_proto_name(choice_out->proto), (double)choice_out->time_us, brd_tuner_name(t), nch);
  return ncclSuccess;
}
