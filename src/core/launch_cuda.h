/*
 * Braid: the CUDA backend's private state, shared by its two files:
 * launch_cuda.c (the backend object, windows, registration, ports,
 * teardown, the ops table) and launch_cuda_run.c (the launch path). Only
 * these two include it, and only in CUDA builds.
 */
#ifndef BRAID_CORE_LAUNCH_CUDA_H
#define BRAID_CORE_LAUNCH_CUDA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/backend.h"
#include "device/exec_cuda.h"
#include "transport/nvls.h"

/* A plan on the device, and what identifies it. */
typedef struct dplan {
  const brd_ir_plan_t *key;     /* borrowed: the plan cache's plan; NULL
                                   for a point-to-point plan */
  uint64_t hash;                /* point-to-point: hash of the blob */
  brd_ir_plan_t *copy;          /* owned: point-to-point: the blob */
  brd_exec_cuda_plan_t *dev;    /* owned */
} dplan_t;

struct brd_backend {
  int nranks;
  int rank;
  int dev;
  _Atomic int *abort_flag;         /* borrowed: the communicator's, for setup waits */
  struct brd_proxy *proxy;         /* borrowed: the port channels' proxy, set by
                                      ports_bind; NULL without port peers */
  const brd_transport_ops_t *ops;  /* P2P, or HOST/SHM for host memory */
  int host_memory;                 /* 1: windows in host memory */
  brd_seg_t self;                  /* owned: this rank's window */
  brd_seg_t *peer;                 /* owned: [nranks] imported windows */
  unsigned char *registered;       /* owned: [nranks] 1 where this backend
                                      holds a host_reg reference */
  brd_exec_cuda_status_t *st_coll; /* owned: collective works */
  brd_exec_cuda_status_t *st_p2p;  /* owned: point-to-point works */
  uint64_t *p2p_cursor;            /* owned: cudaMalloc, [nranks] per-pair
                                      sequence numbers the p2p kernels keep,
                                      then rma_cursor's cells */
  uint64_t *rma_cursor;            /* in p2p_cursor: [2][rma_cells] signals
                                      sent, signals waited for (one-sided
                                      calls, brd_backend_rma_t) */
  size_t rma_cells;                /* numRmaCtx * BRD_RMA_SIGNALS * nranks */
  cudaEvent_t done;                /* owned: end of the last launch */
  cudaEvent_t join;                /* owned: joins a group's other streams */
  int events_made;
  int done_valid;                  /* done has been recorded */
  cudaStream_t last_stream;        /* stream of the last launch */
  pthread_mutex_t poll_lock;       /* brd_exec_cuda_poll is not reentrant */
  ncclResult_t failed;             /* enqueueing failed: ranks disagree */
  dplan_t *plans;                  /* owned */
  int nplans, cap_plans, np2p;
  uint64_t nlaunch;
  char *snap;                      /* owned: cudaMalloc, snapshots */
  size_t snap_cap;
  char **retired;                  /* owned: [nretired] outgrown snapshot
                                      buffers, freed at teardown: cudaFree
                                      waits for the whole device, including
                                      peers' kernels that wait for this rank */
  int nretired;
  _Atomic uint64_t dev_bytes;      /* device memory the above own, added where
                                      each is allocated (cuda_mem_bytes) */
  brd_nvls_t *nvls;                /* owned: the window's multicast mapping
                                      (switch channels), or NULL */
  char *mc_base;                   /* the window's first byte through it */
};

/* The launch path (launch_cuda_run.c), for the ops table in launch_cuda.c.
 * Each is the backend.h op of the same name (its contract is there); all
 * run on the thread that launches on the rank, and none waits for the
 * kernels. */

/* Switches to comm's GPU, relaxes the thread's stream-capture mode, learns
 * whether the first call's stream is being captured, and (rt not NULL)
 * returns an earlier launch's failure. */
ncclResult_t brd_launch_cuda_begin(struct ncclComm *comm, struct brd_backend *rt,
                                   brd_backend_launch_t *l);
/* A one-rank launch done as copies on the stream; *done_out 0 when the
 * launch must take the general path. */
ncclResult_t brd_launch_cuda_run_local(struct ncclComm *comm, brd_backend_launch_t *l,
                                       int *done_out);
/* Orders the launch after the rank's previous one and the group's other
 * streams. */
ncclResult_t brd_launch_cuda_order(struct brd_backend *rt, brd_backend_launch_t *l);
/* Enqueues every work of ws (after its snapshots) on the launch's stream. */
ncclResult_t brd_launch_cuda_run_works(struct ncclComm *comm, struct brd_backend *rt,
                                       brd_backend_launch_t *l, brd_works_t *ws);
/* Enqueues the rank's part of a one-sided plan. */
ncclResult_t brd_launch_cuda_rma_run(struct ncclComm *comm, struct brd_backend *rt,
                                     brd_backend_launch_t *l, const brd_backend_rma_t *r);
/* Records the launch's end, restores the thread's capture mode and device;
 * returns res, or its own failure when res is ncclSuccess. */
ncclResult_t brd_launch_cuda_end(struct ncclComm *comm, struct brd_backend *rt,
                                 brd_backend_launch_t *l, ncclResult_t res);
/* Reads both executor statuses without synchronising; a failure is stored
 * in comm->async_error and returned. */
ncclResult_t brd_launch_cuda_poll(struct ncclComm *comm, struct brd_backend *rt);

#endif /* BRAID_CORE_LAUNCH_CUDA_H */
