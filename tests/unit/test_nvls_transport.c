/*
 * NVLS transport (src/transport/nvls.c) and the multimem getters.
 *
 * The driver is a fake of this file's own: a brd_cudrv_t whose multicast
 * entry points keep objects, handles, bindings, reservations and mappings
 * in tables, count what is live, and fail one chosen call on one chosen
 * rank. Its cuMulticastBind* blocks, as the real one does, until every
 * device of the object was added (with a 3 s deadline of its own, counted:
 * a bind that reaches it means the fail-together rule was broken). Ranks
 * are threads; their allgather is an in-process exchange with a deadline
 * and an abort flag.
 *
 * Cases: the whole sequence on 3 ranks (BindMem and BindAddr; the handle
 * passed directly and as a descriptor through ipc.c, between threads and
 * between processes sharing the fake's state), sizes checked
 * against hand-computed granularity rounding; a failure injected at every
 * step on one rank (every rank ends disabled with the same status, the
 * WARN names rank and call, nothing leaks, nothing hangs); NCCL_NVLS_ENABLE
 * 0/1/2, mixed, and read from the environment; an unsupported device;
 * missing entry points; two ranks on one GPU; mismatched sizes and
 * misaligned windows; an allgather whose peer never comes, and an abort;
 * the library's own table where no driver resolves it; and the getters'
 * error paths and lookups through the registry (these run in CUDA=0
 * builds too; the rest print SKIP there).
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
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/debug.h"
#include "base/param.h"
#include "core/comm.h"
#include "core/devapi.h"
#include "core/reg.h"
#include "transport/nvls.h"

#define MAXR 8
#define MiB ((size_t)1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the in-process allgather ------------------------------------------ */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, arrived;
  unsigned gen;
  double timeout_s;
  _Atomic int abort;
  unsigned char in[MAXR][512];
  unsigned char done[MAXR * 512]; /* the last round's result */
} ag_t;

typedef struct {
  ag_t *ag;
  int rank;
} ag_ctx_t;

static ncclResult_t ag_fn(void *vctx, const void *in, void *out, size_t len) {
  ag_ctx_t *c = vctx;
  ag_t *g = c->ag;
  if (len > sizeof(g->in[0])) return ncclInternalError;
  double deadline = now_s() + g->timeout_s;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&g->mu);
  memcpy(g->in[c->rank], in, len);
  unsigned gen = g->gen;
  if (++g->arrived == g->n) {
    for (int i = 0; i < g->n; i++) memcpy(g->done + (size_t)i * len, g->in[i], len);
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (g->gen == gen) {
      if (atomic_load(&g->abort)) {
        res = ncclSystemError;
        break;
      }
      if (now_s() > deadline) {
        res = ncclRemoteError;
        break;
      }
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 20 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    if (res != ncclSuccess) g->arrived--; /* this rank leaves the round */
  }
  if (res == ncclSuccess) memcpy(out, g->done, (size_t)g->n * len);
  pthread_mutex_unlock(&g->mu);
  return res;
}

/* pshared: the ranks are processes sharing g's memory. */
static void ag_init_ex(ag_t *g, int n, int pshared) {
  memset(g, 0, sizeof(*g));
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_condattr_init(&ca);
  if (pshared) {
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  }
  pthread_mutex_init(&g->mu, &ma);
  pthread_cond_init(&g->cv, &ca);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  g->n = n;
  g->timeout_s = 5;
}

static void ag_init(ag_t *g, int n) { ag_init_ex(g, n, 0); }

static void ag_fini(ag_t *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}

/* ---- the multimem getters, through the registry (any build) ------------- */

static void test_getters(void **state) {
  (void)state;
  struct ncclComm *comm = NULL;
  assert_int_equal(brd_comm_create(&comm), ncclSuccess);
  comm->nranks = 1; /* a one-rank communicator: windows need no exchange */
  comm->rank = 0;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  char *buf = aligned_alloc(pg, 2 * pg);
  assert_non_null(buf);
  ncclWindow_t w = NULL;
  assert_int_equal(ncclCommWindowRegister(comm, buf, 2 * pg, &w, NCCL_WIN_COLL_SYMMETRIC),
                   ncclSuccess);
  void *p = (void *)(uintptr_t)0x1;

  /* No record: not bound, and the message says so and names the window. */
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 0, &p), ncclInvalidUsage);
  assert_ptr_equal(p, (void *)(uintptr_t)0x1); /* untouched on error */
  const char *e = ncclGetLastError(NULL);
  assert_non_null(strstr(e, "ncclGetLsaMultimemDevicePointer"));
  assert_non_null(strstr(e, "NVLS is not bound for window"));
  char wname[32];
  snprintf(wname, sizeof(wname), "%p", (void *)w);
  assert_non_null(strstr(e, wname));
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 0, NULL), ncclInvalidArgument);
  assert_int_equal(ncclGetLsaMultimemDevicePointer(NULL, 0, &p), ncclInvalidArgument);

  /* A recorded reason comes back verbatim. */
  assert_int_equal(brd_nvls_window_unbound(w, "local rank 2: cuMulticastBindMem failed: boom"),
                   ncclSuccess);
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 8, &p), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "cuMulticastBindMem failed: boom"));
  ncclMultimemHandle_t h = {NULL};
  assert_int_equal(ncclGetMultimemDevicePointer(w, 0, h, &p), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "mcBasePtr is NULL"));

  /* Bound: base + the window's offset in the object + offset. */
  char *mc = (char *)(uintptr_t)0x7f0000200000ull;
  assert_int_equal(brd_nvls_window_bind(w, mc, 4096, 3 * pg + 5), ncclSuccess);
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 77, &p), ncclSuccess);
  assert_ptr_equal(p, mc + 4096 + 77);
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 3 * pg + 4, &p), ncclSuccess);
  assert_ptr_equal(p, mc + 4096 + 3 * pg + 4);
  p = NULL;
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 3 * pg + 5, &p), ncclInvalidArgument);
  assert_null(p);
  assert_non_null(strstr(ncclGetLastError(NULL), "outside"));
  h.mcBasePtr = mc;
  assert_int_equal(ncclGetMultimemDevicePointer(w, 13, h, &p), ncclSuccess);
  assert_ptr_equal(p, mc + 4096 + 13);
  h.mcBasePtr = mc + 2 * MiB;
  assert_int_equal(ncclGetMultimemDevicePointer(w, 13, h, &p), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "is not the multicast object"));

  /* Forgotten: back to not bound. */
  brd_nvls_window_forget(w);
  brd_nvls_window_forget(w);
  assert_int_equal(ncclGetLsaMultimemDevicePointer(w, 0, &p), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "no multicast mapping was made"));

  assert_int_equal(ncclCommWindowDeregister(comm, w), ncclSuccess);
  brd_regs_destroy(comm);
  brd_comm_destroy(comm);
  free(buf);
}

