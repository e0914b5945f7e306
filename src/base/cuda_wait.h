/*
 * Braid: bounded host waits on CUDA streams, and the work they gave up
 * on. The CUDA backend's setup copies (device/exec_cuda.c, core) and the
 * P2P transport's segment zeroing (transport/p2p.c) wait on private
 * streams that share the GPU's hardware queues with other ranks' streams:
 * such a wait can queue behind a peer's kernel that waits for this rank.
 * The wait gives up at BRAID_TIMEOUT or at the communicator's abort, and
 * remembers the work (one table for the process), so that every later
 * teardown on that device leaks instead of calling cudaFree, which would
 * wait for the whole device. CUDA builds only (BRAID_CUDA=1); C only.
 */
#ifndef BRD_BASE_CUDA_WAIT_H
#define BRD_BASE_CUDA_WAIT_H

#if BRAID_CUDA
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "nccl.h"

/* Waits, polling, until everything enqueued on s has run, for at most
 * BRAID_TIMEOUT seconds: a stream shares a hardware queue with other
 * streams of the GPU, and with ranks sharing the GPU a peer's work ahead
 * of it may wait for this rank. ncclSystemError (WARN naming `what` and
 * the cause) at the deadline, or (INFO) as soon as abort_flag (NULL: none)
 * is set; ncclUnhandledCudaError (WARN) when CUDA fails. On any of these,
 * *stuck_out is set to 1: the work was not seen to end,
 * so the caller must not free the memory it reads or writes, nor any other
 * memory of the device (cudaFree and cudaFreeHost wait for the whole
 * device, so they would hang behind the same queue): it leaks it
 * (brd_cuda_leak_info) instead. s may be destroyed (CUDA releases it
 * once its work has run). After a timeout or an abort the work stays
 * recorded until it ends (brd_cuda_stuck). Blocks. Any thread. */
ncclResult_t brd_cuda_stream_wait(cudaStream_t s, const char *what, _Atomic int *abort_flag,
                                  int *stuck_out);

/* Whether work that brd_cuda_stream_wait gave up on may still be
 * queued on device `dev`: then a cudaFree or cudaFreeHost there may never
 * return, and callers unwinding a creation leak instead. Queries without
 * blocking, forgetting the work seen done. Up to 64 pieces of work are
 * tracked at once (room is made from work that ended); one that cannot be
 * tracked marks its own device as stuck for good, and no other. Any
 * thread. */
int brd_cuda_stuck(int dev);

/* Logs (INFO) that `bytes` bytes of `what` are deliberately left allocated
 * after a stuck wait (brd_cuda_stream_wait), and why. Never blocks. */
void brd_cuda_leak_info(size_t bytes, const char *what);

#endif /* BRAID_CUDA */
#endif /* BRD_BASE_CUDA_WAIT_H */
