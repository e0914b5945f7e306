/*
 * Net plugins: the loader (NCCL_NET_PLUGIN names, paths, lists, none,
 * NCCL_NET selection, fallback to the built-in nets) and the adapters from
 * ncclNet_v6/v8/v10/v11/v12 to brd_net_ops_t, driven against the TCP test
 * plugin (tests/plugins/net_test.c) built once per version in
 * <build>/tests/plugins. Expected values come from the plugin's constants
 * and from NCCL's documented conversions (1 GiB cap and default vProps for
 * old versions, railId -1 before v12), not from the adapter; data is
 * checked byte for byte after crossing a real socket.
 */
#include <dlfcn.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testenv.h"
#include "../plugins/net_test.h"

#include "base/debug.h"
#include "base/param.h"
#include "core/comm.h"
#include "core/proxy.h"
#include "core/window.h"
#include "nccl.h"
#include "transport/net.h"
#include "transport/net_plugin.h"

#define SEC 1000000000LL
static char plugdir[1024];  /* <build>/tests/plugins */

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * SEC + ts.tv_nsec;
}

static void lib_file(char *out, size_t n, const char *which) {
  snprintf(out, n, "%s/libnccl-net-%s.so", plugdir, which);
}

static void expect_last_error(const char *needle) {
  const char *msg = brd_log_last_error();
  if (strstr(msg, needle) == NULL)
    fail_msg("last error \"%s\" does not mention \"%s\"", msg, needle);
}

static void env_clean(void) {
  brd_test_env_clear();
  unsetenv("NETTEST_FAULT");
  unsetenv("NETTEST_NDEV");
  unsetenv("NETTEST_DEVTYPE");
  unsetenv("NETTEST_DEVVER");
  brd_param_reload();
}

static int setup(void **state) {
  (void)state;
  brd_net_reset();
  env_clean();
  brd_log_set_last_error("(none)");
  return 0;
}

/* Plugins a failed test left loaded, unloaded by teardown so the next test
 * starts clean. */
static brd_net_plugin_t *left[BRD_NET_PLUGIN_SLOTS];

static void track(brd_net_plugin_t *p, int on) {
  for (int i = 0; i < BRD_NET_PLUGIN_SLOTS; i++)
    if (on ? left[i] == NULL : left[i] == p) {
      left[i] = on ? p : NULL;
      return;
    }
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < BRD_NET_PLUGIN_SLOTS; i++) {
    brd_net_plugin_unload(left[i]);
    left[i] = NULL;
  }
  brd_net_reset();
  env_clean();
  return 0;
}

/* ---- a loaded test plugin and its counters ---- */

typedef struct {
  brd_net_plugin_t *p;
  const brd_net_ops_t *net;
  const long *c;            /* the plugin's nettest_counts_vN */
  long base[NT_NCOUNTERS];  /* at load */
  int ver;
} tp_t;

static const long *counters_of(const char *file, int ver) {
  void *h = dlopen(file, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) fail_msg("%s is not loaded", file);
  char sym[64];
  snprintf(sym, sizeof(sym), "nettest_counts_v%d", ver);
  const long *c = dlsym(h, sym);
  if (c == NULL) fail_msg("%s has no %s", file, sym);
  dlclose(h);  /* the adapter keeps its own reference */
  return c;
}

static void tp_load(tp_t *t, const char *which, int ver) {
  char file[PATH_MAX];
  lib_file(file, sizeof(file), which);
  memset(t, 0, sizeof(*t));
  assert_int_equal(brd_net_plugin_load(file, &t->p), ncclSuccess);
  track(t->p, 1);
  t->net = brd_net_plugin_ops(t->p);
  t->ver = ver;
  t->c = counters_of(file, ver);
  memcpy(t->base, t->c, sizeof(t->base));
}

static long tp_count(const tp_t *t, int i) { return t->c[i] - t->base[i]; }

static void tp_unload(tp_t *t) {
  track(t->p, 0);
  brd_net_plugin_unload(t->p);
  t->p = NULL;
}

/* ---- connection and transfer helpers (deadline-bound) ---- */

typedef struct {
  void *l, *s, *r;
} conn_t;

/* listen, then connect and accept until both are up (as the proxy does),
 * or until one fails; returns that result. */
static ncclResult_t conn_open(const brd_net_ops_t *net, void *ctx, conn_t *cn) {
  char handle[BRD_NET_HANDLE_BYTES] = {0};
  memset(cn, 0, sizeof(*cn));
  ncclResult_t r = net->listen(ctx, 0, handle, &cn->l);
  if (r != ncclSuccess) return r;
  assert_non_null(cn->l);
  long long end = now_ns() + 5 * SEC;
  while (cn->s == NULL || cn->r == NULL) {
    if (cn->s == NULL && (r = net->connect(ctx, 0, handle, &cn->s, NULL)) != ncclSuccess)
      return r;
    if (cn->r == NULL && (r = net->accept(cn->l, &cn->r, NULL)) != ncclSuccess) return r;
    if (now_ns() > end) fail_msg("connect/accept did not finish in 5 s");
  }
  return ncclSuccess;
}