#if !BRAID_CUDA
/* Without CUDA, NVLS is off, or an error when required. */
static void test_off_without_device_api(void **state) {
  (void)state;
  ag_t g;
  ag_init(&g, 1);
  ag_ctx_t c = {&g, 0};
  brd_nvls_args_t a;
  memset(&a, 0, sizeof(a));
  a.nranks = 1;
  a.allgather = ag_fn;
  a.allgather_ctx = &c;
  a.size = 4096;
  a.enable = 2;
  brd_nvls_t *n = (brd_nvls_t *)(uintptr_t)1;
  brd_nvls_status_t st;
  assert_int_equal(brd_nvls_create(&a, &n, &st), ncclSuccess);
  assert_null(n);
  assert_int_equal(st.enabled, 0);
  assert_non_null(strstr(st.why, "CUDA=0"));
  a.enable = 1;
  assert_int_equal(brd_nvls_create(&a, &n, &st), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "NCCL_NVLS_ENABLE=1"));
  ag_fini(&g);
}
#endif

#if BRAID_CUDA
#include <cuda.h>

/* ---- the fake driver ----------------------------------------------------- */

#define NOBJ 16
#define NHANDLE 64
#define NRES 64
#define FAULT_CODE CUDA_ERROR_SYSTEM_NOT_READY /* 802, as in the field */

static _Thread_local int tl_rank = -1; /* the rank this thread plays */

typedef struct {
  int used;
  unsigned ndev;
  size_t size;
  int added[MAXR], nadded;
  int bound[MAXR];
} fobj_t;

/* The fake's state: F_local for ranks as threads, a shared mapping for
 * ranks as processes (FP points to the one in use). */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  fobj_t obj[NOBJ]; /* first member fake_reset clears */
  struct {
    int used, obj;
  } h[NHANDLE];
  struct {
    int used;
    CUdeviceptr va;
    size_t size;
    int mapped;
  } res[NRES];
  CUdeviceptr next_va;
  int unsupported_rank;         /* -1: every device has multicast */
  size_t gran_min, gran_rec;
  int fault_rank;
  const char *fault_call;
  /* counters */
  int live_handles, live_binds, live_reserves, live_maps;
  int creates, adds, binds, exports, imports, attr_calls;
  int bind_timeouts;            /* binds that waited past 3 s */
  int bad_args;                 /* calls with sizes or offsets the real driver refuses */
} fake_t;

static fake_t F_local = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static fake_t *FP = &F_local;
#define F (*FP)

static void fake_reset(void) {
  memset(&F.obj, 0, sizeof(F) - offsetof(fake_t, obj));
  F.next_va = 0x7f1000000000ull;
  F.unsupported_rank = -1;
  F.gran_min = 2 * MiB;
  F.gran_rec = 8 * MiB;
  F.fault_rank = -1;
  F.fault_call = "";
}

static int faulted(const char *call) {
  return tl_rank >= 0 && tl_rank == F.fault_rank && strcmp(call, F.fault_call) == 0;
}

static int hobj(CUmemGenericAllocationHandle h) {
  unsigned long long i = h - 0x1000;
  if (h < 0x1000 || i >= NHANDLE || !F.h[i].used) return -1;
  return F.h[i].obj;
}

static CUmemGenericAllocationHandle hnew(int obj) {
  for (int i = 0; i < NHANDLE; i++) {
    if (F.h[i].used) continue;
    F.h[i].used = 1;
    F.h[i].obj = obj;
    F.live_handles++;
    return 0x1000 + (CUmemGenericAllocationHandle)i;
  }
  return 0;
}

static CUresult f_errstr(CUresult r, const char **s) {
  *s = r == FAULT_CODE ? "system not yet initialized (injected)" : "fake driver error";
  return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}

static CUresult f_attr(int *v, CUdevice_attribute a, CUdevice dev) {
  pthread_mutex_lock(&F.mu);
  F.attr_calls++;
  pthread_mutex_unlock(&F.mu);
  if (faulted("cuDeviceGetAttribute")) return FAULT_CODE;
  *v = a == CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED ? dev != F.unsupported_rank : 1;
  return CUDA_SUCCESS;
}

