/*
 * Braid P2P transport: segments of GPU memory that the ranks of one host
 * reach directly (NVLink or PCIe peer access).
 *
 * How an importer reaches a segment, decided per import:
 *   same process  the creator's own pointer; the importing device is granted
 *                 access (cuMemSetAccess, or peer access for cudaMalloc
 *                 memory). A reference count keeps the memory alive until
 *                 the last holder in the process closes it, so a rank that
 *                 tears down first never frees memory a peer thread still
 *                 writes.
 *   cuMem (VMM)   the creator allocates with cuMemCreate asking for a POSIX
 *                 file descriptor handle, exports it, and serves the
 *                 descriptor on the abstract Unix socket
 *                 "braid-ipc-<pid>-<serial>" (ipc.c) until the segment is
 *                 sealed. The importer connects, receives the descriptor
 *                 (SCM_RIGHTS), imports it and maps it into its own address
 *                 space with access for its device.
 *   CUDA IPC      where cuMem is unavailable (no VMM or no POSIX handles on
 *                 the device, driver entry points missing, or
 *                 NCCL_CUMEM_ENABLE=0): cudaMalloc + cudaIpcGetMemHandle,
 *                 the 64-byte IPC handle travelling inside the segment
 *                 handle.
 *
 * Driver calls go through the entry-point table of cudrv.c, descriptors
 * through the servers of ipc.c; whether two ranks may use P2P at all is
 * p2p_path.c's question (the transport's can_connect).
 *
 * Every mapping this process holds (segments created, imported, and
 * ncclMemAlloc blocks) is a record in one list keyed by its address.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "base/check.h"
#include "base/cuda_wait.h"
#include "base/param.h"
#include "transport/cudrv.h"
#include "transport/ipc.h"
#include "transport/transport.h"

#if BRAID_CUDA

/* The driver table. Called only on cuMem paths, entered after
 * vmm_supported (creator) or import_vmm found it resolved. */
static const brd_cudrv_t *drv(void) { return brd_cudrv_get(); }

/* ---- the mapping registry ----------------------------------------------- */

typedef enum { MODE_VMM = 1, MODE_IPC = 2 } p2p_mode_t;

/* The transport-specific part of a segment handle. */
typedef struct {
  uint16_t mode;         /* p2p_mode_t */
  int16_t dev;           /* creator's CUDA device (same-process importers) */
  uint32_t serial;       /* VMM: descriptor server serial (with handle.pid) */
  union {
    unsigned char ipc[64];     /* IPC: cudaIpcMemHandle_t */
    struct {
      uint64_t alloc_size;     /* VMM: bytes to map */
    } vmm;
  } u;
} p2p_name_t;

_Static_assert(sizeof(p2p_name_t) == sizeof(((brd_seg_handle_t *)0)->name),
               "the P2P name fills the handle's name field exactly");
_Static_assert(sizeof(cudaIpcMemHandle_t) == 64, "CUDA IPC handles are 64 bytes");

typedef struct p2p_mem {
  void *ptr;              /* key: the address mapped in this process */
  size_t size;            /* bytes asked for */
  size_t alloc_size;      /* bytes mapped (VMM: a granularity multiple) */
  p2p_mode_t mode;
  int dev;                /* device the memory lives on (this process's number) */
  int imported;           /* 1: another process's memory, mapped here */
  int memalloc;           /* 1: an ncclMemAlloc block, not a segment */
  int refs;               /* holders in this process */
  CUmemGenericAllocationHandle cu; /* VMM: this process's handle */
  brd_ipc_fdsrv_t *srv;   /* owned: VMM creator, until sealed */
  brd_seg_handle_t key;   /* imported: the handle it was mapped from */
  struct p2p_mem *next;
} p2p_mem_t;

static pthread_mutex_t mems_lock = PTHREAD_MUTEX_INITIALIZER;
static p2p_mem_t *mems; /* owned: every live mapping; under mems_lock */