static void conn_close(const brd_net_ops_t *net, conn_t *cn) {
  if (cn->s) assert_int_equal(net->closeSend(cn->s), ncclSuccess);
  if (cn->r) assert_int_equal(net->closeRecv(cn->r), ncclSuccess);
  if (cn->l) assert_int_equal(net->closeListen(cn->l), ncclSuccess);
  memset(cn, 0, sizeof(*cn));
}

static unsigned char pat(size_t i, size_t size) { return (unsigned char)(i * 7 + size * 13 + 1); }

/* One message of size bytes into a receive of size + 9 bytes, with the
 * optional-completion sentinel preset on the receive. Returns the first
 * failing result (send or receive side); checks data and sizes on success. */
static ncclResult_t transfer(const brd_net_ops_t *net, conn_t *cn, size_t size) {
  ncclResult_t res = ncclSuccess;
  size_t rcap = size + 9;
  unsigned char *sb = malloc(size ? size : 1), *rb = malloc(rcap);
  assert_non_null(sb);
  assert_non_null(rb);
  for (size_t i = 0; i < size; i++) sb[i] = pat(i, size);
  memset(rb, 0xee, rcap);
  void *smr = NULL, *rmr = NULL;
  assert_int_equal(net->regMr(cn->s, sb, size, BRD_NET_PTR_HOST, &smr), ncclSuccess);
  assert_int_equal(net->regMr(cn->r, rb, rcap, BRD_NET_PTR_HOST, &rmr), ncclSuccess);

  void *sreq = NULL, *rreq = (void *)0x1;  /* NCCL_NET_OPTIONAL_RECV_COMPLETION */
  long long end = now_ns() + 10 * SEC;
  while (sreq == NULL) {
    if ((res = net->isend(cn->s, sb, size, 0, smr, NULL, &sreq)) != ncclSuccess) goto out;
    if (now_ns() > end) fail_msg("isend posted nothing in 10 s");
  }
  void *data[1] = {rb};
  size_t sizes[1] = {rcap};
  int tags[1] = {0};
  void *mhs[1] = {rmr};
  if ((res = net->irecv(cn->r, 1, data, sizes, tags, mhs, NULL, &rreq)) != ncclSuccess) goto out;
  assert_non_null(rreq);
  assert_ptr_not_equal(rreq, (void *)0x1);
  int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
  while (!sdone || !rdone) {
    if (!sdone && (res = net->test(sreq, &sdone, &ssize)) != ncclSuccess) goto out;
    if (!rdone && (res = net->test(rreq, &rdone, &rsize)) != ncclSuccess) goto out;
    if (now_ns() > end) fail_msg("a %zu-byte transfer did not finish in 10 s", size);
  }
  assert_int_equal(ssize, (int)size);
  assert_int_equal(rsize, (int)size);
  for (size_t i = 0; i < size; i++)
    if (rb[i] != pat(i, size)) fail_msg("byte %zu of %zu: got %u", i, size, rb[i]);
  for (size_t i = size; i < rcap; i++) assert_int_equal(rb[i], 0xee);
out:
  assert_int_equal(net->deregMr(cn->s, smr), ncclSuccess);
  assert_int_equal(net->deregMr(cn->r, rmr), ncclSuccess);
  free(sb);
  free(rb);
  return res;
}

/* ---- versions ---- */

static const struct {
  const char *lib;
  int ver;
  const char *name;
} plugins[] = {
    {"testv6", 6, "TestNet_v6"},     {"testv8", 8, "TestNet_v8"},
    {"testv10", 10, "TestNet_v10"},  {"testv11", 11, "TestNet_v11"},
    {"testv12", 12, "TestNet_v12"},  {"testv12lazy", 12, "TestNetLazy_v12"},
};
#define NPLUGINS (sizeof(plugins) / sizeof(plugins[0]))

static void test_every_version_loads(void **state) {
  (void)state;
  for (size_t i = 0; i < NPLUGINS; i++) {
    tp_t t;
    tp_load(&t, plugins[i].lib, plugins[i].ver);
    assert_int_equal(brd_net_plugin_version(t.p), plugins[i].ver);
    assert_int_equal(brd_net_plugin_collnet_version(t.p), plugins[i].ver == 10 ? 10 : 0);
    assert_string_equal(t.net->name, plugins[i].name);
    assert_non_null(strstr(brd_net_plugin_path(t.p), plugins[i].lib));
    assert_int_equal(tp_count(&t, NT_INIT), 0);  /* loading never inits */
    tp_unload(&t);
  }
}

/* Properties as each version can express them; the rest are NCCL's
 * defaults for older plugins. */
