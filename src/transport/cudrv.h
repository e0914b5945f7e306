/*
 * Braid CUDA driver entry points (cudrv.c). The library links the static
 * CUDA runtime and never libcuda, so it loads on machines without a driver:
 * the few driver calls the P2P transport makes (cuMem) go through a table
 * resolved once with cudaGetDriverEntryPointByVersion.
 */
#ifndef BRD_TRANSPORT_CUDRV_H
#define BRD_TRANSPORT_CUDRV_H

#include <stddef.h>

#include "nccl.h"

/* The driver table; its members exist in CUDA builds only (below). */
typedef struct brd_cudrv brd_cudrv_t;

#if BRAID_CUDA
#include <cuda.h>

#include "base/check.h"

/* The driver entry points the P2P and NVLS transports call, with CUDA
 * 12.0's prototypes (the multicast ones: CUDA 12.1's). */
struct brd_cudrv {
  CUresult (*get_error_string)(CUresult, const char **);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*mem_get_allocation_granularity)(size_t *, const CUmemAllocationProp *,
                                             CUmemAllocationGranularity_flags);
  CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t,
                         const CUmemAllocationProp *, unsigned long long);
  CUresult (*mem_release)(CUmemGenericAllocationHandle);
  CUresult (*mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                  unsigned long long);
  CUresult (*mem_address_free)(CUdeviceptr, size_t);
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                      unsigned long long);
  CUresult (*mem_unmap)(CUdeviceptr, size_t);
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*mem_export)(void *, CUmemGenericAllocationHandle,
                         CUmemAllocationHandleType, unsigned long long);
  CUresult (*mem_import)(CUmemGenericAllocationHandle *, void *,
                         CUmemAllocationHandleType);
  /* Multicast (NVLS), CUDA 12.1. Optional: all NULL where the driver is
   * older, and the rest of the table still serves P2P. */
  CUresult (*mc_get_granularity)(size_t *, const CUmulticastObjectProp *,
                                 CUmulticastGranularity_flags);
  CUresult (*mc_create)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
  CUresult (*mc_add_device)(CUmemGenericAllocationHandle, CUdevice);
  CUresult (*mc_bind_mem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                          size_t, size_t, unsigned long long);
  CUresult (*mc_bind_addr)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                           unsigned long long);
  CUresult (*mc_unbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t);
};

/* The table, resolved on the first call; NULL when an entry point is
 * missing (no driver, or one older than CUDA 12.0), said once at INFO with
 * no WARN: callers fall back to CUDA IPC. The multicast members are NULL
 * (said once at INFO) where the driver predates CUDA 12.1 while the rest
 * resolved: brd_cudrv_has_multicast tells. Any thread; blocks only on the
 * first call. */
const brd_cudrv_t *brd_cudrv_get(void);

/* Whether t carries every multicast entry point; with why (may be NULL,
 * whylen bytes) saying which one is missing when it does not. t NULL is
 * "no". Never blocks. */
int brd_cudrv_has_multicast(const brd_cudrv_t *t, char *why, size_t whylen);

/* cuMemGetAddressRange on its own, NULL where missing: CUDA IPC needs an
 * allocation's base even where the rest of the table is unusable. Any
 * thread; blocks only on the first call. */
typedef CUresult (*brd_cudrv_addr_range_fn_t)(CUdeviceptr *, size_t *, CUdeviceptr);
brd_cudrv_addr_range_fn_t brd_cudrv_addr_range(void);

/* GPUDirect RDMA over DMA-BUF, resolved on its own (the IB net needs it
 * where the cuMem table is unusable): cuMemGetHandleForAddressRange (CUDA
 * 11.7) and cuDeviceGet / cuDeviceGetAttribute. range_handle is NULL where
 * the driver lacks it. Any thread; blocks only on the first call. */
typedef struct {
  CUresult (*range_handle)(void *, CUdeviceptr, size_t, CUmemRangeHandleType,
                           unsigned long long);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
} brd_cudrv_dmabuf_t;
const brd_cudrv_dmabuf_t *brd_cudrv_dmabuf(void);

/* Whether CUDA device `ordinal` exports DMA-BUF handles
 * (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, and cuMemGetHandleForAddressRange
 * present): 1 or 0, with why (whylen bytes, may be NULL) saying which part
 * is missing. Any thread. */
int brd_cudrv_dmabuf_supported(int ordinal, char *why, size_t whylen);

/* The driver's text for r, or a fixed text when the table cannot say. */
const char *brd_cudrv_errstr(CUresult r);

/* Like CUDA_CHECK_GOTO, for a driver call through the table. */
#define CU_CHECK_GOTO(call, what, res, label)                                  \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      WARN("CUDA driver: %s failed: %s (%d)", (what), brd_cudrv_errstr(r_),   \
           (int)r_);                                                          \
      (res) = ncclUnhandledCudaError;                                         \
      goto label;                                                             \
    }                                                                         \
  } while (0)
#endif /* BRAID_CUDA */

/* Whether the table resolves: ncclSuccess when it does;
 * ncclUnhandledCudaError with a WARN naming the missing entry point and the
 * runtime's reason otherwise; ncclInvalidUsage (WARN) in a CUDA=0 build.
 * Any thread; blocks only on the first call. */
ncclResult_t brd_cudrv_check(void);

#endif /* BRD_TRANSPORT_CUDRV_H */
