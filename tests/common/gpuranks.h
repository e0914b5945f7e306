/*
 * Test helper: ranks as threads of one process that take their steps
 * together (tests/gpu/test_graph.c, test_rma_graph.c). Each rank has a
 * gpuranks_arg_t; the ranks of one run share a barrier (gpuranks_meet) and
 * a flag that any failure sets, so that all of them stop at the next
 * meeting rather than one stopping alone and leaving its peers waiting in
 * a collective. A rank records its first failure's message
 * (gpuranks_fail, or the GPURANKS_CU / GPURANKS_NC checks, which return
 * -1 from the calling function).
 *
 * Nothing here touches CUDA: the CUDA check is a macro, expanded only in
 * the programs that use it.
 */
#ifndef BRD_TESTS_GPURANKS_H
#define BRD_TESTS_GPURANKS_H

#include <pthread.h>
#include <stddef.h>

#include "nccl.h"

#define GPURANKS_MAX 8

/* What the ranks of one run share (gpuranks_run owns it). */
typedef struct {
  pthread_barrier_t barrier;
  _Atomic int any_failed;
} gpuranks_shared_t;

/* One rank: its communicator's id and place, and its first failure. */
typedef struct {
  ncclUniqueId id;
  int n, rank;
  gpuranks_shared_t *shared; /* borrowed from gpuranks_run */
  char msg[512];             /* the first failure, when failed */
  int failed;
} gpuranks_arg_t;

/* Records a failure of rank a: the message (the first one only) and the
 * flag every rank sees. Returns -1. Only a's thread. */
int gpuranks_fail(gpuranks_arg_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Waits until every rank of the run has called it; returns -1 when any
 * of them has failed, else 0. Every rank must call it as often as the
 * others. Only a's thread; blocks without a deadline (the ranks' own
 * calls have theirs). */
int gpuranks_meet(gpuranks_arg_t *a);

/* 1 when any rank of a's run has failed so far. Any thread. */
int gpuranks_any_failed(const gpuranks_arg_t *a);

/* Runs rank_main(&arg) for ranks 0..n-1 (1 <= n <= GPURANKS_MAX) of a
 * fresh unique id, one thread each, and waits for them. Returns 0 when no
 * rank failed; else -1 with the first failing rank's message (or why the
 * run could not start, in which case no rank ran) in msg. Call from one
 * thread at a time; blocks until every rank has returned. */
int gpuranks_run(int n, void *(*rank_main)(void *arg), char *msg, size_t msglen);

/* For a program whose ranks need CUDA mode, first thing in main (it
 * forks a probe: single-threaded, no CUDA touched yet): sets BRAID_DEVICE
 * to cuda and BRAID_TIMEOUT to 30 s where they are unset (a rank that
 * fails stops; its peers then end at this timeout). Returns 0 when CUDA
 * mode is usable; else prints "SKIP: prog: why" (`what` needs
 * BRAID_DEVICE=cuda, or why no device serves) and returns TDEV_EXIT_SKIP. */
int gpuranks_cuda_ready(const char *prog, const char *what);

/* In a function of rank `a` that returns int: returns gpuranks_fail's -1
 * when the CUDA runtime call or the NCCL call fails. */
#define GPURANKS_CU(a, call)                                                   \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return gpuranks_fail((a), "rank %d: %s failed: %s", (a)->rank, #call,    \
                           cudaGetErrorString(e_));                            \
  } while (0)

#define GPURANKS_NC(a, call)                                                   \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      return gpuranks_fail((a), "rank %d: %s failed: %s (%s)", (a)->rank,      \
                           #call, ncclGetErrorString(r_),                      \
                           ncclGetLastError(NULL));                            \
  } while (0)

#endif
