/*
 * Braid benchmarks: element types, reduction ops, input patterns and the
 * CPU reference the results are checked against.
 *
 * Inputs are chosen so that every reduction is exact whatever order the
 * library adds, multiplies or compares in: sums of small integers that stay
 * below the type's exact-integer limit, products of +-1 and a bounded number
 * of 2s, any values for min/max. The reference therefore gives the one right
 * answer, and results are compared bit for bit; only a floating-point average
 * (which a library may compute as a pre-scaled sum) gets 2 units in the last
 * place.
 *
 * Elements travel as uint64_t bit patterns (the low 8*size bits), so one set
 * of functions serves every type. Pure C, no CUDA; any thread.
 */
#ifndef BRD_TOOLS_DATA_H
#define BRD_TOOLS_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* nccl-tests' spelling of each type and op, indexed by ncclDataType_t and by
 * op index (0..4 are ncclRedOp_t; 5 is "mulsum", a per-rank
 * ncclRedOpCreatePreMulSum). */
#define BRD_PERF_NTYPES 12
#define BRD_PERF_NOPS 6
#define BRD_PERF_OP_MULSUM 5
/* Generator mode for collectives that only move data. */
#define BRD_PERF_OP_COPY (-1)

extern const char *const brd_perf_type_names[BRD_PERF_NTYPES];
extern const char *const brd_perf_op_names[BRD_PERF_NOPS];

/* Bytes per element of dtype, 0 for an unknown type. */
size_t brd_perf_type_size(ncclDataType_t dtype);

/* Index of name in brd_perf_type_names / brd_perf_op_names, -1 for "all",
 * -2 when unknown. */
int brd_perf_type_parse(const char *name);
int brd_perf_op_parse(const char *name);

/* One (type, op, nranks, seed) input pattern with its precomputed bounds. */
typedef struct {
  ncclDataType_t dtype;
  int op;            /* op index, or BRD_PERF_OP_COPY */
  int nranks;
  uint64_t seed;
  size_t esize;
  int is_float;
  int is_signed;
  uint64_t mask;     /* low esize*8 bits */
  uint64_t poison;   /* a pattern no input and no result ever takes */
  /* Sum-like ops: values 1..span (dense), or 0/1 with at most one nonzero
   * in every `stride` ranks (sparse) when even 1 per rank would not fit. */
  long span;
  long stride;
  long scale;        /* float avg: every value is a multiple of nranks */
} brd_perf_gen_t;

/* Prepares the pattern for rank-independent use. Never fails: an unknown
 * type must be rejected before (brd_perf_type_size == 0). */
void brd_perf_gen_init(brd_perf_gen_t *g, ncclDataType_t dtype, int op,
                       int nranks, uint64_t seed);

/* The input element idx of rank's send buffer. */
uint64_t brd_perf_gen_input(const brd_perf_gen_t *g, int rank, size_t idx);

/* The reduction over every rank of input element idx: what a reducing
 * collective must leave there. */
uint64_t brd_perf_gen_reduce(const brd_perf_gen_t *g, size_t idx);

/* 1 when got is an acceptable result for want. */
int brd_perf_gen_match(const brd_perf_gen_t *g, uint64_t got, uint64_t want);

/* The mulsum scalar of rank (1 or 2, in dtype), as bits. */
uint64_t brd_perf_gen_scalar(const brd_perf_gen_t *g, int rank);

/* Byte a whole buffer is filled with to poison it for dtype. */
unsigned char brd_perf_poison_byte(ncclDataType_t dtype);

/* Element access in a buffer of dtype elements (host memory). */
uint64_t brd_perf_elem_load(const void *buf, size_t esize, size_t idx);
void brd_perf_elem_store(void *buf, size_t esize, size_t idx, uint64_t bits);

/* Conversions between double and dtype bits, round to nearest even; exposed
 * for the tests of this module. */
double brd_perf_bits_to_double(ncclDataType_t dtype, uint64_t bits);
uint64_t brd_perf_double_to_bits(ncclDataType_t dtype, double v);

#endif /* BRD_TOOLS_DATA_H */
