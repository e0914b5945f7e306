/*
 * Braid CUDA executor: runs one rank's part of a plan (device/ir.h) as one
 * kernel launch, one thread block per plan block. It reads the IR exactly as
 * the host executor does (exec_host.c is the reference); this header is the
 * host-side, C-callable interface, implemented in exec_cuda.c (plain C:
 * objects, checks, launch set-up) over the kernels of exec.cu.
 *
 * Objects, all created on the calling thread's current CUDA device:
 *   brd_exec_cuda_plan_t    a plan blob copied once to device memory, plus
 *                           a host copy of its header (one per plan);
 *   brd_exec_cuda_status_t  one per rank (communicator): the abort flag and
 *                           the hang report in mapped pinned host memory,
 *                           and in device memory the block barrier and the
 *                           device-side sequence cursor. Launches that share
 *                           a status must be ordered on one stream;
 *   brd_exec_cuda_chan_t    per channel of the rank, the peer pointers the
 *                           kernel uses. Up to BRD_EXEC_CUDA_INLINE_CHANS
 *                           channels travel by value in the kernel
 *                           parameters (so every launch, and every replay of
 *                           a captured graph, carries its own); a larger
 *                           table must be a device array the caller keeps
 *                           unchanged until the kernel has finished
 *                           (brd_exec_cuda_chans_create).
 *
 * Launching (brd_exec_cuda_launch) computes the launch layout on the host
 * and enqueues the kernel: no allocation, no copy and no synchronisation,
 * so it may be captured into a CUDA graph. Sequence numbers come either
 * from the caller (args->epoch / args->phase, as for the host executor) or,
 * with args->device_epoch, from a cursor the kernel keeps in the status
 * block, so a captured graph gets fresh ones at every replay (the scratch
 * phase then alternates per launch on the device). A status uses one of
 * the two for its whole life, the same on every rank.
 *
 * Errors: a wait that makes no progress for the timeout records a hang
 * report (first block to time out wins) and the rank's launch stops; a
 * raised abort flag stops it too. The host learns either from
 * brd_exec_cuda_poll after the stream has been synchronised. Once a launch
 * failed, later launches on the same status return at once until
 * brd_exec_cuda_status_reset.
 *
 * The functions exist in CUDA builds only (BRAID_CUDA=1); the types are
 * always declared.
 *
 * Every memory a kernel touches (buffers, scratch, semaphores, the channel
 * table) must be device-accessible from the rank's device. Scratch and
 * semaphores are zero when allocated and never reset; scratch bases and
 * scratch phases (scratch_bytes / 2, or all of it for a one-phase plan)
 * are multiples of 16 bytes (LL packets are read 16 bytes at a time).
 */
#ifndef BRD_DEVICE_EXEC_CUDA_H
#define BRD_DEVICE_EXEC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/exec.h"
#include "device/ir.h"

#if BRAID_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator's abort flag as the setup waits below read it (C11
 * atomics; the CUDA sources, compiled as C++, only see the declarations). */
#ifdef __cplusplus
typedef int brd_exec_abort_flag_t;
#else
typedef _Atomic int brd_exec_abort_flag_t;
#endif

/* Threads per block of every executor kernel. */
#define BRD_EXEC_CUDA_NTHREADS 512

/* Channels (and per-channel epochs) a launch can carry in its kernel
 * parameters. */
#define BRD_EXEC_CUDA_INLINE_CHANS 32

/* Segments of separate buffers a launch can carry, per direction. */
#define BRD_EXEC_CUDA_INLINE_SEGS 48

/* The hang report and a segment of a point-to-point table are the host
 * executor's (device/exec.h); these names say the same. */
typedef brd_exec_hang_t brd_exec_cuda_hang_t;
typedef brd_exec_seg_t brd_exec_cuda_seg_t;
#define BRD_EXEC_CUDA_WAIT_SEM BRD_EXEC_WAIT_SEM
#define BRD_EXEC_CUDA_WAIT_PACKET BRD_EXEC_WAIT_PACKET
#define BRD_EXEC_CUDA_WAIT_BARRIER BRD_EXEC_WAIT_BARRIER
#define BRD_EXEC_CUDA_WAIT_XCHG BRD_EXEC_WAIT_XCHG

/* What the rank reaches through one channel, as device pointers. All
 * borrowed; the same meaning as brd_exec_chan_t. */
