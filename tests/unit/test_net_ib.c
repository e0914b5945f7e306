/*
 * The IB verbs net over the verbs mock (tests/mock/ibverbs_mock.c, opened
 * through BRAID_IBVERBS_LIB): NCCL_IB_HCA and GID choice against
 * hand-made tables, device selection, the QP attributes NCCL_IB_* put in
 * place, loopback connections in one thread, byte-exact transfers from 0
 * bytes to 8 MiB + 5, in-order matching, the request limit, and each
 * fault (completion error, refused registration, port down) ending in a
 * clear error instead of a hang.
 *
 * With BRAID_TEST_IB_REAL=<device> (tests/rxe/guest.sh, soft-RoCE in a VM)
 * the same program runs on the system's libibverbs against that device
 * instead: the pure functions, byte-exact transfers over 1 to 4 QPs,
 * grouped receives, ordering, truncation, registration and a closed peer
 * run on real verbs; the cases that need the mock's tables, write log or
 * injected faults skip, saying so.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/debug.h"
#include "base/param.h"
#include "transport/net_ib.h"
#include "../mock/ibverbs_mock.h"

static const brd_net_ops_t *net = &brd_net_ib;
static void *mock;  /* the mock, for its controls; NULL on real verbs */

/* Skips the current test when it runs on real verbs: it needs the mock. */
#define NEED_MOCK()                                                                  \
  do {                                                                               \
    if (mock == NULL) {                                                              \
      print_message("skipped on real verbs: needs the verbs mock's controls\n");     \
      skip();                                                                        \
    }                                                                                \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void env(const char *name, const char *value) {
  if (value != NULL) setenv(name, value, 1);
  else unsetenv(name);
  brd_param_reload();
}

/* ---- pure functions -------------------------------------------------------- */

static void test_hca_match(void **state) {
  (void)state;
  static const struct {
    const char *spec, *dev;
    int port, keep;
  } cases[] = {
      {NULL, "mlx5_0", 1, 1},
      {"", "mlx5_0", 1, 1},
      {"mlx5", "mlx5_0", 1, 1},           /* prefix */
      {"mlx5", "mlx4_0", 1, 0},
      {"=mlx5", "mlx5_0", 1, 0},          /* exact */
      {"=mlx5_0", "mlx5_0", 2, 1},
      {"=mlx5_0", "mlx5_01", 1, 0},
      {"mlx5_0:1", "mlx5_0", 1, 1},       /* port */
      {"mlx5_0:1", "mlx5_0", 2, 0},
      {"mlx5_1,mlx5_0:2", "mlx5_0", 2, 1}, /* list */
      {"mlx5_1,mlx5_0:2", "mlx5_0", 1, 0},
      {"^mlx5_0", "mlx5_0", 1, 0},        /* exclude */
      {"^mlx5_0", "mlx5_1", 1, 1},
      {"^mlx5_0:1", "mlx5_0", 2, 1},
      {"^=mlx5", "mlx5_0", 1, 1},
      {"^=mlx5_0,mlx5_1:1", "mlx5_1", 1, 0},
      {"^=mlx5_0,mlx5_1:1", "mlx5_1", 2, 1},
      {"mlx5_0:1:0:1", "mlx5_0", 1, 1},  /* rail and plane ignored */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = brd_ib_hca_match(cases[i].spec, cases[i].dev, cases[i].port);
    if (got != cases[i].keep)
      fail_msg("NCCL_IB_HCA=%s on %s:%d: got %d, want %d", cases[i].spec ? cases[i].spec : "(unset)",
               cases[i].dev, cases[i].port, got, cases[i].keep);
  }
}

static brd_ib_gid_t gid(const char *text, int version) {
  brd_ib_gid_t g;
  memset(&g, 0, sizeof(g));
  if (text != NULL) assert_int_equal(inet_pton(AF_INET6, text, g.gid.raw), 1);
  g.roce_version = version;
  return g;
}

static void test_gid_select(void **state) {
  (void)state;
  /* mlx5's layout: link-local v1/v2, then IPv4-mapped v1/v2. */
  brd_ib_gid_t mlx[4] = {gid("fe80::2c9:300:a0:1", 1), gid("fe80::2c9:300:a0:1", 2),
                         gid("::ffff:10.1.1.1", 1), gid("::ffff:10.1.1.1", 2)};
  assert_int_equal(brd_ib_gid_select(mlx, 4, AF_INET, 2), 3);
  assert_int_equal(brd_ib_gid_select(mlx, 4, AF_INET, 1), 2);
  assert_int_equal(brd_ib_gid_select(mlx, 4, AF_INET6, 2), 1);
  assert_int_equal(brd_ib_gid_select(mlx, 4, AF_INET6, 1), 0);
  assert_int_equal(brd_ib_gid_select(mlx, 1, AF_INET, 2), 0);
  /* IPv4 entries before the link-local ones; an empty slot in between. */
  brd_ib_gid_t odd[5] = {gid("::ffff:192.168.0.7", 2), gid(NULL, 0), gid("fe80::1", 2),
                         gid("::ffff:192.168.0.7", 1), gid("2001:db8::5", 2)};
  assert_int_equal(brd_ib_gid_select(odd, 5, AF_INET, 2), 0);
  assert_int_equal(brd_ib_gid_select(odd, 5, AF_INET, 1), 3);
  assert_int_equal(brd_ib_gid_select(odd, 5, AF_INET6, 2), 2);
  /* Only RoCE v1 entries: the family still wins. */
  brd_ib_gid_t v1[3] = {gid("fe80::9", 1), gid("::ffff:10.0.0.9", 1), gid(NULL, 0)};
  assert_int_equal(brd_ib_gid_select(v1, 3, AF_INET, 2), 1);
}

/* NCCL_NET_GDR_LEVEL: names in any case, NCCL's old numbers. */
static void test_gdr_level_parse(void **state) {
  (void)state;
  static const struct {
    const char *s;
    int want;
  } cases[] = {{"LOC", BRD_IB_PATH_LOC}, {"pix", BRD_IB_PATH_PIX}, {"PXB", BRD_IB_PATH_PXB},
               {"PHB", BRD_IB_PATH_PHB}, {"SYS", BRD_IB_PATH_SYS}, {"NVL", BRD_IB_PATH_NVL},
               {"0", BRD_IB_PATH_LOC},   {"1", BRD_IB_PATH_PIX},   {"2", BRD_IB_PATH_PXB},
               {"3", BRD_IB_PATH_PHB},   {"4", BRD_IB_PATH_SYS},   {"5", BRD_IB_PATH_SYS},
               {"9", BRD_IB_PATH_SYS},   {NULL, -1},               {"", -1},
               {"NODE", -1},             {"2x", -1},               {"-1", -1}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = brd_ib_gdr_level_parse(cases[i].s);
    if (got != cases[i].want)
      fail_msg("NCCL_NET_GDR_LEVEL=%s: %d, want %d", cases[i].s ? cases[i].s : "(unset)", got,
               cases[i].want);
  }
  assert_string_equal(brd_ib_path_name(BRD_IB_PATH_PXB), "PXB");
  assert_string_equal(brd_ib_path_name(BRD_IB_PATH_SYS), "SYS");
  assert_string_equal(brd_ib_path_name(42), "?");
}

/* GPU-NIC distances over hand-made sysfs paths (an H100 box: GPU and
 * NIC behind one PCIe switch, two switches, other root ports, other
 * sockets). */
static void test_pci_distance(void **state) {
  (void)state;
  static const char *const gpu =
      "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";
  static const struct {
    const char *nic;
    int gnuma, nnuma, want;
  } cases[] = {
      /* Same switch: the NIC two levels below the shared bridge. */
      {"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0", 0, 0,
       BRD_IB_PATH_PIX},
      /* A second switch on the NIC's side. */
      {"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/"
       "0000:1b:00.0/0000:1c:00.0", 0, 0, BRD_IB_PATH_PXB},
      /* Only the root port shared. */
      {"/sys/devices/pci0000:15/0000:15:02.0/0000:20:00.0", 0, 0, BRD_IB_PATH_PHB},
      /* Another host bridge on the same NUMA node; on another node. */
      {"/sys/devices/pci0000:30/0000:30:01.0/0000:31:00.0", 0, 0, BRD_IB_PATH_PHB},
      {"/sys/devices/pci0000:b0/0000:b0:01.0/0000:b1:00.0", 0, 1, BRD_IB_PATH_SYS},
      {"/sys/devices/pci0000:b0/0000:b0:01.0/0000:b1:00.0", -1, -1, BRD_IB_PATH_SYS},
      /* The device itself (a trailing slash changes nothing). */
      {"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/", 0, 0,
       BRD_IB_PATH_LOC},
      /* Not PCI, or unknown. */
      {"/sys/devices/virtual/net/lo", 0, 0, BRD_IB_PATH_SYS},
      {NULL, 0, 0, BRD_IB_PATH_SYS},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = brd_ib_pci_distance(gpu, cases[i].gnuma, cases[i].nic, cases[i].nnuma);
    if (got != cases[i].want)
      fail_msg("case %zu (%s): %s, want %s", i, cases[i].nic ? cases[i].nic : "NULL",
               brd_ib_path_name(got), brd_ib_path_name(cases[i].want));
    /* Symmetric. */
    assert_int_equal(brd_ib_pci_distance(cases[i].nic, cases[i].nnuma, gpu, cases[i].gnuma),
                     got);
  }
}

/* ---- devices ---------------------------------------------------------------------- */

static int count_devices(void) {
  void *ctx = NULL;
  int n = -1;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->devices(&n), ncclSuccess);
  assert_int_equal(net->finalize(ctx), ncclSuccess);
  return n;
}

