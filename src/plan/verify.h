/*
 * Braid plan verifier: executes a plan symbolically for every rank and
 * block at once and proves, at chunk granularity, that it computes its
 * collective (the plan's `coll` and `root`) without races or deadlocks.
 *
 * Each chunk value is a vector of contribution counts (one per rank) plus
 * the window iteration, chunk and input segment it belongs to and how many
 * times the post-op was applied. Every output chunk must end up holding
 * what the collective defines (device/ir.h lists them): for a reduction,
 * one contribution of every rank with the post-op applied once; for data
 * movement, exactly the one rank's input segment it names, untouched.
 * In place, an output segment that aliases the rank's own input segment
 * starts as that input: where that is the answer (all-gather's block
 * `rank`, the root's broadcast output, gather block `root` and scatter
 * output) a plan may leave it unwritten, as NCCL defines in-place calls,
 * and the runtime's copy-outs from staging leave those segments alone
 * (core/launch_host.c, core/launch_cuda_run.c). A reduction must write
 * its output even in place (even on one rank).
 * Inputs a collective does not give a rank (Broadcast and Scatter off the
 * root) must not be read, outputs it does not give (Reduce and Gather off
 * the root) must not be written. Blocks run as symbolic threads in program order,
 * each op repeated for `niter` loop iterations; WAIT, LL packet reads and
 * BARRIER block until satisfiable. Vector clocks (one per block, advanced
 * per op, joined at every acquire: a wait on a signal, a packet read, a
 * barrier) give happens-before, so races are found whatever the schedule.
 *
 * Switch channels (device/ir.h): a reference through a rank's switch
 * channel is the same slot in every rank's scratch. MC_REDUCE reads every
 * member's copy (each copy's last write must happen before it, or it is a
 * race, or unwritten: a missing contribution) and combines their
 * contributions; MC_STORE and an MC_REDUCE switch destination write every
 * copy; MC_RED combines into every copy: reds commute among themselves, but
 * a plain read or write of the slot must be ordered after every red of the
 * current value, and a red after the write and the reads it follows.
 * MC_BARRIER stores the rank's word of its switch semaphore in every copy
 * (release, the rank's clock) and waits for every member's word (acquire,
 * joining their clocks), so it orders like a barrier across all ranks.
 *
 * Reported faults, each as ncclInternalError with a WARN naming the rank,
 * block and op index (the same text is in the report):
 *   MISSING / DUPLICATE  an output lacks a rank's contribution / has one
 *                        more than once (also: output never written);
 *   MISMATCH             data of another chunk or iteration combined or
 *                        stored in place of the right one;
 *   POSTOP               post-op applied zero or several times, or a
 *                        finished value reduced again;
 *   UNWRITTEN            a read of scratch (or output) nothing wrote;
 *   RACE                 a read not ordered after the write it observes,
 *                        two unordered writes, an output written after
 *                        its rank may have finished the launch, or a
 *                        peer's input (BRD_IR_PLAN_F_PEER_INPUT plans)
 *                        read after that peer may have finished it;
 *   REUSE                a write over data a reader has not consumed yet
 *                        (scratch reuse race), including an LL slot
 *                        rewritten before its packets were read;
 *   DEADLOCK             waits that can never be satisfied;
 *   LAUNCH_ORDER         a peer's output written (or its input read)
 *                        before that peer joined the launch; or, in
 *                        a plan with scratch phases, a rank that can finish
 *                        before some other rank joined (the next launch
 *                        could then write a scratch half still in use);
 *   REUSE                also: in a one-phase plan, a rank that can finish
 *                        before its peer read what it wrote in the peer's
 *                        scratch (the next launch would overwrite it);
 *   MALFORMED            a structural error: bad index, channel, opcode,
 *                        sequence number, semaphore with two writers, a
 *                        segment the collective does not have, an input it
 *                        does not give or an output it does not have; for
 *                        switch channels: an LL reference on a switch op,
 *                        the input or output through the switch, a switch
 *                        channel whose peer is not BRD_IR_SWITCH_PEER, two
 *                        on one rank, one on some ranks only, a switch op
 *                        naming another channel (or another op naming the
 *                        switch), a switch plan not in Simple.
 */
#ifndef BRD_PLAN_VERIFY_H
#define BRD_PLAN_VERIFY_H

#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"

typedef enum {
  BRD_VERIFY_OK = 0,
  BRD_VERIFY_MALFORMED,
  BRD_VERIFY_MISSING,
  BRD_VERIFY_DUPLICATE,
  BRD_VERIFY_MISMATCH,
  BRD_VERIFY_POSTOP,
  BRD_VERIFY_UNWRITTEN,
  BRD_VERIFY_RACE,
  BRD_VERIFY_REUSE,
  BRD_VERIFY_DEADLOCK,
  BRD_VERIFY_LAUNCH_ORDER,
} brd_verify_kind_t;

typedef struct brd_verify_report {
  brd_verify_kind_t kind;
  int rank;     /* -1 when the fault is the plan's as a whole */
  int block;    /* -1 when not tied to a block */
  int op;       /* op index within the block; -1 when not tied to an op */
  int peer;     /* the other rank involved, -1 if none */
  int chunk;    /* chunk or slot involved, -1 if none */
  char msg[512];
} brd_verify_report_t;

/* Where one output segment of a point-to-point plan gets its data. */
typedef struct brd_verify_p2p_seg {
  int src_rank;      /* the sending rank (may be the receiver itself) */
  int src_seg;       /* the sender's input segment */
  uint32_t nchunks;  /* chunks of data; later chunks are never touched */
} brd_verify_p2p_seg_t;

/* What one rank of a point-to-point plan sends and receives. */
typedef struct brd_verify_p2p {
  int nin;                         /* input segments (sends) */
  const uint32_t *in_chunks;       /* [nin] chunks of data in each */
  int nout;                        /* output segments (receives) */
  const brd_verify_p2p_seg_t *out; /* [nout] */
} brd_verify_p2p_t;

typedef struct brd_verify_opts {
  int in_place; /* input and output are the same buffer, in the layout the
                 * collective defines for in-place calls (on the root for
                 * Broadcast, Reduce, Gather, Scatter; none for AlltoAll) */
  int niter;    /* loop iterations to execute; 0 means 2 */
} brd_verify_opts_t;

/* Verifies plan (opts may be NULL: out of place, 2 iterations). Returns
 * ncclSuccess, ncclInternalError for a faulty plan (WARN with the report's
 * text), or ncclSystemError when out of memory. Fills *report_out (may be
 * NULL) in every case; kind is BRD_VERIFY_OK on success. A SENDRECV plan
 * needs brd_plan_verify_p2p and fails here as MALFORMED. Any thread; the
 * plan is only read. */
ncclResult_t brd_plan_verify(const brd_ir_plan_t *plan,
                             const brd_verify_opts_t *opts,
                             brd_verify_report_t *report_out);

/* Verifies a point-to-point plan (BRD_IR_COLL_SENDRECV) against the
 * pairing it must implement: p2p[r] for every rank r (borrowed). A
 * point-to-point plan covers one window, so it runs one iteration, out of
 * place. Results as brd_plan_verify. */
ncclResult_t brd_plan_verify_p2p(const brd_ir_plan_t *plan,
                                 const brd_verify_p2p_t *p2p,
                                 brd_verify_report_t *report_out);

/* Name of a fault kind ("deadlock", ...), for messages and tests. */
const char *brd_plan_verify_kind_name(brd_verify_kind_t kind);

#endif /* BRD_PLAN_VERIFY_H */
