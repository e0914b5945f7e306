/*
 * Which host calls wait for, or hold back work behind, a kernel that is
 * running on another stream of the same device?
 *
 * Ranks that share a GPU (threads of one process) run kernels that spin
 * until a peer's kernel arrives. A host call that makes later work wait for
 * the running kernels (CUDA's "implicit synchronization": the programming
 * guide lists device and page-locked host allocation, memset, the NULL
 * stream; a lazy kernel load does the same) then deadlocks until the
 * spinning kernel gives up. This probe measures each call on the machine:
 *   1. a kernel on stream A spins until a flag in device memory is set, or
 *      gives up after SPIN_MS (result 0);
 *   2. once it runs, the host makes the call under test (timed);
 *   3. a kernel on stream B sets the flag.
 * "concurrent": the spinning kernel saw the flag, so the call let stream
 * B's kernel run beside it. "SERIALIZED": the kernel on B ran only after
 * the spinner gave up; the call's time says whether the host itself waited
 * (about SPIN_MS) or only later work was held back.
 * Then whether streams share a hardware queue: a kernel on a stream made
 * k streams after the spinner's, k = 1..40 ("alias": that table only).
 *   sync_probe [spin_ms [alias]]   (about 1 s per serialized case; a GPU only)
 * Exit status 0 when every case ran (whatever it found), 1 on a CUDA error.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long spin_ns = 1000ull * 1000 * 1000;

__global__ void spin_kernel(volatile int *flag, volatile int *started, volatile int *result,
                            unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  *started = 1;
  __threadfence_system();
  for (;;) {
    if (*flag != 0) {
      *result = 1;
      break;
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > ns) {
      *result = 0;
      break;
    }
  }
  __threadfence_system();
}

__global__ void set_kernel(volatile int *flag) {
  *flag = 1;
  __threadfence_system();
}

/* Launched for the first time inside a case: a lazy load. */
__global__ void unloaded_kernel(int *p) {
  if (p != NULL) *p = 2;
}

#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "sync_probe: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), \
              __LINE__);                                                          \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static cudaStream_t sa, sb;
static int *flag;
static volatile int *started, *result;
static void *dev_old, *host_old, *pinned, *pageable, *dev_buf;
static PFN_cuMemCreate_v10020 p_create;
static PFN_cuMemAddressReserve_v10020 p_reserve;
static PFN_cuMemMap_v10020 p_map;
static PFN_cuMemSetAccess_v10020 p_access;
static PFN_cuMemUnmap_v10020 p_unmap;
static PFN_cuMemRelease_v10020 p_release;
static PFN_cuMemAddressFree_v10020 p_afree;

#define MIB (1024 * 1024)

static void op_none(void) {}
static void op_malloc_1m(void) { void *p; CK(cudaMalloc(&p, MIB)); dev_old = p; }
static void op_malloc_64m(void) { void *p; CK(cudaMalloc(&p, 64 * MIB)); CK(cudaFree(p)); }
static void op_free(void) { CK(cudaFree(dev_old)); dev_old = NULL; }
static void op_malloc_async(void) {
  void *p;
  CK(cudaMallocAsync(&p, MIB, sb));
  CK(cudaStreamSynchronize(sb));
  dev_old = p;
}
static void op_free_async(void) {
  CK(cudaFreeAsync(dev_old, sb));
  CK(cudaStreamSynchronize(sb));
  dev_old = NULL;
}
static void op_host_alloc(void) { CK(cudaHostAlloc(&host_old, MIB, cudaHostAllocMapped)); }
static void op_free_host(void) { CK(cudaFreeHost(host_old)); host_old = NULL; }
static void op_h2d_pinned(void) {
  CK(cudaMemcpyAsync(dev_buf, pinned, 64 * 1024, cudaMemcpyHostToDevice, sb));
  CK(cudaStreamSynchronize(sb));
}
static void op_h2d_pageable(void) {
  CK(cudaMemcpyAsync(dev_buf, pageable, 64 * 1024, cudaMemcpyHostToDevice, sb));
  CK(cudaStreamSynchronize(sb));
}
static void op_d2h_pinned(void) {
  CK(cudaMemcpyAsync(pinned, dev_buf, 64 * 1024, cudaMemcpyDeviceToHost, sb));
  CK(cudaStreamSynchronize(sb));
}
static void op_memset_async(void) {
  CK(cudaMemsetAsync(dev_buf, 0, 64 * 1024, sb));
  CK(cudaStreamSynchronize(sb));
}
static void op_memset_sync(void) { CK(cudaMemset(dev_buf, 0, 64 * 1024)); }
static void op_stream_create(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamDestroy(s));
}
static void op_event_create(void) {
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaEventDestroy(e));
}
static void op_ipc_handle(void) {
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, dev_buf));
}
static void op_host_register(void) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, 64 * 1024) != 0) return;
  CK(cudaHostRegister(p, 64 * 1024, cudaHostRegisterMapped | cudaHostRegisterPortable));
  CK(cudaHostUnregister(p));
  free(p);
}
static void op_memcpy_sync_h2d(void) {
  CK(cudaMemcpy(dev_buf, pageable, 64 * 1024, cudaMemcpyHostToDevice));
}
static void op_memcpy_sync_d2h(void) {
  CK(cudaMemcpy(pageable, dev_buf, 64 * 1024, cudaMemcpyDeviceToHost));
}
static void op_graph(void) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaMemsetAsync(dev_buf, 0, 4096, s));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
}
static void op_lazy_load(void) {
  cudaFuncAttributes a;
  CK(cudaFuncGetAttributes(&a, unloaded_kernel));
}
static void op_cumem(void) {
  if (p_create == NULL) return;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t size = 2 * MIB;
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  if (p_create(&h, size, &prop, 0) != CUDA_SUCCESS) return;
  if (p_reserve(&va, size, 0, 0, 0) == CUDA_SUCCESS) {
    if (p_map(va, size, 0, h, 0) == CUDA_SUCCESS) {
      CUmemAccessDesc ad;
      memset(&ad, 0, sizeof(ad));
      ad.location = prop.location;
      ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      (void)p_access(va, size, &ad, 1);
      (void)p_unmap(va, size);
    }
    (void)p_afree(va, size);
  }
  (void)p_release(h);
}

