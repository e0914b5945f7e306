/*
 * Braid NVLS transport (nvls.c): a multicast (NVLink SHARP) mapping of one
 * window's memory on every local rank, made with the CUDA driver's
 * cuMulticast* calls, and the registry of windows that have one.
 *
 * The sequence, on the nranks local ranks together (each step's status is
 * gathered before the next step that could block on a peer):
 *   1. each rank: NCCL_NVLS_ENABLE, the multicast entry points,
 *      CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, the minimum and recommended
 *      multicast granularities, the window's alignment;    status gather 1
 *      (also: the same size everywhere, and no device taken by two ranks
 *      of one process: NVLS is off then)
 *   2. local rank 0: cuMulticastCreate; the handle goes to the others
 *      directly (threads of its process) or as a POSIX file descriptor
 *      served by ipc.c (other processes);                  gather 2
 *   3. every rank: import the handle, cuMulticastAddDevice; status gather 3
 *   4. every rank: cuMulticastBindMem (or BindAddr), cuMemAddressReserve,
 *      cuMemMap of the multicast handle, cuMemSetAccess;  status gather 4
 * Fail together: cuMulticastBind* blocks until every device of the object
 * was added, so a rank must never bind while a peer has given up. Gather 3
 * is that guarantee: if any rank failed anything in steps 1 to 3, every
 * rank releases what it holds and binds nothing. Gather 4 does the same for
 * a failure in step 4 (every rank unmaps and unbinds). The outcome is thus
 * the same on every local rank: all have the mapping, or none.
 *
 * NCCL_NVLS_ENABLE: 0 never (the rank still takes part in gather 1, so that
 * mixed settings disable every rank instead of hanging one); 1 required (a
 * failure anywhere is an error on this rank: ncclInvalidUsage when NVLS is
 * unsupported or switched off somewhere, ncclSystemError when a driver call
 * failed); 2 auto, the default (a failure disables NVLS with ncclSuccess;
 * collectives keep their P2P plans).
 *
 * Memory: the bound memory is the caller's (a cuMem allocation or a
 * cuMem-mapped address range); NVLS allocates no physical memory of its
 * own. The bound range is the window rounded up to the minimum multicast
 * granularity (that much of the caller's allocation must exist past the
 * window's start); the multicast object and its virtual range are that
 * rounded up to the recommended granularity. brd_nvls_mem reports both.
 */
#ifndef BRD_TRANSPORT_NVLS_H
#define BRD_TRANSPORT_NVLS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/cudrv.h"

/* Exchanges len bytes among the local ranks taking part: in is this rank's
 * contribution, out receives nranks * len bytes, local rank i's at i * len.
 * Blocks until every local rank contributed; returns an error (and the
 * NVLS setup returns it too, after releasing what it made) when its own
 * deadline passes or the caller's abort flag rises. Called from the thread
 * that called brd_nvls_create. */
typedef ncclResult_t (*brd_nvls_allgather_fn_t)(void *ctx, const void *in, void *out,
                                                size_t len);

/* What memory to bind. */
typedef enum {
  BRD_NVLS_BIND_MEM = 0,   /* cuMulticastBindMem: an allocation handle + offset */
  BRD_NVLS_BIND_ADDR = 1,  /* cuMulticastBindAddr: a cuMem-mapped address range */
} brd_nvls_bind_t;

/* Arguments of brd_nvls_create; every rank passes the same nranks, size and
 * bind kind. Borrowed for the call. */
typedef struct {
  int nranks;                      /* local ranks taking part (>= 1) */
  int rank;                        /* this rank's index among them */
  int dev;                         /* this rank's CUDA device ordinal */
  int enable;                      /* 0, 1, 2 as NCCL_NVLS_ENABLE; -1 reads it */
  brd_nvls_allgather_fn_t allgather;
  void *allgather_ctx;             /* borrowed; passed to allgather */
  const brd_cudrv_t *drv;          /* driver table; NULL: brd_cudrv_get() */
  brd_nvls_bind_t bind;
  uint64_t mem_handle;             /* BIND_MEM: CUmemGenericAllocationHandle */
  size_t mem_offset;               /* BIND_MEM: the window's offset in it */
  size_t mem_size;                 /* BIND_MEM: the allocation's size */
  uintptr_t addr;                  /* BIND_ADDR: the window's device address */
  size_t addr_room;                /* BIND_ADDR: bytes mapped from addr on (>= size) */
  size_t size;                     /* window bytes, > 0, the same on every rank */
  double timeout_s;                /* deadline of a descriptor fetch; <= 0: 60 s */
  _Atomic int *abort_flag;         /* borrowed, may be NULL */
  int share_fd;                    /* 1: hand the handle over as a descriptor even to
                                    * threads of the creator's process (tests) */
} brd_nvls_args_t;

