/*
 * One-sided calls (ncclPutSignal, ncclSignal, ncclWaitSignal) captured
 * into a CUDA graph and replayed, public API only.
 *
 * Ranks are threads of this process sharing device 0 (2 and 3 ranks), one
 * communicator each, each on its own non-blocking stream, a window from
 * ncclMemAlloc each. One round is, on every rank:
 *   ncclPutSignal of WORDS uint32 values into the next rank's window
 *   (signal 1 of context 0), ncclSignal to the next rank twice (signal 2),
 *   ncclWaitSignal with two descriptors: 1 signal 1 and 2 signals 2 from
 *   the previous rank,
 * then the window is copied back and must hold the previous rank's values
 * of that round (a formula of rank, round and word).
 *
 * Round 0 runs directly (warm-up). Every rank then captures one round into
 * a graph (cudaStreamCaptureModeGlobal, as PyTorch does) and replays it
 * REPLAYS times, rewriting its source buffer with the replay's values
 * before each; in replay t the ranks r with (t + r) odd wait 30 ms before
 * launching, so a receiver whose wait passed on an old count would finish
 * before its sender's put and read the previous replay's values. Last, one
 * more round runs directly: captured and direct calls count together.
 *
 * Skips (exit 77) without CUDA in the build, with BRAID_DEVICE=host, or
 * when no CUDA device is visible.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gpuranks.h"
#include "nccl.h"
#include "tdev.h"

#if BRAID_CUDA
#include <cuda_runtime.h>

#define WORDS 4099
#define REPLAYS 12

typedef struct {
  ncclComm_t comm;
  ncclWindow_t win;
  cudaStream_t s;
  uint32_t *win_buf, *src, *host;
} rank_res_t;

static uint32_t value(int rank, int round, int word) {
  return 0x9e3779b9u * (uint32_t)(rank + 1) + 0x85ebca6bu * (uint32_t)(round + 1) +
         (uint32_t)word * 2246822519u;
}

#define CU GPURANKS_CU
#define NC GPURANKS_NC

/* The source buffer holds this rank's values of `round`. */
static int upload(gpuranks_arg_t *a, rank_res_t *r, int round) {
  for (int w = 0; w < WORDS; w++) r->host[w] = value(a->rank, round, w);
  CU(a, cudaMemcpyAsync(r->src, r->host, WORDS * sizeof(uint32_t), cudaMemcpyHostToDevice,
                        r->s));
  CU(a, cudaStreamSynchronize(r->s));
  return 0;
}

/* One round's calls, enqueued on the rank's stream (or captured). */
static int enqueue_round(gpuranks_arg_t *a, rank_res_t *r) {
  int next = (a->rank + 1) % a->n, prev = (a->rank + a->n - 1) % a->n;
  NC(a, ncclPutSignal(r->src, WORDS, ncclUint32, next, r->win, 0, 1, 0, 0, r->comm, r->s));
  NC(a, ncclSignal(next, 2, 0, 0, r->comm, r->s));
  NC(a, ncclSignal(next, 2, 0, 0, r->comm, r->s));
  ncclWaitSignalDesc_t d[2] = {{1, prev, 1, 0}, {2, prev, 2, 0}};
  NC(a, ncclWaitSignal(2, d, r->comm, r->s));
  return 0;
}

/* After the round's calls on the stream: the window holds the previous
 * rank's values of `round`. */
static int check_round(gpuranks_arg_t *a, rank_res_t *r, int round, const char *how) {
  int prev = (a->rank + a->n - 1) % a->n;
  CU(a, cudaMemcpyAsync(r->host, r->win_buf, WORDS * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                        r->s));
  if (tdev_stream_sync(r->s, 120) != 0)
    return gpuranks_fail(a, "rank %d: %s round %d: %s (%s)", a->rank, how, round, tdev_last_error(),
                         ncclGetLastError(NULL));
  for (int w = 0; w < WORDS; w++)
    if (r->host[w] != value(prev, round, w))
      return gpuranks_fail(a, "rank %d: %s round %d: word %d of the window is %#x after the "
                           "wait, expected rank %d's %#x%s", a->rank, how, round, w, r->host[w],
                           prev, value(prev, round, w),
                           r->host[w] == value(prev, round - 1, w) ? " (the previous round's)"
                                                                   : "");
  ncclResult_t async = ncclSuccess;
  NC(a, ncclCommGetAsyncError(r->comm, &async));
  if (async != ncclSuccess)
    return gpuranks_fail(a, "rank %d: %s round %d: async error %s (%s)", a->rank, how, round,
                         ncclGetErrorString(async), ncclGetLastError(NULL));
  return 0;
}

