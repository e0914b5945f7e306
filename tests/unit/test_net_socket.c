/*
 * The built-in socket net (transport/net_socket.c) over loopback, driven
 * in one thread the way the proxy drives it: listen, connect and accept
 * retried until ready; isend/irecv/test with every loop bounded by a
 * deadline. Payloads are checked byte for byte against a pattern computed
 * here; properties against NCCL's values (plugins.md §1.6) and sysfs.
 */
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/debug.h"
#include "base/param.h"
#include "base/time.h"
#include "transport/net.h"
#include "testenv.h"

#define DEADLINE_NS (30LL * 1000000000LL)

static const brd_net_ops_t *net = &brd_net_socket;

/* ---- a logger that records what the net says --------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char warn_text[16384];
static char info_text[16384];

static void test_logger(int level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void test_logger(int level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  (void)flags;
  (void)file;
  (void)line;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  if (level == 2) {
    size_t n = strlen(warn_text);
    snprintf(warn_text + n, sizeof(warn_text) - n, "%s\n", msg);
  } else if (level == 3) {
    size_t n = strlen(info_text);
    snprintf(info_text + n, sizeof(info_text) - n, "%s\n", msg);
  }
  pthread_mutex_unlock(&log_lock);
}

static void log_clear(void) {
  pthread_mutex_lock(&log_lock);
  warn_text[0] = info_text[0] = '\0';
  pthread_mutex_unlock(&log_lock);
}

static void expect_warn(const char *needle) {
  pthread_mutex_lock(&log_lock);
  int found = strstr(warn_text, needle) != NULL;
  pthread_mutex_unlock(&log_lock);
  if (!found) fail_msg("no WARN mentions \"%s\"; WARNs were:\n%s", needle, warn_text);
}

/* ---- setup ----------------------------------------------------------------- */

/* Clean environment, then pairs of name, value (NULL ends), then init. */
static void *net_open(const char *name, ...) {
  void *ctx = NULL;
  va_list ap;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  brd_test_env_clear();
  va_start(ap, name);
  for (const char *n = name; n != NULL; n = va_arg(ap, const char *))
    setenv(n, va_arg(ap, const char *), 1);
  va_end(ap);
  brd_param_reload();
  log_clear();
  assert_int_equal(net->init(&ctx, 0x1234, &cfg, test_logger, NULL), ncclSuccess);
  assert_non_null(ctx);
  return ctx;
}

static void net_close(void *ctx) {
  assert_int_equal(net->finalize(ctx), ncclSuccess);
  brd_test_env_clear();
  brd_param_reload();
}

static int64_t deadline(void) { return brd_time_now_ns() + DEADLINE_NS; }

/* A WARN through the net's logger from another thread. */
static void *warn_elsewhere(void *arg) {
  (void)arg;
  test_logger(2, 0x10, __FILE__, __LINE__, "NET/Socket : a failure elsewhere");
  return NULL;
}
#define SOCK_TEST_WARN_ELSEWHERE()                                            \
  do {                                                                        \
    pthread_t th_;                                                            \
    assert_int_equal(pthread_create(&th_, NULL, warn_elsewhere, NULL), 0);    \
    assert_int_equal(pthread_join(th_, NULL), 0);                             \
  } while (0)

typedef struct {
  void *listen, *send, *recv;
} pair_t;

/* listen, then connect and accept in turns in this thread until both are
 * ready. */
static pair_t pair_open(void *ctx) {
  pair_t p = {NULL, NULL, NULL};
  /* Off by one byte: the net must not assume an aligned handle. */
  static char hbuf[BRD_NET_HANDLE_BYTES + 8];
  char *handle = hbuf + 1;
  int64_t end = deadline();
  memset(hbuf, 0x5a, sizeof(hbuf));
  assert_int_equal(net->listen(ctx, 0, handle, &p.listen), ncclSuccess);
  assert_non_null(p.listen);
  while (p.send == NULL || p.recv == NULL) {
    if (p.send == NULL) assert_int_equal(net->connect(ctx, 0, handle, &p.send, NULL), ncclSuccess);
    if (p.recv == NULL) assert_int_equal(net->accept(p.listen, &p.recv, NULL), ncclSuccess);
    if (brd_time_now_ns() > end) fail_msg("connect/accept not ready after 30 s");
  }
  return p;
}