static void test_devices(void **state) {
  (void)state;
  NEED_MOCK();
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  brd_net_props_t p;
  int n = 0;
  assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->devices(&n), ncclSuccess);
  assert_int_equal(n, 2);
  assert_int_equal(net->getProperties(0, &p), ncclSuccess);
  assert_string_equal(p.name, "mlx5_0");
  assert_int_equal(p.port, 1);
  /* The mock takes DMA-BUF (NCCL's probe); no nvidia-peermem here. A
   * build without CUDA registers host memory only. */
  assert_int_equal(p.ptrSupport, BRAID_CUDA ? BRD_NET_PTR_HOST | BRD_NET_PTR_DMABUF
                                            : BRD_NET_PTR_HOST);
  assert_int_equal(p.maxRecvs, 8); /* NCCL_NET_IB_MAX_RECVS */
  assert_int_equal(p.speed, 100000); /* the mock's 4x EDR */
  assert_int_equal(net->getProperties(1, &p), ncclSuccess);
  assert_string_equal(p.name, "mlx5_1");
  assert_int_equal(net->getProperties(2, &p), ncclInternalError);
  assert_int_equal(net->finalize(ctx), ncclSuccess);
  /* DMA-BUF off (by the NIC, or by NCCL_DMABUF_ENABLE); peermem present. */
  static const struct {
    const char *mock_dmabuf, *enable, *peermem;
    int want;
  } bits[] = {{"0", NULL, "0", BRD_NET_PTR_HOST},
              {NULL, "0", "0", BRD_NET_PTR_HOST},
              {"0", NULL, "1", BRD_NET_PTR_HOST | (BRAID_CUDA ? BRD_NET_PTR_CUDA : 0)},
              {NULL, NULL, "1",
               BRD_NET_PTR_HOST | (BRAID_CUDA ? BRD_NET_PTR_CUDA | BRD_NET_PTR_DMABUF : 0)}};
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
    env("BRAID_MOCK_IB_DMABUF", bits[i].mock_dmabuf);
    env("NCCL_DMABUF_ENABLE", bits[i].enable);
    env("BRAID_IB_PEERMEM", bits[i].peermem);
    assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
    assert_int_equal(net->getProperties(1, &p), ncclSuccess);
    if (p.ptrSupport != bits[i].want)
      fail_msg("case %zu: ptrSupport 0x%x, want 0x%x", i, p.ptrSupport, bits[i].want);
    assert_int_equal(net->finalize(ctx), ncclSuccess);
  }
  env("BRAID_MOCK_IB_DMABUF", NULL);
  env("NCCL_DMABUF_ENABLE", NULL);
  env("BRAID_IB_PEERMEM", "0");

  env("NCCL_IB_HCA", "^mlx5_0");
  assert_int_equal(count_devices(), 1);
  env("NCCL_IB_HCA", "=mlx5");
  assert_int_equal(count_devices(), 0);
  env("NCCL_IB_HCA", "mlx5_1:2");
  assert_int_equal(count_devices(), 0);
  env("NCCL_IB_HCA", "mlx5_1:1,mlx5_0");
  assert_int_equal(count_devices(), 2);
  env("NCCL_IB_HCA", NULL);
  env("NCCL_IB_DISABLE", "1");
  assert_int_equal(count_devices(), 0);
  env("NCCL_IB_DISABLE", NULL);
  /* A port that is not active is not a device; three ports over two HCAs. */
  env("BRAID_MOCK_IB_DEVICES", "mlx5_0:1:IB:DOWN,mlx5_1:2:ETH,mlx5_2:1:IB");
  assert_int_equal(count_devices(), 3);
  env("BRAID_MOCK_IB_DEVICES", NULL);
  assert_int_equal(count_devices(), 2);
}

/* On real verbs: NCCL_IB_HCA kept exactly the named device, port 1, host
 * memory only (a build without CUDA, or no GPU behind soft-RoCE). */
static void test_real_device(void **state) {
  (void)state;
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  brd_net_props_t p;
  int n = 0;
  assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->devices(&n), ncclSuccess);
  assert_int_equal(n, 1);
  assert_int_equal(net->getProperties(0, &p), ncclSuccess);
  assert_string_equal(p.name, getenv("BRAID_TEST_IB_REAL"));
  assert_int_equal(p.port, 1);
  assert_int_equal(p.ptrSupport & BRD_NET_PTR_HOST, BRD_NET_PTR_HOST);
  assert_int_equal(p.maxRecvs, 8);
  assert_true(p.speed > 0);
  assert_int_equal(net->finalize(ctx), ncclSuccess);
}

/* ---- a loopback connection ------------------------------------------------------------- */

typedef struct {
  void *ctx, *lcomm, *scomm, *rcomm;
} conn_t;

