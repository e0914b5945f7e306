/*
 * Braid plan layout and sequence numbers. See layout.h.
 */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "device/layout.h"
#include "device/redop.h"

/* See layout.h. */
void brd_plan_destroy(brd_ir_plan_t *plan) { free(plan); }

/* See layout.h. */
ncclResult_t brd_plan_clone(const brd_ir_plan_t *plan,
                            brd_ir_plan_t **plan_out) {
  brd_ir_plan_t *p = malloc(plan->total_bytes);
  if (p == NULL) {
    WARN("out of host memory copying a %u-byte plan", plan->total_bytes);
    return ncclSystemError;
  }
  memcpy(p, plan, plan->total_bytes);
  *plan_out = p;
  return ncclSuccess;
}

/* See layout.h. */
ncclResult_t brd_plan_layout_init(const brd_ir_plan_t *plan, size_t count,
                                  int dtype, size_t scratch_bytes,
                                  brd_plan_layout_t *layout_out) {
  brd_plan_layout_t l;
  memset(&l, 0, sizeof(l));
  l.esize = brd_reduce_dtype_size(dtype);
  if (l.esize == 0) {
    WARN("invalid data type %d", dtype);
    return ncclInvalidArgument;
  }
  l.count = count;
  l.align = 16 / l.esize;
  l.nchunks = plan->nchunks;
  l.fixed = (plan->flags & BRD_IR_PLAN_F_FIXED) != 0;
  if (plan->nslots > 0) {
    int one_phase = (plan->flags & BRD_IR_PLAN_F_ONE_PHASE) != 0;
    size_t area = one_phase ? scratch_bytes : scratch_bytes / 2;
    l.half_bytes = one_phase ? 0 : area;
    l.slot_bytes = (area / plan->nslots) & ~(size_t)15;
    size_t data = plan->proto == BRD_IR_PROTO_LL ? l.slot_bytes / 2 : l.slot_bytes;
    data &= ~(size_t)15;
    if (data < 16) {
      WARN("scratch of %zu bytes is too small for %u slots: use "
           "brd_plan_scratch_bytes (at least %zu bytes)", scratch_bytes,
           plan->nslots, (size_t)plan->nslots * 64 * 2);
      return ncclInternalError;
    }
    l.chunk_max = data / l.esize;
  } else {
    size_t q = (count + plan->nchunks - 1) / plan->nchunks;
    q = (q + l.align - 1) / l.align * l.align;
    l.chunk_max = q ? q : l.align;
  }
  l.window = l.chunk_max * plan->nchunks;
  l.niter = count == 0 ? 0 : (count + l.window - 1) / l.window;
  *layout_out = l;
  return ncclSuccess;
}

/* See layout.h. */
uint64_t brd_plan_epoch_reserve(uint64_t *cursor, uint64_t span) {
  uint64_t epoch = brd_plan_epoch_at(*cursor, span);
  *cursor = epoch + span;
  return epoch;
}

/* See layout.h. */
ncclResult_t brd_exec_segs_check(const brd_exec_seg_t *segs, uint32_t n, size_t count,
                                 int rank, const char *executor, const char *what) {
  for (uint32_t i = 0; segs != NULL && i < n; i++) {
    if ((segs[i].ptr == NULL && segs[i].count > 0) || segs[i].count > count) {
      WARN("%s: rank %d %s segment %u has %zu elements at %p (launch count %zu)", executor,
           rank, what, i, segs[i].count, segs[i].ptr, count);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* See layout.h. */
ncclResult_t brd_exec_bufs_check(const brd_ir_plan_t *plan, int rank, const void *input,
                                 const void *output, size_t count, const char *executor) {
  int want_in = brd_ir_coll_has_input(plan->coll, rank, (int)plan->root);
  int want_out = brd_ir_coll_has_output(plan->coll, rank, (int)plan->root);
  if ((want_in && input == NULL) || (want_out && output == NULL)) {
    WARN("%s: rank %d has a NULL %s buffer for %zu elements", executor, rank,
         want_in && input == NULL ? "input" : "output", count);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