/* The outcome, the same on every local rank. */
typedef struct {
  int enabled;          /* 1: the mapping exists (*nvls_out set) */
  int fail_rank;        /* the first local rank that failed; -1 when none */
  char fail_call[48];   /* what it failed: a driver call ("cuMulticastBindMem") or a
                         * check ("CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED") */
  int fail_code;        /* the CUresult of a failed driver call, else 0 */
  char why[400];        /* one line saying why NVLS is off; "" when enabled */
} brd_nvls_status_t;

/* Memory an NVLS mapping takes (brd_nvls_mem), for ncclCommMemStats. */
typedef struct {
  size_t gran_min;      /* CU_MULTICAST_GRANULARITY_MINIMUM */
  size_t gran_rec;      /* CU_MULTICAST_GRANULARITY_RECOMMENDED */
  size_t size;          /* the window's bytes */
  size_t bind_size;     /* bytes of the caller's memory bound: size rounded up to gran_min */
  size_t pad_bytes;     /* bind_size - size: the caller's bytes past the window bound too */
  size_t mc_size;       /* the multicast object and its virtual range: bind_size
                         * rounded up to gran_rec */
  size_t phys_bytes;    /* physical memory NVLS allocated itself: 0 (it binds the
                         * caller's) */
} brd_nvls_mem_t;

typedef struct brd_nvls brd_nvls_t;

/* Makes the multicast mapping of the window on this rank, together with the
 * other local ranks (which call it at the same time with their own args);
 * see the top of this file for the sequence. Blocks in the allgathers and
 * in the driver's bind; every wait is bounded by the allgather's deadline
 * or args->timeout_s and honours args->abort_flag. The thread must have
 * dev's context current (cudaSetDevice).
 * Returns ncclSuccess with *nvls_out set and status_out->enabled 1 when
 * every rank has the mapping; ncclSuccess with *nvls_out NULL when NVLS is
 * off on every rank (NCCL_NVLS_ENABLE 0 or 2): status_out says which rank
 * failed what, a driver failure is one WARN naming them, an unsupported
 * system one INFO line. With NCCL_NVLS_ENABLE=1 a failure returns
 * ncclInvalidUsage (unsupported, or off on some rank) or ncclSystemError
 * (a driver call failed) with a WARN. ncclInvalidArgument (WARN) for bad
 * args; an allgather's error is returned as it is. Whatever fails, nothing
 * this call made is left behind. status_out may be NULL. */
ncclResult_t brd_nvls_create(const brd_nvls_args_t *args, brd_nvls_t **nvls_out,
                             brd_nvls_status_t *status_out);

/* Unmaps the multicast range, frees its addresses, unbinds this rank's
 * memory and releases the multicast handle (the driver frees the object
 * when the last rank's reference goes). Local: no peer is waited for; the
 * caller makes sure no peer still issues multimem operations on the
 * window. Driver errors are logged at INFO (the caller may have freed the
 * bound memory already). NULL is a no-op. */
void brd_nvls_destroy(brd_nvls_t *nvls);

/* The multicast address of the window's first byte (the window at offset 0
 * of the multicast range). */
void *brd_nvls_mc_ptr(const brd_nvls_t *nvls);

/* Fills *mem_out with the sizes above. */
void brd_nvls_mem(const brd_nvls_t *nvls, brd_nvls_mem_t *mem_out);

/* ---- the registry of bound windows (what the multimem getters read) ------- */

/* Records that window (any non-NULL key: the ncclWindow_t) has a multicast
 * mapping: mc_base is the multicast object's address, the window starts
 * win_offset bytes into it and spans size bytes. Replaces an earlier
 * record of the same window. ncclSystemError (WARN) when out of memory.
 * Any thread. */
ncclResult_t brd_nvls_window_bind(const void *window, void *mc_base, size_t win_offset,
                                  size_t size);

/* Records why window has no multicast mapping (why is copied, truncated to
 * 255 bytes), replacing an earlier record. ncclSystemError (WARN) when out
 * of memory. Any thread. */
ncclResult_t brd_nvls_window_unbound(const void *window, const char *why);

/* Drops window's record; no record is a no-op. Any thread. */
void brd_nvls_window_forget(const void *window);

/* The multicast address of byte offset of window. mc_base: NULL for the
 * window's own multicast object (ncclGetLsaMultimemDevicePointer), else the
 * base named by a caller's ncclMultimemHandle, which must be the one the
 * window is bound to. Returns ncclSuccess with *ptr_out set;
 * ncclInvalidUsage when the window has no mapping or mc_base is another
 * object's; ncclInvalidArgument when offset is past the window. Then why
 * (whylen bytes) says which and why, and nothing is logged: the caller
 * WARNs with its own name. Any thread. */
ncclResult_t brd_nvls_window_lookup(const void *window, size_t offset, const void *mc_base,
                                    void **ptr_out, char *why, size_t whylen);

#endif /* BRD_TRANSPORT_NVLS_H */
