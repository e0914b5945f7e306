/*
 * Braid CUDA driver entry points: resolved once per process through the
 * CUDA runtime (cudaGetDriverEntryPointByVersion), so the library never
 * links libcuda. See cudrv.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if BRAID_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "base/check.h"
#include "transport/cudrv.h"

#if BRAID_CUDA

/* The ABI the prototypes in cudrv.h describe: CUDA 12.0's. */
#define DRV_ABI_VERSION 12000

static const struct {
  const char *name;
  size_t off;
} drv_syms[] = {
    {"cuGetErrorString", offsetof(brd_cudrv_t, get_error_string)},
    {"cuDeviceGet", offsetof(brd_cudrv_t, device_get)},
    {"cuDeviceGetAttribute", offsetof(brd_cudrv_t, device_get_attribute)},
    {"cuMemGetAllocationGranularity", offsetof(brd_cudrv_t, mem_get_allocation_granularity)},
    {"cuMemCreate", offsetof(brd_cudrv_t, mem_create)},
    {"cuMemRelease", offsetof(brd_cudrv_t, mem_release)},
    {"cuMemAddressReserve", offsetof(brd_cudrv_t, mem_address_reserve)},
    {"cuMemAddressFree", offsetof(brd_cudrv_t, mem_address_free)},
    {"cuMemMap", offsetof(brd_cudrv_t, mem_map)},
    {"cuMemUnmap", offsetof(brd_cudrv_t, mem_unmap)},
    {"cuMemSetAccess", offsetof(brd_cudrv_t, mem_set_access)},
    {"cuMemExportToShareableHandle", offsetof(brd_cudrv_t, mem_export)},
    {"cuMemImportFromShareableHandle", offsetof(brd_cudrv_t, mem_import)},
};

/* The multicast entry points: CUDA 12.1's ABI, optional (a driver without
 * them still serves P2P). */
#define DRV_MC_ABI_VERSION 12010

static const struct {
  const char *name;
  size_t off;
} drv_mc_syms[] = {
    {"cuMulticastGetGranularity", offsetof(brd_cudrv_t, mc_get_granularity)},
    {"cuMulticastCreate", offsetof(brd_cudrv_t, mc_create)},
    {"cuMulticastAddDevice", offsetof(brd_cudrv_t, mc_add_device)},
    {"cuMulticastBindMem", offsetof(brd_cudrv_t, mc_bind_mem)},
    {"cuMulticastBindAddr", offsetof(brd_cudrv_t, mc_bind_addr)},
    {"cuMulticastUnbind", offsetof(brd_cudrv_t, mc_unbind)},
};

static brd_cudrv_t drv;            /* valid when drv_res is ncclSuccess */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static ncclResult_t drv_res = ncclSuccess;
static char drv_err[256];         /* why the table is unusable */

static void drv_load(void) {
  brd_cudrv_t t;
  memset(&t, 0, sizeof(t));
  for (size_t i = 0; i < sizeof(drv_syms) / sizeof(drv_syms[0]); i++) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(drv_syms[i].name, &fn,
                                                     DRV_ABI_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == NULL) {
      (void)cudaGetLastError();
      snprintf(drv_err, sizeof(drv_err),
               "CUDA driver entry point %s is unavailable (%s); cuMem needs an "
               "NVIDIA driver for CUDA 12.0 or later", drv_syms[i].name,
               e != cudaSuccess ? cudaGetErrorString(e)
               : q == cudaDriverEntryPointVersionNotSufficent ? "the driver is too old"
                                                              : "symbol not found");
      drv_res = ncclUnhandledCudaError;
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_INIT, "P2P: %s", drv_err);
      return;
    }
    /* Entry points are plain function pointers returned as void *. */
    memcpy((char *)&t + drv_syms[i].off, &fn, sizeof(fn));
  }
  /* All or none of the multicast entry points, so that a half-filled set
   * never reaches the NVLS transport. */
  void *mc[sizeof(drv_mc_syms) / sizeof(drv_mc_syms[0])];
  for (size_t i = 0; i < sizeof(drv_mc_syms) / sizeof(drv_mc_syms[0]); i++) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    mc[i] = NULL;
    cudaError_t e = cudaGetDriverEntryPointByVersion(drv_mc_syms[i].name, &mc[i],
                                                     DRV_MC_ABI_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || mc[i] == NULL) {
      (void)cudaGetLastError();
      INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_INIT,
           "NVLS: CUDA driver entry point %s is unavailable (%s); multicast needs a driver "
           "for CUDA 12.1 or later", drv_mc_syms[i].name,
           e != cudaSuccess ? cudaGetErrorString(e)
           : q == cudaDriverEntryPointVersionNotSufficent ? "the driver is too old"
                                                          : "symbol not found");
      memset(mc, 0, sizeof(mc));
      break;
    }
  }
  for (size_t i = 0; i < sizeof(drv_mc_syms) / sizeof(drv_mc_syms[0]); i++)
    memcpy((char *)&t + drv_mc_syms[i].off, &mc[i], sizeof(mc[i]));
  drv = t;
}

