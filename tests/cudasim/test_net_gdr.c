/*
 * GPUDirect RDMA in the IB verbs net (src/transport/net_ib.c) on the CUDA
 * simulator and the verbs mock (tests/mock/ibverbs_mock.c, loaded through
 * BRAID_IBVERBS_LIB): cudaMalloc memory is a memfd here, the simulator's
 * cuMemGetHandleForAddressRange hands out that memfd as the DMA-BUF, and
 * the mock's ibv_reg_dmabuf_mr checks that the fd and offset it gets are
 * the memory at the address it gets.
 *
 *   choice     DMA-BUF when the NIC, the driver and NCCL_DMABUF_ENABLE allow
 *              it (even with peermem present); peermem when DMA-BUF is off
 *              (NCCL_DMABUF_ENABLE=0), refused by the NIC's probe or by the
 *              driver, or when the DMA-BUF registration itself fails (an
 *              error without peermem); host staging (regMr refused, the reason at INFO)
 *              when neither; peermem present but refused by the kernel is
 *              an error that says so. Each choice moves bytes into and out
 *              of GPU memory exactly, and getProperties' ptrSupport says
 *              what the NIC takes.
 *   level      NCCL_NET_GDR_LEVEL: LOC forces staging; unset (PXB) stages
 *              too here (the simulated GPU has no sysfs PCI path: SYS);
 *              SYS and NCCL's old 5 allow it. NCCL_NET_GDR_READ keeps
 *              sends off GPU memory (0, or the default before cc 8.0).
 *   flush      iflush posts one 1-byte RDMA read of the last non-empty
 *              GPU buffer into a host word over a loopback QP only where
 *              NCCL needs it (cc < 9.0, or NCCL_NET_FORCE_FLUSH=1; never
 *              with NCCL_GDR_FLUSH_DISABLE=1 nor for host memory).
 *   cache      registrations of GPU memory share a page-range entry;
 *              regMrDmaBuf with the caller's fd and offset, a wrong
 *              offset refused by the mock.
 *   collective a CUDA-mode all-reduce of 2 ranks (one simulated device
 *              each) with every pair forced onto the IB net over the mock:
 *              exact, and the mock carried it.
 *
 * Quick: about a second per flavour.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "nccl.h"
#include "base/param.h"
#include "transport/net_ib.h"
#include "../mock/ibverbs_mock.h"

static const brd_net_ops_t *net = &brd_net_ib;
static void *mock;
static char log_path[PATH_MAX];

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

/* Every knob these tests turn, back to its default. */
static void env_clear(void) {
  static const char *const names[] = {
      "NCCL_DMABUF_ENABLE",  "NCCL_NET_GDR_LEVEL",   "NCCL_NET_GDR_READ",
      "NCCL_NET_FORCE_FLUSH", "NCCL_GDR_FLUSH_DISABLE", "BRAID_IB_PEERMEM",
      "BRAID_MOCK_IB_DMABUF", "BRAID_MOCK_IB_PEERMEM", "BRAID_CUDASIM_DMABUF",
      "BRAID_CUDASIM_CC"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unsetenv(names[i]);
  brd_param_reload();
}

static unsigned long mock_count(const char *sym) {
  unsigned long (*fn)(void) = NULL;
  void *p = dlsym(mock, sym);
  assert_non_null(p);
  memcpy(&fn, &p, sizeof(p));
  return fn();
}

/* The log written since offset `from` (malloc'd, NUL-terminated). */
static char *log_since(long from) {
  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long end = ftell(f);
  char *s = calloc(1, (size_t)(end > from ? end - from : 0) + 1);
  assert_non_null(s);
  if (end > from) {
    fseek(f, from, SEEK_SET);
    assert_int_equal(fread(s, 1, (size_t)(end - from), f), (size_t)(end - from));
  }
  fclose(f);
  return s;
}

static long log_size(void) {
  struct stat st;
  return stat(log_path, &st) == 0 ? (long)st.st_size : 0;
}

static void assert_logged(long from, const char *text) {
  char *s = log_since(from);
  if (strstr(s, text) == NULL) fail_msg("the log lacks \"%s\"; it has:\n%s", text, s);
  free(s);
}

/* ---- a loopback connection ---------------------------------------------------- */

typedef struct {
  void *ctx, *lcomm, *scomm, *rcomm;
} conn_t;

static void conn_open(conn_t *k, int dev) {
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  char handle[BRD_NET_HANDLE_BYTES];
  memset(k, 0, sizeof(*k));
  assert_int_equal(net->init(&k->ctx, 9, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->listen(k->ctx, dev, handle, &k->lcomm), ncclSuccess);
  double end = now_s() + 10;
  while (k->scomm == NULL && now_s() < end)
    assert_int_equal(net->connect(k->ctx, dev, handle, &k->scomm, NULL), ncclSuccess);
  while (k->rcomm == NULL && now_s() < end)
    assert_int_equal(net->accept(k->lcomm, &k->rcomm, NULL), ncclSuccess);
  assert_non_null(k->scomm);
  assert_non_null(k->rcomm);
}

static void conn_close(conn_t *k) {
  assert_int_equal(net->closeSend(k->scomm), ncclSuccess);
  assert_int_equal(net->closeRecv(k->rcomm), ncclSuccess);
  assert_int_equal(net->closeListen(k->lcomm), ncclSuccess);
  assert_int_equal(net->finalize(k->ctx), ncclSuccess);
}

/* One message of n bytes from sbuf to rbuf, both to the end. */
static void transfer(conn_t *k, void *sbuf, size_t n, void *smh, void *rbuf, size_t rsize,
                     void *rmh) {
  void *rreq = NULL, *sreq = NULL;
  int tag = 0, sdone = 0, rdone = 0, got = -1;
  double end = now_s() + 20;
  while ((rreq == NULL || sreq == NULL) && now_s() < end) {
    if (rreq == NULL)
      assert_int_equal(net->irecv(k->rcomm, 1, &rbuf, &rsize, &tag, &rmh, NULL, &rreq),
                       ncclSuccess);
    if (sreq == NULL)
      assert_int_equal(net->isend(k->scomm, sbuf, n, 0, smh, NULL, &sreq), ncclSuccess);
  }
  assert_non_null(rreq);
  assert_non_null(sreq);
  while ((!sdone || !rdone) && now_s() < end) {
    if (!sdone) assert_int_equal(net->test(sreq, &sdone, NULL), ncclSuccess);
    if (!rdone) assert_int_equal(net->test(rreq, &rdone, &got), ncclSuccess);
  }
  assert_true(sdone && rdone);
  assert_int_equal(got, (int)n);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (unsigned char)(x >> 16);
  }
}

enum { MSG = 100003, GPU_BYTES = 1 << 20, GOFF = 4096 + 24 };

/* regMr of GPU memory on the receive side of a connection on dev under
 * the current settings. want: ncclSuccess (then bytes go host -> GPU ->
 * GPU through two registrations, exactly, and dmabuf_delta DMA-BUF
 * registrations were made) or the error expected. */
static void gpu_case(int dev, ncclResult_t want, unsigned long dmabuf_delta) {
  conn_t k;
  conn_open(&k, dev);
  unsigned char *g = NULL, *host = malloc(MSG), *back = malloc(MSG);
  assert_non_null(host);
  assert_non_null(back);
  assert_int_equal(cudaMalloc((void **)&g, GPU_BYTES), cudaSuccess);
  assert_int_equal(cudaMemset(g, 0x3c, GPU_BYTES), cudaSuccess);
  /* cudaMemset of device memory returns before the memory is set (as on a
   * GPU); the NIC's writes below are not ordered after it by any stream. */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long d0 = mock_count("braid_mock_ib_dmabuf_regs");
  void *gmh = NULL, *hmh = NULL;
  ncclResult_t res = net->regMr(k.rcomm, g + GOFF, MSG + 40, BRD_NET_PTR_CUDA, &gmh);
  assert_int_equal(res, want);
  if (res != ncclSuccess) {
    assert_null(gmh);
  } else {
    assert_non_null(gmh);
    /* Host to GPU. */
    assert_int_equal(net->regMr(k.scomm, host, MSG, BRD_NET_PTR_HOST, &hmh), ncclSuccess);
    fill(host, MSG, 11);
    transfer(&k, host, MSG, hmh, g + GOFF + 3, MSG + 37, gmh);
    assert_int_equal(cudaMemcpy(back, g + GOFF + 3, MSG, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, host, MSG);
    unsigned char edge[2];
    assert_int_equal(cudaMemcpy(edge, g + GOFF + 2, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(edge + 1, g + GOFF + 3 + MSG, 1, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(edge[0], 0x3c);
    assert_int_equal(edge[1], 0x3c);
    /* GPU to GPU: the send side reads GPU memory (another page range). */
    void *smh = NULL;
    unsigned char *src = g + GPU_BYTES / 2 + 5;
    fill(host, MSG, 12);
    assert_int_equal(cudaMemcpy(src, host, MSG, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(net->regMr(k.scomm, src, MSG, BRD_NET_PTR_CUDA, &smh), ncclSuccess);
    assert_int_equal(mock_count("braid_mock_ib_dmabuf_regs") - d0, dmabuf_delta);
    transfer(&k, src, MSG, smh, g + GOFF, MSG + 40, gmh);
    assert_int_equal(cudaMemcpy(back, g + GOFF, MSG, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, host, MSG);
    assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
    assert_int_equal(net->deregMr(k.scomm, hmh), ncclSuccess);
    assert_int_equal(net->deregMr(k.rcomm, gmh), ncclSuccess);
  }
  conn_close(&k);
  assert_int_equal(cudaFree(g), cudaSuccess);
  free(host);
  free(back);
}

static int ptr_support(int dev) {
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  brd_net_props_t p;
  assert_int_equal(net->init(&ctx, 1, &cfg, brd_net_log, NULL), ncclSuccess);
  assert_int_equal(net->getProperties(dev, &p), ncclSuccess);
  assert_int_equal(net->finalize(ctx), ncclSuccess);
  return p.ptrSupport;
}

/* ---- the choice ----------------------------------------------------------------- */

static void test_dmabuf_first(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  env("BRAID_IB_PEERMEM", "1");
  assert_int_equal(ptr_support(0), BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA | BRD_NET_PTR_DMABUF);
  long at = log_size();
  gpu_case(0, ncclSuccess, 2); /* the receive buffer and the send buffer */
  assert_logged(at, "GPU Direct RDMA on for GPU 0 and mlx5_0 (receive) through DMA-BUF");
  assert_logged(at, "GPU Direct RDMA on for GPU 0 and mlx5_0 (send) through DMA-BUF");
  /* Without peermem: DMA-BUF alone, on the RoCE port too. */
  env("BRAID_IB_PEERMEM", "0");
  assert_int_equal(ptr_support(1), BRD_NET_PTR_HOST | BRD_NET_PTR_DMABUF);
  gpu_case(1, ncclSuccess, 2);
  env_clear();
}

static void test_peermem_second(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  env("BRAID_IB_PEERMEM", "1");
  /* DMA-BUF off by NCCL_DMABUF_ENABLE=0. */
  env("NCCL_DMABUF_ENABLE", "0");
  assert_int_equal(ptr_support(0), BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA);
  long at = log_size();
  gpu_case(0, ncclSuccess, 0);
  assert_logged(at, "through nvidia-peermem (BRAID_IB_PEERMEM=1); no DMA-BUF: "
                    "NCCL_DMABUF_ENABLE=0");
  env("NCCL_DMABUF_ENABLE", NULL);
  /* Refused by the NIC's probe. */
  env("BRAID_MOCK_IB_DMABUF", "0");
  assert_int_equal(ptr_support(0), BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA);
  at = log_size();
  gpu_case(0, ncclSuccess, 0);
  assert_logged(at, "no DMA-BUF: the device refuses DMA-BUF registrations (Operation not "
                    "supported");
  env("BRAID_MOCK_IB_DMABUF", NULL);
  /* Refused by the CUDA driver (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0). */
  env("BRAID_CUDASIM_DMABUF", "0");
  at = log_size();
  gpu_case(0, ncclSuccess, 0);
  assert_logged(at, "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0");
  env("BRAID_CUDASIM_DMABUF", NULL);
  /* Chosen, but the registration itself fails: peermem takes over. */
  env("BRAID_MOCK_IB_DMABUF", "2");
  at = log_size();
  gpu_case(0, ncclSuccess, 0);
  assert_logged(at, "ibv_reg_dmabuf_mr of 102400 bytes");
  assert_logged(at, "failed: Invalid argument; registering through nvidia-peermem instead");
  /* ... and without peermem that is an error naming the call. */
  env("BRAID_IB_PEERMEM", "0");
  gpu_case(0, ncclSystemError, 0);
  assert_non_null(strstr(ncclGetLastError(NULL), "ibv_reg_dmabuf_mr of 102400 bytes"));
  env_clear();
}

static void test_staging_last(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  env("BRAID_IB_PEERMEM", "0");
  env("BRAID_MOCK_IB_DMABUF", "0");
  assert_int_equal(ptr_support(0), BRD_NET_PTR_HOST);
  long at = log_size();
  gpu_case(0, ncclInvalidUsage, 0);
  assert_logged(at, "GPU Direct RDMA off for GPU 0 and mlx5_0 (receive): no DMA-BUF (the "
                    "device refuses DMA-BUF registrations");
  assert_logged(at, "and no nvidia-peermem (BRAID_IB_PEERMEM=0); GPU buffers are staged "
                    "through host memory");
  assert_non_null(strstr(ncclGetLastError(NULL), "Stage GPU buffers through host memory"));
  /* Peermem said present but the kernel refuses GPU memory: an error that
   * names the call and the errno. */
  env("BRAID_IB_PEERMEM", "1");
  env("BRAID_MOCK_IB_PEERMEM", "0");
  gpu_case(0, ncclSystemError, 0);
  assert_non_null(strstr(ncclGetLastError(NULL), "through nvidia-peermem) on mlx5_0 failed: "
                                                 "Bad address"));
  env_clear();
}

static void test_gdr_level(void **state) {
  (void)state;
  env_clear();
  env("BRAID_IB_PEERMEM", "1");
  env("NCCL_NET_GDR_LEVEL", "LOC");
  long at = log_size();
  gpu_case(0, ncclInvalidUsage, 0);
  assert_logged(at, "are SYS apart (PCI path unknown");
  assert_logged(at, "beyond NCCL_NET_GDR_LEVEL=LOC; GPU buffers are staged through host memory");
  /* Unset: PXB, and the simulated GPU has no sysfs path (SYS). */
  env("NCCL_NET_GDR_LEVEL", NULL);
  at = log_size();
  gpu_case(0, ncclInvalidUsage, 0);
  assert_logged(at, "beyond NCCL_NET_GDR_LEVEL=PXB");
  /* NCCL's old number 5 is SYS. */
  env("NCCL_NET_GDR_LEVEL", "5");
  gpu_case(0, ncclSuccess, 2);
  env_clear();
}

/* NCCL_NET_GDR_READ: the send side's GPU memory only. */
static void test_gdr_read(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  env("BRAID_IB_PEERMEM", "1");
  static const struct {
    const char *read, *cc;
    ncclResult_t send;
  } cases[] = {{"0", NULL, ncclInvalidUsage},
               {NULL, "75", ncclInvalidUsage},
               {"1", "75", ncclSuccess},
               {NULL, "80", ncclSuccess}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    env("NCCL_NET_GDR_READ", cases[i].read);
    env("BRAID_CUDASIM_CC", cases[i].cc);
    conn_t k;
    conn_open(&k, 0);
    unsigned char *g = NULL;
    assert_int_equal(cudaMalloc((void **)&g, GPU_BYTES), cudaSuccess);
    void *smh = NULL, *rmh = NULL;
    long at = log_size();
    assert_int_equal(net->regMr(k.scomm, g, 4096, BRD_NET_PTR_CUDA, &smh), cases[i].send);
    assert_int_equal(net->regMr(k.rcomm, g + GPU_BYTES / 2, 4096, BRD_NET_PTR_CUDA, &rmh),
                     ncclSuccess);
    if (cases[i].send != ncclSuccess)
      assert_logged(at, cases[i].read != NULL ? "NCCL_NET_GDR_READ=0 keeps sends off GPU memory"
                                              : "sends from GPU memory start at 8.0");
    if (smh != NULL) assert_int_equal(net->deregMr(k.scomm, smh), ncclSuccess);
    assert_int_equal(net->deregMr(k.rcomm, rmh), ncclSuccess);
    conn_close(&k);
    assert_int_equal(cudaFree(g), cudaSuccess);
  }
  env_clear();
}

/* ---- flush ---------------------------------------------------------------------- */

/* One message into GPU memory, then iflush: whether a read was posted
 * (and, if so, that it read 1 byte of the last non-empty buffer). */
static int flush_case(void) {
  conn_t k;
  conn_open(&k, 0);
  unsigned char *g = NULL, host[512];
  assert_int_equal(cudaMalloc((void **)&g, GPU_BYTES), cudaSuccess);
  void *gmh = NULL, *hmh = NULL;
  assert_int_equal(net->regMr(k.rcomm, g, GPU_BYTES, BRD_NET_PTR_CUDA, &gmh), ncclSuccess);
  assert_int_equal(net->regMr(k.scomm, host, sizeof(host), BRD_NET_PTR_HOST, &hmh), ncclSuccess);
  fill(host, sizeof(host), 5);
  transfer(&k, host, 300, hmh, g + 777, 400, gmh);
  unsigned long r0 = mock_count("braid_mock_ib_reads");
  /* Three buffers, the last one empty: the flush reads the second. */
  void *data[3] = {g + 64, g + 777, g + 5000};
  int sizes[3] = {10, 300, 0};
  void *mhs[3] = {gmh, gmh, gmh};
  void *req = (void *)1;
  assert_int_equal(net->iflush(k.rcomm, 3, data, sizes, mhs, &req), ncclSuccess);
  int posted = req != NULL;
  if (posted) {
    int done = 0;
    double end = now_s() + 10;
    while (!done && now_s() < end) assert_int_equal(net->test(req, &done, NULL), ncclSuccess);
    assert_true(done);
    assert_int_equal(mock_count("braid_mock_ib_reads") - r0, 1);
    braid_mock_ib_last_read_fn last = (braid_mock_ib_last_read_fn)dlsym(mock,
                                                                        "braid_mock_ib_last_read");
    braid_mock_ib_write_t w;
    assert_non_null(last);
    assert_int_equal(last(&w), 0);
    assert_int_equal(w.raddr, (uint64_t)(uintptr_t)(g + 777));
    assert_int_equal(w.len, 1);
    assert_int_equal(w.src_qpn, w.dst_qpn); /* a QP connected to itself */
  } else {
    assert_int_equal(mock_count("braid_mock_ib_reads"), r0);
  }
  /* Nothing to flush for host memory or empty receives. */
  void *hd = host;
  int hs = 100;
  req = (void *)1;
  assert_int_equal(net->iflush(k.rcomm, 1, &hd, &hs, &hmh, &req), ncclSuccess);
  assert_null(req);
  int zero[3] = {0, 0, 0};
  req = (void *)1;
  assert_int_equal(net->iflush(k.rcomm, 3, data, zero, mhs, &req), ncclSuccess);
  assert_null(req);
  assert_int_equal(net->deregMr(k.rcomm, gmh), ncclSuccess);
  assert_int_equal(net->deregMr(k.scomm, hmh), ncclSuccess);
  conn_close(&k);
  assert_int_equal(cudaFree(g), cudaSuccess);
  return posted;
}

static void test_flush(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  assert_false(flush_case());          /* cc 9.0: no flush */
  env("NCCL_NET_FORCE_FLUSH", "1");
  assert_true(flush_case());           /* forced */
  env("NCCL_NET_FORCE_FLUSH", NULL);
  env("BRAID_CUDASIM_CC", "80");
  assert_true(flush_case());           /* Ampere */
  env("BRAID_IB_PEERMEM", "1");
  env("NCCL_DMABUF_ENABLE", "0");
  assert_true(flush_case());           /* peermem registrations too */
  env("NCCL_GDR_FLUSH_DISABLE", "1");
  assert_false(flush_case());
  env_clear();
}

/* ---- the registration cache and regMrDmaBuf ---------------------------------------- */

static void test_cache_and_dmabuf_api(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET_GDR_LEVEL", "SYS");
  conn_t k;
  conn_open(&k, 0);
  unsigned char *g = NULL;
  assert_int_equal(cudaMalloc((void **)&g, GPU_BYTES), cudaSuccess);
  unsigned long d0 = mock_count("braid_mock_ib_dmabuf_regs");
  void *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(net->regMr(k.rcomm, g + 100, 300000, BRD_NET_PTR_CUDA, &a), ncclSuccess);
  /* Inside the first one's pages: shared. */
  assert_int_equal(net->regMr(k.rcomm, g + 8192, 4096, BRD_NET_PTR_CUDA, &b), ncclSuccess);
  assert_int_equal(mock_count("braid_mock_ib_dmabuf_regs") - d0, 1);
  /* Past it: a new registration. */
  assert_int_equal(net->regMr(k.rcomm, g + 400000, 4096, BRD_NET_PTR_CUDA, &c), ncclSuccess);
  assert_int_equal(mock_count("braid_mock_ib_dmabuf_regs") - d0, 2);
  assert_int_equal(net->deregMr(k.rcomm, a), ncclSuccess);
  assert_int_equal(net->deregMr(k.rcomm, b), ncclSuccess);
  /* Both references gone: the range registers anew. */
  assert_int_equal(net->regMr(k.rcomm, g + 8192, 4096, BRD_NET_PTR_CUDA, &b), ncclSuccess);
  assert_int_equal(mock_count("braid_mock_ib_dmabuf_regs") - d0, 3);
  assert_int_equal(net->deregMr(k.rcomm, b), ncclSuccess);
  assert_int_equal(net->deregMr(k.rcomm, c), ncclSuccess);

  /* regMrDmaBuf with the caller's fd: the driver's handle of the whole
   * allocation, and the offset of the buffer in it. */
  CUresult (*handle)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  assert_int_equal(cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070,
                                                    cudaEnableDefault, &q), cudaSuccess);
  memcpy(&handle, &fn, sizeof(fn));
  int fd = -1;
  assert_int_equal(handle(&fd, (CUdeviceptr)(uintptr_t)g, GPU_BYTES,
                          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0), CUDA_SUCCESS);
  void *m = NULL;
  size_t off = 3 * 4096 + 17;
  assert_int_equal(net->regMrDmaBuf(k.rcomm, g + off, 5000, BRD_NET_PTR_CUDA, off, fd, &m),
                   ncclSuccess);
  assert_non_null(m);
  /* Bytes land through it. */
  unsigned char host[5000], back[5000];
  void *hmh = NULL;
  assert_int_equal(net->regMr(k.scomm, host, sizeof(host), BRD_NET_PTR_HOST, &hmh), ncclSuccess);
  fill(host, sizeof(host), 9);
  transfer(&k, host, sizeof(host), hmh, g + off, sizeof(host), m);
  assert_int_equal(cudaMemcpy(back, g + off, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
  assert_memory_equal(back, host, sizeof(host));
  assert_int_equal(net->deregMr(k.rcomm, m), ncclSuccess);
  /* A wrong offset: the fd's byte there is not this memory. */
  m = NULL;
  assert_int_equal(net->regMrDmaBuf(k.rcomm, g + off, 5000, BRD_NET_PTR_CUDA, off + 4096, fd, &m),
                   ncclSystemError);
  assert_null(m);
  assert_non_null(strstr(ncclGetLastError(NULL), "ibv_reg_dmabuf_mr"));
  close(fd);
  assert_int_equal(net->deregMr(k.scomm, hmh), ncclSuccess);
  conn_close(&k);
  assert_int_equal(cudaFree(g), cudaSuccess);
  env_clear();
}

/* ---- a collective over the IB net in CUDA mode ---------------------------------- */

enum { NR = 2, COUNT = 4099 };

typedef struct {
  ncclUniqueId id;
  int rank;
  int ok;
  char why[256];
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  ncclComm_t comm = NULL;
  float *buf = NULL, *host = malloc(COUNT * sizeof(float));
  cudaStream_t s = NULL;
  if (host == NULL) return NULL;
  if (cudaSetDevice(a->rank) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
      cudaMalloc((void **)&buf, COUNT * sizeof(float)) != cudaSuccess) {
    snprintf(a->why, sizeof(a->why), "CUDA setup failed");
    goto out;
  }
  for (int i = 0; i < COUNT; i++) host[i] = (float)((i * 7 + a->rank * 13) % 1001);
  if (cudaMemcpy(buf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
      ncclCommInitRank(&comm, NR, a->id, a->rank) != ncclSuccess ||
      ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, s) != ncclSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess ||
      cudaMemcpy(host, buf, COUNT * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
    snprintf(a->why, sizeof(a->why), "the all-reduce failed: %s", ncclGetLastError(comm));
    goto out;
  }
  a->ok = 1;
  for (int i = 0; i < COUNT && a->ok; i++) {
    float want = 0;
    for (int r = 0; r < NR; r++) want += (float)((i * 7 + r * 13) % 1001);
    if (host[i] != want) {
      snprintf(a->why, sizeof(a->why), "rank %d element %d: %g, want %g", a->rank, i,
               (double)host[i], (double)want);
      a->ok = 0;
    }
  }
out:
  if (comm != NULL) ncclCommDestroy(comm);
  if (buf != NULL) cudaFree(buf);
  if (s != NULL) cudaStreamDestroy(s);
  free(host);
  return NULL;
}

static void test_collective_over_ib(void **state) {
  (void)state;
  env_clear();
  env("NCCL_NET", "IB");
  env("BRAID_MOCK_IB_DEVICES", "mlx5_0:1:IB,mlx5_1:1:IB");
  env("NCCL_P2P_DISABLE", "1");
  env("NCCL_SHM_DISABLE", "1");
  unsigned long w0 = mock_count("braid_mock_ib_writes");
  rank_arg_t args[NR];
  pthread_t th[NR];
  ncclUniqueId id;
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < NR; r++) {
    memset(&args[r], 0, sizeof(args[r]));
    args[r].id = id;
    args[r].rank = r;
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < NR; r++)
    if (!args[r].ok) fail_msg("rank %d: %s", r, args[r].why);
  /* Data and credits went through the mock's RDMA writes. */
  assert_true(mock_count("braid_mock_ib_writes") - w0 >= 4);
  env("NCCL_NET", NULL);
  env("BRAID_MOCK_IB_DEVICES", NULL);
  env("NCCL_P2P_DISABLE", NULL);
  env("NCCL_SHM_DISABLE", NULL);
}

int main(void) {
  char self[PATH_MAX], lib[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  *strrchr(self, '/') = '\0';
  /* <build>/<flavour>/tests/ -> <build>/tests/mock/ */
  snprintf(lib, sizeof(lib), "%s/../../tests/mock/libibverbs-mock.so", self);
  if (access(lib, R_OK) != 0) {
    printf("SKIP: the verbs mock %s is not built (make %s)\n", lib,
           "build/tests/mock/libibverbs-mock.so");
    return 77;
  }
  setenv("BRAID_IBVERBS_LIB", lib, 1);
  setenv("BRAID_CUDASIM_DEVICES", "2", 1);
  setenv("BRAID_DEVICE", "cuda", 1);
  unsetenv("BRAID_MOCK_IB_DEVICES");
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_DISABLE");
  /* The INFO lines at NET go to a file the tests read. */
  snprintf(log_path, sizeof(log_path), "/tmp/braid-net-gdr-%d.log", (int)getpid());
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  brd_param_reload();
  mock = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (mock == NULL) {
    fprintf(stderr, "cannot open the verbs mock %s: %s\n", lib, dlerror());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dmabuf_first),
      cmocka_unit_test(test_peermem_second),
      cmocka_unit_test(test_staging_last),
      cmocka_unit_test(test_gdr_level),
      cmocka_unit_test(test_gdr_read),
      cmocka_unit_test(test_flush),
      cmocka_unit_test(test_cache_and_dmabuf_api),
      cmocka_unit_test(test_collective_over_ib),
  };
  int rc = cmocka_run_group_tests_name("net_gdr", tests, NULL, NULL);
  if (getenv("BRAID_TEST_KEEP_LOG") == NULL) unlink(log_path);
  return rc;
}
