/*
 * Braid: registered buffers and windows of a communicator (reg.c): the
 * records ncclCommRegister and ncclCommWindowRegister keep, and the
 * lookups a collective makes to use a registered buffer in place.
 */
#ifndef BRD_CORE_REG_H
#define BRD_CORE_REG_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

struct ncclComm;
struct brd_regs;

/* Frees a communicator's registration records and unmaps the peers'
 * ranges they mapped (comm teardown). No records is a no-op. */
void brd_regs_destroy(struct ncclComm *comm);

/* Direct use of a registered buffer by a collective. When
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

/* The multicast address of [buf, buf + bytes) when it lies in a window
 * of comm (ncclCommWindowRegister) bound to a multicast object
 * (transport/nvls.h): *mc_out is that window's multicast mapping at buf's
 * offset, which reaches the same offset of every rank's window (NCCL's
 * symmetric rule: every rank passes a buffer at the same offset); NULL
 * otherwise, with why[] saying why (why may be NULL). Binding is
 * collective and fails together, so the answer is the same on every rank
 * for symmetric buffers. Never blocks beyond the registry's lock; any
 * thread. */
void brd_reg_switch(struct ncclComm *comm, const void *buf, size_t bytes, void **mc_out,
                    char *why, size_t why_len);

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
 * with the communicator. The caller owns it (brd_ipc_svc_destroy, before
 * brd_regs_destroy). ncclSystemError (WARN) when it cannot start.
 * The communicator's launching thread. */
struct brd_ipc_svc;
ncclResult_t brd_reg_svc_create(struct ncclComm *comm, struct brd_ipc_svc **svc_out);

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

#endif /* BRD_CORE_REG_H */