static CUresult f_gran(size_t *g, const CUmulticastObjectProp *p,
                       CUmulticastGranularity_flags f) {
  if (faulted("cuMulticastGetGranularity")) return FAULT_CODE;
  if (p->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || p->numDevices == 0)
    return CUDA_ERROR_INVALID_VALUE;
  *g = f == CU_MULTICAST_GRANULARITY_MINIMUM ? F.gran_min : F.gran_rec;
  return CUDA_SUCCESS;
}

static CUresult f_create(CUmemGenericAllocationHandle *h, const CUmulticastObjectProp *p) {
  if (faulted("cuMulticastCreate")) return FAULT_CODE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&F.mu);
  F.creates++;
  if (p->size == 0 || p->size % F.gran_min != 0) {
    F.bad_args++;
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    for (int i = 0; i < NOBJ; i++) {
      if (F.obj[i].used) continue;
      memset(&F.obj[i], 0, sizeof(F.obj[i]));
      F.obj[i].used = 1;
      F.obj[i].ndev = p->numDevices;
      F.obj[i].size = p->size;
      *h = hnew(i);
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_add(CUmemGenericAllocationHandle h, CUdevice dev) {
  if (faulted("cuMulticastAddDevice")) return FAULT_CODE;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int o = hobj(h);
  if (o < 0 || dev < 0 || dev >= MAXR || F.obj[o].added[dev]) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.obj[o].added[dev] = 1;
    F.obj[o].nadded++;
    F.adds++;
    pthread_cond_broadcast(&F.cv);
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

/* Blocks until every device was added, as the driver does. */
static CUresult bind_common(CUmemGenericAllocationHandle h, size_t mc_off, size_t mem_off,
                            size_t size) {
  int dev = tl_rank;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int o = hobj(h);
  if (o < 0 || dev < 0) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (size == 0 || size % F.gran_min || mc_off % F.gran_min || mem_off % F.gran_min ||
             mc_off + size > F.obj[o].size) {
    F.bad_args++;
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    double deadline = now_s() + 3;
    while (F.obj[o].nadded < (int)F.obj[o].ndev && r == CUDA_SUCCESS) {
      if (now_s() > deadline) {
        F.bind_timeouts++;
        r = CUDA_ERROR_TIMEOUT;
        break;
      }
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&F.cv, &F.mu, &ts);
    }
    if (r == CUDA_SUCCESS) {
      F.obj[o].bound[dev] = 1;
      F.live_binds++;
      F.binds++;
    }
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_bind_mem(CUmemGenericAllocationHandle h, size_t mc_off,
                           CUmemGenericAllocationHandle mem, size_t mem_off, size_t size,
                           unsigned long long flags) {
  if (faulted("cuMulticastBindMem")) return FAULT_CODE;
  if (mem != 0x5000 + (CUmemGenericAllocationHandle)tl_rank || flags != 0)
    return CUDA_ERROR_INVALID_HANDLE;
  return bind_common(h, mc_off, mem_off, size);
}

static CUresult f_bind_addr(CUmemGenericAllocationHandle h, size_t mc_off, CUdeviceptr va,
                            size_t size, unsigned long long flags) {
  if (faulted("cuMulticastBindAddr")) return FAULT_CODE;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return bind_common(h, mc_off, (size_t)va, size);
}

static CUresult f_unbind(CUmemGenericAllocationHandle h, CUdevice dev, size_t off, size_t size) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int o = hobj(h);
  if (o < 0 || dev < 0 || dev >= MAXR || !F.obj[o].bound[dev] || off != 0 || size == 0) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.obj[o].bound[dev] = 0;
    F.live_binds--;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_reserve(CUdeviceptr *va, size_t size, size_t align, CUdeviceptr hint,
                          unsigned long long flags) {
  if (faulted("cuMemAddressReserve")) return FAULT_CODE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&F.mu);
  if (size == 0 || align == 0 || size % align || hint != 0 || flags != 0) {
    F.bad_args++;
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    for (int i = 0; i < NRES; i++) {
      if (F.res[i].used) continue;
      F.next_va = (F.next_va + align - 1) / align * align;
      F.res[i].used = 1;
      F.res[i].va = F.next_va;
      F.res[i].size = size;
      F.res[i].mapped = 0;
      F.next_va += size;
      *va = F.res[i].va;
      F.live_reserves++;
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static int res_find(CUdeviceptr va, size_t size) {
  for (int i = 0; i < NRES; i++)
    if (F.res[i].used && F.res[i].va == va && F.res[i].size == size) return i;
  return -1;
}

static CUresult f_free(CUdeviceptr va, size_t size) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int i = res_find(va, size);
  if (i < 0 || F.res[i].mapped) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.res[i].used = 0;
    F.live_reserves--;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_map(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                      unsigned long long flags) {
  if (faulted("cuMemMap")) return FAULT_CODE;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int i = res_find(va, size), o = hobj(h);
  if (i < 0 || o < 0 || off != 0 || flags != 0 || size > F.obj[o].size || F.res[i].mapped) {
    F.bad_args++;
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.res[i].mapped = 1;
    F.live_maps++;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_unmap(CUdeviceptr va, size_t size) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int i = res_find(va, size);
  if (i < 0 || !F.res[i].mapped) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.res[i].mapped = 0;
    F.live_maps--;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *d, size_t n) {
  if (faulted("cuMemSetAccess")) return FAULT_CODE;
  pthread_mutex_lock(&F.mu);
  int i = res_find(va, size);
  pthread_mutex_unlock(&F.mu);
  if (i < 0 || n != 1 || d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      d->location.id != tl_rank || d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* A descriptor naming the object: a memfd holding its index. */
static CUresult f_export(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,
                         unsigned long long flags) {
  if (faulted("cuMemExportToShareableHandle")) return FAULT_CODE;
  if (t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&F.mu);
  int o = hobj(h);
  F.exports++;
  pthread_mutex_unlock(&F.mu);
  if (o < 0) return CUDA_ERROR_INVALID_HANDLE;
  int fd = memfd_create("fake-mc", MFD_CLOEXEC);
  if (fd < 0 || pwrite(fd, &o, sizeof(o), 0) != (ssize_t)sizeof(o)) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *(int *)out = fd;
  return CUDA_SUCCESS;
}

static CUresult f_import(CUmemGenericAllocationHandle *h, void *fdp, CUmemAllocationHandleType t) {
  if (faulted("cuMemImportFromShareableHandle")) return FAULT_CODE;
  int fd = (int)(intptr_t)fdp, o = -1;
  if (t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      pread(fd, &o, sizeof(o), 0) != (ssize_t)sizeof(o) || o < 0 || o >= NOBJ)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&F.mu);
  CUresult r = F.obj[o].used ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) {
    *h = hnew(o);
    F.imports++;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static CUresult f_release(CUmemGenericAllocationHandle h) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&F.mu);
  int o = hobj(h);
  if (o < 0) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    F.h[h - 0x1000].used = 0;
    F.live_handles--;
    int left = 0;
    for (int i = 0; i < NHANDLE; i++) left += F.h[i].used && F.h[i].obj == o;
    if (left == 0) F.obj[o].used = 0;
  }
  pthread_mutex_unlock(&F.mu);
  return r;
}

static brd_cudrv_t fake_drv(void) {
  brd_cudrv_t t;
  memset(&t, 0, sizeof(t));
  t.get_error_string = f_errstr;
  t.device_get = f_device_get;
  t.device_get_attribute = f_attr;
  t.mem_release = f_release;
  t.mem_address_reserve = f_reserve;
  t.mem_address_free = f_free;
  t.mem_map = f_map;
  t.mem_unmap = f_unmap;
  t.mem_set_access = f_access;
  t.mem_export = f_export;
  t.mem_import = f_import;
  t.mc_get_granularity = f_gran;
  t.mc_create = f_create;
  t.mc_add_device = f_add;
  t.mc_bind_mem = f_bind_mem;
  t.mc_bind_addr = f_bind_addr;
  t.mc_unbind = f_unbind;
  return t;
}

/* ---- ranks as threads ---------------------------------------------------- */

typedef struct {
  int nranks;
  int skip_rank;              /* this rank never calls (-1: all call) */
  int enable[MAXR];           /* per rank */
  size_t size[MAXR];          /* per rank window size */
  size_t mem_offset;          /* BIND_MEM */
  size_t mem_size;
  brd_nvls_bind_t bind;
  int share_fd;
  int same_dev;               /* 1: every rank on device 0 */
  const brd_cudrv_t *drv;
  ag_t ag;
  /* results */
  ncclResult_t res[MAXR];
  brd_nvls_t *nvls[MAXR];
  brd_nvls_status_t st[MAXR];
  double secs;
} run_t;

typedef struct {
  run_t *run;
  int rank;
} rank_arg_t;

static void *rank_main(void *v) {
  rank_arg_t *ra = v;
  run_t *R = ra->run;
  int r = ra->rank;
  tl_rank = r;
  ag_ctx_t c = {&R->ag, r};
  brd_nvls_args_t a;
  memset(&a, 0, sizeof(a));
  a.nranks = R->nranks;
  a.rank = r;
  a.dev = R->same_dev ? 0 : r;
  a.enable = R->enable[r];
  a.allgather = ag_fn;
  a.allgather_ctx = &c;
  a.drv = R->drv;
  a.bind = R->bind;
  a.mem_handle = 0x5000 + (uint64_t)r;
  a.mem_offset = R->mem_offset;
  a.mem_size = R->mem_size;
  /* BIND_ADDR: a 2 MiB-aligned address per rank, 64 MiB mapped. */
  a.addr = (uintptr_t)0x7e0000000000ull + (uintptr_t)r * 256 * MiB;
  a.addr_room = 64 * MiB;
  a.size = R->size[r];
  a.timeout_s = 5;
  a.share_fd = R->share_fd;
  R->res[r] = brd_nvls_create(&a, &R->nvls[r], &R->st[r]);
  return NULL;
}

static void run_init(run_t *R, int nranks, size_t size) {
  memset(R, 0, sizeof(*R));
  R->nranks = nranks;
  R->skip_rank = -1;
  for (int i = 0; i < MAXR; i++) {
    R->enable[i] = 2;
    R->size[i] = size;
    R->nvls[i] = (brd_nvls_t *)(uintptr_t)0x1; /* must be overwritten */
  }
  R->mem_size = 64 * MiB;
  R->bind = BRD_NVLS_BIND_MEM;
}

static void run_go(run_t *R) {
  pthread_t th[MAXR];
  rank_arg_t ra[MAXR];
  ag_init(&R->ag, R->nranks);
  double t0 = now_s();
  for (int i = 0; i < R->nranks; i++) {
    if (i == R->skip_rank) continue;
    ra[i].run = R;
    ra[i].rank = i;
    assert_int_equal(pthread_create(&th[i], NULL, rank_main, &ra[i]), 0);
  }
  for (int i = 0; i < R->nranks; i++)
    if (i != R->skip_rank) pthread_join(th[i], NULL);
  R->secs = now_s() - t0;
  ag_fini(&R->ag);
}

static void run_destroy(run_t *R) {
  for (int i = 0; i < R->nranks; i++) {
    if (R->res[i] == ncclSuccess && i != R->skip_rank) brd_nvls_destroy(R->nvls[i]);
  }
}

static void assert_nothing_live(void) {
  assert_int_equal(F.live_handles, 0);
  assert_int_equal(F.live_binds, 0);
  assert_int_equal(F.live_reserves, 0);
  assert_int_equal(F.live_maps, 0);
  assert_int_equal(F.bind_timeouts, 0);
  assert_int_equal(F.bad_args, 0);
  for (int i = 0; i < NOBJ; i++) assert_int_equal(F.obj[i].used, 0);
}

static int setup(void **state) {
  (void)state;
  fake_reset();
  return 0;
}

/* The whole sequence, three ranks; sizes by hand: a 3 MiB + 123 B window
 * with granularities 2 MiB (minimum) and 8 MiB (recommended) binds 4 MiB
 * and maps an 8 MiB multicast range. */
static void check_success(brd_nvls_bind_t bind, int share_fd) {
  fake_reset();
  brd_cudrv_t drv = fake_drv();
  run_t R;
  run_init(&R, 3, 3 * MiB + 123);
  R.drv = &drv;
  R.bind = bind;
  R.share_fd = share_fd;
  R.mem_offset = 6 * MiB;
  run_go(&R);
  void *ptrs[MAXR];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_non_null(R.nvls[i]);
    assert_int_equal(R.st[i].enabled, 1);
    assert_int_equal(R.st[i].fail_rank, -1);
    assert_string_equal(R.st[i].why, "");
    brd_nvls_mem_t m;
    brd_nvls_mem(R.nvls[i], &m);
    assert_int_equal(m.gran_min, 2 * MiB);
    assert_int_equal(m.gran_rec, 8 * MiB);
    assert_int_equal(m.size, 3 * MiB + 123);
    assert_int_equal(m.bind_size, 4 * MiB);
    assert_int_equal(m.pad_bytes, MiB - 123);
    assert_int_equal(m.mc_size, 8 * MiB);
    assert_int_equal(m.phys_bytes, 0);
    ptrs[i] = brd_nvls_mc_ptr(R.nvls[i]);
    assert_non_null(ptrs[i]);
    assert_int_equal((uintptr_t)ptrs[i] % (8 * MiB), 0);
    for (int j = 0; j < i; j++) assert_ptr_not_equal(ptrs[i], ptrs[j]);
  }
  assert_int_equal(F.creates, 1);
  assert_int_equal(F.adds, 3);
  assert_int_equal(F.binds, 3);
  assert_int_equal(F.live_maps, 3);
  assert_int_equal(F.live_binds, 3);
  assert_int_equal(F.exports, share_fd ? 1 : 0);
  assert_int_equal(F.imports, share_fd ? 2 : 0);
  /* One handle shared by the threads, or one per importer. */
  assert_int_equal(F.live_handles, share_fd ? 3 : 1);
  run_destroy(&R);
  assert_nothing_live();
}

static void test_success(void **state) {
  (void)state;
  check_success(BRD_NVLS_BIND_MEM, 0);
  check_success(BRD_NVLS_BIND_ADDR, 0);
  check_success(BRD_NVLS_BIND_MEM, 1);
}

/* A failure at one step on one rank: every rank disabled with the same
 * status, one WARN naming rank and call, nothing left, no hang. */
static void check_fault(int nranks, int rank, const char *call, int share_fd,
                        brd_nvls_bind_t bind, int enable) {
  fake_reset();
  F.fault_rank = rank;
  F.fault_call = call;
  brd_cudrv_t drv = fake_drv();
  run_t R;
  run_init(&R, nranks, 5 * MiB + 7);
  for (int i = 0; i < MAXR; i++) R.enable[i] = enable;
  R.drv = &drv;
  R.share_fd = share_fd;
  R.bind = bind;
  brd_log_set_last_error("no warning yet");
  run_go(&R);
  char want[64];
  snprintf(want, sizeof(want), "local rank %d: %s failed", rank, call);
  for (int i = 0; i < nranks; i++) {
    assert_int_equal(R.res[i], enable == 1 ? ncclSystemError : ncclSuccess);
    if (enable != 1) assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].enabled, 0);
    assert_int_equal(R.st[i].fail_rank, rank);
    assert_string_equal(R.st[i].fail_call, call);
    assert_int_equal(R.st[i].fail_code, FAULT_CODE);
    if (strstr(R.st[i].why, want) == NULL) fail_msg("rank %d: why: %s", i, R.st[i].why);
    assert_non_null(strstr(R.st[i].why, "(injected)"));
  }
  const char *e = brd_log_last_error();
  if (strstr(e, want) == NULL) fail_msg("last WARN: %s", e);
  assert_true(R.secs < 3.0);
  assert_nothing_live();
}

static void test_fault_each_step(void **state) {
  (void)state;
  check_fault(3, 1, "cuDeviceGetAttribute", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 2, "cuMulticastGetGranularity", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 0, "cuMulticastCreate", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 0, "cuMemExportToShareableHandle", 1, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 2, "cuMemImportFromShareableHandle", 1, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 2, "cuMulticastAddDevice", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 0, "cuMulticastAddDevice", 1, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 1, "cuMulticastBindMem", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(5, 4, "cuMulticastBindAddr", 0, BRD_NVLS_BIND_ADDR, 2);
  check_fault(3, 1, "cuMemAddressReserve", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 2, "cuMemMap", 0, BRD_NVLS_BIND_MEM, 2);
  check_fault(3, 0, "cuMemSetAccess", 1, BRD_NVLS_BIND_MEM, 2);
  check_fault(2, 1, "cuMemMap", 0, BRD_NVLS_BIND_ADDR, 2);
}

/* NCCL_NVLS_ENABLE=1: the same failure is an error on every rank. */
static void test_required_fails(void **state) {
  (void)state;
  check_fault(3, 1, "cuMulticastBindMem", 0, BRD_NVLS_BIND_MEM, 1);
  assert_non_null(strstr(brd_log_last_error(), "NCCL_NVLS_ENABLE=1"));
  check_fault(3, 0, "cuMulticastCreate", 0, BRD_NVLS_BIND_MEM, 1);
}

/* An unsupported device on one rank: every rank off, INFO only (auto), an
 * error naming the attribute where NVLS is required. */
static void test_unsupported(void **state) {
  (void)state;
  fake_reset();
  F.unsupported_rank = 2;
  brd_cudrv_t drv = fake_drv();
  run_t R;
  run_init(&R, 4, MiB);
  R.drv = &drv;
  brd_log_set_last_error("sentinel");
  run_go(&R);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].fail_rank, 2);
    assert_string_equal(R.st[i].fail_call, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED");
    assert_non_null(strstr(R.st[i].why, "device 2 has no multicast"));
  }
  assert_string_equal(brd_log_last_error(), "sentinel"); /* no WARN */
  assert_int_equal(F.creates, 0);
  assert_nothing_live();

  fake_reset();
  F.unsupported_rank = 0;
  run_init(&R, 2, MiB);
  R.drv = &drv;
  R.enable[1] = 1; /* rank 1 requires NVLS; rank 0's device has none */
  run_go(&R);
  assert_int_equal(R.res[0], ncclSuccess);
  assert_int_equal(R.res[1], ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"));
  assert_nothing_live();

  /* Two ranks of one process on one GPU: off, before any object exists. */
  fake_reset();
  brd_cudrv_t same = fake_drv();
  run_init(&R, 3, MiB);
  R.drv = &same;
  R.same_dev = 1;
  brd_log_set_last_error("sentinel");
  run_go(&R);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].fail_rank, 1);
    assert_string_equal(R.st[i].fail_call, "one GPU per rank");
    assert_non_null(strstr(R.st[i].why, "local ranks 0 and 1 share device 0"));
  }
  assert_string_equal(brd_log_last_error(), "sentinel");
  assert_int_equal(F.creates, 0);
  assert_nothing_live();

  /* A driver without the multicast entry points. */
  fake_reset();
  brd_cudrv_t old = fake_drv();
  old.mc_bind_addr = NULL;
  run_init(&R, 2, MiB);
  R.drv = &old;
  run_go(&R);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_non_null(strstr(R.st[i].why, "cuMulticastBindAddr"));
  }
  assert_int_equal(F.attr_calls, 0);
}

