/*
 * Braid: the communicator object behind ncclComm_t.
 *
 * Fields are grouped by who writes them. Identity fields are written once
 * during init and read-only afterwards; async_error and abort_flag are the
 * only fields other threads write while the communicator is in use.
 */
#ifndef BRD_CORE_COMM_H
#define BRD_CORE_COMM_H

#include <stdatomic.h>
#include <stdint.h>

#include "nccl.h"

#define BRD_COMM_MAGIC 0x4252414944434f4dull /* "BRAIDCOM" */

struct brd_boot;   /* bootstrap state (bootstrap.h) */
struct brd_peer_info;  /* per-rank identity (device.h) */
struct brd_init_job;   /* an init running on a helper thread (init.h, init_job.c) */

struct ncclComm {
  uint64_t magic;          /* BRD_COMM_MAGIC while alive, 0 once destroyed */

  /* Identity: written by init, read-only afterwards. */
  int rank;                /* this rank in [0, nranks) */
  int nranks;
  int cuda_dev;            /* CUDA device, or the virtual device in host mode */
  int host_mode;           /* 1: host executor (BRAID_DEVICE=host) */
  int local_rank;          /* index among ranks with the same host identity */
  int local_nranks;        /* ranks with the same host identity */
  uint64_t comm_hash;      /* same on every rank of this communicator */
  ncclConfig_t config;     /* resolved: no NCCL_CONFIG_UNDEF_* fields left */
  char comm_name[64];      /* copy of config.commName, "" if none */

  /* Cross-thread state. */
  _Atomic int abort_flag;          /* set by abort/revoke; every wait polls it */
  _Atomic int async_error;         /* ncclResult_t; ncclInProgress during init */
  int finalized;                   /* ncclCommFinalize was called */

  struct brd_boot *boot;   /* owned: bootstrap ring to the other ranks */

  /* Lifecycle and topology (owner: init.c, init_job.c; written by init, read-only
   * afterwards unless noted). */
  int backend;             /* brd_device_backend_t */
  int node;                /* index of this rank's host among the comm's hosts */
  int n_nodes;             /* distinct host identities in the comm */
  int proxy_dev_kept;      /* net device + 1 brd_proxy_nic_mbps chose for
                              this rank's proxy (0: none); the proxy takes
                              it when the net lists proxy_ndev_kept devices */
  int proxy_ndev_kept;
  struct brd_peer_info *peers;   /* owned: nranks entries from the init allgather */
  int host_cores;          /* physical cores of this host (plan/topo.c) */
  uint32_t split_count;    /* splits/shrinks made from this comm (caller's thread) */
  int revoked;             /* ncclCommRevoke was called (caller's thread) */
  struct brd_init_job *init_job; /* owned reference: this comm's init on a helper
                                    thread, NULL when init ran inline or was reaped */
  _Atomic int children_busy;     /* split/shrink jobs still using this comm */

  /* Collectives (owner: launch.c / redop.c). */
  struct brd_rt *rt;             /* owned: channels, plan cache, the backend
                                    (window.h); made at the first launch
                                    (stored with release: poll and abort read
                                    it from other threads), freed by
                                    brd_comm_destroy */
  _Atomic int rt_readers;        /* threads reading rt outside the launch
                                    (poll, abort, statistics); the release
                                    on suspend waits for 0 (launch.c) */
  struct brd_tuner *tuner;       /* owned: the tuner plugin's context for this
                                    comm (plan/tuner_plugin.h), made by init,
                                    NULL without a plugin; destroyed by
                                    brd_comm_destroy */
  struct brd_prof *prof;         /* owned: the profiler plugin's context for
                                    this comm (core/profiler.h), made by init,
                                    NULL without a plugin; destroyed by
                                    brd_comm_destroy after the runtime */
  struct brd_redops *redops;     /* owned: ncclRedOpCreatePreMulSum table,
                                    NULL until the first one */

  /* Registration (owner: reg.c). */
  struct brd_regs *regs;         /* owned: ncclCommRegister records, NULL until
                                    the first; freed by brd_regs_destroy */

  /* Liveness (owner: comm.c's watchdog thread writes, callers read). */
  _Atomic int peer_dead;         /* 0, or 1 + the first rank found gone */
  char dead_msg[800];            /* why, written before peer_dead is set */
  _Atomic int64_t dead_since_ns; /* when peer_dead was set */
  _Atomic int64_t launch_since_ns; /* start of the launch running now, 0: none */
  _Atomic int watched;           /* pid of the process whose watchdog lists comm,
                                    0: none (written under its lock) */
  uint64_t calls_seq;            /* BRAID_CHECK_CALLS: collectives checked so far
                                    (the launching thread) */
  struct ncclComm *watch_next;   /* watchdog list link, under its lock */

  /* ncclCommSuspend/ncclCommResume (owner: suspend.c): 1 while suspended;
   * calls that would launch fail meanwhile (enqueue.c). */
  _Atomic int suspended;
};

/* Validates a communicator argument for entry point fn: NULL or a destroyed
 * communicator gets ncclInvalidArgument and a WARN naming fn. Any thread. */
ncclResult_t brd_comm_check(const struct ncclComm *comm, const char *fn);

/* Allocates a communicator (comm.c): magic set, rank/nranks/cuda_dev -1,
 * async_error ncclInProgress, everything else zero. Caller's thread. */
ncclResult_t brd_comm_create(struct ncclComm **comm_out);

/* Ranks of comm on the GPU the most of them share (same host and bus id
 * in the peer table); 1 without a peer table. Any thread. */
int brd_comm_ranks_per_device(const struct ncclComm *comm);

/* 1 when every rank of comm is a thread of this process (a one-rank comm
 * without a peer table counts). Any thread. */
int brd_comm_all_in_process(const struct ncclComm *comm);

/* The lowest rank of comm in another process on this rank's GPU (same host
 * and bus id, another pid_hash), or -1 when there is none. Any thread. */
int brd_comm_device_other_process(const struct ncclComm *comm);

/* Liveness. The first launch on a communicator of more than one rank
 * registers it with the process's watchdog thread, which every 50 ms
 * checks the ring neighbours' bootstrap connections (closed: the
 * neighbour's process died or it destroyed the communicator; one that left
 * after an error gave its reason, recorded as "rank A ... left: why") and, for
 * ranks in other processes of this host and pid namespace, whether their
 * pid still exists. The first rank found gone is recorded (peer_dead,
 * dead_msg); a launch still running BRD_LIVE_GRACE_MS after that is
 * stopped through the abort flag. Idempotent; the launching thread. */
void brd_comm_live_watch(struct ncclComm *comm);

/* ncclRemoteError with a WARN naming the gone rank, its host and pid (fn
 * names the caller) when the watchdog found a rank of comm gone, else
 * ncclSuccess. Any thread. */
ncclResult_t brd_comm_live_check(struct ncclComm *comm, const char *fn);

/* Frees a communicator and what it owns (bootstrap, peer table, config
 * strings); clears magic first. Local: never waits on a peer. The caller
 * must have stopped every thread using comm. NULL is a no-op. */
void brd_comm_destroy(struct ncclComm *comm);

/* Blocks until every ncclCommInitRank/Split/Shrink this thread started
 * inside the current group has finished (init_job.c). Blocking communicators
 * that failed are freed and their handles set to NULL; when one fails, the
 * others still running are aborted. Returns the first error, else
 * ncclInProgress when nonblocking inits were started in the group, else
 * ncclSuccess. ncclGroupEnd calls it when the outermost group closes. */
ncclResult_t brd_init_group_wait(void);

#endif /* BRD_CORE_COMM_H */
