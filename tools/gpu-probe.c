/*
 * gpu-probe: the facts about device 0 that decide which paths Braid can take
 * on it, as "key=value" lines (scripts/gpu-check's first step).
 *
 *   gpu-probe [device]
 *
 * Prints the device's name, compute capability, SM count, memory, L2, PCI
 * bus id, the CUDA driver and runtime versions, the driver attributes that
 * gate cuMem, IPC and multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
 * among them), and then tries the one-device multicast path end to end:
 * cuMulticastCreate with one device, cuMulticastAddDevice, cuMemCreate of
 * the granularity, cuMulticastBindMem, and a cuMemMap + cuMemSetAccess of
 * the multicast handle; each step's outcome is a line ("multicast_create=ok"
 * or "=error: <the driver's text>"), and what it made is released.
 *
 * The driver API is reached through cudaGetDriverEntryPointByVersion, as the
 * library does (src/transport/p2p.c): nothing links libcuda. Where the driver
 * API is absent (the CUDA simulator) that is a line too, not a failure.
 * Exit: 0 with the facts; 77 after "SKIP: ..." when the build has no CUDA or
 * no device is visible; 1 when a runtime call that must work fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if BRAID_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#define EXIT_SKIP 77

/* The driver functions the probe uses, with CUDA 12.1's prototypes (the
 * first with multicast). */
#define DRV_ABI_VERSION 12010

typedef struct {
  CUresult (*get_error_string)(CUresult, const char **);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*mc_granularity)(size_t *, const CUmulticastObjectProp *,
                             CUmulticastGranularity_flags);
  CUresult (*mc_create)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
  CUresult (*mc_add_device)(CUmemGenericAllocationHandle, CUdevice);
  CUresult (*mc_bind_mem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                          size_t, size_t, unsigned long long);
  CUresult (*mc_unbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t);
  CUresult (*mem_granularity)(size_t *, const CUmemAllocationProp *,
                              CUmemAllocationGranularity_flags);
  CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                         unsigned long long);
  CUresult (*mem_release)(CUmemGenericAllocationHandle);
  CUresult (*address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                      unsigned long long);
  CUresult (*mem_unmap)(CUdeviceptr, size_t);
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} drv_t;

#define DRV_SYM(name, field) {name, offsetof(drv_t, field)}
static const struct {
  const char *name;
  size_t off;
} drv_syms[] = {
    DRV_SYM("cuGetErrorString", get_error_string),
    DRV_SYM("cuDeviceGet", device_get),
    DRV_SYM("cuDeviceGetAttribute", device_get_attribute),
    DRV_SYM("cuMulticastGetGranularity", mc_granularity),
    DRV_SYM("cuMulticastCreate", mc_create),
    DRV_SYM("cuMulticastAddDevice", mc_add_device),
    DRV_SYM("cuMulticastBindMem", mc_bind_mem),
    DRV_SYM("cuMulticastUnbind", mc_unbind),
    DRV_SYM("cuMemGetAllocationGranularity", mem_granularity),
    DRV_SYM("cuMemCreate", mem_create),
    DRV_SYM("cuMemRelease", mem_release),
    DRV_SYM("cuMemAddressReserve", address_reserve),
    DRV_SYM("cuMemAddressFree", address_free),
    DRV_SYM("cuMemMap", mem_map),
    DRV_SYM("cuMemUnmap", mem_unmap),
    DRV_SYM("cuMemSetAccess", mem_set_access),
};

static drv_t drv;

/* Fills drv; on failure writes why and returns 0. */
static int drv_load(char *why, size_t whylen) {
  for (size_t i = 0; i < sizeof(drv_syms) / sizeof(drv_syms[0]); i++) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(drv_syms[i].name, &fn, DRV_ABI_VERSION,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == NULL) {
      (void)cudaGetLastError();
      snprintf(why, whylen, "%s: %s", drv_syms[i].name,
               e != cudaSuccess ? cudaGetErrorString(e)
               : q == cudaDriverEntryPointVersionNotSufficent ? "the driver is older than CUDA 12.1"
                                                              : "symbol not found");
      return 0;
    }
    memcpy((char *)&drv + drv_syms[i].off, &fn, sizeof(fn));
  }
  return 1;
}

static const char *cu_text(CUresult r) {
  const char *s = NULL;
  if (drv.get_error_string == NULL || drv.get_error_string(r, &s) != CUDA_SUCCESS || s == NULL)
    return "unknown driver error";
  return s;
}

/* One step of the multicast path: prints "key=ok" or "key=error: ...". */
static int step(const char *key, CUresult r) {
  if (r == CUDA_SUCCESS) {
    printf("%s=ok\n", key);
    return 1;
  }
  printf("%s=error: %s (CUresult %d)\n", key, cu_text(r), (int)r);
  return 0;
}

static void print_attr(const char *key, CUdevice_attribute a, CUdevice dev) {
  int v = -1;
  CUresult r = drv.device_get_attribute(&v, a, dev);
  if (r == CUDA_SUCCESS)
    printf("%s=%d\n", key, v);
  else
    printf("%s=error: %s\n", key, cu_text(r));
}

/* The one-device multicast object: create, add the device, bind a physical
 * block, map the multicast handle. Returns 1 when every step worked. */
