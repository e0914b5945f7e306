/*
 * Braid transports: how the memory behind a channel comes to exist and is
 * shared with peers. Each transport is one const struct of function
 * pointers, chosen once when a channel is connected; the data path never
 * asks which transport it runs on.
 *
 * A segment is memory one rank creates and others import. Its handle is a
 * fixed-size, position-independent blob that crosses process boundaries
 * through the bootstrap network.
 */
#ifndef BRD_TRANSPORT_TRANSPORT_H
#define BRD_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/ipc.h"

#define BRD_SEG_HANDLE_BYTES 96

typedef struct {
  uint32_t transport;          /* brd_transport_kind_t that made it */
  uint32_t pid;                /* creating process */
  uint64_t size;               /* bytes */
  uint64_t local_addr;         /* creator's address (same-process import) */
  char name[BRD_SEG_HANDLE_BYTES - 24]; /* transport-specific name */
} brd_seg_handle_t;

_Static_assert(sizeof(brd_seg_handle_t) == BRD_SEG_HANDLE_BYTES,
               "segment handles cross the network: keep the size fixed");

typedef enum {
  BRD_TRANSPORT_SHM = 1,   /* host memory: POSIX shm between processes */
  BRD_TRANSPORT_P2P = 2,   /* GPU memory: cuMem / CUDA IPC */
  BRD_TRANSPORT_NET = 3,   /* port channels over sockets or IB (proxy) */
  BRD_TRANSPORT_NVLS = 4,  /* switch channels: NVLS multicast */
  BRD_TRANSPORT_HOST = 5,  /* host memory of one process (ranks as threads) */
} brd_transport_kind_t;

typedef struct brd_seg {
  void *ptr;               /* mapped address in this process */
  size_t size;
  int owner;               /* 1: this process created it and unlinks it */
  brd_seg_handle_t handle;
} brd_seg_t;

/* Which executor a rank runs (BRAID_DEVICE, resolved by core/device.c). */
typedef enum {
  BRD_DEVICE_HOST = 0,       /* host executor: CPU threads over host memory */
  BRD_DEVICE_CUDA = 1,       /* CUDA executor */
} brd_device_backend_t;

/* One rank's identity, exchanged by allgather at init (core/device.c fills
 * it); transports decide from two of them whether they connect the pair.
 * Plain data, the same layout on every rank (all run the same build). */
typedef struct brd_peer_info {
  uint64_t host_hash;        /* hostname + boot id, or BRAID_HOSTID/NCCL_HOSTID */
  uint64_t pid_hash;         /* pid + pid namespace: equal means same process */
  int64_t bus_id;            /* PCI bus id as a number (NCCL's form); -1 in host mode */
  int32_t pid;
  int32_t dev;               /* CUDA device, or the virtual device in host mode */
  int32_t cuda_cc;           /* 10*major + minor; 0 in host mode */
  int32_t p2p;               /* 1: may use GPU peer-to-peer channels */
  int32_t backend;           /* brd_device_backend_t */
  int32_t version;           /* NCCL_VERSION_CODE of the library */
  char bus_id_str[16];       /* "0000:3b:00.0", or "host" */
} brd_peer_info_t;

typedef struct brd_transport_ops {
  const char *name;
  brd_transport_kind_t kind;
  /* 1 when a segment rank a creates can be imported by rank b (and b's by
   * a), else 0 with the reason in why (n bytes, always NUL-terminated; why
   * may be NULL when n is 0). Symmetric; reads only the two identities,
   * the parameters and, for P2P, sysfs and the CUDA runtime; never blocks
   * on peers. Any thread. */
  int (*can_connect)(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                     size_t n);
  /* Creates a segment of size bytes, zero-filled, that peers may import. */
  ncclResult_t (*seg_create)(size_t size, const char *tag, brd_seg_t *seg_out);
  /* Maps a peer's segment from its handle. */
  ncclResult_t (*seg_import)(const brd_seg_handle_t *h, brd_seg_t *seg_out);
  /* Stops new imports (e.g. unlinks the name) once every peer has mapped. */
  void (*seg_seal)(brd_seg_t *seg);
  /* Unmaps; the creator also releases the name. NULL-safe on empty segs. */
  void (*seg_close)(brd_seg_t *seg);
} brd_transport_ops_t;

