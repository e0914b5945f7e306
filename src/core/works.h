/*
 * Braid: the works builder. It turns a launch's calls into works: one
 * executor run of one plan over one piece of a call (or one round of the
 * launch's sends and receives), with every pointer the executor needs
 * (window records, registered buffers, staging halves) and the sequence
 * numbers it uses. The same calls give the same works on every rank.
 *
 * The rules, which tests/unit/test_works.c checks:
 *  - Collectives: a plan's output is the staging half of the work's phase,
 *    copied to the user's buffer once this rank's part is done. A call
 *    whose output does not fit a half runs as several pieces, each a work:
 *    a piece is the same element range of every segment (collectives are
 *    element-wise), so all-gather, all-to-all and gather pieces hold the
 *    range of every rank's segment, and in-place calls stay correct since
 *    a piece only overwrites ranges its own inputs have been read from.
 *    Halves alternate with the scratch phase, so a peer one work ahead
 *    never writes the half still being copied out.
 *  - Registered output on every rank (ncclCommRegister with the symmetric
 *    promise, or a symmetric window): one work writes the user's buffers
 *    in place, with no staging and no pieces. An in-place reduce-scatter
 *    finds every rank's output at its own offset of its input.
 *  - Zero-copy input: with the output in place, from 64 KiB moved per rank,
 *    a registered input is read in place by a zero-copy plan (two-shot
 *    all-reduce, direct reduce-scatter and all-gather) when NCCL_ALGO /
 *    NCCL_PROTO allow the family with Simple and the reduction is neither
 *    PreMulSum nor deterministic.
 *  - Zero-copy NVLS: with the output in place, where NVLS is chosen (or its
 *    zero-copy cost, brd_tune_estimate_nvls_zc, beats the tuner's choice),
 *    the call is eligible, the buffers hold whole 16-byte packs and, in
 *    CUDA mode, lie in windows bound to multicast (brd_reg_switch), the
 *    switch plan over the members' own buffers runs (algos/nvls_zc.c);
 *    otherwise the tuner's plan, with an INFO naming why.
 *  - Registered output without the symmetric promise: outputs exchanged at
 *    run time (device/ir.h), pieces as for the staging.
 *  - Sends and receives: one point-to-point plan per round for the whole
 *    launch (brd_algos_sendrecv). The i-th transfer between a pair of ranks
 *    (in one direction) belongs to batch i / m, m = max(1, R / nranks)
 *    (brd_works_p2p_batch_ops), so a round never holds more than R sends
 *    or receives per rank: R = 4096 (the IR's 16-bit segment indices at
 *    16 pieces each) in host mode, 48 in CUDA mode (the segments a kernel
 *    carries in its parameters); within a batch, round k moves pieces [16k, 16k + 16) of
 *    each of its transfers. Rounds run batch by batch, k within a batch,
 *    skipping empty ones. Both ends of a pair derive every piece's
 *    (batch, k) from pair-local counts alone, and every rank runs them in
 *    the same order, so the rounds never wait on each other in a cycle.
 *    Receives into
 *    overlapping memory are refused (they run concurrently); a send whose
 *    buffer overlaps a receive of the launch sends a snapshot taken before
 *    any work runs (ws->snaps, taken by the backend).
 */
#ifndef BRD_CORE_WORKS_H
#define BRD_CORE_WORKS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "core/enqueue.h"
#include "core/plans.h"
#include "core/window.h"
#include "device/exec_host.h"
#include "plan/tune.h"

#define BRD_WORKS_ROUND_CHUNKS 16 /* pieces of one transfer per round */
#define BRD_WORKS_ROUND_MAX_OPS (65536 / BRD_WORKS_ROUND_CHUNKS) /* sends (or
                                     receives) of one rank per round */
#define BRD_WORKS_PEER_MIN_BYTES ((size_t)64 << 10) /* zero-copy plans from here */

/* One executor run of one plan over one piece (or round), and what to
 * copy out of the staging once this rank's part of it is done. */
typedef struct brd_work {
  brd_exec_args_t args;
  brd_exec_chan_t *chans;     /* owned: [the plan's channels of this rank] */
  void **members;             /* owned: a switch channel's member copies,
                               * [nranks] scratch bases then [nranks]
                               * switch semaphore arrays; NULL without one */
  uint64_t *chan_epoch;       /* owned: point-to-point only */
  brd_exec_seg_t *segs;       /* owned: point-to-point only, sends then receives
                               * of the round's batch */
  brd_ir_plan_t *plan_owned;  /* owned: point-to-point only */
  const brd_call_t *call;     /* borrowed: the call to copy out, or NULL */
  int direct;                 /* the output is the user's buffer: nothing
                               * to copy out */
  const void *scalar_dev;     /* a PreMulSum scalar the executor reads from
                               * device memory (ncclScalarDevice), else NULL */
  int p2p;                    /* a point-to-point work */
  size_t off, n;              /* elements of each output segment */
  int nout;                   /* output segments to copy out */
} brd_work_t;

/* A send buffer to copy before any work runs: send `send` (its index
 * among the launch's sends with a count) reads [src, src + bytes); it is
 * input segment `seg` of works [w_lo, w_hi) (its batch's rounds). */
typedef struct brd_works_snap {
  int send;
  int seg, w_lo, w_hi;
  const char *src;            /* borrowed: the user's buffer */
  size_t bytes;
} brd_works_snap_t;

typedef struct brd_works {
  brd_work_t *w;              /* owned */
  int n, cap;
  brd_works_snap_t *snaps;    /* owned: [nsnaps] */
  int nsnaps;
  size_t snap_bytes;          /* all snapshots, each rounded up to 256 */
  size_t stage_half;          /* bytes of one staging half of this rank */
} brd_works_t;