static void check_props(int ver, const brd_net_props_t *p) {
  assert_string_equal(p->name, "lo-test");
  assert_int_equal(p->guid, NT_GUID);
  assert_int_equal(p->ptrSupport, BRD_NET_PTR_HOST);
  assert_int_equal(p->speed, NT_SPEED);
  assert_int_equal(p->port, NT_PORT);
  assert_true(p->latency == NT_LATENCY);
  assert_int_equal(p->maxComms, NT_MAXCOMMS);
  assert_int_equal(p->maxRecvs, 1);
  assert_int_equal(p->netDeviceType, 0);
  assert_int_equal(p->regIsGlobal, ver >= 8 ? 1 : 0);
  assert_int_equal(p->forceFlush, ver >= 9 ? 1 : 0);
  assert_int_equal(p->vProps.ndevs, 1);
  assert_int_equal(p->vProps.devs[0], 0);
  assert_int_equal(p->maxP2pBytes, ver >= 9 ? NT_MAXP2P : (1ull << 30));
  assert_int_equal(p->maxCollBytes, ver >= 9 ? NT_MAXCOLL : (512ull << 20));
  assert_int_equal(p->maxMultiRequestSize, ver >= 11 ? NT_MAXMULTI : 1);
  assert_int_equal(p->railId, ver >= 12 ? NT_RAIL : -1);
  assert_int_equal(p->planeId, ver >= 12 ? NT_PLANE : -1);
}

static void test_transfer_every_version(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 7, 4099, 65536 + 3, (1u << 20) + 5};
  const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
  for (size_t i = 0; i < NPLUGINS; i++) {
    tp_t t;
    tp_load(&t, plugins[i].lib, plugins[i].ver);
    const brd_net_ops_t *net = t.net;
    void *ctx = NULL;
    brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
    assert_int_equal(net->init(&ctx, 0x1234, &cfg, brd_net_log, NULL), ncclSuccess);
    assert_non_null(ctx);
    int ndev = 0;
    assert_int_equal(net->devices(&ndev), ncclSuccess);
    assert_int_equal(ndev, 1);
    brd_net_props_t props;
    assert_int_equal(net->getProperties(0, &props), ncclSuccess);
    check_props(t.ver, &props);

    conn_t cn;
    assert_int_equal(conn_open(net, ctx, &cn), ncclSuccess);
    for (size_t k = 0; k < nsizes; k++)
      if (transfer(net, &cn, sizes[k]) != ncclSuccess)
        fail_msg("%s: %zu bytes: %s", plugins[i].lib, sizes[k], brd_log_last_error());
    conn_close(net, &cn);
    assert_int_equal(net->finalize(ctx), ncclSuccess);

    assert_int_equal(tp_count(&t, NT_INIT), 1);
    assert_int_equal(tp_count(&t, NT_FINALIZE), t.ver >= 11 ? 1 : 0);
    assert_int_equal(tp_count(&t, NT_ISEND), (long)nsizes);
    assert_int_equal(tp_count(&t, NT_IRECV), (long)nsizes);
    assert_int_equal(tp_count(&t, NT_REGMR), 2 * (long)nsizes);
    assert_int_equal(tp_count(&t, NT_DEREGMR), 2 * (long)nsizes);
    assert_int_equal(tp_count(&t, NT_LISTEN), 1);
    assert_int_equal(tp_count(&t, NT_CLOSE_SEND), 1);
    assert_int_equal(tp_count(&t, NT_CLOSE_RECV), 1);
    assert_int_equal(tp_count(&t, NT_CLOSE_LISTEN), 1);
    /* v6..v8 never see the optional-completion sentinel; v9+ do. */
    assert_int_equal(tp_count(&t, NT_SENTINEL), t.ver >= 9 ? (long)nsizes : 0);
    assert_int_equal(tp_count(&t, NT_BAD_CTX), 0);
    assert_int_equal(tp_count(&t, NT_BAD_MHANDLE), 0);
    assert_true(tp_count(&t, NT_LOGGED) >= 1);  /* the logger pointer reached the plugin */
    if (t.ver >= 11) assert_int_equal(t.c[NT_LAST_COMMID], 0x1234);
    tp_unload(&t);
  }
}

/* v6..v10 initialise once however many communicators init; v11+ once per
 * init, with a finalize each. v10's connect gets the init's config. */
static void test_init_counts(void **state) {
  (void)state;
  for (size_t i = 0; i < NPLUGINS; i++) {
    tp_t t;
    tp_load(&t, plugins[i].lib, plugins[i].ver);
    void *c1 = NULL, *c2 = NULL;
    brd_net_config_t cfg1 = {5}, cfg2 = {7};
    assert_int_equal(t.net->init(&c1, 11, &cfg1, brd_net_log, NULL), ncclSuccess);
    assert_int_equal(t.net->init(&c2, 22, &cfg2, brd_net_log, NULL), ncclSuccess);
    assert_ptr_not_equal(c1, c2);
    assert_int_equal(tp_count(&t, NT_INIT), t.ver >= 11 ? 2 : 1);
    if (t.ver >= 11) {
      assert_int_equal(t.c[NT_LAST_TC], 7);
      assert_int_equal(t.c[NT_LAST_COMMID], 22);
    }
    conn_t cn;
    assert_int_equal(conn_open(t.net, c1, &cn), ncclSuccess);
    if (t.ver == 10) assert_int_equal(t.c[NT_LAST_TC], 5);  /* c1's config */
    conn_close(t.net, &cn);
    assert_int_equal(conn_open(t.net, c2, &cn), ncclSuccess);
    if (t.ver == 10) assert_int_equal(t.c[NT_LAST_TC], 7);
    conn_close(t.net, &cn);
    assert_int_equal(t.net->finalize(c1), ncclSuccess);
    assert_int_equal(t.net->finalize(c2), ncclSuccess);
    assert_int_equal(tp_count(&t, NT_FINALIZE), t.ver >= 11 ? 2 : 0);
    /* A third communicator after all finalized: still no second old init. */
    assert_int_equal(t.net->init(&c1, 33, NULL, brd_net_log, NULL), ncclSuccess);
    assert_int_equal(tp_count(&t, NT_INIT), t.ver >= 11 ? 3 : 1);
    if (t.ver >= 11) assert_int_equal(t.c[NT_LAST_TC], -1);  /* no config: undefined */
    assert_int_equal(t.net->finalize(c1), ncclSuccess);
    assert_int_equal(tp_count(&t, NT_BAD_CTX), 0);
    tp_unload(&t);
  }
}