static p2p_mem_t *mem_find_locked(const void *ptr) {
  for (p2p_mem_t *m = mems; m != NULL; m = m->next)
    if (m->ptr == ptr) return m;
  return NULL;
}

static void mem_insert(p2p_mem_t *m) {
  pthread_mutex_lock(&mems_lock);
  m->next = mems;
  mems = m;
  pthread_mutex_unlock(&mems_lock);
}

static void mem_unlink_locked(p2p_mem_t *m) {
  for (p2p_mem_t **pp = &mems; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == m) {
      *pp = m->next;
      return;
    }
  }
}

/* Gives back what a record maps; errors only INFO (nothing to recover). */
static void mem_unmap(p2p_mem_t *m) {
  if (m->ptr == NULL) return;
  if (m->mode == MODE_VMM) {
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)m->ptr;
    CUresult r1 = drv()->mem_unmap(va, m->alloc_size);
    CUresult r2 = drv()->mem_address_free(va, m->alloc_size);
    CUresult r3 = drv()->mem_release(m->cu);
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS || r3 != CUDA_SUCCESS)
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: releasing %p (%zu bytes) "
           "failed: %s", m->ptr, m->alloc_size,
           brd_cudrv_errstr(r1 != CUDA_SUCCESS ? r1 : r2 != CUDA_SUCCESS ? r2 : r3));
  } else {
    cudaError_t e = m->imported ? cudaIpcCloseMemHandle(m->ptr) : cudaFree(m->ptr);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: releasing %p failed: %s",
           m->ptr, cudaGetErrorString(e));
    }
  }
  m->ptr = NULL;
}

/* ---- cuMem -------------------------------------------------------------- */

/* Whether segments on dev can use cuMem with POSIX descriptors. */
static int vmm_supported(int dev) {
  CUdevice cd;
  int vmm = 0, posix = 0;
  if (brd_param_int(BRD_P_CUMEM_ENABLE) == 0) return 0;
  if (brd_cudrv_get() == NULL) return 0;
  if (drv()->device_get(&cd, dev) != CUDA_SUCCESS) return 0;
  if (drv()->device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               cd) != CUDA_SUCCESS ||
      drv()->device_get_attribute(&posix,
                               CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                               cd) != CUDA_SUCCESS)
    return 0;
  return vmm && posix;
}

/* The devices there may be: cuMemSetAccess takes one entry per device. */
#define P2P_MAX_DEVS 64

/* Grants read-write access to [va, va + size) to dev, and with all_peers
 * to every other device that has peer access to dev. */
