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
};

/* Validates a communicator argument for entry point fn: NULL or a destroyed
 * communicator gets ncclInvalidArgument and a WARN naming fn. Any thread. */
ncclResult_t brd_comm_check(const struct ncclComm *comm, const char *fn);

#endif /* BRD_CORE_COMM_H */