static int try_multicast(CUdevice dev, int ordinal) {
  CUmulticastObjectProp mp;
  memset(&mp, 0, sizeof(mp));
  mp.numDevices = 1;
  mp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t mc_gran = 0, mem_gran = 0;
  if (!step("multicast_granularity", drv.mc_granularity(&mc_gran, &mp,
                                                        CU_MULTICAST_GRANULARITY_RECOMMENDED)))
    return 0;
  CUmemAllocationProp ap;
  memset(&ap, 0, sizeof(ap));
  ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.location.id = ordinal;
  ap.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (!step("mem_granularity", drv.mem_granularity(&mem_gran, &ap,
                                                   CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
    return 0;
  size_t size = mc_gran > mem_gran ? mc_gran : mem_gran;
  if (size == 0) size = 2u << 20;
  printf("multicast_granularity_bytes=%zu\nmem_granularity_bytes=%zu\n", mc_gran, mem_gran);
  mp.size = size;

  int ok = 0;
  CUmemGenericAllocationHandle mc = 0, phys = 0;
  CUdeviceptr va = 0;
  int bound = 0, mapped = 0;
  if (!step("multicast_create", drv.mc_create(&mc, &mp))) goto done;
  if (!step("multicast_add_device", drv.mc_add_device(mc, dev))) goto fail_release_mc;
  if (!step("multicast_mem_create", drv.mem_create(&phys, size, &ap, 0))) goto fail_release_mc;
  if (!step("multicast_bind", drv.mc_bind_mem(mc, 0, phys, 0, size, 0))) goto fail_release_phys;
  bound = 1;
  if (!step("multicast_reserve", drv.address_reserve(&va, size, size, 0, 0))) goto fail_unbind;
  if (!step("multicast_map", drv.mem_map(va, size, 0, mc, 0))) goto fail_free_va;
  mapped = 1;
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof(acc));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = ordinal;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!step("multicast_set_access", drv.mem_set_access(va, size, &acc, 1))) goto fail_unmap;
  ok = 1;
fail_unmap:
  if (mapped) (void)drv.mem_unmap(va, size);
fail_free_va:
  (void)drv.address_free(va, size);
fail_unbind:
  if (bound) (void)drv.mc_unbind(mc, dev, 0, size);
fail_release_phys:
  (void)drv.mem_release(phys);
fail_release_mc:
  (void)drv.mem_release(mc);
done:
  return ok;
}

int main(int argc, char **argv) {
  int ordinal = argc > 1 ? atoi(argv[1]) : 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int drv_ver = 0, rt_ver = 0, n = 0;
  (void)cudaDriverGetVersion(&drv_ver);
  (void)cudaRuntimeGetVersion(&rt_ver);
  printf("cuda_driver_version=%d.%d\n", drv_ver / 1000, drv_ver % 1000 / 10);
  printf("cuda_runtime_version=%d.%d\n", rt_ver / 1000, rt_ver % 1000 / 10);
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIP: gpu-probe: no CUDA device is visible (cudaGetDeviceCount: %s, %d devices)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "no error", n);
    return EXIT_SKIP;
  }
  printf("device_count=%d\n", n);
  if (ordinal < 0 || ordinal >= n) {
    fprintf(stderr, "gpu-probe: device %d does not exist (%d visible)\n", ordinal, n);
    return 1;
  }
  struct cudaDeviceProp p;
  e = cudaGetDeviceProperties(&p, ordinal);
  if (e != cudaSuccess) {
    fprintf(stderr, "gpu-probe: cudaGetDeviceProperties(%d): %s\n", ordinal,
            cudaGetErrorString(e));
    return 1;
  }
  if ((e = cudaSetDevice(ordinal)) != cudaSuccess || (e = cudaFree(NULL)) != cudaSuccess) {
    fprintf(stderr, "gpu-probe: making a context on device %d: %s\n", ordinal,
            cudaGetErrorString(e));
    return 1;
  }
  size_t mfree = 0, mtotal = 0;
  (void)cudaMemGetInfo(&mfree, &mtotal);
  char bus[32] = "";
  (void)cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), ordinal);
  printf("device=%d\nname=%s\ncompute_capability=%d.%d\nsm_count=%d\n", ordinal, p.name,
         p.major, p.minor, p.multiProcessorCount);
  printf("memory_total_mib=%zu\nmemory_free_mib=%zu\nl2_bytes=%d\npci_bus_id=%s\n",
         mtotal >> 20, mfree >> 20, p.l2CacheSize, bus);
  printf("shared_mem_per_block_optin=%zu\nmax_threads_per_sm=%d\n", p.sharedMemPerBlockOptin,
         p.maxThreadsPerMultiProcessor);

  char why[256];
  if (!drv_load(why, sizeof(why))) {
    printf("driver_api=unavailable (%s)\n", why);
    printf("multicast_supported=unknown\nmulticast_bind=no (the driver API is unavailable)\n");
    return 0;
  }
  printf("driver_api=ok\n");
  CUdevice dev;
  CUresult r = drv.device_get(&dev, ordinal);
  if (r != CUDA_SUCCESS) {
    printf("driver_device=error: %s\nmulticast_bind=no (cuDeviceGet failed)\n", cu_text(r));
    return 0;
  }
  int mc_supported = 0;
  if (drv.device_get_attribute(&mc_supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev) !=
      CUDA_SUCCESS)
    mc_supported = -1;
  printf("multicast_supported=%d\n", mc_supported);
  print_attr("vmm_supported", CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  print_attr("posix_fd_handles_supported",
             CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  print_attr("fabric_handles_supported", CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev);
  print_attr("gpu_direct_rdma_supported", CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev);
  print_attr("ipc_event_supported", CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev);
  print_attr("max_shared_mem_per_sm", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
             dev);
  /* Tried even where the attribute says no: the driver's own answer is the
   * fact worth having. */
  int mc_ok = try_multicast(dev, ordinal);
  printf("multicast_bind=%s\n", mc_ok ? "yes" : "no");
  (void)cudaGetLastError();
  return 0;
}

#else /* !BRAID_CUDA */

int main(void) {
  printf("SKIP: gpu-probe: this build has no CUDA (CUDA=0)\n");
  return 77;
}

#endif
