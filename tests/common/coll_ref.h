/*
 * Test helpers for collectives: input patterns whose reductions are exact in
 * any order, an independent CPU reference, and element comparison. The
 * number formats are decoded and encoded here from their bit layouts, not
 * through the library, so the reference does not share code with it.
 */
#ifndef BRD_TESTS_COLL_REF_H
#define BRD_TESTS_COLL_REF_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

size_t ref_dtype_size(ncclDataType_t dt);
const char *ref_dtype_name(ncclDataType_t dt);
const char *ref_op_name(ncclRedOp_t op);
int ref_dtype_is_float(ncclDataType_t dt);

/* Value of element i of rank r's input (before any reduction) for op: small
 * integers (or {0,1} for fp8 e5m2 sums) so every reduction order of up to
 * 8 ranks is exact in the type. */
double ref_input_value(ncclDataType_t dt, ncclRedOp_t op, int rank, size_t i);

/* Writes value v (exactly representable, or rounded to nearest) as element
 * i of buf. */
void ref_store(ncclDataType_t dt, void *buf, size_t i, double v);

/* Element i of buf as a double. */
double ref_load(ncclDataType_t dt, const void *buf, size_t i);

/* Fills n elements of buf with rank r's input for op. */
void ref_fill_input(ncclDataType_t dt, ncclRedOp_t op, int rank, void *buf,
                    size_t n);

/* Fills n elements with a poison pattern no correct result produces. */
void ref_poison(ncclDataType_t dt, void *buf, size_t n);

/* Expected reduction over nranks of element i (ranks' inputs as above),
 * written to expect[i]. PreMulSum is scaled by `scalar`. */
void ref_reduce_expect(ncclDataType_t dt, ncclRedOp_t op, int nranks,
                       double scalar, void *expect, size_t n);

/* Expected reduction over nranks of elements first .. first+n-1 of the
 * ranks' inputs (ref_fill_input over the whole send buffer), written to
 * expect[0 .. n): a reduce-scatter's output is the range of its segment. */
void ref_reduce_expect_range(ncclDataType_t dt, ncclRedOp_t op, int nranks,
                             double scalar, void *expect, size_t first,
                             size_t n);

/* Value of element i of segment seg of rank r's buffer for data movement
 * (all-gather, all-to-all, broadcast, gather, scatter, send/recv): exact in
 * the type and different for neighbouring ranks, segments and elements, so
 * a shifted or swapped piece shows. */
double ref_move_value(ncclDataType_t dt, int rank, int seg, size_t i);

/* Fills n elements of buf with ref_move_value(dt, rank, seg, 0 .. n-1). */
void ref_fill_move(ncclDataType_t dt, int rank, int seg, void *buf, size_t n);

/* Counts elements of buf that differ from ref_move_value(dt, rank, seg,
 * i); reports the first into msg (may be NULL). */
size_t ref_check_move(ncclDataType_t dt, int rank, int seg, const void *buf,
                      size_t n, char *msg, size_t msglen);

/* Counts elements of buf (n bytes' worth of dt) still holding the poison
 * pattern of ref_poison. */
size_t ref_count_poison(ncclDataType_t dt, const void *buf, size_t n);

/* Counts elements of got that differ from expect: bit-exact, except float
 * avg/premulsum which allow `ulps` units in the last place. Reports the
 * first mismatch into msg (may be NULL). */
size_t ref_compare(ncclDataType_t dt, int tolerant, const void *got,
                   const void *expect, size_t n, char *msg, size_t msglen);

/* All-reduce, all-gather and reduce-scatter as one call of every rank,
 * each rank's buffers laid out as NCCL defines them (in place: the
 * all-gather's input is the rank's block of its output, the
 * reduce-scatter's output the rank's block of its input). */
typedef enum { REF_AR, REF_AG, REF_RS } ref_kind_t;

/* Fills rank r's buffers (of n ranks, c elements per rank) for one call of
 * kind k: mem holds n * c elements, other as many; sets *send and *recv
 * into them (the output poisoned where the call must write it). */
void ref_case_fill(ref_kind_t k, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t c,
                   int inplace, char *mem, char *other, const void **send, void **recv);

/* Checks rank r's output of such a call against the reference: the number
 * of wrong elements, 0 when right, with the first described in msg.
 * expect: room for c elements. */
size_t ref_case_check(ref_kind_t k, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t c,
                      const void *recv, void *expect, char *msg, size_t mlen);

#endif
