/*
 * Braid plan layout: how one launch of a plan (device/ir.h) maps onto
 * memory, and the sequence numbers a launch reserves. Both executors read
 * it (the inline parts on the device too, hence BRD_IR_HD); the plan
 * builder (plan/plan.h) makes the blobs it describes.
 *
 *   brd_plan_layout_t l;
 *   CHECK(brd_plan_layout_init(plan, count, dtype, scratch_bytes, &l));
 *   uint64_t epoch = brd_plan_epoch_reserve(&cursor,
 *                                           brd_plan_epoch_span(plan, &l));
 *   brd_plan_layout_chunk(&l, iter, chunk, &start, &n);  // element range
 *
 * The names keep their `brd_plan_` prefix: they describe a plan's layout,
 * and every layer above calls them by these names.
 */
#ifndef BRD_DEVICE_LAYOUT_H
#define BRD_DEVICE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/exec.h"
#include "device/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How one launch of a plan maps onto memory. The 64-bit fields come
 * first, so the struct has no padding (the CUDA executor carries it in
 * its kernel parameters, which are full). */
typedef struct brd_plan_layout {
  size_t count;      /* elements in the user buffers */
  size_t esize;      /* bytes per element */
  size_t align;      /* chunk start granularity in elements (16 bytes) */
  size_t chunk_max;  /* elements per chunk in a full window */
  size_t window;     /* elements per iteration: nchunks * chunk_max */
  uint64_t niter;    /* iterations; 0 when count is 0 */
  size_t slot_bytes; /* bytes per scratch slot (LL: packets) */
  size_t half_bytes; /* offset of scratch phase 1: bytes per phase, or 0
                      * for a one-phase plan (the phase is then ignored) */
  uint32_t nchunks;
  int fixed;         /* BRD_IR_PLAN_F_FIXED: chunks never spread */
} brd_plan_layout_t;

BRD_IR_STATIC_ASSERT(sizeof(brd_plan_layout_t) == 72, "brd_plan_layout_t has no padding");

/* Resolves the plan for count elements of dtype with a scratch buffer of
 * scratch_bytes per rank (both phases, or the one area of a one-phase
 * plan). Every window but the last holds chunk_max elements per chunk (a
 * 16-byte multiple that fits one slot); the last window spreads what is
 * left evenly over the chunks, 16-byte aligned where the count allows, so
 * trailing chunks may be short or empty. A BRD_IR_PLAN_F_FIXED plan never
 * spreads: chunk c of a window always starts at c * chunk_max, so the
 * chunks of a buffer do not depend on its count (both ends of a
 * point-to-point transfer agree without sharing their plans). For a
 * buffer of several segments, count is one segment's. ncclInvalidArgument
 * for a bad dtype; ncclInternalError when the scratch is too small for 16
 * bytes of data per slot. Pure; any thread. */
ncclResult_t brd_plan_layout_init(const brd_ir_plan_t *plan, size_t count,
                                  int dtype, size_t scratch_bytes,
                                  brd_plan_layout_t *layout_out);

/* Element range [*start_out, *start_out + *n_out) of chunk `chunk` in
 * iteration `iter` of a segment of seg_count elements, relative to the
 * segment's start: the layout's rule applied to seg_count instead of the
 * launch's count (they are equal except for point-to-point segments, which
 * may be shorter and then have empty chunks and iterations). */
static inline BRD_IR_HD void brd_plan_layout_seg_chunk(const brd_plan_layout_t *l,
                                                       size_t seg_count, uint64_t iter,
                                                       uint32_t chunk, size_t *start_out,
                                                       size_t *n_out) {
  size_t wstart = (size_t)iter * l->window;
  size_t left = seg_count > wstart ? seg_count - wstart : 0;
  size_t w = left < l->window ? left : l->window;
  size_t q = l->chunk_max;
  if (w < l->window && !l->fixed) {
    q = (w + l->nchunks - 1) / l->nchunks;
    q = (q + l->align - 1) / l->align * l->align;
  }
  size_t lo = (size_t)chunk * q, hi = lo + q;
  if (lo > w) lo = w;
  if (hi > w) hi = w;
  *start_out = wstart + lo;
  *n_out = hi - lo;
}

/* Element range of chunk `chunk` in iteration `iter` of a buffer (or of
 * each segment) of the launch's count. */
