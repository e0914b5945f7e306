/*
 * Braid benchmarks: the harness every tools/<coll>_perf.c is a thin main
 * over. Flags, output and JSON follow nccl-tests; see docs/perf/README.md.
 *
 * A tool describes its collective with one brd_perf_coll_t: how a byte size
 * becomes counts, the bus-bandwidth factor, where each output element comes
 * from (for the CPU reference), and the NCCL call itself. The harness does
 * the rest: options, launching threads and processes, communicators,
 * buffers, timing, checking, printing.
 */
#ifndef BRD_TOOLS_PERF_H
#define BRD_TOOLS_PERF_H

#include <stddef.h>

#include "nccl.h"

/* Counts for one size, in elements. The in-place layout puts the send
 * buffer at recvbuff + send_inplace*rank and the receive buffer at
 * recvbuff + recv_inplace*rank. */
typedef struct {
  size_t count;        /* the count argument of the NCCL call */
  size_t send_count;   /* elements each rank sends from */
  size_t recv_count;   /* elements each rank receives into (and is checked) */
  size_t send_inplace;
  size_t recv_inplace;
} brd_perf_shape_t;

/* One NCCL call of the benchmark. */
typedef struct {
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  ncclComm_t comm;
  cudaStream_t stream;
} brd_perf_call_t;

/* Where output element j of a rank must come from. */
typedef enum {
  BRD_PERF_SRC_REDUCE, /* the reduction over all ranks of input element idx */
  BRD_PERF_SRC_COPY,   /* input element idx of rank src_rank */
  BRD_PERF_SRC_KEEP,   /* untouched: what the buffer held before the call */
} brd_perf_src_t;

/* How the in-place half of a row is run. */
typedef enum {
  BRD_PERF_INPLACE_CHECKED,   /* run, timed and checked */
  BRD_PERF_INPLACE_UNCHECKED, /* run and timed; #wrong is N/A */
  BRD_PERF_INPLACE_NONE,      /* no in-place form: every field is N/A */
} brd_perf_inplace_t;

typedef struct {
  const char *name;       /* as the library's tuner names it: "AllReduce" */
  int reduces;            /* the call takes the reduction op */
  int op_column;          /* sweeps -o and prints the op (else "none") */
  int rooted;             /* takes -r; -r -1 sweeps every root */
  int input_on_root;      /* only the root's send buffer is read */
  brd_perf_inplace_t inplace;
  double bus_factor_num;  /* bus bandwidth = alg bandwidth * factor, with */
  int bus_factor_minus;   /* factor = num * (nranks - minus) / nranks, or */
  int bus_factor_flat;    /* factor = num when flat */
  /* count = size / element size; fills *out. */
  void (*shape)(size_t count, size_t esize, int nranks, brd_perf_shape_t *out);
  /* Source of output element j on rank (see brd_perf_src_t). */
  brd_perf_src_t (*source)(const brd_perf_shape_t *sh, int nranks, int root,
                           int rank, size_t j, int *src_rank, size_t *src_idx);
  /* Issues the call; returns the NCCL result untouched. */
  ncclResult_t (*run)(const brd_perf_call_t *call);
} brd_perf_coll_t;

/* Elements per rank when a collective splits count across nranks, rounded
 * down to a multiple of 16 bytes (nccl-tests' rule). */
size_t brd_perf_split(size_t count, size_t esize, int nranks);

/* The whole program: parses argv, runs, prints; returns the exit status
 * (0, or nccl-tests' codes: 2 CUDA error, 3 NCCL error, 4 timeout,
 * 7 wrong results, 255 bad options). Main thread. */
int brd_perf_main(const brd_perf_coll_t *coll, int argc, char **argv);

#endif /* BRD_TOOLS_PERF_H */
