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
#include <stddef.h>
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

/* The fields newer than 2.14's struct, with the version that brought each:
 * NCCL's thresholds. */
static const struct {
  size_t off, size; /* within ncclConfig_t */
  unsigned since;   /* NCCL_VERSION code */
} newer_fields[] = {
#define SINCE(field, x, y, z) \
  {offsetof(ncclConfig_t, field), sizeof(((ncclConfig_t *)0)->field), NCCL_VERSION(x, y, z)}
    SINCE(blocking, 2, 14, 0),
    SINCE(cgaClusterSize, 2, 17, 0), SINCE(minCTAs, 2, 17, 0),
    SINCE(maxCTAs, 2, 17, 0), SINCE(netName, 2, 17, 0),
    SINCE(splitShare, 2, 18, 0),
    SINCE(trafficClass, 2, 25, 0),
    SINCE(commName, 2, 27, 0), SINCE(collnetEnable, 2, 27, 0),
    SINCE(CTAPolicy, 2, 27, 0), SINCE(shrinkShare, 2, 27, 0),
    SINCE(nvlsCTAs, 2, 27, 0),
    SINCE(nChannelsPerNetPeer, 2, 28, 0), SINCE(nvlinkCentricSched, 2, 28, 0),
    SINCE(graphUsageMode, 2, 29, 0), SINCE(numRmaCtx, 2, 29, 0),
    SINCE(maxP2pPeers, 2, 30, 0), SINCE(graphStreamOrdering, 2, 30, 0),
#undef SINCE
};

/* Resets the fields that a struct of this version did not have to their
 * initializer values; splitShare (2.18) and commName (2.27) are reset as
 * well, so a stale pointer in a struct that claims an older version is
 * never read. */
static void drop_newer_fields(ncclConfig_t *c) {
  const ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  for (size_t i = 0; i < sizeof(newer_fields) / sizeof(newer_fields[0]); i++)
    if (c->version < newer_fields[i].since)
      memcpy((char *)c + newer_fields[i].off, (const char *)&init + newer_fields[i].off,
             newer_fields[i].size);
}

/* Bytes of the application's struct that hold fields: no more than its
 * size says and no more than its version had. A 2.28 program's struct is
 * 80 bytes; reading past its size would read whatever follows it. */
static size_t user_bytes(size_t size) {
  return size < sizeof(ncclConfig_t) ? size : sizeof(ncclConfig_t);
}

static int is_bool(int v) { return v == 0 || v == 1; }

#define STR_(x) #x
#define STR(x) STR_(x)
#define OR_UNDEF " or leave it NCCL_CONFIG_UNDEF_INT"

/* An int field the application may set, the values it may take and what
 * the message about any other value advises. */
typedef struct {
  size_t off;        /* offsetof(ncclConfig_t, field) */
  const char *name;
  int lo, hi;        /* accepted, inclusive */
  const char *hint;
} int_rule_t;

#define RULE(field, lo, hi, hint) {offsetof(ncclConfig_t, field), #field, lo, hi, hint}

/* Checked before minCTAs/maxCTAs, then the rest, in NCCL's order: the
 * first value out of range is the one reported. */
static const int_rule_t head_rules[] = {
    RULE(blocking, 0, 1, "use 1 (blocking), 0 (nonblocking)" OR_UNDEF),
    RULE(cgaClusterSize, 0, INT_MAX, "use 0 to " STR(BRD_CONFIG_MAX_CGA_CLUSTER) OR_UNDEF),
};
static const int_rule_t tail_rules[] = {
    RULE(splitShare, 0, 1, "use 0 or 1"),
    RULE(collnetEnable, 0, 1, "use 0 or 1"),
    RULE(CTAPolicy, NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_ZERO,
         "use NCCL_CTA_POLICY_DEFAULT (0), NCCL_CTA_POLICY_EFFICIENCY (1) or "
         "NCCL_CTA_POLICY_ZERO (2)"),
    RULE(shrinkShare, 0, 1, "use 0 or 1"),
    RULE(nvlsCTAs, 1, INT_MAX, "use a positive count" OR_UNDEF),
    RULE(nChannelsPerNetPeer, 1, BRD_CONFIG_MAX_CTAS,
         "use 1 to " STR(BRD_CONFIG_MAX_CTAS) OR_UNDEF),
    RULE(nvlinkCentricSched, 0, 1, "use 0 or 1"),
    RULE(graphUsageMode, 0, INT_MAX, "use 0 or more," OR_UNDEF),
    RULE(numRmaCtx, 1, INT_MAX, "use a positive count" OR_UNDEF),
    RULE(maxP2pPeers, 1, INT_MAX, "use a positive count" OR_UNDEF " (no limit)"),
    RULE(graphStreamOrdering, 0, 1, "use 0 or 1"),
};