/* A plugin whose exported table holds only name and init until init: the
 * adapter must not have read the rest earlier. */
static void test_pointers_read_after_init(void **state) {
  (void)state;
  tp_t t;
  tp_load(&t, "testv12lazy", 12);
  int ndev = -1;
  assert_int_equal(t.net->devices(&ndev), ncclInternalError);  /* refused, no crash */
  expect_last_error("before init");
  assert_null(t.net->setNetAttr);
  assert_null(t.net->makeVDevice);
  void *ctx = NULL;
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_non_null(t.net->setNetAttr);
  assert_non_null(t.net->makeVDevice);
  assert_null(t.net->regMrDmaBuf);   /* the plugin has none */
  assert_null(t.net->getDeviceMr);
  assert_int_equal(t.net->devices(&ndev), ncclSuccess);
  assert_int_equal(ndev, 1);
  conn_t cn;
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  assert_int_equal(transfer(t.net, &cn, 3333), ncclSuccess);
  conn_close(t.net, &cn);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  assert_int_equal(tp_count(&t, NT_FINALIZE), 1);
  tp_unload(&t);
}

static void test_newest_version_wins(void **state) {
  (void)state;
  char file[PATH_MAX];
  lib_file(file, sizeof(file), "testmulti");
  brd_net_plugin_t *p = NULL;
  assert_int_equal(brd_net_plugin_load(file, &p), ncclSuccess);
  track(p, 1);
  assert_int_equal(brd_net_plugin_version(p), 12);
  assert_string_equal(brd_net_plugin_ops(p)->name, "TestNet_v12");
  const long *c8 = counters_of(file, 8), *c12 = counters_of(file, 12);
  long i8 = c8[NT_INIT], i12 = c12[NT_INIT];
  void *ctx = NULL;
  assert_int_equal(brd_net_plugin_ops(p)->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(c12[NT_INIT] - i12, 1);
  assert_int_equal(c8[NT_INIT] - i8, 0);
  assert_int_equal(brd_net_plugin_ops(p)->finalize(ctx), ncclSuccess);
  track(p, 0);
  brd_net_plugin_unload(p);
}

static void test_vdevice_and_attr(void **state) {
  (void)state;
  tp_t t;
  void *ctx = NULL;
  int d = -1;
  brd_net_vprops_t vp = {2, {0, 1}};

  tp_load(&t, "testv10", 10);  /* 4 devices per vNIC, no setNetAttr */
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_null(t.net->setNetAttr);
  assert_int_equal(t.net->makeVDevice(&d, &vp), ncclSuccess);
  assert_int_equal(d, 102);
  assert_int_equal(t.c[NT_VDEV_NDEVS], 2);
  brd_net_vprops_t wide = {6, {0, 1, 2, 3, 4, 5}};
  assert_int_equal(t.net->makeVDevice(&d, &wide), ncclInvalidUsage);
  expect_last_error("at most 4");
  assert_int_equal(tp_count(&t, NT_VDEV), 1);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);

  tp_load(&t, "testv12", 12);  /* 8 devices per vNIC */
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(t.net->makeVDevice(&d, &wide), ncclSuccess);
  assert_int_equal(d, 106);
  brd_net_attr_t attr = {{1, 1, 2, 2}, {3, 3, 4, 4}, 1, 2, 4};
  assert_int_equal(t.net->setNetAttr(ctx, &attr), ncclSuccess);
  assert_int_equal(tp_count(&t, NT_SETATTR), 1);
  assert_int_equal(tp_count(&t, NT_BAD_CTX), 0);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);

  tp_load(&t, "testv8", 8);
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_null(t.net->makeVDevice);
  assert_null(t.net->setNetAttr);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);
}

/* int sizes before v9: the adapter refuses what would not fit (1 GiB cap
 * for transfers, INT_MAX for v6/v7 registrations) without calling. */
