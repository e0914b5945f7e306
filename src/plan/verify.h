/*
 * Braid plan verifier: executes a plan symbolically for every rank and
 * block at once and proves, at chunk granularity, that it computes an
 * all-reduce without races or deadlocks.
 *
 * Each chunk value is a vector of contribution counts (one per rank) plus
 * the window iteration and chunk it belongs to and how many times the
 * post-op was applied. Blocks run as symbolic threads in program order,
 * each op repeated for `niter` loop iterations; WAIT, LL packet reads and
 * BARRIER block until satisfiable. Vector clocks (one per block, advanced
 * per op, joined at every acquire: a wait on a signal, a packet read, a
 * barrier) give happens-before, so races are found whatever the schedule.
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
 *                        two unordered writes, or an output written after
 *                        its rank may have finished the launch;
 *   REUSE                a write over data a reader has not consumed yet
 *                        (scratch reuse race), including an LL slot
 *                        rewritten before its packets were read;
 *   DEADLOCK             waits that can never be satisfied;
 *   LAUNCH_ORDER         a peer's output written (or its in-place input
 *                        read) before that peer joined the launch;
 *   MALFORMED            a structural error: bad index, channel, opcode,
 *                        sequence number, or semaphore with two writers.
 */
#ifndef BRD_PLAN_VERIFY_H
#define BRD_PLAN_VERIFY_H

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

typedef struct brd_verify_opts {
  int in_place; /* input and output are the same buffer */
  int niter;    /* loop iterations to execute; 0 means 2 */
} brd_verify_opts_t;

/* Verifies plan (opts may be NULL: out of place, 2 iterations). Returns
 * ncclSuccess, ncclInternalError for a faulty plan (WARN with the report's
 * text), or ncclSystemError when out of memory. Fills *report_out (may be
 * NULL) in every case; kind is BRD_VERIFY_OK on success. Any thread; the
 * plan is only read. */
ncclResult_t brd_plan_verify(const brd_ir_plan_t *plan,
                             const brd_verify_opts_t *opts,
                             brd_verify_report_t *report_out);

/* Name of a fault kind ("deadlock", ...), for messages and tests. */
const char *brd_plan_verify_kind_name(brd_verify_kind_t kind);

#endif /* BRD_PLAN_VERIFY_H */