typedef struct brd_exec_cuda_chan {
  void *peer_scratch;   /* peer's scratch base (both phases) */
  void *peer_output;    /* peer's output buffer of this launch */
  uint64_t *peer_sems;  /* peer's inbound semaphores from this rank */
  uint64_t *sems;       /* this rank's inbound semaphores from the peer */
  const void *peer_input; /* peer's input (BRD_IR_PLAN_F_PEER_INPUT plans) */
  /* Output exchange (args xchg; device/ir.h): peer_output above is then
   * the peer's staging, used unless the peer publishes its own buffer. */
  uint64_t *xchg_pub;   /* this rank's slot in the peer's window */
  uint64_t *xchg_slot;  /* the peer's slot in this rank's window */
  void *xchg_output;    /* this rank's output as the peer maps it (only
                         * published, never dereferenced here); NULL: its
                         * staging (output, out_stride) */
  /* A switch channel (BRD_IR_CHAN_SWITCH, device/ir.h) reuses three
   * fields (kernel parameters hold no more bytes): peer_scratch is the
   * scratch base through the multicast mapping, peer_sems the switch
   * semaphores through it (multimem ops), sems this rank's own (unicast)
   * copy of the switch semaphores, which MC_BARRIER polls. */
} brd_exec_cuda_chan_t;

/* The executor's objects; see the file comment. Opaque. */
typedef struct brd_exec_cuda_plan brd_exec_cuda_plan_t;
typedef struct brd_exec_cuda_status brd_exec_cuda_status_t;

typedef struct brd_exec_cuda_args {
  const brd_exec_cuda_plan_t *plan; /* borrowed for the launch */
  int rank;
  /* Device buffers; input may equal output (in place). A buffer the
   * collective does not give this rank may be NULL (input off the root of
   * Broadcast and Scatter, output off the root of Reduce and Gather, both
   * for point-to-point, whose buffers are the segment tables). */
  const void *input;
  void *output;
  void *scratch;                    /* device; scratch_bytes long */
  size_t scratch_bytes;
  /* Exactly one of: chans, a host array of the rank's channel count (at
   * most BRD_EXEC_CUDA_INLINE_CHANS; copied into the launch), or
   * chans_dev, a device array read while the kernel runs. */
  const brd_exec_cuda_chan_t *chans;
  const brd_exec_cuda_chan_t *chans_dev;
  size_t count;                     /* elements */
  int dtype;                        /* ncclDataType_t */
  int redop;                        /* ncclRedOp_t or BRD_REDOP_PREMULSUM */
  const void *scalar;               /* PreMulSum scalar, host value */
  const void *scalar_dev;           /* or a device pointer read by the
                                       kernel (ncclScalarDevice); wins */
  int device_epoch;                 /* 1: sequence numbers from the status */
  uint64_t epoch;                   /* device_epoch == 0: the launch's */
  uint32_t phase;                   /* epoch and scratch phase (0 or 1) */
  brd_exec_cuda_status_t *status;   /* borrowed; the rank's */
  double timeout_s;                 /* <= 0: BRAID_TIMEOUT */
  /* Segments (device/ir.h); all optional, zero meaning one buffer. */
  size_t in_stride;                 /* elements between input segments; 0: count */
  size_t out_stride;                /* same for outputs, equal on every rank */
  /* Separate buffers of a point-to-point plan: host tables of at most
   * BRD_EXEC_CUDA_INLINE_SEGS entries, copied into the launch, or device
   * tables (the _dev fields win) read while the kernel runs. */
  const brd_exec_cuda_seg_t *in_segs, *out_segs;
  const brd_exec_cuda_seg_t *in_segs_dev, *out_segs_dev;
  uint32_t n_in_segs, n_out_segs;
  /* Per-channel epochs for SIGNAL and WAIT (point-to-point pairs count
   * their own sequence numbers): a host array of the rank's channel count
   * (at most BRD_EXEC_CUDA_INLINE_CHANS, copied) or a device array; both
   * NULL: `epoch` for every channel. Not with device_epoch. LL flags
   * always count from `epoch`. */
  const uint64_t *chan_epoch;
  const uint64_t *chan_epoch_dev;
  /* Per-channel epochs kept on the device (point-to-point in a captured
   * graph): an array indexed by peer rank, one cursor per pair of ranks,
   * zero when allocated. With it, chan_epoch (host, inline) holds each
   * channel's span instead of its epoch; the kernel reserves the epoch from
   * the peer's cursor (brd_plan_chan_epoch: as brd_plan_epoch_reserve, or
   * for a one-sided plan a count of signals) and advances it, so every
   * replay gets fresh sequence numbers. Not with device_epoch or
   * chan_epoch_dev. Each cursor must be used by one status only. */
  uint64_t *chan_cursor_dev;
  /* With device_epoch, optional: output and every channel's peer_output
   * are the bases of two halves of out_half_bytes each, and a launch uses
   * the half of its device phase (the one its scratch phase uses), so a
   * captured graph alternates staging halves at every replay. 0: the
   * pointers as given. */
  size_t out_half_bytes;
  /* 1: exchange outputs with the channel peers before the ops (as
   * brd_exec_args_t's xchg: collectives with inline chans, at most
   * BRD_IR_XCHG_MAX_CHANS channels, every channel with both slots). A
   * peer's outputs are then spaced as it publishes; a peer that publishes
   * none (its staging) has them count elements apart, at peer_output plus
   * the half offset of out_half_bytes. A published output has no half
   * offset: it is the peer's own buffer. */
  int xchg;
  /* With device_epoch and out_half_bytes: 1 when output is the user's
   * buffer rather than a staging of two halves, so this rank's own output
   * gets no half offset (channel peers' staging still does). Ignored
   * without device_epoch. */
  int out_direct;
} brd_exec_cuda_args_t;

