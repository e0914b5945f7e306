/*
 * Braid: the collective runtime of a communicator and its window.
 *
 * Every rank owns one window of channel memory, made by its backend
 * (backend.h) through the transport chosen here once:
 *
 *   [ inbound semaphores: nranks x nsems x 8 bytes ]
 *   [ point-to-point semaphores: nranks x 2 x 8 bytes ]
 *   [ output exchange slots: nranks x BRD_IR_XCHG_WORDS x 8 bytes ]
 *   [ switch semaphores: sw_nsems x nranks x 8 bytes (NVLS only) ]
 *   [ scratch: the largest any Simple collective plan needs, both phases ]
 *   [ LL scratch: the largest any LL collective plan needs, both phases ]
 *   [ point-to-point scratch: BRD_ALGOS_SENDRECV_DEPTH slots per sender ]
 *   [ staging output: two halves of stage_bytes ]
 *
 * Peers reach a rank's scratch, semaphores and output through this window.
 * LL plans have a scratch of their own: a reader takes any 8-byte word
 * whose upper half is the flag it waits for as a packet, so raw data that
 * a Simple plan left in a shared slot (an ascending sequence holds every
 * small value) would be read as this launch's packet by a reader that
 * gets there before the writer (NCCL keeps separate LL buffers too).
 * With NVLS on (rt->nvls), the window also holds the switch semaphores
 * (device/ir.h, "Switch channels"): semaphore i is nranks words, word m
 * written only by rank m, in every rank's window at once (MC_BARRIER);
 * a switch channel's members are every rank's scratch and switch
 * semaphores, in rank order (works.c). On a GPU these would be the
 * multicast mapping's copies; host mode addresses each rank's window.
 * All ranks create the runtime at their first launch, agree on what every
 * rank can do, allgather their window records and map each other's
 * windows; from then on they generate the same plans and reserve the same
 * sequence numbers in the same order (works.c), which is what lets
 * semaphores only grow.
 */
#ifndef BRD_CORE_WINDOW_H
#define BRD_CORE_WINDOW_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/comm.h"
#include "core/plans.h"
#include "core/reg.h"
#include "plan/tune.h"
#include "transport/transport.h"

#define BRD_RT_NB_MAX_OPTS 7 /* block counts a runtime may use: 1, 2, 4 ... 64 */

/* What a rank publishes about its window (exchanged as bytes). */
typedef struct brd_window_rec {
  brd_seg_handle_t handle;
  uint64_t sem_off;
  uint64_t nsems;       /* inbound semaphores per peer */
  uint64_t p2p_sem_off; /* 2 per peer */
  uint64_t xchg_off;    /* output exchange slots, one per peer (device/ir.h) */
  uint64_t sw_sem_off;  /* switch semaphores: sw_nsems x nranks words */
  uint64_t sw_nsems;    /* 0 without NVLS */
  uint64_t rma_off;     /* one-sided signal counters (core/rma.c): */
  uint64_t rma_words;   /* numRmaCtx x 64 x nranks words, counter (ctx,
                         * sig, src) written only by rank src */
  uint64_t svc_pid;     /* registration service (brd_reg_svc_create); 0: none */
  uint64_t svc_serial;
  uint64_t scratch_off;   /* Simple (and switch) plans' slots */
  uint64_t scratch_bytes;
  uint64_t ll_scratch_off; /* LL plans' slots: only LL packets are ever
                            * written there, so a stale word never carries
                            * a flag a reader waits for (device/ir.h) */
  uint64_t ll_scratch_bytes;
  uint64_t p2p_off;
  uint64_t p2p_bytes;
  uint64_t stage_off;
  uint64_t stage_bytes; /* one half */
  uint64_t deterministic;
  uint64_t nb_max;      /* most blocks per rank of any plan */
  uint64_t net_bad;     /* 1: the rank has peers it reaches only over the
                         * network, and no network is usable; every rank
                         * then fails the exchange naming it */
  char net_why[256];    /* with net_bad: why (brd_net_get's reason) */
} brd_window_rec_t;

