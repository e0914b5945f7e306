/*
 * Braid communicator configuration, by NCCL 2.30.7's rules:
 *
 *  1. Read the application's struct up to the smaller of its size and ours;
 *     reject a wrong magic. Fields its version predates are undefined.
 *  2. Check the values the application set; a bad one is
 *     ncclInvalidArgument. Fill what is still undefined with the defaults.
 *     (A split/shrink without a config copies the parent's settings
 *     instead of steps 1-2.)
 *  3. Let NCCL_* variables that are set override the result, whatever the
 *     application asked for, then clamp what is out of range with an INFO.
 *
 * The environment wins over the application in step 3: that is NCCL's
 * behaviour, and deployments rely on it to tune programs they cannot change.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/config.h"
#include "base/param.h"

#define CONFIG_MAGIC 0xcafebeefu

/* Defaults for fields the application left undefined. */
#define DEFAULT_BLOCKING 1
#define DEFAULT_CGA_CLUSTER 4
#define DEFAULT_MIN_CTAS 1
#define DEFAULT_MAX_CTAS BRD_CONFIG_MAX_CTAS

#define UNDEF NCCL_CONFIG_UNDEF_INT

/* Resets the fields that a struct of this version did not have. NCCL's
 * thresholds; splitShare (2.18) and commName (2.27) are reset as well, so a
 * stale pointer in a struct that claims an older version is never read. */
static void drop_newer_fields(ncclConfig_t *c) {
  const ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  if (c->version < NCCL_VERSION(2, 14, 0)) c->blocking = init.blocking;
  if (c->version < NCCL_VERSION(2, 17, 0)) {
    c->cgaClusterSize = init.cgaClusterSize;
    c->minCTAs = init.minCTAs;
    c->maxCTAs = init.maxCTAs;
    c->netName = init.netName;
  }
  if (c->version < NCCL_VERSION(2, 18, 0)) c->splitShare = init.splitShare;
  if (c->version < NCCL_VERSION(2, 25, 0)) c->trafficClass = init.trafficClass;
  if (c->version < NCCL_VERSION(2, 27, 0)) {
    c->commName = init.commName;
    c->collnetEnable = init.collnetEnable;
    c->CTAPolicy = init.CTAPolicy;
    c->shrinkShare = init.shrinkShare;
    c->nvlsCTAs = init.nvlsCTAs;
  }
  if (c->version < NCCL_VERSION(2, 28, 0)) {
    c->nChannelsPerNetPeer = init.nChannelsPerNetPeer;
    c->nvlinkCentricSched = init.nvlinkCentricSched;
  }
  if (c->version < NCCL_VERSION(2, 29, 0)) {
    c->graphUsageMode = init.graphUsageMode;
    c->numRmaCtx = init.numRmaCtx;
  }
  if (c->version < NCCL_VERSION(2, 30, 0)) {
    c->maxP2pPeers = init.maxP2pPeers;
    c->graphStreamOrdering = init.graphStreamOrdering;
  }
}

/* Bytes of the application's struct that hold fields: no more than its
 * size says and no more than its version had. A 2.28 program's struct is
 * 80 bytes; reading past its size would read whatever follows it. */
static size_t user_bytes(size_t size) {
  return size < sizeof(ncclConfig_t) ? size : sizeof(ncclConfig_t);
}

static int is_bool(int v) { return v == 0 || v == 1; }

