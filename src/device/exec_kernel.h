/*
 * Braid CUDA executor, inside: the contract between its host half
 * (exec_cuda.c, plain C: objects, checks, launch set-up, status) and its
 * kernels (exec.cu; in the CUDA simulator's `cudasim/` flavour,
 * tests/cudasim/exec_sim.c). C and C++ both read it. Nothing above
 * src/device includes it.
 *
 * The host half checks every argument, resolves the launch (layout,
 * epochs, reduction, inline tables) into a brd_exec_kargs_t and calls one
 * of the two entry points below; they only pick and enqueue a kernel.
 * The status block's two halves are shared with the kernels: the report
 * in mapped pinned memory (the host raises `abort`, a failing kernel fills
 * the rest once), the state in device memory (the kernels' own).
 */
#ifndef BRD_DEVICE_EXEC_KERNEL_H
#define BRD_DEVICE_EXEC_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "device/exec.h"
#include "device/exec_cuda.h"
#include "device/ir.h"
#include "device/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "device/redop.h"

/* How a launch failed (brd_exec_report_t.failed). UNSUPPORTED: a switch
 * op ran on code built for an architecture without multimem (before
 * sm_90); the launch stopped before moving any of its data. */
enum {
  BRD_EXEC_FAIL_NONE = 0,
  BRD_EXEC_FAIL_HANG = 1,
  BRD_EXEC_FAIL_ABORT = 2,
  BRD_EXEC_FAIL_UNSUPPORTED = 3,
};

/* Whether the multimem reductions (MC_REDUCE's ld_reduce, MC_RED's red)
 * exist for datatype dtype and reduction fn (BRD_REDUCE_FN_*), as ptxas
 * for sm_90 accepts them: sum on f32, f16, bf16 (16-byte vectors), f64 and
 * the 32- and 64-bit integers; min and max on f16, bf16 (vectors) and the
 * 32- and 64-bit integers. No 8-bit type, no product, no pre- or post-op.
 * The one statement of the rule, for the host half's launch check and the
 * kernels' choice of instruction (constexpr in C++; the kernels' FN_SUM,
 * FN_MIN and FN_MAX have the same values). Pure. */
#ifdef __cplusplus
#define BRD_EXEC_CONSTEXPR constexpr
#else
#define BRD_EXEC_CONSTEXPR
#endif
static BRD_EXEC_CONSTEXPR inline BRD_IR_HD int brd_exec_mc_reduces(int dtype, int fn) {
  int ints = dtype == ncclInt32 || dtype == ncclUint32 || dtype == ncclInt64 ||
             dtype == ncclUint64;
  int halves = dtype == ncclFloat16 || dtype == ncclBfloat16;
  if (fn == BRD_REDUCE_FN_SUM)
    return ints || halves || dtype == ncclFloat32 || dtype == ncclFloat64;
  if (fn == BRD_REDUCE_FN_MIN || fn == BRD_REDUCE_FN_MAX) return ints || halves;
  return 0;
}

/* Host-visible state of a rank, in mapped pinned memory. The host writes
 * `abort`; a kernel writes the rest once, after claiming it (state). */
typedef struct brd_exec_report {
  int abort;                  /* host: raise to stop every launch */
  int failed;                 /* BRD_EXEC_FAIL_*, written last */
  uint64_t timeout_ns;        /* the timed-out launch's timeout */
  brd_exec_hang_t hang;       /* valid when failed == BRD_EXEC_FAIL_HANG */
  uint64_t stuck_ns;          /* host: 0, or (a peer is known gone) how long
                               * a wait may see no progress before it fails
                               * as a hang; read at every deadline check */
} brd_exec_report_t;

/* Device-side state of a rank, in device memory; persists across
 * launches, which the status requires to be stream-ordered. */
typedef struct brd_exec_state {
  unsigned int claimed;       /* report claimed by a failing thread */
  unsigned int stop;          /* a launch failed: every block leaves */
  unsigned int bar_count;     /* blocks arrived at the current barrier */
  unsigned int bar_gen;       /* barriers completed (wraps; compared ==) */
  unsigned int done;          /* blocks finished (device epochs) */
  unsigned int launches;      /* launches finished (device epochs) */
  unsigned long long cursor;  /* next sequence number (device epochs) */
  unsigned long long port_head; /* next trigger slot of fifo */
  brd_exec_fifo_t *fifo;      /* port channels' trigger FIFO (device view of
                               * mapped host memory); NULL: none */
} brd_exec_state_t;

/* Everything the executor kernel needs, passed by value (exec.cu:
 * __grid_constant__), so a captured graph keeps its own copy. Device
 * pointers, borrowed. */