/* NCCL_NVLS_ENABLE=0: no driver call, no object; mixed settings disable
 * every rank instead of leaving one waiting; the value is read from the
 * environment when args say -1. */
static void test_enable_env(void **state) {
  (void)state;
  brd_cudrv_t drv = fake_drv();
  run_t R;
  fake_reset();
  run_init(&R, 3, MiB);
  R.drv = &drv;
  for (int i = 0; i < 3; i++) R.enable[i] = 0;
  run_go(&R);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_string_equal(R.st[i].fail_call, "NCCL_NVLS_ENABLE");
  }
  assert_int_equal(F.attr_calls, 0);
  assert_int_equal(F.creates, 0);

  fake_reset();
  run_init(&R, 3, MiB);
  R.drv = &drv;
  R.enable[1] = 0;
  run_go(&R);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].fail_rank, 1);
    assert_non_null(strstr(R.st[i].why, "NCCL_NVLS_ENABLE=0 on local rank 1"));
  }
  assert_int_equal(F.creates, 0);
  assert_nothing_live();

  /* From the environment: 0, then 1 with a failing device, then unset (2). */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  brd_param_reload();
  fake_reset();
  run_init(&R, 2, MiB);
  R.drv = &drv;
  R.enable[0] = R.enable[1] = -1;
  run_go(&R);
  assert_int_equal(R.res[0], ncclSuccess);
  assert_string_equal(R.st[0].fail_call, "NCCL_NVLS_ENABLE");
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  brd_param_reload();
  fake_reset();
  F.unsupported_rank = 1;
  run_init(&R, 2, MiB);
  R.drv = &drv;
  R.enable[0] = R.enable[1] = -1;
  run_go(&R);
  assert_int_equal(R.res[0], ncclInvalidUsage);
  assert_int_equal(R.res[1], ncclInvalidUsage);
  unsetenv("NCCL_NVLS_ENABLE");
  brd_param_reload();
  fake_reset();
  run_init(&R, 2, MiB);
  R.drv = &drv;
  R.enable[0] = R.enable[1] = -1;
  run_go(&R);
  assert_int_equal(R.res[0], ncclSuccess);
  assert_non_null(R.nvls[0]);
  assert_int_equal(R.st[1].enabled, 1);
  run_destroy(&R);
  assert_nothing_live();
}