/* Checks the values the application set (undefined ones pass). */
static ncclResult_t check_user_values(const ncclConfig_t *c) {
  if (c->blocking != UNDEF && !is_bool(c->blocking)) {
    WARN("Invalid ncclConfig_t.blocking %d: use 1 (blocking), 0 (nonblocking) "
         "or leave it NCCL_CONFIG_UNDEF_INT", c->blocking);
    return ncclInvalidArgument;
  }
  if (c->cgaClusterSize != UNDEF && c->cgaClusterSize < 0) {
    WARN("Invalid ncclConfig_t.cgaClusterSize %d: use 0 to %d or leave it "
         "NCCL_CONFIG_UNDEF_INT", c->cgaClusterSize, BRD_CONFIG_MAX_CGA_CLUSTER);
    return ncclInvalidArgument;
  }
  /* NCCL compares minCTAs with maxCTAs even when maxCTAs is undefined
   * (INT_MIN), so setting minCTAs alone is rejected there too. */
  if ((c->minCTAs != UNDEF && c->minCTAs <= 0) ||
      (c->maxCTAs != UNDEF && c->maxCTAs <= 0) || c->minCTAs > c->maxCTAs) {
    if (c->maxCTAs == UNDEF && c->minCTAs > 0) {
      WARN("Invalid ncclConfig_t.minCTAs/maxCTAs %d/undefined: minCTAs needs "
           "maxCTAs set as well (1 to %d, at least minCTAs)", c->minCTAs,
           BRD_CONFIG_MAX_CTAS);
    } else {
      WARN("Invalid ncclConfig_t.minCTAs/maxCTAs %d/%d: both must be positive "
           "(at most %d is used) with minCTAs <= maxCTAs", c->minCTAs,
           c->maxCTAs, BRD_CONFIG_MAX_CTAS);
    }
    return ncclInvalidArgument;
  }
  if (c->splitShare != UNDEF && !is_bool(c->splitShare)) {
    WARN("Invalid ncclConfig_t.splitShare %d: use 0 or 1", c->splitShare);
    return ncclInvalidArgument;
  }
  if (c->collnetEnable != UNDEF && !is_bool(c->collnetEnable)) {
    WARN("Invalid ncclConfig_t.collnetEnable %d: use 0 or 1", c->collnetEnable);
    return ncclInvalidArgument;
  }
  if (c->CTAPolicy != UNDEF &&
      (c->CTAPolicy < NCCL_CTA_POLICY_DEFAULT || c->CTAPolicy > NCCL_CTA_POLICY_ZERO)) {
    WARN("Invalid ncclConfig_t.CTAPolicy %d: use NCCL_CTA_POLICY_DEFAULT (0), "
         "NCCL_CTA_POLICY_EFFICIENCY (1) or NCCL_CTA_POLICY_ZERO (2)", c->CTAPolicy);
    return ncclInvalidArgument;
  }
  if (c->shrinkShare != UNDEF && !is_bool(c->shrinkShare)) {
    WARN("Invalid ncclConfig_t.shrinkShare %d: use 0 or 1", c->shrinkShare);
    return ncclInvalidArgument;
  }
  if (c->nvlsCTAs != UNDEF && c->nvlsCTAs <= 0) {
    WARN("Invalid ncclConfig_t.nvlsCTAs %d: use a positive count or leave it "
         "NCCL_CONFIG_UNDEF_INT", c->nvlsCTAs);
    return ncclInvalidArgument;
  }
  if (c->nChannelsPerNetPeer != UNDEF &&
      (c->nChannelsPerNetPeer <= 0 || c->nChannelsPerNetPeer > BRD_CONFIG_MAX_CTAS)) {
    WARN("Invalid ncclConfig_t.nChannelsPerNetPeer %d: use 1 to %d or leave it "
         "NCCL_CONFIG_UNDEF_INT", c->nChannelsPerNetPeer, BRD_CONFIG_MAX_CTAS);
    return ncclInvalidArgument;
  }
  if (c->nvlinkCentricSched != UNDEF && !is_bool(c->nvlinkCentricSched)) {
    WARN("Invalid ncclConfig_t.nvlinkCentricSched %d: use 0 or 1", c->nvlinkCentricSched);
    return ncclInvalidArgument;
  }
  if (c->graphUsageMode != UNDEF && c->graphUsageMode < 0) {
    WARN("Invalid ncclConfig_t.graphUsageMode %d: use 0 or more, or leave it "
         "NCCL_CONFIG_UNDEF_INT", c->graphUsageMode);
    return ncclInvalidArgument;
  }
  if (c->numRmaCtx != UNDEF && c->numRmaCtx <= 0) {
    WARN("Invalid ncclConfig_t.numRmaCtx %d: use a positive count or leave it "
         "NCCL_CONFIG_UNDEF_INT", c->numRmaCtx);
    return ncclInvalidArgument;
  }
  if (c->maxP2pPeers != UNDEF && c->maxP2pPeers <= 0) {
    WARN("Invalid ncclConfig_t.maxP2pPeers %d: use a positive count or leave it "
         "NCCL_CONFIG_UNDEF_INT (no limit)", c->maxP2pPeers);
    return ncclInvalidArgument;
  }
  if (c->graphStreamOrdering != UNDEF && !is_bool(c->graphStreamOrdering)) {
    WARN("Invalid ncclConfig_t.graphStreamOrdering %d: use 0 or 1", c->graphStreamOrdering);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Sets *field to def when undefined; logs a value the application chose. */
static void fill_int(int *field, int def, const char *what) {
  if (*field == UNDEF) {
    *field = def;
  } else {
    INFO(BRD_SUBSYS_ENV, "Comm config %s set to %d", what, *field);
  }
}

/* Steps 1 and 2: the application's struct, checked and completed. */
static ncclResult_t config_from_user(const ncclConfig_t *user, ncclConfig_t *c_out) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  if (user != NULL) {
    size_t size;
    memcpy(&size, user, sizeof(size));
    size = user_bytes(size);
    c.magic = 0;  /* a struct too short to hold a magic has none */
    memcpy(&c, user, size);
    if (c.magic != CONFIG_MAGIC) {
      WARN("Invalid ncclConfig_t (magic 0x%x, size %zu): initialise it with "
           "NCCL_CONFIG_INITIALIZER before setting fields", c.magic, size);
      return ncclInvalidArgument;
    }
    drop_newer_fields(&c);
  }
  CHECK(check_user_values(&c));
  fill_int(&c.blocking, DEFAULT_BLOCKING, "blocking");
  fill_int(&c.cgaClusterSize, DEFAULT_CGA_CLUSTER, "cgaClusterSize");
  fill_int(&c.minCTAs, DEFAULT_MIN_CTAS, "minCTAs");
  fill_int(&c.maxCTAs, DEFAULT_MAX_CTAS, "maxCTAs");
  fill_int(&c.splitShare, 0, "splitShare");
  fill_int(&c.trafficClass, UNDEF, "trafficClass");
  fill_int(&c.collnetEnable, 0, "collnetEnable");
  fill_int(&c.CTAPolicy, NCCL_CTA_POLICY_DEFAULT, "CTAPolicy");
  fill_int(&c.shrinkShare, 0, "shrinkShare");
  fill_int(&c.nvlsCTAs, UNDEF, "nvlsCTAs");
  fill_int(&c.nChannelsPerNetPeer, UNDEF, "nChannelsPerNetPeer");
  fill_int(&c.nvlinkCentricSched, 0, "nvlinkCentricSched");
  /* Accepted and kept; see config.h for what each means to Braid. */
  fill_int(&c.graphUsageMode, UNDEF, "graphUsageMode");
  fill_int(&c.numRmaCtx, 1, "numRmaCtx");
  fill_int(&c.maxP2pPeers, UNDEF, "maxP2pPeers");
  fill_int(&c.graphStreamOrdering, 0, "graphStreamOrdering");
  if (c.netName != NULL) INFO(BRD_SUBSYS_ENV, "Comm config netName set to %s", c.netName);
  if (c.commName != NULL) INFO(BRD_SUBSYS_ENV, "Comm config commName set to %s", c.commName);
  *c_out = c;
  return ncclSuccess;
}

/* An integer knob that is set and fits an int (NCCL's "undefined", INT_MIN,
 * counts as not set). */
static int env_int(brd_param_id_t id, int *v_out) {
  int64_t v = brd_param_int(id);
  if (v == BRD_PARAM_UNSET || v == UNDEF) return 0;
  if (v < INT_MIN || v > INT_MAX) {
    INFO(BRD_SUBSYS_ENV, "%s=%lld is out of range, ignored",
         brd_param_table[id].name, (long long)v);
    return 0;
  }
  *v_out = (int)v;
  return 1;
}

/* A knob that must be positive to replace *field. */
static void env_positive(brd_param_id_t id, int *field, const char *what) {
  int v;
  if (!env_int(id, &v)) return;
  if (v <= 0) {
    INFO(BRD_SUBSYS_ENV, "%s=%d is too low, %s stays %d", brd_param_table[id].name,
         v, what, *field);
    return;
  }
  *field = v;
}

/* A knob that replaces *field whatever its value (checked afterwards). */
static void env_any(brd_param_id_t id, int *field) {
  int v;
  if (env_int(id, &v)) *field = v;
}

/* Step 3: environment overrides, then clamps. net_out receives the
 * NCCL_NET value when set (borrowed from the environment). */
static void env_override(ncclConfig_t *c, const char **net_out) {
  int v;
  if (env_int(BRD_P_COMM_BLOCKING, &v)) {
    if (is_bool(v))
      c->blocking = v;
    else
      INFO(BRD_SUBSYS_ENV, "NCCL_COMM_BLOCKING=%d is not 0 or 1, ignored", v);
  }
  if (env_int(BRD_P_CGA_CLUSTER_SIZE, &v)) {
    if (v > BRD_CONFIG_MAX_CGA_CLUSTER) {
      INFO(BRD_SUBSYS_ENV, "NCCL_CGA_CLUSTER_SIZE=%d is above %d, using %d", v,
           BRD_CONFIG_MAX_CGA_CLUSTER, BRD_CONFIG_MAX_CGA_CLUSTER);
      c->cgaClusterSize = BRD_CONFIG_MAX_CGA_CLUSTER;
    } else if (v >= 0) {
      c->cgaClusterSize = v;
    } else {
      INFO(BRD_SUBSYS_ENV, "NCCL_CGA_CLUSTER_SIZE=%d is negative, ignored", v);
    }
  }
  env_positive(BRD_P_MIN_CTAS, &c->minCTAs, "minCTAs");
  env_positive(BRD_P_MAX_CTAS, &c->maxCTAs, "maxCTAs");
  env_positive(BRD_P_NCHANNELS_PER_NET_PEER, &c->nChannelsPerNetPeer, "nChannelsPerNetPeer");
  if (env_int(BRD_P_NVLINK_CENTRIC_SCHED, &v)) {
    if (is_bool(v))
      c->nvlinkCentricSched = v;
    else
      INFO(BRD_SUBSYS_ENV, "%s=%d is not 0 or 1, ignored",
           brd_param_table[BRD_P_NVLINK_CENTRIC_SCHED].name, v);
  }
  *net_out = brd_param_getenv(brd_param_table[BRD_P_NET].name);
  env_any(BRD_P_SPLIT_SHARE, &c->splitShare);
  env_any(BRD_P_SHRINK_SHARE, &c->shrinkShare);
  /* NCCL reads NCCL_COLLNET_ENABLE afresh for every communicator, with
   * strtol's leniency, so a program may flip it between inits. */
  const char *collnet = brd_param_getenv(brd_param_table[BRD_P_COLLNET_ENABLE].name);
  if (collnet != NULL) {
    long cv = strtol(collnet, NULL, 0);
    if (cv != UNDEF) c->collnetEnable = (int)cv;
  }
  env_any(BRD_P_CTA_POLICY, &c->CTAPolicy);
  env_any(BRD_P_NVLS_NCHANNELS, &c->nvlsCTAs);

  if (c->cgaClusterSize > BRD_CONFIG_MAX_CGA_CLUSTER) {
    INFO(BRD_SUBSYS_ENV, "cgaClusterSize %d is above %d, using %d", c->cgaClusterSize,
         BRD_CONFIG_MAX_CGA_CLUSTER, BRD_CONFIG_MAX_CGA_CLUSTER);
    c->cgaClusterSize = BRD_CONFIG_MAX_CGA_CLUSTER;
  }
  if (c->minCTAs > BRD_CONFIG_MAX_CTAS) {
    INFO(BRD_SUBSYS_ENV, "minCTAs %d is above the channel limit, using %d", c->minCTAs,
         BRD_CONFIG_MAX_CTAS);
    c->minCTAs = BRD_CONFIG_MAX_CTAS;
  }
  if (c->maxCTAs > BRD_CONFIG_MAX_CTAS) {
    INFO(BRD_SUBSYS_ENV, "maxCTAs %d is above the channel limit, using %d", c->maxCTAs,
         BRD_CONFIG_MAX_CTAS);
    c->maxCTAs = BRD_CONFIG_MAX_CTAS;
  }
  if (c->minCTAs > c->maxCTAs) {
    INFO(BRD_SUBSYS_ENV, "minCTAs %d is above maxCTAs %d, using %d for both", c->minCTAs,
         c->maxCTAs, c->maxCTAs);
    c->minCTAs = c->maxCTAs;
  }
  if (!is_bool(c->splitShare)) {
    INFO(BRD_SUBSYS_ENV, "splitShare %d is not 0 or 1, using 0", c->splitShare);
    c->splitShare = 0;
  }
  if (!is_bool(c->collnetEnable)) {
    INFO(BRD_SUBSYS_ENV, "collnetEnable %d is not 0 or 1, using 0", c->collnetEnable);
    c->collnetEnable = 0;
  }
  if (c->CTAPolicy < NCCL_CTA_POLICY_DEFAULT || c->CTAPolicy > NCCL_CTA_POLICY_ZERO) {
    INFO(BRD_SUBSYS_ENV, "CTAPolicy %d is not a known policy, using %d", c->CTAPolicy,
         NCCL_CTA_POLICY_DEFAULT);
    c->CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  }
  if (c->nvlsCTAs != UNDEF && c->nvlsCTAs <= 0) {
    INFO(BRD_SUBSYS_ENV, "nvlsCTAs %d is not positive, choosing automatically", c->nvlsCTAs);
    c->nvlsCTAs = UNDEF;
  }
}

static ncclResult_t dup_str(const char *s, const char **copy_out) {
  char *copy = NULL;
  if (s != NULL) {
    copy = strdup(s);
    if (copy == NULL) {
      WARN("out of host memory copying a %zu-byte communicator config string",
           strlen(s) + 1);
      return ncclSystemError;
    }
  }
  *copy_out = copy;
  return ncclSuccess;
}

/* See config.h. */
ncclResult_t brd_config_resolve(const ncclConfig_t *user, const ncclConfig_t *inherit,
                                ncclConfig_t *config_out) {
  ncclResult_t res = ncclSuccess;
  ncclConfig_t c;
  const char *net_env = NULL;
  const char *net = NULL;
  const char *name = NULL;

  if (user == NULL && inherit != NULL) {
    c = *inherit;
  } else {
    CHECK(config_from_user(user, &c));
  }
  env_override(&c, &net_env);
  if (net_env != NULL) {
    if (c.netName != NULL)
      INFO(BRD_SUBSYS_ENV, "Comm config netName replaced by NCCL_NET=%s", net_env);
    c.netName = net_env;
  }
  CHECK(dup_str(c.netName, &net));
  CHECK_GOTO(dup_str(c.commName, &name), res, fail_free_net);
  c.netName = net;
  c.commName = name;
  c.size = sizeof(c);
  c.magic = CONFIG_MAGIC;
  c.version = NCCL_VERSION_CODE;
  *config_out = c;
  return ncclSuccess;

fail_free_net:
  free((void *)net);
  return res;
}

/* See config.h. */
void brd_config_fini(ncclConfig_t *config) {
  if (config == NULL) return;
  free((void *)config->netName);
  free((void *)config->commName);
  config->netName = NULL;
  config->commName = NULL;
}