/* SHM: POSIX shared memory; connects ranks of one host (shm.c). */
extern const brd_transport_ops_t brd_transport_shm;
/* HOST: plain memory; connects ranks that are threads of one process
 * (host.c). */
extern const brd_transport_ops_t brd_transport_host;

/* What the memory behind a communicator's channels is. */
typedef enum {
  BRD_TRANSPORT_MEM_HOST = 0,  /* host memory: HOST, else SHM */
  BRD_TRANSPORT_MEM_GPU = 1,   /* GPU memory peers map directly: P2P */
} brd_transport_mem_t;

/* The transport rank me (of nranks, identities in peers) uses for channel
 * memory of kind mem: the first, in the order above, whose can_connect
 * accepts me with every other rank. Returns NULL when none does, with
 * "rank <r>: <reason>" for the first rank the last candidate refused in
 * why (n bytes; why may be NULL when n is 0); on success why is "". No
 * WARN: the caller decides whether a refusal is an error. peers is not
 * read when nranks is 1. The one place where core picks a transport. Any
 * thread; reads sysfs for P2P; never blocks on peers. */
const brd_transport_ops_t *brd_transport_choose(const brd_peer_info_t *peers, int nranks,
                                                int me, brd_transport_mem_t mem,
                                                char *why, size_t n);

/* Like brd_transport_choose, for a communicator whose ranks need not all
 * share memory. For host memory: port_out[r] (nranks bytes) is set for
 * each peer no host-memory transport connects with me (another host, or
 * NCCL_SHM_DISABLE=1 and NCCL_P2P_DISABLE=1 for ranks of one host): its
 * channels are port channels, over a net. The transport returned makes
 * this rank's window and connects it with every other peer (those
 * sharing memory are the same set on each of them: the relation is one
 * host, or one process). For GPU memory: every port_out[r] is 0 and the
 * result is brd_transport_choose's. NULL with the reason in why when no
 * transport connects the memory peers. Any thread; never blocks. */
/* 1 when no host-memory transport connects ranks a and b, so that their
 * channels are port channels (brd_transport_split's rule for one pair).
 * Symmetric; any thread; never blocks. */
int brd_transport_host_port(const brd_peer_info_t *a, const brd_peer_info_t *b);

const brd_transport_ops_t *brd_transport_split(const brd_peer_info_t *peers, int nranks, int me,
                                               brd_transport_mem_t mem, uint8_t *port_out,
                                               char *why, size_t n);

/* ---- P2P: GPU memory shared between the ranks of one host (p2p.c) -------
 *
 * Segments live on the calling thread's current CUDA device and are zeroed.
 * A peer in the same process imports the creator's own pointer (its device
 * is granted access first); a peer in another process maps the memory
 * through cuMem (a POSIX file descriptor passed over an abstract Unix
 * socket) or, where cuMem is unavailable, through CUDA IPC. seg_seal stops
 * serving the descriptor. In a CUDA=0 build every op fails with
 * ncclInvalidUsage. */
extern const brd_transport_ops_t brd_transport_p2p;

/* brd_transport_p2p.can_connect (p2p_path.c): 1 when ranks a and b may
 * reach each other's GPU memory directly, else 0 with the reason in why (n
 * bytes, always NUL-terminated; why may be NULL when n is 0). No:
 * different hosts, a rank on the host executor, NCCL_P2P_DISABLE=1 here or
 * on either rank, NCCL_P2P_LEVEL below the path between the two GPUs (the
 * default is NCCL's: SYS, PXB on Intel and ARM CPUs), no peer access
 * (cudaDeviceCanAccessPeer), or, without an explicit NCCL_P2P_LEVEL, ACS
 * suspected on the PCIe switch the GPUs share (they sit in different IOMMU
 * groups with DMA translation on). Two ranks on one GPU are always yes
 * unless P2P is disabled. Reads sysfs and, in CUDA builds, queries the CUDA
 * runtime; never blocks on peers. Any thread. */
