/*
 * Braid benchmarks: the participants of one run and how they meet.
 *
 * A participant is one benchmark thread; it drives one or more ranks. The
 * world is nprocs processes x nthreads participants, numbered
 * proc*nthreads + thread. Processes come from the built-in launcher (-P,
 * fork), from the caller through a world file (processes started one by one
 * on one host, e.g. in separate network namespaces, that map one file), or,
 * in a build with BRAID_MPI, from MPI; MPI then carries only the unique id,
 * barriers and result exchange.
 *
 * Forked processes share one anonymous shared mapping made before the fork:
 * a barrier, exchange slots, the unique id and an abort flag. Every wait
 * spins to a deadline and checks the abort flag. A watchdog thread in each
 * process enforces -T, notices children that died, and ends a process whose
 * threads stay stuck after another participant failed.
 */
#ifndef BRD_TOOLS_WORLD_H
#define BRD_TOOLS_WORLD_H

#include <stdatomic.h>
#include <stddef.h>

#include "nccl.h"

/* How a value is combined across participants (nccl-tests' -a values, plus
 * sum). */
typedef enum {
  BRD_PERF_RED_FIRST = 0, /* participant 0's value */
  BRD_PERF_RED_AVG = 1,
  BRD_PERF_RED_MIN = 2,
  BRD_PERF_RED_MAX = 3,
  BRD_PERF_RED_SUM = 4,
} brd_perf_red_t;

typedef struct brd_perf_world brd_perf_world_t;

/* Creates the world for nprocs x nthreads participants; slot_bytes bounds
 * one participant's contribution to brd_perf_world_allgather. wait_s is the
 * deadline of every wait, timeout_s (0: none) the -T limit on one
 * collective. With use_mpi, MPI must already be initialised and nprocs is
 * taken from it. With a file (not NULL, use_mpi 0), this process is process
 * file_proc of nprocs started separately, all mapping that file, which must
 * be absent or empty at the start; process 0 deletes it at destroy. Call
 * before any thread or fork; the caller owns *out. */
ncclResult_t brd_perf_world_create(int nprocs, int nthreads, size_t slot_bytes,
                                   int wait_s, int timeout_s, int use_mpi,
                                   const char *file, int file_proc,
                                   brd_perf_world_t **out);

/* Forks the other nprocs-1 processes (built-in launcher); the caller stays
 * process 0. Writes this process's index. Main thread, before any CUDA or
 * NCCL call and before other threads exist. */
ncclResult_t brd_perf_world_spawn(brd_perf_world_t *w, int *proc_out);

/* This process's index, the number of processes, and this process's index
 * among the processes of its host. */
int brd_perf_world_proc(const brd_perf_world_t *w);
int brd_perf_world_nprocs(const brd_perf_world_t *w);
int brd_perf_world_local_proc(const brd_perf_world_t *w);

/* Starts the watchdog thread of this process. When it has to end the
 * process it exits with *exit_code, or 1 while that is still 0. Main
 * thread, once; exit_code must outlive the world. */
ncclResult_t brd_perf_world_watch(brd_perf_world_t *w, _Atomic int *exit_code);

/* Blocks until every participant arrives (thread: this participant's
 * thread index). Fails, quietly, once the abort flag is up, and with a
 * message at the deadline. */
ncclResult_t brd_perf_world_barrier(brd_perf_world_t *w, int thread);

/* Every participant contributes len bytes (len <= slot_bytes); all_out
 * receives nprocs*nthreads*len bytes in participant order. Blocks like a
 * barrier. */
ncclResult_t brd_perf_world_allgather(brd_perf_world_t *w, int thread,
                                      const void *mine, size_t len,
                                      void *all_out);

/* Combines *val across participants as `how` says; every participant gets
 * the same answer. */
ncclResult_t brd_perf_world_reduce(brd_perf_world_t *w, int thread,
                                   double *val, brd_perf_red_t how);

/* Participant 0's *id becomes every participant's *id. */
ncclResult_t brd_perf_world_share_id(brd_perf_world_t *w, int thread,
                                     ncclUniqueId *id);

/* Raises the abort flag so every other wait gives up. Any thread. */
void brd_perf_world_fail(brd_perf_world_t *w);

/* 1 once any participant failed. Any thread. */
int brd_perf_world_failed(const brd_perf_world_t *w);

/* Marks thread as inside a collective (on=1) or out of it (on=0); the
 * watchdog applies -T to the marked stretch. */
void brd_perf_world_busy(brd_perf_world_t *w, int thread, int on);

/* Process 0 of the launcher: waits (to the deadline) for every child and
 * folds their exit codes into own_code; other processes return own_code.
 * Stops the watchdog. Main thread, after the participants of this process
 * have finished. */
int brd_perf_world_finish(brd_perf_world_t *w, int own_code);

/* The host name up to its first '.', as nccl-tests prints it. */
void brd_perf_host_name(char *buf, size_t len);

/* Releases the world. destroy(NULL) is a no-op. */
void brd_perf_world_destroy(brd_perf_world_t *w);

#endif /* BRD_TOOLS_WORLD_H */
