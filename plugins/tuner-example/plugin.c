/*
 * An example tuner plugin (ncclTunerPlugin_v5): overrides from a CSV file
 * in the format of NVIDIA's example tuner (ext-tuner/example), so the same
 * file tunes NCCL and Braid alike.
 *
 * The file is NCCL_TUNER_CONFIG_FILE, or ./nccl_tuner.conf. One override
 * per line, '#' starts a comment:
 *
 *   collective,minBytes,maxBytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
 *
 *   collective  broadcast, reduce, allgather, reducescatter, allreduce
 *   algorithm   tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat
 *   protocol    ll, ll128, simple
 *   channels    nChannels to ask for, -1 to keep the core's
 *   nNodes, nRanks, numPipeOps, regBuff: the value to match, -1 for any;
 *   the last two may be left out (any).
 *
 * A call whose collective, size (minBytes <= nBytes <= maxBytes) and
 * communicator match a line gets that line's entry of the cost table set
 * to 0.0 (so it wins), if the core offered it (not -1); the first such
 * line wins. Unlike NVIDIA's example, nChannels is left alone unless the
 * line sets it.
 *
 * Build: cc -shared -fPIC -I<braid>/include -I<braid>/plugins/include plugin.c
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_tuner.h"

#define EXPORT __attribute__((visibility("default")))
#define LINE_MAX_LEN 512

typedef struct {
  int func, algo, proto, channels, nnodes, nranks, pipe_ops, reg_buff;
  unsigned long long min_bytes, max_bytes;
} rule_t;

typedef struct {
  rule_t *rules;
  int n;
  size_t nranks, nnodes;
  ncclDebugLogger_t log;
} ctx_t;

#define LOG(c, lvl, ...)                                                                   \
  do {                                                                                     \
    if ((c)->log != NULL) (c)->log(lvl, NCCL_TUNING, __FILE__, __LINE__, __VA_ARGS__);     \
  } while (0)

static int lookup(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, names[i]) == 0) return i;
  return -1;
}

static const char *const funcs[] = {"broadcast", "reduce", "allgather", "reducescatter",
                                    "allreduce"};
static const char *const algos[NCCL_NUM_ALGORITHMS] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char *const protos[NCCL_NUM_PROTOCOLS] = {"ll", "ll128", "simple"};

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* One CSV line into r; 0 when malformed. */
static int parse_line(char *line, rule_t *r) {
  char *f[10];
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(line, ",", &save); tok != NULL && n < 10;
       tok = strtok_r(NULL, ",", &save))
    f[n++] = trim(tok);
  if (n < 8) return 0;
  r->func = lookup(f[0], funcs, 5);
  r->algo = lookup(f[3], algos, NCCL_NUM_ALGORITHMS);
  r->proto = lookup(f[4], protos, NCCL_NUM_PROTOCOLS);
  if (r->func < 0 || r->algo < 0 || r->proto < 0) return 0;
  char *end;
  r->min_bytes = strtoull(f[1], &end, 10);
  if (*end != '\0') return 0;
  r->max_bytes = strtoull(f[2], &end, 10);
  if (*end != '\0') return 0;
  r->channels = atoi(f[5]);
  r->nnodes = atoi(f[6]);
  r->nranks = atoi(f[7]);
  r->pipe_ops = n > 8 ? atoi(f[8]) : -1;
  r->reg_buff = n > 9 ? atoi(f[9]) : -1;
  return 1;
}

static ncclResult_t load(ctx_t *c, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    LOG(c, NCCL_LOG_INFO, "TUNER/Example: no config file %s; no overrides", path);
    return ncclSuccess;
  }
  char line[LINE_MAX_LEN];
  int lineno = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    lineno++;
    char *s = trim(line);
    if (s[0] == '#' || s[0] == '\0') continue;
    rule_t r;
    if (!parse_line(s, &r)) {
      LOG(c, NCCL_LOG_WARN, "TUNER/Example: %s:%d: not a valid override line; skipped", path,
          lineno);
      continue;
    }
    rule_t *grown = realloc(c->rules, (size_t)(c->n + 1) * sizeof(*grown));
    if (grown == NULL) {
      fclose(f);
      return ncclSystemError;
    }
    c->rules = grown;
    c->rules[c->n++] = r;
  }
  fclose(f);
  LOG(c, NCCL_LOG_INFO, "TUNER/Example: %d overrides from %s", c->n, path);
  return ncclSuccess;
}

static ncclResult_t example_init(void **context, uint64_t commId, size_t nRanks, size_t nNodes,
                                 ncclDebugLogger_t logFunction,
                                 ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                                 ncclTunerConstants_v5_t *constants) {
  (void)commId;
  (void)nvlDomainInfo;
  (void)constants;
  ctx_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->nranks = nRanks;
  c->nnodes = nNodes;
  c->log = logFunction;
  const char *path = getenv("NCCL_TUNER_CONFIG_FILE");
  ncclResult_t r = load(c, path != NULL ? path : "nccl_tuner.conf");
  if (r != ncclSuccess) {
    free(c->rules);
    free(c);
    return r;
  }
  *context = c;
  return ncclSuccess;
}

static ncclResult_t example_get_coll_info(void *context, ncclFunc_t collType, size_t nBytes,
                                          int numPipeOps, float **collCostTable, int numAlgo,
                                          int numProto, int regBuff, int *nChannels) {
  ctx_t *c = context;
  if (c == NULL) return ncclInternalError;
  /* One contiguous float[numAlgo][numProto], passed as float**. */
  float (*table)[NCCL_NUM_PROTOCOLS] = (float (*)[NCCL_NUM_PROTOCOLS])collCostTable;
  if (numProto != NCCL_NUM_PROTOCOLS) return ncclSuccess;
  for (int i = 0; i < c->n; i++) {
    const rule_t *r = &c->rules[i];
    if (r->func != (int)collType || nBytes < r->min_bytes || nBytes > r->max_bytes) continue;
    if ((r->nnodes != -1 && (size_t)r->nnodes != c->nnodes) ||
        (r->nranks != -1 && (size_t)r->nranks != c->nranks) ||
        (r->pipe_ops != -1 && r->pipe_ops != numPipeOps) ||
        (r->reg_buff != -1 && r->reg_buff != regBuff))
      continue;
    if (r->algo >= numAlgo || table[r->algo][r->proto] == NCCL_ALGO_PROTO_IGNORE) {
      LOG(c, NCCL_LOG_INFO, "TUNER/Example: %s/%s cannot run this call; next line",
          algos[r->algo], protos[r->proto]);
      continue;
    }
    table[r->algo][r->proto] = 0.0f;
    if (r->channels != -1) *nChannels = r->channels;
    LOG(c, NCCL_LOG_INFO, "TUNER/Example: %s %zu bytes -> %s/%s", funcs[r->func], nBytes,
        algos[r->algo], protos[r->proto]);
    return ncclSuccess;
  }
  return ncclSuccess;
}

static ncclResult_t example_finalize(void *context) {
  ctx_t *c = context;
  if (c != NULL) free(c->rules);
  free(c);
  return ncclSuccess;
}

EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "Example",
    .init = example_init,
    .getCollInfo = example_get_coll_info,
    .finalize = example_finalize,
};