static void pair_close(pair_t *p) {
  assert_int_equal(net->closeSend(p->send), ncclSuccess);
  assert_int_equal(net->closeRecv(p->recv), ncclSuccess);
  assert_int_equal(net->closeListen(p->listen), ncclSuccess);
}

static uint8_t pattern(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 9) ^ (seed * 97u + 13u));
}

static void fill(uint8_t *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) buf[i] = pattern(i, seed);
}

static void check(const uint8_t *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (buf[i] != pattern(i, seed))
      fail_msg("message %u: byte %zu of %zu is 0x%02x, expected 0x%02x", seed, i, n, buf[i],
               pattern(i, seed));
}

static void *post_send(void *comm, void *buf, size_t n) {
  void *req = NULL;
  assert_int_equal(net->isend(comm, buf, n, 0, NULL, NULL, &req), ncclSuccess);
  assert_non_null(req);
  return req;
}

static void *post_recv(void *comm, void *buf, size_t n) {
  void *req = NULL;
  void *data[1] = {buf};
  size_t sizes[1] = {n};
  int tags[1] = {0};
  assert_int_equal(net->irecv(comm, 1, data, sizes, tags, NULL, NULL, &req), ncclSuccess);
  assert_non_null(req);
  return req;
}

/* Tests both requests until done; returns the sizes they report. */
static void wait_both(void *sreq, void *rreq, int *ssize, int *rsize) {
  int sdone = 0, rdone = 0;
  int64_t end = deadline();
  while (!sdone || !rdone) {
    if (!sdone) assert_int_equal(net->test(sreq, &sdone, ssize), ncclSuccess);
    if (!rdone) assert_int_equal(net->test(rreq, &rdone, rsize), ncclSuccess);
    if (brd_time_now_ns() > end) fail_msg("transfer not done after 30 s");
  }
}

/* One message of n bytes into a receive buffer of cap bytes; checks the
 * bytes, the untouched tail, and the sizes test reports. */
static void xfer(pair_t *p, size_t n, size_t cap, unsigned seed) {
  uint8_t *s = malloc(n + 1), *r = malloc(cap + 1);
  int ssize = -1, rsize = -1;
  assert_non_null(s);
  assert_non_null(r);
  fill(s, n, seed);
  memset(r, 0xee, cap + 1);
  wait_both(post_send(p->send, s, n), post_recv(p->recv, r, cap), &ssize, &rsize);
  assert_int_equal(ssize, (int)n);
  assert_int_equal(rsize, (int)n);
  check(r, n, seed);
  for (size_t i = n; i <= cap; i++)
    if (r[i] != 0xee) fail_msg("byte %zu past the %zu-byte message was written", i, n);
  free(s);
  free(r);
}

static const size_t sizes[] = {0, 1, 127, 128, 129, 65536 + 3, (8u << 20) + 5};

static void *noop(void *arg) { return arg; }

/* Threads of this process. The first call starts and joins one thread, so
 * a sanitizer's background thread exists before anything is counted. */
static int thread_count(void) {
  static int warm;
  if (!warm) {
    pthread_t t;
    if (pthread_create(&t, NULL, noop, NULL) == 0) pthread_join(t, NULL);
    warm = 1;
  }
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The thread count once it reaches want, or after 2 s: a joined thread's
 * entry can linger in /proc/self/task for a moment after pthread_join
 * returns (the kernel wakes the joiner before it removes the task). */
static int thread_count_settled(int want) {
  int n = thread_count();
  for (int i = 0; i < 200 && n != want; i++) {
    struct timespec ts = {0, 10000000L};
    nanosleep(&ts, NULL);
    n = thread_count();
  }
  return n;
}

/* ---- devices and properties ------------------------------------------------ */

static void test_no_such_interface(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "nosuchif", NULL);
  int ndev = -1;
  void *l = NULL;
  char handle[BRD_NET_HANDLE_BYTES];
  assert_int_equal(net->devices(&ndev), ncclSuccess);
  assert_int_equal(ndev, 0);
  expect_warn("NCCL_SOCKET_IFNAME=nosuchif");
  assert_int_equal(net->listen(ctx, 0, handle, &l), ncclInternalError);
  assert_null(l);
  net_close(ctx);
}

