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
  BRD_EXEC_WAIT_PORT = 4,   /* a free slot of the port channels' FIFO */
  BRD_EXEC_WAIT_SWITCH = 5, /* a member's word of a switch semaphore
                             * (MC_BARRIER; peer: the member's rank) */
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
  uint64_t epoch;    /* the launch's epoch (device/ir_addr.h): ranks whose
                      * epochs differ for one call count apart */
  uint32_t phase;    /* the launch's scratch phase */
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
  /* As put of plain bytes (BRD_EXEC_PUT_DATA), but the len bytes are read
   * at src (the executor's own memory, read before it returns) rather than
   * at mirror + off, which is left as it was: a copy through the port
   * without the copy into the mirror. Host executor only. */
  int (*put_from)(struct brd_exec_port *port, size_t off, size_t len, const void *src);
  char *mirror;          /* owned by the proxy: the peer's window, here */
  size_t bytes;          /* of the mirror (and of the peer's window) */
  int *failed;           /* owned by the proxy: non-zero once the net
                          * failed (ncclResult_t); read with __atomic
                          * builtins (this header is C++-safe) */
} brd_exec_port_t;

/* The host executor's doorbell for port channels: the proxy rings it after
 * laying what arrived into the window, and a host executor thread whose
 * wait has lasted sleeps on `seq` (base/futex.h) instead of napping.
 * Ring: bump seq, then wake if sleepers is non-zero. Sleep: count in
 * sleepers, then sleep while seq still holds the value read before the
 * waited-for condition was last checked. Both with __atomic builtins,
 * sequentially consistent (this header is C++-safe). Owned by the proxy. */
typedef struct brd_exec_bell {
  uint32_t seq;
  uint32_t sleepers;
} brd_exec_bell_t;

/* The CUDA executor's side of port channels: kernels cannot call `put`,
 * so they post the same puts as triggers into a FIFO in mapped host
 * memory, which the proxy drains in slot order (core/proxy.c). A slot is
 * reserved with a device-scope atomic on the executor state's head
 * counter; its entry is written, then, after a system-scope fence, `seq`
 * becomes slot + 1: the proxy takes the entry once seq says so, and
 * advances `tail`, which bounds how far heads may run ahead. Entries are
 * taken in slot order, so a trigger reserved after a barrier (a SIGNAL)
 * is shipped after every trigger reserved before it (the data). */
#define BRD_EXEC_FIFO_ENTRIES 1024u
typedef struct brd_exec_trigger {
  uint64_t seq;   /* slot + 1 once the entry is complete; written last */
  uint64_t off;   /* bytes into the peer's window */
  uint64_t len;
  uint32_t peer;  /* rank */
  uint32_t kind;  /* BRD_EXEC_PUT_* */
  /* A SEM put's words (len <= 24), carried here rather than read from the
   * mirror when the proxy takes the entry: by then the executor may have
   * stored a later value there, which would overtake the data put before
   * it. Data needs no such copy: the peer's slots are reused only after
   * it has read them, which it does after the semaphore that follows. */
  uint64_t val[3];
  uint64_t pad;
} brd_exec_trigger_t;
typedef struct brd_exec_fifo {
  brd_exec_trigger_t ring[BRD_EXEC_FIFO_ENTRIES];
  uint64_t tail;      /* the next slot the proxy takes (written by the proxy) */
  uint64_t nranks;
  uint64_t mirror[1]; /* [nranks] each port peer's mirror as the executor
                       * addresses it; 0 for memory channels */
} brd_exec_fifo_t;

#endif /* BRD_DEVICE_EXEC_H */