/* Granularity rounding on one rank, against sizes worked out by hand. */
static void test_granularity(void **state) {
  (void)state;
  static const struct {
    size_t size, gmin, grec, bind, mc;
  } t[] = {
      {1, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB},
      {2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB},
      {2 * MiB + 1, 2 * MiB, 8 * MiB, 4 * MiB, 8 * MiB},
      {9 * MiB, 2 * MiB, 8 * MiB, 10 * MiB, 16 * MiB},
      {4095, 4096, 65536, 4096, 65536},
      {40 * MiB + 3, 512 * 1024, 2 * MiB, 40 * MiB + 512 * 1024, 42 * MiB},
  };
  brd_cudrv_t drv = fake_drv();
  for (size_t k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
    fake_reset();
    F.gran_min = t[k].gmin;
    F.gran_rec = t[k].grec;
    run_t R;
    run_init(&R, 1, t[k].size);
    R.drv = &drv;
    R.mem_size = 128 * MiB;
    run_go(&R);
    assert_int_equal(R.res[0], ncclSuccess);
    assert_non_null(R.nvls[0]);
    brd_nvls_mem_t m;
    brd_nvls_mem(R.nvls[0], &m);
    assert_int_equal(m.bind_size, t[k].bind);
    assert_int_equal(m.mc_size, t[k].mc);
    assert_int_equal(m.pad_bytes, t[k].bind - t[k].size);
    run_destroy(&R);
    assert_nothing_live();
  }

  /* Misaligned window offset, an allocation without room for the rounded
   * window, and ranks binding different sizes: off on every rank, with a
   * WARN saying which. */
  fake_reset();
  run_t R;
  run_init(&R, 3, MiB);
  R.drv = &drv;
  R.mem_offset = MiB; /* not a multiple of 2 MiB */
  run_go(&R);
  for (int i = 0; i < 3; i++) {
    assert_null(R.nvls[i]);
    assert_string_equal(R.st[i].fail_call, "window alignment");
    assert_int_equal(R.st[i].fail_rank, 0);
  }
  assert_non_null(strstr(brd_log_last_error(), "multiple of the multicast granularity"));
  fake_reset();
  run_init(&R, 2, 3 * MiB);
  R.drv = &drv;
  R.mem_size = 3 * MiB + 5; /* the bind needs 4 MiB */
  run_go(&R);
  assert_null(R.nvls[1]);
  assert_string_equal(R.st[1].fail_call, "window alignment");
  fake_reset();
  run_init(&R, 3, 3 * MiB);
  R.size[2] = 5 * MiB;
  R.drv = &drv;
  run_go(&R);
  for (int i = 0; i < 3; i++) {
    assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].fail_rank, 2);
    assert_string_equal(R.st[i].fail_call, "window size");
  }
  assert_int_equal(F.creates, 0);
  assert_nothing_live();
}