typedef struct brd_exec_kargs {
  const brd_ir_plan_t *plan;             /* device blob */
  const brd_exec_cuda_chan_t *chans_dev; /* NULL: `chans` below */
  const brd_exec_seg_t *in_segs_dev;     /* NULL: in_segs below, if any */
  const brd_exec_seg_t *out_segs_dev;
  const uint64_t *chan_epoch_dev;        /* NULL: chan_epoch below, if any */
  unsigned long long *chan_cursor;       /* per-pair cursors: chan_epoch holds spans */
  const char *input;
  char *output;
  char *scratch;                         /* base of both phases */
  const void *scalar_dev;                /* NULL: `arg` holds the scalar */
  brd_exec_report_t *report;             /* device view of mapped memory */
  brd_exec_state_t *state;
  unsigned long long arg;                /* brd_reduce_op_t.arg */
  unsigned long long epoch;              /* host epochs */
  unsigned long long span;               /* sequence numbers per launch */
  brd_plan_layout_t layout;              /* the launch's (device/layout.h) */
  unsigned long long out_half;           /* device epochs: output halves */
  unsigned long long timeout_ns;
  unsigned long long in_stride;          /* elements between segments (never 0) */
  unsigned long long out_stride;
  uint32_t phase;                        /* host epochs */
  int rank;
  int fn;                                /* BRD_REDUCE_FN_* */
  int device_epoch;
  uint32_t n_in_segs, n_out_segs;        /* inline tables; 0: none */
  int has_chan_epoch;                    /* chan_epoch below is valid */
  /* Bytes, in the padding before `chans`: the parameters are exactly at
   * the 4 KiB limit since the channels carry their exchange slots. */
  uint8_t xchg;                          /* brd_exec_cuda_args_t's */
  uint8_t out_direct;                    /* own output has no half offset */
  brd_exec_cuda_chan_t chans[BRD_EXEC_CUDA_INLINE_CHANS];
  uint64_t chan_epoch[BRD_EXEC_CUDA_INLINE_CHANS];
  brd_exec_seg_t in_segs[BRD_EXEC_CUDA_INLINE_SEGS];
  brd_exec_seg_t out_segs[BRD_EXEC_CUDA_INLINE_SEGS];
} brd_exec_kargs_t;

/* Kernel parameters are limited to 4 KiB on every architecture built. */
BRD_IR_STATIC_ASSERT(sizeof(brd_exec_kargs_t) <= 4096, "kernel arguments fit 4 KiB");

/* A copy out of a staging buffer's half (brd_exec_cuda_copyout), resolved:
 * nseg segments of units moves of `width` bytes (16, 8, 4 or 1, dividing
 * every pointer, size and stride), on a grid of `blocks` blocks. */
typedef struct brd_exec_copyout_kargs {
  const brd_exec_state_t *state;  /* the phase of the last device-epoch launch */
  const char *src;
  unsigned long long half;        /* bytes between the halves of src */
  char *dst;
  unsigned long long units;       /* moves per segment */
  unsigned int nseg;
  unsigned long long src_stride, dst_stride;
  unsigned int width;
  unsigned int blocks;
} brd_exec_copyout_kargs_t;

/* Enqueues the executor kernel for ka on stream: nblocks blocks of
 * BRD_EXEC_CUDA_NTHREADS threads, the kernel of args->dtype and ka->fn.
 * args are the caller's, already checked and resolved into ka (an
 * implementation may read what ka does not carry). Returns what
 * cudaLaunchKernel returns. Never allocates or synchronises. */
cudaError_t brd_exec_kernel_launch(const brd_exec_kargs_t *ka,
                                   const brd_exec_cuda_args_t *args,
                                   uint32_t nblocks, cudaStream_t stream);

/* Loads every kernel above into the current device's context now.
 * CUDA loads a kernel lazily, at its first launch, by default
 * (CUDA_MODULE_LOADING=LAZY), and a load waits for every kernel running
 * on the device: when ranks that are threads of one process share a GPU,
 * a rank's first launch of a kernel not yet loaded (a new datatype or
 * operation, a copy-out) would wait for a peer's kernel that spins until
 * this rank's kernel runs, a deadlock until the spinning kernel gives up.
 * Called once per device, before any kernel of the executor runs on it
 * (brd_exec_cuda_load). Returns the first error of cudaFuncGetAttributes. */
cudaError_t brd_exec_kernels_load(void);

/* Enqueues the copy-out kernel for c on stream. Returns what
 * cudaLaunchKernel returns. Never allocates or synchronises. */
cudaError_t brd_exec_kernel_copyout(const brd_exec_copyout_kargs_t *c,
                                    cudaStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRD_DEVICE_EXEC_KERNEL_H */
