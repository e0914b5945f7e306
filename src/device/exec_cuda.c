/*
 * Braid CUDA executor, host half: the objects of exec_cuda.h (plans in
 * device memory, status blocks, channel tables), the checks of plans and
 * launch arguments, each launch's set-up (layout, epochs, reduction,
 * inline tables, resolved into the kernel's arguments), the hang report,
 * and the copy-out's set-up. Plain C; the kernels are exec.cu's, reached
 * through the two entry points of exec_kernel.h, so the CUDA simulator
 * runs this same file with kernels of its own (tests/cudasim/).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/cuda_wait.h"
#include "base/debug.h"
#include "base/param.h"
#include "base/time.h"
#include "device/exec_cuda.h"

#if BRAID_CUDA

#include "device/exec_kernel.h"
#include "device/layout.h"
#include "device/redop.h"

/* ---- checks -------------------------------------------------------------- */

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

/* Is channel `chan` of `rank` a switch channel? */
static int chan_is_switch(const brd_ir_plan_t *p, int rank, unsigned chan) {
  return chan != BRD_IR_CHAN_LOCAL && brd_ir_plan_chan(p, rank, (int)chan)->type == BRD_IR_CHAN_SWITCH;
}

/* Whether a switch op (device/ir.h) fits the plan; NULL when it does. */
static const char *switch_op_problem(const brd_ir_plan_t *p, int rank, const brd_ir_op_t *op,
                                     uint32_t nchans) {
  const brd_ir_ref_t *r0 = &op->ref[0];
  if (op->code == BRD_IR_OP_MC_BARRIER)
    return (r0->buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SEM || r0->chan >= nchans ||
                   !chan_is_switch(p, rank, r0->chan) || r0->index >= p->nsems
               ? "MC_BARRIER without a semaphore of the switch channel"
               : NULL;
  if (op->nsrc != 1 || op->ndst < 1 || op->nsrc + op->ndst > BRD_IR_MAX_REFS)
    return "switch op without one source and destinations";
  if ((uint64_t)op->chunk + op->nchunks > p->nchunks) return "chunk out of range";
  for (int k = 0; k < op->nsrc + op->ndst; k++) {
    const brd_ir_ref_t *ref = &op->ref[k];
    uint32_t kind = ref->buf & BRD_IR_BUF_MASK;
    int sw = ref->chan != BRD_IR_CHAN_LOCAL && ref->chan < nchans &&
             chan_is_switch(p, rank, ref->chan);
    const char *why = ref_problem(p, op, ref, nchans);
    if (why != NULL) return why;
    if (ref->buf & BRD_IR_REF_LL) return "LL reference in a switch op";
    /* Zero-copy switch plans reach the members' own buffers: inputs as
     * a reduction's source, outputs as a destination (device/ir.h). */
    if (sw && kind != BRD_IR_BUF_SCRATCH &&
        !((p->flags & BRD_IR_PLAN_F_PEER_INPUT) &&
          (kind == BRD_IR_BUF_INPUT ? k == 0 : k > 0)))
      return "a switch channel reference that is not a scratch slot (or, in a zero-copy "
             "plan, an input read or an output written)";
    int want_sw = k == 0 ? op->code == BRD_IR_OP_MC_REDUCE : op->code != BRD_IR_OP_MC_REDUCE;
    if (want_sw && !sw)
      return k == 0 ? "MC_REDUCE source not through the switch channel"
                    : "MC_STORE or MC_RED destination not through the switch channel";
    if (k == 0 && !sw && ref->chan != BRD_IR_CHAN_LOCAL)
      return "MC_STORE or MC_RED source that is not this rank's own buffer";
    if (k > 0 && !sw && (kind == BRD_IR_BUF_INPUT ||
                         (ref->chan != BRD_IR_CHAN_LOCAL &&
                          brd_ir_plan_chan(p, rank, ref->chan)->type != BRD_IR_CHAN_MEMORY)))
      return "MC_REDUCE destination that is an input or not reached by a store";
  }
  return NULL;
}

static ncclResult_t plan_check(const brd_ir_plan_t *p) {
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
    int nswitch = 0;
    for (uint32_t c = 0; c < rk->nchans; c++) {
      const brd_ir_chan_t *ch = brd_ir_plan_chan(p, r, (int)c);
      if (ch->type == BRD_IR_CHAN_SWITCH) {
        if (ch->peer != BRD_IR_SWITCH_PEER || ++nswitch > 1)
          return bad_plan(r, -1, -1, "switch channel with a peer, or more than one");
        continue;
      }
      if (ch->peer < 0 || ch->peer >= p->nranks || ch->peer == r)
        return bad_plan(r, -1, -1, "channel to an invalid peer");
      if (ch->type != BRD_IR_CHAN_MEMORY && ch->type != BRD_IR_CHAN_PORT)
        return bad_plan(r, -1, -1, "channel type other than memory or port");
    }
    for (int bi = 0; bi < p->nblocks; bi++) {
      const brd_ir_block_t *blk = brd_ir_plan_block(p, r, bi);
      if ((uint64_t)blk->op_first + blk->nops > p->nops)
        return bad_plan(r, bi, -1, "op list out of range");
      const brd_ir_op_t *ops = brd_ir_plan_ops(p, r, bi);
      for (uint32_t i = 0; i < blk->nops; i++) {
        const brd_ir_op_t *op = &ops[i];
        if (!brd_ir_op_is_runnable(op->code) && !brd_ir_op_is_switch(op->code))
          return bad_plan(r, bi, (int)i, "opcode not supported by the CUDA executor");
        if (brd_ir_op_is_switch(op->code)) {
          const char *why = switch_op_problem(p, r, op, rk->nchans);
          if (why != NULL) return bad_plan(r, bi, (int)i, why);
          continue;
        }
        if (brd_ir_op_is_sync(op->code) &&
            ((op->ref[0].buf & BRD_IR_BUF_MASK) != BRD_IR_BUF_SEM ||
             op->ref[0].chan == BRD_IR_CHAN_LOCAL || op->ref[0].chan >= rk->nchans ||
             op->ref[0].index >= p->nsems || chan_is_switch(p, r, op->ref[0].chan)))
          return bad_plan(r, bi, (int)i, "semaphore reference out of range");
        if (!brd_ir_op_is_data(op->code)) continue;
        if (op->nsrc < 1 || op->ndst < 1 || op->nsrc + op->ndst > BRD_IR_MAX_REFS)
          return bad_plan(r, bi, (int)i, "data op without sources and destinations");
        if ((uint64_t)op->chunk + op->nchunks > p->nchunks)
          return bad_plan(r, bi, (int)i, "chunk out of range");
        for (int k = 0; k < op->nsrc + op->ndst; k++) {
          const char *why = ref_problem(p, op, &op->ref[k], rk->nchans);
          if (why == NULL && chan_is_switch(p, r, op->ref[k].chan))
            why = "data op through a switch channel (switch ops only)";
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
  return brd_exec_segs_check(segs, n, args->count, args->rank, "CUDA executor", what);
}

static ncclResult_t args_check(const brd_exec_cuda_args_t *args,
                                      const brd_ir_plan_t *p, uint32_t nchans) {
  CHECK(brd_exec_bufs_check(p, (int)args->rank, args->input, args->output, args->count,
                            "CUDA executor"));
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
      if (args->chans[c].peer_input != NULL || chan_is_switch(p, args->rank, c)) continue;
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

static ncclResult_t epochs_check(const brd_exec_cuda_args_t *args, uint32_t nchans,
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

static void hang_warn(const brd_exec_cuda_hang_t *h, double secs) {
  if (h->what == BRD_EXEC_CUDA_WAIT_SEM) {
    WARN("rank %d block %d op %d (iteration %llu, launch epoch %llu, phase %u): "
         "no progress for %.3g s "
         "waiting for semaphore %d from rank %d to reach %llu; it holds "
         "%llu. Rank %d stopped making progress: check that every rank "
         "called the same collective with the same count, datatype and op, "
         "or raise BRAID_TIMEOUT",
         h->rank, h->block, h->op, (unsigned long long)h->iter,
         (unsigned long long)h->epoch, h->phase, secs, h->index,
         h->peer, (unsigned long long)h->expected, (unsigned long long)h->seen,
         h->peer);
  } else if (h->what == BRD_EXEC_WAIT_SWITCH) {
    WARN("rank %d block %d op %d (iteration %llu, launch epoch %llu, phase %u): "
         "no progress for %.3g s "
         "at a switch barrier (NVLS): word %d of switch semaphore %d reads %llu, "
         "expected %llu. Rank %d stopped making progress: check that every rank "
         "called the same collective with the same count, datatype and op, or "
         "raise BRAID_TIMEOUT",
         h->rank, h->block, h->op, (unsigned long long)h->iter,
         (unsigned long long)h->epoch, h->phase, secs, h->peer, h->index,
         (unsigned long long)h->seen, (unsigned long long)h->expected, h->peer);
  } else if (h->what == BRD_EXEC_CUDA_WAIT_PACKET) {
    WARN("rank %d block %d op %d (iteration %llu, launch epoch %llu, phase %u): "
         "no progress for %.3g s "
         "waiting for LL packets in scratch slot %d with flag %llu; the "
         "slot holds flag %llu. A peer stopped making progress: check that "
         "every rank called the same collective with the same count, "
         "datatype and op, or raise BRAID_TIMEOUT",
         h->rank, h->block, h->op, (unsigned long long)h->iter,
         (unsigned long long)h->epoch, h->phase, secs, h->index,
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
  } else if (h->what == BRD_EXEC_WAIT_PORT) {
    WARN("rank %d block %d op %d (iteration %llu, launch epoch %llu, phase %u): "
         "no progress for %.3g s "
         "waiting for a free slot of the port channels' trigger FIFO (slot %llu, "
         "the proxy has taken %llu). The proxy stopped draining it: a peer across "
         "the net stopped receiving. Check that every rank is alive, or raise "
         "BRAID_TIMEOUT", h->rank, h->block, h->op, (unsigned long long)h->iter,
         (unsigned long long)h->epoch, h->phase, secs,
         (unsigned long long)h->expected, (unsigned long long)h->seen);
  } else {
    WARN("rank %d block %d op %d (iteration %llu, launch epoch %llu, phase %u): "
         "no progress for %.3g s "
         "at barrier %d: %llu of %llu blocks arrived. Raise BRAID_TIMEOUT "
         "if the GPU is shared with other work",
         h->rank, h->block, h->op, (unsigned long long)h->iter,
         (unsigned long long)h->epoch, h->phase, secs, h->index,
         (unsigned long long)h->seen, (unsigned long long)h->expected);
  }
}

/* ---- objects, launches, status ------------------------------------------- */

/* Copies bytes from src to dst (src NULL: zeroes dst) on a private
 * non-blocking stream and waits for it, so a setup copy neither waits for
 * nor is overtaken by other streams' work: the legacy default stream would
 * wait for peers' kernels, which may be spinning on this rank. Only at a
 * communicator's creation (status, channel tables), before its first
 * launch; the wait is bounded (brd_cuda_stream_wait), since the
 * private stream shares a hardware queue with other ranks' streams. The
 * copy reads a private copy of src, so src is the caller's again when
 * this returns. abort_flag and *stuck_out as brd_cuda_stream_wait's:
 * dst must then stay allocated (this leaks its own copy of src). */
static ncclResult_t private_copy(void *dst, const void *src, size_t bytes,
                                 enum cudaMemcpyKind kind, const char *what,
                                 brd_exec_abort_flag_t *abort_flag, int *stuck_out) {
  ncclResult_t res = ncclSuccess;
  cudaStream_t s;
  void *stage = NULL;
  if (src != NULL) {
    /* A copy still queued when the wait gives up reads it later. */
    stage = malloc(bytes);
    if (stage == NULL) {
      WARN("out of host memory (%zu bytes) %s", bytes, what);
      return ncclSystemError;
    }
    memcpy(stage, src, bytes);
  }
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags", res, out);
  if (src == NULL) {
    CUDA_CHECK_GOTO(cudaMemsetAsync(dst, 0, bytes, s), what, res, out_stream);
  } else {
    CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, stage, bytes, kind, s), what, res,
                    out_stream);
  }
  res = brd_cuda_stream_wait(s, what, abort_flag, stuck_out);
  if (res != ncclSuccess && stage != NULL) {
    brd_cuda_leak_info(bytes, "host memory staging the copy");
    stage = NULL;
  }
out_stream:
  cudaStreamDestroy(s); /* returns at once; CUDA releases it after its work */
out:
  free(stage);
  return res;
}

/* Devices whose context holds every executor kernel (brd_exec_cuda_load). */
#define LOAD_MAX_DEVICES 256
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char load_done[LOAD_MAX_DEVICES]; /* under load_lock */

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_load(void) {
  int dev = 0;
  ncclResult_t res = ncclSuccess;
  CUDA_CHECK_GOTO(cudaGetDevice(&dev), "cudaGetDevice", res, out);
  if (dev < 0 || dev >= LOAD_MAX_DEVICES) return ncclSuccess; /* loads lazily */
  pthread_mutex_lock(&load_lock);
  if (!load_done[dev]) {
    cudaError_t e = brd_exec_kernels_load();
    if (e == cudaSuccess) {
      load_done[dev] = 1;
      INFO(BRD_SUBSYS_INIT, "CUDA executor: kernels loaded into device %d's context", dev);
    } else {
      (void)cudaGetLastError();
      WARN("CUDA: loading the executor's kernels on device %d failed: %s (%d). The "
           "library was built without code for this GPU's architecture, or the device is "
           "in a bad state; rebuild with CUDA_ARCHS naming it (nvidia-smi shows the GPU)",
           dev, cudaGetErrorString(e), (int)e);
      res = ncclUnhandledCudaError;
    }
  }
  pthread_mutex_unlock(&load_lock);
out:
  return res;
}

struct brd_exec_cuda_plan {
  brd_ir_plan_t *host; /* owned: brd_plan_clone */
  brd_ir_plan_t *dev;  /* owned: cudaMalloc, the same bytes */
  void *pinned;        /* owned: cudaHostAlloc, the source of enqueued
                        * copies (brd_exec_cuda_plan_create_on); NULL: none */
  cudaEvent_t copied;  /* owned: recorded after the copy outside a capture;
                        * NULL: none, or known complete */
  int uploaded;        /* dev holds the plan outside any graph, once
                        * `copied` completes (not for a plan made in a
                        * capture, whose copy is a node of that graph) */
  int mc_ops;          /* some op is a switch op */
  int mc_reduces;      /* some op is MC_REDUCE or MC_RED */
  int cc_major;        /* compute capability of the device it was made on */
  int device;
};

struct brd_exec_cuda_status {
  brd_exec_report_t *host;   /* owned: cudaHostAlloc (mapped) */
  brd_exec_report_t *dev;    /* the device's view of host */
  brd_exec_state_t *state;   /* owned: cudaMalloc */
  brd_exec_fifo_t *fifo;     /* owned: cudaHostAlloc (mapped); NULL: no ports */
  int reported;     /* the current failure was logged */
  int device;       /* where state lives */
};

/* Enqueues the copy of cp->pinned to cp->dev on `stream`; outside a
 * capture, records cp->copied after it (creating it the first time). */
static ncclResult_t plan_enqueue(brd_exec_cuda_plan_t *cp, cudaStream_t stream, int capturing) {
  ncclResult_t res = ncclSuccess;
  size_t bytes = cp->host->total_bytes;
  CUDA_CHECK_GOTO(cudaMemcpyAsync(cp->dev, cp->pinned, bytes, cudaMemcpyHostToDevice, stream),
                  "copying a plan to the device (cudaMemcpyAsync)", res, out);
  if (capturing) goto out;
  if (cp->copied == NULL)
    CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&cp->copied, cudaEventDisableTiming),
                    "cudaEventCreateWithFlags for a plan's upload", res, out);
  CUDA_CHECK_GOTO(cudaEventRecord(cp->copied, stream), "cudaEventRecord after a plan's upload",
                  res, out);
  cp->uploaded = 1;
out:
  return res;
}

/* The copy of cp->host to cp->dev: on a private stream, waited for
 * (async 0; *stuck_out as private_copy's), or enqueued on `stream` from
 * pinned memory (inside a capture as a node of the graph; outside with an
 * event after it). */
static ncclResult_t plan_upload(brd_exec_cuda_plan_t *cp, int async, cudaStream_t stream,
                                int capturing, int *stuck_out) {
  ncclResult_t res = ncclSuccess;
  size_t bytes = cp->host->total_bytes;
  if (!async) {
    res = private_copy(cp->dev, cp->host, bytes, cudaMemcpyHostToDevice,
                       "copying a plan to the device", NULL, stuck_out);
    cp->uploaded = res == ncclSuccess;
    return res;
  }
  CUDA_CHECK_GOTO(cudaHostAlloc(&cp->pinned, bytes, cudaHostAllocDefault),
                  "cudaHostAlloc for a plan's upload", res, out);
  memcpy(cp->pinned, cp->host, bytes);
  CHECK_GOTO(plan_enqueue(cp, stream, capturing), res, out);
out:
  return res; /* the caller frees what was made */
}

static ncclResult_t plan_create(const brd_ir_plan_t *plan, int async, cudaStream_t stream,
                                int capturing, brd_exec_cuda_plan_t **plan_out);

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_create(const brd_ir_plan_t *plan,
                                       brd_exec_cuda_plan_t **plan_out) {
  return plan_create(plan, 0, NULL, 0, plan_out);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_create_on(const brd_ir_plan_t *plan, cudaStream_t stream,
                                          int capturing, brd_exec_cuda_plan_t **plan_out) {
  return plan_create(plan, 1, stream, capturing, plan_out);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_use(brd_exec_cuda_plan_t *plan, cudaStream_t stream,
                                    int capturing) {
  ncclResult_t res = ncclSuccess;
  if (plan->pinned == NULL) return ncclSuccess; /* uploaded and waited for */
  if (!capturing) {
    /* Launches on other streams follow this one (brd_launch_cuda_order). */
    if (!plan->uploaded) res = plan_enqueue(plan, stream, 0);
    return res;
  }
  if (plan->uploaded && plan->copied != NULL) {
    cudaError_t e = cudaEventQuery(plan->copied);
    if (e == cudaSuccess) {
      cudaEventDestroy(plan->copied);
      plan->copied = NULL;
    } else if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      WARN("CUDA: cudaEventQuery on a plan's upload failed: %s (%d)", cudaGetErrorString(e),
           (int)e);
      return ncclUnhandledCudaError;
    }
  }
  /* Not known to be on the device: the graph copies it again, before its
   * kernel, from the same pinned bytes; the host does not wait. A copy
   * still queued outside the graph, or an earlier graph's, writes the same
   * bytes. */
  if (!plan->uploaded || plan->copied != NULL) res = plan_enqueue(plan, stream, 1);
  return res;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_plan_ready(brd_exec_cuda_plan_t *plan) {
  ncclResult_t res = ncclSuccess;
  if (plan->copied == NULL) return ncclSuccess;
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT);
  int64_t deadline = brd_time_now_ns() + (t > 0 ? t : 300) * 1000000000LL;
  for (;;) {
    cudaError_t e = cudaEventQuery(plan->copied);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      WARN("CUDA: waiting for a plan's upload failed: %s (%d)", cudaGetErrorString(e), (int)e);
      res = ncclUnhandledCudaError;
      goto out;
    }
    if (brd_time_now_ns() >= deadline) {
      WARN("CUDA: a plan's upload did not reach the device in %lld s (BRAID_TIMEOUT); "
           "its stream queued behind work that does not finish",
           (long long)(t > 0 ? t : 300));
      res = ncclSystemError;
      goto out;
    }
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
  }
  cudaEventDestroy(plan->copied);
  plan->copied = NULL;
out:
  return res;
}

static ncclResult_t plan_create(const brd_ir_plan_t *plan, int async, cudaStream_t stream,
                                int capturing, brd_exec_cuda_plan_t **plan_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_plan_t *cp;
  int dev = 0, nsm = 0;
  CHECK(plan_check(plan));
  CHECK(brd_exec_cuda_load());
  CUDA_CHECK_GOTO(cudaGetDevice(&dev), "cudaGetDevice", res, out);
  CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev),
                  "cudaDeviceGetAttribute(multiProcessorCount)", res, out);
  if (plan->nblocks > nsm) {
    WARN("CUDA executor: a plan of %u blocks per rank cannot have every block "
         "resident on device %d, which has %d SMs; generate it with at most "
         "%d blocks (NCCL_MAX_CTAS)", plan->nblocks, dev, nsm, nsm);
    res = ncclInvalidArgument;
    goto out;
  }
  cp = calloc(1, sizeof(*cp));
  if (cp == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor plan",
         sizeof(*cp));
    res = ncclSystemError;
    goto out;
  }
  for (uint32_t i = 0; i < plan->nops; i++) {
    const brd_ir_op_t *op = (const brd_ir_op_t *)((const char *)plan + plan->op_off) + i;
    cp->mc_ops |= brd_ir_op_is_switch(op->code);
    cp->mc_reduces |= op->code == BRD_IR_OP_MC_REDUCE || op->code == BRD_IR_OP_MC_RED;
  }
  cp->device = dev;
  CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&cp->cc_major, cudaDevAttrComputeCapabilityMajor, dev),
                  "cudaDeviceGetAttribute(computeCapabilityMajor)", res, fail_free);
  CHECK_GOTO(brd_plan_clone(plan, &cp->host), res, fail_free);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&cp->dev, plan->total_bytes),
                  "cudaMalloc for a plan", res, fail_destroy_host);
  int stuck = 0;
  res = plan_upload(cp, async, stream, capturing, &stuck);
  if (stuck) goto fail_leak_dev;
  if (res != ncclSuccess) goto fail_free_dev;
  *plan_out = cp;
  return ncclSuccess;