static void test_old_size_limits(void **state) {
  (void)state;
  tp_t t;
  tp_load(&t, "testv8", 8);
  void *ctx = NULL;
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  conn_t cn;
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  char b[8];
  void *mr = NULL, *req = NULL;
  assert_int_equal(t.net->regMr(cn.s, b, sizeof(b), BRD_NET_PTR_HOST, &mr), ncclSuccess);
  assert_int_equal(t.net->isend(cn.s, b, (1ull << 30) + 1, 0, mr, NULL, &req),
                   ncclInternalError);
  expect_last_error("int size");
  assert_null(req);
  void *data[1] = {b};
  size_t sizes[1] = {(size_t)INT_MAX + 10};
  int tags[1] = {0};
  void *mhs[1] = {mr};
  assert_int_equal(t.net->irecv(cn.r, 1, data, sizes, tags, mhs, NULL, &req), ncclInternalError);
  assert_int_equal(tp_count(&t, NT_ISEND), 0);
  assert_int_equal(tp_count(&t, NT_IRECV), 0);
  assert_int_equal(t.net->deregMr(cn.s, mr), ncclSuccess);
  conn_close(t.net, &cn);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);

  tp_load(&t, "testv6", 6);
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  assert_int_equal(t.net->regMr(cn.s, b, (size_t)INT_MAX + 1, BRD_NET_PTR_HOST, &mr),
                   ncclInternalError);
  expect_last_error("regMr takes an int size");
  assert_int_equal(tp_count(&t, NT_REGMR), 0);
  conn_close(t.net, &cn);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);
}

/* ---- injected faults: each comes back as an error, never a hang ---- */

static void test_fault_connect_refused(void **state) {
  (void)state;
  static const char *const libs[] = {"testv6", "testv10", "testv12"};
  static const int vers[] = {6, 10, 12};
  for (int i = 0; i < 3; i++) {
    tp_t t;
    tp_load(&t, libs[i], vers[i]);
    void *ctx = NULL;
    assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
    setenv("NETTEST_FAULT", "connect_refused", 1);
    conn_t cn;
    assert_int_equal(conn_open(t.net, ctx, &cn), ncclRemoteError);
    expect_last_error("connect failed: ncclRemoteError");
    unsetenv("NETTEST_FAULT");
    assert_null(cn.s);
    if (cn.r) assert_int_equal(t.net->closeRecv(cn.r), ncclSuccess);
    assert_int_equal(t.net->closeListen(cn.l), ncclSuccess);
    assert_int_equal(t.net->finalize(ctx), ncclSuccess);
    tp_unload(&t);
  }
}

static void test_fault_test_error(void **state) {
  (void)state;
  tp_t t;
  tp_load(&t, "testv11", 11);
  void *ctx = NULL;
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  conn_t cn;
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  setenv("NETTEST_FAULT", "test_error", 1);
  assert_int_equal(transfer(t.net, &cn, 1000), ncclSystemError);
  expect_last_error("TestNet_v11 (v11) test failed: ncclSystemError");
  unsetenv("NETTEST_FAULT");
  conn_close(t.net, &cn);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);
}

static void test_fault_short_recv(void **state) {
  (void)state;
  static const char *const libs[] = {"testv6", "testv12"};
  static const int vers[] = {6, 12};
  for (int i = 0; i < 2; i++) {
    tp_t t;
    tp_load(&t, libs[i], vers[i]);
    void *ctx = NULL;
    assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
    conn_t cn;
    assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
    setenv("NETTEST_FAULT", "short_recv", 1);
    assert_int_equal(transfer(t.net, &cn, 65536), ncclRemoteError);
    /* A remote error in the data path is left to the proxy to WARN; the
     * plugin's own message is what the user sees. */
    expect_last_error("nettest: connection closed after 32768 of 65536 bytes");
    unsetenv("NETTEST_FAULT");
    conn_close(t.net, &cn);
    assert_int_equal(t.net->finalize(ctx), ncclSuccess);
    tp_unload(&t);
  }
}

static void test_fault_init(void **state) {
  (void)state;
  static const char *const libs[] = {"testv8", "testv12"};
  static const int vers[] = {8, 12};
  for (int i = 0; i < 2; i++) {
    tp_t t;
    tp_load(&t, libs[i], vers[i]);
    setenv("NETTEST_FAULT", "init", 1);
    void *ctx = (void *)0x77;
    assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSystemError);
    assert_ptr_equal(ctx, (void *)0x77);  /* untouched on failure */
    expect_last_error("init failed");
    unsetenv("NETTEST_FAULT");
    /* A later init may still succeed, and an old plugin then inits once. */
    assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
    assert_int_equal(tp_count(&t, NT_INIT), 2);
    assert_int_equal(t.net->finalize(ctx), ncclSuccess);
    tp_unload(&t);
  }
}

/* The why member: what this thread's failed call said, the adapter's words
 * and the plugin's own message; a WARN another thread gives afterwards (and
 * that thread's own view) does not change it. */
static void *warn_elsewhere(void *arg) {
  const brd_net_ops_t *net = arg;
  char why[64];
  brd_net_log(2, 0x10, __FILE__, __LINE__, "NET/Plugin: another thread's failure");
  /* This thread made no failed call: nothing to say. */
  return net->why(NULL, why, sizeof(why)) == 0 ? (void *)1 : NULL;
}