static void test_properties(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "=lo", NULL);
  brd_net_props_t props;
  int ndev = -1, want_speed = 10000;
  void *mh = (void *)0x1;
  FILE *f;
  assert_int_equal(net->devices(&ndev), ncclSuccess);
  assert_int_equal(ndev, 1);
  if (strstr(info_text, "NET/Socket : Using [0]lo:127.0.0.1<0>") == NULL &&
      strstr(info_text, "NET/Socket : Using [0]lo:") == NULL)
    fail_msg("no \"NET/Socket : Using [0]lo:...\" INFO; INFOs were:\n%s", info_text);
  memset(&props, 0x77, sizeof(props));
  assert_int_equal(net->getProperties(0, &props), ncclSuccess);
  assert_string_equal(props.name, "lo");
  assert_null(props.pciPath); /* lo has no /sys/class/net/lo/device */
  f = fopen("/sys/class/net/lo/speed", "r");
  if (f != NULL) {
    int v;
    if (fscanf(f, "%d", &v) == 1 && v > 0) want_speed = v;
    fclose(f);
  }
  assert_int_equal(props.speed, want_speed);
  assert_int_equal(props.guid, 0);
  assert_int_equal(props.ptrSupport, BRD_NET_PTR_HOST);
  assert_int_equal(props.regIsGlobal, 0);
  assert_int_equal(props.forceFlush, 0);
  assert_int_equal(props.port, 0);
  assert_true(props.latency == 0.0f);
  assert_int_equal(props.maxComms, 65536);
  assert_int_equal(props.maxRecvs, 1);
  assert_int_equal(props.netDeviceType, 0);
  assert_int_equal(props.netDeviceVersion, 0);
  assert_int_equal(props.vProps.ndevs, 1);
  assert_int_equal(props.vProps.devs[0], 0);
  assert_true(props.maxP2pBytes == 1099511627776ull);
  assert_true(props.maxCollBytes == 536870912ull);
  assert_int_equal(props.maxMultiRequestSize, 1);
  assert_int_equal(props.railId, -1);
  assert_int_equal(props.planeId, -1);
  assert_int_equal(net->getProperties(1, &props), ncclInternalError);

  /* The members NCCL's socket net leaves out, and the ones that refuse. */
  assert_string_equal(net->name, "Socket");
  assert_null(net->regMrDmaBuf);
  assert_null(net->getDeviceMr);
  assert_null(net->irecvConsumed);
  assert_null(net->makeVDevice);
  assert_null(net->setNetAttr);
  assert_non_null(net->finalize);
  {
    pair_t p = pair_open(ctx);
    int dummy = 0, size = 4;
    void *data[1] = {&dummy}, *req = NULL;
    assert_int_equal(net->regMr(p.send, &dummy, 4, BRD_NET_PTR_HOST, &mh), ncclSuccess);
    assert_int_equal(net->deregMr(p.send, mh), ncclSuccess);
    assert_int_equal(net->regMr(p.recv, &dummy, 4, BRD_NET_PTR_CUDA, &mh), ncclInternalError);
    assert_int_equal(net->regMr(p.recv, &dummy, 4, BRD_NET_PTR_DMABUF, &mh), ncclInternalError);
    assert_int_equal(net->iflush(p.recv, 1, data, &size, NULL, &req), ncclInternalError);
    pair_close(&p);
  }
  net_close(ctx);
}

static void test_default_interfaces(void **state) {
  (void)state;
  void *ctx = net_open(NULL);
  int ndev = -1;
  assert_int_equal(net->devices(&ndev), ncclSuccess);
  assert_true(ndev >= 1 && ndev <= 16);
  net_close(ctx);
}

/* ---- transfers ---------------------------------------------------------------- */

static void run_sizes(void *ctx) {
  pair_t p = pair_open(ctx);
  for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) xfer(&p, sizes[i], sizes[i], i);
  /* A receive larger than the send: test reports the sent size. */
  xfer(&p, 1000, 5003, 40);
  xfer(&p, 129, 70000, 41);
  xfer(&p, (3u << 20) + 1, (5u << 20), 42);
  pair_close(&p);
}