/* The sequence state every rank advances in the same order. */
typedef struct brd_works_seq {
  uint64_t epoch_cursor;  /* collective epochs (host-kept sequence numbers) */
  uint32_t phase;         /* alternates per collective work */
  uint64_t *p2p_cursor;   /* owned by the runtime: [nranks] per-pair
                           * sequence numbers (unused with device_seq) */
} brd_works_seq_t;

struct brd_rt {
  int nranks;
  uint64_t serial;              /* distinct for every runtime of the process */
  _Atomic int busy;             /* launches running and nonblocking groups
                                 * not yet done with this comm (a count: a
                                 * group may start before the previous
                                 * one's helper has let go, and an abort
                                 * may come from another thread) */
  _Atomic uint64_t launches;    /* brd_launch_count */
  const brd_backend_ops_t *be;  /* chosen once, when the runtime is made */
  struct brd_backend *bk;       /* owned (be->destroy): windows and executor
                                 * state; stored and loaded with __atomic
                                 * builtins (poll and abort read it from
                                 * other threads) */
  int ready;                    /* window made and exchanged */
  char **base;                  /* owned: [nranks] every window's address
                                 * as the executor sees it */
  int nb_opts[BRD_RT_NB_MAX_OPTS]; /* block counts of the plans, ascending */
  int nb_count;
  brd_window_rec_t *win;        /* owned: [nranks] every rank's record */
  brd_plan_cache_t plans;       /* generated plans */
  brd_tune_mask_t mask;
  brd_tune_topo_t topo;         /* topo.nvls: NVLS plans may run (nvls) */
  int nvls;                     /* switch channels on (NCCL_NVLS_ENABLE,
                                 * the backend, every rank sharing memory
                                 * with every other): the same on every rank */
  int deterministic;            /* BRAID_DETERMINISTIC, same on every rank */
  brd_works_seq_t seq;
  size_t p2p_piece;             /* bytes per point-to-point piece (slot) */
  int reg_shareable;            /* ranks may map each other's registered
                                 * buffers (host mode: always, the exchange
                                 * decides per buffer; CUDA mode: with P2P) */
  struct brd_ipc_svc *svc;      /* owned: registration service, when some
                                 * rank is in another process */
  brd_reg_peer_t *svc_peers;    /* owned: [nranks] every rank's service */
  /* Port channels (proxy.h): peers whose windows are not mapped here. */
  uint8_t *port;                /* owned: [nranks] 1 where the channel is a port */
  uint8_t *port_matrix;         /* owned: [nranks * nranks] the same for
                                 * every pair (plans mark their channels) */
  int nports;
  struct brd_proxy *proxy;      /* owned: NULL when nports is 0 */
  struct brd_exec_port **ports; /* owned: [nranks] the proxy's ports, NULL
                                 * for memory channels (the ports are the
                                 * proxy's) */
};

/* Makes this rank's window, exchanges the records and maps the peers'.
 * Collective over the communicator (every rank at its first launch). On
 * failure the runtime is left without a window (ready 0). The launching
 * thread. */
ncclResult_t brd_window_connect(struct ncclComm *comm, struct brd_rt *rt);

/* Unmaps and frees the windows and the tables (the backend's state too).
 * The caller has made sure nothing runs on them. */
void brd_window_disconnect(struct brd_rt *rt);

/* The cost model's view of comm (p2p: GPU peer-to-peer between its ranks;
 * nic_mbps: the slowest NIC between its hosts, 0 if unknown). Local. */
void brd_window_topo(const struct ncclComm *comm, const brd_backend_ops_t *be, int p2p,
                     int nic_mbps, brd_tune_topo_t *t_out);

#endif /* BRD_CORE_WINDOW_H */
