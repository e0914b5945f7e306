/*
 * Braid: the executor backends behind one ops table.
 *
 * A launch (launch.c) is the same in both modes up to the works: one
 * runtime window per rank, the same plans, the same works (works.c). What
 * differs is where the window memory lives, who runs a work and who keeps
 * the sequence numbers. That is a backend: host (launch_host.c: worker
 * threads run the host executor, then copy staged outputs out) or CUDA
 * (launch_cuda.c: each work becomes executor kernels on the user's stream;
 * the host never waits for them). A communicator picks its backend once,
 * when its runtime is created (brd_backend_choose); nothing else branches
 * on the mode.
 *
 * Per communicator, a backend owns a `struct brd_backend` (its windows and
 * executor state), made by window_create at the runtime's first connection
 * and freed by destroy. Each backend file defines that struct for itself.
 */
#ifndef BRD_CORE_BACKEND_H
#define BRD_CORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "core/enqueue.h"
#include "core/proxy.h"
#include "device/exec_host.h"
#include "transport/transport.h"

struct ncclComm;
struct brd_backend;
struct brd_works;
struct brd_nvls;

/* What a rank reports before any window exists; all ranks agree on the
 * weakest (window.c). Exchanged as bytes: fixed layout. */
typedef struct brd_backend_caps {
  int32_t p2p_ok;       /* 1: GPU peer-to-peer with every peer */
  int32_t nb_max;       /* most blocks per rank a plan may use (>= 1) */
  uint64_t stage_bytes; /* one staging half */
  /* Not the backend's: the plan library this rank loaded (window.c fills
   * them), agreed on in the same exchange. */
  uint64_t lib_hash;
  int32_t lib_n;
  int32_t lib_same;     /* after the exchange: every rank's hash is this one's */
  /* Nor this: the line rate (Mbit/s) of the NIC the rank's proxy would use
   * (0: one host, or unknown); after the exchange the slowest rank's. */
  int32_t nic_mbps;
  int32_t nic_rank;     /* after the exchange: the rank with that NIC */
  /* Nor this: 1 when NCCL_NVLS_ENABLE and the backend let this rank take
   * part in switch channels (window.c); after the exchange 1 only when
   * every rank's is, and nvls_rank the first rank whose is not (-1). */
  int32_t nvls_ok;
  int32_t nvls_rank;
} brd_backend_caps_t;

/* One launch's backend state, in the caller's memory (launch.c). */
typedef struct brd_backend_launch {
  const brd_call_t *calls;            /* borrowed: the launch's calls */
  int ncalls;
  _Alignas(8) unsigned char priv[96]; /* the backend's own per-launch state */
} brd_backend_launch_t;

/* One rank's part of one one-sided call (core/rma.c), as a backend runs
 * it. The signal counters form a table [ctx][BRD_RMA_SIGNALS][nranks] on
 * every rank; counter (ctx, sig, src) on rank dst counts the signals src
 * sent dst. Two ways to count:
 *  - a: the host executor's arguments, with explicit epochs the caller
 *    keeps (the signal sent is number a's epoch + 1; the wait is for
 *    a's epoch + 1, the last of the call's signals);
 *  - row and nsig, for a backend that keeps the counts itself (on the
 *    device, so a captured graph counts afresh at every replay): the
 *    caller's rank keeps one cursor per cell of a table of the same shape
 *    for what it sent and one for what it waited for; row is the index
 *    of cell (ctx, sig, 0), so the cell of the plan channel's peer p is
 *    row + p. A put or signal sends nsig = 1 signal; a wait waits for nsig
 *    more than the rank has waited for so far on that cell. */
typedef struct brd_backend_rma {
  const brd_exec_args_t *a;
  size_t row;
  uint64_t nsig;
  int wait; /* 1: this rank waits (the table of what it waited for) */
} brd_backend_rma_t;

/* brd_backend_ops_t.switch_chans. */
enum {
  BRD_BACKEND_SWITCH_NONE = 0,     /* no switch channels */
  BRD_BACKEND_SWITCH_EMULATED = 1, /* every member's copy addressed in
                                    * shared memory: only when asked for */
  BRD_BACKEND_SWITCH_NATIVE = 2,   /* multicast hardware: on by default */
  BRD_BACKEND_SWITCH_OPT_IN = 3,   /* multicast hardware, only when asked for
                                    * (CUDA until the path has run on NVLS
                                    * hardware) */
};