static void test_fault_why(void **state) {
  (void)state;
  tp_t t;
  tp_load(&t, "testv12", 12);
  void *ctx = NULL;
  assert_int_equal(t.net->init(&ctx, 1, NULL, brd_net_log, NULL), ncclSuccess);
  assert_non_null(t.net->why);
  conn_t cn;
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  char why[768];
  /* A plugin that says nothing, returning an error: the adapter's words. */
  setenv("NETTEST_FAULT", "test_error", 1);
  assert_int_equal(transfer(t.net, &cn, 1000), ncclSystemError);
  unsetenv("NETTEST_FAULT");
  assert_true(t.net->why(cn.r, why, sizeof(why)) > 0);
  if (strstr(why, "TestNet_v12 (v12) test failed: ncclSystemError") == NULL ||
      strstr(why, "nettest: injected test failure") == NULL)
    fail_msg("why: %s", why);
  /* Another thread's WARN afterwards: the process's last error, not this
   * call's record. */
  pthread_t th;
  void *quiet = NULL;
  assert_int_equal(pthread_create(&th, NULL, warn_elsewhere, (void *)t.net), 0);
  assert_int_equal(pthread_join(th, &quiet), 0);
  assert_ptr_equal(quiet, (void *)1);
  expect_last_error("another thread's failure");
  char again[768];
  assert_int_equal(t.net->why(cn.r, again, sizeof(again)), strlen(why));
  assert_string_equal(again, why);
  conn_close(t.net, &cn);
  /* A remote end: the adapter only notes it (INFO); the plugin's WARN
   * during the call makes it a record. */
  assert_int_equal(conn_open(t.net, ctx, &cn), ncclSuccess);
  setenv("NETTEST_FAULT", "short_recv", 1);
  assert_int_equal(transfer(t.net, &cn, 65536), ncclRemoteError);
  unsetenv("NETTEST_FAULT");
  assert_true(t.net->why(cn.r, why, sizeof(why)) > 0);
  if (strstr(why, "ncclRemoteError") == NULL ||
      strstr(why, "nettest: connection closed after 32768 of 65536 bytes") == NULL)
    fail_msg("why: %s", why);
  conn_close(t.net, &cn);
  assert_int_equal(t.net->finalize(ctx), ncclSuccess);
  tp_unload(&t);
}

/* ---- two communicators of one process fail at once, each its own way ----
 *
 * Process A holds rank 0 of two 2-rank communicators (a thread each);
 * process B is rank 1 of the first and sends half a message and closes
 * (short_recv), process C rank 1 of the second and sends a header that
 * claims too much (oversize). Both run over the test plugin as "another
 * host", so A's two proxies fail together, on their own threads, for
 * different reasons: each proxy's failure must carry its own. */

#define TWO_COUNT (1 << 20) /* 4 MiB: slot-sized messages, over NETTEST_FAULT_MIN */

typedef struct {
  ncclUniqueId id;
  int result;
  char why[1000];
} two_rank_t;

static void two_stage(const char *host, const char *fault) {
  char lib[PATH_MAX];
  lib_file(lib, sizeof(lib), "testv12");
  brd_test_env_clear();
  unsetenv("NETTEST_FAULT");
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_HOSTID", host, 1);
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "20", 1);
  setenv("BRAID_TIMEOUT", "20", 1);
  setenv("NCCL_NET_PLUGIN", lib, 1);
  if (fault != NULL) {
    setenv("NETTEST_FAULT", fault, 1);
    setenv("NETTEST_FAULT_MIN", "65536", 1);
  }
  brd_param_reload();
  brd_net_reset();
}

static void two_fill(float *buf, int rank) {
  for (int i = 0; i < TWO_COUNT; i++) buf[i] = (float)(rank + 1 + i % 7);
}

static void *two_rank0(void *arg) {
  two_rank_t *t = arg;
  ncclComm_t comm;
  float *buf = malloc(TWO_COUNT * sizeof(float));
  t->result = ncclCommInitRank(&comm, 2, t->id, 0);
  if (t->result != ncclSuccess) {
    snprintf(t->why, sizeof(t->why), "init failed: %s", brd_log_last_error());
  } else {
    two_fill(buf, 0);
    t->result = ncclAllReduce(buf, buf, TWO_COUNT, ncclFloat, ncclSum, comm, NULL);
    const char *why = comm->rt != NULL ? brd_proxy_failure(comm->rt->proxy) : NULL;
    snprintf(t->why, sizeof(t->why), "%s", why != NULL ? why : "(the proxy did not fail)");
    ncclCommAbort(comm);
  }
  free(buf);
  return NULL;
}

static void two_peer(ncclUniqueId id, const char *fault) {
  ncclComm_t comm;
  two_stage("node-b", fault);
  if (ncclCommInitRank(&comm, 2, id, 1) == ncclSuccess) {
    float *buf = malloc(TWO_COUNT * sizeof(float));
    two_fill(buf, 1);
    (void)ncclAllReduce(buf, buf, TWO_COUNT, ncclFloat, ncclSum, comm, NULL);
    ncclCommAbort(comm);
    free(buf);
  }
  _exit(0);
}