static void conn_open(conn_t *k, int dev) {
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  char handle[BRD_NET_HANDLE_BYTES];
  if (mock == NULL) dev = 0; /* real verbs: the one device NCCL_IB_HCA kept */
  memset(k, 0, sizeof(*k));
  assert_int_equal(net->init(&k->ctx, 7, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->listen(k->ctx, dev, handle, &k->lcomm), ncclSuccess);
  /* Connect completes without accept ever being called. */
  double end = now_s() + 10;
  while (k->scomm == NULL && now_s() < end)
    assert_int_equal(net->connect(k->ctx, dev, handle, &k->scomm, NULL), ncclSuccess);
  assert_non_null(k->scomm);
  while (k->rcomm == NULL && now_s() < end)
    assert_int_equal(net->accept(k->lcomm, &k->rcomm, NULL), ncclSuccess);
  assert_non_null(k->rcomm);
}

static void conn_close(conn_t *k) {
  assert_int_equal(net->closeSend(k->scomm), ncclSuccess);
  assert_int_equal(net->closeRecv(k->rcomm), ncclSuccess);
  assert_int_equal(net->closeListen(k->lcomm), ncclSuccess);
  assert_int_equal(net->finalize(k->ctx), ncclSuccess);
}

/* Posts a receive and a send until both are accepted, then tests both to
 * the end. Returns the first error, with the received size. */
static ncclResult_t transfer(conn_t *k, void *sbuf, size_t ssize, void *smh, void *rbuf,
                             size_t rsize, void *rmh, int *got) {
  void *rreq = NULL, *sreq = NULL;
  int tag = 0, sdone = 0, rdone = 0, dummy;
  ncclResult_t res;
  double end = now_s() + 20;
  while ((rreq == NULL || sreq == NULL) && now_s() < end) {
    if (rreq == NULL &&
        (res = net->irecv(k->rcomm, 1, &rbuf, &rsize, &tag, &rmh, NULL, &rreq)) != ncclSuccess)
      return res;
    if (sreq == NULL &&
        (res = net->isend(k->scomm, sbuf, ssize, 0, smh, NULL, &sreq)) != ncclSuccess)
      return res;
  }
  if (rreq == NULL || sreq == NULL) fail_msg("requests not accepted within 20 s");
  while ((!sdone || !rdone) && now_s() < end) {
    if (!sdone && (res = net->test(sreq, &sdone, &dummy)) != ncclSuccess) return res;
    if (!rdone && (res = net->test(rreq, &rdone, got)) != ncclSuccess) return res;
  }
  if (!sdone || !rdone) fail_msg("transfer of %zu bytes not done within 20 s", ssize);
  return ncclSuccess;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (unsigned char)(x >> 16);
  }
}