/* A copy out of a staging buffer of two halves (brd_exec_cuda_copyout):
 * nseg segments of seg_bytes, at src + h * half_bytes + s * src_stride,
 * to dst + s * dst_stride, where h is the phase of the last device-epoch
 * launch on status. All device pointers, borrowed. */
typedef struct brd_exec_cuda_copyout {
  brd_exec_cuda_status_t *status;
  const void *src;
  size_t half_bytes;
  void *dst;
  uint32_t nseg;
  size_t seg_bytes;
  size_t src_stride;
  size_t dst_stride;
} brd_exec_cuda_copyout_t;

#if BRAID_CUDA
/* Loads every executor kernel into the current device's context, once per
 * device and process (brd_exec_kernels_load): CUDA's default lazy loading
 * would otherwise load a kernel at its first launch, which waits for the
 * kernels running on the device and holds every other launch meanwhile, a
 * deadlock when ranks that are threads of one process share the GPU. The
 * CUDA backend calls it before a communicator's first kernel; the plan
 * upload calls it too. Returns ncclUnhandledCudaError (WARN) when CUDA
 * refuses. Any thread. */
ncclResult_t brd_exec_cuda_load(void);

/* Copies plan (a blob from brd_plan_builder_finish) to device memory on
 * the current device after checking that every op is one this executor
 * runs and every index stays inside the blob, the channel table, the
 * chunks, slots and semaphores. Returns ncclInternalError (WARN) for a
 * malformed plan, ncclSystemError when host memory runs out,
 * ncclUnhandledCudaError (WARN with CUDA's text) when the device
 * allocation or copy fails. Blocks until the copy is done. Any thread. */
ncclResult_t brd_exec_cuda_plan_create(const brd_ir_plan_t *plan,
                                       brd_exec_cuda_plan_t **plan_out);

/* As brd_exec_cuda_plan_create, but the copy goes on `stream` from pinned
 * host memory and the call does not wait for it. Outside a capture
 * (capturing 0) kernels enqueued on `stream` after it see the plan; work
 * on any other stream must be ordered after it, or call
 * brd_exec_cuda_plan_ready first. Inside a capture of `stream` (capturing
 * 1) the copy is a node of the graph, ahead of the kernels captured after
 * it; a use outside that graph needs brd_exec_cuda_plan_use. Nothing is
 * enqueued on any other stream and the host never waits for the device,
 * so a rank whose peers' kernels already wait for it, on the same GPU,
 * launches its own: a synchronous copy on a stream of its own can queue,
 * in a hardware queue that CUDA shares between streams
 * (CUDA_DEVICE_MAX_CONNECTIONS), behind a peer's work that waits for this
 * rank's kernel. The thread's capture mode must be relaxed while
 * capturing. Any thread. */
