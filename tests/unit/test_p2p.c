/*
 * P2P transport, CUDA launch path and buffer registration.
 *
 * Without a GPU: P2P decisions for hand-built peer identities, descriptor
 * passing between two processes (a memfd whose pages both sides see), the
 * fetch's deadline and abort flag, the driver-entry-point table's error on
 * a machine without a driver, and ncclCommRegister bookkeeping.
 *
 * With a GPU (each case prints "SKIP: no CUDA device visible" otherwise, or
 * "SKIP: built without CUDA" in a CUDA=0 build): a P2P segment imported by
 * a fresh child process (this program, re-executed) through cuMem and
 * through CUDA IPC, checked with cudaMemcpy on both sides; ncclMemAlloc;
 * and all-reduce through brd_launch_run with three ranks sharing
 * device 0, against a CPU reduction, plus the timeout of a rank whose peers
 * never launch surfacing through ncclCommGetAsyncError.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "core/comm.h"
#include "base/debug.h"
#include "core/gpu.h"
#include "core/enqueue.h"
#include "core/launch.h"
#include "core/backend.h"
#include "core/reg.h"
#include "base/param.h"
#include "transport/cudrv.h"
#include "transport/transport.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A rank's identity as init would publish it, CUDA backend. */
static brd_peer_info_t peer(uint64_t host, uint64_t proc, int bus) {
  brd_peer_info_t p;
  memset(&p, 0, sizeof(p));
  p.host_hash = host;
  p.pid_hash = proc;
  p.pid = (int32_t)proc;
  p.bus_id = bus << 12;  /* NCCL's numeric form of 0000:bb:00.0 */
  p.dev = bus;
  p.cuda_cc = 90;
  p.p2p = 1;
  p.backend = BRD_DEVICE_CUDA;
  snprintf(p.bus_id_str, sizeof(p.bus_id_str), "0000:%02x:00.0", bus);
  return p;
}

static void env_set(const char *name, const char *value) {
  if (value != NULL)
    setenv(name, value, 1);
  else
    unsetenv(name);
  brd_param_reload();
}

/* ---- brd_p2p_usable -------------------------------------------------------- */

static void test_usable_different_hosts(void **state) {
  (void)state;
  brd_peer_info_t a = peer(1, 10, 0x3b), b = peer(2, 20, 0x3b);
  char why[256] = "";
  assert_int_equal(brd_p2p_usable(&a, &b, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "different hosts"));
  /* Same bus id on another host is another GPU: still no. */
  assert_int_equal(brd_p2p_usable(&b, &a, NULL, 0), 0);
}

static void test_usable_disabled_by_env(void **state) {
  (void)state;
  brd_peer_info_t a = peer(1, 10, 0x3b), b = peer(1, 20, 0x5e), c = peer(1, 10, 0x3b);
  char why[256] = "";
  env_set("NCCL_P2P_DISABLE", "1");
  assert_int_equal(brd_p2p_usable(&a, &b, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "NCCL_P2P_DISABLE=1"));
  /* Disabled means disabled, even for two ranks of one GPU. */
  assert_int_equal(brd_p2p_usable(&a, &c, why, sizeof(why)), 0);
  env_set("NCCL_P2P_DISABLE", "0");
  /* A peer that disabled P2P on its side (its identity says so). */
  b.p2p = 0;
  assert_int_equal(brd_p2p_usable(&a, &b, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "0000:5e:00.0"));
  env_set("NCCL_P2P_DISABLE", NULL);
}