fail_leak_dev:
  brd_cuda_leak_info(plan->total_bytes, "a plan's device copy");
  goto fail_destroy_host;
fail_free_dev:
  /* cudaFreeHost and cudaFree wait for the device: a copy already queued
   * is done first. */
  if (cp->copied != NULL) cudaEventDestroy(cp->copied);
  if (cp->pinned != NULL) cudaFreeHost(cp->pinned);
  cudaFree(cp->dev);
fail_destroy_host:
  brd_plan_destroy(cp->host);
fail_free:
  free(cp);
out:
  return res;
}

/* See exec_cuda.h. */
void brd_exec_cuda_plan_destroy(brd_exec_cuda_plan_t *plan) {
  if (plan == NULL) return;
  if (brd_cuda_stuck(plan->device)) {
    brd_cuda_leak_info(plan->host->total_bytes, "a plan's device copy");
    brd_plan_destroy(plan->host);
    free(plan);
    return;
  }
  if (plan->copied != NULL) cudaEventDestroy(plan->copied);
  if (plan->pinned != NULL) cudaFreeHost(plan->pinned);
  cudaFree(plan->dev);
  brd_plan_destroy(plan->host);
  free(plan);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_status_create(brd_exec_abort_flag_t *abort_flag,
                                         brd_exec_cuda_status_t **st_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_status_t *st =
      calloc(1, sizeof(brd_exec_cuda_status_t));
  if (st == NULL) {
    WARN("out of host memory allocating %zu bytes for a CUDA executor status",
         sizeof(*st));
    return ncclSystemError;
  }
  CUDA_CHECK_GOTO(cudaGetDevice(&st->device), "cudaGetDevice", res, fail_free);
  CUDA_CHECK_GOTO(cudaHostAlloc((void **)&st->host, sizeof(brd_exec_report_t),
                                cudaHostAllocMapped),
                  "cudaHostAlloc (mapped) for the hang report", res, fail_free);
  memset(st->host, 0, sizeof(brd_exec_report_t));
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&st->dev, st->host, 0),
                  "cudaHostGetDevicePointer for the hang report", res, fail_free_host);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&st->state, sizeof(brd_exec_state_t)),
                  "cudaMalloc for the executor state", res, fail_free_host);
  int stuck = 0;
  res = private_copy(st->state, NULL, sizeof(brd_exec_state_t), cudaMemcpyDefault,
                     "zeroing the executor state", abort_flag, &stuck);
  if (stuck) goto fail_leak;
  if (res != ncclSuccess) goto fail_free_state;
  *st_out = st;
  return ncclSuccess;