static void test_sizes_one_socket(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  run_sizes(ctx);
  net_close(ctx);
}

static void test_sizes_striped(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "2",
                       "NCCL_NSOCKS_PERTHREAD", "2", NULL);
  int before = thread_count();
  run_sizes(ctx);
  if (strstr(info_text, "Using 2 threads and 2 sockets per thread") == NULL)
    fail_msg("no threads/sockets INFO; INFOs were:\n%s", info_text);
  /* Helper threads end with their comm. */
  assert_int_equal(thread_count_settled(before), before);
  net_close(ctx);
}

/* Many messages of mixed sizes in flight at once, tested in a scrambled
 * order: matching is by posting order, whatever the test order. */
static void run_many(void *ctx, int nmsg, int window) {
  pair_t p = pair_open(ctx);
  uint8_t **sb = calloc((size_t)nmsg, sizeof(*sb)), **rb = calloc((size_t)nmsg, sizeof(*rb));
  size_t *len = calloc((size_t)nmsg, sizeof(*len));
  void **sreq = calloc((size_t)nmsg, sizeof(void *)), **rreq = calloc((size_t)nmsg, sizeof(void *));
  int *sdone = calloc((size_t)nmsg, sizeof(int)), *rdone = calloc((size_t)nmsg, sizeof(int));
  unsigned rng = 12345;
  int posted = 0, finished = 0;
  int64_t end = deadline();
  for (int i = 0; i < nmsg; i++) {
    rng = rng * 1103515245u + 12345u;
    /* Mostly small, some above the striping threshold, a few large. */
    len[i] = (rng >> 8) % 7 == 0 ? (rng >> 4) % (1u << 20) + 70000 : (rng >> 8) % 3000;
    sb[i] = malloc(len[i] + 1);
    rb[i] = malloc(len[i] + 64);
    fill(sb[i], len[i], (unsigned)i + 100);
    memset(rb[i], 0xee, len[i] + 64);
  }
  while (finished < nmsg) {
    while (posted < nmsg && posted - finished < window) {
      sreq[posted] = post_send(p.send, sb[posted], len[posted]);
      rreq[posted] = post_recv(p.recv, rb[posted], len[posted] + 64);
      posted++;
    }
    /* Test newest first. */
    for (int i = posted - 1; i >= finished; i--) {
      int size = -1;
      if (!sdone[i]) {
        assert_int_equal(net->test(sreq[i], &sdone[i], &size), ncclSuccess);
        if (sdone[i]) assert_int_equal(size, (int)len[i]);
      }
      if (!rdone[i]) {
        assert_int_equal(net->test(rreq[i], &rdone[i], &size), ncclSuccess);
        if (rdone[i]) assert_int_equal(size, (int)len[i]);
      }
    }
    while (finished < posted && sdone[finished] && rdone[finished]) {
      check(rb[finished], len[finished], (unsigned)finished + 100);
      free(sb[finished]);
      free(rb[finished]);
      finished++;
    }
    if (brd_time_now_ns() > end) fail_msg("%d of %d messages done after 30 s", finished, nmsg);
  }
  free(sb);
  free(rb);
  free(len);
  free(sreq);
  free(rreq);
  free(sdone);
  free(rdone);
  pair_close(&p);
}

static void test_in_order_one_socket(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  run_many(ctx, 300, 8);
  net_close(ctx);
}

static void test_in_order_striped(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "2",
                       "NCCL_NSOCKS_PERTHREAD", "2", "NCCL_SOCKET_MIN_TASKSIZE", "4096", NULL);
  run_many(ctx, 300, 32);
  net_close(ctx);
}

