/*
 * Communicator configuration: NCCL 2.30.7's rules for ncclConfig_t, checked
 * against values worked out by hand from those rules: defaults, magic,
 * older and larger struct layouts, inheritance on split, range checks, and
 * NCCL_* variables overriding the application.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testenv.h"

#include "core/config.h"
#include "base/debug.h"
#include "base/param.h"


static char tmpdir[] = "/tmp/brd_test_config.XXXXXX";

/* strdup that can be told to fail, to drive the unwinding paths. Counts
 * down calls; fails the one that reaches zero. */
static int strdup_fail_in = -1;
char *strdup(const char *s) {
  if (strdup_fail_in >= 0 && strdup_fail_in-- == 0) return NULL;
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

static int setup(void **state) {
  (void)state;
  brd_test_env_clear();
  strdup_fail_in = -1;
  brd_param_reload();
  brd_log_reset();
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  if (mkdtemp(tmpdir) == NULL) return -1;
  setenv("HOME", tmpdir, 1);
  char sys[300];
  snprintf(sys, sizeof(sys), "%s/system.conf", tmpdir);
  brd_param_sysconf_set(sys);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  rmdir(tmpdir);
  return 0;
}

static void setenv_reload(const char *name, const char *value) {
  setenv(name, value, 1);
  brd_param_reload();
}

/* NCCL 2.30.7's values for a config left entirely undefined. */
static void assert_defaults(const ncclConfig_t *c) {
  assert_int_equal(c->blocking, 1);
  assert_int_equal(c->cgaClusterSize, 4);
  assert_int_equal(c->minCTAs, 1);
  assert_int_equal(c->maxCTAs, 64);
  assert_null(c->netName);
  assert_int_equal(c->splitShare, 0);
  assert_int_equal(c->trafficClass, INT_MIN);
  assert_null(c->commName);
  assert_int_equal(c->collnetEnable, 0);
  assert_int_equal(c->CTAPolicy, 0);
  assert_int_equal(c->shrinkShare, 0);
  assert_int_equal(c->nvlsCTAs, INT_MIN);
  assert_int_equal(c->nChannelsPerNetPeer, INT_MIN);
  assert_int_equal(c->nvlinkCentricSched, 0);
}

static void test_null_config(void **state) {
  (void)state;
  ncclConfig_t out;
  memset(&out, 0xA5, sizeof(out));
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_defaults(&out);
  assert_int_equal(out.size, sizeof(ncclConfig_t));
  assert_int_equal(out.magic, 0xcafebeef);
  assert_int_equal(out.version, 23007);
  brd_config_fini(&out);

  /* An untouched NCCL_CONFIG_INITIALIZER resolves the same way. */
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  assert_int_equal(brd_config_resolve(&init, NULL, &out), ncclSuccess);
  assert_defaults(&out);
  brd_config_fini(&out);
}

static void test_bad_magic(void **state) {
  (void)state;
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.magic = 0xcafebeee;
  ncclConfig_t out, before;
  memset(&out, 0x5A, sizeof(out));
  memcpy(&before, &out, sizeof(out));
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclInvalidArgument);
  assert_memory_equal(&out, &before, sizeof(out));
  assert_non_null(strstr(brd_log_last_error(), "NCCL_CONFIG_INITIALIZER"));

  /* A size too small to reach the magic has no magic at all. */
  ncclConfig_t small = NCCL_CONFIG_INITIALIZER;
  small.size = sizeof(size_t);
  assert_int_equal(brd_config_resolve(&small, NULL, &out), ncclInvalidArgument);
  assert_memory_equal(&out, &before, sizeof(out));
}