static inline BRD_IR_HD void brd_plan_layout_chunk(const brd_plan_layout_t *l,
                                                   uint64_t iter, uint32_t chunk,
                                                   size_t *start_out, size_t *n_out) {
  brd_plan_layout_seg_chunk(l, l->count, iter, chunk, start_out, n_out);
}

/* Sequence numbers one launch uses: niter * seq_per_iter. */
static inline BRD_IR_HD uint64_t brd_plan_epoch_span(const brd_ir_plan_t *plan,
                                                     const brd_plan_layout_t *l) {
  return l->niter * plan->seq_per_iter;
}

/* The epoch a launch of `span` sequence numbers gets when the next free
 * one is `cursor`: cursor itself, or the next multiple of 2^32 when the
 * launch's range would reach it. The rule of brd_plan_epoch_reserve, also
 * applied on the device to a cursor kept there. */
static inline BRD_IR_HD uint64_t brd_plan_epoch_at(uint64_t cursor, uint64_t span) {
  const uint64_t wrap = (uint64_t)1 << 32;
  uint64_t next = (cursor / wrap + 1) * wrap;
  return span > 0 && cursor + span >= next ? next : cursor;
}

/* A channel's epoch for a launch when its pair's next free sequence
 * number is `cursor` and the launch uses `span` of them (the cursors the
 * kernels keep on the device, exec_cuda.h chan_cursor_dev). Collective
 * and point-to-point plans: brd_plan_epoch_at. A one-sided plan
 * (BRD_IR_PLAN_F_ONE_SIDED) counts signals, not launches: its one SIGNAL
 * or WAIT stands for `span` signals (1 to put or signal, a wait's count),
 * so its epoch is the one of the last, cursor + span - 1, and there is no
 * skip at multiples of 2^32 (it has no LL flags, and the peer's counter
 * must move by exactly one per signal). span >= 1. */
static inline BRD_IR_HD uint64_t brd_plan_chan_epoch(const brd_ir_plan_t *plan,
                                                     uint64_t cursor, uint64_t span) {
  if (plan->flags & BRD_IR_PLAN_F_ONE_SIDED) return cursor + span - 1;
  return brd_plan_epoch_at(cursor, span);
}

/* The pair's cursor after a launch that got `epoch` from
 * brd_plan_chan_epoch with the same span. */
static inline BRD_IR_HD uint64_t brd_plan_chan_next(const brd_ir_plan_t *plan,
                                                    uint64_t epoch, uint64_t span) {
  return plan->flags & BRD_IR_PLAN_F_ONE_SIDED ? epoch + 1 : epoch + span;
}

/* Reserves `span` sequence numbers for one launch: returns the epoch to
 * pass to the executor and advances *cursor past the launch. The range
 * (epoch, epoch + span] never contains a multiple of 2^32, so 32-bit LL
 * flags are never 0 (the value of fresh scratch) and never wrap inside a
 * launch. The cursor belongs to the communicator and starts at 0; all
 * ranks must reserve the same spans in the same order. */
uint64_t brd_plan_epoch_reserve(uint64_t *cursor, uint64_t span);

/* Frees a plan from brd_plan_builder_finish or brd_plan_clone. NULL is a
 * no-op. */
void brd_plan_destroy(brd_ir_plan_t *plan);

/* Copies a blob into new memory (one malloc). ncclSystemError when out of
 * memory. */
ncclResult_t brd_plan_clone(const brd_ir_plan_t *plan,
                            brd_ir_plan_t **plan_out);

/* Checks that rank has the input and output buffers its part of plan's
 * collective reads and writes (brd_ir_coll_has_input/output). Otherwise
 * ncclInvalidArgument with a WARN naming the executor, the rank and the
 * missing buffer. Any thread. */
ncclResult_t brd_exec_bufs_check(const brd_ir_plan_t *plan, int rank, const void *input,
                                 const void *output, size_t count, const char *executor);

/* Checks a launch's segment table (segs[0..n), NULL for none): every
 * buffer present unless empty, none longer than the launch's count. On a
 * bad segment, ncclInvalidArgument with a WARN naming the executor, the
 * rank and which table (what: "input", "output"). Any thread. */
ncclResult_t brd_exec_segs_check(const brd_exec_seg_t *segs, uint32_t n, size_t count,
                                 int rank, const char *executor, const char *what);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRD_DEVICE_LAYOUT_H */