/* 32 requests in flight per comm; the 33rd gets NULL ("retry later"). */
static void test_request_slots(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  pair_t p = pair_open(ctx);
  uint32_t sv[BRD_NET_MAX_REQUESTS + 1], rv[BRD_NET_MAX_REQUESTS + 1];
  void *sreq[BRD_NET_MAX_REQUESTS], *rreq[BRD_NET_MAX_REQUESTS], *extra = (void *)0x1;
  void *data[1] = {&rv[BRD_NET_MAX_REQUESTS]};
  size_t sz[1] = {4};
  int tags[1] = {0};
  int64_t end = deadline();
  for (int i = 0; i < BRD_NET_MAX_REQUESTS; i++) {
    sv[i] = 0xa5000000u + (uint32_t)i * 7919u;
    rv[i] = 0;
    sreq[i] = post_send(p.send, &sv[i], sizeof(sv[i]));
    rreq[i] = post_recv(p.recv, &rv[i], sizeof(rv[i]));
  }
  assert_int_equal(net->isend(p.send, &sv[32], 4, 0, NULL, NULL, &extra), ncclSuccess);
  assert_null(extra);
  extra = (void *)0x1;
  assert_int_equal(net->irecv(p.recv, 1, data, sz, tags, NULL, NULL, &extra), ncclSuccess);
  assert_null(extra);
  /* Finish the last first; every earlier one must then be done too. */
  for (int i = BRD_NET_MAX_REQUESTS - 1; i >= 0; i--) {
    int sdone = 0, rdone = 0, size = -1;
    while (!sdone || !rdone) {
      if (!sdone) assert_int_equal(net->test(sreq[i], &sdone, NULL), ncclSuccess);
      if (!rdone) assert_int_equal(net->test(rreq[i], &rdone, &size), ncclSuccess);
      if (brd_time_now_ns() > end) fail_msg("request %d not done after 30 s", i);
    }
    assert_int_equal(size, 4);
    assert_int_equal(rv[i], sv[i]);
    if (i == BRD_NET_MAX_REQUESTS - 1) {
      /* Slot 31 is free, but slot 0 (the next to reuse) is too only once
       * request 0 is reaped; posting still never blocks. */
      void *r = (void *)0x1;
      assert_int_equal(net->isend(p.send, &sv[32], 4, 0, NULL, NULL, &r), ncclSuccess);
      assert_null(r);
    }
  }
  /* All reaped: the slots are usable again. */
  xfer(&p, 4096, 4096, 7);
  pair_close(&p);
  net_close(ctx);
}

/* A send larger than the receive is the caller's error (NCCL's code). */
static void test_truncation(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  pair_t p = pair_open(ctx);
  uint8_t s[300], r[200];
  void *sreq = post_send(p.send, s, sizeof(s)), *rreq = post_recv(p.recv, r, sizeof(r));
  int done = 0;
  ncclResult_t res = ncclSuccess;
  int64_t end = deadline();
  fill(s, sizeof(s), 3);
  while (res == ncclSuccess) {
    (void)net->test(sreq, &done, NULL);
    res = net->test(rreq, &done, NULL);
    if (brd_time_now_ns() > end) fail_msg("no error after 30 s");
  }
  assert_int_equal(res, ncclInvalidUsage);
  expect_warn("truncated");
  pair_close(&p);
  net_close(ctx);
}

/* The sender goes away after part of a large message: the receiver's test
 * reports ncclRemoteError naming the peer, and never hangs. */
static void run_peer_closed(void *ctx) {
  pair_t p = pair_open(ctx);
  size_t n = 32u << 20;
  uint8_t *s = malloc(n), *r = malloc(n);
  void *sreq, *rreq;
  int sdone = 0, rdone = 0;
  ncclResult_t res = ncclSuccess;
  int64_t end = deadline();
  fill(s, n, 9);
  sreq = post_send(p.send, s, n);
  rreq = post_recv(p.recv, r, n);
  /* Let the header and some bytes go, but not all: nobody reads yet. */
  for (int i = 0; i < 5 && !sdone; i++) assert_int_equal(net->test(sreq, &sdone, NULL), ncclSuccess);
  assert_int_equal(sdone, 0);
  assert_int_equal(net->closeSend(p.send), ncclSuccess);
  while (res == ncclSuccess && !rdone) {
    res = net->test(rreq, &rdone, NULL);
    if (brd_time_now_ns() > end) fail_msg("receiver saw no error after 30 s");
  }
  assert_int_equal(rdone, 0);
  assert_int_equal(res, ncclRemoteError);
  expect_warn("the remote process may have exited");
  expect_warn("127.0.0.1");
  /* The error is sticky: later calls say so too. */
  assert_int_equal(net->test(rreq, &rdone, NULL), ncclRemoteError);
  assert_int_equal(net->closeRecv(p.recv), ncclSuccess);
  assert_int_equal(net->closeListen(p.listen), ncclSuccess);
  free(s);
  free(r);
}

