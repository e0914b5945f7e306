/*
 * A test tuner plugin, compiled once per ABI version (-DTUNER_VERSION=N,
 * N = 2 .. 6): it records every call in tunertest_state_vN and does what
 * TUNERTEST_* ask (tuner_test.h). Built against the public headers only.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_tuner.h"
#include "tuner_test.h"

#ifndef TUNER_VERSION
#error "build with -DTUNER_VERSION=N"
#endif

#define EXPORT __attribute__((visibility("default")))
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STATE CAT(tunertest_state_v, TUNER_VERSION)
#define SYM CAT(ncclTunerPlugin_v, TUNER_VERSION)

EXPORT tunertest_state_t STATE;

#define CTX_MAGIC 0x7475ac3e
typedef struct {
  int magic;
} ctx_t;

static int fault(const char *what) {
  const char *f = getenv("TUNERTEST_FAULT");
  return f != NULL && strcmp(f, what) == 0;
}

static ncclResult_t make_ctx(ncclDebugLogger_t log, size_t nranks, size_t nnodes, void **out) {
  __atomic_fetch_add(&STATE.inits, 1, __ATOMIC_RELAXED);
  STATE.nranks = nranks;
  STATE.nnodes = nnodes;
  if (log != NULL) {
    log(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "tuner test v%d: init for %zu ranks",
        TUNER_VERSION, nranks);
    STATE.logged = 1;
  }
  if (fault("init")) return ncclSystemError;
  ctx_t *c = malloc(sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->magic = CTX_MAGIC;
  *out = c;
  return ncclSuccess;
}

static ncclResult_t end_ctx(void *ctx) {
  ctx_t *c = ctx;
  if (c == NULL || c->magic != CTX_MAGIC) {
    __atomic_fetch_add(&STATE.bad_ctx, 1, __ATOMIC_RELAXED);
    return ncclInternalError;
  }
  c->magic = 0;
  free(c);
  __atomic_fetch_add(&STATE.finalizes, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}

static int forced(int *a, int *p) {
  const char *f = getenv("TUNERTEST_FORCE");
  if (f == NULL) return 0;
  char *end;
  *a = (int)strtol(f, &end, 10);
  if (*end != ',') return 0;
  *p = (int)strtol(end + 1, NULL, 10);
  return 1;
}

static void set_nch(int *nch) {
  const char *n = getenv("TUNERTEST_NCHANNELS");
  if (n != NULL) *nch = atoi(n);
}

/* Records one call; returns the error asked for, if any. */
static ncclResult_t record(void *ctx, ncclFunc_t func, size_t bytes, int pipe_ops, int *nch) {
  ctx_t *c = ctx;
  __atomic_fetch_add(&STATE.calls, 1, __ATOMIC_RELAXED);
  if (c == NULL || c->magic != CTX_MAGIC) __atomic_fetch_add(&STATE.bad_ctx, 1, __ATOMIC_RELAXED);
  STATE.func = (int)func;
  STATE.bytes = bytes;
  STATE.pipe_ops = pipe_ops;
  STATE.nch_in = *nch;
  return fault("getcollinfo") ? ncclInternalError : ncclSuccess;
}

#if TUNER_VERSION == 2
static ncclResult_t init_v2(size_t nranks, size_t nnodes, ncclDebugLogger_t log, void **ctx) {
  return make_ctx(log, nranks, nnodes, ctx);
}
static ncclResult_t info_v2(void *ctx, ncclFunc_t func, size_t bytes, int collnet, int nvls,
                            int pipe_ops, int *algo, int *proto, int *nch) {
  ncclResult_t r = record(ctx, func, bytes, pipe_ops, nch);
  STATE.v2_collnet = collnet;
  STATE.v2_nvls = nvls;
  if (r != ncclSuccess) return r;
  int a, p;
  if (forced(&a, &p)) {
    *algo = a;
    *proto = p;
  }
  set_nch(nch);
  return ncclSuccess;
}
EXPORT const ncclTuner_v2_t SYM = {"TunerTest_v2", init_v2, info_v2, end_ctx};

#else
/* v3 .. v6: the cost table, cast back as NCCL passes it. */
static ncclResult_t table_call(void *ctx, ncclFunc_t func, size_t bytes, int pipe_ops,
                               float **cost, int num_algo, int num_proto, int reg_buff,
                               int *nch) {
  ncclResult_t r = record(ctx, func, bytes, pipe_ops, nch);
  STATE.num_algo = num_algo;
  STATE.num_proto = num_proto;
  STATE.reg_buff = reg_buff;
  float (*table)[NCCL_NUM_PROTOCOLS] = (float (*)[NCCL_NUM_PROTOCOLS])cost;
  if (num_algo == NCCL_NUM_ALGORITHMS && num_proto == NCCL_NUM_PROTOCOLS)
    memcpy(STATE.table, table, sizeof(STATE.table));
  if (r != ncclSuccess) return r;
  if (fault("ignore_all")) {
    for (int a = 0; a < num_algo; a++)
      for (int p = 0; p < num_proto; p++) table[a][p] = NCCL_ALGO_PROTO_IGNORE;
    return ncclSuccess;
  }
  int a, p;
  if (forced(&a, &p) && a >= 0 && a < num_algo && p >= 0 && p < num_proto) table[a][p] = 0.0f;
  set_nch(nch);
  return ncclSuccess;
}

#if TUNER_VERSION <= 4
static ncclResult_t init_old(size_t nranks, size_t nnodes, ncclDebugLogger_t log, void **ctx) {
  return make_ctx(log, nranks, nnodes, ctx);
}
#if TUNER_VERSION == 3
static ncclResult_t info_v3(void *ctx, ncclFunc_t func, size_t bytes, int pipe_ops, float **cost,
                            int num_algo, int num_proto, int *nch) {
  return table_call(ctx, func, bytes, pipe_ops, cost, num_algo, num_proto, -1, nch);
}
EXPORT const ncclTuner_v3_t SYM = {"TunerTest_v3", init_old, info_v3, end_ctx};
#else
EXPORT const ncclTuner_v4_t SYM = {"TunerTest_v4", init_old, table_call, end_ctx};
#endif

#else
static ncclResult_t init_new(void **ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                             ncclDebugLogger_t log, ncclNvlDomainInfo_v5_t *nvl,
                             ncclTunerConstants_v5_t *k) {
  STATE.comm_id = comm_id;
  if (nvl != NULL) {
    STATE.nvl[0] = nvl->nNvlDomains;
    STATE.nvl[1] = nvl->minRanksPerNvlDomain;
    STATE.nvl[2] = nvl->maxRanksPerNvlDomain;
  }
  if (k != NULL) {
    STATE.base_latency = k->baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE];
    /* The last double of the full table: an address sanitizer flags a
     * core that allocated less. */
    k->perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS - 1][NCCL_NUM_TUNING_SCALES - 1] = 42.0;
    STATE.constants_whole =
        k->perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS - 1][NCCL_NUM_TUNING_SCALES - 1] == 42.0;
  }
  return make_ctx(log, nranks, nnodes, ctx);
}
#if TUNER_VERSION == 5
EXPORT const ncclTuner_v5_t SYM = {"TunerTest_v5", init_new, table_call, end_ctx};
#else
EXPORT const ncclTuner_v6_t SYM = {"TunerTest_v6", init_new, table_call, end_ctx, NULL};
#endif
#endif
#endif