static void test_usable_same_gpu(void **state) {
  (void)state;
  /* Threads of one process on one GPU, and two processes on one GPU. */
  brd_peer_info_t a = peer(7, 10, 0x3b), b = peer(7, 10, 0x3b), c = peer(7, 30, 0x3b);
  char why[256] = "";
  assert_int_equal(brd_p2p_usable(&a, &b, why, sizeof(why)), 1);
  assert_non_null(strstr(why, "0000:3b:00.0"));
  assert_int_equal(brd_p2p_usable(&a, &c, why, sizeof(why)), 1);
  /* LOC still allows one GPU and refuses two. */
  env_set("NCCL_P2P_LEVEL", "LOC");
  assert_int_equal(brd_p2p_usable(&a, &c, why, sizeof(why)), 1);
  brd_peer_info_t d = peer(7, 30, 0x5e);
  assert_int_equal(brd_p2p_usable(&a, &d, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "LOC"));
  /* NCCL's old numeric level 0 is LOC too. */
  env_set("NCCL_P2P_LEVEL", "0");
  assert_int_equal(brd_p2p_usable(&a, &d, why, sizeof(why)), 0);
  env_set("NCCL_P2P_LEVEL", NULL);
}

static void test_usable_host_executor(void **state) {
  (void)state;
  brd_peer_info_t a = peer(1, 10, 0x3b), b = peer(1, 10, 0x3b);
  b.backend = BRD_DEVICE_HOST;
  char why[8]; /* too short: cut, still terminated */
  assert_int_equal(brd_p2p_usable(&a, &b, why, sizeof(why)), 0);
  assert_int_equal(strlen(why), sizeof(why) - 1);
}

/* ---- descriptor passing ----------------------------------------------------- */

#define MEMFD_WORDS 4099u /* odd, and more than one page */

static uint32_t pattern(uint32_t i) { return i * 2654435761u ^ 0x5bd1e995u; }

/* A request service that answers with the request's words reversed and
 * summed, and counts its calls. */
typedef struct {
  uint64_t w[4];
} svc_msg_t;
static _Atomic int svc_calls;

static void svc_answer(void *ctx, const void *req, void *rep) {
  const svc_msg_t *q = req;
  svc_msg_t *a = rep;
  for (int i = 0; i < 4; i++) a->w[i] = q->w[3 - i] + (uint64_t)(uintptr_t)ctx;
  atomic_fetch_add(&svc_calls, 1);
}

/* The request service answers this process and a child, request by
 * request; once destroyed, callers get ncclRemoteError naming the cause. */
static void test_request_service(void **state) {
  (void)state;
  brd_ipc_svc_t *svc = NULL;
  atomic_store(&svc_calls, 0);
  assert_int_equal(brd_ipc_svc_create(sizeof(svc_msg_t), sizeof(svc_msg_t), svc_answer,
                                      (void *)(uintptr_t)1000, &svc), ncclSuccess);
  uint32_t serial = brd_ipc_svc_serial(svc), pid = (uint32_t)getpid();
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    for (uint64_t k = 0; k < 3; k++) {
      svc_msg_t q = {{k, 7, 9, 11}}, a;
      memset(&a, 0, sizeof(a));
      if (brd_ipc_svc_call(pid, serial, &q, sizeof(q), &a, sizeof(a), 5.0, NULL) !=
          ncclSuccess)
        _exit(2);
      if (a.w[0] != 1011 || a.w[1] != 1009 || a.w[2] != 1007 || a.w[3] != 1000 + k)
        _exit(3);
    }
    _exit(0);
  }
  svc_msg_t q = {{1, 2, 3, 4}}, a;
  memset(&a, 0, sizeof(a));
  assert_int_equal(brd_ipc_svc_call(pid, serial, &q, sizeof(q), &a, sizeof(a), 5.0, NULL),
                   ncclSuccess);
  assert_int_equal(a.w[0], 1004);
  assert_int_equal(a.w[3], 1001);
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(atomic_load(&svc_calls), 4);
  brd_ipc_svc_destroy(svc);
  brd_ipc_svc_destroy(NULL);
  assert_int_equal(brd_ipc_svc_call(pid, serial, &q, sizeof(q), &a, sizeof(a), 1.0, NULL),
                   ncclRemoteError);
  assert_non_null(strstr(brd_log_last_error(), "exited or already sealed"));
  assert_int_equal(atomic_load(&svc_calls), 4);
}

