/*
 * Braid host executor: runs one rank's part of a plan (device/ir.h) on CPU
 * threads over host or shared memory. It is the reference reading of the IR;
 * the CUDA executor must behave the same.
 *
 * Launch interface, per rank and per launch (independent of ncclComm):
 *   - this rank's input, output and scratch, zero-filled once when
 *     allocated. scratch_bytes covers both phases; it is normally
 *     brd_plan_scratch_bytes(plan) but any size with 16 data bytes per
 *     slot works. It sets the chunk size (brd_plan_layout_init), so every
 *     rank must pass the same value, and it must not change between
 *     launches that may overlap (a communicator keeps it fixed);
 *   - for each channel of this rank in the plan (brd_ir_plan_chan), the
 *     peer's scratch base and output buffer, the peer's inbound semaphore
 *     array for this rank (nsems entries; SIGNAL stores there), and this
 *     rank's inbound semaphore array for the peer (WAIT reads there). Both
 *     are zero when allocated and never reset;
 *   - count, datatype, reduction (ncclRedOp_t, or BRD_REDOP_PREMULSUM with a
 *     host scalar; avg is resolved here for the plan's nranks), the launch's
 *     epoch (brd_plan_epoch_reserve with brd_plan_epoch_span, the same on
 *     every rank) and scratch phase (0/1, alternating per launch, the same
 *     on every rank; ignored by one-phase plans);
 *   - for buffers of several segments (device/ir.h): the element stride
 *     between segments of the input and of the output (0: count), the
 *     output stride being the same on every rank since peers write there;
 *     or, for point-to-point plans, a table of separate buffers, each with
 *     its own count (the largest is `count`). An op's element count per
 *     chunk is that of its first input or output reference's segment;
 *   - optionally one epoch per channel (point-to-point: each pair of ranks
 *     reserves its own), used by the channel's SIGNAL and WAIT ops instead
 *     of the launch's epoch;
 *   - an abort flag polled by every wait, and a timeout in seconds: how
 *     long one wait may see no progress (BRAID_TIMEOUT when <= 0).
 * Count 0 returns at once, as NCCL does, without touching any buffer. An
 * input the collective does not give this rank (Broadcast and Scatter off
 * the root) or an output it does not have (Reduce and Gather off the root)
 * may be NULL: the verifier proves the plan never touches it.
 *
 * Threads: brd_exec_host_run spawns one thread per block beyond the first
 * and runs block 0 on the caller's thread. A caller with its own threads
 * uses brd_exec_host_run_init, then brd_exec_host_block_run once per
 * block (any threads, concurrently), then brd_exec_host_run_fini.
 *
 * Memory ordering: SIGNAL is a release store of the sequence number, WAIT
 * an acquire load; LL packets are 8-byte atomic stores and loads (release /
 * acquire) of data and flag together; BARRIER is an acq_rel counter.
 *
 * Switch channels (device/ir.h): the launch gives, for the rank's switch
 * channel, every member's scratch base and switch semaphores
 * (member_scratch, member_ssems; member order: device/ir.h's switch
 * groups). MC_REDUCE reduces the slot over every member's copy in order (with the post-op when flagged)
 * and stores to its local destinations and to every copy of its switch
 * destinations; MC_STORE writes every copy; MC_RED combines element by
 * element with a compare-and-swap loop on the element's width (1, 2, 4 or
 * 8 bytes); MC_BARRIER release-stores seq(it, k) into the rank's word in
 * every copy, then waits (deadline, abort, hang report BRD_EXEC_WAIT_SWITCH
 * naming the member) until every member's word in its own copy reaches it.
 * A switch launch never exchanges outputs (args.xchg must be 0). In a
 * zero-copy switch plan (BRD_IR_PLAN_F_PEER_INPUT), switch references to
 * INPUT and OUTPUT address member_input and member_output the same way.
 *
 * Errors: a wait that sees no progress for the timeout returns
 * ncclRemoteError (a peer stopped making progress, as NCCL reports a lost
 * peer), fills the hang report and WARNs with it; the other blocks of the
 * launch stop at their next wait. A raised abort flag returns
 * ncclSystemError with no WARN (the caller asked for it).
 */
