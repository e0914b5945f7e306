/*
 * Braid benchmarks: what a run prints (nccl-tests' text layout) and the
 * JSON file of -J, including the algorithm/protocol the library's tuner
 * logged for each size. Only the first participant prints; these functions
 * are not thread-safe.
 */
#ifndef BRD_TOOLS_REPORT_H
#define BRD_TOOLS_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

/* One rank as the "Using devices" lines show it. */
typedef struct {
  int rank;
  int pid;
  int device;
  int cc;                  /* compute capability * 10, 0 in host mode */
  unsigned pci_domain;
  unsigned pci_bus;
  unsigned pci_dev;
  unsigned long long mem;  /* device memory bytes, 0 in host mode */
  char host[64];
  char name[96];
} brd_perf_rank_info_t;

/* One half (out-of-place or in-place) of a result row. */
typedef struct {
  int ran;                 /* 0: no such form; printed as N/A */
  int checked;             /* 0: #wrong is N/A */
  double time_us;
  double algbw;            /* GB/s */
  double busbw;
  long long wrong;         /* mismatched elements over all ranks */
} brd_perf_half_t;

typedef struct {
  size_t size;             /* bytes, as the first column shows */
  size_t count;            /* the count argument */
  int type;                /* ncclDataType_t */
  int op;                  /* op index, -1 when the column says "none" */
  int root;
  brd_perf_half_t half[2]; /* [0] out-of-place, [1] in-place */
} brd_perf_row_t;

/* nccl-tests' number formatting: width characters, 2 decimals when they
 * fit, then 1, 0, then exponent form. out holds width+1 bytes. */
void brd_perf_fmt_float(double v, int width, char *out);

/* The two column-header lines (plus the "#" above them). */
void brd_perf_print_header(FILE *f, int cputime);

/* The size/count/type/redop/root columns of a row. */
void brd_perf_print_row_start(FILE *f, const brd_perf_row_t *row);

/* One half's time/algbw/busbw/#wrong columns. */
void brd_perf_print_half(FILE *f, const brd_perf_half_t *h);

/* Algorithm and protocol choices read back from the library's log. */
typedef struct brd_perf_tuning brd_perf_tuning_t;

/* Reads every braid-tuning.*.log in dir and keeps the lines of the form
 * "<Coll>: <bytes> Bytes -> Algo <A> proto <P> time <t> us". A missing or
 * empty directory gives an empty table. Caller owns *out. */
ncclResult_t brd_perf_tuning_load(const char *dir, brd_perf_tuning_t **out);

/* The choice logged for (coll, bytes) -- the most frequent one when ranks
 * or iterations disagree -- or 0 when there is none. coll "SendRecv" also
 * matches "Send" and "Recv" lines. */
int brd_perf_tuning_find(const brd_perf_tuning_t *t, const char *coll,
                         size_t bytes, const char **algo, const char **proto);

/* destroy(NULL) is a no-op. */
void brd_perf_tuning_destroy(brd_perf_tuning_t *t);

/* Everything the JSON file records. */
typedef struct {
  const char *tool;
  const char *coll;          /* tuner name of the collective */
  const char *start_time;   /* local time, nccl-tests' format */
  const char *end_time;
  const char *date;          /* ISO 8601, UTC */
  int argc;
  char **argv;
  int nranks;
  int nprocs;
  int nthreads;
  int ngpus;
  int host_mode;
  int library_version;
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  int warmup, iters, agg, check, graph, blocking, average, cputime, reg;
  const brd_perf_rank_info_t *ranks; /* nranks entries */
  const brd_perf_row_t *rows;
  size_t nrows;
  const brd_perf_tuning_t *tuning;   /* may be NULL */
  long long errors;
  double avg_busbw;
  int min_bw_state;                  /* -1 unchecked, 0 failed, 1 ok */
  const char *last_error;
} brd_perf_json_t;

/* Writes j as JSON to f. Returns ncclSystemError when the write fails. */
ncclResult_t brd_perf_json_write(FILE *f, const brd_perf_json_t *j);

#endif /* BRD_TOOLS_REPORT_H */
