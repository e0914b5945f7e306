/*
 * Braid executors: what the host executor (exec_host.h) and the CUDA
 * executor (exec_cuda.h) share in their interfaces, written once and
 * C++-safe (exec.cu includes it): a segment of a point-to-point buffer
 * table and the hang report, with the kinds of wait it names.
 */
#ifndef BRD_DEVICE_EXEC_H
#define BRD_DEVICE_EXEC_H

#include <stddef.h>
#include <stdint.h>

/* One segment of a point-to-point buffer table (device/ir.h). Borrowed;
 * a device pointer for the CUDA executor. */
typedef struct brd_exec_seg {
  void *ptr;      /* first element; NULL only when count is 0 */
  size_t count;   /* elements */
} brd_exec_seg_t;

/* What a timed-out wait was waiting for. */
enum {
  BRD_EXEC_WAIT_SEM = 0,    /* semaphore of a channel */
  BRD_EXEC_WAIT_PACKET = 1, /* LL flag in own scratch */
  BRD_EXEC_WAIT_BARRIER = 2,
  BRD_EXEC_WAIT_XCHG = 3,   /* a peer's output exchange slot */
};

/* Where a launch stopped making progress: the first wait of the rank's
 * launch to reach its deadline. */
typedef struct brd_exec_hang {
  int rank;          /* the stuck rank (the one launched) */
  int block;
  int op;            /* op index within the block */
  uint64_t iter;
  int what;          /* BRD_EXEC_WAIT_* */
  int peer;          /* rank expected to make progress; -1 for a barrier
                      * and for packets (any rank may write a slot) */
  int index;         /* semaphore index, scratch slot, barrier number, or
                      * channel (exchange) */
  uint64_t expected; /* sequence number (LL: 32-bit flag), block count, or
                      * exchange tag */
  uint64_t seen;
} brd_exec_hang_t;

#endif /* BRD_DEVICE_EXEC_H */