static ncclResult_t vmm_grant(CUdeviceptr va, size_t size, int dev, int all_peers) {
  ncclResult_t res = ncclSuccess;
  CUmemAccessDesc desc[P2P_MAX_DEVS];
  size_t nd = 0;
  int ndev = 1;
  memset(desc, 0, sizeof(desc));
  desc[nd].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc[nd].location.id = dev;
  desc[nd++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (all_peers) {
    CUDA_CHECK_GOTO(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount", res, out);
    for (int d = 0; d < ndev && nd < P2P_MAX_DEVS; d++) {
      int can = 0;
      if (d == dev) continue;
      if (cudaDeviceCanAccessPeer(&can, d, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (!can) continue;
      desc[nd].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc[nd].location.id = d;
      desc[nd++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
  }
  CU_CHECK_GOTO(drv()->mem_set_access(va, size, desc, nd), "cuMemSetAccess", res, out);
out:
  return res;
}

/* Reserves alloc bytes of address space (aligned to align, 0 for the
 * default), maps h there (what names the map call in a message) and
 * grants dev, and with all_peers its peers, access. *va_out on success;
 * on failure nothing of this remains, and h is still the caller's. */
static ncclResult_t vmm_map(CUmemGenericAllocationHandle h, size_t alloc, size_t align,
                            int dev, int all_peers, const char *what, CUdeviceptr *va_out) {
  ncclResult_t res = ncclSuccess;
  CUdeviceptr va = 0;
  CU_CHECK_GOTO(drv()->mem_address_reserve(&va, alloc, align, 0, 0), "cuMemAddressReserve",
                res, out);
  CU_CHECK_GOTO(drv()->mem_map(va, alloc, 0, h, 0), what, res, fail_free_va);
  CHECK_GOTO(vmm_grant(va, alloc, dev, all_peers), res, fail_unmap);
  *va_out = va;
  return ncclSuccess;

fail_unmap:
  drv()->mem_unmap(va, alloc);
fail_free_va:
  drv()->mem_address_free(va, alloc);
out:
  return res;
}

/* Allocates and maps size bytes (rounded up to the recommended granularity)
 * on dev, exportable as a POSIX descriptor; fills m's mapping fields. */
static ncclResult_t vmm_alloc(int dev, size_t size, int all_peers, p2p_mem_t *m) {
  ncclResult_t res = ncclSuccess;
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h;
  CUdeviceptr va = 0;
  size_t gran = 0;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CU_CHECK_GOTO(drv()->mem_get_allocation_granularity(&gran, &prop,
                                             CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity", res, out);
  if (gran == 0) gran = 2u << 20;
  size_t alloc = (size + gran - 1) / gran * gran;
  CU_CHECK_GOTO(drv()->mem_create(&h, alloc, &prop, 0), "cuMemCreate", res, out);
  CHECK_GOTO(vmm_map(h, alloc, gran, dev, all_peers, "cuMemMap", &va), res, fail_release);
  m->ptr = (void *)(uintptr_t)va;
  m->alloc_size = alloc;
  m->cu = h;
  m->mode = MODE_VMM;
  m->dev = dev;
  return ncclSuccess;

fail_release:
  drv()->mem_release(h);
out:
  return res;
}

/* Zeroes device memory on a private stream, so no other work on the device
 * (another rank's kernel, say) is waited for. Blocks, polling, for at most
 * BRAID_TIMEOUT: the private stream shares a hardware queue of the GPU
 * (CUDA_DEVICE_MAX_CONNECTIONS) with other streams, and where ranks share
 * the GPU a peer's work queued ahead of the memset (a copy-out behind its
 * kernel) may wait for this rank's next launch, on another communicator.
 * The segments are the communicators' windows, made at their creation
 * (ncclMemAlloc and ncclCommRegister zero nothing): their semaphores and
 * LL flags must read 0 before any peer's kernel writes to them, and peers
 * write as soon as the window is published, so the zeroing cannot be
 * deferred to this rank's first launch. Such a stall is reported instead
 * of hanging (brd_cuda_stream_wait), with *stuck_out set: the memset is
 * still queued, so the memory must not be freed (cudaFree would wait for
 * the whole device), and the work is recorded for every later teardown on
 * the device (brd_cuda_stuck). */
static ncclResult_t zero_device(void *ptr, size_t size, int *stuck_out) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  char what[96];
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", res, out);
  CUDA_CHECK_GOTO(cudaMemsetAsync(ptr, 0, size, s), "cudaMemsetAsync (zeroing a segment)",
            res, fail_destroy);
  snprintf(what, sizeof(what), "zeroing a %zu-byte P2P segment (a communicator's window)",
           size);
  res = brd_cuda_stream_wait(s, what, NULL, stuck_out);
fail_destroy:
  cudaStreamDestroy(s); /* returns at once; released after its work */
out:
  return res;
}

/* The calling thread's device, with its primary context made current
 * (driver calls need one). */
static ncclResult_t current_device(int *dev_out) {
  ncclResult_t res = ncclSuccess;
  int dev = 0;
  CUDA_CHECK_GOTO(cudaGetDevice(&dev), "cudaGetDevice", res, out);
  CUDA_CHECK_GOTO(cudaSetDevice(dev), "cudaSetDevice", res, out);
  *dev_out = dev;
out:
  return res;
}

/* ---- segment ops ---------------------------------------------------------- */

static ncclResult_t p2p_create(size_t size, const char *tag, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  p2p_name_t nm;
  p2p_mem_t *m;
  int dev;
  CHECK(current_device(&dev));
  BRD_CALLOC(m, 1, "a P2P segment record");
  memset(&nm, 0, sizeof(nm));
  if (vmm_supported(dev)) {
    int fd = -1;
    CHECK_GOTO(vmm_alloc(dev, size, 0, m), res, fail_free);
    CU_CHECK_GOTO(drv()->mem_export(&fd, m->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle", res, fail_unmap);
    res = brd_ipc_fdsrv_create(fd, &m->srv);
    close(fd);
    if (res != ncclSuccess) goto fail_unmap;
    nm.serial = brd_ipc_fdsrv_serial(m->srv);
    nm.u.vmm.alloc_size = m->alloc_size;
  } else {
    cudaIpcMemHandle_t ih;
    m->mode = MODE_IPC;
    m->dev = dev;
    m->alloc_size = size;
    CUDA_CHECK_GOTO(cudaMalloc(&m->ptr, size), "cudaMalloc for a P2P segment", res, fail_free);
    CUDA_CHECK_GOTO(cudaIpcGetMemHandle(&ih, m->ptr), "cudaIpcGetMemHandle", res, fail_unmap);
    memcpy(nm.u.ipc, &ih, sizeof(nm.u.ipc));
  }
  int stuck = 0;
  res = zero_device(m->ptr, m->alloc_size, &stuck);
  if (stuck) goto fail_leak;
  if (res != ncclSuccess) goto fail_stop;
  m->size = size;
  m->refs = 1;
  nm.mode = (uint16_t)m->mode;
  nm.dev = (int16_t)dev;

  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = size;
  seg_out->owner = 1;
  seg_out->handle.transport = BRD_TRANSPORT_P2P;
  seg_out->handle.pid = (uint32_t)getpid();
  seg_out->handle.size = size;
  seg_out->handle.local_addr = (uint64_t)(uintptr_t)m->ptr;
  memcpy(seg_out->handle.name, &nm, sizeof(nm));
  mem_insert(m);
  INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ALLOC, "P2P: %zu bytes for %s on device %d "
       "through %s", size, tag != NULL ? tag : "a segment", dev,
       m->mode == MODE_VMM ? "cuMem" : "CUDA IPC");
  return ncclSuccess;

fail_stop:
  brd_ipc_fdsrv_destroy(m->srv);
fail_unmap:
  mem_unmap(m);
fail_free:
  free(m);
  return res;
fail_leak:
  brd_cuda_leak_info(m->alloc_size, "a P2P segment");
  brd_ipc_fdsrv_destroy(m->srv);
  free(m);
  return res;
}

/* Lets the current device (dev) reach peer_dev's cudaMalloc memory; `fix`
 * ends the WARN when it cannot. */
static ncclResult_t peer_access(int dev, int peer_dev, const char *fix) {
  cudaError_t e = cudaDeviceEnablePeerAccess(peer_dev, 0);
  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
    WARN("CUDA: cudaDeviceEnablePeerAccess from device %d to device %d failed: %s; %s",
         dev, peer_dev, cudaGetErrorString(e), fix);
    (void)cudaGetLastError();
    return ncclUnhandledCudaError;
  }
  (void)cudaGetLastError();
  return ncclSuccess;
}

/* A segment of this process: alias the creator's memory, after granting
 * the importing device access to it. */
static ncclResult_t import_local(const brd_seg_handle_t *h, int dev, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  void *ptr = (void *)(uintptr_t)h->local_addr;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(ptr);
  if (m == NULL || m->memalloc) {
    WARN("P2P: segment %p of this process is gone; its creator closed it before "
         "every rank imported it", ptr);
    res = ncclInternalError;
    goto out;
  }
  if (dev != m->dev) {
    if (m->mode == MODE_VMM) {
      CHECK_GOTO(vmm_grant((CUdeviceptr)(uintptr_t)m->ptr, m->alloc_size, dev, 0), res,
                 out);
    } else {
      CHECK_GOTO(peer_access(dev, m->dev, "set NCCL_P2P_DISABLE=1 to use host memory instead"),
                 res, out);
    }
  }
  m->refs++;
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = (size_t)h->size;
  seg_out->handle = *h;
out:
  pthread_mutex_unlock(&mems_lock);
  return res;
}

/* Another process's cuMem segment: fetch its descriptor, import, map. */
static ncclResult_t import_vmm(const brd_seg_handle_t *h, const p2p_name_t *nm, int dev,
                               p2p_mem_t *m) {
  ncclResult_t res = ncclSuccess;
  CUdeviceptr va = 0;
  size_t alloc = (size_t)nm->u.vmm.alloc_size;
  int fd = -1;
  /* The creator had cuMem; this process must too. */
  if (brd_cudrv_get() == NULL) return brd_cudrv_check();
  double timeout = (double)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  CHECK(brd_ipc_fd_fetch(h->pid, nm->serial, timeout > 0 ? timeout : 300.0, NULL, &fd));
  CU_CHECK_GOTO(drv()->mem_import(&m->cu, (void *)(uintptr_t)fd,
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle", res, fail_close);
  close(fd);
  fd = -1;
  CHECK_GOTO(vmm_map(m->cu, alloc, 0, dev, 0, "cuMemMap (peer memory)", &va), res,
             fail_release);
  m->ptr = (void *)(uintptr_t)va;
  m->alloc_size = alloc;
  m->mode = MODE_VMM;
  return ncclSuccess;

fail_release:
  drv()->mem_release(m->cu);
fail_close:
  if (fd >= 0) close(fd);
  return res;
}

/* Another process's memory this process has mapped already (CUDA IPC
 * refuses to open a handle twice, and one mapping is enough): 1 with a
 * new reference in seg_out, else 0. */
static int import_again(const brd_seg_handle_t *h, int dev, brd_seg_t *seg_out) {
  int found = 0;
  pthread_mutex_lock(&mems_lock);
  for (p2p_mem_t *m = mems; m != NULL; m = m->next) {
    if (!m->imported || m->dev != dev || memcmp(&m->key, h, sizeof(*h)) != 0) continue;
    m->refs++;
    memset(seg_out, 0, sizeof(*seg_out));
    seg_out->ptr = m->ptr;
    seg_out->size = m->size;
    seg_out->handle = *h;
    found = 1;
    break;
  }
  pthread_mutex_unlock(&mems_lock);
  return found;
}

static ncclResult_t p2p_import(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  ncclResult_t res = ncclSuccess;
  p2p_name_t nm;
  p2p_mem_t *m;
  int dev;
  if (h->transport != BRD_TRANSPORT_P2P) {
    WARN("P2P: import of a segment handle made by transport %u", h->transport);
    return ncclInternalError;
  }
  memcpy(&nm, h->name, sizeof(nm));
  if (nm.mode != MODE_VMM && nm.mode != MODE_IPC) {
    WARN("P2P: segment handle of pid %u has unknown mode %u (a different "
         "library version on that rank?)", h->pid, nm.mode);
    return ncclInternalError;
  }
  CHECK(current_device(&dev));
  if (h->pid == (uint32_t)getpid()) return import_local(h, dev, seg_out);
  if (import_again(h, dev, seg_out)) return ncclSuccess;

  BRD_CALLOC(m, 1, "a P2P import record");
  m->imported = 1;
  m->dev = dev;
  m->size = (size_t)h->size;
  if (nm.mode == MODE_VMM) {
    CHECK_GOTO(import_vmm(h, &nm, dev, m), res, fail_free);
  } else {
    cudaIpcMemHandle_t ih;
    memcpy(&ih, nm.u.ipc, sizeof(ih));
    m->mode = MODE_IPC;
    m->alloc_size = m->size;
    CUDA_CHECK_GOTO(cudaIpcOpenMemHandle(&m->ptr, ih, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle (peer memory)", res, fail_free);
  }
  m->refs = 1;
  m->key = *h;
  mem_insert(m);
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = m->ptr;
  seg_out->size = m->size;
  seg_out->handle = *h;
  return ncclSuccess;

fail_free:
  free(m);
  return res;
}

static void p2p_seal(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL || !seg->owner) return;
  brd_ipc_fdsrv_t *srv = NULL;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(seg->ptr);
  if (m != NULL) {
    srv = m->srv;
    m->srv = NULL;
  }
  pthread_mutex_unlock(&mems_lock);
  brd_ipc_fdsrv_destroy(srv);
}

static void p2p_close(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL) return;
  p2p_mem_t *gone = NULL;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(seg->ptr);
  if (m != NULL && !m->memalloc && --m->refs == 0) {
    mem_unlink_locked(m);
    gone = m;
  }
  pthread_mutex_unlock(&mems_lock);
  if (gone != NULL) {
    brd_ipc_fdsrv_destroy(gone->srv);
    mem_unmap(gone);
    free(gone);
  }
  memset(seg, 0, sizeof(*seg));
}

/* ---- ncclMemAlloc --------------------------------------------------------- */

/* See transport.h. */
ncclResult_t brd_p2p_mem_alloc(size_t size, void **ptr_out) {
  ncclResult_t res = ncclSuccess;
  p2p_mem_t *m;
  int dev;
  CHECK(current_device(&dev));
  if (!vmm_supported(dev)) {
    void *p = NULL;
    CUDA_CHECK_GOTO(cudaMalloc(&p, size), "ncclMemAlloc : cudaMalloc", res, out);
    *ptr_out = p;
    return ncclSuccess;
  }
  BRD_CALLOC(m, 1, "an ncclMemAlloc record");
  CHECK_GOTO(vmm_alloc(dev, size, 1, m), res, fail_free);
  m->size = size;
  m->memalloc = 1;
  m->refs = 1;
  mem_insert(m);
  INFO(BRD_SUBSYS_ALLOC, "ncclMemAlloc: %zu bytes (%zu mapped) at %p on device %d "
       "through cuMem", size, m->alloc_size, m->ptr, dev);
  *ptr_out = m->ptr;
  return ncclSuccess;

fail_free:
  free(m);
out:
  return res;
}

/* See transport.h. */
ncclResult_t brd_p2p_mem_free(void *ptr) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&mems_lock);
  p2p_mem_t *m = mem_find_locked(ptr);
  int segment = m != NULL && !m->memalloc;
  if (m != NULL && m->memalloc) mem_unlink_locked(m);
  pthread_mutex_unlock(&mems_lock);
  if (segment) {
    WARN("ncclMemFree : %p is communicator channel memory, not an ncclMemAlloc "
         "block", ptr);
    return ncclInvalidArgument;
  }
  if (m != NULL) {
    mem_unmap(m);
    free(m);
    return ncclSuccess;
  }
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("ncclMemFree : cudaFree(%p) failed: %s; was it allocated by ncclMemAlloc?",
         ptr, cudaGetErrorString(e));
    res = ncclUnhandledCudaError;
  }
  return res;
}


/* ---- registered user memory ------------------------------------------------ */

/* See transport.h. */
ncclResult_t brd_p2p_export(const void *ptr, size_t size, brd_p2p_export_t *ex_out,
                            char *why, size_t n) {
  ncclResult_t res = ncclSuccess;
  struct cudaPointerAttributes attr;
  p2p_name_t nm;
  memset(ex_out, 0, sizeof(*ex_out));
  memset(&nm, 0, sizeof(nm));
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess ||
      attr.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    snprintf(why, n, "%p is not device memory (host, managed or unknown memory cannot be "
        "mapped by peers); allocate it with ncclMemAlloc", ptr);
    return ncclInvalidArgument;
  }
  nm.dev = (int16_t)attr.device;
  uint64_t base = 0, span = 0;
  int fd = -1;
  pthread_mutex_lock(&mems_lock);
  for (p2p_mem_t *m = mems; m != NULL; m = m->next) {
    if (!m->memalloc || (const char *)ptr < (char *)m->ptr ||
        (const char *)ptr >= (char *)m->ptr + m->alloc_size)
      continue;
    base = (uint64_t)(uintptr_t)m->ptr;
    span = m->alloc_size;
    if (m->mode == MODE_VMM &&
        drv()->mem_export(&fd, m->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
            CUDA_SUCCESS)
      fd = -2;
    break;
  }
  pthread_mutex_unlock(&mems_lock);
  if (fd == -2) {
    snprintf(why, n, "cuMemExportToShareableHandle refused the ncclMemAlloc block at %p",
        (void *)(uintptr_t)base);
    return ncclInvalidArgument;
  }
  if (fd >= 0) {
    res = brd_ipc_fdsrv_create(fd, &ex_out->srv);
    close(fd);
    if (res != ncclSuccess) return res;
    nm.mode = MODE_VMM;
    nm.serial = brd_ipc_fdsrv_serial(ex_out->srv);
    nm.u.vmm.alloc_size = span;
  } else {
    cudaIpcMemHandle_t ih;
    CUdeviceptr b = 0;
    size_t sz = 0;
    brd_cudrv_addr_range_fn_t addr_range = brd_cudrv_addr_range();
    if (base == 0) {
      if (addr_range == NULL ||
          addr_range(&b, &sz, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) {
        snprintf(why, n, "the allocation holding %p is unknown to the CUDA driver "
            "(cuMemGetAddressRange)", ptr);
        return ncclInvalidArgument;
      }
      base = (uint64_t)b;
      span = sz;
    }
    if (cudaIpcGetMemHandle(&ih, (void *)(uintptr_t)base) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, n, "CUDA IPC cannot export the allocation at %p (memory from cuMem "
          "without ncclMemAlloc, or a driver without IPC)", (void *)(uintptr_t)base);
      return ncclInvalidArgument;
    }
    nm.mode = MODE_IPC;
    memcpy(nm.u.ipc, &ih, sizeof(nm.u.ipc));
  }
  if ((uint64_t)(uintptr_t)ptr + size > base + span) {
    brd_ipc_fdsrv_destroy(ex_out->srv);
    ex_out->srv = NULL;
    snprintf(why, n, "[%p, +%zu) runs past the end of its allocation", ptr, size);
    return ncclInvalidArgument;
  }
  ex_out->handle.transport = BRD_TRANSPORT_P2P;
  ex_out->handle.pid = (uint32_t)getpid();
  ex_out->handle.size = span;
  ex_out->handle.local_addr = base;
  memcpy(ex_out->handle.name, &nm, sizeof(nm));
  ex_out->offset = (uint64_t)(uintptr_t)ptr - base;
  return ncclSuccess;
}

/* See transport.h. */
void brd_p2p_export_seal(brd_p2p_export_t *ex) {
  if (ex == NULL) return;
  brd_ipc_fdsrv_destroy(ex->srv);
  ex->srv = NULL;
}

/* See transport.h. */
int brd_p2p_seg_vmm(const brd_seg_t *seg, size_t *room_out) {
  return brd_p2p_mem_vmm_room(seg->ptr, room_out);
}

/* See transport.h. */
int brd_p2p_mem_vmm_room(const void *ptr, size_t *room_out) {
  int vmm = 0;
  const char *p = ptr;
  pthread_mutex_lock(&mems_lock);
  for (p2p_mem_t *m = mems; m != NULL && !vmm; m = m->next) {
    const char *base = m->ptr;
    if (m->mode != MODE_VMM || m->imported || p < base || p >= base + m->alloc_size) continue;
    vmm = 1;
    *room_out = (size_t)(base + m->alloc_size - p);
  }
  pthread_mutex_unlock(&mems_lock);
  return vmm;
}

/* See transport.h. */
ncclResult_t brd_p2p_import_user(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  p2p_name_t nm;
  int dev;
  if (h->transport != BRD_TRANSPORT_P2P || h->pid != (uint32_t)getpid())
    return p2p_import(h, seg_out);
  /* This process's own memory: the exporter's address, reachable once the
   * importing device has access (ncclMemAlloc blocks grant every peer). */
  memcpy(&nm, h->name, sizeof(nm));
  CHECK(current_device(&dev));
  if (dev != nm.dev && nm.mode == MODE_IPC)
    CHECK(peer_access(dev, nm.dev,
                      "set NCCL_LOCAL_REGISTER=0 to stop using registered buffers directly"));
  memset(seg_out, 0, sizeof(*seg_out));
  seg_out->ptr = (void *)(uintptr_t)h->local_addr;
  seg_out->size = (size_t)h->size;
  seg_out->handle = *h;
  return ncclSuccess;
}

#else /* !BRAID_CUDA: the ops exist so the table links; each one refuses. */

static ncclResult_t no_cuda(const char *what) {
  WARN("P2P: %s needs CUDA, but this library was built with CUDA=0; set "
       "BRAID_DEVICE=host", what);
  return ncclInvalidUsage;
}

static ncclResult_t p2p_create(size_t size, const char *tag, brd_seg_t *seg_out) {
  (void)size;
  (void)tag;
  (void)seg_out;
  return no_cuda("creating a GPU memory segment");
}

static ncclResult_t p2p_import(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  (void)h;
  (void)seg_out;
  return no_cuda("importing a GPU memory segment");
}

static void p2p_seal(brd_seg_t *seg) { (void)seg; }

static void p2p_close(brd_seg_t *seg) {
  if (seg != NULL) memset(seg, 0, sizeof(*seg));
}

/* See transport.h. */
ncclResult_t brd_p2p_mem_alloc(size_t size, void **ptr_out) {
  (void)size;
  (void)ptr_out;
  return no_cuda("device memory (ncclMemAlloc)");
}

/* See transport.h. */
ncclResult_t brd_p2p_mem_free(void *ptr) {
  (void)ptr;
  return no_cuda("device memory (ncclMemFree)");
}

/* See transport.h. */
ncclResult_t brd_p2p_export(const void *ptr, size_t size, brd_p2p_export_t *ex_out,
                            char *why, size_t n) {
  (void)ptr;
  (void)size;
  memset(ex_out, 0, sizeof(*ex_out));
  snprintf(why, n, "this library was built without CUDA (CUDA=0)");
  return ncclInvalidArgument;
}

/* See transport.h. */
void brd_p2p_export_seal(brd_p2p_export_t *ex) { (void)ex; }

/* See transport.h. */
int brd_p2p_seg_vmm(const brd_seg_t *seg, size_t *room_out) {
  (void)seg, (void)room_out;
  return 0;
}

/* See transport.h. */
int brd_p2p_mem_vmm_room(const void *ptr, size_t *room_out) {
  (void)ptr, (void)room_out;
  return 0;
}

/* See transport.h. */
ncclResult_t brd_p2p_import_user(const brd_seg_handle_t *h, brd_seg_t *seg_out) {
  (void)h;
  (void)seg_out;
  return no_cuda("importing registered GPU memory");
}
#endif /* BRAID_CUDA */

const brd_transport_ops_t brd_transport_p2p = {
    .name = "P2P",
    .kind = BRD_TRANSPORT_P2P,
    .can_connect = brd_p2p_usable,
    .seg_create = p2p_create,
    .seg_import = p2p_import,
    .seg_seal = p2p_seal,
    .seg_close = p2p_close,
};