typedef struct {
  const char *name;
  void (*op)(void);
} probe_case_t;

static const probe_case_t cases[] = {
    {"nothing (control)", op_none},
    {"cudaMalloc 1 MiB", op_malloc_1m},
    {"cudaFree", op_free},
    {"cudaMalloc + cudaFree 64 MiB", op_malloc_64m},
    {"cudaMallocAsync 1 MiB (stream B) + sync B", op_malloc_async},
    {"cudaFreeAsync (stream B) + sync B", op_free_async},
    {"cudaHostAlloc 1 MiB (mapped)", op_host_alloc},
    {"cudaFreeHost", op_free_host},
    {"cudaMemcpyAsync H2D 64 KiB from pinned (B) + sync B", op_h2d_pinned},
    {"cudaMemcpyAsync H2D 64 KiB from pageable (B) + sync B", op_h2d_pageable},
    {"cudaMemcpyAsync D2H 64 KiB to pinned (B) + sync B", op_d2h_pinned},
    {"cudaMemsetAsync (B) + sync B", op_memset_async},
    {"cudaMemset (synchronous)", op_memset_sync},
    {"cudaStreamCreate + Destroy", op_stream_create},
    {"cudaEventCreate + Destroy", op_event_create},
    {"cudaIpcGetMemHandle", op_ipc_handle},
    {"cuMemCreate + Map + SetAccess + Unmap + Release 2 MiB", op_cumem},
    {"cudaHostRegister + cudaHostUnregister 64 KiB", op_host_register},
    {"cudaMemcpy H2D 64 KiB from pageable (legacy stream)", op_memcpy_sync_h2d},
    {"cudaMemcpy D2H 64 KiB to pageable (legacy stream)", op_memcpy_sync_d2h},
    {"graph of a memset: capture, instantiate, launch, sync, destroy", op_graph},
    {"cudaFuncGetAttributes of a kernel not loaded (lazy load)", op_lazy_load},
};

/* Hardware queues: streams share CUDA_DEVICE_MAX_CONNECTIONS queues, and
 * work in one queue runs in order. A fresh stream takes the spinner; k more
 * streams are created; the setter runs on the k-th. SERIALIZED at some k
 * means a stream created k after another can queue behind its kernel. */
static int alias_row(int k) {
  cudaStream_t s0, ss[64];
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  for (int i = 0; i < k; i++) CK(cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking));
  CK(cudaMemsetAsync(flag, 0, sizeof(int), s0));
  CK(cudaStreamSynchronize(s0));
  *started = 0;
  *result = -1;
  int *d_started, *d_result;
  CK(cudaHostGetDevicePointer((void **)&d_started, (void *)started, 0));
  CK(cudaHostGetDevicePointer((void **)&d_result, (void *)result, 0));
  spin_kernel<<<1, 1, 0, s0>>>(flag, d_started, d_result, spin_ns);
  double w0 = now_ms();
  while (*started == 0 && now_ms() - w0 < 5000.0) {
  }
  set_kernel<<<1, 1, 0, ss[k - 1]>>>(flag);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  int r = *result;
  for (int i = 0; i < k; i++) CK(cudaStreamDestroy(ss[i]));
  CK(cudaStreamDestroy(s0));
  return r;
}