static void test_fd_pass_memfd(void **state) {
  (void)state;
  size_t bytes = MEMFD_WORDS * sizeof(uint32_t);
  int mfd = memfd_create("braid-p2p-test", MFD_CLOEXEC);
  assert_true(mfd >= 0);
  assert_int_equal(ftruncate(mfd, (off_t)bytes), 0);
  uint32_t *w = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  assert_true(w != MAP_FAILED);
  for (uint32_t i = 0; i < MEMFD_WORDS; i++) w[i] = pattern(i);

  brd_ipc_fdsrv_t *srv = NULL;
  assert_int_equal(brd_ipc_fdsrv_create(mfd, &srv), ncclSuccess);
  uint32_t serial = brd_ipc_fdsrv_serial(srv);

  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    int fd = -1;
    if (brd_ipc_fd_fetch((uint32_t)getppid(), serial, 5.0, NULL, &fd) != ncclSuccess)
      _exit(2);
    uint32_t *r = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) _exit(3);
    for (uint32_t i = 0; i < MEMFD_WORDS; i++)
      if (r[i] != pattern(i)) _exit(4);
    for (uint32_t i = 0; i < MEMFD_WORDS; i++) r[i] = ~r[i];
    munmap(r, bytes);
    close(fd);
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* The child's writes landed in the pages this process maps. */
  for (uint32_t i = 0; i < MEMFD_WORDS; i++) assert_int_equal(w[i], ~pattern(i));

  /* This process may fetch too: a new descriptor of the same file. */
  int fd = -1;
  assert_int_equal(brd_ipc_fd_fetch((uint32_t)getpid(), serial, 5.0, NULL, &fd),
                   ncclSuccess);
  assert_int_not_equal(fd, mfd);
  struct stat sa, sb;
  assert_int_equal(fstat(fd, &sa), 0);
  assert_int_equal(fstat(mfd, &sb), 0);
  assert_true(sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev);
  close(fd);
  close(mfd); /* the server keeps its own duplicate */

  brd_ipc_fdsrv_destroy(srv);
  /* Nobody serves the name any more: refused at once. */
  double t0 = now_s();
  assert_int_equal(brd_ipc_fd_fetch((uint32_t)getpid(), serial, 5.0, NULL, &fd),
                   ncclRemoteError);
  assert_true(now_s() - t0 < 1.0);
  assert_non_null(strstr(brd_log_last_error(), "exited or already sealed"));
  munmap(w, bytes);
}

/* A listener that never answers, under a name the server would use. */
static int silent_listener(uint32_t serial) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  brd_ipc_sockname_format((uint32_t)getpid(), serial, sa.sun_path + 1,
                          sizeof(sa.sun_path) - 1);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                              strlen(sa.sun_path + 1));
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s >= 0);
  assert_int_equal(bind(s, (struct sockaddr *)&sa, len), 0);
  assert_int_equal(listen(s, 4), 0);
  return s;
}

struct raiser {
  _Atomic int *flag;
  double after_s;
};

static void *raise_later(void *arg) {
  struct raiser *r = arg;
  struct timespec ts = {0, (long)(r->after_s * 1e9)};
  nanosleep(&ts, NULL);
  atomic_store(r->flag, 1);
  return NULL;
}

static void test_fd_fetch_deadline_and_abort(void **state) {
  (void)state;
  uint32_t serial = 0xb7a1d001u;
  int s = silent_listener(serial);
  int fd = -1;

  double t0 = now_s();
  assert_int_equal(brd_ipc_fd_fetch((uint32_t)getpid(), serial, 0.3, NULL, &fd),
                   ncclRemoteError);
  double took = now_s() - t0;
  assert_true(took >= 0.29 && took < 3.0);
  assert_non_null(strstr(brd_log_last_error(), "within"));

  _Atomic int flag = 0;
  struct raiser r = {&flag, 0.1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, raise_later, &r), 0);
  t0 = now_s();
  assert_int_equal(brd_ipc_fd_fetch((uint32_t)getpid(), serial, 30.0, &flag, &fd),
                   ncclSystemError);
  assert_true(now_s() - t0 < 2.0);
  pthread_join(th, NULL);
  assert_int_equal(fd, -1); /* outputs written only on success */
  close(s);
}