int brd_p2p_usable(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                   size_t n);

/* ncclMemAlloc's device path: size bytes on the current device, with cuMem
 * (rounded up to the recommended granularity, exportable as a POSIX file
 * descriptor, accessible from every device with peer access) where the
 * driver supports it and NCCL_CUMEM_ENABLE is not 0, else cudaMalloc.
 * ncclUnhandledCudaError (WARN) when CUDA fails; ncclInvalidUsage in a
 * CUDA=0 build. Any thread. */
ncclResult_t brd_p2p_mem_alloc(size_t size, void **ptr_out);

/* Frees memory from brd_p2p_mem_alloc (cuMem: unmap, free the address
 * range, release; otherwise cudaFree). ncclInvalidArgument (WARN) for a
 * pointer that is a live P2P segment rather than an allocation;
 * ncclUnhandledCudaError (WARN) when cudaFree refuses the pointer. Any
 * thread. */
ncclResult_t brd_p2p_mem_free(void *ptr);


/* Registered user memory (ncclCommRegister, windows): device memory the
 * user allocated, exported so peers on this host can map it. */
typedef struct brd_p2p_export {
  brd_seg_handle_t handle; /* what peers import (brd_p2p_import_user) */
  uint64_t offset;         /* the exported pointer minus what the handle maps */
  brd_ipc_fdsrv_t *srv;    /* owned: cuMem descriptor server, until sealed */
} brd_p2p_export_t;

/* Exports the allocation holding [ptr, ptr + size): an ncclMemAlloc block
 * through its cuMem descriptor, other device memory (cudaMalloc) through
 * CUDA IPC from the allocation's base (cuMemGetAddressRange).
 * ncclInvalidArgument, without a WARN and with the reason in why (n
 * bytes), for memory peers cannot map (host or managed memory, cuMem
 * memory not from ncclMemAlloc, a CUDA=0 build); ncclSystemError (WARN)
 * when the descriptor server cannot start. Any thread. */
ncclResult_t brd_p2p_export(const void *ptr, size_t size, brd_p2p_export_t *ex_out,
                            char *why, size_t n);

/* Stops serving the descriptor (every peer has imported). NULL-safe. */
void brd_p2p_export_seal(brd_p2p_export_t *ex);

/* Whether a segment this process made with the P2P transport is a cuMem
 * (VMM) mapping, which multicast can bind by address (nvls.c): 1 with the
 * bytes mapped from seg->ptr on in *room_out; 0 for CUDA IPC memory or an
 * unknown segment. Any thread. */
int brd_p2p_seg_vmm(const brd_seg_t *seg, size_t *room_out);

/* Whether ptr lies in cuMem (VMM) memory this process allocated with the
 * P2P transport (ncclMemAlloc blocks and segments, not imports), which
 * multicast can bind by address: 1 with the bytes mapped from ptr to the
 * allocation's end in *room_out; 0 otherwise (cudaMalloc or CUDA IPC
 * memory, host memory, a CUDA=0 build). Any thread. */
int brd_p2p_mem_vmm_room(const void *ptr, size_t *room_out);

/* Maps what a peer exported with brd_p2p_export: the allocation starts at
 * seg_out->ptr (add the exporter's offset). Another process's memory is
 * mapped once per process and reference counted; this process's own is
 * its address. Close with brd_transport_p2p.seg_close. Errors as
 * seg_import. Blocks (descriptor fetch); any thread. */
ncclResult_t brd_p2p_import_user(const brd_seg_handle_t *h, brd_seg_t *seg_out);

#endif /* BRD_TRANSPORT_TRANSPORT_H */