fail_leak:
  /* The memset targets the state; cudaFreeHost of the report would wait
   * for the device as cudaFree does. */
  brd_cuda_leak_info(sizeof(brd_exec_state_t) + sizeof(brd_exec_report_t),
                     "an executor status (device state, mapped report)");
  free(st);
  return res;
fail_free_state:
  cudaFree(st->state);
fail_free_host:
  cudaFreeHost(st->host);
fail_free:
  free(st);
  return res;
}

/* See exec_cuda.h. */
size_t brd_exec_cuda_status_device_bytes(void) { return sizeof(brd_exec_state_t); }

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_status_ports(brd_exec_cuda_status_t *st, int nranks,
                                        const uint64_t *mirror,
                                        brd_exec_abort_flag_t *abort_flag,
                                        brd_exec_fifo_t **fifo_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_fifo_t *f = NULL, *fdev = NULL;
  size_t bytes = offsetof(brd_exec_fifo_t, mirror) + (size_t)nranks * sizeof(uint64_t);
  if (st->fifo != NULL) {
    WARN("CUDA executor: the status already has a port FIFO");
    return ncclInternalError;
  }
  CUDA_CHECK_GOTO(cudaHostAlloc((void **)&f, bytes, cudaHostAllocMapped),
                  "cudaHostAlloc (mapped) for the port channels' trigger FIFO", res, out);
  memset(f, 0, bytes);
  f->nranks = (uint64_t)nranks;
  memcpy(f->mirror, mirror, (size_t)nranks * sizeof(uint64_t));
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&fdev, f, 0),
                  "cudaHostGetDevicePointer for the trigger FIFO", res, fail_free);
  int stuck = 0;
  res = private_copy((char *)st->state + offsetof(brd_exec_state_t, fifo), &fdev,
                     sizeof(fdev), cudaMemcpyHostToDevice, "publishing the trigger FIFO",
                     abort_flag, &stuck);
  if (stuck) {
    /* The state may yet point at f: it stays, and so does the state
     * (brd_exec_cuda_status_destroy leaks it while the work is stuck). */
    brd_cuda_leak_info(bytes, "the port channels' trigger FIFO");
    goto out;
  }
  if (res != ncclSuccess) goto fail_free;
  st->fifo = f;
  *fifo_out = f;
  goto out;