/* A peer that never comes: the others leave at the allgather's deadline
 * with its error, holding nothing; an abort ends the wait at once. */
static void test_peer_missing_and_abort(void **state) {
  (void)state;
  brd_cudrv_t drv = fake_drv();
  fake_reset();
  run_t R;
  run_init(&R, 3, MiB);
  R.drv = &drv;
  R.skip_rank = 1;
  double t0 = now_s();
  /* The allgather's deadline is 5 s (ag_init). */
  run_go(&R);
  assert_true(now_s() - t0 < 8.0);
  assert_int_equal(R.res[0], ncclRemoteError);
  assert_int_equal(R.res[2], ncclRemoteError);
  assert_int_equal(F.creates, 0);
  assert_nothing_live();

  /* Rank 2 never comes; an abort raised from outside after 0.3 s ends
   * the others' wait at once. */
  fake_reset();
  run_init(&R, 3, MiB);
  R.drv = &drv;
  R.skip_rank = 2;
  pthread_t th[2];
  rank_arg_t ra[2];
  ag_init(&R.ag, 3);
  for (int i = 0; i < 2; i++) {
    ra[i].run = &R;
    ra[i].rank = i;
    assert_int_equal(pthread_create(&th[i], NULL, rank_main, &ra[i]), 0);
  }
  usleep(300 * 1000);
  t0 = now_s();
  atomic_store(&R.ag.abort, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  assert_true(now_s() - t0 < 1.0);
  ag_fini(&R.ag);
  assert_int_equal(R.res[0], ncclSystemError);
  assert_int_equal(R.res[1], ncclSystemError);
  assert_nothing_live();
}

/* ---- ranks as processes --------------------------------------------------- */

/* What a rank process reports back through shared memory. */
typedef struct {
  int done;
  ncclResult_t res;
  int enabled, fail_rank, mc_set;
  char fail_call[48];
  size_t bind_size;
  int pid;
} proc_out_t;

typedef struct {
  fake_t fake;
  ag_t ag;
  proc_out_t out[MAXR];
} shared_t;

/* One rank as a process: the sequence, the report, the teardown. */
static void proc_rank(shared_t *sh, int r, int nranks, int enable) {
  tl_rank = r;
  brd_cudrv_t drv = fake_drv();
  ag_ctx_t c = {&sh->ag, r};
  brd_nvls_args_t a;
  memset(&a, 0, sizeof(a));
  a.nranks = nranks;
  a.rank = r;
  a.dev = r;
  a.enable = enable;
  a.allgather = ag_fn;
  a.allgather_ctx = &c;
  a.drv = &drv;
  a.bind = BRD_NVLS_BIND_MEM;
  a.mem_handle = 0x5000 + (uint64_t)r;
  a.mem_size = 64 * MiB;
  a.size = 7 * MiB + 1;
  a.timeout_s = 5;
  brd_nvls_t *n = NULL;
  brd_nvls_status_t st;
  proc_out_t *o = &sh->out[r];
  o->pid = (int)getpid();
  o->res = brd_nvls_create(&a, &n, &st);
  o->enabled = st.enabled;
  o->fail_rank = st.fail_rank;
  snprintf(o->fail_call, sizeof(o->fail_call), "%s", st.fail_call);
  if (o->res == ncclSuccess && n != NULL) {
    brd_nvls_mem_t m;
    brd_nvls_mem(n, &m);
    o->bind_size = m.bind_size;
    o->mc_set = brd_nvls_mc_ptr(n) != NULL;
    /* Everyone mapped before anyone tears down, as a window's owner
     * would see to. */
    ncclResult_t rr = ag_fn(&c, &r, &r, 0);
    (void)rr;
    brd_nvls_destroy(n);
  }
  o->done = 1;
}

/* Runs nranks rank processes on shared fake state; faults as set by the
 * caller in sh->fake. Returns when all exited (at most 20 s). */
static void proc_run(shared_t *sh, int nranks, int enable) {
  pid_t pids[MAXR];
  ag_init_ex(&sh->ag, nranks, 1);
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      proc_rank(sh, r, nranks, enable);
      _exit(0);
    }
  }
  double deadline = now_s() + 20;
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (now_s() > deadline) {
        for (int k = 0; k < nranks; k++) kill(pids[k], SIGKILL);
        fail_msg("rank processes still running after 20 s");
      }
      usleep(10 * 1000);
    }
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