static void test_user_values(void **state) {
  (void)state;
  char net[] = "Socket", name[] = "trainer";
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.blocking = 0;
  user.cgaClusterSize = 2;
  user.minCTAs = 3;
  user.maxCTAs = 9;
  user.netName = net;
  user.splitShare = 1;
  user.trafficClass = 106;
  user.commName = name;
  user.collnetEnable = 1;
  user.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  user.shrinkShare = 1;
  user.nvlsCTAs = 5;
  user.nChannelsPerNetPeer = 7;
  user.nvlinkCentricSched = 1;
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  assert_int_equal(out.cgaClusterSize, 2);
  assert_int_equal(out.minCTAs, 3);
  assert_int_equal(out.maxCTAs, 9);
  assert_int_equal(out.splitShare, 1);
  assert_int_equal(out.trafficClass, 106);
  assert_int_equal(out.collnetEnable, 1);
  assert_int_equal(out.CTAPolicy, 2);
  assert_int_equal(out.shrinkShare, 1);
  assert_int_equal(out.nvlsCTAs, 5);
  assert_int_equal(out.nChannelsPerNetPeer, 7);
  assert_int_equal(out.nvlinkCentricSched, 1);
  /* Strings are copies: the application may free its own. */
  assert_ptr_not_equal(out.netName, net);
  assert_ptr_not_equal(out.commName, name);
  memset(net, 'x', sizeof(net) - 1);
  memset(name, 'y', sizeof(name) - 1);
  assert_string_equal(out.netName, "Socket");
  assert_string_equal(out.commName, "trainer");
  brd_config_fini(&out);
  assert_null(out.netName);
  assert_null(out.commName);
}

/* The layout of NCCL 2.14's ncclConfig_t. */
struct config_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
};

