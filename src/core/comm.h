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
struct brd_init_job;   /* an init running on a helper thread (init.c) */

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

  /* Lifecycle and topology (owner: init.c; written by init, read-only
   * afterwards unless noted). */
  int backend;             /* brd_device_backend_t */
  int node;                /* index of this rank's host among the comm's hosts */
  int n_nodes;             /* distinct host identities in the comm */
  struct brd_peer_info *peers;   /* owned: nranks entries from the init allgather */
  int host_cores;          /* physical cores of this host (plan/topo.c) */
  uint32_t split_count;    /* splits/shrinks made from this comm (caller's thread) */
  int revoked;             /* ncclCommRevoke was called (caller's thread) */
  struct brd_init_job *init_job; /* owned reference: this comm's init on a helper
                                    thread, NULL when init ran inline or was reaped */
  _Atomic int children_busy;     /* split/shrink jobs still using this comm */

  /* Collectives (owner: launch.c / mem.c). */
  struct brd_rt *rt;             /* owned: channels, plan cache; made at the
                                    first launch, freed by brd_comm_destroy */
  struct brd_redops *redops;     /* owned: ncclRedOpCreatePreMulSum table,
                                    NULL until the first one */

  /* CUDA mode and registration (owner: launch_cuda.c / mem.c). */
  struct brd_rt_cuda *rt_cuda;   /* owned: CUDA-mode windows, plans and executor
                                    status, made at the first CUDA launch; stored
                                    and loaded with __atomic builtins (abort and
                                    poll read it from other threads); freed by
                                    brd_launch_cuda_destroy */
  struct brd_regs *regs;         /* owned: ncclCommRegister records, NULL until
                                    the first; freed by brd_mem_regs_destroy */

  /* ncclCommSuspend/ncclCommResume (owner: suspend.c): 1 while suspended;
   * calls that would launch fail meanwhile (enqueue.c). */
  _Atomic int suspended;
};

struct brd_regs;

/* Frees a communicator's registration records and unmaps the peers'
 * ranges they mapped (mem.c; comm teardown). No records is a no-op. */
void brd_mem_regs_destroy(struct ncclComm *comm);

/* Direct use of a registered buffer by a collective (mem.c). When
 * [buf, buf + bytes) lies in a range this rank registered with
 * ncclCommRegister (with BRAID_REGISTER_SYMMETRIC=1, the user's promise
 * of NCCL's symmetric rule below), or in a window registered with
 * NCCL_WIN_COLL_SYMMETRIC, every rank's range is mapped here and the
 * buffer fits every rank's range at the same offset, sets *ok_out to 1 and
 * peer_out[p] (nranks entries) to rank p's buffer as this process
 * addresses it; otherwise *ok_out is 0. The first use of an ncclCommRegister
 * range exchanges it with every rank (bootstrap allgather): NCCL's rule that
 * every rank passes registered buffers to the same call, at the same offset
 * from the start of its registration, is what makes every rank reach that
 * exchange at the same call; a rank that breaks it leaves the others waiting
 * until BRAID_BOOTSTRAP_TIMEOUT, then fails with a message saying so.
 * shareable is 0 when the ranks cannot map each other's memory at all
 * (CUDA without P2P): then nothing is exchanged. The answer is the same on
 * every rank. Off with NCCL_LOCAL_REGISTER=0. fn names the caller for
 * messages. Blocks only in an exchange; the communicator's launching
 * thread. */
ncclResult_t brd_reg_direct(struct ncclComm *comm, const void *buf, size_t bytes,
                            int shareable, const char *fn, char **peer_out, int *ok_out);

/* Where a rank's registration service listens (brd_reg_svc_create):
 * pid 0 when there is none because every rank is in this process. */
typedef struct brd_reg_peer {
  uint32_t pid;
  uint32_t serial;
} brd_reg_peer_t;

/* Answers of brd_reg_share. */
enum {
  BRD_REG_NONE = 0,   /* not in a registered range */
  BRD_REG_LOCAL = 1,  /* registered, but some rank cannot map it */
  BRD_REG_SHARED = 2, /* registered and mapped by every rank */
};

/* Starts comm's registration service: a thread that maps the ranges other
 * ranks' brd_reg_share push to this rank, and unmaps them when asked or
 * with the communicator. The caller owns it (brd_p2p_svc_destroy, before
 * brd_mem_regs_destroy). ncclSystemError (WARN) when it cannot start.
 * The communicator's launching thread. */
struct brd_p2p_svc;
ncclResult_t brd_reg_svc_create(struct ncclComm *comm, struct brd_p2p_svc **svc_out);

/* For a buffer [buf, buf + bytes) of an ncclCommRegister range (without
 * BRAID_REGISTER_SYMMETRIC; NCCL_LOCAL_REGISTER=0 turns it off): at its
 * first use, pushes the range to every rank in another process through
 * its service (svc, nranks entries) and remembers where each rank maps it.
 * *state_out is BRD_REG_SHARED with remote_out[p] (nranks entries) the
 * buffer as rank p addresses it, BRD_REG_LOCAL when some rank cannot map
 * it (or shareable is 0: no P2P between the ranks' GPUs), BRD_REG_NONE
 * when the buffer is not registered. Each rank answers for its own buffer:
 * by NCCL's rule every rank passes registered buffers when one does, so
 * every rank answers other than BRD_REG_NONE together. Errors only when a
 * rank's service cannot be reached (WARN). Blocks on the services at the
 * first use; the communicator's launching thread. */
ncclResult_t brd_reg_share(struct ncclComm *comm, const void *buf, size_t bytes,
                           const brd_reg_peer_t *svc, int shareable, const char *fn,
                           uint64_t *remote_out, int *state_out);

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

/* Frees a communicator and what it owns (bootstrap, peer table, config
 * strings); clears magic first. Local: never waits on a peer. The caller
 * must have stopped every thread using comm. NULL is a no-op. */
void brd_comm_destroy(struct ncclComm *comm);

/* Blocks until every ncclCommInitRank/Split/Shrink this thread started
 * inside the current group has finished (init.c). Blocking communicators
 * that failed are freed and their handles set to NULL; when one fails, the
 * others still running are aborted. Returns the first error, else
 * ncclInProgress when nonblocking inits were started in the group, else
 * ncclSuccess. ncclGroupEnd calls it when the outermost group closes. */
ncclResult_t brd_init_group_wait(void);

#endif /* BRD_CORE_COMM_H */
