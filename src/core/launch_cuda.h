/*
 * Braid: the CUDA backend of the collective runtime (launch.c). launch.c
 * builds the same works in both modes (plans, pieces, sequence numbers,
 * channel pointers into every rank's window); in CUDA mode this file
 * provides the window memory and turns each work into an executor kernel
 * enqueued on the user's stream. The host never waits for the kernels.
 *
 * Windows. At the rank's first launch each rank reports its capabilities
 * (brd_launch_cuda_caps: P2P with every peer, the blocks its GPU can run
 * for every rank sharing it at once); all agree, then every rank creates
 * its window through the P2P transport (device memory), or in host memory
 * registered with CUDA when some pair cannot use P2P, and imports its
 * peers' windows. This backend owns the windows; launch.c only holds their
 * device addresses.
 *
 * Sequence numbers. Collective works take their epoch and their scratch
 * and staging phase from a cursor the kernels keep on the device (the
 * executor's device epochs), so a collective captured into a CUDA graph
 * gets fresh ones at every replay; their output goes to the window's
 * staging half of that phase and a copy-out kernel, reading the same
 * phase, moves it to the user's buffer. Point-to-point works keep the
 * host's per-pair epochs on a second executor status, so they cannot be
 * captured (ncclInvalidUsage).
 *
 * Asynchronous errors. A kernel that waits BRAID_TIMEOUT seconds without
 * progress, or that the abort flag stops, records the failure in the
 * rank's executor status (mapped host memory). brd_launch_cuda_poll reads
 * it without synchronising and stores it in comm->async_error, so
 * ncclCommGetAsyncError reports it; every later launch polls too and
 * returns the failure.
 */
#ifndef BRD_CORE_LAUNCH_CUDA_H
#define BRD_CORE_LAUNCH_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "core/enqueue.h"
#include "device/exec_host.h"
#include "transport/transport.h"

struct ncclComm;
struct brd_rt_cuda;

/* What a rank reports before any window exists; all ranks agree on the
 * weakest (launch.c). */
typedef struct brd_launch_caps {
  int32_t p2p_ok;       /* 1: GPU peer-to-peer with every peer */
  int32_t nb_max;       /* most blocks per rank a plan may use (>= 1) */
  uint64_t stage_bytes; /* one staging half */
} brd_launch_caps_t;

/* One launch (brd_launch_run) in CUDA mode; the caller's memory. */
typedef struct brd_launch_cuda_ctx {
  int saved_dev;        /* the calling thread's device, restored at end */
  cudaStream_t stream;  /* the first call's stream: every work goes here */
  int capturing;        /* stream is being captured into a CUDA graph */
  const brd_call_t *calls;
  int ncalls;
  size_t snap_used;     /* bytes of the snapshot buffer given out */
  int saved_mode;       /* the thread's capture mode, restored at end */
  int mode_set;
} brd_launch_cuda_ctx_t;

/* A copy-out of a collective work: nseg segments of seg_bytes from the
 * staging half of the work's phase (seg_bytes apart) to dst (dst_stride
 * apart). nseg 0: nothing to copy. */
typedef struct brd_launch_copy {
  void *dst;
  uint32_t nseg;
  size_t seg_bytes;
  size_t dst_stride;
} brd_launch_copy_t;

/* This rank's capabilities (step 1 above). ncclInvalidUsage for ranks on
 * several hosts (no network transport yet) and for more ranks on one GPU
 * than it has SMs; ncclUnhandledCudaError when CUDA fails. why_out
 * receives the reason P2P is not usable, if it is not. Calling thread. */
ncclResult_t brd_launch_cuda_caps(struct ncclComm *comm, brd_launch_caps_t *caps_out,
                                  char *why_out, size_t nwhy);

/* Creates comm->rt_cuda with this rank's window of win_bytes (zeroed), in
 * device memory (p2p) or registered host memory, and returns its handle
 * for the peers and its device address. Local; the calling thread's
 * device is restored. */
ncclResult_t brd_launch_cuda_create(struct ncclComm *comm, int p2p, size_t win_bytes,
                                    brd_seg_handle_t *handle_out, char **base_out);

/* Imports rank r's window; returns its device address. Local. */
ncclResult_t brd_launch_cuda_import(struct ncclComm *comm, int r,
                                    const brd_seg_handle_t *handle, char **base_out);

/* Every peer has imported this rank's window: stops new imports. */
void brd_launch_cuda_seal(struct ncclComm *comm);

