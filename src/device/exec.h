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

/* A port channel's far end (device/ir.h: BRD_IR_CHAN_PORT), as an
 * executor sees it: the peer's window is not mapped here, so the channel's
 * pointers address `mirror`, a local stand-in of the peer's window, and
 * every write the executor makes there is handed to `put`, which ships it
 * to the same offset of the peer's window (core/proxy.c). Writes of one
 * port arrive in the order they were put; a SEM put lands after every
 * earlier put of its port. Plans over ports only write through channels
 * (brd_plan_reads_peers is 0). */
enum {
  BRD_EXEC_PUT_DATA = 0, /* plain bytes */
  BRD_EXEC_PUT_LL = 1,   /* LL packets: each 8-byte packet lands whole */
  BRD_EXEC_PUT_SEM = 2,  /* 64-bit words; the first lands last, released */
};
typedef struct brd_exec_port {
  /* Ships [mirror + off, mirror + off + len) to the peer. Blocks while
   * the port's queue is full (deadline and abort as every executor wait);
   * ncclRemoteError when the port has failed. Any executor thread. */
  int (*put)(struct brd_exec_port *port, size_t off, size_t len, int kind);
  char *mirror;          /* owned by the proxy: the peer's window, here */
  size_t bytes;          /* of the mirror (and of the peer's window) */
  int *failed;           /* owned by the proxy: non-zero once the net
                          * failed (ncclResult_t); read with __atomic
                          * builtins (this header is C++-safe) */
} brd_exec_port_t;

#endif /* BRD_DEVICE_EXEC_H */