static void test_peer_closed_one_socket(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  run_peer_closed(ctx);
  net_close(ctx);
}

static void test_peer_closed_striped(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "2",
                       "NCCL_NSOCKS_PERTHREAD", "2", NULL);
  run_peer_closed(ctx);
  net_close(ctx);
}

/* The receiver goes away: the sender's test fails the same way. */
static void test_receiver_closed(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  pair_t p = pair_open(ctx);
  size_t n = 64u << 20;
  uint8_t *s = calloc(1, n);
  void *sreq;
  int done = 0;
  ncclResult_t res = ncclSuccess;
  int64_t end = deadline();
  assert_int_equal(net->closeRecv(p.recv), ncclSuccess);
  sreq = post_send(p.send, s, n);
  while (res == ncclSuccess && !done) {
    res = net->test(sreq, &done, NULL);
    if (brd_time_now_ns() > end) fail_msg("sender saw no error after 30 s");
  }
  assert_int_equal(done, 0);
  assert_int_equal(res, ncclRemoteError);
  expect_warn("the remote process may have exited");
  assert_int_equal(net->closeSend(p.send), ncclSuccess);
  assert_int_equal(net->closeListen(p.listen), ncclSuccess);
  free(s);
  net_close(ctx);
}

/* Connecting to a listener that is gone is ncclRemoteError, at once. */
static void test_connect_refused(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  char handle[BRD_NET_HANDLE_BYTES];
  void *l = NULL, *s = NULL;
  ncclResult_t res = ncclSuccess;
  int64_t end = deadline();
  assert_int_equal(net->listen(ctx, 0, handle, &l), ncclSuccess);
  assert_int_equal(net->closeListen(l), ncclSuccess);
  while (res == ncclSuccess && s == NULL) {
    res = net->connect(ctx, 0, handle, &s, NULL);
    if (brd_time_now_ns() > end) fail_msg("connect neither failed nor succeeded after 30 s");
  }
  assert_null(s);
  assert_int_equal(res, ncclRemoteError);
  expect_warn("the remote process may have exited");
  net_close(ctx);
}

/* The why member, per connection: two connections that fail differently
 * each keep their own WARN (one failed on a helper thread), a close
 * between messages (quiet) and a healthy connection have none, and a WARN
 * given afterwards elsewhere changes neither. */
static ncclResult_t wait_fail(void *req, int64_t end) {
  ncclResult_t res = ncclSuccess;
  int done = 0;
  while (res == ncclSuccess && !done) {
    res = net->test(req, &done, NULL);
    if (brd_time_now_ns() > end) fail_msg("no error after 30 s");
  }
  return res;
}