/* Starts a launch of ncalls calls: switches to comm->cuda_dev, relaxes
 * the thread's stream-capture mode (the launch may allocate: the first
 * one's windows, a plan's first upload), learns whether the first call's
 * stream is being captured and, once a backend exists, returns an earlier
 * launch's failure. Before the first launch's connection. The calling
 * thread; brd_launch_cuda_end undoes it whatever this returns. */
ncclResult_t brd_launch_cuda_begin(struct ncclComm *comm, const brd_call_t *calls,
                                   int ncalls, brd_launch_cuda_ctx_t *ctx);

/* Orders the launch after the rank's previous one (when it used another
 * stream) and after the group's other streams. After the connection. */
ncclResult_t brd_launch_cuda_order(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx);

/* Enqueues a copy of bytes from src to dst on the launch's stream (a
 * one-rank communicator's collective); nothing when dst == src. */
ncclResult_t brd_launch_cuda_copy(brd_launch_cuda_ctx_t *ctx, void *dst, const void *src,
                                  size_t bytes);

/* A device copy of bytes at src, enqueued now on the launch's stream, for
 * a send whose buffer overlaps a receive of its group; valid until the
 * launch's kernels have run. total: the bytes all of the launch's
 * snapshots take, each rounded up to 256 (the first call may allocate
 * that much, after waiting for the rank's earlier launches).
 * ncclInvalidUsage while capturing. */
ncclResult_t brd_launch_cuda_snapshot(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                      const void *src, size_t bytes, size_t total,
                                      void **copy_out);

/* Enqueues one work: a (pointers into the windows, from launch.c; its
 * epoch and phase are ignored for a collective work, which uses device
 * epochs), then its copy-out. p2p: a point-to-point work (host epochs;
 * ncclInvalidUsage while capturing). stage_half: a collective's output
 * and its channels' peer outputs are staging of two halves of that many
 * bytes, the launch using the half of its phase; 0: the pointers as
 * given. out_direct: a->output is the user's buffer, so it gets no half
 * offset even when stage_half is not 0 (the peers' staging does; with
 * a->xchg a peer that publishes its own buffer gets none either).
 * a->xchg: the kernel exchanges outputs with its channel peers first
 * (a->chans' xchg fields; at most BRD_IR_XCHG_MAX_CHANS channels, else
 * ncclInvalidUsage). scalar_dev: a PreMulSum scalar the kernel reads from
 * device memory (ncclScalarDevice), else NULL and the scalar is
 * a->scalar. Uploads the plan to the device at its first use. Never
 * synchronises otherwise. */
ncclResult_t brd_launch_cuda_work(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                  const brd_exec_args_t *a, int p2p,
                                  size_t stage_half, int out_direct,
                                  const void *scalar_dev,
                                  const brd_launch_copy_t *copy);

/* Ends a launch: records its completion (not while capturing), makes the
 * group's other streams wait for it, restores the thread's capture mode
 * and device. Returns
 * res, or a CUDA failure if res was ncclSuccess. */
ncclResult_t brd_launch_cuda_end(struct ncclComm *comm, brd_launch_cuda_ctx_t *ctx,
                                 ncclResult_t res);

/* Reads the executor statuses of comm's backend: ncclSuccess when no
 * launch has failed (or no backend exists yet), else the failure
 * (ncclRemoteError for a timed-out wait, with its WARN naming rank, block,
 * op and peer, once; ncclSystemError after an abort), which is also stored
 * in comm->async_error if that still holds ncclSuccess. Never blocks; any
 * thread (ncclCommGetAsyncError's). */
ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm);

/* Raises the executor's abort flags for comm's backend: running and later
 * kernels of this rank leave at their next wait. Never blocks; any thread
 * (ncclCommAbort's, before brd_launch_cuda_destroy). No-op without one. */
void brd_launch_cuda_abort(struct ncclComm *comm);

/* Frees a backend (comm teardown). First waits for the rank's last launch
 * to finish on the device: up to BRAID_TIMEOUT + 5 seconds, then it raises
 * the abort flags and waits 2 more; if the kernels still run it leaks the
 * backend (WARN) rather than free memory they use. NULL is a no-op. The
 * thread destroying the communicator. */
void brd_launch_cuda_destroy(struct brd_rt_cuda *rt);

#endif /* BRD_CORE_LAUNCH_CUDA_H */