static void sizes_on(int dev) {
  static const size_t sizes[] = {0, 1, 7, 128, 4095, 65536 + 3, (1 << 20) + 1, (8 << 20) + 5};
  const size_t cap = (8 << 20) + 64;
  conn_t k;
  conn_open(&k, dev);
  unsigned char *s = malloc(cap), *r = malloc(cap), *ref = malloc(cap);
  assert_non_null(s);
  assert_non_null(r);
  assert_non_null(ref);
  void *smh = NULL, *rmh = NULL;
  assert_int_equal(net->regMr(k.scomm, s, cap, BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, cap, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    size_t n = sizes[i];
    size_t off = i % 3; /* unaligned buffers */
    fill(s + off, n, (unsigned)(i + 1));
    memcpy(ref, s + off, n);
    memset(r, 0xa5, cap);
    int got = -1;
    /* The receive is larger than the send. */
    assert_int_equal(transfer(&k, s + off, n, smh, r + 1, n + 40, rmh, &got), ncclSuccess);
    assert_int_equal(got, (int)n);
    assert_memory_equal(r + 1, ref, n);
    assert_int_equal(r[0], 0xa5);
    assert_int_equal(r[1 + n], 0xa5); /* nothing past the message */
  }
  assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
  assert_int_equal(net->deregMr(k.rcomm, rmh), ncclSuccess);
  conn_close(&k);
  free(s);
  free(r);
  free(ref);
}

static void test_sizes_ib(void **state) {
  (void)state;
  sizes_on(0);
}

static void test_sizes_roce(void **state) {
  (void)state;
  /* Two QPs per connection: messages rotate over them. */
  env("NCCL_IB_QPS_PER_CONNECTION", "2");
  sizes_on(1);
  env("NCCL_IB_QPS_PER_CONNECTION", NULL);
}

/* ---- several QPs per connection ------------------------------------------------------------ */

/* The share each QP carries: ceil(size / nq) rounded up to 128. */
static void test_split_chunk(void **state) {
  (void)state;
  static const struct {
    size_t size;
    int nq;
    size_t chunk;
  } cases[] = {
      {0, 1, 0},       {0, 4, 0},           {1, 1, 128},       {1, 4, 128},
      {127, 3, 128},   {128, 1, 128},       {128, 2, 128},     {129, 1, 256},
      {129, 2, 128},   {256, 2, 128},       {257, 2, 256},     {4101, 3, 1408},
      {4096, 4, 1024}, {(1 << 20) + 3, 4, 262272}, {1000, 0, 1024}, {1 << 30, 128, 1 << 23},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t got = brd_ib_split_chunk(cases[i].size, cases[i].nq);
    if (got != cases[i].chunk)
      fail_msg("split of %zu bytes over %d QPs: share %zu, want %zu", cases[i].size, cases[i].nq,
               got, cases[i].chunk);
  }
}

/* The writes with immediate this process posted after write `from`, in
 * order (the data path's; CTS writes carry none). */
static int imm_writes_since(unsigned long from, braid_mock_ib_write_t *out, int max) {
  braid_mock_ib_writes_fn writes = (braid_mock_ib_writes_fn)dlsym(mock, "braid_mock_ib_writes");
  braid_mock_ib_write_log_fn wlog =
      (braid_mock_ib_write_log_fn)dlsym(mock, "braid_mock_ib_write_log");
  assert_non_null(writes);
  assert_non_null(wlog);
  int n = 0;
  for (unsigned long i = from + 1; i <= writes(); i++) {
    braid_mock_ib_write_t w;
    assert_int_equal(wlog(i, &w), 0);
    if (w.has_imm) {
      assert_true(n < max);
      out[n++] = w;
    }
  }
  return n;
}

/* NCCL_IB_SPLIT_DATA_ON_QPS=1 with 1 to 4 QPs: every size lands exact,
 * each QP of the connection carries one write with immediate (the size),
 * the shares are contiguous, in QP order, 128-byte multiples but the
 * last, and a message smaller than 128 x nq carries data on fewer QPs. */
static void test_split_sizes(void **state) {
  (void)state;
  /* On real verbs only the bytes are checked: the write log is the mock's. */
  braid_mock_ib_writes_fn writes =
      mock != NULL ? (braid_mock_ib_writes_fn)dlsym(mock, "braid_mock_ib_writes") : NULL;
  static const size_t sizes[] = {0, 1, 127, 128, 129, 4096 + 5, (1 << 20) + 3};
  /* QPs that carry data, by hand: sizes x nq 1..4. */
  static const int data_qps[7][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1},
                                     {1, 2, 2, 2}, {1, 2, 3, 4}, {1, 2, 3, 4}};
  const size_t cap = (1 << 20) + 256;
  unsigned char *s = calloc(1, cap), *r = malloc(cap), *ref = malloc(cap);
  assert_non_null(s);
  assert_non_null(r);
  assert_non_null(ref);
  env("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  for (int nq = 1; nq <= 4; nq++) {
    char v[8];
    snprintf(v, sizeof(v), "%d", nq);
    env("NCCL_IB_QPS_PER_CONNECTION", v);
    conn_t k;
    conn_open(&k, nq % 2); /* IB and RoCE */
    void *smh = NULL, *rmh = NULL;
    assert_int_equal(net->regMr(k.scomm, s, cap, BRD_NET_PTR_HOST, &smh), ncclSuccess);
    assert_int_equal(net->regMr(k.rcomm, r, cap, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
      size_t n = sizes[i];
      fill(s + 3, n, (unsigned)(nq * 10 + i));
      memcpy(ref, s + 3, n);
      memset(r, 0x5a, cap);
      unsigned long w0 = writes != NULL ? writes() : 0;
      int got = -1;
      assert_int_equal(transfer(&k, s + 3, n, smh, r + 1, n + 200, rmh, &got), ncclSuccess);
      assert_int_equal(got, (int)n);
      assert_memory_equal(r + 1, ref, n);
      assert_int_equal(r[0], 0x5a);
      assert_int_equal(r[1 + n], 0x5a);
      if (writes == NULL) continue;
      braid_mock_ib_write_t w[8];
      int nw = imm_writes_since(w0, w, 8);
      assert_int_equal(nw, nq); /* one immediate per QP, data or not */
      uint64_t off = 0;
      int with_data = 0;
      for (int q = 0; q < nw; q++) {
        for (int p = 0; p < q; p++) assert_int_not_equal(w[p].src_qpn, w[q].src_qpn);
        assert_int_equal(ntohl(w[q].imm), (uint32_t)n);
        if (w[q].len == 0) continue;
        with_data++;
        assert_int_equal(q, with_data - 1); /* the data QPs come first */
        assert_int_equal(w[q].raddr, (uint64_t)(uintptr_t)(r + 1) + off);
        off += w[q].len;
        if (off < n) assert_int_equal(w[q].len % 128, 0);
        assert_true(w[q].len <= brd_ib_split_chunk(n, nq));
      }
      assert_int_equal(off, n);
      if (with_data != data_qps[i][nq - 1])
        fail_msg("%zu bytes over %d QPs: data on %d QPs, want %d", n, nq, with_data,
                 data_qps[i][nq - 1]);
    }
    assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
    assert_int_equal(net->deregMr(k.rcomm, rmh), ncclSuccess);
    conn_close(&k);
  }
  /* NCCL's default: each message whole on one QP, the next on the next. */
  env("NCCL_IB_SPLIT_DATA_ON_QPS", NULL);
  env("NCCL_IB_QPS_PER_CONNECTION", "2");
  conn_t k;
  conn_open(&k, 0);
  void *smh = NULL, *rmh = NULL;
  assert_int_equal(net->regMr(k.scomm, s, cap, BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, cap, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  uint32_t qpn[3] = {0};
  for (int m = 0; m < 3; m++) {
    unsigned long w0 = writes != NULL ? writes() : 0;
    int got = -1;
    fill(s, 4096 + 5, 300u + (unsigned)m);
    assert_int_equal(transfer(&k, s, 4096 + 5, smh, r, 8192, rmh, &got), ncclSuccess);
    assert_int_equal(got, 4096 + 5);
    assert_memory_equal(r, s, 4096 + 5);
    if (writes == NULL) continue;
    braid_mock_ib_write_t w[4];
    assert_int_equal(imm_writes_since(w0, w, 4), 1);
    assert_int_equal(w[0].len, 4096 + 5);
    qpn[m] = w[0].src_qpn;
  }
  if (writes != NULL) {
    assert_int_not_equal(qpn[0], qpn[1]);
    assert_int_equal(qpn[0], qpn[2]);
  }
  assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
  assert_int_equal(net->deregMr(k.rcomm, rmh), ncclSuccess);
  conn_close(&k);
  env("NCCL_IB_QPS_PER_CONNECTION", NULL);
  free(s);
  free(r);
  free(ref);
}

/* The receiver completes a split message only once every QP's part is
 * in: the mock holds the writes with immediate, and lets them go one at
 * a time. */
static void test_split_completion(void **state) {
  (void)state;
  NEED_MOCK();
  braid_mock_ib_release_fn release = (braid_mock_ib_release_fn)dlsym(mock, "braid_mock_ib_release");
  assert_non_null(release);
  static const struct {
    int nq;
    size_t size;
  } cases[] = {{3, 4096 + 5}, {4, 129}, {3, 0}, {2, (1 << 20) + 3}};
  const size_t cap = (1 << 20) + 64;
  unsigned char *s = malloc(cap), *r = malloc(cap);
  assert_non_null(s);
  assert_non_null(r);
  env("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    char v[8];
    snprintf(v, sizeof(v), "%d", cases[c].nq);
    env("NCCL_IB_QPS_PER_CONNECTION", v);
    conn_t k;
    conn_open(&k, 0);
    void *smh = NULL, *rmh = NULL;
    assert_int_equal(net->regMr(k.scomm, s, cap, BRD_NET_PTR_HOST, &smh), ncclSuccess);
    assert_int_equal(net->regMr(k.rcomm, r, cap, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
    size_t n = cases[c].size, rsize = n + 8;
    fill(s, n, (unsigned)c + 77);
    memset(r, 0, cap);
    void *rbuf = r, *rreq = NULL, *sreq = NULL;
    int tag = 0, done = 0, got = -1;
    double end = now_s() + 20;
    env("BRAID_MOCK_IB_HOLD_IMM", "1");
    while ((rreq == NULL || sreq == NULL) && now_s() < end) {
      if (rreq == NULL)
        assert_int_equal(net->irecv(k.rcomm, 1, &rbuf, &rsize, &tag, &rmh, NULL, &rreq),
                         ncclSuccess);
      if (sreq == NULL)
        assert_int_equal(net->isend(k.scomm, s, n, 0, smh, NULL, &sreq), ncclSuccess);
    }
    assert_non_null(rreq);
    assert_non_null(sreq);
    env("BRAID_MOCK_IB_HOLD_IMM", NULL);
    for (int part = 0; part < cases[c].nq; part++) {
      for (int i = 0; i < 20; i++) {
        assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
        assert_false(done);
        assert_int_equal(net->test(sreq, &done, NULL), ncclSuccess);
        assert_false(done);
      }
      assert_int_equal(release(1), 1);
    }
    assert_int_equal(release(1), 0); /* one per QP, no more */
    done = 0;
    while (!done && now_s() < end) assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
    assert_true(done);
    assert_int_equal(got, (int)n);
    assert_memory_equal(r, s, n);
    done = 0;
    while (!done && now_s() < end) assert_int_equal(net->test(sreq, &done, NULL), ncclSuccess);
    assert_true(done);
    assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
    assert_int_equal(net->deregMr(k.rcomm, rmh), ncclSuccess);
    conn_close(&k);
  }
  env("NCCL_IB_SPLIT_DATA_ON_QPS", NULL);
  env("NCCL_IB_QPS_PER_CONNECTION", NULL);
  free(s);
  free(r);
}

/* ---- grouped receives (maxRecvs 8) ------------------------------------------------------------ */

/* One irecv of n buffers matched by n sends of the group, by tag, in any
 * order: nothing moves before the last is matched; test reports each
 * buffer's size; a tag the group lacks waits (NULL). 40 groups of 1 to 8
 * buffers, over 1 QP and over 3 split QPs. */
static void grouped(int nq, int split) {
  braid_mock_ib_writes_fn writes =
      mock != NULL ? (braid_mock_ib_writes_fn)dlsym(mock, "braid_mock_ib_writes") : NULL;
  enum { SLOT = 8192, G = 40 };
  char v[8];
  snprintf(v, sizeof(v), "%d", nq);
  env("NCCL_IB_QPS_PER_CONNECTION", v);
  env("NCCL_IB_SPLIT_DATA_ON_QPS", split ? "1" : NULL);
  conn_t k;
  conn_open(&k, 1);
  unsigned char *s = malloc(8 * SLOT), *r = malloc(8 * SLOT);
  assert_non_null(s);
  assert_non_null(r);
  void *smh, *rmh;
  assert_int_equal(net->regMr(k.scomm, s, 8 * SLOT, BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, 8 * SLOT, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  double end = now_s() + 30;
  for (int g = 0; g < G; g++) {
    int n = 1 + g % 8;
    void *data[8];
    size_t rsz[8], ssz[8];
    int tags[8], sizes[8];
    for (int i = 0; i < n; i++) {
      data[i] = r + i * SLOT;
      rsz[i] = SLOT - 16;
      tags[i] = 100 + i;
      /* 0, 1, 127, 128, 129, ... bytes; buffer i gets its own pattern */
      static const size_t pick[] = {0, 1, 127, 128, 129, 4101, 8000, 3000};
      ssz[i] = pick[(i + g) % 8];
      fill(s + i * SLOT, ssz[i], (unsigned)(g * 8 + i));
    }
    memset(r, 0xee, 8 * SLOT);
    void *rreq = NULL, *stray = NULL;
    void *mhs[8] = {rmh, rmh, rmh, rmh, rmh, rmh, rmh, rmh};
    while (rreq == NULL && now_s() < end) {
      assert_int_equal(net->irecv(k.rcomm, n, data, rsz, tags, mhs, NULL, &rreq), ncclSuccess);
      /* The sender progresses too; a tag the group does not hold is
       * never matched. */
      assert_int_equal(net->isend(k.scomm, s, 1, 999, smh, NULL, &stray), ncclSuccess);
      assert_null(stray);
    }
    assert_non_null(rreq);
    assert_int_equal(net->isend(k.scomm, s, 1, 999, smh, NULL, &stray), ncclSuccess);
    assert_null(stray);
    void *sreq[8] = {0};
    for (int j = n - 1; j >= 0; j--) { /* sends in the reverse order of the buffers */
      unsigned long before = writes != NULL ? writes() : 0;
      while (sreq[j] == NULL && now_s() < end)
        assert_int_equal(net->isend(k.scomm, s + j * SLOT, ssz[j], 100 + j, smh, NULL, &sreq[j]),
                         ncclSuccess);
      assert_non_null(sreq[j]);
      if (j > 0 && writes != NULL) /* nothing posted before the last */
        assert_int_equal(writes(), before);
    }
    int done = 0;
    memset(sizes, -1, sizeof(sizes));
    while (!done && now_s() < end) assert_int_equal(net->test(rreq, &done, sizes), ncclSuccess);
    assert_true(done);
    for (int i = 0; i < n; i++) {
      assert_int_equal(sizes[i], (int)ssz[i]);
      assert_memory_equal(r + i * SLOT, s + i * SLOT, ssz[i]);
      assert_int_equal(r[i * SLOT + ssz[i]], 0xee);
    }
    assert_int_equal(sizes[n < 8 ? n : 7] == -1, n < 8);
    for (int j = 0; j < n; j++) {
      int sdone = 0, ss = -1;
      while (!sdone && now_s() < end) assert_int_equal(net->test(sreq[j], &sdone, &ss), ncclSuccess);
      assert_true(sdone);
      assert_int_equal(ss, (int)ssz[j]);
    }
  }
  /* 0 or 9 buffers: refused. */
  void *req = NULL;
  void *d9[9] = {r, r, r, r, r, r, r, r, r};
  size_t z9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  int t9[9] = {0};
  void *m9[9] = {rmh, rmh, rmh, rmh, rmh, rmh, rmh, rmh, rmh};
  assert_int_equal(net->irecv(k.rcomm, 9, d9, z9, t9, m9, NULL, &req), ncclInternalError);
  assert_int_equal(net->irecv(k.rcomm, 0, d9, z9, t9, m9, NULL, &req), ncclInternalError);
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  free(s);
  free(r);
  env("NCCL_IB_QPS_PER_CONNECTION", NULL);
  env("NCCL_IB_SPLIT_DATA_ON_QPS", NULL);
}

static void test_grouped_recv(void **state) {
  (void)state;
  grouped(1, 0);
  grouped(3, 1);
  grouped(2, 0);
}

/* The QP attributes the NCCL_IB_* variables and the GID choice set. */
static void test_qp_attrs(void **state) {
  (void)state;
  NEED_MOCK();
  braid_mock_ib_last_qp_fn last = (braid_mock_ib_last_qp_fn)dlsym(mock, "braid_mock_ib_last_qp");
  assert_non_null(last);
  env("NCCL_IB_TC", "106");
  env("NCCL_IB_SL", "3");
  env("NCCL_IB_TIMEOUT", "18");
  env("NCCL_IB_RETRY_CNT", "5");
  conn_t k;
  conn_open(&k, 1); /* RoCE: the receiver's QP is at RTS now */
  struct ibv_qp_attr a;
  assert_int_equal(last(&a), 0);
  assert_int_equal(a.ah_attr.is_global, 1);
  assert_int_equal(a.ah_attr.grh.sgid_index, 3); /* IPv4, RoCE v2 */
  assert_int_equal(a.ah_attr.grh.traffic_class, 106);
  assert_int_equal(a.ah_attr.grh.hop_limit, 255);
  assert_int_equal(a.ah_attr.sl, 3);
  assert_int_equal(a.timeout, 18);
  assert_int_equal(a.retry_cnt, 5);
  assert_int_equal(a.rnr_retry, 7);
  assert_int_equal(a.path_mtu, IBV_MTU_1024); /* the mock's RoCE MTU */
  conn_close(&k);
  env("NCCL_IB_ROCE_VERSION_NUM", "1");
  conn_open(&k, 1);
  assert_int_equal(last(&a), 0);
  assert_int_equal(a.ah_attr.grh.sgid_index, 2);
  conn_close(&k);
  env("NCCL_IB_ROCE_VERSION_NUM", NULL);
  env("NCCL_IB_GID_INDEX", "1");
  conn_open(&k, 1);
  assert_int_equal(last(&a), 0);
  assert_int_equal(a.ah_attr.grh.sgid_index, 1);
  conn_close(&k);
  env("NCCL_IB_GID_INDEX", NULL);
  env("NCCL_IB_TC", NULL);
  env("NCCL_IB_SL", NULL);
  env("NCCL_IB_TIMEOUT", NULL);
  env("NCCL_IB_RETRY_CNT", NULL);
  conn_open(&k, 0); /* IB: a LID, no GRH */
  assert_int_equal(last(&a), 0);
  assert_int_equal(a.ah_attr.is_global, 0);
  assert_int_equal(a.ah_attr.dlid, 0x11); /* mlx5_0 port 1 */
  assert_int_equal(a.timeout, 20);
  assert_int_equal(a.retry_cnt, 7);
  assert_int_equal(a.path_mtu, IBV_MTU_4096);
  conn_close(&k);
}

/* 32 receives of different buffers and 32 sends of different sizes: the
 * 33rd of each is refused (NULL), and message k lands in buffer k. */
static void test_order_and_limit(void **state) {
  (void)state;
  enum { N = BRD_NET_MAX_REQUESTS, SLOT = 4096 };
  conn_t k;
  conn_open(&k, 0);
  unsigned char *s = malloc(N * SLOT), *r = malloc(N * SLOT);
  assert_non_null(s);
  assert_non_null(r);
  memset(r, 0, N * SLOT);
  void *smh, *rmh;
  assert_int_equal(net->regMr(k.scomm, s, N * SLOT, BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, N * SLOT, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  void *rreq[N + 1] = {0}, *sreq[N + 1] = {0};
  int tag = 0;
  for (int i = 0; i < N; i++) fill(s + i * SLOT, SLOT, 100u + (unsigned)i);
  double end = now_s() + 20;
  int nr = 0, ns = 0;
  while ((nr < N || ns < N) && now_s() < end) {
    if (nr < N) {
      void *d = r + nr * SLOT;
      size_t sz = SLOT;
      assert_int_equal(net->irecv(k.rcomm, 1, &d, &sz, &tag, &rmh, NULL, &rreq[nr]), ncclSuccess);
      if (rreq[nr] != NULL) nr++;
    }
    if (ns < N) {
      assert_int_equal(net->isend(k.scomm, s + ns * SLOT, (size_t)(ns * 97 + 1), 0, smh, NULL,
                                  &sreq[ns]), ncclSuccess);
      if (sreq[ns] != NULL) ns++;
    }
  }
  assert_int_equal(nr, N);
  assert_int_equal(ns, N);
  /* The 33rd of each: no room. */
  void *d = r, *extra = (void *)1;
  size_t sz = SLOT;
  assert_int_equal(net->irecv(k.rcomm, 1, &d, &sz, &tag, &rmh, NULL, &extra), ncclSuccess);
  assert_null(extra);
  extra = (void *)1;
  assert_int_equal(net->isend(k.scomm, s, 1, 0, smh, NULL, &extra), ncclSuccess);
  assert_null(extra);
  /* Test in reverse: completion order does not matter to the matching. */
  for (int i = N - 1; i >= 0; i--) {
    int done = 0, got = -1;
    while (!done && now_s() < end) assert_int_equal(net->test(rreq[i], &done, &got), ncclSuccess);
    assert_true(done);
    assert_int_equal(got, i * 97 + 1);
    assert_memory_equal(r + i * SLOT, s + i * SLOT, (size_t)got);
    assert_int_equal(r[i * SLOT + got], 0);
    done = 0;
    while (!done && now_s() < end) assert_int_equal(net->test(sreq[i], &done, &got), ncclSuccess);
    assert_true(done);
  }
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  free(s);
  free(r);
}

/* Tests req until done (or fails the test after 20 s). */
static void test_done(void *req, int *size) {
  int done = 0;
  double end = now_s() + 20;
  while (!done && now_s() < end) assert_int_equal(net->test(req, &done, size), ncclSuccess);
  if (!done) fail_msg("request not done within 20 s");
}

/* Runs a ping of N messages, the receiver keeping AHEAD receives posted
 * and reposting each once its message is tested (as the proxy does), the
 * sender sending the next once the last is done (as a ping-pong does).
 * Returns the RDMA writes without immediate (clear-to-send entries: the
 * data path's writes carry one) and checks every message's bytes. */
static int cts_writes_for_ping(int n, int ahead) {
  enum { SLOT = 4096, NPOST = 4 };
  braid_mock_ib_writes_fn writes = (braid_mock_ib_writes_fn)dlsym(mock, "braid_mock_ib_writes");
  braid_mock_ib_write_log_fn wlog =
      (braid_mock_ib_write_log_fn)dlsym(mock, "braid_mock_ib_write_log");
  assert_non_null(writes);
  assert_non_null(wlog);
  conn_t k;
  conn_open(&k, 0);
  unsigned char *s = malloc((size_t)n * SLOT), *r = calloc(NPOST, SLOT);
  assert_non_null(s);
  assert_non_null(r);
  void *smh, *rmh;
  assert_int_equal(net->regMr(k.scomm, s, (size_t)n * SLOT, BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, NPOST * SLOT, BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  for (int i = 0; i < n; i++) fill(s + (size_t)i * SLOT, SLOT, 7u + (unsigned)i);
  unsigned long from = writes();
  void *rreq[NPOST] = {0};
  int tag = 0, posted = 0;
  double end = now_s() + 20;
  for (int i = 0; i < n; i++) {
    void *sreq = NULL;
    size_t len = (size_t)(i * 131 % SLOT) + 8;
    int want = i + NPOST < n ? i + NPOST : n;
    while ((sreq == NULL || posted < want) && now_s() < end) {
      /* Keep NPOST receives posted (message j lands in buffer j % NPOST);
       * an irecv before the connection is ready gives no request. */
      if (posted < want) {
        void *d = r + (size_t)(posted % NPOST) * SLOT;
        size_t sz = SLOT;
        void *req = NULL;
        assert_int_equal(net->irecv(k.rcomm, 1, &d, &sz, &tag, &rmh, NULL, &req), ncclSuccess);
        if (req != NULL) rreq[posted++ % NPOST] = req;
      }
      if (sreq == NULL)
        assert_int_equal(net->isend(k.scomm, s + (size_t)i * SLOT, len, 0, smh, NULL, &sreq),
                         ncclSuccess);
      /* The receiver's calls are what send held entries: test its oldest. */
      int done = 0, got = 0;
      if (sreq == NULL && posted > i)
        assert_int_equal(net->test(rreq[i % NPOST], &done, &got), ncclSuccess);
      assert_false(done);
    }
    if (sreq == NULL) fail_msg("message %d of %d never got its clear-to-send (ahead %d)", i, n,
                               ahead);
    int got = -1;
    test_done(rreq[i % NPOST], &got);
    assert_int_equal(got, (int)len);
    assert_memory_equal(r + (size_t)(i % NPOST) * SLOT, s + (size_t)i * SLOT, len);
    test_done(sreq, &got);
  }
  int cts = 0;
  for (unsigned long w = from + 1; w <= writes(); w++) {
    braid_mock_ib_write_t one;
    assert_int_equal(wlog(w, &one), 0);
    if (!one.has_imm) cts++;
  }
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  free(s);
  free(r);
  return cts;
}

/* BRAID_IB_CTS_AHEAD: a receiver that keeps 4 receives posted and reposts
 * one at a time sends its clear-to-send entries in about one write per two
 * messages by default (2), fewer still with 1, one per receive with 32
 * (NCCL's way), and every message lands exact and in order: the sender
 * never waits for good on a held entry. */
static void test_cts_coalesced(void **state) {
  (void)state;
  NEED_MOCK();
  enum { N = 40 }; /* receives posted: N, the last 4 ahead of the last message */
  env("BRAID_IB_CTS_AHEAD", "32");
  int each = cts_writes_for_ping(N, 32);
  env("BRAID_IB_CTS_AHEAD", NULL); /* the default, 2 */
  int dflt = cts_writes_for_ping(N, 2);
  env("BRAID_IB_CTS_AHEAD", "1");
  int fewest = cts_writes_for_ping(N, 1);
  env("BRAID_IB_CTS_AHEAD", NULL);
  print_message("CTS writes for %d messages: %d one by one, %d by default, %d with 1\n", N, each,
                dflt, fewest);
  assert_int_equal(each, N);
  assert_true(dflt <= N * 3 / 5); /* about one per three messages */
  assert_true(fewest < dflt);
  assert_true(fewest >= 1);
}

/* poll_fd: the receive comm's completion channel, readable once data
 * lands; nothing to wait for without requests; -1 for a send that waits
 * for its clear-to-send, and without completion channels. */
static void test_poll_fd(void **state) {
  (void)state;
  conn_t k;
  conn_open(&k, 0);
  static unsigned char s[64], r[64];
  void *smh, *rmh;
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  int got = -1;
  short ev = -1;
  /* Before the connection is up (the sender finishes it at its first
   * isend or test): no descriptor yet. */
  assert_int_equal(net->poll_fd(k.rcomm, &ev), -1);
  fill(s, sizeof(s), 3);
  assert_int_equal(transfer(&k, s, sizeof(s), smh, r, sizeof(r), rmh, &got), ncclSuccess);
  int rfd = net->poll_fd(k.rcomm, &ev);
  if (mock == NULL && rfd == -1) skip(); /* real verbs without channels */
  assert_true(rfd >= 0);
  assert_int_equal(ev, 0); /* nothing posted */
  /* A receive posted: once its clear-to-send write has completed, the
   * channel waits for the data (POLLIN), and nothing has come yet. */
  void *rreq = NULL, *d = r;
  size_t sz = sizeof(r);
  int tag = 0;
  double end = now_s() + 20;
  while (rreq == NULL && now_s() < end)
    assert_int_equal(net->irecv(k.rcomm, 1, &d, &sz, &tag, &rmh, NULL, &rreq), ncclSuccess);
  assert_non_null(rreq);
  int fd;
  while ((fd = net->poll_fd(k.rcomm, &ev)) == BRD_NET_POLL_READY && now_s() < end) {
    int done = 1;
    assert_int_equal(net->test(rreq, &done, &got), ncclSuccess);
    assert_false(done);
  }
  assert_int_equal(fd, rfd);
  assert_int_equal(ev, POLLIN);
  struct pollfd pfd = {rfd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 50), 0);
  /* The send: the data's completion makes the descriptor readable. */
  memset(r, 0, sizeof(r));
  fill(s, sizeof(s), 4);
  void *sreq = NULL;
  while (sreq == NULL && now_s() < end)
    assert_int_equal(net->isend(k.scomm, s, sizeof(s), 0, smh, NULL, &sreq), ncclSuccess);
  assert_non_null(sreq);
  pfd.revents = 0;
  assert_int_equal(poll(&pfd, 1, 10000), 1);
  assert_true(pfd.revents & POLLIN);
  test_done(rreq, &got);
  assert_int_equal(got, (int)sizeof(s));
  assert_memory_equal(r, s, sizeof(s));
  test_done(sreq, &got);
  assert_int_equal(net->poll_fd(k.rcomm, &ev), rfd);
  assert_int_equal(ev, 0); /* done: nothing waits on it */
  /* A send with no receive posted waits for a clear-to-send, which raises
   * no completion: the caller must poll. */
  sreq = (void *)1;
  assert_int_equal(net->isend(k.scomm, s, sizeof(s), 0, smh, NULL, &sreq), ncclSuccess);
  assert_null(sreq);
  assert_int_equal(net->poll_fd(k.scomm, &ev), -1);
  /* Let it through, so the connection closes clean. */
  fill(s, sizeof(s), 5);
  assert_int_equal(transfer(&k, s, sizeof(s), smh, r, sizeof(r), rmh, &got), ncclSuccess);
  assert_memory_equal(r, s, sizeof(s));
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  if (mock == NULL) return;
  /* A provider without completion channels: no descriptor, and the data
   * still moves. */
  env("BRAID_MOCK_IB_COMP_CHANNEL", "0");
  conn_open(&k, 0);
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  fill(s, sizeof(s), 6);
  assert_int_equal(transfer(&k, s, sizeof(s), smh, r, sizeof(r), rmh, &got), ncclSuccess);
  assert_memory_equal(r, s, sizeof(s));
  assert_int_equal(net->poll_fd(k.rcomm, &ev), -1);
  assert_int_equal(net->poll_fd(k.scomm, &ev), -1);
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  env("BRAID_MOCK_IB_COMP_CHANNEL", NULL);
}

/* A send larger than the receive: ncclInvalidUsage, as NCCL. */
static void test_truncated(void **state) {
  (void)state;
  conn_t k;
  conn_open(&k, 0);
  static char s[256], r[256];
  void *smh, *rmh;
  int got;
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  assert_int_equal(transfer(&k, s, 200, smh, r, 100, rmh, &got), ncclInvalidUsage);
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
}

/* The registration cache: a range inside a registered one shares it. */
static void test_reg_cache_and_refusal(void **state) {
  (void)state;
  conn_t k;
  conn_open(&k, 0);
  size_t n = 1 << 20;
  char *buf = malloc(n);
  assert_non_null(buf);
  void *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(net->regMr(k.scomm, buf, n, BRD_NET_PTR_HOST, &a), ncclSuccess);
  env("BRAID_MOCK_IB_REG_LIMIT", "65536");
  /* Inside the first: served from the cache, no new registration. */
  assert_int_equal(net->regMr(k.scomm, buf + 4096, n / 2, BRD_NET_PTR_HOST, &b), ncclSuccess);
  char *other = malloc(n);
  assert_non_null(other);
  if (mock != NULL) { /* A new 1 MiB range: refused by the verbs layer (the mock's limit). */
    assert_int_equal(net->regMr(k.scomm, other, n, BRD_NET_PTR_HOST, &c), ncclSystemError);
    assert_null(c);
  }
  /* Host memory said to be CUDA memory, and an unknown type. */
  assert_int_equal(net->regMr(k.scomm, other, n, BRD_NET_PTR_CUDA, &c), ncclInvalidUsage);
  assert_null(c);
  assert_int_equal(net->regMr(k.scomm, other, n, BRD_NET_PTR_DMABUF, &c), ncclInternalError);
  env("BRAID_MOCK_IB_REG_LIMIT", NULL);
  assert_int_equal(net->deregMr(k.scomm, b), ncclSuccess);
  assert_int_equal(net->deregMr(k.scomm, a), ncclSuccess);
  conn_close(&k);
  free(buf);
  free(other);
}

/* A completion error: the send and the receive both end in an error
 * (the receiver's next CTS finds the sender's QP in error), no hang. */
static void completion_error(const char *status, ncclResult_t want) {
  braid_mock_ib_writes_fn writes = (braid_mock_ib_writes_fn)dlsym(mock, "braid_mock_ib_writes");
  assert_non_null(writes);
  conn_t k;
  conn_open(&k, 0);
  static char s[4096], r[4096];
  void *smh, *rmh;
  int got;
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  assert_int_equal(transfer(&k, s, 100, smh, r, 100, rmh, &got), ncclSuccess);
  /* The next write is the receiver's CTS; the one after, the data. */
  char v[32];
  snprintf(v, sizeof(v), "%lu", writes() + 1);
  env("BRAID_MOCK_IB_FAIL_AFTER", v);
  env("BRAID_MOCK_IB_FAIL_STATUS", status);
  double t0 = now_s();
  assert_int_equal(transfer(&k, s, 100, smh, r, 100, rmh, &got), want);
  assert_true(now_s() - t0 < 5);
  const char *last = ncclGetLastError(NULL);
  assert_non_null(strstr(last, "QP "));
  assert_non_null(strstr(last, status[0] == 'R' && status[1] == 'E' && status[2] == 'T'
                                   ? "IBV_WC_RETRY_EXC_ERR" : "IBV_WC_REM_ACCESS_ERR"));
  assert_non_null(strstr(last, "local GID fe80::"));
  assert_non_null(strstr(last, "remote GID fe80::"));
  /* The failed comm keeps that WARN as its own (the why member); the
   * other end's record, if any, is its own too. */
  char why[600], why_r[600];
  size_t nw = net->why(k.scomm, why, sizeof(why));
  size_t nr = net->why(k.rcomm, why_r, sizeof(why_r));
  assert_true(nw > 0 || nr > 0);
  if (nw == 0) memcpy(why, why_r, sizeof(why));
  assert_non_null(strstr(why, "QP "));
  assert_non_null(strstr(why, status[0] == 'R' && status[1] == 'E' && status[2] == 'T'
                                  ? "IBV_WC_RETRY_EXC_ERR" : "IBV_WC_REM_ACCESS_ERR"));
  env("BRAID_MOCK_IB_FAIL_AFTER", NULL);
  env("BRAID_MOCK_IB_FAIL_STATUS", NULL);
  /* The comm stays failed; a fresh one works. */
  void *req = NULL;
  assert_int_equal(net->isend(k.scomm, s, 1, 0, smh, NULL, &req), want);
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  conn_open(&k, 0);
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  assert_int_equal(transfer(&k, s, 100, smh, r, 100, rmh, &got), ncclSuccess);
  /* A fresh comm has no failure to tell, whatever the process's last error. */
  assert_int_equal(net->why(k.scomm, why, sizeof(why)), 0);
  assert_int_equal(net->why(k.rcomm, why, sizeof(why)), 0);
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
}

static void test_completion_error(void **state) {
  (void)state;
  NEED_MOCK();
  completion_error("REM_ACCESS", ncclRemoteError);
  completion_error("RETRY_EXC", ncclRemoteError);
}

/* The peer closing its side fails the waiting request, quietly. */
static void test_peer_closed(void **state) {
  (void)state;
  conn_t k;
  conn_open(&k, 0);
  static char r[64];
  void *rmh, *req = NULL;
  size_t sz = sizeof(r);
  int tag = 0, done = 0;
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  assert_int_equal(net->closeSend(k.scomm), ncclSuccess);
  void *d = r;
  ncclResult_t res = ncclSuccess;
  double end = now_s() + 10;
  while (req == NULL && res == ncclSuccess && now_s() < end)
    res = net->irecv(k.rcomm, 1, &d, &sz, &tag, &rmh, NULL, &req);
  while (req != NULL && res == ncclSuccess && now_s() < end) res = net->test(req, &done, NULL);
  assert_int_equal(res, ncclRemoteError);
  net->deregMr(k.rcomm, rmh);
  assert_int_equal(net->closeRecv(k.rcomm), ncclSuccess);
  assert_int_equal(net->closeListen(k.lcomm), ncclSuccess);
  assert_int_equal(net->finalize(k.ctx), ncclSuccess);
}

/* Last: the mock's port stays down for the rest of the process. */
static void test_port_down(void **state) {
  (void)state;
  NEED_MOCK();
  braid_mock_ib_port_down_fn down =
      (braid_mock_ib_port_down_fn)dlsym(mock, "braid_mock_ib_port_down");
  assert_non_null(down);
  conn_t k;
  conn_open(&k, 0);
  static char s[4096], r[4096];
  void *smh, *rmh;
  int got;
  assert_int_equal(net->regMr(k.scomm, s, sizeof(s), BRD_NET_PTR_HOST, &smh), ncclSuccess);
  assert_int_equal(net->regMr(k.rcomm, r, sizeof(r), BRD_NET_PTR_HOST, &rmh), ncclSuccess);
  assert_int_equal(transfer(&k, s, 10, smh, r, 10, rmh, &got), ncclSuccess);
  assert_int_equal(down("mlx5_0", 1), 0);
  double t0 = now_s();
  assert_int_equal(transfer(&k, s, 10, smh, r, 10, rmh, &got), ncclSystemError);
  assert_true(now_s() - t0 < 5);
  assert_non_null(strstr(ncclGetLastError(NULL), "IBV_EVENT_PORT_ERR"));
  /* The port's event, seen by a comm on it: that comm's own record. */
  char why[600], why_r[600];
  size_t nw = net->why(k.scomm, why, sizeof(why));
  size_t nr = net->why(k.rcomm, why_r, sizeof(why_r));
  assert_true(nw > 0 || nr > 0);
  assert_non_null(strstr(nw > 0 ? why : why_r, "IBV_EVENT_PORT_ERR"));
  net->deregMr(k.scomm, smh);
  net->deregMr(k.rcomm, rmh);
  conn_close(&k);
  /* The down port is no device any more. */
  assert_int_equal(count_devices(), 1);
}

int main(void) {
  char self[PATH_MAX], lib[PATH_MAX + 64];
  const char *real = getenv("BRAID_TEST_IB_REAL");
  if (real != NULL && real[0] != '\0') {
    /* The system's libibverbs, this one device. */
    char hca[128];
    snprintf(hca, sizeof(hca), "=%s", real);
    unsetenv("BRAID_IBVERBS_LIB");
    setenv("NCCL_IB_HCA", hca, 1);
    unsetenv("NCCL_IB_DISABLE");
    setenv("BRAID_IB_PEERMEM", "0", 1);
    brd_param_reload();
    printf("net_ib on real verbs: device %s (mock-only cases skip)\n", real);
    goto run;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  *strrchr(self, '/') = '\0';
  snprintf(lib, sizeof(lib), "%s/../mock/libibverbs-mock.so", self);
  setenv("BRAID_IBVERBS_LIB", lib, 1);
  unsetenv("BRAID_MOCK_IB_DEVICES");
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_DISABLE");
  setenv("BRAID_IB_PEERMEM", "0", 1); /* whatever this host has loaded */
  brd_param_reload();
  mock = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  if (mock == NULL) mock = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (mock == NULL) {
    fprintf(stderr, "cannot open the verbs mock %s: %s (make tests builds it)\n", lib, dlerror());
    return 1;
  }
run:;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hca_match),
      cmocka_unit_test(test_gid_select),
      cmocka_unit_test(test_gdr_level_parse),
      cmocka_unit_test(test_pci_distance),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_sizes_ib),
      cmocka_unit_test(test_sizes_roce),
      cmocka_unit_test(test_split_chunk),
      cmocka_unit_test(test_split_sizes),
      cmocka_unit_test(test_split_completion),
      cmocka_unit_test(test_grouped_recv),
      cmocka_unit_test(test_qp_attrs),
      cmocka_unit_test(test_order_and_limit),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_poll_fd),
    cmocka_unit_test(test_cts_coalesced),
      cmocka_unit_test(test_reg_cache_and_refusal),
      cmocka_unit_test(test_completion_error),
      cmocka_unit_test(test_peer_closed),
      cmocka_unit_test(test_port_down),
  };
  int failed = 0;
  if (mock == NULL) {
    const struct CMUnitTest real_tests[] = {cmocka_unit_test(test_real_device)};
    failed += cmocka_run_group_tests_name("net_ib real device", real_tests, NULL, NULL);
  }
  failed += cmocka_run_group_tests_name("net_ib", tests, NULL, NULL);
  return failed;
}
