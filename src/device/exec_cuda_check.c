/*
 * Braid CUDA executor: the host-side checks of plans and launch arguments
 * (exec_cuda.h), in C, shared by the CUDA executor (exec.cu) and by the
 * CUDA simulator's executor (tests/cudasim/exec_sim.c), so both refuse
 * exactly the same plans and arguments with the same codes and messages.
 */
#include <stdint.h>
#include <stdio.h>

#include "base/check.h"
#include "base/debug.h"
#include "device/exec_cuda.h"
#include "device/ir.h"

/* WARNs why a plan cannot run, at (rank, block, op) where known (-1 if
 * not), and returns ncclInternalError. */
static ncclResult_t bad_plan(int rank, int block, int opi, const char *why) {
  if (rank < 0)
    WARN("CUDA executor: plan rejected: %s. The blob is damaged or was not "
         "built by brd_plan_builder_finish", why);
  else
    WARN("CUDA executor: plan rejected at rank %d block %d op %d: %s. The "
         "plan generator built an op this executor cannot run; check the "
         "plan with brd_plan_verify", rank, block, opi, why);
  return ncclInternalError;
}

/* Whether ref fits the plan; NULL when it does, else why not. */
static const char *ref_problem(const brd_ir_plan_t *p, const brd_ir_op_t *op,
                               const brd_ir_ref_t *ref, uint32_t nchans) {
  uint32_t kind = ref->buf & BRD_IR_BUF_MASK;
  int local = ref->chan == BRD_IR_CHAN_LOCAL;
  if (!local && ref->chan >= nchans)
    return "reference through a channel the rank does not have";
  if (kind == BRD_IR_BUF_SEM) return "semaphore named by a data op";
  if (kind > BRD_IR_BUF_SEM) return "unknown buffer kind";
  if ((ref->buf & BRD_IR_REF_LL) && kind != BRD_IR_BUF_SCRATCH)
    return "LL flag on a buffer that is not scratch";
  if (kind == BRD_IR_BUF_INPUT && !local && !(p->flags & BRD_IR_PLAN_F_PEER_INPUT))
    return "another rank's input in a plan not flagged to read peers' inputs";
  /* Input and output indices also name segments, whose number only the
   * launch knows (the verifier proves the plan stays inside them). */
  if (kind == BRD_IR_BUF_SCRATCH && (uint64_t)ref->index + op->nchunks > p->nslots)
    return "scratch slot out of range";
  return NULL;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_check(const brd_ir_plan_t *p) {
  if (p == NULL || p->magic != BRD_IR_MAGIC || p->version != BRD_IR_VERSION) {
    WARN("CUDA executor: not a Braid plan (magic/version mismatch)");
    return ncclInternalError;
  }
  uint64_t total = p->total_bytes;
  uint64_t nrb = (uint64_t)p->nranks * p->nblocks;
  if (p->nranks == 0 || p->nblocks == 0 || p->seq_per_iter == 0 ||
      p->nchunks == 0 || total < sizeof(*p) || p->root >= p->nranks ||
      p->coll >= BRD_IR_COLL_COUNT ||
      (p->flags & ~BRD_IR_PLAN_F_ALL) != 0 ||
      (p->rank_off | p->block_off | p->chan_off | p->op_off) % 4 != 0 ||
      p->rank_off + (uint64_t)p->nranks * sizeof(brd_ir_rank_t) > total ||
      p->block_off + nrb * sizeof(brd_ir_block_t) > total ||
      p->chan_off + (uint64_t)p->nchans * sizeof(brd_ir_chan_t) > total ||
      p->op_off + (uint64_t)p->nops * sizeof(brd_ir_op_t) > total)
    return bad_plan(-1, -1, -1, "header fields or table offsets out of range");
  for (int r = 0; r < p->nranks; r++) {
    const brd_ir_rank_t *rk = brd_ir_plan_rank(p, r);
    if ((uint64_t)rk->chan_first + rk->nchans > p->nchans)
      return bad_plan(r, -1, -1, "channel table out of range");
    for (uint32_t c = 0; c < rk->nchans; c++) {
      const brd_ir_chan_t *ch = brd_ir_plan_chan(p, r, (int)c);
      if (ch->peer < 0 || ch->peer >= p->nranks || ch->peer == r)
        return bad_plan(r, -1, -1, "channel to an invalid peer");
      if (ch->type != BRD_IR_CHAN_MEMORY)
        return bad_plan(r, -1, -1, "channel type other than memory");
    }
    for (int bi = 0; bi < p->nblocks; bi++) {
      const brd_ir_block_t *blk = brd_ir_plan_block(p, r, bi);
      if ((uint64_t)blk->op_first + blk->nops > p->nops)
        return bad_plan(r, bi, -1, "op list out of range");
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, bi);
      for (uint32_t i = 0; i < blk->nops; i++) {
        const brd_ir_op_t *op = &ops[i];
        if (!brd_ir_op_is_runnable(op->code))
          return bad_plan(r, bi, (int)i, "opcode not supported by the CUDA executor");
        if (brd_ir_op_is_sync(op->code) &&
            ((op->ref[0].buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SEM ||
             op->ref[0].chan == BRD_IR_CHAN_LOCAL || op->ref[0].chan >= rk->nchans ||
             op->ref[0].index >= p->nsems))
          return bad_plan(r, bi, (int)i, "semaphore reference out of range");
        if (!brd_ir_op_is_data(op->code)) continue;
        if (op->nsrc < 1 || op->ndst < 1 || op->nsrc + op->ndst > BRD_IR_MAX_REFS)
          return bad_plan(r, bi, (int)i, "data op without sources and destinations");
        if ((uint64_t)op->chunk + op->nchunks > p->nchunks)
          return bad_plan(r, bi, (int)i, "chunk out of range");
        for (int k = 0; k < op->nsrc + op->ndst; k++) {
          const char *why = ref_problem(p, op, &op->ref[k], rk->nchans);
          if (why != NULL) return bad_plan(r, bi, (int)i, why);
        }
      }
    }
  }
  return ncclSuccess;
}

/* A host segment table: fits the launch, every buffer present, none longer
 * than the launch's count. */
static ncclResult_t segs_check(const brd_exec_cuda_args_t *args,
                               const brd_exec_cuda_seg_t *segs, uint32_t n,
                               const char *what) {
  if (segs == NULL) return ncclSuccess;
  if (n > BRD_EXEC_CUDA_INLINE_SEGS) {
    WARN("CUDA executor: rank %d has %u %s segments, more than the %d a "
         "launch carries; pass a device table", args->rank, n, what,
         BRD_EXEC_CUDA_INLINE_SEGS);
    return ncclInvalidArgument;
  }
  for (uint32_t i = 0; i < n; i++) {
    if ((segs[i].ptr == NULL && segs[i].count > 0) || segs[i].count > args->count) {
      WARN("CUDA executor: rank %d %s segment %u has %zu elements at %p "
           "(launch count %zu)", args->rank, what, i, segs[i].count,
           segs[i].ptr, args->count);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_args_check(const brd_exec_cuda_args_t *args,
                                      const brd_ir_plan_t *p, uint32_t nchans) {
  int want_in = brd_ir_coll_has_input(p->coll, (int)args->rank, (int)p->root);
  int want_out = brd_ir_coll_has_output(p->coll, (int)args->rank, (int)p->root);
  if ((want_in && args->input == NULL) || (want_out && args->output == NULL)) {
    WARN("CUDA executor: rank %d has a NULL %s buffer for %zu elements",
         args->rank, want_in && args->input == NULL ? "input" : "output",
         args->count);
    return ncclInvalidArgument;
  }
  if (args->in_segs_dev == NULL)
    CHECK(segs_check(args, args->in_segs, args->n_in_segs, "input"));
  if (args->out_segs_dev == NULL)
    CHECK(segs_check(args, args->out_segs, args->n_out_segs, "output"));
  if (nchans > 0 && args->chans == NULL && args->chans_dev == NULL) {
    WARN("CUDA executor: rank %d has no channel pointers for a plan with %u "
         "channels", args->rank, nchans);
    return ncclInvalidArgument;
  }
  if (args->chans != NULL && args->chans_dev == NULL && nchans <= BRD_EXEC_CUDA_INLINE_CHANS &&
      (p->flags & BRD_IR_PLAN_F_PEER_INPUT)) {
    for (uint32_t c = 0; c < nchans; c++) {
      if (args->chans[c].peer_input != NULL) continue;
      WARN("CUDA executor: rank %d runs a plan reading peers' inputs, but channel %u "
           "has no input pointer", args->rank, c);
      return ncclInvalidArgument;
    }
  }
  int host_epochs = args->chan_epoch != NULL && args->chan_epoch_dev == NULL;
  if ((args->chans_dev == NULL || host_epochs) && nchans > BRD_EXEC_CUDA_INLINE_CHANS) {
    WARN("CUDA executor: rank %d has %u channels, more than the %d a launch "
         "carries; pass device tables (brd_exec_cuda_chans_create, "
         "chan_epoch_dev)", args->rank, nchans, BRD_EXEC_CUDA_INLINE_CHANS);
    return ncclInvalidArgument;
  }
  if (args->chan_cursor_dev != NULL &&
      (args->device_epoch || args->chan_epoch_dev != NULL ||
       (nchans > 0 && args->chan_epoch == NULL))) {
    WARN("CUDA executor: rank %d: per-pair cursors on the device need the channels' "
         "spans in chan_epoch (a host array), without device_epoch or chan_epoch_dev",
         args->rank);
    return ncclInvalidArgument;
  }
  if (args->device_epoch && (args->chan_epoch != NULL || args->chan_epoch_dev != NULL)) {
    WARN("CUDA executor: rank %d: per-channel epochs come from the caller, "
         "device_epoch from the status block; pass one or the other", args->rank);
    return ncclInvalidArgument;
  }
  if (args->xchg) {
    /* The kernel resolves every channel into fixed per-block arrays and
     * reads the slots from the inline table; point-to-point pairs keep
     * their own epochs, which the exchange's tag (the launch's epoch)
     * cannot follow. */
    const char *why = NULL;
    if (nchans > BRD_IR_XCHG_MAX_CHANS)
      why = "more channels than an exchange covers";
    else if (nchans > 0 && (args->chans == NULL || args->chans_dev != NULL))
      why = "a device channel table (the exchange needs inline channels)";
    else if (args->chan_cursor_dev != NULL || args->chan_epoch != NULL ||
             args->chan_epoch_dev != NULL)
      why = "per-channel epochs (point-to-point)";
    for (uint32_t c = 0; why == NULL && c < nchans; c++)
      if (args->chans[c].xchg_pub == NULL || args->chans[c].xchg_slot == NULL)
        why = "a channel without both exchange slots";
    if (why != NULL) {
      WARN("CUDA executor: rank %d exchanges outputs over %u channels with %s; an "
           "exchange needs at most %u inline channels, each with both slots, and the "
           "launch's epoch", args->rank, nchans, why, BRD_IR_XCHG_MAX_CHANS);
      return ncclInvalidArgument;
    }
  }
  if (p->nslots > 0 && (args->scratch == NULL || (uintptr_t)args->scratch % 16 != 0)) {
    WARN("CUDA executor: rank %d scratch %p: expected a 16-byte aligned buffer "
         "of brd_plan_scratch_bytes", args->rank, args->scratch);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_epochs_check(const brd_exec_cuda_args_t *args, uint32_t nchans,
                                        uint64_t span) {
  const uint64_t wrap = (uint64_t)1 << 32;
  uint32_t nch = args->chan_epoch != NULL && args->chan_epoch_dev == NULL ? nchans : 0;
  for (uint32_t c = 0; c <= nch; c++) {
    uint64_t e = c < nch ? args->chan_epoch[c] : args->epoch;
    if (e / wrap != (e + span) / wrap) {
      WARN("CUDA executor: epoch %llu + %llu sequence numbers crosses a "
           "multiple of 2^32; reserve epochs with brd_plan_epoch_reserve",
           (unsigned long long)e, (unsigned long long)span);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
void brd_exec_cuda_hang_warn(const brd_exec_cuda_hang_t *h, double secs) {
  if (h->what == BRD_EXEC_CUDA_WAIT_SEM) {
    WARN("rank %d block %d op %d (iteration %llu): no progress for %.3g s "
         "waiting for semaphore %d from rank %d to reach %llu; it holds "
         "%llu. Rank %d stopped making progress: check that every rank "
         "called the same collective with the same count, datatype and op, "
         "or raise BRAID_TIMEOUT",
         h->rank, h->block, h->op, (unsigned long long)h->iter, secs, h->index,
         h->peer, (unsigned long long)h->expected, (unsigned long long)h->seen,
         h->peer);
  } else if (h->what == BRD_EXEC_CUDA_WAIT_PACKET) {
    WARN("rank %d block %d op %d (iteration %llu): no progress for %.3g s "
         "waiting for LL packets in scratch slot %d with flag %llu; the "
         "slot holds flag %llu. A peer stopped making progress: check that "
         "every rank called the same collective with the same count, "
         "datatype and op, or raise BRAID_TIMEOUT",
         h->rank, h->block, h->op, (unsigned long long)h->iter, secs, h->index,
         (unsigned long long)h->expected, (unsigned long long)h->seen);
  } else if (h->what == BRD_EXEC_CUDA_WAIT_XCHG) {
    WARN("rank %d block %d: no word for %.3g s from rank %d on where its "
         "output is (exchange slot of channel %d, tag %llu; it holds %llu). "
         "This rank's output buffer is registered (ncclCommRegister): when "
         "one rank passes registered buffers, every rank must (NCCL's "
         "rule). Check that rank %d registered its buffers and called the "
         "same collective, or raise BRAID_TIMEOUT",
         h->rank, h->block, secs, h->peer, h->index, (unsigned long long)h->expected,
         (unsigned long long)h->seen, h->peer);
  } else {
    WARN("rank %d block %d op %d (iteration %llu): no progress for %.3g s "
         "at barrier %d: %llu of %llu blocks arrived. Raise BRAID_TIMEOUT "
         "if the GPU is shared with other work",
         h->rank, h->block, h->op, (unsigned long long)h->iter, secs, h->index,
         (unsigned long long)h->seen, (unsigned long long)h->expected);
  }
}