/* Ranks in three processes: the handle travels as a descriptor served
 * by local rank 0's process (ipc.c); a failed import in one process still
 * disables all, and nothing is left in any. */
static void test_processes(void **state) {
  (void)state;
  shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_condattr_init(&ca);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&sh->fake.mu, &ma);
  pthread_cond_init(&sh->fake.cv, &ca);
  FP = &sh->fake;
  fake_reset();

  proc_run(sh, 3, 2);
  for (int r = 0; r < 3; r++) {
    proc_out_t *o = &sh->out[r];
    assert_int_equal(o->done, 1);
    assert_int_equal(o->res, ncclSuccess);
    assert_int_equal(o->enabled, 1);
    assert_int_equal(o->mc_set, 1);
    assert_int_equal(o->bind_size, 8 * MiB); /* 7 MiB + 1 rounded up to 2 MiB */
    for (int k = 0; k < r; k++) assert_int_not_equal(o->pid, sh->out[k].pid);
  }
  assert_int_equal(F.creates, 1);
  assert_int_equal(F.exports, 1);
  assert_int_equal(F.imports, 2);
  assert_int_equal(F.binds, 3);
  assert_nothing_live();

  fake_reset();
  memset(sh->out, 0, sizeof(sh->out));
  F.fault_rank = 1;
  F.fault_call = "cuMemImportFromShareableHandle"; /* a literal: same address after fork */
  proc_run(sh, 3, 2);
  for (int r = 0; r < 3; r++) {
    proc_out_t *o = &sh->out[r];
    assert_int_equal(o->done, 1);
    assert_int_equal(o->res, ncclSuccess);
    assert_int_equal(o->enabled, 0);
    assert_int_equal(o->fail_rank, 1);
    assert_string_equal(o->fail_call, "cuMemImportFromShareableHandle");
  }
  assert_int_equal(F.binds, 0);
  assert_nothing_live();

  FP = &F_local;
  pthread_mutex_destroy(&sh->fake.mu);
  pthread_cond_destroy(&sh->fake.cv);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  munmap(sh, sizeof(*sh));
}