ncclResult_t brd_exec_cuda_plan_create_on(const brd_ir_plan_t *plan, cudaStream_t stream,
                                          int capturing, brd_exec_cuda_plan_t **plan_out);

/* Makes a plan from brd_exec_cuda_plan_create_on ready for kernels
 * enqueued next on `stream`, without waiting for the device. Outside a
 * capture: enqueues the copy on `stream` if the plan was made in a capture
 * (launches on other streams must be ordered after it). Inside a capture
 * of `stream`: nothing if the earlier copy is known complete
 * (cudaEventQuery), else the graph copies the plan again from the pinned
 * bytes before its kernels (the same bytes, so a copy still queued
 * elsewhere does not disturb it). A plan from brd_exec_cuda_plan_create:
 * nothing. ncclUnhandledCudaError (WARN) when CUDA fails. The thread's
 * capture mode must be relaxed while capturing. Any thread. */
ncclResult_t brd_exec_cuda_plan_use(brd_exec_cuda_plan_t *plan, cudaStream_t stream,
                                    int capturing);

/* Waits until the copy of a plan made by brd_exec_cuda_plan_create_on
 * outside a capture has reached the device (at once for
 * brd_exec_cuda_plan_create's), for a use not ordered after it on its
 * stream. Polls, for at most BRAID_TIMEOUT: ncclSystemError (WARN) then;
 * ncclUnhandledCudaError (WARN) when CUDA fails. The library's launches
 * do not call it (brd_exec_cuda_plan_use). Any thread. */
ncclResult_t brd_exec_cuda_plan_ready(brd_exec_cuda_plan_t *plan);

/* The plan's device copy (read it only once its copy has run): for tests
 * and diagnostics. Never blocks; any thread. */
const brd_ir_plan_t *brd_exec_cuda_plan_dev(const brd_exec_cuda_plan_t *plan);

/* Frees a plan from brd_exec_cuda_plan_create. No kernel using it may be
 * queued or running. While work a bounded wait gave up on may hold its
 * device (brd_cuda_stuck), leaks the device memory instead (INFO).
 * NULL is a no-op. */
void brd_exec_cuda_plan_destroy(brd_exec_cuda_plan_t *plan);

/* Allocates a rank's status block on the current device: abort flag and
 * report in mapped pinned host memory (cudaHostAlloc), barrier and cursor in
 * zeroed device memory. ncclUnhandledCudaError (WARN) when CUDA fails,
 * ncclSystemError when host memory runs out, the zeroing's wait gives up
 * or abort_flag (the communicator's, or NULL) is set during it
 * (brd_cuda_stream_wait). Blocks. Any thread. */
ncclResult_t brd_exec_cuda_status_create(brd_exec_abort_flag_t *abort_flag,
                                         brd_exec_cuda_status_t **st_out);

/* Frees a status block. No kernel using it may be queued or running.
 * Leaks its CUDA memory instead (INFO) while brd_cuda_stuck says so
 * for its device. NULL is a no-op. */
void brd_exec_cuda_status_destroy(brd_exec_cuda_status_t *st);

/* Bytes of device memory one status block allocates (its barrier and
 * cursor), for the owner's memory accounting. Any thread. */
size_t brd_exec_cuda_status_device_bytes(void);

/* Gives st's launches a trigger FIFO for port channels (device/exec.h):
 * mapped host memory holding mirror[0 .. nranks) (each port peer's mirror
 * as the kernels address it, 0 for memory channels), freed with st.
 * *fifo_out is the host's view, for the proxy to drain. Plans with port
 * channels run only on a status that has one. Errors from CUDA as
 * ncclUnhandledCudaError (WARN); the publishing wait as status_create's,
 * with abort_flag. The status's owner, no launch running. */
ncclResult_t brd_exec_cuda_status_ports(brd_exec_cuda_status_t *st, int nranks,
                                        const uint64_t *mirror,
                                        brd_exec_abort_flag_t *abort_flag,
                                        brd_exec_fifo_t **fifo_out);

/* Raises the abort flag: every running or later kernel on this status
 * leaves at its next wait and reports ncclSystemError. Never blocks; any
 * thread (ncclCommAbort's). */
void brd_exec_cuda_status_abort(brd_exec_cuda_status_t *st);