static void *entry(const char *name) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

int main(int argc, char **argv) {
  if (argc > 1) spin_ns = strtoull(argv[1], NULL, 10) * 1000ull * 1000;
  int alias_only = argc > 2 && strcmp(argv[2], "alias") == 0;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: sync_probe: no GPU\n");
    return 77;
  }
  p_create = (PFN_cuMemCreate_v10020)entry("cuMemCreate");
  p_reserve = (PFN_cuMemAddressReserve_v10020)entry("cuMemAddressReserve");
  p_map = (PFN_cuMemMap_v10020)entry("cuMemMap");
  p_access = (PFN_cuMemSetAccess_v10020)entry("cuMemSetAccess");
  p_unmap = (PFN_cuMemUnmap_v10020)entry("cuMemUnmap");
  p_release = (PFN_cuMemRelease_v10020)entry("cuMemRelease");
  p_afree = (PFN_cuMemAddressFree_v10020)entry("cuMemAddressFree");
  if (!p_reserve || !p_map || !p_access || !p_unmap || !p_release || !p_afree) p_create = NULL;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&flag, sizeof(int)));
  CK(cudaMalloc(&dev_buf, MIB));
  int *h;
  CK(cudaHostAlloc((void **)&h, 2 * sizeof(int), cudaHostAllocMapped));
  started = h;
  result = h + 1;
  int *d_started, *d_result;
  CK(cudaHostGetDevicePointer((void **)&d_started, (void *)started, 0));
  CK(cudaHostGetDevicePointer((void **)&d_result, (void *)result, 0));
  CK(cudaMallocHost(&pinned, MIB));
  pageable = malloc(MIB);
  memset(pageable, 1, MIB);
  /* Both probe kernels loaded before any case: one quick round. */
  CK(cudaMemset(flag, 0, sizeof(int)));
  set_kernel<<<1, 1, 0, sb>>>(flag);
  spin_kernel<<<1, 1, 0, sa>>>(flag, d_started, d_result, spin_ns);
  CK(cudaDeviceSynchronize());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rtv = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rtv);
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const char *load = getenv("CUDA_MODULE_LOADING");
  printf("# sync_probe: %s, driver %d, runtime %d, spin limit %llu ms, "
         "CUDA_DEVICE_MAX_CONNECTIONS=%s CUDA_MODULE_LOADING=%s\n\n",
         prop.name, drv, rtv, spin_ns / 1000000, conn ? conn : "-", load ? load : "-");
  printf("| call made while another stream's kernel spins | call (ms) | result |\n");
  printf("| --- | ---: | --- |\n");
  int failures = 0;
  for (size_t i = 0; i < (alias_only ? 0 : sizeof(cases) / sizeof(cases[0])); i++) {
    CK(cudaMemsetAsync(flag, 0, sizeof(int), sa));
    CK(cudaStreamSynchronize(sa));
    *started = 0;
    *result = -1;
    spin_kernel<<<1, 1, 0, sa>>>(flag, d_started, d_result, spin_ns);
    CK(cudaGetLastError());
    double w0 = now_ms();
    while (*started == 0 && now_ms() - w0 < 5000.0) {
    }
    if (*started == 0) {
      printf("| %s | - | spinning kernel never started |\n", cases[i].name);
      failures++;
      CK(cudaStreamSynchronize(sa));
      continue;
    }
    double t0 = now_ms();
    cases[i].op();
    double t1 = now_ms();
    set_kernel<<<1, 1, 0, sb>>>(flag);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(sa));
    CK(cudaStreamSynchronize(sb));
    int r = *result;
    printf("| %s | %.2f | %s |\n", cases[i].name, t1 - t0,
           r == 1 ? "concurrent" : r == 0 ? "SERIALIZED (B's kernel waited for the spinner)"
                                         : "no result");
    fflush(stdout);
  }
  printf("\n| streams created after the spinner's, setter on the last | result |\n");
  printf("| ---: | --- |\n");
  for (int k = 1; k <= 40; k++) {
    int r = alias_row(k);
    printf("| %d | %s |\n", k,
           r == 1 ? "concurrent" : r == 0 ? "SERIALIZED (same hardware queue)" : "no result");
    fflush(stdout);
  }
  return failures ? 1 : 0;
}