/* ---- driver table ------------------------------------------------------------ */

static void test_driver_table(void **state) {
  (void)state;
#if BRAID_CUDA
  int version = 0, ndev = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) version = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  (void)cudaGetLastError();
  ncclResult_t r = brd_cudrv_check();
  if (version == 0) {
    /* No driver at all: a clean error naming the first entry point. */
    assert_int_equal(r, ncclUnhandledCudaError);
    assert_non_null(strstr(brd_log_last_error(), "cuGetErrorString"));
    /* Resolved once; the answer does not change. */
    assert_int_equal(brd_cudrv_check(), ncclUnhandledCudaError);
    /* Everything that needs the GPU fails cleanly, without crashing. */
    brd_seg_t seg;
    assert_int_not_equal(brd_transport_p2p.seg_create(4096, "t", &seg), ncclSuccess);
    void *p = NULL;
    assert_int_not_equal(brd_p2p_mem_alloc(4096, &p), ncclSuccess);
    assert_null(p);
  } else if (ndev > 0) {
    /* A driver whose cuMem entry points cannot be found (too old, or a
     * runtime without the driver API) is refused with a message saying
     * so; then segments fall back to CUDA IPC. */
    if (r != ncclSuccess) {
      assert_int_equal(r, ncclUnhandledCudaError);
      assert_non_null(strstr(brd_log_last_error(), "unavailable"));
    }
  } else {
    assert_true(r == ncclSuccess || r == ncclUnhandledCudaError);
  }
#else
  assert_int_equal(brd_cudrv_check(), ncclInvalidUsage);
  brd_seg_t seg;
  assert_int_equal(brd_transport_p2p.seg_create(4096, "t", &seg), ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "CUDA=0"));
  brd_backend_caps_t caps;
  char why[64];
  assert_int_equal(brd_backend_cuda.caps(NULL, &caps, why, sizeof(why)), ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "CUDA=0"));
#endif
}

/* ---- registration ------------------------------------------------------------- */