/* See cudrv.h. */
const brd_cudrv_t *brd_cudrv_get(void) {
  pthread_once(&drv_once, drv_load);
  return drv_res == ncclSuccess ? &drv : NULL;
}

/* See cudrv.h. */
int brd_cudrv_has_multicast(const brd_cudrv_t *t, char *why, size_t whylen) {
  static const char *const names[] = {"cuMulticastGetGranularity", "cuMulticastCreate",
                                      "cuMulticastAddDevice", "cuMulticastBindMem",
                                      "cuMulticastBindAddr", "cuMulticastUnbind"};
  if (t == NULL) {
    if (why != NULL) snprintf(why, whylen, "the CUDA driver table is unavailable");
    return 0;
  }
  const void *fns[] = {(const void *)t->mc_get_granularity, (const void *)t->mc_create,
                       (const void *)t->mc_add_device, (const void *)t->mc_bind_mem,
                       (const void *)t->mc_bind_addr, (const void *)t->mc_unbind};
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
    if (fns[i] == NULL) {
      if (why != NULL)
        snprintf(why, whylen, "the CUDA driver has no %s (multicast needs CUDA 12.1 or later)",
                 names[i]);
      return 0;
    }
  }
  return 1;
}

static brd_cudrv_addr_range_fn_t addr_range; /* cuMemGetAddressRange, or NULL */
static pthread_once_t addr_once = PTHREAD_ONCE_INIT;

static void addr_load(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, DRV_ABI_VERSION,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    fn = NULL;
  }
  memcpy(&addr_range, &fn, sizeof(fn));
}

/* See cudrv.h. */
brd_cudrv_addr_range_fn_t brd_cudrv_addr_range(void) {
  pthread_once(&addr_once, addr_load);
  return addr_range;
}

/* DMA-BUF export: CUDA 11.7's cuMemGetHandleForAddressRange. */
#define DRV_DMABUF_ABI_VERSION 11070

static brd_cudrv_dmabuf_t dmabuf_fns;
static pthread_once_t dmabuf_once = PTHREAD_ONCE_INIT;

static void *drv_sym(const char *name, unsigned int version) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    fn = NULL;
  }
  return fn;
}

static void dmabuf_load(void) {
  void *fn = drv_sym("cuMemGetHandleForAddressRange", DRV_DMABUF_ABI_VERSION);
  memcpy(&dmabuf_fns.range_handle, &fn, sizeof(fn));
  fn = drv_sym("cuDeviceGet", DRV_ABI_VERSION);
  memcpy(&dmabuf_fns.device_get, &fn, sizeof(fn));
  fn = drv_sym("cuDeviceGetAttribute", DRV_ABI_VERSION);
  memcpy(&dmabuf_fns.device_get_attribute, &fn, sizeof(fn));
}

/* See cudrv.h. */
const brd_cudrv_dmabuf_t *brd_cudrv_dmabuf(void) {
  pthread_once(&dmabuf_once, dmabuf_load);
  return &dmabuf_fns;
}

/* See cudrv.h. */
int brd_cudrv_dmabuf_supported(int ordinal, char *why, size_t whylen) {
  const brd_cudrv_dmabuf_t *t = brd_cudrv_dmabuf();
  CUdevice dev;
  int v = 0;
  if (t->range_handle == NULL || t->device_get == NULL || t->device_get_attribute == NULL) {
    if (why != NULL)
      snprintf(why, whylen, "the CUDA driver has no cuMemGetHandleForAddressRange (DMA-BUF "
               "needs CUDA 11.7 or later)");
    return 0;
  }
  if (t->device_get(&dev, ordinal) != CUDA_SUCCESS ||
      t->device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) != CUDA_SUCCESS ||
      v == 0) {
    if (why != NULL)
      snprintf(why, whylen, "CUDA device %d does not export DMA-BUF "
               "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: needs the open kernel modules "
               "and Linux 5.12 or later)", ordinal);
    return 0;
  }
  return 1;
}

/* See cudrv.h. */
const char *brd_cudrv_errstr(CUresult r) {
  const char *s = NULL;
  if (drv.get_error_string == NULL || drv.get_error_string(r, &s) != CUDA_SUCCESS ||
      s == NULL)
    return "unknown CUDA driver error";
  return s;
}

/* See cudrv.h. */
ncclResult_t brd_cudrv_check(void) {
  if (brd_cudrv_get() != NULL) return ncclSuccess;
  WARN("P2P: %s", drv_err);
  return drv_res;
}

#else /* !BRAID_CUDA */

/* See cudrv.h. */
ncclResult_t brd_cudrv_check(void) {
  WARN("P2P: the CUDA driver table needs CUDA, but this library was built with CUDA=0; "
       "set BRAID_DEVICE=host");
  return ncclInvalidUsage;
}

#endif /* BRAID_CUDA */