static void test_v2_14_struct_with_garbage_after(void **state) {
  (void)state;
  /* A 2.14 struct at the start of a buffer whose remaining bytes are junk:
   * none of it may be read (a junk netName would crash strdup). */
  union {
    unsigned char bytes[sizeof(ncclConfig_t) + 64];
    struct config_v21400 v;
  } buf;
  memset(buf.bytes, 0x5A, sizeof(buf.bytes));
  buf.v.size = sizeof(struct config_v21400);
  buf.v.magic = 0xcafebeef;
  buf.v.version = 21400;
  buf.v.blocking = 0;
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve((const ncclConfig_t *)buf.bytes, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  assert_int_equal(out.cgaClusterSize, 4);
  assert_int_equal(out.minCTAs, 1);
  assert_int_equal(out.maxCTAs, 64);
  assert_null(out.netName);
  assert_null(out.commName);
  assert_int_equal(out.CTAPolicy, 0);
  assert_int_equal(out.nvlsCTAs, INT_MIN);
  brd_config_fini(&out);
}

static void test_old_version_full_size(void **state) {
  (void)state;
  /* Full-size struct claiming 2.17: fields from 2.25 on are undefined even
   * though they hold invalid values. */
  ncclConfig_t user;
  memset(&user, 0x7B, sizeof(user));
  user.size = sizeof(user);
  user.magic = 0xcafebeef;
  user.version = 21700;
  user.blocking = 1;
  user.cgaClusterSize = 0;
  user.minCTAs = 2;
  user.maxCTAs = 4;
  user.netName = NULL;
  user.splitShare = 1;
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_int_equal(out.cgaClusterSize, 0);
  assert_int_equal(out.minCTAs, 2);
  assert_int_equal(out.maxCTAs, 4);
  assert_int_equal(out.splitShare, 0); /* splitShare arrived in 2.18 */
  assert_int_equal(out.trafficClass, INT_MIN);
  assert_null(out.commName);
  assert_int_equal(out.collnetEnable, 0);
  assert_int_equal(out.CTAPolicy, 0);
  assert_int_equal(out.shrinkShare, 0);
  assert_int_equal(out.nvlsCTAs, INT_MIN);
  assert_int_equal(out.nChannelsPerNetPeer, INT_MIN);
  assert_int_equal(out.nvlinkCentricSched, 0);
  brd_config_fini(&out);

  /* Claiming 2.13: even blocking is ignored, so an invalid value passes. */
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.version = 21300;
  old.blocking = 5;
  assert_int_equal(brd_config_resolve(&old, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 1);
  brd_config_fini(&out);

  /* Claiming 2.27: 2.28's fields are dropped, 2.27's are used. */
  ncclConfig_t v27 = NCCL_CONFIG_INITIALIZER;
  v27.version = 22700;
  v27.nvlsCTAs = 3;
  v27.nChannelsPerNetPeer = 1000; /* invalid, but not read */
  v27.nvlinkCentricSched = 9;     /* likewise */
  assert_int_equal(brd_config_resolve(&v27, NULL, &out), ncclSuccess);
  assert_int_equal(out.nvlsCTAs, 3);
  assert_int_equal(out.nChannelsPerNetPeer, INT_MIN);
  assert_int_equal(out.nvlinkCentricSched, 0);
  brd_config_fini(&out);
}

static void test_larger_size(void **state) {
  (void)state;
  /* A newer library's bigger struct: our fields are read, the rest not. */
  union {
    unsigned char bytes[sizeof(ncclConfig_t) + 64];
    ncclConfig_t c;
  } buf;
  memset(buf.bytes, 0xEE, sizeof(buf.bytes));
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  buf.c = init;
  buf.c.size = sizeof(buf.bytes);
  buf.c.version = 23000;
  buf.c.maxCTAs = 12;
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve(&buf.c, NULL, &out), ncclSuccess);
  assert_int_equal(out.maxCTAs, 12);
  assert_int_equal(out.minCTAs, 1);
  assert_int_equal(out.size, sizeof(ncclConfig_t));
  brd_config_fini(&out);
}

static void test_inherit(void **state) {
  (void)state;
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.blocking = 0;
  user.minCTAs = 4;
  user.maxCTAs = 16;
  user.netName = "IB";
  user.commName = "parent";
  user.splitShare = 1;
  ncclConfig_t parent;
  assert_int_equal(brd_config_resolve(&user, NULL, &parent), ncclSuccess);

  /* No config: the child takes the parent's settings. */
  ncclConfig_t child;
  assert_int_equal(brd_config_resolve(NULL, &parent, &child), ncclSuccess);
  assert_int_equal(child.blocking, 0);
  assert_int_equal(child.minCTAs, 4);
  assert_int_equal(child.maxCTAs, 16);
  assert_int_equal(child.splitShare, 1);
  assert_string_equal(child.netName, "IB");
  assert_string_equal(child.commName, "parent");
  assert_ptr_not_equal(child.netName, parent.netName);
  brd_config_fini(&child);

  /* Its own config: defaults fill the gaps, not the parent (NCCL). */
  ncclConfig_t own = NCCL_CONFIG_INITIALIZER;
  own.maxCTAs = 2;
  assert_int_equal(brd_config_resolve(&own, &parent, &child), ncclSuccess);
  assert_int_equal(child.blocking, 1);
  assert_int_equal(child.minCTAs, 1);
  assert_int_equal(child.maxCTAs, 2);
  assert_int_equal(child.splitShare, 0);
  assert_null(child.netName);
  brd_config_fini(&child);

  /* The environment applies to an inherited config too. */
  setenv_reload("NCCL_COMM_BLOCKING", "1");
  assert_int_equal(brd_config_resolve(NULL, &parent, &child), ncclSuccess);
  assert_int_equal(child.blocking, 1);
  brd_config_fini(&child);
  brd_config_fini(&parent);
}

typedef struct {
  const char *what;
  void (*set)(ncclConfig_t *);
  ncclResult_t want;
  const char *field; /* named in the WARN when want is an error */
} range_case_t;

static void s_blocking2(ncclConfig_t *c) { c->blocking = 2; }
static void s_blocking_neg(ncclConfig_t *c) { c->blocking = -1; }
static void s_cga_neg(ncclConfig_t *c) { c->cgaClusterSize = -1; }
static void s_min0(ncclConfig_t *c) { c->minCTAs = 0; c->maxCTAs = 8; }
static void s_max_neg(ncclConfig_t *c) { c->maxCTAs = -5; }
static void s_min_gt_max(ncclConfig_t *c) { c->minCTAs = 8; c->maxCTAs = 4; }
static void s_min_alone(ncclConfig_t *c) { c->minCTAs = 4; }
static void s_max_alone(ncclConfig_t *c) { c->maxCTAs = 4; }
static void s_split2(ncclConfig_t *c) { c->splitShare = 2; }
static void s_collnet_neg(ncclConfig_t *c) { c->collnetEnable = -1; }
static void s_policy3(ncclConfig_t *c) { c->CTAPolicy = 3; }
static void s_policy_neg(ncclConfig_t *c) { c->CTAPolicy = -1; }
static void s_shrink5(ncclConfig_t *c) { c->shrinkShare = 5; }
static void s_nvls0(ncclConfig_t *c) { c->nvlsCTAs = 0; }
static void s_perpeer65(ncclConfig_t *c) { c->nChannelsPerNetPeer = 65; }
static void s_perpeer0(ncclConfig_t *c) { c->nChannelsPerNetPeer = 0; }
static void s_perpeer64(ncclConfig_t *c) { c->nChannelsPerNetPeer = 64; }
static void s_sched2(ncclConfig_t *c) { c->nvlinkCentricSched = 2; }
static void s_cga8(ncclConfig_t *c) { c->cgaClusterSize = 8; }

static void test_ranges(void **state) {
  (void)state;
  static const range_case_t cases[] = {
      {"blocking 2", s_blocking2, ncclInvalidArgument, "blocking"},
      {"blocking -1", s_blocking_neg, ncclInvalidArgument, "blocking"},
      {"cga -1", s_cga_neg, ncclInvalidArgument, "cgaClusterSize"},
      {"cga 8", s_cga8, ncclSuccess, NULL},
      {"min 0", s_min0, ncclInvalidArgument, "minCTAs"},
      {"max -5", s_max_neg, ncclInvalidArgument, "maxCTAs"},
      {"min > max", s_min_gt_max, ncclInvalidArgument, "minCTAs"},
      {"min without max", s_min_alone, ncclInvalidArgument, "maxCTAs"},
      {"max without min", s_max_alone, ncclSuccess, NULL},
      {"splitShare 2", s_split2, ncclInvalidArgument, "splitShare"},
      {"collnet -1", s_collnet_neg, ncclInvalidArgument, "collnetEnable"},
      {"policy 3", s_policy3, ncclInvalidArgument, "CTAPolicy"},
      {"policy -1", s_policy_neg, ncclInvalidArgument, "CTAPolicy"},
      {"shrinkShare 5", s_shrink5, ncclInvalidArgument, "shrinkShare"},
      {"nvlsCTAs 0", s_nvls0, ncclInvalidArgument, "nvlsCTAs"},
      {"perPeer 65", s_perpeer65, ncclInvalidArgument, "nChannelsPerNetPeer"},
      {"perPeer 0", s_perpeer0, ncclInvalidArgument, "nChannelsPerNetPeer"},
      {"perPeer 64", s_perpeer64, ncclSuccess, NULL},
      {"sched 2", s_sched2, ncclInvalidArgument, "nvlinkCentricSched"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
    cases[i].set(&user);
    ncclConfig_t out;
    memset(&out, 0x33, sizeof(out));
    brd_log_set_last_error("none");
    ncclResult_t res = brd_config_resolve(&user, NULL, &out);
    if (res != cases[i].want) fail_msg("case %s: got %d, want %d", cases[i].what, res, cases[i].want);
    if (cases[i].want == ncclSuccess) {
      brd_config_fini(&out);
    } else {
      if (strstr(brd_log_last_error(), cases[i].field) == NULL)
        fail_msg("case %s: WARN \"%s\" does not name %s", cases[i].what,
                 brd_log_last_error(), cases[i].field);
      assert_int_equal(out.blocking, 0x33333333);
    }
  }
}

static void test_clamps(void **state) {
  (void)state;
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER, out;
  /* Above the channel limit: capped to 64, not rejected. */
  user.minCTAs = 100;
  user.maxCTAs = 200;
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_int_equal(out.minCTAs, 64);
  assert_int_equal(out.maxCTAs, 64);
  brd_config_fini(&out);
  /* A cluster larger than a GPU allows is limited to 8. */
  ncclConfig_t big = NCCL_CONFIG_INITIALIZER;
  big.cgaClusterSize = 16;
  assert_int_equal(brd_config_resolve(&big, NULL, &out), ncclSuccess);
  assert_int_equal(out.cgaClusterSize, 8);
  brd_config_fini(&out);
}

static void test_env_overrides(void **state) {
  (void)state;
  ncclConfig_t out;
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.blocking = 1;
  user.netName = "IB";

  setenv_reload("NCCL_COMM_BLOCKING", "0");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  brd_config_fini(&out);
  /* The environment wins over the application, as in NCCL. */
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  brd_config_fini(&out);
  /* A value other than 0/1 is ignored. */
  setenv_reload("NCCL_COMM_BLOCKING", "7");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 1);
  brd_config_fini(&out);
  unsetenv("NCCL_COMM_BLOCKING");

  setenv_reload("NCCL_CGA_CLUSTER_SIZE", "12");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.cgaClusterSize, 8);
  brd_config_fini(&out);
  setenv_reload("NCCL_CGA_CLUSTER_SIZE", "0");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.cgaClusterSize, 0);
  brd_config_fini(&out);
  setenv_reload("NCCL_CGA_CLUSTER_SIZE", "-3");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.cgaClusterSize, 4);
  brd_config_fini(&out);
  unsetenv("NCCL_CGA_CLUSTER_SIZE");

  setenv_reload("NCCL_MIN_CTAS", "0");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.minCTAs, 1);
  brd_config_fini(&out);
  setenv("NCCL_MIN_CTAS", "40", 1);
  setenv_reload("NCCL_MAX_CTAS", "20");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.minCTAs, 20);
  assert_int_equal(out.maxCTAs, 20);
  brd_config_fini(&out);
  unsetenv("NCCL_MIN_CTAS");
  unsetenv("NCCL_MAX_CTAS");

  setenv_reload("NCCL_NET", "Socket");
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_string_equal(out.netName, "Socket");
  brd_config_fini(&out);
  unsetenv("NCCL_NET");

  setenv_reload("NCCL_COMM_SPLIT_SHARE_RESOURCES", "1");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.splitShare, 1);
  brd_config_fini(&out);
  setenv_reload("NCCL_COMM_SPLIT_SHARE_RESOURCES", "3");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.splitShare, 0);
  brd_config_fini(&out);
  unsetenv("NCCL_COMM_SPLIT_SHARE_RESOURCES");

  setenv_reload("NCCL_CTA_POLICY", "9");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.CTAPolicy, 0);
  brd_config_fini(&out);
  setenv_reload("NCCL_CTA_POLICY", "1");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.CTAPolicy, 1);
  brd_config_fini(&out);
  unsetenv("NCCL_CTA_POLICY");

  setenv_reload("NCCL_NVLS_NCHANNELS", "-1");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.nvlsCTAs, INT_MIN);
  brd_config_fini(&out);
  setenv_reload("NCCL_NVLS_NCHANNELS", "24");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.nvlsCTAs, 24);
  brd_config_fini(&out);
  unsetenv("NCCL_NVLS_NCHANNELS");

  setenv_reload("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "1");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.nvlinkCentricSched, 1);
  brd_config_fini(&out);
  unsetenv("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE");

  setenv_reload("NCCL_NCHANNELS_PER_NET_PEER", "6");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.nChannelsPerNetPeer, 6);
  brd_config_fini(&out);
  unsetenv("NCCL_NCHANNELS_PER_NET_PEER");

  /* NCCL_COLLNET_ENABLE is read afresh each time, without a reload. */
  setenv_reload("NCCL_COLLNET_ENABLE", "1");
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.collnetEnable, 1);
  brd_config_fini(&out);
  setenv("NCCL_COLLNET_ENABLE", "0", 1);
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.collnetEnable, 0);
  brd_config_fini(&out);
}