static void test_why_per_connection(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "2",
                       "NCCL_NSOCKS_PERTHREAD", "2", NULL);
  pair_t a = pair_open(ctx), b = pair_open(ctx), q = pair_open(ctx), h = pair_open(ctx);
  char why[600];
  int64_t end = deadline();
  assert_non_null(net->why);
  /* a: a send larger than its receive. */
  static uint8_t s300[300], r200[200];
  fill(s300, sizeof(s300), 4);
  void *sreq = post_send(a.send, s300, sizeof(s300));
  int done = 0;
  (void)net->test(sreq, &done, NULL);
  assert_int_equal(wait_fail(post_recv(a.recv, r200, sizeof(r200)), end), ncclInvalidUsage);
  /* b: the sender goes away in the middle of a striped message. */
  size_t n = 32u << 20;
  uint8_t *s = malloc(n), *r = malloc(n);
  fill(s, n, 5);
  sreq = post_send(b.send, s, n);
  void *rreq = post_recv(b.recv, r, n);
  done = 0;
  for (int i = 0; i < 5 && !done; i++) assert_int_equal(net->test(sreq, &done, NULL), ncclSuccess);
  assert_int_equal(done, 0);
  assert_int_equal(net->closeSend(b.send), ncclSuccess);
  assert_int_equal(wait_fail(rreq, end), ncclRemoteError);
  /* q: the sender closes between messages: quiet, the caller decides. */
  assert_int_equal(net->closeSend(q.send), ncclSuccess);
  assert_int_equal(wait_fail(post_recv(q.recv, r200, sizeof(r200)), end), ncclRemoteError);
  /* Another thread's WARN afterwards. */
  SOCK_TEST_WARN_ELSEWHERE();
  assert_true(net->why(a.recv, why, sizeof(why)) > 0);
  if (strstr(why, "truncated") == NULL || strstr(why, "exited") != NULL ||
      strstr(why, "elsewhere") != NULL)
    fail_msg("connection a: %s", why);
  assert_true(net->why(b.recv, why, sizeof(why)) > 0);
  if (strstr(why, "the remote process may have exited") == NULL ||
      strstr(why, "127.0.0.1") == NULL || strstr(why, "truncated") != NULL ||
      strstr(why, "elsewhere") != NULL)
    fail_msg("connection b: %s", why);
  why[0] = 'x';
  assert_int_equal(net->why(q.recv, why, sizeof(why)), 0);
  assert_int_equal(net->why(h.send, why, sizeof(why)), 0);
  assert_int_equal(net->why(h.recv, why, sizeof(why)), 0);
  assert_int_equal(net->closeSend(a.send), ncclSuccess);
  assert_int_equal(net->closeRecv(a.recv), ncclSuccess);
  assert_int_equal(net->closeListen(a.listen), ncclSuccess);
  assert_int_equal(net->closeRecv(b.recv), ncclSuccess);
  assert_int_equal(net->closeListen(b.listen), ncclSuccess);
  assert_int_equal(net->closeRecv(q.recv), ncclSuccess);
  assert_int_equal(net->closeListen(q.listen), ncclSuccess);
  pair_close(&h);
  free(s);
  free(r);
  net_close(ctx);
}

/* Comms closed with requests still in flight free everything (ASan). */
static void test_close_in_flight(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "1",
                       "NCCL_NSOCKS_PERTHREAD", "3", NULL);
  pair_t p = pair_open(ctx);
  size_t n = 4u << 20;
  uint8_t *s = calloc(1, n), *r = calloc(1, n);
  int done = 0;
  void *sreq = post_send(p.send, s, n), *rreq = post_recv(p.recv, r, n);
  (void)net->test(sreq, &done, NULL);
  (void)net->test(rreq, &done, NULL);
  /* A listener with a connection it never accepted, too. */
  {
    char handle[BRD_NET_HANDLE_BYTES];
    void *l = NULL, *c = NULL;
    int64_t end = deadline();
    assert_int_equal(net->listen(ctx, 0, handle, &l), ncclSuccess);
    while (c == NULL) {
      assert_int_equal(net->connect(ctx, 0, handle, &c, NULL), ncclSuccess);
      if (brd_time_now_ns() > end) fail_msg("connect not ready after 30 s");
    }
    assert_int_equal(net->closeSend(c), ncclSuccess);
    assert_int_equal(net->closeListen(l), ncclSuccess);
  }
  pair_close(&p);
  free(s);
  free(r);
  net_close(ctx);
}

/* brd_net_log, the logger Braid hands to nets: a WARN through it becomes
 * Braid's last error (what ncclGetLastError shows), with the net's text. */
/* poll_fd: a receive comm's descriptor asks for POLLIN only while a
 * receive is posted, and poll() on it returns once the peer sends (so a
 * caller sleeping there does not miss the message); a send whose bytes
 * the kernel cannot take yet asks for POLLOUT; with helper threads moving
 * the payloads there is no single descriptor. */
