/*
 * Tests of the CUDA simulator's runtime itself (tests/cudasim/runtime.c):
 * what the library's CUDA-mode code relies on, checked against facts set
 * up by hand, not against the simulator.
 *
 *   - devices: count, attributes, bus ids both ways, peer access, no cuMem
 *     allocation entry points (BRAID_CUDASIM_DEVICES=2 is set here);
 *   - multicast objects through the driver entry points: attribute and its
 *     knob, create/add/bind (waiting for the last add), export/import, a
 *     mapping resolving to each member's copy in device order, unbind,
 *     unmap, release, the calls CUDA refuses, BRAID_CUDASIM_MC_FAIL;
 *   - cuMem allocations with BRAID_CUDASIM_CUMEM=1: created, mapped as
 *     device memory, exported and imported (the same bytes), bound to a
 *     multicast object by handle;
 *   - memory: the allocation table (attributes, frees of unknown or freed
 *     pointers refused), registration, the device side of copies;
 *   - stream order: ops of one stream run in order even when an early one
 *     is slow; a blocked stream does not block another;
 *   - events: NotReady until the recorded work ran, timing, cross-stream
 *     waits, the legacy stream's implicit ordering with blocking streams;
 *   - CUDA IPC across fork: the parent allocates and writes, the child
 *     opens the handle, checks and overwrites; a same-process open and a
 *     handle of freed memory are refused;
 *   - graph capture: a fork/join capture over two streams with kernels
 *     (arguments by value), copies and host functions; nothing runs while
 *     capturing; three replays, each seeing the state the previous left;
 *   - capture errors as CUDA gives them: synchronising a capturing stream,
 *     cudaMalloc in global mode (allowed after switching to relaxed),
 *     waiting on an event recorded outside the capture, an unjoined fork,
 *     the legacy stream while a blocking stream captures, querying an
 *     event recorded in a capture, ending from another thread;
 *   - a synchronise that would wait forever returns an error at the
 *     deadline (BRAID_CUDASIM_TIMEOUT=2 here);
 *   - the executor faults (cudaErrorIllegalAddress, sticky) when a kernel
 *     is given host memory the GPU could not reach, and (exec.cu's kernels
 *     only) when one stores past the end of a device allocation (each in a
 *     child process);
 *   - the grid of CPU-compiled kernels (grid.c): every block's threads see
 *     their indices and the capped block size, __syncthreads_or hands each
 *     thread the OR of its block's predicates (threads that returned count
 *     as arrived), block-shared memory is per block, blocks spin on each
 *     other, parameters are copied at launch, and cudaLaunchKernel refuses
 *     anything that is not such a kernel.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "algos/algos.h"
#include "cudasim.h"
#include "device/exec_cuda.h"
#include "plan/plan.h"

#define CU(call) assert_int_equal((call), cudaSuccess)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- host functions used as ops ---------------------------------------------- */

/* A log of op numbers, appended by host functions in the order they run. */
static _Atomic int log_buf[64];
static _Atomic int log_len;

typedef struct {
  int id;
  int sleep_ms;
} log_arg_t;

static void CUDART_CB log_op(void *p) {
  const log_arg_t *a = p;
  if (a->sleep_ms > 0) sleep_ms(a->sleep_ms);
  log_buf[atomic_fetch_add(&log_len, 1)] = a->id;
}

/* A gate: ops behind it wait until the test opens it. */
static _Atomic int gate_open;
static void CUDART_CB gate_wait(void *p) {
  (void)p;
  while (!atomic_load(&gate_open)) sleep_ms(1);
}

static void log_reset(void) {
  atomic_store(&log_len, 0);
  atomic_store(&gate_open, 0);
}

/* A "kernel" (brd_cudasim_launch): adds its by-value increment to *target. */
typedef struct {
  int64_t *target;
  int64_t add;
} add_kernel_t;
static void add_kernel(void *p) {
  add_kernel_t *a = p;
  *a->target += a->add;
}

/* ---- devices ------------------------------------------------------------------- */

static void test_devices(void **state) {
  (void)state;
  int n = 0, v = 0, can = -1;
  CU(cudaGetDeviceCount(&n));
  assert_int_equal(n, 2);
  CU(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 1));
  assert_int_equal(v, 132);
  CU(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
  assert_int_equal(v, 9);
  assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
  assert_int_equal(cudaGetLastError(), cudaSuccess); /* read clears it */
  char bus[32];
  CU(cudaDeviceGetPCIBusId(bus, sizeof(bus), 1));
  assert_string_equal(bus, "0000:02:00.0");
  int d = -1;
  CU(cudaDeviceGetByPCIBusId(&d, "0000:02:00.0"));
  assert_int_equal(d, 1);
  CU(cudaDeviceGetByPCIBusId(&d, "01:00.0"));
  assert_int_equal(d, 0);
  assert_int_equal(cudaDeviceGetByPCIBusId(&d, "0000:07:00.0"), cudaErrorInvalidDevice);
  CU(cudaDeviceCanAccessPeer(&can, 0, 1));
  assert_int_equal(can, 1);
  CU(cudaDeviceCanAccessPeer(&can, 1, 1));
  assert_int_equal(can, 0);
  CU(cudaSetDevice(0));
  CU(cudaDeviceEnablePeerAccess(1, 0));
  assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  assert_int_equal(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  void *fn = (void *)&d;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
  assert_int_not_equal(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, 0, &q),
                       cudaSuccess);
  assert_int_equal(q, cudaDriverEntryPointSymbolNotFound);
  assert_null(fn);
  (void)cudaGetLastError();
}

/* ---- multicast objects (driver entry points) ------------------------------------- */

/* A driver entry point by name; the test fails when it is missing. */
static void *drv_fn(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  CU(cudaGetDriverEntryPointByVersion(name, &fn, 12010, 0, &q));
  assert_int_equal(q, cudaDriverEntryPointSuccess);
  assert_non_null(fn);
  return fn;
}

typedef struct {
  CUresult (*add)(CUmemGenericAllocationHandle, CUdevice);
  CUmemGenericAllocationHandle mc;
  int device;
  CUresult res;
} mc_adder_t;

static void *mc_add_later(void *p) {
  mc_adder_t *a = p;
  struct timespec nap = {0, 50 * 1000000};
  nanosleep(&nap, NULL);
  a->res = a->add(a->mc, a->device);
  return NULL;
}