static void test_env_from_conf_file(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof(path), "%s/.nccl.conf", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "NCCL_COMM_BLOCKING=0\nNCCL_MAX_CTAS=3\n");
  fclose(f);
  brd_param_reload();
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve(NULL, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  assert_int_equal(out.maxCTAs, 3);
  brd_config_fini(&out);
  unlink(path);
}

/* The 2.29/2.30 fields: a 2.28 program's 80-byte struct (size 80,
 * version 22809) followed by bytes that would be invalid as those fields
 * resolves with their defaults; a 2.30 struct keeps valid values and has
 * invalid ones refused, naming the field. Offsets are NVIDIA's (80..92). */
static void test_v2_30_fields(void **state) {
  (void)state;
  union {
    unsigned char bytes[96];
    ncclConfig_t config;
  } u;
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER, out;
  const int bad[4] = {-7, -1, -2, 5};
  assert_int_equal(sizeof(ncclConfig_t), 96);
  assert_int_equal(offsetof(ncclConfig_t, graphUsageMode), 80);
  assert_int_equal(offsetof(ncclConfig_t, graphStreamOrdering), 92);

  memcpy(&u.config, &init, sizeof(init));
  u.config.size = 80;
  u.config.version = 22809;
  u.config.blocking = 0;
  memcpy(u.bytes + 80, bad, sizeof(bad));
  assert_int_equal(brd_config_resolve(&u.config, NULL, &out), ncclSuccess);
  assert_int_equal(out.blocking, 0);
  assert_int_equal(out.graphUsageMode, INT_MIN);
  assert_int_equal(out.numRmaCtx, 1);
  assert_int_equal(out.maxP2pPeers, INT_MIN);
  assert_int_equal(out.graphStreamOrdering, 0);
  assert_int_equal(out.size, 96);
  assert_int_equal(out.version, 23007);
  brd_config_fini(&out);

  /* A full-size struct claiming 2.29: the 2.30 fields are not read. */
  memcpy(&u.config, &init, sizeof(init));
  u.config.version = 22907;
  u.config.graphUsageMode = 2;
  u.config.numRmaCtx = 4;
  u.config.maxP2pPeers = -9;
  u.config.graphStreamOrdering = 9;
  assert_int_equal(brd_config_resolve(&u.config, NULL, &out), ncclSuccess);
  assert_int_equal(out.graphUsageMode, 2);
  assert_int_equal(out.numRmaCtx, 4);
  assert_int_equal(out.maxP2pPeers, INT_MIN);
  assert_int_equal(out.graphStreamOrdering, 0);
  brd_config_fini(&out);

  /* 2.30: valid values kept, each invalid one refused by name. */
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.graphUsageMode = 1;
  user.numRmaCtx = 3;
  user.maxP2pPeers = 17;
  user.graphStreamOrdering = 1;
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_int_equal(out.graphUsageMode, 1);
  assert_int_equal(out.numRmaCtx, 3);
  assert_int_equal(out.maxP2pPeers, 17);
  assert_int_equal(out.graphStreamOrdering, 1);
  brd_config_fini(&out);
  static const struct {
    size_t off;
    int value;
    const char *name;
  } refused[] = {
      {offsetof(ncclConfig_t, graphUsageMode), -3, "graphUsageMode"},
      {offsetof(ncclConfig_t, numRmaCtx), 0, "numRmaCtx"},
      {offsetof(ncclConfig_t, maxP2pPeers), -1, "maxP2pPeers"},
      {offsetof(ncclConfig_t, graphStreamOrdering), 2, "graphStreamOrdering"},
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    memcpy((char *)&c + refused[i].off, &refused[i].value, sizeof(int));
    assert_int_equal(brd_config_resolve(&c, NULL, &out), ncclInvalidArgument);
    assert_non_null(strstr(brd_log_last_error(), refused[i].name));
  }
}

