/*
 * Braid IR addressing: where the refs of a plan's ops (device/ir.h) land
 * in memory for one launch, written once for both executors (exec_host.c
 * on the CPU, exec.cu on the GPU: BRD_IR_HD). Everything here reads a
 * brd_ir_view_t, the part of a launch that is the same for both: the
 * layout, this rank's own buffers and segment tables, the epochs and the
 * scratch phase. What differs between the executors (a channel's peer
 * pointers, the output exchange, a staging half) stays in each: they pass
 * a peer's segment base to brd_ir_seg_at themselves.
 *
 *   seq(it, k) = epoch + it * seq_per_iter + k        brd_ir_seq_rel
 *   a semaphore counts from its channel's epoch        brd_ir_sem_value
 *   an LL flag is (uint32_t)seq(it, k)                 brd_ir_ll_flag
 *   slot s = scratch + phase * half_bytes + s * slot_bytes
 *   chunk c of segment g = segment g's base + the layout's chunk range
 *   an op's chunk length = that of the segment its first input or
 *   output ref names (the launch's count if none)      brd_ir_op_chunk_len
 */
#ifndef BRD_DEVICE_IR_ADDR_H
#define BRD_DEVICE_IR_ADDR_H

#include <stddef.h>
#include <stdint.h>

#include "device/exec.h"
#include "device/ir.h"
#include "device/layout.h"

/* One rank's launch, as addressing sees it. Borrowed pointers. */
typedef struct brd_ir_view {
  brd_plan_layout_t layout;       /* the launch's, by value */
  const brd_exec_seg_t *in_segs;  /* separate inputs (point-to-point); NULL: strided */
  const brd_exec_seg_t *out_segs; /* separate outputs; NULL: strided */
  const char *input;              /* this rank's input, segment 0 */
  char *output;                   /* this rank's output, segment 0 */
  size_t in_stride;               /* elements between segments (never 0) */
  size_t out_stride;
  const uint64_t *chan_epoch;     /* per channel, semaphores only; NULL: epoch */
  uint64_t epoch;                 /* the launch's */
  uint32_t seq_per_iter;          /* the plan's */
  uint32_t phase;                 /* scratch phase, 0 or 1 */
} brd_ir_view_t;

/* Sequence number of k in iteration iter, relative to the launch's epoch.
 * A WAIT for a value <= 0 names a point before the launch. */
static inline BRD_IR_HD int64_t brd_ir_seq_rel(const brd_ir_view_t *v, uint64_t iter,
                                               int32_t k) {
  return (int64_t)iter * v->seq_per_iter + k;
}

/* The value seq(iter, k) of a semaphore of channel `chan`, which counts
 * from the channel's epoch. */
static inline BRD_IR_HD uint64_t brd_ir_sem_value(const brd_ir_view_t *v, unsigned chan,
                                                  uint64_t iter, int32_t k) {
  uint64_t e = v->chan_epoch != NULL ? v->chan_epoch[chan] : v->epoch;
  return e + (uint64_t)brd_ir_seq_rel(v, iter, k);
}

/* The flag of LL packets of seq(iter, k): the launch's epoch, always. */
static inline BRD_IR_HD uint32_t brd_ir_ll_flag(const brd_ir_view_t *v, uint64_t iter,
                                                int32_t k) {
  return (uint32_t)(v->epoch + (uint64_t)brd_ir_seq_rel(v, iter, k));
}

/* Slot `slot` of a scratch (this rank's or a peer's) in the launch's
 * phase. */
static inline BRD_IR_HD char *brd_ir_slot_addr(const brd_ir_view_t *v, char *scratch,
                                               uint32_t slot) {
  return scratch + (size_t)v->phase * v->layout.half_bytes +
         (size_t)slot * v->layout.slot_bytes;
}

/* Segment `seg` of a strided buffer at base: seg * stride elements in. */
static inline BRD_IR_HD char *brd_ir_seg_at(const brd_ir_view_t *v, const void *base,
                                            uint32_t seg, size_t stride) {
  return (char *)base + (size_t)seg * stride * v->layout.esize;
}

/* Elements of segment `seg` of the input or output ref names: a local
 * separate buffer's own count, else the launch's. */
static inline BRD_IR_HD size_t brd_ir_seg_count(const brd_ir_view_t *v, const brd_ir_ref_t *ref,
                                                uint32_t seg) {
  const brd_exec_seg_t *table =
      (ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT ? v->in_segs : v->out_segs;
  return table != NULL && ref->chan == BRD_IR_CHAN_LOCAL ? table[seg].count
                                                         : v->layout.count;
}

/* Start of segment `seg` of this rank's own input or output (ref is
 * local). */
static inline BRD_IR_HD char *brd_ir_local_seg(const brd_ir_view_t *v, const brd_ir_ref_t *ref,
                                               uint32_t seg) {
  int input = (ref->buf & BRD_IR_BUF_MASK) == BRD_IR_BUF_INPUT;
  const brd_exec_seg_t *table = input ? v->in_segs : v->out_segs;
  if (table != NULL) return (char *)table[seg].ptr;
  return input ? brd_ir_seg_at(v, v->input, seg, v->in_stride)
               : brd_ir_seg_at(v, v->output, seg, v->out_stride);
}

/* Address of chunk `chunk` of iteration iter in a segment at seg_base of
 * seg_count elements. */
static inline BRD_IR_HD char *brd_ir_chunk_addr(const brd_ir_view_t *v, char *seg_base,
                                                size_t seg_count, uint64_t iter,
                                                uint32_t chunk) {
  size_t start, n;
  brd_plan_layout_seg_chunk(&v->layout, seg_count, iter, chunk, &start, &n);
  return seg_base + start * v->layout.esize;
}

/* Elements of chunk op->chunk + t of a data op in iteration iter: those
 * of the segment its first input or output ref names (the launch's count
 * for strided segments and for ops between scratch slots). */
static inline BRD_IR_HD size_t brd_ir_op_chunk_len(const brd_ir_view_t *v, const brd_ir_op_t *op,
                                                   uint64_t iter, uint32_t t) {
  size_t count = v->layout.count, start, n;
  for (int r = 0; r < op->nsrc + op->ndst; r++) {
    if (!brd_ir_buf_is_io(op->ref[r].buf)) continue;
    count = brd_ir_seg_count(v, &op->ref[r], (op->ref[r].index + t) / v->layout.nchunks);
    break;
  }
  brd_plan_layout_seg_chunk(&v->layout, count, iter, op->chunk + t, &start, &n);
  return n;
}

#endif /* BRD_DEVICE_IR_ADDR_H */