static void test_poll_fd(void **state) {
  (void)state;
  void *ctx = net_open("NCCL_SOCKET_IFNAME", "lo", NULL);
  pair_t p = pair_open(ctx);
  short ev = -1;
  int rfd = net->poll_fd(p.recv, &ev);
  assert_true(rfd >= 0);
  assert_int_equal(ev, 0); /* nothing posted */
  int sfd = net->poll_fd(p.send, &ev);
  assert_true(sfd >= 0);
  assert_int_equal(ev, 0);
  uint8_t out[64], in[64];
  fill(out, sizeof(out), 7);
  memset(in, 0, sizeof(in));
  void *rreq = post_recv(p.recv, in, sizeof(in));
  assert_int_equal(net->poll_fd(p.recv, &ev), rfd);
  assert_int_equal(ev, POLLIN);
  struct pollfd pfd = {rfd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 50), 0); /* nothing sent yet: not readable */
  void *sreq = post_send(p.send, out, sizeof(out));
  int done = 0, size = -1;
  assert_int_equal(net->test(sreq, &done, &size), ncclSuccess); /* 64 bytes fit at once */
  assert_true(done);
  pfd.revents = 0;
  assert_int_equal(poll(&pfd, 1, 10000), 1);
  assert_true(pfd.revents & POLLIN);
  int64_t end = deadline();
  for (done = 0; !done;) {
    assert_int_equal(net->test(rreq, &done, &size), ncclSuccess);
    if (brd_time_now_ns() > end) fail_msg("receive not done after 30 s");
  }
  assert_int_equal(size, (int)sizeof(out));
  check(in, sizeof(out), 7);
  assert_int_equal(net->poll_fd(p.recv, &ev), rfd);
  assert_int_equal(ev, 0); /* done: nothing waits on it any more */
  /* A send larger than the socket buffers, no receive posted: its bytes
   * stay pending and it waits for POLLOUT. */
  size_t big = 64u << 20;
  uint8_t *b = malloc(big);
  assert_non_null(b);
  memset(b, 0x3c, big);
  sreq = post_send(p.send, b, big);
  assert_int_equal(net->test(sreq, &done, &size), ncclSuccess);
  assert_false(done);
  assert_int_equal(net->poll_fd(p.send, &ev), sfd);
  assert_int_equal(ev, POLLOUT);
  pair_close(&p);
  free(b);
  net_close(ctx);
  /* Striped: helper threads own the data sockets. */
  ctx = net_open("NCCL_SOCKET_IFNAME", "lo", "NCCL_SOCKET_NTHREADS", "2",
                 "NCCL_NSOCKS_PERTHREAD", "1", NULL);
  p = pair_open(ctx);
  assert_int_equal(net->poll_fd(p.recv, &ev), -1);
  assert_int_equal(net->poll_fd(p.send, &ev), -1);
  pair_close(&p);
  net_close(ctx);
}

static void test_braid_logger(void **state) {
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  int ndev = -1;
  (void)state;
  brd_test_env_clear();
  setenv("NCCL_SOCKET_IFNAME", "nosuchif2", 1);
  setenv("NCCL_DEBUG", "VERSION", 1); /* keep the WARN off stderr */
  brd_param_reload();
  brd_log_reset();
  brd_net_log(2, ~0ul, __FILE__, __LINE__, "net says %d and %s", 42, "bye");
  assert_string_equal(brd_log_last_error(), "net says 42 and bye");
  /* Filtered levels and nonsense levels are quiet, and not last errors. */
  brd_net_log(3, 0x10, __FILE__, __LINE__, "info %d", 1);
  brd_net_log(5, 0x10, __FILE__, __LINE__, "trace %d", 1);
  brd_net_log(9, 0x10, __FILE__, __LINE__, "bad level %d", 1);
  assert_string_equal(brd_log_last_error(), "net says 42 and bye");
  assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->devices(&ndev), ncclSuccess);
  assert_int_equal(ndev, 0);
  assert_non_null(strstr(brd_log_last_error(), "NCCL_SOCKET_IFNAME=nosuchif2"));
  assert_int_equal(net->finalize(ctx), ncclSuccess);
  brd_test_env_clear();
  brd_param_reload();
  brd_log_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_such_interface),
      cmocka_unit_test(test_properties),
      cmocka_unit_test(test_default_interfaces),
      cmocka_unit_test(test_sizes_one_socket),
      cmocka_unit_test(test_sizes_striped),
      cmocka_unit_test(test_in_order_one_socket),
      cmocka_unit_test(test_in_order_striped),
      cmocka_unit_test(test_request_slots),
      cmocka_unit_test(test_truncation),
      cmocka_unit_test(test_peer_closed_one_socket),
      cmocka_unit_test(test_peer_closed_striped),
      cmocka_unit_test(test_receiver_closed),
      cmocka_unit_test(test_connect_refused),
      cmocka_unit_test(test_close_in_flight),
      cmocka_unit_test(test_why_per_connection),
      cmocka_unit_test(test_braid_logger),
      cmocka_unit_test(test_poll_fd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
