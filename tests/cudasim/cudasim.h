/*
 * Braid CUDA simulator: the CUDA runtime on CPU threads, for running the
 * library's CUDA-mode host code where there is no GPU (see README.md).
 *
 * runtime.c implements the CUDA runtime functions (the real headers'
 * prototypes, so the library's objects link against it unchanged);
 * exec_sim.c implements the executor of src/device/exec_cuda.h over the
 * host executor. This header is what the two share.
 */
#ifndef BRD_CUDASIM_H
#define BRD_CUDASIM_H

#include <stddef.h>

#include <cuda_runtime_api.h>

/* A "kernel": fn(args) runs on the stream's worker thread when the stream
 * reaches it. args (bytes long) is copied now, as kernel parameters are:
 * every launch, and every replay of a captured graph, runs on its own
 * copy. On a capturing stream the launch is recorded instead. Returns what
 * cudaLaunchKernel would (and records it as the thread's last error). Any
 * thread; never blocks on the stream. */
cudaError_t brd_cudasim_launch(cudaStream_t stream, void (*fn)(void *args),
                               const void *args, size_t bytes);

/* Whether [p, p + bytes) lies inside memory a kernel may touch: device,
 * managed and pinned allocations, registered host memory, IPC mappings.
 * Any thread; takes the runtime's lock briefly. */
int brd_cudasim_accessible(const void *p, size_t bytes);

/* Marks the device as having faulted (as an illegal address does on a
 * GPU): every later synchronising call returns err. `why` is printed once
 * on stderr. Any thread. */
void brd_cudasim_fault(cudaError_t err, const char *why);

#endif /* BRD_CUDASIM_H */