typedef struct brd_backend_ops {
  const char *name;      /* "host", "CUDA": for messages */
  /* 1: the executor keeps collective sequence numbers and staging phases,
   * and point-to-point cursors, on the device: works carry spans and
   * phase 0 (a CUDA graph replays them with fresh ones). 0: the host
   * reserves them while building the works. */
  int device_seq;
  /* 1: a PreMulSum scalar in device memory (ncclScalarDevice) is read by
   * the executor where it is; 0: its address is an ordinary pointer. */
  int scalar_on_device;
  /* 1: ranks map each other's registered buffers only with GPU P2P; 0:
   * always (host memory; the exchange decides per buffer). */
  int reg_needs_p2p;
  /* The memory the one-sided calls' signal counters live in (rma.c), a
   * brd_transport_mem_t: host memory (BRD_TRANSPORT_MEM_HOST, the host
   * executor writes them) or GPU memory peers map (BRD_TRANSPORT_MEM_GPU,
   * the kernels write them). */
  int rma_mem;
  /* Switch channels (device/ir.h; NVLS multicast), BRD_BACKEND_SWITCH_*:
   * whether the executor runs them and whether NCCL_NVLS_ENABLE's
   * automatic setting turns them on (window.c). */
  int switch_chans;
  /* Message sizes (bytes) from which a collective asks for 2, 4, 8 ...
   * blocks per rank; 0 ends the list. The same on every rank. */
  size_t nb_sizes[BRD_BACKEND_NB_SIZES];
  /* Most sends (or receives) of one rank a point-to-point work carries;
   * the works builder batches a group's transfers to fit (works.h). */
  int p2p_round_ops;

  /* The cost model's link figures for comm (t->nranks..local_nranks are
   * set; p2p: GPU peer-to-peer between the ranks): host_mode,
   * ranks_per_device, bandwidths and latencies. Local. */
  void (*topo)(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t);
  /* This rank's capabilities. why_out gets the reason GPU peer-to-peer is
   * not usable, if it is not. Calling thread. */
  ncclResult_t (*caps)(struct ncclComm *comm, brd_backend_caps_t *caps_out, char *why_out,
                       size_t nwhy);
  /* Creates the backend's state with this rank's window of bytes (zeroed)
   * through transport t (p2p: GPU memory shared by P2P), and returns the
   * window's handle for the peers and its address as the executor sees it.
   * Local. */
  ncclResult_t (*window_create)(struct ncclComm *comm, const brd_transport_ops_t *t, int p2p,
                                size_t bytes, brd_seg_handle_t *handle_out, char **base_out,
                                struct brd_backend **b_out);
  /* Maps rank r's window; returns its address as the executor sees it. */
  ncclResult_t (*window_import)(struct brd_backend *b, int r, const brd_seg_handle_t *handle,
                                char **base_out);
  /* Every peer has mapped this rank's window: names may go. */
  void (*window_seal)(struct brd_backend *b);
  /* Switch channels with BRD_BACKEND_SWITCH_NATIVE or _OPT_IN: maps the sealed window
   * for them (multicast), collectively with every rank; *on_out 1 when
   * every rank has the mapping, 0 when none has (NVLS off; the reason at
   * INFO or WARN). An error only where NCCL_NVLS_ENABLE=1 required it, or
   * a failure of the exchange itself. NULL: nothing to map. */
  ncclResult_t (*switch_bind)(struct ncclComm *comm, struct brd_backend *b, int *on_out);

  /* A window every rank registers (ncclCommWindowRegister, collective):
   * binds [ptr, ptr + size) on every rank to one multicast object, with
   * every rank at the same time. *mc_out the object (brd_nvls_destroy
   * frees it), or NULL with why (nwhy bytes) when it is not bound (the
   * same on every rank). An error only where NCCL_NVLS_ENABLE=1 required
   * it, or a failure of the exchange itself. NULL: windows are never
   * bound (host mode). */
  ncclResult_t (*reg_switch_bind)(struct ncclComm *comm, char *ptr, size_t size,
                                  struct brd_nvls **mc_out, char *why, size_t nwhy);

  /* Starts a launch of l->calls (b is NULL before the first connection).
   * The launch's end op undoes it whatever this returns. Calling thread. */
  ncclResult_t (*begin)(struct ncclComm *comm, struct brd_backend *b, brd_backend_launch_t *l);
  /* A one-rank communicator's calls as plain copies, with no runtime, or
   * NULL when the backend takes the general path. Returns 1 in *done_out
   * when it ran them. */
  ncclResult_t (*run_local)(struct ncclComm *comm, brd_backend_launch_t *l, int *done_out);
  /* Orders the launch after the rank's earlier ones (after the
   * connection); NULL when launches are ordered anyway. */
  ncclResult_t (*order)(struct brd_backend *b, brd_backend_launch_t *l);
  /* Runs (or enqueues) every work in order, first taking the snapshots
   * the works ask for. Blocks until done in host mode. */
  /* Runs this rank's part of a one-sided plan (algos/rma.c; core/rma.c
   * fills r, see brd_backend_rma_t) between begin and end, on the
   * launch's stream after order. Host: complete on return, with r->a's
   * explicit epochs. CUDA: enqueued, counting on the device (so it may be
   * captured into a graph). NULL: the backend has none. */
  ncclResult_t (*rma_run)(struct ncclComm *comm, struct brd_backend *b,
                          brd_backend_launch_t *l, const brd_backend_rma_t *r);
  ncclResult_t (*run_works)(struct ncclComm *comm, struct brd_backend *b,
                            brd_backend_launch_t *l, struct brd_works *ws);
  /* Ends a launch; returns res, or the backend's own failure when res was
   * ncclSuccess. b may be NULL. NULL: nothing to end (res stands). */
  ncclResult_t (*end)(struct ncclComm *comm, struct brd_backend *b, brd_backend_launch_t *l,
                      ncclResult_t res);

  /* Registration. Exports [ptr, ptr + size) for the other ranks:
   * *ok_out 1 with handle_out and offset_out (ptr within the handle's
   * mapping), or 0 with the reason in why_out when this memory cannot be
   * shared; ex serves it until brd_p2p_export_seal. Errors (WARN) only
   * when exporting failed. Any thread. */
  ncclResult_t (*reg_export)(const struct ncclComm *comm, const char *ptr, size_t size,
                             brd_seg_handle_t *handle_out, uint64_t *offset_out,
                             brd_p2p_export_t *ex, char *why_out, size_t nwhy, int *ok_out);
  /* Maps a range another rank exported into imp (left zeroed when the
   * address is usable as it is); *addr_out is the registered pointer as
   * this process addresses it. Any thread. */
  ncclResult_t (*reg_import)(struct ncclComm *comm, const brd_seg_handle_t *handle,
                             uint64_t offset, brd_seg_t *imp, char **addr_out);

  /* Reads asynchronous failures (stored in comm->async_error too). Never
   * blocks; any thread. NULL: the backend fails only synchronously. */
  ncclResult_t (*poll)(struct ncclComm *comm, struct brd_backend *b);
  /* Makes running and later work of this rank stop at its next wait.
   * Never blocks; any thread. NULL: its waits watch the communicator's
   * abort flag themselves. */
  void (*abort)(struct brd_backend *b);
  /* A peer is known gone (comm.c's watchdog): work already queued whose
   * waits see no progress for `ns` fails as a hang, work that progresses
   * is left alone. NULL when launches end before they return (host: the
   * watchdog raises the abort flag of a launch that outlives the grace).
   * Never blocks; any thread. */
  void (*peer_gone)(struct brd_backend *b, uint64_t ns);
  /* Port channels (proxy.h). How the proxy allocates mirrors for this
   * executor (NULL: plain host memory). */
  void (*port_mem)(struct brd_backend *b, brd_proxy_mem_t *mem_out);
  /* This rank's window as the host addresses it (the proxy writes there);
   * NULL op: the executor's address is the host's. */
  char *(*window_host)(struct brd_backend *b);
  /* Hands the proxy to the executor (CUDA: trigger FIFOs holding every
   * port peer's mirror, brd_proxy_mirror_dev). NULL op: the executor
   * calls the ports itself. The launching thread. */
  ncclResult_t (*ports_bind)(struct brd_backend *b, brd_proxy_t *px, int nranks);
  /* Waits, bounded, until no work of this rank runs (raising the abort at
   * the deadline), before the proxy that work may need goes. NULL op:
   * nothing runs once a launch returned. Any thread. */
  void (*quiesce)(struct brd_backend *b);

  /* Device memory b owns, in bytes: the sum of its allocations' sizes
   * (window, cursors, status blocks, snapshots, plans), counted where each
   * is made; what destroy gives back. NULL when the backend allocates no
   * device memory (host). Never blocks; any thread. */
  uint64_t (*mem_bytes)(const struct brd_backend *b);
  /* Waits until the rank's launched work has left the executor (BRAID_TIMEOUT
   * at most, then ncclRemoteError naming what still runs), so that peers may
   * free what it reads. NULL when launches complete before they return
   * (host). The launching thread. */
  ncclResult_t (*drain)(struct ncclComm *comm, struct brd_backend *b);
  /* Frees the state, first waiting (bounded) for the rank's work to
   * leave the executor. NULL is a no-op. The tearing-down thread. */
  void (*destroy)(struct brd_backend *b);
} brd_backend_ops_t;

extern const brd_backend_ops_t brd_backend_host; /* launch_host.c */
extern const brd_backend_ops_t brd_backend_cuda; /* launch_cuda.c; in a build
                                                    without CUDA, every op
                                                    says so */

/* The backend of comm's mode (BRAID_DEVICE): the one choice between host
 * and CUDA. Any thread. */
const brd_backend_ops_t *brd_backend_choose(const struct ncclComm *comm);

#endif /* BRD_CORE_BACKEND_H */
