/*
 * Braid CUDA simulator: the CUDA runtime on CPU threads, for running the
 * library's CUDA-mode host code where there is no GPU (see README.md).
 *
 * runtime.c implements the CUDA runtime functions (the real headers'
 * prototypes, so the library's objects link against it unchanged). The
 * executor of src/device/exec_cuda.h comes in two flavours: exec_sim.c
 * implements it over the host executor; or src/device/exec.cu itself is
 * compiled for the CPU (devemu.h) and its kernels run on grid.c's blocks
 * of fibers. This header is what they share.
 */
#ifndef BRD_CUDASIM_H
#define BRD_CUDASIM_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A "kernel": fn(args) runs on the stream's worker thread when the stream
 * reaches it. args (bytes long) is copied now, as kernel parameters are:
 * every launch, and every replay of a captured graph, runs on its own
 * copy. On a capturing stream the launch is recorded instead. Returns what
 * cudaLaunchKernel would (and records it as the thread's last error). Any
 * thread; never blocks on the stream. */
cudaError_t brd_cudasim_launch(cudaStream_t stream, void (*fn)(void *args),
                               const void *args, size_t bytes);

/* Loads the kernel named by key (any address that stands for it) into the
 * current device's context, as CUDA's lazy loading does at a kernel's
 * first launch: the first load of key on a device waits until no kernel
 * runs on it (see the README's "Lazy loading"). cudaLaunchKernel and
 * cudaFuncGetAttributes call it for their kernel; the cudasim/ executor
 * for each of its kernels. Any thread. */
cudaError_t brd_cudasim_load(const void *key);

/* Whether [p, p + bytes) lies inside memory a kernel may touch: device,
 * managed and pinned allocations, registered host memory, IPC mappings.
 * Any thread; takes the runtime's lock briefly. */
int brd_cudasim_accessible(const void *p, size_t bytes);

/* A range of memory a kernel may touch, as brd_cudasim_find reports it. */
typedef struct brd_cudasim_range {
  const char *base;
  size_t size;
  unsigned long gen; /* brd_cudasim_mem_gen when it was looked up */
} brd_cudasim_range_t;

/* Counts removals from the simulator's memory table (frees, unregisters,
 * IPC closes): a range looked up under an older count may be gone. Read
 * it with an acquire load. */
extern unsigned long brd_cudasim_mem_gen;

/* Whether [p, p + bytes) lies inside one allocation a kernel may touch
 * (as brd_cudasim_accessible); fills *r with that allocation, or with
 * the nearest one below p (base NULL if none) when it does not. Any
 * thread; takes the runtime's lock briefly. */
int brd_cudasim_find(const void *p, size_t bytes, brd_cudasim_range_t *r);

/* Members a multicast object can have (one per simulated device). */
#define BRD_CUDASIM_MC_MAX 16

/* Part of a multicast mapping (cuMemMap of a multicast handle) and every
 * member's copy of it, as brd_cudasim_mc_find reports it. */
typedef struct brd_cudasim_mc {
  const char *base;              /* the multicast address range ... */
  size_t size;                   /* ... that every member's bind covers */
  int n;                         /* members (the object's numDevices) */
  char *uc[BRD_CUDASIM_MC_MAX];  /* member m's copy of base, in device order */
  unsigned long gen;             /* brd_cudasim_mem_gen when looked up */
} brd_cudasim_mc_t;

/* Whether [p, p + bytes) lies inside one multicast mapping whose object
 * has all its devices added and, for each, memory bound (and not freed)
 * under the whole range: returns 1 and fills *out; else returns 0 with
 * out->n = 0. Member order is device order: member m is the m-th added device by
 * ordinal. Any thread; takes the runtime's lock briefly. */
int brd_cudasim_mc_find(const void *p, size_t bytes, brd_cudasim_mc_t *out);

/* Marks the device as having faulted (as an illegal address does on a
 * GPU): every later synchronising call returns err. `why` is printed once
 * on stderr. Any thread. */
void brd_cudasim_fault(cudaError_t err, const char *why);

/* Which executor this simulator links: "exec_sim.c" or "exec.cu". */
const char *brd_cudasim_executor(void);

/* ---- kernels compiled for the CPU (devemu.h, grid.c) ---------------------- */

#define BRD_CUDASIM_KERNEL_MAGIC 0x6272646b65726e6cull /* "brdkernl" */

/* What a CPU-compiled kernel's address is, for cudaLaunchKernel: its
 * parameters' packed size, how to pack them from cudaLaunchKernel's args
 * array (by value, as a launch copies them), and how to run one thread of
 * it on a packed copy. */
typedef struct brd_cudasim_kernel {
  uint64_t magic;            /* BRD_CUDASIM_KERNEL_MAGIC */
  size_t args_bytes;
  void (*pack)(void **params, void *buf);
  void (*call)(void *buf);
} brd_cudasim_kernel_t;

/* Runs every block of a grid of kernel k over the packed args, one CPU
 * thread per block, the block's threads as fibers; returns when all have.
 * The stream worker's thread. */
void brd_cudasim_grid_run(const brd_cudasim_kernel_t *k, void *args, dim3 grid,
                          dim3 block);

/* The running kernel thread's built-in variables and barrier (grid.c; a
 * fiber of a block of brd_cudasim_grid_run only). */
const uint3 *brd_cudasim_thread_idx(void);
const uint3 *brd_cudasim_block_idx(void);
const dim3 *brd_cudasim_block_dim(void);
const dim3 *brd_cudasim_grid_dim(void);
int brd_cudasim_syncthreads_or(int pred);

#ifdef __cplusplus
}
#endif

#endif /* BRD_CUDASIM_H */