/* Checks the fields of rules[0..n) that c sets (undefined ones pass). */
static ncclResult_t check_rules(const ncclConfig_t *c, const int_rule_t *rules, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int v;
    memcpy(&v, (const char *)c + rules[i].off, sizeof(v));
    if (v != UNDEF && (v < rules[i].lo || v > rules[i].hi)) {
      WARN("Invalid ncclConfig_t.%s %d: %s", rules[i].name, v, rules[i].hint);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* Checks the values the application set (undefined ones pass). */
static ncclResult_t check_user_values(const ncclConfig_t *c) {
  CHECK(check_rules(c, head_rules, sizeof(head_rules) / sizeof(head_rules[0])));
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
  return check_rules(c, tail_rules, sizeof(tail_rules) / sizeof(tail_rules[0]));
}

/* Sets *field to def when undefined; logs a value the application chose. */
static void fill_int(int *field, int def, const char *what) {
  if (*field == UNDEF) {
    *field = def;
  } else {
    INFO(BRD_SUBSYS_ENV, "Comm config %s set to %d", what, *field);
  }
}

/* What each int field the application left undefined becomes, in the
 * order the values it chose are logged. */
static const struct {
  size_t off; /* offsetof(ncclConfig_t, field) */
  const char *name;
  int def;
} int_defaults[] = {
#define DEFAULT(field, def) {offsetof(ncclConfig_t, field), #field, def}
    DEFAULT(blocking, DEFAULT_BLOCKING),
    DEFAULT(cgaClusterSize, DEFAULT_CGA_CLUSTER),
    DEFAULT(minCTAs, DEFAULT_MIN_CTAS),
    DEFAULT(maxCTAs, DEFAULT_MAX_CTAS),
    DEFAULT(splitShare, 0),
    DEFAULT(trafficClass, UNDEF),
    DEFAULT(collnetEnable, 0),
    DEFAULT(CTAPolicy, NCCL_CTA_POLICY_DEFAULT),
    DEFAULT(shrinkShare, 0),
    DEFAULT(nvlsCTAs, UNDEF),
    DEFAULT(nChannelsPerNetPeer, UNDEF),
    DEFAULT(nvlinkCentricSched, 0),
    /* Accepted and kept; see config.h for what each means to Braid. */
    DEFAULT(graphUsageMode, UNDEF),
    DEFAULT(numRmaCtx, 1),
    DEFAULT(maxP2pPeers, UNDEF),
    DEFAULT(graphStreamOrdering, 0),
#undef DEFAULT
};

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
  for (size_t i = 0; i < sizeof(int_defaults) / sizeof(int_defaults[0]); i++)
    fill_int((int *)((char *)&c + int_defaults[i].off), int_defaults[i].def,
             int_defaults[i].name);
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

/* Clamps a CTA count above the channel limit to the limit. */
static void clamp_ctas(int *field, const char *what) {
  if (*field > BRD_CONFIG_MAX_CTAS) {
    INFO(BRD_SUBSYS_ENV, "%s %d is above the channel limit, using %d", what, *field,
         BRD_CONFIG_MAX_CTAS);
    *field = BRD_CONFIG_MAX_CTAS;
  }
}

/* Sets a switch that is neither 0 nor 1 to 0. */
static void bool_or_zero(int *field, const char *what) {
  if (!is_bool(*field)) {
    INFO(BRD_SUBSYS_ENV, "%s %d is not 0 or 1, using 0", what, *field);
    *field = 0;
  }
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
  clamp_ctas(&c->minCTAs, "minCTAs");
  clamp_ctas(&c->maxCTAs, "maxCTAs");
  if (c->minCTAs > c->maxCTAs) {
    INFO(BRD_SUBSYS_ENV, "minCTAs %d is above maxCTAs %d, using %d for both", c->minCTAs,
         c->maxCTAs, c->maxCTAs);
    c->minCTAs = c->maxCTAs;
  }
  bool_or_zero(&c->splitShare, "splitShare");
  bool_or_zero(&c->collnetEnable, "collnetEnable");
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