/* A peer is known gone: from now on a wait of any kernel on this status
 * that sees no progress for `ns` fails as a hang (ncclRemoteError through
 * brd_exec_cuda_poll), without waiting for the launch's timeout. Kernels
 * whose waits progress are not disturbed. Never blocks; any thread. */
void brd_exec_cuda_status_stuck(brd_exec_cuda_status_t *st, uint64_t ns);

/* Clears a failure (hang report, abort flag, stop flag, block barrier) so
 * the status can run launches again; the sequence cursor is kept, since
 * semaphores keep their values. The launches on st must have completed
 * (the caller synchronised their stream). The device state is cleared by
 * memsets enqueued on `stream`, ahead of the next launch on it (launches
 * on other streams must be ordered after it); the host does not wait for
 * the device, so it never stalls behind a peer's work in a hardware queue
 * it shares. The library itself never resets a status (a failed
 * communicator stays failed); tests do. ncclUnhandledCudaError (WARN)
 * when CUDA refuses the memsets. Any thread. */
ncclResult_t brd_exec_cuda_status_reset(brd_exec_cuda_status_t *st, cudaStream_t stream);

/* After the launches on st have completed (the caller synchronised their
 * stream): ncclSuccess when none failed; ncclRemoteError when a wait timed
 * out, with the report in *hang_out (may be NULL) and a WARN naming the
 * rank, block, op, peer and values (logged once per failure);
 * ncclSystemError when the abort flag stopped a launch (INFO only, the
 * caller asked for it); ncclInvalidUsage (WARN) when a switch op reached
 * a kernel without multimem (built for an architecture before sm_90).
 * Never blocks; reads host memory only. */
ncclResult_t brd_exec_cuda_poll(brd_exec_cuda_status_t *st,
                                brd_exec_cuda_hang_t *hang_out);

/* Copies n channels to a new device array for args->chans_dev (blocking).
 * ncclUnhandledCudaError (WARN) when CUDA fails. */
ncclResult_t brd_exec_cuda_chans_create(const brd_exec_cuda_chan_t *chans,
                                        uint32_t n,
                                        brd_exec_cuda_chan_t **dev_out);

/* Frees a device channel array (on the current device). Leaks it instead
 * (INFO) while brd_cuda_stuck says so for the device. NULL is a
 * no-op. */
void brd_exec_cuda_chans_destroy(brd_exec_cuda_chan_t *dev);

/* Checks args against the plan and enqueues the rank's kernel on stream
 * (gridDim = the plan's blocks, BRD_EXEC_CUDA_NTHREADS threads each).
 * count 0 enqueues nothing. Returns ncclInvalidArgument for NULL buffers
 * the collective uses with a non-zero count, a bad datatype, op or rank, a
 * misaligned scratch, too many inline channels or segments, a host segment
 * table with a NULL buffer or a count above `count`, per-channel epochs
 * with device_epoch, an output exchange (xchg) that is not over inline
 * channels, each with both slots, at most BRD_IR_XCHG_MAX_CHANS of them,
 * with the launch's epoch; for a plan with switch ops, ncclInvalidUsage on
 * a device before sm_90 and ncclInvalidArgument for a datatype and
 * reduction multimem lacks (brd_exec_mc_reduces), an output exchange or
 * per-pair cursors, or a switch channel without its pointers;
 * ncclInternalError for scratch smaller than the plan
 * needs or an epoch whose launch would cross a multiple of 2^32;
 * ncclUnhandledCudaError (WARN) when the launch itself fails. Never
 * allocates, copies or synchronises (capturable); the kernel blocks on
 * peers' kernels, which must be launched too for it to finish. */
ncclResult_t brd_exec_cuda_launch(const brd_exec_cuda_args_t *args,
                                  cudaStream_t stream);

/* Enqueues the copy described by c on stream, after the device-epoch
 * launch whose output it copies (same status, same stream): the kernel
 * reads the phase that launch used from the status block, so a captured
 * graph copies the right half at every replay. nseg 0 or seg_bytes 0
 * enqueues nothing. ncclInvalidArgument for NULL pointers or segments
 * that leave a half; ncclUnhandledCudaError (WARN) when the launch fails.
 * Never allocates or synchronises (capturable). */
ncclResult_t brd_exec_cuda_copyout(const brd_exec_cuda_copyout_t *c,
                                   cudaStream_t stream);
#endif /* BRAID_CUDA */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRD_DEVICE_EXEC_CUDA_H */
