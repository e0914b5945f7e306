/*
 * Braid: the collective runtime of a communicator in CUDA mode, the twin of
 * launch.c's host path. Calls become executor kernels enqueued on the
 * user's stream; the host never waits for them.
 *
 * Every rank owns one window of channel memory (semaphores, scratch, two
 * output staging halves), created at the rank's first CUDA launch through
 * the P2P transport, or in host memory registered with CUDA when some pair
 * of ranks cannot use P2P. Windows are exchanged over the bootstrap
 * network, so every rank must reach its first launch (all do, at the same
 * call of the same sequence).
 *
 * Asynchronous errors. A kernel that waits BRAID_TIMEOUT seconds without
 * progress, or that the abort flag stops, records the failure in the rank's
 * executor status block (mapped host memory). brd_launch_cuda_poll reads it
 * without synchronising and stores the failure in comm->async_error, so
 * ncclCommGetAsyncError reports it once it calls brd_launch_cuda_poll
 * first; every later brd_launch_cuda_run polls too and returns the failure.
 */
#ifndef BRD_CORE_LAUNCH_CUDA_H
#define BRD_CORE_LAUNCH_CUDA_H

#include "nccl.h"
#include "enqueue.h"

struct ncclComm;
struct brd_rt_cuda;

/* Runs ncalls checked calls of comm (CUDA mode), in order, on each call's
 * stream: AllReduce only for now (others: ncclInvalidUsage, "not
 * implemented"). Creates the runtime at the first call, which is collective
 * and blocks on every rank's first call; afterwards it enqueues work and
 * returns without waiting, allocating or synchronising, so successive calls
 * on one stream keep stream order. Switches the calling thread to
 * comm->cuda_dev for the call and restores its device.
 * Errors: ncclInvalidUsage for a stream being captured into a CUDA graph
 * (not supported yet), for ranks on several hosts (no network transport
 * yet), or for more ranks on one GPU than it has SMs;
 * ncclUnhandledCudaError when CUDA fails; ncclRemoteError / ncclSystemError
 * when an earlier launch timed out / was aborted. Failures other than
 * argument errors also set comm->async_error. The caller's thread, or a
 * group worker thread; not concurrent with other calls on comm. */
ncclResult_t brd_launch_cuda_run(struct ncclComm *comm, const brd_call_t *calls,
                                 int ncalls);

/* Reads the executor status of comm's runtime: ncclSuccess when no launch
 * has failed (or no runtime exists yet), else the failure (ncclRemoteError
 * for a timed-out wait, with its WARN naming rank, block, op and peer, once;
 * ncclSystemError after an abort), which is also stored in
 * comm->async_error if that still holds ncclSuccess. Never blocks; any
 * thread (ncclCommGetAsyncError's). */
ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm);

/* Raises the executor's abort flag for comm's runtime: running and later
 * kernels of this rank leave at their next wait. Never blocks; any thread
 * (ncclCommAbort's, before brd_launch_cuda_destroy). No-op without a
 * runtime. */
void brd_launch_cuda_abort(struct ncclComm *comm);

/* Frees a runtime (comm teardown). First waits for the rank's last call to
 * finish on the device: up to BRAID_TIMEOUT + 5 seconds, then it raises the
 * abort flag and waits 2 more; if the kernels still run it leaks the
 * runtime (WARN) rather than free memory they use. Never waits on peers
 * otherwise. NULL is a no-op. The thread destroying the communicator. */
void brd_launch_cuda_destroy(struct brd_rt_cuda *rt);

#endif /* BRD_CORE_LAUNCH_CUDA_H */