static int setup(gpuranks_arg_t *a, rank_res_t *r) {
  size_t bytes = WORDS * sizeof(uint32_t);
  CU(a, cudaSetDevice(0));
  CU(a, cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
  CU(a, cudaMalloc((void **)&r->src, bytes));
  CU(a, cudaMallocHost((void **)&r->host, bytes));
  NC(a, ncclCommInitRank(&r->comm, a->n, a->id, a->rank));
  NC(a, ncclMemAlloc((void **)&r->win_buf, bytes));
  NC(a, ncclCommWindowRegister(r->comm, r->win_buf, bytes, &r->win, 0));
  return 0;
}

static int capture(gpuranks_arg_t *a, rank_res_t *r, cudaGraph_t *graph) {
  CU(a, cudaStreamBeginCapture(r->s, cudaStreamCaptureModeGlobal));
  int enq = enqueue_round(a, r);
  cudaError_t end = cudaStreamEndCapture(r->s, graph);
  if (enq) return -1;
  if (end != cudaSuccess)
    return gpuranks_fail(a, "rank %d: cudaStreamEndCapture failed: %s", a->rank,
                         cudaGetErrorString(end));
  return 0;
}

/* Meets the other ranks after a step every rank takes: 1 when the step
 * went well on every rank. A rank that failed still meets, so nobody waits
 * at a barrier the others will not reach. */
static int together(gpuranks_arg_t *a, int bad) { return gpuranks_meet(a) == 0 && !bad; }

static int launch(gpuranks_arg_t *a, rank_res_t *r, cudaGraphExec_t exec) {
  CU(a, cudaGraphLaunch(exec, r->s));
  return 0;
}

static int replay(gpuranks_arg_t *a, rank_res_t *r, cudaGraph_t graph, cudaGraphExec_t *exec) {
  cudaError_t e = cudaGraphInstantiate(exec, graph, 0);
  if (e != cudaSuccess)
    gpuranks_fail(a, "rank %d: cudaGraphInstantiate: %s", a->rank, cudaGetErrorString(e));
  if (!together(a, e != cudaSuccess)) return -1;
  for (int t = 1; t <= REPLAYS; t++) {
    /* Every rank's previous round is checked before anyone's source
     * changes or anyone puts again. */
    if (!together(a, upload(a, r, t))) return -1;
    if ((t + a->rank) % 2 == 1) {
      struct timespec ts = {0, 30 * 1000 * 1000L};
      nanosleep(&ts, NULL);
    }
    int bad = launch(a, r, *exec) || check_round(a, r, t, "replay");
    if (!together(a, bad)) return -1;
  }
  return 0;
}

static void *rank_main(void *p) {
  gpuranks_arg_t *a = p;
  rank_res_t r;
  memset(&r, 0, sizeof(r));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  /* Each step is taken by every rank or by none (together). */
  int ok = together(a, setup(a, &r) != 0);
  ok = ok && together(a, upload(a, &r, 0) != 0);
  ok = ok && together(a, enqueue_round(a, &r) != 0 || check_round(a, &r, 0, "direct") != 0);
  /* Captures start once every peer is done with unsafe calls (global
   * mode), and end before any replays. */
  ok = ok && together(a, capture(a, &r, &graph) != 0);
  ok = ok && replay(a, &r, graph, &exec) == 0;
  ok = ok && together(a, upload(a, &r, REPLAYS + 1) != 0);
  ok = ok && together(a, enqueue_round(a, &r) != 0 ||
                             check_round(a, &r, REPLAYS + 1, "direct after the replays") != 0);
  (void)ok;
  if (exec != NULL) (void)cudaGraphExecDestroy(exec);
  if (graph != NULL) (void)cudaGraphDestroy(graph);
  if (r.comm != NULL) {
    if (gpuranks_any_failed(a)) {
      (void)ncclCommAbort(r.comm);
    } else {
      /* Nobody deregisters while a peer may still put into its window. */
      (void)gpuranks_meet(a);
      if (r.win != NULL && ncclCommWindowDeregister(r.comm, r.win) != ncclSuccess)
        gpuranks_fail(a, "rank %d: ncclCommWindowDeregister: %s", a->rank, ncclGetLastError(NULL));
      if (ncclCommDestroy(r.comm) != ncclSuccess)
        gpuranks_fail(a, "rank %d: ncclCommDestroy: %s", a->rank, ncclGetLastError(NULL));
    }
  }
  if (r.win_buf != NULL) (void)ncclMemFree(r.win_buf);
  if (r.s != NULL) (void)cudaStreamDestroy(r.s);
  if (r.src != NULL) (void)cudaFree(r.src);
  if (r.host != NULL) (void)cudaFreeHost(r.host);
  return NULL;
}

static void run(int n) {
  char msg[512];
  if (gpuranks_run(n, rank_main, msg, sizeof(msg)) != 0) fail_msg("%d ranks: %s", n, msg);
  printf("  %d ranks: a direct round, %d replays of the captured round and a direct round "
         "after them, every window exact\n", n, REPLAYS);
}

static void test_rma_graph_2ranks(void **state) {
  (void)state;
  run(2);
}

static void test_rma_graph_3ranks(void **state) {
  (void)state;
  run(3);
}
#endif /* BRAID_CUDA */

int main(void) {
#if !BRAID_CUDA
  printf("SKIP: test_rma_graph: this build has no CUDA (CUDA=0)\n");
  return TDEV_EXIT_SKIP;
#else
  int skip = gpuranks_cuda_ready("test_rma_graph", "CUDA graphs");
  if (skip != 0) return skip;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rma_graph_2ranks),
      cmocka_unit_test(test_rma_graph_3ranks),
  };
  return cmocka_run_group_tests_name("one-sided calls in CUDA graphs", tests, NULL, NULL);
#endif
}