static void test_alloc_failure_unwinds(void **state) {
  (void)state;
  ncclConfig_t user = NCCL_CONFIG_INITIALIZER;
  user.netName = "IB";
  user.commName = "name";
  for (int fail_at = 0; fail_at < 2; fail_at++) {
    ncclConfig_t out, before;
    memset(&out, 0x44, sizeof(out));
    memcpy(&before, &out, sizeof(out));
    strdup_fail_in = fail_at;
    assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSystemError);
    strdup_fail_in = -1;
    assert_memory_equal(&out, &before, sizeof(out));
    assert_non_null(strstr(brd_log_last_error(), "out of host memory"));
  }
  ncclConfig_t out;
  assert_int_equal(brd_config_resolve(&user, NULL, &out), ncclSuccess);
  assert_string_equal(out.commName, "name");
  brd_config_fini(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_null_config, setup),
      cmocka_unit_test_setup(test_bad_magic, setup),
      cmocka_unit_test_setup(test_user_values, setup),
      cmocka_unit_test_setup(test_v2_14_struct_with_garbage_after, setup),
      cmocka_unit_test_setup(test_old_version_full_size, setup),
      cmocka_unit_test_setup(test_larger_size, setup),
      cmocka_unit_test_setup(test_inherit, setup),
      cmocka_unit_test_setup(test_ranges, setup),
      cmocka_unit_test_setup(test_clamps, setup),
      cmocka_unit_test_setup(test_env_overrides, setup),
      cmocka_unit_test_setup(test_env_from_conf_file, setup),
      cmocka_unit_test_setup(test_v2_30_fields, setup),
      cmocka_unit_test_setup(test_alloc_failure_unwinds, setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