/* The library's own table (args->drv NULL) where no driver resolves it:
 * off, or ncclInvalidUsage when required. On a machine with a driver the
 * real sequence is nvls_probe's (tests/gpu). */
static void test_no_driver(void **state) {
  (void)state;
  if (brd_cudrv_get() != NULL) {
    printf("SKIP: test_no_driver: this machine has a CUDA driver\n");
    skip();
  }
  run_t R;
  run_init(&R, 2, MiB);
  R.drv = NULL;
  run_go(&R);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(R.res[i], ncclSuccess);
    assert_null(R.nvls[i]);
    assert_int_equal(R.st[i].fail_rank, 0);
    assert_string_equal(R.st[i].fail_call, "cudaGetDriverEntryPoint");
  }
  run_init(&R, 1, MiB);
  R.enable[0] = 1;
  run_go(&R);
  assert_int_equal(R.res[0], ncclInvalidUsage);
  assert_non_null(strstr(brd_log_last_error(), "driver API is unavailable"));
}

#define CUDA_TEST(f) cmocka_unit_test_setup(f, setup)
#else
#define CUDA_TEST(f) cmocka_unit_test(f##_skipped)
#define SKIPPED(f)                                                                    \
  static void f##_skipped(void **state) {                                             \
    (void)state;                                                                      \
    printf("SKIP: " #f ": built without CUDA (CUDA=0): no driver table to fake\n");   \
    skip();                                                                           \
  }
SKIPPED(test_success)
SKIPPED(test_fault_each_step)
SKIPPED(test_required_fails)
SKIPPED(test_unsupported)
SKIPPED(test_enable_env)
SKIPPED(test_granularity)
SKIPPED(test_peer_missing_and_abort)
SKIPPED(test_no_driver)
SKIPPED(test_processes)
#endif /* BRAID_CUDA */

int main(void) {
  setenv("BRAID_DEVICE", "host", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_getters),
#if !BRAID_CUDA
      cmocka_unit_test(test_off_without_device_api),
#endif
      CUDA_TEST(test_success),
      CUDA_TEST(test_fault_each_step),
      CUDA_TEST(test_required_fails),
      CUDA_TEST(test_unsupported),
      CUDA_TEST(test_enable_env),
      CUDA_TEST(test_granularity),
      CUDA_TEST(test_peer_missing_and_abort),
      CUDA_TEST(test_no_driver),
      CUDA_TEST(test_processes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