static void test_register_bookkeeping(void **state) {
  (void)state;
  struct ncclComm *comm = NULL;
  assert_int_equal(brd_comm_create(&comm), ncclSuccess);
  comm->nranks = 1; /* a one-rank communicator: windows need no exchange */
  comm->rank = 0;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  char *buf = aligned_alloc(pg, 3 * pg);
  assert_non_null(buf);
  void *h1 = NULL, *h2 = NULL, *h3 = NULL;

  /* Pages [0, 2) of buf. */
  assert_int_equal(ncclCommRegister(comm, buf + 100, pg + pg / 2, &h1), ncclSuccess);
  assert_non_null(h1);
  /* Inside page 1: the same record. */
  assert_int_equal(ncclCommRegister(comm, buf + pg, 100, &h2), ncclSuccess);
  assert_ptr_equal(h2, h1);
  /* Pages [1, 3): not inside, a new record. */
  assert_int_equal(ncclCommRegister(comm, buf + 2 * pg - 10, 20, &h3), ncclSuccess);
  assert_ptr_not_equal(h3, h1);

  assert_int_equal(ncclCommDeregister(comm, h1), ncclSuccess);
  assert_int_equal(ncclCommDeregister(comm, h1), ncclSuccess); /* second reference */
  assert_int_equal(ncclCommDeregister(comm, h1), ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "not registered"));
  assert_int_equal(ncclCommDeregister(comm, NULL), ncclSuccess);
  assert_int_equal(ncclCommDeregister(comm, (void *)(uintptr_t)0x1230), ncclInvalidUsage);
  assert_int_equal(ncclCommDeregister(comm, h3), ncclSuccess);
  /* The page of h3 is free again: registering it makes a new record. */
  void *h4 = NULL;
  assert_int_equal(ncclCommRegister(comm, buf + 2 * pg, 1, &h4), ncclSuccess);
  assert_non_null(h4);
  assert_int_equal(ncclCommRegister(NULL, buf, 1, &h4), ncclInvalidArgument);

  /* Windows: NCCL's alignment and flags; each has a record of its own,
   * released only by ncclCommWindowDeregister. */
  ncclWindow_t w1 = NULL, w2 = NULL;
  assert_int_equal(ncclCommWindowRegister(comm, buf + 1, pg, &w1, 0), ncclInvalidArgument);
  assert_non_null(strstr(brd_log_last_error(), "NCCL_WIN_REQUIRED_ALIGNMENT"));
  assert_int_equal(ncclCommWindowRegister(comm, buf, 0, &w1, 0), ncclInvalidArgument);
  assert_int_equal(ncclCommWindowRegister(comm, buf, pg, &w1, 0x10), ncclInvalidArgument);
  assert_non_null(strstr(brd_log_last_error(), "flags"));
  assert_int_equal(ncclCommWindowRegister(comm, buf, pg, &w1, NCCL_WIN_COLL_SYMMETRIC),
                   ncclSuccess);
  assert_int_equal(ncclCommWindowRegister(comm, buf, pg, &w2, NCCL_WIN_DEFAULT),
                   ncclSuccess);
  assert_non_null(w1);
  assert_ptr_not_equal(w1, w2);
  assert_ptr_not_equal((void *)w1, h4);
  assert_int_equal(ncclCommDeregister(comm, (void *)w1), ncclInvalidUsage);
  assert_int_equal(ncclCommWindowDeregister(comm, (ncclWindow_t)h4), ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "ncclCommWindowRegister"));
  assert_int_equal(ncclCommWindowDeregister(comm, w1), ncclSuccess);
  assert_int_equal(ncclCommWindowDeregister(comm, w1), ncclInvalidUsage);

  /* h4 and w2 are left registered: teardown frees them. */
  brd_regs_destroy(comm);
  assert_null(comm->regs);
  brd_comm_destroy(comm);
  free(buf);
}

/* ---- GPU section ----------------------------------------------------------------- */

#if BRAID_CUDA
static int gpu_visible(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n > 0;
}
/* make test runs unit programs with BRAID_DEVICE=host; the GPU cases,
 * which come last, need the CUDA backend whatever the environment says. */
#define NEED_GPU()                                                            \
  do {                                                                        \
    if (!gpu_visible()) {                                                     \
      print_message("SKIP: no CUDA device visible\n");                        \
      skip();                                                                 \
    }                                                                         \
    env_set("BRAID_DEVICE", "cuda");                                         \
    assert_int_equal(cudaSetDevice(0), cudaSuccess);                          \
  } while (0)
#else
#define NEED_GPU()                                                            \
  do {                                                                        \
    print_message("SKIP: built without CUDA (CUDA=0)\n");                     \
    skip();                                                                   \
  } while (0)
#endif

static const char *self_exe;

#if BRAID_CUDA
#define SEG_WORDS ((1u << 18) + 5u) /* odd: more than 1 MiB */

static void hex_encode(const void *p, size_t n, char *out) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int hex_decode(const char *s, void *p, size_t n) {
  unsigned char *b = p;
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    b[i] = (unsigned char)v;
  }
  return 0;
}

/* The child process: import the segment, check the pattern through
 * cudaMemcpy, write its complement back. Exit status says what failed. */