/* Two devices' memory joined by one multicast object: the attribute and its
 * knob, granularity, create/add/bind (which waits for the last add),
 * export/import, a multicast mapping whose every address resolves to both
 * members' copies in device order, unbind and unmap taking that away, the
 * calls CUDA refuses, and BRAID_CUDASIM_MC_FAIL failing each step. */
static void test_multicast(void **state) {
  (void)state;
  CUresult (*get_attr)(int *, CUdevice_attribute, CUdevice) = drv_fn("cuDeviceGetAttribute");
  CUresult (*gran)(size_t *, const CUmulticastObjectProp *, CUmulticastGranularity_flags) =
      drv_fn("cuMulticastGetGranularity");
  CUresult (*create)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *) =
      drv_fn("cuMulticastCreate");
  CUresult (*add)(CUmemGenericAllocationHandle, CUdevice) = drv_fn("cuMulticastAddDevice");
  CUresult (*bind)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                   unsigned long long) = drv_fn("cuMulticastBindAddr");
  CUresult (*bind_mem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                       size_t, size_t, unsigned long long) = drv_fn("cuMulticastBindMem");
  CUresult (*unbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t) =
      drv_fn("cuMulticastUnbind");
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
      drv_fn("cuMemAddressReserve");
  CUresult (*addr_free)(CUdeviceptr, size_t) = drv_fn("cuMemAddressFree");
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = drv_fn("cuMemMap");
  CUresult (*unmap)(CUdeviceptr, size_t) = drv_fn("cuMemUnmap");
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) =
      drv_fn("cuMemSetAccess");
  CUresult (*release)(CUmemGenericAllocationHandle) = drv_fn("cuMemRelease");
  CUresult (*export_h)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                       unsigned long long) = drv_fn("cuMemExportToShareableHandle");
  CUresult (*import_h)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType) =
      drv_fn("cuMemImportFromShareableHandle");

  int v = -1;
  assert_int_equal(get_attr(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 1), CUDA_SUCCESS);
  assert_int_equal(v, 1);
  assert_int_equal(get_attr(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  assert_int_equal(v, 9);
  assert_int_equal(get_attr(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 2),
                   CUDA_ERROR_INVALID_DEVICE);

  const size_t size = 3 * 4096;
  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = 2;
  prop.size = size;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  assert_int_equal(gran(&g, &prop, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  assert_int_equal(g, 4096);
  assert_int_equal(gran(&g, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  assert_true(g >= 4096 && g % 4096 == 0);

  CUmemGenericAllocationHandle mc = 0, mc2 = 0;
  setenv("BRAID_CUDASIM_MULTICAST", "0", 1);
  assert_int_equal(get_attr(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0), CUDA_SUCCESS);
  assert_int_equal(v, 0);
  assert_int_equal(create(&mc, &prop), CUDA_ERROR_NOT_SUPPORTED);
  unsetenv("BRAID_CUDASIM_MULTICAST");
  prop.numDevices = 3; /* more than the simulator has */
  assert_int_equal(create(&mc, &prop), CUDA_ERROR_INVALID_VALUE);
  prop.numDevices = 2;
  assert_int_equal(create(&mc, &prop), CUDA_SUCCESS);

  /* Export and import in this process name the same object. */
  int fd = -1;
  assert_int_equal(export_h(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  assert_true(fd >= 0);
  assert_int_equal(import_h(&mc2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_SUCCESS);
  close(fd);
  assert_true(mc2 == mc);

  char *uc[2];
  for (int d = 0; d < 2; d++) {
    CU(cudaSetDevice(d));
    CU(cudaMalloc((void **)&uc[d], size));
  }
  CU(cudaSetDevice(0));
  /* Binding device 0's memory waits until device 1 has joined too. */
  assert_int_equal(add(mc, 0), CUDA_SUCCESS);
  assert_int_equal(add(mc, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[1], size, 0), CUDA_ERROR_INVALID_DEVICE);
  mc_adder_t later = {add, mc, 1, CUDA_ERROR_UNKNOWN};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, mc_add_later, &later), 0);
  double t0 = now_s();
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[0], size, 0), CUDA_SUCCESS);
  assert_true(now_s() - t0 >= 0.04);
  pthread_join(th, NULL);
  assert_int_equal(later.res, CUDA_SUCCESS);
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[1] + 1, 4096, 0),
                   CUDA_ERROR_INVALID_VALUE); /* misaligned */
  assert_int_equal(bind(mc, 4096, (CUdeviceptr)(uintptr_t)uc[1], size, 0),
                   CUDA_ERROR_INVALID_VALUE); /* past the object's size */
  assert_int_equal(bind_mem(mc, 0, 1234, 0, size, 0), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[1], size, 0), CUDA_SUCCESS);

  CUdeviceptr va = 0;
  assert_int_equal(reserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
  assert_int_equal(map(va, size, 4096, mc, 0), CUDA_ERROR_INVALID_VALUE); /* offset 0 only */
  assert_int_equal(map(va, size, 0, 77, 0), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(map(va, size, 0, mc, 0), CUDA_SUCCESS);
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof(acc));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  assert_int_equal(set_access(va, size, &acc, 1), CUDA_SUCCESS);

  /* Every address of the mapping is both members' copies, in device
   * order; the mapping is not memory a kernel may touch directly. */
  char *mcp = (char *)(uintptr_t)va;
  brd_cudasim_mc_t r;
  assert_int_equal(brd_cudasim_mc_find(mcp + 4100, 16, &r), 1);
  assert_int_equal(r.n, 2);
  assert_true(mcp + 4100 >= r.base && mcp + 4116 <= r.base + r.size);
  assert_ptr_equal(r.uc[0] + (mcp + 4100 - r.base), uc[0] + 4100);
  assert_ptr_equal(r.uc[1] + (mcp + 4100 - r.base), uc[1] + 4100);
  assert_int_equal(brd_cudasim_mc_find(mcp + size - 8, 16, &r), 0); /* runs past it */
  assert_int_equal(brd_cudasim_mc_find(uc[0], 16, &r), 0);
  assert_int_equal(brd_cudasim_accessible(mcp, 16), 0);

  /* The mapping keeps the object; unbinding a member takes the range. */
  assert_int_equal(addr_free(va, size), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  assert_int_equal(unbind(mc, 1, 0, size), CUDA_SUCCESS);
  assert_int_equal(unbind(mc, 1, 0, size), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(brd_cudasim_mc_find(mcp, 16, &r), 0);
  assert_int_equal(unbind(mc, 0, 0, size), CUDA_SUCCESS);
  assert_int_equal(release(mc), CUDA_SUCCESS);
  assert_int_equal(release(mc2), CUDA_SUCCESS);
  assert_int_equal(unmap(va, size), CUDA_SUCCESS); /* the last reference */
  assert_int_equal(release(mc), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(addr_free(va, size), CUDA_SUCCESS);

  /* Fault injection: each step fails where BRAID_CUDASIM_MC_FAIL says. */
  setenv("BRAID_CUDASIM_MC_FAIL", "create", 1);
  assert_int_equal(create(&mc, &prop), CUDA_ERROR_NOT_SUPPORTED);
  setenv("BRAID_CUDASIM_MC_FAIL", "add:1,bind:0", 1);
  assert_int_equal(create(&mc, &prop), CUDA_SUCCESS);
  assert_int_equal(add(mc, 0), CUDA_SUCCESS);
  assert_int_equal(add(mc, 1), CUDA_ERROR_ILLEGAL_STATE);
  setenv("BRAID_CUDASIM_MC_FAIL", "bind:0", 1);
  assert_int_equal(add(mc, 1), CUDA_SUCCESS);
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[0], size, 0),
                   CUDA_ERROR_SYSTEM_NOT_READY);
  assert_int_equal(bind(mc, 0, (CUdeviceptr)(uintptr_t)uc[1], size, 0), CUDA_SUCCESS);
  unsetenv("BRAID_CUDASIM_MC_FAIL");
  assert_int_equal(unbind(mc, 1, 0, size), CUDA_SUCCESS);
  assert_int_equal(release(mc), CUDA_SUCCESS);
  for (int d = 0; d < 2; d++) CU(cudaFree(uc[d]));
  (void)cudaGetLastError();
}

/* cuMem allocations on request (BRAID_CUDASIM_CUMEM=1): cuMemCreate on two
 * devices, mapped into a reserved range as device memory, exported and
 * imported (the import maps the same bytes elsewhere), bound to a
 * multicast object by handle, whose mapping resolves to those bytes. */
static void test_cumem(void **state) {
  (void)state;
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  assert_int_not_equal(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, 0, &q),
                       cudaSuccess);
  (void)cudaGetLastError();
  setenv("BRAID_CUDASIM_CUMEM", "1", 1);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) =
      drv_fn("cuMemGetAllocationGranularity");
  CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                         unsigned long long) = drv_fn("cuMemCreate");
  unsetenv("BRAID_CUDASIM_CUMEM");
  CUresult (*mc_create)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *) =
      drv_fn("cuMulticastCreate");
  CUresult (*add)(CUmemGenericAllocationHandle, CUdevice) = drv_fn("cuMulticastAddDevice");
  CUresult (*bind_mem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                       size_t, size_t, unsigned long long) = drv_fn("cuMulticastBindMem");
  CUresult (*unbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t) =
      drv_fn("cuMulticastUnbind");
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
      drv_fn("cuMemAddressReserve");
  CUresult (*addr_free)(CUdeviceptr, size_t) = drv_fn("cuMemAddressFree");
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = drv_fn("cuMemMap");
  CUresult (*unmap)(CUdeviceptr, size_t) = drv_fn("cuMemUnmap");
  CUresult (*release)(CUmemGenericAllocationHandle) = drv_fn("cuMemRelease");
  CUresult (*export_h)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                       unsigned long long) = drv_fn("cuMemExportToShareableHandle");
  CUresult (*import_h)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType) =
      drv_fn("cuMemImportFromShareableHandle");

  const size_t size = 8192;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  assert_int_equal(gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  assert_int_equal(size % g, 0);
  CUmemGenericAllocationHandle ph[2], imp;
  for (int d = 0; d < 2; d++) {
    prop.location.id = d;
    assert_int_equal(mem_create(&ph[d], size, &prop, 0), CUDA_SUCCESS);
  }
  CUdeviceptr va, va2;
  assert_int_equal(reserve(&va, 2 * size, 0, 0, 0), CUDA_SUCCESS);
  for (int d = 0; d < 2; d++) assert_int_equal(map(va + d * size, size, 0, ph[d], 0), CUDA_SUCCESS);
  assert_int_equal(map(va, size, 0, ph[1], 0), CUDA_ERROR_INVALID_VALUE); /* taken */
  char *p = (char *)(uintptr_t)va;
  struct cudaPointerAttributes at;
  CU(cudaPointerGetAttributes(&at, p + size + 5));
  assert_int_equal(at.type, cudaMemoryTypeDevice);
  assert_int_equal(at.device, 1);
  unsigned char pat[2 * 8192];
  for (size_t i = 0; i < sizeof(pat); i++) pat[i] = (unsigned char)(i * 7 + 3);
  for (int d = 0; d < 2; d++)
    CU(cudaMemcpy(p + d * size, pat + d * size, size, cudaMemcpyHostToDevice));

  /* The import is the same memory. */
  int fd = -1;
  assert_int_equal(export_h(&fd, ph[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  assert_int_equal(import_h(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_SUCCESS);
  close(fd);
  assert_int_equal(reserve(&va2, size, 0, 0, 0), CUDA_SUCCESS);
  assert_int_equal(map(va2, size, 0, imp, 0), CUDA_SUCCESS);
  unsigned char back[8192];
  CU(cudaMemcpy(back, (void *)(uintptr_t)va2, size, cudaMemcpyDeviceToHost));
  assert_memory_equal(back, pat + size, size);

  /* Bound by handle, the multicast mapping reaches both allocations. */
  CUmulticastObjectProp mp;
  memset(&mp, 0, sizeof(mp));
  mp.numDevices = 2;
  mp.size = size;
  mp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle mc;
  CUdeviceptr mva;
  assert_int_equal(mc_create(&mc, &mp), CUDA_SUCCESS);
  for (int d = 0; d < 2; d++) assert_int_equal(add(mc, d), CUDA_SUCCESS);
  assert_int_equal(bind_mem(mc, 0, imp, 0, size, 0), CUDA_ERROR_INVALID_DEVICE);
  for (int d = 0; d < 2; d++) assert_int_equal(bind_mem(mc, 0, ph[d], 0, size, 0), CUDA_SUCCESS);
  assert_int_equal(reserve(&mva, size, 0, 0, 0), CUDA_SUCCESS);
  assert_int_equal(map(mva, size, 0, mc, 0), CUDA_SUCCESS);
  brd_cudasim_mc_t r;
  assert_int_equal(brd_cudasim_mc_find((char *)(uintptr_t)mva + 64, 16, &r), 1);
  assert_int_equal(r.n, 2);
  for (int d = 0; d < 2; d++) {
    assert_memory_equal(r.uc[d] + ((char *)(uintptr_t)mva + 64 - r.base), pat + d * size + 64, 16);
    assert_true(brd_cudasim_accessible(r.uc[d], 16));
  }

  assert_int_equal(unmap(mva, size), CUDA_SUCCESS);
  assert_int_equal(addr_free(mva, size), CUDA_SUCCESS);
  for (int d = 0; d < 2; d++) assert_int_equal(unbind(mc, d, 0, size), CUDA_SUCCESS);
  assert_int_equal(release(mc), CUDA_SUCCESS);
  assert_int_equal(unmap(va2, size), CUDA_SUCCESS);
  assert_int_equal(addr_free(va2, size), CUDA_SUCCESS);
  assert_int_equal(release(imp), CUDA_SUCCESS);
  assert_int_equal(addr_free(va, 2 * size), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  for (int d = 0; d < 2; d++) {
    assert_int_equal(unmap(va + d * size, size), CUDA_SUCCESS);
    assert_int_equal(release(ph[d]), CUDA_SUCCESS);
    assert_int_equal(release(ph[d]), CUDA_ERROR_INVALID_HANDLE);
  }
  assert_int_equal(brd_cudasim_accessible(p, 1), 0);
  assert_int_equal(addr_free(va, 2 * size), CUDA_SUCCESS);
  (void)cudaGetLastError();
}

/* ---- memory ------------------------------------------------------------------- */

static void test_memory(void **state) {
  (void)state;
  char *d = NULL, *h = NULL;
  CU(cudaMalloc((void **)&d, 1000));
  struct cudaPointerAttributes at;
  CU(cudaPointerGetAttributes(&at, d + 999));
  assert_int_equal(at.type, cudaMemoryTypeDevice);
  assert_int_equal(at.device, 0);
  CU(cudaMallocHost((void **)&h, 1000));
  CU(cudaPointerGetAttributes(&at, h));
  assert_int_equal(at.type, cudaMemoryTypeHost);
  char stack[16];
  CU(cudaPointerGetAttributes(&at, stack));
  assert_int_equal(at.type, cudaMemoryTypeUnregistered);

  /* Frees: not the base, host memory, twice. */
  assert_int_equal(cudaFree(d + 1), cudaErrorInvalidValue);
  assert_int_equal(cudaFree(h), cudaErrorInvalidValue);
  assert_int_equal(cudaFreeHost(d), cudaErrorInvalidValue);
  /* A device-side pointer of a copy must be device memory. */
  assert_int_equal(cudaMemcpy(stack, stack + 8, 8, cudaMemcpyDeviceToHost),
                   cudaErrorInvalidValue);
  assert_int_equal(cudaMemset(stack, 0, 8), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  for (int i = 0; i < 1000; i++) h[i] = (char)(i * 7 + 3);
  CU(cudaMemcpy(d, h, 1000, cudaMemcpyHostToDevice));
  CU(cudaMemset(d + 10, 0x5a, 20));
  char back[1000];
  CU(cudaMemcpy(back, d, 1000, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 1000; i++)
    assert_int_equal(back[i], i >= 10 && i < 30 ? 0x5a : (char)(i * 7 + 3));
  /* 2D: 3 rows of 5 bytes from a pitch of 7 to a pitch of 16, the device
   * buffer ending right after the last row. */
  char src2d[21], *d2;
  for (int i = 0; i < 21; i++) src2d[i] = (char)(i + 1);
  CU(cudaMalloc((void **)&d2, 2 * 16 + 5));
  CU(cudaMemset(d2, 0, 2 * 16 + 5));
  CU(cudaMemcpy2DAsync(d2, 16, src2d, 7, 5, 3, cudaMemcpyHostToDevice, 0));
  char back2d[37];
  CU(cudaMemcpy(back2d, d2, sizeof(back2d), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 37; i++)
    assert_int_equal(back2d[i], i % 16 < 5 ? (char)((i / 16) * 7 + i % 16 + 1) : 0);
  assert_int_equal(cudaMemcpy2DAsync(d2, 4, src2d, 7, 5, 3, cudaMemcpyHostToDevice, 0),
                   cudaErrorInvalidPitchValue);
  (void)cudaGetLastError();
  CU(cudaFree(d2));
  CU(cudaFree(d));
  assert_int_equal(cudaFree(d), cudaErrorInvalidValue);
  CU(cudaFreeHost(h));
  CU(cudaFree(NULL));
  (void)cudaGetLastError();

  /* Registered memory is device-accessible, at the same address. */
  static char page[8192] __attribute__((aligned(4096)));
  void *dp = NULL;
  assert_int_equal(cudaHostGetDevicePointer(&dp, page, 0), cudaErrorInvalidValue);
  CU(cudaHostRegister(page, sizeof(page), cudaHostRegisterMapped));
  assert_int_equal(cudaHostRegister(page + 4096, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
  CU(cudaHostGetDevicePointer(&dp, page + 5, 0));
  assert_ptr_equal(dp, page + 5);
  CU(cudaHostUnregister(page));
  assert_int_equal(cudaHostUnregister(page), cudaErrorHostMemoryNotRegistered);
  (void)cudaGetLastError();
}

/* ---- streams and events -------------------------------------------------------- */

static void test_stream_order(void **state) {
  (void)state;
  log_reset();
  cudaStream_t a, b;
  CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  /* The first op of a is slow; the later ones must still come after it. */
  log_arg_t ops[5] = {{0, 50}, {1, 0}, {2, 20}, {3, 0}, {4, 0}};
  for (int i = 0; i < 5; i++) CU(cudaLaunchHostFunc(a, log_op, &ops[i]));
  /* b is independent: its op finishes while a's first is still asleep. */
  log_arg_t other = {100, 0};
  CU(cudaLaunchHostFunc(b, log_op, &other));
  CU(cudaStreamSynchronize(a));
  CU(cudaStreamSynchronize(b));
  assert_int_equal(atomic_load(&log_len), 6);
  assert_int_equal(log_buf[0], 100);
  for (int i = 0; i < 5; i++) assert_int_equal(log_buf[i + 1], i);

  /* Copies and memsets interleave with host functions in order. */
  int64_t *d;
  CU(cudaMalloc((void **)&d, sizeof(*d)));
  int64_t one = 1, got = 0;
  CU(cudaMemsetAsync(d, 0, sizeof(*d), a));
  add_kernel_t k = {d, 5};
  CU(brd_cudasim_launch(a, add_kernel, &k, sizeof(k)));
  k.add = 1000; /* by value: the queued launch keeps 5 */
  CU(cudaMemcpyAsync(&got, d, sizeof(got), cudaMemcpyDeviceToHost, a));
  CU(brd_cudasim_launch(a, add_kernel, &(add_kernel_t){d, one}, sizeof(add_kernel_t)));
  CU(cudaStreamSynchronize(a));
  assert_int_equal(got, 5);
  CU(cudaMemcpy(&got, d, sizeof(got), cudaMemcpyDeviceToHost));
  assert_int_equal(got, 6);
  CU(cudaFree(d));
  CU(cudaStreamDestroy(a));
  CU(cudaStreamDestroy(b));
}

static void test_events(void **state) {
  (void)state;
  log_reset();
  cudaStream_t a, b;
  cudaEvent_t e0, e1, quiet;
  CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  CU(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming));
  /* Never recorded: complete. */
  CU(cudaEventQuery(e1));

  CU(cudaEventRecord(e0, a));
  CU(cudaLaunchHostFunc(a, gate_wait, NULL));
  log_arg_t first = {1, 30};
  CU(cudaLaunchHostFunc(a, log_op, &first));
  CU(cudaEventRecord(e1, a));
  CU(cudaEventRecord(quiet, a));
  /* b's op may only run after a's, through the event. */
  CU(cudaStreamWaitEvent(b, e1, 0));
  log_arg_t second = {2, 0};
  CU(cudaLaunchHostFunc(b, log_op, &second));
  sleep_ms(50);
  assert_int_equal(cudaEventQuery(e1), cudaErrorNotReady);
  assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady);
  assert_int_equal(cudaGetLastError(), cudaSuccess); /* NotReady is not an error */
  assert_int_equal(atomic_load(&log_len), 0);
  /* Re-recording e1 later does not change what b already waits for. */
  atomic_store(&gate_open, 1);
  CU(cudaEventSynchronize(e1));
  CU(cudaStreamSynchronize(b));
  assert_int_equal(atomic_load(&log_len), 2);
  assert_int_equal(log_buf[0], 1);
  assert_int_equal(log_buf[1], 2);
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, e0, e1));
  assert_true(ms >= 25.0f && ms < 10000.0f); /* includes the 30 ms op */
  assert_int_equal(cudaEventElapsedTime(&ms, e0, quiet), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();

  /* The legacy stream waits for blocking streams and they wait for it;
   * non-blocking streams do not. */
  log_reset();
  cudaStream_t blk;
  CU(cudaStreamCreate(&blk));
  CU(cudaLaunchHostFunc(a, gate_wait, NULL));     /* a: non-blocking, stuck */
  log_arg_t l1 = {1, 30}, l2 = {2, 0}, l3 = {3, 0};
  CU(cudaLaunchHostFunc(blk, log_op, &l1));
  CU(cudaLaunchHostFunc(0, log_op, &l2));        /* after blk's op */
  CU(cudaLaunchHostFunc(blk, log_op, &l3));      /* after the legacy op */
  CU(cudaStreamSynchronize(blk));                /* not waiting for a */
  assert_int_equal(atomic_load(&log_len), 3);
  for (int i = 0; i < 3; i++) assert_int_equal(log_buf[i], i + 1);
  atomic_store(&gate_open, 1);
  CU(cudaDeviceSynchronize());

  CU(cudaEventDestroy(e0));
  CU(cudaEventDestroy(e1));
  CU(cudaEventDestroy(quiet));
  CU(cudaStreamDestroy(a));
  CU(cudaStreamDestroy(b));
  CU(cudaStreamDestroy(blk));
}

/* A wait that can never end returns an error at the deadline. */
static void test_sync_deadline(void **state) {
  (void)state;
  log_reset();
  cudaStream_t a;
  CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CU(cudaLaunchHostFunc(a, gate_wait, NULL));
  double t0 = now_s();
  assert_int_equal(cudaStreamSynchronize(a), cudaErrorLaunchTimeout);
  double took = now_s() - t0;
  assert_true(took >= 1.9 && took < 10.0);
  (void)cudaGetLastError();
  atomic_store(&gate_open, 1);
  CU(cudaStreamSynchronize(a));
  CU(cudaStreamDestroy(a));
}

/* ---- CUDA IPC across fork -------------------------------------------------------- */

#define IPC_WORDS 300007u /* odd, more than a MiB */

static uint32_t pattern(uint32_t i) { return i * 2654435761u ^ 0x5bd1e995u; }

static void test_ipc_fork(void **state) {
  (void)state;
  uint32_t *d, *h = malloc(IPC_WORDS * 4);
  assert_non_null(h);
  CU(cudaMalloc((void **)&d, IPC_WORDS * 4));
  for (uint32_t i = 0; i < IPC_WORDS; i++) h[i] = pattern(i);
  CU(cudaMemcpy(d, h, IPC_WORDS * 4, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t handle;
  CU(cudaIpcGetMemHandle(&handle, d + 100)); /* names the whole allocation */
  void *self = NULL;
  assert_int_not_equal(cudaIpcOpenMemHandle(&self, handle, cudaIpcMemLazyEnablePeerAccess),
                       cudaSuccess);
  (void)cudaGetLastError();

  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    uint32_t *p = NULL;
    if (cudaIpcOpenMemHandle((void **)&p, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
      _exit(10);
    if (p == d) _exit(11); /* a new mapping, not the parent's address */
    uint32_t *c = malloc(IPC_WORDS * 4);
    if (c == NULL || cudaMemcpy(c, p, IPC_WORDS * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
      _exit(12);
    for (uint32_t i = 0; i < IPC_WORDS; i++)
      if (c[i] != pattern(i)) _exit(13);
    for (uint32_t i = 0; i < IPC_WORDS; i++) c[i] = ~c[i];
    if (cudaMemcpy(p, c, IPC_WORDS * 4, cudaMemcpyHostToDevice) != cudaSuccess) _exit(14);
    if (cudaIpcCloseMemHandle(p) != cudaSuccess) _exit(15);
    if (cudaIpcCloseMemHandle(p) == cudaSuccess) _exit(16);
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  CU(cudaMemcpy(h, d, IPC_WORDS * 4, cudaMemcpyDeviceToHost));
  for (uint32_t i = 0; i < IPC_WORDS; i++) assert_int_equal(h[i], ~pattern(i));

  /* Freed memory: the handle no longer opens. */
  CU(cudaFree(d));
  child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    void *p = NULL;
    _exit(cudaIpcOpenMemHandle(&p, handle, 0) == cudaSuccess ? 1 : 0);
  }
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  free(h);
}

/* ---- graph capture ------------------------------------------------------------------ */

/* Capture on s (fork to t and join back): memset, kernel, copy, host
 * function on s; a kernel on t. Nothing runs while capturing; each replay
 * adds 3 on s's side and 40 on t's, and copies the running total out. */
static void test_graph_replays(void **state) {
  (void)state;
  log_reset();
  cudaStream_t s, t;
  cudaEvent_t fork_ev, join_ev;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  CU(cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming));
  int64_t *d, *snap;
  CU(cudaMalloc((void **)&d, 2 * sizeof(int64_t)));
  CU(cudaMallocHost((void **)&snap, sizeof(int64_t)));
  CU(cudaMemset(d, 0, 2 * sizeof(int64_t)));
  CU(cudaDeviceSynchronize());
  *snap = -1;

  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enum cudaStreamCaptureStatus cs;
  CU(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusActive);
  add_kernel_t k = {d, 3};
  CU(brd_cudasim_launch(s, add_kernel, &k, sizeof(k)));
  k.add = 1000000; /* the captured node keeps 3 */
  CU(cudaEventRecord(fork_ev, s));
  CU(cudaStreamWaitEvent(t, fork_ev, 0)); /* t joins the capture */
  CU(cudaStreamIsCapturing(t, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusActive);
  add_kernel_t kt = {d + 1, 40};
  CU(brd_cudasim_launch(t, add_kernel, &kt, sizeof(kt)));
  CU(cudaEventRecord(join_ev, t));
  CU(cudaStreamWaitEvent(s, join_ev, 0));
  CU(brd_cudasim_launch(s, add_kernel, &(add_kernel_t){d, 0}, sizeof(add_kernel_t)));
  CU(cudaMemcpyAsync(snap, d + 1, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
  log_arg_t mark = {7, 0};
  CU(cudaLaunchHostFunc(s, log_op, &mark));
  cudaGraph_t g;
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaStreamIsCapturing(t, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusNone);
  sleep_ms(20);
  int64_t got[2];
  CU(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
  assert_int_equal(got[0], 0); /* nothing ran while capturing */
  assert_int_equal(got[1], 0);
  assert_int_equal(atomic_load(&log_len), 0);

  cudaGraphExec_t ge;
  CU(cudaGraphInstantiate(&ge, g, 0));
  for (int r = 1; r <= 3; r++) {
    CU(cudaGraphLaunch(ge, s));
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    assert_int_equal(got[0], 3 * r);
    assert_int_equal(got[1], 40 * r);
    assert_int_equal(*snap, 40 * r); /* the copy ran after t's kernel joined */
    assert_int_equal(atomic_load(&log_len), r);
  }
  /* Replays queued back to back, graph destroyed while they run. */
  for (int r = 0; r < 3; r++) CU(cudaGraphLaunch(ge, s));
  CU(cudaGraphExecDestroy(ge));
  CU(cudaGraphDestroy(g));
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
  assert_int_equal(got[0], 18);
  assert_int_equal(got[1], 240);
  CU(cudaFree(d));
  CU(cudaFreeHost(snap));
  CU(cudaEventDestroy(fork_ev));
  CU(cudaEventDestroy(join_ev));
  CU(cudaStreamDestroy(s));
  CU(cudaStreamDestroy(t));
}

/* Ends a capture that must have been invalidated. */
static void expect_invalidated(cudaStream_t s) {
  enum cudaStreamCaptureStatus cs;
  CU(cudaStreamIsCapturing(s, &cs));
  assert_int_equal(cs, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = (cudaGraph_t)(uintptr_t)1;
  assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  assert_null(g);
  (void)cudaGetLastError();
}

typedef struct {
  cudaStream_t s;
  cudaError_t malloc_res, end_res;
} other_thread_t;

static void *other_malloc(void *p) {
  other_thread_t *o = p;
  void *m = NULL;
  o->malloc_res = cudaMalloc(&m, 64);
  if (m != NULL) cudaFree(m);
  cudaGraph_t g;
  o->end_res = o->s != NULL ? cudaStreamEndCapture(o->s, &g) : cudaSuccess;
  return NULL;
}

static void test_capture_errors(void **state) {
  (void)state;
  cudaStream_t s, t, blk;
  cudaEvent_t ev;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  CU(cudaStreamCreate(&blk));
  CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  void *m = NULL;

  /* Synchronising the capturing stream. */
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  assert_int_equal(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s);

  /* cudaMalloc while capturing in global mode; allowed when relaxed. */
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CU(cudaThreadExchangeStreamCaptureMode(&mode));
  assert_int_equal(mode, cudaStreamCaptureModeGlobal);
  CU(cudaMalloc(&m, 64));
  CU(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaGraph_t g;
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphDestroy(g));
  CU(cudaFree(m));
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  assert_int_equal(cudaMalloc(&m, 64), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s);

  /* Another thread: refused against a global capture, not a thread-local
   * one; ending a global capture from another thread is refused. */
  other_thread_t o = {s, cudaSuccess, cudaSuccess};
  pthread_t th;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  assert_int_equal(pthread_create(&th, NULL, other_malloc, &o), 0);
  pthread_join(th, NULL);
  assert_int_equal(o.malloc_res, cudaErrorStreamCaptureUnsupported);
  assert_int_equal(o.end_res, cudaErrorStreamCaptureWrongThread);
  expect_invalidated(s);
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  o.s = NULL;
  assert_int_equal(pthread_create(&th, NULL, other_malloc, &o), 0);
  pthread_join(th, NULL);
  assert_int_equal(o.malloc_res, cudaSuccess);
  CU(cudaStreamEndCapture(s, &g));
  CU(cudaGraphDestroy(g));

  /* Waiting on work recorded outside the capture. */
  CU(cudaEventRecord(ev, t));
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  assert_int_equal(cudaStreamWaitEvent(s, ev, 0), cudaErrorStreamCaptureIsolation);
  expect_invalidated(s);

  /* A forked stream that never rejoins. */
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU(cudaEventRecord(ev, s));
  CU(cudaStreamWaitEvent(t, ev, 0));
  CU(cudaLaunchHostFunc(t, gate_wait, NULL));
  /* An event last recorded in a capture cannot be queried. */
  assert_int_equal(cudaEventQuery(ev), cudaErrorCapturedEvent);
  (void)cudaGetLastError();
  g = (cudaGraph_t)(uintptr_t)1;
  assert_int_not_equal(cudaStreamEndCapture(s, &g), cudaSuccess);
  assert_null(g);
  (void)cudaGetLastError();
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CU(cudaEventRecord(ev, s));
  CU(cudaStreamWaitEvent(t, ev, 0));
  CU(cudaLaunchHostFunc(t, gate_wait, NULL));
  assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  (void)cudaGetLastError();

  /* The legacy stream while a blocking stream captures. */
  CU(cudaStreamBeginCapture(blk, cudaStreamCaptureModeRelaxed));
  int64_t x = 0, *d;
  mode = cudaStreamCaptureModeRelaxed;
  CU(cudaThreadExchangeStreamCaptureMode(&mode));
  CU(cudaMalloc((void **)&d, 8));
  assert_int_equal(cudaMemcpy(d, &x, 8, cudaMemcpyHostToDevice), cudaErrorStreamCaptureImplicit);
  CU(cudaThreadExchangeStreamCaptureMode(&mode));
  expect_invalidated(blk);
  CU(cudaMemcpy(d, &x, 8, cudaMemcpyHostToDevice)); /* fine again */
  CU(cudaFree(d));
  /* Nothing captured ran: t is idle. */
  CU(cudaStreamQuery(t));

  CU(cudaEventDestroy(ev));
  CU(cudaStreamDestroy(s));
  CU(cudaStreamDestroy(t));
  CU(cudaStreamDestroy(blk));
}

/* ---- the grid of CPU-compiled kernels ------------------------------------------- */

#define G_BLOCKS 3
#define G_LAUNCH 64 /* threads asked for; the simulator runs 32 (its default) */
#define G_RUN 32

typedef struct {
  int *out;            /* [G_BLOCKS][G_RUN][4] */
  _Atomic int *flag;   /* block G_BLOCKS - 1 raises it; block 0 waits */
  int tag;             /* a parameter, copied at launch */
} g_args_t;

/* Per block: grid.c runs a block's threads on one CPU thread. */
static _Thread_local int g_shared;

static void g_call(void *p) {
  const g_args_t *a = p;
  const uint3 t = *brd_cudasim_thread_idx(), b = *brd_cudasim_block_idx();
  const dim3 bd = *brd_cudasim_block_dim(), gd = *brd_cudasim_grid_dim();
  int *o = a->out + ((int)b.x * G_RUN + (int)t.x) * 4;
  if (t.x == 0) g_shared = 1000 * ((int)b.x + 1);
  /* Block 1: only thread 5 says yes. Block 2: thread 7 returns early. */
  if (b.x == 2 && t.x == 7) {
    o[0] = -1;
    return;
  }
  int any = brd_cudasim_syncthreads_or(b.x == 1 && t.x == 5);
  if (b.x == 0 && t.x == 0) {
    /* Block 0 waits for the last block: both must be running at once. */
    double end = now_s() + 10;
    while (atomic_load(a->flag) == 0 && now_s() < end) sched_yield();
  }
  if (b.x == gd.x - 1 && t.x == 0) atomic_store(a->flag, 1);
  int none = brd_cudasim_syncthreads_or(0);
  o[0] = (int)(b.x * 100 + t.x) + a->tag;
  o[1] = any * 10 + none;
  o[2] = g_shared;
  o[3] = (int)(bd.x * 1000 + gd.x);
}

static void g_pack(void **params, void *buf) { memcpy(buf, params[0], sizeof(g_args_t)); }

static const brd_cudasim_kernel_t g_kernel = {BRD_CUDASIM_KERNEL_MAGIC, sizeof(g_args_t),
                                              g_pack, g_call};

static void test_grid(void **state) {
  (void)state;
  int *out = calloc(G_BLOCKS * G_RUN * 4, sizeof(int));
  _Atomic int flag = 0;
  assert_non_null(out);
  g_args_t a = {out, &flag, 7};
  void *params[1] = {&a};
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(cudaLaunchKernel(&g_kernel, (dim3){G_BLOCKS, 1, 1}, (dim3){G_LAUNCH, 1, 1}, params, 0, s));
  a.tag = 1000000; /* after the launch: the kernel keeps its copy */
  CU(cudaStreamSynchronize(s));
  assert_int_equal(atomic_load(&flag), 1);
  for (int b = 0; b < G_BLOCKS; b++) {
    for (int t = 0; t < G_RUN; t++) {
      const int *o = out + (b * G_RUN + t) * 4;
      if (b == 2 && t == 7) {
        assert_int_equal(o[0], -1);
        continue;
      }
      assert_int_equal(o[0], b * 100 + t + 7);
      assert_int_equal(o[1], b == 1 ? 10 : 0);
      assert_int_equal(o[2], 1000 * (b + 1));
      assert_int_equal(o[3], G_RUN * 1000 + G_BLOCKS);
    }
  }
  /* Not a CPU-compiled kernel: no device function. */
  assert_int_equal(cudaLaunchKernel((const void *)g_call, (dim3){1, 1, 1}, (dim3){1, 1, 1},
                                    params, 0, s),
                   cudaErrorInvalidDeviceFunction);
  (void)cudaGetLastError();
  CU(cudaStreamDestroy(s));
  free(out);
}

/* ---- lazy loading ---------------------------------------------------------- */

/* A "kernel" that spins until *flag is set (10 s at most). */
static void spin_fn(void *arg) {
  _Atomic int *flag = *(_Atomic int **)arg;
  double end = now_s() + 10;
  while (atomic_load(flag) == 0 && now_s() < end) sched_yield();
}

typedef struct {
  _Atomic int *flag;
  double after_s;
  const void *key; /* NULL: set the flag after after_s; else load key */
  double done_at;
} lazy_helper_t;

static void *lazy_helper(void *p) {
  lazy_helper_t *h = p;
  struct timespec ts = {0, (long)(h->after_s * 1e9)};
  nanosleep(&ts, NULL);
  if (h->key == NULL) atomic_store(h->flag, 1);
  else (void)brd_cudasim_load(h->key);
  h->done_at = now_s();
  return NULL;
}

/* Loads `key` on this thread while a spinning kernel holds the device and
 * a second thread sets *flag after 0.3 s: checks that the load returned
 * only once the kernel could end, and leaves the setter's record in
 * *rel. */
static void load_waits_for_kernel(_Atomic int *flag, const void *key, lazy_helper_t *rel) {
  *rel = (lazy_helper_t){flag, 0.3, NULL, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, lazy_helper, rel), 0);
  CU(brd_cudasim_load(key));
  assert_int_equal(atomic_load(flag), 1);
  assert_int_equal(pthread_join(th, NULL), 0);
}

/* CUDA's lazy loading as the simulator models it (runtime.c, load_locked):
 * a kernel already loaded launches while another kernel spins; the first
 * load of one waits for the device to idle and, meanwhile, holds every
 * other launch, the shape of the hang seen on an H200 with ranks that are
 * threads sharing the GPU. */
static void test_lazy_loading(void **state) {
  (void)state;
  static const char key_a, key_b, key_c;
  _Atomic int flag = 0;
  _Atomic int *fp = &flag;
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(brd_cudasim_load(&key_a)); /* the device is idle: loads at once */
  CU(brd_cudasim_launch(s, spin_fn, &fp, sizeof(fp)));
  /* Loaded: no wait while the kernel spins. */
  CU(brd_cudasim_load(&key_a));
  assert_int_equal(atomic_load(&flag), 0);
  /* Not loaded: waits for the spinning kernel to end. */
  lazy_helper_t rel;
  load_waits_for_kernel(&flag, &key_b, &rel);
  CU(cudaStreamSynchronize(s));
  /* Another thread's load holds even a loaded kernel's launch. */
  atomic_store(&flag, 0);
  CU(brd_cudasim_launch(s, spin_fn, &fp, sizeof(fp)));
  lazy_helper_t loader = {&flag, 0.0, &key_c, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, lazy_helper, &loader), 0);
  struct timespec ts = {0, 100000000};
  nanosleep(&ts, NULL); /* the loader is waiting for the device now */
  load_waits_for_kernel(&flag, &key_a, &rel);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_true(loader.done_at >= rel.done_at);
  CU(cudaStreamSynchronize(s));
  CU(cudaStreamDestroy(s));
}

/* ---- the executor faults on host memory ----------------------------------------- */

/* Runs a 1-rank all-reduce of 64 floats in a child whose output is either
 * host memory the device cannot reach (overrun 0) or a device allocation
 * `overrun` floats too short; the child exits 0 when the launch succeeds
 * and the stream, then the device, report cudaErrorIllegalAddress. */
static int fault_child(int overrun) {
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    brd_algos_args_t args = {1, NULL, 1, BRD_IR_PROTO_SIMPLE};
    brd_ir_plan_t *plan;
    brd_exec_cuda_plan_t *cp;
    brd_exec_cuda_status_t *st;
    if (brd_algos_oneshot_allreduce(&args, &plan) != ncclSuccess ||
        brd_exec_cuda_plan_create(plan, &cp) != ncclSuccess ||
        brd_exec_cuda_status_create(NULL, &st) != ncclSuccess)
      _exit(10);
    size_t sb = brd_plan_scratch_bytes(plan);
    float *in = NULL, *out = NULL;
    void *scratch = NULL;
    if (cudaMalloc((void **)&in, 64 * sizeof(float)) != cudaSuccess ||
        (sb > 0 && cudaMalloc(&scratch, sb) != cudaSuccess))
      _exit(11);
    if (overrun == 0)
      out = malloc(64 * sizeof(float)); /* not device memory */
    else if (cudaMalloc((void **)&out, (64 - (size_t)overrun) * sizeof(float)) != cudaSuccess)
      _exit(11);
    brd_exec_cuda_args_t a;
    memset(&a, 0, sizeof(a));
    a.plan = cp;
    a.input = in;
    a.output = out;
    a.scratch = scratch;
    a.scratch_bytes = sb;
    a.count = 64;
    a.dtype = ncclFloat32;
    a.redop = ncclSum;
    a.status = st;
    a.timeout_s = 5;
    if (brd_exec_cuda_launch(&a, cudaStreamPerThread) != ncclSuccess) _exit(12);
    if (cudaStreamSynchronize(cudaStreamPerThread) != cudaErrorIllegalAddress) _exit(13);
    /* Sticky: every later synchronisation says so too. */
    if (cudaDeviceSynchronize() != cudaErrorIllegalAddress) _exit(14);
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* A kernel touching memory the device cannot reach faults the device, as a
 * GPU does, where the CPU would carry on. */
static void test_kernel_fault(void **state) {
  (void)state;
  assert_int_equal(fault_child(0), 0);
  /* A 16-byte store whose last 8 bytes are past the end of a device
   * allocation: the simulator's mapping is a whole page, so only a check
   * of each access against the allocation's own end sees it. exec_sim.c checks where pointers start; exec.cu's
   * accesses are each checked (devemu.h). */
  if (strcmp(brd_cudasim_executor(), "exec.cu") != 0) {
    print_message("SKIP: %s checks only where each kernel pointer starts, not "
                  "every access\n", brd_cudasim_executor());
    skip();
  }
  assert_int_equal(fault_child(2), 0);
}

int main(void) {
  setenv("BRAID_CUDASIM_DEVICES", "2", 1);
  setenv("BRAID_CUDASIM_TIMEOUT", "2", 1);
  setenv("BRAID_CUDASIM_THREADS", "32", 1); /* test_grid: G_RUN */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_multicast),
      cmocka_unit_test(test_cumem),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_stream_order),
      cmocka_unit_test(test_events),
      cmocka_unit_test(test_sync_deadline),
      cmocka_unit_test(test_ipc_fork),
      cmocka_unit_test(test_graph_replays),
      cmocka_unit_test(test_capture_errors),
      cmocka_unit_test(test_grid),
      cmocka_unit_test(test_lazy_loading),
      cmocka_unit_test(test_kernel_fault),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