fail_free:
  cudaFreeHost(f);
out:
  return res;
}

/* See exec_cuda.h. */
void brd_exec_cuda_status_destroy(brd_exec_cuda_status_t *st) {
  if (st == NULL) return;
  if (brd_cuda_stuck(st->device)) {
    brd_cuda_leak_info(sizeof(brd_exec_state_t) + sizeof(brd_exec_report_t),
                       "an executor status (device state, mapped report)");
    free(st);
    return;
  }
  if (st->fifo != NULL) cudaFreeHost(st->fifo);
  cudaFree(st->state);
  cudaFreeHost(st->host);
  free(st);
}

/* See exec_cuda.h. */
void brd_exec_cuda_status_abort(brd_exec_cuda_status_t *st) {
  __atomic_store_n(&st->host->abort, 1, __ATOMIC_RELEASE);
}

/* See exec_cuda.h. */
void brd_exec_cuda_status_stuck(brd_exec_cuda_status_t *st, uint64_t ns) {
  __atomic_store_n(&st->host->stuck_ns, ns, __ATOMIC_RELEASE);
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_status_reset(brd_exec_cuda_status_t *st, cudaStream_t stream) {
  ncclResult_t res = ncclSuccess;
  /* claimed, stop and bar_count lead the state; bar_gen, launches, the
   * cursors and the FIFO stay (semaphores keep their values). Stream
   * ordered, so nothing here waits on a stream that peers' work shares. */
  _Static_assert(offsetof(brd_exec_state_t, stop) == sizeof(unsigned int) &&
                 offsetof(brd_exec_state_t, bar_count) == 2 * sizeof(unsigned int),
                 "brd_exec_state_t: claimed, stop, bar_count first");
  CUDA_CHECK_GOTO(cudaMemsetAsync(st->state, 0, 3 * sizeof(unsigned int), stream),
                  "cudaMemsetAsync resetting the executor state", res, out);
  CUDA_CHECK_GOTO(cudaMemsetAsync((char *)st->state + offsetof(brd_exec_state_t, done), 0,
                                  sizeof(unsigned int), stream),
                  "cudaMemsetAsync resetting the executor state", res, out);
  memset(st->host, 0, sizeof(brd_exec_report_t));
  st->reported = 0;
out:
  return res;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_poll(brd_exec_cuda_status_t *st,
                                brd_exec_cuda_hang_t *hang_out) {
  const brd_exec_report_t *r = st->host;
  int failed = __atomic_load_n(&r->failed, __ATOMIC_ACQUIRE);
  if (failed == BRD_EXEC_FAIL_NONE) return ncclSuccess;
  if (failed == BRD_EXEC_FAIL_UNSUPPORTED) {
    if (!st->reported)
      WARN("rank %d block %d op %d: a switch-channel op (code %d) reached a kernel built "
           "for an architecture without multimem (before sm_90) or for a datatype and "
           "reduction multimem lacks; the launch stopped before moving its data. Build for "
           "the device's architecture (CUDA_ARCHS) or disable NVLS (NCCL_NVLS_ENABLE=0)",
           r->hang.rank, r->hang.block, r->hang.op, r->hang.index);
    st->reported = 1;
    return ncclInvalidUsage;
  }
  if (failed == BRD_EXEC_FAIL_ABORT) {
    if (!st->reported)
      INFO(BRD_SUBSYS_COLL, "CUDA executor: launch stopped by the abort flag");
    st->reported = 1;
    return ncclSystemError;
  }
  /* The kernel wrote the report before `failed`. */
  brd_exec_hang_t h = r->hang;
  if (!st->reported) hang_warn(&h, (double)r->timeout_ns * 1e-9);
  st->reported = 1;
  if (hang_out != NULL) *hang_out = h;
  return ncclRemoteError;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_chans_create(const brd_exec_cuda_chan_t *chans,
                                        uint32_t n,
                                        brd_exec_cuda_chan_t **dev_out) {
  ncclResult_t res = ncclSuccess;
  brd_exec_cuda_chan_t *dev = NULL;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(*dev);
  CUDA_CHECK_GOTO(cudaMalloc((void **)&dev, bytes), "cudaMalloc for a channel table",
                  res, out);
  if (n > 0) {
    int stuck = 0;
    res = private_copy(dev, chans, (size_t)n * sizeof(*dev), cudaMemcpyHostToDevice,
                       "copying a channel table", NULL, &stuck);
    if (stuck) {
      brd_cuda_leak_info(bytes, "a channel table");
      goto out;
    }
    if (res != ncclSuccess) goto fail_free;
  }
  *dev_out = dev;
  return ncclSuccess;
fail_free:
  cudaFree(dev);
out:
  return res;
}

/* See exec_cuda.h. */
void brd_exec_cuda_chans_destroy(brd_exec_cuda_chan_t *dev) {
  int d = 0;
  if (dev == NULL) return;
  if (cudaGetDevice(&d) != cudaSuccess) (void)cudaGetLastError();
  if (brd_cuda_stuck(d)) {
    brd_cuda_leak_info(sizeof(*dev), "a channel table (its first entry at least)");
    return;
  }
  cudaFree(dev);
}

/* A launch of a plan with switch ops: a device with multimem, a datatype
 * and reduction it has, and each switch channel's three pointers
 * (brd_exec_cuda_chan_t), aligned as the ops access them. */
static ncclResult_t switch_check(const brd_exec_cuda_args_t *args, const brd_ir_plan_t *p,
                                 uint32_t nchans, int fn) {
  const struct brd_exec_cuda_plan *cp = args->plan;
  if (cp->cc_major < 9) {
    WARN("CUDA executor: rank %d runs a plan with switch channels (NVLS multicast) on "
         "device %d of compute capability %d.x; multimem needs sm_90 or later. Choose "
         "another algorithm (NCCL_ALGO) or NCCL_NVLS_ENABLE=0", args->rank, cp->device,
         cp->cc_major);
    return ncclInvalidUsage;
  }
  if (cp->mc_reduces && !brd_exec_mc_reduces(args->dtype, fn)) {
    WARN("CUDA executor: rank %d runs a switch-channel (NVLS) plan that reduces datatype "
         "%d with reduction %d, which multimem cannot (sum on 16-, 32- and 64-bit types, "
         "min/max on integers, f16 and bf16); the plan cache should not have chosen it",
         args->rank, args->dtype, fn);
    return ncclInvalidArgument;
  }
  if (args->xchg || args->chan_cursor_dev != NULL) {
    WARN("CUDA executor: rank %d: a plan with a switch channel takes no output exchange "
         "and no per-pair cursors", args->rank);
    return ncclInvalidArgument;
  }
  for (uint32_t c = 0; args->chans != NULL && args->chans_dev == NULL && c < nchans; c++) {
    if (!chan_is_switch(p, args->rank, c)) continue;
    const brd_exec_cuda_chan_t *ch = &args->chans[c];
    if ((p->nslots > 0 && (ch->peer_scratch == NULL || (uintptr_t)ch->peer_scratch % 16)) ||
        (p->nsems > 0 && (ch->peer_sems == NULL || ch->sems == NULL ||
                          (uintptr_t)ch->peer_sems % 8 || (uintptr_t)ch->sems % 8))) {
      WARN("CUDA executor: rank %d switch channel %u: expected the multicast scratch "
           "(16-byte aligned) in peer_scratch, the multicast switch semaphores in "
           "peer_sems and this rank's own in sems; got %p, %p, %p", args->rank, c,
           ch->peer_scratch, (void *)ch->peer_sems, (void *)ch->sems);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_launch(const brd_exec_cuda_args_t *args,
                                  cudaStream_t stream) {
  if (args->plan == NULL || args->status == NULL) {
    WARN("CUDA executor: launch without a %s",
         args->plan == NULL ? "plan" : "status block");
    return ncclInvalidArgument;
  }
  const brd_ir_plan_t *p = args->plan->host;
  if (args->rank < 0 || args->rank >= p->nranks) {
    WARN("CUDA executor: rank %d outside a plan of %d ranks", args->rank, p->nranks);
    return ncclInvalidArgument;
  }
  if (!args->device_epoch && args->phase > 1) {
    WARN("CUDA executor: scratch phase %u (expected 0 or 1)", args->phase);
    return ncclInvalidArgument;
  }
  /* A device scalar is read by the kernel; any value of the type serves to
   * resolve the op here. */
  uint64_t zero = 0;
  brd_reduce_op_t op;
  CHECK(brd_reduce_op_init(args->dtype, args->redop, p->nranks,
                           args->scalar_dev != NULL ? &zero : args->scalar, &op));
  if (args->count == 0) return ncclSuccess;

  uint32_t nchans = brd_ir_plan_rank(p, args->rank)->nchans;
  CHECK(args_check(args, p, nchans));
  if (args->plan->mc_ops) CHECK(switch_check(args, p, nchans, op.fn));
  for (uint32_t c = 0; c < nchans && args->status->fifo == NULL; c++) {
    if (brd_ir_plan_chan(p, args->rank, (int)c)->type == BRD_IR_CHAN_PORT) {
      WARN("CUDA executor: rank %d channel %u is a port channel, and the launch's status "
           "has no trigger FIFO (brd_exec_cuda_status_ports)", args->rank, c);
      return ncclInvalidArgument;
    }
  }
  brd_plan_layout_t l;
  CHECK(brd_plan_layout_init(p, args->count, args->dtype, args->scratch_bytes, &l));
  if (l.half_bytes % 16 != 0) {
    WARN("CUDA executor: rank %d scratch of %zu bytes: each phase must be a "
         "multiple of 16 bytes (brd_plan_scratch_bytes)", args->rank,
         args->scratch_bytes);
    return ncclInvalidArgument;
  }
  uint64_t span = brd_plan_epoch_span(p, &l);
  if (!args->device_epoch && args->chan_cursor_dev == NULL)
    CHECK(epochs_check(args, nchans, span));

  brd_exec_kargs_t ka;
  memset(&ka, 0, sizeof(ka));
  ka.plan = args->plan->dev;
  ka.chans_dev = args->chans_dev;
  ka.in_segs_dev = args->in_segs_dev;
  ka.out_segs_dev = args->out_segs_dev;
  ka.chan_epoch_dev = args->chan_epoch_dev;
  ka.chan_cursor = (unsigned long long *)args->chan_cursor_dev;
  ka.input = (const char *)args->input;
  ka.output = (char *)args->output;
  ka.scratch = (char *)args->scratch;
  ka.scalar_dev = args->scalar_dev;
  ka.report = args->status->dev;
  ka.state = args->status->state;
  ka.arg = op.arg;
  ka.epoch = args->epoch;
  ka.span = span;
  ka.layout = l;
  ka.out_half = args->device_epoch ? args->out_half_bytes : 0;
  double timeout_s = args->timeout_s > 0 ? args->timeout_s
                                         : (double)brd_param_int(BRD_P_BRAID_TIMEOUT);
  ka.timeout_ns = (unsigned long long)(timeout_s * 1e9);
  ka.in_stride = args->in_stride ? args->in_stride : args->count;
  ka.out_stride = args->out_stride ? args->out_stride : args->count;
  ka.phase = args->phase;
  ka.rank = args->rank;
  ka.fn = op.fn;
  ka.device_epoch = args->device_epoch != 0;
  ka.xchg = args->xchg != 0;
  ka.out_direct = args->out_direct != 0;
  if (args->chans_dev == NULL && nchans > 0)
    memcpy(ka.chans, args->chans, nchans * sizeof(ka.chans[0]));
  if (args->chan_epoch_dev == NULL && args->chan_epoch != NULL) {
    ka.has_chan_epoch = 1;
    memcpy(ka.chan_epoch, args->chan_epoch, nchans * sizeof(ka.chan_epoch[0]));
  }
  if (args->in_segs_dev == NULL && args->in_segs != NULL && args->n_in_segs > 0) {
    ka.n_in_segs = args->n_in_segs;
    memcpy(ka.in_segs, args->in_segs, args->n_in_segs * sizeof(ka.in_segs[0]));
  }
  if (args->out_segs_dev == NULL && args->out_segs != NULL && args->n_out_segs > 0) {
    ka.n_out_segs = args->n_out_segs;
    memcpy(ka.out_segs, args->out_segs, args->n_out_segs * sizeof(ka.out_segs[0]));
  }

  cudaError_t e = brd_exec_kernel_launch(&ka, args, p->nblocks, stream);
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching rank %d's kernel (%u blocks) failed: %s "
         "(CUDA error %d)", args->rank, p->nblocks, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
ncclResult_t brd_exec_cuda_copyout(const brd_exec_cuda_copyout_t *c,
                                   cudaStream_t stream) {
  if (c->nseg == 0 || c->seg_bytes == 0) return ncclSuccess;
  if (c->status == NULL || c->src == NULL || c->dst == NULL) {
    WARN("CUDA executor: copy-out without a %s",
         c->status == NULL ? "status block" : c->src == NULL ? "source" : "destination");
    return ncclInvalidArgument;
  }
  if ((c->nseg - 1) * c->src_stride + c->seg_bytes > c->half_bytes) {
    WARN("CUDA executor: copy-out of %u segments of %zu bytes %zu apart leaves a "
         "staging half of %zu bytes", c->nseg, c->seg_bytes, c->src_stride,
         c->half_bytes);
    return ncclInvalidArgument;
  }
  uintptr_t any = (uintptr_t)c->src | (uintptr_t)c->dst | c->seg_bytes | c->half_bytes |
                  c->src_stride | c->dst_stride;
  int w = any % 16 == 0 ? 16 : any % 8 == 0 ? 8 : any % 4 == 0 ? 4 : 1;
  unsigned long long units = c->seg_bytes / (size_t)w;
  unsigned long long total = units * c->nseg;
  unsigned long long want = (total + BRD_EXEC_CUDA_NTHREADS - 1) / BRD_EXEC_CUDA_NTHREADS;
  unsigned int blocks = want < 256 ? (unsigned int)want : 256u;
  brd_exec_copyout_kargs_t ck;
  memset(&ck, 0, sizeof(ck));
  ck.state = c->status->state;
  ck.src = (const char *)c->src;
  ck.half = c->half_bytes;
  ck.dst = (char *)c->dst;
  ck.units = units;
  ck.nseg = c->nseg;
  ck.src_stride = c->src_stride;
  ck.dst_stride = c->dst_stride;
  ck.width = (unsigned int)w;
  ck.blocks = blocks;
  cudaError_t e = brd_exec_kernel_copyout(&ck, stream);
  if (e != cudaSuccess) {
    WARN("CUDA executor: launching a copy-out of %u x %zu bytes failed: %s (CUDA "
         "error %d)", c->nseg, c->seg_bytes, cudaGetErrorString(e), (int)e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* See exec_cuda.h. */
const brd_ir_plan_t *brd_exec_cuda_plan_dev(const brd_exec_cuda_plan_t *plan) {
  return plan->dev;
}

#endif /* BRAID_CUDA */