static int child_main(const char *hex) {
  brd_seg_handle_t h;
  if (hex_decode(hex, &h, sizeof(h)) != 0) return 10;
  if (cudaSetDevice(0) != cudaSuccess) return 11;
  brd_seg_t seg;
  if (brd_transport_p2p.seg_import(&h, &seg) != ncclSuccess) return 12;
  if (seg.ptr == (void *)(uintptr_t)h.local_addr && seg.size != SEG_WORDS * 4u) return 13;
  uint32_t *host = malloc(SEG_WORDS * sizeof(uint32_t));
  if (host == NULL) return 14;
  if (cudaMemcpy(host, seg.ptr, SEG_WORDS * 4u, cudaMemcpyDeviceToHost) != cudaSuccess)
    return 15;
  for (uint32_t i = 0; i < SEG_WORDS; i++)
    if (host[i] != pattern(i)) return 16;
  for (uint32_t i = 0; i < SEG_WORDS; i++) host[i] = ~host[i];
  if (cudaMemcpy(seg.ptr, host, SEG_WORDS * 4u, cudaMemcpyHostToDevice) != cudaSuccess)
    return 17;
  if (cudaDeviceSynchronize() != cudaSuccess) return 18;
  brd_transport_p2p.seg_close(&seg);
  free(host);
  return 0;
}