#ifndef BRD_DEVICE_EXEC_HOST_H
#define BRD_DEVICE_EXEC_HOST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "base/futex.h"
#include "device/exec.h"
#include "device/ir.h"
#include "device/ir_addr.h"
#include "device/redop.h"
#include "device/layout.h"

/* What this rank reaches through one channel. All borrowed. */
typedef struct brd_exec_chan {
  void *peer_scratch;           /* peer's scratch base (both phases) */
  void *peer_output;            /* peer's output buffer of this launch */
  _Atomic uint64_t *peer_sems;  /* peer's inbound semaphores from us */
  _Atomic uint64_t *sems;       /* our inbound semaphores from the peer */
  const void *peer_input;       /* peer's input buffer of this launch
                                 * (BRD_IR_PLAN_F_PEER_INPUT plans only) */
  /* Output exchange (args.xchg; device/ir.h): peer_output above is then
   * the peer's staging, used unless the peer publishes its own buffer. */
  _Atomic uint64_t *xchg_pub;   /* this rank's slot in the peer's window */
  _Atomic uint64_t *xchg_slot;  /* the peer's slot in this rank's window */
  void *xchg_output;            /* this rank's output as the peer maps it;
                                 * NULL: its staging (output, out_stride) */
  /* A port channel (device/exec.h): the peer_* pointers above address
   * port->mirror, and every write through them is put on the port. NULL
   * for a memory channel. */
  brd_exec_port_t *port;
  /* A switch channel (BRD_IR_CHAN_SWITCH, device/ir.h): the peer_* and
   * xchg fields above are unused; every member's copy, in member order
   * (the ranks of the rank's switch group in rank order, [members] each:
   * brd_ir_switch_member; every rank of most plans). NULL for other
   * channels. */
  void *const *member_scratch;            /* each member's scratch base */
  _Atomic uint64_t *const *member_ssems;  /* each member's switch semaphores
                                           * (nsems x nranks words) */
  /* Zero-copy switch plans (BRD_IR_PLAN_F_PEER_INPUT with a switch
   * channel; device/ir.h): each member's send and receive buffer of this
   * launch, in rank order; NULL otherwise. */
  const void *const *member_input;
  void *const *member_output;
} brd_exec_chan_t;

typedef struct brd_exec_args {
  const brd_ir_plan_t *plan;    /* borrowed for the launch */
  int rank;
  const void *input;            /* borrowed; may equal output (in place) */
  void *output;
  void *scratch;                /* borrowed; scratch_bytes long */
  size_t scratch_bytes;
  const brd_exec_chan_t *chans; /* [the rank's channel count] */
  size_t count;                 /* elements */
  int dtype;                    /* ncclDataType_t */
  int redop;                    /* ncclRedOp_t or BRD_REDOP_PREMULSUM */
  const void *scalar;           /* PreMulSum scalar (host), else NULL */
  uint64_t epoch;
  uint32_t phase;               /* 0 or 1 */
  _Atomic int *abort_flag;      /* borrowed; may be NULL */
  int *port_failed;             /* borrowed; may be NULL: the proxy's
                                 * failure flag (device/exec.h), polled by
                                 * every wait like abort_flag */
  brd_exec_bell_t *port_bell;   /* borrowed; may be NULL: the proxy's
                                 * doorbell (device/exec.h), rung when what
                                 * peers put over ports lands here */
  double timeout_s;             /* <= 0: BRAID_TIMEOUT */
  const uint64_t *stuck_ns;     /* borrowed; may be NULL: once it reads
                                 * non-zero (a peer is known gone), a wait
                                 * that sees no progress for that many ns
                                 * fails as a hang, as at the timeout */
  /* Segments (all optional, zero means "one buffer as above"). */
  size_t in_stride;             /* elements between input segments; 0: count */
  size_t out_stride;            /* same for outputs, on every rank; 0: count */
  const brd_exec_seg_t *in_segs;  /* borrowed [n_in_segs]: separate inputs */
  const brd_exec_seg_t *out_segs; /* borrowed [n_out_segs]: separate outputs */
  uint32_t n_in_segs, n_out_segs;
  const uint64_t *chan_epoch;   /* borrowed [channels]; NULL: epoch for all.
                                 * Semaphores only: LL flags always count
                                 * from `epoch` */
  int xchg;                     /* 1: exchange outputs with the channel
                                 * peers first (collectives; at most
                                 * BRD_IR_XCHG_MAX_CHANS channels); a peer's
                                 * outputs are then spaced as it publishes,
                                 * count elements apart for its staging */
} brd_exec_args_t;