/* Registration lookups (reg.h), behind a table so the builder runs without
 * a communicator in tests. */
typedef struct brd_works_reg {
  int any;                    /* 0: nothing is registered; skip lookups */
  /* brd_reg_direct: every rank's copy of [buf, buf + bytes) as mapped
   * here in peer_out[nranks], *ok_out 1; or *ok_out 0. */
  ncclResult_t (*direct)(void *ctx, const void *buf, size_t bytes, const char *fn,
                         char **peer_out, int *ok_out);
  /* brd_reg_share: *state_out BRD_REG_*, remote_out[nranks] with SHARED. */
  ncclResult_t (*share)(void *ctx, const void *buf, size_t bytes, const char *fn,
                        uint64_t *remote_out, int *state_out);
  /* brd_reg_switch: the multicast address of [buf, buf + bytes) in a
   * window bound to a multicast object, or NULL with why[]. NULL where
   * the backend has no multicast (host mode: the zero-copy NVLS plans
   * then run on the members' copies alone, as brd_reg_direct maps them). */
  void (*mc)(void *ctx, const void *buf, size_t bytes, void **mc_out, char *why,
             size_t why_len);
  void *ctx;
} brd_works_reg_t;

/* What the builder reads of the runtime. */
typedef struct brd_works_view {
  int rank, nranks;
  const brd_window_rec_t *win; /* [nranks] every rank's window record */
  char *const *base;           /* [nranks] every window as the executor sees it */
  const int *nb_opts;          /* block counts the plans may use, ascending */
  int nb_count;
  const size_t *nb_sizes;      /* backend: sizes from which 2, 4, 8 ... blocks;
                                  BRD_BACKEND_NB_SIZES at most, 0 ends */
  int device_seq;              /* backend keeps sequence numbers and phases */
  int scalar_on_device;        /* backend reads ncclScalarDevice scalars itself */
  const brd_tune_mask_t *mask;
  const brd_tune_topo_t *topo;
  struct brd_tuner *tuner;     /* the communicator's tuner plugin context
                                * (tuner_plugin.h), NULL: Braid's own
                                * choice */
  int deterministic;
  size_t p2p_piece;            /* bytes per point-to-point piece */
  int p2p_round_ops;           /* backend: most sends (or receives) of a rank
                                * per point-to-point work; 0 or above
                                * BRD_WORKS_ROUND_MAX_OPS: that */
  brd_works_reg_t reg;
  _Atomic int *abort_flag;     /* into every work's args */
  brd_exec_port_t *const *ports; /* [nranks] port channels' far ends (NULL:
                                  * memory channel); NULL: none */
  int *port_failed;            /* the proxy's failure flag; NULL: none */
  brd_exec_bell_t *port_bell;  /* the proxy's doorbell; NULL: none */
  const uint8_t *port_matrix;  /* [nranks * nranks] port pairs, for the
                                * point-to-point plans; NULL: none */
} brd_works_view_t;

/* Transfers per pair and direction in one batch of point-to-point rounds
 * on a communicator of nranks whose backend carries round_ops sends (or
 * receives) per work (0: BRD_WORKS_ROUND_MAX_OPS): the same on every
 * rank. */
int brd_works_p2p_batch_ops(int nranks, int round_ops);

/* The output segment of work w whose answer is this rank's own input,
 * already there because the call is in place, or -1: an in-place
 * all-gather's block `rank` (NCCL: the input is that block), an in-place
 * all-to-all's block `rank`, the root's in-place broadcast output and
 * gather block `root`, and the scatter root's output when it is block
 * `root` of its input. A plan need not write such a segment (the verifier
 * lets it keep its initial content, plan/verify.h), so the backends'
 * copy-outs leave it alone: the staging holds nothing there. Pure. */
int brd_work_own_seg(const brd_work_t *w);

/* The estimated time of collective call c (count > 0) from the plan a
 * launch would run for it (the plan library's, or the built-in one the
 * tuner picks with the blocks the size asks for; pipe_ops as NCCL's
 * numPipeOps), priced by brd_plan_cost_estimate on v's topology: what
 * ncclGroupSimulateEnd reports once the runtime has connected. Generates
 * the plan into plans if it is not there yet; runs nothing. Errors as
 * brd_works_build's and brd_plan_cost_estimate's. The launching thread. */
ncclResult_t brd_works_estimate(const brd_works_view_t *v, brd_plan_cache_t *plans,
                                const brd_call_t *c, int pipe_ops, float *us_out);

/* Appends the works of ncalls calls (collectives in call order, then the
 * sends and receives as rounds) to ws, generating plans into plans and
 * reserving sequence numbers from seq. On failure ws holds what was
 * built (free it with brd_works_free) and the error is the first one:
 * ncclInvalidUsage / ncclInvalidArgument for calls the runtime refuses
 * (with a WARN), ncclSystemError when out of memory. The calls are
 * borrowed until the works are freed. The launching thread; blocks only
 * in a registration lookup's first exchange. */
ncclResult_t brd_works_build(const brd_works_view_t *v, brd_plan_cache_t *plans,
                             brd_works_seq_t *seq, const brd_call_t *calls, int ncalls,
                             brd_works_t *ws);

/* Points every segment of snapshot s's send at copy instead of its user
 * buffer (copy holds snaps[s].bytes). */
void brd_works_snap_use(brd_works_t *ws, int s, char *copy);

/* Frees what ws owns; ws is empty afterwards. */
void brd_works_free(brd_works_t *ws);

#endif /* BRD_CORE_WORKS_H */