/* Creates a segment, has a fresh process import and modify it, checks. */
static void segment_round_trip(void) {
  brd_seg_t seg, alias;
  size_t bytes = SEG_WORDS * sizeof(uint32_t);
  uint32_t *host = malloc(bytes);
  assert_non_null(host);
  assert_int_equal(brd_transport_p2p.seg_create(bytes, "test", &seg), ncclSuccess);
  assert_int_equal(seg.size, bytes);
  /* Zero-filled on creation. */
  assert_int_equal(cudaMemcpy(host, seg.ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint32_t i = 0; i < SEG_WORDS; i++) assert_int_equal(host[i], 0);
  for (uint32_t i = 0; i < SEG_WORDS; i++) host[i] = pattern(i);
  assert_int_equal(cudaMemcpy(seg.ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);

  /* A fresh process (CUDA cannot be used across fork), so exec this
   * program in child mode. */
  char hex[2 * sizeof(brd_seg_handle_t) + 1];
  hex_encode(&seg.handle, sizeof(seg.handle), hex);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    execl(self_exe, self_exe, "--p2p-child", hex, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(cudaMemcpy(host, seg.ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint32_t i = 0; i < SEG_WORDS; i++) assert_int_equal(host[i], ~pattern(i));

  /* Same process: the creator's pointer; the memory outlives the alias. */
  assert_int_equal(brd_transport_p2p.seg_import(&seg.handle, &alias), ncclSuccess);
  assert_ptr_equal(alias.ptr, seg.ptr);
  brd_transport_p2p.seg_close(&alias);
  assert_int_equal(cudaMemcpy(host, seg.ptr, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(host[0], ~pattern(0));

  brd_transport_p2p.seg_seal(&seg);
  brd_transport_p2p.seg_close(&seg);
  assert_null(seg.ptr);
  free(host);
}
#endif

static void test_gpu_segment_cumem(void **state) {
  (void)state;
  NEED_GPU();
#if BRAID_CUDA
  if (brd_cudrv_check() != ncclSuccess) {
    printf("SKIP: cuMem entry points are unavailable (%s); the IPC case covers "
           "segments\n", brd_log_last_error());
    skip();
  }
  env_set("NCCL_CUMEM_ENABLE", NULL);
  segment_round_trip();
#endif
}

static void test_gpu_segment_ipc(void **state) {
  (void)state;
  NEED_GPU();
#if BRAID_CUDA
  env_set("NCCL_CUMEM_ENABLE", "0");
  segment_round_trip();
  env_set("NCCL_CUMEM_ENABLE", NULL);
#endif
}

static void test_gpu_memalloc(void **state) {
  (void)state;
  NEED_GPU();
#if BRAID_CUDA
  for (int cumem = 1; cumem >= 0; cumem--) {
    env_set("NCCL_CUMEM_ENABLE", cumem ? NULL : "0");
    size_t words = (3u << 18) + 7u;
    uint32_t *host = malloc(words * 4), *dev = NULL;
    assert_non_null(host);
    assert_int_equal(ncclMemAlloc((void **)&dev, words * 4), ncclSuccess);
    struct cudaPointerAttributes at;
    assert_int_equal(cudaPointerGetAttributes(&at, dev), cudaSuccess);
    assert_int_equal(at.type, cudaMemoryTypeDevice);
    for (size_t i = 0; i < words; i++) host[i] = pattern((uint32_t)i);
    assert_int_equal(cudaMemcpy(dev, host, words * 4, cudaMemcpyHostToDevice), cudaSuccess);
    memset(host, 0, words * 4);
    assert_int_equal(cudaMemcpy(host, dev, words * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < words; i++) assert_int_equal(host[i], pattern((uint32_t)i));
    assert_int_equal(ncclMemFree(dev), ncclSuccess);
    assert_int_not_equal(ncclMemFree(dev), ncclSuccess); /* already freed */
    free(host);
  }
  env_set("NCCL_CUMEM_ENABLE", NULL);
#endif
}

#if BRAID_CUDA
#define AR_RANKS 3 /* not a power of two, all on device 0 */

typedef struct {
  ncclUniqueId id;
  int rank;
  int failures;              /* mismatching elements seen */
  ncclResult_t res;          /* first API failure */
  ncclResult_t async_after;  /* rank 0: ncclCommGetAsyncError after its lone call */
  ncclComm_t comm;
  pthread_barrier_t *bar;
  char *sb, *rb;             /* device buffers of AR_MAX elements */
} ar_rank_t;

/* Allocated once per rank: cudaFree synchronises the whole device, which
 * would wait for a peer's kernel that waits for this rank. */
#define AR_MAX ((1u << 20) + 3)

/* Input element i of rank r: small integers and quarters, exact in float
 * sums in any order. */
static float in_f(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8) + 0.25f * (float)r; }
static int32_t in_i(int r, size_t i) { return (int32_t)((uint32_t)(i * 2654435761u) >> 7) ^ (r * 977); }

static ncclResult_t ar_one(ar_rank_t *me, cudaStream_t s, ncclDataType_t dt, ncclRedOp_t op,
                           size_t count, int in_place, int check) {
  size_t es = 4;
  char *host = malloc(count * es), *sb = me->sb, *rb = me->rb;
  ncclResult_t res = ncclSuccess;
  if (host == NULL) return ncclSystemError;
  for (size_t i = 0; i < count; i++) {
    if (dt == ncclFloat32) ((float *)host)[i] = in_f(me->rank, i);
    else ((int32_t *)host)[i] = in_i(me->rank, i);
  }
  if (cudaMemcpy(sb, host, count * es, cudaMemcpyHostToDevice) != cudaSuccess) {
    res = ncclUnhandledCudaError;
    goto out;
  }
  if (in_place) rb = sb;
  brd_call_t c;
  memset(&c, 0, sizeof(c));
  c.coll = BRD_COLL_ALLREDUCE;
  c.fn = "ncclAllReduce";
  c.sendbuff = sb;
  c.recvbuff = rb;
  c.count = count;
  c.dtype = dt;
  c.op = op;
  c.comm = me->comm;
  c.stream = s;
  res = brd_launch_run(me->comm, &c, 1);
  if (res == ncclSuccess && cudaStreamSynchronize(s) != cudaSuccess) res = ncclUnhandledCudaError;
  if (res == ncclSuccess && check) {
    if (cudaMemcpy(host, rb, count * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
      res = ncclUnhandledCudaError;
      goto out;
    }
    for (size_t i = 0; i < count; i++) {
      if (dt == ncclFloat32) {
        float want = 0;
        for (int r = 0; r < AR_RANKS; r++) want += in_f(r, i);
        if (((float *)host)[i] != want) me->failures++;
      } else {
        int32_t want = in_i(0, i);
        for (int r = 1; r < AR_RANKS; r++)
          if (in_i(r, i) > want) want = in_i(r, i);
        if (((int32_t *)host)[i] != want) me->failures++;
      }
    }
  }
out:
  free(host);
  return res;
}

static void *ar_main(void *arg) {
  ar_rank_t *me = arg;
  static const size_t counts[] = {1, 7, 1023, (1u << 20) + 3};
  cudaStream_t s = NULL;
  cudaSetDevice(0);
  me->res = ncclCommInitRank(&me->comm, AR_RANKS, me->id, me->rank);
  if (me->res == ncclSuccess && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    me->res = ncclUnhandledCudaError;
  if (me->res == ncclSuccess && (cudaMalloc((void **)&me->sb, (size_t)AR_MAX * 4) != cudaSuccess ||
                                 cudaMalloc((void **)&me->rb, (size_t)AR_MAX * 4) != cudaSuccess))
    me->res = ncclUnhandledCudaError;
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]) && me->res == ncclSuccess; k++) {
    me->res = ar_one(me, s, ncclFloat32, ncclSum, counts[k], (int)(k & 1), 1);
    if (me->res == ncclSuccess)
      me->res = ar_one(me, s, ncclInt32, ncclMax, counts[k], (int)!(k & 1), 1);
  }
  pthread_barrier_wait(me->bar);
  if (me->res == ncclSuccess && me->rank == 0) {
    /* A call no peer makes: the kernel times out (BRAID_TIMEOUT=1). */
    (void)ar_one(me, s, ncclFloat32, ncclSum, 1000, 0, 0);
    (void)brd_rt_poll(me->comm);
    ncclCommGetAsyncError(me->comm, &me->async_after);
  }
  pthread_barrier_wait(me->bar);
  if (me->comm != NULL) {
    brd_rt_destroy(me->comm->rt);
    me->comm->rt = NULL;
    /* A rank left in error by the timeout is freed with ncclCommAbort, as
     * NCCL requires. */
    if (ncclCommDestroy(me->comm) != ncclSuccess) ncclCommAbort(me->comm);
  }
  if (s != NULL) cudaStreamDestroy(s);
  cudaFree(me->sb);
  cudaFree(me->rb);
  return NULL;
}
#endif

static void test_gpu_allreduce(void **state) {
  (void)state;
  NEED_GPU();
#if BRAID_CUDA
  ar_rank_t ranks[AR_RANKS];
  pthread_t th[AR_RANKS];
  pthread_barrier_t bar;
  env_set("BRAID_TIMEOUT", "1");
  assert_int_equal(pthread_barrier_init(&bar, NULL, AR_RANKS), 0);
  ncclUniqueId id;
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < AR_RANKS; r++) {
    memset(&ranks[r], 0, sizeof(ranks[r]));
    ranks[r].id = id;
    ranks[r].rank = r;
    ranks[r].bar = &bar;
    assert_int_equal(pthread_create(&th[r], NULL, ar_main, &ranks[r]), 0);
  }
  for (int r = 0; r < AR_RANKS; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&bar);
  env_set("BRAID_TIMEOUT", NULL);
  for (int r = 0; r < AR_RANKS; r++) {
    assert_int_equal(ranks[r].res, ncclSuccess);
    assert_int_equal(ranks[r].failures, 0);
  }
  assert_int_equal(ranks[0].async_after, ncclRemoteError);
#endif
}

int main(int argc, char **argv) {
  self_exe = argv[0];
#if BRAID_CUDA
  if (argc == 3 && strcmp(argv[1], "--p2p-child") == 0) return child_main(argv[2]);
#else
  (void)argc;
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usable_different_hosts),
      cmocka_unit_test(test_usable_disabled_by_env),
      cmocka_unit_test(test_usable_same_gpu),
      cmocka_unit_test(test_usable_host_executor),
      cmocka_unit_test(test_fd_pass_memfd),
      cmocka_unit_test(test_request_service),
      cmocka_unit_test(test_fd_fetch_deadline_and_abort),
      cmocka_unit_test(test_driver_table),
      cmocka_unit_test(test_register_bookkeeping),
      cmocka_unit_test(test_gpu_segment_cumem),
      cmocka_unit_test(test_gpu_segment_ipc),
      cmocka_unit_test(test_gpu_memalloc),
      cmocka_unit_test(test_gpu_allreduce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