/* Rings the doorbell (device/exec.h): wakes every host executor thread
 * asleep on it. After the stores the sleepers wait for. NULL is a no-op.
 * Any thread; never blocks. */
static inline void brd_exec_bell_ring(brd_exec_bell_t *bell) {
  if (bell == NULL) return;
  __atomic_fetch_add(&bell->seq, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&bell->sleepers, __ATOMIC_SEQ_CST) != 0) brd_futex_wake_all(&bell->seq);
}

/* One run of a plan by one rank (an executor "run": a group's "launch" is
 * the core's word), the state its blocks share; caller's memory. */
typedef struct brd_exec_run {
  brd_exec_args_t args;
  brd_reduce_op_t op;
  brd_ir_view_t view;          /* addressing (device/ir_addr.h) */
  double timeout_s;
  _Atomic int stop;            /* a block failed: others leave */
  _Atomic int result;          /* first failure, ncclSuccess otherwise */
  _Atomic int hang_claimed;
  brd_exec_hang_t hang;        /* valid when result is ncclRemoteError */
  _Atomic uint32_t bar_count;  /* blocks arrived at the current barrier */
  _Atomic uint32_t bar_gen;    /* barriers completed */
  int sw_n, sw_me;             /* switch group: members, this rank's index */
  int bell_only;               /* every channel is a port: whatever a wait
                                * waits for rings args.port_bell (or is a
                                * barrier, which rings it too) */
} brd_exec_run_t;

/* Checks args against the plan and prepares *l (caller's memory; args are
 * copied, the buffers stay borrowed). ncclInvalidArgument for NULL buffers
 * the collective uses with a non-zero count, a bad datatype or op, a rank
 * outside the plan, a segment table with a NULL buffer or a count above
 * `count`; ncclInternalError for a damaged plan or scratch smaller than the
 * plan needs. Never blocks. */
ncclResult_t brd_exec_host_run_init(brd_exec_run_t *l,
                                   const brd_exec_args_t *args);

/* Runs block `block` of the launch to completion on the calling thread,
 * blocking on its waits. Every block of the launch must be run, each by
 * one thread, concurrently (blocks wait on each other). Returns the
 * block's result; see the file comment for the error codes. */
ncclResult_t brd_exec_host_block_run(brd_exec_run_t *l, int block);

/* After every block returned: the launch's result, and the hang report in
 * *hang_out (may be NULL) when it is ncclRemoteError. */
ncclResult_t brd_exec_host_run_fini(brd_exec_run_t *l,
                                   brd_exec_hang_t *hang_out);

/* init + one thread per block + fini. Blocks until every block returned.
 * ncclSystemError when a thread cannot be created (the blocks already
 * started are stopped and joined). */
ncclResult_t brd_exec_host_run(const brd_exec_args_t *args,
                               brd_exec_hang_t *hang_out);

#endif /* BRD_DEVICE_EXEC_HOST_H */