static void test_two_comms_own_cause(void **state) {
  (void)state;
  two_rank_t t[2];
  int fds[2];
  pid_t pids[3];
  memset(t, 0, sizeof(t));
  two_stage("node-a", NULL);
  assert_int_equal(ncclGetUniqueId(&t[0].id), ncclSuccess);
  assert_int_equal(ncclGetUniqueId(&t[1].id), ncclSuccess);
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  for (int k = 0; k < 3; k++) {
    pids[k] = fork();
    assert_true(pids[k] >= 0);
    if (pids[k] != 0) continue;
    close(fds[0]);
    if (k == 1) two_peer(t[0].id, "short_recv");
    if (k == 2) two_peer(t[1].id, "oversize");
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
      if (pthread_create(&th[i], NULL, two_rank0, &t[i]) != 0) _exit(1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    (void)!write(fds[1], t, sizeof(t));
    _exit(0);
  }
  close(fds[1]);
  struct pollfd pfd = {fds[0], POLLIN, 0};
  int ready = poll(&pfd, 1, 60000);
  ssize_t got = ready > 0 ? read(fds[0], t, sizeof(t)) : -1;
  close(fds[0]);
  for (int k = 0; k < 3; k++) {
    int st;
    long long end = now_ns() + 10 * SEC;
    while (waitpid(pids[k], &st, WNOHANG) == 0) {
      if (now_ns() > end) {
        kill(pids[k], SIGKILL);
        (void)waitpid(pids[k], &st, 0);
        break;
      }
      usleep(10000);
    }
  }
  env_clean();
  brd_net_reset();
  if (got != (ssize_t)sizeof(t)) fail_msg("process A gave no report within 60 s (a hang)");
  for (int i = 0; i < 2; i++) printf("communicator %d: result %d: %s\n", i, t[i].result, t[i].why);
  assert_int_not_equal(t[0].result, ncclSuccess);
  assert_int_not_equal(t[1].result, ncclSuccess);
  /* The first: B's half message, in the plugin's words. */
  if (strstr(t[0].why, "network connection to rank 1") == NULL ||
      strstr(t[0].why, "nettest: connection closed after") == NULL ||
      strstr(t[0].why, "bytes for a") != NULL || strstr(t[0].why, "ncclInternalError") != NULL)
    fail_msg("communicator 0 does not carry its own cause: %s", t[0].why);
  /* The second: C's header, the adapter's and the plugin's words. */
  if (strstr(t[1].why, "network connection to rank 1") == NULL ||
      strstr(t[1].why, "test failed: ncclInternalError") == NULL ||
      strstr(t[1].why, "bytes for a 262144-byte receive") == NULL ||
      strstr(t[1].why, "connection closed after") != NULL ||
      strstr(t[1].why, "ncclRemoteError") != NULL)
    fail_msg("communicator 1 does not carry its own cause: %s", t[1].why);
}

/* ---- opening libraries ---- */

static void test_load_names_and_paths(void **state) {
  (void)state;
  brd_net_plugin_t *p = NULL;
  /* A bare name: libnccl-net-<name>.so (found on the run path). */
  assert_int_equal(brd_net_plugin_load("testv12", &p), ncclSuccess);
  assert_non_null(strstr(brd_net_plugin_path(p), "/libnccl-net-testv12.so"));
  brd_net_plugin_unload(p);
  /* A full library name, as given. */
  assert_int_equal(brd_net_plugin_load("libnccl-net-testv8.so", &p), ncclSuccess);
  assert_int_equal(brd_net_plugin_version(p), 8);
  brd_net_plugin_unload(p);
  /* An absolute path. */
  char file[PATH_MAX];
  lib_file(file, sizeof(file), "testv11");
  assert_int_equal(brd_net_plugin_load(file, &p), ncclSuccess);
  track(p, 1);
  assert_int_equal(brd_net_plugin_version(p), 11);
  /* The same library twice is refused, not initialised twice. */
  brd_net_plugin_t *q = NULL;
  assert_int_equal(brd_net_plugin_load("testv11", &q), ncclInvalidUsage);
  expect_last_error("loaded already");
  track(p, 0);
  brd_net_plugin_unload(p);

  /* Missing: both names tried, both reported. */
  assert_int_equal(brd_net_plugin_load("nosuchnet", &p), ncclSystemError);
  expect_last_error("Could not find: nosuchnet libnccl-net-nosuchnet.so");
  /* A path gets no prefix. */
  assert_int_equal(brd_net_plugin_load("/nonexistent/dir/x.so", &p), ncclSystemError);
  expect_last_error("Could not find: /nonexistent/dir/x.so (");
  /* A library without a net. */
  assert_int_equal(brd_net_plugin_load("libm.so.6", &p), ncclInvalidUsage);
  expect_last_error("is unsupported");
}

/* ---- the process's net: NCCL_NET_PLUGIN and NCCL_NET ---- */

static const brd_net_ops_t *pick(const char *plugin_env, const char *net_env, char *why,
                                 size_t n) {
  brd_net_reset();
  if (plugin_env) setenv("NCCL_NET_PLUGIN", plugin_env, 1);
  else unsetenv("NCCL_NET_PLUGIN");
  if (net_env) setenv("NCCL_NET", net_env, 1);
  else unsetenv("NCCL_NET");
  brd_param_reload();
  return brd_net_get(why, n);
}

static void expect_net(const char *plugin_env, const char *net_env, const char *name) {
  char why[512] = "";
  const brd_net_ops_t *net = pick(plugin_env, net_env, why, sizeof(why));
  if (net == NULL) fail_msg("NCCL_NET_PLUGIN=%s NCCL_NET=%s: no net (%s)", plugin_env, net_env, why);
  if (strcmp(net->name, name) != 0)
    fail_msg("NCCL_NET_PLUGIN=%s NCCL_NET=%s: got %s, want %s", plugin_env, net_env, net->name,
             name);
  /* The same answer again without reloading. */
  assert_ptr_equal(brd_net_get(NULL, 0), net);
}

static void test_get_plugin_choice(void **state) {
  (void)state;
  char file[PATH_MAX];
  expect_net("none", NULL, "Socket");
  expect_net("NONE", NULL, "Socket");
  expect_net("testv12", NULL, "TestNet_v12");
  lib_file(file, sizeof(file), "testv8");
  expect_net(file, NULL, "TestNet_v8");
  expect_net("testv6", NULL, "TestNet_v6");

  /* The probe ran the plugin's init once and finalized it. */
  expect_net("testv12", NULL, "TestNet_v12");
  lib_file(file, sizeof(file), "testv12");
  const long *c = counters_of(file, 12);
  assert_int_equal(c[NT_INIT], 1);
  assert_int_equal(c[NT_FINALIZE], 1);
  assert_int_equal(c[NT_DEVICES], 1);

  /* A list: the first that loads and works. */
  brd_log_set_last_error("(none)");
  expect_net("nosuchnet,testv11", NULL, "TestNet_v11");
  expect_last_error("nosuchnet");
  /* Only missing libraries: a WARN saying what to do, then the built-in. */
  brd_log_set_last_error("(none)");
  expect_net("nosuchnet", NULL, "Socket");
  expect_last_error("Could not find: nosuchnet libnccl-net-nosuchnet.so");
  expect_last_error("NCCL_NET_PLUGIN");
}

static void test_get_default_is_quiet(void **state) {
  (void)state;
  void *h = dlopen("libnccl-net.so", RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) {
    dlclose(h);
    skip();  /* a real libnccl-net.so is installed here: its choice is not ours to predict */
  }
  brd_log_set_last_error("(none)");
  expect_net(NULL, NULL, "Socket");
  assert_string_equal(brd_log_last_error(), "(none)");  /* a missing default is no error */
}

static void test_get_by_net_name(void **state) {
  (void)state;
  expect_net("testv11,testv12", "TestNet_v12", "TestNet_v12");
  expect_net("testv11,testv12", "testnet_V12", "TestNet_v12");  /* any case */
  expect_net("testv12", "Socket", "Socket");
  expect_net("testv12", "socket", "Socket");

  char why[512] = "";
  assert_null(pick("testv12", "Bogus", why, sizeof(why)));
  assert_non_null(strstr(why, "Failed to initialize any NET plugin"));
  assert_non_null(strstr(why, "NCCL_NET=Bogus"));
  assert_non_null(strstr(why, "TestNet_v12"));
  assert_non_null(strstr(why, "Socket"));
  expect_last_error("NCCL_NET=Bogus");
  /* Cached: the same answer until reset. */
  why[0] = '\0';
  assert_null(brd_net_get(why, sizeof(why)));
  assert_non_null(strstr(why, "NCCL_NET=Bogus"));
}

static void test_get_skips_unusable(void **state) {
  (void)state;
  setenv("NETTEST_NDEV", "0", 1);
  expect_net("testv12,testv8", NULL, "Socket");
  expect_last_error("reports no device");
  unsetenv("NETTEST_NDEV");

  setenv("NETTEST_FAULT", "init", 1);
  expect_net("testv12,testv10", NULL, "Socket");
  expect_last_error("init failed");
  unsetenv("NETTEST_FAULT");

  setenv("NETTEST_DEVTYPE", "1", 1);  /* UNPACK */
  setenv("NETTEST_DEVVER", "3", 1);
  expect_net("testv8", NULL, "Socket");
  expect_last_error("NCCL_DEVICE_UNPACK plugin has incompatible version 3, this NCCL build "
                    "is compatible with 7, not using it");
  setenv("NETTEST_DEVVER", "7", 1);
  expect_net("testv12", NULL, "Socket");
  expect_last_error("NCCL_NET_DEVICE_UNPACK device offload");
  setenv("NETTEST_DEVTYPE", "9", 1);
  expect_net("testv11", NULL, "Socket");
  expect_last_error("Unknown device code index 9");
  unsetenv("NETTEST_DEVTYPE");
  unsetenv("NETTEST_DEVVER");

  /* Skipped plugins are unloaded: the next good one still loads. */
  expect_net("testv12", NULL, "TestNet_v12");
}

int main(int argc, char **argv) {
  (void)argc;
  int go = brd_test_plugin_dir(argv, "BRD_TEST_NET_PLUGIN_PATHSET",
                               "libnccl-net-testv12.so", plugdir, sizeof(plugdir));
  if (go != 0) return go;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_version_loads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transfer_every_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_init_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pointers_read_after_init, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newest_version_wins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_vdevice_and_attr, setup, teardown),
      cmocka_unit_test_setup_teardown(test_old_size_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_connect_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_test_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_short_recv, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_init, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fault_why, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_comms_own_cause, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_names_and_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_plugin_choice, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_default_is_quiet, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_by_net_name, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_skips_unusable, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
